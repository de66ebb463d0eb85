//! `piw run resume`: Resume a paused run.

use crate::*;

pub(crate) fn run(client: &mut BlockingClient, run_id: &str, json: bool) -> Result<(), CliError> {
    let r = client.send(run_request(run_id, RequestBody::RunResume))?;
    print_receipt(&r.body, json)
}
