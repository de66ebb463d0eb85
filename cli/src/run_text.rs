//! A run's status as text: what `piw run status` and `piw run wait` print without `--json`,
//! and what a wait says while a run waits for someone. Every renderer reads the typed
//! `run.status` reply, so a field the host renames breaks the build, not the output.

use piw_host::store::{
    ChildRecord, DecisionRecord, InteractionRecord, MessageRecord, RunRecord, RunStatus,
};
use replies::RunStatusReply;

use crate::*;

/// `piw run status` as text: the run, what it waits for, its updates, messages and newest
/// child.
pub(crate) fn status_text(s: &RunStatusReply) -> String {
    let run = &s.run;
    let mut text = format!(
        "run {}\nstatus {}{}\nworkflow {}\nnode {}\nrevision {}",
        run.run_id,
        run.status.as_str(),
        if run.paused { " (paused)" } else { "" },
        run.workflow_name,
        run.current_node.as_deref().unwrap_or("-"),
        run.revision
    );
    text.push_str(&mode_line(run));
    let now = human::now_ms();
    text.push_str(&format!(
        "\nstarted {}",
        human::when(Some(run.created_at), now)
    ));
    if run.finished_at.is_some() {
        text.push_str(&format!("\nended {}", human::when(run.finished_at, now)));
    }
    if let Some(wakes) = human::coming(run.wake_at, now) {
        text.push_str(&format!("\nwakes {wakes}"));
    }
    text.push_str(&result_line(run.result.as_ref()));
    text.push_str(&why_lines(run));
    text.push_str(&request_lines(s));
    if let Some(service) = step_service_text(s) {
        text.push_str(&format!("\n{service}"));
    }
    text.push_str(&update_lines(s));
    text.push_str(&message_lines(s));
    text.push_str(&last_child_lines(s.last_child.as_ref()));
    text
}

/// The `result` line of a run's text, when it has a result: a value stored apart shows its
/// start and size (`--json` reads it whole).
pub(crate) fn result_line(result: Option<&Value>) -> String {
    use piw_host::protocol::value::{read_slot, Slot};
    let Some(result) = result.filter(|r| !r.is_null()) else {
        return String::new();
    };
    match read_slot(result) {
        Ok(Slot::Reference(r)) => format!(
            "\nresult {}… ({} bytes; `--json` prints it whole)",
            r.preview, r.bytes
        ),
        Ok(Slot::Inline(v)) => format!("\nresult {v}"),
        Err(_) => format!("\nresult {result}"),
    }
}

/// Who answers a run's interactive steps and where its workflow messages go.
pub(crate) fn mode_line(run: &RunRecord) -> String {
    match (run.execution_mode.as_str(), run.origin_session.as_deref()) {
        ("detached", Some(s)) => format!("\nmode detached (the host's Pi children answer its steps when a Pi model is set for it; its messages go to Pi session {s})"),
        ("detached", None) => "\nmode detached (the host's Pi children answer its steps when a Pi model is set for it; no Pi session gets its messages: this status shows them)".to_owned(),
        ("interactive", Some(s)) => format!("\nmode interactive (Pi session {s} answers its steps and gets its messages)"),
        ("", _) => String::new(),
        (mode, _) => format!("\nmode {mode}"),
    }
}

/// A receipt body that is not a run, one `key value` line per field.
pub(crate) fn fields_text(body: &Value) -> String {
    body.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k} {}", str_of(v)))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Prints a receipt the command did not need the host for (an answer already taken).
pub(crate) fn print_receipt(body: &Value, json_out: bool) -> Result<(), CliError> {
    print(body, json_out, fields_text);
    Ok(())
}

/// Why a run failed or stopped for review, one line each and only when there is a reason:
/// what its user needs next.
pub(crate) fn why_lines(run: &RunRecord) -> String {
    [("error", &run.error), ("review", &run.review_reason)]
        .into_iter()
        .filter_map(|(label, why)| why.as_ref().map(|why| format!("\n{label} {why}")))
        .collect()
}

/// A decision that waits for someone.
fn is_open_decision(d: &DecisionRecord) -> bool {
    d.status == "pending"
}

/// An interactive step that waits for a result (or for the workflow's verdict on one).
fn is_open_interaction(i: &InteractionRecord) -> bool {
    i.status == "pending" || i.status == "validating"
}

/// A person's decision, rather than a checkpoint's answer.
fn is_human_decision(d: &DecisionRecord) -> bool {
    d.kind == "human_decision"
}

