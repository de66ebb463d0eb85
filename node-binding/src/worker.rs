//! The worker library for the Node worker runtime (`worker.js`): a thin, synchronous face over
//! `piw_client::worker`. A child serves exactly one run, so blocking its own thread on a reply is
//! the simplest correct thing; the host, not the child, renews the claim while node code runs.

use std::collections::BTreeMap;
use std::path::Path;

use napi::Result;
use napi_derive::napi;
use piw_client::engine::store::Wake;
use piw_client::graph::Graph;
use piw_client::protocol::payload::{
    AttemptOutcome, DecisionKind, EffectResult, InteractionKind, RetryContract,
};
use piw_client::worker::{self, LaunchEnvelope, MountedSource, WorkerError};
use serde_json::{json, Value};

use crate::{graph, js_error};

/// SHA-256 hex of a file's bytes (the hash the host records for sources).
#[napi(js_name = "hashFile")]
pub fn hash_file(path: String) -> Result<String> {
    worker::hash_file(Path::new(&path)).map_err(|e| js_error("io", format!("{path}: {e}")))
}

/// One run's worker session inside a child.
#[napi]
pub struct Worker {
    env: LaunchEnvelope,
    session: Option<worker::Worker>,
    graph: Option<Graph>,
}

fn worker_error(e: WorkerError) -> napi::Error {
    let code = match &e {
        _ if e.is_stale() => "stale",
        WorkerError::Envelope(_) => "malformed",
        WorkerError::SourceChanged(_) => "source_changed",
        WorkerError::Client(c) => c.code_str(),
        WorkerError::Reply(_) => "protocol",
        WorkerError::Refused(_) => "refused",
        WorkerError::Parked => "stale",
        WorkerError::ValueTooLarge { .. } => "value_too_large",
        WorkerError::ValueUnreadable(_) => "value_unreadable",
    };
    js_error(code, e.to_string())
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| js_error("malformed", format!("{what}: {e}")))
}

#[napi]
impl Worker {
    /// Reads a launch envelope (the JSON text the host wrote to the child's stdin).
    #[napi(constructor)]
    pub fn new(envelope_text: String) -> napi::Result<Self> {
        let env = worker::read_envelope(envelope_text.as_bytes()).map_err(worker_error)?;
        Ok(Self {
            env,
            session: None,
            graph: None,
        })
    }

    /// The envelope without its secret: `{ runId, generation, mode, sourceRoot, sourceHash,
    /// mountedSources, projectDir, inputHash }`.
    #[napi(getter)]
    pub fn envelope(&self) -> Value {
        let e = &self.env;
        json!({
            "runId": e.run_id, "generation": e.generation, "mode": e.mode,
            "sourceRoot": e.source_root, "sourceHash": e.source_hash,
            "mountedSources": e.mounted_sources, "projectDir": e.project_dir,
            "inputHash": e.input_hash,
        })
    }

    /// Checks the root source and every saved mounted source against their recorded hashes.
    /// Call before importing any workflow code. Throws `source_changed`.
    #[napi]
    pub fn verify_sources(&self) -> Result<()> {
        worker::verify_sources(&self.env).map_err(worker_error)
    }

    /// Compares the mounts the loaded workflow resolved (`{ name: { path, hash } }`) with the
    /// ones saved at the first activation. Throws `source_changed`.
    #[napi]
    pub fn compare_mounts(&self, resolved: Value) -> Result<()> {
        let resolved: BTreeMap<String, MountedSource> = parse("mounted sources", resolved)?;
        worker::compare_mounts(&self.env.mounted_sources, &resolved).map_err(worker_error)
    }

    /// Connects and says hello. `definition` is the graph snapshot (`null` when the child only
    /// reports a changed source). With `startNode`, a fresh run's first attempt is opened in
    /// the same transaction (`resume.attempt_id` is then set: skip `nodeStarted`). Returns the
    /// host's reply `{ mode, resume, input, nodeInput, definition, features, answer?,
    /// submission? }` (`features`: what the host understands beyond the protocol's first
    /// release, empty from an older host).
    #[napi]
    pub fn hello(
        &mut self,
        definition: Option<Value>,
        mounts: Value,
        start_node: Option<bool>,
    ) -> Result<Value> {
        let mounts: BTreeMap<String, MountedSource> = parse("mounted sources", mounts)?;
        let mut session = worker::Worker::connect(self.env.clone()).map_err(worker_error)?;
        let reply = if start_node == Some(true) {
            session.hello_and_start(definition, &mounts)
        } else {
            session.hello(definition, &mounts)
        }
        .map_err(worker_error)?;
        self.session = Some(session);
        if let Some(def) = &reply.definition {
            self.graph = Some(graph::parse(def)?);
        }
        Ok(json!({
            "stop": reply.stop,
            "mode": reply.mode, "resume": reply.resume, "input": reply.input,
            "nodeInput": reply.node_input, "results": reply.results, "definition": reply.definition,
            "answer": reply.answer, "submission": reply.submission, "timer": reply.timer,
            "features": reply.features,
        }))
    }

