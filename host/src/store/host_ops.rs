//! Store operations that belong to the host rather than to one run's lifecycle: host epochs,
//! startup recovery of runs held by an earlier host, and workflow message delivery.

use crate::store::prelude::*;
use crate::store::HostOps;
use rusqlite::{params, OptionalExtension as _};
use serde_json::Value;

use super::{MessageRecord, RecoveredRun, StoreError, StoreResult, WriteTx};
use crate::clock::UnixMillis;
use piw_engine::store::records::*;

impl WriteTx<'_> {
    /// Records a new host process and returns its epoch (strictly increasing).
    pub fn begin_host_epoch(&mut self, pid: u32) -> StoreResult<i64> {
        self.ops.push("begin_host_epoch");
        Ok(self
            .conn()
            .prepare_cached(
                "INSERT INTO host_epochs (pid, started_at) VALUES (?1, ?2) RETURNING epoch",
            )?
            .query_row(params![pid, self.now], |r| r.get(0))?)
    }

    /// Marks a host epoch as stopped cleanly.
    pub fn end_host_epoch(&mut self, epoch: i64) -> StoreResult<()> {
        self.ops.push("end_host_epoch");
        self.conn()
            .prepare_cached("UPDATE host_epochs SET stopped_at = ?2 WHERE epoch = ?1")?
            .execute(params![epoch, self.now])?;
        Ok(())
    }

    /// At host start, every run still held by another host owner belongs to a dead host (this
    /// host holds the installation lock), whatever its expiry says: requeue each from its last
    /// durable boundary. A host crash is not the run's fault, so it does not count as a loss
    /// toward review — but `applying` effects without receipts still become uncertain.
    pub fn recover_runs_of_dead_hosts(
        &mut self,
        current_owner: &str,
    ) -> StoreResult<Vec<RecoveredRun>> {
        let held: Vec<String> = self
            .conn()
            .prepare_cached(
                "SELECT r.run_id FROM runs r JOIN claims c ON c.run_id = r.run_id
                 WHERE r.status = 'running' AND c.owner_kind = 'host' AND c.owner_id != ?1
                 ORDER BY r.run_id",
            )?
            .query_map([current_owner], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(held.len());
        for run_id in held {
            let run = self.run_row(&run_id)?;
            out.push(self.requeue_after_loss_counted(
                &run_id,
                &run,
                "host restarted",
                "recovered",
                false,
            )?);
        }
        Ok(out)
    }
}

