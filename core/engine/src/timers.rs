//! The host's own deadlines: when the store thread must wake next, and the deadline pass of
//! the store (expired interactions, decisions and claims, due durable timers); and what a
//! child's `worker.wait_until` sets. Deciding code: it names no I/O (`io_free`); what
//! it commits is published by the store thread.

use super::children;
use crate::protocol::payload;
use crate::state::HostState;
pub use crate::store::Wake;
use crate::store::{Claim, Storage, StoreError, Transaction};
use crate::time::UnixMillis;

/// The earliest time the host has deadline work: the store's own deadlines (claim
/// expiry, interaction deadlines, timers' wake times), the children's (heartbeats, node
/// deadlines, handshake timeouts, lingering children, delayed runs) and the retention pass.
/// `None` when nothing is due. `now` is the time the driver reads before it sleeps.
pub fn next_deadline_at(store: &dyn Storage, state: &HostState, now: UnixMillis) -> Option<i64> {
    let store_deadline = match store.next_deadline() {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "cannot compute the next deadline; retrying in 1 s");
            Some(now + 1_000)
        }
    };
    [
        store_deadline,
        children::next_child_deadline(store, state, now),
        super::retention::next_retention_at(state),
        super::bridges::next_deadline(state),
        super::presence::next_deadline(state),
        super::channels::next_deadline(state),
    ]
    .into_iter()
    .flatten()
    .min()
    // While the disk is full, nothing due can be committed: waking at once for it again would
    // spin (and log) until there is space. The store says when to try again.
    .map(|at| match store.disk_full_retry_at() {
        Some(retry_at) => at.max(retry_at),
        None => at,
    })
}

/// Deadlines owned by the host: expired interactions and decisions, due timers, and expired
/// claims. What they committed waits in `state.unpublished`.
pub fn run_due_work(store: &mut dyn Storage, state: &mut HostState) {
    // A step may have expired, a bridge's handshake bound passed.
    state.bridges.up_to_date = false;
    let owner_id = state.owner_id.as_str();
    let result = store.write(state.now, |w| {
        w.expire_due_interactions()?;
        w.expire_due_decisions()?;
        w.fire_due_timers()?;
        w.recover_expired_claims(Some(owner_id))?;
        // Every run written, from its revision before this pass: a run that both expired
        // and was recovered here publishes all its events.
        Ok(w.take_runs_written())
    });
    match result {
        Ok(touched) if !touched.is_empty() => {
            tracing::info!(count = touched.len(), "deadline work committed");
            state.unpublished.extend(touched);
        }
        Ok(_) => {}
        Err(e) => crate::store_error!(e, "deadline work failed"),
    }
}

/// The wake of a `worker.wait_until`: after `for_ms`, or at `until_ms` (clamped to the
/// store's time range; [`worker_wait_until`] refuses one past [`MAX_WAKE_MS`]). The decoder
/// lets exactly one through.
pub fn wake_of(wait: &payload::WorkerWaitUntil) -> Wake {
    match (wait.for_ms, wait.until_ms) {
        (Some(ms), _) => Wake::After(ms),
        (None, Some(at)) => Wake::At(i64::try_from(at).unwrap_or(i64::MAX)),
        (None, None) => Wake::After(0),
    }
}

/// The latest wake time a timer may have: the end of the year 9999 (Unix milliseconds).
/// A wake time beyond it is a mistake of the workflow (a time in microseconds or
/// nanoseconds, say), and one past `i64::MAX` would be clamped or wrap in the arithmetic of
/// deadlines: refused rather than stored.
pub const MAX_WAKE_MS: UnixMillis = 253_402_300_799_999;

/// `worker.wait_until`: parks the attempt on a durable timer. The wake time is decided here,
/// once, from the host's clock, and stored; the reply says when. A wake time past
/// [`MAX_WAKE_MS`] is `invalid_input`.
pub fn worker_wait_until(
    w: &mut dyn Transaction,
    claim: &Claim,
    attempt_id: &str,
    wait: &payload::WorkerWaitUntil,
) -> Result<crate::protocol::reply::TimerSet, StoreError> {
    let wake = wake_of(wait);
    if wake.at(w.now_ms()) > MAX_WAKE_MS {
        return Err(StoreError::InvalidInput(format!(
            "the wake time is past the year 9999 ({MAX_WAKE_MS} ms): `until_ms` and `for_ms` \
             are milliseconds (until_ms {:?}, for_ms {:?})",
            wait.until_ms, wait.for_ms
        )));
    }
    let set = w.wait_until(claim, attempt_id, wake, &wait.output)?;
    Ok(crate::protocol::reply::TimerSet {
        timer_id: set.timer_id,
        wake_at: set.wake_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_duration_wakes_after_the_hosts_now_and_a_time_at_itself() {
        let after = payload::WorkerWaitUntil {
            for_ms: Some(60_000),
            until_ms: None,
            output: Value::Null,
        };
        assert_eq!(wake_of(&after).at(1_000), 61_000);
        let at = payload::WorkerWaitUntil {
            for_ms: None,
            until_ms: Some(5_000),
            output: Value::Null,
        };
        assert_eq!(wake_of(&at).at(1_000), 5_000);
        let far = payload::WorkerWaitUntil {
            for_ms: Some(u64::MAX),
            until_ms: None,
            output: Value::Null,
        };
        assert_eq!(wake_of(&far).at(1_000), i64::MAX);
    }
}
