//! Controllers in the store: registration, resources (versions, generations, bounds,
//! compare-and-swap), the queue of passes (one row per resource, claims fenced by token and
//! deadline, the queue after each outcome, backoff, restarts), effects and child workflow
//! requests idempotent by key, deletion with finalizers, bounded pass records, and
//! `diagnose`'s checks of these tables.
mod common;

use std::sync::Arc;

use common::*;
use piw_host::engine::store::controllers::*;
use piw_host::store::*;
use serde_json::{json, Value};

const PROJECT: &str = "/work/project";
const NAME: &str = "pull-request";

fn registration() -> ControllerRegistration {
    ControllerRegistration {
        project_dir: PROJECT.into(),
        name: NAME.into(),
        source_path: "/work/project/.pi/controllers/pull-request.controller.mjs".into(),
        source_hash: "h1".into(),
        pass_deadline_ms: 60_000,
    }
}

/// A fixture with the controller registered and enabled, and a host epoch.
fn setup() -> (Fixture, i64) {
    let mut f = Fixture::new();
    let epoch = f
        .store
        .write(|w| {
            w.register_controller(&registration())?;
            w.set_controller_enabled(PROJECT, NAME, true)?;
            w.begin_host_epoch(1)
        })
        .unwrap();
    (f, epoch)
}

fn apply(f: &mut Fixture, key: &str, spec: Value) -> (ApplyOutcome, ResourceRecord) {
    f.store
        .write(|w| w.apply_resource(PROJECT, NAME, key, &spec, None))
        .unwrap()
}

fn claim(f: &mut Fixture, uid: &str, epoch: i64) -> (PassFence, PassLaunch) {
    let launch = f.store.write(|w| w.claim_pass(uid, epoch)).unwrap();
    let fence = PassFence {
        resource_uid: uid.into(),
        pass_id: launch.pass_id.clone(),
        token: piw_host::ids::ClaimToken::from_secret(launch.token.expose_secret().to_owned()),
    };
    (fence, launch)
}

fn result(kind: PassResultKind, status: Option<Value>) -> PassResult {
    PassResult {
        kind,
        after_ms: None,
        message: None,
        status,
        finalizers: None,
    }
}

fn controller_error(e: StoreError) -> ControllerStoreError {
    match e {
        StoreError::Controller(e) => e,
        other => panic!("expected a controller refusal, got {other:?}"),
    }
}

#[test]
fn a_spec_advances_the_generation_only_when_it_changes_as_canonical_json() {
    let (mut f, _) = setup();
    let (outcome, r) = apply(&mut f, "acme#1", json!({"a": 1, "b": [1, 2]}));
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!((r.resource_version, r.generation), (1, 1));
    assert_eq!(r.status, None, "no status before the first pass");
    assert_eq!(r.finalizers, Vec::<String>::new());
    let q = f.store.queue_entry(&r.uid).unwrap().unwrap();
    assert_eq!((q.due_at, q.pass.is_none()), (T0, true));

    // The same data in another key order: unchanged.
    let (outcome, same) = apply(&mut f, "acme#1", json!({"b": [1, 2], "a": 1}));
    assert_eq!(outcome, ApplyOutcome::Unchanged);
    assert_eq!(same, r);

    let (outcome, next) = apply(&mut f, "acme#1", json!({"a": 2, "b": [1, 2]}));
    assert_eq!(outcome, ApplyOutcome::Updated);
    assert_eq!((next.resource_version, next.generation), (2, 2));
    assert_eq!(next.uid, r.uid);

    // A write naming an older version is a typed conflict; the current one goes through.
    let err = f
        .store
        .write(|w| w.apply_resource(PROJECT, NAME, "acme#1", &json!({"a": 3}), Some(1)))
        .unwrap_err();
    assert_eq!(
        controller_error(err),
        ControllerStoreError::ResourceConflict {
            controller: NAME.into(),
            key: "acme#1".into(),
            expected: 1,
            actual: 2
        }
    );
    let (_, r3) = f
        .store
        .write(|w| w.apply_resource(PROJECT, NAME, "acme#1", &json!({"a": 3}), Some(2)))
        .unwrap();
    assert_eq!((r3.resource_version, r3.generation), (3, 3));
    // Creating with an expected version 0 is "only if absent".
    let err = f
        .store
        .write(|w| w.apply_resource(PROJECT, NAME, "acme#1", &json!({}), Some(0)))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::ResourceConflict { actual: 3, .. }
    ));
    assert_eq!(
        f.store.resources(PROJECT, Some(NAME)).unwrap().len(),
        1,
        "one resource per key"
    );
    f.assert_clean();
}

