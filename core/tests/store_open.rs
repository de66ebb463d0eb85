//! Opening refuses anything that is not this build's state database, and leaves it untouched.
mod common;

use std::path::Path;

use piw_core::store::{Store, StoreConfig, StoreError, SCHEMA_ID};

fn refuse(path: &Path) -> String {
    let before = std::fs::read(path).expect("read before");
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
