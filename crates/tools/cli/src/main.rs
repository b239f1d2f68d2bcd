//! `streamline`: run, check and document extended pipelines.
//!
//! - `streamline run 'PIPELINE'` places the graph's filters on spaces (the calling thread,
//!   pinned worker threads `space=N`, processes `space=pN` or `@private`; see
//!   `dataplane::spaces`) and runs it until the sources end or a stop signal (SIGINT, SIGTERM, SIGHUP: exit status 128 + its number), then prints a per-filter table (blocks, bytes, drops, time) and
//!   the filters' own summaries (e.g. `count`'s totals) on standard error; standard output
//!   belongs to the pipeline's data.
//! - `streamline check 'PIPELINE'` prints the parsed graph, or the diagnostic.
//! - `streamline filters [NAME]` lists the native filters or prints one's documentation.
//! - `streamline plan 'PIPELINE'` chooses where every filter runs and how every stream is
//!   carried (control crate: ILP solved by HiGHS, push-down heuristic as baseline) and
//!   prints why; `--dot FILE` writes Graphviz, `--compare` puts the heuristic beside it.
//! - `streamline maps [--watch SECS]` prints the BPF maps of running runs' kernel filters
//!   (flowcount, sample, bytecount right after `rx`), pinned under /sys/fs/bpf/streamline.

mod access;
mod compat;
mod context;
mod edits;
mod help;
mod preload;
mod remote;
mod shaping;
mod worker;

use clap::{Parser, Subcommand};
use dataplane::channel::ChannelConfig;
use dataplane::spaces::{Launcher, Spaces};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// Every error `streamline` prints has one style: `streamline: error: WHAT`, then, for an
/// error about pipeline text, the pipeline and a caret under the place (`lang::render`).
/// A message that comes with a prefix of its own (a lang `Diagnostic`'s `error: `, the
/// `streamline: ` of a message made by `prepare`, in a worker or here) gets this one
/// instead; a warning is `streamline: warning: WHAT`.
pub(crate) fn error_text(m: &str) -> String {
    let mut rest = m;
    loop {
        let before = rest;
        for p in ["streamline: ", "error: "] {
            if let Some(r) = rest.strip_prefix(p) {
                rest = r;
            }
        }
        if rest == before {
            break;
        }
    }
    format!("streamline: error: {rest}")
}

/// Print an error in the one style ([`error_text`]).
macro_rules! error {
    ($($t:tt)*) => {
        eprintln!("{}", $crate::error_text(&format!($($t)*)))
    };
}
pub(crate) use error;

/// The signals that tell a run to stop: SIGINT (Ctrl-C), SIGTERM (`timeout`, `kill`,
/// systemd, container runtimes) and SIGHUP (the terminal went away). The first one stops
/// the run as its sources ending would (every sink flushed into a valid file, totals
/// printed, shared memory and pinned maps removed) and the run exits with 128 + the
/// signal's number (130, 143, 129); a second one gives up at once with the same status,
/// removing only the pinned maps.
const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// Watch the stop signals on a thread of their own: the returned flag is set by the
/// first, and the number of the first is kept in the returned cell (0: none yet).
/// `second` runs on a second signal. If the signals cannot be watched, the run goes on
/// without (and says so).
pub(crate) fn watch_stop_signals(
    second: impl Fn(i32) + Send + 'static,
) -> (Arc<AtomicBool>, Arc<AtomicI32>) {
    let stop = Arc::new(AtomicBool::new(false));
    let which = Arc::new(AtomicI32::new(0));
    match signal_hook::iterator::Signals::new(STOP_SIGNALS) {
        Ok(mut signals) => {
            let (stop, which) = (stop.clone(), which.clone());
            let spawned = std::thread::Builder::new()
                .name("signals".into())
                .spawn(move || {
                    for sig in signals.forever() {
                        // SeqCst, this thread only: whether a stop signal came before.
                        if stop.load(Ordering::SeqCst) {
                            second(sig);
                        } else {
                            // `which` before `stop` (SeqCst): pair with the loads of the
                            // returned flag and cell (the run's stop check, the `maps --watch`
                            // loop, the exit code in `run`), so whoever sees `stop` sees `which`.
                            which.store(sig, Ordering::SeqCst);
                            stop.store(true, Ordering::SeqCst);
                            // Spaces asleep on their readiness handles look at once.
                            dataplane::readiness::wake_all_spaces();
                        }
                    }
                });
            if let Err(e) = spawned {
                eprintln!("streamline: warning: cannot watch for stop signals: {e}");
            }
        }
        Err(e) => eprintln!("streamline: warning: cannot watch for stop signals: {e}"),
    }
    (stop, which)
}

/// Process spaces leave stopping to their parent (which tells them `stop`): signals sent
/// to the whole process group (Ctrl-C in a terminal, `timeout`) are ignored here.
pub(crate) fn ignore_stop_signals() {
    if let Ok(mut signals) = signal_hook::iterator::Signals::new(STOP_SIGNALS) {
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || for _ in signals.forever() {});
    }
}

