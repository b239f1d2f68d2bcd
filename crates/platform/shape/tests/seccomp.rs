//! The seccomp supervisor end to end, on static C programs (built here with `cc -static`;
//! sources in `tests/seccomp_c/`): bytes are what the program would move unshaped, the
//! rate is the budget's, a killed program does not hang `run`, and forked children are
//! shaped too. A missing capability (seccomp user notification refused) fails the tests
//! with the supervisor's message naming it.

use shape::config::{Config, Kind, Limit};
use shape::seccomp::{run, SupervisorError};
use shape::Segment;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const SOURCES: [(&str, &str); 7] = [
    ("tcp_send", include_str!("seccomp_c/tcp_send.c")),
    ("tcp_recv", include_str!("seccomp_c/tcp_recv.c")),
    ("udp_send", include_str!("seccomp_c/udp_send.c")),
    ("cat_file", include_str!("seccomp_c/cat_file.c")),
    ("sig_recv", include_str!("seccomp_c/sig_recv.c")),
    ("two_conns", include_str!("seccomp_c/two_conns.c")),
    ("sendfile_send", include_str!("seccomp_c/sendfile_send.c")),
];

/// The static test programs, built once per test binary.
fn prog(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("shape-seccomp-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (n, src) in SOURCES {
            let c = dir.join(format!("{n}.c"));
            std::fs::write(&c, src).unwrap();
            let out = Command::new("cc")
                .args(["-static", "-O1", "-pthread", "-o"])
                .arg(dir.join(n))
                .arg(&c)
                .output()
                .expect("running cc (build-essential)");
            assert!(
                out.status.success(),
                "cc -static {n}.c failed (static glibc is in libc6-dev): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        dir
    });
    dir.join(name)
}

fn segment(net: &str, disk: &str) -> Segment {
    let config = Config {
        net: Limit::parse("net", net, Kind::Token, None).unwrap(),
        disk: Limit::parse("disk", disk, Kind::Token, None).unwrap(),
        ..Default::default()
    };
    Segment::create_private(config).unwrap()
}

/// `run`, failing the test loudly if the kernel refuses the mechanism.
fn supervised(seg: &Segment, cmd: &mut Command, on_spawn: impl FnOnce(u32)) -> ExitStatus {
    match run(seg, 0, cmd, on_spawn) {
        Ok(st) => st,
        Err(e @ SupervisorError::Unavailable { .. }) => {
            panic!("the seccomp mechanism is missing here: {e}")
        }
        Err(e) => panic!("run failed: {e}"),
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u64 * 7 + 13) as u8).collect()
}

/// Seconds that `n` bytes need at least under a token bucket of `rate` and `burst` that
/// starts full: what moved by time t is at most burst + rate·t.
fn floor_secs(n: usize, rate: f64, burst: f64) -> f64 {
    (n as f64 - burst) / rate
}

/// Accept one connection on `l` and read it to its end: (bytes, seconds since `t0`).
fn accept_all(l: TcpListener, t0: Instant) -> std::thread::JoinHandle<(Vec<u8>, f64)> {
    std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        (got, t0.elapsed().as_secs_f64())
    })
}

#[test]
fn tcp_send_is_cut_to_the_rate_and_bytes_arrive_intact() {
    let n = 2_000_000;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let seg = segment("1MB/s:64KiB", "unlimited");
    let t0 = Instant::now();
    let server = accept_all(l, t0);
    let st = supervised(
        &seg,
        Command::new(prog("tcp_send")).args([&port, &n.to_string()]),
        |_| {},
    );
    let (got, secs) = server.join().unwrap();
    assert!(st.success(), "{st:?}");
    assert!(
        got == pattern(n),
        "{} bytes arrived, not the pattern",
        got.len()
    );
    let floor = floor_secs(n, 1e6, 65536.0);
    assert!(
        secs >= floor && secs < floor + 2.0,
        "{n} B at 1 MB/s with a 64 KiB burst took {secs:.3} s (at least {floor:.3})"
    );
    assert_eq!(
        seg.shared().stats[0]
            .bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        n as u64
    );
}

