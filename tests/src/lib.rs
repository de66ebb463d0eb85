//! piw-tests: cross-crate integration suites, and `piw-test-worker`, a worker that runs
//! `.workflow.json` fixtures with scripted node behaviours (see `src/bin/piw-test-worker.rs`).
