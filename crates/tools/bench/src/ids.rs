//! The `ids` subcommand (issue 36): the `ips` filter on a real-looking traffic mix, with
//! 10 and 1000 rules, and against ngrep with one pattern.
//!
//! - Traffic: `examples/sample.pcap` (HTTP over IPv4 and IPv6, DNS, ICMP, syslog, bulk TCP)
//!   repeated ([`crate::pcap::build_capture`]), sized from the machine: as large as makes
//!   our 10-rule run spend about [`CPU_GOAL`] s of CPU (20 MB with --quick).
//! - Rules: a generated set in the rules' common forms (stream content rules with
//!   modifiers, packet rules on UDP, `http.uri` and `http.header` rules, some pcre), most
//!   of whose patterns never occur, and a few that do (so alerts are written). The 10-rule
//!   set is the first 10 of the 1000. Counts checked: each run inspects every IP packet of
//!   the capture (its `ips:` line), and the 1000-rule run gives the 10 shared rules exactly
//!   the alerts the 10-rule run gave them (from both runs' fast.log).
//! - Peer: `ngrep -q -I BIG -X HEX` (one pattern over every packet's payload, nothing else
//!   to do) against ours with one packet rule (`alert ip any any -> any any
//!   (content:...; flow:no_stream; ...)`); the pattern occurs rarely, so output costs
//!   neither side; the number of packets ngrep prints must equal our alerts.
//!
//! CPU: user + system of the whole command and its children (`RUSAGE_CHILDREN`), best of
//! `reps`, each command once untimed first (page cache warm for all). Gbit/s per core:
//! the capture's packet bytes x 8 over that CPU time.
//!
//! - Kernel push-down (Kernel Snort, thesis 7.3.2): live traffic on a veth pair
//!   ([`crate::capture::ips_pushdown`]: 64-byte UDP, 1% to port 7), `rx | ips` with a
//!   service rule set ([`service_rules`]: UDP 7 and 53, TCP 21, 25, 80 and 8080) whose
//!   header stage runs on the capture socket, against the same with `placed=user`:
//!   system-wide extra CPU per packet taken, softirq included, counts checked (ips judged
//!   every port-7 packet and nothing else).

use crate::pcap::{build_capture, Big, Cost};
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// CPU seconds the 10-rule run should take on the full-size capture.
const CPU_GOAL: f64 = 3.0;
/// The probe capture's size.
const PROBE_BYTES: u64 = 20_000_000;
/// The pattern of the one-pattern comparison: in the sample's HTTP requests, rarely.
const ONE_PATTERN: &[u8] = b"/robots.txt";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed runs of each command (the fastest counts); ignored with --quick (1).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// The capture to repeat.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap"))]
    sample: PathBuf,
    /// Size of the large capture in MB (10^6 bytes); default: from the machine.
    #[arg(long)]
    mb: Option<u64>,
}

/// Rules on services (UDP 7 and 53, TCP 21, 25, 80, 8080), `n` of them, with patterns
/// that never occur in the push-down benchmark's traffic: its header stage is
/// `(tcp and (port 21 or ...)) or (udp and (port 53 or port 7)) or ...`.
fn service_rules(n: usize) -> String {
    let mut r = Rng(0x1d5);
    (0..n)
        .map(|i| {
            let (proto, port) = [
                ("udp", 7),
                ("udp", 53),
                ("tcp", 21),
                ("tcp", 25),
                ("tcp", 80),
                ("tcp", 8080),
            ][i % 6];
            format!(
                "alert {proto} any any -> any {port} (msg:\"s{i}\"; content:\"{}\"; sid:{};)\n",
                r.word(8),
                2_000_000 + i
            )
        })
        .collect()
}

use crate::util::Rng;

