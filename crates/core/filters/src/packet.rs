//! Zero-copy packet views shared by the protocol filters: one parse of a frame with
//! etherparse, giving addresses, ports and the payload as a range of the block (so filters
//! can crop to it with a metadata edit).
//!
//! Owns the link layers the protocol filters understand, named by a capture's link type
//! (pcap LINKTYPE_*, mapped to libpcap's DLT with [`kernel::cbpf::linktype_to_dlt`]):
//! Ethernet, with 802.1Q / 802.1ad VLAN tags (one or two; the filters look through them),
//! Linux cooked captures v1 and v2 (`tcpdump -i any`), raw IP (LINKTYPE_RAW 101, DLT_RAW
//! 12 and OpenBSD's 14, LINKTYPE_IPV4 228 and IPV6 229), and BSD loopback (NULL 0 in
//! either byte order, LOOP 108) with the address families libpcap knows (2 for IPv4; 24,
//! 28, 30 for IPv6).

use dataplane::{Ctx, Tag};
use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice, VlanSlice};
use kernel::cbpf::linktype_to_dlt;
use std::net::IpAddr;

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;
/// Every link type [`parse`] understands (DLT_RAW's 12 and 14 included).
pub const LINKTYPES: &[u32] = &[
    LINKTYPE_NULL,
    LINKTYPE_ETHERNET,
    12,
    14,
    LINKTYPE_RAW,
    LINKTYPE_LOOP,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL2,
];

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

/// Link-layer header fields, smoltcp style.
mod field {
    use std::ops::Range;
    /// Ethernet: the type after the two addresses; 14-byte header.
    pub const ETH_TYPE: Range<usize> = 12..14;
    pub const ETH_LEN: usize = 14;
    /// Linux cooked v1: packet type, ARPHRD, address length, address; then the protocol.
    pub const SLL_PROTOCOL: Range<usize> = 14..16;
    pub const SLL_LEN: usize = 16;
    /// Linux cooked v2: the protocol first; 20-byte header.
    pub const SLL2_PROTOCOL: Range<usize> = 0..2;
    pub const SLL2_LEN: usize = 20;
    /// BSD loopback: a 4-byte address family.
    pub const LOOP_FAMILY: Range<usize> = 0..4;
    pub const LOOP_LEN: usize = 4;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        syn: bool,
        fin: bool,
        rst: bool,
        ack: bool,
    },
    Udp {
        sport: u16,
        dport: u16,
    },
    Icmp4 {
        kind: u8,
        code: u8,
    },
    Icmp6 {
        kind: u8,
        code: u8,
    },
    Other,
    None,
}

/// What a frame contains.
#[derive(Debug, Clone, Copy)]
pub struct Pkt {
    pub ether_type: Option<u16>,
    pub ip: Option<(u8, IpAddr, IpAddr, u8)>, // (version, src, dst, protocol)
    pub l4: L4,
    /// Transport payload (or IP payload for other protocols) as (offset, len) in the block.
    pub payload: (usize, usize),
    pub fragmented: bool,
    /// The protocol field of the IP header itself (IPv6: the fixed header's next header,
    /// or a fragment header's), as libpcap's `ip proto` / `ip6 proto` test it: set for
    /// every fragment, not looking through other IPv6 extension headers.
    pub ip_proto_field: Option<u8>,
    /// TCP or UDP ports, also of a segment whose header the capture cut short after them
    /// (libpcap's `port` reads only those 4 bytes) and of a first fragment.
    pub port_pair: Option<(u16, u16)>,
}

impl Pkt {
    /// (source, destination) ports of TCP and UDP packets.
    pub fn ports(&self) -> Option<(u16, u16)> {
        self.port_pair
    }
    pub fn proto(&self) -> Option<u8> {
        self.ip.map(|i| i.3)
    }
}

fn offset(base: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).saturating_sub(base.as_ptr() as usize)
}