    /// Where `outcome` of node `from` leads in the run's stored graph (see `routeGraph`).
    #[napi]
    pub fn route(&self, from: String, outcome: Value) -> Result<Value> {
        let graph = self
            .graph
            .as_ref()
            .ok_or_else(|| js_error("protocol", "no graph: call hello with a definition first"))?;
        graph::route(graph, &from, &outcome)
    }

    fn session(&mut self) -> Result<&mut worker::Worker> {
        self.session
            .as_mut()
            .ok_or_else(|| js_error("protocol", "call hello first"))
    }

    /// A node attempt begins; returns its attempt id.
    #[napi]
    ///
    /// `timeoutMs` is for a node whose deadline is decided when each attempt starts (graph
    /// `timeout_at_start`): the timeout decided for this attempt, `null` for none.
    pub fn node_started(&mut self, node_id: String, timeout_ms: Option<f64>) -> Result<String> {
        let timeout_ms = timeout_arg(timeout_ms)?;
        self.session()?
            .node_started_with_timeout(&node_id, timeout_ms)
            .map_err(worker_error)
    }

    /// Proposes the next node; returns `{ attemptId, parked }` (exit when parked).
    #[napi]
    ///
    /// `nextTimeoutMs`: as `nodeStarted`'s `timeoutMs`, for the attempt of `nextNode`.
    pub fn transition(
        &mut self,
        outcome: Value,
        next_node: String,
        next_timeout_ms: Option<f64>,
    ) -> Result<Value> {
        let outcome: AttemptOutcome = parse("outcome", outcome)?;
        let next_timeout_ms = timeout_arg(next_timeout_ms)?;
        let r = self
            .session()?
            .transition_with_timeout(outcome, &next_node, next_timeout_ms)
            .map_err(worker_error)?;
        Ok(json!({ "attemptId": r.next_attempt_id, "parked": r.parked }))
    }

    /// Records a step without telling the host yet (see `piw_client::worker::Worker::
    /// defer_transition`): `nextNode` must be a compute node without a timeout. The next
    /// `transition` or `complete` carries it; other node operations report it first, and so
    /// does this one when the step would not fit beside them in one message.
    #[napi]
    pub fn defer_transition(&mut self, outcome: Value, next_node: String) -> Result<()> {
        let outcome: AttemptOutcome = parse("outcome", outcome)?;
        self.session()?
            .defer_transition(outcome, &next_node)
            .map_err(worker_error)
    }

    /// The encoded size of the deferred steps, in bytes.
    #[napi(getter)]
    pub fn deferred_bytes(&self) -> u32 {
        self.session
            .as_ref()
            .map_or(0, |s| u32::try_from(s.deferred_bytes()).unwrap_or(u32::MAX))
    }

    /// Reports the deferred steps now (opening the last deferred node's attempt); returns
    /// whether the run parked (the worker is then done).
    #[napi]
    pub fn flush(&mut self) -> Result<bool> {
        self.session()?.flush().map_err(worker_error)
    }

    /// How many steps are deferred.
    #[napi(getter)]
    pub fn deferred_steps(&self) -> u32 {
        self.session
            .as_ref()
            .map_or(0, |s| u32::try_from(s.deferred_steps()).unwrap_or(u32::MAX))
    }

    /// The run finishes with `result`; `presentation` is what the workflow's
    /// `presentationPrompt` function gave for it.
    #[napi]
    pub fn complete(
        &mut self,
        outcome: Value,
        result: Value,
        presentation: Option<String>,
    ) -> Result<()> {
        let outcome: AttemptOutcome = parse("outcome", outcome)?;
        self.session()?
            .complete_presented(outcome, result, presentation)
            .map(drop)
            .map_err(worker_error)
    }

    /// The run cannot continue: it fails, or stops for review when `review`.
    #[napi]
    pub fn fail(&mut self, error: String, review: bool) -> Result<()> {
        self.session()?
            .fail(&error, review)
            .map(drop)
            .map_err(worker_error)
    }

    /// Parks the run on a checkpoint (`kind` `checkpoint`) or a protected human decision
    /// (`human_decision`); returns the decision id. Exit afterwards.
    #[napi]
    pub fn wait(&mut self, kind: String, request: Value) -> Result<String> {
        let kind: DecisionKind = parse("decision kind", json!(kind))?;
        self.session()?.wait(kind, request).map_err(worker_error)
    }

