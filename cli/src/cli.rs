//! The command line's grammar (clap): every command, argument and its help text.

use super::*;

/// The `--json` of every command, with one help text.
pub(crate) const JSON_HELP: &str = "Print the result as one JSON document on stdout; an error too (`{\"error\": {\"code\", \"message\", \"details\"}}`), with the same exit codes";

/// What a run id argument takes, in every command's help.
pub(crate) const RUN_ID_HELP: &str = "The run: its id, its short id (as `piw runs` shows it), a prefix of its id, or `last` (the newest run started in this directory or one above it)";

/// The commands that print no result of their own (a script, a page, completion words), so
/// take no `--json`.
const WITHOUT_JSON: [&str; 2] = ["completions", "man"];

/// The whole grammar: the derived one, with `--json` (and its help) on every command that
/// prints a result, and run ids that complete in a shell. Completions and the man page are
/// generated from this too.
pub(crate) fn command() -> clap::Command {
    fn with_json(cmd: clap::Command) -> clap::Command {
        let cmd = if cmd.has_subcommands() {
            let cmd = cmd.mut_subcommands(with_json);
            // A group of commands takes no `--json` itself; `piw runs` lists as well.
            if !cmd.get_arguments().any(|a| a.get_id() == "json") {
                return cmd;
            }
            cmd
        } else {
            cmd
        };
        // `mut_args`, not `mut_arg`: that one moves the argument to the end, which would
        // reorder positional arguments.
        let cmd = cmd.mut_args(|a| match a.get_id().as_str() {
            "run_id" => {
                let a = a.add(clap_complete::ArgValueCompleter::new(
                    completions::complete_run_ids,
                ));
                if a.get_help().is_none() {
                    a.help(RUN_ID_HELP)
                } else {
                    a
                }
            }
            "json" => a.help(JSON_HELP),
            _ => a,
        });
        if WITHOUT_JSON.contains(&cmd.get_name()) {
            return cmd;
        }
        if cmd.get_arguments().any(|a| a.get_id() == "json") {
            cmd
        } else {
            cmd.arg(
                clap::Arg::new("json")
                    .long("json")
                    .action(clap::ArgAction::SetTrue)
                    .help(JSON_HELP),
            )
        }
    }
    with_json(<Cli as clap::CommandFactory>::command())
}

#[derive(Parser)]
#[command(
    name = "piw",
    version,
    about = "The piw workflow host and its command line."
)]
#[command(
    after_help = "PIW_HOME selects the installation: an absolute path (default \
~/.pi/agent/piw). Only `host start`, `host serve`, `run start` and `state restore` create one; \
other commands on an installation that does not exist say so and create nothing.

A run is named by its id, its short id (the end of its id, at least 6 characters, as `piw runs` \
and `piw run start` show it), any prefix of its id that names one run, or `last`: the newest run \
started in this directory or a directory above it.

Exit codes: 0 ok, 1 failed, 2 usage (an ambiguous run id too), 3 `diagnose` found \
contradictions, 4 `--wait`/`run wait` gave up after `--timeout` (the run goes on). `run submit` \
waits for the workflow's verdict: 0 accepted, 1 rejected (or the run stopped for review or ended \
first), 4 no verdict within `--timeout` (the submission stands).

