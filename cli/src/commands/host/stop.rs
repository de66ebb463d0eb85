//! `piw host stop`: returns once the host's process has ended.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let was_running = stop_host(paths)?;
    print(&json!({ "stopped": was_running }), json, |_| {
        if was_running {
            "piw host stopped"
        } else {
            "no piw host is running"
        }
        .into()
    });
    Ok(())
}
