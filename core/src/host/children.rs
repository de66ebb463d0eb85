//! Children, as the store thread sees them: the scheduler that activates ready runs and
//! launches one child each, the dispatch of worker messages (checked against the run's claim
//! generation and graph snapshot), child exits, and the host-owned deadlines (node timeouts,
//! handshake timeouts, claim heartbeats).
//!
//! Processes themselves are the supervisor task's business ([`super::supervisor`]); this module
//! only decides, and talks to it over a channel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::dispatch::HostState;
use super::supervisor::{StandbyPool, SupervisorCmd};
use crate::graph::{Graph, NodeKind, Outcome, Route};
use crate::ids::ClaimToken;
use crate::protocol::{payload, Request, RequestBody};
use crate::store::{
    AttemptOutcome, ChildExitRecord, ChildMode, Claim, DecisionKind, EffectResult, InteractionKind,
    Resume, RetryContract, RunStatus, Store, StoreError, StoreResult, TransitionRequest, WriteTx,
};
use crate::worker::{LaunchEnvelope, MountedSource, LAUNCH_SCHEMA};

/// Bytes of stdout and of stderr kept on a child's record.
const CHILD_TAIL_BYTES: usize = 64 * 1024;

/// A runtime: the command the host runs for workflow files with a given suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// File name suffix, e.g. `.workflow.json`.
    pub suffix: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Whether workers of this runtime may be started ahead of time and wait for their
    /// envelope on stdin ([`ChildConfig::standby_workers`]). The runtime must then take the
    /// workflow file from the envelope, not from its arguments, and move to the envelope's
    /// project directory itself.
    pub standby: bool,
}

/// Parses `PIW_RUNTIMES`: `suffix=program [args...]` entries separated by `;`.
pub fn parse_runtimes(spec: &str) -> Vec<Runtime> {
    spec.split(';')
        .filter_map(|entry| {
            let (suffix, cmd) = entry.split_once('=')?;
            let mut words = cmd.split_whitespace();
            let program = PathBuf::from(words.next()?);
            Some(Runtime {
                suffix: suffix.trim().to_owned(),
                program,
                args: words.map(str::to_owned).collect(),
                standby: false,
            })
        })
        .collect()
}

/// How children are run.
#[derive(Debug, Clone)]
pub struct ChildConfig {
    pub runtimes: Vec<Runtime>,
    /// Most children alive at once; further ready runs wait in the queue.
    pub max_children: usize,
    /// A child must say `worker.hello` within this time or it is stopped.
    pub handshake_timeout: Duration,
    /// A child judging a submission (`validate` mode) must give its verdict within this time
    /// after its hello, or it is stopped and the submission rejected (`PIW_VALIDATION_TIMEOUT_MS`).
    pub validation_timeout: Duration,
    /// SIGTERM to SIGKILL grace when stopping a child's process group.
    pub kill_grace: Duration,
    pub cpu_seconds: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// How much lower than the host's a child's CPU priority is (`PIW_CHILD_NICE`, default 5):
    /// a node that spins cannot starve the host or the clients on a small machine.
    pub nice: i32,
    /// Pre-started workers kept waiting per runtime that allows it (`PIW_STANDBY_WORKERS`,
    /// default 2; 0 turns the pools off). A pool fills after its runtime's first launch, so a
    /// host that never runs such a workflow starts none.
    pub standby_workers: usize,
}

impl Default for ChildConfig {
    fn default() -> Self {
        Self {
            runtimes: Vec::new(),
            max_children: 16,
            handshake_timeout: Duration::from_secs(10),
            validation_timeout: Duration::from_secs(60),
            kill_grace: Duration::from_secs(2),
            cpu_seconds: None,
            memory_bytes: None,
            nice: 5,
            standby_workers: 2,
        }
    }
}

/// What the supervisor reports back about a process.
#[derive(Debug)]
pub enum ChildReport {
    Started {
        run_id: String,
        generation: u64,
        child_epoch: i64,
        launch: u64,
        pid: u32,
        start_time: u64,
        /// The child is a standby worker that was started before its run was known.
        standby: bool,
    },
    Exited {
        run_id: String,
        generation: u64,
        child_epoch: i64,
        launch: u64,
        exit: ChildExitRecord,
    },
}

impl ChildReport {
    /// The launch the report is about.
    fn launch(&self) -> u64 {
        match self {
            ChildReport::Started { launch, .. } | ChildReport::Exited { launch, .. } => *launch,
        }
    }
}

/// One launched child, by run id.
#[derive(Debug)]
pub struct ChildEntry {
    pub generation: u64,
    pub child_epoch: i64,
    /// The launch's host-unique number (see [`HostState::abandoned_launches`]).
    pub launch: u64,
    pub token_hash: String,
    pub hello: bool,
    pub launched_at: i64,
    /// Since when a validate-mode child has been judging its submission (from its hello until
    /// its verdict); the validation deadline runs from here.
    pub judging_since: Option<i64>,
    /// Set once the host decided the child must go (deadline, cancel, handshake timeout).
    pub stopping: bool,
    /// When the run stopped needing this child (it parked, waited or ended). A child exits by
    /// itself at such a boundary; one still alive after the kill grace is stopped.
    pub released_at: Option<i64>,
    /// Where the child picks up, as the activation decided.
    pub mode: ChildMode,
    pub resume: Resume,
    /// The child was a standby worker (started before its run was known).
    pub from_standby: bool,
    /// Why the host stopped it, when a deadline of the host's did (the loss reason names it:
    /// "validation timed out after N ms" rather than just the signal that ended the child).
    pub stop_reason: Option<String>,
}

impl HostState {
    fn claim(&self, run_id: &str) -> Option<&Claim> {
        self.claims.get(run_id)
    }
}

fn invalid_input(msg: impl Into<String>) -> StoreError {
    StoreError::InvalidInput(msg.into())
}

fn stale(run_id: &str) -> StoreError {
    StoreError::ClaimLost {
        run_id: run_id.to_owned(),
        reason: crate::store::ClaimLostReason::GenerationMismatch,
    }
}

/// Activates ready runs while child slots are free and asks the supervisor to launch them.
///
/// Runs are usually activated inside the batch transaction that made them ready
/// ([`activate_and_launch`] from the store thread's batch); this catches the rest: runs made ready by
/// a child's exit, a deadline, or a slot freed by an exit.
pub fn schedule(store: &mut Store, state: &mut HostState) {
    loop {
        let free = free_slots(state);
        if free == 0 {
            return;
        }
        // A read first: most loops of the store thread find nothing ready, and need no write
        // transaction to learn it.
        match store.ready_runs(store.now_ms(), free as u32) {
            Ok(ready) if ready.is_empty() => return,
            Ok(_) => {}
            Err(e) => return tracing::error!(error = %e, "cannot list ready runs"),
        }
        let before = state.children.len();
        let mut activations = Activations::default();
        let committed = store.write(|w| {
            activations = activate_and_launch(w, state);
            Ok(())
        });
        if let Err(e) = &committed {
            tracing::error!(error = %e, "activation batch failed");
        }
        settle_activations(state, store.now_ms(), committed.is_ok(), &mut activations);
        if committed.is_err() || activations.runs.is_empty() {
            return;
        }
        for run in &activations.runs {
            publish(store, state, &run.run.run_id, run.revision_before);
        }
        // A run that could not be launched stays ready; try again after the next message
        // rather than spinning on it now.
        if state.children.len() == before {
            return;
        }
    }
}

