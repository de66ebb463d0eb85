//! Requests about the host and its store as a whole: `host.status`, `diagnose`, `subscribe`.

use serde_json::{json, Value};

use crate::protocol::{payload, Receipt};
use crate::store::{Store, StoreError};

/// `subscribe`: receive events of a run or a session on this connection.
pub(crate) fn subscribe(store: &Store, s: &payload::Subscribe) -> Result<Receipt, StoreError> {
    // The connection asks only whether the run exists; it makes the subscription itself.
    if let Some(run_id) = &s.run_id {
        store.run_state(run_id)?;
    }
    Ok(Receipt::new(None, Value::Null))
}

/// `host.status`: host health and identity.
pub(crate) fn status(store: &Store) -> Result<Receipt, StoreError> {
    let runs: serde_json::Map<String, Value> = store
        .count_by_status()?
        .into_iter()
        .map(|(status, n)| (status.as_str().to_owned(), json!(n)))
        .collect();
    Ok(Receipt::new(None, json!({ "runs": runs })))
}

/// `diagnose`: what the store's consistency checks find.
pub(crate) fn diagnose(store: &Store) -> Result<Receipt, StoreError> {
    Ok(Receipt::new(None, json!({ "findings": store.diagnose()? })))
}
