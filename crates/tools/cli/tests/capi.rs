//! End-to-end tests of libstreamline.so (crates/legacy/capi) from C: the example programs of
//! examples/slfile are compiled with `cc` against include/streamline.h and the built
//! library, and run against a real daemon (tests/common/daemon.rs) and its runs: a C reader
//! of a pipeline's exported stream sees what the pipeline's `count` counted, a C writer's
//! stream reaches a C reader byte for byte, and bad names, other users' streams and a
//! stopped daemon give their errno.
//!
//! libstreamline.so comes from `cargo test` itself (capi is a dev-dependency of this
//! package, and cargo puts the library into <target>/<profile>/deps/) or from `cargo build
//! -p capi` (<target>/<profile>/): the newer of the two is used.

mod common;

use common::daemon::Daemon;
use daemon::client::Client;
use daemon::proto::{Reply, Request, RunOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../..");

/// Where libstreamline.so is (see `common::built_library`).
fn lib_dir() -> PathBuf {
    let lib = common::built_library("libstreamline.so", "capi");
    lib.parent().expect("a file has a directory").to_path_buf()
}

/// slcat and slwrite, compiled once per test process into the target directory (which
/// every user may read: the EACCES case runs slcat as uid 65534), replaced by each run.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let lib = lib_dir();
        let out = lib.join("slfile-examples");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for p in ["slcat", "slwrite"] {
            let src = Path::new(ROOT).join(format!("examples/slfile/{p}.c"));
            let o = Command::new("cc")
                .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
                .arg(Path::new(ROOT).join("crates/legacy/capi/include"))
                .arg(&src)
                .arg("-L")
                .arg(&lib)
                .arg("-lstreamline")
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-o")
                .arg(out.join(p))
                .output()
                .unwrap_or_else(|e| panic!("cannot run cc (apt-get install gcc): {e}"));
            assert!(
                o.status.success(),
                "cc {}: {}",
                src.display(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        out
    })
}

fn prog(d: &Daemon, name: &str) -> Command {
    let mut c = Command::new(programs().join(name));
    c.env("STREAMLINE_SOCKET", &d.socket);
    c
}

/// A C program started with its stdout piped, returned once it printed a line starting
/// with `first` (it opened its stream), with that line.
fn start_until(mut cmd: Command, first: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut c = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    if out.read_line(&mut line).unwrap() == 0 || !line.starts_with(first) {
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let _ = c.kill();
        panic!("{cmd:?} did not print `{first}`: stdout {line:?}, stderr {err}");
    }
    (c, out)
}

/// Wait at most `limit` for a started program; its exit status, the rest of its stdout,
/// and its stderr. Killed and failed on the timeout.
fn finish(
    mut c: Child,
    mut out: BufReader<std::process::ChildStdout>,
    limit: Duration,
    what: &str,
) -> (i32, String, String) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{what} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code().unwrap_or(-1), rest, err)
}

