//! Retention: which finished runs a prune removes, their removal with every row that belongs
//! to them, and the space SQLite gets back.
//!
//! A run is removable when it is finished (`RunStatus::is_terminal`) and unclaimed; the
//! removal checks both again in its own transaction, so a run that a selection named and that
//! changed meanwhile stays. Each removal is one transaction: a crash keeps or removes a run
//! wholly.

use crate::clock::UnixMillis;
use crate::store::Retention;
use rusqlite::{params, OptionalExtension as _};

use super::model::RunStatus;
use super::{PruneSelector, RunListKey};
use super::{Store, StoreError, StoreResult, WriteTx};
use piw_engine::store::records::*;

/// The four statuses bound to the selection's `status IN (?, ?, ?, ?)` (one fixed
/// statement, whatever the selection): the given ones, the first repeated to fill.
fn bound_statuses(selector: &PruneSelector) -> StoreResult<[&'static str; 4]> {
    let finished: Vec<RunStatus> = RunStatus::ALL
        .iter()
        .copied()
        .filter(|s| s.is_terminal())
        .collect();
    if let Some(s) = selector.statuses.iter().find(|s| !s.is_terminal()) {
        return Err(StoreError::InvalidInput(format!(
            "a {s} run has not finished and is never pruned"
        )));
    }
    let chosen = if selector.statuses.is_empty() {
        &finished
    } else {
        &selector.statuses
    };
    let mut out = [chosen[0].as_str(); 4];
    for (slot, s) in out.iter_mut().zip(chosen.iter()) {
        *slot = s.as_str();
    }
    Ok(out)
}

// The order of a prune is the run list's (`created_at DESC, run_id`: the start index) walked
// backwards, oldest first; the newest `keep` of that list stay. Statuses are matched with
// `+status` so the planner walks the start index (a batch reads about as many rows as it
// removes) rather than the status index (which would sort every finished run per batch).

/// The key of the `keep`-th newest run of the statuses (`?1..?4`; `?5` the offset, keep - 1):
/// the runs kept end there.
const SELECT_KEEP_BOUNDARY: &str = "
    SELECT created_at, run_id FROM runs
    WHERE +status IN (?1, ?2, ?3, ?4)
    ORDER BY created_at DESC, run_id LIMIT 1 OFFSET ?5";

/// Finished runs oldest first: `?1..?4` statuses, `?5` finished before (or NULL), `?6`/`?7`
/// the first kept run (NULL: none kept), `?8`/`?9` the cursor (NULL: from the oldest), `?10`
/// the limit. Claimed runs (a control claim on a finished run) are skipped.
const SELECT_PRUNABLE: &str = "
    SELECT r.run_id, r.created_at FROM runs r JOIN claims c USING (run_id)
    WHERE +r.status IN (?1, ?2, ?3, ?4) AND c.owner_kind IS NULL
      AND (?5 IS NULL OR COALESCE(r.finished_at, 0) < ?5)
      AND (?6 IS NULL OR r.created_at < ?6 OR (r.created_at = ?6 AND r.run_id > ?7))
      AND (?8 IS NULL OR r.created_at > ?8 OR (r.created_at = ?8 AND r.run_id < ?9))
    ORDER BY r.created_at, r.run_id DESC
    LIMIT ?10";

/// The same selection, counted (`?1..?7` as above).
const COUNT_PRUNABLE: &str = "
    SELECT COUNT(*) FROM runs r JOIN claims c USING (run_id)
    WHERE r.status IN (?1, ?2, ?3, ?4) AND c.owner_kind IS NULL
      AND (?5 IS NULL OR COALESCE(r.finished_at, 0) < ?5)
      AND (?6 IS NULL OR r.created_at < ?6 OR (r.created_at = ?6 AND r.run_id > ?7))";

/// Where the kept runs end: none kept, the oldest kept, or every matching run (fewer than
/// `keep` exist).
enum Kept {
    None,
    From(RunListKey),
    All,
}

