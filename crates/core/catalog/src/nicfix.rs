//! The declarations of `filters::nicfix`'s filters (their constructors are there).

use crate::{
    Access, Cost, FilterSpec, Implementation, KernelForm, Kind, Needs, Param, Replication, Space,
};

/// Where the filter runs: `placed=user` keeps it in user space; the kernel side (and its
/// maps' pin directory) is set by the kernel placement after `rx`
/// (`live::kernel_placement`). The resolver parses it into [`lang::Placement::side`].
const PLACED: Param = Param::new(
    lang::resolve::PLACED,
    "user keeps it in user space; kernel is set by the placement after `rx`",
)
.kind(Kind::Choice(&["user", "kernel"]))
.default("user");
/// The NIC-FIX filters' implementations: the eBPF program with its state in BPF maps on
/// the capture socket right after `rx` (a map update in the JITed program: a little cheaper
/// than a user call), and the native filter.
const EBPF_OR_NATIVE: &[Implementation] = &[
    Implementation {
        name: "ebpf-map",
        space: Space::Kernel(KernelForm::EbpfMaps),
        needs: Needs::Bpf,
        cost: Cost::DEFAULT.per_call_scaled(0.8),
    },
    Implementation::NATIVE,
];
pub static FLOWCOUNT: FilterSpec = FilterSpec::new("flowcount", Access::Statistics)
    .synopsis("flowcount [flows=N] [top=K] [placed=user]")
    .description("Counts packets and bytes per flow (thesis Figure 7.8 B): IPv4/IPv6 source and destination\n\
       address, protocol, and TCP/UDP ports; frames that are not IP count per ethertype. Bytes\n\
       are frame lengths on the wire. Passes everything on. Right after `rx` it runs in the\n\
       kernel: an eBPF socket filter counts into a BPF map (an LRU hash of `flows` entries),\n\
       pinned under /sys/fs/bpf/streamline/PID/ while the run goes on (`streamline maps`\n\
       shows it). At the end it prints the totals and the `top` flows by packets, the same\n\
       lines whichever implementation ran. Per-flow rows are exact while the flows fit in\n\
       `flows` (beyond it the kernel's LRU evicts old flows, user space stops adding new\n\
       ones); the totals are always exact.")
    .params(&[
        Param::new("flows", "flows tracked (default 64K)").kind(Kind::Size).default("64K"),
        Param::new("top", "flows printed at the end (default 10)").kind(Kind::Count).default("10"),
        PLACED,
    ])
    .classes("unchanged")
    .example("streamline run 'rx dev=eth0 | flowcount top=20 | null'")
    .implementations(EBPF_OR_NATIVE);
pub static SAMPLE: FilterSpec = FilterSpec::new("sample", Access::Inspection)
    .synopsis("sample [every=N] [prob=P seed=S] [placed=user]")
    .description(
        "Passes every Nth block (the Nth, 2Nth, ...; default N=10), or each block with\n\
       probability P. Right after `rx` (without prob=) it runs in the kernel: an eBPF socket\n\
       filter numbers the frames with a counter in a BPF map and drops all but every Nth\n\
       on the socket, so they are never copied to user space. Prints frames seen and passed\n\
       at the end.",
    )
    .params(&[
        Param::new("every", "pass one block in N (also positional)")
            .at(0)
            .kind(Kind::Size)
            .default("10"),
        Param::new(
            "prob",
            "pass each with this probability instead (user space only)",
        )
        .kind(Kind::Number),
        Param::new("seed", "random seed for prob").kind(Kind::Count),
        PLACED,
    ])
    .classes("the block's class (at least 1) when passed; 0 otherwise")
    .example("streamline run 'pcapin file=examples/sample.pcap | sample 100 | inspect'")
    .replication(Replication::Never(
        "it passes every Nth block of the whole stream",
    ))
    .implementations(EBPF_OR_NATIVE);
pub static BYTECOUNT: FilterSpec = FilterSpec::new("bytecount", Access::Statistics)
    .synopsis("bytecount [len=N] [top=K] [placed=user]")
    .description("Counts how often each byte value (0..255) occurs in the first `len` bytes of every block\n\
       (frames from their MAC header): thesis Figure 7.8 C counts one character, this keeps all\n\
       256 counters. Passes everything on. Right after `rx` it runs in the kernel: an eBPF\n\
       socket filter adds into a per-CPU BPF array (len is at most 4096, the program's loop\n\
       bound). At the end it prints packets, bytes counted and the `top` values by count.")
    .params(&[
        Param::new("len", "bytes counted per block, 1..4096 (default 4096; also positional)").at(0).kind(Kind::Size).default("4096"),
        Param::new("top", "values printed at the end (default 8)").kind(Kind::Count).default("8"),
        PLACED,
    ])
    .classes("unchanged")
    .example("streamline run 'pcapin file=examples/sample.pcap | bytecount top=4'")
    .implementations(EBPF_OR_NATIVE);
