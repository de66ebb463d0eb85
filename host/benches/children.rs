//! Children: activation latency and node transitions per second of real `piw-json-worker`
//! children under a real `piw host serve`, against floors measured in the same run.
//!
//! Prints figures and ratios; asserts only correctness (every run ends `completed` with its
//! last node's output, the expected attempts, and a clean `diagnose`), never speed. Every
//! host is a real `piw host serve` process at its defaults (WAL, `synchronous=FULL`, default
//! child slots) with `PIW_RUNTIMES=.workflow.json=<piw-json-worker>`, `PIW_LOG=warn` and
//! `PIW_HOME` in one temporary directory under `target/bench-tmp` (same file system as the
//! repository), removed at the end.
//!
//! Run: `cargo bench -p piw-host --bench children`
//!
//! Environment:
//! - `PIW_BENCH_SECS`: seconds of each bare-commit floor (default 2; the floors right before
//!   each 64-run burst take at most 1 s);
//! - `PIW_BENCH_ACT_RUNS`: sequential one-node runs for the activation latency (default 100,
//!   at least 50);
//! - `PIW_BENCH_DIR`: parent of the temporary directory (default `<workspace>/target/bench-tmp`).
//!
//! Measurements:
//! 1. floors: (a) `fork+exec` of `/bin/true` (`std::process::Command`, spawn + wait), 200 runs
//!    after 20 warm-up; (b) a bare SQLite commit (`BEGIN IMMEDIATE; UPDATE; INSERT; COMMIT`,
//!    WAL, `synchronous=FULL`, a file in the same temp dir), at the start, right before each
//!    64-run burst and at the end; (c) `piw-json-worker` spawned the way the host spawns it
//!    (own process group, cleared environment, envelope on stdin) until its `worker.hello`
//!    frame reaches a socket this bench listens on: process start plus worker start-up,
//!    without a host; once as std spawns by default (`posix_spawn`) and once with a pre-exec
//!    hook, which makes std fork as the host's rlimit hook does;
//! 2. activation latency: sequential one-node runs on one host, each timed from the client's
//!    `run.start` call to the arrival of the run's `node_started` event on a subscription
//!    made (to the runs' session) before the start; `node_started` is the commit of the first
//!    node's attempt, right before its body runs. Between runs the bench waits (outside the
//!    timing) until the run completed and its child exited;
//! 3. transitions: a 20-node chain of compute nodes, one run from `run.start` to its
//!    `completed` event, 5 times (median); then 64 runs of it started at once from 64
//!    connections (total time from the common start to the last `completed` event), on a
//!    host with the default child slots and again on one with `PIW_MAX_CHILDREN=64`,
//!    against the "one commit each, one after another" baseline 64 × 20 × the bare commit
//!    p50 measured right before the burst.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use piw_core::client::{BlockingClient, Client};
use piw_core::ids::new_id;
use piw_core::paths::PiwPaths;
use piw_core::protocol::{payload, read_frame, Limits, Request, RequestBody};
use piw_core::worker::{hash_file, LaunchEnvelope, LAUNCH_SCHEMA};
use rusqlite::{params, Connection, TransactionBehavior};
use serde_json::{json, Value};

const FORK_WARM_UP: usize = 20;
const FORK_RUNS: usize = 200;
const WORKER_WARM_UP: usize = 10;
const WORKER_RUNS: usize = 100;
const ACT_WARM_UP: usize = 5;
const ACT_RUNS_DEFAULT: usize = 100;
const ACT_RUNS_MIN: usize = 50;
/// Nodes in the chain workflow.
const CHAIN: usize = 20;
/// Sequential repetitions of the one-run chain (the median is reported).
const SINGLE_REPS: usize = 5;
/// Runs started at once.
const BURST: usize = 64;
/// The child slots of the second burst host.
const WIDE_SLOTS: usize = 64;
/// The host's default child slots (`ChildConfig::default().max_children`), for the labels.
const DEFAULT_SLOTS: usize = 16;
/// How long the bare-commit floor runs right before each burst (at most `PIW_BENCH_SECS`).
const ADJACENT_FLOOR: Duration = Duration::from_secs(1);
/// Target: activation p50 at most this many milliseconds.
const TARGET_ACTIVATION_P50_MS: f64 = 5.0;
/// Target: the 64 runs at least this many times faster than 64 × 20 sequential bare commits.
const TARGET_SPEEDUP_64: f64 = 3.0;
/// Event kinds that end a run.
const TERMINAL: [&str; 5] = ["completed", "failed", "cancelled", "timed_out", "review"];

