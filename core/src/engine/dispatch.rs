//! What each request does to the store. Runs on the store thread, inside the batch
//! transaction for writes. Maps store errors to the protocol's stable rejection codes.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::graph::{Graph, Outcome, Route};
use crate::protocol::{json_len, payload, Receipt, Rejection, RejectionCode, Request, RequestBody};
use crate::store::{
    Answerer, Claim, ClaimLostReason, CommandMeta, EffectResult, Fence, NewRun, Provenance,
    RunStatus, Store, StoreError, WriteTx,
};

/// How long a claimed workflow message stays with one client before another may take it.
pub const MESSAGE_CLAIM_LEASE_MS: i64 = 60_000;

/// In-memory facts the store thread keeps between batches.
#[derive(Debug, Default)]
pub struct HostState {
    /// The owner id of this host's claims (`host-epoch-N`).
    pub owner_id: String,
    /// This host's epoch.
    pub epoch: i64,
    /// Claims this host holds, by run id (one per running run with a child).
    pub claims: HashMap<String, Claim>,
    /// Launched children, by run id.
    pub children: HashMap<String, super::children::ChildEntry>,
    /// Parsed graph snapshots of runs with children.
    pub graphs: HashMap<String, crate::graph::Graph>,
    /// When each held claim was last renewed (by a write or a heartbeat).
    pub renewed_at: HashMap<String, i64>,
    pub child_config: super::children::ChildConfig,
    /// Whether children may be launched and stopped: true from the host's start until it
    /// stops (then the supervisor stops every child itself).
    pub supervising: bool,
    /// What the supervisor must do (launch, stop), decided and not yet handed to it: the store
    /// thread sends these on (`store_thread::send_child_commands`), so deciding code holds no
    /// channel.
    pub child_commands: Vec<super::children::SupervisorCmd>,
    /// The socket children connect to.
    pub socket_path: std::path::PathBuf,
    /// This installation's [`crate::driver::supervision_scope`], computed once: every child's marker
    /// starts with it.
    pub supervision_scope: String,
    /// The largest reply frame connections send (`Limits::max_frame_bytes`): `run.status`
    /// fits its reply under it.
    pub reply_limit: usize,
    pub shutting_down: bool,
    /// Runs whose committed events subscribers were not sent yet, each with its revision
    /// before them, in the order they were written: what the deciding code asks to publish
    /// (the store thread publishes them through its outbox), so it holds no channel.
    pub unpublished: Vec<(String, u64)>,
    /// Runs whose last child was a standby worker that died before its hello, and whose loss
    /// was therefore not counted (`children::on_child_report`); cleared by the next hello.
    pub forgiven_standby_exits: std::collections::HashSet<String>,
    /// The number the next launch gets (unique for this host's life).
    pub next_launch: u64,
    /// Launches whose transaction failed to commit after their child was already handed its
    /// envelope, by launch number, with their run: the child is being stopped, and every
    /// report about it is ignored (its run, generation and child epoch were never committed
    /// and may be issued again). Until it has exited it still holds a child slot, and its run
    /// is not launched again.
    pub abandoned_launches: HashMap<u64, String>,
    /// The last activation commit failed after launching children: launch after the commit
    /// until one succeeds, so a commit that keeps failing (a full disk) does not start and
    /// stop children in a loop.
    pub launch_after_commit: bool,
    /// When to try ready runs again after an activation that failed (its commit, or the
    /// activation itself): nothing else may wake the store thread for them.
    pub activation_retry_at: Option<i64>,
    /// The delay before the last such retry (it doubles while activations keep failing).
    pub activation_retry_delay_ms: i64,
    /// Detached runs' bridges (`super::bridges`).
    pub bridges: super::bridges::Bridges,
}

impl HostState {
    /// Child processes this host runs or is still stopping (abandoned launches included).
    pub fn live_children(&self) -> usize {
        self.children.len()
            + self.abandoned_launches.len()
            + self.bridges.slots_held(&self.children)
    }
}

