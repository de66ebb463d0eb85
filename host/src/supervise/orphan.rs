//! Startup cleanup: killing the process groups of children that a previous host left behind.

use std::time::{Duration, Instant};

use super::procfs::{
    group_alive, processes_with_env, read_proc_stat, signal_group, signal_process,
};
use super::{KILL_SETTLE, MARKER_VAR};

/// What [`kill_orphan_groups`] found and did to one recorded child.
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

/// A child an earlier host recorded: its pid (which was also its group id, as children are
/// spawned as group leaders) and its [`process_start_time`](super::process_start_time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedProcess {
    /// The pid, and the id of the group the child led.
    pub pid: u32,
    /// When that process started, in clock ticks since boot: tells it from a reused pid.
    pub start_time: u64,
}

/// Kills the process group of a child recorded by an earlier host, if that child still exists.
/// The batch of one of [`kill_orphan_groups`], which says what it does.
pub fn kill_orphan_group(pid: u32, expected_start_time: u64, grace: Duration) -> OrphanOutcome {
    let recorded = RecordedProcess {
        pid,
        start_time: expected_start_time,
    };
    kill_orphan_groups(&[recorded], grace)
        .pop()
        .unwrap_or(OrphanOutcome::Gone)
}

/// Kills the process groups of children recorded by an earlier host, those that still exist,
/// and returns one outcome per entry of `recorded`, in order.
///
/// Only when `/proc/<pid>` exists with exactly the recorded start time is the group sent
/// SIGTERM; after `grace`, SIGKILL goes to whatever in it still runs. A pid now used by another
/// process is never signalled.
///
/// Every group gets its SIGTERM first and then all of them share one grace, so a host that
/// died with many runs active starts again within `grace` plus a settle, however many of those
/// children ignore SIGTERM. (One grace per child, in turn, kept a restarted host from
/// answering for minutes, longer than any client waits for it to be ready.)
///
/// Blocking (it sleeps while waiting); call it from host startup or `spawn_blocking`. One
/// narrow race remains, as with any pid-based kill: a process could die and its pid be reused
/// as a new group id between the start-time check and the signal.
pub fn kill_orphan_groups(recorded: &[RecordedProcess], grace: Duration) -> Vec<OrphanOutcome> {
    let mut outcomes = Vec::with_capacity(recorded.len());
    let mut signalled = Vec::new();
    for &process in recorded {
        let outcome = terminate_recorded(process);
        if outcome == OrphanOutcome::Killed {
            signalled.push(process);
        }
        outcomes.push(outcome);
    }
    let all_gone = |group: &[RecordedProcess]| group.iter().all(|&p| !still_running(p));
    if wait_until(&|| all_gone(&signalled), grace) {
        return outcomes;
    }
    for &process in &signalled {
        if still_running(process) {
            let _ = signal_group(process.pid, libc::SIGKILL);
            if left_its_group(process) {
                let _ = signal_process(process.pid, libc::SIGKILL);
            }
        }
    }
    if !wait_until(&|| all_gone(&signalled), KILL_SETTLE) {
        let alive: Vec<u32> = signalled
            .iter()
            .filter(|&&p| still_running(p))
            .map(|p| p.pid)
            .collect();
        tracing::warn!(?alive, "orphaned child groups still alive after SIGKILL");
    }
    outcomes
}

/// Stops every process that still carries a [`MARKER_VAR`] entry of `scope` (children of an
/// installation and their descendants, whatever group or parent they have now), except this
/// process and its ancestors: SIGTERM, then SIGKILL after `grace` to those still running (same
/// start time). Returns how many were signalled.
///
/// For a host's start-up and `piw state reset`, which hold the installation's lock: no host of
/// that installation runs, so every marked process is a leftover of an earlier one. The
/// recorded children are stopped by [`kill_orphan_groups`]; this finds what left their groups
/// and lost its parent chain (a double fork), which nothing recorded leads to.
pub fn kill_marked_leftovers(scope: &str, grace: Duration) -> usize {
    let prefix = format!("{MARKER_VAR}={scope}/").into_bytes();
    let ancestors = own_ancestors();
    let Ok(found) = processes_with_env(|entry| entry.starts_with(&prefix)) else {
        return 0;
    };
    let leftovers: Vec<(u32, u64)> = found
        .into_iter()
        .filter(|(pid, _)| !ancestors.contains(pid))
        .map(|(pid, stat)| (pid, stat.start_time))
        .collect();
    if leftovers.is_empty() {
        return 0;
    }
    tracing::info!(
        count = leftovers.len(),
        "stopping processes an earlier host's children left"
    );
    for &(pid, _) in &leftovers {
        let _ = signal_process(pid, libc::SIGTERM);
    }
    let same = |&(pid, start): &(u32, u64)| {
        read_proc_stat(pid).is_some_and(|s| s.start_time == start && !s.is_dead())
    };
    if !wait_until(&|| !leftovers.iter().any(same), grace) {
        for left in leftovers.iter().filter(|p| same(p)) {
            let _ = signal_process(left.0, libc::SIGKILL);
        }
    }
    leftovers.len()
}

/// This process's ancestors (not this process: [`processes_with_env`] skips it), up to init.
fn own_ancestors() -> Vec<u32> {
    let mut chain = Vec::new();
    let mut pid = std::process::id();
    while let Some(stat) = read_proc_stat(pid) {
        let Ok(parent) = u32::try_from(stat.ppid) else {
            break;
        };
        if parent <= 1 || chain.contains(&parent) {
            break;
        }
        chain.push(parent);
        pid = parent;
    }
    chain
}

/// Checks one recorded child and, when it is still the same process and anything in its group
/// runs, sends the group (and a leader that left it) SIGTERM.
fn terminate_recorded(process: RecordedProcess) -> OrphanOutcome {
    let Some(stat) = read_proc_stat(process.pid) else {
        return OrphanOutcome::Gone;
    };
    if stat.start_time != process.start_time {
        return OrphanOutcome::PidReused;
    }
    if !still_running(process) {
        return OrphanOutcome::Gone;
    }
    if let Err(e) = signal_group(process.pid, libc::SIGTERM) {
        if e.raw_os_error() == Some(libc::EPERM) {
            return OrphanOutcome::NotPermitted;
        }
    }
    if left_its_group(process) {
        // The leader left its group; it still belongs to the run, so signal it directly too.
        let _ = signal_process(process.pid, libc::SIGTERM);
    }
    OrphanOutcome::Killed
}

/// Whether anything of a recorded child still runs: a member of its group, or the recorded
/// process itself (which may have moved to another group).
fn still_running(process: RecordedProcess) -> bool {
    group_alive(process.pid) || leader_running(process)
}

/// Whether the recorded process itself still runs (not a zombie, not a reused pid).
fn leader_running(process: RecordedProcess) -> bool {
    read_proc_stat(process.pid).is_some_and(|s| s.start_time == process.start_time && !s.is_dead())
}

/// Whether the recorded process still runs in a group other than its own.
fn left_its_group(process: RecordedProcess) -> bool {
    read_proc_stat(process.pid).is_some_and(|s| {
        s.start_time == process.start_time
            && !s.is_dead()
            && u32::try_from(s.pgrp).ok() != Some(process.pid)
    })
}

/// Polls `done` until it says yes or `within` passes; true when it said yes.
fn wait_until(done: &dyn Fn() -> bool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(2);
    loop {
        if done() {
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
