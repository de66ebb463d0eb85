//! The body of each request kind's receipt, typed as the requests are. The host builds one of
//! these per reply and turns it into the receipt's JSON body at one edge ([`body_of`]); the
//! field names and their order are what clients read (`docs/WORKFLOW_SERVER.md`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::{
    Answerer, AttemptRecord, CancelSummary, ChildMode, ChildRecord, ClaimInfo, DecisionRecord,
    EffectRecord, EffectState, Finding, InteractionRecord, MessageRecord, RepairReport, RunRecord,
    RunStatus, UpdateRecord,
};
use crate::time::UnixMillis;

use super::payload::RunListCursor;

/// The JSON body of a receipt carrying `reply`.
pub fn body_of<T: Serialize>(reply: &T) -> serde_json::Result<Value> {
    serde_json::to_value(reply)
}

/// A reply a client reads back from a receipt's body ([`super::Receipt::reply`]).
pub trait Reply: serde::de::DeserializeOwned {}

impl Reply for RunQueued {}
impl Reply for InteractionSubmitted {}
impl Reply for RunStatusReply {}
impl Reply for RunListReply {}
impl Reply for DiagnoseReply {}
impl Reply for RepairReply {}
impl Reply for HostStatusReply {}
impl Reply for PruneListed {}
impl Reply for Pruned {}
impl Reply for ValuePiece {}

/// `run.start` and `run.retry`: the run and the status the command left it in.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunQueued {
    /// The run.
    pub run_id: String,
    /// `queued` (or `waiting` after a retry whose attempt waits on an unanswered request).
    pub status: RunStatus,
}

/// `run.pause` and `run.resume`.
#[derive(Debug, Serialize)]
pub struct RunPaused {
    /// The run.
    pub run_id: String,
    /// Whether the run is paused now.
    pub paused: bool,
}

/// `run.detach`.
#[derive(Debug, Serialize)]
pub struct RunDetached {
    /// The run.
    pub run_id: String,
    /// Always `detached`.
    pub execution_mode: crate::store::ExecutionMode,
    /// Whether this command changed it (`false`: the run already was detached).
    pub changed: bool,
}

/// `run.cancel`.
#[derive(Debug, Serialize)]
pub struct RunCancelled {
    /// The run.
    pub run_id: String,
    /// Always `cancelled`.
    pub status: RunStatus,
    /// What the cancellation closed.
    pub summary: CancelSummary,
}

/// `effect.resolve`.
#[derive(Debug, Serialize)]
pub struct EffectResolved {
    /// The run.
    pub run_id: String,
    /// The effect resolved.
    pub effect_id: String,
    /// `applied` or `failed`, as the person said.
    pub state: EffectState,
    /// The run's status after it.
    pub status: RunStatus,
}

/// `checkpoint.answer` and `decision.answer`.
#[derive(Debug, Serialize)]
pub struct DecisionAnswered {
    /// The decision answered.
    pub decision_id: String,
    /// Who answered: the model (a checkpoint) or a person (a protected decision).
    pub answered_by: Answerer,
}

/// `interaction.submit`.
#[derive(Debug, Serialize, Deserialize)]
pub struct InteractionSubmitted {
    /// The interactive request.
    pub interaction_id: String,
    /// The submission that holds the result.
    pub submission_id: String,
    /// The submission's state (`validating` for a new one).
    pub state: String,
    /// Whether this repeats a result the request already took (the original submission).
    pub repeated: bool,
}

/// `interaction.fail`.
#[derive(Debug, Serialize)]
pub struct InteractionFailed {
    /// The interactive request.
    pub interaction_id: String,
    /// The node the run goes on with, when the graph routes `failed` somewhere.
    pub routed_to: Option<String>,
}

/// `interaction.update`.
#[derive(Debug, Serialize)]
pub struct InteractionUpdated {
    /// The interactive request.
    pub interaction_id: String,
    /// The run's revision after the update.
    pub seq: u64,
    /// Whether its event was kept (else it was over the run's event budget).
    pub event_kept: bool,
}

/// `message.claim`.
#[derive(Debug, Serialize)]
pub struct MessagesClaimed {
    /// The messages claimed (as many as fit the reply).
    pub messages: Vec<MessageRecord>,
    /// Whether more are waiting.
    pub more: bool,
}

