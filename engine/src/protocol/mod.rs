//! The local wire protocol between the host and its clients and workers.
//!
//! This module is sans-I/O: it turns bytes into typed frames and typed frames into bytes, and
//! it owns the limits and the stable rejection codes. It never touches a socket, a clock or the
//! state store, so the host, the client libraries, the C ABI and the tests all share one
//! definition of what is on the wire. The only I/O it offers is the pair of blocking helpers
//! [`read_frame`] and [`write_frame`] over any [`std::io::Read`] / [`std::io::Write`].
//!
//! The layers, bottom up:
//!
//! - [`frame`]: a frame is a 4-byte big-endian length followed by that many bytes of UTF-8
//!   JSON. [`FrameDecoder`] splits an incoming byte stream into frame bodies under [`Limits`].
//! - [`Request::decode`]: a frame body from a client or worker becomes a typed [`Request`]
//!   (the envelope fields plus a [`RequestBody`] with one variant per [`RequestKind`]), or a
//!   [`DecodeError`] carrying the [`RejectionCode`] to send back.
//! - [`ServerFrame`]: everything the host sends: a [`Response`] (a [`Receipt`] or a
//!   [`Rejection`]), an [`Event`] for a subscription, or a [`Goodbye`] before it closes the
//!   connection.
//!
//! `docs/WORKFLOW_SERVER.md` is the contract for clients in other languages; it describes the
//! same format in prose.

#![warn(missing_docs)]

pub mod canonical;
pub mod controllers;
pub mod frame;
pub mod kind;
pub mod launch;
pub mod payload;
pub mod rejection;
pub mod reply;
pub mod request;
pub mod server;
pub mod value;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use canonical::{canonical_json, canonical_json_len, integer_out_of_range, json_len};
pub use frame::{
    encode_frame, read_frame, write_frame, FrameDecoder, FrameError, Limits,
    DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_PAYLOAD_BYTES,
    LENGTH_PREFIX_BYTES,
};
pub use kind::{RequestBody, RequestClass, RequestKind, RequiredFields};
pub use payload::{
    AttemptOutcome, DecisionAnswer, DecisionKind, EarlierStep, EffectResolve, EffectResult,
    ExecutionMode, InteractionFail, InteractionKind, InteractionList, InteractionSubmit,
    InteractionUpdate, InteractionValuePut, MessageAck, MessageClaim, RetryContract, RunCancel,
    RunList, RunRetry, RunStart, RunStatusQuery, Subscribe, Unsubscribe, ValueGet, WorkerComplete,
    WorkerEffectApplying, WorkerEffectReserve, WorkerEffectSettle, WorkerExit, WorkerFail,
    WorkerHello, WorkerInteractionRequest, WorkerNodeStarted, WorkerNotify, WorkerProgress,
    WorkerResults, WorkerTransition, WorkerValidationResult, WorkerValuePut, WorkerWait,
    WorkerWaitUntil,
};
pub use rejection::RejectionCode;
pub use request::{Request, MAX_ID_CHARS, MAX_REQUEST_DEPTH};
pub use server::{
    deserialize_outcome_word, event_data_for_clients, outcome_word, serialize_outcome_word,
    DecodeError, Event, Goodbye, Receipt, Rejection, Response, ServerFrame,
};
pub use value::{ValueRef, MAX_VALUE_BYTES};

/// The protocol version string every frame carries in its `schema` field.
///
/// A frame with any other value is refused with [`RejectionCode::UnsupportedProtocol`]. There is
/// exactly one version; a change to the wire format changes this string.
pub const PROTOCOL_SCHEMA: &str = "piw.protocol.v1";

/// The `schema` field of a server frame: always [`PROTOCOL_SCHEMA`].
///
/// A zero-sized marker rather than a `String`, so a server frame cannot be built with another
/// version by mistake. It serializes as [`PROTOCOL_SCHEMA`] and refuses to deserialize from any
/// other string.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ProtocolSchema;

impl Serialize for ProtocolSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(PROTOCOL_SCHEMA)
    }
}

impl<'de> Deserialize<'de> for ProtocolSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Owned rather than borrowed: inside an internally tagged enum serde may hand us a
        // buffered string that cannot be borrowed from the input.
        let schema = String::deserialize(deserializer)?;
        if schema == PROTOCOL_SCHEMA {
            Ok(ProtocolSchema)
        } else {
            Err(serde::de::Error::custom(format_args!(
                "unsupported protocol schema `{}`, expected `{PROTOCOL_SCHEMA}`",
                request::bounded_message(&schema, 128)
            )))
        }
    }
}
