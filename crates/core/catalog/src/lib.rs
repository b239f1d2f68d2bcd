//! # catalog: the native filters as data
//!
//! Every native filter's declaration ([`FilterSpec`]: its documentation in fixed sections,
//! its parameters with position, kind and default, its classes, access class and
//! replication, its implementations and their spaces, the privilege it needs and where its
//! data comes from) and the list of them, [`REGISTRY`], in the order `streamline filters`
//! lists them. [`find`] looks one up, [`Natives`] is the list as the language's name
//! resolver, [`shown`] redacts pipeline text by the declarations' secret parameters.
//!
//! Pure data: what the daemon, PipesFS, the policy and the control plane read of a filter
//! without linking the filters themselves or the kernel plane they bring (libbpf,
//! libpcap, AF_PACKET). Each filter's constructor lives beside its code in `filters` and
//! is paired with its declaration in one table there (`filters::CONSTRUCTORS`, a test
//! checks every declaration has exactly one constructor and every constructor a
//! declaration). The declarations are grouped as `filters`' modules are:
//! `catalog::nicfix::SAMPLE` is built by `filters::nicfix`.
//!
//! Depends on `lang` alone, and not the other way: a declaration is checked against the
//! language's control options (`lang::CONTROL_OPTIONS`) and hints, and [`Natives`] is a
//! `lang::Resolver`; the language stays free of any filter (it takes a resolver).

#![forbid(unsafe_code)]

pub mod spec;

pub mod app;
pub mod bpf;
pub mod control;
pub mod edit;
pub mod flows;
pub mod httplog;
pub mod ids;
pub mod inspect;
pub mod kafka;
pub mod live;
pub mod net;
pub mod nicfix;
pub mod proto;
pub mod shaping;
pub mod sinks;
pub mod sources;
pub mod transmit;

pub use spec::{
    control_options_doc, parse_size, Access, Cost, FilterSpec, Implementation, KernelForm, Kind,
    Needs, Origin, Param, Replication, Space, COMMON_OPTIONS, HINTS, PLANNER_OPTIONS,
};

/// Every native filter, in the order `streamline filters` lists them: the one line a new
/// filter adds outside the file that declares it (besides its constructor's line in
/// `filters::CONSTRUCTORS`).
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
    &ids::IPS,
    &httplog::HTTPLOG,
    &nicfix::SAMPLE,
    &nicfix::FLOWCOUNT,
    &nicfix::BYTECOUNT,
    &flows::IPFIX,
    &flows::IPFIXIN,
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

/// The declaration of the native filter `name`.
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
