//! Durable timers: an attempt parked until a time (a `wait` node, or a node's code that
//! waits). The wake time is decided once, when the timer is set, and stored; the host fires a
//! due timer (at start when it passed while no host ran), which queues the run, and the next
//! child continues the attempt with the output saved with the timer ([`Resume::TimerFired`]).
//! No claim, child or child slot is held meanwhile.

use super::*;
use crate::store::Timers;
use piw_engine::store::records::*;
use rusqlite::params;
use serde_json::{json, Value};

/// Every pending timer due at `?1` on a waiting run that no live control claim holds (an
/// operator mid-cancel has it), earliest first. A paused run's timer fires too: the run then
/// stays queued and paused until it is resumed.
const DUE_TIMERS: &str = "SELECT t.timer_id, t.run_id FROM timers t
     JOIN runs r ON r.run_id = t.run_id JOIN claims c ON c.run_id = t.run_id
     WHERE t.status = 'pending' AND t.wake_at <= ?1 AND r.status = 'waiting'
       AND NOT (c.owner_kind IS NOT NULL AND c.expires_at > ?1)
     ORDER BY t.wake_at, t.timer_id";

impl WriteTx<'_> {
    fn due_timers(&self) -> StoreResult<Vec<(String, String)>> {
        Ok(self
            .conn()
            .prepare_cached(DUE_TIMERS)?
            .query_map([self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?)
    }

    /// Fires the pending timer `timer_id` whose wake time has come: the run is queued (ready,
    /// or paused when it was paused) so that a child continues the attempt.
    pub fn fire_timer(&mut self, timer_id: &str) -> StoreResult<()> {
        let (run_id, status, wake_at): (String, String, UnixMillis) = self
            .conn()
            .prepare_cached("SELECT run_id, status, wake_at FROM timers WHERE timer_id = ?1")?
            .query_row([timer_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "timer",
                id: timer_id.to_owned(),
            })?;
        let run = self.run_for(&run_id, Op::FireTimer)?;
        if status != "pending" || wake_at > self.now {
            return Err(invalid(
                &run_id,
                Op::FireTimer,
                run.status,
                format!("timer {timer_id} is {status}, waking at {wake_at}"),
            ));
        }
        self.authorize(&run_id, Fence::Unclaimed, Op::FireTimer)?;
        self.conn()
            .prepare_cached(
                "UPDATE timers SET status = 'fired', fired_at = ?2 WHERE timer_id = ?1",
            )?
            .execute(params![timer_id, self.now])?;
        self.set_status(&run_id, RunStatus::Queued)?;
        self.set_available(&run_id, self.now)?;
        self.finish_run_write(
            &run_id,
            "timer_fired",
            json!({ "timer": timer_id, "wake_at": wake_at }),
        )?;
        Ok(())
    }

    /// The newest timer of an attempt: its id and status.
    pub(super) fn latest_timer(&self, attempt_id: &str) -> StoreResult<Option<(String, String)>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT timer_id, status FROM timers WHERE attempt_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([attempt_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }
}

impl Timers for WriteTx<'_> {
    fn wait_until(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        wake: Wake,
        output: &Value,
    ) -> StoreResult<TimerSet> {
        self.fence(claim)?;
        self.check_slot(&claim.run_id, output)?;
        let run = self.run_for(&claim.run_id, Op::WaitUntil)?;
        let attempt =
            self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::WaitUntil, run.status)?;
        let timer_id = self.new_id("tmr");
        let wake_at = wake.at(self.now);
        self.conn()
            .prepare_cached(
                "INSERT INTO timers (timer_id, run_id, attempt_id, node_id, wake_at, output,
                                     status, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7)",
            )?
            .execute(params![
                timer_id,
                claim.run_id,
                attempt_id,
                attempt.node_id,
                wake_at,
                output.to_string(),
                self.now
            ])?;
        self.conn()
            .prepare_cached("UPDATE attempts SET deadline_at = NULL WHERE attempt_id = ?1")?
            .execute([attempt_id])?;
        self.suspend_attempt(&claim.run_id, attempt_id)?;
        self.finish_run_write(
            &claim.run_id,
            "timer_set",
            json!({ "timer": timer_id, "wake_at": wake_at }),
        )?;
        Ok(TimerSet { timer_id, wake_at })
    }

    fn fire_due_timers(&mut self) -> StoreResult<Vec<(String, String)>> {
        let due = self.due_timers()?;
        let mut fired = Vec::with_capacity(due.len());
        for (timer_id, run_id) in due {
            let error = match self.savepoint(|w| w.fire_timer(&timer_id)) {
                Ok(()) => {
                    fired.push((timer_id, run_id));
                    continue;
                }
                Err(e) if e.is_infrastructure() => return Err(e),
                Err(e) => e,
            };
            if !self.due_timers()?.iter().any(|(id, _)| *id == timer_id) {
                continue;
            }
            tracing::warn!(%run_id, timer = %timer_id, %error, "cannot fire a due timer; the run goes to review");
            let reason = format!("timer {timer_id} came due but could not fire: {error}");
            if let Err(e) =
                self.savepoint(|w| w.review_waiting_run(Op::FireTimer, &run_id, &reason))
            {
                tracing::error!(%run_id, timer = %timer_id, error = %e, "cannot stop the run for review either");
            }
        }
        Ok(fired)
    }

    fn fired_timer_of_attempt(&self, attempt_id: &str) -> StoreResult<Option<Value>> {
        let row: Option<(String, UnixMillis, String)> = self
            .conn()
            .prepare_cached(
                "SELECT timer_id, wake_at, output FROM timers
                 WHERE attempt_id = ?1 AND status = 'fired'
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([attempt_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        row.map(|(timer_id, wake_at, output)| {
            let output: Value = serde_json::from_str(&output)?;
            Ok(json!({ "timer_id": timer_id, "wake_at": wake_at, "output": output }))
        })
        .transpose()
    }
}
