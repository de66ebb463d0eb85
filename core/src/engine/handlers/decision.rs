//! The answers to a run's decisions: `checkpoint.answer` (the model) and
//! `decision.answer` (a person).

use serde_json::{json, Value};

use super::required;
use crate::protocol::{payload, Request};
use crate::store::{Answerer, StoreError, WriteTx};

/// `checkpoint.answer`: answer an ordinary checkpoint (the model-facing path).
pub(crate) fn checkpoint_answer(
    w: &mut WriteTx<'_>,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<Value, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    w.answer_decision(&a.decision_id, &a.answer, Answerer::Model)?;
    Ok(json!({ "decision_id": a.decision_id, "answered_by": "model" }))
}

/// `decision.answer`: answer a protected human decision (a person in the origin session).
pub(crate) fn decision_answer(
    w: &mut WriteTx<'_>,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<Value, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    w.answer_decision(&a.decision_id, &a.answer, Answerer::Person)?;
    Ok(json!({ "decision_id": a.decision_id, "answered_by": "person" }))
}
