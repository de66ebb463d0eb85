//! The viewer's model and layout on ratatui's `TestBackend`, `--once` and `run graph`, over runs
//! built through the store's own lifecycle API (a `FakeClock`, so times and ages are exact).

use piw_host::store::prelude::*;
use std::sync::Arc;

use piw_host::clock::FakeClock;
use piw_host::paths::PiwPaths;
use piw_host::store::{
    Activation, Answerer, AttemptOutcome, ChildExitRecord, ChildMode, DecisionKind, ExecutionMode,
    NewRun, RunFilter, RunStatus, Store, StoreConfig, TransitionRequest,
};
use ratatui::crossterm::event::KeyCode;
use serde_json::{json, Value};

use super::export::{self, GraphFormat};
use super::model::RunModel;
use super::render::Theme;
use super::{buffer_text, frame, App};

const T0: i64 = 1_700_000_000_000;
const PLAIN: Theme = Theme { color: false };

struct Fixture {
    _dir: tempfile::TempDir,
    paths: PiwPaths,
    store: Store,
    clock: FakeClock,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().join("home"));
        std::fs::create_dir_all(&paths.home).unwrap();
        let clock = FakeClock::new(T0);
        let store = Store::open(
            &paths.db,
            StoreConfig {
                clock: Arc::new(clock.clone()),
                ..StoreConfig::default()
            },
        )
        .unwrap();
        Self {
            _dir: dir,
            paths,
            store,
            clock,
        }
    }

    /// Starts and activates a run of `graph`, and opens the attempt at its start node.
    fn start(&mut self, graph: &Value, session: Option<&str>) -> (String, Activation, String) {
        let run = NewRun {
            workflow_name: graph["name"].as_str().unwrap().into(),
            source_root: "/tmp/w.workflow.json".into(),
            source_hash: "abc".into(),
            mounted_sources: json!({}),
            definition: Some(graph.clone()),
            input: json!({"topic": "t"}),
            origin_session: session.map(str::to_owned),
            execution_mode: ExecutionMode::Interactive,
            project_dir: "/tmp".into(),
        };
        let run_id = self.store.write(|w| w.start_run(&run)).unwrap();
        let act = self
            .store
            .write(|w| w.activate(&run_id, "host-test"))
            .unwrap();
        let start = graph["start"].as_str().unwrap();
        let attempt = self
            .store
            .write(|w| w.node_started(&act.claim, start, None))
            .unwrap();
        (run_id, act, attempt)
    }

    /// Closes `attempt` with `output` after `ms` and opens `next`; returns its attempt.
    fn step(
        &mut self,
        act: &Activation,
        attempt: &str,
        output: Value,
        next: &str,
        ms: i64,
    ) -> String {
        self.clock.advance(ms);
        self.store
            .write(|w| {
                w.transition(
                    &act.claim,
                    &TransitionRequest {
                        attempt_id: attempt.into(),
                        outcome: AttemptOutcome::Succeeded { output },
                        next_node: next.into(),
                        next_deadline_at: None,
                    },
                )
            })
            .unwrap()
            .next_attempt_id
    }

    fn view(&self, run_id: &str, width: u16, height: u16) -> String {
        let app = App::load(&self.store, RunFilter::default(), Some(run_id)).unwrap();
        buffer_text(&frame(&app, PLAIN, self.clock_now(), width, height).unwrap())
    }

    fn clock_now(&self) -> i64 {
        use piw_host::clock::Clock as _;
        self.clock.now_ms()
    }
}

fn loop_graph() -> Value {
    json!({
        "name": "polish", "start": "draft",
        "nodes": {"draft": {"kind": "compute"}, "review": {"kind": "compute"},
                  "publish": {"kind": "action"}},
        "edges": [{"from": "draft", "to": "review"},
                  {"from": "review", "switch": {"on": "$.again",
                      "cases": {"true": "draft"}, "default": "publish"}}]
    })
}

/// A completed run that went draft → review → draft → review → publish.
fn branch_and_loop(f: &mut Fixture) -> String {
    let (run_id, act, a1) = f.start(&loop_graph(), Some("s-loop"));
    let r1 = f.step(&act, &a1, json!({"text": "v1"}), "review", 1_000);
    let a2 = f.step(&act, &r1, json!({"again": true}), "draft", 2_000);
    let r2 = f.step(&act, &a2, json!({"text": "v2"}), "review", 1_500);
    let p = f.step(&act, &r2, json!({"again": false}), "publish", 500);
    f.clock.advance(250);
    f.store
        .write(|w| w.complete(&act.claim, &p, &json!({"url": "u"}), &json!({"url": "u"})))
        .unwrap();
    run_id
}

fn decision_graph() -> Value {
    json!({
        "name": "ship", "start": "build",
        "nodes": {"build": {"kind": "compute"}, "approve": {"kind": "human_decision"},
                  "deploy": {"kind": "action"}},
        "edges": [{"from": "build", "to": "approve"}, {"from": "approve", "to": "deploy"}]
    })
}

/// A run waiting on a person's decision at `approve`.
fn waiting_on_decision(f: &mut Fixture) -> (String, String) {
    let (run_id, act, a1) = f.start(&decision_graph(), Some("s-ship"));
    let a2 = f.step(&act, &a1, json!({"artifact": "app.tar"}), "approve", 3_000);
    let decision = f
        .store
        .write(|w| {
            w.wait_for_decision(
                &act.claim,
                &a2,
                DecisionKind::HumanDecision,
                &json!({"question": "Ship app.tar to production?", "choices": ["yes", "no"]}),
            )
        })
        .unwrap();
    (run_id, decision)
}

/// A run whose `compile` node failed, with its child's exit and stderr recorded.
fn failed_run(f: &mut Fixture) -> String {
    let graph = json!({
        "name": "build", "start": "fetch",
        "nodes": {"fetch": {"kind": "compute"}, "compile": {"kind": "compute"}},
        "edges": [{"from": "fetch", "to": "compile"}]
    });
    let (run_id, act, a1) = f.start(&graph, None);
    let a2 = f.step(&act, &a1, json!({"ok": true}), "compile", 1_000);
    let epoch = f
        .store
        .write(|w| {
            let host = w.begin_host_epoch(1)?;
            w.record_child_launch(&run_id, act.claim.generation, host, ChildMode::Run)
        })
        .unwrap();
    f.clock.advance(4_000);
    f.store
        .write(|w| {
            w.fail(
                &act.claim,
                Some(&a2),
                &AttemptOutcome::Failed {
                    error: "cc: error: missing header foo.h".into(),
                },
                "node compile failed: cc: error: missing header foo.h",
            )
        })
        .unwrap();
    f.store
        .write(|w| {
            w.record_child_exit(
                epoch,
                &ChildExitRecord {
                    exit_code: Some(1),
                    signal: None,
                    reason: "exited with code 1".into(),
                    stdout_tail: Vec::new(),
                    stderr_tail: b"compiling...\nfoo.c:1: fatal: foo.h not found\n".to_vec(),
                },
            )
        })
        .unwrap();
    run_id
}

