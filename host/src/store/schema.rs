//! The DDL, its digest, and the checks that decide whether a file may be opened.
//!
//! Alpha policy (docs/RULES.md, "Alpha state"): there are no migrations. A file whose schema id or DDL digest
//! differs from this build's is refused and left byte-for-byte untouched, with one instruction:
//! back it up, then `piw state reset`.

use std::fs;
use std::io::Read as _;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension as _};

use super::{StoreError, StoreResult};
use crate::ids::sha256_hex;

/// The schema id. It stays `piw.state.v1` for the whole alpha.
pub const SCHEMA_ID: &str = "piw.state.v1";

/// The DDL this build creates and expects.
pub const DDL: &str = include_str!("schema.sql");

/// SHA-256 of [`DDL`], stored in `schema_info` and compared on every open.
pub fn ddl_digest() -> String {
    sha256_hex(DDL.as_bytes())
}

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

fn incompatible(path: &Path, detail: impl Into<String>) -> StoreError {
    StoreError::IncompatibleDatabase {
        path: path.to_path_buf(),
        detail: detail.into(),
        instruction: reset_instruction(path),
    }
}

/// The instruction every refused database error ends with: a command that works as printed
/// (quoted paths) and keeps every commit (the `-wal` file too, when there is one: a host that
/// crashed leaves its last commits there).
fn reset_instruction(path: &std::path::Path) -> String {
    let with = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        crate::paths::shell_quoted(std::path::Path::new(&p))
    };
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let copy_wal = if std::path::Path::new(&wal).exists() {
        format!(" && cp {} {}", with("-wal"), with(".bak-wal"))
    } else {
        String::new()
    };
    format!(
        "The file was left untouched. To start over, back it up and reset: \
         `cp {} {}{copy_wal} && piw state reset --yes` (the backup keeps every run for inspection).",
        with(""),
        with(".bak"),
    )
}

/// Decides, without writing anything, whether the existing file at `path` is a piw state
/// database of this build. Opens the file read-only; never creates or changes it, and creates
/// nothing next to it ([`open_for_check`]).
pub(crate) fn check_existing(path: &Path) -> StoreResult<()> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Only a regular file (a link to one is followed): opening a FIFO would wait for ever for
    // a writer, with the installation locked.
    let kind = fs::metadata(path).map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "it is {}, not a regular file; piw keeps its state database there (remove it)",
                crate::paths::file_kind(&kind)
            ),
        )));
    }
    let mut header = [0u8; 16];
    let mut file = fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len == 0 {
        return Err(incompatible(path, "the file is empty (zero bytes)"));
    }
    if len < 16 || file.read_exact(&mut header).is_err() || &header != SQLITE_MAGIC {
        return Err(incompatible(path, "the file is not an SQLite database"));
    }
    drop(file);

    let conn = open_for_check(path)
        .map_err(|e| incompatible(path, format!("SQLite cannot read it: {e}")))?;
    let has_info: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_info')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| incompatible(path, format!("SQLite cannot read it: {e}")))?;
    if !has_info {
        return Err(incompatible(
            path,
            "it is an SQLite database but not a piw state database (no schema_info table)",
        ));
    }
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT schema_id, ddl_digest FROM schema_info WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(|e| incompatible(path, format!("its schema_info is unreadable: {e}")))?;
    let Some((schema_id, digest)) = row else {
        return Err(incompatible(path, "its schema_info table is empty"));
    };
    if schema_id != SCHEMA_ID {
        return Err(incompatible(
            path,
            format!("it has schema id {schema_id:?}, this piw expects {SCHEMA_ID:?}"),
        ));
    }
    let expected = ddl_digest();
    if digest != expected {
        return Err(incompatible(
            path,
            format!(
                "its schema digest {digest} differs from this piw's {expected} \
                 (it was written by another build of piw)"
            ),
        ));
    }
    Ok(())
}

