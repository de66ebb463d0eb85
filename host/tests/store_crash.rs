//! Crash consistency at the store level: for every lifecycle operation, a failure injected just
//! before commit leaves the database content exactly as before (canonical dump), and the same
//! operation committed afterwards leaves `diagnose` clean.
mod common;

use common::*;
use piw_host::store::*;
use serde_json::{json, Value};

/// Runs `op` once with a fault injected before commit, then once for real.
fn crash_then_commit<T: std::fmt::Debug>(
    f: &mut Fixture,
    name: &str,
    mut op: impl FnMut(&mut WriteTx<'_>) -> StoreResult<T>,
) -> T {
    let before = f.store.canonical_dump().unwrap();
    f.fail_next_commit
        .store(true, std::sync::atomic::Ordering::SeqCst);
    match f.store.write(&mut op) {
        Err(StoreError::InjectedFault(_)) => {}
        other => panic!("{name}: expected the injected fault, got {other:?}"),
    }
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "{name}: aborted commit changed the content"
    );
    let out = f
        .store
        .write(&mut op)
        .unwrap_or_else(|e| panic!("{name}: commit failed: {e}"));
    let after = f.store.canonical_dump().unwrap();
    assert_ne!(
        after, before,
        "{name}: the committed operation changed nothing"
    );
    f.assert_clean();
    out
}

#[test]
fn start_activate_node_started_transition_complete() {
    let mut f = Fixture::new();
    let run = new_run(Some("s"));
    let run_id = crash_then_commit(&mut f, "start", |w| w.start_run(&run));
    let act = crash_then_commit(&mut f, "activate", |w| w.activate(&run_id, HOST));
    crash_then_commit(&mut f, "record_definition", |w| {
        w.record_definition(&act.claim, &json!({"start": "a"}))
    });
    let a = crash_then_commit(&mut f, "node_started", |w| {
        w.node_started(&act.claim, "a", Some(T0 + 5_000))
    });
    // A heartbeat changes only the claim's times: move the clock so the renewal is visible.
    f.clock.advance(1_000);
    crash_then_commit(&mut f, "heartbeat", |w| w.heartbeat(&act.claim));
    let t = crash_then_commit(&mut f, "transition", |w| {
        w.transition(&act.claim, &step(&a, "b"))
    });
    crash_then_commit(&mut f, "notify", |w| {
        w.notify(&act.claim, &json!({"text": "hi"}))
    });
    crash_then_commit(&mut f, "complete", |w| {
        w.complete(&act.claim, &t.next_attempt_id, &json!(2), &json!({"r": 1}))
    });
}

#[test]
fn park_pause_resume_fail() {
    let mut f = Fixture::new();
    let (run_id, act, _a) = f.running();
    crash_then_commit(&mut f, "pause (live claim)", |w| {
        w.pause(&run_id, Fence::Claim(&act.claim))
    });
    crash_then_commit(&mut f, "park", |w| w.park(&act.claim, Some(T0 + 1_000)));
    crash_then_commit(&mut f, "resume", |w| w.resume(&run_id, Fence::Unclaimed));
    crash_then_commit(&mut f, "pause (unclaimed)", |w| {
        w.pause(&run_id, Fence::Unclaimed)
    });
    crash_then_commit(&mut f, "resume again", |w| {
        w.resume(&run_id, Fence::Unclaimed)
    });
    f.clock.advance(1_000);
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    crash_then_commit(&mut f, "fail", |w| {
        w.fail(
            &act.claim,
            Some(&a),
            &AttemptOutcome::Failed {
                error: "boom".into(),
            },
            "boom",
        )
    });
}

#[test]
fn checkpoint_and_human_decision() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let d = crash_then_commit(&mut f, "wait checkpoint", |w| {
        w.wait_for_decision(
            &act.claim,
            &a,
            DecisionKind::Checkpoint,
            &json!({"q": "ok?"}),
        )
    });
    crash_then_commit(&mut f, "answer checkpoint", |w| {
        w.answer_decision(&d, &json!("yes"), Answerer::Model)
    });
    let act = f.activate(&run_id);
    assert!(matches!(act.resume, Resume::Continue { .. }));
    let d = crash_then_commit(&mut f, "wait human", |w| {
        w.wait_for_decision(
            &act.claim,
            &a,
            DecisionKind::HumanDecision,
            &json!({"q": "ship?"}),
        )
    });
    crash_then_commit(&mut f, "answer human", |w| {
        w.answer_decision(&d, &json!("ship"), Answerer::Person)
    });
}

