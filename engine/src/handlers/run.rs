//! The `run.*` requests: start, pause, resume, cancel, retry (durable commands), status
//! and list (reads).

use serde_json::Value;

use super::{fence_for, required};
use crate::fit::{fit_run_status, omit_until_it_fits, reply_excess, reply_room};
use crate::protocol::reply::{
    RunCancelled, RunDetached, RunListReply, RunPaused, RunQueued, RunStatusReply,
};
use crate::protocol::{json_len, payload, Request};
use crate::state::HostState;
use crate::store::{
    ExecutionMode, Fence, NewRun, Provenance, RunStatus, Storage, StoreError, Transaction,
};

/// A run start with its source already read and hashed by the connection task (file I/O
/// stays off the store thread).
#[derive(Debug, Clone)]
pub struct PreparedStart {
    pub new_run: NewRun,
}

/// What the connection task read of a run's workflow file for `run.retry` with
/// `accept_source`: the file the run was started with, hashed as it is now (file I/O stays off
/// the store thread, as for [`PreparedStart`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedSource {
    pub source_root: String,
    pub source_hash: String,
}

/// `run.start`: start a new run.
pub(crate) fn start(
    w: &mut dyn Transaction,
    start: Option<&PreparedStart>,
) -> Result<RunQueued, StoreError> {
    let start =
        start.ok_or_else(|| StoreError::InvalidInput("run.start was not prepared".into()))?;
    let run_id = w.start_run(&start.new_run)?;
    Ok(RunQueued {
        run_id,
        status: RunStatus::Queued,
    })
}

/// `run.pause`: pause a run at its next durable boundary.
pub(crate) fn pause(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
) -> Result<RunPaused, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let fence = fence_for(w, state, run_id)?;
    w.pause(run_id, fence)?;
    Ok(RunPaused {
        run_id: run_id.to_owned(),
        paused: true,
    })
}

/// `run.detach`: an interactive run's steps go to host-launched bridges from now on. Refused
/// when this host could not serve them (it runs no bridges, or nothing names a Pi provider and
/// model for the run): the run would wait for ever once its session is closed.
pub(crate) fn detach(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
) -> Result<RunDetached, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let refused = |w: &dyn Transaction, detail: &str| -> StoreError {
        match w.run_status(run_id) {
            Ok(status) => StoreError::InvalidTransition {
                run_id: run_id.to_owned(),
                op: crate::store::Op::Detach,
                status,
                detail: detail.to_owned(),
            },
            Err(e) => e,
        }
    };
    let Some(settings) = state.child_config.bridges.as_ref() else {
        return Err(refused(
            w,
            "this host runs no Pi for detached steps (PIW_DETACHED_BRIDGES=off)",
        ));
    };
    // The run's state is checked first (an ended run is refused as such, a detached one is
    // left as it is); a refusal below undoes the write with the command.
    let changed = w.detach(run_id)?;
    let (input, definition, _) = w.run_payload(run_id)?;
    if changed && crate::detached_model::pi_model(definition.as_ref(), &input, settings).is_none() {
        return Err(refused(
            w,
            "nothing names a Pi provider and model to answer its steps once detached, and Pi has no default model: set defaultProvider and defaultModel in Pi's settings.json or start the host with PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL (then `piw host stop`), or give the workflow `detached: { provider, model }`; the run stays as it is",
        ));
    }
    Ok(RunDetached {
        run_id: run_id.to_owned(),
        execution_mode: ExecutionMode::Detached,
        changed,
    })
}

/// `run.resume`: resume a paused run.
pub(crate) fn resume(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
) -> Result<RunPaused, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let fence = fence_for(w, state, run_id)?;
    w.resume(run_id, fence)?;
    Ok(RunPaused {
        run_id: run_id.to_owned(),
        paused: false,
    })
}

