//! Children end to end: the real `piw` host supervising `piw-json-worker` children that run
//! `.workflow.json` fixtures with scripted behaviours (docs/RULES.md, "Child isolation" and
//! "Effects").

use piw_host::store::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use piw_host::client::BlockingClient;
use piw_host::paths::PiwPaths;
use piw_host::protocol::{payload, RejectionCode, Request, RequestBody};
use serde_json::{json, Value};

mod common;
use common::HostProc;

/// The runtime for `.workflow.json` workflows, built with `piw`.
fn json_worker() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_piw-json-worker"))
}

struct Env {
    dir: tempfile::TempDir,
    paths: PiwPaths,
    extra: Vec<(String, String)>,
}

/// Whatever the test's outcome, none of its hosts, children or grandchildren outlive it.
impl Drop for Env {
    fn drop(&mut self) {
        common::kill_installation(&self.paths.home);
    }
}

impl Env {
    fn new(extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().join("home"));
        let extra = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self { dir, paths, extra }
    }

    /// An installation whose hosts run on a test clock (`PIW_TEST_CLOCK`): deadlines, leases
    /// and heartbeats pass when the test moves the clock ([`Env::advance_clock`]), not when a
    /// loaded machine happens to get there.
    fn with_test_clock(extra: &[(&str, &str)]) -> Self {
        let mut env = Self::new(extra);
        let clock = env.path("clock").display().to_string();
        env.extra.push(("PIW_TEST_CLOCK".into(), clock));
        env
    }

    /// Moves the test clock forward by `ms` (also while no host runs, or while it is stopped).
    fn advance_clock(&self, ms: i64) {
        let file = self.path("clock");
        let offset: i64 = std::fs::read_to_string(&file)
            .map(|t| t.trim().parse().unwrap())
            .unwrap_or(0);
        let tmp = self.path("clock.tmp");
        std::fs::write(&tmp, (offset + ms).to_string()).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    }

    /// `run.status` after the host has handled everything due at its clock's time: the first
    /// read wakes a host asleep until a deadline of the old time, which then does the due
    /// work before it next waits; the second read is answered after that work committed.
    fn settle(&self, run_id: &str) -> Value {
        self.status(run_id);
        self.status(run_id)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn serve(&self, fault: Option<&str>) -> HostProc {
        let mut cmd = common::piw_command();
        cmd.args(["host", "serve"])
            .env("PIW_HOME", &self.paths.home)
            .env("PIW_LOG", "warn")
            .env(
                "PIW_RUNTIMES",
                format!(".workflow.json={}", json_worker().display()),
            )
            .stdout(Stdio::null());
        // Every host of the test appends to one log, which a failed start quotes.
        let log = self.path("hosts.log");
        let sink = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        cmd.stderr(sink);
        for (k, v) in &self.extra {
            cmd.env(k, v);
        }
        if let Some(f) = fault {
            cmd.env("PIW_FAULT", f);
        }
        HostProc::start_ready(&mut cmd, &self.paths, Some(&log))
    }

    fn client(&self) -> BlockingClient {
        let c = BlockingClient::connect(&self.paths).unwrap();
        c.set_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    /// A client following session `s1`'s events (the session of [`Env::start`]'s runs): while
    /// it is open, the session presents its runs' interactive steps, whose time runs only then.
    fn present(&self) -> BlockingClient {
        let mut c = self.client();
        c.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: None,
            session_id: Some("s1".into()),
            all: None,
        }))
        .unwrap();
        c
    }

    fn fixture(&self, name: &str, fixture: Value) -> String {
        let p = self.path(&format!("{name}.workflow.json"));
        std::fs::write(&p, serde_json::to_vec_pretty(&fixture).unwrap()).unwrap();
        p.display().to_string()
    }

    /// A workflow of one compute node `a` with the given scripted behaviour.
    fn one_node(&self, name: &str, behavior: Value) -> String {
        self.fixture(
            name,
            json!({
                "graph": {"name": name, "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
                "behaviors": {"a": behavior}
            }),
        )
    }

    fn start(&self, file: &str, input: Value) -> String {
        let r = self
            .client()
            .call(RequestBody::RunStart(payload::RunStart {
                workflow_file: file.to_owned(),
                input,
                session_id: Some("s1".into()),
                execution_mode: None,
                project_dir: Some(self.dir.path().display().to_string()),
            }))
            .unwrap();
        r.body["run_id"].as_str().unwrap().to_owned()
    }

    /// Cancels `run_id` with request id `request_id` and returns the host's answer.
    fn cancel(&self, request_id: &str, run_id: &str) -> Value {
        self.client()
            .send(
                Request::new(
                    request_id,
                    RequestBody::RunCancel(payload::RunCancel { reason: None }),
                )
                .with_run_id(run_id),
            )
            .unwrap()
            .body
    }

    fn status(&self, run_id: &str) -> Value {
        let r = self
            .client()
            .send(
                Request::new(
                    piw_host::ids::new_id("st"),
                    RequestBody::RunStatus(Default::default()),
                )
                .with_run_id(run_id),
            )
            .unwrap();
        r.body
    }

    /// Waits until the run's status is one of `wanted`.
    fn wait_for(&self, run_id: &str, wanted: &[&str], within: Duration) -> Value {
        let start = Instant::now();
        loop {
            let s = self.status(run_id);
            if wanted.contains(&s["run"]["status"].as_str().unwrap_or_default()) {
                return s;
            }
            assert!(
                start.elapsed() < within,
                "run never reached {wanted:?}: {s:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&self, mut host: HostProc) {
        let _ = self.client().call(RequestBody::HostStop);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if let Some(s) = host.try_wait().unwrap() {
                assert_eq!(s.code(), Some(0));
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = host.kill();
        panic!("host did not stop");
    }
}

fn events(status_env: &Env, run_id: &str) -> Vec<String> {
    let _ = status_env;
    let db = status_env.paths.db.clone();
    let c = rusqlite_open(&db);
    c.into_iter()
        .filter(|(r, _)| r == run_id)
        .map(|(_, k)| k)
        .collect()
}

/// Events of every run, read through a read-only store (the host keeps running).
fn rusqlite_open(db: &Path) -> Vec<(String, String)> {
    let store = piw_host::store::Store::open_read_only(db, Default::default()).unwrap();
    let mut out = Vec::new();
    for run in store.list_runs(None, 1000).unwrap() {
        for e in store.events(&run.run_id, 0).unwrap() {
            out.push((run.run_id.clone(), e.kind));
        }
    }
    out
}

fn pipeline() -> Value {
    json!({
        "graph": {
            "name": "pipeline", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}, "c": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "b"}, {"from": "b", "switch": {"on": "$.go", "cases": {"yes": "c"}}}]
        },
        "behaviors": {"a": {"return": {"step": 1}}, "b": {"return": {"go": "yes"}}, "c": {"return": {"done": true}}}
    })
}

#[test]
fn a_pipeline_runs_to_completion_in_children() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let file = env.fixture("pipeline", pipeline());
    let run_id = env.start(&file, json!({"n": 1}));
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"done": true}));
    // Newest first.
    let nodes: Vec<_> = s["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["node_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(nodes, ["c", "b", "a"]);
    env.stop(host);
}

/// A graph whose edges form a cycle of pure nodes (`a -> b -> a`) stops at the step limit the
/// host enforces, with the reason and exactly that many attempts (it used to make
/// 30,000 attempts in 2 s and go on until cancelled).
#[test]
fn a_pure_cycle_stops_at_the_hosts_step_limit_with_bounded_attempts() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let cycle = |max_steps: Option<u64>| {
        let mut graph = json!({
            "name": "cycle", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]
        });
        if let Some(n) = max_steps {
            graph["max_steps"] = json!(n);
        }
        json!({"graph": graph, "behaviors": {"a": {"return": {"at": "a"}}, "b": {"return": {"at": "b"}}}})
    };
    for (name, max_steps, expected) in [("cycle5", Some(5), 5), ("cycle", None, 100)] {
        let file = env.fixture(name, cycle(max_steps));
        let run_id = env.start(&file, json!({}));
        let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(60));
        assert_eq!(s["run"]["status"], json!("failed"), "{s:#}");
        let error = s["run"]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("step limit: maxSteps is {expected}")),
            "{error}"
        );
        assert_eq!(s["attempts"].as_array().map(Vec::len), Some(expected));
    }
    env.stop(host);
}

#[test]
fn a_child_that_disagrees_with_the_graph_fails_the_run_with_the_reason() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    // The worker routes on its own copy of the graph; give the host a different one by
    // changing the fixture between start and... simplest: a switch whose value has no case.
    let mut f = pipeline();
    f["behaviors"]["b"] = json!({"return": {"go": "no"}});
    let file = env.fixture("nocase", f);
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_eq!(s["run"]["status"], json!("failed"));
    assert!(
        s["run"]["error"].as_str().unwrap().contains("no case"),
        "{s:#}"
    );
    env.stop(host);
}

/// A JSON workflow file that cannot be loaded fails its run at once, with the reason, instead
/// of losing three children that each die before they can say why.
#[test]
fn a_workflow_file_that_cannot_be_loaded_fails_the_run_at_once_with_the_reason() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let mut bad_graph = pipeline();
    bad_graph["graph"]["start"] = json!("zzz");
    let cases = [
        (env.fixture("badgraph", bad_graph), "start node \"zzz\""),
        (
            {
                let file = env.fixture("notjson", json!({}));
                std::fs::write(&file, "{not json").unwrap();
                file
            },
            "is not JSON",
        ),
    ];
    for (file, why) in cases {
        let run_id = env.start(&file, json!({}));
        let s = env.wait_for(&run_id, &["review", "failed"], Duration::from_secs(20));
        assert_eq!(s["run"]["status"], json!("failed"), "{s:#}");
        let reason = s["run"]["error"].as_str().unwrap_or_default();
        assert!(
            reason.contains("cannot load the workflow") && reason.contains(why),
            "{reason}"
        );
        assert!(!reason.contains("lost"), "no child counted lost: {reason}");
    }
    env.stop(host);
}

