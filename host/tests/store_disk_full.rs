//! A full disk: the host's own work (deadlines, heartbeats, scheduling) is retried with
//! growing, bounded pauses while nothing can be committed, not in a loop; once there is space
//! the work is done and nothing acknowledged before is lost. Driven through the engine's turn
//! against a real store on a fake clock: attempts are counted, no time is waited.

mod common;

use piw_host::store::prelude::*;
use std::sync::Arc;

use common::{new_run, LEASE_MS, T0};
use piw_host::clock::{Clock as _, FakeClock};
use piw_host::engine::handlers::run::PreparedStart;
use piw_host::engine::state::HostState;
use piw_host::engine::timers::next_deadline_at;
use piw_host::engine::turn::{turn, Effect, Effects, Input, Job};
use piw_host::protocol::{payload, Receipt, Rejection, Request, RequestBody};
use piw_host::store::{RunStatus, Store, StoreConfig, StoreError, DISK_FULL_MAX_BACKOFF_MS};
use serde_json::json;

/// The driver's side of a turn, reduced to what these tests look at: the replies.
#[derive(Default)]
struct Edges {
    replies: Vec<(u32, Result<Receipt, Rejection>)>,
}

impl Effects<u32> for Edges {
    fn apply(&mut self, effect: Effect<u32>) {
        if let Effect::Reply { to, result } = effect {
            self.replies.push((to, result));
        }
    }
    fn publishing(&self) -> bool {
        false
    }
    fn before_commit(&mut self, _kinds: &[&str]) -> Result<(), StoreError> {
        Ok(())
    }
    fn after_commit(&mut self, _kinds: &[&str]) {}
}

fn open(dir: &std::path::Path, clock: &FakeClock, full: Option<std::path::PathBuf>) -> Store {
    let config = StoreConfig {
        lease_ms: LEASE_MS,
        clock: Arc::new(clock.clone()),
        disk_full_while: full,
        ..StoreConfig::default()
    };
    Store::open(dir.join("state.sqlite"), config).expect("open store")
}

/// A host on `store` as `driver::serve` starts one, launching nothing (no slots): the runs it
/// recovers stay queued.
fn host(store: &mut Store) -> HostState {
    let epoch = piw_host::driver::recover_at_start(store, 1).expect("startup recovery");
    let mut state = HostState {
        owner_id: piw_host::driver::host_owner_id(epoch),
        epoch,
        supervising: true,
        socket_path: "/nonexistent/host.sock".into(),
        reply_limit: piw_host::protocol::DEFAULT_MAX_FRAME_BYTES,
        ..HostState::new(Box::new(piw_host::ids::OsIds))
    };
    state.child_config.max_children = 0;
    state
}

/// Runs the store thread's loop for `interval_ms` of fake time: wait for the next deadline
/// (the clock jumps there), run the turn. Returns the turns run, at most `max_turns` (a host
/// that spins never lets the fake clock move).
fn run_for(
    store: &mut Store,
    state: &mut HostState,
    clock: &FakeClock,
    interval_ms: i64,
    max_turns: usize,
) -> Vec<i64> {
    let end = clock.now_ms() + interval_ms;
    let mut turns = Vec::new();
    while clock.now_ms() < end && turns.len() < max_turns {
        let Some(deadline) = next_deadline_at(store, state, clock.now_ms()) else {
            break;
        };
        if deadline > clock.now_ms() {
            clock.advance(deadline - clock.now_ms());
            continue;
        }
        turns.push(clock.now_ms());
        turn(
            store,
            state,
            clock.now_ms(),
            Vec::new(),
            Some(deadline),
            &mut Edges::default(),
        );
    }
    turns
}