/// The stable protocol code for a store error.
pub fn rejection_for(err: &StoreError) -> Rejection {
    let code = match err {
        StoreError::ClaimLost {
            reason: ClaimLostReason::GenerationMismatch,
            ..
        } => RejectionCode::StaleGeneration,
        StoreError::ClaimLost { .. } => RejectionCode::ClaimLost,
        StoreError::RunNotFound(_) | StoreError::NotFound { .. } => RejectionCode::NotFound,
        StoreError::InvalidTransition { .. } | StoreError::StepLimitReached { .. } => {
            RejectionCode::InvalidTransition
        }
        StoreError::StaleRevision { .. } => RejectionCode::StaleRevision,
        StoreError::StaleAttempt { .. } | StoreError::DeadlinePassed { .. } => {
            RejectionCode::StaleAttempt
        }
        StoreError::IdempotencyConflict { .. } => RejectionCode::IdempotencyConflict,
        StoreError::EffectConflict { .. } => RejectionCode::EffectConflict,
        StoreError::EffectUncertain { .. } => RejectionCode::EffectUncertain,
        StoreError::Forbidden(_) => RejectionCode::Unauthorized,
        StoreError::InvalidInput(_) | StoreError::InvalidAnswer { .. } => RejectionCode::Malformed,
        _ => RejectionCode::Internal,
    };
    let details = match err {
        StoreError::StaleRevision {
            expected, actual, ..
        } => json!({ "expected": expected, "current": actual }),
        StoreError::StaleAttempt { current, .. } => json!({ "current_attempt": current }),
        StoreError::DeadlinePassed {
            attempt_id,
            deadline_at,
            ..
        } => json!({ "current_attempt": attempt_id, "deadline_at": deadline_at }),
        StoreError::ClaimLost { reason, .. } => json!({ "reason": reason.as_str() }),
        StoreError::InvalidTransition { op, status, .. } => {
            json!({ "op": op.as_str(), "status": status.as_str() })
        }
        StoreError::InvalidAnswer { rule, .. } => rule.clone(),
        _ => Value::Null,
    };
    let message = if err.is_disk_full() {
        // Said the same whether SQLite failed a statement or the commit.
        "the disk holding the state database is full: nothing of this was stored; free some space and try again".to_owned()
    } else {
        err.to_string()
    };
    Rejection::new(code, message).with_details(details)
}

/// The durable identity of a command for its receipt.
pub fn command_meta(req: &Request) -> Result<CommandMeta, Rejection> {
    let fingerprint = req.fingerprint().map_err(|e| {
        Rejection::new(
            RejectionCode::Internal,
            format!("cannot fingerprint request: {e}"),
        )
    })?;
    Ok(CommandMeta {
        request_id: req.request_id.clone(),
        idempotency_key: req.idempotency_key.clone(),
        fingerprint,
        kind: req.body.kind_str().to_owned(),
        run_id: req.run_id.clone(),
    })
}

fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, StoreError> {
    value
        .as_deref()
        .ok_or_else(|| StoreError::InvalidInput(format!("{name} is required")))
}

/// A run start with its source already read and hashed by the connection task (file I/O
/// stays off the store thread).
#[derive(Debug, Clone)]
pub struct PreparedStart {
    pub new_run: NewRun,
}

/// Applies one durable client command inside the batch transaction and returns the receipt
/// body. It reads the host's memory and never changes it: a command of a group may run twice
/// (`WriteTx::command_group`).
pub fn apply_command(
    w: &mut WriteTx<'_>,
    state: &HostState,
    req: &Request,
    start: Option<&PreparedStart>,
) -> Result<Value, StoreError> {
    if let (Some(run_id), Some(expected)) = (&req.run_id, req.expected_revision) {
        w.expect_revision(run_id, expected)?;
    }
    match &req.body {
        RequestBody::RunStart(_) => run_start(w, start),
        RequestBody::RunPause => run_pause(w, state, req),
        RequestBody::RunResume => run_resume(w, state, req),
        RequestBody::RunCancel(cancel) => run_cancel(w, state, req, cancel),
        RequestBody::RunRetry(r) => run_retry(w, req, r),
        RequestBody::EffectResolve(e) => effect_resolve(w, req, e),
        RequestBody::CheckpointAnswer(a) => checkpoint_answer(w, req, a),
        RequestBody::DecisionAnswer(a) => decision_answer(w, req, a),
        RequestBody::InteractionSubmit(s) => interaction_submit(w, req, s),
        RequestBody::InteractionFail(f) => interaction_fail(w, state, req, f),
        RequestBody::InteractionUpdate(u) => interaction_update(w, req, u),
        RequestBody::MessageClaim(m) => message_claim(w, state, req, m),
        RequestBody::MessageAck(m) => message_ack(w, m),
        other => Err(StoreError::Forbidden(format!(
            "{} is not accepted on this connection",
            other.kind_str()
        ))),
    }
}

/// `run.start`: start a new run.
fn run_start(w: &mut WriteTx<'_>, start: Option<&PreparedStart>) -> Result<Value, StoreError> {
    let start =
        start.ok_or_else(|| StoreError::InvalidInput("run.start was not prepared".into()))?;
    let run_id = w.start_run(&start.new_run)?;
    Ok(json!({ "run_id": run_id, "status": RunStatus::Queued.as_str() }))
}

/// `run.pause`: pause a run at its next durable boundary.
fn run_pause(w: &mut WriteTx<'_>, state: &HostState, req: &Request) -> Result<Value, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let fence = fence_for(w, state, run_id)?;
    w.pause(run_id, fence)?;
    Ok(json!({ "run_id": run_id, "paused": true }))
}

