//! The piw host: the durable state store, the wire protocol, the host's engine (its decisions,
//! without I/O) and driver (its I/O: connections, the store thread, supervision). The client
//! and worker libraries are `piw-client`'s, re-exported here. See `ARCHITECTURE.md` at the
//! repository root.

pub use piw_engine as engine;
pub use piw_engine::{graph, protocol};
// The client side moved to `piw-client` (what the bindings link, without the store or the
// server); the host and the CLI keep reaching it here.
pub use piw_client::{client, ids, paths, worker};

pub mod channels;
pub mod clock;
pub mod driver;
pub mod store;
pub mod supervise;
