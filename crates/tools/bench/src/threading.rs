//! The `threading` subcommand (thesis 5.2.1, Figure 5.1): a chain of N trivial filters
//! ("match the first byte of 1 KiB blocks"), run three ways on the same blocks:
//!
//! - **ours**: one Streamline space, `gen count=K size=1024 | byte0 | ... | byte0 | null`,
//!   built through `lang::parse` and `dataplane::Space::build` and scheduled depth-first by
//!   function calls. `byte0` is a native filter of this crate ([`Byte0`]), added to the
//!   library's filters by [`BenchFactory`] and [`BenchResolver`]. `Space::run` is timed;
//!   the per-filter counters must show all K blocks at every filter and at the sink.
//! - **Unix pipeline**: N processes connected by pipes, each this binary in the hidden
//!   `__byte0` mode ([`byte0_main`]: buffered, reads up to 64 KiB, checks byte 0 of each
//!   1 KiB block, writes the whole blocks in one write); the parent writes every byte of
//!   every block into the first (64 KiB writes) and drains (and checks) the last. It is
//!   compared with ours/rw (below), which also writes every byte: the same bytes made, the
//!   same blocks out (checked: K, in order, before a ratio is printed). The headline is
//!   CPU per block (user + system of the N processes and the feeder and drain threads,
//!   against this process' over `Space::run`): the two sides run on different numbers of
//!   threads, so wall clock would credit the pipeline with the second core ours does not
//!   use (wall clock is printed beside it, `..._wall`).
//! - **single loop**: one hand-written loop doing ours' work with no framework at all (the
//!   upper bound): it makes each block as `gen` does into a ring laid out as gen's and does
//!   the N checks on it.
//!
//! `gen` writes a block's bytes into its ring slot on the first lap only: a lap is 768
//! slots of 1088 bytes (a multiple of the pattern's period of 256; blocks one cache line
//! apart), so on later laps a slot already holds its bytes and only the sequence number is
//! stamped (as a NIC fills a capture ring, the space's CPU does not write the blocks; see
//! the `gen` filter's documentation). The single loop does the same.
//!
//! A second matched pair, over blocks already made: ours with `file` over the same K
//! blocks in a memfd (mapped as a DBuf, tags point into it), against the single loop over
//! the K blocks in memory (1 GiB: both read from DRAM). Until 2026-11-23 the headline
//! divided ours-with-gen by this in-memory loop, a mismatched pair (ours read a ring in
//! L2, the loop read DRAM), which made ours look faster than its upper bound.
//!
//! ours/rw: ours with `gen rewrite=yes` (the source writes every byte of every block, as
//! gen did before 2026-11-23): the side matched with the Unix pipeline. Until 2026-11-27
//! the Unix figure divided ours (8 bytes stamped per block) by a pipeline of unbuffered
//! 1 KiB reads and writes, a handicapped peer doing more work.
//!
//! Every variant moves the same K blocks.

use crate::proc::{children_cpu_secs, die_with_parent, self_cpu_secs};
use crate::util::{err, watchdog, Plan, Result, Summary, Target};
use dataplane::{Args as FilterArgs, Classifier, Classify, Factory, Filter, Space};
use std::hint::black_box;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Block size (bytes).
const BLOCK: usize = 1024;
/// Name of the trivial native filter in pipelines.
const BYTE0: &str = "byte0";
/// Blocks per write of the Unix pipeline's feeder (a source writes in bulk, like `gen`'s
/// batches of 64): 64 KiB, the size of the `__byte0` processes' reads and writes.
const FEED_BLOCKS: usize = 64;
/// Buffer of each `__byte0` process: it reads up to 64 KiB (a default pipe's capacity) at
/// a time and writes the whole blocks it holds in one write, as a competent filter does.
const IO_BUF: usize = FEED_BLOCKS * BLOCK;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed repetitions per configuration (the fastest counts); ignored with --quick.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Chain lengths to measure.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 4, 10])]
    filters: Vec<usize>,
    /// Run only these variants (e.g. to profile one); headline figures need all three.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Variant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Variant {
    /// Ours, with gen (against the single loop).
    Ours,
    /// Ours with file (the second matched pair) and with `gen rewrite=yes`.
    OursMore,
    /// The Unix process pipeline (and ours with `gen rewrite=yes`, its match).
    Unix,
    /// The single loop, generating blocks (headline) and over blocks in memory.
    Loop,
}

