//! `piw-json-worker`: the runtime for declarative `.workflow.json` workflows, built on the core
//! worker library. A workflow file is the data-only graph plus a behaviour per node:
//!
//! ```json
//! { "graph": { "name": "...", "start": "a", "nodes": {...}, "edges": [...] },
//!   "mounts": { "lib": "lib.json" },          // included sources, relative to the fixture
//!   "on_load_marker": "/tmp/x/loaded",        // written when the "module" loads
//!   "sleep_on_load_ms": 100,                  // the "module" takes this long to load
//!   "exit_after_ms": 500,                     // after completing the run, exit this much later
//!   "behaviors": { "a": { "return": {"x": 1} } } }
//! ```
//!
//! Behaviours (keys of one node's object, combinable where it makes sense):
//! `return` (output, default the input), `fail` (error text), `sleep_ms`, `wait_for_file` (a
//! path: the node runs until that file exists, a barrier a test releases), `spin_ms` or
//! `spin_forever` (busy loop that never yields), `flood_bytes` (to stdout and stderr),
//! `grandchild_ignoring_term` (pid file path: start a grandchild in the same process group that
//! ignores SIGTERM, then sleep forever), `detached_grandchild` (pid file path: the same, but the
//! grandchild leaves the group with `setsid`, as Node's `detached: true` does), `crash` (`before_propose` / `after_propose`, once per
//! `once_marker` file), `effect` (`{key, fingerprint, contract, append_to, line,
//! crash_while_applying_marker}`: appends `line` to `append_to`; under the `idempotency_key`
//! contract only when the file does not hold that line yet, as an external system with
//! idempotency keys would), `wait` (`checkpoint` / `human_decision`; `request` replaces its request),
//! `timer` (`{"for_ms": n}`, `{"until_ms": t}` or `{"until_from": "field"}`, a time in the node's
//! input: park on a durable timer; the node then succeeds with `return`, default the input), `interact`
//! (`agent` / `assistant_message`), `validate` (`{"field": "value"}` the submission must contain;
//! `validate_sleep_ms` delays the verdict),
//! `close_connection_and_hang` (shut the connection to the host down and run on for ever),
//! `chatter` (`{updates, keys, notifies, pad_bytes}`: a chatty child, far past the host's event
//! budget: `updates` workflow updates of type `soak.chatter` over `keys` keys, each
//! `{"i": i, "pad": ...}` of `pad_bytes`, with `notifies` notify calls spread among them; the
//! latest update of key `k` is the last `i` with `i % keys == k`),
//! `return_bytes` (output `{"blob": "bbb..."}` of that many `b`s: a large value),
//! `notify` (content), `propose_next` (propose this node instead of the routed one: a
//! misbehaving child, for tests of the host's graph check). A top-level `"batch_compute": true`
//! reports consecutive plain compute steps together (`Worker::defer_transition`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use piw_host::graph::{Graph, NodeKind, Outcome, Route};
use piw_host::protocol::payload::{
    AttemptOutcome, DecisionKind, EffectResult, InteractionKind, RetryContract,
};
use piw_host::store::{Reservation, Wake};
use piw_host::worker::{self, LaunchEnvelope, MountedSource, Worker, WorkerError};
use serde_json::{json, Value};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_stale() => {
            eprintln!("piw-json-worker: the run moved on ({e}); stopping quietly");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("piw-json-worker: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), WorkerError> {
    let env = worker::read_envelope(std::io::stdin())?;
    // Verify every source before any "module code" (the markers below) runs.
    if let Err(changed) = worker::verify_sources(&env) {
        return stop_for_review(env, &changed.to_string());
    }
    let fixture_path = PathBuf::from(&env.source_root);
    // A workflow file that cannot be loaded fails the run at once with the reason, as the Node
    // runtime does: relaunching cannot help, and the user must see why.
    let fixture: Value = match std::fs::read(&fixture_path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| format!("the file is not JSON: {e}"))
        }) {
        Ok(fixture) => fixture,
        Err(why) => return fail_to_load(env, &format!("cannot load the workflow: {why}")),
    };
    let mounts = resolve_mounts(&fixture_path, &fixture)?;
    // "Load the module": its side effects happen only after verification.
    load_module(&fixture);
    for src in mounts.values() {
        if let Ok(text) = std::fs::read(&src.path) {
            if let Ok(v) = serde_json::from_slice::<Value>(&text) {
                load_module(&v);
            }
        }
    }
    if let Err(changed) = worker::compare_mounts(&env.mounted_sources, &mounts) {
        return stop_for_review(env, &changed.to_string());
    }
    let graph_value = fixture["graph"].clone();
    let graph = match Graph::parse(&graph_value) {
        Ok(graph) => graph,
        Err(e) => return fail_to_load(env, &format!("cannot load the workflow: {e}")),
    };
    let behaviors = fixture["behaviors"].clone();
    let mut w = Worker::connect(env)?;
    let hello = w.hello_and_start(Some(graph_value), &mounts)?;
    if hello.stop.is_some() {
        return Ok(());
    }
    let input = hello.input.clone();
    let resume = hello.resume.clone();
    let mut node: String;
    let mut carried: Option<AttemptOutcome> = None;
    match resume["resume"].as_str() {
        Some("continue") => {
            node = str_of(&resume["node_id"]);
            carried = Some(AttemptOutcome::Succeeded {
                output: json!({ "answer": hello.answer }),
            });
        }
        Some("accepted") => {
            // The submission was accepted by a child that died before it moved on: its
            // payload is the node's output, exactly as after a fresh acceptance.
            node = str_of(&resume["node_id"]);
            let submission = hello.submission.clone().ok_or_else(|| {
                WorkerError::Reply("an accepted resume without a submission".into())
            })?;
            carried = Some(AttemptOutcome::Succeeded {
                output: submission["payload"].clone(),
            });
        }
        Some("interaction_expired") => {
            node = str_of(&resume["node_id"]);
            carried = Some(AttemptOutcome::TimedOut);
        }
        Some("timer_fired") => {
            // The node's output was decided when it set the timer: no behaviour runs again.
            node = str_of(&resume["node_id"]);
            let timer = hello
                .timer
                .clone()
                .ok_or_else(|| WorkerError::Reply("a timer_fired resume without a timer".into()))?;
            carried = Some(AttemptOutcome::Succeeded {
                output: timer["output"].clone(),
            });
        }
        Some("validate") => {
            node = str_of(&resume["node_id"]);
            let submission = hello.submission.clone().ok_or_else(|| {
                WorkerError::Reply("a validate resume without a submission".into())
            })?;
            let sub_id = str_of(&submission["submission_id"]);
            let payload = submission["payload"].clone();
            // A `validate` that takes its time (or hangs).
            if let Some(ms) = behaviors[&node]["validate_sleep_ms"].as_u64() {
                std::thread::sleep(Duration::from_millis(ms));
            }
            match validate(&behaviors[&node]["validate"], &payload) {
                Ok(()) => {
                    w.validation_result(&sub_id, None)?;
                    carried = Some(AttemptOutcome::Succeeded { output: payload });
                }
                Err(error) => {
                    w.validation_result(&sub_id, Some(error))?;
                    return Ok(());
                }
            }
        }
        _ => {
            node = resume["node_id"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| graph.start.clone());
            // The host opened the first attempt with the hello when it could.
            if resume.get("attempt_id").is_none() {
                w.node_started(&node)?;
            }
        }
    }
    let mut last_output = hello.node_input.clone();
    drop(input);
    loop {
        let mut outcome = match carried.take() {
            Some(o) => o,
            None => match execute(&mut w, &behaviors[&node], &last_output)? {
                Step::Done(o) => o,
                Step::Parked => return Ok(()),
            },
        };
        // An output over the value limit fails its node (`value_too_large`), as the Node
        // runtime does: sending it would end this child with an error, and the host would
        // relaunch it to compute the same value again until the run went to review.
        if let AttemptOutcome::Succeeded { output } = &outcome {
            if let Err(e) = w.check_value_size("the node's output", output) {
                eprintln!("piw-json-worker: {e}");
                outcome = AttemptOutcome::Failed {
                    error: e.to_string(),
                };
            }
        }
        if let AttemptOutcome::Succeeded { output } = &outcome {
            last_output = output.clone();
        }
        let behavior = &behaviors[&node];
        crash_point(behavior, "before_propose");
        let graph_outcome = match &outcome {
            AttemptOutcome::Succeeded { output } => Outcome::Succeeded(output),
            AttemptOutcome::Failed { error } => Outcome::Failed(error),
            AttemptOutcome::TimedOut => Outcome::TimedOut,
        };
        let route = graph
            .route(&node, &graph_outcome)
            .map_err(|e| WorkerError::Reply(e.to_string()))?;
        match route {
            Route::Next(next) => {
                // `batch_compute`: report consecutive pure steps together (see
                // `Worker::defer_transition`).
                let pure = |id: &str| {
                    graph
                        .node(id)
                        .is_some_and(|n| n.kind == NodeKind::Compute && n.timeout_ms.is_none())
                };
                if fixture["batch_compute"] == json!(true)
                    && pure(&node)
                    && pure(&next)
                    && behaviors[&next].as_object().is_none_or(|b| {
                        b.is_empty()
                            || b.keys().all(|k| {
                                ["return", "return_bytes", "crash", "once_marker"]
                                    .contains(&k.as_str())
                            })
                    })
                    && w.deferred_steps() < 64
                    && w.deferred_bytes() < 64 * 1024
                {
                    w.defer_transition(outcome, &next)?;
                    node = next;
                    continue;
                }
                // `propose_next` makes the worker misroute on purpose (tests of the host's check).
                let next = behavior["propose_next"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or(next);
                let reply = w.transition(outcome, &next)?;
                crash_point(behavior, "after_propose");
                if reply.parked {
                    return Ok(());
                }
                node = next;
            }
            Route::Complete => {
                w.complete(outcome, last_output.clone())?;
                // A runtime that takes its time to exit after its last word.
                if let Some(ms) = fixture["exit_after_ms"].as_u64() {
                    eprintln!("piw-json-worker: done; exiting in {ms} ms");
                    std::thread::sleep(Duration::from_millis(ms));
                }
                return Ok(());
            }
            Route::Fail { error, .. } => {
                w.fail(&error, false)?;
                return Ok(());
            }
        }
    }
}

