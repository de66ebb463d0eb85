//! Fitting a reply under the frame limit: how much room a body has, and which values a
//! `run.status` or a list leaves out (each with its "omitted" mark) when it is too large; and
//! where a typed reply becomes JSON ([`body`], [`receipt`]).

use serde_json::Value;

use crate::protocol::reply::body_of;
use crate::protocol::{json_len, Receipt};
use crate::store::StoreError;

/// Room left in a reply frame for what is not the body: the envelope, the request id (up
/// to its own limit), the receipt's fields.
pub(crate) const REPLY_ENVELOPE_ROOM: usize = 8 * 1024;

/// The bytes of body a reply under `reply_limit` can carry.
pub(crate) fn reply_room(reply_limit: usize) -> usize {
    reply_limit.saturating_sub(REPLY_ENVELOPE_ROOM)
}

/// The receipt body of a command's typed reply: the one place it becomes JSON (a command's
/// body is stored with its receipt, for replays).
pub(crate) fn body<T: serde::Serialize>(reply: &T) -> Result<Value, StoreError> {
    Ok(body_of(reply)?)
}

/// The receipt of a read's typed reply.
pub(crate) fn receipt<T: serde::Serialize>(
    revision: Option<u64>,
    reply: &T,
) -> Result<Receipt, StoreError> {
    Ok(Receipt::new(revision, body_of(reply)?))
}

/// How many of `items`, from the first, fit `room` bytes of JSON together.
pub(crate) fn fitting_prefix<T: serde::Serialize>(items: &[T], room: usize) -> usize {
    let mut used = 0usize;
    // Each item also takes its separating comma.
    items
        .iter()
        .take_while(|item| {
            used = used.saturating_add(json_len(item) + 1);
            used <= room
        })
        .count()
}

/// As many whole items of `items` as fit `room` bytes of JSON, in order (at least the first:
/// an item is never larger than a frame); returns whether any were left out.
pub(crate) fn keep_what_fits<T: serde::Serialize>(items: &mut Vec<T>, room: usize) -> bool {
    let fits = fitting_prefix(items, room).max(1);
    let more = fits < items.len();
    items.truncate(fits);
    more
}

/// How many bytes a body of `body_len` bytes is over what a reply under `reply_limit` can carry.
pub(crate) fn reply_excess(body_len: usize, reply_limit: usize) -> usize {
    body_len.saturating_sub(reply_limit.saturating_sub(REPLY_ENVELOPE_ROOM))
}

/// Leaves out values (each with its "omitted" mark), in the order given, until `excess` bytes
/// are saved; returns what is still over. A run's attempts, requests and answers are
/// unbounded in number and a list's runs many, each value up to a payload's size, so a long
/// run (or a few large results) would otherwise make a status or a list unreadable
/// (`payload_too_large`), and every client waiting on it with it.
///
/// A value no longer than what replaces it stays: leaving it out would save nothing (and
/// make the body longer), so a run of many small outputs keeps them.
pub(crate) fn omit_until_it_fits<'a>(
    values: impl Iterator<Item = (&'a mut Value, &'a mut bool)>,
    mut excess: usize,
) -> usize {
    // `null` and the mark replace it; counted with the longest mark (`request_omitted`), so
    // the saving counted is never more than the real one and a body counted as fitting does.
    const REPLACEMENT: usize = r#"null,"request_omitted":true"#.len();
    if excess == 0 {
        return 0;
    }
    for (value, omitted) in values {
        if excess == 0 {
            break;
        }
        if value.is_null() {
            continue;
        }
        let saved = json_len(value).saturating_sub(REPLACEMENT);
        if saved == 0 {
            continue;
        }
        *value = Value::Null;
        *omitted = true;
        excess = excess.saturating_sub(saved);
    }
    excess
}

