//! Child process records: one row per launched child (its "child epoch"), so a restarted host
//! can find and stop children of earlier hosts, and so every exit keeps its code, signal,
//! reason and output tails. Bookkeeping only: these writes change no run state.

use crate::store::ChildRecords;
use rusqlite::params;

use super::{ChildMode, Store, StoreResult, WriteTx};
use piw_engine::store::records::*;

/// A child that an earlier host launched and never saw exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanChild {
    pub child_epoch: i64,
    pub run_id: String,
    pub pid: u32,
    pub process_start_time: u64,
}

impl WriteTx<'_> {
    /// Closes the records of children that earlier hosts launched but never saw start (the
    /// host died between the launch and the pid's commit). Without a pid nothing can be
    /// signalled; such a child finds no host that knows its token and exits by itself.
    pub fn close_unconfirmed_children(&mut self, current_epoch: i64) -> StoreResult<usize> {
        self.ops.push("close_unconfirmed_children");
        Ok(self
            .conn()
            .prepare_cached(
                "UPDATE children SET exited_at = ?2,
                        reason = 'its host died before the launch was confirmed'
                 WHERE exited_at IS NULL AND pid IS NULL AND host_epoch != ?1",
            )?
            .execute(params![current_epoch, self.now])?)
    }
}

impl Store {
    /// Children launched by other host epochs that were never seen to exit.
    pub fn orphan_children(&self, current_epoch: i64) -> StoreResult<Vec<OrphanChild>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT child_epoch, run_id, pid, process_start_time FROM children
             WHERE exited_at IS NULL AND host_epoch != ?1 AND pid IS NOT NULL
               AND process_start_time IS NOT NULL",
        )?;
        let rows = stmt.query_map([current_epoch], |r| {
            Ok(OrphanChild {
                child_epoch: r.get(0)?,
                run_id: r.get(1)?,
                pid: r.get(2)?,
                process_start_time: r.get::<_, i64>(3)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The children of a run, oldest first.
    pub fn children(&self, run_id: &str) -> StoreResult<Vec<ChildRecord>> {
        self.children_where(run_id, "ORDER BY child_epoch")
    }

    pub(super) fn children_where(
        &self,
        run_id: &str,
        order: &str,
    ) -> StoreResult<Vec<ChildRecord>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT child_epoch, run_id, generation, host_epoch, mode, pid, exit_code, signal, reason,
                    stdout_tail, stderr_tail, handshake_at IS NOT NULL, exited_at IS NOT NULL
             FROM children WHERE run_id = ?1 {order}"
        ))?;
        let rows = stmt.query_map([run_id], |r| {
            let tail =
                |v: Option<Vec<u8>>| String::from_utf8_lossy(&v.unwrap_or_default()).into_owned();
            Ok(ChildRecord {
                child_epoch: r.get(0)?,
                run_id: r.get(1)?,
                generation: r.get::<_, i64>(2)? as u64,
                host_epoch: r.get(3)?,
                mode: r.get(4)?,
                pid: r.get(5)?,
                exit_code: r.get(6)?,
                signal: r.get(7)?,
                reason: r.get(8)?,
                stdout_tail: tail(r.get(9)?),
                stderr_tail: tail(r.get(10)?),
                handshake: r.get(11)?,
                exited: r.get(12)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl ChildRecords for WriteTx<'_> {
    fn record_child_launch(
        &mut self,
        run_id: &str,
        generation: u64,
        host_epoch: i64,
        mode: ChildMode,
    ) -> StoreResult<i64> {
        self.ops.push("record_child_launch");
        Ok(self
            .conn()
            .prepare_cached(
                "INSERT INTO children (run_id, generation, host_epoch, mode, spawned_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) RETURNING child_epoch",
            )?
            .query_row(
                params![
                    run_id,
                    generation as i64,
                    host_epoch,
                    mode.as_str(),
                    self.now
                ],
                |r| r.get(0),
            )?)
    }

    fn record_child_process(
        &mut self,
        child_epoch: i64,
        pid: u32,
        start_time: u64,
    ) -> StoreResult<()> {
        self.ops.push("record_child_process");
        self.conn()
            .prepare_cached(
                "UPDATE children SET pid = ?2, process_start_time = ?3 WHERE child_epoch = ?1",
            )?
            .execute(params![child_epoch, pid, start_time as i64])?;
        Ok(())
    }

    fn record_child_handshake(&mut self, child_epoch: i64) -> StoreResult<()> {
        self.ops.push("record_child_handshake");
        self.conn()
            .prepare_cached("UPDATE children SET handshake_at = ?2 WHERE child_epoch = ?1 AND handshake_at IS NULL")?
            .execute(params![child_epoch, self.now])?;
        Ok(())
    }

    fn record_child_exit(&mut self, child_epoch: i64, exit: &ChildExitRecord) -> StoreResult<()> {
        self.ops.push("record_child_exit");
        self.conn()
            .prepare_cached(
                "UPDATE children SET exited_at = ?2, exit_code = ?3, signal = ?4, reason = ?5,
                        stdout_tail = ?6, stderr_tail = ?7
                 WHERE child_epoch = ?1 AND exited_at IS NULL",
            )?
            .execute(params![
                child_epoch,
                self.now,
                exit.exit_code,
                exit.signal,
                exit.reason,
                exit.stdout_tail,
                exit.stderr_tail
            ])?;
        Ok(())
    }
}
