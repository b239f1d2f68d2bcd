//! The `pcap` subcommand: read a large capture, keep TCP packets to port 80, count them;
//! the `streamline` command against `tcpdump`.
//!
//! - The capture: `examples/sample.pcap` (real traffic, Ethernet: HTTP, DNS, ICMP, iperf3,
//!   IPv4 and IPv6, a quarter of the frames under 70 bytes, half 1242-1514) repeated, packets and timestamps kept (each
//!   repetition shifted past the previous one), written with `pcap-file` into a scratch
//!   directory that is removed at the end. Its size is picked from the machine
//!   ([`pick_size`]): as large as makes `tcpdump -w /dev/null` spend about
//!   [`PEER_CPU_GOAL`] seconds of CPU, within what the page cache and the disk hold
//!   comfortably (20 MB with --quick; `--mb` sets it).
//! - Ours, two ways, both the real `target/release/streamline` next to this binary:
//!   `pcapin file=BIG | bpf "tcp dst port 80" | count` (the peer's own expression, compiled
//!   by libpcap, run by our interpreter: the headline) and
//!   `pcapin file=BIG | tcp | dport |80 count` (our protocol filters, which parse each
//!   frame). Each `count: N blocks` line must equal the number of packets
//!   `tcpdump -r BIG 'tcp dst port 80' -w MATCHES` writes (computed once, on the warm-up
//!   run, by reading MATCHES back).
//! - Peer, two ways: `tcpdump -r BIG 'tcp dst port 80' -w /dev/null` (issue 35's
//!   `pcap_count_cpu_vs_tcpdump`: the matches written, nothing printed) and
//!   `tcpdump -r BIG --count 'tcp dst port 80'` (prints only the number of matches, as ours
//!   does; `pcap_count_vs_tcpdump`): its `N packets` line is checked every run.
//!
//! All are measured as whole commands, each run once first so the file is in the page
//! cache for all; then alternately, best of `reps`. Two measures: CPU time (user + system
//! of the whole command and every process it waited for, from `RUSAGE_CHILDREN`) and wall
//! clock (start to exit). The headline is CPU: ours reads the file on one thread and
//! filters on another, tcpdump does both on one, so on a machine with a spare core wall
//! clock credits ours with a second CPU; CPU time is the work each does for the same count
//! (the wall-clock ratio is printed beside it, `..._wall`).

use crate::proc::{children_cpu_secs, kill_with_us};
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir, MIB};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The BPF expression of the peer and the meaning of our pipeline.
const FILTER: &str = "tcp dst port 80";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed runs of each command (the fastest counts); ignored with --quick (1).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// The capture to repeat.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap"))]
    sample: PathBuf,
    /// Size of the large capture in MB (10^6 bytes); default 500, with --quick 20.
    #[arg(long)]
    mb: Option<u64>,
}

/// The large capture as written.
pub(crate) struct Big {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    pub(crate) packets: u64,
    pub(crate) repeats: u64,
}

