//! Kafka at the edges (issue 21, third part; made fair in issue 34): `kafkaout` and
//! `kafkain` against `kcat` (librdkafka's command-line client, Debian's package) on one
//! real Apache Kafka broker that `scripts/kafka-broker` starts on a free loopback port for
//! the run. Both sides are librdkafka clients: kcat is given, with `-X`, the librdkafka
//! settings our filters set (`filters::kafka::PRODUCER_SETTINGS` and friends), so the
//! figures compare the programs, not their configuration.
//!
//! - `kafka_produce_vs_kcat`: messages/s of `streamline run 'file F split=lines | strip 1 |
//!   kafkaout topic=T ...'` over those of `kcat -P -l F -X ...` (kafkaout's producer
//!   settings: idempotence, acks=all, linger.ms, partitioner, queue size, message timeout).
//!   Both read the same file of N lines of 100 bytes plus a newline, each line its
//!   sequence number in decimal; kcat sends a line without its newline, ours a line
//!   without its first byte (`strip 1`), so both send N messages of 100 bytes. Each side
//!   has a topic of its own with one partition, created before the timing; each side's
//!   whole process is timed from start to exit (all messages delivered: kafkaout's
//!   summary, kcat's exit). Both topics are then read back and every sequence number
//!   checked: present once (lost and duplicated messages fail the run).
//! - `kafka_consume_vs_kcat`: messages/s of `kafkain topic=T count=N | stdout` over those of
//!   `kcat -C -t T -o beginning -c N -D '' -X queued.min.messages=...` on the same topic
//!   (kafkain's consumer settings), both stopping at the known count, so neither waits for
//!   an empty fetch at the end; both write the bare messages to a pipe this program reads,
//!   and both outputs are checked record by record (every sequence number once).
//! - `kafka_*_cpu_kcat_over_ours`: the same runs' CPU time (user + system of the whole
//!   process and its threads, from wait4) per message, kcat's over ours.
//! - `kafka_lost_after_broker_restart`, `kafka_duplicates_after_broker_restart`: `gen ...
//!   rate=R | kafkaout` while the broker is restarted mid-stream, then the topic read back
//!   and gen's sequence numbers counted: numbers missing, and messages beyond the first
//!   of each number.
//!
//! `rdkafka_performance` (librdkafka's own benchmark client) would be a second peer, but
//! Debian packages it only as source (librdkafka-dev's examples), which needs librdkafka's
//! internal headers to build; kcat is the peer.
//!
//! Full mode takes the best of three runs per side, alternating which side goes first;
//! `--quick` one run of smaller volume. Owns: these experiments; the broker script is the
//! project's.

use crate::capture::streamline;
use crate::util::{err, wait_with_cpu, watchdog, Result, Summary, Target};
use filters::kafka::{
    CONSUMER_PREFETCH, DEFAULT_LINGER_MS, DEFAULT_TIMEOUT_SECS, PRODUCER_SETTINGS,
};
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
        "/../../../scripts/kafka-broker"
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

/// One side's run, to its end.
struct Ran {
    secs: f64,
    /// CPU time of the process and its threads (user + system), ns.
    cpu_ns: u64,
    /// What it wrote to its standard output (kept only when asked for).
    out: Vec<u8>,
    out_bytes: u64,
    stderr: String,
}

/// Run `cmd` to its end, timed from its start to its exit; its standard output read (and
/// kept, with room for `keep` bytes made beforehand, if `keep` is not 0) by this program.
fn timed(mut cmd: Command, what: &str, keep: usize) -> Result<Ran> {
    let t0 = Instant::now();
    let mut c = cmd
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
    let mut kept = Vec::with_capacity(keep);
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes += n as u64;
                if keep > 0 {
                    kept.extend_from_slice(&buf[..n]);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(format!("{what}: reading its output: {e}"))),
        }
    }
    let (st, cpu_ns) = wait_with_cpu(&mut c)?;
    let secs = t0.elapsed().as_secs_f64();
    let stderr = e.join().unwrap_or_default();
    if !st.success() {
        return Err(err(format!("{what} failed ({st}): {}", stderr.trim())));
    }
    Ok(Ran {
        secs,
        cpu_ns,
        out: kept,
        out_bytes: bytes,
        stderr,
    })
}

