//! A filter's declaration ([`FilterSpec`]) and the types it is made of: every fact about a
//! filter but its constructor, as plain data. `streamline filters NAME` prints
//! [`FilterSpec::doc`]; the dataplane checks arguments against it before the filter's
//! constructor runs (`dataplane::decl::check`); the optimizer's catalog reads
//! [`FilterSpec::implementations`] (the spaces each implementation runs in, what it needs
//! of the machine, its cost hints) and the kernel placement asks
//! [`FilterSpec::runs_after_rx_in_kernel`].
//!
//! Declarations are constants built with `const fn`s, the same way for every filter,
//! sources included:
//!
//! ```
//! use catalog::{Access, FilterSpec, Kind, Param};
//! static TOY: FilterSpec = FilterSpec::new("toy", Access::Classification)
//!     .synopsis("toy [n=N]")
//!     .description("Passes every block.")
//!     .params(&[Param::new("n", "how many (also positional)").at(0).kind(Kind::Count).default("1")])
//!     .classes("1 for every block")
//!     .example("streamline run 'gen | toy | count'");
//! assert_eq!(TOY.positional(0).map(|p| p.name), Some("n"));
//! ```

/// Table 5.1 data-access classes (used by the optimizer later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Metadata,
    Statistics,
    Inspection,
    Classification,
    Reordering,
    Editing,
    Source,
    Sink,
}

/// Whether copies of a filter, each given part of the stream, together do what one copy
/// does with all of it (thesis 5.4, data parallelism). Placement must never change a
/// result, so `space=A,B` and the optimizer's data-parallel template replicate only
/// filters that say so, and split the stream the way the filter needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// Each block is handled on its own: any split works (round-robin, an ordered join
    /// restores the order).
    Blocks,
    /// State per session (class): copies agree with one copy if each session stays on one
    /// copy (a hash split on the class).
    Sessions,
    /// Needs the whole stream (it counts, samples, reads or writes it): never replicated;
    /// the text says why.
    Never(&'static str),
}

impl Replication {
    /// What a filter of access class `a` needs, unless it declares otherwise.
    pub const fn of(a: Access) -> Replication {
        match a {
            Access::Source => {
                Replication::Never("a source produces the stream; replicate the filters after it")
            }
            Access::Sink => Replication::Never("a sink writes the whole stream in order"),
            Access::Statistics => Replication::Never("its totals are over the whole stream"),
            Access::Reordering => Replication::Sessions,
            _ => Replication::Blocks,
        }
    }
}

/// A size or count with an optional K/M/G suffix (binary: 2K = 2,048), as parameters and
/// the policy's limits write them; None if it is not one or overflows.
pub fn parse_size(v: &str) -> Option<u64> {
    let (num, mul) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1u64 << 10),
        'm' | 'M' => (&v[..v.len() - 1], 1 << 20),
        'g' | 'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// What values a parameter takes (checked against the declaration before the filter's
/// constructor runs, `dataplane::decl::check`; the constructor still checks what the type
/// cannot say, such as a range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any text (a path, an expression, a pattern).
    Text,
    /// A non-negative whole number.
    Count,
    /// A number (fractions allowed).
    Number,
    /// A byte size or count with an optional K/M/G suffix.
    Size,
    /// yes or no (also true/false, 1/0, on/off).
    Flag,
    /// Hexadecimal digits (an `0x` before them allowed).
    Hex,
    /// Comma-separated non-negative whole numbers.
    Numbers,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// A path of a file the filter reads. A daemon's worker opens it with the client's
    /// identity, and a source's stream is no more readable than the file
    /// (`control::access`).
    Path,
}

impl Kind {
    /// What a value of this kind is, in words (what an error about a bad value says was expected).
    pub fn expected(&self) -> String {
        match self {
            Kind::Text => "text".into(),
            Kind::Path => "a file path".into(),
            Kind::Count => "a non-negative whole number".into(),
            Kind::Number => "a number".into(),
            Kind::Size => "a size (e.g. 64, 4K, 1M)".into(),
            Kind::Flag => "yes or no".into(),
            Kind::Hex => "hexadecimal digits".into(),
            Kind::Numbers => "non-negative whole numbers separated by commas".into(),
            Kind::Choice([one]) => one.to_string(),
            Kind::Choice([rest @ .., last]) => format!("{} or {last}", rest.join(", ")),
            Kind::Choice([]) => "no value".into(),
        }
    }

