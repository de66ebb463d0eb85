//! The I/O of detached runs' bridges (`engine::bridges` decides): which Pi to run and with
//! what model ([`settings`], read once when the host starts), the preflight of an explicit
//! detached start ([`check_detached_start`], on the connection's blocking thread; the engine
//! decides), and one bridge's
//! process ([`watch_bridge`], a supervisor task).
//!
//! Pi, first found wins: `PIW_PI` (an executable, or a `.js`/`.mjs` file run with the worker
//! runtime's Node); the Pi the `piw` package installed (`@earendil-works/pi-coding-agent`
//! beside it or in its `node_modules`, run with that Node); `pi` on `PATH`. The provider,
//! model and extra arguments: the workflow's (`defineWorkflow({ detached })`), the run's input
//! (`piw_detached`), the host's `PIW_DETACHED_PROVIDER`, `PIW_DETACHED_MODEL`,
//! `PIW_DETACHED_PI_ARGS` (split on whitespace), first found wins (`engine::bridges::pi_model`).
//! A run for which none names a provider and a model gets no bridge: its steps wait for a
//! client to answer them; an explicit detached start needs one from its input or the host.
//! `PIW_DETACHED_BRIDGES=off`: the host launches no bridges at all.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use super::helper::{run_helper, HelperStdin};
use super::node_runtime::NodeRuntime;
use super::queues::StoreMsg;
use crate::engine::admission::{self, DetachedPreflight, PiPreflight, PiPreflightOutcome, Refusal};
use crate::engine::bridges::{BridgeReport, BridgeSettings, PiCommand, PiDefault};
use crate::engine::children::ChildReport;
use crate::store::ChildExitRecord;
use crate::supervise::{self, SpawnSpec};

/// The npm package of Pi.
const PI_PACKAGE: &str = "@earendil-works/pi-coding-agent";

/// How long a bridge may take to load Pi and its extension before it takes its run
/// (`PIW_BRIDGE_HANDSHAKE_MS`): Pi starts in about a second, far longer on a loaded machine.
pub const BRIDGE_HANDSHAKE: Duration = Duration::from_secs(60);

/// How often a starting bridge's lock file is read for its pid.
const HANDSHAKE_POLL: Duration = Duration::from_millis(50);

/// The environment [`settings`] reads.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub pi: Option<OsString>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub pi_args: Option<String>,
    pub off: bool,
    pub path: Option<OsString>,
    pub handshake_ms: Option<u64>,
    /// The text of Pi's settings in its agent directory (`$PI_CODING_AGENT_DIR/settings.json`,
    /// else `$HOME/.pi/agent/settings.json`), when there is one: its default model.
    pub pi_settings: Option<String>,
}

impl Inputs {
    pub fn from_env() -> Self {
        let text = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self {
            pi: std::env::var_os("PIW_PI").filter(|v| !v.is_empty()),
            provider: text("PIW_DETACHED_PROVIDER"),
            model: text("PIW_DETACHED_MODEL"),
            pi_args: text("PIW_DETACHED_PI_ARGS"),
            off: text("PIW_DETACHED_BRIDGES").is_some_and(|v| v.trim() == "off"),
            path: std::env::var_os("PATH"),
            handshake_ms: text("PIW_BRIDGE_HANDSHAKE_MS").and_then(|v| v.trim().parse().ok()),
            pi_settings: pi_agent_dir()
                .and_then(|dir| std::fs::read_to_string(dir.join("settings.json")).ok()),
        }
    }
}

/// Pi's agent directory, as Pi finds it: `PI_CODING_AGENT_DIR`, else `~/.pi/agent`.
fn pi_agent_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PI_CODING_AGENT_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".pi").join("agent"))
}

/// Pi's default model in the text of its settings (`defaultProvider` and `defaultModel`, both
/// non-empty); `None` for anything else, a file Pi would not read included.
fn pi_default(settings: &str) -> Option<PiDefault> {
    let v: serde_json::Value = serde_json::from_str(settings).ok()?;
    let text = |key: &str| {
        v.get(key)
            .and_then(|x| x.as_str())
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
    };
    Some(PiDefault {
        provider: text("defaultProvider")?,
        model: text("defaultModel")?,
    })
}

