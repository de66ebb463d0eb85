//! The roots of the engine's store traits (`piw_engine::store::port`) over SQLite: the write
//! entry and the transaction's savepoints and commands (over the generic `Store::write_at`,
//! `WriteTx::savepoint`, `WriteTx::command` and `WriteTx::command_group`, which piw-host's
//! callers use with closures of their own), and the store's and the transaction's own state.
//!
//! Every other operation is implemented once, where its SQL is: [`RunReads`] in `read.rs`,
//! [`Retention`] in `prune.rs`, [`Lifecycle`], [`Requests`], [`Holds`], [`Timers`] and
//! [`Recovery`] in `lifecycle/`, [`Effects`] in `effects.rs`, [`ValueWrites`] in `values.rs`,
//! [`ChildRecords`] in `children.rs`, [`HostOps`] in `host_ops.rs`. Callers outside the store
//! bring them into scope with `use crate::store::prelude::*` (`piw_host::store::prelude`).

use piw_engine::store::port::{Storage, Transaction, TxBody};
use serde_json::Value;

use super::*;

impl Storage for Store {
    fn write_dyn(&mut self, now: UnixMillis, body: TxBody<'_, ()>) -> StoreResult<()> {
        self.write_at(now, |w| body(w))
    }

    fn lease_ms(&self) -> i64 {
        self.config.lease_ms
    }

    fn commits(&self) -> u64 {
        self.commits
    }

    fn cursor_key(&self) -> crate::protocol::payload::CursorKey {
        self.cursor_key.clone()
    }

    fn disk_full_retry_at(&self) -> Option<UnixMillis> {
        self.disk_full.map(|spell| spell.retry_at())
    }
}

impl Transaction for WriteTx<'_> {
    fn savepoint_dyn(&mut self, body: TxBody<'_, ()>) -> StoreResult<()> {
        WriteTx::savepoint(self, |w| body(w))
    }

    fn command(
        &mut self,
        meta: &CommandMeta,
        body: TxBody<'_, Value>,
    ) -> StoreResult<CommandOutcome> {
        // The inherent generic form, which piw-host's callers use.
        WriteTx::command(self, meta, |w| body(w))
    }

    fn command_group(
        &mut self,
        count: usize,
        meta_of: &mut dyn FnMut(usize) -> StoreResult<CommandMeta>,
        apply: &mut dyn FnMut(&mut dyn Transaction, usize) -> StoreResult<Value>,
    ) -> StoreResult<Vec<StoreResult<CommandOutcome>>> {
        let items: Vec<usize> = (0..count).collect();
        WriteTx::command_group(self, &items, |i| meta_of(*i), |w, i| apply(w, *i))
    }

    fn ensure_in_transaction(&self) -> StoreResult<()> {
        if self.tx.is_autocommit() {
            return Err(StoreError::TransactionLost);
        }
        Ok(())
    }

    fn now_ms(&self) -> UnixMillis {
        self.now
    }

    fn expect_revision(&mut self, run_id: &str, expected: u64) -> StoreResult<()> {
        let actual = self.run_row(run_id)?.revision;
        if actual != expected {
            return Err(StoreError::StaleRevision {
                run_id: run_id.to_owned(),
                expected,
                actual,
            });
        }
        Ok(())
    }

    fn holds(&self, claim: &Claim) -> StoreResult<bool> {
        Ok(self.check_claim(claim)?.is_ok())
    }

    fn take_revisions(&mut self) -> std::collections::BTreeMap<String, u64> {
        std::mem::take(&mut self.revisions).into_iter().collect()
    }

    fn take_runs_written(&mut self) -> Vec<(String, u64)> {
        let mut first: std::collections::BTreeMap<String, u64> = Default::default();
        for (run_id, revision) in std::mem::take(&mut self.revisions) {
            let before = revision.saturating_sub(1);
            first
                .entry(run_id)
                .and_modify(|b| *b = (*b).min(before))
                .or_insert(before);
        }
        first.into_iter().collect()
    }

    fn reclaim_free_pages(&mut self, max_pages: u32) -> StoreResult<u64> {
        // `incremental_vacuum` returns no rows; its work happens as the statement steps.
        let mut stmt = self
            .conn()
            .prepare(&format!("PRAGMA incremental_vacuum({max_pages})"))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        drop(rows);
        drop(stmt);
        let n: i64 = self
            .conn()
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
