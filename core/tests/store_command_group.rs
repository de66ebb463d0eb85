//! `WriteTx::command_group` (group commit without a savepoint per command) must be
//! indistinguishable from running each command through `WriteTx::command` (a savepoint each):
//! same results, same replays, same revisions, and the same database afterwards, whatever mix
//! of successes, refusals before any write, failures after a write, replays and idempotency
//! conflicts a group holds.
//!
//! Each case builds one store with three runs, copies it (`Store::backup_to`), runs the same
//! commands as one group on the original and one by one on the copy, and compares. Both stores
//! share a fake clock, so every timestamp agrees. `PROPTEST_CASES` changes the number of cases.
mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::{new_run, LEASE_MS, T0};
use piw_core::clock::FakeClock;
use piw_core::store::*;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One command of a group.
#[derive(Debug, Clone)]
struct Step {
    request_id: String,
    run: usize,
    pause: bool,
    /// Fails after its write (a command whose savepoint must undo it).
    fail_after_write: bool,
    /// A different meaning under a request id used before: an idempotency conflict.
    fingerprint_salt: u8,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (0usize..3, any::<bool>(), 0u8..8, 0u8..10, 0usize..6);
    prop::collection::vec(step, 1..24).prop_map(|raw| {
        let mut out: Vec<Step> = Vec::with_capacity(raw.len());
        for (i, (run, pause, fail, reuse, earlier)) in raw.into_iter().enumerate() {
            let step = match reuse {
                // The same request again (a client's retry): replayed if the first committed.
                0 | 1 if !out.is_empty() => out[earlier % out.len()].clone(),
                // An earlier request id with another meaning.
                2 if !out.is_empty() => Step {
                    fingerprint_salt: 1,
                    ..out[earlier % out.len()].clone()
                },
                _ => Step {
                    request_id: format!("req-{i}"),
                    run,
                    pause,
                    fail_after_write: fail == 0,
                    fingerprint_salt: 0,
                },
            };
            out.push(step);
        }
        out
    })
}

fn meta(step: &Step, runs: &[String]) -> CommandMeta {
    CommandMeta {
        request_id: step.request_id.clone(),
        idempotency_key: None,
        fingerprint: format!(
            "{}:{}:{}:{}",
            step.run, step.pause, step.fail_after_write, step.fingerprint_salt
        ),
        kind: if step.pause {
            "run.pause"
        } else {
            "run.resume"
        }
        .into(),
        run_id: Some(runs[step.run].clone()),
    }
}

fn apply(w: &mut WriteTx<'_>, step: &Step, runs: &[String]) -> StoreResult<Value> {
    let run_id = &runs[step.run];
    let revision = if step.pause {
        w.pause(run_id, Fence::Unclaimed)?
    } else {
        w.resume(run_id, Fence::Unclaimed)?
    };
    if step.fail_after_write {
        return Err(StoreError::InvalidInput("fails after writing".into()));
    }
    Ok(json!({ "run_id": run_id, "revision": revision }))
}

/// What a caller can observe of one command's result.
fn observed(result: &StoreResult<CommandOutcome>) -> String {
    match result {
        Ok(outcome) => format!("ok {} replayed={}", outcome.response, outcome.replayed),
        Err(e) => format!("err {e}"),
    }
}

fn open(path: &std::path::Path, clock: &FakeClock) -> Store {
    let config = StoreConfig {
        lease_ms: LEASE_MS,
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    };
    Store::open(path, config).expect("open store")
}

proptest! {
    #[test]
    fn a_group_ends_exactly_like_one_savepoint_per_command(steps in steps()) {
        let dir = tempfile::tempdir().unwrap();
        let clock = FakeClock::new(T0);
        let mut grouped = open(&dir.path().join("grouped.sqlite"), &clock);
        let runs: Vec<String> = (0..3)
            .map(|_| grouped.write(|w| w.start_run(&new_run(None))).unwrap())
            .collect();
        // One run starts paused, so resumes are not all refused.
        grouped.write(|w| w.pause(&runs[1], Fence::Unclaimed)).unwrap();
        grouped.backup_to(&dir.path().join("single.sqlite")).unwrap();
        let mut single = open(&dir.path().join("single.sqlite"), &clock);
        clock.advance(5);

        let applied = Cell::new(0usize);
        let (group_results, group_revisions) = grouped
            .write(|w| {
                let results = w.command_group(
                    &steps,
                    |s| Ok(meta(s, &runs)),
                    |w, s| {
                        applied.set(applied.get() + 1);
                        apply(w, s, &runs)
                    },
                )?;
                Ok((results, w.take_revisions()))
            })
            .unwrap();
        let (single_results, single_revisions) = single
            .write(|w| {
                let results: Vec<_> = steps
                    .iter()
                    .map(|s| w.command(&meta(s, &runs), |w| apply(w, s, &runs)))
                    .collect();
                Ok((results, w.take_revisions()))
            })
            .unwrap();

        let group_seen: Vec<String> = group_results.iter().map(observed).collect();
        let single_seen: Vec<String> = single_results.iter().map(observed).collect();
        prop_assert_eq!(group_seen, single_seen);
        prop_assert_eq!(group_revisions, single_revisions);
        prop_assert_eq!(
            grouped.canonical_dump().unwrap(),
            single.canonical_dump().unwrap()
        );
        // A command runs a second time only when the group had to start again.
        let wrote_then_failed = single_results.iter().any(|r| {
            matches!(r, Err(StoreError::InvalidInput(m)) if m == "fails after writing")
        });
        if !wrote_then_failed {
            prop_assert!(applied.get() <= steps.len());
        }
    }
}

/// A group whose middle command fails after writing keeps its neighbours' changes and none of
/// its own, and every command is answered.
#[test]
fn a_command_that_fails_after_writing_leaves_nothing_and_its_neighbours_stay() {
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::new(T0);
    let mut store = open(&dir.path().join("state.sqlite"), &clock);
    let runs: Vec<String> = (0..3)
        .map(|_| store.write(|w| w.start_run(&new_run(None))).unwrap())
        .collect();
    let step = |i: usize, fail_after_write: bool| Step {
        request_id: format!("req-{i}"),
        run: i,
        pause: true,
        fail_after_write,
        fingerprint_salt: 0,
    };
    let steps = [step(0, false), step(1, true), step(2, false)];
    let results = store
        .write(|w| w.command_group(&steps, |s| Ok(meta(s, &runs)), |w, s| apply(w, s, &runs)))
        .unwrap();
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(&results[1], Err(StoreError::InvalidInput(m)) if m == "fails after writing"),
        "{results:?}"
    );
    let paused: Vec<bool> = runs.iter().map(|r| store.run(r).unwrap().paused).collect();
    assert_eq!(paused, [true, false, true]);
    assert_eq!(
        store.run_state(&runs[1]).unwrap().1,
        1,
        "only the start's revision"
    );
    let events: Vec<usize> = runs
        .iter()
        .map(|r| store.events(r, 0).unwrap().len())
        .collect();
    assert_eq!(events, [2, 1, 2], "started (+ paused)");
}