    /// Whether `v` is a value of this kind.
    pub fn admits(&self, v: &str) -> bool {
        match self {
            Kind::Text | Kind::Path => true,
            Kind::Count => v.parse::<u64>().is_ok(),
            Kind::Number => v.parse::<f64>().is_ok_and(f64::is_finite),
            Kind::Size => parse_size(v).is_some(),
            Kind::Flag => matches!(
                v,
                "yes" | "no" | "true" | "false" | "1" | "0" | "on" | "off"
            ),
            Kind::Hex => {
                let v = v.strip_prefix("0x").unwrap_or(v);
                !v.is_empty() && v.bytes().all(|b| b.is_ascii_hexdigit())
            }
            Kind::Numbers => v.split(',').all(|p| p.trim().parse::<u64>().is_ok()),
            Kind::Choice(words) => words.contains(&v),
        }
    }
}

/// One parameter: its key, documentation, position (if it may also be given without its
/// key), the kind of its values and its default (in words, as the documentation shows it).
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub doc: &'static str,
    /// The positional parameter it also is (`eth 86dd` is `eth type=86dd`).
    pub position: Option<usize>,
    /// It takes its position and every positional parameter after it (`match A B C`).
    pub variadic: bool,
    pub kind: Kind,
    pub default: Option<&'static str>,
    /// Bytes of memory each unit of its value makes the filter allocate (0: none): a ring
    /// of `blocks=N` blocks of 1 MiB declares `1 << 20`, a buffer of `limit=BYTES` declares
    /// 1. The daemon refuses a value whose memory exceeds its limit (`max_ring`) before
    /// anything is built.
    pub memory: u64,
    /// Its value is a secret (a key, a password, a token): never shown in `ps`, PipesFS,
    /// logs or error messages (`lang::redact`), only given to the filter.
    pub secret: bool,
}

impl Param {
    /// A text parameter given by key only, without default.
    pub const fn new(name: &'static str, doc: &'static str) -> Param {
        Param {
            name,
            doc,
            position: None,
            variadic: false,
            kind: Kind::Text,
            default: None,
            memory: 0,
            secret: false,
        }
    }
    /// Also the positional parameter at `pos`.
    pub const fn at(self, pos: usize) -> Param {
        Param {
            position: Some(pos),
            ..self
        }
    }
    /// Also the positional parameters from `pos` on, as many as given.
    pub const fn from(self, pos: usize) -> Param {
        Param {
            position: Some(pos),
            variadic: true,
            ..self
        }
    }
    pub const fn kind(self, kind: Kind) -> Param {
        Param { kind, ..self }
    }
    pub const fn default(self, default: &'static str) -> Param {
        Param {
            default: Some(default),
            ..self
        }
    }
    /// Each unit of its value is `bytes` of memory the filter allocates (see `memory`).
    pub const fn memory(self, bytes: u64) -> Param {
        Param {
            memory: bytes,
            ..self
        }
    }
    /// The memory a value asks for, in bytes, if the value is a size or a count (with
    /// K/M/G suffixes); saturates rather than wraps.
    pub fn memory_of(&self, value: &str) -> Option<u64> {
        if self.memory == 0 {
            return None;
        }
        parse_size(value).map(|n| n.saturating_mul(self.memory))
    }
    /// Its value is secret (see [`Param::secret`]).
    pub const fn secret(self) -> Param {
        Param {
            secret: true,
            ..self
        }
    }
}

/// Where the data a filter adds to its output comes from, besides its inputs: what its
/// stream's mode follows (`control::access`; thesis 6.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Nothing but its inputs (most filters): its stream is as readable as they are.
    Inputs,
    /// Made up by the filter itself (`gen`): readable by anyone (0666).
    Synthetic,
    /// The files its [`Kind::Path`] parameters name: no more readable than they are.
    Files,
    /// Something the daemon cannot see (standard input, the network, a broker, a device):
    /// readable by the client alone (0600) unless the client says `mode=`.
    Unseen,
}

