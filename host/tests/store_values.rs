//! Large values: stored once by hash, in order, whole before a row may refer to them; kept
//! while a run holds them; found by `diagnose` when missing, corrupt or held by no run.
mod common;

use common::*;
use piw_host::protocol::value::{ValueRef, MAX_VALUE_BYTES};
use piw_host::store::*;
use serde_json::json;

/// A value of `len` bytes of canonical JSON (a string), its reference and its bytes.
fn big_value(len: usize, fill: char) -> (serde_json::Value, ValueRef, Vec<u8>) {
    let value = json!(fill.to_string().repeat(len - 2));
    let text = piw_host::protocol::canonical_json(&value);
    assert_eq!(text.len(), len);
    (value, ValueRef::for_canonical(&text), text.into_bytes())
}

/// Stores `data` at `at` of the value `r` for `claim`'s run.
fn put_chunk(
    f: &mut Fixture,
    claim: &Claim,
    r: &ValueRef,
    at: u64,
    data: &[u8],
) -> Result<ValuePut, StoreError> {
    f.store
        .write(|w| w.put_value_chunk(claim, &r.sha256, r.bytes, at, data))
}

/// Ends `attempt` with the value `r` as its output, on to node `b`.
fn step_with_value(
    f: &mut Fixture,
    claim: &Claim,
    attempt: &str,
    r: &ValueRef,
) -> Result<(), StoreError> {
    let output = r.to_json();
    let request = TransitionRequest {
        outcome: AttemptOutcome::Succeeded { output },
        ..step(attempt, "b")
    };
    f.store.write(|w| w.transition(claim, &request)).map(drop)
}

/// The codes of what `diagnose` finds now.
fn finding_codes(f: &Fixture) -> Vec<std::borrow::Cow<'static, str>> {
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    findings.into_iter().map(|x| x.code).collect()
}

/// Uploads `bytes` as the value `r` for `claim`'s run, `chunk` bytes at a time.
fn upload(f: &mut Fixture, claim: &Claim, r: &ValueRef, bytes: &[u8], chunk: usize) -> ValuePut {
    let mut put = ValuePut {
        received: 0,
        complete: false,
    };
    while !put.complete {
        let at = put.received as usize;
        let data = &bytes[at..(at + chunk).min(bytes.len())];
        put = put_chunk(f, claim, r, at as u64, data).expect("put chunk");
    }
    put
}

