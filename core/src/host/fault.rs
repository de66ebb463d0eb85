//! Test-only fault points for the real host process, selected by the `PIW_FAULT` environment
//! variable: `before_commit:<kind>` or `after_commit:<kind>` aborts the process (as SIGKILL
//! would) just before or just after committing a batch that contains a command of that kind.
//! Crash tests use it to prove that no acknowledged command is lost or applied twice.
//! `fail_commit:<kind>` makes the first such batch fail instead of committing (as a full disk
//! would), and the host carries on. `fail_sync` makes the first fsync of the WAL fail (as a
//! failing disk would): the host must exit without acknowledging what it had not synced.

/// Where to abort, parsed once at start.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    before_commit: Option<String>,
    after_commit: Option<String>,
    fail_commit: Option<String>,
    fail_sync: bool,
    failed_once: std::sync::Arc<std::sync::atomic::AtomicBool>,
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
            _ => {
                tracing::warn!(%spec, "ignoring unknown PIW_FAULT");
                Self::default()
            }
        }
    }

    pub(crate) fn before_commit<'a>(&self, kinds: impl Iterator<Item = &'a str>) {
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

    /// Whether this fsync of the WAL must fail (`fail_sync`).
    pub(crate) fn fail_sync(&self) -> bool {
        self.fail_sync
    }

    pub(crate) fn after_commit<'a>(&self, kinds: impl Iterator<Item = &'a str>) {
        abort_if(self.after_commit.as_deref(), kinds, "after_commit");
    }
}

fn abort_if<'a>(target: Option<&str>, mut kinds: impl Iterator<Item = &'a str>, point: &str) {
    if let Some(target) = target {
        if kinds.any(|k| k == target) {
            eprintln!("piw: PIW_FAULT {point}:{target} reached; aborting");
            std::process::abort();
        }
    }
}
