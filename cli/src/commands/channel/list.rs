//! `piw channel list`: the channels configured, with their adapters' state when a host runs.

use super::{cli_error, host_channels};
use crate::*;
use piw_host::channels::{self, ChannelConfig};

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let configured = channels::list(&paths.home).map_err(cli_error)?;
    let live = host_channels(paths);
    let rows: Vec<Value> = configured
        .iter()
        .map(|c: &ChannelConfig| {
            let state = live.as_ref().map_or(json!("no host"), |l| {
                l.iter()
                    .find(|s| s["name"] == c.name.as_str())
                    .map_or(json!("not running"), |s| s["state"].clone())
            });
            json!({ "name": c.name, "kind": c.kind, "chat": c.chat, "state": state })
        })
        .collect();
    print(&json!({ "channels": rows }), json, |b| {
        let mut out = format!("{:<20} {:<10} {:<20} STATE", "NAME", "KIND", "CHAT");
        for c in b["channels"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "\n{:<20} {:<10} {:<20} {}",
                str_of(&c["name"]),
                str_of(&c["kind"]),
                str_of(&c["chat"]),
                str_of(&c["state"])
            ));
        }
        if b["channels"].as_array().is_none_or(|c| c.is_empty()) {
            out = "no channels: `piw channel add telegram --chat ID --token-file FILE`".into();
        }
        out
    });
    Ok(())
}
