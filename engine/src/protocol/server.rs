//! Frames the host sends: responses, subscription events and goodbyes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::canonical::StrictValue;
use super::rejection::bounded_message;
use super::{ProtocolSchema, RejectionCode, PROTOCOL_SCHEMA};
pub use crate::store::model::{deserialize_outcome_word, outcome_word, serialize_outcome_word};

/// Anything the host writes to a connection, tagged by `"type"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The answer to one request (`"type":"response"`).
    Response(Response),
    /// An update for a subscription (`"type":"event"`).
    Event(Event),
    /// The host is about to close this connection (`"type":"goodbye"`).
    Goodbye(Goodbye),
}

impl ServerFrame {
    /// A successful response.
    pub fn receipt(request_id: impl Into<String>, receipt: Receipt) -> Self {
        ServerFrame::Response(Response::receipt(request_id, receipt))
    }

    /// A rejected response.
    pub fn rejection(request_id: impl Into<String>, rejection: Rejection) -> Self {
        ServerFrame::Response(Response::rejection(request_id, rejection))
    }

    /// A goodbye.
    pub fn goodbye(code: RejectionCode, message: impl Into<String>) -> Self {
        ServerFrame::Goodbye(Goodbye::new(code, message))
    }

    /// Decodes a frame body received from the host (the client side of
    /// [`Request::decode`](super::Request::decode)).
    ///
    /// A wrong `schema` is `unsupported_protocol`; anything else that does not parse is
    /// `malformed`. Unknown fields are ignored.
    pub fn decode(body: &[u8]) -> Result<ServerFrame, DecodeError> {
        let text = std::str::from_utf8(body)
            .map_err(|err| DecodeError::malformed(format!("frame is not valid UTF-8: {err}")))?;
        let StrictValue(value) = serde_json::from_str(text).map_err(|err| {
            if err.is_syntax() || err.is_eof() {
                DecodeError::malformed(format!("frame is not valid JSON: {err}"))
            } else {
                DecodeError::malformed(err.to_string())
            }
        })?;
        // Check the version first so a newer host gets a precise answer rather than a
        // confusing complaint about some field this version does not know.
        match value.get("schema") {
            Some(Value::String(schema)) if schema == PROTOCOL_SCHEMA => {}
            Some(Value::String(schema)) => {
                return Err(DecodeError::new(
                    RejectionCode::UnsupportedProtocol,
                    format!(
                        "unsupported protocol schema `{}`, this client speaks `{PROTOCOL_SCHEMA}`",
                        bounded_message(schema, 128)
                    ),
                ));
            }
            Some(_) => return Err(DecodeError::malformed("field `schema` must be a string")),
            None => return Err(DecodeError::malformed("missing field `schema`")),
        }
        serde_json::from_value(value).map_err(|err| DecodeError::malformed(err.to_string()))
    }
}

impl From<Response> for ServerFrame {
    fn from(response: Response) -> Self {
        ServerFrame::Response(response)
    }
}

impl From<Event> for ServerFrame {
    fn from(event: Event) -> Self {
        ServerFrame::Event(event)
    }
}

impl From<Goodbye> for ServerFrame {
    fn from(goodbye: Goodbye) -> Self {
        ServerFrame::Goodbye(goodbye)
    }
}

/// The answer to one request.
///
/// Wire form: `{"schema", "request_id", "ok": true, "receipt": {…}}` or
/// `{"schema", "request_id", "ok": false, "rejection": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "WireResponse", try_from = "WireResponse")]
pub struct Response {
    /// Always [`PROTOCOL_SCHEMA`].
    pub schema: ProtocolSchema,
    /// The `request_id` of the request answered.
    pub request_id: String,
    /// The receipt (a replayed one for a request id seen before), or why the request was
    /// refused ([`RejectionCode`] says what a refusal means for the command).
    pub result: Result<Receipt, Rejection>,
}

