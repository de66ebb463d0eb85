//! Helpers shared by the host's process-level test suites.
#![allow(dead_code)] // each suite uses its own part

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use piw_host::client::BlockingClient;
use piw_host::paths::PiwPaths;
use piw_host::protocol::{payload, Request, RequestBody};
use serde_json::{json, Value};

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

/// How long a test's client call, a host's stop or a run's way to a status may take: only a
/// hang reaches it.
pub const HANG_BOUND: Duration = Duration::from_secs(30);

/// Where [`TempHome::serve`]'s hosts write their stderr, beside the installation.
const HOSTS_LOG: &str = "hosts.log";

/// A temporary installation: `dir` holds `home/` (`PIW_HOME`), `user/` (the `HOME` of every
/// `piw` it runs: never the real one) and whatever a test writes beside them. Whatever the
/// test's outcome, no process of the installation outlives it.
pub struct TempHome {
    pub dir: tempfile::TempDir,
    pub paths: PiwPaths,
    /// Added to the environment of every `piw` this installation runs.
    env: Vec<(String, std::ffi::OsString)>,
}

impl Drop for TempHome {
    fn drop(&mut self) {
        kill_installation(&self.paths.home);
    }
}

impl TempHome {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("user")).unwrap();
        let paths = PiwPaths::for_home(dir.path().join("home"));
        Self {
            dir,
            paths,
            env: Vec::new(),
        }
    }

    /// This installation with `key=value` in the environment of every `piw` it runs.
    pub fn with_env(mut self, key: &str, value: impl Into<std::ffi::OsString>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// `name` beside the installation.
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// `piw <args>` for this installation (warnings and errors only in its log).
    pub fn piw(&self, args: &[&str]) -> Command {
        let mut cmd = piw_command();
        cmd.args(args)
            .env("PIW_HOME", &self.paths.home)
            .env("HOME", self.path("user"))
            .env("PIW_LOG", "warn");
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd
    }

    /// A ready `piw host serve`, its stdout discarded and its stderr appended to `hosts.log`
    /// beside the installation (what a host that fails to start says).
    pub fn serve(&self) -> HostProc {
        self.serve_with(|_| {})
    }

    /// [`serve`](Self::serve) with `configure` applied to its command last (more variables,
    /// other output, limits).
    pub fn serve_with(&self, configure: impl FnOnce(&mut Command)) -> HostProc {
        let log = self.path(HOSTS_LOG);
        let sink = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut cmd = self.piw(&["host", "serve"]);
        cmd.stdout(Stdio::null()).stderr(sink);
        configure(&mut cmd);
        HostProc::start_ready(&mut cmd, &self.paths, Some(&log))
    }

    /// A `piw host serve` that must refuse to start: its exit code ([`wait_exit`]) and what it
    /// said.
    pub fn refused_serve(&self) -> (Option<i32>, String) {
        let mut child = self
            .piw(&["host", "serve"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let code = wait_exit(&mut child, HANG_BOUND);
        let mut err = String::new();
        // One that did not exit was killed; what it left on its stderr may never end.
        if code.is_some() {
            let mut stderr = child.stderr.take().unwrap();
            std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
        }
        (code, err)
    }

    /// A client of this installation's host whose calls give up after [`HANG_BOUND`].
    pub fn client(&self) -> BlockingClient {
        let c = BlockingClient::connect(&self.paths).unwrap();
        c.set_timeout(Some(HANG_BOUND)).unwrap();
        c
    }

    /// Asks the host to stop and waits until it has exited, cleanly (code 0).
    pub fn stop(&self, mut host: HostProc) {
        let _ = self.client().call(RequestBody::HostStop);
        let code = wait_exit(&mut host, HANG_BOUND);
        assert_eq!(code, Some(0), "a graceful stop exits 0");
    }

    /// A workflow whose runs park at once on a checkpoint: they sit `waiting`, held by nobody
    /// (no child), which is what host-level tests act on. Its path.
    pub fn parking_workflow(&self) -> String {
        let file = self.path("parks.workflow.json");
        let fixture = json!({
            "graph": {"name": "parks", "start": "ask",
                      "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "checkpoint"}}
        });
        std::fs::write(&file, fixture.to_string()).unwrap();
        file.display().to_string()
    }

    /// Starts a run of the [`parking_workflow`](Self::parking_workflow) in session `s1` and
    /// waits until it is `waiting`. Its id.
    pub fn start_parked(&self, c: &mut BlockingClient) -> String {
        let r = c
            .call(RequestBody::RunStart(payload::RunStart {
                workflow_file: self.parking_workflow(),
                input: json!({}),
                session_id: Some("s1".into()),
                execution_mode: None,
                project_dir: None,
            }))
            .unwrap();
        let run_id = r.body["run_id"].as_str().unwrap().to_owned();
        wait_for_status(c, &run_id, "waiting");
        run_id
    }
}

/// `child`'s exit code once it exits within `within`; `None` if it was killed by a signal, or
/// did not exit in time (it is killed then).
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    None
}

/// A `run.status` request for `run_id` (a new request id each time).
pub fn status_request(run_id: &str) -> Request {
    Request::new(
        piw_host::ids::new_id("st"),
        RequestBody::RunStatus(Default::default()),
    )
    .with_run_id(run_id)
}

/// The status of `run_id`.
pub fn run_status(c: &mut BlockingClient, run_id: &str) -> Value {
    c.send(status_request(run_id)).unwrap().body
}

/// Polls `run_id`'s status until the run is `wanted` ([`HANG_BOUND`]); that status.
pub fn wait_for_status(c: &mut BlockingClient, run_id: &str, wanted: &str) -> Value {
    let start = Instant::now();
    loop {
        let status = run_status(c, run_id);
        if status["run"]["status"] == json!(wanted) {
            return status;
        }
        assert!(
            start.elapsed() < HANG_BOUND,
            "the run never became {wanted}: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `cmd` under an open-file limit of `soft` (and `hard`).
pub fn limit_open_files(cmd: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setrlimit in the forked child before exec, async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
