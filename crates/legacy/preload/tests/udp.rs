//! Batched UDP sockets (libslpreload.so, `STREAMLINE_UDP_PORTS`) under real programs:
//! unmodified dnsmasq answering DNS queries on loopback (IPv4 and IPv6) and on a veth pair
//! into a network namespace this test makes, a Python epoll echo server, and a Python
//! transcript of receive/send semantics, each compared with the same program run plain.
//! Both reception modes (`mmsg`, `ring`). The library's counters (`STREAMLINE_UDP_STATS`)
//! show that it served the listed port, and only that one.
//!
//! Needs root (the ring is an AF_PACKET capture; namespaces), dnsmasq (`dnsmasq-base`),
//! dig (`dnsutils`), python3 and iproute2; fails naming what is missing.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py");
const MODES: [&str; 2] = ["mmsg", "ring"];

/// libslpreload.so of this build: the newest of target/<profile>/ (`cargo build -p
/// preload`) and target/<profile>/deps/ (where `cargo test` leaves the cdylib).
fn lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [
        deps.parent().unwrap().join("libslpreload.so"),
        deps.join("libslpreload.so"),
    ];
    let newest = candidates
        .iter()
        .filter_map(|c| Some((std::fs::metadata(c).ok()?.modified().ok()?, c.clone())))
        .max_by_key(|(t, _)| *t);
    match newest {
        Some((_, so)) => so,
        None => panic!(
            "libslpreload.so is missing in {} and {}: build it (`cargo build -p preload`)",
            candidates[0].display(),
            candidates[1].display()
        ),
    }
}

fn require(program: &str, package: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`{program}` is not installed: apt-get install {package} (scripts/setup installs it)"
    );
}

fn require_root() {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .expect("running id -u");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "this test needs root: CAP_NET_RAW for the ring reception (AF_PACKET) and CAP_SYS_ADMIN for network namespaces");
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch file path for the library's counters.
fn stats_path(what: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "slpreload-udp-{}-{}-{what}.stats",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// The counters the library wrote at exit.
fn stats(p: &PathBuf) -> HashMap<String, u64> {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| {
        panic!(
            "the library wrote no counters to {} ({e}): was it loaded?",
            p.display()
        )
    });
    let _ = std::fs::remove_file(p);
    s.lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

/// `cmd` under the library for `ports`, reception `mode`, counters to `stats`.
fn preloaded(cmd: &mut Command, ports: &str, mode: &str, stats: &PathBuf) {
    cmd.env("LD_PRELOAD", lib())
        .env("STREAMLINE_UDP_PORTS", ports)
        .env("STREAMLINE_UDP_RX", mode)
        .env("STREAMLINE_UDP_STATS", stats);
}

/// A port free for UDP and TCP on the wildcard addresses (dnsmasq binds them), below the
/// kernel's ephemeral range (32768-60999), so that no client socket of a test running in
/// parallel is handed it between this check and the server's bind; unique per call.
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20000 + (std::process::id() % 400) * 30;
    for _ in 0..12000 {
        let p = (20000 + (base - 20000 + NEXT.fetch_add(1, Ordering::Relaxed)) % 12000) as u16;
        if UdpSocket::bind(("0.0.0.0", p)).is_ok()
            && UdpSocket::bind(("::", p)).is_ok()
            && std::net::TcpListener::bind(("0.0.0.0", p)).is_ok()
            && std::net::TcpListener::bind(("::", p)).is_ok()
        {
            return p;
        }
    }
    panic!("no free port in 20000-31999");
}

