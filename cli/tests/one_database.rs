//! One host per database file, whatever the paths: a hard link, a symbolic link or any other
//! path to a database another host serves gets no second host (`driver::lock`), and files
//! beside the database that SQLite did not make (`-wal`, `-shm`: a link, a FIFO, a second
//! name) are refused by name before SQLite opens anything (`store::files`). Real processes,
//! temp `HOME` and `PIW_HOME`; every process of the test's installations is killed at its end.

use std::path::{Path, PathBuf};

use piw_host::client::BlockingClient;
use piw_host::driver::{lock_installation_with, HostError, Links};
use piw_host::protocol::RequestBody;
use serde_json::{json, Value};

mod common;
use common::{run_status, TempHome};

/// An installation whose directories exist, its hosts without standby workers.
fn home() -> TempHome {
    let home = TempHome::new().with_env("PIW_STANDBY_WORKERS", "0");
    home.paths.ensure_dirs().unwrap();
    home
}

/// `piw diagnose --json`: its exit code and findings.
fn diagnose(home: &TempHome) -> (Option<i32>, Value, String) {
    let out = home.piw(&["diagnose", "--json"]).output().unwrap();
    let body = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code(),
        body,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every run of the installation, by id, with its status and revision.
fn runs(c: &mut BlockingClient) -> Vec<(String, String, u64)> {
    let list = c.call(RequestBody::RunList(Default::default())).unwrap();
    let mut runs: Vec<_> = list.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id = r["run_id"].as_str().unwrap().to_owned();
            let s = run_status(c, &id);
            (
                id,
                s["run"]["status"].as_str().unwrap().to_owned(),
                s["run"]["revision"].as_u64().unwrap(),
            )
        })
        .collect();
    runs.sort();
    runs
}

fn digest(path: &Path) -> String {
    piw_host::ids::sha256_hex(&std::fs::read(path).unwrap())
}

/// A hard link to a served database, in another installation, gets no second host: the link
/// is refused by name ("has 2 links"), and even maintenance that allows links (`state reset`,
/// a stopped installation's `diagnose`) finds the file locked by its inode. The first host
/// serves on and nothing of it is lost; it too refuses to start again while the link exists,
/// and starts with every run once it is gone.
#[test]
fn a_hard_linked_database_gets_no_second_host_and_nothing_is_lost() {
    let first = home();
    let host = first.serve();
    let mut c = first.client();
    for _ in 0..3 {
        first.start_parked(&mut c);
    }
    let before = runs(&mut c);

    let second = home();
    std::fs::hard_link(&first.paths.db, &second.paths.db).unwrap();
    let (code, err) = second.refused_serve();
    assert_eq!(code, Some(1), "{err}");
    let name = second.paths.db.display().to_string();
    assert!(
        err.contains(&format!("{name} has 2 links"))
            && err.contains("piw needs its database to have one name")
            && err.contains("Remove the other link")
            && err.contains("copy the file"),
        "{err}"
    );
    // The lock is on the file, not on its name or directory: maintenance through the other
    // name, which does not refuse links, finds it held.
    match lock_installation_with(&second.paths, Links::Allow) {
        Err(HostError::DatabaseInUse { holder, .. }) => {
            assert_eq!(holder, format!("pid {}", host.id()))
        }
        other => panic!("the served file was locked through a hard link: {other:?}"),
    }
    let reset = second.piw(&["state", "reset", "--yes"]).output().unwrap();
    assert_eq!(reset.status.code(), Some(1), "{reset:?}");
    assert!(
        String::from_utf8_lossy(&reset.stderr).contains("already serves the database"),
        "{reset:?}"
    );
    assert!(second.paths.db.exists(), "reset refused: nothing removed");

    // The first host is unharmed: it serves on, every run as it was, and takes new ones.
    assert_eq!(runs(&mut c), before);
    let fourth = first.start_parked(&mut c);
    first.stop(host);

    // Not even the first installation starts a host while the file has two names.
    let (code, err) = first.refused_serve();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("{} has 2 links", first.paths.db.display())),
        "{err}"
    );
    // Reading still works, and says what is wrong.
    let (code, body, err) = diagnose(&first);
    assert_eq!(code, Some(3), "{body} {err}");
    assert_eq!(
        body["findings"][0]["code"],
        json!("database_has_links"),
        "{body}"
    );

    std::fs::remove_file(&second.paths.db).unwrap();
    let host = first.serve();
    let mut c = first.client();
    let after = runs(&mut c);
    assert_eq!(after.len(), 4, "{after:?}");
    for run in &before {
        assert!(after.contains(run), "{run:?} in {after:?}");
    }
    assert!(after
        .iter()
        .any(|(id, status, _)| *id == fourth && status == "waiting"));
    first.stop(host);
    let (code, body, err) = diagnose(&first);
    assert_eq!((code, &body["findings"]), (Some(0), &json!([])), "{err}");
}

