//! `streamline-bench pipesfs`: PipesFS as the control and inspection plane (issue 16).
//!
//! Starts its own `streamlined` with PipesFS mounted in a scratch directory (root only: the
//! daemon mounts FUSE and its workers take their client's identity).
//!
//! 1. Reading a stream: `gen count=... size=SIZE | count name=c` runs detached through the
//!    daemon, and a reader reads as fast as it can for a few seconds, two ways, alternating
//!    rounds:
//!    - PipesFS: `read(2)` of `RUN/gen/count:c/all` with `cat`'s 128 KiB buffer (FUSE,
//!      direct I/O: every byte is copied from the tap's ring into the reply, then by the
//!      kernel into the reader's buffer). The tap is lossy: the run never waits for it, so
//!      this measures what the reader gets.
//!    - The ring descriptors: the same node exported (`export=yes`), its rings asked of
//!      the daemon (`open_stream`, the descriptors of both rings), read in place by a
//!      `beltway::IbufReader`, every cache line of each block touched (as cat's write
//!      would read them): as an observer (only the data segments: lossy, like the
//!      PipesFS reader, the headline) and registered (lossless: the run waits for it).
//!
//!    The headline is the ratio of the median throughputs (bytes per second) of `cat all`
//!    and the observer.
//! 2. Edit latency: `mkdir RUN/gen/count:c/'sample every=2'` on a running graph, timed
//!    from the call to its return (the daemon's edit transaction, applied by the run at a
//!    batch boundary), then `rmdir`; the median over the rounds.

use crate::proc::kill_with_us;
use crate::streamlined::{euid, Daemon};
use crate::util::median;
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use beltway::{BufTable, IbufReader, RingRef, Start};
use daemon::proto::{Reply, Request};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Alternating rounds of the read comparison (default 5, with --quick 2).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each reader reads per round (default 2, with --quick 0.5).
    #[arg(long)]
    secs: Option<f64>,
    /// Block size of the stream, in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// mkdir/rmdir pairs timed (default 41, with --quick 9).
    #[arg(long)]
    edits: Option<usize>,
}

struct Setup {
    streamline: PathBuf,
    daemon: Daemon,
    mount: PathBuf,
}

