//! Lifecycle operations: each one is a single atomic change of run, queue, attempt, decision,
//! interaction, effect, claim, event and projection (docs/RULES.md, "Lifecycle consistency").
//!
//! This module holds a run's own course (start, activation and what a child resumes, node
//! starts, transitions, parking, pause and resume, completion, failure, cancellation);
//! [`requests`] what a run waits for (decisions, interactive requests, their deadlines) and the
//! messages it leaves for its session; [`timers`] the durable timers a run waits on;
//! [`recovery`] what follows a loss (a dead child or host, an expired claim) and the ways out
//! of review; [`holds`] who presents an interactive step, whose time runs only then. All of
//! them are methods of [`WriteTx`].

use crate::store::prelude::*;
use crate::store::Lifecycle;
use rusqlite::{params, OptionalExtension as _};
use serde_json::{json, Value};

mod holds;
mod recovery;
mod requests;
mod timers;

use super::{
    parse_enum, parse_status, Answerer, AttemptOutcome, AttemptStatus, ChildMode, Claim,
    DecisionKind, ExecutionMode, Fence, InteractionKind, MessageKind, Op, OwnerKind, RetryContract,
    RunStatus, StoreError, StoreResult, WriteTx,
};
use crate::clock::UnixMillis;
use crate::ids::sha256_hex;
use piw_engine::store::records::*;

/// The slice of a run row the operations decide on.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub status: RunStatus,
    pub paused: bool,
    pub current_node: Option<String>,
    pub current_attempt: Option<String>,
    pub revision: u64,
    pub origin_session: Option<String>,
    pub workflow_name: String,
}

struct AttemptRow {
    node_id: String,
    status: AttemptStatus,
}

