//! Retention in the store: which runs a prune selects, and that removing one takes every row
//! that belongs to it and nothing else.

mod common;

use common::*;
use piw_host::clock::Clock as _;
use piw_host::store::prelude::*;
use piw_host::store::{
    ChildMode, CommandMeta, EffectResult, Fence, PruneSelector, RetryContract, RunStatus,
};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};

static STARTS: AtomicU64 = AtomicU64::new(0);

const DAY_MS: i64 = 86_400_000;

/// A run of session-1 that used every table keyed by a run (attempts, events, a notify
/// message, progress, an effect, a child record, an interaction with a submission, command
/// receipts), then was cancelled.
fn busy_cancelled_run(f: &mut Fixture) -> String {
    // Each run starts a millisecond after the one before: the order of a prune is by start.
    f.clock.advance(1);
    let run_id = f.start();
    let act = f.activate(&run_id);
    let claim = act.claim.clone();
    let attempt = f
        .store
        .write(|w| w.node_started(&claim, "a", None))
        .unwrap();
    f.store
        .write(|w| {
            let epoch = w.begin_host_epoch(1)?;
            w.record_child_launch(&run_id, claim.generation, epoch, ChildMode::Run)?;
            w.notify(&claim, &json!({"text": "hello"}))?;
            w.progress(
                &claim,
                "step",
                &json!({"type": "phase", "key": "k", "data": {"done": 1}}),
            )?;
            Ok(())
        })
        .unwrap();
    let effect = f.reserve_and_apply(&claim, &attempt, "e1", RetryContract::Never);
    f.store
        .write(|w| {
            w.settle_effect(
                &claim,
                &effect,
                &EffectResult::Applied {
                    receipt: json!({"ok": true}),
                },
            )
        })
        .unwrap();
    let interaction = f.ask(&claim, &attempt, None);
    f.store
        .write(|w| w.submit(&interaction, &attempt, &json!({"answer": 1}), None))
        .unwrap();
    let meta = CommandMeta {
        request_id: format!("req-cancel-{run_id}"),
        idempotency_key: None,
        fingerprint: "fp".into(),
        kind: "run.cancel".into(),
        run_id: Some(run_id.clone()),
    };
    f.store
        .write(|w| {
            w.command(&meta, |w| {
                w.cancel(&run_id, Fence::Unclaimed, "done with it")?;
                Ok(json!({}))
            })
        })
        .unwrap();
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Cancelled);
    run_id
}

/// A completed run of session-1, started through a receipt (as `run.start` is).
fn completed_run(f: &mut Fixture) -> String {
    f.clock.advance(1);
    let meta = CommandMeta {
        request_id: format!("req-start-{}", STARTS.fetch_add(1, Ordering::Relaxed)),
        idempotency_key: None,
        fingerprint: "fp".into(),
        kind: "run.start".into(),
        run_id: None,
    };
    let run = new_run(Some("session-1"));
    let outcome = f
        .store
        .write(|w| w.command(&meta, |w| Ok(json!({"run_id": w.start_run(&run)?}))))
        .unwrap();
    let run_id = outcome.response["run_id"].as_str().unwrap().to_owned();
    let act = f.activate(&run_id);
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    f.store
        .write(|w| w.complete(&act.claim, &attempt, &json!({"out": 1}), &json!({"r": 1})))
        .unwrap();
    run_id
}

fn lines_naming<'a>(dump: &'a str, run_id: &str) -> Vec<&'a str> {
    dump.lines().filter(|l| l.contains(run_id)).collect()
}

