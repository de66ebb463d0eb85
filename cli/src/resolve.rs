//! `piw run start <name|path>`: a workflow by name (the file stem) from the project's
//! `.pi/workflows/`, then `~/.pi/agent/workflows/`, then the package's built-ins (the first
//! wins a collision, so a project or global file overrides a built-in of the same name);
//! `builtin:<id>` names the built-in itself; anything else with a `/` is a path.
//! The Pi extension (`node-binding/lib/workflow-names.js`) resolves names by the same rules.

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
    #[error("no workflow named \"{name}\" in {} or {} (suffixes {}) nor among the built-ins", .project.display(), .global.display(), SUFFIXES.join(", "))]
    UnknownName {
        name: String,
        project: PathBuf,
        global: PathBuf,
    },
    #[error("no built-in workflow \"{name}\" in {}", .dir.as_ref().map_or_else(|| "(no built-ins found: set PIW_BUILTINS_DIR to the package's builtins/ folder)".to_owned(), |d| d.display().to_string()))]
    UnknownBuiltin { name: String, dir: Option<PathBuf> },
}

/// The prefix of a reference to a built-in workflow, whatever files of its name exist.
pub const BUILTIN_PREFIX: &str = "builtin:";
/// The suffix of a built-in workflow's file in the package's `builtins/` folder.
const BUILTIN_SUFFIX: &str = ".workflow.mjs";

/// The package's `builtins/` folder: `PIW_BUILTINS_DIR`; else next to the Node worker runtime
/// (`PIW_NODE_WORKER`'s folder), or a source checkout's `node-binding/builtins` when `piw` runs
/// from its `target/`, or `builtins/` beside the folder of the `piw` executable (a package's
/// `bin/`); `None` when none exists.
pub fn builtins_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PIW_BUILTINS_DIR") {
        return Some(PathBuf::from(dir));
    }
    let worker = std::env::var_os("PIW_NODE_WORKER")
        .and_then(|w| Some(PathBuf::from(w).parent()?.join("builtins")));
    let exe = std::env::current_exe().ok();
    // target/<profile>/piw -> the checkout root.
    let checkout = exe.as_deref().and_then(|e| {
        Some(
            e.parent()?
                .parent()?
                .parent()?
                .join("node-binding/builtins"),
        )
    });
    let beside = exe
        .as_deref()
        .and_then(|e| Some(e.parent()?.parent()?.join("builtins")));
    [worker, checkout, beside]
        .into_iter()
        .flatten()
        .find(|d| d.is_dir())
}

fn builtin(name: &str, dir: Option<&Path>) -> Result<PathBuf, ResolveError> {
    let unknown = || ResolveError::UnknownBuiltin {
        name: name.to_owned(),
        dir: dir.map(Path::to_path_buf),
    };
    // An id is a file stem: never a path out of the folder.
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(unknown());
    }
    let path = dir
        .ok_or_else(unknown)?
        .join(format!("{name}{BUILTIN_SUFFIX}"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(unknown())
    }
}

fn looks_like_path(reference: &str) -> bool {
    reference.contains('/')
        || reference.starts_with('.')
        || SUFFIXES.iter().any(|s| reference.ends_with(s))
}

/// Resolves `reference` against the project directory `cwd`, the user's home directory and the
/// built-ins' folder `builtins` (see [`builtins_dir`]).
pub fn resolve_workflow(
    reference: &str,
    cwd: &Path,
    home: &Path,
    builtins: Option<&Path>,
) -> Result<PathBuf, ResolveError> {
    if let Some(id) = reference.strip_prefix(BUILTIN_PREFIX) {
        return builtin(id.trim(), builtins);
    }
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
    if let Ok(path) = builtin(reference, builtins) {
        return Ok(path);
    }
    Err(ResolveError::UnknownName {
        name: reference.to_owned(),
        project,
        global,
    })
}

/// Where a workflow name is found, for completion's help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameSource {
    Project,
    Global,
    Builtin,
}

impl NameSource {
    pub fn describe(self) -> &'static str {
        match self {
            NameSource::Project => "workflow in .pi/workflows/",
            NameSource::Global => "workflow in ~/.pi/agent/workflows/",
            NameSource::Builtin => "built-in workflow",
        }
    }
}