/// Polls until the run's attempt at `node` is running (its child is inside the node's code).
fn wait_for_running_attempt(env: &Env, run_id: &str, node: &str) -> Value {
    let start = Instant::now();
    loop {
        let s = env.status(run_id);
        let running = s["attempts"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x["node_id"] == json!(node) && x["status"] == json!("running"))
        });
        if running {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "node {node} never started: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_spinning_child_cannot_take_ownership_and_its_deadline_routes_timed_out() {
    // The default lease (30 s) on a test clock; the node spins forever with a 120 s deadline
    // (four leases), and the clock moves in steps shorter than a lease, so only the host's own
    // heartbeats can keep the claim: the spinning child sends nothing.
    let env = Env::with_test_clock(&[("PIW_KILL_GRACE_MS", "200")]);
    let host = env.serve(None);
    let file = env.fixture(
        "spin",
        json!({
            "graph": {
                "name": "spin", "start": "busy",
                "nodes": {"busy": {"kind": "compute", "timeout_ms": 120_000}, "late": {"kind": "compute"}},
                "edges": [{"from": "busy", "switch": {"on": "$result.outcome", "cases": {"timed_out": "late"}}}]
            },
            "behaviors": {"busy": {"spin_forever": true}, "late": {"return": {"handled": "timeout"}}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    wait_for_running_attempt(&env, &run_id, "busy");
    // Steps of 21 s: each shorter than a lease (a longer one is a stall, after which a claim
    // may not renew itself), five of them 105 s, before the deadline.
    for _ in 0..5 {
        env.advance_clock(21_000);
        let s = env.settle(&run_id);
        assert_eq!(s["run"]["status"], json!("running"), "{s:#}");
        assert_eq!(s["claim"]["generation"], json!(1), "{s:#}");
    }
    let kinds = events(&env, &run_id);
    assert!(
        !kinds.iter().any(|k| k == "recovered" || k == "child_lost"),
        "the host kept ownership across 105 s of a silent child: {kinds:?}"
    );
    // Past the node's deadline (126 s): the host stops the child and routes `timed_out`.
    env.advance_clock(21_000);
    env.settle(&run_id);
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "timed_out", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"handled": "timeout"}));
    let attempts = s["attempts"].as_array().unwrap();
    // Newest first: the first attempt is the last one listed.
    assert_eq!(attempts[attempts.len() - 1]["status"], json!("timed_out"));
    let kinds = events(&env, &run_id);
    assert!(
        !kinds.iter().any(|k| k == "recovered" || k == "child_lost"),
        "the host kept ownership: {kinds:?}"
    );
    // The spinning child's group was killed.
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let start = Instant::now();
    let first = loop {
        let first = store.children(&run_id).unwrap().remove(0);
        if first.exited || start.elapsed() > Duration::from_secs(30) {
            break first;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(first.exited && first.signal.is_some(), "{first:#?}");
    env.stop(host);
}

#[test]
fn a_child_killed_before_or_after_proposing_loses_nothing_and_applies_nothing_twice() {
    for point in ["before_propose", "after_propose"] {
        let env = Env::new(&[]);
        let host = env.serve(None);
        let mut f = pipeline();
        f["behaviors"]["b"] = json!({"return": {"go": "yes"}, "crash": point, "once_marker": env.path("crashed").display().to_string()});
        let file = env.fixture("crashy", f);
        let run_id = env.start(&file, json!({}));
        let s = env.wait_for(
            &run_id,
            &["completed", "failed", "review"],
            Duration::from_secs(20),
        );
        assert_eq!(s["run"]["status"], json!("completed"), "{point}: {s:#}");
        assert_eq!(s["run"]["result"], json!({"done": true}));
        let attempts = s["attempts"].as_array().unwrap();
        let succeeded = |node: &str| {
            attempts
                .iter()
                .filter(|a| a["node_id"] == json!(node) && a["status"] == json!("ok"))
                .count()
        };
        assert_eq!(
            (succeeded("a"), succeeded("b")),
            (1, 1),
            "{point}: each node's result committed once: {attempts:#?}"
        );
        assert!(
            s["claim"]["generation"].as_u64().unwrap() >= 2,
            "resumed under a new generation"
        );
        // A late message from the old child's generation is refused as stale.
        let mut c = env.client();
        let late = Request::new(
            "late",
            RequestBody::WorkerHello(payload::WorkerHello {
                child_token: "old".into(),
                pid: 1,
                definition: None,
                mounted_sources: None,
                start_node: false,
            }),
        )
        .with_run_id(&run_id)
        .with_generation(1);
        assert_eq!(
            c.send(late).unwrap_err().code(),
            Some(RejectionCode::StaleGeneration),
            "{point}"
        );
        env.stop(host);
    }
}

#[test]
fn killing_the_host_around_a_commit_still_gives_the_uninterrupted_result() {
    for fault in [
        "before_commit:worker.transition",
        "after_commit:worker.transition",
    ] {
        let env = Env::new(&[]);
        let mut f = pipeline();
        f["behaviors"]["a"] = json!({"return": {"step": 1}, "sleep_ms": 50});
        let file = env.fixture("p", f);
        let mut crashing = env.serve(Some(fault));
        let run_id = env.start(&file, json!({}));
        let start = Instant::now();
        while crashing.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{fault}: the host never reached its crash point"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let host = env.serve(None);
        let s = env.wait_for(
            &run_id,
            &["completed", "failed", "review"],
            Duration::from_secs(20),
        );
        assert_eq!(s["run"]["status"], json!("completed"), "{fault}: {s:#}");
        assert_eq!(s["run"]["result"], json!({"done": true}), "{fault}");
        let attempts = s["attempts"].as_array().unwrap();
        for node in ["a", "b", "c"] {
            let ok = attempts
                .iter()
                .filter(|a| a["node_id"] == json!(node) && a["status"] == json!("ok"))
                .count();
            assert_eq!(ok, 1, "{fault}: node {node} committed once: {attempts:#?}");
        }
        let d = env.client().call(RequestBody::Diagnose).unwrap();
        assert_eq!(d.body["findings"], json!([]), "{fault}");
        env.stop(host);
    }
}

/// Pids of live (not zombie) processes whose command line contains `needle`.
fn processes_naming(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// A run's child is handed its envelope before the activation commits. When that commit fails,
/// the start is refused, no run exists, the child is stopped, its slot is free again, and the
/// host goes on as if nothing happened.
#[test]
fn a_start_whose_commit_fails_leaves_no_run_and_no_child() {
    // A handshake timeout longer than the test: only the abandonment may stop the child.
    let env = Env::new(&[
        ("PIW_MAX_CHILDREN", "1"),
        ("PIW_HANDSHAKE_TIMEOUT_MS", "120000"),
    ]);
    let host = env.serve(Some("fail_commit:run.start"));
    // The child stays alive until it is stopped: its "module" takes a minute to load.
    let slow = env.fixture(
        "slow",
        json!({
            "graph": {"name": "slow", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
            "sleep_on_load_ms": 60_000,
            "behaviors": {"a": {"return": 1}}
        }),
    );
    let refused = env.client().call(RequestBody::RunStart(payload::RunStart {
        workflow_file: slow.clone(),
        input: json!({}),
        session_id: Some("s1".into()),
        execution_mode: None,
        project_dir: Some(env.dir.path().display().to_string()),
    }));
    assert!(refused.is_err(), "the start did not commit: {refused:?}");
    let runs = env
        .client()
        .call(RequestBody::RunList(payload::RunList {
            session_id: None,
            limit: None,
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(runs.body["runs"], json!([]), "no run exists");
    // The child's process is gone (its command line names the fixture), and the host counts
    // it until then.
    let start = Instant::now();
    loop {
        let status = env.client().call(RequestBody::HostStatus).unwrap();
        let alive = processes_naming(&slow);
        if status.body["active_children"] == json!(0) && alive.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the launched child was not stopped: pids {alive:?}, status {:#}",
            status.body
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The one child slot is free again, and the next run (which gets the same generation and
    // may get the same child record number) completes with its own child's exit recorded.
    let file = env.one_node("ok", json!({"return": {"fine": true}}));
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    let d = env.client().call(RequestBody::Diagnose).unwrap();
    assert_eq!(d.body["findings"], json!([]));
    env.stop(host);
}

#[test]
fn a_changed_included_source_stops_the_resumed_run_before_any_module_code() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let marker = env.path("lib-loaded");
    std::fs::write(
        env.path("lib.json"),
        json!({"on_load_marker": marker.display().to_string(), "v": 1}).to_string(),
    )
    .unwrap();
    let file = env.fixture(
        "mounted",
        json!({
            "graph": {
                "name": "mounted", "start": "ask",
                "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                "edges": [{"from": "ask", "to": "done"}]
            },
            "mounts": {"lib": "lib.json"},
            "behaviors": {"ask": {"wait": "checkpoint"}, "done": {"return": 1}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    assert!(marker.exists(), "the first activation loaded the module");
    std::fs::remove_file(&marker).unwrap();
    std::fs::write(
        env.path("lib.json"),
        json!({"on_load_marker": marker.display().to_string(), "v": 2}).to_string(),
    )
    .unwrap();
    let decision = s["decisions"][0]["decision_id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.client()
        .send(
            Request::new(
                "answer",
                RequestBody::CheckpointAnswer(payload::DecisionAnswer {
                    decision_id: decision,
                    answer: json!("go"),
                    channel: None,
                }),
            )
            .with_run_id(&run_id),
        )
        .unwrap();
    let s = env.wait_for(
        &run_id,
        &["review", "completed", "failed"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("review"), "{s:#}");
    assert!(
        s["run"]["review_reason"]
            .as_str()
            .unwrap()
            .contains("source_changed"),
        "{s:#}"
    );
    assert!(!marker.exists(), "no module code ran after the change");
    env.stop(host);
}

/// The pid a child's grandchild wrote to `pid_file`, once it is there.
fn wait_for_pid_file(pid_file: &Path) -> u32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "grandchild never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The harness's own promise: when a test ends, none of its processes is left, even a host
/// killed without a chance to stop its children, a child that ignores SIGTERM and its
/// grandchild (they carry the installation's `PIW_HOME`, which the host passes on).
#[test]
fn a_test_leaves_no_host_child_or_grandchild_behind() {
    let env = Env::new(&[]);
    let mut host = env.serve(None);
    let pid_file = env.path("grandchild.pid");
    let file = env.one_node(
        "stubborn",
        json!({"grandchild_ignoring_term": pid_file.display().to_string()}),
    );
    let run_id = env.start(&file, json!({}));
    let grandchild = wait_for_pid_file(&pid_file);
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let child = live_children(&store, &run_id)[0];
    drop(store);
    host.kill().unwrap();
    host.wait().unwrap();
    let running = |pid: u32| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid as i32);
    assert!(
        running(child) && running(grandchild),
        "orphans before the end"
    );
    drop(env);
    assert!(!running(child), "child {child} outlived its test");
    assert!(
        !running(grandchild),
        "grandchild {grandchild} outlived its test"
    );
}

#[test]
fn cancelling_kills_the_whole_process_group_after_the_grace() {
    let env = Env::new(&[("PIW_KILL_GRACE_MS", "300")]);
    let host = env.serve(None);
    let pid_file = env.path("grandchild.pid");
    let file = env.one_node(
        "stubborn",
        json!({"grandchild_ignoring_term": pid_file.display().to_string()}),
    );
    let run_id = env.start(&file, json!({}));
    let grandchild = wait_for_pid_file(&pid_file) as i32;
    env.cancel("cancel", &run_id);
    assert_eq!(env.status(&run_id)["run"]["status"], json!("cancelled"));
    let start = Instant::now();
    while Path::new(&format!("/proc/{grandchild}")).exists() && !is_zombie(grandchild) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "grandchild {grandchild} survived the cancel"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    env.stop(host);
}

/// A descendant that left the child's process group (`setsid`, Node's `detached: true`) and
/// ignores SIGTERM is still stopped by a cancel: the host finds the child's descendants through
/// their parent ids before it signals the group, and kills those after the grace. Before, it
/// survived the cancel under init.
#[test]
fn cancelling_kills_a_detached_grandchild_too() {
    let env = Env::new(&[("PIW_KILL_GRACE_MS", "300")]);
    let host = env.serve(None);
    let pid_file = env.path("detached.pid");
    let file = env.one_node(
        "detaching",
        json!({"detached_grandchild": pid_file.display().to_string()}),
    );
    let run_id = env.start(&file, json!({}));
    let grandchild = wait_for_pid_file(&pid_file) as i32;
    let _cleanup = KillOnDrop(grandchild);
    env.cancel("cancel", &run_id);
    wait_until_gone(grandchild, "the detached grandchild survived the cancel");
    env.stop(host);
}

/// A descendant that left the child's group and lost its parent chain (a double fork: its
/// parent exited at once, so init adopted it) is found neither through the group nor through
/// the parent ids. It still carries the child's `PIW_SUPERVISED` marker, and a cancel stops it
/// through that. Before, it survived the cancel.
#[test]
fn cancelling_kills_an_orphaned_grandchild_through_its_marker() {
    let env = Env::new(&[("PIW_KILL_GRACE_MS", "300")]);
    let host = env.serve(None);
    let pid_file = env.path("orphaned.pid");
    let file = env.one_node(
        "double-forking",
        json!({"orphaned_grandchild": pid_file.display().to_string()}),
    );
    let run_id = env.start(&file, json!({}));
    let grandchild = wait_for_pid_file(&pid_file) as i32;
    let _cleanup = KillOnDrop(grandchild);
    let child = env.wait_for(&run_id, &["running"], Duration::from_secs(20))["last_child"]["pid"]
        .as_i64()
        .expect("the running child is recorded") as i32;
    assert_ne!(
        parent_of(grandchild),
        Some(child),
        "the grandchild's chain must be broken for this test to mean anything"
    );
    env.cancel("cancel", &run_id);
    wait_until_gone(grandchild, "the orphaned grandchild survived the cancel");
    env.stop(host);
}

/// A host that dies leaves its child's orphaned grandchild running; the next host of the same
/// installation stops it at start-up (its recorded children are stopped by their groups, which
/// this process left).
#[test]
fn a_restarted_host_stops_what_an_earlier_hosts_children_left() {
    let env = Env::new(&[("PIW_KILL_GRACE_MS", "300")]);
    let mut host = env.serve(None);
    let pid_file = env.path("orphaned.pid");
    let file = env.one_node(
        "double-forking",
        json!({"orphaned_grandchild": pid_file.display().to_string()}),
    );
    env.start(&file, json!({}));
    let grandchild = wait_for_pid_file(&pid_file) as i32;
    let _cleanup = KillOnDrop(grandchild);
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(
        Path::new(&format!("/proc/{grandchild}")).exists() && !is_zombie(grandchild),
        "the grandchild outlived its host"
    );
    let host = env.serve(None);
    wait_until_gone(
        grandchild,
        "the restarted host left the orphaned grandchild running",
    );
    env.stop(host);
}

/// SIGKILLs a pid when dropped, so a process a test made never outlives it.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is this test's own process.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Polls until `pid` runs no more (gone or a zombie); fails with `what` after 20 s.
fn wait_until_gone(pid: i32, what: &str) {
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what} (pid {pid})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

#[test]
fn a_child_flooding_100_mb_keeps_host_memory_bounded_and_the_tails() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let before = rss_kib(host.id());
    let file = env.one_node(
        "flood",
        json!({"flood_bytes": 100_000_000u64, "return": {"ok": true}}),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(60));
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    let after = rss_kib(host.id());
    println!("flood: host RSS {before} KiB -> {after} KiB");
    assert!(
        after < before + 64 * 1024,
        "host memory bounded: {before} -> {after} KiB"
    );
    // The run completes before its child's exit (with the tails) is recorded.
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let start = Instant::now();
    let child = loop {
        let child = store.children(&run_id).unwrap().remove(0);
        if child.exited {
            break child;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the child's exit was never recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        (child.stdout_tail.len(), child.stderr_tail.len()),
        (64 * 1024, 64 * 1024)
    );
    env.stop(host);
}

fn effect_fixture(env: &Env, behavior_extra: Value) -> String {
    let mut effect = json!({"key": "append-once", "contract": "never", "append_to": env.path("out.txt").display().to_string(), "line": "hello"});
    if let Some(m) = behavior_extra.get("crash_while_applying_marker") {
        effect["crash_while_applying_marker"] = m.clone();
    }
    let mut act = json!({"effect": effect});
    if let Some(c) = behavior_extra.get("crash") {
        act["crash"] = c.clone();
        act["once_marker"] = behavior_extra["once_marker"].clone();
    }
    env.fixture(
        "effect",
        json!({
            "graph": {
                "name": "effect", "start": "act",
                "nodes": {"act": {"kind": "action", "retry": "never"}, "after": {"kind": "compute"}},
                "edges": [{"from": "act", "to": "after"}]
            },
            "behaviors": {"act": act, "after": {}}
        }),
    )
}

fn lines(env: &Env) -> usize {
    std::fs::read_to_string(env.path("out.txt"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn an_effect_receipt_survives_child_and_host_restarts() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    // The child applies and settles the effect, then dies before proposing the transition.
    let marker = env.path("crashed").display().to_string();
    let file = effect_fixture(
        &env,
        json!({"crash": "before_propose", "once_marker": marker}),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(lines(&env), 1, "applied exactly once");
    assert_eq!(
        s["run"]["result"]["replayed"],
        json!(true),
        "the rerun got the stored receipt: {s:#}"
    );
    assert_eq!(s["effects"][0]["state"], json!("applied"));
    env.stop(host);
    // After a host restart the receipt is still there.
    let host = env.serve(None);
    let s = env.status(&run_id);
    assert_eq!(s["effects"][0]["receipt"], json!({"lines": 1}));
    env.stop(host);
}

#[test]
fn a_child_killed_while_applying_leaves_the_effect_uncertain_and_the_run_in_review() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let file = effect_fixture(
        &env,
        json!({"crash_while_applying_marker": env.path("applying-crash").display().to_string()}),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(
        &run_id,
        &["review", "completed", "failed"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("review"), "{s:#}");
    assert_eq!(s["effects"][0]["state"], json!("uncertain"));
    assert_eq!(lines(&env), 1);
    // Never retried, whatever would retry it: a restart (whose recovery requeues what older
    // hosts held) and a clock an hour later (past every back-off and lease) leave it in
    // review, with one line in the file.
    env.stop(host);
    let host = env.serve(None);
    env.advance_clock(3_600_000);
    let s = env.settle(&run_id);
    assert_eq!(s["run"]["status"], json!("review"), "{s:#}");
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    assert_eq!(
        store.children(&run_id).unwrap().len(),
        1,
        "no child was launched for the run after it stopped for review"
    );
    assert_eq!(lines(&env), 1);
    env.stop(host);
}

#[test]
fn an_interaction_deadline_counts_no_time_while_the_host_is_down_and_routes_timed_out_once_it_passes(
) {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let file = deadline_fixture(
        &env,
        "ask",
        "agent",
        NODE_DEADLINE_MS,
        json!({"interact": "agent"}),
    );
    let session = env.present();
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    assert!(
        s["interactions"][0]["deadline_at"].as_i64().is_some(),
        "the session presents the request: its deadline runs: {s:#}"
    );
    drop(session);
    env.stop(host);
    // The request was still pending when the host stopped: what follows is the restart's doing.
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let requests = store.interactions(Some(&run_id), None).unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].status, "pending", "{requests:#?}");
    drop(store);
    // Far more than the node's timeout passes while no host runs: it uses up none of it.
    env.advance_clock(10 * NODE_DEADLINE_MS as i64);
    let host = env.serve(None);
    let s = env.settle(&run_id);
    assert_eq!(s["run"]["status"], json!("waiting"), "{s:#}");
    assert_eq!(s["interactions"][0]["status"], json!("pending"), "{s:#}");
    assert_eq!(
        s["interactions"][0]["deadline_at"],
        json!(null),
        "nobody presents it after the start: {s:#}"
    );
    // Presented again, it has its time left; once that passes it times out.
    let _session = env.present();
    let start = Instant::now();
    while env.status(&run_id)["interactions"][0]["deadline_at"].is_null() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never held again"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    env.advance_clock(NODE_DEADLINE_MS as i64 + 1);
    env.settle(&run_id);
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "timed_out", "review"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"late": true}));
    assert_eq!(s["interactions"][0]["status"], json!("expired"));
    assert_eq!(
        s["attempts"].as_array().unwrap().last().unwrap()["status"],
        json!("timed_out"),
        "the same attempt recorded as timed out"
    );
    assert_eq!(
        s["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["node_id"] == json!("ask"))
            .count(),
        1
    );
    env.stop(host);
}

#[test]
fn a_session_subscriber_sees_every_event_of_a_run_in_order() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let mut sub = env.client();
    sub.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: None,
        session_id: Some("s1".into()),
        all: None,
    }))
    .unwrap();
    let file = env.fixture("pipeline", pipeline());
    let run_id = env.start(&file, json!({}));
    let mut seen = Vec::new();
    loop {
        let e = sub.next_event().unwrap();
        assert_eq!(e.run_id, run_id);
        seen.push((e.seq, e.event_kind.clone()));
        if e.event_kind == "completed" {
            break;
        }
        assert!(seen.len() < 100, "{seen:?}");
    }
    let seqs: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "no gaps, no repeats: {seen:?}"
    );
    assert!(seen.iter().any(|(_, k)| k == "activated"), "{seen:?}");
    env.stop(host);
}

/// Found by the seeded soak (`scripts/soak --seed 7`): a client that resends a `run.start` after
/// a broken connection (same request id, a replayed receipt) made the host publish every event
/// of that run again, so a subscriber saw `started` after `activated`.
#[test]
fn a_replayed_run_start_publishes_no_event_again() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let mut sub = env.client();
    sub.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: None,
        session_id: Some("s1".into()),
        all: None,
    }))
    .unwrap();
    let file = env.fixture("pipeline", pipeline());
    let start = |request_id: &str| {
        let body = RequestBody::RunStart(payload::RunStart {
            workflow_file: file.clone(),
            input: json!({}),
            session_id: Some("s1".into()),
            execution_mode: None,
            project_dir: Some(env.dir.path().display().to_string()),
        });
        env.client().send(Request::new(request_id, body)).unwrap()
    };
    let first = start("start-once");
    let run_id = first.body["run_id"].as_str().unwrap().to_owned();
    loop {
        let e = sub.next_event().unwrap();
        if e.run_id == run_id && e.event_kind == "completed" {
            break;
        }
    }
    let again = start("start-once");
    assert!(again.replayed);
    assert_eq!(again.body["run_id"], json!(run_id));
    // A second run's events come next; none of the first run's.
    let second = start("start-second").body["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    loop {
        let e = sub.next_event().unwrap();
        assert_eq!(
            e.run_id, second,
            "event {} ({}) of the replayed start published again",
            e.seq, e.event_kind
        );
        if e.event_kind == "completed" {
            break;
        }
    }
    env.stop(host);
}

#[test]
fn a_misrouting_child_is_refused_and_the_run_fails_with_the_reason() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let mut f = pipeline();
    // The graph says a -> b; this child proposes a -> c.
    f["behaviors"]["a"] = json!({"return": {"step": 1}, "propose_next": "c"});
    let file = env.fixture("misroute", f);
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("failed"), "{s:#}");
    let error = s["run"]["error"].as_str().unwrap();
    assert!(
        error.contains("transition refused") && error.contains('c'),
        "{error}"
    );
    assert_eq!(
        s["attempts"].as_array().unwrap().len(),
        1,
        "no attempt was opened at c"
    );
    env.stop(host);
}

#[test]
fn graceful_host_stops_do_not_count_as_child_losses() {
    let env = Env::new(&[("PIW_KILL_GRACE_MS", "200")]);
    let file = env.one_node("long", json!({"sleep_ms": 600000}));
    let mut run_id = String::new();
    for round in 0..4 {
        let host = env.serve(None);
        if round == 0 {
            run_id = env.start(&file, json!({}));
        }
        env.wait_for(&run_id, &["running"], Duration::from_secs(20));
        // Wait until the child's node attempt is open, then stop the host gracefully.
        let start = Instant::now();
        while env.status(&run_id)["attempts"]
            .as_array()
            .is_none_or(|a| a.iter().all(|x| x["status"] != json!("running")))
        {
            assert!(start.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(20));
        }
        env.stop(host);
    }
    let host = env.serve(None);
    let s = env.status(&run_id);
    assert_ne!(
        s["run"]["status"],
        json!("review"),
        "four graceful stops sent the run to review: {s:#}"
    );
    env.stop(host);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// The pids of the run's recorded children that are alive (not exited, not zombies).
fn live_children(store: &piw_host::store::Store, run_id: &str) -> Vec<u32> {
    store
        .children(run_id)
        .unwrap()
        .iter()
        .filter_map(|c| c.pid)
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(*pid as i32))
        .collect()
}

#[test]
fn a_host_stall_longer_than_the_lease_never_leaves_two_live_children_for_one_run() {
    let env = Env::with_test_clock(&[("PIW_KILL_GRACE_MS", "200")]);
    let host = env.serve(None);
    let file = env.one_node("spin", json!({"spin_forever": true}));
    let run_id = env.start(&file, json!({}));
    wait_for_running_attempt(&env, &run_id, "a");
    // Stall the host (as a suspended laptop or a stuck disk would) for three leases: its
    // clock jumps while it is stopped, so it wakes to find its own claim expired.
    // SAFETY: signals to our own child process.
    unsafe {
        assert_eq!(libc_kill(host.id() as i32, 19), 0); // SIGSTOP
    }
    env.advance_clock(90_000);
    unsafe {
        assert_eq!(libc_kill(host.id() as i32, 18), 0); // SIGCONT
    }
    // Watch the whole recovery, not one moment of it: at no sample are two children of the
    // run alive, and it ends with the run running again in a new generation.
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let start = Instant::now();
    loop {
        let s = env.status(&run_id);
        let children = store.children(&run_id).unwrap();
        let alive = live_children(&store, &run_id);
        assert!(
            alive.len() <= 1,
            "two live children for one run after a stall: {alive:?}"
        );
        if s["claim"]["generation"].as_u64() >= Some(2)
            && children.len() >= 2
            && children[0].exited
            && alive.len() == 1
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the run was never taken up again after the stall: {s:#} {children:#?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let kinds = events(&env, &run_id);
    assert!(
        !kinds.iter().any(|k| k == "child_lost"),
        "the host's own stall is not a loss of the run: {kinds:?}"
    );
    env.stop(host);
}

#[test]
fn a_restarted_host_kills_the_orphaned_children_of_the_host_that_died() {
    let env = Env::new(&[]);
    let mut host = env.serve(None);
    let file = env.one_node("spin", json!({"spin_forever": true}));
    let run_id = env.start(&file, json!({}));
    env.wait_for(&run_id, &["running"], Duration::from_secs(20));
    // Wait until the child has its attempt and is spinning (not mid-request to the host, which
    // would make it notice the host's death and exit by itself).
    let start = Instant::now();
    while env.status(&run_id)["attempts"]
        .as_array()
        .is_none_or(|a| a.iter().all(|x| x["status"] != json!("running")))
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the node never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let start = Instant::now();
    // The run's live child: recorded, not exited, and spinning.
    let orphan = loop {
        let live = store
            .children(&run_id)
            .unwrap()
            .into_iter()
            .filter(|c| !c.exited)
            .filter_map(|c| c.pid)
            .find(|pid| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(*pid as i32));
        if let Some(pid) = live {
            break pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no live child was ever recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The host dies without a chance to stop its child; the spinning child never notices.
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(
        Path::new(&format!("/proc/{orphan}")).exists() && !is_zombie(orphan as i32),
        "the orphan outlived its host"
    );
    let host = env.serve(None);
    let start = Instant::now();
    while Path::new(&format!("/proc/{orphan}")).exists() && !is_zombie(orphan as i32) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the restarted host left orphan {orphan} running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The run carries on in a fresh child of the new host.
    let s = env.wait_for(&run_id, &["running"], Duration::from_secs(20));
    assert!(s["claim"]["generation"].as_u64().unwrap() >= 2, "{s:#}");
    env.stop(host);
}

#[test]
fn active_children_are_capped_and_the_rest_wait_in_the_queue() {
    let env = Env::new(&[("PIW_MAX_CHILDREN", "1")]);
    let host = env.serve(None);
    // A run's node holds its child until the test creates its barrier file: one barrier for
    // the first run, another for the second and third.
    let held_until = |name: &str| {
        let barrier = env.path(name);
        let file = env.one_node(
            name,
            json!({"wait_for_file": barrier.display().to_string(), "return": {"ok": true}}),
        );
        (barrier, file)
    };
    let (barrier, file) = held_until("first");
    let (later_barrier, later) = held_until("later");
    let first = env.start(&file, json!({}));
    wait_for_running_attempt(&env, &first, "a");
    let second = env.start(&later, json!({}));
    // The second run is queued whatever the machine's speed: the only slot is held until
    // the barrier opens. Two rounds through the store thread let it schedule what it can.
    assert_eq!(
        env.settle(&second)["run"]["status"],
        json!("queued"),
        "only one child at a time"
    );
    let status = env.client().call(RequestBody::HostStatus).unwrap();
    assert_eq!(status.body["active_children"], json!(1));
    std::fs::write(&barrier, b"").unwrap();
    env.wait_for(&first, &["completed"], Duration::from_secs(20));
    // A third run, cancelled while it waits for a slot (the second holds it), never gets a
    // child.
    wait_for_running_attempt(&env, &second, "a");
    let third = env.start(&later, json!({}));
    assert_eq!(env.status(&third)["run"]["status"], json!("queued"));
    env.cancel("cancel-queued", &third);
    std::fs::write(&later_barrier, b"").unwrap();
    env.wait_for(&second, &["completed"], Duration::from_secs(20));
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    assert!(
        store.children(&third).unwrap().is_empty(),
        "a cancelled queued run is never activated"
    );
    assert_eq!(env.status(&third)["run"]["status"], json!("cancelled"));
    env.stop(host);
}

#[test]
fn a_cpu_limit_kills_a_runaway_child_and_repeated_losses_stop_the_run_for_review() {
    // Each child may use one CPU second; the node spins for ever, so every child is killed by
    // its rlimit, and after three losses without progress the run stops for review.
    let env = Env::new(&[("PIW_CHILD_CPU_SECONDS", "1")]);
    let host = env.serve(None);
    let file = env.one_node("runaway", json!({"spin_forever": true}));
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(
        &run_id,
        &["review", "completed", "failed"],
        Duration::from_secs(60),
    );
    assert_eq!(s["run"]["status"], json!("review"), "{s:#}");
    assert!(
        s["run"]["review_reason"]
            .as_str()
            .unwrap()
            .contains("3 times"),
        "{s:#}"
    );
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let children = store.children(&run_id).unwrap();
    assert_eq!(children.len(), 3, "{children:#?}");
    assert!(
        children.iter().all(|c| c.exited && c.signal.is_some()),
        "killed by a signal: {children:#?}"
    );
    env.stop(host);
}

/// What the Python children of these tests share: read the envelope, connect, and `call(kind,
/// payload, **envelope_fields)` one request at a time.
const PY_WORKER_PRELUDE: &str = r#"
import json, os, socket, struct, sys, time
env = json.loads(sys.stdin.read())
s = socket.socket(socket.AF_UNIX); s.connect(env["socket_path"])
n = [0]
def call(kind, payload, **fields):
    n[0] += 1
    req = {"schema": "piw.protocol.v1", "request_id": "py-%d-%d" % (env["generation"], n[0]),
           "kind": kind, "run_id": env["run_id"], "generation": env["generation"], "payload": payload}
    req.update(fields)
    body = json.dumps(req).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
    head = s.recv(4); size = struct.unpack(">I", head)[0]; data = b""
    while len(data) < size: data += s.recv(size - len(data))
    return json.loads(data)
def answer(fixture, value):
    # Written whole, then renamed: the test polls for the file and must never read it half-done.
    with open(fixture + ".answer.tmp", "w") as f:
        f.write(json.dumps(value))
    os.rename(fixture + ".answer.tmp", fixture + ".answer")
"#;

/// Writes a Python child: the prelude, then `body`.
fn python_child(env: &Env, name: &str, body: &str) -> PathBuf {
    let script = env.path(name);
    std::fs::write(&script, format!("{PY_WORKER_PRELUDE}{body}")).unwrap();
    script
}

/// What a Python child wrote to `<fixture>.answer`, once it is there (20 s at most).
fn python_answer(fixture: &str, who: &str) -> Value {
    let answer = PathBuf::from(format!("{fixture}.answer"));
    let start = Instant::now();
    while !answer.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{who} never wrote its answer"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    serde_json::from_slice(&std::fs::read(&answer).unwrap()).unwrap()
}

/// A child in another language that speaks the protocol itself and lies about the node its
/// attempt ran: it runs `a`, then proposes `b -> c` (a route that exists from `b`, not from `a`).
const LYING_CHILD: &str = r#"
graph = json.load(open(env["source_root"]))["graph"]
call("worker.hello", {"child_token": env["child_token"], "pid": 1, "definition": graph, "mounted_sources": {}})
r = call("worker.node_started", {}, node_id="a")
attempt = r["receipt"]["body"]["attempt_id"]
r = call("worker.transition", {"outcome": {"status": "succeeded", "output": {}}, "next_node": "c"},
         node_id="b", attempt_id=attempt)
answer(sys.argv[1], r)
"#;

#[test]
fn a_child_cannot_route_from_a_node_its_attempt_did_not_run() {
    let mut env = Env::new(&[]);
    let script = python_child(&env, "liar.py", LYING_CHILD);
    // This host runs `.workflow.json` with the lying child instead of the json worker.
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(".workflow.json=/usr/bin/env python3 {}", script.display()),
    ));
    let host = env.serve(None);
    let file = env.fixture(
        "chain",
        json!({
            "graph": {"name": "chain", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}, "c": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]},
            "behaviors": {}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let reply = python_answer(&file, "the lying child");
    assert_eq!(reply["ok"], json!(false), "{reply}");
    assert_eq!(reply["rejection"]["code"], json!("malformed"), "{reply}");
    let s = env.status(&run_id);
    assert!(
        s["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["node_id"] != json!("c")),
        "the run never reached c: {s:#}"
    );
    env.stop(host);
}

/// A child that decides deadlines when attempts open (the authoring API's `timeoutMs`
/// function): it reports them for `timeout_at_start` nodes, and tries to for a node whose
/// deadline the graph fixes.
const DEADLINE_CHILD: &str = r#"
graph = json.load(open(env["source_root"]))["graph"]
call("worker.hello", {"child_token": env["child_token"], "pid": 1, "definition": graph, "mounted_sources": {}})
out = {}
out["fixed_started"] = call("worker.node_started", {"timeout_ms": 5000}, node_id="b")
out["a"] = call("worker.node_started", {"timeout_ms": 600000}, node_id="a")
a = out["a"]["receipt"]["body"]["attempt_id"]
ok = {"status": "succeeded", "output": {}}
out["fixed_transition"] = call("worker.transition", {"outcome": ok, "next_node": "b", "next_timeout_ms": 5},
                               node_id="a", attempt_id=a)
out["b"] = call("worker.transition", {"outcome": ok, "next_node": "b"}, node_id="a", attempt_id=a)
b = out["b"]["receipt"]["body"]["attempt_id"]
out["c"] = call("worker.transition", {"outcome": ok, "next_node": "c", "next_timeout_ms": 700000},
                node_id="b", attempt_id=b)
call("worker.fail", {"error": "done"}, attempt_id=out["c"]["receipt"]["body"]["attempt_id"])
answer(sys.argv[1], out)
"#;

#[test]
fn a_deadline_decided_at_the_start_is_saved_with_its_attempt_and_only_for_such_a_node() {
    let mut env = Env::new(&[]);
    let script = python_child(&env, "deadlines.py", DEADLINE_CHILD);
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(".workflow.json=/usr/bin/env python3 {}", script.display()),
    ));
    let host = env.serve(None);
    let file = env.fixture(
        "deadlines",
        json!({
            "graph": {"name": "deadlines", "start": "a",
                      "nodes": {"a": {"kind": "compute", "timeout_at_start": true},
                                "b": {"kind": "compute"},
                                "c": {"kind": "agent", "timeout_at_start": true}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]},
            "behaviors": {}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let out = python_answer(&file, "the deadline child");
    for refused in ["fixed_started", "fixed_transition"] {
        assert_eq!(out[refused]["ok"], json!(false), "{refused}: {out:#}");
        let message = out[refused]["rejection"]["message"].as_str().unwrap();
        assert!(
            message.contains("its deadline comes from the graph"),
            "{message}"
        );
    }
    let deadline = |step: &str| out[step]["receipt"]["body"]["deadline_at"].clone();
    assert_eq!(deadline("b"), Value::Null, "{out:#}");
    let (a, c) = (
        deadline("a").as_i64().unwrap(),
        deadline("c").as_i64().unwrap(),
    );
    // Both are the host's now plus the reported timeout; the steps between took seconds at most.
    assert!((100_000..130_000).contains(&(c - a)), "a {a}, c {c}");
    let s = env.wait_for(&run_id, &["failed"], Duration::from_secs(20));
    let saved: Vec<(String, Value)> = s["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|x| {
            (
                x["node_id"].as_str().unwrap().to_owned(),
                x["deadline_at"].clone(),
            )
        })
        .collect();
    assert_eq!(
        saved,
        [
            ("a".to_owned(), json!(a)),
            ("b".to_owned(), Value::Null),
            ("c".to_owned(), json!(c))
        ],
        "{s:#}"
    );
    env.stop(host);
}

fn interactive_fixture(env: &Env) -> String {
    env.fixture(
        "ask",
        json!({
            "graph": {"name": "ask", "start": "ask",
                      "nodes": {"ask": {"kind": "agent"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"interact": "agent", "validate": {"value": 42}}, "done": {}}
        }),
    )
}

fn submit(
    env: &Env,
    run_id: &str,
    s: &Value,
    request_id: &str,
    value: i64,
) -> Result<piw_host::protocol::Receipt, piw_host::client::ClientError> {
    let interaction = &s["interactions"][0];
    env.client().send(
        Request::new(
            request_id,
            RequestBody::InteractionSubmit(payload::InteractionSubmit {
                interaction_id: interaction["interaction_id"].as_str().unwrap().to_owned(),
                result: json!({ "value": value }),
                refuse_repeat: false,
            }),
        )
        .with_run_id(run_id)
        .with_node_id(interaction["node_id"].as_str().unwrap())
        .with_attempt_id(interaction["attempt_id"].as_str().unwrap()),
    )
}

/// A `validate` that does not return in time: the host stops its child, the submission is
/// rejected with the reason, and the request waits for another one (nothing stays stuck).
#[test]
fn a_validation_that_takes_too_long_is_stopped_and_its_submission_rejected() {
    let env = Env::new(&[("PIW_VALIDATION_TIMEOUT_MS", "300")]);
    let host = env.serve(None);
    let file = env.fixture(
        "slowcheck",
        json!({
            "graph": {"name": "slowcheck", "start": "ask",
                      "nodes": {"ask": {"kind": "agent"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"interact": "agent", "validate": {"value": 42},
                                  "validate_sleep_ms": 60_000}, "done": {}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    let mut sub = env.client();
    sub.set_timeout(Some(Duration::from_secs(30))).unwrap();
    sub.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: Some(run_id.clone()),
        session_id: None,
        all: None,
    }))
    .unwrap();
    let submission = submit(&env, &run_id, &s, "slow-1", 42).unwrap().body["submission_id"].clone();
    // The rejection is published like a verdict, so a waiter learns it without polling.
    let rejected = loop {
        let e = sub.next_event().expect("a submission_rejected event");
        if e.event_kind == "submission_rejected" {
            break e;
        }
    };
    assert_eq!(rejected.data["submission"], submission);
    let said = rejected.data["error"].as_str().unwrap();
    assert!(said.contains("validation timed out after 300 ms"), "{said}");
    let start = Instant::now();
    let s = loop {
        let s = env.status(&run_id);
        let last = &s["interactions"][0]["last_submission"];
        if s["run"]["status"] == json!("waiting") && last["state"] == json!("rejected") {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the slow validation was not stopped: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let error = s["interactions"][0]["last_submission"]["error"]
        .as_str()
        .unwrap();
    assert!(error.contains("validation did not finish"), "{error}");
    assert!(
        error.contains("validation timed out after 300 ms"),
        "{error}"
    );
    assert_eq!(s["interactions"][0]["status"], json!("pending"));
    env.stop(host);
}

#[test]
fn a_submission_is_validated_in_a_child_rejected_then_corrected_for_the_same_request() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let run_id = env.start(&interactive_fixture(&env), json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    submit(&env, &run_id, &s, "wrong", 7).unwrap();
    // The validation child rejects it; the request is pending again, with the error.
    let start = Instant::now();
    let s = loop {
        let s = env.status(&run_id);
        if s["run"]["status"] == json!("waiting")
            && s["interactions"][0]["status"] == json!("pending")
        {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never rejected: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let interaction_id = s["interactions"][0]["interaction_id"].as_str().unwrap();
    let subs = store.submissions(interaction_id).unwrap();
    assert_eq!(subs[0].state, "rejected");
    assert!(
        subs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("value must be 42"),
        "{subs:?}"
    );
    // A duplicate of the same request id returns the original receipt.
    assert!(submit(&env, &run_id, &s, "wrong", 7).unwrap().replayed);
    submit(&env, &run_id, &s, "right", 42).unwrap();
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"value": 42}));
    env.stop(host);
}

#[test]
fn a_submission_committed_just_before_a_host_crash_is_validated_after_restart() {
    let env = Env::new(&[]);
    let file = interactive_fixture(&env);
    let host = env.serve(None);
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    env.stop(host);
    // This host dies right after committing the submission, before any child validates it.
    let mut crashing = env.serve(Some("after_commit:interaction.submit"));
    assert!(
        submit(&env, &run_id, &s, "once", 42).is_err(),
        "the host died before replying"
    );
    // The host died at the fault point, after the commit: not for any other reason.
    let start = Instant::now();
    let died = loop {
        if let Some(status) = crashing.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the host never died"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&died),
        Some(6),
        "{died}"
    );
    let log = std::fs::read_to_string(env.path("hosts.log")).unwrap();
    assert!(
        log.contains("PIW_FAULT after_commit:interaction.submit reached"),
        "{log}"
    );
    let host = env.serve(None);
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_eq!(
        s["run"]["status"],
        json!("completed"),
        "the same submission was validated: {s:#}"
    );
    // The retried request id returns the committed receipt; nothing was submitted twice.
    assert!(submit(&env, &run_id, &s, "once", 42).unwrap().replayed);
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let interaction_id = s["interactions"][0]["interaction_id"].as_str().unwrap();
    assert_eq!(store.submissions(interaction_id).unwrap().len(), 1);
    env.stop(host);
}

/// A child that reports several pure steps in one message (`earlier`), then tries to slip a
/// node with a timeout, then (mode `misroute`) a step the graph does not allow.
const CHAINING_CHILD: &str = r#"
mode, fixture = sys.argv[1], sys.argv[2]
if os.path.exists(fixture + ".answer"):
    # A later child of the same run (the first one exited): stay quiet until stopped.
    time.sleep(3600)
ok = lambda v: {"status": "succeeded", "output": {"v": v}}
graph = json.load(open(env["source_root"]))["graph"]
r = call("worker.hello", {"child_token": env["child_token"], "pid": 1, "definition": graph,
                          "mounted_sources": {}, "start_node": True})
attempt = r["receipt"]["body"]["resume"]["attempt_id"]
answers = []
if mode == "misroute":
    answers.append(call("worker.transition", {"outcome": ok(1), "next_node": "z",
                        "earlier": [{"outcome": ok(0), "next_node": "y"}]}, node_id="a", attempt_id=attempt))
else:
    r = call("worker.transition", {"outcome": ok(2), "next_node": "z",
             "earlier": [{"outcome": ok(0), "next_node": "x"}, {"outcome": ok(1), "next_node": "y"}]},
             node_id="a", attempt_id=attempt)
    answers.append(r)
    z = r["receipt"]["body"]["attempt_id"]
    answers.append(call("worker.transition", {"outcome": ok(4), "next_node": "done",
                        "earlier": [{"outcome": ok(3), "next_node": "t"}]}, node_id="z", attempt_id=z))
answer(fixture, answers)
time.sleep(3600)
"#;

fn chaining_env(mode: &str) -> (Env, HostProc, String, Vec<Value>) {
    let mut env = Env::new(&[]);
    let script = python_child(&env, "chain.py", CHAINING_CHILD);
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(
            ".workflow.json=/usr/bin/env python3 {} {mode}",
            script.display()
        ),
    ));
    let host = env.serve(None);
    let file = env.fixture(
        "chain",
        json!({
            "graph": {"name": "chain", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "x": {"kind": "compute"},
                                "y": {"kind": "compute"}, "z": {"kind": "compute"},
                                "t": {"kind": "compute", "timeout_ms": 60000},
                                "done": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "x"}, {"from": "x", "to": "y"},
                                {"from": "y", "to": "z"}, {"from": "z", "to": "t"},
                                {"from": "t", "to": "done"}]},
            "behaviors": {}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let answers = python_answer(&file, &format!("the chaining child ({mode})"))
        .as_array()
        .cloned()
        .unwrap();
    (env, host, run_id, answers)
}

#[test]
fn pure_steps_reported_together_are_checked_and_recorded_one_by_one() {
    let (env, host, run_id, answers) = chaining_env("chain");
    // a -> x -> y reported as earlier steps, y -> z as the step itself: one message.
    assert_eq!(answers[0]["ok"], json!(true), "{answers:#?}");
    // An unreported step into `t`, which has a timeout, is refused and changes nothing.
    assert_eq!(answers[1]["ok"], json!(false), "{answers:#?}");
    assert_eq!(answers[1]["rejection"]["code"], json!("malformed"));
    let s = env.status(&run_id);
    let attempts: Vec<(String, String, Value)> = s["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .filter(|a| a["status"] != json!("interrupted"))
        .map(|a| {
            (
                a["node_id"].as_str().unwrap().to_owned(),
                a["status"].as_str().unwrap().to_owned(),
                a["output"].clone(),
            )
        })
        .collect();
    let expected: Vec<(String, String, Value)> = vec![
        ("a".into(), "ok".into(), json!({"v": 0})),
        ("x".into(), "ok".into(), json!({"v": 1})),
        ("y".into(), "ok".into(), json!({"v": 2})),
    ];
    assert_eq!(&attempts[..3], &expected[..], "{s:#}");
    assert_eq!(attempts[3].0, "z", "{s:#}");
    // Each step has its own event, in order, without gaps.
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let events = store.events(&run_id, 0).unwrap();
    let transitions = events.iter().filter(|e| e.kind == "transitioned").count();
    assert!(transitions >= 3, "{events:#?}");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    env.stop(host);
}

#[test]
fn an_unreported_step_the_graph_does_not_allow_fails_the_run() {
    let (env, host, run_id, answers) = chaining_env("misroute");
    assert_eq!(answers[0]["ok"], json!(true), "{answers:#?}");
    let refused = answers[0]["receipt"]["body"]["refused"].as_str().unwrap();
    assert!(refused.contains("transition refused"), "{refused}");
    let s = env.wait_for(&run_id, &["failed"], Duration::from_secs(20));
    assert!(
        s["run"]["error"]
            .as_str()
            .unwrap()
            .contains("transition refused"),
        "{s:#}"
    );
    env.stop(host);
}

/// A graceful stop closes every worker's connection at once, while a slow client can hold the
/// stop open for seconds (it pipelines requests and never reads the replies). A busy run's
/// child exits when its connection closes: that exit must leave the run resumable, not count
/// as a lost child, and the run must not be launched again meanwhile (three such losses used
/// to send a healthy run to review during an ordinary stop).
#[test]
fn a_graceful_stop_held_open_by_a_slow_client_costs_a_busy_run_nothing() {
    use piw_host::protocol::{write_frame, Limits};
    use std::io::Write as _;
    let env = Env::new(&[("PIW_KILL_GRACE_MS", "200")]);
    let host = env.serve(None);
    // A finished run with a large output: its status replies fill the slow client's socket.
    let big = env.one_node("big", json!({"return": {"blob": "x".repeat(60_000)}}));
    let big_id = env.start(&big, json!({}));
    env.wait_for(&big_id, &["completed"], Duration::from_secs(20));
    // A busy run: a cycle of short compute nodes, its child talks to the host all the time.
    let busy = env.fixture(
        "busy",
        json!({
            "graph": {"name": "busy", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]},
            "behaviors": {"a": {"sleep_ms": 20}, "b": {"sleep_ms": 20}}
        }),
    );
    let run_id = env.start(&busy, json!({}));
    env.wait_for(&run_id, &["running"], Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    let mut slow = std::os::unix::net::UnixStream::connect(&env.paths.socket).unwrap();
    for i in 0..40 {
        let req = Request::new(
            format!("slow-{i}"),
            RequestBody::RunStatus(Default::default()),
        )
        .with_run_id(&big_id);
        write_frame(&mut slow, &req, &Limits::default()).unwrap();
    }
    slow.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before_stop = events(&env, &run_id).len();
    env.stop(host);
    drop(slow);

    let after_stop = events(&env, &run_id);
    let during_stop = &after_stop[before_stop..];
    assert!(
        !during_stop
            .iter()
            .any(|k| k == "child_lost" || k == "activated"),
        "the stop counted a loss or launched the run again: {during_stop:?}"
    );
    let host = env.serve(None);
    let s = env.status(&run_id);
    assert_ne!(s["run"]["status"], json!("review"), "{}", s["run"]);
    env.stop(host);
}

/// A worker message whose batch fails to commit (a full disk for a moment) is answered
/// `internal`; the worker library sends it again with the same request id, and the host, which
/// took back what the failed hello changed in its memory, accepts it: the run completes and
/// no child is counted lost.
#[test]
fn a_hello_whose_commit_failed_once_is_said_again_and_the_run_completes() {
    let env = Env::new(&[]);
    let host = env.serve(Some("fail_commit:worker.hello"));
    let file = env.one_node("once", json!({"return": {"ok": true}}));
    let run_id = env.start(&file, json!({}));
    let done = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(20),
    );
    assert_eq!(done["run"]["status"], json!("completed"), "{}", done["run"]);
    let kinds = events(&env, &run_id);
    assert!(
        !kinds.iter().any(|k| k == "child_lost"),
        "the failed commit cost the run a child: {kinds:?}"
    );
    env.stop(host);
}

/// Answers the first pending decision of `run_id` as a person (`decision.answer`) or through
/// the model-facing path (`checkpoint.answer`), with request id `request_id`.
fn answer_decision(
    env: &Env,
    s: &Value,
    request_id: &str,
    person: bool,
    answer: Value,
) -> Result<piw_host::protocol::Receipt, piw_host::client::ClientError> {
    let decision = s["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["status"] == json!("pending"))
        .unwrap_or_else(|| panic!("no pending decision: {s:#}"));
    let a = payload::DecisionAnswer {
        decision_id: decision["decision_id"].as_str().unwrap().to_owned(),
        answer,
        channel: None,
    };
    let body = if person {
        RequestBody::DecisionAnswer(a)
    } else {
        RequestBody::CheckpointAnswer(a)
    };
    env.client()
        .send(Request::new(request_id, body).with_run_id(decision["run_id"].as_str().unwrap()))
}

/// The child that continues a human decision with the person's answer dies before it
/// proposes the transition: the next child continues with the same answer; the person is not
/// asked again.
#[test]
fn a_human_answer_survives_the_crash_of_the_child_that_continues_with_it() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let marker = env.path("crashed").display().to_string();
    let file = env.fixture(
        "approve",
        json!({
            "graph": {"name": "approve", "start": "ask",
                      "nodes": {"ask": {"kind": "human_decision"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "human_decision", "crash": "before_propose",
                                  "once_marker": marker},
                          "done": {}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    answer_decision(&env, &s, "approve-1", true, json!("ship it")).unwrap();
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review", "waiting"],
        Duration::from_secs(20),
    );
    assert!(Path::new(&marker).exists(), "the continuing child crashed");
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"answer": "ship it"}));
    assert_eq!(
        s["decisions"].as_array().unwrap().len(),
        1,
        "asked once: {s:#}"
    );
    env.stop(host);
}

/// The validation child accepts the submission and dies before it proposes the transition:
/// the next child continues with the accepted result; the model is not asked again.
#[test]
fn an_accepted_submission_survives_the_crash_of_the_child_that_accepted_it() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let marker = env.path("crashed").display().to_string();
    let file = env.fixture(
        "ask",
        json!({
            "graph": {"name": "ask", "start": "ask",
                      "nodes": {"ask": {"kind": "agent"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"interact": "agent", "validate": {"value": 42},
                                  "crash": "before_propose", "once_marker": marker},
                          "done": {}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    submit(&env, &run_id, &s, "good", 42).unwrap();
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review", "waiting"],
        Duration::from_secs(20),
    );
    assert!(Path::new(&marker).exists(), "the accepting child crashed");
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"value": 42}));
    assert_eq!(
        s["interactions"].as_array().unwrap().len(),
        1,
        "asked once: {s:#}"
    );
    env.stop(host);
}

/// A workflow whose first node `ask` (of `kind`, with `timeout_ms`, doing `ask`) routes on
/// `$result.outcome`: `timed_out` to `late`, which returns `{"late": true}`, and `succeeded` to
/// `ok`, which returns its input.
fn deadline_fixture(env: &Env, name: &str, kind: &str, timeout_ms: u64, ask: Value) -> String {
    env.fixture(
        name,
        json!({
            "graph": {"name": name, "start": "ask",
                      "nodes": {"ask": {"kind": kind, "timeout_ms": timeout_ms},
                                "late": {"kind": "compute"}, "ok": {"kind": "compute"}},
                      "edges": [{"from": "ask", "switch": {"on": "$result.outcome",
                                 "cases": {"timed_out": "late", "ok": "ok"}}}]},
            "behaviors": {"ask": ask, "late": {"return": {"late": true}}, "ok": {}}
        }),
    )
}

/// The deadline of the nodes that wait for an answer in the deadline tests. Their hosts run on
/// a test clock: the deadline passes when a test moves the clock past it, never by itself
/// while a slow machine is still setting the run up.
const NODE_DEADLINE_MS: u64 = 60_000;

fn decision_deadline_fixture(env: &Env) -> String {
    deadline_fixture(
        env,
        "approve",
        "human_decision",
        NODE_DEADLINE_MS,
        json!({"wait": "human_decision"}),
    )
}

/// A human decision node's deadline (`timeout_ms`) is enforced while it waits for the person,
/// as an interactive request's is: nobody answers, the attempt times out and the run routes
/// `timed_out`. An answer that comes after the deadline is refused (`stale_attempt`), never
/// acknowledged and then dropped.
#[test]
fn a_human_decision_deadline_passes_while_nobody_answers_and_a_late_answer_is_refused() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let run_id = env.start(&decision_deadline_fixture(&env), json!({}));
    env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    env.advance_clock(NODE_DEADLINE_MS as i64 + 1);
    env.settle(&run_id);
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "timed_out", "review"],
        Duration::from_secs(10),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"late": true}));
    let first = s["attempts"].as_array().unwrap().last().unwrap();
    assert_eq!(first["status"], json!("timed_out"), "{s:#}");
    assert_eq!(s["decisions"][0]["status"], json!("cancelled"), "{s:#}");
    // The person answers too late.
    let mut late = s.clone();
    late["decisions"][0]["status"] = json!("pending");
    let err = answer_decision(&env, &late, "too-late", true, json!("yes")).unwrap_err();
    assert!(
        matches!(
            err.code(),
            Some(RejectionCode::StaleAttempt | RejectionCode::InvalidTransition)
        ),
        "{err:?}"
    );
    env.stop(host);
}

/// An answer given in time stands, however long the child that continues with it takes to
/// start: the node's deadline no longer applies once the person has answered.
#[test]
fn a_human_answer_given_in_time_is_not_dropped_by_the_deadline_that_follows() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let run_id = env.start(&decision_deadline_fixture(&env), json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    // Pause so the answered run is held back past its deadline, then answer in time.
    env.client()
        .send(Request::new("pause", RequestBody::RunPause).with_run_id(&run_id))
        .unwrap();
    answer_decision(&env, &s, "in-time", true, json!("yes")).unwrap();
    env.advance_clock(NODE_DEADLINE_MS as i64 + 1);
    let held = env.settle(&run_id);
    assert_eq!(
        held["decisions"][0]["status"],
        json!("answered"),
        "the deadline passed with the answer in: {held:#}"
    );
    env.client()
        .send(Request::new("resume", RequestBody::RunResume).with_run_id(&run_id))
        .unwrap();
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "timed_out", "review"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"answer": "yes"}), "{s:#}");
    env.stop(host);
}

/// Events the host's own deadline work commits (a request or decision that expired) reach
/// subscribers like any other: no gap in the run's sequence.
#[test]
fn a_subscriber_sees_the_expiry_of_a_request_and_of_a_decision() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let ask = deadline_fixture(
        &env,
        "ask",
        "agent",
        NODE_DEADLINE_MS,
        json!({"interact": "agent"}),
    );
    for (file, expiry) in [
        (ask, "interaction_expired"),
        (decision_deadline_fixture(&env), "decision_expired"),
    ] {
        let mut sub = env.client();
        sub.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: None,
            session_id: Some("s1".into()),
            all: None,
        }))
        .unwrap();
        let run_id = env.start(&file, json!({}));
        env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
        env.advance_clock(NODE_DEADLINE_MS as i64 + 1);
        env.settle(&run_id);
        let mut seen = Vec::new();
        loop {
            let e = sub.next_event().unwrap();
            assert_eq!(e.run_id, run_id);
            seen.push((e.seq, e.event_kind.clone()));
            if e.event_kind == "completed" || e.event_kind == "failed" {
                break;
            }
            assert!(seen.len() < 100, "{seen:?}");
        }
        let seqs: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "{expiry}: no gaps, no repeats: {seen:?}"
        );
        assert!(seen.iter().any(|(_, k)| k == expiry), "{seen:?}");
    }
    env.stop(host);
}

