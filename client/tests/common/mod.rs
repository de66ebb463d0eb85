//! Shared pieces of the client's integration tests (fake hosts).

use serde_json::json;

/// A run event of run `run-1` for `subscription`, as a host sends it (fake hosts of the client
/// tests).
pub fn event_frame(subscription: &str, seq: u64) -> piw_client::protocol::ServerFrame {
    piw_client::protocol::ServerFrame::Event(piw_client::protocol::Event {
        schema: piw_client::protocol::ProtocolSchema,
        subscription_id: subscription.into(),
        run_id: "run-1".into(),
        seq,
        event_kind: "transitioned".into(),
        status: "running".into(),
        revision: seq,
        at_ms: 0,
        data: json!(null),
    })
}
