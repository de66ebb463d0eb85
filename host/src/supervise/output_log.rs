//! A child's whole output in a file: stdout and stderr as they were read (interleaved by
//! arrival), up to a cap. The tails in [`super::ChildExit`] keep only the end of each stream;
//! this keeps what a person reading a run's log wants from the start.
//!
//! A standby worker starts before anyone knows which run it will serve, so the file can be
//! given after the spawn: until then the output is held in memory (at most
//! [`HELD_BEFORE_FILE`] bytes) and written first once the file is known.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::OutputLog;

/// How much output a child may write before its log file is known that is still kept.
pub const HELD_BEFORE_FILE: usize = 64 * 1024;

/// The line written after the first `cap` bytes of a child's output, when it wrote more.
pub fn cut_line(cap: u64) -> String {
    format!(
        "\n[piw: the output goes on past {cap} bytes; the rest is not kept here, its last 64 KiB per stream are in `piw run status --json` (last_child)]\n"
    )
}

enum State {
    /// No file yet: the output so far, up to [`HELD_BEFORE_FILE`].
    Held(Vec<u8>),
    Writing {
        file: File,
        written: u64,
        cap: u64,
    },
    /// The cap was reached, or the file failed: nothing more is written.
    Done,
}

/// The sink both drains of a child write to. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Sink(Arc<Mutex<State>>);

impl Sink {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Mutex::new(State::Held(Vec::new()))))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every state is valid after a partial write, so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts writing to `log`: what was held first, then everything read from now on.
    pub(crate) fn attach(&self, log: &OutputLog) -> io::Result<()> {
        let file = open_log(&log.path)?;
        let mut state = self.lock();
        let held = match std::mem::replace(&mut *state, State::Done) {
            State::Held(held) => held,
            // Attached once only; a second file is ignored.
            other => {
                *state = other;
                return Ok(());
            }
        };
        *state = State::Writing {
            file,
            written: 0,
            cap: log.cap_bytes,
        };
        write_locked(&mut state, &held);
        Ok(())
    }

    /// Adds a chunk of output.
    pub(crate) fn write(&self, chunk: &[u8]) {
        write_locked(&mut self.lock(), chunk);
    }
}

fn write_locked(state: &mut State, chunk: &[u8]) {
    match state {
        State::Held(held) => {
            let room = HELD_BEFORE_FILE.saturating_sub(held.len());
            held.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        State::Writing { file, written, cap } => {
            let room = usize::try_from(cap.saturating_sub(*written)).unwrap_or(usize::MAX);
            let part = &chunk[..chunk.len().min(room)];
            // A small local append: the drain task that calls this reads the next chunk
            // only after it, which is the back-pressure a child's pipe expects anyway.
            let mut result = file.write_all(part);
            *written += part.len() as u64;
            let full = part.len() < chunk.len();
            if full && result.is_ok() {
                result = file.write_all(cut_line(*cap).as_bytes());
            }
            if let Err(e) = &result {
                tracing::warn!(error = %e, "cannot write a child's output log; the rest is not kept");
            }
            if full || result.is_err() {
                *state = State::Done;
            }
        }
        State::Done => {}
    }
}

fn open_log(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_before_the_file_is_kept_and_the_cap_ends_with_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = OutputLog {
            path: dir.path().join("run-1/3.log"),
            cap_bytes: 10,
        };
        let sink = Sink::new();
        sink.write(b"abc");
        sink.attach(&log).unwrap();
        sink.write(b"defg");
        sink.write(b"hijklmn");
        sink.write(b"never");
        let text = std::fs::read_to_string(&log.path).unwrap();
        assert_eq!(text, format!("abcdefghij{}", cut_line(10)));
        // Held output beyond its bound is dropped, not grown without limit.
        let sink = Sink::new();
        sink.write(&vec![b'x'; HELD_BEFORE_FILE + 5]);
        let log = OutputLog {
            path: dir.path().join("run-1/4.log"),
            cap_bytes: 1 << 20,
        };
        sink.attach(&log).unwrap();
        assert_eq!(
            std::fs::metadata(&log.path).unwrap().len(),
            HELD_BEFORE_FILE as u64
        );
    }
}
