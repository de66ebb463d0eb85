//! `piw_host::supervise` against real processes: `/bin/sh -c` scripts as children.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use piw_host::supervise::{
    self, group_alive, kill_orphan_group, kill_orphan_groups, process_start_time, read_proc_stat,
    ChildLimits, OrphanOutcome, RecordedProcess, SpawnSpec, StopOutcome, SuperviseError,
};

/// A spec running `script` with `/bin/sh -c` in the temp dir.
fn sh(script: &str) -> SpawnSpec {
    SpawnSpec::new("/bin/sh", std::env::temp_dir())
        .arg("-c")
        .arg(script)
}

/// Whether `pid` no longer runs: absent from /proc, or a zombie. (Descendants killed after
/// their parent are re-parented to pid 1, which in some containers never reaps them.)
fn dead(pid: u32) -> bool {
    read_proc_stat(pid).is_none_or(|s| s.is_dead())
}

/// Polls `cond` for up to `within`.
fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `path` to hold a pid written by a child.
fn read_pid_file(path: &Path) -> u32 {
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(60), || {
            pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        }),
        "no pid in {}",
        path.display()
    );
    pid.unwrap_or_default()
}

fn python() -> PathBuf {
    let system = PathBuf::from("/usr/bin/python3");
    if system.exists() {
        system
    } else {
        PathBuf::from("python3")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_prints_and_exits_3() {
    let mut child = supervise::spawn(sh("echo out; echo err >&2; exit 3"))
        .await
        .expect("spawn");
    assert_eq!(child.pgid(), child.pid());
    assert_eq!(process_start_time(child.pid()), Some(child.start_time()));
    let exit = child.wait().await;
    assert_eq!(exit.code, Some(3));
    assert_eq!(exit.signal, None);
    assert!(!exit.success());
    assert_eq!(exit.stdout_tail, b"out\n");
    assert_eq!(exit.stderr_tail, b"err\n");
    assert_eq!((exit.stdout_total, exit.stderr_total), (4, 4));
    assert!(exit.drain_complete);
    // Later calls give the same answer at once.
    assert_eq!(child.wait().await, exit);
    assert_eq!(child.try_exit(), Some(&exit));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdin_payload_arrives_and_stdin_is_closed() {
    let mut child = supervise::spawn(sh("cat").stdin_payload(&b"launch envelope\n"[..]))
        .await
        .expect("spawn");
    let exit = child.wait().await;
    assert!(exit.success(), "{exit:?}");
    assert_eq!(exit.stdout_tail, b"launch envelope\n");

    // Larger than a pipe buffer, with a tail smaller than the output.
    let payload: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
    let mut child = supervise::spawn(sh("cat").stdin_payload(payload.clone()).tail_bytes(1000))
        .await
        .expect("spawn");
    let exit = child.wait().await;
    assert!(exit.success(), "{exit:?}");
    assert_eq!(exit.stdout_total, payload.len() as u64);
    assert_eq!(exit.stdout_tail, payload[payload.len() - 1000..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_ignores_its_stdin_does_not_hang_the_feed() {
    let payload = vec![b'x'; 4 << 20];
    let mut child = supervise::spawn(sh("echo done").stdin_payload(payload))
        .await
        .expect("spawn");
    let exit = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("exit reported");
    assert!(exit.success());
    assert_eq!(exit.stdout_tail, b"done\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_is_clean_plus_the_given_variables() {
    std::env::var_os("PATH").expect("the test has a PATH");
    let mut child = supervise::spawn(sh("env").env("PIW_TEST_VAR", "hello"))
        .await
        .expect("spawn");
    let exit = child.wait().await;
    let out = String::from_utf8_lossy(&exit.stdout_tail).into_owned();
    let names: Vec<&str> = out.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(out.lines().any(|l| l == "PIW_TEST_VAR=hello"), "{out}");
    assert!(names.contains(&"PATH"), "{out}");
    // The marker that lets a stop find descendants whose parent chain broke.
    let marker = format!("{}=/{}.", supervise::MARKER_VAR, std::process::id());
    assert!(out.lines().any(|l| l.starts_with(&marker)), "{out}");
    for name in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TMPDIR",
                "PIW_TEST_VAR",
                supervise::MARKER_VAR,
                "PWD",
                "SHLVL",
                "_"
            ]
            .contains(name),
            "unexpected variable {name} in {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_kills_the_whole_group_including_a_grandchild_that_ignores_term() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("grandchild.pid");
    let script = format!(
        "trap '' TERM; sh -c 'trap \"\" TERM; sleep 1000' & echo $! > {}; echo started; wait",
        pid_file.display()
    );
    let mut child = supervise::spawn(sh(&script)).await.expect("spawn");
    let grandchild = read_pid_file(&pid_file);
    assert_eq!(
        read_proc_stat(grandchild).map(|s| s.pgrp),
        Some(child.pgid() as i32),
        "the grandchild is in the child's group"
    );

    let started = Instant::now();
    let outcome = child.stop(Duration::from_millis(300)).await;
    let took = started.elapsed();
    assert_eq!(outcome, StopOutcome::Killed);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    // Killed after the grace, not left to the sleeper's 1,000 s: a bound a loaded machine
    // cannot miss.
    assert!(took < Duration::from_secs(120), "{took:?}");
    assert!(!group_alive(child.pgid()));
    assert!(!child.group_alive());
    assert!(dead(grandchild), "grandchild {grandchild} survived");

    let exit = child.wait().await;
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    assert_eq!(exit.stdout_tail, b"started\n");
    assert_eq!(
        child.stop(Duration::from_millis(300)).await,
        StopOutcome::AlreadyGone
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polite_child_is_terminated_within_the_grace() {
    let mut child = supervise::spawn(sh("sleep 1000")).await.expect("spawn");
    // A grace far longer than the test's own bound: a stop that waited out the grace instead
    // of returning when the child exited would time out here, however fast the machine.
    let outcome = tokio::time::timeout(
        Duration::from_secs(120),
        child.stop(Duration::from_secs(3600)),
    )
    .await
    .expect("stop returns once the child exits, not after the grace");
    assert_eq!(outcome, StopOutcome::Terminated);
    let exit = child.wait().await;
    assert_eq!(exit.signal, Some(libc::SIGTERM));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descendant_holding_the_pipes_delays_the_report_only_briefly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("sleeper.pid");
    let script = format!(
        "sleep 1000 & echo $! > {}; echo bye; exit 0",
        pid_file.display()
    );
    let mut child = supervise::spawn(sh(&script)).await.expect("spawn");
    // Reported long before the sleeper's 1,000 s end, which still holds the pipes.
    let exit = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("exit reported");
    assert!(exit.success());
    assert!(!exit.drain_complete, "the sleeper still holds stdout");
    assert_eq!(exit.stdout_tail, b"bye\n");

    // The leader is gone but the group is not: stop still reaches the sleeper.
    let sleeper = read_pid_file(&pid_file);
    assert!(child.group_alive());
    assert_eq!(
        child.stop(Duration::from_secs(5)).await,
        StopOutcome::Terminated
    );
    assert!(dead(sleeper));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_can_be_selected_on_while_stopping_from_elsewhere() {
    let mut child = supervise::spawn(sh("trap 'exit 7' TERM; sleep 1000 & wait"))
        .await
        .expect("spawn");
    let killer = child.killer();
    let deadline = tokio::time::sleep(Duration::from_millis(100));
    tokio::pin!(deadline);
    let mut stopped = false;
    let exit = loop {
        tokio::select! {
            exit = child.wait() => break exit,
            _ = &mut deadline, if !stopped => {
                stopped = true;
                killer.terminate(Duration::from_secs(5));
            }
        }
    };
    assert!(stopped);
    assert_eq!(exit.code, Some(7));
    // The handler can use the handle itself too: the wait future is gone by then.
    let mut child = supervise::spawn(sh("sleep 1000")).await.expect("spawn");
    tokio::select! {
        _ = child.wait() => panic!("sleep exited early"),
        _ = tokio::time::sleep(Duration::from_millis(50)) => {
            assert_eq!(child.stop(Duration::from_secs(5)).await, StopOutcome::Terminated);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_kills_the_group_and_reaps_the_leader() {
    let child = supervise::spawn(sh("sleep 1000 & wait"))
        .await
        .expect("spawn");
    let pid = child.pid();
    drop(child);
    assert!(eventually(Duration::from_secs(60), || !group_alive(pid)));
    // The leader is reaped by the supervisor, not left as a zombie.
    assert!(eventually(Duration::from_secs(60), || read_proc_stat(pid)
        .is_none_or(|s| s.ppid != std::process::id() as i32)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_makes_a_large_allocation_fail() {
    let py = python();
    let alloc = "bytearray(256*1024*1024); print('allocated')";
    let limited = SpawnSpec::new(&py, std::env::temp_dir())
        .arg("-c")
        .arg(alloc)
        .limits(ChildLimits {
            memory_bytes: Some(64 << 20),
            cpu_seconds: None,
        });
    let exit = supervise::spawn(limited).await.expect("spawn").wait().await;
    assert!(!exit.success(), "{exit:?}");
    assert!(
        String::from_utf8_lossy(&exit.stderr_tail).contains("MemoryError"),
        "{exit:?}"
    );
    // The same allocation without the limit works, so the limit is what stopped it.
    let free = SpawnSpec::new(&py, std::env::temp_dir())
        .arg("-c")
        .arg(alloc);
    let exit = supervise::spawn(free).await.expect("spawn").wait().await;
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_dumps_are_always_off() {
    let exit = supervise::spawn(sh("ulimit -c"))
        .await
        .expect("spawn")
        .wait()
        .await;
    assert_eq!(exit.stdout_tail, b"0\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_limit_kills_a_busy_loop() {
    let spec = sh("while :; do :; done").limits(ChildLimits {
        cpu_seconds: Some(1),
        memory_bytes: None,
    });
    let started = Instant::now();
    let mut child = supervise::spawn(spec).await.expect("spawn");
    let exit = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("the busy loop was stopped by its CPU limit");
    assert!(
        matches!(exit.signal, Some(libc::SIGXCPU) | Some(libc::SIGKILL)),
        "{exit:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_a_spawn_error_naming_the_path() {
    let err = supervise::spawn(SpawnSpec::new(
        "/nonexistent/piw-worker",
        std::env::temp_dir(),
    ))
    .await
    .expect_err("must fail");
    assert!(
        matches!(&err, SuperviseError::Spawn { program, source }
            if program == Path::new("/nonexistent/piw-worker")
                && source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("/nonexistent/piw-worker"), "{message}");

    let err = supervise::spawn(SpawnSpec::new("/bin/sh", "/nonexistent/dir"))
        .await
        .expect_err("must fail");
    assert!(matches!(err, SuperviseError::Cwd { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/dir"), "{err}");
}

/// A child process that is killed and reaped when dropped, so a failing assertion cannot
/// leave it behind (holding the test harness's output pipe).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sleep 1000` leading its own group, as an earlier host would have left it.
fn detached_sleep() -> Reaped {
    Reaped(
        std::process::Command::new("sleep")
            .arg("1000")
            .process_group(0)
            .spawn()
            .expect("spawn sleep"),
    )
}

#[test]
fn kill_orphan_group_kills_the_recorded_process() {
    let mut orphan = detached_sleep();
    let pid = orphan.0.id();
    let start = process_start_time(pid).expect("start time");
    assert_eq!(
        kill_orphan_group(pid, start, Duration::from_millis(500)),
        OrphanOutcome::Killed
    );
    assert!(dead(pid));
    let status = orphan.0.wait().expect("reap");
    assert!(!status.success());
    assert!(read_proc_stat(pid).is_none(), "gone from /proc once reaped");
    assert_eq!(
        kill_orphan_group(pid, start, Duration::from_millis(500)),
        OrphanOutcome::Gone
    );
}

/// A shell leading its own group that runs `on_term` when it gets SIGTERM, and touches
/// `ready` once its trap is set.
fn detached_shell(on_term: &str, ready: &Path) -> Reaped {
    let script = format!(
        "trap '{on_term}' TERM; touch '{}'; while :; do sleep 0.05; done",
        ready.display()
    );
    Reaped(
        std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .process_group(0)
            .spawn()
            .expect("spawn sh"),
    )
}

/// Every orphan gets its SIGTERM before any of them is waited for, so a host that died with
/// many runs active restarts within one grace, not one grace per child in turn. The first
/// orphan finishes its SIGTERM handling only once the second has received its own: one at a
/// time, the first would use up its grace and be SIGKILLed before the second was signalled.
#[test]
fn kill_orphan_groups_signals_every_group_before_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let first = detached_shell(
        &format!(
            "while [ ! -e {b} ]; do sleep 0.01; done; touch {done}; exit 0",
            b = path("second-termed").display(),
            done = path("first-done").display()
        ),
        &path("first-ready"),
    );
    let second = detached_shell(
        &format!("touch {}; exit 0", path("second-termed").display()),
        &path("second-ready"),
    );
    assert!(eventually(Duration::from_secs(60), || {
        path("first-ready").exists() && path("second-ready").exists()
    }));
    let recorded: Vec<RecordedProcess> = [&first, &second]
        .iter()
        .map(|p| RecordedProcess {
            pid: p.0.id(),
            start_time: process_start_time(p.0.id()).expect("start time"),
        })
        .collect();
    assert_eq!(
        kill_orphan_groups(&recorded, Duration::from_secs(10)),
        vec![OrphanOutcome::Killed, OrphanOutcome::Killed]
    );
    assert!(
        path("first-done").exists(),
        "the first orphan was killed before the second was signalled"
    );
    assert!(dead(recorded[0].pid) && dead(recorded[1].pid));
}

#[test]
fn kill_orphan_group_leaves_a_reused_pid_alone() {
    let mut other = detached_sleep();
    let pid = other.0.id();
    let start = process_start_time(pid).expect("start time");
    assert_eq!(
        kill_orphan_group(pid, start + 1, Duration::from_millis(100)),
        OrphanOutcome::PidReused
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !dead(pid),
        "a process with another start time was signalled"
    );
    assert!(other.0.try_wait().expect("try_wait").is_none());
}

#[test]
fn kill_orphan_group_of_a_missing_pid_is_gone() {
    // pid_max is at most 2^22; this pid cannot exist.
    assert_eq!(
        kill_orphan_group(u32::MAX / 2, 1, Duration::from_millis(100)),
        OrphanOutcome::Gone
    );
    assert_eq!(process_start_time(u32::MAX / 2), None);
}

#[test]
fn process_start_time_reads_a_comm_with_parentheses_and_spaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let odd = dir.path().join("a) (b c");
    std::fs::copy("/bin/sleep", &odd).expect("copy sleep");
    let child = Reaped(
        std::process::Command::new(&odd)
            .arg("1000")
            .spawn()
            .expect("spawn odd sleep"),
    );
    let pid = child.0.id();
    // spawn may return just before exec renames the process.
    let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(60), || comm().trim_end() == "a) (b c"),
        "comm is {:?}",
        comm()
    );
    let stat = read_proc_stat(pid).expect("stat parses");
    assert_eq!(stat.ppid, std::process::id() as i32);
    assert_eq!(
        stat.pgrp,
        read_proc_stat(std::process::id()).expect("own").pgrp
    );
    assert_eq!(process_start_time(pid), Some(stat.start_time));
    let own_start = process_start_time(std::process::id()).expect("own start");
    assert!(stat.start_time >= own_start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_runs_at_a_lower_cpu_priority_than_the_host() {
    // SAFETY: a plain syscall on this process.
    let own = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    // The priority is lowered right after the spawn: give it a moment before reading it.
    let exit = supervise::spawn(sh("sleep 0.3; nice").nice(3))
        .await
        .expect("spawn")
        .wait()
        .await;
    let shown = String::from_utf8_lossy(&exit.stdout_tail).trim().to_owned();
    assert_eq!(shown, (own + 3).min(19).to_string(), "{exit:?}");
    let exit = supervise::spawn(sh("nice"))
        .await
        .expect("spawn")
        .wait()
        .await;
    assert_eq!(
        String::from_utf8_lossy(&exit.stdout_tail).trim(),
        own.to_string(),
        "0 leaves the host's priority"
    );
}
