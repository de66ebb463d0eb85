//! `piw host serve`: the host itself, in the foreground.

use crate::*;

pub(crate) fn run(paths: PiwPaths) -> Result<(), CliError> {
    init_logging();
    match piw_host::driver::serve(HostConfig::from_env(paths)) {
        Ok(()) => Ok(()),
        Err(e @ HostError::AlreadyRunning { .. }) => Err(CliError::Runtime(e.to_string())),
        Err(e) => Err(e.into()),
    }
}
