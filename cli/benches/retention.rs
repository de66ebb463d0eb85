//! Retention at scale: an installation with 10,000 and 100,000 finished runs, its size and
//! the time of `piw runs`, `piw run status <id>` and `piw view --once`, before and after
//! `run.prune` down to the newest 1,000; and what each prune batch cost (the longest time
//! the host served nothing else).
//!
//! Prints figures; asserts only that the prune removed what it should, never speed. The runs
//! are written through the store's own lifecycle API (many runs per transaction), each as a
//! short real run leaves it: a `run.start` receipt, activation, two attempts, a progress
//! update, a child record with a small log file, completion with its terminal message.
//!
//! Run: `cargo bench -p piw-cli --bench retention` (a release build of the bench and `piw`).
//!
//! Environment: `PIW_BENCH_RUNS` (default `10000,100000`), `PIW_BENCH_KEEP` (1000),
//! `PIW_BENCH_DIR` (see `support`).

mod support;

use piw_host::store::prelude::*;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use piw_host::clock::FakeClock;
use piw_host::protocol::{payload, RequestBody};
use piw_host::store::{
    AttemptOutcome, ChildMode, CommandMeta, ExecutionMode, NewRun, Store, StoreConfig,
    TransitionRequest,
};
use serde_json::json;
use support::{BenchDir, Host, Latencies};

const SAMPLES: usize = 10;
/// Runs written per transaction while building.
const BUILD_CHUNK: usize = 500;

fn main() {
    let sizes: Vec<usize> = std::env::var("PIW_BENCH_RUNS")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let keep: u64 = std::env::var("PIW_BENCH_KEEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let dir = BenchDir::create("retention-");
    support::print_machine(
        "retention: an installation with many finished runs, before and after a prune",
        "one host (release build)",
        dir.path(),
    );
    for n in sizes {
        bench_size(dir.path(), n, keep);
    }
    dir.close();
}

fn bench_size(dir: &Path, n: usize, keep: u64) {
    let name = format!("runs-{n}");
    let home = dir.join(&name);
    let paths = piw_host::paths::PiwPaths::for_home(home.clone());
    paths.ensure_dirs().unwrap();
    let built = Instant::now();
    let newest = build(&paths, n);
    println!(
        "\n== {n} finished runs (built in {:.1} s)",
        built.elapsed().as_secs_f64()
    );
    store_level(dir, &paths, keep);
    let mut host = Host::start(
        dir,
        &name,
        Duration::from_secs(600),
        Duration::from_secs(60),
        |_, _| {},
    );
    let before = measure(&paths.home, &newest);

    // The prune, a batch per request as `piw runs prune` sends them.
    let mut client = host.client();
    let mut batches = Latencies::default();
    let mut removed = 0usize;
    let started = Instant::now();
    loop {
        let t = Instant::now();
        let r = client
            .call(RequestBody::RunPrune(payload::RunPrune {
                keep: Some(keep),
                ..Default::default()
            }))
            .unwrap();
        batches.push(t.elapsed());
        let got = r.body["removed"].as_array().map_or(0, Vec::len);
        removed += got;
        if r.body["more"] != true || got == 0 {
            break;
        }
    }
    let total = started.elapsed();
    assert_eq!(removed as u64, n as u64 - keep.min(n as u64));
    drop(client);
    // The size once the WAL's pages are back in the file (the host checkpoints as it goes;
    // a stop checkpoints the rest).
    host.stop();
    let mut host = Host::start(
        dir,
        &name,
        Duration::from_secs(600),
        Duration::from_secs(60),
        |_, _| {},
    );
    let after = measure(&paths.home, &newest);
    println!(
        "  prune to the newest {keep}: {removed} runs in {} batches, {:.2} s in all; \
         per batch (the host's longest pause) p50 {:.0} ms, max {:.0} ms",
        batches.len(),
        total.as_secs_f64(),
        batches.p(0.5) / 1000.0,
        batches.p(1.0) / 1000.0
    );
    println!("  {:<34} {:>14} {:>14}", "", "before", "after");
    println!(
        "  {:<34} {:>11.1} MB {:>11.1} MB",
        "size of $PIW_HOME",
        before.bytes as f64 / 1e6,
        after.bytes as f64 / 1e6
    );
    println!(
        "  {:<34} {:>11.1} MB {:>11.1} MB",
        "  of which state.sqlite (+ -wal)",
        before.db_bytes as f64 / 1e6,
        after.db_bytes as f64 / 1e6
    );
    for (i, what) in [
        "piw runs (p50 ms)",
        "piw run status <id> (p50 ms)",
        "piw view --once (p50 ms)",
    ]
    .iter()
    .enumerate()
    {
        println!(
            "  {:<34} {:>14.1} {:>14.1}",
            what, before.times[i], after.times[i]
        );
    }
    host.stop();
    let _ = std::fs::remove_dir_all(&home);
}

/// One batch of the prune in this process, on a copy of the database: the removal and the
/// page reclaim apart.
fn store_level(dir: &Path, paths: &piw_host::paths::PiwPaths, keep: u64) {
    let copy = dir.join("copy.sqlite");
    std::fs::copy(&paths.db, &copy).unwrap();
    let mut store = Store::open(&copy, StoreConfig::default()).unwrap();
    let selector = piw_host::store::PruneSelector {
        keep: Some(keep),
        ..Default::default()
    };
    let t = Instant::now();
    let page = store.prunable_runs(&selector, None, 500).unwrap();
    let select = t.elapsed();
    let ids: Vec<String> = page.runs.into_iter().map(|k| k.run_id).collect();
    let t = Instant::now();
    let removed = store.prune_runs(store.now_ms(), &ids).unwrap();
    let remove = t.elapsed();
    let free = store.free_pages().unwrap();
    let t = Instant::now();
    store.write(|w| w.reclaim_free_pages(u32::MAX)).unwrap();
    let reclaim = t.elapsed();
    println!(
        "  one batch in-process: select {:.1} ms, remove {} runs {:.1} ms, give back {free} pages {:.1} ms",
        select.as_secs_f64() * 1e3,
        removed.len(),
        remove.as_secs_f64() * 1e3,
        reclaim.as_secs_f64() * 1e3
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("copy.sqlite{suffix}")));
    }
}

