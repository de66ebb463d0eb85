//! The worker library: what a child process uses to execute one run for the host.
//!
//! A child reads its immutable [`LaunchEnvelope`] from stdin, verifies the root source and every
//! mounted source **before loading any workflow code** ([`verify_sources`]), connects, says
//! hello with its one-time token, and then proposes each step. The child never opens the
//! database: every durable fact goes through the host, which checks it against the run's claim
//! generation and graph snapshot. When the host answers `stale_generation` or `claim_lost` the
//! child must stop quietly ([`WorkerError::is_stale`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::client::{BlockingClient, ClientError};
use crate::paths::PiwPaths;
use crate::protocol::value::{self, read_slot, Slot, ValueReader, ValueRef};
use crate::protocol::{canonical_json, payload, Receipt, RejectionCode, Request, RequestBody};

pub use crate::protocol::launch::{LaunchEnvelope, MountedSource, LAUNCH_SCHEMA};

/// How long a worker keeps resending a message the host could not commit (`internal`: a full
/// disk, usually for seconds) before the refusal counts: well under the claim's lease (30 s by
/// default), during which the host cannot renew it either.
const INTERNAL_RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);
/// The longest pause between two such resends.
const INTERNAL_RETRY_MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Room in a payload for what surrounds the outcomes and result: field names, the next node,
/// the earlier steps' framing.
const PAYLOAD_ROOM: usize = 4 * 1024;

/// The length of `value` as JSON; a value that cannot be encoded counts as too large to fit.
fn encoded_len(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX / 2, |v| v.len())
}

/// Why a worker call failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot read the launch envelope: {0}")]
    Envelope(String),
    /// A source differs from the identity the run was started (or first loaded) with.
    #[error("source_changed: {0}")]
    SourceChanged(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("unexpected reply: {0}")]
    Reply(String),
    /// The host refused a proposal that disagrees with the run's graph and failed the run.
    #[error("the host refused the proposal: {0}")]
    Refused(String),
    /// Reporting deferred steps parked the run (a pause was requested): the worker is done.
    #[error("the run parked at its last boundary")]
    Parked,
    /// A value the workflow handed over is larger than the host stores
    /// ([`crate::protocol::MAX_VALUE_BYTES`]).
    #[error("value_too_large: {what} is {bytes} bytes of JSON, over the limit of {limit}")]
    ValueTooLarge {
        what: &'static str,
        bytes: u64,
        limit: u64,
    },
    /// A stored value read back does not match its reference.
    #[error("a stored value could not be read back: {0}")]
    ValueUnreadable(String),
}

impl WorkerError {
    /// The run moved on without this child (new generation, lost claim, host stopping): stop
    /// quietly, write nothing, report nothing as a failure.
    pub fn is_stale(&self) -> bool {
        matches!(self, WorkerError::Parked)
            || matches!(
                self,
                WorkerError::Client(e) if matches!(
                    e.code(),
                    Some(RejectionCode::StaleGeneration | RejectionCode::ClaimLost | RejectionCode::HostShuttingDown)
                ) || matches!(e, ClientError::Disconnected)
            )
    }
}

/// Reads the envelope from `reader` (the child's stdin).
pub fn read_envelope(mut reader: impl Read) -> Result<LaunchEnvelope, WorkerError> {
    let mut text = String::new();
    reader
        .read_to_string(&mut text)
        .map_err(|e| WorkerError::Envelope(e.to_string()))?;
    let env: LaunchEnvelope =
        serde_json::from_str(&text).map_err(|e| WorkerError::Envelope(e.to_string()))?;
    if env.schema != LAUNCH_SCHEMA {
        return Err(WorkerError::Envelope(format!(
            "schema {:?}, expected {LAUNCH_SCHEMA:?}",
            env.schema
        )));
    }
    Ok(env)
}

/// SHA-256 hex of a file's bytes.
pub fn hash_file(path: &Path) -> Result<String, std::io::Error> {
    Ok(crate::ids::sha256_hex(&std::fs::read(path)?))
}

