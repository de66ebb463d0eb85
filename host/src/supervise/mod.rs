//! Supervision of child processes: one OS process per active run.
//!
//! This module spawns a program in **its own process group**, feeds it a payload on stdin
//! (the launch envelope) and closes stdin, drains stdout and stderr **continuously** into
//! bounded tails, reports the exit once the process has been reaped and its pipes drained, and
//! stops the **whole group** (SIGTERM, then SIGKILL after a grace). It also cleans up groups
//! left behind by an earlier host ([`kill_orphan_groups`]). It knows nothing about the store,
//! runs or the protocol; the host wires those up.
//!
//! Linux only: it reads `/proc` and uses `waitid`.
//!
//! # Process identity and the leader's zombie
//!
//! The group id is the leader's pid. Signalling a group by id is only safe while that id cannot
//! be reused, so the supervisor observes the leader's exit **without reaping it**
//! (`waitid(WNOWAIT)`): the leader stays a zombie, which keeps its pid, and thus the group id,
//! reserved for as long as the [`Supervised`] handle lives. [`Supervised::stop`] therefore
//! never hits an unrelated group, even long after the leader exited. Dropping the handle kills
//! whatever is left of the group (SIGKILL) and reaps the leader.
//!
//! Descendants that outlive the leader are re-parented to the nearest subreaper (usually
//! pid 1) and reaped there; if that process does not reap, killed descendants remain as
//! zombies. Liveness checks ([`group_alive`]) therefore ignore zombies.
//!
//! # Waiting while doing other things
//!
//! [`Supervised::wait`] is cancel-safe and can sit in a `tokio::select!` next to timers and
//! channels. To stop the child from another task, hand that task a [`GroupKiller`]
//! ([`Supervised::killer`]).

#![warn(missing_docs)]

mod orphan;
mod output_log;
pub(crate) mod procfs;
mod tail;

use std::fmt;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use orphan::{
    kill_marked_leftovers, kill_orphan_group, kill_orphan_groups, OrphanOutcome, RecordedProcess,
};
pub use output_log::{cut_line, HELD_BEFORE_FILE};
pub use piw_engine::process::{ChildLimits, OutputLog, SpawnSpec, DEFAULT_TAIL_BYTES};
pub use procfs::{
    flock_held, flock_holders, group_alive, group_members, parse_proc_stat, process_alive,
    process_start_time, processes_with_env, read_proc_stat, ProcStat,
};
use tail::Tail;

/// How long the exit report waits for stdout and stderr to reach end-of-file after the leader
/// exited. A descendant that keeps a pipe open cannot delay the report longer than this.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// How long a stop waits for the group to vanish after SIGKILL before giving up on it.
pub(crate) const KILL_SETTLE: Duration = Duration::from_secs(2);

/// The variables a child inherits from the host's environment (when set there). Everything
/// else comes from [`SpawnSpec::env`]. `PIW_HOME` is passed on so that a workflow that runs
/// `piw` (or a client library) reaches the installation that runs it, not the default one; it
/// also marks every process of an installation, which the test harnesses use to leave none
/// behind.
pub const INHERITED_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "TMPDIR", "PIW_HOME"];

/// The variable that marks every supervised child, and through inheritance its descendants:
/// `PIW_SUPERVISED=<scope>/<supervisor pid>.<n>`, one value per spawn. A descendant that left
/// the child's process group *and* lost its parent chain (a double fork, a daemon whose parent
/// exited) cannot be found through the group or the parent ids any more; it still carries this
/// entry in `/proc/<pid>/environ`, which is how a stop finds it ([`Supervised::stop`]) and how
/// a later host finds what an earlier one left ([`kill_marked_leftovers`]). A process that
/// started with a scrubbed environment (`env -i`) after leaving the group is not found.
pub const MARKER_VAR: &str = "PIW_SUPERVISED";

/// Numbers the spawns of this process, for [`MARKER_VAR`].
static SPAWN_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Size of one read from a child's stdout or stderr.
const READ_CHUNK: usize = 64 * 1024;

