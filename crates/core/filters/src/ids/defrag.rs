//! IPv4 defragmentation for inspection: a datagram sent in fragments is inspected whole,
//! so a pattern split across fragments is found. Conservative as the TCP reassembly is:
//! a fragment that overlaps earlier bytes of its datagram with other bytes is an evasion
//! attempt ([`Overlap`]), and the engine alerts. Pending datagrams are bounded in number
//! and age (the oldest go first, counted).
//!
//! Owns: the pending datagrams, keyed by (source, destination, protocol, identification).

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

/// Datagrams pending at once; the oldest is forgotten to make room.
pub const PENDING_MAX: usize = 4096;
/// Bytes of one datagram (IPv4's limit).
const DATAGRAM_MAX: usize = 65_535;
/// A datagram not complete after this long is forgotten (Linux's ipfrag_time: 30 s).
pub const TIMEOUT_NS: u64 = 30_000_000_000;

type Key = (Ipv4Addr, Ipv4Addr, u8, u16);

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
    /// A fragment of datagram `id` from `src` to `dst` (protocol `proto`): `data` at byte
    /// `offset` of its IP payload, `more` the MF flag.
    #[allow(clippy::too_many_arguments)]
    pub fn fragment(
        &mut self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        id: u16,
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

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