/// The hidden `__byte0` mode: one filter of the Unix pipeline.
#[derive(clap::Args, Debug)]
pub struct Byte0Args {
    /// Pid of the benchmark process that started us (we die with it).
    #[arg(long)]
    parent: Option<u32>,
}

/// Block volume: every variant moves the same `blocks` (so the blocks out of ours and of
/// the Unix pipeline can be compared before a ratio is printed).
struct Volumes {
    blocks: u64,
}

impl Volumes {
    fn new(quick: bool) -> Volumes {
        Volumes {
            blocks: if quick { 100_000 } else { 1_000_000 },
        }
    }
}

/// The trivial filter's decision: every block passes, with class 1 or 2 by the low bit of
/// its first byte (so the check cannot be skipped, and nothing is dropped).
#[inline(always)]
fn classify(first: u8) -> u16 {
    (first & 1) as u16 + 1
}

/// `byte0`: the trivial native filter. Reads byte 0 of each block, sets its class. A
/// [`Classify`], run by the library's [`Classifier`] adapter like the library's own
/// classifiers.
struct Byte0;

impl Classify for Byte0 {
    #[inline]
    fn classify(&mut self, d: &[u8], _t: &dataplane::Tag) -> dataplane::Class {
        match d.first() {
            Some(&b) => classify(b),
            None => 0,
        }
    }
}

/// The filter library plus `byte0`.
pub(crate) struct BenchFactory;

impl Factory for BenchFactory {
    fn make(
        &self,
        name: &str,
        args: &FilterArgs,
    ) -> std::result::Result<Box<dyn Filter>, dataplane::FilterError> {
        if name == BYTE0 {
            return Ok(Box::new(Classifier(Byte0)));
        }
        filters::Library.make(name, args)
    }
    fn is_source(&self, name: &str) -> bool {
        name != BYTE0 && filters::Library.is_source(name)
    }
}

/// The library's names (and parameter keys) plus `byte0` (which takes none).
pub(crate) struct BenchResolver;

impl lang::Resolver for BenchResolver {
    fn resolve(&self, name: &str) -> Option<lang::FilterKind> {
        if name == BYTE0 {
            return Some(lang::FilterKind::Native);
        }
        filters::Natives.resolve(name)
    }
    fn native_names(&self) -> Vec<String> {
        let mut v = filters::Natives.native_names();
        v.push(BYTE0.to_string());
        v
    }
    fn params(&self, name: &str) -> Option<Vec<String>> {
        if name == BYTE0 {
            return Some(Vec::new());
        }
        filters::Natives.params(name)
    }
}

/// Block `seq` exactly as the `gen` filter makes it: the sequence number (little endian),
/// then a pattern.
fn gen_block(seq: u64, s: &mut [u8]) {
    let sb = seq.to_le_bytes();
    for (i, b) in s.iter_mut().enumerate() {
        *b = if i < 8 {
            sb[i]
        } else {
            (i as u8).wrapping_mul(31) ^ sb[0]
        };
    }
}

/// The pipeline text: `source`, a chain of `n` filters, a sink.
fn pipeline(source: &str, n: usize) -> String {
    format!("{source}{} | null", format!(" | {BYTE0}").repeat(n))
}

/// The headline source: `gen` makes the K blocks (into its ring in the space).
fn gen_source(k: u64) -> String {
    format!("gen count={k} size={BLOCK}")
}

/// The context source: `gen` writing every byte of every block.
fn gen_rewrite_source(k: u64) -> String {
    format!("gen count={k} size={BLOCK} rewrite=yes")
}

/// The context source: the same K blocks already made, in a file the space maps as a
/// DBuf (tags point into it; nothing is made or copied per block).
fn file_source(path: &Path) -> String {
    format!("file {} split=fixed size={BLOCK}", path.display())
}

