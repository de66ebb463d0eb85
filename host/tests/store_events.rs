//! Run events are stored in commit order, each run's linked into a chain from
//! `runs.last_event_id` back through `prev_event_id`; pausing a waiting run leaves its queue row
//! alone. These tests hold the chain to its promises: every run's events come back complete and
//! in order however writes to several runs interleave, a broken chain is reported (by `events`
//! and by `diagnose`) rather than followed, and the queue still holds a paused run back.
mod common;

use common::*;
use piw_host::store::*;
use serde_json::json;

fn seqs_and_kinds(events: &[EventRecord]) -> Vec<(u64, String)> {
    events.iter().map(|e| (e.seq, e.kind.clone())).collect()
}

fn queue_row(f: &Fixture, run_id: &str) -> (String, i64) {
    let c = rusqlite::Connection::open(f.store.path()).unwrap();
    c.query_row(
        "SELECT state, available_at FROM queue WHERE run_id = ?1",
        [run_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

#[test]
fn the_events_of_runs_written_in_turn_come_back_per_run_complete_and_in_order() {
    let mut f = Fixture::new();
    let (r1, _, _) = f.waiting();
    let r2 = f.start();
    let (r3, _, _) = f.waiting();
    // Interleave writes to three runs, several in one transaction.
    for round in 0..5 {
        f.store
            .write(|w| {
                w.pause(&r1, Fence::Unclaimed)?;
                w.pause(&r3, Fence::Unclaimed)?;
                if round % 2 == 0 {
                    w.pause(&r2, Fence::Unclaimed)?;
                }
                w.resume(&r1, Fence::Unclaimed)?;
                if round % 2 == 0 {
                    w.resume(&r2, Fence::Unclaimed)
                } else {
                    Ok(0)
                }
            })
            .unwrap();
        f.store.write(|w| w.resume(&r3, Fence::Unclaimed)).unwrap();
    }
    for run_id in [&r1, &r2, &r3] {
        let revision = f.store.run(run_id).unwrap().revision;
        let all = f.store.events(run_id, 0).unwrap();
        assert_eq!(
            all.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=revision).collect::<Vec<_>>(),
            "run {run_id}: one event per revision, in order"
        );
        assert!(all.iter().all(|e| &e.run_id == run_id));
        assert_eq!(all[0].kind, "started");
        assert_eq!(all[0].data, json!({ "workflow": "demo" }));
        assert_eq!(
            f.store.run_view(run_id).unwrap().unwrap().last_event,
            all.last().unwrap().kind
        );
        // Only what comes after `after_seq`; nothing after the newest.
        for after in [1, revision - 2, revision - 1, revision] {
            assert_eq!(
                seqs_and_kinds(&f.store.events(run_id, after).unwrap()),
                seqs_and_kinds(&all[after as usize..]),
                "run {run_id}, after {after}"
            );
        }
    }
    let r2_kinds: Vec<String> = f
        .store
        .events(&r2, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        r2_kinds,
        ["started", "paused", "resumed", "paused", "resumed", "paused", "resumed"]
    );
    assert!(matches!(
        f.store.events("run-unknown", 0),
        Err(StoreError::RunNotFound(_))
    ));
    f.assert_clean();
}

#[test]
fn pausing_a_waiting_run_leaves_its_queue_row_alone_and_an_answer_keeps_it_held() {
    let mut f = Fixture::new();
    let (run_id, attempt, interaction) = f.waiting();
    let queue_before = queue_row(&f, &run_id);
    assert_eq!(queue_before.0, "waiting");
    f.store
        .write(|w| w.pause(&run_id, Fence::Unclaimed))
        .unwrap();
    assert_eq!(
        queue_row(&f, &run_id),
        queue_before,
        "pause wrote the queue"
    );
    f.assert_clean();

    // The answer arrives while the run is paused: it becomes queued, and stays held.
    f.clock.advance(5);
    f.store
        .write(|w| w.submit(&interaction, &attempt, &json!("answer"), None))
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Queued);
    assert_eq!(queue_row(&f, &run_id).0, "paused");
    assert!(f.store.ready_runs(f.store.now_ms(), 10).unwrap().is_empty());
    assert!(f.store.write(|w| w.activate(&run_id, HOST)).is_err());
    f.assert_clean();

    f.store
        .write(|w| w.resume(&run_id, Fence::Unclaimed))
        .unwrap();
    assert_eq!(
        f.store.ready_runs(f.store.now_ms(), 10).unwrap(),
        vec![run_id.clone()]
    );
    f.assert_clean();
}

#[test]
fn a_broken_event_chain_is_reported_and_never_followed() {
    let mut f = Fixture::new();
    let (r1, _, _) = f.waiting();
    let (r2, _, _) = f.waiting();
    for run_id in [&r1, &r2] {
        f.store
            .write(|w| w.pause(run_id, Fence::Unclaimed))
            .unwrap();
    }
    f.assert_clean();
    let ids = |f: &Fixture, run_id: &str| -> Vec<i64> {
        let c = rusqlite::Connection::open(f.store.path()).unwrap();
        let mut stmt = c
            .prepare("SELECT event_id FROM events WHERE run_id = ?1 ORDER BY seq")
            .unwrap();
        stmt.query_map([run_id], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let r1_ids = ids(&f, &r1);
    let r2_ids = ids(&f, &r2);
    assert!(r1_ids.len() >= 4, "{r1_ids:?}");

    // The second event no longer links to the first: the chain ends early.
    f.corrupt(&format!(
        "UPDATE events SET prev_event_id = NULL WHERE event_id = {}",
        r1_ids[1]
    ));
    let err = f.store.events(&r1, 0).unwrap_err();
    assert!(matches!(err, StoreError::CorruptRow(_)), "{err:?}");
    // Events after the break are still read: the chain is intact from the newest down to it.
    assert_eq!(
        f.store.events(&r1, 2).unwrap().len(),
        r1_ids.len() - 2,
        "the intact part"
    );
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    let broken: Vec<&Finding> = findings
        .iter()
        .filter(|x| x.code == "event_chain_broken")
        .collect();
    assert_eq!(broken.len(), 1, "{findings:#?}");
    assert_eq!(broken[0].run_id, r1);
    assert_eq!(broken[0].ids, vec![r1_ids[1].to_string()]);
    assert!(!broken[0].repairable);

    // The second run's newest event is a link into the first run's chain.
    f.corrupt(&format!(
        "UPDATE runs SET last_event_id = {} WHERE run_id = '{r2}'",
        r1_ids.last().unwrap()
    ));
    assert!(matches!(
        f.store.events(&r2, 0),
        Err(StoreError::CorruptRow(_))
    ));
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    assert!(
        findings
            .iter()
            .any(|x| x.code == "event_sequence_mismatch" && x.run_id == r2),
        "{findings:#?}"
    );

    // A run whose newest event is gone.
    f.corrupt(&format!(
        "UPDATE runs SET last_event_id = {} WHERE run_id = '{r2}';
             DELETE FROM events WHERE event_id = {};",
        r2_ids[r2_ids.len() - 2],
        r2_ids.last().unwrap()
    ));
    let findings = f.store.diagnose(f.store.now_ms()).unwrap();
    let mismatch = findings
        .iter()
        .find(|x| x.code == "event_sequence_mismatch" && x.run_id == r2)
        .unwrap_or_else(|| panic!("{findings:#?}"));
    assert!(mismatch
        .detail
        .contains(&format!("{} events", r2_ids.len() - 1)));
}

/// A workflow that publishes updates in a tight loop (20,000 of them wrote 82 MB of
/// events) keeps a bounded number of events: a burst, then the rate, per run; the latest update
/// per `(type, key)` is kept whatever was dropped, the drops are counted, and the next event
/// kept says how many were dropped before it. A notify loop is bounded the same way.
#[test]
fn a_chatty_workflow_keeps_the_latest_update_and_a_bounded_number_of_events() {
    let mut f = Fixture::new();
    let (run, act, _a) = f.running();
    let claim = act.claim.clone();
    let events_before = f.store.events(&run, 0).unwrap().len();
    let update = |i: u64| {
        json!({ "type": "progress", "key": "rows", "data": {
            "schema": "pi-workflows.progress.v1", "status": "running",
            "completed": i, "total": 2_000, "unit": "rows" } })
    };
    for i in 1..=2_000u64 {
        f.store
            .write(|w| w.progress(&claim, "progress:rows", &update(i)))
            .unwrap();
    }
    let progress = |f: &Fixture| -> Vec<EventRecord> {
        f.store
            .events(&run, 0)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "progress")
            .collect()
    };
    assert_eq!(progress(&f).len(), EVENT_BURST as usize);
    assert_eq!(f.store.events(&run, 0).unwrap().len(), events_before + 100);
    assert_eq!(f.store.events_dropped(&run).unwrap(), 2_000 - 100);
    let latest = f.store.updates(&run).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].data["completed"], json!(2_000));
    assert_eq!(latest[0].update_type, "progress");
    // The samples for an ETA: the last nine, of the one epoch.
    assert_eq!(latest[0].samples.len(), 9);

    // A second later, the rate's worth more; the first says what was dropped before it.
    f.clock.advance(1_000);
    let kept = f
        .store
        .write(|w| w.progress(&claim, "progress:rows", &update(2_001)))
        .unwrap();
    assert!(kept.event_kept);
    let last = progress(&f).pop().unwrap();
    assert_eq!(last.data["dropped"], json!(2_000 - 100));
    assert_eq!(kept.seq, last.seq);

    // Notify events share the budget (the message itself is one per visit).
    f.clock.advance(5_000);
    for _ in 0..1_000 {
        f.store
            .write(|w| w.notify(&claim, &json!({"text": "hi"})))
            .unwrap();
    }
    let notified = f
        .store
        .events(&run, 0)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "notified")
        .count();
    assert_eq!(notified, EVENT_BURST as usize);
    assert_eq!(f.store.events_dropped(&run).unwrap(), 2_000 - 100 + 900);
}

