//! The host's command dispatch against a real store, for interleavings that a live host only
//! produces under load (several commands in one group-commit batch).

mod common;

use common::Fixture;
use piw_host::engine::dispatch::{apply_command, apply_read};
use piw_host::engine::state::HostState;
use piw_host::protocol::{payload, Request, RequestBody};
use piw_host::store::prelude::*;
use piw_host::store::{DecisionKind, Fence, InteractionKind, RunStatus};
use serde_json::json;

/// Applies `body` for the run in the transaction where the child's wait releases the claim,
/// with the host's cache still holding it; returns the command's response body.
fn in_the_releasing_batch(
    f: &mut Fixture,
    run_id: &str,
    act: &piw_host::store::Activation,
    attempt: &str,
    body: RequestBody,
) -> serde_json::Value {
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    state.claims.insert(run_id.to_owned(), act.claim.clone());
    let req = Request::new("cmd-1", body).with_run_id(run_id);
    f.store
        .write(|w| {
            w.wait_for_decision(&act.claim, attempt, DecisionKind::Checkpoint, &json!({}))?;
            apply_command(w, &state, &req, None, None)
        })
        .expect("the command commits")
}

#[test]
fn pause_and_resume_in_the_batch_that_released_the_held_claim_still_apply() {
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let body = in_the_releasing_batch(&mut f, &run_id, &act, &attempt, RequestBody::RunPause);
    assert_eq!(body["paused"], json!(true));
    assert!(f.store.run(&run_id).unwrap().paused);

    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    f.store
        .write(|w| w.pause(&run_id, piw_host::store::Fence::Claim(&act.claim)))
        .unwrap();
    let body = in_the_releasing_batch(&mut f, &run_id, &act, &attempt, RequestBody::RunResume);
    assert_eq!(body["paused"], json!(false));
    assert!(!f.store.run(&run_id).unwrap().paused);
    f.assert_clean();
}

#[test]
fn a_cancel_in_the_batch_that_released_the_held_claim_still_cancels() {
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let cancel = RequestBody::RunCancel(payload::RunCancel {
        reason: Some("by test".into()),
    });
    let body = in_the_releasing_batch(&mut f, &run_id, &act, &attempt, cancel);
    assert_eq!(body["status"], json!("cancelled"));
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Cancelled);
    f.assert_clean();
}

/// A child launched in a transaction that then failed to commit: its run, generation and child
/// record number were never stored and are issued again to the next launch. Reports about the
/// abandoned child must not land on that next child's record.
#[test]
fn reports_about_an_abandoned_launch_are_ignored() {
    use piw_host::engine::children::{on_child_reports, ChildReport};
    use piw_host::store::ChildExitRecord;

    let mut f = Fixture::new();
    let run_id = f.start();
    let act = f.activate(&run_id);
    let generation = act.claim.generation;
    let child_epoch = f
        .store
        .write(|w| {
            let host_epoch = w.begin_host_epoch(1)?;
            w.record_child_launch(&run_id, generation, host_epoch, act.mode)
        })
        .unwrap();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    state.abandoned_launches.insert(7, run_id.clone());
    let started = |launch, pid| ChildReport::Started {
        run_id: run_id.clone(),
        generation,
        child_epoch,
        launch,
        pid,
        start_time: 1,
        standby: false,
    };
    let exited = ChildReport::Exited {
        host_ran_out_of: None,
        run_id: run_id.clone(),
        generation,
        child_epoch,
        launch: 7,
        exit: ChildExitRecord {
            reason: "stopped by the host by signal 9".into(),
            signal: Some(9),
            ..Default::default()
        },
    };
    let now = f.store.now_ms();
    on_child_reports(
        &mut f.store,
        &mut state,
        now,
        vec![started(7, 4242), exited],
    );
    let record = &f.store.children(&run_id).unwrap()[0];
    assert_eq!((record.pid, record.exited), (None, false), "{record:?}");
    assert!(
        state.abandoned_launches.is_empty(),
        "forgotten after its exit"
    );
    // The report of the launch that did commit is recorded.
    let now = f.store.now_ms();
    on_child_reports(&mut f.store, &mut state, now, vec![started(8, 4343)]);
    assert_eq!(f.store.children(&run_id).unwrap()[0].pid, Some(4343));
}

/// A launch whose transaction failed to commit may be of a run that was never stored (its
/// `run.start` was in the same batch): the supervisor created the child's log at its spawn, and
/// once the child exits that log directory goes, as a pruned run's does. A run that is stored
/// keeps its logs.
#[test]
fn the_logs_of_an_abandoned_launch_of_a_run_never_stored_are_removed() {
    use piw_host::engine::children::{on_child_reports, ChildReport, SupervisorCmd};
    use piw_host::store::ChildExitRecord;

    let mut f = Fixture::new();
    let stored = f.start();
    let never = "run-0000000000000000000000000000".to_owned();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    state.child_config.output_logs = Some("/home/piw/logs".into());
    state.abandoned_launches.insert(7, never.clone());
    state.abandoned_launches.insert(8, stored.clone());
    let exited = |run_id: &str, launch| ChildReport::Exited {
        host_ran_out_of: None,
        run_id: run_id.to_owned(),
        generation: 1,
        child_epoch: 1,
        launch,
        exit: ChildExitRecord {
            reason: "stopped by the host by signal 9".into(),
            signal: Some(9),
            ..Default::default()
        },
    };
    let now = f.store.now_ms();
    on_child_reports(
        &mut f.store,
        &mut state,
        now,
        vec![exited(&never, 7), exited(&stored, 8)],
    );
    let removed: Vec<_> = state
        .child_commands
        .iter()
        .filter_map(|c| match c {
            SupervisorCmd::RemoveLogs { dirs } => Some(dirs.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        removed,
        vec![vec![std::path::PathBuf::from(format!(
            "/home/piw/logs/{never}"
        ))]]
    );
    assert!(state.abandoned_launches.is_empty());
}

/// A host state of epoch 1 that supervises (its orders wait in `child_commands`), with one
/// runtime for `.workflow.mjs` (`/bin/true`; `standby`: whether it keeps pooled workers).
fn host_state_with_runtime(f: &mut Fixture, standby: bool) -> HostState {
    let mut state = HostState {
        owner_id: "host-epoch-1".into(),
        epoch: f.store.write(|w| w.begin_host_epoch(1)).unwrap(),
        supervising: true,
        ..HostState::new(Box::new(piw_host::ids::OsIds))
    };
    state.child_config.runtimes = vec![piw_host::engine::children::Runtime {
        suffix: ".workflow.mjs".into(),
        program: "/bin/true".into(),
        args: Vec::new(),
        standby,
    }];
    state
}

/// After a commit that had already launched children fails, children are launched only after
/// their commit until one succeeds: a commit that keeps failing (a full disk) must not start and
/// stop children in a loop.
#[test]
fn after_a_failed_activation_commit_children_wait_for_their_commit() {
    use piw_host::driver::supervisor::SupervisorCmd;
    use piw_host::engine::children::{on_child_reports, schedule, ChildReport};
    use piw_host::store::ChildExitRecord;
    use std::sync::atomic::Ordering;

    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = host_state_with_runtime(&mut f, false);
    let sent = |state: &mut HostState| {
        state
            .child_commands
            .drain(..)
            .map(|cmd| match cmd {
                SupervisorCmd::Launch { launch, .. } => format!("launch {launch}"),
                SupervisorCmd::Stop { .. } => "stop".to_owned(),
                SupervisorCmd::RemoveLogs { .. } => "remove logs".to_owned(),
                SupervisorCmd::LaunchBridge { .. } | SupervisorCmd::StopBridge { .. } => {
                    "bridge".to_owned()
                }
                SupervisorCmd::LaunchChannel { .. } | SupervisorCmd::StopChannel { .. } => {
                    "channel".to_owned()
                }
                SupervisorCmd::LaunchPass { .. } | SupervisorCmd::StopPass { .. } => {
                    "pass".to_owned()
                }
            })
            .collect::<Vec<_>>()
    };

    // The first failure: the child was launched early, so it is stopped.
    f.fail_next_commit.store(true, Ordering::SeqCst);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    assert_eq!(sent(&mut state), ["launch 0", "stop"]);
    assert!(state.launch_after_commit);
    assert_eq!(
        state.live_children(),
        1,
        "the stopped child holds its slot until it exits"
    );
    let now = f.store.now_ms();
    on_child_reports(
        &mut f.store,
        &mut state,
        now,
        vec![ChildReport::Exited {
            host_ran_out_of: None,
            run_id: run_id.clone(),
            generation: 1,
            child_epoch: 1,
            launch: 0,
            exit: ChildExitRecord::default(),
        }],
    );
    assert_eq!(state.live_children(), 0);

    // Failing again: nothing starts.
    f.fail_next_commit.store(true, Ordering::SeqCst);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    assert_eq!(sent(&mut state), Vec::<String>::new());
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);

    // The next commit succeeds: the child is launched after it, and early launching resumes.
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    assert_eq!(sent(&mut state), ["launch 1"]);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Running);
    assert!(!state.launch_after_commit);
}

/// Launches `f`'s queued run from the standby pool, whose worker then dies before its hello:
/// the run is requeued without counting a loss. Returns the host state and its supervisor
/// orders.
fn standby_worker_died_before_hello(f: &mut Fixture, run_id: &str) -> HostState {
    use piw_host::engine::children::{on_child_reports, schedule};
    use piw_host::store::ChildExitRecord;

    let mut state = host_state_with_runtime(f, true);
    state.child_config.standby_workers = 2;
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    let first = launches(&mut state);
    let [launched @ (_, _, _, true)] = first[..] else {
        panic!("the first launch draws on the pool: {first:?}");
    };
    // The pool's worker took the run, then died before its hello.
    let exit = ChildExitRecord {
        reason: "killed by SIGKILL".into(),
        ..Default::default()
    };
    let now = f.store.now_ms();
    on_child_reports(
        &mut f.store,
        &mut state,
        now,
        started_then_exited(run_id, launched, exit),
    );
    assert_eq!(
        f.store.run(run_id).unwrap().status,
        RunStatus::Queued,
        "forgiven, requeued"
    );
    state
}

/// The launches ordered so far: (launch, generation, child epoch, from the pool).
fn launches(state: &mut HostState) -> Vec<(u64, u64, i64, bool)> {
    use piw_host::driver::supervisor::SupervisorCmd;
    let mut out = Vec::new();
    for cmd in state.child_commands.drain(..) {
        if let SupervisorCmd::Launch {
            launch,
            generation,
            child_epoch,
            standby,
            ..
        } = cmd
        {
            out.push((launch, generation, child_epoch, standby.is_some()));
        }
    }
    out
}

/// A child of launch `launched` that started, then exited with `exit`: the two reports.
fn started_then_exited(
    run_id: &str,
    (launch, generation, child_epoch, standby): (u64, u64, i64, bool),
    exit: piw_host::store::ChildExitRecord,
) -> Vec<piw_host::engine::children::ChildReport> {
    use piw_host::engine::children::ChildReport;
    vec![
        ChildReport::Started {
            run_id: run_id.to_owned(),
            generation,
            child_epoch,
            launch,
            pid: 1,
            start_time: 0,
            standby,
        },
        ChildReport::Exited {
            host_ran_out_of: None,
            run_id: run_id.to_owned(),
            generation,
            child_epoch,
            launch,
            exit,
        },
    ]
}

