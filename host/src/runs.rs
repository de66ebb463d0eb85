//! `piw run ...`: starting, following, answering and recovering runs, and their text rendering.

use super::*;

/// The decision of `kind` (`checkpoint` or `human_decision`) of run `run_id` that a person's
/// `answer` binds to: `named` (whatever it has become: the host refuses one that is closed),
/// else the one the run waits for now, refused when an earlier decision of that kind took an
/// equal answer (the same command run again must not answer the next visit). `Err(receipt)`
/// inside: the named decision already took this very answer; its original receipt.
pub(crate) fn bound_decision(
    client: &mut BlockingClient,
    run_id: &str,
    kind: &str,
    named: Option<&str>,
    answer: &Value,
) -> Result<Result<String, Value>, CliError> {
    let status = client.send(run_request(
        run_id,
        RequestBody::RunStatus(Default::default()),
    ))?;
    let of_kind: Vec<&Value> = status.body["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["kind"] == kind)
        .collect();
    let took = |d: &Value| d["status"] == "answered" && &d["answer"] == answer;
    if let Some(id) = named {
        let d = of_kind
            .iter()
            .find(|d| d["decision_id"] == id)
            .ok_or_else(|| CliError::Runtime(format!("run {run_id} has no {kind} {id}")))?;
        if took(d) {
            return Ok(Err(
                json!({ "decision_id": id, "answered_by": d["answered_by"],
                                  "repeated": true }),
            ));
        }
        return Ok(Ok(id.to_owned()));
    }
    let pending = of_kind
        .iter()
        .find(|d| d["status"] == "pending")
        .ok_or_else(|| {
            let what = if kind == "checkpoint" {
                "a checkpoint answer (`piw run answer`)"
            } else {
                "a person's decision (`piw run decide`)"
            };
            CliError::Runtime(format!(
                "run {run_id} does not wait for {what} (the run {})",
                status_words(&str_of(&status.body["run"]["status"]))
            ))
        })?;
    let id = str_of(&pending["decision_id"]);
    if let Some(earlier) = of_kind.iter().find(|d| took(d)) {
        return Err(CliError::Runtime(format!(
            "run {run_id}: this answer was already given to decision {} (node {}); to give it to decision {id} too, name it: --decision {id}",
            str_of(&earlier["decision_id"]),
            str_of(&earlier["node_id"]),
        )));
    }
    Ok(Ok(id))
}

/// Who a person's command on a run is from: the login name, kept in the run's events.
pub(crate) fn login_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

/// `piw run graph`: read-only, like `piw view`, so it is answered before (and without) a host.
/// With `--json`, `{"run_id", "format", "graph"}` (the graph as text).
fn run_graph(
    paths: &PiwPaths,
    run_id: &str,
    format: view::export::GraphFormat,
    json_out: bool,
) -> Result<(), CliError> {
    let graph = view::graph(paths, run_id, format)?;
    if json_out {
        let format = clap::ValueEnum::to_possible_value(&format)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        print(
            &json!({ "run_id": run_id, "format": format, "graph": graph }),
            true,
            |_| String::new(),
        );
    } else {
        crate::emit(&graph);
    }
    Ok(())
}

/// `piw run <command>`; `json` is `--json` (which `run graph` has no field for).
pub(crate) fn run_cmd(paths: &PiwPaths, mut cmd: RunCmd, json: bool) -> Result<(), CliError> {
    if let Some(run_id) = run_id_of(&mut cmd) {
        *run_id = resolve_run_id(paths, run_id)?;
    }
    if let RunCmd::Graph { run_id, format } = &cmd {
        return run_graph(paths, run_id, *format, json);
    }
    let mut client = connect(paths)?;
    let (receipt, json_out): (Receipt, bool) = match cmd {
        RunCmd::Graph { run_id, format } => return run_graph(paths, &run_id, format, json),
        RunCmd::Start {
            workflow,
            input,
            session,
            detached,
            wait,
            timeout,
            idempotency_key,
            json,
        } => {
            // A name is found like the Pi extension finds it (the project's .pi/workflows,
            // then ~/.pi/agent/workflows); the caller's directory goes with the file, so the
            // host resolves a relative path against it and the run works there.
            let cwd = std::env::current_dir()?;
            let user_home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            let builtins = resolve::builtins_dir();
            let file = resolve::resolve_workflow(&workflow, &cwd, &user_home, builtins.as_deref())?;
            let mut start = piw_core::client::run_start_here(&file, input)?;
            start.session_id = session;
            if detached {
                start.execution_mode = Some(piw_core::store::ExecutionMode::Detached);
            }
            let mut request =
                Request::new(piw_core::ids::new_id("cli"), RequestBody::RunStart(start));
            if let Some(key) = idempotency_key {
                request = request.with_idempotency_key(key);
            }
            let r = client.send(request)?;
            if wait {
                let run_id = str_of(&r.body["run_id"]);
                // The run id first (on stderr, so `--json` output stays one document): a wait
                // may be long, for example on a step that needs an answer.
                eprintln!(
                    "piw: started run {run_id}; waiting for it to finish (interrupting the wait leaves the run going)"
                );
                let deadline = timeout.map(|s| std::time::Instant::now() + Duration::from_secs(s));
                return wait_for_run(paths, client, &run_id, json, deadline);
            }
            (r, json)
        }
        RunCmd::Value { run_id, sha256, .. } => {
            let reference = piw_core::protocol::ValueRef {
                sha256: sha256.clone(),
                bytes: value_length(&mut client, &run_id, &sha256)?,
                preview: String::new(),
            };
            let value = client.read_value(&run_id, &reference)?;
            return print_value_bytes(&value);
        }
        RunCmd::Status { run_id, json } => {
            let mut r = client.send(run_request(
                &run_id,
                RequestBody::RunStatus(Default::default()),
            ))?;
            // The whole document: values stored apart are read back into it.
            if json {
                client.resolve_run_status(&mut r.body)?;
            }
            (r, json)
        }
        RunCmd::Pause { run_id, json } => (
            client.send(run_request(&run_id, RequestBody::RunPause))?,
            json,
        ),
        RunCmd::Detach { run_id, json } => (
            client.send(run_request(&run_id, RequestBody::RunDetach))?,
            json,
        ),
        RunCmd::Resume { run_id, json } => (
            client.send(run_request(&run_id, RequestBody::RunResume))?,
            json,
        ),
        RunCmd::Answer {
            run_id,
            answer,
            input,
            decision,
            json,
        } => {
            let answer = input.unwrap_or_else(|| json_or_text(&answer.unwrap_or_default()));
            let decision = match bound_decision(
                &mut client,
                &run_id,
                "checkpoint",
                decision.as_deref(),
                &answer,
            )? {
                Ok(id) => id,
                Err(receipt) => return print_receipt(&receipt, json),
            };
            (
                // A person's answer (`answered_by: person`): `decision.answer` takes checkpoints too.
                client.send(run_request(
                    &run_id,
                    RequestBody::DecisionAnswer(payload::DecisionAnswer {
                        decision_id: decision,
                        answer,
                        channel: None,
                    }),
                ))?,
                json,
            )
        }
        RunCmd::Decide {
            run_id,
            choice,
            text,
            decision,
            json,
        } => {
            let mut answer = json!({ "choice": choice });
            if let Some(text) = text {
                answer["text"] = json!(text);
            }
            let decision = match bound_decision(
                &mut client,
                &run_id,
                "human_decision",
                decision.as_deref(),
                &answer,
            )? {
                Ok(id) => id,
                Err(receipt) => return print_receipt(&receipt, json),
            };
            (
                client.send(run_request(
                    &run_id,
                    RequestBody::DecisionAnswer(payload::DecisionAnswer {
                        decision_id: decision,
                        answer,
                        channel: None,
                    }),
                ))?,
                json,
            )
        }
        RunCmd::Submit {
            run_id,
            result,
            input,
            interaction,
            timeout,
            json,
        } => {
            let result = input.or(result).unwrap_or(Value::Null);
            let status = client.send(run_request(
                &run_id,
                RequestBody::RunStatus(Default::default()),
            ))?;
            let interactions = status.body["interactions"].as_array().into_iter().flatten();
            // Named: that request, whatever it has become (the host refuses a closed one). Else
            // the open one, guarded against a result an earlier request already took.
            let named = interaction.is_some();
            let bound = match &interaction {
                Some(id) => interactions
                    .clone()
                    .find(|i| i["interaction_id"] == id.as_str())
                    .ok_or_else(|| {
                        CliError::Runtime(format!("run {run_id} has no interaction {id}"))
                    })?,
                None => interactions
                    .clone()
                    .find(|i| i["status"] == "pending" || i["status"] == "validating")
                    .ok_or_else(|| {
                        CliError::Runtime(format!(
                            "run {run_id} waits for no interactive step (the run {})",
                            status_words(&str_of(&status.body["run"]["status"]))
                        ))
                    })?,
            };
            let request = Request::new(
                piw_core::ids::new_id("cli"),
                RequestBody::InteractionSubmit(payload::InteractionSubmit {
                    interaction_id: str_of(&bound["interaction_id"]),
                    result,
                    refuse_repeat: !named,
                }),
            )
            .with_run_id(&run_id)
            .with_node_id(str_of(&bound["node_id"]))
            .with_attempt_id(str_of(&bound["attempt_id"]));
            let mut receipt = client.send(request)?;
            if timeout > 0 && receipt.body["state"] == "validating" {
                let deadline = std::time::Instant::now() + Duration::from_secs(timeout);
                let submission_id = str_of(&receipt.body["submission_id"]);
                wait_for_verdict(paths, client, &run_id, &submission_id, deadline)?;
                receipt.body["state"] = json!("accepted");
            }
            (receipt, json)
        }
        RunCmd::Wait {
            run_id,
            timeout,
            json,
        } => {
            let deadline = timeout.map(|s| std::time::Instant::now() + Duration::from_secs(s));
            return wait_for_run(paths, client, &run_id, json, deadline);
        }
        RunCmd::Retry {
            run_id,
            reason,
            accept_source,
            json,
        } => (
            client.send(run_request(
                &run_id,
                RequestBody::RunRetry(payload::RunRetry {
                    reason: Some(reason),
                    by: Some(login_name()),
                    accept_source,
                }),
            ))?,
            json,
        ),
        RunCmd::ResolveEffect {
            run_id,
            effect_id,
            applied,
            failed,
            reason,
            json,
        } => {
            let result =
                match (applied, failed) {
                    (Some(receipt), None) => payload::EffectResult::Applied { receipt },
                    (None, Some(error)) => payload::EffectResult::Failed { error },
                    _ => return Err(CliError::Usage(
                        "say what became of the effect: --applied RECEIPT_JSON or --failed ERROR"
                            .into(),
                    )),
                };
            (
                client.send(run_request(
                    &run_id,
                    RequestBody::EffectResolve(payload::EffectResolve {
                        effect_id,
                        result,
                        reason: Some(reason),
                        by: Some(login_name()),
                    }),
                ))?,
                json,
            )
        }
        RunCmd::Cancel { run_id, json } => (
            client.send(run_request(
                &run_id,
                RequestBody::RunCancel(payload::RunCancel {
                    reason: Some("cancelled from the piw CLI".into()),
                }),
            ))?,
            json,
        ),
    };
    print(&receipt.body, json_out, |b| {
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
            text.push_str(&update_lines(b));
            text.push_str(&message_lines(b));
            text.push_str(&last_child_lines(&b["last_child"]));
            text
        } else {
            fields_text(b)
        }
    });
    Ok(())
}

