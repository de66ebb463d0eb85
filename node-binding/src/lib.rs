//! `piw-node`: the native half of the `piw` npm package.
//!
//! It exposes three things to JavaScript, each a thin face over `piw-client`:
//! - [`client::Client`]: the async client (every call returns a Promise, runs on napi's tokio
//!   runtime and never blocks Node's event loop), with subscriptions;
//! - [`worker::Worker`]: the worker library the Node worker runtime drives inside a run's child
//!   (synchronous: a child serves one run and has nothing else to do while it waits);
//! - [`graph`]: validation, digest and routing of the data-only graph snapshot, so JavaScript
//!   never re-implements the rules the host enforces.
//!
//! Errors reach JavaScript as `Error`s whose `code` is the protocol's rejection code (or a
//! client-side code such as `client_closed`). No panic crosses the boundary: the code below
//! returns errors instead of unwrapping.

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod bridge;
pub mod client;
pub mod graph;
pub mod worker;

/// A JavaScript error carrying a stable code.
///
/// napi-rs fixes an error's `code` to a Node-API status for async functions, so the piw code
/// travels at the front of the message, as `[code] message`; the package's JavaScript layer
/// (`lib/errors.js`) turns it into a `PiwError` whose `code` is that code. The prefix also keeps
/// the code visible to anyone who uses the raw binding.
pub(crate) fn js_error(code: &str, message: impl AsRef<str>) -> napi::Error {
    napi::Error::from_reason(format!("[{code}] {}", message.as_ref()))
}

/// Separates a rejection's `details` (JSON) from its message in the error text; the package's
/// JavaScript layer takes them off into `PiwError.details`. A control character no message
/// of ours contains.
const DETAILS_SEPARATOR: char = '\u{1e}';

/// [`js_error`] for a host's rejection: its `details` (say `{expected, current}` of a
/// `stale_revision`) travel too, so a client can act on them without parsing the message.
fn js_rejection(r: &piw_client::protocol::Rejection) -> napi::Error {
    if r.details.is_null() {
        return js_error(r.code.as_str(), &r.message);
    }
    js_error(
        r.code.as_str(),
        format!("{}{DETAILS_SEPARATOR}{}", r.message, r.details),
    )
}

pub(crate) fn client_error(e: piw_client::client::ClientError) -> napi::Error {
    use piw_client::client::ClientError;
    // The code travels separately, so the message does not repeat it.
    let message = match &e {
        ClientError::Rejected(r) => return js_rejection(r),
        ClientError::Closed { message, .. } => message.clone(),
        other => other.to_string(),
    };
    js_error(e.code_str(), message)
}

/// The run statuses that are final (`RunStatus::is_terminal`): the one list every client
/// reads, so none keeps a copy that misses one.
#[napi_derive::napi(js_name = "finalRunStatuses")]
pub fn final_run_statuses() -> Vec<String> {
    piw_client::engine::store::RunStatus::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| s.as_str().to_owned())
        .collect()
}