/// Ours: build the space (not timed), time `Space::run`, check the counters. Returns the
/// wall-clock seconds and the CPU seconds (user + system) of this process over the run
/// (the space runs in the calling thread; the benchmark's other threads sleep).
fn run_ours(source: &str, n: usize, k: u64) -> Result<(f64, f64)> {
    let text = pipeline(source, n);
    let g =
        lang::parse(&text, &BenchResolver).map_err(|d| err(format!("parsing `{text}`:\n{d}")))?;
    let mut space = Space::build(&g, &BenchFactory, 1 << 20)
        .map_err(|e| err(format!("building `{text}`: {e}")))?;
    let interrupt = AtomicBool::new(false);
    let c0 = self_cpu_secs();
    let t0 = Instant::now();
    space.run(&interrupt, |_| {});
    let secs = t0.elapsed().as_secs_f64();
    let cpu = self_cpu_secs() - c0;
    if space.failed() || !space.warnings().is_empty() {
        return Err(err(format!(
            "`{text}` failed: {}",
            space.warnings().join("; ")
        )));
    }
    let report = space.report();
    if report.len() != n + 2 {
        return Err(err(format!(
            "`{text}`: expected {} nodes, the space has {}",
            n + 2,
            report.len()
        )));
    }
    // The source emitted K blocks; every filter and the sink received all K.
    let src = &report[0];
    if src.counters.blocks_out != k {
        return Err(err(format!(
            "`{text}`: {} emitted {} blocks, expected {k}",
            src.label, src.counters.blocks_out
        )));
    }
    for r in &report[1..] {
        if r.counters.blocks_in != k {
            return Err(err(format!(
                "`{text}`: {} received {} of {k} blocks",
                r.label, r.counters.blocks_in
            )));
        }
    }
    Ok((secs, cpu))
}

/// Children killed and reaped when dropped (on any failure path).
struct Children(Vec<Child>);

