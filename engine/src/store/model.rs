//! The durable vocabulary and the pure rules over it.
//!
//! Nothing here touches SQLite: the SQL in the sibling modules reads rows into these types, asks
//! the functions here what is allowed, and writes the answer back. Keeping the rules pure makes
//! them cheap to test and keeps the SQL modules free of decisions.

use serde::{Deserialize, Serialize};

use crate::time::UnixMillis;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable text stored in the database and shown to users.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the stored text.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// Where a run is in its life.
    RunStatus {
        /// Waiting to be activated (new, parked, answered, or submitted for validation).
        Queued = "queued",
        /// Claimed by a host, with a child executing it.
        Running = "running",
        /// Waiting for a checkpoint answer, a human decision, an interactive submission, or a
        /// timer's wake time.
        Waiting = "waiting",
        /// Stopped for manual review (uncertain effect, crash loop, changed source).
        Review = "review",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
        TimedOut = "timed_out",
    }
}

impl RunStatus {
    /// Terminal runs never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::TimedOut
        )
    }
}

string_enum! {
    /// The scheduler's view of a run.
    QueueState {
        Ready = "ready",
        Claimed = "claimed",
        Waiting = "waiting",
        Paused = "paused",
        Review = "review",
        Done = "done",
    }
}

/// The code a review reason starts with when a source of the run differs from the one it
/// recorded (a child found it before loading, or its graph differs from the stored snapshot).
pub const SOURCE_CHANGED: &str = "source_changed";

/// Whether a run's review reason is about a changed source: the only review a person may
/// leave by accepting the source as it is now (`run.retry` with `accept_source`).
pub fn is_source_change(review_reason: &str) -> bool {
    review_reason
        .strip_prefix(SOURCE_CHANGED)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

/// The queue state a run in `status` with the `paused` flag must have. Every write derives the
/// queue row from this one function, and `diagnose` checks stored rows against it.
///
/// `paused` matters only to a queued run: it is what holds that run back from activation. A
/// waiting run cannot be activated anyway, so pausing or resuming it leaves its queue row
/// alone (no queue row or `queue_ready` index entry to rewrite); if it becomes queued while
/// paused, it becomes `paused` then. (So a pause no longer rewrites a queue row that was
/// wrong before it; `diagnose` reports such a row and `repair` fixes it.)
pub fn queue_state_for(status: RunStatus, paused: bool) -> QueueState {
    match status {
        RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::TimedOut => {
            QueueState::Done
        }
        RunStatus::Review => QueueState::Review,
        // A running run keeps its claim until its next durable boundary, where the host parks it.
        RunStatus::Running => QueueState::Claimed,
        RunStatus::Queued if paused => QueueState::Paused,
        RunStatus::Queued => QueueState::Ready,
        RunStatus::Waiting => QueueState::Waiting,
    }
}

string_enum! {
    /// Who holds a claim.
    OwnerKind {
        /// The host, on behalf of a child executing the run.
        Host = "host",
        /// An operator path (cancellation or recovery of an expired run).
        Control = "control",
    }
}

string_enum! {
    /// Why a fenced write was refused. None of these reasons contains secret material.
    ClaimLostReason {
        /// The run has no claim holder (never claimed, or released).
        Missing = "missing",
        /// The stored expiry is not later than the transaction time.
        Expired = "expired",
        OwnerMismatch = "owner_mismatch",
        TokenMismatch = "token_mismatch",
        /// A newer generation took the run over.
        GenerationMismatch = "generation_mismatch",
    }
}

string_enum! {
    /// The state of one node attempt.
    AttemptStatus {
        Running = "running",
        /// Parked on a decision or interaction; the attempt continues when it is answered.
        Waiting = "waiting",
        Succeeded = "succeeded",
        Failed = "failed",
        TimedOut = "timed_out",
        /// Its child went away before it finished; compute nodes may run again.
        Interrupted = "interrupted",
        Cancelled = "cancelled",
    }
}

impl AttemptStatus {
    /// Open attempts can still change.
    pub fn is_open(self) -> bool {
        matches!(self, AttemptStatus::Running | AttemptStatus::Waiting)
    }
}

string_enum! {
    /// Which kind of decision a run waits for: ordinary checkpoints are answered by the model,
    /// human decisions only by a person. A wire value too (`worker.wait`).
    DecisionKind {
        /// An ordinary checkpoint, answered through the model-facing tool (`checkpoint.answer`).
        Checkpoint = "checkpoint",
        /// A protected human decision, answered only by a person (`decision.answer`).
        HumanDecision = "human_decision",
    }
}

string_enum! {
    DecisionStatus {
        Pending = "pending",
        Answered = "answered",
        Cancelled = "cancelled",
    }
}

string_enum! {
    /// Who answered a decision.
    Answerer {
        /// The model-facing workflow tool.
        Model = "model",
        /// A person in the origin session.
        Person = "person",
    }
}

string_enum! {
    /// Which kind of interactive step a run asks its origin Pi session to perform. A wire value
    /// too (`worker.interaction_request`).
    InteractionKind {
        /// An agent step: the model works on the request and submits a result.
        Agent = "agent",
        /// An assistant-message step: the model writes one message as the result.
        AssistantMessage = "assistant_message",
    }
}

string_enum! {
    InteractionStatus {
        Pending = "pending",
        /// A submission is being validated by a supervised child.
        Validating = "validating",
        Settled = "settled",
        Expired = "expired",
        Cancelled = "cancelled",
    }
}

string_enum! {
    SubmissionState {
        Validating = "validating",
        Accepted = "accepted",
        Rejected = "rejected",
    }
}

string_enum! {
    EffectState {
        Reserved = "reserved",
        Applying = "applying",
        Applied = "applied",
        Failed = "failed",
        /// The effect may or may not have happened; never retried automatically.
        Uncertain = "uncertain",
        Cancelled = "cancelled",
    }
}

string_enum! {
    /// When an effect may be attempted again after an interruption. A wire value too
    /// (`worker.effect_reserve`).
    RetryContract {
        /// Never: an interrupted application becomes uncertain.
        Never = "never",
        /// The external system deduplicates by the effect key.
        IdempotencyKey = "idempotency_key",
        /// The adapter can read back whether the effect happened.
        ReadBack = "read_back",
    }
}

impl RetryContract {
    /// Whether an `applying` effect whose child vanished may be applied again.
    pub fn allows_retry(self) -> bool {
        !matches!(self, RetryContract::Never)
    }
}

string_enum! {
    /// How a run is attached to Pi. A wire value too (`run.start`).
    ExecutionMode {
        /// Interactive steps are answered in the origin Pi session.
        Interactive = "interactive",
        /// The run is not bound to a live Pi session; interactive steps go to a host-managed Pi.
        Detached = "detached",
    }
}

string_enum! {
    MessageKind {
        Notify = "notify",
        Terminal = "terminal",
    }
}

string_enum! {
    /// Why a child was launched.
    ChildMode {
        Run = "run",
        Validate = "validate",
    }
}

/// How a node attempt ended, as reported by its child (or by the host for deadlines).
///
/// Wire form: `{"status":"succeeded","output":…}`, `{"status":"failed","error":"…"}` or
/// `{"status":"timed_out"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The node finished; `output` is its result (`null` when absent).
    Succeeded {
        /// The node's output, routed on by the graph.
        #[serde(default)]
        output: serde_json::Value,
    },
    /// The node failed with an error message.
    Failed {
        /// Human-readable error.
        error: String,
    },
    /// The node's deadline passed before it finished.
    TimedOut,
}

