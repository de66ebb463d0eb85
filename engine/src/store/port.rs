//! The store as the engine calls it: [`Storage`] (reads, and one write transaction at a time)
//! and [`Transaction`] (every change, inside that transaction). `piw_host::store` implements
//! them over SQLite; nothing else in the engine reaches the durable state, and nothing here
//! names SQL. Every method is one the engine calls.
//!
//! Each operation is declared once, here, and implemented once, by the store module that owns
//! its tables: the trait methods are the store's operations (there is no inherent method of
//! the same name behind them), so go-to-definition from a call in `piw-host` lands on the
//! body, and go-to-implementation from a declaration here does too. A trait is implemented in
//! one `impl` block, so the operations are grouped by the module that implements them: the
//! two traits' own methods (the write entry, savepoints, commands and the transaction's state)
//! and their supertraits, each implemented beside its SQL and helpers ([`RunReads`],
//! [`Retention`]; [`Lifecycle`], [`Requests`], [`Holds`], [`Timers`], [`Effects`],
//! [`ValueWrites`], [`Recovery`], [`ChildRecords`], [`HostOps`]). The engine calls them all on
//! `dyn Storage` / `dyn Transaction` without importing the supertraits.
//!
//! Every change goes through [`Storage::write_dyn`] but one: [`Retention::prune_runs`], which
//! opens its own transaction because it switches foreign-key enforcement off (SQLite allows
//! that only between transactions).
//!
//! The engine holds the store as trait objects (`&mut dyn Storage`), so a closure crosses
//! boxed. Where the engine needs the body's value back, the method comes twice: the boxed
//! trait method (`write_dyn`, `savepoint_dyn`), which the store implements, and a generic
//! method of `dyn Storage` / `dyn Transaction` (`write`, `savepoint`), which the engine calls.
//! [`Transaction::command`] and [`Transaction::command_group`] return the store's own types,
//! so the engine calls them as they are.

use serde_json::Value;

use super::*;
use crate::time::UnixMillis;

/// The body of a write transaction or of a savepoint.
pub type TxBody<'f, T> = Box<dyn FnOnce(&mut dyn Transaction) -> StoreResult<T> + 'f>;

/// Reads of the durable state, and the way to change it ([`Storage::write_dyn`]; only
/// [`Retention::prune_runs`], which must change how its transaction is opened, writes
/// outside it).
pub trait Storage: RunReads + Retention + ControllerStorage {
    /// Runs `body` in one transaction at time `now` (the transaction's every expiry comparison
    /// and timestamp: the engine's turn's time, never a clock the store reads) and commits it
    /// if `body` succeeds; if it fails, nothing it did is kept. A transaction the database
    /// rolled back by itself is never reported as committed ([`StoreError::TransactionLost`]).
    /// The engine calls [`dyn Storage::write`].
    fn write_dyn(&mut self, now: UnixMillis, body: TxBody<'_, ()>) -> StoreResult<()>;

    /// How long a claim lives without renewal, in milliseconds.
    fn lease_ms(&self) -> i64;

    /// How many transactions `dyn Storage::write` committed through this handle: a caller that
    /// deferred the WAL sync (`Store::defer_wal_sync`) holds back what a commit revealed
    /// until a sync covers this count.
    fn commits(&self) -> u64;

    /// The key this database signs run list cursors with (made with it, kept in it).
    fn cursor_key(&self) -> super::records::CursorKey;

    /// While commits fail because the disk is full: when the host's own work should be tried
    /// again (a growing, bounded pause after each failure). `None` while commits succeed.
    fn disk_full_retry_at(&self) -> Option<UnixMillis>;
}

/// Reads of runs and of what they hold, outside a transaction (each sees the last commit).
pub trait RunReads {
    /// One run.
    fn run(&self, run_id: &str) -> StoreResult<RunRecord>;

    /// The run's input, definition snapshot and mounted sources (for the child's launch).
    fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)>;

    /// A run's status and revision: the cheap read the host does after every batch.
    fn run_state(&self, run_id: &str) -> StoreResult<(RunStatus, u64)>;

    /// The viewer projection row.
    fn run_view(&self, run_id: &str) -> StoreResult<Option<RunView>>;