impl Store {
    fn kept(&self, statuses: &[&'static str; 4], keep: Option<u64>) -> StoreResult<Kept> {
        let Some(keep) = keep.filter(|k| *k > 0) else {
            return Ok(Kept::None);
        };
        let offset = i64::try_from(keep - 1).unwrap_or(i64::MAX);
        let s = statuses;
        let key = self
            .conn
            .prepare_cached(SELECT_KEEP_BOUNDARY)?
            .query_row(params![s[0], s[1], s[2], s[3], offset], |r| {
                Ok(RunListKey {
                    created_at: r.get(0)?,
                    run_id: r.get(1)?,
                })
            })
            .optional()?;
        Ok(key.map_or(Kept::All, Kept::From))
    }

    /// Copies the WAL's pages into the database file without waiting for readers
    /// (`wal_checkpoint(PASSIVE)`): once every page is copied, the file's freed tail is cut.
    pub fn checkpoint_now(&mut self) -> StoreResult<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// Pages of the database file that hold nothing.
    pub fn free_pages(&self) -> StoreResult<u64> {
        let n: i64 = self
            .conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

impl WriteTx<'_> {
    /// Removes one run and everything keyed by it, if it is finished and unclaimed; `false`
    /// (nothing written) otherwise or when it does not exist.
    fn remove_finished_run(&mut self, run_id: &str) -> StoreResult<bool> {
        let row: Option<(String, Option<String>)> = self
            .conn()
            .prepare_cached(
                "SELECT r.status, c.owner_kind FROM runs r LEFT JOIN claims c USING (run_id)
                 WHERE r.run_id = ?1",
            )?
            .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((status, owner)) = row else {
            return Ok(false);
        };
        let finished = RunStatus::parse(&status).is_some_and(RunStatus::is_terminal);
        if !finished || owner.is_some() {
            return Ok(false);
        }
        // The run's events, by walking its chain back from the newest (events have no index
        // by run: they are stored in commit order).
        self.conn()
            .prepare_cached(
                "WITH RECURSIVE chain(id) AS (
                     SELECT last_event_id FROM runs WHERE run_id = ?1 AND last_event_id IS NOT NULL
                     UNION ALL
                     SELECT e.prev_event_id FROM events e JOIN chain ON e.event_id = chain.id
                     WHERE e.prev_event_id IS NOT NULL)
                 DELETE FROM events WHERE event_id IN (SELECT id FROM chain)",
            )?
            .execute([run_id])?;
        for sql in DELETE_BY_RUN {
            self.conn().prepare_cached(sql)?.execute([run_id])?;
        }
        Ok(true)
    }

    /// Removes the receipts that name no run (`message.claim`, `message.ack`) and are older
    /// than the start of every run left: they cannot be about a run still stored.
    fn remove_receipts_older_than_every_run(&mut self) -> StoreResult<()> {
        self.conn()
            .prepare_cached(
                // The rowid bound only limits the scan: receipts are appended in time
                // order, so none older than the oldest run lies past its first receipt.
                "DELETE FROM command_receipts
                 WHERE rowid < COALESCE(
                           (SELECT receipts_from FROM runs ORDER BY created_at LIMIT 1), 1 << 62)
                   AND run_id IS NULL
                   AND created_at < COALESCE((SELECT MIN(created_at) FROM runs), ?1)",
            )?
            .execute([self.now])?;
        Ok(())
    }

    /// Removes the large values no run refers to any more (the pruned runs' links went with
    /// them, `DELETE_BY_RUN`); a prune calls it after removing its runs, in the same
    /// transaction.
    fn drop_values_no_run_refers_to(&mut self) -> StoreResult<()> {
        self.remove_unreferenced_values().map(drop)
    }
}

/// Every table keyed by a run, children of a row before the row (`?1` the run). The events
/// went first, by their chain. Receipts of the run's commands go too: a request id repeated
/// after its run was pruned runs as a new command.
const DELETE_BY_RUN: &[&str] = &[
    "DELETE FROM submissions WHERE interaction_id IN
         (SELECT interaction_id FROM interactions WHERE run_id = ?1)",
    "DELETE FROM interactions WHERE run_id = ?1",
    "DELETE FROM decisions WHERE run_id = ?1",
    "DELETE FROM effects WHERE run_id = ?1",
    "DELETE FROM timers WHERE run_id = ?1",
    "DELETE FROM attempts WHERE run_id = ?1",
    "DELETE FROM children WHERE run_id = ?1",
    "DELETE FROM run_values WHERE run_id = ?1",
    "DELETE FROM workflow_messages WHERE run_id = ?1",
    "DELETE FROM command_receipts
         WHERE rowid BETWEEN (SELECT receipts_from FROM runs WHERE run_id = ?1)
                         AND (SELECT receipts_to FROM runs WHERE run_id = ?1)
           AND run_id = ?1",
    "DELETE FROM run_updates WHERE run_id = ?1",
    "DELETE FROM event_budgets WHERE run_id = ?1",
    "DELETE FROM run_views WHERE run_id = ?1",
    "DELETE FROM queue WHERE run_id = ?1",
    "DELETE FROM claims WHERE run_id = ?1",
    "DELETE FROM runs WHERE run_id = ?1",
];

impl Retention for Store {
    fn count_prunable(&self, selector: &PruneSelector) -> StoreResult<u64> {
        let s = bound_statuses(selector)?;
        let kept = match self.kept(&s, selector.keep)? {
            Kept::All => return Ok(0),
            Kept::None => None,
            Kept::From(key) => Some(key),
        };
        let n: i64 = self.conn.prepare_cached(COUNT_PRUNABLE)?.query_row(
            params![
                s[0],
                s[1],
                s[2],
                s[3],
                selector.finished_before,
                kept.as_ref().map(|k| k.created_at),
                kept.as_ref().map(|k| k.run_id.as_str()),
            ],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn prunable_runs(
        &self,
        selector: &PruneSelector,
        after: Option<&RunListKey>,
        limit: usize,
    ) -> StoreResult<PrunablePage> {
        let s = bound_statuses(selector)?;
        let kept = match self.kept(&s, selector.keep)? {
            Kept::All => return Ok(PrunablePage::default()),
            Kept::None => None,
            Kept::From(key) => Some(key),
        };
        let wanted = i64::try_from(limit).unwrap_or(i64::MAX - 1);
        let mut stmt = self.conn.prepare_cached(SELECT_PRUNABLE)?;
        let mut runs = stmt
            .query_map(
                params![
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    selector.finished_before,
                    kept.as_ref().map(|k| k.created_at),
                    kept.as_ref().map(|k| k.run_id.as_str()),
                    after.map(|k| k.created_at),
                    after.map(|k| k.run_id.as_str()),
                    wanted + 1,
                ],
                |r| {
                    Ok(RunListKey {
                        run_id: r.get(0)?,
                        created_at: r.get(1)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let more = runs.len() > limit;
        runs.truncate(limit);
        Ok(PrunablePage { runs, more })
    }

    fn prune_runs(&mut self, now: UnixMillis, run_ids: &[String]) -> StoreResult<Vec<String>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.conn.pragma_update(None, "foreign_keys", "OFF")?;
        let removed = self.write_at(now, |w| {
            let mut removed = Vec::with_capacity(run_ids.len());
            for run_id in run_ids {
                if w.remove_finished_run(run_id)? {
                    removed.push(run_id.clone());
                }
            }
            if !removed.is_empty() {
                w.remove_receipts_older_than_every_run()?;
                w.drop_values_no_run_refers_to()?;
                w.ops.push("prune_runs");
            }
            Ok(removed)
        });
        // Enforcement comes back whatever happened to the transaction.
        let restored = self.conn.pragma_update(None, "foreign_keys", "ON");
        let removed = removed?;
        restored?;
        Ok(removed)
    }
}
