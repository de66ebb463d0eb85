//! The I/O of controllers' pass children (`engine::controllers` decides): how they run
//! ([`settings`], read once when the host starts) and one pass child's process
//! ([`watch_pass`], a supervisor task).
//!
//! A pass child is `node <package>/lib/controllers/child.js`, the host's Node worker runtime's
//! Node (`PIW_NODE`) and package (beside `PIW_NODE_WORKER`), in the controller's project
//! directory. Its envelope (the resource, the pass's credentials, the controller's file) is its
//! stdin. It gets the user's environment (as a workflow child does) and `PIW_HOME`, and speaks
//! to the host as a client. Its output goes to `logs/passes/<resource uid>.log`. The limits:
//! `PIW_MAX_PASSES` (default 4) at once, `PIW_MAX_PASSES_PER_CONTROLLER` (default 2) of one
//! controller.

use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;

use super::helper::{run_helper, HelperStdin};
use super::node_runtime::NodeRuntime;
use super::queues::StoreMsg;
use crate::engine::children::{ChildReport, WorkflowEnv};
use crate::engine::controllers::{PassReport, PassSettings};
use crate::engine::state::controllers::{DEFAULT_MAX_PASSES, DEFAULT_MAX_PASSES_PER_CONTROLLER};
use crate::store::ChildExitRecord;
use crate::supervise::SpawnSpec;

/// How this host runs pass children: `node`, the worker runtime (its Node runs the pass, its
/// package holds the entry); `workflow_env`: the user's environment as children get it; the
/// limits from `PIW_MAX_PASSES` and `PIW_MAX_PASSES_PER_CONTROLLER`.
pub fn settings(
    node: Result<&NodeRuntime, String>,
    home: &Path,
    logs: &Path,
    workflow_env: &WorkflowEnv,
) -> PassSettings {
    let runtime = node.and_then(|rt| match rt.worker.parent() {
        Some(package) => Ok((rt.node.clone(), package.join("lib"))),
        None => Err("the Node worker runtime has no package directory".to_owned()),
    });
    let mut env: Vec<_> = workflow_env
        .iter()
        .filter(|(k, _)| k != "PIW_HOME")
        .cloned()
        .collect();
    env.push(("PIW_HOME".into(), home.as_os_str().to_owned()));
    let limit = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(default, |n| n.max(1))
    };
    PassSettings {
        runtime,
        env,
        logs: Some(logs.join("passes")),
        max_passes: limit("PIW_MAX_PASSES", DEFAULT_MAX_PASSES),
        max_per_controller: limit(
            "PIW_MAX_PASSES_PER_CONTROLLER",
            DEFAULT_MAX_PASSES_PER_CONTROLLER,
        ),
    }
}

/// One pass child's life ([`run_helper`]): spawned with its envelope on stdin, stopped on
/// request, its exit reported.
pub async fn watch_pass(
    resource_uid: String,
    launch: u64,
    spec: SpawnSpec,
    stop: mpsc::UnboundedReceiver<Duration>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
) {
    let started = |pid| {
        tracing::debug!(resource = %resource_uid, launch, pid, "pass child started");
        std::future::pending()
    };
    let exit = run_helper(spec, HelperStdin::Closed, stop, started)
        .await
        .unwrap_or_else(|e| {
            tracing::error!(resource = %resource_uid, error = %e, "cannot launch a pass child");
            ChildExitRecord {
                reason: format!("launch failed: {e}"),
                ..Default::default()
            }
        });
    let _ = reports.send(StoreMsg::Child(ChildReport::Pass(PassReport::Exited {
        resource_uid,
        launch,
        exit,
    })));
}
