//! What each request does to the store: the tables that pick a request kind's handler
//! ([`super::handlers`]), for durable client commands ([`apply_command`], inside the batch
//! transaction) and reads ([`apply_read`]); the host's memory between batches
//! ([`HostState`]); the protocol's stable rejection code of each store error.

use std::collections::BTreeMap;

pub(crate) use super::fit::{fitting_prefix, keep_what_fits, reply_room};
use super::handlers::{decision, effect, host, interaction, message, run, value};

use serde_json::{json, Value};

use crate::ids::IdSource;
use crate::protocol::reply::body_of;
use crate::protocol::{Receipt, Rejection, RejectionCode, Request, RequestBody};
use crate::store::{Claim, ClaimLostReason, CommandMeta, NewRun, Storage, StoreError, Transaction};
use crate::time::UnixMillis;

/// How long a claimed workflow message stays with one client before another may take it.
pub const MESSAGE_CLAIM_LEASE_MS: i64 = 60_000;

/// In-memory facts the store thread keeps between batches, and the engine's two inputs that
/// are not messages: the time of the turn being decided and where new ids come from.
#[derive(Debug)]
pub struct HostState {
    /// The time of the turn being decided (`turn::turn`'s `now`): every decision of the turn
    /// and every transaction it opens read this, never a clock.
    pub now: UnixMillis,
    /// Where the engine's secrets (children's one-time tokens) get their random bits: the
    /// driver's is OS-seeded, a simulation's seeded (`HostState::new`).
    pub ids: Box<dyn IdSource>,
    /// The owner id of this host's claims (`host-epoch-N`).
    pub owner_id: String,
    /// This host's epoch.
    pub epoch: i64,
    /// Claims this host holds, by run id (one per running run with a child).
    pub claims: BTreeMap<String, Claim>,
    /// Launched children, by run id.
    pub children: BTreeMap<String, super::children::ChildEntry>,
    /// Parsed graph snapshots of runs with children.
    pub graphs: BTreeMap<String, crate::graph::Graph>,
    /// When each held claim was last renewed (by a write or a heartbeat).
    pub renewed_at: BTreeMap<String, i64>,
    pub child_config: super::children::ChildConfig,
    /// Whether children may be launched and stopped: true from the host's start until it
    /// stops (then the supervisor stops every child itself).
    pub supervising: bool,
    /// What the supervisor must do (launch, stop), decided and not yet handed to it: the store
    /// thread sends these on (as the turn's `Effect::Child`), so deciding code holds no
    /// channel.
    pub child_commands: Vec<super::children::SupervisorCmd>,
    /// The socket children connect to.
    pub socket_path: std::path::PathBuf,
    /// This installation's `piw_core::driver::supervision_scope`, computed once: every child's marker
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
    pub forgiven_standby_exits: std::collections::BTreeSet<String>,
    /// Own children whose connection the host refused for want of room (the connection cap):
    /// by pid, until the child's exit is handled (`children::child_refused`). Such a child
    /// dies of the host's shortage, not its run's fault, and its exit is no loss.
    pub refused_children: std::collections::BTreeSet<u32>,
    /// The number the next launch gets (unique for this host's life).
    pub next_launch: u64,
    /// Launches whose transaction failed to commit after their child was already handed its
    /// envelope, by launch number, with their run: the child is being stopped, and every
    /// report about it is ignored (its run, generation and child epoch were never committed
    /// and may be issued again). Until it has exited it still holds a child slot, and its run
    /// is not launched again.
    pub abandoned_launches: BTreeMap<u64, String>,
    /// The last activation commit failed after launching children: launch after the commit
    /// until one succeeds, so a commit that keeps failing (a full disk) does not start and
    /// stop children in a loop.
    pub launch_after_commit: bool,
    /// When to try ready runs again after an activation that failed (its commit, or the
    /// activation itself): nothing else may wake the store thread for them.
    pub activation_retry_at: Option<i64>,
    /// The delay before the last such retry (it doubles while activations keep failing).
    pub activation_retry_delay_ms: i64,
    /// What the host keeps of finished runs on its own; `None`: everything.
    pub retention: Option<super::retention::Retention>,
    /// When the retention pass runs next (`engine::retention`).
    pub retention_due_at: Option<i64>,
    /// The host's first prune ran: the driver looks for log files of runs that no longer
    /// exist (those a crash after a prune's commit left).
    pub sweep_run_logs: bool,
    /// This host has asked for that sweep once already.
    pub run_logs_swept: bool,
    /// Detached runs' bridges (`super::bridges`).
    pub bridges: super::bridges::Bridges,
    /// The sessions that present their runs' interactive steps now (`super::presence`).
    pub presence: super::presence::Presence,
    /// Decision channels' adapters (`super::channels`).
    pub channels: super::channels::Channels,
}