/// How an applied effect ended, as its child reports it or a person resolves it.
///
/// Wire form: `{"status":"applied","receipt":…}` or `{"status":"failed","error":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EffectResult {
    /// The external system confirmed the effect; `receipt` is its proof (`null` when absent).
    Applied {
        /// What the external system returned, stored as the effect's receipt.
        #[serde(default)]
        receipt: serde_json::Value,
    },
    /// The external system refused the effect; it did not happen.
    Failed {
        /// Human-readable error.
        error: String,
    },
}

impl AttemptOutcome {
    /// The attempt status this outcome records.
    pub fn status(&self) -> AttemptStatus {
        match self {
            AttemptOutcome::Succeeded { .. } => AttemptStatus::Succeeded,
            AttemptOutcome::Failed { .. } => AttemptStatus::Failed,
            AttemptOutcome::TimedOut => AttemptStatus::TimedOut,
        }
    }
}

/// What a store write may do to a run, used to check legality before any SQL runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Activate,
    NodeStarted,
    Transition,
    Park,
    Wait,
    /// Park the current attempt until a time (a durable timer).
    WaitUntil,
    /// The host fires a due timer: the run is queued to continue its attempt.
    FireTimer,
    RequestInteraction,
    Submit,
    Settle,
    AnswerDecision,
    ExpireInteraction,
    ExpireDecision,
    Pause,
    Resume,
    Complete,
    Fail,
    Cancel,
    ControlClaim,
    ChildLost,
    Recover,
    Effect,
    Review,
    /// A person runs the current node of a run in review again.
    Retry,
    /// A person settles an uncertain effect of a run in review.
    ResolveEffect,
    /// An interactive run becomes detached: its steps go to host-launched bridges.
    Detach,
}

