//! # filters: Streamline's native filter library
//!
//! Grouped by class: [`sources`] (pcapin, file, stdin, gen), [`proto`] (eth, ip, tcp, udp,
//! icmp, dport, sport, proto, flow), [`app`] (tcpstream, http, dns), [`inspect`] (count,
//! hist, inspect, grep, regex, match, dedup), [`nicfix`] (flowcount, sample, bytecount:
//! each also an eBPF program run on the capture socket right after `rx`), [`edit`] (strip, deflate, inflate,
//! encrypt, decrypt, xor), [`shaping`] (shape: pacing by token/leaky buckets), [`control`] (for, join, split, hash), [`sinks`] (outfile, stdout,
//! pcapout, null), [`net`] (netout, netin: streams between hosts), [`flows`] (ipfix, ipfixin: flow records), [`kafka`] (kafkaout, kafkain: Kafka topics at the edges). [`packet`] holds the zero-copy frame parsing they share, [`savefile`] the
//! capture-file reader `pcapin` walks files with (libpcap's rules).
//!
//! Every filter is declared once, as data, in the catalog (`catalog`: its documentation in
//! fixed sections, its parameters (position, kind, default), its implementations and their
//! spaces, listed in [`REGISTRY`]); its constructor is here, beside its code, paired with
//! the declaration in [`CONSTRUCTORS`] (see "Adding a filter" in ARCHITECTURE.md). Parsing (pcap, Ethernet/IP/TCP, regex, Aho-Corasick,
//! deflate, AES-GCM) uses the crates the field uses; the filter logic is ours.

#![forbid(unsafe_code)]

pub mod app;
pub mod bpf;
pub mod control;
pub mod edit;
pub mod flows;
#[doc(hidden)]
pub mod fuzzing;
pub mod httplog;
pub mod ids;
pub mod inspect;
pub mod kafka;
mod lent;
pub mod live;
pub mod net;
pub mod nicfix;
pub mod packet;
pub mod proto;
pub mod savefile;
pub mod shaping;
pub mod sinks;
pub mod sources;
pub mod transmit;
pub mod xdp;

use dataplane::decl::Make;
use dataplane::{Args, Factory, Filter, FilterError, FilterSpec};

pub use catalog::{find, shown, Natives, REGISTRY};

/// Every native filter's constructor beside its declaration in the catalog
/// ([`catalog::REGISTRY`], where the data is): the one line a new filter adds here (a
/// registration the linker gathers, as the `linkme` crate does, needs `link_section`,
/// which this crate's `forbid(unsafe_code)` refuses). A test checks that every
/// declaration has exactly one constructor here and every constructor a declaration.
pub static CONSTRUCTORS: &[(&FilterSpec, Make)] = &[
    (&catalog::sources::PCAPIN, sources::PcapIn::make),
    (&catalog::sources::FILE, sources::FileIn::make),
    (&catalog::sources::STDIN, sources::StdinIn::make),
    (&catalog::sources::GEN, sources::Gen::make),
    (&catalog::live::RX, live::make),
    (&catalog::proto::ETH, proto::eth),
    (&catalog::proto::IP, proto::ip),
    (&catalog::proto::TCP, proto::tcp),
    (&catalog::proto::UDP, proto::udp),
    (&catalog::proto::ICMP, proto::icmp),
    (&catalog::proto::DPORT, proto::dport),
    (&catalog::proto::SPORT, proto::sport),
    (&catalog::proto::PROTO, proto::proto),
    (&catalog::bpf::BPF, bpf::make),
    (&catalog::proto::FLOW, proto::flow),
    (&catalog::app::TCPSTREAM, app::make_tcpstream),
    (&catalog::app::HTTP, app::make_http),
    (&catalog::app::DNS, app::make_dns),
    (&catalog::inspect::GREP, inspect::make_grep),
    (&catalog::inspect::REGEX, inspect::make_grep),
    (&catalog::inspect::MATCH, inspect::make_match),
    (&catalog::inspect::COUNT, inspect::make_count),
    (&catalog::inspect::HIST, inspect::make_hist),
    (&catalog::inspect::INSPECT, inspect::make_inspect),
    (&catalog::inspect::DEDUP, inspect::make_dedup),
    (&catalog::ids::IPS, ids::filter::make),
    (&catalog::httplog::HTTPLOG, httplog::make),
    (&catalog::nicfix::SAMPLE, nicfix::make_sample),
    (&catalog::nicfix::FLOWCOUNT, nicfix::make_flowcount),
    (&catalog::nicfix::BYTECOUNT, nicfix::make_bytecount),
    (&catalog::flows::IPFIX, flows::filter::make),
    (&catalog::flows::IPFIXIN, flows::collect::IpfixIn::make),
    (&catalog::edit::STRIP, edit::make_strip),
    (&catalog::edit::DEFLATE, edit::make_deflate),
    (&catalog::edit::INFLATE, edit::make_inflate),
    (&catalog::edit::ENCRYPT, edit::make_encrypt),
    (&catalog::edit::DECRYPT, edit::make_decrypt),
    (&catalog::edit::XOR, edit::make_xor),
    (&catalog::control::FOR, control::make_for),
    (&catalog::control::JOIN, control::make_join),
    (&catalog::control::SPLIT, control::make_split),
    (&catalog::control::HASH, control::make_hash),
    (&catalog::sinks::OUTFILE, sinks::make_outfile),
    (&catalog::sinks::STDOUT, sinks::make_stdout),
    (&catalog::sinks::PCAPOUT, sinks::make_pcapout),
    (&catalog::sinks::NULL, sinks::make_null),
    (&catalog::net::NETOUT, net::make_netout),
    (&catalog::net::NETIN, net::make_netin),
    (&catalog::kafka::KAFKAOUT, kafka::make_kafkaout),
    (&catalog::kafka::KAFKAIN, kafka::make_kafkain),
    (&catalog::shaping::SHAPE, shaping::make),
    (&catalog::transmit::TX, transmit::make),
];