/// A standby worker that died before its hello is forgiven once; the run then starts in a
/// fresh process, not in another pooled worker that may have died at the same moment.
#[test]
fn a_run_whose_standby_worker_died_before_its_hello_restarts_in_a_fresh_process() {
    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = standby_worker_died_before_hello(&mut f, &run_id);
    let now = f.store.now_ms();
    piw_host::engine::children::schedule(&mut f.store, &mut state, now);
    let second = launches(&mut state);
    assert!(
        matches!(second[..], [(_, _, _, false)]),
        "the relaunch starts a fresh process: {second:?}"
    );
}

/// `PIW_STANDBY_WORKERS=0`: a launch of a runtime that could keep standby workers names no
/// pool, so the supervisor never starts one (it keeps a pool only for launches that name it);
/// with workers configured, the same launch names its pool.
#[test]
fn no_standby_pool_is_named_when_standby_workers_is_zero() {
    use piw_host::engine::children::schedule;
    for (configured, pooled) in [(0, false), (2, true)] {
        let mut f = Fixture::new();
        f.start();
        let mut state = host_state_with_runtime(&mut f, true);
        state.child_config.standby_workers = configured;
        let now = f.store.now_ms();
        schedule(&mut f.store, &mut state, now);
        let launched = launches(&mut state);
        assert!(
            matches!(launched[..], [(_, _, _, p)] if p == pooled),
            "standby_workers = {configured}: {launched:?}"
        );
    }
}

#[test]
fn a_forgiven_standby_death_is_forgotten_when_its_run_ends_before_a_relaunch() {
    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = standby_worker_died_before_hello(&mut f, &run_id);
    assert!(state.forgiven_standby_exits.contains(&run_id));
    f.store
        .write(|w| w.cancel(&run_id, piw_host::store::Fence::Unclaimed, "not needed"))
        .unwrap();
    // What the store thread does after a batch that touched the run.
    let now = f.store.now_ms();
    piw_host::engine::children::forget_released_claims(
        &f.store,
        &mut state,
        now,
        Some(std::slice::from_ref(&run_id)),
    );
    assert!(
        state.forgiven_standby_exits.is_empty(),
        "an ended run leaves nothing behind: {:?}",
        state.forgiven_standby_exits
    );
}

/// Ready runs whose activation commit failed (a full disk, say) are tried again after a
/// while: no child of theirs will exit to wake the store thread, so the retry is a deadline.
#[test]
fn ready_runs_whose_activation_failed_to_commit_are_tried_again() {
    use piw_host::driver::supervisor::SupervisorCmd;
    use piw_host::engine::children::{due_child_work, next_child_deadline, schedule};
    use std::sync::atomic::Ordering;

    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = host_state_with_runtime(&mut f, false);
    state.launch_after_commit = true; // an earlier activation commit failed
    f.fail_next_commit.store(true, Ordering::SeqCst);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    assert!(state.child_commands.is_empty(), "nothing launched");
    let retry =
        next_child_deadline(&f.store, &state, f.store.now_ms()).expect("a deadline to try again");
    assert!(retry > f.store.now_ms(), "not at once: {retry}");

    // It fails again: the next try waits twice as long (no log flood, no spin).
    let first_wait = retry - f.store.now_ms();
    f.clock.advance(first_wait);
    f.fail_next_commit.store(true, Ordering::SeqCst);
    let now = f.store.now_ms();
    due_child_work(&mut f.store, &mut state, now);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    let retry =
        next_child_deadline(&f.store, &state, f.store.now_ms()).expect("a deadline to try again");
    assert_eq!(retry - f.store.now_ms(), 2 * first_wait);

    f.clock.advance(retry - f.store.now_ms());
    let now = f.store.now_ms();
    due_child_work(&mut f.store, &mut state, now);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Running);
    assert!(matches!(
        state.child_commands.first(),
        Some(SupervisorCmd::Launch { .. })
    ));
    assert_eq!(state.activation_retry_at, None, "no retry left behind");
    assert_eq!(
        state.activation_retry_delay_ms, 0,
        "the back-off starts anew"
    );
}

/// A `worker.hello` whose batch did not commit leaves no trace in the host's memory either:
/// the store has no handshake, so the child's retry must be accepted (the store thread calls
/// `forget_uncommitted_worker_message` for every worker message of a failed batch).
#[test]
fn a_hello_whose_batch_failed_to_commit_can_be_said_again() {
    use piw_host::driver::supervisor::SupervisorCmd;
    use piw_host::engine::children::{apply_worker, forget_uncommitted_worker_message, schedule};
    use piw_host::protocol::payload::WorkerHello;
    use std::sync::atomic::Ordering;

    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = host_state_with_runtime(&mut f, false);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    let Some(SupervisorCmd::Launch {
        spec, generation, ..
    }) = state.child_commands.pop()
    else {
        panic!("the run was launched");
    };
    let envelope: serde_json::Value = serde_json::from_slice(&spec.stdin_payload).unwrap();
    let token = envelope["child_token"].as_str().unwrap().to_owned();
    let hello = Request::new(
        "h-1",
        RequestBody::WorkerHello(WorkerHello {
            child_token: token,
            pid: 1,
            definition: Some(json!({"name": "w", "start": "a",
                "nodes": {"a": {"kind": "compute"}}, "edges": []})),
            mounted_sources: Some(json!({})),
            start_node: true,
        }),
    )
    .with_run_id(&run_id)
    .with_generation(generation);
    f.fail_next_commit.store(true, Ordering::SeqCst);
    let failed = f.store.write(|w| {
        let _ = w.savepoint(|w| apply_worker(w, &mut state, &hello));
        Ok(())
    });
    assert!(failed.is_err(), "the batch did not commit");
    forget_uncommitted_worker_message(&mut state, &hello, f.store.now_ms());
    assert!(!f.store.children(&run_id).unwrap()[0].handshake);
    let retry = f
        .store
        .write(|w| w.savepoint(|w| apply_worker(w, &mut state, &hello)));
    assert!(retry.is_ok(), "the retried hello: {retry:?}");
    assert!(f.store.children(&run_id).unwrap()[0].handshake);
}

/// A node deadline that passed while an effect was applying cannot be routed: the child is
/// stopped and its exit settles the run. Until then that passed deadline must not be the store
/// thread's next wake-up (it woke every millisecond, with two writes and a warning each time).
#[test]
fn an_unroutable_node_timeout_does_not_make_the_store_thread_spin() {
    use piw_host::engine::children::{due_child_work, next_child_deadline, schedule};
    use piw_host::store::RetryContract;

    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = host_state_with_runtime(&mut f, false);
    let now = f.store.now_ms();
    schedule(&mut f.store, &mut state, now);
    let claim = state.claims[&run_id].clone();
    let graph = json!({"name": "w", "start": "a",
        "nodes": {"a": {"kind": "action", "timeout_ms": 1000}, "b": {"kind": "compute"}},
        "edges": [{"from": "a", "switch": {"on": "$result.outcome",
                    "cases": {"ok": "b", "timed_out": "b"}}}]});
    f.store
        .write(|w| w.record_launch_facts(&claim, &graph, &json!({})))
        .unwrap();
    let now = f.store.now_ms();
    let attempt = f
        .store
        .write(|w| w.node_started(&claim, "a", Some(now + 1000)))
        .unwrap();
    f.reserve_and_apply(&claim, &attempt, "k", RetryContract::Never);
    f.clock.advance(2000);
    let now = f.store.now_ms();
    due_child_work(&mut f.store, &mut state, now);
    assert!(
        state.children[&run_id].stopping,
        "the child is being stopped"
    );
    let next = next_child_deadline(&f.store, &state, f.store.now_ms());
    assert!(
        next.is_none_or(|at| at > f.store.now_ms()),
        "a passed deadline is still the next wake-up: {next:?} at {}",
        f.store.now_ms()
    );
}

#[test]
fn last_stderr_line_says_why_node_died_not_where_its_stack_was() {
    use piw_host::engine::children::last_stderr_line;
    let oom = b"<--- Last few GCs --->\n\n[81:0x6e3c000]  912 ms: Mark-Compact 40.1 (42.0) -> 39.6 (43.0) MB\n\n<--- JS stacktrace --->\n\nFATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n----- Native stack trace -----\n\n 1: 0xb8d0a3 node::Abort() [node]\n 2: 0xa9a7f0  [node]\n 3: 0xd6dbd0 v8::Utils::ReportOOMFailure(v8::internal::Isolate*, char const*) [node]\n";
    assert_eq!(
        last_stderr_line(oom).as_deref(),
        Some("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory")
    );
    let zone = b"\n#\n# Fatal process out of memory: Zone\n#\n----- Native stack trace -----\n\n 1: 0x10f2a51  [node]\n";
    assert_eq!(
        last_stderr_line(zone).as_deref(),
        Some("Fatal process out of memory: Zone")
    );
    let thrown = b"file:///w.mjs:3\n    throw new Error('boom');\n    ^\n\nError: boom\n    at file:///w.mjs:3:11\n    at ModuleJob.run (node:internal/modules/esm/module_job:271:25)\n\nNode.js v22.12.0\n";
    assert_eq!(last_stderr_line(thrown).as_deref(), Some("Error: boom"));
}

#[test]
fn last_stderr_line_is_bounded_and_masks_what_looks_like_a_token() {
    use piw_host::engine::children::last_stderr_line;
    assert_eq!(last_stderr_line(b""), None);
    assert_eq!(last_stderr_line(b"\n  \n"), None);
    assert_eq!(
        last_stderr_line(b"first\n  cannot spawn /nope/node: No such file  \n\n").as_deref(),
        Some("cannot spawn /nope/node: No such file")
    );
    let token = "ab".repeat(32);
    let line = format!("token {token} and hash 0123abcd\n");
    assert_eq!(
        last_stderr_line(line.as_bytes()).as_deref(),
        Some("token <hex> and hash 0123abcd")
    );
    let long = "é".repeat(1000);
    let got = last_stderr_line(long.as_bytes()).unwrap();
    assert!(
        got.len() <= 600 && got.ends_with('…'),
        "cut to 600 bytes: {}",
        got.len()
    );
    assert!(
        got.len() > 590,
        "not cut shorter than needed: {}",
        got.len()
    );
}

#[test]
fn a_child_that_keeps_dying_leaves_its_last_stderr_line_in_the_review_reason() {
    use piw_host::engine::children::{on_child_reports, schedule};
    use piw_host::store::ChildExitRecord;

    let mut f = Fixture::new();
    let run_id = f.start();
    let mut state = host_state_with_runtime(&mut f, false);
    for _ in 0..3 {
        let now = f.store.now_ms();
        schedule(&mut f.store, &mut state, now);
        let launched = launches(&mut state);
        let [one @ (_, _, _, false)] = launched[..] else {
            panic!("one fresh launch: {launched:?}");
        };
        let exit = ChildExitRecord {
            reason: "exited with code 1".into(),
            exit_code: Some(1),
            stderr_tail: b"starting\ncannot spawn /nope/node: not found\n".to_vec(),
            ..Default::default()
        };
        let now = f.store.now_ms();
        on_child_reports(
            &mut f.store,
            &mut state,
            now,
            started_then_exited(&run_id, one, exit),
        );
        // Past any back-off before the next launch.
        f.clock.advance(120_000);
    }
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Review);
    let reason = run.review_reason.unwrap_or_default();
    assert!(
        reason.contains("its last stderr line: cannot spawn /nope/node: not found"),
        "{reason}"
    );
}

