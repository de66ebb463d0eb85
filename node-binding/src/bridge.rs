//! The lock a detached run's bridge (`extension/bridge.js`) holds for its whole life, so that
//! two bridges never serve one run: `$PIW_HOME/bridges/<run_id>.lock`, an `flock` the kernel
//! releases when the holding process ends however it ends (a Pi killed mid-step frees the run
//! for the next bridge at once).

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::PathBuf;

use napi::Result;
use napi_derive::napi;
use piw_client::paths::PiwPaths;

use crate::js_error;

/// A held bridge lock; dropped (or `release()`d) it frees the run for another bridge.
#[napi]
pub struct BridgeLock {
    file: Option<File>,
}

#[napi]
impl BridgeLock {
    /// Frees the run now (idempotent); otherwise the lock lives as long as the process.
    #[napi]
    pub fn release(&mut self) {
        self.file = None;
    }
}

/// A run id as the host makes them, checked before it names a file.
fn valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 100
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Takes the bridge lock of `run_id` in the installation `home` (else `PIW_HOME`'s), writing
/// this process's pid into it. Held by another process: the error `bridge_busy`, naming its pid.
#[napi(js_name = "lockBridge")]
pub fn lock_bridge(run_id: String, home: Option<String>) -> Result<BridgeLock> {
    if !valid_run_id(&run_id) {
        return Err(js_error("malformed", format!("not a run id: {run_id:?}")));
    }
    let paths = match home {
        Some(home) => PiwPaths::for_home(PathBuf::from(home)),
        None => PiwPaths::from_env().map_err(|e| js_error("malformed", e.to_string()))?,
    };
    let dir = paths.home.join("bridges");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| js_error("io", format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(format!("{run_id}.lock"));
    let mut file = piw_client::paths::open_installation_file(
        &path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600),
    )
    .map_err(|e| js_error("io", format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid: String = pid.trim().chars().take(20).collect();
            return Err(js_error(
                "bridge_busy",
                format!("another bridge (pid {pid}) serves run {run_id}"),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(js_error(
                "io",
                format!("cannot lock {}: {e}", path.display()),
            ))
        }
    }
    // The holder's pid, for the refusal above; a failed write only makes that message vaguer.
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = write!(file, "{}", std::process::id());
    Ok(BridgeLock { file: Some(file) })
}
