//! The request envelope: decoding a frame body into a typed [`Request`], encoding one, and the
//! request fingerprint used for idempotency.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canonical::{canonical_json, canonical_json_len, StrictValue};
use super::kind::{RequestBody, RequestKind};
pub use super::rejection::bounded_message;
pub use super::server::DecodeError;
use super::{Limits, RejectionCode, PROTOCOL_SCHEMA};

/// Longest accepted `request_id` and `idempotency_key`, in Unicode code points.
pub const MAX_ID_CHARS: usize = 128;

/// Deepest accepted nesting of arrays and objects in a request, counting the envelope object
/// as one level.
///
/// The JSON parser alone stops at 127 levels; the tighter bound leaves headroom for server
/// frames that embed request values (a run's input inside a status receipt), so everything the
/// host accepts it can also send back in a frame any client can parse.
pub const MAX_REQUEST_DEPTH: usize = 64;

/// A decoded request: the envelope fields and the typed body.
///
/// Build one with [`Request::new`] and the `with_*` methods, send it with
/// [`encode_frame`](super::encode_frame) (it serializes as the wire envelope), and decode a
/// received frame body with [`Request::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Client-chosen id, 1 to [`MAX_ID_CHARS`] code points; a repeated id replays the stored
    /// receipt.
    pub request_id: String,
    /// The run the request is about, where it applies.
    pub run_id: Option<String>,
    /// The node the request is about, where it applies.
    pub node_id: Option<String>,
    /// The node attempt the request is about, where it applies.
    pub attempt_id: Option<String>,
    /// The claim generation a worker runs under (required on worker kinds).
    pub generation: Option<u64>,
    /// The run revision the caller last saw; a different current revision is `stale_revision`.
    pub expected_revision: Option<u64>,
    /// Caller key that makes a command idempotent across request ids, 1 to [`MAX_ID_CHARS`]
    /// code points.
    pub idempotency_key: Option<String>,
    /// The kind and its typed payload.
    pub body: RequestBody,
}

impl Request {
    /// A request with only the required envelope fields set.
    pub fn new(request_id: impl Into<String>, body: RequestBody) -> Self {
        Request {
            request_id: request_id.into(),
            run_id: None,
            node_id: None,
            attempt_id: None,
            generation: None,
            expected_revision: None,
            idempotency_key: None,
            body,
        }
    }

    /// Sets `run_id`.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Sets `node_id`.
    pub fn with_node_id(mut self, node_id: impl Into<String>) -> Self {
        self.node_id = Some(node_id.into());
        self
    }

    /// Sets `attempt_id`.
    pub fn with_attempt_id(mut self, attempt_id: impl Into<String>) -> Self {
        self.attempt_id = Some(attempt_id.into());
        self
    }

    /// Sets `generation`.
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Sets `expected_revision`.
    pub fn with_expected_revision(mut self, revision: u64) -> Self {
        self.expected_revision = Some(revision);
        self
    }

    /// Sets `idempotency_key`.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The request's kind.
    pub fn kind(&self) -> RequestKind {
        self.body.kind()
    }

    /// How the host handles the request (its kind's class).
    pub fn class(&self) -> super::RequestClass {
        self.kind().class()
    }

    /// Whether a workflow child sent this (a `worker.*` kind).
    pub fn is_worker(&self) -> bool {
        self.kind().is_worker()
    }

