//! Lifecycle operations after something went away: a lost child, a host that stopped or died,
//! an expired claim (requeue, count the loss, or send to review), and a person's ways out of
//! review (retry the node, resolve an uncertain effect).

use super::*;
use crate::store::diagnose::findings;
use crate::store::Recovery;
use piw_engine::store::records::*;
use rusqlite::params;
use serde_json::json;

impl WriteTx<'_> {
    /// Makes every running row whose claim has expired (or vanished) claimable again, in one
    /// commit per call, counting a loss for each. Used at host start.
    pub fn recover_expired(&mut self) -> StoreResult<Vec<RecoveredRun>> {
        self.recover_expired_claims(None)
    }

    pub(crate) fn requeue_after_loss(
        &mut self,
        run_id: &str,
        run: &RunRow,
        reason: &str,
        event: &'static str,
    ) -> StoreResult<RecoveredRun> {
        self.requeue_after_loss_counted(run_id, run, reason, event, true)
    }

    /// Requeues a run whose owner went away. `count_loss` adds one to the run's consecutive
    /// losses (a child's death counts; a host restart does not).
    pub(crate) fn requeue_after_loss_counted(
        &mut self,
        run_id: &str,
        run: &RunRow,
        reason: &str,
        event: &'static str,
        count_loss: bool,
    ) -> StoreResult<RecoveredRun> {
        self.release_claim(run_id)?;
        let validating = self.has_validating_submission(run_id)?;
        if validating {
            if count_loss {
                // A validation child that died rejects only its provisional submission (its
                // `validate` may be what kills it; judging it again could loop).
                let error = format!("validation did not finish: {reason}");
                let rejected: Vec<String> = self
                    .conn()
                    .prepare_cached(
                        "UPDATE submissions SET state = 'rejected', error = ?3, settled_at = ?2
                         WHERE state = 'validating' AND interaction_id IN
                               (SELECT interaction_id FROM interactions WHERE run_id = ?1)
                         RETURNING submission_id",
                    )?
                    .query_map(params![run_id, self.now, error], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                // Published like a verdict, so whoever waits for the submission learns it.
                for submission_id in rejected {
                    self.finish_run_write(
                        run_id,
                        "submission_rejected",
                        json!({ "submission": submission_id, "error": error }),
                    )?;
                }
                self.conn()
                    .prepare_cached(
                        "UPDATE interactions SET status = 'pending' WHERE run_id = ?1 AND status = 'validating'",
                    )?
                    .execute([run_id])?;
            }
            // Otherwise (the host went away) the submission stays under validation and the next
            // child judges it again. Either way the attempt waits again.
            self.set_attempt_waiting(run)?;
        } else if !self.rewait_answered_attempt(run)? {
            self.interrupt_running_attempt(run, reason)?;
        }
        let uncertain = self.mark_interrupted_effects_uncertain(run_id)?;
        let crashes: i64 = self
            .conn()
            .prepare_cached(
                "UPDATE queue SET crash_count = crash_count + ?3, available_at = ?2 WHERE run_id = ?1
                 RETURNING crash_count",
            )?
            .query_row(params![run_id, self.now, i64::from(count_loss)], |r| r.get(0))?;
        let (status, why) = if let Some(key) = uncertain.first() {
            (
                RunStatus::Review,
                format!("uncertain effect {key}: {reason}"),
            )
        } else if count_loss && crashes >= i64::from(self.config.max_child_losses) {
            (
                RunStatus::Review,
                format!("its child was lost {crashes} times without progress: {reason}"),
            )
        } else if validating && count_loss {
            // The submission was rejected: the request waits for a new one.
            (RunStatus::Waiting, reason.to_owned())
        } else {
            (RunStatus::Queued, reason.to_owned())
        };
        self.set_status(run_id, status)?;
        if status == RunStatus::Review {
            self.set_review_reason(run_id, &why)?;
        }
        self.finish_run_write(
            run_id,
            event,
            json!({ "reason": why, "losses": crashes, "status": status.as_str() }),
        )?;
        Ok(RecoveredRun {
            run_id: run_id.to_owned(),
            status,
            reason: why,
        })
    }

    fn has_validating_submission(&self, run_id: &str) -> StoreResult<bool> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM submissions WHERE state = 'validating' AND
                        interaction_id IN (SELECT interaction_id FROM interactions WHERE run_id = ?1))",
            )?
            .query_row([run_id], |r| r.get(0))?)
    }

    fn set_attempt_waiting(&mut self, run: &RunRow) -> StoreResult<()> {
        if let Some(attempt_id) = &run.current_attempt {
            self.conn()
                .prepare_cached("UPDATE attempts SET status = 'waiting' WHERE attempt_id = ?1")?
                .execute([attempt_id])?;
        }
        Ok(())
    }

    /// Whether the run's current attempt waits on a request nobody has answered yet (a
    /// pending decision or interactive request) or on a timer that has not fired: such a run
    /// waits, it is not ready for a child (which would take the missing answer for one).
    fn waits_on_pending_request(&self, run: &RunRow) -> StoreResult<bool> {
        let Some(attempt_id) = &run.current_attempt else {
            return Ok(false);
        };
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM attempts WHERE attempt_id = ?1 AND status = 'waiting')
                    AND (EXISTS (SELECT 1 FROM decisions WHERE attempt_id = ?1 AND status = 'pending')
                         OR EXISTS (SELECT 1 FROM interactions
                                    WHERE attempt_id = ?1 AND status = 'pending')
                         OR EXISTS (SELECT 1 FROM timers
                                    WHERE attempt_id = ?1 AND status = 'pending'))",
            )?
            .query_row([attempt_id], |r| r.get(0))?)
    }

    /// A running attempt that continues after an answered decision, an accepted submission,
    /// a request whose deadline passed or a fired timer holds a committed outcome:
    /// interrupting it would rerun the node and ask (or wait) again, dropping what a person (or
    /// the model) answered, or giving an expired request a fresh deadline or a fired timer a
    /// new wake time. It waits again instead, so the next activation
    /// continues it the same way ([`Resume::Continue`], [`Resume::Accepted`],
    /// [`Resume::InteractionExpired`], [`Resume::TimerFired`]). Returns whether it did.
    fn rewait_answered_attempt(&mut self, run: &RunRow) -> StoreResult<bool> {
        let Some(attempt_id) = &run.current_attempt else {
            return Ok(false);
        };
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE attempts SET status = 'waiting'
                 WHERE attempt_id = ?1 AND status = 'running'
                   AND (EXISTS (SELECT 1 FROM decisions
                                WHERE attempt_id = ?1 AND status IN ('answered', 'cancelled'))
                        OR EXISTS (SELECT 1 FROM interactions
                                   WHERE attempt_id = ?1 AND status IN ('settled', 'expired'))
                        OR EXISTS (SELECT 1 FROM timers
                                   WHERE attempt_id = ?1 AND status = 'fired'))",
            )?
            .execute([attempt_id])?;
        Ok(changed > 0)
    }

    /// `applying` effects whose contract forbids retry become `uncertain`. Returns their keys.
    fn mark_interrupted_effects_uncertain(&mut self, run_id: &str) -> StoreResult<Vec<String>> {
        let keys: Vec<String> = self
            .conn()
            .prepare_cached(
                "UPDATE effects SET state = 'uncertain', updated_at = ?2,
                        error = 'the child went away while applying; no receipt was stored'
                 WHERE run_id = ?1 AND state = 'applying' AND retry_contract = ?3
                 RETURNING effect_key",
            )?
            .query_map(
                params![run_id, self.now, RetryContract::Never.as_str()],
                |r| r.get(0),
            )?
            .collect::<Result<_, _>>()?;
        Ok(keys)
    }

    fn set_review_reason(&mut self, run_id: &str, why: &str) -> StoreResult<()> {
        self.conn()
            .prepare_cached("UPDATE runs SET review_reason = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, why])?;
        Ok(())
    }

    fn first_uncertain_effect(&self, run_id: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT effect_key FROM effects WHERE run_id = ?1 AND state = 'uncertain'
                 ORDER BY created_at, rowid LIMIT 1",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?)
    }

    /// A run in review becomes ready again, its lost children forgotten; one whose attempt
    /// waits on an unanswered request (its validation children kept dying, each rejecting
    /// the submission it judged) waits for the answer again, on the same attempt.
    fn requeue_from_review(&mut self, run_id: &str, run: &RunRow) -> StoreResult<()> {
        let status = if self.waits_on_pending_request(run)? {
            RunStatus::Waiting
        } else {
            RunStatus::Queued
        };
        self.set_status(run_id, status)?;
        self.set_available(run_id, self.now)?;
        self.conn()
            .prepare_cached("UPDATE queue SET crash_count = 0 WHERE run_id = ?1")?
            .execute([run_id])?;
        Ok(())
    }
}

