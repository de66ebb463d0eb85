//! The real host process: one host per installation, on-demand start, bad input isolation,
//! peer checks, and durable receipts across a SIGKILL.

use piw_host::store::prelude::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use piw_host::client::{ensure_host, BlockingClient, ClientError};
use piw_host::protocol::{payload, RejectionCode, Request, RequestBody};
use serde_json::json;

mod common;
use common::{run_status, wait_exit, wait_for_status, HostProc, TempHome};

fn piw() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_piw"))
}

/// A ready host with the fault point `fault` (`PIW_FAULT`).
fn serve_faulty(home: &TempHome, fault: &str) -> HostProc {
    home.serve_with(|cmd| {
        cmd.env("PIW_FAULT", fault);
    })
}

/// A connection subscribed to `run_id`'s events.
fn subscriber(home: &TempHome, run_id: &str) -> BlockingClient {
    let mut sub = home.client();
    sub.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: Some(run_id.to_owned()),
        session_id: None,
        all: None,
    }))
    .unwrap();
    sub
}

fn revision(c: &mut BlockingClient, run_id: &str) -> u64 {
    run_status(c, run_id)["run"]["revision"].as_u64().unwrap()
}

fn host_pids(home: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmdline);
        let env = String::from_utf8_lossy(&environ);
        if cmd.contains("serve")
            && cmd.contains("piw")
            && env.contains(&format!("PIW_HOME={}", home.display()))
        {
            // Zombies have an empty cmdline; skip exited processes.
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            if !stat.contains(") Z ") {
                pids.push(pid);
            }
        }
    }
    pids
}

#[test]
fn a_second_host_on_the_same_home_is_refused_with_the_running_pid() {
    let home = TempHome::new();
    let first = home.serve();
    let (code, err) = home.refused_serve();
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("pid {}", first.id())),
        "names the running host's pid: {err}"
    );
    // The first host is unaffected.
    home.client().call(RequestBody::HostStatus).unwrap();
    home.stop(first);
}

#[test]
fn ten_racing_ensure_host_calls_end_with_exactly_one_host() {
    let home = TempHome::new();
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let paths = home.paths.clone();
            std::thread::spawn(move || ensure_host(&paths, &piw(), Duration::from_secs(15)))
        })
        .collect();
    for h in handles {
        h.join().unwrap().expect("every caller sees a ready host");
    }
    // Losers exit as soon as the lock refuses them; wait (bounded) until they are gone, then
    // exactly one host must remain.
    let start = Instant::now();
    let mut pids = host_pids(&home.paths.home);
    while pids.len() > 1 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
        pids = host_pids(&home.paths.home);
    }
    std::thread::sleep(Duration::from_millis(200));
    let pids = host_pids(&home.paths.home);
    assert_eq!(pids.len(), 1, "exactly one host: {pids:?}");
    let status = home.client().call(RequestBody::HostStatus).unwrap();
    assert_eq!(status.body["pid"].as_u64(), Some(u64::from(pids[0])));
    home.client().call(RequestBody::HostStop).unwrap();
}

/// A host started while another process still holds the installation (here the test, as a
/// host that is still stopping would) exits at once; `ensure_host` starts it again once the
/// installation is free instead of waiting out its timeout for nothing.
#[test]
fn ensure_host_starts_a_host_once_a_stopping_one_has_let_go() {
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    let held = piw_host::driver::lock_installation(&home.paths).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        drop(held);
    });
    let result = ensure_host(&home.paths, &piw(), Duration::from_secs(20));
    release.join().unwrap();
    result.expect("a host once the installation is free");
    let status = home.client().call(RequestBody::HostStatus).unwrap();
    assert!(status.body["pid"].as_u64().is_some());
    home.client().call(RequestBody::HostStop).unwrap();
}

/// A lock whose recorded holder is already dead is that of a process still exiting (a killed
/// multi-threaded host keeps its files, the lock among them, until its last thread is gone,
/// after its main thread shows as dead): it is waited for, not reported as a running host. The
/// holder here is the test, with a dead process's pid in the file; it lets go while the caller
/// waits.
#[test]
fn the_lock_of_a_dead_but_still_exiting_holder_is_waited_for() {
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    let held = piw_host::driver::lock_installation(&home.paths).unwrap();
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    std::fs::write(&home.paths.lock, format!("{dead_pid}\n")).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
    });
    let taken = piw_host::driver::lock_installation(&home.paths);
    release.join().unwrap();
    let file = taken.expect("the lock, once its dying holder let go");
    drop(file);
    let pid = std::fs::read_to_string(&home.paths.lock).unwrap();
    assert_eq!(pid.trim(), std::process::id().to_string());
}

/// While another process holds the installation past the wait, the host `ensure_host` started
/// exits at once (the lock refuses it), but that is not why the call fails: the error is the
/// timeout, naming the lock that was not let go.
#[test]
fn ensure_host_names_a_lock_that_is_held_past_its_wait() {
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    let held = piw_host::driver::lock_installation(&home.paths).unwrap();
    // The lock stays held for the whole wait, so the outcome does not depend on its length;
    // seconds let a loaded machine start (and lose) the host within it.
    let err = ensure_host(&home.paths, &piw(), Duration::from_secs(5)).unwrap_err();
    drop(held);
    let ClientError::HostNotReady { detail, .. } = &err else {
        panic!("expected host_not_ready, got {err:?}");
    };
    assert!(
        detail.contains("another process still holds") && detail.contains("host.lock"),
        "{detail}"
    );
}

/// A host that cannot start (its database is not one) makes `ensure_host` fail with the reason
/// from the host's log, not a bare "not ready" after the whole timeout.
#[test]
fn ensure_host_reports_why_a_host_could_not_start() {
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    std::fs::write(&home.paths.db, b"not a database at all").unwrap();
    // What earlier hosts wrote is not this failure's story.
    std::fs::write(&home.paths.log, "an earlier host's line\n").unwrap();
    let err = ensure_host(&home.paths, &piw(), Duration::from_secs(60)).unwrap_err();
    let ClientError::HostExited {
        status, log_tail, ..
    } = &err
    else {
        panic!("expected host_exited, got {err:?}");
    };
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(log_tail.contains("not an SQLite database"), "{log_tail}");
    assert!(!log_tail.contains("an earlier host's line"), "{log_tail}");
    assert_eq!(err.code_str(), "host_not_ready");
}

