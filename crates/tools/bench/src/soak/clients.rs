//! The soak's clients: how a user drives the daemon (`streamline` as root or uid 65534,
//! PipesFS readers), the runs each client thread starts in turn, the capture conductor,
//! and each run followed to its end with its counts checked.

use super::checks::{descendants, fd_count, status_field};
use super::{tail_of, wait_until, End, Expect, Ledger, RunRec, Soak, User, GEN_EDITS, GEN_RATE};
use crate::proc::kill_with_us;
use crate::streamlined::parse_report;
use crate::util::{err, Result};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A command's end.
pub(super) struct Out {
    ok: bool,
    status: String,
    stdout: String,
    stderr: String,
}

/// Run `cmd` to its end, killing it after `limit` (a hung command is an error, never a
/// hung soak).
fn run_within(mut cmd: Command, limit: Duration, what: &str) -> Result<Out> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    kill_with_us(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| err(format!("starting {what}: {e}")))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(o)) => Ok(Out {
            ok: o.status.success(),
            status: o.status.to_string(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }),
        Ok(Err(e)) => Err(err(format!("{what}: {e}"))),
        Err(_) => {
            // SAFETY: kill(2) on our own child, not yet reaped (its waiter is blocked).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = rx.recv();
            Err(err(format!(
                "{what} did not return within {} s (killed)",
                limit.as_secs()
            )))
        }
    }
}

