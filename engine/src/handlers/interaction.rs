//! The `interaction.*` requests: submit, fail, update (durable commands) and list (a read).

use super::required;
use crate::fit::{keep_what_fits, reply_room};
use crate::graph::{Graph, Outcome, Route};
use crate::protocol::reply::{
    InteractionFailed, InteractionListReply, InteractionSubmitted, InteractionUpdated, ValueStored,
};
use crate::protocol::value::{chunk_from_hex, VALUE_PUT_CHUNK_BYTES};
use crate::protocol::{payload, Request};
use crate::state::HostState;
use crate::store::{Storage, StoreError, SubmissionState, Transaction};

/// `interaction.submit`: submit a provisional result for an interactive request.
pub(crate) fn submit(
    w: &mut dyn Transaction,
    req: &Request,
    s: &payload::InteractionSubmit,
) -> Result<InteractionSubmitted, StoreError> {
    let attempt_id = required(&req.attempt_id, "attempt_id")?;
    w.require_interaction_of(
        required(&req.run_id, "run_id")?,
        required(&req.node_id, "node_id")?,
        &s.interaction_id,
    )?;
    // The same result again for a request that took it: the original receipt.
    if let Some((submission_id, state)) =
        w.repeated_submission(&s.interaction_id, attempt_id, &s.result)?
    {
        return Ok(InteractionSubmitted {
            interaction_id: s.interaction_id.clone(),
            submission_id,
            state,
            repeated: true,
        });
    }
    if s.refuse_repeat {
        w.refuse_accepted_before(&s.interaction_id, &s.result)?;
    }
    let submission_id = w.submit(
        &s.interaction_id,
        attempt_id,
        &s.result,
        req.idempotency_key.as_deref(),
    )?;
    Ok(InteractionSubmitted {
        interaction_id: s.interaction_id.clone(),
        submission_id,
        state: SubmissionState::Validating.as_str().to_owned(),
        repeated: false,
    })
}

/// `interaction.fail`: fail the attempt of a pending interactive request the session gave up on.
pub(crate) fn fail(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
    f: &payload::InteractionFail,
) -> Result<InteractionFailed, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let node_id = required(&req.node_id, "node_id")?;
    w.require_interaction_of(run_id, node_id, &f.interaction_id)?;
    // Route `failed` from the node as a child would: the stored graph decides (read
    // here, not from the host's cache: a command must not change the host's memory).
    let (_, definition, _) = w.run_payload(run_id)?;
    let graph = definition
        .as_ref()
        .map(Graph::parse)
        .transpose()
        .map_err(|e| StoreError::CorruptRow(format!("stored graph: {e}")))?
        .ok_or_else(|| StoreError::InvalidInput("the run has no graph snapshot".into()))?;
    let next = match graph.route(node_id, &Outcome::Failed(&f.reason)) {
        Ok(Route::Next(next)) => Some(next),
        _ => None,
    };
    let deadline = next.as_deref().and_then(|n| {
        graph.node(n).and_then(|n| n.timeout_ms).map(|ms| {
            w.now_ms()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
        })
    });
    w.fail_interaction(
        &f.interaction_id,
        required(&req.attempt_id, "attempt_id")?,
        &f.reason,
        next.as_deref().map(|n| (n, deadline)),
        &format!("{}-control", state.owner_id),
    )?;
    Ok(InteractionFailed {
        interaction_id: f.interaction_id.clone(),
        routed_to: next,
    })
}

/// `interaction.update`: a progress update from the agent working on a pending interactive request.
pub(crate) fn update(
    w: &mut dyn Transaction,
    req: &Request,
    u: &payload::InteractionUpdate,
) -> Result<InteractionUpdated, StoreError> {
    w.require_interaction_of(
        required(&req.run_id, "run_id")?,
        required(&req.node_id, "node_id")?,
        &u.interaction_id,
    )?;
    let kept = w.interaction_progress(
        &u.interaction_id,
        required(&req.attempt_id, "attempt_id")?,
        &u.message,
        &u.data,
    )?;
    Ok(InteractionUpdated {
        interaction_id: u.interaction_id.clone(),
        seq: kept.seq,
        event_kept: kept.event_kept,
    })
}

/// `interaction.value_put`: a chunk of a large value a submission to a pending interactive
/// request will refer to, stored for the request's run (bound to the request: of this run and
/// node, pending, its own attempt, before its deadline).
pub(crate) fn value_put(
    w: &mut dyn Transaction,
    req: &Request,
    put: &payload::InteractionValuePut,
) -> Result<ValueStored, StoreError> {
    w.require_interaction_of(
        required(&req.run_id, "run_id")?,
        required(&req.node_id, "node_id")?,
        &put.interaction_id,
    )?;
    let data = chunk_from_hex(&put.data).map_err(StoreError::InvalidInput)?;
    if data.len() > VALUE_PUT_CHUNK_BYTES {
        return Err(StoreError::InvalidInput(format!(
            "a value chunk carries at most {VALUE_PUT_CHUNK_BYTES} bytes"
        )));
    }
    let stored = w.put_interaction_value_chunk(
        &put.interaction_id,
        required(&req.attempt_id, "attempt_id")?,
        &put.sha256,
        put.bytes,
        put.offset,
        &data,
    )?;
    Ok(ValueStored {
        received: stored.received,
        complete: stored.complete,
    })
}

/// `interaction.list`: list pending interactive requests of a Pi session.
pub(crate) fn list(
    store: &dyn Storage,
    reply_limit: usize,
    l: &payload::InteractionList,
) -> Result<InteractionListReply, StoreError> {
    // Oldest first, as many whole requests as fit: the rest show once these are
    // answered (each request is under the payload limit, so one always fits).
    let mut interactions = store.interactions(None, Some(&l.session_id))?;
    let more = keep_what_fits(&mut interactions, reply_room(reply_limit));
    Ok(InteractionListReply { interactions, more })
}
