//! piw's engine: what the host decides, with no I/O (in the manner of quinn-proto under quinn).
//! `piw-core`'s driver does the I/O around it: sockets, the SQLite store, processes, clocks.
//!
//! - [`protocol`]: the wire format shared by the host, its clients and its workers;
//! - [`graph`]: the workflow snapshot and its pure routing;
//! - [`store`]: what the engine knows of the durable state: its vocabulary and pure rules
//!   ([`store::model`]), the records the store hands out ([`store::records`]);
//! - [`ids`]: random ids and claim tokens (stored only as hashes).
//!
//! See `ARCHITECTURE.md` at the repository root.

pub mod graph;
pub mod ids;
pub mod process;
pub mod protocol;
pub mod store;
pub mod time;
