//! Lifecycle rules: impossible transitions are refused with typed errors and change nothing;
//! stale runs are cancelled or recovered (docs/RULES.md, "Recovery and cancel"); effects and command receipts dedupe.
mod common;

use common::*;
use piw_host::store::*;
use serde_json::{json, Value};

fn assert_invalid<T: std::fmt::Debug>(
    f: &mut Fixture,
    what: &str,
    op: impl FnOnce(&mut WriteTx<'_>) -> StoreResult<T>,
) {
    let before = f.store.canonical_dump().unwrap();
    match f.store.write(op) {
        Err(StoreError::InvalidTransition { .. }) => {}
        other => panic!("{what}: expected InvalidTransition, got {other:?}"),
    }
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "{what}: a refusal changed the database"
    );
}

#[test]
fn impossible_transitions_are_refused() {
    let mut f = Fixture::new();
    // Completing a cancelled run.
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.cancel(&run_id, Fence::Claim(&act.claim), "user"))
        .unwrap();
    // Its old owner is fenced first: a stale writer learns it lost the claim.
    let before = f.store.canonical_dump().unwrap();
    let err = f
        .store
        .write(|w| w.complete(&act.claim, &a, &json!(1), &json!(1)))
        .unwrap_err();
    assert!(err.is_claim_lost(), "complete cancelled: {err:?}");
    assert_eq!(f.store.canonical_dump().unwrap(), before);
    assert_invalid(&mut f, "cancel cancelled", |w| {
        w.cancel(&run_id, Fence::Unclaimed, "again")
    });
    assert_invalid(&mut f, "activate cancelled", |w| w.activate(&run_id, HOST));
    assert_invalid(&mut f, "control claim on terminal", |w| {
        w.control_claim(&run_id, "cli")
    });

    // Resuming a completed run; resuming a run that is not paused.
    let (run_id, act, a) = f.running();
    assert_invalid(&mut f, "resume not paused", |w| {
        w.resume(&run_id, Fence::Claim(&act.claim))
    });
    f.store
        .write(|w| w.complete(&act.claim, &a, &json!(1), &json!(1)))
        .unwrap();
    assert_invalid(&mut f, "resume completed", |w| {
        w.resume(&run_id, Fence::Unclaimed)
    });
    assert_invalid(&mut f, "pause completed", |w| {
        w.pause(&run_id, Fence::Unclaimed)
    });

    // A transition for an attempt that is not the current one.
    let (run_id, act, a) = f.running();
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .unwrap();
    let before = f.store.canonical_dump().unwrap();
    let err = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "c")))
        .unwrap_err();
    assert!(matches!(err, StoreError::StaleAttempt { .. }), "{err:?}");
    assert_eq!(f.store.canonical_dump().unwrap(), before);

    // Settling a submission twice.
    let i = f
        .store
        .write(|w| {
            w.request_interaction(
                &act.claim,
                &t.next_attempt_id,
                InteractionKind::Agent,
                &json!({}),
                None,
                &|_| true,
            )
        })
        .unwrap();
    let s = f
        .store
        .write(|w| w.submit(&i, &t.next_attempt_id, &json!(1), None))
        .unwrap();
    let act = f.activate(&run_id);
    f.store.write(|w| w.settle(&act.claim, &s, Ok(()))).unwrap();
    assert_invalid(&mut f, "settle twice", |w| {
        w.settle(&act.claim, &s, Err("late".into()))
    });

    // An unclaimed writer cannot act on a run a live owner holds.
    assert_invalid(&mut f, "unclaimed cancel of live run", |w| {
        w.cancel(&run_id, Fence::Unclaimed, "x")
    });
    assert_invalid(&mut f, "control claim on live run", |w| {
        w.control_claim(&run_id, "cli")
    });
    // node_started while an attempt is open.
    assert_invalid(&mut f, "second node_started", |w| {
        w.node_started(&act.claim, "z", None)
    });
    f.assert_clean();
}

#[test]
fn protected_human_decision_refuses_the_model_path() {
    let mut f = Fixture::new();
    let (_run_id, act, a) = f.running();
    let d = f
        .store
        .write(|w| {
            w.wait_for_decision(
                &act.claim,
                &a,
                DecisionKind::HumanDecision,
                &json!({"q": 1}),
            )
        })
        .unwrap();
    let err = f
        .store
        .write(|w| w.answer_decision(&d, &json!("yes"), Answerer::Model))
        .unwrap_err();
    assert!(matches!(err, StoreError::Forbidden(_)), "{err:?}");
    f.store
        .write(|w| w.answer_decision(&d, &json!("yes"), Answerer::Person))
        .unwrap();
    assert_invalid(&mut f, "answer twice", |w| {
        w.answer_decision(&d, &json!("no"), Answerer::Person)
    });
}

#[test]
fn cancel_an_expired_running_row_through_a_control_claim() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.reserve_and_apply(&act.claim, &a, "charge", RetryContract::Never);
    f.store
        .write(|w| w.reserve_effect(&act.claim, &a, "email", "fp", RetryContract::Never))
        .unwrap();
    let gen_before = f.store.claim_info(&run_id).unwrap().generation;

    // Live: refused.
    let err = f
        .store
        .write(|w| w.control_claim(&run_id, "cli"))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidTransition { .. }),
        "{err:?}"
    );

    f.clock.advance(LEASE_MS + 1);
    let control = f.store.write(|w| w.control_claim(&run_id, "cli")).unwrap();
    assert_eq!(control.owner_kind, OwnerKind::Control);
    assert_eq!(
        control.generation,
        gen_before + 1,
        "the generation is bumped before any mutation"
    );
    // The old owner is fenced from here on.
    assert!(f
        .store
        .write(|w| w.heartbeat(&act.claim))
        .unwrap_err()
        .is_claim_lost());

    let summary = f
        .store
        .write(|w| w.cancel(&run_id, Fence::Claim(&control), "operator"))
        .unwrap();
    assert_eq!(summary.attempts_closed, 1);
    assert_eq!(summary.effects_cancelled, 1);
    assert_eq!(summary.effects_uncertain, 1);
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let effects = f.store.effects(&run_id).unwrap();
    let state = |key: &str| {
        effects
            .iter()
            .find(|e| e.effect_key == key)
            .unwrap()
            .state
            .clone()
    };
    assert_eq!(state("charge"), "uncertain");
    assert_eq!(state("email"), "cancelled");
    assert_eq!(f.store.attempts(&run_id).unwrap()[0].status, "cancelled");
    assert_eq!(
        f.store.claim_info(&run_id).unwrap().owner_kind,
        None,
        "claim released"
    );
    f.assert_clean();
}

#[test]
fn recover_a_resumable_expired_run() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .unwrap();
    // Nothing is recovered while the claim is live.
    assert!(f.store.write(|w| w.recover_expired()).unwrap().is_empty());
    f.clock.advance(LEASE_MS + 1);
    let rec = f.store.write(|w| w.recover_expired()).unwrap();
    assert_eq!(
        rec,
        vec![RecoveredRun {
            run_id: run_id.clone(),
            status: RunStatus::Queued,
            reason: "claim expired".into()
        }]
    );
    assert_eq!(
        f.store.ready_runs(f.store.now_ms(), 10).unwrap(),
        vec![run_id.clone()]
    );
    let act2 = f.activate(&run_id);
    // It resumes from its last durable boundary: node b, with the interrupted attempt rerun.
    assert_eq!(
        act2.resume,
        Resume::Fresh {
            node_id: Some("b".into())
        }
    );
    let attempts = f.store.attempts(&run_id).unwrap();
    assert_eq!(
        attempts
            .iter()
            .find(|x| x.attempt_id == t.next_attempt_id)
            .unwrap()
            .status,
        "interrupted"
    );
    let b2 = f
        .store
        .write(|w| w.node_started(&act2.claim, "b", None))
        .unwrap();
    f.store
        .write(|w| w.complete(&act2.claim, &b2, &json!(1), &json!("done")))
        .unwrap();
    let attempts = f.store.attempts(&run_id).unwrap();
    assert_eq!(
        attempts
            .iter()
            .filter(|x| x.node_id == "a" && x.status == "succeeded")
            .count(),
        1,
        "a ran once"
    );
    assert_eq!(
        attempts
            .iter()
            .filter(|x| x.node_id == "b")
            .map(|x| x.ordinal)
            .max(),
        Some(2)
    );
    f.assert_clean();
}

#[test]
fn an_uncertain_effect_stops_the_run_for_review_and_is_never_retried() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.reserve_and_apply(&act.claim, &a, "charge", RetryContract::Never);
    f.clock.advance(LEASE_MS + 1);
    let rec = f.store.write(|w| w.recover_expired()).unwrap();
    assert_eq!(rec[0].status, RunStatus::Review);
    assert!(rec[0].reason.contains("charge"), "{rec:?}");
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Review);
    assert!(run.review_reason.unwrap().contains("uncertain effect"));
    assert_eq!(f.store.effects(&run_id).unwrap()[0].state, "uncertain");
    // Not claimable: the scheduler never sees it, activation refuses.
    assert!(f.store.ready_runs(f.store.now_ms(), 10).unwrap().is_empty());
    assert!(f.store.write(|w| w.activate(&run_id, HOST)).is_err());
    // Even a control claim holder cannot re-reserve it: it is uncertain for good.
    let control = f.store.write(|w| w.control_claim(&run_id, "cli")).unwrap();
    let err = f
        .store
        .write(|w| w.reserve_effect(&control, &a, "charge", "fp", RetryContract::Never))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidTransition { .. } | StoreError::EffectUncertain { .. }
        ),
        "{err:?}"
    );
    // A person can still cancel it.
    f.store
        .write(|w| w.cancel(&run_id, Fence::Claim(&control), "reviewed"))
        .unwrap();
    f.assert_clean();
}