impl Children {
    /// Reap every child; fail unless all exited 0.
    fn wait_all(mut self) -> Result<()> {
        let mut res = Ok(());
        for (i, mut c) in std::mem::take(&mut self.0).into_iter().enumerate() {
            match c.wait() {
                Ok(st) if st.success() => {}
                Ok(st) => {
                    res = res.and(Err(err(format!(
                        "filter process {} of the Unix pipeline failed ({st})",
                        i + 1
                    ))))
                }
                Err(e) => {
                    res = res.and(Err(err(format!(
                        "waiting for filter process {}: {e}",
                        i + 1
                    ))))
                }
            }
        }
        res
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// The Unix pipeline: `n` processes of `streamline-bench __byte0` joined by pipes. Timed
/// from the first block fed (all processes started) to end of stream at the parent.
/// Returns the wall-clock seconds, the CPU seconds (user + system) of the whole pipeline
/// (the feeder and drain threads of this process and the `n` filter processes, from
/// their start to their exit: the pipes' copies are system time of their readers and
/// writers) and the blocks that came out of the last process (checked to be `k`, in
/// order, before this returns).
fn run_unix(n: usize, k: u64) -> Result<(f64, f64, u64)> {
    let kids0 = children_cpu_secs();
    let exe = std::env::current_exe().map_err(|e| err(format!("locating own executable: {e}")))?;
    let mut kids = Children(Vec::new());
    let mut prev_out = None;
    let mut feed_in = None;
    for i in 0..n {
        let stdin = match prev_out.take() {
            Some(out) => Stdio::from(out),
            None => Stdio::piped(),
        };
        let mut c = Command::new(&exe)
            .arg("__byte0")
            .arg("--parent")
            .arg(std::process::id().to_string())
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| err(format!("starting filter process {}: {e}", i + 1)))?;
        if i == 0 {
            feed_in = c.stdin.take();
        }
        prev_out = c.stdout.take();
        kids.0.push(c);
    }
    let mut drain = prev_out.expect("n >= 1");
    let mut feed = feed_in.expect("piped stdin of the first process");
    let self0 = self_cpu_secs();
    let t0 = Instant::now();
    let feeder = std::thread::spawn(move || -> std::io::Result<()> {
        let mut chunk = vec![0u8; FEED_BLOCKS * BLOCK];
        let mut seq = 0;
        while seq < k {
            let m = (k - seq).min(FEED_BLOCKS as u64) as usize;
            for b in 0..m {
                gen_block(seq + b as u64, &mut chunk[b * BLOCK..(b + 1) * BLOCK]);
            }
            feed.write_all(&chunk[..m * BLOCK])?;
            seq += m as u64;
        }
        Ok(()) // dropping `feed` is the end of stream
    });
    // Drain, checking each block's sequence number (its first 8 bytes).
    let mut buf = vec![0u8; FEED_BLOCKS * BLOCK];
    let mut fill = 0;
    let mut seq = 0u64;
    let mut total = 0u64;
    let drained: Result<()> = (|| loop {
        let r = drain.read(&mut buf[fill..])?;
        if r == 0 {
            return Ok(());
        }
        fill += r;
        total += r as u64;
        let whole = fill - fill % BLOCK;
        for b in buf[..whole].chunks_exact(BLOCK) {
            let got = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            if got != seq {
                return Err(err(format!(
                    "Unix pipeline: block {seq} arrived as block {got}"
                )));
            }
            seq += 1;
        }
        buf.copy_within(whole..fill, 0);
        fill -= whole;
    })();
    let secs = t0.elapsed().as_secs_f64();
    if drained.is_err() {
        drop(drain); // the feeder may be blocked on a full pipe: let the processes go
        drop(kids);
    } else {
        kids.wait_all()?;
    }
    let cpu = (self_cpu_secs() - self0) + (children_cpu_secs() - kids0);
    let fed = feeder
        .join()
        .map_err(|_| err("the feeder thread panicked"))?;
    drained?;
    fed.map_err(|e| err(format!("feeding the Unix pipeline: {e}")))?;
    if total != k * BLOCK as u64 || fill != 0 {
        return Err(err(format!(
            "Unix pipeline delivered {total} bytes, expected {}",
            k * BLOCK as u64
        )));
    }
    Ok((secs, cpu, seq))
}

/// The `n` checks of the chain on one block; returns the sum of the classes (every class
/// is used, so no check can be optimized away; `black_box` makes each check load byte 0
/// anew instead of reusing the first load).
#[inline(always)]
fn checks(n: usize, b: &[u8]) -> u64 {
    let mut sum = 0;
    for _ in 0..n {
        sum += classify(black_box(b)[0]) as u64;
    }
    sum
}

/// The single loop: `n` checks per block over blocks already in memory.
fn run_loop(n: usize, blocks: &[u8]) -> Result<f64> {
    let k = (blocks.len() / BLOCK) as u64;
    let t0 = Instant::now();
    let mut classes = 0u64;
    for b in blocks.chunks_exact(BLOCK) {
        classes += checks(n, b);
    }
    let classes = black_box(classes);
    let secs = t0.elapsed().as_secs_f64();
    if classes < n as u64 * k {
        return Err(err(format!(
            "single loop: a block failed a check (class sum {classes})"
        )));
    }
    Ok(secs)
}

/// The single loop doing all of ours' work: it makes each block as `gen` does, in a ring
/// laid out as gen's ([`filters::sources::GenRing`]: on the first lap the pattern XOR the
/// sequence number's low byte, on every lap the sequence number), then does the `n`
/// checks. The framework's work minus the framework.
fn run_loop_gen(n: usize, k: u64) -> Result<f64> {
    let layout = filters::sources::GenRing::new(BLOCK);
    let mut ring = vec![0u8; layout.ring];
    let pattern: Vec<u8> = (0..BLOCK).map(|i| (i as u8).wrapping_mul(31)).collect();
    let t0 = Instant::now();
    let mut classes = 0u64;
    for seq in 0..k {
        let at = (seq as usize % layout.slots) * layout.stride;
        let b = &mut ring[at..at + BLOCK];
        if seq < layout.slots as u64 {
            let lo = seq as u8;
            for (d, &p) in b.iter_mut().zip(&pattern) {
                *d = p ^ lo;
            }
        }
        b[..8].copy_from_slice(&seq.to_le_bytes());
        classes += checks(n, black_box(&*b));
    }
    let classes = black_box(classes);
    let secs = t0.elapsed().as_secs_f64();
    if classes < n as u64 * k {
        return Err(err(format!(
            "single loop (with generation): a block failed a check (class sum {classes})"
        )));
    }
    Ok(secs)
}

/// One chain length's rates, in blocks per second (NaN: not measured, see --only), and the
/// CPU cost of the matched pair against the Unix pipeline.
struct Row {
    n: usize,
    ours: f64,
    ours_file: f64,
    ours_rewrite: f64,
    unix: f64,
    single: f64,
    single_gen: f64,
    /// CPU seconds per block: ours with `gen rewrite=yes` and the whole Unix pipeline.
    ours_rewrite_cpu: f64,
    unix_cpu: f64,
}

/// What every chain length's measurement shares: the arguments, the timing plan, the
/// block count, the blocks in memory and in a memfd for `file`.
struct Bench<'a> {
    a: &'a Args,
    plan: Plan,
    /// Blocks every variant moves.
    k: u64,
    /// The K blocks in memory (empty unless a variant over made blocks runs).
    blocks: Vec<u8>,
    /// The same blocks in a memfd (gone with this process however it ends), opened by the
    /// space through its /proc/self/fd path: `file`.
    file: std::path::PathBuf,
    memfile: std::fs::File,
}

