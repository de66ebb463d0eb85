//! Lifecycle operations: each one is a single atomic change of run, queue, attempt, decision,
//! interaction, effect, claim, event and projection (plan Part 2).

use rusqlite::{params, OptionalExtension as _};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    parse_enum, parse_status, Answerer, AttemptOutcome, AttemptStatus, ChildMode, Claim,
    DecisionKind, ExecutionMode, Fence, InteractionKind, MessageKind, Op, OwnerKind, RetryContract,
    RunStatus, StoreError, StoreResult, WriteTx,
};
use crate::clock::UnixMillis;
use crate::ids::{new_id, sha256_hex};

/// Everything needed to create a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewRun {
    pub workflow_name: String,
    /// Root source identity (for example the canonical path of the workflow file).
    pub source_root: String,
    /// Content hash of the root source.
    pub source_hash: String,
    /// Mount name to source hash, as resolved at start.
    pub mounted_sources: Value,
    /// Data-only graph snapshot, when already known at start.
    pub definition: Option<Value>,
    pub input: Value,
    pub origin_session: Option<String>,
    pub execution_mode: ExecutionMode,
    pub project_dir: String,
}

/// Where the child of a fresh activation picks up, derived from durable state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "resume", rename_all = "snake_case")]
pub enum Resume {
    /// No open attempt: start the run's current node (or the graph's start node when none).
    Fresh { node_id: Option<String> },
    /// A waiting attempt was answered (checkpoint or human decision); continue it.
    Continue { node_id: String, attempt_id: String },
    /// A submission awaits validation by the workflow's `validate` (child mode `validate`).
    Validate {
        node_id: String,
        attempt_id: String,
        submission_id: String,
    },
    /// The interaction's deadline passed: record the attempt as timed out and route.
    InteractionExpired { node_id: String, attempt_id: String },
    /// A submission was accepted, but the child that accepted it went away before it
    /// proposed the transition: continue the attempt with the accepted submission's payload
    /// as the node's output (child mode `run`).
    Accepted {
        node_id: String,
        attempt_id: String,
        submission_id: String,
    },
}

/// The result of activating a queued run.
#[derive(Debug, Clone)]
pub struct Activation {
    pub claim: Claim,
    pub mode: ChildMode,
    pub resume: Resume,
    pub revision: u64,
}

/// A child's proposal to close the current attempt and start the next node.
#[derive(Debug, Clone)]
pub struct TransitionRequest {
    pub attempt_id: String,
    pub outcome: AttemptOutcome,
    pub next_node: String,
    pub next_deadline_at: Option<UnixMillis>,
}

/// What a committed transition produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transitioned {
    pub next_attempt_id: String,
    pub revision: u64,
    /// A pause was requested: the owner should park the run at this boundary.
    pub pause_requested: bool,
}

/// What a cancellation closed, all in its one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CancelSummary {
    pub attempts_closed: usize,
    pub decisions_cancelled: usize,
    pub interactions_cancelled: usize,
    pub submissions_rejected: usize,
    pub effects_cancelled: usize,
    pub effects_uncertain: usize,
}

/// One run that recovery or a child loss put back (or stopped for review).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoveredRun {
    pub run_id: String,
    pub status: RunStatus,
    pub reason: String,
}

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

/// A pending request that its node's deadline can expire (see `WriteTx::expire_request`).
struct ExpiringRequest {
    /// The request's noun, in errors and as the key of the event's data.
    what: &'static str,
    op: Op,
    /// `(run_id, status, deadline_at)` of the request `?1`.
    lookup: &'static str,
    /// Closes the request `?1` as of `?2`.
    close: &'static str,
    event: &'static str,
    /// `(id, run_id)` of every pending request of this kind whose deadline is at or before
    /// `?1`, on a waiting run that no live control claim holds (an operator mid-cancel has
    /// it), earliest deadline first.
    due: &'static str,
}

/// A checkpoint or human decision: its deadline is its attempt's; nobody answered it in time,
/// so it is `cancelled`.
const EXPIRING_DECISION: ExpiringRequest = ExpiringRequest {
    what: "decision",
    op: Op::ExpireDecision,
    lookup: "SELECT d.run_id, d.status, a.deadline_at
             FROM decisions d JOIN attempts a ON a.attempt_id = d.attempt_id
             WHERE d.decision_id = ?1",
    close: "UPDATE decisions SET status = 'cancelled', answered_at = ?2 WHERE decision_id = ?1",
    event: "decision_expired",
    due: "SELECT d.decision_id, d.run_id FROM decisions d
          JOIN attempts a ON a.attempt_id = d.attempt_id
          JOIN runs r ON r.run_id = d.run_id JOIN claims c ON c.run_id = d.run_id
          WHERE d.status = 'pending' AND a.deadline_at <= ?1 AND r.status = 'waiting'
            AND NOT (c.owner_kind IS NOT NULL AND c.expires_at > ?1)
          ORDER BY a.deadline_at",
};