/// The disk fills after a run's claim was taken and stays full past its lease: the expired
/// claim (due work that must commit) is retried a bounded number of times over a minute, with
/// pauses that grow to at most `DISK_FULL_MAX_BACKOFF_MS`; once there is space the claim is
/// recovered at the next retry and the run waits for a slot again.
#[test]
fn while_the_disk_stays_full_the_host_retries_with_growing_bounded_pauses() {
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::new(T0);
    let full = dir.path().join("disk-is-full");
    let mut store = open(dir.path(), &clock, Some(full.clone()));
    let mut state = host(&mut store);
    let run_id = store.write(|w| w.start_run(&new_run(Some("s")))).unwrap();
    store
        .write(|w| w.activate(&run_id, &state.owner_id))
        .unwrap();
    let before = store.run(&run_id).unwrap();
    assert_eq!(before.status, RunStatus::Running);

    std::fs::write(&full, "").unwrap();
    clock.advance(LEASE_MS + 1);
    const MINUTE_MS: i64 = 60_000;
    let turns = run_for(&mut store, &mut state, &clock, MINUTE_MS, 10_000);
    assert!(!turns.is_empty(), "the expired claim is due work");
    let spell = store.disk_full_spell().expect("the disk is full");
    // Without pauses every turn retries at once: 10,000 turns at one instant of fake time.
    assert!(
        spell.failures <= 30,
        "{} commits failed over a minute ({} turns, the clock at +{} ms)",
        spell.failures,
        turns.len(),
        clock.now_ms() - (T0 + LEASE_MS + 1)
    );
    // And it keeps trying: the pauses are bounded.
    assert!(
        spell.failures >= (MINUTE_MS / DISK_FULL_MAX_BACKOFF_MS) as u64,
        "{spell:?}"
    );
    for pair in turns.windows(2) {
        assert!(pair[1] - pair[0] <= DISK_FULL_MAX_BACKOFF_MS, "{turns:?}");
    }
    assert_eq!(
        store.run(&run_id).unwrap().revision,
        before.revision,
        "nothing stored"
    );

    // Space is back: the next retry commits the recovery, and the spell ends.
    std::fs::remove_file(&full).unwrap();
    run_for(
        &mut store,
        &mut state,
        &clock,
        DISK_FULL_MAX_BACKOFF_MS + 1,
        100,
    );
    assert_eq!(store.disk_full_spell(), None);
    let after = store.run(&run_id).unwrap();
    assert_eq!(after.status, RunStatus::Queued, "{after:?}");
    assert!(after.revision > before.revision);
    let findings = store.diagnose(store.now_ms()).unwrap();
    assert!(findings.is_empty(), "{findings:#?}");
}

fn start_job(request_id: &str, input: serde_json::Value, to: u32) -> Input<u32> {
    let body = RequestBody::RunStart(payload::RunStart {
        workflow_file: "/t/t.workflow.json".into(),
        input: input.clone(),
        session_id: Some("s".into()),
        execution_mode: None,
        project_dir: Some("/".into()),
    });
    let mut run = new_run(Some("s"));
    run.input = input;
    Input::Request(Box::new(Job {
        request: Request::new(request_id, body),
        start: Some(PreparedStart { new_run: run }),
        accepted_source: None,
        start_refused: None,
        meta: None,
        reply: to,
    }))
}

/// A real `SQLITE_FULL` (the database capped at the pages it has: `PRAGMA max_page_count`):
/// a `run.start` that needs new pages is refused as on a full disk, stores nothing, and puts
/// the host's own work on its growing pauses; with the cap lifted the same request starts its
/// run, the spell ends, and what was committed before is intact.
#[test]
fn a_real_sqlite_full_is_refused_clearly_and_work_resumes_once_space_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::new(T0);
    let mut store = open(dir.path(), &clock, None);
    let mut state = host(&mut store);
    let mut edges = Edges::default();
    turn(
        &mut store,
        &mut state,
        clock.now_ms(),
        vec![start_job("before", json!({"n": 0}), 0)],
        None,
        &mut edges,
    );
    let (_, first) = edges.replies.pop().expect("a reply");
    let first = first.expect("started before the disk filled");
    let first_run = first.body["run_id"].as_str().unwrap().to_owned();

    let pages = store.page_count().unwrap();
    assert_eq!(store.limit_pages(Some(pages as u32)).unwrap(), pages);
    // Far more than the free room of the pages there are: new pages are needed.
    let big = json!({"text": "x".repeat(48 * 1024)});
    let mut edges = Edges::default();
    turn(
        &mut store,
        &mut state,
        clock.now_ms(),
        vec![start_job("during", big.clone(), 1)],
        None,
        &mut edges,
    );
    let (_, refused) = edges.replies.pop().expect("a reply");
    let refused = refused.expect_err("refused on a full database");
    assert!(
        refused
            .message
            .contains("is full: nothing of this was stored"),
        "{refused:?}"
    );
    let spell = store
        .disk_full_spell()
        .expect("a real SQLITE_FULL is a full disk");
    assert_eq!(spell.failures, 1);
    assert!(store.disk_full_retry_at().unwrap() > clock.now_ms());
    assert_eq!(store.page_count().unwrap(), pages, "nothing stored");

    store.limit_pages(None).unwrap();
    let mut edges = Edges::default();
    turn(
        &mut store,
        &mut state,
        clock.now_ms(),
        vec![start_job("during", big.clone(), 2)],
        None,
        &mut edges,
    );
    let (_, started) = edges.replies.pop().expect("a reply");
    let started = started.expect("started once there is space");
    assert!(!started.replayed);
    let run_id = started.body["run_id"].as_str().unwrap();
    assert_eq!(store.run(run_id).unwrap().status, RunStatus::Queued);
    assert_eq!(store.disk_full_spell(), None);
    assert_eq!(store.run(&first_run).unwrap().status, RunStatus::Queued);
    let findings = store.diagnose(store.now_ms()).unwrap();
    assert!(findings.is_empty(), "{findings:#?}");
}
