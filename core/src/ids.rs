//! Identifiers and secrets: the engine's ([`ClaimToken`], [`sha256_hex`]) and new row ids,
//! which read the clock and so live outside the engine.

use rand::RngExt as _;

pub use piw_engine::ids::*;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_and_unique() {
        let a = new_id("run");
        assert!(a.starts_with("run-"));
        assert_ne!(a, new_id("run"));
    }
}
