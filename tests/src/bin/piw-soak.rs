//! `piw-soak`: the seeded fault soak. Run it with `scripts/soak --seed N
//! --seconds S`.
//!
//! A driver starts a real host (`piw host serve`, the `piw` binary beside this one) on a temp
//! `PIW_HOME` (and temp `HOME`, `TMPDIR`, `PI_CODING_AGENT_DIR`), then for `S` seconds starts a
//! mix of `.workflow.json` runs (pure steps, effects under `never` and `idempotency_key`, an
//! ordinary checkpoint, a protected human decision, an interaction judged by `validate`, notify),
//! answers what they wait for, and injects faults: the host killed (SIGKILL) or stopped
//! (SIGTERM) and restarted, a child killed (SIGKILL), a client that dies mid-call (a command
//! written, whole or in part, on a connection closed before the reply), a stalled host
//! (SIGSTOP, then SIGCONT), malformed frames, a full disk for a while (`PIW_FAULT=disk_full`:
//! commands refused, sent again), a host whose log is a pipe nobody reads, a burst of idle
//! connections past the host's connection cap, a host under a low open-file limit, a second
//! host on a hard link of the database (refused), a chatty child (a run whose node sends progress
//! updates and notify calls far past its event budget: the excess is dropped and counted, the
//! latest update per key kept). A command whose connection broke is sent again
//! with the same request id (as a client that retries must), so a command the host committed
//! before it died is replayed, never applied twice. Which workflow, which answer and which
//! fault come next is drawn from one seeded RNG, so a seed replays the same schedule (the
//! timing of a real host is not replayed).
//!
//! When the time is up it stops injecting, drives every run to its end, stops the host, and
//! checks each run against what its inputs and answers should give: its status and result,
//! the answers and submissions it was acknowledged, effect lines in its file, its messages,
//! one succeeded attempt per node (every graph visits each node once), `diagnose`. It prints
//! one line on stdout,
//! `soak seed=N faults=F runs=R completed=C lost=L doubled=D diagnose=clean review=V frames=X`,
//! each problem on stderr. Then it prunes every finished run (a host killed between two
//! `run.prune`s) and prints `soak prune: batches=B removed=R left=L diagnose=clean`. It exits 1
//! when anything is lost, doubled, unexpected or not clean.
//! Every process of the installation is killed when it ends, pass or fail.

use piw_host::store::prelude::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use piw_host::client::{BlockingClient, ClientError};
use piw_host::paths::PiwPaths;
use piw_host::protocol::{
    encode_frame, payload, Limits, Receipt, RejectionCode, Request, RequestBody,
};
use piw_host::store::{Store, StoreConfig};
use piw_tests::{installation_processes, is_final, kill_installation, pending};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng};
use serde_json::{json, Value};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long any single wait may take before the soak calls it a hang (not a speed check).
const BOUND: Duration = Duration::from_secs(60);
/// The host sends a run to review after 3 child losses without progress; the soak kills at
/// most this many children of one run, so every run must still finish (a review for lost
/// children is then a finding).
const MAX_CHILD_KILLS_PER_RUN: u32 = 2;
/// At most this many runs are unfinished at once.
const MAX_ACTIVE: usize = 6;

/// The host's connection cap in the soak (`PIW_MAX_CONNECTIONS`), low enough for a burst of
/// idle connections to pass it.
const MAX_CONNECTIONS: usize = 48;
/// The open-file limit of a host started after a `low_fd_limit` fault: a few child slots.
const LOW_NOFILE: libc::rlim_t = 256;
/// The origin session of every run (for interactions and messages).
const SESSION: &str = "soak";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Pure,
    EffectNever,
    EffectKey,
    Checkpoint,
    Decision,
    Interact,
    Notify,
    /// A durable timer: the run waits with no child until the host fires it.
    Wait,
    /// A chatty child: progress updates and notify calls far past the run's event budget.
    Chatty,
    /// A node output over 64 KiB: uploaded in chunks, stored apart, read back by the next node.
    /// Every pure run of an even value is one (the schedule's draws stay those of the mix).
    Large,
}

/// The mix of runs the schedule starts (a chatty run is started as a fault).
const KINDS: [Kind; 8] = [
    Kind::Pure,
    Kind::EffectNever,
    Kind::EffectKey,
    Kind::Checkpoint,
    Kind::Decision,
    Kind::Interact,
    Kind::Notify,
    Kind::Wait,
];

/// The length of a `Large` run's output blob: over the 64 KiB at which a value is stored
/// apart, up to a few chunks.
fn large_bytes(value: i64) -> u64 {
    70_000 + value.unsigned_abs() % 300_000
}

/// What a chatty run's node emits: far past the event budget's burst (100), its rate (20 a
/// second) and, with the pads, past an attempt's bytes when kept.
const CHATTER_UPDATES: u64 = 1_500;
const CHATTER_KEYS: u64 = 4;
const CHATTER_NOTIFIES: u64 = 400;
const CHATTER_PAD_BYTES: u64 = 1_024;

/// One run of the mix: what it was given and what the host acknowledged.
struct Plan {
    index: usize,
    kind: Kind,
    /// The value that flows through the run (its input to the first node's output).
    value: i64,
    workflow_file: String,
    /// The file an effect appends to.
    effect_file: PathBuf,
    run_id: Option<String>,
    /// The decision answered and the answer acknowledged.
    answered: Option<(String, Value)>,
    /// Acknowledged submissions: (submission id, payload).
    submitted: Vec<(String, Value)>,
    /// The last status read; `Some` once the run is final.
    final_status: Option<Value>,
    /// Its children the soak killed.
    child_kills: u32,
}

/// What one step of the schedule draws (all of it, used or not).
struct Draws {
    roll: u32,
    pick: u64,
    kind: usize,
    value: i64,
    sleep_ms: u64,
    fault: u32,
    param: u64,
    pause_ms: u64,
}

#[derive(Default)]
struct Tally {
    faults: BTreeMap<&'static str, u64>,
    frames: u64,
    lost: u64,
    doubled: u64,
    unexpected: u64,
    /// Progress and notify events the host dropped over chatty runs' budgets.
    chatter_dropped: u64,
}

