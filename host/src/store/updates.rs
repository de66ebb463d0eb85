//! Workflow updates and the bound on the events a workflow emits.
//!
//! A progress whose data is a workflow update `{ type, key, data }` replaces the run's latest
//! update for that `(type, key)` (table `run_updates`), always. Its event, and every other
//! progress or notify event, is kept only within the run's budget (table `event_budgets`): a
//! rate (a token bucket per run), and a count and bytes per attempt and per run. An event over
//! the budget is dropped and counted; the next one kept says how many were dropped before it.

use rusqlite::{params, OptionalExtension as _};
use serde_json::{json, Value};

use super::read::json_col;
use super::{StoreError, StoreResult, WriteTx};
use crate::clock::UnixMillis;
use piw_engine::store::records::*;

/// Progress and notify events a run keeps per second, sustained.
pub const EVENT_RATE_PER_SECOND: i64 = 20;
/// Progress and notify events a run may keep at once after a quiet while.
pub const EVENT_BURST: i64 = 100;
/// Progress and notify events kept per attempt.
pub const MAX_ATTEMPT_EVENTS: i64 = 1_000;
/// Bytes of progress and notify event data kept per attempt.
pub const MAX_ATTEMPT_EVENT_BYTES: i64 = 1 << 20;
/// Progress and notify events kept per run.
pub const MAX_RUN_EVENTS: i64 = 10_000;
/// Bytes of progress and notify event data kept per run.
pub const MAX_RUN_EVENT_BYTES: i64 = 16 << 20;
/// Distinct `(type, key)` pairs a run's projection holds; a new pair past it is refused.
pub const MAX_UPDATE_KEYS: i64 = 1_024;
/// The largest `data` of one update, as JSON.
pub const MAX_UPDATE_DATA_BYTES: usize = 64 * 1024;
/// `(at, completed)` samples kept per progress track: eight intervals.
const SAMPLES: usize = 9;

/// A run's or an attempt's use of its event budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Budget {
    events: i64,
    bytes: i64,
    /// Thousandths of an event (only the run's bucket is used).
    tokens: i64,
    refilled_at: UnixMillis,
    dropped: i64,
    unreported: i64,
}

impl Budget {
    fn fresh(now: UnixMillis) -> Self {
        Budget {
            tokens: EVENT_BURST * 1000,
            refilled_at: now,
            ..Budget::default()
        }
    }
}

/// Whether an event of `bytes` fits the run's and the attempt's budgets at `now`; charges it
/// when it does, counts it dropped when it does not.
fn admit(run: &mut Budget, attempt: &mut Budget, now: UnixMillis, bytes: i64) -> bool {
    let elapsed = now.saturating_sub(run.refilled_at).max(0);
    // `elapsed` ms at EVENT_RATE_PER_SECOND events a second, in thousandths of an event.
    run.tokens = run
        .tokens
        .saturating_add(elapsed.saturating_mul(EVENT_RATE_PER_SECOND))
        .min(EVENT_BURST * 1000);
    run.refilled_at = now.max(run.refilled_at);
    let fits = run.tokens >= 1000
        && run.events < MAX_RUN_EVENTS
        && attempt.events < MAX_ATTEMPT_EVENTS
        && run.bytes.saturating_add(bytes) <= MAX_RUN_EVENT_BYTES
        && attempt.bytes.saturating_add(bytes) <= MAX_ATTEMPT_EVENT_BYTES;
    if fits {
        run.tokens -= 1000;
        for b in [&mut *run, &mut *attempt] {
            b.events += 1;
            b.bytes = b.bytes.saturating_add(bytes);
        }
    } else {
        run.dropped += 1;
        run.unreported += 1;
    }
    fits
}

