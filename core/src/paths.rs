//! Where an installation lives: `$PIW_HOME` (default `~/.pi/agent/workflows`), its database,
//! lock, log and socket. The socket moves to a shorter per-user runtime path when
//! `$PIW_HOME/host.sock` would exceed the platform's `sun_path` limit.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::ids::sha256_hex;

/// `sun_path` is 108 bytes on Linux including the terminating NUL; keep a margin.
pub const MAX_SOCKET_PATH_BYTES: usize = 100;

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
    /// The Unix socket clients connect to.
    pub socket: PathBuf,
}

impl PiwPaths {
    /// Resolves the installation from `PIW_HOME`, else `$HOME/.pi/agent/workflows`.
    pub fn from_env() -> io::Result<Self> {
        if let Some(home) = std::env::var_os("PIW_HOME").filter(|v| !v.is_empty()) {
            return Ok(Self::for_home(PathBuf::from(home)));
        }
        let user_home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, "neither PIW_HOME nor HOME is set")
            })?;
        Ok(Self::for_home(
            PathBuf::from(user_home).join(".pi/agent/workflows"),
        ))
    }

    /// The paths of the installation at `home`, made absolute, without `.` components or a
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

/// `path` without `.` components and without a trailing slash (what `Path::components`
/// drops).
fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

fn make_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

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

/// The uid of this process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

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
