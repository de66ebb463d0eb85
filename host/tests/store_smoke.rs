mod common;
use common::*;
use piw_host::store::*;
use serde_json::json;

#[test]
fn a_run_goes_from_start_to_completion_and_stays_consistent() {
    let mut f = Fixture::new();
    let (run_id, act, a1) = f.running();
    let t = f
        .store
        .write(|w| w.transition(&act.claim, &step(&a1, "b")))
        .unwrap();
    f.store
        .write(|w| {
            w.complete(
                &act.claim,
                &t.next_attempt_id,
                &json!(1),
                &json!({"done": true}),
            )
        })
        .unwrap();
    let run = f.store.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.result, Some(json!({"done": true})));
    let events: Vec<_> = f
        .store
        .events(&run_id, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        events,
        [
            "started",
            "activated",
            "node_started",
            "transitioned",
            "completed"
        ]
    );
    assert_eq!(
        f.store.messages(&run_id).unwrap().len(),
        1,
        "terminal message for the origin session"
    );
    f.assert_clean();
}
