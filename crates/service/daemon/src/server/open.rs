//! Opening a run: the request checked (parse, policy, sizes, grants), the privileged
//! sockets its grants need lent, and its worker started with the client's identity.

use super::*;

impl Daemon {
    /// The construction transaction: check access, start a worker that builds the run
    /// paused, and wait for its verdict.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open(
        self: &Arc<Self>,
        conn: u64,
        who: &Cred,
        pipeline: String,
        options: RunOptions,
        n: u32,
        fds: Vec<OwnedFd>,
        context: proto::ClientContext,
    ) -> CallResult {
        let (streams, cwd) = client_descriptors(n, fds, &context)?;
        if pipeline.len() > proto::MAX_PIPELINE {
            return Err(refuse(
                libc::E2BIG,
                format!(
                    "pipeline of {} bytes (at most {})",
                    pipeline.len(),
                    proto::MAX_PIPELINE
                ),
            ));
        }
        // Whatever is said about the pipeline (answers, `ps`, PipesFS, the log) is said
        // of it with its secrets redacted.
        let shown = catalog::shown(&pipeline);
        // The graph checked here is the graph the worker runs: it goes to the worker
        // typed, in `start`, and the worker parses nothing.
        let g = parse_request(&pipeline)?;
        // Held until this open is in the table or failed.
        let (modes, _slot) = self.check_access(&g, who, &options, &shown)?;
        let (lent_fds, lent) = self.lend_for(&g, who, &shown)?;
        let (mine, theirs) =
            UnixStream::pair().map_err(|e| refuse(libc::EIO, format!("socketpair: {e}")))?;
        let child = self.start_worker(who, &theirs, &lent_fds, streams)?;
        drop(theirs);
        drop(lent_fds);
        let run_id = self.next_run.fetch_add(1, Ordering::Relaxed);
        let start = ToWorker::Start {
            run: run_id,
            pipeline: pipeline.clone(),
            graph: g.clone(),
            options,
            uid: who.uid,
            gid: who.gid,
            groups: who.groups.clone(),
            modes,
            lent,
            context,
        };
        let reader = mine
            .try_clone()
            .map_err(|e| refuse(libc::EIO, e.to_string()))?;
        let run = Arc::new(Run::opened(run_id, conn, who, shown, g, mine, child));
        self.await_build(run, reader, start, cwd)
    }

    /// Whether `who` may open the run of `g`: the limits, sizes first (no worker for a
    /// run that could not be allowed), then the user's runs (the returned slot holds this
    /// open as one more until it is in the table or failed), then the policy's grants:
    /// the stream mode granted to each privileged source.
    fn check_access(
        &self,
        g: &lang::Graph,
        who: &Cred,
        options: &RunOptions,
        shown: &lang::Redacted,
    ) -> Result<(Vec<(usize, u32)>, OpenSlot<'_>), Reply> {
        let pol = &self.cfg.policy;
        pol.check_ring(options.ring as u64, who)
            .map_err(|why| refuse(libc::E2BIG, why))?;
        pol.check_sizes(g, who, &|f| catalog::find(f).map(|s| s.params))
            .map_err(|d| {
                refuse(
                    libc::E2BIG,
                    shown.render(&format!("error: {}: {}", d.node, d.why), d.span, None),
                )
            })?;
        let slot = self.reserve_open(who)?;
        let modes = pol
            .check(g, who, &|f| catalog::find(f).and_then(|s| s.privilege))
            .map_err(|d| {
                refuse(
                    libc::EACCES,
                    shown.render(&format!("error: {}: {}", d.node, d.why), d.span, None),
                )
            })?;
        Ok((modes, slot))
    }

    /// The privileged sockets a non-root client's grants need, opened here with their
    /// kernel filters locked: its worker holds no capability to open them itself (none
    /// for root).
    fn lend_for(
        &self,
        g: &lang::Graph,
        who: &Cred,
        shown: &lang::Redacted,
    ) -> Result<(Vec<OwnedFd>, Vec<proto::LentSocket>), Reply> {
        if who.root() {
            return Ok((Vec::new(), Vec::new()));
        }
        self.lend(g, who).map_err(|why| {
            refuse(
                libc::EPERM,
                shown.render(&format!("error: {why}"), why.span, None),
            )
        })
    }

    /// Start the run's worker as the client `who`: it inherits its end of the control
    /// socket (`theirs`) and the lent sockets, and gets the client's standard streams
    /// (`streams`: stdin, stdout, stderr) or none.
    fn start_worker(
        &self,
        who: &Cred,
        theirs: &UnixStream,
        lent_fds: &[OwnedFd],
        streams: Vec<OwnedFd>,
    ) -> Result<Child, Reply> {
        let mut cmd = Command::new(&self.cfg.worker);
        cmd.arg("__worker")
            .arg("--fd")
            .arg(theirs.as_raw_fd().to_string());
        let mut inherit = vec![theirs.as_raw_fd()];
        inherit.extend(lent_fds.iter().map(|f| f.as_raw_fd()));
        crate::spawn::prepare(
            &mut cmd,
            Some(crate::spawn::Identity {
                uid: who.uid,
                gid: who.gid,
                groups: who.groups.clone(),
            }),
            inherit,
        );
        let mut it = streams.into_iter();
        match (it.next(), it.next(), it.next()) {
            (Some(i), Some(o), Some(e)) => {
                cmd.stdin(Stdio::from(i))
                    .stdout(Stdio::from(o))
                    .stderr(Stdio::from(e));
            }
            _ => {
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
            }
        }
        cmd.spawn().map_err(|e| {
            refuse(
                libc::EIO,
                format!("cannot start the worker {}: {e}", self.cfg.worker.display()),
            )
        })
    }

    /// Send the worker its `start` (with the client's working directory, `cwd`) and wait
    /// for the build's verdict: built, the run goes in the table, watched by a thread of
    /// its own ([`Daemon::monitor`]), and the client gets its id and placement; failed,
    /// the worker's reason. A worker that dies or says anything else is killed.
    fn await_build(
        self: &Arc<Self>,
        run: Arc<Run>,
        reader: UnixStream,
        start: ToWorker,
        cwd: Option<OwnedFd>,
    ) -> CallResult {
        let kill = |why: String| {
            let _ = run.child.lock().expect("not poisoned").kill();
            let _ = run.child.lock().expect("not poisoned").wait();
            why
        };
        let cwd_fd: Vec<_> = cwd.iter().map(|f| f.as_raw_fd()).collect();
        run.tell_fds(start, &cwd_fd).map_err(|e| match e {
            // A graph within the node and arc bounds whose words still make `start`
            // over a frame: the client's pipeline is too big, not the worker broken.
            ProtoError::Length(_) => refuse(
                libc::E2BIG,
                kill(format!(
                    "the pipeline's graph does not fit in one message to the worker: {e}"
                )),
            ),
            e => refuse(libc::EIO, kill(format!("the worker died at once: {e}"))),
        })?;
        drop(cwd);
        match proto::recv::<FromWorker>(&reader) {
            Ok((
                Msg {
                    body: FromWorker::Built { placement, layout },
                    ..
                },
                _,
            )) => {
                let placement = run.shown.scrub(&placement);
                *run.placement.lock().expect("not poisoned") = placement.clone();
                *run.layout.lock().expect("not poisoned") = run.shown.scrub(&layout);
                let run_id = run.id;
                self.runs
                    .lock()
                    .expect("not poisoned")
                    .insert(run_id, run.clone());
                let d = self.clone();
                std::thread::Builder::new()
                    .name(format!("sl-run{run_id}"))
                    .spawn(move || d.monitor(run, reader))
                    .map_err(|e| refuse(libc::EIO, e.to_string()))?;
                Ok((
                    Reply::Opened {
                        run: run_id,
                        placement,
                    },
                    vec![],
                ))
            }
            Ok((
                Msg {
                    body: FromWorker::Failed { message, errno },
                    ..
                },
                _,
            )) => {
                let _ = run.child.lock().expect("not poisoned").wait();
                Err(refuse(errno, run.shown.scrub(&message)))
            }
            Ok((m, _)) => Err(refuse(
                libc::EIO,
                kill(format!("the worker said {:?} before building", m.body)),
            )),
            Err(e) => Err(refuse(
                libc::EIO,
                kill(format!("the worker died while building: {e}")),
            )),
        }
    }

    /// Open the sockets the grants of `who` lend for the privileged nodes of `g`
    /// (`Policy::lends`): the descriptors (kept open until the worker has inherited them)
    /// and their description for the worker's `start`.
    pub(super) fn lend(
        &self,
        g: &lang::Graph,
        who: &Cred,
    ) -> Result<(Vec<OwnedFd>, Vec<proto::LentSocket>), LendError> {
        let lends = self
            .cfg
            .policy
            .lends(g, who, &|f| catalog::find(f).and_then(|s| s.privilege))
            .map_err(|d| LendError {
                node: d.node,
                span: d.span,
                why: d.why,
            })?;
        let mut fds = Vec::new();
        let mut lent = Vec::new();
        for l in lends {
            for _ in 0..l.count {
                let fd = match l.kind {
                    kernel::lend::Kind::Rx => kernel::lend::lend_rx(&l.dev, l.filter.as_deref()),
                    kernel::lend::Kind::Tx => kernel::lend::lend_tx(&l.dev),
                }
                .map_err(|e| LendError {
                    node: l.kind.name().to_string(),
                    span: g.nodes[l.node].span,
                    why: format!(
                        "the daemon cannot open the granted socket on {}: {e}",
                        l.dev
                    ),
                })?;
                lent.push(proto::LentSocket {
                    node: l.node,
                    kind: l.kind.name().to_string(),
                    dev: l.dev.clone(),
                    fd: fd.as_raw_fd(),
                    filter: l.filter.clone(),
                });
                fds.push(fd);
            }
        }
        Ok((fds, lent))
    }
}

