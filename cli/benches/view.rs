//! The viewer on a large run: how long `piw view --once` takes to open a run with 10,000
//! events (and 10,000 attempts) and print its first frame, against the floor of starting the
//! `piw` process at all, and what the reads behind it cost.
//!
//! Prints figures; asserts only that the frame shows the run, never speed. The run is built
//! through the store's own lifecycle API (one node looping: every step is an attempt and an
//! event), in a temporary installation under `target/bench-tmp` with no host.
//!
//! Run: `cargo bench -p piw-cli --bench view` (a release build of the bench and of `piw`).
//!
//! Environment: `PIW_BENCH_EVENTS` (default 10,000), `PIW_BENCH_DIR` (see `support`).

mod support;

use piw_host::store::prelude::*;
use std::process::Command;
use std::time::Instant;

use piw_host::paths::PiwPaths;
use piw_host::store::{
    AttemptOutcome, ExecutionMode, NewRun, RunFilter, Store, StoreConfig, TransitionRequest,
};
use serde_json::json;
use support::{BenchDir, Latencies};

const SAMPLES: usize = 20;

fn main() {
    let events: u64 = std::env::var("PIW_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let dir = BenchDir::create("view-");
    support::print_machine(
        "piw view on a large run",
        "no host (the viewer reads the database read-only)",
        dir.path(),
    );
    let paths = PiwPaths::for_home(dir.path().join("home"));
    std::fs::create_dir_all(&paths.home).unwrap();

    // The run: node `a` loops on itself until the last step, then completes.
    let built = Instant::now();
    let run_id = {
        let mut store = Store::open(&paths.db, StoreConfig::default()).unwrap();
        let graph = json!({
            "name": "spin", "start": "a", "max_steps": 10000,
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
            "edges": [{"from": "a", "switch": {"on": "$.more", "cases": {"false": "b"},
                       "default": "a"}}]
        });
        let run_id = store
            .write(|w| {
                w.start_run(&NewRun {
                    workflow_name: "spin".into(),
                    source_root: "/tmp/spin.workflow.json".into(),
                    source_hash: "abc".into(),
                    mounted_sources: json!({}),
                    definition: Some(graph),
                    input: json!({}),
                    origin_session: Some("bench".into()),
                    execution_mode: ExecutionMode::Interactive,
                    project_dir: "/tmp".into(),
                })
            })
            .unwrap();
        let act = store.write(|w| w.activate(&run_id, "bench")).unwrap();
        let mut attempt = store
            .write(|w| w.node_started(&act.claim, "a", None))
            .unwrap();
        // started, activated, definition (none: given at start), node_started: 3 so far.
        let steps = events.saturating_sub(4);
        // Many steps per transaction, so building the run takes seconds, not minutes.
        for chunk in 0..steps.div_ceil(500) {
            let n = (steps - chunk * 500).min(500);
            attempt = store
                .write(|w| {
                    let mut attempt = attempt.clone();
                    for i in 0..n {
                        let last = chunk * 500 + i + 1 == steps;
                        attempt = w
                            .transition(
                                &act.claim,
                                &TransitionRequest {
                                    attempt_id: attempt,
                                    outcome: AttemptOutcome::Succeeded {
                                        output: json!({"more": !last, "i": i}),
                                    },
                                    next_node: if last { "b".into() } else { "a".into() },
                                    next_deadline_at: None,
                                },
                            )?
                            .next_attempt_id;
                    }
                    Ok(attempt)
                })
                .unwrap();
        }
        store
            .write(|w| w.complete(&act.claim, &attempt, &json!({}), &json!({"done": true})))
            .unwrap();
        run_id
    };
    let store = Store::open_read_only(&paths.db, StoreConfig::default()).unwrap();
    let revision = store.run(&run_id).unwrap().revision;
    println!(
        "  the run: {revision} events, {} attempts (built in {:.1} s)",
        store.attempt_count_for_bench(&run_id),
        built.elapsed().as_secs_f64()
    );

    let piw = env!("CARGO_BIN_EXE_piw");
    let time_process = |args: &[&str]| {
        let mut lat = Latencies::default();
        let mut last = String::new();
        for _ in 0..SAMPLES + 2 {
            let t = Instant::now();
            let out = Command::new(piw)
                .args(args)
                .env("PIW_HOME", &paths.home)
                .env("PIW_LOG", "warn")
                .output()
                .unwrap();
            lat.push(t.elapsed());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            last = String::from_utf8_lossy(&out.stdout).into_owned();
        }
        // The first two warm the page cache.
        lat.0.drain(..2);
        (lat, last)
    };
    let (floor, _) = time_process(&["--version"]);
    let (frame, text) = time_process(&["view", "--once", &run_id]);
    assert!(text.contains("COMPLETED · spin"), "{text}");
    assert!(text.contains(&format!("#{revision}")), "{text}");
    let (list, _) = time_process(&["view", "--once"]);
    let (graph, _) = time_process(&["run", "graph", &run_id]);
    let ms = |l: &Latencies, q: f64| l.p(q) / 1000.0;
    println!("\n  process wall time, {SAMPLES} runs each (p50 / p90 / max, ms):");
    for (name, l) in [
        ("floor: piw --version", &floor),
        ("piw view --once <run> (first frame)", &frame),
        ("piw view --once (run list)", &list),
        ("piw run graph <run>", &graph),
    ] {
        println!(
            "    {name:<38} {:>7.2} {:>7.2} {:>7.2}",
            ms(l, 0.5),
            ms(l, 0.9),
            ms(l, 1.0)
        );
    }

    // The reads behind the first frame, in this process (p50 of 20, ms).
    let time = |f: &dyn Fn()| {
        let mut l = Latencies::default();
        for _ in 0..SAMPLES {
            let t = Instant::now();
            f();
            l.push(t.elapsed());
        }
        ms(&l, 0.5)
    };
    println!("\n  reads (p50 of {SAMPLES}, ms):");
    let reads: [(&str, &dyn Fn()); 7] = [
        ("open read-only (schema check included)", &|| {
            Store::open_read_only(&paths.db, StoreConfig::default()).unwrap();
        }),
        ("runs_page (200)", &|| {
            store.runs_page(&RunFilter::default(), None, 200).unwrap();
        }),
        ("run + definition", &|| {
            store.run(&run_id).unwrap();
            store.run_definition(&run_id).unwrap();
        }),
        ("node_activity (over every attempt)", &|| {
            store.node_activity(&run_id).unwrap();
        }),
        ("events_page (the newest 100)", &|| {
            store.events_page(&run_id, None, 100).unwrap();
        }),
        ("for comparison: every event (Store::events)", &|| {
            store.events(&run_id, 0).unwrap();
        }),
        ("attempt_history (the first step back)", &|| {
            store.attempt_history(&run_id).unwrap();
        }),
    ];
    for (name, f) in reads {
        println!("    {name:<44} {:>8.3}", time(f));
    }
    drop(store);
    dir.close();
}

/// How many attempts the run has (through the paged read, which also counts them).
trait AttemptCount {
    fn attempt_count_for_bench(&self, run_id: &str) -> u64;
}

impl AttemptCount for Store {
    fn attempt_count_for_bench(&self, run_id: &str) -> u64 {
        self.attempts_page(run_id, None, 1).unwrap().1
    }
}