/// `streamline --socket none run -q PIPELINE`: a stand-alone run (a daemon running on
/// this machine is not asked; its CPU would not be this process's).
fn ours(sl: &Path, pipeline: &str) -> Command {
    let mut c = Command::new(sl);
    c.args(["--socket", "none", "run", "-q", pipeline]);
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

/// What a stream of messages held, by sequence number.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    /// Messages read.
    messages: u64,
    /// Sequence numbers below the count sent that were not read.
    lost: u64,
    /// Messages beyond the first with their sequence number.
    duplicates: u64,
    /// Messages that carry no sequence number below the count sent.
    wrong: u64,
}

impl Tally {
    /// Tally `n` messages sent, read back as `seqs` (None: a message without a number).
    fn of(n: u64, seqs: impl Iterator<Item = Option<u64>>) -> Tally {
        let mut seen = vec![false; n as usize];
        let mut t = Tally::default();
        for s in seqs {
            t.messages += 1;
            match s {
                Some(s) if s < n => {
                    if std::mem::replace(&mut seen[s as usize], true) {
                        t.duplicates += 1;
                    }
                }
                _ => t.wrong += 1,
            }
        }
        t.lost = seen.iter().filter(|&&x| !x).count() as u64;
        t
    }

    fn exact(&self, n: u64) -> bool {
        self.messages == n && self.lost == 0 && self.duplicates == 0 && self.wrong == 0
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages: {} lost, {} duplicated, {} not ours",
            self.messages, self.lost, self.duplicates, self.wrong
        )
    }
}

/// The sequence number of one 100-byte message of the source file: decimal digits (a line
/// without its newline, or without its first byte and so ending in the newline).
fn decimal_seq(rec: &[u8]) -> Option<u64> {
    let d = rec.strip_suffix(b"\n").unwrap_or(rec);
    if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let cut = d.len().saturating_sub(18);
    if d[..cut].iter().any(|&b| b != b'0') {
        return None;
    }
    std::str::from_utf8(&d[cut..]).ok()?.parse().ok()
}

/// Messages of `size` bytes back to back (as `stdout`, `outfile` and `kcat -D ''` write
/// them), numbered as `seq` reads them; a ragged end is a message without a number.
fn tally_records(n: u64, data: &[u8], size: usize, seq: fn(&[u8]) -> Option<u64>) -> Tally {
    Tally::of(
        n,
        data.chunks(size)
            .map(|r| if r.len() == size { seq(r) } else { None }),
    )
}

/// gen's blocks: an 8-byte little-endian sequence number first.
fn gen_seq(rec: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(rec.get(..8)?.try_into().ok()?))
}

/// The source file both producers read: `n` lines of `size` decimal digits (the line's
/// sequence number, zero-padded) and a newline.
fn source_file(path: &Path, n: u64, size: usize) -> Result<()> {
    use std::io::Write;
    let f = std::fs::File::create(path)
        .map_err(|e| err(format!("creating {}: {e}", path.display())))?;
    let mut w = std::io::BufWriter::new(f);
    for i in 0..n {
        writeln!(w, "{i:0size$}")?;
    }
    w.flush()?;
    Ok(())
}

/// Create `topic` with one partition, outside any timing (kafkaout's own creation, with
/// nothing to send).
fn create_topic(sl: &Path, addr: &str, topic: &str) -> Result<()> {
    let r = timed(
        ours(
            sl,
            &format!("gen count=0 size=1 | kafkaout topic={topic} brokers={addr} partitions=1"),
        ),
        &format!("creating topic {topic}"),
        0,
    )?;
    if summary_number(&r.stderr, "kafkaout: ", Some("delivered")).unwrap_or(0) != 0 {
        return Err(err(format!("creating topic {topic}: {}", r.stderr)));
    }
    Ok(())
}

/// Read `topic` back to its end (ours, `kafkain eof=yes | outfile`) and tally it.
fn read_back(
    sl: &Path,
    addr: &str,
    dir: &Path,
    topic: &str,
    n: u64,
    size: usize,
    seq: fn(&[u8]) -> Option<u64>,
) -> Result<Tally> {
    let path = dir.join(format!("{topic}.read"));
    let _ = std::fs::remove_file(&path);
    timed(
        ours(
            sl,
            &format!(
                "kafkain topic={topic} brokers={addr} eof=yes | outfile {}",
                path.display()
            ),
        ),
        &format!("streamline kafkain (reading topic {topic} back)"),
        0,
    )?;
    let data = std::fs::read(&path).map_err(|e| err(format!("reading {}: {e}", path.display())))?;
    let _ = std::fs::remove_file(&path);
    Ok(tally_records(n, &data, size, seq))
}

