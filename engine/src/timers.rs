//! The host's own deadlines: when the store thread must wake next, and the deadline pass of
//! the store (expired interactions, decisions and claims, due durable timers). What a child's
//! `worker.wait_until` sets is decided with its other messages (`children::messages`). Deciding code: it names no I/O (`io_free`); what
//! it commits is published by the store thread.

use super::children;
pub use super::children::{wake_of, worker_wait_until, MAX_WAKE_MS};
use crate::state::HostState;
use crate::store::Storage;
pub use crate::store::Wake;
use crate::time::UnixMillis;

/// The earliest time the host has deadline work: the store's own deadlines (claim
/// expiry, interaction deadlines, timers' wake times), the children's (heartbeats, node
/// deadlines, handshake timeouts, lingering children, delayed runs) and the retention pass.
/// `None` when nothing is due. `now` is the time the driver reads before it sleeps.
pub fn next_deadline_at(store: &dyn Storage, state: &HostState, now: UnixMillis) -> Option<i64> {
    let store_deadline = match store.next_deadline(now) {
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
        super::controllers::next_deadline(state, now),
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
pub fn run_due_work(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    // A step may have expired, a bridge's handshake bound passed.
    state.bridges.up_to_date = false;
    let owner_id = state.owner_id.as_str();
    let result = store.write(now, |w| {
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