/// A submission made in time whose validation is still running when the request's deadline
/// passes: the deadline wins (the plan: a submission is judged "unless its deadline expired").
/// The submission is rejected with that reason, the request expires and the run routes
/// `timed_out`; stopping the judging child is the host's doing, not a loss of the run.
#[test]
fn a_validation_overtaken_by_the_deadline_expires_the_request_without_a_loss() {
    // The validation timeout is far beyond the node's deadline: only the deadline can end it.
    let env = Env::with_test_clock(&[("PIW_VALIDATION_TIMEOUT_MS", "3600000")]);
    let host = env.serve(None);
    let file = deadline_fixture(
        &env,
        "slowask",
        "agent",
        NODE_DEADLINE_MS,
        json!({"interact": "agent", "validate": {"value": 42}, "validate_sleep_ms": 3_600_000}),
    );
    // The session presents the request: its deadline runs, and goes on running while the
    // submission it made is judged.
    let _session = env.present();
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    submit(&env, &run_id, &s, "in-time", 42).unwrap();
    // The judging child is running when the deadline passes.
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let start = Instant::now();
    while !store
        .children(&run_id)
        .unwrap()
        .iter()
        .any(|c| c.mode == "validate" && c.handshake && !c.exited)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no validating child"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let validating = env.status(&run_id);
    assert_eq!(
        validating["interactions"][0]["last_submission"]["state"],
        json!("validating"),
        "{validating:#}"
    );
    env.advance_clock(NODE_DEADLINE_MS as i64 + 1);
    env.settle(&run_id);
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "timed_out", "review"],
        Duration::from_secs(20),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"late": true}));
    assert_eq!(s["interactions"][0]["status"], json!("expired"), "{s:#}");
    let last = &s["interactions"][0]["last_submission"];
    assert_eq!(last["state"], json!("rejected"), "{s:#}");
    assert!(
        last["error"].as_str().unwrap().contains("deadline"),
        "{last}"
    );
    let kinds = events(&env, &run_id);
    assert!(!kinds.iter().any(|k| k == "child_lost"), "{kinds:?}");
    env.stop(host);
}

