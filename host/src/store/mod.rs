//! The durable state store: the only module that speaks SQL.
//!
//! A [`Store`] owns one read-write SQLite connection to `$PIW_HOME/state.sqlite`. Every change
//! happens inside [`Store::write`], which opens one `BEGIN IMMEDIATE` transaction and hands out a
//! [`WriteTx`]. Each lifecycle operation on `WriteTx` is atomic on its own (a batch undoes a
//! failed one alone: [`WriteTx::command_group`], [`WriteTx::savepoint`]) and ends with the
//! common tail of every run write ([`WriteTx::finish_run_write`], or `finish_paused_write` for
//! pause and resume), which bumps the run's revision, appends exactly one event (whose sequence
//! number equals the new revision), derives the queue row and refreshes the viewer projection.
//! Operations that need ownership first pass the fence ([`WriteTx::fence`]): one read of the
//! claim row, the engine's pure `check_fence`, then the renewal (`heartbeat_at`, `expires_at =
//! now + lease`) in the same transaction; a failure is `StoreError::ClaimLost { reason }` and
//! the transaction rolls back.
//!
//! Where the operations live: `lifecycle/mod.rs` a run's course; `lifecycle/requests.rs`
//! decisions, interactive requests, messages; `lifecycle/timers.rs` durable timers;
//! `lifecycle/recovery.rs` losses, review and `repair`; `lifecycle/holds.rs` holding and
//! releasing interactive steps (whose time runs only while held); `prune.rs` retention;
//! `values.rs` large values; `view.rs` the viewers' paged reads; `controllers.rs` the
//! controllers' tables. `durability.rs`: [`Store::defer_wal_sync`] (commits stop fsyncing; the
//! returned `WalSync` does it from another thread), the auto-checkpoint interval, and how many
//! commits a sync must cover.
//!
//! The operations the engine calls are the methods of its store traits (`engine::store::port`),
//! implemented once, in the module that holds their SQL: `impl Storage for Store` and
//! `impl Transaction for WriteTx` in `port.rs` (the write entry, savepoints, commands, the
//! transaction's state), and one supertrait per module (`RunReads` in `read.rs`, `Retention` in
//! `prune.rs`, `Lifecycle`, `Requests`, `Holds`, `Timers`, `Recovery` in `lifecycle/`, and
//! `Effects`, `ValueWrites`, `ChildRecords`, `HostOps`). No inherent method shares their names:
//! callers outside the store `use store::prelude::*`. What only piw-host calls (`list_runs`,
//! `events_page`, `begin_host_epoch`, ...) stays inherent. [`WriteTx::command`] stores a durable
//! command's response in its transaction (acknowledgement and commit are one fact);
//! [`WriteTx::command_group`] runs a batch under one savepoint and, when one command fails after
//! writing, replays the batch a savepoint each.
//!
//! Events are stored in commit order (one commit's events share a page); a run's events form a
//! chain (`runs.last_event_id`, `prev_event_id`) that `Store::events` walks back and
//! `diagnose` checks (`event_sequence_mismatch`, `event_chain_broken`), with the revision, the
//! queue row and the projection every run write leaves.
//!
//! Invariants kept here (docs/RULES.md, rules 1–6, 11, 12):
//! - a run has one claim row; its generation only grows and is never reused;
//! - a fenced write with a stale, expired, foreign or released claim changes nothing;
//! - an expired claim never renews itself;
//! - the claim token is never stored (only its SHA-256), logged, or put in an error.

mod children;
mod controllers;
mod diagnose;
mod dump;
mod durability;
mod effects;
pub mod files;
mod host_ops;
mod lifecycle;
mod port;
mod prune;
mod read;
mod receipts;
mod schema;
mod updates;
mod values;
mod view;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension as _, TransactionBehavior};

pub use children::OrphanChild;
pub use diagnose::DATABASE_MALFORMED;
pub use durability::WalSync;
pub use model::*;
pub use piw_engine::store::error::{DatabaseError, FileProblem, StoreError, StoreResult};
pub use piw_engine::store::model;
pub use piw_engine::store::port::{
    ChildRecords, Effects, Holds, HostOps, Lifecycle, Recovery, Requests, Retention, RunReads,
    Storage, Timers, Transaction, ValueWrites,
};
pub use piw_engine::store::records::*;
pub use receipts::{receipt_is_windowed, StoredReceipt, RECEIPTS_KEPT_PER_RUN_AND_KIND};
pub use schema::{ddl_digest, DDL, SCHEMA_ID};
pub use updates::{
    workflow_update, EVENT_BURST, EVENT_RATE_PER_SECOND, MAX_ATTEMPT_EVENTS,
    MAX_ATTEMPT_EVENT_BYTES, MAX_RUN_EVENTS, MAX_RUN_EVENT_BYTES, MAX_UPDATE_DATA_BYTES,
    MAX_UPDATE_KEYS,
};
pub use view::{
    attempt_spans, is_short_id, AttemptDetail, AttemptRequest, AttemptSpan, EventCursor, EventPage,
    NodeActivity, RunFilter, RunSummary,
};

