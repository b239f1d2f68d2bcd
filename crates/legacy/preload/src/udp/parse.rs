//! Parsing a captured IPv4/IPv6 packet (network header first, as an AF_PACKET SOCK_DGRAM
//! ring delivers it) down to its UDP datagram: addresses, ports, payload.
//!
//! Owns: what the ring receive path believes about a captured packet. Safe code only;
//! hostile bytes give a typed [`ParseError`] naming the problem and its byte offset, never a
//! panic (property-tested below).

use std::net::{Ipv4Addr, Ipv6Addr};

/// A UDP datagram found in a captured packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub src: Addr,
    pub dst: Addr,
    pub sport: u16,
    pub dport: u16,
    /// Byte range of the UDP payload within the packet.
    pub payload: std::ops::Range<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

/// Why a captured packet is not a deliverable UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The packet ends at `len` where a field needed `need` bytes.
    Truncated { need: usize, len: usize },
    /// The IP version nibble at offset 0 is `0` or unknown.
    BadVersion(u8),
    /// IPv4 header length field (offset 0) below 20 bytes.
    BadHeaderLength(usize),
    /// The IP length field (offset 2 for IPv4, 4 for IPv6) says `said` bytes; `have` arrived.
    BadIpLength { said: usize, have: usize },
    /// Not UDP: the protocol / next-header byte (offset 9 or 6) is `0`.
    NotUdp(u8),
    /// An IPv4 fragment (flags/offset word at offset 6): never a whole datagram.
    Fragment,
    /// The UDP length field at offset `at` says `said` bytes where the IP payload has `have`.
    BadUdpLength { at: usize, said: usize, have: usize },
    /// The UDP checksum at offset `at` does not verify.
    BadChecksum { at: usize },
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Truncated { need, len } => {
                write!(f, "packet truncated: {need} bytes needed, {len} captured")
            }
            ParseError::BadVersion(v) => write!(f, "IP version {v} at offset 0"),
            ParseError::BadHeaderLength(n) => {
                write!(f, "IPv4 header length {n} at offset 0 (below 20)")
            }
            ParseError::BadIpLength { said, have } => {
                write!(f, "IP length field says {said} bytes, {have} captured")
            }
            ParseError::NotUdp(p) => write!(f, "protocol {p} is not UDP"),
            ParseError::Fragment => write!(f, "IPv4 fragment (offset 6)"),
            ParseError::BadUdpLength { at, said, have } => write!(
                f,
                "UDP length {said} at offset {at}, IP payload has {have} bytes"
            ),
            ParseError::BadChecksum { at } => {
                write!(f, "UDP checksum at offset {at} does not verify")
            }
        }
    }
}

fn be16(p: &[u8], at: usize) -> Result<u16, ParseError> {
    p.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or(ParseError::Truncated {
            need: at + 2,
            len: p.len(),
        })
}

/// Parse `pkt` (starting at the IP header). `verify_csum`: check the UDP checksum (false
/// when the capture says the checksum was never computed, as on loopback).
pub fn parse(pkt: &[u8], verify_csum: bool) -> Result<Datagram, ParseError> {
    let first = *pkt
        .first()
        .ok_or(ParseError::Truncated { need: 1, len: 0 })?;
    let (src, dst, l4, l4_end, pseudo) = match first >> 4 {
        4 => {
            let ihl = ((first & 0x0f) as usize) * 4;
            if ihl < 20 {
                return Err(ParseError::BadHeaderLength(ihl));
            }
            if pkt.len() < ihl {
                return Err(ParseError::Truncated {
                    need: ihl,
                    len: pkt.len(),
                });
            }
            let total = be16(pkt, 2)? as usize;
            if total < ihl || total > pkt.len() {
                return Err(ParseError::BadIpLength {
                    said: total,
                    have: pkt.len(),
                });
            }
            if be16(pkt, 6)? & 0x3fff != 0 {
                return Err(ParseError::Fragment);
            }
            if pkt[9] != 17 {
                return Err(ParseError::NotUdp(pkt[9]));
            }
            let s = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
            let d = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            let mut ps = sum(&pkt[12..20], 0);
            ps += 17 + (total - ihl) as u32;
            (Addr::V4(s), Addr::V4(d), ihl, total, ps)
        }
        6 => {
            if pkt.len() < 40 {
                return Err(ParseError::Truncated {
                    need: 40,
                    len: pkt.len(),
                });
            }
            let plen = be16(pkt, 4)? as usize;
            if 40 + plen > pkt.len() {
                return Err(ParseError::BadIpLength {
                    said: 40 + plen,
                    have: pkt.len(),
                });
            }
            // Extension headers are not followed: a datagram behind one is not ours to parse.
            if pkt[6] != 17 {
                return Err(ParseError::NotUdp(pkt[6]));
            }
            let mut s = [0u8; 16];
            s.copy_from_slice(&pkt[8..24]);
            let mut d = [0u8; 16];
            d.copy_from_slice(&pkt[24..40]);
            let mut ps = sum(&pkt[8..40], 0);
            ps += 17 + plen as u32;
            (
                Addr::V6(Ipv6Addr::from(s)),
                Addr::V6(Ipv6Addr::from(d)),
                40,
                40 + plen,
                ps,
            )
        }
        v => return Err(ParseError::BadVersion(v)),
    };
    let sport = be16(pkt, l4)?;
    let dport = be16(pkt, l4 + 2)?;
    let ulen = be16(pkt, l4 + 4)? as usize;
    let csum = be16(pkt, l4 + 6)?;
    let have = l4_end - l4;
    if ulen < 8 || ulen > have {
        return Err(ParseError::BadUdpLength {
            at: l4 + 4,
            said: ulen,
            have,
        });
    }
    let is_v4 = matches!(src, Addr::V4(_));
    // IPv4 checksum 0: none sent. IPv6 requires one (0 is invalid there).
    if verify_csum && !(is_v4 && csum == 0) {
        let s = fold(sum(&pkt[l4..l4 + ulen], pseudo));
        if s != 0xffff {
            return Err(ParseError::BadChecksum { at: l4 + 6 });
        }
    }
    Ok(Datagram {
        src,
        dst,
        sport,
        dport,
        payload: l4 + 8..l4 + ulen,
    })
}

