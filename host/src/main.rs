//! `piw`: host control, runs, diagnosis and state maintenance, as a thin layer over
//! `piw-core`. Exit codes: 0 ok, 1 runtime error, 2 usage (an ambiguous run id too), 3
//! `diagnose` found contradictions, 4 a wait gave up at its `--timeout`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{FromArgMatches as _, Parser, Subcommand};
use piw_core::client::{ensure_host, BlockingClient, ClientError, DEFAULT_READY_TIMEOUT};
use piw_core::driver::{HostConfig, HostError};
use piw_core::paths::PiwPaths;
use piw_core::protocol::{payload, Receipt, RejectionCode, Request, RequestBody};
use piw_core::store::{Store, StoreConfig};
use serde_json::{json, Value};

mod channel;
mod cli;
mod completions;
mod host_ctl;
mod human;
mod logs;
mod prune;
mod resolve;
mod run_ids;
mod runs;
mod state;
mod view;
use cli::*;
use host_ctl::*;
use run_ids::*;
use runs::*;
use state::*;

/// How long `piw host status`, `piw host stop` and `piw diagnose` wait for the host to answer. A host that
/// accepts connections but does not answer (stopped, or stuck on a disk) would otherwise hang
/// them for ever, exactly when a user reaches for them.
const HOST_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `piw host stop` waits for the host to end: its connection drain (5 s) and its
/// children's stop grace (2 s) by default, and margin.
const STOP_WAIT_MS: u64 = 15_000;

#[derive(Debug)]
enum CliError {
    /// Exit 1.
    Runtime(String),
    /// Exit 1: the host (or the client library) refused or failed, with the protocol's code
    /// and details, which `--json` reports.
    Client {
        code: &'static str,
        message: String,
        details: Value,
    },
    /// Exit 2: the command line asks for something it must say differently.
    Usage(String),
    /// Exit 3, with nothing more to print: `diagnose` found contradictions (and printed them).
    Findings,
    /// Exit 1, with nothing more to print: the output already says why (`--wait --json` of a
    /// run that did not complete prints its status).
    Reported,
    /// Exit 1: a command that reads an installation was given one that does not exist.
    NoInstallation(String),
    /// Exit 2: a run id prefix that begins several runs (listed in the message, and as
    /// `details.candidates` in `--json`).
    Ambiguous { message: String, candidates: Value },
    /// Exit 4: a wait reached its `--timeout`; the run goes on.
    GaveUpWaiting(String),
}

impl<E: std::fmt::Display + 'static> From<E> for CliError {
    fn from(e: E) -> Self {
        // A client error keeps its code and details for `--json`.
        match (&e as &dyn std::any::Any).downcast_ref::<ClientError>() {
            Some(client) => CliError::Client {
                code: client.code_str(),
                message: client.to_string(),
                details: match client {
                    ClientError::Rejected(r) => r.details.clone(),
                    _ => Value::Null,
                },
            },
            None => CliError::Runtime(e.to_string()),
        }
    }
}

fn main() -> ExitCode {
    // With `--json`, errors are JSON on stdout too (`{"error": {"code", "message",
    // "details"}}`), with the same exit codes; without it, a line on stderr.
    // A shell asking for completions gets them and nothing else.
    completions::complete_from_env();
    let json = std::env::args_os().skip(1).any(|a| a == "--json");
    let parsed = cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if json && e.use_stderr() => {
            return report_error(true, "usage", e.to_string().trim(), Value::Null, 2)
        }
        Err(e) => e.exit(), // usage errors exit 2, help and version 0
    };
    match run(cli, json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Runtime(msg)) => report_error(json, "failed", &msg, Value::Null, 1),
        Err(CliError::Client {
            code,
            message,
            details,
        }) => report_error(json, code, &message, details, 1),
        Err(CliError::Usage(msg)) => report_error(json, "usage", &msg, Value::Null, 2),
        Err(CliError::Findings) => ExitCode::from(3),
        Err(CliError::Reported) => ExitCode::from(1),
        Err(CliError::NoInstallation(msg)) => {
            report_error(json, "no_installation", &msg, Value::Null, 1)
        }
        Err(CliError::Ambiguous {
            message,
            candidates,
        }) => report_error(
            json,
            "ambiguous_run_id",
            &message,
            json!({ "candidates": candidates }),
            2,
        ),
        Err(CliError::GaveUpWaiting(msg)) => {
            report_error(json, "gave_up_waiting", &msg, Value::Null, 4)
        }
    }
}

