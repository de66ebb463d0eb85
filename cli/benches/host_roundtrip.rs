//! Host round trip: client → host → commit → receipt, against floors measured in the same run.
//!
//! Prints figures and ratios; asserts nothing about speed (it does check that every command
//! was applied exactly once). Every host is a real `piw host serve` process at its defaults
//! (WAL; every commit fsynced before anything about it is sent, by the syncer thread or the idle
//! store thread) with `PIW_HOME` in one temporary directory under
//! `target/bench-tmp` (same file system as the repository), removed at the end.
//!
//! Run: `cargo bench -p piw-cli --bench host_roundtrip`
//!
//! Environment:
//! - `PIW_BENCH_SECS`: seconds per throughput measurement and per SQLite floor (default 3);
//! - `PIW_BENCH_DIR`: parent of the temporary directory (default `<workspace>/target/bench-tmp`).
//!
//! Measurements:
//! 1. floors: (a) a raw Unix socket echo (4-byte length + 100-byte body), 5,000 round trips;
//!    (b) a bare SQLite commit (`BEGIN IMMEDIATE; UPDATE; INSERT; COMMIT`, WAL, FULL),
//!    measured before and after the host measurements and for 1 s right before each
//!    throughput level (the ratio uses that adjacent floor: fsync cost drifts);
//! 2. round trip with one `BlockingClient`: `host.status` and `run.status` (while the run waits
//!    on its checkpoint, and again once it is paused), and alternating `run.pause` / `run.resume` on one
//!    run, 1,000 each after 100 warm-up calls (one host);
//! 3. throughput of alternating pause/resume with 1, 8 and 64 concurrent clients, each on its
//!    own connection and its own run (one host per level; async `Client`s on one
//!    current-thread tokio runtime, so the client side uses at most one core), with the
//!    CPU of the host, its store thread and the bench, the bytes the host writes per command,
//!    and the host's CPU while idle with the level's runs waiting.
//!
//! The benchmarked runs park at once on a checkpoint (a `.workflow.json` run by the default
//! `piw-json-worker`), so they sit `waiting`, held by nobody, where pause and resume are plain
//! control commands.

mod support;

use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use piw_host::client::{BlockingClient, Client};
use piw_host::ids::new_id;
use piw_host::protocol::{payload, Receipt, Request, RequestBody};
use serde_json::json;
use support::{BenchDir, CpuSnapshot, Host, Latencies, SqliteFloor};

const ECHO_WARM_UP: usize = 500;
const ECHO_ROUNDS: usize = 5_000;
const ECHO_BODY: usize = 100;
const RT_WARM_UP: usize = 100;
const RT_ROUNDS: usize = 1_000;
const CONCURRENCY: [usize; 3] = [1, 8, 64];
/// How long the bare-commit floor runs right before each throughput level (at most
/// `PIW_BENCH_SECS`).
const ADJACENT_FLOOR: Duration = Duration::from_secs(1);
/// How long the host's CPU is sampled while idle with waiting runs.
const IDLE_SAMPLE: Duration = Duration::from_millis(500);
/// The target: with 64 clients, at least this many times the bare single-writer commit rate.
const TARGET_RATIO_64: f64 = 4.0;
/// The `data` of the bare-commit floor's rows: an event body like the ones a pause writes.
const FLOOR_EVENT: &str = r#"{"kind":"paused","paused":true}"#;