/// How long after a failed activation ready runs are tried again.
const ACTIVATION_RETRY_MS: i64 = 1_000;

/// Child slots free for activations.
fn free_slots(state: &HostState) -> usize {
    state
        .child_config
        .max_children
        .saturating_sub(state.live_children())
}

/// Publishes the events a write outside the request batches committed for `run_id`.
fn publish(store: &Store, state: &mut HostState, run_id: &str, after: u64) {
    super::store_thread::publish_run(store, &mut state.outbox, run_id, after);
}

fn revision_of(store: &Store, run_id: &str) -> u64 {
    store.run_state(run_id).map(|(_, rev)| rev).unwrap_or(0)
}

/// A run activated in a transaction; [`launch_activated`] launches its child.
pub struct ActivatedRun {
    run: crate::store::RunRecord,
    /// The run's revision before the activation (its events are published from there).
    pub revision_before: u64,
    /// `None` when the activation failed the run (no runtime for its source) or was refused.
    launch: Option<(crate::store::Activation, i64, Runtime, Value)>,
}

impl ActivatedRun {
    /// The activated run.
    pub fn run_id(&self) -> &str {
        &self.run.run_id
    }
}

/// Activates ready runs inside the open transaction `w`, as many as there are free child
/// slots, each in its own savepoint (one that cannot be activated does not hold back the
/// others). Nothing is launched here (see [`activate_and_launch`]).
fn activate_ready(w: &mut WriteTx<'_>, state: &mut HostState) -> Vec<ActivatedRun> {
    let free = free_slots(state);
    if free == 0 || state.shutting_down || state.supervisor.is_none() {
        return Vec::new();
    }
    let ready = match w.ready_runs(free as u32) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot list ready runs");
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(ready.len());
    for run_id in ready {
        // A run whose previous child is still alive (its claim was lost while it ran, or it
        // lingers after a boundary) waits until that child is stopped and has exited.
        if state.children.contains_key(&run_id) {
            stop_child(state, &run_id);
            continue;
        }
        if state.abandoned_launches.values().any(|r| *r == run_id) {
            continue; // being stopped already
        }
        let (run, revision_before) = match w.run(&run_id).and_then(|run| {
            let (_, revision) = w.run_state(&run_id)?;
            Ok((run, revision))
        }) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(%run_id, error = %e, "cannot read run to launch");
                continue;
            }
        };
        let runtime = state
            .child_config
            .runtimes
            .iter()
            .find(|r| run.source_root.ends_with(&r.suffix))
            .cloned();
        let launch = w.savepoint(|w| {
            let act = w.activate(&run_id, &state.owner_id)?;
            let Some(runtime) = runtime else {
                let error = format!("no runtime is configured for {}", run.source_root);
                w.fail(
                    &act.claim,
                    None,
                    &AttemptOutcome::Failed {
                        error: error.clone(),
                    },
                    &error,
                )?;
                tracing::warn!(%run_id, "no runtime for the run's source; failed it");
                return Ok(None);
            };
            let child_epoch =
                w.record_child_launch(&run_id, act.claim.generation, state.epoch, act.mode)?;
            let mounted = w.mounted_sources(&run_id)?;
            Ok(Some((act, child_epoch, runtime, mounted)))
        });
        let launch = match launch {
            Ok(launch) => launch,
            Err(e) => {
                tracing::error!(%run_id, error = %e, "activation failed; trying again later");
                retry_activations_later(state, w.now_ms());
                None
            }
        };
        out.push(ActivatedRun {
            run,
            revision_before,
            launch,
        });
    }
    out
}

/// A child handed its launch envelope inside a transaction that has not committed yet.
pub struct PendingLaunch {
    run_id: String,
    generation: u64,
    launch: u64,
}

/// The runs one transaction activated, and the children already launched for them.
#[derive(Default)]
pub struct Activations {
    /// The activated runs (their events are published after the commit).
    pub runs: Vec<ActivatedRun>,
    /// Children launched before the commit.
    pending: Vec<PendingLaunch>,
    /// Whether the children were launched before the commit (else they wait for it).
    launched_early: bool,
}

/// Inside an open transaction: activates ready runs ([`activate_ready`]) and launches their
/// children **before** the commit, so a worker loads while the commit reaches the disk. That
/// is safe because a child can do nothing the host accepts before its hello, and the store
/// thread handles the hello only after this transaction ended (it handles one batch at a
/// time). After a commit that failed with children already launched, the children wait for
/// their commit until one succeeds (`HostState::launch_after_commit`), so a commit that keeps
/// failing does not start and stop children in a loop. Pass the result to
/// [`settle_activations`] once the transaction has ended, whatever its outcome.
pub fn activate_and_launch(w: &mut WriteTx<'_>, state: &mut HostState) -> Activations {
    let mut runs = activate_ready(w, state);
    let launched_early = !state.launch_after_commit;
    let pending = if launched_early {
        launch_activated(state, w.now_ms(), &mut runs)
    } else {
        Vec::new()
    };
    Activations {
        runs,
        pending,
        launched_early,
    }
}

/// After the transaction of `activations`: when it committed, launches the children that
/// waited for it; when it did not, stops the children launched before it
/// ([`abandon_launches`]).
pub fn settle_activations(
    state: &mut HostState,
    now: i64,
    committed: bool,
    activations: &mut Activations,
) {
    if !committed {
        abandon_launches(state, std::mem::take(&mut activations.pending));
        if !activations.runs.is_empty() {
            // The runs are still ready, and no child of theirs will exit to wake us.
            retry_activations_later(state, now);
        }
        activations.runs.clear();
        return;
    }
    activations.pending.clear();
    if !activations.launched_early {
        launch_activated(state, now, &mut activations.runs);
    }
    state.launch_after_commit = false;
    if !activations.runs.is_empty() && state.activation_retry_at.is_none() {
        // Activations work again: the next failure starts the back-off anew.
        state.activation_retry_delay_ms = 0;
    }
}

/// Tries ready runs again after a failed activation: after 1 s, doubling up to a minute while
/// activations keep failing (a full disk), so a run that cannot be activated neither spins the
/// store thread nor fills the log.
fn retry_activations_later(state: &mut HostState, now: i64) {
    let delay = (state.activation_retry_delay_ms * 2).clamp(ACTIVATION_RETRY_MS, 60_000);
    state.activation_retry_delay_ms = delay;
    state.activation_retry_at = Some(now + delay);
}

/// Launches the children of the runs `activated` in the open transaction (see
/// [`activate_and_launch`] for when).
fn launch_activated(
    state: &mut HostState,
    now: i64,
    activated: &mut [ActivatedRun],
) -> Vec<PendingLaunch> {
    let mut pending = Vec::with_capacity(activated.len());
    for a in activated {
        if let Some((act, child_epoch, runtime, mounted)) = a.launch.take() {
            pending.extend(launch(
                state,
                now,
                &a.run,
                act,
                child_epoch,
                runtime,
                mounted,
            ));
        }
    }
    pending
}

