//! The block header: what travels in front of a block wherever it leaves or enters a space
//! (a channel between spaces or to another run, a tap's ring, a network channel's frame, a
//! Kafka message's header), so the filters on the other side see the block as the sender
//! did: its record metadata (capture time, wire length, crop), link type and capture file
//! header, its class and length.
//!
//! One layout, one codec: a zero-copy view over bytes in the smoltcp style
//! ([`Header::new_checked`] over any `AsRef<[u8]>`, getters, and setters over
//! `AsMut<[u8]>`). It lives in `protocol`, the workspace's leaf for wire types, because its
//! readers span the layers: the dataplane's transports and the filters (Kafka) write and
//! read it, and the libraries loaded into legacy programs (the libpcap stand-in) read tap
//! records with it and link neither the dataplane nor the language. `protocol` depends on
//! beltway only, so nothing here makes a cycle.
//!
//! # Layout ([`HEADER_LEN`] bytes, little-endian)
//!
//! | offset | field | |
//! | --- | --- | --- |
//! | 0 | `ts_ns` u64 | capture time, ns since the epoch; with [`MARK`] the marker's number, with [`ANNOUNCE`] the producer's buffer id |
//! | 8 | `orig_len` u32 | bytes the record had on the wire; with [`METAS`] how many headers follow |
//! | 12 | `link` u16 | pcap LINKTYPE_* (with [`LINK`]) |
//! | 14 | `flags` u16 | what the header carries ([`RECORD`], [`LINK`], ...) |
//! | 16 | `skip` u32 | bytes of the record before the block (0: it starts the record) |
//! | 20 | `snaplen` u32 | the capture file header's snap length (with [`CAPTURE`]) |
//! | 24 | `len` u32 | bytes of the block after the header (framed transports; [`END_OF_STREAM`]) |
//! | 28 | `class` u16 | the block's class |
//! | 30 | `frame` u8 | [`LAST`]: the sender's batch ends with this block |
//! | 31 | reserved u8 | 0 |
//!
//! The first 16 bytes are what a tap record's header held before this header (capture
//! time, wire length, link type, a reserved u16): a reader of those fields finds them where
//! they were.

/// Bytes of a block header.
pub const HEADER_LEN: usize = 32;

/// Flag: the header carries record metadata (`ts_ns`, `orig_len`, `skip`).
pub const RECORD: u16 = 1;
/// Flag: the header carries a link type.
pub const LINK: u16 = 2;
/// Flag (channels): a block of `orig_len` headers, for the run of tags that follows it.
pub const METAS: u16 = 4;
/// Flag (channels): the payload names a file (or, with [`SHARED`], a shared ring's key)
/// the producer's buffer `ts_ns` lies in.
pub const ANNOUNCE: u16 = 8;
/// Flag (channels), with [`ANNOUNCE`]: a shared ring of the producer's process.
pub const SHARED: u16 = 16;
/// Flag (channels): a migration marker, `ts_ns` its number.
pub const MARK: u16 = 32;
/// Flag, with [`LINK`]: the block came with a capture file header: `snaplen` and the two
/// flags after this one.
pub const CAPTURE: u16 = 64;
/// Flag, with [`CAPTURE`]: the capture file was big-endian.
pub const CAPTURE_BIG_ENDIAN: u16 = 128;
/// Flag, with [`CAPTURE`]: the capture file had nanosecond times.
pub const CAPTURE_NANOS: u16 = 256;
/// Every flag a header may carry.
pub const FLAGS: u16 =
    RECORD | LINK | METAS | ANNOUNCE | SHARED | MARK | CAPTURE | CAPTURE_BIG_ENDIAN | CAPTURE_NANOS;
/// Frame flag: the last block of the sender's batch.
pub const LAST: u8 = 1;
/// `len` of a frame that ends a stream (no block follows).
pub const END_OF_STREAM: u32 = u32::MAX;