/// The store's operations, which are methods of the engine's store traits: `use
/// piw_host::store::prelude::*` (or `crate::store::prelude::*`) brings them all into scope for
/// calls on a `Store` or a `WriteTx`.
pub mod prelude {
    pub use piw_engine::store::controller_port::{
        ControllerStorage as _, ControllerTransaction as _,
    };
    pub use piw_engine::store::port::{
        ChildRecords as _, Effects as _, Holds as _, HostOps as _, Lifecycle as _, Recovery as _,
        Requests as _, Retention as _, RunReads as _, Storage as _, Timers as _, Transaction as _,
        ValueWrites as _,
    };
}

use crate::clock::{Clock, SystemClock, UnixMillis};
use crate::ids::{ClaimToken, IdSource, OsIds};

/// Where a store draws the random part of its row ids, its claim tokens and a new database's
/// cursor key: shared by the clones of one configuration (a host reopening its file after a
/// crash goes on drawing from it).
pub type SharedIds = Arc<std::sync::Mutex<dyn IdSource>>;

/// Default claim lease: a claim not renewed by a write or heartbeat for this long expires.
pub const DEFAULT_LEASE_MS: i64 = 30_000;
/// Default number of consecutive child losses without progress before a run stops for review.
pub const DEFAULT_MAX_CHILD_LOSSES: u32 = 3;

/// Called with the names of the operations in a transaction just before it commits; returning
/// `true` aborts the transaction (rolls it back) with [`StoreError::InjectedFault`]. Only crash
/// tests install one.
pub type FaultHook = Arc<dyn Fn(&[&'static str]) -> bool + Send + Sync>;

/// When a [`CommitObserver`] is called: just before a transaction commits, or just after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStage {
    Before,
    After,
}

/// Called with the names of the operations of every transaction (the store's operation names:
/// event kinds such as `transition` or `expire_decision`, and `begin_host_epoch`,
/// `record_child_exit`, `claim_messages`, ...), just before and just after it commits. The
/// host's crash tests (`PIW_FAULT=before_op:<op>` / `after_op:<op>`) abort the process there,
/// so every durable commit has a crash point on each side.
pub type CommitObserver = Arc<dyn Fn(CommitStage, &[&'static str]) + Send + Sync>;

/// How a store behaves.
#[derive(Clone)]
pub struct StoreConfig {
    /// Lease length in milliseconds, renewed by every fenced write.
    pub lease_ms: i64,
    /// Consecutive child losses without a committed transition before the run stops for review.
    pub max_child_losses: u32,
    /// The time source of transactions opened with [`Store::write`] (the engine's give their
    /// time: [`Store::write_at`]).
    pub clock: Arc<dyn Clock>,
    /// The random bits of new ids and claim tokens: [`OsIds`] (the default, and every
    /// production path's); a simulation gives a seeded source to replay a seed bit for bit.
    pub ids: SharedIds,
    /// Test-only: abort a transaction just before commit.
    pub fault_hook: Option<FaultHook>,
    /// Test-only: watch every commit (crash points of the host process).
    pub commit_observer: Option<CommitObserver>,
    /// Test-only: while this file exists, every transaction fails just before its commit as on
    /// a full disk ([`StoreError::DiskFull`]); the host's `PIW_FAULT=disk_full:<file>`.
    pub disk_full_while: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease_ms: DEFAULT_LEASE_MS,
            max_child_losses: DEFAULT_MAX_CHILD_LOSSES,
            clock: Arc::new(SystemClock),
            ids: Arc::new(std::sync::Mutex::new(OsIds)),
            fault_hook: None,
            commit_observer: None,
            disk_full_while: None,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("lease_ms", &self.lease_ms)
            .field("max_child_losses", &self.max_child_losses)
            .field("clock", &self.clock)
            .field("ids", &self.ids)
            .field("fault_hook", &self.fault_hook.is_some())
            .field("commit_observer", &self.commit_observer.is_some())
            .field("disk_full_while", &self.disk_full_while)
            .finish()
    }
}

/// The durable state store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    config: StoreConfig,
    /// Transactions committed through this handle (see [`Store::commits`]).
    commits: u64,
    /// While commits fail because the disk is full: since when, and how often (see
    /// [`Store::disk_full_retry_at`]).
    disk_full: Option<DiskFullSpell>,
    /// What `run.list` and `run.prune` sign their cursors with (`schema_info.cursor_key`).
    cursor_key: crate::protocol::payload::CursorKey,
}

/// A time during which every commit failed because the disk holding the database was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFullSpell {
    /// When the first commit failed.
    pub since: UnixMillis,
    /// When the latest commit failed.
    pub last_failure: UnixMillis,
    /// How many commits failed so far.
    pub failures: u64,
}