/// A requirement an implementation has of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// AF_PACKET sockets (rx; classic BPF attached to the socket).
    AfPacket,
    /// The bpf(2) syscall (eBPF programs and maps).
    Bpf,
}

/// The kernel forms an implementation can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelForm {
    /// The capture socket itself (AF_PACKET with its ring: `rx`).
    Capture,
    /// Classic BPF attached to the capture socket, run right after `rx`.
    SocketFilter,
    /// An eBPF program keeping its state in BPF maps, attached to the capture socket right
    /// after `rx` (the NIC-FIX filters).
    EbpfMaps,
    /// Known to the optimizer's model only: the runtime has no such program, and a kernel
    /// choice runs the filter in user space next to `rx`.
    ModelOnly,
}

/// Where an implementation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// A thread or a process (the native Rust filter, or an interpreter).
    User,
    Kernel(KernelForm),
}

/// Cost hints of an implementation, relative to the defaults of the filter's access class
/// (the control plane's Table 6.2 cost model fills in the rest): cycles per call (absolute,
/// or scaled from the default), the share of blocks it forwards, cycles per byte and the
/// share of each block's bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub per_call: Option<f64>,
    pub per_call_scale: f64,
    pub forward: Option<f64>,
    pub per_byte: Option<f64>,
    pub bytes_read: Option<f64>,
}

impl Cost {
    /// The access class's defaults, unchanged.
    pub const DEFAULT: Cost = Cost {
        per_call: None,
        per_call_scale: 1.0,
        forward: None,
        per_byte: None,
        bytes_read: None,
    };
    pub const fn per_call(self, cycles: f64) -> Cost {
        Cost {
            per_call: Some(cycles),
            ..self
        }
    }
    pub const fn per_call_scaled(self, factor: f64) -> Cost {
        Cost {
            per_call_scale: factor,
            ..self
        }
    }
    pub const fn forward(self, share: f64) -> Cost {
        Cost {
            forward: Some(share),
            ..self
        }
    }
    pub const fn per_byte(self, cycles: f64) -> Cost {
        Cost {
            per_byte: Some(cycles),
            ..self
        }
    }
    pub const fn bytes_read(self, share: f64) -> Cost {
        Cost {
            bytes_read: Some(share),
            ..self
        }
    }
}

/// One way to run a filter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Implementation {
    /// `native`, `cbpf-socket`, `cbpf-interp`, `ebpf-map`, `af-packet`, ...
    pub name: &'static str,
    pub space: Space,
    pub needs: Needs,
    pub cost: Cost,
}

impl Implementation {
    /// The Rust filter in a user space, at its access class's default cost.
    pub const NATIVE: Implementation = Implementation {
        name: "native",
        space: Space::User,
        needs: Needs::Nothing,
        cost: Cost::DEFAULT,
    };
}

/// Option keys any filter takes besides its declared parameters and the control options
/// of thesis Table 3.2 (`lang::CONTROL_OPTIONS`): the planner's estimates `sel=`, `rate=`,
/// `bytes=` (a filter that declares a key of the same name, `strip bytes=`, keeps it).
pub const PLANNER_OPTIONS: [&str; 3] = ["sel", "rate", "bytes"];

/// Everything about a filter, declared once (see the module documentation).
pub struct FilterSpec {
    pub name: &'static str,
    pub synopsis: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
    pub classes: &'static str,
    /// Names of classes it sets, for `|name` selectors (thesis Table 3.1: `dport |http`).
    pub class_names: &'static [(&'static str, u16)],
    pub example: &'static str,
    pub access: Access,
    /// Whether and how it may be replicated (see [`Replication`]).
    pub replication: Replication,
    pub source: bool,
    /// The ways it runs, each in the spaces it can run in (the optimizer chooses; its
    /// constructor builds the filter for whichever was chosen: a kernel form is set up from the user
    /// space filter, `rx`'s socket, `placed=kernel`).
    pub implementations: &'static [Implementation],
    /// The capability it needs beyond an ordinary user's (`CAP_NET_RAW` for raw capture
    /// and transmission). The daemon lets an unprivileged client instantiate such a filter
    /// only through a template its policy grants (thesis 6.5.3).
    pub privilege: Option<&'static str>,
    /// Where the data it adds comes from (its stream's mode follows it). A source is
    /// [`Origin::Unseen`] unless it says otherwise; any other filter [`Origin::Inputs`].
    pub origin: Origin,
    /// Whether its name is also a standard Unix tool's (`grep`, `file`, ...): next to a
    /// Unix command in a pipeline, the name means the tool (`lang::Resolver::unix_tool`).
    pub unix_tool: bool,
}

