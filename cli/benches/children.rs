//! Children: activation latency and node transitions per second of real `piw-json-worker`
//! children under a real `piw host serve`, against floors measured in the same run.
//!
//! Prints figures and ratios; asserts only correctness (every run ends `completed` with its
//! last node's output, the expected attempts, and a clean `diagnose`), never speed. Every
//! host is a real `piw host serve` process at its defaults (WAL, each commit fsynced before
//! anything about it is sent, default child slots) with `PIW_RUNTIMES=.workflow.json=<piw-json-worker>`, `PIW_LOG=warn` and
//! `PIW_HOME` in one temporary directory under `target/bench-tmp` (same file system as the
//! repository), removed at the end.
//!
//! Run: `cargo bench -p piw-cli --bench children`
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
//!    hook, which makes std fork as the host's rlimit hook does; (d) the same with 64
//!    workers spawned at once, to the last hello (5 rounds, median), and their CPU: what the
//!    processes alone cost a 64-run burst, before any host work or workflow step. The report
//!    sets it against the time the 3x target leaves the batched burst;
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

mod support;

use piw_host::store::prelude::*;
use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use piw_host::client::{BlockingClient, Client};
use piw_host::ids::new_id;
use piw_host::protocol::{payload, read_frame, Limits, Request, RequestBody};
use piw_host::worker::{hash_file, LaunchEnvelope, LAUNCH_SCHEMA};
use serde_json::{json, Value};
use support::{cpu_secs, BenchDir, Commits, CpuSnapshot, CpuUse, Host, Latencies, SqliteFloor};

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
/// Rounds of the `BURST` workers started at once without a host (the median is reported).
const BURST_FLOOR_ROUNDS: usize = 5;
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
/// The `data` of the bare-commit floor's rows: an event body like the ones a transition writes.
const FLOOR_EVENT: &str = r#"{"kind":"transitioned","next":"n02"}"#;