#[test]
fn forked_children_are_shaped_too() {
    let n = 2_000_000;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let seg = segment("1MB/s:64KiB", "unlimited");
    let t0 = Instant::now();
    let server = std::thread::spawn(move || {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (mut c, _) = l.accept().unwrap();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    c.read_to_end(&mut got).unwrap();
                    got
                })
            })
            .collect();
        let got: Vec<Vec<u8>> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (got, t0.elapsed().as_secs_f64())
    });
    let st = supervised(
        &seg,
        Command::new(prog("tcp_send")).args([&port, &n.to_string(), "fork"]),
        |_| {},
    );
    let (got, secs) = server.join().unwrap();
    assert!(st.success(), "{st:?}");
    let mut lens: Vec<usize> = got.iter().map(|g| g.len()).collect();
    lens.sort();
    assert_eq!(lens, vec![n / 2, n / 2]);
    for g in &got {
        assert!(*g == pattern(n / 2));
    }
    // both processes draw on the one budget: unshaped children would halve the time
    let floor = floor_secs(n, 1e6, 65536.0);
    assert!(
        secs >= floor && secs < floor + 2.0,
        "{n} B from two processes took {secs:.3} s (at least {floor:.3})"
    );
}

#[test]
fn tcp_receive_calls_deliver_the_same_bytes_at_the_rate() {
    let n = 1_500_000;
    let data = pattern(n);
    let serve = |data: Vec<u8>| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            c.write_all(&data).unwrap();
        });
        (port, h)
    };
    // unshaped, for reference
    let (port, h) = serve(data.clone());
    let plain = Command::new(prog("tcp_recv")).arg(&port).output().unwrap();
    h.join().unwrap();
    assert!(plain.status.success() && plain.stdout == data);
    // shaped
    let (port, h) = serve(data.clone());
    let seg = segment("1MB/s:64KiB", "unlimited");
    let out = tempfile("tcp_recv.out");
    let t0 = Instant::now();
    let st = supervised(
        &seg,
        Command::new(prog("tcp_recv"))
            .arg(&port)
            .stdout(std::fs::File::create(&out).unwrap()),
        |_| {},
    );
    let secs = t0.elapsed().as_secs_f64();
    h.join().unwrap();
    assert!(st.success(), "{st:?}");
    let got = std::fs::read(&out).unwrap();
    assert!(
        got == plain.stdout,
        "{} bytes, not what the unshaped run received",
        got.len()
    );
    let floor = floor_secs(n, 1e6, 65536.0);
    assert!(
        secs >= floor && secs < floor + 2.0,
        "{n} B received in {secs:.3} s (at least {floor:.3})"
    );
}

fn tempfile(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("shape-seccomp-tests-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn udp_datagrams_are_whole_and_paced() {
    let (count, size) = (1000usize, 1200usize);
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port().to_string();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let seg = segment("1MB/s:16KiB", "unlimited");
    let t0 = Instant::now();
    let server = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut seen = vec![false; count];
        let mut last = 0.0;
        let mut from = None;
        for _ in 0..count {
            // EINTR after a stop and continue is not a loss (signal(7), receive timeouts).
            let (k, f) = loop {
                match rx.recv_from(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r.expect("a datagram"),
                }
            };
            assert_eq!(k, size, "datagram cut");
            let i = u32::from_ne_bytes(buf[..4].try_into().unwrap()) as usize;
            assert!(
                (4..size).all(|j| buf[j] == (i + j) as u8),
                "datagram {i} corrupted"
            );
            seen[i] = true;
            last = t0.elapsed().as_secs_f64();
            from = Some(f);
        }
        rx.send_to(b"hello", from.unwrap()).unwrap();
        rx.send_to(b"again", from.unwrap()).unwrap();
        (
            seen.iter().all(|&s| s),
            last,
            rx.local_addr().unwrap().port(),
        )
    });
    let outf = tempfile("udp_send.out");
    let st = supervised(
        &seg,
        Command::new(prog("udp_send"))
            .args([&port, &count.to_string(), &size.to_string()])
            .stdout(std::fs::File::create(&outf).unwrap()),
        |_| {},
    );
    let (all, secs, rport) = server.join().unwrap();
    assert!(st.success(), "{st:?}");
    assert!(all, "datagrams lost");
    assert_eq!(
        std::fs::read_to_string(&outf).unwrap(),
        format!("reply hello from {rport} len 16\nreply2 again from {rport} len 16\n")
    );
    // a datagram is sent whole once it has a grant and pays the rest as debt: by time t
    // at most burst + rate·t + one datagram has left
    let floor = floor_secs(count * size, 1e6, 16384.0 + size as f64);
    assert!(
        secs >= floor && secs < floor + 2.0,
        "{} B of datagrams took {secs:.3} s (at least {floor:.3})",
        count * size
    );
}