#[test]
fn retry_contracts_decide_whether_an_interrupted_effect_may_run_again() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let effect_id = f.reserve_and_apply(&act.claim, &a, "put", RetryContract::IdempotencyKey);
    f.store
        .write(|w| w.child_lost(&act.claim, "killed"))
        .unwrap();
    assert_eq!(
        f.store.run(&run_id).unwrap().status,
        RunStatus::Queued,
        "idempotent effects do not block"
    );
    let act2 = f.activate(&run_id);
    let a2 = f
        .store
        .write(|w| w.node_started(&act2.claim, "a", None))
        .unwrap();
    let r = f
        .store
        .write(|w| w.reserve_effect(&act2.claim, &a2, "put", "fp", RetryContract::IdempotencyKey))
        .unwrap();
    assert_eq!(
        r,
        Reservation::Reserved {
            effect_id: effect_id.clone(),
            retry: true
        }
    );
    f.assert_clean();
}

#[test]
fn a_duplicate_effect_request_returns_its_receipt() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let Reservation::Reserved {
        effect_id,
        retry: false,
    } = f
        .store
        .write(|w| w.reserve_effect(&act.claim, &a, "append", "fp-1", RetryContract::Never))
        .unwrap()
    else {
        panic!()
    };
    f.store
        .write(|w| w.effect_applying(&act.claim, &effect_id))
        .unwrap();
    f.store
        .write(|w| {
            w.settle_effect(
                &act.claim,
                &effect_id,
                &EffectResult::Applied {
                    receipt: json!({"line": 1}),
                },
            )
        })
        .unwrap();
    assert_invalid(&mut f, "settle effect twice", |w| {
        w.settle_effect(
            &act.claim,
            &effect_id,
            &EffectResult::Applied {
                receipt: json!({"line": 2}),
            },
        )
    });
    // The child dies after the receipt; the rerun asks again and gets the receipt.
    f.store
        .write(|w| w.child_lost(&act.claim, "killed"))
        .unwrap();
    let act2 = f.activate(&run_id);
    let a2 = f
        .store
        .write(|w| w.node_started(&act2.claim, "a", None))
        .unwrap();
    let r = f
        .store
        .write(|w| w.reserve_effect(&act2.claim, &a2, "append", "fp-1", RetryContract::Never))
        .unwrap();
    assert_eq!(
        r,
        Reservation::AlreadyApplied {
            effect_id,
            receipt: json!({"line": 1})
        }
    );
    let err = f
        .store
        .write(|w| w.reserve_effect(&act2.claim, &a2, "append", "fp-2", RetryContract::Never))
        .unwrap_err();
    assert!(matches!(err, StoreError::EffectConflict { .. }), "{err:?}");
    f.assert_clean();
}

#[test]
fn a_run_whose_children_keep_dying_stops_for_review() {
    let mut f = Fixture::new();
    let run_id = f.start();
    for loss in 1..=DEFAULT_MAX_CHILD_LOSSES {
        let act = f.activate(&run_id);
        f.store
            .write(|w| w.node_started(&act.claim, "a", None))
            .unwrap();
        let rec = f
            .store
            .write(|w| w.child_lost(&act.claim, "segfault"))
            .unwrap();
        let expected = if loss < DEFAULT_MAX_CHILD_LOSSES {
            RunStatus::Queued
        } else {
            RunStatus::Review
        };
        assert_eq!(rec.status, expected, "after loss {loss}");
    }
    assert!(f
        .store
        .run(&run_id)
        .unwrap()
        .review_reason
        .unwrap()
        .contains("3 times"));
    // Progress resets the count.
    let run2 = f.start();
    for _ in 0..5 {
        let act = f.activate(&run2);
        let a = f
            .store
            .write(|w| w.node_started(&act.claim, "a", None))
            .unwrap();
        f.store
            .write(|w| w.transition(&act.claim, &step(&a, "a")))
            .unwrap();
        f.store
            .write(|w| w.child_lost(&act.claim, "segfault"))
            .unwrap();
    }
    assert_eq!(f.store.run(&run2).unwrap().status, RunStatus::Queued);
    f.assert_clean();
}

#[test]
fn interactive_validation_reject_then_accept_and_duplicate_submission() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let i = f
        .store
        .write(|w| {
            w.request_interaction(
                &act.claim,
                &a,
                InteractionKind::Agent,
                &json!({"ask": "x"}),
                Some(T0 + 60_000),
                &|_| true,
            )
        })
        .unwrap();
    assert_eq!(
        f.store.interactions(None, Some("session-1")).unwrap().len(),
        1
    );
    let s1 = f
        .store
        .write(|w| w.submit(&i, &a, &json!({"v": 1}), Some("key-1")))
        .unwrap();
    // Duplicate: the original submission id.
    assert_eq!(
        f.store
            .write(|w| w.submit(&i, &a, &json!({"v": 1}), Some("key-1")))
            .unwrap(),
        s1
    );
    let err = f
        .store
        .write(|w| w.submit(&i, &a, &json!({"v": 9}), Some("key-1")))
        .unwrap_err();
    assert!(matches!(err, StoreError::IdempotencyConflict { .. }));
    let stale = f
        .store
        .write(|w| w.submit(&i, "att-old", &json!({"v": 1}), None))
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::StaleAttempt { .. }),
        "{stale:?}"
    );

    let act = activate_to_validate(&mut f, &run_id, &a, &s1);
    f.store
        .write(|w| w.settle(&act.claim, &s1, Err("v must be 2".into())))
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Waiting);
    let subs = f.store.submissions(&i).unwrap();
    assert_eq!(
        (subs[0].state.as_str(), subs[0].error.as_deref()),
        ("rejected", Some("v must be 2"))
    );

    // A rejected result is no repeat: sent again, it is judged again.
    let repeat = |f: &mut Fixture, v: Value| {
        f.store
            .write(|w| w.repeated_submission(&i, &a, &v))
            .unwrap()
    };
    assert_eq!(repeat(&mut f, json!({"v": 1})), None);
    let s2 = f
        .store
        .write(|w| w.submit(&i, &a, &json!({"v": 2, "w": 3}), Some("key-2")))
        .unwrap();
    // The result being judged, sent again (its keys in another order): its receipt.
    assert_eq!(
        repeat(&mut f, json!({"w": 3, "v": 2})),
        Some((s2.clone(), "validating".to_owned()))
    );
    assert_eq!(repeat(&mut f, json!({"v": 2})), None);
    let act = f.activate(&run_id);
    f.store
        .write(|w| w.settle(&act.claim, &s2, Ok(())))
        .unwrap();
    assert_eq!(
        repeat(&mut f, json!({"v": 2, "w": 3})),
        Some((s2.clone(), "accepted".to_owned()))
    );
    // Only for the request's own attempt; the request's own result is no earlier one.
    assert_eq!(
        f.store
            .write(|w| w.repeated_submission(&i, "att-old", &json!({"v": 2, "w": 3})))
            .unwrap(),
        None
    );
    f.store
        .write(|w| w.refuse_accepted_before(&i, &json!({"v": 2, "w": 3})))
        .unwrap();
    f.store
        .write(|w| w.complete(&act.claim, &a, &json!({"v": 2, "w": 3}), &json!("ok")))
        .unwrap();
    assert_eq!(
        f.store.interactions(Some(&run_id), None).unwrap()[0].status,
        "settled"
    );
    f.assert_clean();
}

/// Activates `run_id`, which must resume by validating `submission` of `attempt` at node `a`.
fn activate_to_validate(
    f: &mut Fixture,
    run_id: &str,
    attempt: &str,
    submission: &str,
) -> Activation {
    let act = f.activate(run_id);
    assert_eq!(
        act.resume,
        Resume::Validate {
            node_id: "a".into(),
            attempt_id: attempt.to_owned(),
            submission_id: submission.to_owned()
        }
    );
    act
}

/// A running run whose agent step asked for input and got a submission (`1`), which now waits
/// for a validation child: (run, attempt, interaction, submission).
fn submitted(f: &mut Fixture) -> (String, String, String, String) {
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, None);
    let s = f
        .store
        .write(|w| w.submit(&i, &a, &json!(1), None))
        .unwrap();
    (run_id, a, i, s)
}

