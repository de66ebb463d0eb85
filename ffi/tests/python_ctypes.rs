//! The Python ctypes client in examples/python drives a run to completion through libpiw and
//! reads a typed rejection.

mod common;

use std::process::Command;

use common::{built, repo_root, text, write_timing_out_workflow, Install};

#[test]
fn the_python_ctypes_client_completes_a_run_and_reads_a_typed_rejection() {
    let install = Install::new();
    let root = repo_root();
    let lib = built("libpiw.so");
    let mut cmd = Command::new("python3");
    cmd.arg(root.join("examples/python/piw_client.py"))
        .arg(root.join("examples/hello.workflow.json"))
        .current_dir(install.path());
    let out = install.run(&mut cmd, &[("PIW_LIB", lib.to_str().unwrap())]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "python3 failed: {}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    let field = |word: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(word)?.strip_prefix(' ').map(str::to_owned))
            .collect()
    };
    let seqs: Vec<u64> = field("event")
        .iter()
        .map(|e| e.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "{stdout}"
    );
    assert_eq!(
        field("status"),
        [format!("completed {}", seqs.len())],
        "{stdout}"
    );
    assert_eq!(
        field("result"),
        [r#"{"greeting":"HELLO FROM PIW","loud":true}"#],
        "{stdout}"
    );
    let rejected = field("rejected");
    assert!(
        rejected.len() == 1
            && rejected[0].starts_with("invalid_transition invalid_transition cannot resume run ")
            && rejected[0].ends_with("the run is completed"),
        "{stdout}"
    );
}

/// A run that ends `timed_out` ends the client's wait too (it used to keep its own list of final
/// states, without `timed_out`, and waited for ever).
#[test]
fn the_python_ctypes_client_ends_on_a_run_that_timed_out() {
    let install = Install::new();
    let workflow = write_timing_out_workflow(install.path());
    let mut cmd = Command::new("python3");
    cmd.arg(repo_root().join("examples/python/piw_client.py"))
        .arg(&workflow)
        .current_dir(install.path());
    let lib = built("libpiw.so");
    let out = install.run(&mut cmd, &[("PIW_LIB", lib.to_str().unwrap())]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "python3 failed: {}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("status timed_out ")),
        "{stdout}"
    );
}
