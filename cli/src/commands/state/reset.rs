//! `piw state reset --yes`: the state database deleted (refused while a host runs).

use crate::*;

pub(crate) fn run(paths: &PiwPaths, yes: bool, json: bool) -> Result<(), CliError> {
    if !paths.home.exists() {
        print(
            &json!({ "database": paths.db, "removed": false }),
            json,
            |_| format!("{} does not exist; nothing to reset", paths.home.display()),
        );
        return Ok(());
    }
    if !yes {
        // `piw state backup`, not `cp`: a copy of state.sqlite alone misses the
        // commits still in its -wal file. Quoted so that it works as printed.
        let mut backup = paths.db.clone().into_os_string();
        backup.push(".bak");
        return Err(CliError::Usage(format!(
            "this deletes {} and every run in it; back it up first (`piw state backup {}`), then run `piw state reset --yes`",
            paths.db.display(),
            piw_host::paths::shell_quoted(std::path::Path::new(&backup))
        )));
    }
    let removed = remove_state(paths)?;
    print(
        &json!({ "database": paths.db, "removed": removed }),
        json,
        |_| {
            if removed {
                format!(
                    "removed {}; the next host start creates a fresh database",
                    paths.db.display()
                )
            } else {
                format!(
                    "nothing to remove: there is no {}; the next host start creates a fresh database",
                    paths.db.display()
                )
            }
        },
    );
    Ok(())
}