/// An interactive request (agent, assistant message).
const EXPIRING_INTERACTION: ExpiringRequest = ExpiringRequest {
    what: "interaction",
    op: Op::ExpireInteraction,
    lookup: "SELECT run_id, status, deadline_at FROM interactions WHERE interaction_id = ?1",
    close: "UPDATE interactions SET status = 'expired', closed_at = ?2 WHERE interaction_id = ?1",
    event: "interaction_expired",
    due: "SELECT i.interaction_id, i.run_id FROM interactions i
          JOIN runs r ON r.run_id = i.run_id JOIN claims c ON c.run_id = i.run_id
          WHERE i.status = 'pending' AND i.deadline_at <= ?1 AND r.status = 'waiting'
            AND NOT (c.owner_kind IS NOT NULL AND c.expires_at > ?1)
          ORDER BY i.deadline_at",
};

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
        let attempt_id = new_id("att");
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

    /// Creates a queued run. Returns its id.
    pub fn start_run(&mut self, new: &NewRun) -> StoreResult<String> {
        let run_id = new_id("run");
        let input = new.input.to_string();
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

    /// Claims a queued run for the host `owner_id`: generation + 1, a new token, status
    /// running. A waiting attempt that was answered, submitted or expired is reopened.
    pub fn activate(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Activation> {
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
        let (mode, resume) = self.resume_point(&run)?;
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

    fn resume_point(&self, run: &RunRow) -> StoreResult<(ChildMode, Resume)> {
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
        match interaction {
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
            _ if self.latest_decision_status(&attempt_id)?.as_deref() == Some("cancelled") => Ok((
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
        }
    }

    fn latest_decision_status(&self, attempt_id: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT status FROM decisions WHERE attempt_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([attempt_id], |r| r.get(0))
            .optional()?)
    }

    /// Renews the claim without any domain change (the host's backup timer while a child
    /// computes for a long time). Writes no event and does not bump the revision.
    pub fn heartbeat(&mut self, claim: &Claim) -> StoreResult<()> {
        self.fence(claim)?;
        self.ops.push("heartbeat");
        Ok(())
    }

    /// Stores the graph snapshot and the resolved mounted sources at the first activation
    /// (the host validates the snapshot first).
    pub fn record_launch_facts(
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

    /// Opens the first attempt of `node_id` after an activation without an open attempt.
    pub fn node_started(
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
        let attempt_id =
            self.open_attempt(&claim.run_id, node_id, claim.generation, deadline_at)?;
        self.finish_run_write(
            &claim.run_id,
            "node_started",
            json!({ "node": node_id, "attempt": attempt_id }),
        )?;
        Ok(attempt_id)
    }

    /// Closes the current attempt with its outcome and opens the next node's attempt.
    pub fn transition(
        &mut self,
        claim: &Claim,
        req: &TransitionRequest,
    ) -> StoreResult<Transitioned> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Transition)?;
        let from =
            self.current_attempt(&claim.run_id, &run, &req.attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::Transition, run.status)?;
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

    /// Releases the run at a durable boundary; it becomes ready again at `available_at` (now
    /// when `None`). An attempt still running is interrupted and reruns on the next activation.
    pub fn park(&mut self, claim: &Claim, available_at: Option<UnixMillis>) -> StoreResult<u64> {
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

    /// Parks the current attempt on an ordinary checkpoint or a protected human decision and
    /// releases the claim. Returns the decision id.
    pub fn wait_for_decision(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: DecisionKind,
        request: &Value,
    ) -> StoreResult<String> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Wait)?;
        let attempt =
            self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::Wait, run.status)?;
        let decision_id = new_id("dec");
        self.conn()
            .prepare_cached(
                "INSERT INTO decisions (decision_id, run_id, attempt_id, node_id, kind, request,
                                        status, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7)",
            )?
            .execute(params![
                decision_id,
                claim.run_id,
                attempt_id,
                attempt.node_id,
                kind.as_str(),
                request.to_string(),
                self.now
            ])?;
        self.suspend_attempt(&claim.run_id, attempt_id)?;
        self.finish_run_write(
            &claim.run_id,
            "waiting",
            json!({ "decision": decision_id, "kind": kind.as_str() }),
        )?;
        Ok(decision_id)
    }

    /// attempt -> waiting, claim released, run -> waiting.
    fn suspend_attempt(&mut self, run_id: &str, attempt_id: &str) -> StoreResult<()> {
        self.conn()
            .prepare_cached("UPDATE attempts SET status = 'waiting' WHERE attempt_id = ?1")?
            .execute([attempt_id])?;
        self.release_claim(run_id)?;
        self.set_status(run_id, RunStatus::Waiting)
    }

    /// Records a durable interactive request bound to the run's origin session, parks the
    /// attempt and releases the claim. Returns the interaction id.
    pub fn request_interaction(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: InteractionKind,
        request: &Value,
        deadline_at: Option<UnixMillis>,
    ) -> StoreResult<String> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::RequestInteraction)?;
        let attempt =
            self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::RequestInteraction, run.status)?;
        let interaction_id = new_id("int");
        self.conn()
            .prepare_cached(
                "INSERT INTO interactions (interaction_id, run_id, attempt_id, node_id,
                                           origin_session, kind, request, deadline_at, status,
                                           created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9)",
            )?
            .execute(params![
                interaction_id,
                claim.run_id,
                attempt_id,
                attempt.node_id,
                run.origin_session,
                kind.as_str(),
                request.to_string(),
                deadline_at,
                self.now
            ])?;
        self.suspend_attempt(&claim.run_id, attempt_id)?;
        self.finish_run_write(
            &claim.run_id,
            "interaction_requested",
            json!({ "interaction": interaction_id, "kind": kind.as_str() }),
        )?;
        Ok(interaction_id)
    }

    /// Records a provisional submission (`validating`) for a pending interaction and queues
    /// the run for a validation child. A repeat with the same idempotency key and payload
    /// returns the original submission id; with another payload it is a conflict.
    pub fn submit(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
        idempotency_key: Option<&str>,
    ) -> StoreResult<String> {
        let (run_id, interaction_attempt, status, deadline): (String, String, String, Option<i64>) =
            self.conn()
                .prepare_cached(
                    "SELECT run_id, attempt_id, status, deadline_at FROM interactions
                 WHERE interaction_id = ?1",
                )?
                .query_row([interaction_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()?
                .ok_or_else(|| StoreError::NotFound {
                    what: "interaction",
                    id: interaction_id.to_owned(),
                })?;
        let payload_text = payload.to_string();
        if let Some(key) = idempotency_key {
            let prior: Option<(String, String)> = self
                .conn()
                .prepare_cached(
                    "SELECT submission_id, payload FROM submissions
                     WHERE interaction_id = ?1 AND idempotency_key = ?2",
                )?
                .query_row(params![interaction_id, key], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((submission_id, prior_payload)) = prior {
                if prior_payload == payload_text {
                    return Ok(submission_id);
                }
                return Err(StoreError::IdempotencyConflict {
                    key: key.to_owned(),
                });
            }
        }
        let run = self.run_row(&run_id)?;
        if attempt_id != interaction_attempt {
            return Err(StoreError::StaleAttempt {
                run_id,
                presented: attempt_id.to_owned(),
                current: interaction_attempt,
            });
        }
        if !Op::Submit.allowed(run.status) || status != "pending" {
            return Err(invalid(
                &run_id,
                Op::Submit,
                run.status,
                format!("interaction {interaction_id} is {status}"),
            ));
        }
        // A request past its deadline is about to expire (the host's deadline work has not
        // run yet): a submission now would be judged after the deadline, or dropped by it.
        if let Some(deadline_at) = deadline.filter(|d| *d <= self.now) {
            return Err(StoreError::DeadlinePassed {
                run_id,
                attempt_id: interaction_attempt,
                deadline_at,
            });
        }
        self.authorize(&run_id, Fence::Unclaimed, Op::Submit)?;
        let submission_id = new_id("sub");
        self.conn()
            .prepare_cached(
                "INSERT INTO submissions (submission_id, interaction_id, payload, state,
                                          idempotency_key, created_at)
                 VALUES (?1, ?2, ?3, 'validating', ?4, ?5)",
            )?
            .execute(params![
                submission_id,
                interaction_id,
                payload_text,
                idempotency_key,
                self.now
            ])?;
        self.conn()
            .prepare_cached(
                "UPDATE interactions SET status = 'validating' WHERE interaction_id = ?1",
            )?
            .execute([interaction_id])?;
        self.set_status(&run_id, RunStatus::Queued)?;
        self.set_available(&run_id, self.now)?;
        self.finish_run_write(
            &run_id,
            "submitted",
            json!({ "interaction": interaction_id, "submission": submission_id }),
        )?;
        Ok(submission_id)
    }

    /// A durable progress update from the agent working on a pending interactive request
    /// (the Pi tool's `update`): kept as a `progress` event of the run, like a worker's, and
    /// does not complete the request. Refuses a stale attempt and a request that is not
    /// pending.
    pub fn interaction_progress(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        message: &str,
        data: &Value,
    ) -> StoreResult<()> {
        let (run_id, interaction_attempt, status): (String, String, String) = self
            .conn()
            .prepare_cached(
                "SELECT run_id, attempt_id, status FROM interactions WHERE interaction_id = ?1",
            )?
            .query_row([interaction_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "interaction",
                id: interaction_id.to_owned(),
            })?;
        let run = self.run_row(&run_id)?;
        if attempt_id != interaction_attempt {
            return Err(StoreError::StaleAttempt {
                run_id,
                presented: attempt_id.to_owned(),
                current: interaction_attempt,
            });
        }
        if !Op::Submit.allowed(run.status) || status != "pending" {
            return Err(invalid(
                &run_id,
                Op::Submit,
                run.status,
                format!("interaction {interaction_id} is {status}"),
            ));
        }
        self.authorize(&run_id, Fence::Unclaimed, Op::Submit)?;
        self.finish_run_write(
            &run_id,
            "progress",
            json!({ "message": message, "data": data, "interaction": interaction_id }),
        )?;
        Ok(())
    }

    /// The origin session gave up on a pending interactive request (the model's turns
    /// settled without a submission, reminders included): the attempt fails with `reason`
    /// and the run routes `$result.outcome = failed` like any failed attempt. With `next`
    /// (the node the run's graph routes to, computed by the caller, with that node's
    /// deadline) the run moves there under a control claim and parks, so a fresh child
    /// starts it; without, the run fails. Refuses a stale attempt, a request that is not
    /// pending (a submission being judged goes first) and one past its deadline (it
    /// expires instead).
    pub fn fail_interaction(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        reason: &str,
        next: Option<(&str, Option<UnixMillis>)>,
        owner_id: &str,
    ) -> StoreResult<()> {
        let (run_id, interaction_attempt, status, deadline): (String, String, String, Option<i64>) =
            self.conn()
                .prepare_cached(
                    "SELECT run_id, attempt_id, status, deadline_at FROM interactions
                     WHERE interaction_id = ?1",
                )?
                .query_row([interaction_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()?
                .ok_or_else(|| StoreError::NotFound {
                    what: "interaction",
                    id: interaction_id.to_owned(),
                })?;
        let run = self.run_row(&run_id)?;
        if attempt_id != interaction_attempt {
            return Err(StoreError::StaleAttempt {
                run_id,
                presented: attempt_id.to_owned(),
                current: interaction_attempt,
            });
        }
        // Failing is the alternative to a submission: the same gate.
        if !Op::Submit.allowed(run.status) || status != "pending" {
            return Err(invalid(
                &run_id,
                Op::Submit,
                run.status,
                format!("interaction {interaction_id} is {status}"),
            ));
        }
        if let Some(deadline_at) = deadline.filter(|d| *d <= self.now) {
            return Err(StoreError::DeadlinePassed {
                run_id,
                attempt_id: interaction_attempt,
                deadline_at,
            });
        }
        let claim = self.control_claim(&run_id, owner_id)?;
        self.conn()
            .prepare_cached(
                "UPDATE interactions SET status = 'cancelled', closed_at = ?2
                 WHERE interaction_id = ?1",
            )?
            .execute(params![interaction_id, self.now])?;
        // The waiting attempt runs again under the control claim only to be closed.
        self.conn()
            .prepare_cached(
                "UPDATE attempts SET status = 'running', generation = ?2
                 WHERE attempt_id = ?1 AND status = 'waiting'",
            )?
            .execute(params![attempt_id, claim.generation as i64])?;
        self.set_status(&run_id, RunStatus::Running)?;
        self.finish_run_write(
            &run_id,
            "interaction_failed",
            json!({ "interaction": interaction_id, "reason": reason }),
        )?;
        let outcome = AttemptOutcome::Failed {
            error: reason.to_owned(),
        };
        match next {
            Some((next_node, next_deadline_at)) => {
                self.transition(
                    &claim,
                    &TransitionRequest {
                        attempt_id: attempt_id.to_owned(),
                        outcome,
                        next_node: next_node.to_owned(),
                        next_deadline_at,
                    },
                )?;
                self.park(&claim, None)?;
            }
            None => {
                self.fail(&claim, Some(attempt_id), &outcome, reason)?;
            }
        }
        Ok(())
    }

    /// Settles a validating submission with the validation child's verdict. Accepting settles
    /// the interaction and keeps the attempt running under the claim (the child goes on to
    /// propose the transition); rejecting keeps the request pending, parks the attempt and
    /// releases the claim.
    pub fn settle(
        &mut self,
        claim: &Claim,
        submission_id: &str,
        verdict: Result<(), String>,
    ) -> StoreResult<()> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Settle)?;
        let (interaction_id, state): (String, String) = self
            .conn()
            .prepare_cached(
                "SELECT s.interaction_id, s.state FROM submissions s
                 JOIN interactions i ON i.interaction_id = s.interaction_id
                 WHERE s.submission_id = ?1 AND i.run_id = ?2",
            )?
            .query_row(params![submission_id, claim.run_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "submission",
                id: submission_id.to_owned(),
            })?;
        if state != "validating" {
            return Err(invalid(
                &claim.run_id,
                Op::Settle,
                run.status,
                format!("submission {submission_id} is already {state}"),
            ));
        }
        let accepted = verdict.is_ok();
        if !accepted {
            // A rejection parks the attempt: no effect may be left applying behind it.
            self.require_no_applying_effect(&claim.run_id, Op::Settle, run.status)?;
        }
        let (sub_state, int_state) = if accepted {
            ("accepted", "settled")
        } else {
            ("rejected", "pending")
        };
        self.conn()
            .prepare_cached(
                "UPDATE submissions SET state = ?2, error = ?3, settled_at = ?4 WHERE submission_id = ?1",
            )?
            .execute(params![submission_id, sub_state, verdict.as_ref().err(), self.now])?;
        self.conn()
            .prepare_cached(
                "UPDATE interactions SET status = ?2,
                        closed_at = CASE WHEN ?2 = 'settled' THEN ?3 ELSE NULL END
                 WHERE interaction_id = ?1",
            )?
            .execute(params![interaction_id, int_state, self.now])?;
        if accepted {
            if let Some(attempt_id) = &run.current_attempt {
                self.clear_deadline_answered_in_time(attempt_id)?;
            }
        } else {
            let attempt_id = run.current_attempt.clone().unwrap_or_default();
            self.suspend_attempt(&claim.run_id, &attempt_id)?;
        }
        self.finish_run_write(
            &claim.run_id,
            if accepted {
                "submission_accepted"
            } else {
                "submission_rejected"
            },
            json!({ "submission": submission_id, "error": verdict.err() }),
        )?;
        Ok(())
    }

    /// Refuses with [`StoreError::NotFound`] unless decision `decision_id` belongs to run
    /// `run_id`. A client names the run it answers in the request's envelope, and the host
    /// checks `expected_revision` against, reports the revision of and publishes the events of
    /// that run: an answer applied to another run's decision would bypass all three.
    pub fn require_decision_of(&self, run_id: &str, decision_id: &str) -> StoreResult<()> {
        let found: bool = self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM decisions WHERE decision_id = ?1 AND run_id = ?2)",
            )?
            .query_row(params![decision_id, run_id], |r| r.get(0))?;
        if !found {
            return Err(StoreError::NotFound {
                what: "decision",
                id: format!("{decision_id} of run {run_id}"),
            });
        }
        Ok(())
    }

    /// Refuses with [`StoreError::NotFound`] unless interaction `interaction_id` belongs to run
    /// `run_id` and node `node_id` (see [`WriteTx::require_decision_of`] for why).
    pub fn require_interaction_of(
        &self,
        run_id: &str,
        node_id: &str,
        interaction_id: &str,
    ) -> StoreResult<()> {
        let found: bool = self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM interactions
                                WHERE interaction_id = ?1 AND run_id = ?2 AND node_id = ?3)",
            )?
            .query_row(params![interaction_id, run_id, node_id], |r| r.get(0))?;
        if !found {
            return Err(StoreError::NotFound {
                what: "interaction",
                id: format!("{interaction_id} of run {run_id} at node {node_id}"),
            });
        }
        Ok(())
    }

    /// Answers a pending decision and queues the run to continue. A protected human decision
    /// refuses the model-facing path.
    pub fn answer_decision(
        &mut self,
        decision_id: &str,
        answer: &Value,
        answered_by: Answerer,
    ) -> StoreResult<()> {
        let (run_id, kind, status, attempt_id, deadline): (
            String,
            String,
            String,
            String,
            Option<i64>,
        ) = self
            .conn()
            .prepare_cached(
                "SELECT d.run_id, d.kind, d.status, d.attempt_id, a.deadline_at
                 FROM decisions d JOIN attempts a ON a.attempt_id = d.attempt_id
                 WHERE d.decision_id = ?1",
            )?
            .query_row([decision_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "decision",
                id: decision_id.to_owned(),
            })?;
        let kind = parse_enum(&kind, DecisionKind::parse, "decision kind")?;
        let run = self.run_row(&run_id)?;
        if kind == DecisionKind::HumanDecision && answered_by == Answerer::Model {
            return Err(StoreError::Forbidden(format!(
                "decision {decision_id} is a protected human decision; only a person may answer it"
            )));
        }
        if !Op::AnswerDecision.allowed(run.status) || status != "pending" {
            return Err(invalid(
                &run_id,
                Op::AnswerDecision,
                run.status,
                format!("decision {decision_id} is {status}"),
            ));
        }
        // The node's deadline bounds the wait for the answer: a late answer is refused (the
        // host expires the decision and the attempt times out), never taken and then dropped.
        if let Some(deadline_at) = deadline.filter(|d| *d <= self.now) {
            return Err(StoreError::DeadlinePassed {
                run_id,
                attempt_id,
                deadline_at,
            });
        }
        self.authorize(&run_id, Fence::Unclaimed, Op::AnswerDecision)?;
        self.clear_deadline_answered_in_time(&attempt_id)?;
        self.conn()
            .prepare_cached(
                "UPDATE decisions SET status = 'answered', answer = ?2, answered_by = ?3,
                        answered_at = ?4 WHERE decision_id = ?1",
            )?
            .execute(params![
                decision_id,
                answer.to_string(),
                answered_by.as_str(),
                self.now
            ])?;
        self.set_status(&run_id, RunStatus::Queued)?;
        self.set_available(&run_id, self.now)?;
        self.finish_run_write(
            &run_id,
            "decision_answered",
            json!({ "decision": decision_id, "by": answered_by.as_str() }),
        )?;
        Ok(())
    }

    /// The attempt's request was answered (a decision) or its result accepted (a submission)
    /// before the node's deadline: what is left is the child carrying that answer into its
    /// transition, which the deadline must not undo, however long the child takes to start
    /// (a paused run, a full child cap, a lost child continued again). So the attempt has no
    /// deadline from now on.
    fn clear_deadline_answered_in_time(&mut self, attempt_id: &str) -> StoreResult<()> {
        self.conn()
            .prepare_cached(
                "UPDATE attempts SET deadline_at = NULL
                 WHERE attempt_id = ?1 AND deadline_at IS NOT NULL",
            )?
            .execute([attempt_id])?;
        Ok(())
    }

    /// Answers a due human decision with the response its request saved for a timeout
    /// (`extra.onTimeout.response`, the workflow's `onTimeout`), if it has one: the answer is
    /// `{choice, text, provenance: "timeout"}`, `answered_by` is empty (nobody answered), and
    /// the attempt's deadline is cleared so the run continues with it like with any answer.
    /// Returns whether it did.
    fn answer_with_timeout_response(&mut self, decision_id: &str) -> StoreResult<bool> {
        let (kind, request, attempt_id): (String, Option<String>, String) = self
            .conn()
            .prepare_cached(
                "SELECT kind, request, attempt_id FROM decisions WHERE decision_id = ?1",
            )?
            .query_row([decision_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        if parse_enum(&kind, DecisionKind::parse, "decision kind")? != DecisionKind::HumanDecision {
            return Ok(false);
        }
        let request: Value = match request {
            Some(text) => serde_json::from_str(&text)?,
            None => return Ok(false),
        };
        let Some(choice) = request
            .pointer("/extra/onTimeout/response/choice")
            .and_then(Value::as_str)
        else {
            return Ok(false);
        };
        let text = request
            .pointer("/extra/onTimeout/response/text")
            .cloned()
            .unwrap_or(Value::Null);
        let answer = json!({ "choice": choice, "text": text, "provenance": "timeout" });
        self.clear_deadline_answered_in_time(&attempt_id)?;
        self.conn()
            .prepare_cached(
                "UPDATE decisions SET status = 'answered', answer = ?2, answered_by = NULL,
                        answered_at = ?3 WHERE decision_id = ?1",
            )?
            .execute(params![decision_id, answer.to_string(), self.now])?;
        Ok(true)
    }

    /// Closes a pending decision whose attempt's deadline (the node's `timeout_ms`) has passed
    /// and queues the run, so a child records the same attempt as timed out and routes it, as
    /// for an expired interaction. The decision is `cancelled`: nobody answered it in time.
    pub fn expire_decision(&mut self, decision_id: &str) -> StoreResult<()> {
        self.expire_request(&EXPIRING_DECISION, decision_id)
    }

    /// Closes a pending interaction whose deadline has passed and queues the run so a child
    /// records the same attempt as timed out and routes it.
    pub fn expire_interaction(&mut self, interaction_id: &str) -> StoreResult<()> {
        self.expire_request(&EXPIRING_INTERACTION, interaction_id)
    }

    /// Expires every pending interaction whose deadline has passed. Returns their ids, each
    /// with its run.
    pub fn expire_due_interactions(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.expire_due(&EXPIRING_INTERACTION)
    }

    /// Expires every pending decision whose attempt's deadline has passed (see
    /// [`WriteTx::expire_decision`]). Returns their ids, each with its run.
    pub fn expire_due_decisions(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.expire_due(&EXPIRING_DECISION)
    }

    /// Expires every due request of `kind`, each in its own savepoint.
    fn expire_due(&mut self, kind: &ExpiringRequest) -> StoreResult<Vec<(String, String)>> {
        let due: Vec<(String, String)> = self
            .conn()
            .prepare_cached(kind.due)?
            .query_map([self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        for (id, _) in &due {
            self.savepoint(|w| w.expire_request(kind, id))?;
        }
        Ok(due)
    }

    /// Closes the pending request `id` of `kind` whose deadline has passed, queues its run and
    /// records the event; refuses a request that is not pending, not yet due, or on a run
    /// that is not waiting.
    fn expire_request(&mut self, kind: &ExpiringRequest, id: &str) -> StoreResult<()> {
        let (run_id, status, deadline): (String, String, Option<i64>) = self
            .conn()
            .prepare_cached(kind.lookup)?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: kind.what,
                id: id.to_owned(),
            })?;
        let run = self.run_row(&run_id)?;
        let due = deadline.is_some_and(|d| d <= self.now);
        if !kind.op.allowed(run.status) || status != "pending" || !due {
            return Err(invalid(
                &run_id,
                kind.op,
                run.status,
                format!("{} {id} is {status} with deadline {deadline:?}", kind.what),
            ));
        }
        self.authorize(&run_id, Fence::Unclaimed, kind.op)?;
        if kind.op == Op::ExpireDecision && self.answer_with_timeout_response(id)? {
            self.set_status(&run_id, RunStatus::Queued)?;
            self.set_available(&run_id, self.now)?;
            self.finish_run_write(
                &run_id,
                "decision_answered",
                json!({ "decision": id, "by": "timeout" }),
            )?;
            return Ok(());
        }
        self.conn()
            .prepare_cached(kind.close)?
            .execute(params![id, self.now])?;
        self.set_status(&run_id, RunStatus::Queued)?;
        self.set_available(&run_id, self.now)?;
        let mut data = serde_json::Map::new();
        data.insert(kind.what.to_owned(), Value::from(id));
        self.finish_run_write(&run_id, kind.event, Value::Object(data))?;
        Ok(())
    }

    /// Adds a notify-node message for the origin session in the same transaction as the
    /// source fact. Detached runs without an origin session record the event only.
    ///
    /// The message's id is derived from the run, the node and the visit (how many attempts of
    /// the node have finished before): a node that runs again because its child was lost after
    /// this commit (its transition never committed) adds nothing new, while a loop that enters
    /// the node again is a new visit with its own message.
    pub fn notify(&mut self, claim: &Claim, content: &Value) -> StoreResult<Option<String>> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::NodeStarted)?;
        let node = run.current_node.clone().unwrap_or_default();
        let visit: i64 = self
            .conn()
            .prepare_cached(
                "SELECT COUNT(*) FROM attempts
                 WHERE run_id = ?1 AND node_id = ?2
                   AND status IN ('succeeded', 'failed', 'timed_out', 'cancelled')",
            )?
            .query_row(params![claim.run_id, node], |r| r.get(0))?;
        let key = format!("{}\0notify\0{node}\0{visit}", claim.run_id);
        let id = format!("msg-{}", &crate::ids::sha256_hex(key.as_bytes())[..28]);
        let message_id =
            self.add_message_once(&claim.run_id, &run, MessageKind::Notify, content, &id)?;
        self.finish_run_write(&claim.run_id, "notified", json!({ "message": message_id }))?;
        Ok(message_id)
    }

    fn add_message(
        &mut self,
        run_id: &str,
        run: &RunRow,
        kind: MessageKind,
        content: &Value,
    ) -> StoreResult<Option<String>> {
        self.add_message_once(run_id, run, kind, content, &new_id("msg"))
    }

    /// Adds message `message_id` for the run's origin session unless it exists already.
    fn add_message_once(
        &mut self,
        run_id: &str,
        run: &RunRow,
        kind: MessageKind,
        content: &Value,
        message_id: &str,
    ) -> StoreResult<Option<String>> {
        let Some(session) = &run.origin_session else {
            return Ok(None);
        };
        self.conn()
            .prepare_cached(
                "INSERT INTO workflow_messages (message_id, run_id, origin_session, kind, content,
                                                created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (message_id) DO NOTHING",
            )?
            .execute(params![
                message_id,
                run_id,
                session,
                kind.as_str(),
                content.to_string(),
                self.now
            ])?;
        Ok(Some(message_id.to_owned()))
    }

    // ----- pause and resume ------------------------------------------------------------------

    /// Sets the paused flag. A queued or waiting run is held back from activation; a running
    /// run keeps going until its next boundary, where the owner parks it.
    pub fn pause(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64> {
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

    /// Clears the paused flag; a queued run becomes ready now.
    pub fn resume(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64> {
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
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Complete)?;
        self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::Complete, run.status)?;
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
        )?;
        Ok(revision)
    }

    /// Ends the run `failed` (or `timed_out` when the outcome is a timeout), closing the
    /// current attempt with `outcome` when one is named.
    pub fn fail(
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
        )?;
        Ok(revision)
    }

    /// Cancels the run in one commit: closes the open attempt, cancels pending decisions and
    /// interactions (rejecting validating submissions), cancels effects that have not started
    /// and marks `applying` effects `uncertain`, releases the claim.
    ///
    /// A run held by a live claim can only be cancelled by that claim's holder; an expired run
    /// is cancelled through [`WriteTx::control_claim`].
    pub fn cancel(
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
        )?;
        Ok(summary)
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

    fn end_run(
        &mut self,
        run_id: &str,
        run: &RunRow,
        status: RunStatus,
        reason: &str,
        mut data: Value,
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
        let presentation: Option<String> = self
            .conn()
            .prepare_cached(
                "SELECT json_extract(definition, '$.presentation_prompt') FROM runs
                 WHERE run_id = ?1 AND json_valid(definition)",
            )?
            .query_row(params![run_id], |r| r.get(0))
            .optional()?
            .flatten();
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

    /// Takes an atomic control claim on a run whose lease is expired or absent: refuses live
    /// claims and terminal rows, bumps the generation and binds a new token before anything
    /// else changes (plan Part 3).
    pub fn control_claim(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Claim> {
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

    /// The owner reports that the run's child went away without finishing (crash, kill,
    /// handshake timeout). The run is requeued, or stopped for review after too many losses
    /// in a row or when an effect's outcome is unknown.
    pub fn child_lost(&mut self, claim: &Claim, reason: &str) -> StoreResult<RecoveredRun> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::ChildLost)?;
        self.requeue_after_loss(&claim.run_id, &run, reason, "child_lost")
    }

    /// The owner stopped the run's child because the host is stopping: requeue the run from
    /// its last committed boundary without counting a loss (the run did nothing wrong).
    /// `applying` effects of `never` contracts still become uncertain.
    pub fn release_at_shutdown(&mut self, claim: &Claim) -> StoreResult<RecoveredRun> {
        self.release_uncounted(claim, "host stopping")
    }

    /// Requeues a running run from its last committed boundary without counting a loss, for
    /// a reason that is not the run's doing (`why` is kept with the run and its event).
    pub fn release_uncounted(&mut self, claim: &Claim, why: &str) -> StoreResult<RecoveredRun> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::ChildLost)?;
        self.requeue_after_loss_counted(&claim.run_id, &run, why, "recovered", false)
    }

    /// Makes every running row whose claim has expired (or vanished) claimable again, in one
    /// commit per call, counting a loss for each. Used at host start.
    pub fn recover_expired(&mut self) -> StoreResult<Vec<RecoveredRun>> {
        self.recover_expired_claims(None)
    }

    /// [`WriteTx::recover_expired`] for a running host whose owner id is `stalled_owner`. The
    /// host renews its own claims while their children work, so one of them expires only when
    /// the host could not renew it in time (it stalled past the lease, or its writes kept
    /// failing): its child did nothing wrong, and the run is requeued without counting a loss
    /// (an effect the child was applying still becomes uncertain). Other claims count one.
    pub fn recover_expired_claims(
        &mut self,
        stalled_owner: Option<&str>,
    ) -> StoreResult<Vec<RecoveredRun>> {
        let expired: Vec<(String, Option<String>)> = self
            .conn()
            .prepare_cached(
                "SELECT r.run_id, c.owner_id FROM runs r JOIN claims c ON c.run_id = r.run_id
                 WHERE r.status = 'running' AND (c.expires_at IS NULL OR c.expires_at <= ?1)
                 ORDER BY r.run_id",
            )?
            .query_map([self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(expired.len());
        for (run_id, owner) in expired {
            let run = self.run_row(&run_id)?;
            let stalled = stalled_owner.is_some() && owner.as_deref() == stalled_owner;
            out.push(if stalled {
                self.requeue_after_loss_counted(
                    &run_id,
                    &run,
                    "claim expired while the host was stalled",
                    "recovered",
                    false,
                )?
            } else {
                self.requeue_after_loss(&run_id, &run, "claim expired", "recovered")?
            });
        }
        Ok(out)
    }

    pub(crate) fn requeue_after_loss(
        &mut self,
        run_id: &str,
        run: &RunRow,
        reason: &str,
        event: &'static str,
    ) -> StoreResult<RecoveredRun> {
        self.requeue_after_loss_counted(run_id, run, reason, event, true)
    }

    /// Requeues a run whose owner went away. `count_loss` adds one to the run's consecutive
    /// losses (a child's death counts; a host restart does not).
    pub(crate) fn requeue_after_loss_counted(
        &mut self,
        run_id: &str,
        run: &RunRow,
        reason: &str,
        event: &'static str,
        count_loss: bool,
    ) -> StoreResult<RecoveredRun> {
        self.release_claim(run_id)?;
        let validating: bool = self
            .conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM submissions WHERE state = 'validating' AND
                        interaction_id IN (SELECT interaction_id FROM interactions WHERE run_id = ?1))",
            )?
            .query_row([run_id], |r| r.get(0))?;
        if validating {
            if count_loss {
                // A validation child that died rejects only its provisional submission (its
                // `validate` may be what kills it; judging it again could loop).
                let error = format!("validation did not finish: {reason}");
                let rejected: Vec<String> = self
                    .conn()
                    .prepare_cached(
                        "UPDATE submissions SET state = 'rejected', error = ?3, settled_at = ?2
                         WHERE state = 'validating' AND interaction_id IN
                               (SELECT interaction_id FROM interactions WHERE run_id = ?1)
                         RETURNING submission_id",
                    )?
                    .query_map(params![run_id, self.now, error], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                // Published like a verdict, so whoever waits for the submission learns it.
                for submission_id in rejected {
                    self.finish_run_write(
                        run_id,
                        "submission_rejected",
                        json!({ "submission": submission_id, "error": error }),
                    )?;
                }
                self.conn()
                    .prepare_cached(
                        "UPDATE interactions SET status = 'pending' WHERE run_id = ?1 AND status = 'validating'",
                    )?
                    .execute([run_id])?;
            }
            // Otherwise (the host went away) the submission stays under validation and the next
            // child judges it again. Either way the attempt waits again.
            if let Some(attempt_id) = &run.current_attempt {
                self.conn()
                    .prepare_cached("UPDATE attempts SET status = 'waiting' WHERE attempt_id = ?1")?
                    .execute([attempt_id])?;
            }
        } else if !self.rewait_answered_attempt(run)? {
            self.interrupt_running_attempt(run, reason)?;
        }
        let uncertain = self.mark_interrupted_effects_uncertain(run_id)?;
        let crashes: i64 = self
            .conn()
            .prepare_cached(
                "UPDATE queue SET crash_count = crash_count + ?3, available_at = ?2 WHERE run_id = ?1
                 RETURNING crash_count",
            )?
            .query_row(params![run_id, self.now, i64::from(count_loss)], |r| r.get(0))?;
        let (status, why) = if let Some(key) = uncertain.first() {
            (
                RunStatus::Review,
                format!("uncertain effect {key}: {reason}"),
            )
        } else if count_loss && crashes >= i64::from(self.config.max_child_losses) {
            (
                RunStatus::Review,
                format!("its child was lost {crashes} times without progress: {reason}"),
            )
        } else if validating && count_loss {
            // The submission was rejected: the request waits for a new one.
            (RunStatus::Waiting, reason.to_owned())
        } else {
            (RunStatus::Queued, reason.to_owned())
        };
        self.set_status(run_id, status)?;
        if status == RunStatus::Review {
            self.set_review_reason(run_id, &why)?;
        }
        self.finish_run_write(
            run_id,
            event,
            json!({ "reason": why, "losses": crashes, "status": status.as_str() }),
        )?;
        Ok(RecoveredRun {
            run_id: run_id.to_owned(),
            status,
            reason: why,
        })
    }

    /// A running attempt that continues after an answered decision, an accepted submission or
    /// a request whose deadline passed holds a committed outcome: interrupting it would rerun
    /// the node and ask again, dropping what a person (or the model) answered, or giving an
    /// expired request a fresh deadline. It waits again instead, so the next activation
    /// continues it the same way ([`Resume::Continue`], [`Resume::Accepted`],
    /// [`Resume::InteractionExpired`]). Returns whether it did.
    fn rewait_answered_attempt(&mut self, run: &RunRow) -> StoreResult<bool> {
        let Some(attempt_id) = &run.current_attempt else {
            return Ok(false);
        };
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE attempts SET status = 'waiting'
                 WHERE attempt_id = ?1 AND status = 'running'
                   AND (EXISTS (SELECT 1 FROM decisions
                                WHERE attempt_id = ?1 AND status IN ('answered', 'cancelled'))
                        OR EXISTS (SELECT 1 FROM interactions
                                   WHERE attempt_id = ?1 AND status IN ('settled', 'expired')))",
            )?
            .execute([attempt_id])?;
        Ok(changed > 0)
    }

    /// `applying` effects whose contract forbids retry become `uncertain`. Returns their keys.
    fn mark_interrupted_effects_uncertain(&mut self, run_id: &str) -> StoreResult<Vec<String>> {
        let keys: Vec<String> = self
            .conn()
            .prepare_cached(
                "UPDATE effects SET state = 'uncertain', updated_at = ?2,
                        error = 'the child went away while applying; no receipt was stored'
                 WHERE run_id = ?1 AND state = 'applying' AND retry_contract = ?3
                 RETURNING effect_key",
            )?
            .query_map(
                params![run_id, self.now, RetryContract::Never.as_str()],
                |r| r.get(0),
            )?
            .collect::<Result<_, _>>()?;
        Ok(keys)
    }

    fn set_review_reason(&mut self, run_id: &str, why: &str) -> StoreResult<()> {
        self.conn()
            .prepare_cached("UPDATE runs SET review_reason = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, why])?;
        Ok(())
    }

    /// Stops a running run for manual review (for example `source_changed`): the attempt is
    /// interrupted and the claim released; nothing is retried until a person acts.
    pub fn send_to_review(&mut self, claim: &Claim, reason: &str) -> StoreResult<u64> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::Review)?;
        self.interrupt_running_attempt(&run, reason)?;
        self.release_claim(&claim.run_id)?;
        self.set_status(&claim.run_id, RunStatus::Review)?;
        self.set_review_reason(&claim.run_id, reason)?;
        self.finish_run_write(&claim.run_id, "review", json!({ "reason": reason }))
    }
}