#[derive(Parser)]
#[command(
    name = "streamline",
    version,
    about = "Extended Unix pipelines over shared-memory rings",
    disable_help_subcommand = true
)]
struct Cli {
    /// The daemon's control socket (default: $STREAMLINE_SOCKET, else
    /// /run/streamline/control). When a daemon answers there, `run` goes through it;
    /// `none` always runs stand-alone.
    #[arg(long, global = true)]
    socket: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a pipeline until its sources end or a stop signal (SIGINT, SIGTERM, SIGHUP).
    ///
    /// Exit status: 0 when the sources ended; 1 when a filter failed (a sink that cannot
    /// write, a space that died); 2 for a pipeline that does not parse or build; 128 + N
    /// when stopped by signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP), after every sink was
    /// flushed and the totals printed.
    Run {
        pipeline: String,
        /// Do not print the per-filter table.
        #[arg(short, long)]
        quiet: bool,
        /// Size of the space's data ring (bytes).
        #[arg(long, default_value_t = 64 << 20)]
        ring: usize,
        /// Who places the filters: `ilp` (the optimizer, falling back to the heuristic),
        /// `heuristic` (push processing down), or `none` (as written: every filter where
        /// its first upstream runs, unless `space=` or a hint says otherwise).
        #[arg(long, default_value = "ilp", value_parser = ["ilp", "heuristic", "none"])]
        plan: String,
        /// Expected blocks per second at each source, for the plan.
        #[arg(long, default_value_t = 100_000.0)]
        rate: f64,
        /// Expected bytes per block at each source, for the plan.
        #[arg(long, default_value_t = 500.0)]
        bytes: f64,
        /// Neither offer this run's live-capture prefix to other runs nor take one from a
        /// running one (prefix sharing is on by default for pipelines starting with `rx`).
        #[arg(long)]
        no_share: bool,
        /// Start the run in the daemon and print its id instead of waiting for its end
        /// (needs a daemon; `streamline ps`, `attach`, `edit`, `stop` take the id). The id
        /// comes once the run is in `ps` and PipesFS. A pipeline reading `stdin` is
        /// refused: a detached run has no standard input.
        #[arg(long)]
        detach: bool,
        /// With --detach: the run's standard output and error go to this file (opened by
        /// this command, appended), else to /dev/null.
        #[arg(long, requires = "detach", value_name = "FILE")]
        log: Option<std::path::PathBuf>,
        /// Move filters between the run's thread spaces while it runs, as the measured
        /// time per filter says (one move at a time across a channel, at batch
        /// boundaries, with the filter's state); each decision is printed with its reason.
        #[arg(long)]
        adapt: bool,
        /// Testing: move filters across the run's channels at random batch boundaries
        /// (and pull source batches of random sizes), seeded by SEED. The output must be
        /// the same as without it.
        #[arg(long, value_name = "SEED")]
        chaos: Option<u64>,
        /// Write the run's counters to FILE as JSON when it ends: per node (the nodes the
        /// pipeline names, as the table lists them) blocks and bytes in and out, drops,
        /// made and ended, the spaces it ran in (a replicated filter's copies summed in its
        /// one row), and per arc between two of them the blocks and bytes it carried (see
        /// ARCHITECTURE.md, "Counters"). While it runs, FILE is rewritten about every 100 ms
        /// (replaced whole, by rename) with the nodes' counters so far, `"running": true`
        /// and no arcs; the last write, at the end, says `"running": false`. The run is
        /// stand-alone (not through a daemon).
        #[arg(long, value_name = "FILE")]
        stats: Option<std::path::PathBuf>,
    },
    /// List the daemon's runs (yours; all of them for root): owner, state, uptime, rate,
    /// placement. A run that died or failed stays listed for an hour with the state
    /// `failed: REASON` (the daemon's log says it too).
    Ps,
    /// Stop a daemon run (its sources stop, what is in flight drains).
    Stop { run: u64 },
    /// Print a daemon run's counters as they change, until it ends (the first Ctrl-C,
    /// SIGTERM or SIGHUP detaches at once, status 0; the run goes on). On a terminal the
    /// table is redrawn in place; on a pipe or file each refresh is printed after the last.
    Attach { run: u64 },
    /// Change a running daemon run without stopping it: `set NODE KEY=VALUE`, `insert
    /// after NODE FILTER ...`, `insert before NODE FILTER ...`, `remove NODE`, `replace
    /// NODE FILTER ...` (one transaction: applied whole, or not at all).
    Edit { run: u64, edit: String },
    /// Run an unmodified libpcap program (tcpdump, tshark, ...) on Streamline: its live
    /// captures become reader slots on the daemon's shared capture (`streamline compat --
    /// tcpdump -i eth0 ...`). With `--print-dir`, print the directory holding the
    /// stand-in `libpcap.so.0.8` (for LD_LIBRARY_PATH or ld.so.conf) and exit.
    Compat {
        #[arg(long)]
        print_dir: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Run an unmodified program with Streamline's pipes: every pipe it (and every program
    /// it starts) makes is a shared-memory ring, with Unix pipe semantics (`streamline exec
    /// -- make -j8`). Static and setuid programs get kernel pipes, unchanged.
    Exec {
        #[command(flatten)]
        opts: preload::Options,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// Run a shell command line with Streamline's pipes (`streamline sh 'tar c . | gzip |
    /// wc -c'`): `sh -c SCRIPT [ARGS...]` under `exec`.
    Sh {
        #[command(flatten)]
        opts: preload::Options,
        script: String,
        /// $1, $2, ... for the script.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run an unmodified program with its network and disk calls shaped by token or leaky
    /// buckets (`streamline shape --net 10MB/s -- curl -O URL`): priorities, latency or
    /// throughput policies, and budgets shared by a `--group` of programs. Dynamically
    /// linked programs are shaped by an interposition library, static ones by a seccomp
    /// supervisor.
    Shape {
        #[command(flatten)]
        opts: shaping::Options,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// A run of the daemon (started by streamlined itself).
    #[command(name = "__worker", hide = true)]
    Worker {
        #[arg(long)]
        fd: i32,
    },
    /// Parse a pipeline and print its graph (or the error).
    Check { pipeline: String },
    /// Print a command's help, or a topic: `pipelines` (the language, with examples),
    /// `options` (what every filter takes), `policy` (the daemon's policy file).
    Help { topic: Option<String> },
    /// List native filters, or print one filter's documentation.
    Filters { name: Option<String> },
    /// A process space of a run (started by `streamline run` itself).
    #[command(name = "__space", hide = true)]
    Space {
        /// The pipeline (by default from the environment, `STREAMLINE_SPACE_PIPELINE`).
        #[arg(long)]
        pipeline: Option<String>,
        #[arg(long)]
        ring: usize,
        #[arg(long)]
        space: usize,
        #[arg(long)]
        fd: i32,
        /// The run's placement (control::Assignment), applied to the pipeline.
        #[arg(long, default_value = "")]
        assign: String,
        /// The run's role in prefix sharing (control::prefix::Share), if any.
        #[arg(long)]
        share: Option<String>,
        /// The exported streams' modes (`ID=OCTAL,...`), as the run computed them.
        #[arg(long, default_value = "")]
        export_modes: String,
    },
    /// Print the BPF maps of running runs' kernel (eBPF) filters, decoded.
    Maps {
        /// Print them again every SECS seconds until interrupted.
        #[arg(long, value_name = "SECS")]
        watch: Option<f64>,
        /// Rows per map (flows, byte values).
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
    /// Choose a placement for a pipeline and explain it (does not run it).
    Plan {
        pipeline: String,
        /// Write the plan as Graphviz DOT to this file (`-` for standard output).
        #[arg(long)]
        dot: Option<String>,
        /// Also plan with the push-processing-down heuristic and compare costs.
        #[arg(long)]
        compare: bool,
        /// Use only the heuristic.
        #[arg(long, conflicts_with = "compare")]
        heuristic: bool,
        /// A system model in JSON instead of discovering this machine.
        #[arg(long)]
        system: Option<std::path::PathBuf>,
        /// Print the system model (JSON) and exit.
        #[arg(long)]
        show_system: bool,
        /// Expected blocks per second at each source.
        #[arg(long, default_value_t = 100_000.0)]
        rate: f64,
        /// Expected bytes per block at each source.
        #[arg(long, default_value_t = 500.0)]
        bytes: f64,
        /// Measured cost of a filter: NAME:CYCLES_PER_CALL,CYCLES_PER_BYTE[,FORWARD_RATIO].
        #[arg(long = "cost", value_name = "NAME:CALL,BYTE[,FWD]")]
        costs: Vec<String>,
        /// Print only the canonical placement (stable; what golden tests compare).
        #[arg(long)]
        canonical: bool,
    },
}

/// The filter library as the control plane takes it (its declarations, its resolver, and
/// the two graph passes written in it; see `control::rewrite`).
static FILTERS: control::Filters = control::Filters {
    registry: filters::REGISTRY,
    resolver: &filters::Natives,
    multiqueue: filters::live::multiqueue,
    kernel_placement: filters::live::kernel_placement,
};

/// Native filters (with their parameter keys) from the library, Unix commands from PATH.
fn resolver() -> lang::WithPath<filters::Natives> {
    lang::WithPath(filters::Natives)
}

/// The command line's definition, with the help topics listed after the commands.
fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_help(help::topics_text())
}

fn main() -> ExitCode {
    use clap::FromArgMatches;
    let cli = match command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        // Help and version as clap prints them; its errors in our one style.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprint!("{}", error_text(&e.render().to_string()));
            std::process::exit(2);
        }
    };
    match cli.cmd {
        Cmd::Filters { name: None } => {
            for s in filters::REGISTRY {
                println!("{:<10} {}", s.name, s.summary());
            }
            ExitCode::SUCCESS
        }
        Cmd::Help { topic } => help_topic(topic.as_deref()),
        Cmd::Filters { name: Some(n) } => {
            match filters::find(&n) {
                Some(s) => {
                    print!("{}", s.doc());
                    ExitCode::SUCCESS
                }
                None => {
                    error!("no native filter named '{n}' (`streamline filters` lists them)");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Check { pipeline } => match lang::parse(&pipeline, &resolver()) {
            Ok(g) => {
                print!("{}", g.canonical());
                ExitCode::SUCCESS
            }
            Err(d) => {
                error!("{d}");
                ExitCode::from(2)
            }
        },
        Cmd::Run {
            pipeline,
            quiet,
            ring,
            plan,
            rate,
            bytes,
            no_share,
            detach,
            log,
            adapt,
            chaos,
            stats,
        } => {
            let o = daemon::proto::RunOptions {
                plan,
                rate,
                bytes,
                ring,
                no_share,
                quiet,
                adapt,
                chaos,
            };
            if stats.is_some() && detach {
                error!("--stats is written by a run this command waits for; it cannot be --detach'ed");
                return ExitCode::from(2);
            }
            if let Some(file) = &stats {
                return run(&pipeline, &o, "--stats", Some(file));
            }
            match remote::connect(cli.socket.as_deref()) {
                Some(Ok(c)) => {
                    remote::run(c, cli.socket.as_deref(), &pipeline, o, detach.then_some(log))
                }
                Some(Err(e)) => {
                    error!("{e} (run stand-alone with --socket none)");
                    ExitCode::from(1)
                }
                None if detach => {
                    let p = daemon::client::socket_path(cli.socket.as_deref())
                        .map_or("none".into(), |p| p.display().to_string());
                    error!("--detach needs a daemon, and none answers on {p} (start one with `streamlined`)");
                    ExitCode::from(2)
                }
                None => {
                    let why = match daemon::client::socket_path(cli.socket.as_deref()) {
                        Some(p) => format!("no daemon answers on {}", p.display()),
                        None => "--socket none".to_string(),
                    };
                    run(&pipeline, &o, &why, None)
                }
            }
        }
        Cmd::Ps => remote::ps(cli.socket.as_deref()),
        Cmd::Stop { run } => remote::stop(cli.socket.as_deref(), run),
        Cmd::Attach { run } => remote::attach(cli.socket.as_deref(), run),
        Cmd::Edit { run, edit } => remote::edit(cli.socket.as_deref(), run, &edit),
        Cmd::Worker { fd } => worker::worker(fd),
        Cmd::Compat { print_dir, cmd } => compat::run(print_dir, &cmd, cli.socket.as_deref()),
        Cmd::Exec { opts, cmd } => preload::exec(&opts, &cmd),
        Cmd::Sh { opts, script, args } => preload::sh(&opts, &script, &args),
        Cmd::Shape { opts, cmd } => shaping::run(&opts, &cmd),
        Cmd::Maps { watch, top } => maps(watch, top),
        Cmd::Space {
            pipeline,
            ring,
            space,
            fd,
            assign,
            share,
            export_modes,
        } => process_space(
            pipeline,
            ring,
            space,
            fd,
            &assign,
            share.as_deref(),
            &export_modes,
        ),
        Cmd::Plan {
            pipeline,
            dot,
            compare,
            heuristic,
            system,
            show_system,
            rate,
            bytes,
            costs,
            canonical,
        } => {
            let opts = PlanOpts {
                dot,
                compare,
                heuristic,
                system,
                show_system,
                rate,
                bytes,
                costs,
                canonical,
            };
            match plan(&pipeline, opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    error!("plan: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `streamline help [TOPIC]`: a topic of `help`, a command's long help, or the list.
fn help_topic(topic: Option<&str>) -> ExitCode {
    let mut cmd = command();
    let Some(t) = topic else {
        let _ = cmd.print_long_help();
        return ExitCode::SUCCESS;
    };
    if let Some(text) = help::topic(t) {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    match cmd.find_subcommand_mut(t) {
        Some(sub) if !sub.is_hide_set() => {
            let mut sub = sub.clone().bin_name(format!("streamline {t}"));
            let _ = sub.print_long_help();
            ExitCode::SUCCESS
        }
        _ => {
            let topics: Vec<&str> = help::TOPICS.iter().map(|(n, _)| *n).collect();
            error!(
                "no command or help topic '{t}' (topics: {}; `streamline help` lists the commands)",
                topics.join(", ")
            );
            ExitCode::from(2)
        }
    }
}

/// `streamline maps`: every pinned program of a running run, its maps decoded as the
/// filter prints its totals.
fn maps(watch: Option<f64>, top: usize) -> ExitCode {
    if let Some(w) = watch {
        if !(w.is_finite() && w > 0.0) {
            error!("maps: --watch {w}: expected a positive number of seconds");
            return ExitCode::from(2);
        }
    }
    let (interrupt, _) = watch_stop_signals(|sig| std::process::exit(128 + sig));
    loop {
        let list = filters::nicfix::pinned();
        if list.is_empty() {
            println!(
                "no running run has kernel (eBPF) filters (nothing pinned under {})",
                filters::nicfix::PIN_ROOT
            );
        }
        for p in &list {
            println!(
                "run {} {} ({}: {})",
                p.pid,
                p.label,
                p.dir.display(),
                p.maps.join(", ")
            );
            match &p.snapshot {
                Ok(snap) => {
                    for l in filters::nicfix::snapshot_text(snap, top).lines() {
                        println!("  {l}");
                    }
                }
                Err(e) => println!("  ({e})"),
            }
        }
        let Some(w) = watch else { break };
        let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(w);
        while std::time::Instant::now() < until {
            // Pairs with the SeqCst store of the stop flag in `watch_stop_signals`.
            if interrupt.load(Ordering::SeqCst) {
                return ExitCode::SUCCESS;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        println!();
    }
    ExitCode::SUCCESS
}

/// Where each filter of a built graph runs, by space, in the runtime's names:
/// `kernel:bpf local:rx,count t1:deflate t2:deflate p3:gzip` (kernel first, then by
/// space id; a filter on the capture socket is `kernel`; the `split` and `join` a
/// replicated filter makes, and the run's internal nodes (`__publish`), are left out).
/// The same pure placement the build applies (`dataplane::spaces::{replicate, place}`);
/// empty if it cannot be computed (the build then says why).
fn layout(g: &lang::Graph) -> String {
    use dataplane::spaces::SpaceKind;
    let Ok(g) = dataplane::spaces::replicate(g, &filters::Library) else {
        return String::new();
    };
    let Ok(p) = dataplane::spaces::place(&g) else {
        return String::new();
    };
    let mut groups: std::collections::BTreeMap<(u8, usize), Vec<String>> = Default::default();
    for n in &g.nodes {
        let (name, kernel) = match &n.kind {
            lang::NodeKind::Filter { filter, place, .. } => (
                filter.clone(),
                matches!(place.side, Some(lang::Side::Kernel { .. })),
            ),
            lang::NodeKind::Unix { argv, .. } => {
                (argv.first().cloned().unwrap_or_default(), false)
            }
            _ => continue,
        };
        if name.starts_with("__") {
            continue;
        }
        let key = if kernel { (0, 0) } else { (1, p.space[n.id]) };
        groups.entry(key).or_default().push(name);
    }
    groups
        .into_iter()
        .map(|((k, id), names)| {
            let space = match (k, p.kind(id)) {
                (0, _) => "kernel".to_string(),
                (_, SpaceKind::Local) => "local".to_string(),
                (_, SpaceKind::Thread) => format!("t{id}"),
                (_, SpaceKind::Process) => format!("p{id}"),
            };
            format!("{space}:{}", names.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `deflate space=2,3; bpf placed=user`: the plan's choices, by filter.
fn describe(g: &lang::Graph, a: &control::Assignment) -> String {
    a.set
        .iter()
        .map(|(&id, np)| {
            let name = match &g.nodes[id].kind {
                lang::NodeKind::Filter { filter, .. } => filter.clone(),
                _ => format!("n{id}"),
            };
            let mut o = Vec::new();
            match &np.space {
                Some(control::SpaceChange::Set(v)) => {
                    o.push(format!("space={}", lang::SpaceSpec::Runtime(v.clone())))
                }
                Some(control::SpaceChange::Clear) => o.push("-space".to_string()),
                None => {}
            }
            if let Some(side) = &np.side {
                o.push(format!("placed={side}"));
            }
            format!("{name} {}", o.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// A process space: the parent coordinates stopping, so Ctrl-C (sent to the whole process
/// group) is left to it.
/// Where a process space finds its run's pipeline (see `prepare`).
const SPACE_PIPELINE_ENV: &str = "STREAMLINE_SPACE_PIPELINE";

#[allow(clippy::too_many_arguments)]
fn process_space(
    pipeline: Option<String>,
    ring: usize,
    space: usize,
    fd: i32,
    assign: &str,
    share: Option<&str>,
    export_modes: &str,
) -> ExitCode {
    // A non-root client's process space: the sockets its worker was lent decide, here
    // as there, which programs the graph passes may place on them.
    if let Err(e) = kernel::lend::install_from_env() {
        error!("process space: {e}");
        return ExitCode::from(2);
    }
    // Taken out of the environment before any thread or Unix command starts.
    let from_env = std::env::var(SPACE_PIPELINE_ENV).ok();
    std::env::remove_var(SPACE_PIPELINE_ENV);
    let Some(pipeline) = pipeline.or(from_env) else {
        error!("process space: no pipeline (--pipeline or {SPACE_PIPELINE_ENV})");
        return ExitCode::from(2);
    };
    ignore_stop_signals();
    let sock = match beltway::sys::inherited_unix_stream(fd) {
        Ok(s) => s,
        Err(e) => {
            error!("process space: descriptor {fd}: {e} (this command is started by `streamline run`)");
            return ExitCode::from(2);
        }
    };
    let g = match lang::parse(&pipeline, &resolver()) {
        Ok(g) => g,
        Err(d) => {
            error!("{}", d.redacted(&resolver()));
            return ExitCode::from(2);
        }
    };
    let assignment = match control::Assignment::parse(assign) {
        Ok(a) => a,
        Err(e) => {
            error!("process space: --assign: {e}");
            return ExitCode::from(2);
        }
    };
    let share = match share.map(control::prefix::Share::parse).transpose() {
        Ok(s) => s,
        Err(e) => {
            error!("process space: --share: {e}");
            return ExitCode::from(2);
        }
    };
    let g = match access::apply_export_modes_arg(&g, export_modes) {
        Ok(g) => g,
        Err(e) => {
            error!("process space: {e}");
            return ExitCode::from(2);
        }
    };
    // The same rewrites as the parent's, in the same order (control::rewrite).
    let g = match control::rewrite::rewrite(
        &FILTERS,
        &g,
        control::rewrite::Decisions {
            assignment: &assignment,
            share: share.as_ref(),
        },
    ) {
        Ok(g) => g,
        Err(e) => {
            error!("process space: {e}");
            return ExitCode::from(2);
        }
    };
    let code = dataplane::spaces::run_process_space(
        &g,
        &filters::Library,
        ring,
        ChannelConfig::default(),
        space,
        sock,
    );
    ExitCode::from(code as u8)
}

struct PlanOpts {
    dot: Option<String>,
    compare: bool,
    heuristic: bool,
    system: Option<std::path::PathBuf>,
    show_system: bool,
    rate: f64,
    bytes: f64,
    costs: Vec<String>,
    canonical: bool,
}

fn plan(pipeline: &str, o: PlanOpts) -> Result<(), String> {
    use control::planner::Method;
    let sys = match &o.system {
        Some(p) => control::SystemModel::load(p).map_err(|e| e.to_string())?,
        None => control::SystemModel::discover().map_err(|e| e.to_string())?,
    };
    if o.show_system {
        println!("{}", sys.to_json());
        return Ok(());
    }
    if !(o.rate.is_finite() && o.rate > 0.0 && o.bytes.is_finite() && o.bytes >= 0.0) {
        return Err("--rate must be positive and --bytes non-negative".into());
    }
    let mut planner = control::Planner::new(sys, FILTERS);
    planner.load = control::Load {
        blocks_per_sec: o.rate,
        bytes_per_block: o.bytes,
    };
    for c in &o.costs {
        planner.catalog.parse_override(c)?;
    }
    let method = if o.heuristic {
        Method::Heuristic
    } else {
        Method::Optimal
    };
    let chosen = planner.plan(pipeline, method).map_err(|e| e.to_string())?;
    if o.canonical {
        print!("{}", chosen.plan.canonical());
    } else {
        println!("system: {}", planner.sys.summary().trim_end());
        print!("{}", chosen.plan.explain());
        if !chosen.plan.hosts.is_empty() {
            let atom = |k: usize| chosen.graph.atom(chosen.request.nodes[k].id);
            match chosen.plan.per_host(&planner.sys, 7000, &atom) {
                Some(parts) => {
                    println!("run each part on its host, the last part first (each netout connects as it starts; or give it wait=SECS):");
                    for (host, text) in parts {
                        println!("  {host}: streamline run '{text}'");
                    }
                }
                None => println!(
                    "(a branching pipeline: run each host's filters as the table above places them, joined by netout/netin)"
                ),
            }
        }
    }
    if o.compare {
        let h = planner
            .plan(pipeline, Method::Heuristic)
            .map_err(|e| e.to_string())?;
        println!();
        print!("{}", h.plan.explain());
        let (a, b) = (chosen.plan.cost, h.plan.cost);
        println!();
        println!(
            "compare: optimizer {} cycles/s, heuristic {} cycles/s: heuristic costs {:.2}x the optimizer's{}",
            control::plan::human(a),
            control::plan::human(b),
            if a > 0.0 { b / a } else { 1.0 },
            if chosen.plan.canonical() == h.plan.canonical() { " (same placement)" } else { "" }
        );
    }
    if let Some(path) = &o.dot {
        let text = chosen.plan.dot();
        if path == "-" {
            print!("{text}");
        } else {
            std::fs::write(path, text).map_err(|e| format!("cannot write {path}: {e}"))?;
            eprintln!("wrote {path}");
        }
    }
    Ok(())
}

/// The placement `streamline run` uses: the planner's choice for every filter the user
/// did not pin (see `control::realize`). At a load the machine cannot sustain even with
/// data-parallel copies, it plans for the highest rate it can (halving), which spreads the
/// work as far as it goes. A request the planner cannot model runs as written, with a note.
fn choose_placement(
    g: &lang::Graph,
    how: &str,
    load: control::Load,
) -> Result<(control::Assignment, String), String> {
    use control::planner::Method;
    let method = match how {
        "none" => return Ok((control::Assignment::default(), "as written".into())),
        "heuristic" => Method::Heuristic,
        _ => Method::Optimal,
    };
    let mut sys = control::SystemModel::discover().map_err(|e| e.to_string())?;
    // A non-root client's worker probes no capability of its own: what the kernel offers
    // its run is what the daemon lent it (a capture socket, never eBPF).
    if kernel::lend::lending() {
        use control::SpaceKind as K;
        sys.caps.af_packet = kernel::lend::lent_any(kernel::lend::Kind::Rx);
        sys.caps.bpf = false;
        sys.make_spaces(&[K::Kernel, K::Thread, K::Process]);
    }
    let mut planner = control::Planner::new(sys, FILTERS);
    planner.load = load;
    let mut scaled = 1.0;
    let planned = loop {
        // Below the offered rate the heuristic finds the bracket (see below).
        let how = if scaled < 1.0 { Method::Heuristic } else { method };
        match planner.plan_graph(g, how) {
            Ok(p) => break p,
            Err(control::error::Error::Plan(control::PlanError::Infeasible(_)))
                if scaled > 1e-4 =>
            {
                scaled /= 2.0;
                planner.load.blocks_per_sec = load.blocks_per_sec * scaled;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    // The offered rate does not fit: the best plan is the one that carries the most, so
    // look for the highest rate that fits, between the one found and twice it (to 2%).
    // Near it, only plans that balance the CPUs fit (the data-parallel template
    // included). The search runs on the heuristic (microseconds a plan); the optimizer
    // then plans once at the rate found (the heuristic's plan, its warm start, carries
    // it; asking above it would make the solver prove that nothing fits, a full search).
    let mut planned = planned;
    if scaled < 1.0 {
        let fits = |p: &mut control::Planner, rate: f64, how| {
            p.load.blocks_per_sec = load.blocks_per_sec * rate;
            p.plan_graph(g, how).ok()
        };
        let (mut lo, mut hi) = (scaled, (scaled * 2.0).min(1.0));
        let mut best = None;
        while hi - lo > 0.02 * lo {
            let mid = (lo + hi) / 2.0;
            match fits(&mut planner, mid, Method::Heuristic) {
                Some(p) => {
                    best = Some(p);
                    lo = mid;
                }
                None => hi = mid,
            }
        }
        if method == Method::Heuristic {
            if let Some(p) = best {
                planned = p;
                scaled = lo;
            }
        } else if lo > scaled {
            if let Some(p) = fits(&mut planner, lo, Method::Optimal) {
                planned = p;
                scaled = lo;
            }
        }
        planner.load.blocks_per_sec = load.blocks_per_sec * scaled;
    }
    let a =
        control::Assignment::from_plan(g, &planned.plan, &planner.sys, &FILTERS, planned.template);
    let mut why = format!(
        "{} in {:.1} ms",
        planned.plan.stats.method,
        planned.plan.stats.solve_time.as_secs_f64() * 1e3
    );
    if scaled < 1.0 {
        why += &format!(
            ", planned for {} blocks/s (the offered rate does not fit)",
            control::plan::human(planner.load.blocks_per_sec)
        );
    }
    Ok((a, why))
}

/// Prefix sharing between runs (control::prefix): take the longest prefix of this
/// pipeline a live run publishes, or else publish ours. None when nothing is shareable.
fn choose_share(g: &lang::Graph, quiet: bool) -> Option<control::prefix::Share> {
    use control::prefix::{shareable, Share};
    let prefixes = shareable(&FILTERS, g);
    let shortest = prefixes
        .first()
        .map_or(1, |p| control::prefix::min_shared_len(&FILTERS, g, p));
    for p in prefixes.iter().filter(|p| p.nodes.len() >= shortest) {
        if let Some(pid) = dataplane::channel::published(&p.key) {
            if !quiet {
                eprintln!("sharing `{}` with the run of process {pid} (prefix sharing; --no-share runs its own)", p.text);
            }
            return Some(Share::Subscribe {
                key: p.key.clone(),
                len: p.nodes.len(),
            });
        }
    }
    // Publish only what a subscriber may take: never the bare `rx` when the filter after
    // it runs on the socket (a kernel `sample` would hand subscribers its sample).
    prefixes
        .first()
        .filter(|p| p.nodes.len() >= shortest)
        .map(|p| Share::Publish { key: p.key.clone() })
}

/// A run built and ready to start: its spaces and the placement it was given.
pub(crate) struct Prepared {
    pub spaces: Spaces,
    /// `plan (...): ...` as printed, or empty when the plan changed nothing.
    pub placement: String,
    /// The permission bits of the run's streams (the narrowest source's, at most 0644).
    pub mode: u32,
    /// Where each filter runs, by space ([`layout`]; `ps`'s PLACEMENT column).
    pub layout: String,
}

/// A run that could not be prepared: the message (with the caret) and the exit status.
pub(crate) struct NotPrepared {
    pub message: String,
    pub code: u8,
}

/// Parse, plan, share, rewrite and build a run (every construction step a transaction
/// step: a failure leaves nothing behind). `grants`: the stream mode of privileged
/// sources by node id, as the daemon's policy granted them (empty when run stand-alone).
/// `extra` is appended to a process space's command line (the daemon's worker passes the
/// client's identity).
pub(crate) fn prepare(
    pipeline: &str,
    o: &daemon::proto::RunOptions,
    grants: &[(usize, u32)],
    extra: &[String],
) -> Result<Prepared, NotPrepared> {
    // Every message goes out with the secrets the declarations name redacted (they reach
    // the daemon's client and log); the run itself gets them as written.
    let shown = filters::shown(pipeline);
    let fail = |message: String, code: u8| NotPrepared {
        message: shown.scrub(&message),
        code,
    };
    let g = lang::parse(pipeline, &resolver())
        .map_err(|d| fail(d.redacted(&resolver()).to_string(), 2))?;
    if !(o.rate.is_finite() && o.rate > 0.0 && o.bytes.is_finite() && o.bytes >= 0.0) {
        return Err(fail(
            "streamline: --rate must be positive and --bytes non-negative".into(),
            2,
        ));
    }
    // Exported streams are no more readable than what they were computed from.
    let modes = control::access::stream_modes(&g, &|n| access::origin(n, grants));
    // What PipesFS shows for every stream of the run: no more than its narrowest source
    // allows, and at most 0644 (as exports).
    let mode = modes.iter().fold(0o644, |m, x| m & x);
    let g = control::access::apply_export_modes(&g, &modes);
    let export_modes = access::export_modes_arg(&g);
    let load = control::Load {
        blocks_per_sec: o.rate,
        bytes_per_block: o.bytes,
    };
    let mut placement = String::new();
    let assign = match choose_placement(&g, &o.plan, load) {
        Ok((a, why)) => {
            if !a.is_empty() {
                placement = format!("plan ({why}): {}", describe(&g, &a));
            }
            a
        }
        Err(e) => {
            placement = format!(
                "note: the planner could not place this pipeline ({e}); running it as written"
            );
            control::Assignment::default()
        }
    };
    // Sharing is chosen on the graph as the plan places it (pass 2 of control::rewrite),
    // then every rewrite runs in its one order.
    let share = match (!o.no_share, assign.apply(&g)) {
        (_, Err(e)) => return Err(fail(format!("streamline: applying the plan: {e}"), 2)),
        (true, Ok(placed)) => choose_share(&placed, o.quiet),
        (false, Ok(_)) => None,
    };
    let g = control::rewrite::rewrite(
        &FILTERS,
        &g,
        control::rewrite::Decisions {
            assignment: &assign,
            share: share.as_ref(),
        },
    )
    .map_err(|e| fail(format!("streamline: {e}"), 2))?;
    let launcher = std::env::current_exe().ok().map(|exe| {
        let mut args = vec![
            "__space".into(),
            "--ring".into(),
            o.ring.to_string(),
            "--assign".into(),
            assign.to_string(),
        ];
        if let Some(s) = &share {
            args.extend(["--share".to_string(), s.to_arg()]);
        }
        if !export_modes.is_empty() {
            args.extend(["--export-modes".to_string(), export_modes.clone()]);
        }
        args.extend(extra.iter().cloned());
        // The pipeline goes in the environment, which only its user and root can read
        // (a command line is everyone's, and the pipeline may hold secrets).
        Launcher {
            exe,
            args,
            env: vec![(SPACE_PIPELINE_ENV.into(), pipeline.into())],
        }
    });
    // Fault injection for the rollback tests (tests/spaces.rs): fail construction step K
    // (from 0). A test hook only: debug builds (what `cargo test` runs) read it, a release
    // binary has no such variable.
    #[cfg(debug_assertions)]
    let fail_at = std::env::var("STREAMLINE_FAIL_STEP")
        .ok()
        .and_then(|v| v.parse().ok());
    #[cfg(not(debug_assertions))]
    let fail_at = None;
    let layout = layout(&g);
    let spaces = Spaces::build_steps(
        &g,
        &filters::Library,
        o.ring,
        ChannelConfig::default(),
        launcher.as_ref(),
        fail_at,
    )
    // Under the pipeline with a caret at the node that failed, like a parse error.
    .map_err(|e| {
        let head = format!("streamline: {e}");
        fail(
            match e.span {
                Some(span) => shown.render(&head, span, None),
                None => head,
            },
            2,
        )
    })?;
    Ok(Prepared {
        spaces,
        placement: shown.scrub(&placement),
        mode,
        layout: shown.scrub(&layout),
    })
}

/// The per-filter table, summaries and warnings a run prints at its end (standard error).
pub(crate) fn print_report(
    rep: &dataplane::spaces::SpacesReport,
    elapsed: std::time::Duration,
    quiet: bool,
) {
    let report = &rep.nodes;
    if !quiet {
        // The columns add up per row: blocks out = blocks in - drops + made - ended
        // (`dataplane::Counters`). One row per node the user wrote, labelled as in one
        // space; `space` says where it ran (`1,2`: replicas, summed in the row).
        eprintln!(
            "{:<16} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10} {:>10}  space",
            "filter",
            "blocks in",
            "bytes in",
            "blocks out",
            "bytes out",
            "drops",
            "made",
            "ended",
            "time ms"
        );
        for r in report {
            let c = r.counters;
            eprintln!(
                "{:<16} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10} {:>10.1}  {}",
                r.label,
                c.blocks_in,
                c.bytes_in,
                c.blocks_out,
                c.bytes_out,
                c.drops,
                c.made,
                c.ended,
                c.nanos as f64 / 1e6,
                if r.space.is_empty() { "-" } else { &r.space }
            );
        }
        eprintln!("({:.3} s)", elapsed.as_secs_f64());
    }
    for line in summary_lines(report) {
        eprintln!("{line}");
    }
    for w in &rep.warnings {
        eprintln!("streamline: warning: {w}");
    }
}

/// The filters' summary lines, each as its filter wrote it (`count: N blocks, ...`), but
/// where two lines would start alike (`count | count name=tail`), each starts with its
/// node's label instead (`count: ...`, `count:tail: ...`, `count#2: ...`), so no two
/// identical prefixes leave the reader guessing which node said what.
fn summary_lines(report: &[dataplane::runtime::NodeReport]) -> Vec<String> {
    let prefix = |s: &str| s.split_once(": ").map(|(p, _)| p.to_string());
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for s in report.iter().filter_map(|r| r.summary.as_deref()) {
        if let Some(p) = prefix(s) {
            *seen.entry(p).or_default() += 1;
        }
    }
    report
        .iter()
        .filter_map(|r| {
            let s = r.summary.as_deref()?;
            Some(match s.split_once(": ") {
                Some((p, rest)) if seen.get(p).is_some_and(|&n| n > 1) && r.label != p => {
                    format!("{}: {rest}", r.label)
                }
                _ => s.to_string(),
            })
        })
        .collect()
}

/// `--stats`: the run's counters as JSON, the nodes as the table lists them and the arcs
/// between them (`dataplane::spaces::SpacesReport::arcs`):
/// `{"elapsed_s": S, "nodes": [{"label", "blocks_in", "bytes_in", "blocks_out",
/// "bytes_out", "drops", "made", "ended", "space"}], "arcs": [{"from", "to", "blocks", "bytes"}]}`;
/// an arc's `to` is null when it leads to none of the nodes (a channel whose consuming
/// space reported nothing: it died).
pub(crate) fn stats_json(
    rep: &dataplane::spaces::SpacesReport,
    elapsed: std::time::Duration,
    running: bool,
) -> String {
    use serde_json::json;
    let nodes: Vec<_> = rep
        .nodes
        .iter()
        .map(|n| {
            let c = n.counters;
            json!({
                "label": n.label,
                "blocks_in": c.blocks_in,
                "bytes_in": c.bytes_in,
                "blocks_out": c.blocks_out,
                "bytes_out": c.bytes_out,
                "drops": c.drops,
                "made": c.made,
                "ended": c.ended,
                "space": n.space,
            })
        })
        .collect();
    let arcs: Vec<_> = rep
        .arcs
        .iter()
        .map(|a| {
            let to = match &a.to {
                dataplane::ArcTarget::Node(l) => Some(l.as_str()),
                _ => None,
            };
            json!({"from": a.from, "to": to, "blocks": a.carried.blocks, "bytes": a.carried.bytes})
        })
        .collect();
    let v = json!({"running": running, "elapsed_s": elapsed.as_secs_f64(), "nodes": nodes, "arcs": arcs});
    format!("{v:#}\n")
}

/// Write `text` to `file` whole: into `FILE.part` beside it, then renamed over it, so a
/// reader never sees half of it.
fn write_whole(file: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut part = file.as_os_str().to_owned();
    part.push(".part");
    std::fs::write(&part, text)?;
    std::fs::rename(&part, file)
}

/// `--stats FILE` while the run runs: every ~100 ms, the table as its spaces last
/// published it (`EditHandle::table`: the rows and arcs of the final table, `"running":
/// true`), until `done`. The run's own end writes the final table after this has stopped.
fn live_stats(
    file: &std::path::Path,
    h: &dataplane::EditHandle,
    start: std::time::Instant,
    done: &AtomicBool,
) {
    // Pairs with the Release store after the run.
    while !done.load(Ordering::Acquire) {
        let rep = h.table();
        if let Err(e) = write_whole(file, &stats_json(&rep, start.elapsed(), true)) {
            error!("--stats {}: {e}", file.display());
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The exit status of a finished run: 1 if a space died or a filter failed, 128 + the
/// signal that stopped it, else its last command's when that is a Unix command that
/// failed (as a shell pipeline's), else 0.
pub(crate) fn exit_status(rep: &dataplane::spaces::SpacesReport, sig: i32) -> u8 {
    if let Some(d) = &rep.died {
        error!("{d}");
        return 1;
    }
    if sig != 0 {
        eprintln!("interrupted ({})", signal_name(sig));
        return (128 + sig) as u8;
    }
    if rep.failed {
        return 1;
    }
    rep.status.unwrap_or(0)
}

/// A run without the daemon (`why`: why not through one, for the line saying so; `stats`:
/// where `--stats` writes the table as JSON).
fn run(
    pipeline: &str,
    o: &daemon::proto::RunOptions,
    why: &str,
    stats: Option<&std::path::Path>,
) -> ExitCode {
    let Prepared {
        spaces, placement, ..
    } = match prepare(pipeline, o, &[], &[]) {
        Ok(p) => p,
        Err(e) => {
            error!("{}", e.message);
            return ExitCode::from(e.code);
        }
    };
    let quiet = o.quiet;
    if !quiet {
        eprintln!("streamline: running stand-alone ({why})");
    }
    if !quiet && !placement.is_empty() {
        eprintln!("{placement}");
    }
    let (interrupt, signal) = watch_stop_signals(|sig| {
        // A second signal: give up at once (but leave no pinned maps behind).
        filters::nicfix::remove_run_pins();
        std::process::exit(128 + sig);
    });
    // The bar goes to stderr when it is a terminal, unless stdout is the same terminal
    // (sinks such as inspect write there; bar and lines would interleave), as curl does.
    let bar = if std::io::stderr().is_terminal() && !std::io::stdout().is_terminal() && !quiet {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap(),
        );
        Some(b)
    } else {
        None
    };
    let start = std::time::Instant::now();
    let tick = |s: &dataplane::Space| {
        if let (Some(b), Some((done, total))) = (&bar, s.progress()) {
            b.set_length(total);
            b.set_position(done);
        }
    };
    let edits = edits::Edits::new();
    let done = AtomicBool::new(false);
    let rep = std::thread::scope(|s| {
        if let Some(file) = stats {
            // --stats while running: the counters the spaces publish, through the handle
            // the run itself is run with.
            let (h, done) = (edits.handle_of(&spaces), &done);
            s.spawn(move || live_stats(file, &h, start, done));
        }
        let rep = if o.adapt || o.chaos.is_some() || stats.is_some() {
            edits.run_adapting(spaces, o, &interrupt, tick)
        } else {
            spaces.run(&interrupt, tick)
        };
        // Pairs with the Acquire load in `live_stats`.
        done.store(true, Ordering::Release);
        rep
    });
    // The kernel filters' pins go with their programs; whatever a failure left, goes now.
    filters::nicfix::remove_run_pins();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let elapsed = start.elapsed();
    print_report(&rep, elapsed, quiet);
    if let Some(file) = stats {
        if let Err(e) = write_whole(file, &stats_json(&rep, elapsed, false)) {
            error!("--stats {}: {e}", file.display());
            return ExitCode::from(1);
        }
    }
    // Pairs with the SeqCst store of the signal number in `watch_stop_signals`.
    ExitCode::from(exit_status(&rep, signal.load(Ordering::SeqCst)))
}