    /// Decodes a frame body (as returned by [`FrameDecoder::next_frame`] or
    /// [`read_frame`]).
    ///
    /// Checks, in order: UTF-8; JSON syntax with no repeated object keys; an object with a
    /// `schema` equal to [`PROTOCOL_SCHEMA`] (otherwise `unsupported_protocol`); a valid
    /// `request_id`; a known `kind`; the types of the other envelope fields; the
    /// `idempotency_key` bounds; the envelope fields the kind requires; the nesting depth
    /// against [`MAX_REQUEST_DEPTH`]; the payload's canonical size against
    /// [`Limits::max_payload_bytes`] (`payload_too_large`); the payload's fields. Every other
    /// failure is `malformed`. Unknown fields are ignored at every level.
    ///
    /// [`FrameDecoder::next_frame`]: super::FrameDecoder::next_frame
    /// [`read_frame`]: super::read_frame
    pub fn decode(body: &[u8], limits: &Limits) -> Result<Request, DecodeError> {
        let text = std::str::from_utf8(body)
            .map_err(|err| DecodeError::malformed(format!("frame is not valid UTF-8: {err}")))?;
        let mut raw: RawEnvelope = serde_json::from_str(text).map_err(|err| {
            let message = if err.is_syntax() || err.is_eof() {
                format!("frame is not valid JSON: {err}")
            } else {
                err.to_string()
            };
            DecodeError::malformed(message).with_request_id(salvage_request_id(text))
        })?;

        // The request id, if usable, goes into every later error so the host can answer
        // with a typed rejection before it closes the connection.
        let request_id = match &raw.request_id {
            Some(StrictValue(Value::String(id))) if id_is_valid(id) => Some(id.clone()),
            _ => None,
        };
        let with_id = |err: DecodeError| err.with_request_id(request_id.clone());
        if let Some(literal) = super::canonical::integer_out_of_range(text) {
            return Err(with_id(DecodeError::malformed(format!(
                "the integer {} does not fit 64 bits and would lose its value; send it as a string",
                bounded_message(literal, 64)
            ))));
        }

        match raw.schema.take().map(|v| v.0) {
            Some(Value::String(schema)) if schema == PROTOCOL_SCHEMA => {}
            Some(Value::String(schema)) => {
                return Err(with_id(DecodeError::new(
                    RejectionCode::UnsupportedProtocol,
                    format!(
                        "unsupported protocol schema `{}`, this host speaks `{PROTOCOL_SCHEMA}`",
                        bounded_message(&schema, 128)
                    ),
                )));
            }
            Some(_) => return Err(with_id(type_error("schema", "a string"))),
            None => return Err(with_id(missing("schema"))),
        }

        let request_id = match raw.request_id.take().map(|v| v.0) {
            Some(Value::String(id)) => {
                check_id("request_id", &id)?;
                id
            }
            Some(_) => return Err(type_error("request_id", "a string")),
            None => return Err(missing("request_id")),
        };
        let with_id = |err: DecodeError| err.with_request_id(Some(request_id.clone()));

        let kind = match raw.kind.take().map(|v| v.0) {
            Some(Value::String(kind)) => RequestKind::parse(&kind).ok_or_else(|| {
                with_id(DecodeError::malformed(format!(
                    "unknown kind `{}`",
                    bounded_message(&kind, 64)
                )))
            })?,
            Some(_) => return Err(with_id(type_error("kind", "a string"))),
            None => return Err(with_id(missing("kind"))),
        };

        let fields = EnvelopeFields::take_from(&mut raw).map_err(with_id)?;
        check_envelope(
            kind,
            fields.idempotency_key.as_deref(),
            [
                fields.run_id.is_some(),
                fields.node_id.is_some(),
                fields.attempt_id.is_some(),
                fields.generation.is_some(),
            ],
        )
        .map_err(with_id)?;

        let payload = raw.payload.take().map_or(Value::Null, |v| v.0);
        check_payload_value(&payload, limits).map_err(with_id)?;

        let body = kind.decode_body(payload).map_err(|err| {
            with_id(DecodeError::malformed(format!(
                "invalid payload for `{kind}`: {err}"
            )))
        })?;
        check_body(&body).map_err(with_id)?;

        Ok(Request {
            request_id,
            run_id: fields.run_id,
            node_id: fields.node_id,
            attempt_id: fields.attempt_id,
            generation: fields.generation,
            expected_revision: fields.expected_revision,
            idempotency_key: fields.idempotency_key,
            body,
        })
    }

    /// Checks this request against every rule [`Request::decode`] enforces, in the same
    /// order, so a client can refuse to send what the host would reject as `malformed` or
    /// `payload_too_large`.
    pub fn validate(&self, limits: &Limits) -> Result<(), DecodeError> {
        check_id("request_id", &self.request_id)?;
        let with_id = |err: DecodeError| err.with_request_id(Some(self.request_id.clone()));
        check_envelope(
            self.kind(),
            self.idempotency_key.as_deref(),
            [
                self.run_id.is_some(),
                self.node_id.is_some(),
                self.attempt_id.is_some(),
                self.generation.is_some(),
            ],
        )
        .map_err(with_id)?;
        let payload = self.body.payload_json().map_err(|err| {
            with_id(DecodeError::malformed(format!(
                "payload cannot be encoded as JSON: {err}"
            )))
        })?;
        check_payload_value(&payload, limits).map_err(with_id)?;
        check_body(&self.body).map_err(with_id)
    }

