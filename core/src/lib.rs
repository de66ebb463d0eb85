//! piw core: the durable state store, the wire protocol, the host's engine (its decisions,
//! without I/O) and driver (its I/O: connections, the store thread, supervision), and the
//! client and worker libraries. See `ARCHITECTURE.md` at the repository root.

pub use piw_engine::{graph, ids, protocol};

pub mod client;
pub mod clock;
pub mod driver;
pub mod engine;
pub mod paths;
pub mod store;
pub mod supervise;
pub mod worker;