/// How this host runs bridges; `None` when it runs none (see the module documentation).
/// `node`: the worker runtime, whose Node runs a script Pi and whose package holds the bridge
/// extension.
pub fn settings(
    inputs: &Inputs,
    node: Option<&NodeRuntime>,
    home: &Path,
    is_file: &dyn Fn(&Path) -> bool,
) -> Option<BridgeSettings> {
    if inputs.off {
        return None;
    }
    let package = node.and_then(|rt| rt.worker.parent().map(Path::to_path_buf));
    let pi = match &package {
        None => Err("the bridge extension is part of the npm package `piw`, and this host has no Node worker runtime (PIW_NODE_WORKER)".to_owned()),
        Some(package) => find_pi(inputs, node, package, is_file),
    };
    let package = package.unwrap_or_default();
    Some(BridgeSettings {
        pi,
        extension: package.join("extension").join("bridge.js"),
        preflight: node.map(|rt| {
            (
                rt.node.clone(),
                package.join("lib").join("bridge-preflight.js"),
            )
        }),
        provider: inputs.provider.clone(),
        model: inputs.model.clone(),
        pi_args: inputs
            .pi_args
            .as_deref()
            .map(|a| a.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
        pi_default: inputs.pi_settings.as_deref().and_then(pi_default),
        home: home.to_path_buf(),
        handshake_timeout: inputs
            .handshake_ms
            .map_or(BRIDGE_HANDSHAKE, Duration::from_millis),
    })
}

/// Pi, as the module documentation says.
fn find_pi(
    inputs: &Inputs,
    node: Option<&NodeRuntime>,
    package: &Path,
    is_file: &dyn Fn(&Path) -> bool,
) -> Result<PiCommand, String> {
    let script = |file: PathBuf, describe: String| match node {
        Some(rt) => Ok(PiCommand {
            program: rt.node.clone(),
            prefix: vec![file.display().to_string()],
            describe,
        }),
        None => Err(format!(
            "{describe} is a script and the host has no Node 22 to run it"
        )),
    };
    if let Some(pi) = &inputs.pi {
        let file = super::anchored(PathBuf::from(pi));
        let describe = format!("PIW_PI={}", file.display());
        let is_script = file
            .extension()
            .is_some_and(|e| e == "js" || e == "mjs" || e == "cjs");
        return if is_script {
            script(file, describe)
        } else {
            Ok(PiCommand {
                program: file,
                prefix: Vec::new(),
                describe,
            })
        };
    }
    // The package's own Pi: nested in its node_modules, or hoisted beside it.
    let mut candidates = vec![package.join("node_modules").join(PI_PACKAGE)];
    if let Some(node_modules) = package
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "node_modules"))
    {
        candidates.push(node_modules.join(PI_PACKAGE));
    }
    for dir in candidates {
        // Its `bin`: the bundle of Pi 1.6, the plain build of others.
        for cli in [dir.join("dist/bundle/cli.js"), dir.join("dist/cli.js")] {
            if is_file(&cli) {
                return script(cli, format!("{PI_PACKAGE} at {}", dir.display()));
            }
        }
    }
    let on_path = inputs.path.as_deref().and_then(|path| {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join("pi"))
            .find(|p| is_file(p))
    });
    match on_path {
        Some(pi) => Ok(PiCommand {
            describe: format!("pi on PATH ({})", pi.display()),
            program: pi,
            prefix: Vec::new(),
        }),
        None => Err(format!(
            "PIW_PI is not set, {PI_PACKAGE} is not installed beside piw, and there is no pi on PATH: install Pi 1.6 or newer, or set PIW_PI to its command (then `piw host stop`)"
        )),
    }
}

/// Checks, before an explicit detached start, that the host can serve its steps: the engine
/// decides from the settings, the workflow's snapshot when the start already has it
/// (`definition`: see [`start_definition`]) and the input
/// (`engine::admission::detached_preflight`); when it asks, Pi checks the provider's
/// credentials and the model ([`run_pi_preflight`]), and the engine judges Pi's answer
/// (`detached_verdict`). Blocking (Pi starts twice): the connection's blocking thread runs it.
pub fn check_detached_start(
    settings: Option<&BridgeSettings>,
    definition: Option<&serde_json::Value>,
    input: &serde_json::Value,
    env: &[(OsString, OsString)],
    home: &Path,
    cwd: &Path,
) -> Result<(), Refusal> {
    match admission::detached_preflight(settings, definition, input)? {
        DetachedPreflight::NotNeeded => Ok(()),
        DetachedPreflight::AskPi(check) => {
            let outcome = run_pi_preflight(&check, env, home, cwd);
            admission::detached_verdict(&check, outcome)
        }
    }
}

