//! `piw run decide`: a person's answer to a protected human decision, bound as `run answer`
//! binds a checkpoint's.

use super::answer::bound_decision;
use crate::*;

pub(crate) fn run(client: &mut BlockingClient, args: DecideArgs) -> Result<(), CliError> {
    let DecideArgs {
        run_id,
        choice,
        text,
        decision,
        json,
    } = args;
    let mut answer = json!({ "choice": choice });
    if let Some(text) = text {
        answer["text"] = json!(text);
    }
    let decision = match bound_decision(
        client,
        &run_id,
        "human_decision",
        decision.as_deref(),
        &answer,
    )? {
        Ok(id) => id,
        Err(receipt) => return print_receipt(&receipt, json),
    };
    let r = client.send(run_request(
        &run_id,
        RequestBody::DecisionAnswer(payload::DecisionAnswer {
            decision_id: decision,
            answer,
            channel: None,
        }),
    ))?;
    print_receipt(&r.body, json)
}