/// A workflow file: a chain of compute nodes, each returning its given output, in order;
/// `batched` lets the worker report pure steps together.
fn chain_fixture(env: &Env, name: &str, outputs: &[(&str, Value)], batched: bool) -> String {
    let nodes: serde_json::Map<_, _> = outputs
        .iter()
        .map(|(n, _)| (n.to_string(), json!({"kind": "compute"})))
        .collect();
    let edges: Vec<Value> = outputs
        .windows(2)
        .map(|w| json!({"from": w[0].0, "to": w[1].0}))
        .collect();
    let behaviors: serde_json::Map<_, _> = outputs
        .iter()
        .map(|(n, output)| (n.to_string(), json!({ "return": output })))
        .collect();
    env.fixture(
        name,
        json!({
            "batch_compute": batched,
            "graph": {"name": name, "start": outputs[0].0, "nodes": nodes, "edges": edges},
            "behaviors": behaviors
        }),
    )
}

/// A run whose attempts' outputs add up to more than a reply frame can carry still has a
/// readable status: the oldest outputs are left out (and say so), the run's result and every
/// attempt's status stay. Before, `run.status` failed with `payload_too_large`, and every
/// client waiting on the run (`piw run start --wait`, `waitForRun`) failed with it. (Each
/// output is just under the size at which a value is stored apart, so each travels inline.)
#[test]
fn the_status_of_a_run_with_large_outputs_fits_one_reply() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let nodes: Vec<String> = (0..20).map(|i| format!("n{i:02}")).collect();
    let outputs: Vec<(&str, Value)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), json!({ "n": i, "text": "x".repeat(60 * 1024) })))
        .collect();
    let file = chain_fixture(&env, "big", &outputs, false);
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{}", s["run"]);
    assert_eq!(s["run"]["result"]["n"], json!(19), "the run's result stays");
    let attempts = s["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), nodes.len());
    assert!(
        attempts.iter().all(|a| a["status"] == json!("ok")),
        "{attempts:?}"
    );
    // Newest first.
    let omitted: Vec<bool> = attempts
        .iter()
        .map(|a| a["output_omitted"] == json!(true) && a["output"].is_null())
        .collect();
    assert!(omitted[nodes.len() - 1], "the oldest output is left out");
    assert!(!omitted[0], "the newest output stays");
    assert_eq!(
        attempts[0]["output"]["n"],
        json!(19),
        "the newest output is whole"
    );
    env.stop(host);
}

