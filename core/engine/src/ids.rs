//! Identifiers and secrets.
//!
//! Ids are random and opaque. A [`ClaimToken`] is a secret: it has no `Display`, its `Debug`
//! is redacted, and only its SHA-256 hash is ever stored or compared.

use rand::RngExt as _;
use sha2::{Digest, Sha256};

/// A new id with a readable prefix, e.g. `run-019a3c…`: 48 bits of milliseconds since the
/// epoch, then 64 random bits. Time-ordered ids keep B-tree inserts on the rightmost pages
/// (fewer pages written per commit) and sort roughly by creation.
pub fn new_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let random: [u8; 8] = rand::rng().random();
    format!(
        "{prefix}-{:012x}{}",
        millis & 0xffff_ffff_ffff,
        hex::encode(random)
    )
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The bearer secret of a claim. Whoever holds it may write through the fence.
#[derive(Clone, PartialEq, Eq)]
pub struct ClaimToken(String);

impl ClaimToken {
    /// A fresh random token (256 bits).
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::rng().random();
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
mod tests {
    use super::*;

    #[test]
    fn token_debug_is_redacted_and_hash_is_stable() {
        let t = ClaimToken::generate();
        assert!(!format!("{t:?}").contains(t.expose_secret()));
        assert_eq!(t.hash(), t.clone().hash());
        assert_ne!(t.hash(), ClaimToken::generate().hash());
        assert_eq!(t.hash().len(), 64);
    }

    #[test]
    fn ids_are_prefixed_and_unique() {
        let a = new_id("run");
        assert!(a.starts_with("run-"));
        assert_ne!(a, new_id("run"));
    }
}