/// Verifies the root source and every saved mounted source against their recorded hashes.
/// Call it before loading any workflow code: a changed source must stop the run before any
/// of its code runs.
pub fn verify_sources(env: &LaunchEnvelope) -> Result<(), WorkerError> {
    let check = |what: &str, path: &str, expected: &str| -> Result<(), WorkerError> {
        match hash_file(Path::new(path)) {
            Ok(actual) if actual == expected => Ok(()),
            Ok(actual) => Err(WorkerError::SourceChanged(format!(
                "{what} {path} changed since the run started (hash {actual}, recorded {expected})"
            ))),
            Err(e) => Err(WorkerError::SourceChanged(format!(
                "{what} {path} cannot be read: {e}"
            ))),
        }
    };
    check("workflow source", &env.source_root, &env.source_hash)?;
    for (name, src) in &env.mounted_sources {
        check(&format!("mounted source {name:?}"), &src.path, &src.hash)?;
    }
    Ok(())
}

/// Compares the mounted sources a workflow resolved at load with the saved map.
pub fn compare_mounts(
    saved: &BTreeMap<String, MountedSource>,
    resolved: &BTreeMap<String, MountedSource>,
) -> Result<(), WorkerError> {
    if saved.is_empty() || saved == resolved {
        return Ok(());
    }
    Err(WorkerError::SourceChanged(format!(
        "the workflow now mounts {:?}, the run was started with {:?}",
        resolved.keys().collect::<Vec<_>>(),
        saved.keys().collect::<Vec<_>>()
    )))
}

/// What the host tells a child after `worker.hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloReply {
    /// Set when the child must exit at once (for example the graph it sent is invalid and
    /// the run failed); the other fields are then empty.
    #[serde(default)]
    pub stop: Option<String>,
    /// `run` or `validate`.
    #[serde(default)]
    pub mode: String,
    /// Where to pick up (`fresh`, `continue`, `validate`, `accepted`, `interaction_expired`,
    /// `timer_fired`).
    #[serde(default)]
    pub resume: Value,
    /// The run's input.
    #[serde(default)]
    pub input: Value,
    /// The input of the node the child starts with: the latest succeeded node output, or the
    /// run's input before any node succeeded.
    #[serde(default)]
    pub node_input: Value,
    /// The latest finished attempt of every node so far, in the order they finished: each
    /// `{node, outcome: "ok"|"failed"|"timed_out", output, error, visits}`. A node's context is built
    /// from it (`outputs`, `results`), so a resumed child sees what an uninterrupted one would.
    #[serde(default)]
    pub results: Vec<Value>,
    /// The host left results out to fit its reply in a frame: the rest come in
    /// `worker.results` pages. [`Worker::hello`] fetches them all before it returns (so this
    /// is `false` in what it returns).
    #[serde(default)]
    pub results_more: bool,
    /// The run's stored graph snapshot.
    pub definition: Option<Value>,
    /// The answer of the decision a `continue` resumes after.
    #[serde(default)]
    pub answer: Option<Value>,
    /// The submission a `validate` child must judge, or the one an `accepted` resume carries.
    #[serde(default)]
    pub submission: Option<Value>,
    /// The fired timer a `timer_fired` resume continues after: `{timer_id, wake_at, output}`;
    /// the attempt succeeds with `output`.
    #[serde(default)]
    pub timer: Option<Value>,
    /// What the host understands beyond the protocol's first release
    /// ([`payload::HOST_FEATURES`]); empty from a host older than the list.
    #[serde(default)]
    pub features: Vec<String>,
    /// The run lost its last child: report every step at once (no deferred steps), so a
    /// loss is recorded against the node that was running. [`Worker::defer_transition`]
    /// then reports the step itself.
    #[serde(default)]
    pub report_each_step: bool,
}

/// A page of `worker.results`.
#[derive(Debug, Deserialize)]
struct ResultsPage {
    #[serde(default)]
    results: Vec<Value>,
    #[serde(default)]
    more: bool,
}

/// What the host answered to a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionReply {
    pub next_attempt_id: String,
    /// The run was paused: the host parked it; the child must exit now.
    pub parked: bool,
}

/// A connected, authenticated worker.
pub struct Worker {
    client: BlockingClient,
    env: LaunchEnvelope,
    seq: u64,
    /// The attempt the host has open, and its node.
    attempt_id: Option<String>,
    node_id: Option<String>,
    /// Steps taken since then and not yet reported ([`Worker::defer_transition`]).
    deferred: Vec<payload::EarlierStep>,
    /// Their encoded size, so a batch stays well inside the host's payload limit.
    deferred_bytes: usize,
    /// The host takes a completion's result from its output (`result_is_output`): it said so
    /// in its hello reply. An older host would drop the flag and store no result.
    host_takes_result_from_output: bool,
    /// The hello reply asked for every step to be reported at once (`report_each_step`).
    report_each_step: bool,
    /// The host stores large values (`large_values` in its hello reply): values over
    /// [`value::INLINE_VALUE_BYTES`] are uploaded and sent as references.
    host_stores_large_values: bool,
}