#[test]
fn a_validation_child_that_dies_rejects_only_its_submission() {
    let mut f = Fixture::new();
    let (run_id, a, i, s) = submitted(&mut f);
    let act = f.activate(&run_id);
    f.store
        .write(|w| w.child_lost(&act.claim, "validator crashed"))
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Waiting);
    assert_eq!(f.store.submissions(&i).unwrap()[0].state, "rejected");
    // The rejection is an event of its own, before the loss, so a waiter learns it.
    let events = f.store.events(&run_id, 0).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["submission_rejected", "child_lost"]
    );
    let rejected = &events[events.len() - 2].data;
    assert_eq!(rejected["submission"], json!(s));
    assert_eq!(
        rejected["error"],
        json!("validation did not finish: validator crashed")
    );
    assert_eq!(
        f.store.interactions(Some(&run_id), None).unwrap()[0].status,
        "pending"
    );
    // A corrected retry is accepted for the same request.
    let s2 = f
        .store
        .write(|w| w.submit(&i, &a, &json!(2), None))
        .unwrap();
    assert_ne!(s, s2);
    f.assert_clean();
}

#[test]
fn a_host_restart_during_validation_keeps_the_submission_for_the_next_child() {
    let mut f = Fixture::new();
    let (run_id, a, i, s) = submitted(&mut f);
    f.activate(&run_id);
    // A host that died held the claim: unlike a child's death, this is not the submission's
    // fault, so it is judged again rather than rejected.
    let recovered = f
        .store
        .write(|w| w.recover_runs_of_dead_hosts("host-after-restart"))
        .unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    assert_eq!(f.store.submissions(&i).unwrap()[0].state, "validating");
    let act = activate_to_validate(&mut f, &run_id, &a, &s);
    f.store.write(|w| w.settle(&act.claim, &s, Ok(()))).unwrap();
    assert_eq!(f.store.submissions(&i).unwrap()[0].state, "accepted");
    f.assert_clean();
}

#[test]
fn command_receipts_replay_and_conflict() {
    let mut f = Fixture::new();
    let run_id = f.start();
    let meta = |request_id: &str, key: Option<&str>, fp: &str| CommandMeta {
        request_id: request_id.into(),
        idempotency_key: key.map(str::to_owned),
        fingerprint: fp.into(),
        kind: "run.pause".into(),
        run_id: Some(run_id.clone()),
    };
    let m1 = meta("r1", Some("k1"), "fp");
    let first = f
        .store
        .write(|w| {
            w.command(&m1, |w| {
                w.pause(&run_id, Fence::Unclaimed)
                    .map(|rev| json!({"revision": rev}))
            })
        })
        .unwrap();
    assert!(!first.replayed);
    let events = f.store.events(&run_id, 0).unwrap().len();
    // Same request id: stored response, applied once (a second pause would have been refused).
    let again = f
        .store
        .write(|w| {
            w.command(&m1, |w| {
                w.pause(&run_id, Fence::Unclaimed)
                    .map(|rev| json!({"revision": rev}))
            })
        })
        .unwrap();
    assert_eq!((again.replayed, &again.response), (true, &first.response));
    // Same idempotency key under a new request id: also the stored response.
    let by_key = f
        .store
        .write(|w| w.command(&meta("r2", Some("k1"), "fp"), |_| Ok(json!("never run"))))
        .unwrap();
    assert_eq!(by_key.response, first.response);
    assert_eq!(f.store.events(&run_id, 0).unwrap().len(), events);
    // Same key or id, different request: conflict.
    for m in [meta("r3", Some("k1"), "other"), meta("r1", None, "other")] {
        let err = f
            .store
            .write(|w| w.command(&m, |_| Ok(json!(1))))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::IdempotencyConflict { .. }),
            "{err:?}"
        );
    }
    // A failing command stores no receipt; a later retry runs again.
    let m4 = meta("r4", None, "fp4");
    assert!(f
        .store
        .write(|w| w.command(&m4, |w| w
            .pause(&run_id, Fence::Unclaimed)
            .map(|_| json!(1))))
        .is_err());
    let ok = f
        .store
        .write(|w| {
            w.command(&m4, |w| {
                w.resume(&run_id, Fence::Unclaimed).map(|_| json!(2))
            })
        })
        .unwrap();
    assert!(!ok.replayed);
    f.assert_clean();
}

#[test]
fn stale_revision_is_refused() {
    let mut f = Fixture::new();
    let run_id = f.start();
    let rev = f.store.run(&run_id).unwrap().revision;
    f.store
        .write(|w| {
            w.expect_revision(&run_id, rev)?;
            w.pause(&run_id, Fence::Unclaimed)
        })
        .unwrap();
    let err = f
        .store
        .write(|w| {
            w.expect_revision(&run_id, rev)?;
            w.resume(&run_id, Fence::Unclaimed)
        })
        .unwrap_err();
    assert!(
        matches!(err, StoreError::StaleRevision { expected, actual, .. } if expected == rev && actual == rev + 1)
    );
}

#[test]
fn group_commit_isolates_a_failing_command() {
    let mut f = Fixture::new();
    let (r1, a1, x1) = f.running();
    let (r2, a2, _x2) = f.running();
    let results = f
        .store
        .write(|w| {
            let ok = w.savepoint(|w| w.transition(&a1.claim, &step(&x1, "b")));
            let bad = w.savepoint(|w| w.transition(&a2.claim, &step("att-bogus", "b")));
            Ok((ok.is_ok(), bad.is_err()))
        })
        .unwrap();
    assert_eq!(results, (true, true));
    assert_eq!(f.store.run(&r1).unwrap().current_node.as_deref(), Some("b"));
    assert_eq!(f.store.run(&r2).unwrap().current_node.as_deref(), Some("a"));
    f.assert_clean();
}

#[test]
fn pause_holds_a_run_back_until_resumed() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.pause(&run_id, Fence::Claim(&act.claim)))
        .unwrap();
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .unwrap();
    assert!(
        t.pause_requested,
        "the owner learns to park at this boundary"
    );
    f.store.write(|w| w.park(&act.claim, None)).unwrap();
    assert!(f.store.ready_runs(f.store.now_ms(), 10).unwrap().is_empty());
    assert!(f.store.write(|w| w.activate(&run_id, HOST)).is_err());
    f.store
        .write(|w| w.resume(&run_id, Fence::Unclaimed))
        .unwrap();
    assert_eq!(
        f.store.ready_runs(f.store.now_ms(), 10).unwrap(),
        vec![run_id.clone()]
    );
    assert_eq!(
        f.store.run_view(&run_id).unwrap().unwrap().last_event,
        "resumed"
    );
    f.assert_clean();
}

/// A pause that arrives during a run's last step lapses when the run ends: a finished run is
/// never reported `paused` (its viewer projection neither), whichever way it ends.
#[test]
fn a_run_that_ends_while_paused_is_no_longer_paused() {
    let mut f = Fixture::new();
    let (completed, act, a) = f.running();
    f.store
        .write(|w| w.pause(&completed, Fence::Claim(&act.claim)))
        .unwrap();
    f.store
        .write(|w| w.complete(&act.claim, &a, &json!(1), &json!(1)))
        .unwrap();
    let (cancelled, act, _a) = f.running();
    f.store
        .write(|w| w.pause(&cancelled, Fence::Claim(&act.claim)))
        .unwrap();
    f.store
        .write(|w| w.cancel(&cancelled, Fence::Claim(&act.claim), "user"))
        .unwrap();
    for run_id in [&completed, &cancelled] {
        let run = f.store.run(run_id).unwrap();
        assert!(run.status.is_terminal(), "{run_id}: {:?}", run.status);
        assert!(!run.paused, "{run_id} ended but stays paused");
        assert!(!f.store.run_view(run_id).unwrap().unwrap().paused);
    }
    f.assert_clean();
}

#[test]
fn children_of_a_dead_host_are_found_by_pid_or_closed_when_never_confirmed() {
    let mut f = Fixture::new();
    let (run_id, act, _a) = f.running();
    let old = f.store.write(|w| w.begin_host_epoch(111)).unwrap();
    let confirmed = f
        .store
        .write(|w| w.record_child_launch(&run_id, act.claim.generation, old, ChildMode::Run))
        .unwrap();
    f.store
        .write(|w| w.record_child_process(confirmed, 4242, 99))
        .unwrap();
    let unconfirmed = f
        .store
        .write(|w| w.record_child_launch(&run_id, act.claim.generation, old, ChildMode::Run))
        .unwrap();
    let new = f.store.write(|w| w.begin_host_epoch(222)).unwrap();
    assert!(new > old);
    let orphans = f.store.orphan_children(new).unwrap();
    assert_eq!(orphans.len(), 1);
    assert_eq!(
        (
            orphans[0].child_epoch,
            orphans[0].pid,
            orphans[0].process_start_time
        ),
        (confirmed, 4242, 99)
    );
    assert_eq!(
        f.store
            .write(|w| w.close_unconfirmed_children(new))
            .unwrap(),
        1
    );
    let children = f.store.children(&run_id).unwrap();
    let closed = children
        .iter()
        .find(|c| c.child_epoch == unconfirmed)
        .unwrap();
    assert!(closed.exited, "{closed:?}");
    assert!(
        closed
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("before the launch was confirmed"),
        "{closed:?}"
    );
    // The current host's own children are never touched.
    let mine = f
        .store
        .write(|w| w.record_child_launch(&run_id, act.claim.generation, new, ChildMode::Run))
        .unwrap();
    assert_eq!(
        f.store
            .write(|w| w.close_unconfirmed_children(new))
            .unwrap(),
        0
    );
    assert!(
        !f.store
            .children(&run_id)
            .unwrap()
            .iter()
            .find(|c| c.child_epoch == mine)
            .unwrap()
            .exited
    );
}

