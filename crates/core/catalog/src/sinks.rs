//! The declarations of `filters::sinks`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param};

pub static OUTFILE: FilterSpec = FilterSpec::new("outfile", Access::Sink)
    .synopsis("outfile FILE [append=yes] [lines=yes]")
    .description("Writes block contents to a file, back to back (lines=yes adds a newline after\neach block).")
    .params(&[
        Param::new("file", "the file (also positional)").at(0),
        Param::new("append", "yes to append instead of truncating").kind(Kind::Flag).default("no"),
        Param::new("lines", "yes for one block per line").kind(Kind::Flag).default("no"),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | dport |80 strip | outfile http.raw'");
pub static STDOUT: FilterSpec = FilterSpec::new("stdout", Access::Sink)
    .synopsis("stdout [lines=yes]")
    .description("Writes block contents to standard output.")
    .params(&[Param::new("lines", "yes for one block per line")
        .kind(Kind::Flag)
        .default("no")])
    .classes("sink (no output)")
    .example("streamline run 'file a.txt split=lines | grep x | stdout'");
pub static PCAPOUT: FilterSpec = FilterSpec::new("pcapout", Access::Sink)
    .synopsis("pcapout file=FILE")
    .description("Writes packets to a pcap file (readable by tcpdump and Wireshark), with the\n\
                  original timestamps and wire lengths when the packets came from a capture (a\n\
                  block cropped from a packet keeps its time; a block made by a filter gets time 0).\n\
                  The file header is the one the first packet's capture file had (byte order,\n\
                  microsecond or nanosecond times, snap length, link type), so `pcapin | pcapout`\n\
                  writes a pcap file (version 2.4, time zone 0) back byte for byte; blocks from no\n\
                  pcap file (gen, rx, pcapng) get a big-endian microsecond header, snap length 65535.")
    .params(&[
        Param::new("file", "output file (also positional); - for standard output").at(0),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | udp | pcapout file=udp.pcap'");
pub static NULL: FilterSpec = FilterSpec::new("null", Access::Sink)
    .synopsis("null")
    .description("Discards everything.")
    .classes("sink (no output)")
    .example("streamline run 'gen count=1M | null'");
