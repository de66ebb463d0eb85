//! `piw channel remove NAME`: a channel and its token gone, and a running host told.

use super::{cli_error, reload};
use crate::*;
use piw_host::channels;

pub(crate) fn run(paths: &PiwPaths, name: &str, json: bool) -> Result<(), CliError> {
    channels::remove(&paths.home, name).map_err(cli_error)?;
    let reloaded = reload(paths)?.is_some();
    print(
        &json!({ "removed": name, "host_reloaded": reloaded }),
        json,
        |_| format!("channel {name} removed"),
    );
    Ok(())
}
