//! What a child says: its worker messages applied inside the batch transaction (hello, node
//! starts, transitions, completion), each checked against the stored graph, its deadlines and
//! the step limits before anything is written. One function per worker kind; `apply_worker`
//! checks who speaks and dispatches.

use super::*;
use crate::fit::body;
use crate::protocol::reply::{
    DecisionRequested, EffectRecorded, HelloReply, InteractionRequested, NodeResultBody,
    NodeStarted, Notified, ProgressRecorded, ResultsPage, RunEnded, StepRefused, Stepped,
    SubmissionToJudge, Transitioned, ValueStored, VerdictRecorded, WorkerContext, WorkerExited,
};
use crate::store::Wake;
use crate::time::UnixMillis;

/// Applies one worker message inside the batch transaction.
pub fn apply_worker(
    w: &mut dyn Transaction,
    state: &mut HostState,
    req: &Request,
) -> Result<Value, StoreError> {
    let run_id = req
        .run_id
        .as_deref()
        .ok_or_else(|| invalid_input("run_id is required"))?;
    let generation = req
        .generation
        .ok_or_else(|| invalid_input("generation is required"))?;
    let entry = state
        .children
        .get(run_id)
        .filter(|e| e.generation == generation);
    let Some(entry) = entry else {
        return Err(stale(run_id));
    };
    if let RequestBody::WorkerHello(hello) = &req.body {
        if entry.hello
            || ClaimToken::from_secret(hello.child_token.clone()).hash() != entry.token_hash
        {
            return Err(StoreError::Forbidden(
                "the child token does not match this run's launch".into(),
            ));
        }
        return body(&worker_hello(w, state, run_id, hello)?);
    }
    if !entry.hello {
        return Err(StoreError::Forbidden("worker.hello must come first".into()));
    }
    let claim = state.claim(run_id).cloned().ok_or_else(|| stale(run_id))?;
    let body = match &req.body {
        RequestBody::WorkerNodeStarted(started) => body(&worker_node_started(
            w, state, &claim, req, run_id, started,
        )?)?,
        RequestBody::WorkerTransition(t) => body(&worker_transition(w, state, &claim, req, t)?)?,
        RequestBody::WorkerComplete(c) => body(&worker_complete(w, state, &claim, req, c)?)?,
        RequestBody::WorkerFail(f) => body(&worker_fail(w, &claim, req, f)?)?,
        RequestBody::WorkerProgress(p) => body(&worker_progress(w, &claim, p)?)?,
        RequestBody::WorkerWait(wait) => body(&worker_wait(w, &claim, req, wait)?)?,
        RequestBody::WorkerInteractionRequest(i) => {
            body(&worker_interaction_request(w, state, &claim, req, i)?)?
        }
        RequestBody::WorkerWaitUntil(wait) => {
            body(&worker_wait_until(w, &claim, &attempt_of(req)?, wait)?)?
        }
        RequestBody::WorkerNotify(n) => body(&worker_notify(w, &claim, n)?)?,
        RequestBody::WorkerEffectReserve(e) => body(&worker_effect_reserve(w, &claim, req, e)?)?,
        RequestBody::WorkerEffectApplying(e) => body(&worker_effect_applying(w, &claim, e)?)?,
        RequestBody::WorkerEffectSettle(e) => body(&worker_effect_settle(w, &claim, e)?)?,
        RequestBody::WorkerValidationResult(v) => {
            body(&worker_validation_result(w, state, &claim, run_id, v)?)?
        }
        RequestBody::WorkerExit(_) => body(&WorkerExited {})?,
        RequestBody::WorkerValuePut(put) => body(&worker_value_put(w, &claim, put)?)?,
        RequestBody::WorkerResults(page) => body(&worker_results(w, state, run_id, page)?)?,
        other => {
            return Err(StoreError::Forbidden(format!(
                "{} is not a worker kind",
                other.kind_str()
            )))
        }
    };
    state.renewed_at.insert(run_id.to_owned(), w.now_ms());
    Ok(body)
}

