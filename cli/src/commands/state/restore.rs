//! `piw state restore FILE --yes`: the state database replaced by a backup.

use crate::*;

pub(crate) fn run(
    paths: &PiwPaths,
    file: &std::path::Path,
    yes: bool,
    json: bool,
) -> Result<(), CliError> {
    restore_state(paths, file, yes)?;
    print(
        &json!({ "database": paths.db, "restored_from": file }),
        json,
        |_| {
            format!(
                "restored {} from {}; note: {RESTORE_MEANS}",
                paths.db.display(),
                file.display()
            )
        },
    );
    Ok(())
}
