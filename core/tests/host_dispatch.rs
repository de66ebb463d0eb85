//! The host's command dispatch against a real store, for interleavings that a live host only
//! produces under load (several commands in one group-commit batch).

mod common;

use common::Fixture;
use piw_core::host::dispatch::{apply_command, HostState};
use piw_core::protocol::{payload, Request, RequestBody};
use piw_core::store::{DecisionKind, RunStatus};
use serde_json::json;

#[test]
fn a_cancel_in_the_batch_that_released_the_held_claim_still_cancels() {
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let mut state = HostState::default();
    state.claims.insert(run_id.clone(), act.claim.clone());
    let cancel = Request::new(
        "cancel-1",
        RequestBody::RunCancel(payload::RunCancel {
            reason: Some("by test".into()),
        }),
    )
    .with_run_id(&run_id);
    let body = f
        .store
        .write(|w| {
            // The child's wait, earlier in the same batch, releases the claim ...
            w.wait_for_decision(&act.claim, &attempt, DecisionKind::Checkpoint, &json!({}))?;
            // ... while the host's cache of held claims is only updated after the commit.
            apply_command(w, &mut state, &cancel, None)
        })
        .expect("the cancel commits");
    assert_eq!(body["status"], json!("cancelled"));
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Cancelled);
    f.assert_clean();
}
