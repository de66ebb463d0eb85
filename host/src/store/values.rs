//! Large values: stored once per installation by the SHA-256 of their canonical JSON, in
//! chunks (`value_blobs`, `value_chunks`), and kept while a run links to them (`run_values`).
//! The wire form of a reference is `protocol::value`.

use crate::store::prelude::*;
use crate::store::ValueWrites;
use rusqlite::{named_params, params, OptionalExtension as _};
use sha2::{Digest as _, Sha256};

use super::{Claim, Store, StoreError, StoreResult, WriteTx};
use crate::protocol::value::{is_sha256_hex, read_slot, Slot, ValueRef, MAX_VALUE_BYTES};
use piw_engine::store::records::*;

pub(super) fn invalid(message: impl Into<String>) -> StoreError {
    StoreError::InvalidInput(message.into())
}

pub(super) fn not_found(sha256: &str) -> StoreError {
    StoreError::NotFound {
        what: "value",
        id: sha256.to_owned(),
    }
}

pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// `bytes` and `received` of a value, if the store has any of it.
fn value_progress(c: &rusqlite::Connection, sha256: &str) -> StoreResult<Option<(u64, u64)>> {
    Ok(
        c.prepare_cached("SELECT bytes, received FROM value_blobs WHERE sha256 = ?1")?
            .query_row([sha256], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .optional()?
            .map(|(b, r)| (to_u64(b), to_u64(r))),
    )
}

/// SHA-256 of a value's chunks in order, and their total length.
fn hash_chunks(c: &rusqlite::Connection, sha256: &str) -> StoreResult<(String, u64)> {
    let mut stmt =
        c.prepare_cached("SELECT data FROM value_chunks WHERE sha256 = ?1 ORDER BY offset")?;
    let mut rows = stmt.query([sha256])?;
    let mut hasher = Sha256::new();
    let mut len = 0u64;
    while let Some(row) = rows.next()? {
        let data = row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?;
        len += u64::try_from(data.len()).unwrap_or(u64::MAX);
        hasher.update(data);
    }
    Ok((hex::encode(hasher.finalize()), len))
}

/// The condition (on `value_blobs v`, with the time as `:now`) under which a
/// partial value is abandoned: what `diagnose` reports as `value_partial` and `repair` removes.
///
/// - Partial: `received < bytes`. No row may refer to a value that is not whole
///   (`check_value_ref`, called by every write that stores a place), so a partial one holds no
///   committed fact. The one exception is a whole value found damaged and being stored again
///   (`put_value_chunk` sets it back to `received = 0`): rows refer to it, and it is
///   `value_missing` until an upload heals it, so it is excluded here (removing it would drop
///   the links the heal restores the referring runs through).
/// - Held by some run: a partial value no run holds is `value_unreferenced` already.
/// - No live child can go on with it: a chunk is only stored under the fence of a claim of a
///   run holding the value (or of a new run, which links it again first), and a claim whose
///   `expires_at` has passed can never renew itself (`check_fence`). While the host runs it
///   renews the claims of its live children every lease/3, so a value one of them is still
///   uploading always has a run with an unexpired claim and is never a finding, whether the
///   host or a stopped installation answers `diagnose`. A claim still unexpired after its host
///   died only delays the finding until the lease passes.
/// - No pending interactive request of a run holding it: a client may still be uploading it
///   for a submission (`interaction.value_put`; a waiting run holds no claim). Once the
///   request closes (answered, failed, expired, cancelled) an upload never submitted is
///   abandoned like a dead child's.
const ABANDONED: &str = "v.received < v.bytes
    AND EXISTS (SELECT 1 FROM run_values h WHERE h.sha256 = v.sha256)
    AND NOT EXISTS (SELECT 1 FROM run_values l JOIN claims c ON c.run_id = l.run_id
                    WHERE l.sha256 = v.sha256 AND c.owner_kind IS NOT NULL
                      AND c.expires_at > :now)
    AND NOT EXISTS (SELECT 1 FROM run_values l JOIN interactions i ON i.run_id = l.run_id
                    WHERE l.sha256 = v.sha256 AND i.status = 'pending')
    AND NOT EXISTS (SELECT 1 FROM (
            SELECT output AS x FROM attempts WHERE output LIKE '{\"$piw\":\"value\"%'
            UNION ALL SELECT result FROM runs WHERE result LIKE '{\"$piw\":\"value\"%'
            UNION ALL SELECT receipt FROM effects WHERE receipt LIKE '{\"$piw\":\"value\"%'
            UNION ALL SELECT request FROM decisions WHERE request LIKE '{\"$piw\":\"value\"%'
            UNION ALL SELECT request FROM interactions
                      WHERE request LIKE '{\"$piw\":\"value\"%'
            UNION ALL SELECT content FROM workflow_messages
                      WHERE content LIKE '{\"$piw\":\"value\"%') refs
        WHERE json_valid(refs.x) AND json_extract(refs.x, '$.sha256') = v.sha256)";

impl WriteTx<'_> {
    /// The chunk store behind both uploads, once the writer is known to be allowed.
    fn store_value_chunk(
        &mut self,
        run_id: &str,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut> {
        if !is_sha256_hex(sha256) {
            return Err(invalid("`sha256` must be 64 lowercase hex digits"));
        }
        if bytes > MAX_VALUE_BYTES {
            return Err(invalid(format!(
                "value {sha256} is {bytes} bytes, over the limit of {MAX_VALUE_BYTES}"
            )));
        }
        let c = self.conn();
        let received = match value_progress(c, sha256)? {
            Some((stored, _)) if stored != bytes => {
                return Err(invalid(format!(
                    "value {sha256} is {stored} bytes, not {bytes}"
                )))
            }
            // Already whole: the start of an upload (offset 0: its first chunk, or the empty
            // one asking where to go on from) checks the stored bytes against the hash before
            // it is told so. Bytes damaged since they were stored would otherwise be named
            // "complete" to every later run producing the same value, which would then end
            // holding them, and a correct upload could never heal them. A damaged value's
            // chunks go, and this upload stores it again: the runs that refer to it read it
            // whole again once it is (until then it reads as missing, not as wrong bytes).
            // One hash of the value per upload of a value stored before, about what sending
            // it would have cost; a resent later chunk (offset > 0) is not checked again.
            Some((_, received)) if received == bytes && offset == 0 => {
                let (hash, len) = hash_chunks(c, sha256)?;
                if hash == sha256 && len == bytes {
                    received
                } else {
                    tracing::warn!(
                        %sha256,
                        "a stored value does not match its hash (`value_corrupt`): its chunks \
                         are dropped and this upload stores it again"
                    );
                    c.prepare_cached("DELETE FROM value_chunks WHERE sha256 = ?1")?
                        .execute([sha256])?;
                    c.prepare_cached("UPDATE value_blobs SET received = 0 WHERE sha256 = ?1")?
                        .execute([sha256])?;
                    0
                }
            }
            Some((_, received)) => received,
            None => {
                c.prepare_cached(
                    "INSERT INTO value_blobs (sha256, bytes, received, created_at)
                     VALUES (?1, ?2, 0, ?3)",
                )?
                .execute(params![sha256, to_i64(bytes), self.now])?;
                0
            }
        };
        c.prepare_cached("INSERT OR IGNORE INTO run_values (run_id, sha256) VALUES (?1, ?2)")?
            .execute(params![run_id, sha256])?;
        // An empty chunk asks how much is stored (where to go on from).
        if received == bytes || offset < received || data.is_empty() {
            return Ok(ValuePut {
                received,
                complete: received == bytes,
            });
        }
        if offset > received {
            return Err(invalid(format!(
                "value {sha256}: a chunk at {offset}, but {received} bytes are stored"
            )));
        }
        let end = offset.saturating_add(u64::try_from(data.len()).unwrap_or(u64::MAX));
        if end > bytes {
            return Err(invalid(format!(
                "value {sha256}: a chunk of {} bytes at {offset} does not fit its {bytes} bytes",
                data.len()
            )));
        }
        c.prepare_cached("INSERT INTO value_chunks (sha256, offset, data) VALUES (?1, ?2, ?3)")?
            .execute(params![sha256, to_i64(offset), data])?;
        if end == bytes {
            let (hash, len) = hash_chunks(c, sha256)?;
            if hash != sha256 || len != bytes {
                return Err(invalid(format!(
                    "the {bytes} bytes sent as value {sha256} hash to {hash}"
                )));
            }
        }
        c.prepare_cached("UPDATE value_blobs SET received = ?2 WHERE sha256 = ?1")?
            .execute(params![sha256, to_i64(end)])?;
        Ok(ValuePut {
            received: end,
            complete: end == bytes,
        })
    }

    /// Refuses `reference` in a row of `run_id` unless it names a whole value linked to that
    /// run, of the length it says.
    pub fn check_value_ref(&self, run_id: &str, reference: &ValueRef) -> StoreResult<()> {
        let linked: Option<(i64, i64)> = self
            .conn()
            .prepare_cached(
                "SELECT v.bytes, v.received FROM run_values rv JOIN value_blobs v USING (sha256)
                 WHERE rv.run_id = ?1 AND rv.sha256 = ?2",
            )?
            .query_row(params![run_id, reference.sha256], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        match linked {
            Some((bytes, received)) if bytes == received && to_u64(bytes) == reference.bytes => {
                Ok(())
            }
            Some(_) => Err(invalid(format!(
                "value {} is not whole or not {} bytes: upload it before referring to it",
                reference.sha256, reference.bytes
            ))),
            None => Err(invalid(format!(
                "value {} was not uploaded by run {run_id}",
                reference.sha256
            ))),
        }
    }

    /// Refuses `value` as the content of a place of `run_id` when its top level is a malformed
    /// reference or literal, or a reference to a value the run does not hold whole.
    pub(crate) fn check_slot(&self, run_id: &str, value: &serde_json::Value) -> StoreResult<()> {
        match read_slot(value) {
            Ok(Slot::Inline(_)) => Ok(()),
            Ok(Slot::Reference(r)) => self.check_value_ref(run_id, &r),
            Err(e) => Err(invalid(e.to_string())),
        }
    }

    /// Forgets that `run_id` holds any value (for a run being removed); the values no other
    /// run holds go with [`WriteTx::remove_unreferenced_values`].
    pub fn unlink_run_values(&mut self, run_id: &str) -> StoreResult<u64> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM run_values WHERE run_id = ?1")?
            .execute([run_id])?;
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }

    /// Removes value `sha256` (its chunks, its blob and every run's link to it) if it is still
    /// partial and still one `abandoned_partial_values` names (no live claim can go on
    /// with it, no row refers to it): `repair`'s fix for `value_partial`. Checked again here,
    /// in the write, so a finding read before it cannot remove an upload that became live or
    /// referred to since. Returns whether it went.
    pub fn remove_abandoned_partial_value(&mut self, sha256: &str) -> StoreResult<bool> {
        let now = self.now;
        let c = self.conn();
        let abandoned: bool = c
            .prepare_cached(&format!(
                "SELECT EXISTS (SELECT 1 FROM value_blobs v WHERE v.sha256 = :sha256 AND {ABANDONED})"
            ))?
            .query_row(named_params! {":sha256": sha256, ":now": now}, |r| r.get(0))?;
        if !abandoned {
            return Ok(false);
        }
        c.prepare_cached("DELETE FROM run_values WHERE sha256 = ?1")?
            .execute([sha256])?;
        c.prepare_cached("DELETE FROM value_chunks WHERE sha256 = ?1")?
            .execute([sha256])?;
        c.prepare_cached("DELETE FROM value_blobs WHERE sha256 = ?1")?
            .execute([sha256])?;
        Ok(true)
    }

    /// Removes every value no run links to, with its chunks; returns how many.
    pub fn remove_unreferenced_values(&mut self) -> StoreResult<u64> {
        let c = self.conn();
        c.prepare_cached(
            "DELETE FROM value_chunks WHERE sha256 IN (
                 SELECT sha256 FROM value_blobs v
                 WHERE NOT EXISTS (SELECT 1 FROM run_values rv WHERE rv.sha256 = v.sha256))",
        )?
        .execute([])?;
        let n = c
            .prepare_cached(
                "DELETE FROM value_blobs
                 WHERE NOT EXISTS (SELECT 1 FROM run_values rv WHERE rv.sha256 = value_blobs.sha256)",
            )?
            .execute([])?;
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }
}

