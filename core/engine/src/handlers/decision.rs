//! The answers to a run's decisions: `checkpoint.answer` (the model) and
//! `decision.answer` (a person).

use super::required;
use crate::protocol::reply::DecisionAnswered;
use crate::protocol::{payload, Request};
use crate::store::{Answerer, StoreError, Transaction};

/// `checkpoint.answer`: answer an ordinary checkpoint (the model-facing path).
pub(crate) fn checkpoint_answer(
    w: &mut dyn Transaction,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<DecisionAnswered, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    answer(w, a, Answerer::Model)
}

/// `decision.answer`: answer a protected human decision (a person in the origin session).
pub(crate) fn decision_answer(
    w: &mut dyn Transaction,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<DecisionAnswered, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    answer(w, a, Answerer::Person)
}

fn answer(
    w: &mut dyn Transaction,
    a: &payload::DecisionAnswer,
    answered_by: Answerer,
) -> Result<DecisionAnswered, StoreError> {
    w.answer_decision(&a.decision_id, &a.answer, answered_by)?;
    Ok(DecisionAnswered {
        decision_id: a.decision_id.clone(),
        answered_by,
    })
}
