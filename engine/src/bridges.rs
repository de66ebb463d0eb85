//! Bridges: the host's Pi RPC children that serve the interactive steps (`agent`,
//! `assistantMessage`) of detached runs. A bridge is Pi in RPC mode with the
//! package's `extension/bridge.js`, bound to one run (`PIW_BRIDGE_RUN`); it presents the run's
//! open step to its model, lets it submit through the same validation path as a session, and
//! exits once the run has no step for it (`node-binding/lib/bridge.js`, `BRIDGE_EXIT`).
//!
//! This module decides, without I/O: [`plan`] compares the open steps of detached runs (the
//! store's [`DetachedStep`]s) with the bridges alive and orders launches, stops and failed
//! attempts; [`exit_verdict`] says what a bridge's exit means for the step it served. The
//! supervisor (`driver::supervisor`) runs the processes; `driver::bridge_launch` finds Pi and
//! reads the settings.
//!
//! The rules:
//! - one bridge per run, launched when the run has an open `pending` step, none serves it and
//!   something names its Pi model, or Pi has a default one ([`pi_model`]; else the step waits
//!   for a client); it holds a child slot (`PIW_MAX_CHILDREN`), shared with its run's own child (the
//!   validation of its submissions), so a run never waits on itself for a slot;
//! - handshake: the bridge takes its run's lock (`$PIW_HOME/bridges/<run>.lock`, which then
//!   holds its pid) as its extension loads, before its first call; one that has not within
//!   [`BridgeSettings::handshake_timeout`] is stopped and its step fails;
//! - it is stopped (SIGTERM, SIGKILL after the kill grace) once its run has no open step:
//!   answered, expired at the node deadline, paused, cancelled, ended, in review;
//! - an exit the host did not order while the step is still open (killed, crashed, Pi could not
//!   start, the run refused) fails the step's attempt with the reason, and the run routes as
//!   the node says (`interaction.fail`); a submission being judged is judged first, and the
//!   attempt fails only if it is rejected (no submission is taken twice, none is lost).

use crate::time::UnixMillis;
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::helper_processes::{self, HelperCommand};
pub use crate::detached_model::{pi_model, INPUT_KEY};
use crate::process::workflow_environment;
use crate::protocol::{payload, Request, RequestBody, RequestKind};
pub use crate::state::bridges::{
    BridgeEntry, BridgeSettings, Bridges, ModelSource, PiCommand, PiDefault, PiModel, StopReason,
};
use crate::state::children::{ChildConfig, SupervisorCmd};
use crate::state::HostState;
use crate::store::{ChildExitRecord, DetachedStep, Storage};

/// Bytes of a bridge's stdout and stderr kept for its exit reason.
const BRIDGE_TAIL_BYTES: usize = 16 * 1024;

/// How a bridge exits (`node-binding/lib/bridge.js` `BRIDGE_EXIT`).
pub mod exit_code {
    /// The run has no step for a bridge any more.
    pub const DONE: i32 = 0;
    /// Pi itself could not start.
    pub const PI_FAILED: i32 = 1;
    /// Another bridge serves the run.
    pub const BUSY: i32 = 3;
    /// No such run, or not a detached one.
    pub const UNUSABLE: i32 = 4;
    /// The host did not answer.
    pub const HOST_GONE: i32 = 5;
}

impl BridgeSettings {
    /// The lock file a bridge of `run_id` holds (its handshake).
    pub fn lock_file(&self, run_id: &str) -> PathBuf {
        self.home.join("bridges").join(format!("{run_id}.lock"))
    }

    /// The bridge's command line (`lib/bridge.js` `bridgeCommand`'s) with `model`. The model
    /// sees what a session's model sees in the run's project (its context files, skills and
    /// prompt templates) but no other extension; a model from Pi's own settings is left to Pi
    /// to choose (no `--provider`, `--model`), so the project's settings apply as in a session.
    fn command(&self, pi: &PiCommand, model: &PiModel) -> (PathBuf, Vec<String>) {
        let mut args = pi.prefix.clone();
        args.extend(
            [
                "--mode",
                "rpc",
                "--no-session",
                "--no-extensions",
                "--no-themes",
                "-e",
            ]
            .map(str::to_owned),
        );
        args.push(self.extension.display().to_string());
        if model.source == ModelSource::Named {
            args.extend([
                "--provider".to_owned(),
                model.provider.clone(),
                "--model".to_owned(),
                model.model.clone(),
            ]);
        }
        args.extend(model.pi_args.iter().cloned());
        (pi.program.clone(), args)
    }
}

