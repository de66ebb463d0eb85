//! The installation lock (`$PIW_HOME/host.lock`) as a client reads it: whether a host (or a
//! maintenance command) holds it, and whose pid it names. Taking the lock is the host's
//! (`piw_host::driver::lock_installation`); reading it never touches the lock.

use crate::paths::PiwPaths;
use crate::procfs::{flock_held, process_alive};

/// Whether a process holds `host.lock`, read from the kernel's lock table (`/proc/locks`)
/// without touching the lock: trying to take it, even for a moment, could make a host that
/// starts at that instant give up. Where the table cannot be read, the pid the file names is
/// asked instead (it may be a holder's that has exited and been reused).
pub fn installation_held(paths: &PiwPaths) -> bool {
    if !paths.lock.exists() {
        return false;
    }
    flock_held(&paths.lock).unwrap_or_else(|| {
        lock_holder(paths)
            .and_then(|pid| pid.parse().ok())
            .is_some_and(process_alive)
    })
}

/// The pid written in `host.lock`: the process that took the installation lock last (it may
/// have let go since: [`installation_held`] says whether anyone holds it).
pub fn lock_holder(paths: &PiwPaths) -> Option<String> {
    std::fs::read_to_string(&paths.lock)
        .ok()
        .map(|pid| pid.trim().to_owned())
        .filter(|pid| !pid.is_empty())
}
