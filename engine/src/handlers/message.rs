//! The `message.*` requests: claim and acknowledge workflow messages of a Pi session.

use crate::fit::reply_room;
use crate::protocol::reply::{MessageAcked, MessagesClaimed};
use crate::protocol::{payload, Request};
use crate::state::HostState;
use crate::store::{StoreError, Transaction};

/// How long a claimed workflow message stays with one client before another may take it.
pub const MESSAGE_CLAIM_LEASE_MS: i64 = 60_000;

/// `message.claim`: claim undelivered workflow messages of a Pi session.
pub(crate) fn claim(
    w: &mut dyn Transaction,
    state: &HostState,
    req: &Request,
    m: &payload::MessageClaim,
) -> Result<MessagesClaimed, StoreError> {
    let owner = match &m.claimant {
        Some(claimant) => format!("claimant-{claimant}"),
        None => format!("request-{}", req.request_id),
    };
    // Claimed in this transaction only what the reply carries.
    let claimed = w.claim_messages(
        &m.session_id,
        &owner,
        m.after.as_deref(),
        m.limit.unwrap_or(16).min(256),
        MESSAGE_CLAIM_LEASE_MS,
        reply_room(state.reply_limit),
    )?;
    Ok(MessagesClaimed {
        messages: claimed.messages,
        more: claimed.more,
    })
}

/// `message.ack`: acknowledge delivery of a claimed workflow message.
pub(crate) fn ack(
    w: &mut dyn Transaction,
    m: &payload::MessageAck,
) -> Result<MessageAcked, StoreError> {
    let at = w.ack_message(&m.message_id)?;
    Ok(MessageAcked {
        message_id: m.message_id.clone(),
        delivered_at: at,
    })
}