/// The transaction of `pending` launches did not commit: forget their children and stop them.
/// Reports about them are ignored from now on; their runs stay as the store has them.
fn abandon_launches(state: &mut HostState, pending: Vec<PendingLaunch>) {
    for p in pending {
        let ours = state
            .children
            .get(&p.run_id)
            .is_some_and(|e| e.launch == p.launch);
        if ours {
            state.children.remove(&p.run_id);
            state.claims.remove(&p.run_id);
            state.renewed_at.remove(&p.run_id);
        }
        state.abandoned_launches.insert(p.launch, p.run_id.clone());
        state.launch_after_commit = true;
        tracing::warn!(run_id = %p.run_id, "activation did not commit; stopping the child it launched");
        if let Some(supervisor) = &state.supervisor {
            let _ = supervisor.send(SupervisorCmd::Stop {
                run_id: p.run_id,
                generation: p.generation,
                grace: Duration::ZERO,
            });
        }
    }
}

/// Builds the launch envelope of an activated run and asks the supervisor to start its child.
#[allow(clippy::too_many_arguments)]
fn launch(
    state: &mut HostState,
    now: i64,
    run: &crate::store::RunRecord,
    act: crate::store::Activation,
    child_epoch: i64,
    runtime: Runtime,
    mounted: Value,
) -> Option<PendingLaunch> {
    let run_id = run.run_id.as_str();
    let mounted: BTreeMap<String, MountedSource> =
        serde_json::from_value(mounted).unwrap_or_default();
    let token = ClaimToken::generate();
    let launch = state.next_launch;
    state.next_launch += 1;
    let envelope = LaunchEnvelope {
        schema: LAUNCH_SCHEMA.to_owned(),
        run_id: run_id.to_owned(),
        generation: act.claim.generation,
        child_token: token.expose_secret().to_owned(),
        mode: act.mode.as_str().to_owned(),
        source_root: run.source_root.clone(),
        source_hash: run.source_hash.clone(),
        mounted_sources: mounted,
        project_dir: run.project_dir.clone(),
        input_hash: run.input_hash.clone(),
        socket_path: state.socket_path.clone(),
    };
    let stdin = serde_json::to_vec(&envelope).unwrap_or_default();
    state.children.insert(
        run_id.to_owned(),
        ChildEntry {
            generation: act.claim.generation,
            child_epoch,
            token_hash: token.hash(),
            hello: false,
            launched_at: now,
            judging_since: None,
            launch,
            stopping: false,
            released_at: None,
            mode: act.mode,
            resume: act.resume.clone(),
            from_standby: false,
            stop_reason: None,
        },
    );
    state.renewed_at.insert(run_id.to_owned(), now);
    state.claims.insert(run_id.to_owned(), act.claim.clone());
    let cfg = &state.child_config;
    let mut args = runtime.args.clone();
    args.push(run.source_root.clone());
    let Some(supervisor) = &state.supervisor else {
        return None;
    };
    let limits = crate::supervise::ChildLimits {
        cpu_seconds: cfg.cpu_seconds,
        memory_bytes: cfg.memory_bytes,
    };
    // A run whose last standby worker died before its hello starts in a fresh process: the
    // pool may hold more workers killed at the same moment that still look alive (a SIGKILL
    // takes effect asynchronously), and a second such death in a row would count as a loss.
    let from_pool = runtime.standby
        && cfg.standby_workers > 0
        && !state.forgiven_standby_exits.contains(run_id);
    let standby = from_pool.then(|| {
        Box::new(StandbyPool {
            key: format!("{} {}", runtime.program.display(), runtime.args.join(" ")),
            size: cfg.standby_workers,
            template: crate::supervise::SpawnSpec {
                program: runtime.program.clone(),
                args: runtime.args.iter().map(Into::into).collect(),
                // Tells the runtime it may warm up while it waits for a run's envelope.
                env: vec![("PIW_STANDBY".into(), "1".into())],
                cwd: state
                    .socket_path
                    .parent()
                    .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
                stdin_payload: Vec::new(),
                limits,
                nice: cfg.nice,
                tail_bytes: CHILD_TAIL_BYTES,
                scope: super::supervision_scope(&state.socket_path),
            },
        })
    });
    let _ = supervisor.send(SupervisorCmd::Launch {
        run_id: run_id.to_owned(),
        generation: act.claim.generation,
        child_epoch,
        launch,
        spec: crate::supervise::SpawnSpec {
            program: runtime.program.clone(),
            args: args.into_iter().map(Into::into).collect(),
            env: vec![("PIW_RUN_ID".into(), run_id.into())],
            cwd: PathBuf::from(&run.project_dir),
            stdin_payload: stdin,
            limits,
            nice: cfg.nice,
            tail_bytes: CHILD_TAIL_BYTES,
            scope: super::supervision_scope(&state.socket_path),
        },
        standby,
    });
    tracing::debug!(%run_id, generation = act.claim.generation, "child launch requested");
    Some(PendingLaunch {
        run_id: run_id.to_owned(),
        generation: act.claim.generation,
        launch,
    })
}

