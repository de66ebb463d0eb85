//! One file per command: this table sends each command of the grammar ([`crate::cli`]) to
//! the file that carries it out. A group of commands (`piw host`, `piw run`, `piw channel`,
//! `piw state`, `piw runs`) is a folder, with a table of its own where its commands share
//! a step (`piw run` resolves the run id and connects once).

use crate::*;

mod channel;
mod completions;
mod diagnose;
mod host;
pub(crate) mod logs;
mod man;
mod repair;
mod run;
mod runs;
mod state;
mod view;

pub(crate) use channel::ChannelCmd;
pub(crate) use completions::CompletionsArgs;
pub(crate) use man::ManArgs;

/// Runs one command. `json` is its `--json`, which every command that prints a result takes
/// ([`cli::command`] adds it where the grammar has no field for it).
pub(crate) fn run(cli: Cli, json: bool) -> Result<(), CliError> {
    match cli.command {
        Cmd::Completions(args) => return completions::run(args),
        Cmd::Man(args) => return man::run(args),
        _ => {}
    }
    let paths = PiwPaths::from_env()?;
    if needs_installation(&cli.command) {
        require_installation(&paths)?;
    }
    match cli.command {
        Cmd::Completions(_) | Cmd::Man(_) => Ok(()),
        Cmd::Host(HostCmd::Serve) => host::serve::run(paths),
        Cmd::Host(HostCmd::Start) => host::start::run(&paths, json),
        Cmd::Host(HostCmd::Status { json }) => host::status::run(&paths, json),
        Cmd::Host(HostCmd::Stop) => host::stop::run(&paths, json),
        Cmd::Runs(RunsArgs {
            action: Some(RunsCmd::Prune(args)),
            ..
        }) => runs::prune::run(&paths, args, json),
        Cmd::Runs(args) => runs::list::run(&paths, args, json),
        Cmd::Run(cmd) => run::run(&paths, cmd, json),
        Cmd::Channel(cmd) => channel::run(&paths, cmd, json),
        Cmd::Logs(args) => logs::run(&paths, args, json),
        Cmd::View(args) => view::run(&paths, args, json),
        Cmd::Diagnose { json } => diagnose::run(&paths, json),
        Cmd::Repair { json } => repair::run(&paths, json),
        Cmd::State(StateCmd::Backup { path }) => state::backup::run(&paths, &path, json),
        Cmd::State(StateCmd::Restore { file, yes }) => {
            state::restore::run(&paths, &file, yes, json)
        }
        Cmd::State(StateCmd::Reset { yes }) => state::reset::run(&paths, yes, json),
    }
}
