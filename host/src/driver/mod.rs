//! The host's driver: one process per installation that owns the state database and every
//! run claim, serves the local protocol on a user-only Unix socket and supervises one child
//! per active run. It runs no workflow code, and decides nothing: the decisions are the
//! [`engine`](crate::engine)'s.
//!
//! Threads: a tokio runtime accepts connections and runs one task per connection
//! ([`conn`]); a dedicated store thread ([`store_thread`]) owns the SQLite connection and
//! commits commands in batches. They talk over a channel; replies go back on oneshots.
//!
//! ```text
//! accept ─► conn::serve (tokio task per connection)
//!             │ peer uid ≠ host uid → goodbye unauthorized (engine::admission decides)
//!             │ FrameDecoder (limits) → Request::decode → typed rejection + goodbye on error
//!             │ one request at a time per connection (backpressure through the socket)
//!             ▼ std mpsc
//!           store_thread::run (one OS thread, owns Store)
//!             drain queue → reads answered into the outbox
//!                         → durable commands: ONE transaction, each with its receipt; runs
//!                           made ready activated and launched in it → commit (not fsynced)
//!                           → events, replies into the outbox (failed: abandon launches)
//!             due work (deadlines), schedule ready runs, flush, sleep until the next deadline
//!                         │ outbox::flush(commits so far)
//!                         ▼
//!           syncer thread (outbox::run_syncer): one fdatasync per release → replies and
//!             events in queue order (a failed fsync: exit 1; a dead store thread or
//!             supervisor: exit 70, [`STATE_OWNER_DIED_EXIT`]; nothing unsynced acknowledged)
//! ```
//!
//! Nothing is revealed before it is durable ([`outbox`]). Launches need no fsync: a child's
//! hello counts only in a later batch, whose reply waits for its own. The supervisor task
//! ([`supervisor`]) owns the children's processes and the standby pools; [`lock`] is the
//! one-host guard, [`slots`] the descriptor budget.
//!
//! The `host.lock` held for the host's life proves any earlier host dead, so startup recovery
//! ([`recover_at_start`]) requeues older epochs' runs at once.

pub mod bridge_launch;
pub mod channel_launch;
pub mod conn;
pub mod fault;
pub mod helper;
pub mod lock;
pub mod log;
pub mod node_runtime;
pub mod outbox;
pub mod pass_launch;
pub mod queues;
pub mod slots;
pub mod start_file;
pub mod store_thread;
pub mod supervisor;

pub use lock::{
    installation_held, lock_holder, lock_installation, lock_installation_with, InstallationLock,
    Links,
};

use crate::store::prelude::*;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::UnixListener;
use tokio::sync::{broadcast, oneshot, watch};

use crate::engine::children;
use crate::engine::state::HostState;
use crate::paths::PiwPaths;
use crate::protocol::reply::{body_of, HostCounts, HostStatusReply};
use crate::protocol::{Limits, Receipt, Request, RequestBody};
use crate::store::{Store, StoreConfig, StoreError, SCHEMA_ID};
use fault::FaultPlan;
use queues::{Job, Published, StoreMsg};

/// How a host is set up.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub paths: PiwPaths,
    pub store: StoreConfig,
    pub limits: Limits,
    /// The uid allowed to connect; defaults to the host's own. Tests may set another to prove
    /// that foreign peers are refused.
    pub expected_uid: u32,
    /// How long a graceful stop waits for connections to finish their in-flight request.
    pub drain_timeout: Duration,
    /// Runtimes, limits and timeouts of children.
    pub children: children::ChildConfig,
    /// The most connections kept open ([`slots`]); `None`: what the descriptor limit leaves
    /// ([`slots::budget`]).
    pub max_connections: Option<usize>,
    /// What the host keeps of finished runs on its own; `None` (the default): everything.
    pub retention: Option<crate::engine::retention::Retention>,
}

impl HostConfig {
    /// Defaults for the installation at `paths`.
    pub fn new(paths: PiwPaths) -> Self {
        Self {
            paths,
            store: StoreConfig::default(),
            limits: Limits::default(),
            expected_uid: crate::paths::current_uid(),
            drain_timeout: Duration::from_secs(5),
            children: children::ChildConfig::default(),
            max_connections: None,
            retention: None,
        }
    }