fn composed_graph() -> Value {
    json!({
        "name": "fixer", "start": "plan",
        "nodes": {"plan": {"kind": "compute"}, "repair.fix": {"kind": "agent"},
                  "repair.verify": {"kind": "compute"}, "report": {"kind": "notify"}},
        "edges": [{"from": "plan", "to": "repair.fix"},
                  {"from": "repair.fix", "to": "repair.verify"},
                  {"from": "repair.verify", "to": "report"}]
    })
}

/// A composed run (an included workflow `repair`) running inside the mount.
fn composed_run(f: &mut Fixture) -> String {
    let (run_id, act, a1) = f.start(&composed_graph(), Some("s-fix"));
    let a2 = f.step(&act, &a1, json!({"plan": "p"}), "repair.fix", 1_000);
    f.step(&act, &a2, json!({"patch": "diff"}), "repair.verify", 1_000);
    f.store
        .write(|w| w.progress(&act.claim, "verifying 3 of 7 files", &json!({"done": 3})))
        .unwrap();
    run_id
}

#[test]
fn the_run_list_shows_runs_newest_first_and_filters_them() {
    let mut f = Fixture::new();
    let loop_run = branch_and_loop(&mut f);
    f.clock.advance(60_000);
    let (waiting, _) = waiting_on_decision(&mut f);
    f.clock.advance(60_000);
    let failed = failed_run(&mut f);
    f.clock.advance(120_000);

    let mut app = App::load(&f.store, RunFilter::default(), None).unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(text.contains("piw runs: 3 of 3"), "{text}");
    let row = |id: &str| {
        text.lines()
            .position(|l| l.contains(short(id)))
            .unwrap_or_else(|| panic!("{id} not listed:\n{text}"))
    };
    // Newest first.
    assert!(
        row(&failed) < row(&waiting) && row(&waiting) < row(&loop_run),
        "{text}"
    );
    let waiting_line = &text.lines().nth(row(&waiting)).unwrap().to_owned();
    for shown in ["waiting", "ship", "s-ship", "approve", "3m"] {
        assert!(waiting_line.contains(shown), "{shown} in {waiting_line}");
    }
    assert!(
        text.lines().nth(row(&failed)).unwrap().contains("failed"),
        "{text}"
    );
    assert!(text.contains("s status  e session  q quit"), "{text}");

    // `s` cycles the status filter: queued, running, waiting.
    for _ in 0..3 {
        app.key(&f.store, KeyCode::Char('s')).unwrap();
    }
    assert_eq!(app.runs.filter.status, Some(RunStatus::Waiting));
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(text.contains("1 of 1 · status waiting"), "{text}");
    assert!(
        text.contains(short(&waiting)) && !text.contains(short(&failed)),
        "{text}"
    );

    // The session filter from the command line.
    let app = App::load(
        &f.store,
        RunFilter {
            status: None,
            session: Some("s-loop".into()),
        },
        None,
    )
    .unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(
        text.contains(short(&loop_run)) && !text.contains(short(&waiting)),
        "{text}"
    );

    // Down then Enter opens the second run.
    let mut app = App::load(&f.store, RunFilter::default(), None).unwrap();
    app.key(&f.store, KeyCode::Down).unwrap();
    app.key(&f.store, KeyCode::Enter).unwrap();
    assert_eq!(
        app.run.as_ref().map(|r| r.run.run_id.as_str()),
        Some(waiting.as_str())
    );
    app.key(&f.store, KeyCode::Esc).unwrap();
    assert!(app.run.is_none());
}