impl Worker {
    /// Connects to the host named in the envelope.
    pub fn connect(env: LaunchEnvelope) -> Result<Self, WorkerError> {
        let mut paths = PiwPaths::for_home(PathBuf::from("/"));
        paths.socket = env.socket_path.clone();
        let client = BlockingClient::connect(&paths)?;
        Ok(Self {
            client,
            env,
            seq: 0,
            attempt_id: None,
            node_id: None,
            deferred: Vec::new(),
            deferred_bytes: 0,
            host_takes_result_from_output: false,
            report_each_step: false,
            host_stores_large_values: false,
        })
    }

    /// The envelope this worker runs under.
    pub fn envelope(&self) -> &LaunchEnvelope {
        &self.env
    }

    /// The current attempt, once a node started or the hello resumed one.
    pub fn attempt_id(&self) -> Option<&str> {
        self.attempt_id.as_deref()
    }

    fn request(&mut self, body: RequestBody) -> Request {
        self.seq += 1;
        let mut r = Request::new(
            format!("{}-g{}-{}", self.env.run_id, self.env.generation, self.seq),
            body,
        )
        .with_run_id(&self.env.run_id)
        .with_generation(self.env.generation);
        if let Some(node) = &self.node_id {
            r = r.with_node_id(node);
        }
        if let Some(a) = &self.attempt_id {
            r = r.with_attempt_id(a);
        }
        r
    }

    /// Operations on the current node need its attempt open on the host.
    fn flush_for_node_operation(&mut self) -> Result<(), WorkerError> {
        if self.flush()? {
            // The run parked at the flushed boundary: this worker is done with it.
            return Err(WorkerError::Parked);
        }
        Ok(())
    }

    fn call(&mut self, body: RequestBody) -> Result<Receipt, WorkerError> {
        let req = self.request(body);
        let receipt = self.send_retrying_internal(req)?;
        if let Some(reason) = receipt.body.get("refused").and_then(Value::as_str) {
            // The host refused the proposal and failed the run: nothing more to do.
            return Err(WorkerError::Refused(reason.to_owned()));
        }
        Ok(receipt)
    }