/// Pure steps a worker reports together (`batch_compute`) never make a message the host
/// would refuse: a large output that would not fit beside the steps deferred so far sends
/// those first, and a result equal to the last output is sent once. Before, this run's child
/// failed to send its report three times over and the run stopped for review.
#[test]
fn batched_steps_with_large_outputs_still_complete() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let sizes = [("a", 20), ("b", 20), ("c", 20), ("d", 200), ("e", 200)];
    let outputs: Vec<(&str, Value)> = sizes
        .iter()
        .map(|(n, kb)| (*n, json!({ "node": n, "text": "x".repeat(kb * 1024) })))
        .collect();
    let file = chain_fixture(&env, "batched", &outputs, true);
    let run_id = env.start(&file, json!({}));
    let mut s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{}", s["run"]);
    // The 200 KiB outputs are stored apart: read back.
    assert_eq!(s["run"]["result"]["$piw"], json!("value"));
    env.client().resolve_run_status(&mut s).unwrap();
    assert_eq!(s["run"]["result"]["node"], json!("e"));
    assert_eq!(
        s["run"]["result"]["text"].as_str().map(str::len),
        Some(200 * 1024)
    );
    let nodes: Vec<&str> = s["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|a| a["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["a", "b", "c", "d", "e"], "each node ran once");
    env.stop(host);
}