#[test]
fn a_run_with_a_branch_and_a_loop_shows_visits_routes_and_history() {
    let mut f = Fixture::new();
    let run_id = branch_and_loop(&mut f);
    let text = f.view(&run_id, 80, 24);
    assert!(text.contains("COMPLETED · polish · "), "{text}");
    assert!(text.contains(r#"result: {"url":"u"}"#), "{text}");
    // Each node once, with its visits and the time its attempts took.
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle}:\n{text}"))
            .to_owned()
    };
    assert!(line("[draft]").contains("×2 2.50s"), "{text}");
    assert!(line("[review]").contains("×2 2.50s"), "{text}");
    assert!(line("[publish]").contains("✓"), "{text}");
    // Each node is a box (its line between a top and a bottom border), with its arrows under it.
    let rows: Vec<&str> = text.lines().collect();
    let publish = rows.iter().position(|l| l.contains("[publish]")).unwrap();
    assert!(rows[publish].contains("│ ✓ [publish]"), "{text}");
    assert!(rows[publish - 1].contains("┌──"), "{text}");
    assert!(rows[publish + 1].contains("└──"), "{text}");
    assert!(rows[publish + 2].contains("■ end"), "{text}");
    let draft = rows.iter().position(|l| l.contains("[draft]")).unwrap();
    assert!(rows[draft + 2].contains("▼ review"), "{text}");
    assert!(text.contains("├─ true ─▶ draft"), "{text}");
    assert!(text.contains("└─ * ─▶ publish"), "{text}");
    assert!(text.contains("draft ─▶ review (ok)"), "{text}");

    // History: back to the event that sent the run round the loop, then forward to live.
    let mut app = App::load(&f.store, RunFilter::default(), Some(&run_id)).unwrap();
    let revision = app.run.as_ref().unwrap().run.revision;
    for _ in 0..4 {
        app.key(&f.store, KeyCode::Left).unwrap();
    }
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    let shown = revision - 3;
    assert!(
        text.contains(&format!(
            "HISTORY event {shown} of {revision}: transitioned"
        )),
        "{text}"
    );
    assert!(text.contains("review ─▶ draft (ok)"), "{text}");
    // Every node as it was after that event: draft running its second visit (for no time yet),
    // review done once, publish not reached yet.
    let line = |text: &str, needle: &str| line_with(text, needle).to_owned();
    assert!(
        line(&text, "[draft]").contains("▶ [draft] running ×2 0ms ◀"),
        "{text}"
    );
    assert!(
        line(&text, "[review]").contains("✓ [review] ok ×1 2.00s"),
        "{text}"
    );
    assert!(line(&text, "[publish]").contains("not visited"), "{text}");
    // The node the event went to is selected: the inspector shows the attempt it opened (the
    // second of two), running then, for no time yet.
    assert!(text.contains("node draft (compute)"), "{text}");
    assert!(text.contains("attempt 2 of 2 · running"), "{text}");
    assert!(text.contains("· for 0ms"), "{text}");
    // Its input: what review returned the step before.
    assert!(text.contains(r#"input: {"again":true}"#), "{text}");
    app.key(&f.store, KeyCode::Left).unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(text.contains("draft ─▶ review (ok)"), "{text}");
    assert!(
        line(&text, "[draft]").contains("✓ [draft] ok ×1 1.00s"),
        "{text}"
    );
    assert!(
        line(&text, "[review]").contains("▶ [review] running ×1"),
        "{text}"
    );
    assert!(
        text.contains("node review (compute)") && text.contains("attempt 1 of 1 · running"),
        "{text}"
    );
    for _ in 0..5 {
        app.key(&f.store, KeyCode::Right).unwrap();
    }
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(!text.contains("HISTORY"), "{text}");
    assert!(text.contains("events · live"), "{text}");
}

#[test]
fn a_run_waiting_on_a_decision_shows_the_question() {
    let mut f = Fixture::new();
    let (run_id, decision) = waiting_on_decision(&mut f);
    let text = f.view(&run_id, 80, 24);
    assert!(text.contains("WAITING · ship · "), "{text}");
    assert!(text.contains("live · current node approve"), "{text}");
    let approve = text.lines().find(|l| l.contains("[approve]")).unwrap();
    // Selected (the current node when a run opens) and the current node.
    assert!(approve.contains(">▸│ ? [approve] waiting"), "{text}");
    assert!(text.contains("human_decision"), "{text}");
    assert!(text.contains(&decision[..12]), "{text}");
    assert!(text.contains("question: Ship app.tar to"), "{text}");
    assert!(text.contains(r#"input: {"artifact":"app.tar"}"#), "{text}");
    // The first node ran with the run's input.
    let mut app = App::load(&f.store, RunFilter::default(), Some(&run_id)).unwrap();
    app.key(&f.store, KeyCode::Up).unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(text.contains("node build (compute)"), "{text}");
    assert!(text.contains(r#"input: {"topic":"t"}"#), "{text}");

    // Answered: the frame shows the answer and who gave it.
    f.store
        .write(|w| w.answer_decision(&decision, &json!({"choice": "yes"}), Answerer::Person))
        .unwrap();
    let text = f.view(&run_id, 100, 30);
    assert!(
        text.contains(r#"answer (person): {"choice":"yes"}"#),
        "{text}"
    );
}

/// Stepping back through a run whose decision was answered: the node waits only from the event
/// that asked (the answer shown only from the event that gave it), ran before it, and was not
/// visited before the run reached it.
#[test]
fn history_shows_each_node_as_it_was_at_the_event() {
    let mut f = Fixture::new();
    let (run_id, decision) = waiting_on_decision(&mut f);
    f.store
        .write(|w| w.answer_decision(&decision, &json!({"choice": "yes"}), Answerer::Person))
        .unwrap();
    let mut app = App::load(&f.store, RunFilter::default(), Some(&run_id)).unwrap();
    let back = |app: &mut App| {
        app.key(&f.store, KeyCode::Left).unwrap();
        buffer_text(&frame(app, PLAIN, f.clock_now(), 100, 30).unwrap())
    };
    let text = back(&mut app);
    assert!(
        text.contains("HISTORY event 6 of 6: decision_answered"),
        "{text}"
    );
    assert!(text.contains("answer (person)"), "{text}");
    // Asked, not yet answered: the question without its answer.
    let text = back(&mut app);
    assert!(text.contains("HISTORY event 5 of 6: waiting"), "{text}");
    assert!(
        line_with(&text, "[approve]").contains("? [approve] waiting ×1"),
        "{text}"
    );
    assert!(
        text.contains("pending") && !text.contains("· answered"),
        "{text}"
    );
    assert!(
        text.contains("question: Ship app.tar") && !text.contains("answer ("),
        "{text}"
    );
    // Before it asked: no decision yet.
    let text = back(&mut app);
    assert!(
        text.contains("HISTORY event 4 of 6: transitioned"),
        "{text}"
    );
    assert!(
        line_with(&text, "[approve]").contains("▶ [approve] running ×1"),
        "{text}"
    );
    assert!(!text.contains("question:"), "{text}");
    assert!(
        line_with(&text, "[build]").contains("✓ [build] ok ×1 3.00s"),
        "{text}"
    );
    let text = back(&mut app);
    assert!(
        text.contains("HISTORY event 3 of 6: node_started"),
        "{text}"
    );
    assert!(
        line_with(&text, "[build]").contains("▶ [build] running ×1"),
        "{text}"
    );
    assert!(
        line_with(&text, "[approve]").contains("not visited"),
        "{text}"
    );
    let text = back(&mut app);
    assert!(text.contains("HISTORY event 2 of 6: activated"), "{text}");
    assert!(
        line_with(&text, "[build]").contains("not visited"),
        "{text}"
    );
    // Live again: as it is now.
    app.key(&f.store, KeyCode::End).unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 100, 30).unwrap());
    assert!(
        line_with(&text, "[approve]").contains("? [approve] waiting ×1"),
        "{text}"
    );
    assert!(
        line_with(&text, "[build]").contains("✓ [build] ok ×1"),
        "{text}"
    );
}

/// A waiting node's box says how long it has waited, the time the inspector gives too.
#[test]
fn a_waiting_node_shows_how_long_it_has_waited() {
    let mut f = Fixture::new();
    let (run_id, _) = waiting_on_decision(&mut f);
    f.clock.advance(95_000);
    let text = f.view(&run_id, 80, 24);
    assert!(
        line_with(&text, "[approve]").contains("? [approve] waiting ×1 1m ◀"),
        "{text}"
    );
    assert!(text.contains("· for 1m"), "{text}");
    // A finished node keeps the time its attempts took.
    assert!(
        line_with(&text, "[build]").contains("✓ [build] ok ×1 3.00s"),
        "{text}"
    );
}

/// A run waiting on a durable timer says in its header when it wakes.
#[test]
fn a_run_waiting_on_a_timer_says_when_it_wakes() {
    let mut f = Fixture::new();
    let graph = json!({
        "name": "nap", "start": "nap", "nodes": {"nap": {"kind": "wait"}}, "edges": []
    });
    let (run_id, act, a1) = f.start(&graph, None);
    let set = f
        .store
        .write(|w| {
            w.wait_until(
                &act.claim,
                &a1,
                piw_host::store::Wake::After(2 * 3_600_000),
                &json!(null),
            )
        })
        .unwrap();
    let text = f.view(&run_id, 100, 30);
    let wakes = format!("wakes in 2 h ({})", super::render::clock_time(set.wake_at));
    assert!(
        line_with(&text, "live · current node nap").contains(&wakes),
        "{text}"
    );
    let set_line = format!(
        "timer_set      wake {}",
        super::render::clock_time(set.wake_at)
    );
    assert!(text.contains(&set_line), "{text}");
}

/// At 200×50 a short run leaves the panels most of the screen: the events pane takes it, so
/// every event down to the first is listed, and no more rows than they need.
#[test]
fn the_events_pane_uses_the_rows_the_panels_do_not_need() {
    let mut f = Fixture::new();
    let graph = json!({
        "name": "spin", "start": "a", "max_steps": 100,
        "nodes": {"a": {"kind": "compute"}},
        "edges": [{"from": "a", "switch": {"on": "$.n", "cases": {}, "default": "a"}}]
    });
    let (run_id, act, mut attempt) = f.start(&graph, None);
    for n in 0..20 {
        attempt = f.step(&act, &attempt, json!({"n": n}), "a", 10);
    }
    let text = f.view(&run_id, 200, 50);
    let rows: Vec<&str> = text.lines().collect();
    let first = rows
        .iter()
        .position(|l| l.contains("#1 "))
        .unwrap_or_else(|| {
            panic!("the first event is not listed:\n{text}");
        });
    assert!(text.contains("#23 "), "{text}");
    // The pane ends right under the first event, above the footer.
    assert!(rows[first + 1].starts_with('└'), "{text}");
    assert_eq!(first + 3, rows.len(), "{text}");
    // And the panels above still show all they have.
    assert!(line_with(&text, "[a]").contains("running ×21"), "{text}");
}

/// What does not fit its column or panel is cut with `…`, never silently: a long workflow name
/// in the run list, a long node id in its box (the state, time and `◀` stay), an event line.
#[test]
fn a_cut_line_ends_in_an_ellipsis() {
    let mut f = Fixture::new();
    let graph = json!({
        "name": "a-workflow-whose-name-is-much-longer-than-its-column", "start": "first",
        "nodes": {"first": {"kind": "compute"},
                  "a-node-whose-id-is-longer-than-the-graph-panel": {"kind": "compute"}},
        "edges": [{"from": "first", "to": "a-node-whose-id-is-longer-than-the-graph-panel"}]
    });
    let (run_id, act, attempt) = f.start(&graph, None);
    f.step(
        &act,
        &attempt,
        json!({}),
        "a-node-whose-id-is-longer-than-the-graph-panel",
        1_000,
    );
    let list = buffer_text(
        &frame(
            &App::load(&f.store, RunFilter::default(), None).unwrap(),
            PLAIN,
            f.clock_now(),
            80,
            24,
        )
        .unwrap(),
    );
    assert!(
        line_with(&list, short(&run_id))
            .contains("running     a-workflow-whose… -                a-node-whose-id-… "),
        "{list}"
    );
    let text = f.view(&run_id, 80, 24);
    let node = line_with(&text, "[a-node-");
    assert!(
        node.contains("▶ [a-node-whose-id-is…] ×1 0ms ◀ │"),
        "{text}"
    );
    let event = line_with(&text, "#4 ");
    assert!(
        event.ends_with("first ─▶ a-node-whose-id-is-longer-than-the-gr…│"),
        "{text}"
    );
    assert!(
        text.contains("┌ graph a-workflow-whose-name-is-much-…┐"),
        "{text}"
    );
    // Nothing is cut where it fits.
    assert!(
        line_with(&text, "[first]").contains("✓ [first] ok ×1 1.00s"),
        "{text}"
    );
}

#[test]
fn a_failed_run_shows_its_error_and_its_childs_stderr() {
    let mut f = Fixture::new();
    let run_id = failed_run(&mut f);
    let text = f.view(&run_id, 100, 30);
    assert!(text.contains("FAILED · build · "), "{text}");
    assert!(
        text.contains("error: node compile failed: cc: error: missing header"),
        "{text}"
    );
    let compile = text.lines().find(|l| l.contains("[compile]")).unwrap();
    assert!(
        compile.contains('✗') && compile.contains("failed"),
        "{text}"
    );
    assert!(text.contains("took 4.00s"), "{text}");
    assert!(text.contains("child: exit 1"), "{text}");
    assert!(
        text.contains("stderr: foo.c:1: fatal: foo.h not found"),
        "{text}"
    );
}

/// A run without a session keeps its notify messages: its `notified` events say them.
#[test]
fn a_sessionless_runs_notified_events_show_their_messages() {
    let mut f = Fixture::new();
    let graph = json!({
        "name": "tell", "start": "say",
        "nodes": {"say": {"kind": "notify"}}, "edges": []
    });
    let (run_id, act, a) = f.start(&graph, None);
    f.store
        .write(|w| {
            w.notify(
                &act.claim,
                &json!({"kind": "final", "message": "Deployed a,\nb and c"}),
            )
        })
        .unwrap();
    f.store
        .write(|w| w.complete(&act.claim, &a, &json!(null), &json!("done")))
        .unwrap();
    let text = f.view(&run_id, 100, 30);
    let notified = text.lines().find(|l| l.contains("notified")).unwrap();
    assert!(
        notified.contains("notified       Deployed a, b and c"),
        "{text}"
    );
}

#[test]
fn a_composed_run_shows_the_included_workflow() {
    let mut f = Fixture::new();
    let run_id = composed_run(&mut f);
    // Tall enough for every box of the run (at 24 lines the panel scrolls to the selected one).
    let text = f.view(&run_id, 80, 40);
    assert!(text.contains("included workflow repair"), "{text}");
    let heading = text
        .lines()
        .position(|l| l.contains("included workflow repair"))
        .unwrap();
    let fix = text
        .lines()
        .position(|l| l.contains("[repair.fix]"))
        .unwrap();
    let plan = text.lines().position(|l| l.contains("[plan]")).unwrap();
    assert!(plan < heading && heading < fix, "{text}");
    let verify = text
        .lines()
        .find(|l| l.contains("[repair.verify]"))
        .unwrap();
    assert!(verify.contains('▶') && verify.contains('◀'), "{text}");
    // Its progress, under it and in the inspector.
    let below = text
        .lines()
        .skip_while(|l| !l.contains("[repair.verify]"))
        .nth(2)
        .unwrap();
    assert!(below.contains("⋯ verifying 3 of 7 files"), "{text}");
    assert!(text.contains("progress: verifying 3 of 7 files"), "{text}");
    assert!(text
        .lines()
        .find(|l| l.contains("[report]"))
        .unwrap()
        .contains("not visited"));
}

#[test]
fn once_prints_the_same_frames_from_a_read_only_store() {
    let mut f = Fixture::new();
    let loop_run = branch_and_loop(&mut f);
    let (waiting, _) = waiting_on_decision(&mut f);
    let failed = failed_run(&mut f);
    let composed = composed_run(&mut f);
    let list = super::once(&f.paths, RunFilter::default(), None, (100, 40)).unwrap();
    for id in [&loop_run, &waiting, &failed, &composed] {
        assert!(list.contains(short(id)), "{list}");
    }
    let cases = [
        (&loop_run, "COMPLETED · polish"),
        (&waiting, "question: Ship app.tar to production?"),
        (&failed, "error: node compile failed"),
        (&composed, "included workflow repair"),
    ];
    for (id, expected) in cases {
        let text = super::once(&f.paths, RunFilter::default(), Some(id), (100, 40)).unwrap();
        assert!(text.contains(expected), "{text}");
        assert_eq!(text.lines().count(), 40);
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(!text.contains('\u{1b}'), "no terminal codes: {text}");
    }
}

/// Nodes as (id, state), edges as (from, case, to).
type ParsedGraph = (Vec<(String, String)>, Vec<(String, Option<String>, String)>);

/// A mermaid flowchart parsed back: node labels and classes, and edges as (from, case, to)
/// by node id.
fn parse_mermaid(text: &str) -> ParsedGraph {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("flowchart TD"), "{text}");
    let mut names = std::collections::HashMap::new();
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for line in lines.map(str::trim) {
        if let Some((key, rest)) = line.split_once("[\"") {
            if key.starts_with("subgraph") {
                continue;
            }
            let (label, class) = rest.split_once("\"]:::").expect(line);
            let id = label.split("<br/>").next().unwrap().to_owned();
            names.insert(key.to_owned(), id.clone());
            nodes.push((id, class.to_owned()));
        } else if let Some((from, rest)) = line.split_once(" -->") {
            let (case, to) = match rest.strip_prefix('|') {
                Some(r) => {
                    let (case, to) = r.split_once("| ").expect(line);
                    (Some(case.to_owned()), to)
                }
                None => (None, rest.trim()),
            };
            edges.push((from.to_owned(), case, to.trim().to_owned()));
        }
    }
    let edges = edges
        .into_iter()
        .map(|(a, c, b)| (names[&a].clone(), c, names[&b].clone()))
        .collect();
    (nodes, edges)
}

/// A DOT digraph parsed back: `"id" [.. state="s" ..];` and `"a" -> "b" [label="c"];`.
fn parse_dot(text: &str) -> ParsedGraph {
    assert!(text.starts_with("digraph \""), "{text}");
    assert_eq!(
        text.matches('{').count(),
        text.matches('}').count(),
        "{text}"
    );
    let quoted = |s: &str| -> (String, String) {
        let s = s.trim_start();
        let rest = s.strip_prefix('"').expect(s);
        let end = rest.find('"').expect(s);
        (rest[..end].to_owned(), rest[end + 1..].to_owned())
    };
    let attr = |s: &str, name: &str| {
        s.split_once(&format!("{name}=\""))
            .map(|(_, r)| r.split_once('"').unwrap().0.to_owned())
    };
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('"')) {
        let (first, rest) = quoted(line);
        if let Some(rest) = rest.trim_start().strip_prefix("->") {
            let (to, attrs) = quoted(rest);
            edges.push((first, attr(&attrs, "label"), to));
        } else {
            nodes.push((first, attr(&rest, "state").expect(line)));
        }
    }
    (nodes, edges)
}

#[test]
fn run_graph_prints_mermaid_and_dot_that_parse_back_to_the_graph_and_its_states() {
    let mut f = Fixture::new();
    let loop_run = branch_and_loop(&mut f);
    let composed = composed_run(&mut f);
    let expected_edges = vec![
        ("draft".to_owned(), None, "review".to_owned()),
        (
            "review".to_owned(),
            Some("true".to_owned()),
            "draft".to_owned(),
        ),
        (
            "review".to_owned(),
            Some("*".to_owned()),
            "publish".to_owned(),
        ),
    ];
    let model = RunModel::load(&f.store, &loop_run).unwrap();
    for format in [GraphFormat::Mermaid, GraphFormat::Dot] {
        let text = export::render(&model, format);
        let (mut nodes, mut edges) = match format {
            GraphFormat::Mermaid => parse_mermaid(&text),
            GraphFormat::Dot => parse_dot(&text),
        };
        nodes.sort();
        edges.sort();
        let mut want = expected_edges.clone();
        want.sort();
        assert_eq!(edges, want, "{text}");
        assert_eq!(
            nodes,
            vec![
                ("draft".to_owned(), "ok".to_owned()),
                ("publish".to_owned(), "ok".to_owned()),
                ("review".to_owned(), "ok".to_owned()),
            ],
            "{text}"
        );
    }

    let model = RunModel::load(&f.store, &composed).unwrap();
    let mermaid = export::render(&model, GraphFormat::Mermaid);
    let (nodes, _) = parse_mermaid(&mermaid);
    assert!(
        nodes.contains(&("repair.verify".into(), "running".into())),
        "{mermaid}"
    );
    assert!(
        nodes.contains(&("report".into(), "not_visited".into())),
        "{mermaid}"
    );
    assert!(mermaid.contains("subgraph m0[\"repair\"]"), "{mermaid}");
    let dot = export::render(&model, GraphFormat::Dot);
    assert!(dot.contains("subgraph \"cluster_repair\""), "{dot}");
    let (nodes, edges) = parse_dot(&dot);
    assert_eq!(nodes.len(), 4, "{dot}");
    assert!(
        edges.contains(&("repair.fix".into(), None, "repair.verify".into())),
        "{dot}"
    );

    // Through the command's own path, read-only.
    let via_paths = super::graph(&f.paths, &loop_run, GraphFormat::Dot).unwrap();
    assert_eq!(
        via_paths,
        export::render(
            &RunModel::load(&f.store, &loop_run).unwrap(),
            GraphFormat::Dot
        )
    );
}

#[test]
fn events_load_a_page_at_a_time_and_history_pages_back() {
    let mut f = Fixture::new();
    let graph = json!({
        "name": "spin", "start": "a", "max_steps": 10000,
        "nodes": {"a": {"kind": "compute"}},
        "edges": [{"from": "a", "switch": {"on": "$.n", "cases": {}, "default": "a"}}]
    });
    let (run_id, act, mut attempt) = f.start(&graph, None);
    for n in 0..250 {
        attempt = f.step(&act, &attempt, json!({"n": n}), "a", 10);
    }
    let mut model = RunModel::load(&f.store, &run_id).unwrap();
    assert_eq!(model.events.len(), super::model::EVENTS_PAGE as usize);
    assert_eq!(model.events[0].seq, model.run.revision);
    let steps = super::model::EVENTS_PAGE as usize + 5;
    for _ in 0..steps {
        model.history_back(&f.store).unwrap();
    }
    assert_eq!(
        model.shown_event().unwrap().seq,
        model.run.revision + 1 - steps as u64
    );
    assert_eq!(model.events.len(), 2 * super::model::EVENTS_PAGE as usize);
    // A change while in history keeps the event shown.
    attempt = f.step(&act, &attempt, json!({"n": -1}), "a", 10);
    let _ = attempt;
    let shown = model.shown_event().unwrap().seq;
    model.reload(&f.store).unwrap();
    assert_eq!(model.shown_event().unwrap().seq, shown);
    // The node as it was then (events 1-2 started and activated the run, each later one
    // opened an attempt), and as it is now once live again.
    assert_eq!(model.nodes[0].activity.as_ref().unwrap().visits, shown - 2);
    model.live(&f.store).unwrap();
    assert_eq!(model.nodes[0].activity.as_ref().unwrap().visits, 252);
}

#[test]
fn the_run_list_loads_the_next_page_when_the_selection_passes_the_last_run() {
    let mut f = Fixture::new();
    let graph = decision_graph();
    let mut oldest = String::new();
    for i in 0..super::model::RUNS_PAGE + 5 {
        let (run_id, _, _) = f.start(&graph, None);
        if i == 0 {
            oldest = run_id;
        }
        f.clock.advance(1);
    }
    let mut app = App::load(&f.store, RunFilter::default(), None).unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(text.contains("piw runs: 200 of 205"), "{text}");
    app.key(&f.store, KeyCode::End).unwrap();
    assert_eq!(app.runs.selected, 199);
    for _ in 0..10 {
        app.key(&f.store, KeyCode::Down).unwrap();
    }
    assert_eq!(app.runs.rows.len(), 205);
    assert_eq!(app.runs.selected_run(), Some(oldest.as_str()));
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 80, 24).unwrap());
    assert!(text.contains("piw runs: 205 of 205"), "{text}");
    assert!(
        line_with(&text, short(&oldest)).contains("> running"),
        "{text}"
    );
    // A reload keeps every page loaded and the selection.
    app.reload(&f.store).unwrap();
    assert_eq!(app.runs.selected_run(), Some(oldest.as_str()));
}

/// The run list reaches every one of thousands of runs, a page at a time, each listed once
/// although runs start while the person scrolls (an offset page showed runs again).
#[test]
fn the_run_list_reaches_every_run_once_while_runs_start() {
    let mut f = Fixture::new();
    let new_run = || NewRun {
        workflow_name: "many".into(),
        source_root: "/tmp/w.workflow.json".into(),
        source_hash: "abc".into(),
        mounted_sources: json!({}),
        definition: None,
        input: json!(null),
        origin_session: None,
        execution_mode: ExecutionMode::Detached,
        project_dir: "/tmp".into(),
    };
    let mut seeded = Vec::new();
    // Runs of one transaction share a start time: pages also end among equal times.
    for _ in 0..21 {
        seeded.extend(
            f.store
                .write(|w| {
                    (0..100)
                        .map(|_| w.start_run(&new_run()))
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap(),
        );
        f.clock.advance(1);
    }
    // The list's last run: of the first transaction's runs (the oldest start time; equal times
    // list by id), the largest id. Not the first made: ids made within one millisecond order
    // by their random part.
    let oldest = seeded[..100].iter().max().unwrap().clone();
    let mut app = App::load(&f.store, RunFilter::default(), None).unwrap();
    let mut pages = 1;
    // 2,100 runs at 10 a key: a bound only a list that never reaches its end passes.
    for _ in 0..1_000 {
        if app.runs.selected_run() == Some(oldest.as_str()) {
            break;
        }
        let loaded = app.runs.rows.len();
        app.key(&f.store, KeyCode::PageDown).unwrap();
        if app.runs.rows.len() > loaded {
            pages += 1;
            // Three newer runs start after each page.
            f.store
                .write(|w| (0..3).try_for_each(|_| w.start_run(&new_run()).map(drop)))
                .unwrap();
        }
    }
    assert_eq!(
        app.runs.selected_run(),
        Some(oldest.as_str()),
        "the oldest run is reached ({pages} pages)"
    );
    assert_eq!(app.runs.selected, app.runs.rows.len() - 1, "it is the last");
    let mut ids: Vec<&str> = app.runs.rows.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids.len(), seeded.len(), "each run once");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), seeded.len(), "no run twice");
    assert!(app.runs.total > seeded.len() as u64);
}

