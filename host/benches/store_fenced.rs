//! Fenced-transition throughput against a bare SQLite transaction (the floor).
//!
//! Prints figures; asserts nothing about speed. Every database is in WAL mode with
//! `synchronous=FULL`, in one temporary directory under `target/bench-tmp` (same file system
//! as the repository), removed at the end.
//!
//! Run: `cargo bench -p piw-host --bench store_fenced`
//!
//! Environment:
//! - `PIW_BENCH_SECS`: seconds per measurement (default 2);
//! - `PIW_BENCH_DIR`: parent of the temporary directory (default `<workspace>/target/bench-tmp`).
//!
//! Measurements, each repeated 3 times (interleaved) and reported as the median:
//! 1. floor: `BEGIN IMMEDIATE; UPDATE t …; INSERT INTO log …; COMMIT` on a separate database;
//! 2. one run: back-to-back `store.write(|w| w.transition(..))`, each closing the current
//!    attempt and opening the next;
//! 3. 64 runs: the same, round-robin across 64 activated runs, one transaction per transition;
//! 4. 64 runs, group commit: K transitions per `store.write`, each in its own savepoint.

use piw_host::store::prelude::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use piw_host::store::{
    AttemptOutcome, Claim, ExecutionMode, NewRun, Store, StoreConfig, TransitionRequest,
};
use rusqlite::{params, Connection, TransactionBehavior};
use serde_json::json;

/// Target stated by the plan: a fenced transition costs at most this many bare transactions.
const TARGET_RATIO: f64 = 1.3;
const REPEATS: usize = 3;
const RUNS: usize = 64;
const GROUP: usize = 64;
const HOST: &str = "host-bench";

fn main() {
    let secs: f64 = std::env::var("PIW_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(2.0);
    let measure_for = Duration::from_secs_f64(secs);
    let warm_up = Duration::from_secs_f64((secs / 10.0).clamp(0.1, 0.5));

    let parent = std::env::var_os("PIW_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-tmp"));
    std::fs::create_dir_all(&parent).expect("create bench parent dir");
    let parent = parent.canonicalize().expect("canonical bench parent dir");
    let dir = tempfile::Builder::new()
        .prefix("store_fenced-")
        .tempdir_in(&parent)
        .expect("create bench temp dir");

    print_machine(dir.path(), secs);

    let mut floor = Floor::open(&dir.path().join("floor.sqlite"));
    let mut one = Fenced::open(&dir.path().join("one.sqlite"), 1);
    let mut many = Fenced::open(&dir.path().join("many.sqlite"), RUNS);
    let mut group = Fenced::open(&dir.path().join("group.sqlite"), RUNS);

    let mut samples: [Vec<Sample>; 4] = Default::default();
    for _ in 0..REPEATS {
        samples[0].push(measure(warm_up, measure_for, 1, || floor.op()));
        samples[1].push(measure(warm_up, measure_for, 1, || one.op()));
        samples[0].push(measure(warm_up, measure_for, 1, || floor.op()));
        samples[2].push(measure(warm_up, measure_for, 1, || many.op()));
        samples[0].push(measure(warm_up, measure_for, 1, || floor.op()));
        samples[3].push(measure(warm_up, measure_for, GROUP as u64, || {
            group.group_op(GROUP)
        }));
    }

    let floor_us = median_us(&samples[0]);
    println!();
    println!(
        "{:<40} {:>10} {:>12} {:>12} {:>7}",
        "measurement (median)", "ops/s", "µs/op", "spread µs", "ratio"
    );
    let names = [
        "floor: bare SQLite tx (UPDATE+INSERT)".to_owned(),
        "fenced transition, 1 run".to_owned(),
        format!("fenced transition, {RUNS} runs"),
        format!("  (info) {RUNS} runs, group commit K={GROUP}"),
    ];
    for (name, s) in names.iter().zip(&samples) {
        let us = median_us(s);
        let (lo, hi) = spread_us(s);
        println!(
            "{:<40} {:>10.0} {:>12.1} {:>12} {:>7.2}",
            name,
            1e6 / us,
            us,
            format!("{lo:.0}-{hi:.0}"),
            us / floor_us
        );
    }
    println!();
    println!(
        "ratio = fenced cost per op / floor cost per op; target: fenced transition <= {TARGET_RATIO} x bare transaction"
    );
    for (name, s) in names[1..3].iter().zip(&samples[1..3]) {
        let ratio = median_us(s) / floor_us;
        let verdict = if ratio <= TARGET_RATIO {
            "within target"
        } else {
            "ABOVE target"
        };
        println!("  {name}: {ratio:.2} ({verdict})");
    }
    println!(
        "samples: floor {} x, others {} x, {secs} s each",
        samples[0].len(),
        REPEATS
    );

    drop((floor, one, many, group));
    dir.close().expect("remove bench temp dir");
    // Leave target/bench-tmp itself only if something else is in it.
    let _ = std::fs::remove_dir(&parent);
}

/// One timed measurement: `ops` operations in `elapsed`.
struct Sample {
    ops: u64,
    elapsed: Duration,
}

impl Sample {
    fn us_per_op(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / self.ops as f64
    }
}

/// Runs `f` for `warm_up`, then for at least `measure_for`; every call counts `per_call` ops.
fn measure(warm_up: Duration, measure_for: Duration, per_call: u64, mut f: impl FnMut()) -> Sample {
    let start = Instant::now();
    while start.elapsed() < warm_up {
        f();
    }
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        f();
        calls += 1;
        let elapsed = start.elapsed();
        if elapsed >= measure_for {
            return Sample {
                ops: calls * per_call,
                elapsed,
            };
        }
    }
}

