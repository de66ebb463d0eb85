//! The one-host guard: an installation's lock, and the lock on the database file it serves.
//!
//! Three `flock`s, each held as long as the [`InstallationLock`]:
//!
//! - `$PIW_HOME/host.lock` (never a link followed), which holds the holder's pid: one host per
//!   installation, and what `piw state reset`, `restore` and `diagnose` of a stopped
//!   installation take so that no host starts meanwhile.
//! - The directory that really holds the database (links at `state.sqlite` followed): it
//!   covers a database that does not exist yet, so that two installations linked to one path
//!   cannot both create it.
//! - The database file itself, by its device and inode: any two processes whose databases
//!   are the same file, whatever the paths (symbolic or hard links, bind mounts), cannot both
//!   hold it. A hard link lives in another directory, so the directory lock alone let a second
//!   host serve the same file with its own `-wal`: acknowledged runs were lost at the next
//!   checkpoint and the file was malformed within seconds.
//!
//! Why `flock` on the database, beside SQLite: SQLite locks with POSIX `fcntl` locks, which on
//! Linux are independent of `flock` locks (local file systems; on NFS the kernel emulates
//! `flock` with `fcntl` locks, and SQLite's WAL mode does not work there anyway), so this lock
//! never blocks SQLite, nor SQLite it. `fcntl` locks belong to the process and are all dropped
//! when it closes *any* descriptor of the file; an `flock` belongs to its open file description
//! and stays until that descriptor closes, whatever else the process opens and closes. The
//! other way round, closing this lock's descriptor drops the POSIX locks SQLite holds on the
//! file in this process: the lock must outlive every connection the process has open on it
//! (drop the store first; locals drop in reverse order of declaration).
//!
//! A database file with more than one name is refused to a host ([`Links::Refuse`],
//! [`HostError::DatabaseHasLinks`]): the other name's user gets its own `-wal`. Readers and
//! maintenance (`diagnose`, `state reset`, `restore`) take the lock with [`Links::Allow`]: the
//! lock keeps every other host away while they work, `reset` removing this installation's name
//! is one way out, and a person must be able to read and back up their runs to make the copy
//! the refusal asks for.
//!
//! A dying holder is waited for (up to ten seconds). `piw state reset` holds the lock while it
//! deletes; `piw host stop` returns once the lock is free, the host gone. Holding it proves any
//! earlier host dead, so startup recovery requeues older epochs' runs at once.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::time::{Duration, Instant};

use super::{io_err, HostError};
use crate::paths::PiwPaths;
pub use piw_client::lock::{installation_held, lock_holder};

/// What [`lock_installation_with`] does with a database file that has more than one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Refuse it ([`HostError::DatabaseHasLinks`]): what a host needs.
    Refuse,
    /// Take the lock anyway (readers, `state reset`, `restore`); the caller may warn.
    Allow,
}

/// How long a lock whose holder is dead but still exiting is waited for.
const DYING_HOLDER_WAIT: Duration = Duration::from_secs(10);

/// How often a lock held by a dying process is tried again.
const DYING_HOLDER_POLL: Duration = Duration::from_millis(20);

/// [`lock_installation_with`] for a host: a database with more than one name is refused.
pub fn lock_installation(paths: &PiwPaths) -> Result<InstallationLock, HostError> {
    lock_installation_with(paths, Links::Refuse)
}

/// Takes the installation lock (`$PIW_HOME/host.lock`) or says who holds it, and writes this
/// process's pid into it; then the directory that really holds the database and the database
/// file itself (see the module). The locks live as long as the returned value. A host holds
/// them for its whole life, stop included; `piw state reset` holds them while it deletes the
/// database, so no host can start, run or still be stopping meanwhile.
///
/// A holder whose recorded process is already dead (killed, its leader a zombie) is still
/// exiting: a multi-threaded process's open files, and with them the lock, go only when its
/// last thread has exited, which on a loaded machine can be a while after its main thread
/// shows as dead. Such a lock is waited for, up to [`DYING_HOLDER_WAIT`]; a live holder is
/// reported at once.
///
/// A database that does not exist yet is locked by [`InstallationLock::hold_database`] once it
/// is made; one that is not a regular file is left to the store, which refuses it by name.
pub fn lock_installation_with(
    paths: &PiwPaths,
    links: Links,
) -> Result<InstallationLock, HostError> {
    let deadline = Instant::now() + DYING_HOLDER_WAIT;
    let file = loop {
        match try_lock_installation(paths)? {
            LockAttempt::Locked(file) => break file,
            LockAttempt::Held { pid } => {
                let dying = pid
                    .parse::<u32>()
                    .is_ok_and(|pid| !crate::supervise::process_alive(pid));
                if !dying || Instant::now() >= deadline {
                    return Err(HostError::AlreadyRunning {
                        pid,
                        home: paths.home.display().to_string(),
                    });
                }
                std::thread::sleep(DYING_HOLDER_POLL);
            }
        }
    };
    let dir = crate::paths::database_dir(&paths.db).map_err(io_err(format!(
        "cannot find where {} leads",
        paths.db.display()
    )))?;
    let database_dir = flock_or_wait(&dir, &paths.db, deadline, || File::open(&dir))?;
    let database = match open_database(&paths.db)? {
        Some(db) => {
            check_links(&db, &paths.db, links)?;
            drop(db);
            Some(flock_or_wait(&paths.db, &paths.db, deadline, || {
                open_nonblocking(&paths.db)
            })?)
        }
        None => None,
    };
    Ok(InstallationLock {
        _file: file,
        _database_dir: database_dir,
        database,
        links,
    })
}