/// `message.ack`.
#[derive(Debug, Serialize)]
pub struct MessageAcked {
    /// The message acknowledged.
    pub message_id: String,
    /// When it was delivered (the first acknowledgement).
    pub delivered_at: UnixMillis,
}

/// `run.status`: one run, fitted under the frame limit.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunStatusReply {
    /// The run.
    pub run: RunRecord,
    /// Who holds its claim.
    pub claim: ClaimInfo,
    /// A page of its attempts, newest first.
    pub attempts: Vec<AttemptRecord>,
    /// How many attempts it has in all.
    pub attempt_count: u64,
    /// Its decisions.
    pub decisions: Vec<DecisionRecord>,
    /// Its interactive requests.
    pub interactions: Vec<InteractionRecord>,
    /// Its managed effects.
    pub effects: Vec<EffectRecord>,
    /// Its newest child.
    pub last_child: Option<ChildRecord>,
    /// Its progress updates.
    pub updates: Vec<UpdateRecord>,
    /// How many of its events were over its event budget.
    pub events_dropped: u64,
    /// Its newest workflow messages (notify and terminal), oldest of them first: what a
    /// detached run said, or what its origin session was sent.
    pub messages: Vec<MessageRecord>,
    /// How many workflow messages it has in all.
    pub message_count: u64,
    /// Who serves its open interactive step now, as the host sees it; absent when it has
    /// none (or is paused, or has ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_service: Option<StepService>,
}

/// Who serves a run's open interactive step (`agent`, `assistantMessage`) now: what a client
/// tells a person whose run waits on such a step, so a run nobody can serve never just waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepService {
    /// The open step (`int-…`).
    pub interaction_id: String,
    /// `session`: its Pi session presents it now; `bridge`: a Pi the host started for it
    /// serves it; `bridge_starting`: the host starts one (a model is named; it waits for a
    /// child slot or Pi's start); `nobody`: nobody does until someone acts (`why`).
    pub served_by: String,
    /// Why nobody serves it: `session_closed` (an interactive run whose Pi session no client
    /// follows now), `no_model` (a detached run for which nothing names a Pi model, Pi's
    /// settings included), `bridges_off` (the host runs no Pi children:
    /// `PIW_DETACHED_BRIDGES=off`), `no_pi` (no Pi to start: `detail` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The Pi model serving it or to serve it, `provider/model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// More about `why` (the host's own words, for `no_pi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `run.list`: a page of runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunListReply {
    /// The runs, newest first.
    pub runs: Vec<RunRecord>,
    /// Whether more follow.
    pub more: bool,
    /// Where the next page starts.
    pub next_cursor: Option<RunListCursor>,
}

/// `interaction.list`.
#[derive(Debug, Serialize)]
pub struct InteractionListReply {
    /// Pending requests, oldest first, as many as fit.
    pub interactions: Vec<InteractionRecord>,
    /// Whether more are pending.
    pub more: bool,
}

/// `diagnose`.
#[derive(Debug, Serialize, Deserialize)]
pub struct DiagnoseReply {
    /// Every contradiction found.
    pub findings: Vec<Finding>,
}

/// `repair`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RepairReply {
    /// What the repair did.
    pub report: RepairReport,
}

/// The store thread's part of `host.status` (the rest is the driver's facts).
#[derive(Debug, Serialize, Deserialize)]
pub struct HostCounts {
    /// Active child processes (abandoned launches being stopped included).
    pub active_children: usize,
    /// How many runs are in each status (statuses without runs left out).
    pub runs: BTreeMap<String, u64>,
    /// The decision channels configured and their adapters' state (never a credential).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<Value>,
}

