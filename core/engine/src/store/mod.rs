//! What the engine knows of the durable state: its vocabulary and pure rules ([`model`]) and
//! the records the store hands out ([`records`]). The SQL lives in `piw_core::store`.

pub mod error;
pub mod model;
pub mod port;
pub mod records;

pub use error::{DatabaseError, StoreError, StoreResult};
pub use model::*;
pub use port::{Storage, Transaction};
pub use records::*;
