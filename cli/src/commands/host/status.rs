//! `piw host status`: the running host's identity and health; never starts one.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let mut client = BlockingClient::connect(paths).map_err(|e| match e {
        ClientError::Connect { .. } => CliError::Runtime(format!(
            "no piw host is running for {}",
            paths.home.display()
        )),
        other => other.into(),
    })?;
    let r = host_call(paths, &mut client, RequestBody::HostStatus)?;
    let s: replies::HostStatusReply = reply(&r)?;
    print(&r.body, json, |_| {
        format!(
            "pid {}  epoch {}  uptime {} s\nruns {}\nactive children {} of {}\nconnections at most {}\nruntimes {}\nsocket {}\ndatabase {}\nschema {}",
            s.pid, s.epoch, s.uptime_ms / 1000, json!(s.runs),
            json!(s.active_children), s.child_slots, s.max_connections,
            s.runtimes.join(" "), s.socket, s.database, s.schema_id
        )
    });
    Ok(())
}
