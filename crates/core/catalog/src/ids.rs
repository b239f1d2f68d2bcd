//! The declaration of `filters::ids`' filter, `ips` (its constructor is there).

use crate::{
    Access, Cost, FilterSpec, Implementation, KernelForm, Kind, Needs, Param, Replication, Space,
};

pub static IPS: FilterSpec = FilterSpec::new("ips", Access::Classification)
    .synopsis("ips rules=FILE [eve=FILE] [fast=FILE] [mode=ips|ids] [home=NET] [external=NET] [flood=RATE/BURST] [placed=user]")
    .description(
        "Intrusion detection and prevention with rules users already write (the common subset of\n\
         Snort 3 and Suricata rules: contents and their modifiers, pcre, flow, flowbits, HTTP\n\
         buffers, threshold). TCP connections are reassembled conservatively: data overlapping\n\
         earlier data with other bytes drops the connection with an alert (gid 129). Alerts go to\n\
         Suricata's eve.json and fast.log (standard error when neither file is given). Inline\n\
         (mode=ips, the default) a matching drop rule drops the packet and the rest of its\n\
         connection; mode=ids only alerts. The rules' header stage (one pcap-filter expression of\n\
         the protocols and ports any rule looks at, in either direction, plus IP fragments, IPv6\n\
         extension headers and VLAN frames) decides which frames are judged at all; the rest pass\n\
         on unjudged and uncounted. When `ips` ends a pipeline right after `rx`, that stage runs\n\
         on the capture socket, so frames no rule can match never reach user space (placed=user\n\
         keeps it here); the alerts are the same either way.",
    )
    .params(&[
        Param::new("rules", "the rule file (also positional)").at(0).kind(Kind::Path),
        Param::new("eve", "write alerts as eve.json lines to this file"),
        Param::new("fast", "write alerts as fast.log lines to this file"),
        Param::new("mode", "ips drops what drop rules match; ids only alerts")
            .kind(Kind::Choice(&["ips", "ids"]))
            .default("ips"),
        Param::new("home", "$HOME_NET (default any)"),
        Param::new("external", "$EXTERNAL_NET (default any)"),
        Param::new("skip_unsupported", "yes: skip (and count) rules with keywords not supported, instead of failing")
            .kind(Kind::Flag)
            .default("no"),
        Param::new("flood", "RATE[/BURST]: new TCP connections per second each service (address and port) admits; more are refused (alert 135:1)"),
        Param::new("depth", "bytes of each connection direction inspected").kind(Kind::Size).default("1M"),
        Param::new("flows", "connections followed at once (the oldest go first)").kind(Kind::Size).default("64K"),
        Param::new(lang::resolve::PLACED, "kernel when the header stage runs on the capture socket (set for a pipeline ending in `rx | ips`); user keeps it in this space").kind(Kind::Choice(&["user", "kernel"])).default("user"),
    ])
    .classes("the block's class for packets let through; 0 for dropped ones")
    .example("streamline run 'pcapin file=examples/sample.pcap | ips rules=examples/ips.rules eve=eve.json | null'")
    .implementations(&[
        // The header stage on `rx`'s socket, the judging in user space on what it lets
        // through (Kernel Snort, thesis 7.3.2).
        Implementation { name: "header-stage-on-socket", space: Space::Kernel(KernelForm::SocketFilter), needs: Needs::AfPacket, cost: Cost::DEFAULT.forward(0.1) },
        Implementation::NATIVE,
    ])
    .replication(Replication::Never(
        "its connection table, thresholds and alert log span the whole stream",
    ));
