//! Kafka at the edges (issue 21, third part): `kafkaout` and `kafkain` against `kcat`
//! (librdkafka's command-line client, Debian's package) on one real Apache Kafka broker
//! that `scripts/kafka-broker` starts on a free loopback port for the run.
//!
//! - `kafka_produce_vs_kcat`: messages/s of `streamline run 'gen count=N size=100 |
//!   kafkaout ...'` over those of `kcat -P -l FILE` producing N messages of 100 bytes (a
//!   file of N lines of 100 bytes) to a topic of its own on the same broker; each side's
//!   whole process, timed from start to exit (all messages delivered: kafkaout's summary,
//!   kcat's exit status; the topics are then read back and counted).
//! - `kafka_consume_vs_kcat`: messages/s of `kafkain topic=T eof=yes | stdout` over those
//!   of `kcat -C -e -o beginning -q -t T` on the same topic, both writing the messages to a
//!   pipe this program reads and counts (kcat adds its newline delimiter).
//! - `kafka_lost_after_broker_restart`: `gen ... rate=R | kafkaout` while the broker is
//!   restarted mid-stream, then the topic consumed and counted: messages missing.
//!
//! Full mode takes the best of three alternating runs per side; `--quick` one run of
//! smaller volume. Owns: these experiments; the broker script is the project's.

use crate::util::{err, watchdog, Result, Summary, Target};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Messages per throughput run (default 1000000; 100000 with --quick).
    #[arg(long)]
    pub messages: Option<u64>,
}

fn script() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/kafka-broker"
    ))
}

/// The run's broker, stopped and its directory removed on drop (and, should this program
/// die, by the script's watcher of this process).
struct Broker {
    dir: PathBuf,
    addr: String,
}

fn broker_cmd(args: &[&str]) -> Result<String> {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .env("KAFKA_BROKER_OWNER", std::process::id().to_string())
        .env("KAFKA_BROKER_REMOVE", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(format!("cannot run {}: {e}", script().display())))?;
    if !out.status.success() {
        return Err(err(format!(
            "scripts/kafka-broker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Broker {
    fn start() -> Result<Broker> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("slbench-kafka-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr = broker_cmd(&["start", dir.to_str().unwrap_or("/tmp"), &port.to_string()])?;
        Ok(Broker { dir, addr })
    }
    fn restart(&self) -> Result<()> {
        broker_cmd(&["restart", self.dir.to_str().unwrap_or("/tmp")]).map(|_| ())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = broker_cmd(&["stop", self.dir.to_str().unwrap_or("/tmp")]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn streamline() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| err(format!("locating own executable: {e}")))?;
    let s = exe.with_file_name("streamline");
    if !s.is_file() {
        return Err(err(format!(
            "{} not found next to this benchmark; build it with `cargo build --release -p streamline`",
            s.display()
        )));
    }
    Ok(s)
}

fn need(tool: &str, package: &str) -> Result<()> {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(err(format!(
            "{tool} is not installed (Debian package {package}; scripts/setup installs it)"
        )))
    }
}

/// Run `cmd` to its end: (seconds, stdout bytes it wrote, stderr).
fn timed(mut cmd: Command, what: &str) -> Result<(f64, u64, String)> {
    let t0 = Instant::now();
    let mut c = cmd
        .env("STREAMLINE_SOCKET", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("{what}: {e}")))?;
    let mut out = c.stdout.take().expect("piped");
    let mut errp = c.stderr.take().expect("piped");
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = errp.read_to_string(&mut s);
        s
    });
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(format!("{what}: reading its output: {e}"))),
        }
    }
    let st = c.wait()?;
    let secs = t0.elapsed().as_secs_f64();
    let stderr = e.join().unwrap_or_default();
    if !st.success() {
        return Err(err(format!("{what} failed ({st}): {}", stderr.trim())));
    }
    Ok((secs, bytes, stderr))
}

fn ours(sl: &Path, pipeline: &str) -> Command {
    let mut c = Command::new(sl);
    c.args(["run", "-q", pipeline]);
    c
}

