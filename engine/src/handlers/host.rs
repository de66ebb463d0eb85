//! Requests about the host and its store as a whole: `host.status`, `diagnose`, `subscribe`.

use crate::protocol::payload;
use crate::protocol::reply::{DiagnoseReply, HostCounts};
use crate::state::HostState;
use crate::store::{Storage, StoreError};
use crate::time::UnixMillis;

/// `subscribe`: receive events of a run or a session on this connection (no body).
pub(crate) fn subscribe(store: &dyn Storage, s: &payload::Subscribe) -> Result<(), StoreError> {
    // The connection asks only whether the run exists; it makes the subscription itself.
    if let Some(run_id) = &s.run_id {
        store.run_state(run_id)?;
    }
    Ok(())
}

/// `host.status`: host health and identity.
pub(crate) fn status(
    store: &dyn Storage,
    state: &HostState,
    now: UnixMillis,
) -> Result<HostCounts, StoreError> {
    let runs = store
        .count_by_status()?
        .into_iter()
        .map(|(status, n)| (status.as_str().to_owned(), n))
        .collect();
    Ok(HostCounts {
        channels: crate::channels::status(state, now),
        active_children: state.live_children(),
        runs,
    })
}

/// `diagnose`: what the store's consistency checks find.
pub(crate) fn diagnose(store: &dyn Storage, now: UnixMillis) -> Result<DiagnoseReply, StoreError> {
    Ok(DiagnoseReply {
        findings: store.diagnose(now)?,
    })
}