/// `worker.node_started`: a node attempt begins.
fn worker_node_started(
    w: &mut dyn Transaction,
    state: &mut HostState,
    claim: &Claim,
    req: &Request,
    run_id: &str,
    started: &payload::WorkerNodeStarted,
) -> Result<Stepped<NodeStarted>, StoreError> {
    let node = req
        .node_id
        .as_deref()
        .ok_or_else(|| invalid_input("node_id is required"))?;
    let graph = graph_of(w, state, run_id)?;
    if graph.node(node).is_none() {
        return Err(invalid_input(format!("node {node} is not in the graph")));
    }
    let deadline = deadline_for(w, &graph, node, started.timeout_ms)?;
    let started = w.node_started(claim, node, deadline);
    let attempt_id = match fail_at_step_limit(w, claim, None, started)? {
        Ok(attempt_id) => attempt_id,
        Err(refused) => return Ok(Stepped::Refused(refused)),
    };
    Ok(Stepped::Taken(NodeStarted {
        attempt_id,
        deadline_at: deadline,
    }))
}

/// `worker.transition`: the current attempt ended; propose the next node.
fn worker_transition(
    w: &mut dyn Transaction,
    state: &mut HostState,
    claim: &Claim,
    req: &Request,
    t: &payload::WorkerTransition,
) -> Result<Stepped<Transitioned>, StoreError> {
    let (graph, attempt_id, from) = match step_after_earlier(w, state, claim, req, &t.earlier)? {
        Ok(step) => step,
        Err(refused) => return Ok(Stepped::Refused(refused)),
    };
    let outcome = t.outcome.clone();
    if let Some(refused) = check_route(
        w,
        claim,
        &graph,
        &from,
        &attempt_id,
        &outcome,
        Some(&t.next_node),
    )? {
        return Ok(Stepped::Refused(refused));
    }
    let deadline = deadline_for(w, &graph, &t.next_node, t.next_timeout_ms)?;
    let request = TransitionRequest {
        attempt_id,
        outcome,
        next_node: t.next_node.clone(),
        next_deadline_at: deadline,
    };
    let stepped = w.transition(claim, &request);
    let done = match fail_at_step_limit(w, claim, Some(&request), stepped)? {
        Ok(done) => done,
        Err(refused) => return Ok(Stepped::Refused(refused)),
    };
    let parked = done.pause_requested;
    if parked {
        w.park(claim, None)?;
    }
    Ok(Stepped::Taken(Transitioned {
        attempt_id: done.next_attempt_id,
        parked,
        deadline_at: deadline,
    }))
}

/// `worker.complete`: the current attempt ended and the run finished.
fn worker_complete(
    w: &mut dyn Transaction,
    state: &mut HostState,
    claim: &Claim,
    req: &Request,
    c: &payload::WorkerComplete,
) -> Result<Stepped<RunEnded>, StoreError> {
    if c.result_is_output
        && (!c.result.is_null() || !matches!(c.outcome, payload::AttemptOutcome::Succeeded { .. }))
    {
        return Err(invalid_input(
            "result_is_output needs a succeeded outcome and a null result",
        ));
    }
    let (graph, attempt_id, from) = match step_after_earlier(w, state, claim, req, &c.earlier)? {
        Ok(step) => step,
        Err(refused) => return Ok(Stepped::Refused(refused)),
    };
    let outcome = c.outcome.clone();
    if let Some(refused) = check_route(w, claim, &graph, &from, &attempt_id, &outcome, None)? {
        return Ok(Stepped::Refused(refused));
    }
    let output = match &outcome {
        AttemptOutcome::Succeeded { output } => output.clone(),
        _ => Value::Null,
    };
    let result = if c.result_is_output {
        &output
    } else {
        &c.result
    };
    w.complete_presented(
        claim,
        &attempt_id,
        &output,
        result,
        c.presentation.as_deref(),
    )?;
    Ok(Stepped::Taken(RunEnded {
        status: RunStatus::Completed,
    }))
}

/// `worker.fail`: the run cannot continue.
fn worker_fail(
    w: &mut dyn Transaction,
    claim: &Claim,
    req: &Request,
    f: &payload::WorkerFail,
) -> Result<RunEnded, StoreError> {
    Ok(if f.review {
        w.send_to_review(claim, &f.error)?;
        RunEnded {
            status: RunStatus::Review,
        }
    } else {
        let outcome = AttemptOutcome::Failed {
            error: f.error.clone(),
        };
        w.fail(claim, req.attempt_id.as_deref(), &outcome, &f.error)?;
        RunEnded {
            status: RunStatus::Failed,
        }
    })
}