/// Write `sample` repeated until the file holds at least `target` bytes.
pub(crate) fn build_capture(sample: &Path, path: &Path, target: u64) -> Result<Big> {
    let f = std::fs::File::open(sample)
        .map_err(|e| err(format!("opening {}: {e}", sample.display())))?;
    let mut r = PcapReader::new(std::io::BufReader::new(f))
        .map_err(|e| err(format!("{}: {e}", sample.display())))?;
    let header = r.header();
    let mut pkts: Vec<PcapPacket<'static>> = Vec::new();
    while let Some(p) = r.next_packet() {
        pkts.push(
            p.map_err(|e| err(format!("{}: {e}", sample.display())))?
                .into_owned(),
        );
    }
    if pkts.is_empty() {
        return Err(err(format!("{} holds no packets", sample.display())));
    }
    let first = pkts.iter().map(|p| p.timestamp).min().expect("non-empty");
    let last = pkts.iter().map(|p| p.timestamp).max().expect("non-empty");
    // Each repetition starts one second after the previous one ended.
    let shift = last - first + Duration::from_secs(1);
    let out = std::fs::File::create(path)
        .map_err(|e| err(format!("creating {}: {e}", path.display())))?;
    let mut w = PcapWriter::with_header(std::io::BufWriter::with_capacity(MIB, out), header)
        .map_err(|e| err(format!("writing {}: {e}", path.display())))?;
    let mut bytes = 24u64; // the file header
    let (mut packets, mut repeats) = (0u64, 0u64);
    while bytes < target {
        for p in &pkts {
            let q = PcapPacket::new(p.timestamp + shift * repeats as u32, p.orig_len, &p.data);
            bytes += w
                .write_packet(&q)
                .map_err(|e| err(format!("writing {}: {e}", path.display())))?
                as u64;
            packets += 1;
        }
        repeats += 1;
    }
    use std::io::Write;
    let mut out = w.into_writer();
    out.flush()
        .map_err(|e| err(format!("writing {}: {e}", path.display())))?;
    // The pages just written sit in the page cache as written (small folios, in this
    // kernel); a capture a user analyses usually comes from disk, and readahead brings it
    // in as large folios, which both tools map or copy faster. Drop the written pages, so
    // the file is read back as from disk (by `read_once`, before any command is timed).
    let file = out
        .into_inner()
        .map_err(|e| err(format!("writing {}: {e}", path.display())))?;
    crate::proc::drop_from_page_cache(&file)
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
    let on_disk = std::fs::metadata(path)?.len();
    if on_disk != bytes {
        return Err(err(format!(
            "{}: wrote {bytes} bytes but the file has {on_disk}",
            path.display()
        )));
    }
    Ok(Big {
        path: path.to_path_buf(),
        bytes,
        packets,
        repeats,
    })
}

/// An executable on PATH.
fn find_on_path(name: &str) -> Option<PathBuf> {
    lang::PathResolver::find(name)
}

/// Wall-clock and CPU seconds of one whole command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cost {
    pub(crate) wall: f64,
    /// User + system of the command and the processes it waited for.
    pub(crate) cpu: f64,
}

impl Cost {
    /// The least CPU and the least wall-clock time of several runs of one command (each
    /// taken on its own: the best of each, as the benchmarks report them).
    pub(crate) fn best(v: &[Cost]) -> Cost {
        let cpu = v.iter().map(|c| c.cpu).fold(f64::INFINITY, f64::min);
        let wall = v.iter().map(|c| c.wall).fold(f64::INFINITY, f64::min);
        Cost { cpu, wall }
    }

    /// (CPU, wall) seconds.
    pub(crate) fn pair(self) -> (f64, f64) {
        (self.cpu, self.wall)
    }
}

/// Run `cmd` to completion (killed if we die), timed; fail unless it exits 0. This
/// process must have no other child that ends meanwhile (the CPU is the growth of
/// `RUSAGE_CHILDREN` across the wait).
pub(crate) fn timed(cmd: &mut Command, what: &str) -> Result<(Cost, Output)> {
    kill_with_us(cmd);
    let c0 = children_cpu_secs();
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(format!("starting {what}: {e}")))?;
    let secs = t0.elapsed().as_secs_f64();
    let cost = Cost {
        wall: secs,
        cpu: children_cpu_secs() - c0,
    };
    if !out.status.success() {
        return Err(err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok((cost, out))
}

/// The tools and the file, with the commands built the same way every time.
struct Setup<'a> {
    streamline: PathBuf,
    tcpdump: PathBuf,
    big: &'a Big,
    expected: u64,
}

/// Our two ways to say the peer's filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ours {
    /// The same pcap-filter expression as the peer, through `bpf` (libpcap's compiler,
    /// our interpreter).
    Bpf,
    /// The native protocol filters: `tcp | dport |80`.
    Protocol,
}

