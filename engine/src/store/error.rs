//! Typed store errors: what the store refuses (the engine decides on these) and how it fails
//! (the database or the disk; opaque to the engine, retried or reported). None of them carries
//! a claim token or a token hash.

use std::path::PathBuf;

use super::model::{ClaimLostReason, Op, RunStatus};

/// Everything a store operation can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A fenced write was refused. Nothing was written, not even a failure event.
    #[error("claim lost for run {run_id}: {reason}")]
    ClaimLost {
        run_id: String,
        reason: ClaimLostReason,
    },

    /// The database at `path` is not a piw state database of this version.
    /// `instruction` says how to start over and keep the file (the store words it).
    #[error("refusing to open {path}: {detail}. {instruction}")]
    IncompatibleDatabase {
        path: PathBuf,
        detail: String,
        instruction: String,
    },

    /// A file SQLite would open beside the database (`-wal`, `-shm`) is not one it could
    /// have made: SQLite would follow the link, block on the FIFO or share the log with
    /// another name, and report an intact database as malformed or fail with a disk I/O error.
    /// Refused before SQLite opens anything; nothing is changed.
    #[error("refusing to open the database {}: {} {problem}; piw opens its database only beside files SQLite made there. Nothing was opened or changed: with no piw host running, move {} aside and try again", .db.display(), .path.display(), .path.display())]
    UnsafeFile {
        /// The database the file belongs to.
        db: PathBuf,
        /// The file that is not what SQLite would have made.
        path: PathBuf,
        problem: FileProblem,
    },

    #[error("run {0} not found")]
    RunNotFound(String),

    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },

    /// The run is not in a state that allows the operation.
    #[error("cannot {op} run {run_id}: {detail}", op = op.as_str())]
    InvalidTransition {
        run_id: String,
        op: Op,
        status: RunStatus,
        detail: String,
    },

    /// The caller acted on an older view of the run.
    #[error("stale revision for run {run_id}: expected {expected}, current {actual}")]
    StaleRevision {
        run_id: String,
        expected: u64,
        actual: u64,
    },

    /// The caller named an attempt that is not the run's current open attempt.
    #[error("stale attempt for run {run_id}: {presented} is not the current attempt ({current})")]
    StaleAttempt {
        run_id: String,
        presented: String,
        current: String,
    },

    /// An answer or a submission arrived after its request's deadline (the node's
    /// `timeout_ms`): the attempt times out instead.
    #[error(
        "the request of attempt {attempt_id} (run {run_id}) passed its deadline at {deadline_at}"
    )]
    DeadlinePassed {
        run_id: String,
        attempt_id: String,
        deadline_at: i64,
    },

    /// Opening one more attempt would take the run (or one invocation of an included
    /// workflow) past its graph's step limit (`maxSteps`). Nothing was written; the caller
    /// fails the run with `detail`.
    #[error("run {run_id}: {detail}")]
    StepLimitReached { run_id: String, detail: String },

    /// The same idempotency key (or request id) arrived with a different request.
    #[error("idempotency conflict: key {key} was used for a different request")]
    IdempotencyConflict { key: String },

    /// The same effect key arrived with a different request fingerprint.
    #[error(
        "effect conflict on run {run_id}: key {effect_key} was reserved with another fingerprint"
    )]
    EffectConflict { run_id: String, effect_key: String },

    /// The effect may have happened; it is never retried automatically.
    #[error("effect {effect_key} of run {run_id} is uncertain and needs manual review")]
    EffectUncertain { run_id: String, effect_key: String },

    /// The caller may not take this path (for example the model answering a protected human
    /// decision).
    #[error("forbidden: {0}")]
    Forbidden(String),

    /// An answer to a human decision does not fit the choices its request offers; `rule` is
    /// the allowed choices and text bounds as data (see `check_human_answer`).
    #[error("invalid answer to decision {decision_id}: {detail}")]
    InvalidAnswer {
        decision_id: String,
        detail: String,
        rule: serde_json::Value,
    },

    /// A value did not fit its declared limits or shape.
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// A test-only fault hook aborted the transaction before commit.
    #[error("injected fault before commit of {0}")]
    InjectedFault(String),

    /// SQLite rolled the open transaction back by itself (after a full disk or an I/O error):
    /// nothing of it may be committed or acknowledged.
    #[error("the transaction was rolled back by the database (disk full or i/o error)")]
    TransactionLost,

    /// The disk holding the database is full (SQLite's `SQLITE_FULL`): nothing of the
    /// transaction was stored. The same write succeeds once there is space again.
    #[error("the disk holding {} is full: nothing of this was stored; free some space and try again", .path.display())]
    DiskFull { path: PathBuf },

    /// The database failed (SQLite's error, said as text: the engine knows no SQL).
    #[error("database error: {0}")]
    Database(#[from] DatabaseError),

    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("corrupt stored JSON: {0}")]
    Json(#[from] serde_json::Error),

    /// A stored value is outside the schema's vocabulary (hand-edited database).
    #[error("corrupt row: {0}")]
    CorruptRow(String),

    /// A refusal of controllers' resources, effects, workflow requests or passes.
    #[error(transparent)]
    Controller(#[from] super::controllers::ControllerStoreError),
}

/// What is wrong with a file piw would hand to SQLite ([`StoreError::UnsafeFile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileProblem {
    /// A symbolic link: SQLite would read and write the file it leads to.
    Symlink,
    /// Not a regular file (`kind` in words: "a FIFO", "a directory", "a socket", "a device").
    NotRegular { kind: &'static str },
    /// A regular file with more than one name (hard links): another name's user writes it too.
    Links { links: u64 },
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileProblem::Symlink => write!(f, "is a symlink"),
            FileProblem::NotRegular { kind } => write!(f, "is {kind}, not a regular file"),
            FileProblem::Links { links } => write!(f, "has {links} links"),
        }
    }
}