/// The value of `key` in a PipesFS `.stats` text.
fn stat_value(stats: &str, key: &str) -> Option<u64> {
    stats.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// One row of `streamline ps`: id, user, state.
#[derive(Debug, Clone)]
pub(super) struct PsRow {
    pub(super) id: u64,
    pub(super) user: String,
    pub(super) state: String,
}

/// Parse `streamline ps` (a header, then `ID USER STATE UPTIME RATE PIPELINE` rows, each
/// maybe followed by an indented placement line). The state may hold spaces
/// (`running (detached)`): it is the text between the user and the uptime (`12.3s`).
fn parse_ps(text: &str) -> Result<Vec<PsRow>> {
    let mut rows = Vec::new();
    for l in text.lines().skip(1) {
        if !l.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let up = f
            .iter()
            .position(|w| w.ends_with('s') && w[..w.len() - 1].parse::<f64>().is_ok())
            .ok_or_else(|| err(format!("`streamline ps`: no uptime in `{l}`")))?;
        if up < 3 {
            return Err(err(format!("`streamline ps`: a short row `{l}`")));
        }
        rows.push(PsRow {
            id: f[0]
                .parse()
                .map_err(|_| err(format!("`streamline ps`: id `{}` in `{l}`", f[0])))?,
            user: f[1].to_string(),
            state: f[2..up].join(" "),
        });
    }
    Ok(rows)
}

impl Soak {
    pub(super) fn fail(&self, name: impl Into<String>, cause: impl Into<String>) {
        let (name, cause) = (name.into(), cause.into());
        println!("FAILURE {name}: {cause}");
        self.failures
            .lock()
            .expect("not poisoned")
            .push((name, cause));
    }

    pub(super) fn book(&self, f: impl FnOnce(&mut Ledger)) {
        f(&mut self.ledger.lock().expect("not poisoned"))
    }

    pub(super) fn deadline(&self) -> Instant {
        *self.deadline.lock().expect("not poisoned")
    }

    pub(super) fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    pub(super) fn cli(&self, user: User) -> Command {
        let mut c = match user {
            User::Root => Command::new(&self.streamline),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(&self.streamline);
                c
            }
        };
        c.env("STREAMLINE_SOCKET", &self.socket);
        c
    }

    /// `streamline ARGS` as `user`, at most 30 s.
    pub(super) fn call(&self, user: User, args: &[&str]) -> Result<Out> {
        let mut c = self.cli(user);
        c.args(args);
        run_within(
            c,
            Duration::from_secs(30),
            &format!("`streamline {}` as {}", args.join(" "), user.name()),
        )
    }

    /// `streamline run --detach --log LOG [flags] PIPELINE` as `user`; the run, or a failure.
    pub(super) fn start(&self, user: User, pipeline: &str, flags: &[&str]) -> Option<RunRec> {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        let log = self.logs.join(format!("run-{k}.log"));
        let log_s = log.to_string_lossy().into_owned();
        let mut args = vec!["run", "--detach", "--log", &log_s];
        args.extend_from_slice(flags);
        args.push(pipeline);
        let name = format!("start #{k} ({}: {pipeline})", user.name());
        match self.call(user, &args) {
            Ok(o) if o.ok => match o.stdout.trim().parse::<u64>() {
                Ok(id) => {
                    self.book(|l| {
                        l.started += 1;
                        l.started_by[user as usize] += 1;
                    });
                    Some(RunRec {
                        id,
                        user,
                        pipeline: pipeline.to_string(),
                        log,
                    })
                }
                Err(_) => {
                    self.fail(name, format!("printed no run id: `{}`", o.stdout.trim()));
                    None
                }
            },
            Ok(o) => {
                self.fail(name, format!("refused ({}): {}", o.status, o.stderr.trim()));
                None
            }
            Err(e) => {
                self.fail(name, e.to_string());
                None
            }
        }
    }

    pub(super) fn ps(&self) -> Result<Vec<PsRow>> {
        let o = self.call(User::Root, &["ps"])?;
        if !o.ok {
            return Err(err(format!(
                "`streamline ps` failed ({}): {}",
                o.status,
                o.stderr.trim()
            )));
        }
        parse_ps(&o.stdout)
    }

    /// Check that `ps` shows the run running, owned by its user; false (and a failure)
    /// if not.
    pub(super) fn check_running(&self, r: &RunRec, when: &str) -> bool {
        let rows = match self.ps() {
            Ok(rows) => rows,
            Err(e) => {
                self.fail(format!("{} ps {when}", r.name()), e.to_string());
                return false;
            }
        };
        match rows.iter().find(|p| p.id == r.id) {
            Some(p) if p.state.starts_with("running") => {
                let want = match r.user {
                    User::Root => ["root", "0"],
                    User::Nobody => ["nobody", "65534"],
                };
                if !want.contains(&p.user.as_str()) {
                    self.fail(
                        format!("{} owner in ps", r.name()),
                        format!("ps says user `{}`", p.user),
                    );
                }
                true
            }
            Some(p) => {
                self.fail(
                    format!("{} {when}", r.name()),
                    format!("ps says state `{}`, not running", p.state),
                );
                false
            }
            None => {
                let end = self
                    .audit
                    .lock()
                    .expect("not poisoned")
                    .ends
                    .get(&r.id)
                    .cloned();
                self.fail(
                    format!("{} {when}", r.name()),
                    format!(
                        "gone from ps while it should run; the daemon's log: {}; its log: {}",
                        end.map_or("no end recorded".to_string(), |e| e.line),
                        tail_of(&r.log, 6)
                    ),
                );
                false
            }
        }
    }

    /// `streamline edit ID TEXT` as the run's user; whether it was applied. A refusal
    /// is a failure unless the run has ended (`ended_ok`: a finite run may outrun its
    /// edits).
    pub(super) fn edit(&self, r: &RunRec, text: &str, ended_ok: bool) -> bool {
        let id = r.id.to_string();
        match self.call(r.user, &["edit", &id, text]) {
            Ok(o) if o.ok => {
                self.book(|l| l.edits += 1);
                true
            }
            Ok(o) => {
                // Refused because the run had ended (its end is in the daemon's log).
                let ended = ended_ok && self.end_of(r.id, Duration::from_secs(3)).is_some();
                if !ended {
                    self.fail(
                        format!("{} edit `{text}`", r.name()),
                        format!("refused ({}): {}", o.status, o.stderr.trim()),
                    );
                }
                false
            }
            Err(e) => {
                self.fail(format!("{} edit `{text}`", r.name()), e.to_string());
                false
            }
        }
    }

    pub(super) fn stop(&self, r: &RunRec) -> bool {
        let id = r.id.to_string();
        match self.call(r.user, &["stop", &id]) {
            Ok(o) if o.ok => true,
            Ok(o) => {
                self.fail(
                    format!("{} stop", r.name()),
                    format!("refused ({}): {}", o.status, o.stderr.trim()),
                );
                false
            }
            Err(e) => {
                self.fail(format!("{} stop", r.name()), e.to_string());
                false
            }
        }
    }

    /// The run's end in the daemon's log, waiting up to `limit`.
    pub(super) fn end_of(&self, id: u64, limit: Duration) -> Option<End> {
        let t0 = Instant::now();
        loop {
            if let Some(e) = self.audit.lock().expect("not poisoned").ends.get(&id) {
                return Some(e.clone());
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Follow a run to its end (`stopped`: we asked it to stop) and check its counts.
    pub(super) fn finish(&self, r: &RunRec, stopped: bool, limit: Duration, expect: Expect) {
        let Some(end) = self.end_of(r.id, limit) else {
            self.fail(
                format!("{} end", r.name()),
                format!(
                    "no end within {} s{}; its log: {}",
                    limit.as_secs(),
                    if stopped { " of its stop" } else { "" },
                    tail_of(&r.log, 6)
                ),
            );
            self.book(|l| l.unresolved.push(r.id));
            // Try once more, so it does not outlive the soak.
            let _ = self.call(User::Root, &["stop", &r.id.to_string()]);
            return;
        };
        if end.event != "finished" || end.status != Some(0) {
            self.fail(
                format!("{} end", r.name()),
                format!(
                    "{}; its log: {}",
                    end.line.trim_start_matches("streamlined: audit: "),
                    tail_of(&r.log, 8)
                ),
            );
            self.book(|l| l.died += 1);
            return;
        }
        self.book(|l| {
            if stopped {
                l.stopped += 1
            } else {
                l.ended += 1
            }
        });
        // The report is written before `finished` is sent; the log is ours to read.
        let text = std::fs::read_to_string(&r.log).unwrap_or_default();
        let check = || -> Result<u64> {
            let rep = parse_report(&text)?;
            // A node in another space is labelled with it (`count:tail@p2`).
            let label = |want: &str| -> String {
                rep.rows
                    .iter()
                    .map(|r| r.label.as_str())
                    .find(|l| *l == want || l.split('@').next() == Some(want))
                    .unwrap_or(want)
                    .to_string()
            };
            match expect {
                Expect::Finite(n) => {
                    let (src, tail) = (rep.source_blocks()?, rep.count_of(&label("count:tail"))?);
                    if src != n || tail != n {
                        return Err(err(format!(
                            "the source emitted {src} and the tail counted {tail}, of {n}"
                        )));
                    }
                    Ok(n)
                }
                Expect::Lossless => {
                    let (src, tail) = (rep.source_blocks()?, rep.count_of(&label("count:tail"))?);
                    if src != tail {
                        return Err(err(format!(
                            "the source emitted {src} but the tail counted {tail}"
                        )));
                    }
                    Ok(src)
                }
                Expect::Captured(n) => {
                    let got = rep.count_of(&label("count:cap"))?;
                    let lost = lost_to_full_rings(&text);
                    if got + lost != n {
                        return Err(err(format!(
                            "counted {got} of the {n} datagrams sent while it ran{}",
                            if lost > 0 {
                                format!(" and said it lost {lost}: they do not add up")
                            } else {
                                String::new()
                            }
                        )));
                    }
                    self.book(|l| l.capture_lost += lost);
                    Ok(n)
                }
                Expect::Ended => Ok(0),
            }
        };
        match check() {
            Ok(n) => self.book(|l| {
                if matches!(expect, Expect::Captured(_)) {
                    l.checked_datagrams += n
                } else {
                    l.checked_blocks += n
                }
            }),
            Err(e) => self.fail(
                format!("{} counts", r.name()),
                format!("{e}; its log: {}", text.trim().replace('\n', " | ")),
            ),
        }
    }

    /// A `cat` of `file` (as `user`) whose output nobody reads, held `hold`, then
    /// killed; the node's `.stats` must count it as a reader meanwhile and not after.
    pub(super) fn stalled_reader(&self, user: User, file: &Path, hold: Duration, what: &str) {
        let stats = file.with_file_name(".stats");
        let name = format!("stalled reader of {what} ({})", user.name());
        if !wait_until(Duration::from_secs(10), || file.exists()) {
            self.fail(
                name,
                format!("{} did not appear within 10 s", file.display()),
            );
            return;
        }
        let mut cmd = match user {
            User::Root => Command::new("cat"),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                    "cat",
                ]);
                c
            }
        };
        cmd.arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        kill_with_us(&mut cmd);
        let mut child: Child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                self.fail(name, format!("starting cat: {e}"));
                return;
            }
        };
        self.book(|l| l.readers += 1);
        let readers = || {
            std::fs::read_to_string(&stats)
                .ok()
                .and_then(|s| stat_value(&s, "readers"))
        };
        if !wait_until(Duration::from_secs(10), || {
            readers().is_some_and(|n| n >= 1)
        }) {
            let exited = child.try_wait().ok().flatten();
            let mut e = String::new();
            if exited.is_some() {
                if let Some(mut s) = child.stderr.take() {
                    let _ = s.read_to_string(&mut e);
                }
            }
            self.fail(
                name.clone(),
                format!(
                    "{} never showed it as a reader (readers {:?}); cat {}{}",
                    stats.display(),
                    readers(),
                    exited.map_or("still running".to_string(), |s| format!("exited ({s})")),
                    if e.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", e.trim())
                    }
                ),
            );
        }
        let t0 = Instant::now();
        while t0.elapsed() < hold && !self.done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Ok(Some(st)) = child.try_wait() {
            let mut e = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = s.read_to_string(&mut e);
            }
            self.fail(
                name.clone(),
                format!("cat ended by itself while stalled ({st}): {}", e.trim()),
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        if !wait_until(Duration::from_secs(10), || readers() == Some(0)) {
            self.fail(
                name,
                format!(
                    "{} still counts {:?} readers 10 s after the reader was killed",
                    stats.display(),
                    readers()
                ),
            );
        }
    }

    /// The monitor: reads the daemon's log as it grows and notes every process below
    /// the daemon, every 100 ms / 500 ms, until `done`.
    pub(super) fn monitor(&self) {
        let mut k = 0u64;
        loop {
            let last = self.done.load(Ordering::Relaxed);
            self.read_audit();
            if k % 5 == 0 || last {
                let now = descendants(self.daemon_pid);
                let mut seen = self.seen.lock().expect("not poisoned");
                for (pid, v) in now {
                    seen.entry(pid).or_insert(v);
                }
            }
            if last {
                return;
            }
            k += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(super) fn read_audit(&self) {
        let text = std::fs::read(&self.daemon_log).unwrap_or_default();
        let mut a = self.audit.lock().expect("not poisoned");
        // Whole lines only.
        let Some(end) = text[a.read.min(text.len())..]
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|p| a.read + p + 1)
        else {
            return;
        };
        let new = String::from_utf8_lossy(&text[a.read..end]).into_owned();
        a.read = end;
        for line in new.lines() {
            if line.contains("panicked") {
                a.panics.push(line.to_string());
            }
            let Some(rest) = line.strip_prefix("streamlined: audit: ") else {
                continue;
            };
            let event = rest.split_whitespace().next().unwrap_or("");
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .and_then(|v| v.parse::<i64>().ok())
            };
            let Some(run) = field("run=").map(|r| r as u64) else {
                continue;
            };
            match event {
                "started" => {
                    a.started.insert(run);
                }
                "finished" | "crashed" | "rolled_back" => {
                    let e = End {
                        event: event.to_string(),
                        status: field("status=").map(|s| s as i32),
                        line: line.to_string(),
                    };
                    if a.ends.insert(run, e).is_some() {
                        a.doubled.push(run);
                    }
                }
                _ => {}
            }
        }
    }

    /// One user's stream of runs until the deadline; `k0` numbers this thread.
    pub(super) fn user_loop(&self, user: User, k0: usize, quick: bool) {
        let mut k = k0;
        while !self.past_deadline() {
            match k % 4 {
                0 => self.edited_finite(user, quick),
                1 => self.endless_with_reader(user),
                2 => self.across_spaces(user),
                _ => self.short_ones(user),
            }
            k += 1;
        }
    }

    /// A finite run edited seven times while it runs, left to end.
    pub(super) fn edited_finite(&self, user: User, quick: bool) {
        let secs = if quick { 1.5 } else { 2.5 };
        let n = (GEN_RATE as f64 * secs) as u64;
        let p = format!("gen count={n} size=64 rate={GEN_RATE} | count name=a | count name=tail");
        let Some(r) = self.start(user, &p, &[]) else {
            return;
        };
        self.check_running(&r, "after start");
        let t0 = Instant::now();
        for (j, e) in GEN_EDITS.iter().enumerate() {
            let at = secs * 0.8 * j as f64 / GEN_EDITS.len() as f64;
            let wait = at - t0.elapsed().as_secs_f64();
            if wait > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
            if !self.edit(&r, e, true) {
                break;
            }
        }
        self.finish(
            &r,
            false,
            Duration::from_secs_f64(secs + 30.0),
            Expect::Finite(n),
        );
    }

    /// An endless run with an exported node, a stalled PipesFS reader, edits, then stop.
    pub(super) fn endless_with_reader(&self, user: User) {
        let ex = format!(
            "{}{}x{}",
            self.tag,
            if user == User::Root { "r" } else { "n" },
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let p = format!(
            "gen count=100G size=256 rate={GEN_RATE} | count name=a | count name={ex} export=yes | count name=tail"
        );
        let Some(r) = self.start(user, &p, &[]) else {
            return;
        };
        self.check_running(&r, "after start");
        if !wait_until(Duration::from_secs(10), || {
            Path::new(&format!("/dev/shm/streamline.{ex}")).exists()
        }) {
            self.fail(
                format!("{} export", r.name()),
                format!("/dev/shm/streamline.{ex} did not appear within 10 s"),
            );
        }
        let all = self.mount.join(r.id.to_string()).join("gen/count:a/all");
        self.stalled_reader(
            user,
            &all,
            Duration::from_millis(1500),
            &format!("run {} count:a", r.id),
        );
        for e in &GEN_EDITS[..3] {
            self.edit(&r, e, false);
        }
        self.check_running(&r, "before stop");
        if self.stop(&r) {
            self.finish(&r, true, Duration::from_secs(30), Expect::Lossless);
        } else {
            self.book(|l| l.unresolved.push(r.id));
        }
        if !wait_until(Duration::from_secs(10), || {
            !Path::new(&format!("/dev/shm/streamline.{ex}")).exists()
        }) {
            self.fail(
                format!("{} export", r.name()),
                format!("/dev/shm/streamline.{ex} still there 10 s after the run ended"),
            );
        }
    }

    /// A finite run across a thread space and a process space, left to end.
    pub(super) fn across_spaces(&self, user: User) {
        let n = GEN_RATE;
        let p = format!(
            "gen count={n} size=64 rate={GEN_RATE} | count name=a space=1 | count name=tail space=p2"
        );
        let Some(r) = self.start(user, &p, &[]) else {
            return;
        };
        self.finish(&r, false, Duration::from_secs(40), Expect::Finite(n));
    }

    /// Three short runs, one stopped at once; of root's, uid 65534 may neither stop nor
    /// edit one.
    pub(super) fn short_ones(&self, user: User) {
        // Three seconds each, so the stops and the other user's tries find them running.
        let n = 6000;
        let p = format!(
            "gen count={n} size=64 rate={} | count name=a | count name=tail",
            n / 3
        );
        let runs: Vec<RunRec> = (0..3).filter_map(|_| self.start(user, &p, &[])).collect();
        // Root may stop and edit anyone's run; uid 65534 may not touch root's.
        if let Some(r) = runs.first().filter(|_| user == User::Root) {
            let id = r.id.to_string();
            let other = user.other();
            for args in [
                vec!["stop", id.as_str()],
                vec!["edit", id.as_str(), "remove count:a"],
            ] {
                match self.call(other, &args) {
                    Ok(o) if o.ok => self.fail(
                        format!("{} {} by {}", r.name(), args[0], other.name()),
                        format!("allowed: `{}`", o.stdout.trim()),
                    ),
                    Ok(_) => self.book(|l| l.refusals_checked += 1),
                    Err(e) => self.fail(
                        format!("{} {} by {}", r.name(), args[0], other.name()),
                        e.to_string(),
                    ),
                }
            }
        }
        let mut stopped = None;
        if let Some(r) = runs.get(1) {
            if self.stop(r) {
                stopped = Some(r.id);
            }
        }
        for r in &runs {
            if Some(r.id) == stopped {
                self.finish(r, true, Duration::from_secs(30), Expect::Lossless);
            } else {
                self.finish(r, false, Duration::from_secs(30), Expect::Finite(n));
            }
        }
    }
}

