//! piw's client side: the client library (connect to the host, starting it on demand; typed
//! requests, receipts, rejections and subscriptions), the worker library a run's child uses,
//! where an installation lives, and the few readers of the host's lock they need. It speaks the
//! engine's protocol and vocabulary and links neither SQLite nor the host: the CLI, the Node
//! addon and the C ABI build on it. See `ARCHITECTURE.md` at the repository root.

pub use piw_engine as engine;
pub use piw_engine::{graph, protocol};

pub mod client;
pub mod ids;
pub mod lock;
pub mod paths;
pub mod procfs;
pub mod worker;
