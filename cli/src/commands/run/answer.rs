//! `piw run answer`: a person's answer to an ordinary checkpoint, bound to one decision.

use super::status_request;
use crate::*;
use piw_host::store::DecisionRecord;

pub(crate) fn run(client: &mut BlockingClient, args: AnswerArgs) -> Result<(), CliError> {
    let AnswerArgs {
        run_id,
        answer,
        input,
        decision,
        json,
    } = args;
    let answer = input.unwrap_or_else(|| json_or_text(&answer.unwrap_or_default()));
    answer_decision(
        client,
        &run_id,
        "checkpoint",
        decision.as_deref(),
        answer,
        json,
    )
}

/// Answers, as a person, the decision of `kind` of `run_id` that `answer` binds to
/// ([`bound_decision`]), and prints the receipt (the original one when the named decision
/// already took this very answer). `decision.answer` takes checkpoints too (`answered_by:
/// person`).
pub(crate) fn answer_decision(
    client: &mut BlockingClient,
    run_id: &str,
    kind: &str,
    named: Option<&str>,
    answer: Value,
    json: bool,
) -> Result<(), CliError> {
    let decision = match bound_decision(client, run_id, kind, named, &answer)? {
        Ok(id) => id,
        Err(receipt) => return print_receipt(&receipt, json),
    };
    let r = client.send(run_request(
        run_id,
        RequestBody::DecisionAnswer(payload::DecisionAnswer {
            decision_id: decision,
            answer,
            channel: None,
        }),
    ))?;
    print_receipt(&r.body, json)
}

/// The decision of `kind` (`checkpoint` or `human_decision`) of run `run_id` that a person's
/// `answer` binds to: `named` (whatever it has become: the host refuses one that is closed),
/// else the one the run waits for now, refused when an earlier decision of that kind took an
/// equal answer (the same command run again must not answer the next visit). `Err(receipt)`
/// inside: the named decision already took this very answer; its original receipt.
pub(crate) fn bound_decision(
    client: &mut BlockingClient,
    run_id: &str,
    kind: &str,
    named: Option<&str>,
    answer: &Value,
) -> Result<Result<String, Value>, CliError> {
    let status: replies::RunStatusReply = reply(&client.send(status_request(run_id))?)?;
    let of_kind: Vec<&DecisionRecord> =
        status.decisions.iter().filter(|d| d.kind == kind).collect();
    // An answer of `null` reads back as no answer.
    let took = |d: &DecisionRecord| {
        d.status == "answered" && d.answer.as_ref().unwrap_or(&Value::Null) == answer
    };
    if let Some(id) = named {
        let d = of_kind
            .iter()
            .find(|d| d.decision_id == id)
            .ok_or_else(|| CliError::Runtime(format!("run {run_id} has no {kind} {id}")))?;
        if took(d) {
            return Ok(Err(
                json!({ "decision_id": id, "answered_by": d.answered_by,
                                  "repeated": true }),
            ));
        }
        return Ok(Ok(id.to_owned()));
    }
    let pending = of_kind
        .iter()
        .find(|d| d.status == "pending")
        .ok_or_else(|| {
            let what = if kind == "checkpoint" {
                "a checkpoint answer (`piw run answer`)"
            } else {
                "a person's decision (`piw run decide`)"
            };
            CliError::Runtime(format!(
                "run {run_id} does not wait for {what} (the run {})",
                status_words(status.run.status.as_str())
            ))
        })?;
    let id = pending.decision_id.clone();
    if let Some(earlier) = of_kind.iter().find(|d| took(d)) {
        return Err(CliError::Runtime(format!(
            "run {run_id}: this answer was already given to decision {} (node {}); to give it to decision {id} too, name it: --decision {id}",
            earlier.decision_id, earlier.node_id,
        )));
    }
    Ok(Ok(id))
}