#[test]
fn the_next_deadline_covers_an_operator_claim_on_a_ready_run_and_only_future_ones() {
    let mut f = Fixture::new();
    let run_id = f.start();
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        None,
        "a plain ready run needs no timer"
    );
    let control = f.store.write(|w| w.control_claim(&run_id, "cli")).unwrap();
    let expiry = f.store.claim_info(&run_id).unwrap().expires_at.unwrap();
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        Some(expiry),
        "wake when the operator's claim lapses"
    );
    f.clock.set(expiry + 1);
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        None,
        "a lapsed claim is no future deadline (no spin)"
    );
    assert!(
        f.store.write(|w| w.activate(&run_id, HOST)).is_ok(),
        "the run is launchable again"
    );
    let _ = control;
}

/// A running host renews its own claims while their children work, so its own claim can only
/// expire when the host itself stalled (a suspended laptop): the run is requeued without
/// counting a loss against it. A claim of another owner that expires counts one.
#[test]
fn a_claim_that_expired_while_its_own_host_stalled_costs_the_run_no_loss() {
    let mut f = Fixture::new();
    let (own, _, _) = f.running();
    let (other, _, _) = f.running();
    f.clock.advance(LEASE_MS + 1);
    // Both claims belong to HOST; recovering as HOST counts nothing, as anybody else one each.
    let rec = f
        .store
        .write(|w| w.recover_expired_claims(Some(HOST)))
        .unwrap();
    assert_eq!(rec.len(), 2);
    for run_id in [&own, &other] {
        let last = f.store.events(run_id, 0).unwrap().pop().unwrap();
        assert_eq!(last.kind, "recovered");
        assert_eq!(last.data["losses"], json!(0), "{run_id}: {}", last.data);
        assert_eq!(f.store.run(run_id).unwrap().status, RunStatus::Queued);
    }
    let (counted, _, _) = f.running();
    f.clock.advance(LEASE_MS + 1);
    f.store
        .write(|w| w.recover_expired_claims(Some("another-host")))
        .unwrap();
    let last = f.store.events(&counted, 0).unwrap().pop().unwrap();
    assert_eq!(last.data["losses"], json!(1), "{}", last.data);
}

/// How a run's child can go away before it proposes its next transition, each as the store
/// records it: the child died, the host released the claim while stopping, or a later host
/// recovered the runs of a host that died.
type Loss = fn(&mut WriteTx<'_>, &Claim) -> StoreResult<RecoveredRun>;
const CHILD_LOSSES: [(&str, Loss); 3] = [
    ("child lost", |w, c| w.child_lost(c, "crashed")),
    ("host stopping", |w, c| w.release_at_shutdown(c)),
    ("host died", |w, _| {
        w.recover_runs_of_dead_hosts("host-after-restart")
            .map(|mut r| r.remove(0))
    }),
];

/// A person answered a protected decision; the child that continues the attempt with that
/// answer goes away (crash, handshake timeout, host restart or stop) before it proposes the
/// transition. The answer is committed: the next child must continue the same attempt with
/// it, not rerun the node and ask the person again.
#[test]
fn an_answered_decision_survives_the_loss_of_the_child_that_continues_it() {
    for (what, lose) in CHILD_LOSSES {
        let mut f = Fixture::new();
        let (run_id, act, a) = f.running();
        let d = f
            .store
            .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::HumanDecision, &json!({})))
            .unwrap();
        f.store
            .write(|w| w.answer_decision(&d, &json!("ship it"), Answerer::Person))
            .unwrap();
        let continued = Resume::Continue {
            node_id: "a".into(),
            attempt_id: a.clone(),
        };
        let act = f.activate(&run_id);
        assert_eq!(act.resume, continued, "{what}");
        let rec = f.store.write(|w| lose(w, &act.claim)).unwrap();
        assert_eq!(rec.status, RunStatus::Queued, "{what}");
        f.assert_clean();
        let act = f.activate(&run_id);
        assert_eq!(act.resume, continued, "{what}: the answer was dropped");
        let answer = f.store.write(|w| w.answer_for_attempt(&a)).unwrap();
        assert_eq!(answer, Some(json!("ship it")), "{what}");
        assert_eq!(f.store.decisions(&run_id).unwrap().len(), 1, "{what}");
        f.store
            .write(|w| w.complete(&act.claim, &a, &json!({"answer": "ship it"}), &json!(1)))
            .unwrap();
        f.assert_clean();
    }
}

/// The validation child accepted a submission and goes away (crash, host restart or stop)
/// before it proposes the transition: the accepted result is committed, so the next child
/// continues the attempt with it (`accepted`), and the model is not asked again.
#[test]
fn an_accepted_submission_survives_the_loss_of_the_child_that_accepted_it() {
    for (what, lose) in CHILD_LOSSES {
        let mut f = Fixture::new();
        let (run_id, a, i, s) = submitted(&mut f);
        let act = activate_to_validate(&mut f, &run_id, &a, &s);
        f.store.write(|w| w.settle(&act.claim, &s, Ok(()))).unwrap();
        let rec = f.store.write(|w| lose(w, &act.claim)).unwrap();
        assert_eq!(rec.status, RunStatus::Queued, "{what}");
        f.assert_clean();
        let act = f.activate(&run_id);
        assert_eq!(
            act.resume,
            Resume::Accepted {
                node_id: "a".into(),
                attempt_id: a.clone(),
                submission_id: s.clone(),
            },
            "{what}: the accepted submission was dropped"
        );
        assert_eq!(act.mode, ChildMode::Run, "{what}");
        assert_eq!(f.store.submissions(&i).unwrap().len(), 1, "{what}");
        assert_eq!(
            f.store.interactions(Some(&run_id), None).unwrap().len(),
            1,
            "{what}: asked once"
        );
        f.store
            .write(|w| w.complete(&act.claim, &a, &json!(1), &json!(1)))
            .unwrap();
        f.assert_clean();
    }
}

/// A decision whose deadline passed is a committed outcome too: the child that routes the
/// timeout goes away (crash, host restart or stop) before it proposes the transition, and the
/// next child still routes `timed_out` for the same attempt. Before, a dead host's recovery
/// interrupted the attempt and the node ran again with a fresh deadline: the person was asked
/// again, and a crash postponed the deadline (found by the host's crash matrix).
#[test]
fn an_expired_decision_survives_the_loss_of_the_child_that_routes_it() {
    for (what, lose) in CHILD_LOSSES {
        let mut f = Fixture::new();
        let run_id = f.start();
        let act = f.activate(&run_id);
        let a = f
            .store
            .write(|w| w.node_started(&act.claim, "a", Some(T0 + 1_000)))
            .unwrap();
        f.store
            .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::HumanDecision, &json!({})))
            .unwrap();
        f.clock.advance(1_000);
        f.store.write(|w| w.expire_due_decisions()).unwrap();
        let expired = Resume::InteractionExpired {
            node_id: "a".into(),
            attempt_id: a.clone(),
        };
        let act = f.activate(&run_id);
        assert_eq!(act.resume, expired, "{what}");
        let rec = f.store.write(|w| lose(w, &act.claim)).unwrap();
        assert_eq!(rec.status, RunStatus::Queued, "{what}");
        f.assert_clean();
        let act = f.activate(&run_id);
        assert_eq!(act.resume, expired, "{what}: the deadline was forgotten");
        assert_eq!(f.store.decisions(&run_id).unwrap().len(), 1, "{what}");
        f.store
            .write(|w| {
                w.fail(
                    &act.claim,
                    Some(&a),
                    &AttemptOutcome::TimedOut,
                    "node a passed its deadline",
                )
            })
            .unwrap();
        f.assert_clean();
    }
}