/// Whether a workflow snapshot has a step a Pi model answers in a detached run (`agent`,
/// `assistantMessage`), in it or in a workflow it includes; true when it cannot be read (the
/// safe answer: the start is then checked as one that needs a model).
pub fn needs_a_model(definition: &serde_json::Value) -> bool {
    match crate::graph::Graph::parse(definition) {
        Ok(graph) => graph.nodes.values().any(|n| n.kind.is_interactive()),
        Err(_) => true,
    }
}

/// Who serves `run`'s open interactive step now (`run.status`'s `step_service`), from what the
/// host knows: the run's mode, whether its session is there, its bridge, the host's bridge
/// settings and the run's Pi model. `None` when the run has no pending step, is paused (its
/// steps wait for the resume) or has ended.
pub fn step_service(
    store: &dyn Storage,
    state: &HostState,
    run: &crate::store::RunRecord,
    interactions: &[crate::store::InteractionRecord],
) -> Option<crate::protocol::reply::StepService> {
    use crate::store::{Holder, RunStatus};
    if run.paused || run.status.is_terminal() || run.status == RunStatus::Review {
        return None;
    }
    let step = interactions
        .iter()
        .find(|i| i.run_id == run.run_id && i.status == "pending")?;
    let service = |served_by: &str, why: Option<&str>| crate::protocol::reply::StepService {
        interaction_id: step.interaction_id.clone(),
        served_by: served_by.to_owned(),
        why: why.map(str::to_owned),
        model: None,
        detail: None,
    };
    if run.execution_mode != "detached" {
        let present = run.origin_session.as_ref().is_some_and(|session| {
            super::presence::is_present(state, &Holder::Session(session.clone()))
        });
        return Some(if present {
            service("session", None)
        } else {
            service("nobody", Some("session_closed"))
        });
    }
    let Some(settings) = state.child_config.bridges.as_ref() else {
        return Some(service("nobody", Some("bridges_off")));
    };
    // The model the host read for the step, else read now as it will be.
    let model = match state.bridges.models.get(&run.run_id) {
        Some(model) => model.clone(),
        None => store
            .run_payload(&run.run_id)
            .ok()
            .and_then(|(input, definition, _)| pi_model(definition.as_ref(), &input, settings)),
    };
    let Some(model) = model else {
        return Some(service("nobody", Some("no_model")));
    };
    let named = Some(format!("{}/{}", model.provider, model.model));
    if state.bridges.live.contains_key(&run.run_id) {
        return Some(crate::protocol::reply::StepService {
            model: named,
            ..service("bridge", None)
        });
    }
    Some(match &settings.pi {
        Err(why) => crate::protocol::reply::StepService {
            model: named,
            detail: Some(why.clone()),
            ..service("nobody", Some("no_pi"))
        },
        Ok(_) => crate::protocol::reply::StepService {
            model: named,
            ..service("bridge_starting", None)
        },
    })
}

impl Bridges {
    /// Notes a batch of requests of `kinds`: those that can open or close an interactive step
    /// of a detached run ([`may_change_detached_steps`]) make the next [`reconcile`] look.
    pub fn note_requests(&mut self, kinds: impl IntoIterator<Item = RequestKind>) {
        if kinds.into_iter().any(may_change_detached_steps) {
            self.up_to_date = false;
        }
    }

    /// Slots the bridges hold: one per run that has a bridge and no child of its own.
    pub fn slots_held(
        &self,
        children: &BTreeMap<String, crate::state::children::ChildEntry>,
    ) -> usize {
        self.live
            .keys()
            .filter(|run| !children.contains_key(*run))
            .count()
    }
}

