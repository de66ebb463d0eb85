//! `piw`: host control, runs, diagnosis and state maintenance, as a thin layer over
//! `piw-core`. Exit codes: 0 ok, 1 runtime error, 2 usage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use piw_core::client::{ensure_host, BlockingClient, ClientError, DEFAULT_READY_TIMEOUT};
use piw_core::host::{HostConfig, HostError};
use piw_core::paths::PiwPaths;
use piw_core::protocol::{payload, Receipt, RejectionCode, Request, RequestBody};
use piw_core::store::{Store, StoreConfig};
use serde_json::{json, Value};

mod resolve;
mod view;

#[derive(Parser)]
#[command(
    name = "piw",
    version,
    about = "The piw workflow host and its command line."
)]
#[command(
    after_help = "PIW_HOME selects the installation: an absolute path (default ~/.pi/agent/piw)."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start, run, inspect or stop the host.
    #[command(subcommand)]
    Host(HostCmd),
    /// List runs, newest first.
    Runs {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Only runs of this origin session.
        #[arg(long)]
        session: Option<String>,
        /// At most this many runs (the host lists at most 10000). When their results do not
        /// all fit one reply, the oldest are left out (`result_omitted` in `--json`).
        #[arg(long, value_name = "N", default_value_t = DEFAULT_RUNS_LIMIT,
              value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
    },
    /// Start or control one run.
    #[command(subcommand)]
    Run(RunCmd),
    /// List contradictory durable state (read-only; never starts a host). Exit 3 when it finds
    /// any.
    Diagnose {
        #[arg(long)]
        json: bool,
    },
    /// Repair states that have exact durable evidence; never invents success.
    Repair {
        #[arg(long)]
        json: bool,
    },
    /// Back up or reset the state database.
    #[command(subcommand)]
    State(StateCmd),
    /// Watch runs live in the terminal: the run list, a run's graph with node states, an
    /// inspector and the run's history. Read-only: it never starts a host or changes a row.
    View {
        /// Open this run (Esc goes to the run list).
        run_id: Option<String>,
        /// Print one plain-text frame and exit.
        #[arg(long)]
        once: bool,
        /// List only runs in this status.
        #[arg(long, value_parser = parse_run_status)]
        status: Option<piw_core::store::RunStatus>,
        /// List only runs of this origin session.
        #[arg(long)]
        session: Option<String>,
    },
}

fn parse_run_status(text: &str) -> Result<piw_core::store::RunStatus, String> {
    piw_core::store::RunStatus::parse(text).ok_or_else(|| {
        let all: Vec<&str> = piw_core::store::RunStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        format!("one of {}", all.join(", "))
    })
}

#[derive(Subcommand)]
enum HostCmd {
    /// Start the host in the background (no-op when one is running).
    Start,
    /// Run the host in the foreground.
    Serve,
    /// Show the running host: pid, epoch, uptime, runs by state, children, paths, schema.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Stop the running host gracefully.
    Stop,
}

