//! Command receipts: the stored response of every committed durable command, so a repeated
//! request id (or idempotency key) gets the original answer, also after a host restart.

use rusqlite::{params, OptionalExtension as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{StoreError, StoreResult, WriteTx};

/// Identity of one durable command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandMeta {
    pub request_id: String,
    pub idempotency_key: Option<String>,
    /// Hash of the request's meaning (kind, target and payload), independent of its ids.
    pub fingerprint: String,
    pub kind: String,
    pub run_id: Option<String>,
}

/// A stored response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredReceipt {
    pub request_id: String,
    pub response: Value,
    pub created_at: i64,
}

/// The response of a command and whether it came from an earlier commit.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandOutcome {
    pub response: Value,
    pub replayed: bool,
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
        if let Some(stored) = self.find_receipt(meta)? {
            return Ok(CommandOutcome {
                response: stored.response,
                replayed: true,
            });
        }
        self.savepoint(|w| {
            let response = f(w)?;
            w.conn()
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
                    meta.run_id,
                    response.to_string(),
                    w.now
                ])?;
            Ok(CommandOutcome {
                response,
                replayed: false,
            })
        })
    }
}
