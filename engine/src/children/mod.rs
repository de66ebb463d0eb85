//! Children, as the store thread sees them: the scheduler that activates ready runs and
//! launches one child each, the dispatch of worker messages (checked against the run's claim
//! generation and graph snapshot), child exits, and the host-owned deadlines (node timeouts,
//! handshake timeouts, claim heartbeats).
//!
//! This file holds the scheduler and the launches; [`messages`] applies what a child says;
//! [`watch`] handles exits and the deadlines. Processes themselves are the supervisor task's
//! business (`piw_host::driver::supervisor`); this module only decides: its orders (`commands`)
//! wait in `HostState::child_commands` until the store thread sends them on.
//!
//! - Here, the scheduler: `activate_and_launch` (in a batch's transaction, or `schedule`)
//!   activates ready runs in free slots (claim, generation + 1, child record) and orders their
//!   launches (`state::children::SupervisorCmd`), sent on before the commit;
//!   `settle_activations` abandons those of a failed transaction, so no child runs a node on an
//!   uncommitted claim (its hello counts only in a later batch).
//! - `messages`: a worker connection speaks only for its own run and generation
//!   (`admission::worker_may_send`, checked by the driver's `conn`); `apply_worker` checks the
//!   token on hello, stores the graph snapshot at the first activation (a changed digest →
//!   review), checks each step with `Graph::check_transition` (`check_route`), fails the run at
//!   the step limits (`fail_at_step_limit`), sets node deadlines (`deadline_for`), and parks an
//!   attempt on a durable timer (`worker_wait_until`: the wake time decided once, from the
//!   host's clock).
//! - `watch`: `on_child_report` records exits (a run still running → `child_lost`: requeue,
//!   review after 3 losses or an uncertain effect; while the host stops → released; a child
//!   refused for want of room, `Input::ChildRefused`, is requeued without counting a loss);
//!   `due_child_work`: heartbeats (lease/3), handshake and validation timeouts, node deadlines
//!   (`time_out_attempt`), lingering children. The store expires claims and pending requests.

use crate::time::UnixMillis;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::graph::{Graph, NodeKind, Outcome, Route};
use crate::ids::ClaimToken;
use crate::protocol::launch::{LaunchEnvelope, MountedSource, LAUNCH_SCHEMA};
use crate::protocol::{payload, Request, RequestBody};
use crate::state::HostState;
use crate::store::{
    AttemptOutcome, ChildExitRecord, ChildMode, Claim, Resume, RunStatus, Storage, StoreError,
    StoreResult, Transaction, TransitionRequest,
};

mod messages;
mod watch;
use crate::process::workflow_environment;
pub use crate::process::{mask_hex_runs, CHILD_LOG_BYTES};
pub use crate::state::children::{
    ChildConfig, ChildEntry, MissingRuntime, Runtime, StandbyPool, SupervisorCmd,
};
pub use messages::*;
pub use watch::*;

/// Bytes of stdout and of stderr kept on a child's record.
const CHILD_TAIL_BYTES: usize = 64 * 1024;

/// The log file of child `child_epoch` of run `run_id` under the installation's `logs`
/// directory: `<logs>/<run_id>/<child_epoch>.log`.
pub fn child_log_path(logs: &Path, run_id: &str, child_epoch: i64) -> PathBuf {
    logs.join(run_id).join(format!("{child_epoch}.log"))
}

/// Environment variables a child gets besides what the supervisor always passes on.
pub type WorkflowEnv = Vec<(std::ffi::OsString, std::ffi::OsString)>;

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
        /// The child never started because the host ran out of this (descriptors, memory,
        /// processes): the host's own failure, retried later without counting a loss.
        host_ran_out_of: Option<&'static str>,
    },
    /// About a detached run's bridge (`super::bridges`).
    Bridge(super::bridges::BridgeReport),
    /// About a decision channel's adapter (`super::channels`).
    Channel(super::channels::ChannelReport),
    /// About a controller's pass child (`super::controllers`).
    Pass(super::controllers::PassReport),
}

