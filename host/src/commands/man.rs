//! `piw man`: man pages generated from the clap grammar ([`cli::command`]), so they never fall
//! behind the commands.

use crate::*;

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
pub(crate) fn run(args: ManArgs) -> Result<(), CliError> {
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
