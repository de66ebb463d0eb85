//! A host under a low open-file limit (`driver::slots::budget`): it runs only as many children
//! as can connect beside its clients, says so in `host.status`, never counts a child it had no
//! room for as lost, and still lets a fresh client in. Real processes, temp `HOME` and
//! `PIW_HOME`; every process of the installation is killed when the test ends.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use piw_host::client::BlockingClient;
use piw_host::protocol::{payload, Request, RequestBody};
use serde_json::{json, Value};

mod common;
use common::TempHome;

/// The open-file limit (soft and hard) the host runs under: 16 children's descriptors do not
/// fit beside its own reserve and a few clients.
const NOFILE: u64 = 160;

/// What the host is asked for.
const MAX_CHILDREN: usize = 16;

/// More runs than it can hold children for.
const RUNS: usize = 24;

/// An installation whose hosts ask for [`MAX_CHILDREN`] children and run `.workflow.json`
/// files with `piw-json-worker`.
fn home() -> TempHome {
    TempHome::new()
        .with_env("PIW_STANDBY_WORKERS", "0")
        .with_env("PIW_MAX_CHILDREN", MAX_CHILDREN.to_string())
        .with_env(
            "PIW_RUNTIMES",
            format!(".workflow.json={}", env!("CARGO_BIN_EXE_piw-json-worker")),
        )
}

/// A run's status ([`send`]).
fn status(env: &TempHome, c: &mut BlockingClient, run_id: &str) -> Value {
    send(env, c, || common::status_request(run_id))
}

/// The reply to `request()`. The test's own client may be closed to make room for another
/// (the cap), so a call that fails is made again on a new connection, for up to a minute (a
/// command under the same request id, which the host answers from its receipt).
fn send(env: &TempHome, c: &mut BlockingClient, request: impl Fn() -> Request) -> Value {
    let start = Instant::now();
    loop {
        match c.send(request()) {
            Ok(r) => return r.body,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "no answer for a minute: {e}"
                );
                std::thread::sleep(Duration::from_millis(50));
                if let Ok(fresh) = BlockingClient::connect(&env.paths) {
                    fresh.set_timeout(Some(common::HANG_BOUND)).unwrap();
                    *c = fresh;
                }
            }
        }
    }
}

fn node_running(s: &Value) -> bool {
    s["attempts"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x["status"] == json!("running")))
}

/// Under `ulimit -n 160` a host asked for 16 children runs fewer (each needs descriptors for
/// its pipes, log and connection), and says how many; idle connections past its cap cannot
/// starve them either. Every one of 24 runs completes: none counted a lost child, none went
/// to review, and a fresh CLI client gets in while every child slot is busy. Before, the
/// cap (a floor of 8) refused children the host had launched, whose runs went to review.
#[test]
fn a_low_open_file_limit_runs_fewer_children_and_loses_none() {
    let env = home();
    let host = env.serve_with(|cmd| common::limit_open_files(cmd, NOFILE, NOFILE));
    let mut c = env.client();
    let s = c.call(RequestBody::HostStatus).unwrap().body;
    let slots = s["child_slots"].as_u64().unwrap_or(MAX_CHILDREN as u64) as usize;
    assert!(slots < MAX_CHILDREN, "fewer children than asked for: {s:#}");

    assert!(
        s["max_connections"].as_u64().is_some_and(|n| n >= 8),
        "{s:#}"
    );

    // Idle connections, more than the whole limit: the cap closes the idle ones, so they can
    // take neither the children's descriptors nor the database's.
    let idle: Vec<UnixStream> = (0..2 * NOFILE)
        .filter_map(|_| UnixStream::connect(&env.paths.socket).ok())
        .collect();

    // Each run's node holds its child until the barrier file exists.
    let barrier = env.path("barrier");
    let file = env.path("held.workflow.json");
    let fixture = json!({
        "graph": {"name": "held", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
        "behaviors": {"a": {"wait_for_file": barrier.display().to_string(), "return": {"ok": true}}}
    });
    std::fs::write(&file, fixture.to_string()).unwrap();
    let mut c = env.client();
    let run_ids: Vec<String> = (0..RUNS)
        .map(|i| {
            let started = send(&env, &mut c, || {
                Request::new(
                    format!("start-{i}"),
                    RequestBody::RunStart(payload::RunStart {
                        workflow_file: file.display().to_string(),
                        input: json!({}),
                        session_id: Some("s1".into()),
                        execution_mode: None,
                        project_dir: None,
                    }),
                )
            });
            started["run_id"].as_str().unwrap().to_owned()
        })
        .collect();

    // Every slot busy: as many nodes running as the host has child slots.
    let start = Instant::now();
    loop {
        let statuses: Vec<Value> = run_ids.iter().map(|r| status(&env, &mut c, r)).collect();
        for s in &statuses {
            assert!(
                !["review", "failed"].contains(&s["run"]["status"].as_str().unwrap()),
                "a run lost its child: {s:#}"
            );
        }
        if statuses.iter().filter(|s| node_running(s)).count() == slots {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the child slots never filled"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A fresh CLI client gets in, every time.
    for _ in 0..5 {
        let out = env.piw(&["host", "status", "--json"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }

    std::fs::write(&barrier, b"").unwrap();
    let start = Instant::now();
    for run_id in &run_ids {
        loop {
            let s = status(&env, &mut c, run_id);
            match s["run"]["status"].as_str().unwrap() {
                "completed" => break,
                "review" | "failed" | "cancelled" | "timed_out" => panic!("{s:#}"),
                _ => {}
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "run never completed: {s:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(idle);
    env.stop(host);
    // No run's child was lost or released for want of room: no loss counted, none requeued.
    let db = rusqlite::Connection::open_with_flags(
        &env.paths.db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let requeued: Vec<(String, String)> = db
        .prepare("SELECT run_id, data FROM events WHERE kind IN ('child_lost', 'recovered')")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(requeued, Vec::<(String, String)>::new());
}
