//! `piw state reset` and `piw state restore`: replacing an installation's database, each under the
//! installation's lock so that no host runs meanwhile.

use super::*;

/// Removes the state database (and its `-wal` and `-shm` files, and the children's output
/// logs under `logs/`) while holding the
/// installation lock, after stopping the children it records as running (a crashed host's:
/// once the database is gone nothing else knows them). Refused while a host runs or is still
/// stopping. Returns whether there was anything to remove.
pub(crate) fn remove_state(paths: &PiwPaths) -> Result<bool, CliError> {
    // Held until the database is gone: no host runs, is still stopping, or starts meanwhile.
    let _lock = piw_host::driver::lock_installation_with(paths, piw_host::driver::Links::Allow).map_err(|e| match e {
        HostError::AlreadyRunning { pid, .. } => CliError::Runtime(format!(
            "a piw host is running or still stopping (pid {pid}); stop it first with `piw host stop`"
        )),
        other => other.into(),
    })?;
    remove_state_locked(paths)
}

/// [`remove_state`] for a caller that holds the installation lock.
pub(crate) fn remove_state_locked(paths: &PiwPaths) -> Result<bool, CliError> {
    // A host that crashed left its children running (recorded in the database): stop them
    // first, as a host's start-up would, or nothing would any more.
    if paths.db.exists() {
        match Store::open_read_only(&paths.db, StoreConfig::default()) {
            Ok(store) => {
                let (stopped, outcomes) =
                    piw_host::driver::stop_recorded_children(&store, None, Duration::from_secs(2))?;
                let killed = outcomes
                    .iter()
                    .filter(|o| **o == piw_host::supervise::OrphanOutcome::Killed)
                    .count();
                if !stopped.is_empty() {
                    eprintln!(
                        "piw: stopped {killed} child process(es) an earlier host left running"
                    );
                }
                let leftovers = piw_host::supervise::kill_marked_leftovers(
                    &piw_host::driver::supervision_scope(&paths.socket),
                    Duration::from_secs(2),
                );
                if leftovers > 0 {
                    eprintln!(
                        "piw: stopped {leftovers} process(es) those children had left behind"
                    );
                }
            }
            // A database this build cannot read names no children it could stop.
            Err(e) => {
                eprintln!("piw: cannot read the children recorded in it ({e}); removing it anyway")
            }
        }
    }
    let mut removed = false;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = paths.db.clone().into_os_string();
        p.push(suffix);
        match std::fs::remove_file(&p) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The children's output logs belong to the runs of this database: they go with it (a
    // restored database numbers its children again, and would append to another's file).
    match std::fs::remove_dir_all(&paths.logs) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    // The detached runs' bridge locks (`node-binding/src/bridge.rs`), of runs now gone.
    match std::fs::remove_dir_all(paths.home.join("bridges")) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    Ok(removed)
}

/// `piw state restore <file> --yes`: replaces the state database with a backup, while no host
/// runs. The backup is checked first (a file this build cannot open, or that SQLite's
/// integrity check calls malformed, is refused and nothing changes), then the current database is removed as by `piw state reset` and the backup is
/// copied in with SQLite's online backup (mode 0600).
pub(crate) fn restore_state(
    paths: &PiwPaths,
    file: &std::path::Path,
    yes: bool,
) -> Result<(), CliError> {
    // The backup's schema digest is checked by the open, its pages by SQLite's integrity
    // check: a damaged copy would replace a sound database with one no host can start on.
    let source = Store::open_read_only(file, StoreConfig::default())?;
    let problems = source.integrity_problems()?;
    if !problems.is_empty() {
        return Err(CliError::Runtime(format!(
            "refusing to restore {}: SQLite's integrity check says it is malformed ({}); nothing was changed",
            file.display(),
            problems.join("; ")
        )));
    }
    if !yes {
        let mut current = paths.db.clone().into_os_string();
        current.push(".bak");
        return Err(CliError::Usage(format!(
            "this replaces {} with {}; {RESTORE_MEANS}. Back up the current state first (`piw state backup {}`), then run `piw state restore {} --yes`",
            paths.db.display(),
            file.display(),
            piw_host::paths::shell_quoted(std::path::Path::new(&current)),
            piw_host::paths::shell_quoted(file),
        )));
    }
    paths.ensure_dirs()?;
    // Held from the removal to the copy: no host starts on a half-restored installation.
    let _lock = piw_host::driver::lock_installation_with(paths, piw_host::driver::Links::Allow).map_err(|e| match e {
        HostError::AlreadyRunning { pid, .. } => CliError::Runtime(format!(
            "a piw host is running or still stopping (pid {pid}); stop it first with `piw host stop`"
        )),
        other => other.into(),
    })?;
    remove_state_locked(paths)?;
    source.backup_to(&paths.db)?;
    Ok(())
}
