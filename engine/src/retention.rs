//! Retention: `run.prune` and the host's own retention pass (`PIW_RETAIN_DAYS`,
//! `PIW_RETAIN_RUNS`). Deciding code: it names no I/O (`io_free`); the supervisor removes the
//! log files of the runs it removed (`SupervisorCmd::RemoveLogs`), and the host's first prune
//! has the driver sweep those a crash left (`turn::Effect::SweepRunLogs`).
//!
//! Each pass removes at most [`MAX_PRUNE_RUNS`] runs in one transaction, so the store thread
//! goes back to its queue between batches: a client's `run.prune` is sent again while its
//! reply says `more`, the retention pass is due again at once while runs are left.

use crate::protocol::payload::{RunListCursor, RunPrune, MAX_PRUNE_RUNS};
use crate::protocol::reply::{PruneListed, Pruned};
use crate::protocol::Receipt;
pub use crate::state::retention::Retention;
use crate::state::HostState;
use crate::store::{PruneSelector, Storage, StoreError, StoreResult};
use crate::time::UnixMillis;
use std::path::PathBuf;

/// How often the host's retention pass runs once it has nothing left to remove.
pub const RETENTION_INTERVAL_MS: i64 = 60 * 60 * 1000;

const DAY_MS: u64 = 86_400_000;

impl Retention {
    /// Retention from the two settings; `None` (off) when neither is given.
    pub fn from_settings(days: Option<u64>, runs: Option<u64>) -> Option<Self> {
        (days.is_some() || runs.is_some()).then_some(Self { days, runs })
    }

    fn selector(self, now: UnixMillis) -> PruneSelector {
        PruneSelector {
            statuses: Vec::new(),
            finished_before: self
                .days
                .map(|d| finished_before(now, d.saturating_mul(DAY_MS))),
            keep: self.runs,
        }
    }
}

fn finished_before(now: UnixMillis, older_than_ms: u64) -> UnixMillis {
    now.saturating_sub(i64::try_from(older_than_ms).unwrap_or(i64::MAX))
}

/// What a `run.prune` answers, and whether the driver must now sweep the log directory.
#[derive(Debug)]
pub struct PruneAnswer {
    pub receipt: Receipt,
    /// The directory to sweep for the logs of runs that no longer exist (the host's first
    /// prune: `turn::Effect::SweepRunLogs`).
    pub sweep_run_logs: Option<PathBuf>,
}

/// `run.prune`: a dry run lists a page of what would go; otherwise one batch goes.
pub fn prune_request(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    request: &RunPrune,
) -> Result<PruneAnswer, StoreError> {
    let selector = PruneSelector {
        statuses: request.statuses.clone().unwrap_or_default(),
        finished_before: request.older_than_ms.map(|ms| finished_before(now, ms)),
        keep: request.keep,
    };
    let limit = usize::try_from(
        request
            .limit
            .unwrap_or(MAX_PRUNE_RUNS)
            .clamp(1, MAX_PRUNE_RUNS),
    )
    .unwrap_or(1);
    if request.dry_run == Some(true) {
        let count = store.count_prunable(&selector)?;
        let cursor_key = store.cursor_key();
        let after = crate::protocol::payload::checked_cursor(request.cursor.as_ref(), &cursor_key)?;
        let page = store.prunable_runs(&selector, after, limit)?;
        let next_cursor = page
            .more
            .then(|| {
                page.runs
                    .last()
                    .map(|k| RunListCursor::sign(&cursor_key, k.clone()))
            })
            .flatten();
        let run_ids = page.runs.iter().map(|k| k.run_id.clone()).collect();
        let receipt = crate::fit::receipt(
            None,
            &PruneListed {
                dry_run: true,
                count,
                run_ids,
                more: page.more,
                next_cursor,
            },
        )?;
        return Ok(PruneAnswer {
            receipt,
            sweep_run_logs: None,
        });
    }
    let batch = prune_batch(store, state, now, &selector, limit)?;
    let receipt = crate::fit::receipt(
        None,
        &Pruned {
            dry_run: false,
            removed: batch.removed,
            more: batch.more,
        },
    )?;
    Ok(PruneAnswer {
        receipt,
        sweep_run_logs: batch.sweep_run_logs,
    })
}

/// The earliest time the retention pass is due; `None` when retention is off or the host is
/// stopping (the pass would not run: a deadline left in the past would wake the store thread
/// in a loop).
pub fn next_retention_at(state: &HostState) -> Option<UnixMillis> {
    if state.shutting_down {
        return None;
    }
    state.retention.and(state.retention_due_at)
}

