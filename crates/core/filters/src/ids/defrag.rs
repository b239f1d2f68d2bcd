//! IP defragmentation for inspection, IPv4 and IPv6: a datagram sent in fragments is
//! inspected whole, so a pattern split across fragments is found. Conservative as the TCP
//! reassembly is: a fragment that overlaps earlier bytes of its datagram with other bytes
//! is an evasion attempt ([`Overlap`]), and the engine alerts. Pending datagrams are
//! bounded in number and age (the oldest go first, counted).
//!
//! Owns: the pending datagrams, keyed by (source, destination, protocol, identification)
//! (IPv6: RFC 8200 §4.5 keys on source, destination and identification, so its protocol
//! is 0 in the key), and reading an IPv6 packet's fragment header ([`ipv6_fragment`]).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};

/// Datagrams pending at once; the oldest is forgotten to make room.
pub const PENDING_MAX: usize = 4096;
/// Bytes of one datagram (IPv4's limit).
const DATAGRAM_MAX: usize = 65_535;
/// A datagram not complete after this long is forgotten (Linux's ipfrag_time: 30 s).
pub const TIMEOUT_NS: u64 = 30_000_000_000;

type Key = (IpAddr, IpAddr, u8, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap;

#[derive(Default)]
struct Pending {
    /// Fragments by offset (bytes).
    parts: BTreeMap<usize, Vec<u8>>,
    /// The datagram's length, once the last fragment (no MF) came.
    total: Option<usize>,
    first_ns: u64,
}

/// What a fragment did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// More fragments are needed.
    Pending,
    /// The datagram is whole: its IP payload.
    Whole(Vec<u8>),
    /// It overlaps earlier bytes with other bytes: the datagram is dropped.
    Overlap(Overlap),
    /// It cannot be part of a datagram (beyond 65,535 bytes, or a last fragment that
    /// contradicts another): dropped, counted by the caller.
    Bad,
}

#[derive(Default)]
pub struct Defrag {
    pending: HashMap<Key, Pending>,
    /// Datagrams forgotten: incomplete when the table was full, or too old.
    pub expired: u64,
}

impl Defrag {
    /// A fragment of datagram `id` from `src` to `dst` (protocol `proto`; 0 for IPv6):
    /// `data` at byte `offset` of its IP payload (IPv6: of its fragmentable part), `more`
    /// the MF (M) flag.
    #[allow(clippy::too_many_arguments)]
    pub fn fragment(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        id: u32,
        offset: usize,
        more: bool,
        data: &[u8],
        ts_ns: u64,
    ) -> Step {
        let end = offset + data.len();
        if end > DATAGRAM_MAX {
            return Step::Bad;
        }
        self.expire(ts_ns);
        let key = (src, dst, proto, id);
        if !self.pending.contains_key(&key) && self.pending.len() >= PENDING_MAX {
            if let Some(oldest) = self
                .pending
                .iter()
                .min_by_key(|(_, p)| p.first_ns)
                .map(|(k, _)| *k)
            {
                self.pending.remove(&oldest);
                self.expired += 1;
            }
        }
        let p = self.pending.entry(key).or_insert_with(|| Pending {
            first_ns: ts_ns,
            ..Pending::default()
        });
        if !more {
            if p.total.is_some_and(|t| t != end) || p.parts.iter().any(|(o, d)| o + d.len() > end) {
                self.pending.remove(&key);
                return Step::Bad;
            }
            p.total = Some(end);
        } else if p.total.is_some_and(|t| end > t) {
            self.pending.remove(&key);
            return Step::Bad;
        }
        // Bytes this fragment shares with earlier ones must be the same.
        for (&o, d) in p.parts.range(..end) {
            let (lo, hi) = (offset.max(o), end.min(o + d.len()));
            if lo < hi && data[lo - offset..hi - offset] != d[lo - o..hi - o] {
                self.pending.remove(&key);
                return Step::Overlap(Overlap);
            }
        }
        let keep = p.parts.get(&offset).map_or(0, Vec::len);
        if data.len() > keep {
            p.parts.insert(offset, data.to_vec());
        }
        let Some(total) = p.total else {
            return Step::Pending;
        };
        // Whole when the parts cover 0..total without a gap.
        let mut covered = 0;
        for (&o, d) in &p.parts {
            if o > covered {
                return Step::Pending;
            }
            covered = covered.max(o + d.len());
        }
        if covered < total {
            return Step::Pending;
        }
        let p = self.pending.remove(&key).expect("present");
        let mut whole = vec![0u8; total];
        for (o, d) in p.parts {
            whole[o..o + d.len()].copy_from_slice(&d);
        }
        Step::Whole(whole)
    }

