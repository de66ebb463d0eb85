//! piw-ffi
