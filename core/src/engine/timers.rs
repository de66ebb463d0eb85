//! The host's own deadlines: when the store thread must wake next, and the deadline pass of
//! the store (expired interactions, decisions and claims). Deciding code: it names no I/O
//! (`engine_io_free`); what it commits is published by the store thread.

use super::children;
use super::dispatch::HostState;
use crate::store::Store;

/// The earliest time the host has deadline work: the store's own deadlines (claim
/// expiry, interaction deadlines) and the children's (heartbeats, node deadlines, handshake
/// timeouts, lingering children, delayed runs). `None` when nothing is due.
pub fn next_deadline_at(store: &Store, state: &HostState) -> Option<i64> {
    let store_deadline = match store.next_deadline() {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "cannot compute the next deadline; retrying in 1 s");
            Some(store.now_ms() + 1_000)
        }
    };
    [
        store_deadline,
        children::next_child_deadline(store, state),
        super::bridges::next_deadline(state),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Deadlines owned by the host: expired interactions and decisions, and expired claims.
/// What they committed waits in `state.unpublished`.
pub fn run_due_work(store: &mut Store, state: &mut HostState) {
    // A step may have expired, a bridge's handshake bound passed.
    state.bridges.up_to_date = false;
    let owner_id = state.owner_id.as_str();
    let result = store.write(|w| {
        w.expire_due_interactions()?;
        w.expire_due_decisions()?;
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
        Err(e) => tracing::error!(error = %e, "deadline work failed"),
    }
}
