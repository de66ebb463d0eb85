//! An interactive step's time runs only while it is presented (its origin session has a live
//! client, or its detached run's bridge said hello), through the engine's presence inputs and
//! the store on a fake clock; decisions stay on the wall clock.

mod common;

use common::*;
use piw_host::engine::bridges::{BridgeEntry, BridgeReport};
use piw_host::engine::presence;
use piw_host::engine::state::HostState;
use piw_host::store::prelude::*;
use piw_host::store::{ChildExitRecord, DecisionKind, ExecutionMode, InteractionKind, StoreError};
use serde_json::json;

/// A run of session `session-1` (or detached) at node `a` whose attempt has `timeout_ms` left,
/// asking the model through an agent step while `state` says who is there. Returns the run,
/// its attempt and the step.
fn ask(
    f: &mut Fixture,
    state: &HostState,
    mode: ExecutionMode,
    timeout_ms: i64,
) -> (String, String, String) {
    let run_id = f.start_with(piw_host::store::NewRun {
        execution_mode: mode,
        ..new_run(Some("session-1"))
    });
    let act = f.activate(&run_id);
    let deadline = f.store.now_ms() + timeout_ms;
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(deadline)))
        .unwrap();
    let present = |h: &piw_host::store::Holder| presence::is_present(state, h);
    let step = f
        .store
        .write(|w| {
            w.request_interaction(
                &act.claim,
                &attempt,
                InteractionKind::Agent,
                &json!({}),
                Some(deadline),
                &present,
            )
        })
        .unwrap();
    (run_id, attempt, step)
}

/// The step's deadline, and its attempt's (which mirrors it).
fn deadlines(f: &mut Fixture, run_id: &str, attempt: &str) -> (Option<i64>, Option<i64>) {
    let step = f.store.interactions(Some(run_id), None).unwrap()[0].deadline_at;
    let attempt = f.store.write(|w| w.attempt_deadline(attempt)).unwrap();
    (step, attempt)
}

fn expire(f: &mut Fixture) -> Vec<(String, String)> {
    f.store.write(|w| w.expire_due_interactions()).unwrap()
}

/// An 8 s step held 3 s, then nobody presents it for 60 s: not expired. Held again, it has 5 s
/// left: then a submission is refused as late and the step expires.
#[test]
fn a_step_uses_its_time_only_while_its_session_is_there() {
    let mut f = Fixture::new();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 1);
    let (run_id, attempt, step) = ask(&mut f, &state, ExecutionMode::Interactive, 8_000);
    let start = f.store.now_ms();
    assert_eq!(
        deadlines(&mut f, &run_id, &attempt),
        (Some(start + 8_000), Some(start + 8_000)),
        "held from the start: the session was there"
    );

    f.clock.advance(3_000);
    let now = f.store.now_ms();
    presence::session_unwatched(&mut f.store, &mut state, now, "session-1".into(), 1);
    assert_eq!(deadlines(&mut f, &run_id, &attempt), (None, None));
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        None,
        "nothing to wake for"
    );

    f.clock.advance(60_000);
    assert_eq!(
        expire(&mut f),
        vec![],
        "Pi closed: the step's time stood still"
    );

    // Two connections of the session (a reconnect overlapping the old one): it is there
    // until the last one goes.
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 2);
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 3);
    let back = f.store.now_ms();
    assert_eq!(
        deadlines(&mut f, &run_id, &attempt),
        (Some(back + 5_000), Some(back + 5_000)),
        "5 s of 8 s left"
    );
    f.clock.advance(4_999);
    assert_eq!(expire(&mut f), vec![]);
    f.clock.advance(1);
    let late = f
        .store
        .write(|w| w.submit(&step, &attempt, &json!({"v": 1}), None))
        .unwrap_err();
    assert!(
        matches!(late, StoreError::DeadlinePassed { .. }),
        "{late:?}"
    );
    assert_eq!(expire(&mut f), vec![(step, run_id)]);
    f.assert_clean();
}

/// A step asked while its session is away waits for it without a deadline, and a submission
/// made then (a person's `piw run submit`) is taken.
#[test]
fn a_step_asked_while_nobody_is_there_has_no_deadline_until_held() {
    let mut f = Fixture::new();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    // Another session is there: not this run's.
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-2".into(), 1);
    let (run_id, attempt, step) = ask(&mut f, &state, ExecutionMode::Interactive, 8_000);
    assert_eq!(deadlines(&mut f, &run_id, &attempt), (None, None));
    f.clock.advance(3_600_000);
    assert_eq!(expire(&mut f), vec![]);
    f.store
        .write(|w| w.submit(&step, &attempt, &json!({"v": 1}), None))
        .unwrap();
    f.assert_clean();
}

