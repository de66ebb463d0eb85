//! The store thread: the only owner of the read-write SQLite connection.
//!
//! Requests arrive over a channel. The thread drains whatever is queued and hands it to the
//! engine's turn ([`crate::engine::turn`]), which decides everything: it answers reads and
//! commits all durable commands of the batch in **one** transaction (group commit). This
//! thread carries out what the turn asks ([`Effect`]): replies and events leave through the
//! outbox ([`super::outbox`]), only once the commits they may reflect are on disk (the thread
//! goes on with the next batch while the syncer waits for that); launches and stops go to the
//! supervisor; the fault plan's points are called where the engine names them. Between
//! batches the thread sleeps until the next durable deadline, or indefinitely when nothing is
//! due (no idle wake-ups).

use crate::store::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

use super::fault::FaultPlan;
use super::outbox::Outbox;
use super::queues::{ReplyTx, SupervisorTx};
use crate::engine::state::HostState;
use crate::engine::turn::{self as engine_turn, Effect, Effects};
use crate::engine::{retention, timers};
use crate::store::{Store, StoreError};

pub use super::queues::{Job, Published, RunEvent, StoreMsg};
pub use crate::engine::turn::MAX_BATCH;

/// Runs the store thread until every sender is gone and the queue is drained. What it reveals
/// leaves through `outbox`.
pub fn run(
    mut store: Store,
    mut state: HostState,
    mut outbox: Outbox,
    jobs: Receiver<StoreMsg>,
    supervisor: SupervisorTx,
    fault: FaultPlan,
    epoch: i64,
) {
    let mut supervisor = Some(supervisor);
    // A host that starts with a detached run's step open serves it before any request comes:
    // one turn with nothing received (its bridges looked at, ready runs scheduled).
    turn(
        &mut store,
        &mut state,
        &mut outbox,
        Vec::new(),
        None,
        &fault,
        &mut supervisor,
    );
    outbox.flush(store.commits(), true);
    // A message taken off the queue to learn whether the thread was idle, handled next.
    let mut next: Option<StoreMsg> = None;
    loop {
        let now = store.now_ms();
        let deadline = timers::next_deadline_at(&store, &state, now);
        let wait = deadline.map(|at| {
            // A floor of 1 ms: a deadline that the due work could not clear must not spin.
            Duration::from_millis(u64::try_from(at - now).unwrap_or(0).max(1))
        });
        let first = match next.take() {
            Some(msg) => Some(msg),
            None => match wait {
                Some(wait) => match jobs.recv_timeout(wait) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match jobs.recv() {
                    Ok(msg) => Some(msg),
                    Err(_) => break,
                },
            },
        };
        let mut msgs: Vec<StoreMsg> = first.into_iter().collect();
        if !msgs.is_empty() {
            while msgs.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(msg) => msgs.push(msg),
                    Err(_) => break,
                }
            }
        }
        turn(
            &mut store,
            &mut state,
            &mut outbox,
            msgs,
            deadline,
            &fault,
            &mut supervisor,
        );
        // With nothing queued, this thread may as well wait for the disk itself (no hop to
        // the syncer thread); otherwise the syncer waits while this thread goes on.
        let idle = match jobs.try_recv() {
            Ok(msg) => {
                next = Some(msg);
                false
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => true,
        };
        outbox.flush(store.commits(), idle);
    }
    if let Err(e) = store.write(|w| w.end_host_epoch(epoch)) {
        tracing::error!(error = %e, "cannot record the host's clean stop");
    }
    outbox.close(store.commits());
    tracing::debug!("store thread drained and stopped");
}

/// One turn of the store thread, after it took `msgs` off its queue (none when it woke for
/// `deadline`, the earliest deadline it knew of before it waited): the engine's turn at the
/// store's clock's time (read once here: the engine reads no clock), its effects carried out
/// as it asks. What it reveals waits in `outbox` for the next flush.
pub fn turn(
    store: &mut Store,
    state: &mut HostState,
    outbox: &mut Outbox,
    msgs: Vec<StoreMsg>,
    deadline: Option<i64>,
    fault: &FaultPlan,
    supervisor: &mut Option<SupervisorTx>,
) {
    let mut edges = Edges {
        outbox,
        fault,
        supervisor,
        sweep_run_logs: None,
    };
    let now = store.now_ms();
    engine_turn::turn(store, state, now, msgs, deadline, &mut edges);
    // The turn holds the store while it runs: its sweep, which reads it, comes after.
    if let Some(logs) = edges.sweep_run_logs.take() {
        sweep_run_logs(store, &logs, edges.supervisor);
    }
}

/// `Effect::SweepRunLogs` (at the host's first prune): the log directories under `logs` of runs
/// that no longer exist (a crash between a prune's commit and their removal left them), for the
/// supervisor to remove. Reading the directory is I/O, so it is the driver's.
fn sweep_run_logs(store: &Store, logs: &Path, supervisor: &mut Option<SupervisorTx>) {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return;
    };
    let dirs: Vec<_> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .filter(|run_id| run_id.starts_with("run-") && matches!(store.run_view(run_id), Ok(None)))
        .filter_map(|run_id| retention::run_log_dir(logs, &run_id))
        .collect();
    if let (false, Some(tx)) = (dirs.is_empty(), supervisor.as_ref()) {
        let _ = tx.send(crate::engine::children::SupervisorCmd::RemoveLogs { dirs });
    }
}

/// Where a turn's effects go: the outbox, the supervisor's channel, the fault plan.
struct Edges<'a> {
    outbox: &'a mut Outbox,
    fault: &'a FaultPlan,
    supervisor: &'a mut Option<SupervisorTx>,
    /// Where the turn asked for a sweep of leftover run logs, carried out after it.
    sweep_run_logs: Option<PathBuf>,
}

impl Effects<ReplyTx> for Edges<'_> {
    fn apply(&mut self, effect: Effect<ReplyTx>) {
        match effect {
            Effect::Reply { to, result } => self.outbox.reply(to, result),
            Effect::Event(event) => self.outbox.event(event),
            Effect::ReadsAnswered { commits } => self.outbox.flush_if_synced(commits),
            Effect::Child(command) => {
                if let Some(tx) = self.supervisor.as_ref() {
                    let _ = tx.send(command);
                }
            }
            Effect::EndSupervision => *self.supervisor = None,
            Effect::SweepRunLogs { logs } => self.sweep_run_logs = Some(logs),
        }
    }

    fn publishing(&self) -> bool {
        self.outbox.has_subscribers()
    }

    fn before_commit(&mut self, kinds: &[&str]) -> Result<(), StoreError> {
        self.fault.before_commit(kinds.iter().copied());
        if self.fault.fail_commit(kinds.iter().copied()) {
            return Err(StoreError::InjectedFault("fail_commit".into()));
        }
        Ok(())
    }

    fn after_commit(&mut self, kinds: &[&str]) {
        self.fault.after_commit(kinds.iter().copied());
    }
}
