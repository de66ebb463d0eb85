//! `WriteTx::command_group` (group commit without a savepoint per command) must be
//! indistinguishable from running each command through `WriteTx::command` (a savepoint each):
//! same results, same replays, same revisions, the same operations seen before the commit, and
//! the same database afterwards, whatever mix of successes, refusals before any write, failures
//! after a write, replays (by request id or idempotency key) and idempotency conflicts a group
//! holds, with and without the claim of a run this host holds.
//!
//! Each case builds one store with three runs (the third one running under a host claim),
//! copies it (`Store::backup_to`), runs the same commands as one group on the original and one
//! by one on the copy, and compares. Both stores share a fake clock, so every timestamp agrees.
//! `PROPTEST_CASES` changes the number of cases.
mod common;

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use common::{new_run, HOST, LEASE_MS, T0};
use piw_host::clock::FakeClock;
use piw_host::ids::ClaimToken;
use piw_host::store::*;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Which fence a command presents.
#[derive(Debug, Clone, Copy)]
enum FencePick {
    Unclaimed,
    /// The live claim of the held run (refused for the other runs).
    Held,
    /// The held run's claim with a forged token: always `ClaimLost`.
    Forged,
}

/// One command of a group.
#[derive(Debug, Clone)]
struct Step {
    request_id: String,
    idempotency_key: Option<String>,
    run: usize,
    pause: bool,
    fence: FencePick,
    /// Fails after its write (a command whose savepoint must undo it).
    fail_after_write: bool,
    /// A different meaning under a request id or key used before: an idempotency conflict.
    fingerprint_salt: u8,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        (0usize..3, any::<bool>(), 0u8..5, 0u8..8),
        (0u8..12, 0usize..8, 0u8..6),
    );
    prop::collection::vec(step, 1..24).prop_map(|raw| {
        let mut out: Vec<Step> = Vec::with_capacity(raw.len());
        for (i, ((run, pause, fence, fail), (reuse, earlier, key))) in raw.into_iter().enumerate() {
            let before = (!out.is_empty()).then(|| out[earlier % out.len()].clone());
            let step = match (reuse, before) {
                // The same request again (a client's retry): replayed if the first committed.
                (0 | 1, Some(before)) => before,
                // An earlier request id with another meaning.
                (2, Some(before)) => Step {
                    fingerprint_salt: 1,
                    ..before
                },
                // A new request id under an earlier request's key: the same meaning is a
                // replay by key, another meaning a conflict.
                (3 | 4, Some(before)) if before.idempotency_key.is_some() => Step {
                    request_id: format!("req-{i}"),
                    fingerprint_salt: reuse - 3,
                    ..before
                },
                _ => Step {
                    request_id: format!("req-{i}"),
                    idempotency_key: (key < 2).then(|| format!("key-{i}")),
                    run,
                    pause,
                    fence: match fence {
                        0 | 1 => FencePick::Unclaimed,
                        2 | 3 => FencePick::Held,
                        _ => FencePick::Forged,
                    },
                    fail_after_write: fail == 0,
                    fingerprint_salt: 0,
                },
            };
            out.push(step);
        }
        out
    })
}

/// The store under test with what it lets the test see.
struct Subject {
    store: Store,
    /// The operations of each commit, as the fault hook sees them.
    ops: Arc<Mutex<Vec<String>>>,
}

fn open(path: &std::path::Path, clock: &FakeClock) -> Subject {
    let ops = Arc::new(Mutex::new(Vec::new()));
    let seen = ops.clone();
    let config = StoreConfig {
        commit_observer: None,
        lease_ms: LEASE_MS,
        clock: Arc::new(clock.clone()),
        fault_hook: Some(Arc::new(move |ops: &[&'static str]| {
            seen.lock().unwrap().push(ops.join(","));
            false
        })),
        ..StoreConfig::default()
    };
    Subject {
        store: Store::open(path, config).expect("open store"),
        ops,
    }
}

/// Three runs: 0 queued, 1 queued and paused, 2 running under the returned host claim.
struct Runs {
    ids: Vec<String>,
    held: Claim,
    forged: Claim,
}

