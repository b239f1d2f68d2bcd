//! # filters: Streamline's native filter library
//!
//! Grouped by class: [`sources`] (pcapin, file, stdin, gen), [`proto`] (eth, ip, tcp, udp,
//! icmp, dport, sport, proto, flow), [`app`] (tcpstream, http, dns), [`inspect`] (count,
//! hist, inspect, grep, regex, match, dedup), [`nicfix`] (flowcount, sample, bytecount:
//! each also an eBPF program run on the capture socket right after `rx`), [`edit`] (strip, deflate, inflate,
//! encrypt, decrypt, xor), [`control`] (for, join, split, hash), [`sinks`] (outfile, stdout,
//! pcapout, null). [`packet`] holds the zero-copy frame parsing they share, [`savefile`] the
//! capture-file reader `pcapin` walks files with (libpcap's rules).
//!
//! Every filter registers one [`FilterSpec`] in [`REGISTRY`]: its documentation in fixed
//! sections and its constructor. Parsing (pcap, Ethernet/IP/TCP, regex, Aho-Corasick,
//! deflate, AES-GCM) uses the crates the field uses; the filter logic is ours.

#![forbid(unsafe_code)]

pub mod app;
pub mod bpf;
pub mod transmit;
pub mod xdp;
pub mod control;
pub mod edit;
#[doc(hidden)]
pub mod fuzzing;
pub mod inspect;
pub mod live;
pub mod nicfix;
pub mod packet;
pub mod proto;
pub mod savefile;
pub mod sinks;
pub mod sources;

use dataplane::{Args, Factory, Filter, FilterSpec};

/// Every native filter.
pub static REGISTRY: &[&FilterSpec] = &[
    &sources::PCAPIN,
    &sources::FILE,
    &sources::STDIN,
    &sources::GEN,
    &live::RX,
    &proto::ETH,
    &proto::IP,
    &proto::TCP,
    &proto::UDP,
    &proto::ICMP,
    &proto::DPORT,
    &proto::SPORT,
    &proto::PROTO,
    &bpf::BPF,
    &proto::FLOW,
    &app::TCPSTREAM,
    &app::HTTP,
    &app::DNS,
    &inspect::GREP,
    &inspect::REGEX,
    &inspect::MATCH,
    &inspect::COUNT,
    &inspect::HIST,
    &inspect::INSPECT,
    &inspect::DEDUP,
    &nicfix::SAMPLE,
    &nicfix::FLOWCOUNT,
    &nicfix::BYTECOUNT,
    &edit::STRIP,
    &edit::DEFLATE,
    &edit::INFLATE,
    &edit::ENCRYPT,
    &edit::DECRYPT,
    &edit::XOR,
    &control::FOR,
    &control::JOIN,
    &control::SPLIT,
    &control::HASH,
    &sinks::OUTFILE,
    &sinks::STDOUT,
    &sinks::PCAPOUT,
    &sinks::NULL,
    &transmit::TX,
];

pub fn find(name: &str) -> Option<&'static FilterSpec> {
    REGISTRY.iter().copied().find(|s| s.name == name)
}

/// The library as a name resolver for the language: native names and, per filter, the
/// parameter keys it accepts (so `pcapin fil=x` is an error with a caret at parse time).
/// Wrap it in `lang::WithPath` to also accept Unix commands on PATH.
pub struct Natives;

impl lang::Resolver for Natives {
    fn resolve(&self, name: &str) -> Option<lang::FilterKind> {
        find(name).map(|_| lang::FilterKind::Native)
    }
    fn native_names(&self) -> Vec<String> {
        REGISTRY.iter().map(|s| s.name.to_string()).collect()
    }
    fn params(&self, name: &str) -> Option<Vec<String>> {
        find(name).map(|s| s.params.iter().map(|p| p.name.to_string()).collect())
    }
    fn class_names(&self, name: &str) -> Option<Vec<(String, u16)>> {
        find(name).map(|s| s.class_names.iter().map(|&(n, c)| (n.to_string(), c)).collect())
    }
}

/// The library as the runtime's factory.
pub struct Library;

impl Factory for Library {
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, String> {
        let spec = find(name).ok_or_else(|| format!("no native filter named '{name}'"))?;
        (spec.make)(args)
    }
    fn is_source(&self, name: &str) -> bool {
        find(name).is_some_and(|s| s.source)
    }
    fn rewrite(&self, g: lang::Graph) -> lang::Graph {
        live::kernel_placement(live::multiqueue(g))
    }
    fn keeps_sessions(&self, name: &str) -> bool {
        // Per-connection state: replicas must each see whole sessions.
        matches!(name, "tcpstream" | "dedup")
    }
}