/// `host.status`: host health and identity.
#[derive(Debug, Serialize, Deserialize)]
pub struct HostStatusReply {
    /// The host's process id.
    pub pid: u32,
    /// The host's epoch.
    pub epoch: i64,
    /// How long the host has been up.
    pub uptime_ms: u64,
    /// The socket it serves.
    pub socket: String,
    /// Its state database.
    pub database: String,
    /// The installation's home.
    pub home: String,
    /// The database's schema id.
    pub schema_id: String,
    /// How many runs are in each status (`null` when the store thread did not answer).
    pub runs: Option<BTreeMap<String, u64>>,
    /// Active child processes (`null` when the store thread did not answer).
    pub active_children: Option<usize>,
    /// The most children it runs at once: `PIW_MAX_CHILDREN`, or fewer when its open-file
    /// limit holds fewer beside its connections.
    pub child_slots: usize,
    /// The most client connections it keeps open (children's connections are counted apart).
    pub max_connections: usize,
    /// Standby workers waiting for a run.
    pub standby_workers: usize,
    /// Whether the host is stopping.
    pub stopping: bool,
    /// The workflow file suffixes it runs.
    pub runtimes: Vec<String>,
    /// Log writes that failed since it started.
    pub log_writes_lost: u64,
    /// Each decision channel configured: `{name, kind, state, restart_in_ms, exits_in_a_row,
    /// launches}` (`state`: `running`, `restarting` after its adapter exited, `stopped`);
    /// never its credentials.
    pub channels: Vec<Value>,
}

/// `channel.reload`: the decision channels the host read.
#[derive(Debug, Serialize)]
pub struct ChannelsReloaded {
    /// Their names.
    pub channels: Vec<String>,
}

/// `host.stop`.
#[derive(Debug, Serialize)]
pub struct HostStopping {
    /// Always true: the host has begun to stop.
    pub stopping: bool,
}

/// `subscribe` (as the connection answers it) and `unsubscribe`.
#[derive(Debug, Serialize)]
pub struct Subscription {
    /// The subscription made or ended.
    pub subscription_id: String,
}

/// A worker's step the host refused (past the step limit, or off the graph): the run failed
/// with the reason, and this is the command's committed result.
#[derive(Debug, Serialize)]
pub struct StepRefused {
    /// Why.
    pub refused: String,
    /// Always `failed`.
    pub status: RunStatus,
}

/// The reply to a worker's step: what the step did, or why it was refused.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Stepped<T> {
    /// The step was taken.
    Taken(T),
    /// The step was refused and the run failed.
    Refused(StepRefused),
}

/// `worker.node_started`.
#[derive(Debug, Serialize)]
pub struct NodeStarted {
    /// The attempt opened.
    pub attempt_id: String,
    /// When the host times it out.
    pub deadline_at: Option<i64>,
}

/// `worker.transition`.
#[derive(Debug, Serialize)]
pub struct Transitioned {
    /// The next node's attempt.
    pub attempt_id: String,
    /// Whether the run parked instead (a pause was asked for): the child stops.
    pub parked: bool,
    /// When the host times the next attempt out.
    pub deadline_at: Option<i64>,
}

/// `worker.complete` and `worker.fail`: the run's status after it.
#[derive(Debug, Serialize)]
pub struct RunEnded {
    /// `completed`, `failed` or `review`.
    pub status: RunStatus,
}

/// `worker.progress`.
#[derive(Debug, Serialize)]
pub struct ProgressRecorded {
    /// The run's revision after it.
    pub seq: u64,
    /// Whether its event was kept (else it was over the run's event budget).
    pub event_kept: bool,
}

/// `worker.wait`.
#[derive(Debug, Serialize)]
pub struct DecisionRequested {
    /// The decision the run waits on.
    pub decision_id: String,
}

/// `worker.interaction_request`.
#[derive(Debug, Serialize)]
pub struct InteractionRequested {
    /// The interactive request the run waits on.
    pub interaction_id: String,
    /// The node's deadline, which the host enforces while no worker runs.
    pub deadline_at: Option<i64>,
}

/// `run.prune` with `dry_run`: what would go.
#[derive(Debug, Serialize, Deserialize)]
pub struct PruneListed {
    /// Always `true`.
    pub dry_run: bool,
    /// How many runs the selectors pick.
    pub count: u64,
    /// A page of them, oldest first.
    pub run_ids: Vec<String>,
    /// Whether more follow (ask again with `next_cursor`).
    pub more: bool,
    /// Where the next page starts.
    pub next_cursor: Option<RunListCursor>,
}

/// `run.prune`: one batch removed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pruned {
    /// Always `false`.
    pub dry_run: bool,
    /// The runs this batch removed.
    pub removed: Vec<String>,
    /// Whether more are left (send the request again).
    pub more: bool,
}

