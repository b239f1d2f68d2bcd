//! A daemon of the benchmark's own (`streamlined` next to this binary, on a socket in a
//! scratch directory, stopped at the end), and what the benchmarks that go through it
//! share: the binaries, the caller's identity, a policy granting UDP on a device, a run's
//! report as `streamline run` prints it, and a run's end awaited through the daemon.

use crate::proc::kill_with_us;
use crate::util::{err, Result};
use daemon::client::{Client, ClientError};
use daemon::proto::{Reply, Request};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The effective uid of this process (from /proc/self/status, as the kernel reports it).
pub(crate) fn euid() -> Result<u32> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| err(format!("/proc/self/status: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| err("/proc/self/status has no effective uid"))
}

/// `streamlined` and `streamline` next to this benchmark (the programs a daemon benchmark
/// runs), or why not.
pub(crate) fn binaries() -> Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe().map_err(|e| err(format!("locating own executable: {e}")))?;
    let (streamlined, streamline) = (
        exe.with_file_name("streamlined"),
        exe.with_file_name("streamline"),
    );
    for p in [&streamlined, &streamline] {
        if !p.is_file() {
            return Err(err(format!("{} not found next to this benchmark; build both with `cargo build --release -p daemon -p streamline`", p.display())));
        }
    }
    Ok((streamlined, streamline))
}

/// A `streamlined` of our own on a private socket; stopped (SIGTERM, then SIGKILL) when
/// dropped. It dies with us if we die first (PR_SET_PDEATHSIG), and its workers see its
/// socket close and stop.
pub(crate) struct Daemon {
    pub(crate) child: Option<Child>,
    pub(crate) socket: PathBuf,
    pub(crate) log: PathBuf,
}

/// A daemon policy in `dir/policy.toml` granting uid 65534 the capture template
/// `rx dev=DEV | bpf "udp"`; its path.
pub(crate) fn udp_grant_policy(dir: &Path, dev: &str) -> Result<PathBuf> {
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        format!("[[grant]]\nusers = [\"65534\"]\ntemplate = 'rx dev={dev} | bpf \"udp\"'\n"),
    )
    .map_err(|e| err(format!("{}: {e}", policy.display())))?;
    Ok(policy)
}

impl Daemon {
    /// Start it with PipesFS mounted at `mount`, or none.
    pub(crate) fn start(bin: &Path, dir: &Path, mount: Option<&Path>) -> Result<Daemon> {
        Self::start_with_policy(bin, dir, mount, None)
    }

    /// [`Daemon::start`] with a policy file (`--policy`).
    pub(crate) fn start_with_policy(
        bin: &Path,
        dir: &Path,
        mount: Option<&Path>,
        policy: Option<&Path>,
    ) -> Result<Daemon> {
        Self::start_with_args(bin, dir, mount, policy, &[])
    }

