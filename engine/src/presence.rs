//! Who presents interactive steps now, and the store told so: an `agent` or `assistantMessage`
//! step's time runs only while it is presented (`WriteTx::hold_interactions`, `holds.rs` in the
//! store), so closing Pi, a bridge not yet started or a host that is down uses up none of it.
//!
//! - An interactive run's steps are presented by its origin session while a live client of
//!   that session follows its events: the driver reports each connection's first subscription
//!   to a session and the end of its last one ([`crate::turn::Input::SessionWatched`],
//!   [`crate::turn::Input::SessionUnwatched`]); the session is there while any connection
//!   watches it (a reconnect that overlaps the old connection's close holds on).
//! - A detached run's steps are presented by its bridge from its hello until it exits
//!   (`bridges::on_reports`).
//! - At the host's start nobody is there (the store released every hold at startup); sessions
//!   reconnect and bridges start again.
//!
//! Each change is one store transaction. One that fails (a full disk) is tried again at the
//! next turn after [`RETRY_MS`], with whatever the holder's presence is by then.

pub use crate::state::presence::Presence;
use crate::state::HostState;
use crate::store::{Holder, Storage};
use crate::time::UnixMillis;

/// How long after a failed hold or release it is tried again.
pub const RETRY_MS: i64 = 1_000;

impl Presence {
    /// Whether `holder` is there now (a bridge: it said hello and has not exited).
    pub fn is_present(&self, holder: &Holder, bridges: &crate::state::bridges::Bridges) -> bool {
        match holder {
            Holder::Session(session) => self.sessions.get(session).is_some_and(|c| !c.is_empty()),
            Holder::Bridge(run_id) => bridges.live.get(run_id).is_some_and(|e| e.hello),
        }
    }
}

/// Whether `holder` is there now.
pub fn is_present(state: &HostState, holder: &Holder) -> bool {
    state.presence.is_present(holder, &state.bridges)
}

/// Connection `connection` follows session `session`'s events: the session's steps are held
/// from now if it was not there.
pub fn session_watched(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    session: String,
    connection: u64,
) {
    let watchers = state.presence.sessions.entry(session.clone()).or_default();
    let arrived = watchers.is_empty();
    watchers.insert(connection);
    if arrived {
        tracing::debug!(%session, connection, "a session is there; its steps are held");
        sync(store, state, now, Holder::Session(session));
    }
}

/// Connection `connection` no longer follows session `session`'s events (it unsubscribed or
/// closed): when it was the last, the session's steps are released.
pub fn session_unwatched(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    session: String,
    connection: u64,
) {
    let Some(watchers) = state.presence.sessions.get_mut(&session) else {
        return;
    };
    watchers.remove(&connection);
    if watchers.is_empty() {
        state.presence.sessions.remove(&session);
        tracing::debug!(%session, connection, "a session went away; its steps are released");
        sync(store, state, now, Holder::Session(session));
    }
}

/// A bridge said hello (`present`) or exited: its run's steps are held or released.
pub fn bridge_changed(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    run_id: &str,
) {
    sync(store, state, now, Holder::Bridge(run_id.to_owned()));
}

/// Tells the store whether `holder` is there now, in a transaction of its own; a failure is
/// kept for [`retry`].
fn sync(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis, holder: Holder) {
    let present = is_present(state, &holder);
    let result = store.write(now, |w| {
        if present {
            w.hold_interactions(&holder)
        } else {
            w.release_interactions(&holder)
        }
    });
    match result {
        Ok(_) => {
            state.presence.unsynced.remove(&holder);
        }
        Err(e) => {
            crate::store_error!(
                e,
                ?holder,
                present,
                "cannot record who presents steps; trying again"
            );
            state.presence.unsynced.insert(holder);
            state.presence.retry_at = Some(now.saturating_add(RETRY_MS));
        }
    }
}

/// Tries again the holds and releases that did not commit, once their time has come.
pub fn retry(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    if state.presence.retry_at.is_none_or(|at| at > now) {
        return;
    }
    state.presence.retry_at = None;
    let unsynced: Vec<Holder> = std::mem::take(&mut state.presence.unsynced)
        .into_iter()
        .collect();
    for holder in unsynced {
        sync(store, state, now, holder);
    }
}

/// When the store thread must wake for [`retry`].
pub fn next_deadline(state: &HostState) -> Option<i64> {
    state.presence.retry_at
}
