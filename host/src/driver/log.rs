//! Where the host's log goes: stderr (an on-demand host's `host.log`), through a writer that
//! never fails. A log line that cannot be written (a full disk, a pipe whose reader went away)
//! is counted and dropped: logging is never a reason for a thread that owns state to stop, and
//! the host keeps serving. The next line that can be written says how many were lost, and
//! `host.status` reports the count (`log_writes_lost`).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Log writes that failed since the process started.
static LOST: AtomicU64 = AtomicU64::new(0);
/// How many of [`LOST`] the log has already been told about.
static REPORTED: AtomicU64 = AtomicU64::new(0);

/// How many log writes failed since the process started.
pub fn writes_lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// A writer to stderr that swallows (and counts) its failures; one per log line (a
/// `tracing_subscriber` `MakeWriter` as `LogSink::stderr`).
#[derive(Debug, Default)]
pub struct LogSink(());

impl LogSink {
    /// The writer of one log line.
    pub fn stderr() -> Self {
        Self(())
    }
}

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_line(&mut std::io::stderr().lock(), buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Writes `buf` to `out`, preceded by a note of the lines lost since the last one written;
/// a failure is counted, never returned.
fn write_line(out: &mut impl Write, buf: &[u8]) {
    let lost = LOST.load(Ordering::Relaxed);
    let reported = REPORTED.load(Ordering::Relaxed);
    if lost > reported {
        let note = format!(
            "piw: {} log line(s) could not be written (disk full or closed output)\n",
            lost - reported
        );
        if out.write_all(note.as_bytes()).is_ok() {
            REPORTED.store(lost, Ordering::Relaxed);
        }
    }
    if out.write_all(buf).is_err() {
        LOST.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_counted_and_reported_by_the_next_line_written() {
        let before = writes_lost();
        write_line(&mut Full, b"one\n");
        write_line(&mut Full, b"two\n");
        assert!(writes_lost() >= before + 2);
        let mut out = Vec::new();
        write_line(&mut out, b"three\n");
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("log line(s) could not be written") && text.ends_with("three\n"),
            "{text}"
        );
    }
}
