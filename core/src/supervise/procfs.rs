//! What supervision reads from `/proc` and the signal helpers built on it.

use std::io;

/// The fields of `/proc/<pid>/stat` that supervision needs.
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
/// process later; see [`kill_orphan_group`](super::kill_orphan_group).
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

/// The pids listed in `/proc` (processes, not threads), in no particular order.
fn all_pids() -> io::Result<Vec<u32>> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        if let Some(pid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The pids of the live (not dead, see [`ProcStat::is_dead`]) processes in group `pgid`,
/// found by scanning `/proc`.
pub fn group_members(pgid: u32) -> io::Result<Vec<u32>> {
    let Ok(want) = i32::try_from(pgid) else {
        return Ok(Vec::new());
    };
    let mut members = Vec::new();
    for pid in all_pids()? {
        // A process may vanish between listing and reading: that is not an error.
        if let Some(stat) = read_proc_stat(pid) {
            if stat.pgrp == want && !stat.is_dead() {
                members.push(pid);
            }
        }
    }
    Ok(members)
}

/// The live descendants of `pid` (children, their children, …, found through the parent ids
/// in `/proc`) that left its process group `pgid` (a `setsid`, Node's `detached: true`), each
/// with its start time: a group kill misses them.
pub fn detached_descendants(pid: u32, pgid: u32) -> io::Result<Vec<(u32, u64)>> {
    let mut all = Vec::new();
    for p in all_pids()? {
        // A process may vanish between listing and reading: that is not an error.
        if let Some(stat) = read_proc_stat(p) {
            all.push((p, stat));
        }
    }
    let mut parents = vec![pid];
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::from([pid]);
    while let Some(parent) = parents.pop() {
        for (p, stat) in &all {
            if u32::try_from(stat.ppid).ok() == Some(parent) && seen.insert(*p) {
                parents.push(*p);
                if u32::try_from(stat.pgrp).ok() != Some(pgid) && !stat.is_dead() {
                    found.push((*p, stat.start_time));
                }
            }
        }
    }
    Ok(found)
}

/// The live processes (other than this one) with an environment entry (`KEY=value`, as in
/// `/proc/<pid>/environ`) for which `matches` holds, each with its `/proc/<pid>/stat`.
///
/// `/proc/<pid>/environ` is the environment the process was started with and is readable only
/// for processes of our own user, so another user's processes are never listed. Zombies have
/// an empty environment and are not listed either.
pub fn processes_with_env(matches: impl Fn(&[u8]) -> bool) -> io::Result<Vec<(u32, ProcStat)>> {
    let me = std::process::id();
    let mut found = Vec::new();
    for pid in all_pids()? {
        if pid == me {
            continue;
        }
        // A process may vanish (or not be ours) between listing and reading: skip it.
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ.split(|&b| b == 0).any(&matches) {
            continue;
        }
        if let Some(stat) = read_proc_stat(pid).filter(|s| !s.is_dead()) {
            found.push((pid, stat));
        }
    }
    Ok(found)
}

/// Whether process group `pgid` has a live member.
///
/// `killpg(pgid, 0)` answers "no" cheaply when the group is empty; when it answers "yes" the
/// group may hold only zombies (a supervised leader stays a zombie until its handle is dropped,
/// see [`Supervised`](super::Supervised)), so `/proc` is scanned for a member that still runs.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(group) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if group <= 1 {
        return false;
    }
    // SAFETY: killpg with signal 0 only checks for existence and permission; it has no memory
    // effects.
    let rc = unsafe { libc::killpg(group, 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match group_members(pgid) {
        Ok(members) => !members.is_empty(),
        // Without /proc we cannot tell zombies apart; trust killpg.
        Err(_) => true,
    }
}

/// Sends `signal` to every process in group `pgid`.
pub(crate) fn signal_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    let group = libc::pid_t::try_from(pgid)
        .ok()
        .filter(|&g| g > 1)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: killpg takes plain integers and has no memory effects; `group > 1` so this never
    // means "our own group" (0) or "every process" (-1 after negation).
    if unsafe { libc::killpg(group, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `signal` to process `pid` alone.
pub(crate) fn signal_process(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let target = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: kill takes plain integers and has no memory effects; `target > 1` so it names one
    // process, never a group or every process.
    if unsafe { libc::kill(target, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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
