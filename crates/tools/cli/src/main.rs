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
//!   It derives the placement as `run` does (`runplan::derive`), so the two agree.
//! - `streamline maps [--watch SECS]` prints the BPF maps of running runs' kernel filters
//!   (flowcount, sample, bytecount right after `rx`), pinned under /sys/fs/bpf/streamline.

mod compat;
mod help;
mod preload;
mod remote;
mod shaping;
mod top;

use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

pub(crate) use runplan::report::error_text;

/// Print an error in the one style ([`error_text`]).
macro_rules! error {
    ($($t:tt)*) => {
        eprintln!("{}", $crate::error_text(&format!($($t)*)))
    };
}
pub(crate) use error;

use runplan::report::STOP_SIGNALS;

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
    /// Open the daemon's web view as yourself: asks the daemon (over its socket, which
    /// knows your uid) for a one-time token and prints the URL that carries it. The
    /// daemon serves the view only when started with `--http 127.0.0.1:PORT`.
    Web,
    /// The daemon's runs in the terminal, updating in place: the runs, then (Enter) a
    /// run's nodes sorted by load. Keys: up/down or k/j, Enter, b or Esc back, q quit.
    Top {
        /// Start on this run's nodes.
        run: Option<u64>,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        delay: f64,
        /// Stop after this many refreshes (off a terminal: prints each).
        #[arg(long, short = 'n')]
        iterations: Option<u64>,
    },
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
    /// Parse a pipeline and print its graph (or the error).
    Check { pipeline: String },
    /// Print a command's help, or a topic: `pipelines` (the language, with examples),
    /// `options` (what every filter takes), `policy` (the daemon's policy file).
    Help { topic: Option<String> },
    /// List native filters, or print one filter's documentation.
    Filters { name: Option<String> },
    /// A process space of a run (started by `streamline run` itself): it receives its
    /// part of the run's plan over the descriptor (`runplan::process_space`).
    #[command(name = "__space", hide = true)]
    Space {
        #[arg(long)]
        space: usize,
        #[arg(long)]
        fd: i32,
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

use runplan::resolver;

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
        Cmd::Filters { name: Some(n) } => match filters::find(&n) {
            Some(s) => {
                print!("{}", s.doc());
                ExitCode::SUCCESS
            }
            None => {
                error!("no native filter named '{n}' (`streamline filters` lists them)");
                ExitCode::from(2)
            }
        },
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
            run_command(cli.socket.as_deref(), &pipeline, o, detach, log, stats)
        }
        Cmd::Ps => remote::ps(cli.socket.as_deref()),
        Cmd::Stop { run } => remote::stop(cli.socket.as_deref(), run),
        Cmd::Attach { run } => remote::attach(cli.socket.as_deref(), run),
        Cmd::Edit { run, edit } => remote::edit(cli.socket.as_deref(), run, &edit),
        Cmd::Web => remote::web(cli.socket.as_deref()),
        Cmd::Top {
            run,
            delay,
            iterations,
        } => match remote::need(cli.socket.as_deref()) {
            Ok(c) => top::top(
                c,
                run,
                std::time::Duration::from_secs_f64(delay.clamp(0.1, 3600.0)),
                iterations,
            ),
            Err(code) => code,
        },
        Cmd::Compat { print_dir, cmd } => compat::run(print_dir, &cmd, cli.socket.as_deref()),
        Cmd::Exec { opts, cmd } => preload::exec(&opts, &cmd),
        Cmd::Sh { opts, script, args } => preload::sh(&opts, &script, &args),
        Cmd::Shape { opts, cmd } => shaping::run(&opts, &cmd),
        Cmd::Maps { watch, top } => maps(watch, top),
        Cmd::Space { space, fd } => ExitCode::from(runplan::process_space(space, fd)),
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
                    error!("{}", e.message);
                    ExitCode::from(e.code)
                }
            }
        }
    }
}

