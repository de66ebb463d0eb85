//! `piw run decide`: a person's answer to a protected human decision, bound as `run answer`
//! binds a checkpoint's.

use super::answer::answer_decision;
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
    answer_decision(
        client,
        &run_id,
        "human_decision",
        decision.as_deref(),
        answer,
        json,
    )
}
