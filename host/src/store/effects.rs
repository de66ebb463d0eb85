//! Managed effects, store side (docs/RULES.md, "Effects"): reserve with a stable key and a request
//! fingerprint, mark applying, store the receipt. The rules that decide what a repeated reserve
//! may do live in [`decide_reserve`], a pure function.

use crate::store::Effects;
use rusqlite::{params, OptionalExtension as _};

use serde_json::json;

use super::lifecycle::invalid;
use super::{
    parse_enum, AttemptStatus, Claim, EffectResult, EffectState, Op, RetryContract, StoreError,
    StoreResult, WriteTx,
};
use piw_engine::store::records::*;

/// What to do with a reserve for a key that already has a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReserveDecision {
    /// Reuse the record as a fresh reservation (optionally counting it as a retry).
    Rereserve {
        retry: bool,
    },
    ReturnReceipt,
    ReturnFailure,
    Conflict,
    Uncertain,
    Refuse,
}

/// The rule table for a repeated reserve. Pure so it can be read and tested at a glance.
pub(crate) fn decide_reserve(
    state: EffectState,
    contract: RetryContract,
    same_fingerprint: bool,
) -> ReserveDecision {
    if !same_fingerprint {
        return ReserveDecision::Conflict;
    }
    match state {
        // Reserved but never started: nothing happened outside, safe to hand out again.
        EffectState::Reserved => ReserveDecision::Rereserve { retry: false },
        EffectState::Applied => ReserveDecision::ReturnReceipt,
        EffectState::Failed => ReserveDecision::ReturnFailure,
        // An interrupted application may be repeated only under a contract that makes it safe.
        EffectState::Applying if contract.allows_retry() => {
            ReserveDecision::Rereserve { retry: true }
        }
        EffectState::Applying | EffectState::Uncertain => ReserveDecision::Uncertain,
        EffectState::Cancelled => ReserveDecision::Refuse,
    }
}

/// effect_id, fingerprint, state, retry_contract, receipt, error
type EffectRow = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
);

impl WriteTx<'_> {
    fn move_effect(
        &mut self,
        claim: &Claim,
        effect_id: &str,
        from: EffectState,
        to: EffectState,
        receipt: Option<String>,
        error: Option<String>,
    ) -> StoreResult<()> {
        self.fence(claim)?;
        let run = self.run_row(&claim.run_id)?;
        if !Op::Effect.allowed(run.status) {
            return Err(invalid(
                &claim.run_id,
                Op::Effect,
                run.status,
                format!("the run is {}", run.status),
            ));
        }
        let state: String = self
            .conn()
            .prepare_cached("SELECT state FROM effects WHERE effect_id = ?1 AND run_id = ?2")?
            .query_row(params![effect_id, claim.run_id], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "effect",
                id: effect_id.to_owned(),
            })?;
        if state != from.as_str() {
            return Err(invalid(
                &claim.run_id,
                Op::Effect,
                run.status,
                format!("effect {effect_id} is {state}, not {from}"),
            ));
        }
        self.conn()
            .prepare_cached(
                "UPDATE effects SET state = ?2, receipt = COALESCE(?3, receipt), error = ?4,
                        updated_at = ?5 WHERE effect_id = ?1",
            )?
            .execute(params![effect_id, to.as_str(), receipt, error, self.now])?;
        Ok(())
    }

    fn require_running_attempt(
        &self,
        run_id: &str,
        current: Option<&str>,
        attempt_id: &str,
    ) -> StoreResult<()> {
        let status: Option<String> = self
            .conn()
            .prepare_cached("SELECT status FROM attempts WHERE attempt_id = ?1")?
            .query_row([attempt_id], |r| r.get(0))
            .optional()?;
        if current != Some(attempt_id) || status.as_deref() != Some(AttemptStatus::Running.as_str())
        {
            return Err(StoreError::StaleAttempt {
                run_id: run_id.to_owned(),
                presented: attempt_id.to_owned(),
                current: current.unwrap_or("none").to_owned(),
            });
        }
        Ok(())
    }
}