/// `run.resume`: resume a paused run.
fn run_resume(w: &mut WriteTx<'_>, state: &HostState, req: &Request) -> Result<Value, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let fence = fence_for(w, state, run_id)?;
    w.resume(run_id, fence)?;
    Ok(json!({ "run_id": run_id, "paused": false }))
}

/// `run.cancel`: cancel a run.
fn run_cancel(
    w: &mut WriteTx<'_>,
    state: &HostState,
    req: &Request,
    cancel: &payload::RunCancel,
) -> Result<Value, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let reason = cancel
        .reason
        .clone()
        .unwrap_or_else(|| "cancelled by request".into());
    let summary = match fence_for(w, state, run_id)? {
        held @ Fence::Claim(_) => w.cancel(run_id, held, &reason)?,
        // A running row this host does not hold: its lease must have expired. The
        // control claim refuses live owners and fences the old one before the cancel.
        Fence::Unclaimed if w.run_row(run_id)?.status == RunStatus::Running => {
            let control = w.control_claim(run_id, &format!("{}-control", state.owner_id))?;
            w.cancel(run_id, Fence::Claim(&control), &reason)?
        }
        unclaimed => w.cancel(run_id, unclaimed, &reason)?,
    };
    // The claim is forgotten, and the child stopped, after the commit
    // (`children::forget_released_claims`).
    Ok(json!({ "run_id": run_id, "status": "cancelled", "summary": summary }))
}

/// `run.retry`: run the current node of a run in review again (a person's way out).
fn run_retry(
    w: &mut WriteTx<'_>,
    req: &Request,
    r: &payload::RunRetry,
) -> Result<Value, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let who = Provenance {
        by: r.by.as_deref().unwrap_or("unknown"),
        reason: r.reason.as_deref().unwrap_or(""),
    };
    w.retry_from_review(run_id, who)?;
    // `queued`, or `waiting` when its attempt waits on a request nobody answered.
    let (status, _) = w.run_state(run_id)?;
    Ok(json!({ "run_id": run_id, "status": status.as_str() }))
}

/// `effect.resolve`: record what became of an uncertain effect of a run in review.
fn effect_resolve(
    w: &mut WriteTx<'_>,
    req: &Request,
    e: &payload::EffectResolve,
) -> Result<Value, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let who = Provenance {
        by: e.by.as_deref().unwrap_or("unknown"),
        reason: e.reason.as_deref().unwrap_or(""),
    };
    let state = match &e.result {
        EffectResult::Applied { .. } => "applied",
        EffectResult::Failed { .. } => "failed",
    };
    w.resolve_effect(run_id, &e.effect_id, &e.result, who)?;
    let (status, _) = w.run_state(run_id)?;
    Ok(
        json!({ "run_id": run_id, "effect_id": e.effect_id, "state": state,
            "status": status.as_str() }),
    )
}

/// `checkpoint.answer`: answer an ordinary checkpoint (the model-facing path).
fn checkpoint_answer(
    w: &mut WriteTx<'_>,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<Value, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    w.answer_decision(&a.decision_id, &a.answer, Answerer::Model)?;
    Ok(json!({ "decision_id": a.decision_id, "answered_by": "model" }))
}

/// `decision.answer`: answer a protected human decision (a person in the origin session).
fn decision_answer(
    w: &mut WriteTx<'_>,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<Value, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    w.answer_decision(&a.decision_id, &a.answer, Answerer::Person)?;
    Ok(json!({ "decision_id": a.decision_id, "answered_by": "person" }))
}

/// `interaction.submit`: submit a provisional result for an interactive request.
fn interaction_submit(
    w: &mut WriteTx<'_>,
    req: &Request,
    s: &payload::InteractionSubmit,
) -> Result<Value, StoreError> {
    let attempt_id = required(&req.attempt_id, "attempt_id")?;
    w.require_interaction_of(
        required(&req.run_id, "run_id")?,
        required(&req.node_id, "node_id")?,
        &s.interaction_id,
    )?;
    // The same result again for a request that took it: the original receipt.
    if let Some((submission_id, state)) =
        w.repeated_submission(&s.interaction_id, attempt_id, &s.result)?
    {
        return Ok(json!({ "interaction_id": s.interaction_id,
                          "submission_id": submission_id, "state": state,
                          "repeated": true }));
    }
    if s.refuse_repeat {
        w.refuse_accepted_before(&s.interaction_id, &s.result)?;
    }
    let submission_id = w.submit(
        &s.interaction_id,
        attempt_id,
        &s.result,
        req.idempotency_key.as_deref(),
    )?;
    Ok(
        json!({ "interaction_id": s.interaction_id, "submission_id": submission_id,
               "state": "validating", "repeated": false }),
    )
}

