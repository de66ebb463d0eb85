//! `piw`: host control, runs, diagnosis and state maintenance, as a thin layer over
//! `piw-host`. Exit codes: 0 ok, 1 runtime error, 2 usage (an ambiguous run id too), 3
//! `diagnose` found contradictions, 4 a wait gave up at its `--timeout`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{FromArgMatches as _, Parser, Subcommand};
use piw_host::client::{ensure_host, BlockingClient, ClientError, DEFAULT_READY_TIMEOUT};
use piw_host::driver::{HostConfig, HostError};
use piw_host::paths::PiwPaths;
use piw_host::protocol::{payload, reply as replies, Receipt, RejectionCode, Request, RequestBody};
use piw_host::store::{Store, StoreConfig};
use serde_json::{json, Value};

mod cli;
mod commands;
mod completions;
mod host_ctl;
mod human;
mod resolve;
mod run_ids;
mod run_text;
mod state;
mod table;
mod view;
use cli::*;
use host_ctl::*;
use run_ids::*;
use run_text::*;
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
    match commands::run(cli, json) {
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
    if let Some(literal) = piw_host::protocol::integer_out_of_range(source) {
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

/// Prints a reply: with `--json` its body as the host sent it, else `human` of the typed
/// reply (a body that is not a `T` is an error, never a page of dashes).
fn print_reply<T: replies::Reply>(
    receipt: &Receipt,
    json_out: bool,
    human: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    if json_out {
        print(&receipt.body, true, |_| String::new());
    } else {
        let typed = reply::<T>(receipt)?;
        emit(&format!("{}\n", human(&typed)));
    }
    Ok(())
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

/// A receipt's body as its kind's typed reply (`piw_host::protocol::reply`), which the host
/// built it from: the CLI reads fields through these types, never by name.
fn reply<T: replies::Reply>(receipt: &Receipt) -> Result<T, CliError> {
    receipt.reply().map_err(|e| {
        CliError::Runtime(format!(
            "cannot read the host's reply as {}: {e}",
            std::any::type_name::<T>()
                .rsplit("::")
                .next()
                .unwrap_or_default()
        ))
    })
}

fn run_request(run_id: &str, body: RequestBody) -> Request {
    Request::new(piw_host::ids::new_id("cli"), body).with_run_id(run_id)
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
        .with_writer(piw_host::driver::log::LogSink::stderr)
        .log_internal_errors(false)
        .with_ansi(ansi)
        .init();
}

/// Readers (`piw view`, `piw state backup`) of a database with more than one name go on, with
/// a warning: reading changes nothing, and a backup is the copy the host's refusal asks for.
/// What they read may be stale while a host of another installation serves the other name
/// (with its own `-wal`), which is why no host starts on such a file.
pub(crate) fn warn_if_linked(paths: &PiwPaths) {
    if let Some(links) = piw_host::store::files::database_links(&paths.db).filter(|&n| n > 1) {
        let refusal = HostError::DatabaseHasLinks {
            db: paths.db.display().to_string(),
            links,
        };
        eprintln!(
            "piw: warning: {refusal}; no host will start on it, and what is read here may be stale"
        );
    }
}