/// kcat's `-X` arguments for kafkaout's producer settings.
fn producer_x() -> Vec<String> {
    let mut v: Vec<(String, String)> = PRODUCER_SETTINGS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.push(("linger.ms".into(), DEFAULT_LINGER_MS.to_string()));
    v.push((
        "message.timeout.ms".into(),
        ((DEFAULT_TIMEOUT_SECS * 1000.0) as u64).to_string(),
    ));
    v.into_iter()
        .flat_map(|(k, v)| ["-X".to_string(), format!("{k}={v}")])
        .collect()
}

/// kcat's `-X` arguments for kafkain's consumer settings (as it runs with `count=` and
/// without `eof=`: the prefetch; the offsets it neither stores nor commits, as kcat's
/// simple consumer does not either).
fn consumer_x() -> Vec<String> {
    vec![
        "-X".into(),
        format!("{}={}", CONSUMER_PREFETCH.0, CONSUMER_PREFETCH.1),
    ]
}

/// Best (least) of a side's runs: seconds and CPU ns.
#[derive(Clone, Copy)]
struct Best {
    secs: f64,
    cpu_ns: u64,
}

impl Best {
    fn new() -> Best {
        Best {
            secs: f64::INFINITY,
            cpu_ns: u64::MAX,
        }
    }
    fn add(&mut self, r: &Ran) {
        self.secs = self.secs.min(r.secs);
        self.cpu_ns = self.cpu_ns.min(r.cpu_ns);
    }
}

/// The figures, added to `summary` (also for `streamline-bench net`, which reports them
/// beside its own).
pub fn figures(quick: bool, summary: &mut Summary) -> Result<()> {
    figures_with(quick, None, summary)
}

/// What the rounds share: our program, the broker, the messages (count, size, the file
/// they are produced from) and kcat's settings matched to ours.
struct Session {
    sl: PathBuf,
    b: Broker,
    n: u64,
    size: usize,
    file: PathBuf,
    /// kcat's `-X` arguments: kafkaout's producer settings, kafkain's consumer settings.
    px: Vec<String>,
    cx: Vec<String>,
}

fn figures_with(quick: bool, messages: Option<u64>, summary: &mut Summary) -> Result<()> {
    need("kcat", "kcat")?;
    need("java", "openjdk-17-jre-headless")?;
    let reps = if quick { 1 } else { 3 };
    let s = session(quick, messages, reps)?;
    let (mut ours_p, mut kcat_p, mut ours_c, mut kcat_c) =
        (Best::new(), Best::new(), Best::new(), Best::new());
    for r in 0..reps {
        let (to, tk) = (format!("ours{r}"), format!("kcat{r}"));
        create_topic(&s.sl, &s.b.addr, &to)?;
        create_topic(&s.sl, &s.b.addr, &tk)?;
        let (op, kp) = s.produce(r, &to, &tk)?;
        ours_p.add(&op);
        kcat_p.add(&kp);
        let (oc, kc) = s.consume(r, &to)?;
        ours_c.add(&oc);
        kcat_c.add(&kc);
        let ms = |r: &Ran| r.cpu_ns as f64 / 1e6;
        println!(
            "  run {r}: produce ours {:.2} s ({:.0} ms CPU), kcat {:.2} s ({:.0} ms CPU); consume ours {:.2} s ({:.0} ms CPU), kcat {:.2} s ({:.0} ms CPU); counts checked",
            op.secs, ms(&op), kp.secs, ms(&kp), oc.secs, ms(&oc), kc.secs, ms(&kc)
        );
    }
    s.head_to_head([ours_p, kcat_p, ours_c, kcat_c], summary);
    s.broker_restart(quick, summary)
}

/// The broker started, the messages' file written, kcat's settings printed.
fn session(quick: bool, messages: Option<u64>, reps: usize) -> Result<Session> {
    let sl = streamline()?;
    let n = messages.unwrap_or(if quick { 100_000 } else { 1_000_000 });
    let size = 100;
    let b = Broker::start()?;
    println!("streamline-bench kafka: broker {} (Apache Kafka 3.9.1, KRaft, one node); {n} messages of {size} bytes, best of {reps}", b.addr);
    let file = b.dir.join("messages.txt");
    source_file(&file, n, size)?;
    let px = producer_x();
    let cx = consumer_x();
    println!("  kcat -P gets kafkaout's settings: {}", px.join(" "));
    println!("  kcat -C gets kafkain's settings: {}", cx.join(" "));
    Ok(Session {
        sl,
        b,
        n,
        size,
        file,
        px,
        cx,
    })
}

