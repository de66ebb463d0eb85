//! What each request does to the store: the tables that pick a request kind's handler
//! ([`super::handlers`]), for durable client commands ([`apply_command`], inside the batch
//! transaction) and reads ([`apply_read`]), and the protocol's stable rejection code of each
//! store error ([`rejection_for`]). Only [`crate::turn`] calls them; the host's memory they
//! read is [`crate::state`].

use crate::time::UnixMillis;
use serde_json::{json, Value};

use super::fit::{body, receipt};
use super::handlers::run::{AcceptedSource, PreparedStart};
use super::handlers::{controller, decision, effect, host, interaction, message, run, value};
use crate::protocol::{Receipt, Rejection, RejectionCode, Request, RequestBody};
use crate::state::HostState;
use crate::store::controllers::ControllerStoreError;
use crate::store::{ClaimLostReason, Storage, StoreError, Transaction};

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
        StoreError::Controller(e) => controller_rejection(e),
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
        StoreError::Controller(ControllerStoreError::ResourceConflict {
            expected, actual, ..
        }) => json!({ "expected": expected, "current": actual, "of": "resource_version" }),
        StoreError::Controller(ControllerStoreError::TooLarge { what, bytes, limit }) => {
            json!({ "field": what, "bytes": bytes, "limit": limit })
        }
        StoreError::Controller(ControllerStoreError::PassLost { reason, .. }) => {
            json!({ "reason": reason })
        }
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

/// The protocol code of a controller refusal: a resource written over another version is
/// `stale_revision` (read it again; details say `of: resource_version`); a value over its
/// bound `malformed` (details: field, bytes, limit); a pass that no longer holds its claim
/// `claim_lost` (its child stops); an effect or workflow key reused with another request, or
/// a final effect moved, `effect_conflict`.
fn controller_rejection(e: &ControllerStoreError) -> RejectionCode {
    use ControllerStoreError as E;
    match e {
        E::ControllerNotFound { .. } | E::ResourceNotFound { .. } => RejectionCode::NotFound,
        E::ResourceConflict { .. } => RejectionCode::StaleRevision,
        E::TooLarge { .. } => RejectionCode::Malformed,
        E::BeingDeleted { .. } | E::NotReady { .. } => RejectionCode::InvalidTransition,
        E::EffectConflict { .. }
        | E::EffectNotRecorded { .. }
        | E::EffectFinal { .. }
        | E::WorkflowConflict { .. } => RejectionCode::EffectConflict,
        E::PassLost { .. } => RejectionCode::ClaimLost,
    }
}

/// Applies one durable client command inside the batch transaction and returns the receipt
/// body. It reads the host's memory and never changes it: a command of a group may run twice
/// (`Transaction::command_group`).
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
        RequestBody::ControllerRegister(r) => body(&controller::register(w, r)?),
        RequestBody::ControllerEnable(c) => body(&controller::set_enabled(w, c, true)?),
        RequestBody::ControllerDisable(c) => body(&controller::set_enabled(w, c, false)?),
        RequestBody::ResourceApply(a) => body(&controller::apply(w, a)?),
        RequestBody::ResourceDelete(r) => body(&controller::delete(w, r)?),
        RequestBody::ResourceReconcile(r) => body(&controller::reconcile(w, r)?),
        RequestBody::ControllerEffectRecord(e) => body(&controller::effect_record(w, e)?),
        RequestBody::ControllerEffectGet(e) => body(&controller::effect_get(w, e)?),
        RequestBody::ControllerEffectSettle(e) => body(&controller::effect_settle(w, e)?),
        RequestBody::ControllerPassFinish(f) => body(&controller::pass_finish(w, f)?),
        RequestBody::ControllerWorkflowEnsure(e) => {
            body(&controller::workflow_ensure(w, e, start)?)
        }
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
    now: UnixMillis,
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
        RequestBody::Diagnose => receipt(None, &host::diagnose(store, now)?),
        RequestBody::ValueGet(get) => receipt(None, &value::get(store, req, limit, get)?),
        RequestBody::Subscribe(s) => receipt(None, &host::subscribe(store, s)?),
        RequestBody::HostStatus => receipt(None, &host::status(store, state, now)?),
        RequestBody::ResourceGet(r) => receipt(None, &controller::get(store, r)?),
        RequestBody::ResourceList(l) => receipt(None, &controller::list(store, l)?),
        other => Err(StoreError::Forbidden(format!(
            "{} is not a read",
            other.kind_str()
        ))),
    }
}