#[test]
fn file_reads_are_paced_and_identical() {
    let n = 1_500_000;
    let data: Vec<u8> = (0..n)
        .map(|i| (i as u64).wrapping_mul(2654435761).rotate_right(13) as u8)
        .collect();
    let input = tempfile("cat_file.in");
    std::fs::write(&input, &data).unwrap();
    let plain = Command::new(prog("cat_file")).arg(&input).output().unwrap();
    assert!(plain.status.success() && plain.stdout == data);
    let seg = segment("unlimited", "1MB/s");
    let t0 = Instant::now();
    let mut child_out = Vec::new();
    // stdout is a Unix socket (not shaped): read it while the program runs
    let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut r = r;
        r.read_to_end(&mut child_out).unwrap();
        child_out
    });
    let mut cmd = Command::new(prog("cat_file"));
    cmd.arg(&input).stdout(std::os::fd::OwnedFd::from(w));
    let st = supervised(&seg, &mut cmd, |_| {});
    drop(cmd);
    let secs = t0.elapsed().as_secs_f64();
    let got = reader.join().unwrap();
    assert!(st.success(), "{st:?}");
    assert!(
        got == plain.stdout,
        "{} bytes, not what the unshaped run wrote",
        got.len()
    );
    // a disk call runs once the budget is out of debt and pays after: the last 64 KiB call
    // may start when burst + rate·t covers all but itself
    let burst = shape::config::default_burst(1_000_000) as f64;
    let floor = floor_secs(n - 65536, 1e6, burst);
    assert!(
        secs >= floor && secs < floor + 2.0,
        "{n} B read in {secs:.3} s (at least {floor:.3})"
    );
}

#[test]
fn a_killed_program_does_not_hang_run_nor_keep_its_socket() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let seg = segment("1MB/s", "unlimited");
    // the server sends a little, then nothing: the program blocks in a receive that the
    // supervisor is carrying out for it
    let (sent_tx, sent_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        c.write_all(&[1u8; 10_000]).unwrap();
        let _ = sent_tx.send(c.peer_addr().unwrap().port());
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 16];
        // EOF once the program is dead and the supervisor let go of its copy of the socket
        let r = c.read(&mut b);
        matches!(r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
    });
    let t0 = Instant::now();
    let st = supervised(
        &seg,
        Command::new(prog("tcp_recv"))
            .arg(&port)
            .stdout(Stdio::null()),
        |pid| {
            std::thread::spawn(move || {
                // Killed while its receive is held by the supervisor (the program asleep
                // in the seccomp notification).
                // Killed in the receive that waits for more: the server sent its bytes,
                // the program's socket holds none of them unread, and the program sleeps
                // in the seccomp notification of its next receive.
                let local = sent_rx.recv().unwrap();
                let unread = || {
                    let want = format!(":{local:04X}");
                    std::fs::read_to_string("/proc/net/tcp")
                        .unwrap_or_default()
                        .lines()
                        .find(|l| {
                            l.split_whitespace()
                                .nth(1)
                                .is_some_and(|a| a.ends_with(&want))
                        })
                        .and_then(|l| l.split_whitespace().nth(4).map(str::to_string))
                };
                let t = Instant::now();
                loop {
                    beltway::testing::wait_asleep(pid, pid, "seccomp");
                    let q = unread();
                    if q.as_deref().is_some_and(|q| q.ends_with(":00000000")) {
                        break;
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(30),
                        "the program never read all it was sent (tx:rx queue {q:?})"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                // SAFETY: signalling our own child.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            });
        },
    );
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(
        server.join().unwrap(),
        "the connection stayed open after the program died"
    );
}

#[test]
fn a_program_that_cannot_be_executed_is_an_error_not_a_hang() {
    let seg = segment("1MB/s", "1MB/s");
    let r = run(&seg, 0, &mut Command::new("/nonexistent/program"), |_| {});
    assert!(matches!(r, Err(SupervisorError::Spawn(_))), "{r:?}");
}

/// A signal during a receive the supervisor carries out behaves as with the kernel's own
/// blocking receive: the handler runs, and the call restarts under SA_RESTART or fails
/// with EINTR without it.
#[test]
fn signals_interrupt_or_restart_a_supervised_receive() {
    for (mode, want) in [
        ("norestart", "recv EINTR handler 1\n"),
        ("restart", "recv 5 handler 1\n"),
    ] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        let said = tempfile(&format!("sig_recv.{mode}.err"));
        let heard = said.clone();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            // The answer comes once the handler has run (it says so on stderr).
            let t0 = Instant::now();
            while !std::fs::read_to_string(&heard)
                .unwrap_or_default()
                .contains("fired")
            {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "sig_recv's SIGALRM handler did not run within 30 s"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = c.write_all(b"hello");
            let mut b = [0u8; 1];
            let _ = c.read(&mut b);
        });
        let seg = segment("1MB/s", "unlimited");
        let out = tempfile(&format!("sig_recv.{mode}.out"));
        let st = supervised(
            &seg,
            Command::new(prog("sig_recv"))
                .args([&port, mode])
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(std::fs::File::create(&said).unwrap()),
            |_| {},
        );
        assert!(st.success(), "{st:?}");
        server.join().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), want, "{mode}");
    }
}