/// A program's run to its end, as (status, stdout, stderr).
fn run(mut cmd: Command) -> (i32, String, String) {
    let o = cmd.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The `records R bytes B fnv1a H` line's numbers.
fn totals(out: &str) -> (u64, u64, String) {
    let l = out
        .lines()
        .find(|l| l.starts_with("records "))
        .unwrap_or_else(|| panic!("no totals line in {out:?}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    (
        w[1].parse().unwrap(),
        w[3].parse().unwrap(),
        w[5].to_string(),
    )
}

/// A run opened through the daemon (built, paused, its exported rings there) with its
/// report going to a file.
struct Opened {
    c: Client,
    run: u64,
    report: PathBuf,
}

fn open_run(d: &Daemon, pipeline: &str) -> Opened {
    let mut c = Client::connect(&d.socket).unwrap();
    c.socket()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let report = d.dir.join(format!("report-{}", pipeline.len()));
    let (null_in, null_out) = (
        std::fs::File::open("/dev/null").unwrap(),
        std::fs::File::create("/dev/null").unwrap(),
    );
    let err = std::fs::File::create(&report).unwrap();
    let options = RunOptions {
        plan: "none".into(),
        ..RunOptions::default()
    };
    let (reply, _) = c
        .call_fds(
            Request::Open {
                pipeline: pipeline.into(),
                options,
                fds: 3,
                context: Default::default(),
            },
            &[null_in.as_raw_fd(), null_out.as_raw_fd(), err.as_raw_fd()],
        )
        .unwrap();
    let Reply::Opened { run, .. } = reply else {
        panic!("open {pipeline}: {reply:?}")
    };
    Opened { c, run, report }
}

impl Opened {
    /// Start the run and wait for its end; its exit status and report (stderr).
    fn activate_and_finish(mut self) -> (i32, String) {
        assert!(matches!(
            self.c
                .call(Request::Activate {
                    run: self.run,
                    detach: false
                })
                .unwrap(),
            Reply::Done {}
        ));
        self.c.send(Request::Attach { run: self.run }, &[]).unwrap();
        loop {
            let (m, _) = self.c.recv().unwrap();
            if let Reply::Finished { code, .. } = m.body {
                return (code, std::fs::read_to_string(&self.report).unwrap());
            }
        }
    }
}

/// `count: N blocks, M bytes` of a report.
fn count_line(report: &str) -> (u64, u64) {
    let l = report
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .unwrap_or_else(|| panic!("no count line:\n{report}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    (w[0].parse().unwrap(), w[2].parse().unwrap())
}

/// A C reader of a pipeline's exported stream, attached before the run starts, sees every
/// block the pipeline's `count` counted, with the bytes `gen` made, by copy, by peek with
/// check, and by peek_acquire/complete; none was overwritten (the owner reads as a
/// registered, lossless reader).
#[test]
fn a_c_reader_of_an_exported_stream_sees_what_count_counted() {
    let d = Daemon::start("capi-read", None);
    let pid = std::process::id();
    for (k, mode) in ["read", "peek", "acquire"].iter().enumerate() {
        let (n, size) = (30_000u64, 200 + 100 * k as u64);
        let name = format!("capi{pid}{mode}");
        let opened = open_run(
            &d,
            &format!("gen count={n} size={size} | count name={name} export=yes"),
        );
        let mut cat = prog(&d, "slcat");
        cat.args(["-m", mode, &name]);
        let (c, out) = start_until(cat, "opened");
        let (code, report) = opened.activate_and_finish();
        assert_eq!(code, 0, "{report}");
        let (status, rest, err) = finish(c, out, Duration::from_secs(60), "slcat");
        assert_eq!(status, 0, "slcat -m {mode}: {err}");
        let (records, bytes, _) = totals(&rest);
        assert_eq!(count_line(&report), (n, n * size), "{report}");
        assert_eq!(
            (records, bytes),
            (n, n * size),
            "slcat -m {mode} against the run's report:\n{report}"
        );
        assert!(
            rest.contains("stale 0 lost 0"),
            "a registered reader's records are never overwritten: {rest}"
        );
        common::wait_for("the run's rings to go", Duration::from_secs(10), || {
            !Path::new(&format!("/dev/shm/streamline.{name}")).exists()
        });
    }
}

/// A stream written from C (write, poke, poke_acquire/complete, append) reaches a C reader
/// (peek_acquire/complete with check) through the daemon's open_stream byte for byte, in
/// records of the sizes written, across many laps of its rings; the names go when the
/// writer closes.
#[test]
fn a_stream_written_from_c_reaches_a_c_reader_byte_for_byte() {
    let d = Daemon::start("capi-write", None);
    let name = format!("capiw{}", std::process::id());
    let ring = format!("/dev/shm/streamline.{name}");
    // 40,000 records of 16..2015 bytes: about 40 MB through a 16 MiB data ring.
    let mut w = prog(&d, "slwrite");
    w.args([&name, "40000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let writer = w.spawn().unwrap();
    common::wait_for("the writer's rings", Duration::from_secs(10), || {
        Path::new(&ring).exists() && Path::new(&format!("{ring}.data")).exists()
    });
    let mut cat = prog(&d, "slcat");
    cat.args(["-m", "acquire", &name]);
    let (c, out) = start_until(cat, "opened");
    let (rstatus, rout, rerr) = finish(c, out, Duration::from_secs(120), "slcat");
    let wo = writer.wait_with_output().unwrap();
    let (wout, werr) = (
        String::from_utf8_lossy(&wo.stdout),
        String::from_utf8_lossy(&wo.stderr),
    );
    assert!(wo.status.success(), "slwrite: {werr}");
    assert_eq!(rstatus, 0, "slcat: {rerr}");
    assert!(wout.starts_with(&format!("created {name}\n")), "{wout}");
    let (wr, wb, wh) = totals(&wout);
    assert_eq!(wr, 40_000);
    assert!(
        wb > 16 << 21,
        "the writer wrote {wb} bytes: more than two laps of the data ring"
    );
    assert_eq!(
        totals(&rout),
        (wr, wb, wh),
        "reader:\n{rout}\nwriter:\n{wout}"
    );
    assert!(rout.contains("stale 0 lost 0"), "{rout}");
    assert!(
        !Path::new(&ring).exists() && !Path::new(&format!("{ring}.data")).exists(),
        "the writer's close removed its rings"
    );
}

/// The errno a C program gets: ENOENT for a stream nobody exports, EINVAL for a name that
/// cannot be one, EACCES for another user's 0600 stream (uid 65534 reading root's), an
/// observer's open for a stream its mode lets others read (with records arriving), and
/// ECONNREFUSED or ENOENT once the daemon is gone, each with the library's reason.
#[test]
fn bad_names_other_users_streams_and_a_stopped_daemon_get_their_errno() {
    let d = Daemon::start("capi-err", None);
    let pid = std::process::id();
    let errno_of = |err: &str| {
        err.split("errno=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("")
            .to_string()
    };

    let (status, _, err) = run({
        let mut c = prog(&d, "slcat");
        c.arg(format!("nosuch{pid}"));
        c
    });
    assert_eq!((status, errno_of(&err).as_str()), (1, "ENOENT"), "{err}");
    assert!(
        err.contains("no exported stream"),
        "the daemon's reason reaches slfile_error: {err}"
    );
    let (status, _, err) = run({
        let mut c = prog(&d, "slcat");
        c.arg("a b");
        c
    });
    assert_eq!((status, errno_of(&err).as_str()), (1, "EINVAL"), "{err}");

    // Root's stream, 0600: refused to uid 65534 by the daemon.
    let secret = format!("capis{pid}");
    let out = d
        .cli()
        .args([
            "run",
            "--detach",
            "-q",
            &format!("gen count=100G size=64 | count name={secret} export=yes mode=0600"),
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let secret_run: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    common::wait_for("root's stream", Duration::from_secs(10), || {
        Path::new(&format!("/dev/shm/streamline.{secret}")).exists()
    });
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(programs().join("slcat"))
            .args(args)
            .env("STREAMLINE_SOCKET", &d.socket);
        c
    };
    let (status, _, err) = run(as_nobody(&[&secret]));
    assert_eq!((status, errno_of(&err).as_str()), (1, "EACCES"), "{err}");
    assert!(err.contains("may not read"), "{err}");
    let _ = d.cli().args(["stop", &secret_run.to_string()]).output();

    // Root's stream, 0644: uid 65534 reads it as an observer, and records arrive.
    let public = format!("capip{pid}");
    let out = d
        .cli()
        .args([
            "run",
            "--detach",
            "-q",
            &format!("gen count=100G size=64 | count name={public} export=yes mode=0644"),
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let public_run: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    common::wait_for("root's public stream", Duration::from_secs(10), || {
        Path::new(&format!("/dev/shm/streamline.{public}")).exists()
    });
    let (mut c, mut out) = start_until(as_nobody(&["-v", &public]), "opened");
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("record 1 64"),
        "an observer reads the stream's records: {line:?}"
    );
    c.kill().unwrap();
    c.wait().unwrap();
    let _ = d.cli().args(["stop", &public_run.to_string()]).output();

    // The daemon gone: nothing answers on its socket.
    let socket = d.socket.clone();
    drop(d);
    let mut c = Command::new(programs().join("slcat"));
    c.arg("anything").env("STREAMLINE_SOCKET", &socket);
    let (status, _, err) = run(c);
    assert!(
        status == 1 && ["ECONNREFUSED", "ENOENT"].contains(&errno_of(&err).as_str()),
        "{err}"
    );
    assert!(err.contains("no Streamline daemon answers on"), "{err}");
}

/// A PipesFS path opens as a file through the same calls: slcat reads a running graph's
/// `all` (blocks of 64 bytes from gen, as a byte stream) through libstreamline.
#[test]
fn a_pipesfs_path_reads_through_the_library() {
    let d = Daemon::start("capi-fs", None);
    let out = d
        .cli()
        .args(["run", "--detach", "-q", "gen count=100G size=64 | count"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let all = d.mount().join(id.to_string()).join("gen/all");
    common::wait_for(
        "the run's gen/all in PipesFS",
        Duration::from_secs(10),
        || all.exists(),
    );
    let mut cat = prog(&d, "slcat");
    cat.args(["-v", all.to_str().unwrap()]);
    let (mut c, mut out) = start_until(cat, "opened");
    // Three reads that returned bytes (a read returning 0 would have ended slcat).
    for k in 1..=3 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            w.get(..2),
            Some(&["record", &k.to_string()][..]),
            "{line:?}"
        );
        assert!(w[2].parse::<u64>().unwrap() > 0, "{line:?}");
    }
    c.kill().unwrap();
    c.wait().unwrap();
    assert!(d
        .cli()
        .args(["stop", &id.to_string()])
        .output()
        .unwrap()
        .status
        .success());
}

/// A daemon that hangs up between two requests (here a peer that answers the handshake and
/// closes, as a daemon that dies or drops a connection does): the C program gets an errno
/// from slfile_open and is never killed by SIGPIPE when the library writes its next
/// request to the closed connection (children of this test have SIGPIPE's default, fatal
/// disposition, as C programs usually do).
#[test]
fn a_daemon_that_hangs_up_gives_an_errno_never_sigpipe() {
    use daemon::proto::{self, Msg};
    let dir = std::env::temp_dir().join(format!("sl-capi-hup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("control");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    const ROUNDS: usize = 20;
    let hangup = std::thread::spawn(move || {
        for _ in 0..ROUNDS {
            let (c, _) = listener.accept().unwrap();
            let (m, _) = proto::recv::<Request>(&c).unwrap();
            assert!(matches!(m.body, Request::Hello { .. }), "{m:?}");
            let welcome = Reply::Welcome {
                version: proto::VERSION,
                server: "hangs up".into(),
                uid: 0,
                gid: 0,
                pid: 0,
            };
            proto::send(
                &c,
                &Msg {
                    id: m.id,
                    body: welcome,
                },
                &[],
            )
            .unwrap();
            c.shutdown(std::net::Shutdown::Both).unwrap();
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..ROUNDS {
        let mut c = Command::new(programs().join("slcat"));
        c.arg("anything").env("STREAMLINE_SOCKET", &sock);
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(
            o.status.code(),
            Some(1),
            "round {round}: slcat ended with {:?} (a signal: SIGPIPE?): {err}",
            o.status
        );
        let errno = err
            .split("errno=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("")
            .to_string();
        assert!(
            ["EPIPE", "ECONNRESET"].contains(&errno.as_str()),
            "round {round}: {err}"
        );
        seen.insert(errno);
    }
    hangup.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(seen.contains("EPIPE"), "the request after the hang-up was written to the closed connection at least once: {seen:?}");
}

/// The library is loaded into arbitrary programs (the libpcap stand-in among them): it
/// links no libpcap, libbpf, libxdp or C++ runtime, and exports the calls of the header.
#[test]
fn the_library_links_only_libc_and_exports_the_slfile_calls() {
    let lib = lib_dir().join("libstreamline.so");
    let (status, deps, err) = run({
        let mut c = Command::new("ldd");
        c.arg(&lib);
        c
    });
    assert_eq!(status, 0, "{err}");
    for bad in ["pcap", "bpf", "xdp", "stdc++", "elf"] {
        assert!(!deps.contains(bad), "libstreamline.so links {bad}:\n{deps}");
    }
    let (status, syms, err) = run({
        let mut c = Command::new("nm");
        c.args(["-D", "--defined-only"]).arg(&lib);
        c
    });
    assert_eq!(status, 0, "{err}");
    let header =
        std::fs::read_to_string(Path::new(ROOT).join("crates/legacy/capi/include/streamline.h"))
            .unwrap();
    let declared: Vec<&str> = header
        .lines()
        .filter(|l| !l.trim_start().starts_with("//") && l.trim_end().ends_with(");"))
        .filter_map(|l| l.split('(').next()?.split_whitespace().last())
        .map(|f| f.trim_start_matches('*'))
        .filter(|f| f.starts_with("slfile_") && *f != "slfile_open")
        .collect();
    assert!(declared.len() >= 15, "{declared:?}");
    for f in declared {
        assert!(
            syms.lines().any(|l| l.ends_with(&format!(" T {f}"))),
            "{f} is declared in streamline.h but not exported"
        );
    }
}
