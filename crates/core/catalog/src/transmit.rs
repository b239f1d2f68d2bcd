//! The declarations of `filters::transmit`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param};

pub static TX: FilterSpec = FilterSpec::new("tx", Access::Sink)
    .privileged("CAP_NET_RAW")
    .synopsis("tx dev=IF [batching=adaptive|fixed] [queues=N] [choose=flow|random|rr] [batch=N] [latency=US] [frames=N] [bypass=yes|no]")
    .description("Transmits every block as one frame (it should start with an Ethernet header) through\n\
                  an AF_PACKET transmit ring. Frames are queued in the ring and sent by one system call\n\
                  (a kick). batching=adaptive (default; seed 002, Algorithm 1): a kick when the ring's\n\
                  allotment of free slots (counted when the last one ran out) is used up;\n\
                  batching=fixed: a kick per `batch` frames. Both kick when the oldest queued frame has\n\
                  waited `latency` microseconds (checked after every input batch) and when the input\n\
                  goes quiet. queues=N opens N rings on the interface and f(n) = `choose` picks one per\n\
                  frame: flow (a hash of addresses and ports: each flow stays in order), random (the\n\
                  seed's choice; a frame whose ring is out of room is offered to another draw) or rr.\n\
                  A full ring waits for the kernel, nothing is dropped. The summary gives frames per kick.\n\
                  Needs CAP_NET_RAW.")
    .params(&[
        Param::new("dev", "interface (also positional)").at(0),
        Param::new("batching", "adaptive: seed 002's Algorithm 1, a kick per allotment of free slots (default); fixed: a kick per `batch` frames").kind(Kind::Choice(&["adaptive", "fixed"])).default("adaptive"),
        Param::new("queues", "transmit rings on the interface (default 1)").kind(Kind::Count).default("1"),
        Param::new("choose", "f(n), the ring of each frame: flow (default), random or rr").kind(Kind::Choice(&["flow", "random", "rr"])).default("flow"),
        Param::new("batch", "batching=fixed: frames per kick at most (default 64)").kind(Kind::Count).default("64"),
        Param::new("latency", "longest a queued frame waits for its kick, microseconds (default 1000)").kind(Kind::Count).default("1000"),
        Param::new("frames", "frame slots in the ring, 2 KiB each (default 1024)").kind(Kind::Count).default("1024").memory(2048),
        Param::new("bypass", "yes: skip the qdisc layer (PACKET_QDISC_BYPASS)").kind(Kind::Choice(&["yes", "no"])).default("no"),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tx dev=veth0'");