fn be16(data: &[u8], r: std::ops::Range<usize>) -> Option<u16> {
    let b = data.get(r)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// The ethertype of what follows a BSD loopback header's address family (in the byte
/// order of the host that captured, which may be either).
fn loopback_ethertype(data: &[u8]) -> Option<u16> {
    let b: [u8; 4] = data.get(field::LOOP_FAMILY)?.try_into().ok()?;
    let family = |af: u32| match af {
        2 => Some(ETHERTYPE_IPV4),
        24 | 28 | 30 => Some(ETHERTYPE_IPV6),
        _ => None,
    };
    family(u32::from_le_bytes(b)).or_else(|| family(u32::from_be_bytes(b)))
}

/// The link layer of a frame of link type `link`: the ethertype of what follows it and
/// where that starts. None for link types we do not know and frames too short to say.
pub fn link_layer(data: &[u8], link: u32) -> Option<(u16, usize)> {
    match linktype_to_dlt(link) {
        1 => Some((be16(data, field::ETH_TYPE)?, field::ETH_LEN)),
        // DLT_RAW (12 here, 14 on OpenBSD): the IP version says which.
        12 | 14 => match data.first()? >> 4 {
            4 => Some((ETHERTYPE_IPV4, 0)),
            6 => Some((ETHERTYPE_IPV6, 0)),
            _ => None,
        },
        228 => Some((ETHERTYPE_IPV4, 0)),
        229 => Some((ETHERTYPE_IPV6, 0)),
        113 => Some((be16(data, field::SLL_PROTOCOL)?, field::SLL_LEN)),
        276 => Some((be16(data, field::SLL2_PROTOCOL)?, field::SLL2_LEN)),
        0 | 108 => Some((loopback_ethertype(data)?, field::LOOP_LEN)),
        _ => None,
    }
}

/// Parse `data` as a frame of link type `link` (Ethernet when unknown). Lengths are
/// checked laxly, as libpcap's filters do: a packet the capture cut short (a snap length)
/// still has the headers it holds.
pub fn parse(data: &[u8], link: Option<u32>) -> Option<Pkt> {
    let (et, at) = link_layer(data, link.unwrap_or(LINKTYPE_ETHERNET))?;
    let sp = LaxSlicedPacket::from_ether_type(EtherType(et), data.get(at..)?);
    // The type of what the link layer carries, inside VLAN tags.
    let ether_type = Some(match sp.vlan() {
        Some(VlanSlice::SingleVlan(v)) => v.ether_type().0,
        Some(VlanSlice::DoubleVlan(v)) => v.inner.ether_type().0,
        None => et,
    });
    // Where a TCP or UDP header would start when ports are to be read there: IPv4 not a
    // later fragment, IPv6 with TCP or UDP right after the fixed header.
    let (ip, fragmented, ip_payload, field, l4_at) = match &sp.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            let p = v4.payload();
            let first = h.fragments_offset().value() == 0;
            (
                Some((
                    4u8,
                    IpAddr::V4(h.source_addr()),
                    IpAddr::V4(h.destination_addr()),
                    p.ip_number.0,
                )),
                p.fragmented,
                Some(p.payload),
                Some(h.protocol().0),
                first.then_some(p.payload),
            )
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            let p = v6.payload();
            // libpcap's `ip6 proto N` also looks through a fragment header (44).
            let mut field = h.next_header().0;
            if field == 44 {
                let at = offset(data, h.slice()) + 40;
                field = data.get(at).copied().unwrap_or(field);
            }
            let direct = matches!(h.next_header().0, 6 | 17);
            (
                Some((
                    6u8,
                    IpAddr::V6(h.source_addr()),
                    IpAddr::V6(h.destination_addr()),
                    p.ip_number.0,
                )),
                p.fragmented,
                Some(p.payload),
                Some(field),
                direct.then_some(p.payload),
            )
        }
        // ARP (which etherparse parses as a network layer of its own) is not IP.
        Some(LaxNetSlice::Arp(_)) | None => (None, false, None, None, None),
    };
    let (l4, payload) = match &sp.transport {
        Some(TransportSlice::Tcp(t)) => (
            L4::Tcp {
                sport: t.source_port(),
                dport: t.destination_port(),
                seq: t.sequence_number(),
                syn: t.syn(),
                fin: t.fin(),
                rst: t.rst(),
                ack: t.ack(),
            },
            t.payload(),
        ),
        Some(TransportSlice::Udp(u)) => (
            L4::Udp {
                sport: u.source_port(),
                dport: u.destination_port(),
            },
            u.payload(),
        ),
        Some(TransportSlice::Icmpv4(i)) => (
            L4::Icmp4 {
                kind: i.type_u8(),
                code: i.code_u8(),
            },
            i.payload(),
        ),
        Some(TransportSlice::Icmpv6(i)) => (
            L4::Icmp6 {
                kind: i.type_u8(),
                code: i.code_u8(),
            },
            i.payload(),
        ),
        None => match ip_payload {
            Some(p) => (L4::Other, p),
            None => (L4::None, &data[data.len()..]),
        },
    };
    let port_pair = match l4 {
        L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => Some((sport, dport)),
        _ => match (field, l4_at) {
            (Some(6 | 17), Some(h)) if h.len() >= 4 => Some((
                u16::from_be_bytes([h[0], h[1]]),
                u16::from_be_bytes([h[2], h[3]]),
            )),
            _ => None,
        },
    };
    Some(Pkt {
        ether_type,
        ip,
        l4,
        payload: (offset(data, payload), payload.len()),
        fragmented,
        ip_proto_field: field,
        port_pair,
    })
}