/// The control options every filter takes (thesis Table 3.2, `lang::CONTROL_OPTIONS`),
/// as [`control_options_doc`] explains them. A filter's own page ([`FilterSpec::doc`])
/// points here and adds only what is its own (`space=A,B`, `file=`, a source's `mode=`).
pub const COMMON_OPTIONS: &[(&str, &str)] = &[
    ("name=X", "names the node; every occurrence of the name is this one node (two branches into one filter, loops)"),
    ("space=S", "where it runs: local (the calling thread), N or tN (a thread pinned to CPU N mod the CPUs), pN (a process of its own)"),
    ("space=A,B", "copies in each space (data parallelism), where the filter allows it: `streamline filters NAME` says"),
    ("export=yes", "its output also goes to a named IBuf /dev/shm/streamline.NAME other processes read"),
    ("exportdata=yes", "the same (exported blocks are always written through with their data)"),
    ("size=BYTES", "bytes of its output's buffer where it has one: a channel to another space, an exported stream (K, M, G: binary)"),
    ("mode=PERM", "permission bits (octal) of its exported stream, at most what its inputs allow (what comes from where the daemon cannot see counts as 0600 unless said); needs export=yes"),
    ("share=yes|no|auto", "prefix sharing between runs: no ends the shared prefix here, yes admits a filter that keeps state (auto, the default: stateless filters after rx)"),
    ("file=F", "the contents of F as its first parameter, where it takes one"),
    ("reuse=", "refused: runs are not reconfigured while they run yet"),
    ("binary=", "refused: there is no blob repository; use file="),
];

/// The scheduling hints (thesis Table 3.3), written `@hint` after a filter or a
/// parenthesized group.
pub const HINTS: &[(&str, &str)] = &[
    ("throughput", "channels into it wake it for large batches"),
    ("latency", "channels into it wake it for every block"),
    ("lockstep", "the channel into it is a queue of 4 batches its consumer polls: an assembly line whose stations stay a few batches apart"),
    ("single", "never replicated (space=A,B and the optimizer's copies are refused)"),
    ("private", "a process space of its own"),
    ("realtime", "a thread of its own scheduled SCHED_RR (priority 10)"),
    ("hrealtime", "a thread of its own scheduled SCHED_FIFO (priority 50), memory locked"),
    ("background", "a thread of its own scheduled SCHED_IDLE (lowest priority)"),
    ("quiet", "a silent part: channels into it batch wake-ups up to their latency bound"),
    ("busy", "a hotspot: channels into it are polled instead of slept on"),
];

/// `streamline help options`: the control options and hints every filter takes.
pub fn control_options_doc() -> String {
    let mut s =
        String::from("CONTROL OPTIONS (thesis Table 3.2): key=value words every filter takes\n");
    for (k, text) in COMMON_OPTIONS {
        s += &format!("    {k:<20} {text}\n");
    }
    s += "\nA filter that declares a parameter of the same name (gen's size=) keeps its own.\n";
    s += "\nHINTS (thesis Table 3.3): @hint after a filter, or after a (group) for every filter in it\n";
    for (k, text) in HINTS {
        s += &format!("    @{k:<19} {text}\n");
    }
    s += "\nSee `streamline help pipelines` for examples.\n";
    s
}