/// `value.get`: a piece of a large value.
#[derive(Debug, Serialize, Deserialize)]
pub struct ValuePiece {
    /// The value.
    pub sha256: String,
    /// Its whole length.
    pub bytes: u64,
    /// Where this piece starts.
    pub offset: u64,
    /// The piece, hex-encoded.
    pub data: String,
    /// Whether more follows it.
    pub more: bool,
}

/// `worker.value_put`: how much of the value is stored now.
#[derive(Debug, Serialize)]
pub struct ValueStored {
    /// Bytes stored so far.
    pub received: u64,
    /// Whether the value is whole (its hash checked).
    pub complete: bool,
}

/// `worker.wait_until`: the durable timer the run now waits on.
#[derive(Debug, Serialize)]
pub struct TimerSet {
    /// The timer.
    pub timer_id: String,
    /// When it fires (Unix milliseconds), decided once by the host.
    pub wake_at: i64,
}

/// `worker.notify`.
#[derive(Debug, Serialize)]
pub struct Notified {
    /// The workflow message recorded (for the origin session, or kept for `run.status`).
    pub message_id: String,
}

/// `worker.effect_applying` and `worker.effect_settle`.
#[derive(Debug, Serialize)]
pub struct EffectRecorded {
    /// The effect.
    pub effect_id: String,
}

/// `worker.validation_result`.
#[derive(Debug, Serialize)]
pub struct VerdictRecorded {
    /// The submission judged.
    pub submission_id: String,
    /// Whether it was accepted.
    pub accepted: bool,
}

/// `worker.exit`: an empty object.
#[derive(Debug, Serialize)]
pub struct WorkerExited {}

/// `worker.results`: a page of node results.
#[derive(Debug, Serialize)]
pub struct ResultsPage {
    /// Node results, in the order they finished.
    pub results: Vec<NodeResultBody>,
    /// Whether more follow.
    pub more: bool,
}

/// `worker.hello`: what a child needs to pick up its run, or why it must stop.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum HelloReply {
    /// The run cannot go on (its graph is invalid or changed, or its first step was refused):
    /// the child stops.
    Stop {
        /// Why.
        stop: String,
    },
    /// Where the child picks up.
    Context(Box<WorkerContext>),
}

/// Where a child picks up its run (the `worker.hello` reply).
#[derive(Debug, Serialize)]
pub struct WorkerContext {
    /// `run` or `validate`.
    pub mode: ChildMode,
    /// Where to resume (the store's `Resume`, with the attempt the host opened for a fresh
    /// start when the child asked it to).
    pub resume: Value,
    /// The run's input.
    pub input: Value,
    /// The input of the node the child starts with: the latest succeeded output.
    pub node_input: Value,
    /// The latest result of every node that finished, as many as fit (see `results_more`).
    pub results: Vec<NodeResultBody>,
    /// The run's graph snapshot.
    pub definition: Option<Value>,
    /// What this host supports beyond the protocol's base.
    pub features: &'static [&'static str],
    /// Report every step as it is taken (after a lost child); left out when false.
    #[serde(skip_serializing_if = "is_false")]
    pub report_each_step: bool,
    /// The answer to the attempt the child resumes, when it resumes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
    /// The fired timer a `timer_fired` resume continues after: `{timer_id, wake_at, output}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer: Option<Value>,
    /// The submission a validating child judges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submission: Option<SubmissionToJudge>,
    /// More results follow through `worker.results`; left out when false.
    #[serde(skip_serializing_if = "is_false")]
    pub results_more: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// The submission a validating child judges.
#[derive(Debug, Serialize)]
pub struct SubmissionToJudge {
    /// The submission.
    pub submission_id: String,
    /// What was submitted.
    pub payload: Value,
}