#[test]
fn specs_and_statuses_over_one_mebibyte_and_bad_names_are_refused() {
    let (mut f, epoch) = setup();
    let big = json!({ "blob": "x".repeat(MAX_RESOURCE_VALUE_BYTES) });
    let err = f
        .store
        .write(|w| w.apply_resource(PROJECT, NAME, "k", &big, None))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::TooLarge {
            what: "spec",
            limit: MAX_RESOURCE_VALUE_BYTES,
            ..
        }
    ));
    // Just under the limit is kept.
    let fits = json!({ "blob": "x".repeat(MAX_RESOURCE_VALUE_BYTES - 20) });
    let (_, r) = apply(&mut f, "k", fits);
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let err = f
        .store
        .write(|w| w.finish_pass(&fence, &result(PassResultKind::Settled, Some(big.clone()))))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::TooLarge { what: "status", .. }
    ));

    let err = f
        .store
        .write(|w| w.apply_resource(PROJECT, "other", "k", &json!({}), None))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::ControllerNotFound { .. }
    ));
    for bad in ["", "a\u{7}b"] {
        let err = f
            .store
            .write(|w| w.apply_resource(PROJECT, NAME, bad, &json!({}), None))
            .unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{bad:?}: {err}");
    }
    let mut reg = registration();
    reg.name = "Not A Name".into();
    assert!(matches!(
        f.store.write(|w| w.register_controller(&reg)).unwrap_err(),
        StoreError::InvalidInput(_)
    ));
    reg = registration();
    reg.project_dir = "relative".into();
    assert!(matches!(
        f.store.write(|w| w.register_controller(&reg)).unwrap_err(),
        StoreError::InvalidInput(_)
    ));
}

#[test]
fn registering_again_keeps_enabled_and_records_the_new_file() {
    let (mut f, _) = setup();
    let mut reg = registration();
    reg.source_hash = "h2".into();
    reg.pass_deadline_ms = 5_000;
    let c = f.store.write(|w| w.register_controller(&reg)).unwrap();
    assert_eq!(
        (c.enabled, c.source_hash.as_str(), c.pass_deadline_ms),
        (true, "h2", 5_000)
    );
    assert_eq!(f.store.controllers(Some(PROJECT)).unwrap(), vec![c]);
    assert_eq!(f.store.controllers(Some("/elsewhere")).unwrap(), vec![]);
}