/// A stand-in for `piw` at `dir/name`: a shell script with `body`.
fn fake_host(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A started host that exits at once is reported as exited, with its exit status and its last
/// lines, not as a host that "did not become ready within" a few milliseconds (which reads as
/// a timeout and invites a longer wait).
#[test]
fn ensure_host_says_a_host_that_exited_at_once_exited() {
    let home = TempHome::new();
    let bin = fake_host(
        home.dir.path(),
        "exits",
        "echo 'piw: cannot use this PIW_HOME' >&2; exit 3",
    );
    let err = ensure_host(&home.paths, &bin, Duration::from_secs(60)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("the piw host exited (exit status: 3) before it became ready"),
        "{text}"
    );
    assert!(text.contains("piw: cannot use this PIW_HOME"), "{text}");
    assert!(!text.contains("within"), "no timeout wording: {text}");
    assert!(
        matches!(&err, ClientError::HostExited { status, .. } if status.code() == Some(3)),
        "{err:?}"
    );
}

/// A host program that cannot be started at all is said to be that, with the path tried.
#[test]
fn ensure_host_says_a_host_program_that_cannot_start_cannot_start() {
    let home = TempHome::new();
    let bin = home.dir.path().join("no-such-piw");
    let err = ensure_host(&home.paths, &bin, Duration::from_secs(60)).unwrap_err();
    assert!(
        matches!(&err, ClientError::HostNotStarted { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot start the piw host {}", bin.display())),
        "{text}"
    );
    assert!(text.contains("PIW_HOST_BIN"), "{text}");
    assert_eq!(err.code_str(), "host_not_ready");
}

/// A started host that is still running when the wait ends keeps the timeout wording: it may
/// yet come up.
#[test]
fn ensure_host_reports_a_timeout_for_a_host_still_starting() {
    let home = TempHome::new();
    let bin = fake_host(home.dir.path(), "slow", "exec sleep 3");
    let err = ensure_host(&home.paths, &bin, Duration::from_millis(300)).unwrap_err();
    let ClientError::HostNotReady { detail, .. } = &err else {
        panic!("expected host_not_ready, got {err:?}");
    };
    let text = err.to_string();
    assert!(
        text.starts_with("the piw host did not become ready within"),
        "{text}"
    );
    assert!(detail.contains("still starting"), "{detail}");
}

/// A detached host logs to host.log as plain text: no terminal colour codes in a file.
#[test]
fn a_started_host_logs_plain_text() {
    let home = TempHome::new();
    ensure_host(&home.paths, &piw(), Duration::from_secs(60)).unwrap();
    let log = std::fs::read_to_string(&home.paths.log).unwrap();
    assert!(log.contains("piw host ready"), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in host.log: {log:?}");
    let mut c = home.client();
    let _ = c.call(RequestBody::HostStop);
}

#[test]
fn the_socket_and_directory_are_user_only() {
    use std::os::unix::fs::PermissionsExt;
    let home = TempHome::new();
    let host = home.serve();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&home.paths.home), 0o700);
    assert_eq!(mode(&home.paths.socket), 0o600);
    // The database and its WAL hold every run's input and output: the owner's only, even
    // under a permissive umask.
    let mut c = home.client();
    home.start_parked(&mut c);
    assert_eq!(mode(&home.paths.db), 0o600);
    let wal = home.paths.db.with_file_name("state.sqlite-wal");
    assert_eq!(mode(&wal), 0o600);
    home.stop(host);
}

fn raw(home: &TempHome) -> UnixStream {
    let s = UnixStream::connect(&home.paths.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

/// Reads until the host closes; returns everything it sent.
fn read_to_close(s: &mut UnixStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads the next host frame as JSON.
fn read_json(s: &mut UnixStream) -> serde_json::Value {
    let body = piw_host::protocol::read_frame(s, &piw_host::protocol::Limits::default())
        .expect("a frame")
        .expect("the host answers before it closes");
    serde_json::from_slice(&body).unwrap()
}

/// Writes `request` (JSON) as one frame.
fn send_json(s: &mut UnixStream, request: serde_json::Value) {
    s.write_all(&frame(request.to_string().as_bytes())).unwrap();
}

#[test]
fn bad_input_closes_only_the_offending_connection() {
    let home = TempHome::new();
    let host = home.serve();
    // A second client keeps working throughout.
    let mut good = home.client();
    let run_id = home.start_parked(&mut good);
    let check = |good: &mut BlockingClient| {
        let r = good
            .send(
                Request::new(
                    piw_host::ids::new_id("ok"),
                    RequestBody::RunStatus(Default::default()),
                )
                .with_run_id(&run_id),
            )
            .unwrap();
        assert_eq!(r.body["run"]["run_id"], json!(run_id));
    };
    let valid = |kind: &str, extra: &str| {
        format!(r#"{{"schema":"piw.protocol.v1","request_id":"r1","kind":"{kind}"{extra}}}"#)
            .into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "length over the limit",
            (64u32 * 1024 * 1024).to_be_bytes().to_vec(),
            "payload_too_large",
        ),
        (
            "invalid UTF-8",
            frame(&[0xff, 0xfe, 0x80, 0x81]),
            "malformed",
        ),
        ("invalid JSON", frame(b"{not json"), "malformed"),
        (
            "unknown kind",
            frame(&valid("run.explode", "")),
            "malformed",
        ),
        (
            "missing field",
            frame(br#"{"schema":"piw.protocol.v1","kind":"host.status"}"#),
            "malformed",
        ),
        (
            "wrong schema",
            frame(br#"{"schema":"piw.protocol.v0","request_id":"r","kind":"host.status"}"#),
            "unsupported_protocol",
        ),
    ];
    for (name, bytes, code) in cases {
        let mut s = raw(&home);
        s.write_all(&bytes).unwrap();
        let said = read_to_close(&mut s);
        assert!(
            said.contains("goodbye") && said.contains(code),
            "{name}: host said {said:?}"
        );
        check(&mut good);
    }
    // Truncated frame: the client hangs up mid-frame.
    {
        let mut s = raw(&home);
        let f = frame(&valid("host.status", ""));
        s.write_all(&f[..f.len() - 3]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let said = read_to_close(&mut s);
        assert!(said.contains("malformed"), "truncated: {said:?}");
        check(&mut good);
    }
    // One byte per second: the frame must complete in time or the connection is closed.
    {
        let mut s = raw(&home);
        let f = frame(&valid("host.status", ""));
        let started = Instant::now();
        let mut closed = false;
        for b in f.iter().take(20) {
            if s.write_all(&[*b]).is_err() {
                closed = true;
                break;
            }
            check(&mut good);
            std::thread::sleep(Duration::from_millis(500));
            if started.elapsed() > Duration::from_secs(7) {
                break;
            }
        }
        let said = read_to_close(&mut s);
        assert!(
            closed || said.contains("not completed"),
            "slow client: {said:?}"
        );
        check(&mut good);
    }
    home.stop(host);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn a_client_that_floods_and_never_reads_keeps_host_memory_bounded() {
    let home = TempHome::new();
    let host = home.serve();
    let mut good = home.client();
    good.call(RequestBody::HostStatus).unwrap();
    let before = rss_kib(host.id());
    let mut flooder = raw(&home);
    flooder
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let one = frame(br#"{"schema":"piw.protocol.v1","request_id":"f","kind":"run.list","payload":{"limit":1000}}"#);
    let mut burst = Vec::new();
    for _ in 0..1000 {
        burst.extend_from_slice(&one);
    }
    // Write until the host stops reading (our write times out), never reading replies.
    let mut sent = 0usize;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        match flooder.write(&burst) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    // The good client is still served while the flood is stuck.
    for _ in 0..20 {
        good.call(RequestBody::HostStatus).unwrap();
    }
    let after = rss_kib(host.id());
    println!(
        "flood: sent {} KiB; host RSS {before} KiB -> {after} KiB",
        sent / 1024
    );
    // The host reads while it can answer; once the flooder's receive buffer is full the host's
    // reply blocks, it reads ahead 1 MiB (READ_AHEAD_BYTES) and then stops: the kernel's
    // buffers and one decoder hold the rest.
    assert!(
        sent >= 64 * 1024,
        "the flood got going before backpressure ({sent} bytes)"
    );
    assert!(
        after < before + 64 * 1024,
        "host memory stays bounded: {before} KiB -> {after} KiB"
    );
    drop(flooder);
    home.stop(host);
}

/// A frame must be complete within the frame timeout of its first byte, however the bytes
/// trickle in (each byte used to restart the timer).
#[test]
fn a_frame_trickled_in_a_byte_a_second_is_closed_within_the_frame_timeout() {
    let home = TempHome::new();
    let host = home.serve();
    let mut s = raw(&home);
    let f = frame(
        json!({"schema": "piw.protocol.v1", "request_id": "x".repeat(64), "kind": "host.status"})
            .to_string()
            .as_bytes(),
    );
    let started = Instant::now();
    let mut closed_after = None;
    for b in f.iter().take(12) {
        if s.write_all(&[*b]).is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let reply = read_to_close(&mut s);
    assert!(
        closed_after.is_some_and(|t| t < Duration::from_secs(8)),
        "a frame started {:?} ago was still open",
        started.elapsed()
    );
    assert!(reply.contains("not completed"), "{reply}");
    home.stop(host);
}

/// A client may write a pipeline of requests larger than the socket buffers before it reads
/// a reply: the host reads ahead (up to `READ_AHEAD_BYTES`) while its replies wait for the
/// client to read them.
#[test]
fn a_pipeline_written_whole_before_reading_gets_every_reply() {
    let home = TempHome::new();
    let host = home.serve();
    let mut s = raw(&home);
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = 8000;
    let mut out = Vec::new();
    for i in 0..n {
        out.extend(frame(
            json!({"schema": "piw.protocol.v1", "request_id": format!("r{i}"), "kind": "host.status"})
                .to_string()
                .as_bytes(),
        ));
    }
    assert!(
        out.len() > 512 * 1024,
        "more than the socket buffers hold: {}",
        out.len()
    );
    s.write_all(&out)
        .expect("the host reads ahead while its replies wait (no deadlock)");
    for i in 0..n {
        let reply = read_json(&mut s);
        assert_eq!(reply["request_id"], format!("r{i}"), "in order");
        assert_eq!(reply["ok"], true);
    }
    home.stop(host);
}

/// A client that writes a request larger than the socket buffers while the host is writing
/// events to it (so neither side reads) must still get its reply: the host reads while it
/// writes. Without that, both writes wait for each other forever.
#[test]
fn a_large_request_from_a_subscriber_the_host_is_writing_to_gets_its_reply() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    let run_id = home.start_parked(&mut c);
    let mut sub = raw(&home);
    send_json(
        &mut sub,
        json!({"schema": "piw.protocol.v1", "request_id": "sub", "kind": "subscribe",
               "payload": {"run_id": run_id}}),
    );
    assert_eq!(read_json(&mut sub)["request_id"], "sub");
    // Events the subscriber does not read: far more than the socket buffers hold, so the
    // host's connection task ends up blocked writing to it.
    let events = 1200;
    for i in 0..events {
        let body = if i % 2 == 0 {
            RequestBody::RunPause
        } else {
            RequestBody::RunResume
        };
        c.send(Request::new(format!("t{i}"), body).with_run_id(&run_id))
            .unwrap();
    }
    // A request of ~240 KiB (kinds without a payload ignore it), more than the socket buffers.
    let pad = "x".repeat(240 * 1024);
    let big = frame(
        json!({"schema": "piw.protocol.v1", "request_id": "big", "kind": "run.status",
               "run_id": run_id, "payload": {"pad": pad}})
        .to_string()
        .as_bytes(),
    );
    sub.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sub.write_all(&big)
        .expect("the host reads a request while it is blocked writing events (no deadlock)");
    // Events and replies interleave from here on: collect the event sequence numbers.
    let mut seqs = std::collections::BTreeSet::new();
    let next_reply = |sub: &mut UnixStream, seqs: &mut std::collections::BTreeSet<u64>| loop {
        let frame = read_json(sub);
        if frame["type"] == "event" {
            assert!(seqs.insert(frame["seq"].as_u64().unwrap()), "{frame}");
            continue;
        }
        break frame;
    };
    let answer = next_reply(&mut sub, &mut seqs);
    assert_eq!(answer["request_id"], "big", "{answer}");
    assert_eq!(answer["ok"], true, "{answer}");
    assert!(!seqs.is_empty(), "events were waiting before the reply");
    // The connection is still in order: the next call on it is answered too.
    send_json(
        &mut sub,
        json!({"schema": "piw.protocol.v1", "request_id": "after", "kind": "host.status"}),
    );
    let after = next_reply(&mut sub, &mut seqs);
    assert_eq!(after["request_id"], "after", "{after}");
    // Every event arrives, once each.
    while seqs.len() < events {
        let frame = read_json(&mut sub);
        if frame["type"] == "event" {
            assert!(seqs.insert(frame["seq"].as_u64().unwrap()), "{frame}");
        }
    }
    let first = *seqs.first().unwrap();
    assert_eq!(
        seqs.last().copied(),
        Some(first + events as u64 - 1),
        "one event per revision, in a row"
    );
    home.stop(host);
}

/// A subscriber that stops reading while the host publishes more events than it keeps for it
/// (16,384, beyond what the socket buffers hold) is cut off with a goodbye
/// `subscriber_lagged`, not `internal`: clients resubscribe on that code alone. The host and
/// the runs are fine, and a new connection subscribes again.
#[test]
fn a_subscriber_that_falls_too_far_behind_is_closed_with_subscriber_lagged() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    // Runs of their own per writer, so the writers' pauses and resumes never collide and the
    // host commits them in groups (one connection carries one request at a time).
    let writers = 8;
    let run_ids: Vec<String> = (0..writers).map(|_| home.start_parked(&mut c)).collect();
    let mut sub = home.client();
    for run_id in &run_ids {
        sub.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: Some(run_id.clone()),
            session_id: None,
            all: None,
        }))
        .unwrap();
    }
    // 24,000 events unread: the socket buffers take a few hundred, the host keeps 16,384.
    let per_writer = 3000;
    std::thread::scope(|scope| {
        for (w, run_id) in run_ids.iter().enumerate() {
            let home = &home;
            scope.spawn(move || {
                let mut c = home.client();
                for i in 0..per_writer {
                    let body = if i % 2 == 0 {
                        RequestBody::RunPause
                    } else {
                        RequestBody::RunResume
                    };
                    c.send(Request::new(format!("w{w}-{i}"), body).with_run_id(run_id))
                        .unwrap();
                }
            });
        }
    });
    // Reading again: the events still kept arrive, then the goodbye.
    let mut received = 0;
    let err = loop {
        match sub.next_event() {
            Ok(_) => received += 1,
            Err(e) => break e,
        }
    };
    match &err {
        ClientError::Closed { code, message } => {
            assert_eq!(*code, RejectionCode::SubscriberLagged, "{message}");
            assert!(message.contains("events behind"), "{message}");
        }
        other => panic!("expected the goodbye subscriber_lagged, got {other:?}"),
    }
    assert!(
        received < writers * per_writer,
        "some events were never delivered ({received})"
    );
    // Nothing is wrong with the host: a new connection subscribes and reads the run.
    let mut again = home.client();
    again
        .call(RequestBody::Subscribe(payload::Subscribe {
            run_id: Some(run_ids[0].clone()),
            session_id: None,
            all: None,
        }))
        .unwrap();
    let status = wait_for_status(&mut again, &run_ids[0], "waiting");
    assert_eq!(status["run"]["paused"], json!(false), "{status:#}");
    home.stop(host);
}

#[test]
fn a_peer_of_another_uid_is_refused() {
    // The check itself, with a fake credential.
    use piw_host::engine::admission::authorize_peer;
    assert!(authorize_peer(Some(1000), 1000).is_ok());
    let r = authorize_peer(Some(1001), 1000).unwrap_err();
    assert_eq!(r.code(), RejectionCode::Unauthorized);
    assert!(authorize_peer(None, 1000).is_err());

    // Real connections across uids, when this test runs as root. The socket's mode (0600 in a
    // 0700 directory) is the first wall; open both up so the peers reach each other, and the
    // uid checks must refuse them.
    if piw_host::paths::current_uid() != 0 {
        println!("not root: the uid checks are covered by the fake-credential assertions above and in the client's unit tests");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let home = TempHome::new();
    let host = home.serve();
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(home.dir.path(), 0o755);
    open(&home.paths.home, 0o755);
    open(&home.paths.socket, 0o666);

    // The host refuses a peer of another uid: a raw connection made by a thread that dropped
    // to uid 65534 (the raw `setresuid` system call changes only the calling thread's
    // credentials, unlike libc's wrapper, which changes every thread's; the connection carries
    // the credentials its `connect` was made with).
    let socket = home.paths.socket.clone();
    let refused = std::thread::spawn(move || {
        // SAFETY: a plain system call on this thread's own credentials; the thread ends after
        // the connection and never returns to root.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(rc, 0, "setresuid: {}", std::io::Error::last_os_error());
        let mut s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let status = Request::new("r-foreign", RequestBody::HostStatus);
        let _ = s.write_all(&frame(&serde_json::to_vec(&status).unwrap()));
        read_to_close(&mut s)
    })
    .join()
    .unwrap();
    assert!(
        refused.contains("unauthorized") && !refused.contains("\"pid\""),
        "the host refused the foreign uid and told it nothing: {refused}"
    );

    // And a client of another uid refuses this host before sending anything.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(piw())
        .args(["host", "status"])
        .env("PIW_HOME", &home.paths.home)
        .output();
    match out {
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "refused: {err}");
            assert!(
                err.contains("belongs to uid 0, not to this user (uid 65534); nothing was sent"),
                "the client refused the foreign host: {err}"
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("setpriv (util-linux) is missing: the real other-uid client is not tried; its unit test still ran");
        }
        Err(e) => panic!("setpriv: {e}"),
    }
    open(&home.paths.home, 0o700);
    home.stop(host);
}

/// A run parked on its checkpoint, with its revision, on a home whose host is stopped.
fn parked_run(home: &TempHome) -> (String, u64) {
    let host = home.serve();
    let mut c = home.client();
    let run_id = home.start_parked(&mut c);
    let before = revision(&mut c, &run_id);
    home.stop(host);
    (run_id, before)
}

/// The host went away without answering.
fn assert_unanswered(err: &ClientError, why: &str) {
    assert!(
        matches!(
            err,
            ClientError::Disconnected | ClientError::Io(_) | ClientError::Protocol(_)
        ),
        "{why}: {err:?}"
    );
}

/// On a new host, `pause` is replayed, not applied again: one revision more than `before`.
fn assert_paused_once(
    home: &TempHome,
    pause: Request,
    run_id: &str,
    before: u64,
) -> (HostProc, BlockingClient) {
    let host = home.serve();
    let mut c = home.client();
    let replay = c
        .send(pause)
        .expect("the retried request id returns the committed receipt");
    assert!(replay.replayed);
    let status = c
        .send(Request::new("s", RequestBody::RunStatus(Default::default())).with_run_id(run_id))
        .unwrap();
    assert_eq!(status.body["run"]["paused"], json!(true));
    assert_eq!(status.body["run"]["revision"], json!(before + 1));
    (host, c)
}

#[test]
fn a_command_committed_before_a_crash_replays_its_receipt_after_restart() {
    let home = TempHome::new();
    let (run_id, before) = parked_run(&home);

    // This host aborts right after committing the pause, before replying.
    let mut crashing = serve_faulty(&home, "after_commit:run.pause");
    let pause = Request::new("pause-once", RequestBody::RunPause).with_run_id(&run_id);
    let err = home.client().send(pause.clone()).unwrap_err();
    assert_unanswered(&err, "the host crashed before replying");
    assert!(wait_exit(&mut crashing, Duration::from_secs(5)).is_none_or(|c| c != 0));

    let (host, mut c) = assert_paused_once(&home, pause, &run_id, before);
    // A different request with a stale revision is refused with the typed code.
    let stale = Request::new("r-stale", RequestBody::RunResume)
        .with_run_id(&run_id)
        .with_expected_revision(before);
    assert_eq!(
        c.send(stale).unwrap_err().code(),
        Some(RejectionCode::StaleRevision)
    );
    home.stop(host);
}

/// The host commits without fsyncing and fsyncs the WAL before it replies (`driver::outbox`):
/// when that fsync fails, the commit must not be acknowledged, and the host must stop rather
/// than carry on building on a commit the disk may have dropped.
#[test]
fn a_commit_whose_wal_sync_fails_is_never_acknowledged() {
    let home = TempHome::new();
    let (run_id, before) = parked_run(&home);

    let mut failing = serve_faulty(&home, "fail_sync");
    let mut sub = subscriber(&home, &run_id);
    let pause = Request::new("pause-unsynced", RequestBody::RunPause).with_run_id(&run_id);
    let err = home.client().send(pause.clone()).unwrap_err();
    assert_unanswered(&err, "no receipt for an unsynced commit");
    assert_eq!(
        wait_exit(&mut failing, Duration::from_secs(5)),
        Some(1),
        "a failed WAL sync stops the host with a runtime error"
    );
    let event = sub.next_event();
    assert!(
        event.is_err(),
        "a subscriber heard of the unsynced commit: {event:?}"
    );

    // The frames did reach the OS (only the fsync "failed"), so a new host finds the pause;
    // the retry learns it happened, once.
    let (host, _) = assert_paused_once(&home, pause, &run_id, before);
    home.stop(host);
}

#[test]
fn subscriptions_receive_committed_events() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    let run_id = home.start_parked(&mut c);
    let before = revision(&mut c, &run_id);
    let mut sub = subscriber(&home, &run_id);
    c.send(Request::new("p", RequestBody::RunPause).with_run_id(&run_id))
        .unwrap();
    let e = sub.next_event().unwrap();
    assert_eq!(
        (e.run_id.as_str(), e.event_kind.as_str(), e.seq),
        (run_id.as_str(), "paused", before + 1)
    );
    home.stop(host);
}

/// `repair` changes runs outside the request batches; its events reach subscribers like any
/// other, with no gap in `seq` (a follower would otherwise think it missed events).
#[test]
fn events_a_repair_writes_reach_subscribers() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    let run_id = home.start_parked(&mut c);
    let before = revision(&mut c, &run_id);
    let mut sub = subscriber(&home, &run_id);
    // A contradiction written behind the host's back: the waiting run says it is running,
    // with nobody holding it, which `repair` requeues.
    let db = rusqlite::Connection::open(&home.paths.db).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    db.execute_batch(&format!(
        "UPDATE runs SET status = 'running' WHERE run_id = '{run_id}';
         UPDATE run_views SET status = 'running' WHERE run_id = '{run_id}';"
    ))
    .unwrap();
    drop(db);
    let r = c.call(RequestBody::Repair).unwrap();
    let repaired = r.body["report"]["repaired"].as_array().unwrap();
    assert!(
        repaired.iter().any(|f| f["run_id"] == json!(run_id)),
        "{}",
        r.body
    );
    let after = revision(&mut c, &run_id);
    assert!(
        after > before,
        "the repair wrote events: {before} -> {after}"
    );
    for seq in before + 1..=after {
        let e = sub.next_event().unwrap();
        assert_eq!((e.run_id.as_str(), e.seq), (run_id.as_str(), seq));
    }
    home.stop(host);
}

/// A `piw host serve` whose terminal closes gets SIGHUP: it stops as gracefully as on SIGTERM.
#[test]
fn sighup_stops_gracefully() {
    let home = TempHome::new();
    let mut host = home.serve();
    let mut c = home.client();
    let run_id = home.start_parked(&mut c);
    // SAFETY: kill with a valid pid of our own child.
    assert_eq!(unsafe { libc_kill(host.id() as i32, 1) }, 0);
    assert_eq!(
        wait_exit(&mut host, Duration::from_secs(10)),
        Some(0),
        "SIGHUP exits 0"
    );
    assert!(!home.paths.socket.exists(), "the socket is removed");
    let store = piw_host::store::Store::open_read_only(&home.paths.db, Default::default()).unwrap();
    assert_ne!(
        store.run(&run_id).unwrap().status,
        piw_host::store::RunStatus::Running,
        "the run was released"
    );
}

#[test]
fn sigterm_stops_gracefully_and_runs_stay_resumable() {
    let home = TempHome::new();
    let mut host = home.serve();
    let mut c = home.client();
    let run_id = home.start_parked(&mut c);
    let before = revision(&mut c, &run_id);
    // SAFETY: kill with a valid pid of our own child.
    assert_eq!(unsafe { libc_kill(host.id() as i32, 15) }, 0);
    assert_eq!(
        wait_exit(&mut host, Duration::from_secs(10)),
        Some(0),
        "SIGTERM exits 0"
    );
    assert!(!home.paths.socket.exists(), "the socket is removed");
    let host = home.serve();
    let r = home
        .client()
        .send(Request::new("st", RequestBody::RunStatus(Default::default())).with_run_id(&run_id))
        .unwrap();
    assert_eq!(r.body["run"]["status"], json!("waiting"));
    assert_eq!(
        r.body["run"]["revision"],
        json!(before),
        "a restart writes nothing to a waiting run"
    );
    home.stop(host);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn the_async_client_calls_and_subscribes() {
    let home = TempHome::new();
    let host = home.serve();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = piw_host::client::Client::connect(&home.paths)
            .await
            .unwrap();
        let mut s = piw_host::client::Client::connect(&home.paths)
            .await
            .unwrap();
        let r = c
            .call(RequestBody::RunStart(payload::RunStart {
                workflow_file: home.parking_workflow(),
                input: json!({"a": 1}),
                session_id: Some("sess".into()),
                execution_mode: None,
                project_dir: None,
            }))
            .await
            .unwrap();
        let run_id = r.body["run_id"].as_str().unwrap().to_owned();
        s.call(RequestBody::Subscribe(payload::Subscribe {
            run_id: None,
            session_id: Some("sess".into()),
            all: None,
        }))
        .await
        .unwrap();
        c.send(
            Request::new(
                "c1",
                RequestBody::RunCancel(payload::RunCancel { reason: None }),
            )
            .with_run_id(&run_id),
        )
        .await
        .unwrap();
        // The session's events arrive in order; the run may still be starting up.
        let mut seen = Vec::new();
        let e = loop {
            let e = s.next_event().await.unwrap();
            assert_eq!(e.run_id, run_id);
            seen.push(e.seq);
            if e.event_kind == "cancelled" {
                break e;
            }
            assert!(seen.len() < 50, "no cancelled event: {seen:?}");
        };
        assert_eq!(e.status, "cancelled");
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "increasing seq: {seen:?}"
        );
        let err = c
            .send(Request::new("c2", RequestBody::RunResume).with_run_id(&run_id))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(RejectionCode::InvalidTransition));
        let err = c
            .send(
                Request::new("c3", RequestBody::RunStatus(Default::default()))
                    .with_run_id("run-missing"),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(RejectionCode::NotFound));
    });
    home.stop(host);
}

/// Voluntary context switches of every thread of `pid`.
fn context_switches(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

#[test]
fn an_idle_host_does_not_wake_up() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    // Queued, paused and waiting-free runs: nothing the host must act on by itself.
    let run_id = home.start_parked(&mut c);
    home.start_parked(&mut c);
    c.send(Request::new("p", RequestBody::RunPause).with_run_id(&run_id))
        .unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    let before = context_switches(host.id());
    std::thread::sleep(Duration::from_secs(2));
    let woke = context_switches(host.id()) - before;
    assert!(woke < 20, "an idle host woke {woke} times in 2 s");
    home.stop(host);
}

#[test]
fn a_connection_cannot_pile_up_subscriptions() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    let subscribe = || {
        RequestBody::Subscribe(payload::Subscribe {
            run_id: None,
            session_id: Some("s1".into()),
            all: None,
        })
    };
    for _ in 0..piw_host::engine::admission::MAX_SUBSCRIPTIONS {
        c.call(subscribe()).unwrap();
    }
    let err = c.call(subscribe()).unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::Malformed), "{err}");
    // The connection stays usable.
    c.call(RequestBody::HostStatus).unwrap();
    home.stop(host);
}

