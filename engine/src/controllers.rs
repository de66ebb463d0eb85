//! Controllers' reconcile passes: the host owns the queue, the claims, the timers and every
//! commit; it runs no controller code. Each pass runs in a supervised child (Node:
//! `lib/controllers/child.js`), which loads the controller's file, runs one pass, and sends
//! what it records and its result back over the protocol (`controller.effect.*`,
//! `controller.pass.finish`), fenced by the pass's claim.
//!
//! This module decides, without I/O: [`reconcile`] (each turn) kills passes past their
//! deadline (recorded `deadline`, requeued with backoff), stops the passes of a controller
//! that was disabled (`interrupted`, no error counted), and launches due passes within the
//! limits: at most `max_passes` at once, at most `max_per_controller` of one controller, never
//! two of one resource (a resource whose child is still alive is skipped, whatever the store
//! says). [`on_reports`] records a child that exited without finishing its pass (an error of
//! the controller, with backoff; while the host stops, an interruption). At a host's start,
//! the store requeues the passes of earlier hosts (`requeue_passes_of_dead_hosts`).
//!
//! A pass's life:
//!
//! ```text
//! resource.apply / .delete / .reconcile ─► queue row due now (one per resource; a held row is
//!    │                                      marked requeue_requested instead)
//!    ▼ each turn: reconcile
//! launch_due: rows due, controller enabled, < PIW_MAX_PASSES (4) at once, < PIW_MAX_PASSES_PER_
//!    │        CONTROLLER (2) of its controller, no live child of the resource
//!    │        → WriteTx::claim_pass (token hash, deadline, host epoch, read version)
//!    │        → SupervisorCmd::LaunchPass: node lib/controllers/child.js, envelope on stdin
//!    ▼
//! child: checks the file's hash, loads it, runReconcilePass; each effect call is a request
//!    │   (controller.effect.record/get/settle) fenced by the pass's claim (fence_pass); a child
//!    │   workflow (controller.workflow.ensure: the name resolved by the child, the file read by
//!    │   the connection as run.start's) starts a detached run per attempt in the same transaction
//!    ▼
//! controller.pass.finish ─► WriteTx::finish_pass, one transaction: status + finalizers written
//!    only over read_version (else outcome `conflict`, due now), deletion when asked and no
//!    finalizer is left, the queue row (`queue_after_pass`: settled → none; requeue → now or
//!    after_ms; error/deadline → backoff with jitter from the store's id source), the pass record
//! ```
//!
//! A pass of a host that died or stopped is requeued at the next start
//! (`requeue_passes_of_dead_hosts` in `driver::recover_at_start`), recorded `interrupted`, no
//! error counted. The protocol's kinds: docs/WORKFLOW_SERVER.md, "Controller kinds".

use std::path::PathBuf;

use serde_json::json;

use super::helper_processes::{self, HelperCommand};
use crate::protocol::RequestKind;
use crate::state::children::SupervisorCmd;
pub use crate::state::controllers::{Controllers, PassEntry, PassSettings};
use crate::state::HostState;
use crate::store::controllers::{PassEnd, PassLaunch};
use crate::store::{ChildExitRecord, Storage};
use crate::time::UnixMillis;

/// Bytes of a pass child's output kept for its exit's record.
const TAIL_BYTES: usize = 8 * 1024;

/// A pass child's process, reported by the supervisor.
#[derive(Debug)]
pub enum PassReport {
    /// It exited, or never started (`exit.reason` says).
    Exited {
        resource_uid: String,
        launch: u64,
        exit: ChildExitRecord,
    },
}

impl PassReport {
    /// The launch the report is about.
    pub fn launch(&self) -> u64 {
        match self {
            PassReport::Exited { launch, .. } => *launch,
        }
    }
}

/// Whether a request of `kind` may change what passes are due: the queue is read again.
pub fn may_change_queue(kind: RequestKind) -> bool {
    use RequestKind as K;
    matches!(
        kind,
        K::ControllerRegister
            | K::ControllerEnable
            | K::ControllerDisable
            | K::ResourceApply
            | K::ResourceDelete
            | K::ResourceReconcile
            | K::ControllerPassFinish
            | K::ControllerWorkflowEnsure
    )
}

/// Notes the kinds of a batch: one that may change the queue makes the next turn read it
/// (a run that ends wakes the resources it is a child workflow of: any kind that may end a
/// run counts).
pub fn note_requests(state: &mut HostState, kinds: impl IntoIterator<Item = RequestKind>) {
    if kinds
        .into_iter()
        .any(|k| may_change_queue(k) || crate::bridges::may_change_detached_steps(k))
    {
        state.controllers.up_to_date = false;
    }
}

