//! The record format of a tap's rings: what a reader in another process (the daemon's
//! PipesFS, the libpcap stand-in) decodes from the data ring a run's tap writes
//! (`dataplane::tap` writes it). Each block is one record: a 16-byte [`RecordHeader`]
//! followed by the block's bytes.

/// Bytes of the header in front of each tapped block.
pub const HEADER: usize = 16;
/// Default size of a tap's data ring; its tag ring has `DATA_BYTES / 16` bytes (a tag per 256
/// bytes of data: 65536 tags for the default).
pub const DATA_BYTES: usize = 16 << 20;

/// The header of a tapped record: `ts_ns: u64 LE | orig_len: u32 LE | link_type: u16 LE |
/// reserved: u16 (0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Capture time in ns since the epoch (0 for a block made in the run, e.g. by `gen`).
    pub ts_ns: u64,
    /// Bytes the record had on the wire (at least the block's length).
    pub orig_len: u32,
    /// pcap LINKTYPE_* of the block (1, Ethernet, when the run does not say).
    pub link_type: u16,
}

impl RecordHeader {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.orig_len.to_le_bytes());
        b[12..14].copy_from_slice(&self.link_type.to_le_bytes());
        b
    }

    /// The header at the start of `rec`, and the block after it; `None` if `rec` is
    /// shorter than a header (a record not written by a tap).
    pub fn decode(rec: &[u8]) -> Option<(RecordHeader, &[u8])> {
        if rec.len() < HEADER {
            return None;
        }
        let u =
            |r: std::ops::Range<usize>| rec[r].iter().rev().fold(0u64, |a, b| a << 8 | *b as u64);
        Some((
            RecordHeader {
                ts_ns: u(0..8),
                orig_len: u(8..12) as u32,
                link_type: u(12..14) as u16,
            },
            &rec[HEADER..],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_header_reads_back_and_a_short_record_is_none() {
        let h = RecordHeader {
            ts_ns: 1_700_000_000_123_456_789,
            orig_len: 1514,
            link_type: 1,
        };
        let mut rec = h.encode().to_vec();
        rec.extend_from_slice(b"frame");
        assert_eq!(RecordHeader::decode(&rec), Some((h, &b"frame"[..])));
        assert_eq!(RecordHeader::decode(&rec[..HEADER - 1]), None);
    }
}
