//! What the driver's tasks send each other, as types of their own so that every task names
//! them from here and none from another task's module: the store thread's queue ([`StoreMsg`],
//! [`Job`]), a reply's way back ([`ReplyTx`]), the supervisor's command channel
//! ([`SupervisorTx`]) and a committed event ([`RunEvent`]).

use tokio::sync::oneshot;

use crate::engine::children::SupervisorCmd;
use crate::engine::turn;
use crate::protocol::{Receipt, Rejection};

pub use crate::engine::turn::RunEvent;

/// A committed event as the subscribers' broadcast carries it: shared, so each of the
/// channel's slots holds a pointer (16,384 slots of whole events kept 2.8 MiB resident in an
/// idle host) and each subscriber takes a reference instead of a copy of its strings and data.
pub type Published = std::sync::Arc<RunEvent>;

/// A reply to one request.
pub type ReplyTx = oneshot::Sender<Result<Receipt, Rejection>>;

/// What the store thread receives.
pub type StoreMsg = turn::Input<ReplyTx>;

/// One request for the store thread.
pub type Job = turn::Job<ReplyTx>;

/// The supervisor's command channel, as the store thread holds it.
pub type SupervisorTx = tokio::sync::mpsc::UnboundedSender<SupervisorCmd>;
