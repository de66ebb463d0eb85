//! `piw host start`: a host in the background (none started when one runs).

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    ensure_installation_dirs(paths)?;
    ensure_host(paths, &host_bin(), DEFAULT_READY_TIMEOUT)?;
    let mut client = BlockingClient::connect(paths)?;
    let r = host_call(paths, &mut client, RequestBody::HostStatus)?;
    let status: replies::HostStatusReply = reply(&r)?;
    print(&r.body, json, |_| {
        format!("piw host running: pid {}", status.pid)
    });
    Ok(())
}