/// The first retry's delay after a commit failed on a full disk; each further failure
/// doubles it, up to [`DISK_FULL_MAX_BACKOFF_MS`].
pub const DISK_FULL_FIRST_BACKOFF_MS: i64 = 50;
/// The longest wait between two attempts of the host's own work while the disk stays full:
/// short enough that work resumes within seconds once there is space, long enough that a
/// full disk costs the host nothing noticeable.
pub const DISK_FULL_MAX_BACKOFF_MS: i64 = 5_000;

impl DiskFullSpell {
    /// When the host's own work (deadlines, heartbeats, scheduling) should be tried again.
    pub fn retry_at(&self) -> UnixMillis {
        let doublings = u32::try_from(self.failures.saturating_sub(1).min(16)).unwrap_or(16);
        let delay = DISK_FULL_FIRST_BACKOFF_MS
            .saturating_mul(1_i64 << doublings)
            .min(DISK_FULL_MAX_BACKOFF_MS);
        self.last_failure.saturating_add(delay)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if absent) the state database at `path` for reading and writing.
    ///
    /// An existing file must be a piw state database with this build's schema id and DDL
    /// digest; anything else (another digest, a foreign SQLite database, a non-SQLite or empty
    /// file) is refused with [`StoreError::IncompatibleDatabase`] and left untouched.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        configure_sqlite_once();
        files::check_siblings(&path)?;
        if path.exists() {
            schema::check_existing(&path)?;
        } else {
            schema::create_new(&path, config.clock.now_ms(), &config.ids)?;
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Savepoint journals of group commits stay in memory instead of a temp file.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Keep one plan per statement: without it SQLite re-prepares statements whose plan
        // could depend on bound values (the attempt-ordinal insert) on every execution.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(128);
        let cursor_key = schema::cursor_key(&conn)?;
        Ok(Self {
            conn,
            path,
            config,
            commits: 0,
            disk_full: None,
            cursor_key,
        })
    }