/// A read-only connection for [`check_existing`] that creates nothing next to `path`.
///
/// A database in WAL mode (every piw database, and many foreign ones) makes even a read-only
/// connection create `-wal` and `-shm` files beside it, which it then cannot remove: a refused
/// file would be left with stray siblings. Without a `-wal` file the main file alone is the
/// whole database, so it is read as `immutable` (no locks, no WAL, no shared memory, nothing
/// created). The installation lock keeps other writers away while a host opens it; a viewer
/// that reads next to a running host finds that host's `-wal` and takes the other branch.
/// With a `-wal` file (a running host, or a writer that crashed) its committed pages are part
/// of the database, so it is read through SQLite's WAL machinery like any reader; the sibling
/// files are then already there.
fn open_for_check(path: &Path) -> rusqlite::Result<Connection> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if Path::new(&wal).exists() {
        return Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY);
    }
    Connection::open_with_flags(
        immutable_uri(path),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
}

/// `path` as an SQLite `file:` URI with `immutable=1`. Every byte outside a small safe set is
/// percent-encoded, so `?`, `#`, `%` and non-UTF-8 bytes in the path keep their meaning.
fn immutable_uri(path: &Path) -> String {
    use std::fmt::Write as _;
    let bytes = path.as_os_str().as_encoded_bytes();
    // An absolute path gets an empty authority (`file:///...`), so a path starting with `//`
    // is never read as a host name.
    let mut uri = String::from(if path.is_absolute() {
        "file://"
    } else {
        "file:"
    });
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            let _ = write!(uri, "%{b:02X}");
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Creates a new database at `path` atomically: the schema is written to a temporary file in
/// the same directory, synced, and renamed into place, so a crash never leaves a half-made file
/// at `path` that later opens would refuse.
/// A new database's cursor key: 32 bytes of the store's id source, as hex.
fn new_cursor_key(ids: &super::SharedIds) -> String {
    let mut bytes = [0u8; 32];
    ids.lock()
        .unwrap_or_else(|e| e.into_inner())
        .fill(&mut bytes);
    hex::encode(bytes)
}

/// The cursor key of the database `conn` opened.
pub(crate) fn cursor_key(conn: &Connection) -> StoreResult<crate::protocol::payload::CursorKey> {
    let text: String =
        conn.query_row("SELECT cursor_key FROM schema_info WHERE id = 1", [], |r| {
            r.get(0)
        })?;
    let mut key = [0u8; 32];
    hex::decode_to_slice(&text, &mut key)
        .map_err(|e| StoreError::InvalidInput(format!("the database's cursor key: {e}")))?;
    Ok(crate::protocol::payload::CursorKey(key))
}

pub(crate) fn create_new(path: &Path, now_ms: i64, ids: &super::SharedIds) -> StoreResult<()> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!(
        ".{}.creating-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("state"),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    {
        let mut conn = Connection::open(&tmp)?;
        conn.pragma_update(None, "journal_mode", "DELETE")?;
        // Before the first table: only an empty database takes it. A prune's freed pages
        // then go back to the file system (`WriteTx::reclaim_free_pages`).
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        let tx = conn.transaction()?;
        tx.execute_batch(DDL)?;
        tx.execute(
            "INSERT INTO schema_info (id, schema_id, ddl_digest, created_at, cursor_key)
             VALUES (1, ?1, ?2, ?3, ?4)",
            rusqlite::params![SCHEMA_ID, ddl_digest(), now_ms, new_cursor_key(ids)],
        )?;
        tx.commit()?;
    }
    // Every run's input and output is in here: its owner's only, whatever the umask (SQLite
    // gives the -wal and -shm files the database file's mode).
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    // hard_link fails if another process created the file meanwhile; then we use theirs.
    match fs::hard_link(&tmp, path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(io(e));
        }
    }
    let _ = fs::remove_file(&tmp);
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_instruction_copies_the_wal_when_there_is_one_and_quotes_paths() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("it's").join("state.sqlite");
        let plain = reset_instruction(&db);
        assert!(plain.contains(r"it'\''s/state.sqlite' "), "{plain}");
        assert!(!plain.contains("-wal"), "{plain}");
        std::fs::create_dir(db.parent().unwrap()).unwrap();
        std::fs::write(&db, "").unwrap();
        let mut wal = db.clone().into_os_string();
        wal.push("-wal");
        std::fs::write(&wal, "").unwrap();
        let with_wal = reset_instruction(&db);
        assert!(
            with_wal.contains(r"state.sqlite-wal' '") && with_wal.contains("state.sqlite.bak-wal'"),
            "{with_wal}"
        );
    }
}
