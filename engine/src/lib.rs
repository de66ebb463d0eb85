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
//! Inputs only: the time is the turn's `now`, and every transaction of the turn is opened at it
//! (`Storage::write(now, ..)`); every other entry point that decides by the time takes `now`
//! too, [`state::HostState`] keeps none, and the store's reads that depend on it
//! (`next_deadline`, `next_delayed_ready`, `diagnose`, `repair`, `prune_runs`) are asked at that
//! `now`, never at the store's clock. New ids' random bits come from the [`ids::IdSource`]s it
//! is handed (`HostState::new`, the store's `StoreConfig::ids`), so a seed replays a simulation
//! bit for bit (`io_free` forbids `rand`, clocks and OS-seeded `HashMap`s). Out go effects:
//! replies, events to publish, launches and stops, the sweep of leftover run logs, the next
//! wake-up.
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
