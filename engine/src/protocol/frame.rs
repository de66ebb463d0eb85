//! Framing: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
//!
//! The decoder is incremental and bounded. It never buffers more than
//! [`Limits::max_buffered_bytes`] per connection, and it rejects an oversized frame as soon as
//! the 4-byte length prefix has arrived, so a peer cannot make the host allocate or wait for a
//! body it will refuse anyway.

use std::io::{self, Read, Write};

use serde::Serialize;

use super::RejectionCode;

/// Size of the length prefix that starts every frame.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Default [`Limits::max_frame_bytes`]: 1 MiB of JSON per frame, not counting the prefix.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1024 * 1024;

/// Default [`Limits::max_buffered_bytes`]: 4 MiB of unread input per connection.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 4 * 1024 * 1024;

/// Default [`Limits::max_payload_bytes`]: 256 KiB for a request's `payload`, measured as its
/// canonical JSON (see [`canonical_json_len`](super::canonical_json_len)).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// Hard bounds applied to every connection.
///
/// `max_buffered_bytes` should be at least `max_frame_bytes + LENGTH_PREFIX_BYTES`, otherwise a
/// frame of the maximum size can never be buffered whole and fails with
/// [`FrameError::BufferFull`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted frame body in bytes (the length prefix value). Values above
    /// `u32::MAX` behave as `u32::MAX`, the largest length the prefix can carry.
    pub max_frame_bytes: usize,
    /// Largest number of received but not yet decoded bytes a [`FrameDecoder`] holds.
    pub max_buffered_bytes: usize,
    /// Largest accepted request `payload`, as the byte length of its canonical JSON.
    pub max_payload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

/// Why a frame could not be read, decoded or written.
///
/// Every variant except [`FrameError::Encode`] means the byte stream can no longer be trusted:
/// the connection should be closed (after a [`Goodbye`](super::Goodbye) where the peer can still
/// read it; see [`FrameError::rejection_code`]).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announces a frame larger than [`Limits::max_frame_bytes`].
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The announced (or, when encoding, the actual) frame body length.
        len: usize,
        /// The limit it exceeds.
        limit: usize,
    },
    /// Accepting more input would buffer more than [`Limits::max_buffered_bytes`].
    #[error("connection input buffer would exceed {limit} bytes")]
    BufferFull {
        /// The buffer limit.
        limit: usize,
    },
    /// The length prefix is zero. An empty body is never valid JSON, so it is refused at the
    /// framing layer.
    #[error("zero-length frame")]
    Empty,
    /// The stream ended inside a length prefix or a frame body.
    #[error("stream ended in the middle of a frame")]
    Truncated,
    /// The value to send could not be serialized as JSON.
    #[error("could not encode frame body as JSON: {0}")]
    Encode(#[source] serde_json::Error),
    /// Reading or writing failed.
    #[error("frame I/O failed: {0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// The rejection code the host reports in its [`Goodbye`](super::Goodbye) for this error.
    ///
    /// Oversize frames and buffer overflow are `payload_too_large`; empty and truncated frames
    /// are `malformed`; encoding and I/O failures are the host's own problem, `internal`.
    pub fn rejection_code(&self) -> RejectionCode {
        match self {
            FrameError::TooLarge { .. } | FrameError::BufferFull { .. } => {
                RejectionCode::PayloadTooLarge
            }
            FrameError::Empty | FrameError::Truncated => RejectionCode::Malformed,
            FrameError::Encode(_) | FrameError::Io(_) => RejectionCode::Internal,
        }
    }
}

/// The effective frame limit: the prefix cannot announce more than `u32::MAX` bytes.
fn frame_limit(limits: &Limits) -> usize {
    let prefix_max = usize::try_from(u32::MAX).unwrap_or(usize::MAX);
    limits.max_frame_bytes.min(prefix_max)
}

/// Checks an announced or produced frame body length against the limits.
fn check_frame_len(len: usize, limits: &Limits) -> Result<(), FrameError> {
    if len == 0 {
        return Err(FrameError::Empty);
    }
    let limit = frame_limit(limits);
    if len > limit {
        return Err(FrameError::TooLarge { len, limit });
    }
    Ok(())
}

