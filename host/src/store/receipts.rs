//! Command receipts: the stored response of every committed durable command, so a repeated
//! request id (or idempotency key) gets the original answer, also after a host restart.

use crate::store::prelude::*;
use rusqlite::{params, OptionalExtension as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{StoreError, StoreResult, WriteTx};
use piw_engine::store::records::*;

/// How many receipts of a progress-like kind (`worker.progress`, `worker.notify`,
/// `interaction.update`) a run keeps: the latest this many per run and kind; older ones are
/// dropped as new ones arrive.
///
/// Why a window and not every receipt: a chatty run reports without end (once a second is
/// 86,400 receipts a day, ~23 MB), while events are bounded per run already. A receipt exists
/// for a resend after a lost reply, and a resend is of a call still waiting for its answer:
/// a child sends one call at a time (`core::worker::Worker` is synchronous) and a client's
/// outstanding calls are few, so the latest receipts of a kind are the ones a resend can ask
/// for, and they still replay exactly. Why not none at all: the replay of a recent resend must
/// give the same answer (the same `seq`, `message_id`), which only the receipt knows.
/// And a resend older than the window is still harmless, because these kinds change nothing
/// but a bounded log: a progress or an update adds one more event to the run's bounded events
/// (`admit_event`), and a notify's message id is derived from the node's visit
/// (`WriteTx::notify`, `add_message_once`), so a second notify never makes a second message.
pub const RECEIPTS_KEPT_PER_RUN_AND_KIND: i64 = 16;

/// Whether a kind's receipts are kept only in a window per run (see
/// [`RECEIPTS_KEPT_PER_RUN_AND_KIND`]). The list is the partial index's in `schema.sql`.
pub fn receipt_is_windowed(kind: &str) -> bool {
    matches!(
        kind,
        "worker.progress" | "worker.notify" | "interaction.update"
    )
}

/// A stored response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredReceipt {
    pub request_id: String,
    pub response: Value,
    pub created_at: i64,
}

