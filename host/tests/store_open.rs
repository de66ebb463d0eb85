//! Opening refuses anything that is not this build's state database, and leaves it untouched.
mod common;

use piw_host::store::prelude::*;
use std::path::Path;

use piw_host::store::{Store, StoreConfig, StoreError, SCHEMA_ID};

/// The names in `path`'s directory, sorted.
fn listing(path: &Path) -> Vec<String> {
    let dir = path.parent().expect("a file in a directory");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list the directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn refuse(path: &Path) -> String {
    let before = std::fs::read(path).expect("read before");
    let files_before = listing(path);
    let err = Store::open(path, StoreConfig::default()).expect_err("must refuse");
    assert!(
        matches!(err, StoreError::IncompatibleDatabase { .. }),
        "{err:?}"
    );
    let after = std::fs::read(path).expect("read after");
    assert_eq!(
        before, after,
        "the refused file must be byte-for-byte unchanged"
    );
    assert_eq!(
        listing(path),
        files_before,
        "nothing is created next to a refused file (no -wal, no -shm)"
    );
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "names the file: {text}"
    );
    assert!(
        text.contains("left untouched"),
        "says it was left untouched: {text}"
    );
    assert!(
        text.contains("piw state reset") && text.contains(".bak"),
        "gives the backup-and-reset instruction: {text}"
    );
    // Read-only opening refuses the same way.
    assert!(matches!(
        Store::open_read_only(path, StoreConfig::default()),
        Err(StoreError::IncompatibleDatabase { .. })
    ));
    assert_eq!(std::fs::read(path).expect("read again"), before);
    assert_eq!(
        listing(path),
        files_before,
        "read-only: nothing created either"
    );
    text
}

#[test]
fn zero_length_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    std::fs::write(&path, b"").unwrap();
    assert!(refuse(&path).contains("empty"));
}

#[test]
fn non_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    std::fs::write(&path, b"this is a text file, not a database at all").unwrap();
    assert!(refuse(&path).contains("not an SQLite database"));
}

#[test]
fn foreign_sqlite_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'x');")
            .unwrap();
    }
    assert!(refuse(&path).contains("not a piw state database"));
}

fn tamper(path: &Path, sql: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(sql).unwrap();
    // Leave no WAL behind, so the file alone holds the state.
    c.pragma_update(None, "journal_mode", "DELETE").unwrap();
}

#[test]
fn other_ddl_digest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    drop(Store::open(&path, StoreConfig::default()).unwrap());
    tamper(&path, "UPDATE schema_info SET ddl_digest = 'deadbeef'");
    assert!(refuse(&path).contains("deadbeef"));
}

#[test]
fn other_schema_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    drop(Store::open(&path, StoreConfig::default()).unwrap());
    tamper(&path, "UPDATE schema_info SET schema_id = 'piw.state.v0'");
    let text = refuse(&path);
    assert!(text.contains("piw.state.v0") && text.contains(SCHEMA_ID));
}

/// Changes a piw database the way another build's host would leave it: still in WAL mode
/// (the mode every piw database is in), its WAL checkpointed and removed on close.
fn tamper_keeping_wal_mode(path: &Path, sql: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(sql).unwrap();
    let mode: String = c
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(c);
    assert_eq!(listing(path), ["state.sqlite"], "the writer cleaned up");
}

/// A database in WAL mode makes even a read-only SQLite connection create `-wal` and `-shm`
/// files beside it; a refused one must not get them (`refuse` compares the file list).
#[test]
fn a_refused_database_in_wal_mode_gets_no_files_beside_it() {
    // Another build's piw database.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    drop(Store::open(&path, StoreConfig::default()).unwrap());
    tamper_keeping_wal_mode(&path, "UPDATE schema_info SET ddl_digest = 'deadbeef'");
    assert!(refuse(&path).contains("deadbeef"));

    // A foreign SQLite database in WAL mode.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    tamper_keeping_wal_mode(
        &path,
        "PRAGMA journal_mode = WAL; CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);",
    );
    assert!(refuse(&path).contains("not a piw state database"));

    // A piw database whose header is corrupt past the magic string (an impossible page size).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    drop(Store::open(&path, StoreConfig::default()).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[18..20], [2, 2], "the header says WAL mode");
    bytes[16..18].copy_from_slice(&3u16.to_be_bytes());
    std::fs::write(&path, &bytes).unwrap();
    assert!(refuse(&path).contains("SQLite cannot read it"));
}