/// The host `ensure_host` started is refused by a holder of the installation (a host that is
/// stopping), and that holder lets go before `ensure_host` sees the refused host exit: it never
/// saw the installation held, yet the host did not fail by itself. It is started again, as
/// after any holder that let go, instead of failing the call with "exited before it became
/// ready" and a log saying another host runs.
#[test]
fn ensure_host_starts_again_when_the_holder_let_go_before_the_refused_host_was_seen_to_exit() {
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    let refused = home.dir.path().join("refused");
    // The real host, then (once it exits) a mark and a moment before the exit is visible.
    let bin = fake_host(
        home.dir.path(),
        "slow-exit",
        &format!(
            "\"{}\" \"$@\"; rc=$?; touch \"{}\"; sleep 0.5; exit $rc",
            piw().display(),
            refused.display()
        ),
    );
    let held = piw_host::driver::lock_installation(&home.paths).unwrap();
    let release = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        while !refused.exists() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(held);
    });
    let result = ensure_host(&home.paths, &bin, Duration::from_secs(20));
    release.join().unwrap();
    result.expect("a host once the installation is free");
    home.client().call(RequestBody::HostStop).unwrap();
}

/// `run.start` hashes the workflow file before anything else. A FIFO named like a workflow (or
/// a link to a device) is refused as not a regular file: opening a FIFO waits for a writer, and
/// that wait must not hold the task that serves every connection, nor the connection itself.
#[test]
fn a_run_start_of_a_fifo_is_refused_and_the_host_keeps_serving() {
    let home = TempHome::new();
    let host = home.serve();
    let fifo = home.paths.home.join("pipe.workflow.json");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    // A link to a device that never ends is refused the same way, before a byte is read.
    let device = home.paths.home.join("zero.workflow.json");
    std::os::unix::fs::symlink("/dev/zero", &device).unwrap();
    let mut c = home.client();
    for file in [&fifo, &device] {
        let err = c
            .call(RequestBody::RunStart(payload::RunStart {
                workflow_file: file.display().to_string(),
                input: json!({}),
                session_id: None,
                execution_mode: None,
                project_dir: None,
            }))
            .unwrap_err();
        assert_eq!(err.code(), Some(RejectionCode::NotFound), "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
    // The connection and the host go on.
    c.call(RequestBody::HostStatus).unwrap();
    home.client().call(RequestBody::HostStatus).unwrap();
    home.stop(host);
}

/// `subscribe` to a run that does not exist is `not_found` (a typo would otherwise wait for
/// events that never come); the connection stays open, and a session needs no run yet.
#[test]
fn a_subscription_to_an_unknown_run_is_not_found() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    let err = c
        .call(RequestBody::Subscribe(payload::Subscribe {
            run_id: Some("run-missing".into()),
            session_id: None,
            all: None,
        }))
        .unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::NotFound), "{err}");
    assert!(err.to_string().contains("run-missing"), "{err}");
    c.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: None,
        session_id: Some("no-runs-yet".into()),
        all: None,
    }))
    .unwrap();
    let run_id = home.start_parked(&mut c);
    c.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: Some(run_id),
        session_id: None,
        all: None,
    }))
    .unwrap();
    home.stop(host);
}