/// A child that dies in a pure step it has not reported yet (`b`, after `a`, batched) is
/// blamed on `b`: after the first loss the host asks the next child to report every step,
/// so the run stops for review at `b` with `b`'s attempts interrupted. Before, every loss
/// landed on `a`, the run went to review at `a`, and nothing showed that `b` ever ran.
#[test]
fn a_child_that_dies_in_an_unreported_batched_step_is_blamed_on_that_step() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let file = env.fixture(
        "blame",
        json!({
            "batch_compute": true,
            "graph": {"name": "blame", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"},
                                "c": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]},
            "behaviors": {"a": {}, "b": {"crash": "before_propose"}, "c": {}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(60),
    );
    assert_eq!(s["run"]["status"], json!("review"), "{}", s["run"]);
    assert_eq!(s["run"]["current_node"], json!("b"), "{}", s["run"]);
    let attempts: Vec<(String, String)> = s["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["node_id"].as_str().unwrap().to_owned(),
                a["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        attempts.contains(&("a".into(), "ok".into())),
        "{attempts:?}"
    );
    let b_lost = attempts
        .iter()
        .filter(|(n, st)| n == "b" && st == "interrupted")
        .count();
    assert_eq!(b_lost, 3, "three losses in a row at b: {attempts:?}");
    env.stop(host);
}

/// `result_is_output` takes the result from a succeeded outcome only; anything else is
/// `malformed` and changes nothing.
const RESULT_IS_OUTPUT_CHILD: &str = r#"
graph = json.load(open(env["source_root"]))["graph"]
call("worker.hello", {"child_token": env["child_token"], "pid": 1, "definition": graph, "mounted_sources": {}})
attempt = call("worker.node_started", {}, node_id="a")["receipt"]["body"]["attempt_id"]
bad = [call("worker.complete", {"outcome": {"status": "failed", "error": "no"}, "result_is_output": True},
            node_id="a", attempt_id=attempt),
       call("worker.complete", {"outcome": {"status": "succeeded", "output": {"v": 1}}, "result": {"v": 2},
            "result_is_output": True}, node_id="a", attempt_id=attempt)]
good = call("worker.complete", {"outcome": {"status": "succeeded", "output": {"v": 1}}, "result_is_output": True},
            node_id="a", attempt_id=attempt)
answer(sys.argv[1], {"bad": bad, "good": good})
"#;

#[test]
fn result_is_output_takes_the_result_from_a_succeeded_outcome_only() {
    let mut env = Env::new(&[]);
    let script = python_child(&env, "result.py", RESULT_IS_OUTPUT_CHILD);
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(".workflow.json=/usr/bin/env python3 {}", script.display()),
    ));
    let host = env.serve(None);
    let file = env.one_node("result", json!({}));
    let run_id = env.start(&file, json!({}));
    let replies = python_answer(&file, "the completing child");
    for bad in replies["bad"].as_array().unwrap() {
        assert_eq!(bad["rejection"]["code"], json!("malformed"), "{bad}");
    }
    assert_eq!(replies["good"]["ok"], json!(true), "{replies}");
    let s = env.wait_for(&run_id, &["completed"], Duration::from_secs(20));
    assert_eq!(s["run"]["result"], json!({"v": 1}));
    env.stop(host);
}