    /// Opens an existing state database read-only, for viewers and `diagnose`.
    pub fn open_read_only(path: impl AsRef<Path>, config: StoreConfig) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(StoreError::Io {
                path,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        files::check_siblings(&path)?;
        schema::check_existing(&path)?;
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let cursor_key = schema::cursor_key(&conn)?;
        Ok(Self {
            conn,
            path,
            config,
            commits: 0,
            disk_full: None,
            cursor_key,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The store's current time.
    pub fn now_ms(&self) -> UnixMillis {
        self.config.clock.now_ms()
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction and commits it if `f` succeeds.
    ///
    /// If `f` fails, nothing it did is kept. Operations inside `f` that should fail on their own
    /// without undoing their neighbours (group commit) go through [`WriteTx::command_group`] or
    /// [`WriteTx::savepoint`]. A transaction SQLite rolled back by itself is never reported as
    /// committed ([`StoreError::TransactionLost`]).
    pub fn write<T>(
        &mut self,
        f: impl FnOnce(&mut WriteTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let now = self.config.clock.now_ms();
        self.write_at(now, f)
    }

    /// [`Store::write`] at time `now` (the transaction's every expiry comparison and
    /// timestamp) instead of the clock's: the engine's turns write at the time they were
    /// handed.
    pub fn write_at<T>(
        &mut self,
        now: UnixMillis,
        f: impl FnOnce(&mut WriteTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let changes_before = self.conn.total_changes();
        let result = self.write_once(now, f);
        // A transaction that wrote nothing commits even on a full disk: it says nothing about
        // space being back.
        let wrote = self.conn.total_changes() != changes_before;
        self.note_disk_full(now, &result, wrote);
        result
    }

    /// Keeps [`Store::disk_full_retry_at`] up to date after a commit attempt, and says when
    /// the disk fills and when it has space again: once each, not per attempt (a host whose
    /// disk stays full would otherwise log a line per retry).
    fn note_disk_full<T>(&mut self, now: UnixMillis, result: &StoreResult<T>, wrote: bool) {
        match (result, &mut self.disk_full) {
            (Err(e), None) if e.is_disk_full() => {
                tracing::warn!(
                    path = %self.path.display(),
                    "the disk holding the database is full: nothing is stored until there is \
                     space; the host retries its own work with growing pauses (up to {} s)",
                    DISK_FULL_MAX_BACKOFF_MS / 1_000
                );
                self.disk_full = Some(DiskFullSpell {
                    since: now,
                    last_failure: now,
                    failures: 1,
                });
            }
            (Err(e), Some(spell)) if e.is_disk_full() => {
                spell.failures += 1;
                spell.last_failure = now;
            }
            (Ok(_), Some(spell)) if wrote => {
                tracing::warn!(
                    failed_commits = spell.failures,
                    full_for_ms = now - spell.since,
                    "the disk holding the database has space again; the host works on"
                );
                self.disk_full = None;
            }
            _ => {}
        }
    }

    /// While the disk holding the database is full (the latest commit failed so): the
    /// current spell. `None` once a commit succeeded again.
    pub fn disk_full_spell(&self) -> Option<DiskFullSpell> {
        self.disk_full
    }

    fn write_once<T>(
        &mut self,
        now: UnixMillis,
        f: impl FnOnce(&mut WriteTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut w = WriteTx {
            tx,
            now,
            config: &self.config,
            ops: Vec::new(),
            revisions: Vec::new(),
            receipts_written: Default::default(),
        };
        let path = &self.path;
        let out = f(&mut w).map_err(|e| e.on_disk(path))?;
        // SQLite may have rolled the transaction back by itself (a full disk, an I/O error):
        // whatever ran after that committed statement by statement, and nothing of this
        // transaction may be reported as committed.
        w.ensure_in_transaction()?;
        if let Some(hook) = &self.config.fault_hook {
            if hook(&w.ops) {
                let names = w.ops.join(",");
                drop(w); // rolls back
                return Err(StoreError::InjectedFault(names));
            }
        }
        if self
            .config
            .disk_full_while
            .as_ref()
            .is_some_and(|file| file.exists())
        {
            drop(w); // rolls back
            return Err(StoreError::DiskFull {
                path: self.path.clone(),
            });
        }
        let observer = self.config.commit_observer.clone();
        let ops = observer.as_ref().map(|observe| {
            observe(CommitStage::Before, &w.ops);
            std::mem::take(&mut w.ops)
        });
        w.tx.commit()
            .map_err(|e| StoreError::from(e).on_disk(&self.path))?;
        self.commits += 1;
        if let (Some(observe), Some(ops)) = (observer, ops) {
            observe(CommitStage::After, &ops);
        }
        Ok(out)
    }

    /// Caps the database at `pages` pages (SQLite's `max_page_count`, on this connection
    /// only), or lifts the cap (`None`): a write that needs a page beyond it fails with a real
    /// `SQLITE_FULL`, as on a full disk. For tests of a full disk without a full mount; the
    /// cap is never below the pages in use. Returns the cap now in force.
    pub fn limit_pages(&mut self, pages: Option<u32>) -> StoreResult<i64> {
        // SQLite's largest page count: no cap.
        const UNCAPPED: u32 = 4_294_967_294;
        let pages = pages.unwrap_or(UNCAPPED);
        Ok(self
            .conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get(0)
            })?)
    }

    /// The pages the database uses now.
    pub fn page_count(&self) -> StoreResult<i64> {
        Ok(self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?)
    }
}

/// The error of a transaction SQLite rolled back by itself after `cause` failed: a full
/// disk stays a full disk (SQLite rolls back on `SQLITE_FULL`, and the host must know the
/// disk is full to say so and to pause its retries), anything else is
/// [`StoreError::TransactionLost`].
pub(crate) fn lost_after(cause: Option<StoreError>) -> StoreError {
    match cause {
        Some(e) if e.is_disk_full() => e,
        _ => StoreError::TransactionLost,
    }
}

/// One open write transaction. Obtained from [`Store::write`].
pub struct WriteTx<'a> {
    tx: rusqlite::Transaction<'a>,
    now: UnixMillis,
    config: &'a StoreConfig,
    ops: Vec<&'static str>,
    /// Each run write's new revision, in order (see [`WriteTx::take_revisions`]).
    revisions: Vec<(String, u64)>,
    /// The request id of every receipt this transaction inserted: a receipt found that is not
    /// among them was committed before (see [`CommandOutcome::committed_before`]).
    receipts_written: std::collections::HashSet<String>,
}

impl WriteTx<'_> {
    /// A new row id (`run-…`, `att-…`): the transaction's time and the store's id source
    /// ([`StoreConfig::ids`]).
    pub(crate) fn new_id(&self, prefix: &str) -> String {
        let mut ids = self.config.ids.lock().unwrap_or_else(|e| e.into_inner());
        piw_engine::ids::new_id(prefix, self.now, &mut *ids)
    }

    /// A fresh claim token from the store's id source.
    fn new_claim_token(&self) -> ClaimToken {
        let mut ids = self.config.ids.lock().unwrap_or_else(|e| e.into_inner());
        ClaimToken::generate(&mut *ids)
    }

    /// Runs `f` inside a savepoint: if it fails, only its own changes are undone and the error
    /// is returned, while the enclosing transaction stays usable.
    ///
    /// Fails with [`StoreError::TransactionLost`] when SQLite has rolled the transaction back by
    /// itself: a `SAVEPOINT` then would silently open a new transaction.
    pub fn savepoint<T>(&mut self, f: impl FnOnce(&mut Self) -> StoreResult<T>) -> StoreResult<T> {
        self.ensure_in_transaction()?;
        // Cached statements: a batch may open many savepoints.
        self.tx.prepare_cached("SAVEPOINT piw_op")?.execute([])?;
        let ops_before = self.ops.len();
        let revisions_before = self.revisions.len();
        let result = f(self);
        if self.tx.is_autocommit() {
            return Err(lost_after(result.err()));
        }
        match result {
            Ok(v) => {
                self.tx.prepare_cached("RELEASE piw_op")?.execute([])?;
                Ok(v)
            }
            Err(e) => {
                self.tx.prepare_cached("ROLLBACK TO piw_op")?.execute([])?;
                self.tx.prepare_cached("RELEASE piw_op")?.execute([])?;
                self.ops.truncate(ops_before);
                self.revisions.truncate(revisions_before);
                Err(e)
            }
        }
    }

    /// Whether SQLite has rolled the whole transaction back on its own.
    pub(crate) fn lost(&self) -> bool {
        self.tx.is_autocommit()
    }

    fn conn(&self) -> &Connection {
        &self.tx
    }

    /// Checks `claim` against the stored claim at transaction time and, when it holds, renews
    /// heartbeat and expiry. On failure nothing is written and the reason is typed.
    pub(crate) fn fence(&mut self, claim: &Claim) -> StoreResult<()> {
        self.require_claim(claim)?;
        self.conn()
            .prepare_cached(
                "UPDATE claims SET heartbeat_at = ?2, expires_at = ?3 WHERE run_id = ?1",
            )?
            .execute(params![
                claim.run_id,
                self.now,
                self.now + self.config.lease_ms
            ])?;
        Ok(())
    }

    /// The fence's check alone: `ClaimLost` unless `claim` is current and not expired. Writes
    /// nothing.
    pub(crate) fn require_claim(&self, claim: &Claim) -> StoreResult<()> {
        if let Err(reason) = self.check_claim(claim)? {
            // Run id and reason only: never the token or its hash.
            tracing::debug!(run_id = %claim.run_id, %reason, "fenced write refused");
            return Err(StoreError::ClaimLost {
                run_id: claim.run_id.clone(),
                reason,
            });
        }
        Ok(())
    }

    /// `claim` against the stored claim at transaction time (the pure `check_fence`).
    fn check_claim(&self, claim: &Claim) -> StoreResult<Result<(), crate::store::ClaimLostReason>> {
        let stored = self.stored_claim(&claim.run_id)?;
        let token_hash = claim.token.hash();
        let presented = PresentedClaim {
            generation: claim.generation,
            owner_kind: claim.owner_kind,
            owner_id: &claim.owner_id,
            token_hash: &token_hash,
        };
        Ok(check_fence(&stored, presented, self.now))
    }

    /// Authorizes a write under `fence`: a claim must pass the fence; an unclaimed writer is
    /// refused while anyone holds a live claim.
    pub(crate) fn authorize(&mut self, run_id: &str, fence: Fence<'_>, op: Op) -> StoreResult<()> {
        match fence {
            Fence::Claim(claim) => {
                if claim.run_id != run_id {
                    return Err(StoreError::InvalidInput(format!(
                        "claim for run {} presented for run {run_id}",
                        claim.run_id
                    )));
                }
                self.fence(claim)
            }
            Fence::Unclaimed => {
                let stored = self.stored_claim(run_id)?;
                if stored.is_live(self.now) {
                    let status = self.run_row(run_id)?.status;
                    return Err(StoreError::InvalidTransition {
                        run_id: run_id.to_owned(),
                        op,
                        status,
                        detail: format!(
                            "a live {} claim (generation {}) owns the run",
                            stored.owner_kind.map(|k| k.as_str()).unwrap_or("unknown"),
                            stored.generation
                        ),
                    });
                }
                Ok(())
            }
        }
    }

    pub(crate) fn stored_claim(&self, run_id: &str) -> StoreResult<StoredClaim> {
        let row = self
            .conn()
            .prepare_cached(
                "SELECT generation, owner_kind, owner_id, token_hash, expires_at
                 FROM claims WHERE run_id = ?1",
            )?
            .query_row([run_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })
            .optional()?;
        let Some((generation, kind, owner_id, token_hash, expires_at)) = row else {
            return Err(StoreError::RunNotFound(run_id.to_owned()));
        };
        Ok(StoredClaim {
            generation: generation as u64,
            owner_kind: kind.as_deref().map(parse_owner).transpose()?,
            owner_id,
            token_hash,
            expires_at,
        })
    }

    /// Binds a fresh claim for `owner`, bumping the generation. The caller has checked that
    /// no live claim exists.
    pub(crate) fn bind_new_claim(
        &mut self,
        run_id: &str,
        owner_kind: OwnerKind,
        owner_id: &str,
    ) -> StoreResult<Claim> {
        let token = self.new_claim_token();
        let generation: i64 = self
            .conn()
            .prepare_cached(
                "UPDATE claims SET generation = generation + 1, owner_kind = ?2, owner_id = ?3,
                        token_hash = ?4, heartbeat_at = ?5, expires_at = ?6
                 WHERE run_id = ?1 RETURNING generation",
            )?
            .query_row(
                params![
                    run_id,
                    owner_kind.as_str(),
                    owner_id,
                    token.hash(),
                    self.now,
                    self.now + self.config.lease_ms
                ],
                |r| r.get(0),
            )?;
        Ok(Claim {
            run_id: run_id.to_owned(),
            owner_kind,
            owner_id: owner_id.to_owned(),
            generation: generation as u64,
            token,
        })
    }

    /// Releases whatever claim the run has; the generation stays.
    pub(crate) fn release_claim(&mut self, run_id: &str) -> StoreResult<()> {
        self.conn()
            .prepare_cached(
                "UPDATE claims SET owner_kind = NULL, owner_id = NULL, token_hash = NULL,
                        expires_at = NULL WHERE run_id = ?1",
            )?
            .execute([run_id])?;
        Ok(())
    }

    /// The closing step of every run write: append the one event of this write (sequence =
    /// new revision), bump the revision, derive the queue state, refresh the projection.
    /// Returns the new revision.
    pub(crate) fn finish_run_write(
        &mut self,
        run_id: &str,
        op: &'static str,
        data: serde_json::Value,
    ) -> StoreResult<u64> {
        self.ops.push(op);
        let event_id = self.append_event(run_id, op, &data)?;
        // UPDATE then SELECT: `RETURNING` makes SQLite build a temporary table per call,
        // several times the cost of a cached point read on this hot path. A run that has just
        // ended is no longer paused: the flag only ever holds a run back, and a finished run
        // has nothing left to hold back (a pause that arrived during its last step lapses).
        self.conn()
            .prepare_cached(
                "UPDATE runs SET revision = revision + 1, updated_at = ?2, last_event_id = ?3,
                        paused = CASE WHEN status IN ('completed', 'failed', 'cancelled', 'timed_out')
                                      THEN 0 ELSE paused END
                 WHERE run_id = ?1",
            )?
            .execute(params![run_id, self.now, event_id])?;
        let (revision, status, paused, current_node): (i64, String, bool, Option<String>) = self
            .conn()
            .prepare_cached(
                "SELECT revision, status, paused, current_node FROM runs WHERE run_id = ?1",
            )?
            .query_row([run_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
        let after = RunAfterWrite {
            revision,
            status: parse_status(&status)?,
            paused,
            current_node: current_node.as_deref(),
            queue_before: None,
        };
        self.finish_run_write_tail(run_id, op, after)
    }

    /// Appends the event of the write about to bump `run_id`'s revision: its sequence is that
    /// new revision and it links to the run's newest event. Returns its id, which the caller
    /// stores as the run's `last_event_id` in the same write.
    fn append_event(
        &mut self,
        run_id: &str,
        op: &'static str,
        data: &serde_json::Value,
    ) -> StoreResult<i64> {
        let inserted = self
            .conn()
            .prepare_cached(
                "INSERT INTO events (run_id, seq, prev_event_id, kind, at, data)
                 SELECT run_id, revision + 1, last_event_id, ?2, ?3, ?4 FROM runs WHERE run_id = ?1",
            )?
            .execute(params![run_id, op, self.now, data.to_string()])?;
        if inserted != 1 {
            return Err(StoreError::RunNotFound(run_id.to_owned()));
        }
        Ok(self.conn().last_insert_rowid())
    }

    /// [`WriteTx::finish_run_write`] for a write that changes only the paused flag of a row it
    /// has just read (`row`): one `UPDATE` sets the flag and the revision together, and nothing
    /// is read back (two statements less on the commonest client commands).
    pub(crate) fn finish_paused_write(
        &mut self,
        run_id: &str,
        op: &'static str,
        row: &lifecycle::RunRow,
        paused: bool,
    ) -> StoreResult<u64> {
        self.ops.push(op);
        let before = row.revision as i64;
        let revision = before + 1;
        let event_id = self.append_event(run_id, op, &serde_json::json!({}))?;
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE runs SET paused = ?2, revision = ?3, updated_at = ?4, last_event_id = ?6
                 WHERE run_id = ?1 AND revision = ?5",
            )?
            .execute(params![
                run_id, paused, revision, self.now, before, event_id
            ])?;
        if changed != 1 {
            // The row changed since the caller read it in this same transaction: a bug.
            return Err(StoreError::CorruptRow(format!(
                "run {run_id} is no longer at revision {}",
                row.revision
            )));
        }
        let after = RunAfterWrite {
            revision,
            status: row.status,
            paused,
            current_node: row.current_node.as_deref(),
            // Every write keeps the queue row at `queue_state_for` of the row it wrote, so the
            // row read in this transaction tells the queue state now.
            queue_before: Some(queue_state_for(row.status, row.paused)),
        };
        self.finish_run_write_tail(run_id, op, after)
    }

    /// What every run write shares once the run row holds its new revision and its event: the
    /// queue state, the projection.
    fn finish_run_write_tail(
        &mut self,
        run_id: &str,
        op: &'static str,
        after: RunAfterWrite<'_>,
    ) -> StoreResult<u64> {
        let RunAfterWrite {
            revision,
            status,
            paused,
            current_node,
            queue_before,
        } = after;
        let queue_after = queue_state_for(status, paused);
        if queue_before != Some(queue_after) {
            self.conn()
                .prepare_cached("UPDATE queue SET state = ?2 WHERE run_id = ?1 AND state != ?2")?
                .execute(params![run_id, queue_after.as_str()])?;
        }
        // The projection row exists from the run's first write on: a plain point update.
        let updated = self
            .conn()
            .prepare_cached(
                "UPDATE run_views SET status = ?2, paused = ?3, current_node = ?4, revision = ?5,
                        last_event = ?6, updated_at = ?7 WHERE run_id = ?1",
            )?
            .execute(params![
                run_id,
                status.as_str(),
                paused,
                current_node,
                revision,
                op,
                self.now
            ])?;
        if updated == 0 {
            self.conn()
                .prepare_cached(
                    "INSERT INTO run_views (run_id, workflow_name, origin_session, status, paused,
                                            current_node, revision, last_event, updated_at)
                     SELECT run_id, workflow_name, origin_session, status, paused, current_node,
                            revision, ?2, updated_at FROM runs WHERE run_id = ?1",
                )?
                .execute(params![run_id, op])?;
        }
        if status.is_terminal() {
            // A controller's child workflow run ended: its resource looks again (rare: once
            // per run, one indexed read).
            self.wake_resources_of_runs(&[run_id.to_owned()])?;
        }
        self.revisions.push((run_id.to_owned(), revision as u64));
        Ok(revision as u64)
    }
}

/// A run row's state after a write: what the tail of every run write derives the rest from.
struct RunAfterWrite<'a> {
    revision: i64,
    status: RunStatus,
    paused: bool,
    current_node: Option<&'a str>,
    /// The queue state before the write, when the writer knows it: an unchanged state needs
    /// no statement (pausing or resuming a waiting run).
    queue_before: Option<QueueState>,
}

/// Process-wide SQLite settings, applied before the first connection opens (SQLite refuses
/// them afterwards; then they are skipped: they only save CPU).
fn configure_sqlite_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // No memory statistics: with them on, every SQLite allocation and free takes a global
        // mutex to count bytes, which piw never reads.
        // SAFETY: `sqlite3_config` with SQLITE_CONFIG_MEMSTATUS takes one int; it is called
        // once, before this process opens its first connection through this module, and
        // returns SQLITE_MISUSE (ignored) if SQLite was already initialized.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            )
        };
        if rc != rusqlite::ffi::SQLITE_OK {
            tracing::debug!(
                rc,
                "SQLite was initialized already; memory statistics stay on"
            );
        }
    });
}