impl Session {
    /// Producing: each side into its own (empty, existing) topic, `to` ours and `tk`
    /// kcat's; who goes first alternates with the round `r`. Counts before figures: every
    /// line of the file in each topic, once. Returns (ours, kcat's).
    fn produce(&self, r: usize, to: &str, tk: &str) -> Result<(Ran, Ran)> {
        let (n, b) = (self.n, &self.b);
        let produce_ours = || -> Result<Ran> {
            let ran = timed(
                ours(
                    &self.sl,
                    &format!(
                        "file {} split=lines | strip 1 | kafkaout topic={to} brokers={}",
                        self.file.display(),
                        b.addr
                    ),
                ),
                "streamline file | strip | kafkaout",
                0,
            )?;
            if summary_number(&ran.stderr, "kafkaout: ", Some("delivered")) != Some(n) {
                return Err(err(format!(
                    "kafkaout did not deliver {n} messages: {}",
                    ran.stderr
                )));
            }
            Ok(ran)
        };
        let produce_kcat = || -> Result<Ran> {
            let mut k = Command::new("kcat");
            k.args(["-P", "-b", &b.addr, "-t", tk, "-l"])
                .arg(&self.file)
                .args(&self.px);
            timed(k, "kcat -P", 0)
        };
        let (op, kp) = if r % 2 == 0 {
            let o = produce_ours()?;
            (o, produce_kcat()?)
        } else {
            let k = produce_kcat()?;
            (produce_ours()?, k)
        };
        for (who, topic) in [("kafkaout", to), ("kcat -P", tk)] {
            let t = read_back(&self.sl, &b.addr, &b.dir, topic, n, self.size, decimal_seq)?;
            if !t.exact(n) {
                return Err(err(format!(
                    "{who} sent {n} messages; its topic {topic} holds {t}"
                )));
            }
        }
        Ok((op, kp))
    }

    /// Consuming topic `to` both ways, each to the known count (who goes first alternates
    /// with the round `r`), each output checked. Returns (ours, kcat's).
    fn consume(&self, r: usize, to: &str) -> Result<(Ran, Ran)> {
        let (n, size, b) = (self.n, self.size, &self.b);
        let consume_ours = || {
            timed(
                ours(
                    &self.sl,
                    &format!("kafkain topic={to} brokers={} count={n} | stdout", b.addr),
                ),
                "streamline kafkain | stdout",
                n as usize * size,
            )
        };
        let consume_kcat = || {
            let mut k = Command::new("kcat");
            k.args(["-C", "-b", &b.addr, "-t", to, "-o", "beginning", "-q"])
                .args(["-c", &n.to_string(), "-D", ""])
                .args(&self.cx);
            timed(k, "kcat -C", n as usize * size)
        };
        let (oc, kc) = if r % 2 == 0 {
            let o = consume_ours()?;
            (o, consume_kcat()?)
        } else {
            let k = consume_kcat()?;
            (consume_ours()?, k)
        };
        for (who, ran) in [("kafkain | stdout", &oc), ("kcat -C", &kc)] {
            let t = tally_records(n, &ran.out, size, decimal_seq);
            if !t.exact(n) || ran.out_bytes != n * size as u64 {
                return Err(err(format!(
                    "{who} read topic {to} ({n} messages): its output ({} bytes) holds {t}",
                    ran.out_bytes
                )));
            }
        }
        Ok((oc, kc))
    }

