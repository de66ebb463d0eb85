//! `piw run resolve-effect`: a person says what became of an uncertain effect.

use super::login_name;
use crate::*;

pub(crate) fn run(client: &mut BlockingClient, args: ResolveEffectArgs) -> Result<(), CliError> {
    let ResolveEffectArgs {
        run_id,
        effect_id,
        applied,
        failed,
        reason,
        json,
    } = args;
    let result = match (applied, failed) {
        (Some(receipt), None) => payload::EffectResult::Applied { receipt },
        (None, Some(error)) => payload::EffectResult::Failed { error },
        _ => {
            return Err(CliError::Usage(
                "say what became of the effect: --applied RECEIPT_JSON or --failed ERROR".into(),
            ))
        }
    };
    let r = client.send(run_request(
        &run_id,
        RequestBody::EffectResolve(payload::EffectResolve {
            effect_id,
            result,
            reason: Some(reason),
            by: Some(login_name()),
        }),
    ))?;
    print_receipt(&r.body, json)
}
