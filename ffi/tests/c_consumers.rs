//! The C consumers in examples/c (a client and a workflow child), compiled with the system
//! `cc` against this build's libpiw, driving a real host; also under AddressSanitizer.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{compile_c, repo_root, text, write_timing_out_workflow, Install};

fn example(name: &str) -> PathBuf {
    repo_root().join("examples/c").join(name)
}

/// Compiles the client and the child into the installation's bin/ (`extra` sources and flags
/// for both).
fn build_programs(
    install: &Install,
    extra_sources: &[PathBuf],
    flags: &[&str],
) -> (PathBuf, PathBuf) {
    let bin = install.path().join("bin");
    let client = bin.join("piw-c-client");
    let child = bin.join("piw-c-child");
    let with = |main: &str| {
        let mut sources = vec![example(main)];
        sources.extend_from_slice(extra_sources);
        sources
    };
    compile_c(&with("client.c"), &client, flags);
    compile_c(&with("child.c"), &child, flags);
    (client, child)
}

/// Runs the C client on `workflow` with `input`; the host it starts serves `.workflow.c-demo`
/// with the C child.
fn run_client(
    install: &Install,
    client: &Path,
    child: &Path,
    workflow: &Path,
    input: &str,
    answer: Option<&str>,
) -> (String, String) {
    let runtimes = format!(".workflow.c-demo={}", child.display());
    let mut cmd = Command::new(client);
    cmd.arg(workflow)
        .arg(input)
        .args(answer)
        .current_dir(workflow.parent().unwrap());
    let out = install.run(&mut cmd, &[("PIW_RUNTIMES", &runtimes)]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "client failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The client's lines that start with `word`, without it.
fn lines<'a>(stdout: &'a str, word: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(word).and_then(|r| r.strip_prefix(' ')))
        .collect()
}