#[test]
fn one_pass_at_a_time_and_only_of_an_enabled_controllers_due_resource() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    assert_eq!(f.store.due_resources(T0, 10).unwrap().len(), 1);
    f.store
        .write(|w| w.set_controller_enabled(PROJECT, NAME, false))
        .unwrap();
    assert_eq!(f.store.due_resources(T0, 10).unwrap(), vec![]);
    let err = f.store.write(|w| w.claim_pass(&r.uid, epoch)).unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::NotReady {
            reason: "its controller is disabled",
            ..
        }
    ));
    f.store
        .write(|w| w.set_controller_enabled(PROJECT, NAME, true))
        .unwrap();
    let (fence, launch) = claim(&mut f, &r.uid, epoch);
    assert_eq!(launch.deadline_at, T0 + 60_000);
    assert_eq!(launch.resource, r);
    assert_eq!(f.store.due_resources(T0, 10).unwrap(), vec![], "held");
    let err = f.store.write(|w| w.claim_pass(&r.uid, epoch)).unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::NotReady {
            reason: "another pass holds it",
            ..
        }
    ));
    // The token is stored only as its hash.
    let dump = f.store.canonical_dump().unwrap();
    assert!(!dump.contains(fence.token.expose_secret()));
    assert!(dump.contains(&fence.token.hash()));

    // An event during the pass marks it; a settled pass then gets another at once.
    f.store
        .write(|w| w.reconcile_resource(PROJECT, NAME, "k", "poke"))
        .unwrap();
    let q = f.store.queue_entry(&r.uid).unwrap().unwrap();
    assert!(q.pass.unwrap().requeue_requested);
    f.clock.advance(10);
    let done = f
        .store
        .write(|w| {
            w.finish_pass(
                &fence,
                &result(PassResultKind::Settled, Some(json!({"s": 1}))),
            )
        })
        .unwrap();
    assert_eq!(
        (done.outcome, done.next_due_at),
        (PassOutcome::Settled, Some(T0 + 10))
    );
    f.assert_clean();
}

#[test]
fn the_queue_after_each_outcome() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({"n": 1}));

    // settled: the status written over the version read, no queue row.
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let mut res = result(
        PassResultKind::Settled,
        Some(json!({"observedGeneration": 1})),
    );
    res.finalizers = Some(vec!["pull-request.label".into()]);
    let done = f.store.write(|w| w.finish_pass(&fence, &res)).unwrap();
    let after = done.resource.unwrap();
    assert_eq!(after.resource_version, 2);
    assert_eq!(after.generation, 1, "a status write keeps the generation");
    assert_eq!(after.status, Some(json!({"observedGeneration": 1})));
    assert_eq!(after.finalizers, vec!["pull-request.label".to_owned()]);
    assert_eq!(f.store.queue_entry(&r.uid).unwrap(), None);
    assert_eq!(f.store.due_resources(T0 + 1_000_000, 10).unwrap(), vec![]);
    // The claim ended with the pass.
    let err = f.store.write(|w| w.finish_pass(&fence, &res)).unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::PassLost { .. }
    ));

    // requeueAfter: due then; an unchanged status writes nothing.
    f.store
        .write(|w| w.reconcile_resource(PROJECT, NAME, "k", "poke"))
        .unwrap();
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let mut res = result(
        PassResultKind::Requeue,
        Some(json!({"observedGeneration": 1})),
    );
    res.after_ms = Some(5_000);
    let done = f.store.write(|w| w.finish_pass(&fence, &res)).unwrap();
    assert_eq!(
        done.resource.unwrap().resource_version,
        2,
        "nothing changed"
    );
    assert_eq!(done.next_due_at, Some(T0 + 5_000));
    assert_eq!(f.store.due_resources(T0 + 4_999, 10).unwrap(), vec![]);
    assert_eq!(
        f.store.next_controller_due_after(T0).unwrap(),
        Some(T0 + 5_000)
    );
    assert_eq!(f.store.next_controller_due_after(T0 + 5_000).unwrap(), None);
    f.clock.advance(5_000);

    // errors: growing backoff, counted; a success resets the count.
    let mut dues = Vec::new();
    for n in 1..=3u32 {
        let now = f.store.now_ms();
        let (fence, _) = claim(&mut f, &r.uid, epoch);
        let mut res = result(PassResultKind::Error, None);
        res.message = Some("the forge said 500".into());
        let done = f.store.write(|w| w.finish_pass(&fence, &res)).unwrap();
        let due = done.next_due_at.unwrap();
        let full = FIRST_ERROR_BACKOFF_MS << (n - 1);
        assert!(
            due - now >= full / 2 && due - now <= full,
            "{n}: {}",
            due - now
        );
        let q = f.store.queue_entry(&r.uid).unwrap().unwrap();
        assert_eq!(q.consecutive_errors, n);
        dues.push(due - now);
        f.clock.advance(due - now);
    }
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let done = f
        .store
        .write(|w| w.finish_pass(&fence, &result(PassResultKind::Requeue, Some(json!({})))))
        .unwrap();
    assert_eq!(done.next_due_at, Some(f.store.now_ms()));
    assert_eq!(
        f.store
            .queue_entry(&r.uid)
            .unwrap()
            .unwrap()
            .consecutive_errors,
        0
    );

    let passes = f.store.controller_passes(&r.uid).unwrap();
    let outcomes: Vec<_> = passes.iter().map(|p| p.outcome).collect();
    use PassOutcome::*;
    assert_eq!(
        outcomes,
        vec![Settled, Requeue, Error, Error, Error, Requeue]
    );
    assert_eq!(passes[2].message.as_deref(), Some("the forge said 500"));
    assert!(passes[2]
        .requeue_reason
        .as_deref()
        .unwrap()
        .contains("backoff"));
    f.assert_clean();
}

