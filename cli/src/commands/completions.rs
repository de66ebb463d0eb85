//! `piw completions <shell>`: the script that registers piw's completion in a shell (the
//! completion itself: [`crate::completions`]).

use crate::completions::COMPLETE_VAR;
use crate::*;
use clap_complete::env::Shells;

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

/// `piw completions <shell>`: the script that registers `piw`'s completion in that shell. It
/// calls `piw` from `PATH`, so it keeps working when piw is upgraded.
pub(crate) fn run(args: CompletionsArgs) -> Result<(), CliError> {
    let shell = args.shell;
    let shells = Shells::builtins();
    let completer = shells
        .completer(shell.name())
        .ok_or_else(|| CliError::Runtime(format!("no completion for {}", shell.name())))?;
    let mut out = Vec::new();
    completer.write_registration(COMPLETE_VAR, "piw", "piw", "piw", &mut out)?;
    std::io::Write::write_all(&mut std::io::stdout(), &out)?;
    Ok(())
}
