//! Crash injection at every durable commit of the host process (plan, "Lifecycle consistency":
//! crash before and after every lifecycle commit; issue "prove it under faults").
//!
//! One scenario drives two runs through every kind of durable work the host does: start-up
//! recovery, pure steps, a durable timer that comes due while no host runs, a managed effect (with an idempotency key, so a rerun is safe and the
//! run's end does not depend on where the crash fell), a notify message, an ordinary checkpoint answered by
//! a client, an interactive step judged in a validating child (one rejected, one accepted
//! submission), a human decision that expires at its deadline (a test clock), a graceful stop
//! and restart while a child computes, live cancellation of a spinning run, message claim
//! and acknowledgement, repair, and the prune of both runs at the end. A fault-free pass records the store operations of every commit
//! (`PIW_FAULT=record_ops`); then, for every operation it saw, the scenario runs again with the
//! host aborted just before (`before_op`) and just after (`after_op`) the first commit that
//! contains it. The driver restarts the host (without the fault) whenever it dies and repeats
//! what it was doing with the same request ids. Every faulty pass must end as the fault-free
//! one did, with `diagnose` clean, every acknowledged command applied exactly once, the effect
//! applied once, and no child of the cancelled run left alive.

use piw_host::store::prelude::*;
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use piw_host::client::{BlockingClient, ClientError};
use piw_host::paths::PiwPaths;
use piw_host::protocol::{payload, Receipt, Request, RequestBody};
use piw_tests::{is_final, pending};
use serde_json::{json, Value};

mod common;

/// How long any wait of the driver may take before the test fails (a hang, not a speed check).
const BOUND: Duration = Duration::from_secs(60);

/// The human decision's deadline; the driver moves the host's test clock past it.
const DECISION_DEADLINE_MS: i64 = 60_000;

/// How long the flow's `nap` waits on its durable timer; the clock passes it while the host
/// is stopped.
const NAP_MS: i64 = 3_600_000;

struct Scenario {
    dir: tempfile::TempDir,
    paths: PiwPaths,
    /// `PIW_FAULT` for hosts started until the fault has fired once.
    fault: Option<String>,
    host: Option<common::HostProc>,
    /// Host deaths by the injected abort.
    aborts: u32,
}

/// What a pass ends with; a faulty pass must end with the same.
#[derive(Debug, PartialEq)]
struct Outcome {
    flow: Value,
    flow_nodes: Vec<String>,
    checkpoint_answers: Vec<Value>,
    submissions: Vec<String>,
    spin: Value,
    effect_lines: usize,
    /// Every acknowledged message (by id, so a message added twice shows twice).
    messages: Vec<String>,
    /// Node `a`'s output, stored apart, as read back: its length.
    big_output: usize,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        common::kill_installation(&self.paths.home);
    }
}

impl Scenario {
    fn new(fault: Option<String>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().join("home"));
        Self {
            dir,
            paths,
            fault,
            host: None,
            aborts: 0,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts a host: with the fault until it has fired, then without. A host that aborts
    /// at its fault point while starting (start-up recovery commits) is counted and replaced.
    fn serve(&mut self) {
        loop {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path("hosts.log"))
                .unwrap();
            let mut cmd = common::piw_command();
            cmd.args(["host", "serve"])
                .env("PIW_HOME", &self.paths.home)
                .env("PIW_LOG", "warn")
                .env("PIW_TEST_CLOCK", self.path("clock"))
                .env("PIW_KILL_GRACE_MS", "200")
                .env(
                    "PIW_RUNTIMES",
                    format!(".workflow.json={}", env!("CARGO_BIN_EXE_piw-json-worker")),
                )
                .stdout(Stdio::null())
                .stderr(log);
            if self.aborts == 0 {
                if let Some(f) = &self.fault {
                    cmd.env("PIW_FAULT", f);
                }
            }
            let mut child = cmd.spawn().unwrap();
            let start = Instant::now();
            let ready = loop {
                if let Ok(mut c) = BlockingClient::connect(&self.paths) {
                    if c.call(RequestBody::HostStatus).is_ok() {
                        break true;
                    }
                }
                if let Some(status) = child.try_wait().unwrap() {
                    self.count_death(status);
                    break false;
                }
                assert!(start.elapsed() < BOUND, "the host never became ready");
                std::thread::sleep(Duration::from_millis(10));
            };
            if ready {
                self.host = Some(common::HostProc(child));
                return;
            }
        }
    }