/// A decision waits at most until its attempt's deadline (the node's `timeout_ms`): the host
/// expires it then and the run resumes to record the attempt timed out. An answer after the
/// deadline is refused with a typed error and changes nothing; one in time stands, and the
/// deadline no longer applies to the attempt that continues with it.
#[test]
fn a_decision_expires_at_its_node_deadline_and_a_late_answer_is_refused() {
    let mut f = Fixture::new();
    let run_id = f.start();
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(T0 + 1_000)))
        .unwrap();
    let d = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::HumanDecision, &json!({})))
        .unwrap();
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        Some(T0 + 1_000),
        "the host wakes up for the decision's deadline"
    );
    f.clock.advance(1_000);
    let before = f.store.canonical_dump().unwrap();
    let err = f
        .store
        .write(|w| w.answer_decision(&d, &json!("yes"), Answerer::Person))
        .unwrap_err();
    assert!(matches!(err, StoreError::DeadlinePassed { .. }), "{err:?}");
    assert_eq!(f.store.canonical_dump().unwrap(), before);
    let expired = f.store.write(|w| w.expire_due_decisions()).unwrap();
    assert_eq!(expired, vec![(d.clone(), run_id.clone())]);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    assert_eq!(f.store.decisions(&run_id).unwrap()[0].status, "cancelled");
    f.assert_clean();
    let act = f.activate(&run_id);
    assert_eq!(
        act.resume,
        Resume::InteractionExpired {
            node_id: "a".into(),
            attempt_id: a.clone()
        }
    );
    f.store
        .write(|w| {
            w.fail(
                &act.claim,
                Some(&a),
                &AttemptOutcome::TimedOut,
                "node a passed its deadline",
            )
        })
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::TimedOut);
    f.assert_clean();

    // Answered in time: the continuing attempt has no deadline left to drop the answer.
    let run_id = f.start();
    let act = f.activate(&run_id);
    let deadline = f.store.now_ms() + 1_000;
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(deadline)))
        .unwrap();
    let d = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::Checkpoint, &json!({})))
        .unwrap();
    f.store
        .write(|w| w.answer_decision(&d, &json!("yes"), Answerer::Model))
        .unwrap();
    f.clock.advance(5_000);
    assert!(f
        .store
        .write(|w| w.expire_due_decisions())
        .unwrap()
        .is_empty());
    let act = f.activate(&run_id);
    assert!(
        matches!(act.resume, Resume::Continue { .. }),
        "{:?}",
        act.resume
    );
    assert_eq!(f.store.open_attempt_deadline(&run_id).unwrap(), None);
    assert_eq!(f.store.next_node_deadline(HOST).unwrap(), None);
    f.assert_clean();
}

/// A submission after its request's deadline is refused (the request is about to expire);
/// a result accepted in time is not dropped by the deadline that follows.
#[test]
fn a_submission_after_the_deadline_is_refused_and_an_accepted_one_stands() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, Some(T0 + 500));
    f.clock.advance(500);
    let before = f.store.canonical_dump().unwrap();
    let err = f
        .store
        .write(|w| w.submit(&i, &a, &json!(1), None))
        .unwrap_err();
    assert!(matches!(err, StoreError::DeadlinePassed { .. }), "{err:?}");
    assert_eq!(f.store.canonical_dump().unwrap(), before);
    assert_eq!(
        f.store.write(|w| w.expire_due_interactions()).unwrap(),
        vec![(i, run_id.clone())]
    );
    f.assert_clean();

    let run_id2 = f.start();
    let act = f.activate(&run_id2);
    let deadline = f.store.now_ms() + 1_000;
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(deadline)))
        .unwrap();
    let i = f.ask(&act.claim, &a, Some(deadline));
    let s = f
        .store
        .write(|w| w.submit(&i, &a, &json!(1), None))
        .unwrap();
    let act = activate_to_validate(&mut f, &run_id2, &a, &s);
    f.store.write(|w| w.settle(&act.claim, &s, Ok(()))).unwrap();
    f.clock.advance(5_000);
    assert_eq!(f.store.open_attempt_deadline(&run_id2).unwrap(), None);
    f.assert_clean();
}

/// A run stopped for review (here: its validation children kept dying) cannot take a
/// submission, so its request is not offered to the session's model as pending.
#[test]
fn a_request_of_a_run_in_review_is_not_listed_for_its_session() {
    let mut f = Fixture::new();
    let (run_id, a, i, _) = submitted(&mut f);
    for loss in 1..=DEFAULT_MAX_CHILD_LOSSES {
        let act = f.activate(&run_id);
        f.store
            .write(|w| w.child_lost(&act.claim, "validator crashed"))
            .unwrap();
        if loss < DEFAULT_MAX_CHILD_LOSSES {
            f.store
                .write(|w| w.submit(&i, &a, &json!(loss), None))
                .unwrap();
        }
    }
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Review);
    assert_eq!(
        f.store.interactions(None, Some("session-1")).unwrap(),
        vec![],
        "nothing the model could answer"
    );
    assert_eq!(f.store.interactions(Some(&run_id), None).unwrap().len(), 1);
    f.assert_clean();
}

/// A detached run's requests are answered by its bridge (which reads them from `run.status`),
/// never by a Pi session: not even its origin session lists them.
#[test]
fn a_request_of_a_detached_run_is_not_listed_for_its_origin_session() {
    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        execution_mode: ExecutionMode::Detached,
        ..common::new_run(Some("session-1"))
    });
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let i = f.ask(&act.claim, &a, None);
    assert_eq!(
        f.store.interactions(None, Some("session-1")).unwrap(),
        vec![]
    );
    let listed = f.store.interactions(Some(&run_id), None).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].interaction_id, i);
    assert_eq!(listed[0].status, "pending");
    f.assert_clean();
}

/// `run.detach` on an interactive run waiting on its session's step: the step leaves the
/// session's list (a bridge serves it now), the run says `detached` and records the event; a
/// second detach writes nothing; a run that ended is refused.
#[test]
fn detaching_a_run_takes_its_steps_from_its_session_once_and_never_after_it_ended() {
    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        execution_mode: ExecutionMode::Interactive,
        ..common::new_run(Some("session-1"))
    });
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let i = f.ask(&act.claim, &a, None);
    let listed = |f: &Fixture| f.store.interactions(None, Some("session-1")).unwrap();
    assert_eq!(listed(&f).len(), 1, "the session serves the step");
    let revision = f.store.run_view(&run_id).unwrap().unwrap().revision;
    assert!(f.store.write(|w| w.detach(&run_id)).unwrap());
    assert_eq!(listed(&f), vec![], "no longer the session's");
    let view = f.store.run_view(&run_id).unwrap().unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().execution_mode, "detached");
    assert_eq!(view.revision, revision + 1);
    assert_eq!(
        view.status, "waiting",
        "the step still waits, now for a bridge"
    );
    let events = f.store.events(&run_id, revision).unwrap();
    assert_eq!(
        events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["detached"]
    );
    let on_run = f.store.interactions(Some(&run_id), None).unwrap();
    assert_eq!(
        (on_run[0].interaction_id.as_str(), on_run[0].status.as_str()),
        (i.as_str(), "pending")
    );
    // Again: nothing written.
    assert!(!f.store.write(|w| w.detach(&run_id)).unwrap());
    assert_eq!(
        f.store.run_view(&run_id).unwrap().unwrap().revision,
        revision + 1
    );
    f.assert_clean();
    // A run that ended stays as it ended.
    f.store
        .write(|w| w.cancel(&run_id, Fence::Unclaimed, "stop"))
        .unwrap();
    let refused = f.store.write(|w| w.detach(&run_id)).unwrap_err();
    assert!(
        matches!(refused, StoreError::InvalidTransition { .. }),
        "{refused:?}"
    );
    f.assert_clean();
}

/// A notify node that runs again after its child was lost (its transition never committed)
/// adds no second message: the message's identity is the run, the node and the visit. A loop
/// that enters the node again is a new visit with a new message (found by the host's crash
/// matrix: a crash after the message's commit delivered it twice).
#[test]
fn a_notify_node_rerun_after_a_crash_adds_no_second_message() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.notify(&act.claim, &json!({"note": "hello"})))
        .unwrap();
    f.store
        .write(|w| w.child_lost(&act.claim, "crashed"))
        .unwrap();
    let act = f.activate(&run_id);
    let again = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    assert_ne!(again, a, "a new attempt of the same visit");
    f.store
        .write(|w| w.notify(&act.claim, &json!({"note": "hello"})))
        .unwrap();
    let notes = |f: &Fixture| {
        f.store
            .messages(&run_id)
            .unwrap()
            .into_iter()
            .filter(|m| m.kind == "notify")
            .count()
    };
    assert_eq!(notes(&f), 1, "the rerun's message is the first one");
    f.assert_clean();
    // The next visit of the node (a loop back to it) tells the session again.
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&again, "b")))
        .unwrap();
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&t.next_attempt_id, "a")))
        .unwrap();
    let _ = t;
    f.store
        .write(|w| w.notify(&act.claim, &json!({"note": "hello"})))
        .unwrap();
    assert_eq!(notes(&f), 2, "a new visit, a new message");
    f.assert_clean();
}

