//! The host's engine: every decision the host makes about a request batch, a child's message
//! or report, and the time, without I/O (no runtime, thread, channel, socket, file, process,
//! environment or clock of its own: `core/tests/engine_io_free.rs` checks every file here).
//! It reaches the store through `Store`/`WriteTx`; a [`turn`] hands what must happen outside
//! (reply, publish, launch or stop a child) to the [`driver`](crate::driver) as typed
//! effects, in order.

pub mod bridges;
pub mod children;
pub mod dispatch;
mod fit;
pub mod handlers;
pub mod retention;
pub mod timers;
pub mod turn;