/// `streamline run`: through the daemon when one answers (attached, or `--detach`ed
/// with its log in `log`), else stand-alone; `--stats` runs stand-alone always.
fn run_command(
    socket: Option<&str>,
    pipeline: &str,
    o: daemon::proto::RunOptions,
    detach: bool,
    log: Option<std::path::PathBuf>,
    stats: Option<std::path::PathBuf>,
) -> ExitCode {
    if stats.is_some() && detach {
        error!("--stats is written by a run this command waits for; it cannot be --detach'ed");
        return ExitCode::from(2);
    }
    if let Some(file) = &stats {
        return run(pipeline, &o, "--stats", Some(file));
    }
    match remote::connect(socket) {
        Some(Ok(c)) => remote::run(c, socket, pipeline, o, detach.then_some(log)),
        Some(Err(e)) => {
            error!("{e} (run stand-alone with --socket none)");
            ExitCode::from(1)
        }
        None if detach => {
            let p = daemon::client::socket_path(socket)
                .map_or("none".into(), |p| p.display().to_string());
            error!(
                "--detach needs a daemon, and none answers on {p} (start one with `streamlined`)"
            );
            ExitCode::from(2)
        }
        None => {
            let why = match daemon::client::socket_path(socket) {
                Some(p) => format!("no daemon answers on {}", p.display()),
                None => "--socket none".to_string(),
            };
            run(pipeline, &o, &why, None)
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

/// `streamline plan`: the placement `streamline run` would choose, derived as a run
/// derives it (`runplan::derive`), explained.
fn plan(pipeline: &str, o: PlanOpts) -> Result<(), runplan::Refused> {
    let refused = |e: String| runplan::Refused {
        message: format!("plan: {e}"),
        code: 2,
    };
    let planning = runplan::Planning {
        system: match &o.system {
            Some(p) => Some(control::SystemModel::load(p).map_err(|e| refused(e.to_string()))?),
            None => None,
        },
        costs: o.costs.clone(),
        refuse_unplaced: true,
    };
    if o.show_system {
        println!(
            "{}",
            runplan::system_model(&planning).map_err(refused)?.to_json()
        );
        return Ok(());
    }
    // What the planner chose for `streamline run --plan how` (which it does not run, so
    // it neither shares a prefix with a live run nor offers one).
    let choose = |how: &str| -> Result<(control::Planner, control::Planned), runplan::Refused> {
        let run = daemon::proto::RunOptions {
            plan: how.into(),
            rate: o.rate,
            bytes: o.bytes,
            no_share: true,
            quiet: true,
            ..Default::default()
        };
        let derived = runplan::derive(pipeline, &run, &[], &planning)?;
        derived
            .chosen
            .and_then(|c| c.planned)
            .ok_or_else(|| refused("the planner made no plan".into()))
    };
    let (planner, chosen) = choose(if o.heuristic { "heuristic" } else { "ilp" })?;
    if o.canonical {
        print!("{}", chosen.plan.canonical());
    } else {
        println!("system: {}", planner.sys.summary().trim_end());
        print!("{}{}", scaled_note(&planner, o.rate), chosen.plan.explain());
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
        let (hp, h) = choose("heuristic")?;
        println!();
        print!("{}{}", scaled_note(&hp, o.rate), h.plan.explain());
        let (a, b) = (chosen.plan.cost, h.plan.cost);
        println!();
        println!(
            "compare: optimizer {} cycles/s, heuristic {} cycles/s: heuristic costs {:.2}x the optimizer's{}",
            control::plan::human(a),
            control::plan::human(b),
            if a > 0.0 { b / a } else { 1.0 },
            if chosen.plan.canonical() == h.plan.canonical() { " (same placement)" } else { "" }
        );
        let (ra, rb) = (planner.load.blocks_per_sec, hp.load.blocks_per_sec);
        if ra != rb {
            println!(
                "(planned for different rates: the optimizer {} blocks/s, the heuristic {})",
                control::plan::human(ra),
                control::plan::human(rb)
            );
        }
    }
    if let Some(path) = &o.dot {
        let text = chosen.plan.dot();
        if path == "-" {
            print!("{text}");
        } else {
            std::fs::write(path, text).map_err(|e| refused(format!("cannot write {path}: {e}")))?;
            eprintln!("wrote {path}");
        }
    }
    Ok(())
}

/// A line saying that `planner` planned for less than the offered `rate` (blocks/s at
/// each source), as `streamline run` does when that rate does not fit; empty if not.
fn scaled_note(planner: &control::Planner, rate: f64) -> String {
    let planned = planner.load.blocks_per_sec;
    if planned >= rate {
        return String::new();
    }
    format!(
        "note: the offered {} blocks/s does not fit: planned for {} blocks/s, the highest rate that fits (as `streamline run` places it)\n",
        control::plan::human(rate),
        control::plan::human(planned)
    )
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

/// A run without the daemon (`why`: why not through one, for the line saying so; `stats`:
/// where `--stats` writes the table as JSON).
fn run(
    pipeline: &str,
    o: &daemon::proto::RunOptions,
    why: &str,
    stats: Option<&std::path::Path>,
) -> ExitCode {
    let (spaces, placement) =
        match runplan::plan(pipeline, o, &[]).and_then(|p| Ok((p.build()?, p.placement))) {
            Ok(p) => p,
            Err(e) => {
                error!("{}", e.message);
                return ExitCode::from(e.code);
            }
        };
    let quiet = o.quiet;
    if !quiet {
        // One write: stderr is unbuffered, and `eprintln!` with arguments writes each piece
        // on its own, so a command of the pipeline already started (`nosuchcmd`'s "command
        // not found") could land inside the line.
        let line = format!("streamline: running stand-alone ({why})\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
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
    let edits = runplan::live::Edits::new();
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
    runplan::report::print_report(&rep, elapsed, quiet);
    if let Some(file) = stats {
        if let Err(e) = write_whole(file, &stats_json(&rep, elapsed, false)) {
            error!("--stats {}: {e}", file.display());
            return ExitCode::from(1);
        }
    }
    // Pairs with the SeqCst store of the signal number in `watch_stop_signals`.
    ExitCode::from(runplan::report::exit_status(
        &rep,
        signal.load(Ordering::SeqCst),
    ))
}
