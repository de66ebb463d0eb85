//! Time as the store and host see it.
//!
//! Every lease decision compares against a [`Clock`] reading, never `SystemTime::now()` directly,
//! so tests can drive expiry deterministically with a [`FakeClock`] (plan, "Lease regression":
//! transitions under a fake clock with blocked timers).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch. All durable timestamps use this unit.
pub use piw_engine::time::UnixMillis;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in milliseconds since the Unix epoch.
    fn now_ms(&self) -> UnixMillis;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<AtomicI64>,
}

impl FakeClock {
    /// A fake clock standing at `start_ms`.
    pub fn new(start_ms: UnixMillis) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start_ms)),
        }
    }

    /// Moves the clock forward (or backward, for a negative delta) by `delta_ms`.
    pub fn advance(&self, delta_ms: i64) {
        self.now.fetch_add(delta_ms, Ordering::SeqCst);
    }

    /// Sets the clock to an absolute time.
    pub fn set(&self, now_ms: UnixMillis) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> UnixMillis {
        self.now.load(Ordering::SeqCst)
    }
}

/// The wall clock moved forward by an offset that a test keeps in a file: the host's clock when
/// it runs with `PIW_TEST_CLOCK=<file>` (test-only, like `PIW_FAULT`).
///
/// Process-level tests use it to make deadlines and lease expiries pass when the test says so,
/// instead of waiting real time and hoping a loaded machine keeps up. The file holds one
/// decimal number of milliseconds; a missing or unreadable file counts as no change. The
/// clock never goes backwards, whatever the file says later. The file is read at every reading
/// (a few microseconds), which only a test host pays. A host asleep until its next deadline
/// notices a moved clock at its next message, so a test that moves the clock then sends a
/// request.
#[derive(Debug)]
pub struct OffsetFileClock {
    path: PathBuf,
    latest: AtomicI64,
}

impl OffsetFileClock {
    /// A clock offset by the number of milliseconds in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            latest: AtomicI64::new(i64::MIN),
        }
    }

    fn offset_ms(&self) -> i64 {
        std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
            .unwrap_or(0)
    }
}

impl Clock for OffsetFileClock {
    fn now_ms(&self) -> UnixMillis {
        let now = SystemClock.now_ms().saturating_add(self.offset_ms());
        let before = self.latest.fetch_max(now, Ordering::SeqCst);
        now.max(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told_and_clones_share_time() {
        let clock = FakeClock::new(1_000);
        let other = clock.clone();
        assert_eq!(clock.now_ms(), 1_000);
        other.advance(250);
        assert_eq!(clock.now_ms(), 1_250);
        clock.set(5);
        assert_eq!(other.now_ms(), 5);
    }

    #[test]
    fn an_offset_file_clock_moves_with_its_file_and_never_backwards() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("offset");
        let clock = OffsetFileClock::new(&file);
        let wall = SystemClock.now_ms();
        let missing = clock.now_ms();
        assert!(
            (wall..wall + 60_000).contains(&missing),
            "{missing} vs {wall}"
        );
        std::fs::write(&file, "3600000\n").unwrap();
        let ahead = clock.now_ms();
        assert!(ahead >= missing + 3_600_000, "{ahead} vs {missing}");
        // A smaller offset (or a removed file) does not turn the clock back.
        std::fs::write(&file, "0").unwrap();
        assert!(clock.now_ms() >= ahead);
        std::fs::remove_file(&file).unwrap();
        assert!(clock.now_ms() >= ahead);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