/// Whether a request of `kind` can open or close an interactive step of a detached run, or
/// make a run detached, paused, resumed, ended or retried: what sends the bridges to look again.
/// Every kind is named (no wildcard), so a new kind is classified where it is added: a kind
/// missing here once left a run detached mid-step with nobody serving its open step.
pub fn may_change_detached_steps(kind: RequestKind) -> bool {
    use RequestKind as K;
    match kind {
        K::WorkerInteractionRequest
        | K::WorkerValidationResult
        | K::WorkerFail
        | K::WorkerExit
        | K::WorkerComplete
        | K::InteractionSubmit
        | K::InteractionFail
        | K::RunDetach
        | K::RunPause
        | K::RunResume
        | K::RunCancel
        | K::RunRetry
        | K::EffectResolve
        | K::Repair
        | K::RunPrune => true,
        // The steps of workflow children and what clients read or acknowledge: the hot path,
        // which must not pay for a read of the detached steps.
        K::HostStatus
        | K::HostStop
        | K::ChannelReload
        | K::RunStart
        | K::RunStatus
        | K::RunList
        | K::CheckpointAnswer
        | K::DecisionAnswer
        | K::InteractionList
        | K::InteractionUpdate
        | K::InteractionValuePut
        | K::MessageClaim
        | K::MessageAck
        | K::Subscribe
        | K::Unsubscribe
        | K::ValueGet
        | K::Diagnose
        | K::WorkerHello
        | K::WorkerNodeStarted
        | K::WorkerTransition
        | K::WorkerProgress
        | K::WorkerWait
        | K::WorkerWaitUntil
        | K::WorkerNotify
        | K::WorkerEffectReserve
        | K::WorkerEffectApplying
        | K::WorkerEffectSettle
        | K::WorkerValuePut
        | K::WorkerResults => false,
        // Controllers' resources and passes: no run's step.
        K::ControllerRegister
        | K::ControllerEnable
        | K::ControllerDisable
        | K::ResourceApply
        | K::ResourceGet
        | K::ResourceList
        | K::ResourceDelete
        | K::ResourceReconcile
        | K::ControllerEffectRecord
        | K::ControllerEffectGet
        | K::ControllerEffectSettle
        | K::ControllerWorkflowEnsure
        | K::ControllerPassFinish => false,
    }
}

/// What [`plan`] orders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeOrder {
    /// Start a bridge for the step's run.
    Launch(DetachedStep),
    /// Stop the bridge of `run_id`.
    Stop { run_id: String, why: StopReason },
    /// Fail the step's attempt (`interaction.fail`) with `reason`; the run routes.
    Fail { step: DetachedStep, reason: String },
}

/// What the host must do about bridges, given the open steps of detached runs (`steps`, as the
/// store lists them), the bridges alive, whether a run has its own child (`has_child`: the slot
/// is shared), the free child slots, the settings (`None`: the host runs no bridges) and `now`.
pub fn plan(
    steps: &[DetachedStep],
    bridges: &Bridges,
    has_child: &dyn Fn(&str) -> bool,
    mut free_slots: usize,
    settings: Option<&BridgeSettings>,
    now: i64,
) -> Vec<BridgeOrder> {
    let mut open: BTreeMap<&str, &DetachedStep> = BTreeMap::new();
    for step in steps {
        open.entry(step.run_id.as_str()).or_insert(step);
    }
    let handshake_bound =
        settings.map(|s| i64::try_from(s.handshake_timeout.as_millis()).unwrap_or(i64::MAX));
    let check_live = |run_id: &str, entry: &BridgeEntry| {
        let why = if !open.contains_key(run_id) {
            StopReason::StepClosed
        } else {
            let bound = handshake_bound?;
            if entry.hello || now.saturating_sub(entry.launched_at) < bound {
                return None;
            }
            StopReason::Handshake {
                after_ms: u64::try_from(bound).unwrap_or(0),
            }
        };
        let run_id = run_id.to_owned();
        Some(BridgeOrder::Stop { run_id, why })
    };
    let check_open = |run_id: &str, step: &DetachedStep| {
        if step.validating {
            // Being judged: the verdict comes first.
            return None;
        }
        if let Some(reason) = bridges.lost.get(&step.interaction_id) {
            let (step, reason) = (step.clone(), reason.clone());
            return Some(BridgeOrder::Fail { step, reason });
        }
        let settings = settings?;
        // Nothing names a Pi model for it: its steps wait for a client, as before bridges.
        if !matches!(bridges.models.get(run_id), Some(Some(_))) {
            return None;
        }
        if let Err(why) = &settings.pi {
            let reason = format!("no Pi to serve this detached step: {why}");
            return Some(BridgeOrder::Fail {
                step: step.clone(),
                reason,
            });
        }
        if !has_child(run_id) {
            free_slots = free_slots.checked_sub(1)?;
        }
        Some(BridgeOrder::Launch(step.clone()))
    };
    helper_processes::plan(
        &bridges.live,
        |entry| entry.stopping.is_some(),
        check_live,
        open.iter().map(|(run_id, step)| (*run_id, *step)),
        check_open,
    )
}

