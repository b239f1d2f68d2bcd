//! # filters: Streamline's native filter library
//!
//! Grouped by class: [`sources`] (pcapin, file, stdin, gen), [`proto`] (eth, ip, tcp, udp,
//! icmp, dport, sport, proto, flow), [`app`] (tcpstream, http, dns), [`inspect`] (count,
//! hist, inspect, grep, regex, match, dedup), [`nicfix`] (flowcount, sample, bytecount:
//! each also an eBPF program run on the capture socket right after `rx`), [`edit`] (strip, deflate, inflate,
//! encrypt, decrypt, xor), [`shaping`] (shape: pacing by token/leaky buckets), [`control`] (for, join, split, hash), [`sinks`] (outfile, stdout,
//! pcapout, null), [`net`] (netout, netin: streams between hosts), [`kafka`] (kafkaout, kafkain: Kafka topics at the edges). [`packet`] holds the zero-copy frame parsing they share, [`savefile`] the
//! capture-file reader `pcapin` walks files with (libpcap's rules).
//!
//! Every filter is declared once, as one [`FilterSpec`] where the filter is written, listed in
//! [`REGISTRY`]: its documentation in fixed sections, its parameters (position, kind,
//! default), its implementations and their spaces, and its constructor (see
//! `dataplane::decl` and "Adding a filter" in ARCHITECTURE.md). Parsing (pcap, Ethernet/IP/TCP, regex, Aho-Corasick,
//! deflate, AES-GCM) uses the crates the field uses; the filter logic is ours.

#![forbid(unsafe_code)]

pub mod app;
pub mod bpf;
pub mod control;
pub mod edit;
#[doc(hidden)]
pub mod fuzzing;
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

use dataplane::{Args, Factory, Filter, FilterError, FilterSpec};

/// Every native filter, in the order `streamline filters` lists them: the one line a new
/// filter adds outside the file that declares it (a registration the linker gathers, as the
/// `linkme` crate does, needs `link_section`, which this crate's `forbid(unsafe_code)`
/// refuses; `tests/library.rs` checks every declaration here).
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
    &ids::filter::IPS,
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
    &net::NETOUT,
    &net::NETIN,
    &kafka::KAFKAOUT,
    &kafka::KAFKAIN,
    &shaping::SHAPE,
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
        find(name).map(|s| {
            s.class_names
                .iter()
                .map(|&(n, c)| (n.to_string(), c))
                .collect()
        })
    }
    fn unix_tool(&self, name: &str) -> bool {
        find(name).is_some_and(|s| s.unix_tool)
    }
    fn secrets(&self, name: &str) -> Vec<lang::SecretParam> {
        find(name)
            .map(|s| {
                s.secrets()
                    .map(|(key, position)| lang::SecretParam {
                        key: key.to_string(),
                        position,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    fn secret_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = REGISTRY
            .iter()
            .flat_map(|s| s.secrets().map(|(k, _)| k.to_string()))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// Pipeline text as it may be shown to anyone (`ps`, PipesFS, logs, error messages): the
/// values of the parameters the declarations say are secret replaced by `<secret>`
/// (`lang::redact` with the declarations as its judge). The run itself gets the text as
/// written.
pub fn shown(text: &str) -> lang::Redacted {
    lang::redact(text, &Natives)
}

/// A node of a run's graph as it may be shown (PipesFS `.filter`, `.options`): its text
/// redacted as [`shown`] does, and each secret option's value `<secret>`.
pub fn shown_node(n: &dataplane::GraphNode) -> dataplane::GraphNode {
    let name = n.filter.split_whitespace().next().unwrap_or("");
    dataplane::GraphNode {
        filter: shown(&n.filter).text().to_string(),
        options: lang::redact_options(name, &n.options, &Natives),
        ..n.clone()
    }
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
        let spec = find(name)
            .ok_or_else(|| FilterError::Rule(format!("no native filter named '{name}'")))?;
        spec.build(&control_options(spec, args)?)
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
}
