//! The daemon: one listening socket, a thread per client connection, and the runs it owns.
//!
//! Owns: the table of runs (id, owner, state, placement, counters), their workers, the
//! transactions of connections (a run opened and not yet activated belongs to its
//! connection and is rolled back when the connection ends), access checks per call, and
//! the limits that keep hostile clients from hurting others. Does not own: running a
//! pipeline (each run is a worker process, `streamline-worker __worker`, that builds and runs
//! it with the client's identity and talks to us over a socket pair), the policy's
//! rules (`policy`), the wire format (`proto`).

mod capture;
mod edits;
mod monitor;
mod open;
mod run;

pub(crate) use run::{Run, State, TapAnswer};

use crate::audit;
use crate::policy::{Cred, Policy};
use crate::proto::{
    self, ArcCounters, EditApplied, EditOp, EditRequest, FromWorker, GraphNode, Msg, NodeCounters,
    Peer, ProtoError, Reply, Request, RunInfo, RunOptions, SpaceSite, TapFilter,
};
use crate::view::View;
use crate::ToWorker;
use lang::wire::EditWire;
use lang::NodeKind;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How the daemon was started.
#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub policy: Policy,
    /// The worker program that runs a pipeline (`streamline-worker __worker`).
    pub worker: PathBuf,
    /// Most unprivileged client connections at once, of all users together; more are told
    /// EAGAIN and closed. Root's connections are not counted and never refused.
    pub max_clients: usize,
    /// How long a new connection may take to say hello.
    pub hello_timeout: Duration,
}

/// The daemon's shared state.
pub struct Daemon {
    cfg: Config,
    runs: Mutex<BTreeMap<u64, Arc<Run>>>,
    next_run: AtomicU64,
    next_conn: AtomicU64,
    /// Connections open, per user (the limits: `connections_per_user`, `--max-clients`).
    conns: Mutex<Conns>,
    /// Opens under way per user, not yet in `runs` (counted with the runs it has, so two
    /// opens at once cannot both take the last place).
    opening: Mutex<BTreeMap<u32, usize>>,
    /// Set when the daemon is told to stop.
    pub quit: Arc<AtomicBool>,
    /// Shared captures (`capture` of an interface): per device, the run capturing it and
    /// how many subscriptions use it. Held while a capture run is made, so two readers of
    /// one device never start two captures.
    captures: Mutex<BTreeMap<String, (u64, usize)>>,
    /// Subscriptions per connection.
    subs: Mutex<BTreeMap<u64, Vec<Subscription>>>,
    /// What the daemon holds for its readers' libpcap options (promiscuous mode).
    capture_opts: Mutex<capture::Held>,
    /// Runs that died or failed, as `ps` last showed them and with state `failed:
    /// REASON`, newest last: a run that dies leaves the table, but not without a word.
    /// Kept [`FAILED_KEPT`] long, at most [`FAILED_MAX`] of them.
    failed: Mutex<std::collections::VecDeque<(Instant, RunInfo)>>,
    /// The exit codes of runs that ended, newest last: (when, run, owner's uid, code),
    /// kept [`FAILED_KEPT`] long, at most [`ENDED_MAX`]. An attached client whose run
    /// ended before its `attach` arrived (a worker killed at once) learns the code here.
    ended: Mutex<std::collections::VecDeque<(Instant, u64, u32, i32)>>,
    /// Called with a run's id once it has left the table (ended, or rolled back): what
    /// others keep per run (PipesFS's inodes, homes, reader counters) is given back here.
    run_gone: Mutex<Vec<RunGoneHook>>,
    /// The web view, when the daemon serves one (`--http`; `crate::web`, which sits above
    /// this table and reads it).
    web: std::sync::OnceLock<Arc<dyn WebLogin>>,
}

/// What the daemon's `web` request asks of the web view it serves (`crate::web::Web`).
pub(crate) trait WebLogin: Send + Sync {
    /// A one-time login address for user `who`: the view's URL with a new session token.
    fn login_url(&self, who: &Cred) -> std::io::Result<String>;
}