impl Response {
    /// A successful response.
    pub fn receipt(request_id: impl Into<String>, receipt: Receipt) -> Self {
        Response {
            schema: ProtocolSchema,
            request_id: request_id.into(),
            result: Ok(receipt),
        }
    }

    /// A rejected response.
    pub fn rejection(request_id: impl Into<String>, rejection: Rejection) -> Self {
        Response {
            schema: ProtocolSchema,
            request_id: request_id.into(),
            result: Err(rejection),
        }
    }

    /// Whether the request succeeded (the wire's `ok`).
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

/// The response as it is on the wire, with `ok` and exactly one of `receipt` / `rejection`.
#[derive(Serialize, Deserialize)]
struct WireResponse {
    schema: ProtocolSchema,
    request_id: String,
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    receipt: Option<Receipt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rejection: Option<Rejection>,
}

impl From<Response> for WireResponse {
    fn from(response: Response) -> Self {
        let (ok, receipt, rejection) = match response.result {
            Ok(receipt) => (true, Some(receipt), None),
            Err(rejection) => (false, None, Some(rejection)),
        };
        WireResponse {
            schema: response.schema,
            request_id: response.request_id,
            ok,
            receipt,
            rejection,
        }
    }
}

impl TryFrom<WireResponse> for Response {
    type Error = &'static str;

    fn try_from(wire: WireResponse) -> Result<Self, Self::Error> {
        let result = match (wire.ok, wire.receipt, wire.rejection) {
            (true, Some(receipt), _) => Ok(receipt),
            (false, _, Some(rejection)) => Err(rejection),
            (true, None, _) => return Err("a response with `ok: true` needs a `receipt`"),
            (false, _, None) => return Err("a response with `ok: false` needs a `rejection`"),
        };
        Ok(Response {
            schema: wire.schema,
            request_id: wire.request_id,
            result,
        })
    }
}

/// What a committed request produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The run's revision after the commit, for requests about a run.
    #[serde(default)]
    pub revision: Option<u64>,
    /// `true` when this is the stored receipt of an earlier identical request, returned again
    /// instead of applying the request twice.
    #[serde(default)]
    pub replayed: bool,
    /// Kind-specific result (`null` when there is none).
    #[serde(default)]
    pub body: Value,
}

impl Receipt {
    /// The body as its kind's typed reply (`reply.rs`): what a client reads instead of looking
    /// fields up by name.
    pub fn reply<T: super::reply::Reply>(&self) -> serde_json::Result<T> {
        T::deserialize(&self.body)
    }

    /// A fresh (not replayed) receipt.
    pub fn new(revision: Option<u64>, body: Value) -> Self {
        Receipt {
            revision,
            replayed: false,
            body,
        }
    }

    /// The same receipt marked as replayed, as returned for a repeated request.
    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }
}

/// Why a request was refused. Nothing was committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// The stable reason.
    pub code: RejectionCode,
    /// What went wrong, for people.
    pub message: String,
    /// Structured detail (for example the current revision on `stale_revision`); `null` when
    /// there is none.
    #[serde(default)]
    pub details: Value,
}