#[test]
fn a_status_written_over_a_changed_resource_is_a_conflict_and_another_pass_follows() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({"n": 1}));
    let (fence, launch) = claim(&mut f, &r.uid, epoch);
    assert_eq!(launch.resource.resource_version, 1);
    // The spec changes while the pass runs.
    apply(&mut f, "k", json!({"n": 2}));
    let done = f
        .store
        .write(|w| {
            w.finish_pass(
                &fence,
                &result(PassResultKind::Settled, Some(json!({"old": true}))),
            )
        })
        .unwrap();
    assert_eq!(done.outcome, PassOutcome::Conflict);
    let now = done.resource.unwrap();
    assert_eq!(now.status, None, "the stale status was not written");
    assert_eq!((now.resource_version, now.generation), (2, 2));
    assert_eq!(done.next_due_at, Some(T0));
    let q = f.store.queue_entry(&r.uid).unwrap().unwrap();
    assert_eq!(q.consecutive_errors, 0, "a conflict is not an error");
    f.assert_clean();
}

#[test]
fn a_pass_past_its_deadline_loses_its_claim_and_is_recorded_with_a_backoff() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    let (fence, launch) = claim(&mut f, &r.uid, epoch);
    f.clock.advance(60_000);
    // At its deadline the claim no longer holds: nothing it sends is written.
    let err = f
        .store
        .write(|w| {
            w.record_controller_effect(
                &fence,
                &NewControllerEffect {
                    key: "e".into(),
                    kind: "forge-merge".into(),
                    generation: 1,
                    request_fingerprint: "fp".into(),
                },
            )
        })
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::PassLost {
            reason: "its deadline passed",
            ..
        }
    ));
    let ended = f
        .store
        .write(|w| w.end_pass(&r.uid, &launch.pass_id, &PassEnd::Deadline))
        .unwrap()
        .unwrap();
    assert_eq!(ended.outcome, PassOutcome::Deadline);
    let due = ended.next_due_at.unwrap() - f.store.now_ms();
    assert!((500..=1_000).contains(&due), "{due}");
    assert_eq!(
        f.store
            .queue_entry(&r.uid)
            .unwrap()
            .unwrap()
            .consecutive_errors,
        1
    );
    // Ending it again (a late report) does nothing.
    assert_eq!(
        f.store
            .write(|w| w.end_pass(&r.uid, &launch.pass_id, &PassEnd::Deadline))
            .unwrap(),
        None
    );
    assert!(f.store.controller_effects(&r.uid).unwrap().is_empty());
    f.assert_clean();
}