/// One thread blocked in a supervised read does not stall another thread's calls (the
/// pool grows).
#[test]
fn a_blocked_call_does_not_stall_the_others() {
    let n = 300_000;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let server = std::thread::spawn(move || {
        let (idle, _) = l.accept().unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        drop(idle);
        got.len()
    });
    let seg = segment("10MB/s", "unlimited");
    let t0 = Instant::now();
    let st = supervised(
        &seg,
        Command::new(prog("two_conns")).args([&port, &n.to_string()]),
        |_| {},
    );
    assert!(st.success(), "{st:?}");
    assert_eq!(server.join().unwrap(), n);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn sendfile_to_a_socket_is_cut_and_keeps_offsets() {
    let n = 1_500_000;
    let data: Vec<u8> = (0..n)
        .map(|i| (i as u64).wrapping_mul(0x9e3779b1).rotate_right(7) as u8)
        .collect();
    let input = tempfile("sendfile.in");
    std::fs::write(&input, &data).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let seg = segment("1MB/s:64KiB", "unlimited");
    let t0 = Instant::now();
    let server = accept_all(l, t0);
    let st = supervised(
        &seg,
        Command::new(prog("sendfile_send")).arg(&port).arg(&input),
        |_| {},
    );
    let (got, secs) = server.join().unwrap();
    assert!(st.success(), "{st:?}");
    assert!(got == data, "{} bytes arrived, not the file", got.len());
    let floor = floor_secs(n, 1e6, 65536.0);
    assert!(
        secs >= floor && secs < floor + 2.0,
        "{n} B by sendfile took {secs:.3} s (at least {floor:.3})"
    );
}

/// Files opened O_DIRECT are read through aligned buffers (the copied fd shares the flag).
#[test]
fn o_direct_files_are_read_too() {
    let n = 3 << 20;
    let data: Vec<u8> = (0..n)
        .map(|i| (i as u64).wrapping_mul(0x51ed27).rotate_right(11) as u8)
        .collect();
    let input = tempfile("direct.in");
    std::fs::write(&input, &data).unwrap();
    let plain = Command::new(prog("cat_file"))
        .arg(&input)
        .arg("direct")
        .output()
        .unwrap();
    assert!(
        plain.status.code() != Some(3),
        "the temp dir's file system refuses O_DIRECT: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(plain.status.success() && plain.stdout == data);
    let seg = segment("unlimited", "100MB/s");
    let out = std::os::unix::net::UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut r = out.0;
        r.read_to_end(&mut got).unwrap();
        got
    });
    let mut cmd = Command::new(prog("cat_file"));
    cmd.arg(&input)
        .arg("direct")
        .stdout(std::os::fd::OwnedFd::from(out.1));
    let st = supervised(&seg, &mut cmd, |_| {});
    drop(cmd);
    assert!(st.success(), "{st:?}");
    assert!(reader.join().unwrap() == data);
    assert_eq!(
        seg.shared().stats[1]
            .bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        n as u64
    );
}
