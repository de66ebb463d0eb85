//! Taking the fsync of the WAL off the writer's thread, and checkpointing less often.
//!
//! By default every [`Store::write`] commits at `synchronous=FULL`: SQLite fsyncs the WAL
//! before `write` returns. The host's store thread does nothing else while it waits for the
//! disk, so at most one batch of commands is ever in flight.
//!
//! A caller that can hold back every acknowledgement until the WAL is on disk may split that
//! wait off: [`Store::defer_wal_sync`] switches the connection to `synchronous=NORMAL` (a
//! commit writes its WAL frames but does not fsync them) and returns a [`WalSync`], whose
//! [`WalSync::sync`] fsyncs the WAL from any thread. What a commit wrote is as durable as at
//! `synchronous=FULL` once a `sync` that started after the commit returned: both put the same
//! frames on disk with the same fsync, only later and from another thread. The caller must not
//! reveal a commit (reply, event) before that; the host's outbox (`driver::outbox`) enforces it.
//! Checkpoints stay safe at `NORMAL`: SQLite fsyncs the WAL before it copies any frame into the
//! database, and the database before it reuses the WAL. Other connections (a viewer, `piw state
//! backup`) can read a commit before its fsync: at `FULL` SQLite publishes a commit to them
//! after the fsync, at `NORMAL` before it.
//!
//! [`Store::checkpoint_every`] sets how many WAL pages accumulate before the committing thread
//! copies them into the database (SQLite's auto-checkpoint; 1,000 by default). Each checkpoint
//! fsyncs the database file and copies a page rewritten many times only once, so a writer
//! that commits without waiting for the disk gains from checkpointing less often. (Tried and
//! dropped: passive checkpoints on a second connection and thread. Under steady writes they
//! never catch up with the last commit, so SQLite never reuses the WAL from its start and the
//! writer has to checkpoint anyway; and the extra thread competed for the second core. The
//! host's 64-client throughput fell by about 10 %.)

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::{Store, StoreError, StoreResult};

/// Fsyncs the WAL of a store opened with [`Store::defer_wal_sync`]. `Send`: it lives on the
/// thread that waits for the disk.
#[derive(Debug)]
pub struct WalSync {
    path: PathBuf,
    /// The store's commit count when its commits stopped being fsynced: those are durable.
    synced_commits: u64,
    /// Opened once, before the first deferred commit: an fd opened later might never learn of
    /// a write-back error that an earlier fsync (SQLite's, in a checkpoint) already consumed.
    file: File,
}

impl WalSync {
    /// The WAL file this handle syncs (where SQLite keeps it: next to the database file after
    /// symbolic links are resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many of the store's commits ([`Storage::commits`](crate::store::Storage::commits)) were durable when the sync was
    /// deferred (they were fsynced at `synchronous=FULL`).
    pub fn synced_commits(&self) -> u64 {
        self.synced_commits
    }

    /// Makes every commit that returned before this call durable: `fdatasync` of the WAL,
    /// which is what SQLite calls at `synchronous=FULL` where the platform has it (its own
    /// builds on Linux). This bundled build falls back to `fsync`, which also writes the
    /// file's timestamps: nothing a commit needs, and one more inode write per sync.
    ///
    /// An error means the disk may have lost those commits: nothing committed since the last
    /// successful `sync` may be acknowledged (the host stops; see `driver::outbox`).
    pub fn sync(&mut self) -> StoreResult<()> {
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.sync_data().map_err(io)?;
        // While the writer's connection is open SQLite never removes its WAL; a WAL gone from
        // under us was removed by someone else, and commits written to it are lost. Checked
        // after the sync, so a removal during it is caught too.
        if self.file.metadata().map_err(io)?.nlink() == 0 {
            return Err(io(std::io::Error::other(
                "the WAL was removed while the store was open",
            )));
        }
        Ok(())
    }
}

impl Store {
    /// Commits stop fsyncing the WAL; the returned [`WalSync`] does it instead. See the module
    /// documentation for the rule a caller must then keep.
    pub fn defer_wal_sync(&mut self) -> StoreResult<WalSync> {
        let io = |path: &Path, source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        // SQLite puts the WAL next to the database file with every symbolic link resolved, as
        // `realpath` does (and paths need not be UTF-8); a read creates it if no connection
        // has yet.
        let db = std::fs::canonicalize(&self.path).map_err(|e| io(&self.path, e))?;
        self.conn
            .query_row("SELECT count(*) FROM schema_info", [], |r| {
                r.get::<_, i64>(0)
            })?;
        let mut wal = db.into_os_string();
        wal.push("-wal");
        let path = PathBuf::from(wal);
        // Read-write, although only fsynced: some network file systems flush only handles
        // that may write.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        // Everything committed so far was synced at FULL; from here on, `WalSync` covers it.
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(WalSync {
            path,
            synced_commits: self.commits,
            file,
        })
    }

    /// Checkpoints the WAL into the database once it holds `frames` pages (SQLite's
    /// auto-checkpoint; 1,000 by default). See the module documentation.
    pub fn checkpoint_every(&mut self, frames: u32) -> StoreResult<()> {
        self.conn
            .pragma_update(None, "wal_autocheckpoint", i64::from(frames))?;
        Ok(())
    }
}
