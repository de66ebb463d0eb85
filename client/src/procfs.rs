//! What piw reads from `/proc` without acting on it: a process's state and start time, and who
//! holds an `flock`. The client needs them to tell whether a host holds an installation
//! ([`crate::lock::installation_held`]); the host's supervision builds its signals on them.

/// The fields of `/proc/<pid>/stat` that piw needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: the state letter (`R`, `S`, `D`, `T`, `Z`, ...).
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: i32,
    /// Field 5: the process group id.
    pub pgrp: i32,
    /// Field 22: the start time in clock ticks since boot. Together with the pid it names one
    /// process for the life of the machine: a reused pid gets a different start time.
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process has finished (a zombie waiting to be reaped, or being torn down).
    /// A dead process runs no code and holds nothing but its pid.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the contents of `/proc/<pid>/stat`.
///
/// The second field (`comm`, in parentheses) is chosen by the process and may contain spaces,
/// parentheses and bytes that are not UTF-8, so the fixed fields are taken from the text after
/// the **last** `)`. Returns `None` for anything that does not have that shape.
pub fn parse_proc_stat(raw: &[u8]) -> Option<ProcStat> {
    let open = raw.iter().position(|&b| b == b'(')?;
    let close = raw.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let rest = std::str::from_utf8(&raw[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let mut state_chars = fields.next()?.chars();
    let state = state_chars.next()?;
    if state_chars.next().is_some() {
        return None;
    }
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // After pgrp (field 5) comes field 6; field 22 is 16 further on.
    let start_time = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        state,
        ppid,
        pgrp,
        start_time,
    })
}

/// Reads and parses `/proc/<pid>/stat`; `None` when the process does not exist (or the file
/// cannot be read or parsed).
pub fn read_proc_stat(pid: u32) -> Option<ProcStat> {
    if pid == 0 {
        return None;
    }
    let raw = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat(&raw)
}

/// The start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`) of process `pid`,
/// or `None` when no such process exists. Record it next to the pid to recognise the same
/// process later (the host's supervision does, to kill only the process it started).
pub fn process_start_time(pid: u32) -> Option<u64> {
    read_proc_stat(pid).map(|s| s.start_time)
}

/// Whether some process holds an `flock` on the file at `path`, read from the kernel's lock
/// table (`/proc/locks`) without touching the lock. `None` when the file or the table cannot
/// be read.
pub fn flock_held(path: &std::path::Path) -> Option<bool> {
    flock_holders(path).map(|pids| !pids.is_empty())
}

/// The processes holding an `flock` on the file (or directory) at `path`, from `/proc/locks`.
/// `None` when the file or the table cannot be read.
pub fn flock_holders(path: &std::path::Path) -> Option<Vec<u32>> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let file = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    Some(
        table
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&file.as_str()))
                    .then(|| fields.get(4)?.parse().ok())
                    .flatten()
            })
            .collect(),
    )
}

/// Whether process `pid` exists and has not ended (a zombie has ended).
pub fn process_alive(pid: u32) -> bool {
    read_proc_stat(pid).is_some_and(|s| !s.is_dead())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(comm: &str, state: char, pgrp: i32, start: u64) -> Vec<u8> {
        format!(
            "4242 ({comm}) {state} 1 {pgrp} 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 {start} \
             1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
        .into_bytes()
    }

    #[test]
    fn parses_a_plain_line() {
        let s = parse_proc_stat(&line("sleep", 'S', 4242, 337420)).expect("parses");
        assert_eq!(
            s,
            ProcStat {
                state: 'S',
                ppid: 1,
                pgrp: 4242,
                start_time: 337420
            }
        );
        assert!(!s.is_dead());
    }

    #[test]
    fn a_comm_with_spaces_and_parentheses_does_not_shift_fields() {
        for comm in ["a) (b", ") (", "x) R 1 2 3 (y", "((", "))", "", "two words"] {
            let s = parse_proc_stat(&line(comm, 'R', 7, 99)).expect(comm);
            assert_eq!(
                (s.state, s.pgrp, s.start_time),
                ('R', 7, 99),
                "comm {comm:?}"
            );
        }
    }

    #[test]
    fn a_comm_that_is_not_utf8_is_fine() {
        let mut raw = b"12 (\xff\xfe) ".to_vec();
        raw.extend_from_slice(b"Z 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0");
        let s = parse_proc_stat(&raw).expect("parses");
        assert_eq!(s.start_time, 555);
        assert!(s.is_dead());
    }

    #[test]
    fn malformed_lines_are_rejected() {
        assert_eq!(parse_proc_stat(b""), None);
        assert_eq!(parse_proc_stat(b"12 sleep S 1 2"), None);
        assert_eq!(parse_proc_stat(b"12 )sleep( S 1 2 3"), None);
        assert_eq!(parse_proc_stat(b"12 (sleep) S 1 2 3 4"), None, "too short");
        assert_eq!(
            parse_proc_stat(b"12 (sleep) SS 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 9"),
            None,
            "state must be one letter"
        );
        assert_eq!(
            parse_proc_stat(b"12 (sleep) S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 -9"),
            None,
            "start time is unsigned"
        );
    }

    #[test]
    fn reads_our_own_stat() {
        let me = std::process::id();
        let s = read_proc_stat(me).expect("own stat");
        assert!(!s.is_dead());
        assert_eq!(process_start_time(me), Some(s.start_time));
        assert_eq!(process_start_time(0), None);
    }
}
