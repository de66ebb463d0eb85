//! The host's memory of controllers' pass children and how it runs them; the decisions over
//! them are [`crate::controllers`]'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The most passes running at once, of all controllers (`PIW_MAX_PASSES`).
pub const DEFAULT_MAX_PASSES: usize = 4;
/// The most passes of one controller running at once (`PIW_MAX_PASSES_PER_CONTROLLER`).
pub const DEFAULT_MAX_PASSES_PER_CONTROLLER: usize = 2;

/// How the host runs pass children (`driver::pass_launch::settings`, read when it starts).
#[derive(Debug, Clone)]
pub struct PassSettings {
    /// The Node that runs a pass and the package's `lib` directory (its entry is
    /// `lib/controllers/child.js`), or why there is none.
    pub runtime: Result<(PathBuf, PathBuf), String>,
    /// The environment a pass child gets (the user's, `PIW_HOME`).
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// Where each pass's output is kept (`logs/passes/<resource uid>.log`); `None`: nowhere.
    pub logs: Option<PathBuf>,
    /// The most passes at once.
    pub max_passes: usize,
    /// The most passes of one controller at once.
    pub max_per_controller: usize,
}

/// One pass child the host launched and has not seen exit, by resource uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassEntry {
    /// Host-unique, from the children's launch numbers.
    pub launch: u64,
    pub pass_id: String,
    /// `project_dir` and name of its controller: its share of the limit.
    pub controller: (String, String),
    /// When it is killed if it has not finished.
    pub deadline_at: i64,
    /// The host ordered it to stop.
    pub stopping: bool,
}

/// The host's controllers' passes.
#[derive(Debug, Default)]
pub struct Controllers {
    /// Pass children alive, by resource uid.
    pub live: BTreeMap<String, PassEntry>,
    /// Whether the queue was read since anything that may change it (a controller command,
    /// a pass's end, a time it named).
    pub up_to_date: bool,
    /// When the queue next has a pass due (or a running one's deadline), as last read.
    pub next_at: Option<i64>,
    /// How many passes this host launched.
    pub launches: u64,
}