impl StoreError {
    /// Whether this error is a claim loss (the caller must stop quietly, not fail the run).
    pub fn is_claim_lost(&self) -> bool {
        matches!(self, StoreError::ClaimLost { .. })
    }

    /// Whether SQLite said the disk is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::DiskFull { .. } => true,
            StoreError::Database(e) => e.disk_full,
            _ => false,
        }
    }

    /// This error, said as [`StoreError::DiskFull`] of the database at `path` when SQLite
    /// said the disk is full.
    pub fn on_disk(self, path: &std::path::Path) -> Self {
        if self.is_disk_full() {
            StoreError::DiskFull {
                path: path.to_path_buf(),
            }
        } else {
            self
        }
    }

    /// Whether this error says nothing about the rows (the database or the disk failed, or a
    /// test injected a fault): the same write may well succeed when tried again.
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self,
            StoreError::Database(_)
                | StoreError::DiskFull { .. }
                | StoreError::Io { .. }
                | StoreError::TransactionLost
                | StoreError::InjectedFault(_)
                | StoreError::IncompatibleDatabase { .. }
                | StoreError::UnsafeFile { .. }
        )
    }
}

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

/// A failure of the database itself, as the store saw it.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct DatabaseError {
    /// SQLite said the disk is full (`SQLITE_FULL`).
    pub disk_full: bool,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl DatabaseError {
    /// The database's error `source`; `disk_full` when it says the disk is full.
    pub fn new(source: impl std::error::Error + Send + Sync + 'static, disk_full: bool) -> Self {
        Self {
            disk_full,
            source: Box::new(source),
        }
    }
}

/// The store's `?` on a rusqlite call: the only place the engine's crate names SQLite, and only
/// with the `rusqlite` feature, which `piw-host` turns on (a conversion must live with the type).
#[cfg(feature = "rusqlite")]
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        let disk_full = e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull);
        StoreError::Database(DatabaseError::new(e, disk_full))
    }
}
