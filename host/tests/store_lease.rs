//! Plan "Lease regression": with a fake clock and no renewal timer, every valid write renews the
//! lease atomically; an expired claim cannot renew itself; a new generation fences the old token;
//! claim loss adds no failed event. Also: the token never reaches the database, logs or errors.
mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use piw_host::store::*;

#[test]
fn back_to_back_transitions_for_several_lease_intervals_never_lapse() {
    let mut f = Fixture::new();
    let (run_id, act, mut attempt) = f.running();
    // 40 transitions, 2.5 s apart: 100 s of work, more than three 30 s leases, and no timer.
    for i in 0..40 {
        f.clock.advance(2_500);
        let t = f
            .store
            .write(|w| w.transition(&act.claim, &step(&attempt, &format!("n{i}"))))
            .expect("a valid write renews and never lapses");
        attempt = t.next_attempt_id;
        let info = f.store.claim_info(&run_id).unwrap();
        assert_eq!(
            info.expires_at,
            Some(f.store.now_ms() + LEASE_MS),
            "renewed in the same write"
        );
        assert_eq!(info.heartbeat_at, Some(f.store.now_ms()));
        assert_eq!(info.generation, act.claim.generation);
    }
    assert!(f.store.now_ms() - T0 > 3 * LEASE_MS);
    f.assert_clean();
}

#[test]
fn an_expired_claim_cannot_renew_itself_and_loss_writes_nothing() {
    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let expiry = f.store.claim_info(&run_id).unwrap().expires_at.unwrap();
    f.clock.set(expiry); // expires_at == now is already expired
    let before = f.store.canonical_dump().unwrap();
    for result in [
        f.store.write(|w| w.heartbeat(&act.claim)).map(|_| ()),
        f.store
            .write(|w| w.transition(&act.claim, &step(&attempt, "b")))
            .map(|_| ()),
        f.store
            .write(|w| {
                w.fail(
                    &act.claim,
                    Some(&attempt),
                    &AttemptOutcome::Failed { error: "x".into() },
                    "x",
                )
            })
            .map(|_| ()),
    ] {
        match result {
            Err(StoreError::ClaimLost { reason, .. }) => {
                assert_eq!(reason, ClaimLostReason::Expired)
            }
            other => panic!("expected ClaimLost(expired), got {other:?}"),
        }
    }
    assert_eq!(
        f.store.canonical_dump().unwrap(),
        before,
        "a claim loss changes nothing"
    );
    let kinds: Vec<_> = f
        .store
        .events(&run_id, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(
        !kinds.iter().any(|k| k == "failed"),
        "no failed event: {kinds:?}"
    );
    assert_eq!(f.store.run(&run_id).unwrap().status, RunStatus::Running);
}

#[test]
fn a_new_generation_fences_the_old_token() {
    let mut f = Fixture::new();
    let (run_id, old, attempt) = f.running();
    f.clock.advance(LEASE_MS + 1);
    let recovered = f.store.write(|w| w.recover_expired()).unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].status, RunStatus::Queued);
    // Released: the old holder learns the claim is missing.
    let err = f.store.write(|w| w.heartbeat(&old.claim)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::ClaimLost {
                reason: ClaimLostReason::Missing,
                ..
            }
        ),
        "{err:?}"
    );
    let new = f.activate(&run_id);
    assert!(new.claim.generation > old.claim.generation);
    let events_before = f.store.events(&run_id, 0).unwrap().len();
    let err = f
        .store
        .write(|w| w.transition(&old.claim, &step(&attempt, "b")))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::ClaimLost {
                reason: ClaimLostReason::GenerationMismatch,
                ..
            }
        ),
        "{err:?}"
    );
    // Same generation, wrong token or owner.
    let forged = Claim {
        token: piw_host::ids::ClaimToken::generate(&mut piw_host::ids::OsIds),
        ..new.claim.clone()
    };
    let err = f.store.write(|w| w.heartbeat(&forged)).unwrap_err();
    assert!(matches!(
        err,
        StoreError::ClaimLost {
            reason: ClaimLostReason::TokenMismatch,
            ..
        }
    ));
    let other_owner = Claim {
        owner_id: "someone-else".into(),
        ..new.claim.clone()
    };
    let err = f.store.write(|w| w.heartbeat(&other_owner)).unwrap_err();
    assert!(matches!(
        err,
        StoreError::ClaimLost {
            reason: ClaimLostReason::OwnerMismatch,
            ..
        }
    ));
    assert_eq!(
        f.store.events(&run_id, 0).unwrap().len(),
        events_before,
        "losses append no event"
    );
    // The new holder continues.
    f.store
        .write(|w| w.node_started(&new.claim, "a", None))
        .unwrap();
    f.assert_clean();
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_claim_token_never_reaches_the_database_logs_or_errors() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut f = Fixture::new();
    let (run_id, act, attempt) = f.running();
    let secret = act.claim.token.expose_secret().to_owned();
    let hash = act.claim.token.hash();
    let mut texts = vec![format!("{:?}", act.claim), format!("{act:?}")];
    f.clock.advance(LEASE_MS * 2);
    for err in [
        f.store.write(|w| w.heartbeat(&act.claim)).unwrap_err(),
        f.store
            .write(|w| w.transition(&act.claim, &step(&attempt, "b")))
            .unwrap_err(),
    ] {
        texts.push(err.to_string());
        texts.push(format!("{err:?}"));
    }
    texts.push(String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned());
    texts.push(serde_json::to_string(&f.store.claim_info(&run_id).unwrap()).unwrap());
    let dump = f.store.canonical_dump().unwrap();
    assert!(!dump.contains(&secret), "the token is not stored");
    assert!(dump.contains(&hash), "only its hash is stored");
    let raw = std::fs::read(f.store.path()).unwrap();
    let wal = std::fs::read(f.store.path().with_extension("sqlite-wal")).unwrap_or_default();
    for bytes in [raw, wal] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "not in the file bytes"
        );
    }
    assert!(texts.last().is_some());
    assert!(
        texts.iter().any(|t| t.contains("fenced write refused")),
        "the loss was logged: {texts:?}"
    );
    for t in &texts {
        assert!(!t.contains(&secret), "token leaked into: {t}");
        assert!(!t.contains(&hash), "token hash leaked into: {t}");
    }
}

#[test]
fn the_next_node_deadline_is_that_of_an_open_attempt_of_a_run_this_host_holds() {
    let mut f = Fixture::new();
    let run_id = f.start();
    let act = f.activate(&run_id);
    assert_eq!(
        f.store.next_node_deadline(HOST).unwrap(),
        None,
        "no attempt yet"
    );
    let attempt = f
        .store
        .write(|w| w.node_started(&act.claim, "a", Some(T0 + 5_000)))
        .unwrap();
    // A second held run without a deadline does not hide the first one's.
    let other = f.start();
    let other_act = f.activate(&other);
    f.store
        .write(|w| w.node_started(&other_act.claim, "a", None))
        .unwrap();
    assert_eq!(f.store.next_node_deadline(HOST).unwrap(), Some(T0 + 5_000));
    assert_eq!(f.store.next_node_deadline("another-host").unwrap(), None);
    let one = serde_json::json!(1);
    f.store
        .write(|w| w.complete(&act.claim, &attempt, &one, &one))
        .unwrap();
    assert_eq!(f.store.next_node_deadline(HOST).unwrap(), None, "closed");
}
