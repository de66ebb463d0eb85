//! Secrets and digests. (New row ids, which read the clock, are `piw_core::ids::new_id`.)
//!
//! A [`ClaimToken`] is a secret: it has no `Display`, its `Debug`
//! is redacted, and only its SHA-256 hash is ever stored or compared.

use rand::RngExt as _;
use sha2::{Digest, Sha256};

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
}
