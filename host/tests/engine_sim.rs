//! A deterministic simulation of the host's deciding code: the store thread's turns
//! (`store_thread::turn`) against a real `Store` on a temporary file, driven by a seeded
//! scheduler that interleaves client requests, simulated children (launches, hellos, steps,
//! waits, exits, kills, messages of stale generations), lost replies, failed commits, clock
//! jumps past heartbeats, leases and node deadlines, and host crashes (everything not committed
//! is dropped; the next host is rebuilt from the file as `driver::serve` does).
//!
//! Every run goes through a checkpoint, a durable wait, an interactive step (asked by its
//! child, submitted by a client of its session, judged by a validate-mode child, expiring while
//! presented), two managed effects (`pay` may not be applied twice, `send` is idempotent) and
//! a large value uploaded in chunks. Clients of the two sessions subscribe and unsubscribe
//! (`Input::SessionWatched`/`SessionUnwatched`), submit, and submit late; the clock moves on
//! while no host runs.
//!
//! After every step: `diagnose` is clean (but for `value_partial`, a lost child's upload); no
//! run is both terminal and claimed; no stale generation is acknowledged; no start is applied
//! twice; an acknowledged cancel holds; a durable timer's wake time is the one its wait asked
//! for, and it fires once, never before it; an interactive step is held exactly while its
//! session is watched, its used time never shrinks and grows only while held and a host runs,
//! it expires only once held for its budget, it takes one accepted submission, and a closed
//! one refuses a late one; an effect has one receipt for good, a `never` one happens at most
//! once in the world, only a `never` one becomes uncertain (but for a cancel); a large value
//! reads back whole with its hash, and a transition naming it partial is refused. At the end,
//! with faults off, every run ends as its fault-free twin does (completed with the twin's
//! result, both effects applied), unless it was cancelled, or is in review for an uncertain
//! `never` effect (an uncertain one always stops its run), or for as many lost children as
//! faults could have cost it (a kill, a failed commit, a stop the host ordered). A host
//! restart or a clock jump alone is no loss.
//!
//! Clients also prune (`run.prune` by age, status and `keep`, dry runs, a status not finished,
//! which is refused), some host lives prune on their own (retention), and a host is killed
//! right after a prune commits. A prune's answer is the one a model of the selection computes
//! from the store before its turn; no prune removes a run that was not finished or whose child
//! is still exiting; a pruned run leaves no row of any table with a `run_id`, no submission and
//! not its large value; the store holds every acknowledged run no prune removed; once a host
//! has pruned, no log directory stays of a run it does not hold (its first prune sweeps those
//! an earlier life left). Every fourth run starts detached, and clients detach others, also
//! mid-step; each host life has Pi for bridges, no bridges (`run.detach` is refused) or no Pi.
//! Simulated bridges say hello, submit, crash (also while their answer is judged), refuse
//! their run, are too slow for the handshake, or exit when stopped. A detached run's open step
//! is served by a live bridge, by one starting while no child slot is free, or by nobody with a
//! reason, never silently unserved; it is held exactly from its bridge's hello to its exit; a
//! submission being judged or accepted is never dropped (a bridge's crash fails a step only
//! once its judged answer is rejected). The settling ends with every finished run pruned.
//!
//! The seed gives everything: the schedule, and every id and token the host draws (a seeded
//! `IdSource`, which only this file has), so a seed replays the same history and database
//! byte for byte.
//!
//! `PIW_SIM_SEEDS=first..last` (or one seed) and `PIW_SIM_STEPS` choose how much to run. Each
//! step draws from a stream of its own (the seed and the step's number), so a step left out
//! changes no other step's draws. A failure is shrunk: the steps are left out, in halves, then
//! quarters, down to one at a time, while the same failure remains (`PIW_SIM_SHRINK` trials at
//! most, 200 by default); it prints its seed, the failure, and the shortest history found with
//! the `PIW_SIM_ONLY` steps that replay it. `PIW_SIM_VERBOSE=1` also prints the history of the
//! failing run before shrinking.

use piw_host::store::prelude::*;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use piw_host::clock::FakeClock;
use piw_host::driver::fault::FaultPlan;
use piw_host::driver::outbox::Outbox;
use piw_host::driver::store_thread::{turn, Job, Published, StoreMsg};
use piw_host::driver::supervisor::SupervisorCmd;
use piw_host::engine::bridges::{BridgeReport, BridgeSettings, PiCommand};
use piw_host::engine::children::{ChildReport, Runtime};
use piw_host::engine::handlers::run::PreparedStart;
use piw_host::engine::retention::Retention;
use piw_host::engine::state::HostState;
use piw_host::engine::timers::next_deadline_at;
use piw_host::graph::{Graph, Outcome, Route};
use piw_host::ids::IdSource;
use piw_host::protocol::{payload, Receipt, Rejection, Request, RequestBody};
use piw_host::store::{
    AttemptOutcome, ChildExitRecord, DecisionKind, EffectResult, ExecutionMode, InteractionKind,
    NewRun, RetryContract, RunStatus, Store, StoreConfig,
};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

const LEASE_MS: i64 = 30_000;
/// How long the workflow's durable wait sleeps.
const WAIT_MS: i64 = 120_000;
const T0: i64 = 1_700_000_000_000;

/// How long the workflow's interactive step may be presented before it expires.
const ASK_MS: i64 = 60_000;
/// The two sessions runs come from (a run's start index picks one).
const SESSIONS: [&str; 2] = ["session-1", "session-2"];
/// How long a bridge may take to say hello before the host stops it and fails its step.
const BRIDGE_HANDSHAKE_MS: i64 = 30_000;
/// How long the large value the `big` node outputs is: over the inline limit, two chunks.
const BIG_BLOB_CHARS: usize = 150_000;

/// The workflow every simulated run executes: a compute node, a checkpoint, a durable wait, an
/// interactive step (its timeout, or its bridge's failure, asks again), two managed effects
/// (`pay` may not be applied twice, `send` is idempotent), a node whose output is a large
/// value, then a node with a deadline whose timeout routes back to itself.
fn workflow() -> Value {
    json!({
        "name": "sim", "start": "a",
        "nodes": {
            "a": {"kind": "compute"},
            "ok": {"kind": "checkpoint"},
            "nap": {"kind": "wait"},
            "ask": {"kind": "agent", "timeout_ms": ASK_MS},
            "pay": {"kind": "action"},
            "send": {"kind": "action", "retry": "idempotency_key"},
            "big": {"kind": "compute"},
            "b": {"kind": "compute", "timeout_ms": 60_000},
            "done": {"kind": "compute"}
        },
        "edges": [
            {"from": "a", "to": "ok"},
            {"from": "ok", "to": "nap"},
            {"from": "nap", "to": "ask"},
            {"from": "ask", "switch": {"on": "$result.outcome",
                "cases": {"ok": "pay", "timed_out": "ask", "failed": "ask"}}},
            {"from": "pay", "to": "send"},
            {"from": "send", "to": "big"},
            {"from": "big", "to": "b"},
            {"from": "b", "switch": {"on": "$result.outcome",
                "cases": {"ok": "done", "timed_out": "b"}}}
        ]
    })
}

/// Whether start `index` is detached (no client session: bridges serve its steps).
fn start_is_detached(index: usize) -> bool {
    index % 4 == 3
}

/// Whether start `index`'s input names a Pi model for its detached steps.
fn start_names_a_model(index: usize) -> bool {
    !index.is_multiple_of(3)
}

fn start_input(index: usize) -> Value {
    if start_names_a_model(index) {
        json!({"start": index, "piw_detached": {"provider": "mock", "model": "sim-model"}})
    } else {
        json!({"start": index})
    }
}

/// The large value run `run_id`'s `big` node outputs, as canonical JSON.
fn big_value(run_id: &str) -> String {
    piw_host::protocol::canonical_json(&json!({"run": run_id, "blob": "v".repeat(BIG_BLOB_CHARS)}))
}

/// What the fault-free twin of every run ends with.
fn twin_result() -> Value {
    json!({"node": "done"})
}