impl Store {
    /// The whole value `sha256` of `run_id`, read chunk by chunk.
    pub fn read_value(&self, run_id: &str, sha256: &str) -> StoreResult<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let chunk = self.read_value_chunk(
                run_id,
                sha256,
                u64::try_from(out.len()).unwrap_or(u64::MAX),
                4 * 1024 * 1024,
            )?;
            out.extend_from_slice(&chunk.data);
            if u64::try_from(out.len()).unwrap_or(u64::MAX) >= chunk.bytes {
                return Ok(out);
            }
        }
    }
}

/// The partial values (`received < bytes`) no live child can still complete, one row per
/// run holding it: (run_id, sha256, bytes, received). See [`ABANDONED`] for the rule.
pub(super) fn abandoned_partial_values(
    c: &rusqlite::Connection,
    now: i64,
) -> StoreResult<Vec<(String, String, u64, u64)>> {
    let rows = c
        .prepare_cached(&format!(
            "SELECT rv.run_id, v.sha256, v.bytes, v.received
             FROM value_blobs v JOIN run_values rv ON rv.sha256 = v.sha256
             WHERE {ABANDONED} ORDER BY rv.run_id, v.sha256"
        ))?
        .query_map(named_params! {":now": now}, |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                to_u64(r.get(2)?),
                to_u64(r.get(3)?),
            ))
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The whole values whose chunks do not add up to their length or hash: (sha256, detail).
pub(super) fn corrupt_values(c: &rusqlite::Connection) -> StoreResult<Vec<(String, String)>> {
    let whole: Vec<(String, i64)> = c
        .prepare_cached("SELECT sha256, bytes FROM value_blobs WHERE received = bytes")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut corrupt = Vec::new();
    for (sha256, bytes) in whole {
        let (hash, len) = hash_chunks(c, &sha256)?;
        if len != to_u64(bytes) {
            corrupt.push((
                sha256,
                format!("value has {len} bytes in its chunks, {bytes} expected"),
            ));
        } else if hash != sha256 {
            corrupt.push((sha256, format!("value's chunks hash to {hash}")));
        }
    }
    Ok(corrupt)
}

impl ValueWrites for WriteTx<'_> {
    fn put_value_chunk(
        &mut self,
        claim: &Claim,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut> {
        self.fence(claim)?;
        self.ops.push("value_put");
        self.store_value_chunk(&claim.run_id, sha256, bytes, offset, data)
    }

    fn put_interaction_value_chunk(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut> {
        let request = self.interaction_row(interaction_id)?;
        self.require_pending_interaction(interaction_id, &request, attempt_id, true)?;
        self.ops.push("interaction_value_put");
        self.store_value_chunk(&request.run_id, sha256, bytes, offset, data)
    }
}