/// How a child ended, with what it printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ChildExit {
    /// The exit code, when the child exited normally.
    pub code: Option<i32>,
    /// The signal number, when a signal killed the child.
    pub signal: Option<i32>,
    /// The last bytes written to stdout (at most the spec's `tail_bytes`).
    pub stdout_tail: Vec<u8>,
    /// The last bytes written to stderr (at most the spec's `tail_bytes`).
    pub stderr_tail: Vec<u8>,
    /// Every byte read from stdout.
    pub stdout_total: u64,
    /// Every byte read from stderr.
    pub stderr_total: u64,
    /// False when a pipe was still open [`DRAIN_AFTER_EXIT`] after the leader exited (a
    /// descendant held it); the tails and totals then stop at that moment.
    pub drain_complete: bool,
}

impl ChildExit {
    /// Whether the child exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// An exit whose status could not be observed (the leader was reaped by someone else).
    fn unknown() -> Self {
        Self {
            code: None,
            signal: None,
            stdout_tail: Vec::new(),
            stderr_tail: Vec::new(),
            stdout_total: 0,
            stderr_total: 0,
            drain_complete: false,
        }
    }
}

impl fmt::Debug for ChildExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildExit")
            .field("code", &self.code)
            .field("signal", &self.signal)
            .field("stdout_tail", &String::from_utf8_lossy(&self.stdout_tail))
            .field("stderr_tail", &String::from_utf8_lossy(&self.stderr_tail))
            .field("stdout_total", &self.stdout_total)
            .field("stderr_total", &self.stderr_total)
            .field("drain_complete", &self.drain_complete)
            .finish()
    }
}

/// How [`Supervised::stop`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// Nothing in the group was running; no signal was sent.
    AlreadyGone,
    /// The group ended within the grace after SIGTERM.
    Terminated,
    /// Something outlived the grace and the group was sent SIGKILL.
    Killed,
}

/// Why a child could not be started or supervised.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// The program could not be executed (missing, not executable, a limit could not be set,
    /// ...).
    #[error("cannot spawn `{}`: {source}", .program.display())]
    Spawn {
        /// The program as given in the spec.
        program: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// The working directory is missing or not a directory.
    #[error("cannot spawn `{}`: working directory `{}`: {source}", .program.display(), .cwd.display())]
    Cwd {
        /// The program as given in the spec.
        program: PathBuf,
        /// The working directory as given in the spec.
        cwd: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// The child started but could not be set up for supervision; it has been killed.
    #[error("supervising `{}`: {what}: {source}", .program.display())]
    Io {
        /// The program as given in the spec.
        program: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// What the OS said.
        source: io::Error,
    },
}

impl SuperviseError {
    /// What ran out, when the child could not be started because the host itself is out of
    /// descriptors, memory or processes ([`exhausted_resource`]): the host's own, passing
    /// failure, not the child's or its run's.
    pub fn exhausted_resource(&self) -> Option<&'static str> {
        match self {
            SuperviseError::Spawn { source, .. } | SuperviseError::Io { source, .. } => {
                exhausted_resource(source)
            }
            SuperviseError::Cwd { .. } => None,
        }
    }
}

/// A running (or finished but not yet released) child and its process group.
///
/// Dropping it sends SIGKILL to whatever is left of the group and reaps the leader.
pub struct Supervised {
    shared: Arc<Shared>,
    start_time: u64,
    exit_rx: Option<oneshot::Receiver<ChildExit>>,
    exit: Option<ChildExit>,
}

/// Stops a child's process group from anywhere: cloneable and `Send`. Obtained from
/// [`Supervised::killer`]. Once the [`Supervised`] handle is dropped it does nothing.
#[derive(Clone)]
pub struct GroupKiller {
    shared: Arc<Shared>,
}

/// State shared by the handle, its killers and the reaper thread.
struct Shared {
    pid: u32,
    program: PathBuf,
    /// The child's `PIW_SUPERVISED=...` entry, which its descendants inherit.
    marker_entry: Vec<u8>,
    reap: Mutex<ReapState>,
    runtime: tokio::runtime::Handle,
    /// Where the drains copy the output to, besides the tails.
    output: output_log::Sink,
}

