//! The `legacy-pipes` subcommand (issue 18; thesis Fig. 7.1: pipes 4-9x faster than
//! Linux's): the same unmodified programs through the kernel's pipes and through
//! Streamline's (`streamline exec`, the preload library), side by side in one run.
//!
//! - A `dd`-style writer/reader pair (two small C programs compiled here with `cc`: the
//!   writer `write`s COUNT blocks of SIZE bytes to stdout, the reader `read`s SIZE-byte
//!   buffers from stdin until end of file; no other system call per block, so what is
//!   measured is the pipe) at 64 B, 1 KiB and 64 KiB blocks.
//! - `cat FILE | wc -c` on a file in the page cache (coreutils as shipped).
//! - The Rust API's own pipe (beltway::api::pipe, writer and reader threads) at 1 KiB, to
//!   show what interposition costs.
//!
//! The volume per configuration comes from the machine: a short kernel-pipe run measures
//! its rate, and each configuration then moves what the kernel pipe moves in `--secs`.
//! Each configuration runs `--reps` times, configurations taking turns; medians count.
//! Figures are throughput ratios (wall time of the same transfer).

use crate::capture::streamline;
use crate::util::{err, median, Result, Summary, Target, TempDir};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds each kernel-pipe transfer should take (sets the volumes).
    #[arg(long, default_value_t = 1.0)]
    secs: f64,
    /// Rounds (the median counts).
    #[arg(long, default_value_t = 3)]
    reps: usize,
}

const WRITER: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: w SIZE COUNT\n"); return 2; }
    size_t size = strtoul(argv[1], 0, 0);
    unsigned long count = strtoul(argv[2], 0, 0);
    char *buf = malloc(size);
    memset(buf, 'x', size);
    for (unsigned long i = 0; i < count; i++) {
        size_t off = 0;
        while (off < size) {
            ssize_t n = write(1, buf + off, size - off);
            if (n < 0) { if (errno == EINTR) continue; perror("write"); return 1; }
            off += (size_t)n;
        }
    }
    return 0;
}
"#;

const READER: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: r SIZE\n"); return 2; }
    size_t size = strtoul(argv[1], 0, 0);
    char *buf = malloc(size);
    unsigned long long total = 0;
    for (;;) {
        ssize_t n = read(0, buf, size);
        if (n < 0) { if (errno == EINTR) continue; perror("read"); return 1; }
        if (n == 0) break;
        total += (unsigned long long)n;
    }
    printf("%llu\n", total);
    return 0;
}
"#;

fn compile(dir: &std::path::Path, name: &str, src: &str) -> Result<std::path::PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).map_err(|e| err(format!("writing {}: {e}", c.display())))?;
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&c)
        .status()
        .map_err(|e| err(format!("cc (install build-essential): {e}")))?;
    if !st.success() {
        return Err(err(format!("cc failed on {}", c.display())));
    }
    Ok(out)
}