#[test]
fn a_host_restart_requeues_its_passes_without_counting_an_error() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    // The host dies; diagnose then sees a pass no live host holds.
    let next = f.store.write(|w| w.begin_host_epoch(2)).unwrap();
    let codes: Vec<_> = f
        .store
        .diagnose(f.store.now_ms())
        .unwrap()
        .into_iter()
        .map(|x| x.code)
        .collect();
    assert_eq!(codes, vec!["controller_pass_without_live_host"]);
    let requeued = f
        .store
        .write(|w| w.requeue_passes_of_dead_hosts(next))
        .unwrap();
    assert_eq!(requeued, vec![r.uid.clone()]);
    let q = f.store.queue_entry(&r.uid).unwrap().unwrap();
    assert_eq!((q.pass, q.due_at, q.consecutive_errors), (None, T0, 0));
    assert_eq!(
        f.store.controller_passes(&r.uid).unwrap()[0].outcome,
        PassOutcome::Interrupted
    );
    // The old child's claim is gone.
    let err = f
        .store
        .write(|w| w.finish_pass(&fence, &result(PassResultKind::Settled, Some(json!({})))))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::PassLost { .. }
    ));
    // A pass of the new host is not touched by its own restart check.
    claim(&mut f, &r.uid, next);
    assert_eq!(
        f.store
            .write(|w| w.requeue_passes_of_dead_hosts(next))
            .unwrap(),
        Vec::<String>::new()
    );
    f.assert_clean();
}

#[test]
fn effects_are_idempotent_by_key_and_final_once_applied_or_rejected() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let merge = NewControllerEffect {
        key: "merge:1:abc".into(),
        kind: "forge-merge".into(),
        generation: 1,
        request_fingerprint: "fp1".into(),
    };
    let (rec, created) = f
        .store
        .write(|w| w.record_controller_effect(&fence, &merge))
        .unwrap();
    assert!(created);
    assert_eq!(rec.state, ControllerEffectState::Pending);
    let (again, created) = f
        .store
        .write(|w| w.record_controller_effect(&fence, &merge))
        .unwrap();
    assert!(!created);
    assert_eq!(again, rec);
    for (changed, what) in [
        (
            NewControllerEffect {
                request_fingerprint: "fp2".into(),
                ..merge.clone()
            },
            "request",
        ),
        (
            NewControllerEffect {
                kind: "other".into(),
                ..merge.clone()
            },
            "kind",
        ),
        (
            NewControllerEffect {
                generation: 2,
                ..merge.clone()
            },
            "generation",
        ),
    ] {
        let err = f
            .store
            .write(|w| w.record_controller_effect(&fence, &changed))
            .unwrap_err();
        assert_eq!(
            controller_error(err),
            ControllerStoreError::EffectConflict {
                key: merge.key.clone(),
                what
            }
        );
    }
    let settle = |state, external_ref: Option<&str>| EffectSettlement {
        key: merge.key.clone(),
        state,
        external_ref: external_ref.map(str::to_owned),
        error: None,
    };
    let indeterminate = f
        .store
        .write(|w| {
            w.settle_controller_effect(&fence, &settle(ControllerEffectState::Indeterminate, None))
        })
        .unwrap();
    assert_eq!(indeterminate.completed_at, None);
    f.clock.advance(7);
    let applied = f
        .store
        .write(|w| {
            w.settle_controller_effect(&fence, &settle(ControllerEffectState::Applied, Some("sha")))
        })
        .unwrap();
    assert_eq!(
        (
            applied.state,
            applied.external_ref.as_deref(),
            applied.completed_at
        ),
        (ControllerEffectState::Applied, Some("sha"), Some(T0 + 7))
    );
    // The same settlement again returns it; another state is refused.
    assert_eq!(
        f.store
            .write(|w| w
                .settle_controller_effect(&fence, &settle(ControllerEffectState::Applied, None)))
            .unwrap(),
        applied
    );
    let err = f
        .store
        .write(|w| {
            w.settle_controller_effect(&fence, &settle(ControllerEffectState::Rejected, None))
        })
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::EffectFinal {
            state: "applied",
            requested: "rejected",
            ..
        }
    ));
    let err = f
        .store
        .write(|w| {
            w.settle_controller_effect(
                &fence,
                &EffectSettlement {
                    key: "never".into(),
                    ..settle(ControllerEffectState::Applied, None)
                },
            )
        })
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::EffectNotRecorded { .. }
    ));
    assert_eq!(
        f.store
            .write(|w| w.controller_effect(&fence, &merge.key))
            .unwrap(),
        Some(applied)
    );
    // A wrong token is refused.
    let forged = PassFence {
        token: piw_host::ids::ClaimToken::from_secret("0".repeat(64)),
        ..fence.clone()
    };
    let err = f
        .store
        .write(|w| w.controller_effect(&forged, &merge.key))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::PassLost {
            reason: "the token does not match",
            ..
        }
    ));
    f.assert_clean();
}