/// Runs Pi's preflight (`node lib/bridge-preflight.js pi provider model`) in the run's project
/// directory with the environment its bridge would have, and says how it ended.
fn run_pi_preflight(
    check: &PiPreflight,
    env: &[(OsString, OsString)],
    home: &Path,
    cwd: &Path,
) -> PiPreflightOutcome {
    let out = std::process::Command::new(&check.node)
        .arg(&check.script)
        .args(check.args())
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PIW_HOME", home)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Err(e) => PiPreflightOutcome::NotRun {
            error: e.to_string(),
        },
        Ok(out) if out.status.success() => PiPreflightOutcome::Passed,
        Ok(out) => PiPreflightOutcome::Failed {
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
    }
}

/// How long the workflow module may take to load when [`describe_definition`] asks for its
/// graph: a start waits for it, and a module that hangs must not hold the start for ever.
const DESCRIBE_BOUND: Duration = Duration::from_secs(30);

/// The snapshot of the workflow an explicit detached start names, so that its own `detached`
/// model and whether any step needs a model count before the run exists: a `.workflow.json`
/// file's graph ([`known_definition`]), else the graph a JavaScript or TypeScript module
/// defines, loaded as its child would load it (`<package>/lib/describe.js`, with the worker
/// runtime's Node, in the run's project directory and the environment its bridge would have;
/// bounded by [`DESCRIBE_BOUND`]). `None` when neither can be had: the start is then checked
/// against the input, the host and Pi's settings alone.
pub fn start_definition(
    settings: Option<&BridgeSettings>,
    source_root: &str,
    env: &[(OsString, OsString)],
    home: &Path,
    cwd: &Path,
) -> Option<serde_json::Value> {
    if let Some(definition) = known_definition(source_root) {
        return Some(definition);
    }
    let (node, preflight) = settings?.preflight.as_ref()?;
    let script = preflight.with_file_name("describe.js");
    let mut cmd = std::process::Command::new(node);
    cmd.arg(&script)
        .args([source_root.as_ref(), cwd.as_os_str()])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PIW_HOME", home)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // Its own process group, so that whatever the module starts goes with it on the bound.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::warn!(error = %e, script = %script.display(), "cannot read the workflow's graph before a detached start");
            return None;
        }
    };
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < DESCRIBE_BOUND => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) | Err(_) => {
                tracing::warn!(file = source_root, "the workflow's module did not load within the bound; its start is checked without its graph");
                let _ = crate::supervise::procfs::signal_group(child.id(), libc::SIGKILL);
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the workflow's graph");
            return None;
        }
    };
    if !out.status.success() {
        // A module that does not load fails its run at once, saying why; the start goes on.
        tracing::info!(file = source_root, why = %String::from_utf8_lossy(&out.stderr).trim(), "the workflow's graph could not be read before its detached start");
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The workflow's snapshot when the host can know it before the run starts: a
/// `.workflow.json` file's `graph`, read as its runtime will (a file that includes others is
/// not known whole, nor is a JavaScript module before it runs in its child): what
/// [`check_detached_start`] reads for its steps and its own model.
pub fn known_definition(source_root: &str) -> Option<serde_json::Value> {
    if !source_root.ends_with(".workflow.json") {
        return None;
    }
    let text = std::fs::read(source_root).ok()?;
    let file: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let includes_others = file
        .get("mounts")
        .and_then(|m| m.as_object())
        .is_some_and(|m| !m.is_empty());
    (!includes_others)
        .then(|| file.get("graph").cloned())
        .flatten()
}

/// One bridge's life ([`run_helper`]): spawned with its stdin open and never written (Pi in
/// RPC mode exits at its end), its handshake when `lock_file` holds its pid, a stop on request,
/// its exit reported.
pub async fn watch_bridge(
    run_id: String,
    launch: u64,
    spec: SpawnSpec,
    lock_file: PathBuf,
    stop: mpsc::UnboundedReceiver<Duration>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
) {
    let report = |r: BridgeReport| {
        let _ = reports.send(StoreMsg::Child(ChildReport::Bridge(r)));
    };
    let handshake = |group| {
        tracing::debug!(%run_id, launch, pid = group, "bridge started");
        let (run_id, lock_file, report) = (&run_id, &lock_file, &report);
        async move {
            let mut poll = tokio::time::interval(HANDSHAKE_POLL);
            loop {
                poll.tick().await;
                // A few bytes of a local file: read in place.
                let holder = std::fs::read_to_string(lock_file).unwrap_or_default();
                if holder_is_ours(holder.trim(), group) {
                    let run_id = run_id.clone();
                    return report(BridgeReport::Hello { run_id, launch });
                }
            }
        }
    };
    let exit = run_helper(spec, HelperStdin::OpenForLife, stop, handshake)
        .await
        .unwrap_or_else(|e| {
            tracing::error!(%run_id, error = %e, "cannot launch the bridge");
            ChildExitRecord {
                reason: format!("launch failed: {e}"),
                stderr_tail: format!("cannot start Pi: {e}").into_bytes(),
                exit_code: Some(crate::engine::bridges::exit_code::PI_FAILED),
                ..Default::default()
            }
        });
    report(BridgeReport::Exited {
        run_id,
        launch,
        exit,
    });
}

/// Whether the pid in a bridge lock (`holder`) is the bridge of process group `group`: the
/// process the host started, or one it started in its group (a `pi` that is a wrapper script).
fn holder_is_ours(holder: &str, group: u32) -> bool {
    let Ok(pid) = holder.parse::<u32>() else {
        return false;
    };
    pid == group
        || supervise::read_proc_stat(pid)
            .is_some_and(|s| !s.is_dead() && u32::try_from(s.pgrp).ok() == Some(group))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> NodeRuntime {
        NodeRuntime {
            node: "/n/bin/node".into(),
            worker: "/pkg/piw/worker.js".into(),
        }
    }

    fn inputs() -> Inputs {
        Inputs {
            provider: Some("mock".into()),
            model: Some("mock-model".into()),
            path: Some("/usr/bin".into()),
            ..Inputs::default()
        }
    }

    #[test]
    fn a_lock_is_the_bridges_when_its_holder_is_in_the_bridges_group() {
        let me = std::process::id();
        let my_group = supervise::read_proc_stat(me)
            .map(|s| s.pgrp)
            .unwrap_or_default();
        let my_group = u32::try_from(my_group).unwrap_or_default();
        assert!(holder_is_ours(&me.to_string(), me));
        assert!(
            holder_is_ours(&me.to_string(), my_group),
            "a member of the group"
        );
        assert!(
            !holder_is_ours(&me.to_string(), u32::MAX - 1),
            "another group"
        );
        assert!(!holder_is_ours("", me));
        assert!(!holder_is_ours("not a pid", me));
    }

    #[test]
    fn off_no_bridges() {
        let mut off = inputs();
        off.off = true;
        assert!(settings(&off, Some(&runtime()), Path::new("/h"), &|_| true).is_none());
    }

    #[test]
    fn pi_is_piw_pi_then_the_packages_then_on_path() {
        let rt = runtime();
        let home = Path::new("/h");
        let nested = "/pkg/piw/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js";
        let mut i = inputs();
        i.pi = Some("/opt/pi/cli.mjs".into());
        let s = settings(&i, Some(&rt), home, &|p| p == Path::new(nested)).expect("settings");
        let pi = s.pi.expect("a pi");
        assert_eq!(
            (pi.program, pi.prefix),
            (rt.node.clone(), vec!["/opt/pi/cli.mjs".to_owned()])
        );
        let s =
            settings(&inputs(), Some(&rt), home, &|p| p == Path::new(nested)).expect("settings");
        assert_eq!(s.pi.expect("a pi").prefix, [nested]);
        assert_eq!(s.extension, PathBuf::from("/pkg/piw/extension/bridge.js"));
        let s = settings(&inputs(), Some(&rt), home, &|p| {
            p == Path::new("/usr/bin/pi")
        })
        .expect("settings");
        let pi = s.pi.expect("a pi");
        assert_eq!(
            (pi.program, pi.prefix),
            (PathBuf::from("/usr/bin/pi"), Vec::new())
        );
        let s = settings(&inputs(), Some(&rt), home, &|_| false).expect("settings");
        assert!(s.pi.unwrap_err().contains("no pi on PATH"));
    }

    #[test]
    fn a_hoisted_package_pi_is_found_beside_piw() {
        let rt = NodeRuntime {
            node: "/n/bin/node".into(),
            worker: "/p/node_modules/piw/worker.js".into(),
        };
        let hoisted = "/p/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js";
        let s = settings(&inputs(), Some(&rt), Path::new("/h"), &|p| {
            p == Path::new(hoisted)
        })
        .expect("settings");
        assert_eq!(s.pi.expect("a pi").prefix, [hoisted]);
    }

    #[test]
    fn pis_default_model_comes_from_its_settings() {
        let mut i = inputs();
        i.pi_settings =
            Some(r#"{"defaultProvider": "anthropic", "defaultModel": "m-1", "theme": "x"}"#.into());
        let s = settings(&i, Some(&runtime()), Path::new("/h"), &|_| true).expect("settings");
        assert_eq!(
            s.pi_default,
            Some(PiDefault {
                provider: "anthropic".into(),
                model: "m-1".into()
            })
        );
        for text in [
            r#"{"defaultProvider": "anthropic"}"#,
            r#"{"defaultProvider": "", "defaultModel": "m"}"#,
            "not json",
        ] {
            i.pi_settings = Some(text.into());
            let s = settings(&i, Some(&runtime()), Path::new("/h"), &|_| true).expect("settings");
            assert_eq!(s.pi_default, None, "{text}");
        }
    }

    #[test]
    fn a_detached_start_without_a_step_for_a_model_needs_none() {
        let compute = serde_json::json!({"name": "w", "start": "a",
            "nodes": {"a": {"kind": "compute"}}, "edges": []});
        let input = serde_json::json!({});
        let check = |definition| {
            check_detached_start(
                None,
                Some(definition),
                &input,
                &[],
                Path::new("/h"),
                Path::new("/"),
            )
        };
        assert_eq!(
            check(&compute),
            Ok(()),
            "nothing to serve: no Pi, no model, not even bridges needed"
        );
        let agent = serde_json::json!({"name": "w", "start": "a",
            "nodes": {"a": {"kind": "agent"}}, "edges": []});
        let refusal = check(&agent).unwrap_err();
        assert_eq!(refusal.code(), crate::protocol::RejectionCode::PiUnusable);
        assert!(
            refusal.message().contains("PIW_DETACHED_BRIDGES=off"),
            "{refusal:?}"
        );
    }

    #[test]
    fn an_explicit_detached_start_needs_a_provider_and_a_model() {
        let mut i = inputs();
        i.provider = None;
        let s = settings(&i, Some(&runtime()), Path::new("/h"), &|_| true);
        let input = serde_json::json!({"task": "x"});
        let why = check_detached_start(
            s.as_ref(),
            None,
            &input,
            &[],
            Path::new("/h"),
            Path::new("/"),
        )
        .unwrap_err()
        .message();
        assert!(why.contains("PIW_DETACHED_PROVIDER"), "{why}");
        assert!(why.contains("Pi has no default model"), "{why}");
    }

    /// Pi's preflight as the driver runs it: its exit and its stderr reach the engine's
    /// verdict; a Node that cannot start is said so.
    #[test]
    fn pis_preflight_runs_with_the_checks_arguments() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let check = |node: &str, script: &str| PiPreflight {
            node: node.into(),
            script: script.into(),
            pi: "/p/pi".into(),
            pi_describe: "PIW_PI=/p/pi".into(),
            provider: "mock".into(),
            model: "m".into(),
        };
        let script = dir.join("preflight.sh");
        // Refuses unless it was given exactly `pi provider model`, saying what it got.
        std::fs::write(
            &script,
            "[ \"$1 $2 $3\" = \"/p/pi mock m\" ] && [ \"$PIW_HOME\" = /h ] || { echo \"got $1 $2 $3\" >&2; exit 1; }\n",
        )
        .unwrap();
        let script = script.display().to_string();
        let run = |check: &PiPreflight| run_pi_preflight(check, &[], Path::new("/h"), &dir);
        assert_eq!(run(&check("/bin/sh", &script)), PiPreflightOutcome::Passed);
        let mut wrong = check("/bin/sh", &script);
        wrong.model = "other".into();
        assert_eq!(
            run(&wrong),
            PiPreflightOutcome::Failed {
                stderr: "got /p/pi mock other\n".into()
            }
        );
        assert!(matches!(
            run(&check("/nonexistent/node", &script)),
            PiPreflightOutcome::NotRun { .. }
        ));
    }
}