#[test]
fn a_prune_removes_finished_runs_wholly_and_leaves_everything_else_as_it_was() {
    let mut f = Fixture::new();
    let cancelled = busy_cancelled_run(&mut f);
    let completed = completed_run(&mut f);
    let (running, _, _) = f.running();
    let (waiting, _, _) = f.waiting();
    let queued = f.start();
    let kept_finished = completed_run(&mut f);
    f.assert_clean();

    let everything = PruneSelector {
        keep: Some(1),
        ..PruneSelector::default()
    };
    let page = f.store.prunable_runs(&everything, None, 100).unwrap();
    let selected: Vec<&str> = page.runs.iter().map(|k| k.run_id.as_str()).collect();
    assert_eq!(selected, [cancelled.as_str(), completed.as_str()]);
    assert!(!page.more);
    assert_eq!(f.store.count_prunable(&everything).unwrap(), 2);

    let before = f.store.canonical_dump().unwrap();
    // The unfinished runs are named too: the removal checks each run again itself.
    let asked: Vec<String> = [&cancelled, &completed, &running, &waiting, &queued]
        .into_iter()
        .cloned()
        .collect();
    let removed = f.store.prune_runs(f.store.now_ms(), &asked).unwrap();
    assert_eq!(removed, [cancelled.clone(), completed.clone()]);
    let after = f.store.canonical_dump().unwrap();

    for gone in [&cancelled, &completed] {
        assert!(
            !lines_naming(&before, gone).is_empty(),
            "the fixture wrote rows for {gone}"
        );
        assert_eq!(lines_naming(&after, gone), Vec::<&str>::new());
    }
    for kept in [&running, &waiting, &queued, &kept_finished] {
        assert_eq!(lines_naming(&after, kept), lines_naming(&before, kept));
    }
    // Rows that name no run by id (events, submissions, child records) went too: every row
    // left was there before, and the tables hold only what the survivors had.
    let before_rows: std::collections::HashSet<&str> = before.lines().collect();
    for line in after.lines().filter(|l| !l.starts_with("## ")) {
        assert!(before_rows.contains(line), "a row changed: {line}");
    }
    let table_rows = |dump: &str, table: &str| {
        dump.lines()
            .find(|l| l.starts_with(&format!("## {table} (")))
            .map(str::to_owned)
    };
    assert_eq!(
        table_rows(&after, "submissions").as_deref(),
        Some("## submissions (0 rows)")
    );
    f.assert_clean();
}

#[test]
fn a_claimed_finished_run_is_never_removed() {
    let mut f = Fixture::new();
    let run_id = completed_run(&mut f);
    // A claim on a finished run (a contradiction `diagnose` reports) keeps it.
    f.corrupt(&format!(
        "UPDATE claims SET owner_kind = 'control', owner_id = 'x', token_hash = 'h',
                expires_at = 1 WHERE run_id = '{run_id}'"
    ));
    let all = PruneSelector::default();
    assert_eq!(f.store.count_prunable(&all).unwrap(), 0);
    assert!(f
        .store
        .prune_runs(f.store.now_ms(), std::slice::from_ref(&run_id))
        .unwrap()
        .is_empty());
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Completed);
}

#[test]
fn selectors_by_age_status_and_count_combine() {
    let mut f = Fixture::new();
    let old_done = completed_run(&mut f);
    let old_cancelled = busy_cancelled_run(&mut f);
    f.clock.advance(40 * DAY_MS);
    let new_done = completed_run(&mut f);
    let newest_done = completed_run(&mut f);
    let now = f.clock.now_ms();
    let ids = |sel: PruneSelector| -> Vec<String> {
        f.store
            .prunable_runs(&sel, None, 100)
            .unwrap()
            .runs
            .into_iter()
            .map(|k| k.run_id)
            .collect()
    };
    let older_than_30_days = Some(now - 30 * DAY_MS);
    assert_eq!(
        ids(PruneSelector {
            finished_before: older_than_30_days,
            ..Default::default()
        }),
        [old_done.clone(), old_cancelled.clone()]
    );
    assert_eq!(
        ids(PruneSelector {
            statuses: vec![RunStatus::Cancelled],
            ..Default::default()
        }),
        vec![old_cancelled.clone()]
    );
    assert_eq!(
        ids(PruneSelector {
            keep: Some(3),
            ..Default::default()
        }),
        vec![old_done.clone()]
    );
    // The newest N of the selected statuses stay, whatever their age.
    assert_eq!(
        ids(PruneSelector {
            statuses: vec![RunStatus::Completed],
            keep: Some(1),
            ..Default::default()
        }),
        [old_done.clone(), new_done.clone()]
    );
    assert_eq!(
        ids(PruneSelector {
            finished_before: older_than_30_days,
            keep: Some(3),
            ..Default::default()
        }),
        vec![old_done.clone()]
    );
    let _ = newest_done;
    // An unfinished status is refused, not ignored.
    assert!(f
        .store
        .prunable_runs(
            &PruneSelector {
                statuses: vec![RunStatus::Running],
                ..Default::default()
            },
            None,
            10
        )
        .is_err());
}

