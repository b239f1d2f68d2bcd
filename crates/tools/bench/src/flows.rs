//! The `flows` subcommand (issue 37): flow export, `ipfix` against softflowd.
//!
//! - Traffic: `examples/sample.pcap` repeated into one big capture file, each repetition
//!   with its IP addresses rewritten (so every repetition brings new conversations, the
//!   flow table grows as on a busy link), sized from the machine: as large as makes our
//!   run spend about [`CPU_GOAL`] s of CPU (20 MB with --quick).
//! - Both read the same file: `streamline run 'pcapin file=BIG | ipfix to=SINK ... | null'`
//!   and `softflowd -r BIG -n SINK -v 10 -A milli`. A file rather than a replay into a
//!   veth: a replay is limited by tcpreplay (about 240k packets/s on veth here), below
//!   what either exporter keeps, so it would measure the replay; from a file each tool
//!   meters every packet as fast as it can and the CPU it takes per packet is its own. The
//!   CPU is user + system of each whole command (`RUSAGE_CHILDREN`): all the work each
//!   exporter causes, since nothing else runs for it (the UDP sink both export to is a
//!   socket of this program, drained by a thread, the same for both).
//! - Same timeouts: softflowd ends no flow by time when it reads a file, so ours runs with
//!   timeouts longer than the capture (`idle=3600 active=604800 fin=300`) and a table as
//!   large as softflowd's (`-m`): both hold every flow until the end and export it then.
//! - Counts checked before the ratio: packets metered, flows and records exported (ours
//!   from its `ipfix:` line, softflowd's from its statistics) are equal, and the sink got
//!   every datagram each said it sent.
//!
//! Not measured yet: `ipfix_attach_extra_cpu_pct` (needs the kernel flow cache and a
//! shared live capture).

use crate::pcap::{timed, Cost};
use crate::util::{
    before, cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir, MIB,
};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// CPU seconds our run should take on the full-size capture.
const CPU_GOAL: f64 = 3.0;
/// The probe capture's size.
const PROBE_BYTES: u64 = 20_000_000;
/// softflowd's table and ours: larger than any capture here holds flows.
const TABLE: u64 = 4_000_000;

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

struct Big {
    path: PathBuf,
    bytes: u64,
    packets: u64,
    repeats: u64,
}

/// Rewrites the addresses of an Ethernet frame's IPv4 or IPv6 header for repetition `rep`
/// (the second and third bytes of IPv4 addresses, bytes 12-13 of IPv6 ones): the same
/// traffic between other hosts.
fn readdress(frame: &mut [u8], rep: u64) {
    let (a, b) = ((rep >> 8) as u8, rep as u8);
    match frame.get(12..14) {
        Some([0x08, 0x00]) if frame.len() >= 34 => {
            for at in [26, 30] {
                frame[at + 1] ^= a;
                frame[at + 2] ^= b;
            }
        }
        Some([0x86, 0xdd]) if frame.len() >= 54 => {
            for at in [22, 38] {
                frame[at + 12] ^= a;
                frame[at + 13] ^= b;
            }
        }
        _ => {}
    }
}

/// `sample` repeated, readdressed, until the file holds at least `target` bytes.
fn build(sample: &Path, path: &Path, target: u64) -> Result<Big> {
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
    let (Some(first), Some(last)) = (
        pkts.iter().map(|p| p.timestamp).min(),
        pkts.iter().map(|p| p.timestamp).max(),
    ) else {
        return Err(err(format!("{} holds no packets", sample.display())));
    };
    let shift = last - first + Duration::from_secs(1);
    let out = std::fs::File::create(path)
        .map_err(|e| err(format!("creating {}: {e}", path.display())))?;
    let mut w = PcapWriter::with_header(std::io::BufWriter::with_capacity(MIB, out), header)
        .map_err(|e| err(format!("writing {}: {e}", path.display())))?;
    let (mut bytes, mut packets, mut repeats) = (24u64, 0u64, 0u64);
    let mut frame = Vec::new();
    while bytes < target {
        for p in &pkts {
            frame.clear();
            frame.extend_from_slice(&p.data);
            readdress(&mut frame, repeats);
            let q = PcapPacket::new(p.timestamp + shift * repeats as u32, p.orig_len, &frame);
            bytes += w
                .write_packet(&q)
                .map_err(|e| err(format!("writing {}: {e}", path.display())))?
                as u64;
            packets += 1;
        }
        repeats += 1;
    }
    use std::io::Write;
    w.into_writer()
        .flush()
        .map_err(|e| err(format!("writing {}: {e}", path.display())))?;
    Ok(Big {
        path: path.to_path_buf(),
        bytes,
        packets,
        repeats,
    })
}