    /// [`Daemon::start_with_policy`] with more arguments (`--http 127.0.0.1:0`).
    pub(crate) fn start_with_args(
        bin: &Path,
        dir: &Path,
        mount: Option<&Path>,
        policy: Option<&Path>,
        extra: &[&str],
    ) -> Result<Daemon> {
        let socket = dir.join("control");
        let log = dir.join("streamlined.log");
        let logf = std::fs::File::create(&log)
            .map_err(|e| err(format!("creating {}: {e}", log.display())))?;
        let mut cmd = Command::new(bin);
        match mount {
            Some(m) => cmd.arg("--mount").arg(m),
            None => cmd.arg("--no-mount"),
        };
        if let Some(p) = policy {
            cmd.arg("--policy").arg(p);
        }
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--foreground")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf);
        kill_with_us(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| err(format!("starting {}: {e}", bin.display())))?;
        let mut d = Daemon {
            child: Some(child),
            socket,
            log,
        };
        let t0 = Instant::now();
        while UnixStream::connect(&d.socket).is_err() {
            if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(err(format!(
                    "{} exited ({st}) before listening; its log:\n{}",
                    bin.display(),
                    d.log_text()
                )));
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(err(format!(
                    "{} did not listen on {} within 10 s; its log:\n{}",
                    bin.display(),
                    d.socket.display(),
                    d.log_text()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(d)
    }

    pub(crate) fn client(&self) -> Result<Client> {
        Client::connect(&self.socket).map_err(|e| err(format!("connecting to our daemon: {e}")))
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let t0 = Instant::now();
            while matches!(c.try_wait(), Ok(None)) {
                if t0.elapsed() > Duration::from_secs(10) {
                    let _ = c.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.wait();
        }
    }
}

/// One row of the per-filter table `streamline run` prints at the end of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub blocks_in: u64,
    pub blocks_out: u64,
    pub drops: u64,
}

/// What a run printed at its end: the table, its elapsed time and the `count:` summaries
/// (in the table's order of `count` nodes).
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub rows: Vec<Row>,
    pub elapsed: f64,
    pub counts: Vec<u64>,
}

/// The filter a node label names: `count` of `count`, `count#2`, `count:tail`, `count@1`.
fn base_of(label: &str) -> &str {
    label.split([':', '#', '@']).next().unwrap_or(label)
}

/// Parse the end of a run's standard error (table, `(S s)`, summaries). Errors name the
/// line that did not parse.
pub fn parse_report(text: &str) -> Result<RunReport> {
    let mut lines = text
        .lines()
        .enumerate()
        .skip_while(|(_, l)| !(l.starts_with("filter ") && l.contains("blocks in")));
    if lines.next().is_none() {
        return Err(err(
            "no per-filter table (a line `filter  blocks in ...`) in the run's output",
        ));
    }
    let mut rows = Vec::new();
    let mut elapsed = None;
    for (i, l) in lines.by_ref() {
        if let Some(s) = l.strip_prefix('(').and_then(|l| l.strip_suffix(" s)")) {
            elapsed = Some(s.trim().parse::<f64>().map_err(|_| {
                err(format!(
                    "line {}: elapsed time `{l}` is not a number",
                    i + 1
                ))
            })?);
            break;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() != 10 {
            return Err(err(format!("line {}: a table row has 10 columns (filter, blocks in, bytes in, blocks out, bytes out, drops, made, ended, time ms, space); got `{l}`", i + 1)));
        }
        let num = |k: usize, what: &str| {
            f[k].parse::<u64>()
                .map_err(|_| err(format!("line {}: {what} `{}` is not a number", i + 1, f[k])))
        };
        rows.push(Row {
            label: f[0].to_string(),
            blocks_in: num(1, "blocks in")?,
            blocks_out: num(3, "blocks out")?,
            drops: num(5, "drops")?,
        });
    }
    let elapsed = elapsed.ok_or_else(|| {
        err("the per-filter table does not end with the run's elapsed time `(S s)`")
    })?;
    let mut counts = Vec::new();
    for (i, l) in lines {
        // `count: ...`, or a second or named count's `count#2: ...`, `count:tail: ...`.
        let summary = l
            .split_once(": ")
            .filter(|(label, _)| !label.contains(' ') && base_of(label) == "count")
            .map(|(_, rest)| rest);
        if let Some(rest) = summary {
            let n = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
            counts.push(n.ok_or_else(|| {
                err(format!(
                    "line {}: `{l}` is not `count: N blocks, B bytes`",
                    i + 1
                ))
            })?);
        }
    }
    Ok(RunReport {
        rows,
        elapsed,
        counts,
    })
}

impl RunReport {
    /// Blocks counted by the `count` node labelled `label`: its table row, checked against
    /// its `count:` summary (the summaries come in the table's order of `count` nodes).
    pub fn count_of(&self, label: &str) -> Result<u64> {
        let counts: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| base_of(&r.label) == "count")
            .collect();
        if counts.len() != self.counts.len() {
            return Err(err(format!(
                "{} count nodes in the table but {} `count:` summaries",
                counts.len(),
                self.counts.len()
            )));
        }
        let k = counts
            .iter()
            .position(|r| r.label == label)
            .ok_or_else(|| {
                err(format!(
                    "no node `{label}` in the run's table (nodes: {})",
                    self.rows
                        .iter()
                        .map(|r| r.label.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        if counts[k].blocks_in != self.counts[k] {
            return Err(err(format!(
                "`{label}`: the table says {} blocks in, its summary {}",
                counts[k].blocks_in, self.counts[k]
            )));
        }
        Ok(self.counts[k])
    }

    /// Blocks the first node (the source) emitted.
    pub fn source_blocks(&self) -> Result<u64> {
        self.rows
            .first()
            .map(|r| r.blocks_out)
            .ok_or_else(|| err("the run's table has no rows"))
    }
}

/// The two `streamline` programs and our daemon.
pub(crate) struct Setup {
    pub(crate) streamline: PathBuf,
    pub(crate) daemon: Daemon,
    pub(crate) dir: PathBuf,
}

/// Run a command to its end; fail unless it exits 0. Returns wall seconds and stderr.
fn run_cmd(cmd: &mut Command, what: &str) -> Result<(f64, String)> {
    kill_with_us(cmd);
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| err(format!("starting {what}: {e}")))?;
    let secs = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(err(format!(
            "{what} failed ({}):\n{}",
            out.status,
            stderr.trim()
        )));
    }
    Ok((secs, stderr))
}

impl Setup {
    /// `streamline --socket none run PIPELINE`.
    pub(crate) fn standalone(&self, pipeline: &str) -> Result<(f64, RunReport)> {
        let mut cmd = Command::new(&self.streamline);
        cmd.env_remove("STREAMLINE_SOCKET")
            .args(["--socket", "none", "run", pipeline]);
        let what = format!("`streamline --socket none run '{pipeline}'`");
        let (secs, stderr) = run_cmd(&mut cmd, &what)?;
        Ok((
            secs,
            parse_report(&stderr)
                .map_err(|e| err(format!("{what}: {e}; its output:\n{stderr}")))?,
        ))
    }

    /// `STREAMLINE_SOCKET=OURS streamline run PIPELINE` (attached to the daemon).
    pub(crate) fn through_daemon(&self, pipeline: &str) -> Result<(f64, RunReport)> {
        let mut cmd = Command::new(&self.streamline);
        cmd.env("STREAMLINE_SOCKET", &self.daemon.socket)
            .args(["run", pipeline]);
        let what = format!(
            "`STREAMLINE_SOCKET={} streamline run '{pipeline}'`",
            self.daemon.socket.display()
        );
        let (secs, stderr) = run_cmd(&mut cmd, &what)?;
        Ok((
            secs,
            parse_report(&stderr)
                .map_err(|e| err(format!("{what}: {e}; its output:\n{stderr}")))?,
        ))
    }

    /// Blocks per second of `pipeline(n)` run stand-alone, doubling n from `n0` until a
    /// run's own elapsed time reaches `min_secs`.
    pub(crate) fn calibrate(
        &self,
        pipeline: impl Fn(u64) -> String,
        n0: u64,
        min_secs: f64,
    ) -> Result<f64> {
        let mut n = n0;
        loop {
            let (_, rep) = self.standalone(&pipeline(n))?;
            if rep.elapsed >= min_secs || n >= 1 << 40 {
                return Ok(n as f64 / rep.elapsed.max(1e-6));
            }
            n *= if rep.elapsed < min_secs / 8.0 { 8 } else { 2 };
        }
    }
}

/// Wait for `run` to end (attach until `finished`; a run already gone has ended).
pub(crate) fn wait_end(c: &mut Client, run: u64) -> Result<i32> {
    c.send(Request::Attach { run }, &[])
        .map_err(|e| err(format!("attach {run}: {e}")))?;
    loop {
        match c.recv() {
            Ok((m, _)) => {
                if let Reply::Finished { code, .. } = m.body {
                    return Ok(code);
                }
            }
            Err(ClientError::Refused { errno, .. }) if errno == libc::ESRCH => return Ok(0),
            Err(e) => return Err(err(format!("waiting for run {run}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `streamline run` printed for `gen | count | count name=tail` after the edits
    /// (an inserted count after the tail in report order, a sample with its summary).
    const LOG: &str = "plan (none): one space\n\
filter              blocks in       bytes in   blocks out      bytes out      drops       made      ended    time ms  space\n\
gen                         0              0       100000        6400000          0     100000          0        0.8  0\n\
count                  100000        6400000       100000        6400000          0          0          0        0.1  0\n\
count:tail              99990        6399360            0              0          0          0      99990        0.1  0\n\
count:mid              100000        6400000       100000        6400000          0          0          0        0.2  0\n\
(0.012 s)\n\
count: 100000 blocks, 6400000 bytes\n\
count:tail: 99990 blocks, 6399360 bytes\n\
count:mid: 100000 blocks, 6400000 bytes\n";

    #[test]
    fn the_tail_is_found_by_label_not_by_position() {
        let r = parse_report(LOG).unwrap();
        assert_eq!(r.elapsed, 0.012);
        assert_eq!(r.counts, vec![100000, 99990, 100000]);
        assert_eq!(r.count_of("count:tail").unwrap(), 99990);
        assert_eq!(r.count_of("count:mid").unwrap(), 100000);
        assert_eq!(r.source_blocks().unwrap(), 100000);
        assert!(r
            .count_of("count:nope")
            .unwrap_err()
            .to_string()
            .contains("no node `count:nope`"));
    }

    #[test]
    fn a_summary_that_disagrees_with_its_row_is_an_error() {
        let bad = LOG.replace("count:tail: 99990 blocks", "count:tail: 99991 blocks");
        let e = parse_report(&bad)
            .unwrap()
            .count_of("count:tail")
            .unwrap_err()
            .to_string();
        assert!(e.contains("99990") && e.contains("99991"), "{e}");
        let missing = LOG
            .replace("count: 100000 blocks, 6400000 bytes\n", "")
            .replace("count:mid: 100000 blocks, 6400000 bytes\n", "");
        let e = parse_report(&missing)
            .unwrap()
            .count_of("count:tail")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3 count nodes") && e.contains("1 `count:` summaries"),
            "{e}"
        );
    }

    #[test]
    fn malformed_reports_name_the_line() {
        assert!(parse_report("count: 5 blocks\n")
            .unwrap_err()
            .to_string()
            .contains("no per-filter table"));
        let e = parse_report(&LOG.replace("99990        6399360", "lots        6399360"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 5") && e.contains("blocks in `lots`"),
            "{e}"
        );
        let e = parse_report(&LOG.replace("(0.012 s)\n", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 7") && e.contains("10 columns"), "{e}");
        let e = parse_report(&LOG.replace("count:tail: 99990 blocks", "count:tail: many blocks"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 9"), "{e}");
        // Cut anywhere: an error or a report, never a panic.
        for cut in 0..LOG.len() {
            let _ = parse_report(&LOG[..cut]).and_then(|r| r.count_of("count:tail"));
        }
    }

    #[test]
    fn labels_name_their_filter() {
        for (l, b) in [
            ("count", "count"),
            ("count#2", "count"),
            ("count:tail", "count"),
            ("count@1", "count"),
            ("sample", "sample"),
        ] {
            assert_eq!(base_of(l), b);
        }
    }
}
