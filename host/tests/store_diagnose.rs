//! `diagnose` is read-only and names the rows involved; `repair` fixes only what durable
//! evidence decides and never invents successful work.
mod common;

use common::*;
use piw_host::store::*;
use serde_json::json;

fn codes(findings: &[Finding]) -> Vec<&str> {
    findings.iter().map(|f| &*f.code).collect()
}

#[test]
fn diagnose_lists_contradictions_with_ids_and_changes_nothing() {
    let mut f = Fixture::new();
    let (run_id, _act, attempt) = f.running();
    // A "completed" run with its attempt still running and its claim still bound: the shape the
    // original failure left behind, inverted.
    f.corrupt(&format!(
        "UPDATE runs SET status = 'completed', finished_at = 1 WHERE run_id = '{run_id}'"
    ));
    let before = f.store.canonical_dump().unwrap();
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "diagnose is read-only"
    );
    let c = codes(&findings);
    for expected in [
        "claim_on_terminal_run",
        "open_attempt_on_terminal_run",
        "projection_mismatch",
        "queue_state_mismatch",
    ] {
        assert!(c.contains(&expected), "missing {expected} in {c:?}");
    }
    let open = findings
        .iter()
        .find(|x| x.code == "open_attempt_on_terminal_run")
        .unwrap();
    assert_eq!(open.run_id, run_id);
    assert_eq!(open.ids, vec![attempt.clone()]);

    let report = f.store.write(|w| w.repair()).unwrap();
    // A run finished by a corrupted row never told its session how it ended: nothing says
    // what to tell it, so that is left to a person.
    assert_eq!(
        codes(&report.left_for_review),
        vec!["terminal_message_count"],
        "{report:#?}"
    );
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["terminal_message_count"]
    );
    // Never invents success: the attempt is cancelled, not succeeded.
    assert_eq!(f.store.attempts(&run_id).unwrap()[0].status, "cancelled");
}

#[test]
fn a_running_row_without_an_owner_is_requeued_not_completed() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.reserve_and_apply(&act.claim, &a, "k", RetryContract::Never);
    f.corrupt( &format!(
        "UPDATE claims SET owner_kind = NULL, owner_id = NULL, token_hash = NULL, expires_at = NULL WHERE run_id = '{run_id}'"
    ));
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["running_without_live_owner_record"]
    );
    let report = f.store.write(|w| w.repair()).unwrap();
    assert_eq!(report.repaired.len(), 1);
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(
        run.status,
        RunStatus::Review,
        "an applying effect without receipt stops for review"
    );
    assert_eq!(f.store.effects(&run_id).unwrap()[0].state, "uncertain");
    assert_eq!(f.store.attempts(&run_id).unwrap()[0].status, "interrupted");
    f.assert_clean();
}

#[test]
fn contradictions_without_exact_evidence_are_left_for_review() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::Checkpoint, &json!({})))
        .unwrap();
    // The decision vanished: nobody can tell what the answer would have been.
    f.corrupt(&format!(
        "UPDATE decisions SET status = 'cancelled' WHERE run_id = '{run_id}'"
    ));
    let before = f.store.canonical_dump().unwrap();
    let report = f.store.write(|w| w.repair()).unwrap();
    assert!(report.repaired.is_empty());
    assert_eq!(
        codes(&report.left_for_review),
        vec!["waiting_without_request"]
    );
    assert!(!report.left_for_review[0].repairable);
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "nothing is guessed"
    );
}

#[test]
fn a_pending_timer_of_an_ended_run_is_reported_and_cancelled_by_repair() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.wait_until(&act.claim, &a, Wake::After(60_000), &json!(null)))
        .unwrap();
    f.store
        .write(|w| w.cancel(&run_id, Fence::Unclaimed, "enough"))
        .unwrap();
    // A timer left pending by a write that forgot it: it must never fire for an ended run.
    f.corrupt(&format!(
        "UPDATE timers SET status = 'pending', fired_at = NULL WHERE run_id = '{run_id}'"
    ));
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["pending_request_on_terminal_run"]
    );
    f.store.write(|w| w.repair()).unwrap();
    f.assert_clean();
    assert_eq!(f.store.run(&run_id).unwrap().wake_at, None);
}