/// Who asked a person's command on a run in review, and why: kept in its event.
#[derive(Debug, Clone, Copy)]
pub struct Provenance<'a> {
    /// The person (the CLI sends the login name) or client.
    pub by: &'a str,
    /// Why, in their words.
    pub reason: &'a str,
}

impl WriteTx<'_> {
    // ----- leaving review --------------------------------------------------------------------

    /// A person's way out of review: the run's current node runs again, from the last
    /// committed boundary, with its count of lost children cleared (for repeated losses once
    /// the cause is fixed, or a changed source the person has put back). Refused while an
    /// effect is uncertain (resolve it first: a retry must not apply it again) and for a run
    /// not in review. Never records a success: the node simply runs again.
    pub fn retry_from_review(&mut self, run_id: &str, who: Provenance<'_>) -> StoreResult<u64> {
        let run = self.run_for(run_id, Op::Retry)?;
        if let Some(key) = self.first_uncertain_effect(run_id)? {
            return Err(invalid(
                run_id,
                Op::Retry,
                run.status,
                format!("effect {key} is uncertain: resolve it first (`resolve-effect`, applied or failed)"),
            ));
        }
        self.authorize(run_id, Fence::Unclaimed, Op::Retry)?;
        self.requeue_from_review(run_id)?;
        self.finish_run_write(
            run_id,
            "retried",
            json!({ "by": who.by, "reason": who.reason }),
        )
    }

    /// A person settles an `uncertain` effect of a run in review with what they found out:
    /// it was `applied` (with the receipt they provide) or it `failed` (it did not happen).
    /// Once no effect of the run is uncertain, the run continues: its current node runs
    /// again, and reserving the effect's key returns what the person recorded (the receipt,
    /// or the failure) instead of applying it again.
    pub fn resolve_effect(
        &mut self,
        run_id: &str,
        effect_id: &str,
        result: &super::EffectResult,
        who: Provenance<'_>,
    ) -> StoreResult<u64> {
        let run = self.run_for(run_id, Op::ResolveEffect)?;
        let state: Option<String> = self
            .conn()
            .prepare_cached("SELECT state FROM effects WHERE effect_id = ?1 AND run_id = ?2")?
            .query_row(params![effect_id, run_id], |r| r.get(0))
            .optional()?;
        match state.as_deref() {
            None => {
                return Err(StoreError::NotFound {
                    what: "effect",
                    id: effect_id.to_owned(),
                })
            }
            Some("uncertain") => {}
            Some(other) => {
                return Err(invalid(
                    run_id,
                    Op::ResolveEffect,
                    run.status,
                    format!("effect {effect_id} is {other}, not uncertain"),
                ))
            }
        }
        self.authorize(run_id, Fence::Unclaimed, Op::ResolveEffect)?;
        let (state, receipt, error) = match result {
            super::EffectResult::Applied { receipt } => {
                ("applied", Some(receipt.to_string()), None)
            }
            super::EffectResult::Failed { error } => ("failed", None, Some(error.clone())),
        };
        self.conn()
            .prepare_cached(
                "UPDATE effects SET state = ?2, receipt = ?3, error = ?4, updated_at = ?5
                 WHERE effect_id = ?1",
            )?
            .execute(params![effect_id, state, receipt, error, self.now])?;
        let continues = self.first_uncertain_effect(run_id)?.is_none();
        if continues {
            self.requeue_from_review(run_id)?;
        }
        self.finish_run_write(
            run_id,
            "effect_resolved",
            json!({ "effect": effect_id, "state": state, "by": who.by, "reason": who.reason,
                    "continues": continues }),
        )
    }

    fn first_uncertain_effect(&self, run_id: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT effect_key FROM effects WHERE run_id = ?1 AND state = 'uncertain'
                 ORDER BY created_at, rowid LIMIT 1",
            )?
            .query_row([run_id], |r| r.get(0))
            .optional()?)
    }

    /// A run in review becomes ready again, its lost children forgotten.
    fn requeue_from_review(&mut self, run_id: &str) -> StoreResult<()> {
        self.set_status(run_id, RunStatus::Queued)?;
        self.set_available(run_id, self.now)?;
        self.conn()
            .prepare_cached("UPDATE queue SET crash_count = 0 WHERE run_id = ?1")?
            .execute([run_id])?;
        Ok(())
    }
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
