//! One turn of the host: what it does with the messages the driver took off its queue (client
//! requests, worker messages, child reports, the stop) and with the time. Every decision of a
//! turn lives here: which requests are reads, which commands commit together and how a failed
//! commit answers them, which runs publish which events, the order of "requests, reports, due
//! work, schedule". What must happen outside leaves as [`Effect`]s, handed to the driver's
//! [`Effects`] in the order they must happen; the driver keeps only the transaction's
//! durability, the fault points, the outbox and the supervisor's channel.
//!
//! A request's reply handle is opaque here (`R`): the engine hands it back with the reply.

use std::collections::BTreeMap;

use crate::time::UnixMillis;

use super::children::{self, SupervisorCmd};
use super::dispatch;
use super::fit::receipt;
use super::handlers::run::{AcceptedSource, PreparedStart};
use super::{retention, timers};
use crate::protocol::reply::RepairReply;
use crate::protocol::{Receipt, Rejection, RejectionCode, Request, RequestBody, RequestClass};
use crate::state::HostState;
use crate::store::{CommandMeta, CommandOutcome, Storage, StoreError};

/// The durable identity of a command for its receipt.
pub fn command_meta(req: &Request) -> Result<CommandMeta, Rejection> {
    let fingerprint = req.fingerprint().map_err(|e| {
        Rejection::new(
            RejectionCode::Internal,
            format!("cannot fingerprint request: {e}"),
        )
    })?;
    Ok(CommandMeta {
        request_id: req.request_id.clone(),
        idempotency_key: req.idempotency_key.clone(),
        fingerprint,
        kind: req.body.kind_str().to_owned(),
        run_id: req.run_id.clone(),
    })
}

/// Most commands committed in one transaction.
pub const MAX_BATCH: usize = 256;

/// What a turn takes: one message the driver received.
pub enum Input<R> {
    /// A request from a connection.
    Request(Box<Job<R>>),
    /// A child started or exited.
    Child(children::ChildReport),
    /// A worker connection (the child of `run_id` at `generation`) closed.
    WorkerDisconnected { run_id: String, generation: u64 },
    /// Connection `connection` (a number the driver gives each) subscribed to the events of
    /// session `session_id`, its first subscription to them: the session is there, and its
    /// runs' interactive steps are presented (their time runs: `presence`).
    SessionWatched { session_id: String, connection: u64 },
    /// Connection `connection` no longer follows session `session_id` (its last such
    /// subscription ended, or it closed).
    SessionUnwatched { session_id: String, connection: u64 },
    /// The host refused a connection of its own child `pid` for want of room (the connection
    /// cap): that child cannot go on, and its exit is not its run's fault.
    ChildRefused { pid: u32 },
    /// The host has begun to stop (sent before any connection is told): launch nothing more,
    /// and a child that exits from now on (its connection was closed by the stop) leaves its
    /// run resumable without counting a loss. Requests still in flight are answered.
    Draining,
    /// The host is stopping: stop launching, let the supervisor stop every child.
    Shutdown,
    /// The decision channels configured now (`channel.reload`): their adapters follow.
    Channels(Vec<super::channels::ChannelSpec>),
}

