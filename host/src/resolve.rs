//! `piw run start <name|path>`: a workflow by name (the file stem) from the project's
//! `.pi/workflows/`, then `~/.pi/agent/workflows/` (the project wins a collision), or a path.
//! The Pi extension (`node-binding/extension/resolve.js`) resolves names by the same rules.

use std::path::{Path, PathBuf};

/// Suffixes of workflow files, in the order a name is tried.
pub const SUFFIXES: [&str; 5] = [
    ".workflow.ts",
    ".workflow.mts",
    ".workflow.js",
    ".workflow.mjs",
    ".workflow.json",
];

/// Subcommand words of `/workflow` and actions of the Pi tool: never workflow names.
pub const RESERVED: [&str; 10] = [
    "list", "start", "status", "pause", "resume", "cancel", "answer", "update", "submit", "help",
];

/// Why a workflow reference names no file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error("\"{0}\" is a subcommand word, not a workflow name; rename the workflow file or start it by path (./{0}.workflow.mjs)")]
    Reserved(String),
    #[error("no workflow named \"{name}\" in {} or {} (suffixes {})", .project.display(), .global.display(), SUFFIXES.join(", "))]
    UnknownName {
        name: String,
        project: PathBuf,
        global: PathBuf,
    },
}

fn looks_like_path(reference: &str) -> bool {
    reference.contains('/')
        || reference.starts_with('.')
        || SUFFIXES.iter().any(|s| reference.ends_with(s))
}

/// Resolves `reference` against the project directory `cwd` and the user's home directory.
pub fn resolve_workflow(reference: &str, cwd: &Path, home: &Path) -> Result<PathBuf, ResolveError> {
    if looks_like_path(reference) {
        // A path goes to the host as it is: the host checks the file (and says why it
        // cannot run it) when it hashes it at `run.start`.
        return Ok(cwd.join(reference));
    }
    if RESERVED.contains(&reference) {
        return Err(ResolveError::Reserved(reference.to_owned()));
    }
    let project = cwd.join(".pi/workflows");
    let global = home.join(".pi/agent/workflows");
    for dir in [&project, &global] {
        for suffix in SUFFIXES {
            let path = dir.join(format!("{reference}{suffix}"));
            if path.is_file() {
                return Ok(path);
            }
        }
    }
    Err(ResolveError::UnknownName {
        name: reference.to_owned(),
        project,
        global,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "{}").unwrap();
    }

    #[test]
    fn the_project_wins_a_name_both_folders_have() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("p"), dir.path().join("h"));
        write(&home.join(".pi/agent/workflows/review.workflow.mjs"));
        write(&home.join(".pi/agent/workflows/only.workflow.json"));
        assert_eq!(
            resolve_workflow("review", &cwd, &home).unwrap(),
            home.join(".pi/agent/workflows/review.workflow.mjs")
        );
        write(&cwd.join(".pi/workflows/review.workflow.ts"));
        assert_eq!(
            resolve_workflow("review", &cwd, &home).unwrap(),
            cwd.join(".pi/workflows/review.workflow.ts")
        );
        assert_eq!(
            resolve_workflow("only", &cwd, &home).unwrap(),
            home.join(".pi/agent/workflows/only.workflow.json")
        );
    }

    #[test]
    fn paths_reserved_words_and_unknown_names() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("p"), dir.path().join("h"));
        write(&cwd.join("flows/x.workflow.js"));
        write(&cwd.join(".pi/workflows/status.workflow.mjs"));
        assert_eq!(
            resolve_workflow("flows/x.workflow.js", &cwd, &home).unwrap(),
            cwd.join("flows/x.workflow.js")
        );
        assert_eq!(
            resolve_workflow("status", &cwd, &home),
            Err(ResolveError::Reserved("status".into()))
        );
        assert!(matches!(
            resolve_workflow("nope", &cwd, &home),
            Err(ResolveError::UnknownName { .. })
        ));
        assert_eq!(
            resolve_workflow("./nope.workflow.mjs", &cwd, &home).unwrap(),
            cwd.join("./nope.workflow.mjs")
        );
    }
}