impl Bench<'_> {
    fn selected(&self, x: Variant) -> bool {
        self.a.only.is_empty() || self.a.only.contains(&x)
    }
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(15 * 60)
    });
    if a.filters.is_empty() || a.filters.contains(&0) {
        return Err(err("--filters: chain lengths must be at least 1"));
    }
    let plan = Plan::new(quick, a.reps);
    let k = Volumes::new(quick).blocks;
    describe(&plan, k, quick);
    let b = made_blocks(a, plan, k)?;
    let mut rows = Vec::new();
    for &n in &a.filters {
        rows.push(row(&b, n)?);
    }
    let Bench {
        blocks, memfile, ..
    } = b;
    drop(blocks);
    drop(memfile);
    figures(&rows, k).print()?;
    Ok(())
}

/// What is measured and how, and the table's header.
fn describe(plan: &Plan, k: u64, quick: bool) {
    println!(
        "streamline-bench threading ({} mode): {} CPUs",
        if quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "\n== Threading: a chain of N trivial filters over 1 KiB blocks (thesis 5.2.1, Fig 5.1) =="
    );
    println!("filter:    `{BYTE0}` reads byte 0 of each block, class = (byte & 1) + 1 (every block passes)");
    println!("{k} blocks for every variant");
    println!(
        "ours:      one space, `{}` (N = 2 shown); Space::run timed",
        pipeline(&gen_source(k), 2)
    );
    println!("loop+gen:  the single loop doing ours' work: makes each block as gen does, N checks (upper bound)");
    println!(
        "matched pair against the Unix pipeline (both sides write every byte of every block):"
    );
    println!(
        "ours/rw:   ours with `{}`: the source writes every byte of every block",
        gen_rewrite_source(k)
    );
    println!("unix:      N processes `streamline-bench __byte0` joined by pipes, each reading up to {} KiB and writing", IO_BUF / 1024);
    println!("           its whole blocks in one write; the parent writes every byte of every block in {FEED_BLOCKS}-block writes and drains the last");
    println!("           CPU = user+sys of the feeder and drain threads and of the N processes; ours' CPU = user+sys of this process over Space::run");
    println!("matched pair over blocks already made (both read the same 1 GiB from memory):");
    println!("ours/file: ours with `file BLOCKS split=fixed size={BLOCK} | ...`, BLOCKS a memfd of the K blocks");
    println!("loop/mem:  one loop over the K blocks in memory, N checks per block");
    if quick {
        println!("quick mode: small volumes, one run each; numbers are not measurements");
    } else {
        println!(
            "each configuration: one warm-up run (not counted), then the best of {} timed runs (CPU: that run's)",
            plan.reps
        );
    }
    println!("blocks/s in millions (Mblk/s); CPU in ns per block");
    println!(
        "{:>3} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "N",
        "ours",
        "ours/rw",
        "unix pipe",
        "loop/mem",
        "ours/file",
        "loop+gen",
        "rw ns/blk",
        "unix ns",
        "unix/rw",
        "cpu x",
        "vs loop"
    );
}