    /// A host that ended: by the injected abort (counted), or the test fails with its log.
    fn count_death(&mut self, status: std::process::ExitStatus) {
        if status.signal() == Some(6) {
            self.aborts += 1;
        } else {
            let log = std::fs::read_to_string(self.path("hosts.log")).unwrap_or_default();
            panic!("the host ended by itself ({status}): {log}");
        }
    }

    /// After a failed call: waits for the host to die (it aborted at the fault point, or was
    /// about to), then starts the next one.
    fn recover(&mut self, error: &ClientError) {
        let mut host = self.host.take().expect("a host was running");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = host.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < BOUND,
                "a call failed ({error}) but the host lives on"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        self.count_death(status);
        self.serve();
    }

    /// Sends `request` until a host answers it: a host that dies meanwhile is replaced and the
    /// same request (same id) is sent again, so a command it committed before dying is
    /// replayed, not applied twice. A rejection is returned as it is.
    fn call(&mut self, request: Request) -> Result<Receipt, ClientError> {
        loop {
            let sent = BlockingClient::connect(&self.paths).and_then(|mut c| {
                c.set_timeout(Some(BOUND))?;
                c.send(request.clone())
            });
            match sent {
                Err(e) if e.code().is_none() => self.recover(&e),
                other => return other,
            }
        }
    }

    fn status(&mut self, run_id: &str) -> Value {
        let request = Request::new(
            piw_host::ids::new_id("st"),
            RequestBody::RunStatus(Default::default()),
        )
        .with_run_id(run_id);
        self.call(request).unwrap().body
    }

