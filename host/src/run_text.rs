//! A run's status as text: what `piw run status` and `piw run wait` print without `--json`,
//! and what a wait says while a run waits for someone.

use crate::*;

/// `piw run status` as text: the run, what it waits for, its updates, messages and newest
/// child.
pub(crate) fn status_text(b: &Value) -> String {
    if let Some(run) = b.get("run") {
        let mut text = format!(
            "run {}\nstatus {}{}\nworkflow {}\nnode {}\nrevision {}",
            str_of(&run["run_id"]),
            str_of(&run["status"]),
            if run["paused"] == json!(true) {
                " (paused)"
            } else {
                ""
            },
            str_of(&run["workflow_name"]),
            str_of(&run["current_node"]),
            run["revision"]
        );
        text.push_str(&mode_line(run));
        let now = human::now_ms();
        if !run["created_at"].is_null() {
            text.push_str(&format!(
                "\nstarted {}",
                human::when(&run["created_at"], now)
            ));
        }
        if !run["finished_at"].is_null() {
            text.push_str(&format!(
                "\nended {}",
                human::when(&run["finished_at"], now)
            ));
        }
        if let Some(wakes) = human::coming(&run["wake_at"], now) {
            text.push_str(&format!("\nwakes {wakes}"));
        }
        text.push_str(&result_line(&run["result"]));
        text.push_str(&why_lines(run));
        text.push_str(&request_lines(b));
        if let Some(service) = step_service_text(&str_of(&run["run_id"]), b) {
            text.push_str(&format!("\n{service}"));
        }
        text.push_str(&update_lines(b));
        text.push_str(&message_lines(b));
        text.push_str(&last_child_lines(&b["last_child"]));
        text
    } else {
        fields_text(b)
    }
}

/// The `result` line of a run's text, when it has a result: a value stored apart shows its
/// start and size (`--json` reads it whole).
pub(crate) fn result_line(result: &Value) -> String {
    use piw_core::protocol::value::{read_slot, Slot};
    match read_slot(result) {
        _ if result.is_null() => String::new(),
        Ok(Slot::Reference(r)) => format!(
            "\nresult {}… ({} bytes; `--json` prints it whole)",
            r.preview, r.bytes
        ),
        Ok(Slot::Inline(v)) => format!("\nresult {v}"),
        Err(_) => format!("\nresult {result}"),
    }
}