/// Says why a command failed and returns its exit code: with `--json` one JSON document on
/// stdout, `{"error": {"code", "message", "details"}}` (`code` is the protocol's or the client
/// library's code, `usage` for the command line, `failed` for anything else); otherwise
/// `piw: <message>` on stderr.
fn report_error(json: bool, code: &str, message: &str, details: Value, exit: u8) -> ExitCode {
    if json {
        // The error's exit code stands even when nobody reads the report (a closed pipe).
        let _ = write_stdout(&format!(
            "{}\n",
            json!({ "error": { "code": code, "message": message, "details": details } })
        ));
    } else {
        eprintln!("piw: {message}");
    }
    ExitCode::from(exit)
}

/// A run status in words, for sentences: `the run {..}`.
fn status_words(status: &str) -> String {
    match status {
        "queued" => "is queued".into(),
        "running" => "is running".into(),
        "waiting" => "is waiting".into(),
        "review" => "is in review (stopped until a person acts)".into(),
        "completed" => "completed".into(),
        "failed" => "failed".into(),
        "cancelled" => "was cancelled".into(),
        "timed_out" => "timed out".into(),
        other => format!("is {other}"),
    }
}

/// `--input`: JSON, checked while the command line is parsed (a usage error, before any host
/// is started). `@path` reads it from a file, `-` from stdin.
fn parse_json(text: &str) -> Result<Value, String> {
    let read;
    let source = if text == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        read = buf;
        read.as_str()
    } else if let Some(path) = text.strip_prefix('@') {
        read = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        read.as_str()
    } else {
        text
    };
    if let Some(literal) = piw_core::protocol::integer_out_of_range(source) {
        return Err(format!(
            "the integer {literal} does not fit 64 bits and would lose its value; write it as a string"
        ));
    }
    serde_json::from_str(source).map_err(|e| format!("not JSON: {e}"))
}

/// An answer on the command line: JSON when it parses as JSON, otherwise the text itself (a
/// JSON string), so `piw run answer RUN yes` needs no quoting.
fn json_or_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

fn host_bin() -> PathBuf {
    std::env::var_os("PIW_HOST_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| PathBuf::from("piw"))
}

fn connect(paths: &PiwPaths) -> Result<BlockingClient, CliError> {
    ensure_installation_dirs(paths)?;
    Ok(BlockingClient::connect_or_start(paths, &host_bin())?)
}

/// Creates (or checks) the installation's directories before a host is started for them, so
/// a refusal reads as what it is, not as a failure to talk to a host.
fn ensure_installation_dirs(paths: &PiwPaths) -> Result<(), CliError> {
    paths
        .ensure_dirs()
        .map_err(|e| CliError::Runtime(format!("cannot use {}: {e}", paths.home.display())))
}

fn print(receipt_body: &Value, json_out: bool, human: impl FnOnce(&Value) -> String) {
    if json_out {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(receipt_body).unwrap_or_default()
        ));
    } else {
        emit(&format!("{}\n", human(receipt_body)));
    }
}

/// Writes `text` to standard output, whole.
fn write_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// Writes a command's output to standard output. A reader that went away (`piw runs | head`) ends the
/// command quietly with success: what it printed was what the reader wanted, and nothing is
/// wrong with the runs or the host (Rust's `println!` would panic there instead).
pub(crate) fn emit(text: &str) {
    match write_stdout(text) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("piw: cannot write to standard output: {e}");
            std::process::exit(1);
        }
    }
}

fn run_request(run_id: &str, body: RequestBody) -> Request {
    Request::new(piw_core::ids::new_id("cli"), body).with_run_id(run_id)
}