#[test]
fn a_selection_pages_oldest_first() {
    let mut f = Fixture::new();
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(completed_run(&mut f));
        f.clock.advance(1);
    }
    let all = PruneSelector::default();
    let first = f.store.prunable_runs(&all, None, 2).unwrap();
    assert!(first.more);
    let second = f.store.prunable_runs(&all, first.runs.last(), 2).unwrap();
    let third = f.store.prunable_runs(&all, second.runs.last(), 2).unwrap();
    assert!(!third.more);
    let paged: Vec<String> = [first, second, third]
        .into_iter()
        .flat_map(|p| p.runs)
        .map(|k| k.run_id)
        .collect();
    assert_eq!(paged, runs);
}

/// A run's receipts are found through its window of receipt rowids (`runs.receipts_from`,
/// `receipts_to`), which other runs' receipts interleave: a prune takes exactly the pruned
/// run's, and a kept run's receipts still replay.
#[test]
fn a_prune_takes_the_runs_receipts_and_none_of_those_between_them() {
    let mut f = Fixture::new();
    let a = completed_run(&mut f);
    let b = completed_run(&mut f);
    let command = |f: &mut Fixture, request_id: &str, run_id: &str| {
        let meta = CommandMeta {
            request_id: request_id.into(),
            idempotency_key: None,
            fingerprint: "fp".into(),
            kind: "run.status".into(),
            run_id: Some(run_id.into()),
        };
        f.store
            .write(|w| w.command(&meta, |_| Ok(json!({"n": request_id}))))
            .unwrap()
    };
    for n in 0..3 {
        command(&mut f, &format!("a-{n}"), &a);
        command(&mut f, &format!("b-{n}"), &b);
    }
    let receipts_of = |f: &Fixture, run_id: &str| {
        let dump = f.store.canonical_dump().unwrap();
        dump.lines()
            .filter(|l| l.contains(run_id) && l.contains("\"fp\""))
            .count()
    };
    assert_eq!((receipts_of(&f, &a), receipts_of(&f, &b)), (4, 4));
    let pruned = f
        .store
        .prune_runs(f.store.now_ms(), std::slice::from_ref(&a))
        .unwrap();
    assert_eq!(pruned, std::slice::from_ref(&a));
    assert_eq!((receipts_of(&f, &a), receipts_of(&f, &b)), (0, 4));
    // b's receipts inside a's window stayed: a repeated request replays, not runs again.
    let again = command(&mut f, "b-1", &b);
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.response, json!({"n": "b-1"}));
    f.assert_clean();
}

#[test]
fn receipts_naming_no_run_go_once_older_than_every_run_left() {
    let mut f = Fixture::new();
    let meta = CommandMeta {
        request_id: "req-claim".into(),
        idempotency_key: None,
        fingerprint: "fp".into(),
        kind: "message.claim".into(),
        run_id: None,
    };
    f.store
        .write(|w| w.command(&meta, |_| Ok(json!({"messages": []}))))
        .unwrap();
    f.clock.advance(1);
    let kept = completed_run(&mut f);
    f.clock.advance(1);
    // Newer than the run left: its start's receipt goes because it names the run.
    let pruned = completed_run(&mut f);
    let receipts = |f: &Fixture| {
        let dump = f.store.canonical_dump().unwrap();
        dump.lines()
            .find(|l| l.starts_with("## command_receipts ("))
            .unwrap()
            .to_owned()
    };
    assert_eq!(receipts(&f), "## command_receipts (3 rows)");
    assert_eq!(
        f.store
            .prune_runs(f.store.now_ms(), &[pruned])
            .unwrap()
            .len(),
        1
    );
    // The run.start receipt of the pruned run and the older message.claim went.
    assert_eq!(receipts(&f), "## command_receipts (1 rows)");
    let _ = kept;
    f.assert_clean();
}