enum Step {
    Done(AttemptOutcome),
    Parked,
}

fn execute(w: &mut Worker, b: &Value, input: &Value) -> Result<Step, WorkerError> {
    if let Some(ms) = b["sleep_ms"].as_u64() {
        std::thread::sleep(Duration::from_millis(ms));
    }
    if b["close_connection_and_hang"].as_bool() == Some(true) {
        close_sockets();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    if let Some(barrier) = b["wait_for_file"].as_str() {
        while !Path::new(barrier).exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if let Some(ms) = b["spin_ms"].as_u64() {
        spin(Some(Duration::from_millis(ms)));
    }
    if let Some(n) = b["flood_bytes"].as_u64() {
        flood(n);
    }
    if let Some(pid_file) = b["detached_grandchild"].as_str() {
        let _ = std::process::Command::new("setsid")
            .arg("/bin/sh")
            .arg("-c")
            .arg(format!(
                "trap '' TERM; echo $$ > '{pid_file}'; while true; do sleep 1; done"
            ))
            .spawn();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    if let Some(pid_file) = b["orphaned_grandchild"].as_str() {
        // A double fork: the middle shell leaves the group and exits at once, so the
        // grandchild has neither the child's group nor a parent chain back to it.
        let _ = std::process::Command::new("setsid")
            .arg("/bin/sh")
            .arg("-c")
            .arg(format!(
                "/bin/sh -c \"trap '' TERM; echo \\$\\$ > '{pid_file}'; while true; do sleep 1; done\" &"
            ))
            .status();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    if let Some(pid_file) = b["grandchild_ignoring_term"].as_str() {
        let _ = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "trap '' TERM; echo $$ > '{pid_file}'; while true; do sleep 1; done"
            ))
            .spawn();
        // Ignore SIGTERM ourselves too, and never return.
        // SAFETY: setting a signal disposition to SIG_IGN has no preconditions.
        unsafe { libc_signal(15, 1) };
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    if b["spin_forever"].as_bool() == Some(true) {
        spin(None);
    }
    if let Some(chatter) = b.get("chatter") {
        chatter_step(w, chatter)?;
    }
    if let Some(content) = b.get("notify") {
        w.notify(content.clone())?;
    }
    if let Some(kind) = b["wait"].as_str() {
        let kind = if kind == "human_decision" {
            DecisionKind::HumanDecision
        } else {
            DecisionKind::Checkpoint
        };
        let request = b
            .get("request")
            .cloned()
            .unwrap_or_else(|| json!({ "question": "continue?" }));
        w.wait(kind, request)?;
        return Ok(Step::Parked);
    }
    if let Some(timer) = b.get("timer") {
        let wake = match (timer["for_ms"].as_u64(), timer["until_ms"].as_i64()) {
            (Some(ms), _) => Wake::After(ms),
            (None, Some(at)) => Wake::At(at),
            // The wake time computed from the context: a field of the node's input.
            (None, None) => Wake::At(input[str_of(&timer["until_from"])].as_i64().unwrap_or(0)),
        };
        let output = b.get("return").cloned().unwrap_or_else(|| input.clone());
        w.wait_until(wake, output)?;
        return Ok(Step::Parked);
    }
    if let Some(kind) = b["interact"].as_str() {
        let kind = if kind == "assistant_message" {
            InteractionKind::AssistantMessage
        } else {
            InteractionKind::Agent
        };
        w.request_interaction(kind, json!({ "contract": "answer with {\"value\": ...}" }))?;
        return Ok(Step::Parked);
    }
    if let Some(effect) = b.get("effect") {
        return effect_step(w, effect).map(Step::Done);
    }
    if let Some(error) = b["fail"].as_str() {
        return Ok(Step::Done(AttemptOutcome::Failed {
            error: error.to_owned(),
        }));
    }
    let output = match b["return_bytes"].as_u64() {
        Some(n) => json!({ "blob": "b".repeat(usize::try_from(n).unwrap_or(0)) }),
        None => b.get("return").cloned().unwrap_or_else(|| input.clone()),
    };
    Ok(Step::Done(AttemptOutcome::Succeeded { output }))
}

fn effect_step(w: &mut Worker, e: &Value) -> Result<AttemptOutcome, WorkerError> {
    let key = str_of(&e["key"]);
    let contract = match e["contract"].as_str() {
        Some("idempotency_key") => RetryContract::IdempotencyKey,
        Some("read_back") => RetryContract::ReadBack,
        _ => RetryContract::Never,
    };
    let fingerprint = e["fingerprint"].as_str().unwrap_or("fp").to_owned();
    match w.reserve_effect(&key, &fingerprint, contract)? {
        Reservation::AlreadyApplied { receipt, .. } => Ok(AttemptOutcome::Succeeded {
            output: json!({ "receipt": receipt, "replayed": true }),
        }),
        Reservation::AlreadyFailed { error, .. } => Ok(AttemptOutcome::Failed { error }),
        Reservation::Reserved { effect_id, .. } => {
            w.effect_applying(&effect_id)?;
            let path = PathBuf::from(str_of(&e["append_to"]));
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| WorkerError::Reply(e.to_string()))?;
            let line = e["line"].as_str().unwrap_or("line");
            // Under `idempotency_key` the file plays an external system that deduplicates: a
            // line it already holds is not written again.
            let done_before = e["contract"] == json!("idempotency_key")
                && std::fs::read_to_string(&path).is_ok_and(|t| t.lines().any(|l| l == line));
            if !done_before {
                writeln!(f, "{line}").map_err(|e| WorkerError::Reply(e.to_string()))?;
            }
            drop(f);
            if let Some(marker) = e["crash_while_applying_marker"].as_str() {
                if !Path::new(marker).exists() {
                    let _ = std::fs::write(marker, b"crashed");
                    std::process::abort();
                }
            }
            let lines = std::fs::read_to_string(&path)
                .map(|t| t.lines().count())
                .unwrap_or(0);
            let receipt = json!({ "lines": lines });
            w.settle_effect(
                &effect_id,
                EffectResult::Applied {
                    receipt: receipt.clone(),
                },
            )?;
            Ok(AttemptOutcome::Succeeded {
                output: json!({ "receipt": receipt, "replayed": false }),
            })
        }
    }
}

fn validate(rule: &Value, payload: &Value) -> Result<(), String> {
    let Some(fields) = rule.as_object() else {
        return Ok(());
    };
    for (k, v) in fields {
        if &payload[k] != v {
            return Err(format!("field {k} must be {v}, got {}", payload[k]));
        }
    }
    Ok(())
}

/// Shuts down every socket this process holds (its connection to the host), without exiting.
fn close_sockets() {
    use std::os::fd::FromRawFd as _;
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in fds.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if is_socket {
            // SAFETY: a descriptor this process holds; the stream is forgotten, not closed,
            // so whoever owns the descriptor still does.
            let stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
            let _ = stream.shutdown(std::net::Shutdown::Both);
            std::mem::forget(stream);
        }
    }
}

fn crash_point(b: &Value, point: &str) {
    if b["crash"].as_str() != Some(point) {
        return;
    }
    if let Some(marker) = b["once_marker"].as_str() {
        if Path::new(marker).exists() {
            return;
        }
        let _ = std::fs::write(marker, b"crashed");
    }
    std::process::abort();
}

fn spin(for_how_long: Option<Duration>) {
    let start = Instant::now();
    let mut x: u64 = 0;
    loop {
        for _ in 0..1_000_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        if for_how_long.is_some_and(|d| start.elapsed() >= d) {
            return;
        }
    }
}

fn flood(bytes: u64) {
    let chunk = vec![b'x'; 64 * 1024];
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        let _ = out.write_all(&chunk[..n]);
        let _ = err.write_all(&chunk[..n]);
        left -= n as u64;
    }
    let _ = out.flush();
}

