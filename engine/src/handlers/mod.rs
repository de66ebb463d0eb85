//! One handler per request kind (grouped by family): each takes its request's payload and
//! does what the kind does. The tables that pick the handler are in [`super::dispatch`]; the
//! request's class (read, durable command, worker, connection) is declared once, in
//! `protocol::kind`.

pub mod controller;
pub mod decision;
pub mod effect;
pub mod host;
pub mod interaction;
pub mod message;
pub mod run;
pub mod value;

use crate::state::HostState;
use crate::store::{Fence, StoreError, Transaction};

fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, StoreError> {
    value
        .as_deref()
        .ok_or_else(|| StoreError::InvalidInput(format!("{name} is required")))
}

/// The fence a client command uses: this host's claim when it holds one, otherwise none.
/// The fence for a client command on `run_id`: the claim this host holds, while the store
/// still agrees. A child's message earlier in the same batch may have released it (the run
/// parked or waits), and the host's cache of held claims is updated only after the commit.
fn fence_for<'a>(
    w: &dyn Transaction,
    state: &'a HostState,
    run_id: &str,
) -> Result<Fence<'a>, StoreError> {
    match state.claims.get(run_id) {
        Some(claim) if w.holds(claim)? => Ok(Fence::Claim(claim)),
        _ => Ok(Fence::Unclaimed),
    }
}
