//! Controllers' durable vocabulary: what the store keeps of registered controllers, their
//! resources (a `spec` its callers own, a `status` its controller owns), the work queue of
//! reconcile passes, the effects and child workflow requests a pass records, and the record of
//! each pass; the pure rules over them (names, keys and bounds; what the queue does after a
//! pass; the backoff of a failing resource), and the typed refusals. The SQL is
//! `piw_host::store::controllers`.
//!
//! A resource's `resource_version` changes on every write of it (the compare-and-swap token);
//! its `generation` only when its spec changes as canonical JSON. Its `uid` is a row id (the
//! time and 64 random bits), so a resource deleted and made again never gets the old one.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::ClaimToken;
use crate::time::UnixMillis;

/// The largest spec, and the largest status, as canonical JSON in UTF-8 bytes.
pub const MAX_RESOURCE_VALUE_BYTES: usize = 1024 * 1024;
/// The longest resource key, effect key or workflow request key, in characters.
pub const MAX_KEY_LENGTH: usize = 512;
/// The longest error message or requeue reason kept, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;
/// A pass's deadline when its controller's registration names none.
pub const DEFAULT_PASS_DEADLINE_MS: i64 = 5 * 60_000;
/// The pass records kept per resource (the oldest go first).
pub const PASSES_KEPT_PER_RESOURCE: u32 = 20;
/// The backoff after a resource's first failed pass; it doubles with each further one.
pub const FIRST_ERROR_BACKOFF_MS: i64 = 1_000;
/// The longest backoff of a failing resource.
pub const MAX_ERROR_BACKOFF_MS: i64 = 5 * 60_000;

/// A controller as a client registers it: a definition discovered in a project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRegistration {
    /// The project's directory (absolute): the scope of the controller's name and resources.
    pub project_dir: String,
    /// The definition's name (`pull-request`).
    pub name: String,
    /// The controller file (absolute).
    pub source_path: String,
    /// The SHA-256 of the file's bytes when it was registered.
    pub source_hash: String,
    /// How long one pass may run before it is killed.
    pub pass_deadline_ms: i64,
}

/// A registered controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRecord {
    pub project_dir: String,
    pub name: String,
    pub source_path: String,
    pub source_hash: String,
    /// Whether its passes run (`controller.enable`).
    pub enabled: bool,
    pub pass_deadline_ms: i64,
    pub registered_at: UnixMillis,
    pub updated_at: UnixMillis,
}

/// A resource as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceRecord {
    pub uid: String,
    pub project_dir: String,
    pub controller: String,
    pub key: String,
    pub resource_version: u64,
    pub generation: u64,
    /// When its deletion was asked for: it goes once its finalizers are empty.
    pub deletion_requested_at: Option<UnixMillis>,
    pub finalizers: Vec<String>,
    pub spec: Value,
    /// `None` until its controller's first pass wrote one.
    pub status: Option<Value>,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

/// What `resource.apply` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyOutcome {
    /// A new resource, queued for its first pass.
    Created,
    /// A new spec: `generation` and `resource_version` advanced, a pass queued.
    Updated,
    /// The spec was equal as canonical JSON: nothing changed.
    Unchanged,
}

/// What `resource.delete` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DeleteOutcome {
    /// The resource had no finalizer: it is gone, with its records.
    Deleted { uid: String },
    /// Its deletion is recorded and a pass queued; it goes once its finalizers are empty.
    Pending { resource: Box<ResourceRecord> },
}

/// An effect's state: `pending` until its outcome is known; `applied` and `rejected` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControllerEffectState {
    Pending,
    Applied,
    Rejected,
    Indeterminate,
}

impl ControllerEffectState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Applied => "applied",
            Self::Rejected => "rejected",
            Self::Indeterminate => "indeterminate",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "applied" => Self::Applied,
            "rejected" => Self::Rejected,
            "indeterminate" => Self::Indeterminate,
            _ => return None,
        })
    }

    /// `applied` and `rejected`: nothing changes them again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Applied | Self::Rejected)
    }
}

