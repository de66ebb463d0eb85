//! The examples of the docs run as written: README.md's C program, built with the link line
//! it documents, and its Python example, each read from the README itself (the fenced block
//! after its heading), so the docs and these tests cannot drift apart.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{build_dir, doc_block, repo_root, run_bounded, run_doc_line, text, Install};

/// `dir/examples` and `dir/target/release`, as in a checkout: the repository's examples and
/// this build.
fn checkout_like(dir: &std::path::Path) {
    std::os::unix::fs::symlink(repo_root().join("examples"), dir.join("examples")).unwrap();
    std::fs::create_dir_all(dir.join("target")).unwrap();
    std::os::unix::fs::symlink(build_dir(), dir.join("target/release")).unwrap();
}

#[test]
fn the_readme_c_program_builds_with_its_documented_line_and_runs() {
    common::built("libpiw.so");
    let install = Install::new();
    let dir = install.path().join("project");
    std::fs::create_dir_all(&dir).unwrap();
    checkout_like(&dir);
    std::fs::write(
        dir.join("my_program.c"),
        doc_block("README.md", "## Use piw from C", "c"),
    )
    .unwrap();
    let commands = doc_block("README.md", "## Use piw from C", "sh");
    let env = common::env_without_host_hint(&install);
    // Every line that builds or runs the program, as written (the cargo build is this one).
    let build = commands
        .lines()
        .find(|l| l.starts_with("cc "))
        .expect("a cc line");
    assert!(build.contains("my_program.c"), "{build}");
    let o = run_doc_line(build, &dir, &env);
    assert!(
        o.status.success(),
        "{build}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let run = commands
        .lines()
        .find(|l| l.starts_with("./my_program"))
        .expect("a line that runs it");
    let (command, expected) = run
        .split_once('#')
        .expect("the run line says what it prints");
    let o = run_doc_line(command, &dir, &env);
    assert!(
        o.status.success(),
        "{command}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert_eq!(text(&o.stdout).trim(), expected.trim());
}

#[test]
fn the_readme_python_example_runs_as_written() {
    let install = Install::new();
    let venv = common::python_venv(&install);
    let dir = install.path().join("project");
    std::fs::create_dir_all(&dir).unwrap();
    checkout_like(&dir);
    let example = doc_block("README.md", "## Use piw from Python", "python");
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg("-c")
        .arg(&example)
        .current_dir(&dir)
        .env_clear()
        .envs(common::env_without_host_hint(&install))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run_bounded(&mut cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}\n{example}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "{'answer': 'go'}\n");
}

/// Every place that states `PIW_HOME`'s default names the one the code uses
/// (`~/.pi/agent/piw`): the README, `examples/run.mjs`, the CLI's help.
#[test]
fn every_doc_names_the_same_piw_home_default() {
    for doc in ["README.md", "examples/run.mjs", "cli/src/cli.rs"] {
        let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
        let stated: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("PIW_HOME") && l.contains("default"))
            .collect();
        for line in &stated {
            if line.contains("~/.pi/agent/") {
                assert!(line.contains("~/.pi/agent/piw"), "{doc}: {line}");
            }
        }
    }
}