    /// The request fingerprint: lower-case hex SHA-256 of the canonical JSON of
    /// `{"attempt_id", "kind", "node_id", "payload", "run_id"}`.
    ///
    /// Absent ids are `null`; `payload` is [`RequestBody::payload_json`], the payload as the
    /// host understood it (unknown fields dropped, absent optional fields `null`, defaults
    /// filled in), so two requests that mean the same thing have the same fingerprint however
    /// they were spelled. `request_id`, `generation`, `expected_revision` and
    /// `idempotency_key` are not part of it.
    ///
    /// Fails only if the payload cannot be represented as JSON, which the payload types in
    /// this module never produce.
    pub fn fingerprint(&self) -> Result<String, serde_json::Error> {
        let optional = |id: &Option<String>| id.clone().map_or(Value::Null, Value::String);
        let mut identity = serde_json::Map::new();
        identity.insert("kind".into(), Value::String(self.kind().as_str().into()));
        identity.insert("run_id".into(), optional(&self.run_id));
        identity.insert("node_id".into(), optional(&self.node_id));
        identity.insert("attempt_id".into(), optional(&self.attempt_id));
        identity.insert("payload".into(), self.body.payload_json()?);
        let canonical = canonical_json(&Value::Object(identity));
        Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
    }
}

/// Serializes the wire envelope: `schema`, `request_id`, `kind`, the optional envelope fields
/// that are set, and `payload`.
impl Serialize for Request {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Payload<'a>(&'a RequestBody);
        impl Serialize for Payload<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.0.serialize_payload(serializer)
            }
        }

        let mut envelope = serializer.serialize_struct("Request", 10)?;
        envelope.serialize_field("schema", PROTOCOL_SCHEMA)?;
        envelope.serialize_field("request_id", &self.request_id)?;
        envelope.serialize_field("kind", self.kind().as_str())?;
        serialize_optional(&mut envelope, "run_id", &self.run_id)?;
        serialize_optional(&mut envelope, "node_id", &self.node_id)?;
        serialize_optional(&mut envelope, "attempt_id", &self.attempt_id)?;
        serialize_optional(&mut envelope, "generation", &self.generation)?;
        serialize_optional(&mut envelope, "expected_revision", &self.expected_revision)?;
        serialize_optional(&mut envelope, "idempotency_key", &self.idempotency_key)?;
        envelope.serialize_field("payload", &Payload(&self.body))?;
        envelope.end()
    }
}

fn serialize_optional<S: SerializeStruct, T: Serialize>(
    envelope: &mut S,
    field: &'static str,
    value: &Option<T>,
) -> Result<(), S::Error> {
    match value {
        Some(value) => envelope.serialize_field(field, value),
        None => envelope.skip_field(field),
    }
}

/// The envelope as parsed, before any field is interpreted. Every field is an untyped strict
/// value so each problem gets a precise message, and a repeated key anywhere is an error, in
/// unknown fields too (they are parsed strictly and dropped). A `null` field is absent.
#[derive(Default)]
struct RawEnvelope {
    schema: Option<StrictValue>,
    request_id: Option<StrictValue>,
    kind: Option<StrictValue>,
    run_id: Option<StrictValue>,
    node_id: Option<StrictValue>,
    attempt_id: Option<StrictValue>,
    generation: Option<StrictValue>,
    expected_revision: Option<StrictValue>,
    idempotency_key: Option<StrictValue>,
    payload: Option<StrictValue>,
}

impl<'de> Deserialize<'de> for RawEnvelope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawEnvelopeVisitor)
    }
}

