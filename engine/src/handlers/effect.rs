//! `effect.resolve`.

use super::required;
use crate::protocol::reply::EffectResolved;
use crate::protocol::{payload, Request};
use crate::store::{EffectResult, EffectState, Provenance, StoreError, Transaction};

/// `effect.resolve`: record what became of an uncertain effect of a run in review.
pub(crate) fn resolve(
    w: &mut dyn Transaction,
    req: &Request,
    e: &payload::EffectResolve,
) -> Result<EffectResolved, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let who = Provenance {
        by: e.by.as_deref().unwrap_or("unknown"),
        reason: e.reason.as_deref().unwrap_or(""),
    };
    let state = match &e.result {
        EffectResult::Applied { .. } => EffectState::Applied,
        EffectResult::Failed { .. } => EffectState::Failed,
    };
    w.resolve_effect(run_id, &e.effect_id, &e.result, who)?;
    let (status, _) = w.run_state(run_id)?;
    Ok(EffectResolved {
        run_id: run_id.to_owned(),
        effect_id: e.effect_id.clone(),
        state,
        status,
    })
}
