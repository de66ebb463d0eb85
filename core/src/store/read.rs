//! Read-only queries. They never return claim tokens or token hashes.

use rusqlite::{params, OptionalExtension as _, Row};
use serde_json::Value;

use super::{parse_enum, parse_status, OwnerKind, RunStatus, Store, StoreError, StoreResult};
use crate::clock::UnixMillis;
use piw_engine::store::records::*;

pub(super) fn json_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(idx)?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
        })
    })
    .transpose()
}

/// The terminal statuses as an SQL list; `terminal_statuses_match_is_terminal` keeps it equal to
/// [`RunStatus::is_terminal`].
const TERMINAL_STATUSES: &str = "'completed', 'failed', 'cancelled', 'timed_out'";

const RUN_COLUMNS: &str = "run_id, workflow_name, source_root, source_hash, definition_digest,
    input_hash, origin_session, execution_mode, project_dir, status, paused, current_node,
    current_attempt, revision, result, error, review_reason, created_at, updated_at, finished_at,
    (SELECT MIN(t.wake_at) FROM timers t WHERE t.run_id = runs.run_id AND t.status = 'pending')";

fn run_from_row(r: &Row<'_>) -> rusqlite::Result<(RunRecord, String)> {
    Ok((
        RunRecord {
            run_id: r.get(0)?,
            workflow_name: r.get(1)?,
            source_root: r.get(2)?,
            source_hash: r.get(3)?,
            definition_digest: r.get(4)?,
            input_hash: r.get(5)?,
            origin_session: r.get(6)?,
            execution_mode: r.get(7)?,
            project_dir: r.get(8)?,
            status: RunStatus::Queued,
            paused: r.get(10)?,
            current_node: r.get(11)?,
            current_attempt: r.get(12)?,
            revision: r.get::<_, i64>(13)? as u64,
            result: json_col(r, 14)?,
            result_omitted: false,
            error: r.get(15)?,
            review_reason: r.get(16)?,
            created_at: r.get(17)?,
            updated_at: r.get(18)?,
            finished_at: r.get(19)?,
            wake_at: r.get(20)?,
        },
        r.get(9)?,
    ))
}