#[test]
fn derived_rows_are_rebuilt_from_the_run() {
    let mut f = Fixture::new();
    let run_id = f.start();
    f.corrupt(&format!(
        "UPDATE run_views SET status = 'completed' WHERE run_id = '{run_id}';
         UPDATE queue SET state = 'done' WHERE run_id = '{run_id}';"
    ));
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["projection_mismatch", "queue_state_mismatch"]
    );
    f.store.write(|w| w.repair()).unwrap();
    f.assert_clean();
    assert_eq!(f.store.run_view(&run_id).unwrap().unwrap().status, "queued");
    assert_eq!(
        f.store.ready_runs(f.store.now_ms(), 5).unwrap(),
        vec![run_id]
    );
}

/// The workflow messages of a session: a finished run has exactly one terminal message, a run
/// still going none, and a message belongs to its run's session.
#[test]
fn messages_that_contradict_their_run_are_reported() {
    let mut f = Fixture::new();
    let (run_id, act, a) = f.running();
    f.store
        .write(|w| w.complete(&act.claim, &a, &json!({"done": true}), &json!(1)))
        .unwrap();
    f.assert_clean();
    f.corrupt(&format!(
        "INSERT INTO workflow_messages (message_id, run_id, origin_session, kind, content, created_at)
         SELECT 'msg-copy', run_id, origin_session, kind, content, created_at
         FROM workflow_messages WHERE run_id = '{run_id}' AND kind = 'terminal';"
    ));
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["terminal_message_count"]
    );
    f.corrupt(
        "DELETE FROM workflow_messages WHERE message_id = 'msg-copy';
         UPDATE workflow_messages SET origin_session = 'another-session';",
    );
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["message_session_mismatch"]
    );
}

/// A lost claim row is rebuilt with the highest generation the run ever handed out, not only
/// the highest an attempt carries: an activation whose child died before starting a node
/// opened no attempt, and reusing its generation would let that child's late messages pass
/// the fence.
#[test]
fn a_rebuilt_claim_never_reuses_a_generation() {
    let mut f = Fixture::new();
    let (run_id, act, _) = f.running();
    f.store
        .write(|w| w.child_lost(&act.claim, "crashed"))
        .unwrap();
    let second = f.activate(&run_id);
    assert_eq!(second.claim.generation, 2);
    f.store
        .write(|w| w.child_lost(&second.claim, "crashed before its first node"))
        .unwrap();
    f.corrupt(&format!("DELETE FROM claims WHERE run_id = '{run_id}'"));
    assert_eq!(
        codes(&f.store.diagnose(f.store.now_ms()).unwrap()),
        vec!["missing_claim_row"]
    );
    f.store.write(|w| w.repair()).unwrap();
    f.assert_clean();
    assert_eq!(f.activate(&run_id).claim.generation, 3, "a new generation");
}

/// A receipt outside its run's window (`runs.receipts_from`, `receipts_to`) would outlive a
/// prune of the run: `diagnose` names it and `repair` widens the window, so the prune takes it.
#[test]
fn a_receipt_outside_its_runs_window_is_reported_and_taken_back_in_by_repair() {
    let mut f = Fixture::new();
    let (run_id, act, _attempt) = f.running();
    let meta = CommandMeta {
        request_id: "req-status".into(),
        idempotency_key: None,
        fingerprint: "fp".into(),
        kind: "run.status".into(),
        run_id: Some(run_id.clone()),
    };
    f.store
        .write(|w| w.command(&meta, |_| Ok(json!({}))))
        .unwrap();
    f.assert_clean();
    f.corrupt(&format!(
        "UPDATE runs SET receipts_to = receipts_from - 1 WHERE run_id = '{run_id}'"
    ));
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(codes(&findings), vec!["receipt_outside_window"]);
    assert_eq!(findings[0].run_id, run_id);
    f.store.write(|w| w.repair()).unwrap();
    f.assert_clean();
    f.store
        .write(|w| w.cancel(&run_id, Fence::Claim(&act.claim), "enough"))
        .unwrap();
    assert_eq!(
        f.store
            .prune_runs(f.store.now_ms(), std::slice::from_ref(&run_id))
            .unwrap()
            .len(),
        1
    );
    let dump = f.store.canonical_dump().unwrap();
    assert!(!dump.contains("req-status"), "the receipt outlived its run");
}
