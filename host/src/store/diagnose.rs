//! `diagnose` (read-only) lists contradictory rows; `repair` fixes only the findings whose fix
//! follows from durable evidence alone and never invents successful work.
//!
//! Each check is one SQL query that returns the offending run and the ids involved. The same
//! table of checks drives both: a check either names its repair or says a person must look.

use rusqlite::params;
use serde_json::json;

use rusqlite::Connection;

use super::values::{abandoned_partial_values, corrupt_values};
use super::{queue_state_for, RunStatus, Store, StoreResult, UnixMillis};
use piw_engine::store::records::*;

struct Check {
    code: &'static str,
    /// Returns (run_id, ids joined by ',', detail).
    sql: &'static str,
    repairable: bool,
}

fn checks() -> Vec<Check> {
    vec![
        Check {
            code: "value_missing",
            sql: "SELECT run_id, sha256, place || ' refers to value ' || sha256
                         || ', which the run does not hold whole'
                  FROM (SELECT run_id, place, json_extract(v, '$.sha256') AS sha256
                        FROM (SELECT run_id, 'an attempt output' AS place, output AS v FROM attempts
                              UNION ALL SELECT run_id, 'the run result', result FROM runs
                              UNION ALL SELECT run_id, 'an effect receipt', receipt FROM effects
                              UNION ALL SELECT run_id, 'a decision request', request FROM decisions
                              UNION ALL SELECT run_id, 'an interaction request', request
                                        FROM interactions
                              UNION ALL SELECT run_id, 'a message', content FROM workflow_messages)
                        WHERE v LIKE '{\"$piw\":\"value\"%' AND json_valid(v)) refs
                  WHERE NOT EXISTS (SELECT 1 FROM run_values rv JOIN value_blobs b USING (sha256)
                                    WHERE rv.run_id = refs.run_id AND rv.sha256 = refs.sha256
                                      AND b.received = b.bytes)",
            repairable: false,
        },
        Check {
            code: "value_unreferenced",
            sql: "SELECT '', sha256, 'value of ' || bytes || ' bytes is held by no run'
                  FROM value_blobs v
                  WHERE NOT EXISTS (SELECT 1 FROM run_values rv WHERE rv.sha256 = v.sha256)",
            repairable: true,
        },
        Check {
            // A prune finds a run's receipts through its window (`runs.receipts_from`,
            // `receipts_to`): one outside it would outlive the run. Repair widens the window,
            // which the receipt naming the run decides.
            code: "receipt_outside_window",
            sql: "SELECT c.run_id, c.request_id, 'the receipt of request ' || c.request_id
                         || ' lies outside the run''s receipt window: a prune would leave it'
                  FROM command_receipts c JOIN runs r ON r.run_id = c.run_id
                  WHERE r.receipts_from IS NULL
                     OR c.rowid NOT BETWEEN r.receipts_from AND r.receipts_to",
            repairable: true,
        },
        Check {
            code: "running_without_live_owner_record",
            sql: "SELECT r.run_id, '', 'run is running but its claim has no owner'
                  FROM runs r JOIN claims c ON c.run_id = r.run_id
                  WHERE r.status = 'running' AND c.owner_kind IS NULL",
            repairable: true,
        },
        Check {
            code: "host_claim_on_idle_run",
            sql: "SELECT r.run_id, '', 'run is ' || r.status || ' but a host claim (generation '
                         || c.generation || ') is bound'
                  FROM runs r JOIN claims c ON c.run_id = r.run_id
                  WHERE r.status != 'running' AND c.owner_kind = 'host'",
            repairable: true,
        },
        Check {
            code: "claim_on_terminal_run",
            sql: "SELECT r.run_id, '', 'terminal run still has a claim (generation ' || c.generation || ')'
                  FROM runs r JOIN claims c ON c.run_id = r.run_id
                  WHERE r.status IN ('completed','failed','cancelled','timed_out')
                    AND c.owner_kind IS NOT NULL",
            repairable: true,
        },
        Check {
            code: "missing_claim_row",
            sql: "SELECT r.run_id, '', 'run has no claim row'
                  FROM runs r LEFT JOIN claims c ON c.run_id = r.run_id WHERE c.run_id IS NULL",
            repairable: true,
        },
        Check {
            code: "missing_queue_row",
            sql: "SELECT r.run_id, '', 'run has no queue row'
                  FROM runs r LEFT JOIN queue q ON q.run_id = r.run_id WHERE q.run_id IS NULL",
            repairable: true,
        },
        Check {
            code: "open_attempt_on_terminal_run",
            sql: "SELECT a.run_id, group_concat(a.attempt_id), 'terminal run has open attempts'
                  FROM attempts a JOIN runs r ON r.run_id = a.run_id
                  WHERE r.status IN ('completed','failed','cancelled','timed_out')
                    AND a.status IN ('running','waiting') GROUP BY a.run_id",
            repairable: true,
        },
        Check {
            code: "running_attempt_without_running_run",
            sql: "SELECT a.run_id, group_concat(a.attempt_id), 'attempt is running but run is ' || r.status
                  FROM attempts a JOIN runs r ON r.run_id = a.run_id
                  WHERE a.status = 'running' AND r.status IN ('queued','waiting','review')
                  GROUP BY a.run_id",
            repairable: true,
        },
        Check {
            code: "several_open_attempts",
            sql: "SELECT run_id, group_concat(attempt_id), count(*) || ' open attempts'
                  FROM attempts WHERE status IN ('running','waiting')
                  GROUP BY run_id HAVING count(*) > 1",
            repairable: false,
        },
        Check {
            code: "current_attempt_mismatch",
            sql: "SELECT r.run_id, r.current_attempt,
                         'current attempt is missing, of another run, or of another node'
                  FROM runs r LEFT JOIN attempts a ON a.attempt_id = r.current_attempt
                  WHERE r.current_attempt IS NOT NULL
                    AND (a.attempt_id IS NULL OR a.run_id != r.run_id
                         OR a.node_id IS NOT r.current_node)",
            repairable: false,
        },
        Check {
            code: "pending_request_on_terminal_run",
            sql: "SELECT run_id, group_concat(id), 'terminal run has pending decisions, interactions or timers'
                  FROM (SELECT d.run_id, d.decision_id AS id FROM decisions d JOIN runs r USING (run_id)
                        WHERE d.status = 'pending'
                          AND r.status IN ('completed','failed','cancelled','timed_out')
                        UNION ALL
                        SELECT i.run_id, i.interaction_id FROM interactions i JOIN runs r USING (run_id)
                        WHERE i.status IN ('pending','validating')
                          AND r.status IN ('completed','failed','cancelled','timed_out')
                        UNION ALL
                        SELECT t.run_id, t.timer_id FROM timers t JOIN runs r USING (run_id)
                        WHERE t.status = 'pending'
                          AND r.status IN ('completed','failed','cancelled','timed_out'))
                  GROUP BY run_id",
            repairable: true,
        },
        Check {
            code: "waiting_without_request",
            sql: "SELECT r.run_id, COALESCE(r.current_attempt, ''),
                         'run is waiting but has no pending decision, interaction or timer'
                  FROM runs r WHERE r.status = 'waiting'
                    AND NOT EXISTS (SELECT 1 FROM decisions d WHERE d.run_id = r.run_id AND d.status = 'pending')
                    AND NOT EXISTS (SELECT 1 FROM interactions i WHERE i.run_id = r.run_id AND i.status = 'pending')
                    AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.run_id = r.run_id AND t.status = 'pending')",
            repairable: false,
        },
        Check {
            code: "pending_request_on_active_run",
            sql: "SELECT run_id, group_concat(id),
                         'run is ' || status || ' while a request of its waits for an answer'
                  FROM (SELECT d.run_id, d.decision_id AS id, r.status FROM decisions d
                        JOIN runs r USING (run_id)
                        WHERE d.status = 'pending' AND r.status IN ('queued', 'running')
                        UNION ALL
                        SELECT i.run_id, i.interaction_id, r.status FROM interactions i
                        JOIN runs r USING (run_id)
                        WHERE i.status = 'pending' AND r.status IN ('queued', 'running'))
                  GROUP BY run_id",
            repairable: false,
        },
        Check {
            code: "validating_submission_without_judge",
            sql: "SELECT i.run_id, s.submission_id || ',' || i.attempt_id,
                         'submission is validating but its attempt is ' || a.status
                         || CASE WHEN r.current_attempt IS i.attempt_id THEN ''
                                 ELSE ' and no longer the run''s current one' END
                         || ': no child will ever judge it'
                  FROM submissions s JOIN interactions i ON i.interaction_id = s.interaction_id
                  JOIN attempts a ON a.attempt_id = i.attempt_id
                  JOIN runs r ON r.run_id = i.run_id
                  WHERE s.state = 'validating'
                    AND r.status NOT IN ('completed','failed','cancelled','timed_out')
                    AND (a.status NOT IN ('running', 'waiting')
                         OR r.current_attempt IS NOT i.attempt_id)",
            repairable: false,
        },
        Check {
            code: "validating_submission_mismatch",
            sql: "SELECT i.run_id, s.submission_id || ',' || i.interaction_id,
                         'submission is validating but its interaction is ' || i.status
                  FROM submissions s JOIN interactions i ON i.interaction_id = s.interaction_id
                  WHERE s.state = 'validating' AND i.status != 'validating'",
            repairable: false,
        },
        Check {
            code: "live_effect_on_terminal_run",
            sql: "SELECT e.run_id, group_concat(e.effect_id), 'terminal run has reserved or applying effects'
                  FROM effects e JOIN runs r ON r.run_id = e.run_id
                  WHERE e.state IN ('reserved','applying')
                    AND r.status IN ('completed','failed','cancelled','timed_out')
                  GROUP BY e.run_id",
            repairable: true,
        },
        Check {
            code: "terminal_without_finish_time",
            sql: "SELECT run_id, '', 'terminal run has no finished_at'
                  FROM runs WHERE status IN ('completed','failed','cancelled','timed_out')
                    AND finished_at IS NULL",
            repairable: false,
        },
        Check {
            code: "event_sequence_mismatch",
            // Events are stored in commit order (no index by run): one pass counts them all.
            sql: "SELECT r.run_id, '', 'revision ' || r.revision || ' but ' || COALESCE(e.n, 0)
                         || ' events, the last ' || COALESCE(e.last_seq, 0)
                         || ', the newest linked ' || COALESCE(h.seq, 0)
                  FROM runs r
                  LEFT JOIN (SELECT run_id, COUNT(*) AS n, MAX(seq) AS last_seq
                             FROM events GROUP BY run_id) e ON e.run_id = r.run_id
                  LEFT JOIN events h ON h.event_id = r.last_event_id
                  WHERE r.revision != COALESCE(e.n, 0) OR r.revision != COALESCE(e.last_seq, 0)
                     OR r.revision != COALESCE(h.seq, 0) OR h.run_id != r.run_id",
            repairable: false,
        },
        Check {
            code: "event_chain_broken",
            sql: "SELECT e.run_id, CAST(e.event_id AS TEXT), 'event ' || e.seq
                         || ' does not link to the run''s event ' || (e.seq - 1)
                  FROM events e LEFT JOIN events p ON p.event_id = e.prev_event_id
                  WHERE CASE WHEN e.seq = 1 THEN e.prev_event_id IS NOT NULL
                             ELSE p.event_id IS NULL OR p.run_id != e.run_id
                                  OR p.seq != e.seq - 1 END",
            repairable: false,
        },
        Check {
            code: "terminal_message_count",
            // A finished run has its one terminal message (added in the commit that finished
            // it, with or without an origin session); a run still going has none yet.
            sql: "SELECT r.run_id, GROUP_CONCAT(m.message_id), r.status || ' run has '
                         || COUNT(m.message_id) || ' terminal messages'
                  FROM runs r LEFT JOIN workflow_messages m
                       ON m.run_id = r.run_id AND m.kind = 'terminal'
                  GROUP BY r.run_id
                  HAVING COUNT(m.message_id) != CASE WHEN r.status IN
                         ('completed','failed','cancelled','timed_out') THEN 1 ELSE 0 END",
            repairable: false,
        },
        Check {
            code: "message_session_mismatch",
            sql: "SELECT m.run_id, m.message_id, 'message for session ' || m.origin_session
                         || ' of a run of ' || COALESCE(r.origin_session, 'no session')
                  FROM workflow_messages m JOIN runs r ON r.run_id = m.run_id
                  WHERE r.origin_session IS NOT m.origin_session",
            repairable: false,
        },
        Check {
            code: "dangling_reference",
            // A row whose run, attempt, interaction or event is gone (a prune removes a run's
            // rows without the foreign keys' enforcement: store/prune.rs).
            sql: "SELECT '', fk.\"table\" || ':' || COALESCE(fk.rowid, ''),
                         'a row of ' || fk.\"table\" || ' refers to a missing row of ' || fk.parent
                  FROM pragma_foreign_key_check() fk",
            repairable: false,
        },
        Check {
            code: "projection_mismatch",
            sql: "SELECT r.run_id, '', 'viewer projection differs from the run'
                  FROM runs r LEFT JOIN run_views v ON v.run_id = r.run_id
                  WHERE v.run_id IS NULL OR v.status != r.status OR v.paused != r.paused
                     OR v.revision != r.revision OR v.current_node IS NOT r.current_node
                     OR v.workflow_name != r.workflow_name
                     OR v.origin_session IS NOT r.origin_session",
            repairable: true,
        },
    ]
}