impl Setup<'_> {
    fn pipeline(&self, which: Ours) -> String {
        match which {
            Ours::Bpf => format!(
                "pcapin file={} | bpf \"{FILTER}\" | count",
                self.big.path.display()
            ),
            Ours::Protocol => format!(
                "pcapin file={} | tcp | dport |80 count",
                self.big.path.display()
            ),
        }
    }

    /// Ours: the whole `streamline run -q ...` command (without `-q` when `table`, to see
    /// the per-filter table); checks the count it prints. Returns the cost and its stderr.
    fn ours(&self, which: Ours, table: bool) -> Result<(Cost, String)> {
        let text = self.pipeline(which);
        let q = if table { "" } else { " -q" };
        let what = format!("`streamline run{q} '{text}'`");
        let mut cmd = Command::new(&self.streamline);
        cmd.args(["--socket", "none", "run"]);
        if !table {
            cmd.arg("-q");
        }
        let (secs, out) = timed(cmd.arg(&text).stdout(Stdio::null()), &what)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let count = stderr
            .lines()
            .find_map(|l| {
                l.strip_prefix("count: ")?
                    .split_once(" blocks")?
                    .0
                    .parse::<u64>()
                    .ok()
            })
            .ok_or_else(|| {
                err(format!(
                    "{what} printed no `count: N blocks` line; its stderr:\n{stderr}"
                ))
            })?;
        if count != self.expected {
            return Err(err(format!(
                "{what} counted {count} packets where `tcpdump -r BIG '{FILTER}' -w` writes {}: the results differ",
                self.expected
            )));
        }
        if let Some(w) = stderr.lines().find(|l| l.starts_with("warning:")) {
            return Err(err(format!("{what}: {w}")));
        }
        Ok((secs, stderr.into_owned()))
    }

    /// The peer, `how` it is asked: checks the count it prints (`--count`); exit 0 for
    /// `-w /dev/null` (whose count is checked on the warm-up run, [`matches_written`]).
    fn tcpdump(&self, how: Peer) -> Result<Cost> {
        let mut cmd = Command::new(&self.tcpdump);
        cmd.arg("-r").arg(&self.big.path);
        match how {
            Peer::Count => cmd.args(["--count", FILTER]),
            Peer::WriteNull => cmd.args([FILTER, "-w", "/dev/null"]),
        };
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let what = format!("`{}`", how.command(&self.big.path));
        let (cost, out) = timed(&mut cmd, &what)?;
        if how == Peer::WriteNull {
            return Ok(cost);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let count = stdout
            .lines()
            .find_map(|l| l.strip_suffix(" packets")?.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                err(format!(
                    "{what} printed no `N packets` line; its output:\n{stdout}"
                ))
            })?;
        if count != self.expected {
            return Err(err(format!(
                "{what} counted {count} packets where `tcpdump -r BIG '{FILTER}' -w` writes {}: the results differ",
                self.expected
            )));
        }
        Ok(cost)
    }
}

/// How the peer is asked for the matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// `tcpdump -r BIG EXPR -w /dev/null`: issue 35's peer (the matches written, nothing
    /// printed).
    WriteNull,
    /// `tcpdump -r BIG --count EXPR`: prints only the number of matches.
    Count,
}

impl Peer {
    fn command(self, big: &Path) -> String {
        match self {
            Peer::WriteNull => format!("tcpdump -r {} '{FILTER}' -w /dev/null", big.display()),
            Peer::Count => format!("tcpdump -r {} --count '{FILTER}'", big.display()),
        }
    }
}

/// The warm-up run of the peer, `tcpdump -r BIG EXPR -w out` into `dir`, untimed: the
/// packets it writes (read back from `out`, which is then removed) are the count every run
/// must reach.
fn matches_written(tcpdump: &Path, big: &Path, dir: &Path) -> Result<u64> {
    let out = dir.join("matches.pcap");
    let mut cmd = Command::new(tcpdump);
    cmd.arg("-r")
        .arg(big)
        .arg(FILTER)
        .arg("-w")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    timed(
        &mut cmd,
        "`tcpdump -r BIG EXPR -w MATCHES` (the count to check)",
    )?;
    let f =
        std::fs::File::open(&out).map_err(|e| err(format!("opening {}: {e}", out.display())))?;
    let mut r = PcapReader::new(std::io::BufReader::with_capacity(MIB, f))
        .map_err(|e| err(format!("{}: {e}", out.display())))?;
    let mut n = 0u64;
    while let Some(p) = r.next_packet() {
        p.map_err(|e| err(format!("{}: {e}", out.display())))?;
        n += 1;
    }
    std::fs::remove_file(&out).map_err(|e| err(format!("removing {}: {e}", out.display())))?;
    Ok(n)
}