struct Soak {
    seed: u64,
    /// How many background readers run ([`Background::start`]).
    readers: u64,
    /// The schedule: every step draws the same number of values from it, whatever the host
    /// answered, so a seed replays the same sequence of intended actions and faults.
    rng: StdRng,
    /// Whether a command is first sent by a client that dies (drawn per command, so how many
    /// commands the runs needed does not shift the schedule).
    client_rng: StdRng,
    /// The first scheduled faults, printed at the end to compare replays.
    fault_log: Vec<&'static str>,
    dir: tempfile::TempDir,
    paths: PiwPaths,
    piw: PathBuf,
    worker: PathBuf,
    host: Option<Child>,
    /// The next host started gets a stderr pipe whose reader is gone (its log cannot be
    /// written).
    closed_log_next: bool,
    /// The next host starts under a low open-file limit ([`LOW_NOFILE`]).
    low_fds_next: bool,
    plans: Vec<Plan>,
    tally: Tally,
}

impl Drop for Soak {
    fn drop(&mut self) {
        if let Some(host) = &self.host {
            // A host left stopped must be able to die.
            signal(host.id(), libc::SIGCONT);
        }
        kill_installation(&self.paths.home);
        if let Some(mut host) = self.host.take() {
            let _ = host.kill();
            let _ = host.wait();
        }
    }
}

fn main() -> ExitCode {
    let Args {
        seed,
        seconds,
        readers,
    } = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("piw-soak: {e}\nusage: piw-soak --seed N [--seconds S] [--readers K]");
            return ExitCode::from(2);
        }
    };
    eprintln!("piw-soak: seed={seed} seconds={seconds} readers={readers} (replay with scripts/soak --seed {seed} --seconds {seconds} --readers {readers})");
    match Soak::new(seed, readers).and_then(|mut s| s.run(Duration::from_secs(seconds))) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("piw-soak: seed={seed}: {e}");
            ExitCode::from(1)
        }
    }
}