#[test]
fn a_child_workflow_request_is_found_by_its_key_and_an_interrupted_run_gets_a_new_attempt() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let request = WorkflowRequest {
        request_key: "repair:1:abc".into(),
        workflow: "repair".into(),
        input_fingerprint: "in1".into(),
    };
    let starts = std::cell::RefCell::new(Vec::new());
    let mut start = |w: &mut WriteTx<'_>, request_id: &str, attempt: u32| {
        starts.borrow_mut().push((request_id.to_owned(), attempt));
        w.start_run(&new_run(None))
    };
    let first = f
        .store
        .write(|w| w.ensure_workflow_request(&fence, &request, &mut start))
        .unwrap();
    assert_eq!(
        (first.attempt, first.state),
        (1, WorkflowRequestState::Running)
    );
    let run1 = first.run_id.clone().unwrap();
    let again = f
        .store
        .write(|w| w.ensure_workflow_request(&fence, &request, &mut start))
        .unwrap();
    assert_eq!(again, first, "found by its key: no second run");
    let err = f
        .store
        .write(|w| {
            w.ensure_workflow_request(
                &fence,
                &WorkflowRequest {
                    input_fingerprint: "in2".into(),
                    ..request.clone()
                },
                &mut start,
            )
        })
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::WorkflowConflict { what: "input", .. }
    ));

    // The pass settles; then the run is cancelled: its end queues the resource in the same
    // transaction, and the next ensure starts attempt 2.
    f.store
        .write(|w| w.finish_pass(&fence, &result(PassResultKind::Settled, Some(json!({})))))
        .unwrap();
    assert_eq!(f.store.queue_entry(&r.uid).unwrap(), None);
    f.store
        .write(|w| w.cancel(&run1, Fence::Unclaimed, "stopped").map(|_| ()))
        .unwrap();
    let q = f
        .store
        .queue_entry(&r.uid)
        .unwrap()
        .expect("woken by its run's end");
    assert_eq!(q.reason, format!("child workflow run {run1} changed"));
    // Waking again changes nothing but the reason.
    let woken = f
        .store
        .write(|w| w.wake_resources_of_runs(std::slice::from_ref(&run1)))
        .unwrap();
    assert_eq!(woken, vec![r.uid.clone()]);
    assert_eq!(
        f.store.workflow_requests(&r.uid).unwrap()[0].state,
        WorkflowRequestState::Interrupted
    );
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let second = f
        .store
        .write(|w| w.ensure_workflow_request(&fence, &request, &mut start))
        .unwrap();
    assert_eq!(second.attempt, 2);
    assert_eq!(second.request_id, first.request_id);
    assert_eq!(second.run_ids.len(), 2);
    assert_eq!(second.run_ids[0], run1);
    let starts = starts.into_inner();
    assert_eq!(
        starts,
        vec![(first.request_id.clone(), 1), (first.request_id.clone(), 2)]
    );
    f.assert_clean();
}

