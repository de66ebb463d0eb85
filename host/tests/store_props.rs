//! Property tests of the store's lifecycle, fencing and projection rules (docs/RULES.md, rules 1–6,
//! Parts 1–3, and the hand-offs of Parts 7–8): random sequences of up to 60 commands against one
//! store with a fake clock (30 s lease) and one to three runs. Every command is attempted whatever
//! the state: the store is the authority and an impossible command must simply be refused. Most
//! commands are aimed from the stored state (the current attempt, a pending decision, a
//! validating submission, a reserved effect ...), `Progress` picks the run's natural next step so
//! sequences get deep, and old claims, forged tokens, stale attempt ids and clock jumps (1 ms to
//! two leases) attack it.
//!
//! The same harness drives six properties, so a failure of one family of invariants does not hide
//! the others:
//! - `fencing`: one live claim per run and only where allowed; generations only grow and every
//!   activation or control claim bumps them by one; an old generation or a forged token never
//!   writes; an expired claim never renews; a refused write (every `ClaimLost` included) changes
//!   nothing; an unclaimed writer never changes a run someone holds; stale attempt ids never
//!   succeed; the model cannot answer a protected human decision;
//! - `stale_writers_get_claim_lost`: a writer with an older generation (or a forged token) gets a
//!   typed `ClaimLost` whatever the run's state;
//! - `projection_and_terminal`: event log, run row and viewer projection agree; terminal runs
//!   never change;
//! - `sweeps_never_fail`: expiry recovery, the interaction-deadline sweep and host-restart
//!   recovery always succeed and only take what they should;
//! - `work_in_flight_survives_handoffs`: a validating submission or a `never` effect being
//!   applied is never dropped when the run parks, waits or moves on;
//! - `diagnose_clean`: `diagnose` finds nothing after any sequence.
//!
//! `PROPTEST_CASES` changes the number of cases (256 by default); `PIW_PROPS_STATS=1` prints how
//! often each command was accepted or refused (with `--nocapture`).
mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use common::{new_run, HOST, LEASE_MS, T0};
use piw_host::clock::FakeClock;
use piw_host::ids::ClaimToken;
use piw_host::store::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;

const CONTROL: &str = "operator";
const NODES: [&str; 3] = ["a", "b", "c"];

// ----- commands ------------------------------------------------------------------------------

/// Which attempt id a command presents.
#[derive(Debug, Clone, Copy)]
enum AttemptPick {
    /// The run's current attempt as the store reports it.
    Current,
    /// Another attempt of the run (or a made-up id when there is none).
    Stale(u8),
}

#[derive(Debug, Clone, Copy)]
enum CancelVia {
    /// `Fence::Claim` with the newest claim handed out for the run.
    Claim,
    /// `Fence::Unclaimed`.
    Unclaimed,
    /// `control_claim` and `cancel` with that claim, in one transaction.
    Control,
}

/// A write replayed by an old claim holder.
#[derive(Debug, Clone, Copy)]
enum StaleOp {
    Heartbeat,
    NodeStarted,
    Transition,
    Wait,
    RequestInteraction,
    Park,
    Complete,
    Fail,
    Cancel,
    Pause,
    Resume,
    ChildLost,
    Review,
    Notify,
    Reserve,
    Applying,
    SettleEffect,
    Settle,
    Report,
    RecordDefinition,
}

const STALE_OPS: [StaleOp; 20] = [
    StaleOp::Heartbeat,
    StaleOp::NodeStarted,
    StaleOp::Transition,
    StaleOp::Wait,
    StaleOp::RequestInteraction,
    StaleOp::Park,
    StaleOp::Complete,
    StaleOp::Fail,
    StaleOp::Cancel,
    StaleOp::Pause,
    StaleOp::Resume,
    StaleOp::ChildLost,
    StaleOp::Review,
    StaleOp::Notify,
    StaleOp::Reserve,
    StaleOp::Applying,
    StaleOp::SettleEffect,
    StaleOp::Settle,
    StaleOp::Report,
    StaleOp::RecordDefinition,
];

/// Selectors (`run`, `pick`, ...) are resolved modulo what exists when the command runs.
#[derive(Debug, Clone)]
enum Cmd {
    Start,
    Activate {
        run: u8,
    },
    NodeStarted {
        run: u8,
        node: u8,
    },
    Transition {
        run: u8,
        attempt: AttemptPick,
        outcome: u8,
        node: u8,
    },
    Wait {
        run: u8,
        attempt: AttemptPick,
        human: bool,
    },
    Answer {
        run: u8,
        pick: u8,
        by_model: bool,
    },
    RequestInteraction {
        run: u8,
        attempt: AttemptPick,
        deadline_ms: Option<u32>,
    },
    Submit {
        run: u8,
        pick: u8,
        stale_attempt: bool,
        key: Option<u8>,
        payload: u8,
    },
    Settle {
        run: u8,
        pick: u8,
        accept: bool,
    },
    ExpireInteraction {
        run: u8,
        pick: u8,
    },
    Pause {
        run: u8,
        wrong_fence: bool,
    },
    Resume {
        run: u8,
        wrong_fence: bool,
    },
    Park {
        run: u8,
        delay_ms: Option<u32>,
    },
    Complete {
        run: u8,
        attempt: AttemptPick,
    },
    Fail {
        run: u8,
        with_attempt: bool,
        timed_out: bool,
    },
    Cancel {
        run: u8,
        via: CancelVia,
    },
    ControlClaim {
        run: u8,
    },
    ChildLost {
        run: u8,
    },
    RecoverExpired,
    Reserve {
        run: u8,
        key: u8,
        contract: u8,
        other_fingerprint: bool,
    },
    Applying {
        run: u8,
        pick: u8,
    },
    SettleEffect {
        run: u8,
        pick: u8,
        applied: bool,
    },
    Heartbeat {
        run: u8,
    },
    SendToReview {
        run: u8,
    },
    Notify {
        run: u8,
    },
    /// A child's progress message (an event and nothing else).
    Report {
        run: u8,
    },
    /// The graph snapshot stored at first activation (refused the second time).
    RecordDefinition {
        run: u8,
    },
    /// The natural next step of the run's life, chosen from its stored state (see
    /// [`Harness::resolve`]); it keeps sequences going deep instead of mostly being refused.
    Progress {
        run: u8,
        choice: u8,
    },
    /// Replays a write with a claim of an older generation (or a forged token).
    StaleWrite {
        run: u8,
        pick: u8,
        op: u8,
        forge: bool,
    },
    /// The host's sweep: expire every pending interaction whose deadline passed.
    ExpireDue,
    /// A new host process starts (new owner id) and requeues runs held by the earlier host.
    HostRestart,
    /// Moves the clock forward by 1 ms … two lease intervals.
    Jump {
        ms: i64,
    },
    /// Sets the clock to exactly the run's stored expiry (expiry == now is expired).
    JumpToExpiry {
        run: u8,
    },
}

fn attempt_pick() -> impl Strategy<Value = AttemptPick> {
    prop_oneof![
        5 => Just(AttemptPick::Current),
        1 => any::<u8>().prop_map(AttemptPick::Stale),
    ]
}

fn cancel_via() -> impl Strategy<Value = CancelVia> {
    prop_oneof![
        Just(CancelVia::Claim),
        Just(CancelVia::Unclaimed),
        Just(CancelVia::Control)
    ]
}

/// A run selector (see [`Harness::run_ix`]): mostly the first open run.
fn run() -> impl Strategy<Value = u8> {
    prop_oneof![2 => Just(0u8), 1 => any::<u8>()]
}

