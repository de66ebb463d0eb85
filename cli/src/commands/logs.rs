//! `piw logs <run> [--follow]`: what a run's children printed and what happened to the run.
//!
//! Each child's whole output (stdout and stderr as they were read, every attempt's child, a
//! standby worker's included from its start) is kept by the host's supervisor in
//! `PIW_HOME/logs/<run_id>/<child_epoch>.log`, up to 16 MiB per child
//! (`piw_host::engine::children::CHILD_LOG_BYTES`; a line then says the rest was not kept). The
//! files go with the state on `piw state reset`. This command reads them and the run's events
//! from the database, read-only, so it works with or without a host; `--follow` goes on
//! printing both as they come (woken by the host's events for the run while a host answers)
//! until the run ends. Anything shaped like a token is masked, as in `piw run status`.

use piw_host::store::prelude::*;
use std::io::Write as _;

use crate::*;
use piw_host::engine::children::{child_log_path, mask_hex_runs};
use piw_host::store::{ChildRecord, EventRecord};

/// How often `--follow` looks at the log files (output is not an event) and, without a
/// host, at the database.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

#[derive(clap::Args)]
pub(crate) struct LogsArgs {
    /// The run: its id, short id, a prefix of its id, or `last`.
    pub(crate) run_id: String,
    /// Go on printing output and events as they come, until the run ends (with --json, one
    /// JSON document a line: `{"child"}`, `{"output"}`, `{"event"}`).
    #[arg(long, short)]
    pub(crate) follow: bool,
}

/// What has been printed so far.
#[derive(Default)]
struct Printed {
    /// Per child epoch: whether its header was printed, and how many bytes of its log.
    children: std::collections::BTreeMap<i64, (bool, u64)>,
    last_seq: u64,
}

pub(crate) fn run(paths: &PiwPaths, args: LogsArgs, json_out: bool) -> Result<(), CliError> {
    let run_id = resolve_run_id(paths, &args.run_id)?;
    let store = Store::open_read_only(&paths.db, StoreConfig::default())?;
    // An unknown run is `not_found`, as in every command.
    let run = store.run(&run_id).map_err(|e| match e {
        piw_host::store::StoreError::RunNotFound(_) => CliError::Client {
            code: "not_found",
            message: format!("not_found: run {run_id} not found"),
            details: Value::Null,
        },
        other => other.into(),
    })?;
    if !args.follow {
        let children = store.children(&run_id)?;
        let events = store.events(&run_id, 0)?;
        if json_out {
            let children: Vec<Value> = children
                .iter()
                .map(|c| {
                    let (output, _) = read_log(paths, c, 0);
                    json!({
                        "child": child_json(paths, c),
                        "output": mask_hex_runs(&String::from_utf8_lossy(&output)),
                    })
                })
                .collect();
            let events: Vec<Value> = events.iter().map(event_json).collect();
            print(
                &json!({ "run_id": run_id, "status": run.status, "children": children, "events": events }),
                true,
                |_| String::new(),
            );
            return Ok(());
        }
        let mut printed = Printed::default();
        let mut text = Vec::new();
        print_new(paths, &store, &run_id, &mut printed, false, &mut text)?;
        return write_out(&text).map(drop);
    }
    follow(paths, &store, &run_id, json_out)
}

/// `--follow`: prints what is there, then what comes, until the run is terminal and its
/// children have exited (their last output is in the files then).
fn follow(paths: &PiwPaths, store: &Store, run_id: &str, json_out: bool) -> Result<(), CliError> {
    let mut printed = Printed::default();
    let mut client: Option<BlockingClient> = None;
    loop {
        // Read the run before the output: a run seen terminal here has had every byte its
        // children wrote before it ended put in the files read just after.
        let run = store.run(run_id)?;
        let children = store.children(run_id)?;
        let done = run.status.is_terminal() && children.iter().all(|c| c.exited);
        let mut text = Vec::new();
        print_new(paths, store, run_id, &mut printed, json_out, &mut text)?;
        // A reader that went away (`piw logs -f RUN | head`) ends the follow, quietly.
        let reader_there = write_out(&text)?;
        if done || !reader_there {
            return Ok(());
        }
        wait_for_news(paths, run_id, &mut client);
    }
}

/// Writes `text` to stdout; `false` when the reader went away (a closed pipe), which is no
/// error for a command whose output is cut short on purpose (`| head`).
fn write_out(text: &[u8]) -> Result<bool, CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Waits for the host's next event for the run, or [`FOLLOW_POLL`], whichever comes first;
/// connects to a host that answers (never starting one) and subscribes when not yet done.
fn wait_for_news(paths: &PiwPaths, run_id: &str, client: &mut Option<BlockingClient>) {
    if client.is_none() {
        *client = BlockingClient::connect(paths).ok().and_then(|mut c| {
            c.call(RequestBody::Subscribe(payload::Subscribe {
                run_id: Some(run_id.to_owned()),
                session_id: None,
                all: None,
            }))
            .ok()?;
            c.set_timeout(Some(FOLLOW_POLL)).ok()?;
            Some(c)
        });
    }
    match client {
        Some(c) => match c.next_event() {
            Ok(_) | Err(ClientError::TimedOut) | Err(ClientError::SubscriptionOverflow) => {
                c.discard_queued_events();
            }
            // The host stopped, lagged us off or went away: read on from the database.
            Err(_) => *client = None,
        },
        None => std::thread::sleep(FOLLOW_POLL),
    }
}

