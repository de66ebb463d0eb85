//! The host's memory of who presents interactive steps now; the decisions over it are
//! [`crate::presence`]'s.

use std::collections::{BTreeMap, BTreeSet};

use crate::store::Holder;

/// The holders the host knows to be there. Its fields are [`crate::presence`]'s alone.
#[derive(Debug, Default)]
pub struct Presence {
    /// Session id -> the connections (driver-given numbers) that follow its events.
    pub(crate) sessions: BTreeMap<String, BTreeSet<u64>>,
    /// Holders whose hold or release did not commit, to try again from `retry_at`.
    pub(crate) unsynced: BTreeSet<Holder>,
    pub(crate) retry_at: Option<i64>,
}
