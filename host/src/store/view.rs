//! Paged reads for viewers (`piw view`): each loads only what one screen shows, so a run with
//! thousands of attempts or events opens as fast as a small one. Like every read they never
//! return claim tokens or token hashes, and they work on a store opened read-only.

use crate::store::prelude::*;
use rusqlite::{params, OptionalExtension as _};
use serde::Serialize;
use serde_json::Value;

use super::{parse_status, RunStatus, Store, StoreError, StoreResult};
use super::{AttemptRecord, EffectRecord, RunListKey};
use crate::clock::UnixMillis;
use crate::protocol::outcome_word;
use piw_engine::store::records::*;

/// Whether `given` is a run's short id (the end of its id: lower-case hex digits, which no
/// beginning of a run id is, as every one begins `run-`), rather than a prefix.
pub fn is_short_id(given: &str) -> bool {
    !given.is_empty()
        && given
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Which runs a run list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this origin session.
    pub session: Option<String>,
}

/// One line of a run list: what a person scans for (no input, result or definition).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub workflow_name: String,
    pub origin_session: Option<String>,
    pub status: RunStatus,
    pub paused: bool,
    pub current_node: Option<String>,
    pub revision: u64,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

impl RunSummary {
    /// The run's place in a run list.
    pub fn list_key(&self) -> RunListKey {
        RunListKey {
            created_at: self.created_at,
            run_id: self.run_id.clone(),
        }
    }
}

/// What one node of a run has done so far, over all its attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeActivity {
    pub node_id: String,
    /// How many attempts the node has had.
    pub visits: u64,
    /// The status of its newest attempt.
    pub last_status: String,
    /// Its newest attempt.
    pub last_attempt_id: String,
    /// The time its finished attempts took, added up, in milliseconds.
    pub busy_ms: i64,
    /// When its newest attempt started.
    pub last_started_at: UnixMillis,
}

/// One attempt with its timing, for an inspector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptDetail {
    pub attempt_id: String,
    pub node_id: String,
    pub ordinal: u64,
    pub generation: u64,
    pub status: String,
    pub started_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
    pub deadline_at: Option<UnixMillis>,
    pub output: Option<Value>,
    pub error: Option<String>,
}

/// A checkpoint, human decision or interactive request an attempt made, with its answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRequest {
    /// `checkpoint`, `human_decision`, `agent` or `assistant_message`.
    pub kind: String,
    pub id: String,
    pub status: String,
    pub request: Value,
    /// The decision's answer, or the payload of the interaction's newest submission.
    pub answer: Option<Value>,
    /// Who answered a decision, or the state of the newest submission (`rejected`, ...).
    pub answered_by: Option<String>,
    /// Why the newest submission was rejected.
    pub error: Option<String>,
}

/// A page of a run's events, newest first, and where the next older page starts.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    pub newest_first: Vec<EventRecord>,
    /// Pass to [`Store::events_page`] for the events before this page; `None` at the first.
    pub older: Option<EventCursor>,
}

/// Where a page of events continues: an opaque position in a run's event chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventCursor(i64);

/// One attempt placed in its run's history: the events that opened and closed it and those at
/// which it began or stopped waiting, so a viewer can show it as it was after any event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptSpan {
    pub attempt_id: String,
    pub node_id: String,
    pub ordinal: u64,
    /// The event (its seq) that opened the attempt.
    pub opened_seq: u64,
    /// The event that closed it; `None` while it is open.
    pub closed_seq: Option<u64>,
    /// Its status now (the attempt vocabulary: `ok`, `failed`, ...), which it had from
    /// `closed_seq` on.
    pub status: String,
    pub started_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
    /// The events after which it waited (`true`) or ran again (`false`), oldest first.
    pub waits: Vec<(u64, bool)>,
}

impl AttemptSpan {
    /// Its status just after event `seq`: `None` before it opened, `running` or `waiting` while
    /// open, then its final status.
    pub fn status_at(&self, seq: u64) -> Option<&str> {
        if seq < self.opened_seq {
            return None;
        }
        if self.closed_seq.is_some_and(|closed| closed <= seq) {
            return Some(&self.status);
        }
        let waiting = self
            .waits
            .iter()
            .take_while(|(at, _)| *at <= seq)
            .last()
            .is_some_and(|(_, waits)| *waits);
        Some(if waiting { "waiting" } else { "running" })
    }