/// What a waiting run asks, one block per open request: the question (the workflow's
/// request), its id, and the command that answers it.
pub(crate) fn request_lines(status: &RunStatusReply) -> String {
    let run_id = &status.run.run_id;
    let mut text = String::new();
    for d in status.decisions.iter().filter(|d| is_open_decision(d)) {
        let id = &d.decision_id;
        let (what, how) = if is_human_decision(d) {
            (
                "a person's decision",
                format!("piw run decide {run_id} --decision {id} <choice> [text]"),
            )
        } else {
            (
                "a checkpoint answer",
                format!("piw run answer {run_id} --decision {id} <answer>"),
            )
        };
        let asked = match is_human_decision(d)
            .then(|| human::decision_lines(&d.request, "  "))
            .flatten()
        {
            Some(lines) => format!("\n{}", lines.join("\n")),
            None => format!(" {}", d.request),
        };
        text.push_str(&format!(
            "\nwaits for {what} ({id}) at node {}:{asked}\n  answer with `{how}`",
            d.node_id,
        ));
    }
    for i in status
        .interactions
        .iter()
        .filter(|i| is_open_interaction(i))
    {
        text.push_str(&format!(
            "\nwaits for a result for interactive step {id} ({}) at node {}: {}\n  submit with `piw run submit {run_id} --interaction {id} <json>`",
            i.kind,
            i.node_id,
            i.request,
            id = i.interaction_id,
        ));
        if let Some(error) = i.last_submission.as_ref().and_then(|s| s.error.as_deref()) {
            text.push_str(&format!("\n  the last result was rejected: {error}"));
        }
    }
    text
}

/// Who serves the run's open interactive step (the host's `step_service`), one line, and when
/// nobody does, what a person can do about it; `None` when it has no such step.
pub(crate) fn step_service_text(status: &RunStatusReply) -> Option<String> {
    let service = status.step_service.as_ref()?;
    let run_id = &status.run.run_id;
    let step = &service.interaction_id;
    let model = service.model.as_deref().unwrap_or("its model");
    let session = status.run.origin_session.as_deref().unwrap_or("-");
    // How to give a detached run a model: any of these, from the host's next start on.
    let give_a_model = "give it a Pi model: `piw host stop`, then any piw command with PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL set starts a host that serves it (the host reads them, and Pi's default model, defaultProvider and defaultModel in Pi's settings.json, when it starts); a new run can name one in its input instead, `--input '{\"piw_detached\": {\"provider\": ..., \"model\": ...}}'`";
    let by_hand = format!("or submit a result yourself (`piw run submit {run_id} <json>`), or `piw run cancel {run_id}`");
    Some(match (service.served_by.as_str(), service.why.as_deref()) {
        ("session", _) => format!("step {step} is served by Pi session {session}"),
        ("bridge", _) => format!("step {step} is served by a Pi the host started ({model})"),
        ("bridge_starting", _) => {
            format!("step {step} will be served by a Pi the host starts ({model}; it waits for a child slot or for Pi to start)")
        }
        (_, Some("session_closed")) => format!(
            "nobody serves step {step}: the run is interactive and its Pi session {session} is not open. Open that session in Pi, or `piw run detach {run_id}` to have a Pi the host starts serve it (it needs a Pi model: PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL, or Pi's default model); {by_hand}"
        ),
        (_, Some("no_model")) => format!(
            "nobody serves step {step}: the run is detached (started without a Pi session, or with --detached) and nothing names a Pi model for it, so the host starts no Pi for it. Start the workflow from Pi instead (`/workflow <name>`: your session serves its steps), or {give_a_model}; {by_hand}"
        ),
        (_, Some("bridges_off")) => format!(
            "nobody serves step {step}: the run is detached and this host starts no Pi (PIW_DETACHED_BRIDGES=off). Start the workflow from Pi instead (`/workflow <name>`), or `piw host stop` and let a host without PIW_DETACHED_BRIDGES=off serve it; {by_hand}"
        ),
        (_, Some("no_pi")) => format!(
            "nobody serves step {step}: the run is detached with model {model}, and the host has no Pi to start: {}; {by_hand}",
            service.detail.as_deref().unwrap_or("-")
        ),
        (served_by, why) => format!(
            "step {step}: served by {served_by}{}",
            why.map(|w| format!(" ({w})")).unwrap_or_default()
        ),
    })
}

