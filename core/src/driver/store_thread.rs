//! The store thread: the only owner of the read-write SQLite connection.
//!
//! Requests arrive over a channel. The thread drains whatever is queued, answers reads, and
//! commits all durable commands of the batch in **one** transaction (group commit), each with
//! its receipt; one failing command does not undo its neighbours (`WriteTx::command_group`).
//! Replies and events leave through the outbox ([`super::outbox`]), only once the commits they
//! may reflect are on disk; the thread goes on with the next batch while the syncer waits for
//! that. Between batches the thread sleeps until the next durable deadline, or indefinitely
//! when nothing is due (no idle wake-ups).

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;

use super::fault::FaultPlan;
use super::outbox::Outbox;
use crate::engine::children;
use crate::engine::dispatch::{self, HostState, PreparedStart};
use crate::engine::timers;
use crate::protocol::{Receipt, Rejection, RejectionCode, Request, RequestBody, RequestClass};
use crate::store::{CommandOutcome, Store, StoreError};

/// Most commands committed in one transaction.
pub const MAX_BATCH: usize = 256;

/// What the store thread receives.
pub enum StoreMsg {
    /// A request from a connection.
    Request(Box<Job>),
    /// A child started or exited.
    Child(crate::engine::children::ChildReport),
    /// A worker connection (the child of `run_id` at `generation`) closed.
    WorkerDisconnected { run_id: String, generation: u64 },
    /// The host has begun to stop (sent before any connection is told): launch nothing more,
    /// and a child that exits from now on (its connection was closed by the stop) leaves its
    /// run resumable without counting a loss. Requests still in flight are answered.
    Draining,
    /// The host is stopping: stop launching, let the supervisor stop every child.
    Shutdown,
}

/// One request for the store thread.
pub struct Job {
    pub request: Request,
    pub start: Option<PreparedStart>,
    /// Why a `run.start` could not be prepared (its file is gone or unreadable): only the
    /// receipt of an earlier commit of the same request may answer it; otherwise this does.
    pub start_refused: Option<Rejection>,
    /// The command's receipt identity, computed by the connection task (hashing stays off the
    /// store thread); `None` to compute it here.
    pub meta: Option<crate::store::CommandMeta>,
    pub reply: oneshot::Sender<Result<Receipt, Rejection>>,
}