/// A workflow update carried by a progress's data: `{ type, key, data }` with a `type`
/// matching `[a-z][a-z0-9.-]{0,63}`, a `key` matching `[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}`
/// and a JSON object `data` of at most 64 KiB. `None` when the data is not shaped as one;
/// an error when it is but breaks a rule.
pub fn workflow_update(data: &Value) -> StoreResult<Option<(&str, &str, &Value)>> {
    let Some(map) = data.as_object() else {
        return Ok(None);
    };
    if map.len() != 3 || !["type", "key", "data"].iter().all(|k| map.contains_key(*k)) {
        return Ok(None);
    }
    let bad = |what: String| Err(StoreError::InvalidInput(what));
    let (Some(ty), Some(key)) = (map["type"].as_str(), map["key"].as_str()) else {
        return bad("an update's type and key must be strings".into());
    };
    let type_ok = ty.len() <= 64
        && ty.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && ty
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !type_ok {
        return bad(format!(
            "update.type must match [a-z][a-z0-9.-]{{0,63}}, got {ty:?}"
        ));
    }
    let key_ok = key.len() <= 128
        && key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/-".contains(&b));
    if !key_ok {
        return bad(format!(
            "update.key must match [A-Za-z0-9][A-Za-z0-9._:/-]{{0,127}}, got {key:?}"
        ));
    }
    let inner = &map["data"];
    if !inner.is_object() {
        return bad("update.data must be a JSON object".into());
    }
    let bytes = serde_json::to_string(inner)?.len();
    if bytes > MAX_UPDATE_DATA_BYTES {
        return bad(format!(
            "update.data is {bytes} bytes; at most {MAX_UPDATE_DATA_BYTES}"
        ));
    }
    Ok(Some((ty, key, inner)))
}

const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// A progress track's samples after `data` arrived at `at`: a new estimation epoch (no
/// earlier samples) when its phase, unit or total changed, `completed` went down, or a
/// finished track started again; only a counted track (`completed` a number) has samples.
fn next_samples(
    previous: Option<(&Value, Vec<(UnixMillis, f64)>)>,
    data: &Value,
    at: UnixMillis,
) -> Vec<(UnixMillis, f64)> {
    let Some(completed) = data.get("completed").and_then(Value::as_f64) else {
        return Vec::new();
    };
    let mut samples = match previous {
        Some((before, samples)) => {
            let same = |f: &str| before.get(f) == data.get(f);
            fn status(d: &Value) -> &str {
                d.get("status").and_then(Value::as_str).unwrap_or("")
            }
            let restarted = TERMINAL.contains(&status(before)) && !TERMINAL.contains(&status(data));
            let went_down = samples.last().is_some_and(|&(_, c)| completed < c);
            if same("phase") && same("unit") && same("total") && !restarted && !went_down {
                samples
            } else {
                Vec::new()
            }
        }
        None => Vec::new(),
    };
    samples.push((at, completed));
    if samples.len() > SAMPLES {
        samples.drain(..samples.len() - SAMPLES);
    }
    samples
}

