//! piw-tests: the home of cross-crate integration suites and shared fixtures. The end-to-end
//! suites that need the `piw` binaries live beside them in `host/tests/` (Cargo exposes a
//! package's binaries only to its own tests).