/// Copies a database and its `-wal` and `-shm` files from `from` to `to`, as a host that
/// crashed would leave them.
fn copy_as_crashed(from: &Path, to: &Path) {
    for name in ["state.sqlite", "state.sqlite-wal", "state.sqlite-shm"] {
        std::fs::copy(from.join(name), to.join(name)).unwrap();
    }
}

/// Committed pages that a crashed host left in the `-wal` file are part of the database: the
/// check before opening reads them too (it does not read the main file alone when a `-wal`
/// file is there).
#[test]
fn a_database_a_host_left_with_its_wal_is_judged_with_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    let mut s = Store::open(&path, StoreConfig::default()).unwrap();
    let run_id = s.write(|w| w.start_run(&common::new_run(None))).unwrap();
    let healthy = tempfile::tempdir().unwrap();
    copy_as_crashed(dir.path(), healthy.path());
    // Another build's digest, committed into the WAL only (the store keeps it from being
    // checkpointed on close).
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE schema_info SET ddl_digest = 'deadbeef'", [])
        .unwrap();
    drop(c);
    let tampered = tempfile::tempdir().unwrap();
    copy_as_crashed(dir.path(), tampered.path());
    drop(s);

    let copy = healthy.path().join("state.sqlite");
    let ro = Store::open_read_only(&copy, StoreConfig::default()).unwrap();
    assert_eq!(ro.run(&run_id).unwrap().run_id, run_id);
    drop(ro);
    let rw = Store::open(&copy, StoreConfig::default()).unwrap();
    assert_eq!(rw.run(&run_id).unwrap().run_id, run_id);

    let err = Store::open(tampered.path().join("state.sqlite"), StoreConfig::default())
        .expect_err("the digest in the WAL is another build's");
    assert!(err.to_string().contains("deadbeef"), "{err}");
}

#[test]
fn a_new_database_is_created_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    let run_id = {
        let mut s = Store::open(&path, StoreConfig::default()).unwrap();
        s.write(|w| w.start_run(&common::new_run(None))).unwrap()
    };
    let s = Store::open(&path, StoreConfig::default()).unwrap();
    assert_eq!(s.run(&run_id).unwrap().run_id, run_id);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("creating"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary creation file is left behind"
    );
    let mut ro = Store::open_read_only(&path, StoreConfig::default()).unwrap();
    assert!(
        ro.write(|w| w.start_run(&common::new_run(None))).is_err(),
        "read-only store refuses writes"
    );
}

/// The check before opening names the file in an SQLite URI: characters that mean something
/// in a URI (`?`, `#`, `%`, a space) are escaped, so such a directory works like any other.
#[test]
fn a_database_in_a_directory_with_uri_characters_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("a?b#c%20d e");
    std::fs::create_dir(&odd).unwrap();
    let path = odd.join("state.sqlite");
    let run_id = {
        let mut s = Store::open(&path, StoreConfig::default()).unwrap();
        s.write(|w| w.start_run(&common::new_run(None))).unwrap()
    };
    assert_eq!(listing(&path), ["state.sqlite"]);
    let s = Store::open(&path, StoreConfig::default()).unwrap();
    assert_eq!(s.run(&run_id).unwrap().run_id, run_id);
}

/// A FIFO at the database's path is refused at once, by a writer and by a reader alike:
/// opening it would wait for ever for a writer to appear.
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let opener = path.clone();
    std::thread::spawn(move || {
        let rw = Store::open(&opener, StoreConfig::default()).map(|_| ());
        let ro = Store::open_read_only(&opener, StoreConfig::default()).map(|_| ());
        let _ = tx.send((rw, ro));
    });
    // A bound on a hang, not a speed check.
    let (rw, ro) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("opening a FIFO must not block");
    for err in [rw.unwrap_err(), ro.unwrap_err()] {
        assert!(
            err.to_string().contains("is a FIFO, not a regular file"),
            "{err}"
        );
    }
}