/// Applies one worker message inside the batch transaction.
pub fn apply_worker(
    w: &mut WriteTx<'_>,
    state: &mut HostState,
    req: &Request,
) -> Result<Value, StoreError> {
    let run_id = req
        .run_id
        .as_deref()
        .ok_or_else(|| invalid_input("run_id is required"))?;
    let generation = req
        .generation
        .ok_or_else(|| invalid_input("generation is required"))?;
    let entry = state
        .children
        .get(run_id)
        .filter(|e| e.generation == generation);
    let Some(entry) = entry else {
        return Err(stale(run_id));
    };
    if let RequestBody::WorkerHello(hello) = &req.body {
        if entry.hello
            || ClaimToken::from_secret(hello.child_token.clone()).hash() != entry.token_hash
        {
            return Err(StoreError::Forbidden(
                "the child token does not match this run's launch".into(),
            ));
        }
        return worker_hello(w, state, run_id, hello);
    }
    if !entry.hello {
        return Err(StoreError::Forbidden("worker.hello must come first".into()));
    }
    let claim = state.claim(run_id).cloned().ok_or_else(|| stale(run_id))?;
    let attempt = || {
        req.attempt_id
            .clone()
            .ok_or_else(|| invalid_input("attempt_id is required"))
    };
    let body = match &req.body {
        RequestBody::WorkerNodeStarted(started) => {
            let node = req
                .node_id
                .as_deref()
                .ok_or_else(|| invalid_input("node_id is required"))?;
            let graph = graph_of(w, state, run_id)?;
            if graph.node(node).is_none() {
                return Err(invalid_input(format!("node {node} is not in the graph")));
            }
            let deadline = deadline_for(w, &graph, node, started.timeout_ms)?;
            let attempt_id = w.node_started(&claim, node, deadline)?;
            json!({ "attempt_id": attempt_id, "deadline_at": deadline })
        }
        RequestBody::WorkerTransition(t) => {
            let (graph, attempt_id, from) =
                match step_after_earlier(w, state, &claim, req, &t.earlier)? {
                    Ok(step) => step,
                    Err(refused) => return Ok(refused),
                };
            let outcome = store_outcome(&t.outcome);
            if let Some(refused) = check_route(
                w,
                &claim,
                &graph,
                &from,
                &attempt_id,
                &outcome,
                Some(&t.next_node),
            )? {
                return Ok(refused);
            }
            if let Some(refused) =
                check_step_limit(w, &claim, &graph, &attempt_id, &outcome, &t.next_node)?
            {
                return Ok(refused);
            }
            let deadline = deadline_for(w, &graph, &t.next_node, t.next_timeout_ms)?;
            let done = w.transition(
                &claim,
                &TransitionRequest {
                    attempt_id,
                    outcome,
                    next_node: t.next_node.clone(),
                    next_deadline_at: deadline,
                },
            )?;
            let parked = done.pause_requested;
            if parked {
                w.park(&claim, None)?;
            }
            json!({ "attempt_id": done.next_attempt_id, "parked": parked, "deadline_at": deadline })
        }
        RequestBody::WorkerComplete(c) => {
            if c.result_is_output
                && (!c.result.is_null()
                    || !matches!(c.outcome, payload::AttemptOutcome::Succeeded { .. }))
            {
                return Err(invalid_input(
                    "result_is_output needs a succeeded outcome and a null result",
                ));
            }
            let (graph, attempt_id, from) =
                match step_after_earlier(w, state, &claim, req, &c.earlier)? {
                    Ok(step) => step,
                    Err(refused) => return Ok(refused),
                };
            let outcome = store_outcome(&c.outcome);
            if let Some(refused) =
                check_route(w, &claim, &graph, &from, &attempt_id, &outcome, None)?
            {
                return Ok(refused);
            }
            let output = match &outcome {
                AttemptOutcome::Succeeded { output } => output.clone(),
                _ => Value::Null,
            };
            let result = if c.result_is_output {
                &output
            } else {
                &c.result
            };
            w.complete(&claim, &attempt_id, &output, result)?;
            json!({ "status": "completed" })
        }
        RequestBody::WorkerFail(f) => {
            if f.review {
                w.send_to_review(&claim, &f.error)?;
                json!({ "status": "review" })
            } else {
                let outcome = AttemptOutcome::Failed {
                    error: f.error.clone(),
                };
                w.fail(&claim, req.attempt_id.as_deref(), &outcome, &f.error)?;
                json!({ "status": "failed" })
            }
        }
        RequestBody::WorkerProgress(p) => {
            w.progress(&claim, &p.message, &p.data)?;
            json!({})
        }
        RequestBody::WorkerWait(wait) => {
            let kind = match wait.decision_kind {
                payload::DecisionKind::Checkpoint => DecisionKind::Checkpoint,
                payload::DecisionKind::HumanDecision => DecisionKind::HumanDecision,
            };
            let id = w.wait_for_decision(&claim, &attempt()?, kind, &wait.request)?;
            json!({ "decision_id": id })
        }
        RequestBody::WorkerInteractionRequest(i) => {
            let kind = match i.interaction_kind {
                payload::InteractionKind::Agent => InteractionKind::Agent,
                payload::InteractionKind::AssistantMessage => InteractionKind::AssistantMessage,
            };
            let attempt_id = attempt()?;
            // The node's saved deadline, which the host enforces while no worker runs.
            let deadline = w.attempt_deadline(&attempt_id)?;
            let id = w.request_interaction(&claim, &attempt_id, kind, &i.request, deadline)?;
            json!({ "interaction_id": id, "deadline_at": deadline })
        }
        RequestBody::WorkerNotify(n) => {
            let id = w.notify(&claim, &n.content)?;
            json!({ "message_id": id })
        }
        RequestBody::WorkerEffectReserve(e) => {
            let contract = match e.retry_contract {
                payload::RetryContract::Never => RetryContract::Never,
                payload::RetryContract::IdempotencyKey => RetryContract::IdempotencyKey,
                payload::RetryContract::ReadBack => RetryContract::ReadBack,
            };
            let r =
                w.reserve_effect(&claim, &attempt()?, &e.effect_key, &e.fingerprint, contract)?;
            json!(r)
        }
        RequestBody::WorkerEffectApplying(e) => {
            w.effect_applying(&claim, &e.effect_id)?;
            json!({ "effect_id": e.effect_id })
        }
        RequestBody::WorkerEffectSettle(e) => {
            let result = match &e.result {
                payload::EffectResult::Applied { receipt } => EffectResult::Applied {
                    receipt: receipt.clone(),
                },
                payload::EffectResult::Failed { error } => EffectResult::Failed {
                    error: error.clone(),
                },
            };
            w.settle_effect(&claim, &e.effect_id, &result)?;
            json!({ "effect_id": e.effect_id })
        }
        RequestBody::WorkerValidationResult(v) => {
            let verdict = if v.accepted {
                Ok(())
            } else {
                Err(v.error.clone().unwrap_or_else(|| "rejected".into()))
            };
            w.settle(&claim, &v.submission_id, verdict)?;
            if let Some(entry) = state.children.get_mut(run_id) {
                entry.judging_since = None; // the verdict is in: no validation deadline now
            }
            json!({ "submission_id": v.submission_id, "accepted": v.accepted })
        }
        RequestBody::WorkerExit(_) => json!({}),
        other => {
            return Err(StoreError::Forbidden(format!(
                "{} is not a worker kind",
                other.kind_str()
            )))
        }
    };
    state.renewed_at.insert(run_id.to_owned(), w.now_ms());
    Ok(body)
}

/// Takes back what a worker message changed in the host's memory when its batch did not
/// commit: the store has no handshake (a retried hello must be accepted, and the handshake
/// deadline applies again, from now), and a verdict that was not stored leaves the child
/// judging (its validation deadline runs again from now).
pub fn forget_uncommitted_worker_message(state: &mut HostState, req: &Request, now: i64) {
    let (Some(run_id), Some(generation)) = (req.run_id.as_deref(), req.generation) else {
        return;
    };
    let Some(entry) = state
        .children
        .get_mut(run_id)
        .filter(|e| e.generation == generation)
    else {
        return;
    };
    match &req.body {
        RequestBody::WorkerHello(_) => {
            entry.hello = false;
            entry.judging_since = None;
            // A full handshake window for the retry.
            entry.launched_at = now;
        }
        RequestBody::WorkerValidationResult(_) if entry.judging_since.is_none() => {
            entry.judging_since = Some(now);
        }
        _ => {}
    }
}