impl Op {
    /// The name used in errors and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Activate => "activate",
            Op::NodeStarted => "node_started",
            Op::Transition => "transition",
            Op::Park => "park",
            Op::Wait => "wait",
            Op::WaitUntil => "wait_until",
            Op::FireTimer => "fire_timer",
            Op::RequestInteraction => "request_interaction",
            Op::Submit => "submit",
            Op::Settle => "settle",
            Op::AnswerDecision => "answer_decision",
            Op::ExpireInteraction => "expire_interaction",
            Op::ExpireDecision => "expire_decision",
            Op::Pause => "pause",
            Op::Resume => "resume",
            Op::Complete => "complete",
            Op::Fail => "fail",
            Op::Cancel => "cancel",
            Op::ControlClaim => "control_claim",
            Op::ChildLost => "child_lost",
            Op::Recover => "recover",
            Op::Effect => "effect",
            Op::Review => "review",
            Op::Retry => "retry",
            Op::ResolveEffect => "resolve_effect",
            Op::Detach => "detach",
        }
    }

    /// The run statuses from which this operation is allowed. Claim and attempt checks come on
    /// top of this; this table is the first gate.
    pub fn allowed_from(self) -> &'static [RunStatus] {
        use RunStatus::*;
        match self {
            Op::Activate => &[Queued],
            Op::NodeStarted
            | Op::Transition
            | Op::Park
            | Op::Wait
            | Op::WaitUntil
            | Op::RequestInteraction
            | Op::Settle
            | Op::Complete
            | Op::Fail
            | Op::ChildLost
            | Op::Recover
            | Op::Effect
            | Op::Review => &[Running],
            Op::Submit
            | Op::AnswerDecision
            | Op::ExpireInteraction
            | Op::ExpireDecision
            | Op::FireTimer => &[Waiting],
            Op::Pause => &[Queued, Running, Waiting],
            Op::Resume => &[Queued, Running, Waiting],
            Op::Cancel | Op::ControlClaim => &[Queued, Running, Waiting, Review],
            Op::Retry | Op::ResolveEffect => &[Review],
            Op::Detach => &[Queued, Running, Waiting, Review],
        }
    }

    /// Whether a run in `status` accepts this operation.
    pub fn allowed(self, status: RunStatus) -> bool {
        self.allowed_from().contains(&status)
    }
}

/// A claim's durable fields as the fence reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredClaim {
    pub generation: u64,
    pub owner_kind: Option<OwnerKind>,
    pub owner_id: Option<String>,
    pub token_hash: Option<String>,
    pub expires_at: Option<UnixMillis>,
}

impl StoredClaim {
    /// Whether some owner holds the claim and its expiry is still ahead of `now`.
    pub fn is_live(&self, now: UnixMillis) -> bool {
        self.owner_kind.is_some() && self.expires_at.is_some_and(|e| e > now)
    }
}

/// What a writer presents to the fence (the token already hashed).
#[derive(Debug, Clone, Copy)]
pub struct PresentedClaim<'a> {
    pub generation: u64,
    pub owner_kind: OwnerKind,
    pub owner_id: &'a str,
    pub token_hash: &'a str,
}

/// The fence decision: `Ok` when the presented claim may write at `now`.
///
/// Order matters only for the reported reason: a newer generation is the most informative fact,
/// then a released claim, then who holds it, then expiry. Expiry is checked last so a writer that
/// is both stale and expired learns it was superseded.
pub fn check_fence(
    stored: &StoredClaim,
    presented: PresentedClaim<'_>,
    now: UnixMillis,
) -> Result<(), ClaimLostReason> {
    if stored.generation != presented.generation {
        return Err(ClaimLostReason::GenerationMismatch);
    }
    let (Some(kind), Some(owner), Some(hash), Some(expires_at)) = (
        stored.owner_kind,
        stored.owner_id.as_deref(),
        stored.token_hash.as_deref(),
        stored.expires_at,
    ) else {
        return Err(ClaimLostReason::Missing);
    };
    if kind != presented.owner_kind || owner != presented.owner_id {
        return Err(ClaimLostReason::OwnerMismatch);
    }
    if hash != presented.token_hash {
        return Err(ClaimLostReason::TokenMismatch);
    }
    if expires_at <= now {
        return Err(ClaimLostReason::Expired);
    }
    Ok(())
}

/// The word clients see for an attempt's status or a step's outcome: the authoring reference's
/// `ok` (what `$result.outcome` routes on and a node's `results` say) where the store records
/// `succeeded`; every other word as stored. Only what leaves the host changes: the stored
/// value stays, so no migration.
pub fn outcome_word(stored: &str) -> &str {
    if stored == "succeeded" {
        "ok"
    } else {
        stored
    }
}

/// Serializes a stored attempt status as [`outcome_word`] (for `serialize_with`).
pub fn serialize_outcome_word<S: serde::Serializer>(
    stored: &str,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(outcome_word(stored))
}

