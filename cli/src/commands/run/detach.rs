//! `piw run detach`: Detach a run: its interactive steps go to the host's Pi children.

use crate::*;

pub(crate) fn run(client: &mut BlockingClient, run_id: &str, json: bool) -> Result<(), CliError> {
    let r = client.send(run_request(run_id, RequestBody::RunDetach))?;
    print_receipt(&r.body, json)
}