/// One intended external effect of a resource, recorded before it is attempted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerEffectRecord {
    pub resource_uid: String,
    pub key: String,
    pub kind: String,
    /// The resource's generation when the effect was first recorded.
    pub generation: u64,
    pub request_fingerprint: String,
    pub state: ControllerEffectState,
    pub external_ref: Option<String>,
    pub error: Option<String>,
    pub started_at: UnixMillis,
    pub completed_at: Option<UnixMillis>,
}

/// An effect as a pass records it (`controller.effect.record`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewControllerEffect {
    pub key: String,
    pub kind: String,
    pub generation: u64,
    pub request_fingerprint: String,
}

/// What a pass says became of an effect (`controller.effect.settle`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectSettlement {
    pub key: String,
    /// `applied`, `rejected` or `indeterminate`.
    pub state: ControllerEffectState,
    pub external_ref: Option<String>,
    pub error: Option<String>,
}

/// A child workflow request's state, derived from its current run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowRequestState {
    /// Recorded; its run is not started yet.
    Pending,
    Running,
    /// Its run waits (a timer, a step, a person: review included).
    Waiting,
    Succeeded,
    Failed,
    /// Its run was cancelled: the next `ensure` starts another attempt.
    Interrupted,
}

impl WorkflowRequestState {
    /// The state of a request whose current run has `status` (`runs.status`).
    pub fn of_run_status(status: crate::store::RunStatus) -> Self {
        use crate::store::RunStatus as S;
        match status {
            S::Queued | S::Running => Self::Running,
            S::Waiting | S::Review => Self::Waiting,
            S::Completed => Self::Succeeded,
            S::Failed | S::TimedOut => Self::Failed,
            S::Cancelled => Self::Interrupted,
        }
    }

    /// Whether the run has ended (its end wakes the resource).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Interrupted)
    }
}

/// A child workflow request of a resource: each start of it is an attempt with its own run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRequestRecord {
    /// Stable for the request's life; the idempotency key of its runs' starts.
    pub request_id: String,
    pub resource_uid: String,
    pub request_key: String,
    pub workflow: String,
    pub input_fingerprint: String,
    pub state: WorkflowRequestState,
    /// 1 for the first run, one more for each run after an interrupted one.
    pub attempt: u32,
    /// The current attempt's run.
    pub run_id: Option<String>,
    /// Every attempt's run, oldest first.
    pub run_ids: Vec<String>,
    /// Why its run failed, when it did.
    pub error: Option<String>,
}

/// A child workflow as a pass asks for it (`controller.workflow.ensure`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRequest {
    pub request_key: String,
    pub workflow: String,
    pub input_fingerprint: String,
}

/// What a pass came to, as its child reports it (`controller.pass.finish`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassResultKind {
    Settled,
    Requeue,
    Error,
    Deadline,
}

/// A pass's result: the status to commit (after `settled` or `requeue`), its finalizers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassResult {
    pub kind: PassResultKind,
    /// With `requeue`: the next pass after this long; none: at once.
    pub after_ms: Option<i64>,
    /// With `error`: why.
    pub message: Option<String>,
    /// With `settled` and `requeue`: the whole status.
    pub status: Option<Value>,
    pub finalizers: Option<Vec<String>>,
}

/// How a pass ended, as its record keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassOutcome {
    Settled,
    Requeue,
    Error,
    Deadline,
    /// Its status was not written: the resource changed since the pass read it. Another pass
    /// follows at once; not an error.
    Conflict,
    /// The host stopped (or died) under it: another pass follows; not an error.
    Interrupted,
}

impl PassOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Settled => "settled",
            Self::Requeue => "requeue",
            Self::Error => "error",
            Self::Deadline => "deadline",
            Self::Conflict => "conflict",
            Self::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "settled" => Self::Settled,
            "requeue" => Self::Requeue,
            "error" => Self::Error,
            "deadline" => Self::Deadline,
            "conflict" => Self::Conflict,
            "interrupted" => Self::Interrupted,
            _ => return None,
        })
    }
}

/// The record of one pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassRecord {
    pub pass_id: String,
    pub resource_uid: String,
    pub controller: String,
    pub key: String,
    /// The resource's generation the pass read.
    pub generation: u64,
    pub outcome: PassOutcome,
    pub started_at: UnixMillis,
    pub duration_ms: i64,
    /// Why the next pass is queued (and when), if one is.
    pub requeue_reason: Option<String>,
    /// An error's message.
    pub message: Option<String>,
}

