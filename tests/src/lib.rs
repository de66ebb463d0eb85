//! piw-tests