/// CPU seconds the peer should spend on the capture: long enough that both commands' fixed
/// costs (starting, mapping, compiling the filter) are small beside the per-packet work.
const PEER_CPU_GOAL: f64 = 2.5;
/// The size of the first capture, the one `pick_size` times the peer on.
const PROBE_BYTES: u64 = 256_000_000;

/// The capture's size, picked from the machine: `tcpdump -w /dev/null` timed (warm, the
/// faster of two) on a [`PROBE_BYTES`] capture, scaled to [`PEER_CPU_GOAL`]; at most a
/// quarter of the memory available (the page cache must keep the whole file between runs)
/// and of the free space of `dir`, at least the probe. Returns the size and why.
fn pick_size(tcpdump: &Path, probe: &Big, dir: &Path) -> Result<(u64, String)> {
    let mut cpu = f64::INFINITY;
    for _ in 0..2 {
        let mut cmd = Command::new(tcpdump);
        cmd.arg("-r")
            .arg(&probe.path)
            .args([FILTER, "-w", "/dev/null"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cpu = cpu.min(
            timed(&mut cmd, "`tcpdump -w /dev/null` on the probe capture")?
                .0
                .cpu,
        );
    }
    let per_byte = cpu.max(1e-3) / probe.bytes as f64;
    let want = (PEER_CPU_GOAL / per_byte) as u64;
    let mem = crate::proc::mem_available()?;
    let disk = crate::proc::free_space(dir)?;
    let cap = (mem / 4).min(disk / 4);
    let size = want.min(cap).max(probe.bytes);
    let why = format!(
        "tcpdump -w /dev/null: {cpu:.3} s CPU on {:.0} MB -> {:.0} MB for {PEER_CPU_GOAL} s; \
         cap {:.0} MB (a quarter of {:.0} MB available memory, {:.0} MB free disk)",
        probe.bytes as f64 / 1e6,
        want as f64 / 1e6,
        cap as f64 / 1e6,
        mem as f64 / 1e6,
        disk as f64 / 1e6
    );
    Ok((size, why))
}

/// Timed runs of every command, alternating, after one untimed run of each.
struct Measured {
    bpf: Vec<Cost>,
    proto: Vec<Cost>,
    count: Vec<Cost>,
    null: Vec<Cost>,
    /// stderr of ours' warm-up runs without -q (the per-filter tables).
    tables: String,
}

fn measure(s: &Setup<'_>, reps: usize) -> Result<Measured> {
    // Warm-up: every command reads the whole file once. Ours without -q, for the tables.
    let (_, table_bpf) = s.ours(Ours::Bpf, true)?;
    let (_, table_proto) = s.ours(Ours::Protocol, true)?;
    s.tcpdump(Peer::Count)?;
    s.tcpdump(Peer::WriteNull)?;
    let mut m = Measured {
        bpf: Vec::new(),
        proto: Vec::new(),
        count: Vec::new(),
        null: Vec::new(),
        tables: table_bpf + &table_proto,
    };
    for _ in 0..reps {
        m.bpf.push(s.ours(Ours::Bpf, false)?.0);
        m.null.push(s.tcpdump(Peer::WriteNull)?);
        m.proto.push(s.ours(Ours::Protocol, false)?.0);
        m.count.push(s.tcpdump(Peer::Count)?);
    }
    Ok(m)
}

/// Write the capture: `mb` if given, 20 MB with --quick, else [`pick_size`]'s choice.
fn capture(a: &Args, quick: bool, sample: &Path, tcpdump: &Path, dir: &Path) -> Result<Big> {
    let path = dir.join("big.pcap");
    let t0 = Instant::now();
    let big = match a.mb {
        Some(mb) => build_capture(sample, &path, mb * 1_000_000)?,
        None if quick => build_capture(sample, &path, 20_000_000)?,
        None => {
            let probe = build_capture(sample, &path, PROBE_BYTES)?;
            let (size, why) = pick_size(tcpdump, &probe, dir)?;
            println!("size: {why}");
            if size > probe.bytes {
                build_capture(sample, &path, size)?
            } else {
                probe
            }
        }
    };
    read_once(&big.path)?;
    println!(
        "capture: {} = {} x {} ({} packets, {:.1} MB), written and read once in {:.1} s",
        big.path.display(),
        big.repeats,
        sample.display(),
        big.packets,
        big.bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    Ok(big)
}

/// Read the whole file once with read(2), as `cat` does: the page cache then holds it as
/// any sequential reader leaves it (readahead's folios), the same for ours and the peer,
/// before either runs.
fn read_once(path: &Path) -> Result<()> {
    let mut f =
        std::fs::File::open(path).map_err(|e| err(format!("opening {}: {e}", path.display())))?;
    use std::io::Read;
    let mut buf = vec![0u8; MIB];
    while f
        .read(&mut buf)
        .map_err(|e| err(format!("reading {}: {e}", path.display())))?
        > 0
    {}
    Ok(())
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(20 * 60)
    });
    let reps = if quick { 1 } else { a.reps.max(1) };
    let tcpdump = find_on_path("tcpdump")
        .ok_or_else(|| err("tcpdump is not installed (not found on PATH); install it, e.g. `apt-get install tcpdump`"))?;
    let streamline = crate::capture::streamline()?;
    let sample = std::fs::canonicalize(&a.sample).map_err(|e| {
        err(format!(
            "sample capture {}: {e} (give one with --sample)",
            a.sample.display()
        ))
    })?;
    println!(
        "streamline-bench pcap ({} mode)",
        if quick { "quick" } else { "full" }
    );
    println!("\n== Reading a large capture: `{FILTER}`, count (ours vs tcpdump) ==");
    let dir = TempDir::new("pcap")?;
    let big_path = dir.path().join("big.pcap");
    let matches_path = dir.path().join("matches.pcap");
    cleanup_on_abnormal_exit(&[&big_path, &matches_path, dir.path()]);
    let big = capture(a, quick, &sample, &tcpdump, dir.path())?;
    let expected = matches_written(&tcpdump, &big.path, dir.path())?;
    if expected == 0 {
        return Err(err(format!(
            "tcpdump matches no packet of {} with '{FILTER}': nothing to compare",
            big.path.display()
        )));
    }
    let s = Setup {
        streamline,
        tcpdump,
        big: &big,
        expected,
    };
    for (who, line) in [
        (
            "ours (same expression)",
            format!(
                "{} run -q '{}'",
                s.streamline.display(),
                s.pipeline(Ours::Bpf)
            ),
        ),
        (
            "ours (protocol filters)",
            format!(
                "{} run -q '{}'",
                s.streamline.display(),
                s.pipeline(Ours::Protocol)
            ),
        ),
        (
            "peer (issue 35)",
            format!("{} -r BIG '{FILTER}' -w /dev/null", s.tcpdump.display()),
        ),
        (
            "peer (counting)",
            format!("{} -r BIG --count '{FILTER}'", s.tcpdump.display()),
        ),
    ] {
        println!("{who}: {line}");
    }
    println!(
        "matching packets: {expected} of {} ({:.1}%; what `tcpdump -r BIG '{FILTER}' -w MATCHES` writes; every run's count, ours and `tcpdump --count`'s, checked against it)",
        big.packets,
        100.0 * expected as f64 / big.packets as f64
    );
    println!("CPU (user+sys, the whole command and its children) and wall clock of each whole command; one untimed run of each first (page cache warm for all), then best of {reps} of each, alternating");
    let m = measure(&s, reps)?;
    report(&big, &m)
}

/// The table of runs, where our time goes, and the headline figures.
fn report(big: &Big, m: &Measured) -> Result<()> {
    let best = |v: &[Cost], f: fn(&Cost) -> f64| v.iter().map(f).fold(f64::INFINITY, f64::min);
    let wall = |c: &Cost| c.wall;
    let cpu = |c: &Cost| c.cpu;
    let (b, o, p, n) = (
        best(&m.bpf, wall),
        best(&m.proto, wall),
        best(&m.count, wall),
        best(&m.null, wall),
    );
    let (bc, oc, pc, nc) = (
        best(&m.bpf, cpu),
        best(&m.proto, cpu),
        best(&m.count, cpu),
        best(&m.null, cpu),
    );
    let runs = |v: &[Cost]| {
        v.iter()
            .map(|x| format!("{:.3}/{:.3}", x.cpu, x.wall))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "{:<26} {:>9} {:>9} {:>12} {:>9}   runs (CPU s/wall s)",
        "", "best CPU", "best wall", "Mpackets/s", "MB/s"
    );
    for (name, c, t, v) in [
        ("streamline bpf", bc, b, &m.bpf),
        ("streamline tcp|dport", oc, o, &m.proto),
        ("tcpdump -w /dev/null", nc, n, &m.null),
        ("tcpdump --count", pc, p, &m.count),
    ] {
        println!(
            "{name:<26} {c:>9.3} {t:>9.3} {:>12.3} {:>9.0}   {}",
            big.packets as f64 / t / 1e6,
            big.bytes as f64 / t / 1e6,
            runs(v)
        );
    }
    println!("where our time goes: the per-filter tables of the warm-up runs (`streamline run` without -q):");
    for l in m.tables.lines().filter(|l| !l.starts_with("count:")) {
        println!("  {l}");
    }
    let mb = big.bytes as f64 / 1e6;
    let mut summary = Summary::default();
    summary.add(
        "pcap_count_cpu_vs_tcpdump",
        nc / bc,
        Some(Target::AtLeast(2.0)),
        format!("CPU (user+sys), the same expression, the same count: tcpdump -w /dev/null {nc:.3} s / ours (bpf, 2 threads) {bc:.3} s, {mb:.0} MB"),
    );
    summary.add(
        "pcap_count_vs_tcpdump",
        pc / bc,
        Some(Target::AtLeast(2.0)),
        format!("CPU (user+sys), the same count: tcpdump --count {pc:.3} s / ours (bpf) {bc:.3} s"),
    );
    summary.add(
        "pcap_count_vs_tcpdump_wall",
        p / b,
        None,
        format!(
            "wall clock: tcpdump --count {p:.3} s (1 thread) / ours (bpf) {b:.3} s (2 threads)"
        ),
    );
    summary.add(
        "pcap_count_protocol_filters_vs_tcpdump",
        pc / oc,
        None,
        format!("CPU, tcp | dport |80: tcpdump --count {pc:.3} s / ours {oc:.3} s (wall {p:.3} / {o:.3} s)"),
    );
    summary.print()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_capture_repeats_the_sample_with_shifted_timestamps() {
        let sample = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../examples/sample.pcap"
        ));
        let dir = TempDir::new("pcap-test").unwrap();
        let size = std::fs::metadata(sample).unwrap().len();
        let big = build_capture(sample, &dir.path().join("big.pcap"), size + 1).unwrap();
        assert_eq!(big.repeats, 2);
        let read = |p: &Path| {
            let mut r = PcapReader::new(std::fs::File::open(p).unwrap()).unwrap();
            let mut v = Vec::new();
            while let Some(p) = r.next_packet() {
                v.push(p.unwrap().into_owned());
            }
            (r.header(), v)
        };
        let (h0, orig) = read(sample);
        let (h1, copy) = read(&big.path);
        assert_eq!(
            (h0.datalink, h0.snaplen, h0.ts_resolution),
            (h1.datalink, h1.snaplen, h1.ts_resolution)
        );
        assert_eq!(copy.len(), 2 * orig.len());
        assert_eq!(big.packets, copy.len() as u64);
        let (second, first) = (&copy[orig.len()..], &copy[..orig.len()]);
        let latest = orig.iter().map(|p| p.timestamp).max().unwrap();
        for ((a, b), o) in first.iter().zip(second).zip(&orig) {
            assert_eq!(
                (&a.data, a.orig_len, a.timestamp),
                (&o.data, o.orig_len, o.timestamp)
            );
            assert_eq!((&b.data, b.orig_len), (&o.data, o.orig_len));
            assert!(b.timestamp > latest);
        }
    }
}