/// The declaration of the native filter `name` and its constructor.
pub fn native(name: &str) -> Option<(&'static FilterSpec, Make)> {
    CONSTRUCTORS.iter().copied().find(|(s, _)| s.name == name)
}

/// The control options of thesis Table 3.2 that concern the filter's construction, for a
/// filter that does not declare a key of the same name itself: `file=F` passes the
/// contents of F as its first parameter (`regex file=patterns.txt`); `reuse=` and
/// `binary=` are refused, saying why (nothing here gives them a meaning yet); `mode=`
/// needs an exported stream whose permissions it sets, or a source of
/// [`dataplane::Origin::Unseen`] data, whose mode the client declares with it.
pub fn control_options(spec: &FilterSpec, args: &Args) -> Result<Args, FilterError> {
    let declared = |k: &str| spec.params.iter().any(|p| p.name == k);
    let mut args = args.clone();
    if !declared("reuse") && args.options.contains_key("reuse") {
        return Err(FilterError::Rule("reuse=: a run is not reconfigured while it runs yet, so there is no state to keep across updates".into()));
    }
    if !declared("binary") && args.options.contains_key("binary") {
        return Err(FilterError::Rule("binary=: there is no repository of blobs to take a parameter from; pass it with file= instead".into()));
    }
    if !declared("mode") {
        if let Some(m) = args.options.get("mode") {
            let exported = ["export", "exportdata"]
                .iter()
                .any(|k| args.options.get(*k).is_some_and(|v| v == "yes"));
            // On a source whose data the daemon cannot see, the client says how readable
            // what it reads is (`control::access`).
            if !exported && spec.origin != dataplane::Origin::Unseen {
                return Err(FilterError::Rule(format!("mode={m}: sets the permissions of the stream the filter exports (or of what a source reads from where the daemon cannot see); give export=yes too")));
            }
        }
    }
    if !declared("file") {
        if let Some(path) = args.options.remove("file") {
            let Some(first) = spec.positional(0) else {
                return Err(FilterError::Rule(format!(
                    "file={path}: {} takes no parameter to read from a file",
                    spec.name
                )));
            };
            if !args.positional.is_empty() || args.options.contains_key(first.name) {
                return Err(FilterError::Rule(format!(
                    "file={path}: give {} either in the pipeline or in a file, not both",
                    first.name
                )));
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|e| FilterError::io(format!("file={path}"), e))?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            let text = text.strip_suffix('\r').unwrap_or(text);
            args.positional.insert(0, text.to_string());
        }
    }
    Ok(args)
}

/// The library as the runtime's factory.
pub struct Library;

impl Factory for Library {
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, dataplane::FilterError> {
        let (spec, make) = native(name)
            .ok_or_else(|| FilterError::Rule(format!("no native filter named '{name}'")))?;
        dataplane::decl::build(spec, make, &control_options(spec, args)?)
    }
    fn is_source(&self, name: &str) -> bool {
        find(name).is_some_and(|s| s.source)
    }
    fn replication(&self, name: &str) -> dataplane::Replication {
        find(name).map_or(dataplane::Replication::Blocks, |s| s.replication)
    }
    fn keeps_sessions(&self, name: &str) -> bool {
        find(name).is_some_and(FilterSpec::keeps_sessions)
    }
    fn order_matters(&self, name: &str) -> bool {
        find(name).is_none_or(|s| s.access != dataplane::Access::Statistics)
    }
    fn keeps_blocks(&self, name: &str) -> bool {
        find(name).is_some_and(|s| s.access == dataplane::Access::Reordering)
    }
    fn declares(&self, name: &str, key: &str) -> bool {
        find(name).is_some_and(|s| s.param(key).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every declaration has exactly one constructor, and every constructor is paired with
    /// a declaration of the registry (not a stray copy of one).
    #[test]
    fn every_declaration_has_exactly_one_constructor_and_every_constructor_a_declaration() {
        for spec in REGISTRY {
            let n = CONSTRUCTORS
                .iter()
                .filter(|(s, _)| std::ptr::eq(*s, *spec))
                .count();
            assert_eq!(
                n, 1,
                "{} has {n} constructors in filters::CONSTRUCTORS",
                spec.name
            );
        }
        for (spec, _) in CONSTRUCTORS {
            assert!(
                REGISTRY.iter().any(|r| std::ptr::eq(*r, *spec)),
                "filters::CONSTRUCTORS builds {}, which catalog::REGISTRY does not list",
                spec.name
            );
        }
        assert_eq!(CONSTRUCTORS.len(), REGISTRY.len());
    }
}