/// A capture run and the datagram count when it started.
struct Cap {
    run: RunRec,
    sent_at_start: u64,
    /// The quiet spell in which it is to be stopped (None: at the end).
    stop_after: Option<usize>,
}

/// The capture conductor: bursts, quiet spells, capture runs started, edited, read and
/// stopped in the quiet.
pub(super) fn captures(s: &Soak, v: &kernel::netns::Veth, quiet: f64, burst: f64) -> Result<()> {
    let max = crate::traffic::max_rate(&v.here_ip, &v.peer_ip, 0.5, 64)?;
    let pps = ((max * 0.2) as u64).clamp(1000, 50_000);
    println!(
        "captures on {}: the sender keeps {max:.0} datagrams/s alone; bursts of {burst} s at {pps}/s, quiet spells of {quiet} s",
        v.here
    );
    let mut sent = 0u64;
    let pipe = format!("rx dev={} | bpf \"udp\" | count name=cap", v.here);
    let mut caps: Vec<Cap> = Vec::new();
    let start_cap = |user: User, flags: &[&str], stop_after: Option<usize>, sent: u64| {
        s.start(user, &pipe, flags).map(|run| Cap {
            run,
            sent_at_start: sent,
            stop_after,
        })
    };
    caps.extend(start_cap(User::Root, &[], None, sent));
    caps.extend(start_cap(User::Nobody, &[], None, sent));
    let cycle = burst + quiet + 2.0;
    let mut c = 0usize;
    while s
        .deadline()
        .saturating_duration_since(Instant::now())
        .as_secs_f64()
        > cycle
    {
        // New captures for the next burst and the quiet after it.
        let flags: &[&str] = if c % 2 == 0 { &[] } else { &["--no-share"] };
        caps.extend(start_cap(User::Root, flags, Some(c + 1), sent));
        caps.extend(start_cap(User::Nobody, &[], Some(c + 1), sent));
        // Still in the quiet: a capture whose `run --detach` returned captures already.
        std::thread::sleep(Duration::from_secs(1));
        let (n, _) = crate::traffic::send_sized(&v.here_ip, &v.peer_ip, pps, burst, 1, 64)?;
        sent += n;
        let quiet_from = Instant::now();
        let rss = status_field(s.daemon_pid, "VmRSS:").unwrap_or(0);
        s.rss_samples
            .lock()
            .expect("not poisoned")
            .push((quiet_from, rss));
        println!(
            "[{:>4.0} s left] burst {c}: {n} datagrams ({sent} in all); {} captures running; daemon {rss} kB resident, {} descriptors; quiet for {quiet} s",
            s.deadline().saturating_duration_since(quiet_from).as_secs_f64(),
            caps.len(),
            fd_count(s.daemon_pid)
        );
        // In the quiet: the long captures edited; a reader blocked in its read, killed.
        std::thread::sleep(Duration::from_secs(1));
        for cap in caps.iter().filter(|c| c.stop_after.is_none()) {
            s.edit(
                &cap.run,
                &format!("insert after bpf count name=e{c}"),
                false,
            );
        }
        if let Some(cap) = caps.iter().find(|cap| cap.stop_after == Some(c + 1)) {
            // The source's directory: `rx`, or the shared prefix's last node (`bpf`) for a
            // run sharing a capture (its subscription, folded as the table folds it).
            let top = s.mount.join(cap.run.id.to_string());
            let mut src = None;
            wait_until(Duration::from_secs(10), || {
                src = std::fs::read_dir(&top).ok().and_then(|d| {
                    d.flatten().map(|e| e.path()).find(|p| {
                        p.is_dir()
                            && !p
                                .file_name()
                                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                    })
                });
                src.is_some()
            });
            let file = src.unwrap_or_else(|| top.join("rx")).join("all.pcap");
            s.stalled_reader(
                cap.run.user,
                &file,
                Duration::from_secs_f64(quiet / 3.0),
                &format!("capture run {} rx", cap.run.id),
            );
        }
        for cap in caps.iter().filter(|c| c.stop_after.is_none()) {
            s.edit(&cap.run, &format!("remove count:e{c}"), false);
        }
        let left = quiet - quiet_from.elapsed().as_secs_f64();
        if left > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(left));
        }
        // The end of the quiet spell: every capture must still run; those due stop, the
        // latest first (a run sharing another's capture ends when that one does, and it
        // started later).
        let mut keep = Vec::new();
        let mut due = Vec::new();
        for cap in caps.drain(..) {
            let alive = s.check_running(&cap.run, &format!("after quiet spell {c} ({quiet} s)"));
            if cap.stop_after == Some(c) || !alive {
                due.push((cap, alive));
            } else {
                keep.push(cap);
            }
        }
        for (cap, alive) in due.iter().rev() {
            stop_cap(s, cap, sent, *alive);
        }
        caps = keep;
        c += 1;
    }
    std::thread::sleep(Duration::from_secs(1));
    let alive: Vec<bool> = caps
        .iter()
        .map(|cap| s.check_running(&cap.run, "at the end"))
        .collect();
    for (cap, alive) in caps.iter().zip(alive).rev() {
        stop_cap(s, cap, sent, alive);
    }
    Ok(())
}