    /// Defaults, adjusted by the environment:
    /// `PIW_RUNTIMES` (`suffix=program args;...`), `PIW_NODE` and `PIW_NODE_WORKER` (the Node
    /// runtime, else found from the installation: [`node_runtime`]), `PIW_MAX_CHILDREN`, `PIW_HANDSHAKE_TIMEOUT_MS`, `PIW_VALIDATION_TIMEOUT_MS`, `PIW_CHILD_NICE`, `PIW_KILL_GRACE_MS`,
    /// `PIW_LEASE_MS`, `PIW_CHILD_CPU_SECONDS`, `PIW_CHILD_MEMORY_BYTES`,
    /// `PIW_STANDBY_WORKERS`, `PIW_STANDBY_IDLE_MS`, `PIW_MAX_CONNECTIONS`, `PIW_RETAIN_DAYS` and `PIW_RETAIN_RUNS`
    /// (retention: [`crate::engine::retention`]); and, for tests only, `PIW_TEST_CLOCK` (a file holding an offset
    /// in milliseconds that moves the host's clock: [`crate::clock::OffsetFileClock`]).
    pub fn from_env(paths: PiwPaths) -> Self {
        let mut config = Self::new(paths);
        // Each child's whole output, for `piw logs`.
        config.children.output_logs = Some(config.paths.logs.clone());
        // A workflow's child sees the environment the host was started with.
        config.children.workflow_env = children::workflow_env_of(std::env::vars_os());
        let num = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Ok(spec) = std::env::var("PIW_RUNTIMES") {
            config.children.runtimes = children::parse_runtimes(&spec);
        }
        // The built-in runtime for declarative JSON workflows, installed beside `piw`.
        let json_worker = std::env::current_exe()
            .ok()
            .map(|exe| exe.with_file_name("piw-json-worker"))
            .filter(|p| p.is_file());
        if let Some(program) = json_worker {
            config.children.runtimes.push(children::Runtime {
                suffix: ".workflow.json".into(),
                program,
                args: Vec::new(),
                // A Rust worker starts in about a millisecond: nothing to gain.
                standby: false,
            });
        }
        let node = node_runtime::discover(
            &node_runtime::Inputs::from_env(),
            &node_runtime::SystemProbe,
        );
        config.children.bridges = bridge_launch::settings(
            &bridge_launch::Inputs::from_env(),
            node.as_ref().ok(),
            &config.paths.home,
            &|p: &std::path::Path| p.is_file(),
        );
        config.children.channels = Some(channel_launch::settings(
            node.as_ref().map_err(ToString::to_string),
            &config.paths.home,
            &config.paths.logs,
            &config.children.workflow_env,
        ));
        config.children.controllers = Some(pass_launch::settings(
            node.as_ref().map_err(ToString::to_string),
            &config.paths.home,
            &config.paths.logs,
            &config.children.workflow_env,
        ));
        match node_runtimes(node) {
            Ok(runtimes) => config.children.runtimes.extend(runtimes),
            Err(missing) => config.children.missing_runtimes.push(missing),
        }
        if let Some(n) = num("PIW_MAX_CHILDREN") {
            config.children.max_children = usize::try_from(n.max(1)).unwrap_or(usize::MAX);
        }
        if let Some(ms) = num("PIW_HANDSHAKE_TIMEOUT_MS") {
            config.children.handshake_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = num("PIW_VALIDATION_TIMEOUT_MS") {
            config.children.validation_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = num("PIW_CHILD_NICE") {
            config.children.nice = i32::try_from(n.min(19)).unwrap_or(0);
        }
        if let Some(ms) = num("PIW_KILL_GRACE_MS") {
            config.children.kill_grace = Duration::from_millis(ms);
        }
        if let Some(ms) = num("PIW_LEASE_MS") {
            config.store.lease_ms = i64::try_from(ms.max(100)).unwrap_or(i64::MAX);
        }
        if let Some(n) = num("PIW_STANDBY_WORKERS") {
            // Each waiting worker is a whole Node process: keep the pool small.
            config.children.standby_workers =
                usize::try_from(n.min(MAX_STANDBY_WORKERS)).unwrap_or(0);
        }
        if let Some(ms) = num("PIW_STANDBY_IDLE_MS") {
            // 0 keeps the standby workers for the host's life.
            config.children.standby_idle = match ms {
                0 => Duration::MAX,
                ms => Duration::from_millis(ms),
            };
        }
        if let Some(file) = std::env::var_os("PIW_TEST_CLOCK") {
            tracing::warn!(file = %std::path::Path::new(&file).display(), "PIW_TEST_CLOCK: the host's clock follows a test's offset file");
            config.store.clock = std::sync::Arc::new(crate::clock::OffsetFileClock::new(file));
        }
        if let Some(n) = num("PIW_MAX_CONNECTIONS") {
            config.max_connections = Some(usize::try_from(n.max(1)).unwrap_or(usize::MAX));
        }
        config.retention = crate::engine::retention::Retention::from_settings(
            num("PIW_RETAIN_DAYS"),
            num("PIW_RETAIN_RUNS"),
        );
        config.children.cpu_seconds = num("PIW_CHILD_CPU_SECONDS");
        config.children.memory_bytes = num("PIW_CHILD_MEMORY_BYTES");
        config
    }
}

/// Events the host buffers for its subscribers' connection tasks.
const EVENT_BUFFER: usize = 16_384;

/// WAL pages between the host's checkpoints (SQLite's default is 1,000; about 16 MiB of WAL at
/// most). With the WAL fsync off the store thread, checkpoints were the next cost of a commit:
/// this measured about 7 % more commands/s with 64 clients (docs/PERFORMANCE.md).
const HOST_CHECKPOINT_FRAMES: u32 = 4_000;

/// The most standby workers `PIW_STANDBY_WORKERS` may ask for, per runtime.
pub const MAX_STANDBY_WORKERS: u64 = 16;

/// Suffixes the Node worker runtime serves (Node 22 strips TypeScript types natively).
pub const NODE_WORKFLOW_SUFFIXES: [&str; 4] = [
    ".workflow.mjs",
    ".workflow.js",
    ".workflow.ts",
    ".workflow.mts",
];

/// The Node worker runtime's entries, found as [`node_runtime`] says; none when it is missing,
/// with the reason a `.workflow.mjs` start is refused with.
fn node_runtimes(
    found: Result<node_runtime::NodeRuntime, node_runtime::NodeRuntimeMissing>,
) -> Result<Vec<children::Runtime>, children::MissingRuntime> {
    match found {
        Ok(rt) => Ok(NODE_WORKFLOW_SUFFIXES
            .iter()
            .map(|suffix| children::Runtime {
                suffix: (*suffix).to_owned(),
                program: rt.node.clone(),
                args: vec![rt.worker.display().to_string()],
                // A Node start costs tens of milliseconds: keep workers waiting.
                standby: true,
            })
            .collect()),
        Err(missing) => {
            tracing::warn!(%missing, "no Node worker runtime: JavaScript and TypeScript workflows will be refused");
            Err(children::MissingRuntime {
                suffixes: NODE_WORKFLOW_SUFFIXES
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
                reason: missing.to_string(),
            })
        }
    }
}

/// A configured program path, made absolute against the host's working directory (where it
/// was started) when it names a directory: children run in their project directories, where
/// a relative path would name something else. A bare name (`node`) is left for the `PATH`
/// lookup.
pub fn anchored(path: PathBuf) -> PathBuf {
    if path.is_absolute() || path.components().count() < 2 {
        return path;
    }
    std::path::absolute(&path).unwrap_or(path)
}

/// Why a host could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Another host holds the installation lock.
    #[error("another piw host (pid {pid}) is already running for {home}")]
    AlreadyRunning { pid: String, home: String },
    /// Another process (a host, or a reset or diagnosis of another installation) holds the
    /// same database file through another path: a symbolic or hard link at one's
    /// `state.sqlite`, a bind mount. Locked by the file's device and inode, not its name.
    #[error("another piw host ({holder}) already serves the database {db} ({locked}); one database is served by one host")]
    DatabaseInUse {
        holder: String,
        /// What was found locked, in words: the file itself, or the directory that holds it.
        locked: String,
        db: String,
    },
    /// The database file has more than one name (hard links). Another installation could use
    /// the other name with its own `-wal` file: two hosts, or a host and a reader, each
    /// seeing other pages, which lost acknowledged runs and corrupted the file.
    #[error("{db} has {links} links (names of the same file); piw needs its database to have one name, or two hosts could serve it at once and lose runs. Remove the other link (find it with `find / -xdev -samefile {db}`), or copy the file (`piw state backup <file>`) and use the copy instead")]
    DatabaseHasLinks { db: String, links: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HostError {
    let what = what.into();
    move |source| HostError::Io { what, source }
}

/// What connection tasks share.
#[derive(Clone)]
pub struct HostShared {
    pub(crate) jobs: std::sync::mpsc::Sender<StoreMsg>,
    pub(crate) events: broadcast::Sender<Published>,
    pub(crate) limits: Limits,
    pub(crate) expected_uid: u32,
    /// File suffixes the runtime table can run; `run.start` refuses other files
    /// (`engine::admission::runtime_for_start`).
    pub(crate) runtime_suffixes: Arc<Vec<String>>,
    /// Runtimes looked for and not found, with why: the refusal of their files says it.
    pub(crate) missing_runtimes: Arc<Vec<children::MissingRuntime>>,
    /// How detached steps are served, and the environment their Pi gets: an explicit
    /// detached start is checked against them (`bridge_launch::check_detached_start`).
    pub(crate) bridges: Arc<(
        Option<crate::engine::bridges::BridgeSettings>,
        children::WorkflowEnv,
    )>,
    pub(crate) stop: Arc<watch::Sender<bool>>,
    pub(crate) stopping: watch::Receiver<bool>,
    facts: Arc<HostFacts>,
}

struct HostFacts {
    pid: u32,
    epoch: i64,
    started: Instant,
    paths: PiwPaths,
    /// Standby workers waiting for a run (kept by the supervisor).
    standby_waiting: Arc<std::sync::atomic::AtomicUsize>,
    /// How the descriptor limit was split between children and connections.
    budget: slots::Budget,
}

impl HostShared {
    /// Begins the graceful stop: the store thread hears of it before any connection does. A
    /// worker whose connection the stop closes exits, and that exit must not count as a lost
    /// child (nor may its run be launched again while the host drains). Idempotent.
    pub(crate) fn begin_stop(&self) {
        let _ = self.jobs.send(StoreMsg::Draining);
        let _ = self.stop.send(true);
    }

    /// Host status: identity, uptime, paths, schema and run counts. No payloads, no tokens.
    pub(crate) async fn status(&self) -> Receipt {
        let (tx, rx) = oneshot::channel();
        let counts = if self
            .jobs
            .send(StoreMsg::Request(Box::new(Job {
                request: Request::new("host-status", RequestBody::HostStatus),
                start: None,
                accepted_source: None,
                start_refused: None,
                meta: None,
                reply: tx,
            })))
            .is_ok()
        {
            rx.await
                .ok()
                .and_then(|r| r.ok())
                .and_then(|r| serde_json::from_value::<HostCounts>(r.body).ok())
        } else {
            None
        };
        let f = &self.facts;
        let (channels, counts) = match counts {
            Some(c) => (c.channels, Some((c.runs, c.active_children))),
            None => (Vec::new(), None),
        };
        let (runs, active_children) = counts.unzip();
        let reply = HostStatusReply {
            pid: f.pid,
            epoch: f.epoch,
            uptime_ms: u64::try_from(f.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            socket: f.paths.socket.display().to_string(),
            database: f.paths.db.display().to_string(),
            home: f.paths.home.display().to_string(),
            schema_id: SCHEMA_ID.to_owned(),
            runs,
            active_children,
            child_slots: f.budget.child_slots,
            max_connections: f.budget.connections,
            standby_workers: f.standby_waiting.load(std::sync::atomic::Ordering::Relaxed),
            stopping: *self.stopping.borrow(),
            runtimes: self.runtime_suffixes.to_vec(),
            log_writes_lost: log::writes_lost(),
            channels,
        };
        Receipt::new(None, body_of(&reply).unwrap_or(Value::Null))
    }
}

/// Runs a host in the foreground until SIGTERM, SIGINT or a `host.stop` request, then stops
/// gracefully: stop accepting, finish in-flight commits, leave every run resumable.
pub fn serve(mut config: HostConfig) -> Result<(), HostError> {
    config.paths.ensure_dirs().map_err(io_err(format!(
        "cannot create {}",
        config.paths.home.display()
    )))?;
    // Declared before the store: dropped after it (the lock's descriptor on the database
    // must outlive SQLite's, see `lock`).
    let mut lock = lock_installation(&config.paths)?;
    let nofile = raise_descriptor_limit();
    // Children and connections share the descriptors: the host runs only as many children as
    // can connect beside a few clients (before, the cap refused children it had launched,
    // and their runs counted losses).
    let standby = if config.children.runtimes.iter().any(|r| r.standby) {
        config.children.standby_workers
    } else {
        0
    };
    let budget = slots::budget(
        nofile,
        config.children.max_children,
        standby,
        config.max_connections,
    );
    if budget.child_slots < config.children.max_children {
        tracing::warn!(
            open_file_limit = nofile,
            child_slots = budget.child_slots,
            max_children = config.children.max_children,
            connections = budget.connections,
            "few file descriptors: running fewer children at once than PIW_MAX_CHILDREN asks for (raise the limit with `ulimit -n`)"
        );
    } else {
        tracing::info!(
            open_file_limit = nofile,
            child_slots = budget.child_slots,
            connections = budget.connections,
            "descriptor budget"
        );
    }
    config.children.max_children = budget.child_slots;

    let pid = std::process::id();
    let mut store_config = config.store.clone();
    let fault = FaultPlan::from_env();
    if let Some(observer) = fault.commit_observer() {
        store_config.commit_observer = Some(observer);
    }
    store_config.disk_full_while = fault.disk_full_while();
    let mut store = Store::open(&config.paths.db, store_config)?;
    lock.hold_database(&config.paths.db)?;
    let epoch = recover_at_start(&mut store, pid)?;
    cleanup_orphans(&mut store, epoch, config.children.kill_grace)?;
    crate::supervise::kill_marked_leftovers(
        &supervision_scope(&config.paths.socket),
        config.children.kill_grace,
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        // One thread for all connections: they only frame and decode; the store thread does
        // the work. Fewer cross-thread wake-ups measured faster on this 2-core machine
        // (64 clients: 22k commands/s vs 17k with two workers).
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(io_err("cannot start the async runtime"))?;
    runtime.block_on(serve_async(
        config,
        store,
        epoch,
        host_owner_id(epoch),
        budget,
    ))
}

/// Raises this process's soft limit of open descriptors to its hard limit (its children
/// inherit it), and returns the limit now in force. The common soft
/// limit of 1,024 is far below what a host with many clients and children needs.
fn raise_descriptor_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1_024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            } else {
                tracing::warn!(
                    soft = limit.rlim_cur,
                    hard = limit.rlim_max,
                    "cannot raise the open-file limit"
                );
            }
        }
    }
    limit.rlim_cur
}

/// Clears the way for this host's socket. The lock proves no other host of this installation
/// runs, so a socket nobody listens on is an earlier host's, left by a crash, and is removed.
/// Anything else is left alone and refused: a socket another program listens on (taking it
/// over would cut that program off), or something that is not a socket at all (a file, a
/// link: piw deletes nothing it did not make).
fn remove_stale_socket(socket: &std::path::Path) -> Result<(), HostError> {
    use std::os::unix::fs::FileTypeExt as _;
    let kind = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta.file_type(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("cannot look at {}", socket.display()))(e)),
    };
    let refuse = |why: String| HostError::Io {
        what: format!("cannot serve at {}", socket.display()),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, why),
    };
    if !kind.is_socket() {
        return Err(refuse(format!(
            "it is {}, not a socket piw made; remove it",
            crate::paths::file_kind(&kind)
        )));
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        // Someone listens: not a socket this installation's hosts left behind.
        Ok(_) => Err(refuse(
            "another program listens on it; stop that program or remove the socket".into(),
        )),
        Err(_) => std::fs::remove_file(socket).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(io_err(format!("cannot remove stale {}", socket.display()))(
                e,
            )),
        }),
    }
}

