//! The declarations of `filters::app`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param};

pub static TCPSTREAM: FilterSpec = FilterSpec::new("tcpstream", Access::Reordering)
    .synopsis("tcpstream [limit=BYTES]")
    .description("Zero-copy TCP reassembly: crops each segment to its payload (a metadata edit) and\nreorders tags so that each connection's bytes leave in sequence order; retransmitted\nbytes are trimmed, early segments wait as tags (up to limit per direction, default 4M).")
    .params(&[
        Param::new("limit", "bytes of out-of-order data held per direction").kind(Kind::Size).default("4M").memory(1),
    ])
    .classes("the connection's flow hash (as `flow`)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcpstream | http | outfile requests.txt'");
pub static HTTP: FilterSpec = FilterSpec::new("http", Access::Classification)
    .synopsis("http [method=NAME]")
    .description("Detects HTTP requests (a request line at the start of the payload) in whole\nframes or in reassembled/cropped payloads.")
    .params(&[
        Param::new("method", "pass only this method (also positional)").at(0),
    ])
    .classes("1 GET, 2 POST, 3 HEAD, 4 PUT, 5 DELETE, 6 OPTIONS, 7 PATCH, 8 CONNECT, 9 TRACE; 0 otherwise")
    .class_names(&[("get", 1), ("post", 2), ("head", 3), ("put", 4), ("delete", 5), ("options", 6), ("patch", 7), ("connect", 8), ("trace", 9)])
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | http |1 inspect'");
pub static DNS: FilterSpec = FilterSpec::new("dns", Access::Classification)
    .synopsis("dns [port=N]")
    .description("Detects DNS messages on port 53 (UDP, or TCP with its length prefix).")
    .params(&[Param::new("port", "DNS port (default 53)")
        .kind(Kind::Count)
        .default("53")])
    .classes("1 for queries, 2 for responses, 0 otherwise")
    .class_names(&[("query", 1), ("response", 2)])
    .example("streamline run 'pcapin file=examples/sample.pcap | dns |2 count'");
