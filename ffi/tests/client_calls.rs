//! The client surface in process, against a real host: a subscription's file descriptor is
//! readable exactly while something waits, the poll honours its timeout, one client serves
//! many threads at once, and a rejection carries its code, message and details.

mod common;

use piw_host::store::prelude::*;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::{null, null_mut};

use piw::*;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn take(p: *mut c_char) -> String {
    assert!(!p.is_null());
    let s = unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned();
    unsafe { piw_string_free(p) };
    s
}

fn last(f: extern "C" fn() -> *const c_char) -> String {
    let p = f();
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

fn connect(install: &common::Install) -> *mut PiwClient {
    connect_with(install, serde_json::Value::Null)
}

/// A client of `install`'s host, which it starts with `host_env` (an object, or null for
/// nothing) added to its environment.
fn connect_with(install: &common::Install, host_env: serde_json::Value) -> *mut PiwClient {
    let options = c(&serde_json::json!({
        "home": install.piw_home(),
        "host_bin": common::built("piw"),
        "host_env": host_env,
    })
    .to_string());
    let mut client = null_mut();
    let st = unsafe { piw_connect(options.as_ptr(), &mut client) };
    assert_eq!(st, PiwStatus::Ok, "{}", last(piw_last_error_message));
    client
}

/// Writes the `.workflow.json` file `fixture` as `<name>.workflow.json` in the installation's
/// directory; its path.
fn write_workflow(
    install: &common::Install,
    name: &str,
    fixture: serde_json::Value,
) -> std::path::PathBuf {
    let workflow = install.path().join(format!("{name}.workflow.json"));
    std::fs::write(&workflow, fixture.to_string()).unwrap();
    workflow
}

/// Starts a run of `workflow` in the installation's directory, with what `more` (an object)
/// adds to `run.start`'s payload; its id.
fn start_run(
    client: *const PiwClient,
    install: &common::Install,
    workflow: &std::path::Path,
    more: serde_json::Value,
) -> String {
    let mut payload = serde_json::json!({
        "workflow_file": workflow, "project_dir": install.path(),
    });
    for (key, value) in more.as_object().unwrap() {
        payload[key] = value.clone();
    }
    let started = call(client, "run.start", None, Some(payload)).unwrap();
    started["body"]["run_id"].as_str().unwrap().to_owned()
}

/// The body of `run.status` for `run_id`.
fn run_status(client: *const PiwClient, run_id: &str) -> serde_json::Value {
    let envelope = serde_json::json!({ "run_id": run_id });
    call(client, "run.status", Some(envelope), None).unwrap()["body"].take()
}

/// Answers `decision` of `run_id` with `answer` (`kind`: `checkpoint.answer` or
/// `decision.answer`).
fn answer(
    client: *const PiwClient,
    kind: &str,
    run_id: &str,
    decision: &serde_json::Value,
    answer: serde_json::Value,
) -> Result<serde_json::Value, PiwStatus> {
    let envelope = serde_json::json!({ "run_id": run_id });
    let payload = serde_json::json!({ "decision_id": decision, "answer": answer });
    call(client, kind, Some(envelope), Some(payload))
}

/// A subscription of `client` to what `filter` names.
fn subscribe(client: *const PiwClient, filter: serde_json::Value) -> *mut PiwSubscription {
    let filter = c(&filter.to_string());
    let mut sub = null_mut();
    assert_eq!(
        unsafe { piw_subscribe(client, filter.as_ptr(), &mut sub) },
        PiwStatus::Ok
    );
    sub
}

/// The next event of `sub` (a bound of 30 s only a hang reaches).
fn next_event(sub: *const PiwSubscription) -> serde_json::Value {
    let mut out = null_mut();
    let st = unsafe { piw_subscription_next(sub, 30_000, &mut out) };
    assert_eq!(st, PiwStatus::Ok, "{}", last(piw_last_error_message));
    serde_json::from_str(&take(out)).unwrap()
}

/// Events of `sub` until one `until` takes; that one.
fn next_event_until(
    sub: *const PiwSubscription,
    until: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    loop {
        let event = next_event(sub);
        if until(&event) {
            return event;
        }
    }
}

fn call(
    client: *const PiwClient,
    kind: &str,
    envelope: Option<serde_json::Value>,
    payload: Option<serde_json::Value>,
) -> Result<serde_json::Value, PiwStatus> {
    let kind = c(kind);
    let envelope = envelope.map(|v| c(&v.to_string()));
    let payload = payload.map(|v| c(&v.to_string()));
    let mut out = null_mut();
    let st = unsafe {
        piw_client_call(
            client,
            kind.as_ptr(),
            envelope.as_ref().map_or(null(), |e| e.as_ptr()),
            payload.as_ref().map_or(null(), |p| p.as_ptr()),
            30_000,
            &mut out,
        )
    };
    if st == PiwStatus::Ok {
        Ok(serde_json::from_str(&take(out)).unwrap())
    } else {
        assert!(out.is_null());
        Err(st)
    }
}

/// Whether `fd` is readable within `ms` milliseconds.
fn readable_within(fd: c_int, ms: c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    assert!(n >= 0);
    n == 1
}

#[test]
fn the_subscription_fd_is_readable_exactly_while_events_wait() {
    let install = common::Install::new();
    let client = connect(&install);
    let sub = subscribe(client, serde_json::json!({"session_id": "fd-test"}));
    let mut fd: c_int = -1;
    assert_eq!(unsafe { piw_subscription_fd(sub, &mut fd) }, PiwStatus::Ok);
    // Nothing happened yet: not readable, and a poll with no wait times out.
    assert!(!readable_within(fd, 0));
    let mut out = null_mut();
    assert_eq!(
        unsafe { piw_subscription_next(sub, 0, &mut out) },
        PiwStatus::Timeout
    );
    assert_eq!(last(piw_last_error_code), "timeout");
    assert!(out.is_null());

    let workflow = common::repo_root().join("examples/hello.workflow.json");
    let run_id = start_run(
        client,
        &install,
        &workflow,
        serde_json::json!({"session_id": "fd-test"}),
    );
    let mut seqs = Vec::new();
    loop {
        // A bound only a hang reaches.
        assert!(readable_within(fd, 30_000), "no event within 30 s");
        // Readable: an event is there, so a poll without waiting gets it.
        assert_eq!(
            unsafe { piw_subscription_next(sub, 0, &mut out) },
            PiwStatus::Ok
        );
        let event: serde_json::Value = serde_json::from_str(&take(out)).unwrap();
        assert_eq!(event["run_id"], run_id.as_str());
        seqs.push(event["seq"].as_u64().unwrap());
        if event["status"] == "completed" {
            break;
        }
    }
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    // Everything taken: not readable any more.
    assert!(!readable_within(fd, 0));
    // A typed rejection with details: a stale expected revision.
    let err = call(
        client,
        "run.pause",
        Some(serde_json::json!({"run_id": run_id, "expected_revision": 1})),
        None,
    );
    assert_eq!(err, Err(PiwStatus::Rejected));
    assert_eq!(piw_last_rejection_code(), PiwRejectionCode::StaleRevision);
    assert_eq!(last(piw_last_error_code), "stale_revision");
    let details: serde_json::Value = serde_json::from_str(&last(piw_last_error_details)).unwrap();
    assert_eq!(details["expected"], 1, "{details}");
    // The same failure is on the client handle.
    assert_eq!(
        unsafe { piw_client_error_rejection(client) },
        PiwRejectionCode::StaleRevision
    );
    let message = take(unsafe { piw_client_error_message(client) });
    assert!(message.contains("revision"), "{message}");

    // Closing the client ends the subscription: readable, and next says why.
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Ok);
    assert!(readable_within(fd, 30_000));
    let st = unsafe { piw_subscription_next(sub, 0, &mut out) };
    assert!(matches!(st, PiwStatus::Closed | PiwStatus::End), "{st:?}");
    assert_eq!(unsafe { piw_subscription_close(sub) }, PiwStatus::Ok);
}

