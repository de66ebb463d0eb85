//! The graph snapshot rules, shared with the host: `defineWorkflow` validates with them and the
//! worker runtime routes with them.

use napi::Result;
use napi_derive::napi;
use piw_client::graph::{Graph, Outcome, Route};
use serde_json::{json, Value};

use crate::js_error;

/// Validates a data-only graph snapshot and returns `{ snapshot, digest }`: the snapshot in the
/// host's normal form and its canonical SHA-256 digest. Throws `invalid_graph` with the reason.
#[napi(js_name = "compileGraph")]
pub fn compile_graph(definition: Value) -> Result<Value> {
    let graph = parse(&definition)?;
    Ok(json!({ "snapshot": graph.to_value(), "digest": graph.digest() }))
}

/// Where a node's outcome leads: `{ next: id }`, `{ complete: true }` or
/// `{ fail: error, timedOut }`. `outcome` is `{status: "succeeded", output}`,
/// `{status: "failed", error}` or `{status: "timed_out"}`.
#[napi(js_name = "routeGraph")]
pub fn route_graph(definition: Value, from: String, outcome: Value) -> Result<Value> {
    route(&parse(&definition)?, &from, &outcome)
}

pub(crate) fn parse(definition: &Value) -> Result<Graph> {
    Graph::parse(definition).map_err(|e| js_error("invalid_graph", e.to_string()))
}

pub(crate) fn route(graph: &Graph, from: &str, outcome: &Value) -> Result<Value> {
    let status = outcome.get("status").and_then(Value::as_str);
    let null = Value::Null;
    let parsed = match status {
        Some("succeeded") => Outcome::Succeeded(outcome.get("output").unwrap_or(&null)),
        Some("failed") => Outcome::Failed(
            outcome
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("failed"),
        ),
        Some("timed_out") => Outcome::TimedOut,
        _ => {
            return Err(js_error(
                "malformed",
                format!("an outcome needs status succeeded, failed or timed_out, got {outcome}"),
            ))
        }
    };
    match graph
        .route(from, &parsed)
        .map_err(|e| js_error("invalid_graph", e.to_string()))?
    {
        Route::Next(next) => Ok(json!({ "next": next })),
        Route::Complete => Ok(json!({ "complete": true })),
        Route::Fail { error, timed_out } => Ok(json!({ "fail": error, "timedOut": timed_out })),
    }
}