/// A run holds at most 1,024 update keys: a new one past them is refused, not stored; a known
/// key is still replaced.
#[test]
fn a_run_refuses_an_update_key_past_its_limit() {
    let mut f = Fixture::new();
    let (run, act, _a) = f.running();
    let claim = act.claim.clone();
    let update = |k: i64| json!({ "type": "item", "key": format!("k{k}"), "data": { "k": k } });
    for k in 0..MAX_UPDATE_KEYS {
        f.store
            .write(|w| w.progress(&claim, "item", &update(k)))
            .unwrap();
    }
    let refused = f
        .store
        .write(|w| w.progress(&claim, "item", &update(MAX_UPDATE_KEYS)))
        .unwrap_err();
    assert!(matches!(refused, StoreError::InvalidInput(_)), "{refused}");
    f.store
        .write(|w| {
            w.progress(
                &claim,
                "item",
                &json!({ "type": "item", "key": "k0", "data": { "k": "again" } }),
            )
        })
        .unwrap();
    let updates = f.store.updates(&run).unwrap();
    assert_eq!(updates.len(), MAX_UPDATE_KEYS as usize);
    assert_eq!(updates.last().unwrap().data, json!({ "k": "again" }));
    assert!(f
        .store
        .updates(&run)
        .unwrap()
        .iter()
        .all(|u| u.key != format!("k{MAX_UPDATE_KEYS}")));
}
