//! The host's memory of its workflow children and how it runs them, and what it orders the
//! supervisor to do: launch a child (from a standby pool when there is one) or stop one, or
//! remove the child output of pruned runs. The orders wait in `HostState::child_commands`
//! until the store thread sends them on; the supervisor (`piw_host::driver::supervisor`)
//! carries them out. The decisions are [`crate::children`]'s.

use std::path::PathBuf;
use std::time::Duration;

use super::bridges::BridgeSettings;
use super::channels::ChannelSettings;
use crate::process::SpawnSpec;
use crate::store::{ChildMode, Resume};

/// A runtime: the command the host runs for workflow files with a given suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// File name suffix, e.g. `.workflow.json`.
    pub suffix: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Whether workers of this runtime may be started ahead of time and wait for their
    /// envelope on stdin ([`ChildConfig::standby_workers`]). The runtime must then take the
    /// workflow file from the envelope, not from its arguments, and move to the envelope's
    /// project directory itself.
    pub standby: bool,
}

/// How children are run.
#[derive(Debug, Clone)]
pub struct ChildConfig {
    pub runtimes: Vec<Runtime>,
    /// Most children alive at once; further ready runs wait in the queue.
    pub max_children: usize,
    /// A child must say `worker.hello` within this time or it is stopped.
    pub handshake_timeout: Duration,
    /// A child judging a submission (`validate` mode) must give its verdict within this time
    /// after its hello, or it is stopped and the submission rejected (`PIW_VALIDATION_TIMEOUT_MS`).
    pub validation_timeout: Duration,
    /// SIGTERM to SIGKILL grace when stopping a child's process group.
    pub kill_grace: Duration,
    pub cpu_seconds: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// How much lower than the host's a child's CPU priority is (`PIW_CHILD_NICE`, default 5):
    /// a node that spins cannot starve the host or the clients on a small machine.
    pub nice: i32,
    /// Pre-started workers kept waiting per runtime that allows it (`PIW_STANDBY_WORKERS`,
    /// default 2; 0 turns the pools off). A pool fills after its runtime's first launch, so a
    /// host that never runs such a workflow starts none.
    pub standby_workers: usize,
    /// How long the standby pools keep their workers without a launch of their runtime
    /// (`PIW_STANDBY_IDLE_MS`, default 10 minutes; 0: `Duration::MAX`, never): then the idle workers are stopped, and the
    /// next launch starts cold and refills the pool. An idle host holds no Node processes.
    pub standby_idle: Duration,
    /// Runtimes the host looked for and did not find (the Node worker runtime without Node
    /// 22.19 or its `worker.js`): their files are refused with the reason.
    pub missing_runtimes: Vec<MissingRuntime>,
    /// What of the host's environment a workflow's child gets ([`crate::children::workflow_env_of`]), taken
    /// when the host starts; empty by default.
    pub workflow_env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// Where each child's whole output is kept ([`crate::children::child_log_path`]); `None` keeps only the
    /// tails in the database. The installation's `logs` directory for a real host.
    pub output_logs: Option<PathBuf>,
    /// How detached runs' steps are served (`crate::bridges`); `None`: the host launches no
    /// bridges (`PIW_DETACHED_BRIDGES=off`, and in hosts built by hand, as in tests).
    pub bridges: Option<BridgeSettings>,
    /// How decision channels' adapters run (`crate::channels`); `None`: the host runs none
    /// (hosts built by hand, as in tests).
    pub channels: Option<ChannelSettings>,
    /// How controllers' pass children run (`crate::controllers`); `None`: the host runs no
    /// passes (hosts built by hand, as in tests).
    pub controllers: Option<super::controllers::PassSettings>,
}

/// A runtime that is not available: the suffixes it would serve, and what is missing.
#[derive(Debug, Clone)]
pub struct MissingRuntime {
    pub suffixes: Vec<String>,
    pub reason: String,
}

impl MissingRuntime {
    /// The reason `file` has no runtime, if it is one of these suffixes.
    pub fn reason_for<'a>(missing: &'a [MissingRuntime], file: &str) -> Option<&'a str> {
        missing
            .iter()
            .find(|m| m.suffixes.iter().any(|s| file.ends_with(s.as_str())))
            .map(|m| m.reason.as_str())
    }
}

impl Default for ChildConfig {
    fn default() -> Self {
        Self {
            runtimes: Vec::new(),
            max_children: 16,
            handshake_timeout: Duration::from_secs(10),
            validation_timeout: Duration::from_secs(60),
            output_logs: None,
            kill_grace: Duration::from_secs(2),
            cpu_seconds: None,
            memory_bytes: None,
            nice: 5,
            standby_workers: 2,
            standby_idle: Duration::from_secs(600),
            missing_runtimes: Vec::new(),
            workflow_env: Vec::new(),
            bridges: None,
            channels: None,
            controllers: None,
        }
    }
}

/// One launched child, by run id.
#[derive(Debug)]
pub struct ChildEntry {
    pub generation: u64,
    pub child_epoch: i64,
    /// The launch's host-unique number (see [`HostState::abandoned_launches`]).
    pub launch: u64,
    pub token_hash: String,
    pub hello: bool,
    pub launched_at: i64,
    /// Since when a validate-mode child has been judging its submission (from its hello until
    /// its verdict); the validation deadline runs from here.
    pub judging_since: Option<i64>,
    /// Set once the host decided the child must go (deadline, cancel, handshake timeout).
    pub stopping: bool,
    /// When the run stopped needing this child (it parked, waited or ended). A child exits by
    /// itself at such a boundary; one still alive after the kill grace is stopped.
    pub released_at: Option<i64>,
    /// Where the child picks up, as the activation decided.
    pub mode: ChildMode,
    pub resume: Resume,
    /// The child was a standby worker (started before its run was known).
    pub from_standby: bool,
    /// Why the host stopped it, when a deadline of the host's did (the loss reason names it:
    /// "validation timed out after N ms" rather than just the signal that ended the child).
    pub stop_reason: Option<String>,
    /// When the child's connection to the host closed while its run still needed it; a child
    /// still alive a kill grace later is stopped (and its exit is a loss).
    pub disconnected_at: Option<i64>,
    /// Its process id, once the supervisor reported it started.
    pub pid: Option<u32>,
}

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
    /// Start a controller's pass child for resource `resource_uid` (`crate::controllers`);
    /// its envelope (with the pass's token) is the spec's stdin.
    LaunchPass {
        resource_uid: String,
        launch: u64,
        spec: SpawnSpec,
    },
    /// Stop the pass child of launch `launch`: SIGTERM to its group, SIGKILL after `grace`.
    StopPass { launch: u64, grace: Duration },
}
