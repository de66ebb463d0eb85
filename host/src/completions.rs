//! `piw completions <shell>` and `piw man`, generated from the clap grammar ([`cli::command`]),
//! so they never fall behind the commands.
//!
//! Completion is dynamic: the script a shell loads asks `piw` itself for the words at each
//! Tab (`PIW_COMPLETE=<shell> piw -- <words>`), so run ids complete from the installation's
//! database (read-only, newest first) and a new command completes without a new script.

use super::*;
use clap_complete::engine::CompletionCandidate;
use clap_complete::env::Shells;

/// The variable under which the completion script calls `piw` for candidates.
pub(crate) const COMPLETE_VAR: &str = "PIW_COMPLETE";

/// How many run ids one Tab offers at most.
const RUN_IDS_OFFERED: u32 = 200;

#[derive(clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to print the script for.
    #[arg(value_enum)]
    pub(crate) shell: CompletionShell,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    fn name(self) -> &'static str {
        match self {
            CompletionShell::Bash => "bash",
            CompletionShell::Zsh => "zsh",
            CompletionShell::Fish => "fish",
        }
    }
}

/// Answers a completion request (when [`COMPLETE_VAR`] is set) and exits; otherwise returns.
pub(crate) fn complete_from_env() {
    clap_complete::CompleteEnv::with_factory(cli::command)
        .var(COMPLETE_VAR)
        .complete();
}

/// `piw completions <shell>`: the script that registers `piw`'s completion in that shell. It
/// calls `piw` from `PATH`, so it keeps working when piw is upgraded.
pub(crate) fn print_completions(shell: CompletionShell) -> Result<(), CliError> {
    let shells = Shells::builtins();
    let completer = shells
        .completer(shell.name())
        .ok_or_else(|| CliError::Runtime(format!("no completion for {}", shell.name())))?;
    let mut out = Vec::new();
    completer.write_registration(COMPLETE_VAR, "piw", "piw", "piw", &mut out)?;
    std::io::Write::write_all(&mut std::io::stdout(), &out)?;
    Ok(())
}

#[derive(clap::Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print (`run start`); none: piw's own page.
    #[arg(value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
    /// Write every page (`piw.1`, `piw-run.1`, `piw-run-start.1`, ...) into this directory
    /// (for a `man` path) instead of printing one.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub(crate) dir: Option<PathBuf>,
}

/// `piw man`: the man page of piw or of one of its commands, or every page into a directory.
pub(crate) fn man(args: ManArgs) -> Result<(), CliError> {
    let mut cmd = cli::command().disable_help_subcommand(true);
    // Built, so that each command has its page name (`piw-run-start`).
    cmd.build();
    if let Some(dir) = args.dir {
        fn write_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
            for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
                write_pages(sub, dir)?;
            }
            page(cmd.clone()).generate_to(dir).map(drop)
        }
        write_pages(&cmd, &dir)?;
        crate::emit(&format!(
            "wrote the man pages of piw and its commands to {}\n",
            dir.display()
        ));
        return Ok(());
    }
    for word in &args.command {
        cmd = cmd
            .find_subcommand(word)
            .filter(|c| !c.is_hide_set())
            .cloned()
            .ok_or_else(|| {
                CliError::Usage(format!("piw has no command {:?}", args.command.join(" ")))
            })?;
    }
    let mut out = Vec::new();
    page(cmd).render(&mut out)?;
    std::io::Write::write_all(&mut std::io::stdout(), &out)?;
    Ok(())
}

/// One command's page, every one naming piw and its version (commands have no version of
/// their own).
fn page(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd).source(concat!("piw ", env!("CARGO_PKG_VERSION")))
}

/// The run ids that begin with what was typed, newest first, each with its status and
/// workflow as help. None when there is no installation (completion never creates one).
pub(crate) fn complete_run_ids(typed: &std::ffi::OsStr) -> Vec<CompletionCandidate> {
    let Some(typed) = typed.to_str() else {
        return Vec::new();
    };
    let Ok(paths) = PiwPaths::from_env() else {
        return Vec::new();
    };
    if !paths.db.exists() {
        return Vec::new();
    }
    let runs = Store::open_read_only(&paths.db, StoreConfig::default())
        .and_then(|store| store.runs_with_id_prefix(typed, RUN_IDS_OFFERED));
    runs.unwrap_or_default()
        .into_iter()
        .map(|r| {
            CompletionCandidate::new(r.run_id)
                .help(Some(format!("{} {}", r.status, r.workflow_name).into()))
        })
        .collect()
}