/// Interaction deadlines: mostly short, so they pass while claims are still live.
fn deadline() -> impl Strategy<Value = Option<u32>> {
    prop::option::weighted(0.7, prop_oneof![1u32..=5_000, 5_000u32..=90_000])
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let r = any::<u8>;
    prop_oneof![
        2 => Just(Cmd::Start),
        30 => (run(), r()).prop_map(|(run, choice)| Cmd::Progress { run, choice }),
        10 => run().prop_map(|run| Cmd::Activate { run }),
        8 => (run(), r()).prop_map(|(run, node)| Cmd::NodeStarted { run, node }),
        10 => (run(), attempt_pick(), r(), r())
            .prop_map(|(run, attempt, outcome, node)| Cmd::Transition { run, attempt, outcome, node }),
        3 => (run(), attempt_pick(), any::<bool>())
            .prop_map(|(run, attempt, human)| Cmd::Wait { run, attempt, human }),
        4 => (run(), r(), prop::bool::weighted(0.3))
            .prop_map(|(run, pick, by_model)| Cmd::Answer { run, pick, by_model }),
        4 => (run(), attempt_pick(), deadline())
            .prop_map(|(run, attempt, deadline_ms)| Cmd::RequestInteraction { run, attempt, deadline_ms }),
        5 => (run(), r(), prop::bool::weighted(0.2), prop::option::of(0u8..3), 0u8..2).prop_map(
            |(run, pick, stale_attempt, key, payload)| Cmd::Submit { run, pick, stale_attempt, key, payload }
        ),
        4 => (run(), r(), any::<bool>()).prop_map(|(run, pick, accept)| Cmd::Settle { run, pick, accept }),
        2 => (run(), r()).prop_map(|(run, pick)| Cmd::ExpireInteraction { run, pick }),
        1 => (run(), prop::bool::weighted(0.25)).prop_map(|(run, wrong_fence)| Cmd::Pause { run, wrong_fence }),
        2 => (run(), prop::bool::weighted(0.25)).prop_map(|(run, wrong_fence)| Cmd::Resume { run, wrong_fence }),
        1 => (run(), prop::option::of(0u32..=60_000)).prop_map(|(run, delay_ms)| Cmd::Park { run, delay_ms }),
        3 => (run(), attempt_pick()).prop_map(|(run, attempt)| Cmd::Complete { run, attempt }),
        1 => (run(), any::<bool>(), any::<bool>())
            .prop_map(|(run, with_attempt, timed_out)| Cmd::Fail { run, with_attempt, timed_out }),
        1 => (run(), cancel_via()).prop_map(|(run, via)| Cmd::Cancel { run, via }),
        1 => run().prop_map(|run| Cmd::ControlClaim { run }),
        1 => run().prop_map(|run| Cmd::ChildLost { run }),
        2 => Just(Cmd::RecoverExpired),
        2 => Just(Cmd::ExpireDue),
        1 => Just(Cmd::HostRestart),
        5 => (run(), 0u8..3, r(), prop::bool::weighted(0.15)).prop_map(
            |(run, key, contract, other_fingerprint)| Cmd::Reserve { run, key, contract, other_fingerprint }
        ),
        4 => (run(), r()).prop_map(|(run, pick)| Cmd::Applying { run, pick }),
        4 => (run(), r(), any::<bool>()).prop_map(|(run, pick, applied)| Cmd::SettleEffect { run, pick, applied }),
        2 => run().prop_map(|run| Cmd::Heartbeat { run }),
        1 => run().prop_map(|run| Cmd::SendToReview { run }),
        1 => run().prop_map(|run| Cmd::Notify { run }),
        1 => run().prop_map(|run| Cmd::Report { run }),
        1 => run().prop_map(|run| Cmd::RecordDefinition { run }),
        5 => (run(), r(), r(), prop::bool::weighted(0.15))
            .prop_map(|(run, pick, op, forge)| Cmd::StaleWrite { run, pick, op, forge }),
        4 => prop_oneof![
            3 => 1i64..=1_000,
            3 => 1_000i64..=29_000,
            1 => 29_000i64..=31_000,
            1 => 31_000i64..=2 * LEASE_MS,
        ]
        .prop_map(|ms| Cmd::Jump { ms }),
        1 => run().prop_map(|run| Cmd::JumpToExpiry { run }),
    ]
}

// ----- harness -------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Checks {
    fencing: bool,
    stale_typed: bool,
    projection: bool,
    diagnose: bool,
    sweeps: bool,
    handoffs: bool,
}

/// What the test knows about one run besides what the store tells it.
struct RunModel {
    id: String,
    /// Every claim ever handed out for the run, oldest first.
    claims: Vec<Claim>,
    /// The highest claim generation observed so far.
    max_generation: u64,
    /// The run as it was when it was first seen terminal.
    frozen: Option<(RunRecord, Vec<EventRecord>, Option<RunView>)>,
}

/// The state before a command.
struct Before {
    dump: String,
    now: i64,
    claims: Vec<ClaimInfo>,
    runs: Vec<RunRecord>,
}

/// What a command did, for the generic checks.
struct Outcome {
    result: Result<(), StoreError>,
    run: Option<usize>,
    /// The claim presented to the fence, if any.
    claim: Option<Claim>,
    /// The run was written through `Fence::Unclaimed` (or another unclaimed path).
    unclaimed: bool,
    /// The command presented an attempt id other than the run's current one.
    stale_attempt: bool,
    /// A claim handed out by a successful activation or control claim.
    new_claim: Option<Claim>,
    /// The presented claim carries a token nobody was given.
    forged: bool,
    /// A host maintenance sweep over every run.
    sweep: bool,
    /// Nothing to aim at (or a clock move): the store was not called.
    skipped: bool,
}

impl Outcome {
    fn skipped() -> Self {
        let mut out = Self::of(None, Ok(()));
        out.skipped = true;
        out
    }

    fn of<T>(run: Option<usize>, result: StoreResult<T>) -> Self {
        Self {
            result: result.map(|_| ()),
            run,
            claim: None,
            unclaimed: false,
            stale_attempt: false,
            new_claim: None,
            forged: false,
            sweep: false,
            skipped: false,
        }
    }

    fn fenced(mut self, claim: &Claim) -> Self {
        self.claim = Some(claim.clone());
        self
    }

    fn sweep(mut self) -> Self {
        self.sweep = true;
        self
    }

    fn unclaimed(mut self) -> Self {
        self.unclaimed = true;
        self
    }

