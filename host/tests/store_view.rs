//! The viewer's paged reads, on a store opened read-only beside the writer.

mod common;

use common::{new_run, step, Fixture};
use piw_host::store::prelude::*;
use piw_host::store::{Answerer, DecisionKind, Fence, RunFilter, RunStatus, Store, StoreConfig};
use serde_json::json;

fn reader(f: &Fixture) -> Store {
    Store::open_read_only(f.store.path(), StoreConfig::default()).unwrap()
}

#[test]
fn runs_page_filters_pages_and_counts_newest_first() {
    let mut f = Fixture::new();
    let mut ids = Vec::new();
    for i in 0..5 {
        let session = if i % 2 == 0 { "even" } else { "odd" };
        ids.push(f.start_with(new_run(Some(session))));
        f.clock.advance(1_000);
    }
    let (run_id, _, _) = f.running();
    let r = reader(&f);

    let (page, total) = r.runs_page(&RunFilter::default(), None, 2).unwrap();
    assert_eq!(total, 6);
    assert_eq!(
        page.iter().map(|p| p.run_id.as_str()).collect::<Vec<_>>(),
        [run_id.as_str(), ids[4].as_str()]
    );
    // The next page continues after the last run shown, whatever started since (an offset
    // would show that run again).
    f.start();
    let after = page.last().map(|p| p.list_key());
    let (page, total) = r
        .runs_page(&RunFilter::default(), after.as_ref(), 2)
        .unwrap();
    assert_eq!(total, 7);
    assert_eq!(
        page.iter().map(|p| p.run_id.as_str()).collect::<Vec<_>>(),
        [ids[3].as_str(), ids[2].as_str()]
    );

    let even = RunFilter {
        status: None,
        session: Some("even".into()),
    };
    let (page, total) = r.runs_page(&even, None, 10).unwrap();
    assert_eq!(total, 3);
    assert!(page
        .iter()
        .all(|p| p.origin_session.as_deref() == Some("even")));

    let running = RunFilter {
        status: Some(RunStatus::Running),
        session: None,
    };
    let (page, total) = r.runs_page(&running, None, 10).unwrap();
    assert_eq!((total, page.len()), (1, 1));
    assert_eq!(page[0].current_node.as_deref(), Some("a"));
}

#[test]
fn event_pages_stitch_to_the_whole_chain_and_data_version_sees_commits() {
    let mut f = Fixture::new();
    let (run_id, act, mut attempt) = f.running();
    for i in 0..23 {
        let next = if i % 2 == 0 { "b" } else { "a" };
        attempt = f
            .store
            .write(|w| w.transition(&act.claim, &step(&attempt, next)))
            .unwrap()
            .next_attempt_id;
    }
    let r = reader(&f);
    let version = r.data_version().unwrap();

    let mut stitched = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = r.events_page(&run_id, cursor, 10).unwrap();
        assert!(page.newest_first.len() <= 10);
        stitched.extend(page.newest_first);
        pages += 1;
        match page.older {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    stitched.reverse();
    assert_eq!(stitched, r.events(&run_id, 0).unwrap());
    assert_eq!(pages, stitched.len().div_ceil(10));

    // Per node: visits, the newest attempt, its status.
    let activity = r.node_activity(&run_id).unwrap();
    let a = activity.iter().find(|n| n.node_id == "a").unwrap();
    let b = activity.iter().find(|n| n.node_id == "b").unwrap();
    assert_eq!((a.visits, b.visits), (12, 12));
    assert_eq!(b.last_attempt_id, attempt);
    assert_eq!(b.last_status, "running");
    // The input of the newest attempt is the output of the step before; the first attempt's
    // is the run's input.
    assert_eq!(
        r.attempt_input(&run_id, &attempt).unwrap(),
        json!({"ok": true})
    );
    let first = r.attempts(&run_id).unwrap()[0].attempt_id.clone();
    assert_eq!(r.attempt_input(&run_id, &first).unwrap(), json!({"n": 1}));

    // Another connection commits: the reader's data_version moves.
    f.store
        .write(|w| w.transition(&act.claim, &step(&attempt, "a")))
        .unwrap();
    assert_ne!(r.data_version().unwrap(), version);
    assert_eq!(
        r.events_page(&run_id, None, 1).unwrap().newest_first[0].kind,
        "transitioned"
    );
}

/// The attempts placed in the run's events give each attempt's status after every event: it
/// waits for a checkpoint and runs again once answered and reactivated, waits again across a
/// lost child (its answer is kept), closes at the transition; the next attempt is interrupted
/// by a lost child (closed there, not when the node starts again) and the third is cancelled.
#[test]
fn attempt_history_replays_each_attempts_status_event_by_event() {
    let mut f = Fixture::new();
    let (run_id, act, a1) = f.running(); // 1 started, 2 activated, 3 node_started a
    let decision = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a1, DecisionKind::Checkpoint, &json!({})))
        .unwrap(); // 4 waiting
    f.store
        .write(|w| w.answer_decision(&decision, &json!("go"), Answerer::Person))
        .unwrap(); // 5 decision_answered
    let act = f.activate(&run_id); // 6 activated
    f.store
        .write(|w| w.child_lost(&act.claim, "crash"))
        .unwrap(); // 7 child_lost
    let act = f.activate(&run_id); // 8 activated
    let b1 = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a1, "b")))
        .unwrap()
        .next_attempt_id; // 9 transitioned a -> b
    f.store
        .write(|w| w.child_lost(&act.claim, "crash"))
        .unwrap(); // 10 child_lost
    let act = f.activate(&run_id); // 11 activated
    let b2 = f
        .store
        .write(|w| w.node_started(&act.claim, "b", None))
        .unwrap(); // 12 node_started b
    f.store
        .write(|w| w.cancel(&run_id, Fence::Claim(&act.claim), "stop"))
        .unwrap(); // 13 cancelled
    let r = reader(&f);
    assert_eq!(r.run(&run_id).unwrap().revision, 13);

    let spans = r.attempt_history(&run_id).unwrap();
    let ids: Vec<&str> = spans.iter().map(|s| s.attempt_id.as_str()).collect();
    assert_eq!(ids, [a1.as_str(), b1.as_str(), b2.as_str()]);
    let statuses =
        |i: usize| -> Vec<Option<&str>> { (1..=13).map(|seq| spans[i].status_at(seq)).collect() };
    let (run, wait) = (Some("running"), Some("waiting"));
    assert_eq!(
        statuses(0),
        [
            None,
            None,
            run,
            wait,
            wait,
            run,
            wait,
            run,
            Some("ok"),
            Some("ok"),
            Some("ok"),
            Some("ok"),
            Some("ok")
        ]
    );
    let interrupted = Some("interrupted");
    assert_eq!(
        statuses(1),
        [
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            run,
            interrupted,
            interrupted,
            interrupted,
            interrupted
        ]
    );
    assert_eq!(statuses(2)[10..], [None, run, Some("cancelled")]);
    assert_eq!(
        spans.iter().map(|s| s.closed_seq).collect::<Vec<_>>(),
        [Some(9), Some(10), Some(13)]
    );
}