/// A committed change, published to subscribers after the commit.
#[derive(Debug, Clone)]
pub struct RunEvent {
    pub run_id: String,
    pub origin_session: Option<String>,
    pub seq: u64,
    pub kind: String,
    pub status: String,
    pub revision: u64,
    pub at_ms: i64,
    pub data: serde_json::Value,
}

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
    // A host that starts with a detached run's step open serves it before any request comes.
    crate::engine::bridges::reconcile(&mut store, &mut state);
    publish_unpublished(&store, &mut state, &mut outbox);
    send_child_commands(&mut state, &mut supervisor);
    outbox.flush(store.commits(), true);
    // A message taken off the queue to learn whether the thread was idle, handled next.
    let mut next: Option<StoreMsg> = None;
    loop {
        let deadline = timers::next_deadline_at(&store, &state);
        let wait = deadline.map(|at| {
            // A floor of 1 ms: a deadline that the due work could not clear must not spin.
            Duration::from_millis(u64::try_from(at - store.now_ms()).unwrap_or(0).max(1))
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
/// `deadline`, the earliest deadline it knew of before it waited): requests answered and
/// committed, child reports handled, due work run once `deadline` has passed, ready runs
/// scheduled. What it reveals waits in `outbox` for the next flush.
pub fn turn(
    store: &mut Store,
    state: &mut HostState,
    outbox: &mut Outbox,
    msgs: Vec<StoreMsg>,
    deadline: Option<i64>,
    fault: &FaultPlan,
    supervisor: &mut Option<SupervisorTx>,
) {
    if !msgs.is_empty() {
        let mut batch = Vec::with_capacity(msgs.len());
        let mut reports = Vec::new();
        for msg in msgs {
            match msg {
                StoreMsg::Request(job) => batch.push(*job),
                StoreMsg::Child(report) => reports.push(report),
                StoreMsg::WorkerDisconnected { run_id, generation } => {
                    children::worker_disconnected(state, store.now_ms(), &run_id, generation);
                }
                StoreMsg::Draining => state.shutting_down = true,
                StoreMsg::Shutdown => {
                    state.shutting_down = true;
                    state.supervising = false;
                }
            }
        }
        if !batch.is_empty() {
            state
                .bridges
                .note_requests(batch.iter().map(|j| j.request.body.kind()));
            let touched = process_batch(store, state, outbox, batch, fault, supervisor);
            children::forget_released_claims(store, state, Some(&touched));
        }
        children::on_child_reports(store, state, reports);
        publish_unpublished(store, state, outbox);
    }
    // Due work runs whenever its deadline has passed, also while messages keep arriving.
    // Heartbeats first: a claim renewed in time must not be recovered as expired.
    if deadline.is_some_and(|at| at <= store.now_ms()) {
        children::due_child_work(store, state);
        timers::run_due_work(store, state);
        publish_unpublished(store, state, outbox);
        children::forget_released_claims(store, state, None);
    }
    if !state.shutting_down {
        // Bridges first: a step they fail makes its run ready for the scheduling below.
        crate::engine::bridges::reconcile(store, state);
        publish_unpublished(store, state, outbox);
        children::schedule_with(store, state, &mut |state| {
            send_child_commands(state, supervisor)
        });
        publish_unpublished(store, state, outbox);
    }
    send_child_commands(state, supervisor);
}

/// Publishes the events the deciding code asked for (`HostState::unpublished`), each run
/// once from its earliest revision, in the order the runs were first written. Called after
/// each step of a turn that may ask, before the next step publishes a run itself: no event
/// goes out twice.
fn publish_unpublished(store: &Store, state: &mut HostState, outbox: &mut Outbox) {
    if state.unpublished.is_empty() {
        return;
    }
    let mut earliest: HashMap<String, u64> = HashMap::new();
    let mut order = Vec::new();
    for (run_id, after) in state.unpublished.drain(..) {
        match earliest.get_mut(&run_id) {
            Some(first) => *first = (*first).min(after),
            None => {
                earliest.insert(run_id.clone(), after);
                order.push(run_id);
            }
        }
    }
    for run_id in order {
        publish_run(store, outbox, &run_id, earliest[&run_id]);
    }
}

/// The supervisor's command channel, as the store thread holds it.
pub type SupervisorTx = tokio::sync::mpsc::UnboundedSender<super::supervisor::SupervisorCmd>;

/// Hands the supervisor what the deciding code ordered (launches, stops), in order. Once the
/// host no longer supervises, the channel is closed: the supervisor then stops every child.
pub fn send_child_commands(state: &mut HostState, supervisor: &mut Option<SupervisorTx>) {
    for command in state.child_commands.drain(..) {
        if let Some(tx) = supervisor.as_ref() {
            let _ = tx.send(command);
        }
    }
    if !state.supervising {
        *supervisor = None;
    }
}

fn process_batch(
    store: &mut Store,
    state: &mut HostState,
    outbox: &mut Outbox,
    batch: Vec<Job>,
    fault: &FaultPlan,
    supervisor: &mut Option<SupervisorTx>,
) -> Vec<String> {
    let (writes, reads): (Vec<Job>, Vec<Job>) = batch
        .into_iter()
        .partition(|j| j.request.class().is_durable_command());
    for job in reads {
        let result = match job.request.class() {
            RequestClass::Maintenance => maintain(store, outbox, &job.request),
            _ => dispatch::apply_read(store, &job.request, state.reply_limit).map(|mut receipt| {
                if matches!(job.request.body, RequestBody::HostStatus) {
                    receipt.body["active_children"] = json!(state.live_children());
                }
                receipt
            }),
        }
        .map_err(|e| dispatch::rejection_for(&e));
        outbox.reply(job.reply, result);
    }
    // Reads answered from what is committed so far: sent now if that is durable, otherwise
    // with the batch's replies (one fsync for both).
    outbox.flush_if_synced(store.commits());
    // Each command's receipt identity (usually computed by its connection task already).
    let writes: Vec<Job> = writes
        .into_iter()
        .filter_map(|mut job| {
            if job.meta.is_none() {
                match dispatch::command_meta(&job.request) {
                    Ok(meta) => job.meta = Some(meta),
                    Err(rejection) => {
                        outbox.reply(job.reply, Err(rejection));
                        return None;
                    }
                }
            }
            Some(job)
        })
        .collect();
    if writes.is_empty() {
        return Vec::new();
    }
    // The runs this batch can change: only their claims may have been released.
    let touched: Vec<String> = writes
        .iter()
        .filter_map(|j| j.request.run_id.clone())
        .collect();
    let publishing = outbox.has_subscribers();
    let before = if publishing {
        Some(revisions(store, &writes))
    } else {
        None
    };
    let mut activations = children::Activations::default();
    // Outside the transaction: a replay of an earlier commit is answered even if this one fails.
    let mut results = Vec::with_capacity(writes.len());
    let committed = store.write(|w| {
        // Every job's identity was computed above.
        let meta_of = |job: &Job| {
            job.meta
                .clone()
                .ok_or_else(|| StoreError::InvalidInput("the command has no identity".into()))
        };
        // Consecutive client commands run as one group (one savepoint for all of them unless
        // one fails after writing: `WriteTx::command_group`); they may run twice, which is
        // why they cannot change the host's memory. A worker's message changes it (its
        // child's hello, the cached graph), so it runs once, in a savepoint of its own.
        for group in writes.chunk_by(|a, b| !a.request.is_worker() && !b.request.is_worker()) {
            let outcomes = if group[0].request.is_worker() {
                let job = &group[0];
                let outcome = meta_of(job).and_then(|meta| {
                    w.command(&meta, |w| children::apply_worker(w, state, &job.request))
                });
                // Nothing after a transaction SQLite rolled back may run: it would commit.
                w.ensure_in_transaction()?;
                vec![outcome]
            } else {
                let state: &HostState = state;
                w.command_group(group, meta_of, |w, job| {
                    dispatch::apply_command(w, state, &job.request, job.start.as_ref())
                })?
            };
            results.extend(outcomes.into_iter().zip(group).map(|(r, job)| {
                r.map_err(|e| match &job.start_refused {
                    // Not a replay: the start was never prepared, and it fails as it did.
                    Some(refused) => refused.clone(),
                    None => dispatch::rejection_for(&e),
                })
            }));
        }
        // Runs this batch made ready (a start, a resume, an answer) are activated in the same
        // commit when a child slot is free: one commit less between a command and its child.
        // Their children start before the commit (see `children::activate_and_launch`).
        activations = children::activate_and_launch(w, state);
        // Sent now, before the commit: a worker loads while the commit reaches the disk.
        send_child_commands(state, supervisor);
        fault.before_commit(writes.iter().map(|j| j.request.body.kind_str()));
        if fault.fail_commit(writes.iter().map(|j| j.request.body.kind_str())) {
            return Err(StoreError::InjectedFault("fail_commit".into()));
        }
        Ok(w.take_revisions())
    });
    children::settle_activations(state, store.now_ms(), committed.is_ok(), &mut activations);
    match committed {
        Ok(written) => {
            fault.after_commit(writes.iter().map(|j| j.request.body.kind_str()));
            let mut touched = before.unwrap_or_default();
            if publishing {
                touched.extend(
                    activations
                        .runs
                        .iter()
                        .map(|a| (a.run_id().to_owned(), a.revision_before)),
                );
            }
            let mut replies = Vec::with_capacity(writes.len());
            for (job, result) in writes.into_iter().zip(results) {
                // A replayed start (same request id, a client retrying after a broken
                // connection) wrote nothing: its run's events went out with the original.
                if let (true, Ok(outcome), RequestBody::RunStart(_)) =
                    (publishing, &result, &job.request.body)
                {
                    let run_id = outcome.response.get("run_id").and_then(|v| v.as_str());
                    if let (false, Some(run_id)) = (outcome.replayed, run_id) {
                        touched.push((run_id.to_owned(), 0));
                    }
                }
                let receipt = result.map(|outcome| receipt_of(store, &written, &job, outcome));
                replies.push((job.reply, receipt));
            }
            // Events first, replies second: a client that subscribes after seeing a receipt
            // never receives events committed before it. A run touched twice in the batch is
            // published once, from its earliest revision.
            touched.sort();
            touched.dedup_by(|later, earlier| later.0 == earlier.0);
            for (run_id, after) in touched {
                publish_run(store, outbox, &run_id, after);
            }
            for (reply, receipt) in replies {
                outbox.reply(reply, receipt);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "batch commit failed; only replays were acknowledged");
            let rejection = Rejection::new(RejectionCode::Internal, format!("commit failed: {e}"));
            let now = store.now_ms();
            let no_writes = HashMap::new();
            // A command the failed transaction never reached has no result.
            let results = results.into_iter().map(Some).chain(std::iter::repeat(None));
            for (job, result) in writes.into_iter().zip(results) {
                // The receipt of an earlier commit (a client resending a command whose reply a
                // crash or a lost connection dropped) is a read: this failure changes nothing
                // of it, and an `internal` would tell the client its committed command failed.
                let receipt = match result {
                    Some(Ok(outcome)) if outcome.committed_before => {
                        Ok(receipt_of(store, &no_writes, &job, outcome))
                    }
                    _ => {
                        if job.request.is_worker() {
                            children::forget_uncommitted_worker_message(state, &job.request, now);
                        }
                        Err(rejection.clone())
                    }
                };
                outbox.reply(job.reply, receipt);
            }
        }
    }
    touched
}

/// The receipt of a command's `outcome`, with its run's revision after the batch: known from
/// the batch's `written` revisions, read only for a command that wrote nothing (a replay).
fn receipt_of(
    store: &Store,
    written: &HashMap<String, u64>,
    job: &Job,
    outcome: CommandOutcome,
) -> Receipt {
    let revision = job.request.run_id.as_deref().and_then(|r| {
        written
            .get(r)
            .copied()
            .or_else(|| store.run_state(r).ok().map(|(_, revision)| revision))
    });
    let receipt = Receipt::new(revision, outcome.response);
    if outcome.replayed {
        receipt.replayed()
    } else {
        receipt
    }
}

/// A maintenance request: a write in a transaction of its own, without a receipt.
fn maintain(
    store: &mut Store,
    outbox: &mut Outbox,
    request: &Request,
) -> Result<Receipt, StoreError> {
    match &request.body {
        RequestBody::Repair => {
            let report = store.repair()?;
            // A write outside the batches: its events go out before its reply.
            for (run_id, before) in &report.runs_written {
                publish_run(store, outbox, run_id, *before);
            }
            Ok(Receipt::new(None, json!({ "report": report })))
        }
        other => Err(StoreError::Forbidden(format!(
            "{} is not a maintenance request",
            other.kind_str()
        ))),
    }
}

/// The revision of every run a batch may touch, before it runs (for event publication).
fn revisions(store: &Store, writes: &[Job]) -> Vec<(String, u64)> {
    writes
        .iter()
        .filter_map(|j| j.request.run_id.clone())
        .map(|run_id| {
            let rev = store.run_state(&run_id).map(|(_, rev)| rev).unwrap_or(0);
            (run_id, rev)
        })
        .collect()
}

pub(crate) fn publish_run(store: &Store, outbox: &mut Outbox, run_id: &str, after: u64) {
    if !outbox.has_subscribers() {
        return;
    }
    let Ok(Some(view)) = store.run_view(run_id) else {
        return;
    };
    let Ok(list) = store.events(run_id, after) else {
        return;
    };
    for e in list {
        let data = crate::protocol::event_data_for_clients(&e.kind, e.data);
        outbox.event(RunEvent {
            run_id: run_id.to_owned(),
            origin_session: view.origin_session.clone(),
            seq: e.seq,
            kind: e.kind,
            status: view.status.clone(),
            revision: view.revision,
            at_ms: e.at,
            data,
        });
    }
}

impl From<StoreError> for Rejection {
    fn from(e: StoreError) -> Self {
        dispatch::rejection_for(&e)
    }
}