impl WriteTx<'_> {
    pub(crate) fn run_row(&self, run_id: &str) -> StoreResult<RunRow> {
        let row = self
            .conn()
            .prepare_cached(
                "SELECT status, paused, current_node, current_attempt, revision, origin_session,
                        workflow_name FROM runs WHERE run_id = ?1",
            )?
            .query_row([run_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, bool>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })
            .optional()?
            .ok_or_else(|| StoreError::RunNotFound(run_id.to_owned()))?;
        Ok(RunRow {
            status: parse_status(&row.0)?,
            paused: row.1,
            current_node: row.2,
            current_attempt: row.3,
            revision: row.4 as u64,
            origin_session: row.5,
            workflow_name: row.6,
        })
    }

    /// Loads the run and refuses `op` when its status does not allow it.
    fn run_for(&self, run_id: &str, op: Op) -> StoreResult<RunRow> {
        let run = self.run_row(run_id)?;
        if !op.allowed(run.status) {
            return Err(invalid(
                run_id,
                op,
                run.status,
                format!("the run is {}", run.status),
            ));
        }
        Ok(run)
    }

    fn attempt_row(&self, attempt_id: &str) -> StoreResult<Option<AttemptRow>> {
        let row = self
            .conn()
            .prepare_cached("SELECT node_id, status FROM attempts WHERE attempt_id = ?1")?
            .query_row([attempt_id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .optional()?;
        row.map(|(node_id, status)| {
            Ok(AttemptRow {
                node_id,
                status: parse_enum(&status, AttemptStatus::parse, "attempt status")?,
            })
        })
        .transpose()
    }

    /// Requires `attempt_id` to be the run's current attempt and in `status`.
    fn current_attempt(
        &self,
        run_id: &str,
        run: &RunRow,
        attempt_id: &str,
        status: AttemptStatus,
    ) -> StoreResult<AttemptRow> {
        let stale = || StoreError::StaleAttempt {
            run_id: run_id.to_owned(),
            presented: attempt_id.to_owned(),
            current: run.current_attempt.clone().unwrap_or_else(|| "none".into()),
        };
        if run.current_attempt.as_deref() != Some(attempt_id) {
            return Err(stale());
        }
        match self.attempt_row(attempt_id)? {
            Some(a) if a.status == status => Ok(a),
            _ => Err(stale()),
        }
    }

    fn open_attempt(
        &mut self,
        run_id: &str,
        node_id: &str,
        generation: u64,
        deadline_at: Option<UnixMillis>,
    ) -> StoreResult<String> {
        validate_node_id(node_id)?;
        let attempt_id = self.new_id("att");
        self.conn()
            .prepare_cached(
                "INSERT INTO attempts (attempt_id, run_id, node_id, ordinal, generation, status,
                                       deadline_at, started_at)
                 VALUES (?1, ?2, ?3,
                         (SELECT COALESCE(MAX(ordinal), 0) + 1 FROM attempts
                          WHERE run_id = ?2 AND node_id = ?3),
                         ?4, 'running', ?5, ?6)",
            )?
            .execute(params![
                attempt_id,
                run_id,
                node_id,
                generation as i64,
                deadline_at,
                self.now
            ])?;
        self.conn()
            .prepare_cached(
                "UPDATE runs SET current_node = ?2, current_attempt = ?3 WHERE run_id = ?1",
            )?
            .execute(params![run_id, node_id, attempt_id])?;
        Ok(attempt_id)
    }

    fn close_attempt(&mut self, attempt_id: &str, outcome: &AttemptOutcome) -> StoreResult<()> {
        let (output, error) = match outcome {
            AttemptOutcome::Succeeded { output } => (Some(output.to_string()), None),
            AttemptOutcome::Failed { error } => (None, Some(error.clone())),
            AttemptOutcome::TimedOut => (None, Some("node deadline passed".to_owned())),
        };
        self.set_attempt_closed(attempt_id, outcome.status(), output, error)
    }

    fn set_attempt_closed(
        &mut self,
        attempt_id: &str,
        status: AttemptStatus,
        output: Option<String>,
        error: Option<String>,
    ) -> StoreResult<()> {
        self.conn()
            .prepare_cached(
                "UPDATE attempts SET status = ?2, output = ?3, error = ?4, finished_at = ?5
                 WHERE attempt_id = ?1",
            )?
            .execute(params![
                attempt_id,
                status.as_str(),
                output,
                error,
                self.now
            ])?;
        Ok(())
    }

    fn set_status(&mut self, run_id: &str, status: RunStatus) -> StoreResult<()> {
        self.conn()
            .prepare_cached("UPDATE runs SET status = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, status.as_str()])?;
        Ok(())
    }

    fn set_available(&mut self, run_id: &str, at: UnixMillis) -> StoreResult<()> {
        self.conn()
            .prepare_cached("UPDATE queue SET available_at = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, at])?;
        Ok(())
    }

    // ----- start and activation ------------------------------------------------------------

    fn resume_point(&self, run_id: &str, run: &RunRow) -> StoreResult<(ChildMode, Resume)> {
        let Some(attempt_id) = run.current_attempt.clone() else {
            return Ok((
                ChildMode::Run,
                Resume::Fresh {
                    node_id: run.current_node.clone(),
                },
            ));
        };
        let attempt = self.attempt_row(&attempt_id)?;
        let Some(attempt) = attempt.filter(|a| a.status == AttemptStatus::Waiting) else {
            return Ok((
                ChildMode::Run,
                Resume::Fresh {
                    node_id: run.current_node.clone(),
                },
            ));
        };
        let node_id = attempt.node_id;
        match self.latest_timer(&attempt_id)? {
            Some((timer_id, status)) if status == "pending" => {
                return Err(invalid(
                    run_id,
                    Op::Activate,
                    run.status,
                    format!("attempt {attempt_id} waits on timer {timer_id}, which has not fired"),
                ))
            }
            Some((_, status)) if status == "fired" => {
                return Ok((
                    ChildMode::Run,
                    Resume::TimerFired {
                        node_id,
                        attempt_id,
                    },
                ))
            }
            _ => {}
        }
        let interaction: Option<(String, String)> = self
            .conn()
            .prepare_cached(
                "SELECT interaction_id, status FROM interactions WHERE attempt_id = ?1
                 -- A validating submission must be judged first; otherwise the newest request
                 -- (insertion order breaks ties of equal timestamps).
                 ORDER BY status = 'validating' DESC, created_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([&attempt_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        // An unanswered request is never continued (a child would take the missing answer
        // for one and finish the node with nothing): its run waits. Only a corrupt or
        // contradictory row gets here, and activation refuses it.
        let unanswered = |what: &str, id: &str| {
            invalid(
                run_id,
                Op::Activate,
                run.status,
                format!("attempt {attempt_id} waits on {what} {id}, which nobody answered"),
            )
        };
        match interaction {
            Some((interaction_id, status)) if status == "pending" => {
                Err(unanswered("interaction", &interaction_id))
            }
            Some((interaction_id, status)) if status == "validating" => {
                let submission_id: String = self
                    .conn()
                    .prepare_cached(
                        "SELECT submission_id FROM submissions
                         WHERE interaction_id = ?1 AND state = 'validating'",
                    )?
                    .query_row([&interaction_id], |r| r.get(0))?;
                Ok((
                    ChildMode::Validate,
                    Resume::Validate {
                        node_id,
                        attempt_id,
                        submission_id,
                    },
                ))
            }
            Some((_, status)) if status == "expired" => Ok((
                ChildMode::Run,
                Resume::InteractionExpired {
                    node_id,
                    attempt_id,
                },
            )),
            Some((interaction_id, status)) if status == "settled" => {
                // Only an accepted submission settles a request.
                let submission_id: String = self
                    .conn()
                    .prepare_cached(
                        "SELECT submission_id FROM submissions
                         WHERE interaction_id = ?1 AND state = 'accepted'
                         ORDER BY settled_at DESC, rowid DESC LIMIT 1",
                    )?
                    .query_row([&interaction_id], |r| r.get(0))?;
                Ok((
                    ChildMode::Run,
                    Resume::Accepted {
                        node_id,
                        attempt_id,
                        submission_id,
                    },
                ))
            }
            // No interaction: the attempt waited on a decision. A pending decision never
            // reaches here (its run waits); a cancelled one on a live run was not answered
            // before the node's deadline (`expire_decision`).
            _ => match self.latest_decision(&attempt_id)? {
                Some((decision_id, status)) if status == "pending" => {
                    Err(unanswered("decision", &decision_id))
                }
                Some((_, status)) if status == "cancelled" => Ok((
                    ChildMode::Run,
                    Resume::InteractionExpired {
                        node_id,
                        attempt_id,
                    },
                )),
                _ => Ok((
                    ChildMode::Run,
                    Resume::Continue {
                        node_id,
                        attempt_id,
                    },
                )),
            },
        }
    }

    /// The newest decision of the attempt: its id and status.
    fn latest_decision(&self, attempt_id: &str) -> StoreResult<Option<(String, String)>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT decision_id, status FROM decisions WHERE attempt_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([attempt_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// Stores the graph snapshot at first activation (the host validates it first).
    pub fn record_definition(&mut self, claim: &Claim, definition: &Value) -> StoreResult<()> {
        self.fence(claim)?;
        self.run_for(&claim.run_id, Op::NodeStarted)?;
        let text = definition.to_string();
        let digest = sha256_hex(text.as_bytes());
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE runs SET definition = ?2, definition_digest = ?3
                 WHERE run_id = ?1 AND definition IS NULL",
            )?
            .execute(params![claim.run_id, text, digest])?;
        if changed == 0 {
            return Err(invalid(
                &claim.run_id,
                Op::NodeStarted,
                RunStatus::Running,
                "the run already has a definition snapshot".into(),
            ));
        }
        self.finish_run_write(
            &claim.run_id,
            "definition_recorded",
            json!({ "digest": digest }),
        )?;
        Ok(())
    }

    // ----- execution -------------------------------------------------------------------------

    /// Refuses `op` while work of the current attempt is unsettled: an effect still applying
    /// (its outcome must be stored first) or a submission still validating (its verdict must
    /// be recorded first). Moving on would strand that work on a closed attempt.
    fn require_no_applying_effect(
        &self,
        run_id: &str,
        op: Op,
        status: RunStatus,
    ) -> StoreResult<()> {
        let applying: Option<String> = self
            .conn()
            .prepare_cached(
                "SELECT effect_key FROM effects WHERE run_id = ?1 AND state = 'applying' LIMIT 1",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?;
        match applying {
            Some(key) => Err(invalid(
                run_id,
                op,
                status,
                format!("effect {key} is still applying; settle it first"),
            )),
            None => Ok(()),
        }
    }

    fn require_settled(&self, run_id: &str, op: Op, status: RunStatus) -> StoreResult<()> {
        let unfinished: Option<String> = self
            .conn()
            .prepare_cached(
                "SELECT 'effect ' || effect_key || ' is still applying' FROM effects
                 WHERE run_id = ?1 AND state = 'applying'
                 UNION ALL
                 SELECT 'submission ' || s.submission_id || ' is still validating'
                 FROM interactions i JOIN submissions s ON s.interaction_id = i.interaction_id
                 WHERE i.run_id = ?1 AND i.status = 'validating' AND s.state = 'validating'
                 LIMIT 1",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?;
        match unfinished {
            Some(what) => Err(invalid(
                run_id,
                op,
                status,
                format!("{what}; settle it first"),
            )),
            None => Ok(()),
        }
    }

    fn interrupt_running_attempt(&mut self, run: &RunRow, why: &str) -> StoreResult<bool> {
        let Some(attempt_id) = &run.current_attempt else {
            return Ok(false);
        };
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE attempts SET status = 'interrupted', error = ?2, finished_at = ?3
                 WHERE attempt_id = ?1 AND status = 'running'",
            )?
            .execute(params![attempt_id, why, self.now])?;
        Ok(changed > 0)
    }

    // ----- pause and resume ------------------------------------------------------------------

    /// The run row for `op`. A claim holder's claim is checked first (read only): a stale
    /// writer learns it lost, whatever the run's state.
    fn run_for_claim_holder(&self, run_id: &str, fence: Fence<'_>, op: Op) -> StoreResult<RunRow> {
        if let Fence::Claim(claim) = fence {
            self.require_claim(claim)?;
        }
        self.run_for(run_id, op)
    }

    // ----- terminal operations ---------------------------------------------------------------

    /// Closes the current attempt with `output` and completes the run with `result`.
    pub fn complete(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        output: &Value,
        result: &Value,
    ) -> StoreResult<u64> {
        self.complete_presented(claim, attempt_id, output, result, None)
    }

    /// Closes everything still open on a run that is ending, so no attempt, request or effect
    /// outlives it: open attempts and pending requests are cancelled, validating submissions
    /// rejected, effects never started cancelled, effects applying without a receipt uncertain.
    fn close_open_work(&mut self, run_id: &str, reason: &str) -> StoreResult<CancelSummary> {
        let mut summary = CancelSummary::default();
        let c = self.conn();
        summary.attempts_closed = c
            .prepare_cached(
                "UPDATE attempts SET status = 'cancelled', error = ?2, finished_at = ?3
                 WHERE run_id = ?1 AND status IN ('running', 'waiting')",
            )?
            .execute(params![run_id, reason, self.now])?;
        summary.decisions_cancelled = c
            .prepare_cached(
                "UPDATE decisions SET status = 'cancelled', answered_at = ?2
                 WHERE run_id = ?1 AND status = 'pending'",
            )?
            .execute(params![run_id, self.now])?;
        // Pending timers end with the run (no one answers a timer, so the summary, which
        // counts what was asked of someone, leaves them out).
        c.prepare_cached(
            "UPDATE timers SET status = 'cancelled', fired_at = ?2
             WHERE run_id = ?1 AND status = 'pending'",
        )?
        .execute(params![run_id, self.now])?;
        summary.submissions_rejected = c
            .prepare_cached(
                "UPDATE submissions SET state = 'rejected', error = ?3, settled_at = ?2
                 WHERE state = 'validating' AND interaction_id IN
                       (SELECT interaction_id FROM interactions WHERE run_id = ?1)",
            )?
            .execute(params![run_id, self.now, format!("run ended: {reason}")])?;
        summary.interactions_cancelled = c
            .prepare_cached(
                "UPDATE interactions SET status = 'cancelled', closed_at = ?2
                 WHERE run_id = ?1 AND status IN ('pending', 'validating')",
            )?
            .execute(params![run_id, self.now])?;
        summary.effects_cancelled = c
            .prepare_cached(
                "UPDATE effects SET state = 'cancelled', updated_at = ?2
                 WHERE run_id = ?1 AND state = 'reserved'",
            )?
            .execute(params![run_id, self.now])?;
        summary.effects_uncertain = c
            .prepare_cached(
                "UPDATE effects SET state = 'uncertain', updated_at = ?2,
                        error = 'the run ended while the effect was applying'
                 WHERE run_id = ?1 AND state = 'applying'",
            )?
            .execute(params![run_id, self.now])?;
        Ok(summary)
    }

    /// Ends the run; `presented` is the presentation instructions a `presentationPrompt`
    /// function gave for this end, else the snapshot's `presentation_prompt` goes with the
    /// terminal message.
    fn end_run(
        &mut self,
        run_id: &str,
        run: &RunRow,
        status: RunStatus,
        reason: &str,
        mut data: Value,
        presented: Option<&str>,
    ) -> StoreResult<(u64, CancelSummary)> {
        let summary = self.close_open_work(run_id, reason)?;
        if let Value::Object(map) = &mut data {
            map.insert("closed".into(), json!(summary));
        }
        self.release_claim(run_id)?;
        self.conn()
            .prepare_cached("UPDATE runs SET status = ?2, finished_at = ?3 WHERE run_id = ?1")?
            .execute(params![run_id, status.as_str(), self.now])?;
        // The workflow's presentation instructions (from the run's definition snapshot) go with
        // its terminal message, so that the origin session presents the result with a model turn.
        // A `presentationPrompt` function's text, when the run's child gave one, comes first.
        let presentation: Option<String> = match presented {
            Some(text) => Some(text.to_owned()),
            None => self
                .conn()
                .prepare_cached(
                    "SELECT json_extract(definition, '$.presentation_prompt') FROM runs
                     WHERE run_id = ?1 AND json_valid(definition)",
                )?
                .query_row(params![run_id], |r| r.get(0))
                .optional()?
                .flatten(),
        };
        let mut content = data.clone();
        if let Value::Object(map) = &mut content {
            map.insert("status".into(), json!(status.as_str()));
            map.insert("workflow".into(), json!(run.workflow_name));
            if let Some(presentation) = presentation {
                map.insert("presentation".into(), json!(presentation));
            }
        }
        self.add_message(run_id, run, MessageKind::Terminal, &content)?;
        let event = match status {
            RunStatus::Completed => "completed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
            _ => "failed",
        };
        let revision = self.finish_run_write(run_id, event, data)?;
        Ok((revision, summary))
    }

    // ----- stale runs, losses and review -----------------------------------------------------
}

pub(crate) fn invalid(run_id: &str, op: Op, status: RunStatus, detail: String) -> StoreError {
    StoreError::InvalidTransition {
        run_id: run_id.to_owned(),
        op,
        status,
        detail,
    }
}

/// Node ids follow the graph's identifier rule so they are safe in paths, logs and routes.
fn validate_node_id(node_id: &str) -> StoreResult<()> {
    // Ids joined by `.`: a node of an included workflow carries its mount path.
    let segment_ok = |segment: &str| {
        let mut chars = segment.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let ok = node_id.len() <= 128 && node_id.split('.').all(segment_ok);
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "node id {node_id:?} must match [A-Za-z_][A-Za-z0-9_-]*, or such ids joined by '.' (at most 128 characters)"
        )))
    }
}

impl Lifecycle for WriteTx<'_> {
    fn start_run(&mut self, new: &NewRun) -> StoreResult<String> {
        let run_id = self.new_id("run");
        // A place like an output: an input whose top level reads as a reference is the
        // caller's own data, kept as a literal (`protocol::value`).
        let input = crate::protocol::value::wrap_inline(new.input.clone()).to_string();
        let definition = new.definition.as_ref().map(|d| d.to_string());
        let digest = definition.as_ref().map(|d| sha256_hex(d.as_bytes()));
        self.conn()
            .prepare_cached(
                "INSERT INTO runs (run_id, workflow_name, source_root, source_hash, mounted_sources,
                                   definition, definition_digest, input, input_hash, origin_session,
                                   execution_mode, project_dir, status, revision, created_at,
                                   updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'queued', 0, ?13, ?13)",
            )?
            .execute(params![
                run_id,
                new.workflow_name,
                new.source_root,
                new.source_hash,
                new.mounted_sources.to_string(),
                definition,
                digest,
                input,
                sha256_hex(input.as_bytes()),
                new.origin_session,
                new.execution_mode.as_str(),
                new.project_dir,
                self.now
            ])?;
        self.conn()
            .prepare_cached("INSERT INTO claims (run_id, generation) VALUES (?1, 0)")?
            .execute([&run_id])?;
        self.conn()
            .prepare_cached(
                "INSERT INTO queue (run_id, state, available_at) VALUES (?1, 'ready', ?2)",
            )?
            .execute(params![run_id, self.now])?;
        self.finish_run_write(&run_id, "started", json!({ "workflow": new.workflow_name }))?;
        Ok(run_id)
    }

    fn activate(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Activation> {
        let run = self.run_for(run_id, Op::Activate)?;
        if run.paused {
            return Err(invalid(
                run_id,
                Op::Activate,
                run.status,
                "the run is paused".into(),
            ));
        }
        self.authorize(run_id, Fence::Unclaimed, Op::Activate)?;
        let claim = self.bind_new_claim(run_id, OwnerKind::Host, owner_id)?;
        let (mode, resume) = self.resume_point(run_id, &run)?;
        if let Some(attempt_id) = &run.current_attempt {
            // A waiting attempt continues under the new generation.
            self.conn()
                .prepare_cached(
                    "UPDATE attempts SET status = 'running', generation = ?2
                     WHERE attempt_id = ?1 AND status = 'waiting'",
                )?
                .execute(params![attempt_id, claim.generation as i64])?;
        }
        self.set_status(run_id, RunStatus::Running)?;
        let revision = self.finish_run_write(
            run_id,
            "activated",
            json!({ "generation": claim.generation, "mode": mode.as_str() }),
        )?;
        Ok(Activation {
            claim,
            mode,
            resume,
            revision,
        })
    }

    fn control_claim(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Claim> {
        self.run_for(run_id, Op::ControlClaim)?;
        self.authorize(run_id, Fence::Unclaimed, Op::ControlClaim)?;
        let claim = self.bind_new_claim(run_id, OwnerKind::Control, owner_id)?;
        self.finish_run_write(
            run_id,
            "control_claimed",
            json!({ "generation": claim.generation, "owner": owner_id }),
        )?;
        Ok(claim)
    }

    fn heartbeat(&mut self, claim: &Claim) -> StoreResult<()> {
        self.fence(claim)?;
        self.ops.push("heartbeat");
        Ok(())
    }

    fn record_launch_facts(
        &mut self,
        claim: &Claim,
        definition: &Value,
        mounted_sources: &Value,
    ) -> StoreResult<()> {
        self.record_definition(claim, definition)?;
        self.conn()
            .prepare_cached("UPDATE runs SET mounted_sources = ?2 WHERE run_id = ?1")?
            .execute(params![claim.run_id, mounted_sources.to_string()])?;
        Ok(())
    }

    fn node_started(
        &mut self,
        claim: &Claim,
        node_id: &str,
        deadline_at: Option<UnixMillis>,
    ) -> StoreResult<String> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::NodeStarted)?;
        if let Some(current) = &run.current_attempt {
            if self
                .attempt_row(current)?
                .is_some_and(|a| a.status.is_open())
            {
                return Err(invalid(
                    &claim.run_id,
                    Op::NodeStarted,
                    run.status,
                    format!("attempt {current} is still open"),
                ));
            }
        }
        self.require_within_step_limit(&claim.run_id, node_id)?;
        let attempt_id =
            self.open_attempt(&claim.run_id, node_id, claim.generation, deadline_at)?;
        self.finish_run_write(
            &claim.run_id,
            "node_started",
            json!({ "node": node_id, "attempt": attempt_id }),
        )?;
        Ok(attempt_id)
    }

    fn transition(&mut self, claim: &Claim, req: &TransitionRequest) -> StoreResult<Transitioned> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Transition)?;
        let from =
            self.current_attempt(&claim.run_id, &run, &req.attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::Transition, run.status)?;
        // Before any write: a refusal leaves the attempt running, for the caller to fail.
        self.require_within_step_limit(&claim.run_id, &req.next_node)?;
        if let AttemptOutcome::Succeeded { output } = &req.outcome {
            self.check_slot(&claim.run_id, output)?;
        }
        self.close_attempt(&req.attempt_id, &req.outcome)?;
        let next_attempt_id = self.open_attempt(
            &claim.run_id,
            &req.next_node,
            claim.generation,
            req.next_deadline_at,
        )?;
        // Progress: the run no longer counts as crash-looping.
        self.conn()
            .prepare_cached(
                "UPDATE queue SET crash_count = 0 WHERE run_id = ?1 AND crash_count != 0",
            )?
            .execute([&claim.run_id])?;
        let revision = self.finish_run_write(
            &claim.run_id,
            "transitioned",
            json!({
                "from": from.node_id,
                "outcome": req.outcome.status().as_str(),
                "to": req.next_node,
                "attempt": next_attempt_id,
            }),
        )?;
        Ok(Transitioned {
            next_attempt_id,
            revision,
            pause_requested: run.paused,
        })
    }

    fn park(&mut self, claim: &Claim, available_at: Option<UnixMillis>) -> StoreResult<u64> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Park)?;
        self.require_settled(&claim.run_id, Op::Park, run.status)?;
        self.interrupt_running_attempt(&run, "parked")?;
        self.release_claim(&claim.run_id)?;
        self.set_status(&claim.run_id, RunStatus::Queued)?;
        self.set_available(&claim.run_id, available_at.unwrap_or(self.now))?;
        self.finish_run_write(
            &claim.run_id,
            "parked",
            json!({ "available_at": available_at }),
        )
    }

    fn pause(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64> {
        let run = self.run_for_claim_holder(run_id, fence, Op::Pause)?;
        if run.paused {
            return Err(invalid(
                run_id,
                Op::Pause,
                run.status,
                "the run is already paused".into(),
            ));
        }
        // The first write (a claim holder's renewal) comes after every check: a refused pause
        // writes nothing (which lets a group of commands skip their savepoints).
        self.authorize(run_id, fence, Op::Pause)?;
        self.finish_paused_write(run_id, "paused", &run, true)
    }

    fn resume(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64> {
        let run = self.run_for_claim_holder(run_id, fence, Op::Resume)?;
        if !run.paused {
            return Err(invalid(
                run_id,
                Op::Resume,
                run.status,
                "the run is not paused".into(),
            ));
        }
        self.authorize(run_id, fence, Op::Resume)?;
        if run.status == RunStatus::Queued {
            self.set_available(run_id, self.now)?;
        }
        self.finish_paused_write(run_id, "resumed", &run, false)
    }

    fn cancel(
        &mut self,
        run_id: &str,
        fence: Fence<'_>,
        reason: &str,
    ) -> StoreResult<CancelSummary> {
        // A claim holder is fenced before anything else: a stale writer learns it lost.
        if matches!(fence, Fence::Claim(_)) {
            self.authorize(run_id, fence, Op::Cancel)?;
        }
        let run = self.run_for(run_id, Op::Cancel)?;
        self.authorize(run_id, fence, Op::Cancel)?;
        self.conn()
            .prepare_cached("UPDATE runs SET error = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, reason])?;
        let (_, summary) = self.end_run(
            run_id,
            &run,
            RunStatus::Cancelled,
            reason,
            json!({ "reason": reason }),
            None,
        )?;
        Ok(summary)
    }

    fn detach(&mut self, run_id: &str) -> StoreResult<bool> {
        let run = self.run_for(run_id, Op::Detach)?;
        let mode: String = self
            .conn()
            .prepare_cached("SELECT execution_mode FROM runs WHERE run_id = ?1")?
            .query_row([run_id], |r| r.get(0))?;
        if mode == ExecutionMode::Detached.as_str() {
            return Ok(false);
        }
        self.conn()
            .prepare_cached("UPDATE runs SET execution_mode = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, ExecutionMode::Detached.as_str()])?;
        // Its session no longer presents its open step: the step's time stops until its
        // bridge holds it.
        self.release_run_interactions(run_id)?;
        self.finish_paused_write(run_id, "detached", &run, run.paused)?;
        Ok(true)
    }

    fn fail(
        &mut self,
        claim: &Claim,
        attempt_id: Option<&str>,
        outcome: &AttemptOutcome,
        error: &str,
    ) -> StoreResult<u64> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Fail)?;
        if let Some(attempt_id) = attempt_id {
            self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
            self.close_attempt(attempt_id, outcome)?;
        } else {
            self.interrupt_running_attempt(&run, error)?;
        }
        self.conn()
            .prepare_cached("UPDATE runs SET error = ?2 WHERE run_id = ?1")?
            .execute(params![claim.run_id, error])?;
        let status = if matches!(outcome, AttemptOutcome::TimedOut) {
            RunStatus::TimedOut
        } else {
            RunStatus::Failed
        };
        let (revision, _) = self.end_run(
            &claim.run_id,
            &run,
            status,
            error,
            json!({ "error": error }),
            None,
        )?;
        Ok(revision)
    }

    fn complete_presented(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        output: &Value,
        result: &Value,
        presentation: Option<&str>,
    ) -> StoreResult<u64> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Complete)?;
        self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::Complete, run.status)?;
        self.check_slot(&claim.run_id, output)?;
        self.check_slot(&claim.run_id, result)?;
        self.close_attempt(
            attempt_id,
            &AttemptOutcome::Succeeded {
                output: output.clone(),
            },
        )?;
        self.conn()
            .prepare_cached("UPDATE runs SET result = ?2 WHERE run_id = ?1")?
            .execute(params![claim.run_id, result.to_string()])?;
        let (revision, _) = self.end_run(
            &claim.run_id,
            &run,
            RunStatus::Completed,
            "completed",
            json!({ "result": result }),
            presentation,
        )?;
        Ok(revision)
    }
}
