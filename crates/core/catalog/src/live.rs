//! The declarations of `filters::live`'s filters (their constructors are there).

use crate::{Access, Cost, FilterSpec, Implementation, KernelForm, Kind, Needs, Param, Space};

pub static RX: FilterSpec = FilterSpec::new("rx", Access::Source)
    .privileged("CAP_NET_RAW")
    .synopsis("rx dev=IF [impl=packet|xdp|auto] [batching=adaptive|fixed] [latency=MS] [threshold=N] [rings=N] [choose=random|rr] [blocks=N] [fanout=G] [queues=N] [queue=Q] [frames=N] [batch=N]")
    .description("Captures live frames from a network interface through AF_PACKET with a TPACKET_V3\n\
                  ring: the kernel's ring is the DBuf, tags point into it, nothing is copied; a block\n\
                  goes back to the kernel when its frames have walked the space (a filter that holds\n\
                  a frame longer, as tcpstream holds early segments, keeps a copy).\n\
                  batching=adaptive (default; seed 002, Algorithm 2): reads retired blocks while there\n\
                  are any, without a system call; when none is left it sleeps as long as the measured\n\
                  rate needs to bring `threshold` frames (never past `latency` ms, default 100) and\n\
                  polls only if still nothing came: few wake-ups at low rates or behind a kernel filter\n\
                  that passes few frames, big batches at high rates.\n\
                  batching=fixed: polls, and the kernel hands a block over at the latest `latency` ms\n\
                  (default 10) after its first frame (a wake-up per 10 ms whatever the rate).\n\
                  `bpf`, `flowcount`, `sample` or `bytecount` right after `rx` runs in the kernel on\n\
                  the socket (eBPF for the last three; their maps pinned on bpffs). Needs\n\
                  CAP_NET_RAW. Runs until interrupted; its summary gives the kernel's drop count and\n\
                  how often the ring went round.\n\
                  impl=xdp reads through an AF_XDP socket into its own UMEM instead (copy mode): the\n\
                  frames of that queue are taken from the host's network stack, which no longer sees\n\
                  them (no ARP or ping answers on that interface while it runs).")
    .params(&[
        Param::new("dev", "interface (also positional)").at(0),
        Param::new("batching", "adaptive: seed 002's Algorithm 2, wake-ups follow the rate (default); fixed: poll, woken by the kernel's block timeout").kind(Kind::Choice(&["adaptive", "fixed"])).default("adaptive"),
        Param::new("latency", "longest a frame waits for user space, ms (default 100 with batching=adaptive; 10 with batching=fixed, the kernel's block timeout, and with impl=xdp)").kind(Kind::Count),
        Param::new("rings", "batching=adaptive: N sockets in one fanout group read by this engine, f(n) = `choose` picks the ring to read first (default 1)").kind(Kind::Count).default("1"),
        Param::new("choose", "rings=N: f(n), random (the seed's, default) or rr").kind(Kind::Choice(&["random", "rr"])).default("random"),
        Param::new("threshold", "batching=adaptive: frames a wake-up aims to carry (default 4096)").kind(Kind::Count).default("4096"),
        Param::new("blocks", "ring blocks of 1 MiB (default 16)").kind(Kind::Count).default("16").memory(1 << 20),
        Param::new("fanout", "join PACKET_FANOUT group G in hash mode: rx instances with the same group share the interface flow by flow (one per engine)").kind(Kind::Count),
        Param::new("impl", "packet: AF_PACKET with a TPACKET_V3 ring; xdp: an AF_XDP socket with its own UMEM (copy mode); auto (default): packet").kind(Kind::Choice(&["packet", "xdp", "auto"])).default("auto"),
        Param::new("queue", "impl=xdp: the interface queue to bind (default 0)").kind(Kind::Count).default("0"),
        Param::new("frames", "impl=xdp: UMEM chunks of 2 KiB, a power of two (default 16384: 32 MiB, the kernel gets half to fill)").kind(Kind::Count).default("16384").memory(2048),
        Param::new("batch", "impl=xdp: frames gathered per wake-up, at most (and by default) frames/4; the latency bound still holds").kind(Kind::Count),
        Param::new("xdpmode", "impl=xdp: auto (libxdp picks) or skb (generic XDP)").kind(Kind::Choice(&["auto", "skb"])).default("auto"),
        Param::new("keep", "all (default) or readers: the socket keeps only what the readers of the shared taps on this node want, the union of their filter programs (the daemon's shared capture, whose other successors want nothing)").kind(Kind::Choice(&["all", "readers"])).default("all"),
        Param::new("queues", "N engines: N rx in one fanout group, each with its own copy of the filters after it on its own pinned thread; a join feeds the rest (a sink after them totals all queues)").kind(Kind::Count).default("1"),
    ])
    .classes("1 for every frame")
    .example("streamline run 'rx dev=eth0 | bpf \"tcp port 80\" | count'")
    .implementations(&[Implementation {
        name: "af-packet",
        space: Space::Kernel(KernelForm::Capture),
        needs: Needs::AfPacket,
        cost: Cost::DEFAULT.per_call(400.0).per_byte(0.2),
    }]);