/// A `state.sqlite` that is a symbolic link to another installation's database, while that
/// installation's host runs: no second host, no reset, no diagnosis through it.
#[test]
fn a_symlinked_database_of_a_running_host_gets_no_second_host() {
    let first = home();
    let host = first.serve();
    let mut c = first.client();
    let run_id = first.start_parked(&mut c);
    let before = runs(&mut c);
    let second = home();
    std::os::unix::fs::symlink(&first.paths.db, &second.paths.db).unwrap();

    let (code, err) = second.refused_serve();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("already serves the database"), "{err}");
    assert!(
        matches!(
            lock_installation_with(&second.paths, Links::Allow),
            Err(HostError::DatabaseInUse { .. })
        ),
        "the served file was locked through a symbolic link"
    );
    let (code, body, err) = diagnose(&second);
    assert_eq!(code, Some(1), "{body} {err}");
    let said = body["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("already serves the database"), "{body} {err}");
    assert_eq!(runs(&mut c), before);
    assert_eq!(
        run_status(&mut c, &run_id)["run"]["status"],
        json!("waiting")
    );
    first.stop(host);
}

/// What SQLite would do with a link, a FIFO or a second name at `-wal` or `-shm`: follow it,
/// hang or fail with "disk I/O error", or read another name's log (an intact database
/// diagnosed as `database_malformed`). Each is refused by name before SQLite opens anything,
/// by the host and by `diagnose`, and the database is never changed by the refusal.
#[test]
fn files_beside_the_database_that_sqlite_did_not_make_are_refused_by_name() {
    let home = home();
    let host = home.serve();
    let run_id = home.start_parked(&mut home.client());
    home.stop(host);
    let sibling = |suffix: &str| {
        let mut p = home.paths.db.clone().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    };
    // A clean stop leaves the database whole; SQLite's own leftovers go so the plants stand
    // alone.
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(sibling(suffix));
    }
    let stored = digest(&home.paths.db);
    let elsewhere = home.path("elsewhere");
    let other_name = home.path("other-name");

    type Plant = fn(&Path, &Path, &Path);
    let symlink: Plant = |at, elsewhere, _| std::os::unix::fs::symlink(elsewhere, at).unwrap();
    let fifo: Plant = |at, _, _| {
        let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    let hard_link: Plant = |at, _, other| {
        std::fs::write(other, b"").unwrap();
        std::fs::hard_link(other, at).unwrap();
    };
    let cases: [(&str, Plant, &str); 5] = [
        ("-wal", symlink, "is a symlink"),
        ("-shm", symlink, "is a symlink"),
        ("-wal", fifo, "is a FIFO, not a regular file"),
        ("-shm", fifo, "is a FIFO, not a regular file"),
        ("-wal", hard_link, "has 2 links"),
    ];
    for (suffix, plant, problem) in cases {
        let at = sibling(suffix);
        plant(&at, &elsewhere, &other_name);
        let said = format!("{} {problem}", at.display());

        let (code, err) = home.refused_serve();
        assert_eq!(code, Some(1), "{suffix} {problem}: {err}");
        assert!(err.contains(&said), "{said}: {err}");

        let (code, body, err) = diagnose(&home);
        assert_eq!(code, Some(3), "{said}: {body} {err}");
        let findings = body["findings"].as_array().unwrap();
        assert_eq!(findings.len(), 1, "{body}");
        assert_eq!(findings[0]["code"], json!("database_file_unsafe"), "{body}");
        assert!(
            findings[0]["detail"].as_str().unwrap().contains(&said),
            "{said}: {body}"
        );

        assert_eq!(
            digest(&home.paths.db),
            stored,
            "{said}: the database changed"
        );
        assert!(!elsewhere.exists(), "{said}: SQLite followed the link");
        std::fs::remove_file(&at).unwrap();
        let _ = std::fs::remove_file(&other_name);
        for other in ["-wal", "-shm"] {
            assert!(
                std::fs::symlink_metadata(sibling(other)).is_err(),
                "{said}: {other} was made"
            );
        }
    }

    // Once they are gone, the host starts on the same database with its run.
    let host = home.serve();
    let mut c = home.client();
    assert_eq!(
        run_status(&mut c, &run_id)["run"]["status"],
        json!("waiting")
    );
    home.stop(host);
}