fn stop_cap(s: &Soak, cap: &Cap, sent: u64, alive: bool) {
    if !alive {
        // Died (already a failure): account for its end.
        s.finish(&cap.run, false, Duration::from_secs(5), Expect::Ended);
        return;
    }
    if s.stop(&cap.run) {
        s.finish(
            &cap.run,
            true,
            Duration::from_secs(30),
            Expect::Captured(sent - cap.sent_at_start),
        );
    } else {
        s.book(|l| l.unresolved.push(cap.run.id));
    }
}

/// Blocks a run's log says it lost to a full ring (`NODE: N blocks received, lost M blocks
/// to a full ring (subscriber fell behind)`, one line per subscription).
fn lost_to_full_rings(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("to a full ring"))
        .filter_map(|l| {
            let after = l.split_once(", lost ")?.1;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_rows_keep_states_with_spaces() {
        let text = "ID    USER       STATE                   UPTIME   BLOCKS/S  PIPELINE\n\
1     root       running (detached)          3.2s      20.0k  gen | count\n\
      plan (none): one space\n\
12    nobody     finished (0)                0.1s          0  gen | count\n";
        let rows = parse_ps(text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].id, rows[0].user.as_str()), (1, "root"));
        assert_eq!(rows[0].state, "running (detached)");
        assert_eq!((rows[1].id, rows[1].state.as_str()), (12, "finished (0)"));
        assert!(parse_ps("ID USER\n7 root\n").is_err());
    }

    #[test]
    fn stats_values_by_key() {
        let s = "label count:a\nreaders 2\nreaders_delivered 10\n";
        assert_eq!(stat_value(s, "readers"), Some(2));
        assert_eq!(stat_value(s, "readers_delivered"), Some(10));
        assert_eq!(stat_value(s, "readers_lost"), None);
    }

    #[test]
    fn losses_a_capture_reports_are_read_from_its_log() {
        let log = "bpf: 99722 blocks received, lost 7438 blocks to a full ring (subscriber fell behind)\ncount: 99722 blocks, 10570532 bytes\n";
        assert_eq!(lost_to_full_rings(log), 7438);
        assert_eq!(lost_to_full_rings("count: 5 blocks, 5 bytes\n"), 0);
    }
}
