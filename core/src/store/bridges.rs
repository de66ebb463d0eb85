//! The read behind detached runs' bridges (`engine::bridges`): which interactive steps of
//! detached runs a bridge may serve now.

use rusqlite::params;

use super::{Store, StoreResult};
use piw_engine::store::records::*;

/// Most steps listed at once: a host serves no more bridges than child slots anyway.
const MAX_DETACHED_STEPS: u32 = 256;

impl Store {
    /// The open interactive steps of detached runs, oldest first. Reads only live detached
    /// runs (the partial index `runs_detached`): the host asks every turn, and a host with
    /// none pays nothing.
    pub fn detached_steps(&self) -> StoreResult<Vec<DetachedStep>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT i.run_id, i.interaction_id, i.attempt_id, i.node_id, i.status, r.project_dir
             FROM runs r
             JOIN interactions i ON i.run_id = r.run_id AND i.status IN ('pending', 'validating')
             WHERE r.status IN ('queued', 'running', 'waiting')
               AND r.execution_mode = 'detached' AND r.paused = 0
             ORDER BY i.created_at, i.rowid
             LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![MAX_DETACHED_STEPS], |r| {
            Ok(DetachedStep {
                run_id: r.get(0)?,
                interaction_id: r.get(1)?,
                attempt_id: r.get(2)?,
                node_id: r.get(3)?,
                validating: r.get::<_, String>(4)? == "validating",
                project_dir: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
