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
//! reveal a commit (reply, event) before that; the host's outbox (`host::outbox`) enforces it.
//! Checkpoints stay safe at `NORMAL`: SQLite fsyncs the WAL before it copies any frame into the
//! database, and the database before it reuses the WAL.
//!
//! [`Store::checkpoint_every`] sets how many WAL pages accumulate before the committing thread
//! copies them into the database (SQLite's auto-checkpoint; 1,000 by default). Each checkpoint
//! fsyncs the database file and copies a page rewritten many times only once, so a writer
//! that commits without waiting for the disk gains from checkpointing less often. (Tried and
//! dropped: passive checkpoints on a second connection and thread. Under steady writes they
//! never catch up with the last commit, so SQLite never reuses the WAL from its start and the
//! writer has to checkpoint anyway; and the extra thread competed for the second core. The
//! host's 64-client throughput fell by about 10 %.)

use super::{Store, StoreError, StoreResult};
use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// Fsyncs the WAL of a store opened with [`Store::defer_wal_sync`]. `Send`: it lives on the
/// thread that waits for the disk.
#[derive(Debug)]
pub struct WalSync {
    path: PathBuf,
    /// Opened at the first sync that finds the file (SQLite creates it at the first write).
    file: Option<File>,
}

impl WalSync {
    /// Makes every commit that returned before this call durable.
    ///
    /// An error means the disk may have lost those commits: nothing committed since the last
    /// successful `sync` may be acknowledged (the host stops; see `host::outbox`).
    pub fn sync(&mut self) -> StoreResult<()> {
        let io = |path: &PathBuf, source| StoreError::Io {
            path: path.clone(),
            source,
        };
        // SQLite removes the WAL only when its last connection closes, after checkpointing
        // it into the database and fsyncing that; a file gone from under us therefore holds
        // nothing that is not durable already. Follow the new one, if any.
        let stale = match &self.file {
            Some(file) => file.metadata().map_err(|e| io(&self.path, e))?.nlink() == 0,
            None => true,
        };
        if stale {
            self.file = match File::open(&self.path) {
                Ok(file) => Some(file),
                // No WAL: no commit since the last checkpoint that closed it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(&self.path, e)),
            };
        }
        match &self.file {
            // fdatasync, as SQLite itself syncs the WAL: the file's data and its size.
            Some(file) => file.sync_data().map_err(|e| io(&self.path, e)),
            None => Ok(()),
        }
    }
}

impl Store {
    #[allow(missing_docs)]
    pub fn exp_autockpt(&mut self, n: i64) {
        let _ = self.conn.pragma_update(None, "wal_autocheckpoint", n);
    }
    /// Commits stop fsyncing the WAL; the returned [`WalSync`] does it instead. See the module
    /// documentation for the rule a caller must then keep.
    pub fn defer_wal_sync(&mut self) -> StoreResult<WalSync> {
        // Everything committed so far was synced at FULL; from here on, `WalSync` covers it.
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        Ok(WalSync {
            path: PathBuf::from(wal),
            file: None,
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