impl Effects for WriteTx<'_> {
    fn reserve_effect(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        effect_key: &str,
        fingerprint: &str,
        contract: RetryContract,
    ) -> StoreResult<Reservation> {
        self.fence(claim)?;
        let run = self.run_row(&claim.run_id)?;
        if !Op::Effect.allowed(run.status) {
            return Err(invalid(
                &claim.run_id,
                Op::Effect,
                run.status,
                format!("the run is {}", run.status),
            ));
        }
        self.require_running_attempt(&claim.run_id, run.current_attempt.as_deref(), attempt_id)?;
        let existing: Option<EffectRow> = self
            .conn()
            .prepare_cached(
                "SELECT effect_id, fingerprint, state, retry_contract, receipt, error FROM effects
                 WHERE run_id = ?1 AND effect_key = ?2",
            )?
            .query_row(params![claim.run_id, effect_key], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .optional()?;
        let Some((effect_id, stored_fp, state, stored_contract, receipt, error)) = existing else {
            let effect_id = self.new_id("eff");
            self.conn()
                .prepare_cached(
                    "INSERT INTO effects (effect_id, run_id, attempt_id, effect_key, fingerprint,
                                          state, retry_contract, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'reserved', ?6, ?7, ?7)",
                )?
                .execute(params![
                    effect_id,
                    claim.run_id,
                    attempt_id,
                    effect_key,
                    fingerprint,
                    contract.as_str(),
                    self.now
                ])?;
            self.finish_run_write(
                &claim.run_id,
                "effect_reserved",
                json!({ "effect": effect_id, "key": effect_key }),
            )?;
            return Ok(Reservation::Reserved {
                effect_id,
                retry: false,
            });
        };
        let state = parse_enum(&state, EffectState::parse, "effect state")?;
        let stored_contract = parse_enum(&stored_contract, RetryContract::parse, "retry contract")?;
        match decide_reserve(state, stored_contract, stored_fp == fingerprint) {
            ReserveDecision::Conflict => Err(StoreError::EffectConflict {
                run_id: claim.run_id.clone(),
                effect_key: effect_key.to_owned(),
            }),
            ReserveDecision::Uncertain => Err(StoreError::EffectUncertain {
                run_id: claim.run_id.clone(),
                effect_key: effect_key.to_owned(),
            }),
            ReserveDecision::Refuse => Err(invalid(
                &claim.run_id,
                Op::Effect,
                run.status,
                format!("effect {effect_key} was cancelled"),
            )),
            ReserveDecision::ReturnReceipt => Ok(Reservation::AlreadyApplied {
                effect_id,
                receipt: serde_json::from_str(receipt.as_deref().unwrap_or("null"))?,
            }),
            ReserveDecision::ReturnFailure => Ok(Reservation::AlreadyFailed {
                effect_id,
                error: error.unwrap_or_default(),
            }),
            ReserveDecision::Rereserve { retry } => {
                self.conn()
                    .prepare_cached(
                        "UPDATE effects SET state = 'reserved', attempt_id = ?2, updated_at = ?3
                         WHERE effect_id = ?1",
                    )?
                    .execute(params![effect_id, attempt_id, self.now])?;
                self.finish_run_write(
                    &claim.run_id,
                    "effect_reserved",
                    json!({ "effect": effect_id, "key": effect_key, "retry": retry }),
                )?;
                Ok(Reservation::Reserved { effect_id, retry })
            }
        }
    }

    fn effect_applying(&mut self, claim: &Claim, effect_id: &str) -> StoreResult<()> {
        self.move_effect(
            claim,
            effect_id,
            EffectState::Reserved,
            EffectState::Applying,
            None,
            None,
        )?;
        self.finish_run_write(
            &claim.run_id,
            "effect_applying",
            json!({ "effect": effect_id }),
        )?;
        Ok(())
    }

    fn settle_effect(
        &mut self,
        claim: &Claim,
        effect_id: &str,
        result: &EffectResult,
    ) -> StoreResult<()> {
        if let EffectResult::Applied { receipt } = result {
            self.check_slot(&claim.run_id, receipt)?;
        }
        let (to, receipt, error) = match result {
            EffectResult::Applied { receipt } => {
                (EffectState::Applied, Some(receipt.to_string()), None)
            }
            EffectResult::Failed { error } => (EffectState::Failed, None, Some(error.clone())),
        };
        self.move_effect(claim, effect_id, EffectState::Applying, to, receipt, error)?;
        self.finish_run_write(
            &claim.run_id,
            "effect_settled",
            json!({ "effect": effect_id, "state": to.as_str() }),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_rules() {
        use EffectState::*;
        use RetryContract::*;
        assert_eq!(
            decide_reserve(Applied, Never, false),
            ReserveDecision::Conflict
        );
        assert_eq!(
            decide_reserve(Applied, Never, true),
            ReserveDecision::ReturnReceipt
        );
        assert_eq!(
            decide_reserve(Reserved, Never, true),
            ReserveDecision::Rereserve { retry: false }
        );
        assert_eq!(
            decide_reserve(Applying, Never, true),
            ReserveDecision::Uncertain
        );
        assert_eq!(
            decide_reserve(Applying, IdempotencyKey, true),
            ReserveDecision::Rereserve { retry: true }
        );
        assert_eq!(
            decide_reserve(Applying, ReadBack, true),
            ReserveDecision::Rereserve { retry: true }
        );
        for c in RetryContract::ALL {
            assert_eq!(
                decide_reserve(Uncertain, *c, true),
                ReserveDecision::Uncertain,
                "uncertain is never retried"
            );
        }
        assert_eq!(
            decide_reserve(Failed, Never, true),
            ReserveDecision::ReturnFailure
        );
        assert_eq!(
            decide_reserve(Cancelled, Never, true),
            ReserveDecision::Refuse
        );
    }
}