/// `worker.progress`: informational progress.
fn worker_progress(
    w: &mut dyn Transaction,
    claim: &Claim,
    p: &payload::WorkerProgress,
) -> Result<ProgressRecorded, StoreError> {
    let kept = w.progress(claim, &p.message, &p.data)?;
    Ok(ProgressRecorded {
        seq: kept.seq,
        event_kept: kept.event_kept,
    })
}

/// `worker.wait`: park until a checkpoint or human decision is answered.
fn worker_wait(
    w: &mut dyn Transaction,
    claim: &Claim,
    req: &Request,
    wait: &payload::WorkerWait,
) -> Result<DecisionRequested, StoreError> {
    let id = w.wait_for_decision(claim, &attempt_of(req)?, wait.decision_kind, &wait.request)?;
    Ok(DecisionRequested { decision_id: id })
}

/// `worker.interaction_request`: park until the origin session answers an interactive step.
fn worker_interaction_request(
    w: &mut dyn Transaction,
    state: &HostState,
    claim: &Claim,
    req: &Request,
    i: &payload::WorkerInteractionRequest,
) -> Result<InteractionRequested, StoreError> {
    let kind = i.interaction_kind;
    let attempt_id = attempt_of(req)?;
    // The node's saved deadline: what is left of it is the step's budget, which runs only
    // while the step is presented (held from the start when its holder is there already).
    let budget_from = w.attempt_deadline(&attempt_id)?;
    let present = |holder: &crate::store::Holder| crate::presence::is_present(state, holder);
    let id = w.request_interaction(claim, &attempt_id, kind, &i.request, budget_from, &present)?;
    // The step's deadline as of now (none while nobody presents it).
    let deadline = w.attempt_deadline(&attempt_id)?;
    Ok(InteractionRequested {
        interaction_id: id,
        deadline_at: deadline,
    })
}

/// `worker.notify`: record a notify node's message for the origin session.
fn worker_notify(
    w: &mut dyn Transaction,
    claim: &Claim,
    n: &payload::WorkerNotify,
) -> Result<Notified, StoreError> {
    let id = w.notify(claim, &n.content)?;
    Ok(Notified { message_id: id })
}

/// `worker.effect_reserve`: reserve a managed effect.
fn worker_effect_reserve(
    w: &mut dyn Transaction,
    claim: &Claim,
    req: &Request,
    e: &payload::WorkerEffectReserve,
) -> Result<crate::store::Reservation, StoreError> {
    let contract = e.retry_contract;
    let r = w.reserve_effect(
        claim,
        &attempt_of(req)?,
        &e.effect_key,
        &e.fingerprint,
        contract,
    )?;
    Ok(r)
}

/// `worker.effect_applying`: a reserved effect is about to be performed.
fn worker_effect_applying(
    w: &mut dyn Transaction,
    claim: &Claim,
    e: &payload::WorkerEffectApplying,
) -> Result<EffectRecorded, StoreError> {
    w.effect_applying(claim, &e.effect_id)?;
    Ok(EffectRecorded {
        effect_id: e.effect_id.clone(),
    })
}

/// `worker.effect_settle`: a performed effect ended.
fn worker_effect_settle(
    w: &mut dyn Transaction,
    claim: &Claim,
    e: &payload::WorkerEffectSettle,
) -> Result<EffectRecorded, StoreError> {
    w.settle_effect(claim, &e.effect_id, &e.result)?;
    Ok(EffectRecorded {
        effect_id: e.effect_id.clone(),
    })
}

/// `worker.validation_result`: the verdict of a validate-mode child on a submission.
fn worker_validation_result(
    w: &mut dyn Transaction,
    state: &mut HostState,
    claim: &Claim,
    run_id: &str,
    v: &payload::WorkerValidationResult,
) -> Result<VerdictRecorded, StoreError> {
    let verdict = if v.accepted {
        Ok(())
    } else {
        Err(v.error.clone().unwrap_or_else(|| "rejected".into()))
    };
    w.settle(claim, &v.submission_id, verdict)?;
    if let Some(entry) = state.children.get_mut(run_id) {
        entry.judging_since = None; // the verdict is in: no validation deadline now
    }
    Ok(VerdictRecorded {
        submission_id: v.submission_id.clone(),
        accepted: v.accepted,
    })
}