    fn stale_attempt(mut self, stale: bool) -> Self {
        self.stale_attempt = stale;
        self
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

fn unit<T>(_: T) {}

fn live(info: &ClaimInfo, now: i64) -> bool {
    info.owner_kind.is_some() && info.expires_at.is_some_and(|e| e > now)
}

fn store_err<T: std::fmt::Debug>(what: &str, r: StoreResult<T>) -> Result<T, TestCaseError> {
    r.map_err(|e| TestCaseError::fail(format!("{what}: {e:?}")))
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    clock: FakeClock,
    max_runs: usize,
    runs: Vec<RunModel>,
    /// The owner id of the current host process.
    host: String,
    host_restarts: u32,
    checks: Checks,
}

impl Harness {
    fn new(max_runs: usize, checks: Checks) -> Result<Self, TestCaseError> {
        // tmpfs when available: the store syncs every commit and the suite commits a lot.
        let shm = std::path::Path::new("/dev/shm");
        let dir = tempfile::Builder::new()
            .prefix("piw-props")
            .tempdir_in(shm)
            .or_else(|_| tempfile::tempdir())
            .map_err(|e| TestCaseError::fail(format!("tempdir: {e}")))?;
        let clock = FakeClock::new(T0);
        let config = StoreConfig {
            commit_observer: None,
            lease_ms: LEASE_MS,
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        };
        let store = store_err("open", Store::open(dir.path().join("state.sqlite"), config))?;
        let mut h = Self {
            _dir: dir,
            store,
            clock,
            max_runs,
            runs: Vec::new(),
            host: HOST.to_owned(),
            host_restarts: 0,
            checks,
        };
        h.start_run()?;
        Ok(h)
    }

    fn start_run(&mut self) -> Result<(), TestCaseError> {
        let n = self.runs.len();
        // Runs with and without an origin session (the terminal message depends on it).
        let session = if n.is_multiple_of(2) {
            Some("session-1")
        } else {
            None
        };
        let new = new_run(session);
        let id = store_err("start_run", self.store.write(|w| w.start_run(&new)))?;
        self.runs.push(RunModel {
            id,
            claims: Vec::new(),
            max_generation: 0,
            frozen: None,
        });
        Ok(())
    }

    /// Resolves a run selector: usually one of the runs that has not ended (so sequences get
    /// deep into a run's life), now and then any run (so ended runs are attacked too).
    fn run_ix(&self, sel: u8, before: &Before) -> usize {
        let open: Vec<usize> = (0..before.runs.len())
            .filter(|ix| !before.runs[*ix].status.is_terminal())
            .collect();
        let sel = sel as usize;
        if sel % 4 == 3 || open.is_empty() {
            sel / 4 % self.runs.len()
        } else {
            open[sel / 4 % open.len()]
        }
    }

    fn id(&self, ix: usize) -> String {
        self.runs[ix].id.clone()
    }

    fn latest_claim(&self, ix: usize) -> Option<Claim> {
        self.runs[ix].claims.last().cloned()
    }

    fn now(&self) -> i64 {
        self.store.now_ms()
    }

    fn current_attempt(&self, ix: usize) -> Result<Option<String>, TestCaseError> {
        Ok(store_err("run", self.store.run(&self.runs[ix].id))?.current_attempt)
    }

    /// The attempt id to present and whether it is stale (not the run's current attempt).
    fn attempt_for(&self, ix: usize, pick: AttemptPick) -> Result<(String, bool), TestCaseError> {
        let current = self.current_attempt(ix)?;
        match (pick, current) {
            (AttemptPick::Current, Some(c)) => Ok((c, false)),
            (AttemptPick::Current, None) => Ok(("att-none".into(), true)),
            (AttemptPick::Stale(i), current) => {
                let others: Vec<String> =
                    store_err("attempts", self.store.attempts(&self.runs[ix].id))?
                        .into_iter()
                        .map(|a| a.attempt_id)
                        .filter(|a| Some(a) != current.as_ref())
                        .collect();
                Ok(match others.get(i as usize % others.len().max(1)) {
                    Some(a) => (a.clone(), true),
                    None => ("att-bogus".into(), true),
                })
            }
        }
    }

    fn pick<T>(items: Vec<T>, sel: u8) -> Option<T> {
        if items.is_empty() {
            None
        } else {
            let i = sel as usize % items.len();
            items.into_iter().nth(i)
        }
    }

    fn effect_id(&self, ix: usize, sel: u8) -> Result<String, TestCaseError> {
        let effects = store_err("effects", self.store.effects(&self.runs[ix].id))?;
        Ok(Self::pick(effects, sel).map_or_else(|| "eff-bogus".into(), |e| e.effect_id))
    }

    fn submission_id(&self, ix: usize, sel: u8) -> Result<String, TestCaseError> {
        let mut subs = Vec::new();
        for i in store_err(
            "interactions",
            self.store.interactions(Some(&self.runs[ix].id), None),
        )? {
            subs.extend(store_err(
                "submissions",
                self.store.submissions(&i.interaction_id),
            )?);
        }
        // Prefer one still validating: that is the one a validation child settles.
        let validating: Vec<_> = subs
            .iter()
            .filter(|s| s.state == "validating")
            .cloned()
            .collect();
        let chosen = if !validating.is_empty() && !sel.is_multiple_of(4) {
            Self::pick(validating, sel)
        } else {
            Self::pick(subs, sel)
        };
        Ok(chosen.map_or_else(|| "sub-bogus".into(), |s| s.submission_id))
    }

    fn validating_submissions(&self, ix: usize) -> Result<Vec<String>, TestCaseError> {
        let mut out = Vec::new();
        for i in store_err(
            "interactions",
            self.store.interactions(Some(&self.runs[ix].id), None),
        )? {
            for sub in store_err("submissions", self.store.submissions(&i.interaction_id))? {
                if sub.state == "validating" {
                    out.push(sub.submission_id);
                }
            }
        }
        Ok(out)
    }

    fn snapshot(&self) -> Result<Before, TestCaseError> {
        let mut claims = Vec::new();
        let mut runs = Vec::new();
        for r in &self.runs {
            claims.push(store_err("claim_info", self.store.claim_info(&r.id))?);
            runs.push(store_err("run", self.store.run(&r.id))?);
        }
        // Only the fencing property compares whole-database dumps.
        let dump = if self.checks.fencing {
            store_err("dump", self.store.canonical_dump())?
        } else {
            String::new()
        };
        Ok(Before {
            dump,
            now: self.now(),
            claims,
            runs,
        })
    }

    // ----- executing one command ------------------------------------------------------------

    /// Turns a [`Cmd::Progress`] into the concrete command that moves the run on from its
    /// stored state; every other command is returned as it is.
    fn resolve(&self, cmd: &Cmd, before: &Before) -> Result<Cmd, TestCaseError> {
        let Cmd::Progress { run, choice } = *cmd else {
            return Ok(cmd.clone());
        };
        let ix = self.run_ix(run, before);
        // A selector that `run_ix` resolves to exactly this run.
        let sel = u8::try_from(ix * 4 + 3).unwrap_or(3);
        let rec = &before.runs[ix];
        let info = &before.claims[ix];
        let now = before.now;
        let c = choice;
        // A live claim on an idle run is an operator's control claim: let it lapse, use it to
        // cancel, or run a host sweep while it is held.
        let under_control = |c: u8| match c % 4 {
            0 => Cmd::Jump {
                ms: info
                    .expires_at
                    .map_or(1, |e| (e - now).clamp(1, 2 * LEASE_MS)),
            },
            1 => Cmd::Cancel {
                run: sel,
                via: CancelVia::Claim,
            },
            2 => Cmd::ExpireDue,
            _ => Cmd::RecoverExpired,
        };
        Ok(match rec.status {
            // Now and then an operator steps in on a run nobody holds.
            RunStatus::Waiting | RunStatus::Queued if c % 8 == 7 && !live(info, now) => {
                Cmd::ControlClaim { run: sel }
            }
            // An expired running run: the host's expiry sweep or an operator's cancellation
            // (otherwise the old owner carries on and is refused).
            RunStatus::Running if !live(info, now) && c % 4 == 0 => Cmd::RecoverExpired,
            RunStatus::Running if !live(info, now) && c % 4 == 1 => Cmd::Cancel {
                run: sel,
                via: CancelVia::Control,
            },
            RunStatus::Queued if rec.paused => Cmd::Resume {
                run: sel,
                wrong_fence: false,
            },
            RunStatus::Queued if live(info, now) => under_control(c),
            RunStatus::Queued => Cmd::Activate { run: sel },
            RunStatus::Running => {
                let attempts = store_err("attempts", self.store.attempts(&rec.run_id))?;
                let open = attempts.iter().any(|a| {
                    Some(&a.attempt_id) == rec.current_attempt.as_ref() && a.status == "running"
                });
                let mut validating = false;
                for i in store_err(
                    "interactions",
                    self.store.interactions(Some(&rec.run_id), None),
                )? {
                    validating |= i.status == "validating";
                }
                let effects = store_err("effects", self.store.effects(&rec.run_id))?;
                let index_of = |state: &str| {
                    effects
                        .iter()
                        .position(|e| e.state == state)
                        .and_then(|i| u8::try_from(i).ok())
                };
                if validating && c % 4 != 0 {
                    // A validation child settles the submission (`pick` odd: a validating one).
                    Cmd::Settle {
                        run: sel,
                        pick: 1,
                        accept: c % 3 != 0,
                    }
                } else if !open {
                    Cmd::NodeStarted {
                        run: sel,
                        node: c % 15,
                    }
                } else {
                    match c % 16 {
                        0..=4 => Cmd::Transition {
                            run: sel,
                            attempt: AttemptPick::Current,
                            outcome: c / 16,
                            node: c / 5,
                        },
                        5 => Cmd::Wait {
                            run: sel,
                            attempt: AttemptPick::Current,
                            human: c % 2 == 0,
                        },
                        6 => Cmd::RequestInteraction {
                            run: sel,
                            attempt: AttemptPick::Current,
                            deadline_ms: (c % 3 != 0).then_some(u32::from(c) * 100 + 1),
                        },
                        7 | 8 => Cmd::Reserve {
                            run: sel,
                            key: c % 3,
                            contract: c / 16,
                            other_fingerprint: false,
                        },
                        9 | 10 => match index_of("reserved") {
                            Some(pick) => Cmd::Applying { run: sel, pick },
                            None => Cmd::Reserve {
                                run: sel,
                                key: c % 3,
                                contract: c / 16,
                                other_fingerprint: false,
                            },
                        },
                        11 | 12 => match (index_of("applying"), index_of("reserved")) {
                            (Some(pick), _) => Cmd::SettleEffect {
                                run: sel,
                                pick,
                                applied: c % 3 != 0,
                            },
                            (None, Some(pick)) => Cmd::Applying { run: sel, pick },
                            (None, None) => Cmd::Notify { run: sel },
                        },
                        13 => Cmd::Complete {
                            run: sel,
                            attempt: AttemptPick::Current,
                        },
                        14 if c % 3 == 0 => Cmd::Fail {
                            run: sel,
                            with_attempt: c % 2 == 0,
                            timed_out: c % 5 == 0,
                        },
                        14 => Cmd::Park {
                            run: sel,
                            delay_ms: (c % 2 == 0).then_some(u32::from(c) * 10),
                        },
                        _ => Cmd::ChildLost { run: sel },
                    }
                }
            }
            RunStatus::Waiting if live(info, now) => under_control(c),
            RunStatus::Waiting => {
                let decisions = store_err("decisions", self.store.decisions(&rec.run_id))?;
                let interactions = store_err(
                    "interactions",
                    self.store.interactions(Some(&rec.run_id), None),
                )?;
                let pending_decision = decisions.iter().position(|d| d.status == "pending");
                let pending_interaction = interactions.iter().position(|i| i.status == "pending");
                match (pending_decision, pending_interaction) {
                    (Some(pick), _) => Cmd::Answer {
                        run: sel,
                        pick: u8::try_from(pick).unwrap_or(0),
                        by_model: c % 8 == 0,
                    },
                    (None, Some(pick)) => {
                        let interaction = &interactions[pick];
                        let pick = u8::try_from(pick).unwrap_or(0);
                        match interaction.deadline_at {
                            Some(d) if d <= now && c % 4 != 3 => {
                                Cmd::ExpireInteraction { run: sel, pick }
                            }
                            Some(d) if c % 4 == 1 => Cmd::Jump {
                                ms: (d - now).clamp(1, 2 * LEASE_MS),
                            },
                            _ => Cmd::Submit {
                                run: sel,
                                pick,
                                stale_attempt: false,
                                key: (c % 2 == 0).then_some(c % 3),
                                payload: c % 2,
                            },
                        }
                    }
                    (None, None) => Cmd::Cancel {
                        run: sel,
                        via: CancelVia::Unclaimed,
                    },
                }
            }
            RunStatus::Review => Cmd::Cancel {
                run: sel,
                via: CancelVia::Control,
            },
            _ => Cmd::Start,
        })
    }

    fn exec(&mut self, cmd: &Cmd, before: &Before) -> Result<Outcome, TestCaseError> {
        let now = before.now;
        Ok(match *cmd {
            Cmd::Start => {
                if self.runs.len() >= self.max_runs {
                    return Ok(Outcome::skipped());
                }
                self.start_run()?;
                Outcome::of(Some(self.runs.len() - 1), Ok(()))
            }
            Cmd::Activate { run } => {
                let ix = self.run_ix(run, before);
                let id = self.id(ix);
                let host = self.host.clone();
                let validating = self.validating_submissions(ix)?;
                let r = self.store.write(|w| w.activate(&id, &host));
                if self.checks.handoffs {
                    if let Ok(act) = &r {
                        // A submission recorded as validating is what the next child validates.
                        let expected = validating.first();
                        let got = match &act.resume {
                            Resume::Validate { submission_id, .. } => Some(submission_id),
                            _ => None,
                        };
                        ensure!(
                            validating.len() <= 1 && got == expected,
                            "run {ix} was activated to resume {:?} (mode {}) while submissions \
                             {validating:?} were validating",
                            act.resume,
                            act.mode
                        );
                    }
                }
                let new_claim = r.as_ref().ok().map(|a| a.claim.clone());
                let mut out = Outcome::of(Some(ix), r).unclaimed();
                out.new_claim = new_claim;
                out
            }
            Cmd::ControlClaim { run } => {
                let ix = self.run_ix(run, before);
                let id = self.id(ix);
                let r = self.store.write(|w| w.control_claim(&id, CONTROL));
                let new_claim = r.as_ref().ok().cloned();
                let mut out = Outcome::of(Some(ix), r).unclaimed();
                out.new_claim = new_claim;
                out
            }
            Cmd::NodeStarted { run, node } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                // Now and then an id the graph rule refuses.
                let node_id = if node % 16 == 15 {
                    "9 bad"
                } else {
                    NODES[node as usize % 3]
                };
                let deadline = (node % 2 == 0).then_some(now + 10_000);
                let r = self
                    .store
                    .write(|w| w.node_started(&claim, node_id, deadline));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Transition {
                run,
                attempt,
                outcome,
                node,
            } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let (attempt_id, stale) = self.attempt_for(ix, attempt)?;
                let outcome = match outcome % 4 {
                    0 | 1 => AttemptOutcome::Succeeded {
                        output: json!({ "n": outcome }),
                    },
                    2 => AttemptOutcome::Failed {
                        error: "boom".into(),
                    },
                    _ => AttemptOutcome::TimedOut,
                };
                let req = TransitionRequest {
                    attempt_id,
                    outcome,
                    next_node: NODES[node as usize % 3].into(),
                    next_deadline_at: (node % 2 == 0).then_some(now + 20_000),
                };
                let r = self.store.write(|w| w.transition(&claim, &req));
                Outcome::of(Some(ix), r).fenced(&claim).stale_attempt(stale)
            }
            Cmd::Wait {
                run,
                attempt,
                human,
            } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let (attempt_id, stale) = self.attempt_for(ix, attempt)?;
                let kind = if human {
                    DecisionKind::HumanDecision
                } else {
                    DecisionKind::Checkpoint
                };
                let r = self.store.write(|w| {
                    w.wait_for_decision(&claim, &attempt_id, kind, &json!({ "q": "go?" }))
                });
                Outcome::of(Some(ix), r).fenced(&claim).stale_attempt(stale)
            }
            Cmd::Answer {
                run,
                pick,
                by_model,
            } => {
                let ix = self.run_ix(run, before);
                let decisions = store_err("decisions", self.store.decisions(&self.runs[ix].id))?;
                let Some(decision) = Self::pick(decisions, pick) else {
                    return Ok(Outcome::skipped());
                };
                let by = if by_model {
                    Answerer::Model
                } else {
                    Answerer::Person
                };
                let r = self
                    .store
                    .write(|w| w.answer_decision(&decision.decision_id, &json!("yes"), by));
                if self.checks.fencing
                    && by_model
                    && decision.kind == DecisionKind::HumanDecision.as_str()
                {
                    ensure!(
                        matches!(r, Err(StoreError::Forbidden(_))),
                        "the model answered protected human decision {}: {r:?}",
                        decision.decision_id
                    );
                }
                Outcome::of(Some(ix), r).unclaimed()
            }
            Cmd::RequestInteraction {
                run,
                attempt,
                deadline_ms,
            } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let (attempt_id, stale) = self.attempt_for(ix, attempt)?;
                let deadline = deadline_ms.map(|d| now + i64::from(d));
                let kind = if deadline_ms.unwrap_or(0) % 2 == 0 {
                    InteractionKind::Agent
                } else {
                    InteractionKind::AssistantMessage
                };
                let r = self.store.write(|w| {
                    w.request_interaction(
                        &claim,
                        &attempt_id,
                        kind,
                        &json!({ "ask": "name" }),
                        deadline,
                        &|_| true,
                    )
                });
                Outcome::of(Some(ix), r).fenced(&claim).stale_attempt(stale)
            }
            Cmd::Submit {
                run,
                pick,
                stale_attempt,
                key,
                payload,
            } => {
                let ix = self.run_ix(run, before);
                let interactions = store_err(
                    "interactions",
                    self.store.interactions(Some(&self.runs[ix].id), None),
                )?;
                let Some(interaction) = Self::pick(interactions, pick) else {
                    return Ok(Outcome::skipped());
                };
                let (attempt_id, stale) = if stale_attempt {
                    let (a, _) = self.attempt_for(ix, AttemptPick::Stale(pick))?;
                    let stale = a != interaction.attempt_id;
                    (a, stale)
                } else {
                    (interaction.attempt_id.clone(), false)
                };
                let key = key.map(|k| format!("submit-{k}"));
                let body = json!({ "answer": payload });
                let r = self.store.write(|w| {
                    w.submit(
                        &interaction.interaction_id,
                        &attempt_id,
                        &body,
                        key.as_deref(),
                    )
                });
                Outcome::of(Some(ix), r).unclaimed().stale_attempt(stale)
            }
            Cmd::Settle { run, pick, accept } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let submission = self.submission_id(ix, pick)?;
                let verdict = if accept {
                    Ok(())
                } else {
                    Err("not valid".to_owned())
                };
                let r = self.store.write(|w| w.settle(&claim, &submission, verdict));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::ExpireInteraction { run, pick } => {
                let ix = self.run_ix(run, before);
                let interactions = store_err(
                    "interactions",
                    self.store.interactions(Some(&self.runs[ix].id), None),
                )?;
                let Some(interaction) = Self::pick(interactions, pick) else {
                    return Ok(Outcome::skipped());
                };
                let r = self
                    .store
                    .write(|w| w.expire_interaction(&interaction.interaction_id));
                Outcome::of(Some(ix), r).unclaimed()
            }
            Cmd::Pause { run, wrong_fence } | Cmd::Resume { run, wrong_fence } => {
                let ix = self.run_ix(run, before);
                let id = self.id(ix);
                let pause = matches!(cmd, Cmd::Pause { .. });
                let held = live(&before.claims[ix], now);
                // The right fence: the live claim if there is one, unclaimed otherwise.
                let use_claim = held != wrong_fence;
                let claim = self.latest_claim(ix);
                let r = match (&claim, use_claim) {
                    (Some(c), true) => self.store.write(|w| {
                        if pause {
                            w.pause(&id, Fence::Claim(c))
                        } else {
                            w.resume(&id, Fence::Claim(c))
                        }
                    }),
                    _ => self.store.write(|w| {
                        if pause {
                            w.pause(&id, Fence::Unclaimed)
                        } else {
                            w.resume(&id, Fence::Unclaimed)
                        }
                    }),
                };
                match (&claim, use_claim) {
                    (Some(c), true) => Outcome::of(Some(ix), r).fenced(c),
                    _ => Outcome::of(Some(ix), r).unclaimed(),
                }
            }
            Cmd::Park { run, delay_ms } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let at = delay_ms.map(|d| now + i64::from(d));
                let r = self.store.write(|w| w.park(&claim, at));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Complete { run, attempt } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let (attempt_id, stale) = self.attempt_for(ix, attempt)?;
                let r = self.store.write(|w| {
                    w.complete(
                        &claim,
                        &attempt_id,
                        &json!({ "out": 1 }),
                        &json!({ "done": true }),
                    )
                });
                Outcome::of(Some(ix), r).fenced(&claim).stale_attempt(stale)
            }
            Cmd::Fail {
                run,
                with_attempt,
                timed_out,
            } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let attempt = if with_attempt {
                    self.current_attempt(ix)?
                } else {
                    None
                };
                let outcome = if timed_out {
                    AttemptOutcome::TimedOut
                } else {
                    AttemptOutcome::Failed {
                        error: "exploded".into(),
                    }
                };
                let r = self
                    .store
                    .write(|w| w.fail(&claim, attempt.as_deref(), &outcome, "the node failed"));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Cancel { run, via } => {
                let ix = self.run_ix(run, before);
                let id = self.id(ix);
                match via {
                    CancelVia::Claim => {
                        let Some(claim) = self.latest_claim(ix) else {
                            return Ok(Outcome::skipped());
                        };
                        let r = self
                            .store
                            .write(|w| w.cancel(&id, Fence::Claim(&claim), "by owner"));
                        Outcome::of(Some(ix), r).fenced(&claim)
                    }
                    CancelVia::Unclaimed => {
                        let r = self
                            .store
                            .write(|w| w.cancel(&id, Fence::Unclaimed, "by user"));
                        Outcome::of(Some(ix), r).unclaimed()
                    }
                    CancelVia::Control => {
                        let r = self.store.write(|w| {
                            let claim = w.control_claim(&id, CONTROL)?;
                            w.cancel(&id, Fence::Claim(&claim), "stale run cancelled")?;
                            Ok(claim)
                        });
                        let new_claim = r.as_ref().ok().cloned();
                        let mut out = Outcome::of(Some(ix), r).unclaimed();
                        out.new_claim = new_claim;
                        out
                    }
                }
            }
            Cmd::ChildLost { run } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let r = self.store.write(|w| w.child_lost(&claim, "child exited"));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::RecoverExpired => {
                let r = self.store.write(|w| w.recover_expired());
                if let (Ok(recovered), true) = (&r, self.checks.sweeps) {
                    for rec in recovered {
                        let ix = self.runs.iter().position(|m| m.id == rec.run_id);
                        let Some(ix) = ix else {
                            return Err(TestCaseError::fail(format!(
                                "recovered unknown run {}",
                                rec.run_id
                            )));
                        };
                        let info = &before.claims[ix];
                        ensure!(
                            before.runs[ix].status == RunStatus::Running && !live(info, now),
                            "recover_expired took run {ix} ({}) whose claim was {info:?} at {now}",
                            before.runs[ix].status
                        );
                    }
                }
                Outcome::of(None, r).sweep()
            }
            Cmd::ExpireDue => {
                let r = self.store.write(|w| w.expire_due_interactions());
                if let (Ok(ids), true) = (&r, self.checks.sweeps) {
                    for (id, _) in ids {
                        let i = store_err("interactions", self.store.interactions(None, None))?
                            .into_iter()
                            .find(|i| &i.interaction_id == id);
                        ensure!(
                            i.as_ref().is_some_and(|i| i.status == "expired"
                                && i.deadline_at.is_some_and(|d| d <= now)),
                            "the sweep reported {id} expired but it is {i:?} at {now}"
                        );
                    }
                }
                Outcome::of(None, r).sweep()
            }
            Cmd::HostRestart => {
                self.host_restarts += 1;
                self.host = format!("{HOST}-{}", self.host_restarts);
                let host = self.host.clone();
                let r = self.store.write(|w| {
                    w.begin_host_epoch(std::process::id())?;
                    w.recover_runs_of_dead_hosts(&host)
                });
                if let (Ok(recovered), true) = (&r, self.checks.sweeps) {
                    for rec in recovered {
                        let Some(ix) = self.runs.iter().position(|m| m.id == rec.run_id) else {
                            return Err(TestCaseError::fail(format!(
                                "recovered unknown run {}",
                                rec.run_id
                            )));
                        };
                        let info = &before.claims[ix];
                        ensure!(
                            before.runs[ix].status == RunStatus::Running
                                && info.owner_kind == Some(OwnerKind::Host)
                                && info.owner_id.as_deref() != Some(host.as_str()),
                            "host restart took run {ix} ({}) held by {info:?}",
                            before.runs[ix].status
                        );
                    }
                }
                Outcome::of(None, r).sweep()
            }
            Cmd::Reserve {
                run,
                key,
                contract,
                other_fingerprint,
            } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let (attempt_id, _) = self.attempt_for(ix, AttemptPick::Current)?;
                let contract = RetryContract::ALL[contract as usize % RetryContract::ALL.len()];
                let effect_key = format!("effect-{key}");
                let fingerprint = if other_fingerprint { "fp-other" } else { "fp" };
                let r = self.store.write(|w| {
                    w.reserve_effect(&claim, &attempt_id, &effect_key, fingerprint, contract)
                });
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Applying { run, pick } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let effect_id = self.effect_id(ix, pick)?;
                let r = self.store.write(|w| w.effect_applying(&claim, &effect_id));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::SettleEffect { run, pick, applied } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let effect_id = self.effect_id(ix, pick)?;
                let result = if applied {
                    EffectResult::Applied {
                        receipt: json!({ "receipt": pick }),
                    }
                } else {
                    EffectResult::Failed {
                        error: "remote said no".into(),
                    }
                };
                let r = self
                    .store
                    .write(|w| w.settle_effect(&claim, &effect_id, &result));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Heartbeat { run } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let r = self.store.write(|w| w.heartbeat(&claim));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::SendToReview { run } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let r = self
                    .store
                    .write(|w| w.send_to_review(&claim, "source_changed"));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Report { run } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let r = self
                    .store
                    .write(|w| w.progress(&claim, "working", &json!({ "pct": 50 })));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::RecordDefinition { run } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let graph = json!({ "start": "a", "nodes": NODES });
                let r = self.store.write(|w| w.record_definition(&claim, &graph));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::Notify { run } => {
                let ix = self.run_ix(run, before);
                let Some(claim) = self.latest_claim(ix) else {
                    return Ok(Outcome::skipped());
                };
                let r = self
                    .store
                    .write(|w| w.notify(&claim, &json!({ "note": "hello" })));
                Outcome::of(Some(ix), r).fenced(&claim)
            }
            Cmd::StaleWrite {
                run,
                pick,
                op,
                forge,
            } => {
                let ix = self.run_ix(run, before);
                let stored = before.claims[ix].generation;
                let claim = if forge {
                    // The current generation and owner, but a token nobody was given.
                    let Some(latest) = self.latest_claim(ix) else {
                        return Ok(Outcome::skipped());
                    };
                    Claim {
                        token: ClaimToken::generate(&mut piw_host::ids::OsIds),
                        ..latest
                    }
                } else {
                    let old: Vec<Claim> = self.runs[ix]
                        .claims
                        .iter()
                        .filter(|c| c.generation < stored)
                        .cloned()
                        .collect();
                    let Some(claim) = Self::pick(old, pick) else {
                        return Ok(Outcome::skipped());
                    };
                    claim
                };
                let op = STALE_OPS[op as usize % STALE_OPS.len()];
                let r = self.write_with(ix, &claim, op)?;
                let mut out = Outcome::of(Some(ix), r).fenced(&claim);
                out.forged = forge;
                out
            }
            Cmd::Jump { ms } => {
                self.clock.advance(ms);
                Outcome::of(None, Ok(()))
            }
            Cmd::JumpToExpiry { run } => {
                let ix = self.run_ix(run, before);
                if let Some(e) = before.claims[ix].expires_at.filter(|e| *e >= now) {
                    self.clock.set(e);
                }
                Outcome::of(None, Ok(()))
            }
            Cmd::Progress { .. } => {
                return Err(TestCaseError::fail("Progress is resolved before it runs"));
            }
        })
    }

    /// One representative write of `op` by the holder of `claim`, aimed at the run's current
    /// attempt, effect and submission (the most damaging target a stale writer could pick).
    fn write_with(
        &mut self,
        ix: usize,
        claim: &Claim,
        op: StaleOp,
    ) -> Result<StoreResult<()>, TestCaseError> {
        let id = self.id(ix);
        let attempt = self
            .current_attempt(ix)?
            .unwrap_or_else(|| "att-none".into());
        let effect = self.effect_id(ix, 0)?;
        let submission = self.submission_id(ix, 1)?;
        let r = self.store.write(|w| match op {
            StaleOp::Heartbeat => w.heartbeat(claim),
            StaleOp::NodeStarted => w.node_started(claim, "a", None).map(unit),
            StaleOp::Transition => w.transition(claim, &common::step(&attempt, "b")).map(unit),
            StaleOp::Wait => w
                .wait_for_decision(claim, &attempt, DecisionKind::Checkpoint, &json!({}))
                .map(unit),
            StaleOp::RequestInteraction => w
                .request_interaction(
                    claim,
                    &attempt,
                    InteractionKind::Agent,
                    &json!({}),
                    None,
                    &|_| true,
                )
                .map(unit),
            StaleOp::Park => w.park(claim, None).map(unit),
            StaleOp::Complete => w
                .complete(claim, &attempt, &json!(0), &json!("stale"))
                .map(unit),
            StaleOp::Fail => w
                .fail(
                    claim,
                    None,
                    &AttemptOutcome::Failed {
                        error: "stale".into(),
                    },
                    "stale writer",
                )
                .map(unit),
            StaleOp::Cancel => w.cancel(&id, Fence::Claim(claim), "stale writer").map(unit),
            StaleOp::Pause => w.pause(&id, Fence::Claim(claim)).map(unit),
            StaleOp::Resume => w.resume(&id, Fence::Claim(claim)).map(unit),
            StaleOp::ChildLost => w.child_lost(claim, "stale writer").map(unit),
            StaleOp::Review => w.send_to_review(claim, "stale writer").map(unit),
            StaleOp::Notify => w.notify(claim, &json!("stale")).map(unit),
            StaleOp::Reserve => w
                .reserve_effect(claim, &attempt, "effect-0", "fp", RetryContract::Never)
                .map(unit),
            StaleOp::Applying => w.effect_applying(claim, &effect),
            StaleOp::SettleEffect => w.settle_effect(
                claim,
                &effect,
                &EffectResult::Applied {
                    receipt: json!("stale"),
                },
            ),
            StaleOp::Settle => w.settle(claim, &submission, Ok(())),
            StaleOp::Report => w.progress(claim, "stale", &json!({})).map(unit),
            StaleOp::RecordDefinition => w.record_definition(claim, &json!({ "stale": true })),
        });
        Ok(r)
    }

    // ----- invariants -----------------------------------------------------------------------

    fn check(&mut self, cmd: &Cmd, before: &Before, out: &Outcome) -> Result<(), TestCaseError> {
        let now = self.now();
        if let Some(c) = &out.new_claim {
            let ix = out.run.unwrap_or_default();
            self.runs[ix].claims.push(c.clone());
        }
        if self.checks.fencing {
            self.check_fencing(cmd, before, out, now)?;
        }
        if self.checks.stale_typed {
            if let (Some(ix), Some(c)) = (out.run, &out.claim) {
                let stored = before.claims.get(ix).map_or(0, |i| i.generation);
                if out.forged {
                    ensure!(
                        matches!(out.result, Err(StoreError::ClaimLost { .. })),
                        "a forged token of generation {} ({} run) got {:?} instead of ClaimLost",
                        c.generation,
                        before.runs[ix].status,
                        out.result
                    );
                }
                if c.generation < stored {
                    ensure!(
                        matches!(
                            out.result,
                            Err(StoreError::ClaimLost {
                                reason: ClaimLostReason::GenerationMismatch,
                                ..
                            })
                        ),
                        "a writer of generation {} (run is at {stored}, {}) got {:?} instead of \
                         ClaimLost(generation_mismatch)",
                        c.generation,
                        before.runs[ix].status,
                        out.result
                    );
                }
            }
        }
        if self.checks.sweeps && out.sweep {
            ensure!(
                out.result.is_ok(),
                "the host sweep {cmd:?} failed: {:?}",
                out.result
            );
        }
        if self.checks.handoffs {
            self.check_work_in_flight()?;
        }
        if self.checks.projection {
            self.check_projection()?;
        }
        if self.checks.diagnose {
            let findings = store_err("diagnose", self.store.diagnose(self.store.now_ms()))?;
            ensure!(findings.is_empty(), "diagnose found: {findings:#?}");
        }
        Ok(())
    }

    fn check_fencing(
        &mut self,
        cmd: &Cmd,
        before: &Before,
        out: &Outcome,
        now: i64,
    ) -> Result<(), TestCaseError> {
        let dump_unchanged = || -> Result<bool, TestCaseError> {
            Ok(store_err("dump", self.store.canonical_dump())? == before.dump)
        };
        // A claim loss adds no event and writes no status (terminal or other) to any run.
        if let Err(StoreError::ClaimLost { reason, .. }) = &out.result {
            for (ix, pre) in before.runs.iter().enumerate() {
                let run = store_err("run", self.store.run(&pre.run_id))?;
                let events = store_err("events", self.store.events(&pre.run_id, 0))?.len();
                ensure!(
                    run.status == pre.status
                        && run.revision == pre.revision
                        && events as u64 == pre.revision,
                    "{cmd:?} lost its claim ({reason}) but run {ix} went from {} at revision {} \
                     to {} at revision {} with {events} events",
                    pre.status,
                    pre.revision,
                    run.status,
                    run.revision
                );
            }
        }
        // A refused write changes nothing (one transaction, rolled back as a whole). This
        // covers every claim loss: no event, no terminal status, no renewal.
        if let Err(e) = &out.result {
            ensure!(
                dump_unchanged()?,
                "{cmd:?} was refused ({e:?}) but changed the database"
            );
        }
        if let Some(ix) = out.run.filter(|ix| *ix < before.claims.len()) {
            let pre = &before.claims[ix];
            let post = store_err("claim_info", self.store.claim_info(&self.runs[ix].id))?;
            if let Some(c) = &out.claim {
                if out.forged {
                    ensure!(
                        out.result.is_err() && dump_unchanged()?,
                        "a forged token of generation {} wrote: {:?}",
                        c.generation,
                        out.result
                    );
                }
                if c.generation < pre.generation {
                    ensure!(
                        out.result.is_err() && dump_unchanged()?,
                        "a writer of old generation {} (current {}) wrote: {:?}",
                        c.generation,
                        pre.generation,
                        out.result
                    );
                }
                if out.result.is_ok() {
                    // Only the exact live claim passes the fence, and passing renews it.
                    ensure!(
                        live(pre, before.now)
                            && pre.generation == c.generation
                            && pre.owner_kind == Some(c.owner_kind)
                            && pre.owner_id.as_deref() == Some(c.owner_id.as_str()),
                        "{cmd:?} succeeded with claim generation {} but the stored claim was {pre:?} \
                         at {}",
                        c.generation,
                        before.now
                    );
                    if post.owner_kind.is_some() && post.generation == c.generation {
                        ensure!(
                            post.expires_at == Some(now + LEASE_MS)
                                && post.heartbeat_at == Some(now),
                            "{cmd:?} succeeded but did not renew the claim: {post:?} at {now}"
                        );
                    }
                }
                if let Err(StoreError::ClaimLost { reason, .. }) = &out.result {
                    let expired_current = pre.owner_kind.is_some()
                        && pre.generation == c.generation
                        && pre.expires_at.is_some_and(|e| e <= before.now)
                        && pre.owner_id.as_deref() == Some(c.owner_id.as_str());
                    if expired_current && matches!(cmd, Cmd::Heartbeat { .. }) {
                        ensure!(
                            *reason == ClaimLostReason::Expired,
                            "heartbeat of an expired claim reported {reason}"
                        );
                    }
                }
                if matches!(cmd, Cmd::Heartbeat { .. })
                    && pre.owner_kind.is_some()
                    && pre.generation == c.generation
                    && pre.expires_at.is_some_and(|e| e <= before.now)
                {
                    ensure!(
                        matches!(
                            out.result,
                            Err(StoreError::ClaimLost {
                                reason: ClaimLostReason::Expired,
                                ..
                            })
                        ) && post.expires_at == pre.expires_at,
                        "an expired claim renewed itself: {:?}, {pre:?} -> {post:?} at {}",
                        out.result,
                        before.now
                    );
                }
            }
            if out.unclaimed && live(pre, before.now) {
                ensure!(
                    dump_unchanged()?,
                    "{cmd:?} without a claim changed run {ix} while a live claim held it: {pre:?}, {:?}",
                    out.result
                );
            }
            if out.stale_attempt {
                match cmd {
                    // A repeated submission may answer from its idempotency record.
                    Cmd::Submit { .. } => ensure!(
                        dump_unchanged()?,
                        "a submission for a stale attempt changed the database: {:?}",
                        out.result
                    ),
                    _ => ensure!(
                        out.result.is_err(),
                        "{cmd:?} with a stale attempt id succeeded"
                    ),
                }
            }
            if let Some(c) = &out.new_claim {
                ensure!(
                    !live(pre, before.now) && !before.runs[ix].status.is_terminal(),
                    "a claim was bound over {pre:?} on a {} run",
                    before.runs[ix].status
                );
                ensure!(
                    c.generation == pre.generation + 1,
                    "a new claim must bump the generation by one: {} -> {}",
                    pre.generation,
                    c.generation
                );
                if !matches!(cmd, Cmd::Cancel { .. }) {
                    ensure!(
                        post.generation == c.generation
                            && post.owner_kind == Some(c.owner_kind)
                            && post.expires_at == Some(now + LEASE_MS),
                        "the new claim is not what is stored: {post:?}"
                    );
                }
            }
        }
        // Per run: one claim row, generations only grow, a live claim only where allowed.
        for ix in 0..self.runs.len() {
            let run = store_err("run", self.store.run(&self.runs[ix].id))?;
            let info = store_err("claim_info", self.store.claim_info(&self.runs[ix].id))?;
            ensure!(
                info.generation >= self.runs[ix].max_generation,
                "run {ix}: claim generation went back from {} to {}",
                self.runs[ix].max_generation,
                info.generation
            );
            self.runs[ix].max_generation = info.generation;
            if live(&info, now) {
                match info.owner_kind {
                    Some(OwnerKind::Host) => ensure!(
                        run.status == RunStatus::Running,
                        "run {ix}: live host claim on a {} run: {info:?}",
                        run.status
                    ),
                    _ => ensure!(
                        !run.status.is_terminal(),
                        "run {ix}: live control claim on a {} run",
                        run.status
                    ),
                }
            }
        }
        // After the clock moved: every expired claim stays expired and refuses to renew.
        if matches!(cmd, Cmd::Jump { .. } | Cmd::JumpToExpiry { .. }) {
            self.check_expired_claims_cannot_renew(now)?;
        }
        self.check_at_most_one_claim_passes(now)
    }

    /// Of all the claims ever handed out for a run, at most one passes the fence, and one does
    /// exactly when `claim_info` shows a live claim. Probed with heartbeats in a transaction
    /// that is rolled back, so the probe changes nothing.
    fn check_at_most_one_claim_passes(&mut self, now: i64) -> Result<(), TestCaseError> {
        for ix in 0..self.runs.len() {
            let claims = self.runs[ix].claims.clone();
            if claims.is_empty() {
                continue;
            }
            let mut passed = Vec::new();
            let probe = self.store.write(|w| {
                for c in &claims {
                    if w.savepoint(|w| w.heartbeat(c)).is_ok() {
                        passed.push(c.generation);
                    }
                }
                Err::<(), _>(StoreError::InvalidInput("probe: roll back".into()))
            });
            ensure!(
                matches!(probe, Err(StoreError::InvalidInput(_))),
                "run {ix}: the fence probe failed: {probe:?}"
            );
            let info = store_err("claim_info", self.store.claim_info(&self.runs[ix].id))?;
            ensure!(
                passed.len() <= 1,
                "run {ix}: claims of generations {passed:?} all pass the fence"
            );
            ensure!(
                passed.len() == usize::from(live(&info, now)),
                "run {ix}: claims passing the fence {passed:?} but the stored claim is {info:?} at {now}"
            );
        }
        Ok(())
    }

    fn check_expired_claims_cannot_renew(&mut self, now: i64) -> Result<(), TestCaseError> {
        for ix in 0..self.runs.len() {
            let info = store_err("claim_info", self.store.claim_info(&self.runs[ix].id))?;
            if info.owner_kind.is_none() || info.expires_at.is_some_and(|e| e > now) {
                continue;
            }
            let Some(claim) = self.runs[ix]
                .claims
                .iter()
                .find(|c| c.generation == info.generation)
                .cloned()
            else {
                return Err(TestCaseError::fail(format!(
                    "run {ix}: claim {info:?} was never handed out"
                )));
            };
            let dump = store_err("dump", self.store.canonical_dump())?;
            let r = self.store.write(|w| w.heartbeat(&claim));
            ensure!(
                matches!(
                    r,
                    Err(StoreError::ClaimLost {
                        reason: ClaimLostReason::Expired,
                        ..
                    })
                ),
                "run {ix}: heartbeat of a claim expired at {:?} (now {now}) gave {r:?}",
                info.expires_at
            );
            let after = store_err("claim_info", self.store.claim_info(&self.runs[ix].id))?;
            ensure!(
                after == info && store_err("dump", self.store.canonical_dump())? == dump,
                "run {ix}: an expired claim renewed itself: {info:?} -> {after:?}"
            );
        }
        Ok(())
    }

    /// Work in flight when a run changes hands is never silently dropped (docs/RULES.md, "Interactive steps" and "Effects"):
    /// - a validating submission belongs to the run's current attempt, and the run is queued
    ///   for its validation child, running it, or stopped for review;
    /// - an effect applying under the `never` contract exists only while a child runs the run
    ///   (or the run is stopped for review): once the claim is released without a receipt it
    ///   must be uncertain.
    fn check_work_in_flight(&self) -> Result<(), TestCaseError> {
        for ix in 0..self.runs.len() {
            let run = store_err("run", self.store.run(&self.runs[ix].id))?;
            let interactions = store_err(
                "interactions",
                self.store.interactions(Some(&run.run_id), None),
            )?;
            for i in &interactions {
                for sub in store_err("submissions", self.store.submissions(&i.interaction_id))? {
                    if sub.state != "validating" {
                        continue;
                    }
                    ensure!(
                        i.status == "validating"
                            && run.current_attempt.as_ref() == Some(&i.attempt_id)
                            && matches!(
                                run.status,
                                RunStatus::Queued | RunStatus::Running | RunStatus::Review
                            ),
                        "run {ix} is {} at attempt {:?} while submission {} of interaction {} \
                         ({}, attempt {}) is still validating",
                        run.status,
                        run.current_attempt,
                        sub.submission_id,
                        i.interaction_id,
                        i.status,
                        i.attempt_id
                    );
                }
            }
            for e in store_err("effects", self.store.effects(&run.run_id))? {
                ensure!(
                    !(e.state == "applying"
                        && e.retry_contract == RetryContract::Never.as_str()
                        && !matches!(run.status, RunStatus::Running | RunStatus::Review)),
                    "run {ix} is {} while effect {} ({}, contract never) is still applying \
                     with no child and no receipt",
                    run.status,
                    e.effect_key,
                    e.effect_id
                );
            }
        }
        Ok(())
    }

    fn check_projection(&mut self) -> Result<(), TestCaseError> {
        for ix in 0..self.runs.len() {
            let id = self.id(ix);
            let run = store_err("run", self.store.run(&id))?;
            let events = store_err("events", self.store.events(&id, 0))?;
            let view = store_err("run_view", self.store.run_view(&id))?;
            let Some(v) = &view else {
                return Err(TestCaseError::fail(format!(
                    "run {ix} has no viewer projection"
                )));
            };
            ensure!(
                v.revision == run.revision && run.revision == events.len() as u64,
                "run {ix}: view revision {}, run revision {}, {} events",
                v.revision,
                run.revision,
                events.len()
            );
            ensure!(
                events
                    .iter()
                    .enumerate()
                    .all(|(i, e)| e.seq == i as u64 + 1),
                "run {ix}: event sequence has gaps: {:?}",
                events.iter().map(|e| e.seq).collect::<Vec<_>>()
            );
            ensure!(
                v.status == run.status.as_str()
                    && v.paused == run.paused
                    && v.current_node == run.current_node,
                "run {ix}: view {v:?} disagrees with run ({}, paused {}, node {:?})",
                run.status,
                run.paused,
                run.current_node
            );
            ensure!(
                events.last().is_some_and(|e| e.kind == v.last_event),
                "run {ix}: view's last event {} is not the log's {:?}",
                v.last_event,
                events.last().map(|e| &e.kind)
            );
            match &self.runs[ix].frozen {
                Some((frozen_run, frozen_events, frozen_view)) => {
                    ensure!(
                        *frozen_run == run && *frozen_events == events && *frozen_view == view,
                        "run {ix} changed after it ended {}: {frozen_run:?} -> {run:?}, events {} -> {}",
                        frozen_run.status,
                        frozen_events.len(),
                        events.len()
                    );
                }
                None if run.status.is_terminal() => {
                    self.runs[ix].frozen = Some((run, events, view));
                }
                None => {}
            }
        }
        Ok(())
    }
}

