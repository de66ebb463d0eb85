//! `piw state backup PATH`: a consistent copy of the state database, while a host runs too.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, path: &std::path::Path, json: bool) -> Result<(), CliError> {
    if path.exists() {
        return Err(CliError::Runtime(format!(
            "{} exists; choose a new path",
            path.display()
        )));
    }
    // Nothing to copy is a failure (exit 1, `no_installation`), not "nothing to do": a
    // script must not go on as if it had a backup, and a mistyped PIW_HOME says so.
    require_installation(paths)?;
    warn_if_linked(paths);
    let store = Store::open_read_only(&paths.db, StoreConfig::default())?;
    store.backup_to(path)?;
    print(
        &json!({ "database": paths.db, "backup": path }),
        json,
        |_| format!("backed up {} to {}", paths.db.display(), path.display()),
    );
    Ok(())
}