/// A child that outlives its generation: it ignores SIGTERM, and speaks only when the test
/// lets it (the `<fixture>.go` file), after its run was taken from it. A later generation runs
/// the node normally.
const STALE_CHILD: &str = r#"
import signal
fixture = sys.argv[1]
graph = json.load(open(env["source_root"]))["graph"]
call("worker.hello", {"child_token": env["child_token"], "pid": os.getpid(), "definition": graph,
                      "mounted_sources": {}})
r = call("worker.node_started", {}, node_id="a")
attempt = r["receipt"]["body"]["attempt_id"]
out = {"generation": env["generation"]}
done = {"outcome": {"status": "succeeded", "output": out}, "result": out}
if env["generation"] > 1:
    call("worker.complete", done, node_id="a", attempt_id=attempt)
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(fixture + ".started", "w").close()
while not os.path.exists(fixture + ".go"):
    time.sleep(0.01)
first = call("worker.complete", done, node_id="a", attempt_id=attempt)
try:
    later = call("worker.node_started", {}, node_id="a")
except Exception as e:
    later = {"closed": str(e)}
answer(fixture, {"first": first, "later": later})
"#;

/// Plan "Reject stale child messages after a generation change" with a real old child: the
/// host stalls past its lease, so the run is taken from the child that held it; that child,
/// still alive, then reports its node done. It is refused (`stale_generation` or
/// `claim_lost`), and so is every later frame; nothing of it reaches the run: no failed event,
/// no terminal write, no loss counted. The run completes in the next generation.
#[test]
fn a_child_whose_run_was_taken_from_it_is_refused_and_costs_the_run_nothing() {
    let mut env = Env::with_test_clock(&[("PIW_KILL_GRACE_MS", "600000")]);
    let script = python_child(&env, "stale.py", STALE_CHILD);
    let file = env.one_node("stale", json!({}));
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(
            ".workflow.json=/usr/bin/env python3 {} {file}",
            script.display()
        ),
    ));
    let host = env.serve(None);
    let run_id = env.start(&file, json!({}));
    let start = Instant::now();
    while !Path::new(&format!("{file}.started")).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the child never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The host stalls for three leases: the claim the child worked under expires.
    unsafe {
        assert_eq!(libc_kill(host.id() as i32, 19), 0); // SIGSTOP
    }
    env.advance_clock(90_000);
    unsafe {
        assert_eq!(libc_kill(host.id() as i32, 18), 0); // SIGCONT
    }
    let s = env.settle(&run_id);
    assert_ne!(s["run"]["status"], json!("completed"), "{s:#}");
    // Now the old child speaks.
    std::fs::write(format!("{file}.go"), b"").unwrap();
    let said = python_answer(&file, "the old child");
    let code = said["first"]["rejection"]["code"]
        .as_str()
        .unwrap_or_default();
    assert!(
        matches!(code, "stale_generation" | "claim_lost"),
        "the old child's report was not refused: {said}"
    );
    assert!(
        said["later"]["ok"] == json!(false) || said["later"]["closed"].is_string(),
        "a later frame of the old child was accepted: {said}"
    );
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert!(
        s["run"]["result"]["generation"].as_u64() >= Some(2),
        "the result is the new generation's: {s:#}"
    );
    let kinds = events(&env, &run_id);
    assert!(
        !kinds
            .iter()
            .any(|k| k == "failed" || k == "child_lost" || k == "review"),
        "the old child cost the run something: {kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| *k == "completed").count(), 1);
    env.stop(host);
}

/// A child that stays after its run began to wait (it asked a checkpoint and sleeps on) is
/// stopped by the host once the kill grace has passed; the run keeps waiting for its answer.
#[test]
fn a_child_that_lingers_after_its_run_waits_is_stopped() {
    let mut env = Env::with_test_clock(&[("PIW_KILL_GRACE_MS", "2000")]);
    let script = python_child(
        &env,
        "linger.py",
        r#"
graph = json.load(open(env["source_root"]))["graph"]
call("worker.hello", {"child_token": env["child_token"], "pid": os.getpid(), "definition": graph,
                      "mounted_sources": {}})
r = call("worker.node_started", {}, node_id="a")
attempt = r["receipt"]["body"]["attempt_id"]
r = call("worker.wait", {"decision_kind": "checkpoint", "request": {}}, node_id="a",
         attempt_id=attempt)
answer(sys.argv[1], {"pid": os.getpid(), "wait": r})
time.sleep(3600)
"#,
    );
    let file = env.fixture(
        "linger",
        json!({"graph": {"name": "linger", "start": "a",
                         "nodes": {"a": {"kind": "checkpoint"}}, "edges": []},
               "behaviors": {}}),
    );
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(
            ".workflow.json=/usr/bin/env python3 {} {file}",
            script.display()
        ),
    ));
    let host = env.serve(None);
    let run_id = env.start(&file, json!({}));
    let said = python_answer(&file, "the lingering child");
    assert_eq!(said["wait"]["ok"], json!(true), "{said}");
    let pid = said["pid"].as_u64().unwrap() as u32;
    let running = |pid: u32| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid as i32);
    assert!(running(pid));
    // Past the grace on the host's clock: the lingering child is stopped.
    env.advance_clock(5_000);
    let start = Instant::now();
    while running(pid) {
        env.settle(&run_id);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the lingering child {pid} was never stopped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = env.status(&run_id);
    assert_eq!(s["run"]["status"], json!("waiting"), "{s:#}");
    let kinds = events(&env, &run_id);
    assert!(!kinds.iter().any(|k| k == "child_lost"), "{kinds:?}");
    env.stop(host);
}