/// Where the leader is in its life. Guarded by one mutex so that a group signal and the reap
/// never interleave: the group id is only signalled while the leader's pid is still held.
#[derive(Debug, Default)]
struct ReapState {
    /// The reaper thread saw the leader exit (it is a zombie now).
    exited: bool,
    /// The [`Supervised`] handle is gone; the reaper thread reaps on exit.
    handle_dropped: bool,
    /// The leader has been reaped: its pid (the group id) may be reused; never signal again.
    reaped: bool,
}

/// The leader's exit status as `waitid` reported it.
#[derive(Debug, Clone, Copy)]
struct RawStatus {
    code: Option<i32>,
    signal: Option<i32>,
}

/// Spawns `spec.program` as the leader of a new process group and starts supervising it.
///
/// stdin receives `spec.stdin_payload` and is closed; stdout and stderr are drained by
/// background tasks into tails of `spec.tail_bytes`. Must be called within a tokio runtime,
/// whose tasks do the draining.
///
/// Cancel-safe: dropping the future before it completes never leaves an unsupervised child
/// behind (a child already started is killed and reaped).
pub async fn spawn(spec: SpawnSpec) -> Result<Supervised, SuperviseError> {
    spawn_with(spec, None).await
}

/// The stdin of a child started by [`spawn_standby`]: hand it the payload (the launch
/// envelope) when the child gets its work. Dropping it closes stdin empty.
#[derive(Debug)]
pub struct StdinHandoff(oneshot::Sender<Vec<u8>>);

impl StdinHandoff {
    /// Writes `payload` to the child's stdin and closes it. `false` when the child is already
    /// gone (its stdin task ended).
    pub fn hand_over(self, payload: Vec<u8>) -> bool {
        self.0.send(payload).is_ok()
    }
}

/// Like [`spawn`], but the child's stdin stays open and empty until the returned
/// [`StdinHandoff`] delivers its payload: for pre-started workers that load their runtime
/// before they know which run they will serve. `spec.stdin_payload` is ignored.
pub async fn spawn_standby(spec: SpawnSpec) -> Result<(Supervised, StdinHandoff), SuperviseError> {
    let (tx, rx) = oneshot::channel();
    let child = spawn_with(spec, Some(rx)).await?;
    Ok((child, StdinHandoff(tx)))
}