fn load_module(v: &Value) {
    if let Some(marker) = v["on_load_marker"].as_str() {
        let _ = std::fs::write(marker, b"loaded");
    }
    // A module whose top-level code takes its time (before the hello).
    if let Some(ms) = v["sleep_on_load_ms"].as_u64() {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

fn resolve_mounts(
    fixture: &Path,
    v: &Value,
) -> Result<BTreeMap<String, MountedSource>, WorkerError> {
    let base = fixture.parent().unwrap_or(Path::new("."));
    let mut out = BTreeMap::new();
    for (name, rel) in v["mounts"].as_object().into_iter().flatten() {
        let path = base.join(rel.as_str().unwrap_or_default());
        let hash = worker::hash_file(&path)
            .map_err(|e| WorkerError::SourceChanged(format!("mounted source {name}: {e}")))?;
        out.insert(
            name.clone(),
            MountedSource {
                path: path.display().to_string(),
                hash,
            },
        );
    }
    Ok(out)
}

fn stop_for_review(env: LaunchEnvelope, reason: &str) -> Result<(), WorkerError> {
    let mut w = Worker::connect(env)?;
    w.hello(None, &BTreeMap::new())?;
    w.fail(reason, true)?;
    Ok(())
}

/// Fails the run: its workflow cannot load, and would not in any new child either.
fn fail_to_load(env: LaunchEnvelope, reason: &str) -> Result<(), WorkerError> {
    let mut w = Worker::connect(env)?;
    w.hello(None, &BTreeMap::new())?;
    w.fail(reason, false)?;
    Ok(())
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

extern "C" {
    #[link_name = "signal"]
    fn libc_signal(sig: i32, handler: usize) -> usize;
}

/// The `chatter` behaviour: many more progress and notify calls than the host keeps events
/// for (it drops the excess and counts it; the latest update per key is always kept).
fn chatter_step(w: &mut Worker, chatter: &Value) -> Result<(), WorkerError> {
    let updates = chatter["updates"].as_u64().unwrap_or(0);
    let keys = chatter["keys"].as_u64().unwrap_or(1).max(1);
    let notifies = chatter["notifies"].as_u64().unwrap_or(0);
    let pad = "c".repeat(chatter["pad_bytes"].as_u64().unwrap_or(0) as usize);
    let every = updates.checked_div(notifies).unwrap_or(u64::MAX).max(1);
    let mut notified = 0;
    for i in 0..updates {
        let update = json!({ "type": "soak.chatter", "key": format!("k{}", i % keys),
                             "data": { "i": i, "pad": pad } });
        w.progress("chatter", update)?;
        if i % every == 0 && notified < notifies {
            w.notify(json!({ "text": "chatter", "i": i, "pad": pad }))?;
            notified += 1;
        }
    }
    Ok(())
}