/// `run.start` resolves a relative `workflow_file` against `project_dir`, never against the
/// directory the host happened to start in, and refuses paths it cannot place, naming them.
#[test]
fn run_start_paths_never_depend_on_the_hosts_directory() {
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    // The host starts in `host_cwd`, which holds a workflow of the same name that parks on a
    // checkpoint; the project's own one is a different file.
    let host_cwd = home.dir.path().join("host-cwd");
    let project = home.dir.path().join("project");
    std::fs::create_dir_all(&host_cwd).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let workflow = home.parking_workflow();
    std::fs::copy(&workflow, host_cwd.join("w.workflow.json")).unwrap();
    std::fs::copy(&workflow, project.join("w.workflow.json")).unwrap();
    std::fs::write(project.join("w.workflow.json"), {
        let mut text = std::fs::read_to_string(&workflow).unwrap();
        text.push(' '); // another hash: the file is the project's, not the host's
        text
    })
    .unwrap();
    let host = home.serve_with(|cmd| {
        cmd.current_dir(&host_cwd);
    });
    let mut c = home.client();
    let start = |workflow_file: &str, project_dir: Option<&Path>| {
        RequestBody::RunStart(payload::RunStart {
            workflow_file: workflow_file.into(),
            input: json!({}),
            session_id: None,
            execution_mode: None,
            project_dir: project_dir.map(|d| d.display().to_string()),
        })
    };

    let r = c
        .call(start("w.workflow.json", Some(&project)))
        .expect("a relative file in the project");
    let run_id = r.body["run_id"].as_str().unwrap().to_owned();
    let status = wait_for_status(&mut c, &run_id, "waiting");
    let expected = std::fs::canonicalize(project.join("w.workflow.json")).unwrap();
    assert_eq!(
        status["run"]["source_root"],
        json!(expected.display().to_string())
    );
    assert_eq!(
        status["run"]["project_dir"],
        json!(project.display().to_string())
    );

    // Without a project_dir, a relative file has nothing to be relative to.
    let err = c.call(start("w.workflow.json", None)).unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::Malformed), "{err}");
    assert!(
        err.to_string().contains("`w.workflow.json` is relative"),
        "{err}"
    );
    // A relative project_dir is refused at the start, not after three failed launches.
    let err = c
        .call(start(&workflow, Some(Path::new("rel"))))
        .unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::Malformed), "{err}");
    assert!(err.to_string().contains("project_dir `rel`"), "{err}");
    // So is one that does not exist, or is not a directory.
    let missing = home.dir.path().join("missing");
    for dir in [missing.as_path(), Path::new(&workflow)] {
        let err = c.call(start(&workflow, Some(dir))).unwrap_err();
        assert_eq!(err.code(), Some(RejectionCode::NotFound), "{err}");
        assert!(
            err.to_string().contains(&dir.display().to_string()),
            "{err}"
        );
    }
    // Absent, the project directory is the workflow file's.
    let r = c.call(start(&workflow, None)).unwrap();
    let run_id = r.body["run_id"].as_str().unwrap().to_owned();
    let status = wait_for_status(&mut c, &run_id, "waiting");
    let workflow_dir = std::fs::canonicalize(Path::new(&workflow).parent().unwrap()).unwrap();
    assert_eq!(
        status["run"]["project_dir"],
        json!(workflow_dir.display().to_string())
    );
    home.stop(host);
}

