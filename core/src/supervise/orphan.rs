//! Startup cleanup: killing the process groups of children that a previous host left behind.

use std::time::{Duration, Instant};

use super::procfs::{group_alive, read_proc_stat, signal_group, signal_process};
use super::KILL_SETTLE;

/// What [`kill_orphan_group`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanOutcome {
    /// No such process any more (or only its corpse, with nothing alive in its group): nothing
    /// was signalled.
    Gone,
    /// The recorded process was still there; its group was sent SIGTERM and, if anything in it
    /// outlived the grace, SIGKILL.
    Killed,
    /// A process with that pid exists but started at another time: the pid was reused by an
    /// unrelated process, which was left alone.
    PidReused,
    /// The recorded process exists but we may not signal it (it belongs to another user).
    NotPermitted,
}

/// Kills the process group of a child recorded by an earlier host, if that child still exists.
///
/// `pid` was the child's pid **and** group id (children are spawned as group leaders) and
/// `expected_start_time` its [`process_start_time`](super::process_start_time) when it was
/// recorded. Only when `/proc/<pid>` exists with exactly that start time is the group sent
/// SIGTERM; after `grace`, SIGKILL goes to whatever in it still runs. A pid now used by another
/// process is never signalled.
///
/// Blocking (it sleeps while waiting); call it from host startup or `spawn_blocking`. One
/// narrow race remains, as with any pid-based kill: the process could die and its pid be
/// reused as a new group id between the start-time check and the signal.
pub fn kill_orphan_group(pid: u32, expected_start_time: u64, grace: Duration) -> OrphanOutcome {
    let Some(stat) = read_proc_stat(pid) else {
        return OrphanOutcome::Gone;
    };
    if stat.start_time != expected_start_time {
        return OrphanOutcome::PidReused;
    }
    let alive = || {
        group_alive(pid)
            || read_proc_stat(pid)
                .is_some_and(|s| s.start_time == expected_start_time && !s.is_dead())
    };
    if !alive() {
        return OrphanOutcome::Gone;
    }
    let moved_out = u32::try_from(stat.pgrp).ok() != Some(pid);
    if let Err(e) = signal_group(pid, libc::SIGTERM) {
        if e.raw_os_error() == Some(libc::EPERM) {
            return OrphanOutcome::NotPermitted;
        }
    }
    if moved_out {
        // The leader left its group; it still belongs to the run, so signal it directly too.
        let _ = signal_process(pid, libc::SIGTERM);
    }
    if wait_until_gone(&alive, grace) {
        return OrphanOutcome::Killed;
    }
    let _ = signal_group(pid, libc::SIGKILL);
    if moved_out
        && read_proc_stat(pid).is_some_and(|s| s.start_time == expected_start_time && !s.is_dead())
    {
        let _ = signal_process(pid, libc::SIGKILL);
    }
    if !wait_until_gone(&alive, KILL_SETTLE) {
        tracing::warn!(pid, "orphaned child group still alive after SIGKILL");
    }
    OrphanOutcome::Killed
}

/// Polls `alive` until it says no or `within` passes; true when it said no.
fn wait_until_gone(alive: &dyn Fn() -> bool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(2);
    loop {
        if !alive() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}
