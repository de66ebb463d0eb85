//! Stable rejection codes, and how long a rejection's message may be ([`bounded_message`]).
//!
//! A rejection code is part of the wire contract: clients in other languages match on the
//! string, so a code's spelling never changes within [`PROTOCOL_SCHEMA`](super::PROTOCOL_SCHEMA).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why the host refused a request or closed a connection.
///
/// Serialized as the `snake_case` string returned by [`RejectionCode::as_str`]. Each variant
/// says when it is used and whether retrying can help; [`RejectionCode::retry_may_help`]
/// gives the same answer in code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectionCode {
    /// The frame or its envelope is not well formed: a zero-length frame, invalid UTF-8,
    /// invalid JSON, a repeated object key, an unknown kind, a missing or mistyped field, or a
    /// field outside its bounds. The host closes the connection. Retrying the same bytes
    /// cannot help; the client must be fixed.
    Malformed,
    /// The envelope's `schema` is not the protocol version this host speaks. The host closes
    /// the connection. Retrying cannot help; client and host versions must match.
    UnsupportedProtocol,
    /// A frame, the connection's buffered input, or a request payload exceeds its limit. The
    /// host closes the connection. Retrying the same request cannot help; send less data.
    PayloadTooLarge,
    /// The caller may not do this: the peer belongs to another user, a worker presented a
    /// wrong child token or sent a worker message before its hello, or the model-facing path
    /// tried to answer a protected human decision. Retrying cannot help.
    Unauthorized,
    /// The run, node, attempt, decision, interaction, message, effect or subscription named by
    /// the request does not exist. Retrying cannot help unless the id was wrong.
    NotFound,
    /// The request is well formed but the target's lifecycle does not allow it now, for
    /// example resuming a finished run or a transition to a node the graph does not route to.
    /// Retrying the same request cannot help; read the current status first.
    InvalidTransition,
    /// `expected_revision` differs from the run's current revision: someone else changed the
    /// run first. Nothing was changed. Re-read the run and retry with the new revision if the
    /// request still makes sense.
    StaleRevision,
    /// A worker's `generation` is no longer the run's current claim generation: the run was
    /// reclaimed. Nothing was changed. The worker must stop; retrying cannot help.
    StaleGeneration,
    /// The `attempt_id` is not the node's current attempt (for example an answer to an
    /// interactive request that already timed out). Nothing was changed. Retrying the same
    /// request cannot help; list the current requests again.
    StaleAttempt,
    /// The host's claim on the run was lost while the command ran (it expired or was fenced).
    /// Nothing was changed. A client may retry later; a worker must stop.
    ClaimLost,
    /// The `request_id` or `idempotency_key` was already used for a request with a different
    /// fingerprint. Nothing was changed. Retrying with the same key cannot help; use a new key
    /// for a new request.
    IdempotencyConflict,
    /// The effect key is already reserved with a different request fingerprint, or the effect
    /// is in a state that does not allow the operation. Retrying cannot help.
    EffectConflict,
    /// The effect may have been applied but no receipt proves it, so the run stopped for manual
    /// review. Retrying must not happen automatically; a person decides.
    EffectUncertain,
    /// The host is stopping and accepts no new commands. Nothing was changed. Retry once the
    /// host runs again (clients start it on demand).
    HostShuttingDown,
    /// Only as a goodbye: the connection's subscriptions fell so far behind the events the
    /// host publishes that it could no longer tell which ones the reader missed, so it closed
    /// the connection rather than skip events silently. Nothing is wrong with the host or the
    /// runs. Connect again, subscribe again and reread the status of the runs you follow.
    SubscriberLagged,
    /// A detached start that no Pi the host can run could serve: no Pi found, none
    /// of 1.6 or newer, no provider and model named anywhere (the workflow, the input, the
    /// host, Pi's own settings), or a provider without credentials or a model Pi does not
    /// offer. Nothing was started. Retrying helps once Pi is set up (the message says what is
    /// missing); a host reads its Pi settings when it starts.
    PiUnusable,
    /// The host failed for a reason that is not the caller's fault (for example a database
    /// error; as a goodbye, an I/O error on the connection). This attempt committed nothing;
    /// an earlier one with the same `request_id` may have (its reply lost), and a resend then
    /// gets its receipt. Retrying with the same `request_id` is safe and may help. A lagging subscriber is
    /// [`RejectionCode::SubscriberLagged`], never this.
    Internal,
    /// Never sent: what a client decodes a code into that this build does not know (a newer
    /// host may add codes within the same protocol schema). The response's message and details
    /// still arrive; treat it like a failure you cannot correct by changing the request. Not in
    /// [`RejectionCode::ALL`], which lists the codes a host sends.
    #[serde(other)]
    Unknown,
}

