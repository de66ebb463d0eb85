//! `piw host start|serve|status|stop`.

pub(super) mod serve;
pub(super) mod start;
pub(super) mod status;
pub(super) mod stop;
