//! A frame as the flow cache sees it: its flow key (both directions of a conversation in
//! one key, as softflowd keeps them), which direction it goes, and what it adds to the
//! flow's counters.
//!
//! Owns the rules of what a packet contributes: the key is the IP version, the two
//! addresses, the two ports (ICMP: type and code as the destination port,
//! `type * 256 + code`, as routers and softflowd report them; later fragments: ports 0,
//! they carry none), the protocol (IPv6: after the extension headers, and a fragment's
//! next header) and the VLAN. Octets are the IP packet's length (RFC 7012
//! octetDeltaCount: IP header and payload, never link-layer padding); TCP control bits
//! are the header's 9 flag bits (the NS bit above the 8 of byte 13).

use crate::packet::link_layer;
use etherparse::LaxIpSlice;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// A conversation: the addresses and ports in a canonical order (the lower address
/// first, as bytes), so both directions of it find the same entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// IPv4 addresses in the first 4 bytes.
    pub addr: [[u8; 16]; 2],
    pub port: [u16; 2],
    pub proto: u8,
    pub v6: bool,
    /// The outer 802.1Q VLAN ID (0: untagged).
    pub vlan: u16,
}

/// One packet's part in its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Obs {
    pub key: Key,
    /// 0: from `key.addr[0]` to `key.addr[1]`; 1: the other way.
    pub dir: usize,
    pub octets: u64,
    /// TCP flags (with NS as bit 8); 0 for other protocols.
    pub flags: u16,
    pub tos: u8,
}

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMPV6: u8 = 58;
pub const SCTP: u8 = 132;
/// TCP flag bits (RFC 7012 tcpControlBits).
pub const FIN: u16 = 0x01;
pub const RST: u16 = 0x04;

/// Looks through up to two VLAN tags of an Ethernet frame: the ethertype inside, where it
/// starts, and the outer tag's VLAN ID.
fn inside_vlans(data: &[u8], mut et: u16, mut at: usize) -> Option<(u16, usize, u16)> {
    let mut vlan = 0;
    for depth in 0..2 {
        if et != ETHERTYPE_VLAN && et != ETHERTYPE_QINQ {
            break;
        }
        let tag = data.get(at..at + 4)?;
        if depth == 0 {
            vlan = u16::from_be_bytes([tag[0], tag[1]]) & 0x0fff;
        }
        et = u16::from_be_bytes([tag[2], tag[3]]);
        at += 4;
    }
    Some((et, at, vlan))
}

/// The frame `data` of link type `link` (pcap LINKTYPE) as the flow cache sees it; None
/// for frames that carry no IP packet (ARP, ...) or too little of one to say whose it is.
/// `wire_len` is the frame's length on the wire, used when the IP header gives none (an
/// IPv6 jumbogram, a segmentation-offloaded IPv4 packet with length 0).
pub fn observe(data: &[u8], link: u32, wire_len: u64) -> Option<Obs> {
    let (et, at) = link_layer(data, link)?;
    let (et, at, vlan) = if link == crate::packet::LINKTYPE_ETHERNET {
        inside_vlans(data, et, at)?
    } else {
        (et, at, 0)
    };
    if et != ETHERTYPE_IPV4 && et != ETHERTYPE_IPV6 {
        return None;
    }
    let (ip, _) = LaxIpSlice::from_slice(data.get(at..)?).ok()?;
    let beyond = wire_len.saturating_sub(at as u64);
    let (src, dst, v6, octets, tos, proto, first, l4): (
        [u8; 16],
        [u8; 16],
        bool,
        u64,
        u8,
        u8,
        bool,
        &[u8],
    ) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            let p = v4.payload();
            let len = match h.total_len() {
                0 => beyond,
                n => n as u64,
            };
            (
                widen(h.source()),
                widen(h.destination()),
                false,
                len,
                h.slice()[1],
                h.protocol().0,
                h.fragments_offset().value() == 0,
                p.payload,
            )
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            let p = v6.payload();
            let len = match h.payload_length() {
                0 => beyond,
                n => 40 + n as u64,
            };
            let tc = (h.slice()[0] << 4) | (h.slice()[1] >> 4);
            (
                h.source(),
                h.destination(),
                true,
                len,
                tc,
                p.ip_number.0,
                first_fragment(h.next_header().0, v6.extensions().slice()),
                p.payload,
            )
        }
    };
    let (sport, dport, flags) = if !first {
        (0, 0, 0)
    } else {
        transport(proto, l4)
    };
    let dir = usize::from(src > dst);
    let mut addr = [[0u8; 16]; 2];
    let mut port = [0u16; 2];
    (addr[dir], addr[dir ^ 1]) = (src, dst);
    (port[dir], port[dir ^ 1]) = (sport, dport);
    Some(Obs {
        key: Key {
            addr,
            port,
            proto,
            v6,
            vlan,
        },
        dir,
        octets,
        flags,
        tos,
    })
}

