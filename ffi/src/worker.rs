//! The worker surface: what a workflow child written in C (or anything that loads libpiw)
//! calls, a face over `piw_client::worker` with the same checks the Rust and Node runtimes get.
//! A child serves one run, so every call blocks its thread until the host answers.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use piw_client::graph::{Graph, Outcome, Route};
use piw_client::protocol::payload::{
    AttemptOutcome, DecisionKind, EffectResult, InteractionKind, RetryContract,
};
use piw_client::worker::{self, LaunchEnvelope, MountedSource};
use serde_json::{json, Value};

use crate::error::{Error, ErrorSlot};
use crate::handles::{HasErrorSlot, Table};

pub struct WorkerObject {
    state: Mutex<WorkerState>,
    error: ErrorSlot,
}

struct WorkerState {
    env: LaunchEnvelope,
    session: Option<worker::Worker>,
    graph: Option<Graph>,
}

impl HasErrorSlot for WorkerObject {
    fn error_slot(&self) -> &ErrorSlot {
        &self.error
    }
}

pub static WORKERS: Table<WorkerObject> = Table::new("worker");

pub fn parse<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T, Error> {
    serde_json::from_value(v).map_err(|e| Error::invalid(format!("{what}: {e}")))
}

fn to_json(v: impl serde::Serialize) -> Result<String, Error> {
    serde_json::to_string(&v)
        .map_err(|e| Error::new(crate::error::PiwStatus::Protocol, "protocol", e.to_string()))
}