thread_local! {
    /// Coverage counts (command kind and result -> count), printed at the end of a property
    /// when `PIW_PROPS_STATS` is set. Silent otherwise.
    static STATS: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

fn record(cmd: &Cmd, out: &Outcome) {
    if std::env::var_os("PIW_PROPS_STATS").is_none() {
        return;
    }
    let name = format!("{cmd:?}");
    let name = name.split([' ', '{']).next().unwrap_or_default();
    let key = match &out.result {
        _ if out.skipped => format!("{name} (skipped)"),
        Ok(()) => format!("{name} ok"),
        Err(e) => {
            let e = format!("{e:?}");
            format!(
                "{name} refused: {}",
                e.split([' ', '{', '(']).next().unwrap_or_default()
            )
        }
    };
    STATS.with_borrow_mut(|stats| *stats.entry(key).or_default() += 1);
}

fn print_stats(property: &str) {
    if std::env::var_os("PIW_PROPS_STATS").is_some() {
        STATS.with_borrow(|stats| {
            let lines: Vec<String> = stats.iter().map(|(k, n)| format!("  {k}: {n}")).collect();
            eprintln!("{property}:\n{}", lines.join("\n"));
        });
    }
}

fn run_sequence(max_runs: usize, cmds: &[Cmd], checks: Checks) -> Result<(), TestCaseError> {
    let mut h = Harness::new(max_runs, checks)?;
    let mut executed = Vec::new();
    for (step, cmd) in cmds.iter().enumerate() {
        let before = h.snapshot()?;
        let cmd = h.resolve(cmd, &before)?;
        executed.push(format!("{step}: {cmd:?}"));
        let result = h.exec(&cmd, &before).and_then(|out| {
            record(&cmd, &out);
            h.check(&cmd, &before, &out)
        });
        if let Err(e) = result {
            return Err(TestCaseError::fail(format!(
                "after step {step} ({cmd:?}): {e}\ncommands as executed:\n  {}",
                executed.join("\n  ")
            )));
        }
    }
    Ok(())
}

/// 256 cases unless `PROPTEST_CASES` asks for another number.
fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        // Keep no regression file next to the tests; a failure prints its minimal sequence.
        failure_persistence: None,
        ..Config::default()
    }
}