/// `interaction.fail`: fail the attempt of a pending interactive request the session gave up on.
fn interaction_fail(
    w: &mut WriteTx<'_>,
    state: &HostState,
    req: &Request,
    f: &payload::InteractionFail,
) -> Result<Value, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let node_id = required(&req.node_id, "node_id")?;
    w.require_interaction_of(run_id, node_id, &f.interaction_id)?;
    // Route `failed` from the node as a child would: the stored graph decides (read
    // here, not from the host's cache: a command must not change the host's memory).
    let (_, definition, _) = w.run_payload(run_id)?;
    let graph = definition
        .as_ref()
        .map(Graph::parse)
        .transpose()
        .map_err(|e| StoreError::CorruptRow(format!("stored graph: {e}")))?
        .ok_or_else(|| StoreError::InvalidInput("the run has no graph snapshot".into()))?;
    let next = match graph.route(node_id, &Outcome::Failed(&f.reason)) {
        Ok(Route::Next(next)) => Some(next),
        _ => None,
    };
    let deadline = next.as_deref().and_then(|n| {
        graph.node(n).and_then(|n| n.timeout_ms).map(|ms| {
            w.now_ms()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
        })
    });
    w.fail_interaction(
        &f.interaction_id,
        required(&req.attempt_id, "attempt_id")?,
        &f.reason,
        next.as_deref().map(|n| (n, deadline)),
        &format!("{}-control", state.owner_id),
    )?;
    Ok(json!({ "interaction_id": f.interaction_id, "routed_to": next }))
}

/// `interaction.update`: a progress update from the agent working on a pending interactive request.
fn interaction_update(
    w: &mut WriteTx<'_>,
    req: &Request,
    u: &payload::InteractionUpdate,
) -> Result<Value, StoreError> {
    w.require_interaction_of(
        required(&req.run_id, "run_id")?,
        required(&req.node_id, "node_id")?,
        &u.interaction_id,
    )?;
    let kept = w.interaction_progress(
        &u.interaction_id,
        required(&req.attempt_id, "attempt_id")?,
        &u.message,
        &u.data,
    )?;
    Ok(
        json!({ "interaction_id": u.interaction_id, "seq": kept.seq, "event_kept": kept.event_kept }),
    )
}

/// `message.claim`: claim undelivered workflow messages of a Pi session.
fn message_claim(
    w: &mut WriteTx<'_>,
    state: &HostState,
    req: &Request,
    m: &payload::MessageClaim,
) -> Result<Value, StoreError> {
    let owner = match &m.claimant {
        Some(claimant) => format!("claimant-{claimant}"),
        None => format!("request-{}", req.request_id),
    };
    // Claimed in this transaction only what the reply carries.
    let claimed = w.claim_messages(
        &m.session_id,
        &owner,
        m.limit.unwrap_or(16).min(256),
        MESSAGE_CLAIM_LEASE_MS,
        reply_room(state.reply_limit),
    )?;
    Ok(json!({ "messages": claimed.messages, "more": claimed.more }))
}

/// `message.ack`: acknowledge delivery of a claimed workflow message.
fn message_ack(w: &mut WriteTx<'_>, m: &payload::MessageAck) -> Result<Value, StoreError> {
    let at = w.ack_message(&m.message_id)?;
    Ok(json!({ "message_id": m.message_id, "delivered_at": at }))
}

/// The fence a client command uses: this host's claim when it holds one, otherwise none.
/// The fence for a client command on `run_id`: the claim this host holds, while the store
/// still agrees. A child's message earlier in the same batch may have released it (the run
/// parked or waits), and the host's cache of held claims is updated only after the commit.
fn fence_for<'a>(
    w: &WriteTx<'_>,
    state: &'a HostState,
    run_id: &str,
) -> Result<Fence<'a>, StoreError> {
    match state.claims.get(run_id) {
        Some(claim) if w.holds(claim)? => Ok(Fence::Claim(claim)),
        _ => Ok(Fence::Unclaimed),
    }
}

/// Room left in a reply frame for what is not the body: the envelope, the request id (up
/// to its own limit), the receipt's fields.
const REPLY_ENVELOPE_ROOM: usize = 8 * 1024;

/// The bytes of body a reply under `reply_limit` can carry.
pub(crate) fn reply_room(reply_limit: usize) -> usize {
    reply_limit.saturating_sub(REPLY_ENVELOPE_ROOM)
}

/// How many of `items`, from the first, fit `room` bytes of JSON together.
pub(crate) fn fitting_prefix<T: serde::Serialize>(items: &[T], room: usize) -> usize {
    let mut used = 0usize;
    // Each item also takes its separating comma.
    items
        .iter()
        .take_while(|item| {
            used = used.saturating_add(json_len(item) + 1);
            used <= room
        })
        .count()
}

/// As many whole items of `items` as fit `room` bytes of JSON, in order (at least the first:
/// an item is never larger than a frame); returns whether any were left out.
pub(crate) fn keep_what_fits<T: serde::Serialize>(items: &mut Vec<T>, room: usize) -> bool {
    let fits = fitting_prefix(items, room).max(1);
    let more = fits < items.len();
    items.truncate(fits);
    more
}

