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
        // A directory for a `man` path need not exist yet (`piw man --dir ~/.local/share/man/man1`).
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Runtime(format!("cannot create {}: {e}", dir.display())))?;
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
    crate::emit(&String::from_utf8_lossy(&out));
    Ok(())
}

/// Writes the page of `cmd` and of each of its commands into `dir`; an error names the file.
fn write_pages(cmd: &clap::Command, dir: &std::path::Path) -> Result<(), CliError> {
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let man = page(cmd.clone());
    let file = dir.join(man.get_filename());
    let mut out = Vec::new();
    man.render(&mut out)
        .and_then(|()| std::fs::write(&file, out))
        .map_err(|e| CliError::Runtime(format!("cannot write {}: {e}", file.display())))
}

/// One command's page, every one naming piw and its version (commands have no version of
/// their own).
fn page(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd).source(concat!("piw ", env!("CARGO_PKG_VERSION")))
}