/// `checkpoint.answer`, `decision.answer` and `interaction.submit` name the run (and for a
/// submission the node) they answer in the envelope; the host checks `expected_revision`
/// against, publishes the events of and reports the revision of that run. An answer whose
/// decision or interaction belongs to another run (or node) must be refused and change
/// nothing, or it would bypass the other run's revision check and its events.
#[test]
fn an_answer_naming_another_run_or_node_is_refused() {
    let mut f = Fixture::new();
    let (other, _, _) = f.running();
    let other_revision = f.store.run(&other).unwrap().revision;
    // A run waiting on a checkpoint and a run waiting on an interaction.
    let (run_d, act, a) = f.running();
    let decision = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::Checkpoint, &json!({})))
        .unwrap();
    let (run_i, attempt_i, interaction) = f.waiting();
    let state = HostState::new(Box::new(piw_host::ids::OsIds));
    let answer = payload::DecisionAnswer {
        decision_id: decision.clone(),
        answer: json!("yes"),
        channel: None,
    };
    let submit = payload::InteractionSubmit {
        interaction_id: interaction.clone(),
        result: json!({"v": 1}),
        refuse_repeat: false,
    };
    let cases = [
        Request::new("c1", RequestBody::CheckpointAnswer(answer.clone()))
            .with_run_id(&other)
            .with_expected_revision(other_revision),
        Request::new("c2", RequestBody::DecisionAnswer(answer.clone())).with_run_id(&other),
        Request::new("c3", RequestBody::InteractionSubmit(submit.clone()))
            .with_run_id(&other)
            .with_node_id("a")
            .with_attempt_id(&attempt_i)
            .with_expected_revision(other_revision),
        Request::new("c4", RequestBody::InteractionSubmit(submit.clone()))
            .with_run_id(&run_i)
            .with_node_id("b")
            .with_attempt_id(&attempt_i),
    ];
    for req in cases {
        let before = f.store.canonical_dump().unwrap();
        let err = f
            .store
            .write(|w| apply_command(w, &state, &req, None, None))
            .expect_err(&req.request_id);
        let code = piw_host::engine::dispatch::rejection_for(&err).code;
        assert!(
            matches!(
                code,
                piw_host::protocol::RejectionCode::NotFound
                    | piw_host::protocol::RejectionCode::Malformed
            ),
            "{}: {err:?}",
            req.request_id
        );
        assert_eq!(
            f.store.canonical_dump().unwrap(),
            before,
            "{}: a refused answer changed the database",
            req.request_id
        );
    }
    // Named correctly, they apply.
    let ok = [
        Request::new("ok1", RequestBody::CheckpointAnswer(answer)).with_run_id(&run_d),
        Request::new("ok2", RequestBody::InteractionSubmit(submit))
            .with_run_id(&run_i)
            .with_node_id("a")
            .with_attempt_id(&attempt_i),
    ];
    for req in ok {
        f.store
            .write(|w| apply_command(w, &state, &req, None, None))
            .expect(&req.request_id);
    }
    assert_eq!(f.store.run(&run_d).unwrap().status, RunStatus::Queued);
    assert_eq!(f.store.run(&run_i).unwrap().status, RunStatus::Queued);
    f.assert_clean();
}

/// A run that looped thousands of times still has a status that fits one reply: the newest
/// attempts first, capped, with the count of all; `attempts_before` pages towards the first.
/// Before, `run.status` listed every attempt and the reply (here several MiB) was refused
/// with `payload_too_large`, so no client could read the run or wait for its result.
#[test]
fn the_status_of_a_run_with_thousands_of_attempts_fits_and_pages_back() {
    use piw_host::engine::dispatch::apply_read;
    use piw_host::protocol::DEFAULT_MAX_FRAME_BYTES;

    const STEPS: usize = 8_000;
    let mut f = Fixture::new();
    let (run_id, act, first) = f.running();
    let last = f
        .store
        .write(|w| {
            let mut attempt = first.clone();
            for i in 0..STEPS {
                let next = if i % 2 == 0 { "b" } else { "a" };
                attempt = w
                    .transition(&act.claim, &common::step(&attempt, next))?
                    .next_attempt_id;
            }
            w.complete(
                &act.claim,
                &attempt,
                &json!({"i": STEPS}),
                &json!({"done": true}),
            )?;
            Ok(attempt)
        })
        .unwrap();
    let status = |query: payload::RunStatusQuery| {
        let req = Request::new("st", RequestBody::RunStatus(query)).with_run_id(&run_id);
        let body = apply_read(
            &f.store,
            &HostState {
                reply_limit: DEFAULT_MAX_FRAME_BYTES,
                ..HostState::new(Box::new(piw_host::ids::OsIds))
            },
            f.store.now_ms(),
            &req,
        )
        .expect("a status that fits")
        .body;
        let len = serde_json::to_vec(&body).unwrap().len();
        assert!(len < DEFAULT_MAX_FRAME_BYTES, "{len} bytes");
        body
    };
    let ids = |body: &serde_json::Value| -> Vec<String> {
        body["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["attempt_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let newest = status(payload::RunStatusQuery::default());
    assert_eq!(newest["run"]["result"], json!({"done": true}));
    assert_eq!(newest["attempt_count"], json!(STEPS + 1));
    let page = ids(&newest);
    assert_eq!(page.len(), payload::DEFAULT_STATUS_ATTEMPTS as usize);
    assert_eq!(page[0], last, "newest first");

    // Page back to the first attempt, 1000 at a time: every attempt once, in order.
    let mut seen = page.clone();
    let mut before = page.last().cloned();
    while let Some(cursor) = before {
        let older = ids(&status(payload::RunStatusQuery {
            attempts_limit: Some(5000),
            attempts_before: Some(cursor),
        }));
        assert!(older.len() <= payload::MAX_STATUS_ATTEMPTS as usize);
        before = older.last().cloned();
        seen.extend(older);
    }
    assert_eq!(seen.len(), STEPS + 1);
    assert_eq!(
        seen.last(),
        Some(&first),
        "the last page ends at the first attempt"
    );
    let unique: std::collections::BTreeSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len());

    // A cursor that is not one of the run's attempts is not found.
    let req = Request::new(
        "st",
        RequestBody::RunStatus(payload::RunStatusQuery {
            attempts_limit: None,
            attempts_before: Some("att-elsewhere".into()),
        }),
    )
    .with_run_id(&run_id);
    let err = apply_read(
        &f.store,
        &HostState {
            reply_limit: DEFAULT_MAX_FRAME_BYTES,
            ..HostState::new(Box::new(piw_host::ids::OsIds))
        },
        f.store.now_ms(),
        &req,
    )
    .unwrap_err();
    assert!(
        matches!(err, piw_host::store::StoreError::NotFound { .. }),
        "{err:?}"
    );
}

/// `interaction.list` of a session fits its reply: a few waiting runs whose requests are large
/// (each valid, under the payload limit) used to make the reply too large for good, and the
/// Pi extension saw none of the session's requests. The oldest come whole, as many as fit,
/// with `more`; the rest show once those are answered.
#[test]
fn interaction_list_of_a_session_fits_a_reply() {
    use piw_host::protocol::{encode_frame, Limits, ServerFrame};
    let mut f = Fixture::new();
    let big = json!({ "prompt": "x".repeat(200 * 1024) });
    let mut asked = Vec::new();
    for _ in 0..6 {
        let (run_id, act, a) = f.running();
        let i = f
            .store
            .write(|w| {
                w.request_interaction(&act.claim, &a, InteractionKind::Agent, &big, None, &|_| {
                    true
                })
            })
            .unwrap();
        asked.push((run_id, i, a));
    }
    let limits = Limits::default();
    let list = |f: &Fixture| {
        let req = Request::new(
            "req-list",
            RequestBody::InteractionList(payload::InteractionList {
                session_id: "session-1".into(),
            }),
        );
        let receipt = apply_read(
            &f.store,
            &HostState {
                reply_limit: limits.max_frame_bytes,
                ..HostState::new(Box::new(piw_host::ids::OsIds))
            },
            f.store.now_ms(),
            &req,
        )
        .unwrap();
        let encoded = encode_frame(&ServerFrame::receipt("req-list", receipt.clone()), &limits);
        assert!(
            encoded.is_ok(),
            "the reply does not fit a frame: {:?}",
            encoded.err()
        );
        receipt.body
    };
    let ids = |body: &serde_json::Value| -> Vec<String> {
        body["interactions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["interaction_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = list(&f);
    let shown = ids(&first);
    assert!(!shown.is_empty() && shown.len() < asked.len(), "{shown:?}");
    assert_eq!(first["more"], json!(true));
    assert_eq!(
        shown,
        asked
            .iter()
            .map(|(_, i, _)| i.clone())
            .take(shown.len())
            .collect::<Vec<_>>(),
        "oldest first"
    );
    assert!(first["interactions"][0]["request"] == big, "whole requests");
    // Once the shown ones are settled (here their runs end), the next ones come.
    for (run_id, _, _) in asked.iter().take(shown.len()) {
        f.store
            .write(|w| w.cancel(run_id, Fence::Unclaimed, "answered elsewhere"))
            .unwrap();
    }
    let rest = ids(&list(&f));
    assert_eq!(
        rest,
        asked
            .iter()
            .skip(shown.len())
            .take(rest.len())
            .map(|(_, i, _)| i.clone())
            .collect::<Vec<_>>()
    );
    assert!(!rest.is_empty());
}

/// `message.claim` claims only what its reply carries, in the same transaction: terminal
/// messages of a few runs with large (valid) results used to be claimed (60 s lease, receipt
/// stored) and then refused as too large, so the session's messages were never delivered.
/// Claiming and acknowledging in turn delivers every message.
#[test]
fn message_claim_of_a_session_fits_a_reply() {
    use piw_host::protocol::{encode_frame, Limits, Receipt, ServerFrame};
    let mut f = Fixture::new();
    let big = json!({ "text": "x".repeat(220 * 1024) });
    for _ in 0..5 {
        let (_run, act, a) = f.running();
        f.store
            .write(|w| w.complete(&act.claim, &a, &json!(null), &big))
            .unwrap();
    }
    let limits = Limits::default();
    let state = HostState {
        reply_limit: limits.max_frame_bytes,
        ..HostState::new(Box::new(piw_host::ids::OsIds))
    };
    let mut delivered = Vec::new();
    for round in 0..5 {
        let req = Request::new(
            format!("req-claim-{round}"),
            RequestBody::MessageClaim(payload::MessageClaim {
                session_id: "session-1".into(),
                limit: Some(20),
                claimant: Some("pi:session-1".into()),
                after: None,
            }),
        );
        let body = f
            .store
            .write(|w| apply_command(w, &state, &req, None, None))
            .unwrap();
        let encoded = encode_frame(
            &ServerFrame::receipt("req-claim", Receipt::new(None, body.clone())),
            &limits,
        );
        assert!(
            encoded.is_ok(),
            "the reply does not fit a frame: {:?}",
            encoded.err()
        );
        let messages = body["messages"].as_array().unwrap().clone();
        if messages.is_empty() {
            break;
        }
        assert!(messages.len() < 5, "not all at once: {}", messages.len());
        assert_eq!(body["more"], json!(delivered.len() + messages.len() < 5));
        for m in messages {
            let id = m["message_id"].as_str().unwrap().to_owned();
            f.store.write(|w| w.ack_message(&id)).unwrap();
            delivered.push(id);
        }
    }
    assert_eq!(delivered.len(), 5, "every message delivered");
}

/// `run.status` of a run without a session carries its messages and still fits a frame when
/// they are large: the oldest messages' content is left out first (marked), the newest stays.
#[test]
fn run_status_with_large_messages_of_a_sessionless_run_fits_a_reply() {
    use piw_host::protocol::{encode_frame, Limits, Receipt, ServerFrame};
    use piw_host::store::{ExecutionMode, NewRun};
    let mut f = Fixture::new();
    let big = |n: usize| json!({ "message": format!("{n}").repeat(220 * 1024) });
    let run_id = f.start_with(NewRun {
        execution_mode: ExecutionMode::Detached,
        ..common::new_run(None)
    });
    let act = f.activate(&run_id);
    let mut attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    // One notify per visit: each node says something, then the run moves on.
    for n in 0..5 {
        f.store.write(|w| w.notify(&act.claim, &big(n))).unwrap();
        attempt = f
            .store
            .write(|w| w.transition(&act.claim, &common::step(&attempt, &format!("n{n}"))))
            .unwrap()
            .next_attempt_id;
    }
    f.store
        .write(|w| w.complete(&act.claim, &attempt, &json!(null), &json!("done")))
        .unwrap();
    let limits = Limits::default();
    let state = HostState {
        reply_limit: limits.max_frame_bytes,
        ..HostState::new(Box::new(piw_host::ids::OsIds))
    };
    let req = Request::new("st", RequestBody::RunStatus(Default::default())).with_run_id(&run_id);
    let body = apply_read(&f.store, &state, f.store.now_ms(), &req)
        .unwrap()
        .body;
    let encoded = encode_frame(
        &ServerFrame::receipt("st", Receipt::new(None, body.clone())),
        &limits,
    );
    assert!(encoded.is_ok(), "does not fit a frame: {:?}", encoded.err());
    assert_eq!(body["message_count"], json!(6));
    let messages = body["messages"].as_array().unwrap();
    let omitted: Vec<bool> = messages
        .iter()
        .map(|m| m["content_omitted"] == json!(true) && m["content"].is_null())
        .collect();
    assert_eq!(
        omitted,
        [true, false, false, false, false, false],
        "oldest first"
    );
    assert_eq!(messages[5]["kind"], json!("terminal"));
    assert_eq!(messages[4]["content"], big(4), "the newest whole");
}

/// A `worker.hello` reply fits a frame however large the run's outputs were: the node results
/// that do not fit are left out (`results_more`) and come in `worker.results` pages, each
/// fitting a frame too, until the child holds every one. A run whose nodes returned a few
/// large (valid) outputs used to be unresumable: every hello reply was too large, each child
/// died, and the run went to review.
#[test]
fn a_hello_reply_fits_a_frame_after_large_outputs() {
    use piw_host::engine::children::apply_worker;
    use piw_host::ids::ClaimToken;
    use piw_host::protocol::{encode_frame, Limits, Receipt, ServerFrame};
    use piw_host::store::{Answerer, AttemptOutcome, TransitionRequest};
    let mut f = Fixture::new();
    let (run_id, act, mut attempt) = f.running();
    let nodes = ["a", "b", "c", "d", "e"];
    for (n, next) in ["b", "c", "d", "e", "g"].into_iter().enumerate() {
        let output = json!({ "node": n, "text": "x".repeat(200 * 1024) });
        let t = f
            .store
            .write(|w| {
                w.transition(
                    &act.claim,
                    &TransitionRequest {
                        attempt_id: attempt.clone(),
                        outcome: AttemptOutcome::Succeeded { output },
                        next_node: next.into(),
                        next_deadline_at: None,
                    },
                )
            })
            .unwrap();
        attempt = t.next_attempt_id;
    }
    let d = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &attempt, DecisionKind::Checkpoint, &json!({})))
        .unwrap();
    f.store
        .write(|w| w.answer_decision(&d, &json!("yes"), Answerer::Model))
        .unwrap();
    let act = f.activate(&run_id);
    let token = ClaimToken::generate(&mut piw_host::ids::OsIds);
    let limits = Limits::default();
    let mut state = HostState {
        reply_limit: limits.max_frame_bytes,
        ..HostState::new(Box::new(piw_host::ids::OsIds))
    };
    state.claims.insert(run_id.clone(), act.claim.clone());
    state
        .children
        .insert(run_id.clone(), launched_child(&act, &token));
    let mut send = |f: &mut Fixture, id: &str, body: RequestBody| {
        let req = Request::new(id, body)
            .with_run_id(&run_id)
            .with_generation(act.claim.generation);
        let body = f
            .store
            .write(|w| apply_worker(w, &mut state, &req))
            .unwrap();
        let encoded = encode_frame(
            &ServerFrame::receipt(id, Receipt::new(None, body.clone())),
            &limits,
        );
        assert!(
            encoded.is_ok(),
            "{id}: the reply does not fit a frame: {:?}",
            encoded.err()
        );
        body
    };
    let hello = send(
        &mut f,
        "hello-1",
        RequestBody::WorkerHello(payload::WorkerHello {
            child_token: token.expose_secret().to_owned(),
            pid: 1,
            definition: None,
            mounted_sources: None,
            start_node: false,
        }),
    );
    assert_eq!(hello["results_more"], json!(true));
    assert_eq!(hello["answer"], json!("yes"));
    let mut results = hello["results"].as_array().unwrap().clone();
    let mut more = true;
    for page in 0..10 {
        if !more {
            break;
        }
        let body = send(
            &mut f,
            &format!("results-{page}"),
            RequestBody::WorkerResults(payload::WorkerResults {
                offset: results.len() as u64,
            }),
        );
        results.extend(body["results"].as_array().unwrap().iter().cloned());
        more = body["more"] == json!(true);
    }
    assert!(!more, "the pages end");
    let got: Vec<_> = results
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_owned(),
                r["output"]["node"].clone(),
            )
        })
        .collect();
    let want: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(n, node)| (node.to_string(), json!(n)))
        .collect();
    assert_eq!(got, want, "every node's output, in order");
}