fn meta(step: &Step, runs: &Runs) -> CommandMeta {
    CommandMeta {
        request_id: step.request_id.clone(),
        idempotency_key: step.idempotency_key.clone(),
        fingerprint: format!(
            "{}:{}:{:?}:{}:{}",
            step.run, step.pause, step.fence, step.fail_after_write, step.fingerprint_salt
        ),
        kind: if step.pause {
            "run.pause"
        } else {
            "run.resume"
        }
        .into(),
        run_id: Some(runs.ids[step.run].clone()),
    }
}

fn apply(w: &mut WriteTx<'_>, step: &Step, runs: &Runs) -> StoreResult<Value> {
    let run_id = &runs.ids[step.run];
    let fence = match step.fence {
        FencePick::Unclaimed => Fence::Unclaimed,
        FencePick::Held => Fence::Claim(&runs.held),
        FencePick::Forged => Fence::Claim(&runs.forged),
    };
    let revision = if step.pause {
        w.pause(run_id, fence)?
    } else {
        w.resume(run_id, fence)?
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

fn setup(store: &mut Store) -> Runs {
    let ids: Vec<String> = (0..3)
        .map(|_| store.write(|w| w.start_run(&new_run(None))).unwrap())
        .collect();
    store.write(|w| w.pause(&ids[1], Fence::Unclaimed)).unwrap();
    let held = store.write(|w| w.activate(&ids[2], HOST)).unwrap().claim;
    let forged = Claim {
        token: ClaimToken::generate(&mut piw_host::ids::OsIds),
        ..held.clone()
    };
    Runs { ids, held, forged }
}

proptest! {
    #[test]
    fn a_group_ends_exactly_like_one_savepoint_per_command(steps in steps()) {
        let dir = tempfile::tempdir().unwrap();
        let clock = FakeClock::new(T0);
        let mut grouped = open(&dir.path().join("grouped.sqlite"), &clock);
        let runs = setup(&mut grouped.store);
        grouped.store.backup_to(&dir.path().join("single.sqlite")).unwrap();
        let mut single = open(&dir.path().join("single.sqlite"), &clock);
        clock.advance(5);
        grouped.ops.lock().unwrap().clear();

        let applied = Cell::new(0usize);
        let (group_results, group_revisions) = grouped
            .store
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
            .store
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
        prop_assert_eq!(&*grouped.ops.lock().unwrap(), &*single.ops.lock().unwrap());
        prop_assert_eq!(
            grouped.store.canonical_dump().unwrap(),
            single.store.canonical_dump().unwrap()
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
    let Subject { mut store, .. } = open(&dir.path().join("state.sqlite"), &clock);
    let runs = setup(&mut store);
    let step = |i: usize, fail_after_write: bool| Step {
        request_id: format!("req-{i}"),
        idempotency_key: None,
        run: 0,
        pause: true,
        fence: FencePick::Unclaimed,
        fail_after_write,
        fingerprint_salt: 0,
    };
    // Pause run 0 (then fail), pause it (kept), resume run 1 (kept).
    let steps = [
        step(0, true),
        step(1, false),
        Step {
            run: 1,
            pause: false,
            ..step(2, false)
        },
    ];
    let results = store
        .write(|w| w.command_group(&steps, |s| Ok(meta(s, &runs)), |w, s| apply(w, s, &runs)))
        .unwrap();
    assert!(
        matches!(&results[0], Err(StoreError::InvalidInput(m)) if m == "fails after writing"),
        "{results:?}"
    );
    assert!(results[1].is_ok() && results[2].is_ok(), "{results:?}");
    let paused: Vec<bool> = runs.ids[..2]
        .iter()
        .map(|r| store.run(r).unwrap().paused)
        .collect();
    assert_eq!(paused, [true, false]);
    // Run 0: started, paused once (the failed pause left no event); run 1: started, paused,
    // resumed.
    let events: Vec<Vec<String>> = runs.ids[..2]
        .iter()
        .map(|r| {
            store
                .events(r, 0)
                .unwrap()
                .into_iter()
                .map(|e| e.kind)
                .collect()
        })
        .collect();
    assert_eq!(
        events,
        [
            vec!["started", "paused"],
            vec!["started", "paused", "resumed"]
        ]
    );
}
