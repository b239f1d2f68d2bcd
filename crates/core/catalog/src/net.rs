//! The declarations of `filters::net`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param};

pub static NETOUT: FilterSpec = FilterSpec::new("netout", Access::Sink)
    .synopsis("netout to=HOST:PORT [wait=SECS] [proto=tcp|udp [queues=N] [queue=random|rr|class] [dgram=BYTES]]")
    .description(
        "Sends the stream to a `netin` on another host (or this one): every block with its\n\
         class and record metadata, in batches. Over TCP (the default) lossless: the\n\
         receiver's window bounds what is in flight (credits), a slow receiver slows the\n\
         sender. Over UDP (proto=udp) lossy, from `queues` sockets (source ports), each\n\
         block on the queue `queue` picks (random, the seed's choice; rr; class, which\n\
         keeps a class in order), packed into datagrams of `dgram` bytes; every datagram\n\
         is numbered and the receiver counts the ones lost. A receiver that refuses (or,\n\
         over UDP, does not answer) is tried again for `wait` seconds (default 2), then\n\
         the run stops with an error naming it; one that goes away mid-stream stops the\n\
         run, named.",
    )
    .params(&[
        Param::new("to", "HOST:PORT of the netin (also positional)").at(0),
        Param::new("wait", "seconds to keep trying while the receiver refuses (default 2)")
            .kind(Kind::Number),
        Param::new("proto", "tcp (lossless, the default) or udp (lossy, loss counted)"),
        Param::new("queues", "udp: sockets to send from (default 1)").kind(Kind::Count),
        Param::new("queue", "udp: queue choice per block, random (default), rr or class"),
        Param::new("dgram", "udp: datagram size in bytes (default 1472: one Ethernet frame)")
            .kind(Kind::Size),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | netout to=10.0.0.2:7000'");
pub static NETIN: FilterSpec = FilterSpec::new("netin", Access::Source)
    .synopsis("netin port=PORT [bind=ADDR] [window=BYTES] | netin port=PORT proto=udp [queues=N] [idle=SECS] [rcvbuf=BYTES]")
    .description(
        "Receives the stream one `netout` sends (see netout): listens on PORT, takes one\n\
         sender, and hands its blocks on with the classes and record metadata they had\n\
         there. Ends when the sender ends its stream; a sender that goes away without\n\
         ending it (killed, its host gone) stops the run with an error naming it. With\n\
         proto=udp: `queues` sockets share the port (SO_REUSEPORT, the kernel spreads\n\
         the sender's flows over them by hash), read in turn; the datagrams lost are\n\
         counted and reported; a sender silent for `idle` seconds (default 5) mid-stream\n\
         stops the run, named.",
    )
    .params(&[
        Param::new("port", "TCP port to listen on (also positional)")
            .at(0)
            .kind(Kind::Count),
        Param::new("bind", "address to listen on (default 0.0.0.0)"),
        Param::new("window", "tcp: bytes the sender may have in flight (default 4M)")
            .kind(Kind::Size)
            .memory(1),
        Param::new("proto", "tcp (the default) or udp"),
        Param::new("queues", "udp: sockets on the port (default 1)").kind(Kind::Count),
        Param::new("idle", "udp: seconds of silence mid-stream that end the run with an error (default 5)")
            .kind(Kind::Number),
        Param::new("rcvbuf", "udp: receive buffer per socket (default 8M)").kind(Kind::Size).memory(1),
    ])
    .classes("the class each block had at the sender")
    .example("streamline run 'netin port=7000 | http | inspect'");