/// The length of value `sha256` of `run_id`: a `value.get` of nothing says it.
fn value_length(client: &mut BlockingClient, run_id: &str, sha256: &str) -> Result<u64, CliError> {
    let r = client.send(run_request(
        run_id,
        RequestBody::ValueGet(piw_core::protocol::payload::ValueGet {
            sha256: sha256.to_owned(),
            offset: 0,
            max_bytes: Some(1),
        }),
    ))?;
    Ok(r.body["bytes"].as_u64().unwrap_or_default())
}

/// The `result` line of a run's text, when it has a result: a value stored apart shows its
/// start and size (`--json` reads it whole).
fn result_line(result: &Value) -> String {
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
fn fields_text(body: &Value) -> String {
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
fn print_receipt(body: &Value, json_out: bool) -> Result<(), CliError> {
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

/// How long `--wait` waits, after the run ended, for its last child to exit: the host's kill
/// grace (2 s) twice, for a child that lingers and is stopped, and margin.
const CHILD_EXIT_WAIT: Duration = Duration::from_secs(10);

/// `status` of the ended `run_id`, read again until its last child has exited (at most
/// [`CHILD_EXIT_WAIT`]); the latest status read when that does not happen in time or a read
/// fails.
fn with_last_child_exited(client: &mut BlockingClient, run_id: &str, status: Receipt) -> Receipt {
    let started = std::time::Instant::now();
    let mut status = status;
    while status.body["last_child"].is_object()
        && status.body["last_child"]["exited"] != json!(true)
        && started.elapsed() < CHILD_EXIT_WAIT
    {
        std::thread::sleep(Duration::from_millis(25));
        match client.send(run_request(
            run_id,
            RequestBody::RunStatus(Default::default()),
        )) {
            Ok(r) => status = r,
            Err(_) => break,
        }
    }
    status
}

pub(crate) fn wait_for_run(
    paths: &PiwPaths,
    mut client: BlockingClient,
    run_id: &str,
    json_out: bool,
    deadline: Option<std::time::Instant>,
) -> Result<(), CliError> {
    let subscribe = |client: &mut BlockingClient| {
        client.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: Some(run_id.to_owned()),
            session_id: None,
            all: None,
        }))
    };
    subscribe(&mut client)?;
    let mut announced = std::collections::HashSet::new();
    let mut restarts = 0;
    // The host died under the wait (killed, crashed): runs are durable and a new host recovers
    // them at once, so start one and go on waiting, a few times at most.
    let mut start_again = |e: ClientError| -> Result<BlockingClient, CliError> {
        restarts += 1;
        if restarts > WAIT_HOST_RESTARTS {
            return Err(CliError::Runtime(format!(
                "the host went away again after {WAIT_HOST_RESTARTS} restarts while waiting for run {run_id} ({e}); see {}",
                paths.log.display()
            )));
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(CliError::GaveUpWaiting(format!(
                "gave up waiting for run {run_id} (the host went away: {e})"
            )));
        }
        eprintln!(
            "piw: the host went away ({e}); starting it again to go on waiting for run {run_id}"
        );
        let mut client = connect(paths)?;
        subscribe(&mut client)?;
        Ok(client)
    };
    loop {
        let r = match client.send(run_request(
            run_id,
            RequestBody::RunStatus(Default::default()),
        )) {
            Ok(r) => r,
            Err(e) if host_went_away(&e) => {
                client = start_again(e)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let status = str_of(&r.body["run"]["status"]);
        // A run that waits for a person (or is paused) goes on only when someone acts: say so
        // once per thing it waits for, so a long wait never looks like a hang.
        for notice in waiting_notices(run_id, &r.body) {
            if announced.insert(notice.clone()) {
                eprintln!("piw: {notice}");
            }
        }
        // Terminal, or stopped until a person acts: either way nothing more happens by itself.
        if ["completed", "failed", "cancelled", "timed_out", "review"].contains(&status.as_str()) {
            // The run ends before its child does: wait (bounded) for that exit, so what is
            // printed has the child's exit and the end of its output.
            let mut r = with_last_child_exited(&mut client, run_id, r);
            if json_out {
                client.resolve_run_status(&mut r.body)?;
            }
            print(&r.body, json_out, |b| {
                let run = &b["run"];
                // Only the lines that say something: a completed run has no error, a failed
                // one no result.
                let mut text = format!("run {run_id} {}", status_words(&status));
                text.push_str(&result_line(&run["result"]));
                text.push_str(&why_lines(run));
                text
            });
            return if status == "completed" {
                Ok(())
            } else if json_out {
                // The status printed says how it ended; stdout stays one JSON document.
                Err(CliError::Reported)
            } else {
                Err(CliError::Runtime(format!(
                    "run {run_id} {}",
                    status_words(&status)
                )))
            };
        }
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(CliError::GaveUpWaiting(format!(
                    "gave up waiting for run {run_id} (the run {})",
                    status_words(&status)
                )));
            }
            client.set_timeout(Some(left))?;
        }
        match client.next_event() {
            // Any event (or events dropped while a status call was in flight): reread the
            // status once, whatever else was queued meanwhile.
            Ok(_) | Err(ClientError::SubscriptionOverflow) => {
                client.discard_queued_events();
            }
            // The host ended the subscription because it fell too far behind: an ordinary
            // condition under load, so subscribe again on a new connection and reread the
            // status. Any other goodbye (`internal` included) is a real failure, reported below.
            Err(ClientError::Closed {
                code: RejectionCode::SubscriberLagged,
                ..
            }) => {
                client = BlockingClient::connect(paths)?;
                subscribe(&mut client)?;
            }
            Err(ClientError::TimedOut) if deadline.is_some() => {
                return Err(CliError::GaveUpWaiting(format!(
                    "gave up waiting for run {run_id} (it is {status})"
                )));
            }
            // Someone stops the host on purpose: do not start it again behind their back.
            Err(ClientError::Closed {
                code: RejectionCode::HostShuttingDown,
                ..
            }) => {
                return Err(CliError::Runtime(format!(
                    "the host is stopping; run {run_id} ({status}) goes on when a host runs again (`piw run status {run_id}`)"
                )));
            }
            Err(e) if host_went_away(&e) => client = start_again(e)?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits (until `deadline`) for the workflow's verdict on submission `submission_id` of
/// `run_id`. `Ok` once it is accepted; an error saying why when it is
/// rejected (`submission_rejected`, the workflow's reason), or the run stopped for review
/// (`run_in_review`) or ended before judging it, or no verdict came in time (exit 4).
fn wait_for_verdict(
    paths: &PiwPaths,
    mut client: BlockingClient,
    run_id: &str,
    submission_id: &str,
    deadline: std::time::Instant,
) -> Result<(), CliError> {
    let subscribe = |client: &mut BlockingClient| {
        client.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: Some(run_id.to_owned()),
            session_id: None,
            all: None,
        }))
    };
    subscribe(&mut client)?;
    let gave_up = |state: &str| {
        CliError::GaveUpWaiting(format!(
            "no verdict on submission {submission_id} of run {run_id} yet (the run {}): the submission stands and is judged later (`piw run status {run_id}`)",
            status_words(state)
        ))
    };
    loop {
        // Subscribed first, then read: no verdict can fall between the read and the wait.
        let status = client.send(run_request(
            run_id,
            RequestBody::RunStatus(Default::default()),
        ))?;
        let run = &status.body["run"];
        let run_status = str_of(&run["status"]);
        let last = status.body["interactions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| &i["last_submission"])
            .find(|s| s["submission_id"] == submission_id);
        let details = json!({ "run_id": run_id, "submission_id": submission_id });
        match last.map(|s| str_of(&s["state"])).as_deref() {
            Some("accepted") => return Ok(()),
            Some("rejected") => {
                let why = last
                    .and_then(|s| s["error"].as_str())
                    .unwrap_or("no reason given");
                let mut details = details;
                details["error"] = json!(why);
                return Err(CliError::Client {
                    code: "submission_rejected",
                    message: format!(
                        "the workflow rejected submission {submission_id} of run {run_id}: {why}"
                    ),
                    details,
                });
            }
            _ if run_status == "review" => {
                let why = run["review_reason"].as_str().unwrap_or("no reason given");
                let mut details = details;
                details["review_reason"] = json!(why);
                return Err(CliError::Client {
                    code: "run_in_review",
                    message: format!(
                        "run {run_id} stopped for review before judging submission {submission_id}: {why}; the submission stands and is judged once the run goes on (`piw run retry {run_id}`)"
                    ),
                    details,
                });
            }
            _ if ["completed", "failed", "cancelled", "timed_out"]
                .contains(&run_status.as_str()) =>
            {
                return Err(CliError::Client {
                    code: "invalid_transition",
                    message: format!(
                        "run {run_id} {} before judging submission {submission_id}",
                        status_words(&run_status)
                    ),
                    details,
                });
            }
            _ => {}
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(gave_up(&run_status));
        }
        client.set_timeout(Some(left))?;
        match client.next_event() {
            Ok(_) | Err(ClientError::SubscriptionOverflow) => {
                client.discard_queued_events();
            }
            Err(ClientError::Closed {
                code: RejectionCode::SubscriberLagged,
                ..
            }) => {
                client = BlockingClient::connect(paths)?;
                subscribe(&mut client)?;
            }
            Err(ClientError::TimedOut) => return Err(gave_up(&run_status)),
            Err(e) => return Err(e.into()),
        }
    }
}

/// The connection ended without a goodbye: the host process died (or was killed).
pub(crate) fn host_went_away(e: &ClientError) -> bool {
    matches!(e, ClientError::Disconnected | ClientError::Io(_))
}

/// `piw run value`: the value's exact stored bytes (its canonical JSON, which its SHA-256
/// names: `piw run value <run> <sha256> | sha256sum` prints that hash), with a newline only
/// on a terminal. A reader that went away (`| head`) ends the output quietly: nothing is
/// wrong with the value or the host.
fn print_value_bytes(value: &Value) -> Result<(), CliError> {
    use std::io::{IsTerminal as _, Write as _};
    let text = piw_core::protocol::canonical_json(value);
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| {
        if out.is_terminal() {
            out.write_all(b"\n")?;
        }
        out.flush()
    });
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
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
}