impl WriteTx<'_> {
    /// The steps the run's graph's step limit counts: its attempts, except those interrupted
    /// (a pause, a lost child, a host restart, a route the host parks after): the node they
    /// were at opens again without the graph having moved, and child losses have their own
    /// bound (the run goes to review).
    pub fn steps_taken(&self, run_id: &str) -> StoreResult<u64> {
        let count: i64 = self
            .conn()
            .prepare_cached(
                "SELECT COUNT(*) FROM attempts WHERE run_id = ?1 AND status != 'interrupted'",
            )?
            .query_row([run_id], |r| r.get(0))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Refuses with [`StoreError::StepLimitReached`] when opening an attempt of `next_node`
    /// now would exceed a step limit of the run's graph snapshot: the run's `max_steps` (its
    /// [`steps_taken`](Self::steps_taken)), or the `max_steps` of a mount `next_node` lives
    /// in (the steps of that mount's current invocation; entering a mount starts a new one,
    /// so only steps inside it count). Every attempt is opened by `node_started` or
    /// `transition`, and both ask this first: no path, a child's or the host's own, steps
    /// past the limit. A run without a snapshot yet has no limit to check.
    pub(crate) fn require_within_step_limit(
        &self,
        run_id: &str,
        next_node: &str,
    ) -> StoreResult<()> {
        let run_limit: Option<Option<i64>> = self
            .conn()
            .prepare_cached(
                "SELECT json_extract(definition, '$.max_steps') FROM runs
                 WHERE run_id = ?1 AND definition IS NOT NULL",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?;
        let Some(run_limit) = run_limit else {
            return Ok(());
        };
        let limit_of = |max_steps: Option<i64>| {
            max_steps.map_or(crate::graph::DEFAULT_MAX_STEPS, |n| {
                u64::try_from(n).unwrap_or(0)
            })
        };
        let limit = limit_of(run_limit);
        if self.steps_taken(run_id)? >= limit {
            return Err(StoreError::StepLimitReached {
                run_id: run_id.to_owned(),
                detail: format!(
                    "the run reached its step limit: maxSteps is {limit} and every step was used (a loop in the graph did not end)"
                ),
            });
        }
        let mounts: Vec<(String, Option<i64>)> = self
            .conn()
            .prepare_cached(
                "SELECT m.key, json_extract(m.value, '$.max_steps')
                 FROM runs r, json_each(r.definition, '$.mounts') m
                 WHERE r.run_id = ?1 AND json_type(r.definition, '$.mounts') = 'object'
                 ORDER BY length(m.key)",
            )?
            .query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        for (path, max_steps) in mounts {
            let inside = next_node
                .strip_prefix(path.as_str())
                .is_some_and(|rest| rest.starts_with('.'));
            if !inside {
                continue;
            }
            let limit = limit_of(max_steps);
            if self.attempts_in_invocation(run_id, &path)? >= limit {
                return Err(StoreError::StepLimitReached {
                    run_id: run_id.to_owned(),
                    detail: format!(
                        "the workflow included as {path} reached its step limit: its maxSteps is {limit} and this invocation used every step (a loop in it did not end)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// How many steps the current invocation of mount `path` has taken: the run's newest
    /// attempts whose nodes live under `path` (`<path>.<node>`), counted back to the newest one
    /// outside it, interrupted ones not counted (as in [`steps_taken`](Self::steps_taken)). An invocation begins when the run enters the mount from outside.
    pub fn attempts_in_invocation(&self, run_id: &str, path: &str) -> StoreResult<u64> {
        let prefix = format!("{path}.");
        let count: i64 = self
            .conn()
            .prepare_cached(
                "SELECT COUNT(*) FROM attempts
                 WHERE run_id = ?1 AND status != 'interrupted'
                   AND rowid > COALESCE((SELECT MAX(rowid) FROM attempts
                                         WHERE run_id = ?1
                                           AND substr(node_id, 1, length(?2)) != ?2), 0)",
            )?
            .query_row(params![run_id, prefix], |r| r.get(0))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

impl HostOps for WriteTx<'_> {
    /// Claims up to `limit` undelivered messages of `session` for `owner` for `lease_ms`, no
    /// more than fit `max_bytes` of reply (the first always does): a claimed message must
    /// reach its claimant, or it waits out the lease and the same oldest messages are taken
    /// again, for good. Messages whose earlier delivery claim expired are handed out again
    /// (at-least-once; the acknowledgement makes delivery final). `after`: only those that
    /// come after that message (a message id of the session; an unknown one gives none).
    #[allow(clippy::too_many_arguments)]
    fn claim_messages(
        &mut self,
        session: &str,
        owner: &str,
        after: Option<&str>,
        limit: u32,
        lease_ms: i64,
        max_bytes: usize,
    ) -> StoreResult<ClaimedMessages> {
        self.ops.push("claim_messages");
        // The record's JSON is its stored content and ids plus a bounded rest (field names,
        // kind, delivery time): what `PER_MESSAGE_ROOM` covers.
        const PER_MESSAGE_ROOM: usize = 256;
        let candidates: Vec<(String, usize)> = self
            .conn()
            .prepare_cached(
                "SELECT message_id, length(CAST(content AS BLOB)) + length(message_id)
                                    + length(run_id) + length(origin_session)
                 FROM workflow_messages
                 WHERE origin_session = ?1 AND delivered_at IS NULL
                   AND (claim_expires_at IS NULL OR claim_expires_at <= ?2 OR claimed_by = ?3)
                   AND (?5 IS NULL OR (created_at, rowid) > (
                        SELECT created_at, rowid FROM workflow_messages
                        WHERE message_id = ?5 AND origin_session = ?1))
                 ORDER BY created_at, rowid LIMIT ?4",
            )?
            .query_map(params![session, self.now, owner, limit, after], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?))
            })?
            .map(|row| row.map(|(id, len)| (id, usize::try_from(len).unwrap_or(usize::MAX))))
            .collect::<Result<_, _>>()?;
        // Oldest first, as many whole messages as fit `max_bytes` (always the first: one
        // message is smaller than a frame); the rest stay unclaimed for the next claim.
        let mut ids = Vec::with_capacity(candidates.len());
        let mut used = 0usize;
        let mut more = false;
        for (id, len) in candidates {
            let len = len.saturating_add(PER_MESSAGE_ROOM);
            if !ids.is_empty() && used.saturating_add(len) > max_bytes {
                more = true;
                break;
            }
            used = used.saturating_add(len);
            ids.push(id);
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let rec = self
                .conn()
                .prepare_cached(
                    "UPDATE workflow_messages SET claimed_by = ?2, claim_expires_at = ?3
                     WHERE message_id = ?1
                     RETURNING message_id, run_id, origin_session, kind, content, delivered_at",
                )?
                .query_row(params![id, owner, self.now + lease_ms], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                    ))
                })?;
            out.push(MessageRecord {
                message_id: rec.0,
                run_id: rec.1,
                origin_session: rec.2,
                kind: rec.3,
                content: serde_json::from_str::<Value>(&rec.4)?,
                content_omitted: false,
                delivered_at: rec.5,
            });
        }
        Ok(ClaimedMessages {
            messages: out,
            more,
        })
    }

    fn ack_message(&mut self, message_id: &str) -> StoreResult<UnixMillis> {
        self.ops.push("ack_message");
        let delivered: Option<Option<i64>> = self
            .conn()
            .prepare_cached("SELECT delivered_at FROM workflow_messages WHERE message_id = ?1")?
            .query_row([message_id], |r| r.get(0))
            .optional()?;
        match delivered {
            None => Err(StoreError::NotFound {
                what: "message",
                id: message_id.to_owned(),
            }),
            Some(Some(at)) => Ok(at),
            Some(None) => {
                self.conn()
                    .prepare_cached(
                        "UPDATE workflow_messages SET delivered_at = ?2 WHERE message_id = ?1",
                    )?
                    .execute(params![message_id, self.now])?;
                Ok(self.now)
            }
        }
    }

    fn progress(
        &mut self,
        claim: &super::Claim,
        message: &str,
        data: &Value,
    ) -> StoreResult<super::ProgressKept> {
        self.fence(claim)?;
        let run = self.run_row(&claim.run_id)?;
        if run.status != super::RunStatus::Running {
            return Err(super::lifecycle::invalid(
                &claim.run_id,
                super::Op::NodeStarted,
                run.status,
                format!("the run is {}", run.status),
            ));
        }
        self.record_progress(
            &claim.run_id,
            run.current_node.as_deref(),
            run.current_attempt.as_deref(),
            message,
            data,
            None,
        )
    }

    fn run(&self, run_id: &str) -> StoreResult<super::RunRecord> {
        super::read::run_record(self.conn(), run_id)
    }

    fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)> {
        super::read::run_payload(self.conn(), run_id)
    }

    fn run_state(&self, run_id: &str) -> StoreResult<(super::RunStatus, u64)> {
        super::read::run_state(self.conn(), run_id)
    }

    fn run_status(&self, run_id: &str) -> StoreResult<super::RunStatus> {
        Ok(self.run_row(run_id)?.status)
    }

    fn ready_runs(&self, limit: u32) -> StoreResult<Vec<String>> {
        super::read::ready_runs(self.conn(), self.now_ms(), limit)
    }

    fn mounted_sources(&self, run_id: &str) -> StoreResult<Value> {
        super::read::mounted_sources(self.conn(), run_id)
    }

    fn child_losses(&self, run_id: &str) -> StoreResult<u32> {
        let losses: i64 = self
            .conn()
            .prepare_cached("SELECT crash_count FROM queue WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        Ok(u32::try_from(losses).unwrap_or(u32::MAX))
    }

    fn attempt_deadline(&self, attempt_id: &str) -> StoreResult<Option<UnixMillis>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT deadline_at FROM attempts WHERE attempt_id = ?1")?
            .query_row([attempt_id], |r| r.get(0))
            .optional()?
            .flatten())
    }

    fn current_open_attempt(&self, run_id: &str) -> StoreResult<Option<(String, String)>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT a.attempt_id, a.node_id FROM runs r JOIN attempts a ON a.attempt_id = r.current_attempt
                 WHERE r.run_id = ?1 AND a.status = 'running'",
            )?
            .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    fn latest_results(&self, run_id: &str) -> StoreResult<Vec<NodeResult>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT a.node_id, a.status, a.output, a.error,
                    (SELECT COUNT(*) FROM attempts c
                     WHERE c.run_id = a.run_id AND c.node_id = a.node_id
                       AND c.status IN ('succeeded', 'failed', 'timed_out'))
             FROM attempts a
             WHERE a.run_id = ?1 AND a.status IN ('succeeded', 'failed', 'timed_out')
               AND a.rowid = (SELECT MAX(b.rowid) FROM attempts b
                              WHERE b.run_id = a.run_id AND b.node_id = a.node_id
                                AND b.status IN ('succeeded', 'failed', 'timed_out'))
             ORDER BY a.rowid",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (node, status, output, error, finished) = row?;
            let output = match output {
                Some(text) => serde_json::from_str(&text)?,
                None => Value::Null,
            };
            out.push(NodeResult {
                node,
                status,
                output,
                error,
                finished: u64::try_from(finished).unwrap_or(0),
            });
        }
        Ok(out)
    }

    fn last_node_output(&self, run_id: &str) -> StoreResult<Option<Value>> {
        let text: Option<Option<String>> = self
            .conn()
            .prepare_cached(
                "SELECT output FROM attempts WHERE run_id = ?1 AND status = 'succeeded'
                 ORDER BY rowid DESC LIMIT 1",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?;
        Ok(text
            .flatten()
            .map(|t| serde_json::from_str(&t))
            .transpose()?)
    }

    fn answer_for_attempt(&self, attempt_id: &str) -> StoreResult<Option<Value>> {
        let text: Option<Option<String>> = self
            .conn()
            .prepare_cached(
                "SELECT answer FROM decisions WHERE attempt_id = ?1 AND status = 'answered'
                 ORDER BY answered_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([attempt_id], |r| r.get(0))
            .optional()?;
        Ok(text
            .flatten()
            .map(|t| serde_json::from_str(&t))
            .transpose()?)
    }

    fn validating_submission(&self, run_id: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT s.submission_id FROM submissions s
                 JOIN interactions i ON i.interaction_id = s.interaction_id
                 WHERE i.run_id = ?1 AND i.status = 'validating' AND s.state = 'validating'
                 LIMIT 1",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?)
    }

    fn submission_payload(&self, submission_id: &str) -> StoreResult<Value> {
        let text: String = self
            .conn()
            .prepare_cached("SELECT payload FROM submissions WHERE submission_id = ?1")?
            .query_row([submission_id], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "submission",
                id: submission_id.to_owned(),
            })?;
        Ok(serde_json::from_str(&text)?)
    }
}
