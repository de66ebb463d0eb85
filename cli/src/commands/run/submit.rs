//! `piw run submit`: a result for an interactive step, then the workflow's verdict on it.

use super::status_request;
use super::wait::{await_news, subscribe, Woke};
use crate::*;
use piw_host::store::RunStatus;

pub(crate) fn run(
    paths: &PiwPaths,
    mut client: BlockingClient,
    args: SubmitArgs,
) -> Result<(), CliError> {
    let SubmitArgs {
        run_id,
        result,
        input,
        interaction,
        timeout,
        json,
    } = args;
    let result = input.or(result).unwrap_or(Value::Null);
    let status: replies::RunStatusReply = reply(&client.send(status_request(&run_id))?)?;
    let mut interactions = status.interactions.iter();
    // Named: that request, whatever it has become (the host refuses a closed one). Else
    // the open one, guarded against a result an earlier request already took.
    let named = interaction.is_some();
    let bound = match &interaction {
        Some(id) => interactions
            .find(|i| i.interaction_id == *id)
            .ok_or_else(|| CliError::Runtime(format!("run {run_id} has no interaction {id}")))?,
        None => interactions
            .find(|i| i.status == "pending" || i.status == "validating")
            .ok_or_else(|| {
                CliError::Runtime(format!(
                    "run {run_id} waits for no interactive step (the run {})",
                    status_words(status.run.status.as_str())
                ))
            })?,
    };
    let request = Request::new(
        piw_host::ids::new_id("cli"),
        RequestBody::InteractionSubmit(payload::InteractionSubmit {
            interaction_id: bound.interaction_id.clone(),
            result,
            refuse_repeat: !named,
        }),
    )
    .with_run_id(&run_id)
    .with_node_id(bound.node_id.clone())
    .with_attempt_id(bound.attempt_id.clone());
    let mut receipt = client.send(request)?;
    let submitted: replies::InteractionSubmitted = reply(&receipt)?;
    if timeout > 0 && submitted.state == "validating" {
        let deadline = std::time::Instant::now() + Duration::from_secs(timeout);
        wait_for_verdict(paths, client, &run_id, &submitted.submission_id, deadline)?;
        receipt.body["state"] = json!("accepted");
    }
    print_receipt(&receipt.body, json)
}

/// Waits (until `deadline`) for the workflow's verdict on submission `submission_id` of
/// `run_id`. `Ok` once it is accepted; an error saying why when it is
/// rejected (`submission_rejected`, the workflow's reason), or the run stopped for review
/// (`run_in_review`) or ended before judging it, or no verdict came in time (exit 4).
fn wait_for_verdict(
    paths: &PiwPaths,
    mut client: BlockingClient,
    run_id: &str,
    submission_id: &str,
    deadline: std::time::Instant,
) -> Result<(), CliError> {
    subscribe(&mut client, run_id)?;
    let gave_up = |state: &str| {
        CliError::GaveUpWaiting(format!(
            "no verdict on submission {submission_id} of run {run_id} yet (the run {}): the submission stands and is judged later (`piw run status {run_id}`)",
            status_words(state)
        ))
    };
    loop {
        // Subscribed first, then read: no verdict can fall between the read and the wait.
        let status: replies::RunStatusReply = reply(&client.send(status_request(run_id))?)?;
        let run = &status.run;
        let run_status = run.status.as_str();
        let last = status
            .interactions
            .iter()
            .filter_map(|i| i.last_submission.as_ref())
            .find(|s| s.submission_id == submission_id);
        let details = json!({ "run_id": run_id, "submission_id": submission_id });
        match last.map(|s| s.state.as_str()) {
            Some("accepted") => return Ok(()),
            Some("rejected") => {
                let why = last
                    .and_then(|s| s.error.as_deref())
                    .unwrap_or("no reason given");
                let mut details = details;
                details["error"] = json!(why);
                return Err(CliError::Client {
                    code: "submission_rejected",
                    message: format!(
                        "the workflow rejected submission {submission_id} of run {run_id}: {why}"
                    ),
                    details,
                });
            }
            _ if run.status == RunStatus::Review => {
                let why = run.review_reason.as_deref().unwrap_or("no reason given");
                let mut details = details;
                details["review_reason"] = json!(why);
                return Err(CliError::Client {
                    code: "run_in_review",
                    message: format!(
                        "run {run_id} stopped for review before judging submission {submission_id}: {why}; the submission stands and is judged once the run goes on (`piw run retry {run_id}`)"
                    ),
                    details,
                });
            }
            _ if run.status.is_terminal() => {
                return Err(CliError::Client {
                    code: "invalid_transition",
                    message: format!(
                        "run {run_id} {} before judging submission {submission_id}",
                        status_words(run_status)
                    ),
                    details,
                });
            }
            _ => {}
        }
        match await_news(paths, &mut client, run_id, Some(deadline))? {
            Woke::News => {}
            Woke::GaveUp => return Err(gave_up(run_status)),
            Woke::Failed(e) => return Err(e.into()),
        }
    }
}