/// What a bridge's exit means for the step it served: `Some(reason)` when the step must fail
/// (if it is still open), `None` when nothing is lost. `step_open`: the step it served is still
/// open (pending or being judged).
pub fn exit_verdict(
    entry: &BridgeEntry,
    exit: &ChildExitRecord,
    step_open: bool,
) -> Option<String> {
    if !step_open {
        return None;
    }
    let why = last_line(&exit.stderr_tail);
    let said = |text: &str| {
        if why.is_empty() {
            text.to_owned()
        } else {
            format!("{text}: {why}")
        }
    };
    match (&entry.stopping, exit.exit_code, exit.signal) {
        (Some(StopReason::StepClosed), _, _) => None,
        (Some(StopReason::Handshake { after_ms }), _, _) => Some(format!(
            "the Pi bridge did not start serving the run within {after_ms} ms and was stopped"
        )),
        (None, Some(exit_code::DONE), _) => {
            Some(said("the Pi bridge ended while its step was still open"))
        }
        (None, Some(exit_code::PI_FAILED), _) => Some(said("Pi could not start (exit 1)")),
        (None, Some(exit_code::BUSY), _) => Some(said("another bridge serves the run")),
        (None, Some(exit_code::UNUSABLE), _) => {
            Some(said("the Pi bridge refused the run (exit 4)"))
        }
        (None, Some(exit_code::HOST_GONE), _) => {
            Some(said("the Pi bridge lost its connection to the host"))
        }
        (None, Some(code), _) => Some(said(&format!("the Pi bridge exited with code {code}"))),
        (None, None, Some(signal)) => Some(format!("the Pi bridge was killed by signal {signal}")),
        (None, None, None) => Some(format!("the Pi bridge was lost: {}", exit.reason)),
    }
}

/// The last non-empty line of a process's output tail, bounded.
fn last_line(tail: &[u8]) -> String {
    let text = String::from_utf8_lossy(tail);
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    line.chars().take(500).collect()
}

/// A bridge's process reported by the supervisor.
#[derive(Debug)]
pub enum BridgeReport {
    /// It took its run's lock (its handshake).
    Hello { run_id: String, launch: u64 },
    /// It exited, or never started (`exit.reason` says).
    Exited {
        run_id: String,
        launch: u64,
        exit: ChildExitRecord,
    },
}

/// Handles bridge reports: a hello marks the handshake; an exit frees the slot and, when the
/// host did not order it while the step was open, fails the step ([`exit_verdict`]).
pub fn on_reports(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    reports: Vec<BridgeReport>,
) {
    if reports.is_empty() {
        return;
    }
    state.bridges.up_to_date = false;
    let steps = match store.detached_steps() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the detached steps");
            Vec::new()
        }
    };
    for report in reports {
        match report {
            BridgeReport::Hello { run_id, launch } => {
                if let Some(entry) = state
                    .bridges
                    .live
                    .get_mut(&run_id)
                    .filter(|e| e.launch == launch)
                {
                    entry.hello = true;
                    tracing::info!(%run_id, launch, "the bridge took its run");
                    // From its hello the bridge presents its run's steps: their time runs.
                    super::presence::bridge_changed(store, state, now, &run_id);
                }
            }
            BridgeReport::Exited {
                run_id,
                launch,
                exit,
            } => {
                let Some(entry) = state
                    .bridges
                    .live
                    .get(&run_id)
                    .filter(|e| e.launch == launch)
                    .cloned()
                else {
                    continue;
                };
                state.bridges.live.remove(&run_id);
                // Nobody presents the run's steps any more: their time stops.
                if entry.hello {
                    super::presence::bridge_changed(store, state, now, &run_id);
                }
                let open = steps
                    .iter()
                    .any(|s| s.interaction_id == entry.interaction_id);
                let verdict = if state.shutting_down {
                    None
                } else {
                    exit_verdict(&entry, &exit, open)
                };
                tracing::info!(%run_id, reason = %exit.reason, failure = ?verdict, "bridge exited");
                if let Some(reason) = verdict {
                    state.bridges.lost.insert(entry.interaction_id, reason);
                }
            }
        }
    }
}