async fn spawn_with(
    spec: SpawnSpec,
    later: Option<oneshot::Receiver<Vec<u8>>>,
) -> Result<Supervised, SuperviseError> {
    let program = spec.program.clone();
    let io_err = |what: &'static str| {
        let program = program.clone();
        move |source: io::Error| SuperviseError::Io {
            program,
            what,
            source,
        }
    };
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| io_err("finding the tokio runtime")(io::Error::other(e)))?;
    match std::fs::metadata(&spec.cwd) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(SuperviseError::Cwd {
                program,
                cwd: spec.cwd,
                source: io::Error::from(io::ErrorKind::NotADirectory),
            })
        }
        Err(source) => {
            return Err(SuperviseError::Cwd {
                program,
                cwd: spec.cwd,
                source,
            })
        }
    }

    let mut cmd = std::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for key in INHERITED_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    for (key, value) in &spec.env {
        cmd.env(key, value);
    }
    let seq = SPAWN_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let marker = format!("{}/{}.{seq}", spec.scope, std::process::id());
    cmd.env(MARKER_VAR, &marker);
    let limits = spec.limits;
    // Core dumps are off for every child through the limit it inherits from this process, so
    // a child without CPU or memory limits needs no pre-exec hook, and std starts it with
    // posix_spawn (vfork) instead of copying this process's page tables with fork.
    disable_own_core_dumps().map_err(io_err("turning core dumps off"))?;
    if limits.cpu_seconds.is_some() || limits.memory_bytes.is_some() {
        // SAFETY: the closure runs in the forked child before exec, where only
        // async-signal-safe calls are allowed. `apply_limits` calls only getrlimit/setrlimit
        // (plain syscalls), does not allocate (its errors are `io::Error::last_os_error`,
        // which stores an integer) and touches no locks or shared state.
        unsafe {
            cmd.pre_exec(move || apply_limits(limits));
        }
    }
    // fork+exec blocks for the length of the exec handshake; keep it off the async workers.
    // The guard travels with the child: if this future is dropped while the blocking task
    // runs, the task's output is dropped and the guard kills and reaps the child.
    let spawned = tokio::task::spawn_blocking(move || {
        cmd.spawn().map(|child| {
            let guard = SpawnGuard {
                pid: child.id(),
                armed: true,
            };
            (child, guard)
        })
    })
    .await
    .map_err(io::Error::other)
    .and_then(|r| r);
    let (mut child, mut guard) = spawned.map_err(|source| SuperviseError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id();
    if spec.nice > 0 {
        lower_priority(pid, spec.nice);
    }
    // From here on `guard` kills and reaps the child if setting up supervision fails.
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io_err("taking the pipes")(io::Error::other(
            "a piped stream was missing",
        )));
    };
    // `child` is dropped without waiting: std never reaps on drop; the reaper thread does.
    drop(child);
    let stdin = tokio::process::ChildStdin::from_std(stdin).map_err(io_err("registering stdin"))?;
    let stdout =
        tokio::process::ChildStdout::from_std(stdout).map_err(io_err("registering stdout"))?;
    let stderr =
        tokio::process::ChildStderr::from_std(stderr).map_err(io_err("registering stderr"))?;
    let start_time = process_start_time(pid).ok_or_else(|| {
        io_err("reading /proc/<pid>/stat")(io::Error::from(io::ErrorKind::NotFound))
    })?;

    let output = output_log::Sink::new();
    if let Some(log) = &spec.output_log {
        // Before the drains start, so that the file has the output from its first byte.
        if let Err(e) = output.attach(log) {
            tracing::warn!(path = %log.path.display(), error = %e, "cannot open the child's output log");
        }
    }
    let shared = Arc::new(Shared {
        pid,
        program: program.clone(),
        marker_entry: format!("{MARKER_VAR}={marker}").into_bytes(),
        reap: Mutex::new(ReapState::default()),
        runtime: runtime.clone(),
        output: output.clone(),
    });
    let (status_tx, status_rx) = oneshot::channel();
    let reaper_shared = Arc::clone(&shared);
    std::thread::Builder::new()
        .name(format!("piw-reap-{pid}"))
        .spawn(move || reap_leader(reaper_shared, status_tx))
        .map_err(io_err("starting the reaper thread"))?;
    // The reaper thread owns the leader's end now.
    guard.armed = false;

    let out_tail = Arc::new(Mutex::new(Tail::new(spec.tail_bytes)));
    let err_tail = Arc::new(Mutex::new(Tail::new(spec.tail_bytes)));
    let out_task = runtime.spawn(drain(stdout, Arc::clone(&out_tail), output.clone()));
    let err_task = runtime.spawn(drain(stderr, Arc::clone(&err_tail), output));
    let stdin_task = runtime.spawn(async move {
        let payload = match later {
            None => spec.stdin_payload,
            // A standby child waits here; a dropped handoff closes its stdin empty.
            Some(rx) => rx.await.unwrap_or_default(),
        };
        feed(stdin, payload, pid).await
    });
    let (exit_tx, exit_rx) = oneshot::channel();
    runtime.spawn(finish(Finish {
        status_rx,
        out_task,
        err_task,
        stdin_task,
        out_tail,
        err_tail,
        exit_tx,
    }));
    tracing::debug!(pid, program = %program.display(), "child spawned");
    Ok(Supervised {
        shared,
        start_time,
        exit_rx: Some(exit_rx),
        exit: None,
    })
}

impl Supervised {
    /// The leader's pid.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// The process group id (equal to [`pid`](Self::pid): the child leads its own group).
    pub fn pgid(&self) -> u32 {
        self.shared.pid
    }

    /// The leader's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    /// Record it with the pid for [`kill_orphan_group`].
    pub fn start_time(&self) -> u64 {
        self.start_time
    }

    /// The program as given in the spec.
    pub fn program(&self) -> &Path {
        &self.shared.program
    }

    /// Writes the child's whole output to `log` from now on, starting with what it wrote
    /// before (up to [`HELD_BEFORE_FILE`] bytes): for a standby worker, once its run is known.
    /// A child that already has a file keeps it.
    pub fn log_output_to(&self, log: &OutputLog) -> io::Result<()> {
        self.shared.output.attach(log)
    }