    /// Sends `req`; an `internal` rejection (the host's commit failed, this attempt committed nothing:
    /// a full disk for a while) is retried with the same request id, with growing pauses, for
    /// [`INTERNAL_RETRY_BUDGET`] before it counts: a child that gave up after a moment would be
    /// counted lost and its node run again. The host takes back what such a message changed in
    /// its memory, so even a hello may be said again.
    fn send_retrying_internal(&mut self, req: Request) -> Result<Receipt, ClientError> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            match self.client.send(req.clone()) {
                Err(ClientError::Rejected(r))
                    if r.code == RejectionCode::Internal
                        && started.elapsed() + pause < INTERNAL_RETRY_BUDGET =>
                {
                    tracing::warn!(kind = req.body.kind_str(), message = %r.message, "the host could not commit; trying again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(INTERNAL_RETRY_MAX_PAUSE);
                }
                other => return other,
            }
        }
    }

    /// Refuses `v` as a value (a node's output, a run's result) when its canonical JSON is
    /// over [`value::MAX_VALUE_BYTES`], as [`Worker::send_value`] would when it is sent. A
    /// runtime checks a node's output with it before proposing the step, so that the node
    /// fails with `value_too_large` (routed like any failure) rather than the child ending
    /// with an error, which the host takes for a lost child and relaunches, to compute the
    /// same value again, until the run stops for review.
    pub fn check_value_size(&self, what: &'static str, v: &Value) -> Result<(), WorkerError> {
        if !self.host_stores_large_values {
            return Ok(());
        }
        let bytes = u64::try_from(canonical_json(v).len()).unwrap_or(u64::MAX);
        if bytes > value::MAX_VALUE_BYTES {
            return Err(WorkerError::ValueTooLarge {
                what,
                bytes,
                limit: value::MAX_VALUE_BYTES,
            });
        }
        Ok(())
    }

    /// `value` as it is sent to the host: itself when small (wrapped when its top level would
    /// read as a reference), or, over [`value::INLINE_VALUE_BYTES`], uploaded in chunks
    /// (`worker.value_put`) and replaced by its reference. A host without `large_values` gets
    /// the value as it is.
    pub fn send_value(&mut self, what: &'static str, v: Value) -> Result<Value, WorkerError> {
        if !self.host_stores_large_values {
            return Ok(v);
        }
        let text = canonical_json(&v);
        if text.len() <= value::INLINE_VALUE_BYTES {
            return Ok(value::wrap_inline(v));
        }
        let bytes = u64::try_from(text.len()).unwrap_or(u64::MAX);
        if bytes > value::MAX_VALUE_BYTES {
            return Err(WorkerError::ValueTooLarge {
                what,
                bytes,
                limit: value::MAX_VALUE_BYTES,
            });
        }
        let reference = ValueRef::for_canonical(&text);
        self.upload(&reference, text.as_bytes())?;
        Ok(reference.to_json())
    }

    /// Sends `bytes` as the value `reference` names, from where the host's copy ends (an
    /// empty first chunk asks: a value stored before, by any run, is not sent again).
    fn upload(&mut self, reference: &ValueRef, bytes: &[u8]) -> Result<(), WorkerError> {
        let mut offset = 0usize;
        let mut end = 0usize;
        loop {
            let r = self.call(RequestBody::WorkerValuePut(payload::WorkerValuePut {
                sha256: reference.sha256.clone(),
                bytes: reference.bytes,
                offset: u64::try_from(offset).unwrap_or(u64::MAX),
                data: value::chunk_to_hex(&bytes[offset..end]),
            }))?;
            if r.body.get("complete").and_then(Value::as_bool) == Some(true) {
                return Ok(());
            }
            let received = r
                .body
                .get("received")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n < bytes.len() && (n > offset || end == offset))
                .ok_or_else(|| {
                    WorkerError::Reply(format!("worker.value_put answered {}", r.body))
                })?;
            offset = received;
            end = (offset + value::VALUE_PUT_CHUNK_BYTES).min(bytes.len());
        }
    }

    /// `stored` as the workflow's code sees it: a reference read back (`value.get`, a frame
    /// at a time) and checked against its hash, a literal unwrapped, anything else itself.
    pub fn resolve_value(&mut self, stored: Value) -> Result<Value, WorkerError> {
        let reference = match read_slot(&stored) {
            Ok(Slot::Reference(r)) => r,
            Ok(Slot::Inline(inner)) if std::ptr::eq(inner, &stored) => return Ok(stored),
            Ok(Slot::Inline(inner)) => return Ok(inner.clone()),
            Err(e) => return Err(WorkerError::ValueUnreadable(e.to_string())),
        };
        let mut reader = ValueReader::new(reference);
        while let Some(offset) = reader.next_offset() {
            let r = self.call(RequestBody::ValueGet(payload::ValueGet {
                sha256: reader.reference().sha256.clone(),
                offset,
                max_bytes: None,
            }))?;
            reader
                .accept(&r.body)
                .map_err(WorkerError::ValueUnreadable)?;
        }
        reader.finish().map_err(WorkerError::ValueUnreadable)
    }

    /// `outcome` as it is sent: a succeeded node's output through [`Worker::send_value`].
    fn send_outcome(
        &mut self,
        outcome: payload::AttemptOutcome,
    ) -> Result<payload::AttemptOutcome, WorkerError> {
        Ok(match outcome {
            payload::AttemptOutcome::Succeeded { output } => payload::AttemptOutcome::Succeeded {
                output: self.send_value("the node's output", output)?,
            },
            other => other,
        })
    }

    /// [`Worker::resolve_value`], reading each value once: `read` holds those read so far.
    fn resolve_value_once(
        &mut self,
        stored: Value,
        read: &mut BTreeMap<String, Value>,
    ) -> Result<Value, WorkerError> {
        let Ok(Slot::Reference(r)) = read_slot(&stored) else {
            return self.resolve_value(stored);
        };
        if let Some(value) = read.get(&r.sha256) {
            return Ok(value.clone());
        }
        let value = self.resolve_value(stored)?;
        read.insert(r.sha256, value.clone());
        Ok(value)
    }

    /// Authenticates with the one-time token; sends the graph snapshot and resolved mounts.
    pub fn hello(
        &mut self,
        definition: Option<Value>,
        mounted: &BTreeMap<String, MountedSource>,
    ) -> Result<HelloReply, WorkerError> {
        self.hello_with(definition, mounted, false)
    }

    /// [`Worker::hello`], asking the host to open the first node's attempt in the same
    /// transaction when the run starts fresh (`resume.attempt_id` is then set; do not call
    /// [`Worker::node_started`] for that node).
    pub fn hello_and_start(
        &mut self,
        definition: Option<Value>,
        mounted: &BTreeMap<String, MountedSource>,
    ) -> Result<HelloReply, WorkerError> {
        self.hello_with(definition, mounted, true)
    }

    fn hello_with(
        &mut self,
        definition: Option<Value>,
        mounted: &BTreeMap<String, MountedSource>,
        start_node: bool,
    ) -> Result<HelloReply, WorkerError> {
        let body = RequestBody::WorkerHello(payload::WorkerHello {
            child_token: self.env.child_token.clone(),
            pid: std::process::id(),
            definition,
            mounted_sources: Some(json!(mounted)),
            start_node,
        });
        let r = self.call(body)?;
        let mut reply: HelloReply =
            serde_json::from_value(r.body).map_err(|e| WorkerError::Reply(e.to_string()))?;
        while reply.results_more {
            let offset = u64::try_from(reply.results.len()).unwrap_or(u64::MAX);
            let r = self.call(RequestBody::WorkerResults(payload::WorkerResults {
                offset,
            }))?;
            let page: ResultsPage =
                serde_json::from_value(r.body).map_err(|e| WorkerError::Reply(e.to_string()))?;
            if page.results.is_empty() && page.more {
                return Err(WorkerError::Reply(
                    "worker.results returned an empty page with more to come".into(),
                ));
            }
            reply.results.extend(page.results);
            reply.results_more = page.more;
        }
        if let Some(a) = reply.resume.get("attempt_id").and_then(Value::as_str) {
            self.attempt_id = Some(a.to_owned());
        }
        if let Some(n) = reply.resume.get("node_id").and_then(Value::as_str) {
            self.node_id = Some(n.to_owned());
        }
        self.host_takes_result_from_output = reply
            .features
            .iter()
            .any(|f| f == payload::FEATURE_RESULT_IS_OUTPUT);
        self.report_each_step = reply.report_each_step;
        self.host_stores_large_values = reply
            .features
            .iter()
            .any(|f| f == payload::FEATURE_LARGE_VALUES);
        // The workflow's code sees values, never references; a value several places hold
        // (the node input is the latest output) is read once.
        let mut read = BTreeMap::new();
        for result in &mut reply.results {
            if let Some(output) = result.get_mut("output") {
                *output = self.resolve_value_once(output.take(), &mut read)?;
            }
        }
        reply.input = self.resolve_value_once(std::mem::take(&mut reply.input), &mut read)?;
        reply.node_input =
            self.resolve_value_once(std::mem::take(&mut reply.node_input), &mut read)?;
        if let Some(answer) = reply.answer.take() {
            reply.answer = Some(self.resolve_value_once(answer, &mut read)?);
        }
        // A large submission comes as the reference of a value its client uploaded
        // (`interaction.value_put`): the child judges the whole value.
        if let Some(payload) = reply.submission.as_mut().and_then(|s| s.get_mut("payload")) {
            *payload = self.resolve_value_once(payload.take(), &mut read)?;
        }
        if let Some(output) = reply.timer.as_mut().and_then(|t| t.get_mut("output")) {
            *output = self.resolve_value_once(output.take(), &mut read)?;
        }
        Ok(reply)
    }

    /// Starts `node_id`; returns the attempt id.
    pub fn node_started(&mut self, node_id: &str) -> Result<String, WorkerError> {
        self.node_started_with_timeout(node_id, None)
    }

    /// Starts `node_id`, a node whose deadline the workflow decides when each attempt starts
    /// (`timeout_at_start` in the graph), with the timeout decided for this attempt (`None`:
    /// no deadline); returns the attempt id. The host saves and enforces the deadline.
    pub fn node_started_with_timeout(
        &mut self,
        node_id: &str,
        timeout_ms: Option<u64>,
    ) -> Result<String, WorkerError> {
        self.node_id = Some(node_id.to_owned());
        self.attempt_id = None;
        let r = self.call(RequestBody::WorkerNodeStarted(payload::WorkerNodeStarted {
            deadline_ms: None,
            timeout_ms,
        }))?;
        let a = str_field(&r.body, "attempt_id")?;
        self.attempt_id = Some(a.clone());
        Ok(a)
    }

    /// Records, without telling the host yet, that the current node ended with `outcome` and
    /// the worker moves on to `next_node`, which must be a `compute` node without a timeout
    /// (the host refuses others). The next [`Worker::transition`] or [`Worker::complete`]
    /// carries the deferred steps; any other node operation sends them first. Until then the
    /// host knows neither step: if the worker dies, those pure nodes rerun.
    ///
    /// When this step would take the deferred steps past what one message can carry, the
    /// ones deferred so far are reported first ([`WorkerError::Parked`] if that parks the run:
    /// the worker is done). When the host asked for every step (its hello reply's
    /// `report_each_step`, after a lost child), the step is reported now, the same way.
    pub fn defer_transition(
        &mut self,
        outcome: payload::AttemptOutcome,
        next_node: &str,
    ) -> Result<(), WorkerError> {
        let outcome = self.send_outcome(outcome)?;
        let step = payload::EarlierStep {
            outcome,
            next_node: next_node.to_owned(),
        };
        let bytes = encoded_len(&step);
        self.flush_if_it_would_not_fit(bytes)?;
        self.deferred_bytes += bytes;
        self.deferred.push(step);
        if self.report_each_step {
            self.flush_for_node_operation()?;
        }
        Ok(())
    }

    /// How many steps are deferred.
    pub fn deferred_steps(&self) -> usize {
        self.deferred.len()
    }

    /// The encoded size of the deferred steps, in bytes. Report them (stop deferring) well
    /// before it nears the host's payload limit ([`crate::protocol::Limits`]).
    pub fn deferred_bytes(&self) -> usize {
        self.deferred_bytes
    }

    /// Reports deferred steps now, opening the last deferred node's attempt. Returns whether
    /// the run parked (exit then).
    pub fn flush(&mut self) -> Result<bool, WorkerError> {
        let Some(last) = self.deferred.pop() else {
            return Ok(false);
        };
        // It travels as the transition's own outcome now, no longer among the earlier steps.
        // Its output went through `send_value` when it was deferred: sent as it is now.
        self.deferred_bytes = self.deferred_bytes.saturating_sub(encoded_len(&last));
        Ok(self
            .transition_sent(last.outcome, &last.next_node, None)?
            .parked)
    }

    /// Proposes the current attempt's outcome and the next node (after any deferred steps).
    ///
    /// When the deferred steps and this outcome together would pass the payload limit, the
    /// deferred steps are reported first, on their own ([`WorkerError::Parked`] if that parks
    /// the run).
    pub fn transition(
        &mut self,
        outcome: payload::AttemptOutcome,
        next_node: &str,
    ) -> Result<TransitionReply, WorkerError> {
        self.transition_with_timeout(outcome, next_node, None)
    }

    /// [`Worker::transition`] into a node whose deadline the workflow decides when each
    /// attempt starts, with the timeout decided for the attempt it opens (`None`: no deadline).
    pub fn transition_with_timeout(
        &mut self,
        outcome: payload::AttemptOutcome,
        next_node: &str,
        next_timeout_ms: Option<u64>,
    ) -> Result<TransitionReply, WorkerError> {
        let outcome = self.send_outcome(outcome)?;
        self.transition_sent(outcome, next_node, next_timeout_ms)
    }

    /// [`Worker::transition_with_timeout`] with an outcome already as it is sent
    /// ([`Worker::send_outcome`]: a second pass would wrap a reference as a literal).
    fn transition_sent(
        &mut self,
        outcome: payload::AttemptOutcome,
        next_node: &str,
        next_timeout_ms: Option<u64>,
    ) -> Result<TransitionReply, WorkerError> {
        self.flush_if_it_would_not_fit(encoded_len(&outcome))?;
        let earlier = std::mem::take(&mut self.deferred);
        self.deferred_bytes = 0;
        let r = self.call(RequestBody::WorkerTransition(payload::WorkerTransition {
            outcome,
            next_node: next_node.to_owned(),
            earlier,
            next_timeout_ms,
        }))?;
        let next = str_field(&r.body, "attempt_id")?;
        self.node_id = Some(next_node.to_owned());
        self.attempt_id = Some(next.clone());
        Ok(TransitionReply {
            next_attempt_id: next,
            parked: r.body["parked"] == json!(true),
        })
    }

    /// Ends the run successfully with the last attempt's outcome.
    ///
    /// A result equal to the last output (the usual case) is sent once
    /// (`result_is_output`, when the host's hello listed it), and deferred steps that would not
    /// fit alongside are reported first, as for [`Worker::transition`].
    pub fn complete(
        &mut self,
        outcome: payload::AttemptOutcome,
        result: Value,
    ) -> Result<Receipt, WorkerError> {
        self.complete_presented(outcome, result, None)
    }

    /// [`Self::complete`], with the presentation instructions the workflow gave for
    /// this end (its `presentationPrompt` function's text).
    pub fn complete_presented(
        &mut self,
        outcome: payload::AttemptOutcome,
        result: Value,
        presentation: Option<String>,
    ) -> Result<Receipt, WorkerError> {
        let result_is_output = self.host_takes_result_from_output
            && !result.is_null()
            && matches!(&outcome, payload::AttemptOutcome::Succeeded { output } if *output == result);
        let result = if result_is_output || result.is_null() {
            Value::Null
        } else {
            self.send_value("the run's result", result)?
        };
        let outcome = self.send_outcome(outcome)?;
        self.flush_if_it_would_not_fit(encoded_len(&outcome) + encoded_len(&result))?;
        let earlier = std::mem::take(&mut self.deferred);
        self.deferred_bytes = 0;
        self.call(RequestBody::WorkerComplete(payload::WorkerComplete {
            outcome,
            result,
            result_is_output,
            earlier,
            presentation,
        }))
    }

    /// Reports the deferred steps now when they and `own_bytes` more would pass the payload
    /// limit in one message, which the host would refuse (and the client would not send).
    fn flush_if_it_would_not_fit(&mut self, own_bytes: usize) -> Result<(), WorkerError> {
        let budget = crate::protocol::Limits::default()
            .max_payload_bytes
            .saturating_sub(PAYLOAD_ROOM);
        if !self.deferred.is_empty() && self.deferred_bytes.saturating_add(own_bytes) > budget {
            self.flush_for_node_operation()?;
        }
        Ok(())
    }

    /// Ends the run as failed (or stops it for review).
    pub fn fail(&mut self, error: &str, review: bool) -> Result<Receipt, WorkerError> {
        self.flush_for_node_operation()?;
        self.call(RequestBody::WorkerFail(payload::WorkerFail {
            error: error.to_owned(),
            review,
        }))
    }

    /// Parks the run on a checkpoint or protected human decision. Exit after it.
    pub fn wait(
        &mut self,
        kind: payload::DecisionKind,
        request: Value,
    ) -> Result<String, WorkerError> {
        self.flush_for_node_operation()?;
        let request = self.send_value("the decision's request", request)?;
        let r = self.call(RequestBody::WorkerWait(payload::WorkerWait {
            decision_kind: kind,
            request,
        }))?;
        str_field(&r.body, "decision_id")
    }

    /// Parks the run on a durable timer until `wake`: the host decides the wake time once and
    /// holds the timer; when it fires, the next child continues the attempt with `output`
    /// (`timer_fired`). Returns the timer id and the wake time. Exit after it.
    pub fn wait_until(
        &mut self,
        wake: piw_engine::store::Wake,
        output: Value,
    ) -> Result<(String, i64), WorkerError> {
        self.flush_for_node_operation()?;
        // The node's output when it wakes may be as large as any output: stored apart.
        let output = self.send_value("the wait's output", output)?;
        let (for_ms, until_ms) = match wake {
            piw_engine::store::Wake::After(ms) => (Some(ms), None),
            piw_engine::store::Wake::At(at) => (None, Some(u64::try_from(at).unwrap_or(0))),
        };
        let r = self.call(RequestBody::WorkerWaitUntil(payload::WorkerWaitUntil {
            for_ms,
            until_ms,
            output,
        }))?;
        let wake_at = r.body["wake_at"]
            .as_i64()
            .ok_or_else(|| WorkerError::Reply("worker.wait_until: no wake_at".into()))?;
        Ok((str_field(&r.body, "timer_id")?, wake_at))
    }

    /// Parks the run on an interactive request for the origin session. Exit after it.
    pub fn request_interaction(
        &mut self,
        kind: payload::InteractionKind,
        request: Value,
    ) -> Result<String, WorkerError> {
        self.flush_for_node_operation()?;
        let request = self.send_value("the interaction's request", request)?;
        let r = self.call(RequestBody::WorkerInteractionRequest(
            payload::WorkerInteractionRequest {
                interaction_kind: kind,
                request,
                deadline_ms: None,
            },
        ))?;
        str_field(&r.body, "interaction_id")
    }

    /// Records a notify node's message.
    pub fn notify(&mut self, content: Value) -> Result<Receipt, WorkerError> {
        self.flush_for_node_operation()?;
        let content = self.send_value("the message", content)?;
        self.call(RequestBody::WorkerNotify(payload::WorkerNotify { content }))
    }

    /// Publishes progress (kept as an event).
    pub fn progress(&mut self, message: &str, data: Value) -> Result<Receipt, WorkerError> {
        self.call(RequestBody::WorkerProgress(payload::WorkerProgress {
            message: message.to_owned(),
            data,
        }))
    }

    /// Reserves a managed effect; the reply says whether to apply it or what happened before.
    pub fn reserve_effect(
        &mut self,
        key: &str,
        fingerprint: &str,
        contract: payload::RetryContract,
    ) -> Result<piw_engine::store::Reservation, WorkerError> {
        self.flush_for_node_operation()?;
        let r = self.call(RequestBody::WorkerEffectReserve(
            payload::WorkerEffectReserve {
                effect_key: key.to_owned(),
                fingerprint: fingerprint.to_owned(),
                retry_contract: contract,
            },
        ))?;
        let reservation =
            serde_json::from_value(r.body).map_err(|e| WorkerError::Reply(e.to_string()))?;
        Ok(match reservation {
            piw_engine::store::Reservation::AlreadyApplied { effect_id, receipt } => {
                piw_engine::store::Reservation::AlreadyApplied {
                    effect_id,
                    receipt: self.resolve_value(receipt)?,
                }
            }
            other => other,
        })
    }

    /// Marks a reserved effect as being applied (from now on a crash makes it uncertain).
    pub fn effect_applying(&mut self, effect_id: &str) -> Result<Receipt, WorkerError> {
        self.flush_for_node_operation()?;
        self.call(RequestBody::WorkerEffectApplying(
            payload::WorkerEffectApplying {
                effect_id: effect_id.to_owned(),
            },
        ))
    }

    /// Stores an effect's receipt or failure.
    pub fn settle_effect(
        &mut self,
        effect_id: &str,
        result: payload::EffectResult,
    ) -> Result<Receipt, WorkerError> {
        self.flush_for_node_operation()?;
        let result = match result {
            payload::EffectResult::Applied { receipt } => payload::EffectResult::Applied {
                receipt: self.send_value("the effect's receipt", receipt)?,
            },
            other => other,
        };
        self.call(RequestBody::WorkerEffectSettle(
            payload::WorkerEffectSettle {
                effect_id: effect_id.to_owned(),
                result,
            },
        ))
    }

    /// The verdict of `validate` on a submission.
    pub fn validation_result(
        &mut self,
        submission_id: &str,
        error: Option<String>,
    ) -> Result<Receipt, WorkerError> {
        self.flush_for_node_operation()?;
        self.call(RequestBody::WorkerValidationResult(
            payload::WorkerValidationResult {
                submission_id: submission_id.to_owned(),
                accepted: error.is_none(),
                error,
            },
        ))
    }

    /// Says goodbye before exiting.
    pub fn exit(&mut self, reason: &str) -> Result<Receipt, WorkerError> {
        self.flush_for_node_operation()?;
        self.call(RequestBody::WorkerExit(payload::WorkerExit {
            reason: reason.to_owned(),
        }))
    }
}

fn str_field(body: &Value, name: &str) -> Result<String, WorkerError> {
    body.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| WorkerError::Reply(format!("missing {name} in {body}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_reply_parses() {
        let reply: HelloReply =
            serde_json::from_value(json!({ "stop": "invalid workflow graph: x" })).unwrap();
        assert_eq!(reply.stop.as_deref(), Some("invalid workflow graph: x"));
        assert_eq!(reply.resume, Value::Null);
    }
}