/// Compares the open steps of detached runs with the bridges alive, and orders launches,
/// stops and failed attempts ([`plan`]). Runs on the store thread after each turn's work.
pub fn reconcile(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    let Some(settings) = state.child_config.bridges.clone() else {
        return;
    };
    if state.bridges.retry_at.is_some_and(|at| at <= now) {
        state.bridges.retry_at = None;
        state.bridges.up_to_date = false;
    }
    if state.shutting_down || !state.supervising || state.bridges.up_to_date {
        return;
    }
    state.bridges.up_to_date = true;
    let steps = match store.detached_steps() {
        Ok(s) => s,
        Err(e) => return tracing::error!(error = %e, "cannot read the detached steps"),
    };
    if steps.is_empty()
        && state.bridges.live.is_empty()
        && state.bridges.lost.is_empty()
        && state.bridges.models.is_empty()
    {
        return;
    }
    // Each run's Pi model, read once while it has an open step (its definition and input do
    // not change).
    state
        .bridges
        .models
        .retain(|run, _| steps.iter().any(|s| &s.run_id == run));
    for step in &steps {
        if state.bridges.models.contains_key(&step.run_id) {
            continue;
        }
        let model = match store.run_payload(&step.run_id) {
            Ok((input, definition, _)) => pi_model(definition.as_ref(), &input, &settings),
            Err(e) => {
                tracing::error!(run_id = %step.run_id, error = %e, "cannot read the run's input");
                None
            }
        };
        state.bridges.models.insert(step.run_id.clone(), model);
    }
    // Forget losses of steps that closed meanwhile (their submission was accepted).
    state
        .bridges
        .lost
        .retain(|id, _| steps.iter().any(|s| &s.interaction_id == id));
    // A bridge serves whatever step its run has open now.
    for step in &steps {
        if let Some(entry) = state.bridges.live.get_mut(&step.run_id) {
            entry.interaction_id.clone_from(&step.interaction_id);
        }
    }
    let free = state
        .child_config
        .max_children
        .saturating_sub(state.live_children());
    let children = &state.children;
    let orders = plan(
        &steps,
        &state.bridges,
        &|run| children.contains_key(run),
        free,
        Some(&settings),
        now,
    );
    for order in orders {
        match order {
            BridgeOrder::Launch(step) => launch(state, &settings, &step, now),
            BridgeOrder::Stop { run_id, why } => {
                if let Some(entry) = state.bridges.live.get_mut(&run_id) {
                    tracing::info!(%run_id, ?why, "stopping the bridge");
                    entry.stopping = Some(why);
                    state.child_commands.push(SupervisorCmd::StopBridge {
                        launch: entry.launch,
                        grace: state.child_config.kill_grace,
                    });
                }
            }
            BridgeOrder::Fail { step, reason } => fail_step(store, state, now, &step, &reason),
        }
    }
}

/// Orders the launch of the bridge of `step`'s run.
fn launch(state: &mut HostState, settings: &BridgeSettings, step: &DetachedStep, now: i64) {
    let Ok(pi) = &settings.pi else { return };
    let Some(Some(model)) = state.bridges.models.get(&step.run_id) else {
        return;
    };
    let (program, args) = settings.command(pi, model);
    let launch = state.next_launch;
    state.next_launch += 1;
    let cfg: &ChildConfig = &state.child_config;
    let mut env = workflow_environment(&cfg.workflow_env, Some(("PIW_BRIDGE_RUN", &step.run_id)));
    env.push(("PIW_HOME".into(), settings.home.clone().into_os_string()));
    // Its stdin is never written: Pi in RPC mode reads commands from it and exits at its end.
    let command = HelperCommand {
        program,
        args,
        env,
        cwd: PathBuf::from(&step.project_dir),
    };
    let log = cfg.output_logs.as_ref();
    let log = log.map(|dir| dir.join(&step.run_id).join(format!("bridge-{launch}.log")));
    let spec =
        helper_processes::spawn_spec(state, command, cfg.cpu_seconds, BRIDGE_TAIL_BYTES, log);
    tracing::info!(run_id = %step.run_id, interaction = %step.interaction_id, launch, "launching a bridge");
    state.bridges.live.insert(
        step.run_id.clone(),
        BridgeEntry {
            launch,
            interaction_id: step.interaction_id.clone(),
            launched_at: now,
            hello: false,
            stopping: None,
        },
    );
    state.child_commands.push(SupervisorCmd::LaunchBridge {
        run_id: step.run_id.clone(),
        launch,
        spec,
        lock_file: settings.lock_file(&step.run_id),
    });
}

/// Fails the attempt of `step` as `interaction.fail` does (the run routes as its node says).
fn fail_step(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    step: &DetachedStep,
    reason: &str,
) {
    let fail = payload::InteractionFail {
        interaction_id: step.interaction_id.clone(),
        reason: reason.to_owned(),
    };
    let mut request = Request::new(
        format!("bridge-{}", step.interaction_id),
        RequestBody::InteractionFail(fail.clone()),
    );
    request.run_id = Some(step.run_id.clone());
    request.node_id = Some(step.node_id.clone());
    request.attempt_id = Some(step.attempt_id.clone());
    let state_ref: &HostState = state;
    let result = store.write(now, |w| {
        crate::handlers::interaction::fail(w, state_ref, &request, &fail)?;
        Ok(w.take_runs_written())
    });
    match result {
        Ok(written) => {
            tracing::warn!(run_id = %step.run_id, interaction = %step.interaction_id, %reason, "failed a detached step");
            state.unpublished.extend(written);
        }
        Err(e) => {
            crate::store_error!(e, run_id = %step.run_id, "cannot fail the detached step; trying again");
            // The step stays open with no bridge, and nothing else may make the bridges look
            // again: the loss is kept and failed again at the retry.
            state.bridges.retry_at = Some(now.saturating_add(FAIL_RETRY_MS));
            return;
        }
    }
    state.bridges.lost.remove(&step.interaction_id);
}

