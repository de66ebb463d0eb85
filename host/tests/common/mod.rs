//! Shared fixtures for the store's integration tests.
#![allow(dead_code)]

use piw_host::store::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use piw_host::clock::FakeClock;
use piw_host::store::{
    Activation, AttemptOutcome, Claim, ExecutionMode, NewRun, Reservation, RetryContract, Store,
    StoreConfig, TransitionRequest,
};
use serde_json::json;
use tempfile::TempDir;

pub const LEASE_MS: i64 = 30_000;
pub const T0: i64 = 1_700_000_000_000;
pub const HOST: &str = "host-test";

pub struct Fixture {
    pub dir: TempDir,
    pub store: Store,
    pub clock: FakeClock,
    /// When set, the next commit is aborted just before it happens.
    pub fail_next_commit: Arc<AtomicBool>,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = FakeClock::new(T0);
        let fail_next_commit = Arc::new(AtomicBool::new(false));
        let flag = fail_next_commit.clone();
        let config = StoreConfig {
            commit_observer: None,
            lease_ms: LEASE_MS,
            clock: Arc::new(clock.clone()),
            fault_hook: Some(Arc::new(move |_ops: &[&'static str]| {
                flag.swap(false, Ordering::SeqCst)
            })),
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path().join("state.sqlite"), config).expect("open store");
        Self {
            dir,
            store,
            clock,
            fail_next_commit,
        }
    }

    pub fn start(&mut self) -> String {
        self.start_with(new_run(Some("session-1")))
    }

    pub fn start_with(&mut self, run: NewRun) -> String {
        self.store.write(|w| w.start_run(&run)).expect("start run")
    }

    pub fn activate(&mut self, run_id: &str) -> Activation {
        self.store
            .write(|w| w.activate(run_id, HOST))
            .expect("activate")
    }

    /// Starts and activates a run and opens the first attempt at node `a`.
    pub fn running(&mut self) -> (String, Activation, String) {
        let run_id = self.start();
        let act = self.activate(&run_id);
        let attempt = self
            .store
            .write(|w| w.node_started(&act.claim, "a", None))
            .expect("node started");
        (run_id, act, attempt)
    }

    /// Opens an agent interaction (request `{}`) on `attempt`, due at `deadline`; the run
    /// then waits. Returns the interaction.
    pub fn ask(&mut self, claim: &Claim, attempt: &str, deadline: Option<i64>) -> String {
        self.store
            .write(|w| {
                w.request_interaction(
                    claim,
                    attempt,
                    piw_host::store::InteractionKind::Agent,
                    &json!({}),
                    deadline,
                    &|_| true,
                )
            })
            .expect("request interaction")
    }

    /// A waiting run: started, activated, at node `a`, waiting on an agent interaction.
    /// Returns the run, its attempt and the interaction.
    pub fn waiting(&mut self) -> (String, String, String) {
        let (run_id, act, attempt) = self.running();
        let interaction = self.ask(&act.claim, &attempt, None);
        assert_eq!(
            self.store.run(&run_id).unwrap().status,
            piw_host::store::RunStatus::Waiting
        );
        (run_id, attempt, interaction)
    }

    /// Reserves the effect `key` for `attempt` and marks it applying; returns its id.
    pub fn reserve_and_apply(
        &mut self,
        claim: &Claim,
        attempt: &str,
        key: &str,
        contract: RetryContract,
    ) -> String {
        let reserved = self
            .store
            .write(|w| w.reserve_effect(claim, attempt, key, "fp", contract))
            .expect("reserve");
        let Reservation::Reserved { effect_id, .. } = reserved else {
            panic!("expected a fresh reservation, got {reserved:?}");
        };
        self.store
            .write(|w| w.effect_applying(claim, &effect_id))
            .expect("applying");
        effect_id
    }

    /// Runs `sql` on the database behind the store's back (a second connection, no foreign
    /// keys): the contradictions `diagnose` must find.
    pub fn corrupt(&self, sql: &str) {
        let c = rusqlite::Connection::open(self.store.path()).unwrap();
        c.execute_batch(sql).unwrap();
    }

    pub fn assert_clean(&self) {
        let findings = self.store.diagnose(self.store.now_ms()).expect("diagnose");
        assert!(findings.is_empty(), "diagnose found: {findings:#?}");
    }
}

pub fn new_run(session: Option<&str>) -> NewRun {
    NewRun {
        workflow_name: "demo".into(),
        source_root: "/tmp/demo.workflow.mjs".into(),
        source_hash: "abc".into(),
        mounted_sources: json!({}),
        definition: None,
        input: json!({"n": 1}),
        origin_session: session.map(str::to_owned),
        execution_mode: ExecutionMode::Interactive,
        project_dir: "/tmp".into(),
    }
}

pub fn step(attempt_id: &str, next: &str) -> TransitionRequest {
    TransitionRequest {
        attempt_id: attempt_id.to_owned(),
        outcome: AttemptOutcome::Succeeded {
            output: json!({"ok": true}),
        },
        next_node: next.to_owned(),
        next_deadline_at: None,
    }
}