/// How long `ps` lists a run that failed.
const FAILED_KEPT: Duration = Duration::from_secs(3600);
/// How many failed runs `ps` lists at most (the oldest go first).
const FAILED_MAX: usize = 64;

/// How many ended runs' exit codes the daemon keeps for late `attach` requests.
const ENDED_MAX: usize = 1024;

/// See `Daemon::on_run_gone`.
type RunGoneHook = Box<dyn Fn(&Daemon, u64) + Send + Sync>;

/// The connections open: per uid, and the unprivileged ones together.
#[derive(Default)]
struct Conns {
    per_user: BTreeMap<u32, usize>,
    unprivileged: usize,
    /// Users whose refusal is in the log already (once until one of theirs closes).
    logged: BTreeSet<u32>,
}

/// A connection's place in the count, given back when it ends.
struct ConnSlot {
    d: Arc<Daemon>,
    uid: u32,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut c = self.d.conns.lock().expect("not poisoned");
        if let Some(n) = c.per_user.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                c.per_user.remove(&self.uid);
            }
        }
        if self.uid != 0 {
            c.unprivileged -= 1;
        }
        c.logged.remove(&self.uid);
    }
}

/// An open under way (counted in `Daemon::opening` until it is in the table or failed).
struct OpenSlot<'a> {
    d: &'a Daemon,
    uid: Option<u32>,
}

impl Drop for OpenSlot<'_> {
    fn drop(&mut self) {
        if let Some(uid) = self.uid {
            let mut o = self.d.opening.lock().expect("not poisoned");
            if let Some(n) = o.get_mut(&uid) {
                *n -= 1;
                if *n == 0 {
                    o.remove(&uid);
                }
            }
        }
    }
}

/// A legacy reader's subscription: (run, subscription id, the shared capture's device if
/// it is one).
type Subscription = (u64, u64, Option<String>);

/// Refusals carry an errno and a message.
type CallResult = Result<(Reply, Vec<OwnedFd>), Reply>;

fn refuse(errno: i32, msg: impl Into<String>) -> Reply {
    Reply::error(errno, msg)
}

impl Daemon {
    pub fn new(cfg: Config) -> Arc<Daemon> {
        Arc::new(Daemon {
            cfg,
            runs: Mutex::new(BTreeMap::new()),
            next_run: AtomicU64::new(1),
            next_conn: AtomicU64::new(1),
            conns: Mutex::new(Conns::default()),
            opening: Mutex::new(BTreeMap::new()),
            quit: Arc::new(AtomicBool::new(false)),
            captures: Mutex::new(BTreeMap::new()),
            subs: Mutex::new(BTreeMap::new()),
            capture_opts: Mutex::new(capture::Held::default()),
            failed: Mutex::new(std::collections::VecDeque::new()),
            ended: Mutex::new(std::collections::VecDeque::new()),
            run_gone: Mutex::new(Vec::new()),
            web: std::sync::OnceLock::new(),
        })
    }

