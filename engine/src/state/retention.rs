//! What the host keeps of finished runs on its own; the retention pass is
//! [`crate::retention`]'s.

/// What the host keeps of finished runs on its own (off unless configured): a finished run
/// goes when every given bound says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Runs that finished more than this many days ago go (`PIW_RETAIN_DAYS`).
    pub days: Option<u64>,
    /// The newest this many finished runs stay (`PIW_RETAIN_RUNS`).
    pub runs: Option<u64>,
}
