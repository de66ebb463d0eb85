//! Lifecycle operations on the requests a run waits for: decisions (checkpoints and protected
//! human decisions) and interactive requests (asked, submitted, judged, given up, answered,
//! expired at their deadline), and the workflow messages a run leaves for its session.

use super::*;
use crate::store::Requests;
use piw_engine::store::records::*;
use rusqlite::params;
use serde_json::{json, Value};

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

/// An interactive request's row, as the answers to it need it.
pub(crate) struct InteractionRow {
    pub(crate) run_id: String,
    attempt_id: String,
    status: String,
    deadline_at: Option<UnixMillis>,
}

impl WriteTx<'_> {
    /// attempt -> waiting, claim released, run -> waiting.
    pub(super) fn suspend_attempt(&mut self, run_id: &str, attempt_id: &str) -> StoreResult<()> {
        self.conn()
            .prepare_cached("UPDATE attempts SET status = 'waiting' WHERE attempt_id = ?1")?
            .execute([attempt_id])?;
        self.release_claim(run_id)?;
        self.set_status(run_id, RunStatus::Waiting)
    }

    /// The interactive request `interaction_id`, as stored.
    pub(crate) fn interaction_row(&self, interaction_id: &str) -> StoreResult<InteractionRow> {
        self.conn()
            .prepare_cached(
                "SELECT run_id, attempt_id, status, deadline_at FROM interactions
                 WHERE interaction_id = ?1",
            )?
            .query_row([interaction_id], |r| {
                Ok(InteractionRow {
                    run_id: r.get(0)?,
                    attempt_id: r.get(1)?,
                    status: r.get(2)?,
                    deadline_at: r.get(3)?,
                })
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "interaction",
                id: interaction_id.to_owned(),
            })
    }

    /// The gate every answer to an interactive request passes (a submission, a progress
    /// update, giving up on it): `attempt_id` is the request's own attempt (else
    /// `StaleAttempt`, naming the current one), the run takes submissions and the request is
    /// pending; with `before_deadline`, a request whose deadline passed is refused too
    /// (`DeadlinePassed`: it is about to expire).
    pub(crate) fn require_pending_interaction(
        &self,
        interaction_id: &str,
        request: &InteractionRow,
        attempt_id: &str,
        before_deadline: bool,
    ) -> StoreResult<()> {
        let run = self.run_row(&request.run_id)?;
        if attempt_id != request.attempt_id {
            return Err(StoreError::StaleAttempt {
                run_id: request.run_id.clone(),
                presented: attempt_id.to_owned(),
                current: request.attempt_id.clone(),
            });
        }
        if !Op::Submit.allowed(run.status) || request.status != "pending" {
            return Err(invalid(
                &request.run_id,
                Op::Submit,
                run.status,
                format!("interaction {interaction_id} is {}", request.status),
            ));
        }
        match request
            .deadline_at
            .filter(|d| before_deadline && *d <= self.now)
        {
            Some(deadline_at) => Err(StoreError::DeadlinePassed {
                run_id: request.run_id.clone(),
                attempt_id: request.attempt_id.clone(),
                deadline_at,
            }),
            None => Ok(()),
        }
    }

    /// Answers a pending decision and queues the run to continue. A protected human decision
    /// refuses the model-facing path.
    pub fn answer_decision(
        &mut self,
        decision_id: &str,
        answer: &Value,
        answered_by: Answerer,
    ) -> StoreResult<()> {
        self.answer_decision_via(decision_id, answer, answered_by, None)
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

    /// Expires every due request of `kind`, each in its own savepoint: one that fails undoes
    /// only itself, never the others of the pass (nor the rest of the host's deadline work).
    /// A refused request that is no longer due (an earlier expiry of the pass queued its run)
    /// is skipped; one still due was refused for good (its rows contradict each other), so
    /// its run stops for review with the error instead of being tried again at every wake-up.
    /// A failure of the database itself ([`StoreError::is_infrastructure`]) says nothing about
    /// the request: it fails the pass, which the next wake-up tries again.
    fn expire_due(&mut self, kind: &ExpiringRequest) -> StoreResult<Vec<(String, String)>> {
        let due = self.due_requests(kind)?;
        let mut expired = Vec::with_capacity(due.len());
        for (id, run_id) in due {
            let error = match self.savepoint(|w| w.expire_request(kind, &id)) {
                Ok(()) => {
                    expired.push((id, run_id));
                    continue;
                }
                Err(e) if e.is_infrastructure() => return Err(e),
                Err(e) => e,
            };
            if !self
                .due_requests(kind)?
                .iter()
                .any(|(due_id, _)| *due_id == id)
            {
                tracing::debug!(%run_id, request = %id, %error, "no longer due; not expired");
                continue;
            }
            tracing::warn!(%run_id, request = %id, %error, "cannot expire a due request; the run goes to review");
            let reason = format!(
                "the deadline of {} {id} passed but it could not be expired: {error}",
                kind.what
            );
            if let Err(e) = self.savepoint(|w| w.review_waiting_run(kind.op, &run_id, &reason)) {
                tracing::error!(%run_id, request = %id, error = %e, "cannot stop the run for review either");
            }
        }
        Ok(expired)
    }

    fn due_requests(&self, kind: &ExpiringRequest) -> StoreResult<Vec<(String, String)>> {
        Ok(self
            .conn()
            .prepare_cached(kind.due)?
            .query_map([self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?)
    }

    /// Stops a waiting run for review with `reason` (`op` is the operation that could not
    /// proceed). Its attempt keeps waiting on its request: a retry makes it wait again.
    pub(super) fn review_waiting_run(
        &mut self,
        op: Op,
        run_id: &str,
        reason: &str,
    ) -> StoreResult<()> {
        self.run_for(run_id, op)?;
        self.authorize(run_id, Fence::Unclaimed, op)?;
        self.set_status(run_id, RunStatus::Review)?;
        self.conn()
            .prepare_cached("UPDATE runs SET review_reason = ?2 WHERE run_id = ?1")?
            .execute(params![run_id, reason])?;
        self.finish_run_write(run_id, "review", json!({ "reason": reason }))?;
        Ok(())
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

    pub(super) fn add_message(
        &mut self,
        run_id: &str,
        run: &RunRow,
        kind: MessageKind,
        content: &Value,
    ) -> StoreResult<String> {
        self.add_message_once(run_id, run, kind, content, &self.new_id("msg"))
    }

    /// Adds message `message_id` unless it exists already: for the run's origin session, or
    /// with none (a detached run's, which no session claims).
    fn add_message_once(
        &mut self,
        run_id: &str,
        run: &RunRow,
        kind: MessageKind,
        content: &Value,
        message_id: &str,
    ) -> StoreResult<String> {
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
                run.origin_session,
                kind.as_str(),
                content.to_string(),
                self.now
            ])?;
        Ok(message_id.to_owned())
    }
}

/// Checks a person's answer to a human decision against the choices its request offers
/// (`choices: [{id, input?: {name, minLength?, maxLength?}}]`, as the Node runtime writes
/// them): the answer is an object whose `choice` is one of the ids, and a choice that takes
/// text needs it as `text` (or `input.<name>`), a string whose length (in UTF-16 code units,
/// as JavaScript counts it) is within the bounds. A request without a `choices` list (another
/// runtime's) constrains nothing here. Refuses with a message and the rule as data:
/// `{"choices": [{"id", "text": null | {"name", "min_length", "max_length"}}]}`.
pub(crate) fn check_human_answer(request: &Value, answer: &Value) -> Result<(), (String, Value)> {
    let Some(choices) = request.get("choices").and_then(Value::as_array) else {
        return Ok(());
    };
    let choices: Vec<(&str, Option<&Value>)> = choices
        .iter()
        .filter_map(|c| {
            Some((
                c.get("id")?.as_str()?,
                c.get("input").filter(|i| i.is_object()),
            ))
        })
        .collect();
    if choices.is_empty() {
        return Ok(());
    }
    let bound = |input: &Value, key: &str| input.get(key).and_then(Value::as_u64);
    let text_rule = |input: &Value| {
        json!({
            "name": input.get("name").and_then(Value::as_str),
            "min_length": bound(input, "minLength"),
            "max_length": bound(input, "maxLength"),
        })
    };
    let rule = json!({
        "choices": choices
            .iter()
            .map(|(id, input)| json!({ "id": id, "text": input.map(text_rule) }))
            .collect::<Vec<_>>(),
    });
    let describe = |(id, input): &(&str, Option<&Value>)| match input {
        None => (*id).to_owned(),
        Some(input) => format!("{id} (with {})", text_rule_words(input)),
    };
    let allowed = choices.iter().map(describe).collect::<Vec<_>>().join(", ");
    let chosen = answer.get("choice").filter(|c| !c.is_null());
    let Some((id, input)) = chosen
        .and_then(Value::as_str)
        .and_then(|c| choices.iter().find(|(id, _)| *id == c))
    else {
        let got = chosen.map_or_else(|| "no choice".to_owned(), |c| format!("choice {c}"));
        return Err((
            format!("the answer must be {{\"choice\", \"text\"?}} with a choice of: {allowed}; got {got}"),
            rule,
        ));
    };
    let Some(input) = input else {
        return Ok(());
    };
    let name = input.get("name").and_then(Value::as_str);
    let text = answer
        .get("text")
        .filter(|t| !t.is_null())
        .or_else(|| name.and_then(|n| answer.get("input")?.get(n)));
    let length = text
        .and_then(Value::as_str)
        .map(|t| t.encode_utf16().count() as u64);
    let fits = length.is_some_and(|n| {
        bound(input, "minLength").is_none_or(|min| n >= min)
            && bound(input, "maxLength").is_none_or(|max| n <= max)
    });
    if fits {
        return Ok(());
    }
    let got = match length {
        Some(n) => format!("{n} characters"),
        None => "no text".to_owned(),
    };
    Err((
        format!(
            "choice {id} needs {} as \"text\"; got {got} (choices: {allowed})",
            text_rule_words(input)
        ),
        rule,
    ))
}

/// A choice's text rule in words: `a text of 10 to 500 characters`.
fn text_rule_words(input: &Value) -> String {
    let bound = |key: &str| input.get(key).and_then(Value::as_u64);
    match (bound("minLength"), bound("maxLength")) {
        (Some(min), Some(max)) => format!("a text of {min} to {max} characters"),
        (Some(min), None) => format!("a text of at least {min} characters"),
        (None, Some(max)) => format!("a text of at most {max} characters"),
        (None, None) => "a text".to_owned(),
    }
}

/// Whether a stored submission payload (its JSON text) is the same value as `payload`
/// (compared as values: the order of an object's keys does not matter).
fn same_payload(stored: &str, payload: &Value) -> bool {
    serde_json::from_str::<Value>(stored).is_ok_and(|v| &v == payload)
}

impl Requests for WriteTx<'_> {
    fn wait_for_decision(
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
        self.check_slot(&claim.run_id, request)?;
        let decision_id = self.new_id("dec");
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

    fn answer_decision_via(
        &mut self,
        decision_id: &str,
        answer: &Value,
        answered_by: Answerer,
        channel: Option<&str>,
    ) -> StoreResult<()> {
        let (run_id, kind, status, attempt_id, deadline, request): (
            String,
            String,
            String,
            String,
            Option<i64>,
            Option<String>,
        ) = self
            .conn()
            .prepare_cached(
                "SELECT d.run_id, d.kind, d.status, d.attempt_id, a.deadline_at, d.request
                 FROM decisions d JOIN attempts a ON a.attempt_id = d.attempt_id
                 WHERE d.decision_id = ?1",
            )?
            .query_row([decision_id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
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
        if kind == DecisionKind::HumanDecision {
            // Refused here, with the run still waiting, rather than stored and then refused by
            // the child that carries it on (which would fail the node and the run).
            let request: Value = match request {
                Some(text) => serde_json::from_str(&text)?,
                None => Value::Null,
            };
            check_human_answer(&request, answer).map_err(|(detail, rule)| {
                StoreError::InvalidAnswer {
                    decision_id: decision_id.to_owned(),
                    detail,
                    rule,
                }
            })?;
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
            match channel {
                Some(channel) => {
                    json!({ "decision": decision_id, "by": answered_by.as_str(), "channel": channel })
                }
                None => json!({ "decision": decision_id, "by": answered_by.as_str() }),
            },
        )?;
        Ok(())
    }

    fn require_decision_of(&self, run_id: &str, decision_id: &str) -> StoreResult<()> {
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

    fn expire_due_decisions(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.expire_due(&EXPIRING_DECISION)
    }

    fn request_interaction(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: InteractionKind,
        request: &Value,
        deadline_at: Option<UnixMillis>,
        present: &dyn Fn(&Holder) -> bool,
    ) -> StoreResult<String> {
        self.fence(claim)?;
        let run = self.run_for(&claim.run_id, Op::RequestInteraction)?;
        let attempt =
            self.current_attempt(&claim.run_id, &run, attempt_id, AttemptStatus::Running)?;
        self.require_settled(&claim.run_id, Op::RequestInteraction, run.status)?;
        self.check_slot(&claim.run_id, request)?;
        let interaction_id = self.new_id("int");
        let budget_ms = deadline_at.map(|d| d.saturating_sub(self.now).max(0));
        let held = self.holder_of(&claim.run_id)?.is_none_or(|h| present(&h));
        let held_since = held.then_some(self.now);
        let deadline_at = budget_ms
            .filter(|_| held)
            .map(|b| self.now.saturating_add(b));
        self.conn()
            .prepare_cached(
                "INSERT INTO interactions (interaction_id, run_id, attempt_id, node_id,
                                           origin_session, kind, request, budget_ms,
                                           held_since, deadline_at, status, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11)",
            )?
            .execute(params![
                interaction_id,
                claim.run_id,
                attempt_id,
                attempt.node_id,
                run.origin_session,
                kind.as_str(),
                request.to_string(),
                budget_ms,
                held_since,
                deadline_at,
                self.now
            ])?;
        // The waiting attempt's deadline is the step's (none while nobody holds it).
        self.conn()
            .prepare_cached("UPDATE attempts SET deadline_at = ?2 WHERE attempt_id = ?1")?
            .execute(params![attempt_id, deadline_at])?;
        self.suspend_attempt(&claim.run_id, attempt_id)?;
        self.finish_run_write(
            &claim.run_id,
            "interaction_requested",
            json!({ "interaction": interaction_id, "kind": kind.as_str() }),
        )?;
        Ok(interaction_id)
    }

    fn require_interaction_of(
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

    fn interaction_progress(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        message: &str,
        data: &Value,
    ) -> StoreResult<super::super::ProgressKept> {
        let request = self.interaction_row(interaction_id)?;
        self.require_pending_interaction(interaction_id, &request, attempt_id, false)?;
        let run_id = request.run_id;
        self.authorize(&run_id, Fence::Unclaimed, Op::Submit)?;
        let node = self.run_row(&run_id)?.current_node;
        self.record_progress(
            &run_id,
            node.as_deref(),
            Some(attempt_id),
            message,
            data,
            Some(interaction_id),
        )
    }

    fn repeated_submission(
        &self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
    ) -> StoreResult<Option<(String, String)>> {
        let request = self.interaction_row(interaction_id)?;
        if request.status == "pending" || request.attempt_id != attempt_id {
            return Ok(None);
        }
        let newest: Option<(String, String, String)> = self
            .conn()
            .prepare_cached(
                "SELECT submission_id, state, payload FROM submissions
                 WHERE interaction_id = ?1 AND state IN ('validating', 'accepted')
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([interaction_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        Ok(newest.and_then(|(submission_id, state, stored)| {
            same_payload(&stored, payload).then_some((submission_id, state))
        }))
    }

    fn refuse_accepted_before(&self, interaction_id: &str, payload: &Value) -> StoreResult<()> {
        let request = self.interaction_row(interaction_id)?;
        let accepted: Vec<(String, String, String)> = self
            .conn()
            .prepare_cached(
                "SELECT i.interaction_id, i.node_id, s.payload
                 FROM submissions s JOIN interactions i ON i.interaction_id = s.interaction_id
                 WHERE i.run_id = ?1 AND i.interaction_id <> ?2 AND s.state = 'accepted'
                 ORDER BY s.created_at DESC, s.rowid DESC",
            )?
            .query_map(params![request.run_id, interaction_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        let Some((earlier, node, _)) = accepted
            .into_iter()
            .find(|(_, _, stored)| same_payload(stored, payload))
        else {
            return Ok(());
        };
        let run = self.run_row(&request.run_id)?;
        Err(invalid(
            &request.run_id,
            Op::Submit,
            run.status,
            format!(
                "this result was already accepted for interaction {earlier} (node {node}); \
                 name interaction {interaction_id} to submit it to this request too"
            ),
        ))
    }

    fn submit(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
        idempotency_key: Option<&str>,
    ) -> StoreResult<String> {
        let request = self.interaction_row(interaction_id)?;
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
        // A request past its deadline is about to expire (the host's deadline work has not
        // run yet): a submission now would be judged after the deadline, or dropped by it.
        self.require_pending_interaction(interaction_id, &request, attempt_id, true)?;
        let run_id = request.run_id;
        self.authorize(&run_id, Fence::Unclaimed, Op::Submit)?;
        // A large result comes as the reference of a value uploaded for this request
        // (`interaction.value_put`): the run must hold it whole. User data shaped like a
        // reference is refused unless wrapped as a literal.
        self.check_slot(&run_id, payload)?;
        let submission_id = self.new_id("sub");
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

    fn settle(
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

    fn fail_interaction(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        reason: &str,
        next: Option<(&str, Option<UnixMillis>)>,
        owner_id: &str,
    ) -> StoreResult<()> {
        let request = self.interaction_row(interaction_id)?;
        // Failing is the alternative to a submission: the same gate.
        self.require_pending_interaction(interaction_id, &request, attempt_id, true)?;
        let run_id = request.run_id;
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
                let routed = self.transition(
                    &claim,
                    &TransitionRequest {
                        attempt_id: attempt_id.to_owned(),
                        outcome: outcome.clone(),
                        next_node: next_node.to_owned(),
                        next_deadline_at,
                    },
                );
                match routed {
                    Ok(_) => {
                        self.park(&claim, None)?;
                    }
                    // The route would step past the graph's limit: the run fails instead.
                    Err(StoreError::StepLimitReached { detail, .. }) => {
                        self.fail(&claim, Some(attempt_id), &outcome, &detail)?;
                    }
                    Err(e) => return Err(e),
                }
            }
            None => {
                self.fail(&claim, Some(attempt_id), &outcome, reason)?;
            }
        }
        Ok(())
    }

    fn expire_due_interactions(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.expire_due(&EXPIRING_INTERACTION)
    }

    fn notify(&mut self, claim: &Claim, content: &Value) -> StoreResult<String> {
        self.fence(claim)?;
        self.check_slot(&claim.run_id, content)?;
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
        // The event is bounded as progress is (the message itself is one per visit).
        let mut event = json!({ "message": message_id });
        if let Some(dropped) =
            self.admit_event(&claim.run_id, run.current_attempt.as_deref(), &event)?
        {
            if dropped > 0 {
                event["dropped"] = json!(dropped);
            }
            self.finish_run_write(&claim.run_id, "notified", event)?;
        }
        Ok(message_id)
    }
}

#[cfg(test)]
mod tests {
    use super::check_human_answer;
    use serde_json::json;

    /// What the Node runtime's `humanResponse` takes, the host takes, and nothing else: the
    /// text by either name, its length counted as JavaScript counts it.
    #[test]
    fn a_human_answer_is_checked_as_the_runtime_reads_it() {
        let request = json!({"choices": [
            {"id": "go"},
            {"id": "stop", "input": {"name": "why", "minLength": 2, "maxLength": 3}}]});
        let ok = |answer| check_human_answer(&request, &answer).is_ok();
        assert!(ok(json!({"choice": "go"})));
        assert!(ok(json!({"choice": "go", "text": "ignored"})));
        assert!(ok(json!({"choice": "stop", "text": "abc"})));
        assert!(ok(json!({"choice": "stop", "input": {"why": "ab"}})));
        // One emoji is two UTF-16 code units: "😀a" is 3 long in JavaScript.
        assert!(ok(json!({"choice": "stop", "text": "😀a"})));
        assert!(!ok(json!({"choice": "stop", "text": "😀😀"})));
        assert!(!ok(json!({"choice": "stop", "text": "a"})));
        assert!(!ok(json!({"choice": "stop", "input": {"other": "ab"}})));
        assert!(!ok(json!({"choice": "stop", "text": 12})));
        assert!(!ok(json!({"choice": "Go"})));
        assert!(!ok(json!("go")));
        // A request that lists no choices (another runtime's) constrains nothing.
        assert!(check_human_answer(&json!({"question": "?"}), &json!(null)).is_ok());
        assert!(check_human_answer(&json!({"choices": []}), &json!(1)).is_ok());
    }
}