fn worker_hello(
    w: &mut WriteTx<'_>,
    state: &mut HostState,
    run_id: &str,
    hello: &payload::WorkerHello,
) -> Result<Value, StoreError> {
    let claim = state.claim(run_id).cloned().ok_or_else(|| stale(run_id))?;
    let (input, stored, _) = w.run_payload(run_id)?;
    let graph: Option<Graph> = match (&stored, &hello.definition) {
        (None, Some(def)) => {
            let graph = match Graph::parse(def) {
                Ok(g) => g,
                Err(e) => {
                    let error = format!("invalid workflow graph: {e}");
                    w.fail(
                        &claim,
                        None,
                        &AttemptOutcome::Failed {
                            error: error.clone(),
                        },
                        &error,
                    )?;
                    return Ok(json!({ "stop": error }));
                }
            };
            let mounted = hello.mounted_sources.clone().unwrap_or_else(|| json!({}));
            w.record_launch_facts(&claim, &graph.to_value(), &mounted)?;
            Some(graph)
        }
        (Some(stored), sent) => {
            let graph = Graph::parse(stored)
                .map_err(|e| StoreError::CorruptRow(format!("stored graph: {e}")))?;
            if let Some(sent) = sent {
                let same = Graph::parse(sent)
                    .map(|g| g.digest() == graph.digest())
                    .unwrap_or(false);
                if !same {
                    let reason = "source_changed: the workflow's graph differs from the one the run started with";
                    w.send_to_review(&claim, reason)?;
                    return Ok(json!({ "stop": reason }));
                }
            }
            Some(graph)
        }
        // A child that found a changed source says hello without loading the workflow, only
        // to stop the run for review; any node operation needs a graph and is refused.
        (None, None) => None,
    };
    // Every store write first; the host's memory changes only when they all succeeded (a
    // failed write rolls the command back, and memory must not disagree with the store).
    let Some(entry) = state.children.get(run_id) else {
        return Err(stale(run_id));
    };
    let (child_epoch, mode) = (entry.child_epoch, entry.mode);
    let resume = serde_json::to_value(&entry.resume)?;
    w.record_child_handshake(child_epoch)?;
    // The node a child starts with takes the latest succeeded output as its input, so a
    // resumed run feeds its nodes exactly what an uninterrupted one would have.
    let node_input = match w.last_node_output(run_id)? {
        Some(output) => output,
        None => input.clone(),
    };
    // Outcome names as a workflow routes on them (`$result.outcome`).
    let results: Vec<Value> = w
        .latest_results(run_id)?
        .into_iter()
        .map(|r| {
            let outcome = if r.status == "succeeded" {
                "ok"
            } else {
                r.status.as_str()
            };
            json!({ "node": r.node, "outcome": outcome, "output": r.output, "error": r.error, "visits": r.finished })
        })
        .collect();
    let mut reply = json!({ "mode": mode.as_str(), "resume": resume, "input": input, "node_input": node_input, "results": results, "definition": graph.as_ref().map(Graph::to_value), "features": payload::HOST_FEATURES });
    // After a lost child, the next one reports every step as it takes it: the host then knows
    // which node was running if this child dies too (steps reported together would leave the
    // loss on the last node the host heard of).
    if w.child_losses(run_id)? > 0 {
        reply["report_each_step"] = json!(true);
    }
    if hello.start_node && mode.as_str() == "run" && reply["resume"]["resume"] == "fresh" {
        if let Some(graph) = &graph {
            let node = reply["resume"]["node_id"]
                .as_str()
                .map_or_else(|| graph.start.clone(), str::to_owned);
            // A deadline decided at the start needs the child's word: it opens the attempt
            // itself, with `worker.node_started`.
            if !graph.node(&node).is_some_and(|n| n.timeout_at_start) {
                let deadline = deadline_for(w, graph, &node, None)?;
                let attempt_id = w.node_started(&claim, &node, deadline)?;
                reply["resume"]["node_id"] = json!(node);
                reply["resume"]["attempt_id"] = json!(attempt_id);
                reply["resume"]["deadline_at"] = json!(deadline);
            }
        }
    }
    if let Some(attempt_id) = resume.get("attempt_id").and_then(Value::as_str) {
        reply["answer"] = w.answer_for_attempt(attempt_id)?.unwrap_or(Value::Null);
    }
    if let Some(sub) = resume.get("submission_id").and_then(Value::as_str) {
        reply["submission"] =
            json!({ "submission_id": sub, "payload": w.submission_payload(sub)? });
    }
    if let Some(entry) = state.children.get_mut(run_id) {
        entry.hello = true;
        if entry.mode == ChildMode::Validate {
            entry.judging_since = Some(w.now_ms());
        }
    }
    state.forgiven_standby_exits.remove(run_id);
    if let Some(graph) = graph {
        state.graphs.insert(run_id.to_owned(), graph);
    }
    Ok(reply)
}

/// The attempt a worker's proposal closes and the node it ran, from the store: the graph
/// check routes from the node the host recorded, never from what the child says it ran.
fn current_step(
    w: &WriteTx<'_>,
    run_id: &str,
    req: &Request,
) -> Result<(String, String), StoreError> {
    let presented = req
        .attempt_id
        .clone()
        .ok_or_else(|| invalid_input("attempt_id is required"))?;
    let stale = |current: &str| StoreError::StaleAttempt {
        run_id: run_id.to_owned(),
        presented: presented.clone(),
        current: current.to_owned(),
    };
    let Some((attempt_id, node)) = w.current_open_attempt(run_id)? else {
        return Err(stale("none"));
    };
    if attempt_id != presented {
        return Err(stale(&attempt_id));
    }
    if req.node_id.as_deref().is_some_and(|n| n != node) {
        return Err(invalid_input(format!(
            "attempt {attempt_id} runs node {node}, not {}",
            req.node_id.as_deref().unwrap_or_default()
        )));
    }
    Ok((attempt_id, node))
}

/// The run's graph and the attempt (with its node) that a worker's transition or completion
/// closes, after the earlier steps the message carries were applied; or the refusal body.
fn step_after_earlier(
    w: &mut WriteTx<'_>,
    state: &mut HostState,
    claim: &Claim,
    req: &Request,
    earlier: &[payload::EarlierStep],
) -> Result<Result<(Graph, String, String), Value>, StoreError> {
    let graph = graph_of(w, state, &claim.run_id)?;
    let current = current_step(w, &claim.run_id, req)?;
    Ok(apply_earlier_steps(w, claim, &graph, current, earlier)?
        .map(|(attempt_id, from)| (graph, attempt_id, from)))
}

/// Applies the steps a worker took before the one its message reports (see
/// [`payload::EarlierStep`]): each closes the open attempt and opens the next node's, checked
/// against the graph like any transition. Returns the attempt then open and its node, or the
/// refusal body when a step disagrees with the graph (the run has failed then).
fn apply_earlier_steps(
    w: &mut WriteTx<'_>,
    claim: &Claim,
    graph: &Graph,
    current: (String, String),
    steps: &[payload::EarlierStep],
) -> Result<Result<(String, String), Value>, StoreError> {
    if steps.len() > payload::MAX_EARLIER_STEPS {
        return Err(invalid_input(format!(
            "{} earlier steps; at most {} per message",
            steps.len(),
            payload::MAX_EARLIER_STEPS
        )));
    }
    // Only pure nodes without a deadline may run unreported: the host enforces deadlines only
    // on attempts it knows, and only pure work may be lost and rerun.
    for step in steps {
        let unreported_ok = graph.node(&step.next_node).is_some_and(|n| {
            n.kind == NodeKind::Compute && n.timeout_ms.is_none() && !n.timeout_at_start
        });
        if !unreported_ok {
            return Err(invalid_input(format!(
                "earlier step into {}: only compute nodes without a timeout may run unreported",
                step.next_node
            )));
        }
    }
    let (mut attempt_id, mut from) = current;
    for step in steps {
        let outcome = store_outcome(&step.outcome);
        if let Some(refused) = check_route(
            w,
            claim,
            graph,
            &from,
            &attempt_id,
            &outcome,
            Some(&step.next_node),
        )? {
            return Ok(Err(refused));
        }
        if let Some(refused) =
            check_step_limit(w, claim, graph, &attempt_id, &outcome, &step.next_node)?
        {
            return Ok(Err(refused));
        }
        let done = w.transition(
            claim,
            &TransitionRequest {
                attempt_id,
                outcome,
                next_node: step.next_node.clone(),
                next_deadline_at: None,
            },
        )?;
        attempt_id = done.next_attempt_id;
        from = step.next_node.clone();
    }
    Ok(Ok((attempt_id, from)))
}

fn graph_of(w: &WriteTx<'_>, state: &mut HostState, run_id: &str) -> Result<Graph, StoreError> {
    if let Some(g) = state.graphs.get(run_id) {
        return Ok(g.clone());
    }
    let (_, def, _) = w.run_payload(run_id)?;
    let def = def.ok_or_else(|| invalid_input("the run has no graph snapshot yet"))?;
    let g = Graph::parse(&def).map_err(|e| StoreError::CorruptRow(format!("stored graph: {e}")))?;
    state.graphs.insert(run_id.to_owned(), g.clone());
    Ok(g)
}

