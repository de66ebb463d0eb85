//! Decision channels' files (`$PIW_HOME/channels/`): what `piw channel add|remove|list` writes
//! and reads, and what the host reads to know which adapters to run (`engine::channels`).
//!
//! Each channel `<name>` has, in a 0700 directory:
//! - `<name>.json` (0600): `{"kind": "telegram", "chat": "<chat id>"}`, no secret;
//! - `<name>.token` (0600): its credential, the only place it is kept: never in the database
//!   (so backups and `diagnose` never carry it), never in a log, status, error or event;
//! - `<name>.state.json` (0600): the adapter's own durable state (the last update it handled,
//!   the messages it sent), written by the adapter.
//!
//! Names are `[a-z0-9][a-z0-9_-]{0,31}`: no dots, so no name collides with another's files.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::engine::channels::{is_known_kind, ChannelSpec, KINDS};

/// Why a channel's files cannot be read or written. Never carries a credential.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("invalid channel name {0:?}: use 1 to 32 of a-z, 0-9, '-' and '_', starting with a letter or digit")]
    InvalidName(String),
    #[error("unknown channel kind {0:?} (piw has: {kinds})", kinds = KINDS.join(", "))]
    UnknownKind(String),
    #[error("invalid chat id {0:?}: a Telegram chat id is an integer (a group's is negative)")]
    InvalidChat(String),
    #[error("the token is empty")]
    EmptyToken,
    #[error("the token has a space or a control character in it")]
    MalformedToken,
    #[error("no channel named {0}")]
    NotFound(String),
    #[error("a channel named {0} exists; remove it first, or add it again with --replace")]
    Exists(String),
    #[error("{what} ({path}): {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a channel configuration piw can read: {why}")]
    Malformed { path: PathBuf, why: String },
}

/// A configured channel as `piw channel list` shows it (no credential).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChannelConfig {
    /// Filled from the file's name when read.
    #[serde(skip_deserializing, default)]
    pub name: String,
    pub kind: String,
    /// The one chat it sends to and takes answers from.
    pub chat: String,
}

/// The channels' directory of the installation at `home`.
pub fn dir(home: &Path) -> PathBuf {
    home.join("channels")
}

/// Whether `name` is a channel name.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

fn check_name(name: &str) -> Result<(), ChannelError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(ChannelError::InvalidName(name.to_owned()))
    }
}

/// Whether `chat` is a Telegram chat id (an integer).
fn valid_chat(chat: &str) -> bool {
    let digits = chat.strip_prefix('-').unwrap_or(chat);
    !digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit())
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ChannelError {
    let path = path.to_path_buf();
    move |source| ChannelError::Io { what, path, source }
}

/// Writes `bytes` to `path` whole, mode 0600, through a temporary file renamed over it.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ChannelError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("cannot write", &tmp))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io("cannot write", &tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(io("cannot set the mode of", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("cannot write", path))?;
    Ok(())
}

/// Adds channel `name` (`kind`, `chat`) with its `token`. `replace`: an existing channel of
/// that name is overwritten.
pub fn add(
    home: &Path,
    name: &str,
    kind: &str,
    chat: &str,
    token: &str,
    replace: bool,
) -> Result<ChannelConfig, ChannelError> {
    check_name(name)?;
    if !is_known_kind(kind) {
        return Err(ChannelError::UnknownKind(kind.to_owned()));
    }
    if !valid_chat(chat) {
        return Err(ChannelError::InvalidChat(chat.to_owned()));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(ChannelError::EmptyToken);
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ChannelError::MalformedToken);
    }
    let dir = dir(home);
    std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("cannot set the mode of", &dir))?;
    let config_path = dir.join(format!("{name}.json"));
    if !replace && config_path.exists() {
        return Err(ChannelError::Exists(name.to_owned()));
    }
    let config = ChannelConfig {
        name: name.to_owned(),
        kind: kind.to_owned(),
        chat: chat.to_owned(),
    };
    let text = serde_json::json!({ "kind": kind, "chat": chat });
    // The token first: a configuration is never there without its token.
    write_private(&dir.join(format!("{name}.token")), token.as_bytes())?;
    // A new channel (or a new chat) starts with no adapter state: nothing of another chat's
    // messages or updates carries over.
    let state = dir.join(format!("{name}.state.json"));
    match std::fs::remove_file(&state) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot remove", &state)(e)),
    }
    write_private(&config_path, format!("{text}\n").as_bytes())?;
    Ok(config)
}