    /// Accept clients until `quit`; each connection gets a thread.
    pub fn serve(self: &Arc<Self>, listener: UnixListener) -> std::io::Result<()> {
        listener.set_nonblocking(true)?;
        while !self.quit.load(Ordering::Relaxed) {
            // Sleep in poll until a client connects (no latency added to a connect), waking
            // now and then to notice `quit`.
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&listener),
                nix::poll::PollFlags::POLLIN,
            )];
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u16));
            match listener.accept() {
                Ok((sock, _)) => {
                    // Who it is, as the kernel says, decides which count it joins.
                    let Ok(peer) = proto::peer(&sock) else {
                        continue;
                    };
                    let slot = match self.admit(peer.uid) {
                        Ok(s) => s,
                        Err(why) => {
                            // Still non-blocking: a refusal never waits for its reader.
                            let _ = proto::send(
                                &sock,
                                &Msg {
                                    id: 0,
                                    body: refuse(libc::EAGAIN, why),
                                },
                                &[],
                            );
                            continue;
                        }
                    };
                    let _ = sock.set_nonblocking(false);
                    let d = self.clone();
                    let _ = std::thread::Builder::new()
                        .name("sl-client".into())
                        .spawn(move || {
                            d.connection(sock, peer);
                            drop(slot);
                        });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("streamlined: error: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        self.shutdown();
        Ok(())
    }

    /// Count a new connection of `uid`, or say which limit turns it away. Root is never
    /// refused (nor counted against `--max-clients`): one user at its limit, or many users
    /// together, cannot lock the administrator out.
    fn admit(self: &Arc<Self>, uid: u32) -> Result<ConnSlot, String> {
        let lim = &self.cfg.policy.limits;
        let mut c = self.conns.lock().expect("not poisoned");
        let mine = c.per_user.get(&uid).copied().unwrap_or(0);
        if uid != 0 {
            let why = if mine >= lim.connections_per_user {
                Some(format!(
                    "uid {uid} has {mine} connections open ({})",
                    self.cfg
                        .policy
                        .limit_note("connections_per_user", lim.connections_per_user)
                ))
            } else if c.unprivileged >= self.cfg.max_clients {
                Some(format!(
                    "too many clients: {} connections of unprivileged users are open (at most {} at once, streamlined --max-clients; root's are not counted); try again",
                    c.unprivileged, self.cfg.max_clients
                ))
            } else {
                None
            };
            if let Some(why) = why {
                if c.logged.insert(uid) {
                    audit::connection_refused(uid, &why);
                }
                return Err(why);
            }
            c.unprivileged += 1;
        }
        *c.per_user.entry(uid).or_default() += 1;
        Ok(ConnSlot {
            d: self.clone(),
            uid,
        })
    }

    /// Count an open by `who` under way, or say which limit refuses it: the runs it has
    /// opened and not activated, and all its runs (root is not limited).
    fn reserve_open(&self, who: &Cred) -> Result<OpenSlot<'_>, Reply> {
        if who.root() {
            return Ok(OpenSlot { d: self, uid: None });
        }
        let lim = &self.cfg.policy.limits;
        let mut opening = self.opening.lock().expect("not poisoned");
        let pending = opening.get(&who.uid).copied().unwrap_or(0);
        let (mut built, mut live) = (pending, pending);
        for r in self.runs.lock().expect("not poisoned").values() {
            if r.owner.uid == who.uid {
                match r.state() {
                    State::Built => {
                        built += 1;
                        live += 1
                    }
                    State::Running => live += 1,
                    State::Finished(_) => {}
                }
            }
        }
        let pol = &self.cfg.policy;
        if built >= lim.unactivated_runs_per_user {
            return Err(refuse(
                libc::EAGAIN,
                format!(
                    "uid {} has {built} runs opened and not activated ({}); activate or close them first",
                    who.uid,
                    pol.limit_note("unactivated_runs_per_user", lim.unactivated_runs_per_user)
                ),
            ));
        }
        if live >= lim.runs_per_user {
            return Err(refuse(
                libc::EAGAIN,
                format!(
                    "uid {} has {live} runs ({}); stop some first",
                    who.uid,
                    pol.limit_note("runs_per_user", lim.runs_per_user)
                ),
            ));
        }
        *opening.entry(who.uid).or_default() += 1;
        Ok(OpenSlot {
            d: self,
            uid: Some(who.uid),
        })
    }

    /// Stop every run (the daemon is going away).
    pub fn shutdown(&self) {
        let runs: Vec<Arc<Run>> = self
            .runs
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect();
        for r in runs {
            if r.state() == State::Running {
                audit::stopped(
                    r.owner.uid,
                    r.id,
                    &r.pipeline,
                    0,
                    "the daemon is shutting down",
                );
            }
            r.stop(libc::SIGTERM, Duration::from_secs(5));
        }
    }

    /// One client connection: handshake, then requests until it closes. Whatever the
    /// connection left half-built is rolled back at the end.
    fn connection(self: &Arc<Self>, sock: UnixStream, peer: Peer) {
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let cred = Cred::of(peer.uid, peer.gid);
        let out = match sock.try_clone() {
            Ok(s) => Arc::new(Mutex::new(s)),
            Err(_) => return,
        };
        let send = |m: &Msg<Reply>, fds: &[OwnedFd]| {
            let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
            let s = out.lock().expect("not poisoned");
            proto::send(&s, m, &raw)
        };
        // The handshake, with a deadline (a client that connects and says nothing, or
        // trickles its hello, does not keep a thread forever). A reply the client does not
        // read within the frame timeout fails (and the connection ends) rather than
        // holding this thread, or a run's events, forever.
        let timeout = self.cfg.policy.limits.frame_timeout;
        let _ = sock.set_write_timeout(Some(timeout));
        let _ = sock.set_read_timeout(Some(self.cfg.hello_timeout));
        match proto::recv_within::<Request>(&sock, self.cfg.hello_timeout) {
            Ok((
                Msg {
                    id,
                    body: Request::Hello { version, .. },
                },
                _,
            )) if version == proto::VERSION => {
                let w = Reply::Welcome {
                    version: proto::VERSION,
                    server: format!("streamlined {}", env!("CARGO_PKG_VERSION")),
                    uid: peer.uid,
                    gid: peer.gid,
                    pid: std::process::id() as i32,
                };
                if send(&Msg { id, body: w }, &[]).is_err() {
                    return;
                }
            }
            Ok((
                Msg {
                    id,
                    body: Request::Hello { version, .. },
                },
                _,
            )) => {
                let _ = send(&Msg { id, body: refuse(libc::EPROTO, format!("protocol version {version} is not spoken here (this daemon speaks {})", proto::VERSION)) }, &[]);
                return;
            }
            Ok((Msg { id, .. }, _)) => {
                let _ = send(
                    &Msg {
                        id,
                        body: refuse(libc::EPROTO, "the first request must be hello"),
                    },
                    &[],
                );
                return;
            }
            Err(e) => {
                let _ = send(
                    &Msg {
                        id: 0,
                        body: refuse(libc::EPROTO, e.to_string()),
                    },
                    &[],
                );
                return;
            }
        }
        let _ = sock.set_read_timeout(None);
        // Between frames a client may be idle as long as it likes; a frame once started
        // must arrive whole within the frame timeout.
        loop {
            let (msg, fds) = match proto::recv_within::<Request>(&sock, timeout) {
                Ok(m) => m,
                Err(ProtoError::Closed) | Err(ProtoError::Io(_)) => break,
                Err(e) => {
                    // Garbage, truncated, oversized or stalled: say why and close (the
                    // stream can no longer be trusted to be at a frame boundary).
                    let why = match &e {
                        ProtoError::FrameTimeout { timeout, .. } => format!(
                            "{e} ({}); closing the connection",
                            self.cfg
                                .policy
                                .limit_note("frame_timeout_s", timeout.as_secs_f64())
                        ),
                        _ => e.to_string(),
                    };
                    audit::protocol_error(peer.uid, &why);
                    let _ = send(
                        &Msg {
                            id: 0,
                            body: refuse(libc::EPROTO, why),
                        },
                        &[],
                    );
                    break;
                }
            };
            let id = msg.id;
            let reply = self.call(conn, &cred, peer, msg.body, fds, &out, id);
            let (body, fds) = match reply {
                Ok(r) => r,
                Err(r) => (r, Vec::new()),
            };
            if send(&Msg { id, body }, &fds).is_err() {
                break;
            }
        }
        self.connection_ended(conn);
    }

    /// Roll back what the connection left: runs opened and not activated are destroyed;
    /// attached runs stop (their client is gone).
    fn connection_ended(&self, conn: u64) {
        let subs = self
            .subs
            .lock()
            .expect("not poisoned")
            .remove(&conn)
            .unwrap_or_default();
        for (run, sub, dev) in subs {
            self.end_subscription(run, sub, dev.as_deref());
        }
        let mine: Vec<Arc<Run>> = self
            .runs
            .lock()
            .expect("not poisoned")
            .values()
            .filter(|r| {
                r.conn.load(Ordering::Relaxed) == conn && !r.detached.load(Ordering::Relaxed)
            })
            .cloned()
            .collect();
        for r in mine {
            let built = r.state() == State::Built;
            if !built {
                audit::stopped(
                    r.owner.uid,
                    r.id,
                    &r.pipeline,
                    r.owner.uid,
                    "its client's connection ended (an attached run)",
                );
            }
            r.stop(if built { 0 } else { libc::SIGHUP }, Duration::from_secs(5));
            if built {
                // Never activated: the transaction is undone; the worker's rollback has run
                // (it tears down what it built when told to stop before `go`).
                self.forget_run(r.id);
            }
        }
    }

    fn run_for(&self, id: u64, who: &Cred) -> Result<Arc<Run>, Reply> {
        let r = self
            .runs
            .lock()
            .expect("not poisoned")
            .get(&id)
            .cloned()
            .ok_or_else(|| refuse(libc::ESRCH, format!("no run {id}")))?;
        if r.owner.uid != who.uid && !who.root() {
            return Err(refuse(
                libc::EACCES,
                format!(
                    "run {id} belongs to {} (uid {}); only its owner or root may do that",
                    r.user, r.owner.uid
                ),
            ));
        }
        Ok(r)
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        self: &Arc<Self>,
        conn: u64,
        who: &Cred,
        peer: Peer,
        req: Request,
        fds: Vec<OwnedFd>,
        out: &Arc<Mutex<UnixStream>>,
        id: u64,
    ) -> CallResult {
        let _ = peer;
        if !matches!(req, Request::Open { .. }) && !fds.is_empty() {
            return Err(refuse(
                libc::EINVAL,
                format!(
                    "{} descriptors came with a request that takes none",
                    fds.len()
                ),
            ));
        }
        match req {
            Request::Hello { .. } => Err(refuse(libc::EPROTO, "hello comes once, first")),
            Request::Ping { token } => Ok((Reply::Pong { token }, vec![])),
            Request::Filters {} => Ok((
                Reply::Filters {
                    filters: catalog::REGISTRY
                        .iter()
                        .map(|s| (s.name.to_string(), s.synopsis.to_string()))
                        .collect(),
                },
                vec![],
            )),
            Request::Ps {} => Ok((Reply::Runs { runs: self.ps(who) }, vec![])),
            Request::Open {
                pipeline,
                options,
                fds: n,
                context,
            } => {
                // The log says it with its secrets redacted, as everything else does.
                let text = catalog::shown(&pipeline).text().to_string();
                let r = self.open(conn, who, pipeline, options, n, fds, context);
                match &r {
                    Ok((Reply::Opened { run, .. }, _)) => audit::opened(who, *run, &text),
                    Err(Reply::Error { errno, message, .. }) => {
                        audit::refused(who, &text, *errno, message)
                    }
                    _ => {}
                }
                r
            }
            Request::Activate { run, detach } => {
                let r = self.run_for(run, who)?;
                activate(&r, conn, detach)?;
                // The answer once the run is visible: in `ps` it is already; PipesFS shows
                // its filters from the graph its worker reports first thing (or it ended).
                r.wait_reported(Duration::from_secs(5));
                Ok((Reply::Done {}, vec![]))
            }
            Request::Stop { run, signal } => {
                let r = self.run_for(run, who)?;
                r.tell(ToWorker::Stop { signal })
                    .map_err(|e| refuse(libc::EIO, format!("run {run}: {e}")))?;
                audit::stopped(
                    r.owner.uid,
                    run,
                    &r.pipeline,
                    who.uid,
                    &format!("a stop request (signal {signal})"),
                );
                Ok((Reply::Done {}, vec![]))
            }
            Request::Attach { run } => self.attach(run, who, out, id),
            Request::Edit { run, edit } => self
                .edit_request(run, who, edit)
                .map(|applied| (Reply::Edited { run, applied }, vec![])),
            Request::Web {} => {
                let w = self.web().ok_or_else(|| {
                    refuse(
                        libc::ENOTSUP,
                        "this daemon serves no web view (start it with --http 127.0.0.1:PORT)",
                    )
                })?;
                let url = w
                    .login_url(who)
                    .map_err(|e| refuse(libc::EIO, format!("no random token: {e}")))?;
                Ok((Reply::Web { url }, vec![]))
            }
            Request::OpenStream { name } => open_stream(&name, who),
            Request::Capture {
                device,
                program,
                snaplen,
                wake,
                buffer,
                promisc,
                direction,
            } => self.capture(
                conn,
                who,
                &device,
                program,
                wake,
                capture::Options {
                    snaplen,
                    buffer,
                    promisc,
                    direction,
                },
            ),
            Request::CaptureStats { sub } => self.capture_stats(conn, sub),
            Request::Release { sub } => {
                let mut all = self.subs.lock().expect("not poisoned");
                let mine = all.entry(conn).or_default();
                let Some(k) = mine.iter().position(|s| s.1 == sub) else {
                    return Err(refuse(
                        libc::ENOENT,
                        format!("no subscription {sub} on this connection"),
                    ));
                };
                let (run, sub, dev) = mine.remove(k);
                drop(all);
                self.end_subscription(run, sub, dev.as_deref());
                Ok((Reply::Done {}, vec![]))
            }
        }
    }

    /// An edit as the protocol carries it (typed, or its text form parsed here), made as
    /// `who` through [`Daemon::edit`]: the control socket's `edit` and the web view's.
    pub(crate) fn edit_request(
        &self,
        run: u64,
        who: &Cred,
        edit: EditRequest,
    ) -> Result<EditApplied, Reply> {
        let op = match edit {
            EditRequest::Op(op) => op,
            EditRequest::Text(t) => {
                lang::edit::Edit::parse_op(&t, &lang::WithPath(catalog::Natives))
                    .map_err(|e| refuse(libc::EINVAL, e.to_string()))?
            }
        };
        self.edit(run, who, op)
    }

    /// The web view is served from now on (`web::start`).
    pub(crate) fn set_web(&self, w: Arc<dyn WebLogin>) {
        let _ = self.web.set(w);
    }

    /// The web view, if the daemon serves one.
    fn web(&self) -> Option<Arc<dyn WebLogin>> {
        self.web.get().cloned()
    }

    /// Run `id`'s graph as its worker last described it (folded as its table is).
    pub(crate) fn run_graph(&self, id: u64) -> Option<Vec<GraphNode>> {
        let r = self.run(id)?;
        let g = r.graph.lock().expect("not poisoned").0.clone();
        Some(g)
    }

    /// A run's arcs as its worker last counted them, and where its spaces run.
    pub(crate) fn run_arcs(&self, id: u64) -> Option<(Vec<ArcCounters>, Vec<SpaceSite>)> {
        let r = self.run(id)?;
        let a = r.arcs.lock().expect("not poisoned").clone();
        Some(a)
    }

    /// `ps`: the runs `who` may see (all for root), the failed ones kept a while included.
    pub(crate) fn ps(&self, who: &Cred) -> Vec<RunInfo> {
        let mut runs: Vec<RunInfo> = self
            .runs
            .lock()
            .expect("not poisoned")
            .values()
            .filter(|r| who.root() || r.owner.uid == who.uid)
            .map(|r| r.info())
            .collect();
        let mut failed = self.failed.lock().expect("not poisoned");
        failed.retain(|(at, _)| at.elapsed() < FAILED_KEPT);
        runs.extend(
            failed
                .iter()
                .filter(|(_, i)| who.root() || i.uid == who.uid)
                .map(|(_, i)| i.clone()),
        );
        runs.sort_by_key(|i| i.run);
        runs
    }

    /// `attach`: the run's counters now, and `out` told of its end (or its code at once,
    /// if it ended already).
    fn attach(&self, run: u64, who: &Cred, out: &Arc<Mutex<UnixStream>>, id: u64) -> CallResult {
        let r = match self.run_for(run, who) {
            Ok(r) => r,
            Err(e) => {
                // Ended before this request came: its code, if it was the asker's.
                let ended = self.ended.lock().expect("not poisoned");
                let code = ended.iter().rev().find_map(|&(_, id, uid, code)| {
                    (id == run && (uid == who.uid || who.root())).then_some(code)
                });
                return match code {
                    Some(code) => Ok((Reply::Finished { run, code }, vec![])),
                    None => Err(e),
                };
            }
        };
        // The state is read under the watchers' lock: a run that ends after this
        // check finds this watcher when it tells its watchers (the end sets the
        // state first, then takes the lock), so `finished` is never missed.
        {
            let mut watchers = r.watchers.lock().expect("not poisoned");
            if let State::Finished(code) = r.state() {
                return Ok((Reply::Finished { run, code }, vec![]));
            }
            watchers.push((out.clone(), id));
        }
        let (elapsed_s, nodes, _) = r.counters.lock().expect("not poisoned").clone();
        Ok((
            Reply::Counters {
                run,
                elapsed_s,
                nodes,
            },
            vec![],
        ))
    }

    /// Every run, by id (PipesFS shows them all; their modes decide what others may read).
    pub(crate) fn visible_runs(&self) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// A run by id, whoever owns it.
    pub(crate) fn run(&self, id: u64) -> Option<Arc<Run>> {
        self.runs.lock().expect("not poisoned").get(&id).cloned()
    }

    /// Stop a run on `who`'s behalf (PipesFS: `echo stop > RUN/.ctl`).
    pub(crate) fn stop_run(&self, run: u64, who: &Cred) -> Result<(), Reply> {
        let r = self.run_for(run, who)?;
        r.tell(ToWorker::Stop { signal: 0 })
            .map_err(|e| refuse(libc::EIO, format!("run {run}: {e}")))?;
        audit::stopped(
            r.owner.uid,
            run,
            &r.pipeline,
            who.uid,
            "stop written to its .ctl (PipesFS)",
        );
        Ok(())
    }

    /// Take run `id` out of the table and tell those who keep something per run.
    pub(crate) fn forget_run(&self, id: u64) {
        self.runs.lock().expect("not poisoned").remove(&id);
        for hook in self.run_gone.lock().expect("not poisoned").iter() {
            hook(self, id);
        }
    }

    /// Call `hook` with each run's id once the run has left the table (`run(id)` is then
    /// `None`). Hooks run on the thread that ends the run, with no lock of ours held but
    /// the hooks' list: a hook may look at the table, not register another hook.
    pub(crate) fn on_run_gone(&self, hook: impl Fn(&Daemon, u64) + Send + Sync + 'static) {
        self.run_gone
            .lock()
            .expect("not poisoned")
            .push(Box::new(hook));
    }

    fn notify(&self, run: &Run, event: impl Fn(u64) -> Reply) {
        let mut w = run.watchers.lock().expect("not poisoned");
        w.retain(|(sock, id)| {
            let s = sock.lock().expect("not poisoned");
            let sent = proto::send(
                &s,
                &Msg {
                    id: *id,
                    body: event(run.id),
                },
                &[],
            );
            if sent.is_err() {
                // A watcher that does not read (the send timed out, maybe mid-frame): its
                // connection ends rather than hold the run's events back.
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            sent.is_ok()
        });
    }
}

/// MSG_PIPEDUP_OPEN: an exported stream's rings, if the client may read them (owner and
/// mode of the rings under /dev/shm, as a file's read permission is decided).
///
/// The trust domains stay apart (thesis 6.5.3): every data segment goes out read-only, so
/// no reader can change what others read. The stream's owner (and root) also gets each
/// ring's control segment read-write and reads as a registered, lossless reader; any other
/// user the mode admits gets no control segment and reads as an observer, who cannot hold
/// the writer back (it loses what it does not read in time, and sees that it did).
/// Descriptors, in order, for the tag ring then the data ring: the data segment, then the
/// control segment if given (2 descriptors for an observer, 4 for the owner).
fn open_stream(name: &str, who: &Cred) -> CallResult {
    use std::os::unix::fs::MetadataExt;
    if name.is_empty() || name.contains('/') || name.starts_with('.') || name.len() > 200 {
        return Err(refuse(
            libc::EINVAL,
            format!("stream name `{name}`: expected a node name (no '/')"),
        ));
    }
    let tags = format!("/dev/shm/{}", protocol::graph::export_name(name));
    let data = format!("{tags}.data");
    let mut fds = Vec::new();
    for path in [&tags, &data] {
        let meta = std::fs::metadata(path).map_err(|e| {
            refuse(
                libc::ENOENT,
                format!("no exported stream {name} ({path}: {e})"),
            )
        })?;
        if !may_read(&meta, who) {
            return Err(refuse(
                libc::EACCES,
                format!(
                    "stream {name} is uid {}'s with mode {:04o}: uid {} may not read it",
                    meta.uid(),
                    meta.mode() & 0o7777,
                    who.uid
                ),
            ));
        }
        let f = std::fs::File::open(path).map_err(|e| refuse(libc::EIO, format!("{path}: {e}")))?;
        fds.push(OwnedFd::from(f));
        if who.root() || meta.uid() == who.uid {
            let ctl = format!("{path}.ctl");
            let c = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&ctl)
                .map_err(|e| refuse(libc::EIO, format!("{ctl}: {e}")))?;
            fds.push(OwnedFd::from(c));
        }
    }
    Ok((
        Reply::Stream {
            name: name.to_string(),
            fds: fds.len() as u32,
        },
        fds,
    ))
}