pub(crate) fn parse_status(text: &str) -> StoreResult<RunStatus> {
    RunStatus::parse(text).ok_or_else(|| StoreError::CorruptRow(format!("run status {text:?}")))
}

fn parse_owner(text: &str) -> StoreResult<OwnerKind> {
    OwnerKind::parse(text).ok_or_else(|| StoreError::CorruptRow(format!("owner kind {text:?}")))
}

pub(crate) fn parse_enum<T>(
    text: &str,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::CorruptRow(format!("{what} {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_run(name: &str) -> NewRun {
        NewRun {
            workflow_name: name.into(),
            source_root: format!("/tmp/{name}.workflow.json"),
            source_hash: "abc".into(),
            mounted_sources: serde_json::json!({}),
            definition: None,
            input: serde_json::json!({}),
            origin_session: None,
            execution_mode: ExecutionMode::Detached,
            project_dir: "/tmp".into(),
        }
    }

    #[test]
    fn a_transaction_reports_the_revisions_its_kept_writes_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            Store::open(dir.path().join("state.sqlite"), StoreConfig::default()).expect("open");
        let (run_id, revisions) = store
            .write(|w| {
                let run_id = w.start_run(&new_run("w"))?;
                w.pause(&run_id, Fence::Unclaimed)?;
                // Undone by its savepoint: its revision must not be reported.
                let undone = w.savepoint(|w| {
                    w.resume(&run_id, Fence::Unclaimed)?;
                    Err::<(), _>(StoreError::InvalidInput("undo".into()))
                });
                assert!(undone.is_err());
                Ok((run_id, w.take_revisions()))
            })
            .unwrap();
        let (_, stored) = store.run_state(&run_id).unwrap();
        assert_eq!(revisions.get(&run_id), Some(&stored));
        assert_eq!(stored, 2, "started, paused");
    }

    #[test]
    fn a_transaction_reports_each_run_it_wrote_from_its_revision_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            Store::open(dir.path().join("state.sqlite"), StoreConfig::default()).expect("open");
        let (a, b) = store
            .write(|w| Ok((w.start_run(&new_run("a"))?, w.start_run(&new_run("b"))?)))
            .unwrap();
        let written = store
            .write(|w| {
                w.pause(&a, Fence::Unclaimed)?;
                w.resume(&a, Fence::Unclaimed)?;
                w.pause(&b, Fence::Unclaimed)?;
                Ok(w.take_runs_written())
            })
            .unwrap();
        let mut expected = vec![(a.clone(), 1), (b.clone(), 1)];
        expected.sort();
        assert_eq!(written, expected, "both of a's events are after revision 1");
        assert_eq!(store.run_state(&a).unwrap().1, 3);
    }

    fn meta(id: &str) -> CommandMeta {
        CommandMeta {
            request_id: id.into(),
            idempotency_key: None,
            fingerprint: id.into(),
            kind: "run.pause".into(),
            run_id: None,
        }
    }

    /// SQLite may roll a whole transaction back by itself (a full disk, an I/O error); a
    /// `ROLLBACK` inside a command stands in for that. Nothing may run on in autocommit mode
    /// (each statement would commit), and the write must fail.
    #[test]
    fn a_transaction_sqlite_rolled_back_by_itself_commits_nothing_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            Store::open(dir.path().join("state.sqlite"), StoreConfig::default()).expect("open");
        let runs: Vec<String> = (0..2)
            .map(|_| store.write(|w| w.start_run(&new_run("w"))).unwrap())
            .collect();
        let pause = |w: &mut WriteTx<'_>, run_id: &String| {
            w.pause(run_id, Fence::Unclaimed)?;
            Ok(serde_json::json!({}))
        };
        let out = store.write(|w| {
            let lost = w.command(&meta("lost"), |w| {
                w.tx.execute_batch("ROLLBACK")?;
                Err(StoreError::InvalidInput("disk full".into()))
            });
            assert!(matches!(lost, Err(StoreError::TransactionLost)), "{lost:?}");
            let group = w.command_group(&runs, |r| Ok(meta(r)), pause);
            assert!(
                matches!(group, Err(StoreError::TransactionLost)),
                "{group:?}"
            );
            let one = w.command_group(&runs[..1], |r| Ok(meta(r)), pause);
            assert!(matches!(one, Err(StoreError::TransactionLost)), "{one:?}");
            Ok(())
        });
        assert!(matches!(out, Err(StoreError::TransactionLost)), "{out:?}");
        for run_id in &runs {
            assert!(!store.run(run_id).unwrap().paused);
            assert_eq!(store.run_state(run_id).unwrap().1, 1, "started only");
        }
    }
}
