//! Completion, generated from the clap grammar ([`cli::command`]), so it never falls behind the
//! commands (`piw completions <shell>` prints the script: `commands::completions`).
//!
//! Completion is dynamic: the script a shell loads asks `piw` itself for the words at each
//! Tab (`PIW_COMPLETE=<shell> piw -- <words>`), so run ids complete from the installation's
//! database (read-only, newest first), workflow names from the folders `piw run start` reads,
//! and a new command completes without a new script.

use super::*;
use clap_complete::engine::CompletionCandidate;

/// The variable under which the completion script calls `piw` for candidates.
pub(crate) const COMPLETE_VAR: &str = "PIW_COMPLETE";

/// How many run ids one Tab offers at most.
const RUN_IDS_OFFERED: u32 = 200;

/// Answers a completion request (when [`COMPLETE_VAR`] is set) and exits; otherwise returns.
pub(crate) fn complete_from_env() {
    clap_complete::CompleteEnv::with_factory(cli::command)
        .var(COMPLETE_VAR)
        .complete();
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
        .and_then(|store| store.runs_named_by(typed, RUN_IDS_OFFERED));
    runs.unwrap_or_default()
        .into_iter()
        .map(|r| {
            CompletionCandidate::new(r.run_id)
                .help(Some(format!("{} {}", r.status, r.workflow_name).into()))
        })
        .collect()
}

/// What `piw run start` takes, beginning with what was typed: the workflow names it finds (the
/// project's `.pi/workflows/`, `~/.pi/agent/workflows/`, the built-ins by id and as
/// `builtin:<id>`, as `crate::resolve` resolves them), then workflow files and directories.
pub(crate) fn complete_workflows(typed: &std::ffi::OsStr) -> Vec<CompletionCandidate> {
    let Ok(cwd) = std::env::current_dir() else {
        return Vec::new();
    };
    let text = typed.to_string_lossy();
    let mut candidates: Vec<CompletionCandidate> = Vec::new();
    // A name has no `/`; once one is typed only paths are meant.
    if !text.contains('/') {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let builtins = resolve::builtins_dir();
        candidates.extend(
            resolve::workflow_names(&cwd, &home, builtins.as_deref())
                .into_iter()
                .filter(|(name, _)| name.starts_with(text.as_ref()))
                .map(|(name, source)| {
                    CompletionCandidate::new(name).help(Some(source.describe().into()))
                }),
        );
    }
    let is_workflow_file = |p: &std::path::Path| {
        p.is_file()
            && p.to_str()
                .is_some_and(|p| resolve::SUFFIXES.iter().any(|s| p.ends_with(s)))
    };
    candidates.extend(clap_complete::engine::ValueCompleter::complete(
        &clap_complete::engine::PathCompleter::any()
            .filter(is_workflow_file)
            .current_dir(cwd),
        typed,
    ));
    candidates
}
