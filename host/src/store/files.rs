//! The files SQLite opens beside the database (`-wal`, `-shm`), checked before it opens any:
//! SQLite follows a symbolic link there, blocks or fails on a FIFO, and shares a file that has
//! another name with whoever uses that name. Each case made an intact database look malformed
//! (`diagnose`) or fail with "disk I/O error"; each is refused by name instead
//! ([`StoreError::UnsafeFile`]), and nothing is opened or changed.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::{FileProblem, StoreError, StoreResult};

/// `diagnose`'s finding (no run) for a file beside the database that is refused
/// ([`StoreError::UnsafeFile`]): SQLite never opened the database.
pub const DATABASE_FILE_UNSAFE: &str = "database_file_unsafe";

/// `diagnose`'s finding (no run) for a database file with more than one name.
pub const DATABASE_HAS_LINKS: &str = "database_has_links";

/// The files beside a database that SQLite makes and opens itself.
pub const SIBLING_SUFFIXES: [&str; 2] = ["-wal", "-shm"];

/// What is wrong with a file of this kind and link count, if anything. Pure: the decision
/// without the `lstat`.
pub fn decide(symlink: bool, regular: bool, kind: &'static str, links: u64) -> Option<FileProblem> {
    if symlink {
        Some(FileProblem::Symlink)
    } else if !regular {
        Some(FileProblem::NotRegular { kind })
    } else if links > 1 {
        Some(FileProblem::Links { links })
    } else {
        None
    }
}

/// [`decide`] for a file's own metadata (not followed through a link).
pub fn problem_of(meta: &std::fs::Metadata) -> Option<FileProblem> {
    let kind = meta.file_type();
    decide(
        kind.is_symlink(),
        kind.is_file(),
        crate::paths::file_kind(&kind),
        meta.nlink(),
    )
}

/// Refuses the database at `db` when a file SQLite would open beside it is not one SQLite made
/// ([`decide`]). SQLite resolves a link at the database's own name and keeps its files beside
/// the file it leads to, so those are the ones checked. A missing file is fine: SQLite makes
/// it.
pub fn check_siblings(db: &Path) -> StoreResult<()> {
    let real = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
    for suffix in SIBLING_SUFFIXES {
        let path = with_suffix(&real, suffix);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        if let Some(problem) = problem_of(&meta) {
            return Err(StoreError::UnsafeFile {
                db: db.to_path_buf(),
                path,
                problem,
            });
        }
    }
    Ok(())
}

/// How many names (hard links) the database at `db` has (a link at `db` is followed); `None`
/// when it cannot be read (it does not exist).
pub fn database_links(db: &Path) -> Option<u64> {
    std::fs::metadata(db).ok().map(|m| m.nlink())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_with_one_name_passes() {
        assert_eq!(decide(false, true, "a regular file", 1), None);
        assert_eq!(
            decide(true, false, "a symbolic link", 1),
            Some(FileProblem::Symlink)
        );
        assert_eq!(
            decide(false, false, "a FIFO", 1),
            Some(FileProblem::NotRegular { kind: "a FIFO" })
        );
        assert_eq!(
            decide(false, true, "a regular file", 2),
            Some(FileProblem::Links { links: 2 })
        );
        assert_eq!(FileProblem::Symlink.to_string(), "is a symlink");
        assert_eq!(
            FileProblem::NotRegular { kind: "a FIFO" }.to_string(),
            "is a FIFO, not a regular file"
        );
        assert_eq!(FileProblem::Links { links: 2 }.to_string(), "has 2 links");
    }

    #[test]
    fn links_and_fifos_beside_the_database_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.sqlite");
        std::fs::write(&db, b"x").unwrap();
        assert!(check_siblings(&db).is_ok(), "no siblings");
        let wal = with_suffix(&db, "-wal");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &wal).unwrap();
        let err = check_siblings(&db).unwrap_err().to_string();
        assert!(err.contains("state.sqlite-wal is a symlink"), "{err}");
        std::fs::remove_file(&wal).unwrap();
        std::fs::write(&wal, b"").unwrap();
        std::fs::hard_link(&wal, dir.path().join("other")).unwrap();
        let err = check_siblings(&db).unwrap_err().to_string();
        assert!(err.contains("state.sqlite-wal has 2 links"), "{err}");
    }
}