/// The K blocks made once, in memory and (for `file`) in a memfd, when a variant over
/// made blocks runs.
fn made_blocks(a: &Args, plan: Plan, k: u64) -> Result<Bench<'_>> {
    let mut b = Bench {
        a,
        plan,
        k,
        blocks: Vec::new(),
        file: Default::default(),
        memfile: std::fs::File::from(
            beltway::sys::memfd_create("slbench-threading", 0)
                .map_err(|e| err(format!("memfd_create: {e}")))?,
        ),
    };
    let need_blocks = b.selected(Variant::OursMore) || b.selected(Variant::Loop);
    b.blocks = vec![0u8; if need_blocks { k as usize * BLOCK } else { 0 }];
    for (seq, blk) in b.blocks.chunks_exact_mut(BLOCK).enumerate() {
        gen_block(seq as u64, blk);
    }
    b.file = std::path::PathBuf::from(format!("/proc/self/fd/{}", b.memfile.as_raw_fd()));
    if b.selected(Variant::OursMore) {
        b.memfile
            .write_all(&b.blocks)
            .map_err(|e| err(format!("writing the blocks to a memfd: {e}")))?;
    }
    Ok(b)
}

/// One chain length: each selected variant measured, its cell printed as it comes.
fn row(b: &Bench, n: usize) -> Result<Row> {
    let (plan, k) = (&b.plan, b.k);
    let mut row = Row {
        n,
        ours: f64::NAN,
        ours_file: f64::NAN,
        ours_rewrite: f64::NAN,
        unix: f64::NAN,
        single: f64::NAN,
        single_gen: f64::NAN,
        ours_rewrite_cpu: f64::NAN,
        unix_cpu: f64::NAN,
    };
    print!("{n:>3}");
    flush();
    if b.selected(Variant::Ours) {
        row.ours = k as f64
            / plan
                .measure_with(|_| run_ours(&gen_source(k), n, k))?
                .0
                .best();
    }
    print!(" {:>9}", cell(row.ours / 1e6, 3));
    flush();
    if b.selected(Variant::OursMore) || b.selected(Variant::Unix) {
        let (t, cpu) = plan.measure_with(|_| run_ours(&gen_rewrite_source(k), n, k))?;
        row.ours_rewrite = k as f64 / t.best();
        row.ours_rewrite_cpu = cpu / k as f64;
    }
    print!(" {:>9}", cell(row.ours_rewrite / 1e6, 3));
    flush();
    if b.selected(Variant::Unix) {
        let (t, (cpu, out)) = plan.measure_with(|_| {
            let (secs, cpu, out) = run_unix(n, k)?;
            Ok((secs, (cpu, out)))
        })?;
        // run_unix checked every block in order; and ours' counters showed K at the
        // sink: the same blocks out of both, or no ratio.
        if out != k {
            return Err(err(format!(
                "the Unix pipeline delivered {out} blocks where ours delivered {k}: no ratio"
            )));
        }
        row.unix = k as f64 / t.best();
        row.unix_cpu = cpu / k as f64;
    }
    print!(" {:>9}", cell(row.unix / 1e6, 3));
    flush();
    if b.selected(Variant::Loop) {
        row.single = k as f64 / plan.measure(|_| run_loop(n, &b.blocks))?.best();
    }
    print!(" {:>9}", cell(row.single / 1e6, 1));
    flush();
    if b.selected(Variant::OursMore) {
        row.ours_file = k as f64
            / plan
                .measure_with(|_| run_ours(&file_source(&b.file), n, k))?
                .0
                .best();
    }
    print!(" {:>9}", cell(row.ours_file / 1e6, 3));
    flush();
    if b.selected(Variant::Loop) {
        row.single_gen = k as f64 / plan.measure(|_| run_loop_gen(n, k))?.best();
    }
    println!(
        " {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}",
        cell(row.single_gen / 1e6, 3),
        cell(row.ours_rewrite_cpu * 1e9, 1),
        cell(row.unix_cpu * 1e9, 1),
        cell(row.ours_rewrite / row.unix, 2),
        cell(row.unix_cpu / row.ours_rewrite_cpu, 2),
        cell(row.ours / row.single_gen, 3)
    );
    Ok(row)
}

