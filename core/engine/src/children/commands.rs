//! What the deciding code orders the supervisor to do: launch a child (from a standby pool
//! when there is one) or stop one, or remove the child output of pruned runs. The orders wait in `HostState::child_commands` until the
//! store thread sends them on; the supervisor (`piw_core::driver::supervisor`) carries them out.

use std::time::Duration;

use crate::process::SpawnSpec;

/// Pre-started workers for one runtime.
#[derive(Debug, Clone)]
pub struct StandbyPool {
    /// Identifies the pool (the runtime's command line); launches with the same key share it.
    pub key: String,
    /// How many workers to keep waiting.
    pub size: usize,
    /// How to start one: the runtime's command without a workflow file, in a neutral
    /// directory (the worker moves to the run's project directory when it gets its envelope).
    pub template: SpawnSpec,
}

/// What the store thread asks of the supervisor. One message per launch or stop: a `Launch`
/// carries its spec inline, as large as it is.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum SupervisorCmd {
    Launch {
        run_id: String,
        generation: u64,
        child_epoch: i64,
        /// This launch's host-unique number, echoed in every report about its child.
        launch: u64,
        spec: SpawnSpec,
        /// Take a pre-started worker from this pool when one is waiting.
        standby: Option<Box<StandbyPool>>,
    },
    Stop {
        run_id: String,
        generation: u64,
        grace: Duration,
    },
    /// Remove these directories of child output (`logs/<run_id>`: runs a prune removed),
    /// away from the store thread.
    RemoveLogs { dirs: Vec<std::path::PathBuf> },
    /// Start a detached run's bridge (`crate::bridges`): its stdin stays open and
    /// empty for its life; it has shaken hands once `lock_file` holds its pid.
    LaunchBridge {
        run_id: String,
        launch: u64,
        spec: SpawnSpec,
        lock_file: std::path::PathBuf,
    },
    /// Stop the bridge of launch `launch`: SIGTERM to its group, SIGKILL after `grace`.
    StopBridge { launch: u64, grace: Duration },
    /// Start a decision channel's adapter (`crate::channels`).
    LaunchChannel {
        name: String,
        launch: u64,
        spec: SpawnSpec,
    },
    /// Stop the adapter of launch `launch`: SIGTERM to its group, SIGKILL after `grace`.
    StopChannel { launch: u64, grace: Duration },
}
