//! `piw channel add|list|test|remove`: decision channels (`piw_host::channels` keeps their
//! files; the host runs their adapters, `engine::channels`). A token is read from a file or
//! stdin, never from the command line, and never printed.

use crate::*;
use piw_host::channels;

mod add;
mod list;
mod remove;
mod test;

#[derive(Subcommand)]
pub(crate) enum ChannelCmd {
    /// Add a channel: protected human decisions of every run go to this chat, and a person
    /// there can answer them. The token is read from a file (`--token-file`) or stdin
    /// (`--token -`), never given on the command line.
    Add(AddArgs),
    /// List the channels, with their adapter's state when a host runs.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Send a test message through the channel's adapter, and say whether it arrived or what
    /// the channel's API answered.
    Test {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a channel and its token.
    Remove {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// A channel error as the command line reports it.
pub(super) fn cli_error(e: channels::ChannelError) -> CliError {
    {
        match e {
            channels::ChannelError::NotFound(_) => CliError::Client {
                code: "not_found",
                message: e.to_string(),
                details: Value::Null,
            },
            channels::ChannelError::Io { .. } => CliError::Runtime(e.to_string()),
            _ => CliError::Usage(e.to_string()),
        }
    }
}

/// Asks a running host (never starts one) to read the channels again: `Some(true)` when it
/// did, `None` when no host runs (the next one reads them when it starts).
pub(super) fn reload(paths: &PiwPaths) -> Result<Option<bool>, CliError> {
    let Ok(mut client) = BlockingClient::connect(paths) else {
        return Ok(None);
    };
    client.call(RequestBody::ChannelReload)?;
    Ok(Some(true))
}

/// The adapters' state as a running host reports it (`host.status` → `channels`).
pub(super) fn host_channels(paths: &PiwPaths) -> Option<Vec<Value>> {
    let mut client = BlockingClient::connect(paths).ok()?;
    let r = client.call(RequestBody::HostStatus).ok()?;
    Some(reply::<replies::HostStatusReply>(&r).ok()?.channels)
}

pub(crate) fn run(paths: &PiwPaths, cmd: ChannelCmd, json: bool) -> Result<(), CliError> {
    match cmd {
        ChannelCmd::Add(args) => add::run(paths, args, json),
        ChannelCmd::List { json: _ } => list::run(paths, json),
        ChannelCmd::Test { name, json: _ } => test::run(paths, &name, json),
        ChannelCmd::Remove { name, json: _ } => remove::run(paths, &name, json),
    }
}

// `piw channel add`.
#[derive(clap::Args)]
pub(crate) struct AddArgs {
    /// The kind of channel.
    #[arg(value_parser = ["telegram"])]
    pub(crate) kind: String,
    /// The one chat (its numeric id) decisions are sent to and answers are taken from.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) chat: String,
    /// A file holding the bot token (Telegram's BotFather gives it).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "token",
        required_unless_present = "token"
    )]
    pub(crate) token_file: Option<PathBuf>,
    /// `-`: read the token from stdin.
    #[arg(long, value_name = "-", value_parser = ["-"])]
    pub(crate) token: Option<String>,
    /// The channel's name (default: its kind).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Replace a channel of that name.
    #[arg(long)]
    pub(crate) replace: bool,
    #[arg(long)]
    pub(crate) json: bool,
}