/// An installation's lock ([`lock_installation_with`]), held until dropped: `host.lock`, the
/// directory that really holds the database, and the database file once it exists.
#[derive(Debug)]
pub struct InstallationLock {
    _file: File,
    _database_dir: File,
    /// The database file, locked; `None` while it does not exist (or is not a regular file).
    database: Option<File>,
    links: Links,
}

impl InstallationLock {
    /// Locks the database at `db` after the store opened it (and made it, when it did not
    /// exist), and checks that the file locked is the one at `db` now. Until a new database
    /// exists only the directory lock covers it; this closes that gap, so that a hard link made
    /// later cannot carry a second host onto it.
    ///
    /// Call it while the store is open and keep `self` until the store is dropped: the
    /// descriptor opened here must not close before SQLite's (see the module).
    pub fn hold_database(&mut self, db: &Path) -> Result<(), HostError> {
        let now =
            std::fs::metadata(db).map_err(io_err(format!("cannot look at {}", db.display())))?;
        if let Some(locked) = &self.database {
            let meta = locked
                .metadata()
                .map_err(io_err(format!("cannot look at {}", db.display())))?;
            if (meta.dev(), meta.ino()) != (now.dev(), now.ino()) {
                return Err(io_err(format!("cannot serve {}", db.display()))(
                    std::io::Error::other("the file was replaced while the host opened it"),
                ));
            }
            return check_links(locked, db, self.links);
        }
        let Some(file) = open_database(db)? else {
            return Err(io_err(format!("cannot open {}", db.display()))(
                std::io::ErrorKind::NotFound.into(),
            ));
        };
        check_links(&file, db, self.links)?;
        match file.try_lock() {
            Ok(()) => {
                self.database = Some(file);
                Ok(())
            }
            Err(std::fs::TryLockError::WouldBlock) => Err(in_use(db, db)),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(io_err(format!("cannot lock {}", db.display()))(e))
            }
        }
    }
}

/// Opens the database file at `db` (a link followed) to lock it: `None` when it does not
/// exist or is not a regular file (the store refuses that by name). Read-only and
/// non-blocking: a FIFO there must not hang the caller with the installation locked.
fn open_database(db: &Path) -> Result<Option<File>, HostError> {
    let file = match open_nonblocking(db) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(format!("cannot open {}", db.display()))(e)),
    };
    let meta = file
        .metadata()
        .map_err(io_err(format!("cannot look at {}", db.display())))?;
    Ok(meta.is_file().then_some(file))
}

/// `path` opened read-only without waiting on a FIFO (a link followed).
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// [`HostError::DatabaseHasLinks`] when `links` says so and the file has more than one name.
fn check_links(file: &File, db: &Path, links: Links) -> Result<(), HostError> {
    let count = file
        .metadata()
        .map_err(io_err(format!("cannot look at {}", db.display())))?
        .nlink();
    if links == Links::Refuse && count > 1 {
        return Err(HostError::DatabaseHasLinks {
            db: db.display().to_string(),
            links: count,
        });
    }
    Ok(())
}

fn in_use(locked: &Path, db: &Path) -> HostError {
    let holders = crate::supervise::flock_holders(locked).unwrap_or_default();
    HostError::DatabaseInUse {
        holder: match holders.first() {
            Some(pid) => format!("pid {pid}"),
            None => "another process".into(),
        },
        locked: if locked == db {
            "the file itself is locked, whatever path leads to it".into()
        } else {
            format!(
                "{}, the directory that really holds it, is locked",
                locked.display()
            )
        },
        db: db.display().to_string(),
    }
}

/// An exclusive `flock` on the file `open` opens (`path`, for the holders in `/proc/locks`),
/// waiting until `deadline` for holders that are all dead but still exiting. A live holder is
/// reported at once ([`HostError::DatabaseInUse`]).
fn flock_or_wait(
    path: &Path,
    db: &Path,
    deadline: Instant,
    open: impl Fn() -> std::io::Result<File>,
) -> Result<File, HostError> {
    loop {
        let handle = open().map_err(io_err(format!("cannot open {}", path.display())))?;
        match handle.try_lock() {
            Ok(()) => return Ok(handle),
            Err(std::fs::TryLockError::WouldBlock) => {
                let holders = crate::supervise::flock_holders(path).unwrap_or_default();
                let dying = !holders.is_empty()
                    && holders
                        .iter()
                        .all(|&pid| !crate::supervise::process_alive(pid));
                if !dying || Instant::now() >= deadline {
                    return Err(in_use(path, db));
                }
                std::thread::sleep(DYING_HOLDER_POLL);
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io_err(format!("cannot lock {}", path.display()))(e))
            }
        }
    }
}

enum LockAttempt {
    Locked(File),
    /// Another process holds the lock; `pid` is what the file says (at most 20 characters).
    Held {
        pid: String,
    },
}

fn try_lock_installation(paths: &PiwPaths) -> Result<LockAttempt, HostError> {
    // Never a link (its target would be truncated below) nor anything but a regular file.
    let mut file = crate::paths::open_installation_file(
        &paths.lock,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600),
    )
    .map_err(io_err(format!("cannot open {}", paths.lock.display())))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Ok(LockAttempt::Held {
                pid: pid.trim().chars().take(20).collect::<String>(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(io_err(format!("cannot lock {}", paths.lock.display()))(e))
        }
    }
    file.set_len(0)
        .map_err(io_err("cannot write the lock file"))?;
    file.seek(SeekFrom::Start(0))
        .map_err(io_err("cannot write the lock file"))?;
    writeln!(file, "{}", std::process::id()).map_err(io_err("cannot write the lock file"))?;
    file.sync_all()
        .map_err(io_err("cannot write the lock file"))?;
    Ok(LockAttempt::Locked(file))
}
