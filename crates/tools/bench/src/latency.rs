//! Part of the `spaces` subcommand: what a run costs while nothing happens, and how long one
//! block takes to get through at a low rate (issue 39's readiness figures, measured before
//! and after the readiness core replaces the per-source timed waits).
//!
//! - **Idle CPU** (`idle_run_cpu_pct`): `streamline run 'netin port=P | count space=1 | null
//!   space=p1'` with no sender: an idle network source, a channel to a worker thread and
//!   one to a process space. The CPU time of the run's whole process tree (every thread of
//!   the run and of its process spaces, read from /proc) over a quiet window, as a
//!   percentage of one CPU. Target: below 0.5 %.
//! - **One block's latency** (`single_block_latency_us_channel`, `..._netin`): one 64-byte
//!   block at a time, 200 a second, written to a run's standard input and timed until its
//!   bytes come out of the run's standard output (`stdout` writes each batch as it comes).
//!   `stdin | stdout` in one space is the floor; `stdin | stdout space=1` adds a channel
//!   between two spaces; `stdin | netout` → `netin | stdout` (two runs, TCP over loopback)
//!   adds a network channel. Medians (99th percentiles beside them). Target: below 50 µs.
//!   Each beside its hand-written peer doing the same hops ([`crate::child`]'s relays: one
//!   thread; two threads pinned as the run's two spaces are; a TCP sender and receiver),
//!   blocks sent to the two sides in turn so both see the machine at the same moments. The
//!   peers show what this machine's wake-ups cost: on a VM of our kind a thread asleep on
//!   an idle CPU takes 40-60 µs to run again, so a hop between two sleeping threads costs
//!   that much whoever writes it (`..._over_thread_relay`, `..._over_tcp_relay`).
//!
//! Every run is checked: every block comes back, byte for byte, and the runs end cleanly.

use crate::util::{err, Result, Summary, Target};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `streamline run --socket none -q TEXT` (stand-alone: no daemon in between), killed if
/// this benchmark dies.
fn start(text: &str, stdin: Stdio, stdout: Stdio) -> Result<Child> {
    let mut c = Command::new(crate::capture::streamline()?);
    c.args(["run", "--socket", "none", "-q", text])
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped());
    crate::proc::kill_with_us(&mut c);
    c.spawn()
        .map_err(|e| err(format!("starting `streamline run '{text}'`: {e}")))
}

/// End `child` with SIGINT (as Ctrl-C would) and check it ended cleanly.
fn interrupt(child: Child, what: &str) -> Result<()> {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .map_err(|e| err(format!("kill -INT: {e}")))?;
    if !sent.success() {
        return Err(err(format!(
            "`{what}` could not be interrupted (kill -INT: {sent})"
        )));
    }
    // An interrupted run ends with 130, as a shell command interrupted by Ctrl-C does.
    finish_with(child.wait_with_output(), what, Some(130))
}

fn finish(out: std::io::Result<std::process::Output>, what: &str) -> Result<()> {
    finish_with(out, what, None)
}