/// Fits a `run.status` body `excess` bytes too large for its reply. Oldest first, and what is
/// still open (a pending or validating request, what a person must answer, an effect being
/// applied) stays, as do the run's result and every record's status: first the attempts'
/// outputs, then closed interactions' requests, then closed decisions' requests and answers,
/// then settled effects' receipts (an action's receipt is also its attempt's output, so a few
/// large ones would otherwise keep the body over the limit with every output left out).
pub(crate) fn fit_run_status(
    attempts: &mut [crate::store::AttemptRecord],
    interactions: &mut [crate::store::InteractionRecord],
    decisions: &mut [crate::store::DecisionRecord],
    effects: &mut [crate::store::EffectRecord],
    excess: usize,
) {
    // The attempts come newest first: the oldest outputs go first.
    let excess = omit_until_it_fits(
        attempts
            .iter_mut()
            .rev()
            .map(|a| (a.output.get_or_insert(Value::Null), &mut a.output_omitted)),
        excess,
    );
    let excess = omit_until_it_fits(
        interactions
            .iter_mut()
            .filter(|i| !matches!(i.status.as_str(), "pending" | "validating"))
            .map(|i| (&mut i.request, &mut i.request_omitted)),
        excess,
    );
    let excess = omit_until_it_fits(
        decisions
            .iter_mut()
            .filter(|d| d.status != "pending")
            .flat_map(|d| {
                [
                    (&mut d.request, &mut d.request_omitted),
                    (d.answer.get_or_insert(Value::Null), &mut d.answer_omitted),
                ]
            }),
        excess,
    );
    omit_until_it_fits(
        effects
            .iter_mut()
            .filter(|e| !matches!(e.state.as_str(), "reserved" | "applying"))
            .map(|e| (e.receipt.get_or_insert(Value::Null), &mut e.receipt_omitted)),
        excess,
    );
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::store::{AttemptRecord, DecisionRecord, EffectRecord, InteractionRecord};
    use serde_json::json;

    fn big(kb: usize) -> Value {
        json!("x".repeat(kb * 1024))
    }

    fn attempt(n: u64, output: Value) -> AttemptRecord {
        AttemptRecord {
            attempt_id: format!("att-{n}"),
            node_id: format!("n{n}"),
            ordinal: n,
            generation: 1,
            status: "succeeded".into(),
            deadline_at: None,
            output: Some(output),
            output_omitted: false,
            error: None,
            started_at: 0,
            finished_at: Some(0),
        }
    }

    fn interaction(n: u64, status: &str, request: Value) -> InteractionRecord {
        InteractionRecord {
            interaction_id: format!("int-{n}"),
            run_id: "run-1".into(),
            attempt_id: format!("att-{n}"),
            node_id: format!("n{n}"),
            origin_session: None,
            kind: "agent".into(),
            request,
            request_omitted: false,
            deadline_at: None,
            status: status.into(),
            last_submission: None,
        }
    }

    fn decision(n: u64, status: &str, request: Value, answer: Option<Value>) -> DecisionRecord {
        DecisionRecord {
            decision_id: format!("dec-{n}"),
            run_id: "run-1".into(),
            attempt_id: format!("att-{n}"),
            node_id: format!("n{n}"),
            kind: "checkpoint".into(),
            request,
            request_omitted: false,
            status: status.into(),
            answer,
            answer_omitted: false,
            answered_by: None,
        }
    }

    fn fitted(
        attempts: &mut [AttemptRecord],
        interactions: &mut [InteractionRecord],
        decisions: &mut [DecisionRecord],
        limit: usize,
    ) -> usize {
        fitted_with_effects(attempts, interactions, decisions, &mut [], limit)
    }

    fn fitted_with_effects(
        attempts: &mut [AttemptRecord],
        interactions: &mut [InteractionRecord],
        decisions: &mut [DecisionRecord],
        effects: &mut [EffectRecord],
        limit: usize,
    ) -> usize {
        let len = |a: &[AttemptRecord],
                   i: &[InteractionRecord],
                   d: &[DecisionRecord],
                   e: &[EffectRecord]| json_len(&(a, i, d, e));
        let excess = reply_excess(len(attempts, interactions, decisions, effects), limit);
        fit_run_status(attempts, interactions, decisions, effects, excess);
        len(attempts, interactions, decisions, effects)
    }

    fn effect(n: u64, state: &str, receipt: Option<Value>) -> EffectRecord {
        EffectRecord {
            effect_id: format!("eff-{n}"),
            run_id: "run-1".into(),
            attempt_id: format!("att-{n}"),
            effect_key: format!("key-{n}"),
            fingerprint: "fp".into(),
            state: state.into(),
            retry_contract: "never".into(),
            receipt,
            receipt_omitted: false,
            error: None,
        }
    }

    /// An action's receipt is also its attempt's output: a few large ones fill the reply
    /// twice over, and leaving out every output alone does not make it fit.
    #[test]
    fn settled_effects_receipts_go_last_and_the_body_then_fits() {
        let limit = 1024 * 1024;
        let mut attempts: Vec<_> = (1..=5).map(|n| attempt(n, big(230))).collect();
        let mut effects: Vec<_> = (1..=5)
            .map(|n| effect(n, "applied", Some(big(230))))
            .collect();
        effects.push(effect(6, "applying", Some(big(10))));
        let len = fitted_with_effects(&mut attempts, &mut [], &mut [], &mut effects, limit);
        assert!(len <= limit - REPLY_ENVELOPE_ROOM, "{len} bytes");
        assert!(
            attempts.iter().all(|a| a.output_omitted),
            "outputs go first"
        );
        assert!(effects[0].receipt_omitted, "then the oldest receipts");
        assert!(!effects[4].receipt_omitted, "no more than needed");
        assert!(
            !effects[5].receipt_omitted,
            "an effect being applied keeps its receipt"
        );
    }

    #[test]
    fn a_body_that_fits_is_left_whole() {
        let mut attempts = vec![attempt(1, big(100)), attempt(2, big(100))];
        let before = attempts.clone();
        fitted(&mut attempts, &mut [], &mut [], 1024 * 1024);
        assert_eq!(attempts, before);
    }

    #[test]
    fn the_oldest_outputs_go_first_and_the_body_then_fits() {
        // Newest first, as `run.status` lists them.
        let mut attempts: Vec<_> = (1..=6).rev().map(|n| attempt(n, big(200))).collect();
        let limit = 1024 * 1024;
        let len = fitted(&mut attempts, &mut [], &mut [], limit);
        assert!(len <= limit - REPLY_ENVELOPE_ROOM, "{len} bytes");
        let omitted = attempts.iter().filter(|a| a.output_omitted).count();
        assert!(omitted >= 1);
        assert!(
            attempts
                .iter()
                .rev()
                .take(omitted)
                .all(|a| a.output_omitted && a.output.as_ref().is_some_and(Value::is_null)),
            "the oldest go first"
        );
        assert!(
            attempts
                .iter()
                .rev()
                .skip(omitted)
                .all(|a| a.output == Some(big(200))),
            "the others stay whole"
        );
        // No more than needed: with the last one left out put back, it would not fit.
        assert!(len + json_len(&big(200)) > limit - REPLY_ENVELOPE_ROOM);
    }

    /// Leaving out a value shorter than its mark (`1`, `{}`) makes the body longer, not
    /// shorter: such values stay, and the saving counted is never more than the real one, so
    /// a body that can fit does.
    #[test]
    fn values_shorter_than_their_mark_stay_and_the_body_fits() {
        let limit = 1024 * 1024;
        let target = limit - REPLY_ENVELOPE_ROOM;
        // Many small outputs, oldest first, filling most of the reply, then one large output
        // that alone is enough to leave out.
        let small = json_len(&[attempt(99_999, json!(1))]);
        let count = (target - 16 * 1024) / small;
        let mut attempts: Vec<_> = (1..=count as u64).map(|n| attempt(n, json!(1))).collect();
        attempts.push(attempt(count as u64 + 1, big(200)));
        let len = fitted(&mut attempts, &mut [], &mut [], limit);
        assert!(len <= target, "{len} bytes, over {target}");
        assert!(
            attempts.last().unwrap().output_omitted,
            "the large one goes"
        );
        assert!(
            attempts.iter().rev().skip(1).all(|a| !a.output_omitted),
            "small outputs save nothing and stay"
        );
    }

    /// `request_omitted` is a byte longer than `output_omitted`: the count of what is saved
    /// must not credit it.
    #[test]
    fn leaving_out_many_requests_is_counted_with_their_own_mark() {
        let limit = 1024 * 1024;
        let target = limit - REPLY_ENVELOPE_ROOM;
        // Thousands of closed requests, most of which must go: one byte miscounted on each
        // is more than the last one left out saves beyond what was needed.
        let request = json!("y".repeat(998));
        let count = 4000;
        let mut interactions: Vec<_> = (1..=count)
            .map(|n| interaction(n, "settled", request.clone()))
            .collect();
        let len = fitted(&mut [], &mut interactions, &mut [], limit);
        let omitted = interactions.iter().filter(|i| i.request_omitted).count();
        assert!(omitted < count as usize, "fits without leaving out all");
        assert!(len <= target, "{len} bytes, over {target}");
    }

    #[test]
    fn open_requests_stay_and_closed_ones_go_after_the_outputs() {
        let mut attempts = vec![attempt(1, big(100))];
        let mut interactions = vec![
            interaction(1, "settled", big(300)),
            interaction(2, "pending", big(300)),
            interaction(3, "validating", big(300)),
        ];
        let mut decisions = vec![
            decision(1, "answered", big(100), Some(big(100))),
            decision(2, "pending", big(100), None),
        ];
        let limit = 1024 * 1024;
        let len = fitted(&mut attempts, &mut interactions, &mut decisions, limit);
        assert!(len <= limit - REPLY_ENVELOPE_ROOM, "{len} bytes");
        assert!(attempts[0].output_omitted, "outputs go first");
        assert!(interactions[0].request_omitted, "then closed requests");
        assert!(
            !interactions[1].request_omitted && !interactions[2].request_omitted,
            "open requests stay"
        );
        assert_eq!(interactions[1].request, big(300));
        assert!(!decisions[1].request_omitted, "a pending decision stays");
    }
}