/// The run's latest update per `(type, key)` (a `progress` one as its label, count and status,
/// another as its data, cut at 200 characters), and the events its budget dropped.
pub(crate) fn update_lines(status: &RunStatusReply) -> String {
    let mut text = String::new();
    for u in &status.updates {
        let d = &u.data;
        let what = if u.update_type == "progress" && d.is_object() {
            let mut line = d["label"].as_str().unwrap_or(&u.key).to_owned();
            if let Some(done) = d["completed"].as_f64() {
                line.push_str(&format!(" {done}"));
                if let Some(total) = d["total"].as_f64() {
                    line.push_str(&format!("/{total}"));
                }
                if let Some(unit) = d["unit"].as_str() {
                    line.push_str(&format!(" {unit}"));
                }
            }
            format!("{line} · {}", str_of(&d["status"]))
        } else {
            d.to_string().chars().take(200).collect()
        };
        text.push_str(&format!("\nupdate {}:{} {what}", u.update_type, u.key));
    }
    if status.events_dropped > 0 {
        text.push_str(&format!(
            "\nevents dropped {} (over the run's event budget; the latest updates are above)",
            status.events_dropped
        ));
    }
    text
}

/// The run's newest workflow messages (`run.status` → `messages`), one line each: its kind and
/// text (a notify node's message; a run's end, its status and error or reason), cut at 200
/// characters on one line. `--json` has them whole.
pub(crate) fn message_lines(status: &RunStatusReply) -> String {
    let mut text = String::new();
    let shown = status.messages.len() as u64;
    if let Some(older) = status.message_count.checked_sub(shown).filter(|n| *n > 0) {
        text.push_str(&format!("\nmessages: {older} older ones not shown"));
    }
    for m in &status.messages {
        text.push_str(&format!("\nmessage {} {}", m.kind, message_text(m)));
    }
    text
}

/// What a workflow message says, on one line of at most 200 characters.
fn message_text(message: &MessageRecord) -> String {
    const MAX_CHARS: usize = 200;
    let c = &message.content;
    let text = if message.content_omitted {
        "(left out: the status was too large for one reply)".to_owned()
    } else if message.kind == "terminal" && c.is_object() {
        let mut line = str_of(&c["status"]);
        for key in ["error", "reason"] {
            if let Some(why) = c[key].as_str() {
                line.push_str(&format!(": {why}"));
            }
        }
        line
    } else if let Some(said) = c
        .as_str()
        .or_else(|| c["message"].as_str())
        .or_else(|| c["text"].as_str())
    {
        said.to_owned()
    } else {
        c.to_string()
    };
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > MAX_CHARS {
        format!("{}…", one_line.chars().take(MAX_CHARS).collect::<String>())
    } else {
        one_line
    }
}

/// How the run's newest child ended (or that it runs) and the end of what it wrote to stderr:
/// a run that failed or stopped for review shows why in the child's own words. Empty for a
/// run that never had a child.
pub(crate) fn last_child_lines(child: Option<&ChildRecord>) -> String {
    /// Lines of the stderr tail shown; `--json` has the whole tails.
    const STDERR_LINES: usize = 10;
    let Some(child) = child else {
        return String::new();
    };
    let mut text = if child.exited {
        format!(
            "\nlast child exited: {}",
            child.reason.as_deref().unwrap_or("-")
        )
    } else {
        format!(
            "\nlast child running (pid {})",
            child.pid.map_or_else(|| "-".to_owned(), |p| p.to_string())
        )
    };
    let lines: Vec<&str> = child
        .stderr_tail
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !lines.is_empty() {
        text.push_str("\nits stderr ends:");
        for line in &lines[lines.len().saturating_sub(STDERR_LINES)..] {
            text.push_str("\n  ");
            text.push_str(line);
        }
    }
    text
}