/// Unix read permission: owner, group (primary or supplementary), others.
pub fn may_read(meta: &std::fs::Metadata, who: &Cred) -> bool {
    use std::os::unix::fs::MetadataExt;
    may_read_mode(meta.uid(), meta.gid(), meta.mode(), who)
}

/// Unix read permission of something owned by `uid`:`gid` with mode `m`.
pub fn may_read_mode(uid: u32, gid: u32, m: u32, who: &Cred) -> bool {
    who.root()
        || (uid == who.uid && m & 0o400 != 0)
        || (uid != who.uid && who.groups.contains(&gid) && m & 0o040 != 0)
        || (uid != who.uid && !who.groups.contains(&gid) && m & 0o004 != 0)
}

/// `text` on one line (line breaks and tabs become spaces), cut to `max` bytes with `...`.
fn one_line_cut(text: &str, max: usize) -> String {
    let mut s: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s += "...";
    }
    s
}

/// MSG_FUNC_ACTIVATE: start built run `r`, now belonging to connection `conn`.
fn activate(r: &Run, conn: u64, detach: bool) -> Result<(), Reply> {
    if r.state() != State::Built {
        return Err(refuse(
            libc::EBUSY,
            format!("run {} is already active", r.id),
        ));
    }
    r.detached.store(detach, Ordering::Relaxed);
    r.conn.store(conn, Ordering::Relaxed);
    r.tell(ToWorker::Go {})
        .map_err(|e| refuse(libc::EIO, format!("run {}: its worker is gone: {e}", r.id)))?;
    *r.state.lock().expect("not poisoned") = State::Running;
    audit::started(r.owner.uid, r.id, &r.pipeline, detach);
    Ok(())
}