/// `worker.results`: the next page of the node results a hello reply left out to fit its frame.
fn worker_results(
    w: &mut dyn Transaction,
    state: &HostState,
    run_id: &str,
    page: &payload::WorkerResults,
) -> Result<ResultsPage, StoreError> {
    // The run does not move while its child reads these pages (the child takes no step
    // before it has its context), so an offset into the same list is a stable cursor.
    let results = node_results(w, run_id)?;
    let offset = usize::try_from(page.offset)
        .unwrap_or(usize::MAX)
        .min(results.len());
    let mut rest = results[offset..].to_vec();
    let more = crate::fit::keep_what_fits(&mut rest, crate::fit::reply_room(state.reply_limit));
    Ok(ResultsPage {
        results: rest,
        more,
    })
}

/// `worker.value_put`: a chunk of a large value, stored under the run's claim.
fn worker_value_put(
    w: &mut dyn Transaction,
    claim: &Claim,
    put: &payload::WorkerValuePut,
) -> Result<ValueStored, StoreError> {
    let data = crate::protocol::value::chunk_from_hex(&put.data).map_err(invalid_input)?;
    if data.len() > crate::protocol::value::VALUE_PUT_CHUNK_BYTES {
        return Err(invalid_input(format!(
            "a value chunk carries at most {} bytes",
            crate::protocol::value::VALUE_PUT_CHUNK_BYTES
        )));
    }
    let stored = w.put_value_chunk(claim, &put.sha256, put.bytes, put.offset, &data)?;
    Ok(ValueStored {
        received: stored.received,
        complete: stored.complete,
    })
}

/// The attempt a worker message names (`attempt_id`, required by the kinds that use it).
fn attempt_of(req: &Request) -> Result<String, StoreError> {
    req.attempt_id
        .clone()
        .ok_or_else(|| invalid_input("attempt_id is required"))
}

/// Takes back what a worker message changed in the host's memory when its batch did not
/// commit: the store has no handshake (a retried hello must be accepted, and the handshake
/// deadline applies again, from now), and a verdict that was not stored leaves the child
/// judging (its validation deadline runs again from now).
pub fn forget_uncommitted_worker_message(state: &mut HostState, req: &Request, now: i64) {
    let (Some(run_id), Some(generation)) = (req.run_id.as_deref(), req.generation) else {
        return;
    };
    let Some(entry) = state
        .children
        .get_mut(run_id)
        .filter(|e| e.generation == generation)
    else {
        return;
    };
    match &req.body {
        RequestBody::WorkerHello(_) => {
            entry.hello = false;
            entry.judging_since = None;
            // A full handshake window for the retry.
            entry.launched_at = now;
        }
        RequestBody::WorkerValidationResult(_) if entry.judging_since.is_none() => {
            entry.judging_since = Some(now);
        }
        _ => {}
    }
}

/// The node a resumed run stands at (`None`: a fresh run starts at the graph's start node).
fn resume_node(resume: &Resume) -> Option<&str> {
    match resume {
        Resume::Fresh { node_id } => node_id.as_deref(),
        Resume::Continue { node_id, .. }
        | Resume::Validate { node_id, .. }
        | Resume::InteractionExpired { node_id, .. }
        | Resume::Accepted { node_id, .. }
        | Resume::TimerFired { node_id, .. } => Some(node_id),
    }
}