/// Why a grant's socket could not be lent: the node, where it is, why.
#[derive(Debug)]
pub(super) struct LendError {
    node: String,
    span: lang::Span,
    why: String,
}

impl std::fmt::Display for LendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.node, self.why)
    }
}

/// The descriptors an open brings: none or the client's three standard streams (stdin,
/// stdout, stderr), then its working directory when `context.cwd` says so (the worker
/// enters it as the client). The streams and the directory.
fn client_descriptors(
    n: u32,
    mut fds: Vec<OwnedFd>,
    context: &proto::ClientContext,
) -> Result<(Vec<OwnedFd>, Option<OwnedFd>), Reply> {
    let streams = n.wrapping_sub(u32::from(context.cwd));
    if n as usize != fds.len() || !(streams == 0 || streams == 3) {
        return Err(refuse(
            libc::EINVAL,
            format!(
                "open: {} descriptors came, {n} announced (0, or 3: stdin, stdout, stderr; and 1 more, the working directory, with context.cwd)",
                fds.len()
            ),
        ));
    }
    let cwd = if context.cwd { fds.pop() } else { None };
    Ok((fds, cwd))
}

/// The pipeline parsed for the daemon's checks, the first step of the run's derivation
/// (the worker derives the rest from this graph, `runplan::plan_checked`): native filters
/// from the library, any other name a Unix command (the worker finds it on the client's
/// PATH and in its directory, and refuses one that means a native filter or a typo there;
/// commands need no grant). A syntax error, secrets redacted; a graph over the protocol's
/// bounds (`proto::MAX_GRAPH_NODES`, `MAX_GRAPH_ARCS`) refused with E2BIG.
fn parse_request(pipeline: &str) -> Result<lang::Graph, Reply> {
    let resolver = lang::OrCommand(catalog::Natives);
    let g = lang::parse(pipeline, &resolver)
        .map_err(|d| refuse(libc::EINVAL, d.redacted(&resolver).to_string()))?;
    if g.nodes.len() > proto::MAX_GRAPH_NODES || g.edges.len() > proto::MAX_GRAPH_ARCS {
        return Err(refuse(
            libc::E2BIG,
            format!(
                "a pipeline of {} nodes and {} arcs (at most {} nodes and {} arcs)",
                g.nodes.len(),
                g.edges.len(),
                proto::MAX_GRAPH_NODES,
                proto::MAX_GRAPH_ARCS
            ),
        ));
    }
    Ok(g)
}

