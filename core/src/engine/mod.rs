//! The host's engine: every decision the host makes about a request batch, a child's message
//! or report, and the time, without I/O (no runtime, thread, channel, socket, file, process,
//! environment or clock of its own: `core/tests/engine_io_free.rs` checks every file here).
//! It reaches the store through `Store`/`WriteTx`, and leaves what must happen outside (launch
//! or stop a child, publish a run's events) in [`dispatch::HostState`] for the
//! [`driver`](crate::driver) to carry out.

pub mod bridges;
pub mod children;
pub mod dispatch;
pub mod timers;
