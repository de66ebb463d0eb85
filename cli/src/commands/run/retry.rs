//! `piw run retry`: a run in review runs its current node again.

use super::login_name;
use crate::*;

pub(crate) fn run(client: &mut BlockingClient, args: RetryArgs) -> Result<(), CliError> {
    let RetryArgs {
        run_id,
        reason,
        accept_source,
        json,
    } = args;
    let r = client.send(run_request(
        &run_id,
        RequestBody::RunRetry(payload::RunRetry {
            reason: Some(reason),
            by: Some(login_name()),
            accept_source,
        }),
    ))?;
    print_receipt(&r.body, json)
}
