//! The record format of a tap's rings: what a reader in another process (the daemon's
//! PipesFS, the libpcap stand-in) decodes from the data ring a run's tap writes
//! (`dataplane::tap` writes it). Each block is one record: a block header
//! ([`crate::block::Header`], [`HEADER`] bytes) followed by the block's bytes.

/// Bytes of the header in front of each tapped block: a [`crate::block::Header`].
pub const HEADER: usize = crate::block::HEADER_LEN;
/// Default size of a tap's data ring; its tag ring has `DATA_BYTES / 16` bytes (a tag per 256
/// bytes of data: 65536 tags for the default).
pub const DATA_BYTES: usize = 16 << 20;

/// The fields of a tapped record's [`crate::block::Header`] a reader of a tap uses (the
/// header's codec is the block header's; this is the value it holds).
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
    /// The block header of a record of `len` bytes of class `class`.
    pub fn fields(&self, len: u32, class: u16) -> crate::block::Fields {
        crate::block::Fields {
            ts_ns: self.ts_ns,
            orig_len: self.orig_len,
            link: self.link_type,
            flags: crate::block::RECORD | crate::block::LINK,
            len,
            class,
            ..Default::default()
        }
    }

    /// [`RecordHeader::fields`]' bytes.
    pub fn encode(&self, len: u32, class: u16) -> [u8; HEADER] {
        self.fields(len, class).encode()
    }

    /// The header at the start of `rec`, and the block after it; the header's error if
    /// `rec` does not start with one (a record not written by a tap).
    pub fn decode(rec: &[u8]) -> Result<(RecordHeader, &[u8]), crate::block::HeaderError> {
        let h = crate::block::Header::new_checked(rec)?;
        Ok((
            RecordHeader {
                ts_ns: h.ts_ns(),
                orig_len: h.orig_len(),
                link_type: h.link(),
            },
            &rec[HEADER..],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_header_reads_back_and_a_short_record_is_an_error() {
        let h = RecordHeader {
            ts_ns: 1_700_000_000_123_456_789,
            orig_len: 1514,
            link_type: 1,
        };
        let mut rec = h.encode(5, 3).to_vec();
        rec.extend_from_slice(b"frame");
        assert_eq!(RecordHeader::decode(&rec), Ok((h, &b"frame"[..])));
        assert!(RecordHeader::decode(&rec[..HEADER - 1]).is_err());
    }
}