fn count(f: &Fixture, table: &str) -> i64 {
    let c = rusqlite::Connection::open(f.store.path()).unwrap();
    c.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_value_uploaded_in_chunks_is_referred_to_and_read_back_whole() {
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let (_value, r, bytes) = big_value(300_000, 'x');
    // Before it is whole, no row may refer to it.
    let half = put_chunk(&mut f, &act.claim, &r, 0, &bytes[..100_000]).unwrap();
    assert_eq!(half.received, 100_000);
    let early = step_with_value(&mut f, &act.claim, &attempt, &r);
    assert!(
        matches!(early, Err(StoreError::InvalidInput(_))),
        "{early:?}"
    );
    // A chunk sent again changes nothing; one past what is stored is refused.
    let again = put_chunk(&mut f, &act.claim, &r, 0, &bytes[..100_000]).unwrap();
    assert_eq!(again.received, 100_000);
    let gap = put_chunk(&mut f, &act.claim, &r, 200_000, &bytes[200_000..]);
    assert!(matches!(gap, Err(StoreError::InvalidInput(_))), "{gap:?}");
    let whole = upload(&mut f, &act.claim, &r, &bytes, 70_000);
    assert!(whole.complete);
    step_with_value(&mut f, &act.claim, &attempt, &r).expect("a whole value may be referred to");
    assert_eq!(f.store.read_value(&run_id, &r.sha256).unwrap(), bytes);
    // A read from the middle crosses chunk boundaries.
    let piece = f
        .store
        .read_value_chunk(&run_id, &r.sha256, 69_990, 20)
        .unwrap();
    assert_eq!(piece.data, bytes[69_990..70_010]);
    assert_eq!(piece.bytes, 300_000);
    // Another run cannot read it: it does not hold it.
    let other = f.start();
    assert!(matches!(
        f.store.read_value_chunk(&other, &r.sha256, 0, 10),
        Err(StoreError::NotFound { .. })
    ));
    f.assert_clean();
}

#[test]
fn the_same_value_written_twice_is_stored_once() {
    let mut f = Fixture::new();
    let (_run_a, act_a, _) = f.running();
    let (_value, r, bytes) = big_value(200_000, 'y');
    upload(&mut f, &act_a.claim, &r, &bytes, 64_000);
    let chunks = count(&f, "value_chunks");
    // A second run: its first chunk learns the value is whole and sends no more.
    let run_b = f.start();
    let act_b = f.activate(&run_b);
    let put = put_chunk(&mut f, &act_b.claim, &r, 0, &bytes[..64_000]).unwrap();
    assert!(put.complete);
    assert_eq!(put.received, 200_000);
    assert_eq!(count(&f, "value_blobs"), 1);
    assert_eq!(count(&f, "value_chunks"), chunks);
    assert_eq!(count(&f, "run_values"), 2);
    assert_eq!(f.store.read_value(&run_b, &r.sha256).unwrap(), bytes);
}

#[test]
fn bytes_that_do_not_hash_to_the_name_are_refused_and_the_limit_holds() {
    let mut f = Fixture::new();
    let (run_id, act, _) = f.running();
    let (_v, r, mut bytes) = big_value(1000, 'z');
    bytes[500] = b'q';
    let bad = put_chunk(&mut f, &act.claim, &r, 0, &bytes);
    assert!(matches!(bad, Err(StoreError::InvalidInput(_))), "{bad:?}");
    assert!(matches!(
        f.store.read_value_chunk(&run_id, &r.sha256, 0, 10),
        Err(StoreError::NotFound { .. })
    ));
    let over = f
        .store
        .write(|w| w.put_value_chunk(&act.claim, &r.sha256, MAX_VALUE_BYTES + 1, 0, b"x"));
    assert!(matches!(over, Err(StoreError::InvalidInput(_))), "{over:?}");
}

#[test]
fn a_write_after_the_claim_is_lost_stores_no_chunk() {
    let mut f = Fixture::new();
    let (_run_id, act, _) = f.running();
    let (_v, r, bytes) = big_value(1000, 'w');
    f.clock.advance(LEASE_MS + 1);
    let lost = put_chunk(&mut f, &act.claim, &r, 0, &bytes);
    assert!(
        matches!(lost, Err(StoreError::ClaimLost { .. })),
        "{lost:?}"
    );
    assert_eq!(count(&f, "value_chunks"), 0);
}

#[test]
fn diagnose_finds_missing_corrupt_and_unreferenced_values_and_repair_removes_the_last() {
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let (_v, r, bytes) = big_value(5000, 'v');
    upload(&mut f, &act.claim, &r, &bytes, 2000);
    step_with_value(&mut f, &act.claim, &attempt, &r).unwrap();
    f.assert_clean();

    // Backup carries the value.
    let backup = f.dir.path().join("backup.sqlite");
    f.store.backup_to(&backup).unwrap();
    let copy = Store::open_read_only(&backup, StoreConfig::default()).unwrap();
    assert_eq!(copy.read_value(&run_id, &r.sha256).unwrap(), bytes);
    drop(copy);

    // A value nobody holds: found, and removed by repair.
    let (_v2, orphan, orphan_bytes) = big_value(3000, 'u');
    upload(&mut f, &act.claim, &orphan, &orphan_bytes, 3000);
    f.corrupt(&format!(
        "DELETE FROM run_values WHERE sha256 = '{}'",
        orphan.sha256
    ));
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(
        findings.iter().map(|x| &*x.code).collect::<Vec<_>>(),
        vec!["value_unreferenced"],
        "{findings:#?}"
    );
    assert_eq!(findings[0].ids, vec![orphan.sha256.clone()]);
    let report = f.store.write(|w| w.repair()).unwrap();
    assert_eq!(report.repaired.len(), 1, "{report:#?}");
    assert_eq!(count(&f, "value_blobs"), 1);
    assert_eq!(count(&f, "value_chunks"), 3);
    f.assert_clean();

    // A damaged chunk: corrupt.
    f.corrupt(&format!(
        "UPDATE value_chunks SET data = X'00' WHERE sha256 = '{}' AND offset = 2000",
        r.sha256
    ));
    assert_eq!(finding_codes(&f), ["value_corrupt"]);
    // A value gone: the attempt's reference is missing (and repair invents nothing).
    f.corrupt("DELETE FROM value_chunks; DELETE FROM run_values; DELETE FROM value_blobs;");
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(
        findings.iter().map(|x| &*x.code).collect::<Vec<_>>(),
        vec!["value_missing"],
        "{findings:#?}"
    );
    assert_eq!(findings[0].run_id, run_id);
    assert_eq!(findings[0].ids, vec![r.sha256.clone()]);
    assert!(!findings[0].repairable);
}

#[test]
fn removing_a_runs_values_keeps_those_another_run_holds() {
    let mut f = Fixture::new();
    let (run_a, act_a, _) = f.running();
    let (_v, shared, shared_bytes) = big_value(2000, 's');
    let (_v, own, own_bytes) = big_value(2000, 'o');
    upload(&mut f, &act_a.claim, &shared, &shared_bytes, 2000);
    upload(&mut f, &act_a.claim, &own, &own_bytes, 2000);
    let run_b = f.start();
    let act_b = f.activate(&run_b);
    upload(&mut f, &act_b.claim, &shared, &shared_bytes, 2000);
    let removed = f
        .store
        .write(|w| {
            w.unlink_run_values(&run_a)?;
            w.remove_unreferenced_values()
        })
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(
        f.store.read_value(&run_b, &shared.sha256).unwrap(),
        shared_bytes
    );
    assert_eq!(count(&f, "value_blobs"), 1);
}

#[test]
fn user_data_shaped_like_a_reference_is_refused_unless_wrapped() {
    let mut f = Fixture::new();
    let (_run_id, act, attempt) = f.running();
    let fake = json!({ "$piw": "value", "sha256": "a".repeat(64), "bytes": 10, "preview": "" });
    let step = |output: serde_json::Value| TransitionRequest {
        attempt_id: attempt.clone(),
        outcome: AttemptOutcome::Succeeded { output },
        next_node: "b".into(),
        next_deadline_at: None,
    };
    let refused = f
        .store
        .write(|w| w.transition(&act.claim, &step(fake.clone())));
    assert!(
        matches!(refused, Err(StoreError::InvalidInput(_))),
        "{refused:?}"
    );
    let wrapped = piw_host::protocol::value::wrap_inline(fake);
    f.store
        .write(|w| w.transition(&act.claim, &step(wrapped)))
        .expect("a wrapped literal is stored");
    f.assert_clean();
}

/// A prune of a finished run takes its values with it, and a value another run also holds
/// stays (with its chunks); `diagnose` is clean afterwards.
#[test]
fn a_pruned_run_takes_its_values_and_leaves_the_ones_another_run_holds() {
    let mut f = Fixture::new();
    let (gone, act_gone, _) = f.running();
    let (kept, act_kept, _) = f.running();
    let (_, own, own_bytes) = big_value(200_000, 'o');
    let (_, shared, shared_bytes) = big_value(150_000, 's');
    upload(&mut f, &act_gone.claim, &own, &own_bytes, 64_000);
    upload(&mut f, &act_gone.claim, &shared, &shared_bytes, 64_000);
    upload(&mut f, &act_kept.claim, &shared, &shared_bytes, 64_000);
    assert_eq!(count(&f, "value_blobs"), 2);
    f.store
        .write(|w| w.cancel(&gone, Fence::Claim(&act_gone.claim), "done"))
        .unwrap();
    let removed = f
        .store
        .prune_runs(f.store.now_ms(), std::slice::from_ref(&gone))
        .unwrap();
    assert_eq!(removed, std::slice::from_ref(&gone));
    assert_eq!(
        count(&f, "value_blobs"),
        1,
        "the pruned run's own value went"
    );
    assert_eq!(count(&f, "run_values"), 1);
    assert_eq!(
        f.store.read_value(&kept, &shared.sha256).unwrap(),
        shared_bytes,
        "the shared value is whole for the run that kept it"
    );
    f.assert_clean();
}

/// A value whose stored bytes were damaged after it was stored is not named "complete" to the
/// next run producing it: that run's upload (asking first, as a worker does) finds the damage,
/// stores the value again, and heals it for every run that refers to it.
#[test]
fn a_damaged_value_is_healed_by_the_next_correct_upload() {
    let mut f = Fixture::new();
    let (first, act, attempt) = f.running();
    let (_v, r, bytes) = big_value(5000, 'v');
    upload(&mut f, &act.claim, &r, &bytes, 2000);
    step_with_value(&mut f, &act.claim, &attempt, &r).unwrap();
    // The same length, other bytes: only the hash tells.
    f.corrupt(&format!(
        "UPDATE value_chunks SET data = CAST(replace(CAST(data AS TEXT), 'v', 'w') AS BLOB)
         WHERE sha256 = '{}' AND offset = 2000",
        r.sha256
    ));
    assert_eq!(finding_codes(&f), ["value_corrupt"]);

    let (second, act2, _) = f.running();
    let claim = act2.claim.clone();
    let asked = put_chunk(&mut f, &claim, &r, 0, &[]).unwrap();
    assert_eq!(
        asked,
        ValuePut {
            received: 0,
            complete: false
        },
        "a damaged value is not complete"
    );
    let put = upload(&mut f, &claim, &r, &bytes, 2000);
    assert!(put.complete);
    assert_eq!(f.store.read_value(&second, &r.sha256).unwrap(), bytes);
    assert_eq!(f.store.read_value(&first, &r.sha256).unwrap(), bytes);
    f.assert_clean();
    // A whole, intact value is still stored once and not sent again.
    let (third, act3, _) = f.running();
    let claim = act3.claim.clone();
    let again = put_chunk(&mut f, &claim, &r, 0, &[]).unwrap();
    assert!(again.complete, "{again:?}");
    assert_eq!(f.store.read_value(&third, &r.sha256).unwrap(), bytes);
    assert_eq!(count(&f, "value_blobs"), 1);
}

/// Half of a value uploaded by a child that then crashed: while a live claim of a run holding
/// it can still go on with it, it is no finding; once none can (the child lost, or its claim
/// expired), `diagnose` reports `value_partial` with the run and what was received, and
/// `repair` removes it. A prune takes a pruned run's partial value too.
#[test]
fn a_partial_upload_no_live_child_can_complete_is_found_repaired_and_pruned() {
    let mut f = Fixture::new();
    let (run_id, act, _) = f.running();
    let (_v, r, bytes) = big_value(200_000, 'p');
    put_chunk(&mut f, &act.claim, &r, 0, &bytes[..70_000]).unwrap();
    // In progress: the child's claim is live.
    f.assert_clean();
    // Its claim expired (a host that died): no child can renew it or store another chunk.
    f.clock.advance(LEASE_MS + 1);
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(
        findings.iter().map(|x| &*x.code).collect::<Vec<_>>(),
        vec!["value_partial"],
        "{findings:#?}"
    );
    // The run's next child goes on with it (it asks where to) while its claim is live.
    f.store.write(|w| w.recover_expired()).unwrap();
    let act = f.activate(&run_id);
    let asked = put_chunk(&mut f, &act.claim, &r, 0, &[]).unwrap();
    assert_eq!(asked.received, 70_000);
    f.assert_clean();
    // That child crashes too: the run is requeued, its claim released.
    f.store
        .write(|w| w.child_lost(&act.claim, "crashed"))
        .unwrap();
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let found = &findings[0];
    assert_eq!(found.code, "value_partial");
    assert_eq!(found.run_id, run_id);
    assert_eq!(found.ids, vec![r.sha256.clone()]);
    assert!(
        found.detail.contains("70000 of 200000 bytes"),
        "{}",
        found.detail
    );
    assert!(found.repairable);
    let report = f.store.write(|w| w.repair()).unwrap();
    assert_eq!(report.repaired.len(), 1, "{report:#?}");
    for table in ["value_blobs", "value_chunks", "run_values"] {
        assert_eq!(count(&f, table), 0, "{table}");
    }
    f.assert_clean();

    // A prune of a finished run takes its partial value.
    let (gone, act_gone, _) = f.running();
    put_chunk(&mut f, &act_gone.claim, &r, 0, &bytes[..70_000]).unwrap();
    f.store
        .write(|w| w.cancel(&gone, Fence::Claim(&act_gone.claim), "done"))
        .unwrap();
    assert_eq!(count(&f, "value_blobs"), 1);
    let removed = f
        .store
        .prune_runs(f.store.now_ms(), std::slice::from_ref(&gone))
        .unwrap();
    assert_eq!(removed, std::slice::from_ref(&gone));
    for table in ["value_blobs", "value_chunks", "run_values"] {
        assert_eq!(count(&f, table), 0, "{table}");
    }
    f.assert_clean();
}