/// The code of the finding for a file SQLite itself calls malformed.
pub const DATABASE_MALFORMED: &str = "database_malformed";

/// How many of SQLite's complaints an integrity check keeps.
const INTEGRITY_PROBLEMS: u32 = 10;

impl Store {
    /// What SQLite's `PRAGMA integrity_check` finds wrong with the file (its pages, b-trees
    /// and indexes), at most [`INTEGRITY_PROBLEMS`] lines; empty when it says `ok`. A check
    /// that SQLite cannot even finish (the file is that damaged) is one problem, its error.
    pub fn integrity_problems(&self) -> StoreResult<Vec<String>> {
        integrity_problems(&self.conn)
    }
}

/// [`Store::integrity_problems`] on connection `c`.
fn integrity_problems(c: &Connection) -> StoreResult<Vec<String>> {
    let checked = c
        .prepare(&format!("PRAGMA integrity_check({INTEGRITY_PROBLEMS})"))
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        });
    Ok(match checked {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => Vec::new(),
        Ok(lines) => lines,
        Err(e) => vec![e.to_string()],
    })
}

/// `RunReads::diagnose` on connection `c` at time `now` (when an upload is abandoned).
pub(super) fn findings(c: &Connection, now: UnixMillis) -> StoreResult<Vec<Finding>> {
    let problems = integrity_problems(c)?;
    if !problems.is_empty() {
        return Ok(vec![Finding {
            code: DATABASE_MALFORMED.into(),
            run_id: String::new(),
            ids: Vec::new(),
            detail: format!(
                "SQLite's integrity check says the file is malformed: {}",
                problems.join("; ")
            ),
            repairable: false,
        }]);
    }
    let mut findings = Vec::new();
    let controller_checks = super::controllers::DIAGNOSE_CHECKS
        .iter()
        .map(|&(code, sql)| Check {
            code,
            sql,
            repairable: false,
        });
    for check in checks().into_iter().chain(controller_checks) {
        let mut stmt = c.prepare_cached(check.sql)?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for row in rows {
            let (run_id, ids, detail) = row?;
            findings.push(Finding {
                code: check.code.into(),
                run_id,
                ids: ids
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
                detail,
                repairable: check.repairable,
            });
        }
    }
    // The queue row must be what the status and pause flag say it is.
    let mut stmt = c.prepare_cached(
        "SELECT r.run_id, r.status, r.paused, q.state FROM runs r JOIN queue q USING (run_id)",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    for row in rows {
        let (run_id, status, paused, state) = row?;
        let Some(status) = RunStatus::parse(&status) else {
            continue;
        };
        let expected = queue_state_for(status, paused);
        if expected.as_str() != state {
            findings.push(Finding {
                code: "queue_state_mismatch".into(),
                run_id,
                ids: vec![],
                detail: format!("queue is {state}, a {status} run needs {expected}"),
                repairable: true,
            });
        }
    }
    for (sha256, detail) in corrupt_values(c)? {
        findings.push(Finding {
            code: "value_corrupt".into(),
            run_id: String::new(),
            ids: vec![sha256],
            // Not repairable here (only the run that made the value has its bytes), but
            // not a dead end: the next upload of the value checks and replaces it
            // (`put_value_chunk`).
            detail: format!(
                "{detail}; the next run that uploads this value stores it again: retry or \
                 start a run that produces it"
            ),
            repairable: false,
        });
    }
    for (run_id, sha256, bytes, received) in abandoned_partial_values(c, now)? {
        findings.push(Finding {
            code: "value_partial".into(),
            run_id,
            ids: vec![sha256],
            // Repairable: nothing refers to a partial value and no live child can go on
            // with it (the rule: `values::ABANDONED`), so removing it loses no fact; a
            // later child producing the value uploads it from the start.
            detail: format!(
                "an upload of {received} of {bytes} bytes that no live child can complete"
            ),
            repairable: true,
        });
    }
    findings.sort_by(|a, b| (&a.run_id, &a.code).cmp(&(&b.run_id, &b.code)));
    Ok(findings)
}

impl super::WriteTx<'_> {
    pub(super) fn repair_one(&mut self, f: &Finding) -> StoreResult<()> {
        let run_id = f.run_id.as_str();
        let now = self.now;
        let c = self.conn();
        match f.code.as_ref() {
            "running_without_live_owner_record" => {
                let run = self.run_row(run_id)?;
                // Same path as expiry recovery: interrupt, count the loss, requeue or review.
                self.requeue_after_loss(
                    run_id,
                    &run,
                    "repair: running without an owner",
                    "repaired",
                )?;
                return Ok(());
            }
            "value_unreferenced" => {
                self.remove_unreferenced_values()?;
                return Ok(());
            }
            "value_partial" => {
                // One finding per run holding the value: the first removes it, the rest find
                // it gone.
                for sha256 in &f.ids {
                    self.remove_abandoned_partial_value(sha256)?;
                }
                return Ok(());
            }
            "host_claim_on_idle_run" | "claim_on_terminal_run" => self.release_claim(run_id)?,
            "receipt_outside_window" => {
                c.prepare_cached(
                    "UPDATE runs SET
                         receipts_from = (SELECT MIN(rowid) FROM command_receipts WHERE run_id = ?1),
                         receipts_to = (SELECT MAX(rowid) FROM command_receipts WHERE run_id = ?1)
                     WHERE run_id = ?1",
                )?
                .execute([run_id])?;
            }
            "missing_claim_row" => {
                // The highest generation the run ever handed out, so the next claim's is new:
                // an activation or a control claim need not have opened an attempt, but each
                // left its event (and a launch its child record).
                c.execute(
                    "INSERT INTO claims (run_id, generation)
                     VALUES (?1, (SELECT MAX(g) FROM (
                         SELECT COALESCE(MAX(generation), 0) AS g FROM attempts WHERE run_id = ?1
                         UNION ALL
                         SELECT COALESCE(MAX(generation), 0) FROM children WHERE run_id = ?1
                         UNION ALL
                         SELECT COALESCE(MAX(CAST(json_extract(data, '$.generation') AS INTEGER)), 0)
                         FROM events WHERE run_id = ?1 AND kind IN ('activated', 'control_claimed')
                           AND json_valid(data))))",
                    [run_id],
                )?;
            }
            "missing_queue_row" => {
                c.execute(
                    "INSERT INTO queue (run_id, state, available_at) VALUES (?1, 'done', ?2)",
                    params![run_id, now],
                )?;
            }
            "open_attempt_on_terminal_run" | "running_attempt_without_running_run" => {
                let status = if f.code == "open_attempt_on_terminal_run" {
                    "cancelled"
                } else {
                    "interrupted"
                };
                c.execute(
                    "UPDATE attempts SET status = ?2, error = 'closed by repair', finished_at = ?3
                     WHERE run_id = ?1 AND status = 'running'",
                    params![run_id, status, now],
                )?;
                if f.code == "open_attempt_on_terminal_run" {
                    c.execute(
                        "UPDATE attempts SET status = 'cancelled', error = 'closed by repair',
                                finished_at = ?2 WHERE run_id = ?1 AND status = 'waiting'",
                        params![run_id, now],
                    )?;
                }
            }
            "pending_request_on_terminal_run" => {
                c.execute(
                    "UPDATE decisions SET status = 'cancelled' WHERE run_id = ?1 AND status = 'pending'",
                    [run_id],
                )?;
                c.execute(
                    "UPDATE submissions SET state = 'rejected', error = 'closed by repair', settled_at = ?2
                     WHERE state = 'validating'
                       AND interaction_id IN (SELECT interaction_id FROM interactions WHERE run_id = ?1)",
                    params![run_id, now],
                )?;
                c.execute(
                    "UPDATE interactions SET status = 'cancelled', closed_at = ?2
                     WHERE run_id = ?1 AND status IN ('pending','validating')",
                    params![run_id, now],
                )?;
                c.execute(
                    "UPDATE timers SET status = 'cancelled', fired_at = ?2
                     WHERE run_id = ?1 AND status = 'pending'",
                    params![run_id, now],
                )?;
            }
            "live_effect_on_terminal_run" => {
                c.execute(
                    "UPDATE effects SET state = 'cancelled', updated_at = ?2 WHERE run_id = ?1 AND state = 'reserved'",
                    params![run_id, now],
                )?;
                c.execute(
                    "UPDATE effects SET state = 'uncertain', updated_at = ?2,
                            error = 'found applying on a finished run; outcome unknown'
                     WHERE run_id = ?1 AND state = 'applying'",
                    params![run_id, now],
                )?;
            }
            // Rebuilt below by finish_run_write.
            "queue_state_mismatch" | "projection_mismatch" => {}
            _ => return Ok(()),
        }
        if f.code == "projection_mismatch" || f.code == "queue_state_mismatch" {
            // Rebuild without a new event when the event log itself is consistent: a repair of
            // a derived row is not a domain change.
            self.rebuild_derived_rows(run_id)?;
            return Ok(());
        }
        self.finish_run_write(
            run_id,
            "repaired",
            json!({ "finding": f.code, "ids": f.ids }),
        )?;
        Ok(())
    }

    fn rebuild_derived_rows(&mut self, run_id: &str) -> StoreResult<()> {
        let run = self.run_row(run_id)?;
        self.conn().execute(
            "UPDATE queue SET state = ?2 WHERE run_id = ?1",
            params![run_id, queue_state_for(run.status, run.paused).as_str()],
        )?;
        self.conn().execute(
            "INSERT INTO run_views (run_id, workflow_name, origin_session, status, paused,
                                    current_node, revision, last_event, updated_at)
             SELECT r.run_id, r.workflow_name, r.origin_session, r.status, r.paused, r.current_node,
                    r.revision, COALESCE((SELECT kind FROM events e
                                          WHERE e.event_id = r.last_event_id), 'repaired'),
                    r.updated_at
             FROM runs r WHERE r.run_id = ?1
             ON CONFLICT (run_id) DO UPDATE SET
                workflow_name = excluded.workflow_name, origin_session = excluded.origin_session,
                status = excluded.status, paused = excluded.paused,
                current_node = excluded.current_node, revision = excluded.revision,
                last_event = excluded.last_event, updated_at = excluded.updated_at",
            [run_id],
        )?;
        Ok(())
    }
}