/// `run.retry` answers with the status the run is in after the retry: `waiting` for a run
/// whose attempt waits on a request nobody answered (its validation children kept dying).
#[test]
fn a_retry_reports_a_run_that_waits_for_its_answer_again() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, None);
    for loss in 1..=piw_host::store::DEFAULT_MAX_CHILD_LOSSES {
        f.store
            .write(|w| w.submit(&i, &a, &json!(loss), None))
            .unwrap();
        let act = f.activate(&run_id);
        f.store
            .write(|w| w.child_lost(&act.claim, "validator crashed"))
            .unwrap();
    }
    let req = Request::new(
        "retry-1",
        RequestBody::RunRetry(payload::RunRetry {
            reason: Some("fixed".into()),
            by: Some("ana".into()),
            accept_source: false,
        }),
    )
    .with_run_id(&run_id);
    let body = f
        .store
        .write(|w| {
            apply_command(
                w,
                &HostState::new(Box::new(piw_host::ids::OsIds)),
                &req,
                None,
                None,
            )
        })
        .unwrap();
    assert_eq!(body["status"], json!("waiting"));
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Waiting);
}

/// A submission sent again (a client retrying its call) for a request that already took it
/// gets the original receipt and changes nothing; another result for that request is refused.
#[test]
fn a_submission_sent_again_gets_its_receipt_and_changes_nothing() {
    let mut f = Fixture::new();
    let (run_i, attempt_i, interaction) = f.waiting();
    let state = HostState::new(Box::new(piw_host::ids::OsIds));
    let submit = |id: &str, result: serde_json::Value| {
        Request::new(
            id,
            RequestBody::InteractionSubmit(payload::InteractionSubmit {
                interaction_id: interaction.clone(),
                result,
                refuse_repeat: false,
            }),
        )
        .with_run_id(&run_i)
        .with_node_id("a")
        .with_attempt_id(&attempt_i)
    };
    let first = f
        .store
        .write(|w| {
            apply_command(
                w,
                &state,
                &submit("s1", json!({"v": 1, "w": 2})),
                None,
                None,
            )
        })
        .unwrap();
    assert_eq!(first["repeated"], false, "{first}");
    let before = f.store.canonical_dump().unwrap();
    let again = f
        .store
        .write(|w| {
            apply_command(
                w,
                &state,
                &submit("s2", json!({"w": 2, "v": 1})),
                None,
                None,
            )
        })
        .unwrap();
    assert_eq!(again["repeated"], true, "{again}");
    assert_eq!(again["submission_id"], first["submission_id"]);
    assert_eq!(again["state"], "validating");
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "a repeat changed the database"
    );
    let err = f
        .store
        .write(|w| apply_command(w, &state, &submit("s3", json!({"v": 2})), None, None))
        .unwrap_err();
    assert_eq!(
        piw_host::engine::dispatch::rejection_for(&err).code,
        piw_host::protocol::RejectionCode::InvalidTransition,
        "{err:?}"
    );
    assert_eq!(f.store.canonical_dump().unwrap(), before);
}

/// A raw worker gets no more events stored than the budget allows (one wrote 202 MB
/// of progress in 32 s): its `worker.progress` and `worker.notify` messages are answered, the
/// latest update per key is kept, the excess is counted in `run.status` and not stored.
#[test]
fn a_raw_workers_progress_and_notify_events_are_bounded() {
    use piw_host::engine::children::apply_worker;
    use piw_host::ids::ClaimToken;
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let token = ClaimToken::generate(&mut piw_host::ids::OsIds);
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    state.claims.insert(run_id.clone(), act.claim.clone());
    state
        .children
        .insert(run_id.clone(), launched_child(&act, &token));
    let mut send = |f: &mut Fixture, id: &str, body: RequestBody| {
        let req = Request::new(id, body)
            .with_run_id(&run_id)
            .with_generation(act.claim.generation)
            .with_node_id("a")
            .with_attempt_id(&attempt);
        f.store
            .write(|w| apply_worker(w, &mut state, &req))
            .unwrap()
    };
    send(
        &mut f,
        "hello",
        RequestBody::WorkerHello(payload::WorkerHello {
            child_token: token.expose_secret().to_owned(),
            pid: 1,
            definition: None,
            mounted_sources: None,
            start_node: false,
        }),
    );
    let events = |f: &Fixture| f.store.events(&run_id, 0).unwrap().len();
    let before = events(&f);
    let mut kept = 0;
    for i in 0..500 {
        let body = send(
            &mut f,
            &format!("p-{i}"),
            RequestBody::WorkerProgress(payload::WorkerProgress {
                message: "progress:rows".into(),
                data: json!({ "type": "progress", "key": "rows", "data": { "completed": i } }),
            }),
        );
        if body["event_kept"] == json!(true) {
            kept += 1;
        }
    }
    for i in 0..300 {
        send(
            &mut f,
            &format!("n-{i}"),
            RequestBody::WorkerNotify(payload::WorkerNotify {
                content: json!({ "text": "x".repeat(1000) }),
            }),
        );
    }
    assert_eq!(kept, 100, "a burst of 100 at one instant");
    assert_eq!(events(&f), before + 100);
    let status = apply_read(
        &f.store,
        &HostState {
            reply_limit: 1 << 20,
            ..HostState::new(Box::new(piw_host::ids::OsIds))
        },
        f.store.now_ms(),
        &Request::new("st", RequestBody::RunStatus(Default::default())).with_run_id(&run_id),
    )
    .unwrap()
    .body;
    assert_eq!(status["events_dropped"], json!(400 + 300));
    assert_eq!(status["updates"][0]["data"], json!({ "completed": 499 }));
}

