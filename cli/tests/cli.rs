//! The `piw` command line: verbs, `--json`, exit codes (0 ok, 1 runtime error, 2 usage, 3
//! contradictions found by `diagnose`), and `PIW_HOME` selecting the installation. Runs the real
//! binary against temp homes.

use piw_host::store::prelude::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;

fn piw(home: &Path, args: &[&str]) -> Output {
    piw_cmd(home, args).output().expect("run piw")
}

/// `piw <args>` for the installation `home` (warnings and errors only in its log).
fn piw_cmd(home: &Path, args: &[&str]) -> Command {
    let mut cmd = common::piw_command();
    cmd.args(args).env("PIW_HOME", home).env("PIW_LOG", "warn");
    cmd
}

/// `piw <args>` started with its stdout and stderr piped.
fn spawn_piw(home: &Path, args: &[&str]) -> std::process::Child {
    piw_cmd(home, args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The id of the run `piw runs` lists first (the newest).
fn newest_run_id(home: &Path) -> String {
    let runs = json_of(&piw(home, &["runs", "--json"]));
    runs["runs"][0]["run_id"].as_str().unwrap().to_owned()
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

/// The host is stopped, and whatever the test's outcome, none of its hosts, children or
/// grandchildren outlive it.
impl Drop for Home {
    fn drop(&mut self) {
        let _ = piw(&self.home, &["host", "stop"]);
        common::kill_installation(&self.home);
    }
}

/// A copy of `examples/hello.workflow.json` beside the home.
/// Writes `fixture` as `<name>.workflow.json` beside the installation; returns its path.
fn workflow_file(h: &Home, name: &str, fixture: &serde_json::Value) -> PathBuf {
    let file = h.home.with_file_name(format!("{name}.workflow.json"));
    std::fs::write(&file, fixture.to_string()).unwrap();
    file
}

/// A workflow `ask` that waits on a checkpoint at its node `ask`, then ends at `done`.
fn ask_workflow(h: &Home) -> PathBuf {
    let fixture = serde_json::json!({
        "graph": {"name": "ask", "start": "ask",
                  "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                  "edges": [{"from": "ask", "to": "done"}]},
        "behaviors": {"ask": {"wait": "checkpoint"}}
    });
    workflow_file(h, "ask", &fixture)
}

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
    // Input that is not JSON is a usage error, found before any host is started.
    let o = piw(
        &h.home,
        &["run", "start", "x.workflow.json", "--input", "{bad"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not JSON"), "{}", text(&o));
    assert!(
        !h.home.join("state.sqlite").exists(),
        "no installation made"
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

/// A relative `PIW_HOME` would be another installation in every working directory (a host
/// started in one, a client in another, each with its own): every verb refuses it, exit 1,
/// and makes nothing.
#[test]
fn a_relative_piw_home_is_refused() {
    let cwd = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        piw_cmd(Path::new("./rel/home"), args)
            .current_dir(cwd.path())
            .output()
            .expect("run piw")
    };
    // First a verb that starts nothing even where the check is missing.
    for args in [&["host", "status"][..], &["runs"], &["host", "serve"]] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr).trim(),
            "piw: PIW_HOME must be an absolute path, got ./rel/home",
            "{args:?}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o));
    }
    assert!(
        std::fs::read_dir(cwd.path()).unwrap().next().is_none(),
        "nothing made in the working directory"
    );
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
    // In text, a completed run says so and gives its result, with no empty error line.
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("run run-") && lines[0].ends_with(" completed"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("result {") && lines[1].contains("HELLO"),
        "{stdout}"
    );

    let runs = json_of(&piw(&h.home, &["runs", "--json"]));
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == run_id.as_str()),
        "{runs}"
    );
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
    assert_eq!(s["runs"]["completed"], 2);
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
    assert!(
        text(&o).contains("piw host stop"),
        "says how to add one: {}",
        text(&o)
    );

    assert!(json_of(&piw(&h.home, &["diagnose", "--json"]))["findings"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(piw(&h.home, &["repair"]).status.code(), Some(0));
}

/// `piw run start` takes a relative file as the caller means it, from the caller's directory
/// (sent as the run's project directory), wherever the host started.
#[test]
fn run_start_resolves_a_relative_file_from_the_callers_directory() {
    let h = home();
    let file = hello_example(&h);
    let project = file.parent().unwrap().to_path_buf();
    let elsewhere = h._dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let started = piw_cmd(&h.home, &["host", "start"])
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    assert_eq!(started.status.code(), Some(0), "{}", text(&started));
    let o = piw_cmd(
        &h.home,
        &["run", "start", "hello.workflow.json", "--wait", "--json"],
    )
    .current_dir(&project)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = json_of(&o);
    assert_eq!(run["run"]["status"], "completed");
    let project = std::fs::canonicalize(&project).unwrap();
    assert_eq!(
        run["run"]["source_root"],
        project.join("hello.workflow.json").display().to_string()
    );
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
    // It holds every run's input and output: its owner's only.
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The backup is a complete, compatible state database.
    let copy = piw_host::store::Store::open_read_only(&backup, Default::default()).unwrap();
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
    assert!(!piw_host::supervise::process_alive(host_pid));
    // Without --yes: a usage error (exit 2) that says what to run.
    let o = piw(&h.home, &["state", "reset"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("back it up first"), "{}", text(&o));
    assert!(text(&o).contains("piw state reset --yes"), "{}", text(&o));
    assert_eq!(
        piw(&h.home, &["state", "reset", "--yes"]).status.code(),
        Some(0)
    );
    assert!(!h.home.join("state.sqlite").exists());
    // Again, with nothing there: it says so rather than claiming a removal.
    let o = piw(&h.home, &["state", "reset", "--yes"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o).contains("nothing to remove"), "{}", text(&o));
}

/// `piw state restore <file>` puts a backup back: refused while a host runs (naming it), it
/// says what restoring an older copy means (runs move back and may repeat their effects) and
/// asks for `--yes`; a file that is not a compatible database is refused and changes nothing.
#[test]
fn state_restore_puts_a_backup_back_only_when_no_host_runs() {
    let h = home();
    let file = hello_example(&h);
    let start = |h: &Home| {
        let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    };
    start(&h);
    let backup = h.home.with_file_name("one-run.sqlite");
    let o = piw(&h.home, &["state", "backup", backup.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    start(&h);
    let runs = |h: &Home| {
        let store =
            piw_host::store::Store::open_read_only(h.home.join("state.sqlite"), Default::default())
                .unwrap();
        store.list_runs(None, 10).unwrap().len()
    };
    assert_eq!(runs(&h), 2);

    let host_pid: u32 = std::fs::read_to_string(h.home.join("host.lock"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let o = piw(
        &h.home,
        &["state", "restore", backup.to_str().unwrap(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("pid {host_pid}")),
        "{}",
        text(&o)
    );
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));

    // Without --yes: what it means, and nothing changes.
    let o = piw(&h.home, &["state", "restore", backup.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("run again"), "{}", text(&o));
    assert!(text(&o).contains("may happen twice"), "{}", text(&o));
    assert!(text(&o).contains("piw state backup"), "{}", text(&o));
    assert_eq!(runs(&h), 2);
    // Not a database: refused, nothing changes.
    let junk = h.home.with_file_name("junk.sqlite");
    std::fs::write(&junk, "not a database").unwrap();
    let o = piw(
        &h.home,
        &["state", "restore", junk.to_str().unwrap(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(runs(&h), 2);

    let o = piw(
        &h.home,
        &["state", "restore", backup.to_str().unwrap(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("run again"), "{}", text(&o));
    assert_eq!(runs(&h), 1, "the backup's one run");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(h.home.join("state.sqlite"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // A host starts on it.
    let o = piw(&h.home, &["runs", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["runs"].as_array().unwrap().len(), 1);
}

/// After a host crash, `piw state reset --yes` first stops the children that host left
/// running (as a host's start-up recovery would): once the database is gone, nothing else
/// knows them. Before, a spinning child kept a core busy under init for ever.
#[test]
fn state_reset_stops_the_children_a_crashed_host_left_running() {
    use std::time::{Duration, Instant};
    let h = home();
    // The node starts a grandchild that writes its pid and ignores SIGTERM (as the child
    // does), then sleeps: the pid file says the node is running, past the child's hello.
    let grandchild_pid_file = h.home.with_file_name("grandchild.pid");
    let file = workflow_file(
        &h,
        "stuck",
        &serde_json::json!({
            "graph": {"name": "stuck", "start": "s", "nodes": {"s": {"kind": "compute"}}, "edges": []},
            "behaviors": {"s": {"grandchild_ignoring_term": grandchild_pid_file}}
        }),
    );
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_id = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let grandchild_pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&grandchild_pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the node never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let store =
        piw_host::store::Store::open_read_only(h.home.join("state.sqlite"), Default::default())
            .unwrap();
    let child_pid = store.children(&run_id).unwrap()[0]
        .pid
        .expect("the child's pid");
    drop(store);
    // Killed whatever the assertions below find, so nothing outlives the test.
    struct KillGroup(i32);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            // SAFETY: kill has no memory preconditions; the group is the test's own child's.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let _cleanup = KillGroup(child_pid as i32);
    let host_pid: i32 = std::fs::read_to_string(h.home.join("host.lock"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: as above; the host is the test's own.
    assert_eq!(unsafe { libc::kill(host_pid, libc::SIGKILL) }, 0);
    let started = Instant::now();
    while piw_host::supervise::process_alive(host_pid as u32) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the host did not die"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        piw_host::supervise::process_alive(child_pid),
        "the child outlived its host"
    );
    let o = piw(&h.home, &["state", "reset", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("stopped 1 child process"), "{}", text(&o));
    // The whole group went: the child and the grandchild that ignores SIGTERM.
    for pid in [child_pid, grandchild_pid] {
        assert!(!piw_host::supervise::process_alive(pid), "{pid} still runs");
    }
}

#[test]
fn wait_gives_up_after_its_timeout_and_the_run_goes_on() {
    let h = home();
    let file = ask_workflow(&h);
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
    // Its own exit code: the run did not end, nor did the wait fail.
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("gave up waiting"), "{}", text(&o));
    // What the run waits for was said, once, so the wait never looked like a hang, with the
    // command that answers it.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr.matches("waits for a checkpoint answer").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("at node ask; the run has no Pi session to answer it in"),
        "{stderr}"
    );
    let runs = json_of(&piw(&h.home, &["runs", "--json"]));
    let run_id = runs["runs"][0]["run_id"].as_str().unwrap().to_owned();
    assert!(
        stderr.contains(&format!(
            "answer it with `piw run answer {run_id} <answer>`"
        )),
        "{stderr}"
    );
    // It gave up at its timeout rather than waiting on: a bound no loaded machine misses.
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
    assert_eq!(
        runs["runs"][0]["status"], "waiting",
        "the run goes on: {runs}"
    );
    // `run wait` gives up the same way, and with --json says so as JSON.
    let o = piw(
        &h.home,
        &["run", "wait", &run_id, "--timeout", "1", "--json"],
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert_eq!(
        json_of(&o)["error"]["code"],
        "gave_up_waiting",
        "{}",
        text(&o)
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

/// What a fake host answers the CLI's `run start --wait`: the typed reply of each kind for run
/// `run-1`, which is in `status` (with the result `1`).
fn fake_wait_reply(body: &piw_host::protocol::RequestBody, status: &str) -> Value {
    use piw_host::protocol::reply::{body_of, RunQueued, RunStatusReply};
    use piw_host::protocol::RequestBody;
    use piw_host::store::{ClaimInfo, RunRecord, RunStatus};
    let reply = match body {
        RequestBody::RunStart(_) => body_of(&RunQueued {
            run_id: "run-1".into(),
            status: RunStatus::Queued,
        }),
        RequestBody::RunStatus(_) => body_of(&RunStatusReply {
            run: RunRecord {
                run_id: "run-1".into(),
                workflow_name: "x".into(),
                source_root: "/nowhere".into(),
                source_hash: String::new(),
                definition_digest: None,
                input_hash: String::new(),
                origin_session: None,
                execution_mode: "interactive".into(),
                project_dir: "/nowhere".into(),
                status: RunStatus::parse(status).expect("a run status"),
                paused: false,
                current_node: None,
                current_attempt: None,
                revision: 1,
                result: Some(serde_json::json!(1)),
                result_omitted: false,
                error: None,
                review_reason: None,
                wake_at: None,
                created_at: 0,
                updated_at: 0,
                finished_at: None,
            },
            claim: ClaimInfo {
                generation: 0,
                owner_kind: None,
                owner_id: None,
                heartbeat_at: None,
                expires_at: None,
            },
            attempts: Vec::new(),
            attempt_count: 0,
            decisions: Vec::new(),
            interactions: Vec::new(),
            effects: Vec::new(),
            last_child: None,
            updates: Vec::new(),
            events_dropped: 0,
            messages: Vec::new(),
            message_count: 0,
            step_service: None,
        }),
        _ => Ok(serde_json::json!({ "subscription_id": "sub-1" })),
    };
    reply.expect("a reply as JSON")
}

/// `run start --wait` rereads the run on events; a burst of events larger than the client's
/// event buffer (dropped, reported as `subscription_overflow`) must not end the wait. A fake
/// host sends the burst during the first status call, one more event after every status reply,
/// and reports the run completed only after many status calls.
#[test]
fn waiting_for_a_run_survives_a_burst_of_events_the_client_drops() {
    use piw_host::client::SUBSCRIPTION_BUFFER;
    use piw_host::protocol::{
        encode_frame, read_frame, Event, Limits, ProtocolSchema, Receipt, Request, RequestBody,
        ServerFrame,
    };
    use std::io::Write;

    let h = home();
    let paths = piw_host::paths::PiwPaths::for_home(h.home.clone());
    paths.ensure_dirs().unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&paths.socket).unwrap();
    let burst = SUBSCRIPTION_BUFFER as u64 + 500;
    let complete_at = SUBSCRIPTION_BUFFER as u64 + 100;
    let host = std::thread::spawn(move || {
        let limits = Limits::default();
        let event = |seq: u64| {
            encode_frame(
                &ServerFrame::Event(Event {
                    schema: ProtocolSchema,
                    subscription_id: "sub-1".into(),
                    run_id: "run-1".into(),
                    seq,
                    event_kind: "paused".into(),
                    status: "running".into(),
                    revision: seq,
                    at_ms: 0,
                    data: Value::Null,
                }),
                &limits,
            )
            .unwrap()
        };
        let (mut statuses, mut seq) = (0u64, 0u64);
        // The probe of `ensure_host`, then the CLI's connection.
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            while let Ok(Some(body)) = read_frame(&mut s, &limits) {
                let r = Request::decode(&body, &limits).unwrap();
                let mut out = Vec::new();
                if matches!(r.body, RequestBody::RunStatus(_)) {
                    statuses += 1;
                    if statuses == 1 {
                        for _ in 0..burst {
                            seq += 1;
                            out.extend(event(seq));
                        }
                    }
                }
                let status = if statuses >= complete_at {
                    "completed"
                } else {
                    "running"
                };
                let reply = fake_wait_reply(&r.body, status);
                out.extend(
                    encode_frame(
                        &ServerFrame::receipt(r.request_id.clone(), Receipt::new(None, reply)),
                        &limits,
                    )
                    .unwrap(),
                );
                if matches!(r.body, RequestBody::RunStatus(_)) {
                    seq += 1;
                    out.extend(event(seq));
                }
                if s.write_all(&out).is_err() {
                    break;
                }
            }
        }
        statuses
    });
    let o = piw(
        &h.home,
        &["run", "start", "/nowhere/x.workflow.json", "--wait"],
    );
    let statuses = host.join().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "after {statuses} status calls: {}",
        text(&o)
    );
    assert!(statuses >= complete_at, "{statuses}");
}

/// `run start --wait` against a fake host that ends the CLI's first subscription with a
/// goodbye `code` (after answering a status call with `running`); a connection opened again is
/// told the run `completed`. Returns the CLI's output and how many subscriptions it made.
fn wait_through_a_goodbye(code: piw_host::protocol::RejectionCode, message: &str) -> (Output, u32) {
    use piw_host::protocol::{
        encode_frame, read_frame, Limits, Receipt, Request, RequestBody, ServerFrame,
    };
    use std::io::Write;

    let h = home();
    let paths = piw_host::paths::PiwPaths::for_home(h.home.clone());
    paths.ensure_dirs().unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&paths.socket).unwrap();
    let message = message.to_owned();
    let host = std::thread::spawn(move || {
        let limits = Limits::default();
        let mut subscriptions = 0;
        // The probe of `ensure_host`, the CLI's connection, then the one it opens again.
        for connection in 0..3 {
            let (mut s, _) = listener.accept().unwrap();
            while let Ok(Some(body)) = read_frame(&mut s, &limits) {
                let r = Request::decode(&body, &limits).unwrap();
                let status = if connection == 2 {
                    "completed"
                } else {
                    "running"
                };
                if matches!(r.body, RequestBody::Subscribe(_)) {
                    subscriptions += 1;
                }
                let reply = fake_wait_reply(&r.body, status);
                let mut out = encode_frame(
                    &ServerFrame::receipt(r.request_id.clone(), Receipt::new(None, reply)),
                    &limits,
                )
                .unwrap();
                let goodbye = connection == 1 && matches!(r.body, RequestBody::RunStatus(_));
                if goodbye {
                    out.extend(
                        encode_frame(&ServerFrame::goodbye(code, message.clone()), &limits)
                            .unwrap(),
                    );
                }
                if s.write_all(&out).is_err() || goodbye {
                    break;
                }
            }
        }
        subscriptions
    });
    let o = piw(
        &h.home,
        &["run", "start", "/nowhere/x.workflow.json", "--wait"],
    );
    // A CLI that gave up never opened the third connection: open one, so the fake host ends.
    let _ = std::os::unix::net::UnixStream::connect(&paths.socket);
    (o, host.join().unwrap())
}

/// `run start --wait` after the host ended its subscription for falling too far behind (a
/// goodbye `subscriber_lagged`): the CLI subscribes again on a new connection and finishes the
/// wait.
#[test]
fn waiting_for_a_run_subscribes_again_when_the_host_ends_a_lagging_subscription() {
    let (o, subscriptions) = wait_through_a_goodbye(
        piw_host::protocol::RejectionCode::SubscriberLagged,
        "subscriber fell 20000 events behind; resubscribe and reread status",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(subscriptions, 2, "subscribed again after the goodbye");
    assert!(text(&o).contains("run run-1 completed"), "{}", text(&o));
}

/// A goodbye `internal` is a failure of the host, not a lagging subscription: the wait ends
/// with it (exit 1, the host's message shown) instead of subscribing again.
#[test]
fn waiting_for_a_run_reports_an_internal_goodbye_instead_of_subscribing_again() {
    let (o, subscriptions) = wait_through_a_goodbye(
        piw_host::protocol::RejectionCode::Internal,
        "cannot write to the connection",
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(subscriptions, 1, "no second subscription: {}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("(internal): cannot write to the connection"),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("completed"), "{}", text(&o));
}

/// Why a run stopped is in the plain status, not only in `--json`.
#[test]
fn run_status_says_why_a_run_could_not_load() {
    let h = home();
    let fixture = serde_json::json!({
        "graph": {"name": "bad", "start": "zzz", "nodes": {"a": {"kind": "compute"}}, "edges": []},
        "behaviors": {}
    });
    let file = workflow_file(&h, "bad", &fixture);
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    // The run id was said before the wait began.
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("started run {run_id} (short id ")),
        "{}",
        text(&o)
    );
    let o = piw(&h.home, &["run", "status", &run_id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("cannot load the workflow: start node \"zzz\""),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("failed"), "{}", text(&o));
}

/// Runs `piw` with `PIW_RUNTIMES` set (the host it starts serves that runtime too).
fn piw_with_runtime(home: &Path, runtimes: &str, args: &[&str]) -> Output {
    piw_cmd(home, args)
        .env("PIW_RUNTIMES", runtimes)
        .output()
        .expect("run piw")
}

/// Polls `piw run status --json` until the run is in one of `statuses` (30 s: only a hang
/// reaches it).
fn wait_status(home: &Path, run_id: &str, statuses: &[&str]) -> Value {
    let started = std::time::Instant::now();
    loop {
        let s = json_of(&piw(home, &["run", "status", run_id, "--json"]));
        if statuses.contains(&s["run"]["status"].as_str().unwrap_or_default()) {
            return s;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "never {statuses:?}: {s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `piw run start <file> --session s1 --json`, which must succeed: the run's id.
fn start_in_session(home: &Path, file: &Path) -> String {
    let o = piw(
        home,
        &[
            "run",
            "start",
            file.to_str().unwrap(),
            "--session",
            "s1",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    json_of(&o)["run_id"].as_str().unwrap().to_owned()
}

/// The id of the run's pending item at `node`, once the run waits there: `list` is
/// `interactions` or `decisions` (30 s: only a hang reaches it).
fn pending_at(home: &Path, run_id: &str, list: &str, node: &str) -> String {
    let id = if list == "decisions" {
        "decision_id"
    } else {
        "interaction_id"
    };
    let started = std::time::Instant::now();
    loop {
        let s = wait_status(home, run_id, &["waiting"]);
        if let Some(item) = s[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["node_id"] == node && i["status"] == "pending")
        {
            return item[id].as_str().unwrap().to_owned();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "never waiting at {node}: {s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Review is not a dead end. A run whose children kept dying (its runtime was broken) is
/// retried by a person once the cause is fixed: `piw run retry` runs the node again and the
/// run completes. A retry of a run not in review is refused.
#[test]
fn a_person_retries_a_run_in_review_from_the_command_line() {
    let h = home();
    let dir = h.home.parent().unwrap().to_path_buf();
    let fixed = dir.join("fixed");
    // The runtime fails until `fixed` exists, then is the JSON worker.
    let wrapper = dir.join("runtime.sh");
    std::fs::write(
        &wrapper,
        format!(
            "if [ -f '{}' ]; then exec '{}' \"$@\"; fi\necho 'runtime broken' >&2\nexit 3\n",
            fixed.display(),
            env!("CARGO_BIN_EXE_piw-json-worker")
        ),
    )
    .unwrap();
    let runtimes = format!(".workflow.json=/bin/sh {}", wrapper.display());
    let file = hello_example(&h);
    let o = piw_with_runtime(
        &h.home,
        &runtimes,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(json_of(&o)["run"]["status"], "review");
    std::fs::write(&fixed, "").unwrap();
    let o = piw(
        &h.home,
        &[
            "run",
            "retry",
            &run_id,
            "--reason",
            "fixed the runtime",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["status"], "queued");
    let s = wait_status(&h.home, &run_id, &["completed", "failed", "review"]);
    assert_eq!(s["run"]["status"], "completed", "{s}");
    let o = piw(&h.home, &["run", "retry", &run_id, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(json_of(&o)["error"]["code"], "invalid_transition");
}

/// An effect that may have happened (its child died while applying it, under the `never`
/// contract) stops the run for review; a person who checked records it as applied, with the
/// receipt, and the run continues without applying it again.
#[test]
fn a_person_resolves_an_uncertain_effect_from_the_command_line() {
    let h = home();
    let dir = h.home.parent().unwrap().to_path_buf();
    let ledger = dir.join("ledger.txt");
    let file = workflow_file(
        &h,
        "charge",
        &serde_json::json!({
            "graph": {"name": "charge", "start": "pay", "nodes": {"pay": {"kind": "action"}}, "edges": []},
            "behaviors": {"pay": {"effect": {"key": "charge", "contract": "never",
                "append_to": ledger, "line": "charged",
                "crash_while_applying_marker": dir.join("crashed")}}}
        }),
    );
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let status = json_of(&o);
    assert_eq!(status["run"]["status"], "review", "{status}");
    let run_id = status["run"]["run_id"].as_str().unwrap().to_owned();
    let effect = &status["effects"][0];
    assert_eq!(effect["state"], "uncertain", "{status}");
    let effect_id = effect["effect_id"].as_str().unwrap().to_owned();
    // A retry would apply it again: refused until it is resolved.
    let o = piw(&h.home, &["run", "retry", &run_id]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("uncertain"), "{}", text(&o));
    let o = piw(
        &h.home,
        &[
            "run",
            "resolve-effect",
            &run_id,
            &effect_id,
            "--applied",
            r#"{"ledger_line": 1}"#,
            "--reason",
            "checked the ledger",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["state"], "applied");
    let s = wait_status(&h.home, &run_id, &["completed", "failed", "review"]);
    assert_eq!(s["run"]["status"], "completed", "{s}");
    assert_eq!(
        s["run"]["result"],
        serde_json::json!({"receipt": {"ledger_line": 1}, "replayed": true})
    );
    let lines = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(lines.lines().count(), 1, "applied once: {lines}");
}

/// The events of a run, as `piw logs --json` prints them.
fn events_of(home: &Path, run_id: &str) -> Vec<Value> {
    let logs = json_of(&piw(home, &["logs", run_id, "--json"]));
    logs["events"].as_array().cloned().unwrap_or_default()
}

/// `piw run retry <run>` with `--reason` and more arguments; the run's status afterwards (the
/// command must succeed).
fn retry(home: &Path, run_id: &str, args: &[&str]) -> Value {
    let mut all = vec!["run", "retry", run_id, "--json"];
    all.extend_from_slice(args);
    let o = piw(home, &all);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    json_of(&o)
}

/// A workflow file edited while its run waits on a checkpoint stops the run for review once
/// the answer lets it go on (the child finds the changed source before loading it). A plain
/// retry stops it again, since the file still differs; `--accept-source` lets it go on with
/// the file as it is now, and its `retried` event keeps the decision (who, why, both hashes).
/// A run in review for another reason has no source to accept.
#[test]
fn a_person_accepts_a_changed_source_of_a_run_in_review() {
    let h = home();
    let fixture = |edited: bool| {
        serde_json::json!({
            "graph": {"name": "edit", "start": "ask",
                      "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "checkpoint"},
                          "done": {"return": {"edited": edited}}}
        })
    };
    let file = workflow_file(&h, "edit", &fixture(false));
    let run_id = start_in_session(&h.home, &file);
    let decision = pending_at(&h.home, &run_id, "decisions", "ask");
    let old_hash = piw_host::worker::hash_file(&file).unwrap();
    std::fs::write(&file, fixture(true).to_string()).unwrap();
    let new_hash = piw_host::worker::hash_file(&file).unwrap();
    let o = piw(
        &h.home,
        &["run", "answer", &run_id, "yes", "--decision", &decision],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = wait_status(&h.home, &run_id, &["review", "completed", "failed"]);
    assert_eq!(s["run"]["status"], "review", "{s}");
    let reason = s["run"]["review_reason"].as_str().unwrap().to_owned();
    assert!(reason.starts_with("source_changed: "), "{reason}");

    // The file still differs: a plain retry stops again, for the same reason.
    assert_eq!(retry(&h.home, &run_id, &[])["status"], "queued");
    let reviews = |events: &[Value]| events.iter().filter(|e| e["kind"] == "review").count();
    let started = std::time::Instant::now();
    while reviews(&events_of(&h.home, &run_id)) < 2 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "never stopped again"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let s = wait_status(&h.home, &run_id, &["review"]);
    assert!(s["run"]["review_reason"]
        .as_str()
        .unwrap()
        .starts_with("source_changed: "));

    // Accepted: the run goes on with the edited file (the answered checkpoint continues).
    let r = retry(
        &h.home,
        &run_id,
        &["--accept-source", "--reason", "the edit is wanted"],
    );
    assert_eq!(r["status"], "queued", "{r}");
    let s = wait_status(&h.home, &run_id, &["completed", "failed", "review"]);
    assert_eq!(s["run"]["status"], "completed", "{s}");
    assert_eq!(
        s["run"]["result"],
        serde_json::json!({"edited": true}),
        "{s}"
    );
    assert_eq!(s["run"]["source_hash"], new_hash.as_str(), "{s}");
    let events = events_of(&h.home, &run_id);
    let retried: Vec<&Value> = events.iter().filter(|e| e["kind"] == "retried").collect();
    assert_eq!(retried.len(), 2, "{events:?}");
    assert!(
        retried[0]["data"].get("accepted_source").is_none(),
        "{events:?}"
    );
    let decision = &retried[1]["data"];
    assert_eq!(decision["reason"], "the edit is wanted", "{decision}");
    assert!(
        !decision["by"].as_str().unwrap_or_default().is_empty(),
        "{decision}"
    );
    let accepted = &decision["accepted_source"];
    assert_eq!(accepted["old_hash"], old_hash.as_str(), "{decision}");
    assert_eq!(accepted["new_hash"], new_hash.as_str(), "{decision}");
    assert_eq!(accepted["review_reason"], reason.as_str(), "{decision}");
    // Once done, there is nothing to accept.
    let o = piw(
        &h.home,
        &["run", "retry", &run_id, "--accept-source", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(json_of(&o)["error"]["code"], "invalid_transition");

    // A run in review because its children kept dying has no changed source to accept.
    let crashing = workflow_file(
        &h,
        "crashing",
        &serde_json::json!({
            "graph": {"name": "crashing", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
            "behaviors": {"a": {"crash": "before_propose"}}
        }),
    );
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            crashing.to_str().unwrap(),
            "--wait",
            "--json",
        ],
    );
    let crashed = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    let s = wait_status(&h.home, &crashed, &["review"]);
    assert!(
        !s["run"]["review_reason"]
            .as_str()
            .unwrap()
            .starts_with("source_changed"),
        "{s}"
    );
    let o = piw(
        &h.home,
        &["run", "retry", &crashed, "--accept-source", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let error = &json_of(&o)["error"];
    assert_eq!(error["code"], "invalid_transition", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not a changed source")
            || error["message"]
                .as_str()
                .unwrap()
                .contains("another reason"),
        "{error}"
    );
    assert_eq!(
        wait_status(&h.home, &crashed, &["review"])["run"]["status"],
        "review"
    );
}

/// A source accepted as changed whose graph no longer has the node the run stands at: the
/// run is not resumed at a node that does not exist, it stops for review again saying which
/// node is missing; with that node put back and accepted, it goes on.
#[test]
fn an_accepted_source_without_the_runs_current_node_stops_for_review() {
    let h = home();
    let fixture = |ask: &str| {
        serde_json::json!({
            "graph": {"name": "renamed", "start": ask,
                      "nodes": {ask: {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                      "edges": [{"from": ask, "to": "done"}]},
            "behaviors": {ask: {"wait": "checkpoint"}, "done": {"return": {"ok": true}}}
        })
    };
    let file = workflow_file(&h, "renamed", &fixture("ask"));
    let run_id = start_in_session(&h.home, &file);
    let decision = pending_at(&h.home, &run_id, "decisions", "ask");
    std::fs::write(&file, fixture("question").to_string()).unwrap();
    let o = piw(
        &h.home,
        &["run", "answer", &run_id, "yes", "--decision", &decision],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = wait_status(&h.home, &run_id, &["review", "completed", "failed"]);
    assert_eq!(s["run"]["status"], "review", "{s}");
    retry(&h.home, &run_id, &["--accept-source"]);
    let started = std::time::Instant::now();
    let s = loop {
        let s = wait_status(&h.home, &run_id, &["review", "completed", "failed"]);
        if s["run"]["review_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no longer has the node"))
            || s["run"]["status"] != "review"
        {
            break s;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(s["run"]["status"], "review", "{s}");
    let reason = s["run"]["review_reason"].as_str().unwrap();
    assert!(reason.starts_with("source_changed: "), "{reason}");
    assert!(reason.contains("node ask"), "{reason}");
    // The answer the person gave is still the run's: put the node back, accept, go on.
    std::fs::write(&file, fixture("ask").to_string()).unwrap();
    retry(
        &h.home,
        &run_id,
        &["--accept-source", "--reason", "put ask back"],
    );
    let s = wait_status(&h.home, &run_id, &["completed", "failed"]);
    assert_eq!(s["run"]["status"], "completed", "{s}");
    assert_eq!(s["run"]["result"], serde_json::json!({"ok": true}), "{s}");
}

/// A person answers from the command line: `piw run status` shows what a waiting run asks
/// (the question, its id, the command that answers it), `piw run answer` answers a checkpoint
/// (plain text or `--input @file`), `piw run decide` a protected decision, `piw run submit` an
/// interactive step (`--input -` from stdin), and `piw run wait` re-attaches to the run.
#[test]
fn a_person_answers_decides_submits_and_waits_from_the_command_line() {
    use std::io::Write as _;
    let h = home();
    let asks = |name: &str, behavior: Value| {
        workflow_file(
            &h,
            name,
            &serde_json::json!({
                "graph": {"name": name, "start": "ask",
                          "nodes": {"ask": {"kind": behavior["kind"]}, "done": {"kind": "compute"}},
                          "edges": [{"from": "ask", "to": "done"}]},
                "behaviors": {"ask": behavior["behavior"], "done": {}}
            }),
        )
    };
    let start = |file: &Path| {
        let run_id = start_in_session(&h.home, file);
        wait_status(&h.home, &run_id, &["waiting"]);
        run_id
    };
    let wait = |run_id: &str| {
        let o = piw(
            &h.home,
            &["run", "wait", run_id, "--timeout", "30", "--json"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        json_of(&o)
    };

    // A checkpoint, answered in plain text.
    let file = asks(
        "check",
        serde_json::json!({"kind": "checkpoint", "behavior": {"wait": "checkpoint"}}),
    );
    let run_id = start(&file);
    let shown = text(&piw(&h.home, &["run", "status", &run_id]));
    assert!(
        shown.contains("waits for a checkpoint answer (dec-"),
        "{shown}"
    );
    assert!(shown.contains(r#"{"question":"continue?"}"#), "{shown}");
    assert!(
        shown.contains(&format!("piw run answer {run_id} --decision dec-")),
        "{shown}"
    );
    // The wrong command says what the run waits for instead.
    let o = piw(&h.home, &["run", "decide", &run_id, "approve"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("does not wait for a person's decision"),
        "{}",
        text(&o)
    );
    let o = piw(&h.home, &["run", "answer", &run_id, "yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let done = wait(&run_id);
    assert_eq!(done["run"]["status"], "completed");
    assert_eq!(done["run"]["result"], serde_json::json!({"answer": "yes"}));
    assert!(
        text(&piw(&h.home, &["run", "status", &run_id])).contains("\nresult {\"answer\":\"yes\"}"),
        "status shows the result"
    );

    // A checkpoint answered from a file.
    let run_id = start(&file);
    let answer = h.home.with_file_name("answer.json");
    std::fs::write(&answer, r#"{"approved": true}"#).unwrap();
    let input = format!("@{}", answer.display());
    let o = piw(&h.home, &["run", "answer", &run_id, "--input", &input]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        wait(&run_id)["run"]["result"],
        serde_json::json!({"answer": {"approved": true}})
    );

    // A protected decision.
    let file = asks(
        "decide",
        serde_json::json!({"kind": "human_decision", "behavior": {"wait": "human_decision"}}),
    );
    let run_id = start(&file);
    let o = piw(
        &h.home,
        &["run", "decide", &run_id, "approve", "looks right"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        wait(&run_id)["run"]["result"],
        serde_json::json!({"answer": {"choice": "approve", "text": "looks right"}})
    );

    // A decision whose request lists its choices: an answer that fits none is refused, naming
    // them, and the run keeps waiting for a right one.
    let file = asks(
        "decide-choices",
        serde_json::json!({"kind": "human_decision", "behavior": {"wait": "human_decision",
            "request": {"choices": [{"id": "approve"},
                                    {"id": "reject", "input": {"name": "why", "minLength": 5}}]}}}),
    );
    let run_id = start(&file);
    for (args, says) in [
        (vec!["aprove"], "with a choice of: approve, reject (with a text of at least 5 characters); got choice \"aprove\""),
        (vec!["reject", "no"], "choice reject needs a text of at least 5 characters as \"text\"; got 2 characters"),
    ] {
        let o = piw(&h.home, &[&["run", "decide", &run_id][..], &args].concat());
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains(says), "{}", text(&o));
        assert!(text(&o).contains("malformed"), "{}", text(&o));
    }
    let shown = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]));
    assert_eq!(shown["run"]["status"], "waiting", "{shown}");
    let o = piw(&h.home, &["run", "decide", &run_id, "reject", "too early"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        wait(&run_id)["run"]["result"],
        serde_json::json!({"answer": {"choice": "reject", "text": "too early"}})
    );

    // An interactive step, its result from stdin.
    let file = asks(
        "step",
        serde_json::json!({"kind": "agent", "behavior": {"interact": "agent", "validate": {"value": 42}}}),
    );
    let run_id = start(&file);
    let mut child = piw_cmd(&h.home, &["run", "submit", &run_id, "--input", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"value": 42}"#)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(wait(&run_id)["run"]["status"], "completed");
}

/// With `--json`, a failing command's error is one JSON document on stdout,
/// `{"error": {"code", "message", "details"}}`, with the same exit codes as without (1 for a
/// refusal, 2 for the command line), so a script reads one format. Without it, a line on
/// stderr. The end of a wait says how the run ended in words.
#[test]
fn json_errors_are_json_on_stdout_with_the_same_exit_codes() {
    let h = home();
    let file = hello_example(&h);
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
    let o = piw(&h.home, &["run", "cancel", "run-nope", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = json_of(&o);
    assert_eq!(err["error"]["code"], "not_found", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run-nope"),
        "{err}"
    );
    assert!(o.stderr.is_empty(), "{}", text(&o));
    // A refusal with details keeps them.
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    let o = piw(&h.home, &["run", "pause", &run_id, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = json_of(&o);
    assert_eq!(err["error"]["code"], "invalid_transition", "{err}");
    assert_eq!(err["error"]["details"]["status"], "completed", "{err}");
    // The command line: exit 2, as JSON too.
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            "x.workflow.json",
            "--input",
            "{bad",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = json_of(&o);
    assert_eq!(err["error"]["code"], "usage", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{err}"
    );
    // Without --json, the same refusal is a line on stderr and nothing on stdout.
    let o = piw(&h.home, &["run", "cancel", "run-nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("piw: not_found"),
        "{}",
        text(&o)
    );
}

/// `piw run status` shows how the run's last child ended and the end of its stderr; `--json`
/// has the whole tails (hex runs that could be tokens masked). Before, a run that stopped for
/// review after its child kept dying showed no word of what the child said.
#[test]
fn run_status_shows_the_last_childs_exit_and_stderr() {
    let h = home();
    let file = h.home.with_file_name("noisy.workflow.sh");
    std::fs::write(
        &file,
        "echo starting on stdout\necho 'token 0123456789abcdef0123456789abcdef01234567' >&2\necho 'boom: missing config' >&2\nexit 3\n",
    )
    .unwrap();
    let o = piw_cmd(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    )
    .env("PIW_RUNTIMES", ".workflow.sh=/bin/sh")
    .output()
    .unwrap();
    let run = json_of(&o);
    assert_eq!(run["run"]["status"], "review", "{}", text(&o));
    let run_id = run["run"]["run_id"].as_str().unwrap().to_owned();
    let o = piw(&h.home, &["run", "status", &run_id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = text(&o);
    assert!(shown.contains("\nlast child exited: "), "{shown}");
    assert!(shown.contains("3"), "{shown}");
    assert!(
        shown.contains("\nits stderr ends:\n  token <hex>\n  boom: missing config"),
        "{shown}"
    );
    let o = piw(&h.home, &["run", "status", &run_id, "--json"]);
    let status = json_of(&o);
    let child = &status["last_child"];
    assert_eq!(child["exit_code"], 3, "{child}");
    assert_eq!(child["stdout_tail"], "starting on stdout\n", "{child}");
    assert_eq!(
        child["stderr_tail"], "token <hex>\nboom: missing config\n",
        "{child}"
    );
}

/// `diagnose` never starts a host: with none running it reads the database itself (read-only,
/// under the installation lock), and it exits 3 when it finds contradictions.
#[test]
fn diagnose_reads_a_stopped_installation_without_starting_a_host() {
    let h = home();
    let no_host = |h: &Home| {
        let o = piw(&h.home, &["host", "status"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("no piw host is running"), "{}", text(&o));
    };
    // Nothing installed: it says so, and creates nothing to find that out.
    let o = piw(&h.home, &["diagnose"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("there is no piw installation at"),
        "{}",
        text(&o)
    );
    assert!(!h.home.exists(), "diagnose created {}", h.home.display());

    let file = hello_example(&h);
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let o = piw(&h.home, &["diagnose", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["findings"], serde_json::json!([]));
    no_host(&h);

    // A contradiction written behind the store's back: the projection says the completed run
    // is still running.
    rusqlite::Connection::open(h.home.join("state.sqlite"))
        .unwrap()
        .execute_batch("UPDATE run_views SET status = 'running'")
        .unwrap();
    let o = piw(&h.home, &["diagnose"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("projection_mismatch run run-"),
        "{}",
        text(&o)
    );
    let o = piw(&h.home, &["diagnose", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(json_of(&o)["findings"][0]["code"], "projection_mismatch");
    no_host(&h);

    // With a host running, diagnose asks that host, and finds the same.
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
    let o = piw(&h.home, &["diagnose", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(json_of(&o)["findings"][0]["code"], "projection_mismatch");
}

/// `run start --wait` outlives its host: when the host is killed, the wait starts a new one
/// (which recovers the run at once) and goes on until the run completes. A graceful stop ends
/// the wait instead: the host is not started again behind the back of whoever stopped it.
#[test]
fn waiting_for_a_run_outlives_a_host_that_was_killed_but_not_one_that_was_stopped() {
    let h = home();
    let fixture = serde_json::json!({
        "graph": {"name": "slow", "start": "a",
                  "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
                  "edges": [{"from": "a", "to": "b"}]},
        "behaviors": {"a": {"sleep_ms": 1500, "return": {"slept": true}},
                      "b": {"return": {"done": 1}}}
    });
    let file = workflow_file(&h, "slow", &fixture);
    let wait = |h: &Home| {
        spawn_piw(
            &h.home,
            &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
        )
    };
    // Until the run's first node is running (its child sleeps in it).
    let running = |h: &Home| {
        let started = std::time::Instant::now();
        loop {
            // Before the run is started there may be no installation yet (no `runs`).
            let runs = json_of(&piw(&h.home, &["runs", "--json"]));
            if runs["runs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["status"] == "running" && r["current_node"] == "a")
            {
                return;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "{runs}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let host_pid = |h: &Home| -> i32 {
        std::fs::read_to_string(h.home.join("host.lock"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };

    let waiting = wait(&h);
    running(&h);
    let killed = host_pid(&h);
    // SAFETY: a plain kill(2) of the host this test started.
    assert_eq!(unsafe { libc::kill(killed, libc::SIGKILL) }, 0);
    let o = waiting.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["run"]["status"], "completed", "{}", text(&o));
    assert_eq!(json_of(&o)["run"]["result"], serde_json::json!({"done": 1}));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("the host went away") && stderr.contains("starting it again"),
        "{stderr}"
    );
    assert_ne!(host_pid(&h), killed, "a new host serves");

    // A host stopped on purpose stays stopped; the wait ends and says why.
    let waiting = wait(&h);
    running(&h);
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let o = waiting.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("the host is stopping"), "{}", text(&o));
    let o = piw(&h.home, &["host", "status"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "no host was started again: {}",
        text(&o)
    );
}

/// `diagnose` while another process holds the installation lock and no host answers (a host
/// that is stopping, a `piw state reset`): it waits for the lock and reads the database
/// itself. It never starts a host, also not once the holder lets go.
#[test]
fn diagnose_waits_for_a_held_installation_without_starting_a_host() {
    let h = home();
    let file = hello_example(&h);
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));

    let paths = piw_host::paths::PiwPaths::for_home(h.home.clone());
    let lock = piw_host::driver::lock_installation(&paths).unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(800));
        drop(lock);
    });
    let o = piw(&h.home, &["diagnose", "--json"]);
    holder.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["findings"], serde_json::json!([]));
    let o = piw(&h.home, &["host", "status"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "diagnose started a host: {}",
        text(&o)
    );
    assert!(text(&o).contains("no piw host is running"), "{}", text(&o));
}

/// `state backup` while the host commits steadily: SQLite's online backup restarts from the
/// first page whenever another connection writes between two of its steps, so a copy made in
/// steps never finishes on a database larger than one step under steady writes. The copy must
/// be made in one read transaction (WAL: the host's commits go on meanwhile). The bound below
/// catches a backup that never ends; it is not a speed check (one takes well under a second).
#[test]
fn state_backup_finishes_while_the_host_commits_steadily() {
    use piw_host::client::BlockingClient;
    use piw_host::paths::PiwPaths;
    use piw_host::protocol::{payload, Request, RequestBody};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let h = home();
    let fixture = serde_json::json!({
        "graph": {"name": "park", "start": "ask",
                  "nodes": {"ask": {"kind": "checkpoint"}}, "edges": []},
        "behaviors": {"ask": {"wait": "checkpoint"}}
    });
    let file = workflow_file(&h, "park", &fixture);
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
    let paths = PiwPaths::for_home(h.home.clone());
    let mut client = BlockingClient::connect(&paths).unwrap();
    // About 16 MiB of state: some 4,000 pages, many backup steps of the old kind.
    let big = "x".repeat(200_000);
    let mut run_ids = Vec::new();
    for _ in 0..80 {
        let r = client
            .call(RequestBody::RunStart(payload::RunStart {
                workflow_file: file.display().to_string(),
                input: serde_json::json!(big),
                session_id: None,
                execution_mode: None,
                project_dir: None,
            }))
            .unwrap();
        run_ids.push(r.body["run_id"].as_str().unwrap().to_owned());
    }
    // Steady commits: pause and resume one run, back to back, until the backup has ended.
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = done.clone();
        let run_id = run_ids[0].clone();
        std::thread::spawn(move || {
            let mut commits = 0u64;
            while !done.load(Ordering::Relaxed) {
                for body in [RequestBody::RunPause, RequestBody::RunResume] {
                    let request =
                        Request::new(piw_host::ids::new_id("t"), body).with_run_id(run_id.clone());
                    client.send(request).unwrap();
                    commits += 1;
                }
            }
            commits
        })
    };
    let backup = h.home.with_file_name("busy-backup.sqlite");
    let mut child = spawn_piw(&h.home, &["state", "backup", backup.to_str().unwrap()]);
    let started = Instant::now();
    let finished = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    done.store(true, Ordering::Relaxed);
    let commits = writer.join().unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        finished,
        "the backup never finished under steady writes ({commits} commits meanwhile)"
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let copy = piw_host::store::Store::open_read_only(&backup, Default::default()).unwrap();
    assert_eq!(copy.list_runs(None, 100).unwrap().len(), run_ids.len());
    assert!(copy.diagnose(copy.now_ms()).unwrap().is_empty());
    // A backup that fails part-way (here: a file size limit, its signal ignored so the write
    // fails instead) leaves no file that could pass for a backup.
    let cut = h.home.with_file_name("cut-backup.sqlite");
    let o = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 64; exec \"$0\" state backup \"$1\"")
        .arg(env!("CARGO_BIN_EXE_piw"))
        .arg(&cut)
        .env("PIW_HOME", &h.home)
        .env("PIW_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!cut.exists(), "a partial backup was left: {}", text(&o));
    assert!(!cut.with_file_name("cut-backup.sqlite-journal").exists());
}

/// A host that accepts connections but does not answer (stopped here with SIGSTOP; a wedged
/// disk looks the same) must not hang `host status`, `host stop` or `diagnose` for ever: they are what a
/// user reaches for exactly then. Each gives up with exit 1, naming the pid. The 60 s bound
/// catches a hang; it is not a speed check.
#[test]
fn host_status_and_stop_give_up_on_a_host_that_does_not_answer() {
    use std::time::{Duration, Instant};
    let h = home();
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
    let host_pid: i32 = std::fs::read_to_string(h.home.join("host.lock"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Resumed (and stopped by `Home`'s drop) whatever the assertions below find.
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    // SAFETY: as above; the pid is the test's own host.
    assert_eq!(unsafe { libc::kill(host_pid, libc::SIGSTOP) }, 0);
    let _resume = Resume(host_pid);
    // `diagnose` too: it asks a running host, and gave no answer for as long as it waited.
    for verb in [&["host", "status"][..], &["host", "stop"], &["diagnose"]] {
        let mut child = spawn_piw(&h.home, verb);
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(1),
            "{verb:?} hung or failed: {}",
            text(&o)
        );
        assert!(
            text(&o).contains(&format!("pid {host_pid}")) && text(&o).contains("did not answer"),
            "{verb:?}: {}",
            text(&o)
        );
    }
}

/// `piw host stop` returns once the host has ended, also when the stop began elsewhere (a
/// SIGTERM, another `piw host stop`): a host that is stopping has no socket any more but still
/// holds the installation, and a script that runs `piw state reset --yes` next must not find
/// it there.
#[test]
fn host_stop_waits_for_a_host_that_is_already_stopping() {
    let h = home();
    // A child whose group ignores SIGTERM keeps the stopping host busy for the kill grace.
    let fixture = serde_json::json!({
        "graph": {"name": "stubborn", "start": "a",
                  "nodes": {"a": {"kind": "compute"}}, "edges": []},
        "behaviors": {"a": {
            "grandchild_ignoring_term": h.home.with_file_name("grandchild.pid")
        }}
    });
    let file = workflow_file(&h, "stubborn", &fixture);
    let start = piw_cmd(&h.home, &["host", "start"])
        .env("PIW_KILL_GRACE_MS", "3000")
        .output()
        .unwrap();
    assert_eq!(start.status.code(), Some(0), "{}", text(&start));
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let grandchild = h.home.with_file_name("grandchild.pid");
    let began = std::time::Instant::now();
    while !grandchild.exists() {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(30),
            "no grandchild"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let host_pid: i32 = std::fs::read_to_string(h.home.join("host.lock"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The stop begins elsewhere; the socket goes at once, the host ends after the grace.
    // SAFETY: kill has no memory preconditions; the pid is the test's own host.
    assert_eq!(unsafe { libc::kill(host_pid, libc::SIGTERM) }, 0);
    let socket = socket_of(&h.home);
    let began = std::time::Instant::now();
    while socket.exists() {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(60),
            "the stopping host kept its socket"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let o = piw(&h.home, &["host", "stop"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !piw_host::supervise::process_alive(u32::try_from(host_pid).unwrap()),
        "`host stop` returned while the host was still stopping: {}",
        text(&o)
    );
    assert!(text(&o).contains("piw host stopped"), "{}", text(&o));
    let o = piw(&h.home, &["state", "reset", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

fn socket_of(home: &Path) -> PathBuf {
    piw_host::paths::PiwPaths::for_home(home.to_path_buf()).socket
}

/// `piw runs` lists run records whose results together may pass the 1 MiB reply limit (ten
/// runs with results of 120 kB did; results that large are stored apart now, so here twenty
/// of 60 kB, each inline). The listing must still work: the newest runs that fit, and a note
/// saying so on stderr (stdout stays one JSON document with `--json`). `--limit` asks for
/// fewer or more.
#[test]
fn runs_lists_every_run_when_results_are_large_and_takes_a_limit() {
    use piw_host::client::BlockingClient;
    use piw_host::paths::PiwPaths;
    use piw_host::protocol::{payload, RequestBody};

    let h = home();
    // No `return`: the node's output, and so the run's result, is its input.
    let fixture = serde_json::json!({
        "graph": {"name": "echo", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
        "behaviors": {"a": {}}
    });
    let file = workflow_file(&h, "echo", &fixture);
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
    let mut client = BlockingClient::connect(&PiwPaths::for_home(h.home.clone())).unwrap();
    let big = "x".repeat(60_000);
    for _ in 0..20 {
        client
            .call(RequestBody::RunStart(payload::RunStart {
                workflow_file: file.display().to_string(),
                input: serde_json::json!(big),
                session_id: None,
                execution_mode: None,
                project_dir: None,
            }))
            .unwrap();
    }
    let begun = std::time::Instant::now();
    loop {
        let status = json_of(&piw(&h.home, &["host", "status", "--json"]));
        if status["runs"]["completed"] == 20 {
            break;
        }
        assert!(
            begun.elapsed() < std::time::Duration::from_secs(60),
            "runs did not complete: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // 1.2 MB of results do not fit one reply: every run is listed, newest first, and the
    // oldest runs' results are left out (and say so) until the list fits.
    let o = piw(&h.home, &["runs", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let runs = json_of(&o)["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 20);
    let omitted: Vec<bool> = runs
        .iter()
        .map(|r| r["result_omitted"] == true && r["result"].is_null())
        .collect();
    assert!(
        !omitted[0] && runs[0]["result"] == big.as_str(),
        "the newest keeps its result"
    );
    assert!(omitted[19], "the oldest result is left out");
    assert!(
        omitted.windows(2).all(|w| w[0] <= w[1]),
        "results are left out oldest first: {omitted:?}"
    );
    let o = piw(&h.home, &["runs"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 21);
    // `--limit` lists at most that many.
    let o = piw(&h.home, &["runs", "--json", "--limit", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["runs"].as_array().unwrap().len(), 2);
    assert!(o.stderr.is_empty(), "{}", text(&o));
    assert_eq!(
        piw(&h.home, &["runs", "--limit", "0"]).status.code(),
        Some(2)
    );
}

/// `piw state reset` without `--yes` names the backup command to run first. Copied into a
/// shell as it is, that command must work for any `PIW_HOME` (a space, a quote) and make a
/// whole backup: `piw state backup` (a `cp` of `state.sqlite` alone would miss the commits
/// still in `state.sqlite-wal`, and broke on the quote).
#[test]
fn the_backup_command_state_reset_suggests_works_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let h = Home {
        home: dir.path().join("it's a home"),
        _dir: dir,
    };
    let file = hello_example(&h);
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let o = piw(&h.home, &["state", "reset"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let message = String::from_utf8_lossy(&o.stderr).into_owned();
    let command = message
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in: {message}"));
    assert!(command.starts_with("piw state backup "), "{message}");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_piw")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ran = Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("PATH", path)
        .env("PIW_HOME", &h.home)
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{command}: {}", text(&ran));
    let backup = h.home.join("state.sqlite.bak");
    let copy = piw_host::store::Store::open_read_only(&backup, Default::default()).unwrap();
    assert_eq!(copy.list_runs(None, 10).unwrap().len(), 1);
}

/// `state backup` of an installation without a database says so in words, and creates
/// nothing (no installation, no backup file).
#[test]
fn state_backup_without_a_database_says_there_is_none() {
    let h = home();
    let backup = h.home.with_file_name("b.sqlite");
    let o = piw(&h.home, &["state", "backup", backup.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("there is no piw installation at")
            && text(&o).contains("no piw state database at"),
        "{}",
        text(&o)
    );
    assert!(!backup.exists() && !h.home.exists());
}

#[test]
fn run_start_finds_a_workflow_by_name_the_project_first_and_refuses_reserved_words() {
    let h = home();
    let project = h.home.with_file_name("project");
    let user_home = h.home.with_file_name("user");
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/hello.workflow.json"
    );
    for dir in [
        project.join(".pi/workflows"),
        user_home.join(".pi/agent/workflows"),
    ] {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(example, dir.join("greet.workflow.json")).unwrap();
    }
    let start = |name: &str| {
        piw_cmd(&h.home, &["run", "start", name, "--wait", "--json"])
            .current_dir(&project)
            .env("HOME", &user_home)
            .output()
            .expect("run piw")
    };
    let o = start("greet");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let source = json_of(&o)["run"]["source_root"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        PathBuf::from(source),
        project.join(".pi/workflows/greet.workflow.json")
    );
    std::fs::remove_file(project.join(".pi/workflows/greet.workflow.json")).unwrap();
    let o = start("greet");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        PathBuf::from(json_of(&o)["run"]["source_root"].as_str().unwrap()),
        user_home.join(".pi/agent/workflows/greet.workflow.json")
    );
    let o = start("status");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("is a subcommand word, not a workflow name"),
        "{}",
        text(&o)
    );
    let o = start("nothing-here");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        json_of(&o)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no workflow named \"nothing-here\"")),
        "{}",
        text(&o)
    );
}

/// A backup with garbage in one of its pages (the root page of `runs`: not one the schema
/// check reads) passes the schema check but SQLite calls it malformed: `piw state restore`
/// refuses it and changes nothing, and `piw diagnose` of a database so damaged reports it
/// (exit 3, `database_malformed`).
#[test]
fn a_damaged_backup_is_refused_by_restore_and_reported_by_diagnose() {
    let h = home();
    let file = hello_example(&h);
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let backup = h.home.with_file_name("backup.sqlite");
    let o = piw(&h.home, &["state", "backup", backup.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let damaged = h.home.with_file_name("damaged.sqlite");
    let (page_size, runs_root): (usize, usize) = {
        let c = rusqlite::Connection::open(&backup).unwrap();
        (
            c.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
                .unwrap() as usize,
            c.query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'runs'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap() as usize,
        )
    };
    let at = (runs_root - 1) * page_size;
    let mut bytes = std::fs::read(&backup).unwrap();
    assert!(bytes.len() > at + 200);
    bytes[at..at + 200].fill(0xA5);
    std::fs::write(&damaged, &bytes).unwrap();
    let before = std::fs::read(h.home.join("state.sqlite")).unwrap();

    let o = piw(
        &h.home,
        &["state", "restore", damaged.to_str().unwrap(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("malformed") && text(&o).contains("nothing was changed"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read(h.home.join("state.sqlite")).unwrap(),
        before,
        "the database was replaced"
    );

    // The same damage in the installation's own database.
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(h.home.join(format!("state.sqlite{suffix}")));
    }
    std::fs::copy(&damaged, h.home.join("state.sqlite")).unwrap();
    let o = piw(&h.home, &["diagnose", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(
        json_of(&o)["findings"][0]["code"],
        piw_host::store::DATABASE_MALFORMED
    );
    let o = piw(&h.home, &["diagnose"]);
    assert!(
        text(&o).starts_with("database_malformed SQLite's integrity check says"),
        "{}",
        text(&o)
    );
}

/// `piw run submit` answers the request the person meant. Without `--interaction` it binds to
/// the request the run waits for now, and refuses a result an earlier request of the run
/// already accepted: the same command run again does not answer the next visit. With
/// `--interaction`, the result a closed request took gives back the original receipt, another
/// is refused, and an equal result goes to a named open request on purpose.
#[test]
fn a_repeated_submit_from_the_command_line_does_not_answer_the_next_step() {
    let h = home();
    let file = workflow_file(
        &h,
        "two-steps",
        &serde_json::json!({
            "graph": {"name": "two-steps", "start": "a",
                      "nodes": {"a": {"kind": "agent"}, "b": {"kind": "agent"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "done"}]},
            "behaviors": {"a": {"interact": "agent"}, "b": {"interact": "agent"}, "done": {}}
        }),
    );
    let run_id = start_in_session(&h.home, &file);
    let open_at = |node: &str| pending_at(&h.home, &run_id, "interactions", node);
    let a = open_at("a");
    let shown = text(&piw(&h.home, &["run", "status", &run_id]));
    assert!(
        shown.contains(&format!("piw run submit {run_id} --interaction {a} <json>")),
        "{shown}"
    );
    let o = piw(
        &h.home,
        &["run", "submit", &run_id, r#"{"value": 1}"#, "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let first = json_of(&o)["submission_id"].as_str().unwrap().to_owned();
    let b = open_at("b");

    // The same command again: refused, and b still waits.
    let o = piw(&h.home, &["run", "submit", &run_id, r#"{"value": 1}"#]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("already accepted for interaction {a} (node a)")),
        "{}",
        text(&o)
    );
    assert_eq!(open_at("b"), b);

    // Named: the result a took gives its receipt back; another result for a is refused.
    let o = piw(
        &h.home,
        &[
            "run",
            "submit",
            &run_id,
            r#"{"value": 1}"#,
            "--interaction",
            &a,
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again = json_of(&o);
    assert_eq!(again["submission_id"], first.as_str(), "{again}");
    assert_eq!(again["repeated"], true, "{again}");
    assert_eq!(again["state"], "accepted", "{again}");
    let o = piw(
        &h.home,
        &[
            "run",
            "submit",
            &run_id,
            r#"{"value": 2}"#,
            "--interaction",
            &a,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("invalid_transition"), "{}", text(&o));
    assert_eq!(open_at("b"), b);

    // An equal result for b, named on purpose, is taken.
    let o = piw(
        &h.home,
        &[
            "run",
            "submit",
            &run_id,
            r#"{"value": 1}"#,
            "--interaction",
            &b,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let done = wait_status(&h.home, &run_id, &["completed"]);
    let outputs: Vec<_> = done["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["node_id"] == "a" || x["node_id"] == "b")
        .map(|x| (x["node_id"].clone(), x["output"].clone()))
        .collect();
    assert_eq!(outputs.len(), 2, "{done}");
}

/// `piw run start --idempotency-key K` starts at most one run for the key: the same command
/// again gives the first run back (with `--wait` too), and the key with another input is
/// refused.
#[test]
fn starting_with_an_idempotency_key_twice_gives_the_same_run() {
    let h = home();
    let file = hello_example(&h);
    let file = file.to_str().unwrap();
    let start = |extra: &[&str]| {
        piw(
            &h.home,
            &[
                &[
                    "run",
                    "start",
                    file,
                    "--idempotency-key",
                    "nightly-1",
                    "--json",
                ][..],
                extra,
            ]
            .concat(),
        )
    };
    let o = start(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let first = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    let o = start(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["run_id"], first.as_str());
    let o = start(&["--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["run"]["run_id"], first.as_str());
    let runs = json_of(&piw(&h.home, &["runs", "--json"]));
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");

    let o = start(&["--input", r#"{"other": true}"#]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(json_of(&o)["error"]["code"], "idempotency_conflict");
    // Another key: another run.
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            file,
            "--idempotency-key",
            "nightly-2",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(json_of(&o)["run_id"], first.as_str());
}

/// `piw run submit` waits for the workflow's verdict and says it: a rejected result exits 1
/// with the workflow's reason, an accepted one exits 0 with `state accepted`, a run that stops
/// for review before judging it exits 1 saying so, and no verdict within `--timeout` exits 4
/// (the submission stands).
#[test]
fn submit_waits_for_the_verdict_and_exits_by_it() {
    let h = home();
    let fixture = |name: &str, behavior: Value| {
        serde_json::json!({
            "graph": {"name": name, "start": "ask",
                      "nodes": {"ask": {"kind": "agent"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": behavior, "done": {}}
        })
    };
    let judged = workflow_file(
        &h,
        "judged",
        &fixture(
            "judged",
            serde_json::json!({"interact": "agent", "validate": {"value": 42}}),
        ),
    );
    let run_id = start_in_session(&h.home, &judged);
    pending_at(&h.home, &run_id, "interactions", "ask");

    // Rejected: exit 1 with the workflow's reason (and `--json` says it as an error).
    let o = piw(&h.home, &["run", "submit", &run_id, r#"{"value": 1}"#]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("rejected") && text(&o).contains("field value must be 42, got 1"),
        "{}",
        text(&o)
    );
    pending_at(&h.home, &run_id, "interactions", "ask");
    let o = piw(
        &h.home,
        &["run", "submit", &run_id, r#"{"value": 2}"#, "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let error = &json_of(&o)["error"];
    assert_eq!(error["code"], "submission_rejected", "{error}");
    assert_eq!(
        error["details"]["error"], "field value must be 42, got 2",
        "{error}"
    );

    // Accepted: exit 0, `state accepted`.
    pending_at(&h.home, &run_id, "interactions", "ask");
    let o = piw(&h.home, &["run", "submit", &run_id, r#"{"value": 42}"#]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("state accepted"), "{}", text(&o));
    wait_status(&h.home, &run_id, &["completed"]);

    // The run stops for review before judging (its file changed while it waited): exit 1.
    let changing = workflow_file(
        &h,
        "changing",
        &fixture("changing", serde_json::json!({"interact": "agent"})),
    );
    let run_id = start_in_session(&h.home, &changing);
    pending_at(&h.home, &run_id, "interactions", "ask");
    workflow_file(
        &h,
        "changing",
        &fixture(
            "changing",
            serde_json::json!({"interact": "agent", "validate": {"value": 7}}),
        ),
    );
    let o = piw(
        &h.home,
        &["run", "submit", &run_id, r#"{"value": 7}"#, "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let error = &json_of(&o)["error"];
    assert_eq!(error["code"], "run_in_review", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("stopped for review before judging"),
        "{error}"
    );

    // No verdict within `--timeout`: exit 4, the submission stands.
    let slow = workflow_file(
        &h,
        "slow",
        &fixture(
            "slow",
            serde_json::json!({"interact": "agent", "validate_sleep_ms": 600_000}),
        ),
    );
    let run_id = start_in_session(&h.home, &slow);
    pending_at(&h.home, &run_id, "interactions", "ask");
    let o = piw(&h.home, &["run", "submit", &run_id, "{}", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("no verdict"), "{}", text(&o));
    // With `--timeout 0` it does not wait: the state is `validating`.
    let o = piw(
        &h.home,
        &["run", "submit", &run_id, "{}", "--timeout", "0", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["state"], "validating");
}

/// `piw run answer` and `piw run decide` answer the decision the person meant, as `piw run
/// submit` does: run again, the same command does not answer the next checkpoint; named with
/// `--decision`, an answered one gives back its receipt for the same answer.
#[test]
fn a_repeated_answer_from_the_command_line_does_not_answer_the_next_checkpoint() {
    let h = home();
    let file = workflow_file(
        &h,
        "two-checks",
        &serde_json::json!({
            "graph": {"name": "two-checks", "start": "a",
                      "nodes": {"a": {"kind": "checkpoint"}, "b": {"kind": "human_decision"},
                                "c": {"kind": "human_decision"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "done"}]},
            "behaviors": {"a": {"wait": "checkpoint"}, "b": {"wait": "human_decision"},
                          "c": {"wait": "human_decision"}, "done": {}}
        }),
    );
    let run_id = start_in_session(&h.home, &file);
    let pending_at = |node: &str| pending_at(&h.home, &run_id, "decisions", node);
    let a = pending_at("a");
    let o = piw(&h.home, &["run", "answer", &run_id, "yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b = pending_at("b");
    // The same answer for a, named: its receipt; another answer for it: refused.
    let o = piw(
        &h.home,
        &["run", "answer", &run_id, "yes", "--decision", &a, "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["repeated"], true, "{}", text(&o));
    let o = piw(&h.home, &["run", "answer", &run_id, "no", "--decision", &a]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // A decision: decided, then the same command again does not decide c.
    let o = piw(&h.home, &["run", "decide", &run_id, "approve", "fine"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(b, pending_at("c"));
    let o = piw(&h.home, &["run", "decide", &run_id, "approve", "fine"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("already given to decision {b} (node b)")),
        "{}",
        text(&o)
    );
    let c = pending_at("c");
    let o = piw(
        &h.home,
        &[
            "run",
            "decide",
            &run_id,
            "approve",
            "fine",
            "--decision",
            &c,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let done = wait_status(&h.home, &run_id, &["completed"]);
    assert!(
        done["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "answered" && d["answered_by"] == "person"),
        "{done}"
    );
}

/// A checkpoint answered from the command line is a person's answer.
#[test]
fn a_checkpoint_answered_from_the_command_line_is_recorded_as_a_persons() {
    let h = home();
    let file = workflow_file(
        &h,
        "check",
        &serde_json::json!({
            "graph": {"name": "check", "start": "ask",
                      "nodes": {"ask": {"kind": "checkpoint"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "checkpoint"}, "done": {}}
        }),
    );
    let run_id = start_in_session(&h.home, &file);
    wait_status(&h.home, &run_id, &["waiting"]);
    let o = piw(&h.home, &["run", "answer", &run_id, "yes", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["answered_by"], "person", "{}", text(&o));
    let done = wait_status(&h.home, &run_id, &["completed"]);
    assert_eq!(done["decisions"][0]["answered_by"], "person", "{done}");
}

/// `--input` with an integer no 64-bit integer holds is a usage error naming it, before any
/// host starts: the JSON parser would store another value.
#[test]
fn an_input_integer_that_would_lose_its_value_is_a_usage_error() {
    let h = home();
    let file = hello_example(&h);
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            file.to_str().unwrap(),
            "--input",
            r#"{"n": 123456789012345678901234567890}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("123456789012345678901234567890 does not fit 64 bits"),
        "{}",
        text(&o)
    );
    assert!(!h.home.join("state.sqlite").exists(), "a host started");
}

/// `run start --wait --json` prints the run once its last child has exited too: the run ends
/// at the child's last word, the child a moment later, and the status printed then has its
/// exit code and the end of its output.
#[test]
fn wait_json_shows_the_last_childs_exit_once_it_exited() {
    let h = home();
    let file = workflow_file(
        &h,
        "slow-exit",
        &serde_json::json!({
            "graph": {"name": "slow-exit", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []},
            "exit_after_ms": 1_000,
            "behaviors": {"a": {"return": {"ok": true}}}
        }),
    );
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let body = json_of(&o);
    assert_eq!(body["run"]["status"], "completed", "{body:#}");
    let child = &body["last_child"];
    assert_eq!(child["exited"], true, "{body:#}");
    assert_eq!(child["exit_code"], 0, "{body:#}");
    assert!(
        child["stderr_tail"]
            .as_str()
            .is_some_and(|t| t.contains("exiting in 1000 ms")),
        "{body:#}"
    );
}

/// Only the commands that start something create an installation (`host start|serve`, `run
/// start`, `state restore`). Every command that reads one, given a `PIW_HOME` where none
/// exists (a typo), says so, exit 1 (`no_installation` with `--json`), and creates nothing: no
/// directory, no database, no host left running.
#[test]
fn read_only_commands_on_a_missing_installation_say_so_and_create_nothing() {
    let h = home();
    // A backup of nothing fails (a script must not go on as if it had a copy).
    let backup = h.home.with_file_name("backup.sqlite");
    let backup = backup.to_str().unwrap();
    for args in [
        &["state", "backup", backup][..],
        &["logs", "run-x"],
        &["runs"][..],
        &["runs", "--status", "waiting"],
        &["run", "status", "run-x"],
        &["run", "wait", "run-x"],
        &["run", "graph", "run-x"],
        &["run", "cancel", "run-x"],
        &["run", "answer", "run-x", "yes"],
        &["view", "--once"],
        &["view", "--once", "run-x"],
        &["diagnose"],
        &["repair"],
        &["host", "status"],
    ] {
        let o = piw(&h.home, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr).trim(),
            format!(
                "piw: there is no piw installation at {0} (no piw state database at {0}/state.sqlite); check PIW_HOME: `piw run start` or `piw host start` creates one",
                h.home.display()
            ),
            "{args:?}"
        );
        let o = piw(&h.home, &[args, &["--json"]].concat());
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert_eq!(json_of(&o)["error"]["code"], "no_installation", "{args:?}");
        assert!(!h.home.exists(), "{args:?} created {}", h.home.display());
        assert!(!Path::new(backup).exists(), "{args:?} wrote a backup");
    }
    // Commands that need no installation still work and create none either.
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    assert_eq!(
        piw(&h.home, &["state", "reset", "--yes"]).status.code(),
        Some(0)
    );
    assert!(!h.home.exists());
    // Starting a run creates it, and then the read-only commands read it.
    let file = hello_example(&h);
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(piw(&h.home, &["runs"]).status.code(), Some(0));
}

/// Every command that prints a result takes `--json` and its help says what it does; those
/// that had none print JSON now: `host start|stop`, `state backup|reset`, `run graph`, `view
/// --once`.
#[test]
fn every_command_takes_json_and_its_help_says_so() {
    let h = home();
    let commands: &[&[&str]] = &[
        &["host", "start"],
        &["host", "serve"],
        &["host", "status"],
        &["host", "stop"],
        &["runs"],
        &["run", "start"],
        &["run", "graph"],
        &["run", "status"],
        &["run", "pause"],
        &["run", "resume"],
        &["run", "cancel"],
        &["run", "answer"],
        &["run", "decide"],
        &["run", "submit"],
        &["run", "wait"],
        &["run", "retry"],
        &["run", "resolve-effect"],
        &["diagnose"],
        &["repair"],
        &["runs", "prune"],
        &["state", "backup"],
        &["state", "restore"],
        &["state", "reset"],
        &["view"],
    ];
    for args in commands {
        let o = piw(&h.home, &[args, &["--help"][..]].concat());
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(
            help.contains("--json") && help.contains("Print the result as one JSON document"),
            "{args:?}: {help}"
        );
        // Where a run id is taken, the help says a short id, a prefix and `last` do.
        if help.contains("<RUN_ID>") {
            assert!(
                help.contains("its short id")
                    && help.contains("a prefix of its id")
                    && help.contains("`last`"),
                "{args:?}: {help}"
            );
        }
    }

    let o = piw(&h.home, &["host", "start", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(json_of(&o)["pid"].as_u64().is_some(), "{}", text(&o));
    let file = hello_example(&h);
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    let o = piw(&h.home, &["run", "graph", &run_id, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let graph = json_of(&o);
    assert_eq!(graph["run_id"], run_id.as_str());
    assert_eq!(graph["format"], "mermaid");
    assert!(
        graph["graph"].as_str().unwrap().contains("flowchart"),
        "{graph}"
    );
    let o = piw(&h.home, &["view", "--once", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        // The run list shows its short id: the end of its id.
        json_of(&o)["frame"]
            .as_str()
            .unwrap()
            .contains(&run_id[run_id.len() - 6..]),
        "{}",
        text(&o)
    );
    // The live viewer draws a terminal: --json is for --once.
    let o = piw(&h.home, &["view", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(json_of(&o)["error"]["code"], "usage");
    let backup = h.home.with_file_name("b.sqlite");
    let o = piw(
        &h.home,
        &["state", "backup", backup.to_str().unwrap(), "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["backup"], backup.to_str().unwrap());
    let o = piw(&h.home, &["host", "stop", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o), serde_json::json!({"stopped": true}));
    let o = piw(&h.home, &["host", "stop", "--json"]);
    assert_eq!(json_of(&o), serde_json::json!({"stopped": false}));
    let o = piw(&h.home, &["state", "reset", "--yes", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["removed"], true, "{}", text(&o));
}

/// A human decision reads as its question and choices (with the text each takes), not as a
/// raw JSON line: in `run status`, and in the notice of `run start --wait`, which names the
/// command that answers it.
#[test]
fn a_human_decision_shows_as_its_question_and_choices() {
    let h = home();
    let file = workflow_file(
        &h,
        "gate",
        &serde_json::json!({
            "graph": {"name": "gate", "start": "ask",
                      "nodes": {"ask": {"kind": "human_decision"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"wait": "human_decision", "request": {
                "question": "Ship release 1.2?",
                "details": "All checks passed.",
                "choices": [{"id": "approve", "label": "Approve"},
                            {"id": "reject", "input": {"name": "why", "minLength": 5}}]}},
                          "done": {}}
        }),
    );
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
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let run_id = newest_run_id(&h.home);
    let asked = "\n  Ship release 1.2?\n  All checks passed.\n  choices:\n    approve (Approve)\n    reject + text \"why\" (at least 5 characters)";
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "answer it with `piw run decide {run_id} <choice> [text]` (or `piw run cancel {run_id}`); this command goes on waiting{asked}"
        )),
        "{stderr}"
    );
    let shown = text(&piw(&h.home, &["run", "status", &run_id]));
    let decision = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]))["decisions"][0]
        ["decision_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        shown.contains(&format!(
            "at node ask:{asked}\n  answer with `piw run decide {run_id} --decision {decision} <choice> [text]`"
        )),
        "{shown}"
    );
    assert!(!shown.contains("\"choices\""), "no raw request: {shown}");
}

/// Runs `piw` whose host (if it starts one) runs on the test clock in `clock`.
fn piw_on_clock(home: &Path, clock: &Path, args: &[&str]) -> Output {
    piw_cmd(home, args)
        .env("PIW_TEST_CLOCK", clock)
        .output()
        .expect("run piw")
}

/// `piw runs --status` filters by statuses (repeated or a comma list); times read as "10 min
/// ago" (their UTC form in `--json`); and a run id may be shortened to any prefix that names
/// one run, in every command that takes one; an ambiguous prefix lists the runs it could mean.
#[test]
fn runs_filter_by_status_show_times_as_people_read_them_and_take_run_id_prefixes() {
    let h = home();
    // The host's clock runs ten minutes behind: its runs started "10 min ago".
    let clock = h.home.with_file_name("clock");
    std::fs::write(&clock, "-600000").unwrap();
    let hello = hello_example(&h);
    let o = piw_on_clock(
        &h.home,
        &clock,
        &["run", "start", hello.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let done = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    let ask = ask_workflow(&h);
    let o = piw_on_clock(
        &h.home,
        &clock,
        &["run", "start", ask.to_str().unwrap(), "--json"],
    );
    let waiting = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    wait_status(&h.home, &waiting, &["waiting"]);

    let listed = |args: &[&str]| -> Vec<String> {
        let o = piw(&h.home, &[&["runs", "--json"][..], args].concat());
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        json_of(&o)["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(listed(&["--status", "waiting"]), vec![waiting.clone()]);
    assert_eq!(listed(&["--status", "completed"]), vec![done.clone()]);
    assert_eq!(listed(&["--status", "failed"]), Vec::<String>::new());
    assert_eq!(
        listed(&["--status", "completed,waiting"]),
        [waiting.clone(), done.clone()]
    );
    assert_eq!(
        listed(&["--status", "waiting", "--status", "completed"]),
        [waiting.clone(), done.clone()]
    );
    let o = piw(&h.home, &["runs", "--status", "bogus"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("[possible values: queued, running, waiting, review"),
        "{}",
        text(&o)
    );

    // Human form: relative times; --json keeps the milliseconds and adds UTC text.
    let table = text(&piw(&h.home, &["runs"]));
    assert!(
        table.contains("STARTED") && table.contains("ENDED"),
        "{table}"
    );
    // Each run by its short id: the end of its id.
    let line_of = |id: &str| {
        table
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.len() >= 6 && id.ends_with(w))
            })
            .unwrap_or_else(|| panic!("{id}: {table}"))
    };
    let done_line = line_of(&done);
    assert_eq!(done_line.matches("10 min ago").count(), 2, "{table}");
    let waiting_line = line_of(&waiting);
    let waiting_short = waiting_line.split_whitespace().next().unwrap();
    assert_eq!(
        waiting_line.split_whitespace().collect::<Vec<_>>(),
        // Started without a session: detached.
        [
            waiting_short,
            "waiting",
            "detached",
            "10",
            "min",
            "ago",
            "-",
            "ask",
            "ask"
        ],
        "{table}"
    );
    let runs = json_of(&piw(&h.home, &["runs", "--json", "--status", "completed"]));
    let started = runs["runs"][0]["started"].as_str().unwrap();
    assert!(started.len() == 20 && started.ends_with('Z'), "{runs}");
    assert!(runs["runs"][0]["ended"].as_str().is_some(), "{runs}");
    assert!(runs["runs"][0]["created_at"].as_u64().is_some(), "{runs}");
    let shown = text(&piw(&h.home, &["run", "status", &done]));
    assert!(
        shown.contains("\nstarted 10 min ago (") && shown.contains("\nended 10 min ago ("),
        "{shown}"
    );

    // A prefix that names one run is that run, in every command.
    let common = done
        .chars()
        .zip(waiting.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let (done_prefix, waiting_prefix) = (&done[..common + 1], &waiting[..common + 1]);
    let o = piw(&h.home, &["run", "status", done_prefix, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["run"]["run_id"], done.as_str());
    let o = piw(&h.home, &["run", "graph", done_prefix]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = piw(&h.home, &["view", "--once", done_prefix]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(&done), "{}", text(&o));
    let o = piw(&h.home, &["run", "answer", waiting_prefix, "yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = piw(
        &h.home,
        &["run", "wait", waiting_prefix, "--timeout", "30", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["run"]["run_id"], waiting.as_str());

    // A prefix of both: a usage error naming them.
    let both = &done[..common];
    let o = piw(&h.home, &["run", "status", both]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains(&format!("run id \"{both}\" is ambiguous: it begins 2 runs"))
            && said.contains(&format!(
                "\n  {waiting}  completed  ask  started 10 min ago"
            ))
            && said.contains(&format!("\n  {done}  completed  hello  started 10 min ago")),
        "{said}"
    );
    let o = piw(&h.home, &["run", "cancel", both, "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = json_of(&o);
    assert_eq!(err["error"]["code"], "ambiguous_run_id", "{err}");
    assert_eq!(
        err["error"]["details"]["candidates"],
        serde_json::json!([waiting, done])
    );
    // A prefix of nothing is an unknown run, as before.
    let o = piw(&h.home, &["run", "status", "run-zzz", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(json_of(&o)["error"]["code"], "not_found");
}

/// `piw completions bash|zsh|fish` prints a script generated from the grammar; in a real bash
/// it completes commands and run ids (from the installation, through `piw` itself). `piw man`
/// prints the man page.
#[test]
fn completions_complete_commands_and_run_ids_and_man_prints_the_page() {
    let h = home();
    for shell in ["bash", "zsh", "fish"] {
        let o = piw(&h.home, &["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(script.contains("PIW_COMPLETE"), "{shell}: {script}");
    }
    assert!(!h.home.exists(), "completions created an installation");
    let o = piw(&h.home, &["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH piw"),
        "{page}"
    );
    assert!(
        page.contains("completions") && page.contains("diagnose"),
        "{page}"
    );
    // One command's page, and every page for a man path.
    let o = piw(&h.home, &["man", "run", "start"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.contains(".TH piw-run-start 1") && page.contains("timeout"),
        "{page}"
    );
    assert_eq!(
        piw(&h.home, &["man", "run", "bogus"]).status.code(),
        Some(2)
    );
    let pages = h.home.with_file_name("man1");
    std::fs::create_dir_all(&pages).unwrap();
    let o = piw(&h.home, &["man", "--dir", pages.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for name in [
        "piw.1",
        "piw-run-start.1",
        "piw-logs.1",
        "piw-state-reset.1",
    ] {
        assert!(pages.join(name).is_file(), "{name}");
    }

    let file = hello_example(&h);
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    // `piw` on PATH, as the script calls it.
    let bin = h.home.with_file_name("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_piw"), bin.join("piw")).unwrap();
    let script = h.home.with_file_name("piw.bash");
    std::fs::write(&script, &piw(&h.home, &["completions", "bash"]).stdout).unwrap();
    let complete = |words: &str| -> String {
        let o = Command::new("bash")
            .arg("--norc")
            .arg("-c")
            .arg(format!(
                r#"source "$1"; COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMP_TYPE=9
                   _clap_complete_piw piw "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
                   printf '%s\n' "${{COMPREPLY[@]}}""#
            ))
            .arg("bash")
            .arg(&script)
            .env("PIW_HOME", &h.home)
            .env("PIW_LOG", "warn")
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let words = complete("piw ru");
    assert!(
        words.lines().any(|w| w == "run") && words.lines().any(|w| w == "runs"),
        "{words}"
    );
    let words = complete(&format!("piw run status {}", &run_id[..6]));
    assert_eq!(words.trim(), run_id, "{words}");
    let words = complete("piw runs --status wa");
    assert_eq!(words.trim(), "waiting", "{words}");
    let words = complete(&format!("piw view {}", &run_id[..6]));
    assert_eq!(words.trim(), run_id, "{words}");
}

/// `piw logs` reads the database itself and starts no host (`--follow` too, for a run that
/// ended), and says `ok` for a step that succeeded, as every other client word does.
#[test]
fn logs_start_no_host_and_say_ok_for_a_step_that_succeeded() {
    let h = home();
    let file = hello_example(&h);
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let socket = piw_host::paths::PiwPaths::for_home(h.home.clone()).socket;
    assert!(!socket.exists());

    let o = piw(&h.home, &["logs", &run_id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    let moves: Vec<&str> = shown
        .lines()
        .filter(|l| l.contains(" transitioned "))
        .collect();
    assert_eq!(moves.len(), 3, "{shown}");
    for line in moves {
        assert!(line.contains(r#""outcome":"ok""#), "{line}");
    }
    assert!(!shown.contains("succeeded"), "{shown}");
    let o = piw(&h.home, &["logs", &run_id, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let events = json_of(&o)["events"].clone();
    let outcomes: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "transitioned")
        .map(|e| &e["data"]["outcome"])
        .collect();
    assert_eq!(outcomes, [&Value::from("ok"); 3], "{events}");
    let o = piw(&h.home, &["logs", &run_id, "--follow"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!socket.exists(), "piw logs started a host");
}

/// `piw logs <run>` prints every child's whole output (each attempt's child, not the last
/// 64 KiB of the last one), masked like `run status`, and the run's events; `--json` has the
/// same as data. `piw state reset` removes the logs with the state.
#[test]
fn logs_show_every_childs_whole_output_and_the_events() {
    let h = home();
    let file = h.home.with_file_name("noisy.workflow.sh");
    std::fs::write(
        &file,
        "echo first line of child\necho 'token 0123456789abcdef0123456789abcdef01234567' >&2\nhead -c 100000 /dev/zero | tr '\\0' x\necho\necho 'last line' >&2\nexit 3\n",
    )
    .unwrap();
    let o = piw_with_runtime(
        &h.home,
        ".workflow.sh=/bin/sh",
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    let run = json_of(&o);
    assert_eq!(run["run"]["status"], "review", "{}", text(&o));
    let run_id = run["run"]["run_id"].as_str().unwrap().to_owned();
    let children = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]))["run"].clone();
    assert_eq!(children["status"], "review");

    let o = piw(&h.home, &["logs", &run_id[..run_id.len() - 4]]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    // Three children were lost before the run stopped for review: each one's output, whole.
    let headers: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("== child "))
        .collect();
    assert_eq!(headers.len(), 3, "{headers:#?}");
    for (n, header) in headers.iter().enumerate() {
        assert!(
            header.starts_with(&format!(
                "== child {} (claim generation {}, pid ",
                n + 1,
                n + 1
            )) && header.ends_with("): exited with code 3 =="),
            "{header}"
        );
    }
    // The children's output, then the events (whose loss reasons quote the stderr too).
    let output = &shown[..shown.find("\n-- #1 ").unwrap()];
    assert_eq!(
        output.matches("first line of child\n").count(),
        3,
        "{}",
        &output[..300]
    );
    assert_eq!(output.matches("last line").count(), 3);
    // Every x the children wrote (the headers' "exited" and the masks' "<hex>" aside; a
    // stderr line may land inside the x's, as it came between two reads of stdout).
    let xs = output.matches('x').count()
        - output.matches("exited").count()
        - output.matches("<hex>").count();
    assert_eq!(xs, 3 * 100_000, "every byte, past the 64 KiB tails");
    assert_eq!(output.matches("token <hex>").count(), 3);
    assert!(
        !shown.contains("0123456789abcdef0123"),
        "a token-shaped run is masked"
    );
    assert!(shown.contains("\n-- #1 ") && shown.contains(" started {\"workflow\":\"noisy\"}"));
    assert!(shown.contains(" child_lost "), "the events are there");

    let logs = json_of(&piw(&h.home, &["logs", &run_id, "--json"]));
    assert_eq!(logs["run_id"], run_id.as_str());
    assert_eq!(logs["status"], "review");
    let children = logs["children"].as_array().unwrap();
    assert_eq!(children.len(), 3, "{logs}");
    for c in children {
        let output = c["output"].as_str().unwrap();
        // stdout and stderr in the order the host read them (which of two pipes is read
        // first is the scheduler's choice).
        assert!(
            output.contains("first line of child\n"),
            "{}",
            &output[..40]
        );
        assert!(output.contains("token <hex>\n"), "{}", &output[..40]);
        assert_eq!(
            output.matches('x').count(),
            100_000 + 1,
            "and the x of <hex>"
        );
        assert!(Path::new(c["child"]["log"].as_str().unwrap()).is_file());
    }
    assert_eq!(logs["events"][0]["kind"], "started", "{logs}");
    assert!(logs["events"][0]["time"].as_str().unwrap().ends_with('Z'));

    // A reader that stops early (`| head`) ends it quietly: more output than a pipe holds,
    // one line read, the pipe closed.
    {
        use std::io::BufRead as _;
        let mut head = spawn_piw(&h.home, &["logs", &run_id]);
        let mut first = String::new();
        std::io::BufReader::new(head.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.starts_with("== child 1 "), "{first}");
        let o = head.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(o.stderr.is_empty(), "{}", text(&o));
    }
    let o = piw(&h.home, &["logs", "run-nope", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(json_of(&o)["error"]["code"], "not_found");

    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    assert!(h.home.join("logs").join(&run_id).is_dir());
    // A detached run's bridge lock (node-binding/src/bridge.rs) belongs to the state too.
    std::fs::create_dir_all(h.home.join("bridges")).unwrap();
    std::fs::write(h.home.join("bridges").join(format!("{run_id}.lock")), "1").unwrap();
    let o = piw(&h.home, &["state", "reset", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !h.home.join("logs").exists(),
        "the logs went with the state"
    );
    assert!(
        !h.home.join("bridges").exists(),
        "the bridge locks went with the state"
    );
}

/// `piw logs --follow` prints the output as the child writes it and the events as they come,
/// and ends by itself when the run ends.
#[test]
fn logs_follow_prints_output_and_events_live_until_the_run_ends() {
    use std::io::BufRead as _;
    use std::time::{Duration, Instant};
    let h = home();
    let barrier = h.home.with_file_name("go-on");
    let file = h.home.with_file_name("slow.workflow.sh");
    std::fs::write(
        &file,
        format!(
            "echo before the barrier\nwhile [ ! -e '{}' ]; do sleep 0.05; done\necho after the barrier\nexit 3\n",
            barrier.display()
        ),
    )
    .unwrap();
    let o = piw_with_runtime(
        &h.home,
        ".workflow.sh=/bin/sh",
        &["run", "start", file.to_str().unwrap(), "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_id = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    let mut follow = spawn_piw(&h.home, &["logs", &run_id, "--follow"]);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let mut wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !seen.iter().any(|l| l.contains(what)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("no {what:?} within 30 s; printed so far: {seen:#?}"),
            }
        }
        seen.clone()
    };
    // The child is blocked at the barrier: its first line is printed while it still runs.
    let lines = wait_for("before the barrier");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("== child 1 ") && l.ends_with(": running ==")),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.contains("after the barrier")));
    std::fs::write(&barrier, "").unwrap();
    wait_for("after the barrier");
    // The run stops for review after its children are lost; a cancel ends it, and the follow.
    wait_for(" child_lost ");
    wait_status(&h.home, &run_id, &["review"]);
    assert_eq!(
        piw(&h.home, &["run", "cancel", &run_id]).status.code(),
        Some(0)
    );
    let lines = wait_for(" cancelled ");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = follow.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the follow did not end: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{lines:#?}");
}

/// `piw run start builtin:<id>` runs the package's built-in (found from the checkout `piw` runs
/// from, or `PIW_BUILTINS_DIR`); a bare id finds it after the project's and the user's files, so
/// a project file of the same name overrides it.
#[test]
fn run_start_finds_a_built_in_by_prefix_and_by_name_after_the_files() {
    let h = home();
    let project = h.home.with_file_name("project");
    let user_home = h.home.with_file_name("user");
    std::fs::create_dir_all(project.join(".pi/workflows")).unwrap();
    std::fs::create_dir_all(&user_home).unwrap();
    // plan-approval names the plan it decides on by the digest of its canonical JSON.
    let plan = "add a test, then fix it";
    let digest = piw_host::ids::sha256_hex(format!("{plan:?}").as_bytes());
    let input = format!(
        r#"{{"task":"fix the parser","plan":"{plan}","planDigest":"sha256:{digest}","mode":"skip"}}"#
    );
    let input = input.as_str();
    let start = |name: &str, builtins: Option<&Path>| {
        let mut cmd = piw_cmd(
            &h.home,
            &["run", "start", name, "--input", input, "--wait", "--json"],
        );
        cmd.current_dir(&project)
            .env("HOME", &user_home)
            .env_remove("PIW_BUILTINS_DIR")
            .env_remove("PIW_NODE_WORKER");
        if let Some(dir) = builtins {
            cmd.env("PIW_BUILTINS_DIR", dir);
        }
        cmd.output().expect("run piw")
    };
    let shipped = std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../node-binding/builtins"
    ))
    .unwrap();
    for name in ["builtin:plan-approval", "plan-approval"] {
        let o = start(name, None);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        let run = &json_of(&o)["run"];
        assert_eq!(run["status"], "completed", "{name}: {run}");
        assert_eq!(run["result"]["status"], "continue", "{name}: {run}");
        assert_eq!(
            std::fs::canonicalize(run["source_root"].as_str().unwrap()).unwrap(),
            shipped.join("plan-approval.workflow.mjs")
        );
    }
    // A project file of the same name wins by name; the prefix still names the built-in.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/hello.workflow.json"
    );
    let own = project.join(".pi/workflows/plan-approval.workflow.json");
    std::fs::copy(example, &own).unwrap();
    let o = start("plan-approval", None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        PathBuf::from(json_of(&o)["run"]["source_root"].as_str().unwrap()),
        own
    );
    let o = start("builtin:plan-approval", None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::canonicalize(json_of(&o)["run"]["source_root"].as_str().unwrap()).unwrap(),
        shipped.join("plan-approval.workflow.mjs")
    );
    // PIW_BUILTINS_DIR names the folder; an unknown id is refused naming it.
    let elsewhere = h.home.with_file_name("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let o = start("builtin:plan-approval", Some(&elsewhere));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let message = json_of(&o)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("no built-in workflow \"plan-approval\"")
            && message.contains(&elsewhere.display().to_string()),
        "{message}"
    );
}

/// Ends `n` runs in the installation's database without a host (started and cancelled in the
/// store, a few transactions): a list of thousands of runs without launching thousands of
/// children. The host must not be running.
fn seed_ended_runs(h: &Home, n: usize) -> Vec<String> {
    use piw_host::store::{ExecutionMode, Fence, NewRun, Store};
    let mut store = Store::open(h.home.join("state.sqlite"), Default::default()).unwrap();
    let mut ids = Vec::new();
    for chunk in 0..n.div_ceil(500) {
        let batch = (n - chunk * 500).min(500);
        ids.extend(
            store
                .write(|w| {
                    (0..batch)
                        .map(|_| {
                            let run_id = w.start_run(&NewRun {
                                workflow_name: "seeded".into(),
                                source_root: "/nowhere/seeded.workflow.json".into(),
                                source_hash: "0".into(),
                                mounted_sources: serde_json::json!({}),
                                definition: None,
                                input: serde_json::json!(null),
                                origin_session: None,
                                execution_mode: ExecutionMode::Detached,
                                project_dir: "/nowhere".into(),
                            })?;
                            w.cancel(&run_id, Fence::Unclaimed, "seeded")?;
                            Ok(run_id)
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap(),
        );
    }
    ids
}

/// `piw runs` reaches every run however many there are: the newest 100 with a hint of the
/// rest, `--all` pages through all 2,100 (one JSON document), `--limit` past one reply pages
/// too, and `--cursor` continues a list exactly where it ended while runs start meanwhile.
/// Without paging the host refused a list this long as too large for a frame.
#[test]
fn runs_lists_thousands_of_runs_a_page_at_a_time() {
    use std::collections::BTreeSet;
    let h = home();
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let seeded = seed_ended_runs(&h, 2_100);
    let ids = |doc: &Value| -> Vec<String> {
        doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    };

    let o = piw(&h.home, &["runs"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 101);
    let hint = String::from_utf8_lossy(&o.stderr);
    assert!(
        hint.contains("piw runs --all") && hint.contains("--cursor r2."),
        "{hint}"
    );

    let o = piw(&h.home, &["runs", "--all", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let all = json_of(&o);
    assert_eq!(all["more"], false);
    assert_eq!(all["next_cursor"], Value::Null);
    let listed = ids(&all);
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!((listed.len(), unique.len()), (2_100, 2_100));
    assert!(seeded.iter().all(|id| unique.contains(id)));

    // More than one reply holds, then the rest from its cursor, with a run started between.
    let o = piw(&h.home, &["runs", "--json", "--limit", "2050"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let first = json_of(&o);
    assert_eq!(first["more"], true);
    let first_ids = ids(&first);
    assert_eq!(first_ids.len(), 2_050);
    let file = hello_example(&h);
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let newer = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    let cursor = first["next_cursor"].as_str().unwrap();
    let o = piw(&h.home, &["runs", "--json", "--cursor", cursor]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rest = json_of(&o);
    assert_eq!(rest["more"], false);
    let rest_ids = ids(&rest);
    assert_eq!(rest_ids.len(), 50);
    assert!(
        !rest_ids.contains(&newer),
        "a newer run is not after the cursor"
    );
    let together: BTreeSet<&String> = first_ids.iter().chain(&rest_ids).collect();
    assert_eq!(together.len(), 2_100);
    assert!(seeded.iter().all(|id| together.contains(id)));

    let o = piw(&h.home, &["runs", "--cursor", "page-2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(
        piw(&h.home, &["runs", "--all", "--limit", "5"])
            .status
            .code(),
        Some(2)
    );
}

/// A run waiting on a durable timer says when it wakes in `piw run status` (text and
/// `--json`) and `piw runs`; it holds no child meanwhile, and it goes on when the host's clock
/// reaches that time.
#[test]
fn a_waiting_runs_wake_time_shows_in_status_and_runs_and_it_goes_on_then() {
    let h = home();
    let clock = h.home.with_file_name("clock");
    std::fs::write(&clock, "0").unwrap();
    let nap = workflow_file(
        &h,
        "nap",
        &serde_json::json!({
            "graph": {"name": "nap", "start": "nap",
                      "nodes": {"nap": {"kind": "wait"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "nap", "to": "done"}]},
            "behaviors": {"nap": {"timer": {"for_ms": 7_200_000}, "return": {"slept": true}}}
        }),
    );
    let o = piw_on_clock(
        &h.home,
        &clock,
        &["run", "start", nap.to_str().unwrap(), "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_id = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    let s = wait_status(&h.home, &run_id, &["waiting"]);
    let wake_at = s["run"]["wake_at"].as_u64().expect("wake_at in --json");
    let o = piw(&h.home, &["run", "status", &run_id]);
    let shown = text(&o);
    let line = shown
        .lines()
        .find(|l| l.starts_with("wakes "))
        .unwrap_or_else(|| panic!("no wakes line: {shown}"));
    assert!(line.starts_with("wakes in 2 h ("), "{shown}");
    let o = piw(&h.home, &["runs"]);
    assert!(text(&o).contains("nap · wakes in 2 h ("), "{}", text(&o));
    let o = piw(&h.home, &["runs", "--json"]);
    let listed = &json_of(&o)["runs"][0];
    assert_eq!(listed["wake_at"], serde_json::json!(wake_at));
    assert!(listed["wakes"].as_str().unwrap().ends_with('Z'), "{listed}");
    // The child that set the timer exits; none runs while the run waits.
    let started = std::time::Instant::now();
    loop {
        let o = piw(&h.home, &["host", "status", "--json"]);
        if json_of(&o)["active_children"] == serde_json::json!(0) {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "a child still runs: {}",
            text(&o)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::fs::write(&clock, "7200000").unwrap();
    let s = wait_status(&h.home, &run_id, &["completed", "failed"]);
    assert_eq!(s["run"]["status"], "completed", "{s}");
    assert_eq!(s["run"]["result"], serde_json::json!({"slept": true}));
}

/// A node's output over 64 KiB is stored apart: `run status --json` and `run start --wait
/// --json` print it whole, `run status` its start and size, and `run value` prints it alone;
/// the next node reads it whole.
#[test]
fn a_large_output_is_printed_whole_with_json_and_as_a_preview_without() {
    let h = home();
    let file = workflow_file(
        &h,
        "big",
        &serde_json::json!({
            "graph": {"name": "big", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}]},
            "behaviors": {"a": {"return_bytes": 2_000_000}, "b": {}}
        }),
    );
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = json_of(&o);
    let blob = "b".repeat(2_000_000);
    // `b` returned its input: `a`'s output, read back whole by the child that ran `b`.
    assert_eq!(run["run"]["result"]["blob"], blob.as_str());
    let run_id = run["run"]["run_id"].as_str().unwrap().to_owned();
    let status = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]));
    for a in status["attempts"].as_array().unwrap() {
        assert_eq!(a["output"]["blob"], blob.as_str(), "{}", a["node_id"]);
    }
    let o = piw(&h.home, &["run", "status", &run_id]);
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    let result = shown.lines().find(|l| l.starts_with("result ")).unwrap();
    assert!(
        result.starts_with(r#"result {"blob":"bbb"#)
            && result.ends_with("`--json` prints it whole)"),
        "{result}"
    );
    assert!(result.len() < 400, "{result}");
    // The value by its hash, alone.
    let store =
        piw_host::store::Store::open_read_only(h.home.join("state.sqlite"), Default::default())
            .unwrap();
    let sha256 = store.attempts(&run_id).unwrap()[0].output.as_ref().unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = piw(&h.home, &["run", "value", &run_id, &sha256]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_of(&o)["blob"], blob.as_str());
    // Its exact stored bytes: they hash to its name.
    assert_eq!(piw_host::engine::ids::sha256_hex(&o.stdout), sha256);
    // A reader that goes away (`| head`) ends it quietly: no panic, exit 0.
    let mut child = spawn_piw(&h.home, &["run", "value", &run_id, &sha256]);
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    // `a`'s output, `b`'s (its input, the same value, sent again by a new child) and the
    // run's result: one value stored once.
    let db = rusqlite::Connection::open(h.home.join("state.sqlite")).unwrap();
    let (values, bytes): (i64, i64) = db
        .query_row(
            "SELECT COUNT(*), (SELECT SUM(length(data)) FROM value_chunks) FROM value_blobs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((values, bytes), (1, 2_000_011));
    assert_eq!(
        json_of(&piw(&h.home, &["diagnose", "--json"]))["findings"],
        serde_json::json!([])
    );
}

/// A node's output over the 64 MiB value limit fails the node with `value_too_large`, in the
/// child that computed it: no relaunch recomputes it, and the run does not go to review.
#[test]
fn an_output_over_the_value_limit_fails_its_node_with_value_too_large() {
    let h = home();
    let over = piw_host::protocol::value::MAX_VALUE_BYTES;
    let file = workflow_file(
        &h,
        "huge",
        &serde_json::json!({
            "graph": {"name": "huge", "start": "a", "nodes": {"a": {"kind": "compute"}},
                      "edges": []},
            "behaviors": {"a": {"return_bytes": over}}
        }),
    );
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    let run = json_of(&o);
    assert_eq!(run["run"]["status"], "failed", "{}", text(&o));
    let run_id = run["run"]["run_id"].as_str().unwrap().to_owned();
    let status = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]));
    let attempts = status["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{status:#}");
    let error = attempts[0]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("value_too_large"), "{status:#}");
    assert_eq!(
        status["claim"]["generation"], 1,
        "its first child: {status:#}"
    );
}

/// A batched step whose output is stored apart, reported later on its own (here: at once,
/// after a lost child, `report_each_step`), keeps the value, not its reference: the
/// reference is made once, when the step is deferred.
#[test]
fn a_deferred_step_with_a_large_output_is_reported_with_the_value() {
    let h = home();
    let marker = h.home.with_file_name("crashed-once");
    let file = workflow_file(
        &h,
        "batched",
        &serde_json::json!({
            "graph": {"name": "batched", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"},
                                "c": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]},
            "batch_compute": true,
            "behaviors": {"a": {"return_bytes": 100_000},
                          "b": {"crash": "before_propose", "once_marker": marker},
                          "c": {}}
        }),
    );
    let o = piw(
        &h.home,
        &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        marker.exists(),
        "the first child crashed with a's step deferred"
    );
    let run_id = json_of(&o)["run"]["run_id"].as_str().unwrap().to_owned();
    let status = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]));
    let ok: Vec<&Value> = status["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "ok")
        .collect();
    assert_eq!(ok.len(), 3, "{status:#}");
    for a in ok {
        assert_eq!(
            a["output"]["blob"].as_str().map(str::len),
            Some(100_000),
            "{}: {}",
            a["node_id"],
            a["output"]
                .to_string()
                .chars()
                .take(300)
                .collect::<String>()
        );
    }
}

/// `piw run start --detached` asks for a detached run. One with an agent step, on a host
/// without a Pi model for detached steps (none in the run's input, the workflow or Pi's own
/// settings), is refused at once with why, and starts nothing; with Pi's default model set in
/// Pi's settings the start is checked with that model instead; a workflow with no step a model
/// answers needs none. `piw run status` says which runs are detached and where their messages go.
#[test]
fn a_detached_start_is_refused_without_a_pi_to_serve_it_and_status_shows_the_mode() {
    let h = home();
    let agent = workflow_file(
        &h,
        "asks",
        &serde_json::json!({
            "graph": {"name": "asks", "start": "draft",
                      "nodes": {"draft": {"kind": "agent"}}, "edges": []},
            "behaviors": {"draft": {"interact": "agent"}}
        }),
    );
    let o = piw(
        &h.home,
        &["run", "start", agent.to_str().unwrap(), "--detached"],
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("cannot start a detached run: no Pi provider and model"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("Pi has no default model"), "{}", text(&o));
    // Pi's own default model (its settings.json): the start is checked with it. This Pi has
    // no credentials for it, so the refusal names that model and why.
    let agent_dir = h.home.with_file_name("pi-agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(
        agent_dir.join("settings.json"),
        r#"{"defaultProvider": "nowhere", "defaultModel": "no-model"}"#,
    )
    .unwrap();
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let o = piw_cmd(
        &h.home,
        &["run", "start", agent.to_str().unwrap(), "--detached"],
    )
    .env("PI_CODING_AGENT_DIR", &agent_dir)
    .output()
    .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !text(&o).contains("no Pi provider and model"),
        "Pi's default was not read: {}",
        text(&o)
    );
    assert!(text(&o).contains("no-model"), "{}", text(&o));
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    // No step for a model: nothing to check, the detached start goes on.
    let hello = hello_example(&h);
    let o = piw(
        &h.home,
        &[
            "run",
            "start",
            hello.to_str().unwrap(),
            "--detached",
            "--wait",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let runs = json_of(&piw(&h.home, &["runs", "--json"]));
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    assert_eq!(runs["runs"][0]["status"], "completed", "{runs}");
    // Without a session a run is detached: status says so, and that no session gets its messages.
    let o = piw(
        &h.home,
        &["run", "start", hello.to_str().unwrap(), "--wait"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_id = newest_run_id(&h.home);
    let status = text(&piw(&h.home, &["run", "status", &run_id]));
    assert!(
        status.contains("mode detached (the host's Pi children answer its steps when a Pi model is set for it; no Pi session gets its messages"),
        "{status}"
    );
}

/// A run started without a session keeps what it said: `piw run status` prints its notify and
/// terminal messages one line each, `--json` has them whole (no session, nothing delivered).
#[test]
fn run_status_shows_the_messages_of_a_run_started_without_a_session() {
    let h = home();
    let file = workflow_file(
        &h,
        "tell",
        &serde_json::json!({
            "graph": {
                "name": "tell",
                "start": "say",
                "nodes": { "say": { "kind": "compute" } },
                "edges": []
            },
            "behaviors": {
                "say": {
                    "notify": { "kind": "final", "message": "Deployed a,\nb and c" },
                    "return": { "deployed": 3 }
                }
            }
        }),
    );
    let o = piw(&h.home, &["run", "start", file.to_str().unwrap(), "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_id = newest_run_id(&h.home);
    let status = text(&piw(&h.home, &["run", "status", &run_id]));
    assert!(
        status.contains("\nmessage notify Deployed a, b and c\nmessage terminal completed\n"),
        "{status}"
    );
    let body = json_of(&piw(&h.home, &["run", "status", &run_id, "--json"]));
    assert_eq!(body["message_count"], serde_json::json!(2), "{body}");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0]["content"],
        serde_json::json!({ "kind": "final", "message": "Deployed a,\nb and c" })
    );
    assert_eq!(
        messages[1]["content"]["result"],
        serde_json::json!({ "deployed": 3 })
    );
    for m in messages {
        assert_eq!(m["origin_session"], Value::Null, "{m}");
        assert_eq!(m["delivered_at"], Value::Null, "{m}");
    }
}

/// `piw run detach`: refused while the host names no Pi model for detached steps; then a run
/// started in a session becomes detached (status says so), a second detach changes nothing,
/// and a run that ended is refused with the reason.
#[test]
fn run_detach_makes_a_session_run_detached_once_and_refuses_a_finished_one() {
    let h = home();
    let file = workflow_file(
        &h,
        "park",
        &serde_json::json!({
            "graph": {"name": "park", "start": "ask",
                      "nodes": {"ask": {"kind": "checkpoint"}}, "edges": []},
            "behaviors": {"ask": {"wait": "checkpoint"}}
        }),
    );
    let run_id = start_in_session(&h.home, &file);
    let mode = |h: &Home| {
        let o = piw(&h.home, &["run", "status", &run_id, "--json"]);
        json_of(&o)["run"]["execution_mode"].clone()
    };
    assert_eq!(mode(&h), "interactive");
    pending_at(&h.home, &run_id, "decisions", "ask");
    // A host that names no Pi model for detached steps refuses: the run would wait for ever.
    let o = piw(&h.home, &["run", "detach", &run_id]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("nothing names a Pi provider and model to answer its steps"),
        "{}",
        text(&o)
    );
    assert_eq!(mode(&h), "interactive");
    // One that does detaches it.
    assert_eq!(piw(&h.home, &["host", "stop"]).status.code(), Some(0));
    let o = piw_cmd(&h.home, &["host", "start"])
        .env("PIW_DETACHED_PROVIDER", "mock")
        .env("PIW_DETACHED_MODEL", "mock-model")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = piw(&h.home, &["run", "detach", &run_id, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        json_of(&o),
        serde_json::json!({"run_id": run_id, "execution_mode": "detached", "changed": true})
    );
    assert_eq!(mode(&h), "detached");
    let o = piw(&h.home, &["run", "detach", &run_id, "--json"]);
    assert_eq!(json_of(&o)["changed"], false, "{}", text(&o));
    // The checkpoint is still answered as before; then the run has ended and stays as it is.
    let o = piw(&h.home, &["run", "answer", &run_id, "yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    wait_status(&h.home, &run_id, &["completed"]);
    let o = piw(&h.home, &["run", "detach", &run_id]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("the run is completed"), "{}", text(&o));
}

/// A `host.log` the host's output cannot go to (a directory, a FIFO, a dangling link, a file
/// this user may not write) is refused by what is wrong with it, with its path, not as an i/o
/// error talking to the host; no host starts, and the file is left as it was.
#[test]
fn a_host_log_that_cannot_be_written_is_named_with_its_cause() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = home();
    std::fs::create_dir_all(&h.home).unwrap();
    let log = h.home.join("host.log");
    let refused = |what: &str, cause: &str| {
        let o = piw(&h.home, &["host", "start"]);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "{what}: {said}");
        assert!(
            said.contains(&format!("its log {} cannot be opened", log.display()))
                && said.contains(cause)
                && !said.contains("i/o error talking to the host"),
            "{what}: {said}"
        );
        assert!(
            !h.home.join("host.sock").exists(),
            "{what}: a host started: {said}"
        );
    };

    std::fs::create_dir(&log).unwrap();
    refused("a directory", "it is a directory");
    std::fs::remove_dir(&log).unwrap();

    let fifo = std::ffi::CString::new(log.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path this test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    refused("a FIFO", "is a FIFO");
    std::fs::remove_file(&log).unwrap();

    std::os::unix::fs::symlink(h.home.join("nowhere"), &log).unwrap();
    refused("a dangling link", "is a symbolic link");
    assert!(
        !h.home.join("nowhere").exists(),
        "nothing written through the link"
    );
    std::fs::remove_file(&log).unwrap();

    // Permissions do not stop root: this case needs another user.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        std::fs::write(&log, "").unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o400)).unwrap();
        refused("an unwritable file", "may not write it");
        std::fs::remove_file(&log).unwrap();
    }

    // A usable log: the host starts.
    assert_eq!(piw(&h.home, &["host", "start"]).status.code(), Some(0));
}

/// A reader that went away (`piw runs | head`) ends a command quietly and with its exit code: every
/// printed result goes through one writer that treats a closed pipe as the end of the output.
/// `println!` panicked there ("failed printing to stdout: Broken pipe").
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let h = home();
    let hello = hello_example(&h);
    let o = piw(
        &h.home,
        &["run", "start", hello.to_str().unwrap(), "--wait"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for (args, code) in [
        (&["runs", "--json"][..], 0),
        (&["runs"][..], 0),
        (&["host", "status", "--json"][..], 0),
        // A failure keeps its exit code when nobody reads its report.
        (&["run", "status", "run-nope", "--json"][..], 1),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = piw_cmd(&h.home, args).stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("panicked"), "piw {args:?}: {stderr}");
        assert_eq!(o.status.code(), Some(code), "piw {args:?}: {stderr}");
    }
}

/// `piw` run in `dir` (its project directory, for `last`).
fn piw_in(home: &Path, dir: &Path, args: &[&str]) -> Output {
    common::piw_command()
        .args(args)
        .current_dir(dir)
        .env("PIW_HOME", home)
        .env("PIW_LOG", "warn")
        .output()
        .expect("run piw")
}

/// Each run has a short id (the shortest ending of its id unique in the installation, at
/// least 6 hex digits): `run start` and `piw runs` show it, every command takes it, and so does
/// the host's `run.list` (`run_id_prefix`), for clients without the database. `last` names the
/// newest run started in the directory or a directory above it.
#[test]
fn short_ids_and_last_name_runs_in_every_command() {
    let h = home();
    let project = h.home.with_file_name("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    let file = hello_example(&h);
    let start = |dir: &Path| {
        let o = piw_in(
            &h.home,
            dir,
            &["run", "start", file.to_str().unwrap(), "--json"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let started = json_of(&o);
        let (id, short) = (
            started["run_id"].as_str().unwrap().to_owned(),
            started["short_id"].as_str().unwrap().to_owned(),
        );
        assert!(
            short.len() >= 6 && id.ends_with(&short) && short.len() < 12,
            "{started}"
        );
        (id, short)
    };
    let (first, first_short) = start(&project);
    let (second, second_short) = start(&project);
    let elsewhere = h.home.with_file_name("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // Every command takes a short id.
    for (id, short) in [(&first, &first_short), (&second, &second_short)] {
        let o = piw(&h.home, &["run", "wait", short, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(json_of(&o)["run"]["run_id"], id.as_str());
        let o = piw(&h.home, &["logs", short, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    // `piw runs` lists the short ids (and `--json` has them beside the ids).
    let o = piw(&h.home, &["runs"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert!(
        rows[0].starts_with(&format!("{second_short} "))
            && rows[1].starts_with(&format!("{first_short} ")),
        "{listed}"
    );
    let o = piw(&h.home, &["runs", "--json"]);
    assert_eq!(json_of(&o)["runs"][0]["short_id"], second_short.as_str());
    // `last`: the newest run of this directory, from it or below it; none elsewhere.
    for dir in [&project, &project.join("src")] {
        let o = piw_in(&h.home, dir, &["run", "status", "last", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(json_of(&o)["run"]["run_id"], second.as_str());
    }
    let (third, _) = start(&elsewhere);
    let o = piw_in(&h.home, &project, &["run", "status", "last", "--json"]);
    assert_eq!(
        json_of(&o)["run"]["run_id"],
        second.as_str(),
        "{}",
        text(&o)
    );
    let o = piw_in(&h.home, &elsewhere, &["logs", "last", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = piw_in(&h.home, &elsewhere, &["run", "status", "last"]);
    assert!(text(&o).contains(&third), "{}", text(&o));
    let o = piw_in(&h.home, &h.home, &["run", "status", "last"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("no run was started in") && text(&o).contains("piw runs"),
        "{}",
        text(&o)
    );
    // The host resolves short ids too, for every client (the Pi extension's `/workflow`).
    let paths = piw_host::paths::PiwPaths::for_home(h.home.clone());
    let mut client = piw_host::client::BlockingClient::connect(&paths).unwrap();
    for (given, expected) in [
        (first_short.as_str(), vec![first.as_str()]),
        (&first[..first.len() - 3], vec![first.as_str()]),
        ("0123456789abcdef0123456789", vec![]),
    ] {
        let listed = client
            .call(piw_host::protocol::RequestBody::RunList(
                piw_host::protocol::payload::RunList {
                    run_id_prefix: Some(given.to_owned()),
                    ..Default::default()
                },
            ))
            .unwrap();
        let ids: Vec<&str> = listed.body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, expected, "{given}");
    }
}

/// `piw runs` sizes each column to its widest cell: a long workflow name does not push the
/// node out of its column, and ids are whole.
#[test]
fn runs_columns_are_as_wide_as_their_content() {
    let h = home();
    let long = h
        .home
        .with_file_name("a-workflow-with-a-long-name.workflow.json");
    std::fs::copy(hello_example(&h), &long).unwrap();
    for file in [&long, &hello_example(&h)] {
        let o = piw(
            &h.home,
            &["run", "start", file.to_str().unwrap(), "--wait", "--json"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let o = piw(&h.home, &["runs"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = listed.lines().collect();
    let header = lines[0];
    let column = |name: &str| header.find(name).unwrap();
    assert_eq!(lines.len(), 3, "{listed}");
    for row in &lines[1..] {
        // Each value starts where its header does, after at least one space.
        for (name, value) in [("WORKFLOW", None), ("NODE", Some("done"))] {
            let at = column(name);
            assert_eq!(&row[at - 1..at], " ", "{name} collides:\n{listed}");
            if let Some(value) = value {
                assert_eq!(&row[at..], value, "{name}:\n{listed}");
            }
        }
    }
    assert!(
        listed.contains("a-workflow-with-a-long-name  done"),
        "{listed}"
    );
}

/// `--help` wraps at the terminal's width (100 columns without a terminal), every command's,
/// and the main commands show examples; the man pages still generate, into a directory that
/// `--dir` creates, and an I/O error names its path.
#[test]
fn help_fits_the_terminal_has_examples_and_man_creates_its_directory() {
    let h = home();
    let o = piw(&h.home, &["man", "--dir", "/dev/null"]);
    let commands: Vec<Vec<&str>> = vec![
        vec![],
        vec!["host"],
        vec!["host", "status"],
        vec!["runs"],
        vec!["runs", "prune"],
        vec!["run"],
        vec!["run", "start"],
        vec!["run", "status"],
        vec!["run", "answer"],
        vec!["run", "submit"],
        vec!["run", "wait"],
        vec!["run", "retry"],
        vec!["run", "resolve-effect"],
        vec!["channel", "add"],
        vec!["view"],
        vec!["logs"],
        vec!["state", "restore"],
        vec!["completions"],
        vec!["man"],
    ];
    for command in &commands {
        let mut args = command.clone();
        args.push("--help");
        let o = piw(&h.home, &args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        let help = String::from_utf8_lossy(&o.stdout).into_owned();
        for line in help.lines() {
            assert!(
                line.chars().count() <= 100,
                "{args:?}: a line of {} characters: {line}",
                line.chars().count()
            );
        }
        let examples = [
            &[][..],
            &["runs"],
            &["run", "start"],
            &["run", "status"],
            &["run", "wait"],
            &["view"],
            &["logs"],
            &["completions"],
            &["man"],
        ];
        if examples.contains(&command.as_slice()) {
            assert!(help.contains("\nExamples:\n  piw "), "{args:?}: {help}");
        }
    }
    // `/dev/null` is no directory: the error names it.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("/dev/null"), "{}", text(&o));
    let pages = h.home.with_file_name("share/man/man1");
    let o = piw(&h.home, &["man", "--dir", pages.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for name in ["piw.1", "piw-run-start.1", "piw-runs-prune.1"] {
        assert!(pages.join(name).is_file(), "{name}");
    }
    let page = std::fs::read_to_string(pages.join("piw-run-start.1")).unwrap();
    assert!(page.contains("Examples:"), "{page}");
    assert!(!h.home.exists(), "man created an installation");
}

/// `piw run start <TAB>` completes the workflow names it resolves (the project's
/// `.pi/workflows/`, `~/.pi/agent/workflows/`, the built-ins by id and as `builtin:<id>`) and
/// workflow files, in bash (a real one), zsh and fish (their requests to `piw`, as their
/// scripts send them).
#[test]
fn run_start_completes_workflow_names_and_files_in_every_shell() {
    let h = home();
    let root = h.home.parent().unwrap().to_path_buf();
    let (project, user_home, shipped) = (
        root.join("project"),
        root.join("user"),
        root.join("builtins"),
    );
    for file in [
        project.join(".pi/workflows/review.workflow.mjs"),
        project.join("flows/nightly-sweep.workflow.json"),
        project.join("flows/notes.txt"),
        user_home.join(".pi/agent/workflows/triage.workflow.ts"),
        shipped.join("autoplan.workflow.mjs"),
    ] {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "{}").unwrap();
    }
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_piw"), bin.join("piw")).unwrap();
    let script = root.join("piw.bash");
    std::fs::write(&script, &piw(&h.home, &["completions", "bash"]).stdout).unwrap();
    let in_project = |cmd: &mut Command| {
        cmd.current_dir(&project)
            .env("PIW_HOME", &h.home)
            .env("PIW_LOG", "warn")
            .env("HOME", &user_home)
            .env("PIW_BUILTINS_DIR", &shipped)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            );
    };
    let bash = |words: &str| -> Vec<String> {
        let mut cmd = Command::new("bash");
        cmd.arg("--norc")
            .arg("-c")
            .arg(format!(
                r#"source "$1"; COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMP_TYPE=9
                   _clap_complete_piw piw "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
                   printf '%s\n' "${{COMPREPLY[@]}}""#
            ))
            .arg("bash")
            .arg(&script);
        in_project(&mut cmd);
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    // (Nothing typed: the options follow.)
    let offered: Vec<String> = bash("piw run start ''")
        .into_iter()
        .filter(|w| !w.starts_with("--"))
        .collect();
    assert_eq!(
        offered,
        ["autoplan", "builtin:autoplan", "review", "triage", "flows/",],
    );
    assert_eq!(bash("piw run start tr"), ["triage"]);
    assert_eq!(bash("piw run start builtin"), ["builtin:autoplan"]);
    assert_eq!(bash("piw run start fl"), ["flows/"]);
    // Only workflow files of a folder, and only paths once a `/` is typed.
    assert_eq!(
        bash("piw run start flows/"),
        ["flows/nightly-sweep.workflow.json"]
    );
    // zsh and fish ask `piw` the same way, with each candidate's help.
    let ask = |shell: &str, typed: &str| -> String {
        let mut cmd = Command::new(bin.join("piw"));
        cmd.args(["--", "piw", "run", "start", typed])
            .env("PIW_COMPLETE", shell)
            .env("_CLAP_IFS", "\n")
            .env("_CLAP_COMPLETE_INDEX", "3");
        in_project(&mut cmd);
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let zsh = ask("zsh", "");
    for line in [
        "review:workflow in .pi/workflows/",
        "triage:workflow in ~/.pi/agent/workflows/",
        "builtin\\:autoplan:built-in workflow",
        "flows/",
    ] {
        assert!(zsh.lines().any(|l| l == line), "{line}: {zsh}");
    }
    let fish = ask("fish", "re");
    assert_eq!(fish.trim(), "review\tworkflow in .pi/workflows/", "{fish}");
}

/// A run parked on an agent step that nobody can serve says so, and how to serve it: a
/// detached run (started from the shell) for which nothing names a Pi model, Pi's settings
/// included, and an interactive run whose Pi session is not open. `run start --wait`, `run
/// wait` and `run status` say it; `--json` has the host's `step_service`.
#[test]
fn a_step_nobody_can_serve_says_how_to_serve_it() {
    let h = home();
    // A home of its own: no Pi settings (so no default model), and no model from the
    // environment.
    let user_home = h.home.with_file_name("user");
    std::fs::create_dir_all(&user_home).unwrap();
    let piw_here = |args: &[&str]| {
        common::piw_command()
            .args(args)
            .env("PIW_HOME", &h.home)
            .env("PIW_LOG", "warn")
            .env("HOME", &user_home)
            .env("PI_CODING_AGENT_DIR", user_home.join(".pi/agent"))
            .env_remove("PIW_DETACHED_PROVIDER")
            .env_remove("PIW_DETACHED_MODEL")
            .env_remove("PIW_DETACHED_BRIDGES")
            .output()
            .unwrap()
    };
    let file = workflow_file(
        &h,
        "ask",
        &serde_json::json!({
            "graph": {"name": "ask", "start": "ask",
                      "nodes": {"ask": {"kind": "agent"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "done"}]},
            "behaviors": {"ask": {"interact": "agent", "validate": {"value": 42}}, "done": {}}
        }),
    );
    let file = file.to_str().unwrap();
    let o = piw_here(&["run", "start", file, "--wait", "--timeout", "20"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    for words in [
        "nobody serves step int-",
        "the run is detached",
        "nothing names a Pi model",
        "`/workflow <name>`",
        "PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL",
        "piw_detached",
    ] {
        assert!(said.contains(words), "{words}: {said}");
    }
    let o = piw_here(&["run", "status", "last", "--json"]);
    let status = json_of(&o);
    assert_eq!(status["step_service"]["served_by"], "nobody", "{status}");
    assert_eq!(status["step_service"]["why"], "no_model", "{status}");
    assert_eq!(
        status["step_service"]["interaction_id"],
        status["interactions"][0]["interaction_id"]
    );
    let o = piw_here(&["run", "status", "last"]);
    assert!(
        text(&o).contains("nobody serves step int-")
            && text(&o).contains("nothing names a Pi model"),
        "{}",
        text(&o)
    );
    let o = piw_here(&["run", "wait", "last", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("nothing names a Pi model"),
        "{}",
        text(&o)
    );

    // An interactive run whose Pi session nobody has open.
    let o = piw_here(&["run", "start", file, "--session", "s-gone", "--json"]);
    let run_id = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    wait_status(&h.home, &run_id, &["waiting"]);
    let o = piw_here(&["run", "wait", "last", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("Pi session s-gone is not open") && said.contains("piw run detach"),
        "{said}"
    );
    let status = json_of(&piw_here(&["run", "status", "last", "--json"]));
    assert_eq!(status["step_service"]["why"], "session_closed", "{status}");
    // Once the step is answered nobody needs to serve it.
    let o = piw_here(&["run", "submit", "last", r#"{"value": 42}"#]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let status = json_of(&piw_here(&["run", "wait", "last", "--json"]));
    assert_eq!(status["run"]["status"], "completed", "{status}");
    assert!(status.get("step_service").is_none(), "{status}");
}