/// Plan "Recover a stored effect receipt after child and host restart", with the node run
/// again: the host dies right after the effect's receipt is committed (before the child's
/// transition), and the rerun of the node after the restart gets the stored receipt instead
/// of applying the effect (a `never` contract) a second time.
#[test]
fn an_effect_receipt_committed_before_a_host_crash_is_replayed_to_the_rerun() {
    let env = Env::new(&[]);
    let file = effect_fixture(&env, json!({}));
    let mut crashing = env.serve(Some("after_op:effect_settled"));
    let _run_id = env.start(&file, json!({}));
    let start = Instant::now();
    let died = loop {
        if let Some(status) = crashing.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the host never died"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&died),
        Some(6),
        "{died}"
    );
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    let run_id = store.list_runs(None, 10).unwrap()[0].run_id.clone();
    let attempts_before = store.attempts(&run_id).unwrap();
    assert!(
        attempts_before
            .iter()
            .all(|a| a.node_id != "act" || a.status == "running"),
        "the node had not finished when the host died: {attempts_before:#?}"
    );
    drop(store);
    let host = env.serve(None);
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    let acts: Vec<&Value> = s["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["node_id"] == json!("act"))
        .collect();
    assert_eq!(acts.len(), 2, "the node ran again after the restart: {s:#}");
    // Newest first: the rerun.
    assert_eq!(
        acts[0]["output"]["replayed"],
        json!(true),
        "the rerun got the stored receipt: {s:#}"
    );
    assert_eq!(lines(&env), 1, "the effect was applied once");
    env.stop(host);
}

/// A node whose deadline routes back to itself is a loop like any other, and the graph's step
/// limit (`max_steps`) ends it: the steps the host takes itself (routing a timeout, then the
/// next child's node start) count like a child's (they used to skip the check, and the loop
/// went on for as long as the clock moved).
#[test]
fn a_timeout_loop_stops_at_the_step_limit() {
    let env = Env::with_test_clock(&[("PIW_KILL_GRACE_MS", "200")]);
    let host = env.serve(None);
    let file = env.fixture(
        "tloop",
        json!({
            "graph": {
                "name": "tloop", "start": "busy", "max_steps": 3,
                "nodes": {"busy": {"kind": "compute", "timeout_ms": 1_000}},
                "edges": [{"from": "busy", "switch": {"on": "$result.outcome", "cases": {"timed_out": "busy"}}}]
            },
            "behaviors": {"busy": {"spin_forever": true}}
        }),
    );
    let run_id = env.start(&file, json!({}));
    let mut running = as_text(&running_attempt(&wait_for_running_attempt(
        &env, &run_id, "busy",
    )));
    let mut last = json!(null);
    for _ in 0..6 {
        env.advance_clock(2_000);
        let start = Instant::now();
        loop {
            let s = env.status(&run_id);
            let status = s["run"]["status"].clone();
            let now = as_text(&running_attempt(&s));
            if status != json!("running") && status != json!("queued")
                || (!now.is_empty() && now != running)
            {
                running = now;
                last = s;
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no progress: {s:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if last["run"]["status"] != json!("running") {
            break;
        }
    }
    eprintln!(
        "status {} after {} attempts (max_steps 3)",
        last["run"]["status"], last["attempt_count"]
    );
    env.stop(host);
    assert_eq!(last["run"]["status"], json!("failed"), "{last:#}");
}

fn running_attempt(s: &Value) -> Value {
    s["attempts"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["status"] == json!("running")))
        .map(|x| x["attempt_id"].clone())
        .unwrap_or(json!(""))
}

fn as_text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// A run whose nodes returned large outputs (each valid, together over a frame) resumes after
/// a checkpoint: the hello reply leaves out the node results that do not fit, and the worker
/// library fetches them in `worker.results` pages before the node code runs. Before, every
/// child's hello reply was too large, each child died, and the run went to review.
#[test]
fn a_run_with_large_outputs_resumes_after_a_checkpoint() {
    let env = Env::new(&[]);
    let host = env.serve(None);
    let chain = ["a", "b", "c", "d", "e"];
    let mut nodes = serde_json::Map::new();
    let mut edges = Vec::new();
    for (i, node) in chain.iter().enumerate() {
        nodes.insert((*node).into(), json!({"kind": "compute"}));
        let next = chain.get(i + 1).copied().unwrap_or("ask");
        edges.push(json!({"from": node, "to": next}));
    }
    nodes.insert("ask".into(), json!({"kind": "checkpoint"}));
    nodes.insert("done".into(), json!({"kind": "compute"}));
    edges.push(json!({"from": "ask", "to": "done"}));
    let file = env.fixture(
        "large",
        json!({
            "graph": {"name": "large", "start": "a", "nodes": nodes, "edges": edges},
            // Every compute node passes its input on: five outputs of 200 KiB.
            "behaviors": {"ask": {"wait": "checkpoint"}, "done": {"return": "finished"}}
        }),
    );
    let run_id = env.start(&file, json!({"text": "x".repeat(200 * 1024)}));
    let s = env.wait_for(&run_id, &["waiting", "failed"], Duration::from_secs(30));
    assert_eq!(s["run"]["status"], json!("waiting"), "{:#}", s["run"]);
    answer_decision(&env, &s, "answer-large", false, json!("go")).unwrap();
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{:#}", s["run"]);
    assert_eq!(s["run"]["result"], json!("finished"));
    env.stop(host);
}

/// How many launches of `run_id` failed because the host ran out of something.
fn launches_the_host_could_not_make(env: &Env, run_id: &str) -> i64 {
    let c = rusqlite::Connection::open_with_flags(
        &env.paths.db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    c.query_row(
        "SELECT COUNT(*) FROM children WHERE run_id = ?1 AND reason LIKE '%the host ran out of%'",
        [run_id],
        |r| r.get(0),
    )
    .unwrap()
}

/// A child the host cannot spawn because it ran out of descriptors is the host's own passing
/// failure: the run is launched again later, however often, and no launch counts as a lost
/// child (three such counted losses used to stop the run for review within milliseconds).
/// Once descriptors are back, it completes.
#[test]
fn a_child_the_host_cannot_spawn_for_lack_of_descriptors_is_no_lost_child() {
    let env = Env::with_test_clock(&[]);
    let out_of_descriptors = env.path("out-of-descriptors");
    std::fs::write(&out_of_descriptors, "").unwrap();
    let host = env.serve(Some(&format!(
        "spawn_fails:{}",
        out_of_descriptors.display()
    )));
    let file = env.one_node("ok", json!({"return": {"fine": true}}));
    let run_id = env.start(&file, json!({}));
    let start = Instant::now();
    while launches_the_host_could_not_make(&env, &run_id) < 5 {
        let s = env.settle(&run_id);
        assert_ne!(s["run"]["status"], "review", "{s:#}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the launch was not retried: {s:#}"
        );
        env.advance_clock(1_000);
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = env.settle(&run_id);
    assert!(
        matches!(s["run"]["status"].as_str(), Some("queued" | "running")),
        "{s:#}"
    );
    std::fs::remove_file(&out_of_descriptors).unwrap();
    env.advance_clock(1_000);
    let done = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(30),
    );
    assert_eq!(done["run"]["status"], "completed", "{done:#}");
    env.stop(host);
}

/// A child that closes its connection to the host and keeps running used to hold its run in
/// `running` for ever (its claim renewed by the host), nobody told why. It is stopped a kill
/// grace after its connection closed and handled as a lost child, whose reason says so: after
/// three such losses the run stops for review.
#[test]
fn a_child_that_closes_its_connection_and_keeps_running_is_stopped_as_lost() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let file = env.one_node("mute", json!({"close_connection_and_hang": true}));
    let run_id = env.start(&file, json!({}));
    let start = Instant::now();
    let s = loop {
        let s = env.settle(&run_id);
        if s["run"]["status"] == "review" {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the mute child was never stopped: {s:#}"
        );
        env.advance_clock(2_000);
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        s.to_string()
            .contains("the child closed its connection to the host and kept running"),
        "{s:#}"
    );
    env.stop(host);
}

/// A child that connects, says so, and sends its hello only when the test lets it.
const SLOW_HELLO_CHILD: &str = r#"
fixture = env["source_root"]
open(fixture + ".connected", "w").close()
while not os.path.exists(fixture + ".release"):
    time.sleep(0.02)
graph = json.load(open(fixture))["graph"]
try:
    out = call("worker.hello", {"child_token": env["child_token"], "pid": os.getpid(), "definition": graph, "mounted_sources": {}})
except Exception as e:
    out = {"error": repr(e)}
answer(fixture, out)
"#;

/// The connection cap closes the connection idle the longest to make room; a child that has
/// connected but whose hello the host has not read yet looks idle too. Closing it would count
/// as a lost child against its run (the soak sent a run to review this way under load): a
/// connection from one of the host's own children is never closed for the cap.
#[test]
fn a_childs_connection_outlasts_a_burst_of_connections_before_its_hello() {
    let mut env = Env::new(&[]);
    let script = python_child(&env, "slow_hello.py", SLOW_HELLO_CHILD);
    env.extra.push((
        "PIW_RUNTIMES".into(),
        format!(".workflow.json=/usr/bin/env python3 {}", script.display()),
    ));
    env.extra.push(("PIW_MAX_CONNECTIONS".into(), "4".into()));
    let host = env.serve(None);
    let file = env.one_node("slow-hello", json!({}));
    let run_id = env.start(&file, json!({}));
    let connected = PathBuf::from(format!("{file}.connected"));
    let start = Instant::now();
    while !connected.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the child never connected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // More idle connections than the cap; the host accepts in order, so once a later client
    // is answered every one of them was admitted (each by closing the longest idle).
    let idle: Vec<std::os::unix::net::UnixStream> = (0..8)
        .map(|_| std::os::unix::net::UnixStream::connect(&env.paths.socket).unwrap())
        .collect();
    env.status(&run_id);
    std::fs::write(format!("{file}.release"), "").unwrap();
    let out = python_answer(&file, "the slow-hello child");
    assert_eq!(
        out["ok"],
        json!(true),
        "the child's hello was served: {out}"
    );
    drop(idle);
    env.stop(host);
}

/// A workflow that prepares a value, waits on a durable timer at `nap` (behaviour `timer`),
/// then passes the value on: the wait node's output is its input.
fn timer_fixture(env: &Env, name: &str, timer: Value) -> String {
    env.fixture(
        name,
        json!({
            "graph": {"name": name, "start": "prep", "nodes": {
                "prep": {"kind": "compute"}, "nap": {"kind": "wait"}, "after": {"kind": "compute"}
            }, "edges": [{"from": "prep", "to": "nap"}, {"from": "nap", "to": "after"}]},
            "behaviors": {"prep": {"return": {"x": 1}}, "nap": {"timer": timer}}
        }),
    )
}

const HOUR_MS: i64 = 3_600_000;

/// Waits until the host runs no child at all.
fn wait_for_no_child(env: &Env) {
    let start = Instant::now();
    loop {
        let status = env.client().call(RequestBody::HostStatus).unwrap();
        if status.body["active_children"] == json!(0) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a child still runs: {:#}",
            status.body
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A run that waited until `wake_at` and then completed: the wait held no child, and one
/// child ran before it and one after.
fn assert_woke_and_completed(env: &Env, run_id: &str, s: &Value) {
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(
        s["run"]["result"],
        json!({"x": 1}),
        "the wait passes its input on"
    );
    assert_eq!(s["run"]["wake_at"], Value::Null, "{s:#}");
    let store = piw_host::store::Store::open_read_only(&env.paths.db, Default::default()).unwrap();
    assert_eq!(
        store.children(run_id).unwrap().len(),
        2,
        "one child before, one after"
    );
    assert!(store.diagnose(store.now_ms()).unwrap().is_empty());
}

#[test]
fn a_wait_parks_the_run_without_a_child_until_the_hosts_clock_reaches_its_wake_time() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let file = timer_fixture(&env, "nap", json!({"for_ms": HOUR_MS}));
    let run_id = env.start(&file, json!({}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    let wake_at = s["run"]["wake_at"]
        .as_i64()
        .expect("a waiting run says when it wakes");
    assert_eq!(
        wake_at,
        s["run"]["updated_at"].as_i64().unwrap() + HOUR_MS,
        "the wake time is the host's time at the wait plus its duration: {s:#}"
    );
    assert_eq!(
        s["claim"]["owner_kind"],
        Value::Null,
        "no claim is held: {s:#}"
    );
    wait_for_no_child(&env);
    // A second short of the wake time, through a host restart, the run still waits for the
    // same time: it was decided once.
    env.advance_clock(HOUR_MS - 1_000);
    let s = env.settle(&run_id);
    assert_eq!(s["run"]["status"], json!("waiting"), "{s:#}");
    env.stop(host);
    let host = env.serve(None);
    let s = env.settle(&run_id);
    assert_eq!(s["run"]["status"], json!("waiting"), "{s:#}");
    assert_eq!(s["run"]["wake_at"], json!(wake_at));
    env.advance_clock(1_000);
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_woke_and_completed(&env, &run_id, &s);
    env.stop(host);
}

#[test]
fn a_timer_that_came_due_while_the_host_was_down_fires_at_start() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    // The wake time is computed from the context (the input's `at`) by the node's code.
    let file = env.fixture(
        "until",
        json!({
            "graph": {"name": "until", "start": "nap", "nodes": {"nap": {"kind": "wait"}}, "edges": []},
            "behaviors": {"nap": {"timer": {"until_from": "at"}, "return": {"x": 1}}}
        }),
    );
    let now = env.status(&env.start(&env.one_node("now", json!({})), json!({})))["run"]
        ["created_at"]
        .as_i64()
        .unwrap();
    let run_id = env.start(&file, json!({"at": now + 2 * HOUR_MS}));
    let s = env.wait_for(&run_id, &["waiting"], Duration::from_secs(20));
    assert_eq!(s["run"]["wake_at"], json!(now + 2 * HOUR_MS), "{s:#}");
    env.stop(host);
    env.advance_clock(3 * HOUR_MS);
    let host = env.serve(None);
    let s = env.wait_for(&run_id, &["completed", "failed"], Duration::from_secs(20));
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    assert_eq!(s["run"]["result"], json!({"x": 1}));
    env.stop(host);
}

#[test]
fn pause_and_cancel_of_a_waiting_run_act_at_once_and_resume_honours_the_wake_time() {
    let env = Env::with_test_clock(&[]);
    let host = env.serve(None);
    let file = timer_fixture(&env, "nap", json!({"for_ms": HOUR_MS}));
    let paused = env.start(&file, json!({}));
    let cancelled = env.start(&file, json!({}));
    env.wait_for(&paused, &["waiting"], Duration::from_secs(20));
    env.wait_for(&cancelled, &["waiting"], Duration::from_secs(20));
    let mut c = env.client();
    c.send(Request::new("pause", RequestBody::RunPause).with_run_id(&paused))
        .unwrap();
    let s = env.status(&paused);
    assert_eq!(s["run"]["paused"], json!(true), "{s:#}");
    assert_eq!(s["run"]["status"], json!("waiting"), "{s:#}");
    let wake_at = s["run"]["wake_at"].clone();
    assert!(
        wake_at.is_i64(),
        "a paused waiting run keeps its wake time: {s:#}"
    );
    let r = env.cancel("cancel-waiting", &cancelled);
    assert_eq!(r["status"], json!("cancelled"), "cancelled at once: {r:#}");
    let s = env.status(&cancelled);
    assert_eq!(s["run"]["status"], json!("cancelled"), "{s:#}");
    assert_eq!(s["run"]["wake_at"], Value::Null, "its timer is gone: {s:#}");
    // Resumed before its wake time, the run waits on for the same time.
    c.send(Request::new("resume-early", RequestBody::RunResume).with_run_id(&paused))
        .unwrap();
    let s = env.settle(&paused);
    assert_eq!(s["run"]["status"], json!("waiting"), "{s:#}");
    assert_eq!(s["run"]["wake_at"], wake_at);
    // Paused again, it passes its wake time without going on; resumed, it goes on at once.
    c.send(Request::new("pause-again", RequestBody::RunPause).with_run_id(&paused))
        .unwrap();
    env.advance_clock(2 * HOUR_MS);
    let s = env.settle(&paused);
    assert_eq!(
        s["run"]["status"],
        json!("queued"),
        "the timer fired: {s:#}"
    );
    assert_eq!(s["run"]["paused"], json!(true), "{s:#}");
    assert_eq!(env.settle(&paused)["run"]["status"], json!("queued"));
    c.send(Request::new("resume", RequestBody::RunResume).with_run_id(&paused))
        .unwrap();
    let s = env.wait_for(&paused, &["completed", "failed"], Duration::from_secs(20));
    assert_woke_and_completed(&env, &paused, &s);
    assert_eq!(env.status(&cancelled)["run"]["status"], json!("cancelled"));
    env.stop(host);
}

/// The disk holding the database fills while a child finishes its node: the host refuses the
/// child's result (`internal`, nothing stored), and the child sends it again, with growing
/// pauses, for as long as a lease lasts rather than a fraction of a second. Once there is space
/// again its result is taken: no child is lost, nothing runs twice, the run completes.
#[test]
fn a_childs_result_refused_by_a_full_disk_is_taken_once_space_is_back() {
    let env = Env::new(&[]);
    let full = env.path("disk-is-full");
    let host = env.serve(Some(&format!("disk_full:{}", full.display())));
    let gate = env.path("gate");
    let file = env.one_node(
        "refused",
        json!({"wait_for_file": gate.display().to_string(), "return": {"done": true}}),
    );
    let run_id = env.start(&file, json!({}));
    wait_for_running_attempt(&env, &run_id, "a");
    std::fs::write(&full, "").unwrap();
    std::fs::write(&gate, "").unwrap();
    // The host has refused the child's result at least once: the full disk is logged once,
    // when the first commit fails (not per attempt).
    let log = env.path("hosts.log");
    let start = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("the disk holding the database is full")
    {
        assert!(start.elapsed() < Duration::from_secs(30), "no refusal");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A full disk lasts a while: longer than a few quick retries.
    std::thread::sleep(Duration::from_millis(1_500));
    std::fs::remove_file(&full).unwrap();
    let s = env.wait_for(
        &run_id,
        &["completed", "failed", "review"],
        Duration::from_secs(60),
    );
    assert_eq!(s["run"]["status"], json!("completed"), "{s:#}");
    let attempts = s["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "the node ran once: {attempts:#?}");
    assert_eq!(s["claim"]["generation"], json!(1), "its first child: {s:#}");
    env.stop(host);
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        log.matches("the disk holding the database is full").count(),
        1,
        "the condition is logged once: {log}"
    );
    assert_eq!(
        log.matches("has space again").count(),
        1,
        "and once when it clears: {log}"
    );
}