    /// Parks the run on a durable timer the host holds: `forMs` after the host's now, or at
    /// `untilMs` (Unix ms), exactly one of them; the attempt succeeds with `output` when it
    /// fires (resume `timer_fired`). Returns `{ timerId, wakeAt }`. Exit afterwards.
    #[napi]
    pub fn wait_until(
        &mut self,
        for_ms: Option<f64>,
        until_ms: Option<f64>,
        output: Value,
    ) -> Result<Value> {
        let wake = match (for_ms, until_ms) {
            (Some(ms), None) => Wake::After(millis_arg("forMs", ms)?),
            (None, Some(at)) => {
                Wake::At(i64::try_from(millis_arg("untilMs", at)?).unwrap_or(i64::MAX))
            }
            _ => {
                return Err(js_error(
                    "invalid_input",
                    "waitUntil needs exactly one of forMs and untilMs",
                ))
            }
        };
        let (timer_id, wake_at) = self
            .session()?
            .wait_until(wake, output)
            .map_err(worker_error)?;
        Ok(json!({ "timerId": timer_id, "wakeAt": wake_at }))
    }

    /// Parks the run on an interactive step (`agent` or `assistant_message`) answered in the
    /// origin session; returns the interaction id. Exit afterwards.
    #[napi]
    pub fn request_interaction(&mut self, kind: String, request: Value) -> Result<String> {
        let kind: InteractionKind = parse("interaction kind", json!(kind))?;
        self.session()?
            .request_interaction(kind, request)
            .map_err(worker_error)
    }

    /// Records a workflow message for the origin session.
    #[napi]
    pub fn notify(&mut self, content: Value) -> Result<()> {
        self.session()?
            .notify(content)
            .map(drop)
            .map_err(worker_error)
    }

    /// Publishes informational progress; returns the run's revision after the commit (the
    /// update's place in the run's history; its event may have been over the run's event
    /// budget), when the host gives it.
    #[napi]
    pub fn progress(&mut self, message: String, data: Value) -> Result<Option<i64>> {
        self.session()?
            .progress(&message, data)
            .map(|receipt| {
                receipt
                    .revision
                    .or_else(|| receipt.body.get("seq").and_then(Value::as_u64))
                    .and_then(|r| i64::try_from(r).ok())
            })
            .map_err(worker_error)
    }

    /// Reserves a managed effect: `{ reservation: "reserved", effect_id }`,
    /// `{ reservation: "already_applied", receipt }` or `{ reservation: "already_failed",
    /// error }`. `contract` is `never`, `idempotency_key` or `read_back`.
    #[napi]
    pub fn reserve_effect(
        &mut self,
        key: String,
        fingerprint: String,
        contract: String,
    ) -> Result<Value> {
        let contract: RetryContract = parse("retry contract", json!(contract))?;
        let r = self
            .session()?
            .reserve_effect(&key, &fingerprint, contract)
            .map_err(worker_error)?;
        serde_json::to_value(r).map_err(|e| js_error("protocol", e.to_string()))
    }

    /// The reserved effect is about to be performed.
    #[napi]
    pub fn effect_applying(&mut self, effect_id: String) -> Result<()> {
        self.session()?
            .effect_applying(&effect_id)
            .map(drop)
            .map_err(worker_error)
    }

    /// The effect ended: `{ status: "applied", receipt }` or `{ status: "failed", error }`.
    #[napi]
    pub fn settle_effect(&mut self, effect_id: String, result: Value) -> Result<()> {
        let result: EffectResult = parse("effect result", result)?;
        self.session()?
            .settle_effect(&effect_id, result)
            .map(drop)
            .map_err(worker_error)
    }

    /// The verdict on a submission in validate mode: `error` `null` accepts it.
    #[napi]
    pub fn validation_result(
        &mut self,
        submission_id: String,
        error: Option<String>,
    ) -> Result<()> {
        self.session()?
            .validation_result(&submission_id, error)
            .map(drop)
            .map_err(worker_error)
    }

    /// Tells the host the child is about to exit.
    #[napi]
    pub fn exit(&mut self, reason: String) -> Result<()> {
        self.session()?
            .exit(&reason)
            .map(drop)
            .map_err(worker_error)
    }
}

/// A timeout in milliseconds from JavaScript: a positive whole number (rounded up), or none.
/// A non-negative whole number of milliseconds from JavaScript (a duration or a Unix time).
fn millis_arg(what: &str, ms: f64) -> Result<u64> {
    if ms.is_finite() && (0.0..=9_007_199_254_740_991.0).contains(&ms) {
        // In range and not negative: the conversion is exact after `ceil`.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(ms.ceil() as u64)
    } else {
        Err(js_error(
            "invalid_input",
            format!("{what} must be a non-negative number of milliseconds, got {ms}"),
        ))
    }
}

fn timeout_arg(ms: Option<f64>) -> Result<Option<u64>> {
    match ms {
        None => Ok(None),
        Some(ms) if ms.is_finite() && ms > 0.0 && ms <= 9_007_199_254_740_991.0 => {
            // In range and positive: the conversion is exact after `ceil`.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok(Some(ms.ceil() as u64))
        }
        Some(ms) => Err(js_error(
            "invalid_input",
            format!("a timeout must be a positive number of milliseconds or null, got {ms}"),
        )),
    }
}
