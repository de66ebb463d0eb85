//! Time as the engine sees it: a number the driver passes in. The engine never reads a clock.

/// Milliseconds since the Unix epoch.
pub type UnixMillis = i64;