/// `n` rules; the first ones match the sample's traffic now and then.
fn rules(n: usize) -> String {
    let hits = [
        r#"alert http any any -> any any (msg:"robots"; flow:to_server,established; http.uri; content:"/robots.txt"; sid:1;)"#,
        r#"alert tcp any any -> any 80 (msg:"curl"; flow:to_server,established; content:"User-Agent|3a| curl/"; nocase; sid:2;)"#,
        r#"alert udp any any -> any 53 (msg:"dns example"; content:"|07|example"; sid:3;)"#,
        r#"alert http any any -> any any (msg:"post api"; http.method; content:"POST"; http.uri; content:"/api/"; sid:4;)"#,
        r#"alert tcp any 80 -> any any (msg:"404"; flow:to_client; content:"HTTP/1.1 404"; depth:12; sid:5;)"#,
    ];
    let mut r = Rng(0x1d5_5eed);
    let mut out = String::new();
    for i in 0..n {
        let sid = 100 + i;
        if let Some(h) = hits.get(i) {
            out += h;
            out.push('\n');
            continue;
        }
        let len = 6 + (r.next() % 5) as usize;
        let (a, b) = (r.word(len), r.word(4));
        let rule = match i % 10 {
            0..=4 => format!("alert tcp any any -> any any (msg:\"c{i}\"; flow:established; content:\"{a}\"; content:\"{b}\"; distance:0; within:64; sid:{sid};)"),
            5 | 6 => format!("alert udp any any -> any any (msg:\"u{i}\"; content:\"{a}\"; nocase; sid:{sid};)"),
            7 => format!("alert http any any -> any any (msg:\"h{i}\"; http.uri; content:\"/{a}\"; sid:{sid};)"),
            8 => format!("alert http any any -> any any (msg:\"hh{i}\"; http.header; content:\"{a}\"; nocase; sid:{sid};)"),
            _ => format!("alert tcp any any -> any any (msg:\"p{i}\"; content:\"{a}\"; pcre:\"/{a}[0-9]+{b}/R\"; sid:{sid};)"),
        };
        out += &rule;
        out.push('\n');
    }
    out
}

