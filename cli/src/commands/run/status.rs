//! `piw run status`: one run; with `--json` the whole document, values stored apart read back
//! into it.

use crate::*;

pub(crate) fn run(client: &mut BlockingClient, run_id: &str, json: bool) -> Result<(), CliError> {
    let mut r = client.send(run_request(
        run_id,
        RequestBody::RunStatus(Default::default()),
    ))?;
    if json {
        client.resolve_run_status(&mut r.body)?;
    }
    print_reply(&r, json, status_text)
}