/// How many bytes a body of `body_len` bytes is over what a reply under `reply_limit` can carry.
fn reply_excess(body_len: usize, reply_limit: usize) -> usize {
    body_len.saturating_sub(reply_limit.saturating_sub(REPLY_ENVELOPE_ROOM))
}

/// Leaves out values (each with its "omitted" mark), in the order given, until `excess` bytes
/// are saved; returns what is still over. A run's attempts, requests and answers are
/// unbounded in number and a list's runs many, each value up to a payload's size, so a long
/// run (or a few large results) would otherwise make a status or a list unreadable
/// (`payload_too_large`), and every client waiting on it with it.
///
/// A value no longer than what replaces it stays: leaving it out would save nothing (and
/// make the body longer), so a run of many small outputs keeps them.
fn omit_until_it_fits<'a>(
    values: impl Iterator<Item = (&'a mut Value, &'a mut bool)>,
    mut excess: usize,
) -> usize {
    // `null` and the mark replace it; counted with the longest mark (`request_omitted`), so
    // the saving counted is never more than the real one and a body counted as fitting does.
    const REPLACEMENT: usize = r#"null,"request_omitted":true"#.len();
    if excess == 0 {
        return 0;
    }
    for (value, omitted) in values {
        if excess == 0 {
            break;
        }
        if value.is_null() {
            continue;
        }
        let saved = json_len(value).saturating_sub(REPLACEMENT);
        if saved == 0 {
            continue;
        }
        *value = Value::Null;
        *omitted = true;
        excess = excess.saturating_sub(saved);
    }
    excess
}

/// Fits a `run.status` body `excess` bytes too large for its reply. Oldest first, and what is
/// still open (a pending or validating request, what a person must answer, an effect being
/// applied) stays, as do the run's result and every record's status: first the attempts'
/// outputs, then closed interactions' requests, then closed decisions' requests and answers,
/// then settled effects' receipts (an action's receipt is also its attempt's output, so a few
/// large ones would otherwise keep the body over the limit with every output left out).
fn fit_run_status(
    attempts: &mut [crate::store::AttemptRecord],
    interactions: &mut [crate::store::InteractionRecord],
    decisions: &mut [crate::store::DecisionRecord],
    effects: &mut [crate::store::EffectRecord],
    excess: usize,
) {
    // The attempts come newest first: the oldest outputs go first.
    let excess = omit_until_it_fits(
        attempts
            .iter_mut()
            .rev()
            .map(|a| (a.output.get_or_insert(Value::Null), &mut a.output_omitted)),
        excess,
    );
    let excess = omit_until_it_fits(
        interactions
            .iter_mut()
            .filter(|i| !matches!(i.status.as_str(), "pending" | "validating"))
            .map(|i| (&mut i.request, &mut i.request_omitted)),
        excess,
    );
    let excess = omit_until_it_fits(
        decisions
            .iter_mut()
            .filter(|d| d.status != "pending")
            .flat_map(|d| {
                [
                    (&mut d.request, &mut d.request_omitted),
                    (d.answer.get_or_insert(Value::Null), &mut d.answer_omitted),
                ]
            }),
        excess,
    );
    omit_until_it_fits(
        effects
            .iter_mut()
            .filter(|e| !matches!(e.state.as_str(), "reserved" | "applying"))
            .map(|e| (e.receipt.get_or_insert(Value::Null), &mut e.receipt_omitted)),
        excess,
    );
}

/// Answers a read-only request from the store, fitting `run.status` and `run.list` under
/// `reply_limit` (the frame limit) as [`fit_run_status`] says, and `interaction.list` by
/// leaving the newest requests for a later list.
pub fn apply_read(store: &Store, req: &Request, reply_limit: usize) -> Result<Receipt, StoreError> {
    Ok(match &req.body {
        RequestBody::RunStatus(query) => read_run_status(store, req, reply_limit, query)?,
        RequestBody::RunList(list) => read_run_list(store, reply_limit, list)?,
        RequestBody::InteractionList(l) => read_interaction_list(store, reply_limit, l)?,
        RequestBody::Diagnose => Receipt::new(None, json!({ "findings": store.diagnose()? })),
        RequestBody::Subscribe(s) => read_subscribe(store, s)?,
        RequestBody::HostStatus => read_host_status(store)?,
        other => {
            return Err(StoreError::Forbidden(format!(
                "{} is not a read",
                other.kind_str()
            )));
        }
    })
}

