//! The host's memory of detached runs' bridges and how it runs them; the decisions over them
//! are [`crate::bridges`]'s.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The command that runs Pi: `program ...prefix ...args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiCommand {
    pub program: PathBuf,
    /// Pi's CLI script when `program` is Node.
    pub prefix: Vec<String>,
    /// Where it was found, for messages (`PIW_PI=...`, the package's, `pi` on PATH).
    pub describe: String,
}

/// How the host runs bridges (`driver::bridge_launch::settings` reads them when it starts).
#[derive(Debug, Clone)]
pub struct BridgeSettings {
    /// The Pi to run, or why there is none.
    pub pi: Result<PiCommand, String>,
    /// The bridge extension (`<package>/extension/bridge.js`).
    pub extension: PathBuf,
    /// Node and `<package>/lib/bridge-preflight.js`, which check Pi before a detached start.
    pub preflight: Option<(PathBuf, PathBuf)>,
    /// The host's own choice (`PIW_DETACHED_PROVIDER`, `_MODEL`, `_PI_ARGS`), the last place
    /// [`crate::bridges::pi_model`] looks.
    pub provider: Option<String>,
    pub model: Option<String>,
    pub pi_args: Vec<String>,
    /// Pi's own default model (`defaultProvider` and `defaultModel` of the settings in Pi's
    /// agent directory, read when the host starts): what a bridge uses when nothing above
    /// names one, as `pi` started in the project would.
    pub pi_default: Option<PiDefault>,
    /// The installation (`PIW_HOME`): where the bridge locks live.
    pub home: PathBuf,
    pub handshake_timeout: Duration,
}

/// Pi's default model, from its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiDefault {
    pub provider: String,
    pub model: String,
}

/// Where a detached run's Pi model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// The workflow, the run's input or the host's settings named it.
    Named,
    /// Nothing did: Pi's own default.
    PiSettings,
}

/// The Pi model a detached run's bridge uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiModel {
    pub provider: String,
    pub model: String,
    pub pi_args: Vec<String>,
    pub source: ModelSource,
}

/// One bridge the host launched and has not seen exit.
#[derive(Debug, Clone)]
pub struct BridgeEntry {
    /// Host-unique, from the children's launch numbers.
    pub launch: u64,
    /// The step it serves now (the run's open one, updated as the run moves on).
    pub interaction_id: String,
    pub launched_at: i64,
    /// It took its run's lock.
    pub hello: bool,
    /// Why the host stopped it, once it did.
    pub stopping: Option<StopReason>,
}

/// Why the host stopped a bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// Its run has no open step any more: nothing is lost.
    StepClosed,
    /// It did not take its run within the handshake bound: the step fails.
    Handshake { after_ms: u64 },
}

/// The host's bridges: the settings, the live ones by run, and the steps whose bridge was lost
/// while a submission of theirs was being judged (failed if it is rejected).
#[derive(Debug, Default)]
pub struct Bridges {
    pub live: BTreeMap<String, BridgeEntry>,
    /// Interaction id -> why its bridge was lost.
    pub lost: BTreeMap<String, String>,
    /// The Pi model of each run with an open step ([`crate::bridges::pi_model`]; `None`: nothing names one,
    /// and its steps wait for a client), read once per run.
    pub models: BTreeMap<String, Option<PiModel>>,
    /// Nothing that could open or close a detached step happened since the last [`crate::bridges::reconcile`]
    /// (false at the host's start): the store thread's turns under load (steps and transitions
    /// of workflow children) skip its read.
    pub up_to_date: bool,
    /// When to look again at the steps whose failing did not commit (a full disk): their
    /// loss is kept in `lost`, and [`crate::bridges::reconcile`] tries again from then.
    pub retry_at: Option<i64>,
}
