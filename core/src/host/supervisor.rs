//! The supervisor task: owns the child processes. It launches what the store thread asks
//! for, reports starts and exits back, and stops process groups on request. It decides
//! nothing about runs.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;

use super::children::ChildReport;
use super::store_thread::StoreMsg;
use crate::store::ChildExitRecord;
use crate::supervise::{self, SpawnSpec};

/// What the store thread asks of the supervisor.
#[derive(Debug)]
pub enum SupervisorCmd {
    Launch {
        run_id: String,
        generation: u64,
        child_epoch: i64,
        spec: SpawnSpec,
    },
    Stop {
        run_id: String,
        generation: u64,
        grace: Duration,
    },
}

/// Runs until the command channel closes, then stops every child it still has.
pub async fn run(
    mut commands: mpsc::UnboundedReceiver<SupervisorCmd>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
    stop_grace: Duration,
) {
    let mut stops: HashMap<(String, u64), mpsc::UnboundedSender<Duration>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(cmd) = commands.recv().await {
        stops.retain(|_, tx| !tx.is_closed());
        match cmd {
            SupervisorCmd::Launch {
                run_id,
                generation,
                child_epoch,
                spec,
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                stops.insert((run_id.clone(), generation), tx);
                tasks.spawn(watch_child(
                    run_id,
                    generation,
                    child_epoch,
                    spec,
                    rx,
                    reports.clone(),
                ));
            }
            SupervisorCmd::Stop {
                run_id,
                generation,
                grace,
            } => {
                if let Some(tx) = stops.get(&(run_id, generation)) {
                    let _ = tx.send(grace);
                }
            }
        }
    }
    // The host is stopping: stop every child's group, then wait for their exits to be reported.
    for tx in stops.values() {
        let _ = tx.send(stop_grace);
    }
    while tasks.join_next().await.is_some() {}
}

async fn watch_child(
    run_id: String,
    generation: u64,
    child_epoch: i64,
    spec: SpawnSpec,
    mut stop: mpsc::UnboundedReceiver<Duration>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
) {
    let program = spec.program.display().to_string();
    let mut child = match supervise::spawn(spec).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(%run_id, error = %e, "cannot launch the child");
            let exit = ChildExitRecord {
                reason: format!("launch failed: {e}"),
                ..Default::default()
            };
            let _ = reports.send(StoreMsg::Child(ChildReport::Exited {
                run_id,
                generation,
                child_epoch,
                exit,
            }));
            return;
        }
    };
    let _ = reports.send(StoreMsg::Child(ChildReport::Started {
        run_id: run_id.clone(),
        generation,
        child_epoch,
        pid: child.pid(),
        start_time: child.start_time(),
    }));
    tracing::debug!(%run_id, generation, pid = child.pid(), %program, "child started");
    let killer = child.killer();
    let mut reason = "exited";
    let exit = loop {
        tokio::select! {
            exit = child.wait() => break exit,
            grace = stop.recv() => match grace {
                Some(grace) => {
                    reason = "stopped by the host";
                    // SIGTERM to the group now, SIGKILL after the grace; the exit arrives above.
                    killer.terminate(grace);
                }
                // Nobody can ask us to stop any more; just wait.
                None => break child.wait().await,
            },
        }
    };
    let record = ChildExitRecord {
        exit_code: exit.code,
        signal: exit.signal,
        reason: match (exit.code, exit.signal) {
            (Some(c), _) => format!("{reason} with code {c}"),
            (None, Some(s)) => format!("{reason} by signal {s}"),
            _ => reason.to_owned(),
        },
        stdout_tail: exit.stdout_tail,
        stderr_tail: exit.stderr_tail,
    };
    let _ = reports.send(StoreMsg::Child(ChildReport::Exited {
        run_id,
        generation,
        child_epoch,
        exit: record,
    }));
}