impl WriteTx<'_> {
    /// Finds the receipt of an earlier commit of the same command. The same request id or
    /// idempotency key with a different fingerprint is an [`StoreError::IdempotencyConflict`].
    pub fn find_receipt(&self, meta: &CommandMeta) -> StoreResult<Option<StoredReceipt>> {
        let by_id = self.receipt_where(
            "SELECT fingerprint, request_id, response, created_at FROM command_receipts
             WHERE request_id = ?1",
            &meta.request_id,
        )?;
        let found = match (by_id, &meta.idempotency_key) {
            (Some(r), _) => Some((r, meta.request_id.clone())),
            (None, Some(key)) => self
                .receipt_where(
                    "SELECT fingerprint, request_id, response, created_at FROM command_receipts
                     WHERE idempotency_key = ?1",
                    key,
                )?
                .map(|r| (r, key.clone())),
            (None, None) => None,
        };
        match found {
            None => Ok(None),
            Some(((fingerprint, receipt), _)) if fingerprint == meta.fingerprint => {
                Ok(Some(receipt))
            }
            Some((_, key)) => Err(StoreError::IdempotencyConflict { key }),
        }
    }

    /// One receipt row by `sql` (a static query: no SQL text built per call).
    fn receipt_where(
        &self,
        sql: &'static str,
        value: &str,
    ) -> StoreResult<Option<(String, StoredReceipt)>> {
        let row: Option<(String, String, String, i64)> = self
            .conn()
            .prepare_cached(sql)?
            .query_row([value], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        row.map(|(fp, request_id, response, created_at)| {
            Ok((
                fp,
                StoredReceipt {
                    request_id,
                    response: serde_json::from_str(&response)?,
                    created_at,
                },
            ))
        })
        .transpose()
    }

    /// Runs a durable command exactly once: a repeat returns the stored response; a new command
    /// runs `f` in a savepoint and stores its response in the same transaction, so the
    /// acknowledgement and the change commit together or not at all.
    pub fn command(
        &mut self,
        meta: &CommandMeta,
        f: impl FnOnce(&mut Self) -> StoreResult<Value>,
    ) -> StoreResult<CommandOutcome> {
        if let Some(replayed) = self.replay(meta)? {
            return Ok(replayed);
        }
        self.savepoint(|w| w.apply_and_store(meta, f))
    }

    /// The stored outcome of an earlier run of the command, if there is one, and whether an
    /// earlier transaction committed it (see [`CommandOutcome::committed_before`]).
    fn replay(&self, meta: &CommandMeta) -> StoreResult<Option<CommandOutcome>> {
        Ok(self.find_receipt(meta)?.map(|stored| CommandOutcome {
            // A request id is a key of the table: a receipt this transaction inserted was not
            // there before it.
            committed_before: !self.receipts_written.contains(&stored.request_id),
            response: stored.response,
            replayed: true,
        }))
    }

    /// Runs several durable commands in order, each exactly as [`WriteTx::command`] would: a
    /// command that fails leaves nothing behind, and its neighbours keep their changes. The
    /// results come back in the order of `items`.
    ///
    /// Why not one savepoint each: a savepoint copies every page a command touches into a
    /// journal before the command changes it, and most commands fail, if at all, before they
    /// write anything. So the group runs under **one** savepoint, and a command that fails
    /// after writing (SQLite's change counter moved) makes the whole group start again from
    /// that savepoint with one savepoint per command. `apply` may therefore run twice for an
    /// item: it must have no effect outside this transaction.
    ///
    /// An `Err` of the whole call means the transaction itself is unusable (SQLite rolled it
    /// back, or a savepoint statement failed): the caller must not commit.
    pub fn command_group<T>(
        &mut self,
        items: &[T],
        mut meta_of: impl FnMut(&T) -> StoreResult<CommandMeta>,
        mut apply: impl FnMut(&mut Self, &T) -> StoreResult<Value>,
    ) -> StoreResult<Vec<StoreResult<CommandOutcome>>> {
        self.ensure_in_transaction()?;
        if items.len() > 1 {
            if let Some(results) = self.try_group_unisolated(items, &mut meta_of, &mut apply)? {
                return Ok(results);
            }
        }
        let mut results = Vec::with_capacity(items.len());
        for item in items {
            let result = meta_of(item).and_then(|meta| self.command(&meta, |w| apply(w, item)));
            if self.lost() {
                return Err(super::lost_after(result.err()));
            }
            results.push(result);
        }
        Ok(results)
    }

    /// The group under one savepoint; `None` (everything undone) when a command failed after
    /// writing and the group must run again with a savepoint per command.
    fn try_group_unisolated<T>(
        &mut self,
        items: &[T],
        meta_of: &mut impl FnMut(&T) -> StoreResult<CommandMeta>,
        apply: &mut impl FnMut(&mut Self, &T) -> StoreResult<Value>,
    ) -> StoreResult<Option<Vec<StoreResult<CommandOutcome>>>> {
        self.conn()
            .prepare_cached("SAVEPOINT piw_group")?
            .execute([])?;
        let (ops_before, revisions_before) = (self.ops.len(), self.revisions.len());
        let mut results = Vec::with_capacity(items.len());
        let mut wrote_then_failed = false;
        for item in items {
            let changes_before = self.conn().total_changes();
            let (ops_at, revisions_at) = (self.ops.len(), self.revisions.len());
            let result = meta_of(item).and_then(|meta| match self.replay(&meta)? {
                Some(replayed) => Ok(replayed),
                None => self.apply_and_store(&meta, |w| apply(w, item)),
            });
            if self.lost() {
                return Err(super::lost_after(result.err()));
            }
            if result.is_err() {
                if self.conn().total_changes() != changes_before {
                    wrote_then_failed = true;
                    break;
                }
                // Nothing written: the transaction is as it was before this command.
                self.ops.truncate(ops_at);
                self.revisions.truncate(revisions_at);
            }
            results.push(result);
        }
        if wrote_then_failed {
            self.conn()
                .prepare_cached("ROLLBACK TO piw_group")?
                .execute([])?;
        }
        self.conn()
            .prepare_cached("RELEASE piw_group")?
            .execute([])?;
        if wrote_then_failed {
            self.ops.truncate(ops_before);
            self.revisions.truncate(revisions_before);
            tracing::debug!("a command failed after writing; its group runs again, isolated");
            return Ok(None);
        }
        Ok(Some(results))
    }

    /// Runs `f` and stores its response as the command's receipt (no isolation of its own).
    fn apply_and_store(
        &mut self,
        meta: &CommandMeta,
        f: impl FnOnce(&mut Self) -> StoreResult<Value>,
    ) -> StoreResult<CommandOutcome> {
        let response = f(self)?;
        // The run a command is about, also when the run is its answer (`run.start`): a prune
        // removes a run's receipts with it.
        let run_id = meta
            .run_id
            .as_deref()
            .or_else(|| response.get("run_id").and_then(Value::as_str));
        self.conn()
            .prepare_cached(
                "INSERT INTO command_receipts (request_id, idempotency_key, fingerprint, kind,
                                               run_id, response, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                meta.request_id,
                meta.idempotency_key,
                meta.fingerprint,
                meta.kind,
                run_id,
                response.to_string(),
                self.now
            ])?;
        if let Some(run_id) = run_id {
            // The run's row is written by this command already: widening its window costs no
            // page of its own.
            self.conn()
                .prepare_cached(
                    "UPDATE runs SET receipts_from = COALESCE(receipts_from, ?2), receipts_to = ?2
                     WHERE run_id = ?1",
                )?
                .execute(params![run_id, self.tx.last_insert_rowid()])?;
        }
        if let (Some(run_id), true) = (run_id, receipt_is_windowed(&meta.kind)) {
            // The oldest receipts of this run and kind beyond the window go. They lie inside
            // the run's rowid window still, so prune and `diagnose` see nothing changed.
            // The literal `kind IN (...)` lets SQLite use the partial index.
            self.conn()
                .prepare_cached(
                    "DELETE FROM command_receipts
                     WHERE run_id = ?1 AND kind = ?2
                       AND kind IN ('worker.progress', 'worker.notify', 'interaction.update')
                       AND rowid <= (SELECT rowid FROM command_receipts
                                     WHERE run_id = ?1 AND kind = ?2
                                       AND kind IN ('worker.progress', 'worker.notify',
                                                    'interaction.update')
                                     ORDER BY rowid DESC LIMIT 1 OFFSET ?3)",
                )?
                .execute(params![run_id, meta.kind, RECEIPTS_KEPT_PER_RUN_AND_KIND])?;
        }
        // Kept also if a savepoint undoes the insert: the set is only asked about receipts
        // found, and a request id found after its insert was undone was inserted again here.
        self.receipts_written.insert(meta.request_id.clone());
        Ok(CommandOutcome {
            response,
            replayed: false,
            committed_before: false,
        })
    }
}
