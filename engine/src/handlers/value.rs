//! `value.get`: a piece of a large value a run holds (the worker's `worker.value_put` is in
//! `children::messages`).

use super::required;
use crate::fit::reply_room;
use crate::protocol::reply::ValuePiece;
use crate::protocol::{payload, Request};
use crate::store::{Storage, StoreError};

/// What a `value.get` reply holds besides its data.
const VALUE_REPLY_FIELDS_ROOM: usize = 512;

/// `value.get`: a piece of a value the run holds, hex-encoded, as much as was asked for and
/// fits the reply.
pub(crate) fn get(
    store: &dyn Storage,
    req: &Request,
    reply_limit: usize,
    get: &payload::ValueGet,
) -> Result<ValuePiece, StoreError> {
    let run_id = required(&req.run_id, "run_id")?;
    // Two hex digits a byte, and room for the other fields.
    let fits = reply_room(reply_limit).saturating_sub(VALUE_REPLY_FIELDS_ROOM) / 2;
    let max = get
        .max_bytes
        .map_or(fits, |m| usize::try_from(m).unwrap_or(usize::MAX).min(fits));
    let chunk = store.read_value_chunk(run_id, &get.sha256, get.offset, max)?;
    let end = chunk.offset + u64::try_from(chunk.data.len()).unwrap_or(u64::MAX);
    Ok(ValuePiece {
        sha256: get.sha256.clone(),
        bytes: chunk.bytes,
        offset: chunk.offset,
        data: crate::protocol::value::chunk_to_hex(&chunk.data),
        more: end < chunk.bytes,
    })
}