/// Every reference [`resolve_workflow`] resolves by name, sorted, each once with where it is
/// found: the names of the project's and the user's workflow files (the first folder wins a
/// name, as it does there) and the built-ins by bare id (unless a file has its name) and as
/// `builtin:<id>`. Reserved words are left out: they name no workflow.
pub fn workflow_names(
    cwd: &Path,
    home: &Path,
    builtins: Option<&Path>,
) -> Vec<(String, NameSource)> {
    let stems = |dir: &Path, suffixes: &[&str]| -> Vec<String> {
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.path().is_file())
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_owned();
                suffixes
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|stem| !stem.is_empty()))
                    .map(str::to_owned)
            })
            .collect();
        found.sort();
        found
    };
    let mut names: Vec<(String, NameSource)> = Vec::new();
    let mut add = |name: String, source: NameSource| {
        if !RESERVED.contains(&name.as_str()) && !names.iter().any(|(n, _)| *n == name) {
            names.push((name, source));
        }
    };
    for name in stems(&cwd.join(".pi/workflows"), &SUFFIXES) {
        add(name, NameSource::Project);
    }
    for name in stems(&home.join(".pi/agent/workflows"), &SUFFIXES) {
        add(name, NameSource::Global);
    }
    let shipped = builtins.map_or_else(Vec::new, |dir| stems(dir, &[BUILTIN_SUFFIX]));
    for id in &shipped {
        add(id.clone(), NameSource::Builtin);
    }
    for id in shipped {
        add(format!("{BUILTIN_PREFIX}{id}"), NameSource::Builtin);
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names
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
            resolve_workflow("review", &cwd, &home, None).unwrap(),
            home.join(".pi/agent/workflows/review.workflow.mjs")
        );
        write(&cwd.join(".pi/workflows/review.workflow.ts"));
        assert_eq!(
            resolve_workflow("review", &cwd, &home, None).unwrap(),
            cwd.join(".pi/workflows/review.workflow.ts")
        );
        assert_eq!(
            resolve_workflow("only", &cwd, &home, None).unwrap(),
            home.join(".pi/agent/workflows/only.workflow.json")
        );
    }

    #[test]
    fn completion_lists_every_name_the_resolver_takes_and_where_it_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home, shipped) = (
            dir.path().join("p"),
            dir.path().join("h"),
            dir.path().join("b"),
        );
        write(&cwd.join(".pi/workflows/review.workflow.ts"));
        write(&cwd.join(".pi/workflows/status.workflow.mjs"));
        write(&cwd.join(".pi/workflows/notes.md"));
        write(&home.join(".pi/agent/workflows/review.workflow.json"));
        write(&home.join(".pi/agent/workflows/nightly.workflow.json"));
        write(&shipped.join("autoplan.workflow.mjs"));
        write(&shipped.join("nightly.workflow.mjs"));
        let names = workflow_names(&cwd, &home, Some(&shipped));
        assert_eq!(
            names,
            vec![
                ("autoplan".to_owned(), NameSource::Builtin),
                ("builtin:autoplan".to_owned(), NameSource::Builtin),
                ("builtin:nightly".to_owned(), NameSource::Builtin),
                ("nightly".to_owned(), NameSource::Global),
                ("review".to_owned(), NameSource::Project),
            ]
        );
        // Each resolves to the file the list says.
        for (name, source) in names {
            let path = resolve_workflow(&name, &cwd, &home, Some(&shipped)).unwrap();
            let root = match source {
                NameSource::Project => cwd.join(".pi/workflows"),
                NameSource::Global => home.join(".pi/agent/workflows"),
                NameSource::Builtin => shipped.clone(),
            };
            assert!(path.starts_with(&root), "{name}: {}", path.display());
        }
    }

    #[test]
    fn paths_reserved_words_and_unknown_names() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("p"), dir.path().join("h"));
        write(&cwd.join("flows/x.workflow.js"));
        write(&cwd.join(".pi/workflows/status.workflow.mjs"));
        assert_eq!(
            resolve_workflow("flows/x.workflow.js", &cwd, &home, None).unwrap(),
            cwd.join("flows/x.workflow.js")
        );
        assert_eq!(
            resolve_workflow("status", &cwd, &home, None),
            Err(ResolveError::Reserved("status".into()))
        );
        assert!(matches!(
            resolve_workflow("nope", &cwd, &home, None),
            Err(ResolveError::UnknownName { .. })
        ));
        assert_eq!(
            resolve_workflow("./nope.workflow.mjs", &cwd, &home, None).unwrap(),
            cwd.join("./nope.workflow.mjs")
        );
    }

    #[test]
    fn built_ins_by_prefix_and_by_name_and_overridden_by_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home, shipped) = (
            dir.path().join("p"),
            dir.path().join("h"),
            dir.path().join("b"),
        );
        write(&shipped.join("autoplan.workflow.mjs"));
        let b = Some(shipped.as_path());
        assert_eq!(
            resolve_workflow("builtin:autoplan", &cwd, &home, b).unwrap(),
            shipped.join("autoplan.workflow.mjs")
        );
        assert_eq!(
            resolve_workflow("autoplan", &cwd, &home, b).unwrap(),
            shipped.join("autoplan.workflow.mjs")
        );
        // A global file, then a project file, of the same name wins over the built-in; the
        // prefix still names the built-in.
        write(&home.join(".pi/agent/workflows/autoplan.workflow.js"));
        assert_eq!(
            resolve_workflow("autoplan", &cwd, &home, b).unwrap(),
            home.join(".pi/agent/workflows/autoplan.workflow.js")
        );
        write(&cwd.join(".pi/workflows/autoplan.workflow.ts"));
        assert_eq!(
            resolve_workflow("autoplan", &cwd, &home, b).unwrap(),
            cwd.join(".pi/workflows/autoplan.workflow.ts")
        );
        assert_eq!(
            resolve_workflow("builtin:autoplan", &cwd, &home, b).unwrap(),
            shipped.join("autoplan.workflow.mjs")
        );
        for bad in ["builtin:nope", "builtin:../autoplan", "builtin:"] {
            assert!(matches!(
                resolve_workflow(bad, &cwd, &home, b),
                Err(ResolveError::UnknownBuiltin { .. })
            ));
        }
        assert!(matches!(
            resolve_workflow("builtin:autoplan", &cwd, &home, None),
            Err(ResolveError::UnknownBuiltin { dir: None, .. })
        ));
    }
}