/// The deadline of an attempt of `node` opened now: from the graph's fixed `timeout_ms`, or,
/// for a node with `timeout_at_start`, from the timeout the child decided for this attempt
/// (`reported`; none: no deadline). A reported timeout for a node whose graph fixes its
/// deadline is refused: the host enforces the graph, not the child's word.
fn deadline_for(
    w: &WriteTx<'_>,
    graph: &Graph,
    node: &str,
    reported: Option<u64>,
) -> Result<Option<i64>, StoreError> {
    let Some(spec) = graph.node(node) else {
        return Ok(None);
    };
    let timeout = if spec.timeout_at_start {
        reported
    } else if reported.is_some() {
        return Err(invalid_input(format!(
            "node {node} has no timeout decided at its start; its deadline comes from the graph"
        )));
    } else {
        spec.timeout_ms
    };
    Ok(timeout.map(|ms| ms_after(w.now_ms(), ms)))
}

fn ms_after(now: i64, ms: u64) -> i64 {
    now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
}

fn store_outcome(o: &payload::AttemptOutcome) -> AttemptOutcome {
    match o {
        payload::AttemptOutcome::Succeeded { output } => AttemptOutcome::Succeeded {
            output: output.clone(),
        },
        payload::AttemptOutcome::Failed { error } => AttemptOutcome::Failed {
            error: error.clone(),
        },
        payload::AttemptOutcome::TimedOut => AttemptOutcome::TimedOut,
    }
}

fn graph_outcome(o: &AttemptOutcome) -> Outcome<'_> {
    match o {
        AttemptOutcome::Succeeded { output } => Outcome::Succeeded(output),
        AttemptOutcome::Failed { error } => Outcome::Failed(error),
        AttemptOutcome::TimedOut => Outcome::TimedOut,
    }
}

/// Checks a child's proposal against the graph. A proposal that disagrees fails the run with
/// the reason; the failure is the command's committed result (`Some(body)` with `refused`),
/// not an error, so the savepoint around the command keeps it.
fn check_route(
    w: &mut WriteTx<'_>,
    claim: &Claim,
    graph: &Graph,
    from: &str,
    attempt_id: &str,
    outcome: &AttemptOutcome,
    proposed: Option<&str>,
) -> Result<Option<Value>, StoreError> {
    match graph.check_transition(from, &graph_outcome(outcome), proposed) {
        Ok(_) => Ok(None),
        Err(refused) => {
            let error = format!("transition refused: {refused}");
            w.fail(claim, Some(attempt_id), outcome, &error)?;
            Ok(Some(json!({ "refused": error, "status": "failed" })))
        }
    }
}

/// Fails the run when the transition would open more attempts than the graph's step limit
/// (`maxSteps`, default 100): the host's bound on every loop, whatever the child does. The
/// attempt that is ending keeps its own outcome; the run fails with the reason.
fn check_step_limit(
    w: &mut WriteTx<'_>,
    claim: &Claim,
    graph: &Graph,
    attempt_id: &str,
    outcome: &AttemptOutcome,
    next_node: &str,
) -> Result<Option<Value>, StoreError> {
    let limit = graph.step_limit();
    let mut error = (w.attempt_count(&claim.run_id)? >= limit).then(|| format!(
        "the run reached its step limit: maxSteps is {limit} and every step was used (a loop in the graph did not end)"
    ));
    // Each included workflow's own limit bounds one invocation of its mount. Entering a mount
    // starts a new invocation (none of its attempts is the newest then), so only steps inside
    // it count.
    for (path, mount) in graph.mounts_of(next_node) {
        if error.is_some() {
            break;
        }
        let limit = mount.step_limit();
        if w.attempts_in_invocation(&claim.run_id, path)? >= limit {
            error = Some(format!(
                "the workflow included as {path} reached its step limit: its maxSteps is {limit} and this invocation used every step (a loop in it did not end)"
            ));
        }
    }
    let Some(error) = error else {
        return Ok(None);
    };
    // A timed-out node that would route on is still a step-limit failure, not a timeout.
    let closing = match outcome {
        AttemptOutcome::TimedOut => AttemptOutcome::Failed {
            error: error.clone(),
        },
        other => other.clone(),
    };
    w.fail(claim, Some(attempt_id), &closing, &error)?;
    Ok(Some(json!({ "refused": error, "status": "failed" })))
}

/// Child reports of one batch: the pids of started children are recorded in one
/// transaction; each exit is handled on its own (it may requeue its run).
pub fn on_child_reports(store: &mut Store, state: &mut HostState, reports: Vec<ChildReport>) {
    let (started, exited): (Vec<_>, Vec<_>) = reports
        .into_iter()
        .filter(|r| {
            // A child whose launch never committed: nothing of it is in the store.
            if !state.abandoned_launches.contains_key(&r.launch()) {
                return true;
            }
            if matches!(r, ChildReport::Exited { .. }) {
                state.abandoned_launches.remove(&r.launch());
            }
            false
        })
        .partition(|r| matches!(r, ChildReport::Started { .. }));
    for report in &started {
        if let ChildReport::Started {
            run_id,
            generation,
            standby: true,
            ..
        } = report
        {
            if let Some(entry) = state
                .children
                .get_mut(run_id)
                .filter(|e| e.generation == *generation)
            {
                entry.from_standby = true;
            }
        }
    }
    if !started.is_empty() {
        let recorded = store.write(|w| {
            for report in &started {
                if let ChildReport::Started {
                    child_epoch,
                    pid,
                    start_time,
                    ..
                } = report
                {
                    w.record_child_process(*child_epoch, *pid, *start_time)?;
                }
            }
            Ok(())
        });
        if let Err(e) = recorded {
            tracing::error!(error = %e, "cannot record child pids");
        }
    }
    for report in exited {
        on_child_report(store, state, report);
    }
}