/// One request, with what its connection prepared, and where its reply goes.
pub struct Job<R> {
    pub request: Request,
    pub start: Option<PreparedStart>,
    /// The workflow file of a `run.retry` with `accept_source`, read by the connection task.
    pub accepted_source: Option<AcceptedSource>,
    /// Why a `run.start` (or a `run.retry` accepting the source) could not be prepared (its
    /// file is gone or unreadable): only the
    /// receipt of an earlier commit of the same request may answer it; otherwise this does.
    pub start_refused: Option<Rejection>,
    /// The command's receipt identity, computed by the connection task (hashing stays off the
    /// store thread); `None` to compute it here.
    pub meta: Option<CommandMeta>,
    pub reply: R,
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

/// What the engine asks of the driver, in order.
#[derive(Debug)]
pub enum Effect<R> {
    /// Answer a request (once what it may reflect is durable).
    Reply {
        to: R,
        result: Result<Receipt, Rejection>,
    },
    /// Send an event to subscribers (once its commit is durable).
    Event(RunEvent),
    /// The batch's reads are answered from the first `commits` commits: they may leave now
    /// if those are durable, ahead of the batch's own commit.
    ReadsAnswered { commits: u64 },
    /// Hand an order to the supervisor now (launches go out before their commit, so a
    /// worker loads while the commit reaches the disk).
    Child(SupervisorCmd),
    /// The host no longer supervises: close the supervisor's channel (it then stops every
    /// child itself).
    EndSupervision,
    /// Look under `logs` for the log directories of runs that no longer exist (those a crash
    /// between a prune's commit and their removal left) and have the supervisor remove them.
    /// Asked once per host, by its first prune (a client's or the retention pass's); reading
    /// the directory is I/O, and reading the store for each run needs the store the turn
    /// holds, so the driver does it once the turn has returned.
    SweepRunLogs { logs: std::path::PathBuf },
}

/// The driver's side of a turn: carries out effects, and names the points where a test may
/// inject a fault.
pub trait Effects<R> {
    /// Carries out `effect` now.
    fn apply(&mut self, effect: Effect<R>);
    /// Whether anybody listens for run events (publishing reads the store; without a
    /// listener the engine reads nothing for it).
    fn publishing(&self) -> bool;
    /// Inside a batch's transaction, about to commit commands of `kinds`: an error makes the
    /// commit fail as a full disk would.
    fn before_commit(&mut self, kinds: &[&str]) -> Result<(), StoreError>;
    /// A batch of commands of `kinds` just committed.
    fn after_commit(&mut self, kinds: &[&str]);
}

/// One turn, after the driver took `inputs` off its queue (none when it woke for `deadline`,
/// the earliest deadline it knew of before it waited): requests answered and committed, child
/// reports handled, due work run once `deadline` has passed, ready runs scheduled. `now` is
/// the turn's time, read by the driver (quinn-proto's `handle_timeout(now)`): every decision
/// of the turn and every transaction it opens use it, so a simulation that replays the same
/// inputs at the same times gets the same turn.
pub fn turn<R>(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    inputs: Vec<Input<R>>,
    deadline: Option<i64>,
    fx: &mut dyn Effects<R>,
) {
    if !inputs.is_empty() {
        let mut batch = Vec::with_capacity(inputs.len());
        let mut reports = Vec::new();
        for input in inputs {
            match input {
                Input::Request(job) => batch.push(*job),
                Input::Child(report) => reports.push(report),
                Input::WorkerDisconnected { run_id, generation } => {
                    children::worker_disconnected(state, now, &run_id, generation);
                }
                Input::SessionWatched {
                    session_id,
                    connection,
                } => super::presence::session_watched(store, state, now, session_id, connection),
                Input::SessionUnwatched {
                    session_id,
                    connection,
                } => super::presence::session_unwatched(store, state, now, session_id, connection),
                Input::ChildRefused { pid } => children::child_refused(state, pid),
                Input::Draining => state.shutting_down = true,
                Input::Shutdown => {
                    state.shutting_down = true;
                    state.supervising = false;
                }
                Input::Channels(specs) => super::channels::configure(state, specs),
            }
        }
        if !batch.is_empty() {
            state
                .bridges
                .note_requests(batch.iter().map(|j| j.request.body.kind()));
            super::controllers::note_requests(state, batch.iter().map(|j| j.request.body.kind()));
            let touched = handle_batch(store, state, now, batch, fx);
            children::forget_released_claims(store, state, now, Some(&touched));
        }
        if !reports.is_empty() {
            super::controllers::note_other_writes(state);
        }
        children::on_child_reports(store, state, now, reports);
        publish_unpublished(store, state, fx);
    }
    // Due work runs whenever its deadline has passed, also while messages keep arriving.
    // Heartbeats first: a claim renewed in time must not be recovered as expired.
    if deadline.is_some_and(|at| at <= now) {
        super::presence::retry(store, state, now);
        children::due_child_work(store, state, now);
        timers::run_due_work(store, state, now);
        super::controllers::note_other_writes(state);
        if let Some(logs) = retention::run_due_retention(store, state, now) {
            fx.apply(Effect::SweepRunLogs { logs });
        }
        publish_unpublished(store, state, fx);
        children::forget_released_claims(store, state, now, None);
    }
    if !state.shutting_down {
        // Bridges first: a step they fail makes its run ready for the scheduling below.
        super::bridges::reconcile(store, state, now);
        super::channels::reconcile(state, now);
        super::controllers::reconcile(store, state, now);
        publish_unpublished(store, state, fx);
        children::schedule_with(store, state, now, &mut |state| {
            send_child_commands(state, fx)
        });
        publish_unpublished(store, state, fx);
    }
    send_child_commands(state, fx);
}

/// Hands the driver what the deciding code ordered (launches, stops), in order; once the host
/// no longer supervises, ends the supervision.
fn send_child_commands<R>(state: &mut HostState, fx: &mut dyn Effects<R>) {
    for command in state.child_commands.drain(..) {
        fx.apply(Effect::Child(command));
    }
    if !state.supervising {
        fx.apply(Effect::EndSupervision);
    }
}

/// Publishes the events the deciding code asked for (`HostState::unpublished`), each run
/// once from its earliest revision, in the order the runs were first written. Called after
/// each step of a turn that may ask, before the next step publishes a run itself: no event
/// goes out twice.
fn publish_unpublished<R>(store: &dyn Storage, state: &mut HostState, fx: &mut dyn Effects<R>) {
    if state.unpublished.is_empty() {
        return;
    }
    let mut earliest: BTreeMap<String, u64> = BTreeMap::new();
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
        publish_run(store, fx, &run_id, earliest[&run_id]);
    }
}

