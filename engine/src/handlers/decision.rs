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
    if a.channel.is_some() {
        return Err(StoreError::InvalidInput(
            "checkpoint.answer takes no channel: only a person's answer (decision.answer) names one"
                .into(),
        ));
    }
    answer(w, a, Answerer::Model)
}

/// `decision.answer`: answer a protected human decision (a person in the origin session).
pub(crate) fn decision_answer(
    w: &mut dyn Transaction,
    req: &Request,
    a: &payload::DecisionAnswer,
) -> Result<DecisionAnswered, StoreError> {
    w.require_decision_of(required(&req.run_id, "run_id")?, &a.decision_id)?;
    if let Some(channel) = &a.channel {
        check_channel(channel)?;
    }
    answer(w, a, Answerer::Person)
}

/// A channel is `<kind>:<address>`: a lowercase kind, then printable ASCII without spaces,
/// bounded ([`payload::MAX_CHANNEL_BYTES`]).
fn check_channel(channel: &str) -> Result<(), StoreError> {
    let well_formed = channel.len() <= payload::MAX_CHANNEL_BYTES
        && channel.split_once(':').is_some_and(|(kind, address)| {
            !kind.is_empty()
                && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
                && !address.is_empty()
                && address.bytes().all(|b| b.is_ascii_graphic())
        });
    if well_formed {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "channel must be <kind>:<address> (printable, no spaces, at most {} bytes)",
            payload::MAX_CHANNEL_BYTES
        )))
    }
}

fn answer(
    w: &mut dyn Transaction,
    a: &payload::DecisionAnswer,
    answered_by: Answerer,
) -> Result<DecisionAnswered, StoreError> {
    w.answer_decision_via(&a.decision_id, &a.answer, answered_by, a.channel.as_deref())?;
    Ok(DecisionAnswered {
        decision_id: a.decision_id.clone(),
        answered_by,
    })
}