#[test]
fn freed_pages_go_back_to_the_file_system() {
    let mut f = Fixture::new();
    let runs: Vec<String> = (0..200).map(|_| busy_cancelled_run(&mut f)).collect();
    f.store.checkpoint_now().unwrap();
    let size = |f: &Fixture| std::fs::metadata(f.store.path()).unwrap().len();
    let full = size(&f);
    assert_eq!(
        f.store.prune_runs(f.store.now_ms(), &runs).unwrap().len(),
        200
    );
    assert!(f.store.free_pages().unwrap() > 0);
    assert_eq!(
        f.store.write(|w| w.reclaim_free_pages(u32::MAX)).unwrap(),
        0
    );
    f.store.checkpoint_now().unwrap();
    let pruned = size(&f);
    assert!(
        pruned < full / 2,
        "the file kept its size: {full} bytes before, {pruned} after"
    );
}

/// A chatty run (thousands of `worker.progress`, `worker.notify` and `interaction.update`
/// calls) keeps only the latest few receipts per kind, not one per call; the latest still
/// replay exactly, its receipt window stays whole for `diagnose`, and a prune takes the rest.
#[test]
fn a_chatty_run_keeps_a_bounded_number_of_receipts() {
    use piw_host::store::RECEIPTS_KEPT_PER_RUN_AND_KIND as KEPT;
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let claim = act.claim.clone();
    let meta = |request_id: String, kind: &str| CommandMeta {
        request_id,
        idempotency_key: None,
        fingerprint: "fp".into(),
        kind: kind.into(),
        run_id: Some(run_id.clone()),
    };
    const CALLS: usize = 3_000;
    for n in 0..CALLS {
        let progress = meta(format!("progress-{n}"), "worker.progress");
        let notify = meta(format!("notify-{n}"), "worker.notify");
        f.store
            .write(|w| {
                w.command(&progress, |w| {
                    let kept = w.progress(&claim, &format!("step {n}"), &json!({"n": n}))?;
                    Ok(json!({"seq": kept.seq}))
                })?;
                w.command(&notify, |w| {
                    Ok(json!({"message_id": w.notify(&claim, &json!({"text": n}))?}))
                })
            })
            .unwrap();
    }
    let interaction = f.ask(&claim, &attempt, None);
    for n in 0..CALLS {
        let update = meta(format!("update-{n}"), "interaction.update");
        f.store
            .write(|w| {
                w.command(&update, |w| {
                    let kept =
                        w.interaction_progress(&interaction, &attempt, "working", &json!(n))?;
                    Ok(json!({"seq": kept.seq}))
                })
            })
            .unwrap();
    }
    let db = rusqlite::Connection::open(f.store.path()).unwrap();
    let count = |kind: &str| -> i64 {
        db.query_row(
            "SELECT COUNT(*) FROM command_receipts WHERE run_id = ?1 AND kind = ?2",
            [&run_id, kind],
            |r| r.get(0),
        )
        .unwrap()
    };
    for kind in ["worker.progress", "worker.notify", "interaction.update"] {
        assert_eq!(count(kind), KEPT, "{kind}: only the latest are kept");
    }
    // One notify node visit, one message, however often it was sent.
    let messages: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM workflow_messages WHERE run_id = ?1",
            [&run_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(messages, 1);
    // The latest of each kind replays its first answer, runs nothing again.
    let last = CALLS - 1;
    let again = f
        .store
        .write(|w| {
            w.command(
                &meta(format!("update-{last}"), "interaction.update"),
                |_| panic!("a resend of a kept receipt must replay"),
            )
        })
        .unwrap();
    assert!(again.replayed && again.committed_before, "{again:?}");
    let first_seq = again.response["seq"].clone();
    assert!(first_seq.as_u64().is_some(), "{again:?}");
    let again = f
        .store
        .write(|w| {
            w.command(&meta(format!("progress-{last}"), "worker.progress"), |_| {
                panic!("a resend of a kept receipt must replay")
            })
        })
        .unwrap();
    assert!(again.replayed, "{again:?}");
    f.assert_clean();
    f.store
        .write(|w| w.cancel(&run_id, Fence::Unclaimed, "done"))
        .unwrap();
    f.store
        .prune_runs(f.store.now_ms(), std::slice::from_ref(&run_id))
        .unwrap();
    let left: i64 = db
        .query_row("SELECT COUNT(*) FROM command_receipts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0, "the prune took the run's receipts");
    f.assert_clean();
}