/// `run.status`: status of one run.
fn read_run_status(
    store: &Store,
    req: &Request,
    reply_limit: usize,
    query: &payload::RunStatusQuery,
) -> Result<Receipt, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let run = store.run(run_id)?;
    let claim = store.claim_info(run_id)?;
    // Newest first and capped: a run that looped thousands of times still has a
    // status that fits a reply; older pages are asked for with `attempts_before`.
    let (mut attempts, attempt_count) = store.attempts_page(
        run_id,
        query.attempts_before.as_deref(),
        query
            .attempts_limit
            .unwrap_or(payload::DEFAULT_STATUS_ATTEMPTS)
            .min(payload::MAX_STATUS_ATTEMPTS),
    )?;
    let mut decisions = store.decisions(run_id)?;
    let mut interactions = store.interactions(Some(run_id), None)?;
    let mut effects = store.effects(run_id)?;
    // What the newest child said (its exit and output tails, masked like the loss
    // reasons): a run that failed or stopped for review shows why in its own words.
    let last_child = store.last_child(run_id)?.map(|mut c| {
        c.stdout_tail = super::children::mask_hex_runs(&c.stdout_tail);
        c.stderr_tail = super::children::mask_hex_runs(&c.stderr_tail);
        c
    });
    let mut updates = store.updates(run_id)?;
    let events_dropped = store.events_dropped(run_id)?;
    let body_len =
        |attempts: &[_], decisions: &[_], interactions: &[_], effects: &[_], updates: &[_]| {
            json_len(&(
                &run,
                &claim,
                attempts,
                decisions,
                interactions,
                effects,
                &last_child,
                updates,
            ))
        };
    let excess = reply_excess(
        body_len(&attempts, &decisions, &interactions, &effects, &updates),
        reply_limit,
    );
    fit_run_status(
        &mut attempts,
        &mut interactions,
        &mut decisions,
        &mut effects,
        excess,
    );
    // Then the data of the oldest updates, when what is left still does not fit.
    let excess = reply_excess(
        body_len(&attempts, &decisions, &interactions, &effects, &updates),
        reply_limit,
    );
    omit_until_it_fits(
        updates
            .iter_mut()
            .map(|u| (&mut u.data, &mut u.data_omitted)),
        excess,
    );
    Ok(Receipt::new(
        Some(run.revision),
        json!({ "run": run, "claim": claim, "attempts": attempts,
                "attempt_count": attempt_count,
                "decisions": decisions, "interactions": interactions,
                "effects": effects, "last_child": last_child,
                "updates": updates, "events_dropped": events_dropped }),
    ))
}

/// `run.list`: a page of runs, newest first, with where the next page starts.
fn read_run_list(
    store: &Store,
    reply_limit: usize,
    list: &payload::RunList,
) -> Result<Receipt, StoreError> {
    let limit = list
        .limit
        .unwrap_or(payload::DEFAULT_LIST_RUNS)
        .min(payload::MAX_LIST_RUNS);
    // One more than asked for: whether more follow.
    let mut runs = store.list_runs_after(
        list.session_id.as_deref(),
        list.unfinished == Some(true),
        list.statuses.as_deref().unwrap_or_default(),
        list.cursor.as_ref().map(|c| &c.0),
        limit.saturating_add(1),
    )?;
    let mut more = runs.len() > limit as usize;
    runs.truncate(limit as usize);
    // As many runs as fit without their results (the rest are the next page), then the
    // results of the newest that fit with them: the oldest runs' results go first.
    let room = reply_room(reply_limit).saturating_sub(RUN_LIST_ENVELOPE_ROOM);
    let fits = runs_fitting_without_results(&runs, room);
    more |= fits < runs.len();
    runs.truncate(fits);
    let excess = json_len(&runs).saturating_sub(room);
    omit_until_it_fits(
        runs.iter_mut()
            .rev()
            .map(|r| (r.result.get_or_insert(Value::Null), &mut r.result_omitted)),
        excess,
    );
    let next_cursor = more
        .then(|| runs.last().map(|r| payload::RunListCursor(r.list_key())))
        .flatten();
    Ok(Receipt::new(
        None,
        json!({ "runs": runs, "more": next_cursor.is_some(), "next_cursor": next_cursor }),
    ))
}

/// What a `run.list` body takes besides its runs: `more` and the longest `next_cursor` (a
/// run id is at most a text argument's length; counted generously).
const RUN_LIST_ENVELOPE_ROOM: usize = 512;

/// How many of `runs`, from the first, fit `room` bytes of JSON once their results are left
/// out (at least the first: a run's record without its result is far under a frame).
fn runs_fitting_without_results(runs: &[crate::store::RunRecord], room: usize) -> usize {
    // A left-out result is `null` and its mark.
    const OMITTED: usize = r#"null,"result_omitted":true"#.len();
    let mut used = 2usize;
    runs.iter()
        .take_while(|run| {
            let result = run.result.as_ref().map_or(4, json_len);
            let without = json_len(run).saturating_sub(result) + OMITTED;
            used = used.saturating_add(without + 1);
            used <= room
        })
        .count()
        .max(1)
        .min(runs.len())
}