/// A UDP socket both exporters send to, drained by a thread that counts datagrams.
struct Sink {
    port: u16,
    got: Arc<AtomicU64>,
}

impl Sink {
    fn start() -> Result<Sink> {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        let port = s.local_addr()?.port();
        crate::proc::set_rcvbuf(&s, 64 << 20)?;
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while s.recv(&mut buf).is_ok() {
                g.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(Sink { port, got })
    }

    /// Datagrams received since the last call, once they stop coming.
    fn take(&self) -> u64 {
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let now = self.got.load(Ordering::Relaxed);
            if now == last {
                return self.got.swap(0, Ordering::Relaxed);
            }
            last = now;
        }
    }
}

/// What one exporter did: packets metered, flows, records and messages exported.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Counts {
    packets: u64,
    flows: u64,
    records: u64,
    messages: u64,
}

struct Setup {
    streamline: PathBuf,
    big: Big,
    sink: Sink,
}

impl Setup {
    fn ours(&self) -> Result<(Cost, Counts)> {
        let pipeline = format!(
            "pcapin file={} | ipfix to=127.0.0.1:{} idle=3600 active=604800 fin=300 flows={TABLE} | null",
            self.big.path.display(),
            self.sink.port
        );
        let (cost, out) = timed(
            Command::new(&self.streamline).args(["run", "-q", &pipeline]),
            &format!("streamline run '{pipeline}'"),
        )?;
        let se = String::from_utf8_lossy(&out.stderr);
        let line = se
            .lines()
            .find(|l| l.starts_with("ipfix: "))
            .ok_or_else(|| err(format!("no `ipfix:` line from our run: {se}")))?;
        let n = |w: &str| before(line, w).ok_or_else(|| err(format!("no '{w}' in: {line}")));
        let c = Counts {
            packets: n(" packets in")?,
            flows: n(" flows,")?,
            records: n(" records in")?,
            messages: n(" messages")?,
        };
        if n(" flows evicted")? != 0 {
            return Err(err(format!(
                "our table overflowed, the counts would differ: {line}"
            )));
        }
        Ok((cost, c))
    }