impl Setup {
    /// Start `pipeline` detached through our daemon; its run id.
    fn detach(&self, pipeline: &str) -> Result<u64> {
        let mut cmd = Command::new(&self.streamline);
        cmd.env("STREAMLINE_SOCKET", &self.daemon.socket).args([
            "run",
            "--detach",
            "--no-share",
            "--plan",
            "none",
            pipeline,
        ]);
        kill_with_us(&mut cmd);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(format!("starting streamline run --detach: {e}")))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| {
                err(format!(
                    "`streamline run --detach '{pipeline}'` printed no run id ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            })
    }

    fn stop(&self, run: u64) -> Result<()> {
        let mut c = self.daemon.client()?;
        let _ = c.call(Request::Stop { run, signal: 0 });
        crate::streamlined::wait_end(&mut c, run).map(|_| ())
    }

    /// A path of the run's tree, once the daemon shows it.
    fn wait_path(&self, p: &Path) -> Result<()> {
        let t0 = Instant::now();
        while !p.exists() {
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(err(format!(
                    "{} did not appear within 20 s; the daemon's log:\n{}",
                    p.display(),
                    self.daemon.log_text()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// Bytes per second a reader of `all` gets in `secs`.
fn read_fs(s: &Setup, size: usize, secs: f64) -> Result<f64> {
    let run = s.detach(&format!("gen count=100G size={size} | count name=c"))?;
    let all = s.mount.join(run.to_string()).join("gen/count:c/all");
    s.wait_path(&all)?;
    let res = (|| {
        let mut f =
            std::fs::File::open(&all).map_err(|e| err(format!("{}: {e}", all.display())))?;
        let mut buf = vec![0u8; 128 << 10];
        // Warm up: the tap goes on at open; skip the first reads.
        for _ in 0..16 {
            f.read(&mut buf)
                .map_err(|e| err(format!("reading {}: {e}", all.display())))?;
        }
        let t0 = Instant::now();
        let mut bytes = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            let n = f
                .read(&mut buf)
                .map_err(|e| err(format!("reading {}: {e}", all.display())))?;
            if n == 0 {
                return Err(err(format!("{} ended early", all.display())));
            }
            bytes += n as u64;
        }
        let rate = bytes as f64 / t0.elapsed().as_secs_f64();
        // What the reader was given and lost (it never holds the run back).
        let stats = std::fs::read_to_string(all.with_file_name(".stats")).unwrap_or_default();
        let get = |k: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map_or("?".to_string(), |v| v.trim().to_string())
        };
        let (blocks, delivered, lost) = (
            get("blocks_in "),
            get("readers_delivered "),
            get("readers_lost "),
        );
        println!("  cat all: the node took {blocks} blocks; its reader was given {delivered} and lost {lost} (the run never waits for it)");
        Ok(rate)
    })();
    s.stop(run)?;
    res
}

/// Bytes per second a reader of the exported rings gets in `secs`, reading each block in
/// place and touching every cache line of it: registered (lossless: the run waits for it)
/// or, with `observer`, given only the data segments (lossy, like a PipesFS reader: it
/// skips what was overwritten).
fn read_ring(s: &Setup, size: usize, secs: f64, observer: bool) -> Result<f64> {
    let run = s.detach(&format!(
        "gen count=100G size={size} | count name=c export=yes"
    ))?;
    s.wait_path(&s.mount.join(run.to_string()).join("gen/count:c"))?;
    let res = (|| {
        let mut c = s.daemon.client()?;
        let (reply, fds) = c
            .call_fds(Request::OpenStream { name: "c".into() }, &[])
            .map_err(|e| err(format!("open_stream c: {e}")))?;
        if !matches!(reply, Reply::Stream { fds: 4, .. }) || fds.len() != 4 {
            return Err(err(format!(
                "open_stream c: expected the 4 descriptors of an owner, got {reply:?} with {}",
                fds.len()
            )));
        }
        let mut it = fds.into_iter();
        let mut next = || it.next().expect("4 descriptors");
        let (t, tc, d, dc) = (next(), next(), next(), next());
        let (tc, dc) = if observer {
            (None, None)
        } else {
            (Some(tc), Some(dc))
        };
        let tags = RingRef::from_fds("c", t, tc).map_err(|e| err(format!("tag ring: {e}")))?;
        let data =
            RingRef::from_fds("c.data", d, dc).map_err(|e| err(format!("data ring: {e}")))?;
        let mut table = BufTable::new();
        table.register(&data).map_err(|e| err(format!("{e}")))?;
        let mut r = IbufReader::new(
            tags.reader(Start::Latest)
                .map_err(|e| err(format!("{e}")))?,
            table,
        )
        .map_err(|e| err(format!("{e}")))?;
        let mut sum = 0u64;
        let mut lost = 0u64;
        let mut block = |r: &mut IbufReader| -> Result<usize> {
            let n = match r.peek_acquire() {
                Ok(Some((_, p))) => {
                    sum = p
                        .data
                        .iter()
                        .step_by(64)
                        .fold(sum, |a, b| a.wrapping_add(*b as u64));
                    p.data.len()
                }
                Ok(None) => return Err(err("the exported stream ended early")),
                Err(_) if observer => {
                    lost += 1;
                    return Ok(0);
                }
                Err(e) => return Err(err(format!("reading the ring: {e}"))),
            };
            match r.peek_complete() {
                Ok(()) => Ok(n),
                Err(_) if observer => {
                    lost += 1;
                    Ok(0)
                }
                Err(e) => Err(err(format!("{e}"))),
            }
        };
        for _ in 0..10_000 {
            block(&mut r)?;
        }
        let t0 = Instant::now();
        let mut bytes = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            for _ in 0..256 {
                bytes += block(&mut r)? as u64;
            }
        }
        std::hint::black_box(sum);
        Ok(bytes as f64 / t0.elapsed().as_secs_f64())
    })();
    s.stop(run)?;
    res
}

/// Milliseconds of each `mkdir` that adds a filter to a running graph.
fn edit_latency(s: &Setup, n: usize) -> Result<Vec<f64>> {
    let run = s.detach("gen count=100G size=64 | count name=c")?;
    let dir = s.mount.join(run.to_string()).join("gen/count:c");
    s.wait_path(&dir)?;
    let res = (|| {
        let mut ms = Vec::new();
        for k in 0..n {
            // Each instance gets a name of its own (a label is never given twice in a run).
            let t0 = Instant::now();
            std::fs::create_dir(dir.join(format!("sample every=2 name=s{k}"))).map_err(|e| {
                err(format!(
                    "mkdir {}/'sample every=2 name=s{k}': {e}; the daemon's log:\n{}",
                    dir.display(),
                    s.daemon.log_text()
                ))
            })?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
            std::fs::remove_dir(dir.join(format!("sample:s{k}")))
                .map_err(|e| err(format!("rmdir {}/sample:s{k}: {e}", dir.display())))?;
        }
        Ok(ms)
    })();
    s.stop(run)?;
    res
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(10 * 60)
    });
    let rounds = a.rounds.unwrap_or(if quick { 2 } else { 5 }).max(1);
    let secs = a.secs.unwrap_or(if quick { 0.5 } else { 2.0 });
    let n_edits = a.edits.unwrap_or(if quick { 9 } else { 41 }).max(1);
    let uid = euid()?;
    if uid != 0 {
        return Err(err(format!("this benchmark must run as root (effective uid is {uid}): it mounts PipesFS (FUSE) and starts its own streamlined")));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(err("/dev/fuse is missing: PipesFS needs FUSE"));
    }
    let (streamlined, streamline) = crate::streamlined::binaries()?;
    println!(
        "streamline-bench pipesfs ({} mode)",
        if quick { "quick" } else { "full" }
    );
    let dir = TempDir::new("pipesfs")?;
    let mount = dir.path().join("pipes");
    cleanup_on_abnormal_exit(&[
        &dir.path().join("control"),
        &dir.path().join("streamlined.log"),
        dir.path(),
    ]);
    let daemon = Daemon::start(&streamlined, dir.path(), Some(&mount))?;
    println!(
        "our daemon: {} --mount {} (pid {})",
        streamlined.display(),
        mount.display(),
        daemon.child.as_ref().map_or(0, |c| c.id())
    );
    let s = Setup {
        streamline,
        daemon,
        mount,
    };
    let res = (|| -> Result<Summary> {
        let (mut fs, mut ring, mut lossless) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..rounds {
            let f = read_fs(&s, a.size, secs)?;
            let r = read_ring(&s, a.size, secs, true)?;
            let l = read_ring(&s, a.size, secs, false)?;
            println!("round {k}: cat all {:.0} MB/s; ring descriptors: observer {:.0} MB/s, registered {:.0} MB/s ({} B blocks)", f / 1e6, r / 1e6, l / 1e6, a.size);
            fs.push(f);
            ring.push(r);
            lossless.push(l);
        }
        let (f, r, l) = (median(&mut fs), median(&mut ring), median(&mut lossless));
        let mut ms = edit_latency(&s, n_edits)?;
        let (lo, hi) = (
            ms.iter().cloned().fold(f64::MAX, f64::min),
            ms.iter().cloned().fold(0.0, f64::max),
        );
        let med = median(&mut ms);
        println!("mkdir adding a filter to a running graph: median {med:.2} ms (min {lo:.2}, max {hi:.2}, {n_edits} times)");
        let mut summary = Summary::default();
        summary.add("pipesfs_read_vs_ring_fd", f / r, Some(Target::AtLeast(0.3)), format!("median of {rounds} rounds: cat all {:.0} MB/s vs an observer of the ring descriptors {:.0} MB/s (both lossy), {} B blocks", f / 1e6, r / 1e6, a.size));
        summary.add(
            "pipesfs_read_vs_ring_fd_lossless",
            f / l,
            None,
            format!(
                "cat all vs a registered (lossless) reader of the rings, {:.0} MB/s",
                l / 1e6
            ),
        );
        summary.add(
            "pipesfs_read_MBps",
            f / 1e6,
            None,
            "read(2) of all, 128 KiB buffer",
        );
        summary.add(
            "ring_fd_read_MBps",
            r / 1e6,
            None,
            "IbufReader observer over the exported rings",
        );
        summary.add(
            "pipesfs_edit_ms",
            med,
            None,
            format!("median mkdir of a filter into a running graph, {n_edits} times"),
        );
        Ok(summary)
    })();
    match res {
        Ok(summary) => {
            summary.print()?;
            Ok(())
        }
        Err(e) => Err(err(format!(
            "{e}\nour daemon's log ({}):\n{}",
            s.daemon.log.display(),
            s.daemon.log_text().trim()
        ))),
    }
}