#[test]
fn deletion_waits_for_the_finalizers_and_takes_every_row_of_the_resource() {
    let (mut f, epoch) = setup();
    // Without finalizers: gone at once.
    let (_, plain) = apply(&mut f, "plain", json!({}));
    let gone = f
        .store
        .write(|w| w.delete_resource(PROJECT, NAME, "plain", None))
        .unwrap();
    assert_eq!(
        gone,
        DeleteOutcome::Deleted {
            uid: plain.uid.clone()
        }
    );
    assert_eq!(f.store.resource(PROJECT, NAME, "plain").unwrap(), None);
    assert_eq!(f.store.queue_entry(&plain.uid).unwrap(), None);

    // With a finalizer and an effect: it waits for a settled pass that drops the finalizer.
    let (_, r) = apply(&mut f, "k", json!({}));
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    f.store
        .write(|w| {
            w.record_controller_effect(
                &fence,
                &NewControllerEffect {
                    key: "label:1".into(),
                    kind: "forge-label".into(),
                    generation: 1,
                    request_fingerprint: "fp".into(),
                },
            )
        })
        .unwrap();
    let mut res = result(PassResultKind::Settled, Some(json!({})));
    res.finalizers = Some(vec!["pull-request.label".into()]);
    f.store.write(|w| w.finish_pass(&fence, &res)).unwrap();
    f.clock.advance(1);
    let pending = f
        .store
        .write(|w| w.delete_resource(PROJECT, NAME, "k", None))
        .unwrap();
    let DeleteOutcome::Pending { resource } = pending else {
        panic!("{pending:?}")
    };
    assert_eq!(resource.deletion_requested_at, Some(T0 + 1));
    assert_eq!(resource.resource_version, 3);
    // A second request changes nothing but queues a pass; a new spec is refused.
    let again = f
        .store
        .write(|w| w.delete_resource(PROJECT, NAME, "k", None))
        .unwrap();
    assert_eq!(
        again,
        DeleteOutcome::Pending {
            resource: resource.clone()
        }
    );
    let err = f
        .store
        .write(|w| w.apply_resource(PROJECT, NAME, "k", &json!({"new": 1}), None))
        .unwrap_err();
    assert!(matches!(
        controller_error(err),
        ControllerStoreError::BeingDeleted { .. }
    ));

    // A requeued pass that keeps the finalizer keeps the resource.
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    f.store
        .write(|w| {
            w.finish_pass(
                &fence,
                &result(PassResultKind::Requeue, Some(json!({"x": 1}))),
            )
        })
        .unwrap();
    assert!(f.store.resource(PROJECT, NAME, "k").unwrap().is_some());
    // A settled pass that drops it removes everything.
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    let mut res = result(PassResultKind::Settled, Some(json!({})));
    res.finalizers = Some(vec![]);
    let done = f.store.write(|w| w.finish_pass(&fence, &res)).unwrap();
    assert_eq!(
        (done.outcome, done.resource, done.next_due_at),
        (PassOutcome::Settled, None, None)
    );
    assert_eq!(f.store.resource(PROJECT, NAME, "k").unwrap(), None);
    assert!(f.store.controller_effects(&r.uid).unwrap().is_empty());
    assert!(f.store.controller_passes(&r.uid).unwrap().is_empty());
    assert_eq!(f.store.queue_entry(&r.uid).unwrap(), None);
    // Made again, it is another resource.
    let (outcome, reborn) = apply(&mut f, "k", json!({}));
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_ne!(reborn.uid, r.uid);
    assert_eq!((reborn.resource_version, reborn.generation), (1, 1));
    f.assert_clean();
}

#[test]
fn pass_records_are_bounded_per_resource() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    let total = PASSES_KEPT_PER_RESOURCE + 5;
    for _ in 0..total {
        let (fence, _) = claim(&mut f, &r.uid, epoch);
        f.store
            .write(|w| w.finish_pass(&fence, &result(PassResultKind::Requeue, Some(json!({})))))
            .unwrap();
        f.clock.advance(1);
    }
    let passes = f.store.controller_passes(&r.uid).unwrap();
    assert_eq!(passes.len() as u32, PASSES_KEPT_PER_RESOURCE);
    assert_eq!(passes[0].started_at, T0 + 5, "the oldest went first");
}

