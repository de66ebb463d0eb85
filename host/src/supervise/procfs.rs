//! The signal helpers supervision builds on `/proc`: process groups, detached descendants,
//! processes by environment. The plain readers (`/proc/<pid>/stat`, `/proc/locks`) are the
//! client's ([`piw_client::procfs`]), re-exported here.

use std::io;

pub use piw_client::procfs::{
    flock_held, flock_holders, parse_proc_stat, process_alive, process_start_time, read_proc_stat,
    ProcStat,
};

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
