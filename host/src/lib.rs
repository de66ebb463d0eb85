//! piw-host
