//! Retention through the real host: `piw runs prune` (selectors, dry run, unfinished runs
//! left alone, log files removed), a prune cut short by a host kill, and the host's own
//! retention (`PIW_RETAIN_DAYS`) at start and on its timer, on the test clock.

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use piw_host::protocol::payload::{RunListCursor, RunPrune};
use piw_host::protocol::RequestBody;
use serde_json::{json, Value};

mod common;
use common::{HostProc, TempHome};

const DAY_MS: i64 = 86_400_000;

/// An installation on the test clock (`clock` beside it).
struct Env {
    home: TempHome,
}

impl std::ops::Deref for Env {
    type Target = TempHome;
    fn deref(&self) -> &TempHome {
        &self.home
    }
}

impl Env {
    fn new() -> Self {
        let home = TempHome::new();
        let clock = home.path("clock");
        Self {
            home: home.with_env("PIW_TEST_CLOCK", clock),
        }
    }

    fn clock(&self) -> PathBuf {
        self.path("clock")
    }

    /// Moves the host's test clock forward by `ms` (also while no host runs).
    fn advance_clock(&self, ms: i64) {
        let offset: i64 = std::fs::read_to_string(self.clock())
            .map(|t| t.trim().parse().unwrap())
            .unwrap_or(0);
        let tmp = self.path("clock.tmp");
        std::fs::write(&tmp, (offset + ms).to_string()).unwrap();
        std::fs::rename(&tmp, self.clock()).unwrap();
    }

    /// `piw host serve` on the test clock, with `env` added.
    fn serve(&self, env: &[(&str, &str)]) -> HostProc {
        self.home.serve_with(|cmd| {
            cmd.envs(env.iter().copied());
        })
    }

    fn stop(&self, mut host: HostProc) {
        assert!(self.piw(&["host", "stop"]).status.success());
        host.wait().unwrap();
    }

    fn piw(&self, args: &[&str]) -> Output {
        self.home.piw(args).output().expect("run piw")
    }

