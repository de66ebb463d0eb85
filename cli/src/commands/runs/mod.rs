//! `piw runs` (the list) and `piw runs prune`.

pub(super) mod list;
pub(super) mod prune;