/// Run `script` with `sh -c` (kernel pipes) or under `streamline exec` (ours); its wall
/// time and stdout. Fails if it fails.
fn timed(script: &str, ours: bool) -> Result<(f64, String)> {
    let mut c = if ours {
        let mut c = Command::new(streamline()?);
        c.args(["exec", "--", "/bin/sh", "-c", script]);
        c
    } else {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    };
    c.env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let t = Instant::now();
    let out = c.output().map_err(|e| err(format!("{script}: {e}")))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(err(format!(
            "`{script}` ({}) failed: {}",
            if ours { "streamline" } else { "kernel" },
            out.status
        )));
    }
    Ok((
        secs,
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

/// The Rust API's pipe (a Beltway byte ring, writer and reader threads): seconds to move
/// `count` blocks of `size` bytes.
fn native(size: usize, count: u64) -> Result<f64> {
    let (mut w, mut r) =
        beltway::api::pipe(256 * 1024).map_err(|e| err(format!("beltway pipe: {e}")))?;
    let t = Instant::now();
    let writer = std::thread::spawn(move || -> Result<()> {
        let buf = vec![b'x'; size];
        for _ in 0..count {
            let mut off = 0;
            while off < size {
                off += w
                    .write(&buf[off..])
                    .map_err(|e| err(format!("beltway write: {e}")))?;
            }
        }
        w.close();
        Ok(())
    });
    let mut buf = vec![0u8; size];
    let mut total = 0u64;
    loop {
        let n = r
            .read(&mut buf)
            .map_err(|e| err(format!("beltway read: {e}")))?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    writer.join().map_err(|_| err("writer thread panicked"))??;
    let secs = t.elapsed().as_secs_f64();
    if total != size as u64 * count {
        return Err(err(format!(
            "native pipe moved {total} of {} bytes",
            size as u64 * count
        )));
    }
    Ok(secs)
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    let secs = if quick { a.secs.min(0.25) } else { a.secs };
    let reps = if quick { 1 } else { a.reps.max(1) };
    let tmp = TempDir::new("legacy-pipes")?;
    let w = compile(tmp.path(), "w", WRITER)?;
    let r = compile(tmp.path(), "r", READER)?;
    let (w, r) = (w.display().to_string(), r.display().to_string());
    println!("legacy-pipes: unmodified programs through kernel pipes and through `streamline exec` (ring pipes); {reps} round(s), medians");

    let mut sum = Summary::default();
    let mut ratios = Vec::new();
    for &size in &[64usize, 1024, 65536] {
        // Calibrate: what the kernel pipe moves in about a tenth of `secs`.
        let probe = ((8u64 << 20) / size as u64).max(1000);
        let (t0, _) = timed(&format!("{w} {size} {probe} | {r} {size}"), false)?;
        let count = ((probe as f64) * secs / t0.max(1e-3)).max(probe as f64) as u64;
        let bytes = count * size as u64;
        let script = format!("{w} {size} {count} | {r} {size}");
        let (mut k, mut s) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let (tk, ok) = timed(&script, false)?;
            let (ts, os) = timed(&script, true)?;
            if ok != bytes.to_string() || os != bytes.to_string() {
                return Err(err(format!("{size}-byte transfer: reader counted {ok} (kernel) and {os} (streamline) of {bytes} bytes")));
            }
            k.push(tk);
            s.push(ts);
        }
        let (tk, ts) = (median(&k), median(&s));
        let gbs = |t: f64| bytes as f64 / t / 1e9;
        println!("  writer|reader {:>6} B blocks, {:>6.0} MB: kernel pipe {:7.3} s ({:6.2} GB/s)  streamline {:7.3} s ({:6.2} GB/s)  ratio {:6.2}", size, bytes as f64 / 1e6, tk, gbs(tk), ts, gbs(ts), tk / ts);
        ratios.push((size, tk / ts, ts, bytes));
    }

    // cat | wc -c on a cached file.
    let file = tmp.path().join("data");
    let mb = if quick { 64 } else { 512 };
    std::fs::write(&file, vec![7u8; mb << 20])
        .map_err(|e| err(format!("writing {}: {e}", file.display())))?;
    let script = format!("cat {} | wc -c", file.display());
    let _ = timed(&script, false)?; // page cache warm
    let (mut k, mut s) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (tk, ok) = timed(&script, false)?;
        let (ts, os) = timed(&script, true)?;
        if ok != os || ok != (mb << 20).to_string() {
            return Err(err(format!(
                "cat | wc -c counted {ok} (kernel) and {os} (streamline)"
            )));
        }
        k.push(tk);
        s.push(ts);
    }
    let cat_ratio = median(&k.clone()) / median(&s.clone());
    println!(
        "  cat {mb} MiB | wc -c: kernel pipe {:.3} s  streamline {:.3} s  ratio {:.2}",
        median(&k),
        median(&s),
        cat_ratio
    );

    // The Rust API at 1 KiB, against the library's 1 KiB figure.
    let (_, _, lib_1k, bytes_1k) = ratios[1];
    let count = bytes_1k / 1024;
    let nat = median(
        &(0..reps)
            .map(|_| native(1024, count))
            .collect::<Result<Vec<f64>>>()?,
    );
    println!("  Rust API pipe (beltway::api::pipe, 2 threads), 1 KiB blocks: {nat:.3} s ({:.2} GB/s); through the library {lib_1k:.3} s", bytes_1k as f64 / nat / 1e9);

    sum.add(
        "legacy_pipe_64KiB_vs_kernel_pipe",
        ratios[2].1,
        Some(Target::AtLeast(2.0)),
        "writer|reader, 64 KiB blocks, throughput",
    );
    sum.add(
        "legacy_pipe_64B_vs_kernel_pipe",
        ratios[0].1,
        Some(Target::AtLeast(5.0)),
        "writer|reader, 64 B blocks, throughput",
    );
    sum.add(
        "legacy_pipe_1KiB_vs_kernel_pipe",
        ratios[1].1,
        None,
        "writer|reader, 1 KiB blocks, throughput",
    );
    sum.add(
        "legacy_pipe_1KiB_vs_native_ring",
        nat / lib_1k,
        Some(Target::AtLeast(0.7)),
        "library over the Rust API's pipe, 1 KiB",
    );
    sum.add(
        "legacy_pipe_cat_wc_vs_kernel_pipe",
        cat_ratio,
        None,
        "cat FILE | wc -c, cached file",
    );
    sum.print()?;
    Ok(())
}