/// The short id the run list shows for `run_id` (its ending: the fixtures' runs share no 6).
fn short(run_id: &str) -> &str {
    &run_id[run_id.len() - crate::run_ids::SHORT_ID_MIN..]
}

fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle}:\n{text}"))
}

/// In history an effect is drawn as it was: not there before it was reserved, still applying
/// (no receipt) before it settled.
#[test]
fn history_takes_back_effects_settled_or_reserved_later() {
    use piw_host::store::{EffectRecord, EventRecord};

    use super::model::{undo_later_events, Inspector};

    let effect = |id: &str| EffectRecord {
        effect_id: id.into(),
        run_id: "run".into(),
        attempt_id: "att".into(),
        effect_key: format!("key-{id}"),
        fingerprint: "fp".into(),
        state: "applied".into(),
        retry_contract: "never".into(),
        receipt: Some(json!({"ok": true})),
        receipt_omitted: false,
        error: None,
    };
    let event = |seq: u64, kind: &str, data: Value| EventRecord {
        run_id: "run".into(),
        seq,
        kind: kind.into(),
        at: T0,
        data,
    };
    let mut inspector = Inspector {
        effects: vec![effect("e1"), effect("e2"), effect("e3")],
        ..Inspector::default()
    };
    let later = [
        event(
            9,
            "effect_reserved",
            json!({"effect": "e3", "key": "key-e3"}),
        ),
        event(
            8,
            "effect_settled",
            json!({"effect": "e2", "state": "applied"}),
        ),
    ];
    undo_later_events(&mut inspector, &later);
    let states: Vec<(&str, &str, bool)> = inspector
        .effects
        .iter()
        .map(|e| (e.effect_id.as_str(), e.state.as_str(), e.receipt.is_some()))
        .collect();
    assert_eq!(states, [("e1", "applied", true), ("e2", "applying", false)]);
}

