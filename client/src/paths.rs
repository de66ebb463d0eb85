//! Where an installation lives: `$PIW_HOME` (default `~/.pi/agent/piw`; `~/.pi/agent/workflows/`
//! holds the user's workflow files), its database,
//! lock, log and socket. The socket moves to a shorter per-user runtime path when
//! `$PIW_HOME/host.sock` would exceed the platform's `sun_path` limit.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::ids::sha256_hex;

/// `sun_path` is 108 bytes on Linux including the terminating NUL; keep a margin.
pub const MAX_SOCKET_PATH_BYTES: usize = 100;

/// Why the installation cannot be found from the environment.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    #[error("neither PIW_HOME nor HOME is set")]
    NoHome,
    /// A relative `PIW_HOME` (or `HOME`, when `PIW_HOME` is unset) would be resolved against
    /// each process's working directory: a host started from one directory and a client run
    /// in another would each use an installation of their own, silently. Refused instead.
    #[error("{var} must be an absolute path, got {}", .value.display())]
    RelativeHome {
        /// The environment variable: `PIW_HOME` or `HOME`.
        var: &'static str,
        value: PathBuf,
    },
}

/// The files of one installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiwPaths {
    /// The installation directory (mode 0700).
    pub home: PathBuf,
    /// `state.sqlite`: the durable state.
    pub db: PathBuf,
    /// `host.lock`: held exclusively (flock) for the host's whole life; holds its pid.
    pub lock: PathBuf,
    /// `host.log`: where an on-demand host writes its log.
    pub log: PathBuf,
    /// `logs/`: each run's child output, `logs/<run_id>/<child_epoch>.log` (`piw logs`).
    pub logs: PathBuf,
    /// The Unix socket clients connect to.
    pub socket: PathBuf,
}

impl PiwPaths {
    /// Resolves the installation from `PIW_HOME`, else `$HOME/.pi/agent/piw`. Either
    /// must be an absolute path ([`PathsError::RelativeHome`]).
    pub fn from_env() -> Result<Self, PathsError> {
        Self::from_vars(std::env::var_os("PIW_HOME"), std::env::var_os("HOME"))
    }

    /// [`PiwPaths::from_env`] given the values of `PIW_HOME` and `HOME` (an empty value counts
    /// as unset).
    pub fn from_vars(
        piw_home: Option<OsString>,
        home: Option<OsString>,
    ) -> Result<Self, PathsError> {
        let absolute = |var: &'static str, value: OsString| {
            let value = PathBuf::from(value);
            if value.is_absolute() {
                Ok(value)
            } else {
                Err(PathsError::RelativeHome { var, value })
            }
        };
        if let Some(piw_home) = piw_home.filter(|v| !v.is_empty()) {
            return Ok(Self::for_home(absolute("PIW_HOME", piw_home)?));
        }
        let user_home = home.filter(|v| !v.is_empty()).ok_or(PathsError::NoHome)?;
        Ok(Self::for_home(
            absolute("HOME", user_home)?.join(".pi/agent/piw"),
        ))
    }

    /// The paths of the installation at `home`, made absolute (a relative `home` against this
    /// process's working directory: the caller chose it), without `.` components or a
    /// trailing slash, so those spellings of one directory find the same socket. `..` is left
    /// to the file system: after a symbolic link it does not mean the lexical parent.
    pub fn for_home(home: PathBuf) -> Self {
        let home = normalize(&std::path::absolute(&home).unwrap_or(home));
        let preferred = home.join("host.sock");
        let socket = if preferred.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
            preferred
        } else {
            short_socket_path(&home)
        };
        Self {
            db: home.join("state.sqlite"),
            lock: home.join("host.lock"),
            log: home.join("host.log"),
            logs: home.join("logs"),
            socket,
            home,
        }
    }

    /// Creates the installation directory (and the socket's directory) with mode 0700, and
    /// tightens the mode of an existing one.
    pub fn ensure_dirs(&self) -> io::Result<()> {
        make_private_dir(&self.home)?;
        if let Some(dir) = self.socket.parent() {
            make_private_dir(dir)?;
        }
        Ok(())
    }
}

/// Opens a file the installation itself keeps (`host.lock`, `host.log`) with `options`,
/// without following a symbolic link and without blocking on a FIFO: anything but a regular
/// file there is refused with a message that says what it is. piw writes nothing outside its
/// installation through a link planted at one of its names.
pub fn open_installation_file(
    path: &Path,
    options: &mut std::fs::OpenOptions,
) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let opened = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(not_a_regular_file(path, "a symbolic link"))
        }
        // A FIFO without a reader, opened for writing only.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(not_a_regular_file(path, "a FIFO"))
        }
        Err(e) => return Err(e),
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_a_regular_file(path, file_kind(&kind)));
    }
    // Regular files never block; the flag only kept the open from waiting on a FIFO.
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        use std::os::fd::AsRawFd as _;
        let fd = file.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// What a file of this type is, in words.
pub fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

fn not_a_regular_file(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}, not a regular file; piw keeps only its own files there and follows no link it finds at their names (remove it)",
            path.display()
        ),
    )
}