fn main() {
    let secs = support::bench_secs(2.0);
    let act_runs: usize = std::env::var("PIW_BENCH_ACT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ACT_RUNS_DEFAULT)
        .max(ACT_RUNS_MIN);
    let measure_for = Duration::from_secs_f64(secs);
    let warm_up = support::warm_up_for(secs);

    let dir = BenchDir::create("children-");

    support::print_machine(
        "children: activation latency and transitions/s of piw-json-worker children vs floors",
        &format!("hosts at their defaults: WAL, every commit fsynced (by the syncer thread) before anything about it is sent, {DEFAULT_SLOTS} child slots"),
        dir.path(),
    );
    println!(
        "  {secs} s per bare-commit floor ({} s right before each burst); {act_runs} activation runs after {ACT_WARM_UP} warm-up; {SINGLE_REPS} single chain runs; {BURST}-run bursts",
        ADJACENT_FLOOR.as_secs_f64().min(secs)
    );

    let one = write_fixture(dir.path(), "one", &one_node_fixture());
    let chain = write_fixture(dir.path(), "chain", &chain_fixture(CHAIN, false));
    let batched = write_fixture(dir.path(), "batched", &chain_fixture(CHAIN, true));
    let chain_result = chain_output(CHAIN);

    // 1. Floors.
    let fork = fork_exec_floor();
    let mut floor = SqliteFloor::open(&dir.path().join("floor.sqlite"), FLOOR_EVENT);
    let commit_start = floor.measure(warm_up, measure_for);
    let (worker, worker_forked, burst_floor) = {
        let hello_floor = HelloFloor::open(dir.path(), &one);
        let (worker, forked) = hello_floor.one_at_a_time();
        (worker, forked, hello_floor.burst(BURST_FLOOR_ROUNDS))
    };

    // 2. Activation latency.
    let act = {
        let mut host = start_host(dir.path(), "act", &[]);
        let act = activation(&host, &one, act_runs);
        host.diagnose_clean();
        host.stop();
        act
    };

    // 3. Transitions: one run at a time, then 64 at once (default slots); then 64 at once
    //    with a slot per run.
    let (single, narrow) = {
        let mut host = start_host(dir.path(), "tp", &[]);
        let single = single_runs(&host, &chain, &chain_result);
        let adjacent = floor.measure(warm_up, ADJACENT_FLOOR.min(measure_for));
        let burst = burst(&host, &chain, &chain_result, "burst", adjacent);
        host.diagnose_clean();
        host.stop();
        (single, burst)
    };
    let wide = {
        let slots = WIDE_SLOTS.to_string();
        let mut host = start_host(dir.path(), "wide", &[("PIW_MAX_CHILDREN", &slots)]);
        let adjacent = floor.measure(warm_up, ADJACENT_FLOOR.min(measure_for));
        let burst = burst(&host, &chain, &chain_result, "burst-wide", adjacent);
        host.diagnose_clean();
        host.stop();
        burst
    };
    // The same chain with consecutive compute steps reported together (`batch_compute`).
    let (single_batched, batched_burst) = {
        let mut host = start_host(dir.path(), "batched", &[]);
        let single = single_runs(&host, &batched, &chain_result);
        let adjacent = floor.measure(warm_up, ADJACENT_FLOOR.min(measure_for));
        let burst = burst(&host, &batched, &chain_result, "burst-batched", adjacent);
        host.diagnose_clean();
        host.stop();
        (single, burst)
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
        "c: the same, forked (pre-exec hook, as the host does with CPU or memory limits)",
        &worker_forked,
        1e6 / worker_forked.mean(),
    );
    println!("  c: the host's spawn options (own group, cleared env, envelope on stdin); the worker reads the envelope, hashes and parses the fixture, connects and sends hello; no host involved");
    println!(
        "d: {BURST} workers spawned at once -> the last hello: median {:.1} ms of {BURST_FLOOR_ROUNDS} rounds ({} ms); their CPU until they exited: median {:.0} ms ({:.2} ms each)",
        ms(burst_floor.last_hello.p(0.50)),
        burst_floor.last_hello.list_ms(),
        ms(burst_floor.cpu.p(0.50)),
        ms(burst_floor.cpu.p(0.50)) / BURST as f64,
    );
    println!("  d: as c, {BURST} at once (the host's burst with a slot per run): what the processes alone cost a burst under the one-process-per-run rule, before any host work or workflow step");

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
    // The host starts an unlimited child with posix_spawn: the un-hooked spawn is its model.
    // The activation commits with the run.start (its child starts during that commit), so the
    // sum below assumes no overlap: an upper bound.
    let model = act.reply.p(0.50) + worker.p(0.50) + commit_p50;
    println!(
        "  ÷ fork+exec: p50 ÷ the fork+exec p50 ({:.3} ms)",
        ms(fork.p(0.50))
    );
    println!(
        "  model of the p50 path (no overlap): run.start receipt {:.2} (its commit also activates the run; the child starts during it) + worker spawn->hello {:.2} + 1 commit {:.2} (worker.hello, which opens the first attempt) = {:.2} ms; measured {:.2} ms",
        ms(act.reply.p(0.50)),
        ms(worker.p(0.50)),
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
    let batched_ms = ms(single_batched.median_us());
    println!(
        "{:<44} {:>5} {:>10.1} {:>9.0} {:>12} {:>10}",
        format!("one run, steps batched, median of {SINGLE_REPS}"),
        1,
        batched_ms,
        CHAIN as f64 / (batched_ms / 1000.0),
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
        (
            format!("{BURST} at once, default slots, steps batched"),
            &batched_burst,
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
    for (label, b) in [
        ("default slots", &narrow),
        ("64 slots", &wide),
        ("steps batched", &batched_burst),
    ] {
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
            support::cores(),
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
        "  target: {BURST} runs >= {TARGET_SPEEDUP_64:.1}x faster than the sequential baseline: {:.2}x with default slots ({}); {:.2}x with {WIDE_SLOTS} slots ({}); {:.2}x with steps batched ({})",
        narrow.speedup(),
        verdict(narrow.speedup()),
        wide.speedup(),
        verdict(wide.speedup()),
        batched_burst.speedup(),
        verdict(batched_burst.speedup())
    );
    let target_ms = ms(batched_burst.baseline_us()) / TARGET_SPEEDUP_64;
    println!(
        "  the target's time for the steps-batched burst is {target_ms:.1} ms (its baseline / {TARGET_SPEEDUP_64:.0}); floor d alone, {BURST} workers started to their hellos with no host, took {:.1} ms = {:.0}% of it",
        ms(burst_floor.last_hello.p(0.50)),
        100.0 * ms(burst_floor.last_hello.p(0.50)) / target_ms
    );
    println!("  steps batched: the worker reports consecutive compute steps in one message (`earlier` steps of worker.transition / worker.complete), one commit for up to 64 nodes; the baseline stays one commit per node");
    println!("  checked: every run completed with the last node's output and {CHAIN} succeeded attempts in order; diagnose clean on every host");
    println!("  load average at the end: {}", support::load_average());

    drop(floor);
    dir.close();
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

/// `n01 → n02 → … → nNN`, each node returning `{"step": i}` (the last one `chain_output`);
/// `batched` lets the worker report consecutive steps together.
fn chain_fixture(n: usize, batched: bool) -> Value {
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
        "behaviors": behaviors,
        "batch_compute": batched
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

// ----- floor c: worker start-up without a host ----------------------------------------------

/// A socket that stands in for the host: it reads each worker's `worker.hello` frame, notes
/// when it arrived, and closes the connection (the worker then stops quietly). Workers are
/// spawned like the host spawns them (own process group, cleared environment but
/// `PATH`/`HOME`/`LANG`/`TMPDIR`, envelope on stdin, piped output).
struct HelloFloor {
    socket: std::path::PathBuf,
    hellos: mpsc::Receiver<Instant>,
    envelope: Vec<u8>,
    fixture: String,
    dir: std::path::PathBuf,
}

impl HelloFloor {
    fn open(dir: &Path, fixture: &str) -> Self {
        let socket = dir.join("worker-floor.sock");
        let listener = UnixListener::bind(&socket).expect("bind worker floor socket");
        let (tx, hellos) = mpsc::channel::<Instant>();
        // One acceptor for every round; it ends when the floor is dropped.
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
        Self {
            socket,
            hellos,
            envelope: serde_json::to_vec(&envelope).expect("envelope json"),
            fixture: fixture.to_owned(),
            dir: dir.to_owned(),
        }
    }

    /// Spawns one worker and hands it the envelope. `fork`: with a (no-op) pre-exec hook, which
    /// makes std fork + exec instead of `posix_spawn` (vfork), as the host's rlimit hook does.
    fn spawn(&self, fork: bool) -> std::process::Child {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_piw-json-worker"));
        cmd.arg(&self.fixture)
            .env_clear()
            .current_dir(&self.dir)
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
        let mut child = cmd.spawn().expect("spawn piw-json-worker");
        let mut stdin = child.stdin.take().expect("worker stdin");
        stdin.write_all(&self.envelope).expect("write envelope");
        child
    }

    /// The next hello's arrival; panics with the worker's stderr if none comes.
    fn hello(&self, child: &mut std::process::Child) -> Instant {
        match self.hellos.recv_timeout(Duration::from_secs(10)) {
            Ok(at) => at,
            Err(_) => {
                let _ = child.kill();
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
                }
                panic!("piw-json-worker never said hello to the floor socket: {stderr}");
            }
        }
    }

    /// Waits for a worker that said hello; it must stop quietly once the socket closed.
    fn reap(child: std::process::Child) {
        let out = child.wait_with_output().expect("wait piw-json-worker");
        assert!(
            out.status.success(),
            "piw-json-worker should stop quietly when the socket closes: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Times spawn → hello one worker at a time; returns the rounds without and with a
    /// pre-exec hook (alternating).
    fn one_at_a_time(&self) -> (Latencies, Latencies) {
        let mut spawned = Latencies::default();
        let mut forked = Latencies::default();
        for i in 0..2 * (WORKER_WARM_UP + WORKER_RUNS) {
            let fork = i % 2 == 1;
            let t = Instant::now();
            let mut child = self.spawn(fork);
            let hello_at = self.hello(&mut child);
            Self::reap(child);
            if i >= 2 * WORKER_WARM_UP {
                if fork {
                    forked.push(hello_at - t);
                } else {
                    spawned.push(hello_at - t);
                }
            }
        }
        (spawned, forked)
    }

    /// `BURST` workers spawned at once (as the host does with a slot per run): the time from
    /// the first spawn to the last hello, and the CPU the workers used until they exited.
    /// This is what the processes alone cost a burst under the one-process-per-run rule,
    /// before any host work and any workflow step. Median of `rounds`.
    fn burst(&self, rounds: usize) -> BurstFloor {
        let mut last_hello = Latencies::default();
        let mut cpu = Latencies::default();
        for _ in 0..rounds {
            let cpu_before = cpu_secs(Path::new("/proc/self/stat")).1;
            let t = Instant::now();
            let mut children: Vec<_> = (0..BURST).map(|_| self.spawn(false)).collect();
            let mut last = t;
            for child in &mut children {
                last = last.max(self.hello(child));
            }
            for child in children {
                Self::reap(child);
            }
            last_hello.push(last - t);
            let cpu_after = cpu_secs(Path::new("/proc/self/stat")).1;
            cpu.push(Duration::from_secs_f64(cpu_after - cpu_before));
        }
        BurstFloor { last_hello, cpu }
    }
}

impl Drop for HelloFloor {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `BURST` workers started at once without a host (see [`HelloFloor::burst`]).
struct BurstFloor {
    /// First spawn → last hello, per round.
    last_hello: Latencies,
    /// The workers' CPU (user + system, reaped; 10 ms ticks) per round.
    cpu: Latencies,
}

// ----- a real host --------------------------------------------------------------------------

/// Starts a host (see `Host::start`) with the JSON worker as the runtime of `.workflow.json`
/// and `extra` variables.
fn start_host(dir: &Path, name: &str, extra: &[(&str, &str)]) -> Host {
    Host::start(
        dir,
        name,
        Duration::from_secs(60),
        Duration::from_secs(15),
        |_, cmd| {
            cmd.env(
                "PIW_RUNTIMES",
                format!(".workflow.json={}", env!("CARGO_BIN_EXE_piw-json-worker")),
            );
            for (k, v) in extra {
                cmd.env(k, v);
            }
        },
    )
}

/// What this bench asks of a host beyond starting and stopping it.
trait BenchHost {
    fn start_body(&self, workflow: &str, session: &str) -> RequestBody;
    fn subscribe_session(&self, c: &mut BlockingClient, session: &str);
    fn status(&self, c: &mut BlockingClient, run_id: &str) -> Value;
    /// Waits (outside any timing) until the host has no child left.
    fn wait_idle(&self, c: &mut BlockingClient);
    /// Every run `completed` with `result` and one succeeded attempt per node, in order.
    fn check_runs(&self, run_ids: &[String], nodes: &[String], result: &Value);
    fn diagnose_clean(&self);
}

impl BenchHost for Host {
    fn start_body(&self, workflow: &str, session: &str) -> RequestBody {
        RequestBody::RunStart(payload::RunStart {
            workflow_file: workflow.to_owned(),
            input: json!({}),
            session_id: Some(session.to_owned()),
            execution_mode: None,
            project_dir: Some(self.dir.display().to_string()),
        })
    }

    fn subscribe_session(&self, c: &mut BlockingClient, session: &str) {
        c.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: None,
            session_id: Some(session.to_owned()),
            all: None,
        }))
        .expect("subscribe");
    }

    fn status(&self, c: &mut BlockingClient, run_id: &str) -> Value {
        c.send(
            Request::new(new_id("status"), RequestBody::RunStatus(Default::default()))
                .with_run_id(run_id),
        )
        .expect("run.status")
        .body
    }

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
            // Attempt statuses in the words clients see (`ok` where the store says `succeeded`).
            // Newest first, as `run.status` lists attempts.
            let expected: Vec<(String, String)> = nodes
                .iter()
                .rev()
                .map(|n| (n.clone(), "ok".to_owned()))
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
    "run.start tx -> activation tx (same tx)",
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
    let store = piw_host::store::Store::open_read_only(db, Default::default())
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