/// Reads the body length from a 4-byte prefix.
fn prefix_len(prefix: [u8; LENGTH_PREFIX_BYTES], limits: &Limits) -> Result<usize, FrameError> {
    let announced = u32::from_be_bytes(prefix);
    // On a platform whose usize is narrower than 32 bits the length cannot even be addressed.
    let len = usize::try_from(announced).map_err(|_| FrameError::TooLarge {
        len: usize::MAX,
        limit: frame_limit(limits),
    })?;
    check_frame_len(len, limits)?;
    Ok(len)
}

/// Serializes `value` as compact JSON and prepends its length.
///
/// Fails with [`FrameError::TooLarge`] when the JSON exceeds [`Limits::max_frame_bytes`] and with
/// [`FrameError::Encode`] when `value` cannot be represented as JSON.
pub fn encode_frame<T: Serialize + ?Sized>(
    value: &T,
    limits: &Limits,
) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0u8; LENGTH_PREFIX_BYTES];
    serde_json::to_writer(&mut frame, value).map_err(FrameError::Encode)?;
    let len = frame.len() - LENGTH_PREFIX_BYTES;
    check_frame_len(len, limits)?;
    let announced = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len,
        limit: frame_limit(limits),
    })?;
    if let Some(prefix) = frame.first_chunk_mut::<LENGTH_PREFIX_BYTES>() {
        *prefix = announced.to_be_bytes();
    }
    Ok(frame)
}

/// Incremental frame splitter for one connection.
///
/// Feed received bytes with [`push`](FrameDecoder::push) and take complete frame bodies with
/// [`next_frame`](FrameDecoder::next_frame) until it returns `Ok(None)`. Any error means the
/// stream is out of sync or abusive; close the connection rather than continuing.
#[derive(Debug)]
pub struct FrameDecoder {
    limits: Limits,
    /// Received bytes; `buf[start..]` is not yet consumed.
    buf: Vec<u8>,
    start: usize,
}

/// Above this capacity an empty buffer is shrunk, so one large frame does not pin memory for
/// the rest of a long-lived connection.
const RETAINED_CAPACITY: usize = 64 * 1024;

impl FrameDecoder {
    /// A decoder with nothing buffered.
    pub fn new(limits: Limits) -> Self {
        FrameDecoder {
            limits,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The limits this decoder enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes received but not yet returned as part of a frame.
    pub fn buffered_len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the decoder holds no partial frame, i.e. the peer may close the stream here
    /// without truncating anything.
    pub fn is_at_frame_boundary(&self) -> bool {
        self.buffered_len() == 0
    }

    /// Call when the peer closed the stream: `Ok` if it closed between frames,
    /// [`FrameError::Truncated`] if a partial frame is left over.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.is_at_frame_boundary() {
            Ok(())
        } else {
            Err(FrameError::Truncated)
        }
    }