impl Rejection {
    /// A rejection without details.
    pub fn new(code: RejectionCode, message: impl Into<String>) -> Self {
        Rejection {
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    /// The same rejection with `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

/// One event delivered to a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Always [`PROTOCOL_SCHEMA`].
    pub schema: ProtocolSchema,
    /// The subscription this event is delivered for.
    pub subscription_id: String,
    /// The run the event belongs to.
    pub run_id: String,
    /// The event's sequence number within its run: increasing, never reused.
    pub seq: u64,
    /// What happened, e.g. `started`, `transitioned` (the store operation's name).
    pub event_kind: String,
    /// The run's status after the commit that produced the event (the same for every event
    /// of one commit).
    pub status: String,
    /// The run's revision after that commit: at least `seq`.
    pub revision: u64,
    /// When the event was committed, in Unix milliseconds.
    pub at_ms: u64,
    /// Event-specific detail (`null` when there is none).
    #[serde(default)]
    pub data: Value,
}

/// Sent just before the host closes a connection, saying why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goodbye {
    /// Always [`PROTOCOL_SCHEMA`].
    pub schema: ProtocolSchema,
    /// Why the connection is closed, e.g. `malformed` or `host_shutting_down`.
    pub code: RejectionCode,
    /// Detail for people.
    pub message: String,
}

impl Goodbye {
    /// A goodbye with `code` and `message`.
    pub fn new(code: RejectionCode, message: impl Into<String>) -> Self {
        Goodbye {
            schema: ProtocolSchema,
            code,
            message: message.into(),
        }
    }
}

/// An event's `data` as clients see it: the `outcome` of `transitioned` in the words of
/// [`outcome_word`]; everything else as stored.
pub fn event_data_for_clients(kind: &str, mut data: Value) -> Value {
    if kind == "transitioned" {
        if let Some(outcome) = data.get_mut("outcome") {
            if let Some(word) = outcome.as_str().map(|w| outcome_word(w).to_owned()) {
                *outcome = Value::String(word);
            }
        }
    }
    data
}

/// Longest message a [`DecodeError`] carries, in bytes. Error text can quote the peer's input;
/// the bound keeps a hostile frame from being echoed back or logged at full size.
const MAX_ERROR_MESSAGE_BYTES: usize = 512;

/// Why a frame body is not a valid request (or server frame).
///
/// Carries the [`RejectionCode`] to report and, when the body got far enough to have a usable
/// `request_id`, that id. Every decode error ends the connection: the host sends
/// [`rejection_frame`](DecodeError::rejection_frame) when there is one, then
/// [`goodbye_frame`](DecodeError::goodbye_frame), then closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct DecodeError {
    /// `malformed`, `unsupported_protocol` or `payload_too_large`.
    pub code: RejectionCode,
    /// What was wrong, for people; at most 512 bytes.
    pub message: String,
    /// The request's id, when it could be read.
    pub request_id: Option<String>,
}

impl DecodeError {
    /// An error with no request id.
    pub fn new(code: RejectionCode, message: impl Into<String>) -> Self {
        DecodeError {
            code,
            message: bounded_message(&message.into(), MAX_ERROR_MESSAGE_BYTES),
            request_id: None,
        }
    }

    /// A `malformed` error with no request id.
    pub fn malformed(message: impl Into<String>) -> Self {
        DecodeError::new(RejectionCode::Malformed, message)
    }

    /// The same error, with `request_id` set (unless `request_id` is `None`).
    pub fn with_request_id(mut self, request_id: Option<String>) -> Self {
        if request_id.is_some() {
            self.request_id = request_id;
        }
        self
    }

    /// The typed rejection to send for the request, if its id is known.
    pub fn rejection_frame(&self) -> Option<ServerFrame> {
        self.request_id.as_ref().map(|request_id| {
            ServerFrame::rejection(
                request_id.clone(),
                Rejection::new(self.code, self.message.clone()),
            )
        })
    }

    /// The goodbye to send before closing the connection.
    pub fn goodbye_frame(&self) -> ServerFrame {
        ServerFrame::Goodbye(Goodbye::new(self.code, self.message.clone()))
    }
}

#[cfg(test)]
mod outcome_words {
    use serde_json::json;

    use super::{event_data_for_clients, outcome_word};

    #[test]
    fn clients_see_ok_where_the_store_says_succeeded() {
        assert_eq!(outcome_word("succeeded"), "ok");
        for word in [
            "failed",
            "timed_out",
            "running",
            "waiting",
            "interrupted",
            "cancelled",
        ] {
            assert_eq!(outcome_word(word), word);
        }
        let stored = json!({"from": "a", "outcome": "succeeded", "to": "b", "attempt": "att-1"});
        assert_eq!(
            event_data_for_clients("transitioned", stored.clone())["outcome"],
            json!("ok")
        );
        assert_eq!(event_data_for_clients("other", stored.clone()), stored);
    }
}
