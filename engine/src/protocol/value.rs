//! Large values: how a value too large for a frame is named on the wire and in a run's rows.
//!
//! A value whose canonical JSON passes [`INLINE_VALUE_BYTES`] travels apart, in chunks
//! (`worker.value_put` up, `value.get` down), and the place that would hold it (an attempt's
//! output, a run's result, an effect's receipt, a request, a message) holds a **reference**
//! instead:
//!
//! ```json
//! {"$piw": "value", "sha256": "<hex of the canonical JSON>", "bytes": 5000000, "preview": "..."}
//! ```
//!
//! Only the top level of such a place is ever read as a reference. A value of the workflow's
//! own that is an object with a `"$piw"` key at its top level is wrapped as
//! `{"$piw": "literal", "value": <the value>}` when it is stored, and unwrapped when it is read,
//! so no user data is ever taken for a reference; deeper levels are never interpreted.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The key that marks a reference or a wrapped literal.
pub const VALUE_TAG: &str = "$piw";

/// The largest value one reference may name: the canonical JSON's length in bytes (64 MiB).
pub const MAX_VALUE_BYTES: u64 = 64 * 1024 * 1024;

/// Values whose canonical JSON is longer than this travel as references (64 KiB): four of
/// them still fit one request's payload.
pub const INLINE_VALUE_BYTES: usize = 64 * 1024;

/// The raw bytes one `worker.value_put` carries at most (hex-encoded, twice as many
/// characters): 120 KiB, which keeps the payload under its 256 KiB limit.
pub const VALUE_PUT_CHUNK_BYTES: usize = 120 * 1024;

/// How many characters of the value's JSON a reference's preview holds at most.
pub const VALUE_PREVIEW_CHARS: usize = 200;

/// A reference to a stored value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRef {
    /// SHA-256 of the value's canonical JSON, lowercase hex.
    pub sha256: String,
    /// Length of the canonical JSON in bytes.
    pub bytes: u64,
    /// The start of the canonical JSON, at most [`VALUE_PREVIEW_CHARS`] characters.
    #[serde(default)]
    pub preview: String,
}

impl ValueRef {
    /// The reference for the canonical JSON `text`.
    pub fn for_canonical(text: &str) -> ValueRef {
        ValueRef {
            sha256: crate::ids::sha256_hex(text.as_bytes()),
            bytes: u64::try_from(text.len()).unwrap_or(u64::MAX),
            preview: text.chars().take(VALUE_PREVIEW_CHARS).collect(),
        }
    }

    /// The reference as it is stored and sent.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert(VALUE_TAG.into(), Value::from("value"));
        map.insert("sha256".into(), Value::from(self.sha256.clone()));
        map.insert("bytes".into(), Value::from(self.bytes));
        map.insert("preview".into(), Value::from(self.preview.clone()));
        Value::Object(map)
    }
}

/// What a stored or sent place holds, once its top level is read.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot<'a> {
    /// The value itself.
    Inline(&'a Value),
    /// A reference to a stored value.
    Reference(ValueRef),
}

/// Why a place's top level is not a valid reference or literal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The object names neither a reference nor a literal properly.
    #[error("a `{VALUE_TAG}` object must be a value reference or a literal: {0}")]
    Malformed(String),
    /// The reference names a value over [`MAX_VALUE_BYTES`].
    #[error("value {sha256} is {bytes} bytes, over the limit of {MAX_VALUE_BYTES}")]
    TooLarge {
        /// The value's hash.
        sha256: String,
        /// Its length.
        bytes: u64,
    },
}

/// Whether `sha256` is 64 lowercase hex digits.
pub fn is_sha256_hex(sha256: &str) -> bool {
    sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Reads the top level of a place: a reference, a wrapped literal (its value), or the value.
pub fn read_slot(value: &Value) -> Result<Slot<'_>, SlotError> {
    let Some(tag) = value.as_object().and_then(|o| o.get(VALUE_TAG)) else {
        return Ok(Slot::Inline(value));
    };
    let object = value.as_object().map(Map::len).unwrap_or(0);
    match tag.as_str() {
        Some("literal") if object == 2 => value
            .get("value")
            .map(Slot::Inline)
            .ok_or_else(|| SlotError::Malformed("a literal needs `value`".into())),
        Some("value") => {
            let r: ValueRef = serde_json::from_value(value.clone())
                .map_err(|e| SlotError::Malformed(e.to_string()))?;
            if !is_sha256_hex(&r.sha256) {
                return Err(SlotError::Malformed(
                    "`sha256` must be 64 lowercase hex digits".into(),
                ));
            }
            if r.bytes > MAX_VALUE_BYTES {
                return Err(SlotError::TooLarge {
                    sha256: r.sha256,
                    bytes: r.bytes,
                });
            }
            Ok(Slot::Reference(r))
        }
        _ => Err(SlotError::Malformed(format!(
            "`{VALUE_TAG}` is {tag}, not \"value\" or \"literal\""
        ))),
    }
}

