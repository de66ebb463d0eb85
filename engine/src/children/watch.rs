//! What the host watches about its children once they run: their exits (a loss, a release, an
//! abandoned launch), the deadlines it owns (handshake, validation, node, lingering, heartbeat)
//! and the stops it orders.

use super::*;
use crate::time::UnixMillis;

/// Child reports of one batch: the pids of started children are recorded in one
/// transaction; each exit is handled on its own (it may requeue its run).
pub fn on_child_reports(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    reports: Vec<ChildReport>,
) {
    if !reports.is_empty() {
        // A slot freed, a judge lost: what bridges are needed may have changed.
        state.bridges.up_to_date = false;
    }
    let (bridge_reports, reports) = split_reports(reports, |r| match r {
        ChildReport::Bridge(b) => Sorted::Taken(b),
        other => Sorted::Rest(other),
    });
    crate::bridges::on_reports(store, state, now, bridge_reports);
    let (channel_reports, reports) = split_reports(reports, |r| match r {
        ChildReport::Channel(c) => Sorted::Taken(c),
        other => Sorted::Rest(other),
    });
    crate::channels::on_reports(state, now, channel_reports);
    let (pass_reports, reports) = split_reports(reports, |r| match r {
        ChildReport::Pass(p) => Sorted::Taken(p),
        other => Sorted::Rest(other),
    });
    crate::controllers::on_reports(store, state, now, pass_reports);
    let mut abandoned_ended = Vec::new();
    let (started, exited): (Vec<_>, Vec<_>) = reports
        .into_iter()
        .filter(|r| {
            // A child whose launch never committed: nothing of it is in the store.
            if !state.abandoned_launches.contains_key(&r.launch()) {
                return true;
            }
            if matches!(r, ChildReport::Exited { .. }) {
                abandoned_ended.extend(state.abandoned_launches.remove(&r.launch()));
            }
            false
        })
        .partition(|r| matches!(r, ChildReport::Started { .. }));
    remove_logs_of_runs_never_stored(store, state, abandoned_ended);
    for report in &started {
        if let ChildReport::Started {
            run_id,
            generation,
            standby,
            pid,
            ..
        } = report
        {
            if let Some(entry) = state
                .children
                .get_mut(run_id)
                .filter(|e| e.generation == *generation)
            {
                entry.from_standby |= *standby;
                entry.pid = Some(*pid);
            }
        }
    }
    if !started.is_empty() {
        let recorded = store.write(now, |w| {
            for report in &started {
                if let ChildReport::Started {
                    child_epoch,
                    pid,
                    start_time,
                    ..
                } = report
                {
                    w.record_child_process(*child_epoch, *pid, *start_time)?;
                }
            }
            Ok(())
        });
        if let Err(e) = recorded {
            crate::store_error!(e, "cannot record child pids");
        }
    }
    for report in exited {
        on_child_report(store, state, now, report);
    }
}

/// The log directories of abandoned launches (their exits just reported) whose run the store
/// does not hold: the run's `run.start` was in the batch that failed to commit, so the run
/// never existed, but the supervisor created its child's log at the spawn. Nothing else would
/// remove it (a prune removes stored runs' logs; the sweep at a host's first prune looks only
/// once, before this can happen). A stored run keeps its logs.
fn remove_logs_of_runs_never_stored(
    store: &dyn Storage,
    state: &mut HostState,
    run_ids: Vec<String>,
) {
    let Some(logs) = state.child_config.output_logs.clone() else {
        return;
    };
    let dirs: Vec<_> = run_ids
        .iter()
        .filter(|run_id| !state.children.contains_key(*run_id))
        .filter(|run_id| matches!(store.run_view(run_id), Ok(None)))
        .filter_map(|run_id| crate::retention::run_log_dir(&logs, run_id))
        .collect();
    if !dirs.is_empty() {
        state
            .child_commands
            .push(SupervisorCmd::RemoveLogs { dirs });
    }
}

