//! piw core: the durable state store, the wire protocol, and (in later layers) the host,
//! supervision, client and worker libraries. See `ARCHITECTURE.md` at the repository root.

pub mod client;
pub mod clock;
pub mod graph;
pub mod host;
pub mod ids;
pub mod paths;
pub mod protocol;
pub mod store;
pub mod supervise;
pub mod worker;