/// Writes `n` finished runs, a minute apart, the newest a minute ago; returns the newest.
fn build(paths: &piw_host::paths::PiwPaths, n: usize) -> String {
    let now = piw_host::clock::Clock::now_ms(&piw_host::clock::SystemClock);
    let clock = FakeClock::new(now - 60_000 * n as i64);
    let config = StoreConfig {
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    };
    let mut store = Store::open(&paths.db, config).unwrap();
    let epoch = store.write(|w| w.begin_host_epoch(1)).unwrap();
    store.write(|w| w.end_host_epoch(epoch)).unwrap();
    let mut newest = String::new();
    let mut written = 0;
    while written < n {
        let chunk = BUILD_CHUNK.min(n - written);
        let ids = store
            .write(|w| {
                let mut ids = Vec::with_capacity(chunk);
                for i in 0..chunk {
                    ids.push(one_run(w, epoch, written + i)?);
                }
                Ok(ids)
            })
            .unwrap();
        for run_id in &ids {
            let dir = paths.logs.join(run_id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("1.log"), "hello from a bench child\n").unwrap();
        }
        newest = ids.last().cloned().unwrap_or_default();
        written += chunk;
        clock.advance(60_000 * chunk as i64);
    }
    newest
}

fn one_run(
    w: &mut piw_host::store::WriteTx<'_>,
    epoch: i64,
    i: usize,
) -> piw_host::store::StoreResult<String> {
    let meta = CommandMeta {
        request_id: format!("bench-start-{i}"),
        idempotency_key: None,
        fingerprint: "fp".into(),
        kind: "run.start".into(),
        run_id: None,
    };
    let new = NewRun {
        workflow_name: "bench".into(),
        source_root: "/tmp/bench.workflow.mjs".into(),
        source_hash: "abc".into(),
        mounted_sources: json!({}),
        definition: None,
        input: json!({"i": i}),
        origin_session: Some("bench-session".into()),
        execution_mode: ExecutionMode::Interactive,
        project_dir: "/tmp".into(),
    };
    let outcome = w.command(&meta, |w| Ok(json!({"run_id": w.start_run(&new)?})))?;
    let run_id = outcome.response["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let act = w.activate(&run_id, "bench")?;
    w.record_child_launch(&run_id, act.claim.generation, epoch, ChildMode::Run)?;
    let first = w.node_started(&act.claim, "a", None)?;
    w.progress(
        &act.claim,
        "working",
        &json!({"type": "phase", "key": "k", "data": {"done": 1}}),
    )?;
    let second = w
        .transition(
            &act.claim,
            &TransitionRequest {
                attempt_id: first,
                outcome: AttemptOutcome::Succeeded {
                    output: json!({"step": 1, "text": "an output of a few dozen bytes"}),
                },
                next_node: "b".into(),
                next_deadline_at: None,
            },
        )?
        .next_attempt_id;
    w.complete(
        &act.claim,
        &second,
        &json!({"step": 2}),
        &json!({"done": i}),
    )?;
    Ok(run_id)
}

struct Figures {
    bytes: u64,
    db_bytes: u64,
    /// p50 ms of `piw runs`, `piw run status <id>`, `piw view --once`.
    times: [f64; 3],
}

fn measure(home: &Path, run_id: &str) -> Figures {
    let piw = env!("CARGO_BIN_EXE_piw");
    let time = |args: &[&str]| {
        let mut lat = Latencies::default();
        for _ in 0..SAMPLES + 2 {
            let t = Instant::now();
            let out = Command::new(piw)
                .args(args)
                .env("PIW_HOME", home)
                .env("PIW_LOG", "warn")
                .output()
                .unwrap();
            lat.push(t.elapsed());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The first two warm the page cache.
        lat.0.drain(..2);
        lat.p(0.5) / 1000.0
    };
    let times = [
        time(&["runs"]),
        time(&["run", "status", run_id]),
        time(&["view", "--once"]),
    ];
    let db = home.join("state.sqlite");
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    Figures {
        bytes: tree_size(home),
        db_bytes: len(&db) + len(Path::new(&wal)),
        times,
    }
}

/// Bytes of every file under `dir` (apparent sizes, plus 4 KiB per directory).
fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += 4096 + tree_size(&entry.path());
        } else {
            total += meta.len();
        }
    }
    total
}