    /// Polls until `done` holds of the run's status.
    fn wait(&mut self, run_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let s = self.status(run_id);
            if done(&s) {
                return s;
            }
            if start.elapsed() > BOUND {
                let store =
                    piw_host::store::Store::open_read_only(&self.paths.db, Default::default())
                        .unwrap();
                let events: Vec<String> = store
                    .events(run_id, 0)
                    .unwrap()
                    .iter()
                    .map(|e| format!("{} {}", e.kind, e.data))
                    .collect();
                let log = std::fs::read_to_string(self.path("hosts.log")).unwrap_or_default();
                panic!("never {what}: {s:#}\nevents: {events:#?}\nhosts: {log}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A graceful stop (`request_id`), waited for; a host that aborts at its fault point on the
    /// way is counted.
    fn stop_host(&mut self, request_id: &str) {
        let _ = self.call(Request::new(request_id, RequestBody::HostStop));
        let mut host = self.host.take().unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(status) = host.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed() < BOUND, "the host never stopped");
            std::thread::sleep(Duration::from_millis(10));
        };
        if !status.success() {
            self.count_death(status);
        }
    }

    fn advance_clock(&self, ms: i64) {
        let file = self.path("clock");
        let offset: i64 = std::fs::read_to_string(&file)
            .map(|t| t.trim().parse().unwrap())
            .unwrap_or(0);
        std::fs::write(self.path("clock.tmp"), (offset + ms).to_string()).unwrap();
        std::fs::rename(self.path("clock.tmp"), file).unwrap();
    }

    fn fixture(&self, name: &str, fixture: Value) -> String {
        let p = self.path(&format!("{name}.workflow.json"));
        std::fs::write(&p, serde_json::to_vec(&fixture).unwrap()).unwrap();
        p.display().to_string()
    }

    fn start(&mut self, request_id: &str, file: &str) -> String {
        let body = RequestBody::RunStart(payload::RunStart {
            workflow_file: file.to_owned(),
            input: json!({}),
            session_id: Some("s1".into()),
            execution_mode: None,
            project_dir: Some(self.dir.path().display().to_string()),
        });
        let r = self.call(Request::new(request_id, body)).unwrap();
        r.body["run_id"].as_str().unwrap().to_owned()
    }

    /// Runs the whole scenario and returns how it ended.
    fn run(&mut self) -> Outcome {
        let out = self.path("out.txt").display().to_string();
        let flow = self.fixture(
            "flow",
            json!({
                "graph": {"name": "flow", "start": "a", "nodes": {
                    "a": {"kind": "compute"}, "nap": {"kind": "wait"},
                    "act": {"kind": "action", "retry": "idempotency_key"},
                    "tell": {"kind": "notify"}, "ask": {"kind": "checkpoint"},
                    "agent": {"kind": "agent"},
                    "approve": {"kind": "human_decision", "timeout_ms": DECISION_DEADLINE_MS},
                    "late": {"kind": "compute"}},
                  "edges": [{"from": "a", "to": "nap"}, {"from": "nap", "to": "act"},
                            {"from": "act", "to": "tell"},
                            {"from": "tell", "to": "ask"}, {"from": "ask", "to": "agent"},
                            {"from": "agent", "to": "approve"},
                            {"from": "approve", "switch": {"on": "$result.outcome",
                                                           "cases": {"timed_out": "late"}}}]},
                "behaviors": {
                    // Stored apart (over 64 KiB): uploaded in chunks before its transition.
                    "a": {"return_bytes": 300_000},
                    "nap": {"timer": {"for_ms": NAP_MS}},
                    "act": {"effect": {"key": "append-once", "contract": "idempotency_key",
                                       "append_to": out, "line": "applied"}},
                    "tell": {"notify": {"text": "hello"}},
                    "ask": {"wait": "checkpoint"},
                    "agent": {"interact": "agent", "validate": {"value": 42}},
                    "approve": {"wait": "human_decision"},
                    "late": {"return": {"late": true}}}
            }),
        );
        let spin = self.one_spinning_node();
        self.serve();
        let flow_id = self.start("start-flow", &flow);
        // The durable timer: set, then due while no host runs; the next host fires it.
        self.wait(&flow_id, "waiting on its timer", |s| {
            s["run"]["status"] == json!("waiting") && s["run"]["wake_at"].is_i64()
        });
        self.stop_host("stop-0");
        self.advance_clock(NAP_MS);
        self.serve();
        let s = self.wait(&flow_id, "at the checkpoint", |s| {
            pending(s, "decisions", "ask").is_some()
        });
        let decision = pending(&s, "decisions", "ask").unwrap().clone();
        let spin_id = self.start("start-spin", &spin);

        // A graceful stop and restart while the spinning child computes.
        self.wait(&spin_id, "spinning", |s| running_attempt(s, "spin"));
        self.stop_host("stop-1");
        self.serve();

        // Live cancellation of the spinning run.
        self.wait(&spin_id, "spinning again", |s| running_attempt(s, "spin"));
        let cancel = RequestBody::RunCancel(payload::RunCancel { reason: None });
        self.call(Request::new("cancel-spin", cancel).with_run_id(&spin_id))
            .unwrap();

        // The ordinary checkpoint, answered by a client.
        let answer = RequestBody::CheckpointAnswer(payload::DecisionAnswer {
            decision_id: decision["decision_id"].as_str().unwrap().to_owned(),
            answer: json!("yes"),
            channel: None,
        });
        self.call(Request::new("answer-ask", answer).with_run_id(&flow_id))
            .unwrap();

        // The interactive step: a submission the child rejects, then one it accepts.
        for (request_id, value, verdict) in
            [("submit-41", 41, "rejected"), ("submit-42", 42, "accepted")]
        {
            let s = self.wait(&flow_id, "at the interactive step", |s| {
                pending(s, "interactions", "agent").is_some()
            });
            let i = pending(&s, "interactions", "agent").unwrap().clone();
            let submit = RequestBody::InteractionSubmit(payload::InteractionSubmit {
                interaction_id: i["interaction_id"].as_str().unwrap().to_owned(),
                result: json!({ "value": value }),
                refuse_repeat: false,
            });
            let r = self.call(
                Request::new(request_id, submit)
                    .with_run_id(&flow_id)
                    .with_node_id("agent")
                    .with_attempt_id(i["attempt_id"].as_str().unwrap()),
            );
            let submission = r.unwrap().body["submission_id"].clone();
            self.wait(&flow_id, "a verdict", |s| {
                s["interactions"].as_array().unwrap().iter().any(|x| {
                    x["last_submission"]["submission_id"] == submission
                        && x["last_submission"]["state"] == json!(verdict)
                })
            });
        }

        // The human decision nobody answers: its deadline passes on the host's clock.
        self.wait(&flow_id, "at the human decision", |s| {
            pending(s, "decisions", "approve").is_some()
        });
        self.advance_clock(DECISION_DEADLINE_MS + 1);
        let flow_end = self.wait(&flow_id, "finished", is_final);
        let spin_end = self.wait(&spin_id, "cancelled", is_final);

        // Messages: claimed, then acknowledged; a claim whose acknowledgement died with a
        // host is claimed again once its lease has passed.
        let mut acked = std::collections::BTreeMap::new();
        for round in 0.. {
            assert!(round < 20, "messages never ran out");
            self.advance_clock(3_600_000);
            let claim = RequestBody::MessageClaim(payload::MessageClaim {
                session_id: "s1".into(),
                limit: None,
                // Each round claims as someone new: what an earlier round claimed and did not
                // acknowledge comes back only once its lease has passed.
                claimant: None,
                after: None,
            });
            let claimed = self
                .call(Request::new(format!("claim-{round}"), claim))
                .unwrap();
            let list = claimed.body["messages"].as_array().unwrap().clone();
            if list.is_empty() {
                break;
            }
            for m in list {
                let id = m["message_id"].as_str().unwrap().to_owned();
                let ack = RequestBody::MessageAck(payload::MessageAck {
                    message_id: id.clone(),
                });
                self.call(Request::new(format!("ack-{id}"), ack)).unwrap();
                // How many rows a cancellation closed depends on where a crash left the run
                // (running, or already requeued by recovery); what it says otherwise does not.
                let mut content = m["content"].clone();
                if let Some(c) = content.as_object_mut() {
                    c.remove("closed");
                }
                acked.insert(
                    id,
                    format!("{} {} {content}", m["run_id"] == json!(flow_id), m["kind"]),
                );
            }
        }

        // Repair: with the host stopped, derived rows of both finished runs are damaged (a
        // stale viewer projection, a lost queue row); `repair` rebuilds them. A crash around
        // its commit is answered by repairing again.
        self.stop_host("stop-2");
        {
            let db = rusqlite::Connection::open(&self.paths.db).unwrap();
            let damaged = db
                .execute(
                    "UPDATE run_views SET status = 'running' WHERE run_id = ?1",
                    [&flow_id],
                )
                .unwrap()
                + db.execute("DELETE FROM queue WHERE run_id = ?1", [&spin_id])
                    .unwrap();
            assert_eq!(damaged, 2);
        }
        self.serve();
        for round in 0.. {
            assert!(round < 5, "repair never left diagnose clean");
            let r = self.call(Request::new(
                piw_host::ids::new_id("repair"),
                RequestBody::Repair,
            ));
            let findings = self
                .call(Request::new(
                    piw_host::ids::new_id("diag"),
                    RequestBody::Diagnose,
                ))
                .unwrap()
                .body["findings"]
                .clone();
            if findings.as_array().is_some_and(Vec::is_empty) {
                break;
            }
            assert!(r.is_ok(), "repair failed: {r:?}; findings {findings:#}");
        }

        // Nothing of the cancelled run lives on.
        let store =
            piw_host::store::Store::open_read_only(&self.paths.db, Default::default()).unwrap();
        for child in store.children(&spin_id).unwrap() {
            if let Some(pid) = child.pid {
                let start = Instant::now();
                while is_live(pid) {
                    assert!(
                        start.elapsed() < BOUND,
                        "child {pid} of the cancelled run lives on"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        let findings = store.diagnose(store.now_ms()).unwrap();
        assert!(findings.is_empty(), "diagnose: {findings:#?}");

        let outcome = Outcome {
            flow: json!([flow_end["run"]["status"], flow_end["run"]["result"]]),
            flow_nodes: flow_end["attempts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["status"] == json!("ok") || a["status"] == json!("timed_out"))
                .map(|a| format!("{} {}", a["node_id"], a["status"]))
                .collect(),
            checkpoint_answers: flow_end["decisions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["node_id"] == json!("ask"))
                .map(|d| json!([d["status"], d["answer"]]))
                .collect(),
            submissions: store
                .submissions(
                    flow_end["interactions"][0]["interaction_id"]
                        .as_str()
                        .unwrap(),
                )
                .unwrap()
                .iter()
                .map(|s| format!("{:?}", s.state))
                .collect(),
            spin: json!([spin_end["run"]["status"], spin_end["run"]["result"]]),
            big_output: {
                let a = flow_end["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["node_id"] == json!("a") && a["status"] == json!("ok"))
                    .expect("a succeeded");
                let sha256 = a["output"]["sha256"].as_str().expect("a reference");
                let bytes = store.read_value(&flow_id, sha256).unwrap();
                let value: Value = serde_json::from_slice(&bytes).unwrap();
                value["blob"].as_str().unwrap().len()
            },
            effect_lines: std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()),
            messages: {
                let mut m: Vec<String> = acked.into_values().collect();
                m.sort();
                m
            },
        };
        drop(store);

        // Prune: both runs have finished, and every one goes (a batch at a time, sent again
        // while `more`). A crash around its commit is answered by pruning again; each run is
        // kept or removed wholly.
        for round in 0.. {
            assert!(round < 5, "the prune never ended");
            let r = self.call(Request::new(
                piw_host::ids::new_id("prune"),
                RequestBody::RunPrune(piw_host::protocol::payload::RunPrune {
                    keep: Some(0),
                    ..Default::default()
                }),
            ));
            if r.is_ok_and(|r| r.body["more"] == false) {
                break;
            }
        }
        let store =
            piw_host::store::Store::open_read_only(&self.paths.db, Default::default()).unwrap();
        let findings = store.diagnose(store.now_ms()).unwrap();
        assert!(
            findings.is_empty(),
            "diagnose after the prune: {findings:#?}"
        );
        for run_id in [&flow_id, &spin_id] {
            assert!(
                store.run(run_id).is_err(),
                "{run_id} is left after the prune"
            );
        }
        outcome
    }

    fn one_spinning_node(&self) -> String {
        self.fixture(
            "spin",
            json!({"graph": {"name": "spin", "start": "spin",
                             "nodes": {"spin": {"kind": "compute"}}, "edges": []},
                   "behaviors": {"spin": {"spin_forever": true}}}),
        )
    }

    fn finish(mut self) -> (u32, Outcome) {
        let outcome = self.run();
        let _ = self.call(Request::new("stop-end", RequestBody::HostStop));
        (self.aborts, outcome)
    }
}

fn running_attempt(s: &Value, node: &str) -> bool {
    s["attempts"].as_array().is_some_and(|a| {
        a.iter()
            .any(|x| x["node_id"] == json!(node) && x["status"] == json!("running"))
    })
}

fn is_live(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The store operations of every commit of a fault-free pass, and how that pass ended.
fn fault_free() -> (BTreeSet<String>, Outcome) {
    let record = tempfile::NamedTempFile::new().unwrap();
    let file = record.path().display().to_string();
    let (aborts, outcome) = Scenario::new(Some(format!("record_ops:{file}"))).finish();
    assert_eq!(aborts, 0);
    let ops = std::fs::read_to_string(Path::new(&file))
        .unwrap()
        .lines()
        .flat_map(|l| l.split(',').map(str::to_owned).collect::<Vec<_>>())
        .collect();
    (ops, outcome)
}

#[test]
fn a_crash_before_or_after_any_commit_loses_nothing_and_doubles_nothing() {
    let (ops, expected) = fault_free();
    // The scenario reaches every kind of commit the issue names.
    for op in [
        "begin_host_epoch",
        "recovered",
        "close_unconfirmed_children",
        "end_host_epoch",
        "record_child_launch",
        "record_child_process",
        "record_child_handshake",
        "record_child_exit",
        "decision_expired",
        "timer_set",
        "timer_fired",
        "claim_messages",
        "ack_message",
        "cancelled",
        "decision_answered",
        "submitted",
        "submission_rejected",
        "submission_accepted",
        "effect_reserved",
        "effect_applying",
        "effect_settled",
        "notified",
        "transitioned",
        "completed",
        "repair",
        "prune_runs",
        "value_put",
    ] {
        assert!(
            ops.contains(op),
            "the fault-free pass never commits {op}: {ops:?}"
        );
    }
    assert_eq!(expected.effect_lines, 1);
    assert_eq!(expected.big_output, 300_000);
    // The notify message and one terminal message per finished run.
    assert_eq!(expected.messages.len(), 3, "{:?}", expected.messages);
    // `CRASH_MATRIX_ONLY=before_op:parked,...` narrows the matrix while debugging one point.
    let only = std::env::var("CRASH_MATRIX_ONLY").ok();
    let points: Vec<String> = ops
        .iter()
        .flat_map(|op| [format!("before_op:{op}"), format!("after_op:{op}")])
        .filter(|p| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == p)))
        .collect();
    // Two scenarios at a time (one per core); each on its own installation.
    let next = std::sync::Mutex::new(points.clone().into_iter());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let Some(point) = next.lock().unwrap().next() else {
                    return;
                };
                let pass = std::panic::catch_unwind(|| Scenario::new(Some(point.clone())).finish());
                results.lock().unwrap().push((point, pass));
            });
        }
    });
    let results = results.into_inner().unwrap();
    assert_eq!(results.len(), points.len());
    let mut failed = Vec::new();
    for (point, pass) in results {
        match pass {
            Err(panic) => failed.push(format!(
                "{point}: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("panicked")
                    .lines()
                    .next()
                    .unwrap_or_default()
            )),
            Ok((0, _)) => failed.push(format!("{point}: the fault never fired")),
            Ok((_, outcome)) if outcome != expected => {
                failed.push(format!("{point}: ended as {outcome:?}, not {expected:?}"))
            }
            Ok(_) => {}
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} crash points:\n{}",
        failed.len(),
        points.len(),
        failed.join("\n")
    );
}