fn main() {
    let secs = support::bench_secs(3.0);
    let measure_for = Duration::from_secs_f64(secs);
    let warm_up = support::warm_up_for(secs);

    let dir = BenchDir::create("host_roundtrip-");

    support::print_machine(
        "host_roundtrip: piw host command round trip and throughput vs floors",
        "host at its defaults: WAL, every commit fsynced (by the syncer thread) before anything about it is sent",
        dir.path(),
    );
    println!(
        "  {secs} s per throughput level and per SQLite floor after warm-up; {RT_ROUNDS} round trips per command after {RT_WARM_UP} warm-up"
    );

    // 1. Floors.
    let echo = echo_floor(dir.path());
    let mut floor = SqliteFloor::open(&dir.path().join("floor.sqlite"), FLOOR_EVENT);
    let commit_before = floor.measure(warm_up, measure_for);

    // 2. Round trips with one blocking client.
    let rt = {
        let mut host = start_host(dir.path(), "rt");
        let rt = round_trips(&host);
        host.stop();
        rt
    };

    // 3. Throughput, one host per concurrency level, each right after its own bare-commit
    //    floor (the disk's fsync cost drifts on shared machines).
    let mut levels = Vec::new();
    let mut floor_rates = vec![commit_before.rate()];
    for clients in CONCURRENCY {
        let adjacent = floor.measure(warm_up, ADJACENT_FLOOR.min(measure_for));
        floor_rates.push(adjacent.rate());
        let mut host = start_host(dir.path(), &format!("tp{clients}"));
        let mut level = throughput(&host, clients, warm_up, measure_for);
        host.stop();
        level.bare_rate = adjacent.rate();
        levels.push(level);
    }

    let commit_after = floor.measure(warm_up, measure_for);
    floor_rates.push(commit_after.rate());
    let mean_bare_rate = floor_rates.iter().sum::<f64>() / floor_rates.len() as f64;

    // ----- report ------------------------------------------------------------------------
    println!();
    println!(
        "{:<44} {:>6} {:>9} {:>9} {:>9} {:>13}",
        "latency (one caller)", "n", "p50 µs", "p99 µs", "ops/s", "p50 > floor"
    );
    let floor_row = |name: &str, l: &Latencies, rate: f64| {
        println!(
            "{:<44} {:>6} {:>9.1} {:>9.1} {:>9.0} {:>13}",
            name,
            l.len(),
            l.p(0.50),
            l.p(0.99),
            rate,
            "-"
        );
    };
    floor_row(
        "floor a: unix socket echo (4+100 B)",
        &echo,
        1e6 / echo.mean(),
    );
    floor_row(
        "floor b: bare SQLite commit (start)",
        &commit_before.lat,
        commit_before.rate(),
    );
    floor_row(
        "floor b: bare SQLite commit (end)",
        &commit_after.lat,
        commit_after.rate(),
    );
    let rt_row = |name: &str, l: &Latencies, floor_us: f64| {
        println!(
            "{:<44} {:>6} {:>9.1} {:>9.1} {:>9.0} {:>13}",
            name,
            l.len(),
            l.p(0.50),
            l.p(0.99),
            1e6 / l.mean(),
            format!("{:+.1} µs", l.p(0.50) - floor_us)
        );
    };
    rt_row(
        "round trip: host.status (run waiting)",
        &rt.host_status,
        echo.p(0.5),
    );
    rt_row(
        "round trip: run.status (run waiting)",
        &rt.run_status,
        echo.p(0.5),
    );
    rt_row(
        "round trip: host.status (run paused)",
        &rt.host_status_paused,
        echo.p(0.5),
    );
    rt_row(
        "round trip: run.status (run paused)",
        &rt.run_status_paused,
        echo.p(0.5),
    );
    rt_row(
        "round trip: run.pause/resume (commit)",
        &rt.write,
        echo.p(0.5) + commit_before.lat.p(0.5),
    );
    println!("  p50 > floor: reads above the echo p50; the command above echo p50 + bare commit p50 (start floor, measured just before)");
    println!("  reads run twice: while the bench's one run waits on its checkpoint, then after it is paused");

    println!();
    println!(
        "{:<8} {:>11} {:>9} {:>9} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "clients",
        "commands/s",
        "p50 µs",
        "p99 µs",
        "bare c/s",
        "÷ bare",
        "host CPU",
        "store th",
        "bench CPU",
        "KiB/cmd",
        "idle CPU"
    );
    for l in &levels {
        println!(
            "{:<8} {:>11.0} {:>9.1} {:>9.1} {:>10.0} {:>7} {:>8.0}% {:>8.0}% {:>8.0}% {:>9.1} {:>8.0}%",
            l.clients,
            l.rate(),
            l.lat.p(0.50),
            l.lat.p(0.99),
            l.bare_rate,
            format!("{:.2}x", l.rate() / l.bare_rate),
            l.host_cpu * 100.0,
            l.store_cpu * 100.0,
            l.bench_cpu * 100.0,
            l.wchar_per_cmd / 1024.0,
            l.idle_cpu * 100.0,
        );
    }
    println!(
        "  bare c/s: bare single-writer commits/s measured just before the level ({} s); ÷ bare = commands/s ÷ that",
        ADJACENT_FLOOR.min(measure_for).as_secs_f64()
    );
    println!("  CPU: share of one core over the window (host process, its store thread, this bench process)");
    println!(
        "  KiB/cmd: bytes the host passed to write/pwrite per command (WAL, checkpoints, replies); the bare commit: {:.1} KiB/commit",
        commit_before.wchar_per_commit / 1024.0
    );
    println!(
        "  idle CPU: host CPU over {} ms with the level's runs waiting and no requests (an idle host should be ~0%)",
        IDLE_SAMPLE.as_millis()
    );
    if let Some(l) = levels.iter().find(|l| l.clients == 64) {
        let verdict = |ratio: f64| {
            if ratio >= TARGET_RATIO_64 {
                "met"
            } else {
                "NOT met"
            }
        };
        let adjacent = l.rate() / l.bare_rate;
        let mean = l.rate() / mean_bare_rate;
        println!(
            "  target: 64 clients >= {TARGET_RATIO_64:.1}x the bare single-writer commit rate: {adjacent:.2}x against the adjacent floor ({}); {mean:.2}x against the mean of all {} floor runs, {mean_bare_rate:.0} commits/s ({})",
            verdict(adjacent),
            floor_rates.len(),
            verdict(mean)
        );
    }
    println!("  load average at the end: {}", support::load_average());

    drop(floor);
    dir.close();
}