/// `interaction.list`: list pending interactive requests of a Pi session.
fn read_interaction_list(
    store: &Store,
    reply_limit: usize,
    l: &payload::InteractionList,
) -> Result<Receipt, StoreError> {
    // Oldest first, as many whole requests as fit: the rest show once these are
    // answered (each request is under the payload limit, so one always fits).
    let mut interactions = store.interactions(None, Some(&l.session_id))?;
    let more = keep_what_fits(&mut interactions, reply_room(reply_limit));
    Ok(Receipt::new(
        None,
        json!({ "interactions": interactions, "more": more }),
    ))
}

/// `subscribe`: receive events of a run or a session on this connection.
fn read_subscribe(store: &Store, s: &payload::Subscribe) -> Result<Receipt, StoreError> {
    // The connection asks only whether the run exists; it makes the subscription itself.
    if let Some(run_id) = &s.run_id {
        store.run_state(run_id)?;
    }
    Ok(Receipt::new(None, Value::Null))
}

/// `host.status`: host health and identity.
fn read_host_status(store: &Store) -> Result<Receipt, StoreError> {
    let runs: serde_json::Map<String, Value> = store
        .count_by_status()?
        .into_iter()
        .map(|(status, n)| (status.as_str().to_owned(), json!(n)))
        .collect();
    Ok(Receipt::new(None, json!({ "runs": runs })))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::store::{AttemptRecord, DecisionRecord, EffectRecord, InteractionRecord};

    fn big(kb: usize) -> Value {
        json!("x".repeat(kb * 1024))
    }

    fn attempt(n: u64, output: Value) -> AttemptRecord {
        AttemptRecord {
            attempt_id: format!("att-{n}"),
            node_id: format!("n{n}"),
            ordinal: n,
            generation: 1,
            status: "succeeded".into(),
            deadline_at: None,
            output: Some(output),
            output_omitted: false,
            error: None,
            started_at: 0,
            finished_at: Some(0),
        }
    }

    fn interaction(n: u64, status: &str, request: Value) -> InteractionRecord {
        InteractionRecord {
            interaction_id: format!("int-{n}"),
            run_id: "run-1".into(),
            attempt_id: format!("att-{n}"),
            node_id: format!("n{n}"),
            origin_session: None,
            kind: "agent".into(),
            request,
            request_omitted: false,
            deadline_at: None,
            status: status.into(),
            last_submission: None,
        }
    }

    fn decision(n: u64, status: &str, request: Value, answer: Option<Value>) -> DecisionRecord {
        DecisionRecord {
            decision_id: format!("dec-{n}"),
            run_id: "run-1".into(),
            attempt_id: format!("att-{n}"),
            node_id: format!("n{n}"),
            kind: "checkpoint".into(),
            request,
            request_omitted: false,
            status: status.into(),
            answer,
            answer_omitted: false,
            answered_by: None,
        }
    }

    fn fitted(
        attempts: &mut [AttemptRecord],
        interactions: &mut [InteractionRecord],
        decisions: &mut [DecisionRecord],
        limit: usize,
    ) -> usize {
        fitted_with_effects(attempts, interactions, decisions, &mut [], limit)
    }

    fn fitted_with_effects(
        attempts: &mut [AttemptRecord],
        interactions: &mut [InteractionRecord],
        decisions: &mut [DecisionRecord],
        effects: &mut [EffectRecord],
        limit: usize,
    ) -> usize {
        let len = |a: &[AttemptRecord],
                   i: &[InteractionRecord],
                   d: &[DecisionRecord],
                   e: &[EffectRecord]| json_len(&(a, i, d, e));
        let excess = reply_excess(len(attempts, interactions, decisions, effects), limit);
        fit_run_status(attempts, interactions, decisions, effects, excess);
        len(attempts, interactions, decisions, effects)
    }

    fn effect(n: u64, state: &str, receipt: Option<Value>) -> EffectRecord {
        EffectRecord {
            effect_id: format!("eff-{n}"),
            run_id: "run-1".into(),
            attempt_id: format!("att-{n}"),
            effect_key: format!("key-{n}"),
            fingerprint: "fp".into(),
            state: state.into(),
            retry_contract: "never".into(),
            receipt,
            receipt_omitted: false,
            error: None,
        }
    }

    /// An action's receipt is also its attempt's output: a few large ones fill the reply
    /// twice over, and leaving out every output alone does not make it fit.
    #[test]
    fn settled_effects_receipts_go_last_and_the_body_then_fits() {
        let limit = 1024 * 1024;
        let mut attempts: Vec<_> = (1..=5).map(|n| attempt(n, big(230))).collect();
        let mut effects: Vec<_> = (1..=5)
            .map(|n| effect(n, "applied", Some(big(230))))
            .collect();
        effects.push(effect(6, "applying", Some(big(10))));
        let len = fitted_with_effects(&mut attempts, &mut [], &mut [], &mut effects, limit);
        assert!(len <= limit - REPLY_ENVELOPE_ROOM, "{len} bytes");
        assert!(
            attempts.iter().all(|a| a.output_omitted),
            "outputs go first"
        );
        assert!(effects[0].receipt_omitted, "then the oldest receipts");
        assert!(!effects[4].receipt_omitted, "no more than needed");
        assert!(
            !effects[5].receipt_omitted,
            "an effect being applied keeps its receipt"
        );
    }

    #[test]
    fn a_body_that_fits_is_left_whole() {
        let mut attempts = vec![attempt(1, big(100)), attempt(2, big(100))];
        let before = attempts.clone();
        fitted(&mut attempts, &mut [], &mut [], 1024 * 1024);
        assert_eq!(attempts, before);
    }

    #[test]
    fn the_oldest_outputs_go_first_and_the_body_then_fits() {
        // Newest first, as `run.status` lists them.
        let mut attempts: Vec<_> = (1..=6).rev().map(|n| attempt(n, big(200))).collect();
        let limit = 1024 * 1024;
        let len = fitted(&mut attempts, &mut [], &mut [], limit);
        assert!(len <= limit - REPLY_ENVELOPE_ROOM, "{len} bytes");
        let omitted = attempts.iter().filter(|a| a.output_omitted).count();
        assert!(omitted >= 1);
        assert!(
            attempts
                .iter()
                .rev()
                .take(omitted)
                .all(|a| a.output_omitted && a.output.as_ref().is_some_and(Value::is_null)),
            "the oldest go first"
        );
        assert!(
            attempts
                .iter()
                .rev()
                .skip(omitted)
                .all(|a| a.output == Some(big(200))),
            "the others stay whole"
        );
        // No more than needed: with the last one left out put back, it would not fit.
        assert!(len + json_len(&big(200)) > limit - REPLY_ENVELOPE_ROOM);
    }

    /// Leaving out a value shorter than its mark (`1`, `{}`) makes the body longer, not
    /// shorter: such values stay, and the saving counted is never more than the real one, so
    /// a body that can fit does.
    #[test]
    fn values_shorter_than_their_mark_stay_and_the_body_fits() {
        let limit = 1024 * 1024;
        let target = limit - REPLY_ENVELOPE_ROOM;
        // Many small outputs, oldest first, filling most of the reply, then one large output
        // that alone is enough to leave out.
        let small = json_len(&[attempt(99_999, json!(1))]);
        let count = (target - 16 * 1024) / small;
        let mut attempts: Vec<_> = (1..=count as u64).map(|n| attempt(n, json!(1))).collect();
        attempts.push(attempt(count as u64 + 1, big(200)));
        let len = fitted(&mut attempts, &mut [], &mut [], limit);
        assert!(len <= target, "{len} bytes, over {target}");
        assert!(
            attempts.last().unwrap().output_omitted,
            "the large one goes"
        );
        assert!(
            attempts.iter().rev().skip(1).all(|a| !a.output_omitted),
            "small outputs save nothing and stay"
        );
    }

    /// `request_omitted` is a byte longer than `output_omitted`: the count of what is saved
    /// must not credit it.
    #[test]
    fn leaving_out_many_requests_is_counted_with_their_own_mark() {
        let limit = 1024 * 1024;
        let target = limit - REPLY_ENVELOPE_ROOM;
        // Thousands of closed requests, most of which must go: one byte miscounted on each
        // is more than the last one left out saves beyond what was needed.
        let request = json!("y".repeat(998));
        let count = 4000;
        let mut interactions: Vec<_> = (1..=count)
            .map(|n| interaction(n, "settled", request.clone()))
            .collect();
        let len = fitted(&mut [], &mut interactions, &mut [], limit);
        let omitted = interactions.iter().filter(|i| i.request_omitted).count();
        assert!(omitted < count as usize, "fits without leaving out all");
        assert!(len <= target, "{len} bytes, over {target}");
    }

    #[test]
    fn open_requests_stay_and_closed_ones_go_after_the_outputs() {
        let mut attempts = vec![attempt(1, big(100))];
        let mut interactions = vec![
            interaction(1, "settled", big(300)),
            interaction(2, "pending", big(300)),
            interaction(3, "validating", big(300)),
        ];
        let mut decisions = vec![
            decision(1, "answered", big(100), Some(big(100))),
            decision(2, "pending", big(100), None),
        ];
        let limit = 1024 * 1024;
        let len = fitted(&mut attempts, &mut interactions, &mut decisions, limit);
        assert!(len <= limit - REPLY_ENVELOPE_ROOM, "{len} bytes");
        assert!(attempts[0].output_omitted, "outputs go first");
        assert!(interactions[0].request_omitted, "then closed requests");
        assert!(
            !interactions[1].request_omitted && !interactions[2].request_omitted,
            "open requests stay"
        );
        assert_eq!(interactions[1].request, big(300));
        assert!(!decisions[1].request_omitted, "a pending decision stays");
    }
}
