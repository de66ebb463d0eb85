//! The `piw` command line: verbs, `--json`, exit codes (0 ok, 1 runtime error, 2 usage), and
//! `PIW_HOME` selecting the installation. Runs the real binary against temp homes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn piw(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_piw"))
        .args(args)
        .env("PIW_HOME", home)
        .env("PIW_LOG", "warn")
        .output()
        .expect("run piw")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = piw(&self.home, &["host", "stop"]);
    }
}

/// A copy of `examples/hello.workflow.json` beside the home.
fn hello_example(h: &Home) -> PathBuf {
    let file = h.home.with_file_name("hello.workflow.json");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/hello.workflow.json"
        ),
        &file,
    )
    .unwrap();
    file
}

fn home() -> Home {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    Home { _dir: dir, home }
}

#[test]
fn usage_errors_exit_2_and_every_verb_has_help() {
    let h = home();
    assert_eq!(piw(&h.home, &["bogus"]).status.code(), Some(2));
    assert_eq!(
        piw(&h.home, &["run", "status"]).status.code(),
        Some(2),
        "missing run id"
    );
    for verb in [
        vec!["--help"],
        vec!["host", "--help"],
        vec!["host", "start", "--help"],
        vec!["host", "serve", "--help"],
        vec!["host", "status", "--help"],
        vec!["host", "stop", "--help"],
        vec!["runs", "--help"],
        vec!["run", "start", "--help"],
        vec!["run", "status", "--help"],
        vec!["run", "pause", "--help"],
        vec!["run", "resume", "--help"],
        vec!["run", "cancel", "--help"],
        vec!["diagnose", "--help"],
        vec!["repair", "--help"],
        vec!["state", "backup", "--help"],
        vec!["state", "reset", "--help"],
    ] {
        let o = piw(&h.home, &verb);
        assert_eq!(o.status.code(), Some(0), "{verb:?}: {}", text(&o));
        assert!(text(&o).contains("Usage"), "{verb:?}");
    }
}

#[test]
fn a_workflow_runs_from_the_command_line_and_status_shows_no_secrets() {
    let h = home();
    let file = hello_example(&h);
    // No host yet: status is a runtime error.
    assert_eq!(piw(&h.home, &["host", "status"]).status.code(), Some(1));
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            file.to_str().unwrap(),
            "--input",
            r#"{"name":"cli"}"#,
            "--wait",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = json_of(&o);
    assert_eq!(run["run"]["status"], "completed");
    assert_eq!(run["run"]["result"]["greeting"], "HELLO FROM PIW");
    let run_id = run["run"]["run_id"].as_str().unwrap().to_owned();

    let runs = json_of(&piw(&h.home, &["runs", "--json"]));
    assert_eq!(runs["runs"][0]["run_id"], run_id.as_str());
    let status = piw(&h.home, &["host", "status", "--json"]);
    let s = json_of(&status);
    for field in [
        "pid",
        "epoch",
        "uptime_ms",
        "runs",
        "active_children",
        "socket",
        "database",
        "schema_id",
    ] {
        assert!(s.get(field).is_some(), "host status lacks {field}: {s}");
    }
    assert_eq!(s["runs"]["completed"], 1);
    let shown = text(&piw(&h.home, &["run", "status", &run_id, "--json"]));
    assert!(
        !shown.contains("token"),
        "status never shows token material: {shown}"
    );

    // Unknown run: runtime error with the typed message.
    let o = piw(&h.home, &["run", "cancel", "run-nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not_found"), "{}", text(&o));
    // A file no runtime can run is refused at start.
    let other = h.home.with_file_name("x.workflow.py");
    std::fs::write(&other, "print('no runtime runs me')").unwrap();
    let o = piw(&h.home, &["run", "start", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("no runtime"), "{}", text(&o));

    assert!(json_of(&piw(&h.home, &["diagnose", "--json"]))["findings"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(piw(&h.home, &["repair"]).status.code(), Some(0));
}

#[test]
fn state_backup_and_reset() {
    let h = home();
    let file = hello_example(&h);
    assert_eq!(
        piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"])
            .status
            .code(),
        Some(0)
    );
    let backup = h.home.with_file_name("backup.sqlite");
    let o = piw(&h.home, &["state", "backup", backup.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The backup is a complete, compatible state database.
    let copy = piw_core::store::Store::open_read_only(&backup, Default::default()).unwrap();
    assert_eq!(copy.list_runs(None, 10).unwrap().len(), 1);
    // Reset is refused while a host runs (it holds the installation lock), and without --yes.
    let host_pid: u32 = std::fs::read_to_string(h.home.join("host.lock"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let o = piw(&h.home, &["state", "reset", "--yes"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!("pid {host_pid}")),
        "{}",
        text(&o)
    );
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    // Stopped means the process ended, not only that its socket went away.
    assert!(!piw_core::supervise::process_alive(host_pid));
    let o = piw(&h.home, &["state", "reset"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("back it up first"), "{}", text(&o));
    assert_eq!(
        piw(&h.home, &["state", "reset", "--yes"]).status.code(),
        Some(0)
    );
    assert!(!h.home.join("state.sqlite").exists());
}

#[test]
fn wait_gives_up_after_its_timeout_and_the_run_goes_on() {
    let h = home();
    let file = h.home.with_file_name("ask.workflow.json");
    let fixture = serde_json::json!({
        "graph": {"name": "ask", "start": "ask",
                  "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                  "edges": [{"from": "ask", "to": "done"}]},
        "behaviors": {"ask": {"wait": "checkpoint"}}
    });
    std::fs::write(&file, fixture.to_string()).unwrap();
    let started = std::time::Instant::now();
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            file.to_str().unwrap(),
            "--wait",
            "--timeout",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("gave up waiting"), "{}", text(&o));
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let runs = json_of(&piw(&h.home, &["runs", "--json"]));
    assert_eq!(
        runs["runs"][0]["status"], "waiting",
        "the run goes on: {runs}"
    );
    // --timeout needs --wait.
    assert_eq!(
        piw(
            &h.home,
            &["run", "start", file.to_str().unwrap(), "--timeout", "1"]
        )
        .status
        .code(),
        Some(2)
    );
}