/// A client that sends a committed command again (a crash or a lost connection dropped its
/// reply) gets the command's receipt even when the batch carrying the repeat fails to commit:
/// the receipt is a read of an earlier commit, and an `internal` rejection would tell the
/// client that a command which took effect had failed (engine_sim seeds 2749 and 1773: a
/// cancel acknowledged as failed, and the run ended cancelled). A command new in that batch,
/// and its repeat within the same batch, still fail: nothing of theirs committed.
#[test]
fn a_command_sent_again_gets_its_receipt_even_when_its_batch_fails_to_commit() {
    use piw_host::driver::fault::FaultPlan;
    use piw_host::driver::outbox::Outbox;
    use piw_host::driver::store_thread::{turn, Job, StoreMsg};
    use piw_host::protocol::{Receipt, Rejection, RejectionCode};
    use std::sync::atomic::Ordering;
    use tokio::sync::oneshot;

    type Reply = oneshot::Receiver<Result<Receipt, Rejection>>;
    fn cancel(request_id: &str, run_id: &str) -> (StoreMsg, Reply) {
        let body = RequestBody::RunCancel(payload::RunCancel {
            reason: Some("test".into()),
        });
        let (reply, rx) = oneshot::channel();
        let job = Job {
            request: Request::new(request_id, body).with_run_id(run_id),
            start: None,
            accepted_source: None,
            start_refused: None,
            meta: None,
            reply,
        };
        (StoreMsg::Request(Box::new(job)), rx)
    }
    fn one_turn(f: &mut Fixture, state: &mut HostState, msgs: Vec<StoreMsg>) {
        let mut outbox = Outbox::default();
        turn(
            &mut f.store,
            state,
            &mut outbox,
            msgs,
            None,
            &FaultPlan::default(),
            &mut None,
        );
        outbox.flush(f.store.commits(), true);
    }

    let mut f = Fixture::new();
    let (cancelled, untouched) = (f.start(), f.start());
    // Nothing is scheduled: the test is about the batch alone.
    let mut state = HostState {
        shutting_down: true,
        ..HostState::new(Box::new(piw_host::ids::OsIds))
    };
    let (first, mut rx) = cancel("c-1", &cancelled);
    one_turn(&mut f, &mut state, vec![first]);
    let receipt = rx
        .try_recv()
        .expect("answered")
        .expect("the cancel commits");
    assert!(!receipt.replayed);
    assert_eq!(
        f.store.run(&cancelled).unwrap().status,
        RunStatus::Cancelled
    );

    // The reply was lost: the client sends the cancel again, in a batch that fails to commit.
    f.fail_next_commit.store(true, Ordering::SeqCst);
    let (again, mut rx_again) = cancel("c-1", &cancelled);
    let (new, rx_new) = cancel("c-2", &untouched);
    let (new_again, rx_new_again) = cancel("c-2", &untouched);
    one_turn(&mut f, &mut state, vec![again, new, new_again]);
    assert!(
        !f.fail_next_commit.load(Ordering::SeqCst),
        "the commit failed"
    );
    let replay = rx_again
        .try_recv()
        .expect("answered")
        .expect("the earlier commit's receipt");
    assert!(replay.replayed);
    assert_eq!(replay.body, receipt.body);
    assert_eq!(replay.revision, receipt.revision);
    for mut rx in [rx_new, rx_new_again] {
        let refused = rx.try_recv().expect("answered").unwrap_err();
        assert_eq!(refused.code, RejectionCode::Internal, "{refused:?}");
    }
    assert_eq!(f.store.run(&untouched).unwrap().status, RunStatus::Queued);
    f.assert_clean();
}