/// How long after a failed commit failing a detached step (a full disk) it is tried again.
pub const FAIL_RETRY_MS: i64 = 1_000;

/// When a bridge's handshake bound passes next.
pub fn next_deadline(state: &HostState) -> Option<i64> {
    let settings = state.child_config.bridges.as_ref()?;
    let bound = i64::try_from(settings.handshake_timeout.as_millis()).unwrap_or(i64::MAX);
    state
        .bridges
        .live
        .values()
        .filter(|e| !e.hello && e.stopping.is_none())
        .map(|e| e.launched_at.saturating_add(bound))
        .chain(state.bridges.retry_at)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn step(run: &str, interaction: &str, validating: bool) -> DetachedStep {
        DetachedStep {
            run_id: run.into(),
            interaction_id: interaction.into(),
            attempt_id: format!("att-{interaction}"),
            node_id: "draft".into(),
            validating,
            project_dir: "/p".into(),
        }
    }

    fn settings() -> BridgeSettings {
        BridgeSettings {
            pi: Ok(PiCommand {
                program: "/node".into(),
                prefix: vec!["/pi/cli.js".into()],
                describe: "test".into(),
            }),
            extension: "/pkg/extension/bridge.js".into(),
            preflight: None,
            provider: Some("mock".into()),
            model: Some("mock-model".into()),
            pi_args: vec!["--offline".into()],
            pi_default: None,
            home: "/home/piw".into(),
            handshake_timeout: Duration::from_secs(30),
        }
    }

    fn entry(interaction: &str, launched_at: i64) -> BridgeEntry {
        BridgeEntry {
            launch: 7,
            interaction_id: interaction.into(),
            launched_at,
            hello: false,
            stopping: None,
        }
    }

    fn exit(code: Option<i32>, signal: Option<i32>, stderr: &str) -> ChildExitRecord {
        ChildExitRecord {
            exit_code: code,
            signal,
            reason: "exited".into(),
            stderr_tail: stderr.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    const NO_CHILD: &dyn Fn(&str) -> bool = &|_| false;

    /// Bridges with a Pi model known for each of `runs`.
    fn served(runs: &[&str]) -> Bridges {
        let mut b = Bridges::default();
        for run in runs {
            b.models.insert(
                (*run).to_owned(),
                pi_model(None, &serde_json::json!({}), &settings()),
            );
        }
        b
    }

    #[test]
    fn an_open_step_without_a_bridge_gets_one_while_slots_last() {
        let steps = [step("r1", "i1", false), step("r2", "i2", false)];
        let s = settings();
        let orders = plan(&steps, &served(&["r1", "r2"]), NO_CHILD, 1, Some(&s), 0);
        assert_eq!(orders, [BridgeOrder::Launch(steps[0].clone())]);
        // A run whose own child holds a slot shares it with its bridge.
        let orders = plan(
            &steps,
            &served(&["r1", "r2"]),
            &|r| r == "r2",
            0,
            Some(&s),
            0,
        );
        assert_eq!(orders, [BridgeOrder::Launch(steps[1].clone())]);
    }

    #[test]
    fn no_bridge_without_settings_or_for_a_step_being_judged() {
        let steps = [step("r1", "i1", false), step("r2", "i2", true)];
        assert!(plan(&steps, &served(&["r1", "r2"]), NO_CHILD, 4, None, 0).is_empty());
        let s = settings();
        let orders = plan(&steps, &served(&["r1", "r2"]), NO_CHILD, 4, Some(&s), 0);
        assert_eq!(orders, [BridgeOrder::Launch(steps[0].clone())]);
        // Nothing names a Pi model for the run: its step waits for a client.
        let mut unnamed = served(&["r1"]);
        unnamed.models.insert("r1".into(), None);
        assert!(plan(&steps, &unnamed, NO_CHILD, 4, Some(&s), 0).is_empty());
    }

    #[test]
    fn a_step_that_closed_stops_its_bridge_and_a_served_step_gets_no_second_one() {
        let mut bridges = Bridges::default();
        bridges.live.insert("r1".into(), entry("i1", 0));
        bridges.live.insert("r2".into(), entry("i2", 0));
        let s = settings();
        let steps = [step("r1", "i1", false)];
        let orders = plan(&steps, &bridges, NO_CHILD, 4, Some(&s), 10);
        assert_eq!(
            orders,
            [BridgeOrder::Stop {
                run_id: "r2".into(),
                why: StopReason::StepClosed
            }]
        );
    }

    #[test]
    fn a_bridge_silent_past_the_handshake_bound_is_stopped_and_its_step_fails() {
        let mut bridges = Bridges::default();
        bridges.live.insert("r1".into(), entry("i1", 1_000));
        let s = settings();
        let steps = [step("r1", "i1", false)];
        assert!(plan(&steps, &bridges, NO_CHILD, 4, Some(&s), 30_999).is_empty());
        let orders = plan(&steps, &bridges, NO_CHILD, 4, Some(&s), 31_000);
        let why = StopReason::Handshake { after_ms: 30_000 };
        assert_eq!(
            orders,
            [BridgeOrder::Stop {
                run_id: "r1".into(),
                why: why.clone()
            }]
        );
        let mut stopped = entry("i1", 1_000);
        stopped.stopping = Some(why);
        let verdict = exit_verdict(&stopped, &exit(None, Some(15), ""), true);
        assert_eq!(
            verdict.as_deref(),
            Some("the Pi bridge did not start serving the run within 30000 ms and was stopped")
        );
        // Once it took its run, no bound applies.
        if let Some(e) = bridges.live.get_mut("r1") {
            e.hello = true;
        }
        assert!(plan(&steps, &bridges, NO_CHILD, 4, Some(&s), 99_000).is_empty());
    }

    #[test]
    fn a_lost_bridge_fails_its_step_once_no_submission_is_being_judged() {
        let mut bridges = Bridges::default();
        bridges.lost.insert("i1".into(), "killed".into());
        let s = settings();
        // Being judged: wait for the verdict.
        assert!(plan(
            &[step("r1", "i1", true)],
            &bridges,
            NO_CHILD,
            4,
            Some(&s),
            0
        )
        .is_empty());
        // Rejected (pending again): the attempt fails rather than a new bridge starting.
        let pending = step("r1", "i1", false);
        let orders = plan(
            std::slice::from_ref(&pending),
            &bridges,
            NO_CHILD,
            4,
            Some(&s),
            0,
        );
        assert_eq!(
            orders,
            [BridgeOrder::Fail {
                step: pending,
                reason: "killed".into()
            }]
        );
    }

    #[test]
    fn without_a_pi_a_detached_step_fails_with_the_reason_instead_of_waiting() {
        let mut s = settings();
        s.pi = Err("Pi not found: no pi on PATH".into());
        let pending = step("r1", "i1", false);
        let orders = plan(
            std::slice::from_ref(&pending),
            &served(&["r1"]),
            NO_CHILD,
            4,
            Some(&s),
            0,
        );
        assert_eq!(
            orders,
            [BridgeOrder::Fail {
                step: pending,
                reason: "no Pi to serve this detached step: Pi not found: no pi on PATH".into()
            }]
        );
    }

    #[test]
    fn each_exit_says_what_it_means_for_an_open_step() {
        let e = entry("i1", 0);
        let verdict =
            |code, signal, stderr: &str| exit_verdict(&e, &exit(code, signal, stderr), true);
        assert_eq!(
            verdict(None, Some(9), "").as_deref(),
            Some("the Pi bridge was killed by signal 9")
        );
        assert_eq!(
            verdict(Some(1), None, "Error: No API key found for mock\n").as_deref(),
            Some("Pi could not start (exit 1): Error: No API key found for mock")
        );
        assert_eq!(
            verdict(Some(4), None, "piw bridge: run r1: run r1 is not detached\n").as_deref(),
            Some("the Pi bridge refused the run (exit 4): piw bridge: run r1: run r1 is not detached")
        );
        assert!(verdict(Some(3), None, "").is_some());
        assert!(
            verdict(Some(0), None, "").is_some(),
            "an open step was left"
        );
        // A step that closed loses nothing, whatever the exit.
        assert_eq!(exit_verdict(&e, &exit(None, Some(9), ""), false), None);
        // Nor does an exit the host ordered because the step closed.
        let mut stopped = entry("i1", 0);
        stopped.stopping = Some(StopReason::StepClosed);
        assert_eq!(
            exit_verdict(&stopped, &exit(Some(143), None, ""), true),
            None
        );
    }

    #[test]
    fn the_pi_model_comes_from_the_workflow_then_the_input_then_the_host() {
        use serde_json::json;
        let s = settings();
        let host = pi_model(None, &json!({"task": "x"}), &s).expect("the host's");
        assert_eq!(
            (
                host.provider.as_str(),
                host.model.as_str(),
                host.pi_args.clone()
            ),
            ("mock", "mock-model", vec!["--offline".to_owned()])
        );
        let input = json!({"piw_detached": {"model": "from-input", "pi_args": ["--a"]}});
        let m = pi_model(None, &input, &s).expect("input over host");
        assert_eq!(
            (m.provider.as_str(), m.model.as_str()),
            ("mock", "from-input")
        );
        assert_eq!(m.pi_args, ["--a"]);
        let definition = json!({"detached": {"provider": "wf", "model": "from-workflow"}});
        let m = pi_model(Some(&definition), &input, &s).expect("workflow over input");
        assert_eq!(
            (m.provider.as_str(), m.model.as_str()),
            ("wf", "from-workflow")
        );
        assert_eq!(
            m.pi_args,
            ["--a"],
            "each field from the first place that sets it"
        );
        assert_eq!(m.source, ModelSource::Named);
        let mut bare = settings();
        bare.provider = None;
        assert_eq!(
            pi_model(None, &json!({}), &bare),
            None,
            "no provider anywhere, and Pi has no default"
        );
        bare.pi_default = Some(PiDefault {
            provider: "pi-p".into(),
            model: "pi-m".into(),
        });
        let m = pi_model(None, &json!({}), &bare).expect("Pi's own default");
        assert_eq!(
            (m.provider.as_str(), m.model.as_str(), m.source),
            ("pi-p", "pi-m", ModelSource::PiSettings)
        );
        let m = pi_model(Some(&definition), &json!({}), &bare).expect("the workflow's");
        assert_eq!(
            (m.model.as_str(), m.source),
            ("from-workflow", ModelSource::Named),
            "a model the workflow names comes before Pi's default"
        );
    }

    #[test]
    fn only_agent_and_assistant_message_steps_need_a_model() {
        use serde_json::json;
        let graph = |kind: &str| json!({"name": "w", "start": "a", "nodes": {"a": {"kind": kind}}, "edges": []});
        assert!(!needs_a_model(&graph("compute")));
        assert!(!needs_a_model(&graph("checkpoint")));
        assert!(needs_a_model(&graph("agent")));
        assert!(needs_a_model(&graph("assistant_message")));
        assert!(
            needs_a_model(&json!({"not": "a graph"})),
            "unreadable: checked"
        );
    }

    #[test]
    fn only_requests_that_can_open_or_close_a_step_make_the_bridges_look_again() {
        let mut b = Bridges {
            up_to_date: true,
            ..Bridges::default()
        };
        b.note_requests([
            RequestKind::WorkerNodeStarted,
            RequestKind::WorkerTransition,
            RequestKind::WorkerProgress,
            RequestKind::InteractionUpdate,
            RequestKind::RunStart,
        ]);
        assert!(
            b.up_to_date,
            "a workflow child's steps change no detached step"
        );
        b.note_requests([
            RequestKind::WorkerTransition,
            RequestKind::WorkerInteractionRequest,
        ]);
        assert!(!b.up_to_date, "a new interactive step");
        b.up_to_date = true;
        b.note_requests([RequestKind::RunPause]);
        assert!(!b.up_to_date, "a paused run's bridge stops");
        b.up_to_date = true;
        b.note_requests([RequestKind::RunDetach]);
        assert!(
            !b.up_to_date,
            "a run detached while its step is open gets a bridge at once"
        );
    }

    #[test]
    fn the_command_line_is_the_bridge_contract() {
        let s = settings();
        let model = pi_model(None, &serde_json::json!({}), &s).expect("the host's model");
        let (program, args) = s.command(s.pi.as_ref().expect("a pi"), &model);
        assert_eq!(program, PathBuf::from("/node"));
        assert_eq!(
            args.join(" "),
            "/pi/cli.js --mode rpc --no-session --no-extensions --no-themes \
             -e /pkg/extension/bridge.js --provider mock --model mock-model --offline"
        );
        // Pi's own default: Pi chooses, as in a session in the project.
        let mut bare = settings();
        bare.provider = None;
        bare.pi_default = Some(PiDefault {
            provider: "p".into(),
            model: "m".into(),
        });
        let model = pi_model(None, &serde_json::json!({}), &bare).expect("Pi's default");
        let (_, args) = bare.command(bare.pi.as_ref().expect("a pi"), &model);
        assert_eq!(
            args.join(" "),
            "/pi/cli.js --mode rpc --no-session --no-extensions --no-themes \
             -e /pkg/extension/bridge.js --offline"
        );
        assert_eq!(
            s.lock_file("run-1"),
            PathBuf::from("/home/piw/bridges/run-1.lock")
        );
    }
}