/// However small the terminal, a frame is drawn (cut, never a panic), live and in history.
#[test]
fn tiny_terminals_get_a_frame() {
    let mut f = Fixture::new();
    let run_id = composed_run(&mut f);
    let mut app = App::load(&f.store, RunFilter::default(), Some(&run_id)).unwrap();
    for history in [false, true] {
        if history {
            app.key(&f.store, KeyCode::Left).unwrap();
        }
        for (w, h) in [(1, 1), (2, 3), (10, 4), (30, 8), (80, 5)] {
            frame(&app, PLAIN, f.clock_now(), w, h).unwrap();
        }
    }
    app.key(&f.store, KeyCode::Esc).unwrap();
    for (w, h) in [(1, 1), (5, 2), (30, 8)] {
        frame(&app, PLAIN, f.clock_now(), w, h).unwrap();
    }
}

/// The inspector shows the updates the selected node published: a progress track with its
/// count, status and ETA (the median rate of its samples), another type as its data, and the
/// events the run's budget dropped.
#[test]
fn the_inspector_shows_a_nodes_updates_with_the_tracks_eta() {
    let mut f = Fixture::new();
    let (run_id, act, _a) = f.start(&loop_graph(), None);
    let rows = |done: u64| {
        json!({ "type": "progress", "key": "rows", "data": {
            "schema": "pi-workflows.progress.v1", "label": "Rows", "status": "running",
            "completed": done, "total": 1000, "unit": "rows" } })
    };
    // 100 rows in ten seconds, 400 done: a minute left.
    for m in 0..4u64 {
        if m > 0 {
            f.clock.advance(10_000);
        }
        f.store
            .write(|w| {
                w.heartbeat(&act.claim)?;
                w.progress(&act.claim, "progress:rows", &rows(100 + m * 100))
            })
            .unwrap();
    }
    f.store
        .write(|w| {
            w.progress(
                &act.claim,
                "note:log",
                &json!({ "type": "note", "key": "log", "data": { "text": "half" } }),
            )
        })
        .unwrap();
    let text = f.view(&run_id, 120, 40);
    assert!(text.contains("update progress:rows at"), "{text}");
    assert!(text.contains("Rows 400/1000 rows · running"), "{text}");
    assert!(text.contains("ETA 1m (median of 3 intervals)"), "{text}");
    assert!(text.contains("update note:log at"), "{text}");
    assert!(text.contains(r#"{"text":"half"}"#), "{text}");
    assert!(!text.contains("events dropped"), "{text}");
}

/// A value stored apart shows as its start and size with the command that prints it whole,
/// never as the reference's JSON; a literal shows as the workflow's own value.
#[test]
fn a_value_stored_apart_shows_its_preview_and_size() {
    let r = piw_host::protocol::ValueRef {
        sha256: "ab".repeat(32),
        bytes: 5_000_012,
        preview: "{\"stdout\":\"xxxx".into(),
    };
    let shown = super::render::compact(&r.to_json());
    assert_eq!(
        shown,
        format!(
            "{{\"stdout\":\"xxxx… (5000012 bytes: piw run value <run> {})",
            r.sha256
        )
    );
    let own = serde_json::json!({ "$piw": "value" });
    let literal = piw_host::protocol::value::wrap_inline(own.clone());
    assert_eq!(super::render::compact(&literal), own.to_string());
}

/// A run whose first attempt's output is a value stored apart: 400 numbered lines of text, so
/// its pretty JSON is an array with one string per row. Returns the run and the value.
fn run_with_a_stored_output(f: &mut Fixture) -> (String, Value) {
    let lines: Vec<String> = (0..400)
        .map(|i| format!("line {i:04} {}", "x".repeat(200)))
        .collect();
    let output = json!({ "lines": lines });
    let text = output.to_string();
    let r = piw_host::protocol::ValueRef::for_canonical(&text);
    let (run_id, act, attempt) = f.start(&loop_graph(), None);
    f.store
        .write(|w| w.put_value_chunk(&act.claim, &r.sha256, r.bytes, 0, text.as_bytes()))
        .unwrap();
    f.step(&act, &attempt, r.to_json(), "review", 1000);
    (run_id, output)
}

/// The app on run `run_id` with the first node (the attempt holding the value) selected.
fn app_on_draft(f: &Fixture, run_id: &str, size: (u16, u16)) -> App {
    let mut app = App::load(&f.store, RunFilter::default(), Some(run_id)).unwrap();
    app.size = size;
    app.key(&f.store, KeyCode::Up).unwrap();
    app
}

/// `v` in the inspector fetches the value stored apart whole (here from the store opened
/// read-only: no host answers) and shows it as pretty JSON in a pane that scrolls; before it, the inspector
/// shows the preview and the footer the key. Esc goes back to the run.
#[test]
fn v_fetches_a_stored_value_whole_and_scrolls_it() {
    let mut f = Fixture::new();
    let (run_id, _) = run_with_a_stored_output(&mut f);
    let size = (120, 30);
    // As `piw view` reads a stopped installation: read-only, no host answering.
    let store = super::open_store(&f.paths).unwrap();
    let mut app = App::load(&store, RunFilter::default(), Some(&run_id)).unwrap();
    app.size = size;
    app.key(&store, KeyCode::Up).unwrap();
    app.values = std::sync::Arc::new(super::value::HostValues {
        paths: f.paths.clone(),
    });
    let now = f.clock_now();
    let shown = |app: &App| buffer_text(&frame(app, PLAIN, now, size.0, size.1).unwrap());
    let before = shown(&app);
    assert!(
        before.contains(r#"output: {"lines":["line 0000"#),
        "{before}"
    );
    assert!(before.contains("v value"), "{before}");
    assert!(!before.contains("line 0001"), "{before}");

    app.key(&store, KeyCode::Char('v')).unwrap();
    assert!(shown(&app).contains("fetching…"), "{}", shown(&app));
    assert!(app.pending_fetch().is_some());
    app.fetch_value(&store);
    let text = shown(&app);
    let bytes = app.value.as_ref().unwrap().value.reference.bytes;
    assert!(
        text.contains(&format!(" output · {bytes} bytes · 0% · value 1 of 1 ")),
        "{text}"
    );
    assert!(line_with(&text, "{").starts_with("│{"), "{text}");
    assert!(text.contains(r#"│  "lines": ["#), "{text}");
    // Each 212-column string wraps into two rows of 118.
    assert!(text.contains(r#"│    "line 0000 xxx"#), "{text}");
    assert!(text.contains("Esc run"), "{text}");
    assert!(!text.contains("line 0020"), "{text}");

    for _ in 0..3 {
        app.key(&store, KeyCode::PageDown).unwrap();
    }
    // 27 rows, a page is 26: `{`, `"lines": [` and 38 strings of two rows each went by.
    let text = shown(&app);
    assert!(!text.contains("line 0037"), "{text}");
    assert!(text.contains(r#"│    "line 0038 xxx"#), "{text}");
    app.key(&store, KeyCode::Up).unwrap();
    let text = shown(&app);
    assert!(text.contains(r#"│xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","#), "{text}");
    assert!(!text.contains("line 0037"), "{text}");
    app.key(&store, KeyCode::Up).unwrap();
    assert!(
        shown(&app).contains(r#"│    "line 0037 xxx"#),
        "{}",
        shown(&app)
    );
    app.key(&store, KeyCode::End).unwrap();
    let text = shown(&app);
    assert!(text.contains(r#"│    "line 0399 xxx"#), "{text}");
    assert!(text.contains("│  ]"), "{text}");
    assert!(text.contains("│}"), "{text}");
    app.key(&store, KeyCode::Home).unwrap();
    assert!(shown(&app).contains("│{"), "{}", shown(&app));

    app.key(&store, KeyCode::Esc).unwrap();
    let text = shown(&app);
    assert!(text.contains(" inspector "), "{text}");
    assert!(text.contains(r#"output: {"lines":["line 0000"#), "{text}");
}

/// A value that cannot be read (the host gone, the value missing) shows why, as a line.
#[test]
fn a_value_that_cannot_be_fetched_shows_why() {
    struct Gone;
    impl super::value::ValueSource for Gone {
        fn fetch(
            &self,
            _: &Store,
            _: &str,
            _: &piw_host::protocol::ValueRef,
        ) -> Result<Value, String> {
            Err("the host: disconnected".into())
        }
    }
    let mut f = Fixture::new();
    let (run_id, _) = run_with_a_stored_output(&mut f);
    let mut app = app_on_draft(&f, &run_id, (100, 30));
    app.values = std::sync::Arc::new(Gone);
    app.key(&f.store, KeyCode::Char('v')).unwrap();
    app.fetch_value(&f.store);
    // Scroll keys on a failed fetch change nothing.
    app.key(&f.store, KeyCode::PageDown).unwrap();
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 100, 30).unwrap());
    assert!(
        text.contains("could not fetch the value: the host: disconnected"),
        "{text}"
    );

    // A value the store does not hold: the store says so.
    let missing = piw_host::protocol::ValueRef::for_canonical("\"gone\"");
    let error =
        super::value::ValueSource::fetch(&super::value::StoreValues, &f.store, &run_id, &missing)
            .unwrap_err();
    assert!(error.contains(&missing.sha256), "{error}");
}

/// The terminal loop fetches on a thread (its own read-only store) and hands the laid-out
/// value back; a result for a value the pane no longer waits for is dropped.
#[test]
fn a_value_fetched_on_a_thread_fills_the_pane_waiting_for_it() {
    let mut f = Fixture::new();
    let (run_id, _) = run_with_a_stored_output(&mut f);
    let mut app = app_on_draft(&f, &run_id, (100, 30));
    app.key(&f.store, KeyCode::Char('v')).unwrap();
    let (run, reference) = app.pending_fetch().unwrap();
    assert_eq!(run, run_id);
    let (tx, rx) = std::sync::mpsc::channel();
    super::live::fetch_value(f.paths.clone(), app.values.clone(), run, reference, tx);
    let (sha256, result) = match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(super::live::Wake::ValueFetched { sha256, result }) => (sha256, result),
        other => panic!("expected the value, got {other:?}"),
    };

    app.value_fetched(&"0".repeat(64), Err("another value".into()));
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 100, 30).unwrap());
    assert!(text.contains("fetching…"), "{text}");
    app.value_fetched(&sha256, result);
    assert_eq!(app.pending_fetch(), None);
    let text = buffer_text(&frame(&app, PLAIN, f.clock_now(), 100, 30).unwrap());
    assert!(text.contains(r#"│    "line 0000 xxx"#), "{text}");

    // Closed before its value came: the value is dropped, the run shown.
    app.key(&f.store, KeyCode::Esc).unwrap();
    app.value_fetched(&sha256, Err("late".into()));
    assert!(app.value.is_none());
}