/// Removes channel `name` and its files (its token included).
pub fn remove(home: &Path, name: &str) -> Result<(), ChannelError> {
    check_name(name)?;
    let dir = dir(home);
    let config = dir.join(format!("{name}.json"));
    if !config.exists() {
        return Err(ChannelError::NotFound(name.to_owned()));
    }
    // The configuration first: a host that reads the directory meanwhile no longer runs it.
    std::fs::remove_file(&config).map_err(io("cannot remove", &config))?;
    for file in [format!("{name}.token"), format!("{name}.state.json")] {
        let path = dir.join(file);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot remove", &path)(e)),
        }
    }
    Ok(())
}

/// The channel configured under `name`.
pub fn read(home: &Path, name: &str) -> Result<ChannelConfig, ChannelError> {
    check_name(name)?;
    let path = dir(home).join(format!("{name}.json"));
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ChannelError::NotFound(name.to_owned()))
        }
        Err(e) => return Err(io("cannot read", &path)(e)),
    };
    let mut config: ChannelConfig =
        serde_json::from_slice(&text).map_err(|e| ChannelError::Malformed {
            path: path.clone(),
            why: e.to_string(),
        })?;
    config.name = name.to_owned();
    Ok(config)
}

/// Every configured channel, by name.
pub fn list(home: &Path) -> Result<Vec<ChannelConfig>, ChannelError> {
    let dir = dir(home);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot read", &dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io("cannot read", &dir))?;
        let file = entry.file_name();
        let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".json")) else {
            continue;
        };
        if valid_name(name) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    names.iter().map(|name| read(home, name)).collect()
}

/// What the host needs of each configured channel: its name, kind, and a digest of its
/// configuration and token (a changed one restarts its adapter). The token is read only to be
/// hashed into the digest.
pub fn specs(home: &Path) -> Result<Vec<ChannelSpec>, ChannelError> {
    let dir = dir(home);
    list(home)?
        .into_iter()
        .map(|config| {
            let token_path = dir.join(format!("{}.token", config.name));
            let token = std::fs::read(&token_path).unwrap_or_default();
            let mut material = serde_json::to_vec(&config).unwrap_or_default();
            material.push(0);
            material.extend_from_slice(&token);
            Ok(ChannelSpec {
                name: config.name,
                kind: config.kind,
                digest: crate::engine::ids::sha256_hex(&material),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_is_two_private_files_and_the_token_is_only_in_one() {
        let home = tempfile::tempdir().expect("a temp dir");
        let token = "123456:SECRET-token_value";
        let c = add(home.path(), "me", "telegram", "-100200", token, false).expect("added");
        assert_eq!(c.chat, "-100200");
        let d = dir(home.path());
        for f in ["me.json", "me.token"] {
            let mode = std::fs::metadata(d.join(f))
                .expect("a file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let config = std::fs::read_to_string(d.join("me.json")).expect("config");
        assert!(!config.contains("SECRET"), "{config}");
        assert_eq!(list(home.path()).expect("list"), std::slice::from_ref(&c));
        assert!(matches!(
            add(home.path(), "me", "telegram", "1", token, false),
            Err(ChannelError::Exists(_))
        ));
        let before = specs(home.path()).expect("specs");
        add(
            home.path(),
            "me",
            "telegram",
            "-100200",
            "other:token",
            true,
        )
        .expect("replaced");
        let after = specs(home.path()).expect("specs");
        assert_ne!(
            before[0].digest, after[0].digest,
            "a new token restarts the adapter"
        );
        remove(home.path(), "me").expect("removed");
        assert!(list(home.path()).expect("list").is_empty());
        assert!(!d.join("me.token").exists());
        assert!(matches!(
            remove(home.path(), "me"),
            Err(ChannelError::NotFound(_))
        ));
    }

    #[test]
    fn names_chats_and_kinds_are_checked() {
        let home = tempfile::tempdir().expect("a temp dir");
        for bad in ["", "Me", "a.b", "../x", &"x".repeat(33)] {
            assert!(matches!(
                add(home.path(), bad, "telegram", "1", "t", false),
                Err(ChannelError::InvalidName(_))
            ));
        }
        assert!(matches!(
            add(home.path(), "x", "telegram", "12a", "t", false),
            Err(ChannelError::InvalidChat(_))
        ));
        assert!(matches!(
            add(home.path(), "x", "pigeon", "1", "t", false),
            Err(ChannelError::UnknownKind(_))
        ));
        assert!(matches!(
            add(home.path(), "x", "telegram", "1", "  ", false),
            Err(ChannelError::EmptyToken)
        ));
        let err = add(home.path(), "x", "telegram", "1", "a b", false).unwrap_err();
        assert!(!err.to_string().contains("a b"), "{err}");
    }
}
