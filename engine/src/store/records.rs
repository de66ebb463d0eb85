//! The rows the store hands out, as the engine, the replies and the clients read them. The
//! store maps its rows onto these (`piw_host::store`); nothing here knows SQL. None of them
//! carries a claim token or its hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::fmt;

use super::model::*;
use crate::ids::ClaimToken;
use crate::time::UnixMillis;

/// A run as stored (without the definition snapshot and input, which can be large).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub workflow_name: String,
    pub source_root: String,
    pub source_hash: String,
    pub definition_digest: Option<String>,
    pub input_hash: String,
    pub origin_session: Option<String>,
    pub execution_mode: String,
    pub project_dir: String,
    pub status: RunStatus,
    pub paused: bool,
    pub current_node: Option<String>,
    pub current_attempt: Option<String>,
    pub revision: u64,
    pub result: Option<Value>,
    /// The result was left out of this reply to keep it under the frame limit (`run.list` of
    /// runs whose results add up to more). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub result_omitted: bool,
    pub error: Option<String>,
    pub review_reason: Option<String>,
    /// When the timer the run waits on fires (Unix milliseconds); `None` when it waits on
    /// none. A paused run keeps it: resumed before then, it waits on; after, it goes on.
    pub wake_at: Option<UnixMillis>,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
}

impl RunRecord {
    /// The run's place in a run list.
    pub fn list_key(&self) -> RunListKey {
        RunListKey {
            created_at: self.created_at,
            run_id: self.run_id.clone(),
        }
    }
}

/// A run's place in a run list: lists are ordered by start time, newest first, then by run id.
/// Neither changes in a run's life, so a page that ends at a key continues where it ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunListKey {
    pub created_at: UnixMillis,
    pub run_id: String,
}

/// The claim's public face: who and which generation, never the token or its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimInfo {
    pub generation: u64,
    pub owner_kind: Option<OwnerKind>,
    pub owner_id: Option<String>,
    pub heartbeat_at: Option<UnixMillis>,
    pub expires_at: Option<UnixMillis>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub attempt_id: String,
    pub node_id: String,
    pub ordinal: u64,
    pub generation: u64,
    /// As stored (`succeeded`, ...); clients see it in the authoring words (`ok`, ...), and a
    /// client reading a reply gets the stored word back.
    #[serde(
        serialize_with = "super::model::serialize_outcome_word",
        deserialize_with = "super::model::deserialize_outcome_word"
    )]
    pub status: String,
    pub deadline_at: Option<UnixMillis>,
    pub output: Option<Value>,
    /// The output was left out of this reply to keep it under the frame limit (`run.status`
    /// of a run whose outputs add up to more). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_omitted: bool,
    pub error: Option<String>,
    /// When the attempt opened, and when it ended (`None` while it runs or waits).
    pub started_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub decision_id: String,
    pub run_id: String,
    pub attempt_id: String,
    pub node_id: String,
    pub kind: String,
    pub request: Value,
    /// Left out of this `run.status` reply to fit it (a closed decision). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub request_omitted: bool,
    pub status: String,
    pub answer: Option<Value>,
    /// Left out of this `run.status` reply to fit it. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answer_omitted: bool,
    pub answered_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectRecord {
    pub effect_id: String,
    pub run_id: String,
    pub attempt_id: String,
    pub effect_key: String,
    pub fingerprint: String,
    pub state: String,
    pub retry_contract: String,
    pub receipt: Option<Value>,
    /// Left out of this `run.status` reply to fit it (a settled effect's receipt, which its
    /// attempt's output usually repeats). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub receipt_omitted: bool,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionRecord {
    pub interaction_id: String,
    pub run_id: String,
    pub attempt_id: String,
    pub node_id: String,
    pub origin_session: Option<String>,
    pub kind: String,
    pub request: Value,
    /// Left out of this `run.status` reply to fit it (a closed interaction). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub request_omitted: bool,
    pub deadline_at: Option<UnixMillis>,
    pub status: String,
    /// The latest submission for this request, if any: a client shows the model why its last
    /// result was rejected (`state` `rejected` with the workflow's `validate` error).
    pub last_submission: Option<SubmissionSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageRecord {
    pub message_id: String,
    pub run_id: String,
    /// `None` for a run without an origin session: no session claims it.
    pub origin_session: Option<String>,
    pub kind: String,
    pub content: Value,
    /// Whether `content` was left out to fit a reply (it is then `null`). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_omitted: bool,
    pub delivered_at: Option<UnixMillis>,
}

/// What a cancellation closed, all in its one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelSummary {
    pub attempts_closed: usize,
    pub decisions_cancelled: usize,
    pub interactions_cancelled: usize,
    pub submissions_rejected: usize,
    pub effects_cancelled: usize,
    pub effects_uncertain: usize,
}

/// A child row, for status and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildRecord {
    pub child_epoch: i64,
    pub run_id: String,
    pub generation: u64,
    pub host_epoch: i64,
    pub mode: String,
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub handshake: bool,
    pub exited: bool,
}

