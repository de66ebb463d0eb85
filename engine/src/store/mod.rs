//! What the engine knows of the durable state: its vocabulary and pure rules ([`model`]), the
//! records the store hands out ([`records`]), what it refuses or fails with ([`error`]), and
//! the interface the engine calls it through ([`port`]). The SQL lives in `piw_host::store`.

pub mod controller_port;
pub mod controllers;
pub mod error;
pub mod model;
pub mod port;
pub mod records;

pub use controller_port::{ControllerStorage, ControllerTransaction};
pub use error::{DatabaseError, FileProblem, StoreError, StoreResult};
pub use model::*;
pub use port::{Storage, Transaction};
pub use records::*;