Examples:
  piw run start review --input '{\"task\": \"fix the login test\"}'   # .pi/workflows/review.workflow.*
  piw runs                              # the newest runs, with their short ids
  piw run status last                   # the run just started here
  piw run wait 3bf1bb --timeout 600     # a run by its short id
  piw view                              # watch runs live
  piw man run start | man -l -          # one command's manual"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Start, run, inspect or stop the host.
    #[command(subcommand)]
    Host(HostCmd),
    /// List runs, newest first; `piw runs prune` removes finished ones.
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:
  piw runs                                  # the newest 100 runs
  piw runs --unfinished                     # runs that have not ended
  piw runs --status waiting,review          # runs that wait for someone
  piw runs --all --json | jq -r '.runs[].short_id'
  piw runs prune --older-than 30d --dry-run # what a prune would remove"
    )]
    Runs(RunsArgs),
    /// Start or control one run.
    #[command(subcommand)]
    Run(RunCmd),
    /// Decision channels: where protected human decisions also go (Telegram), so a person can
    /// answer them while Pi is closed.
    #[command(subcommand)]
    Channel(crate::commands::ChannelCmd),
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
    #[command(after_help = "Examples:
  piw view                         # the run list; Enter opens a run
  piw view last                    # the newest run started here
  piw view --status waiting        # runs that wait for someone
  piw view 3bf1bb --once           # one frame as text, for a script or a bug report")]
    View(ViewArgs),
    /// Print a run's child output (every child of every attempt, whole, up to 16 MiB each)
    /// and its events; `--follow` goes on printing them as they come until the run ends.
    /// Read-only: it never starts a host.
    #[command(after_help = "Examples:
  piw logs last                    # the newest run started here
  piw logs 3bf1bb --follow         # as it comes, until the run ends")]
    Logs(commands::logs::LogsArgs),
    /// Print a completion script for a shell (run ids complete too), e.g.
    /// `piw completions bash > ~/.local/share/bash-completion/completions/piw`.
    #[command(after_help = "Examples:
  piw completions bash > ~/.local/share/bash-completion/completions/piw
  piw completions zsh > \"${fpath[1]}/_piw\"
  piw completions fish > ~/.config/fish/completions/piw.fish

Run ids, workflow names (the project's .pi/workflows/, ~/.pi/agent/workflows/, builtin:<id>), \
files and statuses complete.")]
    Completions(commands::CompletionsArgs),
    /// Print the man page (roff) of piw or of one command, e.g. `piw man run start | man -l -`;
    /// `--dir` writes every page instead.
    #[command(after_help = "Examples:
  piw man run start | man -l -
  piw man --dir ~/.local/share/man/man1        # every page; created when missing")]
    Man(commands::ManArgs),
}

/// A run status, with every status listed in `--help`, in an error and for shell completion.
/// What `piw runs` does besides listing.
#[derive(Subcommand)]
pub(crate) enum RunsCmd {
    /// Remove finished runs (completed, failed, cancelled, timed out) with everything that
    /// belongs to them: attempts, events, requests, effects, messages, receipts, child
    /// output. A run not finished is never removed. Give at least one selector; a run goes
    /// when every one given says so. The host removes them in batches, oldest first, and
    /// gives the space back.
    #[command(group(clap::ArgGroup::new("selector").required(true).multiple(true)
        .args(["older_than", "status", "keep"])))]
    Prune(PruneArgs),
}

fn finished_status_values(
) -> impl clap::builder::TypedValueParser<Value = piw_host::store::RunStatus> {
    use clap::builder::TypedValueParser as _;
    let names: Vec<&'static str> = piw_host::store::RunStatus::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| s.as_str())
        .collect();
    clap::builder::PossibleValuesParser::new(names).try_map(|name| parse_run_status(&name))
}

/// `30d`, `12h`, `90m`, `45s` as milliseconds.
pub(crate) fn parse_age(text: &str) -> Result<u64, String> {
    let usage = || "a number and a unit: s, m, h or d (`30d`)".to_owned();
    let unit = text.chars().last().ok_or_else(usage)?;
    let ms: u64 = match unit {
        's' => 1_000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return Err(usage()),
    };
    let n: u64 = text[..text.len() - 1].parse().map_err(|_| usage())?;
    n.checked_mul(ms).ok_or_else(usage)
}

fn run_status_values() -> impl clap::builder::TypedValueParser<Value = piw_host::store::RunStatus> {
    use clap::builder::TypedValueParser as _;
    let names: Vec<&'static str> = piw_host::store::RunStatus::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    clap::builder::PossibleValuesParser::new(names).try_map(|name| parse_run_status(&name))
}

fn parse_run_status(text: &str) -> Result<piw_host::store::RunStatus, String> {
    piw_host::store::RunStatus::parse(text).ok_or_else(|| {
        let all: Vec<&str> = piw_host::store::RunStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        format!("one of {}", all.join(", "))
    })
}

