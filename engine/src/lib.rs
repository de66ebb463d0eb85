//! piw's engine: every decision the host makes about a request batch, a child's message or
//! report, and the time, with no I/O (in the manner of quinn-proto under quinn). No runtime,
//! thread, channel, socket, file, process, environment or clock: this crate depends on none
//! (`Cargo.toml`), and `engine/tests/io_free.rs` reads every file.
//!
//! It reaches the durable state through the interface it owns ([`store::Storage`] and
//! [`store::Transaction`], which `piw_host::store` implements over SQLite); a [`turn`] hands
//! what must happen outside (reply, publish, launch or stop a child) to the driver
//! (`piw_host::driver`) as typed effects, in order.
//!
//! - the wire and the vocabulary: [`protocol`] (shared by the host, its clients and its
//!   workers), [`graph`] (the workflow snapshot and its pure routing), [`store`] (statuses,
//!   records, errors and the store interface), [`ids`], [`process`] (what a child process is);
//! - the decisions: [`admission`] (what a connection may do before its request reaches a
//!   turn), [`turn`], [`dispatch`] and [`handlers`] (client requests), [`children`]
//!   (scheduling, worker messages, child reports), [`timers`], [`retention`], [`bridges`],
//!   [`presence`] (who presents interactive steps, whose time runs only then), over the
//!   host's memory between turns, [`state`].
//!
//! See `ARCHITECTURE.md` at the repository root.

/// Logs a failed store write as `tracing::error!` would, except on a full disk: the store
/// says once when the disk fills and once when it has space again (`Store::write`), and the
/// host retries with growing pauses, so a line per failed attempt would only fill the log
/// (of the same full disk) at the retry rate.
macro_rules! store_error {
    ($e:expr, $($rest:tt)+) => {{
        let e: &$crate::store::error::StoreError = &$e;
        if e.is_disk_full() {
            tracing::debug!(error = %e, $($rest)+);
        } else {
            tracing::error!(error = %e, $($rest)+);
        }
    }};
}
pub(crate) use store_error;

pub mod graph;
pub mod ids;
pub mod process;
pub mod protocol;
pub mod store;
pub mod time;

pub mod admission;
pub mod bridges;
pub mod channels;
pub mod children;
pub mod controllers;
pub mod detached_model;
pub mod dispatch;
mod fit;
pub mod handlers;
pub mod helper_processes;
pub mod presence;
pub mod retention;
pub mod state;
pub mod timers;
pub mod turn;
