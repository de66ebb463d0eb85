//! `piw channel add|list|test|remove`: decision channels (`piw_core::channels` keeps their
//! files; the host runs their adapters, `engine::channels`). A token is read from a file or
//! stdin, never from the command line, and never printed.

use super::*;
use piw_core::channels::{self, ChannelConfig};
use piw_core::driver::node_runtime;

#[derive(Subcommand)]
pub(crate) enum ChannelCmd {
    /// Add a channel: protected human decisions of every run go to this chat, and a person
    /// there can answer them. The token is read from a file (`--token-file`) or stdin
    /// (`--token -`), never given on the command line.
    Add {
        /// The kind of channel.
        #[arg(value_parser = ["telegram"])]
        kind: String,
        /// The one chat (its numeric id) decisions are sent to and answers are taken from.
        #[arg(long, allow_hyphen_values = true)]
        chat: String,
        /// A file holding the bot token (Telegram's BotFather gives it).
        #[arg(
            long,
            value_name = "FILE",
            conflicts_with = "token",
            required_unless_present = "token"
        )]
        token_file: Option<PathBuf>,
        /// `-`: read the token from stdin.
        #[arg(long, value_name = "-", value_parser = ["-"])]
        token: Option<String>,
        /// The channel's name (default: its kind).
        #[arg(long)]
        name: Option<String>,
        /// Replace a channel of that name.
        #[arg(long)]
        replace: bool,
        #[arg(long)]
        json: bool,
    },
    /// List the channels, with their adapter's state when a host runs.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Send a test message through the channel's adapter, and say whether it arrived or what
    /// the channel's API answered.
    Test {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a channel and its token.
    Remove {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// A channel error as the command line reports it.
fn cli_error(e: channels::ChannelError) -> CliError {
    {
        match e {
            channels::ChannelError::NotFound(_) => CliError::Client {
                code: "not_found",
                message: e.to_string(),
                details: Value::Null,
            },
            channels::ChannelError::Io { .. } => CliError::Runtime(e.to_string()),
            _ => CliError::Usage(e.to_string()),
        }
    }
}

/// Asks a running host (never starts one) to read the channels again: `Some(true)` when it
/// did, `None` when no host runs (the next one reads them when it starts).
fn reload(paths: &PiwPaths) -> Result<Option<bool>, CliError> {
    let Ok(mut client) = BlockingClient::connect(paths) else {
        return Ok(None);
    };
    client.call(RequestBody::ChannelReload)?;
    Ok(Some(true))
}

/// The adapters' state as a running host reports it (`host.status` → `channels`).
fn host_channels(paths: &PiwPaths) -> Option<Vec<Value>> {
    let mut client = BlockingClient::connect(paths).ok()?;
    let status = client.call(RequestBody::HostStatus).ok()?;
    status.body["channels"].as_array().cloned()
}

pub(crate) fn channel_cmd(paths: &PiwPaths, cmd: ChannelCmd, json: bool) -> Result<(), CliError> {
    match cmd {
        ChannelCmd::Add {
            kind,
            chat,
            token_file,
            token,
            name,
            replace,
            json: _,
        } => {
            let secret = match (token_file, token) {
                (Some(file), _) => std::fs::read_to_string(&file).map_err(|e| {
                    CliError::Runtime(format!(
                        "cannot read the token file {}: {e}",
                        file.display()
                    ))
                })?,
                (None, Some(_)) => {
                    let mut buf = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
                        .map_err(|e| CliError::Runtime(format!("cannot read stdin: {e}")))?;
                    buf
                }
                (None, None) => {
                    return Err(CliError::Usage(
                        "give the token with --token-file FILE or --token - (stdin)".into(),
                    ))
                }
            };
            let name = name.unwrap_or_else(|| kind.clone());
            let config = channels::add(&paths.home, &name, &kind, chat.trim(), &secret, replace)
                .map_err(cli_error)?;
            let reloaded = reload(paths)?.is_some();
            let body = json!({ "channel": config, "host_reloaded": reloaded });
            print(&body, json, |_| {
                format!(
                    "channel {name} added: protected decisions go to {kind} chat {}{}",
                    config.chat,
                    if reloaded {
                        "; the host runs its adapter now"
                    } else {
                        "; its adapter starts with the host (`piw host start`)"
                    }
                )
            });
            Ok(())
        }
        ChannelCmd::List { json: _ } => {
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
                    out = "no channels: `piw channel add telegram --chat ID --token-file FILE`"
                        .into();
                }
                out
            });
            Ok(())
        }
        ChannelCmd::Test { name, json: _ } => {
            let config = channels::read(&paths.home, &name).map_err(cli_error)?;
            let rt = node_runtime::discover(
                &node_runtime::Inputs::from_env(),
                &node_runtime::SystemProbe,
            )
            .map_err(|e| CliError::Runtime(format!("cannot run the channel's adapter: {e}")))?;
            let script = rt
                .worker
                .parent()
                .map(|p| p.join("lib").join(format!("channel-{}.js", config.kind)))
                .ok_or_else(|| {
                    CliError::Runtime("the Node worker runtime has no package".into())
                })?;
            let out = std::process::Command::new(&rt.node)
                .arg(&script)
                .args(["test", &name])
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
        ChannelCmd::Remove { name, json: _ } => {
            channels::remove(&paths.home, &name).map_err(cli_error)?;
            let reloaded = reload(paths)?.is_some();
            print(
                &json!({ "removed": name, "host_reloaded": reloaded }),
                json,
                |_| format!("channel {name} removed"),
            );
            Ok(())
        }
    }
}