/// Parse the block a tag points to, if it is a whole frame (not cropped by an earlier
/// filter). Blocks without record metadata (gen, file) are parsed as Ethernet frames.
/// The result is memoized with the block in the space's store, so a chain of protocol
/// filters (`tcp | dport |80`) parses each frame once, while its bytes are still in cache.
pub fn parse_tag(cx: &Ctx<'_>, t: &Tag) -> Option<Pkt> {
    parse_in(cx.store, t)
}

/// [`parse_tag`] for a block of `store` (a sink that holds no context, e.g. a transport).
pub fn parse_in(store: &dataplane::Store, t: &Tag) -> Option<Pkt> {
    store.memo(t, || {
        if let Some((_, whole)) = store.record(t) {
            if !whole {
                return None;
            }
        }
        parse(store.data(t).ok()?, store.link(t))
    })
}

/// The application payload of a block: the transport payload of a whole frame, or the
/// block itself when an earlier filter already cropped it to a payload (tcpstream, strip).
pub fn app_payload<'a>(cx: &'a Ctx<'_>, t: &Tag) -> Option<&'a [u8]> {
    let data = cx.data(t).ok()?;
    match cx.store.record(t) {
        Some((_, false)) => Some(data),
        _ => match parse_tag(cx, t) {
            Some(p) => data.get(p.payload.0..p.payload.0 + p.payload.1),
            None => Some(data),
        },
    }
}