/// The scope of an installation's child markers ([`crate::supervise::MARKER_VAR`]): a digest of
/// its socket path, which names one installation, so that cleaning up after one never touches
/// another's children.
pub fn supervision_scope(socket: &std::path::Path) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(socket.as_os_str().as_encoded_bytes());
    hex::encode(&digest[..8])
}

/// The claim owner of a host epoch.
pub fn host_owner_id(epoch: i64) -> String {
    format!("host-epoch-{epoch}")
}

/// Begins the epoch of a host with process id `pid` and recovers what earlier hosts left: their
/// runs requeued (the installation lock proves those hosts dead), expired claims, children never
/// confirmed started. One transaction, so one sync: a restart after a crash waits on the disk
/// once, and it is all or nothing. Returns the new epoch.
pub fn recover_at_start(store: &mut Store, pid: u32) -> Result<i64, StoreError> {
    let (epoch, recovered, unconfirmed) = store.write(|w| {
        // Nobody presents an interactive step at a start (sessions connect again, bridges
        // start again): the time of steps an earlier host left held stops where that host
        // was last known up (its down time counts for none).
        let alive_until = w.earlier_host_alive_until()?;
        let epoch = w.begin_host_epoch(pid)?;
        let released = w.release_all_interactions(alive_until.unwrap_or(w.now_ms()))?;
        if released > 0 {
            tracing::info!(
                count = released,
                "released the interactive steps an earlier host held"
            );
        }
        let mut recovered = w.recover_runs_of_dead_hosts(&host_owner_id(epoch))?;
        recovered.extend(w.recover_expired()?);
        let unconfirmed = w.close_unconfirmed_children(epoch)?;
        // A pass an earlier host ran died with it: due again at once, no error counted.
        let passes = w.requeue_passes_of_dead_hosts(epoch)?;
        if !passes.is_empty() {
            tracing::info!(
                count = passes.len(),
                "startup recovery requeued the reconcile passes of earlier hosts"
            );
        }
        Ok((epoch, recovered, unconfirmed))
    })?;
    if !recovered.is_empty() {
        tracing::info!(
            count = recovered.len(),
            "startup recovery requeued runs of earlier hosts"
        );
    }
    if unconfirmed > 0 {
        tracing::warn!(
            count = unconfirmed,
            "children of an earlier host were never confirmed started"
        );
    }
    Ok(epoch)
}