/// Runs one command. `json` is its `--json`, which every command that prints a result takes
/// ([`cli::command`] adds it where the grammar has no field for it).
fn run(cli: Cli, json: bool) -> Result<(), CliError> {
    match cli.command {
        Cmd::Completions(args) => return completions::print_completions(args.shell),
        Cmd::Man(args) => return completions::man(args),
        _ => {}
    }
    let paths = PiwPaths::from_env()?;
    if needs_installation(&cli.command) {
        require_installation(&paths)?;
    }
    match cli.command {
        Cmd::Completions(_) | Cmd::Man(_) => Ok(()),
        Cmd::Host(HostCmd::Serve) => {
            init_logging();
            match piw_core::driver::serve(HostConfig::from_env(paths)) {
                Ok(()) => Ok(()),
                Err(e @ HostError::AlreadyRunning { .. }) => Err(CliError::Runtime(e.to_string())),
                Err(e) => Err(e.into()),
            }
        }
        Cmd::Host(HostCmd::Start) => {
            ensure_installation_dirs(&paths)?;
            ensure_host(&paths, &host_bin(), DEFAULT_READY_TIMEOUT)?;
            let mut client = BlockingClient::connect(&paths)?;
            let status = host_call(&paths, &mut client, RequestBody::HostStatus)?;
            print(&status.body, json, |b| {
                format!("piw host running: pid {}", b["pid"])
            });
            Ok(())
        }
        Cmd::Host(HostCmd::Status { json }) => {
            let mut client = BlockingClient::connect(&paths).map_err(|e| match e {
                ClientError::Connect { .. } => CliError::Runtime(format!(
                    "no piw host is running for {}",
                    paths.home.display()
                )),
                other => other.into(),
            })?;
            let r = host_call(&paths, &mut client, RequestBody::HostStatus)?;
            print(&r.body, json, |b| {
                format!(
                    "pid {}  epoch {}  uptime {} s\nruns {}\nactive children {} of {}\nconnections at most {}\nruntimes {}\nsocket {}\ndatabase {}\nschema {}",
                    b["pid"], b["epoch"], b["uptime_ms"].as_u64().unwrap_or(0) / 1000, b["runs"],
                    b["active_children"], b["child_slots"], b["max_connections"],
                    b["runtimes"].as_array().map(|r| r.iter().map(str_of).collect::<Vec<_>>().join(" ")).unwrap_or_default(),
                    str_of(&b["socket"]), str_of(&b["database"]), str_of(&b["schema_id"])
                )
            });
            Ok(())
        }
        Cmd::Host(HostCmd::Stop) => {
            let was_running = stop_host(&paths)?;
            print(&json!({ "stopped": was_running }), json, |_| {
                if was_running {
                    "piw host stopped"
                } else {
                    "no piw host is running"
                }
                .into()
            });
            Ok(())
        }
        Cmd::Runs {
            action:
                Some(RunsCmd::Prune {
                    older_than,
                    status,
                    keep,
                    dry_run,
                    json: _,
                }),
            ..
        } => prune::prune(&paths, older_than, status, keep, dry_run, json),
        Cmd::Runs {
            action: None,
            json,
            session,
            unfinished,
            status,
            limit,
            all,
            cursor,
        } => {
            // The host answers a page at a time (as many runs as fit a reply): ask for pages
            // until `limit` runs are here, or every run with `--all`.
            let wanted = if all { u64::MAX } else { u64::from(limit) };
            let mut client = connect(&paths)?;
            let mut runs: Vec<Value> = Vec::new();
            let mut cursor = cursor;
            let mut more;
            loop {
                let page_limit = u32::try_from(wanted - runs.len() as u64)
                    .unwrap_or(u32::MAX)
                    .min(payload::MAX_LIST_RUNS);
                let r = client.call(RequestBody::RunList(payload::RunList {
                    limit: Some(page_limit),
                    session_id: session.clone(),
                    unfinished: unfinished.then_some(true),
                    statuses: (!status.is_empty()).then(|| status.clone()),
                    cursor: cursor.take(),
                    run_id_prefix: None,
                }))?;
                let mut body = r.body;
                runs.extend(
                    body["runs"]
                        .as_array_mut()
                        .map(std::mem::take)
                        .into_iter()
                        .flatten(),
                );
                more = body["more"] == true;
                cursor = body["next_cursor"]
                    .as_str()
                    .and_then(payload::RunListCursor::decode);
                if !more || cursor.is_none() || runs.len() as u64 >= wanted {
                    break;
                }
            }
            let next_cursor = cursor.filter(|_| more).map(|c| c.encode());
            if !json && more {
                if let Some(next) = &next_cursor {
                    eprintln!(
                        "piw: more runs follow: `piw runs --all` lists every one, `--limit N` more, \
                         `--cursor {next}` the ones after these"
                    );
                }
            }
            let mut body = json!({ "runs": runs, "more": next_cursor.is_some(),
                                   "next_cursor": next_cursor });
            // The times as UTC text beside their Unix milliseconds: absolute, for scripts.
            for run in body["runs"].as_array_mut().into_iter().flatten() {
                for (ms, text) in [
                    ("created_at", "started"),
                    ("finished_at", "ended"),
                    ("wake_at", "wakes"),
                ] {
                    run[text] = run[ms].as_u64().map(human::utc).into();
                }
            }
            let now = human::now_ms();
            print(&body, json, |b| {
                let ago = |v: &Value| v.as_u64().map_or("-".into(), |ms| human::ago(ms, now));
                let mut out = format!(
                    "{:<33} {:<11} {:<11} {:<14} {:<14} {:<9} NODE",
                    "RUN", "STATUS", "MODE", "STARTED", "ENDED", "WORKFLOW"
                );
                for run in b["runs"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "\n{:<33} {:<11} {:<11} {:<14} {:<14} {:<9} {}",
                        str_of(&run["run_id"]),
                        str_of(&run["status"]),
                        str_of(&run["execution_mode"]),
                        ago(&run["created_at"]),
                        ago(&run["finished_at"]),
                        str_of(&run["workflow_name"]),
                        match human::coming(&run["wake_at"], now) {
                            Some(wakes) =>
                                format!("{} · wakes {wakes}", str_of(&run["current_node"])),
                            None => str_of(&run["current_node"]),
                        }
                    ));
                }
                out
            });
            Ok(())
        }
        Cmd::Run(cmd) => run_cmd(&paths, cmd, json),
        Cmd::Channel(cmd) => channel::channel_cmd(&paths, cmd, json),
        Cmd::Logs(args) => logs::logs(&paths, args, json),
        Cmd::View {
            run_id,
            once,
            status,
            session,
        } => {
            let filter = piw_core::store::RunFilter { status, session };
            let run_id = run_id
                .map(|given| resolve_run_id(&paths, &given))
                .transpose()?;
            if once {
                let frame = view::once(&paths, filter, run_id.as_deref(), view::ONCE_SIZE)?;
                if json {
                    print(&json!({ "frame": frame }), true, |_| String::new());
                } else {
                    emit(&frame);
                }
            } else if json {
                return Err(CliError::Usage(
                    "the live viewer draws a terminal; `piw view --once --json` prints one frame as JSON".into(),
                ));
            } else {
                view::interactive(&paths, filter, run_id.as_deref())?;
            }
            Ok(())
        }
        Cmd::Diagnose { json } => {
            let body = diagnose(&paths)?;
            let found = body["findings"].as_array().is_some_and(|f| !f.is_empty());
            print(&body, json, |b| {
                let findings = b["findings"].as_array().cloned().unwrap_or_default();
                if findings.is_empty() {
                    return "no contradictions".into();
                }
                findings
                    .iter()
                    .map(|f| {
                        let ids = f["ids"]
                            .as_array()
                            .filter(|ids| !ids.is_empty())
                            .map(|ids| {
                                let ids: Vec<String> = ids.iter().map(str_of).collect();
                                format!(" ({})", ids.join(", "))
                            })
                            .unwrap_or_default();
                        // A finding about the whole file names no run.
                        let run = match f["run_id"].as_str() {
                            Some("") => String::new(),
                            _ => format!(" run {}", str_of(&f["run_id"])),
                        };
                        format!("{}{run} {}{ids}", str_of(&f["code"]), str_of(&f["detail"]),)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            if found {
                Err(CliError::Findings)
            } else {
                Ok(())
            }
        }
        Cmd::Repair { json } => {
            let r = connect(&paths)?.call(RequestBody::Repair)?;
            print(&r.body, json, |b| {
                format!(
                    "repaired {} finding(s); {} left for review",
                    b["report"]["repaired"].as_array().map_or(0, |a| a.len()),
                    b["report"]["left_for_review"]
                        .as_array()
                        .map_or(0, |a| a.len())
                )
            });
            Ok(())
        }
        Cmd::State(StateCmd::Backup { path }) => {
            if path.exists() {
                return Err(CliError::Runtime(format!(
                    "{} exists; choose a new path",
                    path.display()
                )));
            }
            // Nothing to copy is a failure (exit 1, `no_installation`), not "nothing to do": a
            // script must not go on as if it had a backup, and a mistyped PIW_HOME says so.
            require_installation(&paths)?;
            warn_if_linked(&paths);
            let store = Store::open_read_only(&paths.db, StoreConfig::default())?;
            store.backup_to(&path)?;
            print(
                &json!({ "database": paths.db, "backup": path }),
                json,
                |_| format!("backed up {} to {}", paths.db.display(), path.display()),
            );
            Ok(())
        }
        Cmd::State(StateCmd::Restore { file, yes }) => {
            restore_state(&paths, &file, yes)?;
            print(
                &json!({ "database": paths.db, "restored_from": file }),
                json,
                |_| {
                    format!(
                        "restored {} from {}; note: {RESTORE_MEANS}",
                        paths.db.display(),
                        file.display()
                    )
                },
            );
            Ok(())
        }
        Cmd::State(StateCmd::Reset { yes }) => {
            if !paths.home.exists() {
                print(
                    &json!({ "database": paths.db, "removed": false }),
                    json,
                    |_| format!("{} does not exist; nothing to reset", paths.home.display()),
                );
                return Ok(());
            }
            if !yes {
                // `piw state backup`, not `cp`: a copy of state.sqlite alone misses the
                // commits still in its -wal file. Quoted so that it works as printed.
                let mut backup = paths.db.clone().into_os_string();
                backup.push(".bak");
                return Err(CliError::Usage(format!(
                    "this deletes {} and every run in it; back it up first (`piw state backup {}`), then run `piw state reset --yes`",
                    paths.db.display(),
                    piw_core::paths::shell_quoted(std::path::Path::new(&backup))
                )));
            }
            let removed = remove_state(&paths)?;
            print(
                &json!({ "database": paths.db, "removed": removed }),
                json,
                |_| {
                    if removed {
                        format!(
                            "removed {}; the next host start creates a fresh database",
                            paths.db.display()
                        )
                    } else {
                        format!(
                            "nothing to remove: there is no {}; the next host start creates a fresh database",
                            paths.db.display()
                        )
                    }
                },
            );
            Ok(())
        }
    }
}

/// What restoring an older copy of the state means, said before and after `piw state restore`.
const RESTORE_MEANS: &str = "restoring a backup replaces every run with its state in the backup: runs that moved on or finished after the backup was taken run again from the last boundary it recorded, so their steps run again and their effects (messages, files, calls to other systems) may happen twice; runs started after it are gone";

/// How many runs `piw runs` lists without `--limit` (the host's own default).
const DEFAULT_RUNS_LIMIT: u32 = 100;

/// How many times one `--wait` starts a host again after the one it talked to went away.
const WAIT_HOST_RESTARTS: u32 = 3;

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("PIW_LOG").unwrap_or_else(|_| "info".into());
    // No colour codes in host.log (a detached host's stderr), in a pipe, or with NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A log line that cannot be written (a full disk, a closed pipe) is counted and dropped:
    // the default writer's fallback would panic in whichever thread logged.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(piw_core::driver::log::LogSink::stderr)
        .log_internal_errors(false)
        .with_ansi(ansi)
        .init();
}

/// Readers (`piw view`, `piw state backup`) of a database with more than one name go on, with
/// a warning: reading changes nothing, and a backup is the copy the host's refusal asks for.
/// What they read may be stale while a host of another installation serves the other name
/// (with its own `-wal`), which is why no host starts on such a file.
pub(crate) fn warn_if_linked(paths: &PiwPaths) {
    if let Some(links) = piw_core::store::files::database_links(&paths.db).filter(|&n| n > 1) {
        let refusal = HostError::DatabaseHasLinks {
            db: paths.db.display().to_string(),
            links,
        };
        eprintln!(
            "piw: warning: {refusal}; no host will start on it, and what is read here may be stale"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
