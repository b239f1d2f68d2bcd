//! The declarations of `filters::inspect`'s filters (their constructors are there).

use crate::{
    Access, Cost, FilterSpec, Implementation, KernelForm, Kind, Needs, Param, Replication, Space,
};

pub static COUNT: FilterSpec = FilterSpec::new("count", Access::Statistics)
    .synopsis("count")
    .description("Counts blocks and bytes and passes everything on unchanged. Prints its totals\non one line when the run ends.")
    .classes("unchanged")
    .example("streamline run 'pcapin file=examples/sample.pcap | udp | count'")
    // A model-only eBPF form: the runtime has no such program (a kernel choice runs it in
    // user space next to `rx`), but the thesis' four-stage example (control's
    // tests/optimizer.rs) needs a stage that could go back into the kernel.
    .implementations(&[
        Implementation { name: "ebpf-map", space: Space::Kernel(KernelForm::ModelOnly), needs: Needs::Bpf, cost: Cost::DEFAULT.per_call_scaled(0.8) },
        Implementation::NATIVE,
    ]);
pub static HIST: FilterSpec = FilterSpec::new("hist", Access::Statistics)
    .synopsis("hist [by=class|len]")
    .description("Histogram of block classes (default) or lengths (power-of-two buckets),\nprinted when the run ends. Passes everything on unchanged.")
    .params(&[
        Param::new("by", "class or len (also positional)").at(0).kind(Kind::Choice(&["class", "len"])).default("class"),
    ])
    .classes("unchanged")
    .example("streamline run 'pcapin file=examples/sample.pcap | dport | hist'");
pub static INSPECT: FilterSpec = FilterSpec::new("inspect", Access::Inspection)
    .synopsis("inspect [format=text|json] [file=F]")
    .description("Prints one line per packet, like tcpdump's (time, addresses, ports, flags,\nlength), or one JSON object per line with format=json. Passes everything on.")
    .params(&[
        Param::new("format", "text (default) or json").kind(Kind::Choice(&["text", "json"])).default("text"),
        Param::new("file", "write here instead of standard output"),
    ])
    .classes("unchanged")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | inspect'")
    .replication(Replication::Never("it prints the whole stream in order"));
/// grep's and regex's parameters (the same filter under two names).
const GREP_PARAMS: &[Param] = &[
    Param::new("pattern", "the regular expression (also positional)").at(0),
    Param::new("icase", "yes to ignore case")
        .kind(Kind::Flag)
        .default("no"),
    Param::new("invert", "yes to pass non-matching blocks")
        .kind(Kind::Flag)
        .default("no"),
];
pub static GREP: FilterSpec = FilterSpec::new("grep", Access::Inspection)
    .unix_tool()
    .synopsis("grep PATTERN [icase=yes] [invert=yes]")
    .description("Passes blocks whose contents match a regular expression (Rust regex syntax,\nmatched against bytes).")
    .params(GREP_PARAMS)
    .classes("1 for matching blocks, 0 otherwise")
    .example("streamline run 'file log.txt split=lines | grep \"err(or)?\" | stdout'");
pub static REGEX: FilterSpec = FilterSpec::new("regex", Access::Inspection)
    .synopsis("regex PATTERN [icase=yes] [invert=yes]")
    .description("Same as grep.")
    .params(GREP_PARAMS)
    .classes("1 for matching blocks, 0 otherwise")
    .example("streamline run 'pcapin file=examples/sample.pcap | regex \"GET /[a-z]+\" | count'");
pub static MATCH: FilterSpec = FilterSpec::new("match", Access::Inspection)
    .synopsis("match PATTERN... [file=PATTERNS] [icase=yes]")
    .description("Multi-pattern search (Aho-Corasick) over block contents.")
    .params(&[
        Param::new("pattern", "one or more literal patterns (positional)").from(0),
        Param::new("file", "a file with one pattern per line"),
        Param::new("icase", "yes for ASCII case-insensitive")
            .kind(Kind::Flag)
            .default("no"),
    ])
    .classes("index of the first pattern found + 1; 0 if none")
    .example("streamline run 'pcapin file=examples/sample.pcap | match GET POST |2 count'");
pub static DEDUP: FilterSpec = FilterSpec::new("dedup", Access::Inspection)
    .synopsis("dedup [window=N]")
    .description("Drops blocks whose contents equal one of the last N blocks (default 4096).")
    .params(&[Param::new(
        "window",
        "how many recent blocks to remember (also positional)",
    )
    .at(0)
    .kind(Kind::Size)
    .default("4096")])
    .classes("the block's class (at least 1) for new contents; 0 for duplicates")
    .example("streamline run 'file a.txt split=lines | dedup | stdout'")
    .replication(Replication::Never(
        "its window of recent blocks spans the whole stream",
    ));
