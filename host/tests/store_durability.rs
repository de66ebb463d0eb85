//! The store's split-off commit work (`store::durability`): the WAL fsync done by a `WalSync`
//! instead of at each commit, and the checkpoint interval.

use std::path::Path;

use piw_host::store::*;
use serde_json::json;

/// A WAL frame: its 24-byte header and one 4 KiB page.
const FRAME: u64 = 4096 + 24;

fn new_run(i: usize) -> NewRun {
    NewRun {
        workflow_name: format!("w{i}"),
        source_root: format!("/tmp/w{i}.workflow.json"),
        source_hash: "abc".into(),
        mounted_sources: json!({}),
        definition: None,
        // About one page of input per run, so each commit writes a few fresh pages.
        input: json!({ "blob": "x".repeat(3_000) }),
        origin_session: None,
        execution_mode: ExecutionMode::Detached,
        project_dir: "/tmp".into(),
    }
}

fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    p.into()
}

fn wal_len(db: &Path) -> u64 {
    std::fs::metadata(wal_path(db))
        .map(|m| m.len())
        .unwrap_or(0)
}

#[test]
fn the_wal_is_checkpointed_at_the_interval_set() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.sqlite");
    let mut store = Store::open(&db, StoreConfig::default()).unwrap();
    store.checkpoint_every(100).unwrap();
    let _wal = store.defer_wal_sync().unwrap();
    let mut largest = 0;
    // Enough to pass SQLite's default interval (1,000 pages) several times over.
    for i in 0..1_500 {
        store.write(|w| w.start_run(&new_run(i))).unwrap();
        largest = largest.max(wal_len(&db));
    }
    // A commit here writes about 16 pages (the run's row and input, the runs table's indexes),
    // and the WAL may pass the interval by up to two commits before the checkpoint resets it:
    // far below SQLite's default of 1,000 pages, which this test tells apart.
    let bound = 140 * FRAME + 32;
    assert!(
        largest <= bound,
        "the WAL grew to {largest} bytes, past {bound}"
    );
    assert!(
        largest >= 100 * FRAME,
        "too little written to tell ({largest} bytes)"
    );
}

#[test]
fn commits_with_a_deferred_wal_sync_are_counted_and_synced_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.sqlite");
    let mut store = Store::open(&db, StoreConfig::default()).unwrap();
    store.write(|w| w.start_run(&new_run(0))).unwrap();
    let mut wal = store.defer_wal_sync().unwrap();
    let before = store.commits();
    assert_eq!(
        wal.synced_commits(),
        before,
        "what was committed at FULL is durable"
    );
    for i in 1..=3 {
        store.write(|w| w.start_run(&new_run(i))).unwrap();
    }
    // A failed write is no commit.
    let failed: StoreResult<()> = store.write(|_| Err(StoreError::InvalidInput("nothing".into())));
    assert!(failed.is_err());
    assert_eq!(store.commits(), before + 3);
    wal.sync().expect("the WAL syncs from a handle of its own");
    let other = std::thread::spawn(move || wal.sync().map(|()| wal));
    other.join().unwrap().expect("and from another thread");
    drop(store);
    let store = Store::open_read_only(&db, StoreConfig::default()).unwrap();
    assert_eq!(store.list_runs(None, u32::MAX).unwrap().len(), 4);
}

#[test]
fn the_wal_synced_is_the_one_sqlite_writes_also_through_a_symbolic_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.sqlite");
    drop(Store::open(&real, StoreConfig::default()).unwrap());
    let link = dir.path().join("state.sqlite");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    let mut store = Store::open(&link, StoreConfig::default()).unwrap();
    let mut wal = store.defer_wal_sync().unwrap();
    store.write(|w| w.start_run(&new_run(0))).unwrap();
    // SQLite keeps the WAL next to the file the link points to.
    assert_eq!(wal.path(), wal_path(&real));
    assert!(!wal_path(&link).exists());
    assert!(wal_len(&real) > 0, "the commit went to that WAL");
    wal.sync().unwrap();
}

#[test]
fn a_wal_removed_from_under_the_store_fails_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.sqlite");
    let mut store = Store::open(&db, StoreConfig::default()).unwrap();
    let mut wal = store.defer_wal_sync().unwrap();
    store.write(|w| w.start_run(&new_run(0))).unwrap();
    std::fs::remove_file(wal_path(&db)).unwrap();
    let err = wal
        .sync()
        .expect_err("commits in a removed WAL are not durable");
    assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
}

#[test]
fn a_store_whose_path_is_not_utf8_defers_its_sync() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(std::ffi::OsStr::from_bytes(b"h\xffome"));
    std::fs::create_dir(&home).unwrap();
    let db = home.join("state.sqlite");
    let mut store = Store::open(&db, StoreConfig::default()).unwrap();
    let mut wal = store.defer_wal_sync().unwrap();
    store.write(|w| w.start_run(&new_run(0))).unwrap();
    assert_eq!(wal.path(), wal_path(&db));
    wal.sync().unwrap();
}
