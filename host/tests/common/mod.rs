//! Helpers shared by the host's process-level test suites.
#![allow(dead_code)] // each suite uses its own part

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use piw_core::client::BlockingClient;
use piw_core::paths::PiwPaths;
use piw_core::protocol::RequestBody;

/// How long a test waits for a host it started to answer.
const READY_BOUND: Duration = Duration::from_secs(30);

/// A host process that is killed if a test fails before stopping it, so failures leave no
/// stray hosts behind.
pub struct HostProc(pub Child);

impl HostProc {
    /// Starts `cmd` (a `piw host serve`) and waits until the host on `paths` answers
    /// `host.status`. A host that exits first, or is not ready within 30 s, fails the test
    /// with what it wrote to `log` (its stderr, when the caller sent it there) or to a piped stderr, so a failure
    /// in CI says why instead of only that.
    pub fn start_ready(cmd: &mut Command, paths: &PiwPaths, log: Option<&Path>) -> Self {
        let mut host = HostProc(cmd.spawn().expect("cannot start piw host serve"));
        let start = Instant::now();
        let why = loop {
            if let Ok(mut c) = BlockingClient::connect(paths) {
                if c.call(RequestBody::HostStatus).is_ok() {
                    return host;
                }
            }
            if let Some(status) = host.try_wait().expect("cannot poll the host") {
                break format!("the host exited ({status})");
            }
            // A bound on a hang, not a speed check: a start takes milliseconds, but a CI
            // machine busy writing back a fresh build can stall each of its syncs for seconds.
            if start.elapsed() > READY_BOUND {
                break format!("the host did not become ready within {READY_BOUND:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut text = log
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        // A piped stderr can be read to its end once the host has exited.
        if let (Ok(Some(_)), Some(mut err)) = (host.try_wait(), host.stderr.take()) {
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
        }
        panic!("{why}; its log:\n{text}");
    }
}

impl std::ops::Deref for HostProc {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for HostProc {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

pub use piw_tests::kill_installation;

/// The `piw` binary with Pi's agent directory pointed away from the real home: a host reads
/// Pi's settings for the default model of detached runs' steps, and a test's host must never
/// find the user's (nor start their Pi with their model).
#[allow(dead_code)]
pub fn piw_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_piw"));
    cmd.env("PI_CODING_AGENT_DIR", no_pi_agent_dir());
    cmd
}

/// A Pi agent directory that does not exist (see [`piw_command`]).
#[allow(dead_code)]
pub fn no_pi_agent_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("piw-tests-no-pi-agent")
}
