//! The declarations of `filters::bpf`'s filters (their constructors are there).

use crate::{Access, Cost, FilterSpec, Implementation, KernelForm, Kind, Needs, Param, Space};

/// bpf's cost on the capture socket: a few instructions per frame, most frames rejected.
const SIEVE: Cost = Cost::DEFAULT
    .per_call(40.0)
    .forward(0.1)
    .per_byte(0.0)
    .bytes_read(0.0);
pub static BPF: FilterSpec = FilterSpec::new("bpf", Access::Classification)
    .synopsis("bpf \"EXPRESSION\"")
    .description("Passes the frames a pcap-filter expression (tcpdump's language, see pcap-filter(7))\n\
       accepts. libpcap compiles the expression to classic BPF for each link type seen (the\n\
       capture's own: Ethernet, Linux cooked, raw IP, BSD loopback, ..., so it keeps what\n\
       `tcpdump -r FILE EXPR` prints); the program runs in this space, or, right after `rx`,\n\
       in the kernel on the capture socket (frames it rejects never reach user space; this\n\
       node then passes everything). An expression libpcap refuses is an error before the\n\
       run starts; one it refuses for a capture's link type (`ip6` on raw IPv4) drops that\n\
       capture's frames with a warning.")
    .params(&[
        Param::new("expr", "the expression (also the first positional parameter; quote it)").at(0),
        Param::new(lang::resolve::PLACED, "kernel when the program runs on the capture socket (set for `rx | bpf`); user keeps it in this space").kind(Kind::Choice(&["user", "kernel"])).default("user"),
    ])
    .classes("1 for accepted frames, 0 otherwise")
    .example("streamline run 'pcapin file=examples/sample.pcap | bpf \"tcp dst port 80\" | count'")
    // A packet filter: selective by default (a tight sieve, thesis 7.3.2).
    .implementations(&[
        Implementation { name: "cbpf-socket", space: Space::Kernel(KernelForm::SocketFilter), needs: Needs::AfPacket, cost: SIEVE },
        Implementation { name: "cbpf-interp", space: Space::User, needs: Needs::Nothing, cost: SIEVE.per_call(120.0) },
    ]);