fn widen(a: [u8; 4]) -> [u8; 16] {
    let mut w = [0u8; 16];
    w[..4].copy_from_slice(&a);
    w
}

/// Whether the IPv6 packet is not a later fragment (its payload starts with the
/// transport header): the extension headers (`exts`, after a fixed header whose next
/// header is `next`) walked to a fragment header, whose offset must be 0.
fn first_fragment(next: u8, exts: &[u8]) -> bool {
    let (mut nh, mut at) = (next, 0usize);
    while let Some(h) = exts.get(at..).filter(|h| h.len() >= 2) {
        match nh {
            0 | 43 | 60 => at += (h[1] as usize + 1) * 8,
            51 => at += (h[1] as usize + 2) * 4,
            44 => {
                return h
                    .get(2..4)
                    .is_none_or(|b| u16::from_be_bytes([b[0], b[1]]) >> 3 == 0)
            }
            _ => break,
        }
        nh = h[0];
    }
    true
}

/// Source port, destination port and TCP flags of a transport header (ICMP: 0 and
/// `type * 256 + code`).
fn transport(proto: u8, h: &[u8]) -> (u16, u16, u16) {
    let be = |i: usize| {
        h.get(i..i + 2)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
    };
    match proto {
        TCP => {
            let flags = match (h.get(12), h.get(13)) {
                (Some(&off), Some(&f)) => (u16::from(off & 1) << 8) | u16::from(f),
                _ => 0,
            };
            (be(0), be(2), flags)
        }
        UDP | SCTP | 33 /* DCCP */ | 136 /* UDP-Lite */ => (be(0), be(2), 0),
        ICMP | ICMPV6 => (0, be(0), 0),
        _ => (0, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    #[test]
    fn both_directions_of_a_tcp_connection_share_a_key() {
        let mk = |src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16| {
            let b = PacketBuilder::ethernet2([1; 6], [2; 6])
                .ipv4(src, dst, 64)
                .tcp(sp, dp, 1, 100)
                .syn();
            let mut v = Vec::new();
            b.write(&mut v, b"hi").unwrap();
            v
        };
        let a = mk([10, 0, 0, 2], [10, 0, 0, 1], 40000, 80);
        let b = mk([10, 0, 0, 1], [10, 0, 0, 2], 80, 40000);
        let (oa, ob) = (
            observe(&a, 1, a.len() as u64).unwrap(),
            observe(&b, 1, b.len() as u64).unwrap(),
        );
        assert_eq!(oa.key, ob.key);
        assert_eq!((oa.dir, ob.dir), (1, 0));
        assert_eq!(oa.key.port, [80, 40000]);
        assert_eq!(oa.octets, 20 + 20 + 2);
        assert_eq!(oa.flags, 0x02);
    }

    #[test]
    fn padding_is_not_counted_and_vlans_are_seen_through() {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .single_vlan(etherparse::VlanId::try_new(42).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(5000, 53);
        let mut v = Vec::new();
        b.write(&mut v, b"q").unwrap();
        v.resize(64, 0); // Ethernet padding
        let o = observe(&v, 1, 64).unwrap();
        assert_eq!((o.key.vlan, o.key.proto, o.octets), (42, UDP, 20 + 8 + 1));
        assert_eq!(o.key.port, [5000, 53]);
    }

    #[test]
    fn icmp_reports_type_and_code_as_the_destination_port() {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .icmpv4_echo_request(7, 1);
        let mut v = Vec::new();
        b.write(&mut v, &[0; 8]).unwrap();
        let o = observe(&v, 1, v.len() as u64).unwrap();
        assert_eq!((o.key.proto, o.key.port), (ICMP, [0, 8 * 256]));
    }

    #[test]
    fn later_ipv6_fragments_have_no_ports_but_keep_the_protocol() {
        // fd99::1 -> fd99::2, a fragment header (offset 1448, more fragments) of UDP.
        let mut v = vec![0u8; 14];
        v[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut ip = vec![0x60, 0, 0, 0, 0, 16, 44, 64];
        ip.extend_from_slice(&[0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip.extend_from_slice(&[0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let off: u16 = (1448 / 8) << 3 | 1;
        ip.extend_from_slice(&[17, 0, (off >> 8) as u8, off as u8, 0, 0, 0, 9]);
        ip.extend_from_slice(&[0x12, 0x34, 0x00, 0x35, 0, 0, 0, 0]);
        v.extend_from_slice(&ip);
        let o = observe(&v, 1, v.len() as u64).unwrap();
        assert_eq!(
            (o.key.proto, o.key.port, o.octets, o.key.v6),
            (UDP, [0, 0], 56, true)
        );
        // The first fragment (offset 0) has them.
        let at = 14 + 40 + 2;
        v[at..at + 2].copy_from_slice(&[0, 1]);
        let o = observe(&v, 1, v.len() as u64).unwrap();
        assert_eq!(o.key.port, [0x1234, 0x35]);
    }

    #[test]
    fn frames_without_ip_are_not_observed() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(observe(&arp, 1, 42), None);
        assert_eq!(observe(&[], 1, 0), None);
    }

    proptest::proptest! {
        /// Any bytes of any link type: an observation or None, never a panic.
        #[test]
        fn arbitrary_frames_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), link in proptest::sample::select(crate::packet::LINKTYPES.to_vec())) {
            let _ = observe(&data, link, data.len() as u64);
        }

        /// Both directions of any TCP or UDP exchange, IPv4 or IPv6, share one key, and
        /// each says its own direction.
        #[test]
        fn both_directions_share_a_key(a in proptest::prelude::any::<[u8; 16]>(), b in proptest::prelude::any::<[u8; 16]>(), sp in 1u16.., dp in 1u16.., v6 in proptest::prelude::any::<bool>(), udp in proptest::prelude::any::<bool>()) {
            proptest::prop_assume!(a != b && (v6 || a[..4] != b[..4]));
            let mk = |s: [u8; 16], d: [u8; 16], sp: u16, dp: u16| {
                let e = PacketBuilder::ethernet2([1; 6], [2; 6]);
                let ip = if v6 { e.ipv6(s, d, 64) } else { e.ipv4([s[0], s[1], s[2], s[3]], [d[0], d[1], d[2], d[3]], 64) };
                let mut v = Vec::new();
                if udp { ip.udp(sp, dp).write(&mut v, b"x").unwrap() } else { ip.tcp(sp, dp, 1, 10).write(&mut v, b"x").unwrap() }
                v
            };
            let (f, r) = (mk(a, b, sp, dp), mk(b, a, dp, sp));
            let (of, or) = (observe(&f, 1, f.len() as u64).unwrap(), observe(&r, 1, r.len() as u64).unwrap());
            proptest::prop_assert_eq!(of.key, or.key);
            proptest::prop_assert_eq!(of.dir ^ 1, or.dir);
            proptest::prop_assert_eq!(of.key.port[of.dir], sp);
        }
    }
}
