//! Typed store errors. None of them carries a claim token or a token hash.

use std::path::PathBuf;

use super::model::{ClaimLostReason, Op, RunStatus};

/// The instruction every refused database error ends with: a command that works as printed
/// (quoted paths) and keeps every commit (the `-wal` file too, when there is one: a host that
/// crashed leaves its last commits there).
pub(crate) fn reset_instruction(path: &std::path::Path) -> String {
    let with = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        crate::paths::shell_quoted(std::path::Path::new(&p))
    };
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let copy_wal = if std::path::Path::new(&wal).exists() {
        format!(" && cp {} {}", with("-wal"), with(".bak-wal"))
    } else {
        String::new()
    };
    format!(
        "The file was left untouched. To start over, back it up and reset: \
         `cp {} {}{copy_wal} && piw state reset --yes` (the backup keeps every run for inspection).",
        with(""),
        with(".bak"),
    )
}

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
    #[error("refusing to open {path}: {detail}. {instruction}", instruction = reset_instruction(path))]
    IncompatibleDatabase { path: PathBuf, detail: String },

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

    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),

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
            StoreError::Sqlite(e) => e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull),
            _ => false,
        }
    }

    /// This error, said as [`StoreError::DiskFull`] of the database at `path` when SQLite
    /// said the disk is full.
    pub(crate) fn on_disk(self, path: &std::path::Path) -> Self {
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
            StoreError::Sqlite(_)
                | StoreError::DiskFull { .. }
                | StoreError::Io { .. }
                | StoreError::TransactionLost
                | StoreError::InjectedFault(_)
                | StoreError::IncompatibleDatabase { .. }
        )
    }
}

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_instruction_copies_the_wal_when_there_is_one_and_quotes_paths() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("it's").join("state.sqlite");
        let plain = reset_instruction(&db);
        assert!(plain.contains(r"it'\''s/state.sqlite' "), "{plain}");
        assert!(!plain.contains("-wal"), "{plain}");
        std::fs::create_dir(db.parent().unwrap()).unwrap();
        std::fs::write(&db, "").unwrap();
        let mut wal = db.clone().into_os_string();
        wal.push("-wal");
        std::fs::write(&wal, "").unwrap();
        let with_wal = reset_instruction(&db);
        assert!(
            with_wal.contains(r"state.sqlite-wal' '") && with_wal.contains("state.sqlite.bak-wal'"),
            "{with_wal}"
        );
    }
}