    /// `Store::list_runs_where`, continued after the run whose place in the list is `after`
    /// (the [`RunListKey`] of the last run of the previous page). The order is by key, and a
    /// run's key never changes, so paging lists every run that existed when it began exactly
    /// once, whatever is inserted or changes status meanwhile. With `id_prefix`, only the
    /// runs it names as a person shortens an id: those whose id begins with it, or, for a
    /// short id (lower-case hex digits), ends with it.
    fn list_runs_after(
        &self,
        session: Option<&str>,
        unfinished_only: bool,
        statuses: &[RunStatus],
        id_prefix: Option<&str>,
        after: Option<&RunListKey>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>>;

    /// Run counts by status.
    fn count_by_status(&self) -> StoreResult<Vec<(RunStatus, u64)>>;

    /// The claim's public fields.
    fn claim_info(&self, run_id: &str) -> StoreResult<ClaimInfo>;

    /// A page of the run's attempts, newest first: at most `limit`, only those started before
    /// attempt `before` when given (the last one of the previous page). Also returns how many
    /// attempts the run has in all. An attempt `before` that is not the run's is `NotFound`.
    fn attempts_page(
        &self,
        run_id: &str,
        before: Option<&str>,
        limit: u32,
    ) -> StoreResult<(Vec<AttemptRecord>, u64)>;

    /// The run's decisions in creation order.
    fn decisions(&self, run_id: &str) -> StoreResult<Vec<DecisionRecord>>;

    /// Interactions of a run (`by_run`) or the open ones of an origin session.
    fn interactions(
        &self,
        run_id: Option<&str>,
        session: Option<&str>,
    ) -> StoreResult<Vec<InteractionRecord>>;

    /// Effects of a run.
    fn effects(&self, run_id: &str) -> StoreResult<Vec<EffectRecord>>;

    /// The run's events in order, optionally only those after `after_seq`.
    ///
    /// Events are stored in commit order, not by run: this walks the run's chain back from its
    /// newest event, one point read per event returned (the host reads only what a write just
    /// appended). A chain that breaks its own order is reported as corrupt, never followed.
    fn events(&self, run_id: &str, after_seq: u64) -> StoreResult<Vec<EventRecord>>;

    /// How many of the run's progress and notify events were dropped over its event budget.
    fn events_dropped(&self, run_id: &str) -> StoreResult<u64>;

    /// The run's latest update per `(type, key)`, oldest first (updates whose events were
    /// dropped share a `seq`: their order is that of their arrival).
    fn updates(&self, run_id: &str) -> StoreResult<Vec<UpdateRecord>>;

    /// The newest `limit` workflow messages of a run, oldest of them first, and how many it
    /// has in all.
    fn newest_messages(&self, run_id: &str, limit: u32) -> StoreResult<(Vec<MessageRecord>, u64)>;

    /// The run's newest child, if it ever had one (for `run.status`: its exit and output
    /// tails say what the child said).
    fn last_child(&self, run_id: &str) -> StoreResult<Option<ChildRecord>>;

    /// Up to `max` bytes of value `sha256` from `offset`, if `run_id` holds it whole.
    fn read_value_chunk(
        &self,
        run_id: &str,
        sha256: &str,
        offset: u64,
        max: usize,
    ) -> StoreResult<ValueChunk>;

    /// The open interactive steps of detached runs, oldest first. Reads only live detached
    /// runs (the partial index `runs_detached`): asked every turn, free without them.
    fn detached_steps(&self) -> StoreResult<Vec<DetachedStep>>;

    /// Runs ready to activate at `now`, oldest first.
    fn ready_runs(&self, now: UnixMillis, limit: u32) -> StoreResult<Vec<String>>;

    /// The earliest time the host's own deadline work has something to do: a running run's
    /// claim expires (recovery), a pending interaction's or decision's deadline or a pending
    /// timer's wake time passes on a run no live claim holds (expiry, or firing; when an
    /// operator's claim holds it, at that claim's expiry), or an operator's claim on a ready
    /// run expires (the run can be launched).
    /// `None` when nothing is due, so the host can sleep without waking. `now`: which claims
    /// are live (a live claim holds its run's timers).
    fn next_deadline(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>>;

    /// The earliest time after `now` a ready run becomes available (a parked run with a
    /// delay).
    fn next_delayed_ready(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>>;

    /// The earliest deadline of an open attempt of a run that host `owner_id` holds: one
    /// indexed read (running runs only) instead of one per held run, for the store thread's
    /// every wake-up.
    fn next_node_deadline(&self, owner_id: &str) -> StoreResult<Option<UnixMillis>>;

    /// The deadline of the run's running attempt.
    fn open_attempt_deadline(&self, run_id: &str) -> StoreResult<Option<UnixMillis>>;

    /// Lists every contradiction in the database. Read-only. A file SQLite calls malformed is
    /// one finding, `DATABASE_MALFORMED` (with no run), and nothing else is checked: rows
    /// read from damaged pages prove nothing. `now`: what counts as an abandoned upload
    /// depends on it.
    fn diagnose(&self, now: UnixMillis) -> StoreResult<Vec<Finding>>;
}

/// Which finished runs a prune removes, and their removal.
pub trait Retention {
    /// How many finished runs `selector` matches. Read-only.
    fn count_prunable(&self, selector: &PruneSelector) -> StoreResult<u64>;

    /// The finished runs `selector` matches, oldest start first, after `after` (a key of an
    /// earlier page), at most `limit`. Read-only.
    fn prunable_runs(
        &self,
        selector: &PruneSelector,
        after: Option<&RunListKey>,
        limit: usize,
    ) -> StoreResult<PrunablePage>;

    /// Removes each of `run_ids` that is still finished and unclaimed, with every row that
    /// belongs to it, in one transaction; returns the runs removed, in the order given.
    ///
    /// Foreign keys are not enforced during this one transaction: several tables refer to a
    /// run, an attempt or an event by a column with no index (events by run, children,
    /// messages, effects by attempt), and with enforcement each deleted row would scan them.
    /// The deletes name every such table (`diagnose`'s `dangling_reference` checks that none
    /// was missed). SQLite switches enforcement only between transactions (`PRAGMA
    /// foreign_keys` does nothing inside one), so this is the one write that is not a
    /// [`Transaction`] operation: it opens its own transaction, at time `now`.
    fn prune_runs(&mut self, now: UnixMillis, run_ids: &[String]) -> StoreResult<Vec<String>>;
}

/// Every change the engine makes, inside one transaction that commits or rolls back whole.
pub trait Transaction:
    Lifecycle
    + Requests
    + Holds
    + Timers
    + Effects
    + ValueWrites
    + Recovery
    + ChildRecords
    + HostOps
    + ControllerTransaction
{
    /// Runs `body` in a savepoint: if it fails, what it did is undone and its error returned,
    /// while the transaction stays usable. The engine calls [`dyn Transaction::savepoint`].
    fn savepoint_dyn(&mut self, body: TxBody<'_, ()>) -> StoreResult<()>;

    /// Runs a durable command exactly once: a repeat returns the stored response; a new one
    /// runs `body` in a savepoint and stores its response in the same transaction.
    fn command(
        &mut self,
        meta: &CommandMeta,
        body: TxBody<'_, Value>,
    ) -> StoreResult<CommandOutcome>;

    /// Runs `count` durable commands in order, each as [`Transaction::command`] would (a
    /// command that fails leaves nothing behind, its neighbours keep their changes): `meta_of`
    /// and `apply` take the command's index, and `apply` may run twice for one (it must have
    /// no effect outside this transaction). An `Err` of the whole call means the transaction
    /// is unusable.
    fn command_group(
        &mut self,
        count: usize,
        meta_of: &mut dyn FnMut(usize) -> StoreResult<CommandMeta>,
        apply: &mut dyn FnMut(&mut dyn Transaction, usize) -> StoreResult<Value>,
    ) -> StoreResult<Vec<StoreResult<CommandOutcome>>>;

    /// Fails with [`StoreError::TransactionLost`] when SQLite has rolled the whole transaction
    /// back on its own (it may after a full disk or an I/O error). Whatever runs after that
    /// would commit statement by statement, so a caller that goes on after a failed operation
    /// checks this first.
    fn ensure_in_transaction(&self) -> StoreResult<()>;

    /// The transaction time: every expiry comparison in this transaction uses it.
    fn now_ms(&self) -> UnixMillis;

    /// Refuses the write with [`StoreError::StaleRevision`] unless the run is at `expected`.
    fn expect_revision(&mut self, run_id: &str, expected: u64) -> StoreResult<()>;

    /// Whether `claim` would pass the fence now (it is current and not expired), without
    /// renewing it or writing anything.
    fn holds(&self, claim: &Claim) -> StoreResult<bool>;

    /// The revision each run has after this transaction's writes so far (the last write of a
    /// run wins), and forgets them: a caller learns its commands' revisions without reading
    /// them again after the commit. Writes undone by a rolled-back savepoint are not included.
    fn take_revisions(&mut self) -> std::collections::BTreeMap<String, u64>;

    /// Each run this transaction has written so far, with the revision it had before the
    /// first of those writes (so its events are those with a greater `seq`), in run id order;
    /// and forgets them. What a writer outside the request batches publishes from: a write
    /// that appends several events to a run publishes them all.
    fn take_runs_written(&mut self) -> Vec<(String, u64)>;

    /// Gives back to the file system up to `max_pages` of the pages a prune freed
    /// (`auto_vacuum = INCREMENTAL`); returns how many free pages are left. It moves pages
    /// and changes no row: the engine runs it in a transaction of its own after the prune's.
    fn reclaim_free_pages(&mut self, max_pages: u32) -> StoreResult<u64>;
}

/// A run's life under its claim: start, activation, attempts, transitions, parking, pause and
/// cancel, and the end.
pub trait Lifecycle {
    /// Creates a queued run. Returns its id.
    fn start_run(&mut self, new: &NewRun) -> StoreResult<String>;

    /// Claims a queued run for the host `owner_id`: generation + 1, a new token, status
    /// running. A waiting attempt that was answered, submitted or expired is reopened.
    fn activate(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Activation>;

    /// Takes an atomic control claim on a run whose lease is expired or absent: refuses live
    /// claims and terminal rows, bumps the generation and binds a new token before anything
    /// else changes (docs/RULES.md, "Recovery and cancel").
    fn control_claim(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Claim>;

    /// Renews the claim without any domain change (the host's backup timer while a child
    /// computes for a long time). Writes no event and does not bump the revision.
    fn heartbeat(&mut self, claim: &Claim) -> StoreResult<()>;

    /// Stores the graph snapshot and the resolved mounted sources at the first activation
    /// (the host validates the snapshot first).
    fn record_launch_facts(
        &mut self,
        claim: &Claim,
        definition: &Value,
        mounted_sources: &Value,
    ) -> StoreResult<()>;

    /// Opens the first attempt of `node_id` after an activation without an open attempt.
    /// Refused with [`StoreError::StepLimitReached`] (nothing written) when the run used
    /// every step of its graph's limit.
    fn node_started(
        &mut self,
        claim: &Claim,
        node_id: &str,
        deadline_at: Option<UnixMillis>,
    ) -> StoreResult<String>;

    /// Closes the current attempt with its outcome and opens the next node's attempt.
    /// Refused with [`StoreError::StepLimitReached`] (nothing written, the attempt still
    /// running) when the next attempt would exceed a step limit of the run's graph.
    fn transition(&mut self, claim: &Claim, req: &TransitionRequest) -> StoreResult<Transitioned>;

    /// Releases the run at a durable boundary; it becomes ready again at `available_at` (now
    /// when `None`). An attempt still running is interrupted and reruns on the next activation.
    fn park(&mut self, claim: &Claim, available_at: Option<UnixMillis>) -> StoreResult<u64>;

    /// Sets the paused flag. A queued or waiting run is held back from activation; a running
    /// run keeps going until its next boundary, where the owner parks it.
    fn pause(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64>;

    /// Clears the paused flag; a queued run becomes ready now.
    fn resume(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64>;

    /// Cancels the run in one commit: closes the open attempt, cancels pending decisions and
    /// interactions (rejecting validating submissions), cancels effects that have not started
    /// and marks `applying` effects `uncertain`, releases the claim.
    ///
    /// A run held by a live claim can only be cancelled by that claim's holder; an expired run
    /// is cancelled through [`Lifecycle::control_claim`].
    fn cancel(
        &mut self,
        run_id: &str,
        fence: Fence<'_>,
        reason: &str,
    ) -> StoreResult<CancelSummary>;

    /// Makes an interactive run detached: from now on its `agent` and `assistantMessage` steps
    /// are served by host-launched bridges, never by a session (its origin session keeps its
    /// messages). Returns `false` for a run that already was detached (nothing written), so a
    /// repeated detach is harmless. A run that ended is refused.
    fn detach(&mut self, run_id: &str) -> StoreResult<bool>;

    /// Ends the run `failed` (or `timed_out` when the outcome is a timeout), closing the
    /// current attempt with `outcome` when one is named.
    fn fail(
        &mut self,
        claim: &Claim,
        attempt_id: Option<&str>,
        outcome: &AttemptOutcome,
        error: &str,
    ) -> StoreResult<u64>;

    /// `WriteTx::complete`, with the presentation instructions the workflow's
    /// `presentationPrompt` function gave (they go with the terminal message in place of the
    /// snapshot's `presentation_prompt`).
    fn complete_presented(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        output: &Value,
        result: &Value,
        presentation: Option<&str>,
    ) -> StoreResult<u64>;
}

/// Decisions, interactive requests and their submissions, and notify messages.
pub trait Requests {
    /// Parks the current attempt on an ordinary checkpoint or a protected human decision and
    /// releases the claim. Returns the decision id.
    fn wait_for_decision(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: DecisionKind,
        request: &Value,
    ) -> StoreResult<String>;

    /// Answers a pending decision and queues the run to continue; `channel` names the decision
    /// channel it was answered in (`telegram:<chat id>`), kept in the `decision_answered`
    /// event's `channel`. A protected human decision refuses the model-facing path.
    fn answer_decision_via(
        &mut self,
        decision_id: &str,
        answer: &Value,
        answered_by: Answerer,
        channel: Option<&str>,
    ) -> StoreResult<()>;

    /// Refuses with [`StoreError::NotFound`] unless decision `decision_id` belongs to run
    /// `run_id`. A client names the run it answers in the request's envelope, and the host
    /// checks `expected_revision` against, reports the revision of and publishes the events of
    /// that run: an answer applied to another run's decision would bypass all three.
    fn require_decision_of(&self, run_id: &str, decision_id: &str) -> StoreResult<()>;

    /// Expires every pending decision whose attempt's deadline has passed (see
    /// `WriteTx::expire_decision`). Returns their ids, each with its run.
    fn expire_due_decisions(&mut self) -> StoreResult<Vec<(String, String)>>;

    /// Records a durable interactive request bound to the run's origin session, parks the
    /// attempt and releases the claim. Returns the interaction id (its deadline is its
    /// attempt's from now on: [`HostOps::attempt_deadline`]).
    ///
    /// `deadline_at` is the attempt's (the node's timeout from its start): what is left of it
    /// now is the step's budget, which runs only while the step is held ([`Holds`]). The step
    /// is held from the start when `present` says its holder is there already; a step without
    /// a holder is always held.
    fn request_interaction(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: InteractionKind,
        request: &Value,
        deadline_at: Option<UnixMillis>,
        present: &dyn Fn(&Holder) -> bool,
    ) -> StoreResult<String>;

    /// Refuses with [`StoreError::NotFound`] unless interaction `interaction_id` belongs to run
    /// `run_id` and node `node_id` (see [`Requests::require_decision_of`] for why).
    fn require_interaction_of(
        &self,
        run_id: &str,
        node_id: &str,
        interaction_id: &str,
    ) -> StoreResult<()>;

    /// A durable progress update from the agent working on a pending interactive request
    /// (the Pi tool's `update`): kept as a `progress` event of the run, like a worker's, and
    /// does not complete the request. Refuses a stale attempt and a request that is not
    /// pending.
    fn interaction_progress(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        message: &str,
        data: &Value,
    ) -> StoreResult<ProgressKept>;

    /// The submission `payload` repeats, when it repeats one the request already took: the
    /// request is no longer pending, `attempt_id` is its own, and its newest submission that
    /// was not rejected (being judged, or accepted) carries an equal payload. Returns that
    /// submission's `(submission_id, state)`; `None` otherwise (the submission is then judged
    /// by [`Requests::submit`]'s rules). A client that sent a result again (a model retrying
    /// its call) gets the original receipt instead of a refusal, and nothing changes.
    fn repeated_submission(
        &self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
    ) -> StoreResult<Option<(String, String)>>;

    /// Refuses (`InvalidTransition`) a submission for `interaction_id` whose payload equals one
    /// an earlier request of the same run accepted: the guard of a client that bound the
    /// submission to whatever request was current when it sent it (`piw run submit` without
    /// an interaction id), so that a command run again does not answer the next visit with
    /// the previous one's result.
    fn refuse_accepted_before(&self, interaction_id: &str, payload: &Value) -> StoreResult<()>;

    /// Records a provisional submission (`validating`) for a pending interaction and queues
    /// the run for a validation child. A repeat with the same idempotency key and payload
    /// returns the original submission id; with another payload it is a conflict.
    fn submit(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
        idempotency_key: Option<&str>,
    ) -> StoreResult<String>;

    /// Settles a validating submission with the validation child's verdict. Accepting settles
    /// the interaction and keeps the attempt running under the claim (the child goes on to
    /// propose the transition); rejecting keeps the request pending, parks the attempt and
    /// releases the claim.
    fn settle(
        &mut self,
        claim: &Claim,
        submission_id: &str,
        verdict: Result<(), String>,
    ) -> StoreResult<()>;

    /// The origin session gave up on a pending interactive request (the model's turns
    /// settled without a submission, reminders included): the attempt fails with `reason`
    /// and the run routes `$result.outcome = failed` like any failed attempt. With `next`
    /// (the node the run's graph routes to, computed by the caller, with that node's
    /// deadline) the run moves there under a control claim and parks, so a fresh child
    /// starts it; without, the run fails. Refuses a stale attempt, a request that is not
    /// pending (a submission being judged goes first) and one past its deadline (it
    /// expires instead).
    fn fail_interaction(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        reason: &str,
        next: Option<(&str, Option<UnixMillis>)>,
        owner_id: &str,
    ) -> StoreResult<()>;

    /// Expires every pending interaction whose deadline has passed. Returns their ids, each
    /// with its run.
    fn expire_due_interactions(&mut self) -> StoreResult<Vec<(String, String)>>;

    /// Adds a notify-node message in the same transaction as the source fact: for the origin
    /// session, or kept for `run.status` when the run has none.
    ///
    /// The message's id is derived from the run, the node and the visit (how many attempts of
    /// the node have finished before): a node that runs again because its child was lost after
    /// this commit (its transition never committed) adds nothing new, while a loop that enters
    /// the node again is a new visit with its own message.
    fn notify(&mut self, claim: &Claim, content: &Value) -> StoreResult<String>;
}

/// Which open interactive steps someone is present for: their time runs only while held.
pub trait Holds {
    /// `holder` is there: every open interactive step it presents that nobody held yet is
    /// held from now (its time runs; its deadline, and its attempt's, is what is left of its
    /// budget from now). Writes no event. Returns how many.
    fn hold_interactions(&mut self, holder: &Holder) -> StoreResult<usize>;

    /// `holder` went away: the open interactive steps it held stop using their time (what
    /// they used is added up) and have no deadline (nor their attempts) until held again.
    /// Writes no event. Returns how many.
    fn release_interactions(&mut self, holder: &Holder) -> StoreResult<usize>;
}

/// Timer waits and their firing.
pub trait Timers {
    /// Parks the current attempt until `wake` and releases the claim; when the timer fires,
    /// the attempt succeeds with `output`. The node's deadline bounds its code, not the wait,
    /// so the attempt has none while it waits.
    fn wait_until(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        wake: Wake,
        output: &Value,
    ) -> StoreResult<TimerSet>;

    /// Fires every due timer (see `DUE_TIMERS`), each in its own savepoint. A timer that
    /// cannot fire although due stops its run for review rather than being tried again at
    /// every wake-up; a failure of the database itself fails the pass. Returns the fired
    /// timers, each with its run.
    fn fire_due_timers(&mut self) -> StoreResult<Vec<(String, String)>>;

    /// The fired timer a resumed attempt continues after: `{timer_id, wake_at, output}`.
    fn fired_timer_of_attempt(&self, attempt_id: &str) -> StoreResult<Option<Value>>;
}

/// Side effects a child applies exactly once, by key.
pub trait Effects {
    /// Reserves the effect `effect_key` for the current attempt, or answers from its record.
    fn reserve_effect(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        effect_key: &str,
        fingerprint: &str,
        contract: RetryContract,
    ) -> StoreResult<Reservation>;

    /// Records that the child is about to apply the effect. From here on, a child that
    /// vanishes without a receipt leaves the effect uncertain (contract `never`).
    fn effect_applying(&mut self, claim: &Claim, effect_id: &str) -> StoreResult<()>;

    /// Stores the outcome of an application: the receipt, or a definitive failure.
    fn settle_effect(
        &mut self,
        claim: &Claim,
        effect_id: &str,
        result: &EffectResult,
    ) -> StoreResult<()>;
}

/// Large values uploaded in chunks.
pub trait ValueWrites {
    /// Stores the chunk of value `sha256` (`bytes` long) that starts at `offset`, for the run
    /// holding `claim`, and links the value to that run. Chunks come in order: a chunk that
    /// starts before what is stored is one sent again (it changes nothing), one after it is
    /// refused; an empty one only asks how much is stored. A value already whole needs no
    /// chunk (the answer says so at once, whatever was sent): the same value is stored once.
    /// The last chunk's arrival checks the hash.
    fn put_value_chunk(
        &mut self,
        claim: &Claim,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut>;

    /// Stores a chunk of value `sha256` as [`ValueWrites::put_value_chunk`] does, for a
    /// client's submission to `interaction_id`: the request must be pending, `attempt_id` its
    /// own and its deadline not passed; the value is linked to the request's run. An upload
    /// that is never submitted is left partial or unreferenced; once the request closes, a
    /// partial one is a `value_partial` finding and [`Recovery::repair`] removes it.
    fn put_interaction_value_chunk(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut>;
}

/// Runs whose child or claim was lost, runs in review and the ways out, and the repair of
/// contradictions.
pub trait Recovery {
    /// The owner reports that the run's child went away without finishing (crash, kill,
    /// handshake timeout). The run is requeued, or stopped for review after too many losses
    /// in a row or when an effect's outcome is unknown.
    fn child_lost(&mut self, claim: &Claim, reason: &str) -> StoreResult<RecoveredRun>;

    /// `WriteTx::recover_expired` for a running host whose owner id is `stalled_owner`. The
    /// host renews its own claims while their children work, so one of them expires only when
    /// the host could not renew it in time (it stalled past the lease, or its writes kept
    /// failing): its child did nothing wrong, and the run is requeued without counting a loss
    /// (an effect the child was applying still becomes uncertain). Other claims count one.
    fn recover_expired_claims(
        &mut self,
        stalled_owner: Option<&str>,
    ) -> StoreResult<Vec<RecoveredRun>>;

    /// Requeues a run whose child could not even be started because the host itself ran out
    /// of something (descriptors, memory, processes): the host's failure, not the run's, so
    /// no loss is counted, and the run is ready again at `retry_at`.
    fn release_after_launch_failure(
        &mut self,
        claim: &Claim,
        why: &str,
        retry_at: UnixMillis,
    ) -> StoreResult<RecoveredRun>;

    /// The owner stopped the run's child because the host is stopping: requeue the run from
    /// its last committed boundary without counting a loss (the run did nothing wrong).
    /// `applying` effects of `never` contracts still become uncertain.
    fn release_at_shutdown(&mut self, claim: &Claim) -> StoreResult<RecoveredRun>;

    /// Requeues a running run from its last committed boundary without counting a loss, for
    /// a reason that is not the run's doing (`why` is kept with the run and its event).
    fn release_uncounted(&mut self, claim: &Claim, why: &str) -> StoreResult<RecoveredRun>;

    /// Stops a running run for manual review (for example `source_changed`): the claim is
    /// released and nothing is retried until a person acts. The attempt is interrupted unless
    /// it carries committed work (see below), which the retry continues.
    fn send_to_review(&mut self, claim: &Claim, reason: &str) -> StoreResult<u64>;

    /// A person settles an `uncertain` effect of a run in review with what they found out:
    /// it was `applied` (with the receipt they provide) or it `failed` (it did not happen).
    /// Once no effect of the run is uncertain, the run continues: its current node runs
    /// again, and reserving the effect's key returns what the person recorded (the receipt,
    /// or the failure) instead of applying it again.
    fn resolve_effect(
        &mut self,
        run_id: &str,
        effect_id: &str,
        result: &EffectResult,
        who: Provenance<'_>,
    ) -> StoreResult<u64>;

    /// A person's way out of review: the run goes on from the last committed boundary, with
    /// its count of lost children cleared (for repeated losses once the cause is fixed, or a
    /// changed source the person has put back): its current node runs again, or its attempt
    /// continues with what it holds (an answer, a submission to judge), or it waits again for
    /// the answer to its pending request. Refused while an effect is uncertain (resolve it
    /// first: a retry must not apply it again) and for a run not in review. Never records a
    /// success.
    fn retry_from_review(&mut self, run_id: &str, who: Provenance<'_>) -> StoreResult<u64>;

    /// A person leaves a review for a changed source by keeping the change: the run takes
    /// `source_hash` (its workflow file as the host read it now), its stored mounts and graph
    /// snapshot are cleared for the next child's hello, and it goes on as after
    /// [`Self::retry_from_review`]; the `retried` event keeps the decision (who, why, the old
    /// and the new hash). Refused for a run
    /// not in review, one in review for another reason, and while an effect is uncertain.
    fn retry_accepting_source(
        &mut self,
        run_id: &str,
        source_hash: &str,
        who: Provenance<'_>,
    ) -> StoreResult<u64>;

    /// Fixes the repairable findings of [`RunReads::diagnose`], each from its durable
    /// evidence, in this transaction (the findings are read in it):
    ///
    /// - a `running` run nobody owns is requeued and its running attempt interrupted (the
    ///   work is redone, never assumed done); `applying` effects of `never` contracts become
    ///   uncertain and the run goes to review, exactly as recovery does;
    /// - claims bound to idle or terminal runs are released; missing claim/queue rows created;
    /// - a terminal run's open attempts, pending requests and live effects are closed as
    ///   cancelled (effects that were applying become uncertain, never applied);
    /// - queue rows and viewer projections are rebuilt from the run row.
    ///
    /// Findings that need judgement are reported in `left_for_review` and left alone.
    fn repair(&mut self) -> StoreResult<RepairReport>;
}

/// Bookkeeping of child processes: launch, process, handshake, exit (no run state changes).
pub trait ChildRecords {
    /// Records a child about to be launched for `run_id` at `generation`. Returns its epoch.
    fn record_child_launch(
        &mut self,
        run_id: &str,
        generation: u64,
        host_epoch: i64,
        mode: ChildMode,
    ) -> StoreResult<i64>;

    /// Records the spawned process's pid and start time (so a reused pid is never killed).
    fn record_child_process(
        &mut self,
        child_epoch: i64,
        pid: u32,
        start_time: u64,
    ) -> StoreResult<()>;

    /// Records the child's successful `worker.hello`.
    fn record_child_handshake(&mut self, child_epoch: i64) -> StoreResult<()>;

    /// Records how the child ended. Only the first exit counts.
    fn record_child_exit(&mut self, child_epoch: i64, exit: &ChildExitRecord) -> StoreResult<()>;
}

/// Workflow messages, progress, and the reads a transaction makes of the runs it writes.
pub trait HostOps {
    /// Claims up to `limit` undelivered messages of `session` for `owner` for `lease_ms`, no
    /// more than fit `max_bytes` of reply (the first always does): a claimed message must
    /// reach its claimant, or it waits out the lease and the same oldest messages are taken
    /// again, for good. Messages whose earlier delivery claim expired are handed out again
    /// (at-least-once; the acknowledgement makes delivery final). With `after`, only those
    /// that come after that message (a message id of the session; an unknown one gives none).
    fn claim_messages(
        &mut self,
        session: &str,
        owner: &str,
        after: Option<&str>,
        limit: u32,
        lease_ms: i64,
        max_bytes: usize,
    ) -> StoreResult<ClaimedMessages>;

    /// Marks a message delivered. Acknowledging twice is harmless and returns the first time.
    fn ack_message(&mut self, message_id: &str) -> StoreResult<UnixMillis>;

    /// Records a child's progress message: an event within the run's event budget, and the
    /// latest update for its `(type, key)` when its data is a workflow update (see
    /// `super::updates`). No other state changes.
    fn progress(&mut self, claim: &Claim, message: &str, data: &Value)
        -> StoreResult<ProgressKept>;

    /// One run, as this transaction sees it.
    fn run(&self, run_id: &str) -> StoreResult<RunRecord>;

    /// The run's input, stored graph snapshot and mounted sources.
    fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)>;

    /// A run's status and revision, as this transaction sees it.
    fn run_state(&self, run_id: &str) -> StoreResult<(RunStatus, u64)>;

    /// The run's status.
    fn run_status(&self, run_id: &str) -> StoreResult<RunStatus>;

    /// Runs ready to activate at the transaction time, oldest first (including runs this
    /// transaction queued).
    fn ready_runs(&self, limit: u32) -> StoreResult<Vec<String>>;

    /// The run's mounted sources as saved.
    fn mounted_sources(&self, run_id: &str) -> StoreResult<Value>;

    /// How many times in a row the run's child was lost without progress (a transition
    /// clears it).
    fn child_losses(&self, run_id: &str) -> StoreResult<u32>;

    /// The attempt's deadline.
    fn attempt_deadline(&self, attempt_id: &str) -> StoreResult<Option<UnixMillis>>;

    /// The run's open (running) attempt and its node.
    fn current_open_attempt(&self, run_id: &str) -> StoreResult<Option<(String, String)>>;

    /// The latest finished attempt of every node of the run, in the order they finished: what
    /// a node's context holds as `results` (and, for the `succeeded` ones, `outputs`), so a
    /// resumed child sees exactly the context an uninterrupted one would have.
    fn latest_results(&self, run_id: &str) -> StoreResult<Vec<NodeResult>>;

    /// The output of the run's latest succeeded attempt: the input of the node a resumed child
    /// continues with (`None` before any node succeeded; the run's input applies then).
    fn last_node_output(&self, run_id: &str) -> StoreResult<Option<Value>>;

    /// The answer of the latest answered decision of an attempt.
    fn answer_for_attempt(&self, attempt_id: &str) -> StoreResult<Option<Value>>;

    /// The submission of the run's requests that is being validated, if any.
    fn validating_submission(&self, run_id: &str) -> StoreResult<Option<String>>;

    /// A submission's payload.
    fn submission_payload(&self, submission_id: &str) -> StoreResult<Value>;
}

/// What a store that broke the contract of `write_dyn` or `savepoint_dyn` (returned `Ok`
/// without running the body) is told; no store of ours does.
fn body_not_run() -> StoreError {
    StoreError::InvalidInput("the store reported a transaction whose body did not run".into())
}

impl dyn Storage + '_ {
    /// Runs `body` in one write transaction at `now` ([`Storage::write_dyn`]) and returns its
    /// value.
    pub fn write<T>(
        &mut self,
        now: UnixMillis,
        body: impl FnOnce(&mut dyn Transaction) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut out = None;
        self.write_dyn(
            now,
            Box::new(|w| {
                out = Some(body(w)?);
                Ok(())
            }),
        )?;
        out.ok_or_else(body_not_run)
    }
}

impl dyn Transaction + '_ {
    /// Runs `body` in a savepoint ([`Transaction::savepoint_dyn`]) and returns its value.
    pub fn savepoint<T>(
        &mut self,
        body: impl FnOnce(&mut dyn Transaction) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut out = None;
        self.savepoint_dyn(Box::new(|w| {
            out = Some(body(w)?);
            Ok(())
        }))?;
        out.ok_or_else(body_not_run)
    }
}