/// Who answers a run's interactive steps and where its workflow messages go.
pub(crate) fn mode_line(run: &Value) -> String {
    let session = run["origin_session"].as_str();
    match (str_of(&run["execution_mode"]).as_str(), session) {
        ("detached", Some(s)) => format!("\nmode detached (the host's Pi children answer its steps when a Pi model is set for it; its messages go to Pi session {s})"),
        ("detached", None) => "\nmode detached (the host's Pi children answer its steps when a Pi model is set for it; no Pi session gets its messages: this status shows them)".to_owned(),
        ("interactive", Some(s)) => format!("\nmode interactive (Pi session {s} answers its steps and gets its messages)"),
        (mode, _) if mode != "-" => format!("\nmode {mode}"),
        _ => String::new(),
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
pub(crate) fn why_lines(run: &Value) -> String {
    [("error", "error"), ("review", "review_reason")]
        .iter()
        .filter_map(|(label, key)| run[*key].as_str().map(|why| format!("\n{label} {why}")))
        .collect()
}

/// What a waiting run asks, one block per open request: the question (the workflow's
/// request), its id, and the command that answers it.
pub(crate) fn request_lines(status: &Value) -> String {
    let run_id = str_of(&status["run"]["run_id"]);
    let mut text = String::new();
    for d in status["decisions"].as_array().into_iter().flatten() {
        if d["status"] != "pending" {
            continue;
        }
        let id = str_of(&d["decision_id"]);
        let (what, how) = if d["kind"] == "human_decision" {
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
        let asked = match (d["kind"] == "human_decision")
            .then(|| human::decision_lines(&d["request"], "  "))
            .flatten()
        {
            Some(lines) => format!("\n{}", lines.join("\n")),
            None => format!(" {}", d["request"]),
        };
        text.push_str(&format!(
            "\nwaits for {what} ({}) at node {}:{asked}\n  answer with `{how}`",
            str_of(&d["decision_id"]),
            str_of(&d["node_id"]),
        ));
    }
    for i in status["interactions"].as_array().into_iter().flatten() {
        if i["status"] != "pending" && i["status"] != "validating" {
            continue;
        }
        text.push_str(&format!(
            "\nwaits for a result for interactive step {} ({}) at node {}: {}\n  submit with `piw run submit {run_id} --interaction {} <json>`",
            str_of(&i["interaction_id"]),
            str_of(&i["kind"]),
            str_of(&i["node_id"]),
            i["request"],
            str_of(&i["interaction_id"]),
        ));
        if let Some(error) = i["last_submission"]["error"].as_str() {
            text.push_str(&format!("\n  the last result was rejected: {error}"));
        }
    }
    text
}

/// Who serves the run's open interactive step (the host's `step_service`), one line, and when
/// nobody does, what a person can do about it; `None` when it has no such step.
pub(crate) fn step_service_text(run_id: &str, status: &Value) -> Option<String> {
    let service = status.get("step_service").filter(|s| s.is_object())?;
    let step = str_of(&service["interaction_id"]);
    let model = service["model"].as_str().unwrap_or("its model");
    let session = str_of(&status["run"]["origin_session"]);
    // How to give a detached run a model: any of these, from the host's next start on.
    let give_a_model = "give it a Pi model: `piw host stop`, then any piw command with PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL set starts a host that serves it (the host reads them, and Pi's default model, defaultProvider and defaultModel in Pi's settings.json, when it starts); a new run can name one in its input instead, `--input '{\"piw_detached\": {\"provider\": ..., \"model\": ...}}'`";
    let by_hand = format!("or submit a result yourself (`piw run submit {run_id} <json>`), or `piw run cancel {run_id}`");
    Some(match (service["served_by"].as_str(), service["why"].as_str()) {
        (Some("session"), _) => format!("step {step} is served by Pi session {session}"),
        (Some("bridge"), _) => format!("step {step} is served by a Pi the host started ({model})"),
        (Some("bridge_starting"), _) => {
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
            str_of(&service["detail"])
        ),
        (served_by, why) => format!(
            "step {step}: served by {}{}",
            served_by.unwrap_or("-"),
            why.map(|w| format!(" ({w})")).unwrap_or_default()
        ),
    })
}

/// How the run's newest child ended (or that it runs) and the end of what it wrote to stderr:
/// a run that failed or stopped for review shows why in the child's own words. Empty for a
/// run that never had a child.
/// The run's latest update per `(type, key)` (a `progress` one as its label, count and status,
/// another as its data, cut at 200 characters), and the events its budget dropped.
pub(crate) fn update_lines(status: &Value) -> String {
    let mut text = String::new();
    for u in status["updates"].as_array().into_iter().flatten() {
        let d = &u["data"];
        let what = if u["type"] == json!("progress") && d.is_object() {
            let mut line = d["label"]
                .as_str()
                .unwrap_or(str_of(&u["key"]).as_str())
                .to_owned();
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
        text.push_str(&format!(
            "\nupdate {}:{} {what}",
            str_of(&u["type"]),
            str_of(&u["key"])
        ));
    }
    if let Some(dropped) = status["events_dropped"].as_u64().filter(|n| *n > 0) {
        text.push_str(&format!(
            "\nevents dropped {dropped} (over the run's event budget; the latest updates are above)"
        ));
    }
    text
}

/// The run's newest workflow messages (`run.status` → `messages`), one line each: its kind and
/// text (a notify node's message; a run's end, its status and error or reason), cut at 200
/// characters on one line. `--json` has them whole.
pub(crate) fn message_lines(status: &Value) -> String {
    let messages = status["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let mut text = String::new();
    let count = status["message_count"].as_u64().unwrap_or_default();
    if let Some(older) = count.checked_sub(messages.len() as u64).filter(|n| *n > 0) {
        text.push_str(&format!("\nmessages: {older} older ones not shown"));
    }
    for m in messages {
        text.push_str(&format!(
            "\nmessage {} {}",
            str_of(&m["kind"]),
            message_text(m)
        ));
    }
    text
}

/// What a workflow message says, on one line of at most 200 characters.
fn message_text(message: &Value) -> String {
    const MAX_CHARS: usize = 200;
    let c = &message["content"];
    let text = if message["content_omitted"] == json!(true) {
        "(left out: the status was too large for one reply)".to_owned()
    } else if message["kind"] == json!("terminal") && c.is_object() {
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

pub(crate) fn last_child_lines(child: &Value) -> String {
    /// Lines of the stderr tail shown; `--json` has the whole tails.
    const STDERR_LINES: usize = 10;
    if child.is_null() {
        return String::new();
    }
    let mut text = if child["exited"] == json!(true) {
        format!(
            "
last child exited: {}",
            str_of(&child["reason"])
        )
    } else {
        format!(
            "
last child running (pid {})",
            str_of(&child["pid"])
        )
    };
    let stderr = child["stderr_tail"].as_str().unwrap_or_default();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if !lines.is_empty() {
        text.push_str(
            "
its stderr ends:",
        );
        for line in &lines[lines.len().saturating_sub(STDERR_LINES)..] {
            text.push_str(
                "
  ",
            );
            text.push_str(line);
        }
    }
    text
}

/// What a non-terminal run waits for that only someone else can give it, one line each:
/// pending decisions, pending interactions, a pause; and a durable timer's wake time, so a
/// long wait never looks like a hang. Empty for a run that goes on by itself now.
pub(crate) fn waiting_notices(run_id: &str, status_body: &Value) -> Vec<String> {
    let run = &status_body["run"];
    let mut notices = Vec::new();
    if run["paused"] == json!(true) {
        notices.push(format!(
            "run {run_id} is paused; `piw run resume {run_id}` lets it go on"
        ));
    }
    if str_of(&run["status"]) != "waiting" {
        return notices;
    }
    if let Some(at) = run["wake_at"].as_u64() {
        notices.push(format!(
            "run {run_id} waits on a durable timer at node {} until {}; it goes on by itself then (no process runs meanwhile), and this command goes on waiting",
            str_of(&run["current_node"]),
            human::utc(at)
        ));
    }
    // Each notice names the command that answers from here. A run started without a Pi
    // session (`--session`) has nobody to present its requests: say so rather than promise an
    // answer from a session that does not exist.
    let answered_in = |command: String| {
        run["origin_session"].as_str().map_or_else(
            || format!("the run has no Pi session to answer it in (started without --session): answer it with `{command}` (or `piw run cancel {run_id}`); this command goes on waiting"),
            |s| format!("answer it with `{command}` or in Pi session {s}; this command goes on waiting"),
        )
    };
    for d in status_body["decisions"].as_array().into_iter().flatten() {
        if d["status"] == "pending" {
            let (what, command, asked) = if d["kind"] == "human_decision" {
                (
                    "a person's decision",
                    format!("piw run decide {run_id} <choice> [text]"),
                    human::decision_lines(&d["request"], "  ")
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
                str_of(&d["decision_id"]),
                str_of(&d["node_id"]),
                answered_in(command)
            ));
        }
    }
    // A step nobody serves waits for ever unless a person acts: say so, and how.
    if let Some(service) = step_service_text(run_id, status_body)
        .filter(|_| status_body["step_service"]["served_by"] == json!("nobody"))
    {
        notices.push(format!("run {run_id}: {service}"));
    }
    for i in status_body["interactions"].as_array().into_iter().flatten() {
        if i["status"] == "pending" || i["status"] == "validating" {
            notices.push(format!(
                "run {run_id} waits for an answer to interaction {} ({}) at node {}; {}",
                str_of(&i["interaction_id"]),
                str_of(&i["kind"]),
                str_of(&i["node_id"]),
                answered_in(format!("piw run submit {run_id} <json>"))
            ));
        }
    }
    notices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_status_lists_the_latest_updates_and_the_dropped_events() {
        let status = json!({
            "updates": [
                { "type": "progress", "key": "rows", "data": {
                    "label": "Rows", "status": "running", "completed": 400, "total": 1000,
                    "unit": "rows" } },
                { "type": "note", "key": "log", "data": { "text": "half" } },
            ],
            "events_dropped": 12,
        });
        assert_eq!(
            update_lines(&status),
            "\nupdate progress:rows Rows 400/1000 rows · running\nupdate note:log {\"text\":\"half\"}\nevents dropped 12 (over the run's event budget; the latest updates are above)"
        );
        assert_eq!(
            update_lines(&json!({ "updates": [], "events_dropped": 0 })),
            ""
        );
    }

    #[test]
    fn waiting_notices_name_what_only_someone_else_can_give_the_run() {
        let body = json!({
            "run": {"status": "waiting", "paused": true, "origin_session": "s-1"},
            "decisions": [
                {"decision_id": "d-1", "node_id": "ask", "kind": "checkpoint", "status": "pending"},
                {"decision_id": "d-0", "node_id": "old", "kind": "checkpoint", "status": "answered"},
                {"decision_id": "d-2", "node_id": "gate", "kind": "human_decision", "status": "pending"}
            ],
            "interactions": [
                {"interaction_id": "i-1", "node_id": "chat", "kind": "agent", "status": "validating"},
                {"interaction_id": "i-0", "node_id": "chat", "kind": "agent", "status": "settled"}
            ]
        });
        let notices = waiting_notices("run-1", &body);
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
        let notices = waiting_notices("run-1", &sessionless);
        assert!(
            notices[1].contains("has no Pi session to answer it in")
                && notices[1].contains("`piw run cancel run-1`"),
            "{notices:#?}"
        );
        // A durable timer: when the run goes on by itself.
        let timed = json!({"run": {"status": "waiting", "paused": false, "current_node": "nap",
                                   "wake_at": 1_700_000_060_000_u64}});
        let notices = waiting_notices("run-1", &timed);
        assert_eq!(notices.len(), 1, "{notices:#?}");
        assert!(
            notices[0].contains("waits on a durable timer at node nap until 2023-11-14T22:14:20Z"),
            "{notices:#?}"
        );
        // A run that goes on by itself waits for nobody, whatever its rows say.
        let running =
            json!({"run": {"status": "running", "paused": false}, "decisions": body["decisions"]});
        assert!(waiting_notices("run-1", &running).is_empty());
    }
}
