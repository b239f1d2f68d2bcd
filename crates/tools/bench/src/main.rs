//! `streamline-bench`: side-by-side benchmarks of Streamline against its peers.
//!
//! Each subcommand is one module that owns its experiments and ends by printing one
//! `SUMMARY <metric> <value>` line per headline figure (see [`util::Summary`]). Shared
//! pieces: [`util`] (timing, tables, SUMMARY), [`proc`] (re-executing this binary as a
//! child process), [`pattern`] (self-checking stream content), [`spsc`] (the thread ring
//! used as an upper bound) and [`child`] (the hidden `__child` roles that run the far side
//! of cross-process experiments; `__byte0` is the filter process of [`threading`]).
//!
//! Adding a subcommand: a module with an `Args` (clap `Args`) and a
//! `run(&Args, quick) -> Result<()>`, plus one variant in [`Command`].

mod adapt;
mod batching;
mod capture;
mod child;
mod daemon;
mod flows;
mod granted;
mod httplog;
mod ids;
mod kafka;
mod latency;
mod legacy;
mod legacy_dns;
mod legacy_pipes;
mod meter;
mod net;
mod pattern;
mod pcap;
mod pipesfs;
mod proc;
mod rings;
mod shape;
mod soak;
mod solver;
mod spaces;
mod spsc;
mod streamlined;
mod threading;
mod traffic;
mod util;
mod webview;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "streamline-bench",
    about = "Side-by-side benchmarks of Streamline against its peers"
)]
struct Cli {
    /// Shrink data volumes and repetitions so a run takes seconds (a smoke test, not a
    /// measurement).
    #[arg(long, global = true)]
    quick: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Ring experiments: copy throughput vs. Unix pipes and a thread ring (Fig 7.1),
    /// splicing (Fig 4.4), event batching (Fig 5.2), deck-cut self-scaling (Fig 4.8).
    Rings(rings::Args),
    /// A chain of N trivial filters in one space vs. N Unix processes joined by pipes vs.
    /// a single loop (thesis 5.2.1, Fig 5.1).
    Threading(threading::Args),
    /// Reading a large capture with a port filter and counting, vs. tcpdump.
    Pcap(pcap::Args),
    /// Intrusion detection (`ips`) on a traffic mix: 10 vs 1000 rules, one pattern vs ngrep.
    Ids(ids::Args),
    /// Flow export (`ipfix`) against softflowd: CPU per packet, both reading one big capture.
    Flows(flows::Args),
    /// The weblog generator (issue 37): `httplog` vs tshark's HTTP fields on one large
    /// capture of HTTP requests, requests per CPU second.
    Httplog(httplog::Args),
    /// Many spaces: cross-space cost, batched wake-ups across spaces, data parallelism.
    Spaces(spaces::Args),
    /// Live capture on a veth pair: kernel vs user bpf, capture cost vs tcpdump, multi-queue.
    Capture(capture::Args),
    /// Optimizer solve time for linear and split-join requests on 1..64 spaces (thesis
    /// Figures 7.18-7.20).
    Solver(solver::Args),
    /// The daemon (issue 15): a no-op call through streamlined vs a bare Unix-socket echo,
    /// blocks lost across live edits, a run through the daemon vs stand-alone.
    Daemon(daemon::Args),
    /// PipesFS (issue 16): `cat all` through FUSE vs reading the same stream from the ring
    /// descriptors, and how long a `mkdir` that adds a filter to a running graph takes.
    Pipesfs(pipesfs::Args),
    /// Legacy capture (issue 17): 1, 2, 5 and 10 unmodified tcpdump readers on the system's
    /// libpcap vs on ours (one shared capture): CPU of readers and capture path.
    Legacy(legacy::Args),
    /// Legacy pipes (issue 18): an unmodified writer|reader pair (64 B, 1 KiB, 64 KiB
    /// blocks) and `cat | wc -c` through kernel pipes vs through `streamline exec`.
    LegacyPipes(legacy_pipes::Args),
    /// Legacy UDP (issue 18): unmodified dnsmasq answering a query load, plain vs under
    /// libslpreload.so's batched UDP sockets: queries per CPU second.
    #[command(name = "legacy-dns")]
    LegacyDns(legacy_dns::Args),
    /// Process shaping (issue 20, seed 004): TCP, UDP and disk rates under `streamline
    /// shape` vs trickle, the overhead of shaping that never waits, two servers in one
    /// group under rising load, small files under the latency priority policy.
    Shape(shape::Args),
    /// Runtime adaptation (issue 19, seed 003): throughput after a mid-run cost shift with
    /// `--adapt`'s monitor moving filters vs the plan kept; blocks lost across the moves.
    Adapt(adapt::Args),
    /// Streams between hosts (issue 21): the TCP channel vs iperf3, seed 002's compress +
    /// encrypt over UDP with 1 and 2 engines, and the batching and kafka figures.
    Net(net::Args),
    /// Adaptive system-call batching (seed 002, Algorithms 1-2; issue 21): CPU per packet
    /// of `rx | tx` forwarding and `rx | count` with batching=adaptive vs fixed.
    Batching(batching::Args),
    /// Kafka at the edges (issue 21): kafkaout and kafkain vs kcat producing and consuming
    /// on one real broker, and messages lost across a broker restart mid-produce.
    Kafka(kafka::Args),
    /// A soak test (issue 34): a daemon of its own serving root and uid 65534 for minutes
    /// (runs started, edited live, stopped; captures through bursts and long quiet spells;
    /// PipesFS readers that stall and vanish), then checked for leaked processes, rings,
    /// mounts, descriptors and memory, and for counts that do not add up.
    Soak(soak::Args),
    /// The far side of a cross-process experiment (started by the benchmark itself).
    #[command(name = "__child", hide = true)]
    Child(child::Args),
    /// One filter process of the threading benchmark's Unix pipeline.
    #[command(name = "__byte0", hide = true)]
    Byte0(threading::Byte0Args),
}

fn main() {
    let cli = Cli::parse();
    let res = match &cli.command {
        Command::Rings(a) => rings::run(a, cli.quick),
        Command::Threading(a) => threading::run(a, cli.quick),
        Command::Pcap(a) => pcap::run(a, cli.quick),
        Command::Ids(a) => ids::run(a, cli.quick),
        Command::Flows(a) => flows::run(a, cli.quick),
        Command::Httplog(a) => httplog::run(a, cli.quick),
        Command::Spaces(a) => spaces::run_main(a, cli.quick),
        Command::Capture(a) => capture::run(a, cli.quick),
        Command::Solver(a) => solver::run(a, cli.quick),
        Command::Daemon(a) => daemon::run(a, cli.quick),
        Command::Pipesfs(a) => pipesfs::run(a, cli.quick),
        Command::Legacy(a) => legacy::run(a, cli.quick),
        Command::LegacyPipes(a) => legacy_pipes::run(a, cli.quick),
        Command::LegacyDns(a) => legacy_dns::run(a, cli.quick),
        Command::Shape(a) => shape::run(a, cli.quick),
        Command::Adapt(a) => adapt::run(a, cli.quick),
        Command::Net(a) => net::run(a, cli.quick),
        Command::Batching(a) => batching::run(a, cli.quick),
        Command::Kafka(a) => kafka::run(a, cli.quick),
        Command::Soak(a) => soak::run(a, cli.quick),
        Command::Child(a) => child::run(a),
        Command::Byte0(a) => threading::byte0_main(a),
    };
    if let Err(e) = res {
        eprintln!("streamline-bench: error: {e}");
        std::process::exit(1);
    }
}