impl WorkerObject {
    pub fn open(envelope_text: &[u8]) -> Result<Self, Error> {
        let env = worker::read_envelope(envelope_text)?;
        Ok(WorkerObject {
            state: Mutex::new(WorkerState {
                env,
                session: None,
                graph: None,
            }),
            error: ErrorSlot::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, WorkerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the connected session.
    fn session<R>(
        &self,
        f: impl FnOnce(&mut worker::Worker) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut state = self.lock();
        let session = state
            .session
            .as_mut()
            .ok_or_else(|| Error::misuse("call piw_worker_hello first"))?;
        f(session)
    }

    /// The envelope without its secret.
    pub fn envelope(&self) -> Result<String, Error> {
        let s = self.lock();
        let e = &s.env;
        to_json(json!({
            "run_id": e.run_id, "generation": e.generation, "mode": e.mode,
            "source_root": e.source_root, "source_hash": e.source_hash,
            "mounted_sources": e.mounted_sources, "project_dir": e.project_dir,
            "input_hash": e.input_hash,
        }))
    }

    pub fn verify_sources(&self) -> Result<(), Error> {
        Ok(worker::verify_sources(&self.lock().env)?)
    }

    pub fn compare_mounts(&self, resolved: Value) -> Result<(), Error> {
        let resolved: BTreeMap<String, MountedSource> = parse("mounted sources", resolved)?;
        Ok(worker::compare_mounts(
            &self.lock().env.mounted_sources,
            &resolved,
        )?)
    }

    pub fn hello(
        &self,
        definition: Value,
        mounts: Value,
        start_node: bool,
    ) -> Result<String, Error> {
        let mounts: BTreeMap<String, MountedSource> = match mounts {
            Value::Null => BTreeMap::new(),
            other => parse("mounted sources", other)?,
        };
        let definition = (!definition.is_null()).then_some(definition);
        let mut state = self.lock();
        if state.session.is_some() {
            return Err(Error::misuse("piw_worker_hello was already called"));
        }
        let mut session = worker::Worker::connect(state.env.clone())?;
        let reply = if start_node {
            session.hello_and_start(definition, &mounts)
        } else {
            session.hello(definition, &mounts)
        }?;
        state.session = Some(session);
        if let Some(def) = &reply.definition {
            state.graph = Some(Graph::parse(def).map_err(|e| {
                Error::new(
                    crate::error::PiwStatus::Protocol,
                    "invalid_graph",
                    e.to_string(),
                )
            })?);
        }
        to_json(&reply)
    }

    pub fn route(&self, from: &str, outcome: &Value) -> Result<String, Error> {
        let state = self.lock();
        let graph = state.graph.as_ref().ok_or_else(|| {
            Error::misuse("no graph: call piw_worker_hello with a definition first")
        })?;
        let null = Value::Null;
        let parsed = match outcome.get("status").and_then(Value::as_str) {
            Some("succeeded") => Outcome::Succeeded(outcome.get("output").unwrap_or(&null)),
            Some("failed") => Outcome::Failed(
                outcome
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("failed"),
            ),
            Some("timed_out") => Outcome::TimedOut,
            _ => {
                return Err(Error::invalid(format!(
                    "an outcome needs status succeeded, failed or timed_out, got {outcome}"
                )))
            }
        };
        let route = graph
            .route(from, &parsed)
            .map_err(|e| Error::invalid(format!("cannot route from {from:?}: {e}")))?;
        to_json(match route {
            Route::Next(next) => json!({ "next": next }),
            Route::Complete => json!({ "complete": true }),
            Route::Fail { error, timed_out } => json!({ "fail": error, "timed_out": timed_out }),
        })
    }

    pub fn node_started(&self, node_id: &str) -> Result<String, Error> {
        self.session(|s| Ok(s.node_started(node_id)?))
    }

    pub fn transition(&self, outcome: Value, next_node: &str) -> Result<String, Error> {
        let outcome: AttemptOutcome = parse("outcome", outcome)?;
        let r = self.session(|s| Ok(s.transition(outcome, next_node)?))?;
        to_json(json!({ "attempt_id": r.next_attempt_id, "parked": r.parked }))
    }

    pub fn defer_transition(&self, outcome: Value, next_node: &str) -> Result<(), Error> {
        let outcome: AttemptOutcome = parse("outcome", outcome)?;
        self.session(|s| Ok(s.defer_transition(outcome, next_node)?))
    }

    pub fn flush(&self) -> Result<bool, Error> {
        self.session(|s| Ok(s.flush()?))
    }

    pub fn complete(&self, outcome: Value, result: Value) -> Result<(), Error> {
        let outcome: AttemptOutcome = parse("outcome", outcome)?;
        self.session(|s| Ok(s.complete(outcome, result).map(drop)?))
    }

    pub fn fail(&self, error: &str, review: bool) -> Result<(), Error> {
        self.session(|s| Ok(s.fail(error, review).map(drop)?))
    }

    pub fn wait(&self, kind: &str, request: Value) -> Result<String, Error> {
        let kind: DecisionKind =
            parse("decision kind (checkpoint or human_decision)", json!(kind))?;
        self.session(|s| Ok(s.wait(kind, request)?))
    }

    /// `wake` is `{"for_ms": n}` or `{"until_ms": t}` (exactly one).
    pub fn wait_until(&self, wake: Value, output: Value) -> Result<String, Error> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct WakeSpec {
            for_ms: Option<u64>,
            until_ms: Option<u64>,
        }
        let spec: WakeSpec = parse("wake ({\"for_ms\": n} or {\"until_ms\": t})", wake)?;
        let wake = match (spec.for_ms, spec.until_ms) {
            (Some(ms), None) => piw_client::engine::store::Wake::After(ms),
            (None, Some(at)) => {
                piw_client::engine::store::Wake::At(i64::try_from(at).unwrap_or(i64::MAX))
            }
            _ => {
                return Err(Error::invalid(
                    "wake needs exactly one of for_ms and until_ms",
                ))
            }
        };
        self.session(|s| Ok(s.wait_until(wake, output)?.0))
    }

    pub fn request_interaction(&self, kind: &str, request: Value) -> Result<String, Error> {
        let kind: InteractionKind =
            parse("interaction kind (agent or assistant_message)", json!(kind))?;
        self.session(|s| Ok(s.request_interaction(kind, request)?))
    }

    pub fn notify(&self, content: Value) -> Result<(), Error> {
        self.session(|s| Ok(s.notify(content).map(drop)?))
    }

    pub fn progress(&self, message: &str, data: Value) -> Result<(), Error> {
        self.session(|s| Ok(s.progress(message, data).map(drop)?))
    }

    pub fn reserve_effect(
        &self,
        key: &str,
        fingerprint: &str,
        contract: &str,
    ) -> Result<String, Error> {
        let contract: RetryContract = parse(
            "retry contract (never, idempotency_key or read_back)",
            json!(contract),
        )?;
        let r = self.session(|s| Ok(s.reserve_effect(key, fingerprint, contract)?))?;
        to_json(r)
    }

    pub fn effect_applying(&self, effect_id: &str) -> Result<(), Error> {
        self.session(|s| Ok(s.effect_applying(effect_id).map(drop)?))
    }

    pub fn settle_effect(&self, effect_id: &str, result: Value) -> Result<(), Error> {
        let result: EffectResult = parse("effect result", result)?;
        self.session(|s| Ok(s.settle_effect(effect_id, result).map(drop)?))
    }

    pub fn validation_result(&self, submission_id: &str, error: Option<&str>) -> Result<(), Error> {
        self.session(|s| {
            Ok(s.validation_result(submission_id, error.map(str::to_owned))
                .map(drop)?)
        })
    }

    pub fn exit(&self, reason: &str) -> Result<(), Error> {
        self.session(|s| Ok(s.exit(reason).map(drop)?))
    }
}