/// A run without an origin session keeps its notify and terminal messages (for `run.status`
/// and the viewer), and no session's claim ever takes them; a session's run still sends its
/// own to that session.
#[test]
fn a_sessionless_runs_messages_are_kept_and_never_claimed() {
    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        execution_mode: ExecutionMode::Detached,
        ..common::new_run(None)
    });
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let id = f
        .store
        .write(|w| w.notify(&act.claim, &json!({"message": "half way"})))
        .unwrap();
    f.store
        .write(|w| w.complete(&act.claim, &a, &json!(1), &json!("done")))
        .unwrap();
    let (kept, count) = f.store.newest_messages(&run_id, 20).unwrap();
    let kinds: Vec<_> = kept.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, ["notify", "terminal"], "oldest first");
    assert_eq!(count, 2);
    assert_eq!(kept[0].message_id, id);
    assert_eq!(kept[0].content, json!({"message": "half way"}));
    assert_eq!(kept[1].content["status"], json!("completed"));
    assert!(kept.iter().all(|m| m.origin_session.is_none()), "{kept:?}");
    // The newest one alone, when fewer are asked for.
    let (newest, count) = f.store.newest_messages(&run_id, 1).unwrap();
    assert_eq!((newest[0].kind.as_str(), count), ("terminal", 2));
    // A session's own run's messages are claimed; the sessionless run's never are.
    let (own, own_act, own_attempt) = f.running();
    f.store
        .write(|w| w.notify(&own_act.claim, &json!({"message": "mine"})))
        .unwrap();
    f.store
        .write(|w| w.complete(&own_act.claim, &own_attempt, &json!(1), &json!(1)))
        .unwrap();
    for session in ["session-1", "", "null"] {
        let claimed = f
            .store
            .write(|w| w.claim_messages(session, "pi-1", None, 100, 60_000, 1 << 20))
            .unwrap();
        assert!(
            claimed.messages.iter().all(|m| m.run_id == own),
            "session {session:?} claimed {:?}",
            claimed.messages
        );
        if session == "session-1" {
            assert_eq!(claimed.messages.len(), 2, "its notify and terminal");
        }
    }
    f.assert_clean();
}

const PERSON: Provenance<'static> = Provenance {
    by: "ana",
    reason: "fixed the config",
};

/// Review is not a dead end: a person retries the current node (the losses forgotten, an
/// event with who and why), and a retry is refused while an effect is uncertain.
#[test]
fn a_person_retries_a_run_in_review_and_its_node_runs_again() {
    let mut f = Fixture::new();
    let run_id = f.start();
    for _ in 0..DEFAULT_MAX_CHILD_LOSSES {
        let act = f.activate(&run_id);
        f.store
            .write(|w| w.node_started(&act.claim, "a", None))
            .unwrap();
        f.store
            .write(|w| w.child_lost(&act.claim, "segfault"))
            .unwrap();
    }
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Review);
    f.store
        .write(|w| w.retry_from_review(&run_id, PERSON))
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    assert_eq!(
        f.store.ready_runs(f.store.now_ms(), 10).unwrap(),
        vec![run_id.clone()]
    );
    let events = f.store.events(&run_id, 0).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "retried");
    assert_eq!(
        last.data,
        json!({"by": "ana", "reason": "fixed the config"})
    );
    // The node runs again; one more loss does not send it straight back to review.
    let act = f.activate(&run_id);
    f.store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let rec = f
        .store
        .write(|w| w.child_lost(&act.claim, "segfault"))
        .unwrap();
    assert_eq!(rec.status, RunStatus::Queued, "the losses were forgotten");
    // Not in review: refused.
    assert_invalid(&mut f, "retry a queued run", |w| {
        w.retry_from_review(&run_id, PERSON)
    });
    f.assert_clean();
}

/// An uncertain effect is resolved by a person, never guessed: `applied` with their receipt
/// (a later reserve of the key returns it, nothing is applied again) or `failed`; then the run
/// continues. A retry before that is refused.
#[test]
fn a_person_resolves_an_uncertain_effect_and_the_run_continues() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let effect = f.reserve_and_apply(&act.claim, &a, "charge", RetryContract::Never);
    f.clock.advance(LEASE_MS + 1);
    f.store.write(|w| w.recover_expired()).unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Review);
    assert_invalid(&mut f, "retry with an uncertain effect", |w| {
        w.retry_from_review(&run_id, PERSON)
    });
    assert!(matches!(
        f.store.write(|w| w.resolve_effect(
            &run_id,
            "eff-nope",
            &EffectResult::Failed { error: "x".into() },
            PERSON
        )),
        Err(StoreError::NotFound { .. })
    ));
    f.store
        .write(|w| {
            w.resolve_effect(
                &run_id,
                &effect,
                &EffectResult::Applied {
                    receipt: json!({"charge": "ch_1"}),
                },
                PERSON,
            )
        })
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    let last = f.store.events(&run_id, 0).unwrap().pop().unwrap();
    assert_eq!(last.kind, "effect_resolved");
    assert_eq!(last.data["state"], "applied");
    assert_eq!(last.data["by"], "ana");
    // Resolved once: a second resolution is refused.
    assert_invalid(&mut f, "resolve a settled effect", |w| {
        w.resolve_effect(
            &run_id,
            &effect,
            &EffectResult::Failed { error: "no".into() },
            PERSON,
        )
    });
    // The node runs again and finds the person's receipt: nothing is applied twice.
    let act = f.activate(&run_id);
    let a2 = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let again = f
        .store
        .write(|w| w.reserve_effect(&act.claim, &a2, "charge", "fp", RetryContract::Never))
        .unwrap();
    assert_eq!(
        again,
        Reservation::AlreadyApplied {
            effect_id: effect.clone(),
            receipt: json!({"charge": "ch_1"}),
        }
    );
    f.assert_clean();
}

#[test]
fn a_request_given_up_fails_its_attempt_and_routes_or_fails_the_run() {
    let mut f = Fixture::new();
    // Routed: the attempt fails, the run parks at the next node for a fresh child.
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, None);
    let stale = f
        .store
        .write(|w| w.fail_interaction(&i, "att-old", "gave up", Some(("b", None)), "ctl"))
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::StaleAttempt { .. }),
        "{stale:?}"
    );
    f.store
        .write(|w| w.fail_interaction(&i, &a, "no submission", Some(("b", None)), "ctl"))
        .unwrap();
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    assert_eq!(run.current_node.as_deref(), Some("b"));
    let attempts = f.store.attempts(&run_id).unwrap();
    let first = attempts.iter().find(|x| x.attempt_id == a).unwrap();
    assert_eq!(
        (first.status.as_str(), first.error.as_deref()),
        ("failed", Some("no submission"))
    );
    assert_eq!(
        f.store.interactions(Some(&run_id), None).unwrap()[0].status,
        "cancelled"
    );
    // Given up once: a second time (or a submission) is refused and changes nothing.
    assert_invalid(&mut f, "fail twice", |w| {
        w.fail_interaction(&i, &a, "again", None, "ctl")
    });
    assert_invalid(&mut f, "submit after", |w| {
        w.submit(&i, &a, &json!(1), None)
    });
    let act = f.activate(&run_id);
    assert_eq!(
        act.resume,
        Resume::Fresh {
            node_id: Some("b".into())
        }
    );
    f.assert_clean();

    // A submission being judged goes first.
    let (_, a2, i2, _) = submitted(&mut f);
    assert_invalid(&mut f, "fail while validating", |w| {
        w.fail_interaction(&i2, &a2, "gave up", None, "ctl")
    });

    // Without a route the run fails with the reason.
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, None);
    f.store
        .write(|w| w.fail_interaction(&i, &a, "no submission", None, "ctl"))
        .unwrap();
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref(), Some("no submission"));
    f.assert_clean();
}

#[test]
fn a_progress_update_of_a_pending_request_is_an_event_and_leaves_it_pending() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, None);
    let revision = f.store.run(&run_id).unwrap().revision;
    f.store
        .write(|w| w.interaction_progress(&i, &a, "half done", &json!({"files": 3})))
        .unwrap();
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(
        (run.status, run.revision),
        (RunStatus::Waiting, revision + 1)
    );
    assert_eq!(
        f.store.interactions(Some(&run_id), None).unwrap()[0].status,
        "pending"
    );
    let stale = f
        .store
        .write(|w| w.interaction_progress(&i, "att-old", "x", &json!(null)))
        .unwrap_err();
    assert!(
        matches!(stale, StoreError::StaleAttempt { .. }),
        "{stale:?}"
    );
    f.store
        .write(|w| w.submit(&i, &a, &json!(1), None))
        .unwrap();
    assert_invalid(&mut f, "update while validating", |w| {
        w.interaction_progress(&i, &a, "late", &json!(null))
    });
    f.assert_clean();
}

/// A run whose validation children kept dying is in review with its request pending (each
/// death rejected the submission it judged) and its attempt waiting. Returns (run, attempt,
/// interaction).
fn review_after_validation_losses(
    f: &mut Fixture,
    deadline: Option<i64>,
) -> (String, String, String) {
    let (run_id, act, a) = f.running();
    let i = f.ask(&act.claim, &a, deadline);
    for loss in 1..=DEFAULT_MAX_CHILD_LOSSES {
        f.store
            .write(|w| w.submit(&i, &a, &json!(loss), None))
            .unwrap();
        let act = f.activate(&run_id);
        f.store
            .write(|w| w.child_lost(&act.claim, "validator crashed"))
            .unwrap();
    }
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Review);
    (run_id, a, i)
}