    /// The rates and the figures against kcat from each side's best: produce ours,
    /// kcat; consume ours, kcat.
    fn head_to_head(&self, [ours_p, kcat_p, ours_c, kcat_c]: [Best; 4], summary: &mut Summary) {
        let (n, size) = (self.n, self.size);
        let rate = |s: f64| n as f64 / s;
        println!(
            "  produce: ours {:.0} msg/s, kcat {:.0} msg/s; consume: ours {:.0} msg/s, kcat {:.0} msg/s",
            rate(ours_p.secs),
            rate(kcat_p.secs),
            rate(ours_c.secs),
            rate(kcat_c.secs)
        );
        summary.add(
            "kafka_produce_vs_kcat",
            kcat_p.secs / ours_p.secs,
            Some(Target::AtLeast(1.0)),
            format!("messages/s of file | strip 1 | kafkaout vs kcat -P -l with kafkaout's settings, same file, {n} x {size} B, topics made before, whole processes"),
        );
        summary.add(
            "kafka_consume_vs_kcat",
            kcat_c.secs / ours_c.secs,
            Some(Target::AtLeast(1.0)),
            format!("messages/s of kafkain count=N | stdout vs kcat -C -c N -D '' with kafkain's settings, same topic, {n} x {size} B"),
        );
        summary.add(
            "kafka_produce_cpu_kcat_over_ours",
            kcat_p.cpu_ns as f64 / ours_p.cpu_ns as f64,
            None,
            "CPU time (user + system, all threads) of the same produce runs, kcat's over ours",
        );
        summary.add(
            "kafka_consume_cpu_kcat_over_ours",
            kcat_c.cpu_ns as f64 / ours_c.cpu_ns as f64,
            None,
            "CPU time (user + system, all threads) of the same consume runs, kcat's over ours",
        );
    }

    /// A broker restart in the middle of a paced stream: nothing lost, nothing twice.
    fn broker_restart(&self, quick: bool, summary: &mut Summary) -> Result<()> {
        let b = &self.b;
        let (m, rate_r) = if quick {
            (40_000u64, 20_000)
        } else {
            (100_000, 25_000)
        };
        let gen_size = 200;
        let mut c = ours(
            &self.sl,
            &format!(
                "gen count={m} size={gen_size} rate={rate_r} | kafkaout topic=restart brokers={} partitions=2",
                b.addr
            ),
        );
        let t0 = Instant::now();
        let child = c
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
        let t = read_back(&self.sl, &b.addr, &b.dir, "restart", m, gen_size, gen_seq)?;
        println!(
            "  restart: {m} messages paced at {rate_r}/s, the broker restarted 0.8 s in (took {down:.1} s); producer {} after {produced_in:.1} s, {delivered} delivered; the topic holds {t}",
            if out.status.success() { "ended" } else { "FAILED" }
        );
        if t.wrong != 0 {
            return Err(err(format!(
                "the restart topic holds messages gen did not send: {t}"
            )));
        }
        summary.add(
            "kafka_lost_after_broker_restart",
            t.lost as f64,
            Some(Target::AtMost(0.0)),
            format!("of {m} messages produced across a broker restart: sequence numbers missing"),
        );
        summary.add(
            "kafka_duplicates_after_broker_restart",
            t.duplicates as f64,
            Some(Target::AtMost(0.0)),
            format!("of {m} messages produced across a broker restart: messages beyond the first of their sequence number"),
        );
        Ok(())
    }
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(600));
    let mut summary = Summary::default();
    figures_with(quick, a.messages, &mut summary)?;
    summary.print()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_lost_duplicated_and_foreign_messages() {
        let t = Tally::of(
            4,
            [Some(0), Some(1), Some(1), Some(3), None, Some(9)].into_iter(),
        );
        assert_eq!(
            t,
            Tally {
                messages: 6,
                lost: 1,
                duplicates: 1,
                wrong: 2
            }
        );
        assert!(!t.exact(4));
        assert!(Tally::of(2, [Some(1), Some(0)].into_iter()).exact(2));
        // Two duplicates make up for two losses in a bare count; not here.
        assert!(!Tally::of(3, [Some(0), Some(0), Some(0)].into_iter()).exact(3));
    }

    #[test]
    fn both_producers_messages_read_as_their_line_numbers() {
        let line = format!("{:0100}", 123456u64);
        // kcat: the line without its newline; ours: without its first byte.
        assert_eq!(decimal_seq(line.as_bytes()), Some(123456));
        let ours = format!("{}\n", &line[1..]);
        assert_eq!(ours.len(), 100);
        assert_eq!(decimal_seq(ours.as_bytes()), Some(123456));
        assert_eq!(decimal_seq(b"12x4"), None);
        assert_eq!(
            decimal_seq(&[b'1'; 100]),
            None,
            "beyond u64: not a line number"
        );
        let data = [line.as_bytes(), ours.as_bytes(), &line.as_bytes()[..50]].concat();
        let t = tally_records(123457, &data, 100, decimal_seq);
        assert_eq!((t.messages, t.duplicates, t.wrong), (3, 1, 1));
    }
}