/// The events of `run_id` after revision `after`, to subscribers (when there are any).
fn publish_run<R>(store: &dyn Storage, fx: &mut dyn Effects<R>, run_id: &str, after: u64) {
    if !fx.publishing() {
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
        fx.apply(Effect::Event(RunEvent {
            run_id: run_id.to_owned(),
            origin_session: view.origin_session.clone(),
            seq: e.seq,
            kind: e.kind,
            status: view.status.clone(),
            revision: view.revision,
            at_ms: e.at,
            data,
        }));
    }
}

/// A batch of requests: the reads answered from what is committed, then every durable
/// command in **one** transaction (group commit), each with its receipt; one failing command
/// does not undo its neighbours (`Transaction::command_group`). Returns the runs the commands
/// could change.
fn handle_batch<R>(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    batch: Vec<Job<R>>,
    fx: &mut dyn Effects<R>,
) -> Vec<String> {
    let (writes, reads): (Vec<Job<R>>, Vec<Job<R>>) = batch
        .into_iter()
        .partition(|j| j.request.class().is_durable_command());
    for job in reads {
        let result = match job.request.class() {
            RequestClass::Maintenance => maintain(store, state, now, fx, &job.request),
            _ => dispatch::apply_read(store, state, now, &job.request),
        }
        .map_err(|e| dispatch::rejection_for(&e));
        fx.apply(Effect::Reply {
            to: job.reply,
            result,
        });
    }
    // Reads answered from what is committed so far: sent now if that is durable, otherwise
    // with the batch's replies (one fsync for both).
    fx.apply(Effect::ReadsAnswered {
        commits: store.commits(),
    });
    // Each command's receipt identity (usually computed by its connection task already).
    let writes: Vec<Job<R>> = writes
        .into_iter()
        .filter_map(|mut job| {
            if job.meta.is_none() {
                match command_meta(&job.request) {
                    Ok(meta) => job.meta = Some(meta),
                    Err(rejection) => {
                        fx.apply(Effect::Reply {
                            to: job.reply,
                            result: Err(rejection),
                        });
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
    let publishing = fx.publishing();
    let before = if publishing {
        Some(revisions(store, &writes))
    } else {
        None
    };
    let kinds: Vec<&str> = writes.iter().map(|j| j.request.body.kind_str()).collect();
    let mut activations = children::Activations::default();
    // Outside the transaction: a replay of an earlier commit is answered even if this one fails.
    let mut results = Vec::with_capacity(writes.len());
    let committed = store.write(now, |w| {
        // Every job's identity was computed above.
        let meta_of = |job: &Job<R>| {
            job.meta
                .clone()
                .ok_or_else(|| StoreError::InvalidInput("the command has no identity".into()))
        };
        // Consecutive client commands run as one group (one savepoint for all of them unless
        // one fails after writing: `Transaction::command_group`); they may run twice, which is
        // why they cannot change the host's memory. A worker's message changes it (its
        // child's hello, the cached graph), so it runs once, in a savepoint of its own.
        for group in writes.chunk_by(|a, b| !a.request.is_worker() && !b.request.is_worker()) {
            let outcomes = if group[0].request.is_worker() {
                let job = &group[0];
                let outcome = meta_of(job).and_then(|meta| {
                    w.command(
                        &meta,
                        Box::new(|w| children::apply_worker(w, state, &job.request)),
                    )
                });
                // Nothing after a transaction SQLite rolled back may run: it would commit.
                w.ensure_in_transaction()?;
                vec![outcome]
            } else {
                let state: &HostState = state;
                // The store names a command by its index in the group.
                let job = |i: usize| {
                    group.get(i).ok_or_else(|| {
                        StoreError::InvalidInput(format!("the group has no command {i}"))
                    })
                };
                w.command_group(group.len(), &mut |i| meta_of(job(i)?), &mut |w, i| {
                    let job = job(i)?;
                    dispatch::apply_command(
                        w,
                        state,
                        &job.request,
                        job.start.as_ref(),
                        job.accepted_source.as_ref(),
                    )
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
        send_child_commands(state, fx);
        fx.before_commit(&kinds)?;
        Ok(w.take_revisions())
    });
    children::settle_activations(state, now, committed.is_ok(), &mut activations);
    match committed {
        Ok(written) => {
            fx.after_commit(&kinds);
            let mut published = before.unwrap_or_default();
            if publishing {
                published.extend(
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
                        published.push((run_id.to_owned(), 0));
                    }
                }
                let receipt = result.map(|outcome| receipt_of(store, &written, &job, outcome));
                replies.push((job.reply, receipt));
            }
            // Events first, replies second: a client that subscribes after seeing a receipt
            // never receives events committed before it. A run touched twice in the batch is
            // published once, from its earliest revision.
            published.sort();
            published.dedup_by(|later, earlier| later.0 == earlier.0);
            for (run_id, after) in published {
                publish_run(store, fx, &run_id, after);
            }
            for (to, result) in replies {
                fx.apply(Effect::Reply { to, result });
            }
        }
        Err(e) => {
            crate::store_error!(e, "batch commit failed; only replays were acknowledged");
            let rejection = Rejection::new(RejectionCode::Internal, format!("commit failed: {e}"));
            let no_writes = BTreeMap::new();
            // A command the failed transaction never reached has no result.
            let results = results.into_iter().map(Some).chain(std::iter::repeat(None));
            for (job, result) in writes.into_iter().zip(results) {
                // The receipt of an earlier commit (a client resending a command whose reply a
                // crash or a lost connection dropped) is a read: this failure changes nothing
                // of it, and an `internal` would tell the client its committed command failed.
                let result = match result {
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
                fx.apply(Effect::Reply {
                    to: job.reply,
                    result,
                });
            }
        }
    }
    touched
}

/// The receipt of a command's `outcome`, with its run's revision after the batch: known from
/// the batch's `written` revisions, read only for a command that wrote nothing (a replay).
fn receipt_of<R>(
    store: &dyn Storage,
    written: &BTreeMap<String, u64>,
    job: &Job<R>,
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
fn maintain<R>(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    fx: &mut dyn Effects<R>,
    request: &Request,
) -> Result<Receipt, StoreError> {
    match &request.body {
        RequestBody::Repair => {
            let report = store.write(now, |w| w.repair())?;
            // A write outside the batches: its events go out before its reply.
            for (run_id, before) in &report.runs_written {
                publish_run(store, fx, run_id, *before);
            }
            receipt(None, &RepairReply { report })
        }
        // The log directories of pruned runs go through the supervisor (off this thread);
        // the host's first prune also has the driver sweep for leftovers.
        RequestBody::RunPrune(prune) => {
            let answer = retention::prune_request(store, state, now, prune)?;
            if let Some(logs) = answer.sweep_run_logs {
                fx.apply(Effect::SweepRunLogs { logs });
            }
            Ok(answer.receipt)
        }
        other => Err(StoreError::Forbidden(format!(
            "{} is not a maintenance request",
            other.kind_str()
        ))),
    }
}

/// The revision of every run a batch may touch, before it runs (for event publication).
fn revisions<R>(store: &dyn Storage, writes: &[Job<R>]) -> Vec<(String, u64)> {
    writes
        .iter()
        .filter_map(|j| j.request.run_id.clone())
        .map(|run_id| {
            let rev = store.run_state(&run_id).map(|(_, rev)| rev).unwrap_or(0);
            (run_id, rev)
        })
        .collect()
}
