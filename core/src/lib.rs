//! piw core: the durable state store, the wire protocol, the host's engine (its decisions,
//! without I/O) and driver (its I/O: connections, the store thread, supervision), and the
//! client and worker libraries. See `ARCHITECTURE.md` at the repository root.

pub use piw_engine as engine;
pub use piw_engine::{graph, protocol};

pub mod channels;
pub mod client;
pub mod clock;
pub mod driver;
pub mod ids;
pub mod paths;
pub mod store;
pub mod supervise;
pub mod worker;