// ----- floor a: unix socket echo ------------------------------------------------------------

fn echo_floor(dir: &Path) -> Latencies {
    let path = dir.join("echo.sock");
    let listener = UnixListener::bind(&path).expect("bind echo socket");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept echo client");
        let mut buf = vec![0u8; 4 + 64 * 1024];
        loop {
            if s.read_exact(&mut buf[..4]).is_err() {
                return;
            }
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            s.read_exact(&mut buf[4..4 + len]).expect("echo body");
            s.write_all(&buf[..4 + len]).expect("echo reply");
        }
    });
    let mut c = UnixStream::connect(&path).expect("connect echo socket");
    let mut msg = (ECHO_BODY as u32).to_be_bytes().to_vec();
    msg.extend(std::iter::repeat_n(b'x', ECHO_BODY));
    let mut back = [0u8; 4 + ECHO_BODY];
    let mut lat = Latencies::default();
    for i in 0..ECHO_WARM_UP + ECHO_ROUNDS {
        let t = Instant::now();
        c.write_all(&msg).expect("echo send");
        c.read_exact(&mut back[..4]).expect("echo len");
        let len = u32::from_be_bytes(back[..4].try_into().unwrap()) as usize;
        c.read_exact(&mut back[4..4 + len]).expect("echo body back");
        if i >= ECHO_WARM_UP {
            lat.push(t.elapsed());
        }
    }
    drop(c);
    server.join().expect("echo server");
    let _ = std::fs::remove_file(&path);
    lat
}

// ----- a real host --------------------------------------------------------------------------

