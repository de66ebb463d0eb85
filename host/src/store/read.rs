//! Read-only queries. They never return claim tokens or token hashes.

use rusqlite::{params, OptionalExtension as _, Row};
use serde_json::Value;

use super::diagnose::findings;
use super::values::{invalid, not_found, to_i64, to_u64};
use super::{
    parse_enum, parse_status, OwnerKind, RunReads, RunStatus, Store, StoreError, StoreResult,
};
use crate::clock::UnixMillis;
use piw_engine::store::records::*;

/// An attempt from a row of `attempt_id, node_id, ordinal, generation, status, deadline_at,
/// output, error, started_at, finished_at` (the one mapping of the attempts table).
fn attempt_row(r: &Row<'_>) -> rusqlite::Result<AttemptRecord> {
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
}

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

/// Most detached steps listed at once: a host serves no more bridges than child slots anyway.
const MAX_DETACHED_STEPS: u32 = 256;

impl Store {
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

    /// The run's attempts in start order.
    pub fn attempts(&self, run_id: &str) -> StoreResult<Vec<AttemptRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT attempt_id, node_id, ordinal, generation, status, deadline_at, output, error,
                    started_at, finished_at
             FROM attempts WHERE run_id = ?1 ORDER BY started_at, rowid",
        )?;
        let rows = stmt.query_map([run_id], attempt_row)?;
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

    /// Workflow messages of a run in order.
    pub fn messages(&self, run_id: &str) -> StoreResult<Vec<MessageRecord>> {
        Ok(self.newest_messages(run_id, u32::MAX)?.0)
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

impl RunReads for Store {
    fn run(&self, run_id: &str) -> StoreResult<RunRecord> {
        run_record(&self.conn, run_id)
    }

    fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)> {
        run_payload(&self.conn, run_id)
    }

    fn run_state(&self, run_id: &str) -> StoreResult<(RunStatus, u64)> {
        run_state(&self.conn, run_id)
    }

    fn run_view(&self, run_id: &str) -> StoreResult<Option<RunView>> {
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

    fn list_runs_after(
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

    fn count_by_status(&self) -> StoreResult<Vec<(RunStatus, u64)>> {
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

    fn claim_info(&self, run_id: &str) -> StoreResult<ClaimInfo> {
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

    fn attempts_page(
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
            attempt_row,
        )?;
        let page = rows.collect::<Result<_, _>>()?;
        Ok((page, u64::try_from(total).unwrap_or(0)))
    }

    fn decisions(&self, run_id: &str) -> StoreResult<Vec<DecisionRecord>> {
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

    fn interactions(
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

    fn effects(&self, run_id: &str) -> StoreResult<Vec<EffectRecord>> {
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

    fn events(&self, run_id: &str, after_seq: u64) -> StoreResult<Vec<EventRecord>> {
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

    fn events_dropped(&self, run_id: &str) -> StoreResult<u64> {
        let dropped: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT dropped FROM event_budgets WHERE run_id = ?1 AND attempt_id = ''",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?;
        Ok(u64::try_from(dropped.unwrap_or(0)).unwrap_or(0))
    }

    fn updates(&self, run_id: &str) -> StoreResult<Vec<UpdateRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT type, key, node_id, attempt_id, data, seq, at, samples FROM run_updates
             WHERE run_id = ?1 ORDER BY ordinal",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(UpdateRecord {
                update_type: r.get(0)?,
                key: r.get(1)?,
                node_id: r.get(2)?,
                attempt_id: r.get(3)?,
                data: json_col(r, 4)?.unwrap_or(Value::Null),
                data_omitted: false,
                seq: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
                at: r.get(6)?,
                samples: json_col(r, 7)?
                    .and_then(|s| serde_json::from_value(s).ok())
                    .unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn newest_messages(&self, run_id: &str, limit: u32) -> StoreResult<(Vec<MessageRecord>, u64)> {
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

    fn last_child(&self, run_id: &str) -> StoreResult<Option<ChildRecord>> {
        Ok(self
            .children_where(run_id, "ORDER BY child_epoch DESC LIMIT 1")?
            .pop())
    }

    fn read_value_chunk(
        &self,
        run_id: &str,
        sha256: &str,
        offset: u64,
        max: usize,
    ) -> StoreResult<ValueChunk> {
        let bytes: Option<(i64, i64)> = self
            .conn
            .prepare_cached(
                "SELECT v.bytes, v.received FROM run_values rv JOIN value_blobs v USING (sha256)
                 WHERE rv.run_id = ?1 AND rv.sha256 = ?2",
            )?
            .query_row(params![run_id, sha256], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let bytes = match bytes {
            Some((bytes, received)) if bytes == received => to_u64(bytes),
            _ => return Err(not_found(sha256)),
        };
        if offset > bytes {
            return Err(invalid(format!(
                "value {sha256} is {bytes} bytes: no offset {offset}"
            )));
        }
        let want = u64::try_from(max.max(1))
            .unwrap_or(u64::MAX)
            .min(bytes - offset);
        let end = offset + want;
        // The chunks that overlap [offset, end): the one that starts at or before `offset`,
        // then those that start before `end`.
        let mut stmt = self.conn.prepare_cached(
            "SELECT offset, data FROM value_chunks WHERE sha256 = ?1 AND offset < ?3
               AND offset >= COALESCE((SELECT MAX(offset) FROM value_chunks
                                       WHERE sha256 = ?1 AND offset <= ?2), 0)
             ORDER BY offset",
        )?;
        let mut rows = stmt.query(params![sha256, to_i64(offset), to_i64(end)])?;
        let mut data = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        while let Some(row) = rows.next()? {
            let start = to_u64(row.get(0)?);
            let chunk = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
            let from = usize::try_from(offset.saturating_sub(start)).unwrap_or(usize::MAX);
            let to = usize::try_from(end.saturating_sub(start))
                .unwrap_or(usize::MAX)
                .min(chunk.len());
            if from < to {
                data.extend_from_slice(&chunk[from..to]);
            }
        }
        if u64::try_from(data.len()).unwrap_or(u64::MAX) != want {
            return Err(StoreError::InvalidInput(format!(
                "value {sha256} is damaged: its chunks do not cover {offset}..{end} (see `piw diagnose`)"
            )));
        }
        Ok(ValueChunk {
            bytes,
            offset,
            data,
        })
    }

    fn detached_steps(&self) -> StoreResult<Vec<DetachedStep>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT i.run_id, i.interaction_id, i.attempt_id, i.node_id, i.status, r.project_dir
             FROM runs r
             JOIN interactions i ON i.run_id = r.run_id AND i.status IN ('pending', 'validating')
             WHERE r.status IN ('queued', 'running', 'waiting')
               AND r.execution_mode = 'detached' AND r.paused = 0
             ORDER BY i.created_at, i.rowid
             LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![MAX_DETACHED_STEPS], |r| {
            Ok(DetachedStep {
                run_id: r.get(0)?,
                interaction_id: r.get(1)?,
                attempt_id: r.get(2)?,
                node_id: r.get(3)?,
                validating: r.get::<_, String>(4)? == "validating",
                project_dir: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn ready_runs(&self, now: UnixMillis, limit: u32) -> StoreResult<Vec<String>> {
        ready_runs(&self.conn, now, limit)
    }

    fn next_deadline(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>> {
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

    fn next_delayed_ready(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT MIN(available_at) FROM queue WHERE state = 'ready' AND available_at > ?1",
            )?
            .query_row([now], |r| r.get(0))?)
    }

    fn next_node_deadline(&self, owner_id: &str) -> StoreResult<Option<UnixMillis>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT MIN(a.deadline_at) FROM runs r
                 JOIN attempts a ON a.attempt_id = r.current_attempt
                 JOIN claims c ON c.run_id = r.run_id
                 WHERE r.status = 'running' AND a.status = 'running'
                   AND c.owner_kind = 'host' AND c.owner_id = ?1",
            )?
            .query_row([owner_id], |r| r.get(0))?)
    }

    fn open_attempt_deadline(&self, run_id: &str) -> StoreResult<Option<UnixMillis>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT a.deadline_at FROM runs r JOIN attempts a ON a.attempt_id = r.current_attempt
                 WHERE r.run_id = ?1 AND a.status = 'running'",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?
            .flatten())
    }

    fn diagnose(&self, now: UnixMillis) -> StoreResult<Vec<Finding>> {
        findings(&self.conn, now)
    }
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
