//! The declarations of `filters::sources`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Origin, Param};

pub static PCAPIN: FilterSpec = FilterSpec::new("pcapin", Access::Source)
    .origin(Origin::Files)
    .synopsis("pcapin file=FILE")
    .description("Reads a capture file as libpcap (tcpdump -r) reads it: the same packets, bytes,\n\
                  lengths, times and link type. The file is mapped into memory and serves as the\n\
                  DBuf itself: each packet becomes a tag pointing into the file, nothing is copied.\n\
                  Timestamps (nanoseconds) and wire lengths travel out of band (for inspect and\n\
                  pcapout); the link type goes with the frames (for the protocol filters and bpf).\n\
                  Reads pcap (microsecond and nanosecond, either byte order, versions 2.0-2.4,\n\
                  Kuznetzov's patched records) and pcapng (sections, interfaces with if_tsresol and\n\
                  if_tsoffset, enhanced, simple and obsolete packet blocks; other blocks and options\n\
                  are skipped). A snap length cuts packets (tcpdump -s 96): their wire length is\n\
                  kept; a record holding more than the snap length is cut to it, as libpcap does.\n\
                  Any link type is read; the protocol filters understand Ethernet (VLAN tags\n\
                  included), Linux cooked v1/v2 (tcpdump -i any), raw IP and BSD loopback.\n\
                  A file libpcap refuses is an error before the run (naming the byte and the\n\
                  problem); a record libpcap refuses ends the input with a warning naming its\n\
                  byte offset, after every packet before it. As libpcap, a pcapng file's\n\
                  interfaces must share one link type and snap length. A helper thread\n\
                  (pcapin-index) walks the records ahead of the space.")
    .params(&[
        Param::new("file", "capture file (also the first positional parameter)").at(0).kind(Kind::Path),
    ])
    .classes("1 for every packet")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | dport |80 count'");
pub static FILE: FilterSpec = FilterSpec::new("file", Access::Source)
    .unix_tool()
    .origin(Origin::Files)
    .synopsis("file FILE [split=bytes|lines|fixed] [size=N]")
    .description("Reads a file, mapped into memory as a DBuf (no copies), as blocks: chunks of\n\
                  64 KiB (split=bytes, size=N to change), one block per line including its newline\n\
                  (split=lines), or fixed-size records (split=fixed size=N; the last may be shorter).")
    .params(&[
        Param::new("file", "the file (also the first positional parameter)").at(0).kind(Kind::Path),
        Param::new("split", "bytes (default), lines or fixed").kind(Kind::Choice(&["bytes", "lines", "fixed"])).default("bytes"),
        Param::new("size", "block size for bytes/fixed (suffixes K, M)").kind(Kind::Size).default("64K").memory(1),
    ])
    .classes("1 for every block")
    .example("streamline run 'file /var/log/syslog split=lines | grep error | count'");
pub static STDIN: FilterSpec = FilterSpec::new("stdin", Access::Source)
    .synopsis("stdin [split=bytes|lines|fixed] [size=N]")
    .description("Reads standard input into the space's data ring, cut into blocks as `file` does.")
    .params(&[
        Param::new("split", "bytes (default), lines or fixed")
            .kind(Kind::Choice(&["bytes", "lines", "fixed"]))
            .default("bytes"),
        Param::new("size", "block size for bytes/fixed")
            .kind(Kind::Size)
            .default("64K")
            .memory(1),
    ])
    .classes("1 for every block")
    .example("cat access.log | streamline run 'stdin split=lines | grep GET | count'");
pub static GEN: FilterSpec = FilterSpec::new("gen", Access::Source)
    .origin(Origin::Synthetic)
    .synopsis("gen [count=N] [size=BYTES] [rate=N] [rewrite=yes|no]")
    .description(
        "Generates N synthetic blocks (default 1000) of the given size (default 1024)\n\
                  for benchmarks and tests: an 8-byte sequence number (little endian), then a\n\
                  pattern (byte i is i*31 XOR the sequence number's low byte). Blocks go to a\n\
                  ring of their own, one cache line apart beyond their size when the size is a\n\
                  multiple of 512 (so a batch's first lines spread over the L1 cache's sets).\n\
                  A lap of the ring is a multiple of 256 blocks, so a slot's pattern repeats\n\
                  from lap to lap and after the first lap only the sequence number is written\n\
                  (rewrite=yes writes every byte of every block; after a filter edited blocks\n\
                  in place, a whole lap is written again). rate=N offers N blocks per second,\n\
                  each made when its time comes (a fixed offered load below saturation).",
    )
    .params(&[
        Param::new("count", "number of blocks (also positional; suffixes K, M)")
            .at(0)
            .kind(Kind::Size)
            .default("1000"),
        Param::new("size", "block size in bytes")
            .kind(Kind::Size)
            .default("1024"),
        Param::new(
            "rate",
            "blocks per second, evenly spaced (suffixes K, M; default: as fast as it can)",
        )
        .kind(Kind::Size),
        Param::new("rewrite", "yes: write every block in full (default no)")
            .kind(Kind::Choice(&["yes", "no"]))
            .default("no"),
    ])
    .classes("1 for every block")
    .example("streamline run 'gen count=1M size=64 | count'");