impl RejectionCode {
    /// Every code, in declaration order.
    pub const ALL: [RejectionCode; 17] = [
        RejectionCode::Malformed,
        RejectionCode::UnsupportedProtocol,
        RejectionCode::PayloadTooLarge,
        RejectionCode::Unauthorized,
        RejectionCode::NotFound,
        RejectionCode::InvalidTransition,
        RejectionCode::StaleRevision,
        RejectionCode::StaleGeneration,
        RejectionCode::StaleAttempt,
        RejectionCode::ClaimLost,
        RejectionCode::IdempotencyConflict,
        RejectionCode::EffectConflict,
        RejectionCode::EffectUncertain,
        RejectionCode::HostShuttingDown,
        RejectionCode::SubscriberLagged,
        RejectionCode::PiUnusable,
        RejectionCode::Internal,
    ];

    /// The stable wire string, e.g. `"stale_revision"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectionCode::Malformed => "malformed",
            RejectionCode::UnsupportedProtocol => "unsupported_protocol",
            RejectionCode::PayloadTooLarge => "payload_too_large",
            RejectionCode::Unauthorized => "unauthorized",
            RejectionCode::NotFound => "not_found",
            RejectionCode::InvalidTransition => "invalid_transition",
            RejectionCode::StaleRevision => "stale_revision",
            RejectionCode::StaleGeneration => "stale_generation",
            RejectionCode::StaleAttempt => "stale_attempt",
            RejectionCode::ClaimLost => "claim_lost",
            RejectionCode::IdempotencyConflict => "idempotency_conflict",
            RejectionCode::EffectConflict => "effect_conflict",
            RejectionCode::EffectUncertain => "effect_uncertain",
            RejectionCode::HostShuttingDown => "host_shutting_down",
            RejectionCode::SubscriberLagged => "subscriber_lagged",
            RejectionCode::PiUnusable => "pi_unusable",
            RejectionCode::Internal => "internal",
            RejectionCode::Unknown => "unknown",
        }
    }

    /// The code whose wire string is `s`, if any.
    pub fn parse(s: &str) -> Option<RejectionCode> {
        RejectionCode::ALL
            .into_iter()
            .find(|code| code.as_str() == s)
    }

    /// Whether sending a request again (after re-reading state, or after the host restarts)
    /// can succeed. `false` means the request itself, the caller or the run must change.
    pub fn retry_may_help(self) -> bool {
        matches!(
            self,
            RejectionCode::StaleRevision
                | RejectionCode::ClaimLost
                | RejectionCode::HostShuttingDown
                | RejectionCode::SubscriberLagged
                | RejectionCode::Internal
        )
    }
}

impl fmt::Display for RejectionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `text` cut to at most `max_bytes` at a character boundary, with `…` when cut.
pub fn bounded_message(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let ellipsis = '…';
    let mut end = max_bytes.saturating_sub(ellipsis.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut bounded = text.get(..end).unwrap_or_default().to_owned();
    bounded.push(ellipsis);
    bounded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_match_serde() {
        for code in RejectionCode::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()));
            assert_eq!(RejectionCode::parse(code.as_str()), Some(code));
            assert_eq!(code.to_string(), code.as_str());
        }
        assert_eq!(RejectionCode::parse("nope"), None);
    }

    /// A code from a newer host decodes (as `Unknown`) instead of failing the whole frame, so
    /// an older client still gets the response's message; no host code spells `unknown`.
    #[test]
    fn a_code_this_build_does_not_know_decodes_as_unknown() {
        let code: RejectionCode =
            serde_json::from_value(serde_json::json!("some_future_code")).unwrap();
        assert_eq!(code, RejectionCode::Unknown);
        assert!(!code.retry_may_help());
        assert_eq!(RejectionCode::parse("unknown"), None);
        assert!(RejectionCode::ALL.iter().all(|c| c.as_str() != "unknown"));
    }

    /// The lag goodbye has a code of its own, so a client can tell it from a failure of the
    /// host (`internal`) and resubscribe on it alone.
    #[test]
    fn a_lagging_subscriber_has_its_own_code() {
        let code = RejectionCode::SubscriberLagged;
        assert_eq!(code.as_str(), "subscriber_lagged");
        assert_eq!(
            serde_json::from_value::<RejectionCode>(serde_json::json!("subscriber_lagged"))
                .unwrap(),
            code
        );
        assert_eq!(RejectionCode::parse("subscriber_lagged"), Some(code));
        assert_ne!(code, RejectionCode::Internal);
        assert!(code.retry_may_help(), "subscribing again is the remedy");
    }

    #[test]
    fn bounded_message_cuts_at_char_boundary() {
        assert_eq!(bounded_message("short", 10), "short");
        let cut = bounded_message(&"é".repeat(100), 11);
        assert!(cut.len() <= 11, "{cut}");
        assert!(cut.ends_with('…'));
    }
}
