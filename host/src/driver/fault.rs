//! Test-only fault points for the real host process, selected by the `PIW_FAULT` environment
//! variable: `before_commit:<kind>` or `after_commit:<kind>` aborts the process (as SIGKILL
//! would) just before or just after committing a batch that contains a command of that kind.
//! Crash tests use it to prove that no acknowledged command is lost or applied twice.
//! `fail_commit:<kind>` makes the first such batch fail instead of committing (as a full disk
//! would), and the host carries on. `panic_commit:<kind>` panics the store thread just before
//! committing such a batch (a bug in a thread that owns state): the host must exit, not stay
//! half-alive. `disk_full:<file>` fails every commit as a full disk would while `<file>`
//! exists ([`crate::store::StoreConfig::disk_full_while`]). `spawn_fails:<file>` fails every
//! child spawn with "Too many open files" while `<file>` exists. `fail_sync` makes the first fsync of the WAL fail (as a
//! failing disk would): the host must exit without acknowledging what it had not synced.
//!
//! Every durable commit of the host, not only the batches of client commands, has a crash
//! point on each side: `before_op:<op>` and `after_op:<op>` abort just before or just after
//! committing a transaction that contains the store operation `<op>` (an event kind such as
//! `transition`, `expire_decision` or `cancel`, or `begin_host_epoch`, `record_child_exit`,
//! `claim_messages`, `ack_message`, ...: [`crate::store::CommitObserver`]), whatever wrote it:
//! start-up recovery, deadlines, child supervision, repair, the stop. `record_ops:<file>`
//! appends the operations of every commit to `<file>`, one line per commit, so a crash test
//! learns every point a fault-free run passes.

/// Where to abort, parsed once at start.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    before_commit: Option<String>,
    after_commit: Option<String>,
    fail_commit: Option<String>,
    panic_commit: Option<String>,
    disk_full_while: Option<std::path::PathBuf>,
    spawn_fails_while: Option<std::path::PathBuf>,
    fail_sync: bool,
    failed_once: std::sync::Arc<std::sync::atomic::AtomicBool>,
    before_op: Option<String>,
    after_op: Option<String>,
    record_ops: Option<std::path::PathBuf>,
}

impl FaultPlan {
    /// Reads `PIW_FAULT`. Unknown values are ignored with a warning.
    pub fn from_env() -> Self {
        let Ok(spec) = std::env::var("PIW_FAULT") else {
            return Self::default();
        };
        if spec == "fail_sync" {
            return Self {
                fail_sync: true,
                ..Self::default()
            };
        }
        match spec.split_once(':') {
            Some(("before_commit", kind)) => Self {
                before_commit: Some(kind.to_owned()),
                ..Self::default()
            },
            Some(("after_commit", kind)) => Self {
                after_commit: Some(kind.to_owned()),
                ..Self::default()
            },
            Some(("fail_commit", kind)) => Self {
                fail_commit: Some(kind.to_owned()),
                ..Self::default()
            },
            Some(("panic_commit", kind)) => Self {
                panic_commit: Some(kind.to_owned()),
                ..Self::default()
            },
            Some(("spawn_fails", file)) => Self {
                spawn_fails_while: Some(file.into()),
                ..Self::default()
            },
            Some(("disk_full", file)) => Self {
                disk_full_while: Some(file.into()),
                ..Self::default()
            },
            Some(("before_op", op)) => Self {
                before_op: Some(op.to_owned()),
                ..Self::default()
            },
            Some(("after_op", op)) => Self {
                after_op: Some(op.to_owned()),
                ..Self::default()
            },
            Some(("record_ops", file)) => Self {
                record_ops: Some(file.into()),
                ..Self::default()
            },
            _ => {
                tracing::warn!(%spec, "ignoring unknown PIW_FAULT");
                Self::default()
            }
        }
    }

    pub(crate) fn before_commit<'a>(&self, kinds: impl Iterator<Item = &'a str> + Clone) {
        if let Some(target) = &self.panic_commit {
            if kinds.clone().any(|k| k == target) {
                panic!("PIW_FAULT panic_commit:{target} reached");
            }
        }
        abort_if(self.before_commit.as_deref(), kinds, "before_commit");
    }

    /// Whether this batch must fail instead of committing (`fail_commit`, once).
    pub(crate) fn fail_commit<'a>(&self, mut kinds: impl Iterator<Item = &'a str>) -> bool {
        use std::sync::atomic::Ordering;
        match &self.fail_commit {
            Some(target) if kinds.any(|k| k == target) => {
                !self.failed_once.swap(true, Ordering::SeqCst)
            }
            _ => false,
        }
    }

    /// The file whose existence fails every commit as a full disk would (`disk_full`).
    pub(crate) fn disk_full_while(&self) -> Option<std::path::PathBuf> {
        self.disk_full_while.clone()
    }

    /// The error a child spawn fails with now (`spawn_fails`, while its file exists).
    pub(crate) fn spawn_failure(&self) -> Option<std::io::Error> {
        self.spawn_fails_while
            .as_ref()
            .filter(|file| file.exists())
            .map(|_| std::io::Error::from_raw_os_error(libc::EMFILE))
    }

    /// Whether this fsync of the WAL must fail (`fail_sync`).
    pub(crate) fn fail_sync(&self) -> bool {
        self.fail_sync
    }

    pub(crate) fn after_commit<'a>(&self, kinds: impl Iterator<Item = &'a str>) {
        abort_if(self.after_commit.as_deref(), kinds, "after_commit");
    }
}

impl FaultPlan {
    /// The store's commit observer for the op-level points, when one is asked for.
    pub(crate) fn commit_observer(&self) -> Option<crate::store::CommitObserver> {
        use crate::store::CommitStage;
        if self.before_op.is_none() && self.after_op.is_none() && self.record_ops.is_none() {
            return None;
        }
        let plan = self.clone();
        Some(std::sync::Arc::new(
            move |stage, ops: &[&'static str]| match stage {
                CommitStage::Before => {
                    abort_if(plan.before_op.as_deref(), ops.iter().copied(), "before_op")
                }
                CommitStage::After => {
                    abort_if(plan.after_op.as_deref(), ops.iter().copied(), "after_op");
                    if let Some(file) = &plan.record_ops {
                        record_ops(file, ops);
                    }
                }
            },
        ))
    }
}

/// Appends one commit's operations to `file` (test-only; a failure to write is only logged).
fn record_ops(file: &std::path::Path, ops: &[&str]) {
    use std::io::Write as _;
    if ops.is_empty() {
        return;
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| writeln!(f, "{}", ops.join(",")));
    if let Err(e) = written {
        tracing::warn!(file = %file.display(), error = %e, "PIW_FAULT record_ops: cannot append");
    }
}

fn abort_if<'a>(target: Option<&str>, mut kinds: impl Iterator<Item = &'a str>, point: &str) {
    if let Some(target) = target {
        if kinds.any(|k| k == target) {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "piw: PIW_FAULT {point}:{target} reached; aborting"
            );
            std::process::abort();
        }
    }
}