/// A worker's connection closed (`run_id`, `generation`: what it spoke for). A child whose run
/// still needs it cannot go on without the host, so unless it exits by itself within a kill
/// grace it is stopped then, and its exit is handled as a lost child. Ignored while the host
/// stops (it closes every connection) and for a run already released.
pub fn worker_disconnected(state: &mut HostState, now: i64, run_id: &str, generation: u64) {
    if state.shutting_down {
        return;
    }
    if let Some(entry) = state
        .children
        .get_mut(run_id)
        .filter(|e| e.generation == generation && !e.stopping && e.released_at.is_none())
    {
        entry.disconnected_at.get_or_insert(now);
    }
}

/// The most refused children remembered ([`child_refused`]): a refused connection that is not
/// a run's child (a standby worker, a bridge) leaves its pid behind until an exit clears it.
const MAX_REFUSED_CHILDREN: usize = 1_024;

/// The host refused a connection of its own child `pid` for want of room: remember it, so
/// that the child's exit (it cannot work without the host) requeues its run without counting
/// a loss, as a launch the host had no resources for does ([`on_child_report`]). Only a child
/// that never said hello is forgiven this way: one that is already working holds its slot.
pub fn child_refused(state: &mut HostState, pid: u32) {
    if state.refused_children.len() >= MAX_REFUSED_CHILDREN {
        state.refused_children.clear();
    }
    state.refused_children.insert(pid);
}

/// How long a run whose child could not be started for lack of the host's own resources
/// waits before it is launched again.
const LAUNCH_RETRY_MS: i64 = 1_000;