/// splitmix64: the simulation's only source of randomness.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    /// The stream of `step` of the simulation of `seed` (`usize::MAX`: the settling after the
    /// steps).
    fn for_step(seed: u64, step: usize) -> Self {
        let mut mix = Rng(seed ^ (step as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
        Rng(mix.next())
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The simulation's id source: the random part of every id and token the host draws (row ids,
/// claim tokens, children's tokens, the cursor key) comes from the seed, so a seed replays
/// the same ids. It exists only here: the host's only source is `piw_host::ids::OsIds`.
#[derive(Debug)]
struct SeededIds(Rng);

impl SeededIds {
    fn new(seed: u64, stream: u64) -> Self {
        SeededIds(Rng::for_step(seed, usize::MAX - 1 - stream as usize))
    }
}

impl IdSource for SeededIds {
    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let bytes = self.0.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Where a simulated child is.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Launched; its hello not yet sent.
    Launched,
    /// Its hello is in flight.
    Greeting,
    /// Running `node` in `attempt`; `carried` is the outcome it resumed with (a checkpoint's
    /// answer, a fired timer's output, an accepted submission, an expired step), or the one
    /// its work (an effect, an upload) ended with: proposed as it is.
    Running {
        node: String,
        attempt: String,
        carried: Option<AttemptOutcome>,
    },
    /// A validate-mode child judging `submission` of the interactive step of `node`.
    Judging {
        node: String,
        attempt: String,
        submission: String,
        payload: Value,
    },
    /// Effect `effect` of `node` is reserved: it says it applies it next.
    Reserved {
        node: String,
        attempt: String,
        effect: String,
    },
    /// Effect `effect` of `node` happened in the world: its receipt is stored next.
    Applied {
        node: String,
        attempt: String,
        effect: String,
        receipt: Value,
    },
    /// `node`'s large output is being uploaded; `offset` bytes are stored.
    Uploading {
        node: String,
        attempt: String,
        offset: u64,
    },
    /// A message is in flight; what its answer means.
    Sent(Sent),
    /// Its run no longer needs it (or the host refused it): it exits by itself.
    Leaving,
}

/// What a child's message in flight was.
#[derive(Debug, Clone, PartialEq)]
enum Sent {
    /// A step of the run's course (a transition, a completion, a wait, an interaction).
    Step,
    Reserve {
        node: String,
        attempt: String,
    },
    Applying {
        node: String,
        attempt: String,
        effect: String,
    },
    Settle {
        node: String,
        attempt: String,
    },
    /// A chunk of the large value; `to` bytes are stored once it is.
    Put {
        node: String,
        attempt: String,
        to: u64,
    },
    /// A transition naming the large value while only `offset` bytes of it are stored: it must
    /// be refused.
    Premature {
        node: String,
        attempt: String,
        offset: u64,
    },
    Verdict {
        node: String,
        attempt: String,
        payload: Value,
        accepted: bool,
    },
}

struct SimChild {
    run_id: String,
    generation: u64,
    child_epoch: i64,
    launch: u64,
    token: String,
    /// Which host launched it.
    host_life: u32,
    phase: Phase,
    started_reported: bool,
    /// The host asked the supervisor to stop it.
    stop_requested: bool,
    /// Its hello was acknowledged: its connection speaks for its run and generation (the
    /// connection refuses any other worker message, `admission::worker_may_send`).
    greeted: bool,
    /// Its process ended (the report is on its way).
    exited: bool,
    /// The host has handled its end (or the host that launched it died): whatever it still
    /// sends is from a stale generation.
    gone: bool,
}

/// A detached run's bridge (Pi in RPC mode the host launched for its open step).
struct SimBridge {
    run_id: String,
    launch: u64,
    /// Which host launched it (a host's bridges die with it: they lose their connection).
    host_life: u32,
    /// Its hello (the run's lock taken) was reported.
    hello: bool,
    /// The host asked the supervisor to stop it.
    stop_requested: bool,
    /// Its process ended (the report is on its way).
    exited: bool,
    /// A submission of it is in flight.
    submitting: bool,
}

/// What each host life offers detached runs (drawn at its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BridgeMode {
    /// Pi is there: bridges serve the steps of runs that name a model.
    Serving,
    /// `PIW_DETACHED_BRIDGES=off`: no bridges; `run.detach` is refused, steps wait for clients.
    Off,
    /// Bridges are on but no Pi was found: a step that needs one fails with the reason.
    NoPi,
}

/// What a `run.prune` must answer, from the model of the store taken before its turn.
#[derive(Debug, Clone)]
enum PruneExpected {
    /// A dry run: how many match, and the first page of them.
    Listed { count: u64, run_ids: Vec<String> },
    /// A batch: the runs removed, in order, and whether more must be said to be left.
    Removed { run_ids: Vec<String>, more: bool },
    /// A selector naming an unfinished status: refused, nothing removed.
    Refused,
}

/// A request in flight and what the simulation does with its answer.
enum Waiting {
    Start(usize),
    /// A cancel, sent again with the same request id if its reply is lost.
    Cancel(String, String),
    Other,
    /// A child's message (the child's index in `Sim::children`).
    Child(usize),
    /// A message of a child that no longer speaks for its run: never acknowledged.
    Stale,
    /// A submission to an interactive step (`late`: one that was closed when it was sent).
    Submit {
        interaction: String,
        late: bool,
    },
    /// A bridge's submission to its run's open step.
    BridgeSubmit {
        bridge: usize,
        interaction: String,
    },
    /// A `run.prune` (its request id: its expectation is computed at its turn).
    Prune(String),
    /// A `run.detach` of `run_id`, whose start named a Pi model or not.
    Detach {
        run_id: String,
        has_model: bool,
    },
}

/// A request sent: where its answer comes, what waits for it, and what the history calls it.
type InFlight = (
    oneshot::Receiver<Result<Receipt, Rejection>>,
    Waiting,
    String,
);

struct Start {
    request_id: String,
    run_id: Option<String>,
    /// Sent and not answered yet (lost replies are sent again, with the same id).
    in_flight: bool,
}

struct Host {
    state: HostState,
    /// Where the store thread's replies and events wait until the simulation delivers them.
    outbox: Outbox,
    /// The store thread's end of the supervisor's channel, and the supervisor's.
    supervisor_tx: Option<mpsc::UnboundedSender<SupervisorCmd>>,
    supervisor: mpsc::UnboundedReceiver<SupervisorCmd>,
    events: broadcast::Receiver<Published>,
}

struct Sim {
    /// The stream of the step running (`Rng::for_step`).
    rng: Rng,
    seed: u64,
    /// The store's id source (shared by every host of the simulation, as the file is).
    ids: piw_host::store::SharedIds,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: FakeClock,
    fail_next_commit: Arc<AtomicBool>,
    store: Option<Store>,
    host: Option<Host>,
    host_life: u32,
    graph: Graph,
    history: Vec<String>,
    /// How many of the planned steps have begun (the one that failed included).
    steps_begun: usize,
    next_id: u64,
    starts: Vec<Start>,
    in_flight: Vec<InFlight>,
    /// Messages for the next turn.
    outgoing: Vec<StoreMsg>,
    children: Vec<SimChild>,
    cancelled: BTreeSet<String>,
    /// Durable timers an acknowledged `worker.wait_until` set: their wake times, as the
    /// simulation computed them from its own clock.
    timers: std::collections::BTreeMap<String, i64>,
    /// Timers seen firing (a `timer_fired` event), and how far each run's events were read.
    fired: BTreeSet<String>,
    events_read: std::collections::BTreeMap<String, u64>,
    /// How many real losses each run may have had: its child killed, refused for a failed
    /// commit, or stopped by the host (a deadline, a handshake timeout). A run may end in review
    /// for lost children only as many times; a host restart or a clock jump alone is no loss.
    faults: BTreeMap<String, u32>,
    /// How often each run's effects (by node) happened in the world.
    world: BTreeMap<(String, String), u32>,
    /// Every receipt an effect was seen with: one per effect, ever.
    receipts: BTreeMap<String, Value>,
    /// The connections (numbers) that follow each session's events, in this host's life.
    watchers: BTreeMap<String, BTreeSet<u64>>,
    next_connection: u64,
    /// What each interactive step looked like at the last check: the time it had used
    /// (`used_ms`, plus the time since `held_since` while held), whether it was held, when.
    steps_seen: BTreeMap<String, StepSeen>,
    /// The submissions each step took (their ids), as acknowledged.
    submissions: BTreeMap<String, BTreeSet<String>>,
    /// Runs whose large value was read back whole.
    values_read: BTreeSet<String>,
    /// A read-only connection to the file, for facts the store's API does not read.
    reader: Option<rusqlite::Connection>,
    /// How long no host ran, in all (the clock moves on while one is down).
    downtime: i64,
    /// Bridges the hosts launched, in launch order.
    bridges: Vec<SimBridge>,
    /// What this host life offers detached runs.
    bridge_mode: BridgeMode,
    /// `$PIW_HOME/logs`: the simulated supervisor makes `logs/<run_id>` at each launch and
    /// removes what `RemoveLogs` names.
    logs: std::path::PathBuf,
    /// Runs a prune removed (a client's `run.prune` or the retention pass).
    pruned: BTreeSet<String>,
    /// Pruned runs whose rows were checked gone.
    pruned_checked: BTreeSet<String>,
    /// What each `run.prune` in flight must answer (by request id).
    prune_expected: BTreeMap<String, PruneExpected>,
    /// This host life removed runs by a prune (its first prune sweeps the log directories an
    /// earlier life left: `Effect::SweepRunLogs`).
    host_pruned: bool,
    /// Runs seen finished before a turn, checked against their twin then (a prune may remove
    /// them before the end).
    ended: BTreeSet<String>,
    /// Runs a `run.cancel` was sent for.
    cancel_sent: BTreeSet<String>,
    /// Runs a detach was acknowledged for (or that started detached).
    detached: BTreeSet<String>,
    /// The settling has begun: every host from now on has Pi for its bridges.
    settling: bool,
    /// The `more` of the last `run.prune` answered.
    last_prune_more: Option<bool>,
}

impl StepSeen {
    /// The most time the step can have used by `now` (when no host ran for `downtime` in
    /// all): what it had, and the time a host ran since, if it was held.
    fn most_by(&self, now: i64, downtime: i64) -> i64 {
        let up = (now - self.at) - (downtime - self.downtime);
        self.used + if self.held { up } else { 0 }
    }
}

/// An interactive step at a check.
#[derive(Debug, Clone, Copy)]
struct StepSeen {
    /// `used_ms` as stored (added up at each release).
    stored: i64,
    /// With the time since `held_since` while held.
    used: i64,
    held: bool,
    at: i64,
    /// `Sim::downtime` then.
    downtime: i64,
    budget: Option<i64>,
}

fn config(
    clock: &FakeClock,
    ids: &piw_host::store::SharedIds,
    fail: &Arc<AtomicBool>,
) -> StoreConfig {
    let flag = fail.clone();
    StoreConfig {
        lease_ms: LEASE_MS,
        clock: Arc::new(clock.clone()),
        ids: ids.clone(),
        fault_hook: Some(Arc::new(move |_ops: &[&'static str]| {
            flag.swap(false, Ordering::SeqCst)
        })),
        ..StoreConfig::default()
    }
}

/// What a simulation that failed left: its history and how many of its steps had begun.
struct Wreck {
    history: Vec<String>,
    steps_begun: usize,
}

thread_local! {
    /// The wreck of the last simulation on this thread that ended in a panic.
    static WRECK: RefCell<Option<Wreck>> = const { RefCell::new(None) };
}

impl Drop for Sim {
    fn drop(&mut self) {
        // A failure is a panic (of the simulation's checks or of the code under test): what
        // led to it is kept for the report.
        if std::thread::panicking() {
            let wreck = Wreck {
                history: std::mem::take(&mut self.history),
                steps_begun: self.steps_begun,
            };
            WRECK.with(|w| *w.borrow_mut() = Some(wreck));
        }
    }
}

impl Sim {
    fn new(seed: u64) -> Self {
        // tmpfs when there is one: the simulation commits thousands of times.
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).expect("tempdir")
        } else {
            tempfile::tempdir().expect("tempdir")
        };
        let path = dir.path().join("state.sqlite");
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).expect("the logs directory");
        let clock = FakeClock::new(T0);
        let fail_next_commit = Arc::new(AtomicBool::new(false));
        let mut sim = Sim {
            rng: Rng(seed),
            seed,
            ids: Arc::new(std::sync::Mutex::new(SeededIds::new(seed, 0))),
            _dir: dir,
            path,
            clock,
            fail_next_commit,
            store: None,
            host: None,
            host_life: 0,
            graph: Graph::parse(&workflow()).expect("the workflow parses"),
            history: Vec::new(),
            steps_begun: 0,
            next_id: 0,
            starts: Vec::new(),
            in_flight: Vec::new(),
            outgoing: Vec::new(),
            children: Vec::new(),
            cancelled: BTreeSet::new(),
            timers: Default::default(),
            fired: BTreeSet::new(),
            events_read: Default::default(),
            faults: BTreeMap::new(),
            world: BTreeMap::new(),
            receipts: BTreeMap::new(),
            watchers: BTreeMap::new(),
            next_connection: 0,
            steps_seen: BTreeMap::new(),
            submissions: BTreeMap::new(),
            values_read: BTreeSet::new(),
            reader: None,
            downtime: 0,
            bridges: Vec::new(),
            bridge_mode: BridgeMode::Serving,
            logs,
            pruned: BTreeSet::new(),
            pruned_checked: BTreeSet::new(),
            prune_expected: BTreeMap::new(),
            host_pruned: false,
            ended: BTreeSet::new(),
            cancel_sent: BTreeSet::new(),
            detached: BTreeSet::new(),
            settling: false,
            last_prune_more: None,
        };
        sim.boot();
        sim
    }

    fn force_serving(&self) -> bool {
        self.settling
    }

    fn store(&mut self) -> &mut Store {
        self.store.as_mut().expect("a store")
    }

    /// Opens the store and starts a host on it as `driver::serve` does: a new epoch, the runs of
    /// earlier hosts recovered, their children's ends recorded.
    fn boot(&mut self) {
        let mut store = Store::open(
            &self.path,
            config(&self.clock, &self.ids, &self.fail_next_commit),
        )
        .expect("open");
        let epoch = piw_host::driver::recover_at_start(&mut store, 1).expect("startup recovery");
        // The orphans of the crashed host are "killed" here (the simulation's children have no
        // processes): only their ends are recorded.
        let orphans = store.orphan_children(epoch).expect("orphans");
        store
            .write(|w| {
                for orphan in &orphans {
                    let exit = ChildExitRecord {
                        reason: "orphan of an earlier host".into(),
                        ..Default::default()
                    };
                    w.record_child_exit(orphan.child_epoch, &exit)?;
                }
                Ok(())
            })
            .expect("record orphans");
        let (tx, supervisor) = mpsc::unbounded_channel();
        let (events_tx, events) = broadcast::channel(1 << 16);
        let mut state = HostState {
            owner_id: piw_host::driver::host_owner_id(epoch),
            epoch,
            supervising: true,
            socket_path: "/nonexistent/host.sock".into(),
            reply_limit: piw_host::protocol::DEFAULT_MAX_FRAME_BYTES,
            // Each host life draws its children's tokens from a stream of its own.
            ..HostState::new(Box::new(SeededIds::new(
                self.seed,
                u64::from(self.host_life) + 1,
            )))
        };
        // Fewer slots than runs: which ready run gets one is decided by the engine's order
        // (replayed by the seed), and runs wait for slots.
        state.child_config.max_children = 4;
        state.child_config.runtimes = vec![Runtime {
            suffix: ".workflow.json".into(),
            program: "/bin/true".into(),
            args: Vec::new(),
            standby: false,
        }];
        state.child_config.output_logs = Some(self.logs.clone());
        // What this life offers detached runs: mostly Pi, now and then no bridges at all or
        // no Pi to start (a settling host always has Pi: `force_serving`).
        self.bridge_mode = match self.rng.below(10) {
            _ if self.force_serving() => BridgeMode::Serving,
            0 => BridgeMode::Off,
            1 => BridgeMode::NoPi,
            _ => BridgeMode::Serving,
        };
        state.child_config.bridges =
            (self.bridge_mode != BridgeMode::Off).then(|| BridgeSettings {
                pi: if self.bridge_mode == BridgeMode::NoPi {
                    Err("no pi on PATH".into())
                } else {
                    Ok(PiCommand {
                        program: "/sim/pi".into(),
                        prefix: Vec::new(),
                        describe: "the simulation's Pi".into(),
                    })
                },
                extension: "/sim/extension/bridge.js".into(),
                preflight: None,
                // No host-wide model: a run's input names one (`piw_detached`), or none does.
                provider: None,
                model: None,
                pi_args: Vec::new(),
                pi_default: None,
                home: self.logs.clone(),
                handshake_timeout: std::time::Duration::from_millis(BRIDGE_HANDSHAKE_MS as u64),
            });
        // Now and then a life prunes on its own (`PIW_RETAIN_RUNS`, `PIW_RETAIN_DAYS=0`): its
        // pass runs at its first turn, then hourly.
        if self.rng.chance(35) {
            let days = self.rng.chance(50).then_some(0);
            let runs = (days.is_none() || self.rng.chance(50)).then(|| self.rng.below(4) as u64);
            state.retention = Retention::from_settings(days, runs);
            state.retention_due_at = Some(piw_host::clock::Clock::now_ms(&self.clock));
        }
        self.host_pruned = false;
        self.host_life += 1;
        self.store = Some(store);
        self.host = Some(Host {
            state,
            outbox: Outbox::immediate(events_tx),
            supervisor_tx: Some(tx),
            supervisor,
            events,
        });
    }

    /// A fault that may cost `run_id` its child.
    fn fault(&mut self, run_id: &str) {
        *self.faults.entry(run_id.to_owned()).or_insert(0) += 1;
    }

    fn reader(&mut self) -> &rusqlite::Connection {
        let path = self.path.clone();
        self.reader.get_or_insert_with(|| {
            rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .expect("a reader")
        })
    }

    fn note(&mut self, what: String) {
        self.history.push(what);
    }

    /// Ends the simulation with `why`; its history is kept by `Drop` for the report.
    fn fail(&self, why: &str) -> ! {
        std::panic::panic_any(why.to_owned())
    }

    fn request_id(&mut self) -> String {
        self.next_id += 1;
        format!("sim-{}", self.next_id)
    }

    fn send(&mut self, request: Request, start: Option<PreparedStart>, waiting: Waiting) {
        let (reply, rx) = oneshot::channel();
        let what = format!("{} {}", request.body.kind_str(), request.request_id);
        self.outgoing.push(StoreMsg::Request(Box::new(Job {
            request,
            start,
            accepted_source: None,
            start_refused: None,
            meta: None,
            reply,
        })));
        self.in_flight.push((rx, waiting, what));
    }

    fn send_start(&mut self, index: usize) {
        let request_id = self.starts[index].request_id.clone();
        self.starts[index].in_flight = true;
        // Every fourth run starts detached (no session: bridges serve its steps); most runs
        // name a Pi model in their input, the others' detached steps wait for clients.
        let detached = start_is_detached(index);
        let input = start_input(index);
        let session = (!detached).then(|| SESSIONS[index % 2].to_owned());
        let mode = if detached {
            ExecutionMode::Detached
        } else {
            ExecutionMode::Interactive
        };
        let body = RequestBody::RunStart(payload::RunStart {
            workflow_file: "/sim/sim.workflow.json".into(),
            input: input.clone(),
            session_id: session.clone(),
            execution_mode: Some(mode),
            project_dir: Some("/".into()),
        });
        let start = PreparedStart {
            new_run: NewRun {
                workflow_name: "sim".into(),
                source_root: "/sim/sim.workflow.json".into(),
                source_hash: "0".repeat(64),
                mounted_sources: json!({}),
                definition: None,
                input,
                origin_session: session,
                execution_mode: mode,
                project_dir: "/".into(),
            },
        };
        self.note(format!("client: run.start #{index} ({request_id})"));
        self.send(
            Request::new(request_id, body),
            Some(start),
            Waiting::Start(index),
        );
    }

    /// A run this simulation started and the host acknowledged.
    fn some_run(&mut self) -> Option<String> {
        let runs: Vec<String> = self
            .starts
            .iter()
            .filter_map(|s| s.run_id.clone())
            .collect();
        (!runs.is_empty()).then(|| runs[self.rng.below(runs.len())].clone())
    }

    fn client_step(&mut self) {
        match self.rng.below(31) {
            27 => self.send_prune(false),
            28 => self.send_prune(true),
            29 => self.send_detach(),
            0..=4 if self.starts.len() < 12 => {
                let request_id = self.request_id();
                self.starts.push(Start {
                    request_id,
                    run_id: None,
                    in_flight: false,
                });
                self.send_start(self.starts.len() - 1);
            }
            5 => {
                if let Some(run_id) = self.some_run() {
                    let id = self.request_id();
                    self.note(format!("client: cancel {run_id}"));
                    self.cancel_sent.insert(run_id.clone());
                    let body = RequestBody::RunCancel(payload::RunCancel {
                        reason: Some("sim".into()),
                    });
                    let request = Request::new(id.clone(), body).with_run_id(&run_id);
                    self.send(request, None, Waiting::Cancel(run_id, id));
                }
            }
            6..=8 => {
                if let Some(run_id) = self.some_run() {
                    let id = self.request_id();
                    let body = if self.rng.chance(50) {
                        RequestBody::RunPause
                    } else {
                        RequestBody::RunResume
                    };
                    self.note(format!("client: {} {run_id}", body.kind_str()));
                    self.send(
                        Request::new(id, body).with_run_id(&run_id),
                        None,
                        Waiting::Other,
                    );
                }
            }
            9 | 10 => {
                if let Some(run_id) = self.some_run() {
                    let id = self.request_id();
                    let body = RequestBody::RunStatus(payload::RunStatusQuery::default());
                    self.send(
                        Request::new(id, body).with_run_id(&run_id),
                        None,
                        Waiting::Other,
                    );
                }
            }
            16 | 17 => {
                // A client of a session subscribes to its events (a new connection).
                let session = SESSIONS[self.rng.below(2)].to_owned();
                self.next_connection += 1;
                let connection = self.next_connection;
                self.note(format!(
                    "client: {session} watched on connection {connection}"
                ));
                self.watchers
                    .entry(session.clone())
                    .or_default()
                    .insert(connection);
                self.outgoing.push(StoreMsg::SessionWatched {
                    session_id: session,
                    connection,
                });
            }
            18 | 19 => {
                let watching: Vec<(String, u64)> = self
                    .watchers
                    .iter()
                    .flat_map(|(s, cs)| cs.iter().map(move |c| (s.clone(), *c)))
                    .collect();
                if !watching.is_empty() {
                    let (session, connection) = watching[self.rng.below(watching.len())].clone();
                    self.note(format!(
                        "client: {session} unwatched on connection {connection}"
                    ));
                    if let Some(cs) = self.watchers.get_mut(&session) {
                        cs.remove(&connection);
                        if cs.is_empty() {
                            self.watchers.remove(&session);
                        }
                    }
                    self.outgoing.push(StoreMsg::SessionUnwatched {
                        session_id: session,
                        connection,
                    });
                }
            }
            20..=23 => self.submit(false),
            24 | 25 => self.submit(true),
            _ => self.answer_a_decision(),
        }
    }

    /// A client prunes finished runs with a random selection (by age, status, how many are
    /// kept; now and then an unfinished status, which is refused) and a small `limit`, so a
    /// batch leaves some for the next; or lists them (`dry`). One prune per turn: its expected
    /// answer is computed from the store as it is before that turn.
    fn send_prune(&mut self, dry: bool) {
        if self
            .in_flight
            .iter()
            .any(|(_, w, _)| matches!(w, Waiting::Prune(_)))
        {
            return;
        }
        let older_than_ms = self
            .rng
            .chance(40)
            .then(|| [0, 1, 20_000][self.rng.below(3)]);
        let statuses = match self.rng.below(8) {
            0 => Some(vec![RunStatus::Cancelled]),
            1 => Some(vec![RunStatus::Completed, RunStatus::Failed]),
            2 => Some(vec![RunStatus::Cancelled, RunStatus::Running]),
            _ => None,
        };
        let keep = self.rng.chance(40).then(|| self.rng.below(4) as u64);
        let limit = Some(1 + self.rng.below(4) as u32);
        let prune = payload::RunPrune {
            older_than_ms,
            statuses,
            keep,
            dry_run: dry.then_some(true),
            limit,
            cursor: None,
        };
        self.send_prune_request(prune);
    }

    fn send_prune_request(&mut self, prune: payload::RunPrune) {
        let id = self.request_id();
        self.note(format!(
            "client: run.prune{} older_than {:?} statuses {:?} keep {:?} limit {:?}",
            if prune.dry_run == Some(true) {
                " (dry)"
            } else {
                ""
            },
            prune.older_than_ms,
            prune.statuses,
            prune.keep,
            prune.limit
        ));
        let request = Request::new(id.clone(), RequestBody::RunPrune(prune));
        self.send(request, None, Waiting::Prune(id));
    }

    /// A client detaches a run of a session (`run.detach`): from now on bridges serve its
    /// steps, also the one open now. Refused on a host without bridges, or for a run whose
    /// input names no Pi model.
    fn send_detach(&mut self) {
        let runs: Vec<(usize, String)> = self
            .starts
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.run_id.clone().map(|r| (i, r)))
            .filter(|(_, r)| !self.pruned.contains(r))
            .collect();
        if runs.is_empty() {
            return;
        }
        let (index, run_id) = runs[self.rng.below(runs.len())].clone();
        let id = self.request_id();
        self.note(format!("client: run.detach {run_id}"));
        let request = Request::new(id, RequestBody::RunDetach).with_run_id(&run_id);
        let has_model = start_names_a_model(index);
        self.send(request, None, Waiting::Detach { run_id, has_model });
    }

    /// A client submits a result to a pending interactive step; with `late`, to one that is
    /// closed already (answered, expired, failed), which must refuse it.
    fn submit(&mut self, late: bool) {
        let steps: Vec<(String, String, String, String)> = {
            let sql = if late {
                "SELECT interaction_id, run_id, node_id, attempt_id FROM interactions
                 WHERE status IN ('settled', 'expired', 'cancelled') ORDER BY interaction_id"
            } else {
                "SELECT interaction_id, run_id, node_id, attempt_id FROM interactions
                 WHERE status = 'pending' ORDER BY interaction_id"
            };
            let reader = self.reader();
            let mut stmt = reader.prepare_cached(sql).expect("a query");
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .expect("steps");
            rows.collect::<Result<_, _>>().expect("steps")
        };
        if steps.is_empty() {
            return;
        }
        let (interaction, run_id, node, attempt) = steps[self.rng.below(steps.len())].clone();
        let id = self.request_id();
        // A late one sends what no submission sent (a repeat of an accepted one is answered
        // with its receipt).
        let result = if late {
            json!({"late": id})
        } else {
            json!({"answer": self.rng.below(3)})
        };
        self.note(format!(
            "client: submit{} {result} to {interaction} of {run_id}",
            if late { " (late)" } else { "" }
        ));
        let body = RequestBody::InteractionSubmit(payload::InteractionSubmit {
            interaction_id: interaction.clone(),
            result,
            refuse_repeat: false,
        });
        let request = Request::new(id, body)
            .with_run_id(&run_id)
            .with_node_id(&node)
            .with_attempt_id(&attempt);
        self.send(request, None, Waiting::Submit { interaction, late });
    }

    fn answer_a_decision(&mut self) {
        let runs: Vec<String> = self
            .starts
            .iter()
            .filter_map(|s| s.run_id.clone())
            .collect();
        let mut pending = Vec::new();
        for run_id in runs {
            if self.pruned.contains(&run_id) {
                continue;
            }
            for d in self.store().decisions(&run_id).expect("decisions") {
                if d.status == "pending" {
                    pending.push((run_id.clone(), d.decision_id));
                }
            }
        }
        if pending.is_empty() {
            return;
        }
        let (run_id, decision_id) = pending[self.rng.below(pending.len())].clone();
        let id = self.request_id();
        self.note(format!(
            "client: checkpoint.answer {decision_id} of {run_id}"
        ));
        let body = RequestBody::CheckpointAnswer(payload::DecisionAnswer {
            decision_id,
            answer: json!({"approved": true}),
            channel: None,
        });
        self.send(
            Request::new(id, body).with_run_id(&run_id),
            None,
            Waiting::Other,
        );
    }

    fn worker_request(&mut self, child: usize, body: RequestBody) -> Request {
        let id = self.request_id();
        let c = &self.children[child];
        Request::new(id, body)
            .with_run_id(&c.run_id)
            .with_generation(c.generation)
    }

    /// Whether the child's process runs.
    fn live(&self, child: usize) -> bool {
        let c = &self.children[child];
        c.host_life == self.host_life && !c.exited
    }

    fn report_started(&mut self, child: usize) {
        self.children[child].started_reported = true;
        let c = &self.children[child];
        let report = ChildReport::Started {
            run_id: c.run_id.clone(),
            generation: c.generation,
            child_epoch: c.child_epoch,
            launch: c.launch,
            pid: 100_000 + u32::try_from(child).unwrap_or(0),
            start_time: 1,
            standby: false,
        };
        let what = format!("supervisor: started {} g{}", c.run_id, c.generation);
        self.note(what);
        self.outgoing.push(StoreMsg::Child(report));
    }

    fn child_step(&mut self) {
        let live: Vec<usize> = (0..self.children.len()).filter(|&c| self.live(c)).collect();
        let bridges: Vec<usize> = (0..self.bridges.len())
            .filter(|&b| self.bridge_live(b))
            .collect();
        if live.is_empty() && bridges.is_empty() {
            return;
        }
        let pick = self.rng.below(live.len() + bridges.len());
        match live.get(pick) {
            Some(&child) => self.child_step_of(child),
            None => self.bridge_step_of(bridges[pick - live.len()]),
        }
    }

    /// Whether the bridge's process runs.
    fn bridge_live(&self, bridge: usize) -> bool {
        let b = &self.bridges[bridge];
        b.host_life == self.host_life && !b.exited
    }

    /// A bridge does what `extension/bridge.js` does: it takes its run (its hello) or fails to
    /// start (Pi could not start, it refused the run, or it is slow past the handshake), then
    /// submits to its run's open step as its model would; it exits when its run has no step
    /// for it, and when the host stops it.
    fn bridge_step_of(&mut self, bridge: usize) {
        let run_id = self.bridges[bridge].run_id.clone();
        if self.bridges[bridge].stop_requested && self.rng.chance(60) {
            return self.exit_bridge(bridge, Some(0), None, "stopped: its step closed");
        }
        if !self.bridges[bridge].hello {
            match self.rng.below(10) {
                0 => self.exit_bridge(bridge, Some(1), None, "Pi could not start"),
                1 => self.exit_bridge(bridge, Some(4), None, "it refused the run"),
                // Slow: a clock jump may pass its handshake.
                2 | 3 => {}
                _ => {
                    let launch = self.bridges[bridge].launch;
                    self.note(format!("bridge {run_id} #{launch}: hello"));
                    self.bridges[bridge].hello = true;
                    self.outgoing
                        .push(StoreMsg::Child(ChildReport::Bridge(BridgeReport::Hello {
                            run_id,
                            launch,
                        })));
                }
            }
            return;
        }
        if self.bridges[bridge].submitting {
            return;
        }
        let steps: Vec<(String, String, String, String)> = {
            let reader = self.reader();
            let mut stmt = reader
                .prepare_cached(
                    "SELECT interaction_id, node_id, attempt_id, status FROM interactions
                     WHERE run_id = ?1 AND status IN ('pending', 'validating')
                     ORDER BY interaction_id",
                )
                .expect("a query");
            let rows = stmt
                .query_map([&run_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .expect("steps");
            rows.collect::<Result<_, _>>().expect("steps")
        };
        let pending = steps.iter().find(|s| s.3 == "pending").cloned();
        let Some((interaction, node, attempt, _)) = pending else {
            if steps.is_empty() {
                // Nothing open for it: it ends by itself (`BRIDGE_EXIT.done`).
                if self.rng.chance(30) {
                    self.exit_bridge(bridge, Some(0), None, "the run has no step for it");
                }
            } else if self.rng.chance(25) {
                // Its answer is being judged: Pi crashes meanwhile. The answer must stand.
                self.exit_bridge(bridge, None, Some(9), "crashed while its answer was judged");
            }
            return;
        };
        if !self.rng.chance(60) {
            return;
        }
        let id = self.request_id();
        let result = json!({"answer": self.rng.below(3), "by": "bridge"});
        self.note(format!("bridge {run_id}: submit {result} to {interaction}"));
        let body = RequestBody::InteractionSubmit(payload::InteractionSubmit {
            interaction_id: interaction.clone(),
            result,
            refuse_repeat: false,
        });
        let request = Request::new(id, body)
            .with_run_id(&run_id)
            .with_node_id(&node)
            .with_attempt_id(&attempt);
        self.bridges[bridge].submitting = true;
        self.send(
            request,
            None,
            Waiting::BridgeSubmit {
                bridge,
                interaction,
            },
        );
    }

    /// The bridge's process ends; the supervisor reports it.
    fn exit_bridge(&mut self, bridge: usize, code: Option<i32>, signal: Option<i32>, why: &str) {
        let b = &mut self.bridges[bridge];
        b.exited = true;
        let report = BridgeReport::Exited {
            run_id: b.run_id.clone(),
            launch: b.launch,
            exit: ChildExitRecord {
                reason: why.into(),
                exit_code: code,
                signal,
                ..Default::default()
            },
        };
        let what = format!("supervisor: bridge {} #{} {why}", b.run_id, b.launch);
        self.note(what);
        self.outgoing
            .push(StoreMsg::Child(ChildReport::Bridge(report)));
    }

    fn child_step_of(&mut self, child: usize) {
        let c = &self.children[child];
        let (run_id, generation) = (c.run_id.clone(), c.generation);
        if !c.started_reported && self.rng.chance(60) {
            return self.report_started(child);
        }
        if c.stop_requested && self.rng.chance(50) {
            return self.exit(child, "stopped by the host by signal 15", Some(15));
        }
        match self.children[child].phase.clone() {
            Phase::Launched => {
                let body = RequestBody::WorkerHello(payload::WorkerHello {
                    child_token: self.children[child].token.clone(),
                    pid: 1,
                    definition: Some(workflow()),
                    mounted_sources: Some(json!({})),
                    start_node: true,
                });
                let request = self.worker_request(child, body);
                self.children[child].phase = Phase::Greeting;
                self.note(format!("child {run_id} g{generation}: hello"));
                self.send(request, None, Waiting::Child(child));
            }
            Phase::Running {
                node,
                attempt,
                carried,
            } => self.take_step(child, &node, &attempt, carried),
            Phase::Judging {
                node,
                attempt,
                submission,
                payload,
            } => {
                // Most submissions pass the node's `validate`; a rejected one waits for another.
                let accepted = self.rng.chance(85);
                let body = RequestBody::WorkerValidationResult(payload::WorkerValidationResult {
                    submission_id: submission.clone(),
                    accepted,
                    error: (!accepted).then(|| "not good enough".into()),
                });
                let request = self.worker_request(child, body);
                self.note(format!(
                    "child {run_id}: {} {submission}",
                    if accepted { "accepts" } else { "rejects" }
                ));
                self.children[child].phase = Phase::Sent(Sent::Verdict {
                    node,
                    attempt,
                    payload,
                    accepted,
                });
                self.send(request, None, Waiting::Child(child));
            }
            Phase::Reserved {
                node,
                attempt,
                effect,
            } => {
                let body = RequestBody::WorkerEffectApplying(payload::WorkerEffectApplying {
                    effect_id: effect.clone(),
                });
                let request = self
                    .worker_request(child, body)
                    .with_node_id(&node)
                    .with_attempt_id(&attempt);
                self.note(format!("child {run_id}: applying {effect}"));
                self.children[child].phase = Phase::Sent(Sent::Applying {
                    node,
                    attempt,
                    effect,
                });
                self.send(request, None, Waiting::Child(child));
            }
            Phase::Applied {
                node,
                attempt,
                effect,
                receipt,
            } => {
                let body = RequestBody::WorkerEffectSettle(payload::WorkerEffectSettle {
                    effect_id: effect.clone(),
                    result: EffectResult::Applied { receipt },
                });
                let request = self
                    .worker_request(child, body)
                    .with_node_id(&node)
                    .with_attempt_id(&attempt);
                self.note(format!("child {run_id}: settles {effect}"));
                self.children[child].phase = Phase::Sent(Sent::Settle { node, attempt });
                self.send(request, None, Waiting::Child(child));
            }
            Phase::Uploading {
                node,
                attempt,
                offset,
            } => self.upload(child, node, attempt, offset),
            Phase::Leaving | Phase::Greeting | Phase::Sent(_) => {
                if self.children[child].phase == Phase::Leaving
                    || self.children[child].stop_requested
                {
                    self.exit(child, "exited", None);
                }
            }
        }
    }

    /// The next chunk of `node`'s large output from `offset`; or, now and then while it is
    /// partial, a transition that names it anyway (which the host must refuse).
    fn upload(&mut self, child: usize, node: String, attempt: String, offset: u64) {
        let run_id = self.children[child].run_id.clone();
        let text = big_value(&run_id);
        let reference = piw_host::protocol::value::ValueRef::for_canonical(&text);
        let bytes = text.len() as u64;
        if offset > 0 && offset < bytes && self.rng.chance(20) {
            let body = RequestBody::WorkerTransition(payload::WorkerTransition {
                outcome: AttemptOutcome::Succeeded {
                    output: reference.to_json(),
                },
                next_node: "b".into(),
                earlier: Vec::new(),
                next_timeout_ms: None,
            });
            let request = self
                .worker_request(child, body)
                .with_node_id(&node)
                .with_attempt_id(&attempt);
            self.note(format!(
                "child {run_id}: names its value with {offset} of {bytes} bytes stored"
            ));
            self.children[child].phase = Phase::Sent(Sent::Premature {
                node,
                attempt,
                offset,
            });
            return self.send(request, None, Waiting::Child(child));
        }
        let end =
            (offset as usize + piw_host::protocol::value::VALUE_PUT_CHUNK_BYTES).min(text.len());
        let body = RequestBody::WorkerValuePut(payload::WorkerValuePut {
            sha256: reference.sha256.clone(),
            bytes,
            offset,
            data: piw_host::protocol::value::chunk_to_hex(&text.as_bytes()[offset as usize..end]),
        });
        let request = self.worker_request(child, body);
        self.note(format!(
            "child {run_id}: value_put {offset}..{end} of {bytes}"
        ));
        self.children[child].phase = Phase::Sent(Sent::Put {
            node,
            attempt,
            to: end as u64,
        });
        self.send(request, None, Waiting::Child(child));
    }

    /// The child finishes `node` as the twin does and proposes what the graph routes.
    fn take_step(
        &mut self,
        child: usize,
        node: &str,
        attempt: &str,
        carried: Option<AttemptOutcome>,
    ) {
        use piw_host::graph::NodeKind;
        let node_spec = *self.graph.node(node).expect("a node of the graph");
        let run_id = self.children[child].run_id.clone();
        let ask = |sim: &mut Sim, body: RequestBody, sent: Sent, what: String| {
            let request = sim
                .worker_request(child, body)
                .with_node_id(node)
                .with_attempt_id(attempt);
            sim.children[child].phase = Phase::Sent(sent);
            sim.note(format!("child {run_id}: {what} at {node}"));
            sim.send(request, None, Waiting::Child(child));
        };
        let outcome = match (node_spec.kind, carried) {
            (_, Some(outcome)) => outcome,
            (NodeKind::Checkpoint, None) => {
                let body = RequestBody::WorkerWait(payload::WorkerWait {
                    decision_kind: DecisionKind::Checkpoint,
                    request: json!({"question": "go on?"}),
                });
                return ask(self, body, Sent::Step, "wait".into());
            }
            (NodeKind::Wait, None) => {
                let body = RequestBody::WorkerWaitUntil(payload::WorkerWaitUntil {
                    for_ms: Some(WAIT_MS as u64),
                    until_ms: None,
                    output: json!({"node": node}),
                });
                return ask(self, body, Sent::Step, "wait_until".into());
            }
            (NodeKind::Agent, None) => {
                let body =
                    RequestBody::WorkerInteractionRequest(payload::WorkerInteractionRequest {
                        interaction_kind: InteractionKind::Agent,
                        request: json!({"contract": "answer"}),
                        deadline_ms: None,
                    });
                return ask(self, body, Sent::Step, "interaction_request".into());
            }
            (NodeKind::Action, None) => {
                let body = RequestBody::WorkerEffectReserve(payload::WorkerEffectReserve {
                    effect_key: node.to_owned(),
                    fingerprint: "fp".into(),
                    retry_contract: node_spec.retry_contract().unwrap_or(RetryContract::Never),
                });
                let sent = Sent::Reserve {
                    node: node.to_owned(),
                    attempt: attempt.to_owned(),
                };
                return ask(self, body, sent, "effect_reserve".into());
            }
            (NodeKind::Compute, None) if node == "big" => {
                return self.upload(child, node.to_owned(), attempt.to_owned(), 0);
            }
            _ => AttemptOutcome::Succeeded {
                output: json!({"node": node}),
            },
        };
        let body = match self.graph.route(node, &Outcome::from(&outcome)) {
            Ok(Route::Next(next)) => RequestBody::WorkerTransition(payload::WorkerTransition {
                outcome,
                next_node: next,
                earlier: Vec::new(),
                next_timeout_ms: None,
            }),
            Ok(Route::Complete) => {
                let result = match &outcome {
                    AttemptOutcome::Succeeded { output } => output.clone(),
                    _ => Value::Null,
                };
                RequestBody::WorkerComplete(payload::WorkerComplete {
                    outcome,
                    result,
                    result_is_output: false,
                    earlier: Vec::new(),
                    presentation: None,
                })
            }
            other => self.fail(&format!("the twin's route from {node}: {other:?}")),
        };
        let what = body.kind_str().to_owned();
        ask(self, body, Sent::Step, format!("{what} from"));
    }

    /// The child's process ends; the supervisor reports it.
    fn exit(&mut self, child: usize, reason: &str, signal: Option<i32>) {
        if !self.children[child].started_reported {
            self.report_started(child);
        }
        let c = &mut self.children[child];
        c.exited = true;
        c.phase = Phase::Leaving;
        let report = ChildReport::Exited {
            run_id: c.run_id.clone(),
            generation: c.generation,
            child_epoch: c.child_epoch,
            launch: c.launch,
            exit: ChildExitRecord {
                reason: reason.into(),
                signal,
                ..Default::default()
            },
            host_ran_out_of: None,
        };
        let what = format!("supervisor: {} g{} {reason}", c.run_id, c.generation);
        self.note(what);
        self.outgoing.push(StoreMsg::Child(report));
    }

    fn fault_step(&mut self) {
        match self.rng.below(8) {
            6 => {
                // A bridge crashes (its step fails unless a submission of it is being judged).
                let live: Vec<usize> = (0..self.bridges.len())
                    .filter(|&b| self.bridge_live(b))
                    .collect();
                if !live.is_empty() {
                    let bridge = live[self.rng.below(live.len())];
                    self.exit_bridge(bridge, None, Some(9), "killed by signal 9");
                }
            }
            7 => {
                // The host is killed right after a prune commits, before the supervisor
                // removed the pruned runs' log directories: the next host's first prune
                // sweeps them.
                if self
                    .in_flight
                    .iter()
                    .any(|(_, w, _)| matches!(w, Waiting::Prune(_)))
                {
                    return;
                }
                let keep = Some(self.rng.below(3) as u64);
                self.send_prune_request(payload::RunPrune {
                    older_than_ms: None,
                    statuses: None,
                    keep,
                    dry_run: None,
                    limit: None,
                    cursor: None,
                });
                self.crash(true);
            }
            0 => {
                let live: Vec<usize> = (0..self.children.len()).filter(|&c| self.live(c)).collect();
                if !live.is_empty() {
                    let child = live[self.rng.below(live.len())];
                    let run_id = self.children[child].run_id.clone();
                    self.fault(&run_id);
                    self.exit(child, "killed by signal 9", Some(9));
                }
            }
            1 => {
                // A message of a child that no longer speaks for its run.
                let dead: Vec<usize> = (0..self.children.len())
                    .filter(|&c| self.children[c].gone)
                    .collect();
                if !dead.is_empty() {
                    let child = dead[self.rng.below(dead.len())];
                    // On the connection its hello bound, or a new one that must say hello.
                    let body = if self.children[child].greeted {
                        RequestBody::WorkerProgress(payload::WorkerProgress {
                            message: "still here".into(),
                            data: Value::Null,
                        })
                    } else {
                        RequestBody::WorkerHello(payload::WorkerHello {
                            child_token: self.children[child].token.clone(),
                            pid: 1,
                            definition: Some(workflow()),
                            mounted_sources: Some(json!({})),
                            start_node: true,
                        })
                    };
                    let request = self.worker_request(child, body);
                    self.note(format!(
                        "stale child {} g{}: {}",
                        self.children[child].run_id,
                        self.children[child].generation,
                        request.body.kind_str()
                    ));
                    self.send(request, None, Waiting::Stale);
                }
            }
            2 => {
                self.note("fault: the next commit fails".into());
                self.fail_next_commit.store(true, Ordering::SeqCst);
            }
            3 => {
                let jump = [5_000, 11_000, 31_000, 61_000][self.rng.below(4)];
                // A jump past the lease is the host stalling: its claims lapse and their runs
                // are requeued without a loss. A deadline it passes stops a child (counted as
                // a fault when the stop is ordered).
                self.note(format!("clock: +{jump} ms"));
                self.clock.advance(jump);
            }
            4 => self.crash(false),
            _ => self.crash(true),
        }
    }

    /// The host dies. With `mid_turn`, the queued messages are handled and committed first,
    /// and their replies never leave (committed, never acknowledged).
    fn crash(&mut self, mid_turn: bool) {
        if mid_turn {
            self.note("crash after a turn, before its replies left".into());
            self.run_turn(false);
        } else {
            self.note("crash".into());
        }
        // A restart is not a lost child: the runs that were running are recovered by the next
        // host, and none of them may go to review for it (only a real loss may send one).
        self.outgoing.clear();
        for c in &mut self.children {
            c.gone = true;
        }
        // Its bridges lose their connection and exit (`BRIDGE_EXIT.hostGone`).
        for b in &mut self.bridges {
            b.exited = true;
        }
        self.prune_expected.clear();
        self.host = None;
        self.store = None;
        // Every reply not delivered is lost: the clients send their commands again.
        let lost = std::mem::take(&mut self.in_flight);
        let mut cancels = Vec::new();
        for (_, waiting, _) in lost {
            match waiting {
                Waiting::Start(index) => self.starts[index].in_flight = false,
                Waiting::Cancel(run_id, id) => cancels.push((run_id, id)),
                _ => {}
            }
        }
        // Its clients' connections died with it: nobody watches a session until one subscribes
        // again.
        self.watchers.clear();
        // A commit failure armed for the dead host's next commit dies with it.
        self.fail_next_commit.store(false, Ordering::SeqCst);
        // Time passes while no host is up: no step's time may run then.
        let down = [0, 5_000, 40_000][self.rng.below(3)];
        if down > 0 {
            self.note(format!("clock: +{down} ms while no host runs"));
            self.clock.advance(down);
            self.downtime += down;
        }
        self.boot();
        let unanswered: Vec<usize> = (0..self.starts.len())
            .filter(|&i| self.starts[i].run_id.is_none() && !self.starts[i].in_flight)
            .collect();
        for index in unanswered {
            self.send_start(index);
        }
        for (run_id, id) in cancels {
            self.note(format!("client: cancel {run_id} again ({id})"));
            let body = RequestBody::RunCancel(payload::RunCancel {
                reason: Some("sim".into()),
            });
            let request = Request::new(id.clone(), body).with_run_id(&run_id);
            self.send(request, None, Waiting::Cancel(run_id, id));
        }
    }

    /// One turn of the store thread with what is queued; then the replies (unless `deliver`
    /// is false) and the supervisor's commands.
    fn run_turn(&mut self, deliver: bool) {
        let msgs = std::mem::take(&mut self.outgoing);
        let before = self.before_a_prune(&msgs);
        // The ends reported in this turn are handled by it.
        for c in &mut self.children {
            c.gone |= c.exited;
        }
        self.turn_with(before.as_ref(), msgs, deliver);
    }

    /// The turn itself (`run_turn`), with what `before_a_prune` saw.
    fn turn_with(&mut self, before: Option<&BeforePrune>, msgs: Vec<StoreMsg>, deliver: bool) {
        let cancels: BTreeSet<String> = msgs
            .iter()
            .filter_map(|m| match m {
                StoreMsg::Request(job) if matches!(job.request.body, RequestBody::RunCancel(_)) => {
                    job.request.run_id.clone()
                }
                _ => None,
            })
            .collect();
        let host = self.host.as_mut().expect("a host");
        let store = self.store.as_mut().expect("a store");
        let deadline = next_deadline_at(store, &host.state, store.now_ms());
        turn(
            store,
            &mut host.state,
            &mut host.outbox,
            msgs,
            deadline,
            &FaultPlan::default(),
            &mut host.supervisor_tx,
        );
        while host.events.try_recv().is_ok() {}
        if let Some(before) = before {
            self.after_a_prune(before, &cancels);
        }
        if !deliver {
            return;
        }
        let host = self.host.as_mut().expect("a host");
        let commits = self.store.as_ref().expect("a store").commits();
        host.outbox.flush(commits, true);
        let in_flight = std::mem::take(&mut self.in_flight);
        for (mut rx, waiting, what) in in_flight {
            match rx.try_recv() {
                Ok(answer) => self.answered(waiting, &what, answer),
                Err(oneshot::error::TryRecvError::Empty) => {
                    self.in_flight.push((rx, waiting, what))
                }
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.fail(&format!("{what}: the reply was dropped by a live host"))
                }
            }
        }
        let mut commands = Vec::new();
        let host = self.host.as_mut().expect("a host");
        while let Ok(cmd) = host.supervisor.try_recv() {
            commands.push(cmd);
        }
        for cmd in commands {
            match cmd {
                SupervisorCmd::Launch {
                    run_id,
                    generation,
                    child_epoch,
                    launch,
                    spec,
                    ..
                } => {
                    let envelope: Value =
                        serde_json::from_slice(&spec.stdin_payload).expect("an envelope");
                    let token = envelope["child_token"].as_str().unwrap_or("").to_owned();
                    self.history
                        .push(format!("supervisor: launch {run_id} g{generation}"));
                    // Its output goes to `logs/<run_id>/<child_epoch>.log`.
                    std::fs::create_dir_all(self.logs.join(&run_id)).expect("a log directory");
                    self.children.push(SimChild {
                        run_id,
                        generation,
                        child_epoch,
                        launch,
                        token,
                        host_life: self.host_life,
                        phase: Phase::Launched,
                        started_reported: false,
                        stop_requested: false,
                        greeted: false,
                        exited: false,
                        gone: false,
                    });
                }
                SupervisorCmd::RemoveLogs { dirs } => {
                    if !dirs.is_empty() {
                        self.history.push(format!(
                            "supervisor: remove the logs of {} runs",
                            dirs.len()
                        ));
                    }
                    for dir in dirs {
                        if !dir.starts_with(&self.logs) {
                            self.fail(&format!(
                                "asked to remove {}, not a run's logs",
                                dir.display()
                            ));
                        }
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                }
                SupervisorCmd::Stop {
                    run_id, generation, ..
                } => {
                    self.history
                        .push(format!("supervisor: stop {run_id} g{generation}"));
                    let mut stopped = false;
                    for c in &mut self.children {
                        if c.run_id == run_id
                            && c.generation == generation
                            && c.host_life == self.host_life
                        {
                            stopped |= !c.exited && c.phase != Phase::Leaving;
                            c.stop_requested = true;
                        }
                    }
                    if stopped {
                        self.fault(&run_id);
                    }
                }
                // Its hosts have no channel settings: no adapters.
                SupervisorCmd::LaunchChannel { .. } | SupervisorCmd::StopChannel { .. } => {}
                // Nor pass settings: no controllers' passes.
                SupervisorCmd::LaunchPass { .. } | SupervisorCmd::StopPass { .. } => {}
                SupervisorCmd::LaunchBridge { run_id, launch, .. } => {
                    if self.bridge_mode != BridgeMode::Serving {
                        self.fail(&format!(
                            "a bridge for {run_id} launched with {:?}",
                            self.bridge_mode
                        ));
                    }
                    if let Some(b) = self.bridges.iter().position(|b| {
                        b.run_id == run_id && b.host_life == self.host_life && !b.exited
                    }) {
                        self.fail(&format!(
                            "a second bridge for {run_id} while #{} runs",
                            self.bridges[b].launch
                        ));
                    }
                    self.history
                        .push(format!("supervisor: launch bridge {run_id} #{launch}"));
                    std::fs::create_dir_all(self.logs.join(&run_id)).expect("a log directory");
                    self.bridges.push(SimBridge {
                        run_id,
                        launch,
                        host_life: self.host_life,
                        hello: false,
                        stop_requested: false,
                        exited: false,
                        submitting: false,
                    });
                }
                SupervisorCmd::StopBridge { launch, .. } => {
                    self.history
                        .push(format!("supervisor: stop bridge #{launch}"));
                    for b in &mut self.bridges {
                        if b.launch == launch && b.host_life == self.host_life {
                            b.stop_requested = true;
                        }
                    }
                }
            }
        }
    }

    /// Before a turn that may prune (a `run.prune` is queued, or the retention pass is due):
    /// the runs as the store holds them, every finished one checked against its twin now (it
    /// may be gone at the end), and what each queued `run.prune` must answer.
    fn before_a_prune(&mut self, msgs: &[StoreMsg]) -> Option<BeforePrune> {
        let prunes: Vec<(String, payload::RunPrune)> = msgs
            .iter()
            .filter_map(|m| match m {
                StoreMsg::Request(job) => match &job.request.body {
                    RequestBody::RunPrune(p) => Some((job.request.request_id.clone(), p.clone())),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let now = piw_host::clock::Clock::now_ms(&self.clock);
        let host = self.host.as_ref()?;
        let retention = host.state.retention.is_some();
        let retention_due = retention && host.state.retention_due_at.is_some_and(|at| at <= now);
        if prunes.is_empty() && !retention_due {
            return None;
        }
        let children: BTreeSet<String> = host.state.children.keys().cloned().collect();
        let runs: Vec<ModelRun> = {
            let reader = self.reader();
            let mut stmt = reader
                .prepare_cached(
                    "SELECT r.run_id, r.status, r.created_at, r.finished_at, c.owner_kind
                     FROM runs r LEFT JOIN claims c USING (run_id) ORDER BY r.run_id",
                )
                .expect("a query");
            let rows = stmt
                .query_map([], |r| {
                    Ok(ModelRun {
                        run_id: r.get(0)?,
                        status: RunStatus::parse(&r.get::<_, String>(1)?).expect("a run status"),
                        created_at: r.get(2)?,
                        finished_at: r.get(3)?,
                        claimed: r.get::<_, Option<String>>(4)?.is_some(),
                    })
                })
                .expect("runs");
            rows.collect::<Result<_, _>>().expect("runs")
        };
        for run in &runs {
            if run.status.is_terminal() && !self.ended.contains(&run.run_id) {
                let record = self.store().run(&run.run_id).expect("a run");
                if !self.ended_as_its_twin(&record, true) {
                    self.fail(&format!(
                        "{} ended {} (result {:?}, error {:?}) where its twin completed",
                        record.run_id, record.status, record.result, record.error
                    ));
                }
                self.ended.insert(run.run_id.clone());
            }
        }
        // Client prunes run first in a turn (they are reads), in order, on what the last turn
        // left; a later one sees what an earlier one removed.
        let mut model = runs.clone();
        for (id, prune) in prunes {
            let expected = prune_model(&model, &prune, now, &children);
            if let PruneExpected::Removed { run_ids, .. } = &expected {
                model.retain(|r| !run_ids.contains(&r.run_id));
            }
            self.prune_expected.insert(id, expected);
        }
        Some(BeforePrune { runs, retention })
    }

    /// After a turn that may have pruned: each run gone was finished before it (or finished in
    /// it by a cancel, for the retention pass, which runs after the turn's requests), had no
    /// child still exiting, and left nothing behind.
    fn after_a_prune(&mut self, before: &BeforePrune, cancels: &BTreeSet<String>) {
        let left: BTreeSet<String> = {
            let reader = self.reader();
            let mut stmt = reader
                .prepare_cached("SELECT run_id FROM runs")
                .expect("a query");
            let rows = stmt.query_map([], |r| r.get(0)).expect("runs");
            rows.collect::<Result<_, _>>().expect("runs")
        };
        for run in &before.runs {
            if left.contains(&run.run_id) {
                continue;
            }
            let run_id = &run.run_id;
            self.note(format!("{run_id} ({}) was pruned", run.status));
            let finished_by_a_cancel = before.retention && cancels.contains(run_id);
            if !run.status.is_terminal() && !finished_by_a_cancel {
                self.fail(&format!(
                    "a prune removed {run_id}, which was {}",
                    run.status
                ));
            }
            let still_exiting = self
                .host
                .as_ref()
                .is_some_and(|h| h.state.children.contains_key(run_id));
            if still_exiting {
                self.fail(&format!(
                    "a prune removed {run_id} while its child was still exiting"
                ));
            }
            // Ended by this turn's cancel before the retention pass took it.
            self.ended.insert(run_id.clone());
            self.pruned.insert(run_id.clone());
            self.host_pruned = true;
        }
    }

    /// A pruned run left no row behind: none of a table with a `run_id`, no submission of its
    /// steps, not its large value (no other run uploads the same bytes).
    fn check_pruned_left_nothing(&mut self) {
        let fresh: Vec<String> = self
            .pruned
            .difference(&self.pruned_checked)
            .cloned()
            .collect();
        if fresh.is_empty() {
            return;
        }
        let tables: Vec<String> = {
            let reader = self.reader();
            let mut stmt = reader
                .prepare_cached(
                    "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c
                     WHERE m.type = 'table' AND c.name = 'run_id' ORDER BY m.name",
                )
                .expect("a query");
            let rows = stmt.query_map([], |r| r.get(0)).expect("tables");
            rows.collect::<Result<_, _>>().expect("tables")
        };
        if tables.len() < 10 {
            self.fail(&format!("only {tables:?} have a run_id"));
        }
        for run_id in fresh {
            for table in &tables {
                let n: i64 = self
                    .reader()
                    .query_row(
                        &format!("SELECT count(*) FROM {table} WHERE run_id = ?1"),
                        [&run_id],
                        |r| r.get(0),
                    )
                    .expect("a count");
                if n > 0 {
                    self.fail(&format!("pruned {run_id} left {n} rows in {table}"));
                }
            }
            let sha =
                piw_host::protocol::value::ValueRef::for_canonical(&big_value(&run_id)).sha256;
            let chunks: i64 = self
                .reader()
                .query_row(
                    "SELECT (SELECT count(*) FROM value_blobs WHERE sha256 = ?1)
                          + (SELECT count(*) FROM value_chunks WHERE sha256 = ?1)",
                    [&sha],
                    |r| r.get(0),
                )
                .expect("a count");
            if chunks > 0 {
                self.fail(&format!(
                    "pruned {run_id} left its large value ({chunks} rows)"
                ));
            }
            self.pruned_checked.insert(run_id);
        }
        let orphans: i64 = self
            .reader()
            .query_row(
                "SELECT count(*) FROM submissions s
                 WHERE NOT EXISTS (SELECT 1 FROM interactions i
                                   WHERE i.interaction_id = s.interaction_id)",
                [],
                |r| r.get(0),
            )
            .expect("a count");
        if orphans > 0 {
            self.fail(&format!("{orphans} submissions of steps no run has"));
        }
    }

    /// Once this host has pruned, every run's log directory is of a run the store holds (or
    /// of a child still running): its first prune swept those an earlier life's crash left
    /// (`Effect::SweepRunLogs`), each prune has the supervisor remove its runs'
    /// (`RemoveLogs`), and so does the exit of a child whose run was never stored (its launch
    /// and its run's start did not commit).
    fn check_logs(&mut self) {
        if !self.host_pruned {
            return;
        }
        let mut dirs: Vec<String> = std::fs::read_dir(&self.logs)
            .expect("the logs directory")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        dirs.sort();
        for run_id in dirs {
            // A child whose launch did not commit writes its log until it exits, also when
            // its run was never stored (its start did not commit either).
            let writing = self
                .children
                .iter()
                .any(|c| c.run_id == run_id && c.host_life == self.host_life && !c.gone);
            if !writing && matches!(self.store().run_view(&run_id), Ok(None)) {
                self.fail(&format!(
                    "the logs of {run_id} stay after this host pruned, and no such run is stored"
                ));
            }
        }
    }

    fn answered(&mut self, waiting: Waiting, what: &str, answer: Result<Receipt, Rejection>) {
        let outcome = match &answer {
            Ok(r) => format!("ok{}", if r.replayed { " (replayed)" } else { "" }),
            Err(e) => format!("rejected {}", e.code),
        };
        self.note(format!("  {what}: {outcome}"));
        match waiting {
            Waiting::Start(index) => {
                self.starts[index].in_flight = false;
                match answer {
                    Ok(receipt) => {
                        let run_id = receipt.body["run_id"].as_str().unwrap_or("").to_owned();
                        match &self.starts[index].run_id {
                            Some(earlier) if *earlier != run_id => self.fail(&format!(
                                "start #{index} applied twice: {earlier} and {run_id}"
                            )),
                            _ => {
                                if start_is_detached(index) {
                                    self.detached.insert(run_id.clone());
                                }
                                self.starts[index].run_id = Some(run_id);
                            }
                        }
                    }
                    // A failed commit: the client tries again, same request id.
                    Err(_) => self.send_start(index),
                }
            }
            Waiting::Cancel(run_id, _) => {
                if answer.is_ok() {
                    self.cancelled.insert(run_id);
                }
            }
            Waiting::Other => {}
            Waiting::Stale => {
                if answer.is_ok() {
                    self.fail(&format!("{what}: a stale generation was acknowledged"));
                }
            }
            Waiting::Child(child) => self.child_answered(child, answer),
            Waiting::BridgeSubmit {
                bridge,
                interaction,
            } => {
                self.bridges[bridge].submitting = false;
                if let Ok(receipt) = answer {
                    let submission = receipt.body["submission_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.submissions
                        .entry(interaction)
                        .or_default()
                        .insert(submission);
                }
            }
            Waiting::Detach { run_id, has_model } => match answer {
                Ok(receipt) => {
                    // Only a host with bridges detaches, and only a run that names a model
                    // (or one detached already, left as it is).
                    let changed = receipt.body["changed"] == json!(true);
                    if self.bridge_mode == BridgeMode::Off || (changed && !has_model) {
                        self.fail(&format!(
                            "{run_id} was detached ({}, model named: {has_model}) by a host with {:?}",
                            receipt.body, self.bridge_mode
                        ));
                    }
                    self.detached.insert(run_id);
                }
                Err(rejection) => {
                    let mode: Option<String> = self
                        .reader()
                        .query_row(
                            "SELECT execution_mode FROM runs WHERE run_id = ?1",
                            [&run_id],
                            |r| r.get(0),
                        )
                        .ok();
                    // A refused detach leaves the run as it was.
                    if mode.as_deref() == Some("detached") && !self.detached.contains(&run_id) {
                        self.fail(&format!(
                            "{run_id}'s detach was refused ({}) and it is detached",
                            rejection.code
                        ));
                    }
                }
            },
            Waiting::Prune(id) => {
                let expected = self.prune_expected.remove(&id);
                self.prune_answered(&id, expected, answer);
            }
            Waiting::Submit { interaction, late } => {
                let Ok(receipt) = answer else { return };
                let submission = receipt.body["submission_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let repeated = receipt.body["repeated"] == json!(true);
                if late && !repeated {
                    self.fail(&format!(
                        "{interaction} was closed and took a late submission {submission}"
                    ));
                }
                self.submissions
                    .entry(interaction)
                    .or_default()
                    .insert(submission);
            }
        }
    }

    /// A `run.prune` answers what the model says, and what it says it removed is gone.
    fn prune_answered(
        &mut self,
        id: &str,
        expected: Option<PruneExpected>,
        answer: Result<Receipt, Rejection>,
    ) {
        let Some(expected) = expected else {
            self.fail(&format!("{id}: a prune answered without a model"));
        };
        let receipt = match (answer, &expected) {
            (Err(r), PruneExpected::Refused) if r.code.to_string() == "malformed" => return,
            // A failed commit (an injected disk fault) removes nothing.
            (Err(r), _) if r.code == piw_host::protocol::RejectionCode::Internal => return,
            (Err(r), _) => self.fail(&format!("{id}: rejected {} where {expected:?}", r.code)),
            (Ok(receipt), PruneExpected::Refused) => self.fail(&format!(
                "{id}: a prune of an unfinished status answered {}",
                receipt.body
            )),
            (Ok(receipt), _) => receipt,
        };
        let ids = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let body = receipt.body;
        match expected {
            PruneExpected::Listed { count, run_ids } => {
                if body["count"].as_u64() != Some(count) || ids(&body["run_ids"]) != run_ids {
                    self.fail(&format!(
                        "{id}: a dry prune listed {body}, the model {count} {run_ids:?}"
                    ));
                }
            }
            PruneExpected::Removed { run_ids, more } => {
                let removed = ids(&body["removed"]);
                if removed != run_ids || (more && body["more"] != json!(true)) {
                    self.fail(&format!(
                        "{id}: a prune removed {body}, the model {run_ids:?} (more: {more})"
                    ));
                }
                if let Some(kept) = removed.iter().find(|r| !self.pruned.contains(*r)) {
                    self.fail(&format!("{id}: said it removed {kept}, which is stored"));
                }
                self.host_pruned = true;
                self.last_prune_more = body["more"].as_bool();
            }
            PruneExpected::Refused => {}
        }
    }

    fn child_answered(&mut self, child: usize, answer: Result<Receipt, Rejection>) {
        // A child killed while its message was on its way: the answer finds nobody.
        if !self.live(child) {
            return;
        }
        let phase = self.children[child].phase.clone();
        let run_id = self.children[child].run_id.clone();
        let receipt = match answer {
            Ok(receipt) => receipt,
            Err(rejection) => {
                // A transition naming a value not stored whole is refused; the child goes on
                // uploading it.
                if let Phase::Sent(Sent::Premature {
                    node,
                    attempt,
                    offset,
                }) = phase
                {
                    if rejection.code != piw_host::protocol::RejectionCode::Internal {
                        self.children[child].phase = Phase::Uploading {
                            node,
                            attempt,
                            offset,
                        };
                        return;
                    }
                }
                // A refused child gives up, as the runtimes do. Refused because a commit failed
                // (an injected disk fault), its exit counts as a loss: three in a row send the
                // run to review, where its twin completed.
                if rejection.code == piw_host::protocol::RejectionCode::Internal {
                    self.fault(&run_id);
                }
                self.children[child].phase = Phase::Leaving;
                return;
            }
        };
        let body = receipt.body;
        if let (Some(timer), Some(wake_at)) = (body["timer_id"].as_str(), body["wake_at"].as_i64())
        {
            // Its wake time is fixed once, from the time the wait was asked.
            let now = piw_host::clock::Clock::now_ms(&self.clock);
            if wake_at != now + WAIT_MS {
                self.fail(&format!(
                    "timer {timer} wakes at {wake_at}, asked at {now} for {WAIT_MS} ms"
                ));
            }
            self.timers.insert(timer.to_owned(), wake_at);
        }
        let done = |node: &str| AttemptOutcome::Succeeded {
            output: json!({"node": node}),
        };
        let next = match phase {
            Phase::Greeting if body.get("stop").is_none() => {
                self.children[child].greeted = true;
                let resume = &body["resume"];
                let node = resume["node_id"].as_str().map(str::to_owned);
                let attempt = resume["attempt_id"].as_str().map(str::to_owned);
                let submission = &body["submission"];
                match (node, attempt) {
                    (Some(node), Some(attempt)) => match resume["resume"].as_str() {
                        Some("validate") => Phase::Judging {
                            node,
                            attempt,
                            submission: submission["submission_id"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                            payload: submission["payload"].clone(),
                        },
                        other => {
                            let carried = match other {
                                Some("timer_fired") => Some(AttemptOutcome::Succeeded {
                                    output: body["timer"]["output"].clone(),
                                }),
                                Some("accepted") => Some(AttemptOutcome::Succeeded {
                                    output: submission["payload"].clone(),
                                }),
                                Some("interaction_expired") => Some(AttemptOutcome::TimedOut),
                                _ => body
                                    .get("answer")
                                    .filter(|a| !a.is_null())
                                    .map(|a| AttemptOutcome::Succeeded { output: a.clone() }),
                            };
                            Phase::Running {
                                node,
                                attempt,
                                carried,
                            }
                        }
                    },
                    _ => Phase::Leaving,
                }
            }
            Phase::Sent(Sent::Step) => {
                match (body["attempt_id"].as_str(), body["parked"].as_bool()) {
                    (Some(attempt), Some(false)) if body.get("refused").is_none() => {
                        let node = self
                            .store()
                            .run(&run_id)
                            .ok()
                            .and_then(|r| r.current_node)
                            .unwrap_or_default();
                        Phase::Running {
                            node,
                            attempt: attempt.to_owned(),
                            carried: None,
                        }
                    }
                    _ => Phase::Leaving,
                }
            }
            Phase::Sent(Sent::Verdict {
                node,
                attempt,
                payload,
                accepted: true,
            }) => Phase::Running {
                node,
                attempt,
                carried: Some(AttemptOutcome::Succeeded { output: payload }),
            },
            Phase::Sent(Sent::Reserve { node, attempt }) => {
                let effect = body["effect_id"].as_str().unwrap_or_default().to_owned();
                match body["reservation"].as_str() {
                    Some("reserved") => Phase::Reserved {
                        node,
                        attempt,
                        effect,
                    },
                    Some("already_applied") => Phase::Running {
                        carried: Some(done(&node)),
                        node,
                        attempt,
                    },
                    other => self.fail(&format!("effect {node} of {run_id} reserved as {other:?}")),
                }
            }
            Phase::Sent(Sent::Applying {
                node,
                attempt,
                effect,
            }) => {
                // It happens in the world now. An idempotent effect's system takes a repeat
                // as the same one; a `never` effect happens again if it is applied again.
                let idempotent = node == "send";
                let count = self
                    .world
                    .entry((run_id.clone(), node.clone()))
                    .or_insert(0);
                *count = if idempotent { 1 } else { *count + 1 };
                let count = *count;
                if count > 1 {
                    self.fail(&format!(
                        "effect {node} of {run_id} (retry never) was applied {count} times"
                    ));
                }
                let generation = self.children[child].generation;
                Phase::Applied {
                    node,
                    attempt,
                    effect,
                    receipt: json!({"by_generation": generation}),
                }
            }
            Phase::Sent(Sent::Settle { node, attempt }) => Phase::Running {
                carried: Some(done(&node)),
                node,
                attempt,
            },
            Phase::Sent(Sent::Put { node, attempt, to }) => {
                if body["complete"] == json!(true) {
                    let text = big_value(&run_id);
                    let reference = piw_host::protocol::value::ValueRef::for_canonical(&text);
                    Phase::Running {
                        node,
                        attempt,
                        carried: Some(AttemptOutcome::Succeeded {
                            output: reference.to_json(),
                        }),
                    }
                } else {
                    Phase::Uploading {
                        node,
                        attempt,
                        offset: body["received"].as_u64().unwrap_or(to),
                    }
                }
            }
            Phase::Sent(Sent::Premature { .. }) => self.fail(&format!(
                "{run_id}: a transition named a value stored in part"
            )),
            _ => Phase::Leaving,
        };
        self.children[child].phase = next;
    }

    /// Every timer fires once, never before its wake time: each run's new events are read, and
    /// a `timer_fired` is checked against the wake time its acknowledged wait was given (or,
    /// when that reply was lost, the one the event carries).
    fn check_timers(&mut self, runs: &[String]) {
        for run_id in runs {
            let after = self.events_read.get(run_id).copied().unwrap_or(0);
            let events = self.store().events(run_id, after).expect("events");
            for event in events {
                self.events_read.insert(run_id.clone(), event.seq);
                if event.kind != "timer_fired" {
                    continue;
                }
                let timer = event.data["timer"].as_str().unwrap_or("").to_owned();
                let wake_at = self
                    .timers
                    .get(&timer)
                    .copied()
                    .or_else(|| event.data["wake_at"].as_i64())
                    .unwrap_or(i64::MAX);
                if event.at < wake_at {
                    self.fail(&format!(
                        "timer {timer} of {run_id} fired at {}, before its wake time {wake_at}",
                        event.at
                    ));
                }
                if !self.fired.insert(timer.clone()) {
                    self.fail(&format!("timer {timer} of {run_id} fired twice"));
                }
            }
        }
    }

    /// An interactive step's time runs only while it is presented: it is held exactly while
    /// its session is watched (or its detached run's bridge said hello), once the host's
    /// presence is in the store (no hold waits for a retry); the time it used never shrinks
    /// and grows only by the time a host ran while it was held (none while no host runs);
    /// it expires only once it was held for its whole budget. No step took two accepted
    /// submissions.
    fn check_steps(&mut self) {
        type Row = (
            String,
            String,
            Option<String>,
            Option<i64>,
            i64,
            Option<i64>,
            String,
            String,
        );
        let rows: Vec<Row> = {
            let reader = self.reader();
            let mut stmt = reader
                .prepare_cached(
                    "SELECT i.interaction_id, i.status, i.origin_session, i.held_since,
                            i.used_ms, i.budget_ms, r.execution_mode, i.run_id
                     FROM interactions i JOIN runs r ON r.run_id = i.run_id
                     ORDER BY i.interaction_id",
                )
                .expect("a query");
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                })
                .expect("steps");
            rows.collect::<Result<_, _>>().expect("steps")
        };
        let now = piw_host::clock::Clock::now_ms(&self.clock);
        let synced = self
            .host
            .as_ref()
            .is_some_and(|h| piw_host::engine::presence::next_deadline(&h.state).is_none());
        for (id, status, session, held_since, used, budget, mode, run_id) in rows {
            let open = status == "pending" || status == "validating";
            let before = self.steps_seen.get(&id).copied();
            if !open {
                if let (Some(seen), "expired") = (before, status.as_str()) {
                    // Expired since the last check: only with its budget used up, counting the
                    // time since while it was held.
                    let most = seen.most_by(now, self.downtime);
                    if seen.budget.is_some_and(|b| most < b) {
                        self.fail(&format!(
                            "step {id} expired having been held {most} ms of its {:?}",
                            seen.budget
                        ));
                    }
                }
                self.steps_seen.remove(&id);
                continue;
            }
            let held = held_since.is_some();
            let used_now = used + held_since.map_or(0, |t| (now - t).max(0));
            let present = if mode == "detached" {
                // Presented by its run's bridge from its hello until it exits.
                self.bridges.iter().any(|b| {
                    b.run_id == run_id && b.host_life == self.host_life && b.hello && !b.exited
                })
            } else {
                session
                    .as_ref()
                    .is_none_or(|s| self.watchers.get(s).is_some_and(|c| !c.is_empty()))
            };
            if synced && held != present {
                self.fail(&format!(
                    "step {id} ({mode}, {session:?}) is {} while its holder is {}",
                    if held { "held" } else { "not held" },
                    if present { "there" } else { "away" }
                ));
            }
            if let Some(seen) = before {
                // What it used is added up at each release and never taken back (a crash
                // loses at most the time since its host's last commit, as if not presented).
                if used < seen.stored {
                    self.fail(&format!(
                        "step {id} had used {} ms, then {used} ms: its time was taken back",
                        seen.stored
                    ));
                }
                let most = seen.most_by(now, self.downtime);
                if used_now > most {
                    self.fail(&format!(
                        "step {id} used {used_now} ms, at most {most} could have passed held"
                    ));
                }
            }
            self.steps_seen.insert(
                id,
                StepSeen {
                    stored: used,
                    used: used_now,
                    held,
                    at: now,
                    downtime: self.downtime,
                    budget,
                },
            );
        }
        let twice: Option<String> = self
            .reader()
            .query_row(
                "SELECT interaction_id FROM submissions WHERE state = 'accepted'
                 GROUP BY interaction_id HAVING count(*) > 1 LIMIT 1",
                [],
                |r| r.get(0),
            )
            .ok();
        if let Some(id) = twice {
            self.fail(&format!("step {id} accepted two submissions"));
        }
    }

    /// One receipt per effect, for good; only an effect that may not be retried becomes
    /// uncertain; a run's large value reads back whole, with its hash.
    fn check_effects_and_values(&mut self, runs: &[String]) {
        for run_id in runs {
            let effects = self.store().effects(run_id).expect("effects");
            // A cancel marks whatever was applying uncertain, whatever its contract.
            let cancelled = self
                .store()
                .run(run_id)
                .is_ok_and(|r| r.status == RunStatus::Cancelled);
            for e in effects {
                if e.state == "uncertain" && e.retry_contract != "never" && !cancelled {
                    self.fail(&format!(
                        "effect {} of {run_id} (retry {}) is uncertain",
                        e.effect_key, e.retry_contract
                    ));
                }
                if let (Some(receipt), "applied") = (&e.receipt, e.state.as_str()) {
                    match self.receipts.get(&e.effect_id) {
                        Some(first) if first != receipt => self.fail(&format!(
                            "effect {} of {run_id} has a second receipt {receipt} after {first}",
                            e.effect_key
                        )),
                        _ => {
                            self.receipts.insert(e.effect_id.clone(), receipt.clone());
                        }
                    }
                }
            }
            if self.values_read.contains(run_id) {
                continue;
            }
            let output: Option<String> = self
                .reader()
                .query_row(
                    "SELECT output FROM attempts WHERE run_id = ?1 AND node_id = 'big'
                     AND status = 'succeeded' LIMIT 1",
                    [run_id],
                    |r| r.get(0),
                )
                .ok();
            let Some(output) = output else { continue };
            let text = big_value(run_id);
            let expected = piw_host::protocol::value::ValueRef::for_canonical(&text);
            let named: Value = serde_json::from_str(&output).expect("an output");
            if named["sha256"] != json!(expected.sha256) || named["$piw"] != json!("value") {
                self.fail(&format!(
                    "{run_id}'s big output names {named}, not its value"
                ));
            }
            let bytes = self
                .store()
                .read_value(run_id, &expected.sha256)
                .expect("the value reads back");
            if piw_host::ids::sha256_hex(&bytes) != expected.sha256 || bytes != text.as_bytes() {
                self.fail(&format!(
                    "{run_id}'s value reads back other than it was stored"
                ));
            }
            self.values_read.insert(run_id.clone());
        }
    }

    /// The invariants that hold after every step.
    fn check(&mut self) {
        let store = self.store();
        let mut findings = store.diagnose(store.now_ms()).expect("diagnose");
        // The part of a large value a lost child left (`value_partial`, which `repair`
        // removes) is no contradiction: no row names it, and the run's next child uploads the
        // value again.
        findings.retain(|f| f.code != "value_partial");
        if !findings.is_empty() {
            self.fail(&format!("diagnose found {findings:?}"));
        }
        self.check_steps();
        self.check_answers_kept();
        self.check_detached_steps_served();
        self.check_pruned_left_nothing();
        self.check_logs();
        let run_ids: Vec<String> = self
            .starts
            .iter()
            .filter_map(|s| s.run_id.clone())
            .filter(|r| !self.pruned.contains(r))
            .collect();
        self.check_timers(&run_ids);
        self.check_effects_and_values(&run_ids);
        let runs = self
            .store()
            .list_runs_where(None, false, &[], 10_000)
            .expect("runs");
        for run in &runs {
            let claim = self.store().claim_info(&run.run_id).expect("claim");
            if run.status.is_terminal() && claim.owner_id.is_some() {
                self.fail(&format!("{} is {} and claimed", run.run_id, run.status));
            }
            if self.cancelled.contains(&run.run_id) && run.status != RunStatus::Cancelled {
                self.fail(&format!(
                    "{} was cancelled (acknowledged) and is {}",
                    run.run_id, run.status
                ));
            }
        }
        // The store holds every acknowledged run a prune did not remove, none it removed, and
        // no more runs than were started.
        let stored: BTreeSet<&String> = runs.iter().map(|r| &r.run_id).collect();
        let acked: BTreeSet<&String> = self
            .starts
            .iter()
            .filter_map(|s| s.run_id.as_ref())
            .collect();
        if let Some(lost) = acked
            .iter()
            .find(|r| !stored.contains(*r) && !self.pruned.contains(**r))
        {
            self.fail(&format!("{lost} is gone, and no prune removed it"));
        }
        if let Some(back) = stored.iter().find(|r| self.pruned.contains(**r)) {
            self.fail(&format!("{back} was pruned and is stored again"));
        }
        if runs.len() + self.pruned.len() > self.starts.len() {
            self.fail(&format!(
                "{} runs and {} pruned for {} starts ({} acknowledged)",
                runs.len(),
                self.pruned.len(),
                self.starts.len(),
                acked.len()
            ));
        }
    }

    /// An answer a step took is never lost: a submission being judged belongs to a step being
    /// judged (a bridge's crash meanwhile must not close it), and an accepted one to a settled
    /// step. A cancelled run closes whatever it had open.
    fn check_answers_kept(&mut self) {
        let lost: Option<(String, String, String, String)> = self
            .reader()
            .query_row(
                "SELECT s.submission_id, s.state, i.interaction_id, i.status
                 FROM submissions s JOIN interactions i USING (interaction_id)
                 JOIN runs r ON r.run_id = i.run_id
                 WHERE r.status != 'cancelled'
                   AND ((s.state = 'validating' AND i.status != 'validating')
                     OR (s.state = 'accepted' AND i.status != 'settled'))
                 LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .ok();
        if let Some((submission, state, step, status)) = lost {
            self.fail(&format!(
                "submission {submission} is {state} while its step {step} is {status}"
            ));
        }
    }

    /// A detached run's open step is never silently unserved: the host reports (`run.status`'s
    /// `step_service`) a bridge that is alive, or one starting while no child slot is free
    /// for it (or while the failing of a lost bridge's step waits for its retry after a
    /// failed commit), or nobody with a reason; never a session.
    fn check_detached_steps_served(&mut self) {
        let Some(host) = self.host.as_ref() else {
            return;
        };
        let store = self.store.as_ref().expect("a store");
        let runs = store
            .list_runs_where(None, true, &[], 10_000)
            .expect("runs");
        let free = host
            .state
            .child_config
            .max_children
            .saturating_sub(host.state.live_children());
        let mut unserved = None;
        for run in runs.iter().filter(|r| r.execution_mode == "detached") {
            let steps = store.interactions(Some(&run.run_id), None).expect("steps");
            let Some(service) =
                piw_host::engine::bridges::step_service(store, &host.state, run, &steps)
            else {
                continue;
            };
            let bridge_alive = self
                .bridges
                .iter()
                .any(|b| b.run_id == run.run_id && b.host_life == self.host_life && !b.exited);
            let has_child = host.state.children.contains_key(&run.run_id);
            let wrong = match service.served_by.as_str() {
                "bridge" => !bridge_alive,
                // Waiting for a slot, or for the retry of a failing that did not commit.
                "bridge_starting" => {
                    (free > 0 || has_child) && host.state.bridges.retry_at.is_none()
                }
                "nobody" => service.why.is_none(),
                _ => true,
            };
            if wrong {
                unserved = Some(format!(
                    "{}'s open step {} is served by {} ({:?}) with {free} free slots, a bridge \
                     alive: {bridge_alive}",
                    run.run_id, service.interaction_id, service.served_by, service.why
                ));
                break;
            }
        }
        if let Some(why) = unserved {
            self.fail(&why);
        }
    }

    fn step(&mut self) {
        let actions = 1 + self.rng.below(4);
        for _ in 0..actions {
            match self.rng.below(20) {
                0..=5 => self.client_step(),
                6..=17 => self.child_step(),
                _ => self.fault_step(),
            }
        }
        if self.host.is_some() {
            self.run_turn(true);
        }
        self.check();
    }

    /// Faults off: everything goes on until every run has ended or waits for nothing the
    /// simulation can give.
    fn settle(&mut self) {
        // A host with no Pi fails every detached step it would need one for, for ever: the
        // settling host has Pi.
        self.settling = true;
        if self.bridge_mode != BridgeMode::Serving {
            self.note("the host restarts with Pi for its bridges".into());
            self.crash(false);
        }
        for round in 0..4_000 {
            // Resume what is paused, answer what waits, let every child go on.
            let mut runs = self
                .store()
                .list_runs_where(None, true, &[], 10_000)
                .expect("runs");
            runs.retain(|r| r.status != RunStatus::Review);
            let children_left = (0..self.children.len()).any(|c| self.live(c))
                || (0..self.bridges.len()).any(|b| self.bridge_live(b));
            if runs.is_empty() && !children_left && self.starts.iter().all(|s| s.run_id.is_some()) {
                return;
            }
            for run in &runs {
                if run.paused && round % 4 == 0 {
                    let id = self.request_id();
                    let request = Request::new(id, RequestBody::RunResume).with_run_id(&run.run_id);
                    self.send(request, None, Waiting::Other);
                }
            }
            if round % 4 == 1 {
                self.answer_a_decision();
            }
            if round % 4 == 2 {
                self.submit(false);
            }
            // Runs finish here most: prunes (and dry ones) meet many finished runs.
            if round % 8 == 3 {
                let dry = self.rng.chance(40);
                self.send_prune(dry);
            }
            for child in 0..self.children.len() {
                if self.live(child) {
                    self.child_step_of(child);
                }
            }
            for bridge in 0..self.bridges.len() {
                if self.bridge_live(bridge) {
                    self.bridge_step_of(bridge);
                }
            }
            let idle = self.outgoing.is_empty();
            self.run_turn(true);
            if idle {
                // Nothing happened: the next deadline (a heartbeat, a lingering child).
                let next = {
                    let host = self.host.as_ref().expect("a host");
                    let store = self.store.as_ref().expect("a store");
                    next_deadline_at(store, &host.state, store.now_ms())
                };
                let now = piw_host::clock::Clock::now_ms(&self.clock);
                let to = next.map_or(1_000, |at| (at - now).clamp(1, 60_000));
                self.clock.advance(to);
            }
            self.check();
        }
        let left: Vec<String> = self
            .store()
            .list_runs_where(None, true, &[], 10_000)
            .expect("runs")
            .into_iter()
            .map(|r| format!("{} {} at {:?}", r.run_id, r.status, r.current_node))
            .collect();
        self.fail(&format!("runs that never ended: {left:?}"));
    }

    /// After the settling: prunes every finished run, a few per `run.prune`, until none is
    /// left; the runs in review stay.
    fn prune_everything(&mut self) {
        // `older_than_ms: 0` takes the runs finished before now: the clock moves past the last.
        self.clock.advance(1);
        for _ in 0..100 {
            self.last_prune_more = None;
            self.send_prune_request(payload::RunPrune {
                older_than_ms: Some(0),
                statuses: None,
                keep: None,
                dry_run: None,
                limit: Some(5),
                cursor: None,
            });
            self.run_turn(true);
            self.check();
            if self.last_prune_more == Some(false) {
                break;
            }
        }
        let left: Vec<String> = self
            .store()
            .list_runs_where(None, false, &[], 10_000)
            .expect("runs")
            .into_iter()
            .filter(|r| r.status.is_terminal())
            .map(|r| format!("{} {}", r.run_id, r.status))
            .collect();
        if !left.is_empty() {
            self.fail(&format!("finished runs no prune removed: {left:?}"));
        }
    }

    /// Every run ends as its fault-free twin does, unless it was cancelled or a fault sent it
    /// to review.
    fn check_ends(&mut self) {
        let runs = self
            .store()
            .list_runs_where(None, false, &[], 10_000)
            .expect("runs");
        if runs.len() + self.pruned.len() != self.starts.len() {
            self.fail(&format!(
                "{} runs and {} pruned for {} starts",
                runs.len(),
                self.pruned.len(),
                self.starts.len()
            ));
        }
        for run in runs {
            if !self.ended_as_its_twin(&run, false) {
                self.fail(&format!(
                    "{} ended {} (result {:?}, error {:?}, review {:?}) where its twin completed",
                    run.run_id, run.status, run.result, run.error, run.review_reason
                ));
            }
        }
    }

    /// Whether `run` ended as its fault-free twin does, or was cancelled, or a fault sent it to
    /// review. `early`: checked before a prune may remove it, when the reply of its cancel may
    /// still be owed (a crash lost it; the cancel is sent again).
    fn ended_as_its_twin(&mut self, run: &piw_host::store::RunRecord, early: bool) -> bool {
        let effects = self.store().effects(&run.run_id).expect("effects");
        let uncertain = effects.iter().find(|e| e.state == "uncertain");
        let reason = run.review_reason.clone().unwrap_or_default();
        let ok = match run.status {
            RunStatus::Completed => {
                run.result == Some(twin_result())
                    && effects.len() == 2
                    && effects.iter().all(|e| e.state == "applied")
            }
            RunStatus::Cancelled => {
                self.cancelled.contains(&run.run_id)
                    || (early && self.cancel_sent.contains(&run.run_id))
            }
            // In review for an effect that may have happened and may not be applied again,
            // or for as many lost children as faults could have cost it.
            RunStatus::Review => match uncertain {
                Some(e) => e.retry_contract == "never" && reason.starts_with("uncertain effect"),
                None => reason
                    .strip_prefix("its child was lost ")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n <= self.faults.get(&run.run_id).copied().unwrap_or(0)),
            },
            _ => false,
        };
        // An effect that may have happened without a receipt stops its run for a person.
        ok && (uncertain.is_none()
            || matches!(run.status, RunStatus::Review | RunStatus::Cancelled))
    }
}

/// A run as the prune model sees it.
#[derive(Debug, Clone)]
struct ModelRun {
    run_id: String,
    status: RunStatus,
    created_at: i64,
    finished_at: Option<i64>,
    claimed: bool,
}

/// What a turn that may prune saw before it.
struct BeforePrune {
    runs: Vec<ModelRun>,
    /// The host prunes on its own (its pass may run in this turn, after the requests).
    retention: bool,
}

/// What `prune` must answer on `runs` at `now` (the documented selection, computed apart
/// from the store's SQL): the finished runs of its statuses (default: every finished one),
/// unclaimed, finished before `now - older_than_ms`, but for the newest `keep` of those
/// statuses (by start), oldest start first; a batch removes the first `limit` of them whose
/// child is not still exiting (`children`).
fn prune_model(
    runs: &[ModelRun],
    prune: &payload::RunPrune,
    now: i64,
    children: &BTreeSet<String>,
) -> PruneExpected {
    let statuses: Vec<RunStatus> = match &prune.statuses {
        Some(given) if !given.is_empty() => given.clone(),
        _ => RunStatus::ALL
            .iter()
            .copied()
            .filter(|s| s.is_terminal())
            .collect(),
    };
    if statuses.iter().any(|s| !s.is_terminal()) {
        return PruneExpected::Refused;
    }
    let mut matching: Vec<&ModelRun> = runs
        .iter()
        .filter(|r| statuses.contains(&r.status))
        .collect();
    // Newest first, as the run list: the first `keep` stay.
    matching.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then(a.run_id.cmp(&b.run_id))
    });
    let keep = usize::try_from(prune.keep.unwrap_or(0)).unwrap_or(usize::MAX);
    let finished_before = prune
        .older_than_ms
        .map(|ms| now - i64::try_from(ms).unwrap_or(i64::MAX));
    let mut prunable: Vec<&ModelRun> = matching
        .iter()
        .skip(keep)
        .filter(|r| !r.claimed)
        .filter(|r| finished_before.is_none_or(|at| r.finished_at.unwrap_or(0) < at))
        .copied()
        .collect();
    prunable.reverse();
    let limit = prune.limit.unwrap_or(500).clamp(1, 500) as usize;
    if prune.dry_run == Some(true) {
        return PruneExpected::Listed {
            count: prunable.len() as u64,
            run_ids: prunable
                .iter()
                .take(limit)
                .map(|r| r.run_id.clone())
                .collect(),
        };
    }
    let eligible: Vec<String> = prunable
        .iter()
        .filter(|r| !children.contains(&r.run_id))
        .map(|r| r.run_id.clone())
        .collect();
    PruneExpected::Removed {
        more: eligible.len() > limit,
        run_ids: eligible.into_iter().take(limit).collect(),
    }
}

/// Runs the simulation of `seed` with the steps `plan` names (each draws from its own stream:
/// `Rng::for_step`), then settles with faults off and checks how every run ended. Its history.
fn simulate(seed: u64, plan: &[usize]) -> Vec<String> {
    simulate_to_the_end(seed, plan).0
}

/// `simulate`, and the store's canonical dump at the end.
fn simulate_to_the_end(seed: u64, plan: &[usize]) -> (Vec<String>, String) {
    let mut sim = Sim::new(seed);
    for &step in plan {
        sim.steps_begun += 1;
        sim.rng = Rng::for_step(seed, step);
        sim.step();
    }
    sim.rng = Rng::for_step(seed, usize::MAX);
    sim.fail_next_commit.store(false, Ordering::SeqCst);
    sim.settle();
    sim.check_ends();
    sim.prune_everything();
    let dump = sim.store().canonical_dump().expect("dump");
    (std::mem::take(&mut sim.history), dump)
}

/// A simulation that failed: why (the panic's message), its history, and how many steps of
/// its plan had begun (a failure during the settling counts them all).
struct Failure {
    why: String,
    history: Vec<String>,
    steps_begun: usize,
}

impl Failure {
    /// What two failures must share to be the same: `why` without its ids and numbers (a
    /// shorter history draws other ids).
    fn kind(&self) -> String {
        self.why
            .split(' ')
            .map(|w| {
                if w.chars().any(|c| c.is_ascii_digit()) {
                    "N"
                } else {
                    w
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Keeps the default panic hook's output out of the simulations run under `quietly`.
static QUIET: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `simulate`, with a failure as a value (no panic output while it runs).
fn quietly(seed: u64, plan: &[usize]) -> Result<Vec<String>, Failure> {
    let _one_at_a_time = QUIET.lock().unwrap_or_else(|e| e.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ran = std::panic::catch_unwind(|| simulate(seed, plan));
    std::panic::set_hook(hook);
    ran.map_err(|payload| {
        let why = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".into());
        let wreck = WRECK.with(|w| w.borrow_mut().take());
        let (history, steps_begun) =
            wreck.map_or((Vec::new(), plan.len()), |w| (w.history, w.steps_begun));
        Failure {
            why,
            history,
            steps_begun,
        }
    })
}

/// The shortest plan found that still fails as `kind` does, from `plan`, which failed after
/// `begun` of its steps had begun; `trials` runs of `fails` at most. Steps after the one that
/// failed go first; then chunks of halves, quarters, ... down to single steps are left out
/// while the failure remains. `fails` answers how many steps of a plan had begun when it
/// failed as `kind` does, or `None`.
fn shrink(
    plan: &[usize],
    begun: usize,
    trials: usize,
    mut fails: impl FnMut(&[usize]) -> Option<usize>,
) -> (Vec<usize>, usize) {
    let mut best: Vec<usize> = plan[..begun.min(plan.len())].to_vec();
    let mut tried = 0;
    let mut chunk = best.len().div_ceil(2).max(1);
    loop {
        let mut at = 0;
        while at < best.len() && tried < trials {
            let candidate: Vec<usize> = best[..at]
                .iter()
                .chain(best[(at + chunk).min(best.len())..].iter())
                .copied()
                .collect();
            tried += 1;
            match fails(&candidate) {
                Some(begun) => best = candidate[..begun.min(candidate.len())].to_vec(),
                None => at += chunk,
            }
        }
        if chunk == 1 || tried >= trials {
            return (best, tried);
        }
        chunk = chunk.div_ceil(2);
    }
}

/// Runs `seed` with `plan`; on a failure, shrinks it and panics with the seed, the failure
/// and the shortest history found.
fn check_seed(seed: u64, plan: &[usize]) {
    let failure = match quietly(seed, plan) {
        Ok(history) => {
            if std::env::var_os("PIW_SIM_VERBOSE").is_some() {
                eprintln!("seed {seed}:\n  {}", history.join("\n  "));
            }
            return;
        }
        Err(failure) => failure,
    };
    if std::env::var_os("PIW_SIM_VERBOSE").is_some() {
        eprintln!(
            "seed {seed} failed: {}\n  {}",
            failure.why,
            failure.history.join("\n  ")
        );
    }
    let kind = failure.kind();
    let trials = env_number("PIW_SIM_SHRINK").unwrap_or(200);
    let mut shortest = failure;
    let (kept, tried) = shrink(
        plan,
        shortest.steps_begun,
        trials,
        |candidate| match quietly(seed, candidate) {
            Err(f) if f.kind() == kind => {
                let begun = f.steps_begun;
                shortest = f;
                Some(begun)
            }
            _ => None,
        },
    );
    panic!(
        "simulation seed {seed} failed: {}\n\
         shortest history found ({} of {} steps, {tried} shrinking runs):\n  {}\n\
         replay with PIW_SIM_SEEDS={seed} PIW_SIM_ONLY={}",
        shortest.why,
        kept.len(),
        plan.len(),
        shortest.history.join("\n  "),
        ranges(&kept),
    );
}

/// `3,5..8,12` for [3, 5, 6, 7, 12] (`PIW_SIM_ONLY`'s syntax; ranges exclude their end).
fn ranges(steps: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}..{}", steps[i], steps[j] + 1)
        } else {
            steps[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// The steps to run: `PIW_SIM_ONLY` (as `ranges` writes them), else the first `steps`.
fn plan(steps: usize) -> Vec<usize> {
    let Ok(only) = std::env::var("PIW_SIM_ONLY") else {
        return (0..steps).collect();
    };
    only.split(',')
        .filter(|part| !part.trim().is_empty())
        .flat_map(|part| match part.split_once("..") {
            Some((a, b)) => a.trim().parse().unwrap_or(0)..b.trim().parse().unwrap_or(0),
            None => {
                let step = part.trim().parse().unwrap_or(0);
                step..step + 1
            }
        })
        .collect()
}

fn env_number(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

fn seeds() -> std::ops::Range<u64> {
    match std::env::var("PIW_SIM_SEEDS") {
        Ok(spec) => match spec.split_once("..") {
            Some((a, b)) => a.trim().parse().unwrap_or(0)..b.trim().parse().unwrap_or(0),
            None => {
                let seed = spec.trim().parse().unwrap_or(0);
                seed..seed + 1
            }
        },
        // Nine seeds keep the suite's time where it was before the runs grew their
        // interactive steps, effects and large values (each seed now runs longer).
        Err(_) => 1..10,
    }
}

/// A seed replays bit for bit: the same ids, the same order of launches and replies, the same
/// history and the same database, byte for byte; another seed makes another one.
#[test]
fn the_same_seed_replays_the_same_history_and_bytes() {
    let plan: Vec<usize> = (0..150).collect();
    let run = |seed: u64| {
        let _one_at_a_time = QUIET.lock().unwrap_or_else(|e| e.into_inner());
        simulate_to_the_end(seed, &plan)
    };
    let (first, first_dump) = run(7);
    let (second, second_dump) = run(7);
    if let Some(at) = (0..first.len().min(second.len())).find(|&i| first[i] != second[i]) {
        panic!(
            "seed 7 diverged at history line {at}: {:?} vs {:?}",
            first[at], second[at]
        );
    }
    assert_eq!(first.len(), second.len());
    assert!(
        first_dump == second_dump,
        "seed 7 left two different databases"
    );
    let (other, other_dump) = run(8);
    assert_ne!(first, other, "seeds 7 and 8 made the same history");
    assert_ne!(
        first_dump, other_dump,
        "seeds 7 and 8 left the same database"
    );
}

#[test]
fn the_host_survives_seeded_interleavings_of_requests_children_time_and_crashes() {
    let plan = plan(env_number("PIW_SIM_STEPS").unwrap_or(300));
    for seed in seeds() {
        check_seed(seed, &plan);
    }
}

/// The shrinking keeps what a failure needs and nothing else: here a "failure" needs steps 7
/// and 300 of 400, in that order, and fails once the second of them has begun.
#[test]
fn a_failure_shrinks_to_the_steps_it_needs() {
    let plan: Vec<usize> = (0..400).collect();
    let fails = |candidate: &[usize]| {
        let seven = candidate.iter().position(|&s| s == 7)?;
        let three_hundred = candidate.iter().position(|&s| s == 300)?;
        (seven < three_hundred).then_some(three_hundred + 1)
    };
    let (kept, tried) = shrink(&plan, 301, 1_000, fails);
    assert_eq!(kept, vec![7, 300], "after {tried} runs");
    assert_eq!(ranges(&[3, 5, 6, 7, 12]), "3,5..8,12");
}
