//! `piw view` as a person uses it: in a real terminal (tmux) against a live host, keys move
//! through the run list and a run's history and the screen follows the run as it advances;
//! against a stopped installation it starts no host and leaves the database's bytes as they
//! were. Also `--once` and `run graph` through the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

/// Bound on waits for a condition: only a hang reaches it.
const HANG: Duration = Duration::from_secs(30);

fn piw(home: &Path, args: &[&str]) -> Output {
    common::piw_command()
        .args(args)
        .env("PIW_HOME", home)
        .env("PIW_LOG", "warn")
        .output()
        .expect("run piw")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "piw failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

struct Installation {
    dir: tempfile::TempDir,
    home: PathBuf,
}

impl Installation {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        Self { dir, home }
    }

    /// Writes a workflow `name`: a → b → c, where b runs until `barrier` exists.
    fn barrier_workflow(&self, barrier: &Path) -> PathBuf {
        let file = self.dir.path().join("gate.workflow.json");
        let fixture = json!({
            "graph": {"name": "gate", "start": "a",
                      "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"},
                                "c": {"kind": "compute"}},
                      "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]},
            "behaviors": {"a": {"return": {"step": 1}},
                          "b": {"wait_for_file": barrier.to_str().unwrap(), "return": {"step": 2}},
                          "c": {"return": {"step": 3}}}
        });
        std::fs::write(&file, fixture.to_string()).unwrap();
        file
    }

    fn hello(&self) -> PathBuf {
        let file = self.dir.path().join("hello.workflow.json");
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

    fn start(&self, file: &Path, wait: bool) -> String {
        let path = file.to_str().unwrap();
        let mut args = vec!["run", "start", path, "--json"];
        if wait {
            args.push("--wait");
        }
        let out: Value = serde_json::from_str(&stdout(&piw(&self.home, &args))).unwrap();
        out["run_id"]
            .as_str()
            .or_else(|| out["run"]["run_id"].as_str())
            .unwrap_or_else(|| panic!("no run id in {out}"))
            .to_owned()
    }

    fn wait_for_node(&self, run_id: &str, node: &str) {
        let started = Instant::now();
        loop {
            let s: Value = serde_json::from_str(&stdout(&piw(
                &self.home,
                &["run", "status", run_id, "--json"],
            )))
            .unwrap();
            if s["run"]["current_node"] == node && s["run"]["status"] == "running" {
                return;
            }
            assert!(started.elapsed() < HANG, "never running at {node}: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn db_files(&self) -> Vec<u8> {
        std::fs::read(self.home.join("state.sqlite")).unwrap()
    }
}

impl Drop for Installation {
    fn drop(&mut self) {
        let _ = piw(&self.home, &["host", "stop"]);
        common::kill_installation(&self.home);
    }
}

/// A tmux server of the test's own (`-L`), so nothing touches the user's sessions; killed
/// when the test ends, pass or fail.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// `None` (after saying why) when tmux is not installed; a failure instead when the
    /// caller promised it (`PIW_TEST_REQUIRE_TMUX`, set by `scripts/test-all`, which installs it).
    fn start(home: &Path, args: &[&str], size: (u16, u16)) -> Option<Self> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(
                std::env::var_os("PIW_TEST_REQUIRE_TMUX").is_none(),
                "tmux is required (PIW_TEST_REQUIRE_TMUX) but not installed"
            );
            println!("SKIPPED: tmux is not installed, so the viewer is not run in a real terminal");
            return None;
        }
        let socket = format!("piw-view-test-{}-{}", std::process::id(), rand_suffix());
        let mut command = format!(
            "env PIW_HOME='{}' PIW_LOG=warn NO_COLOR=1 TERM=xterm-256color '{}'",
            home.display(),
            env!("CARGO_BIN_EXE_piw")
        );
        for a in args {
            command.push_str(&format!(" '{a}'"));
        }
        let tmux = Self { socket };
        let o = tmux.cmd(&[
            "new-session",
            "-d",
            "-x",
            &size.0.to_string(),
            "-y",
            &size.1.to_string(),
            &command,
        ]);
        assert!(
            o.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Some(tmux)
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for key in keys {
            let o = self.cmd(&["send-keys", key]);
            assert!(o.status.success(), "send-keys {key}");
        }
    }

    /// Waits until the whole screen satisfies `ok` and returns that screen; a timeout (30 s:
    /// only a hang reaches it) fails with the last screen read. tmux can show a frame the
    /// viewer is still writing, so `ok` states everything the caller then relies on (never
    /// only a header) and must not panic on a screen that is half drawn.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(
                started.elapsed() < HANG,
                "never {what}; the last screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `q` and waits until the viewer has quit (its pane closes with it).
    fn quit(&self) {
        let last = self.screen();
        self.keys(&["q"]);
        let started = Instant::now();
        while self.alive() {
            assert!(
                started.elapsed() < HANG,
                "the viewer did not quit on q; the screen before:\n{last}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the viewer's pane is still there (it closes when the program exits).
    fn alive(&self) -> bool {
        self.cmd(&["has-session"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0)
}

/// Whether one line of the screen holds every one of `parts`.
fn has_line(screen: &str, parts: &[&str]) -> bool {
    screen.lines().any(|l| parts.iter().all(|p| l.contains(p)))
}

/// The event the history header shows and the run's revision, once that line is drawn whole
/// (`HISTORY event 7 of 12: transitioned at 10:00:00 (End: live)`).
fn history_event(screen: &str) -> Option<(u64, u64)> {
    let line = screen
        .lines()
        .find(|l| l.contains("HISTORY event ") && l.contains("(End: live)"))?;
    let rest = &line[line.find("HISTORY event ")? + "HISTORY event ".len()..];
    let (seq, rest) = rest.split_once(" of ")?;
    let (revision, _) = rest.split_once(':')?;
    Some((seq.parse().ok()?, revision.parse().ok()?))
}

#[test]
fn the_viewer_follows_a_live_host_in_a_real_terminal() {
    let inst = Installation::new();
    let barrier = inst.dir.path().join("release-b");
    let hello = inst.start(&inst.hello(), true);
    let gate = inst.start(&inst.barrier_workflow(&barrier), false);
    inst.wait_for_node(&gate, "b");

    let Some(tmux) = Tmux::start(&inst.home, &["view"], (80, 24)) else {
        return;
    };
    // Newest first, the newest selected.
    tmux.wait_for("the run list, the gated run selected", |s| {
        s.contains("piw runs: 2 of 2")
            && has_line(s, &[short(&gate), "> running"])
            && has_line(s, &[short(&hello), "completed"])
    });

    // Down selects the older run; Enter opens it; the history steps back and forth.
    tmux.keys(&["Down"]);
    tmux.wait_for("hello selected", |s| {
        has_line(s, &[short(&hello), "> completed"])
    });
    tmux.keys(&["Enter"]);
    // The current node's box is in view (at 80x24 the panel scrolls to it).
    tmux.wait_for("the hello run, its last node in view", |s| {
        s.contains("COMPLETED · hello")
            && has_line(s, &["│ ✓ [done]"])
            && s.contains("events · live")
    });
    tmux.keys(&["Left"]);
    let screen = tmux.wait_for("the newest event in history", |s| {
        history_event(s).is_some_and(|(seq, revision)| seq == revision)
            && s.contains("events · history")
    });
    let (newest, _) = history_event(&screen).unwrap_or_default();
    tmux.keys(&["Left"]);
    // The step into done: done drawn as it was then, running.
    tmux.wait_for("one event further back, done running", |s| {
        history_event(s).is_some_and(|(seq, _)| seq + 1 == newest)
            && has_line(s, &["▶ [done] running"])
    });
    tmux.keys(&["Right", "Right"]);
    tmux.wait_for("live again", |s| {
        !s.contains("HISTORY") && s.contains("events · live") && has_line(s, &["│ ✓ [done]"])
    });

    // Back to the list, up to the gated run, open it: it waits at b.
    tmux.keys(&["Escape"]);
    tmux.wait_for("the run list again, hello selected", |s| {
        s.contains("piw runs: 2 of 2") && has_line(s, &[short(&hello), "> completed"])
    });
    tmux.keys(&["Up", "Enter"]);
    // Started without a session, it is detached: its header says so.
    tmux.wait_for("the gated run running at b, c not visited", |s| {
        s.contains("RUNNING · gate")
            && s.contains("· detached ·")
            && has_line(s, &["[b]", "running"])
            && has_line(s, &["[c]", "not visited"])
    });

    // The run advances: the screen follows without a key.
    std::fs::write(&barrier, b"go").unwrap();
    tmux.wait_for("the run completed on screen, c ok", |s| {
        s.contains("COMPLETED · gate") && has_line(s, &["[c]", "ok"])
    });

    tmux.quit();
}

/// The short id the run list shows for `run_id`: its last 6 characters (no two runs of a
/// test share them).
fn short(run_id: &str) -> &str {
    &run_id[run_id.len() - 6..]
}

#[test]
fn viewing_a_stopped_installation_starts_no_host_and_leaves_the_database_as_it_was() {
    let inst = Installation::new();
    let hello = inst.start(&inst.hello(), true);
    assert!(stdout(&piw(&inst.home, &["host", "stop"])).contains("stopped"));
    let before = inst.db_files();

    let once = stdout(&piw(&inst.home, &["view", "--once"]));
    assert!(
        once.contains(short(&hello)) && once.contains("completed"),
        "{once}"
    );
    let once = stdout(&piw(&inst.home, &["view", "--once", &hello]));
    assert!(
        once.contains("COMPLETED · hello") && once.contains("[shout]"),
        "{once}"
    );
    assert!(!once.contains('\u{1b}'), "plain text: {once}");
    let mermaid = stdout(&piw(&inst.home, &["run", "graph", &hello]));
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(
        mermaid.contains("\"greet<br/>compute · ok ×1\"]:::ok"),
        "{mermaid}"
    );
    let dot = stdout(&piw(
        &inst.home,
        &["run", "graph", &hello, "--format", "dot"],
    ));
    assert!(
        dot.starts_with("digraph \"hello\" {")
            && dot.contains("\"check\" -> \"shout\" [label=\"true\"];"),
        "{dot}"
    );

    if let Some(tmux) = Tmux::start(&inst.home, &["view", &hello], (80, 24)) {
        tmux.wait_for("the run, its last node in view", |s| {
            s.contains("COMPLETED · hello") && has_line(s, &["│ ✓ [done]"])
        });
        tmux.keys(&["Left", "Down", "Escape"]);
        tmux.wait_for("the run list, the run selected", |s| {
            s.contains("piw runs: 1 of 1") && has_line(s, &[short(&hello), "> completed"])
        });
        tmux.quit();
    }

    assert!(inst.db_files() == before, "the database's bytes changed");
    // No host was started: nothing answers on the socket.
    let status = piw(&inst.home, &["host", "status"]);
    assert!(!status.status.success(), "a host is running");

    // Usage: help, and a status that does not exist (exit 2, naming the statuses).
    for verb in [vec!["view", "--help"], vec!["run", "graph", "--help"]] {
        let o = piw(&inst.home, &verb);
        assert_eq!(o.status.code(), Some(0), "{verb:?}");
    }
    let o = piw(&inst.home, &["view", "--once", "--status", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("waiting"),
        "{o:?}"
    );

    // A run that does not exist, and an installation without a database: errors, exit 1.
    let o = piw(&inst.home, &["view", "--once", "run-nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("run-nope"),
        "{o:?}"
    );
    let empty = inst.dir.path().join("empty-home");
    let o = piw(&empty, &["view", "--once"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no piw state database"),
        "{o:?}"
    );
    assert!(!empty.exists(), "viewing created the installation");
}