/// What a good run of the words workflow prints, checked line by line.
fn assert_completed_words_run(stdout: &str) {
    let events: Vec<Vec<&str>> = lines(stdout, "event")
        .into_iter()
        .map(|l| l.split(' ').collect())
        .collect();
    // Every event of the run, in order: sequence numbers 1, 2, 3, ... without a gap.
    let seqs: Vec<u64> = events.iter().map(|e| e[0].parse().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "{stdout}"
    );
    let kinds: Vec<&str> = events.iter().map(|e| e[1]).collect();
    for kind in [
        "started",
        "node_started",
        "transitioned",
        "effect_reserved",
        "effect_applying",
        "effect_settled",
        "notified",
        "completed",
    ] {
        assert!(kinds.contains(&kind), "no {kind} event: {stdout}");
    }
    assert_eq!(kinds.last(), Some(&"completed"), "{stdout}");
    // The last event is the run's last revision: none is missing at the end either.
    let status = lines(stdout, "status");
    assert_eq!(
        status,
        [format!("completed {}", seqs.len()).as_str()],
        "{stdout}"
    );
    assert_eq!(
        lines(stdout, "result"),
        [r#"{"summary":"4 words"}"#],
        "{stdout}"
    );
    // The typed rejection: its code string, the enum value (PIW_REJECTION_CODE_INVALID_TRANSITION
    // is 6) and the host's message.
    let rejected = lines(stdout, "rejected");
    assert_eq!(rejected.len(), 1, "{stdout}");
    assert!(
        rejected[0].starts_with("invalid_transition 6 cannot resume run ")
            && rejected[0].ends_with("the run is completed"),
        "{stdout}"
    );
}

#[test]
fn the_c_client_and_the_c_child_complete_a_run_and_see_every_event_in_order() {
    let install = Install::new();
    let (client, child) = build_programs(&install, &[], &[]);
    let (stdout, _) = run_client(
        &install,
        &client,
        &child,
        &example("words.workflow.c-demo"),
        r#"{"text":"hello brave new world"}"#,
        None,
    );
    assert_completed_words_run(&stdout);
}

#[test]
fn a_node_the_c_child_does_not_implement_fails_the_run_with_its_reason() {
    let install = Install::new();
    let (client, child) = build_programs(&install, &[], &[]);
    let workflow = install.path().join("mystery.workflow.c-demo");
    std::fs::write(
        &workflow,
        r#"{"graph":{"name":"mystery","start":"count","nodes":{"count":{"kind":"compute"},"mystery":{"kind":"compute"}},"edges":[{"from":"count","to":"mystery"}]}}"#,
    )
    .unwrap();
    let (stdout, _) = run_client(
        &install,
        &client,
        &child,
        &workflow,
        r#"{"text":"a b"}"#,
        None,
    );
    assert_eq!(
        lines(&stdout, "event")
            .last()
            .map(|e| e.ends_with(" failed")),
        Some(true),
        "{stdout}"
    );
    assert!(
        lines(&stdout, "status")[0].starts_with("failed "),
        "{stdout}"
    );
    let last = lines(&stdout, "final");
    assert!(
        last.len() == 1 && last[0].contains("no C implementation for this node"),
        "the run's error names the reason: {stdout}"
    );
}

#[test]
fn the_c_client_ends_on_a_run_that_timed_out() {
    let install = Install::new();
    let (client, child) = build_programs(&install, &[], &[]);
    let workflow = write_timing_out_workflow(install.path());
    let (stdout, _) = run_client(&install, &client, &child, &workflow, "{}", None);
    assert_eq!(lines(&stdout, "final").len(), 1, "{stdout}");
    assert!(
        lines(&stdout, "status")[0].starts_with("timed_out "),
        "{stdout}"
    );
}

#[test]
fn the_c_child_waits_on_a_checkpoint_and_continues_with_the_answer() {
    let install = Install::new();
    let (client, child) = build_programs(&install, &[], &[]);
    let runtimes = format!(".workflow.c-demo={}", child.display());
    let workflow = example("approve.workflow.c-demo");
    let mut cmd = Command::new(&client);
    cmd.arg(&workflow)
        .arg(r#"{"text":"one two three"}"#)
        .arg(r#"{"ok":"sure"}"#)
        .current_dir(workflow.parent().unwrap());
    let out = install.run(&mut cmd, &[("PIW_RUNTIMES", &runtimes)]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let kinds: Vec<&str> = lines(&stdout, "event")
        .iter()
        .map(|e| e.split(' ').nth(1).unwrap())
        .collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k}: {stdout}"))
    };
    assert!(
        at("progress") < at("waiting") && at("waiting") < at("decision_answered"),
        "{stdout}"
    );
    assert_eq!(lines(&stdout, "answered"), ["checkpoint"], "{stdout}");
    assert_eq!(
        lines(&stdout, "result"),
        [r#"{"summary":"3 words"}"#],
        "{stdout}"
    );
    // The checkpoint node's output carries the answer, as the continuing child reported it.
    let run_id = lines(&stdout, "run")[0];
    let status = Command::new(common::built("piw"))
        .args(["run", "status", "--json", run_id])
        .envs(install.env())
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let approve = status["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["node_id"] == "approve" && a["status"] == "ok")
        .unwrap_or_else(|| panic!("no ok approve attempt: {status}"));
    assert_eq!(
        approve["output"]["answer"],
        serde_json::json!({"ok": "sure"})
    );
    assert_eq!(approve["output"]["input"]["words"], 3);
}

/// Runs the ask workflow: its agent step's first submission is rejected by the C child's
/// validation, the client's second one is accepted and the run completes with it.
fn run_ask_workflow(install: &Install, client: &Path, child: &Path) -> String {
    let (stdout, _) = run_client(
        install,
        client,
        child,
        &example("ask.workflow.c-demo"),
        "null",
        Some(r#"{"words":"no text"}"#),
    );
    let kinds: Vec<&str> = lines(&stdout, "event")
        .iter()
        .map(|e| e.split(' ').nth(1).unwrap())
        .collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k}: {stdout}"))
    };
    assert!(
        at("interaction_requested") < at("submission_rejected")
            && at("submission_rejected") < at("submission_accepted"),
        "{stdout}"
    );
    assert_eq!(
        lines(&stdout, "submission_rejected"),
        [r#"the result needs a "text" field"#],
        "{stdout}"
    );
    assert_eq!(lines(&stdout, "submitted"), ["agent", "agent"], "{stdout}");
    assert_eq!(
        lines(&stdout, "result"),
        [r#"{"summary":"3 words"}"#],
        "{stdout}"
    );
    stdout
}

#[test]
fn the_c_child_requests_an_interaction_and_validates_the_submissions() {
    let install = Install::new();
    let (client, child) = build_programs(&install, &[], &[]);
    run_ask_workflow(&install, &client, &child);
}

/// AddressSanitizer's reports go to files under `dir` (the child's stderr belongs to the
/// host); returns the C file that says so, compiled into both programs.
fn asan_options(dir: &Path) -> PathBuf {
    let file = dir.join("asan_options.c");
    std::fs::write(
        &file,
        format!(
            "const char *__asan_default_options(void);\n\
             const char *__asan_default_options(void) {{ return \"log_path={}/report:detect_leaks=1:abort_on_error=0\"; }}\n",
            dir.display()
        ),
    )
    .unwrap();
    file
}

fn reports(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            e.file_name()
                .to_str()?
                .starts_with("report")
                .then(|| std::fs::read_to_string(e.path()).unwrap_or_default())
        })
        .collect()
}

#[test]
fn under_address_sanitizer_the_c_programs_leak_nothing_and_touch_nothing_invalid() {
    let install = Install::new();
    let asan_dir = install.path().join("asan");
    std::fs::create_dir_all(&asan_dir).unwrap();
    let options = asan_options(&asan_dir);
    let flags = ["-fsanitize=address", "-fno-omit-frame-pointer"];

    // The check can fail: a program that leaks, built the same way, leaves a report.
    let leaky_src = install.path().join("leaky.c");
    std::fs::write(
        &leaky_src,
        "#include <stdlib.h>\n#include \"piw.h\"\nint main(void) { char *s = NULL; \
         piw_json_pointer(\"{\\\"a\\\":\\\"b\\\"}\", \"/a\", &s); s = NULL; return s != NULL; }\n",
    )
    .unwrap();
    let leaky = install.path().join("bin/leaky");
    compile_c(&[leaky_src, options.clone()], &leaky, &flags);
    let _ = install.run(&mut Command::new(&leaky), &[]);
    let found = reports(&asan_dir);
    assert!(
        found
            .iter()
            .any(|r| r.contains("LeakSanitizer: detected memory leaks")),
        "a leaked piw string is reported: {found:?}"
    );
    for r in std::fs::read_dir(&asan_dir).unwrap() {
        let r = r.unwrap();
        if r.file_name().to_str().unwrap().starts_with("report") {
            std::fs::remove_file(r.path()).unwrap();
        }
    }

    let (client, child) = build_programs(&install, &[options], &flags);
    let (stdout, _) = run_client(
        &install,
        &client,
        &child,
        &example("words.workflow.c-demo"),
        r#"{"text":"hello brave new world"}"#,
        None,
    );
    assert_completed_words_run(&stdout);
    wait_for_last_child_exit(&install, lines(&stdout, "run")[0]);
    // More of the worker surface under ASan: an interactive request, a rejected and an
    // accepted submission, three children.
    let stdout = run_ask_workflow(&install, &client, &child);
    wait_for_last_child_exit(&install, lines(&stdout, "run")[0]);
    let found = reports(&asan_dir);
    assert!(found.is_empty(), "AddressSanitizer reports: {found:#?}");
}

/// A child checks for leaks as it exits, after its last report: waits (bounded by a deadline
/// only a hang reaches) for the host to record the run's last child's exit, and checks it was
/// clean (a leak or invalid access makes it exit non-zero).
fn wait_for_last_child_exit(install: &Install, run_id: &str) {
    let started = std::time::Instant::now();
    let child_exit = loop {
        let out = Command::new(common::built("piw"))
            .args(["run", "status", "--json", run_id])
            .envs(install.env())
            .output()
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if status["last_child"]["exited"] == true {
            break status["last_child"].clone();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the child never exited: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(
        child_exit["exit_code"], 0,
        "the child under ASan: {child_exit}"
    );
}

/// The C client, which ends with `piw_shutdown`, leaves nothing valgrind reports (no definite
/// or possible leak, no invalid access), also when it started the host itself (the thread that
/// waits for that host ends with the library). The check can fail: without `piw_shutdown` the
/// library's I/O thread is still running at exit and its memory is reported as possibly lost.
#[test]
fn under_valgrind_the_c_client_ends_with_nothing_reported() {
    assert!(
        Command::new("valgrind").arg("--version").output().is_ok(),
        "valgrind is not installed (scripts/test-all installs it)"
    );
    let install = Install::new();
    let (client, child) = build_programs(&install, &[], &[]);
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "-q",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,possible",
        "--error-exitcode=9",
    ])
    .arg(&client)
    .arg(repo_root().join("examples/hello.workflow.json"));
    cmd.current_dir(install.path());
    let runtimes = format!(".workflow.c-demo={}", child.display());
    let out = install.run(&mut cmd, &[("PIW_RUNTIMES", &runtimes)]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "valgrind reported: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        lines(&stdout, "status")[0].starts_with("completed "),
        "{stdout}"
    );
}