/// A stable hash of the 5-tuple, the same in both directions, never 0.
pub fn flow_hash(p: &Pkt) -> u16 {
    let Some((_, src, dst, proto)) = p.ip else {
        return 0;
    };
    let (sp, dp) = p.ports().unwrap_or((0, 0));
    let a = (addr_bits(&src), sp);
    let b = (addr_bits(&dst), dp);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    // FNV-1a over the canonical tuple: stable across runs and machines.
    let mut h = dataplane::hash::FNV1A_EMPTY;
    for x in [
        lo.0 as u64,
        (lo.0 >> 64) as u64,
        lo.1 as u64,
        hi.0 as u64,
        (hi.0 >> 64) as u64,
        hi.1 as u64,
        proto as u64,
    ] {
        h = dataplane::hash::fnv1a_extend(h, &x.to_le_bytes());
    }
    let c = (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16;
    c.max(1)
}

fn addr_bits(a: &IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u32::from(*v) as u128,
        IpAddr::V6(v) => u128::from(*v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    /// An IPv4 TCP segment 10.0.0.1:1234 -> 10.0.0.2:80 with a 5-byte payload.
    fn tcp4() -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1234, 80, 7, 1000)
            .write(&mut v, b"hello")
            .unwrap();
        v
    }

    /// An IPv6 UDP datagram [2001:db8::1]:53 -> [2001:db8::2]:5353 with a 3-byte payload.
    fn udp6() -> Vec<u8> {
        let (a, b) = (
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        let mut v = Vec::new();
        PacketBuilder::ipv6(a, b, 64)
            .udp(53, 5353)
            .write(&mut v, b"abc")
            .unwrap();
        v
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// The same IP packet framed for every link type: each parse finds the same layers,
    /// and the payload range points at the same bytes.
    #[test]
    fn every_link_type_finds_the_ip_packet() {
        for (ip, et, want_ports, want_payload) in [
            (tcp4(), 0x0800u16, (1234, 80), &b"hello"[..]),
            (udp6(), 0x86dd, (53, 5353), &b"abc"[..]),
        ] {
            let et_b = et.to_be_bytes();
            let mac = [2u8, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            let af6: u32 = 30;
            let af = if et == 0x0800 { 2u32 } else { af6 };
            let frames: Vec<(&str, u32, Vec<u8>)> = vec![
                ("ethernet", LINKTYPE_ETHERNET, cat(&[&mac, &et_b, &ip])),
                (
                    "802.1Q",
                    LINKTYPE_ETHERNET,
                    cat(&[&mac, &[0x81, 0x00, 0x00, 0x0a], &et_b, &ip]),
                ),
                (
                    "QinQ",
                    LINKTYPE_ETHERNET,
                    cat(&[
                        &mac,
                        &[0x88, 0xa8, 0x00, 0x64],
                        &[0x81, 0x00, 0x00, 0x0a],
                        &et_b,
                        &ip,
                    ]),
                ),
                ("raw 101", LINKTYPE_RAW, ip.clone()),
                ("raw 12", 12, ip.clone()),
                ("raw 14", 14, ip.clone()),
                (
                    "ipv4/ipv6",
                    if et == 0x0800 {
                        LINKTYPE_IPV4
                    } else {
                        LINKTYPE_IPV6
                    },
                    ip.clone(),
                ),
                (
                    "sll",
                    LINKTYPE_LINUX_SLL,
                    cat(&[&[0, 0, 0, 1, 0, 6], &mac[..8], &et_b, &ip]),
                ),
                (
                    "sll with vlan",
                    LINKTYPE_LINUX_SLL,
                    cat(&[
                        &[0, 0, 0, 1, 0, 6],
                        &mac[..8],
                        &[0x81, 0x00],
                        &[0x00, 0x0a],
                        &et_b,
                        &ip,
                    ]),
                ),
                (
                    "sll2",
                    LINKTYPE_LINUX_SLL2,
                    cat(&[
                        &et_b,
                        &[0, 0],
                        &[0, 0, 0, 3],
                        &[0, 1],
                        &[4, 6],
                        &mac[..8],
                        &ip,
                    ]),
                ),
                (
                    "null little endian",
                    LINKTYPE_NULL,
                    cat(&[&af.to_le_bytes(), &ip]),
                ),
                (
                    "null big endian",
                    LINKTYPE_NULL,
                    cat(&[&af.to_be_bytes(), &ip]),
                ),
                ("loop", LINKTYPE_LOOP, cat(&[&af.to_be_bytes(), &ip])),
            ];
            for (what, link, f) in frames {
                let p = parse(&f, Some(link)).unwrap_or_else(|| panic!("{what}: not parsed"));
                assert_eq!(p.ether_type, Some(et), "{what}");
                assert_eq!(
                    p.ip.map(|i| i.0),
                    Some(if et == 0x0800 { 4 } else { 6 }),
                    "{what}"
                );
                assert_eq!(p.ports(), Some(want_ports), "{what}");
                assert_eq!(
                    &f[p.payload.0..p.payload.0 + p.payload.1],
                    want_payload,
                    "{what}"
                );
            }
        }
    }

    #[test]
    fn unknown_families_versions_and_link_types_are_not_ip() {
        let ip = tcp4();
        // Linux's AF_INET6 (10) is not one libpcap knows for loopback captures.
        assert!(parse(&cat(&[&10u32.to_le_bytes(), &ip]), Some(LINKTYPE_NULL)).is_none());
        assert!(parse(&cat(&[&[0x50], &ip[1..]]), Some(LINKTYPE_RAW)).is_none());
        assert!(parse(&ip, Some(147)).is_none());
        // ARP over Linux cooked v2: a frame, not IP.
        let arp = cat(&[&[0x08, 0x06], &[0; 18], &[0; 28]]);
        let p = parse(&arp, Some(LINKTYPE_LINUX_SLL2)).expect("a cooked frame");
        assert_eq!((p.ether_type, p.ip), (Some(0x0806), None));
    }

    proptest::proptest! {
        /// Any bytes as a frame of any link type: no panic, payloads inside the frame.
        #[test]
        fn any_bytes_parse_safely(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128), i in 0..LINKTYPES.len()) {
            if let Some(p) = parse(&data, Some(LINKTYPES[i])) {
                proptest::prop_assert!(p.payload.0 + p.payload.1 <= data.len());
            }
        }
    }
}