/// A key of the envelope object, borrowed from the frame when it has no escapes (every key
/// of a usual request): decoding the envelope allocates nothing per key.
struct EnvelopeKey<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for EnvelopeKey<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = EnvelopeKey<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(EnvelopeKey(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(EnvelopeKey(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(EnvelopeKey(std::borrow::Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct RawEnvelopeVisitor;

impl<'de> serde::de::Visitor<'de> for RawEnvelopeVisitor {
    type Value = RawEnvelope;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object (the request envelope)")
    }

    /// An array is not an envelope (not even one with the fields in order). Read to its end
    /// first, so invalid JSON inside it is reported as such, as for any other frame.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawEnvelope, A::Error> {
        while seq.next_element::<StrictValue>()?.is_some() {}
        Err(serde::de::Error::invalid_type(
            serde::de::Unexpected::Seq,
            &self,
        ))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawEnvelope, A::Error> {
        let mut envelope = RawEnvelope::default();
        // Keys seen so far: the known ones as bits (no allocation on the usual path), unknown
        // ones by name. A repeat of any of them is an error.
        let mut known_seen = 0u16;
        let mut unknown_seen: Vec<String> = Vec::new();
        while let Some(EnvelopeKey(key)) = map.next_key::<EnvelopeKey<'de>>()? {
            let known = match &*key {
                "schema" => Some((0, &mut envelope.schema)),
                "request_id" => Some((1, &mut envelope.request_id)),
                "kind" => Some((2, &mut envelope.kind)),
                "run_id" => Some((3, &mut envelope.run_id)),
                "node_id" => Some((4, &mut envelope.node_id)),
                "attempt_id" => Some((5, &mut envelope.attempt_id)),
                "generation" => Some((6, &mut envelope.generation)),
                "expected_revision" => Some((7, &mut envelope.expected_revision)),
                "idempotency_key" => Some((8, &mut envelope.idempotency_key)),
                "payload" => Some((9, &mut envelope.payload)),
                _ => None,
            };
            let repeated = match &known {
                Some((bit, _)) => {
                    let mask = 1u16 << bit;
                    let repeated = known_seen & mask != 0;
                    known_seen |= mask;
                    repeated
                }
                None if unknown_seen.iter().any(|seen| **seen == *key) => true,
                None => {
                    unknown_seen.push(key.clone().into_owned());
                    false
                }
            };
            if repeated {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    bounded_message(&key, 64)
                )));
            }
            // Unknown fields are parsed strictly too, then dropped.
            let value: StrictValue = map.next_value()?;
            if let Some((_, slot)) = known {
                if !value.0.is_null() {
                    *slot = Some(value);
                }
            }
        }
        Ok(envelope)
    }
}

/// The optional envelope fields after type checks.
struct EnvelopeFields {
    run_id: Option<String>,
    node_id: Option<String>,
    attempt_id: Option<String>,
    generation: Option<u64>,
    expected_revision: Option<u64>,
    idempotency_key: Option<String>,
}

/// Checks the idempotency key's bounds and that the envelope fields `kind` requires are
/// present. `present` is `[run_id, node_id, attempt_id, generation]`.
fn check_envelope(
    kind: RequestKind,
    idempotency_key: Option<&str>,
    present: [bool; 4],
) -> Result<(), DecodeError> {
    if let Some(key) = idempotency_key {
        check_id("idempotency_key", key)?;
    }
    let required = kind.required_fields();
    let needed = [
        (required.run_id, "run_id"),
        (required.node_id, "node_id"),
        (required.attempt_id, "attempt_id"),
        (required.generation, "generation"),
    ];
    for ((needed, field), is_present) in needed.into_iter().zip(present) {
        if needed && !is_present {
            return Err(DecodeError::malformed(format!(
                "missing field `{field}` (required for `{kind}`)"
            )));
        }
    }
    Ok(())
}

/// Checks the payload's nesting depth and its canonical size. Depth first: it is computed
/// iteratively, and it bounds the recursion of the size computation.
fn check_payload_value(payload: &Value, limits: &Limits) -> Result<(), DecodeError> {
    // The envelope object is one level; the payload's levels come on top.
    if 1 + json_depth(payload) > MAX_REQUEST_DEPTH {
        return Err(DecodeError::malformed(format!(
            "payload nests deeper than {MAX_REQUEST_DEPTH} levels (counting the envelope)"
        )));
    }
    let payload_len = canonical_json_len(payload);
    if payload_len > limits.max_payload_bytes {
        return Err(DecodeError::new(
            RejectionCode::PayloadTooLarge,
            format!(
                "payload of {payload_len} bytes exceeds the limit of {} bytes",
                limits.max_payload_bytes
            ),
        ));
    }
    Ok(())
}

/// Nesting depth of arrays and objects: 0 for a scalar, 1 for `[]` or `[1]`, 2 for `[[1]]`.
/// Iterative, so a value built in code with absurd nesting cannot overflow the stack.
fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1usize)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(depth);
                pending.extend(items.iter().map(|item| (item, depth + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(depth);
                pending.extend(map.values().map(|item| (item, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Payload rules that serde's derive cannot express.
fn check_body(body: &RequestBody) -> Result<(), DecodeError> {
    if let RequestBody::Subscribe(subscribe) = body {
        let filtered = subscribe.run_id.is_some() || subscribe.session_id.is_some();
        if filtered == (subscribe.all == Some(true)) {
            return Err(DecodeError::malformed(
                "invalid payload for `subscribe`: needs `run_id` or `session_id`, or `all: true` alone",
            ));
        }
    }
    if let RequestBody::WorkerWaitUntil(wait) = body {
        if wait.for_ms.is_some() == wait.until_ms.is_some() {
            return Err(DecodeError::malformed(
                "invalid payload for `worker.wait_until`: needs exactly one of `for_ms` and `until_ms`",
            ));
        }
    }
    Ok(())
}

impl EnvelopeFields {
    /// Type-checks the optional envelope fields, taking them out of `raw`.
    fn take_from(raw: &mut RawEnvelope) -> Result<EnvelopeFields, DecodeError> {
        Ok(EnvelopeFields {
            run_id: optional_string("run_id", raw.run_id.take())?,
            node_id: optional_string("node_id", raw.node_id.take())?,
            attempt_id: optional_string("attempt_id", raw.attempt_id.take())?,
            generation: optional_u64("generation", raw.generation.take())?,
            expected_revision: optional_u64("expected_revision", raw.expected_revision.take())?,
            idempotency_key: optional_string("idempotency_key", raw.idempotency_key.take())?,
        })
    }
}

/// When the envelope did not parse as a whole (for example because of a repeated key), try a
/// lenient parse just to find the request id for the rejection.
fn salvage_request_id(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    match value.get("request_id")? {
        Value::String(id) if id_is_valid(id) => Some(id.clone()),
        _ => None,
    }
}

fn id_is_valid(id: &str) -> bool {
    !id.is_empty() && id.chars().count() <= MAX_ID_CHARS
}

fn check_id(field: &str, id: &str) -> Result<(), DecodeError> {
    if id_is_valid(id) {
        Ok(())
    } else {
        Err(DecodeError::malformed(format!(
            "field `{field}` must be 1 to {MAX_ID_CHARS} characters"
        )))
    }
}

fn missing(field: &str) -> DecodeError {
    DecodeError::malformed(format!("missing field `{field}`"))
}

fn type_error(field: &str, expected: &str) -> DecodeError {
    DecodeError::malformed(format!("field `{field}` must be {expected}"))
}

fn optional_string(field: &str, value: Option<StrictValue>) -> Result<Option<String>, DecodeError> {
    match value.map(|v| v.0) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(type_error(field, "a string")),
    }
}

fn optional_u64(field: &str, value: Option<StrictValue>) -> Result<Option<u64>, DecodeError> {
    match value.map(|v| v.0) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| type_error(field, "an unsigned 64-bit integer")),
        Some(_) => Err(type_error(field, "an unsigned 64-bit integer")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_start_without_input_or_with_null_gets_an_empty_object() {
        for text in [
            r#"{"workflow_file":"/w.mjs"}"#,
            r#"{"workflow_file":"/w.mjs","input":null}"#,
        ] {
            let start: super::super::payload::RunStart = serde_json::from_str(text).unwrap();
            assert_eq!(start.input, serde_json::json!({}), "{text}");
        }
        let given: super::super::payload::RunStart =
            serde_json::from_str(r#"{"workflow_file":"/w.mjs","input":[1]}"#).unwrap();
        assert_eq!(given.input, serde_json::json!([1]));
    }
}