/// The directory that really holds the database at `db`: symbolic links at `db` itself are
/// followed (also to a file that does not exist yet), then the directory is made canonical.
/// Two installations whose databases are one file find the same directory.
pub fn database_dir(db: &Path) -> io::Result<PathBuf> {
    let mut target = db.to_path_buf();
    // As many links as the kernel follows in one lookup.
    for _ in 0..40 {
        match std::fs::read_link(&target) {
            Ok(next) => {
                target = match target.parent() {
                    Some(dir) if next.is_relative() => dir.join(next),
                    _ => next,
                }
            }
            Err(_) => break,
        }
    }
    let dir = target.parent().unwrap_or_else(|| Path::new("/"));
    std::fs::canonicalize(dir)
}

/// `path` without `.` components and without a trailing slash (what `Path::components`
/// drops).
fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

fn make_private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        // Something that is not a directory is in the way: the check below says what.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => other?,
    }
    // The directory may have existed before, made by someone else: the socket's fallback
    // directory lies in `/tmp`, where any user can create `/tmp/piw-<uid>` first. A socket in
    // a directory another user controls (or reached through a link another user can swap)
    // could be replaced by theirs, so such a directory is refused rather than used, and its
    // mode is left alone. A link of one's own to a directory of one's own (dotfiles) is fine.
    let link = std::fs::symlink_metadata(dir)?;
    let target = std::fs::metadata(dir)?;
    use std::os::unix::fs::MetadataExt as _;
    check_private_dir(
        dir,
        link.file_type().is_symlink().then(|| link.uid()),
        target.is_dir(),
        target.uid(),
        target.mode(),
        current_uid(),
    )?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Whether a directory found at `dir` may hold this user's installation or socket: a
/// directory this user owns, reached (if through a symbolic link, `link_owner`) through a
/// link this user owns, and not one meant to be shared with other users (world-writable or
/// sticky, like `/tmp`: made 0700, it would lock them out).
fn check_private_dir(
    dir: &Path,
    link_owner: Option<u32>,
    is_dir: bool,
    owner: u32,
    mode: u32,
    own_uid: u32,
) -> io::Result<()> {
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} {why}; piw keeps its socket and state only in a directory of your own (remove it, or set PIW_HOME or XDG_RUNTIME_DIR elsewhere)",
                dir.display()
            ),
        ))
    };
    if let Some(link_owner) = link_owner.filter(|&o| o != own_uid) {
        return refuse(format!(
            "is a symbolic link of uid {link_owner}, not yours (uid {own_uid})"
        ));
    }
    if !is_dir {
        return refuse("is not a directory".into());
    }
    if owner != own_uid {
        return refuse(format!(
            "belongs to uid {owner}, not to you (uid {own_uid})"
        ));
    }
    if mode & (SHARED_DIR_STICKY | SHARED_DIR_OTHER_WRITE) != 0 {
        // Not "remove it": this is `/tmp` or the like.
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is shared with other users (mode {:o}) and piw would make it private (0700); set PIW_HOME to a directory of its own, such as a new one inside it",
                dir.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// The sticky bit: a directory where many users keep files (`/tmp`).
const SHARED_DIR_STICKY: u32 = 0o1000;
/// Write permission for other users.
const SHARED_DIR_OTHER_WRITE: u32 = 0o002;

/// A short, per-user, per-installation socket path in the runtime directory.
fn short_socket_path(home: &Path) -> PathBuf {
    let tag = &sha256_hex(home.as_os_str().as_encoded_bytes())[..16];
    let uid = current_uid();
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.as_os_str().len() < 60)
        .map(|p| p.join("piw"))
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/piw-{uid}")));
    base.join(format!("{tag}.sock"))
}

/// `path` as one word for a POSIX shell: in single quotes, a single quote inside written as
/// `'\''`. For commands piw prints for its user to copy.
pub fn shell_quoted(path: &Path) -> String {
    format!(
        "'{}'",
        path.as_os_str().to_string_lossy().replace('\'', r"'\''")
    )
}