/// A resource's row in the work queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    pub resource_uid: String,
    pub project_dir: String,
    pub controller: String,
    pub key: String,
    /// When its next pass may start.
    pub due_at: UnixMillis,
    /// Why it is queued.
    pub reason: String,
    /// Failed passes in a row (the backoff's exponent).
    pub consecutive_errors: u32,
    /// The running pass, if one runs.
    pub pass: Option<RunningPass>,
}

/// A pass that holds a resource's queue row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningPass {
    pub pass_id: String,
    /// The host that launched its child.
    pub host_epoch: i64,
    pub started_at: UnixMillis,
    /// Its claim's end: the pass's deadline.
    pub lease_expires_at: UnixMillis,
    /// The `resource_version` it read: its status is written only over that.
    pub read_version: u64,
    /// Something happened while it ran (a new event): a pass follows even if it settles.
    pub requeue_requested: bool,
}

/// A pass just claimed: what its child is launched with. The token exists only here and in
/// the child's envelope; the store keeps its hash.
#[derive(Debug)]
pub struct PassLaunch {
    pub pass_id: String,
    pub token: ClaimToken,
    pub controller: ControllerRecord,
    pub resource: ResourceRecord,
    pub deadline_at: UnixMillis,
}

/// What a pass child presents with each request: its resource, its pass and its token.
#[derive(Debug, Clone)]
pub struct PassFence {
    pub resource_uid: String,
    pub pass_id: String,
    pub token: ClaimToken,
}

/// What committing a pass's result did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassFinished {
    pub outcome: PassOutcome,
    /// The resource after the commit; `None` when it was deleted.
    pub resource: Option<ResourceRecord>,
    /// When the next pass is due; `None`: none until something happens.
    pub next_due_at: Option<UnixMillis>,
}

/// How a pass ended without its child reporting a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassEnd {
    /// It ran past its deadline and was killed.
    Deadline,
    /// Its child exited (or could not start) without finishing it: an error of the controller.
    ChildFailed { message: String },
    /// The host stopped under it: not the controller's failure.
    Interrupted,
}

/// The backoff before the next pass of a resource whose last `consecutive_errors` passes
/// failed (at least 1): the exponential delay (`FIRST_ERROR_BACKOFF_MS` doubling, at most
/// `MAX_ERROR_BACKOFF_MS`), of which the upper half is jitter drawn from `jitter_bits` (the
/// engine's id source: never the OS directly), so failing resources spread out.
pub fn error_backoff_ms(consecutive_errors: u32, jitter_bits: u64) -> i64 {
    let doublings = consecutive_errors.saturating_sub(1).min(20);
    let full = FIRST_ERROR_BACKOFF_MS
        .saturating_mul(1_i64 << doublings)
        .min(MAX_ERROR_BACKOFF_MS);
    let half = full / 2;
    let spread = u64::try_from(full - half + 1).unwrap_or(1);
    half + i64::try_from(jitter_bits % spread).unwrap_or(0)
}

/// What the queue row becomes after a pass: `due_at` (`None`: no row), the error count, the
/// reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueAfter {
    pub due_at: Option<UnixMillis>,
    pub consecutive_errors: u32,
    pub reason: String,
}