fn main() {
    let secs: f64 = std::env::var("PIW_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(2.0);
    let act_runs: usize = std::env::var("PIW_BENCH_ACT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ACT_RUNS_DEFAULT)
        .max(ACT_RUNS_MIN);
    let measure_for = Duration::from_secs_f64(secs);
    let warm_up = Duration::from_secs_f64((secs / 10.0).clamp(0.1, 0.5));

    let parent = std::env::var_os("PIW_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-tmp"));
    std::fs::create_dir_all(&parent).expect("create bench parent dir");
    let parent = parent.canonicalize().expect("canonical bench parent dir");
    let dir = tempfile::Builder::new()
        .prefix("children-")
        .tempdir_in(&parent)
        .expect("create bench temp dir");

    print_machine(dir.path(), secs, act_runs);

    let one = write_fixture(dir.path(), "one", &one_node_fixture());
    let chain = write_fixture(dir.path(), "chain", &chain_fixture(CHAIN));
    let chain_result = chain_output(CHAIN);

    // 1. Floors.
    let fork = fork_exec_floor();
    let mut floor = SqliteFloor::open(&dir.path().join("floor.sqlite"));
    let commit_start = floor.measure(warm_up, measure_for);
    let (worker, worker_forked) = worker_start_floor(dir.path(), &one);

    // 2. Activation latency.
    let act = {
        let mut host = Host::start(dir.path(), "act", &[]);
        let act = activation(&host, &one, act_runs);
        host.diagnose_clean();
        host.stop();
        act
    };

    // 3. Transitions: one run at a time, then 64 at once (default slots); then 64 at once
    //    with a slot per run.
    let (single, narrow) = {
        let mut host = Host::start(dir.path(), "tp", &[]);
        let single = single_runs(&host, &chain, &chain_result);
        let adjacent = floor.measure(warm_up, ADJACENT_FLOOR.min(measure_for));
        let burst = burst(&host, &chain, &chain_result, "burst", adjacent);
        host.diagnose_clean();
        host.stop();
        (single, burst)
    };
    let wide = {
        let slots = WIDE_SLOTS.to_string();
        let mut host = Host::start(dir.path(), "wide", &[("PIW_MAX_CHILDREN", &slots)]);
        let adjacent = floor.measure(warm_up, ADJACENT_FLOOR.min(measure_for));
        let burst = burst(&host, &chain, &chain_result, "burst-wide", adjacent);
        host.diagnose_clean();
        host.stop();
        burst
    };
    let commit_end = floor.measure(warm_up, measure_for);

    // ----- report ------------------------------------------------------------------------
    let ms = |us: f64| us / 1000.0;
    println!();
    println!(
        "{:<52} {:>6} {:>9} {:>9} {:>9}",
        "floors", "n", "p50 ms", "p99 ms", "per s"
    );
    let row = |name: &str, l: &Latencies, rate: f64| {
        println!(
            "{:<52} {:>6} {:>9.3} {:>9.3} {:>9.0}",
            name,
            l.len(),
            ms(l.p(0.50)),
            ms(l.p(0.99)),
            rate
        );
    };
    row(
        "a: fork+exec /bin/true (spawn + wait)",
        &fork,
        1e6 / fork.mean(),
    );
    row(
        "b: bare SQLite commit (start)",
        &commit_start.lat,
        commit_start.rate(),
    );
    row(
        "b: bare SQLite commit (end)",
        &commit_end.lat,
        commit_end.rate(),
    );
    row(
        "c: spawn piw-json-worker -> its worker.hello frame",
        &worker,
        1e6 / worker.mean(),
    );
    row(
        "c: the same, forked (pre-exec hook, like the host)",
        &worker_forked,
        1e6 / worker_forked.mean(),
    );
    println!("  c: the host's spawn options (own group, cleared env, envelope on stdin); the worker reads the envelope, hashes and parses the fixture, connects and sends hello; no host involved");

    println!();
    println!(
        "{:<52} {:>6} {:>9} {:>9} {:>12}",
        "activation (one-node runs, one at a time)", "n", "p50 ms", "p99 ms", "÷ fork+exec"
    );
    let act_row = |name: &str, l: &Latencies| {
        println!(
            "{:<52} {:>6} {:>9.3} {:>9.3} {:>12}",
            name,
            l.len(),
            ms(l.p(0.50)),
            ms(l.p(0.99)),
            format!("{:.1}x", l.p(0.50) / fork.p(0.50))
        );
    };
    act_row("run.start call -> node_started event", &act.started);
    act_row("  of which: run.start call -> its receipt", &act.reply);
    act_row(
        "  of which: receipt -> node_started event",
        &act.after_reply,
    );
    act_row("node_started event -> completed event (info)", &act.body);
    let commit_p50 = commit_start.lat.p(0.50);
    let model = act.reply.p(0.50) + worker_forked.p(0.50) + 3.0 * commit_p50;
    println!(
        "  ÷ fork+exec: p50 ÷ the fork+exec p50 ({:.3} ms)",
        ms(fork.p(0.50))
    );
    println!(
        "  model of the p50 path: run.start receipt {:.2} + worker spawn->hello (fork) {:.2} + 3 commits x {:.2} (activation, worker.hello, worker.node_started) = {:.2} ms; measured {:.2} ms",
        ms(act.reply.p(0.50)),
        ms(worker_forked.p(0.50)),
        ms(commit_p50),
        ms(model),
        ms(act.started.p(0.50))
    );
    println!(
        "  phases (mean ms over the {} runs, cut at the events' store-transaction stamps, 1 ms resolution):",
        act.started.len()
    );
    for (name, mean) in PHASES.iter().zip(&act.phases) {
        println!("    {name:<40} {mean:>7.2}");
    }
    println!(
        "    {:<40} {:>7.2} (the mean of the measured total: {:.2})",
        "sum",
        act.phases.iter().sum::<f64>(),
        ms(act.started.mean())
    );
    println!(
        "  events the subscription delivered per run: {}; per-run seq gaps (events committed but never delivered): {} of {} runs",
        act.kinds, act.runs_with_gaps, act.started.len() + ACT_WARM_UP
    );
    let act_p50_ms = ms(act.started.p(0.50));
    println!(
        "  target: activation p50 <= {TARGET_ACTIVATION_P50_MS:.1} ms: {act_p50_ms:.2} ms ({})",
        if act_p50_ms <= TARGET_ACTIVATION_P50_MS {
            "met"
        } else {
            "NOT met"
        }
    );

    println!();
    println!(
        "{:<44} {:>5} {:>10} {:>9} {:>12} {:>10}",
        format!("transitions ({CHAIN}-node chain)"),
        "runs",
        "time ms",
        "nodes/s",
        "baseline ms",
        "speed-up"
    );
    let single_ms = ms(single.median_us());
    println!(
        "{:<44} {:>5} {:>10.1} {:>9.0} {:>12} {:>10}",
        format!("one run, median of {SINGLE_REPS}"),
        1,
        single_ms,
        CHAIN as f64 / (single_ms / 1000.0),
        "-",
        "-"
    );
    for (label, b) in [
        (
            format!("{BURST} at once, {DEFAULT_SLOTS} slots (default)"),
            &narrow,
        ),
        (
            format!("{BURST} at once, PIW_MAX_CHILDREN={WIDE_SLOTS}"),
            &wide,
        ),
    ] {
        println!(
            "{:<44} {:>5} {:>10.1} {:>9.0} {:>12.1} {:>10}",
            label,
            b.runs,
            b.total.as_secs_f64() * 1000.0,
            b.nodes_per_sec(),
            ms(b.baseline_us()),
            format!("{:.2}x", b.speedup())
        );
    }
    println!(
        "  one run: {} ms each ({:.2} ms per node incl. activation)",
        single.each_ms(),
        single_ms / CHAIN as f64
    );
    println!("  time: from the common start to the last run's completed event; nodes/s = runs x {CHAIN} / time");
    println!("  baseline: runs x {CHAIN} x the bare commit p50 measured right before the burst (one commit each, one after another); speed-up = baseline / time");
    for (label, b) in [("default slots", &narrow), ("64 slots", &wide)] {
        println!(
            "  {label}: bare commit p50 {:.3} ms ({:.0}/s) before; per-run start->completed p50 {:.1} ms, max {:.1} ms; first run done at {:.1} ms; run.start receipts p50 {:.2} ms, p99 {:.2} ms",
            ms(b.bare.lat.p(0.50)),
            b.bare.rate(),
            ms(b.per_run.p(0.50)),
            ms(b.per_run.p(1.0)),
            ms(b.per_run.p(0.0)),
            ms(b.start_rt.p(0.50)),
            ms(b.start_rt.p(0.99)),
        );
        println!(
            "  {label}: CPU over {:.0} ms (start to children gone), share of one core: host {:.0}% (store thread {:.0}%), children {:.0}%, bench {:.0}%; {:.2} of {} cores busy; host wrote {:.1} KiB per node; {} events delivered",
            b.cpu.wall.as_secs_f64() * 1000.0,
            b.cpu.host * 100.0,
            b.cpu.store * 100.0,
            b.cpu.children * 100.0,
            b.cpu.bench * 100.0,
            b.cpu.host + b.cpu.children + b.cpu.bench,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            b.cpu.host_wchar / 1024.0 / (b.runs * CHAIN) as f64,
            b.events,
        );
    }
    let verdict = |r: f64| {
        if r >= TARGET_SPEEDUP_64 {
            "met"
        } else {
            "NOT met"
        }
    };
    println!(
        "  target: {BURST} runs >= {TARGET_SPEEDUP_64:.1}x faster than the sequential baseline: {:.2}x with default slots ({}); {:.2}x with {WIDE_SLOTS} slots ({})",
        narrow.speedup(),
        verdict(narrow.speedup()),
        wide.speedup(),
        verdict(wide.speedup())
    );
    println!("  checked: every run completed with the last node's output and {CHAIN} succeeded attempts in order; diagnose clean on every host");
    println!("  load average at the end: {}", load_average());

    drop(floor);
    dir.close().expect("remove bench temp dir");
    // Leave target/bench-tmp itself only if something else is in it.
    let _ = std::fs::remove_dir(&parent);
}

// ----- fixtures -----------------------------------------------------------------------------

fn one_node_fixture() -> Value {
    json!({
        "graph": {"name": "one", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
        "behaviors": {"a": {"return": {"done": true}}}
    })
}

fn node_name(i: usize) -> String {
    format!("n{i:02}")
}

/// The output of the chain's last node, which becomes the run's result.
fn chain_output(n: usize) -> Value {
    json!({"step": n, "done": true})
}

/// `n01 → n02 → … → nNN`, each node returning `{"step": i}` (the last one `chain_output`).
fn chain_fixture(n: usize) -> Value {
    let mut nodes = serde_json::Map::new();
    let mut behaviors = serde_json::Map::new();
    let mut edges = Vec::new();
    for i in 1..=n {
        nodes.insert(node_name(i), json!({"kind": "compute"}));
        let out = if i == n {
            chain_output(n)
        } else {
            json!({"step": i})
        };
        behaviors.insert(node_name(i), json!({ "return": out }));
        if i < n {
            edges.push(json!({"from": node_name(i), "to": node_name(i + 1)}));
        }
    }
    json!({
        "graph": {"name": "chain", "start": node_name(1), "nodes": nodes, "edges": edges},
        "behaviors": behaviors
    })
}

fn write_fixture(dir: &Path, name: &str, fixture: &Value) -> String {
    let p = dir.join(format!("{name}.workflow.json"));
    std::fs::write(
        &p,
        serde_json::to_vec_pretty(fixture).expect("fixture json"),
    )
    .expect("write fixture");
    p.display().to_string()
}

// ----- latency samples ---------------------------------------------------------------------

/// Latencies in microseconds.
#[derive(Default)]
struct Latencies(Vec<f64>);

impl Latencies {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1e6);
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// Every sample in milliseconds, in order.
    fn list_ms(&self) -> String {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|u| format!("{:.1}", u / 1000.0))
            .collect();
        each.join(", ")
    }

    fn mean(&self) -> f64 {
        self.0.iter().sum::<f64>() / self.0.len().max(1) as f64
    }

    /// Nearest-rank percentile (`q = 0` is the minimum, `q = 1` the maximum).
    fn p(&self, q: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = (q * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

// ----- floor a: fork+exec -------------------------------------------------------------------

fn fork_exec_floor() -> Latencies {
    let mut lat = Latencies::default();
    for i in 0..FORK_WARM_UP + FORK_RUNS {
        let t = Instant::now();
        let status = Command::new("/bin/true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn /bin/true")
            .wait()
            .expect("wait /bin/true");
        let d = t.elapsed();
        assert!(status.success(), "/bin/true failed: {status}");
        if i >= FORK_WARM_UP {
            lat.push(d);
        }
    }
    lat
}

// ----- floor b: bare SQLite commit ----------------------------------------------------------

struct SqliteFloor {
    conn: Connection,
    next: i64,
}

struct Commits {
    lat: Latencies,
    elapsed: Duration,
}

impl Commits {
    fn rate(&self) -> f64 {
        self.lat.len() as f64 / self.elapsed.as_secs_f64()
    }
}

impl SqliteFloor {
    fn open(path: &Path) -> Self {
        let conn = Connection::open(path).expect("open floor db");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("WAL");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("synchronous");
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL);
             CREATE TABLE log (id INTEGER PRIMARY KEY, t_id INTEGER NOT NULL,
                               at INTEGER NOT NULL, data TEXT NOT NULL);
             INSERT INTO t (id, v) VALUES (1, 0);",
        )
        .expect("floor schema");
        Self { conn, next: 0 }
    }

    fn commit(&mut self) {
        self.next += 1;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        tx.prepare_cached("UPDATE t SET v = v + 1 WHERE id = 1")
            .expect("prepare update")
            .execute([])
            .expect("update");
        tx.prepare_cached("INSERT INTO log (t_id, at, data) VALUES (1, ?1, ?2)")
            .expect("prepare insert")
            .execute(params![
                self.next,
                r#"{"kind":"transitioned","next":"n02"}"#
            ])
            .expect("insert");
        tx.commit().expect("commit");
    }

    fn measure(&mut self, warm_up: Duration, measure_for: Duration) -> Commits {
        let start = Instant::now();
        while start.elapsed() < warm_up {
            self.commit();
        }
        let mut lat = Latencies::default();
        let start = Instant::now();
        loop {
            let t = Instant::now();
            self.commit();
            lat.push(t.elapsed());
            let elapsed = start.elapsed();
            if elapsed >= measure_for {
                return Commits { lat, elapsed };
            }
        }
    }
}

// ----- floor c: worker start-up without a host ----------------------------------------------

/// Spawns `piw-json-worker` like the host does (own process group, cleared environment but
/// `PATH`/`HOME`/`LANG`/`TMPDIR`, envelope on stdin, piped output) with an envelope naming a
/// socket this bench listens on, and times spawn → the worker's `worker.hello` frame read.
/// The bench then closes the connection; the worker stops quietly. Returns the rounds
/// without and with a (no-op) pre-exec hook: std spawns with `posix_spawn` (vfork) unless a
/// hook is set, and then forks; the host sets one (rlimits).
fn worker_start_floor(dir: &Path, fixture: &str) -> (Latencies, Latencies) {
    let socket = dir.join("worker-floor.sock");
    let listener = UnixListener::bind(&socket).expect("bind worker floor socket");
    let (tx, rx) = mpsc::channel::<Instant>();
    // One acceptor for every round; it ends when the bench drops the receiver.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            if let Ok(Some(_hello)) = read_frame(&mut s, &Limits::default()) {
                if tx.send(Instant::now()).is_err() {
                    return;
                }
            }
            drop(s);
        }
    });
    let envelope = LaunchEnvelope {
        schema: LAUNCH_SCHEMA.to_owned(),
        run_id: "floor-run".into(),
        generation: 1,
        child_token: "floor-token".into(),
        mode: "run".into(),
        source_root: fixture.to_owned(),
        source_hash: hash_file(Path::new(fixture)).expect("hash fixture"),
        mounted_sources: Default::default(),
        project_dir: dir.display().to_string(),
        input_hash: String::new(),
        socket_path: socket.clone(),
    };
    let stdin_payload = serde_json::to_vec(&envelope).expect("envelope json");
    let mut spawned = Latencies::default();
    let mut forked = Latencies::default();
    // Alternating rounds: even ones as above, odd ones with a pre-exec hook like the host's.
    for i in 0..2 * (WORKER_WARM_UP + WORKER_RUNS) {
        let fork = i % 2 == 1;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_piw-json-worker"));
        cmd.arg(fixture)
            .env_clear()
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for key in ["PATH", "HOME", "LANG", "TMPDIR"] {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.env("PIW_RUN_ID", "floor-run");
        if fork {
            // SAFETY: the hook does nothing; its presence alone makes std fork + exec instead
            // of posix_spawn, as the host's setrlimit hook does.
            unsafe {
                cmd.pre_exec(|| Ok(()));
            }
        }
        let t = Instant::now();
        let mut child = cmd.spawn().expect("spawn piw-json-worker");
        {
            let mut stdin = child.stdin.take().expect("worker stdin");
            stdin.write_all(&stdin_payload).expect("write envelope");
        }
        let hello_at = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(at) => at,
            Err(_) => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("worker output");
                panic!(
                    "piw-json-worker never said hello to the floor socket: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        let out = child.wait_with_output().expect("wait piw-json-worker");
        assert!(
            out.status.success(),
            "piw-json-worker should stop quietly when the socket closes: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if i >= 2 * WORKER_WARM_UP {
            if fork {
                forked.push(hello_at - t);
            } else {
                spawned.push(hello_at - t);
            }
        }
    }
    let _ = std::fs::remove_file(&socket);
    (spawned, forked)
}

// ----- a real host --------------------------------------------------------------------------

struct Host {
    child: Option<Child>,
    paths: PiwPaths,
    project_dir: String,
    stderr: PathBuf,
}

impl Host {
    /// Starts `piw host serve` with `PIW_HOME=<dir>/<name>`, the JSON worker as the runtime of
    /// `.workflow.json`, `PIW_LOG=warn` and `extra` variables, and waits until it answers.
    fn start(dir: &Path, name: &str, extra: &[(&str, &str)]) -> Self {
        let paths = PiwPaths::for_home(dir.join(name));
        paths.ensure_dirs().expect("create PIW_HOME");
        let stderr = dir.join(format!("{name}.stderr"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_piw"));
        cmd.args(["host", "serve"])
            .env("PIW_HOME", &paths.home)
            .env("PIW_LOG", "warn")
            .env(
                "PIW_RUNTIMES",
                format!(".workflow.json={}", env!("CARGO_BIN_EXE_piw-json-worker")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("host stderr file"));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn piw host serve");
        let mut host = Self {
            child: Some(child),
            paths,
            project_dir: dir.display().to_string(),
            stderr,
        };
        host.wait_ready();
        host
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(mut c) = BlockingClient::connect(&self.paths) {
                if c.call(RequestBody::HostStatus).is_ok() {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("host exited during start-up ({status}): {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "host did not answer host.status within 10 s: {}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("host running").id()
    }

    fn client(&self) -> BlockingClient {
        let c = BlockingClient::connect(&self.paths).expect("connect to host");
        c.set_timeout(Some(Duration::from_secs(60)))
            .expect("client timeout");
        c
    }

    fn start_body(&self, workflow: &str, session: &str) -> RequestBody {
        RequestBody::RunStart(payload::RunStart {
            workflow_file: workflow.to_owned(),
            input: json!({}),
            session_id: Some(session.to_owned()),
            execution_mode: None,
            project_dir: Some(self.project_dir.clone()),
        })
    }

    fn subscribe_session(&self, c: &mut BlockingClient, session: &str) {
        c.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: None,
            session_id: Some(session.to_owned()),
        }))
        .expect("subscribe");
    }

    fn status(&self, c: &mut BlockingClient, run_id: &str) -> Value {
        c.send(Request::new(new_id("status"), RequestBody::RunStatus).with_run_id(run_id))
            .expect("run.status")
            .body
    }

    /// Waits (outside any timing) until the host has no child left.
    fn wait_idle(&self, c: &mut BlockingClient) {
        let start = Instant::now();
        loop {
            let r = c.call(RequestBody::HostStatus).expect("host.status");
            if r.body["active_children"].as_u64() == Some(0) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "children still active after 30 s: {}; {}",
                r.body,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Every run `completed` with `result` and one succeeded attempt per node, in order.
    fn check_runs(&self, run_ids: &[String], nodes: &[String], result: &Value) {
        let mut c = self.client();
        for run_id in run_ids {
            let s = self.status(&mut c, run_id);
            assert_eq!(
                s["run"]["status"],
                json!("completed"),
                "run {run_id}: {s:#}; host log: {}",
                self.log()
            );
            assert_eq!(&s["run"]["result"], result, "run {run_id}: {s:#}");
            let attempts: Vec<(String, String)> = s["attempts"]
                .as_array()
                .expect("attempts")
                .iter()
                .map(|a| {
                    (
                        a["node_id"].as_str().unwrap_or_default().to_owned(),
                        a["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            let expected: Vec<(String, String)> = nodes
                .iter()
                .map(|n| (n.clone(), "succeeded".to_owned()))
                .collect();
            assert_eq!(attempts, expected, "run {run_id}: attempts");
        }
    }

    fn diagnose_clean(&self) {
        let d = self.client().call(RequestBody::Diagnose).expect("diagnose");
        assert_eq!(
            d.body["findings"],
            json!([]),
            "diagnose must be clean: {}",
            d.body
        );
    }

    /// `host.stop`, then waits for a clean exit.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        self.client()
            .call(RequestBody::HostStop)
            .expect("host.stop");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait for host") {
                if !status.success() {
                    eprintln!("warning: host exited with {status}: {}", self.log());
                }
                return;
            }
            if start.elapsed() > Duration::from_secs(15) {
                eprintln!("warning: host did not stop within 15 s; killing it");
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Only on a panic path: `stop` takes the child.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ----- 2. activation latency ----------------------------------------------------------------

struct Activation {
    /// run.start call → node_started event.
    started: Latencies,
    /// run.start call → its receipt.
    reply: Latencies,
    /// Receipt → node_started event.
    after_reply: Latencies,
    /// node_started event → completed event.
    body: Latencies,
    /// The event kinds delivered for the last run, in order.
    kinds: String,
    /// Runs whose delivered seqs were not 1, 2, 3, … without holes.
    runs_with_gaps: usize,
    /// Mean milliseconds of each phase (see `PHASES`).
    phases: Vec<f64>,
}

/// The activation path cut at the durable events' time stamps (each the start of the store
/// transaction that wrote it, Unix ms, truncated): the client's call, `started` (run.start),
/// `activated` (the scheduler's claim), `definition_recorded` (the child's worker.hello),
/// `node_started`, and the event's arrival at the client.
const PHASES: [&str; 5] = [
    "call -> run.start tx",
    "run.start tx -> activation tx",
    "activation tx -> worker.hello tx",
    "worker.hello tx -> node_started tx",
    "node_started tx -> event at client",
];

/// Microseconds since the Unix epoch (the host's store clock reads the same system clock).
fn unix_us() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
}

/// Mean duration of each of `PHASES` over `samples` (run id, call and arrival in Unix µs),
/// from the events stored in the host's database (read-only while it runs). A stamp
/// truncated to the millisecond is taken as the middle of its millisecond; over many runs
/// the truncation averages out.
fn activation_phases(db: &Path, samples: &[(String, f64, f64)]) -> Vec<f64> {
    let store = piw_core::store::Store::open_read_only(db, Default::default())
        .expect("open the host's database read-only");
    let mut sums = [0.0f64; PHASES.len()];
    for (run_id, call_us, arrive_us) in samples {
        let events = store.events(run_id, 0).expect("events");
        let at = |kind: &str| {
            events
                .iter()
                .find(|e| e.kind == kind)
                .map(|e| (e.at as f64 + 0.5) * 1000.0)
                .unwrap_or_else(|| panic!("run {run_id} has no {kind} event"))
        };
        let cuts = [
            *call_us,
            at("started"),
            at("activated"),
            at("definition_recorded"),
            at("node_started"),
            *arrive_us,
        ];
        for (i, sum) in sums.iter_mut().enumerate() {
            *sum += cuts[i + 1] - cuts[i];
        }
    }
    sums.iter()
        .map(|s| s / samples.len().max(1) as f64 / 1000.0)
        .collect()
}

fn activation(host: &Host, workflow: &str, runs: usize) -> Activation {
    let mut c = host.client();
    host.subscribe_session(&mut c, "act");
    let mut out = Activation {
        started: Latencies::default(),
        reply: Latencies::default(),
        after_reply: Latencies::default(),
        body: Latencies::default(),
        kinds: String::new(),
        runs_with_gaps: 0,
        phases: Vec::new(),
    };
    let mut run_ids = Vec::new();
    let mut stamps = Vec::new();
    for i in 0..ACT_WARM_UP + runs {
        host.wait_idle(&mut c);
        let body = host.start_body(workflow, "act");
        let call_us = unix_us();
        let t0 = Instant::now();
        let r = c.call(body).expect("run.start");
        let reply = t0.elapsed();
        let run_id = r.body["run_id"].as_str().expect("run_id").to_owned();
        let mut started = None;
        let mut arrive_us = f64::NAN;
        let mut seqs = Vec::new();
        let mut kinds = Vec::new();
        let done = loop {
            let e = c.next_event().expect("subscription event");
            if e.run_id != run_id {
                continue;
            }
            seqs.push(e.seq);
            kinds.push(e.event_kind.clone());
            if e.event_kind == "node_started" && started.is_none() {
                started = Some(t0.elapsed());
                arrive_us = unix_us();
            }
            if TERMINAL.contains(&e.event_kind.as_str()) {
                assert_eq!(
                    e.event_kind,
                    "completed",
                    "run {run_id} ended {}: {}",
                    e.event_kind,
                    host.log()
                );
                break t0.elapsed();
            }
        };
        let started = started.expect("a node_started event before completed");
        if seqs.iter().zip(1u64..).any(|(s, want)| *s != want) {
            out.runs_with_gaps += 1;
        }
        out.kinds = format!("seq {seqs:?} = {}", kinds.join(", "));
        if i >= ACT_WARM_UP {
            stamps.push((run_id.clone(), call_us, arrive_us));
            out.started.push(started);
            out.reply.push(reply);
            out.after_reply.push(started - reply);
            out.body.push(done - started);
        }
        run_ids.push(run_id);
    }
    host.wait_idle(&mut c);
    out.phases = activation_phases(&host.paths.db, &stamps);
    host.check_runs(&run_ids, &["a".to_owned()], &json!({"done": true}));
    out
}

// ----- 3. transitions -----------------------------------------------------------------------

fn chain_nodes() -> Vec<String> {
    (1..=CHAIN).map(node_name).collect()
}

struct Single(Latencies);

impl Single {
    fn median_us(&self) -> f64 {
        self.0.p(0.5)
    }

    fn each_ms(&self) -> String {
        self.0.list_ms()
    }
}

fn single_runs(host: &Host, workflow: &str, result: &Value) -> Single {
    let mut c = host.client();
    host.subscribe_session(&mut c, "one");
    let mut lat = Latencies::default();
    let mut run_ids = Vec::new();
    for _ in 0..SINGLE_REPS {
        host.wait_idle(&mut c);
        let body = host.start_body(workflow, "one");
        let t0 = Instant::now();
        let r = c.call(body).expect("run.start");
        let run_id = r.body["run_id"].as_str().expect("run_id").to_owned();
        loop {
            let e = c.next_event().expect("subscription event");
            if e.run_id == run_id && TERMINAL.contains(&e.event_kind.as_str()) {
                assert_eq!(e.event_kind, "completed", "run {run_id}: {}", host.log());
                lat.push(t0.elapsed());
                break;
            }
        }
        run_ids.push(run_id);
    }
    host.wait_idle(&mut c);
    host.check_runs(&run_ids, &chain_nodes(), result);
    Single(lat)
}

struct Burst {
    runs: usize,
    total: Duration,
    /// Common start → each run's completed event.
    per_run: Latencies,
    /// run.start round trips under the burst.
    start_rt: Latencies,
    /// The bare commit floor measured right before.
    bare: Commits,
    cpu: CpuUse,
    events: usize,
}

impl Burst {
    fn nodes_per_sec(&self) -> f64 {
        (self.runs * CHAIN) as f64 / self.total.as_secs_f64()
    }

    /// One commit per node, one after another, at the bare commit p50 (µs).
    fn baseline_us(&self) -> f64 {
        (self.runs * CHAIN) as f64 * self.bare.lat.p(0.50)
    }

    fn speedup(&self) -> f64 {
        self.baseline_us() / (self.total.as_secs_f64() * 1e6)
    }
}

/// `BURST` runs of `workflow` started at once from as many connections (async clients on one
/// current-thread runtime); a subscription to their session, made before, on its own thread,
/// notes when each run's terminal event arrives.
fn burst(host: &Host, workflow: &str, result: &Value, session: &str, bare: Commits) -> Burst {
    let mut sub = host.client();
    host.subscribe_session(&mut sub, session);
    let watcher = std::thread::spawn(move || {
        let mut done: HashMap<String, (String, Instant)> = HashMap::new();
        let mut events = 0usize;
        while done.len() < BURST {
            let e = sub.next_event().expect(
                "subscription event (a subscriber that falls behind is closed by the host)",
            );
            events += 1;
            if TERMINAL.contains(&e.event_kind.as_str()) {
                done.entry(e.run_id)
                    .or_insert((e.event_kind, Instant::now()));
            }
        }
        (done, events, sub)
    });
    let bodies: Vec<RequestBody> = (0..BURST)
        .map(|_| host.start_body(workflow, session))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cpu_a = CpuSnapshot::take(host.pid());
    let (begin, starts) = runtime.block_on(async {
        let mut conns = Vec::with_capacity(BURST);
        for _ in 0..BURST {
            conns.push(Client::connect(&host.paths).await.expect("async connect"));
        }
        let begin = Instant::now() + Duration::from_millis(20);
        let mut tasks = tokio::task::JoinSet::new();
        for (mut client, body) in conns.into_iter().zip(bodies) {
            tasks.spawn(async move {
                tokio::time::sleep_until(begin.into()).await;
                let t = Instant::now();
                let r = client.call(body).await.expect("run.start");
                let rt = t.elapsed();
                let run_id = r.body["run_id"].as_str().expect("run_id").to_owned();
                (run_id, rt)
            });
        }
        let mut starts = Vec::with_capacity(BURST);
        while let Some(done) = tasks.join_next().await {
            starts.push(done.expect("start task"));
        }
        (begin, starts)
    });
    drop(runtime);
    let (done, events, mut sub) = watcher.join().expect("subscription watcher");
    host.wait_idle(&mut sub);
    let cpu_b = CpuSnapshot::take(host.pid());

    let mut per_run = Latencies::default();
    let mut start_rt = Latencies::default();
    let mut total = Duration::ZERO;
    let mut run_ids = Vec::with_capacity(BURST);
    for (run_id, rt) in starts {
        let (kind, at) = done
            .get(&run_id)
            .unwrap_or_else(|| panic!("no terminal event for run {run_id}"));
        assert_eq!(kind, "completed", "run {run_id}: {}", host.log());
        let d = at.saturating_duration_since(begin);
        total = total.max(d);
        per_run.push(d);
        start_rt.push(rt);
        run_ids.push(run_id);
    }
    host.check_runs(&run_ids, &chain_nodes(), result);
    Burst {
        runs: BURST,
        total,
        per_run,
        start_rt,
        bare,
        cpu: CpuUse::between(&cpu_a, &cpu_b),
        events,
    }
}

// ----- CPU ----------------------------------------------------------------------------------

/// CPU seconds (user + system) of the host, its store thread, its reaped children, and this
/// process, with the time they were read.
struct CpuSnapshot {
    at: Instant,
    /// Bytes the host passed to write-like calls (WAL, database, replies, child stdin).
    host_wchar: f64,
    host: f64,
    store: f64,
    children: f64,
    bench: f64,
}

impl CpuSnapshot {
    fn take(host_pid: u32) -> Self {
        let store = std::fs::read_dir(format!("/proc/{host_pid}/task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "piw-store")
                    })
                    .map(|t| cpu_secs(&t.path().join("stat")).0)
                    .sum()
            })
            .unwrap_or(f64::NAN);
        let (host, children) = cpu_secs(Path::new(&format!("/proc/{host_pid}/stat")));
        Self {
            at: Instant::now(),
            host_wchar: wchar(host_pid),
            host,
            store,
            children,
            bench: cpu_secs(Path::new("/proc/self/stat")).0,
        }
    }
}

/// Shares of one core between two snapshots.
struct CpuUse {
    wall: Duration,
    host_wchar: f64,
    host: f64,
    store: f64,
    children: f64,
    bench: f64,
}

impl CpuUse {
    fn between(a: &CpuSnapshot, b: &CpuSnapshot) -> Self {
        let wall = b.at - a.at;
        let w = wall.as_secs_f64();
        Self {
            wall,
            host_wchar: b.host_wchar - a.host_wchar,
            host: (b.host - a.host) / w,
            store: (b.store - a.store) / w,
            children: (b.children - a.children) / w,
            bench: (b.bench - a.bench) / w,
        }
    }
}

/// Bytes process `pid` passed to write-like syscalls (`/proc/pid/io`).
fn wchar(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(f64::NAN)
}

/// (utime + stime, cutime + cstime) of a `/proc/.../stat` file, in seconds (USER_HZ is 100 on
/// Linux). The second counts waited-for children only.
fn cpu_secs(stat: &Path) -> (f64, f64) {
    let Ok(s) = std::fs::read_to_string(stat) else {
        return (f64::NAN, f64::NAN);
    };
    // Fields after the parenthesised command name start at field 3 (state).
    let after = s.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (
        (ticks(11) + ticks(12)) / 100.0,
        (ticks(13) + ticks(14)) / 100.0,
    )
}

// ----- machine facts -----------------------------------------------------------------------

fn print_machine(dir: &Path, secs: f64, act_runs: usize) {
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
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    println!(
        "children: activation latency and transitions/s of piw-json-worker children vs floors"
    );
    println!("  cores: {cores} ({cpu}); kernel {kernel}");
    println!(
        "  sqlite {} (bench floor; the host links the same bundled build); hosts at their defaults: WAL, synchronous=FULL, {DEFAULT_SLOTS} child slots",
        rusqlite::version()
    );
    println!("  temp dir: {} ({})", dir.display(), file_system(dir));
    println!(
        "  load average at the start: {} (other work on this machine skews every figure)",
        load_average()
    );
    println!(
        "  {secs} s per bare-commit floor ({} s right before each burst); {act_runs} activation runs after {ACT_WARM_UP} warm-up; {SINGLE_REPS} single chain runs; {BURST}-run bursts",
        ADJACENT_FLOOR.as_secs_f64().min(secs)
    );
}

/// The first three fields of /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `stat -f` type plus the mount's type and options from /proc/mounts, as far as known.
fn file_system(dir: &Path) -> String {
    let statfs = Command::new("stat")
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