struct Args {
    seed: u64,
    seconds: u64,
    /// Background clients reading status and run lists in a loop (default 1): more of them
    /// put more frames through the host without changing the fault schedule, which draws
    /// nothing for them.
    readers: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut seed = None;
    let mut seconds = None;
    let mut readers = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = args.next().ok_or(format!("{a} needs a value"))?;
        let n: u64 = value
            .parse()
            .map_err(|_| format!("{a}: not a whole number: {value}"))?;
        match a.as_str() {
            "--seed" => seed = Some(n),
            "--seconds" => seconds = Some(n),
            "--readers" if (1..=16).contains(&n) => readers = Some(n),
            "--readers" => return Err(format!("--readers: between 1 and 16, not {n}")),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(Args {
        seed: seed.ok_or("--seed is required")?,
        seconds: seconds.unwrap_or(60),
        readers: readers.unwrap_or(1),
    })
}

impl Soak {
    fn new(seed: u64, readers: u64) -> Res<Self> {
        let exe = std::env::current_exe()?;
        let bin_dir = exe.parent().ok_or("the soak binary has no directory")?;
        let piw = bin_dir.join("piw");
        let worker = bin_dir.join("piw-json-worker");
        for bin in [&piw, &worker] {
            if !bin.exists() {
                return Err(format!("{} is missing: build piw-cli first", bin.display()).into());
            }
        }
        let dir = tempfile::Builder::new().prefix("piw-soak").tempdir()?;
        for sub in ["home", "tmp", "agent"] {
            std::fs::create_dir_all(dir.path().join(sub))?;
        }
        let paths = PiwPaths::for_home(dir.path().join("piw"));
        Ok(Self {
            seed,
            readers,
            rng: StdRng::seed_from_u64(seed),
            client_rng: StdRng::seed_from_u64(seed ^ 0x5eed_c11e_57ab_1e00),
            fault_log: Vec::new(),
            dir,
            paths,
            piw,
            worker,
            host: None,
            closed_log_next: false,
            low_fds_next: false,
            plans: Vec::new(),
            tally: Tally::default(),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&mut self, duration: Duration) -> Res<bool> {
        self.serve()?;
        let background = Background::start(&self.paths, self.readers);
        let started = Instant::now();
        while started.elapsed() < duration {
            self.step()?;
        }
        let (frames, disorder) = background.stop();
        self.tally.frames += frames;
        if disorder > 0 {
            eprintln!(
                "piw-soak: {disorder} events arrived out of order or twice on one subscription"
            );
            self.tally.unexpected += disorder;
        }
        // No more faults: every run is driven to its end.
        let end = Instant::now();
        loop {
            let mut open = 0;
            for i in 0..self.plans.len() {
                if self.plans[i].final_status.is_none() {
                    self.advance(i)?;
                    open += 1;
                }
            }
            if open == 0 {
                break;
            }
            if end.elapsed() > BOUND * 2 {
                let stuck: Vec<String> = self
                    .plans
                    .iter()
                    .filter(|p| p.final_status.is_none())
                    .map(|p| format!("{} {:?} {:?}", p.index, p.kind, p.run_id))
                    .collect();
                return Err(format!("runs never finished: {stuck:?}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop_host()?;
        let checked = self.check()?;
        Ok(self.prune_finished()? && checked)
    }

    /// Retention after the check: every finished run is pruned through a host, a few runs per
    /// `run.prune`, and the host is killed (SIGKILL) between two of them. Afterwards only the
    /// runs in review are left, nothing of the pruned runs remains (`diagnose`: no dangling
    /// reference, no value no run holds) and the line says so.
    fn prune_finished(&mut self) -> Res<bool> {
        self.serve()?;
        let mut batches = 0u32;
        let mut removed = 0usize;
        loop {
            let request = Request::new(
                format!("soak-prune-{batches}"),
                RequestBody::RunPrune(payload::RunPrune {
                    older_than_ms: Some(0),
                    limit: Some(5),
                    ..payload::RunPrune::default()
                }),
            );
            let reply = self
                .call(&request)?
                .map_err(|e| format!("run.prune refused: {e}"))?;
            batches += 1;
            removed += reply.body["removed"].as_array().map_or(0, Vec::len);
            if batches == 2 {
                self.kill_host(libc::SIGKILL)?;
            }
            if reply.body["more"] != json!(true) {
                break;
            }
            if batches > 10_000 {
                return Err("run.prune never said it was done".into());
            }
        }
        self.stop_host()?;
        let store = Store::open_read_only(&self.paths.db, StoreConfig::default())?;
        let left = store.list_runs(None, 100_000)?;
        let only_review = left
            .iter()
            .all(|r| r.status == piw_host::store::RunStatus::Review);
        let findings = store.diagnose(store.now_ms())?;
        for f in &findings {
            eprintln!("piw-soak: after the prune: diagnose: {f:?}");
        }
        if !only_review {
            eprintln!(
                "piw-soak: after the prune: {:?}",
                left.iter()
                    .map(|r| (&r.run_id, &r.status))
                    .collect::<Vec<_>>()
            );
        }
        println!(
            "soak prune: batches={batches} removed={removed} left={} diagnose={}",
            left.len(),
            if findings.is_empty() {
                "clean"
            } else {
                "findings"
            }
        );
        Ok(only_review && findings.is_empty())
    }

    /// One step of the schedule: start a run, move one along, or inject a fault.
    fn step(&mut self) -> Res<()> {
        let d = Draws {
            roll: self.rng.random_range(0..100),
            pick: self.rng.random(),
            kind: self.rng.random_range(0..KINDS.len()),
            value: self.rng.random_range(1..1_000_000),
            sleep_ms: self.rng.random_range(0..1_500),
            fault: self.rng.random_range(0..11),
            param: self.rng.random(),
            pause_ms: self.rng.random_range(0..40),
        };
        let active = self
            .plans
            .iter()
            .filter(|p| p.final_status.is_none())
            .count();
        if d.roll < 25 {
            // A start beyond the bound of unfinished runs is skipped, not replaced.
            if active < MAX_ACTIVE {
                self.start(KINDS[d.kind], d.value, d.sleep_ms)?;
            }
        } else if d.roll < 88 {
            if !self.plans.is_empty() {
                let i = (d.pick % self.plans.len() as u64) as usize;
                if self.plans[i].final_status.is_none() {
                    self.advance(i)?;
                }
            }
        } else {
            self.fault(d.fault, d.param)?;
        }
        std::thread::sleep(Duration::from_millis(d.pause_ms));
        Ok(())
    }

    fn fault(&mut self, fault: u32, param: u64) -> Res<()> {
        match fault {
            0 => {
                self.count("host_sigkill");
                self.kill_host(libc::SIGKILL)?;
            }
            1 => {
                self.count("host_sigterm");
                self.kill_host(libc::SIGTERM)?;
            }
            2 => {
                self.count("child_sigkill");
                let victims = self.children()?;
                if !victims.is_empty() {
                    let (pid, plan) = victims[(param % victims.len() as u64) as usize];
                    self.plans[plan].child_kills += 1;
                    signal(pid, libc::SIGKILL);
                }
            }
            3 => {
                if let Some(host) = &self.host {
                    let pid = host.id();
                    self.count("host_sigstop");
                    signal(pid, libc::SIGSTOP);
                    std::thread::sleep(Duration::from_millis(50 + param % 950));
                    signal(pid, libc::SIGCONT);
                }
            }
            4 => {
                self.count("malformed_frame");
                self.malformed_frame(param);
            }
            5 if param.is_multiple_of(2) => {
                // A chatty child: a run whose node emits progress and notify calls far past
                // its event budget (the host drops and counts the excess), among the faults.
                let active = self
                    .plans
                    .iter()
                    .filter(|p| p.final_status.is_none())
                    .count();
                if active < MAX_ACTIVE {
                    self.count("chatty_child");
                    self.start(Kind::Chatty, ((param >> 8) % 999_999) as i64 + 1, 0)?;
                }
            }
            6 => {
                // The disk holding the database is full for a while (`PIW_FAULT=disk_full`):
                // commands are refused meanwhile, and the same host serves again after.
                self.count("disk_full");
                let flag = self.path("disk-full");
                std::fs::write(&flag, b"")?;
                std::thread::sleep(Duration::from_millis(50 + param % 450));
                std::fs::remove_file(&flag)?;
            }
            7 => {
                // The next host logs (at debug) into a pipe nobody reads.
                self.count("log_pipe_closed");
                self.closed_log_next = true;
                self.kill_host(libc::SIGTERM)?;
            }
            8 => {
                // A burst of idle connections past the host's connection cap.
                self.count("idle_connections");
                let idle: Vec<UnixStream> = (0..MAX_CONNECTIONS * 2)
                    .filter_map(|_| UnixStream::connect(&self.paths.socket).ok())
                    .collect();
                std::thread::sleep(Duration::from_millis(20 + param % 200));
                drop(idle);
            }
            9 => {
                // A second name for the database (a hard link in another installation): a
                // host started there is refused, and the soak's host serves on.
                self.count("hard_link");
                self.second_host_on_a_hard_link()?;
            }
            10 => {
                // The next host runs under a low open-file limit: it runs fewer children at
                // once rather than losing any, and clients still get in.
                self.count("low_fd_limit");
                self.low_fds_next = true;
                self.kill_host(libc::SIGTERM)?;
            }
            _ => {
                // A status read by a client that dies before its reply; the commands' own
                // abandoned sends happen in `command`.
                self.count("client_killed");
                let r = Request::new(piw_host::ids::new_id("st"), RequestBody::HostStatus);
                self.abandoned_send(&r, param & 1 == 0);
            }
        }
        Ok(())
    }

    fn count(&mut self, fault: &'static str) {
        if self.fault_log.len() < 16 {
            self.fault_log.push(fault);
        }
        *self.tally.faults.entry(fault).or_default() += 1;
    }

    /// Starts a host and waits until it answers.
    fn serve(&mut self) -> Res<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("hosts.log"))?;
        let closed_log = std::mem::take(&mut self.closed_log_next);
        let (stderr, log_level) = if closed_log {
            let (reader, writer) = std::io::pipe()?;
            drop(reader);
            (Stdio::from(writer), "debug")
        } else {
            (Stdio::from(log), "warn")
        };
        let mut cmd = Command::new(&self.piw);
        if std::mem::take(&mut self.low_fds_next) {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
            unsafe {
                cmd.pre_exec(|| {
                    let limit = libc::rlimit {
                        rlim_cur: LOW_NOFILE,
                        rlim_max: LOW_NOFILE,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd
            .args(["host", "serve"])
            .env("PIW_HOME", &self.paths.home)
            .env("HOME", self.path("home"))
            .env("TMPDIR", self.path("tmp"))
            .env("PI_CODING_AGENT_DIR", self.path("agent"))
            .env("PIW_LOG", log_level)
            .env("PIW_KILL_GRACE_MS", "200")
            .env("PIW_MAX_CONNECTIONS", MAX_CONNECTIONS.to_string())
            .env(
                "PIW_RUNTIMES",
                format!(".workflow.json={}", self.worker.display()),
            )
            .env(
                "PIW_FAULT",
                format!("disk_full:{}", self.path("disk-full").display()),
            )
            .env_remove("PIW_TEST_CLOCK")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        self.host = Some(child);
        let start = Instant::now();
        loop {
            if let Ok(mut c) = BlockingClient::connect(&self.paths) {
                self.tally.frames += 2;
                if c.call(RequestBody::HostStatus).is_ok() {
                    return Ok(());
                }
            }
            if let Some(status) = self.host_exit()? {
                // Another host may still hold the lock for a moment (one stopping): try again.
                if start.elapsed() > BOUND {
                    return Err(format!("no host would start ({status}): {}", self.log()).into());
                }
                std::thread::sleep(Duration::from_millis(50));
                return self.serve();
            }
            if start.elapsed() > BOUND {
                return Err(format!("the host never became ready: {}", self.log()).into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Hard-links the database into a second installation and starts a host there: it must
    /// be refused (the database has two names, and the soak's host holds the file), within
    /// [`BOUND`]; the link is removed before anything else happens (a host of the soak's own
    /// would refuse the database while it has two names).
    fn second_host_on_a_hard_link(&mut self) -> Res<()> {
        let second = self.path("second-home");
        std::fs::create_dir_all(&second)?;
        let link = second.join("state.sqlite");
        let _ = std::fs::remove_file(&link);
        std::fs::hard_link(&self.paths.db, &link)?;
        let mut other = Command::new(&self.piw)
            .args(["host", "serve"])
            .env("PIW_HOME", &second)
            .env("HOME", self.path("home"))
            .env("PI_CODING_AGENT_DIR", self.path("agent"))
            .env("PIW_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let start = Instant::now();
        let status = loop {
            if let Some(status) = other.try_wait()? {
                break Some(status);
            }
            if start.elapsed() > BOUND {
                let _ = other.kill();
                let _ = other.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut said = String::new();
        if let Some(mut err) = other.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
        std::fs::remove_file(&link)?;
        match status {
            Some(status) if !status.success() && said.contains("links") => Ok(()),
            Some(status) => Err(format!(
                "a host on a hard link of the database was not refused as it should be ({status}): {said}"
            )
            .into()),
            None => Err("a second host served a hard link of the database".into()),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("hosts.log")).unwrap_or_default()
    }

    /// The exit status of the current host, if it has exited (it is then forgotten).
    fn host_exit(&mut self) -> Res<Option<std::process::ExitStatus>> {
        let Some(host) = self.host.as_mut() else {
            return Ok(None);
        };
        let status = host.try_wait()?;
        if status.is_some() {
            self.host = None;
        }
        Ok(status)
    }

    /// Signals the host (SIGKILL or SIGTERM), waits for it to end and starts the next one.
    fn kill_host(&mut self, sig: i32) -> Res<()> {
        let Some(mut host) = self.host.take() else {
            return self.serve();
        };
        signal(host.id(), sig);
        let start = Instant::now();
        loop {
            if let Some(status) = host.try_wait()? {
                if sig == libc::SIGTERM && !status.success() {
                    eprintln!("piw-soak: a host told to stop (SIGTERM) exited with {status}");
                    self.tally.unexpected += 1;
                }
                break;
            }
            if start.elapsed() > BOUND {
                let _ = host.kill();
                let _ = host.wait();
                return Err(format!("the host did not end on signal {sig}").into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.serve()
    }

    /// After a call failed without an answer: a host that died (killed by the soak while a
    /// call was on the wire, or by itself: a bug) is replaced.
    fn recover(&mut self) -> Res<()> {
        match self.host_exit()? {
            Some(status) => {
                eprintln!(
                    "piw-soak: the host died by itself ({status}); its log:\n{}",
                    self.log()
                );
                self.tally.unexpected += 1;
                self.serve()
            }
            None if self.host.is_none() => self.serve(),
            None => {
                std::thread::sleep(Duration::from_millis(20));
                Ok(())
            }
        }
    }

    /// Sends `request` until a host answers it, again with the same request id after a broken
    /// connection. A rejection is returned as it is.
    fn call(&mut self, request: &Request) -> Res<Result<Receipt, ClientError>> {
        let start = Instant::now();
        loop {
            let sent = BlockingClient::connect(&self.paths).and_then(|mut c| {
                c.set_timeout(Some(BOUND))?;
                c.send(request.clone())
            });
            self.tally.frames += 1;
            match sent {
                // A full disk refused it and stored nothing: the same request again, later.
                Err(ClientError::Rejected(r))
                    if r.code == RejectionCode::Internal && r.message.contains("is full") =>
                {
                    if start.elapsed() > BOUND * 2 {
                        return Err(format!(
                            "{} refused for ever: {}",
                            request.request_id, r.message
                        )
                        .into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(ClientError::Rejected(r)) if r.code != RejectionCode::HostShuttingDown => {
                    self.tally.frames += 1;
                    return Ok(Err(ClientError::Rejected(r)));
                }
                Err(e @ ClientError::InvalidRequest(_)) => return Ok(Err(e)),
                Ok(receipt) => {
                    self.tally.frames += 1;
                    return Ok(Ok(receipt));
                }
                Err(e) => {
                    if start.elapsed() > BOUND * 2 {
                        return Err(format!("{} never answered: {e}", request.request_id).into());
                    }
                    self.recover()?;
                }
            }
        }
    }

    /// A command the run's state depends on: sometimes first written (whole or cut short) by a
    /// client that dies before the reply, then sent until answered.
    fn command(&mut self, request: Request) -> Res<Result<Receipt, ClientError>> {
        if self.client_rng.random_bool(0.15) {
            *self
                .tally
                .faults
                .entry("client_killed_mid_command")
                .or_default() += 1;
            let cut = self.client_rng.random_bool(0.5);
            self.abandoned_send(&request, cut);
        }
        self.call(&request)
    }

    /// Writes `request` (or its first half) on a fresh connection and closes it at once.
    fn abandoned_send(&mut self, request: &Request, cut: bool) {
        let Ok(bytes) = encode_frame(request, &Limits::default()) else {
            return;
        };
        if let Ok(mut s) = UnixStream::connect(&self.paths.socket) {
            let end = if cut { bytes.len() / 2 } else { bytes.len() };
            if s.write_all(&bytes[..end]).is_ok() {
                self.tally.frames += 1;
            }
        }
    }

    /// Writes one malformed frame and reads what the host answers (a rejection, a goodbye or
    /// a closed connection are all fine: the host must live on, checked by the next call).
    fn malformed_frame(&mut self, param: u64) {
        let body: Vec<u8> = match param % 5 {
            0 => b"{not json".to_vec(),
            1 => br#"{"v":1,"request_id":"x","kind":"no.such.kind","payload":{}}"#.to_vec(),
            2 => br#"{"v":1,"request_id":"y","kind":"run.start","payload":{"input":3}}"#.to_vec(),
            3 => vec![0xff, 0xfe, 0x00, 0x01],
            _ => br#"[1,2,3]"#.to_vec(),
        };
        let mut frame = Vec::new();
        match (param / 5) % 4 {
            // An announced length far past the limit.
            0 => frame.extend_from_slice(&u32::MAX.to_be_bytes()),
            // A zero-length frame.
            1 => frame.extend_from_slice(&0u32.to_be_bytes()),
            _ => {
                frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
                frame.extend_from_slice(&body);
            }
        }
        if let Ok(mut s) = UnixStream::connect(&self.paths.socket) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            if s.write_all(&frame).is_ok() {
                self.tally.frames += 1;
                let mut buf = [0u8; 4096];
                if matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    self.tally.frames += 1;
                }
            }
        }
    }

    /// Live children of unfinished runs the soak may still kill a child of, with the run's
    /// plan: recorded by the host for the run, and alive carrying the installation's
    /// `PIW_HOME` (not a reused pid).
    fn children(&self) -> Res<Vec<(u32, usize)>> {
        let host = self.host.as_ref().map(Child::id);
        let live = installation_processes(&self.paths.home);
        let store = Store::open_read_only(&self.paths.db, StoreConfig::default())?;
        let mut victims = Vec::new();
        for (i, plan) in self.plans.iter().enumerate() {
            let Some(run_id) = plan.run_id.as_deref() else {
                continue;
            };
            if plan.final_status.is_some() || plan.child_kills >= MAX_CHILD_KILLS_PER_RUN {
                continue;
            }
            for child in store.children(run_id)? {
                if let Some(pid) = child.pid.filter(|p| !child.exited && live.contains(p)) {
                    if Some(pid) != host {
                        victims.push((pid, i));
                    }
                }
            }
        }
        Ok(victims)
    }

    fn stop_host(&mut self) -> Res<()> {
        let _ = self.call(&Request::new("soak-stop", RequestBody::HostStop))?;
        if let Some(mut host) = self.host.take() {
            let start = Instant::now();
            while host.try_wait()?.is_none() {
                if start.elapsed() > BOUND {
                    let _ = host.kill();
                    let _ = host.wait();
                    return Err("the host did not stop on host.stop".into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// Writes the workflow file of a new run and starts it.
    fn start(&mut self, kind: Kind, value: i64, sleep_ms: u64) -> Res<()> {
        let kind = if kind == Kind::Pure && value % 2 == 0 {
            Kind::Large
        } else {
            kind
        };
        let index = self.plans.len();
        let effect_file = self.path(&format!("effect-{index}.txt"));
        let out = effect_file.display().to_string();
        let first = json!({"return": {"value": value}, "sleep_ms": sleep_ms});
        let (nodes, behaviors) = match kind {
            Kind::Pure => (
                json!({"a": {"kind": "compute"}, "b": {"kind": "compute"}}),
                json!({"a": first, "b": {"sleep_ms": sleep_ms / 2}}),
            ),
            // `b` returns its input: `a`'s output, read back from the host when `b` runs in
            // another child than `a`.
            Kind::Large => (
                json!({"a": {"kind": "compute"}, "b": {"kind": "compute"}}),
                json!({"a": {"return_bytes": large_bytes(value), "sleep_ms": sleep_ms},
                       "b": {"sleep_ms": sleep_ms / 2}}),
            ),
            Kind::EffectNever | Kind::EffectKey => {
                let contract = if kind == Kind::EffectKey {
                    "idempotency_key"
                } else {
                    "never"
                };
                (
                    json!({"a": {"kind": "compute"},
                           "b": {"kind": "action", "retry": contract}}),
                    json!({"a": first,
                           "b": {"effect": {"key": format!("effect-{index}"), "contract": contract,
                                            "append_to": out, "line": format!("applied {value}")}}}),
                )
            }
            Kind::Checkpoint | Kind::Decision => {
                let (node_kind, wait) = if kind == Kind::Checkpoint {
                    ("checkpoint", "checkpoint")
                } else {
                    ("human_decision", "human_decision")
                };
                (
                    json!({"a": {"kind": "compute"}, "b": {"kind": node_kind},
                           "c": {"kind": "compute"}}),
                    json!({"a": first, "b": {"wait": wait}, "c": {}}),
                )
            }
            Kind::Interact => (
                json!({"a": {"kind": "compute"}, "b": {"kind": "agent"}, "c": {"kind": "compute"}}),
                json!({"a": first, "b": {"interact": "agent", "validate": {"value": value}},
                       "c": {}}),
            ),
            Kind::Notify => (
                json!({"a": {"kind": "compute"}, "b": {"kind": "notify"}, "c": {"kind": "compute"}}),
                json!({"a": first, "b": {"notify": {"text": format!("note {index}")},
                                         "return": {"value": value}},
                       "c": {"sleep_ms": sleep_ms / 2}}),
            ),
            // The host's real clock: the timer fires at its next deadline after `sleep_ms`.
            Kind::Wait => (
                json!({"a": {"kind": "compute"}, "b": {"kind": "wait"}, "c": {"kind": "compute"}}),
                json!({"a": first, "b": {"timer": {"for_ms": sleep_ms}}, "c": {}}),
            ),
            Kind::Chatty => (
                json!({"a": {"kind": "compute"}, "b": {"kind": "notify"}, "c": {"kind": "compute"}}),
                json!({"a": first,
                       "b": {"chatter": {"updates": CHATTER_UPDATES, "keys": CHATTER_KEYS,
                                         "notifies": CHATTER_NOTIFIES,
                                         "pad_bytes": CHATTER_PAD_BYTES},
                             "return": {"value": value}},
                       "c": {"sleep_ms": sleep_ms / 2}}),
            ),
        };
        let mut edges = vec![json!({"from": "a", "to": "b"})];
        if nodes.get("c").is_some() {
            edges.push(json!({"from": "b", "to": "c"}));
        }
        let fixture = json!({
            "graph": {"name": format!("soak-{kind:?}"), "start": "a", "nodes": nodes,
                      "edges": edges},
            "behaviors": behaviors,
        });
        let file = self.path(&format!("run-{index}.workflow.json"));
        std::fs::write(&file, serde_json::to_vec(&fixture)?)?;
        self.plans.push(Plan {
            index,
            kind,
            value,
            workflow_file: file.display().to_string(),
            effect_file,
            run_id: None,
            answered: None,
            submitted: Vec::new(),
            final_status: None,
            child_kills: 0,
        });
        let body = RequestBody::RunStart(payload::RunStart {
            workflow_file: self.plans[index].workflow_file.clone(),
            input: json!({"index": index}),
            session_id: Some(SESSION.into()),
            execution_mode: None,
            project_dir: Some(self.dir.path().display().to_string()),
        });
        let request = Request::new(format!("soak-{}-start-{index}", self.seed), body);
        match self.command(request)? {
            Ok(r) => {
                let run_id = r.body["run_id"]
                    .as_str()
                    .ok_or("run.start answered without a run id")?;
                self.plans[index].run_id = Some(run_id.to_owned());
            }
            Err(e) => return Err(format!("run.start of run {index} refused: {e}").into()),
        }
        Ok(())
    }

    fn status(&mut self, run_id: &str) -> Res<Value> {
        let request = Request::new(
            piw_host::ids::new_id("st"),
            RequestBody::RunStatus(Default::default()),
        )
        .with_run_id(run_id);
        match self.call(&request)? {
            Ok(r) => Ok(r.body),
            Err(e) => Err(format!("run.status of {run_id} refused: {e}").into()),
        }
    }

    /// Reads the run and answers what it waits for.
    fn advance(&mut self, i: usize) -> Res<()> {
        let Some(run_id) = self.plans[i].run_id.clone() else {
            return Ok(());
        };
        let s = self.status(&run_id)?;
        if is_final(&s) {
            self.plans[i].final_status = Some(s);
            return Ok(());
        }
        let kind = self.plans[i].kind;
        let value = self.plans[i].value;
        let index = self.plans[i].index;
        if let Some(d) = pending(&s, "decisions", "b") {
            if self.plans[i].answered.is_some() {
                return Ok(());
            }
            let decision_id = d["decision_id"].as_str().unwrap_or_default().to_owned();
            let answer = json!({"value": value, "by": "soak"});
            let body = payload::DecisionAnswer {
                decision_id: decision_id.clone(),
                answer: answer.clone(),
                channel: None,
            };
            let body = if kind == Kind::Decision {
                RequestBody::DecisionAnswer(body)
            } else {
                RequestBody::CheckpointAnswer(body)
            };
            let request = Request::new(format!("soak-{}-answer-{index}", self.seed), body)
                .with_run_id(&run_id);
            match self.command(request)? {
                Ok(_) => self.plans[i].answered = Some((decision_id, answer)),
                Err(e) => {
                    eprintln!("piw-soak: run {index}: the answer was refused: {e}");
                    self.tally.unexpected += 1;
                }
            }
        } else if let Some(x) = pending(&s, "interactions", "b") {
            // A wrong result first (the child must reject it), then the right one, again
            // after a rejection: a validation cut short by a killed child is rejected
            // (`validation did not finish`) and the request waits for a new submission.
            let n = self.plans[i].submitted.len();
            let last = &x["last_submission"];
            let judged = last["state"] == json!("rejected")
                && self.plans[i].submitted.last().map(|(id, _)| id.as_str())
                    == last["submission_id"].as_str();
            if n == 0 || judged {
                let result = json!({"value": if n == 0 { value + 1 } else { value }});
                let submit = RequestBody::InteractionSubmit(payload::InteractionSubmit {
                    interaction_id: x["interaction_id"].as_str().unwrap_or_default().to_owned(),
                    result: result.clone(),
                    refuse_repeat: false,
                });
                let request =
                    Request::new(format!("soak-{}-submit-{index}-{n}", self.seed), submit)
                        .with_run_id(&run_id)
                        .with_node_id("b")
                        .with_attempt_id(x["attempt_id"].as_str().unwrap_or_default());
                match self.command(request)? {
                    Ok(r) => {
                        let id = r.body["submission_id"].as_str().unwrap_or_default();
                        self.plans[i].submitted.push((id.to_owned(), result));
                    }
                    Err(e) => {
                        eprintln!("piw-soak: run {index}: submission {n} was refused: {e}");
                        self.tally.unexpected += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks every run, the installation and prints the line.
    fn check(&mut self) -> Res<bool> {
        let store = Store::open_read_only(&self.paths.db, StoreConfig::default())?;
        let mut completed = 0;
        let mut review = 0;
        let mut problems = Vec::new();
        let runs = store.list_runs(None, 100_000)?;
        if runs.len() != self.plans.len() {
            problems.push(format!(
                "{} runs started for {} acknowledged starts",
                runs.len(),
                self.plans.len()
            ));
            if runs.len() > self.plans.len() {
                self.tally.doubled += (runs.len() - self.plans.len()) as u64;
            } else {
                self.tally.lost += (self.plans.len() - runs.len()) as u64;
            }
        }
        for plan in &self.plans {
            let Some(run_id) = plan.run_id.as_deref() else {
                continue;
            };
            let s = plan.final_status.clone().unwrap_or_default();
            let status = s["run"]["status"].as_str().unwrap_or_default();
            let result = &s["run"]["result"];
            let mut bad = |what: String, tally: &mut u64| {
                problems.push(format!(
                    "run {} {:?} {run_id}: {what}",
                    plan.index, plan.kind
                ));
                *tally += 1;
            };
            // One succeeded attempt per node: each node of these graphs is visited once.
            let mut succeeded: BTreeMap<String, u32> = BTreeMap::new();
            for a in store.attempts(run_id)? {
                if a.status == "succeeded" {
                    *succeeded.entry(a.node_id).or_default() += 1;
                }
            }
            for (node, n) in &succeeded {
                if *n > 1 {
                    bad(
                        format!("node {node} succeeded {n} times"),
                        &mut self.tally.doubled,
                    );
                }
            }
            let lines = std::fs::read_to_string(&plan.effect_file).map_or(0, |t| t.lines().count());
            if lines > 1 {
                bad(
                    format!("the effect was applied {lines} times"),
                    &mut self.tally.doubled,
                );
            }
            let messages = store.messages(run_id)?;
            let terminal = messages.iter().filter(|m| m.kind != "notify").count();
            // A run in review has not finished: it has no terminal message yet.
            let finished = status != "review";
            if terminal != usize::from(finished) {
                let t = if terminal > 1 {
                    &mut self.tally.doubled
                } else {
                    &mut self.tally.lost
                };
                bad(format!("{terminal} terminal messages"), t);
            }
            let expected_value = json!({"value": plan.value});
            match plan.kind {
                Kind::EffectNever if status == "review" => {
                    let uncertain = store
                        .effects(run_id)?
                        .iter()
                        .any(|e| e.state == "uncertain");
                    if uncertain {
                        review += 1;
                        continue;
                    }
                    bad(
                        format!("in review without an uncertain effect: {s}"),
                        &mut self.tally.unexpected,
                    );
                    continue;
                }
                _ if status != "completed" => {
                    bad(
                        format!("ended {status}: {}", s["run"]),
                        &mut self.tally.unexpected,
                    );
                    continue;
                }
                _ => completed += 1,
            }
            match plan.kind {
                Kind::Pure => {
                    if *result != expected_value {
                        bad(format!("result {result}"), &mut self.tally.unexpected);
                    }
                }
                Kind::Wait => {
                    // One timer, set once and fired once, whatever the faults did.
                    let events = store.events(run_id, 0)?;
                    let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
                    let (set, fired) = (count("timer_set"), count("timer_fired"));
                    if set != 1 || fired != 1 {
                        let t = if set > 1 || fired > 1 {
                            &mut self.tally.doubled
                        } else {
                            &mut self.tally.lost
                        };
                        bad(format!("{set} timers set, {fired} fired"), t);
                    }
                    if *result != expected_value {
                        bad(format!("result {result}"), &mut self.tally.unexpected);
                    }
                }
                Kind::Large => {
                    let blob = result["sha256"]
                        .as_str()
                        .and_then(|sha256| store.read_value(run_id, sha256).ok())
                        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                        .and_then(|v| v["blob"].as_str().map(str::len));
                    if blob != usize::try_from(large_bytes(plan.value)).ok() {
                        bad(
                            format!(
                                "a large result read back as {blob:?}: {}",
                                result.to_string().chars().take(300).collect::<String>()
                            ),
                            &mut self.tally.unexpected,
                        );
                    }
                }
                Kind::EffectNever | Kind::EffectKey => {
                    if lines != 1 {
                        bad(
                            format!("completed with {lines} effect lines"),
                            &mut self.tally.lost,
                        );
                    }
                }
                Kind::Checkpoint | Kind::Decision => {
                    let Some((decision_id, answer)) = &plan.answered else {
                        bad("completed unanswered".into(), &mut self.tally.unexpected);
                        continue;
                    };
                    let decisions = store.decisions(run_id)?;
                    let ok = decisions.iter().any(|d| {
                        &d.decision_id == decision_id
                            && d.status == "answered"
                            && d.answer.as_ref() == Some(answer)
                    });
                    if !ok || *result != json!({"answer": answer}) {
                        bad(
                            format!("the acknowledged answer {answer} did not count: result {result}, decisions {decisions:?}"),
                            &mut self.tally.lost,
                        );
                    }
                }
                Kind::Interact => {
                    let mut states = Vec::new();
                    for x in store.interactions(Some(run_id), None)? {
                        for sub in store.submissions(&x.interaction_id)? {
                            states.push((sub.submission_id, sub.state, sub.payload));
                        }
                    }
                    for (id, payload) in &plan.submitted {
                        if !states.iter().any(|(sid, _, p)| sid == id && p == payload) {
                            bad(
                                format!("acknowledged submission {id} is missing"),
                                &mut self.tally.lost,
                            );
                        }
                    }
                    let verdicts: Vec<&str> = states.iter().map(|(_, st, _)| st.as_str()).collect();
                    // The wrong result rejected, the right one accepted once, after any
                    // validations of it cut short.
                    let cut_short = states.iter().skip(1).all(|(_, st, p)| {
                        *p == expected_value && (st == "accepted" || st == "rejected")
                    });
                    if verdicts.first() != Some(&"rejected")
                        || verdicts.last() != Some(&"accepted")
                        || verdicts.iter().filter(|v| **v == "accepted").count() != 1
                        || !cut_short
                        || *result != expected_value
                    {
                        bad(
                            format!("submissions {verdicts:?}, result {result}"),
                            &mut self.tally.unexpected,
                        );
                    }
                }
                Kind::Notify | Kind::Chatty => {
                    let notes = messages.iter().filter(|m| m.kind == "notify").count();
                    if notes != 1 {
                        let t = if notes > 1 {
                            &mut self.tally.doubled
                        } else {
                            &mut self.tally.lost
                        };
                        bad(format!("{notes} notify messages"), t);
                    }
                    if *result != expected_value {
                        bad(format!("result {result}"), &mut self.tally.unexpected);
                    }
                    if !matches!(plan.kind, Kind::Chatty) {
                        continue;
                    }
                    // The excess was dropped and counted, what was kept is within the budget,
                    // and the latest update of each key is the last one sent.
                    let dropped = s["events_dropped"].as_u64().unwrap_or(0);
                    self.tally.chatter_dropped += dropped;
                    let attempts = store
                        .attempts(run_id)?
                        .iter()
                        .filter(|a| a.node_id == "b")
                        .count() as i64;
                    let kept = store
                        .events(run_id, 0)?
                        .iter()
                        .filter(|e| e.kind == "progress" || e.kind == "notified")
                        .count() as i64;
                    if dropped == 0
                        || kept > piw_host::store::MAX_RUN_EVENTS
                        || kept > attempts * piw_host::store::MAX_ATTEMPT_EVENTS
                    {
                        bad(
                            format!("chatter: {kept} events kept over {attempts} attempts, {dropped} dropped"),
                            &mut self.tally.unexpected,
                        );
                    }
                    for k in 0..CHATTER_KEYS {
                        let key = format!("k{k}");
                        let last = (0..CHATTER_UPDATES).rev().find(|i| i % CHATTER_KEYS == k);
                        let latest = s["updates"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|u| u["type"] == "soak.chatter" && u["key"] == key.as_str());
                        if latest.map(|u| &u["data"]["i"]) != Some(&json!(last)) {
                            bad(
                                format!("chatter: the latest update of {key} is {latest:?}, not i={last:?}"),
                                &mut self.tally.lost,
                            );
                        }
                    }
                }
            }
        }
        let findings = store.diagnose(store.now_ms())?;
        for p in &problems {
            eprintln!("piw-soak: {p}");
        }
        for f in &findings {
            eprintln!("piw-soak: diagnose: {f:?}");
        }
        if !problems.is_empty() || !findings.is_empty() {
            eprintln!("piw-soak: the installation is kept for a look (events, hosts.log)");
            let kept = self.dir.path().to_path_buf();
            // Keep the directory: the temp dir is not removed on drop once persisted.
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir()?);
            let _ = dir.keep();
            eprintln!("piw-soak: kept {}", kept.display());
        }
        let faults: u64 = self.tally.faults.values().sum();
        let detail: Vec<String> = self
            .tally
            .faults
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!("piw-soak: faults: {}", detail.join(" "));
        eprintln!("piw-soak: first faults: {}", self.fault_log.join(" "));
        eprintln!(
            "piw-soak: chatty runs dropped {} progress and notify events over their budgets",
            self.tally.chatter_dropped
        );
        println!(
            "soak seed={} faults={faults} runs={} completed={completed} lost={} doubled={} diagnose={} review={review} frames={}",
            self.seed,
            self.plans.len(),
            self.tally.lost,
            self.tally.doubled,
            if findings.is_empty() { "clean" } else { "findings" },
            self.tally.frames,
        );
        Ok(self.tally.lost == 0
            && self.tally.doubled == 0
            && self.tally.unexpected == 0
            && findings.is_empty()
            && problems.is_empty())
    }
}

/// Clients beside the driver while faults are injected: a reader polling `run.list` and
/// `host.status`, and a watcher subscribed to the soak's session that checks each run's events
/// arrive in increasing order on one subscription. Both reconnect whenever the host goes away.
struct Background {
    stop: Arc<AtomicBool>,
    frames: Arc<AtomicU64>,
    disorder: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Background {
    fn start(paths: &PiwPaths, readers: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let frames = Arc::new(AtomicU64::new(0));
        let disorder = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for _ in 0..readers {
            let (stop, frames, paths) = (stop.clone(), frames.clone(), paths.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut c) = BlockingClient::connect(&paths) else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let _ = c.set_timeout(Some(BOUND));
                    for n in 0u64.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let body = if n & 1 == 0 {
                            RequestBody::HostStatus
                        } else {
                            RequestBody::RunList(payload::RunList {
                                limit: Some(20),
                                session_id: Some(SESSION.into()),
                                ..Default::default()
                            })
                        };
                        frames.fetch_add(1, Ordering::Relaxed);
                        if c.call(body).is_err() {
                            break;
                        }
                        frames.fetch_add(1, Ordering::Relaxed);
                        // A steady load, not a busy loop on a shared machine.
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }));
        }
        let watcher = {
            let (stop, frames, disorder, paths) = (
                stop.clone(),
                frames.clone(),
                disorder.clone(),
                paths.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let subscribed = BlockingClient::connect(&paths).and_then(|mut c| {
                        c.set_timeout(Some(Duration::from_secs(1)))?;
                        c.call(RequestBody::Subscribe(payload::Subscribe {
                            run_id: None,
                            session_id: Some(SESSION.into()),
                            all: None,
                        }))?;
                        Ok(c)
                    });
                    frames.fetch_add(1, Ordering::Relaxed);
                    let Ok(mut c) = subscribed else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    frames.fetch_add(1, Ordering::Relaxed);
                    let mut last_seq: BTreeMap<String, u64> = BTreeMap::new();
                    while !stop.load(Ordering::Relaxed) {
                        match c.next_event() {
                            Ok(e) => {
                                frames.fetch_add(1, Ordering::Relaxed);
                                let last = last_seq.entry(e.run_id.clone()).or_default();
                                if e.seq <= *last {
                                    eprintln!(
                                        "piw-soak: run {} event {} ({}) after event {}",
                                        e.run_id, e.seq, e.event_kind, last
                                    );
                                    disorder.fetch_add(1, Ordering::Relaxed);
                                }
                                *last = e.seq;
                            }
                            Err(ClientError::TimedOut) => {}
                            Err(_) => break,
                        }
                    }
                }
            })
        };
        threads.push(watcher);
        Self {
            stop,
            frames,
            disorder,
            threads,
        }
    }

    /// Stops both clients; returns the frames they sent and received and the events out of
    /// order.
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        (
            self.frames.load(Ordering::Relaxed),
            self.disorder.load(Ordering::Relaxed),
        )
    }
}

fn signal(pid: u32, sig: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: a plain system call on a process this soak started (or found carrying its own
        // installation in its environment).
        unsafe { libc::kill(pid, sig) };
    }
}
