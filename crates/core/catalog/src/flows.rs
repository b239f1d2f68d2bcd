//! The declarations of `filters::flows`' filters, `ipfix` and `ipfixin` (their
//! constructors are there).

use crate::{Access, FilterSpec, Kind, Param, Replication};

pub static IPFIX: FilterSpec = FilterSpec::new("ipfix", Access::Inspection)
    .synopsis("ipfix to=HOST:PORT[,HOST:PORT] [out=FILE] [transport=udp|tcp] [version=10|9] [idle=S] [active=S] [fin=S] [flows=N] [domain=N] [refresh=S]")
    .description(
        "Meters the packets of the stream into flows and exports them as IPFIX (RFC 7011/7012)\n\
         to collectors (nfcapd, any IPFIX collector) and/or a file; every block passes on\n\
         unchanged (thesis 001 §7.3.2: flow records of any stream, not tied to a capture). A\n\
         flow is a conversation (IPv4 or IPv6 addresses, ports, protocol, VLAN), exported as\n\
         one record per direction: packets, octets (IP header and payload), first and last\n\
         packet in milliseconds, TCP flags, type of service, ingress interface, VLAN, end\n\
         reason. Times are the packets' capture times, so timeouts run in stream time and a\n\
         capture file gives the same records (and bytes) wherever and whenever it is read. A\n\
         flow ends when idle for `idle`, at its first packet `active` after its start, `fin`\n\
         after TCP FIN both ways or an RST, or at the end of the stream; a full table\n\
         (`flows`) ends the least recently seen flow (counted in the summary). Templates go\n\
         in the first message and again every `refresh` of stream time. `version=9` exports\n\
         the same records as NetFlow v9 (RFC 3954) for collectors that want it: first and last\n\
         packet as milliseconds of sysUptime from the whole second before the stream's first\n\
         packet, TCP flags in one byte, no end reason; over UDP only (a v9 message has no\n\
         length to delimit it in a TCP stream or a file).",
    )
    .params(&[
        Param::new("to", "collectors HOST:PORT[,HOST:PORT...], each sent every message (also positional)").at(0),
        Param::new("out", "also write the messages to this file, back to back (the IPFIX file format)").kind(Kind::Path),
        Param::new("transport", "udp (one datagram a message) or tcp (a stream of messages)")
            .kind(Kind::Choice(&["udp", "tcp"]))
            .default("udp"),
        Param::new("version", "10: IPFIX (RFC 7011); 9: NetFlow v9 (RFC 3954), UDP collectors only")
            .kind(Kind::Choice(&["10", "9"]))
            .default("10"),
        Param::new("idle", "seconds without a packet that end a flow").kind(Kind::Number).default("15"),
        Param::new("active", "seconds after which a long flow is reported and started anew").kind(Kind::Number).default("1800"),
        Param::new("fin", "seconds a TCP flow waits for its last packets after FIN both ways or an RST").kind(Kind::Number).default("1"),
        Param::new("flows", "flows metered at once; beyond, the least recently seen is exported early").kind(Kind::Size).default("64K").memory(160),
        Param::new("domain", "observation domain ID").kind(Kind::Count).default("0"),
        Param::new("ingress", "ingressInterface reported (an ifindex; 0: unknown)").kind(Kind::Count).default("0"),
        Param::new("refresh", "seconds of stream time between template sets").kind(Kind::Number).default("600"),
        Param::new("mtu", "most bytes of one message").kind(Kind::Size).default("1400"),
        Param::new("times", "conversation: both directions carry the conversation's first and last packet (as softflowd); direction: each its own")
            .kind(Kind::Choice(&["conversation", "direction"]))
            .default("conversation"),
    ])
    .classes("unchanged")
    .example("streamline run 'pcapin file=examples/sample.pcap | ipfix out=flows.ipfix to=127.0.0.1:4739 | null'")
    .replication(Replication::Never(
        "its flow table spans the whole stream, and its messages are numbered in stream order",
    ));

pub static IPFIXIN: FilterSpec = FilterSpec::new("ipfixin", Access::Source)
    .synopsis("ipfixin [port=N] [bind=ADDR] [count=N] [idle=S]")
    .description(
        "An IPFIX collector as a source: listens on a UDP port for IPFIX messages or NetFlow\n\
         v9 export packets (from routers, softflowd, another run's `ipfix`), keeps each\n\
         exporter's templates and hands on one block per flow record, a JSON object on one\n\
         line: exporter, domain (v9: source ID), src, dst, sport, dport (ICMP:\n\
         type*256+code), proto, packets, bytes, start_ms, end_ms (v9: made absolute with the\n\
         header's boot time), tcp_flags, tos, vlan, ingress, end_reason (0: not sent, as in\n\
         v9). Runs until stopped, or until\n\
         `count` records, or `idle` seconds without a message once one came.",
    )
    .params(&[
        Param::new("port", "UDP port to listen on (also positional)")
            .at(0)
            .kind(Kind::Count)
            .default("4739"),
        Param::new("bind", "address to listen on (default 0.0.0.0)"),
        Param::new("count", "end after this many records (0: never)")
            .kind(Kind::Size)
            .default("0"),
        Param::new(
            "idle",
            "end after this many seconds without a message, once one came (0: never)",
        )
        .kind(Kind::Number)
        .default("0"),
    ])
    .classes("1 for every record")
    .example("streamline run 'ipfixin port=4739 | grep \"proto\":6 | outfile tcp-flows.json'");