impl Run {
    /// The run `id` of `who` (asked on connection `conn`), its worker `child` started and
    /// spoken to over `ctl`: built, nothing reported yet. `g`: its graph as parsed, the
    /// daemon's view of it (what edits are checked against).
    fn opened(
        id: u64,
        conn: u64,
        who: &Cred,
        shown: lang::Redacted,
        g: lang::Graph,
        ctl: UnixStream,
        child: Child,
    ) -> Run {
        Run {
            id,
            owner: who.clone(),
            user: audit::user_name(who.uid),
            pipeline: shown.text().to_string(),
            shown,
            placement: Mutex::new(String::new()),
            layout: Mutex::new(String::new()),
            edited: Mutex::new((0, String::new())),
            started: Instant::now(),
            state: Mutex::new(State::Built),
            changed: Condvar::new(),
            ctl: Mutex::new(ctl),
            child: Mutex::new(child),
            conn: AtomicU64::new(conn),
            detached: AtomicBool::new(false),
            counters: Mutex::new((0.0, vec![], 0.0)),
            rates: Mutex::new(vec![]),
            arcs: Mutex::new((vec![], vec![])),
            watchers: Mutex::new(vec![]),
            edits: Mutex::new(BTreeMap::new()),
            next_edit: AtomicU64::new(1),
            view: Mutex::new(View::new(g)),
            editing: Mutex::new(()),
            graph: Mutex::new((Vec::new(), 0o600)),
            tap_at: Mutex::new(Vec::new()),
            taps: Mutex::new(BTreeMap::new()),
            failure: Mutex::new(None),
            reported: AtomicBool::new(false),
        }
    }
}