impl ChildReport {
    /// The launch the report is about.
    fn launch(&self) -> u64 {
        match self {
            ChildReport::Started { launch, .. } | ChildReport::Exited { launch, .. } => *launch,
            ChildReport::Bridge(
                super::bridges::BridgeReport::Hello { launch, .. }
                | super::bridges::BridgeReport::Exited { launch, .. },
            ) => *launch,
            ChildReport::Channel(super::channels::ChannelReport::Exited { launch, .. }) => *launch,
            ChildReport::Pass(report) => report.launch(),
        }
    }
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
pub fn schedule(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    schedule_with(store, state, now, &mut |_| {});
}

/// [`schedule`], calling `before_commit` inside each activation's transaction once its launches
/// are ordered: the store thread sends them on there, so a worker loads while the commit
/// reaches the disk.
pub fn schedule_with(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    before_commit: &mut dyn FnMut(&mut HostState),
) {
    loop {
        let free = activation_slots(state);
        if free == 0 {
            return;
        }
        // A read first: most loops of the store thread find nothing ready, and need no write
        // transaction to learn it.
        match store.ready_runs(now, free as u32) {
            Ok(ready) if ready.is_empty() => return,
            Ok(_) => {}
            Err(e) => return tracing::error!(error = %e, "cannot list ready runs"),
        }
        let before = state.children.len();
        let mut activations = Activations::default();
        let committed = store.write(now, |w| {
            activations = activate_and_launch(w, state);
            before_commit(state);
            Ok(())
        });
        if let Err(e) = &committed {
            crate::store_error!(e, "activation batch failed");
        }
        settle_activations(state, now, committed.is_ok(), &mut activations);
        if committed.is_err() || activations.runs.is_empty() {
            return;
        }
        for run in &activations.runs {
            publish(state, &run.run.run_id, run.revision_before);
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

/// Slots activations may use: the free ones, and those that bridges hold for runs without a
/// child (a run's child shares its bridge's slot: the validation of the bridge's submission
/// never waits on the bridge).
fn activation_slots(state: &HostState) -> usize {
    free_slots(state) + state.bridges.slots_held(&state.children)
}

/// Asks for the events a write outside the request batches committed for `run_id` to be
/// published (`HostState::unpublished`).
fn publish(state: &mut HostState, run_id: &str, after: u64) {
    state.unpublished.push((run_id.to_owned(), after));
}

fn revision_of(store: &dyn Storage, run_id: &str) -> u64 {
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
fn activate_ready(w: &mut dyn Transaction, state: &mut HostState) -> Vec<ActivatedRun> {
    let free = activation_slots(state);
    if free == 0 || state.shutting_down || !state.supervising {
        return Vec::new();
    }
    // Runs with a bridge use its slot; the others need a free one.
    let mut unshared = free_slots(state);
    let ready = match w.ready_runs(free as u32) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot list ready runs");
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(ready.len());
    for run_id in ready {
        if !state.bridges.live.contains_key(&run_id) {
            if unshared == 0 {
                continue;
            }
            unshared -= 1;
        }
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
                let error = match MissingRuntime::reason_for(
                    &state.child_config.missing_runtimes,
                    &run.source_root,
                ) {
                    Some(reason) => format!("cannot run {}: {reason}", run.source_root),
                    None => format!("no runtime is configured for {}", run.source_root),
                };
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

/// Inside an open transaction: activates ready runs ([`activate_ready`]) and orders their
/// children's launches **before** the commit (the store thread sends them on before the commit,
/// so a worker loads while the commit reaches the disk). That
/// is safe because a child can do nothing the host accepts before its hello, and the store
/// thread handles the hello only after this transaction ended (it handles one batch at a
/// time). After a commit that failed with children already launched, the children wait for
/// their commit until one succeeds (`HostState::launch_after_commit`), so a commit that keeps
/// failing does not start and stop children in a loop. Pass the result to
/// [`settle_activations`] once the transaction has ended, whatever its outcome.
pub fn activate_and_launch(w: &mut dyn Transaction, state: &mut HostState) -> Activations {
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
        if state.supervising {
            state.child_commands.push(SupervisorCmd::Stop {
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
    let token = ClaimToken::generate(&mut *state.ids);
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
            disconnected_at: None,
            pid: None,
        },
    );
    state.renewed_at.insert(run_id.to_owned(), now);
    state.claims.insert(run_id.to_owned(), act.claim.clone());
    let cfg = &state.child_config;
    let mut args = runtime.args.clone();
    args.push(run.source_root.clone());
    if !state.supervising {
        return None;
    }
    let limits = crate::process::ChildLimits {
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
            template: crate::process::SpawnSpec {
                program: runtime.program.clone(),
                args: runtime.args.iter().map(Into::into).collect(),
                // Tells the runtime it may warm up while it waits for a run's envelope.
                env: workflow_environment(&cfg.workflow_env, Some(("PIW_STANDBY", "1"))),
                cwd: state
                    .socket_path
                    .parent()
                    .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
                stdin_payload: Vec::new(),
                limits,
                nice: cfg.nice,
                tail_bytes: CHILD_TAIL_BYTES,
                scope: state.supervision_scope.clone(),
                // Given when a run takes the worker (`supervisor`).
                output_log: None,
            },
        })
    });
    let command = SupervisorCmd::Launch {
        run_id: run_id.to_owned(),
        generation: act.claim.generation,
        child_epoch,
        launch,
        spec: crate::process::SpawnSpec {
            program: runtime.program.clone(),
            args: args.into_iter().map(Into::into).collect(),
            env: workflow_environment(&cfg.workflow_env, Some(("PIW_RUN_ID", run_id))),
            cwd: PathBuf::from(&run.project_dir),
            stdin_payload: stdin,
            limits,
            nice: cfg.nice,
            tail_bytes: CHILD_TAIL_BYTES,
            scope: state.supervision_scope.clone(),
            output_log: cfg.output_logs.as_ref().map(|dir| {
                Box::new(crate::process::OutputLog {
                    path: child_log_path(dir, run_id, child_epoch),
                    cap_bytes: CHILD_LOG_BYTES,
                })
            }),
        },
        standby,
    };
    state.child_commands.push(command);
    tracing::debug!(%run_id, generation = act.claim.generation, "child launch requested");
    Some(PendingLaunch {
        run_id: run_id.to_owned(),
        generation: act.claim.generation,
        launch,
    })
}

/// The part of the host's environment a workflow's child gets: the one the process that
/// started the host had (a Pi session, a shell running `piw`), so node code and the commands it
/// runs see the user's credentials variables, proxies and tools' settings as they would in that
/// session. The host's own settings (`PIW_*`) stay with the host, except `PIW_HOME`, which the
/// supervisor passes on, and the settings of the workflow runtime itself
/// ([`WORKFLOW_RUNTIME_VARS`]). Nothing here is written anywhere: the values live in the host's
/// memory and the child's.
pub fn workflow_env_of(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    vars.filter(|(key, _)| {
        let key = key.to_string_lossy();
        !key.starts_with("PIW_") || key == "PIW_HOME" || WORKFLOW_RUNTIME_VARS.contains(&&*key)
    })
    .collect()
}

/// `PIW_*` settings meant for the code a child runs, not for the host: `PIW_PI`, the Pi command
/// that built-ins start Pi processes with (`node-binding/pi-cli.mjs`), and the Pi model a
/// detached run's bridge is given (`PIW_DETACHED_PROVIDER`, `PIW_DETACHED_MODEL`,
/// `PIW_DETACHED_PI_ARGS`), which built-ins that start Pi themselves (autoimplement's
/// reviewer) use as the bridges do.
pub const WORKFLOW_RUNTIME_VARS: [&str; 4] = [
    "PIW_PI",
    "PIW_DETACHED_PROVIDER",
    "PIW_DETACHED_MODEL",
    "PIW_DETACHED_PI_ARGS",
];

#[cfg(test)]
mod env_tests {
    use super::workflow_env_of;
    use std::ffi::OsString;

    #[test]
    fn a_child_gets_the_users_variables_and_piw_pi_but_not_the_hosts_settings() {
        let vars = [
            "GH_TOKEN",
            "PIW_HOME",
            "PIW_PI",
            "PIW_DETACHED_MODEL",
            "PIW_MAX_CHILDREN",
            "PIW_FAULT",
            "PIW_PIX",
            "PIW_DETACHED_BRIDGES",
        ]
        .map(|k| (OsString::from(k), OsString::from("v")));
        let kept: Vec<_> = workflow_env_of(vars.into_iter())
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap_or_default())
            .collect();
        assert_eq!(
            kept,
            ["GH_TOKEN", "PIW_HOME", "PIW_PI", "PIW_DETACHED_MODEL"]
        );
    }
}