/// The value as it is stored in a place when it is small enough: itself, or wrapped as a
/// literal when its top level would read as a reference.
pub fn wrap_inline(value: Value) -> Value {
    if value.as_object().is_some_and(|o| o.contains_key(VALUE_TAG)) {
        let mut map = Map::new();
        map.insert(VALUE_TAG.into(), Value::from("literal"));
        map.insert("value".into(), value);
        Value::Object(map)
    } else {
        value
    }
}

/// Reads a stored value back, a `value.get` reply at a time: ask [`ValueReader::next_offset`]
/// until it is `None`, feeding each reply's body to [`ValueReader::accept`], then
/// [`ValueReader::finish`] checks the hash and parses the JSON.
#[derive(Debug)]
pub struct ValueReader {
    reference: ValueRef,
    received: Vec<u8>,
}

impl ValueReader {
    /// A reader of the value `reference` names.
    pub fn new(reference: ValueRef) -> ValueReader {
        ValueReader {
            received: Vec::with_capacity(usize::try_from(reference.bytes).unwrap_or(0)),
            reference,
        }
    }

    /// The reference being read.
    pub fn reference(&self) -> &ValueRef {
        &self.reference
    }

    /// Where the next `value.get` starts; `None` once the value is whole.
    pub fn next_offset(&self) -> Option<u64> {
        let have = u64::try_from(self.received.len()).unwrap_or(u64::MAX);
        (have < self.reference.bytes).then_some(have)
    }

    /// Takes a `value.get` reply's body (`{bytes, offset, data, more}`).
    pub fn accept(&mut self, body: &Value) -> Result<(), String> {
        let offset = body.get("offset").and_then(Value::as_u64);
        if offset != self.next_offset() {
            return Err(format!(
                "value {}: a piece at {offset:?}, {} bytes expected next",
                self.reference.sha256,
                self.received.len()
            ));
        }
        let data = body
            .get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| "a value.get reply without `data`".to_owned())?;
        let data = chunk_from_hex(data)?;
        if data.is_empty() {
            return Err(format!(
                "value {}: an empty piece before its end",
                self.reference.sha256
            ));
        }
        self.received.extend_from_slice(&data);
        Ok(())
    }

    /// The value, once its bytes hash to the reference's name.
    pub fn finish(self) -> Result<Value, String> {
        let sha256 = crate::ids::sha256_hex(&self.received);
        if sha256 != self.reference.sha256
            || u64::try_from(self.received.len()).ok() != Some(self.reference.bytes)
        {
            return Err(format!(
                "value {} read back as {} bytes hashing to {sha256}",
                self.reference.sha256,
                self.received.len()
            ));
        }
        serde_json::from_slice(&self.received)
            .map_err(|e| format!("value {} is not JSON: {e}", self.reference.sha256))
    }
}

/// Lowercase hex of `bytes`: how a chunk travels.
pub fn chunk_to_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The bytes of a chunk sent as hex, or why it is not hex.
pub fn chunk_from_hex(text: &str) -> Result<Vec<u8>, String> {
    hex::decode(text).map_err(|e| format!("chunk data is not hex: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn user_data_that_looks_like_a_reference_is_wrapped_and_read_back_as_itself() {
        let user = json!({ "$piw": "value", "sha256": "0".repeat(64), "bytes": 3 });
        let stored = wrap_inline(user.clone());
        assert_eq!(stored["$piw"], "literal");
        assert_eq!(read_slot(&stored).unwrap(), Slot::Inline(&user));
        // Everything else is stored as it is.
        let plain = json!({ "a": { "$piw": "value" } });
        assert_eq!(wrap_inline(plain.clone()), plain);
        assert_eq!(read_slot(&plain).unwrap(), Slot::Inline(&plain));
    }

    #[test]
    fn a_reference_reads_back_and_a_bad_one_is_refused() {
        let r = ValueRef::for_canonical("\"hello\"");
        assert_eq!(read_slot(&r.to_json()).unwrap(), Slot::Reference(r.clone()));
        let mut short = r.to_json();
        short["sha256"] = json!("abc");
        assert!(matches!(read_slot(&short), Err(SlotError::Malformed(_))));
        let mut huge = r.to_json();
        huge["bytes"] = json!(MAX_VALUE_BYTES + 1);
        assert!(matches!(read_slot(&huge), Err(SlotError::TooLarge { .. })));
        assert!(read_slot(&json!({ "$piw": "other" })).is_err());
    }

    #[test]
    fn a_put_chunk_fits_the_payload_limit() {
        let hex_len = chunk_to_hex(&vec![0xab; VALUE_PUT_CHUNK_BYTES]).len();
        assert!(hex_len + 1024 < super::super::DEFAULT_MAX_PAYLOAD_BYTES);
    }
}