/// A child report: record it, and when a child died while its run was still running under
/// our claim, requeue the run from its last committed boundary (or stop it for review).
pub fn on_child_report(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    report: ChildReport,
) {
    match report {
        ChildReport::Started {
            run_id,
            generation,
            child_epoch,
            launch: _,
            pid,
            start_time,
            standby,
        } => {
            if let Some(entry) = state
                .children
                .get_mut(&run_id)
                .filter(|e| e.generation == generation)
            {
                entry.from_standby |= standby;
                entry.pid = Some(pid);
            }
            if let Err(e) = store.write(now, |w| {
                w.record_child_process(child_epoch, pid, start_time)
            }) {
                crate::store_error!(e, %run_id, generation, "cannot record child pid");
            }
        }
        ChildReport::Exited {
            run_id,
            generation,
            child_epoch,
            launch,
            exit,
            host_ran_out_of,
        } => {
            let ours = state
                .children
                .get(&run_id)
                .is_some_and(|e| e.generation == generation && e.launch == launch);
            let claim = state
                .claims
                .get(&run_id)
                .filter(|c| c.generation == generation)
                .cloned();
            // A standby worker can die while it waits (killed, out of memory) and be handed a
            // run before the host hears of it. Its run did nothing, so the first such exit
            // before the hello is not counted as a loss; a second one in a row is, so a
            // runtime that always dies early still ends in review.
            let may_forgive = ours
                && state
                    .children
                    .get(&run_id)
                    .is_some_and(|e| e.from_standby && !e.hello)
                && !state.forgiven_standby_exits.contains(&run_id);
            // A child whose connection the host refused for want of room, before its hello.
            let refused_for_room = ours
                && state
                    .children
                    .get(&run_id)
                    .and_then(|e| e.pid.filter(|_| !e.hello))
                    .is_some_and(|pid| state.refused_children.contains(&pid));
            if let Some(pid) = state
                .children
                .get(&run_id)
                .and_then(|e| e.pid)
                .filter(|_| ours)
            {
                state.refused_children.remove(&pid);
            }
            let host_ran_out_of = host_ran_out_of.or(refused_for_room.then_some("connections"));
            let mut forgiven = false;
            let stop_reason = state
                .children
                .get(&run_id)
                .filter(|_| ours)
                .and_then(|e| e.stop_reason.clone());
            let before = revision_of(store, &run_id);
            let result = store.write(now, |w| {
                w.record_child_exit(child_epoch, &exit)?;
                if let Some(claim) = &claim {
                    if w.run_status(&claim.run_id)? == RunStatus::Running {
                        let stderr = last_stderr_line(&exit.stderr_tail)
                            .map(|line| format!("; its last stderr line: {line}"))
                            .unwrap_or_default();
                        let why = match &stop_reason {
                            Some(stopped) => {
                                format!(
                                    "{stopped}; the host stopped the child ({}){stderr}",
                                    exit.reason
                                )
                            }
                            None => format!(
                                "child exited ({}) before the run reached a boundary{stderr}",
                                exit.reason
                            ),
                        };
                        let shutting_down = state.shutting_down;
                        let retry_at = w.now_ms() + LAUNCH_RETRY_MS;
                        let released = w.savepoint(|w| {
                            if shutting_down {
                                w.release_at_shutdown(claim)
                            } else if host_ran_out_of.is_some() && ours {
                                let why = if refused_for_room {
                                    format!(
                                        "the host had no room for the child's connection ({}); launched again",
                                        exit.reason
                                    )
                                } else {
                                    exit.reason.clone()
                                };
                                w.release_after_launch_failure(claim, &why, retry_at)
                            } else if may_forgive {
                                w.release_uncounted(
                                    claim,
                                    &format!(
                                        "a standby worker died before its hello ({})",
                                        exit.reason
                                    ),
                                )
                            } else {
                                w.child_lost(claim, &why)
                            }
                        });
                        forgiven = may_forgive && !shutting_down && released.is_ok();
                        match released {
                            // A stop ends children on purpose, and a standby worker's early
                            // death is forgiven: neither is a loss worth a warning.
                            Ok(r) if shutting_down || forgiven => tracing::info!(
                                run_id = %r.run_id,
                                status = %r.status,
                                "child ended before its run reached a boundary; run released"
                            ),
                            Ok(r) => {
                                tracing::warn!(run_id = %r.run_id, status = %r.status, "child lost")
                            }
                            Err(e) if e.is_claim_lost() => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(())
            });
            if let Err(e) = &result {
                crate::store_error!(e, %run_id, "cannot record child exit");
            }
            if forgiven && result.is_ok() {
                tracing::warn!(%run_id, reason = %exit.reason, "a standby worker died before its hello; requeued without counting a loss");
                state.forgiven_standby_exits.insert(run_id.clone());
            } else if ours {
                state.forgiven_standby_exits.remove(&run_id);
            }
            publish(state, &run_id, before);
            if ours {
                state.children.remove(&run_id);
                state.graphs.remove(&run_id);
            }
            if claim.is_some() {
                state.claims.remove(&run_id);
                state.renewed_at.remove(&run_id);
            }
        }
        ChildReport::Bridge(report) => {
            crate::bridges::on_reports(store, state, now, vec![report]);
        }
        ChildReport::Channel(report) => {
            crate::channels::on_reports(state, now, vec![report]);
        }
        ChildReport::Pass(report) => {
            crate::controllers::on_reports(store, state, now, vec![report]);
        }
    }
}

/// The last non-empty line a child wrote to stderr, for the reason its run records: a child
/// that dies before it can tell the host anything (a runtime that cannot start, a misconfigured
/// command) usually says why there, and a run stopped for review must show it. At most 600
/// bytes; runs of 32 or more hex digits are masked, so nothing shaped like a token reaches
/// status.
pub fn last_stderr_line(stderr_tail: &[u8]) -> Option<String> {
    const MAX_BYTES: usize = 600;
    let text = String::from_utf8_lossy(stderr_tail);
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    // A runtime that dies hard (Node out of memory) ends with a native stack trace and
    // banners: the line that says why comes before them.
    let line = lines()
        .rfind(|l| !is_trace_line(l))
        .or_else(|| lines().next_back())?;
    let line = line.strip_prefix("# ").unwrap_or(line);
    Some(crate::protocol::request::bounded_message(
        &mask_hex_runs(line),
        MAX_BYTES,
    ))
}

/// Whether a (trimmed) stderr line is part of a crash's trace rather than its reason: a
/// native stack frame (`1: 0xb8d0a3 node::Abort() [node]`), a JavaScript one (`at f (x.js:1:2)`),
/// a banner (`----- Native stack trace -----`, `<--- JS stacktrace --->`, a line of `#`), or
/// Node's closing version line.
fn is_trace_line(line: &str) -> bool {
    let frame = line
        .split_once(": 0x")
        .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    frame
        || line.starts_with("at ")
        || line.starts_with("-----")
        || line.starts_with("<---")
        || line.bytes().all(|b| b == b'#')
        || line.starts_with("Node.js v")
}

/// After a batch, forget claims the store released (the run parked, waited or ended). A
/// cancelled run's child is stopped at once; others get the kill grace to exit by themselves.
/// Also forgets the forgiven standby deaths of runs that ended. `only` limits the check to the
/// runs a batch touched (`None`: every held claim, after deadline work such as expiry
/// recovery).
pub fn forget_released_claims(
    store: &dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    only: Option<&[String]>,
) {
    // A forgiven standby death matters only to the run's next launch; a run that ended
    // before one (cancelled while queued) leaves nothing behind.
    state.forgiven_standby_exits.retain(|run_id| {
        only.is_some_and(|runs| !runs.contains(run_id))
            || matches!(store.run_state(run_id), Ok((status, _)) if !status.is_terminal())
    });
    let candidates: Vec<&String> = match only {
        Some(runs) => runs
            .iter()
            .filter(|r| state.claims.contains_key(*r))
            .collect(),
        None => state.claims.keys().collect(),
    };
    let released: Vec<(String, RunStatus)> = candidates
        .into_iter()
        .filter_map(
            |run_id| match store.run_state(run_id).map(|(status, _)| status) {
                Ok(RunStatus::Running) => None,
                Ok(status) => Some((run_id.clone(), status)),
                Err(_) => Some((run_id.clone(), RunStatus::Cancelled)),
            },
        )
        .collect();
    for (run_id, status) in released {
        state.claims.remove(&run_id);
        state.renewed_at.remove(&run_id);
        if let Some(entry) = state.children.get_mut(&run_id) {
            entry.released_at.get_or_insert(now);
        }
        if status == RunStatus::Cancelled {
            stop_child(state, &run_id);
        }
    }
}

/// The earliest time a child-related deadline needs the store thread, seen at `now`.
pub fn next_child_deadline(
    store: &dyn Storage,
    state: &HostState,
    now: crate::time::UnixMillis,
) -> Option<i64> {
    let lease = store.lease_ms();
    let heartbeat = state.renewed_at.values().map(|t| t + lease / 3).min();
    let handshake = state
        .children
        .values()
        .filter(|e| !e.hello && !e.stopping)
        .map(|e| {
            e.launched_at
                + i64::try_from(state.child_config.handshake_timeout.as_millis())
                    .unwrap_or(i64::MAX)
        })
        .min();
    let validation = state
        .children
        .values()
        .filter_map(|e| validation_deadline(state, e))
        .min();
    let node = if state.claims.is_empty() {
        None
    } else {
        match store.next_node_deadline(&state.owner_id) {
            // A passed deadline may belong to a child being stopped because its timeout could
            // not be routed (an effect was applying): its exit settles the run, and waking up
            // for that deadline until then would spin. Look closer (rare).
            Ok(Some(at)) if at <= now => node_deadline_of_children_not_stopping(store, state),
            Ok(at) => at,
            Err(e) => {
                tracing::error!(error = %e, "cannot read node deadlines; checking again in 1 s");
                Some(now + 1_000)
            }
        }
    };
    let delayed = store.next_delayed_ready(now).ok().flatten();
    let grace = i64::try_from(state.child_config.kill_grace.as_millis()).unwrap_or(i64::MAX);
    let lingering = state
        .children
        .values()
        .filter(|e| !e.stopping)
        .filter_map(|e| e.released_at.or(e.disconnected_at))
        .map(|t| t + grace)
        .min();
    [
        heartbeat,
        handshake,
        validation,
        node,
        delayed,
        lingering,
        state.activation_retry_at,
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Whether the run's child is being stopped: its exit settles the run, so its node deadline
/// no longer applies.
pub(super) fn child_stopping(state: &HostState, run_id: &str) -> bool {
    state.children.get(run_id).is_some_and(|e| e.stopping)
}

/// The earliest node deadline of the held runs whose child is not being stopped.
pub(super) fn node_deadline_of_children_not_stopping(
    store: &dyn Storage,
    state: &HostState,
) -> Option<i64> {
    state
        .claims
        .keys()
        .filter(|run_id| !child_stopping(state, run_id))
        .filter_map(|run_id| store.open_attempt_deadline(run_id).ok().flatten())
        .min()
}

/// When a validate-mode child must have given its verdict (`None` for other children, before
/// its hello, after its verdict, and once it is being stopped).
pub(super) fn validation_deadline(state: &HostState, e: &ChildEntry) -> Option<i64> {
    if e.stopping || e.released_at.is_some() {
        return None;
    }
    let timeout =
        i64::try_from(state.child_config.validation_timeout.as_millis()).unwrap_or(i64::MAX);
    e.judging_since.map(|t| t.saturating_add(timeout))
}

/// Host-owned child deadlines: heartbeats for long-running children, handshake timeouts,
/// node deadlines (route `timed_out` or end the run `timed_out`, then stop the child).
pub fn due_child_work(store: &mut dyn Storage, state: &mut HostState, now: UnixMillis) {
    // A retry of failed activations is due: the scheduling that follows due work does it.
    if state.activation_retry_at.is_some_and(|at| at <= now) {
        state.activation_retry_at = None;
    }
    let lease = store.lease_ms();
    // Renewal times only exist for claims we hold; anything else would be a deadline that
    // never clears.
    let held = &state.claims;
    state
        .renewed_at
        .retain(|run_id, _| held.contains_key(run_id));
    // Heartbeats keep a claim alive while its child computes without writing.
    let due: Vec<Claim> = state
        .renewed_at
        .iter()
        .filter(|(_, t)| **t + lease / 3 <= now)
        .filter_map(|(run_id, _)| state.claims.get(run_id).cloned())
        .collect();
    if !due.is_empty() {
        let renewed = store.write(now, |w| {
            let mut ok = Vec::new();
            for claim in &due {
                if w.savepoint(|w| w.heartbeat(claim)).is_ok() {
                    ok.push(claim.run_id.clone());
                }
            }
            Ok(ok)
        });
        if let Ok(ok) = renewed {
            for run_id in ok {
                state.renewed_at.insert(run_id, now);
            }
        }
    }
    // Handshake timeouts.
    let timeout =
        i64::try_from(state.child_config.handshake_timeout.as_millis()).unwrap_or(i64::MAX);
    let late: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| !e.hello && !e.stopping && e.launched_at + timeout <= now)
        .map(|(r, _)| r.clone())
        .collect();
    for run_id in late {
        tracing::warn!(%run_id, "child did not say hello in time; stopping it");
        stop_child(state, &run_id);
    }
    // Validations that take too long: the child's exit rejects the submission (a loss).
    let slow: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| validation_deadline(state, e).is_some_and(|at| at <= now))
        .map(|(r, _)| r.clone())
        .collect();
    let timeout_ms = state.child_config.validation_timeout.as_millis();
    for run_id in slow {
        tracing::warn!(%run_id, "validation did not finish in time; stopping the child");
        if let Some(e) = state.children.get_mut(&run_id) {
            e.stop_reason = Some(format!("validation timed out after {timeout_ms} ms"));
        }
        stop_child(state, &run_id);
    }
    // Children that did not exit after their run stopped needing them.
    let grace = i64::try_from(state.child_config.kill_grace.as_millis()).unwrap_or(i64::MAX);
    let lingering: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| !e.stopping && e.released_at.is_some_and(|t| t + grace <= now))
        .map(|(r, _)| r.clone())
        .collect();
    for run_id in lingering {
        stop_child(state, &run_id);
    }
    // Children whose connection closed while their run still needed them, still alive.
    let disconnected: Vec<String> = state
        .children
        .iter()
        .filter(|(_, e)| !e.stopping && e.disconnected_at.is_some_and(|t| t + grace <= now))
        .map(|(r, _)| r.clone())
        .collect();
    for run_id in disconnected {
        tracing::warn!(%run_id, "child closed its connection and kept running; stopping it");
        if let Some(e) = state.children.get_mut(&run_id) {
            e.stop_reason =
                Some("the child closed its connection to the host and kept running".into());
        }
        stop_child(state, &run_id);
    }
    // Node deadlines.
    let claims: Vec<Claim> = state
        .claims
        .values()
        .filter(|c| !child_stopping(state, &c.run_id))
        .cloned()
        .collect();
    for claim in claims {
        let Ok(Some(deadline)) = store.open_attempt_deadline(&claim.run_id) else {
            continue;
        };
        if deadline > now {
            continue;
        }
        let before = revision_of(store, &claim.run_id);
        let result = store.write(now, |w| time_out_attempt(w, state, &claim));
        publish(state, &claim.run_id, before);
        match result {
            Ok(()) => {
                tracing::info!(run_id = %claim.run_id, "node deadline passed; attempt timed out");
                state.claims.remove(&claim.run_id);
                state.renewed_at.remove(&claim.run_id);
                stop_child(state, &claim.run_id);
            }
            Err(e) => {
                // Unsettled work (an effect applying) blocks the routed timeout: stop the child
                // anyway; its exit is handled as a loss, which makes such an effect uncertain.
                tracing::warn!(run_id = %claim.run_id, error = %e, "cannot route the timeout; stopping the child");
                stop_child(state, &claim.run_id);
            }
        }
    }
}

pub(super) fn time_out_attempt(
    w: &mut dyn Transaction,
    state: &mut HostState,
    claim: &Claim,
) -> StoreResult<()> {
    let Some((attempt_id, node)) = w.current_open_attempt(&claim.run_id)? else {
        return Ok(());
    };
    // The request's deadline passed while its submission was still being judged: the deadline
    // wins (a submission is judged only before it). Rejecting it with that reason makes the
    // request wait again, past its deadline, so the deadline work right after expires it and
    // a fresh child routes `timed_out`. The judging child is stopped by the host, which is
    // no loss of the run (it no longer runs when the child exits).
    if let Some(submission_id) = w.validating_submission(&claim.run_id)? {
        w.settle(
            claim,
            &submission_id,
            Err("the request's deadline passed before this submission was judged".into()),
        )?;
        return Ok(());
    }
    let graph = graph_of(w, state, &claim.run_id)?;
    match graph.route(&node, &Outcome::TimedOut) {
        Ok(Route::Next(next)) => {
            // The run parks right after: the attempt opened here is interrupted, and the next
            // child opens its own (deciding a deadline decided at the start then).
            let deadline = deadline_for(w, &graph, &next, None)?;
            let request = TransitionRequest {
                attempt_id,
                outcome: AttemptOutcome::TimedOut,
                next_node: next,
                next_deadline_at: deadline,
            };
            let stepped = w.transition(claim, &request);
            if fail_at_step_limit(w, claim, Some(&request), stepped)?.is_ok() {
                // The child still runs the old node: park so a fresh child picks up the route.
                w.park(claim, None)?;
            }
        }
        _ => {
            let error = format!("node {node} passed its deadline");
            w.fail(claim, Some(&attempt_id), &AttemptOutcome::TimedOut, &error)?;
        }
    }
    Ok(())
}

/// Asks the supervisor to stop a run's child (SIGTERM to its group, SIGKILL after the grace).
pub fn stop_child(state: &mut HostState, run_id: &str) {
    if let Some(entry) = state.children.get_mut(run_id) {
        if !entry.stopping {
            entry.stopping = true;
            if state.supervising {
                let stop = SupervisorCmd::Stop {
                    run_id: run_id.to_owned(),
                    generation: entry.generation,
                    grace: state.child_config.kill_grace,
                };
                state.child_commands.push(stop);
            }
        }
    }
}

/// The reports `pick` takes (bridges', adapters', passes': each has its own handler), and the
/// rest, each side in the order reported.
fn split_reports<T>(
    reports: Vec<ChildReport>,
    pick: impl Fn(ChildReport) -> Sorted<T>,
) -> (Vec<T>, Vec<ChildReport>) {
    let mut taken = Vec::new();
    let mut rest = Vec::new();
    for report in reports {
        match pick(report) {
            Sorted::Taken(t) => taken.push(t),
            Sorted::Rest(r) => rest.push(r),
        }
    }
    (taken, rest)
}

/// Where [`split_reports`] puts one report.
enum Sorted<T> {
    Taken(T),
    Rest(ChildReport),
}