/// The latest finished attempt of one node, as a workflow routes on it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeResultBody {
    /// The node.
    pub node: String,
    /// `ok`, `failed` or `timed_out` (`$result.outcome`).
    pub outcome: String,
    /// Its output (`null` unless it succeeded).
    pub output: Value,
    /// The error of a failed attempt.
    pub error: Option<String>,
    /// How many attempts of the node finished.
    pub visits: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The typed bodies are the JSON clients have always read: the same names and values.
    #[test]
    fn typed_bodies_are_the_json_clients_read() {
        let cases = [
            (
                body_of(&RunQueued {
                    run_id: "r".into(),
                    status: RunStatus::Queued,
                }),
                json!({ "run_id": "r", "status": "queued" }),
            ),
            (
                body_of(&RunPaused {
                    run_id: "r".into(),
                    paused: true,
                }),
                json!({ "run_id": "r", "paused": true }),
            ),
            (
                body_of(&RunCancelled {
                    run_id: "r".into(),
                    status: RunStatus::Cancelled,
                    summary: CancelSummary::default(),
                }),
                json!({ "run_id": "r", "status": "cancelled",
                        "summary": CancelSummary::default() }),
            ),
            (
                body_of(&EffectResolved {
                    run_id: "r".into(),
                    effect_id: "e".into(),
                    state: EffectState::Applied,
                    status: RunStatus::TimedOut,
                }),
                json!({ "run_id": "r", "effect_id": "e", "state": "applied",
                        "status": "timed_out" }),
            ),
            (
                body_of(&DecisionAnswered {
                    decision_id: "d".into(),
                    answered_by: Answerer::Person,
                }),
                json!({ "decision_id": "d", "answered_by": "person" }),
            ),
            (
                body_of(&InteractionFailed {
                    interaction_id: "i".into(),
                    routed_to: None,
                }),
                json!({ "interaction_id": "i", "routed_to": null }),
            ),
            (
                body_of(&HostCounts {
                    channels: Vec::new(),
                    active_children: 2,
                    runs: [("queued".to_owned(), 1), ("completed".to_owned(), 3)]
                        .into_iter()
                        .collect(),
                }),
                json!({ "runs": { "completed": 3, "queued": 1 }, "active_children": 2 }),
            ),
            (body_of(&()), Value::Null),
            (body_of(&WorkerExited {}), json!({})),
            (
                body_of(&HelloReply::Stop { stop: "x".into() }),
                json!({ "stop": "x" }),
            ),
            (
                body_of(&HelloReply::Context(Box::new(WorkerContext {
                    mode: ChildMode::Run,
                    resume: json!({ "resume": "fresh", "node_id": null }),
                    input: json!(1),
                    node_input: json!(2),
                    results: Vec::new(),
                    definition: None,
                    features: &["f"],
                    report_each_step: false,
                    answer: None,
                    timer: None,
                    submission: None,
                    results_more: false,
                }))),
                json!({ "mode": "run", "resume": { "resume": "fresh", "node_id": null },
                        "input": 1, "node_input": 2, "results": [], "definition": null,
                        "features": ["f"] }),
            ),
            (
                body_of(&HelloReply::Context(Box::new(WorkerContext {
                    mode: ChildMode::Validate,
                    resume: Value::Null,
                    input: Value::Null,
                    node_input: Value::Null,
                    results: vec![NodeResultBody {
                        node: "n".into(),
                        outcome: "ok".into(),
                        output: json!(3),
                        error: None,
                        visits: 1,
                    }],
                    definition: None,
                    features: &[],
                    report_each_step: true,
                    answer: Some(Value::Null),
                    timer: None,
                    submission: Some(SubmissionToJudge {
                        submission_id: "s".into(),
                        payload: json!(4),
                    }),
                    results_more: true,
                }))),
                json!({ "mode": "validate", "resume": null, "input": null, "node_input": null,
                        "results": [{ "node": "n", "outcome": "ok", "output": 3,
                                      "error": null, "visits": 1 }],
                        "definition": null, "features": [], "report_each_step": true,
                        "answer": null, "submission": { "submission_id": "s", "payload": 4 },
                        "results_more": true }),
            ),
            (
                body_of(&Stepped::<NodeStarted>::Refused(StepRefused {
                    refused: "why".into(),
                    status: RunStatus::Failed,
                })),
                json!({ "refused": "why", "status": "failed" }),
            ),
            (
                body_of(&Stepped::Taken(NodeStarted {
                    attempt_id: "a".into(),
                    deadline_at: None,
                })),
                json!({ "attempt_id": "a", "deadline_at": null }),
            ),
        ];
        for (typed, expected) in cases {
            let typed = typed.expect("serializes");
            assert_eq!(typed, expected);
            assert_eq!(typed.to_string(), expected.to_string());
        }
    }
}