/// A client that retries a `run.start` (same request id) after the reply was lost gets the
/// committed start's receipt even when the workflow file has moved since: the receipt is looked
/// up before the file is needed (the retry used to get `not_found` for a run that exists). A
/// new request for the missing file is still `not_found`.
#[test]
fn a_retried_run_start_replays_its_receipt_after_the_file_moved() {
    let home = TempHome::new();
    let host = home.serve();
    let mut c = home.client();
    let workflow = home.parking_workflow();
    let start = |id: &str| {
        Request::new(
            id,
            RequestBody::RunStart(payload::RunStart {
                workflow_file: workflow.clone(),
                input: json!({}),
                session_id: None,
                execution_mode: None,
                project_dir: None,
            }),
        )
    };
    let first = c.send(start("start-once")).unwrap();
    let run_id = first.body["run_id"].as_str().unwrap().to_owned();
    std::fs::rename(&workflow, format!("{workflow}.moved")).unwrap();
    let again = c
        .send(start("start-once"))
        .expect("the receipt is replayed");
    assert_eq!(again.body["run_id"], json!(run_id));
    let err = c.send(start("start-new")).unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::NotFound), "{err}");
    home.stop(host);
}

/// A host whose log cannot be written (its stderr a pipe whose reader went away, as a full
/// disk would fail it too) drops the lines and keeps serving: logging in the store thread must
/// not stop the thread that owns the state, and `host.status` counts what was lost.
#[test]
fn a_host_whose_log_cannot_be_written_keeps_serving() {
    let home = TempHome::new();
    let mut host = home.serve_with(|cmd| {
        // Debug: the store thread logs on every launch.
        cmd.env("PIW_LOG", "debug").stderr(Stdio::piped());
    });
    drop(host.stderr.take());
    let mut c = home.client();
    for _ in 0..3 {
        let run_id = home.start_parked(&mut c);
        c.send(
            Request::new(piw_host::ids::new_id("p"), RequestBody::RunPause).with_run_id(&run_id),
        )
        .expect("a command is answered while the log cannot be written");
    }
    let status = c.call(RequestBody::HostStatus).unwrap();
    assert_eq!(
        status.body["runs"]["waiting"],
        json!(3),
        "{:#}",
        status.body
    );
    assert!(
        status.body["log_writes_lost"].as_u64().unwrap_or(0) > 0,
        "{:#}",
        status.body
    );
    assert!(host.try_wait().unwrap().is_none());
    home.stop(host);
}