    /// Waits for the leader to exit and its output to be drained (at most
    /// [`DRAIN_AFTER_EXIT`] after the exit), then returns how it ended. Other members of the
    /// group may still run; [`stop`](Self::stop) ends them.
    ///
    /// Cancel-safe, so it can be a `tokio::select!` branch; once it has returned, later calls
    /// return the same value at once.
    pub async fn wait(&mut self) -> ChildExit {
        if let Some(exit) = &self.exit {
            return exit.clone();
        }
        let exit = match self.exit_rx.as_mut() {
            Some(rx) => rx.await.unwrap_or_else(|_| {
                tracing::error!(pid = self.shared.pid, "child exit report was lost");
                ChildExit::unknown()
            }),
            None => ChildExit::unknown(),
        };
        self.exit_rx = None;
        self.exit = Some(exit.clone());
        exit
    }

    /// The exit, if it has been reported already; never blocks.
    pub fn try_exit(&mut self) -> Option<&ChildExit> {
        if self.exit.is_none() {
            if let Some(rx) = self.exit_rx.as_mut() {
                match rx.try_recv() {
                    Ok(exit) => {
                        self.exit = Some(exit);
                        self.exit_rx = None;
                    }
                    Err(oneshot::error::TryRecvError::Empty) => {}
                    Err(oneshot::error::TryRecvError::Closed) => {
                        self.exit = Some(ChildExit::unknown());
                        self.exit_rx = None;
                    }
                }
            }
        }
        self.exit.as_ref()
    }

    /// Whether any process in the group is still running (the leader's zombie does not count).
    pub fn group_alive(&self) -> bool {
        self.shared.group_alive()
    }

    /// Sends SIGTERM to the group now and, in a background task, SIGKILL if anything in it
    /// still runs after `grace`. Returns at once; see [`stop`](Self::stop) to wait.
    pub fn terminate(&self, grace: Duration) {
        self.shared.terminate(grace);
    }

    /// Sends SIGTERM to the group, waits up to `grace` for it to end, then sends SIGKILL to
    /// whatever still runs and waits (bounded) for it to vanish. Works after the leader exited
    /// too: descendants left in the group are ended the same way.
    pub async fn stop(&self, grace: Duration) -> StopOutcome {
        self.shared.stop(grace).await
    }

    /// A handle that can stop this group from another task.
    pub fn killer(&self) -> GroupKiller {
        GroupKiller {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl fmt::Debug for Supervised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervised")
            .field("pid", &self.shared.pid)
            .field("program", &self.shared.program)
            .field("start_time", &self.start_time)
            .field("exit", &self.exit)
            .finish_non_exhaustive()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.handle_dropped = true;
        if state.reaped {
            return;
        }
        // The leader's pid is still held (alive or zombie), so the group id is ours.
        let _ = procfs::signal_group(self.shared.pid, libc::SIGKILL);
        if state.exited {
            reap(self.shared.pid);
            state.reaped = true;
        }
        // Otherwise the reaper thread reaps when the SIGKILL lands.
    }
}

impl GroupKiller {
    /// The group id.
    pub fn pgid(&self) -> u32 {
        self.shared.pid
    }

    /// See [`Supervised::group_alive`].
    pub fn group_alive(&self) -> bool {
        self.shared.group_alive()
    }

    /// See [`Supervised::terminate`].
    pub fn terminate(&self, grace: Duration) {
        self.shared.terminate(grace);
    }