/// A child report: record it, and when a child died while its run was still running under
/// our claim, requeue the run from its last committed boundary (or stop it for review).
pub fn on_child_report(store: &mut Store, state: &mut HostState, report: ChildReport) {
    match report {
        ChildReport::Started {
            run_id,
            generation,
            child_epoch,
            launch: _,
            pid,
            start_time,
            standby,
        } => {
            if standby {
                if let Some(entry) = state
                    .children
                    .get_mut(&run_id)
                    .filter(|e| e.generation == generation)
                {
                    entry.from_standby = true;
                }
            }
            if let Err(e) = store.write(|w| w.record_child_process(child_epoch, pid, start_time)) {
                tracing::error!(%run_id, generation, error = %e, "cannot record child pid");
            }
        }
        ChildReport::Exited {
            run_id,
            generation,
            child_epoch,
            launch,
            exit,
        } => {
            let ours = state
                .children
                .get(&run_id)
                .is_some_and(|e| e.generation == generation && e.launch == launch);
            let claim = state
                .claims
                .get(&run_id)
                .filter(|c| c.generation == generation)
                .cloned();
            // A standby worker can die while it waits (killed, out of memory) and be handed a
            // run before the host hears of it. Its run did nothing, so the first such exit
            // before the hello is not counted as a loss; a second one in a row is, so a
            // runtime that always dies early still ends in review.
            let may_forgive = ours
                && state
                    .children
                    .get(&run_id)
                    .is_some_and(|e| e.from_standby && !e.hello)
                && !state.forgiven_standby_exits.contains(&run_id);
            let mut forgiven = false;
            let stop_reason = state
                .children
                .get(&run_id)
                .filter(|_| ours)
                .and_then(|e| e.stop_reason.clone());
            let before = revision_of(store, &run_id);
            let result = store.write(|w| {
                w.record_child_exit(child_epoch, &exit)?;
                if let Some(claim) = &claim {
                    if w.run_status(&claim.run_id)? == RunStatus::Running {
                        let stderr = last_stderr_line(&exit.stderr_tail)
                            .map(|line| format!("; its last stderr line: {line}"))
                            .unwrap_or_default();
                        let why = match &stop_reason {
                            Some(stopped) => {
                                format!(
                                    "{stopped}; the host stopped the child ({}){stderr}",
                                    exit.reason
                                )
                            }
                            None => format!(
                                "child exited ({}) before the run reached a boundary{stderr}",
                                exit.reason
                            ),
                        };
                        let shutting_down = state.shutting_down;
                        let released = w.savepoint(|w| {
                            if shutting_down {
                                w.release_at_shutdown(claim)
                            } else if may_forgive {
                                w.release_uncounted(
                                    claim,
                                    &format!(
                                        "a standby worker died before its hello ({})",
                                        exit.reason
                                    ),
                                )
                            } else {
                                w.child_lost(claim, &why)
                            }
                        });
                        forgiven = may_forgive && !shutting_down && released.is_ok();
                        match released {
                            // A stop ends children on purpose, and a standby worker's early
                            // death is forgiven: neither is a loss worth a warning.
                            Ok(r) if shutting_down || forgiven => tracing::info!(
                                run_id = %r.run_id,
                                status = %r.status,
                                "child ended before its run reached a boundary; run released"
                            ),
                            Ok(r) => {
                                tracing::warn!(run_id = %r.run_id, status = %r.status, "child lost")
                            }
                            Err(e) if e.is_claim_lost() => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(())
            });
            if let Err(e) = &result {
                tracing::error!(%run_id, error = %e, "cannot record child exit");
            }
            if forgiven && result.is_ok() {
                tracing::warn!(%run_id, reason = %exit.reason, "a standby worker died before its hello; requeued without counting a loss");
                state.forgiven_standby_exits.insert(run_id.clone());
            } else if ours {
                state.forgiven_standby_exits.remove(&run_id);
            }
            publish(store, state, &run_id, before);
            if ours {
                state.children.remove(&run_id);
                state.graphs.remove(&run_id);
            }
            if claim.is_some() {
                state.claims.remove(&run_id);
                state.renewed_at.remove(&run_id);
            }
        }
    }
}

/// The last non-empty line a child wrote to stderr, for the reason its run records: a child
/// that dies before it can tell the host anything (a runtime that cannot start, a misconfigured
/// command) usually says why there, and a run stopped for review must show it. At most 600
/// bytes; runs of 32 or more hex digits are masked, so nothing shaped like a token reaches
/// status.
pub fn last_stderr_line(stderr_tail: &[u8]) -> Option<String> {
    const MAX_BYTES: usize = 600;
    let text = String::from_utf8_lossy(stderr_tail);
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    Some(crate::protocol::request::bounded_message(
        &mask_hex_runs(line),
        MAX_BYTES,
    ))
}

/// `text` with every run of 32 or more hex digits replaced by `<hex>`: what a child printed
/// reaches status and reasons, and nothing shaped like a token may.
pub fn mask_hex_runs(text: &str) -> String {
    const HEX_RUN: usize = 32;
    let mut out = String::with_capacity(text.len());
    let mut hex = String::new();
    let flush = |out: &mut String, hex: &mut String| {
        if hex.len() >= HEX_RUN {
            out.push_str("<hex>");
        } else {
            out.push_str(hex);
        }
        hex.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            hex.push(c);
        } else {
            flush(&mut out, &mut hex);
            out.push(c);
        }
    }
    flush(&mut out, &mut hex);
    out
}

/// After a batch, forget claims the store released (the run parked, waited or ended). A
/// cancelled run's child is stopped at once; others get the kill grace to exit by themselves.
/// Also forgets the forgiven standby deaths of runs that ended. `only` limits the check to the
/// runs a batch touched (`None`: every held claim, after deadline work such as expiry
/// recovery).
pub fn forget_released_claims(store: &Store, state: &mut HostState, only: Option<&[String]>) {
    let now = store.now_ms();
    // A forgiven standby death matters only to the run's next launch; a run that ended
    // before one (cancelled while queued) leaves nothing behind.
    state.forgiven_standby_exits.retain(|run_id| {
        only.is_some_and(|runs| !runs.contains(run_id))
            || matches!(store.run_state(run_id), Ok((status, _)) if !status.is_terminal())
    });
    let candidates: Vec<&String> = match only {
        Some(runs) => runs
            .iter()
            .filter(|r| state.claims.contains_key(*r))
            .collect(),
        None => state.claims.keys().collect(),
    };
    let released: Vec<(String, RunStatus)> = candidates
        .into_iter()
        .filter_map(
            |run_id| match store.run_state(run_id).map(|(status, _)| status) {
                Ok(RunStatus::Running) => None,
                Ok(status) => Some((run_id.clone(), status)),
                Err(_) => Some((run_id.clone(), RunStatus::Cancelled)),
            },
        )
        .collect();
    for (run_id, status) in released {
        state.claims.remove(&run_id);
        state.renewed_at.remove(&run_id);
        if let Some(entry) = state.children.get_mut(&run_id) {
            entry.released_at.get_or_insert(now);
        }
        if status == RunStatus::Cancelled {
            stop_child(state, &run_id);
        }
    }
}

/// The earliest time a child-related deadline needs the store thread.
pub fn next_child_deadline(store: &Store, state: &HostState) -> Option<i64> {
    let lease = store.config().lease_ms;
    let heartbeat = state.renewed_at.values().map(|t| t + lease / 3).min();
    let handshake = state
        .children
        .values()
        .filter(|e| !e.hello && !e.stopping)
        .map(|e| {
            e.launched_at
                + i64::try_from(state.child_config.handshake_timeout.as_millis())
                    .unwrap_or(i64::MAX)
        })
        .min();
    let validation = state
        .children
        .values()
        .filter_map(|e| validation_deadline(state, e))
        .min();
    let node = if state.claims.is_empty() {
        None
    } else {
        match store.next_node_deadline(&state.owner_id) {
            // A passed deadline may belong to a child being stopped because its timeout could
            // not be routed (an effect was applying): its exit settles the run, and waking up
            // for that deadline until then would spin. Look closer (rare).
            Ok(Some(at)) if at <= store.now_ms() => {
                node_deadline_of_children_not_stopping(store, state)
            }
            Ok(at) => at,
            Err(e) => {
                tracing::error!(error = %e, "cannot read node deadlines; checking again in 1 s");
                Some(store.now_ms() + 1_000)
            }
        }
    };
    let delayed = store.next_delayed_ready().ok().flatten();
    let grace = i64::try_from(state.child_config.kill_grace.as_millis()).unwrap_or(i64::MAX);
    let lingering = state
        .children
        .values()
        .filter(|e| !e.stopping)
        .filter_map(|e| e.released_at)
        .map(|t| t + grace)
        .min();
    [
        heartbeat,
        handshake,
        validation,
        node,
        delayed,
        lingering,
        state.activation_retry_at,
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Whether the run's child is being stopped: its exit settles the run, so its node deadline
/// no longer applies.
fn child_stopping(state: &HostState, run_id: &str) -> bool {
    state.children.get(run_id).is_some_and(|e| e.stopping)
}

/// The earliest node deadline of the held runs whose child is not being stopped.
fn node_deadline_of_children_not_stopping(store: &Store, state: &HostState) -> Option<i64> {
    state
        .claims
        .keys()
        .filter(|run_id| !child_stopping(state, run_id))
        .filter_map(|run_id| store.open_attempt_deadline(run_id).ok().flatten())
        .min()
}

/// When a validate-mode child must have given its verdict (`None` for other children, before
/// its hello, after its verdict, and once it is being stopped).
fn validation_deadline(state: &HostState, e: &ChildEntry) -> Option<i64> {
    if e.stopping || e.released_at.is_some() {
        return None;
    }
    let timeout =
        i64::try_from(state.child_config.validation_timeout.as_millis()).unwrap_or(i64::MAX);
    e.judging_since.map(|t| t.saturating_add(timeout))
}

/// Host-owned child deadlines: heartbeats for long-running children, handshake timeouts,
/// node deadlines (route `timed_out` or end the run `timed_out`, then stop the child).
pub fn due_child_work(store: &mut Store, state: &mut HostState) {
    let now = store.now_ms();
    // A retry of failed activations is due: the scheduling that follows due work does it.
    if state.activation_retry_at.is_some_and(|at| at <= now) {
        state.activation_retry_at = None;
    }
    let lease = store.config().lease_ms;
    // Renewal times only exist for claims we hold; anything else would be a deadline that
    // never clears.
    let held = &state.claims;
    state
        .renewed_at
        .retain(|run_id, _| held.contains_key(run_id));
    // Heartbeats keep a claim alive while its child computes without writing.
    let due: Vec<Claim> = state
        .renewed_at
        .iter()
        .filter(|(_, t)| **t + lease / 3 <= now)
        .filter_map(|(run_id, _)| state.claims.get(run_id).cloned())
        .collect();
    if !due.is_empty() {
        let renewed = store.write(|w| {
            let mut ok = Vec::new();
            for claim in &due {
                if w.savepoint(|w| w.heartbeat(claim)).is_ok() {
                    ok.push(claim.run_id.clone());
                }
            }
            Ok(ok)
        });
        if let Ok(ok) = renewed {
            for run_id in ok {
                state.renewed_at.insert(run_id, now);
            }
        }
    }
    // Handshake timeouts.
    let timeout =
        i64::try_from(state.child_config.handshake_timeout.as_millis()).unwrap_or(i64::MAX);
    let late: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| !e.hello && !e.stopping && e.launched_at + timeout <= now)
        .map(|(r, _)| r.clone())
        .collect();
    for run_id in late {
        tracing::warn!(%run_id, "child did not say hello in time; stopping it");
        stop_child(state, &run_id);
    }
    // Validations that take too long: the child's exit rejects the submission (a loss).
    let slow: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| validation_deadline(state, e).is_some_and(|at| at <= now))
        .map(|(r, _)| r.clone())
        .collect();
    let timeout_ms = state.child_config.validation_timeout.as_millis();
    for run_id in slow {
        tracing::warn!(%run_id, "validation did not finish in time; stopping the child");
        if let Some(e) = state.children.get_mut(&run_id) {
            e.stop_reason = Some(format!("validation timed out after {timeout_ms} ms"));
        }
        stop_child(state, &run_id);
    }
    // Children that did not exit after their run stopped needing them.
    let grace = i64::try_from(state.child_config.kill_grace.as_millis()).unwrap_or(i64::MAX);
    let lingering: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| !e.stopping && e.released_at.is_some_and(|t| t + grace <= now))
        .map(|(r, _)| r.clone())
        .collect();
    for run_id in lingering {
        stop_child(state, &run_id);
    }
    // Node deadlines.
    let claims: Vec<Claim> = state
        .claims
        .values()
        .filter(|c| !child_stopping(state, &c.run_id))
        .cloned()
        .collect();
    for claim in claims {
        let Ok(Some(deadline)) = store.open_attempt_deadline(&claim.run_id) else {
            continue;
        };
        if deadline > now {
            continue;
        }
        let before = revision_of(store, &claim.run_id);
        let result = store.write(|w| time_out_attempt(w, state, &claim));
        publish(store, state, &claim.run_id, before);
        match result {
            Ok(()) => {
                tracing::info!(run_id = %claim.run_id, "node deadline passed; attempt timed out");
                state.claims.remove(&claim.run_id);
                state.renewed_at.remove(&claim.run_id);
                stop_child(state, &claim.run_id);
            }
            Err(e) => {
                // Unsettled work (an effect applying) blocks the routed timeout: stop the child
                // anyway; its exit is handled as a loss, which makes such an effect uncertain.
                tracing::warn!(run_id = %claim.run_id, error = %e, "cannot route the timeout; stopping the child");
                stop_child(state, &claim.run_id);
            }
        }
    }
}

fn time_out_attempt(w: &mut WriteTx<'_>, state: &mut HostState, claim: &Claim) -> StoreResult<()> {
    let Some((attempt_id, node)) = w.current_open_attempt(&claim.run_id)? else {
        return Ok(());
    };
    // The request's deadline passed while its submission was still being judged: the deadline
    // wins (a submission is judged only before it). Rejecting it with that reason makes the
    // request wait again, past its deadline, so the deadline work right after expires it and
    // a fresh child routes `timed_out`. The judging child is stopped by the host, which is
    // no loss of the run (it no longer runs when the child exits).
    if let Some(submission_id) = w.validating_submission(&claim.run_id)? {
        w.settle(
            claim,
            &submission_id,
            Err("the request's deadline passed before this submission was judged".into()),
        )?;
        return Ok(());
    }
    let graph = graph_of(w, state, &claim.run_id)?;
    match graph.route(&node, &Outcome::TimedOut) {
        Ok(Route::Next(next)) => {
            // The run parks right after: the attempt opened here is interrupted, and the next
            // child opens its own (deciding a deadline decided at the start then).
            let deadline = deadline_for(w, &graph, &next, None)?;
            w.transition(
                claim,
                &TransitionRequest {
                    attempt_id,
                    outcome: AttemptOutcome::TimedOut,
                    next_node: next,
                    next_deadline_at: deadline,
                },
            )?;
            // The child still runs the old node: park so a fresh child picks up the route.
            w.park(claim, None)?;
        }
        _ => {
            let error = format!("node {node} passed its deadline");
            w.fail(claim, Some(&attempt_id), &AttemptOutcome::TimedOut, &error)?;
        }
    }
    Ok(())
}

/// Asks the supervisor to stop a run's child (SIGTERM to its group, SIGKILL after the grace).
pub fn stop_child(state: &mut HostState, run_id: &str) {
    if let Some(entry) = state.children.get_mut(run_id) {
        if !entry.stopping {
            entry.stopping = true;
            let Some(supervisor) = &state.supervisor else {
                return;
            };
            let _ = supervisor.send(SupervisorCmd::Stop {
                run_id: run_id.to_owned(),
                generation: entry.generation,
                grace: state.child_config.kill_grace,
            });
        }
    }
}