/// A thread that owns state and dies (a panic in the store thread) takes the host down with
/// its own exit code at once; the socket is gone, so the next client starts a new host, and
/// nothing of the failed batch was committed.
#[test]
fn a_store_thread_that_dies_takes_the_host_down_and_a_new_host_serves() {
    let home = TempHome::new();
    let (run_id, before) = parked_run(&home);
    let mut dying = serve_faulty(&home, "panic_commit:run.pause");
    let pause = Request::new("pause-panics", RequestBody::RunPause).with_run_id(&run_id);
    let err = home.client().send(pause).unwrap_err();
    // Unanswered, or told the host is stopping (its reply was dropped with the thread).
    if err.code() != Some(RejectionCode::HostShuttingDown) {
        assert_unanswered(&err, "the store thread died before committing");
    }
    assert_eq!(
        wait_exit(&mut dying, Duration::from_secs(20)),
        Some(piw_host::driver::STATE_OWNER_DIED_EXIT),
        "the host exits instead of staying half-alive"
    );
    assert!(!home.paths.socket.exists(), "the socket is removed");
    let host = home.serve();
    let mut c = home.client();
    assert_eq!(revision(&mut c, &run_id), before, "nothing committed");
    home.stop(host);
}

/// `piw host serve` with its stdout on a full device (its "ready" line cannot be written)
/// still serves.
#[test]
fn a_host_whose_stdout_is_a_full_device_still_serves() {
    let home = TempHome::new();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let host = home.serve_with(|cmd| {
        cmd.stdout(full);
    });
    let mut c = home.client();
    home.start_parked(&mut c);
    home.stop(host);
}