const NONE: Checks = Checks {
    fencing: false,
    stale_typed: false,
    projection: false,
    diagnose: false,
    sweeps: false,
    handoffs: false,
};

/// Runs one property over 256 random sequences of up to 60 commands against 1–3 runs.
fn check_property(name: &str, checks: Checks) {
    let mut runner = TestRunner::new(config());
    let strategy = (1usize..=3, prop::collection::vec(cmd(), 1..=60));
    let result = runner.run(&strategy, |(max_runs, cmds)| {
        run_sequence(max_runs, &cmds, checks)
    });
    print_stats(name);
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

/// Claims, generations, expiry, stale and unclaimed writers, refused writes.
#[test]
fn fencing() {
    check_property(
        "fencing",
        Checks {
            fencing: true,
            ..NONE
        },
    );
}

/// A writer with an older generation's claim (or a forged token) is told `ClaimLost`, whatever
/// the run's state, so it stops quietly instead of treating the refusal as a crash.
#[test]
fn stale_writers_get_claim_lost() {
    check_property(
        "stale_writers_get_claim_lost",
        Checks {
            stale_typed: true,
            ..NONE
        },
    );
}

/// Every event has its projection; terminal runs never change.
#[test]
fn projection_and_terminal() {
    check_property(
        "projection_and_terminal",
        Checks {
            projection: true,
            ..NONE
        },
    );
}

/// The host's maintenance sweeps (expiry recovery, interaction deadlines, host restart) never
/// fail: one run's state must not stop the sweep for every other run.
#[test]
fn sweeps_never_fail() {
    check_property(
        "sweeps_never_fail",
        Checks {
            sweeps: true,
            ..NONE
        },
    );
}

/// A validating submission or an effect being applied is never dropped when the run parks,
/// waits, moves on or loses its child (docs/RULES.md, "Interactive steps" and "Effects").
#[test]
fn work_in_flight_survives_handoffs() {
    check_property(
        "work_in_flight_survives_handoffs",
        Checks {
            handoffs: true,
            ..NONE
        },
    );
}

/// No sequence of store calls leaves a contradiction `diagnose` can see.
#[test]
fn diagnose_clean() {
    check_property(
        "diagnose_clean",
        Checks {
            diagnose: true,
            ..NONE
        },
    );
}