/// Retrying a run in review whose attempt waits on an unanswered request makes it wait for the
/// answer again, on the same attempt: it is never activated as if the request were answered
/// (a `continue` makes the runtimes close the node as succeeded with a null answer). The
/// next submission is judged on that attempt.
#[test]
fn a_retried_review_run_does_not_resume_its_unanswered_request_as_answered() {
    let mut f = Fixture::new();
    let (run_id, a, i) = review_after_validation_losses(&mut f, None);
    f.store
        .write(|w| w.retry_from_review(&run_id, PERSON))
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Waiting);
    assert_eq!(
        f.store.ready_runs(f.store.now_ms(), 10).unwrap(),
        Vec::<String>::new(),
        "no child starts before the request is answered"
    );
    let requests = f.store.interactions(Some(&run_id), None).unwrap();
    assert_eq!(
        (
            requests.len(),
            requests[0].status.as_str(),
            requests[0].attempt_id.as_str()
        ),
        (1, "pending", a.as_str()),
        "the request stays pending on its attempt"
    );
    f.assert_clean();
    let s = f
        .store
        .write(|w| w.submit(&i, &a, &json!("the answer"), None))
        .unwrap();
    activate_to_validate(&mut f, &run_id, &a, &s);
    f.assert_clean();
}

/// Activation never continues an attempt whose request nobody answered, whatever led there
/// (here a queued row written behind the store's back): it is refused, and `diagnose` names
/// the run.
#[test]
fn activation_refuses_to_continue_an_unanswered_request() {
    let mut f = Fixture::new();
    let (run_id, _a, i) = f.waiting();
    f.corrupt(&format!(
        "UPDATE runs SET status = 'queued' WHERE run_id = '{run_id}';
         UPDATE queue SET state = 'ready' WHERE run_id = '{run_id}';"
    ));
    let codes: Vec<_> = f
        .store
        .diagnose(f.store.now_ms())
        .unwrap()
        .into_iter()
        .map(|x| x.code)
        .collect();
    assert!(
        codes.iter().any(|c| c == "pending_request_on_active_run"),
        "{codes:?}"
    );
    match f.store.write(|w| w.activate(&run_id, HOST)) {
        Err(StoreError::InvalidTransition { detail, .. }) => {
            assert!(detail.contains(&i), "{detail}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A validation child that finds the workflow's source changed stops the run for review. The
/// submission it was judging stays for the retry: once the person restores the source and
/// retries, the next child judges it and the run moves on (it was left `validating` on an
/// interrupted attempt, and every later step of the run was refused).
#[test]
fn review_during_validation_does_not_leave_a_submission_validating_forever() {
    let mut f = Fixture::new();
    let (run_id, a, _i, s) = submitted(&mut f);
    let act = activate_to_validate(&mut f, &run_id, &a, &s);
    f.store
        .write(|w| w.send_to_review(&act.claim, "source_changed"))
        .unwrap();
    f.assert_clean();
    f.store
        .write(|w| w.retry_from_review(&run_id, PERSON))
        .unwrap();
    let act = activate_to_validate(&mut f, &run_id, &a, &s);
    f.store.write(|w| w.settle(&act.claim, &s, Ok(()))).unwrap();
    f.store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .expect("the run moves on");
    f.assert_clean();
}

/// `diagnose` reports a submission left `validating` on an attempt that no child will open
/// again (what a review during validation used to leave).
#[test]
fn diagnose_reports_a_validating_submission_nobody_will_judge() {
    let mut f = Fixture::new();
    let (run_id, a, _i, s) = submitted(&mut f);
    f.assert_clean();
    f.corrupt(&format!(
        "UPDATE attempts SET status = 'interrupted' WHERE attempt_id = '{a}';
         UPDATE runs SET status = 'review' WHERE run_id = '{run_id}';
         UPDATE queue SET state = 'review' WHERE run_id = '{run_id}';"
    ));
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    let found = findings
        .iter()
        .find(|x| x.code == "validating_submission_without_judge")
        .unwrap_or_else(|| panic!("{findings:#?}"));
    assert_eq!(found.ids, vec![s, a]);
}

/// A person answered a checkpoint; the next child finds the workflow's source changed and
/// stops the run for review. The answer stays: after the retry the attempt continues with it,
/// as after a lost child (the attempt used to be interrupted, and the node asked again).
#[test]
fn review_for_a_changed_source_keeps_an_answered_decision() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let d = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::Checkpoint, &json!({})))
        .unwrap();
    f.store
        .write(|w| w.answer_decision(&d, &json!("ship it"), Answerer::Person))
        .unwrap();
    let continued = Resume::Continue {
        node_id: "a".into(),
        attempt_id: a.clone(),
    };
    let act = f.activate(&run_id);
    assert_eq!(act.resume, continued);
    f.store
        .write(|w| w.send_to_review(&act.claim, "source_changed: the graph differs"))
        .unwrap();
    f.assert_clean();
    f.store
        .write(|w| w.retry_from_review(&run_id, PERSON))
        .unwrap();
    let act = f.activate(&run_id);
    assert_eq!(
        act.resume, continued,
        "the answered attempt continues with its answer"
    );
    f.assert_clean();
}

/// The host's deadline pass (`run_due_work`): every expiry, then expired claims.
fn deadline_pass(f: &mut Fixture) -> StoreResult<()> {
    f.store.write(|w| {
        w.expire_due_interactions()?;
        w.expire_due_decisions()?;
        w.recover_expired_claims(Some(HOST))?;
        Ok(())
    })
}

/// A run waiting on a human decision at node `a` whose deadline is `deadline`: (run, decision).
fn waiting_on_decision(f: &mut Fixture, deadline: i64) -> (String, String) {
    let run_id = f.start();
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(deadline)))
        .unwrap();
    let d = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::HumanDecision, &json!({})))
        .unwrap();
    (run_id, d)
}

/// One expiry that fails undoes only itself: the other runs' requests expire in the same pass.
/// A run whose due request is refused for good (here its row is unreadable) stops for review
/// with the reason, so it is not tried again at every wake-up (the store's next deadline is
/// not in the past); a run whose second due request stopped being due when the first one
/// expired is simply queued.
#[test]
fn one_run_with_two_due_requests_does_not_block_every_other_runs_deadlines() {
    let mut f = Fixture::new();
    let deadline = T0 + 60_000;
    let (broken, broken_decision) = waiting_on_decision(&mut f, deadline);
    f.corrupt(&format!(
        "UPDATE decisions SET request = 'not json' WHERE decision_id = '{broken_decision}'"
    ));
    let (other_decision_run, _) = waiting_on_decision(&mut f, deadline);
    let (twice, twice_attempt) = {
        let (run_id, act, a) = f.running();
        f.ask(&act.claim, &a, Some(deadline));
        (run_id, a)
    };
    // A second due request on the same attempt (a contradiction only a bug or a hand-edited
    // database makes): expiring the first queues the run, so the second is no longer due.
    f.corrupt(&format!(
        "INSERT INTO interactions (interaction_id, run_id, attempt_id, node_id, origin_session,
                                   kind, request, deadline_at, status, created_at)
         VALUES ('int-second', '{twice}', '{twice_attempt}', 'a', 'session-1', 'agent', '{{}}',
                 {deadline}, 'pending', {T0})"
    ));
    let (other_interaction_run, _, _) = {
        let (run_id, act, a) = f.running();
        let i = f.ask(&act.claim, &a, Some(deadline));
        (run_id, a, i)
    };
    f.clock.advance(61_000);
    deadline_pass(&mut f).expect("the deadline pass commits");
    let status = |f: &Fixture, run: &str| f.store.run(run).unwrap().status;
    assert_eq!(status(&f, &other_decision_run), RunStatus::Queued);
    assert_eq!(status(&f, &other_interaction_run), RunStatus::Queued);
    assert_eq!(status(&f, &twice), RunStatus::Queued);
    assert_eq!(status(&f, &broken), RunStatus::Review);
    let reason = f
        .store
        .run(&broken)
        .unwrap()
        .review_reason
        .unwrap_or_default();
    assert!(reason.contains(&broken_decision), "{reason}");
    assert!(
        f.store
            .next_deadline(f.store.now_ms())
            .unwrap()
            .is_none_or(|at| at > f.store.now_ms()),
        "nothing is due any more: the host sleeps"
    );
    deadline_pass(&mut f).expect("a second pass has nothing to do");
}

/// An expiry that fails because the database does (here a trigger makes SQLite refuse the
/// write) says nothing about the request: the pass fails and is tried again at the next
/// wake-up, and the run is not sent to review, where it would need a person.
#[test]
fn an_expiry_the_database_fails_is_tried_again_not_sent_to_review() {
    let mut f = Fixture::new();
    let deadline = T0 + 60_000;
    let (run_id, _) = waiting_on_decision(&mut f, deadline);
    f.corrupt(
        "CREATE TRIGGER disk_trouble BEFORE UPDATE ON decisions
         BEGIN SELECT RAISE(ABORT, 'disk trouble'); END",
    );
    f.clock.advance(61_000);
    let failed = deadline_pass(&mut f).expect_err("the pass fails with the database");
    assert!(matches!(failed, StoreError::Database(_)), "{failed:?}");
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Waiting);
    f.corrupt("DROP TRIGGER disk_trouble");
    deadline_pass(&mut f).expect("the next pass commits");
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
}

/// A running run of a graph snapshot with `max_steps` 3 and a mount `m` whose own limit is 1.
fn running_with_step_limits(f: &mut Fixture) -> (String, Activation, String) {
    let run_id = f.start_with(NewRun {
        definition: Some(json!({
            "name": "loop", "start": "a", "max_steps": 3, "mounts": {"m": {"max_steps": 1}},
            "nodes": {}, "edges": []
        })),
        ..new_run(Some("session-1"))
    });
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    (run_id, act, a)
}

