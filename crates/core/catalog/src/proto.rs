//! The declarations of `filters::proto`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param};

/// Well-known services by port (IANA), the names `dport` and `sport` publish for
/// selectors: `dport |http count`.
pub const SERVICES: &[(&str, u16)] = &[
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("dns", 53),
    ("dhcp", 67),
    ("tftp", 69),
    ("http", 80),
    ("pop3", 110),
    ("ntp", 123),
    ("imap", 143),
    ("snmp", 161),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("syslog", 514),
    ("submission", 587),
    ("imaps", 993),
    ("pop3s", 995),
    ("mysql", 3306),
    ("rdp", 3389),
    ("postgres", 5432),
    ("http-alt", 8080),
];

/// dport's and sport's parameter: the ports to pass.
const PORTS: &[Param] = &[
    Param::new("port", "ports to pass (also positional, comma-separated)")
        .from(0)
        .kind(Kind::Numbers),
];

pub static ETH: FilterSpec = FilterSpec::new("eth", Access::Classification)
    .synopsis("eth [type=HEX]")
    .description("Passes frames by the type of what their link layer carries (optionally only one\nethertype, e.g. type=0800): Ethernet's inside any VLAN tags, Linux cooked captures'\nprotocol, 0800/86dd for raw IP and BSD loopback.")
    .params(&[
        Param::new("type", "ethertype in hex (also positional)").at(0).kind(Kind::Hex),
    ])
    .classes("1 for matching frames, 0 otherwise")
    .example("streamline run 'pcapin file=examples/sample.pcap | eth 86dd | count'");
pub static IP: FilterSpec = FilterSpec::new("ip", Access::Classification)
    .unix_tool()
    .synopsis("ip [version=4|6]")
    .description("Passes IP packets (IPv4 and IPv6, or one version).")
    .params(&[Param::new("version", "4 or 6 (also positional)")
        .at(0)
        .kind(Kind::Count)])
    .classes("4 for IPv4, 6 for IPv6, 0 for anything else")
    .class_names(&[("ipv4", 4), ("ipv6", 6)])
    .example("streamline run 'pcapin file=examples/sample.pcap | ip |6 count'");
pub static TCP: FilterSpec = FilterSpec::new("tcp", Access::Classification)
    .synopsis("tcp")
    .description("Passes TCP over IPv4 or IPv6: packets whose IP protocol field is 6, fragments\nincluded (libpcap's `tcp`).")
    .classes("6 for TCP (its IP protocol number, as proto's), 0 otherwise")
    .class_names(&[("tcp", 6)])
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | count'");
pub static UDP: FilterSpec = FilterSpec::new("udp", Access::Classification)
    .synopsis("udp")
    .description("Passes UDP over IPv4 or IPv6: IP protocol field 17, fragments included.")
    .classes("17 for UDP (its IP protocol number, as proto's), 0 otherwise")
    .class_names(&[("udp", 17)])
    .example("streamline run 'pcapin file=examples/sample.pcap | udp | count'");
pub static ICMP: FilterSpec = FilterSpec::new("icmp", Access::Classification)
    .synopsis("icmp [version=4|6]")
    .description("Passes ICMP (IPv4 protocol 1) and ICMPv6 (IPv6 next header 58) packets,\nfragments included, or one of the two.")
    .params(&[
        Param::new("version", "4 or 6 (also positional)").at(0).kind(Kind::Count),
    ])
    .classes("1 for ICMPv4, 2 for ICMPv6, 0 otherwise")
    .class_names(&[("icmp4", 1), ("icmp6", 2)])
    .example("streamline run 'pcapin file=examples/sample.pcap | icmp |1 count'");
pub static DPORT: FilterSpec = FilterSpec::new("dport", Access::Classification)
    .synopsis("dport [PORT[,PORT...]]")
    .description("Classifies TCP and UDP packets by destination port, so a selector picks a\nservice: `dport |22 ssh`, `dport |1:1023 count`. With ports given, passes only those.")
    .params(PORTS)
    .classes("the destination port; 0 for non-TCP/UDP (and other ports, when given)")
    .class_names(SERVICES)
    .example("streamline run 'pcapin file=examples/sample.pcap | dport |80 count'");
pub static SPORT: FilterSpec = FilterSpec::new("sport", Access::Classification)
    .synopsis("sport [PORT[,PORT...]]")
    .description("Classifies TCP and UDP packets by source port (see dport).")
    .params(PORTS)
    .classes("the source port; 0 for non-TCP/UDP")
    .class_names(SERVICES)
    .example("streamline run 'pcapin file=examples/sample.pcap | sport |53 count'");
pub static PROTO: FilterSpec = FilterSpec::new("proto", Access::Classification)
    .synopsis("proto [NUMBER[,NUMBER...]]")
    .description("Classifies IP packets by protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).")
    .params(&[
        Param::new("proto", "protocol numbers to pass (also positional)")
            .from(0)
            .kind(Kind::Numbers),
    ])
    .classes("the IP protocol number; 0 for non-IP")
    .class_names(&[
        ("icmp", 1),
        ("tcp", 6),
        ("udp", 17),
        ("gre", 47),
        ("esp", 50),
        ("icmp6", 58),
        ("sctp", 132),
    ])
    .example("streamline run 'pcapin file=examples/sample.pcap | proto |17 count'");
pub static FLOW: FilterSpec = FilterSpec::new("flow", Access::Classification)
    .synopsis("flow")
    .description("Classifies packets by a stable hash of their 5-tuple, the same in both\ndirections, so per-class (session) state follows connections.")
    .classes("a non-zero 16-bit flow hash; 0 for non-IP")
    .example("streamline run 'pcapin file=examples/sample.pcap | flow | hist'");
