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
    print(&r.body, json, |b| {
        format!(
            "pid {}  epoch {}  uptime {} s\nruns {}\nactive children {} of {}\nconnections at most {}\nruntimes {}\nsocket {}\ndatabase {}\nschema {}",
            b["pid"], b["epoch"], b["uptime_ms"].as_u64().unwrap_or(0) / 1000, b["runs"],
            b["active_children"], b["child_slots"], b["max_connections"],
            b["runtimes"].as_array().map(|r| r.iter().map(str_of).collect::<Vec<_>>().join(" ")).unwrap_or_default(),
            str_of(&b["socket"]), str_of(&b["database"]), str_of(&b["schema_id"])
        )
    });
    Ok(())
}