fn median_us(samples: &[Sample]) -> f64 {
    let mut v: Vec<f64> = samples.iter().map(Sample::us_per_op).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn spread_us(samples: &[Sample]) -> (f64, f64) {
    let v = samples.iter().map(Sample::us_per_op);
    (
        v.clone().fold(f64::INFINITY, f64::min),
        v.fold(0.0, f64::max),
    )
}

// ----- the floor ---------------------------------------------------------------------------

struct Floor {
    conn: Connection,
    next: i64,
}

impl Floor {
    fn open(path: &Path) -> Self {
        let conn = Connection::open(path).expect("open floor db");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("WAL");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("synchronous");
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL);
             CREATE TABLE log (id INTEGER PRIMARY KEY, t_id INTEGER NOT NULL,
                               at INTEGER NOT NULL, data TEXT NOT NULL);",
        )
        .expect("floor schema");
        for id in 0..RUNS as i64 {
            conn.execute("INSERT INTO t (id, v) VALUES (?1, 0)", [id])
                .expect("floor row");
        }
        Self { conn, next: 0 }
    }

    fn op(&mut self) {
        let id = self.next % RUNS as i64;
        self.next += 1;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        tx.prepare_cached("UPDATE t SET v = v + 1 WHERE id = ?1")
            .expect("prepare update")
            .execute([id])
            .expect("update");
        tx.prepare_cached("INSERT INTO log (t_id, at, data) VALUES (?1, ?2, ?3)")
            .expect("prepare insert")
            .execute(params![
                id,
                self.next,
                r#"{"kind":"transitioned","to":"b"}"#
            ])
            .expect("insert");
        tx.commit().expect("commit");
    }
}

// ----- fenced transitions ------------------------------------------------------------------

struct RunState {
    claim: Claim,
    attempt_id: String,
    /// Alternates the next node between `a` and `b`.
    flip: bool,
}

impl RunState {
    fn request(&mut self) -> TransitionRequest {
        self.flip = !self.flip;
        TransitionRequest {
            attempt_id: self.attempt_id.clone(),
            outcome: AttemptOutcome::Succeeded {
                output: json!({"ok": true}),
            },
            next_node: if self.flip { "b" } else { "a" }.to_owned(),
            next_deadline_at: None,
        }
    }
}

struct Fenced {
    store: Store,
    runs: Vec<RunState>,
    next: usize,
}

impl Fenced {
    /// A store (real clock, default lease) with `n` activated runs, each in node `a`.
    fn open(path: &Path, n: usize) -> Self {
        let mut store = Store::open(path, StoreConfig::default()).expect("open store");
        let runs = (0..n)
            .map(|_| {
                let run_id = store.write(|w| w.start_run(&new_run())).expect("start run");
                let act = store
                    .write(|w| w.activate(&run_id, HOST))
                    .expect("activate");
                let attempt_id = store
                    .write(|w| w.node_started(&act.claim, "a", None))
                    .expect("node started");
                RunState {
                    claim: act.claim,
                    attempt_id,
                    flip: false,
                }
            })
            .collect();
        Self {
            store,
            runs,
            next: 0,
        }
    }

    /// One transition in its own transaction, round-robin over the runs.
    fn op(&mut self) {
        let i = self.next % self.runs.len();
        let run = &mut self.runs[i];
        self.next += 1;
        let req = run.request();
        let t = self
            .store
            .write(|w| w.transition(&run.claim, &req))
            .expect("transition");
        run.attempt_id = t.next_attempt_id;
    }

    /// `k` transitions in one transaction, each in its own savepoint.
    fn group_op(&mut self, k: usize) {
        let Self { store, runs, next } = self;
        store
            .write(|w| {
                for _ in 0..k {
                    let n = runs.len();
                    let run = &mut runs[*next % n];
                    *next += 1;
                    let req = run.request();
                    let t = w.savepoint(|w| w.transition(&run.claim, &req))?;
                    run.attempt_id = t.next_attempt_id;
                }
                Ok(())
            })
            .expect("group commit");
    }
}

fn new_run() -> NewRun {
    NewRun {
        workflow_name: "bench".into(),
        source_root: "/tmp/bench.workflow.mjs".into(),
        source_hash: "abc".into(),
        mounted_sources: json!({}),
        definition: None,
        input: json!({"n": 1}),
        origin_session: Some("session-bench".into()),
        execution_mode: ExecutionMode::Detached,
        project_dir: "/tmp".into(),
    }
}

// ----- machine facts -----------------------------------------------------------------------

fn print_machine(dir: &Path, secs: f64) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("store_fenced: fenced transitions vs a bare SQLite transaction");
    println!(
        "  cores: {cores} ({cpu}); sqlite {}; WAL, synchronous=FULL",
        rusqlite::version()
    );
    println!("  temp dir: {} ({})", dir.display(), file_system(dir));
    println!("  {secs} s per measurement after warm-up, {REPEATS} repeats, median reported");
}

/// `stat -f` type plus the mount's type and options from /proc/mounts, as far as known.
fn file_system(dir: &Path) -> String {
    let statfs = std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mount = std::fs::read_to_string("/proc/mounts").ok().and_then(|m| {
        m.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4 && canonical.starts_with(f[1])).then(|| {
                    (
                        f[1].len(),
                        format!("{} on {} {} {}", f[2], f[1], f[0], f[3]),
                    )
                })
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, desc)| desc)
    });
    match (statfs, mount) {
        (Some(s), Some(m)) => format!("stat -f: {s}; mount: {m}"),
        (Some(s), None) => format!("stat -f: {s}"),
        (None, Some(m)) => format!("mount: {m}"),
        (None, None) => "file system unknown".into(),
    }
}