#[test]
fn durable_timer_set_and_fired() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let set = crash_then_commit(&mut f, "wait until", |w| {
        w.wait_until(&act.claim, &a, Wake::After(1_000), &json!({"x": 1}))
    });
    f.clock.advance(1_000);
    let fired = crash_then_commit(&mut f, "fire due timers", |w| w.fire_due_timers());
    assert_eq!(fired, vec![(set.timer_id, run_id.clone())]);
    let act = f.activate(&run_id);
    assert!(matches!(act.resume, Resume::TimerFired { .. }));
}

#[test]
fn interaction_submit_settle_expire() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let i = crash_then_commit(&mut f, "request interaction", |w| {
        w.request_interaction(
            &act.claim,
            &a,
            InteractionKind::Agent,
            &json!({"ask": 1}),
            Some(T0 + 60_000),
            &|_| true,
        )
    });
    let s1 = crash_then_commit(&mut f, "submit", |w| {
        w.submit(&i, &a, &json!({"v": 1}), Some("k1"))
    });
    let act = f.activate(&run_id);
    assert_eq!(act.mode, ChildMode::Validate);
    crash_then_commit(&mut f, "settle reject", |w| {
        w.settle(&act.claim, &s1, Err("needs v=2".into()))
    });
    let s2 = crash_then_commit(&mut f, "submit again", |w| {
        w.submit(&i, &a, &json!({"v": 2}), Some("k2"))
    });
    let act = f.activate(&run_id);
    crash_then_commit(&mut f, "settle accept", |w| {
        w.settle(&act.claim, &s2, Ok(()))
    });
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .unwrap();
    let i2 = f
        .store
        .write(|w| {
            w.request_interaction(
                &act.claim,
                &t.next_attempt_id,
                InteractionKind::AssistantMessage,
                &json!({}),
                Some(T0 + 1),
                &|_| true,
            )
        })
        .unwrap();
    f.clock.advance(10);
    crash_then_commit(&mut f, "expire interaction", |w| w.expire_interaction(&i2));
    let act = f.activate(&run_id);
    assert!(matches!(act.resume, Resume::InteractionExpired { .. }));
    crash_then_commit(&mut f, "time out", |w| {
        w.fail(
            &act.claim,
            Some(&t.next_attempt_id),
            &AttemptOutcome::TimedOut,
            "no answer",
        )
    });
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::TimedOut);
}

#[test]
fn cancel_paths_loss_recovery_review() {
    let mut f = Fixture::new();
    let (run_id, act, _a) = f.running();
    crash_then_commit(&mut f, "cancel live", |w| {
        w.cancel(&run_id, Fence::Claim(&act.claim), "user")
    });

    let (run_id, _act, _a) = f.running();
    f.clock.advance(LEASE_MS + 1);
    let control = crash_then_commit(&mut f, "control claim", |w| w.control_claim(&run_id, "cli"));
    crash_then_commit(&mut f, "cancel via control", |w| {
        w.cancel(&run_id, Fence::Claim(&control), "stale")
    });

    let (_run_id, act, _a) = f.running();
    crash_then_commit(&mut f, "child lost", |w| w.child_lost(&act.claim, "killed"));

    let (_run_id, _act, _a) = f.running();
    f.clock.advance(LEASE_MS + 1);
    crash_then_commit(&mut f, "recover expired", |w| w.recover_expired());

    let (_run_id, act, _a) = f.running();
    crash_then_commit(&mut f, "review", |w| {
        w.send_to_review(&act.claim, "source_changed")
    });

    let run_id = f.start();
    crash_then_commit(&mut f, "cancel queued", |w| {
        w.cancel(&run_id, Fence::Unclaimed, "user")
    });
}

#[test]
fn effects_and_command_receipts() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let r = crash_then_commit(&mut f, "reserve", |w| {
        w.reserve_effect(&act.claim, &a, "send-mail", "fp1", RetryContract::Never)
    });
    let Reservation::Reserved { effect_id, .. } = r else {
        panic!("{r:?}")
    };
    crash_then_commit(&mut f, "applying", |w| {
        w.effect_applying(&act.claim, &effect_id)
    });
    crash_then_commit(&mut f, "settle effect", |w| {
        w.settle_effect(
            &act.claim,
            &effect_id,
            &EffectResult::Applied {
                receipt: json!({"id": 7}),
            },
        )
    });
    let meta = CommandMeta {
        request_id: "req-1".into(),
        idempotency_key: Some("idem-1".into()),
        fingerprint: "fp".into(),
        kind: "run.pause".into(),
        run_id: Some(run_id.clone()),
    };
    let out = crash_then_commit(&mut f, "command", |w| {
        w.command(&meta, |w| {
            w.pause(&run_id, Fence::Claim(&act.claim))
                .map(|rev| json!({"revision": rev}))
        })
    });
    assert!(!out.replayed);
    let _: Value = out.response;
}