/// Stops the children recorded in `store` as running (launched by a host other than epoch
/// `except`, when given) and returns them with what was done to each: their whole process
/// groups get SIGTERM, then SIGKILL after `grace`, and a process whose pid now belongs to
/// another start time is left alone. `piw state reset` uses it before deleting a database
/// whose crashed host left children running; host startup through [`cleanup_orphans`].
pub fn stop_recorded_children(
    store: &Store,
    except: Option<i64>,
    grace: Duration,
) -> Result<
    (
        Vec<crate::store::OrphanChild>,
        Vec<crate::supervise::OrphanOutcome>,
    ),
    HostError,
> {
    // No host epoch is negative: `-1` excludes none.
    let orphans = store.orphan_children(except.unwrap_or(-1))?;
    if orphans.is_empty() {
        return Ok((orphans, Vec::new()));
    }
    let recorded: Vec<_> = orphans
        .iter()
        .map(|o| crate::supervise::RecordedProcess {
            pid: o.pid,
            start_time: o.process_start_time,
        })
        .collect();
    let outcomes = crate::supervise::kill_orphan_groups(&recorded, grace);
    Ok((orphans, outcomes))
}

/// Stops children that earlier hosts launched and never saw exit (checking each process's
/// start time so a reused pid is never killed), and records their end. All of them share one
/// grace, so the wait does not grow with their number.
fn cleanup_orphans(store: &mut Store, epoch: i64, grace: Duration) -> Result<(), HostError> {
    let (orphans, outcomes) = stop_recorded_children(store, Some(epoch), grace)?;
    if orphans.is_empty() {
        return Ok(());
    }
    for (orphan, outcome) in orphans.iter().zip(&outcomes) {
        tracing::info!(run_id = %orphan.run_id, pid = orphan.pid, ?outcome, "orphaned child of an earlier host");
    }
    store.write(|w| {
        for (orphan, outcome) in orphans.iter().zip(&outcomes) {
            let exit = crate::store::ChildExitRecord {
                reason: format!("orphan of an earlier host: {outcome:?}"),
                ..Default::default()
            };
            w.record_child_exit(orphan.child_epoch, &exit)?;
        }
        Ok(())
    })?;
    Ok(())
}