mod field {
    use std::ops::Range;
    pub const TS_NS: Range<usize> = 0..8;
    pub const ORIG_LEN: Range<usize> = 8..12;
    pub const LINK: Range<usize> = 12..14;
    pub const FLAGS: Range<usize> = 14..16;
    pub const SKIP: Range<usize> = 16..20;
    pub const SNAPLEN: Range<usize> = 20..24;
    pub const LEN: Range<usize> = 24..28;
    pub const CLASS: Range<usize> = 28..30;
    pub const FRAME: usize = 30;
    pub const RESERVED: usize = 31;
}

/// Why bytes are not a block header: the field, where it is, and what is wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The bytes end before the field does.
    #[error("a block header is {HEADER_LEN} bytes; {got} given end inside field {field} (offset {offset})")]
    Truncated {
        field: &'static str,
        offset: usize,
        got: usize,
    },
    /// The field holds a value no writer writes.
    #[error("block header field {field} (offset {offset}) holds {value:#x}: {why}")]
    Invalid {
        field: &'static str,
        offset: usize,
        value: u64,
        why: &'static str,
    },
}

/// A block header over `buffer` (at least [`HEADER_LEN`] bytes; what follows is not
/// looked at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// A view over `buffer`, not checked (see [`Header::check`]); the getters panic if it
    /// is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// A view over `buffer` once [`Header::check`] found it a header.
    pub fn new_checked(buffer: T) -> Result<Header<T>, HeaderError> {
        let h = Header::new_unchecked(buffer);
        h.check()?;
        Ok(h)
    }

    /// Whether the bytes are a header: long enough, only known flags, the flags that
    /// need another one with it, the reserved byte 0.
    pub fn check(&self) -> Result<(), HeaderError> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            let (field, offset) = [
                ("ts_ns", field::TS_NS.start),
                ("orig_len", field::ORIG_LEN.start),
                ("link", field::LINK.start),
                ("flags", field::FLAGS.start),
                ("skip", field::SKIP.start),
                ("snaplen", field::SNAPLEN.start),
                ("len", field::LEN.start),
                ("class", field::CLASS.start),
                ("frame", field::FRAME),
                ("reserved", field::RESERVED),
            ]
            .into_iter()
            .rev()
            .find(|(_, at)| *at <= got)
            .expect("ts_ns starts at 0");
            return Err(HeaderError::Truncated { field, offset, got });
        }
        let flags = self.flags();
        let bad = |why| HeaderError::Invalid {
            field: "flags",
            offset: field::FLAGS.start,
            value: flags as u64,
            why,
        };
        if flags & !FLAGS != 0 {
            return Err(bad("unknown flags"));
        }
        if flags & CAPTURE != 0 && flags & LINK == 0 {
            return Err(bad("a capture header without a link type"));
        }
        if flags & (CAPTURE_BIG_ENDIAN | CAPTURE_NANOS) != 0 && flags & CAPTURE == 0 {
            return Err(bad("capture file flags without a capture header"));
        }
        let frame = self.frame();
        if frame & !LAST != 0 {
            return Err(HeaderError::Invalid {
                field: "frame",
                offset: field::FRAME,
                value: frame as u64,
                why: "unknown frame flags",
            });
        }
        let reserved = self.buffer.as_ref()[field::RESERVED];
        if reserved != 0 {
            return Err(HeaderError::Invalid {
                field: "reserved",
                offset: field::RESERVED,
                value: reserved as u64,
                why: "not 0",
            });
        }
        Ok(())
    }

    /// The bytes the view is over.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The bytes after the header (the block, in a record that carries it).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    fn bytes<const N: usize>(&self, r: std::ops::Range<usize>) -> [u8; N] {
        self.buffer.as_ref()[r].try_into().expect("a field's width")
    }

    /// Capture time, ns since the epoch (0: a block made in the run); a marker's number,
    /// an announced buffer's id.
    pub fn ts_ns(&self) -> u64 {
        u64::from_le_bytes(self.bytes(field::TS_NS))
    }
    /// Bytes the record had on the wire; a metadata block's count of headers.
    pub fn orig_len(&self) -> u32 {
        u32::from_le_bytes(self.bytes(field::ORIG_LEN))
    }
    /// pcap LINKTYPE_* of the block.
    pub fn link(&self) -> u16 {
        u16::from_le_bytes(self.bytes(field::LINK))
    }
    pub fn flags(&self) -> u16 {
        u16::from_le_bytes(self.bytes(field::FLAGS))
    }
    /// Bytes of the record before the block.
    pub fn skip(&self) -> u32 {
        u32::from_le_bytes(self.bytes(field::SKIP))
    }
    /// The capture file header's snap length.
    pub fn snaplen(&self) -> u32 {
        u32::from_le_bytes(self.bytes(field::SNAPLEN))
    }
    /// Bytes of the block after the header in a framed transport.
    pub fn len(&self) -> u32 {
        u32::from_le_bytes(self.bytes(field::LEN))
    }
    /// Whether the frame carries no block bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn class(&self) -> u16 {
        u16::from_le_bytes(self.bytes(field::CLASS))
    }
    /// Frame flags ([`LAST`]).
    pub fn frame(&self) -> u8 {
        self.buffer.as_ref()[field::FRAME]
    }
    /// Whether flag `f` is set.
    pub fn has(&self, f: u16) -> bool {
        self.flags() & f != 0
    }
    /// The header's fields as a value.
    pub fn fields(&self) -> Fields {
        Fields {
            ts_ns: self.ts_ns(),
            orig_len: self.orig_len(),
            link: self.link(),
            flags: self.flags(),
            skip: self.skip(),
            snaplen: self.snaplen(),
            len: self.len(),
            class: self.class(),
            frame: self.frame(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn put(&mut self, r: std::ops::Range<usize>, b: &[u8]) {
        self.buffer.as_mut()[r].copy_from_slice(b);
    }
    pub fn set_ts_ns(&mut self, v: u64) {
        self.put(field::TS_NS, &v.to_le_bytes())
    }
    pub fn set_orig_len(&mut self, v: u32) {
        self.put(field::ORIG_LEN, &v.to_le_bytes())
    }
    pub fn set_link(&mut self, v: u16) {
        self.put(field::LINK, &v.to_le_bytes())
    }
    pub fn set_flags(&mut self, v: u16) {
        self.put(field::FLAGS, &v.to_le_bytes())
    }
    pub fn set_skip(&mut self, v: u32) {
        self.put(field::SKIP, &v.to_le_bytes())
    }
    pub fn set_snaplen(&mut self, v: u32) {
        self.put(field::SNAPLEN, &v.to_le_bytes())
    }
    pub fn set_len(&mut self, v: u32) {
        self.put(field::LEN, &v.to_le_bytes())
    }
    pub fn set_class(&mut self, v: u16) {
        self.put(field::CLASS, &v.to_le_bytes())
    }
    pub fn set_frame(&mut self, v: u8) {
        self.buffer.as_mut()[field::FRAME] = v;
    }
    /// Write every field of `f` (the reserved byte 0).
    pub fn set_fields(&mut self, f: &Fields) {
        self.set_ts_ns(f.ts_ns);
        self.set_orig_len(f.orig_len);
        self.set_link(f.link);
        self.set_flags(f.flags);
        self.set_skip(f.skip);
        self.set_snaplen(f.snaplen);
        self.set_len(f.len);
        self.set_class(f.class);
        self.set_frame(f.frame);
        self.buffer.as_mut()[field::RESERVED] = 0;
    }
}

/// A header's fields as plain values (for building one, or keeping one past its bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fields {
    pub ts_ns: u64,
    pub orig_len: u32,
    pub link: u16,
    pub flags: u16,
    pub skip: u32,
    pub snaplen: u32,
    pub len: u32,
    pub class: u16,
    pub frame: u8,
}

impl Fields {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = Header::new_unchecked([0u8; HEADER_LEN]);
        h.set_fields(self);
        h.into_inner()
    }
    /// Whether flag `f` is set.
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fields() -> impl Strategy<Value = Fields> {
        let flags = prop_oneof![
            Just(0u16),
            Just(RECORD),
            Just(RECORD | LINK),
            (any::<bool>(), any::<bool>()).prop_map(|(b, n)| RECORD
                | LINK
                | CAPTURE
                | if b { CAPTURE_BIG_ENDIAN } else { 0 }
                | if n { CAPTURE_NANOS } else { 0 }),
            Just(METAS),
            Just(ANNOUNCE),
            Just(ANNOUNCE | SHARED),
            Just(MARK),
        ];
        (
            (any::<u64>(), any::<u32>(), any::<u16>(), flags),
            (
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u16>(),
                0u8..=LAST,
            ),
        )
            .prop_map(
                |((ts_ns, orig_len, link, flags), (skip, snaplen, len, class, frame))| Fields {
                    ts_ns,
                    orig_len,
                    link,
                    flags,
                    skip,
                    snaplen,
                    len,
                    class,
                    frame,
                },
            )
    }

    #[test]
    fn the_first_16_bytes_are_a_tap_records_old_header() {
        let f = Fields {
            ts_ns: 1_700_000_000_123_456_789,
            orig_len: 1514,
            link: 1,
            flags: RECORD | LINK,
            ..Fields::default()
        };
        let b = f.encode();
        assert_eq!(&b[..8], &f.ts_ns.to_le_bytes());
        assert_eq!(&b[8..12], &1514u32.to_le_bytes());
        assert_eq!(&b[12..14], &1u16.to_le_bytes());
    }

    #[test]
    fn short_bytes_name_the_field_they_end_in() {
        let b = Fields::default().encode();
        assert_eq!(
            Header::new_checked(&b[..13]).unwrap_err(),
            HeaderError::Truncated {
                field: "link",
                offset: 12,
                got: 13
            }
        );
        assert_eq!(
            Header::new_checked(&b[..0]).unwrap_err(),
            HeaderError::Truncated {
                field: "ts_ns",
                offset: 0,
                got: 0
            }
        );
        let mut b = b;
        b[14] = 0x80;
        b[15] = 0x80;
        assert!(matches!(
            Header::new_checked(&b[..]),
            Err(HeaderError::Invalid {
                field: "flags",
                offset: 14,
                ..
            })
        ));
    }

    proptest! {
        /// Any bytes: a header or a typed error, never a panic; a header's getters work.
        #[test]
        fn any_bytes_are_a_header_or_a_typed_error(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            match Header::new_checked(&b[..]) {
                Ok(h) => {
                    prop_assert!(b.len() >= HEADER_LEN);
                    let f = h.fields();
                    prop_assert_eq!(f.flags & !FLAGS, 0);
                    prop_assert_eq!(&f.encode()[..], &b[..HEADER_LEN]);
                    prop_assert_eq!(h.payload(), &b[HEADER_LEN..]);
                }
                Err(HeaderError::Truncated { offset, got, .. }) => {
                    prop_assert!(got < HEADER_LEN && offset <= got);
                }
                Err(HeaderError::Invalid { offset, .. }) => prop_assert!(offset < HEADER_LEN),
            }
        }

        /// encode then decode gives the fields back.
        #[test]
        fn decode_after_encode_is_the_identity(f in fields(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut b = f.encode().to_vec();
            b.extend_from_slice(&tail);
            let h = Header::new_checked(&b[..]).expect("what encode writes checks");
            prop_assert_eq!(h.fields(), f);
            prop_assert_eq!(h.payload(), &tail[..]);
        }
    }
}
