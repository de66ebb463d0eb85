//! The Python package (ffi/python): built as a wheel, installed with pip into a fresh virtual
//! environment (nothing from the network), it drives a real host with the host binary it
//! carries (no PIW_HOST_BIN): start, follow, answer, submit, decide, wait, typed errors.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{repo_root, run_bounded, text, Install};

#[test]
fn the_wheel_installs_into_a_fresh_venv_and_drives_a_real_host() {
    let install = Install::new();
    let venv = common::python_venv(&install);

    let workflow = install.path().join("flow.workflow.json");
    std::fs::write(
        &workflow,
        serde_json::json!({
            "graph": {"name": "flow", "start": "ask",
                      "nodes": {"ask": {"kind": "checkpoint"}, "step": {"kind": "agent"},
                                "approve": {"kind": "human_decision"}, "done": {"kind": "compute"}},
                      "edges": [{"from": "ask", "to": "step"}, {"from": "step", "to": "approve"},
                                {"from": "approve", "to": "done"}]},
            "behaviors": {
                "ask": {"wait": "checkpoint"},
                "step": {"interact": "agent", "validate": {"value": 42}},
                "approve": {"wait": "human_decision",
                            "request": {"choices": [{"id": "approve"}, {"id": "reject"}]}},
                "done": {"return": {"finished": true}}
            }
        })
        .to_string(),
    )
    .unwrap();
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg(repo_root().join("ffi/python/tests/drive.py"))
        .arg(&workflow)
        .current_dir(install.path())
        .env_clear()
        .envs(common::env_without_host_hint(&install))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run_bounded(&mut cmd, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(stdout, "{\"finished\": true}\nok\n");
}
