//! Self-checking stream content shared by every sender and receiver.
//!
//! A stream is a sequence of equal-sized blocks. Block `seq` is a fixed pseudo-random body
//! with the sequence number stamped into its first 8 bytes and its complement into its last
//! 8. Stamps make a cheap check (O(1) per block) that still catches lost, duplicated,
//! reordered, stale or misaligned data; the full check compares every byte.

use crate::util::{err, Result, Verify};

/// Smallest block the stamps fit in.
pub const MIN_BLOCK: usize = 16;

/// Produces block `seq` of a stream in a reusable buffer.
#[derive(Debug, Clone)]
pub struct Blocks {
    buf: Vec<u8>,
}

impl Blocks {
    pub fn new(len: usize) -> Blocks {
        assert!(
            len >= MIN_BLOCK,
            "blocks of {len} bytes cannot hold the stamps"
        );
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let buf = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Blocks { buf }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Block `seq` (the buffer is re-stamped in place: two stores).
    #[inline]
    pub fn block(&mut self, seq: u64) -> &[u8] {
        stamp(&mut self.buf, seq);
        &self.buf
    }

    /// Check a received block against block `seq`.
    #[inline]
    pub fn check(&mut self, got: &[u8], seq: u64, verify: Verify) -> Result<()> {
        let ok = got.len() == self.buf.len()
            && match verify {
                Verify::Stamps => stamps(got) == Some((seq, !seq)),
                Verify::Full => got == self.block(seq),
            };
        if ok {
            return Ok(());
        }
        Err(err(format!(
            "block {seq} is wrong: {} bytes (expected {}), stamps {:?} (expected ({seq}, {}))",
            got.len(),
            self.buf.len(),
            stamps(got),
            !seq
        )))
    }
}

#[inline]
fn stamp(buf: &mut [u8], seq: u64) {
    let n = buf.len();
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[n - 8..].copy_from_slice(&(!seq).to_le_bytes());
}

#[inline]
fn stamps(buf: &[u8]) -> Option<(u64, u64)> {
    let n = buf.len();
    if n < MIN_BLOCK {
        return None;
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Some((word(&buf[..8]), word(&buf[n - 8..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_catch_wrong_blocks() {
        let mut tx = Blocks::new(64);
        let mut rx = Blocks::new(64);
        let b3 = tx.block(3).to_vec();
        for v in [Verify::Full, Verify::Stamps] {
            rx.check(&b3, 3, v).unwrap();
            assert!(rx.check(&b3, 4, v).is_err());
            assert!(rx.check(&b3[..63], 3, v).is_err());
        }
        let mut bad = b3.clone();
        bad[30] ^= 1;
        assert!(rx.check(&bad, 3, Verify::Full).is_err());
    }
}