/// `run.cancel`: cancel a run.
pub(crate) fn cancel(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
    cancel: &payload::RunCancel,
) -> Result<RunCancelled, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let reason = cancel
        .reason
        .clone()
        .unwrap_or_else(|| "cancelled by request".into());
    let summary = match fence_for(w, state, run_id)? {
        held @ Fence::Claim(_) => w.cancel(run_id, held, &reason)?,
        // A running row this host does not hold: its lease must have expired. The
        // control claim refuses live owners and fences the old one before the cancel.
        Fence::Unclaimed if w.run_status(run_id)? == RunStatus::Running => {
            let control = w.control_claim(run_id, &format!("{}-control", state.owner_id))?;
            w.cancel(run_id, Fence::Claim(&control), &reason)?
        }
        unclaimed => w.cancel(run_id, unclaimed, &reason)?,
    };
    // The claim is forgotten, and the child stopped, after the commit
    // (`children::forget_released_claims`).
    Ok(RunCancelled {
        run_id: run_id.to_owned(),
        status: RunStatus::Cancelled,
        summary,
    })
}

/// `run.retry`: run the current node of a run in review again (a person's way out).
pub(crate) fn retry(
    w: &mut dyn Transaction,
    req: &Request,
    r: &payload::RunRetry,
    accepted: Option<&AcceptedSource>,
) -> Result<RunQueued, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let who = Provenance {
        by: r.by.as_deref().unwrap_or("unknown"),
        reason: r.reason.as_deref().unwrap_or(""),
    };
    if r.accept_source {
        // The driver read the file (`driver::start_file::hash_accepted_source`); a retry
        // that reaches here without it was not prepared, and its refusal says why.
        let accepted = accepted.ok_or_else(|| {
            StoreError::InvalidInput(
                "run.retry with accept_source needs the run's workflow file read by the host"
                    .into(),
            )
        })?;
        w.retry_accepting_source(run_id, &accepted.source_hash, who)?;
    } else {
        w.retry_from_review(run_id, who)?;
    }
    // `queued`, or `waiting` when its attempt waits on a request nobody answered.
    let (status, _) = w.run_state(run_id)?;
    Ok(RunQueued {
        run_id: run_id.to_owned(),
        status,
    })
}

/// `run.status`: status of one run.
pub(crate) fn status(
    store: &dyn Storage,
    req: &Request,
    reply_limit: usize,
    query: &payload::RunStatusQuery,
) -> Result<RunStatusReply, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    let run = store.run(run_id)?;
    let claim = store.claim_info(run_id)?;
    // Newest first and capped: a run that looped thousands of times still has a
    // status that fits a reply; older pages are asked for with `attempts_before`.
    let (mut attempts, attempt_count) = store.attempts_page(
        run_id,
        query.attempts_before.as_deref(),
        query
            .attempts_limit
            .unwrap_or(payload::DEFAULT_STATUS_ATTEMPTS)
            .min(payload::MAX_STATUS_ATTEMPTS),
    )?;
    let mut decisions = store.decisions(run_id)?;
    let mut interactions = store.interactions(Some(run_id), None)?;
    let mut effects = store.effects(run_id)?;
    // What the newest child said (its exit and output tails, masked like the loss
    // reasons): a run that failed or stopped for review shows why in its own words.
    let last_child = store.last_child(run_id)?.map(|mut c| {
        c.stdout_tail = crate::process::mask_hex_runs(&c.stdout_tail);
        c.stderr_tail = crate::process::mask_hex_runs(&c.stderr_tail);
        c
    });
    let mut updates = store.updates(run_id)?;
    let events_dropped = store.events_dropped(run_id)?;
    let (mut messages, message_count) = store.newest_messages(run_id, payload::STATUS_MESSAGES)?;
    let body_len = |attempts: &[_],
                    decisions: &[_],
                    interactions: &[_],
                    effects: &[_],
                    updates: &[_],
                    messages: &[_]| {
        json_len(&(
            &run,
            &claim,
            attempts,
            decisions,
            interactions,
            effects,
            &last_child,
            updates,
            messages,
        ))
    };
    let excess = reply_excess(
        body_len(
            &attempts,
            &decisions,
            &interactions,
            &effects,
            &updates,
            &messages,
        ),
        reply_limit,
    );
    fit_run_status(
        &mut attempts,
        &mut interactions,
        &mut decisions,
        &mut effects,
        excess,
    );
    // Then the data of the oldest updates, then the oldest messages' content, when what is
    // left still does not fit.
    let excess = reply_excess(
        body_len(
            &attempts,
            &decisions,
            &interactions,
            &effects,
            &updates,
            &messages,
        ),
        reply_limit,
    );
    let excess = omit_until_it_fits(
        updates
            .iter_mut()
            .map(|u| (&mut u.data, &mut u.data_omitted)),
        excess,
    );
    omit_until_it_fits(
        messages
            .iter_mut()
            .map(|m| (&mut m.content, &mut m.content_omitted)),
        excess,
    );
    Ok(RunStatusReply {
        run,
        claim,
        attempts,
        attempt_count,
        decisions,
        interactions,
        effects,
        last_child,
        updates,
        events_dropped,
        messages,
        message_count,
        step_service: None,
    })
}