/// While the disk holding the database is full, commands are refused with a clear error and
/// nothing is stored; once there is space again the same host serves again by itself, and what
/// it acknowledged survives a restart.
#[test]
fn a_full_disk_refuses_commands_clearly_and_the_host_serves_again_once_space_is_back() {
    let home = TempHome::new();
    let (run_id, before) = parked_run(&home);
    let full = home.paths.home.join("disk-is-full");
    let host = serve_faulty(&home, &format!("disk_full:{}", full.display()));
    let mut c = home.client();
    std::fs::write(&full, "").unwrap();
    for attempt in 0..2 {
        let err = c
            .send(
                Request::new(format!("pause-full-{attempt}"), RequestBody::RunPause)
                    .with_run_id(&run_id),
            )
            .unwrap_err();
        let ClientError::Rejected(r) = &err else {
            panic!("a refusal, not a broken connection: {err:?}");
        };
        assert!(
            r.message.contains("the disk holding")
                && r.message.contains("is full: nothing of this was stored"),
            "{r:?}"
        );
    }
    assert_eq!(revision(&mut c, &run_id), before, "nothing stored");
    std::fs::remove_file(&full).unwrap();
    let pause = Request::new("pause-after", RequestBody::RunPause).with_run_id(&run_id);
    c.send(pause.clone())
        .expect("served again once space is back");
    home.stop(host);
    let (host, _) = assert_paused_once(&home, pause, &run_id, before);
    home.stop(host);
}

/// One host per database whatever the paths: an installation whose `state.sqlite` is a link
/// to another's database gets no second host beside the first (which would take the first's
/// children for orphans and run their work again), and cannot reset it while it is served.
#[test]
fn a_database_linked_from_another_installation_gets_no_second_host() {
    let first = TempHome::new();
    let host = first.serve();
    let mut c = first.client();
    let run_id = first.start_parked(&mut c);
    let before = revision(&mut c, &run_id);
    let second = TempHome::new();
    second.paths.ensure_dirs().unwrap();
    std::os::unix::fs::symlink(&first.paths.db, &second.paths.db).unwrap();

    let (code, err) = second.refused_serve();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("already serves the database"), "{err}");
    let reset = second.piw(&["state", "reset", "--yes"]).output().unwrap();
    assert_eq!(reset.status.code(), Some(1), "{reset:?}");
    assert!(first.paths.db.exists() && second.paths.db.exists());
    // The first host serves on, its run untouched.
    assert_eq!(revision(&mut c, &run_id), before);
    assert_eq!(host_pids(&second.paths.home), Vec::<u32>::new());
    first.stop(host);
}

