//! The host's memory of decision channels' adapters and how it runs them; the decisions over
//! them are [`crate::channels`]'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// A configured channel, as the host knows it: never its credentials (the adapter reads
/// them itself from its file under `PIW_HOME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    /// The channel's name (`piw channel add ... --name`).
    pub name: String,
    /// Its kind (`telegram`): which adapter runs it.
    pub kind: String,
    /// A digest of its configuration (token included): a changed one restarts the adapter.
    pub digest: String,
}

/// How the host runs adapters (`driver::channel_launch::settings`, read when it starts).
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    /// The Node that runs the adapters and the package's `lib` directory they live in, or why
    /// there is none.
    pub runtime: Result<(PathBuf, PathBuf), String>,
    /// The installation (`PIW_HOME`): where the channels' files are.
    pub home: PathBuf,
    /// The environment an adapter gets (the user's, `PIW_HOME`, `PIW_TELEGRAM_API`).
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// Where each adapter's output is kept (`logs/channels/<name>.log`); `None`: nowhere.
    pub logs: Option<PathBuf>,
}

/// One adapter the host launched and has not seen exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterEntry {
    /// Host-unique, from the children's launch numbers.
    pub launch: u64,
    /// The configuration it was started with.
    pub digest: String,
    pub launched_at: i64,
    /// The host ordered it to stop.
    pub stopping: bool,
}

/// When an adapter runs again after exits the host did not order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart {
    /// Exits in a row.
    pub failures: u32,
    /// Not before this time.
    pub at: i64,
}

/// The host's channels: the configured ones, the adapters alive, the restart pauses.
#[derive(Debug, Default)]
pub struct Channels {
    pub configured: BTreeMap<String, ChannelSpec>,
    pub live: BTreeMap<String, AdapterEntry>,
    pub restarts: BTreeMap<String, Restart>,
    /// How many times each channel's adapter was started by this host (`host.status`).
    pub launches: BTreeMap<String, u64>,
}
