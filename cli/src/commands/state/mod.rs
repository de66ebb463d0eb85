//! `piw state backup|restore|reset` (the work under the installation lock: [`crate::state`]).

pub(super) mod backup;
pub(super) mod reset;
pub(super) mod restore;
