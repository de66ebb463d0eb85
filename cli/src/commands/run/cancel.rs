//! `piw run cancel`: the run ends, cancelled, in one commit.

use crate::*;

pub(crate) fn run(client: &mut BlockingClient, run_id: &str, json: bool) -> Result<(), CliError> {
    let r = client.send(run_request(
        run_id,
        RequestBody::RunCancel(payload::RunCancel {
            reason: Some("cancelled from the piw CLI".into()),
        }),
    ))?;
    print_receipt(&r.body, json)
}
