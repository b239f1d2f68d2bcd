//! What the legacy capture tests (`legacy.rs`) share: our libpcap's directory, capture
//! programs started on it or on the system's libpcap and stopped for their totals, the
//! packets of their files, and the sample replayed into a veth pair.

use super::*;

/// The directory holding the stand-in libpcap.so.0.8.
pub(crate) fn compat_dir() -> PathBuf {
    let dir = Path::new(BIN).parent().unwrap();
    assert!(dir.join("libslpcap.so").exists() || dir.join("deps/libslpcap.so").exists(), "libslpcap.so is missing in {}: build it (`cargo build -p compat`; `cargo test --workspace` builds it)", dir.display());
    let out = Command::new(BIN)
        .args(["compat", "--print-dir"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "streamline compat --print-dir: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `program` on our libpcap, talking to daemon `d`.
pub(crate) fn on_streamline(d: &Daemon, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", compat_dir())
        .env("STREAMLINE_SOCKET", &d.socket)
        .env_remove("STREAMLINE_PCAP_FALLBACK");
    c
}

/// A capture program a test started: killed when dropped unless `stop`ped, so a failing
/// test leaves no reader behind.
pub(crate) struct Reader {
    pub(crate) child: Option<Child>,
    pub(crate) rest: Option<std::thread::JoinHandle<String>>,
}

impl Reader {
    pub(crate) fn listening(started: (Child, std::thread::JoinHandle<String>)) -> Reader {
        Reader {
            child: Some(started.0),
            rest: Some(started.1),
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGINT it (a capture program's clean stop); its exit status and its stderr.
    pub(crate) fn interrupt(mut self) -> (std::process::ExitStatus, String) {
        let c = self.child.take().expect("running");
        assert!(Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status()
            .unwrap()
            .success());
        let out = c.wait_with_output().unwrap();
        (
            out.status,
            self.rest.take().expect("running").join().unwrap(),
        )
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A recording tcpdump (`-w out`), started and listening.
pub(crate) fn tcpdump(c: Command, dev: &str, filter: &str, out: &Path) -> Reader {
    tcpdump_with(c, &[], dev, filter, out)
}

pub(crate) fn tcpdump_with(
    mut c: Command,
    extra: &[&str],
    dev: &str,
    filter: &str,
    out: &Path,
) -> Reader {
    // -Z root: the reader stays root (Debian's tcpdump otherwise drops to user tcpdump,
    // which then could not write the test's directory).
    // -U and --immediate-mode: each packet delivered and written as it comes, so a file
    // holds what its reader has as it comes (see `caught_up`); without immediate mode
    // the system's libpcap holds packets in a kernel block for up to its 1 s timeout.
    c.args(["-Z", "root", "-n", "-U", "--immediate-mode"])
        .args(extra)
        .args(["-i", dev, "-w"])
        .arg(out)
        .stdout(Stdio::null());
    if !filter.is_empty() {
        c.arg(filter);
    }
    Reader::listening(tcpdump_listening(c))
}

/// SIGINT a tcpdump and return its totals: (captured, received by filter, dropped).
pub(crate) fn stop(r: Reader) -> (u64, u64, u64, String) {
    let (status, err) = r.interrupt();
    assert!(status.success(), "tcpdump failed: {err}");
    let n = |what: &str| {
        err.lines()
            .find(|l| l.contains(what))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no '{what}' in tcpdump's totals:\n{err}"))
    };
    (
        n("captured"),
        n("received by filter"),
        n("dropped by kernel"),
        err,
    )
}

/// The packets of a capture file: (caplen bytes, wire length), timestamps aside.
pub(crate) fn packets(path: &Path) -> Vec<(Vec<u8>, u32)> {
    timed_packets(path)
        .1
        .into_iter()
        .map(|(_, d, l)| (d, l))
        .collect()
}

/// A capture file's timestamp precision (nanoseconds?) and its packets with their times.
/// Read by hand: the pcap-file crate refuses records whose wire length exceeds the file's
/// snap length, which is exactly what a capture with `-s 96` writes.
pub(crate) fn timed_packets(path: &Path) -> (bool, Vec<(Duration, Vec<u8>, u32)>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    let u32le = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let nano = match u32le(0) {
        0xa1b2c3d4 => false,
        0xa1b23c4d => true,
        m => panic!(
            "{}: magic {m:#x} (not a little-endian pcap file)",
            path.display()
        ),
    };
    let (mut at, mut v) = (24, Vec::new());
    while at + 16 <= b.len() {
        let (sec, frac, incl, orig) = (
            u32le(at),
            u32le(at + 4),
            u32le(at + 8) as usize,
            u32le(at + 12),
        );
        assert!(
            at + 16 + incl <= b.len(),
            "{}: record at {at} runs past the end",
            path.display()
        );
        let ts = Duration::new(sec as u64, if nano { frac } else { frac * 1000 });
        v.push((ts, b[at + 16..at + 16 + incl].to_vec(), orig));
        at += 16 + incl;
    }
    assert_eq!(at, b.len(), "{}: trailing bytes", path.display());
    (nano, v)
}

/// Replay the sample `loops` times at `pps` from the namespace's end.
pub(crate) fn replay(v: &kernel::netns::Veth, pps: u32, loops: u32) {
    let o = v
        .command("tcpreplay")
        .args([
            "-q",
            "-i",
            &v.there,
            "--pps",
            &pps.to_string(),
            "--loop",
            &loops.to_string(),
            SAMPLE,
        ])
        .output()
        .expect("tcpreplay");
    assert!(
        o.status.success(),
        "tcpreplay: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Offline count of `filter` over the sample, by the system's tcpdump (a line per packet).
pub(crate) fn offline_count(filter: &str) -> u64 {
    let mut c = Command::new("tcpdump");
    c.args(["-n", "-q", "-r", SAMPLE]);
    if !filter.is_empty() {
        c.arg(filter);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "tcpdump -r: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).lines().count() as u64
}

/// Wait until each reader writing one of `files` has written at least as many packets as
/// it is owed (they write each packet as it comes, `-U --immediate-mode`), at most 60 s;
/// fails naming the files that fell short. The counts themselves are checked afterwards.
pub(crate) fn caught_up(files: &[(PathBuf, u64)]) {
    common::wait_until(
        "the readers write the packets sent",
        Duration::from_secs(60),
        || {
            let short: Vec<String> = files
                .iter()
                .filter_map(|(f, want)| {
                    let n = common::pcap_packets(f, "");
                    (n < *want).then(|| format!("{} has {n} of {want}", f.display()))
                })
                .collect();
            short.is_empty().then_some(()).ok_or(short.join(", "))
        },
    );
}

/// Wait until the readers writing `files` have caught up: no file grew for 1.25 s, at
/// most 60 s. Only for a reader that is owed no known count (one that dropped packets);
/// the others wait with [`caught_up`].
pub(crate) fn settle(files: &[PathBuf]) {
    let size = || {
        files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .collect::<Vec<_>>()
    };
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let (mut last, mut still) = (size(), 0);
    while still < 5 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(250));
        let now = size();
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
}

pub(crate) fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-legacy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