    /// Whether the attempt is open (running or waiting) just after event `seq`.
    pub fn open_at(&self, seq: u64) -> bool {
        self.opened_seq <= seq && self.closed_seq.is_none_or(|closed| closed > seq)
    }
}

/// Places a run's attempts in its events (oldest first), by the rules of the lifecycle: a run
/// has at most one open attempt; `node_started` and `transitioned` open the one they name
/// (`transitioned` closing the one before); `waiting`, `interaction_requested` and a rejected
/// submission make it wait, `activated` and a failed interaction run it again; a loss
/// (`child_lost`, `recovered`), `review` or `parked` either interrupts it or leaves it waiting
/// for the retry: an attempt that ended without a transition closed at the last such event
/// before the next attempt opened, or at the event that ended the run.
pub fn attempt_spans(events: &[EventRecord], attempts: &[AttemptRecord]) -> Vec<AttemptSpan> {
    let rows: std::collections::HashMap<&str, &AttemptRecord> = attempts
        .iter()
        .map(|a| (a.attempt_id.as_str(), a))
        .collect();
    let mut spans: Vec<AttemptSpan> = Vec::new();
    // The open attempt (an index into `spans`) and the last event that could have closed it.
    let mut open: Option<usize> = None;
    let mut last_stop: Option<u64> = None;
    let close = |span: &mut AttemptSpan, seq: u64| {
        if span.finished_at.is_some() {
            span.closed_seq = Some(seq);
        }
    };
    for e in events {
        match e.kind.as_str() {
            "node_started" | "transitioned" => {
                if let Some(i) = open.take() {
                    let at = if e.kind == "transitioned" {
                        e.seq
                    } else {
                        last_stop.unwrap_or(e.seq)
                    };
                    close(&mut spans[i], at);
                }
                last_stop = None;
                let Some(row) = e.data["attempt"].as_str().and_then(|id| rows.get(id)) else {
                    continue;
                };
                open = Some(spans.len());
                spans.push(AttemptSpan {
                    attempt_id: row.attempt_id.clone(),
                    node_id: row.node_id.clone(),
                    ordinal: row.ordinal,
                    opened_seq: e.seq,
                    closed_seq: None,
                    status: outcome_word(&row.status).to_owned(),
                    started_at: row.started_at,
                    finished_at: row.finished_at,
                    waits: Vec::new(),
                });
            }
            "waiting" | "interaction_requested" | "submission_rejected" => {
                if let Some(i) = open {
                    spans[i].waits.push((e.seq, true));
                }
            }
            "activated" | "interaction_failed" => {
                if let Some(i) = open {
                    spans[i].waits.push((e.seq, false));
                }
            }
            "child_lost" | "recovered" | "review" | "parked" | "repaired" => {
                if let Some(i) = open {
                    // Left waiting unless this is where it was interrupted (known once the
                    // next attempt opens); a closed span's status no longer reads its waits.
                    spans[i].waits.push((e.seq, true));
                }
                last_stop = Some(e.seq);
            }
            "completed" | "failed" | "cancelled" | "timed_out" => {
                if let Some(i) = open.take() {
                    close(&mut spans[i], e.seq);
                }
            }
            _ => {}
        }
    }
    if let (Some(i), Some(at)) = (open, last_stop) {
        close(&mut spans[i], at);
    }
    spans
}

/// A [`RunSummary`] from a row of `run_id, workflow_name, origin_session, status, paused,
/// current_node, revision, created_at, updated_at`, with its status still as text.
fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(RunSummary, String)> {
    Ok((
        RunSummary {
            run_id: r.get(0)?,
            workflow_name: r.get(1)?,
            origin_session: r.get(2)?,
            status: RunStatus::Queued,
            paused: r.get(4)?,
            current_node: r.get(5)?,
            revision: r.get::<_, i64>(6)? as u64,
            created_at: r.get(7)?,
            updated_at: r.get(8)?,
        },
        r.get::<_, String>(3)?,
    ))
}