    fn softflowd(&self) -> Result<(Cost, Counts)> {
        let (cost, out) = timed(
            Command::new("softflowd")
                .args([
                    "-r",
                    self.big.path.to_str().unwrap(),
                    "-n",
                    &format!("127.0.0.1:{}", self.sink.port),
                    "-v",
                    "10",
                    "-A",
                    "milli",
                    "-d",
                ])
                // No `-c`: reading a file it has no control socket, and softflowd 1.1
                // given `-c` after `-r` may block in accept() (its poll array is never
                // filled for files).
                .args(["-m", &TABLE.to_string()]),
            "softflowd",
        )?;
        let so = String::from_utf8_lossy(&out.stdout);
        let line = |p: &str| {
            so.lines()
                .find(|l| l.starts_with(p))
                .map(str::to_string)
                .ok_or_else(|| err(format!("no '{p}' in softflowd's statistics: {so}")))
        };
        let (pl, fl) = (line("Packets processed:")?, line("Flows exported:")?);
        let c = Counts {
            packets: pl
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| err(pl.clone()))?,
            flows: fl
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| err(fl.clone()))?,
            records: before(&fl, " records)").ok_or_else(|| err(fl.clone()))?,
            messages: before(&fl, " packets").ok_or_else(|| err(fl.clone()))?,
        };
        let forced = line("Flows expired:")?;
        if !forced.contains("(0 forced)") {
            return Err(err(format!("softflowd's table overflowed: {forced}")));
        }
        Ok((cost, c))
    }

    /// Both once, untimed (page cache warm), with every count checked.
    fn check(&self) -> Result<Counts> {
        let (_, ours) = self.ours()?;
        let got_ours = self.sink.take();
        let (_, theirs) = self.softflowd()?;
        let got_theirs = self.sink.take();
        if ours.packets != theirs.packets
            || ours.flows != theirs.flows
            || ours.records != theirs.records
        {
            return Err(err(format!(
                "counts differ: ours {ours:?}, softflowd's {theirs:?}"
            )));
        }
        if got_ours != ours.messages || got_theirs != theirs.messages {
            return Err(err(format!(
                "the sink got {got_ours} of our {} messages and {got_theirs} of softflowd's {}",
                ours.messages, theirs.messages
            )));
        }
        Ok(ours)
    }
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(20 * 60)
    });
    let reps = if quick { 1 } else { a.reps.max(1) };
    if Command::new("softflowd").arg("-h").output().is_err() {
        return Err(err(
            "softflowd is not installed (the peer); install it: apt-get install softflowd",
        ));
    }
    let streamline = crate::capture::streamline()?;
    println!(
        "streamline-bench flows ({} mode)",
        if quick { "quick" } else { "full" }
    );
    let dir = TempDir::new("flows")?;
    let big_path = dir.path().join("big.pcap");
    cleanup_on_abnormal_exit(&[&big_path, dir.path()]);
    let mut s = Setup {
        streamline,
        big: build(&a.sample, &big_path, PROBE_BYTES)?,
        sink: Sink::start()?,
    };
    if !quick || a.mb.is_some() {
        let target = match a.mb {
            Some(mb) => mb * 1_000_000,
            None => {
                let (c, _) = s.ours()?;
                s.sink.take();
                let t = (s.big.bytes as f64 * CPU_GOAL / c.cpu.max(0.01)) as u64;
                println!("size: our run took {:.2} s of CPU on {:.0} MB: {:.0} MB for about {CPU_GOAL} s", c.cpu, s.big.bytes as f64 / 1e6, t as f64 / 1e6);
                t.clamp(PROBE_BYTES, 2_000_000_000)
            }
        };
        s.big = build(&a.sample, &big_path, target)?;
    }
    println!(
        "capture: {} x {} readdressed ({} packets, {:.1} MB)",
        s.big.repeats,
        a.sample.display(),
        s.big.packets,
        s.big.bytes as f64 / 1e6
    );
    println!("ours: streamline run -q 'pcapin file=BIG | ipfix to=SINK idle=3600 active=604800 fin=300 flows={TABLE} | null'");
    println!("peer: softflowd -r BIG -n SINK -v 10 -A milli -d -m {TABLE}");
    let counts = s.check()?;
    println!("counts: both metered {} packets into {} flows, {} records; the sink got every message of each", counts.packets, counts.flows, counts.records);
    let (mut co, mut cs) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        co.push(s.ours()?.0);
        s.sink.take();
        cs.push(s.softflowd()?.0);
        s.sink.take();
    }
    let ((to, wo), (ts, ws)) = (Cost::best(&co).pair(), Cost::best(&cs).pair());
    let per = |cpu: f64| cpu / counts.packets as f64 * 1e9;
    println!(
        "\n{:<12} {:>10} {:>10} {:>14}",
        "run", "CPU s", "wall s", "ns CPU/packet"
    );
    println!("{:<12} {to:>10.3} {wo:>10.3} {:>14.1}", "ours", per(to));
    println!(
        "{:<12} {ts:>10.3} {ws:>10.3} {:>14.1}",
        "softflowd",
        per(ts)
    );
    let mut sum = Summary::default();
    sum.add(
        "ipfix_cpu_per_packet_softflowd_over_ours",
        ts / to,
        Some(Target::AtLeast(3.0)),
        format!(
            "softflowd's CPU per packet over ours, both reading the same {}-packet file ({} flows)",
            counts.packets, counts.flows
        ),
    );
    // ---- httplog (another helper's): the lead folds
    // `httplog_requests_per_cpu_second_vs_tshark` in here, as one more `sum.add(..)` of
    // this subcommand. ----
    sum.print()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readdressing_changes_both_addresses_and_repetition_zero_none() {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let orig = f.clone();
        readdress(&mut f, 0);
        assert_eq!(f, orig);
        readdress(&mut f, 0x0102);
        assert_eq!(&f[26..34], &[10, 1, 2, 1, 10, 1, 2, 2]);
    }

    #[test]
    fn numbers_before_words() {
        let l = "ipfix: 5245 packets in 96 flows, 173 records in 8 messages (1 template sets); 0 flows evicted from a full table";
        assert_eq!(before(l, " packets in"), Some(5245));
        assert_eq!(before(l, " records in"), Some(173));
        assert_eq!(before(l, " flows evicted"), Some(0));
        assert_eq!(
            before(
                "Flows exported: 96 (173 records) in 8 packets (0 failures)",
                " records)"
            ),
            Some(173)
        );
    }
}