    fn json(&self, args: &[&str]) -> Value {
        let o = self.piw(args);
        assert!(o.status.success(), "piw {args:?}: {}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o)))
    }

    /// A one-node workflow `name` with the given behaviour of its node.
    fn workflow(&self, name: &str, behavior: Value) -> String {
        let file = self.path(&format!("{name}.workflow.json"));
        let fixture = json!({
            "graph": {"name": name, "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
            "behaviors": {"a": behavior}
        });
        std::fs::write(&file, fixture.to_string()).unwrap();
        file.display().to_string()
    }

    /// Starts a run of `file` and waits until it is in one of `statuses`; its id.
    fn run(&self, file: &str, statuses: &[&str]) -> String {
        let r = self.json(&["run", "start", file, "--session", "s1", "--json"]);
        let run_id = r["run_id"].as_str().unwrap().to_owned();
        self.wait_status(&run_id, statuses);
        run_id
    }

    /// Polls the run's status until it is in one of `statuses` (30 s: only a hang reaches it).
    fn wait_status(&self, run_id: &str, statuses: &[&str]) {
        let started = Instant::now();
        loop {
            let s = self.json(&["run", "status", run_id, "--json"]);
            if statuses.contains(&s["run"]["status"].as_str().unwrap_or_default()) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "never {statuses:?}: {s}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The ids `piw runs --all` lists, sorted.
    fn run_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.json(&["runs", "--all", "--json"])["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    }

    fn logs_of(&self, run_id: &str) -> PathBuf {
        self.paths.logs.join(run_id)
    }

    /// Waits until the run's log directory is gone: the supervisor removes it after the
    /// prune's reply (30 s: only a failure reaches it).
    fn wait_logs_gone(&self, run_id: &str) {
        let started = Instant::now();
        while self.logs_of(run_id).exists() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the logs of {run_id} are left"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_diagnose_clean(&self) {
        let o = self.piw(&["diagnose", "--json"]);
        assert!(o.status.success(), "diagnose: {}", text(&o));
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn prune_removes_only_finished_runs_and_a_dry_run_changes_nothing() {
    let env = Env::new();
    let host = env.serve(&[]);
    let done = env.workflow("done", json!({"return": {"ok": true}}));
    let fails = env.workflow("fails", json!({"fail": "no"}));
    let waits = env.workflow("waits", json!({"wait": "checkpoint"}));
    let barrier = env.path("never");
    let holds = env.workflow(
        "holds",
        json!({"wait_for_file": barrier.display().to_string()}),
    );
    let completed_a = env.run(&done, &["completed"]);
    let completed_b = env.run(&done, &["completed"]);
    let failed = env.run(&fails, &["failed"]);
    let waiting = env.run(&waits, &["waiting"]);
    let running = env.run(&holds, &["running"]);
    let all = env.run_ids();
    assert!(env.logs_of(&completed_a).is_dir());

    // A dry run names the finished runs, oldest first, and changes nothing.
    let dry = env.json(&["runs", "prune", "--keep", "0", "--dry-run", "--json"]);
    assert_eq!(dry["count"], 3, "{dry}");
    assert_eq!(
        strings(&dry["run_ids"]),
        [completed_a.clone(), completed_b.clone(), failed.clone()]
    );
    assert_eq!(env.run_ids(), all);
    let o = env.piw(&["runs", "prune", "--keep", "0", "--dry-run"]);
    assert!(
        text(&o).contains("would remove 3 finished run(s)"),
        "{}",
        text(&o)
    );

    // The protocol's pages and batches: a dry run's page continues at its cursor; a batch
    // removes at most `limit`, and `more` says to send it again.
    let mut client = piw_host::client::BlockingClient::connect(&env.paths).unwrap();
    let prune = |client: &mut piw_host::client::BlockingClient, request: RunPrune| {
        client.call(RequestBody::RunPrune(request)).unwrap().body
    };
    let first = prune(
        &mut client,
        RunPrune {
            keep: Some(0),
            dry_run: Some(true),
            limit: Some(2),
            ..Default::default()
        },
    );
    assert_eq!(first["more"], true, "{first}");
    let second = prune(
        &mut client,
        RunPrune {
            keep: Some(0),
            dry_run: Some(true),
            limit: Some(2),
            cursor: RunListCursor::decode(first["next_cursor"].as_str().unwrap()),
            ..Default::default()
        },
    );
    assert_eq!(strings(&second["run_ids"]), vec![failed.clone()]);
    assert_eq!(second["more"], false, "{second}");
    let batch = prune(
        &mut client,
        RunPrune {
            statuses: Some(vec![piw_host::store::RunStatus::Completed]),
            limit: Some(1),
            ..Default::default()
        },
    );
    assert_eq!(strings(&batch["removed"]), vec![completed_a.clone()]);
    assert_eq!(batch["more"], true, "{batch}");
    drop(client);

    // By status.
    let r = env.json(&["runs", "prune", "--status", "failed", "--json"]);
    assert_eq!(strings(&r["run_ids"]), vec![failed.clone()]);
    // By age: nothing has finished a day ago yet; then everything finished has.
    let r = env.json(&["runs", "prune", "--older-than", "1d", "--json"]);
    assert_eq!(r["removed"], 0, "{r}");
    env.advance_clock(2 * DAY_MS);
    let r = env.json(&["runs", "prune", "--older-than", "1d", "--json"]);
    assert_eq!(strings(&r["run_ids"]), vec![completed_b.clone()]);

    assert_eq!(
        env.run_ids(),
        sorted(vec![waiting.clone(), running.clone()])
    );
    for gone in [&completed_a, &completed_b, &failed] {
        env.wait_logs_gone(gone);
        let o = env.piw(&["run", "status", gone]);
        assert!(!o.status.success(), "{}", text(&o));
    }
    assert!(env.logs_of(&running).is_dir());
    env.assert_diagnose_clean();
    // Unfinished statuses are not a selector.
    let o = env.piw(&["runs", "prune", "--status", "waiting"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Nor is nothing.
    let o = env.piw(&["runs", "prune"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    std::fs::write(&barrier, "").unwrap();
    env.wait_status(&running, &["completed"]);
    env.stop(host);
}

/// A host killed on either side of a prune's commit: each run is kept or removed wholly,
/// `diagnose` is clean, and the next prune finishes the work (log files included).
#[test]
fn a_prune_cut_short_by_a_host_kill_leaves_a_consistent_store() {
    let env = Env::new();
    let done = env.workflow("done", json!({"return": {"ok": true}}));
    for point in ["before_op:prune_runs", "after_op:prune_runs"] {
        let host = env.serve(&[]);
        let runs = [
            env.run(&done, &["completed"]),
            env.run(&done, &["completed"]),
        ];
        env.stop(host);
        let mut host = env.serve(&[("PIW_FAULT", point)]);
        let o = env.piw(&["runs", "prune", "--keep", "0"]);
        assert!(!o.status.success(), "{point}: {}", text(&o));
        let status = host.wait().unwrap();
        assert!(!status.success(), "{point}: the host was not killed");

        let host = env.serve(&[]);
        env.assert_diagnose_clean();
        let left = env.run_ids();
        if point.starts_with("before") {
            assert_eq!(left, sorted(runs.to_vec()), "{point}");
        } else {
            assert!(left.is_empty(), "{point}: {left:?}");
        }
        env.json(&["runs", "prune", "--keep", "0", "--json"]);
        assert!(env.run_ids().is_empty());
        for run_id in &runs {
            env.wait_logs_gone(run_id);
        }
        env.assert_diagnose_clean();
        env.stop(host);
    }
}

/// `PIW_RETAIN_DAYS`: the host removes runs that finished long enough ago by itself, when it
/// starts and then on its own timer; unfinished runs stay.
#[test]
fn retention_applies_at_start_and_on_the_hosts_timer() {
    let env = Env::new();
    let done = env.workflow("done", json!({"return": {"ok": true}}));
    let waits = env.workflow("waits", json!({"wait": "checkpoint"}));
    let host = env.serve(&[]);
    let old = env.run(&done, &["completed"]);
    let waiting = env.run(&waits, &["waiting"]);
    env.stop(host);

    env.advance_clock(2 * DAY_MS);
    let host = env.serve(&[("PIW_RETAIN_DAYS", "1")]);
    let recent = env.run(&done, &["completed"]);
    // The pass at start ran before any request was answered.
    assert_eq!(env.run_ids(), sorted(vec![waiting.clone(), recent.clone()]));
    env.wait_logs_gone(&old);

    // A day and a bit later the timer's pass (due an hour after the last) takes `recent`:
    // the first read wakes the host asleep until its old deadline, the second is answered
    // after that pass.
    env.advance_clock(DAY_MS + 2 * 3_600_000);
    env.run_ids();
    assert_eq!(env.run_ids(), vec![waiting.clone()]);
    env.assert_diagnose_clean();
    env.stop(host);
}

/// `piw runs prune` through the real host takes a pruned run's stored values (outputs over
/// 64 KiB, kept apart in chunks) with it, and keeps a value a run that stays also holds: the
/// store's rule, checked end to end.
#[test]
fn a_prune_through_the_host_takes_the_runs_values_and_keeps_shared_ones() {
    let env = Env::new();
    let host = env.serve(&[]);
    let big = |fill: char| json!({"return": {"text": fill.to_string().repeat(200_000)}});
    let shared = env.workflow("shared", big('a'));
    let own = env.workflow("own", big('b'));
    let first = env.run(&shared, &["completed"]);
    let pruned_own = env.run(&own, &["completed"]);
    env.advance_clock(1_000);
    let kept = env.run(&shared, &["completed"]);

    let values = || -> Vec<(String, i64)> {
        let db = rusqlite::Connection::open_with_flags(
            env.paths.home.join("state.sqlite"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let mut stmt = db
            .prepare(
                "SELECT b.sha256, (SELECT count(*) FROM run_values r WHERE r.sha256 = b.sha256)
                 FROM value_blobs b ORDER BY b.sha256",
            )
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        rows
    };
    assert_eq!(values().len(), 2, "two distinct values, stored apart");

    let o = env.json(&["runs", "prune", "--keep", "1", "--json"]);
    let removed = sorted(strings(&o["run_ids"]));
    assert_eq!(removed, sorted(vec![first, pruned_own]), "{o}");
    let left = values();
    assert_eq!(left.len(), 1, "the pruned run's own value went: {left:?}");
    assert_eq!(
        left[0].1, 1,
        "the value the kept run holds stays, held once"
    );
    // The kept run's value still reads back whole.
    let out = env.piw(&["run", "value", &kept, &left[0].0]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&"a".repeat(200_000)),
        "the kept value reads back"
    );
    env.assert_diagnose_clean();
    env.stop(host);
}
