//! The launch envelope: what the host gives a child, once, on its stdin (the engine builds it,
//! `piw_host::worker` reads it). Its `Debug` never shows the child's token.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The launch envelope's schema tag.
pub const LAUNCH_SCHEMA: &str = "piw.launch.v1";

/// One mounted source: where it is and the hash it had when the run first loaded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountedSource {
    /// The source file.
    pub path: String,
    /// Its SHA-256 (hex) when the run first loaded it.
    pub hash: String,
}

/// What the host gives a child, once, on its stdin.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchEnvelope {
    /// [`LAUNCH_SCHEMA`].
    pub schema: String,
    /// The run the child serves, and only it.
    pub run_id: String,
    /// The claim generation the child works under: a message of another one is refused.
    pub generation: u64,
    /// One-time secret for `worker.hello`. Never log it.
    pub child_token: String,
    /// `run` or `validate`.
    pub mode: String,
    /// The workflow file (root source identity).
    pub source_root: String,
    /// SHA-256 hex of the root source when the run started.
    pub source_hash: String,
    /// Mount name to source, as saved at the first activation (empty before it).
    pub mounted_sources: BTreeMap<String, MountedSource>,
    /// The run's project directory (absolute), the child's working directory.
    pub project_dir: String,
    /// SHA-256 of the run's canonical input.
    pub input_hash: String,
    /// The host's socket.
    pub socket_path: PathBuf,
}

impl std::fmt::Debug for LaunchEnvelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchEnvelope")
            .field("run_id", &self.run_id)
            .field("generation", &self.generation)
            .field("child_token", &"<redacted>")
            .field("mode", &self.mode)
            .field("source_root", &self.source_root)
            .field("mounted_sources", &self.mounted_sources)
            .finish()
    }
}