/// A child killed and reaped when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Guard {
    /// Wait for the process to end by itself (it writes the library's counters at exit).
    fn wait_exit(mut self) {
        for _ in 0..250 {
            if let Ok(Some(st)) = self.0.try_wait() {
                assert!(st.success(), "process exited with {st}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("process {} did not exit", self.0.id());
    }

    /// SIGTERM, then wait (so the library writes its counters).
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("process {} did not exit on SIGTERM", self.0.id());
    }
}

// ---------------------------------------------------------------------------------------
// Receive/send semantics: a Python transcript, plain vs under the library.

fn transcript(port: u16, fam: &str, mode: Option<&str>, stats: &PathBuf) -> String {
    let mut c = Command::new("python3");
    c.arg(format!("{PY}/udp_semantics.py"))
        .arg(port.to_string())
        .arg(fam);
    if let Some(m) = mode {
        preloaded(&mut c, &port.to_string(), m, stats);
    }
    let out = c.output().expect("running python3");
    assert!(
        out.status.success(),
        "udp_semantics.py ({mode:?}, IPv{fam}) failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn receive_and_send_semantics_match_the_kernel() {
    require_root();
    require("python3", "python3");
    for fam in ["4", "6"] {
        let port = free_port();
        let plain = transcript(port, fam, None, &stats_path("unused"));
        assert!(
            plain.ends_with("done\n"),
            "plain transcript incomplete:\n{plain}"
        );
        for mode in MODES {
            let st = stats_path(mode);
            let ours = transcript(port, fam, Some(mode), &st);
            assert_eq!(
                ours, plain,
                "IPv{fam}, {mode}: the transcript under the library differs from the kernel's"
            );
            let s = stats(&st);
            // 6 datagrams reach the server, 4 replies go out batched: the library served them.
            assert_eq!(
                s["rx_datagrams"], 6,
                "IPv{fam}, {mode}: datagrams received through the library: {s:?}"
            );
            assert_eq!(
                s["tx_datagrams"], 4,
                "IPv{fam}, {mode}: datagrams sent through the library: {s:?}"
            );
            assert_eq!(s["tx_errors"], 0);
        }
    }
}

// ---------------------------------------------------------------------------------------
// An epoll server; a port the policy does not name is left to the kernel.

#[test]
fn epoll_echo_server_and_an_unlisted_port() {
    require_root();
    require("python3", "python3");
    const N: usize = 600;
    for mode in MODES {
        let (listed, unlisted) = (free_port(), free_port());
        let st = stats_path(mode);
        let mut c = Command::new("python3");
        c.arg(format!("{PY}/epoll_echo.py"))
            .arg(format!("{listed},{unlisted}"))
            .arg((2 * N).to_string());
        preloaded(&mut c, &listed.to_string(), mode, &st);
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let g = Guard(child);
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        let cli = UdpSocket::bind("127.0.0.1:0").unwrap();
        cli.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Bursts of 40 to each port (so datagrams queue up in user space), then the echoes.
        let mut got: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
        let mut sent = 0;
        while sent < N {
            let burst = 40.min(N - sent);
            for i in sent..sent + burst {
                for p in [listed, unlisted] {
                    cli.send_to(format!("{p}:{i}").as_bytes(), ("127.0.0.1", p))
                        .unwrap();
                }
            }
            let mut buf = [0u8; 64];
            for _ in 0..2 * burst {
                let (n, from) = recv_from(&cli, &mut buf).unwrap_or_else(|e| {
                    panic!("{mode}: an echo did not come back ({e}) after {sent} per port")
                });
                got.entry(from.port()).or_default().push(buf[..n].to_vec());
            }
            sent += burst;
        }
        for p in [listed, unlisted] {
            let want: Vec<Vec<u8>> = (0..N).map(|i| format!("{p}:{i}").into_bytes()).collect();
            let mut have = got.remove(&p).unwrap_or_default();
            have.sort();
            let mut want_sorted = want.clone();
            want_sorted.sort();
            assert_eq!(have, want_sorted, "{mode}: echoes from port {p}");
        }
        assert_eq!(
            lines.next().unwrap().unwrap(),
            format!("echoed {}", 2 * N),
            "{mode}: the server's own count"
        );
        g.wait_exit();
        let s = stats(&st);
        // Exactly the listed port's datagrams went through the library.
        assert_eq!(s["rx_datagrams"], N as u64, "{mode}: {s:?}");
        assert_eq!(s["tx_datagrams"], N as u64, "{mode}: {s:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Several threads blocked in recvfrom on one socket.

#[test]
fn threads_sharing_a_socket_in_blocking_receives() {
    require_root();
    require("python3", "python3");
    const N: usize = 2000;
    for mode in MODES {
        let port = free_port();
        let st = stats_path(mode);
        let mut c = Command::new("python3");
        c.arg(format!("{PY}/threaded_echo.py"))
            .arg(port.to_string())
            .arg("4")
            .arg(N.to_string());
        preloaded(&mut c, &port.to_string(), mode, &st);
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let g = Guard(child);
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        let cli = UdpSocket::bind("127.0.0.1:0").unwrap();
        cli.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut seen = vec![false; N];
        let mut buf = [0u8; 64];
        for chunk in (0..N).collect::<Vec<_>>().chunks(50) {
            for i in chunk {
                cli.send_to(i.to_string().as_bytes(), ("127.0.0.1", port))
                    .unwrap();
            }
            for _ in chunk {
                let t = std::time::Instant::now();
                let n = recv(&cli, &mut buf)
                    .unwrap_or_else(|e| panic!("{mode}: an echo did not come back: {e}"));
                if t.elapsed() > Duration::from_secs(2) {
                    eprintln!("{mode}: an echo took {:?}", t.elapsed());
                }
                let i: usize = std::str::from_utf8(&buf[..n]).unwrap().parse().unwrap();
                assert!(!seen[i], "{mode}: datagram {i} echoed twice");
                seen[i] = true;
            }
        }
        assert!(seen.iter().all(|&x| x), "{mode}: echoes missing");
        assert_eq!(
            lines.next().unwrap().unwrap(),
            format!("echoed {N}"),
            "{mode}: the server's count"
        );
        g.wait_exit();
        let s = stats(&st);
        // The N datagrams and one "stop" per thread came through the library.
        assert_eq!(s["rx_datagrams"], N as u64 + 4, "{mode}: {s:?}");
        assert_eq!(s["tx_datagrams"], N as u64, "{mode}: {s:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Sends still batched when the program closes its socket.

/// Datagrams a program sent (batched in user space, not yet handed to the kernel) leave
/// when it closes the socket, not later and not never: the program here sends, closes,
/// and then waits (in no call of the library's) until the test has them all. The
/// threaded echo server lost the last echoes this way under load (its threads took
/// "stop" from the batch, queued echoes stayed, Python closed the socket at exit): while
/// `close` was not interposed (before 0d0d42f), they went out at exit on the closed
/// descriptor (EBADF, counted in tx_errors) or, as here, not at all while it lived.
#[test]
fn batched_sends_leave_when_the_socket_is_closed() {
    require_root();
    require("python3", "python3");
    const K: usize = 5;
    const SCRIPT: &str = "
import socket, sys
port, to, k = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('127.0.0.1', port))
for i in range(k):
    s.sendto(b'sent %d' % i, ('127.0.0.1', to))
s.close()
print('closed', flush=True)
sys.stdin.readline()
";
    for mode in MODES {
        let port = free_port();
        let st = stats_path(mode);
        let cli = UdpSocket::bind("127.0.0.1:0").unwrap();
        cli.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut c = Command::new("python3");
        c.args(["-c", SCRIPT])
            .arg(port.to_string())
            .arg(cli.local_addr().unwrap().port().to_string())
            .arg(K.to_string());
        preloaded(&mut c, &port.to_string(), mode, &st);
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let g = Guard(child);
        assert_eq!(lines.next().unwrap().unwrap(), "closed");
        // The program lives on (reading its stdin): what it sent must be here now.
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        for _ in 0..K {
            let n = recv(&cli, &mut buf).unwrap_or_else(|e| {
                panic!("{mode}: {} of {K} datagrams arrived after the sender closed its socket ({e}): {got:?}", got.len())
            });
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        let want: Vec<String> = (0..K).map(|i| format!("sent {i}")).collect();
        assert_eq!(got, want, "{mode}: in order");
        drop(stdin);
        g.wait_exit();
        let s = stats(&st);
        assert_eq!(
            (s["tx_datagrams"], s["tx_errors"]),
            (K as u64, 0),
            "{mode}: {s:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// dnsmasq.

const RECORDS: &[&str] = &[
    "--host-record=h.test,10.9.8.7,fd00::7",
    "--host-record=mail.test,10.9.8.8",
    "--address=/wild.test/10.1.2.3",
    "--txt-record=t.test,hello world",
];

fn dnsmasq(
    port: u16,
    listen: &[&str],
    netns: Option<&str>,
    preload: Option<(&str, &PathBuf)>,
) -> Guard {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "dnsmasq"]);
            c
        }
        None => Command::new("dnsmasq"),
    };
    c.args([
        "-k",
        "--no-resolv",
        "--no-hosts",
        "--user=root",
        "--pid-file=",
        "--log-facility=-",
    ])
    .arg(format!("--port={port}"))
    .args(RECORDS);
    for l in listen {
        c.arg(format!("--listen-address={l}"));
    }
    if let Some((mode, st)) = preload {
        preloaded(&mut c, &port.to_string(), mode, st);
    }
    let log = stats_path("dnsmasq-log");
    let g = Guard(
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("dnsmasq"),
    );
    // Ready when it answers.
    let target: IpAddr = listen[0].parse().unwrap();
    for _ in 0..100 {
        if ask(
            SocketAddr::new(target, port),
            &query(7, "h.test", 1),
            Duration::from_millis(100),
        )
        .is_some()
        {
            let _ = std::fs::remove_file(&log);
            return g;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    panic!(
        "dnsmasq ({}) on {target} port {port} did not answer within 5 s; it said:\n{said}",
        preload.map_or("plain", |p| p.0)
    );
}

/// A DNS query (RD) for `name` of type `ty`.
fn query(id: u16, name: &str, ty: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&ty.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

/// `recv_from`, again when a signal or a stop and continue of this process interrupts it:
/// with a receive timeout set, Linux returns EINTR then even with no handler installed
/// (signal(7)), which is neither a loss nor a timeout.
fn recv_from(s: &UdpSocket, b: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
    loop {
        match s.recv_from(b) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// [`recv_from`] on a connected socket.
fn recv(s: &UdpSocket, b: &mut [u8]) -> std::io::Result<usize> {
    recv_from(s, b).map(|(n, _)| n)
}

fn ask(to: SocketAddr, q: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let s = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    s.send_to(q, to).ok()?;
    let mut b = [0u8; 1500];
    let (n, from) = recv_from(&s, &mut b).ok()?;
    assert_eq!(
        from, to,
        "the answer came from another address than the query went to"
    );
    Some(b[..n].to_vec())
}

const QUESTIONS: &[(&str, u16)] = &[
    ("h.test", 1),
    ("h.test", 28),
    ("mail.test", 1),
    ("a.wild.test", 1),
    ("b.c.wild.test", 1),
    ("t.test", 16),
    ("missing.test", 1),
    ("h.test", 15),
];

/// Each question's answer (without the ID), asked of `at`.
fn answers(at: SocketAddr) -> Vec<Vec<u8>> {
    QUESTIONS
        .iter()
        .enumerate()
        .map(|(i, (n, t))| {
            let a = ask(at, &query(100 + i as u16, n, *t), Duration::from_secs(2))
                .unwrap_or_else(|| panic!("no answer from {at} to {n} type {t}"));
            assert_eq!(a[..2], (100 + i as u16).to_be_bytes(), "answer ID");
            a[2..].to_vec()
        })
        .collect()
}

/// `dig +short` for each question (the distribution's resolver tool as the peer).
fn dig(at: SocketAddr, netns: Option<&str>) -> Vec<String> {
    QUESTIONS
        .iter()
        .map(|(n, t)| {
            let ty = match t {
                1 => "A",
                28 => "AAAA",
                16 => "TXT",
                _ => "MX",
            };
            let mut c = match netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns, "dig"]);
                    c
                }
                None => Command::new("dig"),
            };
            let out = c
                .args([
                    "+short",
                    "+time=2",
                    "+tries=1",
                    "-p",
                    &at.port().to_string(),
                    &format!("@{}", at.ip()),
                    n,
                    ty,
                ])
                .output()
                .expect("dig");
            format!("{n} {ty}: {}", String::from_utf8_lossy(&out.stdout).trim())
        })
        .collect()
}

/// `total` queries with `window` outstanding from one socket; the answers by ID. Fails on a
/// lost answer.
fn burst(at: SocketAddr, total: usize, window: usize, reference: &[Vec<u8>]) {
    let s = UdpSocket::bind(if at.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
    s.connect(at).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let qs: Vec<Vec<u8>> = QUESTIONS.iter().map(|(n, t)| query(0, n, *t)).collect();
    let mut outstanding: HashMap<u16, usize> = HashMap::new();
    let mut sent = 0usize;
    let mut answered = 0usize;
    let mut b = [0u8; 1500];
    let send = |sent: &mut usize, out: &mut HashMap<u16, usize>| {
        let k = *sent % qs.len();
        let mut q = qs[k].clone();
        q[..2].copy_from_slice(&(*sent as u16).to_be_bytes());
        s.send(&q).unwrap();
        out.insert(*sent as u16, k);
        *sent += 1;
    };
    while sent < window.min(total) {
        send(&mut sent, &mut outstanding);
    }
    while answered < total {
        let n = recv(&s, &mut b).unwrap_or_else(|e| {
            panic!(
                "{} of {total} answers lost ({e}), {answered} answered",
                outstanding.len()
            )
        });
        let id = u16::from_be_bytes([b[0], b[1]]);
        let k = outstanding
            .remove(&id)
            .expect("an answer to a query we have not sent (or twice)");
        assert_eq!(
            &b[2..n],
            &reference[k][..],
            "answer to {:?} differs from the plain run",
            QUESTIONS[k]
        );
        answered += 1;
        if sent < total {
            send(&mut sent, &mut outstanding);
        }
    }
}

/// dnsmasq plain and under the library (each mode) on `listen` (the first address is
/// queried; the rest are other addresses dnsmasq listens on): answers byte-identical, dig
/// agrees, a burst loses nothing.
fn compare_dnsmasq(listen: &[&str], netns: Option<&str>, burst_total: usize) {
    let port = free_port();
    let at = SocketAddr::new(listen[0].parse().unwrap(), port);
    let plain = dnsmasq(port, listen, netns, None);
    let reference = answers(at);
    let reference_dig = dig(at, netns);
    assert!(
        reference_dig[0].ends_with("10.9.8.7"),
        "plain dnsmasq's answer: {:?}",
        reference_dig[0]
    );
    burst(at, burst_total, 64, &reference);
    drop(plain);
    for mode in MODES {
        let st = stats_path(mode);
        let ours = dnsmasq(port, listen, netns, Some((mode, &st)));
        assert_eq!(
            answers(at),
            reference,
            "{mode} at {at}: answers differ from plain dnsmasq's"
        );
        assert_eq!(
            dig(at, netns),
            reference_dig,
            "{mode} at {at}: dig's view differs"
        );
        burst(at, burst_total, 64, &reference);
        ours.stop();
        let s = stats(&st);
        let n = (burst_total + 2 * QUESTIONS.len()) as u64;
        assert!(
            s["rx_datagrams"] >= n,
            "{mode}: the library received {} datagrams, {n} queries were answered: {s:?}",
            s["rx_datagrams"]
        );
        assert!(s["tx_datagrams"] >= n, "{mode}: {s:?}");
        assert_eq!(s["tx_errors"], 0, "{mode}: {s:?}");
    }
}

#[test]
fn dnsmasq_on_loopback_answers_as_without_the_library() {
    require_root();
    require("dnsmasq", "dnsmasq-base");
    require("dig", "dnsutils");
    // Listening on addresses without --bind-interfaces: dnsmasq binds the wildcard and
    // relies on IP_PKTINFO / IPV6_PKTINFO for where each query went.
    compare_dnsmasq(&["127.0.0.1", "::1"], None, 3000);
    compare_dnsmasq(&["::1", "127.0.0.1"], None, 1000);
}

#[test]
fn dnsmasq_in_a_namespace_answers_as_without_the_library() {
    require_root();
    require("dnsmasq", "dnsmasq-base");
    require("dig", "dnsutils");
    require("ip", "iproute2");
    let v = Veth::new();
    // Queries cross the veth pair from this namespace to dnsmasq in the other one.
    compare_dnsmasq(&[&v.peer_ip.clone()], Some(&v.ns.clone()), 2000);
}

/// A veth pair into a fresh namespace (`peer_ip` inside it), removed on drop.
struct Veth {
    ns: String,
    here: String,
    peer_ip: String,
}

impl Veth {
    fn new() -> Veth {
        let id = std::process::id() % 100000;
        let (ns, here, there) = (
            format!("sludp{id}"),
            format!("sludp{id}a"),
            format!("sludp{id}b"),
        );
        let net = format!("10.{}.{}", 200 + id % 50, (id / 50) % 250);
        let run = |args: &[&str]| {
            let o = Command::new(args[0])
                .args(&args[1..])
                .output()
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert!(
                o.status.success(),
                "{args:?} failed (needs root and iproute2): {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        run(&["ip", "netns", "add", &ns]);
        let v = Veth {
            ns: ns.clone(),
            here: here.clone(),
            peer_ip: format!("{net}.2"),
        };
        run(&[
            "ip", "link", "add", &here, "type", "veth", "peer", "name", &there,
        ]);
        run(&["ip", "link", "set", &there, "netns", &ns]);
        run(&["ip", "addr", "add", &format!("{net}.1/24"), "dev", &here]);
        run(&["ip", "link", "set", &here, "up"]);
        run(&[
            "ip",
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &there,
        ]);
        run(&[
            "ip", "netns", "exec", &ns, "ip", "link", "set", &there, "up",
        ]);
        run(&["ip", "netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.here])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}