impl Recovery for WriteTx<'_> {
    fn child_lost(&mut self, claim: &Claim, reason: &str) -> StoreResult<RecoveredRun> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::ChildLost)?;
        self.requeue_after_loss(&claim.run_id, &run, reason, "child_lost")
    }

    fn recover_expired_claims(
        &mut self,
        stalled_owner: Option<&str>,
    ) -> StoreResult<Vec<RecoveredRun>> {
        let expired: Vec<(String, Option<String>)> = self
            .conn()
            .prepare_cached(
                "SELECT r.run_id, c.owner_id FROM runs r JOIN claims c ON c.run_id = r.run_id
                 WHERE r.status = 'running' AND (c.expires_at IS NULL OR c.expires_at <= ?1)
                 ORDER BY r.run_id",
            )?
            .query_map([self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(expired.len());
        for (run_id, owner) in expired {
            let run = self.run_row(&run_id)?;
            let stalled = stalled_owner.is_some() && owner.as_deref() == stalled_owner;
            out.push(if stalled {
                self.requeue_after_loss_counted(
                    &run_id,
                    &run,
                    "claim expired while the host was stalled",
                    "recovered",
                    false,
                )?
            } else {
                self.requeue_after_loss(&run_id, &run, "claim expired", "recovered")?
            });
        }
        Ok(out)
    }

    fn release_after_launch_failure(
        &mut self,
        claim: &Claim,
        why: &str,
        retry_at: UnixMillis,
    ) -> StoreResult<RecoveredRun> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::ChildLost)?;
        let recovered =
            self.requeue_after_loss_counted(&claim.run_id, &run, why, "recovered", false)?;
        if recovered.status == RunStatus::Queued {
            self.set_available(&claim.run_id, retry_at)?;
        }
        Ok(recovered)
    }

    fn release_at_shutdown(&mut self, claim: &Claim) -> StoreResult<RecoveredRun> {
        self.release_uncounted(claim, "host stopping")
    }

    fn release_uncounted(&mut self, claim: &Claim, why: &str) -> StoreResult<RecoveredRun> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::ChildLost)?;
        self.requeue_after_loss_counted(&claim.run_id, &run, why, "recovered", false)
    }

    fn send_to_review(&mut self, claim: &Claim, reason: &str) -> StoreResult<u64> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Review)?;
        // What the attempt already holds stays for the retry: a submission being judged is
        // judged again (its attempt waits, as when the host went away), an answered or expired
        // request or an accepted submission is continued with. Only bare work is interrupted.
        if self.has_validating_submission(&claim.run_id)? {
            self.set_attempt_waiting(&run)?;
        } else if !self.rewait_answered_attempt(&run)? {
            self.interrupt_running_attempt(&run, reason)?;
        }
        self.release_claim(&claim.run_id)?;
        self.set_status(&claim.run_id, RunStatus::Review)?;
        self.set_review_reason(&claim.run_id, reason)?;
        self.finish_run_write(&claim.run_id, "review", json!({ "reason": reason }))
    }

    fn resolve_effect(
        &mut self,
        run_id: &str,
        effect_id: &str,
        result: &super::super::EffectResult,
        who: Provenance<'_>,
    ) -> StoreResult<u64> {
        let run = self.run_for(run_id, Op::ResolveEffect)?;
        let state: Option<String> = self
            .conn()
            .prepare_cached("SELECT state FROM effects WHERE effect_id = ?1 AND run_id = ?2")?
            .query_row(params![effect_id, run_id], |r| r.get(0))
            .optional()?;
        match state.as_deref() {
            None => {
                return Err(StoreError::NotFound {
                    what: "effect",
                    id: effect_id.to_owned(),
                })
            }
            Some("uncertain") => {}
            Some(other) => {
                return Err(invalid(
                    run_id,
                    Op::ResolveEffect,
                    run.status,
                    format!("effect {effect_id} is {other}, not uncertain"),
                ))
            }
        }
        self.authorize(run_id, Fence::Unclaimed, Op::ResolveEffect)?;
        let (state, receipt, error) = match result {
            super::super::EffectResult::Applied { receipt } => {
                ("applied", Some(receipt.to_string()), None)
            }
            super::super::EffectResult::Failed { error } => ("failed", None, Some(error.clone())),
        };
        self.conn()
            .prepare_cached(
                "UPDATE effects SET state = ?2, receipt = ?3, error = ?4, updated_at = ?5
                 WHERE effect_id = ?1",
            )?
            .execute(params![effect_id, state, receipt, error, self.now])?;
        let continues = self.first_uncertain_effect(run_id)?.is_none();
        if continues {
            self.requeue_from_review(run_id, &run)?;
        }
        self.finish_run_write(
            run_id,
            "effect_resolved",
            json!({ "effect": effect_id, "state": state, "by": who.by, "reason": who.reason,
                    "continues": continues }),
        )
    }

    fn retry_from_review(&mut self, run_id: &str, who: Provenance<'_>) -> StoreResult<u64> {
        let run = self.run_for(run_id, Op::Retry)?;
        if let Some(key) = self.first_uncertain_effect(run_id)? {
            return Err(invalid(
                run_id,
                Op::Retry,
                run.status,
                format!("effect {key} is uncertain: resolve it first (`resolve-effect`, applied or failed)"),
            ));
        }
        self.authorize(run_id, Fence::Unclaimed, Op::Retry)?;
        self.requeue_from_review(run_id, &run)?;
        self.finish_run_write(
            run_id,
            "retried",
            json!({ "by": who.by, "reason": who.reason }),
        )
    }

    fn retry_accepting_source(
        &mut self,
        run_id: &str,
        source_hash: &str,
        who: Provenance<'_>,
    ) -> StoreResult<u64> {
        let run = self.run_for(run_id, Op::Retry)?;
        let (reason, old_hash): (Option<String>, String) = self
            .conn()
            .prepare_cached("SELECT review_reason, source_hash FROM runs WHERE run_id = ?1")?
            .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let reason = reason.unwrap_or_default();
        if !piw_engine::store::model::is_source_change(&reason) {
            return Err(invalid(
                run_id,
                Op::Retry,
                run.status,
                format!(
                    "the run is in review for another reason than a changed source ({reason}): \
                     there is no source to accept; retry it without --accept-source"
                ),
            ));
        }
        if let Some(key) = self.first_uncertain_effect(run_id)? {
            return Err(invalid(
                run_id,
                Op::Retry,
                run.status,
                format!("effect {key} is uncertain: resolve it first (`resolve-effect`, applied or failed)"),
            ));
        }
        self.authorize(run_id, Fence::Unclaimed, Op::Retry)?;
        self.conn()
            .prepare_cached(
                "UPDATE runs SET source_hash = ?2, mounted_sources = '{}', definition = NULL,
                        definition_digest = NULL
                 WHERE run_id = ?1",
            )?
            .execute(params![run_id, source_hash])?;
        self.requeue_from_review(run_id, &run)?;
        self.finish_run_write(
            run_id,
            "retried",
            json!({ "by": who.by, "reason": who.reason, "accepted_source": {
                "review_reason": reason, "old_hash": old_hash, "new_hash": source_hash } }),
        )
    }

    fn repair(&mut self) -> StoreResult<RepairReport> {
        let findings = findings(self.conn(), self.now)?;
        let mut report = RepairReport::default();
        if findings.iter().all(|f| !f.repairable) {
            report.left_for_review = findings;
            return Ok(report);
        }
        self.ops.push("repair");
        for f in findings {
            if !f.repairable {
                report.left_for_review.push(f);
                continue;
            }
            self.repair_one(&f)?;
            report.repaired.push(f);
        }
        report.runs_written = self.take_runs_written();
        Ok(report)
    }
}