/// Reads an attempt status sent as [`outcome_word`] back as the stored word (for
/// `deserialize_with`).
pub fn deserialize_outcome_word<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    let word = <String as serde::Deserialize>::deserialize(deserializer)?;
    Ok(if word == "ok" {
        "succeeded".to_owned()
    } else {
        word
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> StoredClaim {
        StoredClaim {
            generation: 3,
            owner_kind: Some(OwnerKind::Host),
            owner_id: Some("host-1".into()),
            token_hash: Some("h".into()),
            expires_at: Some(100),
        }
    }

    fn presented() -> PresentedClaim<'static> {
        PresentedClaim {
            generation: 3,
            owner_kind: OwnerKind::Host,
            owner_id: "host-1",
            token_hash: "h",
        }
    }

    #[test]
    fn only_a_changed_source_is_a_source_change() {
        assert!(is_source_change(
            "source_changed: workflow source /w changed"
        ));
        assert!(is_source_change("source_changed"));
        assert!(!is_source_change("source_changed_elsewhere: no"));
        assert!(!is_source_change(
            "its child was lost 3 times: source_changed"
        ));
        assert!(!is_source_change(""));
    }

    #[test]
    fn fence_accepts_exact_live_claim() {
        assert_eq!(check_fence(&stored(), presented(), 99), Ok(()));
    }

    #[test]
    fn fence_reports_each_reason() {
        assert_eq!(
            check_fence(&stored(), presented(), 100),
            Err(ClaimLostReason::Expired),
            "expiry equal to now is already expired"
        );
        let p = PresentedClaim {
            generation: 2,
            ..presented()
        };
        assert_eq!(
            check_fence(&stored(), p, 0),
            Err(ClaimLostReason::GenerationMismatch)
        );
        let p = PresentedClaim {
            owner_id: "host-2",
            ..presented()
        };
        assert_eq!(
            check_fence(&stored(), p, 0),
            Err(ClaimLostReason::OwnerMismatch)
        );
        let p = PresentedClaim {
            owner_kind: OwnerKind::Control,
            ..presented()
        };
        assert_eq!(
            check_fence(&stored(), p, 0),
            Err(ClaimLostReason::OwnerMismatch)
        );
        let p = PresentedClaim {
            token_hash: "x",
            ..presented()
        };
        assert_eq!(
            check_fence(&stored(), p, 0),
            Err(ClaimLostReason::TokenMismatch)
        );
        let released = StoredClaim {
            owner_kind: None,
            owner_id: None,
            token_hash: None,
            expires_at: None,
            ..stored()
        };
        assert_eq!(
            check_fence(&released, presented(), 0),
            Err(ClaimLostReason::Missing)
        );
    }

    #[test]
    fn queue_state_follows_status_and_pause() {
        assert_eq!(queue_state_for(RunStatus::Queued, false), QueueState::Ready);
        assert_eq!(queue_state_for(RunStatus::Queued, true), QueueState::Paused);
        // Pausing a waiting run leaves its queue row alone: it is not activatable either way.
        assert_eq!(
            queue_state_for(RunStatus::Waiting, true),
            QueueState::Waiting
        );
        assert_eq!(
            queue_state_for(RunStatus::Waiting, false),
            QueueState::Waiting
        );
        assert_eq!(
            queue_state_for(RunStatus::Running, true),
            QueueState::Claimed
        );
        assert_eq!(queue_state_for(RunStatus::Review, true), QueueState::Review);
        for s in RunStatus::ALL.iter().filter(|s| s.is_terminal()) {
            assert_eq!(queue_state_for(*s, true), QueueState::Done);
        }
    }

    #[test]
    fn terminal_runs_accept_no_operation() {
        let ops = [
            Op::Activate,
            Op::NodeStarted,
            Op::Transition,
            Op::Park,
            Op::Wait,
            Op::WaitUntil,
            Op::FireTimer,
            Op::RequestInteraction,
            Op::Submit,
            Op::Settle,
            Op::AnswerDecision,
            Op::ExpireInteraction,
            Op::ExpireDecision,
            Op::Pause,
            Op::Resume,
            Op::Complete,
            Op::Fail,
            Op::Cancel,
            Op::ControlClaim,
            Op::ChildLost,
            Op::Recover,
            Op::Effect,
            Op::Review,
            Op::Retry,
            Op::ResolveEffect,
        ];
        for status in RunStatus::ALL.iter().filter(|s| s.is_terminal()) {
            for op in ops {
                assert!(!op.allowed(*status), "{op:?} allowed from {status}");
            }
        }
    }

    #[test]
    fn string_enums_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(*s));
        }
        for s in EffectState::ALL {
            assert_eq!(EffectState::parse(s.as_str()), Some(*s));
        }
        assert_eq!(RunStatus::parse("bogus"), None);
    }
}