impl FilterSpec {
    /// A declaration with the defaults of its access class: replicated as
    /// [`Replication::of`] says, a source if the class is [`Access::Source`], one native
    /// implementation, no parameters.
    pub const fn new(name: &'static str, access: Access) -> FilterSpec {
        FilterSpec {
            name,
            synopsis: name,
            description: "",
            params: &[],
            classes: "",
            class_names: &[],
            example: "",
            access,
            replication: Replication::of(access),
            source: matches!(access, Access::Source),
            implementations: &[Implementation::NATIVE],
            privilege: None,
            origin: if matches!(access, Access::Source) {
                Origin::Unseen
            } else {
                Origin::Inputs
            },
            unix_tool: false,
        }
    }
    pub const fn synopsis(self, synopsis: &'static str) -> FilterSpec {
        FilterSpec { synopsis, ..self }
    }
    pub const fn description(self, description: &'static str) -> FilterSpec {
        FilterSpec {
            description,
            ..self
        }
    }
    pub const fn params(self, params: &'static [Param]) -> FilterSpec {
        FilterSpec { params, ..self }
    }
    pub const fn classes(self, classes: &'static str) -> FilterSpec {
        FilterSpec { classes, ..self }
    }
    pub const fn class_names(self, class_names: &'static [(&'static str, u16)]) -> FilterSpec {
        FilterSpec {
            class_names,
            ..self
        }
    }
    pub const fn example(self, example: &'static str) -> FilterSpec {
        FilterSpec { example, ..self }
    }
    pub const fn replication(self, replication: Replication) -> FilterSpec {
        FilterSpec {
            replication,
            ..self
        }
    }
    pub const fn implementations(self, implementations: &'static [Implementation]) -> FilterSpec {
        FilterSpec {
            implementations,
            ..self
        }
    }
    pub const fn privileged(self, capability: &'static str) -> FilterSpec {
        FilterSpec {
            privilege: Some(capability),
            ..self
        }
    }

    pub const fn origin(self, origin: Origin) -> FilterSpec {
        FilterSpec { origin, ..self }
    }

    /// Declares that its name is also a standard Unix tool's (see the field).
    pub const fn unix_tool(self) -> FilterSpec {
        FilterSpec {
            unix_tool: true,
            ..self
        }
    }

    /// Whether option `key` is secret (see [`Param::secret`]).
    pub fn is_secret(&self, key: &str) -> bool {
        self.param(key).is_some_and(|p| p.secret)
    }

    /// Its secret parameters: key, and position if it also takes one.
    pub fn secrets(&self) -> impl Iterator<Item = (&'static str, Option<usize>)> + '_ {
        self.params
            .iter()
            .filter(|p| p.secret)
            .map(|p| (p.name, p.position))
    }

    /// Whether it keeps per-session state (its copies need a hash split on the class).
    pub fn keeps_sessions(&self) -> bool {
        self.replication == Replication::Sessions
    }

    /// Whether, placed right after `rx`, it runs in the kernel on the capture socket (a
    /// socket filter or an eBPF program with maps), unless told `placed=user`.
    pub fn runs_after_rx_in_kernel(&self) -> bool {
        self.implementations.iter().any(|i| {
            matches!(
                i.space,
                Space::Kernel(KernelForm::SocketFilter | KernelForm::EbpfMaps)
            )
        })
    }

    /// The parameter a key names.
    pub fn param(&self, key: &str) -> Option<&'static Param> {
        self.params.iter().find(|p| p.name == key)
    }

    /// The parameter positional parameter `i` is.
    pub fn positional(&self, i: usize) -> Option<&'static Param> {
        self.params
            .iter()
            .find(|p| p.position == Some(i))
            .or_else(|| {
                self.params
                    .iter()
                    .find(|p| p.variadic && p.position.is_some_and(|at| at <= i))
            })
    }

    /// How many positional parameters it takes at most (None: any number).
    pub fn max_positional(&self) -> Option<usize> {
        if self.params.iter().any(|p| p.variadic) {
            return None;
        }
        Some(
            self.params
                .iter()
                .filter_map(|p| p.position)
                .map(|p| p + 1)
                .max()
                .unwrap_or(0),
        )
    }

    /// Its one-line description, as `streamline filters` lists it: the first sentence of
    /// its description (the declaration is its one home), cut at its first `:`, `;` or
    /// `,` outside parentheses while longer than 100 characters.
    pub fn summary(&self) -> String {
        let text = self
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let end = text
            .match_indices(". ")
            .map(|(i, _)| i)
            .find(|&i| !(text[..i].ends_with("e.g") || text[..i].ends_with("i.e")))
            .unwrap_or(text.len());
        let mut s = text[..end].trim_end_matches('.');
        for sep in [':', ';', ','] {
            if s.chars().count() <= 100 {
                break;
            }
            let mut depth = 0i32;
            let cut = s.char_indices().find(|&(i, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth == 0 && c == sep && i >= 15
            });
            if let Some((i, _)) = cut {
                s = &s[..i];
            }
        }
        if s.is_empty() {
            self.synopsis.to_string()
        } else {
            format!("{s}.")
        }
    }

    /// The documentation as `streamline filters NAME` prints it.
    pub fn doc(&self) -> String {
        let mut s = format!(
            "{}\n\nSYNOPSIS\n    {}\n\nDESCRIPTION\n",
            self.name, self.synopsis
        );
        for l in self.description.lines() {
            s += &format!("    {l}\n");
        }
        s += "\nPARAMETERS\n";
        if self.params.is_empty() {
            s += "    (none)\n";
        }
        for p in self.params {
            s += &format!("    {:<12} {}", p.name, p.doc);
            if let Some(d) = p.default {
                if !p.doc.contains("default") {
                    s += &format!(" (default {d})");
                }
            }
            if p.secret {
                s += " (secret: shown as <secret> in ps, PipesFS, logs and errors)";
            }
            // Where a count or size is read, its suffixes are said (one home: the kind).
            if matches!(p.kind, Kind::Size) {
                s += " [K, M, G are binary: 2K = 2,048, 20M = 20,971,520]";
            }
            s += "\n";
        }
        s += &format!("\nCLASSES\n    {}\n", self.classes);
        if !self.class_names.is_empty() {
            let v: Vec<String> = self
                .class_names
                .iter()
                .map(|(n, c)| format!("{n} ({c})"))
                .collect();
            s += &format!("    names for selectors (`|name`): {}\n", v.join(", "));
        }
        if self.implementations.len() > 1
            || self
                .implementations
                .first()
                .is_some_and(|i| i.space != Space::User)
        {
            s += "\nIMPLEMENTATIONS\n";
            for i in self.implementations {
                let space = match i.space {
                    Space::User => "user space",
                    Space::Kernel(KernelForm::Capture) => "kernel: the capture socket",
                    Space::Kernel(KernelForm::SocketFilter) => {
                        "kernel: classic BPF on the capture socket, right after rx"
                    }
                    Space::Kernel(KernelForm::EbpfMaps) => {
                        "kernel: eBPF with maps on the capture socket, right after rx"
                    }
                    Space::Kernel(KernelForm::ModelOnly) => {
                        "kernel (the optimizer's model only; runs in user space next to rx)"
                    }
                };
                let needs = match i.needs {
                    Needs::Nothing => "",
                    Needs::AfPacket => ", needs AF_PACKET",
                    Needs::Bpf => ", needs bpf(2)",
                };
                s += &format!("    {:<12} {space}{needs}\n", i.name);
            }
        }
        // What every filter takes is said once (`streamline help options`,
        // [`control_options_doc`]); here only what is this filter's own.
        s += "\nCONTROL OPTIONS\n";
        let shadowed: Vec<&str> = COMMON_OPTIONS
            .iter()
            .map(|(k, _)| k.split('=').next().unwrap_or(k))
            .filter(|k| self.param(k).is_some())
            .collect();
        s += "    name=, space=, export=, size=, mode=, share=, file= and the @hints every filter\n    takes: `streamline help options`";
        if !shadowed.is_empty() {
            s += &format!(" ({} is its own parameter here)", shadowed.join(", "));
        }
        s += "\n";
        let mut opt = |k: &str, text: String| {
            s += &format!("    {:<18} {}\n", k, text);
        };
        match self.replication {
            Replication::Blocks => opt("space=A,B", "copies in each space, a round-robin split and a join that keeps the order".into()),
            Replication::Sessions => opt("space=A,B", "copies in each space, split by the hash of the class (sessions stay on one copy); refused when what follows sees the order".into()),
            Replication::Never(why) => opt("space=A,B", format!("refused: {why}")),
        }
        if self.origin == Origin::Unseen && self.param("mode").is_none() {
            opt("mode=PERM", "how readable what it reads is (octal permission bits; 0600 unless said: the daemon cannot see where it comes from), and of its exported stream".into());
        }
        if self.param("file").is_none() {
            match self.positional(0) {
                Some(p) => opt(
                    "file=F",
                    format!("the contents of F as its first parameter ({})", p.name),
                ),
                None => opt("file=F", "refused: it takes no parameter".into()),
            }
        }
        s += &format!("\nEXAMPLE\n    {}\n", self.example);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static MANY: FilterSpec = FilterSpec::new("many", Access::Inspection)
        .params(&[Param::new("pattern", "patterns").from(0)]);

    #[test]
    fn the_shared_options_page_names_every_control_option_and_hint() {
        let doc = control_options_doc();
        for k in lang::CONTROL_OPTIONS {
            assert!(
                COMMON_OPTIONS
                    .iter()
                    .any(|(o, _)| o.split('=').next() == Some(k)),
                "control option {k} is not documented"
            );
        }
        for h in lang::Hint::ALL {
            assert!(
                HINTS.iter().any(|(n, _)| *n == h.name())
                    && doc.contains(&format!("@{}", h.name())),
                "hint @{} is not documented",
                h.name()
            );
        }
    }

    #[test]
    fn a_summary_is_the_first_sentence_cut_short() {
        let spec = |d: &'static str| FilterSpec::new("t", Access::Inspection).description(d);
        assert_eq!(
            spec("Counts blocks.\nThen more.").summary(),
            "Counts blocks."
        );
        assert_eq!(
            spec("Passes frames (e.g. IPv4). More.").summary(),
            "Passes frames (e.g. IPv4)."
        );
        let long = spec("Writes packets to a pcap file (readable by tcpdump, and others), with the original timestamps and wire lengths when the packets came from a capture.");
        assert_eq!(
            long.summary(),
            "Writes packets to a pcap file (readable by tcpdump, and others)."
        );
        assert_eq!(FilterSpec::new("t", Access::Inspection).summary(), "t");
    }

    #[test]
    fn kinds_admit_their_values() {
        assert!(Kind::Size.admits("4K") && !Kind::Size.admits("4Q"));
        assert!(
            Kind::Hex.admits("0x86dd")
                && Kind::Hex.admits("86DD")
                && !Kind::Hex.admits("0x")
                && !Kind::Hex.admits("xyz")
        );
        assert!(Kind::Numbers.admits("22,80, 443") && !Kind::Numbers.admits("22,,80"));
        assert!(
            Kind::Number.admits("0.5")
                && !Kind::Number.admits("NaN")
                && !Kind::Number.admits("inf")
        );
        assert_eq!(Kind::Choice(&["a"]).expected(), "a");
        assert_eq!(Kind::Choice(&["a", "b", "c"]).expected(), "a, b or c");
    }

    #[test]
    fn declared_facts_are_queries() {
        let toy = FilterSpec::new("toy", Access::Classification);
        assert!(!toy.runs_after_rx_in_kernel() && !toy.keeps_sessions() && !toy.source);
        let sieve = FilterSpec::new("sieve", Access::Classification).implementations(&[
            Implementation {
                name: "cbpf-socket",
                space: Space::Kernel(KernelForm::SocketFilter),
                needs: Needs::AfPacket,
                cost: Cost::DEFAULT,
            },
            Implementation::NATIVE,
        ]);
        assert!(sieve.runs_after_rx_in_kernel());
        let model = FilterSpec::new("m", Access::Statistics).implementations(&[Implementation {
            name: "ebpf-map",
            space: Space::Kernel(KernelForm::ModelOnly),
            needs: Needs::Bpf,
            cost: Cost::DEFAULT,
        }]);
        assert!(
            !model.runs_after_rx_in_kernel(),
            "a model-only kernel form is not placed on the socket"
        );
        let src = FilterSpec::new("s", Access::Source);
        assert!(src.source && src.replication == Replication::of(Access::Source));
        assert!(FilterSpec::new("r", Access::Reordering).keeps_sessions());
        assert_eq!(MANY.max_positional(), None);
        assert_eq!(MANY.positional(7).map(|p| p.name), Some("pattern"));
    }
}