impl HostState {
    /// A host's memory at its start, drawing new secrets from `ids`; the caller sets what it
    /// knows (owner, epoch, configuration) with struct update syntax.
    pub fn new(ids: Box<dyn IdSource>) -> Self {
        Self {
            now: 0,
            ids,
            owner_id: String::new(),
            epoch: 0,
            claims: BTreeMap::new(),
            children: BTreeMap::new(),
            graphs: BTreeMap::new(),
            renewed_at: BTreeMap::new(),
            child_config: Default::default(),
            supervising: false,
            child_commands: Vec::new(),
            socket_path: Default::default(),
            supervision_scope: String::new(),
            reply_limit: 0,
            shutting_down: false,
            unpublished: Vec::new(),
            forgiven_standby_exits: Default::default(),
            refused_children: Default::default(),
            next_launch: 0,
            abandoned_launches: BTreeMap::new(),
            launch_after_commit: false,
            activation_retry_at: None,
            activation_retry_delay_ms: 0,
            retention: None,
            retention_due_at: None,
            sweep_run_logs: false,
            run_logs_swept: false,
            bridges: Default::default(),
            presence: Default::default(),
            channels: Default::default(),
        }
    }

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

/// A run start with its source already read and hashed by the connection task (file I/O
/// stays off the store thread).
#[derive(Debug, Clone)]
pub struct PreparedStart {
    pub new_run: NewRun,
}

/// What the connection task read of a run's workflow file for `run.retry` with
/// `accept_source`: the file the run was started with, hashed as it is now (file I/O stays off
/// the store thread, as for [`PreparedStart`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedSource {
    pub source_root: String,
    pub source_hash: String,
}

/// Applies one durable client command inside the batch transaction and returns the receipt
/// body. It reads the host's memory and never changes it: a command of a group may run twice
/// (`Transaction::command_group_dyn`).
pub fn apply_command(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
    start: Option<&PreparedStart>,
    accepted: Option<&AcceptedSource>,
) -> Result<Value, StoreError> {
    if let (Some(run_id), Some(expected)) = (&req.run_id, req.expected_revision) {
        w.expect_revision(run_id, expected)?;
    }
    match &req.body {
        RequestBody::RunStart(_) => body(&run::start(w, start)?),
        RequestBody::RunPause => body(&run::pause(w, state, req)?),
        RequestBody::RunDetach => body(&run::detach(w, state, req)?),
        RequestBody::RunResume => body(&run::resume(w, state, req)?),
        RequestBody::RunCancel(cancel) => body(&run::cancel(w, state, req, cancel)?),
        RequestBody::RunRetry(r) => body(&run::retry(w, req, r, accepted)?),
        RequestBody::EffectResolve(e) => body(&effect::resolve(w, req, e)?),
        RequestBody::CheckpointAnswer(a) => body(&decision::checkpoint_answer(w, req, a)?),
        RequestBody::DecisionAnswer(a) => body(&decision::decision_answer(w, req, a)?),
        RequestBody::InteractionSubmit(s) => body(&interaction::submit(w, req, s)?),
        RequestBody::InteractionFail(f) => body(&interaction::fail(w, state, req, f)?),
        RequestBody::InteractionUpdate(u) => body(&interaction::update(w, req, u)?),
        RequestBody::InteractionValuePut(p) => body(&interaction::value_put(w, req, p)?),
        RequestBody::MessageClaim(m) => body(&message::claim(w, state, req, m)?),
        RequestBody::MessageAck(m) => body(&message::ack(w, m)?),
        other => Err(StoreError::Forbidden(format!(
            "{} is not accepted on this connection",
            other.kind_str()
        ))),
    }
}

/// Answers a read-only request from the store, fitting `run.status` and `run.list` under
/// `state.reply_limit` (the frame limit) as `fit::fit_run_status` says, and
/// `interaction.list` by leaving the newest requests for a later list.
pub fn apply_read(
    store: &dyn Storage,
    state: &HostState,
    req: &Request,
) -> Result<Receipt, StoreError> {
    let limit = state.reply_limit;
    match &req.body {
        RequestBody::RunStatus(query) => {
            let mut reply = run::status(store, req, limit, query)?;
            reply.step_service =
                super::bridges::step_service(store, state, &reply.run, &reply.interactions);
            receipt(Some(reply.run.revision), &reply)
        }
        RequestBody::RunList(list) => receipt(None, &run::list(store, limit, list)?),
        RequestBody::InteractionList(l) => receipt(None, &interaction::list(store, limit, l)?),
        RequestBody::Diagnose => receipt(None, &host::diagnose(store)?),
        RequestBody::ValueGet(get) => receipt(None, &value::get(store, req, limit, get)?),
        RequestBody::Subscribe(s) => receipt(None, &host::subscribe(store, s)?),
        RequestBody::HostStatus => receipt(None, &host::status(store, state)?),
        other => Err(StoreError::Forbidden(format!(
            "{} is not a read",
            other.kind_str()
        ))),
    }
}

/// The receipt body of a command's typed reply: the one place it becomes JSON (a command's
/// body is stored with its receipt, for replays).
pub(crate) fn body<T: serde::Serialize>(reply: &T) -> Result<Value, StoreError> {
    Ok(body_of(reply)?)
}

/// The receipt of a read's typed reply.
pub(crate) fn receipt<T: serde::Serialize>(
    revision: Option<u64>,
    reply: &T,
) -> Result<Receipt, StoreError> {
    Ok(Receipt::new(revision, body_of(reply)?))
}