    fn expire(&mut self, now: u64) {
        let before = self.pending.len();
        self.pending
            .retain(|_, p| now.saturating_sub(p.first_ns) < TIMEOUT_NS);
        self.expired += (before - self.pending.len()) as u64;
    }
}

/// An IPv6 fragment, as its fragment header says.
#[derive(Debug, PartialEq, Eq)]
pub struct V6Fragment<'a> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    /// The fragment header's next header: the fragmentable part's first header.
    pub next: u8,
    pub id: u32,
    /// Bytes into the fragmentable part.
    pub offset: usize,
    pub more: bool,
    /// This fragment's bytes of the fragmentable part.
    pub data: &'a [u8],
}

/// IPv6 extension headers that come before a fragment header and are walked over:
/// hop-by-hop options, routing, destination options (RFC 8200 §4.1).
const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DEST_OPTS: u8 = 60;

/// The fragment header of IPv6 packet `ip` (from its fixed header on), walking the
/// extension headers before it; None for a packet that is not a fragment or is cut short.
pub fn ipv6_fragment(ip: &[u8]) -> Option<V6Fragment<'_>> {
    if ip.len() < 40 || ip[0] >> 4 != 6 {
        return None;
    }
    let end = (40 + u16::from_be_bytes([ip[4], ip[5]]) as usize).min(ip.len());
    let addr = |at: usize| -> Option<Ipv6Addr> {
        Some(Ipv6Addr::from(<[u8; 16]>::try_from(ip.get(at..at + 16)?).ok()?))
    };
    let (src, dst) = (addr(8)?, addr(24)?);
    let (mut next, mut at) = (ip[6], 40);
    loop {
        match next {
            HOP_BY_HOP | ROUTING | DEST_OPTS => {
                let h = ip.get(at..at + 2)?;
                next = h[0];
                at += (h[1] as usize + 1) * 8;
            }
            FRAGMENT => {
                let h = ip.get(at..at + 8)?;
                let word = u16::from_be_bytes([h[2], h[3]]);
                return Some(V6Fragment {
                    src,
                    dst,
                    next: h[0],
                    id: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                    offset: (word >> 3) as usize * 8,
                    more: word & 1 == 1,
                    data: ip.get(at + 8..end)?,
                });
            }
            _ => return None,
        }
    }
}