/// The host's retention pass, when due: one batch, then due again at once while runs are
/// left, else after [`RETENTION_INTERVAL_MS`]. Returns the directory the driver must sweep
/// for leftover run logs, when this was the host's first prune (`turn::Effect::SweepRunLogs`).
pub fn run_due_retention(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
) -> Option<PathBuf> {
    let (Some(retention), Some(due)) = (state.retention, state.retention_due_at) else {
        return None;
    };
    if due > now || state.shutting_down {
        return None;
    }
    let mut sweep_run_logs = None;
    let next = match prune_batch(
        store,
        state,
        now,
        &retention.selector(now),
        MAX_PRUNE_RUNS as usize,
    ) {
        Ok(PruneBatch {
            removed,
            more,
            sweep_run_logs: sweep,
        }) => {
            sweep_run_logs = sweep;
            if !removed.is_empty() {
                tracing::info!(
                    count = removed.len(),
                    more,
                    "retention removed finished runs"
                );
            }
            if more && !removed.is_empty() {
                now
            } else {
                now + RETENTION_INTERVAL_MS
            }
        }
        Err(e) => {
            crate::store_error!(e, "the retention pass failed");
            now + RETENTION_INTERVAL_MS
        }
    };
    state.retention_due_at = Some(next);
    sweep_run_logs
}

/// What one prune batch did.
struct PruneBatch {
    /// The runs it removed.
    removed: Vec<String>,
    /// More runs match.
    more: bool,
    /// The log directory to sweep once, at the host's first prune.
    sweep_run_logs: Option<PathBuf>,
}

/// Removes up to `limit` of the runs `selector` matches, oldest first, in one transaction, and
/// gives their pages back; returns the runs removed, whether more match, and at the host's
/// first prune the log directory to sweep. A finished run whose child is still exiting stays
/// until its exit is recorded.
fn prune_batch(
    store: &mut dyn Storage,
    state: &mut HostState,
    now: UnixMillis,
    selector: &PruneSelector,
    limit: usize,
) -> StoreResult<PruneBatch> {
    let mut chosen = Vec::with_capacity(limit);
    let mut after = None;
    let more = loop {
        let page = store.prunable_runs(selector, after.as_ref(), limit)?;
        after = page.runs.last().cloned();
        let mut candidates = page
            .runs
            .into_iter()
            .map(|k| k.run_id)
            .filter(|run_id| !state.children.contains_key(run_id));
        while chosen.len() < limit {
            match candidates.next() {
                Some(run_id) => chosen.push(run_id),
                None => break,
            }
        }
        let left_in_page = candidates.next().is_some();
        if chosen.len() == limit || !page.more {
            break page.more || left_in_page;
        }
    };
    let removed = store.prune_runs(now, &chosen)?;
    if !removed.is_empty() {
        // The pages go back now, a batch's worth at a time; a failure costs only space.
        if let Err(e) = store.write(now, |w| w.reclaim_free_pages(u32::MAX)) {
            tracing::warn!(error = %e, "cannot give a prune's free pages back");
        }
    }
    // Their child output goes too, by the supervisor (thousands of directories take seconds).
    if let Some(logs) = &state.child_config.output_logs {
        let dirs = removed
            .iter()
            .filter_map(|run_id| run_log_dir(logs, run_id))
            .collect();
        state
            .child_commands
            .push(crate::state::children::SupervisorCmd::RemoveLogs { dirs });
    }
    // Log files a prune's commit left behind can only come from an earlier host's life (this
    // one orders their removal right after its commits): one sweep per host, at its first
    // prune, before the supervisor removes anything (a directory being emptied meanwhile
    // made the sweep of 100,000 runs take 40 s).
    let sweep_run_logs = if state.run_logs_swept {
        None
    } else {
        state.run_logs_swept = true;
        state.child_config.output_logs.clone()
    };
    Ok(PruneBatch {
        removed,
        more,
        sweep_run_logs,
    })
}

/// `logs/<run_id>`, for a run id that is one plain path component (every id the store makes).
pub fn run_log_dir(logs: &std::path::Path, run_id: &str) -> Option<std::path::PathBuf> {
    let plain = !run_id.is_empty() && !run_id.contains(['/', '.']);
    plain.then(|| logs.join(run_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopping_host_has_no_retention_deadline() {
        let mut state = HostState {
            retention: Retention::from_settings(Some(1), None),
            retention_due_at: Some(0),
            ..HostState::new(Box::new(crate::ids::tests::CountingIds::default()))
        };
        assert_eq!(next_retention_at(&state), Some(0));
        // `run_due_retention` does nothing while the host stops: a deadline in the past would
        // wake the store thread again at once, for ever.
        state.shutting_down = true;
        assert_eq!(next_retention_at(&state), None);
        state.shutting_down = false;
        state.retention = None;
        assert_eq!(next_retention_at(&state), None);
    }

    #[test]
    fn retention_is_off_unless_a_setting_is_given() {
        assert_eq!(Retention::from_settings(None, None), None);
        let both = Retention::from_settings(Some(30), Some(100)).unwrap();
        let selector = both.selector(40 * 86_400_000);
        assert_eq!(selector.finished_before, Some(10 * 86_400_000));
        assert_eq!(selector.keep, Some(100));
        assert!(selector.statuses.is_empty());
    }
}
