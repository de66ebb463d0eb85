//! The I/O of decision channels' adapters (`engine::channels` decides): how they run
//! ([`settings`], read once when the host starts), the configured channels ([`read_specs`]: at
//! the start and on `channel.reload`, on the connection's blocking thread), and one adapter's
//! process ([`watch_channel`], a supervisor task).
//!
//! An adapter is `node <package>/lib/channel-<kind>.js serve <name>`, the host's Node worker
//! runtime's Node (`PIW_NODE`) and package (beside `PIW_NODE_WORKER`). It gets the user's
//! environment (as a workflow child does), `PIW_HOME`, and `PIW_TELEGRAM_API` when the host has
//! it (the Bot API's base URL; tests point it at 127.0.0.1). Its output goes to
//! `logs/channels/<name>.log`.

use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;

use super::helper::{run_helper, HelperStdin};
use super::node_runtime::NodeRuntime;
use super::queues::StoreMsg;
use crate::engine::channels::{ChannelReport, ChannelSettings, ChannelSpec};
use crate::engine::children::{ChildReport, WorkflowEnv};
use crate::store::ChildExitRecord;
use crate::supervise::SpawnSpec;

/// The host's settings that reach an adapter (beyond the user's environment): the Bot API's
/// base URL, and the adapter's test-only fault point.
const ADAPTER_VARS: [&str; 2] = ["PIW_TELEGRAM_API", "PIW_CHANNEL_FAULT"];

/// How this host runs adapters. `node`: the worker runtime (its Node runs the adapter, its
/// package holds it); `workflow_env`: the user's environment as children get it.
pub fn settings(
    node: Result<&NodeRuntime, String>,
    home: &Path,
    logs: &Path,
    workflow_env: &WorkflowEnv,
) -> ChannelSettings {
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
    for var in ADAPTER_VARS {
        if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            env.push((var.into(), value));
        }
    }
    ChannelSettings {
        runtime,
        home: home.to_path_buf(),
        env,
        logs: Some(logs.join("channels")),
    }
}

/// The configured channels, for the engine (names, kinds, digests; never a token).
pub fn read_specs(home: &Path) -> Result<Vec<ChannelSpec>, crate::channels::ChannelError> {
    crate::channels::specs(home)
}

/// One adapter's life ([`run_helper`]): spawned, stopped on request, its exit reported.
pub async fn watch_channel(
    name: String,
    launch: u64,
    spec: SpawnSpec,
    stop: mpsc::UnboundedReceiver<Duration>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
) {
    let started = |pid| {
        tracing::debug!(channel = %name, launch, pid, "channel adapter started");
        std::future::pending()
    };
    let exit = run_helper(spec, HelperStdin::Closed, stop, started)
        .await
        .unwrap_or_else(|e| {
            tracing::error!(channel = %name, error = %e, "cannot launch the channel adapter");
            ChildExitRecord {
                reason: format!("launch failed: {e}"),
                ..Default::default()
            }
        });
    let _ = reports.send(StoreMsg::Child(ChildReport::Channel(
        ChannelReport::Exited { name, launch, exit },
    )));
}