pub(super) fn worker_hello(
    w: &mut dyn Transaction,
    state: &mut HostState,
    run_id: &str,
    hello: &payload::WorkerHello,
) -> Result<HelloReply, StoreError> {
    let claim = state.claim(run_id).cloned().ok_or_else(|| stale(run_id))?;
    let (input, stored, _) = w.run_payload(run_id)?;
    let graph: Option<Graph> = match (&stored, &hello.definition) {
        (None, Some(def)) => {
            let graph = match Graph::parse(def) {
                Ok(g) => g,
                Err(e) => {
                    let error = format!("invalid workflow graph: {e}");
                    w.fail(
                        &claim,
                        None,
                        &AttemptOutcome::Failed {
                            error: error.clone(),
                        },
                        &error,
                    )?;
                    return Ok(HelloReply::Stop { stop: error });
                }
            };
            let mounted = hello.mounted_sources.clone().unwrap_or_else(|| json!({}));
            w.record_launch_facts(&claim, &graph.to_value(), &mounted)?;
            Some(graph)
        }
        (Some(stored), sent) => {
            let graph = Graph::parse(stored)
                .map_err(|e| StoreError::CorruptRow(format!("stored graph: {e}")))?;
            if let Some(sent) = sent {
                let same = Graph::parse(sent)
                    .map(|g| g.digest() == graph.digest())
                    .unwrap_or(false);
                if !same {
                    let reason = "source_changed: the workflow's graph differs from the one the run started with";
                    w.send_to_review(&claim, reason)?;
                    return Ok(HelloReply::Stop {
                        stop: reason.to_owned(),
                    });
                }
            }
            Some(graph)
        }
        // A child that found a changed source says hello without loading the workflow, only
        // to stop the run for review; any node operation needs a graph and is refused.
        (None, None) => None,
    };
    // Every store write first; the host's memory changes only when they all succeeded (a
    // failed write rolls the command back, and memory must not disagree with the store).
    let Some(entry) = state.children.get(run_id) else {
        return Err(stale(run_id));
    };
    // The node the run stands at must be one of the graph's: a source a person accepted as
    // changed (`run.retry` with `accept_source`) may have dropped or renamed it. Resuming a
    // node the workflow no longer has would run nothing the run recorded, so the run stops
    // for review, saying which node is missing (the file can be changed again and accepted).
    if let (Some(graph), Some(node)) = (&graph, resume_node(&entry.resume)) {
        if graph.node(node).is_none() {
            let reason = format!(
                "{}: the workflow no longer has the node {node}, where the run stands \
                 (its graph now has {}); the run cannot go on from there",
                crate::store::SOURCE_CHANGED,
                graph
                    .nodes
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            w.send_to_review(&claim, &reason)?;
            return Ok(HelloReply::Stop { stop: reason });
        }
    }
    let (child_epoch, mode) = (entry.child_epoch, entry.mode);
    let resume = serde_json::to_value(&entry.resume)?;
    w.record_child_handshake(child_epoch)?;
    // The node a child starts with takes the latest succeeded output as its input, so a
    // resumed run feeds its nodes exactly what an uninterrupted one would have.
    let node_input = match w.last_node_output(run_id)? {
        Some(output) => output,
        None => input.clone(),
    };
    let mut reply = WorkerContext {
        mode,
        resume: resume.clone(),
        input,
        node_input,
        results: Vec::new(),
        definition: graph.as_ref().map(Graph::to_value),
        features: payload::HOST_FEATURES,
        // After a lost child, the next one reports every step as it takes it: the host then
        // knows which node was running if this child dies too (steps reported together would
        // leave the loss on the last node the host heard of).
        report_each_step: w.child_losses(run_id)? > 0,
        answer: None,
        timer: None,
        submission: None,
        results_more: false,
    };
    if hello.start_node && mode == ChildMode::Run && reply.resume["resume"] == "fresh" {
        if let Some(graph) = &graph {
            let node = reply.resume["node_id"]
                .as_str()
                .map_or_else(|| graph.start.clone(), str::to_owned);
            // A deadline decided at the start needs the child's word: it opens the attempt
            // itself, with `worker.node_started`.
            if !graph.node(&node).is_some_and(|n| n.timeout_at_start) {
                let deadline = deadline_for(w, graph, &node, None)?;
                let started = w.node_started(&claim, &node, deadline);
                let attempt_id = match fail_at_step_limit(w, &claim, None, started)? {
                    Ok(attempt_id) => attempt_id,
                    Err(refused) => {
                        return Ok(HelloReply::Stop {
                            stop: refused.refused,
                        })
                    }
                };
                reply.resume["node_id"] = json!(node);
                reply.resume["attempt_id"] = json!(attempt_id);
                reply.resume["deadline_at"] = json!(deadline);
            }
        }
    }
    if let Some(attempt_id) = resume.get("attempt_id").and_then(Value::as_str) {
        reply.answer = Some(w.answer_for_attempt(attempt_id)?.unwrap_or(Value::Null));
        if resume.get("resume").and_then(Value::as_str) == Some("timer_fired") {
            reply.timer = Some(w.fired_timer_of_attempt(attempt_id)?.unwrap_or(Value::Null));
        }
    }
    if let Some(sub) = resume.get("submission_id").and_then(Value::as_str) {
        reply.submission = Some(SubmissionToJudge {
            submission_id: sub.to_owned(),
            payload: w.submission_payload(sub)?,
        });
    }
    // Every node's latest output may be as large as a payload: the results that do not fit
    // the frame with the rest of the reply are left for `worker.results` pages.
    let mut results = node_results(w, run_id)?;
    let room = crate::fit::reply_room(state.reply_limit)
        .saturating_sub(crate::protocol::json_len(&reply) + r#","results_more":true"#.len());
    let fits = crate::fit::fitting_prefix(&results, room);
    if fits < results.len() {
        results.truncate(fits);
        reply.results_more = true;
    }
    reply.results = results;
    if let Some(entry) = state.children.get_mut(run_id) {
        entry.hello = true;
        if entry.mode == ChildMode::Validate {
            entry.judging_since = Some(w.now_ms());
        }
    }
    state.forgiven_standby_exits.remove(run_id);
    if let Some(graph) = graph {
        state.graphs.insert(run_id.to_owned(), graph);
    }
    Ok(HelloReply::Context(Box::new(reply)))
}

/// The latest finished attempt of every node of the run, in the order they finished, as a
/// child's hello reply and `worker.results` carry them: outcome names as a workflow routes on
/// them (`$result.outcome`).
fn node_results(w: &dyn Transaction, run_id: &str) -> Result<Vec<NodeResultBody>, StoreError> {
    Ok(w.latest_results(run_id)?
        .into_iter()
        .map(|r| {
            let outcome = if r.status == "succeeded" {
                "ok".to_owned()
            } else {
                r.status
            };
            NodeResultBody {
                node: r.node,
                outcome,
                output: r.output,
                error: r.error,
                visits: r.finished,
            }
        })
        .collect())
}

/// The attempt a worker's proposal closes and the node it ran, from the store: the graph
/// check routes from the node the host recorded, never from what the child says it ran.
pub(super) fn current_step(
    w: &dyn Transaction,
    run_id: &str,
    req: &Request,
) -> Result<(String, String), StoreError> {
    let presented = req
        .attempt_id
        .clone()
        .ok_or_else(|| invalid_input("attempt_id is required"))?;
    let stale = |current: &str| StoreError::StaleAttempt {
        run_id: run_id.to_owned(),
        presented: presented.clone(),
        current: current.to_owned(),
    };
    let Some((attempt_id, node)) = w.current_open_attempt(run_id)? else {
        return Err(stale("none"));
    };
    if attempt_id != presented {
        return Err(stale(&attempt_id));
    }
    if req.node_id.as_deref().is_some_and(|n| n != node) {
        return Err(invalid_input(format!(
            "attempt {attempt_id} runs node {node}, not {}",
            req.node_id.as_deref().unwrap_or_default()
        )));
    }
    Ok((attempt_id, node))
}

/// The run's graph and the attempt (with its node) that a worker's transition or completion
/// closes, after the earlier steps the message carries were applied; or the refusal body.
pub(super) fn step_after_earlier(
    w: &mut dyn Transaction,
    state: &mut HostState,
    claim: &Claim,
    req: &Request,
    earlier: &[payload::EarlierStep],
) -> Result<Result<(Graph, String, String), StepRefused>, StoreError> {
    let graph = graph_of(w, state, &claim.run_id)?;
    let current = current_step(w, &claim.run_id, req)?;
    Ok(apply_earlier_steps(w, claim, &graph, current, earlier)?
        .map(|(attempt_id, from)| (graph, attempt_id, from)))
}

/// Applies the steps a worker took before the one its message reports (see
/// [`payload::EarlierStep`]): each closes the open attempt and opens the next node's, checked
/// against the graph like any transition. Returns the attempt then open and its node, or the
/// refusal body when a step disagrees with the graph (the run has failed then).
pub(super) fn apply_earlier_steps(
    w: &mut dyn Transaction,
    claim: &Claim,
    graph: &Graph,
    current: (String, String),
    steps: &[payload::EarlierStep],
) -> Result<Result<(String, String), StepRefused>, StoreError> {
    if steps.len() > payload::MAX_EARLIER_STEPS {
        return Err(invalid_input(format!(
            "{} earlier steps; at most {} per message",
            steps.len(),
            payload::MAX_EARLIER_STEPS
        )));
    }
    // Only pure nodes without a deadline may run unreported: the host enforces deadlines only
    // on attempts it knows, and only pure work may be lost and rerun.
    for step in steps {
        let unreported_ok = graph.node(&step.next_node).is_some_and(|n| {
            n.kind == NodeKind::Compute && n.timeout_ms.is_none() && !n.timeout_at_start
        });
        if !unreported_ok {
            return Err(invalid_input(format!(
                "earlier step into {}: only compute nodes without a timeout may run unreported",
                step.next_node
            )));
        }
    }
    let (mut attempt_id, mut from) = current;
    for step in steps {
        let outcome = step.outcome.clone();
        if let Some(refused) = check_route(
            w,
            claim,
            graph,
            &from,
            &attempt_id,
            &outcome,
            Some(&step.next_node),
        )? {
            return Ok(Err(refused));
        }
        let request = TransitionRequest {
            attempt_id,
            outcome,
            next_node: step.next_node.clone(),
            next_deadline_at: None,
        };
        let stepped = w.transition(claim, &request);
        let done = match fail_at_step_limit(w, claim, Some(&request), stepped)? {
            Ok(done) => done,
            Err(refused) => return Ok(Err(refused)),
        };
        attempt_id = done.next_attempt_id;
        from = step.next_node.clone();
    }
    Ok(Ok((attempt_id, from)))
}

pub(super) fn graph_of(
    w: &dyn Transaction,
    state: &mut HostState,
    run_id: &str,
) -> Result<Graph, StoreError> {
    if let Some(g) = state.graphs.get(run_id) {
        return Ok(g.clone());
    }
    let (_, def, _) = w.run_payload(run_id)?;
    let def = def.ok_or_else(|| invalid_input("the run has no graph snapshot yet"))?;
    let g = Graph::parse(&def).map_err(|e| StoreError::CorruptRow(format!("stored graph: {e}")))?;
    state.graphs.insert(run_id.to_owned(), g.clone());
    Ok(g)
}

/// The deadline of an attempt of `node` opened now: from the graph's fixed `timeout_ms`, or,
/// for a node with `timeout_at_start`, from the timeout the child decided for this attempt
/// (`reported`; none: no deadline). A reported timeout for a node whose graph fixes its
/// deadline is refused: the host enforces the graph, not the child's word.
pub(super) fn deadline_for(
    w: &dyn Transaction,
    graph: &Graph,
    node: &str,
    reported: Option<u64>,
) -> Result<Option<i64>, StoreError> {
    let Some(spec) = graph.node(node) else {
        return Ok(None);
    };
    let timeout = if spec.timeout_at_start {
        reported
    } else if reported.is_some() {
        return Err(invalid_input(format!(
            "node {node} has no timeout decided at its start; its deadline comes from the graph"
        )));
    } else {
        spec.timeout_ms
    };
    Ok(timeout.map(|ms| ms_after(w.now_ms(), ms)))
}

pub(super) fn ms_after(now: i64, ms: u64) -> i64 {
    now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Checks a child's proposal against the graph. A proposal that disagrees fails the run with
/// the reason; the failure is the command's committed result (`Some(body)` with `refused`),
/// not an error, so the savepoint around the command keeps it.
pub(super) fn check_route(
    w: &mut dyn Transaction,
    claim: &Claim,
    graph: &Graph,
    from: &str,
    attempt_id: &str,
    outcome: &AttemptOutcome,
    proposed: Option<&str>,
) -> Result<Option<StepRefused>, StoreError> {
    match graph.check_transition(from, &Outcome::from(outcome), proposed) {
        Ok(_) => Ok(None),
        Err(refused) => {
            let error = format!("transition refused: {refused}");
            w.fail(claim, Some(attempt_id), outcome, &error)?;
            Ok(Some(StepRefused {
                refused: error,
                status: RunStatus::Failed,
            }))
        }
    }
}

/// Turns the store's refusal to open an attempt past the graph's step limit (`maxSteps`,
/// default 100: the host's bound on every loop, whatever the child does) into the run's
/// failure with that reason, committed as the command's result (`Err(body)` with `refused`):
/// the store enforces the limit on every attempt it opens, this is what every step the host
/// commits (a child's, a node's timeout routed by the host) does when it is refused. The
/// attempt a refused transition was closing keeps its own outcome (a timed-out one fails:
/// the run ends on the limit, not on the timeout).
pub(super) fn fail_at_step_limit<T>(
    w: &mut dyn Transaction,
    claim: &Claim,
    closing: Option<&TransitionRequest>,
    stepped: Result<T, StoreError>,
) -> Result<Result<T, StepRefused>, StoreError> {
    let error = match stepped {
        Err(StoreError::StepLimitReached { detail, .. }) => detail,
        other => return other.map(Ok),
    };
    let outcome = match closing.map(|t| &t.outcome) {
        Some(AttemptOutcome::TimedOut) | None => AttemptOutcome::Failed {
            error: error.clone(),
        },
        Some(other) => other.clone(),
    };
    let attempt_id = closing.map(|t| t.attempt_id.as_str());
    w.fail(claim, attempt_id, &outcome, &error)?;
    Ok(Err(StepRefused {
        refused: error,
        status: RunStatus::Failed,
    }))
}

/// The wake of a `worker.wait_until`: after `for_ms`, or at `until_ms` (clamped to the
/// store's time range; [`worker_wait_until`] refuses one past [`MAX_WAKE_MS`]). The decoder
/// lets exactly one through.
pub fn wake_of(wait: &payload::WorkerWaitUntil) -> Wake {
    match (wait.for_ms, wait.until_ms) {
        (Some(ms), _) => Wake::After(ms),
        (None, Some(at)) => Wake::At(i64::try_from(at).unwrap_or(i64::MAX)),
        (None, None) => Wake::After(0),
    }
}

/// The latest wake time a timer may have: the end of the year 9999 (Unix milliseconds).
/// A wake time beyond it is a mistake of the workflow (a time in microseconds or
/// nanoseconds, say), and one past `i64::MAX` would be clamped or wrap in the arithmetic of
/// deadlines: refused rather than stored.
pub const MAX_WAKE_MS: UnixMillis = 253_402_300_799_999;

/// `worker.wait_until`: parks the attempt on a durable timer. The wake time is decided here,
/// once, from the host's clock, and stored; the reply says when. A wake time past
/// [`MAX_WAKE_MS`] is `invalid_input`.
pub fn worker_wait_until(
    w: &mut dyn Transaction,
    claim: &Claim,
    attempt_id: &str,
    wait: &payload::WorkerWaitUntil,
) -> Result<crate::protocol::reply::TimerSet, StoreError> {
    let wake = wake_of(wait);
    if wake.at(w.now_ms()) > MAX_WAKE_MS {
        return Err(StoreError::InvalidInput(format!(
            "the wake time is past the year 9999 ({MAX_WAKE_MS} ms): `until_ms` and `for_ms` \
             are milliseconds (until_ms {:?}, for_ms {:?})",
            wait.until_ms, wait.for_ms
        )));
    }
    let set = w.wait_until(claim, attempt_id, wake, &wait.output)?;
    Ok(crate::protocol::reply::TimerSet {
        timer_id: set.timer_id,
        wake_at: set.wake_at,
    })
}

#[cfg(test)]
mod wait_until_tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_duration_wakes_after_the_hosts_now_and_a_time_at_itself() {
        let after = payload::WorkerWaitUntil {
            for_ms: Some(60_000),
            until_ms: None,
            output: Value::Null,
        };
        assert_eq!(wake_of(&after).at(1_000), 61_000);
        let at = payload::WorkerWaitUntil {
            for_ms: None,
            until_ms: Some(5_000),
            output: Value::Null,
        };
        assert_eq!(wake_of(&at).at(1_000), 5_000);
        let far = payload::WorkerWaitUntil {
            for_ms: Some(u64::MAX),
            until_ms: None,
            output: Value::Null,
        };
        assert_eq!(wake_of(&far).at(1_000), i64::MAX);
    }
}
