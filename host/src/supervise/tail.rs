//! A bounded byte tail: keeps the last `cap` bytes written and counts every byte.

use std::collections::VecDeque;

/// The last `cap` bytes of a stream plus the stream's total length.
#[derive(Debug)]
pub(crate) struct Tail {
    buf: VecDeque<u8>,
    cap: usize,
    total: u64,
}

/// Upper bound for the buffer reserved up front; larger tails grow as data arrives.
const INITIAL_RESERVE: usize = 64 * 1024;

impl Tail {
    /// An empty tail keeping at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: VecDeque::with_capacity(cap.min(INITIAL_RESERVE)),
            cap,
            total: 0,
        }
    }

    /// Appends `chunk`, dropping the oldest bytes beyond the cap.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.total = self.total.saturating_add(chunk.len() as u64);
        if self.cap == 0 || chunk.is_empty() {
            return;
        }
        if chunk.len() >= self.cap {
            self.buf.clear();
            self.buf.extend(&chunk[chunk.len() - self.cap..]);
            return;
        }
        let overflow = (self.buf.len() + chunk.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(chunk);
    }

    /// A copy of the kept bytes, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<u8> {
        let (a, b) = self.buf.as_slices();
        let mut out = Vec::with_capacity(a.len() + b.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        out
    }

    /// Every byte ever pushed, kept or not.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::Tail;
    use proptest::prelude::*;

    #[test]
    fn keeps_the_last_bytes_across_chunk_shapes() {
        let mut t = Tail::new(5);
        t.push(b"ab");
        assert_eq!(t.snapshot(), b"ab");
        t.push(b"cde");
        assert_eq!(t.snapshot(), b"abcde");
        t.push(b"f");
        assert_eq!(t.snapshot(), b"bcdef");
        t.push(b"0123456789");
        assert_eq!(t.snapshot(), b"56789");
        assert_eq!(t.total(), 16);
    }

    #[test]
    fn a_zero_cap_only_counts() {
        let mut t = Tail::new(0);
        t.push(b"hello");
        assert!(t.snapshot().is_empty());
        assert_eq!(t.total(), 5);
    }

    proptest! {
        #[test]
        fn equals_the_suffix_of_the_concatenation(
            cap in 0usize..64,
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 0..20),
        ) {
            let mut t = Tail::new(cap);
            let mut all = Vec::new();
            for c in &chunks {
                t.push(c);
                all.extend_from_slice(c);
            }
            let start = all.len().saturating_sub(cap);
            prop_assert_eq!(t.snapshot(), all[start..].to_vec());
            prop_assert_eq!(t.total(), all.len() as u64);
        }
    }
}