#[derive(Subcommand)]
enum RunCmd {
    /// Start a run of a workflow: a name (found in ./.pi/workflows/, then
    /// ~/.pi/agent/workflows/) or a path to a workflow file.
    Start {
        #[arg(value_name = "NAME|PATH")]
        workflow: String,
        /// The run's input as JSON.
        #[arg(long, default_value = "null", value_parser = parse_json)]
        input: Value,
        /// The origin Pi session.
        #[arg(long)]
        session: Option<String>,
        /// Wait until the run finishes (or stops for review) and print its result.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds (exit 1; the run goes on).
        #[arg(long, value_name = "SECS", requires = "wait")]
        timeout: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Print a run's graph with each node's state (read-only; never starts a host).
    Graph {
        run_id: String,
        #[arg(long, value_enum, default_value = "mermaid")]
        format: view::export::GraphFormat,
    },
    /// Show one run.
    Status {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Pause a run at its next durable boundary.
    Pause {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused run.
    Resume {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run.
    Cancel {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Answer the ordinary checkpoint a run waits for.
    Answer {
        run_id: String,
        /// The answer: JSON, or plain text (sent as a JSON string).
        #[arg(required_unless_present = "input", conflicts_with = "input")]
        answer: Option<String>,
        /// The answer as JSON, from `@file` or `-` (stdin) or inline.
        #[arg(long, value_parser = parse_json)]
        input: Option<Value>,
        #[arg(long)]
        json: bool,
    },
    /// Answer the protected human decision a run waits for, as the person deciding: the
    /// answer is `{"choice": CHOICE, "text": TEXT}` (`text` only when given).
    Decide {
        run_id: String,
        choice: String,
        text: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Submit a result for the interactive step a run waits for (the workflow validates it).
    Submit {
        run_id: String,
        /// The result as JSON.
        #[arg(required_unless_present = "input", conflicts_with = "input", value_parser = parse_json)]
        result: Option<Value>,
        /// The result as JSON, from `@file` or `-` (stdin) or inline.
        #[arg(long, value_parser = parse_json)]
        input: Option<Value>,
        #[arg(long)]
        json: bool,
    },
    /// Wait until a run finishes (or stops for review) and print how it ended.
    Wait {
        run_id: String,
        /// Give up after this many seconds (exit 1; the run goes on).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// A run in review: run its current node again (once the cause of its lost children is
    /// fixed, or a changed source is put back). Refused while an effect is uncertain.
    Retry {
        run_id: String,
        /// Why: what was fixed (kept in the run's `retried` event, with your login name).
        #[arg(long, default_value = "")]
        reason: String,
        #[arg(long)]
        json: bool,
    },
    /// A run in review: record what became of an uncertain effect (it was applied, with the
    /// receipt you provide, or it failed); once none is uncertain, the run continues.
    ResolveEffect {
        run_id: String,
        effect_id: String,
        /// It happened: the external system's receipt, as JSON.
        #[arg(long, value_name = "RECEIPT_JSON", value_parser = parse_json, conflicts_with = "failed", required_unless_present = "failed")]
        applied: Option<Value>,
        /// It did not happen: why.
        #[arg(long, value_name = "ERROR")]
        failed: Option<String>,
        /// How you know (kept in the `effect_resolved` event, with your login name).
        #[arg(long, default_value = "")]
        reason: String,
        #[arg(long)]
        json: bool,
    },
}

/// The pending decision of `kind` (`checkpoint` or `human_decision`) run `run_id` waits for.
fn pending_decision(
    client: &mut BlockingClient,
    run_id: &str,
    kind: &str,
) -> Result<String, CliError> {
    let status = client.send(run_request(
        run_id,
        RequestBody::RunStatus(Default::default()),
    ))?;
    status.body["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["status"] == "pending" && d["kind"] == kind)
        .map(|d| str_of(&d["decision_id"]))
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
        })
}

/// Who a person's command on a run is from: the login name, kept in the run's events.
fn login_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

#[derive(Subcommand)]
enum StateCmd {
    /// Copy the state database (consistently, while the host runs) to PATH.
    Backup { path: PathBuf },
    /// Replace the state database with a backup (`piw state backup`). Refused while a host
    /// runs. Runs that moved on after the backup was taken run again from where it left them.
    Restore {
        /// The backup to restore.
        file: PathBuf,
        /// Confirm the replacement.
        #[arg(long)]
        yes: bool,
    },
    /// Delete the state database. Refused while a host runs. Back it up first.
    Reset {
        /// Confirm the deletion.
        #[arg(long)]
        yes: bool,
    },
}

/// How long `piw host status`, `piw host stop` and `piw diagnose` wait for the host to answer. A host that
/// accepts connections but does not answer (stopped, or stuck on a disk) would otherwise hang
/// them for ever, exactly when a user reaches for them.
const HOST_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One host-control call, bounded by [`HOST_ANSWER_TIMEOUT`]; a host that does not answer in
/// time is named by the pid in its lock file.
fn host_call(
    paths: &PiwPaths,
    client: &mut BlockingClient,
    body: RequestBody,
) -> Result<Receipt, CliError> {
    client.set_timeout(Some(HOST_ANSWER_TIMEOUT))?;
    client.call(body).map_err(|e| match e {
        ClientError::TimedOut => not_answering(paths),
        other => other.into(),
    })
}

/// A host that accepts connections but did not answer within [`HOST_ANSWER_TIMEOUT`], named
/// by the pid in its lock file.
fn not_answering(paths: &PiwPaths) -> CliError {
    let (host, kill) = match &lock_holder(paths) {
        Some(pid) => (
            format!("the piw host (pid {pid})"),
            format!("; `kill {pid}` asks it to stop"),
        ),
        None => ("the piw host".to_owned(), String::new()),
    };
    CliError::Runtime(format!(
        "{host} did not answer within {} s; it may be stuck (see {}){kill}",
        HOST_ANSWER_TIMEOUT.as_secs(),
        paths.log.display()
    ))
}

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
    let json = std::env::args_os().skip(1).any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if json && e.use_stderr() => {
            return report_error(true, "usage", e.to_string().trim(), Value::Null, 2)
        }
        Err(e) => e.exit(), // usage errors exit 2, help and version 0
    };
    match run(cli) {
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
    }
}

/// Says why a command failed and returns its exit code: with `--json` one JSON document on
/// stdout, `{"error": {"code", "message", "details"}}` (`code` is the protocol's or the client
/// library's code, `usage` for the command line, `failed` for anything else); otherwise
/// `piw: <message>` on stderr.
fn report_error(json: bool, code: &str, message: &str, details: Value, exit: u8) -> ExitCode {
    if json {
        println!(
            "{}",
            json!({ "error": { "code": code, "message": message, "details": details } })
        );
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
        println!(
            "{}",
            serde_json::to_string_pretty(receipt_body).unwrap_or_default()
        );
    } else {
        println!("{}", human(receipt_body));
    }
}

fn run_request(run_id: &str, body: RequestBody) -> Request {
    Request::new(piw_core::ids::new_id("cli"), body).with_run_id(run_id)
}

fn run(cli: Cli) -> Result<(), CliError> {
    let paths = PiwPaths::from_env()?;
    match cli.command {
        Cmd::Host(HostCmd::Serve) => {
            init_logging();
            match piw_core::host::serve(HostConfig::from_env(paths)) {
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
            println!("piw host running: pid {}", status.body["pid"]);
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
                    "pid {}  epoch {}  uptime {} s\nruns {}\nactive children {}\nruntimes {}\nsocket {}\ndatabase {}\nschema {}",
                    b["pid"], b["epoch"], b["uptime_ms"].as_u64().unwrap_or(0) / 1000, b["runs"],
                    b["active_children"],
                    b["runtimes"].as_array().map(|r| r.iter().map(str_of).collect::<Vec<_>>().join(" ")).unwrap_or_default(),
                    str_of(&b["socket"]), str_of(&b["database"]), str_of(&b["schema_id"])
                )
            });
            Ok(())
        }
        Cmd::Host(HostCmd::Stop) => stop_host(&paths),
        Cmd::Runs {
            json,
            session,
            limit,
        } => {
            // The host leaves out the oldest runs' results when the list would not fit one
            // reply (`result_omitted`), so only a very large `--limit` can pass the reply
            // limit (records alone, about 600 bytes each); then say which option to change.
            let r = connect(&paths)?
                .call(RequestBody::RunList(payload::RunList {
                    limit: Some(limit),
                    session_id: session,
                }))
                .map_err(|e| match e {
                    ClientError::Rejected(r) if r.code == RejectionCode::PayloadTooLarge => {
                        CliError::Runtime(format!(
                            "{limit} runs do not fit one reply even without their results; ask for fewer with --limit N"
                        ))
                    }
                    other => other.into(),
                })?;
            print(&r.body, json, |b| {
                let mut out =
                    String::from("RUN                               STATUS      WORKFLOW  NODE");
                for run in b["runs"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "\n{:<33} {:<11} {:<9} {}",
                        str_of(&run["run_id"]),
                        str_of(&run["status"]),
                        str_of(&run["workflow_name"]),
                        str_of(&run["current_node"])
                    ));
                }
                out
            });
            Ok(())
        }
        Cmd::Run(cmd) => run_cmd(&paths, cmd),
        Cmd::View {
            run_id,
            once,
            status,
            session,
        } => {
            let filter = piw_core::store::RunFilter { status, session };
            if once {
                print!(
                    "{}",
                    view::once(&paths, filter, run_id.as_deref(), view::ONCE_SIZE)?
                );
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
                        format!(
                            "{} run {} {}{ids}",
                            str_of(&f["code"]),
                            str_of(&f["run_id"]),
                            str_of(&f["detail"]),
                        )
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
            if !paths.db.exists() {
                return Err(CliError::Runtime(format!(
                    "there is no state database at {} (no host has run for this PIW_HOME); nothing to back up",
                    paths.db.display()
                )));
            }
            let store = Store::open_read_only(&paths.db, StoreConfig::default())?;
            store.backup_to(&path)?;
            println!("backed up {} to {}", paths.db.display(), path.display());
            Ok(())
        }
        Cmd::State(StateCmd::Restore { file, yes }) => restore_state(&paths, &file, yes),
        Cmd::State(StateCmd::Reset { yes }) => {
            if !paths.home.exists() {
                println!("{} does not exist; nothing to reset", paths.home.display());
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
            if removed {
                println!(
                    "removed {}; the next host start creates a fresh database",
                    paths.db.display()
                );
            } else {
                println!(
                    "nothing to remove: there is no {}; the next host start creates a fresh database",
                    paths.db.display()
                );
            }
            Ok(())
        }
    }
}

/// What restoring an older copy of the state means, said before and after `piw state restore`.
const RESTORE_MEANS: &str = "restoring a backup replaces every run with its state in the backup: runs that moved on or finished after the backup was taken run again from the last boundary it recorded, so their steps run again and their effects (messages, files, calls to other systems) may happen twice; runs started after it are gone";

/// Removes the state database (and its `-wal` and `-shm` files) while holding the
/// installation lock, after stopping the children it records as running (a crashed host's:
/// once the database is gone nothing else knows them). Refused while a host runs or is still
/// stopping. Returns whether there was anything to remove.
fn remove_state(paths: &PiwPaths) -> Result<bool, CliError> {
    // Held until the database is gone: no host runs, is still stopping, or starts meanwhile.
    let _lock = piw_core::host::lock_installation(paths).map_err(|e| match e {
        HostError::AlreadyRunning { pid, .. } => CliError::Runtime(format!(
            "a piw host is running or still stopping (pid {pid}); stop it first with `piw host stop`"
        )),
        other => other.into(),
    })?;
    remove_state_locked(paths)
}

/// [`remove_state`] for a caller that holds the installation lock.
fn remove_state_locked(paths: &PiwPaths) -> Result<bool, CliError> {
    // A host that crashed left its children running (recorded in the database): stop them
    // first, as a host's start-up would, or nothing would any more.
    if paths.db.exists() {
        match Store::open_read_only(&paths.db, StoreConfig::default()) {
            Ok(store) => {
                let (stopped, outcomes) =
                    piw_core::host::stop_recorded_children(&store, None, Duration::from_secs(2))?;
                let killed = outcomes
                    .iter()
                    .filter(|o| **o == piw_core::supervise::OrphanOutcome::Killed)
                    .count();
                if !stopped.is_empty() {
                    println!("stopped {killed} child process(es) an earlier host left running");
                }
            }
            // A database this build cannot read names no children it could stop.
            Err(e) => {
                eprintln!("piw: cannot read the children recorded in it ({e}); removing it anyway")
            }
        }
    }
    let mut removed = false;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = paths.db.clone().into_os_string();
        p.push(suffix);
        match std::fs::remove_file(&p) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

/// `piw state restore <file> --yes`: replaces the state database with a backup, while no host
/// runs. The backup is checked first (a file this build cannot open is refused and nothing
/// changes), then the current database is removed as by `piw state reset` and the backup is
/// copied in with SQLite's online backup (mode 0600).
fn restore_state(paths: &PiwPaths, file: &std::path::Path, yes: bool) -> Result<(), CliError> {
    let source = Store::open_read_only(file, StoreConfig::default())?;
    if !yes {
        let mut current = paths.db.clone().into_os_string();
        current.push(".bak");
        return Err(CliError::Usage(format!(
            "this replaces {} with {}; {RESTORE_MEANS}. Back up the current state first (`piw state backup {}`), then run `piw state restore {} --yes`",
            paths.db.display(),
            file.display(),
            piw_core::paths::shell_quoted(std::path::Path::new(&current)),
            piw_core::paths::shell_quoted(file),
        )));
    }
    paths.ensure_dirs()?;
    // Held from the removal to the copy: no host starts on a half-restored installation.
    let _lock = piw_core::host::lock_installation(paths).map_err(|e| match e {
        HostError::AlreadyRunning { pid, .. } => CliError::Runtime(format!(
            "a piw host is running or still stopping (pid {pid}); stop it first with `piw host stop`"
        )),
        other => other.into(),
    })?;
    remove_state_locked(paths)?;
    source.backup_to(&paths.db)?;
    println!(
        "restored {} from {}; note: {RESTORE_MEANS}",
        paths.db.display(),
        file.display()
    );
    Ok(())
}

/// `piw host stop`: asks the host to stop and returns once its process has ended. A host that
/// is already stopping (a SIGTERM, another `piw host stop`) has removed its socket but still
/// holds the installation lock while it finishes: that one is waited for too, so whatever
/// runs next (`piw state reset --yes`) finds the installation free.
fn stop_host(paths: &PiwPaths) -> Result<(), CliError> {
    let started = std::time::Instant::now();
    let wait = Duration::from_millis(STOP_WAIT_MS);
    let mut announced = false;
    // The process that held the installation, last seen.
    let mut holder_pid: Option<u32> = None;
    loop {
        if let Ok(mut client) = BlockingClient::connect(paths) {
            return stop_answering_host(paths, &mut client);
        }
        if !installation_held(paths) {
            // Stopped means the process ended, as for a host that answers: it lets go of the
            // lock a moment before it exits.
            while let Some(pid) = holder_pid {
                if !piw_core::supervise::process_alive(pid) || started.elapsed() >= wait {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            println!(
                "{}",
                if announced {
                    "piw host stopped"
                } else {
                    "no piw host is running"
                }
            );
            return Ok(());
        }
        // Held without a socket: a host that is stopping (or starting: it answers soon), or
        // a short `piw state reset` / `piw diagnose`.
        let holder = lock_holder(paths);
        holder_pid = holder.as_deref().and_then(|p| p.parse().ok());
        if started.elapsed() >= wait {
            return Err(CliError::Runtime(format!(
                "process {} still holds {} after {} s and no host answers; see {}",
                holder.as_deref().unwrap_or("?"),
                paths.lock.display(),
                STOP_WAIT_MS / 1000,
                paths.log.display()
            )));
        }
        if !announced {
            announced = true;
            eprintln!(
                "piw: waiting for process {} (a host that is stopping) to let go of {}",
                holder.as_deref().unwrap_or("?"),
                paths.lock.display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Stops the host `client` is connected to and waits for its process to end.
fn stop_answering_host(paths: &PiwPaths, client: &mut BlockingClient) -> Result<(), CliError> {
    let pid = host_call(paths, client, RequestBody::HostStatus)?.body["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok());
    match client.call(RequestBody::HostStop) {
        Ok(_) => {}
        // It began to stop between the two calls: wait for it all the same.
        Err(ClientError::Rejected(r)) if r.code == RejectionCode::HostShuttingDown => {}
        Err(ClientError::TimedOut) => return Err(not_answering(paths)),
        Err(e) => return Err(e.into()),
    }
    // The socket goes first; the host then finishes its connections, stops its children and
    // makes its last commits durable. Stopped means the process ended.
    for _ in 0..STOP_WAIT_MS / 25 {
        let gone = match pid {
            Some(pid) => !piw_core::supervise::process_alive(pid),
            None => BlockingClient::connect(paths).is_err(),
        };
        if gone {
            println!("piw host stopped");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(CliError::Runtime(format!(
        "the host did not stop within {} s",
        STOP_WAIT_MS / 1000
    )))
}

/// Whether some process holds the installation lock (`/proc/locks`; the pid in the lock file
/// when that cannot be read).
fn installation_held(paths: &PiwPaths) -> bool {
    if !paths.lock.exists() {
        return false;
    }
    piw_core::supervise::flock_held(&paths.lock).unwrap_or_else(|| {
        lock_holder(paths)
            .and_then(|pid| pid.parse().ok())
            .is_some_and(piw_core::supervise::process_alive)
    })
}

/// The pid written in the installation lock file: the process that took the lock last.
fn lock_holder(paths: &PiwPaths) -> Option<String> {
    std::fs::read_to_string(&paths.lock)
        .ok()
        .map(|pid| pid.trim().to_owned())
        .filter(|pid| !pid.is_empty())
}

/// How many runs `piw runs` lists without `--limit` (the host's own default).
const DEFAULT_RUNS_LIMIT: u32 = 100;

/// The `diagnose` receipt body. Through the running host when one answers; otherwise straight
/// from the database, read-only, while holding the installation lock (no host starts
/// meanwhile). While another process holds the lock (a host that is starting or stopping, a
/// reset) it waits for that host to answer or the holder to let go. Diagnosing never starts a
/// host: a host's start-up recovery would change the very state being diagnosed, and a host
/// that cannot start is when diagnosis matters most.
fn diagnose(paths: &PiwPaths) -> Result<Value, CliError> {
    let started = std::time::Instant::now();
    loop {
        if let Ok(mut client) = BlockingClient::connect(paths) {
            client.set_timeout(Some(HOST_ANSWER_TIMEOUT))?;
            match client.call(RequestBody::Diagnose) {
                Ok(r) => return Ok(r.body),
                // A host that accepts but never answers (stopped, stuck on a disk).
                Err(ClientError::TimedOut) => return Err(not_answering(paths)),
                // The host is stopping (or just died): read the database once it let go.
                Err(
                    ClientError::Closed {
                        code: RejectionCode::HostShuttingDown,
                        ..
                    }
                    | ClientError::Disconnected,
                ) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !paths.db.exists() {
            // Nothing to diagnose, and nothing (not even PIW_HOME) is created to find that out.
            return Ok(json!({ "findings": [] }));
        }
        let _lock = match piw_core::host::lock_installation(paths) {
            Ok(lock) => lock,
            // Another process holds the installation: a host that is starting (ask it once it
            // answers) or stopping, or a `piw state reset`. Wait for either, never starting a
            // host ourselves.
            Err(HostError::AlreadyRunning { pid, .. }) => {
                if started.elapsed() >= Duration::from_millis(STOP_WAIT_MS) {
                    return Err(CliError::Runtime(format!(
                        "process {pid} still holds {} after {} s and no host answers (a host that is stopping, or `piw state reset`); try again once it lets go",
                        paths.lock.display(),
                        STOP_WAIT_MS / 1000
                    )));
                }
                std::thread::sleep(Duration::from_millis(25));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let store = Store::open_read_only(&paths.db, StoreConfig::default())?;
        return Ok(json!({ "findings": store.diagnose()? }));
    }
}

/// `piw run graph`: read-only, like `piw view`, so it is answered before (and without) a host.
fn run_graph(
    paths: &PiwPaths,
    run_id: &str,
    format: view::export::GraphFormat,
) -> Result<(), CliError> {
    print!("{}", view::graph(paths, run_id, format)?);
    Ok(())
}

fn run_cmd(paths: &PiwPaths, cmd: RunCmd) -> Result<(), CliError> {
    if let RunCmd::Graph { run_id, format } = &cmd {
        return run_graph(paths, run_id, *format);
    }
    let mut client = connect(paths)?;
    let (receipt, json_out): (Receipt, bool) = match cmd {
        RunCmd::Graph { run_id, format } => return run_graph(paths, &run_id, format),
        RunCmd::Start {
            workflow,
            input,
            session,
            wait,
            timeout,
            json,
        } => {
            // A name is found like the Pi extension finds it (the project's .pi/workflows,
            // then ~/.pi/agent/workflows); the caller's directory goes with the file, so the
            // host resolves a relative path against it and the run works there.
            let cwd = std::env::current_dir()?;
            let user_home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            let file = resolve::resolve_workflow(&workflow, &cwd, &user_home)?;
            let mut start = piw_core::client::run_start_here(&file, input)?;
            start.session_id = session;
            let r = client.call(RequestBody::RunStart(start))?;
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
        RunCmd::Status { run_id, json } => (
            client.send(run_request(
                &run_id,
                RequestBody::RunStatus(Default::default()),
            ))?,
            json,
        ),
        RunCmd::Pause { run_id, json } => (
            client.send(run_request(&run_id, RequestBody::RunPause))?,
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
            json,
        } => {
            let answer = input.unwrap_or_else(|| json_or_text(&answer.unwrap_or_default()));
            let decision = pending_decision(&mut client, &run_id, "checkpoint")?;
            (
                client.send(run_request(
                    &run_id,
                    RequestBody::CheckpointAnswer(payload::DecisionAnswer {
                        decision_id: decision,
                        answer,
                    }),
                ))?,
                json,
            )
        }
        RunCmd::Decide {
            run_id,
            choice,
            text,
            json,
        } => {
            let mut answer = json!({ "choice": choice });
            if let Some(text) = text {
                answer["text"] = json!(text);
            }
            let decision = pending_decision(&mut client, &run_id, "human_decision")?;
            (
                client.send(run_request(
                    &run_id,
                    RequestBody::DecisionAnswer(payload::DecisionAnswer {
                        decision_id: decision,
                        answer,
                    }),
                ))?,
                json,
            )
        }
        RunCmd::Submit {
            run_id,
            result,
            input,
            json,
        } => {
            let result = input.or(result).unwrap_or(Value::Null);
            let status = client.send(run_request(
                &run_id,
                RequestBody::RunStatus(Default::default()),
            ))?;
            let open = status.body["interactions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["status"] == "pending")
                .cloned()
                .ok_or_else(|| {
                    CliError::Runtime(format!(
                        "run {run_id} waits for no interactive step (the run {})",
                        status_words(&str_of(&status.body["run"]["status"]))
                    ))
                })?;
            let request = Request::new(
                piw_core::ids::new_id("cli"),
                RequestBody::InteractionSubmit(payload::InteractionSubmit {
                    interaction_id: str_of(&open["interaction_id"]),
                    result,
                }),
            )
            .with_run_id(&run_id)
            .with_node_id(str_of(&open["node_id"]))
            .with_attempt_id(str_of(&open["attempt_id"]));
            (client.send(request)?, json)
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
            json,
        } => (
            client.send(run_request(
                &run_id,
                RequestBody::RunRetry(payload::RunRetry {
                    reason: Some(reason),
                    by: Some(login_name()),
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
            if !run["result"].is_null() {
                text.push_str(&format!("\nresult {}", run["result"]));
            }
            text.push_str(&why_lines(run));
            text.push_str(&request_lines(b));
            text.push_str(&last_child_lines(&b["last_child"]));
            text
        } else {
            b.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k} {}", str_of(v)))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default()
        }
    });
    Ok(())
}

/// Why a run failed or stopped for review, one line each and only when there is a reason:
/// what its user needs next.
fn why_lines(run: &Value) -> String {
    [("error", "error"), ("review", "review_reason")]
        .iter()
        .filter_map(|(label, key)| run[*key].as_str().map(|why| format!("\n{label} {why}")))
        .collect()
}

/// What a waiting run asks, one block per open request: the question (the workflow's
/// request), its id, and the command that answers it.
fn request_lines(status: &Value) -> String {
    let run_id = str_of(&status["run"]["run_id"]);
    let mut text = String::new();
    for d in status["decisions"].as_array().into_iter().flatten() {
        if d["status"] != "pending" {
            continue;
        }
        let (what, how) = if d["kind"] == "human_decision" {
            (
                "a person's decision",
                format!("piw run decide {run_id} <choice> [text]"),
            )
        } else {
            (
                "a checkpoint answer",
                format!("piw run answer {run_id} <answer>"),
            )
        };
        text.push_str(&format!(
            "\nwaits for {what} ({}) at node {}: {}\n  answer with `{how}`",
            str_of(&d["decision_id"]),
            str_of(&d["node_id"]),
            d["request"]
        ));
    }
    for i in status["interactions"].as_array().into_iter().flatten() {
        if i["status"] != "pending" && i["status"] != "validating" {
            continue;
        }
        text.push_str(&format!(
            "\nwaits for a result for interactive step {} ({}) at node {}: {}\n  submit with `piw run submit {run_id} <json>`",
            str_of(&i["interaction_id"]),
            str_of(&i["kind"]),
            str_of(&i["node_id"]),
            i["request"]
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
fn last_child_lines(child: &Value) -> String {
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
/// pending decisions, pending interactions, a pause. Empty for a run that goes on by itself.
fn waiting_notices(run_id: &str, status_body: &Value) -> Vec<String> {
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
    // A run started without a Pi session (`--session`) has nobody to present its requests:
    // say so rather than promise an answer from a session that does not exist.
    let answered_in = run["origin_session"].as_str().map_or_else(
        || format!("the run has no Pi session to answer it in (started without --session), so only a client that submits it by id or `piw run cancel {run_id}` moves it on; this command goes on waiting"),
        |s| format!("it is answered in Pi session {s}, and this command goes on waiting"),
    );
    for d in status_body["decisions"].as_array().into_iter().flatten() {
        if d["status"] == "pending" {
            let what = if d["kind"] == "human_decision" {
                "a person's decision"
            } else {
                "a checkpoint answer"
            };
            notices.push(format!(
                "run {run_id} waits for {what} ({}) at node {}; {answered_in}",
                str_of(&d["decision_id"]),
                str_of(&d["node_id"])
            ));
        }
    }
    for i in status_body["interactions"].as_array().into_iter().flatten() {
        if i["status"] == "pending" || i["status"] == "validating" {
            notices.push(format!(
                "run {run_id} waits for an answer to interaction {} ({}) at node {}; {answered_in}",
                str_of(&i["interaction_id"]),
                str_of(&i["kind"]),
                str_of(&i["node_id"])
            ));
        }
    }
    notices
}

fn wait_for_run(
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
            return Err(CliError::Runtime(format!(
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
            print(&r.body, json_out, |b| {
                let run = &b["run"];
                // Only the lines that say something: a completed run has no error, a failed
                // one no result.
                let mut text = format!("run {run_id} {}", status_words(&status));
                if !run["result"].is_null() {
                    text.push_str(&format!("\nresult {}", run["result"]));
                }
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
                return Err(CliError::Runtime(format!(
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
                return Err(CliError::Runtime(format!(
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

/// How many times one `--wait` starts a host again after the one it talked to went away.
const WAIT_HOST_RESTARTS: u32 = 3;

/// The connection ended without a goodbye: the host process died (or was killed).
fn host_went_away(e: &ClientError) -> bool {
    matches!(e, ClientError::Disconnected | ClientError::Io(_))
}

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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
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
        assert!(notices[1].contains("answered in Pi session s-1"));
        assert!(notices[2].contains("a person's decision (d-2) at node gate"));
        assert!(notices[3].contains("interaction i-1 (agent) at node chat"));
        // Without a Pi session, nobody presents the request: the notice says so.
        let mut sessionless = body.clone();
        sessionless["run"]["origin_session"] = Value::Null;
        let notices = waiting_notices("run-1", &sessionless);
        assert!(
            notices[1].contains("has no Pi session to answer it in")
                && notices[1].contains("`piw run cancel run-1`"),
            "{notices:#?}"
        );
        // A run that goes on by itself waits for nobody, whatever its rows say.
        let running =
            json!({"run": {"status": "running", "paused": false}, "decisions": body["decisions"]});
        assert!(waiting_notices("run-1", &running).is_empty());
    }
}