    /// Appends received bytes.
    ///
    /// All or nothing: if the bytes would take the buffer past
    /// [`Limits::max_buffered_bytes`] none of them are kept and [`FrameError::BufferFull`] is
    /// returned.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), FrameError> {
        let limit = self.limits.max_buffered_bytes;
        if self.buffered_len().saturating_add(bytes.len()) > limit {
            return Err(FrameError::BufferFull { limit });
        }
        if self.start > 0 {
            // Consumed frames are dropped lazily, at most once per consumed frame.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// Whether [`FrameDecoder::next_frame`] would return something now: a complete frame, or
    /// the error of a length prefix it refuses. A reader that only needs the next frame may
    /// stop reading then.
    pub fn has_next(&self) -> bool {
        let pending = self.buf.get(self.start..).unwrap_or_default();
        let Some(prefix) = pending.first_chunk::<LENGTH_PREFIX_BYTES>() else {
            return false;
        };
        match prefix_len(*prefix, &self.limits) {
            Ok(len) => pending.len() >= LENGTH_PREFIX_BYTES.saturating_add(len),
            Err(_) => true,
        }
    }

    /// Takes the next complete frame body, `Ok(None)` if more bytes are needed.
    ///
    /// The length prefix is checked as soon as its 4 bytes are buffered: a zero length is
    /// [`FrameError::Empty`] and a length over [`Limits::max_frame_bytes`] is
    /// [`FrameError::TooLarge`], without waiting for the body. A failing frame is left in the
    /// buffer, so calling again returns the same error.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let pending = self.buf.get(self.start..).unwrap_or_default();
        let Some(prefix) = pending.first_chunk::<LENGTH_PREFIX_BYTES>() else {
            return Ok(None);
        };
        let len = prefix_len(*prefix, &self.limits)?;
        let end = LENGTH_PREFIX_BYTES.saturating_add(len);
        let Some(body) = pending.get(LENGTH_PREFIX_BYTES..end) else {
            return Ok(None);
        };
        let body = body.to_vec();
        self.start += end;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > RETAINED_CAPACITY {
                self.buf.shrink_to(RETAINED_CAPACITY);
            }
        }
        Ok(Some(body))
    }
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
fn read_until_full<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        match reader.read(rest) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// Blocking read of one frame body.
///
/// Returns `Ok(None)` when the stream ends cleanly before a frame starts and
/// [`FrameError::Truncated`] when it ends inside one. The length is checked against the limits
/// before any of the body is read or allocated.
pub fn read_frame<R: Read + ?Sized>(
    reader: &mut R,
    limits: &Limits,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    match read_until_full(reader, &mut prefix)? {
        0 => return Ok(None),
        LENGTH_PREFIX_BYTES => {}
        _ => return Err(FrameError::Truncated),
    }
    let len = prefix_len(prefix, limits)?;
    let mut body = vec![0u8; len];
    if read_until_full(reader, &mut body)? != len {
        return Err(FrameError::Truncated);
    }
    Ok(Some(body))
}

/// Blocking write of one frame: encodes `value` with [`encode_frame`], writes it whole and
/// flushes, so the peer sees the frame without waiting for later writes.
pub fn write_frame<W: Write + ?Sized, T: Serialize + ?Sized>(
    writer: &mut W,
    value: &T,
    limits: &Limits,
) -> Result<(), FrameError> {
    let frame = encode_frame(value, limits)?;
    writer.write_all(&frame)?;
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_big_endian_length() {
        let frame = encode_frame(&serde_json::json!({"a": 1}), &Limits::default()).unwrap();
        assert_eq!(&frame[..4], &[0, 0, 0, 7]);
        assert_eq!(&frame[4..], br#"{"a":1}"#);
    }

    #[test]
    fn has_next_says_whether_next_frame_would_return_something() {
        let limits = Limits {
            max_frame_bytes: 64,
            ..Limits::default()
        };
        let mut decoder = FrameDecoder::new(limits);
        let frame = encode_frame(&"0123456789", &limits).unwrap();
        assert!(!decoder.has_next(), "empty");
        decoder.push(&frame[..3]).unwrap();
        assert!(!decoder.has_next(), "part of the prefix");
        decoder.push(&frame[3..frame.len() - 1]).unwrap();
        assert!(!decoder.has_next(), "all but the last byte");
        decoder.push(&frame[frame.len() - 1..]).unwrap();
        assert!(decoder.has_next(), "complete");
        decoder.next_frame().unwrap().unwrap();
        assert!(!decoder.has_next(), "taken");
        // A prefix over the limit: next_frame returns its error at once.
        decoder.push(&65u32.to_be_bytes()).unwrap();
        assert!(decoder.has_next());
        assert!(matches!(
            decoder.next_frame(),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn consumed_frames_are_compacted_on_push() {
        let limits = Limits {
            max_buffered_bytes: 32,
            ..Limits::default()
        };
        let mut decoder = FrameDecoder::new(limits);
        let frame = encode_frame(&"0123456789", &limits).unwrap();
        for _ in 0..10 {
            decoder.push(&frame).unwrap();
            assert_eq!(decoder.next_frame().unwrap().unwrap(), b"\"0123456789\"");
            assert!(decoder.is_at_frame_boundary());
        }
    }
}