impl WriteTx<'_> {
    fn budget(&self, run_id: &str, attempt_id: &str) -> StoreResult<Budget> {
        let row = self
            .conn()
            .prepare_cached(
                "SELECT events, bytes, tokens, refilled_at, dropped, unreported
                 FROM event_budgets WHERE run_id = ?1 AND attempt_id = ?2",
            )?
            .query_row(params![run_id, attempt_id], |r| {
                Ok(Budget {
                    events: r.get(0)?,
                    bytes: r.get(1)?,
                    tokens: r.get(2)?,
                    refilled_at: r.get(3)?,
                    dropped: r.get(4)?,
                    unreported: r.get(5)?,
                })
            })
            .optional()?;
        Ok(row.unwrap_or_else(|| Budget::fresh(self.now)))
    }

    fn save_budget(&self, run_id: &str, attempt_id: &str, b: &Budget) -> StoreResult<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO event_budgets
                   (run_id, attempt_id, events, bytes, tokens, refilled_at, dropped, unreported)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (run_id, attempt_id) DO UPDATE SET
                   events = ?3, bytes = ?4, tokens = ?5, refilled_at = ?6, dropped = ?7,
                   unreported = ?8",
            )?
            .execute(params![
                run_id,
                attempt_id,
                b.events,
                b.bytes,
                b.tokens,
                b.refilled_at,
                b.dropped,
                b.unreported
            ])?;
        Ok(())
    }

    /// Decides whether the run's next progress or notify event, with `data`, is kept: within
    /// the budget, `Some(n)` with `n` the events dropped since the last one kept (to be said
    /// in this one, as `dropped`); else `None`, and it is counted.
    pub(super) fn admit_event(
        &mut self,
        run_id: &str,
        attempt_id: Option<&str>,
        data: &Value,
    ) -> StoreResult<Option<i64>> {
        Ok(self.admit_event_counted(run_id, attempt_id, data)?.0)
    }

    /// [`WriteTx::admit_event`], with how many events the run has emitted so far (kept or
    /// dropped, this one included): the order of its updates.
    fn admit_event_counted(
        &mut self,
        run_id: &str,
        attempt_id: Option<&str>,
        data: &Value,
    ) -> StoreResult<(Option<i64>, i64)> {
        let bytes = i64::try_from(serde_json::to_string(data)?.len()).unwrap_or(i64::MAX);
        let mut run = self.budget(run_id, "")?;
        let attempt_key = attempt_id.unwrap_or("-");
        let mut attempt = self.budget(run_id, attempt_key)?;
        let kept = admit(&mut run, &mut attempt, self.now, bytes);
        let reported = run.unreported;
        if kept {
            run.unreported = 0;
            self.save_budget(run_id, attempt_key, &attempt)?;
        }
        self.save_budget(run_id, "", &run)?;
        Ok((kept.then_some(reported), run.events + run.dropped))
    }

    /// Records a progress of the run's current attempt (of `interaction` when given): its
    /// event within the budget (see [`WriteTx::admit_event`]) and, when its data is a workflow
    /// update, the latest update for its `(type, key)` whether or not the event was kept.
    pub(super) fn record_progress(
        &mut self,
        run_id: &str,
        node_id: Option<&str>,
        attempt_id: Option<&str>,
        message: &str,
        data: &Value,
        interaction: Option<&str>,
    ) -> StoreResult<ProgressKept> {
        let update = workflow_update(data)?;
        if let Some((ty, key, _)) = update {
            let (known, count): (bool, i64) = self
                .conn()
                .prepare_cached(
                    "SELECT COALESCE(SUM(type = ?2 AND key = ?3), 0), COUNT(*)
                     FROM run_updates WHERE run_id = ?1",
                )?
                .query_row(params![run_id, ty, key], |r| {
                    Ok((r.get::<_, i64>(0)? > 0, r.get(1)?))
                })?;
            if !known && count >= MAX_UPDATE_KEYS {
                return Err(StoreError::InvalidInput(format!(
                    "the run has {MAX_UPDATE_KEYS} update keys already; update {ty}:{key} is refused"
                )));
            }
        }
        let mut event = json!({ "message": message, "data": data });
        if let Some(interaction) = interaction {
            event["interaction"] = json!(interaction);
        }
        let (admitted, ordinal) = self.admit_event_counted(run_id, attempt_id, &event)?;
        let (seq, event_kept) = match admitted {
            Some(dropped) => {
                if dropped > 0 {
                    event["dropped"] = json!(dropped);
                }
                (self.finish_run_write(run_id, "progress", event)?, true)
            }
            None => (self.run_row(run_id)?.revision, false),
        };
        if let Some((ty, key, inner)) = update {
            let previous = self
                .conn()
                .prepare_cached(
                    "SELECT data, samples FROM run_updates
                     WHERE run_id = ?1 AND type = ?2 AND key = ?3",
                )?
                .query_row(params![run_id, ty, key], |r| {
                    Ok((json_col(r, 0)?.unwrap_or(Value::Null), json_col(r, 1)?))
                })
                .optional()?;
            let samples = if ty == "progress" {
                let previous = previous.as_ref().map(|(d, s)| {
                    let s: Vec<(UnixMillis, f64)> = s
                        .clone()
                        .and_then(|s| serde_json::from_value(s).ok())
                        .unwrap_or_default();
                    (d, s)
                });
                next_samples(previous, inner, self.now)
            } else {
                Vec::new()
            };
            self.conn()
                .prepare_cached(
                    "INSERT INTO run_updates
                       (run_id, type, key, node_id, attempt_id, data, seq, at, samples, ordinal)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (run_id, type, key) DO UPDATE SET
                       node_id = ?4, attempt_id = ?5, data = ?6, seq = ?7, at = ?8, samples = ?9,
                       ordinal = ?10",
                )?
                .execute(params![
                    run_id,
                    ty,
                    key,
                    node_id,
                    attempt_id,
                    serde_json::to_string(inner)?,
                    i64::try_from(seq).unwrap_or(i64::MAX),
                    self.now,
                    serde_json::to_string(&samples)?,
                    ordinal
                ])?;
        }
        Ok(ProgressKept { seq, event_kept })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_keeps_a_burst_then_the_rate() {
        let (mut run, mut attempt) = (Budget::fresh(0), Budget::default());
        let kept = (0..1000)
            .filter(|_| admit(&mut run, &mut attempt, 0, 10))
            .count();
        assert_eq!(kept, EVENT_BURST as usize);
        assert_eq!(run.dropped, 1000 - EVENT_BURST);
        // One second later: the rate's worth more.
        let kept = (0..1000)
            .filter(|_| admit(&mut run, &mut attempt, 1000, 10))
            .count();
        assert_eq!(kept, EVENT_RATE_PER_SECOND as usize);
    }

    #[test]
    fn an_attempt_keeps_at_most_its_count_and_bytes() {
        let mut run = Budget::fresh(0);
        let mut attempt = Budget::default();
        let mut kept = 0;
        for i in 0..5_000 {
            // Time enough for the bucket: only the count bounds.
            if admit(&mut run, &mut attempt, i * 1000, 10) {
                kept += 1;
            }
        }
        assert_eq!(kept, MAX_ATTEMPT_EVENTS);
        let mut other = Budget::default();
        assert!(admit(&mut run, &mut other, 6_000_000, 10));
        assert!(!admit(
            &mut run,
            &mut other,
            7_000_000,
            MAX_ATTEMPT_EVENT_BYTES
        ));
    }

    #[test]
    fn samples_start_a_new_epoch_when_the_track_changes() {
        let d = |phase: &str, completed: f64| json!({ "status": "running", "phase": phase, "completed": completed, "total": 10, "unit": "rows" });
        let s = next_samples(None, &d("a", 1.0), 0);
        let s = next_samples(Some((&d("a", 1.0), s)), &d("a", 2.0), 10);
        assert_eq!(s, vec![(0, 1.0), (10, 2.0)]);
        let s2 = next_samples(Some((&d("a", 2.0), s.clone())), &d("b", 3.0), 20);
        assert_eq!(s2, vec![(20, 3.0)]);
        let s3 = next_samples(Some((&d("a", 2.0), s)), &d("a", 1.0), 20);
        assert_eq!(s3, vec![(20, 1.0)]);
        let mut s = Vec::new();
        for i in 0..20 {
            s = next_samples(
                Some((&d("a", f64::from(i)), s)),
                &d("a", f64::from(i)),
                i64::from(i),
            );
        }
        assert_eq!(s.len(), SAMPLES);
        assert_eq!(s[0], (11, 11.0));
    }

    #[test]
    fn only_an_update_shaped_progress_is_an_update() {
        assert!(workflow_update(&json!({"n": 1})).unwrap().is_none());
        assert!(
            workflow_update(&json!({"type": "progress", "key": "a", "data": {}}))
                .unwrap()
                .is_some()
        );
        assert!(workflow_update(&json!({"type": "Progress", "key": "a", "data": {}})).is_err());
        assert!(workflow_update(&json!({"type": "p", "key": "-a", "data": {}})).is_err());
        assert!(workflow_update(&json!({"type": "p", "key": "a", "data": []})).is_err());
    }
}