/// `run.list`: a page of runs, newest first, with where the next page starts.
pub(crate) fn list(
    store: &dyn Storage,
    reply_limit: usize,
    list: &payload::RunList,
) -> Result<RunListReply, StoreError> {
    // A page of no runs could not say where the next one starts (its cursor is its last
    // run), so it would answer `more: false` with runs left: refused instead.
    if list.limit == Some(0) {
        return Err(StoreError::InvalidInput(
            "`limit` must be at least 1 (a page of no runs has no place to go on from)".into(),
        ));
    }
    let cursor_key = store.cursor_key();
    let after = payload::checked_cursor(list.cursor.as_ref(), &cursor_key)?;
    let limit = list
        .limit
        .unwrap_or(payload::DEFAULT_LIST_RUNS)
        .min(payload::MAX_LIST_RUNS);
    // One more than asked for: whether more follow.
    let mut runs = store.list_runs_after(
        list.session_id.as_deref(),
        list.unfinished == Some(true),
        list.statuses.as_deref().unwrap_or_default(),
        list.run_id_prefix.as_deref(),
        after,
        limit.saturating_add(1),
    )?;
    let mut more = runs.len() > limit as usize;
    runs.truncate(limit as usize);
    // As many runs as fit without their results (the rest are the next page), then the
    // results of the newest that fit with them: the oldest runs' results go first.
    let room = reply_room(reply_limit).saturating_sub(RUN_LIST_ENVELOPE_ROOM);
    let fits = runs_fitting_without_results(&runs, room);
    more |= fits < runs.len();
    runs.truncate(fits);
    let excess = json_len(&runs).saturating_sub(room);
    omit_until_it_fits(
        runs.iter_mut()
            .rev()
            .map(|r| (r.result.get_or_insert(Value::Null), &mut r.result_omitted)),
        excess,
    );
    let next_cursor = more
        .then(|| {
            runs.last()
                .map(|r| payload::RunListCursor::sign(&cursor_key, r.list_key()))
        })
        .flatten();
    Ok(RunListReply {
        runs,
        more: next_cursor.is_some(),
        next_cursor,
    })
}

/// What a `run.list` body takes besides its runs: `more` and the longest `next_cursor` (a
/// run id is at most a text argument's length; counted generously).
const RUN_LIST_ENVELOPE_ROOM: usize = 512;

/// How many of `runs`, from the first, fit `room` bytes of JSON once their results are left
/// out (at least the first: a run's record without its result is far under a frame).
pub(crate) fn runs_fitting_without_results(runs: &[crate::store::RunRecord], room: usize) -> usize {
    // A left-out result is `null` and its mark.
    const OMITTED: usize = r#"null,"result_omitted":true"#.len();
    let mut used = 2usize;
    runs.iter()
        .take_while(|run| {
            let result = run.result.as_ref().map_or(4, json_len);
            let without = json_len(run).saturating_sub(result) + OMITTED;
            used = used.saturating_add(without + 1);
            used <= room
        })
        .count()
        .max(1)
        .min(runs.len())
}
