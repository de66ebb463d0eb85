//! Identifiers and secrets: new row ids and claim tokens, both drawn from an [`IdSource`] the
//! engine is handed (it owns no randomness and reads no clock), and digests.
//!
//! A [`ClaimToken`] is a secret: it has no `Display`, its `Debug`
//! is redacted, and only its SHA-256 hash is ever stored or compared.

use sha2::{Digest, Sha256};

use crate::time::UnixMillis;

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Where new ids and secrets get their random bits: an input of the engine, like the time.
///
/// The host's driver hands it an OS-seeded source (`piw_host::ids::OsIds`: claim tokens stay
/// unguessable); a deterministic simulation hands it a seeded one, so that a seed replays the
/// same ids, in the same order, bit for bit. No production crate implements a seeded source.
pub trait IdSource: Send + std::fmt::Debug {
    /// Fills `out` with random bytes.
    fn fill(&mut self, out: &mut [u8]);
}

/// A new id with a readable prefix, e.g. `run-019a3c…`: 48 bits of `now` (milliseconds since
/// the epoch), then 64 bits of `ids`. Time-ordered ids keep B-tree inserts on the rightmost
/// pages (fewer pages written per commit) and sort roughly by creation.
pub fn new_id(prefix: &str, now: UnixMillis, ids: &mut dyn IdSource) -> String {
    let mut random = [0u8; 8];
    ids.fill(&mut random);
    let millis = u64::try_from(now).unwrap_or(0);
    format!(
        "{prefix}-{:012x}{}",
        millis & 0xffff_ffff_ffff,
        hex::encode(random)
    )
}

/// The bearer secret of a claim. Whoever holds it may write through the fence.
#[derive(Clone, PartialEq, Eq)]
pub struct ClaimToken(String);

impl ClaimToken {
    /// A fresh token: 256 bits of `ids`.
    pub fn generate(ids: &mut dyn IdSource) -> Self {
        let mut bytes = [0u8; 32];
        ids.fill(&mut bytes);
        Self(hex::encode(bytes))
    }

    /// Wraps a token received from elsewhere (for example a child's one-time token).
    pub fn from_secret(secret: String) -> Self {
        Self(secret)
    }

    /// The hash the store keeps instead of the token.
    pub fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }

    /// The secret itself, for handing to the one process that must present it. Never log it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClaimToken(<redacted>)")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A counter dressed as randomness: distinct bytes on every draw, for the engine's own
    /// unit tests (never seen outside them).
    #[derive(Debug, Default)]
    pub(crate) struct CountingIds(u64);

    impl IdSource for CountingIds {
        fn fill(&mut self, out: &mut [u8]) {
            for chunk in out.chunks_mut(8) {
                self.0 += 1;
                let bytes = self.0.to_be_bytes();
                chunk.copy_from_slice(&bytes[..chunk.len()]);
            }
        }
    }

    #[test]
    fn token_debug_is_redacted_and_hash_is_stable() {
        let mut ids = CountingIds::default();
        let t = ClaimToken::generate(&mut ids);
        assert!(!format!("{t:?}").contains(t.expose_secret()));
        assert_eq!(t.hash(), t.clone().hash());
        assert_ne!(t.hash(), ClaimToken::generate(&mut ids).hash());
        assert_eq!(t.hash().len(), 64);
    }

    #[test]
    fn ids_are_prefixed_time_ordered_and_drawn_from_the_source() {
        let mut ids = CountingIds::default();
        let a = new_id("run", 1_700_000_000_000, &mut ids);
        let b = new_id("run", 1_700_000_000_001, &mut ids);
        assert!(a.starts_with("run-018bcfe56800"), "{a}");
        assert!(a < b);
        assert_eq!(
            new_id("run", 1_700_000_000_000, &mut CountingIds::default()),
            a
        );
    }
}