/// `kafkain: N messages` or `kafkaout: ... N delivered` of a run's summaries.
fn summary_number(stderr: &str, prefix: &str, word_before: Option<&str>) -> Option<u64> {
    let l = stderr.lines().find(|l| l.starts_with(prefix))?;
    match word_before {
        None => l[prefix.len()..].split(' ').next()?.parse().ok(),
        Some(w) => {
            let i = l.find(w)?;
            l[..i].trim_end().rsplit([' ', ',']).next()?.parse().ok()
        }
    }
}

/// The figures, added to `summary` (also for `streamline-bench net`, which reports them
/// beside its own).
pub fn figures(quick: bool, summary: &mut Summary) -> Result<()> {
    figures_with(quick, None, summary)
}

fn figures_with(quick: bool, messages: Option<u64>, summary: &mut Summary) -> Result<()> {
    need("kcat", "kcat")?;
    need("java", "openjdk-17-jre-headless")?;
    let sl = streamline()?;
    let n = messages.unwrap_or(if quick { 100_000 } else { 1_000_000 });
    let reps = if quick { 1 } else { 3 };
    let size = 100;
    let b = Broker::start()?;
    println!("streamline-bench kafka: broker {} (Apache Kafka 3.9.1, KRaft, one node); {n} messages of {size} bytes, best of {reps}", b.addr);
    let file = b.dir.join("messages.txt");
    {
        let line = format!("{}\n", "x".repeat(size));
        std::fs::write(&file, line.repeat(n as usize))?;
    }
    let (mut ours_p, mut kcat_p, mut ours_c, mut kcat_c) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    let mut kcat_c_same = f64::MAX;
    for r in 0..reps {
        let (to, tk) = (format!("ours{r}"), format!("kcat{r}"));
        let (s, _, e) = timed(
            ours(
                &sl,
                &format!(
                    "gen count={n} size={size} | kafkaout topic={to} brokers={} partitions=1",
                    b.addr
                ),
            ),
            "streamline gen | kafkaout",
        )?;
        if summary_number(&e, "kafkaout: ", Some("delivered")) != Some(n) {
            return Err(err(format!("kafkaout did not deliver {n} messages: {e}")));
        }
        ours_p = ours_p.min(s);
        let op = s;
        let mut k = Command::new("kcat");
        k.args(["-P", "-b", &b.addr, "-t", &tk, "-l"]).arg(&file);
        let (s, _, _) = timed(k, "kcat -P")?;
        kcat_p = kcat_p.min(s);
        let kp = s;
        // Consume ours{r} both ways.
        let (s, bytes, e) = timed(
            ours(
                &sl,
                &format!("kafkain topic={to} brokers={} eof=yes | stdout", b.addr),
            ),
            "streamline kafkain | stdout",
        )?;
        if summary_number(&e, "kafkain: ", None) != Some(n) || bytes != n * size as u64 {
            return Err(err(format!(
                "kafkain read {bytes} bytes, not {n} messages: {e}"
            )));
        }
        ours_c = ours_c.min(s);
        let oc = s;
        let mut k = Command::new("kcat");
        k.args([
            "-C",
            "-b",
            &b.addr,
            "-t",
            &to,
            "-e",
            "-o",
            "beginning",
            "-q",
        ]);
        let (s, bytes, _) = timed(k, "kcat -C")?;
        if bytes != n * (size as u64 + 1) {
            return Err(err(format!(
                "kcat -C wrote {bytes} bytes, not {n} messages"
            )));
        }
        kcat_c = kcat_c.min(s);
        let kc = s;
        // kcat given the librdkafka settings kafkain uses (deeper prefetch; with eof, a
        // 100 ms fetch wait): what is configuration, and what is the filter.
        let mut k = Command::new("kcat");
        k.args([
            "-C",
            "-b",
            &b.addr,
            "-t",
            &to,
            "-e",
            "-o",
            "beginning",
            "-q",
        ]);
        k.args([
            "-X",
            "queued.min.messages=1000000",
            "-X",
            "fetch.wait.max.ms=100",
        ]);
        let (ks, bytes, _) = timed(k, "kcat -C (kafkain's settings)")?;
        if bytes != n * (size as u64 + 1) {
            return Err(err(format!(
                "kcat -C wrote {bytes} bytes, not {n} messages"
            )));
        }
        kcat_c_same = kcat_c_same.min(ks);
        // kcat's topic holds what it produced.
        let (_, _, e) = timed(
            ours(
                &sl,
                &format!("kafkain topic={tk} brokers={} eof=yes | null", b.addr),
            ),
            "streamline kafkain (count kcat's topic)",
        )?;
        if summary_number(&e, "kafkain: ", None) != Some(n) {
            return Err(err(format!(
                "kcat -P's topic does not hold {n} messages: {e}"
            )));
        }
        println!(
            "  run {r}: produce ours {:.2} s, kcat {:.2} s; consume ours {:.2} s, kcat {:.2} s (with kafkain's settings {:.2} s)",
            op, kp, oc, kc, ks
        );
    }
    let rate = |s: f64| n as f64 / s;
    println!(
        "  produce: ours {:.0} msg/s, kcat {:.0} msg/s; consume: ours {:.0} msg/s, kcat {:.0} msg/s",
        rate(ours_p),
        rate(kcat_p),
        rate(ours_c),
        rate(kcat_c)
    );
    summary.add(
        "kafka_produce_vs_kcat",
        kcat_p / ours_p,
        Some(Target::AtLeast(1.0)),
        format!("messages/s of gen | kafkaout vs kcat -P, {n} x {size} B, whole processes"),
    );
    summary.add(
        "kafka_consume_vs_kcat",
        kcat_c / ours_c,
        Some(Target::AtLeast(1.0)),
        format!("messages/s of kafkain | stdout vs kcat -C -e, {n} x {size} B, same topic"),
    );

    summary.add(
        "kafka_consume_vs_kcat_same_settings",
        kcat_c_same / ours_c,
        None,
        "the same, kcat given kafkain's settings (-X queued.min.messages=1000000 -X fetch.wait.max.ms=100)",
    );

    // A broker restart in the middle of a paced stream.
    let (m, rate_r) = if quick {
        (40_000u64, 20_000)
    } else {
        (100_000, 25_000)
    };
    let mut c = ours(
        &sl,
        &format!(
            "gen count={m} size=200 rate={rate_r} | kafkaout topic=restart brokers={} partitions=2",
            b.addr
        ),
    );
    let t0 = Instant::now();
    let child = c
        .env("STREAMLINE_SOCKET", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(800));
    let r0 = Instant::now();
    b.restart()?;
    let down = r0.elapsed().as_secs_f64();
    let out = child.wait_with_output()?;
    let e = String::from_utf8_lossy(&out.stderr).to_string();
    let produced_in = t0.elapsed().as_secs_f64();
    let delivered = summary_number(&e, "kafkaout: ", Some("delivered")).unwrap_or(0);
    let (_, _, ce) = timed(
        ours(
            &sl,
            &format!("kafkain topic=restart brokers={} eof=yes | null", b.addr),
        ),
        "streamline kafkain (count after the restart)",
    )?;
    let got = summary_number(&ce, "kafkain: ", None).unwrap_or(0);
    println!(
        "  restart: {m} messages paced at {rate_r}/s, the broker restarted 0.8 s in (took {down:.1} s); producer {} after {produced_in:.1} s, {delivered} delivered; the topic holds {got}",
        if out.status.success() { "ended" } else { "FAILED" }
    );
    summary.add(
        "kafka_lost_after_broker_restart",
        m.saturating_sub(got) as f64,
        Some(Target::AtMost(0.0)),
        format!(
            "of {m} messages produced across a broker restart ({} duplicates)",
            got.saturating_sub(m)
        ),
    );
    Ok(())
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(600));
    let mut summary = Summary::default();
    figures_with(quick, a.messages, &mut summary)?;
    summary.print()?;
    Ok(())
}
