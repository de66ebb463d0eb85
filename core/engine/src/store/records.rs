//! The rows the store hands out, as the engine, the replies and the clients read them. The
//! store maps its rows onto these (`piw_core::store`); nothing here knows SQL. None of them
//! carries a claim token or its hash.

use serde::Serialize;
use serde_json::Value;

use super::model::*;
use crate::time::UnixMillis;

/// A run as stored (without the definition snapshot and input, which can be large).
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    #[serde(skip_serializing_if = "std::ops::Not::not")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimInfo {
    pub generation: u64,
    pub owner_kind: Option<OwnerKind>,
    pub owner_id: Option<String>,
    pub heartbeat_at: Option<UnixMillis>,
    pub expires_at: Option<UnixMillis>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    pub attempt_id: String,
    pub node_id: String,
    pub ordinal: u64,
    pub generation: u64,
    /// As stored (`succeeded`, ...); clients see it in the authoring words (`ok`, ...).
    #[serde(serialize_with = "crate::protocol::serialize_outcome_word")]
    pub status: String,
    pub deadline_at: Option<UnixMillis>,
    pub output: Option<Value>,
    /// The output was left out of this reply to keep it under the frame limit (`run.status`
    /// of a run whose outputs add up to more). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub output_omitted: bool,
    pub error: Option<String>,
    /// When the attempt opened, and when it ended (`None` while it runs or waits).
    pub started_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    pub decision_id: String,
    pub run_id: String,
    pub attempt_id: String,
    pub node_id: String,
    pub kind: String,
    pub request: Value,
    /// Left out of this `run.status` reply to fit it (a closed decision). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub request_omitted: bool,
    pub status: String,
    pub answer: Option<Value>,
    /// Left out of this `run.status` reply to fit it. Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub answer_omitted: bool,
    pub answered_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub receipt_omitted: bool,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InteractionRecord {
    pub interaction_id: String,
    pub run_id: String,
    pub attempt_id: String,
    pub node_id: String,
    pub origin_session: Option<String>,
    pub kind: String,
    pub request: Value,
    /// Left out of this `run.status` reply to fit it (a closed interaction). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub request_omitted: bool,
    pub deadline_at: Option<UnixMillis>,
    pub status: String,
    /// The latest submission for this request, if any: a client shows the model why its last
    /// result was rejected (`state` `rejected` with the workflow's `validate` error).
    pub last_submission: Option<SubmissionSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageRecord {
    pub message_id: String,
    pub run_id: String,
    /// `None` for a run without an origin session: no session claims it.
    pub origin_session: Option<String>,
    pub kind: String,
    pub content: Value,
    /// Whether `content` was left out to fit a reply (it is then `null`). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub content_omitted: bool,
    pub delivered_at: Option<UnixMillis>,
}

/// What a cancellation closed, all in its one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CancelSummary {
    pub attempts_closed: usize,
    pub decisions_cancelled: usize,
    pub interactions_cancelled: usize,
    pub submissions_rejected: usize,
    pub effects_cancelled: usize,
    pub effects_uncertain: usize,
}

/// A child row, for status and tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable identifier of the check.
    pub code: &'static str,
    pub run_id: String,
    /// The rows involved (attempt, decision, interaction, effect ids ...).
    pub ids: Vec<String>,
    pub detail: String,
    /// Whether `repair` can fix it from durable evidence.
    pub repairable: bool,
}

/// What `repair` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    pub repaired: Vec<Finding>,
    /// The runs the repair wrote, each with its revision before: whose events to publish.
    #[serde(skip)]
    pub runs_written: Vec<(String, u64)>,
    /// Findings that need a person (the evidence does not decide the fix).
    pub left_for_review: Vec<Finding>,
}

/// The latest update of a run for one `(type, key)` (`run.status` → `updates`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpdateRecord {
    #[serde(rename = "type")]
    pub update_type: String,
    pub key: String,
    pub node_id: Option<String>,
    pub attempt_id: Option<String>,
    pub data: Value,
    /// `data` was left out so that `run.status` fits a frame. Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub data_omitted: bool,
    pub seq: u64,
    pub at: UnixMillis,
    /// A counted progress track's `[at, completed]` pairs of its current estimation epoch,
    /// oldest first (at most nine).
    pub samples: Vec<(UnixMillis, f64)>,
}

/// The state of one submission, without its payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