/// Starts a host (see `Host::start`) with the bench's workflow in its home: a checkpoint the
/// runs park on, then a compute node.
fn start_host(dir: &Path, name: &str) -> Host {
    Host::start(
        dir,
        name,
        Duration::from_secs(30),
        Duration::from_secs(10),
        |paths, _| {
            let fixture = json!({
                "graph": {"name": "bench", "start": "ask",
                          "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                          "edges": [{"from": "ask", "to": "done"}]},
                "behaviors": {"ask": {"wait": "checkpoint"}}
            });
            std::fs::write(workflow_path(&paths.home), fixture.to_string())
                .expect("write workflow");
        },
    )
}

fn workflow_path(home: &Path) -> PathBuf {
    home.join("bench.workflow.json")
}

/// Starts a run of the bench's workflow and waits until it waits on its checkpoint.
fn start_run(host: &Host, c: &mut BlockingClient) -> String {
    let r = c
        .call(RequestBody::RunStart(payload::RunStart {
            workflow_file: workflow_path(&host.paths.home).display().to_string(),
            input: json!({}),
            session_id: Some("bench".into()),
            execution_mode: None,
            project_dir: None,
        }))
        .expect("run.start");
    let run_id = r.body["run_id"].as_str().expect("run_id").to_owned();
    // Wait until its child parked it on the checkpoint.
    let start = Instant::now();
    loop {
        let r = c
            .send(
                Request::new(new_id("status"), RequestBody::RunStatus(Default::default()))
                    .with_run_id(&run_id),
            )
            .expect("run.status");
        match r.body["run"]["status"].as_str() {
            Some("waiting") => return run_id,
            Some("queued" | "running") if start.elapsed() < Duration::from_secs(30) => {}
            other => panic!(
                "the bench run should wait on its checkpoint, but it is {other:?}: {}",
                host.log()
            ),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn revision(c: &mut BlockingClient, run_id: &str) -> u64 {
    let r = c
        .send(
            Request::new(new_id("status"), RequestBody::RunStatus(Default::default()))
                .with_run_id(run_id),
        )
        .expect("run.status");
    r.body["run"]["revision"].as_u64().expect("revision")
}

/// The next alternating pause/resume command for a run, with a fresh request id.
fn toggle(run_id: &str, paused: &mut bool) -> Request {
    let body = if *paused {
        RequestBody::RunResume
    } else {
        RequestBody::RunPause
    };
    *paused = !*paused;
    Request::new(new_id("bench"), body).with_run_id(run_id)
}

fn check_fresh(r: &Receipt) {
    assert!(!r.replayed, "a fresh request id must not replay a receipt");
}

// ----- 2. round trips -----------------------------------------------------------------------

struct RoundTrips {
    /// Reads while the run waits on its checkpoint.
    host_status: Latencies,
    run_status: Latencies,
    write: Latencies,
    /// The same reads once the run is paused (nothing queued).
    host_status_paused: Latencies,
    run_status_paused: Latencies,
}

fn round_trips(host: &Host) -> RoundTrips {
    let mut c = host.client();
    let run_id = start_run(host, &mut c);
    let base = revision(&mut c, &run_id);
    let host_status_call = |c: &mut BlockingClient| {
        c.call(RequestBody::HostStatus).expect("host.status");
    };
    let run_status_call = |c: &mut BlockingClient| {
        c.send(
            Request::new(new_id("bench"), RequestBody::RunStatus(Default::default()))
                .with_run_id(&run_id),
        )
        .expect("run.status");
    };
    let host_status = timed(&mut c, host_status_call);
    let run_status = timed(&mut c, run_status_call);
    let mut paused = false;
    let mut toggles = 0u64;
    let write = timed(&mut c, |c| {
        let r = c.send(toggle(&run_id, &mut paused)).expect("pause/resume");
        check_fresh(&r);
        toggles += 1;
    });
    if !paused {
        c.send(toggle(&run_id, &mut paused)).expect("pause");
        toggles += 1;
    }
    let host_status_paused = timed(&mut c, host_status_call);
    let run_status_paused = timed(&mut c, run_status_call);
    assert_eq!(
        revision(&mut c, &run_id),
        base + toggles,
        "every pause/resume applied exactly once"
    );
    RoundTrips {
        host_status,
        run_status,
        write,
        host_status_paused,
        run_status_paused,
    }
}

/// `RT_WARM_UP` untimed calls of `f`, then `RT_ROUNDS` timed ones.
fn timed(c: &mut BlockingClient, mut f: impl FnMut(&mut BlockingClient)) -> Latencies {
    let mut lat = Latencies::default();
    for i in 0..RT_WARM_UP + RT_ROUNDS {
        let t = Instant::now();
        f(c);
        if i >= RT_WARM_UP {
            lat.push(t.elapsed());
        }
    }
    lat
}

// ----- 3. throughput ------------------------------------------------------------------------

struct Level {
    clients: usize,
    lat: Latencies,
    window: Duration,
    host_cpu: f64,
    store_cpu: f64,
    bench_cpu: f64,
    /// Host CPU (share of one core) while idle with the level's runs waiting, before the load.
    idle_cpu: f64,
    /// Bytes the host wrote per command in the window.
    wchar_per_cmd: f64,
    /// The bare single-writer commit rate measured just before this level.
    bare_rate: f64,
}

impl Level {
    fn rate(&self) -> f64 {
        self.lat.len() as f64 / self.window.as_secs_f64()
    }
}

fn throughput(host: &Host, clients: usize, warm_up: Duration, measure_for: Duration) -> Level {
    let mut setup = host.client();
    let runs: Vec<String> = (0..clients).map(|_| start_run(host, &mut setup)).collect();
    // Revisions before the load: each run's start-up (activation, its checkpoint) came first.
    let bases: std::collections::HashMap<String, u64> = runs
        .iter()
        .map(|r| (r.clone(), revision(&mut setup, r)))
        .collect();
    // The host with waiting runs and no requests: it should be (nearly) idle.
    let idle_a = CpuSnapshot::take(host.pid());
    let idle_at = Instant::now();
    std::thread::sleep(IDLE_SAMPLE);
    let idle_b = CpuSnapshot::take(host.pid());
    let idle_cpu = (idle_b.host - idle_a.host) / idle_at.elapsed().as_secs_f64();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pid = host.pid();
    let (per_client, window, cpu) = runtime.block_on(async {
        let mut conns = Vec::with_capacity(clients);
        for _ in 0..clients {
            conns.push(Client::connect(&host.paths).await.expect("async connect"));
        }
        let begin = Instant::now() + Duration::from_millis(20);
        let window_start = begin + warm_up;
        let window_end = window_start + measure_for;
        let mut tasks = tokio::task::JoinSet::new();
        for (mut client, run_id) in conns.into_iter().zip(runs.clone()) {
            tasks.spawn(async move {
                tokio::time::sleep_until(begin.into()).await;
                let mut paused = false;
                let mut sent = 0u64;
                let mut lat = Latencies::default();
                loop {
                    let t = Instant::now();
                    if t >= window_end {
                        break;
                    }
                    let r = client
                        .send(toggle(&run_id, &mut paused))
                        .await
                        .expect("pause/resume");
                    check_fresh(&r);
                    sent += 1;
                    let done = Instant::now();
                    if done >= window_start && done < window_end {
                        lat.push(done - t);
                    }
                }
                (run_id, sent, lat)
            });
        }
        let sampler = tokio::spawn(async move {
            tokio::time::sleep_until(window_start.into()).await;
            let a = CpuSnapshot::take(pid);
            let at = Instant::now();
            tokio::time::sleep_until(window_end.into()).await;
            let b = CpuSnapshot::take(pid);
            (a, b, at.elapsed())
        });
        let mut per_client = Vec::with_capacity(clients);
        while let Some(done) = tasks.join_next().await {
            per_client.push(done.expect("client task"));
        }
        let (a, b, wall) = sampler.await.expect("cpu sampler");
        (per_client, window_end - window_start, (a, b, wall))
    });
    drop(runtime);

    for (run_id, sent, _) in &per_client {
        assert_eq!(
            revision(&mut setup, run_id),
            bases[run_id] + sent,
            "every pause/resume applied exactly once"
        );
    }
    let mut lat = Latencies::default();
    for (_, _, l) in per_client {
        lat.0.extend(l.0);
    }
    let (a, b, wall) = cpu;
    let w = wall.as_secs_f64();
    let in_window = lat.len() as f64 * w / window.as_secs_f64();
    Level {
        clients,
        idle_cpu,
        wchar_per_cmd: (b.host_wchar - a.host_wchar) / in_window,
        bare_rate: f64::NAN,
        lat,
        window,
        host_cpu: (b.host - a.host) / w,
        store_cpu: (b.store - a.store) / w,
        bench_cpu: (b.bench - a.bench) / w,
    }
}