    /// See [`Supervised::stop`].
    pub async fn stop(&self, grace: Duration) -> StopOutcome {
        self.shared.stop(grace).await
    }
}

impl fmt::Debug for GroupKiller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupKiller")
            .field("pgid", &self.shared.pid)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ReapState> {
        // The state is three flags that are always consistent; a panic elsewhere cannot
        // leave them half-written.
        self.reap.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Signals the group unless the leader was reaped (then the id may belong to someone
    /// else). True when the signal was delivered to at least one process.
    fn signal(&self, signal: libc::c_int) -> bool {
        let state = self.lock();
        if state.reaped {
            return false;
        }
        procfs::signal_group(self.pid, signal).is_ok()
    }

    fn group_alive(&self) -> bool {
        if self.lock().reaped {
            return false;
        }
        group_alive(self.pid)
    }

    fn terminate(self: &Arc<Self>, grace: Duration) {
        let detached = self.signal_detached(libc::SIGTERM);
        if !self.group_alive() || !self.signal(libc::SIGTERM) {
            kill_detached_after(&self.runtime, detached, grace);
            return;
        }
        let shared = Arc::clone(self);
        self.runtime.spawn(async move {
            if !shared.wait_gone(grace).await {
                shared.signal(libc::SIGKILL);
            }
            kill_detached(&detached);
        });
    }

    async fn stop(&self, grace: Duration) -> StopOutcome {
        let detached = self.signal_detached(libc::SIGTERM);
        if !self.group_alive() || !self.signal(libc::SIGTERM) {
            kill_detached_after(&self.runtime, detached, grace);
            return StopOutcome::AlreadyGone;
        }
        if self.wait_gone(grace).await {
            kill_detached(&detached);
            return StopOutcome::Terminated;
        }
        self.signal(libc::SIGKILL);
        kill_detached(&detached);
        if !self.wait_gone(KILL_SETTLE).await {
            tracing::warn!(pgid = self.pid, "child group still alive after SIGKILL");
        }
        StopOutcome::Killed
    }

    /// Sends `signal` to the child's descendants that left its process group, and returns them
    /// for the SIGKILL after the grace. Two ways find them: the parent ids (while the leader is
    /// held, for descendants whatever their environment) and the child's [`MARKER_VAR`] entry
    /// (for those whose parent chain broke, also after the leader was reaped).
    fn signal_detached(&self, signal: libc::c_int) -> Vec<(u32, u64)> {
        let reaped = self.lock().reaped;
        let mut detached = if reaped {
            Vec::new()
        } else {
            procfs::detached_descendants(self.pid, self.pid).unwrap_or_default()
        };
        let marked = procfs::processes_with_env(|entry| entry == self.marker_entry.as_slice())
            .unwrap_or_default();
        for (pid, stat) in marked {
            // Members of the group get the group's signal; signalling them twice could turn
            // a graceful stop into a hard one.
            let in_group = !reaped && u32::try_from(stat.pgrp).ok() == Some(self.pid);
            if !in_group && !detached.iter().any(|&(p, _)| p == pid) {
                detached.push((pid, stat.start_time));
            }
        }
        for &(pid, _) in &detached {
            let _ = procfs::signal_process(pid, signal);
        }
        detached
    }

    /// Polls until nothing in the group runs or `within` passes; true when the group is gone.
    async fn wait_gone(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = Duration::from_millis(2);
        loop {
            if !self.group_alive() {
                return true;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return false;
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

/// SIGKILL to each of `detached` that is still the process it was (same start time).
fn kill_detached(detached: &[(u32, u64)]) {
    for &(pid, start_time) in detached {
        if procfs::read_proc_stat(pid).is_some_and(|s| s.start_time == start_time && !s.is_dead()) {
            let _ = procfs::signal_process(pid, libc::SIGKILL);
        }
    }
}

/// [`kill_detached`] after `grace`, unless they all ended by then.
fn kill_detached_after(
    runtime: &tokio::runtime::Handle,
    detached: Vec<(u32, u64)>,
    grace: Duration,
) {
    if detached.is_empty() {
        return;
    }
    runtime.spawn(async move {
        tokio::time::sleep(grace).await;
        kill_detached(&detached);
    });
}

/// Kills and reaps a child whose supervision could not be set up.
struct SpawnGuard {
    pid: u32,
    armed: bool,
}

impl Drop for SpawnGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = procfs::signal_group(self.pid, libc::SIGKILL);
            reap(self.pid);
        }
    }
}

/// Runs on its own thread: waits for the leader to exit **without reaping it**, records that,
/// reaps only if the handle is already gone, and passes the status on.
fn reap_leader(shared: Arc<Shared>, status_tx: oneshot::Sender<RawStatus>) {
    let observed = wait_exit_no_reap(shared.pid);
    {
        let mut state = shared.lock();
        state.exited = true;
        match &observed {
            Ok(_) if state.handle_dropped && !state.reaped => {
                reap(shared.pid);
                state.reaped = true;
            }
            Ok(_) => {}
            Err(e) => {
                // Someone else reaped our child: its pid may be reused, so never signal again.
                tracing::error!(pid = shared.pid, error = %e, "cannot wait for child");
                state.reaped = true;
            }
        }
    }
    let status = observed.unwrap_or(RawStatus {
        code: None,
        signal: None,
    });
    let _ = status_tx.send(status);
}

/// Blocks until `pid` (our child) has exited and returns its status, leaving it a zombie.
fn wait_exit_no_reap(pid: u32) -> io::Result<RawStatus> {
    let id = libc::id_t::from(pid);
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t owned by this frame; WNOWAIT leaves the
        // child waitable (not reaped).
        let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid succeeded with WEXITED for a child, so the kernel filled the SIGCHLD
        // fields of `info`, which is what si_status reads.
        let status = unsafe { info.si_status() };
        return Ok(match info.si_code {
            libc::CLD_EXITED => RawStatus {
                code: Some(status),
                signal: None,
            },
            libc::CLD_KILLED | libc::CLD_DUMPED => RawStatus {
                code: None,
                signal: Some(status),
            },
            _ => RawStatus {
                code: None,
                signal: None,
            },
        });
    }
}

/// Reaps `pid` (our child), blocking until it has exited.
fn reap(pid: u32) {
    let Ok(target) = libc::pid_t::try_from(pid) else {
        return;
    };
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid, writable int owned by this frame; `target` is a single
        // pid (positive), so no other child is reaped.
        let rc = unsafe { libc::waitpid(target, &mut status, 0) };
        if rc == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
}

/// Applies `limits` to the current process. Runs in the forked child: async-signal-safe calls
/// only, no allocation.
/// Sets this process's core-dump limit to zero, soft and hard, once. Every child inherits it
/// and cannot raise it. (The supervisor itself then dumps no core either, which also keeps the
/// secrets in its memory out of core files.)
fn disable_own_core_dumps() -> io::Result<()> {
    static DONE: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    match DONE.get_or_init(|| {
        set_limit(libc::RLIMIT_CORE, 0, 0)
            .err()
            .map(|e| e.raw_os_error().unwrap_or(0))
    }) {
        None => Ok(()),
        Some(code) => Err(io::Error::from_raw_os_error(*code)),
    }
}

/// Raises the nice value of process `pid` by `by` over this process's own. Best effort: a child
/// at the host's priority still works, so a failure is only logged.
fn lower_priority(pid: u32, by: i32) {
    // SAFETY: getpriority/setpriority are plain syscalls on a pid we just spawned (and own);
    // errno is cleared first because -1 is also a valid priority.
    let result = unsafe {
        *libc::__errno_location() = 0;
        let own = libc::getpriority(libc::PRIO_PROCESS, 0);
        if own == -1 && *libc::__errno_location() != 0 {
            -1
        } else {
            libc::setpriority(libc::PRIO_PROCESS, pid, own.saturating_add(by).min(19))
        }
    };
    if result != 0 {
        tracing::warn!(pid, error = %io::Error::last_os_error(), "cannot lower the child's CPU priority");
    }
}

fn apply_limits(limits: ChildLimits) -> io::Result<()> {
    set_limit(libc::RLIMIT_CORE, 0, 0)?;
    if let Some(seconds) = limits.cpu_seconds {
        // The soft limit sends SIGXCPU; the hard limit one second later sends SIGKILL.
        set_limit(libc::RLIMIT_CPU, seconds, seconds.saturating_add(1))?;
    }
    if let Some(bytes) = limits.memory_bytes {
        set_limit(libc::RLIMIT_AS, bytes, bytes)?;
    }
    Ok(())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type Resource = libc::c_int;

/// Sets a resource limit, clamped to the current hard limit.
fn set_limit(resource: Resource, soft: libc::rlim_t, hard: libc::rlim_t) -> io::Result<()> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `current`, which we own.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let hard = hard.min(current.rlim_max);
    let wanted = libc::rlimit {
        rlim_cur: soft.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit from `wanted`, which we own.
    if unsafe { libc::setrlimit(resource, &wanted) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads `reader` to end-of-file into `tail` and `output`.
async fn drain<R: AsyncRead + Unpin>(
    mut reader: R,
    tail: Arc<Mutex<Tail>>,
    output: output_log::Sink,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                lock_tail(&tail).push(&buf[..n]);
                output.write(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading child output failed");
                return;
            }
        }
    }
}

/// Writes the payload to the child's stdin and closes it.
async fn feed(mut stdin: tokio::process::ChildStdin, payload: Vec<u8>, pid: u32) {
    if !payload.is_empty() {
        let written = async {
            stdin.write_all(&payload).await?;
            stdin.flush().await
        }
        .await;
        if let Err(e) = written {
            // Usually EPIPE: the child exited or closed stdin without reading it all.
            tracing::debug!(pid, error = %e, "writing the child's stdin failed");
        }
    }
    drop(stdin);
}

fn lock_tail(tail: &Mutex<Tail>) -> MutexGuard<'_, Tail> {
    // A tail is valid after any partial push, so a poisoned lock is still usable.
    tail.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the task that assembles the exit report needs.
struct Finish {
    status_rx: oneshot::Receiver<RawStatus>,
    out_task: JoinHandle<()>,
    err_task: JoinHandle<()>,
    stdin_task: JoinHandle<()>,
    out_tail: Arc<Mutex<Tail>>,
    err_tail: Arc<Mutex<Tail>>,
    exit_tx: oneshot::Sender<ChildExit>,
}

/// Waits for the leader's exit, gives the pipes [`DRAIN_AFTER_EXIT`] to reach end-of-file,
/// then reports.
async fn finish(mut f: Finish) {
    let status = f.status_rx.await.unwrap_or(RawStatus {
        code: None,
        signal: None,
    });
    let drain_complete = tokio::time::timeout(DRAIN_AFTER_EXIT, async {
        let _ = (&mut f.out_task).await;
        let _ = (&mut f.err_task).await;
    })
    .await
    .is_ok();
    f.out_task.abort();
    f.err_task.abort();
    f.stdin_task.abort();
    let (stdout_tail, stdout_total) = {
        let t = lock_tail(&f.out_tail);
        (t.snapshot(), t.total())
    };
    let (stderr_tail, stderr_total) = {
        let t = lock_tail(&f.err_tail);
        (t.snapshot(), t.total())
    };
    let _ = f.exit_tx.send(ChildExit {
        code: status.code,
        signal: status.signal,
        stdout_tail,
        stderr_tail,
        stdout_total,
        stderr_total,
        drain_complete,
    });
}

/// What ran out, when `e` says the system or this process is out of a resource (descriptors,
/// memory, processes) rather than that something is missing or wrong: a failure of the
/// host's own, worth trying again, never the caller's file or the child's fault.
pub fn exhausted_resource(e: &io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        libc::EMFILE => Some("file descriptors (the host's own limit)"),
        libc::ENFILE => Some("file descriptors (the system's limit)"),
        libc::ENOMEM => Some("memory"),
        libc::EAGAIN => Some("processes or memory"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_move_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Supervised>();
        send_sync::<GroupKiller>();
        send_sync::<ChildExit>();
        send_sync::<SuperviseError>();
    }

    #[test]
    fn a_spec_debug_hides_the_payload_and_env_values() {
        let spec = SpawnSpec::new("/bin/worker", "/tmp")
            .env("PIW_CHILD_TOKEN", "s3cret-token")
            .stdin_payload(&b"{\"token\":\"s3cret-token\"}"[..]);
        let shown = format!("{spec:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("PIW_CHILD_TOKEN"), "{shown}");
        let len = spec.stdin_payload.len();
        assert!(
            shown.contains(&format!("stdin_payload_len: {len}")),
            "{shown}"
        );
    }

    #[test]
    fn limits_default_to_none() {
        assert_eq!(
            ChildLimits::default(),
            ChildLimits {
                cpu_seconds: None,
                memory_bytes: None
            }
        );
        assert_eq!(SpawnSpec::new("x", "/").tail_bytes, DEFAULT_TAIL_BYTES);
    }
}