/// Past the IPv6 extension headers at the start of a reassembled fragmentable part whose
/// first header is `next`: the upper-layer protocol and where its header starts.
pub fn ipv6_upper(whole: &[u8], mut next: u8) -> (u8, usize) {
    let mut at = 0;
    while matches!(next, HOP_BY_HOP | ROUTING | DEST_OPTS) {
        let Some(h) = whole.get(at..at + 2) else {
            break;
        };
        next = h[0];
        at += (h[1] as usize + 1) * 8;
    }
    (next, at.min(whole.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    /// An IPv6 packet from A6 to B6 with a destination-options header, then a fragment
    /// header (next header UDP) for `data` at `offset`.
    fn v6(id: u32, offset: usize, more: bool, data: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&((8 + 8 + data.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[DEST_OPTS, 64]);
        p.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&[FRAGMENT, 0, 1, 4, 0, 0, 0, 0]);
        let word = ((offset / 8) as u16) << 3 | more as u16;
        p.extend_from_slice(&[17, 0]);
        p.extend_from_slice(&word.to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn an_ipv6_fragment_header_is_found_past_other_extension_headers() {
        let p = v6(0xdead_beef, 24, true, b"payload!");
        let f = ipv6_fragment(&p).expect("a fragment");
        assert_eq!(
            (f.next, f.id, f.offset, f.more, f.data),
            (17, 0xdead_beef, 24, true, &b"payload!"[..])
        );
        assert_eq!(f.src, "fd00::1".parse::<Ipv6Addr>().unwrap());
        // Not a fragment, cut short, not IPv6: none.
        let mut plain = p.clone();
        plain[6] = 17;
        assert_eq!(ipv6_fragment(&plain), None);
        assert_eq!(ipv6_fragment(&p[..50]), None);
        assert_eq!(ipv6_fragment(&p[..20]), None);
        let mut v4 = p.clone();
        v4[0] = 0x45;
        assert_eq!(ipv6_fragment(&v4), None);
    }

    #[test]
    fn ipv6_fragments_reassemble_keyed_by_addresses_and_32_bit_id() {
        let mut d = Defrag::default();
        let (a, b) = (
            IpAddr::V6("fd00::1".parse().unwrap()),
            IpAddr::V6("fd00::2".parse().unwrap()),
        );
        assert_eq!(d.fragment(a, b, 0, 1 << 20, 8, false, b"tail", 0), Step::Pending);
        // The same 16 low bits of another id are another datagram.
        assert_eq!(d.fragment(a, b, 0, 0, 0, true, b"other!!!", 0), Step::Pending);
        assert_eq!(
            d.fragment(a, b, 0, 1 << 20, 0, true, b"01234567", 1),
            Step::Whole(b"01234567tail".to_vec())
        );
        // Past a destination-options header at the start of the whole: the upper layer.
        let whole = [17u8, 0, 1, 4, 0, 0, 0, 0, 0xaa];
        assert_eq!(ipv6_upper(&whole, DEST_OPTS), (17, 8));
        assert_eq!(ipv6_upper(&whole, 6), (6, 0));
    }

    #[test]
    fn fragments_in_any_order_make_the_datagram() {
        let mut d = Defrag::default();
        assert_eq!(
            d.fragment(A, B, 17, 7, 16, false, b"tail", 0),
            Step::Pending
        );
        assert_eq!(
            d.fragment(A, B, 17, 7, 0, true, b"0123456789abcdef", 1),
            Step::Whole(b"0123456789abcdeftail".to_vec())
        );
        // Another datagram with a gap stays pending.
        assert_eq!(
            d.fragment(A, B, 17, 8, 0, true, b"01234567", 2),
            Step::Pending
        );
        assert_eq!(d.fragment(A, B, 17, 8, 16, false, b"x", 3), Step::Pending);
        // The same bytes twice are fine; others over them are not.
        assert_eq!(
            d.fragment(A, B, 17, 8, 0, true, b"01234567", 4),
            Step::Pending
        );
        assert_eq!(
            d.fragment(A, B, 17, 8, 4, true, b"XXXX", 5),
            Step::Overlap(Overlap)
        );
    }

    #[test]
    fn contradictions_and_age_are_refused() {
        let mut d = Defrag::default();
        assert_eq!(
            d.fragment(A, B, 6, 1, 8, false, b"12345678", 0),
            Step::Pending
        );
        assert_eq!(d.fragment(A, B, 6, 1, 16, true, b"beyond", 1), Step::Bad);
        assert_eq!(
            d.fragment(A, B, 6, 2, 65_530, false, b"123456", 1),
            Step::Bad
        );
        assert_eq!(d.fragment(A, B, 6, 3, 8, false, b"late", 0), Step::Pending);
        assert_eq!(
            d.fragment(A, B, 6, 3, 0, true, b"01234567", TIMEOUT_NS + 1),
            Step::Pending
        );
        assert_eq!(d.expired, 1);
    }
}