/// One contradiction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier of the check (the store's are `'static`; a client reads it owned).
    pub code: std::borrow::Cow<'static, str>,
    pub run_id: String,
    /// The rows involved (attempt, decision, interaction, effect ids ...).
    pub ids: Vec<String>,
    pub detail: String,
    /// Whether `repair` can fix it from durable evidence.
    pub repairable: bool,
}

/// What `repair` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairReport {
    pub repaired: Vec<Finding>,
    /// The runs the repair wrote, each with its revision before: whose events to publish.
    #[serde(skip)]
    pub runs_written: Vec<(String, u64)>,
    /// Findings that need a person (the evidence does not decide the fix).
    pub left_for_review: Vec<Finding>,
}

/// The latest update of a run for one `(type, key)` (`run.status` → `updates`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateRecord {
    #[serde(rename = "type")]
    pub update_type: String,
    pub key: String,
    pub node_id: Option<String>,
    pub attempt_id: Option<String>,
    pub data: Value,
    /// `data` was left out so that `run.status` fits a frame. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_omitted: bool,
    pub seq: u64,
    pub at: UnixMillis,
    /// A counted progress track's `[at, completed]` pairs of its current estimation epoch,
    /// oldest first (at most nine).
    pub samples: Vec<(UnixMillis, f64)>,
}

/// The state of one submission, without its payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmissionSummary {
    pub submission_id: String,
    pub state: String,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubmissionRecord {
    pub submission_id: String,
    pub interaction_id: String,
    pub payload: Value,
    pub state: String,
    pub error: Option<String>,
}

/// The authority a writer holds over one run.
///
/// The token is secret: `Debug` redacts it and only its hash reaches the database.
#[derive(Debug, Clone)]
pub struct Claim {
    pub run_id: String,
    pub owner_kind: OwnerKind,
    pub owner_id: String,
    pub generation: u64,
    pub token: ClaimToken,
}

/// How a write that may or may not need ownership is authorized.
#[derive(Debug, Clone, Copy)]
pub enum Fence<'a> {
    /// The writer holds this claim; the fence checks and renews it.
    Claim(&'a Claim),
    /// The writer holds no claim; the write is refused if anyone holds a live one.
    Unclaimed,
}

/// The result of activating a queued run.
#[derive(Debug, Clone)]
pub struct Activation {
    pub claim: Claim,
    pub mode: ChildMode,
    pub resume: Resume,
    pub revision: u64,
}

/// Everything needed to create a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewRun {
    pub workflow_name: String,
    /// Root source identity (for example the canonical path of the workflow file).
    pub source_root: String,
    /// Content hash of the root source.
    pub source_hash: String,
    /// Mount name to source hash, as resolved at start.
    pub mounted_sources: Value,
    /// Data-only graph snapshot, when already known at start.
    pub definition: Option<Value>,
    pub input: Value,
    pub origin_session: Option<String>,
    pub execution_mode: ExecutionMode,
    pub project_dir: String,
}

/// Who asked a person's command on a run in review, and why: kept in its event.
#[derive(Debug, Clone, Copy)]
pub struct Provenance<'a> {
    /// The person (the CLI sends the login name) or client.
    pub by: &'a str,
    /// Why, in their words.
    pub reason: &'a str,
}

/// When a timer wakes, as the node asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// This many milliseconds after the host's clock when the timer is set.
    After(u64),
    /// At this time (Unix milliseconds); a time already past wakes at the next deadline pass.
    At(UnixMillis),
}

impl Wake {
    /// The wake time of a timer set at `now`.
    pub fn at(self, now: UnixMillis) -> UnixMillis {
        match self {
            Wake::After(ms) => now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
            Wake::At(at) => at,
        }
    }
}

/// The answer to a reserve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reservation", rename_all = "snake_case")]
pub enum Reservation {
    /// Go ahead: mark it applying, apply it, settle it. `retry` is true when an earlier
    /// application was interrupted and the retry contract allows another.
    Reserved { effect_id: String, retry: bool },
    /// It already happened: here is the stored receipt. Do not apply again.
    AlreadyApplied { effect_id: String, receipt: Value },
    /// It already failed definitively: here is the stored error.
    AlreadyFailed { effect_id: String, error: String },
}

/// Identity of one durable command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandMeta {
    pub request_id: String,
    pub idempotency_key: Option<String>,
    /// Hash of the request's meaning (kind, target and payload), independent of its ids.
    pub fingerprint: String,
    pub kind: String,
    pub run_id: Option<String>,
}

/// The response of a command and whether it came from an earlier commit.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandOutcome {
    pub response: Value,
    /// The response is a stored receipt: the command had run before.
    pub replayed: bool,
    /// The receipt replayed was committed by an earlier transaction, not by this one: the
    /// answer holds whether or not this transaction commits (a client that resent a committed
    /// command must get its receipt even when the batch carrying the resend fails).
    pub committed_before: bool,
}

/// How a child ended, as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: String,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
}