fn parse_run_list_cursor(text: &str) -> Result<piw_host::protocol::payload::RunListCursor, String> {
    piw_host::protocol::payload::RunListCursor::decode(text)
        .ok_or_else(|| "the `next_cursor` of an earlier `piw runs --json`".to_owned())
}

#[derive(Subcommand)]
pub(crate) enum HostCmd {
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
pub(crate) enum RunCmd {
    /// Start a run of a workflow: a name (found in ./.pi/workflows/, then
    /// ~/.pi/agent/workflows/, then the built-ins), builtin:<id> (autoplan, autodoc,
    /// plan-approval, plan-change, autoimplement, sanity-check, monitor) or a path to a workflow file.
    #[command(after_help = "Examples:
  piw run start review                              # .pi/workflows/review.workflow.*
  piw run start builtin:autoplan --input '{\"task\": \"add a --dry-run flag\"}' --wait
  piw run start ./flows/nightly.workflow.mjs --input @input.json
  piw run start review --detached --input @in.json  # {\"piw_detached\": {\"provider\", \"model\"}}

A run with agent steps needs someone to serve them: its Pi session (start it from Pi with \
`/workflow`), or a Pi the host starts with a model (--detached): the run's input `piw_detached`, \
the host's PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL (read when the host starts: `piw host \
stop` first), or Pi's default model (defaultProvider and defaultModel in its settings.json).")]
    Start(StartArgs),
    /// Print a run's graph with each node's state (read-only; never starts a host).
    Graph {
        run_id: String,
        #[arg(long, value_enum, default_value = "mermaid")]
        format: view::export::GraphFormat,
    },
    /// Show one run: its status, what it waits for and the command that answers it, its
    /// result or error, its messages and its newest child's output.
    #[command(after_help = "Examples:
  piw run status last              # the newest run started here
  piw run status 3bf1bb            # by short id (`piw runs` shows them)
  piw run status last --json | jq .run.status")]
    Status {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a value of a run that is stored apart (over 64 KiB), whole, as JSON: the
    /// `sha256` of its reference (`{"$piw": "value", ...}`, which `piw view` shows too).
    Value {
        run_id: String,
        sha256: String,
        /// Accepted for symmetry: the value is always printed as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pause a run at its next durable boundary.
    Pause {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Detach a run: its agent and assistant-message steps are answered by a Pi the host
    /// starts (`--detached` runs are so from the start), not by its Pi session, so it carries
    /// on once that Pi is closed. Its session still gets its messages while it is open.
    Detach {
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
    /// Answer an ordinary checkpoint of a run, as a person. With `--decision`, that one (as
    /// `piw run status` names it): once it is answered, the same answer gives back the original
    /// receipt and another is refused. Without, the one the run waits for now, refused when an
    /// earlier checkpoint of the run took the same answer: the same command run again never
    /// answers the next visit (name the decision to give an equal answer on purpose).
    Answer(AnswerArgs),
    /// Answer a protected human decision of a run, as the person deciding: the answer is
    /// `{"choice": CHOICE, "text": TEXT}` (`text` only when given). `--decision` binds it as
    /// for `piw run answer`.
    Decide(DecideArgs),
    /// Submit a result for an interactive step of a run (the workflow validates it). With
    /// `--interaction`, for that request (as `piw run status` names it): refused once it is
    /// closed, except that the result it already took gives back the original receipt.
    /// Without, for the request the run waits for now, refused when an earlier request of the
    /// run already accepted the same result: the same command run again never answers the
    /// next visit (name the interaction to submit an equal result on purpose).
    ///
    /// Then it waits for the workflow's verdict: exit 0 when the result is accepted, 1 when it
    /// is rejected (with the workflow's reason) or the run stopped for review or ended before
    /// judging it (the submission stands and is judged once the run goes on), 4 when no verdict
    /// came within `--timeout` (the submission stands).
    Submit(SubmitArgs),
    /// Wait until a run finishes (or stops for review) and print how it ended.
    #[command(after_help = "Examples:
  piw run wait last                          # until the newest run here ends
  piw run wait 3bf1bb --timeout 600 || echo \"still going (exit $?)\"")]
    Wait {
        run_id: String,
        /// Give up after this many seconds (exit 4; the run goes on).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// A run in review: run its current node again (once the cause of its lost children is
    /// fixed, or a changed source is put back). Refused while an effect is uncertain.
    /// With `--accept-source`, a run stopped because its workflow file changed goes on with
    /// the file as it is now.
    Retry(RetryArgs),
    /// A run in review: record what became of an uncertain effect (it was applied, with the
    /// receipt you provide, or it failed); once none is uncertain, the run continues.
    ResolveEffect(ResolveEffectArgs),
}

#[derive(Subcommand)]
pub(crate) enum StateCmd {
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

// `piw runs`: the list's filters, or `prune`.
#[derive(clap::Args)]
pub(crate) struct RunsArgs {
    #[command(subcommand)]
    pub(crate) action: Option<RunsCmd>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Only runs of this origin session.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Only runs that have not ended (queued, running, waiting or in review).
    #[arg(long)]
    pub(crate) unfinished: bool,
    /// Only runs in this status; repeat it or give a list (`--status waiting,review`).
    #[arg(long, value_name = "STATUS", value_delimiter = ',', value_parser = run_status_values())]
    pub(crate) status: Vec<piw_host::store::RunStatus>,
    /// At most this many runs, newest first. When more follow, a line on stderr says so
    /// (`more` and `next_cursor` in `--json`).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RUNS_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// Every run, however many (the host is asked a page at a time).
    #[arg(long, conflicts_with = "limit")]
    pub(crate) all: bool,
    /// Only the runs after this place in the list: the `next_cursor` of an earlier
    /// `piw runs --json`.
    #[arg(long, value_name = "CURSOR", value_parser = parse_run_list_cursor)]
    pub(crate) cursor: Option<piw_host::protocol::payload::RunListCursor>,
}

// `piw runs prune`.
#[derive(clap::Args)]
pub(crate) struct PruneArgs {
    /// Only runs that finished at least this long ago: a number and a unit, `s`, `m`,
    /// `h` or `d` (`30d`, `12h`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub(crate) older_than: Option<u64>,
    /// Only runs in this finished status; repeat it or give a list
    /// (`--status failed,cancelled`).
    #[arg(long, value_name = "STATUS", value_delimiter = ',', value_parser = finished_status_values())]
    pub(crate) status: Vec<piw_host::store::RunStatus>,
    /// Keep the newest N finished runs (of the selected statuses), whatever their age.
    #[arg(long, value_name = "N")]
    pub(crate) keep: Option<u64>,
    /// Say what would go (how many; the ids with `--json`) and change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw run start`.
#[derive(clap::Args)]
pub(crate) struct StartArgs {
    /// The workflow: a name (its file in ./.pi/workflows/, then ~/.pi/agent/workflows/, then a
    /// built-in), builtin:<id>, or a path to a workflow file.
    #[arg(value_name = "NAME|builtin:ID|PATH",
          add = clap_complete::ArgValueCompleter::new(completions::complete_workflows))]
    pub(crate) workflow: String,
    /// The run's input as JSON; without it `{}`, as a start from Pi gives (workflows
    /// written for pi-workflows read fields of their input, `input.task`, unguarded).
    #[arg(long, default_value = "{}", value_parser = parse_json)]
    pub(crate) input: Value,
    /// The origin Pi session.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Run its interactive steps in Pi children of the host (`PIW_DETACHED_PROVIDER`,
    /// `PIW_DETACHED_MODEL`), even with --session; refused at once if Pi cannot serve them.
    #[arg(long)]
    pub(crate) detached: bool,
    /// Wait until the run finishes (or stops for review) and print its result.
    #[arg(long)]
    pub(crate) wait: bool,
    /// With --wait: give up after this many seconds (exit 4; the run goes on).
    #[arg(long, value_name = "SECS", requires = "wait")]
    pub(crate) timeout: Option<u64>,
    /// Start at most one run for this key: the same command with the same key again (a
    /// retry after a lost reply, a script run twice) gives the run the first one started;
    /// the key with another workflow, input or directory is refused
    /// (`idempotency_conflict`). 1 to 128 characters.
    #[arg(long, value_name = "KEY")]
    pub(crate) idempotency_key: Option<String>,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw run answer`.
#[derive(clap::Args)]
pub(crate) struct AnswerArgs {
    pub(crate) run_id: String,
    /// The answer: JSON, or plain text (sent as a JSON string).
    #[arg(required_unless_present = "input", conflicts_with = "input")]
    pub(crate) answer: Option<String>,
    /// The answer as JSON, from `@file` or `-` (stdin) or inline.
    #[arg(long, value_parser = parse_json)]
    pub(crate) input: Option<Value>,
    /// The checkpoint answered (`dec-…`, from `piw run status`).
    #[arg(long, value_name = "ID")]
    pub(crate) decision: Option<String>,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw run decide`.
#[derive(clap::Args)]
pub(crate) struct DecideArgs {
    pub(crate) run_id: String,
    pub(crate) choice: String,
    pub(crate) text: Option<String>,
    /// The decision answered (`dec-…`, from `piw run status`).
    #[arg(long, value_name = "ID")]
    pub(crate) decision: Option<String>,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw run submit`.
#[derive(clap::Args)]
pub(crate) struct SubmitArgs {
    pub(crate) run_id: String,
    /// The result as JSON.
    #[arg(required_unless_present = "input", conflicts_with = "input", value_parser = parse_json)]
    pub(crate) result: Option<Value>,
    /// The result as JSON, from `@file` or `-` (stdin) or inline.
    #[arg(long, value_parser = parse_json)]
    pub(crate) input: Option<Value>,
    /// The interactive request answered (`int-…`, from `piw run status`).
    #[arg(long, value_name = "ID")]
    pub(crate) interaction: Option<String>,
    /// How long to wait for the workflow's verdict; 0 does not wait (the state printed is
    /// then `validating`).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) timeout: u64,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw run retry`.
#[derive(clap::Args)]
pub(crate) struct RetryArgs {
    pub(crate) run_id: String,
    /// Why: what was fixed (kept in the run's `retried` event, with your login name).
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
    /// The run stopped because a source changed: go on with the workflow file as it is
    /// now (its new hash, graph and mounts become the run's; the `retried` event keeps the
    /// old and the new hash). Refused for a run in review for any other reason.
    #[arg(long)]
    pub(crate) accept_source: bool,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw run resolve-effect`.
#[derive(clap::Args)]
pub(crate) struct ResolveEffectArgs {
    pub(crate) run_id: String,
    pub(crate) effect_id: String,
    /// It happened: the external system's receipt, as JSON.
    #[arg(long, value_name = "RECEIPT_JSON", value_parser = parse_json, conflicts_with = "failed", required_unless_present = "failed")]
    pub(crate) applied: Option<Value>,
    /// It did not happen: why.
    #[arg(long, value_name = "ERROR")]
    pub(crate) failed: Option<String>,
    /// How you know (kept in the `effect_resolved` event, with your login name).
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
    #[arg(long)]
    pub(crate) json: bool,
}

// `piw view`.
#[derive(clap::Args)]
pub(crate) struct ViewArgs {
    /// Open this run (Esc goes to the run list): its id, short id, a prefix of its id, or
    /// `last`.
    pub(crate) run_id: Option<String>,
    /// Print one plain-text frame and exit.
    #[arg(long)]
    pub(crate) once: bool,
    /// List only runs in this status.
    #[arg(long, value_parser = parse_run_status)]
    pub(crate) status: Option<piw_host::store::RunStatus>,
    /// List only runs of this origin session.
    #[arg(long)]
    pub(crate) session: Option<String>,
}
