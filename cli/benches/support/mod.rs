//! What the host benches share: the bench settings and temporary directory, the machine
//! facts they print, latency samples, the bare SQLite commit floor, CPU and write counters
//! from /proc, and a real `piw host serve` process to start and stop.
//!
//! Included by each bench with `mod support;` (a `mod.rs` in a subdirectory is not a bench
//! target of its own). Not every bench uses every piece.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use piw_host::client::BlockingClient;
use piw_host::paths::PiwPaths;
use piw_host::protocol::RequestBody;
use rusqlite::{params, Connection, TransactionBehavior};

// ----- settings and the temporary directory ------------------------------------------------

/// `PIW_BENCH_SECS` if it is a positive number, else `default`.
pub fn bench_secs(default: f64) -> f64 {
    std::env::var("PIW_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(default)
}

/// The untimed warm-up before a measurement of `secs` seconds.
pub fn warm_up_for(secs: f64) -> Duration {
    Duration::from_secs_f64((secs / 10.0).clamp(0.1, 0.5))
}

/// A temporary directory under `PIW_BENCH_DIR` (default `<workspace>/target/bench-tmp`, the
/// same file system as the repository).
pub struct BenchDir {
    parent: PathBuf,
    dir: tempfile::TempDir,
}

impl BenchDir {
    pub fn create(prefix: &str) -> Self {
        let parent = std::env::var_os("PIW_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-tmp"));
        std::fs::create_dir_all(&parent).expect("create bench parent dir");
        let parent = parent.canonicalize().expect("canonical bench parent dir");
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&parent)
            .expect("create bench temp dir");
        Self { parent, dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Removes the directory, and its parent if nothing else is in it.
    pub fn close(self) {
        self.dir.close().expect("remove bench temp dir");
        // Leave target/bench-tmp itself only if something else is in it.
        let _ = std::fs::remove_dir(&self.parent);
    }
}

// ----- machine facts -----------------------------------------------------------------------

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// The header: `title`, cores, CPU model and kernel, the SQLite version with `hosts` (how the
/// hosts are configured), the temp dir's file system and the load average. The bench prints
/// its own settings after it.
pub fn print_machine(title: &str, hosts: &str, dir: &Path) {
    let cores = cores();
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
    println!("{title}");
    println!("  cores: {cores} ({cpu}); kernel {kernel}");
    println!(
        "  sqlite {} (bench floor; the host links the same bundled build); {hosts}",
        rusqlite::version()
    );
    println!("  temp dir: {} ({})", dir.display(), file_system(dir));
    println!(
        "  load average at the start: {} (other work on this machine skews every figure)",
        load_average()
    );
}

/// The first three fields of /proc/loadavg.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `stat -f` type plus the mount's type and options from /proc/mounts, as far as known.
pub fn file_system(dir: &Path) -> String {
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

// ----- latency samples ---------------------------------------------------------------------

/// Latencies in microseconds.
#[derive(Default)]
pub struct Latencies(pub Vec<f64>);

impl Latencies {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1e6);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every sample in milliseconds, in order.
    pub fn list_ms(&self) -> String {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|u| format!("{:.1}", u / 1000.0))
            .collect();
        each.join(", ")
    }

    pub fn mean(&self) -> f64 {
        self.0.iter().sum::<f64>() / self.0.len().max(1) as f64
    }

    /// Nearest-rank percentile (`q = 0` is the minimum, `q = 1` the maximum).
    pub fn p(&self, q: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = (q * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

// ----- the bare SQLite commit floor --------------------------------------------------------

/// `BEGIN IMMEDIATE; UPDATE; INSERT; COMMIT` on a WAL database with `synchronous=FULL`, the
/// inserted row carrying a bench-chosen event body.
pub struct SqliteFloor {
    conn: Connection,
    next: i64,
    /// The `data` of every inserted row (an event body like the ones the bench's host writes).
    data: &'static str,
}

pub struct Commits {
    pub lat: Latencies,
    pub elapsed: Duration,
    /// Bytes this process passed to write/pwrite per commit.
    pub wchar_per_commit: f64,
}

impl Commits {
    pub fn rate(&self) -> f64 {
        self.lat.len() as f64 / self.elapsed.as_secs_f64()
    }
}

impl SqliteFloor {
    pub fn open(path: &Path, data: &'static str) -> Self {
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
        Self {
            conn,
            next: 0,
            data,
        }
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
            .execute(params![self.next, self.data])
            .expect("insert");
        tx.commit().expect("commit");
    }

    /// Commits for `warm_up`, then times each commit until `measure_for` has passed.
    pub fn measure(&mut self, warm_up: Duration, measure_for: Duration) -> Commits {
        let start = Instant::now();
        while start.elapsed() < warm_up {
            self.commit();
        }
        let mut lat = Latencies::default();
        let wchar_before = wchar("self");
        let start = Instant::now();
        loop {
            let t = Instant::now();
            self.commit();
            lat.push(t.elapsed());
            let elapsed = start.elapsed();
            if elapsed >= measure_for {
                let wchar_per_commit = (wchar("self") - wchar_before) / lat.len() as f64;
                return Commits {
                    lat,
                    elapsed,
                    wchar_per_commit,
                };
            }
        }
    }
}

// ----- CPU and writes from /proc -----------------------------------------------------------

/// CPU seconds (user + system) of the host, its store thread, its reaped children, and this
/// process, with the time they were read; bytes the host passed to write-like calls.
pub struct CpuSnapshot {
    pub at: Instant,
    /// Bytes the host passed to write-like calls (WAL, database, replies, child stdin).
    pub host_wchar: f64,
    pub host: f64,
    pub store: f64,
    pub children: f64,
    pub bench: f64,
}

impl CpuSnapshot {
    pub fn take(host_pid: u32) -> Self {
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
            host_wchar: wchar(&host_pid.to_string()),
            host,
            store,
            children,
            bench: cpu_secs(Path::new("/proc/self/stat")).0,
        }
    }
}

/// Shares of one core between two snapshots.
pub struct CpuUse {
    pub wall: Duration,
    pub host_wchar: f64,
    pub host: f64,
    pub store: f64,
    pub children: f64,
    pub bench: f64,
}

impl CpuUse {
    pub fn between(a: &CpuSnapshot, b: &CpuSnapshot) -> Self {
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

/// Bytes process `pid` ("self" for this one) passed to write-like syscalls (`/proc/pid/io`).
pub fn wchar(pid: &str) -> f64 {
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
pub fn cpu_secs(stat: &Path) -> (f64, f64) {
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

// ----- a real host --------------------------------------------------------------------------

/// A `piw host serve` process with `PIW_HOME=<dir>/<name>`.
pub struct Host {
    child: Option<Child>,
    pub paths: PiwPaths,
    /// The bench's temporary directory the host's home is in.
    pub dir: PathBuf,
    stderr: PathBuf,
    client_timeout: Duration,
    stop_timeout: Duration,
}

impl Host {
    /// Starts `piw host serve` with `PIW_HOME=<dir>/<name>`, `PIW_LOG=warn`, its stderr in
    /// `<dir>/<name>.stderr`, and whatever `configure` adds (it runs once the home exists),
    /// and waits until it answers. Clients get `client_timeout`; `stop` waits `stop_timeout`.
    pub fn start(
        dir: &Path,
        name: &str,
        client_timeout: Duration,
        stop_timeout: Duration,
        configure: impl FnOnce(&PiwPaths, &mut Command),
    ) -> Self {
        let paths = PiwPaths::for_home(dir.join(name));
        paths.ensure_dirs().expect("create PIW_HOME");
        let stderr = dir.join(format!("{name}.stderr"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_piw"));
        cmd.args(["host", "serve"])
            .env("PIW_HOME", &paths.home)
            .env("PIW_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("host stderr file"));
        configure(&paths, &mut cmd);
        let child = cmd.spawn().expect("spawn piw host serve");
        let mut host = Self {
            child: Some(child),
            paths,
            dir: dir.to_path_buf(),
            stderr,
            client_timeout,
            stop_timeout,
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("host running").id()
    }

    pub fn client(&self) -> BlockingClient {
        let c = BlockingClient::connect(&self.paths).expect("connect to host");
        c.set_timeout(Some(self.client_timeout))
            .expect("client timeout");
        c
    }

    /// `host.stop`, then waits for a clean exit.
    pub fn stop(&mut self) {
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
            if start.elapsed() > self.stop_timeout {
                eprintln!(
                    "warning: host did not stop within {} s; killing it",
                    self.stop_timeout.as_secs()
                );
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