/// Something other than a request may have ended a run (a child's loss, a deadline): the
/// next turn reads the queue.
pub fn note_other_writes(state: &mut HostState) {
    state.controllers.up_to_date = false;
}

/// Kills, stops and launches passes as the module documentation says. Runs each turn.
pub fn reconcile(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    if state.shutting_down || !state.supervising {
        return;
    }
    let Some(settings) = state.child_config.controllers.clone() else {
        return;
    };
    kill_overdue(store, state, now);
    let due = state.controllers.next_at.is_some_and(|at| at <= now);
    if state.controllers.up_to_date && !due {
        return;
    }
    stop_disabled(store, state, now);
    launch_due(store, state, now, &settings);
    state.controllers.up_to_date = true;
    state.controllers.next_at = match store.next_controller_due_after(now) {
        Ok(at) => at,
        Err(e) => {
            crate::store_error!(
                e,
                "cannot read when the next pass is due; looking again in 1 s"
            );
            Some(now.saturating_add(1_000))
        }
    };
}

/// Passes past their deadline: stopped, and recorded `deadline` (the backoff follows).
fn kill_overdue(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    let overdue: Vec<(String, PassEntry)> = state
        .controllers
        .live
        .iter()
        .filter(|(_, e)| !e.stopping && e.deadline_at <= now)
        .map(|(uid, e)| (uid.clone(), e.clone()))
        .collect();
    for (uid, entry) in overdue {
        tracing::warn!(resource = %uid, pass = %entry.pass_id, "a reconcile pass ran past its deadline; killing it");
        end(store, state, now, &uid, &entry, PassEnd::Deadline);
    }
}

/// The passes of controllers no longer enabled: stopped, recorded `interrupted`.
fn stop_disabled(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    let live: Vec<(String, PassEntry)> = state
        .controllers
        .live
        .iter()
        .filter(|(_, e)| !e.stopping)
        .map(|(uid, e)| (uid.clone(), e.clone()))
        .collect();
    for (uid, entry) in live {
        let (project_dir, name) = &entry.controller;
        let enabled = match store.controller(project_dir, name) {
            Ok(c) => c.is_some_and(|c| c.enabled),
            Err(e) => {
                crate::store_error!(e, "cannot read a controller");
                continue;
            }
        };
        if !enabled {
            tracing::info!(resource = %uid, controller = %name, "the controller was disabled; stopping its pass");
            end(store, state, now, &uid, &entry, PassEnd::Interrupted);
        }
    }
}

/// Orders a pass's child stopped and records how the pass ended.
fn end(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    uid: &str,
    entry: &PassEntry,
    how: PassEnd,
) {
    let result = store.write(now, |w| {
        w.end_pass(uid, &entry.pass_id, &how)?;
        Ok(())
    });
    if let Err(e) = result {
        crate::store_error!(e, resource = %uid, "cannot record the end of a pass");
    }
    if let Some(e) = state.controllers.live.get_mut(uid) {
        e.stopping = true;
    }
    state.child_commands.push(SupervisorCmd::StopPass {
        launch: entry.launch,
        grace: state.child_config.kill_grace,
    });
    state.controllers.up_to_date = false;
}

/// Claims and launches due passes within the limits.
fn launch_due(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    settings: &PassSettings,
) {
    if let Err(why) = &settings.runtime {
        // Nothing is claimed: the resources stay queued for a host that can run them.
        if state.controllers.launches == 0 && !state.controllers.up_to_date {
            tracing::warn!(%why, "controllers' passes cannot run on this host");
        }
        return;
    }
    let running = state.controllers.live.len();
    if running >= settings.max_passes {
        return;
    }
    // Rows skipped for a busy controller or resource must not hide the rows after them.
    let look_at = settings
        .max_passes
        .saturating_add(running)
        .saturating_add(16);
    let due = match store.due_resources(now, look_at) {
        Ok(due) => due,
        Err(e) => {
            crate::store_error!(e, "cannot read the due passes");
            return;
        }
    };
    for row in due {
        if state.controllers.live.len() >= settings.max_passes {
            break;
        }
        if state.controllers.live.contains_key(&row.resource_uid) {
            continue;
        }
        let of_controller = state
            .controllers
            .live
            .values()
            .filter(|e| e.controller.0 == row.project_dir && e.controller.1 == row.controller)
            .count();
        if of_controller >= settings.max_per_controller {
            continue;
        }
        let epoch = state.epoch;
        let mut claimed = None;
        let result = store.write(now, |w| {
            claimed = Some(w.claim_pass(&row.resource_uid, epoch)?);
            Ok(())
        });
        match (result, claimed) {
            (Ok(()), Some(pass)) => launch(state, now, settings, pass),
            (Err(e), _) => {
                crate::store_error!(e, resource = %row.resource_uid, "cannot claim a due pass")
            }
            (Ok(()), None) => {}
        }
    }
}