fn sum(b: &[u8], mut acc: u32) -> u32 {
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u16::from_be_bytes([c[0], c[1]]) as u32);
        if acc > 0xffff_0000 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add((*last as u32) << 8);
    }
    acc
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4/UDP packet with a correct checksum.
    fn v4(payload: &[u8], sport: u16, dport: u16) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
            0,
            0,
            127,
            0,
            0,
            2,
            127,
            0,
            0,
            1,
        ];
        let ulen = 8 + payload.len();
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&(ulen as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        let ps = sum(&p[12..20], 17 + ulen as u32);
        let c = !fold(sum(&p[20..], ps));
        p[26..28].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn a_v4_datagram_parses_and_its_checksum_verifies() {
        let p = v4(b"hello", 4000, 53);
        let d = parse(&p, true).unwrap();
        assert_eq!(d.sport, 4000);
        assert_eq!(d.dport, 53);
        assert_eq!(d.src, Addr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(d.dst, Addr::V4(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(&p[d.payload], b"hello");
    }

    #[test]
    fn a_corrupted_byte_fails_the_checksum_with_its_offset() {
        let mut p = v4(b"hello", 4000, 53);
        p[30] ^= 1;
        assert_eq!(parse(&p, true), Err(ParseError::BadChecksum { at: 26 }));
        assert!(
            parse(&p, false).is_ok(),
            "unverified (loopback) checksums are not checked"
        );
    }

    #[test]
    fn fragments_and_other_protocols_are_refused() {
        let mut p = v4(b"x", 1, 2);
        p[6] = 0x20; // more fragments
        assert_eq!(parse(&p, false), Err(ParseError::Fragment));
        let mut p = v4(b"x", 1, 2);
        p[9] = 6;
        assert_eq!(parse(&p, false), Err(ParseError::NotUdp(6)));
    }

    #[test]
    fn a_udp_length_beyond_the_packet_is_named() {
        let mut p = v4(b"abc", 1, 2);
        p[24] = 0;
        p[25] = 200;
        assert_eq!(
            parse(&p, false),
            Err(ParseError::BadUdpLength {
                at: 24,
                said: 200,
                have: 11
            })
        );
    }

    proptest! {
        #[test]
        fn hostile_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..120), verify in any::<bool>()) {
            if let Ok(d) = parse(&b, verify) {
                prop_assert!(d.payload.end <= b.len());
                prop_assert!(d.payload.start <= d.payload.end);
            }
        }

        #[test]
        fn mutated_valid_packets_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..64), at in 0usize..92, val in any::<u8>(), cut in 0usize..100) {
            let mut p = v4(&payload, 1234, 53);
            let at = at % p.len();
            p[at] = val;
            p.truncate(cut.min(p.len()));
            if let Ok(d) = parse(&p, true) {
                prop_assert!(d.payload.end <= p.len());
            }
        }

        #[test]
        fn valid_packets_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..200), sp in any::<u16>(), dp in any::<u16>()) {
            let p = v4(&payload, sp, dp);
            let d = parse(&p, true).unwrap();
            prop_assert_eq!((d.sport, d.dport), (sp, dp));
            prop_assert_eq!(&p[d.payload], &payload[..]);
        }
    }
}