/// generation, owner_kind, owner_id, heartbeat_at, expires_at
type ClaimRow = (
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

impl Store {
    /// One run.
    pub fn run(&self, run_id: &str) -> StoreResult<RunRecord> {
        run_record(&self.conn, run_id)
    }

    /// The run's input, definition snapshot and mounted sources (for the child's launch).
    pub fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)> {
        run_payload(&self.conn, run_id)
    }

    /// Runs, newest first, optionally of one origin session.
    pub fn list_runs(&self, session: Option<&str>, limit: u32) -> StoreResult<Vec<RunRecord>> {
        self.list_runs_where(session, false, &[], limit)
    }

    /// [`Store::list_runs`], and with `unfinished_only` only the runs whose status is not
    /// terminal ([`RunStatus::is_terminal`]); with `statuses` not empty, only runs in one of
    /// them.
    pub fn list_runs_where(
        &self,
        session: Option<&str>,
        unfinished_only: bool,
        statuses: &[RunStatus],
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>> {
        self.list_runs_after(session, unfinished_only, statuses, None, None, limit)
    }

    /// [`Store::list_runs_where`], continued after the run whose place in the list is `after`
    /// (the [`RunListKey`] of the last run of the previous page). The order is by key, and a
    /// run's key never changes, so paging lists every run that existed when it began exactly
    /// once, whatever is inserted or changes status meanwhile. With `id_prefix`, only the runs
    /// it names as a person's shortened run id: a prefix, or a short id, the end of the id (as
    /// [`Store::runs_named_by`] finds them).
    pub fn list_runs_after(
        &self,
        session: Option<&str>,
        unfinished_only: bool,
        statuses: &[RunStatus],
        id_prefix: Option<&str>,
        after: Option<&RunListKey>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>> {
        // The statuses travel as one JSON array: one prepared statement whatever their number.
        let statuses = (!statuses.is_empty()).then(|| {
            Value::from(statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>()).to_string()
        });
        // A prefix is a range of the key (`substr`, not `LIKE`: `_` and `%` are ordinary
        // characters), in a statement of its own: `?7 IS NULL OR ...` would read every run.
        // A short id is the end of the id, as `Store::runs_named_by` finds it.
        let by_prefix = match id_prefix {
            Some(given) if super::view::is_short_id(given) => {
                "AND substr(run_id, -length(?7)) = ?7"
            }
            Some(_) => {
                "AND run_id >= ?7 AND run_id < ?7 || char(1114111)
               AND substr(run_id, 1, length(?7)) = ?7"
            }
            None => "AND ?7 IS NULL",
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR origin_session = ?1)
               AND (?3 = 0 OR status NOT IN ({TERMINAL_STATUSES}))
               AND (?4 IS NULL OR status IN (SELECT value FROM json_each(?4)))
               AND (?5 IS NULL OR created_at < ?5 OR (created_at = ?5 AND run_id > ?6))
               {by_prefix}
             ORDER BY created_at DESC, run_id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(
            params![
                session,
                limit,
                unfinished_only,
                statuses,
                after.map(|k| k.created_at),
                after.map(|k| k.run_id.as_str()),
                id_prefix
            ],
            run_from_row,
        )?;
        rows.map(|row| {
            let (mut run, status) = row?;
            run.status = parse_status(&status)?;
            Ok(run)
        })
        .collect()
    }

    /// Run counts by status.
    pub fn count_by_status(&self) -> StoreResult<Vec<(RunStatus, u64)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        rows.map(|row| {
            let (s, n) = row?;
            Ok((parse_status(&s)?, n as u64))
        })
        .collect()
    }

    /// The claim's public fields.
    pub fn claim_info(&self, run_id: &str) -> StoreResult<ClaimInfo> {
        let row: Option<ClaimRow> = self
            .conn
            .prepare_cached(
                "SELECT generation, owner_kind, owner_id, heartbeat_at, expires_at FROM claims
                 WHERE run_id = ?1",
            )?
            .query_row([run_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()?;
        let (generation, kind, owner_id, heartbeat_at, expires_at) =
            row.ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
        Ok(ClaimInfo {
            generation: generation as u64,
            owner_kind: kind
                .as_deref()
                .map(|k| parse_enum(k, OwnerKind::parse, "owner kind"))
                .transpose()?,
            owner_id,
            heartbeat_at,
            expires_at,
        })
    }

    /// The viewer projection row.
    pub fn run_view(&self, run_id: &str) -> StoreResult<Option<RunView>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT run_id, workflow_name, origin_session, status, paused, current_node,
                        revision, last_event, updated_at FROM run_views WHERE run_id = ?1",
            )?
            .query_row([run_id], |r| {
                Ok(RunView {
                    run_id: r.get(0)?,
                    workflow_name: r.get(1)?,
                    origin_session: r.get(2)?,
                    status: r.get(3)?,
                    paused: r.get(4)?,
                    current_node: r.get(5)?,
                    revision: r.get::<_, i64>(6)? as u64,
                    last_event: r.get(7)?,
                    updated_at: r.get(8)?,
                })
            })
            .optional()?)
    }

    /// The run's events in order, optionally only those after `after_seq`.
    ///
    /// Events are stored in commit order, not by run: this walks the run's chain back from its
    /// newest event, one point read per event returned (the host reads only what a write just
    /// appended). A chain that breaks its own order is reported as corrupt, never followed.
    pub fn events(&self, run_id: &str, after_seq: u64) -> StoreResult<Vec<EventRecord>> {
        let mut next: Option<i64> = self
            .conn
            .prepare_cached("SELECT last_event_id FROM runs WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT run_id, seq, kind, at, data, prev_event_id FROM events WHERE event_id = ?1",
        )?;
        let mut newest_first: Vec<EventRecord> = Vec::new();
        while let Some(event_id) = next {
            let (record, prev): (EventRecord, Option<i64>) = stmt.query_row([event_id], |r| {
                Ok((
                    EventRecord {
                        run_id: r.get(0)?,
                        seq: r.get::<_, i64>(1)? as u64,
                        kind: r.get(2)?,
                        at: r.get(3)?,
                        data: json_col(r, 4)?.unwrap_or(Value::Null),
                    },
                    r.get(5)?,
                ))
            })?;
            let expected_seq = newest_first.last().map(|later| later.seq - 1);
            if record.run_id != run_id
                || record.seq == 0
                || expected_seq.is_some_and(|s| s != record.seq)
            {
                return Err(StoreError::CorruptRow(format!(
                    "run {run_id}: event {event_id} (seq {}) breaks the run's event chain",
                    record.seq
                )));
            }
            if record.seq <= after_seq {
                break;
            }
            if prev.is_none() && record.seq != 1 {
                return Err(StoreError::CorruptRow(format!(
                    "run {run_id}: the event chain ends at seq {}, not 1",
                    record.seq
                )));
            }
            next = prev;
            newest_first.push(record);
        }
        newest_first.reverse();
        Ok(newest_first)
    }

    /// The run's attempts in start order.
    pub fn attempts(&self, run_id: &str) -> StoreResult<Vec<AttemptRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT attempt_id, node_id, ordinal, generation, status, deadline_at, output, error,
                    started_at, finished_at
             FROM attempts WHERE run_id = ?1 ORDER BY started_at, rowid",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(AttemptRecord {
                attempt_id: r.get(0)?,
                node_id: r.get(1)?,
                ordinal: r.get::<_, i64>(2)? as u64,
                generation: r.get::<_, i64>(3)? as u64,
                status: r.get(4)?,
                deadline_at: r.get(5)?,
                output: json_col(r, 6)?,
                output_omitted: false,
                error: r.get(7)?,
                started_at: r.get(8)?,
                finished_at: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A page of the run's attempts, newest first: at most `limit`, only those started before
    /// attempt `before` when given (the last one of the previous page). Also returns how many
    /// attempts the run has in all. An attempt `before` that is not the run's is `NotFound`.
    pub fn attempts_page(
        &self,
        run_id: &str,
        before: Option<&str>,
        limit: u32,
    ) -> StoreResult<(Vec<AttemptRecord>, u64)> {
        let total: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM attempts WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))?;
        let cursor: Option<(i64, i64)> = match before {
            Some(attempt_id) => Some(
                self.conn
                    .prepare_cached(
                        "SELECT started_at, rowid FROM attempts WHERE attempt_id = ?1 AND run_id = ?2",
                    )?
                    .query_row(params![attempt_id, run_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "attempt",
                        id: attempt_id.to_owned(),
                    })?,
            ),
            None => None,
        };
        // Ordered as `attempts` orders them (start time, then insertion), reversed.
        let mut stmt = self.conn.prepare_cached(
            "SELECT attempt_id, node_id, ordinal, generation, status, deadline_at, output, error,
                    started_at, finished_at
             FROM attempts WHERE run_id = ?1
               AND (?2 IS NULL OR started_at < ?2 OR (started_at = ?2 AND rowid < ?3))
             ORDER BY started_at DESC, rowid DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(
            params![
                run_id,
                cursor.map(|c| c.0),
                cursor.map(|c| c.1),
                i64::from(limit)
            ],
            |r| {
                Ok(AttemptRecord {
                    attempt_id: r.get(0)?,
                    node_id: r.get(1)?,
                    ordinal: r.get::<_, i64>(2)? as u64,
                    generation: r.get::<_, i64>(3)? as u64,
                    status: r.get(4)?,
                    deadline_at: r.get(5)?,
                    output: json_col(r, 6)?,
                    output_omitted: false,
                    error: r.get(7)?,
                    started_at: r.get(8)?,
                    finished_at: r.get(9)?,
                })
            },
        )?;
        let page = rows.collect::<Result<_, _>>()?;
        Ok((page, u64::try_from(total).unwrap_or(0)))
    }

    /// The run's decisions in creation order.
    pub fn decisions(&self, run_id: &str) -> StoreResult<Vec<DecisionRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT decision_id, run_id, attempt_id, node_id, kind, request, status, answer,
                    answered_by FROM decisions WHERE run_id = ?1 ORDER BY created_at, rowid",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(DecisionRecord {
                decision_id: r.get(0)?,
                run_id: r.get(1)?,
                attempt_id: r.get(2)?,
                node_id: r.get(3)?,
                kind: r.get(4)?,
                request: json_col(r, 5)?.unwrap_or(Value::Null),
                request_omitted: false,
                status: r.get(6)?,
                answer: json_col(r, 7)?,
                answer_omitted: false,
                answered_by: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Interactions of a run (`by_run`) or the open ones of an origin session.
    pub fn interactions(
        &self,
        run_id: Option<&str>,
        session: Option<&str>,
    ) -> StoreResult<Vec<InteractionRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT i.interaction_id, i.run_id, i.attempt_id, i.node_id, i.origin_session, i.kind,
                    i.request, i.deadline_at, i.status, s.submission_id, s.state, s.error
             FROM interactions i
             LEFT JOIN submissions s ON s.rowid = (
                 SELECT rowid FROM submissions WHERE interaction_id = i.interaction_id
                 ORDER BY created_at DESC, rowid DESC LIMIT 1)
             WHERE (?1 IS NULL OR i.run_id = ?1)
               AND (?2 IS NULL OR (i.origin_session = ?2 AND i.status IN ('pending', 'validating')
                    -- A run stopped for review takes no submission: its request is not
                    -- offered to the session until a person resolves the run. A detached
                    -- run's requests are its bridge's (run.status), never a session's.
                    AND NOT EXISTS (SELECT 1 FROM runs r
                                    WHERE r.run_id = i.run_id
                                      AND (r.status = 'review' OR r.execution_mode = 'detached'))))
             ORDER BY i.created_at, i.rowid",
        )?;
        let rows = stmt.query_map(params![run_id, session], |r| {
            Ok(InteractionRecord {
                interaction_id: r.get(0)?,
                run_id: r.get(1)?,
                attempt_id: r.get(2)?,
                node_id: r.get(3)?,
                origin_session: r.get(4)?,
                kind: r.get(5)?,
                request: json_col(r, 6)?.unwrap_or(Value::Null),
                request_omitted: false,
                deadline_at: r.get(7)?,
                status: r.get(8)?,
                last_submission: match r.get::<_, Option<String>>(9)? {
                    Some(submission_id) => Some(SubmissionSummary {
                        submission_id,
                        state: r.get(10)?,
                        error: r.get(11)?,
                    }),
                    None => None,
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Submissions of an interaction in order.
    pub fn submissions(&self, interaction_id: &str) -> StoreResult<Vec<SubmissionRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT submission_id, interaction_id, payload, state, error FROM submissions
             WHERE interaction_id = ?1 ORDER BY created_at, rowid",
        )?;
        let rows = stmt.query_map([interaction_id], |r| {
            Ok(SubmissionRecord {
                submission_id: r.get(0)?,
                interaction_id: r.get(1)?,
                payload: json_col(r, 2)?.unwrap_or(Value::Null),
                state: r.get(3)?,
                error: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Effects of a run.
    pub fn effects(&self, run_id: &str) -> StoreResult<Vec<EffectRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT effect_id, run_id, attempt_id, effect_key, fingerprint, state, retry_contract,
                    receipt, error FROM effects WHERE run_id = ?1 ORDER BY created_at, rowid",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(EffectRecord {
                effect_id: r.get(0)?,
                run_id: r.get(1)?,
                attempt_id: r.get(2)?,
                effect_key: r.get(3)?,
                fingerprint: r.get(4)?,
                state: r.get(5)?,
                retry_contract: r.get(6)?,
                receipt: json_col(r, 7)?,
                receipt_omitted: false,
                error: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Workflow messages of a run in order.
    pub fn messages(&self, run_id: &str) -> StoreResult<Vec<MessageRecord>> {
        Ok(self.newest_messages(run_id, u32::MAX)?.0)
    }

    /// The newest `limit` workflow messages of a run, oldest of them first, and how many it
    /// has in all.
    pub fn newest_messages(
        &self,
        run_id: &str,
        limit: u32,
    ) -> StoreResult<(Vec<MessageRecord>, u64)> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT message_id, run_id, origin_session, kind, content, delivered_at
             FROM workflow_messages WHERE run_id = ?1
             ORDER BY created_at DESC, rowid DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![run_id, limit], |r| {
            Ok(MessageRecord {
                message_id: r.get(0)?,
                run_id: r.get(1)?,
                origin_session: r.get(2)?,
                kind: r.get(3)?,
                content: json_col(r, 4)?.unwrap_or(Value::Null),
                content_omitted: false,
                delivered_at: r.get(5)?,
            })
        })?;
        let mut messages: Vec<MessageRecord> = rows.collect::<Result<_, _>>()?;
        messages.reverse();
        let count: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM workflow_messages WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))?;
        Ok((messages, u64::try_from(count).unwrap_or_default()))
    }

    /// Runs ready to activate at `now`, oldest first.
    pub fn ready_runs(&self, now: UnixMillis, limit: u32) -> StoreResult<Vec<String>> {
        ready_runs(&self.conn, now, limit)
    }

    /// The earliest time the host's own deadline work has something to do: a running run's
    /// claim expires (recovery), a pending interaction's or decision's deadline or a pending
    /// timer's wake time passes on a run no live claim holds (expiry, or firing; when an
    /// operator's claim holds it, at that claim's expiry), or an operator's claim on a ready
    /// run expires (the run can be launched).
    /// `None` when nothing is due, so the host can sleep without waking.
    pub fn next_deadline(&self) -> StoreResult<Option<UnixMillis>> {
        self.next_deadline_at(self.now_ms())
    }

    /// [`Store::next_deadline`] as of time `now` (a claim live then holds its run's timers)
    /// instead of the clock's: the engine asks at the time of its turn.
    pub fn next_deadline_at(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT MIN(t) FROM (
                    SELECT MIN(c.expires_at) AS t FROM claims c JOIN runs r ON r.run_id = c.run_id
                    WHERE c.owner_kind IS NOT NULL AND r.status = 'running'
                    UNION ALL
                    SELECT MIN(MAX(i.deadline_at,
                                   CASE WHEN c.owner_kind IS NOT NULL THEN c.expires_at ELSE 0 END))
                    FROM interactions i JOIN runs r ON r.run_id = i.run_id
                    JOIN claims c ON c.run_id = i.run_id
                    WHERE i.status = 'pending' AND r.status = 'waiting'
                      AND i.deadline_at IS NOT NULL
                    UNION ALL
                    SELECT MIN(MAX(a.deadline_at,
                                   CASE WHEN c.owner_kind IS NOT NULL THEN c.expires_at ELSE 0 END))
                    FROM decisions d JOIN attempts a ON a.attempt_id = d.attempt_id
                    JOIN runs r ON r.run_id = d.run_id JOIN claims c ON c.run_id = d.run_id
                    WHERE d.status = 'pending' AND r.status = 'waiting'
                      AND a.deadline_at IS NOT NULL
                    UNION ALL
                    -- Timers may be many (a waiting run each): the earliest one no live claim
                    -- holds is found walking `timers_due` from the start, the ones a live
                    -- claim holds (an operator mid-cancel: few) from the claims.
                    SELECT * FROM (
                        SELECT t.wake_at FROM timers t JOIN runs r ON r.run_id = t.run_id
                        JOIN claims c ON c.run_id = t.run_id
                        WHERE t.status = 'pending' AND r.status = 'waiting'
                          AND NOT (c.owner_kind IS NOT NULL AND c.expires_at > ?1)
                        ORDER BY t.wake_at LIMIT 1)
                    UNION ALL
                    SELECT MIN(MAX(t.wake_at, c.expires_at))
                    FROM claims c JOIN timers t ON t.run_id = c.run_id
                    JOIN runs r ON r.run_id = t.run_id
                    WHERE c.owner_kind IS NOT NULL AND c.expires_at > ?1
                      AND t.status = 'pending' AND r.status = 'waiting'
                    UNION ALL
                    -- A ready run an operator's claim holds becomes launchable when it expires.
                    SELECT MIN(c.expires_at) FROM claims c JOIN queue q ON q.run_id = c.run_id
                    WHERE c.owner_kind IS NOT NULL AND q.state = 'ready' AND c.expires_at > ?1
                )",
            )?
            .query_row([now], |r| r.get(0))?)
    }
}

/// How many times a backup retries a database that is busy or locked, 10 ms apart.
const BACKUP_BUSY_TRIES: u32 = 500;

impl Store {
    /// Writes a consistent copy of the database to `dest` (SQLite's online backup), safe
    /// while the host is writing. A copy that fails part-way is removed, so a file at `dest`
    /// is always a whole backup.
    pub fn backup_to(&self, dest: &std::path::Path) -> StoreResult<()> {
        // The copy holds every run's input and output: readable by its owner only, like the
        // installation it comes from. Created here (and refused if it exists) so SQLite
        // writes into a file that was never readable by others, journals included.
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dest)
                .map_err(|source| StoreError::Io {
                    path: dest.to_path_buf(),
                    source,
                })?;
        }
        let copied = (|| -> StoreResult<()> {
            let mut target = rusqlite::Connection::open(dest)?;
            let backup = rusqlite::backup::Backup::new(&self.conn, &mut target)?;
            // Every page in one step, so in one read transaction: a backup made in steps
            // starts again from the first page whenever another connection (the host) commits
            // between two steps, and under steady writes it never ends. In WAL mode that read
            // transaction does not hold the host's commits back.
            // BUSY and LOCKED are transient (another process recovering the WAL, say):
            // try again for a while, then say so.
            for _ in 0..BACKUP_BUSY_TRIES {
                match backup.step(-1)? {
                    rusqlite::backup::StepResult::Done => return Ok(()),
                    _ => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
            Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some("the database stayed locked; try the backup again".into()),
            )
            .into())
        })();
        if copied.is_err() {
            for suffix in ["", "-journal"] {
                let mut partial = dest.as_os_str().to_owned();
                partial.push(suffix);
                let _ = std::fs::remove_file(partial);
            }
        }
        copied
    }
}