/// The SUMMARY: each row's ratios whose two variants were both measured (see --only).
fn figures(rows: &[Row], k: u64) -> Summary {
    let mut summary = Summary::default();
    for r in rows {
        let (t_unix, t_loop) = if r.n == 10 {
            (Some(Target::AtLeast(100.0)), Some(Target::AtLeast(0.5)))
        } else {
            (None, None)
        };
        let figures = [
            // The headline against the Unix pipeline is CPU: ours runs the chain on one
            // thread, the pipeline on N+1 processes that share this machine's CPUs, so its
            // wall clock gains from cores ours leaves idle (and loses to other load); CPU
            // per block is the work each side does for the same blocks out.
            ("vs_unix_pipeline", r.unix_cpu, r.ours_rewrite_cpu, t_unix, format!("CPU per block: Unix {:.0} ns vs ours/rw {:.0} ns (both write every byte; same {} blocks out); wall: ours/rw {:.3} vs Unix {:.3} Mblk/s", r.unix_cpu * 1e9, r.ours_rewrite_cpu * 1e9, k, r.ours_rewrite / 1e6, r.unix / 1e6)),
            ("vs_unix_pipeline_wall", r.ours_rewrite, r.unix, None, format!("wall clock, blocks/s: ours/rw {:.3} (1 thread) vs Unix {:.3} Mblk/s ({} filter processes + feeder and drain threads)", r.ours_rewrite / 1e6, r.unix / 1e6, r.n)),
            ("vs_single_loop", r.ours, r.single_gen, t_loop, format!("ours {:.1} vs loop+gen {:.1} Mblk/s (same work: gen's blocks, N checks)", r.ours / 1e6, r.single_gen / 1e6)),
            (
                "file_vs_loop_in_memory",
                r.ours_file,
                r.single,
                None,
                format!("ours/file {:.1} vs loop/mem {:.1} Mblk/s (same blocks already in memory); ours/rw vs loop/mem {:.3}", r.ours_file / 1e6, r.single / 1e6, r.ours_rewrite / r.single),
            ),
        ];
        // A figure needs both of its variants measured (see --only).
        for (name, num, den, target, note) in figures {
            if num.is_finite() && den.is_finite() {
                summary.add(
                    &format!("threading_{}_filters_{name}", r.n),
                    num / den,
                    target,
                    note,
                );
            }
        }
    }
    summary
}

/// The hidden `__byte0` mode: one filter process of the Unix pipeline. Reads up to 64 KiB
/// at a time from stdin, checks byte 0 of each whole 1 KiB block it holds, writes the
/// blocks that pass (all of them) to stdout in one write, and keeps a partial block for the
/// next read (a clean end of stream only at a block boundary): buffered I/O, one read and
/// one write per 64 KiB, as a competent user writes a filter.
pub fn byte0_main(a: &Byte0Args) -> Result<()> {
    if let Some(p) = a.parent {
        die_with_parent(p)?;
    }
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut output = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let mut buf = vec![0u8; IO_BUF];
    let mut fill = 0;
    loop {
        let r = match input.read(&mut buf[fill..]) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(err(format!("__byte0: reading: {e}"))),
        };
        if r == 0 {
            if fill != 0 {
                return Err(err(format!(
                    "__byte0: stream ended {fill} bytes into a block"
                )));
            }
            return Ok(());
        }
        fill += r;
        let whole = fill - fill % BLOCK;
        // Keep the blocks that pass, in place (every block passes; a failing one would be
        // squeezed out, so the check has an effect).
        let mut out = 0;
        for at in (0..whole).step_by(BLOCK) {
            if classify(black_box(buf[at])) != 0 {
                if out != at {
                    buf.copy_within(at..at + BLOCK, out);
                }
                out += BLOCK;
            }
        }
        output
            .write_all(&buf[..out])
            .map_err(|e| err(format!("__byte0: writing: {e}")))?;
        buf.copy_within(whole..fill, 0);
        fill -= whole;
    }
}