/// The queue after a pass that ended with `outcome` at `now` (pure): settled: no row, unless
/// something happened while it ran; requeue: due now, or after `after_ms`; error and deadline:
/// the backoff; a conflict or an interruption: due now, the error count kept.
pub fn queue_after_pass(
    outcome: PassOutcome,
    after_ms: Option<i64>,
    now: UnixMillis,
    consecutive_errors: u32,
    requeue_requested: bool,
    jitter_bits: u64,
) -> QueueAfter {
    match outcome {
        PassOutcome::Settled if requeue_requested => QueueAfter {
            due_at: Some(now),
            consecutive_errors: 0,
            reason: "an event arrived during the pass".into(),
        },
        PassOutcome::Settled => QueueAfter {
            due_at: None,
            consecutive_errors: 0,
            reason: "settled".into(),
        },
        PassOutcome::Requeue => match after_ms {
            Some(ms) if !requeue_requested => QueueAfter {
                due_at: Some(now.saturating_add(ms)),
                consecutive_errors: 0,
                reason: format!("requeue after {ms} ms"),
            },
            _ => QueueAfter {
                due_at: Some(now),
                consecutive_errors: 0,
                reason: "requeue".into(),
            },
        },
        PassOutcome::Error | PassOutcome::Deadline => {
            let errors = consecutive_errors.saturating_add(1);
            let delay = error_backoff_ms(errors, jitter_bits);
            QueueAfter {
                due_at: Some(now.saturating_add(delay)),
                consecutive_errors: errors,
                reason: format!(
                    "{} (failure {errors} in a row): backoff of {delay} ms",
                    outcome.as_str()
                ),
            }
        }
        PassOutcome::Conflict => QueueAfter {
            due_at: Some(now),
            consecutive_errors,
            reason: "the resource changed during the pass".into(),
        },
        PassOutcome::Interrupted => QueueAfter {
            due_at: Some(now),
            consecutive_errors,
            reason: "the host stopped during the pass".into(),
        },
    }
}

/// Checks a controller's name: lower-case letters, digits and dashes, starting with a letter.
pub fn check_controller_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if first_ok
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        Ok(())
    } else {
        Err(format!(
            "controller name {name:?} must be lower-case letters, digits and dashes, starting with a letter (such as \"pull-request\")"
        ))
    }
}

/// Checks a resource key, effect key or workflow request key: 1 to `MAX_KEY_LENGTH`
/// printable characters.
pub fn check_key(value: &str, what: &str) -> Result<(), String> {
    let n = value.chars().count();
    if n == 0 || n > MAX_KEY_LENGTH || value.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{what} must be 1-{MAX_KEY_LENGTH} printable characters, not {value:?}"
        ));
    }
    Ok(())
}

/// Whether `name` is a finalizer's (or an effect kind's) form: a letter, then letters,
/// digits, `_`, `.` or `-`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() <= MAX_KEY_LENGTH
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Checks a list of finalizers: identifiers, none twice.
pub fn check_finalizers(finalizers: &[String]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for f in finalizers {
        if !is_identifier(f) {
            return Err(format!(
                "finalizer {f:?} must be a letter, then letters, digits, '_', '.' or '-'"
            ));
        }
        if !seen.insert(f.as_str()) {
            return Err(format!("finalizer {f:?} is listed twice"));
        }
    }
    Ok(())
}

/// Checks an effect's kind (`forge-merge`).
pub fn check_effect_kind(kind: &str) -> Result<(), String> {
    if is_identifier(kind) {
        Ok(())
    } else {
        Err(format!(
            "effect kind {kind:?} must be a letter, then letters, digits, '_', '.' or '-'"
        ))
    }
}