/// `run.list` pages through any number of runs: 2,100 runs whose records (long project
/// directories, large results) add up to several frames are each listed exactly once, every
/// reply fits a frame, and runs that start (newer, or with an older clock), end or change
/// status while the list is paged neither skip nor repeat one. Without the cursor a list
/// stopped at what one reply held (about 1,480 runs) and the rest were unreachable.
#[test]
fn run_list_pages_through_every_run_exactly_once_while_runs_start_and_end() {
    use piw_host::protocol::DEFAULT_MAX_FRAME_BYTES;
    use std::collections::BTreeMap;

    const RUNS: usize = 2_100;
    let mut f = Fixture::new();
    // In batches of 70, each batch's runs sharing a start time (a transaction's).
    let mut originals: Vec<String> = Vec::new();
    for batch in 0..RUNS / 70 {
        let ids = f
            .store
            .write(|w| {
                (0..70)
                    .map(|i| {
                        let mut run = common::new_run(Some("session-1"));
                        // Some records far larger than others.
                        if (batch + i) % 5 == 0 {
                            run.project_dir = format!("/p/{}", "d".repeat(4_000));
                        }
                        w.start_run(&run)
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap();
        originals.extend(ids);
        f.clock.advance(10);
    }
    // Ten completed runs with results near the payload limit.
    for _ in 0..10 {
        let (run_id, act, a) = f.running();
        f.store
            .write(|w| w.complete(&act.claim, &a, &json!({}), &json!("r".repeat(200_000))))
            .unwrap();
        originals.push(run_id);
    }
    let list = |f: &Fixture, payload: payload::RunList| {
        let req = Request::new("ls", RequestBody::RunList(payload));
        let body = apply_read(
            &f.store,
            &HostState {
                reply_limit: DEFAULT_MAX_FRAME_BYTES,
                ..HostState::new(Box::new(piw_host::ids::OsIds))
            },
            f.store.now_ms(),
            &req,
        )
        .expect("a list that fits")
        .body;
        let len = serde_json::to_vec(&body).unwrap().len();
        assert!(len < DEFAULT_MAX_FRAME_BYTES, "{len} bytes");
        body
    };
    for limit in [None, Some(payload::MAX_LIST_RUNS)] {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut cursor = None;
        let mut pages = 0;
        let mut started = Vec::new();
        loop {
            let body = list(
                &f,
                payload::RunList {
                    limit,
                    cursor: cursor.take(),
                    ..Default::default()
                },
            );
            pages += 1;
            let runs = body["runs"].as_array().unwrap();
            assert!(!runs.is_empty());
            assert!(runs.len() <= limit.unwrap_or(payload::DEFAULT_LIST_RUNS) as usize);
            for run in runs {
                *seen
                    .entry(run["run_id"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
            if body["more"] == json!(false) {
                assert_eq!(body["next_cursor"], json!(null));
                break;
            }
            let next: payload::RunListCursor =
                serde_json::from_value(body["next_cursor"].clone()).unwrap();
            cursor = Some(next);
            // Between pages: a newer run, one started with the clock set back (it lands among
            // the runs not listed yet), and a run listed or not yet listed ending.
            f.clock.advance(5);
            started.push(f.start());
            let now = f.store.now_ms();
            // Older than every run listed so far (the oldest share `T0`): it sorts after them
            // all, among the runs not listed yet, whatever the random part of its id.
            f.clock.set(common::T0 - 1);
            started.push(f.start());
            f.clock.set(now);
            for victim in [&originals[pages * 7], &originals[RUNS - pages * 11]] {
                if !f.store.run(victim).unwrap().status.is_terminal() {
                    f.store
                        .write(|w| w.cancel(victim, Fence::Unclaimed, "by test"))
                        .unwrap();
                }
            }
        }
        assert!(pages > 1, "{pages} pages");
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "listed more than once: {twice:?}");
        let missing: Vec<_> = originals
            .iter()
            .filter(|id| !seen.contains_key(*id))
            .collect();
        assert!(missing.is_empty(), "{} runs never listed", missing.len());
        // A run started with the clock set back lands after the cursor: listed once.
        for id in started.iter().skip(1).step_by(2) {
            let run = f.store.run(id).unwrap();
            assert_eq!(
                seen.get(id),
                Some(&1),
                "{id} at {} of {started:?}",
                run.created_at
            );
        }
        let unfinished = list(
            &f,
            payload::RunList {
                unfinished: Some(true),
                limit: Some(1),
                ..Default::default()
            },
        );
        assert_eq!(unfinished["more"], json!(true));
    }

    // A cursor no host made is refused as the request's payload, not read as a place.
    let bad = Request::decode(
        &serde_json::to_vec(&json!({"schema": "piw.protocol.v1", "request_id": "x",
            "kind": "run.list", "payload": {"cursor": "page-2"}}))
        .unwrap(),
        &piw_host::protocol::Limits::default(),
    );
    assert!(bad.is_err(), "{bad:?}");
}

/// `run.list`'s `run_id_prefix` lists exactly the runs whose id begins with it, with the
/// other filters: how a client without the database (the Pi extension) resolves the run id
/// prefix a person types, as the CLI does. `%` and `_` are ordinary characters.
#[test]
fn run_list_filters_by_run_id_prefix() {
    let mut f = Fixture::new();
    let mut ids: Vec<(String, bool)> = Vec::new();
    for i in 0..60 {
        let mine = i % 3 != 0;
        let id = f
            .store
            .write(|w| w.start_run(&common::new_run(Some(if mine { "s-1" } else { "s-2" }))))
            .unwrap();
        ids.push((id, mine));
    }
    let list = |payload: payload::RunList| {
        let req = Request::new("ls", RequestBody::RunList(payload));
        let state = HostState {
            reply_limit: piw_host::protocol::DEFAULT_MAX_FRAME_BYTES,
            ..HostState::new(Box::new(piw_host::ids::OsIds))
        };
        let body = apply_read(&f.store, &state, f.store.now_ms(), &req)
            .unwrap()
            .body;
        let mut got: Vec<String> = body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect();
        got.sort();
        got
    };
    let expected = |prefix: &str, session_only: bool| {
        let mut want: Vec<String> = ids
            .iter()
            .filter(|(id, mine)| id.starts_with(prefix) && (*mine || !session_only))
            .map(|(id, _)| id.clone())
            .collect();
        want.sort();
        want
    };
    let (one, _) = &ids[17];
    // Ids begin with their time: every length, from one all runs share to the whole id.
    for len in "run-".len() + 1..=one.len() {
        let prefix = &one[..len];
        let all = list(payload::RunList {
            run_id_prefix: Some(prefix.to_owned()),
            ..Default::default()
        });
        assert_eq!(all, expected(prefix, false), "prefix {prefix}");
        assert!(all.contains(one));
        let session = list(payload::RunList {
            run_id_prefix: Some(prefix.to_owned()),
            session_id: Some("s-1".into()),
            ..Default::default()
        });
        assert_eq!(session, expected(prefix, true), "prefix {prefix} in s-1");
    }
    for nothing in ["run-%", "run-_", "zzz"] {
        let none = list(payload::RunList {
            run_id_prefix: Some(nothing.into()),
            ..Default::default()
        });
        assert!(none.is_empty(), "{nothing}: {none:?}");
    }
}

/// The host's record of a child just launched for `act`'s claim, before its hello.
fn launched_child(
    act: &piw_host::store::Activation,
    token: &piw_host::ids::ClaimToken,
) -> piw_host::engine::children::ChildEntry {
    piw_host::engine::children::ChildEntry {
        generation: act.claim.generation,
        child_epoch: 0,
        launch: 0,
        token_hash: token.hash(),
        hello: false,
        launched_at: common::T0,
        judging_since: None,
        stopping: false,
        released_at: None,
        mode: act.mode,
        resume: act.resume.clone(),
        from_standby: false,
        stop_reason: None,
        disconnected_at: None,
        pid: None,
    }
}

/// The engine's turn hands its effects to the driver in the order the host's guarantees need:
/// a batch's reads are answered (and may leave) before its commands commit; a launch goes to
/// the supervisor inside the transaction, before the commit; the commit's events go out
/// before its receipts (a client that subscribes after a receipt misses no event before it).
/// The host's first prune asks for the sweep of leftover run logs, once.
#[test]
fn a_turn_hands_its_effects_to_the_driver_in_order() {
    use piw_host::engine::handlers::run::PreparedStart;
    use piw_host::engine::turn::{turn, Effect, Effects, Input, Job};
    use piw_host::store::StoreError;

    #[derive(Default)]
    struct Recorder(Vec<String>);
    impl Effects<&'static str> for Recorder {
        fn apply(&mut self, effect: Effect<&'static str>) {
            self.0.push(match effect {
                Effect::Reply { to, result } => match result {
                    Ok(receipt) => format!("reply {to} {}", receipt.body),
                    Err(rejection) => format!("reply {to} {rejection:?}"),
                },
                Effect::Event(event) => format!("event {}", event.kind),
                Effect::ReadsAnswered { .. } => "reads answered".into(),
                Effect::Child(_) => "child command".into(),
                Effect::EndSupervision => "end supervision".into(),
                Effect::SweepRunLogs { logs } => format!("sweep {}", logs.display()),
            });
        }
        fn publishing(&self) -> bool {
            true
        }
        fn before_commit(&mut self, kinds: &[&str]) -> Result<(), StoreError> {
            self.0.push(format!("before commit {kinds:?}"));
            Ok(())
        }
        fn after_commit(&mut self, kinds: &[&str]) {
            self.0.push(format!("after commit {kinds:?}"));
        }
    }
    fn job(
        request: Request,
        start: Option<PreparedStart>,
        reply: &'static str,
    ) -> Input<&'static str> {
        Input::Request(Box::new(Job {
            request,
            start,
            accepted_source: None,
            start_refused: None,
            meta: None,
            reply,
        }))
    }

    let mut f = Fixture::new();
    let mut state = host_state_with_runtime(&mut f, false);
    let start = RequestBody::RunStart(payload::RunStart {
        workflow_file: "/tmp/demo.workflow.mjs".into(),
        input: json!({"n": 1}),
        session_id: None,
        execution_mode: None,
        project_dir: Some("/tmp".into()),
    });
    let prepared = PreparedStart {
        new_run: common::new_run(None),
    };
    let inputs = vec![
        job(Request::new("start-1", start), Some(prepared), "start"),
        job(
            Request::new("status-1", RequestBody::HostStatus),
            None,
            "status",
        ),
    ];
    let mut recorder = Recorder::default();
    let now = f.store.now_ms();
    turn(&mut f.store, &mut state, now, inputs, None, &mut recorder);
    let log = recorder.0;
    let at = |prefix: &str| {
        log.iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {log:#?}"))
    };
    assert!(
        log[at("reply status")].contains(r#""active_children":0"#),
        "{log:#?}"
    );
    assert!(at("reply status") < at("reads answered"), "{log:#?}");
    assert!(at("reads answered") < at("child command"), "{log:#?}");
    assert!(at("child command") < at("before commit"), "{log:#?}");
    assert!(at("before commit") < at("after commit"), "{log:#?}");
    assert!(at("after commit") < at("event"), "{log:#?}");
    assert!(at("event") < at("reply start"), "{log:#?}");
    assert!(
        log[at("reply start")].contains(r#""status":"queued""#),
        "{log:#?}"
    );
    assert_eq!(
        f.store.run(&log_run_id(&log)).unwrap().status,
        RunStatus::Running
    );

    // The host's first prune asks the driver to sweep the log directories of runs that no
    // longer exist (the driver does it once the turn has returned); a later prune does not
    // ask again.
    let logs = std::path::PathBuf::from("/nonexistent/piw-test-logs");
    state.child_config.output_logs = Some(logs.clone());
    for round in 0..2 {
        let prune = Request::new(
            format!("prune-{round}"),
            RequestBody::RunPrune(payload::RunPrune::default()),
        );
        let mut recorder = Recorder::default();
        let now = f.store.now_ms();
        turn(
            &mut f.store,
            &mut state,
            now,
            vec![job(prune, None, "prune")],
            None,
            &mut recorder,
        );
        let sweeps: Vec<&String> = recorder
            .0
            .iter()
            .filter(|l| l.starts_with("sweep"))
            .collect();
        if round == 0 {
            assert_eq!(
                sweeps,
                [&format!("sweep {}", logs.display())],
                "{:#?}",
                recorder.0
            );
        } else {
            assert!(sweeps.is_empty(), "{:#?}", recorder.0);
        }
    }

    // The host's own retention pass asks the same way, once, at its first prune.
    let mut state = host_state_with_runtime(&mut f, false);
    state.child_config.output_logs = Some(logs.clone());
    state.retention = piw_host::engine::retention::Retention::from_settings(Some(1), None);
    for round in 0..2 {
        state.retention_due_at = Some(0);
        let mut recorder = Recorder::default();
        let now = f.store.now_ms();
        turn(
            &mut f.store,
            &mut state,
            now,
            Vec::new(),
            Some(0),
            &mut recorder,
        );
        assert_ne!(state.retention_due_at, Some(0), "the pass ran");
        let sweeps = recorder.0.iter().filter(|l| l.starts_with("sweep")).count();
        assert_eq!(sweeps, usize::from(round == 0), "{:#?}", recorder.0);
    }
}

/// The run id in a recorded `run.start` receipt.
fn log_run_id(log: &[String]) -> String {
    let reply = log
        .iter()
        .find(|l| l.starts_with("reply start"))
        .expect("a start reply");
    let body: serde_json::Value =
        serde_json::from_str(reply.trim_start_matches("reply start ")).expect("a JSON body");
    body["run_id"].as_str().expect("a run id").to_owned()
}

/// `value.get` answers a piece of a large value that fits a frame, whatever was asked for, and
/// the pieces put together are the value.
#[test]
fn value_get_pieces_fit_a_frame_and_add_up_to_the_value() {
    use piw_host::protocol::value::{ValueReader, ValueRef};
    use piw_host::protocol::{canonical_json, encode_frame, Limits, ServerFrame};
    let mut f = Fixture::new();
    let (run_id, act, _) = f.running();
    let value = json!({ "blob": "v".repeat(3_000_000) });
    let text = canonical_json(&value);
    let reference = ValueRef::for_canonical(&text);
    let mut offset = 0usize;
    while offset < text.len() {
        let end = (offset + 100_000).min(text.len());
        f.store
            .write(|w| {
                w.put_value_chunk(
                    &act.claim,
                    &reference.sha256,
                    reference.bytes,
                    offset as u64,
                    &text.as_bytes()[offset..end],
                )
            })
            .unwrap();
        offset = end;
    }
    let limits = Limits::default();
    let mut reader = ValueReader::new(reference.clone());
    let mut pieces = 0;
    while let Some(offset) = reader.next_offset() {
        let req = Request::new(
            "req-get",
            RequestBody::ValueGet(payload::ValueGet {
                sha256: reference.sha256.clone(),
                offset,
                // More than a frame holds: the host sends what fits.
                max_bytes: Some(u64::MAX),
            }),
        )
        .with_run_id(&run_id);
        let state = HostState {
            reply_limit: limits.max_frame_bytes,
            ..HostState::new(Box::new(piw_host::ids::OsIds))
        };
        let receipt = apply_read(&f.store, &state, f.store.now_ms(), &req).unwrap();
        let encoded = encode_frame(&ServerFrame::receipt("req-get", receipt.clone()), &limits);
        assert!(
            encoded.is_ok(),
            "a piece does not fit a frame: {:?}",
            encoded.err()
        );
        reader.accept(&receipt.body).unwrap();
        pieces += 1;
    }
    assert_eq!(reader.finish().unwrap(), value);
    assert!(pieces >= 6, "{pieces} pieces of 3 MB");
}

/// Bridge settings of a host that runs Pi (a made-up command: nothing is spawned) with the
/// mock model, its bridge locks in `f`'s installation.
fn bridge_settings(f: &Fixture) -> piw_host::engine::bridges::BridgeSettings {
    use piw_host::engine::bridges::{BridgeSettings, PiCommand};
    BridgeSettings {
        pi: Ok(PiCommand {
            program: "/bin/node".into(),
            prefix: vec!["/pi/cli.js".into()],
            describe: "test".into(),
        }),
        extension: "/pkg/extension/bridge.js".into(),
        preflight: None,
        provider: Some("mock".into()),
        model: Some("mock-model".into()),
        pi_args: Vec::new(),
        pi_default: None,
        home: f.dir.path().to_path_buf(),
        handshake_timeout: std::time::Duration::from_secs(60),
    }
}

/// Bridges, on a real store: a detached run waiting on an agent step gets one
/// bridge, counted as a child; while it lives no second one is ordered; when it is killed the
/// step's attempt fails with why (the run routes), and no new bridge starts for that step.
#[test]
fn a_detached_step_gets_one_bridge_and_a_killed_bridge_fails_its_attempt() {
    use piw_host::driver::supervisor::SupervisorCmd;
    use piw_host::engine::bridges::{self, BridgeReport};
    use piw_host::engine::children::{on_child_reports, ChildReport};
    use piw_host::store::{ChildExitRecord, ExecutionMode, NewRun};

    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        definition: Some(json!({"name": "w", "start": "a",
            "nodes": {"a": {"kind": "agent"}}, "edges": []})),
        execution_mode: ExecutionMode::Detached,
        ..common::new_run(None)
    });
    let act = f.activate(&run_id);
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let interaction = f.ask(&act.claim, &attempt, None);
    let mut state = host_state_with_runtime(&mut f, false);
    state.child_config.bridges = Some(bridge_settings(&f));
    let bridge_launches = |state: &mut HostState| {
        state
            .child_commands
            .drain(..)
            .filter_map(|cmd| match cmd {
                SupervisorCmd::LaunchBridge {
                    run_id,
                    launch,
                    spec,
                    ..
                } => Some((run_id, launch, spec)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };

    let now = f.store.now_ms();
    bridges::reconcile(&mut f.store, &mut state, now);
    let launched = bridge_launches(&mut state);
    assert_eq!(launched.len(), 1);
    let (launched_run, launch, spec) = &launched[0];
    assert_eq!(launched_run, &run_id);
    assert_eq!(spec.cwd, std::path::PathBuf::from("/tmp"));
    assert!(spec
        .env
        .iter()
        .any(|(k, v)| k == "PIW_BRIDGE_RUN" && v.to_str() == Some(run_id.as_str())));
    assert_eq!(state.live_children(), 1, "the bridge holds a child slot");
    let now = f.store.now_ms();
    bridges::reconcile(&mut f.store, &mut state, now);
    assert!(bridge_launches(&mut state).is_empty(), "one bridge per run");

    let now = f.store.now_ms();
    on_child_reports(
        &mut f.store,
        &mut state,
        now,
        vec![ChildReport::Bridge(BridgeReport::Exited {
            run_id: run_id.clone(),
            launch: *launch,
            exit: ChildExitRecord {
                signal: Some(9),
                reason: "exited by signal 9".into(),
                ..Default::default()
            },
        })],
    );
    assert_eq!(state.live_children(), 0);
    let now = f.store.now_ms();
    bridges::reconcile(&mut f.store, &mut state, now);
    assert!(
        bridge_launches(&mut state).is_empty(),
        "no new bridge for a lost step"
    );
    let interactions = f.store.interactions(Some(&run_id), None).unwrap();
    assert_eq!(interactions[0].interaction_id, interaction);
    assert_eq!(interactions[0].status, "cancelled");
    let attempts = f.store.attempts(&run_id).unwrap();
    assert_eq!(attempts[0].status, "failed");
    assert_eq!(
        attempts[0].error.as_deref(),
        Some("the Pi bridge was killed by signal 9")
    );
}

/// A killed bridge's step whose failing does not commit (a full disk) is not left open with no
/// bridge and nothing to look at it again: the loss is kept, a retry is due, and the step fails
/// then (found by the simulation, seed 27).
#[test]
fn a_lost_bridges_step_whose_failing_did_not_commit_fails_at_the_retry() {
    use piw_host::engine::bridges::{self, BridgeReport};
    use piw_host::engine::children::{on_child_reports, ChildReport};
    use piw_host::store::{ChildExitRecord, ExecutionMode, NewRun};
    use std::sync::atomic::Ordering;

    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        definition: Some(json!({"name": "w", "start": "a",
            "nodes": {"a": {"kind": "agent"}}, "edges": []})),
        execution_mode: ExecutionMode::Detached,
        ..common::new_run(None)
    });
    let act = f.activate(&run_id);
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let interaction = f.ask(&act.claim, &attempt, None);
    let mut state = host_state_with_runtime(&mut f, false);
    state.child_config.bridges = Some(bridge_settings(&f));
    let now = f.store.now_ms();
    bridges::reconcile(&mut f.store, &mut state, now);
    let launch = state.bridges.live[&run_id].launch;
    on_child_reports(
        &mut f.store,
        &mut state,
        now,
        vec![ChildReport::Bridge(BridgeReport::Exited {
            run_id: run_id.clone(),
            launch,
            exit: ChildExitRecord {
                signal: Some(9),
                reason: "exited by signal 9".into(),
                ..Default::default()
            },
        })],
    );
    f.fail_next_commit.store(true, Ordering::SeqCst);
    bridges::reconcile(&mut f.store, &mut state, now);
    let status = |f: &Fixture| {
        f.store.interactions(Some(&run_id), None).unwrap()[0]
            .status
            .clone()
    };
    assert_eq!(status(&f), "pending", "the failing did not commit");
    let retry = bridges::next_deadline(&state).expect("a retry is due");
    bridges::reconcile(&mut f.store, &mut state, retry);
    let interactions = f.store.interactions(Some(&run_id), None).unwrap();
    assert_eq!(interactions[0].interaction_id, interaction);
    assert_eq!(interactions[0].status, "cancelled");
    assert_eq!(
        f.store.attempts(&run_id).unwrap()[0].error.as_deref(),
        Some("the Pi bridge was killed by signal 9")
    );
    assert_eq!(
        bridges::next_deadline(&state),
        None,
        "nothing left to retry"
    );
}

/// `run.detach` of an interactive run whose agent step is already open hands that step to a
/// bridge in the same turn. The bridges look again only after requests that can change a
/// detached step; `run.detach` was not among them, so such a run stayed `waiting` with no Pi
/// serving it until something else happened (a deadline, a host restart).
#[test]
fn detaching_a_run_whose_step_is_open_launches_its_bridge_at_once() {
    use piw_host::driver::fault::FaultPlan;
    use piw_host::driver::outbox::Outbox;
    use piw_host::driver::store_thread::{turn, Job, StoreMsg};
    use piw_host::driver::supervisor::SupervisorCmd;
    use piw_host::store::NewRun;

    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        definition: Some(json!({"name": "w", "start": "a",
            "nodes": {"a": {"kind": "agent"}}, "edges": []})),
        ..common::new_run(Some("session-1"))
    });
    let act = f.activate(&run_id);
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    f.ask(&act.claim, &attempt, None);
    let mut state = host_state_with_runtime(&mut f, false);
    state.child_config.bridges = Some(bridge_settings(&f));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut supervisor = Some(tx);
    let mut one_turn = |f: &mut Fixture, state: &mut HostState, msgs: Vec<StoreMsg>| {
        let mut outbox = Outbox::default();
        turn(
            &mut f.store,
            state,
            &mut outbox,
            msgs,
            None,
            &FaultPlan::default(),
            &mut supervisor,
        );
        outbox.flush(f.store.commits(), true);
    };
    let mut bridges_launched = || {
        let mut runs = Vec::new();
        while let Ok(cmd) = rx.try_recv() {
            if let SupervisorCmd::LaunchBridge { run_id, .. } = cmd {
                runs.push(run_id);
            }
        }
        runs
    };

    // The session presents the step: the host has looked and found nothing to serve.
    one_turn(&mut f, &mut state, Vec::new());
    assert!(bridges_launched().is_empty(), "an interactive run's step");
    assert!(state.bridges.up_to_date);

    let (reply, mut answer) = tokio::sync::oneshot::channel();
    let detach = Job {
        request: Request::new("d-1", RequestBody::RunDetach).with_run_id(&run_id),
        start: None,
        accepted_source: None,
        start_refused: None,
        meta: None,
        reply,
    };
    one_turn(
        &mut f,
        &mut state,
        vec![StoreMsg::Request(Box::new(detach))],
    );
    let receipt = answer.try_recv().expect("answered").expect("detached");
    assert_eq!(receipt.body["changed"], json!(true));
    assert_eq!(
        bridges_launched(),
        vec![run_id.clone()],
        "the open step goes to a bridge in the turn that detached its run"
    );
    f.assert_clean();
}

/// A finished run whose child is still exiting (its exit not yet recorded) is not pruned: its
/// child's record and log directory are still being written. Once the exit is recorded, the
/// next prune takes it. `more` says runs are left meanwhile.
#[test]
fn a_prune_skips_a_finished_run_whose_child_is_still_exiting() {
    use piw_host::engine::retention::prune_request;
    use piw_host::protocol::payload::RunPrune;

    let mut f = Fixture::new();
    let (exiting, act, attempt) = f.running();
    f.store
        .write(|w| w.complete(&act.claim, &attempt, &json!(null), &json!("done")))
        .unwrap();
    let (gone, act, attempt) = f.running();
    f.store
        .write(|w| w.complete(&act.claim, &attempt, &json!(null), &json!("done")))
        .unwrap();
    let mut state = host_state_with_runtime(&mut f, false);
    let token = piw_host::ids::ClaimToken::generate(&mut piw_host::ids::OsIds);
    state
        .children
        .insert(exiting.clone(), launched_child(&act, &token));

    let prune = RunPrune::default();
    let now = f.store.now_ms();
    let first = prune_request(&mut f.store, &mut state, now, &prune)
        .unwrap()
        .receipt;
    assert_eq!(first.body["removed"], json!([gone]), "{:?}", first.body);
    assert_eq!(f.store.run(&exiting).unwrap().status, RunStatus::Completed);

    // Its exit is recorded: the next prune takes it.
    state.children.remove(&exiting);
    let now = f.store.now_ms();
    let second = prune_request(&mut f.store, &mut state, now, &prune)
        .unwrap()
        .receipt;
    assert_eq!(
        second.body["removed"],
        json!([exiting]),
        "{:?}",
        second.body
    );
    assert_eq!(second.body["more"], json!(false));
    f.assert_clean();
}

/// `run.list` with `limit: 0` is refused (`invalid_input`): a page of no runs has no cursor to
/// go on from, and used to answer `more: false` with every run still unlisted.
#[test]
fn run_list_with_limit_zero_is_refused() {
    let mut f = Fixture::new();
    for _ in 0..30 {
        f.start();
    }
    let list = |limit: u32| {
        let payload: payload::RunList = serde_json::from_value(json!({ "limit": limit })).unwrap();
        apply_read(
            &f.store,
            &HostState {
                reply_limit: piw_host::protocol::DEFAULT_MAX_FRAME_BYTES,
                ..HostState::new(Box::new(piw_host::ids::OsIds))
            },
            f.store.now_ms(),
            &Request::new("ls", RequestBody::RunList(payload)),
        )
    };
    let refused = list(0).expect_err("limit 0 is refused");
    assert!(
        matches!(refused, piw_host::store::StoreError::InvalidInput(_)),
        "{refused:?}"
    );
    let one = list(1).expect("limit 1 answers").body;
    assert_eq!(one["runs"].as_array().unwrap().len(), 1);
    assert_eq!(one["more"], json!(true), "{one}");
}

/// A `run.list` or dry `run.prune` cursor shaped like one the host makes but not made by this
/// database's host (its place edited, or signed with another key, another database's among
/// them) is refused as `invalid_input`; a genuine one pages on, also after the store is
/// opened again (a host restart).
#[test]
fn a_cursor_shaped_like_the_hosts_but_not_made_by_it_is_refused() {
    use piw_host::engine::retention::prune_request;
    use piw_host::protocol::payload::{CursorKey, RunListCursor, RunPrune};
    use piw_host::store::{Store, StoreError};

    let mut f = Fixture::new();
    let mut runs = Vec::new();
    for _ in 0..5 {
        let (run_id, act, attempt) = f.running();
        f.store
            .write(|w| w.complete(&act.claim, &attempt, &json!(null), &json!("done")))
            .unwrap();
        runs.push(run_id);
        f.clock.advance(10);
    }
    let list = |store: &Store, cursor: Option<RunListCursor>| {
        let req = Request::new(
            "ls",
            RequestBody::RunList(payload::RunList {
                limit: Some(2),
                cursor,
                ..Default::default()
            }),
        );
        apply_read(
            store,
            &HostState::new(Box::new(piw_host::ids::OsIds)),
            store.now_ms(),
            &req,
        )
        .map(|r| r.body)
    };
    let cursor_of = |body: &serde_json::Value| {
        RunListCursor::decode(body["next_cursor"].as_str().expect("a next_cursor"))
            .expect("a cursor's shape")
    };
    let refused = |what: &str, result: Result<serde_json::Value, StoreError>| match result {
        Err(StoreError::InvalidInput(message)) => {
            assert!(message.contains("not handed out"), "{what}: {message}")
        }
        other => panic!("{what}: {other:?}"),
    };

    let first = list(&f.store, None).unwrap();
    let genuine = cursor_of(&first);

    // Its place edited, the MAC kept: another time, and another run's id that exists.
    let text = genuine.encode();
    let (head, _) = text.rsplit_once(&genuine.key.run_id).unwrap();
    let moved_run = RunListCursor::decode(&format!("{head}{}", runs[0])).unwrap();
    refused("another run", list(&f.store, Some(moved_run)));
    let time = genuine.key.created_at.to_string();
    let moved_time = RunListCursor::decode(&text.replacen(
        &format!(".{time}."),
        &format!(".{}.", genuine.key.created_at - 10),
        1,
    ))
    .unwrap();
    refused("another time", list(&f.store, Some(moved_time)));
    // The same place signed with another key, and a cursor of another database.
    let foreign = RunListCursor::sign(&CursorKey([0x5a; 32]), genuine.key.clone());
    refused("another key", list(&f.store, Some(foreign)));
    let mut other = Fixture::new();
    for _ in 0..3 {
        other.start();
    }
    let other_cursor = cursor_of(&list(&other.store, None).unwrap());
    refused("another database", list(&f.store, Some(other_cursor)));

    // The genuine cursor pages on, also from a store opened again (the key is the database's).
    let mut seen: Vec<String> = first["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect();
    let reopened = Store::open(f.store.path(), f.store.config().clone()).unwrap();
    let mut cursor = Some(genuine);
    while let Some(c) = cursor.take() {
        let body = list(&reopened, Some(c)).unwrap();
        seen.extend(
            body["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["run_id"].as_str().unwrap().to_owned()),
        );
        if body["more"] == json!(true) {
            cursor = Some(cursor_of(&body));
        }
    }
    let mut newest_first = runs.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    // A dry prune's cursor is checked the same way.
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    let dry = |cursor| RunPrune {
        dry_run: Some(true),
        limit: Some(2),
        cursor,
        ..Default::default()
    };
    let now = f.store.now_ms();
    let page = prune_request(&mut f.store, &mut state, now, &dry(None))
        .unwrap()
        .receipt;
    let next = cursor_of(&page.body);
    let forged = RunListCursor::sign(&CursorKey([0x5a; 32]), next.key.clone());
    refused(
        "a prune's cursor with another key",
        prune_request(&mut f.store, &mut state, now, &dry(Some(forged))).map(|r| r.receipt.body),
    );
    let now = f.store.now_ms();
    let more = prune_request(&mut f.store, &mut state, now, &dry(Some(next)))
        .unwrap()
        .receipt;
    assert_eq!(
        more.body["run_ids"],
        json!([runs[2], runs[3]]),
        "{}",
        more.body
    );
    assert_eq!(
        f.store.list_runs(None, 10).unwrap().len(),
        5,
        "a dry run removes nothing"
    );
}

/// `interaction.value_put` then `interaction.submit` of its reference: a client's submission
/// as large as a node output (here 3 MB, far over the 256 KiB a request's payload carries).
/// The upload is bound to a pending request of the run and node it names: another run's, or
/// a closed one, is refused and changes nothing. The validation child reads the whole value,
/// the accepted output is stored like any large output. An upload never submitted is no
/// finding while its request is pending (a client may still be sending it), and once the
/// request closes it is `value_partial`, which `repair` removes.
#[test]
fn a_client_uploads_a_large_submission_for_its_open_interaction() {
    use piw_host::protocol::canonical_json;
    use piw_host::protocol::value::{chunk_to_hex, ValueRef, VALUE_PUT_CHUNK_BYTES};
    use piw_host::protocol::RejectionCode;
    use piw_host::store::{AttemptOutcome, ChildMode, TransitionRequest};

    let mut f = Fixture::new();
    let (other, _, _) = f.running();
    let (run_i, attempt_i, interaction) = f.waiting();
    let state = HostState::new(Box::new(piw_host::ids::OsIds));
    let value = json!({ "blob": "v".repeat(3_000_000) });
    let text = canonical_json(&value);
    let r = ValueRef::for_canonical(&text);
    let put = |id: &str, run: &str, interaction: &str, attempt: &str, at: usize| {
        let end = (at + VALUE_PUT_CHUNK_BYTES).min(text.len());
        Request::new(
            id,
            RequestBody::InteractionValuePut(payload::InteractionValuePut {
                interaction_id: interaction.to_owned(),
                sha256: r.sha256.clone(),
                bytes: r.bytes,
                offset: at as u64,
                data: chunk_to_hex(&text.as_bytes()[at..end]),
            }),
        )
        .with_run_id(run)
        .with_node_id("a")
        .with_attempt_id(attempt)
    };
    let refused = |f: &mut Fixture, req: Request, want: &[RejectionCode]| {
        let before = f.store.canonical_dump().unwrap();
        let err = f
            .store
            .write(|w| apply_command(w, &state, &req, None, None))
            .expect_err(&req.request_id);
        let code = piw_host::engine::dispatch::rejection_for(&err).code;
        assert!(want.contains(&code), "{}: {err:?}", req.request_id);
        assert_eq!(
            f.store.canonical_dump().unwrap(),
            before,
            "{}",
            req.request_id
        );
    };
    // Another run's interaction.
    refused(
        &mut f,
        put("x1", &other, &interaction, &attempt_i, 0),
        &[RejectionCode::NotFound],
    );
    // The whole value, a chunk at a time, as the client sends it.
    let mut at = 0usize;
    let mut n = 0;
    loop {
        let body = f
            .store
            .write(|w| {
                apply_command(
                    w,
                    &state,
                    &put(&format!("p{n}"), &run_i, &interaction, &attempt_i, at),
                    None,
                    None,
                )
            })
            .unwrap();
        n += 1;
        if body["complete"] == true {
            break;
        }
        at = body["received"].as_u64().unwrap() as usize;
    }
    assert!(n > 20, "{n} chunks");
    // A reference to a value the run does not hold, and user data shaped like a reference
    // (not wrapped as a literal), are refused.
    let other_value = ValueRef::for_canonical("\"not uploaded\"");
    for (k, result) in [other_value.to_json(), json!({"$piw": "other"})]
        .into_iter()
        .enumerate()
    {
        refused(
            &mut f,
            Request::new(
                format!("bad{k}"),
                RequestBody::InteractionSubmit(payload::InteractionSubmit {
                    interaction_id: interaction.clone(),
                    result,
                    refuse_repeat: false,
                }),
            )
            .with_run_id(&run_i)
            .with_node_id("a")
            .with_attempt_id(&attempt_i),
            &[RejectionCode::Malformed],
        );
    }
    // Its reference is the submission's result (a payload of a few hundred bytes).
    let submit = Request::new(
        "s1",
        RequestBody::InteractionSubmit(payload::InteractionSubmit {
            interaction_id: interaction.clone(),
            result: r.to_json(),
            refuse_repeat: false,
        }),
    )
    .with_run_id(&run_i)
    .with_node_id("a")
    .with_attempt_id(&attempt_i);
    let receipt = f
        .store
        .write(|w| apply_command(w, &state, &submit, None, None))
        .unwrap();
    let submission = receipt["submission_id"].as_str().unwrap().to_owned();
    // The request is being judged: no more uploads for it.
    refused(
        &mut f,
        put("x2", &run_i, &interaction, &attempt_i, 0),
        &[RejectionCode::InvalidTransition],
    );
    // The validation child gets the reference and reads the whole value.
    let judge = f.activate(&run_i);
    assert_eq!(judge.mode, ChildMode::Validate);
    let stored = f
        .store
        .write(|w| w.submission_payload(&submission))
        .unwrap();
    assert_eq!(stored, r.to_json());
    let read = f.store.read_value(&run_i, &r.sha256).unwrap();
    let judged: serde_json::Value = serde_json::from_slice(&read).unwrap();
    assert_eq!(judged["blob"].as_str().unwrap().len(), 3_000_000);
    f.store
        .write(|w| w.settle(&judge.claim, &submission, Ok(())))
        .unwrap();
    // The accepted output is the node's output: the child sends the same reference (its
    // upload finds the value whole).
    let asked = f
        .store
        .write(|w| w.put_value_chunk(&judge.claim, &r.sha256, r.bytes, 0, &[]))
        .unwrap();
    assert!(asked.complete);
    f.store
        .write(|w| {
            w.transition(
                &judge.claim,
                &TransitionRequest {
                    attempt_id: attempt_i.clone(),
                    outcome: AttemptOutcome::Succeeded {
                        output: r.to_json(),
                    },
                    next_node: "b".into(),
                    next_deadline_at: None,
                },
            )
        })
        .unwrap();
    let output = f
        .store
        .attempts(&run_i)
        .unwrap()
        .into_iter()
        .find(|a| a.attempt_id == attempt_i)
        .and_then(|a| a.output)
        .unwrap();
    assert_eq!(output, r.to_json());
    assert_eq!(
        f.store.read_value(&run_i, &r.sha256).unwrap(),
        text.as_bytes()
    );
    // Closed now: refused.
    refused(
        &mut f,
        put("x3", &run_i, &interaction, &attempt_i, 0),
        &[RejectionCode::InvalidTransition],
    );
    f.assert_clean();

    // An upload never submitted: half of another value for another run's request.
    let (run_o, attempt_o, orphan_i) = f.waiting();
    let orphan = json!({ "blob": "o".repeat(1_000_000) });
    let orphan_text = canonical_json(&orphan);
    let o = ValueRef::for_canonical(&orphan_text);
    for (k, at) in [0usize, VALUE_PUT_CHUNK_BYTES].into_iter().enumerate() {
        let req = Request::new(
            format!("o{k}"),
            RequestBody::InteractionValuePut(payload::InteractionValuePut {
                interaction_id: orphan_i.clone(),
                sha256: o.sha256.clone(),
                bytes: o.bytes,
                offset: at as u64,
                data: chunk_to_hex(&orphan_text.as_bytes()[at..at + VALUE_PUT_CHUNK_BYTES]),
            }),
        )
        .with_run_id(&run_o)
        .with_node_id("a")
        .with_attempt_id(&attempt_o);
        f.store
            .write(|w| apply_command(w, &state, &req, None, None))
            .unwrap();
    }
    // Still pending (its client may go on): no finding, even long after (no claim is held).
    f.clock.advance(10 * common::LEASE_MS);
    f.assert_clean();
    // The request closes without it (the session gave up): the chunks are abandoned.
    f.store
        .write(|w| w.fail_interaction(&orphan_i, &attempt_o, "gave up", None, "host-control"))
        .unwrap();
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(
        findings
            .iter()
            .map(|x| (&*x.code, x.ids.clone()))
            .collect::<Vec<_>>(),
        vec![("value_partial", vec![o.sha256.clone()])],
        "{findings:#?}"
    );
    let report = f.store.write(|w| w.repair()).unwrap();
    assert_eq!(report.repaired.len(), 1, "{report:#?}");
    assert!(matches!(
        f.store.read_value_chunk(&run_o, &o.sha256, 0, 10),
        Err(piw_host::store::StoreError::NotFound { .. })
    ));
    // The submitted value stays.
    assert_eq!(
        f.store.read_value(&run_i, &r.sha256).unwrap(),
        text.as_bytes()
    );
    f.assert_clean();
}

/// The engine reads the store's deadlines as of the time it is handed, not by the store's
/// clock: a run parked until `at` is a deadline before `at` and none from then on, whatever
/// the clock says (here it stays before `at`).
#[test]
fn the_engines_deadline_reads_are_at_the_time_it_is_handed() {
    use piw_host::engine::timers::next_deadline_at;

    let mut f = Fixture::new();
    let (_run_id, act, _attempt) = f.running();
    let now = f.store.now_ms();
    let at = now + 3_600_000;
    f.store.write(|w| w.park(&act.claim, Some(at))).unwrap();
    assert_eq!(f.store.next_delayed_ready(now).unwrap(), Some(at));
    assert_eq!(f.store.next_delayed_ready(at).unwrap(), None);
    let state = host_state_with_runtime(&mut f, false);
    assert_eq!(next_deadline_at(&f.store, &state, now), Some(at));
    assert_eq!(next_deadline_at(&f.store, &state, at), None);
}