fn assert_step_limit<T: std::fmt::Debug>(
    f: &mut Fixture,
    what: &str,
    needle: &str,
    op: impl FnOnce(&mut WriteTx<'_>) -> StoreResult<T>,
) {
    let before = f.store.canonical_dump().unwrap();
    match f.store.write(op) {
        Err(StoreError::StepLimitReached { detail, .. }) => {
            assert!(detail.contains(needle), "{what}: {detail}")
        }
        other => panic!("{what}: expected StepLimitReached, got {other:?}"),
    }
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "{what}: a refusal changed the database"
    );
}

/// The store opens no attempt past the graph's step limits, whoever asks: a transition and a
/// node start are refused alike (nothing written), for the run's `max_steps` and for one
/// invocation of an included workflow's.
#[test]
fn no_attempt_opens_past_the_step_limit() {
    let mut f = Fixture::new();
    let (run_id, act, a) = running_with_step_limits(&mut f);
    // Entering the mount starts an invocation; its second step is one too many.
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "m.x")))
        .unwrap();
    assert_step_limit(&mut f, "a second step inside m", "included as m", |w| {
        w.transition(&act.claim, &step(&t.next_attempt_id, "m.y"))
    });
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&t.next_attempt_id, "b")))
        .unwrap();
    assert_step_limit(&mut f, "a fourth attempt", "maxSteps is 3", |w| {
        w.transition(&act.claim, &step(&t.next_attempt_id, "c"))
    });
    // A park interrupts b's attempt: reopening b is not a step (the graph did not move),
    // and the route past the limit is refused from the reopened attempt just the same.
    f.store.write(|w| w.park(&act.claim, None)).unwrap();
    let act = f.activate(&run_id);
    let b = f
        .store
        .write(|w| w.node_started(&act.claim, "b", None))
        .expect("reopening an interrupted node is not a new step");
    assert_step_limit(
        &mut f,
        "a fourth step after the park",
        "maxSteps is 3",
        |w| w.transition(&act.claim, &step(&b, "c")),
    );
}

/// Giving up on a request routes `failed` like a child would, and a route past the step limit
/// fails the run with the limit's reason, in the same commit.
#[test]
fn a_request_given_up_at_the_step_limit_fails_the_run() {
    let mut f = Fixture::new();
    let (run_id, act, a) = running_with_step_limits(&mut f);
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .unwrap();
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&t.next_attempt_id, "c")))
        .unwrap();
    let i = f.ask(&act.claim, &t.next_attempt_id, None);
    f.store
        .write(|w| {
            w.fail_interaction(
                &i,
                &t.next_attempt_id,
                "no answer",
                Some(("a", None)),
                "ctl",
            )
        })
        .unwrap();
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.error
            .as_deref()
            .unwrap_or_default()
            .contains("maxSteps is 3"),
        "{:?}",
        run.error
    );
    f.assert_clean();
}

/// A park between two nodes (a pause at a boundary, a timeout the host routes) leaves the
/// attempt it opened interrupted, and the next child reopens that node with `node_started`;
/// so does the next child after a lost child or a host restart. That reopening is not a step:
/// a two-node run with `max_steps: 2`, paused once at its boundary, runs its second node.
#[test]
fn reopening_an_interrupted_node_at_the_step_limit_is_not_a_new_step() {
    let mut f = Fixture::new();
    let run_id = f.start_with(NewRun {
        definition: Some(json!({
            "name": "two", "start": "a", "max_steps": 2, "nodes": {}, "edges": []
        })),
        ..new_run(Some("session-1"))
    });
    let act = f.activate(&run_id);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    f.store
        .write(|w| w.transition(&act.claim, &step(&a, "b")))
        .unwrap();
    // Paused at the boundary: the run parks, b's attempt is interrupted.
    f.store.write(|w| w.park(&act.claim, None)).unwrap();
    let act = f.activate(&run_id);
    let reopened = f.store.write(|w| w.node_started(&act.claim, "b", None));
    assert!(
        reopened.is_ok(),
        "the second node of a two-step run could not run after a pause: {reopened:?}"
    );
}

#[test]
fn a_timer_is_the_hosts_next_deadline_fires_once_due_and_its_attempt_continues_after_a_loss() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let set = f
        .store
        .write(|w| w.wait_until(&act.claim, &a, Wake::After(60_000), &json!({"x": 1})))
        .unwrap();
    let now = f.store.now_ms();
    assert_eq!(set.wake_at, now + 60_000);
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(run.wake_at, Some(set.wake_at));
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        Some(set.wake_at)
    );
    // Not due yet: nothing fires, and the run is not ready for a child.
    f.clock.advance(59_999);
    assert_eq!(f.store.write(|w| w.fire_due_timers()).unwrap(), vec![]);
    assert!(f.store.ready_runs(f.store.now_ms(), 10).unwrap().is_empty());
    f.clock.advance(1);
    let fired = f.store.write(|w| w.fire_due_timers()).unwrap();
    assert_eq!(fired, vec![(set.timer_id.clone(), run_id.clone())]);
    assert_eq!(f.store.next_deadline(f.store.now_ms()).unwrap(), None);
    assert_eq!(f.store.run(&run_id).unwrap().wake_at, None);
    let act = f.activate(&run_id);
    let resumed = Resume::TimerFired {
        node_id: "a".into(),
        attempt_id: a.clone(),
    };
    assert_eq!(act.resume, resumed);
    // A child lost after the timer fired: the attempt continues the same way, never waits
    // again nor reruns the node.
    f.store
        .write(|w| w.child_lost(&act.claim, "killed"))
        .unwrap();
    let act = f.activate(&run_id);
    assert_eq!(act.resume, resumed);
    f.assert_clean();
}

#[test]
fn cancelling_a_waiting_run_cancels_its_timer() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.wait_until(&act.claim, &a, Wake::At(0), &Value::Null))
        .unwrap();
    f.store
        .write(|w| w.cancel(&run_id, Fence::Unclaimed, "enough"))
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().wake_at, None);
    assert_eq!(f.store.next_deadline(f.store.now_ms()).unwrap(), None);
    assert_eq!(f.store.write(|w| w.fire_due_timers()).unwrap(), vec![]);
    f.assert_clean();
}

/// A timer of a run an operator's claim holds (mid-cancel) waits for that claim: it is not the
/// host's next deadline before the claim expires, and does not fire under it.
#[test]
fn a_timer_under_a_live_control_claim_waits_for_the_claim_to_expire() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    let set = f
        .store
        .write(|w| w.wait_until(&act.claim, &a, Wake::After(1_000), &json!(null)))
        .unwrap();
    // An earlier timer of another run, which no claim holds, comes first.
    let (other, act2, a2) = f.running();
    f.store
        .write(|w| w.wait_until(&act2.claim, &a2, Wake::After(5_000), &json!(null)))
        .unwrap();
    let control = f
        .store
        .write(|w| w.control_claim(&run_id, "operator"))
        .unwrap();
    let expires = f.store.now_ms() + LEASE_MS;
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        Some(set.wake_at + 4_000)
    );
    f.clock.advance(5_000);
    let fired = f.store.write(|w| w.fire_due_timers()).unwrap();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].1, other);
    assert_eq!(
        f.store.next_deadline(f.store.now_ms()).unwrap(),
        Some(expires)
    );
    f.clock.advance(LEASE_MS);
    let fired = f.store.write(|w| w.fire_due_timers()).unwrap();
    assert_eq!(fired, vec![(set.timer_id, run_id.clone())]);
    drop(control);
}

/// A `worker.wait_until` whose wake time is past what a clock can mean (`until_ms` above
/// 2^63, or `for_ms` as large) is refused (`invalid_input`), not clamped into a timer that
/// fires at once; the run keeps running and a sane wait still parks it.
#[test]
fn a_wake_time_past_the_clocks_range_is_refused() {
    use piw_host::engine::timers::worker_wait_until;
    use piw_host::protocol::payload::WorkerWaitUntil;
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    for (until_ms, for_ms) in [
        (Some((1u64 << 63) + 5), None),
        (Some(u64::MAX), None),
        (None, Some(u64::MAX)),
    ] {
        let wait = WorkerWaitUntil {
            for_ms,
            until_ms,
            output: Value::Null,
        };
        let refused = f
            .store
            .write(|w| worker_wait_until(w, &act.claim, &a, &wait))
            .expect_err("refused");
        assert!(
            matches!(refused, piw_host::store::StoreError::InvalidInput(_)),
            "{refused:?}"
        );
        assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Running);
    }
    let wait = WorkerWaitUntil {
        for_ms: None,
        until_ms: Some(u64::try_from(T0).unwrap() + 60_000),
        output: Value::Null,
    };
    let set = f
        .store
        .write(|w| worker_wait_until(w, &act.claim, &a, &wait))
        .unwrap();
    assert_eq!(set.wake_at, T0 + 60_000);
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Waiting);
}