impl Store {
    /// A run's status and revision: the cheap read the host does after every batch.
    pub fn run_state(&self, run_id: &str) -> StoreResult<(RunStatus, u64)> {
        run_state(&self.conn, run_id)
    }

    /// The run's mounted sources as saved (for the child's launch envelope).
    pub fn mounted_sources(&self, run_id: &str) -> StoreResult<Value> {
        mounted_sources(&self.conn, run_id)
    }
}

// Reads shared by `Store` (between transactions) and `WriteTx` (inside one, where they see
// the transaction's own uncommitted changes).

pub(crate) fn run_record(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<RunRecord> {
    let (mut run, status) = conn
        .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"))?
        .query_row([run_id], run_from_row)
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
    run.status = parse_status(&status)?;
    Ok(run)
}

pub(crate) fn ready_runs(
    conn: &rusqlite::Connection,
    now: UnixMillis,
    limit: u32,
) -> StoreResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT run_id FROM queue WHERE state = 'ready' AND available_at <= ?1
         ORDER BY available_at, run_id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![now, limit], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn run_state(
    conn: &rusqlite::Connection,
    run_id: &str,
) -> StoreResult<(RunStatus, u64)> {
    let (status, revision): (String, i64) = conn
        .prepare_cached("SELECT status, revision FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
    Ok((parse_status(&status)?, revision as u64))
}

pub(crate) fn mounted_sources(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<Value> {
    let mounted: String = conn
        .prepare_cached("SELECT mounted_sources FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
    Ok(serde_json::from_str(&mounted)?)
}

/// The run's input, stored graph snapshot and mounted sources, parsed.
pub(crate) fn run_payload(
    conn: &rusqlite::Connection,
    run_id: &str,
) -> StoreResult<(Value, Option<Value>, Value)> {
    let (input, definition, mounted): (String, Option<String>, String) = conn
        .prepare_cached("SELECT input, definition, mounted_sources FROM runs WHERE run_id = ?1")?
        .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?
        .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
    Ok((
        serde_json::from_str(&input)?,
        definition.map(|d| serde_json::from_str(&d)).transpose()?,
        serde_json::from_str(&mounted)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_statuses_match_is_terminal() {
        let listed: Vec<&str> = TERMINAL_STATUSES
            .split(',')
            .map(|s| s.trim().trim_matches('\''))
            .collect();
        for status in RunStatus::ALL {
            assert_eq!(
                listed.contains(&status.as_str()),
                status.is_terminal(),
                "{status:?}"
            );
        }
    }
}
