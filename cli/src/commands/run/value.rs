//! `piw run value`: a value of a run stored apart, whole.

use crate::*;

pub(crate) fn run(client: &mut BlockingClient, run_id: &str, sha256: &str) -> Result<(), CliError> {
    let reference = piw_host::protocol::ValueRef {
        sha256: sha256.to_owned(),
        bytes: value_length(client, run_id, sha256)?,
        preview: String::new(),
    };
    let value = client.read_value(run_id, &reference)?;
    print_value_bytes(&value)
}

/// The length of value `sha256` of `run_id`: a `value.get` of nothing says it.
fn value_length(client: &mut BlockingClient, run_id: &str, sha256: &str) -> Result<u64, CliError> {
    let r = client.send(run_request(
        run_id,
        RequestBody::ValueGet(piw_host::protocol::payload::ValueGet {
            sha256: sha256.to_owned(),
            offset: 0,
            max_bytes: Some(1),
        }),
    ))?;
    Ok(reply::<replies::ValuePiece>(&r)?.bytes)
}

/// `piw run value`: the value's exact stored bytes (its canonical JSON, which its SHA-256
/// names: `piw run value <run> <sha256> | sha256sum` prints that hash), with a newline only
/// on a terminal. A reader that went away (`| head`) ends the output quietly: nothing is
/// wrong with the value or the host.
fn print_value_bytes(value: &Value) -> Result<(), CliError> {
    use std::io::{IsTerminal as _, Write as _};
    let text = piw_host::protocol::canonical_json(value);
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| {
        if out.is_terminal() {
            out.write_all(b"\n")?;
        }
        out.flush()
    });
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