async fn serve_async(
    config: HostConfig,
    mut store: Store,
    epoch: i64,
    owner_id: String,
    budget: slots::Budget,
) -> Result<(), HostError> {
    let paths = config.paths.clone();
    // Before the socket exists: from the moment a client can reach this host, a stop signal
    // stops it gracefully. SIGHUP too: a `piw host serve` whose terminal closes stops the
    // same way instead of dying mid-commit.
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate()).map_err(io_err("cannot handle SIGTERM"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(io_err("cannot handle SIGINT"))?;
    let mut sighup = signal(SignalKind::hangup()).map_err(io_err("cannot handle SIGHUP"))?;
    remove_stale_socket(&paths.socket)?;
    let listener = UnixListener::bind(&paths.socket)
        .map_err(io_err(format!("cannot bind {}", paths.socket.display())))?;
    std::fs::set_permissions(&paths.socket, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err("cannot restrict the socket to its user"))?;

    let (jobs_tx, jobs_rx) = std::sync::mpsc::channel::<StoreMsg>();
    // The decision channels configured now: their adapters start with the store thread's
    // first turns. One that cannot be read is said in the log; the host runs without it.
    if config.children.channels.is_some() {
        match channel_launch::read_specs(&paths.home) {
            Ok(specs) => {
                let _ = jobs_tx.send(StoreMsg::Channels(specs));
            }
            Err(e) => tracing::error!(error = %e, "cannot read the decision channels"),
        }
    }
    // Events committed in one burst (a batch of commands, each worker message up to 257 steps)
    // must fit, or every subscriber is cut off as lagging.
    let (events, _) = broadcast::channel::<Published>(EVENT_BUFFER);
    let (supervisor_tx, supervisor_rx) = tokio::sync::mpsc::unbounded_channel();
    let standby_waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let supervisor_task = tokio::spawn(supervisor::run(
        supervisor_rx,
        jobs_tx.clone(),
        supervisor::Settings {
            stop_grace: config.children.kill_grace,
            standby_idle: config.children.standby_idle,
        },
        standby_waiting.clone(),
    ));
    let fault = FaultPlan::from_env();
    // The store thread only writes WAL frames; the syncer thread fsyncs them and then sends
    // the replies and events (`outbox`), so one batch is built while the last reaches the disk.
    store.checkpoint_every(HOST_CHECKPOINT_FRAMES)?;
    let wal = store.defer_wal_sync()?;
    let outbox = outbox::Outbox::deferred(events.clone(), wal, fault.clone())
        .map_err(io_err("cannot start the syncer thread"))?;
    let state = HostState {
        owner_id,
        epoch,
        child_config: config.children.clone(),
        supervising: true,
        socket_path: paths.socket.clone(),
        supervision_scope: supervision_scope(&paths.socket),
        reply_limit: config.limits.max_frame_bytes,
        // Retention runs once at start (the store thread's first deadline), then on its timer.
        retention: config.retention,
        retention_due_at: config.retention.map(|_| store.now_ms()),
        // Children's tokens must be unguessable: OS randomness, never a seed.
        ..HostState::new(Box::new(crate::ids::OsIds))
    };
    let store_thread = std::thread::Builder::new()
        .name("piw-store".into())
        .spawn({
            let socket = paths.socket.clone();
            move || {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    store_thread::run(store, state, outbox, jobs_rx, supervisor_tx, fault, epoch)
                }));
                if ran.is_err() {
                    state_owner_died("the store thread", &socket);
                }
            }
        })
        .map_err(io_err("cannot start the store thread"))?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = HostShared {
        jobs: jobs_tx,
        events,
        limits: config.limits,
        expected_uid: config.expected_uid,
        runtime_suffixes: Arc::new(
            config
                .children
                .runtimes
                .iter()
                .map(|r| r.suffix.clone())
                .collect(),
        ),
        missing_runtimes: Arc::new(config.children.missing_runtimes.clone()),
        bridges: Arc::new((
            config.children.bridges.clone(),
            config.children.workflow_env.clone(),
        )),
        stop: Arc::new(stop_tx),
        stopping: stop_rx.clone(),
        facts: Arc::new(HostFacts {
            pid: std::process::id(),
            epoch,
            started: Instant::now(),
            paths: paths.clone(),
            standby_waiting,
            budget,
        }),
    };
    tracing::info!(pid = std::process::id(), epoch, socket = %paths.socket.display(), "piw host ready");
    // For a person watching `piw host serve`; stdout may be a closed pipe or a full device,
    // which must not stop a host that is ready.
    let _ = writeln!(
        std::io::stdout(),
        "piw host ready: pid {} epoch {} socket {}",
        std::process::id(),
        epoch,
        paths.socket.display()
    );

    let mut connections = tokio::task::JoinSet::new();
    let mut slots = slots::Slots::new(budget.connections, budget.child_connections);
    let mut stop_watch = stop_rx.clone();
    let mut supervisor_task = supervisor_task;
    loop {
        tokio::select! {
            // The supervisor ends only when the store thread lets it go, at the stop: before
            // that, its end (a panic) leaves children nobody watches.
            _ = &mut supervisor_task => state_owner_died("the supervisor", &paths.socket),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let child = slots::own_child_pid(&stream);
                    match slots.admit(child.is_some()) {
                    slots::Admit::Serve(slot) => {
                        connections.spawn(conn::serve(stream, shared.clone(), stop_rx.clone(), slot));
                    }
                    slots::Admit::Refuse(why) => {
                        tracing::warn!(cap = slots.cap(), child, "refused a connection: no room");
                        // Before the goodbye: the child exits only after reading it, so the
                        // store thread hears of the refusal before it hears of the exit.
                        if let Some(pid) = child {
                            let _ = shared.jobs.send(StoreMsg::ChildRefused { pid });
                        }
                        connections.spawn(conn::refuse(stream, shared.limits, why));
                    }
                    }
                }
                Err(e) => {
                    // Out of descriptors: make room by closing the longest-idle connection.
                    let exhausted = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                    let freed = exhausted && slots.evict_idle("new connections (the host ran out of file descriptors)");
                    tracing::warn!(error = %e, freed, "accept failed");
                    if !freed {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            },
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); break; }
            _ = sighup.recv() => { tracing::info!("SIGHUP: stopping"); break; }
            _ = stop_watch.changed() => { tracing::info!("stop requested"); break; }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }

    // Graceful stop: no new connections; open ones finish their in-flight request, say
    // goodbye and close; the store thread commits what it has and stops.
    drop(listener);
    let _ = std::fs::remove_file(&paths.socket);
    shared.begin_stop();
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(config.drain_timeout, drain)
        .await
        .is_err()
    {
        tracing::warn!("connections did not close in time; aborting them");
        connections.abort_all();
    }
    // Children: the store thread stops launching and closes the supervisor's channel; the
    // supervisor stops every child's group and reports the exits, which leave each run
    // resumable from its last committed boundary.
    let _ = shared.jobs.send(StoreMsg::Shutdown);
    if supervisor_task.await.is_err() {
        tracing::error!("the supervisor task ended abnormally");
    }
    drop(shared);
    let joined = tokio::task::spawn_blocking(move || store_thread.join()).await;
    if !matches!(joined, Ok(Ok(()))) {
        tracing::error!("the store thread ended abnormally");
    }
    tracing::info!("piw host stopped");
    Ok(())
}

/// A thread (or task) that owns state ended abnormally (a panic): the host cannot go on
/// half-alive (answering `host.status`, refusing everything else for ever while it holds the
/// lock), so it exits at once with code [`STATE_OWNER_DIED_EXIT`]. Nothing unsynced was
/// acknowledged; the socket goes first, so the next client starts a new host, whose start-up
/// recovery takes over the runs and children.
fn state_owner_died(what: &str, socket: &std::path::Path) -> ! {
    let _ = std::fs::remove_file(socket);
    tracing::error!(
        "{what} ended abnormally; the host exits so that the next client starts a new one"
    );
    std::process::exit(STATE_OWNER_DIED_EXIT);
}

/// The exit code of a host whose store thread or supervisor died.
pub const STATE_OWNER_DIED_EXIT: i32 = 70;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_paths_are_anchored_where_the_host_started_and_bare_names_stay_for_path() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(anchored("node".into()), PathBuf::from("node"));
        assert_eq!(
            anchored("/usr/bin/node".into()),
            PathBuf::from("/usr/bin/node")
        );
        assert_eq!(anchored("bin/node".into()), cwd.join("bin/node"));
        assert_eq!(anchored("./node".into()), cwd.join("node"));
    }
}
