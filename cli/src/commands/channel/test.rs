//! `piw channel test NAME`: a test message through the channel's adapter, run once here.

use super::cli_error;
use crate::*;
use piw_host::channels;
use piw_host::driver::node_runtime;

pub(crate) fn run(paths: &PiwPaths, name: &str, json: bool) -> Result<(), CliError> {
    let config = channels::read(&paths.home, name).map_err(cli_error)?;
    let rt = node_runtime::discover(
        &node_runtime::Inputs::from_env(),
        &node_runtime::SystemProbe,
    )
    .map_err(|e| CliError::Runtime(format!("cannot run the channel's adapter: {e}")))?;
    let script = rt
        .worker
        .parent()
        .map(|p| p.join("lib").join(format!("channel-{}.js", config.kind)))
        .ok_or_else(|| CliError::Runtime("the Node worker runtime has no package".into()))?;
    let out = std::process::Command::new(&rt.node)
        .arg(&script)
        .args(["test", name])
        .env("PIW_HOME", &paths.home)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| CliError::Runtime(format!("cannot run {}: {e}", rt.node.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            let stderr = String::from_utf8_lossy(&out.stderr);
            json!({ "ok": false, "error": stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("the adapter said nothing") })
        });
    if result["ok"] == true {
        print(&result, json, |r| {
            format!(
                "channel {name}: test message sent to chat {} (bot {})",
                config.chat,
                str_of(&r["bot"])
            )
        });
        Ok(())
    } else {
        Err(CliError::Client {
            code: "channel_failed",
            message: format!("channel {name}: {}", str_of(&result["error"])),
            details: result,
        })
    }
}