/// Who presents a run's interactive steps (`agent`, `assistantMessage`) and so holds their
/// time: a step's deadline counts only the time it is held (`WriteTx::hold_interactions`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// An interactive run's origin session, while a live client of it follows its events.
    Session(String),
    /// A detached run's bridge (by run id), from its hello until it exits.
    Bridge(String),
}

/// An open `agent` / `assistantMessage` step of a detached run that is neither paused nor in
/// review: what a bridge serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedStep {
    pub run_id: String,
    pub interaction_id: String,
    pub attempt_id: String,
    pub node_id: String,
    /// `pending` (waits for a submission) or `validating` (one is being judged).
    pub validating: bool,
    pub project_dir: String,
}

/// Which finished runs a prune removes: each given selector must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneSelector {
    /// Only runs in these statuses, each a finished one; empty: every finished status.
    pub statuses: Vec<RunStatus>,
    /// Only runs that finished before this time.
    pub finished_before: Option<UnixMillis>,
    /// The newest this many finished runs (of the selected statuses, by start) always stay.
    pub keep: Option<u64>,
}

/// Where the child of a fresh activation picks up, derived from durable state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "resume", rename_all = "snake_case")]
pub enum Resume {
    /// No open attempt: start the run's current node (or the graph's start node when none).
    Fresh { node_id: Option<String> },
    /// A waiting attempt was answered (checkpoint or human decision); continue it.
    Continue { node_id: String, attempt_id: String },
    /// A submission awaits validation by the workflow's `validate` (child mode `validate`).
    Validate {
        node_id: String,
        attempt_id: String,
        submission_id: String,
    },
    /// The interaction's deadline passed: record the attempt as timed out and route.
    InteractionExpired { node_id: String, attempt_id: String },
    /// A submission was accepted, but the child that accepted it went away before it
    /// proposed the transition: continue the attempt with the accepted submission's payload
    /// as the node's output (child mode `run`).
    Accepted {
        node_id: String,
        attempt_id: String,
        submission_id: String,
    },
    /// The attempt's timer fired: continue it with the output saved with the timer (child
    /// mode `run`; the hello reply's `timer`).
    TimerFired { node_id: String, attempt_id: String },
}

/// What became of one progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressKept {
    /// The run's revision after it (its event's `seq` when the event was kept).
    pub seq: u64,
    /// Whether its event was kept (else it was over the run's event budget).
    pub event_kept: bool,
}

/// A child's proposal to close the current attempt and start the next node.
#[derive(Debug, Clone)]
pub struct TransitionRequest {
    pub attempt_id: String,
    pub outcome: AttemptOutcome,
    pub next_node: String,
    pub next_deadline_at: Option<UnixMillis>,
}

/// What a committed transition produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transitioned {
    pub next_attempt_id: String,
    pub revision: u64,
    /// A pause was requested: the owner should park the run at this boundary.
    pub pause_requested: bool,
}

/// One run that recovery or a child loss put back (or stopped for review).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoveredRun {
    pub run_id: String,
    pub status: RunStatus,
    pub reason: String,
}

/// A timer set by [`Timers::wait_until`](super::port::Timers::wait_until).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerSet {
    pub timer_id: String,
    pub wake_at: UnixMillis,
}

/// What the store holds of a value after a chunk: how many bytes, in order from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePut {
    /// Bytes stored so far: where the next chunk starts.
    pub received: u64,
    /// Whether the value is whole (and its hash checked).
    pub complete: bool,
}

/// A piece of a stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueChunk {
    /// The value's whole length.
    pub bytes: u64,
    /// Where `data` starts.
    pub offset: u64,
    pub data: Vec<u8>,
}

/// One row of the viewer projection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunView {
    pub run_id: String,
    pub workflow_name: String,
    pub origin_session: Option<String>,
    pub status: String,
    pub paused: bool,
    pub current_node: Option<String>,
    pub revision: u64,
    pub last_event: String,
    pub updated_at: UnixMillis,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    pub run_id: String,
    pub seq: u64,
    pub kind: String,
    pub at: UnixMillis,
    pub data: Value,
}

/// A page of the runs a selector matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrunablePage {
    /// Oldest start first.
    pub runs: Vec<RunListKey>,
    /// More runs match after the last of this page.
    pub more: bool,
}

/// The latest finished attempt of one node of a run (see [`HostOps::latest_results`](super::port::HostOps::latest_results)).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeResult {
    /// The node id.
    pub node: String,
    /// `succeeded`, `failed` or `timed_out`.
    pub status: String,
    /// The output (`null` unless it succeeded).
    pub output: Value,
    /// The error of a failed attempt.
    pub error: Option<String>,
    /// How many attempts of the node finished (its visits so far; an interrupted attempt does
    /// not count, so a node rerun after a crash is the same visit).
    pub finished: u64,
}

/// What `message.claim` took: the messages, oldest first, and whether undelivered messages
/// were left unclaimed so that the reply fits a frame (claim again after acknowledging these).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedMessages {
    pub messages: Vec<MessageRecord>,
    pub more: bool,
}

/// The secret a database signs its cursors with (32 random bytes made with the database and
/// kept in it). Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct CursorKey(pub [u8; 32]);

impl fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CursorKey(..)")
    }
}