/// Prints what was not printed yet: each child's header and new output, then new events.
fn print_new(
    paths: &PiwPaths,
    store: &Store,
    run_id: &str,
    printed: &mut Printed,
    json_lines: bool,
    out: &mut Vec<u8>,
) -> Result<(), CliError> {
    for child in store.children(run_id)? {
        let (header_done, offset) = printed
            .children
            .get(&child.child_epoch)
            .copied()
            .unwrap_or_default();
        if !header_done {
            if json_lines {
                writeln!(out, "{}", json!({ "child": child_json(paths, &child) }))?;
            } else {
                writeln!(out, "{}", child_header(&child))?;
            }
        }
        let (bytes, next) = read_log(paths, &child, offset);
        if !bytes.is_empty() {
            let text = mask_hex_runs(&String::from_utf8_lossy(&bytes));
            if json_lines {
                writeln!(
                    out,
                    "{}",
                    json!({ "output": { "child_epoch": child.child_epoch, "text": text } })
                )?;
            } else {
                out.write_all(text.as_bytes())?;
                if !text.ends_with('\n') {
                    writeln!(out)?;
                }
            }
        }
        printed.children.insert(child.child_epoch, (true, next));
    }
    for event in store.events(run_id, printed.last_seq)? {
        if json_lines {
            writeln!(out, "{}", json!({ "event": event_json(&event) }))?;
        } else {
            writeln!(out, "{}", event_line(&event))?;
        }
        printed.last_seq = event.seq;
    }
    Ok(())
}

/// The child's log from `offset` to its end now, and the offset after it. Lines cut in the
/// middle are printed as they are: the rest comes with the next read.
fn read_log(paths: &PiwPaths, child: &ChildRecord, offset: u64) -> (Vec<u8>, u64) {
    use std::io::{Read as _, Seek as _};
    let path = child_log_path(&paths.logs, &child.run_id, child.child_epoch);
    let Ok(mut file) = std::fs::File::open(&path) else {
        return (Vec::new(), offset);
    };
    let mut bytes = Vec::new();
    if file.seek(std::io::SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut bytes).is_err()
    {
        return (Vec::new(), offset);
    }
    let next = offset + bytes.len() as u64;
    (bytes, next)
}

fn child_json(paths: &PiwPaths, c: &ChildRecord) -> Value {
    json!({
        "child_epoch": c.child_epoch,
        "generation": c.generation,
        "mode": c.mode,
        "pid": c.pid,
        "exited": c.exited,
        "reason": c.reason,
        "log": child_log_path(&paths.logs, &c.run_id, c.child_epoch),
    })
}

/// `== child 3 (claim generation 2, pid 1234): exited with code 0 ==`
fn child_header(c: &ChildRecord) -> String {
    let pid = c.pid.map_or_else(String::new, |p| format!(", pid {p}"));
    let state = match (&c.reason, c.exited) {
        (Some(reason), true) => reason.clone(),
        (_, true) => "exited".into(),
        (_, false) => "running".into(),
    };
    format!(
        "== child {} (claim generation {}{pid}, {}): {state} ==",
        c.child_epoch, c.generation, c.mode
    )
}

/// An event's data in the words clients see everywhere else (`ok` where the store says
/// `succeeded`: `protocol::event_data_for_clients`).
fn event_data(e: &EventRecord) -> Value {
    piw_host::protocol::event_data_for_clients(&e.kind, e.data.clone())
}

fn event_json(e: &EventRecord) -> Value {
    json!({ "seq": e.seq, "kind": e.kind, "at": e.at, "time": human::utc(u64::try_from(e.at).unwrap_or(0)), "data": event_data(e) })
}

/// How much of an event's data one line shows.
const EVENT_DATA_CHARS: usize = 200;

/// `-- #3 2026-12-05T03:01:02Z node_started {"node_id":"a"}`
fn event_line(e: &EventRecord) -> String {
    let mut data = if e.data.is_null() {
        String::new()
    } else {
        mask_hex_runs(&event_data(e).to_string())
    };
    if data.chars().count() > EVENT_DATA_CHARS {
        data = data.chars().take(EVENT_DATA_CHARS).collect::<String>() + "…";
    }
    format!(
        "-- #{} {} {} {data}",
        e.seq,
        human::utc(u64::try_from(e.at).unwrap_or(0)),
        e.kind
    )
    .trim_end()
    .to_owned()
}
