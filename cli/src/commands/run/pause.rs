//! `piw run pause`: Pause a run at its next durable boundary.

use crate::*;

pub(crate) fn run(client: &mut BlockingClient, run_id: &str, json: bool) -> Result<(), CliError> {
    let r = client.send(run_request(run_id, RequestBody::RunPause))?;
    print_receipt(&r.body, json)
}