/// What a non-terminal run waits for that only someone else can give it, one line each:
/// pending decisions, pending interactions, a pause; and a durable timer's wake time, so a
/// long wait never looks like a hang. Empty for a run that goes on by itself now.
pub(crate) fn waiting_notices(status: &RunStatusReply) -> Vec<String> {
    let run = &status.run;
    let run_id = &run.run_id;
    let mut notices = Vec::new();
    if run.paused {
        notices.push(format!(
            "run {run_id} is paused; `piw run resume {run_id}` lets it go on"
        ));
    }
    if run.status != RunStatus::Waiting {
        return notices;
    }
    if let Some(at) = run.wake_at {
        notices.push(format!(
            "run {run_id} waits on a durable timer at node {} until {}; it goes on by itself then (no process runs meanwhile), and this command goes on waiting",
            run.current_node.as_deref().unwrap_or("-"),
            human::utc(u64::try_from(at).unwrap_or_default())
        ));
    }
    // Each notice names the command that answers from here. A run started without a Pi
    // session (`--session`) has nobody to present its requests: say so rather than promise an
    // answer from a session that does not exist.
    let answered_in = |command: String| {
        run.origin_session.as_deref().map_or_else(
            || format!("the run has no Pi session to answer it in (started without --session): answer it with `{command}` (or `piw run cancel {run_id}`); this command goes on waiting"),
            |s| format!("answer it with `{command}` or in Pi session {s}; this command goes on waiting"),
        )
    };
    for d in status.decisions.iter().filter(|d| is_open_decision(d)) {
        let (what, command, asked) = if is_human_decision(d) {
            (
                "a person's decision",
                format!("piw run decide {run_id} <choice> [text]"),
                human::decision_lines(&d.request, "  ")
                    .map(|lines| format!("\n{}", lines.join("\n")))
                    .unwrap_or_default(),
            )
        } else {
            (
                "a checkpoint answer",
                format!("piw run answer {run_id} <answer>"),
                String::new(),
            )
        };
        notices.push(format!(
            "run {run_id} waits for {what} ({}) at node {}; {}{asked}",
            d.decision_id,
            d.node_id,
            answered_in(command)
        ));
    }
    // A step nobody serves waits for ever unless a person acts: say so, and how.
    let nobody_serves = status
        .step_service
        .as_ref()
        .is_some_and(|s| s.served_by == "nobody");
    if let Some(service) = step_service_text(status).filter(|_| nobody_serves) {
        notices.push(format!("run {run_id}: {service}"));
    }
    for i in status
        .interactions
        .iter()
        .filter(|i| is_open_interaction(i))
    {
        notices.push(format!(
            "run {run_id} waits for an answer to interaction {} ({}) at node {}; {}",
            i.interaction_id,
            i.kind,
            i.node_id,
            answered_in(format!("piw run submit {run_id} <json>"))
        ));
    }
    notices
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `run.status` reply: a waiting run `run-1` with nothing open, with `patch`'s fields
    /// (and `patch["run"]`'s run fields) laid over it.
    fn status(patch: Value) -> RunStatusReply {
        let mut doc = json!({
            "run": {
                "run_id": "run-1", "workflow_name": "w", "source_root": "/p", "source_hash": "h",
                "definition_digest": null, "input_hash": "i", "origin_session": null,
                "execution_mode": "interactive", "project_dir": "/p", "status": "waiting",
                "paused": false, "current_node": null, "current_attempt": null, "revision": 1,
                "result": null, "error": null, "review_reason": null, "wake_at": null,
                "created_at": 1, "updated_at": 1, "finished_at": null
            },
            "claim": {"generation": 0, "owner_kind": null, "owner_id": null,
                      "heartbeat_at": null, "expires_at": null},
            "attempts": [], "attempt_count": 0, "decisions": [], "interactions": [],
            "effects": [], "last_child": null, "updates": [], "events_dropped": 0,
            "messages": [], "message_count": 0
        });
        for (key, value) in patch.as_object().into_iter().flatten() {
            if key == "run" {
                for (field, v) in value.as_object().into_iter().flatten() {
                    doc["run"][field] = v.clone();
                }
            } else {
                doc[key] = value.clone();
            }
        }
        serde_json::from_value(doc).expect("a run.status reply")
    }

    fn decision(id: &str, node: &str, kind: &str, status: &str) -> Value {
        json!({"decision_id": id, "run_id": "run-1", "attempt_id": "a", "node_id": node,
               "kind": kind, "request": {}, "status": status, "answer": null,
               "answered_by": null})
    }

    fn interaction(id: &str, node: &str, status: &str) -> Value {
        json!({"interaction_id": id, "run_id": "run-1", "attempt_id": "a", "node_id": node,
               "origin_session": null, "kind": "agent", "request": {}, "deadline_at": null,
               "status": status, "last_submission": null})
    }

    fn update(kind: &str, key: &str, data: Value) -> Value {
        json!({"type": kind, "key": key, "node_id": null, "attempt_id": null, "data": data,
               "seq": 1, "at": 1, "samples": []})
    }

    #[test]
    fn run_status_lists_the_latest_updates_and_the_dropped_events() {
        let status = status(json!({
            "updates": [
                update("progress", "rows", json!({
                    "label": "Rows", "status": "running", "completed": 400, "total": 1000,
                    "unit": "rows" })),
                update("note", "log", json!({ "text": "half" })),
            ],
            "events_dropped": 12,
        }));
        assert_eq!(
            update_lines(&status),
            "\nupdate progress:rows Rows 400/1000 rows · running\nupdate note:log {\"text\":\"half\"}\nevents dropped 12 (over the run's event budget; the latest updates are above)"
        );
        assert_eq!(update_lines(&super::tests::status(json!({}))), "");
    }

    #[test]
    fn waiting_notices_name_what_only_someone_else_can_give_the_run() {
        let body = json!({
            "run": {"status": "waiting", "paused": true, "origin_session": "s-1"},
            "decisions": [
                decision("d-1", "ask", "checkpoint", "pending"),
                decision("d-0", "old", "checkpoint", "answered"),
                decision("d-2", "gate", "human_decision", "pending"),
            ],
            "interactions": [
                interaction("i-1", "chat", "validating"),
                interaction("i-0", "chat", "settled"),
            ]
        });
        let notices = waiting_notices(&status(body.clone()));
        assert_eq!(notices.len(), 4, "{notices:#?}");
        assert!(notices[0].contains("paused; `piw run resume run-1`"));
        assert!(notices[1].contains("a checkpoint answer (d-1) at node ask"));
        // Each names the command that answers it here, and the session that can too.
        assert!(notices[1]
            .contains("answer it with `piw run answer run-1 <answer>` or in Pi session s-1"));
        assert!(notices[2].contains("a person's decision (d-2) at node gate"));
        assert!(notices[2].contains("`piw run decide run-1 <choice> [text]`"));
        assert!(notices[3].contains("interaction i-1 (agent) at node chat"));
        assert!(notices[3].contains("`piw run submit run-1 <json>`"));
        // Without a Pi session, nobody presents the request: the notice says so.
        let mut sessionless = body.clone();
        sessionless["run"]["origin_session"] = Value::Null;
        let notices = waiting_notices(&status(sessionless));
        assert!(
            notices[1].contains("has no Pi session to answer it in")
                && notices[1].contains("`piw run cancel run-1`"),
            "{notices:#?}"
        );
        // A durable timer: when the run goes on by itself.
        let timed = status(json!({"run": {"status": "waiting", "paused": false,
                                          "current_node": "nap", "wake_at": 1_700_000_060_000_u64}}));
        let notices = waiting_notices(&timed);
        assert_eq!(notices.len(), 1, "{notices:#?}");
        assert!(
            notices[0].contains("waits on a durable timer at node nap until 2023-11-14T22:14:20Z"),
            "{notices:#?}"
        );
        // A run that goes on by itself waits for nobody, whatever its rows say.
        let running =
            json!({"run": {"status": "running", "paused": false}, "decisions": body["decisions"]});
        assert!(waiting_notices(&status(running)).is_empty());
    }

    #[test]
    fn run_status_text_reads_every_part_of_the_typed_reply() {
        let s = status(json!({
            "run": {"execution_mode": "detached", "status": "failed", "paused": true,
                    "current_node": "fix", "revision": 7, "error": "the model gave up",
                    "result": {"ok": false}, "finished_at": 2},
            "interactions": [interaction("i-9", "fix", "pending")],
            "step_service": {"interaction_id": "i-9", "served_by": "nobody", "why": "no_model"},
            "messages": [{"message_id": "m", "run_id": "run-1", "origin_session": null,
                          "kind": "terminal", "content": {"status": "failed",
                          "error": "the model\ngave up"}, "delivered_at": null}],
            "message_count": 3,
            "last_child": {"child_epoch": 1, "run_id": "run-1", "generation": 1,
                           "host_epoch": 1, "mode": "node", "pid": 42, "exit_code": 1,
                           "signal": null, "reason": "exit 1", "stdout_tail": "",
                           "stderr_tail": "one\n\ntwo\n", "handshake": true, "exited": true}
        }));
        let text = status_text(&s);
        for line in [
            "run run-1\nstatus failed (paused)\nworkflow w\nnode fix\nrevision 7",
            "\nmode detached (the host's Pi children answer its steps",
            "no Pi session gets its messages",
            "\nresult {\"ok\":false}",
            "\nerror the model gave up",
            "\nwaits for a result for interactive step i-9 (agent) at node fix",
            "\nnobody serves step i-9: the run is detached",
            "\nmessages: 2 older ones not shown\nmessage terminal failed: the model gave up",
            "\nlast child exited: exit 1\nits stderr ends:\n  one\n  two",
        ] {
            assert!(text.contains(line), "{line:?} not in:\n{text}");
        }
        assert!(text.contains("\nended "), "{text}");
        assert!(!text.contains("\nwakes "), "no timer, no wake line: {text}");
    }
}
