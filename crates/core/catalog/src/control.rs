//! The declarations of `filters::control`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param, Replication};

pub static FOR: FilterSpec = FilterSpec::new("for", Access::Metadata)
    .synopsis("for N name=X")
    .description("Bounds a loop: `pre | for name=L 10 | body | for name=L |! post` runs body ten\ntimes per block, then passes the block on to post.")
    .params(&[
        Param::new("count", "iterations (also positional; default 1)").at(0).kind(Kind::Count).default("1"),
    ])
    .classes("1 while iterations remain, then 0")
    .example("streamline run 'gen count=5 | for name=L 3 | count | for name=L |! null'")
    .replication(Replication::Never("it shapes the graph itself"));
pub static JOIN: FilterSpec = FilterSpec::new("join", Access::Metadata)
    .unix_tool()
    .synopsis("join [mode=all|first|N]")
    .description("Joins parallel branches: all copies (default), the first copy of each block, or\nthe Nth. Templates insert it for `+`, `++` and `+*`.")
    .params(&[
        Param::new("mode", "all, first, or N (also positional)").at(0).default("all"),
    ])
    .classes("the class the copy arrived with")
    .example("streamline run 'pcapin file=examples/sample.pcap | (tcp + udp) | join | count'")
    .replication(Replication::Never("it shapes the graph itself"));
pub static SPLIT: FilterSpec = FilterSpec::new("split", Access::Metadata)
    .unix_tool()
    .synopsis("split [ways=N] [mode=rr|hash]")
    .description("Sends each block down exactly one of its N outgoing arcs: round-robin, or by\nthe hash of its class (sessions stay together). Used for data parallelism.")
    .params(&[
        Param::new("ways", "number of branches (also positional)").at(0).kind(Kind::Count).default("2"),
        Param::new("mode", "rr (default) or hash").kind(Kind::Choice(&["rr", "roundrobin", "hash"])).default("rr"),
    ])
    .classes("the branch number 1..=N")
    .example("streamline run 'gen count=100 | split 2 | count + count'")
    .replication(Replication::Never("it shapes the graph itself"));
pub static HASH: FilterSpec = FilterSpec::new("hash", Access::Classification)
    .unix_tool()
    .synopsis("hash [ways=N] [by=flow|data]")
    .description("Classifies blocks into N classes by flow (5-tuple) or by contents.")
    .params(&[
        Param::new("ways", "number of classes (also positional)")
            .at(0)
            .kind(Kind::Count)
            .default("2"),
        Param::new("by", "flow (default) or data")
            .kind(Kind::Choice(&["flow", "data", "content"]))
            .default("flow"),
    ])
    .classes("1..=N")
    .example("streamline run 'pcapin file=examples/sample.pcap | hash 4 | hist'");