fn finish_with(
    out: std::io::Result<std::process::Output>,
    what: &str,
    also_ok: Option<i32>,
) -> Result<()> {
    let out = out.map_err(|e| err(format!("waiting for `{what}`: {e}")))?;
    if !out.status.success() && out.status.code() != also_ok {
        return Err(err(format!(
            "`{what}` ended with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// A TCP port on loopback nobody listens on now.
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| err(format!("finding a free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| err(format!("finding a free port: {e}")))
}

/// Idle CPU of a run with an idle network source, a thread channel and a process channel.
pub fn idle(quick: bool, summary: &mut Summary) -> Result<()> {
    let port = free_port()?;
    let text = format!("netin port={port} bind=127.0.0.1 | count space=1 | null space=p2");
    println!("\n== Idle: `{text}` with no sender ==");
    let child = start(&text, Stdio::null(), Stdio::null())?;
    let pid = child.id();
    // Let it start (the process space up, and a second for the start-up work to end), then
    // measure a quiet window.
    let settle = Instant::now();
    while crate::meter::tree_ns(&[pid]).1 < 2 || settle.elapsed() < Duration::from_secs(1) {
        if settle.elapsed() > Duration::from_secs(20) {
            return Err(err(format!("`{text}` did not start within 20 s")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let window = Duration::from_secs(if quick { 2 } else { 10 });
    let (c0, t0) = (crate::meter::tree_ns(&[pid]).0, Instant::now());
    // A quiet window is what is measured: this benchmark does nothing meanwhile.
    std::thread::sleep(window);
    let (c1, wall) = (crate::meter::tree_ns(&[pid]).0, t0.elapsed().as_secs_f64());
    interrupt(child, &text)?;
    let cpu = c1.saturating_sub(c0) as f64 / 1e9;
    let pct = cpu / wall * 100.0;
    println!(
        "{:<44} {:>10.2} % of a CPU ({cpu:.4} s CPU in {wall:.1} s)",
        "idle run, whole process tree", pct
    );
    summary.add(
        "idle_run_cpu_pct",
        pct,
        Some(Target::AtMost(0.5)),
        "% of one CPU a run with an idle netin, a thread channel and a process channel uses (target < 0.5)",
    );
    Ok(())
}

/// One side of a latency comparison: what its blocks go into and come out of.
struct Echo {
    what: String,
    input: Box<dyn Write>,
    output: Box<dyn Read>,
    lat: Vec<f64>,
}

impl Echo {
    /// Time one 64-byte block (numbered `i`) from `input` until it comes out of `output`,
    /// checking it came back byte for byte.
    fn once(&mut self, i: usize) -> Result<()> {
        let mut block = [b'.'; 64];
        let tag = format!("{i:>12}");
        block[..12].copy_from_slice(tag.as_bytes());
        block[63] = b'\n';
        let mut back = [0u8; 64];
        let t0 = Instant::now();
        self.input
            .write_all(&block)
            .map_err(|e| err(format!("{}: writing block {i}: {e}", self.what)))?;
        self.output
            .read_exact(&mut back)
            .map_err(|e| err(format!("{}: reading block {i} back: {e}", self.what)))?;
        self.lat.push(t0.elapsed().as_secs_f64() * 1e6);
        if back != block {
            return Err(err(format!(
                "{}: block {i} came back as {:?}",
                self.what,
                String::from_utf8_lossy(&back)
            )));
        }
        Ok(())
    }
}

/// Send `n` blocks through each side in turn, one block at a time, 200 a second in all:
/// Streamline and its peer see the same machine at the same moments. The latencies of
/// each side in µs.
fn echo_side_by_side(sides: &mut [Echo], n: usize) -> Result<()> {
    let gap = Duration::from_millis(5) / sides.len() as u32;
    for i in 0..n {
        for s in sides.iter_mut() {
            s.once(i)?;
            std::thread::sleep(gap);
        }
    }
    Ok(())
}

fn median_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// `streamline-bench __child relay|tcp-send|tcp-recv`: a hand-written peer (see
/// [`crate::child`]), killed if this benchmark dies.
fn peer(role: &[&str], stdin: Stdio, stdout: Stdio) -> Result<Child> {
    let exe = std::env::current_exe().map_err(|e| err(format!("locating own executable: {e}")))?;
    let mut c = Command::new(exe);
    c.args(["__child", "--parent", &std::process::id().to_string()])
        .args(role)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped());
    crate::proc::kill_with_us(&mut c);
    c.spawn()
        .map_err(|e| err(format!("starting the peer `{}`: {e}", role.join(" "))))
}

/// A run (or a peer) that reads its standard input and writes its standard output.
fn through(child: &mut Child, what: &str) -> Echo {
    Echo {
        what: what.to_string(),
        input: Box::new(child.stdin.take().expect("piped")),
        output: Box::new(child.stdout.take().expect("piped")),
        lat: Vec::new(),
    }
}

/// Print the medians of `ours` and `theirs` side by side; the ratio ours / theirs.
fn compare(label: &str, ours: &Echo, peer_label: &str, theirs: &Echo) -> (f64, f64) {
    let (m, p99) = median_p99(ours.lat.clone());
    let (pm, pp99) = median_p99(theirs.lat.clone());
    println!("{label:<44} {m:>10.1} µs median, {p99:.1} µs p99");
    println!("{peer_label:<44} {pm:>10.1} µs median, {pp99:.1} µs p99");
    println!("{:<44} {:>10.2}", "  Streamline / peer (medians)", m / pm);
    (m, m / pm)
}

/// One block's latency through one space, a channel between spaces, and netout → netin,
/// each beside a hand-written peer doing the same hops.
pub fn latency(quick: bool, summary: &mut Summary) -> Result<()> {
    let n = if quick { 100 } else { 1000 };
    println!("\n== One 64-byte block at a time, 200/s, stdin to stdout ({n} blocks each side, interleaved) ==");
    let mut figures = Vec::new();
    for (label, text, threads, peer_label) in [
        (
            "one space: stdin | stdout",
            "stdin | stdout",
            "1",
            "peer: one thread, read/write",
        ),
        (
            "a channel: stdin | stdout space=1",
            "stdin | stdout space=1",
            "2",
            "peer: two threads (CPU 0, 1), mutex+condvar",
        ),
    ] {
        let mut ours = start(text, Stdio::piped(), Stdio::piped())?;
        let mut theirs = peer(
            &["relay", "--threads", threads],
            Stdio::piped(),
            Stdio::piped(),
        )?;
        let mut sides = [through(&mut ours, text), through(&mut theirs, peer_label)];
        echo_side_by_side(&mut sides, n)?;
        let [a, b] = sides;
        figures.push(compare(label, &a, peer_label, &b));
        drop((a, b));
        finish(ours.wait_with_output(), text)?;
        finish(theirs.wait_with_output(), peer_label)?;
    }
    let (port, peer_port) = (free_port()?, free_port()?);
    let rx_text = format!("netin port={port} bind=127.0.0.1 | stdout");
    let tx_text = format!("stdin | netout to=127.0.0.1:{port} wait=10");
    let mut rx = start(&rx_text, Stdio::null(), Stdio::piped())?;
    let mut tx = start(&tx_text, Stdio::piped(), Stdio::null())?;
    let addr = format!("127.0.0.1:{peer_port}");
    let mut prx = peer(
        &["tcp-recv", "--listen", &addr],
        Stdio::null(),
        Stdio::piped(),
    )?;
    let mut ptx = peer(&["tcp-send", "--to", &addr], Stdio::piped(), Stdio::null())?;
    let peer_label = "peer: TCP sender → TCP receiver (NODELAY)";
    let mut sides = [
        Echo {
            what: "stdin | netout → netin | stdout".into(),
            input: Box::new(tx.stdin.take().expect("piped")),
            output: Box::new(rx.stdout.take().expect("piped")),
            lat: Vec::new(),
        },
        Echo {
            what: peer_label.into(),
            input: Box::new(ptx.stdin.take().expect("piped")),
            output: Box::new(prx.stdout.take().expect("piped")),
            lat: Vec::new(),
        },
    ];
    echo_side_by_side(&mut sides, n)?;
    let [a, b] = sides;
    let net = compare("netout → netin over TCP loopback", &a, peer_label, &b);
    drop((a, b));
    finish(tx.wait_with_output(), &tx_text)?;
    finish(rx.wait_with_output(), &rx_text)?;
    finish(ptx.wait_with_output(), "the peer's TCP sender")?;
    finish(prx.wait_with_output(), "the peer's TCP receiver")?;
    summary.add(
        "single_block_latency_us_channel",
        figures[1].0,
        Some(Target::AtMost(50.0)),
        "µs for one block from stdin to stdout through a channel between two spaces, median at 200 blocks/s (target < 50)",
    );
    summary.add(
        "single_block_latency_us_netin",
        net.0,
        Some(Target::AtMost(50.0)),
        "µs for one block from stdin | netout to netin | stdout over TCP loopback, median at 200 blocks/s (target < 50)",
    );
    summary.add(
        "single_block_latency_channel_over_thread_relay",
        figures[1].1,
        None,
        "the channel's median latency over a hand-written two-thread relay's (same CPUs, measured interleaved; 1 = as fast)",
    );
    summary.add(
        "single_block_latency_netin_over_tcp_relay",
        net.1,
        None,
        "netout → netin's median latency over a hand-written TCP sender and receiver's (measured interleaved; 1 = as fast)",
    );
    Ok(())
}