/// A file outside any installation that a link planted in one points at, and a fresh
/// installation directory.
fn victim_and_home() -> (tempfile::TempDir, PathBuf, TempHome) {
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("precious");
    std::fs::write(&victim, "keep me\n").unwrap();
    let home = TempHome::new();
    home.paths.ensure_dirs().unwrap();
    (outside, victim, home)
}

// Files that are not what they seem: each is refused with a message that says what it is,
// and nothing outside the installation is written.

/// A FIFO at `state.sqlite` would hang the host for ever with the lock held.
#[test]
fn a_fifo_at_the_database_is_refused() {
    let (_outside, _, home) = victim_and_home();
    let fifo = std::ffi::CString::new(home.paths.db.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let (code, err) = home.refused_serve();
    assert_eq!(code, Some(1), "a FIFO at state.sqlite: {err}");
    assert!(err.contains("is a FIFO, not a regular file"), "{err}");
}

/// A link at `host.lock` would have its target truncated.
#[test]
fn a_link_at_the_lock_is_refused() {
    let (_outside, victim, home) = victim_and_home();
    std::os::unix::fs::symlink(&victim, &home.paths.lock).unwrap();
    let (code, err) = home.refused_serve();
    assert_eq!(code, Some(1), "a link at host.lock: {err}");
    assert!(
        err.contains("is a symbolic link, not a regular file"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
}

/// A link at `host.log` would be appended to by every host started on demand.
#[test]
fn a_link_at_the_log_is_refused() {
    let (_outside, victim, home) = victim_and_home();
    std::os::unix::fs::symlink(&victim, &home.paths.log).unwrap();
    let err = ensure_host(&home.paths, &piw(), Duration::from_secs(20)).unwrap_err();
    assert!(
        err.to_string()
            .contains("is a symbolic link, not a regular file"),
        "a link at host.log: {err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
}

/// A regular file at `host.sock` would be deleted.
#[test]
fn a_file_at_the_socket_is_left_alone_and_refused() {
    let (_outside, _, home) = victim_and_home();
    std::fs::write(&home.paths.socket, "not a socket\n").unwrap();
    let (code, err) = home.refused_serve();
    assert_eq!(code, Some(1), "a file at host.sock: {err}");
    assert!(
        err.contains("is a regular file, not a socket piw made"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&home.paths.socket).unwrap(),
        "not a socket\n"
    );
}

/// Another program's live socket at `host.sock` would be taken over.
#[test]
fn another_programs_live_socket_is_not_taken_over() {
    let (_outside, _, home) = victim_and_home();
    let theirs = std::os::unix::net::UnixListener::bind(&home.paths.socket).unwrap();
    let (code, err) = home.refused_serve();
    assert_eq!(code, Some(1), "another program's socket: {err}");
    assert!(err.contains("another program listens on it"), "{err}");
    let _client = UnixStream::connect(&home.paths.socket).unwrap();
    theirs
        .accept()
        .expect("the other program still has its socket");
}

/// The soft and hard `RLIMIT_NOFILE` of process `pid`, from `/proc/<pid>/limits`.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// With a low descriptor limit, idle connections past what the host can hold used to lock
/// every other client out. The host raises its soft limit to the hard one, keeps at most what
/// that leaves for connections, and closes the connection idle the longest (saying why) to
/// make room for a new one: a client still gets its answer.
#[test]
fn idle_connections_cannot_lock_other_clients_out() {
    let home = TempHome::new();
    let host = home.serve_with(|cmd| common::limit_open_files(cmd, 256, 512));
    assert_eq!(
        open_file_limits(host.id()),
        (512, 512),
        "soft raised to hard"
    );

    let mut idle: Vec<UnixStream> = (0..600).map(|_| raw(&home)).collect();
    home.client()
        .call(RequestBody::HostStatus)
        .expect("a client is answered past 600 idle connections");
    let said = read_to_close(&mut idle[0]);
    assert!(said.contains("idle the longest"), "{said}");
    home.stop(host);
}

/// An integer no 64-bit integer holds would be read as a floating-point number and stored
/// with another value: the request is refused (`malformed`, naming the integer) and no run
/// starts; the same number written as a string, or one that fits, keeps its value.
#[test]
fn an_integer_that_would_lose_its_value_is_refused_not_changed() {
    let home = TempHome::new();
    let host = home.serve();
    let wf = serde_json::to_string(&home.parking_workflow()).unwrap();
    let start = |input: &str| {
        let mut s = raw(&home);
        let body = format!(
            r#"{{"schema":"piw.protocol.v1","request_id":"big-{}","kind":"run.start","payload":{{"workflow_file":{wf},"input":{input}}}}}"#,
            input.len()
        );
        s.write_all(&frame(body.as_bytes())).unwrap();
        read_to_close_or_first(&mut s)
    };
    let said = start(r#"{"n": 123456789012345678901234567890}"#);
    assert!(
        said.contains("malformed")
            && said.contains("123456789012345678901234567890 does not fit 64 bits"),
        "{said}"
    );
    let runs = home
        .client()
        .call(RequestBody::RunList(Default::default()))
        .unwrap();
    assert_eq!(runs.body["runs"], json!([]), "no run started");
    let said = start(r#"{"n": 18446744073709551615, "s": "123456789012345678901234567890"}"#);
    assert!(said.contains("run_id"), "{said}");
    let mut c = home.client();
    let runs = c.call(RequestBody::RunList(Default::default())).unwrap();
    let run_id = runs.body["runs"][0]["run_id"].as_str().unwrap().to_owned();
    wait_for_status(&mut c, &run_id, "waiting");
    let stored: String = rusqlite::Connection::open_with_flags(
        &home.paths.db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap()
    .query_row("SELECT input FROM runs WHERE run_id = ?1", [&run_id], |r| {
        r.get(0)
    })
    .unwrap();
    assert!(
        stored.contains("18446744073709551615")
            && stored.contains("\"123456789012345678901234567890\""),
        "{stored}"
    );
    home.stop(host);
}

/// The first frame the host sends (a reply or a goodbye), as text.
fn read_to_close_or_first(s: &mut UnixStream) -> String {
    let body = piw_host::protocol::read_frame(s, &piw_host::protocol::Limits::default())
        .expect("a frame")
        .expect("the host answers");
    String::from_utf8_lossy(&body).into_owned()
}