/// A checkpoint's deadline is the wall clock's: it passes while nobody is connected.
#[test]
fn a_checkpoint_deadline_counts_while_nobody_is_there() {
    let mut f = Fixture::new();
    let state = HostState::new(Box::new(piw_host::ids::OsIds));
    assert!(!presence::is_present(
        &state,
        &piw_host::store::Holder::Session("session-1".into())
    ));
    let run_id = f.start();
    let act = f.activate(&run_id);
    let deadline = f.store.now_ms() + 8_000;
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(deadline)))
        .unwrap();
    let decision = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &attempt, DecisionKind::Checkpoint, &json!({})))
        .unwrap();
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        Some(deadline)
    );
    f.clock.advance(8_000);
    assert_eq!(
        f.store.write(|w| w.expire_due_decisions()).unwrap(),
        vec![(decision, run_id)]
    );
    f.assert_clean();
}

/// A host that stops (or crashes) while a step is held: at the next start nobody holds it,
/// and the time the host was down counts for nothing.
#[test]
fn the_hosts_down_time_uses_up_no_step_time() {
    let mut f = Fixture::new();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    let epoch = f.store.write(|w| w.begin_host_epoch(1)).unwrap();
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 1);
    let (run_id, attempt, _) = ask(&mut f, &state, ExecutionMode::Interactive, 8_000);
    f.clock.advance(2_000);
    f.store.write(|w| w.end_host_epoch(epoch)).unwrap();
    f.clock.advance(100_000);
    piw_host::driver::recover_at_start(&mut f.store, 2).unwrap();
    assert_eq!(deadlines(&mut f, &run_id, &attempt), (None, None));
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 1);
    let now = f.store.now_ms();
    assert_eq!(
        deadlines(&mut f, &run_id, &attempt),
        (Some(now + 6_000), Some(now + 6_000)),
        "the 2 s before the stop count, the 100 s of down time do not"
    );
    f.assert_clean();
}

/// A detached run's step: its time does not run before its bridge's hello (a bridge slow to
/// start), runs while the bridge holds it, and stops when the bridge exits. Its origin
/// session, still there, does not hold it.
#[test]
fn a_detached_step_uses_its_time_only_while_its_bridge_holds_it() {
    let mut f = Fixture::new();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 1);
    let (run_id, attempt, step) = ask(&mut f, &state, ExecutionMode::Detached, 8_000);
    assert_eq!(deadlines(&mut f, &run_id, &attempt), (None, None));
    state.bridges.live.insert(
        run_id.clone(),
        BridgeEntry {
            launch: 7,
            interaction_id: step.clone(),
            launched_at: f.store.now_ms(),
            hello: false,
            stopping: None,
        },
    );
    f.clock.advance(60_000);
    assert_eq!(expire(&mut f), vec![], "no hello yet: no time used");
    let hello = BridgeReport::Hello {
        run_id: run_id.clone(),
        launch: 7,
    };
    let now = f.store.now_ms();
    piw_host::engine::bridges::on_reports(&mut f.store, &mut state, now, vec![hello]);
    let held = f.store.now_ms();
    assert_eq!(
        deadlines(&mut f, &run_id, &attempt),
        (Some(held + 8_000), Some(held + 8_000))
    );
    f.clock.advance(3_000);
    let exit = BridgeReport::Exited {
        run_id: run_id.clone(),
        launch: 7,
        exit: ChildExitRecord {
            exit_code: None,
            signal: Some(9),
            reason: "killed".into(),
            stdout_tail: Vec::new(),
            stderr_tail: Vec::new(),
        },
    };
    let now = f.store.now_ms();
    piw_host::engine::bridges::on_reports(&mut f.store, &mut state, now, vec![exit]);
    assert_eq!(deadlines(&mut f, &run_id, &attempt), (None, None));
    f.clock.advance(60_000);
    assert_eq!(expire(&mut f), vec![]);
    f.assert_clean();
}

/// Detaching a run whose session holds its step stops the step's time until a bridge holds it.
#[test]
fn detaching_takes_the_step_from_its_session() {
    let mut f = Fixture::new();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    let now = f.store.now_ms();
    presence::session_watched(&mut f.store, &mut state, now, "session-1".into(), 1);
    let (run_id, attempt, _) = ask(&mut f, &state, ExecutionMode::Interactive, 8_000);
    f.clock.advance(1_000);
    assert!(f.store.write(|w| w.detach(&run_id)).unwrap());
    assert_eq!(deadlines(&mut f, &run_id, &attempt), (None, None));
    f.clock.advance(60_000);
    assert_eq!(expire(&mut f), vec![]);
    f.assert_clean();
}