#[test]
fn one_client_serves_many_threads_at_once() {
    let install = common::Install::new();
    let client = connect(&install) as usize;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let client = client as *const PiwClient;
                for i in 0..25 {
                    if (t + i) % 5 == 0 {
                        // A rejection on one thread is that thread's error only.
                        let id = format!("run-missing-{t}-{i}");
                        let r = call(
                            client,
                            "run.status",
                            Some(serde_json::json!({ "run_id": id })),
                            None,
                        );
                        assert_eq!(r, Err(PiwStatus::Rejected));
                        assert_eq!(piw_last_rejection_code(), PiwRejectionCode::NotFound);
                        assert!(last(piw_last_error_message).contains(&id));
                    } else {
                        let r = call(client, "host.status", None, None).unwrap();
                        assert!(r["body"].is_object());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        unsafe { piw_client_close(client as *mut PiwClient) },
        PiwStatus::Ok
    );
}

/// The C child verifies its sources before it loads anything: a workflow file changed while
/// its run waited stops the run for review, through `piw_worker_verify_sources` and
/// `piw_worker_fail(review)`, and the C library's client follows it all.
#[test]
fn a_source_changed_under_a_waiting_run_stops_it_for_review() {
    let install = common::Install::new();
    let child = install.path().join("bin/piw-c-child");
    common::compile_c(
        &[common::repo_root().join("examples/c/child.c")],
        &child,
        &[],
    );
    let workflow = install.path().join("approve.workflow.c-demo");
    std::fs::copy(
        common::repo_root().join("examples/c/approve.workflow.c-demo"),
        &workflow,
    )
    .unwrap();
    let runtime = format!(".workflow.c-demo={}", child.display());
    let client = connect_with(&install, serde_json::json!({ "PIW_RUNTIMES": runtime }));
    let sub = subscribe(client, serde_json::json!({"session_id": "changed"}));
    let more = serde_json::json!({"input": {"text": "a b"}, "session_id": "changed"});
    let run_id = start_run(client, &install, &workflow, more);
    let waiting = next_event_until(sub, |e| e["event_kind"] == "waiting");
    // From here on, a subscription to the run itself sees the same events.
    let run_sub = subscribe(client, serde_json::json!({ "run_id": run_id }));
    // The workflow file changes while no child runs it.
    let mut text = std::fs::read_to_string(&workflow).unwrap();
    text.push('\n');
    std::fs::write(&workflow, text).unwrap();
    let decision = &waiting["data"]["decision"];
    answer(client, "checkpoint.answer", &run_id, decision, true.into()).unwrap();
    let last_event = next_event_until(sub, |e| {
        ["completed", "failed", "review", "cancelled"].contains(&e["status"].as_str().unwrap_or(""))
    });
    assert_eq!(last_event["status"], "review", "{last_event}");
    let mut run_events = Vec::new();
    loop {
        let event = next_event(run_sub);
        assert_eq!(event["run_id"], run_id.as_str());
        // It may also get events committed shortly before its subscribe was answered.
        if event["seq"].as_u64().unwrap() > waiting["seq"].as_u64().unwrap() {
            run_events.push(event["seq"].as_u64().unwrap());
        }
        if event["seq"] == last_event["seq"] {
            break;
        }
    }
    let after_waiting = waiting["seq"].as_u64().unwrap() + 1;
    assert_eq!(
        run_events,
        (after_waiting..=last_event["seq"].as_u64().unwrap()).collect::<Vec<_>>()
    );
    let reason = run_status(client, &run_id)["run"]["review_reason"].to_string();
    assert!(reason.contains("changed since the run started"), "{reason}");
    unsafe {
        piw_subscription_close(run_sub);
        piw_subscription_close(sub);
        piw_client_close(client);
    }
}

/// The host checks a person's answer against the choices a human decision's request lists: the
/// C client gets the refusal typed (`malformed`), with the choices and the text rule as details,
/// and the run keeps waiting for a right answer.
#[test]
fn an_answer_that_fits_no_choice_is_refused_with_the_choices() {
    let install = common::Install::new();
    let client = connect(&install);
    let workflow = write_workflow(
        &install,
        "decide",
        serde_json::json!({
            "graph": {"name": "decide", "start": "ask",
                      "nodes": {"ask": {"kind": "human_decision"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "human_decision", "request": {"choices": [
                {"id": "approve"}, {"id": "reject", "input": {"name": "why", "maxLength": 3}}]}},
                          "done": {}}
        }),
    );
    let sub = subscribe(client, serde_json::json!({"session_id": "decide"}));
    let more = serde_json::json!({"session_id": "decide"});
    let run_id = start_run(client, &install, &workflow, more);
    let waiting = next_event_until(sub, |e| e["event_kind"] == "waiting");
    let decision = &waiting["data"]["decision"];
    let answer = |choice| answer(client, "decision.answer", &run_id, decision, choice);
    let err = answer(serde_json::json!({"choice": "reject", "text": "much too long"}));
    assert_eq!(err, Err(PiwStatus::Rejected));
    assert_eq!(piw_last_rejection_code(), PiwRejectionCode::Malformed);
    let message = last(piw_last_error_message);
    assert!(
        message.contains(
            "choice reject needs a text of at most 3 characters as \"text\"; got 13 characters"
        ),
        "{message}"
    );
    let details: serde_json::Value = serde_json::from_str(&last(piw_last_error_details)).unwrap();
    assert_eq!(
        details,
        serde_json::json!({"choices": [
            {"id": "approve", "text": null},
            {"id": "reject", "text": {"name": "why", "min_length": null, "max_length": 3}}]})
    );
    let status = run_status(client, &run_id);
    assert_eq!(status["run"]["status"], "waiting", "{status}");
    answer(serde_json::json!({"choice": "reject", "text": "no"})).unwrap();
    assert_eq!(unsafe { piw_subscription_close(sub) }, PiwStatus::Ok);
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Ok);
}

/// `piw_wait_run`: returns at once for a run already where it is asked to stop; without
/// `PIW_WAIT_UNTIL_PARKED` a waiting run is not final, so it waits (here until its timeout);
/// once the checkpoint is answered it returns the completed run's record.
#[test]
fn waiting_for_a_run_stops_where_it_is_asked_to() {
    let install = common::Install::new();
    let client = connect(&install);
    let workflow = write_workflow(
        &install,
        "ask",
        serde_json::json!({
            "graph": {"name": "ask", "start": "ask",
                      "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "checkpoint"}, "done": {"return": {"ok": true}}}
        }),
    );
    let more = serde_json::json!({"session_id": "wait"});
    let run_id = start_run(client, &install, &workflow, more);
    let run_c = c(&run_id);
    let wait = |flags: u32, timeout_ms: i64| -> Result<serde_json::Value, PiwStatus> {
        let mut out = null_mut();
        let st = unsafe { piw_wait_run(client, run_c.as_ptr(), flags, timeout_ms, &mut out) };
        if st == PiwStatus::Ok {
            Ok(serde_json::from_str(&take(out)).unwrap())
        } else {
            assert!(out.is_null());
            Err(st)
        }
    };
    let parked = wait(PIW_WAIT_UNTIL_PARKED, 30_000).unwrap();
    assert_eq!(parked["status"], "waiting", "{parked}");
    assert_eq!(parked["run_id"], run_id.as_str(), "{parked}");
    // Waiting is not final: the wait runs out (the run cannot end while nobody answers).
    assert_eq!(wait(0, 200), Err(PiwStatus::Timeout));
    let decision = run_status(client, &run_id)["decisions"][0]["decision_id"].clone();
    answer(
        client,
        "checkpoint.answer",
        &run_id,
        &decision,
        "yes".into(),
    )
    .unwrap();
    let done = wait(0, 60_000).unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"], serde_json::json!({"ok": true}), "{done}");
    // An unknown run is a typed rejection, not a wait.
    let mut out = null_mut();
    let unknown = c("run-does-not-exist");
    assert_eq!(
        unsafe { piw_wait_run(client, unknown.as_ptr(), 0, 30_000, &mut out) },
        PiwStatus::Rejected
    );
    assert_eq!(piw_last_rejection_code(), PiwRejectionCode::NotFound);
    // Flags this library does not know are refused.
    assert_eq!(
        unsafe { piw_wait_run(client, run_c.as_ptr(), 0x80, 1000, &mut out) },
        PiwStatus::InvalidArgument
    );
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Ok);
}

/// `PIW_WAIT_UNTIL_PARKED` waits past a durable timer: a run asleep on one (`waiting` with
/// `wake_at` set, nothing pending) goes on by itself, so the wait returns only once the timer
/// fired and the run waits on its checkpoint. The host runs on a test clock that stands still
/// until the test moves it, so the run sleeps for as long as the test says.
#[test]
fn waiting_until_parked_goes_on_past_a_durable_timer() {
    let install = common::Install::new();
    let clock = install.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    let client = connect_with(&install, serde_json::json!({"PIW_TEST_CLOCK": clock}));
    let workflow = write_workflow(
        &install,
        "nap-then-ask",
        serde_json::json!({
            "graph": {"name": "nap-then-ask", "start": "nap",
                      "nodes": {"nap": {"kind": "wait"}, "ask": {"kind": "checkpoint"},
                                "done": {"kind": "compute"}},
                      "edges": [{"from": "nap", "to": "ask"}, {"from": "ask", "to": "done"}]},
            "behaviors": {"nap": {"timer": {"for_ms": 3_600_000}, "return": {"slept": true}},
                          "ask": {"wait": "checkpoint"},
                          "done": {"return": {"ok": true}}}
        }),
    );
    let more = serde_json::json!({"session_id": "nap"});
    let run_id = start_run(client, &install, &workflow, more);
    let status = || run_status(client, &run_id);
    // The wait starts before the run reaches its timer, so it sees the run park there.
    let waiter = {
        let (client, run_id) = (client as usize, run_id.clone());
        std::thread::spawn(move || {
            let run_c = c(&run_id);
            let mut out = null_mut();
            let st = unsafe {
                piw_wait_run(
                    client as *const PiwClient,
                    run_c.as_ptr(),
                    PIW_WAIT_UNTIL_PARKED,
                    60_000,
                    &mut out,
                )
            };
            assert_eq!(st, PiwStatus::Ok, "{}", last(piw_last_error_message));
            serde_json::from_str::<serde_json::Value>(&take(out)).unwrap()
        })
    };
    // The host reports the run asleep on its timer: waiting, wake_at set, nothing pending.
    let on_timer =
        |s: &serde_json::Value| s["run"]["status"] == "waiting" && s["run"]["wake_at"].is_u64();
    let since = std::time::Instant::now();
    let asleep = loop {
        let s = status();
        if on_timer(&s) {
            break s;
        }
        assert!(
            since.elapsed() < std::time::Duration::from_secs(30),
            "the run never slept on its timer: {s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(asleep["run"]["current_node"], "nap", "{asleep}");
    assert!(
        asleep["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] != "pending"),
        "{asleep}"
    );
    // Nobody can answer anything yet (and the clock stands still): the wait goes on.
    assert!(
        !waiter.is_finished(),
        "the wait returned while the run slept"
    );
    // The clock moves past the timer; a request wakes the host asleep until the old deadline.
    let moved = install.path().join("clock.tmp");
    std::fs::write(&moved, (2 * 3_600_000).to_string()).unwrap();
    std::fs::rename(&moved, &clock).unwrap();
    status();
    let parked = waiter.join().unwrap();
    assert_eq!(parked["run_id"], run_id.as_str(), "{parked}");
    assert_eq!(parked["status"], "waiting", "{parked}");
    assert_eq!(parked["current_node"], "ask", "{parked}");
    assert!(parked["wake_at"].is_null(), "{parked}");
    // The request it returned for is there; answered, the run ends.
    let now = status();
    let pending: Vec<_> = now["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["status"] == "pending")
        .collect();
    assert_eq!(pending.len(), 1, "{now}");
    assert_eq!(pending[0]["node_id"], "ask", "{now}");
    let decision = &pending[0]["decision_id"];
    answer(client, "checkpoint.answer", &run_id, decision, "yes".into()).unwrap();
    let run_c = c(&run_id);
    let mut out = null_mut();
    assert_eq!(
        unsafe { piw_wait_run(client, run_c.as_ptr(), 0, 60_000, &mut out) },
        PiwStatus::Ok
    );
    let done: serde_json::Value = serde_json::from_str(&take(out)).unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Ok);
}

/// The one list of final states.
#[test]
fn final_run_statuses_are_the_terminal_ones() {
    let is_final = |s: &str| unsafe { piw_run_status_is_final(c(s).as_ptr()) };
    for s in ["completed", "failed", "cancelled", "timed_out"] {
        assert_eq!(is_final(s), 1, "{s}");
    }
    for s in [
        "queued",
        "running",
        "waiting",
        "review",
        "",
        "COMPLETED",
        "bogus",
    ] {
        assert_eq!(is_final(s), 0, "{s}");
    }
    assert_eq!(unsafe { piw_run_status_is_final(null()) }, 0);
    assert_eq!(
        unsafe { piw_run_status_is_final(c"\xff\xfe".as_ptr()) },
        0,
        "invalid UTF-8 is no status"
    );
}

/// `run.list` through `piw_client_call` pages with `cursor` / `next_cursor`: 2,100 runs (ended,
/// seeded through the store before the host starts, so no children) are each listed once,
/// in pages that fit a reply, while a run starts between pages. Without the cursor a list
/// stopped at what one reply held.
#[test]
fn run_list_pages_reach_every_run_through_the_abi() {
    use piw_host::store::{ExecutionMode, Fence, NewRun, Store};
    use std::collections::BTreeMap;

    let install = common::Install::new();
    std::fs::create_dir_all(install.piw_home()).unwrap();
    let mut store = Store::open(install.piw_home().join("state.sqlite"), Default::default())
        .expect("a new state database");
    let seeded: Vec<String> = store
        .write(|w| {
            (0..2_100)
                .map(|_| {
                    let run_id = w.start_run(&NewRun {
                        workflow_name: "seeded".into(),
                        source_root: "/nowhere/seeded.workflow.json".into(),
                        source_hash: "0".into(),
                        mounted_sources: serde_json::json!({}),
                        definition: None,
                        input: serde_json::Value::Null,
                        origin_session: Some("many".into()),
                        execution_mode: ExecutionMode::Detached,
                        project_dir: format!("/projects/{}", "p".repeat(490)),
                    })?;
                    w.cancel(&run_id, Fence::Unclaimed, "seeded")?;
                    Ok(run_id)
                })
                .collect::<Result<_, _>>()
        })
        .unwrap();
    drop(store);

    let client = connect(&install);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut payload = serde_json::json!({ "session_id": "many", "limit": 10_000 });
        if let Some(c) = cursor.take() {
            payload["cursor"] = c.into();
        }
        let page = call(client, "run.list", None, Some(payload)).expect("a page");
        pages += 1;
        for run in page["body"]["runs"].as_array().unwrap() {
            *seen
                .entry(run["run_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        if page["body"]["more"] != true {
            assert_eq!(page["body"]["next_cursor"], serde_json::Value::Null);
            break;
        }
        cursor = page["body"]["next_cursor"].as_str().map(str::to_owned);
        assert!(cursor.is_some(), "{}", page["body"]["next_cursor"]);
        if pages == 1 {
            let workflow = common::repo_root().join("examples/hello.workflow.json");
            let more = serde_json::json!({"session_id": "many"});
            start_run(client, &install, &workflow, more);
        }
    }
    assert!(pages > 1, "{pages} pages");
    assert!(seen.values().all(|n| *n == 1), "a run listed twice");
    assert!(seeded.iter().all(|id| seen.contains_key(id)));
    assert_eq!(
        seen.len(),
        seeded.len(),
        "the run started meanwhile is newer"
    );
    // A cursor no host made is refused before it is sent.
    let bad = call(
        client,
        "run.list",
        None,
        Some(serde_json::json!({ "cursor": "page-2" })),
    );
    assert_eq!(bad, Err(PiwStatus::Rejected));
    assert_eq!(piw_last_rejection_code(), PiwRejectionCode::Malformed);
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Ok);
}

/// `piw_client_resolve_value`: a node's output over 64 KiB comes back from `run.status` as a
/// reference, which it reads back whole; a literal is unwrapped, a plain value is itself.
#[test]
fn a_value_stored_apart_is_read_back_through_the_abi() {
    let install = common::Install::new();
    let client = connect(&install);
    let workflow = write_workflow(
        &install,
        "big",
        serde_json::json!({
            "graph": {"name": "big", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
            "behaviors": {"a": {"return_bytes": 300_000}}
        }),
    );
    let run_id = start_run(client, &install, &workflow, serde_json::json!({}));
    let run_c = c(&run_id);
    let mut out = null_mut();
    let st = unsafe { piw_wait_run(client, run_c.as_ptr(), 0, 60_000, &mut out) };
    assert_eq!(st, PiwStatus::Ok, "{}", last(piw_last_error_message));
    let run: serde_json::Value = serde_json::from_str(&take(out)).unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"]["$piw"], "value", "a reference");
    let resolve = |stored: &serde_json::Value| -> serde_json::Value {
        let stored = c(&stored.to_string());
        let mut out = null_mut();
        let st = unsafe {
            piw_client_resolve_value(client, run_c.as_ptr(), stored.as_ptr(), 30_000, &mut out)
        };
        assert_eq!(st, PiwStatus::Ok, "{}", last(piw_last_error_message));
        serde_json::from_str(&take(out)).unwrap()
    };
    let value = resolve(&run["result"]);
    assert_eq!(value["blob"].as_str().unwrap(), "b".repeat(300_000));
    let own = serde_json::json!({ "$piw": "value", "mine": true });
    assert_eq!(
        resolve(&serde_json::json!({ "$piw": "literal", "value": own })),
        own
    );
    assert_eq!(
        resolve(&serde_json::json!([1, 2])),
        serde_json::json!([1, 2])
    );
    unsafe { piw_client_close(client) };
}

/// Through the C ABI, `run.start` asks for a detached run with `"execution_mode": "detached"`:
/// one with an agent step, on a host with no Pi model for detached steps (none in the input,
/// the workflow or Pi's settings either), is refused at once, saying why, and starts nothing.
/// A workflow without a step for a model needs none: its detached start goes on.
#[test]
fn a_detached_start_the_host_cannot_serve_is_refused_with_why() {
    let install = common::Install::new();
    let client = connect(&install);
    let workflow = write_workflow(
        &install,
        "asks",
        serde_json::json!({
            "graph": {"name": "asks", "start": "draft",
                      "nodes": {"draft": {"kind": "agent"}}, "edges": []},
            "behaviors": {"draft": {"interact": "agent"}}
        }),
    );
    let err = call(
        client,
        "run.start",
        None,
        Some(serde_json::json!({
            "workflow_file": workflow, "execution_mode": "detached", "project_dir": install.path(),
        })),
    );
    assert_eq!(err, Err(PiwStatus::Rejected));
    assert_eq!(piw_last_rejection_code(), PiwRejectionCode::PiUnusable);
    let message = last(piw_last_error_message);
    assert!(
        message.contains("cannot start a detached run: no Pi provider and model"),
        "{message}"
    );
    let runs = call(client, "run.list", None, Some(serde_json::json!({}))).unwrap();
    assert_eq!(runs["body"]["runs"], serde_json::json!([]), "{runs}");
    let compute = common::repo_root().join("examples/hello.workflow.json");
    let started = call(
        client,
        "run.start",
        None,
        Some(serde_json::json!({
            "workflow_file": compute, "execution_mode": "detached", "project_dir": install.path(),
        })),
    )
    .expect("a workflow of compute nodes needs no model");
    assert_eq!(started["body"]["status"], "queued", "{started}");
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Ok);
}
