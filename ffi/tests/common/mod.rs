//! What the ffi tests share: the binaries of this cargo build, a temporary installation whose
//! processes are gone when the test ends, and compiling C programs with the system `cc`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>`: where cargo put this test, `piw`, `piw-json-worker` and `libpiw`.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test>
    exe.parent().unwrap().parent().unwrap().to_owned()
}

/// A binary or library of this build; fails with how to build it when it is missing.
pub fn built(name: &str) -> PathBuf {
    let path = build_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`, as \
         `scripts/test-all` does: `cargo test` alone builds no cdylib)",
        path.display()
    );
    path
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// A temporary installation: its own HOME, PIW_HOME and TMPDIR. Every process that carries
/// its PIW_HOME (host, children) is killed when it is dropped, pass or fail.
pub struct Install {
    pub dir: tempfile::TempDir,
}

impl Install {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("piw-ffi")
            .tempdir()
            .unwrap();
        for sub in ["home", "tmp", "bin"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Install { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn piw_home(&self) -> PathBuf {
        self.path().join("piw")
    }

    /// The environment a program of the test runs with.
    pub fn env(&self) -> Vec<(String, String)> {
        let p = |s: &str| self.path().join(s).display().to_string();
        vec![
            ("HOME".into(), p("home")),
            ("TMPDIR".into(), p("tmp")),
            ("PIW_HOME".into(), self.piw_home().display().to_string()),
            ("PI_CODING_AGENT_DIR".into(), p("home/.pi/agent")),
            ("PIW_HOST_BIN".into(), built("piw").display().to_string()),
            ("PIW_LOG".into(), "warn".into()),
        ]
    }

    /// Runs `cmd` in this installation's environment (plus `extra`), bounded by a deadline
    /// only a hang reaches.
    pub fn run(&self, cmd: &mut Command, extra: &[(&str, &str)]) -> Output {
        cmd.envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        run_bounded(cmd, Duration::from_secs(120))
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        let _ = Command::new(build_dir().join("piw"))
            .args(["host", "stop"])
            .envs(self.env())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        kill_installation(&self.piw_home());
    }
}

/// Runs `cmd` to its end; kills it and fails the test after `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    // Drain the pipes on threads so a chatty program cannot block on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut b).ok();
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut b).ok();
        b
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Kills every live process whose environment holds `PIW_HOME=<home>` (host, children).
pub fn kill_installation(home: &Path) {
    let entry = format!("PIW_HOME={}", home.display()).into_bytes();
    let me = std::process::id() as i32;
    for _ in 0..100 {
        let pids: Vec<i32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&pid| pid != me)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == entry))
            })
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: a plain system call on a pid that carries this test's installation.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Compiles C `sources` against include/piw.h and this build's libpiw with the system `cc`.
pub fn compile_c(sources: &[PathBuf], out: &Path, extra_flags: &[&str]) {
    let lib_dir = build_dir();
    built("libpiw.so");
    let status = Command::new("cc")
        .args([
            "-std=c11",
            "-D_DEFAULT_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
        ])
        .args(extra_flags)
        .arg("-I")
        .arg(repo_root().join("include"))
        .args(sources)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lpiw")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-o")
        .arg(out)
        .status()
        .expect("the system C compiler `cc` runs");
    assert!(status.success(), "cc failed for {sources:?}");
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A workflow whose first node never finishes and has a deadline: the host times it out, and
/// with no route for `timed_out` the run ends `timed_out`.
pub fn write_timing_out_workflow(dir: &Path) -> PathBuf {
    let workflow = dir.join("late.workflow.json");
    let never = dir.join("never-created");
    std::fs::write(
        &workflow,
        serde_json::json!({
            "graph": {
                "name": "late",
                "start": "slow",
                "nodes": { "slow": { "kind": "compute", "timeout_ms": 1000 } },
                "edges": []
            },
            "behaviors": { "slow": { "wait_for_file": never } }
        })
        .to_string(),
    )
    .unwrap();
    workflow
}

/// The first fenced code block of `lang` (```` ```lang ````) after the line `heading` of the
/// Markdown file `doc` (relative to the repository): the docs' examples, read by the tests that
/// run them, so the two cannot drift apart.
pub fn doc_block(doc: &str, heading: &str, lang: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
    let mut lines = text
        .lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .skip_while(|l| l.trim_end() != format!("```{lang}"))
        .skip(1);
    let mut block = String::new();
    for line in lines.by_ref() {
        if line.trim_end() == "```" {
            return block;
        }
        block.push_str(line);
        block.push('\n');
    }
    panic!("{doc} has no ```{lang} block after {heading:?}");
}

/// The lines of `doc`'s section under the line `heading` (up to the next heading) that are
/// indented four spaces (commands the docs show), without the indentation.
pub fn doc_lines(doc: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
    let lines: Vec<String> = text
        .lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("    "))
        .map(str::to_owned)
        .collect();
    assert!(!lines.is_empty(), "{doc} has no commands under {heading:?}");
    lines
}

/// Runs `line` with `sh -c` in `dir` with `env` (and nothing else), bounded; its output.
pub fn run_doc_line(line: &str, dir: &Path, env: &[(String, String)]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(line)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run_bounded(&mut cmd, Duration::from_secs(120))
}

/// Builds the Python wheel from this build (`scripts/build-python-wheel`) and installs it with
/// pip into a fresh virtual environment in `install` (nothing from the network); returns the
/// environment's directory.
pub fn python_venv(install: &Install) -> PathBuf {
    let wheels = install.path().join("wheels");
    let built = Command::new(repo_root().join("scripts/build-python-wheel"))
        .arg(&wheels)
        .env("PIW_WHEEL_FROM", build_dir())
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built.stderr));
    let wheel = text(&built.stdout).trim().to_owned();
    assert!(wheel.ends_with(".whl"), "{wheel}");

    let venv = install.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let pip = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
        ])
        .arg(&wheel)
        .env("HOME", install.path().join("home"))
        .output()
        .unwrap();
    assert!(pip.status.success(), "{}", text(&pip.stderr));
    venv
}

/// The installation's environment without `PIW_HOST_BIN` and with a `PATH` that has no `piw`:
/// a program finds the host only as a user's would, by the library's own lookup.
pub fn env_without_host_hint(install: &Install) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = install
        .env()
        .into_iter()
        .filter(|(k, _)| k != "PIW_HOST_BIN")
        .collect();
    env.push(("PATH".into(), "/usr/bin:/bin".into()));
    env
}