/// `message` cut to `MAX_MESSAGE_BYTES` (on a character boundary).
pub fn bounded_message(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// What the store refuses of controllers, typed (`StoreError::Controller`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerStoreError {
    #[error("no controller {name:?} is registered in {project_dir}; register it first (controller.register)")]
    ControllerNotFound { project_dir: String, name: String },

    #[error("no resource {controller}/{key} in {project_dir}")]
    ResourceNotFound {
        project_dir: String,
        controller: String,
        key: String,
    },

    /// A write named a `resource_version` that is no longer the resource's.
    #[error("resource {controller}/{key} changed since it was read (resource_version {actual}, the write expected {expected}); read it again and retry")]
    ResourceConflict {
        controller: String,
        key: String,
        expected: u64,
        actual: u64,
    },

    /// A spec or a status over `MAX_RESOURCE_VALUE_BYTES`.
    #[error("{what} is {bytes} bytes as canonical JSON, over the {limit}-byte limit; keep large data elsewhere (a file, a run's result) and store a reference")]
    TooLarge {
        what: &'static str,
        bytes: usize,
        limit: usize,
    },

    /// A resource being deleted takes no new spec.
    #[error("resource {controller}/{key} is being deleted; it takes no new spec (apply it again once it is gone)")]
    BeingDeleted { controller: String, key: String },

    /// An effect key recorded with another request, kind or generation.
    #[error("effect key {key:?} was already recorded with another {what}; an effect key names one request: put what differs (the generation, the head, ...) in the key")]
    EffectConflict { key: String, what: &'static str },

    /// An effect settled before it was recorded.
    #[error("no effect {key:?} is recorded for this resource; record it before settling it")]
    EffectNotRecorded { key: String },

    /// An `applied` or `rejected` effect asked to become something else.
    #[error("effect {key:?} is already {state}; it cannot become {requested}")]
    EffectFinal {
        key: String,
        state: &'static str,
        requested: &'static str,
    },

    /// A workflow request key used with another workflow or input.
    #[error("workflow request key {key:?} was already used with another {what}; a changed input needs a new request key")]
    WorkflowConflict { key: String, what: &'static str },

    /// A pass's claim no longer holds (it ended, expired, or the resource is gone): the pass
    /// child must stop; nothing was written.
    #[error("the pass {pass_id} of resource {resource_uid} no longer holds its claim: {reason}")]
    PassLost {
        resource_uid: String,
        pass_id: String,
        reason: &'static str,
    },

    /// The resource's pass cannot start now (another runs, it is not queued, or its
    /// controller is disabled).
    #[error("no pass of resource {resource_uid} can start: {reason}")]
    NotReady {
        resource_uid: String,
        reason: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_stays_within_its_bounds_and_spreads() {
        for errors in 1..30 {
            let full = (FIRST_ERROR_BACKOFF_MS << (errors - 1).min(20)).min(MAX_ERROR_BACKOFF_MS);
            for bits in [0, 1, 7, u64::MAX, 123_456_789] {
                let d = error_backoff_ms(errors, bits);
                assert!(d >= full / 2 && d <= full, "{errors} {bits}: {d}");
            }
        }
        assert_eq!(error_backoff_ms(1, 0), 500);
        assert_eq!(error_backoff_ms(3, 0), 2_000);
        assert_eq!(error_backoff_ms(40, 0), MAX_ERROR_BACKOFF_MS / 2);
        assert_ne!(error_backoff_ms(5, 1), error_backoff_ms(5, 2));
    }

    #[test]
    fn the_queue_after_a_pass() {
        let now = 1_000;
        let q = |o, after, req| queue_after_pass(o, after, now, 2, req, 0);
        assert_eq!(q(PassOutcome::Settled, None, false).due_at, None);
        assert_eq!(q(PassOutcome::Settled, None, true).due_at, Some(now));
        assert_eq!(q(PassOutcome::Requeue, None, false).due_at, Some(now));
        assert_eq!(
            q(PassOutcome::Requeue, Some(5_000), false).due_at,
            Some(now + 5_000)
        );
        assert_eq!(q(PassOutcome::Requeue, Some(5_000), true).due_at, Some(now));
        let e = q(PassOutcome::Error, None, false);
        assert_eq!((e.due_at, e.consecutive_errors), (Some(now + 2_000), 3));
        let c = q(PassOutcome::Conflict, None, false);
        assert_eq!((c.due_at, c.consecutive_errors), (Some(now), 2));
        let i = q(PassOutcome::Interrupted, None, false);
        assert_eq!((i.due_at, i.consecutive_errors), (Some(now), 2));
        assert_eq!(q(PassOutcome::Settled, None, false).consecutive_errors, 0);
    }

    #[test]
    fn names_keys_and_finalizers() {
        assert!(check_controller_name("pull-request").is_ok());
        assert!(check_controller_name("Pull").is_err());
        assert!(check_controller_name("1x").is_err());
        assert!(check_key("acme/widgets#1", "key").is_ok());
        assert!(check_key("", "key").is_err());
        assert!(check_key("a\nb", "key").is_err());
        assert!(check_key(&"x".repeat(MAX_KEY_LENGTH + 1), "key").is_err());
        assert!(check_finalizers(&["pull-request.label".into()]).is_ok());
        assert!(check_finalizers(&["a".into(), "a".into()]).is_err());
        assert!(check_finalizers(&["-a".into()]).is_err());
        assert_eq!(
            bounded_message(&"é".repeat(MAX_MESSAGE_BYTES)).len(),
            MAX_MESSAGE_BYTES + 3
        );
    }
}