/// The child of a claimed pass: `node <lib>/controllers/child.js`, its envelope on stdin.
fn launch(state: &mut HostState, now: UnixMillis, settings: &PassSettings, pass: PassLaunch) {
    let uid = pass.resource.uid.clone();
    let entry = PassEntry {
        launch: state.next_launch,
        pass_id: pass.pass_id.clone(),
        controller: (
            pass.controller.project_dir.clone(),
            pass.controller.name.clone(),
        ),
        deadline_at: pass.deadline_at,
        stopping: false,
    };
    state.next_launch += 1;
    state.controllers.launches += 1;
    let Ok((node, lib)) = settings.runtime.clone() else {
        return;
    };
    let envelope = json!({
        "resource_uid": uid,
        "pass_id": pass.pass_id,
        "token": pass.token.expose_secret(),
        "project_dir": pass.controller.project_dir,
        "controller": pass.controller.name,
        "source_path": pass.controller.source_path,
        "source_hash": pass.controller.source_hash,
        "deadline_ms": (pass.deadline_at - now).max(1),
        "resource": pass.resource,
    });
    let command = HelperCommand {
        program: node,
        args: vec![lib
            .join("controllers")
            .join("child.js")
            .display()
            .to_string()],
        env: settings.env.clone(),
        cwd: PathBuf::from(&pass.controller.project_dir),
    };
    let log = settings
        .logs
        .as_ref()
        .map(|dir| dir.join(format!("{uid}.log")));
    let mut spec = helper_processes::spawn_spec(state, command, None, TAIL_BYTES, log);
    spec.stdin_payload = envelope.to_string().into_bytes();
    tracing::info!(resource = %uid, pass = %pass.pass_id, controller = %pass.controller.name, launch = entry.launch, "launching a reconcile pass");
    state.child_commands.push(SupervisorCmd::LaunchPass {
        resource_uid: uid.clone(),
        launch: entry.launch,
        spec,
    });
    state.controllers.live.insert(uid, entry);
}

/// Handles pass children's exits: one that ended on its own without finishing its pass failed
/// (the store records nothing when the pass was finished or ended already).
pub fn on_reports(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    reports: Vec<PassReport>,
) {
    for report in reports {
        let PassReport::Exited {
            resource_uid,
            launch,
            exit,
        } = report;
        let Some(entry) = state
            .controllers
            .live
            .get(&resource_uid)
            .filter(|e| e.launch == launch)
            .cloned()
        else {
            continue;
        };
        state.controllers.live.remove(&resource_uid);
        state.controllers.up_to_date = false;
        if entry.stopping {
            continue;
        }
        let how = if state.shutting_down {
            PassEnd::Interrupted
        } else {
            let stderr = String::from_utf8_lossy(&exit.stderr_tail);
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            let said = if last.trim().is_empty() {
                String::new()
            } else {
                format!(": {last}")
            };
            PassEnd::ChildFailed {
                message: format!("the pass's child {} before it finished{said}", exit.reason),
            }
        };
        let result = store.write(now, |w| w.end_pass(&resource_uid, &entry.pass_id, &how));
        match result {
            Ok(Some(ended)) => {
                tracing::warn!(resource = %resource_uid, pass = %entry.pass_id, outcome = ended.outcome.as_str(), reason = %exit.reason, "a reconcile pass's child exited before it finished")
            }
            Ok(None) => {}
            Err(e) => {
                crate::store_error!(e, resource = %resource_uid, "cannot record a pass child's exit")
            }
        }
    }
}

/// When the host must look at passes next: a running pass's deadline, the next due pass;
/// at once when the queue changed since it was read.
pub fn next_deadline(state: &HostState, now: UnixMillis) -> Option<i64> {
    state.child_config.controllers.as_ref()?;
    if state.shutting_down || !state.supervising {
        return None;
    }
    let c = &state.controllers;
    let deadlines = c
        .live
        .values()
        .filter(|e| !e.stopping)
        .map(|e| e.deadline_at);
    let stale = (!c.up_to_date).then_some(now);
    deadlines.chain(c.next_at).chain(stale).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_that_change_the_queue() {
        assert!(may_change_queue(RequestKind::ResourceApply));
        assert!(may_change_queue(RequestKind::ControllerPassFinish));
        assert!(!may_change_queue(RequestKind::ResourceGet));
        assert!(!may_change_queue(RequestKind::ControllerEffectRecord));
        assert!(!may_change_queue(RequestKind::RunStatus));
    }
}
