//! `piw channel add`: a channel's files (its token read from a file or stdin, never the
//! command line), then a running host told to read them.

use super::{cli_error, reload, AddArgs};
use crate::*;
use piw_host::channels;

pub(crate) fn run(paths: &PiwPaths, args: AddArgs, json: bool) -> Result<(), CliError> {
    let AddArgs {
        kind,
        chat,
        token_file,
        token,
        name,
        replace,
        json: _,
    } = args;
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