/// An id source that gives the same byte forever: the backoff's jitter comes from it.
#[derive(Debug)]
struct SameBytes(u8);

impl piw_host::ids::IdSource for SameBytes {
    fn fill(&mut self, out: &mut [u8]) {
        out.fill(self.0);
    }
}

#[test]
fn the_backoffs_jitter_comes_from_the_stores_id_source() {
    for byte in [0x00u8, 0x5a, 0xff] {
        let dir = tempfile::tempdir().unwrap();
        let clock = piw_host::clock::FakeClock::new(T0);
        let config = StoreConfig {
            clock: Arc::new(clock.clone()),
            ids: Arc::new(std::sync::Mutex::new(SameBytes(byte))),
            ..StoreConfig::default()
        };
        let mut store = Store::open(dir.path().join("state.sqlite"), config).unwrap();
        let epoch = store
            .write(|w| {
                w.register_controller(&registration())?;
                w.set_controller_enabled(PROJECT, NAME, true)?;
                w.begin_host_epoch(1)
            })
            .unwrap();
        // The row ids draw from it too: a second resource would collide, so one is enough.
        let (_, r) = store
            .write(|w| w.apply_resource(PROJECT, NAME, "k", &json!({}), None))
            .unwrap();
        let launch = store.write(|w| w.claim_pass(&r.uid, epoch)).unwrap();
        let fence = PassFence {
            resource_uid: r.uid.clone(),
            pass_id: launch.pass_id.clone(),
            token: launch.token,
        };
        let mut res = result(PassResultKind::Error, None);
        res.message = Some("boom".into());
        let done = store.write(|w| w.finish_pass(&fence, &res)).unwrap();
        let expected = error_backoff_ms(1, u64::from_le_bytes([byte; 8]));
        assert_eq!(done.next_due_at, Some(T0 + expected), "byte {byte:#x}");
    }
}

#[test]
fn diagnose_finds_rows_of_a_resource_that_does_not_exist() {
    let (mut f, epoch) = setup();
    let (_, r) = apply(&mut f, "k", json!({}));
    let (fence, _) = claim(&mut f, &r.uid, epoch);
    f.store
        .write(|w| {
            w.record_controller_effect(
                &fence,
                &NewControllerEffect {
                    key: "e1".into(),
                    kind: "forge-merge".into(),
                    generation: 1,
                    request_fingerprint: "fp".into(),
                },
            )
        })
        .unwrap();
    f.assert_clean();
    f.corrupt(&format!(
        "PRAGMA foreign_keys = OFF; DELETE FROM controller_resources WHERE uid = '{}'; \
         INSERT INTO controller_resources (uid, project_dir, controller, resource_key, \
             resource_version, generation, finalizers, spec, created_at, updated_at) \
         VALUES ('res-x', '/nowhere', 'ghost', 'g', 1, 2, '[]', '{{}}', 0, 0)",
        r.uid
    ));
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    let mut codes: Vec<_> = findings.iter().map(|x| x.code.to_string()).collect();
    codes.sort();
    assert_eq!(
        codes,
        vec![
            "controller_row_without_resource",
            "controller_row_without_resource",
            // SQLite's foreign key check sees the same rows (the effect, the queue row, the
            // ghost's controller), without saying what they mean.
            "dangling_reference",
            "dangling_reference",
            "dangling_reference",
            "resource_version_behind_generation",
            "resource_without_controller",
        ]
    );
    let effect = findings
        .iter()
        .find(|x| x.code == "controller_row_without_resource" && x.detail.contains("effect"))
        .unwrap();
    assert_eq!(effect.ids, vec!["e1".to_owned()]);
    assert!(findings.iter().all(|x| !x.repairable));
}
