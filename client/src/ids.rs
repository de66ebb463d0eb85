//! Identifiers and secrets: the engine's ([`ClaimToken`], [`sha256_hex`], [`IdSource`]), the
//! host's source of random bits ([`OsIds`]), and ids made outside the engine ([`new_id`]:
//! request and subscription ids, which read the wall clock).

use rand::Rng as _;

pub use piw_engine::ids::*;

/// Random bits from the operating system's generator (`rand`'s thread generator, seeded and
/// reseeded from the OS): what the host draws its row ids, claim tokens and children's tokens
/// from, so that none can be guessed. The only [`IdSource`] outside the tests: a seeded one
/// exists only in the simulation (`host/tests/engine_sim.rs`), so no setting, variable or
/// path of a production build can select one.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsIds;

impl IdSource for OsIds {
    fn fill(&mut self, out: &mut [u8]) {
        rand::rng().fill_bytes(out);
    }
}

/// A new id with a readable prefix, e.g. `req-019a3c…`, at the wall clock's time with
/// [`OsIds`]' bits (the store draws its row ids from its own `StoreConfig::ids`, at its
/// transaction's time).
pub fn new_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    piw_engine::ids::new_id(prefix, millis, &mut OsIds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_and_unique() {
        let a = new_id("run");
        assert!(a.starts_with("run-"));
        assert_ne!(a, new_id("run"));
    }

    #[test]
    fn os_ids_differ_on_every_draw() {
        let mut ids = OsIds;
        assert_ne!(
            ClaimToken::generate(&mut ids).hash(),
            ClaimToken::generate(&mut ids).hash()
        );
    }
}