impl Store {
    /// SQLite's `data_version`: it changes when another connection (the host) commits, so a
    /// viewer polls this one cheap read instead of re-reading what it shows.
    pub fn data_version(&self) -> StoreResult<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    /// A page of runs, newest first, continued after the run whose place is `after` (the last
    /// of the previous page, whose key stays put whatever starts meanwhile: no run is shown
    /// twice or skipped), and how many runs match `filter` in all.
    pub fn runs_page(
        &self,
        filter: &RunFilter,
        after: Option<&RunListKey>,
        limit: u32,
    ) -> StoreResult<(Vec<RunSummary>, u64)> {
        let status = filter.status.map(|s| s.as_str());
        let session = filter.session.as_deref();
        // One statement per filter combination: with `?1 IS NULL OR ...` the count read every
        // run's row (50 ms at 100,000 runs) instead of an index.
        let count = match (status, session) {
            (None, None) => "SELECT COUNT(*) FROM runs WHERE ?1 IS NULL AND ?2 IS NULL",
            (Some(_), None) => "SELECT COUNT(*) FROM runs WHERE status = ?1 AND ?2 IS NULL",
            (None, Some(_)) => "SELECT COUNT(*) FROM runs WHERE ?1 IS NULL AND origin_session = ?2",
            (Some(_), Some(_)) => {
                "SELECT COUNT(*) FROM runs WHERE status = ?1 AND origin_session = ?2"
            }
        };
        let total: i64 = self
            .conn
            .prepare_cached(count)?
            .query_row(params![status, session], |r| r.get(0))?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT run_id, workflow_name, origin_session, status, paused, current_node, revision,
                    created_at, updated_at
             FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR origin_session = ?2)
               AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND run_id > ?5))
             ORDER BY created_at DESC, run_id LIMIT ?3",
        )?;
        let rows = stmt.query_map(
            params![
                status,
                session,
                i64::from(limit),
                after.map(|k| k.created_at),
                after.map(|k| k.run_id.as_str())
            ],
            summary_from_row,
        )?;
        let page = rows
            .map(|row| {
                let (mut run, status) = row?;
                run.status = parse_status(&status)?;
                Ok(run)
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok((page, u64::try_from(total).unwrap_or(0)))
    }

    /// The runs a person's `given` run id names, newest first, at most `limit`: those whose id
    /// begins with it, or, when it is a short id ([`is_short_id`]), those whose id ends with
    /// it. An exact id is one of them.
    pub fn runs_named_by(&self, given: &str, limit: u32) -> StoreResult<Vec<RunSummary>> {
        // `substr`, not `LIKE`: `_` and `%` in a prefix are ordinary characters. The range on
        // the key (every id starting with the prefix sorts from it to it followed by the
        // highest character) makes a prefix a search, not a scan of every run (40 ms of each
        // `piw run` command at 100,000 runs). An ending has no such range: it is a scan of
        // the key's index (about 25 ms at 100,000 runs), only for a short id.
        let which = if is_short_id(given) {
            "substr(run_id, -length(?1)) = ?1"
        } else {
            "run_id >= ?1 AND run_id < ?1 || char(1114111) AND substr(run_id, 1, length(?1)) = ?1"
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT run_id, workflow_name, origin_session, status, paused, current_node, revision,
                    created_at, updated_at
             FROM runs WHERE {which}
             ORDER BY created_at DESC, run_id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![given, i64::from(limit)], summary_from_row)?;
        rows.map(|row| {
            let (mut run, status) = row?;
            run.status = parse_status(&status)?;
            Ok(run)
        })
        .collect()
    }

    /// The ids of the runs whose last `len` characters are those of one of `ids`: every run
    /// that could share more than `len` characters of ending with one of them (one scan of the
    /// key's index, whatever the number of `ids`), for their short ids.
    pub fn run_ids_ending_like(&self, ids: &[&str], len: usize) -> StoreResult<Vec<String>> {
        let endings: Vec<&str> = ids
            .iter()
            .map(|id| &id[id.len().saturating_sub(len)..])
            .collect();
        let mut stmt = self.conn.prepare_cached(
            "SELECT run_id FROM runs
             WHERE substr(run_id, -?2) IN (SELECT value FROM json_each(?1))",
        )?;
        let rows = stmt.query_map(
            params![
                Value::from(endings).to_string(),
                i64::try_from(len).unwrap_or(i64::MAX)
            ],
            |r| r.get(0),
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The newest run started in `dir` or in a directory above it (its `project_dir`), as
    /// `last` names it: a person in a project's subdirectory means the project's runs. A walk
    /// of the runs newest first that stops at the first one.
    pub fn newest_run_in(&self, dir: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT run_id FROM runs
                 WHERE project_dir = ?1
                    OR substr(?1, 1, length(rtrim(project_dir, '/')) + 1) = rtrim(project_dir, '/') || '/'
                 ORDER BY created_at DESC, run_id LIMIT 1",
            )?
            .query_row([dir], |r| r.get(0))
            .optional()?)
    }

    /// The run's stored graph snapshot (`None` before its first activation records it).
    pub fn run_definition(&self, run_id: &str) -> StoreResult<Option<Value>> {
        let definition: Option<String> = self
            .conn
            .prepare_cached("SELECT definition FROM runs WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
        Ok(definition.map(|d| serde_json::from_str(&d)).transpose()?)
    }

    /// What each node of the run has done: one row per node that had an attempt.
    pub fn node_activity(&self, run_id: &str) -> StoreResult<Vec<NodeActivity>> {
        // The newest attempt of a node is the one with the highest ordinal (the unique index
        // (run_id, node_id, ordinal) serves both the grouping and the lookup).
        let mut stmt = self.conn.prepare_cached(
            "SELECT g.node_id, g.visits, a.status, a.attempt_id, g.busy_ms, a.started_at
             FROM (SELECT node_id, COUNT(*) AS visits, MAX(ordinal) AS last_ordinal,
                          COALESCE(SUM(finished_at - started_at), 0) AS busy_ms
                   FROM attempts WHERE run_id = ?1 GROUP BY node_id) g
             JOIN attempts a ON a.run_id = ?1 AND a.node_id = g.node_id
                            AND a.ordinal = g.last_ordinal
             ORDER BY g.node_id",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(NodeActivity {
                node_id: r.get(0)?,
                visits: r.get::<_, i64>(1)? as u64,
                // The attempt vocabulary clients see (`ok`, not the stored `succeeded`).
                last_status: outcome_word(&r.get::<_, String>(2)?).to_owned(),
                last_attempt_id: r.get(3)?,
                busy_ms: r.get(4)?,
                last_started_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One attempt with its timing.
    pub fn attempt_detail(&self, attempt_id: &str) -> StoreResult<AttemptDetail> {
        self.conn
            .prepare_cached(
                "SELECT attempt_id, node_id, ordinal, generation, status, started_at,
                        finished_at, deadline_at, output, error
                 FROM attempts WHERE attempt_id = ?1",
            )?
            .query_row([attempt_id], |r| {
                Ok(AttemptDetail {
                    attempt_id: r.get(0)?,
                    node_id: r.get(1)?,
                    ordinal: r.get::<_, i64>(2)? as u64,
                    generation: r.get::<_, i64>(3)? as u64,
                    status: outcome_word(&r.get::<_, String>(4)?).to_owned(),
                    started_at: r.get(5)?,
                    finished_at: r.get(6)?,
                    deadline_at: r.get(7)?,
                    output: super::read::json_col(r, 8)?,
                    error: r.get(9)?,
                })
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "attempt",
                id: attempt_id.to_owned(),
            })
    }

    /// The input attempt `attempt_id` ran with: the output of the run's latest attempt that
    /// succeeded before it (as a resumed child gets it), else the run's input.
    pub fn attempt_input(&self, run_id: &str, attempt_id: &str) -> StoreResult<Value> {
        // Walks back from the attempt's row: the step before it is usually the row before.
        let text: Option<Option<String>> = self
            .conn
            .prepare_cached(
                "SELECT output FROM attempts WHERE run_id = ?1 AND status = 'succeeded'
                   AND rowid < (SELECT rowid FROM attempts WHERE attempt_id = ?2)
                 ORDER BY rowid DESC LIMIT 1",
            )?
            .query_row(params![run_id, attempt_id], |r| r.get(0))
            .optional()?;
        match text {
            Some(output) => Ok(output
                .map(|t| serde_json::from_str(&t))
                .transpose()?
                .unwrap_or(Value::Null)),
            None => {
                let input: String = self
                    .conn
                    .prepare_cached("SELECT input FROM runs WHERE run_id = ?1")?
                    .query_row([run_id], |r| r.get(0))
                    .optional()?
                    .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
                Ok(serde_json::from_str(&input)?)
            }
        }
    }

    /// The checkpoints, decisions and interactive requests of one attempt, oldest first.
    pub fn attempt_requests(&self, attempt_id: &str) -> StoreResult<Vec<AttemptRequest>> {
        let mut out = Vec::new();
        let mut decisions = self.conn.prepare_cached(
            "SELECT decision_id, kind, status, request, answer, answered_by
             FROM decisions WHERE attempt_id = ?1 ORDER BY created_at, rowid",
        )?;
        let rows = decisions.query_map([attempt_id], |r| {
            Ok(AttemptRequest {
                id: r.get(0)?,
                kind: r.get(1)?,
                status: r.get(2)?,
                request: super::read::json_col(r, 3)?.unwrap_or(Value::Null),
                answer: super::read::json_col(r, 4)?,
                answered_by: r.get(5)?,
                error: None,
            })
        })?;
        for row in rows {
            out.push(row?);
        }
        let mut interactions = self.conn.prepare_cached(
            "SELECT i.interaction_id, i.kind, i.status, i.request, s.payload, s.state, s.error
             FROM interactions i
             LEFT JOIN submissions s ON s.rowid = (
                 SELECT rowid FROM submissions WHERE interaction_id = i.interaction_id
                 ORDER BY created_at DESC, rowid DESC LIMIT 1)
             WHERE i.attempt_id = ?1 ORDER BY i.created_at, i.rowid",
        )?;
        let rows = interactions.query_map([attempt_id], |r| {
            Ok(AttemptRequest {
                id: r.get(0)?,
                kind: r.get(1)?,
                status: r.get(2)?,
                request: super::read::json_col(r, 3)?.unwrap_or(Value::Null),
                answer: super::read::json_col(r, 4)?,
                answered_by: r.get(5)?,
                error: r.get(6)?,
            })
        })?;
        for row in rows {
            out.push(row?);
        }
        Ok(out)
    }

    /// The effects one attempt of run `run_id` reserved, oldest first.
    pub fn attempt_effects(
        &self,
        run_id: &str,
        attempt_id: &str,
    ) -> StoreResult<Vec<EffectRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT effect_id, run_id, attempt_id, effect_key, fingerprint, state, retry_contract,
                    receipt, error FROM effects WHERE run_id = ?1 AND attempt_id = ?2
             ORDER BY created_at, rowid",
        )?;
        let rows = stmt.query_map(params![run_id, attempt_id], |r| {
            Ok(EffectRecord {
                effect_id: r.get(0)?,
                run_id: r.get(1)?,
                attempt_id: r.get(2)?,
                effect_key: r.get(3)?,
                fingerprint: r.get(4)?,
                state: r.get(5)?,
                retry_contract: r.get(6)?,
                receipt: super::read::json_col(r, 7)?,
                receipt_omitted: false,
                error: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The run's attempts placed in its history ([`attempt_spans`]): reads all its events and
    /// attempts, so a viewer asks only when a person steps back through the history.
    pub fn attempt_history(&self, run_id: &str) -> StoreResult<Vec<AttemptSpan>> {
        let events = self.events(run_id, 0)?;
        let attempts = self.attempts(run_id)?;
        Ok(attempt_spans(&events, &attempts))
    }

    /// Up to `limit` of the run's events, newest first: the newest ones when `older` is
    /// `None`, else those before the page that returned it. One point read per event, walking
    /// the run's chain (as [`Store::events`] does), so the cost is the page, not the run.
    pub fn events_page(
        &self,
        run_id: &str,
        older: Option<EventCursor>,
        limit: u32,
    ) -> StoreResult<EventPage> {
        let mut next = match older {
            Some(EventCursor(id)) => Some(id),
            None => self
                .conn
                .prepare_cached("SELECT last_event_id FROM runs WHERE run_id = ?1")?
                .query_row([run_id], |r| r.get(0))
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?,
        };
        let mut stmt = self.conn.prepare_cached(
            "SELECT run_id, seq, kind, at, data, prev_event_id FROM events WHERE event_id = ?1",
        )?;
        let mut newest_first: Vec<EventRecord> = Vec::new();
        while let Some(event_id) = next {
            if newest_first.len() >= limit as usize {
                break;
            }
            let (record, prev): (EventRecord, Option<i64>) = stmt.query_row([event_id], |r| {
                Ok((
                    EventRecord {
                        run_id: r.get(0)?,
                        seq: r.get::<_, i64>(1)? as u64,
                        kind: r.get(2)?,
                        at: r.get(3)?,
                        data: super::read::json_col(r, 4)?.unwrap_or(Value::Null),
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
            next = prev;
            newest_first.push(record);
        }
        Ok(EventPage {
            newest_first,
            older: next.map(EventCursor),
        })
    }
}