/// The uid of this process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directory_of_ones_own_is_used() {
        let dir = Path::new("/tmp/piw-1000");
        assert!(check_private_dir(dir, None, true, 1000, 0o40700, 1000).is_ok());
        assert!(
            check_private_dir(dir, Some(1000), true, 1000, 0o40755, 1000).is_ok(),
            "one's own link to one's own directory"
        );
        for (link_owner, is_dir, owner, why) in [
            (
                Some(1001),
                true,
                1000,
                "is a symbolic link of uid 1001, not yours (uid 1000)",
            ),
            (None, false, 1000, "is not a directory"),
            (
                None,
                true,
                1001,
                "belongs to uid 1001, not to you (uid 1000)",
            ),
            (
                Some(1000),
                true,
                1001,
                "belongs to uid 1001, not to you (uid 1000)",
            ),
        ] {
            let e = check_private_dir(dir, link_owner, is_dir, owner, 0o40700, 1000).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
            assert!(e.to_string().contains(why), "{e}");
            assert!(e.to_string().starts_with("/tmp/piw-1000 "), "{e}");
        }
    }

    #[test]
    fn own_directories_are_made_private_and_a_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let own = tmp.path().join("own");
        std::fs::create_dir(&own).unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
        make_private_dir(&own).unwrap();
        let mode = std::fs::metadata(&own).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // One's own link to one's own directory (a dotfiles setup) is followed.
        let link = tmp.path().join("linked");
        std::os::unix::fs::symlink(&own, &link).unwrap();
        make_private_dir(&link).unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = make_private_dir(&file).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
    }

    /// `PIW_HOME=/tmp` (or any directory shared with other users: world-writable, sticky)
    /// must not be made 0700: for a user who owns it (root owns `/tmp`) that would lock every
    /// other user out of it and drop its sticky bit. It is refused, its mode left alone.
    #[test]
    fn a_shared_directory_is_refused_and_its_mode_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        for mode in [0o1777, 0o777, 0o1770] {
            let shared = tmp.path().join(format!("shared-{mode:o}"));
            std::fs::create_dir(&shared).unwrap();
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = make_private_dir(&shared).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{mode:o}: {e}");
            assert!(e.to_string().contains("is shared with other users"), "{e}");
            let now = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777;
            assert_eq!(now, mode, "the mode of a shared directory was changed");
        }
    }

    #[test]
    fn shell_quoted_paths_survive_spaces_and_quotes() {
        assert_eq!(shell_quoted(Path::new("/tmp/x")), "'/tmp/x'");
        assert_eq!(
            shell_quoted(Path::new("/tmp/it's a home")),
            r"'/tmp/it'\''s a home'"
        );
        // What a shell makes of it is the path itself.
        let tricky = "/tmp/a b/it's \"$HOME\" `x`";
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quoted(Path::new(tricky))))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), tricky);
    }

    #[test]
    fn a_relative_piw_home_is_refused() {
        for rel in ["./x", "x", "x/y", "~/piw", "../x"] {
            let err = PiwPaths::from_vars(Some(rel.into()), Some("/home/u".into())).unwrap_err();
            assert!(
                matches!(&err, PathsError::RelativeHome { var: "PIW_HOME", value } if value == Path::new(rel)),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("PIW_HOME must be an absolute path, got {rel}")
            );
        }
        // Without PIW_HOME, HOME decides, and it must be absolute too.
        let err = PiwPaths::from_vars(None, Some("home".into())).unwrap_err();
        assert_eq!(err.to_string(), "HOME must be an absolute path, got home");
        assert!(matches!(
            PiwPaths::from_vars(Some("".into()), None),
            Err(PathsError::NoHome)
        ));
    }

    #[test]
    fn an_absolute_piw_home_or_home_is_used() {
        let p = PiwPaths::from_vars(Some("/tmp/x/".into()), Some("rel".into())).unwrap();
        assert_eq!(p.home, PathBuf::from("/tmp/x"));
        let p = PiwPaths::from_vars(Some("".into()), Some("/home/u".into())).unwrap();
        assert_eq!(p.home, PathBuf::from("/home/u/.pi/agent/piw"));
    }

    #[test]
    fn short_homes_keep_the_socket_inside() {
        let p = PiwPaths::for_home(PathBuf::from("/tmp/x"));
        assert_eq!(p.socket, PathBuf::from("/tmp/x/host.sock"));
        assert_eq!(p.db, PathBuf::from("/tmp/x/state.sqlite"));
    }

    #[test]
    fn long_homes_move_the_socket_to_a_short_stable_path() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(120)));
        let a = PiwPaths::for_home(long.clone());
        assert!(
            a.socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES,
            "{:?}",
            a.socket
        );
        assert_eq!(
            a.socket,
            PiwPaths::for_home(long).socket,
            "clients find the same path"
        );
        let other = PiwPaths::for_home(PathBuf::from(format!("/tmp/{}", "e".repeat(120))));
        assert_ne!(
            a.socket, other.socket,
            "installations do not share a socket"
        );
    }

    #[test]
    fn every_spelling_of_one_home_finds_the_same_socket() {
        let long = format!("/tmp/{}", "d".repeat(120));
        let plain = PiwPaths::for_home(PathBuf::from(&long));
        for spelling in [
            format!("{long}/"),
            format!("{long}/."),
            format!("/tmp/./{}/", "d".repeat(120)),
        ] {
            let other = PiwPaths::for_home(PathBuf::from(&spelling));
            assert_eq!(other.socket, plain.socket, "{spelling}");
            assert_eq!(other.home, plain.home, "{spelling}");
        }
        let short = PiwPaths::for_home(PathBuf::from("/tmp/x/./"));
        assert_eq!(short.socket, PathBuf::from("/tmp/x/host.sock"));
        // `..` stays: after a symbolic link it is not the lexical parent.
        let up = PiwPaths::for_home(PathBuf::from("/tmp/x/y/.."));
        assert_eq!(up.home, PathBuf::from("/tmp/x/y/.."));
    }
}
