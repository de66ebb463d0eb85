//! What detached runs' bridges ([`bridges`](super::bridges)) and decision channels' adapters
//! ([`channels`](super::channels)) share: helper processes the host keeps at most one of per
//! key (a run, a channel), launched and stopped by comparing what is wanted with what is alive
//! ([`plan`]), each started from the host's child settings ([`spawn_spec`]). Each module keeps
//! what is its own: when a helper is wanted, when it must stop, what a launch records.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use crate::process::{ChildLimits, OutputLog, SpawnSpec, CHILD_LOG_BYTES};
use crate::state::HostState;

/// The orders for helpers kept one per key, stops first: each live helper the host is not
/// already stopping (`is_stopping`) gets what `check_live` orders for it (a stop, or nothing),
/// then each wanted key without a live helper what `check_wanted` orders (a launch, a failure,
/// or nothing yet). Each pass goes in the order it is given.
pub fn plan<'a, E, W, O>(
    live: &'a BTreeMap<String, E>,
    is_stopping: impl Fn(&E) -> bool,
    mut check_live: impl FnMut(&'a str, &'a E) -> Option<O>,
    wanted: impl IntoIterator<Item = (&'a str, W)>,
    mut check_wanted: impl FnMut(&'a str, W) -> Option<O>,
) -> Vec<O> {
    let mut orders: Vec<O> = live
        .iter()
        .filter(|(_, entry)| !is_stopping(entry))
        .filter_map(|(key, entry)| check_live(key, entry))
        .collect();
    orders.extend(
        wanted
            .into_iter()
            .filter(|(key, _)| !live.contains_key(*key))
            .filter_map(|(key, want)| check_wanted(key, want)),
    );
    orders
}

/// What a helper runs: `program args` in `cwd`, with `env` added to what every child gets.
pub struct HelperCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
}

/// A helper's spawn: `command` with nothing for its stdin, the host's memory bound, nice and supervision scope, at most `cpu_seconds` of CPU, the
/// last `tail_bytes` of its output kept for its exit, and the whole of it in `log` (capped as a
/// child's) when there is one.
pub fn spawn_spec(
    state: &HostState,
    command: HelperCommand,
    cpu_seconds: Option<u64>,
    tail_bytes: usize,
    log: Option<PathBuf>,
) -> SpawnSpec {
    let cfg = &state.child_config;
    SpawnSpec {
        program: command.program,
        args: command.args.into_iter().map(Into::into).collect(),
        env: command.env,
        cwd: command.cwd,
        stdin_payload: Vec::new(),
        limits: ChildLimits {
            cpu_seconds,
            memory_bytes: cfg.memory_bytes,
        },
        nice: cfg.nice,
        tail_bytes,
        scope: state.supervision_scope.clone(),
        output_log: log.map(|path| {
            Box::new(OutputLog {
                path,
                cap_bytes: CHILD_LOG_BYTES,
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_come_first_and_a_live_or_stopping_key_is_never_launched_again() {
        // key -> stopping
        let live: BTreeMap<String, bool> = [("a".into(), false), ("b".into(), true)].into();
        let wanted = [("a", 1), ("b", 2), ("c", 3), ("d", 4)];
        let orders = plan(
            &live,
            |stopping| *stopping,
            |key, _| Some(format!("stop {key}")),
            wanted,
            |key, n| (n != 4).then(|| format!("launch {key}")),
        );
        assert_eq!(orders, ["stop a", "launch c"]);
    }
}