/// A table cell: the number with `prec` decimals, or `-` when not measured.
fn cell(v: f64, prec: usize) -> String {
    if v.is_finite() {
        format!("{v:.prec$}")
    } else {
        "-".into()
    }
}

fn flush() {
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_moves_every_block_through_the_chain() {
        run_ours(&gen_source(1000), 3, 1000).unwrap();
    }

    #[test]
    fn ours_fails_loudly_when_counts_differ() {
        // `gen count=1000` but 999 expected: the counters disagree.
        assert!(run_ours(&gen_source(1000), 1, 999).is_err());
    }

    /// What `pipeline` writes to its `outfile` (the pipeline text ends with `| outfile`).
    fn run_to_file(pipeline: &str) -> Vec<u8> {
        let dir = crate::util::TempDir::new("threading-test").unwrap();
        let out = dir.path().join("out.bin");
        let text = format!("{pipeline} | outfile {}", out.display());
        let g = lang::parse(&text, &BenchResolver).unwrap();
        let mut space = Space::build(&g, &BenchFactory, 1 << 20).unwrap();
        space.run(&AtomicBool::new(false), |_| {});
        assert!(
            !space.failed() && space.warnings().is_empty(),
            "{text}: {:?}",
            space.warnings()
        );
        drop(space); // flushes the file
        std::fs::read(&out).unwrap()
    }

    /// Over three laps of gen's ring (768 slots of 1088 bytes for 1 KiB blocks), with and without `rewrite=yes`, every
    /// block is the one `gen_block` makes; and with a filter downstream that edits blocks
    /// in place (`xor`), later laps are still right (gen rewrites slots after edits).
    #[test]
    fn gen_blocks_stay_right_over_laps_and_edits() {
        let k = 3000;
        let mut want = vec![0u8; k * BLOCK];
        for (seq, b) in want.chunks_exact_mut(BLOCK).enumerate() {
            gen_block(seq as u64, b);
        }
        assert!(
            run_to_file(&gen_source(k as u64)) == want,
            "gen over three laps"
        );
        assert!(
            run_to_file(&gen_rewrite_source(k as u64)) == want,
            "gen rewrite=yes"
        );
        let xored: Vec<u8> = want.iter().map(|b| b ^ 0x5a).collect();
        assert!(
            run_to_file(&format!("{} | xor key=5a", gen_source(k as u64))) == xored,
            "gen | xor"
        );
        // A size that is no multiple of 512 (no padding between blocks; a lap of 1024 slots,
        // the rest of the ring skipped): over three laps.
        let got = run_to_file("gen count=3500 size=1000");
        assert_eq!(got.len(), 3500 * 1000);
        for (seq, b) in got.chunks_exact(1000).enumerate() {
            let mut w = vec![0u8; 1000];
            gen_block(seq as u64, &mut w);
            assert!(b == w, "size=1000, block {seq}");
        }
    }

    #[test]
    fn loops_do_every_check() {
        let mut blocks = vec![0u8; 16 * BLOCK];
        for (seq, b) in blocks.chunks_exact_mut(BLOCK).enumerate() {
            gen_block(seq as u64, b);
        }
        run_loop(4, &blocks).unwrap();
        run_loop_gen(4, 16).unwrap();
        assert_eq!(checks(3, &blocks[BLOCK..2 * BLOCK]), 3 * 2); // byte 0 of block 1 is odd
    }
}