/// A whole command run and timed (`crate::pcap::timed`), its output as text.
fn timed(cmd: &mut Command, what: &str) -> Result<(Cost, String, String)> {
    let (cost, out) = crate::pcap::timed(cmd, what)?;
    Ok((
        cost,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

struct Setup {
    streamline: PathBuf,
    big: Big,
    dir: PathBuf,
}

impl Setup {
    /// Ours with the rule file `rules`: its cost, the packets it inspected and its alerts
    /// per sid (from fast.log).
    fn ours(&self, rules: &Path, tag: &str) -> Result<(Cost, u64, BTreeMap<u32, u64>)> {
        let fast = self.dir.join(format!("fast-{tag}.log"));
        let pipeline = format!(
            "pcapin file={} | ips rules={} mode=ids fast={} | null",
            self.big.path.display(),
            rules.display(),
            fast.display()
        );
        let (cost, _, se) = timed(
            Command::new(&self.streamline).args(["run", "-q", &pipeline]),
            &format!("streamline run '{pipeline}'"),
        )?;
        let line = se
            .lines()
            .find(|l| l.starts_with("ips: "))
            .ok_or_else(|| err(format!("no `ips:` line from our run: {se}")))?;
        let num = |after: &str| -> Option<u64> {
            let i = line.find(after)?;
            line[..i].split_whitespace().last()?.parse().ok()
        };
        let inspected =
            num(" packets,").ok_or_else(|| err(format!("no packet count in: {line}")))?;
        let not_ip = num(" frames not IP").unwrap_or(0);
        // Frames no rule looks at (the rules' header stage) pass unjudged.
        let unjudged = num(" frames no rule looks at").unwrap_or(0);
        // IP fragments (IPv4 and IPv6) are inspected as the datagrams they make; others pass uninspected.
        let fragments = num(" IP fragments made").unwrap_or(0);
        let datagrams = num(" datagrams (").unwrap_or(0);
        let uninspected = num(" fragments uninspected").unwrap_or(0);
        if inspected - datagrams + fragments + uninspected + not_ip + unjudged != self.big.packets {
            return Err(err(format!(
                "ours inspected {inspected} packets ({datagrams} of them datagrams made of {fragments} fragments) and passed {uninspected} fragments, {not_ip} non-IP frames and {unjudged} frames no rule looks at uninspected, but the capture holds {} frames: {line}",
                self.big.packets
            )));
        }
        let mut per = BTreeMap::new();
        for l in std::fs::read_to_string(&fast)?.lines() {
            // `TS  [**] [1:SID:REV] MSG ...`
            let sid = l
                .split("[1:")
                .nth(1)
                .and_then(|r| r.split(':').next())
                .and_then(|s| s.parse::<u32>().ok())
                .ok_or_else(|| err(format!("a fast.log line without a sid: {l}")))?;
            *per.entry(sid).or_insert(0) += 1;
        }
        Ok((cost, inspected, per))
    }

    fn ngrep(&self) -> Result<(Cost, u64)> {
        let hex: String = ONE_PATTERN.iter().map(|c| format!("{c:02x}")).collect();
        let (cost, so, _) = timed(
            Command::new("ngrep")
                .args(["-q", "-X", &hex, "-I"])
                .arg(&self.big.path),
            "ngrep",
        )?;
        let n = so
            .lines()
            .filter(|l| l.starts_with("T ") || l.starts_with("U ") || l.starts_with("I "))
            .count() as u64;
        Ok((cost, n))
    }
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(20 * 60)
    });
    let reps = if quick { 1 } else { a.reps.max(1) };
    if Command::new("ngrep").arg("-V").output().is_err() {
        return Err(err(
            "ngrep is not installed (the one-pattern peer); install it: apt-get install ngrep",
        ));
    }
    let streamline = crate::capture::streamline()?;
    println!(
        "streamline-bench ids ({} mode)",
        if quick { "quick" } else { "full" }
    );
    let dir = TempDir::new("ids")?;
    let big_path = dir.path().join("big.pcap");
    cleanup_on_abnormal_exit(&[&big_path, dir.path()]);
    let files: Vec<(usize, PathBuf)> = [1usize, 10, 1000]
        .iter()
        .map(|&n| (n, dir.path().join(format!("r{n}.rules"))))
        .collect();
    for (n, f) in &files[1..] {
        std::fs::write(f, rules(*n))?;
    }
    let one = format!(
        "alert ip any any -> any any (msg:\"one\"; flow:no_stream; content:\"{}\"; sid:1;)\n",
        String::from_utf8_lossy(ONE_PATTERN)
    );
    std::fs::write(&files[0].1, one)?;
    let mut s = Setup {
        streamline,
        big: build_capture(&a.sample, &big_path, PROBE_BYTES)?,
        dir: dir.path().to_path_buf(),
    };
    if !quick || a.mb.is_some() {
        let target = match a.mb {
            Some(mb) => mb * 1_000_000,
            None => {
                let (c, _, _) = s.ours(&files[1].1, "probe")?;
                let t = (s.big.bytes as f64 * CPU_GOAL / c.cpu.max(0.01)) as u64;
                println!("size: the 10-rule run took {:.2} s of CPU on {:.0} MB: {:.0} MB for about {CPU_GOAL} s", c.cpu, s.big.bytes as f64 / 1e6, t as f64 / 1e6);
                t.clamp(PROBE_BYTES, 2_000_000_000)
            }
        };
        s.big = build_capture(&a.sample, &big_path, target)?;
    }
    let bits = s.big.bytes as f64 * 8.0;
    println!(
        "capture: {} x {} ({} packets, {:.1} MB)",
        s.big.repeats,
        a.sample.display(),
        s.big.packets,
        s.big.bytes as f64 / 1e6
    );
    println!("ours: streamline run -q 'pcapin file=BIG | ips rules=RULES mode=ids fast=FILE | null' with 1 (one pattern), 10 and 1000 rules; peer: ngrep -q -X {} -I BIG", String::from_utf8_lossy(ONE_PATTERN));
    // Untimed first runs (page cache), then alternating timed runs.
    let (_, _, ten_alerts) = s.ours(&files[1].1, "10")?;
    let (_, _, thousand_alerts) = s.ours(&files[2].1, "1000")?;
    for (sid, n) in &ten_alerts {
        let m = thousand_alerts.get(sid).copied().unwrap_or(0);
        if m != *n {
            return Err(err(format!(
                "rule {sid} alerted {n} times with 10 rules but {m} with 1000"
            )));
        }
    }
    if ten_alerts.values().sum::<u64>() == 0 {
        return Err(err(
            "the 10 rules found nothing in the capture: nothing is checked",
        ));
    }
    let (_, ng_n) = s.ngrep()?;
    let (_, _, one_alerts) = s.ours(&files[0].1, "1")?;
    let ours_n = one_alerts.get(&1).copied().unwrap_or(0);
    if ours_n != ng_n || ng_n == 0 {
        return Err(err(format!(
            "one pattern: ngrep found {ng_n} packets, ours alerted {ours_n}"
        )));
    }
    println!("counts: every run took all {} frames (IP ones inspected, the rest passed); the 10 shared rules alerted {} times in both rule sets; one pattern: {ng_n} packets (ngrep) = {ours_n} alerts (ours)", s.big.packets, ten_alerts.values().sum::<u64>());
    let (mut c1, mut c10, mut c1000, mut cng) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        c10.push(s.ours(&files[1].1, "10")?.0);
        c1000.push(s.ours(&files[2].1, "1000")?.0);
        c1.push(s.ours(&files[0].1, "1")?.0);
        cng.push(s.ngrep()?.0);
    }
    let ((t10, w10), (t1000, w1000), (t1, w1), (tng, wng)) = (
        Cost::best(&c10).pair(),
        Cost::best(&c1000).pair(),
        Cost::best(&c1).pair(),
        Cost::best(&cng).pair(),
    );
    println!(
        "\n{:<28} {:>10} {:>10} {:>14}",
        "run", "CPU s", "wall s", "Gbit/s/core"
    );
    for (what, cpu, wall) in [
        ("ours, 10 rules", t10, w10),
        ("ours, 1000 rules", t1000, w1000),
        ("ours, 1 pattern", t1, w1),
        ("ngrep, 1 pattern", tng, wng),
    ] {
        println!(
            "{what:<28} {cpu:>10.3} {wall:>10.3} {:>14.3}",
            bits / cpu / 1e9
        );
    }
    let mut sum = Summary::default();
    sum.add(
        "ids_gbps_per_core_1000_rules",
        bits / t1000 / 1e9,
        None,
        format!(
            "capture bytes x 8 over the CPU of `pcapin | ips` with 1000 rules ({} packets)",
            s.big.packets
        ),
    );
    sum.add(
        "ids_1000_vs_10_rules_throughput",
        t10 / t1000,
        Some(Target::AtLeast(0.5)),
        "throughput with 1000 rules over with 10 (CPU per capture)".to_string(),
    );
    sum.add(
        "ids_cpu_vs_ngrep_one_pattern",
        tng / t1,
        Some(Target::AtLeast(2.0)),
        format!("ngrep's CPU over ours, one pattern over every packet ({ng_n} matches each)"),
    );
    let services = dir.path().join("services.rules");
    std::fs::write(&services, service_rules(120))?;
    println!("\n== kernel push-down: rx | ips (120 service rules), header stage on the socket vs placed=user ==");
    if let Some((ratio, note)) = crate::capture::ips_pushdown(&services, quick)? {
        sum.add(
            "ids_kernel_pushdown_cpu_vs_user_only",
            ratio,
            Some(Target::AtLeast(1.5)),
            format!("placed=user over the header stage on the socket: {note}"),
        );
    }
    sum.print()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_rules_load_and_the_small_set_is_the_large_sets_start() {
        let (ten, thousand) = (rules(10), rules(1000));
        assert!(thousand.starts_with(&ten));
        let set = filters::ids::rules::parse(
            &thousand,
            "bench",
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(set.rules.len(), 1000);
    }
}
