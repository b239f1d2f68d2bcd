//! The control protocol between `streamlined` and its clients (the CLI, the C library,
//! anyone who can write to a Unix socket), and between the daemon and its run workers.
//!
//! Owns: the frame format, the message types and their JSON form, the decoder's limits,
//! and sending and receiving frames with file descriptors. Does not own: what the daemon
//! does with a request (`server`), who may do it (`policy`).
//!
//! # Wire format (version 1)
//!
//! A connection is a `SOCK_STREAM` Unix socket. Each message is one frame:
//!
//! ```text
//! +----------------+------------------------------+
//! | length: u32 LE | body: `length` bytes of JSON |
//! +----------------+------------------------------+
//! ```
//!
//! `length` is 1..=[`MAX_FRAME`]. The body is one UTF-8 JSON object. File descriptors
//! travel as `SCM_RIGHTS` ancillary data on the `sendmsg` that carries the frame's first
//! byte, at most [`MAX_FDS`] per frame; the body says how many (`"fds": n`) where a
//! message carries any. A request is `{"id": N, "op": "NAME", ...fields}`; its reply
//! carries the same `id` and `"reply": "NAME"` (or `"reply": "error"` with `code`, `errno`
//! and `message`). Replies to one connection come in request order; events for `attach`
//! (`counters`, `finished`) carry the id of the `attach` request.
//!
//! The first request on a connection must be `hello` with the protocol version the client
//! speaks; the daemon answers `welcome` with its own and the caller's identity as the
//! kernel reported it (`SO_PEERCRED`), or `error` with code `EPROTO` and closes. A C
//! client needs only `sendmsg`/`recvmsg`, `snprintf` and a few string searches: see
//! ARCHITECTURE.md "Control protocol" for every message with an example.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;
/// Largest frame body accepted (1 MiB): a pipeline, a report or a counter snapshot fits
/// many times over; anything larger is refused before it is read.
pub const MAX_FRAME: usize = 1 << 20;
/// Most descriptors one frame may carry (stdin, stdout, stderr of a run; a stream's rings).
pub const MAX_FDS: usize = 8;
/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/streamline/control";

/// Errors of the protocol layer, each naming what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connection closed")]
    Closed,
    #[error("frame length {0} is not within 1..={MAX_FRAME} bytes")]
    Length(u64),
    #[error("frame ended after {got} of {want} bytes")]
    Truncated { got: usize, want: usize },
    #[error("malformed message at line {line} column {column}: {why}")]
    Json {
        line: usize,
        column: usize,
        why: String,
    },
    #[error("{0} descriptors arrived with one frame; at most {MAX_FDS} are accepted")]
    TooManyFds(usize),
    /// A frame was started and not finished in time (see [`recv_frame_within`]).
    #[error("frame timeout: {got} of the frame's {want} bytes arrived within {} s of its first byte", timeout.as_secs_f64())]
    FrameTimeout {
        got: usize,
        /// The frame's length (its 4-byte prefix included), or 4 while the prefix itself
        /// is incomplete.
        want: usize,
        timeout: std::time::Duration,
    },
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl ProtoError {
    fn json(e: serde_json::Error) -> ProtoError {
        ProtoError::Json {
            line: e.line(),
            column: e.column(),
            why: e.to_string(),
        }
    }
}

/// Options of a run, as `streamline run` takes them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunOptions {
    #[serde(default = "default_plan")]
    pub plan: String,
    #[serde(default = "default_rate")]
    pub rate: f64,
    #[serde(default = "default_bytes")]
    pub bytes: f64,
    #[serde(default = "default_ring")]
    pub ring: usize,
    #[serde(default)]
    pub no_share: bool,
    #[serde(default)]
    pub quiet: bool,
    /// `--adapt`: move filters between the run's thread spaces as measured costs say
    /// (`control::adapt`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adapt: bool,
    /// `--chaos SEED`: move filters at random batch boundaries (a test of placement
    /// invariance through migrations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn default_plan() -> String {
    "ilp".into()
}
fn default_rate() -> f64 {
    100_000.0
}
fn default_bytes() -> f64 {
    500.0
}
fn default_ring() -> usize {
    64 << 20
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            plan: default_plan(),
            rate: default_rate(),
            bytes: default_bytes(),
            ring: default_ring(),
            no_share: false,
            quiet: false,
            adapt: false,
            chaos: None,
        }
    }
}

/// What a run started from a shell inherits from it, sent with `open` so that a run
/// through the daemon behaves as the same run stand-alone (ARCHITECTURE.md "The daemon").
/// Every field has a default: a client that sends none gets a run in `/`, with a minimal
/// environment (HOME, USER, LOGNAME and SHELL from the password database, a default PATH),
/// umask 022 and the daemon's resource limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ClientContext {
    /// The frame's last descriptor is the client's working directory (opened `O_PATH |
    /// O_DIRECTORY`, so it names the directory the client is in whatever happens to its
    /// path). The worker enters it as the client; relative paths resolve there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cwd: bool,
    /// The client's environment, every variable whose name and value are UTF-8. The
    /// worker drops the dynamic loader's variables ([`LOADER_ENV`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<(String, String)>>,
    /// The client's umask (0..=0o777).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// The client's resource limits, by name ([`LIMITS`]). The worker only lowers: a
    /// limit above the daemon's hard limit becomes the daemon's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<Limit>,
}

/// One resource limit as `getrlimit` reports it; `u64::MAX` is unlimited.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    pub resource: String,
    pub soft: u64,
    pub hard: u64,
}

/// The resource limits a client sends, by the names `getrlimit(2)` gives them (without
/// `RLIMIT_`).
pub const LIMITS: &[&str] = &[
    "CPU",
    "FSIZE",
    "DATA",
    "STACK",
    "CORE",
    "AS",
    "NOFILE",
    "NPROC",
    "MEMLOCK",
    "LOCKS",
    "SIGPENDING",
    "MSGQUEUE",
    "NICE",
    "RTPRIO",
    "RTTIME",
];

/// Environment variables a run never takes from its client: those the dynamic loader and
/// the C library read at a program's start (glibc drops the same ones for set-user-ID
/// programs), and every `LD_*`. The worker and its process spaces are the daemon's
/// program; a client's variables must not load code into them.
pub const LOADER_ENV: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_CHECK_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_PERTURB_",
    "MALLOC_TOP_PAD_",
    "MALLOC_TRACE",
    "MALLOC_TRIM_THRESHOLD_",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
];

/// Whether the environment variable `name` is one a run never takes from its client.
pub fn loader_env(name: &str) -> bool {
    name.starts_with("LD_") || LOADER_ENV.contains(&name)
}

/// A client's request (thesis Tables 6.4-6.8; ARCHITECTURE.md maps each micro-call).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Versioned handshake; must come first.
    Hello {
        version: u32,
        #[serde(default)]
        client: String,
    },
    /// MSG_PING: answered with `pong` carrying the same token.
    Ping {
        #[serde(default)]
        token: u64,
    },
    /// CM_GET_FUNC_LIST / MSG_FUNC_DISCOVER: the filters that can be instantiated.
    Filters {},
    /// CM_GET_INST_LIST + CM_GET_INST_INFO: the runs, with owner, state, placement,
    /// counters.
    Ps {},
    /// The construction transaction (MSG_FUNC_OPEN, CONNECT, EXPORT for a whole graph):
    /// parse, check access, plan and build the run, paused. It belongs to this connection
    /// until `activate`: if the connection ends first, it is rolled back. With `fds: 3`
    /// the frame carries the run's stdin, stdout and stderr; with `context.cwd` one more
    /// descriptor follows them, the client's working directory (`fds: 4`, or 1 without
    /// standard streams). `context`: what the run inherits from the client's shell.
    Open {
        pipeline: String,
        #[serde(default)]
        options: RunOptions,
        #[serde(default)]
        fds: u32,
        #[serde(default, skip_serializing_if = "is_default")]
        context: ClientContext,
    },
    /// MSG_FUNC_ACTIVATE: commit the transaction and start the run. A `detach`ed run
    /// outlives the connection; otherwise it is stopped when the connection ends.
    Activate {
        run: u64,
        #[serde(default)]
        detach: bool,
    },
    /// MSG_FUNC_UPDATE / CM_SET_INST_DATA / CONNECT / DISCONNECT: one live edit, typed
    /// ([`EditOp`]) or in its text form (`"insert after gen count"`), which the daemon
    /// parses into the typed value with the same parser. The daemon checks the graph as
    /// it would be after the edit against the policy before the run's worker applies it.
    Edit { run: u64, edit: EditRequest },
    /// MSG_FUNC_CLOSE: stop a run (its sources stop; what is in flight drains). `signal`
    /// is the signal that made a client ask (its exit status becomes 128 + signal).
    Stop {
        run: u64,
        #[serde(default)]
        signal: i32,
    },
    /// Counters now and then (`counters` events) until the run ends (`finished`,
    /// UPCALL_FILTER_FINISHED).
    Attach { run: u64 },
    /// MSG_PIPEDUP_OPEN: the descriptors of an exported stream (its tag ring and data
    /// ring), after the access check against the stream's owner and mode.
    OpenStream { name: String },
    /// Capture for a legacy reader (the libpcap stand-in): `device` is a network interface
    /// (captured once by the daemon for all its readers: a shared capture run, `rx
    /// dev=DEVICE`) or `streamline:RUN/NODE` (a node of a running run). The reader
    /// subscribes to the capture's shared tap with its classic BPF `program` (empty: every
    /// packet), run in the capture's one classifier pass; `snaplen` bytes at most per
    /// packet (0: all); `wake`: how the reader is woken. Answered with `captured` and 4
    /// descriptors: the subscriber's tag ring's data segment, the shared data ring's data
    /// segment (the reader observes the shared ring, so it can never hold the capture
    /// back), then the tag ring's control segment and wake-up eventfd (the reader
    /// registers on its own tag ring, a fast-reader-preference ring whose writer never
    /// waits, and sleeps until the capture wakes it). The subscription ends with the
    /// connection or with `release`. libpcap's options: `buffer` bytes for the reader's
    /// share of the capture (`pcap_set_buffer_size`: its tag ring; 0: the default; more
    /// than the shared data ring is refused), `promisc` (the daemon puts the interface in
    /// promiscuous mode while any reader asks for it) and `direction`
    /// (`pcap_setdirection`: `in`, `out`, or empty for both).
    Capture {
        device: String,
        #[serde(default)]
        program: Vec<BpfInsn>,
        #[serde(default)]
        snaplen: u32,
        #[serde(default)]
        wake: Wake,
        #[serde(default)]
        buffer: u32,
        #[serde(default)]
        promisc: bool,
        #[serde(default)]
        direction: String,
    },
    /// End subscription `sub` of this connection (its reader sees the end of its stream).
    Release { sub: u64 },
    /// What subscription `sub` of this connection missed before its capture could take
    /// it (libpcap's kernel drops for `pcap_stats`): answered with `capture_stats`.
    CaptureStats { sub: u64 },
    /// A one-time token for the daemon's web view (`streamlined --http`), bound to the
    /// asking user (the kernel's credentials of this connection): answered with `web`,
    /// the URL that exchanges it for a session (ENOTSUP when the daemon serves no web
    /// view).
    Web {},
}

fn is_default(c: &ClientContext) -> bool {
    *c == ClientContext::default()
}

/// Where `insert` puts its new filter, relative to its node.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InsertAt {
    After,
    Before,
}

/// One live edit as a typed value (ARCHITECTURE.md "Live edits"): a node is named by its
/// label as `ps` and PipesFS show it (`count`, `count#2`, `count:tail`, `count@1`); a new
/// filter is its text in the pipeline language (`sample every=5`), one native filter.
/// In JSON: `{"kind": "insert", "at": "after", "node": "gen", "filter": "count"}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EditOp {
    /// Re-make NODE's filter with these options changed (SET_INST_DATA).
    Set {
        node: String,
        options: Vec<(String, String)>,
    },
    /// A new filter after (between NODE and all its successors) or before NODE.
    Insert {
        node: String,
        at: InsertAt,
        filter: String,
    },
    /// NODE's inputs connect to its outputs.
    Remove { node: String },
    /// A new filter in NODE's place, same arcs.
    Replace { node: String, filter: String },
    /// A new leaf filter reading NODE's output (a fork).
    Branch { node: String, filter: String },
    /// A new arc FROM -> TO.
    Connect { from: String, to: String },
    /// Take the arc FROM -> TO away.
    Disconnect { from: String, to: String },
    /// NODE reads from TO instead of FROM.
    Move {
        node: String,
        from: String,
        to: String,
    },
}

/// An edit as a request carries it: typed, or the text form for clients that write it by
/// hand (`"edit": "remove sample"`), parsed by the daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum EditRequest {
    Text(String),
    Op(EditOp),
}

impl From<EditOp> for EditRequest {
    fn from(op: EditOp) -> Self {
        EditRequest::Op(op)
    }
}

/// A word of an edit's text form, quoted if the language would not read it as one word.
fn edit_word(w: &str) -> String {
    if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '"' || c == '|') {
        format!("\"{}\"", w.replace('"', "\\\""))
    } else {
        w.to_string()
    }
}

impl EditOp {
    /// The text a refusal's caret points into: `set`'s options as `KEY=VALUE` words, the
    /// new filter's text, or the edit's text form.
    pub fn source_text(&self) -> String {
        match self {
            EditOp::Set { options, .. } => options
                .iter()
                .map(|(k, v)| format!("{k}={}", edit_word(v)))
                .collect::<Vec<_>>()
                .join(" "),
            EditOp::Insert { filter, .. }
            | EditOp::Replace { filter, .. }
            | EditOp::Branch { filter, .. } => filter.clone(),
            _ => self.to_string(),
        }
    }

    /// The edit's verb (`set`, `insert`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            EditOp::Set { .. } => "set",
            EditOp::Insert { .. } => "insert",
            EditOp::Remove { .. } => "remove",
            EditOp::Replace { .. } => "replace",
            EditOp::Branch { .. } => "branch",
            EditOp::Connect { .. } => "connect",
            EditOp::Disconnect { .. } => "disconnect",
            EditOp::Move { .. } => "move",
        }
    }

    /// Every node label the edit names, in the order its text form writes them.
    pub fn labels(&self) -> Vec<&str> {
        match self {
            EditOp::Set { node, .. }
            | EditOp::Insert { node, .. }
            | EditOp::Remove { node }
            | EditOp::Replace { node, .. }
            | EditOp::Branch { node, .. } => vec![node],
            EditOp::Connect { from, to } | EditOp::Disconnect { from, to } => vec![from, to],
            EditOp::Move { node, from, to } => vec![node, from, to],
        }
    }
}

/// The text form (what `streamline edit` takes).
impl std::fmt::Display for EditOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditOp::Set { node, options } => {
                write!(f, "set {node}")?;
                for (k, v) in options {
                    write!(f, " {k}={}", edit_word(v))?;
                }
                Ok(())
            }
            EditOp::Insert { node, at, filter } => {
                let w = match at {
                    InsertAt::After => "after",
                    InsertAt::Before => "before",
                };
                write!(f, "insert {w} {node} {filter}")
            }
            EditOp::Remove { node } => write!(f, "remove {node}"),
            EditOp::Replace { node, filter } => write!(f, "replace {node} {filter}"),
            EditOp::Branch { node, filter } => write!(f, "branch {node} {filter}"),
            EditOp::Connect { from, to } => write!(f, "connect {from} {to}"),
            EditOp::Disconnect { from, to } => write!(f, "disconnect {from} {to}"),
            EditOp::Move { node, from, to } => write!(f, "move {node} {from} {to}"),
        }
    }
}

/// What an applied edit did, in fields (the worker's and the daemon's `edited`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EditApplied {
    /// The edit as applied (its `kind` says which).
    pub edit: EditOp,
    /// The node made or changed: insert, replace, branch: the new node's label; set: the
    /// node's; remove: the label it had; connect, disconnect, move: the node whose inputs
    /// changed.
    pub node: String,
    /// Blocks the instance it dropped had passed (set, replace, remove).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_blocks: Option<u64>,
    /// Blocks that instance flushed from its `finish` (routed on along its arcs).
    #[serde(default)]
    pub flushed: u64,
}

impl std::fmt::Display for EditApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "applied `{}`: {}", self.edit, self.node)?;
        if let Some(b) = self.retired_blocks {
            write!(f, " (the instance it replaced passed {b} blocks")?;
            if self.flushed > 0 {
                write!(f, ", flushed {} it held", self.flushed)?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// One classic BPF instruction as `struct bpf_insn` has it: `[code, jt, jf, k]`.
pub type BpfInsn = (u16, u8, u8, u32);

/// A subscriber's filter, from the daemon to the worker with `tap`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TapFilter {
    pub program: Vec<BpfInsn>,
    pub snaplen: u32,
    #[serde(default)]
    pub wake: Wake,
    /// Slots of the subscriber's tag ring (0: the default).
    #[serde(default)]
    pub tags: u32,
}

/// How a subscriber asleep on its tag ring is woken (thesis 5.2.2, event moderation): once
/// `packets` packets wait for it, or `us` microseconds after the first of them, whichever
/// comes first. 0: the capture's default. (A reader in libpcap's immediate mode sleeps as
/// a deep sleeper instead: woken at every batch.)
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Wake {
    #[serde(default)]
    pub packets: u32,
    #[serde(default)]
    pub us: u32,
}

/// A node's counters (CM_GET_INST_DATA).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct NodeCounters {
    pub label: String,
    pub blocks_in: u64,
    pub bytes_in: u64,
    pub blocks_out: u64,
    pub bytes_out: u64,
    pub drops: u64,
    /// Blocks the node emitted beyond those it took, and took without emitting (see
    /// `dataplane::Counters`): `blocks_out = blocks_in - drops + made - ended`.
    #[serde(default)]
    pub made: u64,
    #[serde(default)]
    pub ended: u64,
    /// Sources: blocks lost before the node could take them (the kernel's ring-full
    /// drops; `dataplane::Counters::lost`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost: u64,
    /// Classes seen leaving the node (sampled).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<u16>,
    /// The spaces it runs in, as the run's table says (`0`, `p3`, `1,2`: replicas,
    /// summed in the row); empty from an older worker.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub space: String,
}

/// A run as `ps` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    pub run: u64,
    pub uid: u32,
    pub user: String,
    pub state: String,
    pub pipeline: String,
    pub placement: String,
    /// Where the run's filters run now, by space (`kernel:bpf local:gen,null t1:deflate
    /// t2:deflate p3:count`), from its live rows (`NodeCounters::space`; an edit shows at
    /// the next counters), as built until they come; empty from an older worker.
    #[serde(default)]
    pub layout: String,
    /// Live edits applied to it, and the last one as applied (secrets redacted).
    #[serde(default)]
    pub edits: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_edit: String,
    pub uptime_s: f64,
    /// Blocks per second into the sinks over the last interval, and the total so far.
    pub rate: f64,
    pub nodes: Vec<NodeCounters>,
}

/// The daemon's answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "reply", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    Welcome {
        version: u32,
        server: String,
        uid: u32,
        gid: u32,
        pid: i32,
    },
    Pong {
        token: u64,
    },
    Filters {
        filters: Vec<(String, String)>,
    },
    Runs {
        runs: Vec<RunInfo>,
    },
    /// The graph is built (paused); `placement` says where each filter runs.
    Opened {
        run: u64,
        placement: String,
    },
    Done {},
    /// The edit is applied: what it did, in fields.
    Edited {
        run: u64,
        applied: EditApplied,
    },
    /// The descriptors of an exported stream follow with the frame (tags, then data).
    Stream {
        name: String,
        fds: u32,
    },
    /// The answer to `capture`: subscription `sub`, the frames' pcap LINKTYPE_*, and the
    /// 2 descriptors that follow (tag ring, data ring).
    Captured {
        sub: u64,
        link_type: u32,
        fds: u32,
    },
    /// The answer to `capture_stats`: packets the capture's sources lost (their socket's
    /// ring was full: the kernel's drops) since the subscription began, as of the
    /// worker's last counters (a few hundred ms at most). The capture is shared, so these
    /// are packets some reader wanted, not necessarily this one.
    CaptureStats { lost: u64 },
    Counters {
        run: u64,
        elapsed_s: f64,
        nodes: Vec<NodeCounters>,
    },
    /// The run ended with this exit status (as `streamline run` would exit).
    Finished {
        run: u64,
        code: i32,
    },
    Error {
        code: String,
        errno: i32,
        message: String,
    },
    /// The answer to `web`: the URL (with its one-time token) that opens a session of
    /// the asking user in the daemon's web view.
    Web {
        url: String,
    },
}

impl Reply {
    /// An error reply with the errno named by `code` (EACCES, EINVAL, ...).
    pub fn error(errno: i32, message: impl Into<String>) -> Reply {
        Reply::Error {
            code: errno_name(errno).to_string(),
            errno,
            message: message.into(),
        }
    }
}

/// The symbolic name of the errnos the protocol uses.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        libc::EBUSY => "EBUSY",
        libc::EPROTO => "EPROTO",
        libc::EAGAIN => "EAGAIN",
        libc::ESRCH => "ESRCH",
        libc::ENOTSUP => "ENOTSUP",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::ENODEV => "ENODEV",
        _ => "EIO",
    }
}

/// The most nodes and arcs a run's graph may have when the daemon hands it to its worker
/// (`ToWorker::Start`'s `graph`): the daemon refuses a bigger pipeline (E2BIG) before it
/// starts a worker, and the worker refuses a bigger graph. Bounds the frame too: a graph
/// this size is well under [`MAX_FRAME`] in JSON.
pub const MAX_GRAPH_NODES: usize = 1024;
pub const MAX_GRAPH_ARCS: usize = 2048;
/// The longest pipeline text `open` takes (bytes).
pub const MAX_PIPELINE: usize = 64 * 1024;

/// From the daemon to a run's worker (`streamline-worker __worker`), over the socket pair
/// the worker inherits. Internal: not part of the client protocol, same framing. `G`: the
/// run's graph and `E` an edit, as the pipeline language types them (`lang::Graph`,
/// `lang::edit::Edit`, with their own serde form, unknown fields refused); the protocol,
/// a leaf, links no language, so the daemon and the worker name the types
/// (`daemon::ToWorker`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToWorker<G, E> {
    /// Build this run (paused) with the client's identity: files are opened with it, Unix
    /// commands run as it. `graph`: the run as the daemon parsed and checked it, which
    /// the worker validates and derives from (placement, rewrites, build) without parsing
    /// anything; `pipeline`: its text, for what is said about the run (messages with
    /// their carets: the graph's spans point into it), never built. `modes`: the stream
    /// mode of each privileged source node (by node id of `graph`), from the policy grant
    /// that allowed it. `context`: the client's working directory (with `context.cwd`, the
    /// frame's one descriptor), environment, umask and limits, which the worker takes
    /// before it builds.
    Start {
        run: u64,
        pipeline: String,
        graph: G,
        options: RunOptions,
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
        modes: Vec<(usize, u32)>,
        /// The privileged sockets the daemon opened for the nodes a policy template
        /// grants (the worker of a non-root client holds no capability to open them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lent: Vec<LentSocket>,
        #[serde(default, skip_serializing_if = "is_default")]
        context: ClientContext,
    },
    /// Start the built run.
    Go {},
    /// Stop (as a stop signal would; `signal` 0: stopped by a request).
    Stop { signal: i32 },
    /// Apply one live edit (answered with `edited`), checked by the daemon: `checked`, the
    /// edit as the daemon parsed and checked it, which the worker applies (checking it
    /// was made as a parse makes one, and parsing nothing); `edit`, its protocol form, for
    /// the answer and what is said about it. `expect`:
    /// (label, filter text) of each node the edit names, as the daemon's view of the run
    /// has it; the worker refuses the edit if its node of that label is another filter
    /// (the daemon checked the edit against the graph it knows, and no other).
    Edit {
        edit_id: u64,
        edit: EditOp,
        checked: E,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        expect: Vec<(String, String)>,
    },
    /// Tap NODE's output (PipesFS: someone opened its `all`); answered with `tapped`.
    /// With `filter`, a subscription to the node's shared tap (`dataplane::tap`: the
    /// reader's own tag ring over one data ring), answered with `tapped` carrying the
    /// subscription's id as `tap`.
    Tap {
        tap_req: u64,
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter: Option<TapFilter>,
    },
    /// Take a tap off (its last reader closed).
    Untap { tap: u64 },
}

/// A packet socket the daemon lent a worker (`kernel::lend`): inherited as descriptor
/// `fd`, for node `node`, a `kind` (`rx` or `tx`) on `dev`, with the pcap-filter expression `filter`
/// attached and locked (an `rx` socket also passes only `dev`'s frames; a `tx` socket
/// receives nothing).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LentSocket {
    /// The node of the run's graph (`ToWorker::Start`'s `graph`) it is lent for.
    pub node: usize,
    pub kind: String,
    pub dev: String,
    pub fd: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// A node of a running graph, as the worker's `graph` message carries it.
pub use crate::graph::{ArcCounters, GraphNode, RingGauge, SpaceSite};

/// From a run's worker to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromWorker {
    /// Built and paused; `placement` is the plan's note (empty when the plan changed
    /// nothing), `layout` where each filter runs (`ps`'s PLACEMENT column: `local:gen,null
    /// t1:deflate kernel:bpf`).
    Built {
        placement: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        layout: String,
    },
    /// The build failed: the message (with the caret under the pipeline) and the exit code.
    Failed { message: String, errno: i32 },
    Counters {
        elapsed_s: f64,
        nodes: Vec<NodeCounters>,
        /// The arcs between them, with what each carried and its channel's rings (see
        /// `graph::ArcCounters`); empty from an older worker.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        arcs: Vec<ArcCounters>,
        /// Where each space runs now.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sites: Vec<SpaceSite>,
    },
    /// The answer to `edit`: `applied`, or why not (`text`, and `errno`: EINVAL: it does
    /// not parse or build; ENOENT: no such node; EBUSY: refused for the run's shape or
    /// state).
    Edited {
        edit_id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        applied: Option<EditApplied>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        #[serde(default)]
        errno: i32,
    },
    /// The graph as it runs now: sent once the run starts and after every change. `mode`:
    /// the permission bits of its streams (what they were computed from allows).
    Graph { nodes: Vec<GraphNode>, mode: u32 },
    /// The answer to `tap`: with `ok`, the frame carries 2 descriptors, the data segments
    /// of the tap's tag ring and data ring (`dataplane::tap`); else `text` says why.
    Tapped {
        tap_req: u64,
        tap: u64,
        ok: bool,
        text: String,
        #[serde(default)]
        errno: i32,
    },
    /// The run ended with this exit status.
    Finished { code: i32 },
}

/// A message with the id of the request it answers (or is).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Msg<T> {
    pub id: u64,
    #[serde(flatten)]
    pub body: T,
}

/// Decode one frame body as a message. Never panics; errors name line and column.
pub fn decode<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<Msg<T>, ProtoError> {
    if body.is_empty() || body.len() > MAX_FRAME {
        return Err(ProtoError::Length(body.len() as u64));
    }
    serde_json::from_slice(body).map_err(ProtoError::json)
}

/// Decode a byte stream as the daemon reads one: frames one after another, each body as
/// every message type (client requests, replies, the worker's messages), until the bytes
/// end or a frame is refused. Returns how many bodies decoded as some message. The fuzz
/// target (`fuzz/fuzz_targets/decode.rs`) and its corpus replay (`tests/fuzz_replay.rs`)
/// drive it.
pub fn decode_stream(mut data: &[u8]) -> usize {
    let mut ok = 0;
    while data.len() >= 4 {
        let want = u32::from_le_bytes(data[..4].try_into().expect("4 bytes")) as usize;
        if want == 0 || want > MAX_FRAME || data.len() - 4 < want {
            break;
        }
        let body = &data[4..4 + want];
        let any = decode::<Request>(body).is_ok()
            | decode::<Reply>(body).is_ok()
            | decode::<ToWorker<serde::de::IgnoredAny, serde::de::IgnoredAny>>(body).is_ok()
            | decode::<FromWorker>(body).is_ok();
        ok += usize::from(any);
        data = &data[4 + want..];
    }
    ok
}

/// Encode a message as a frame (length word and body).
pub fn encode<T: Serialize>(msg: &Msg<T>) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("protocol messages serialize");
    let mut f = Vec::with_capacity(4 + body.len());
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(&body);
    f
}

/// Write one frame, with `fds` attached to its first byte.
pub fn send<T: Serialize>(
    sock: &UnixStream,
    msg: &Msg<T>,
    fds: &[RawFd],
) -> Result<(), ProtoError> {
    let f = encode(msg);
    if f.len() - 4 > MAX_FRAME {
        return Err(ProtoError::Length((f.len() - 4) as u64));
    }
    if fds.is_empty() {
        (&*sock).write_all(&f)?;
    } else {
        beltway::sys::send_fds(sock, &f[..1], fds)?;
        (&*sock).write_all(&f[1..])?;
    }
    Ok(())
}

/// Read one frame: its body and the descriptors that came with it. A length outside
/// 1..=MAX_FRAME is refused before the body is read.
pub fn recv_frame(sock: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtoError> {
    recv_frame_by(sock, None)
}

/// Read one frame as [`recv_frame`] does, waiting for its first byte as long as it takes
/// (an idle peer is no fault) but for the rest of it at most `timeout` after the first
/// byte came: a peer that starts a frame and stalls gets [`ProtoError::FrameTimeout`]
/// instead of holding the reader forever. Costs nothing while the frame's bytes are
/// there to read (non-blocking reads; `poll` only when they are not).
pub fn recv_frame_within(
    sock: &UnixStream,
    timeout: std::time::Duration,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtoError> {
    recv_frame_by(sock, Some(timeout))
}

fn recv_frame_by(
    sock: &UnixStream,
    timeout: Option<std::time::Duration>,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtoError> {
    let mut len = [0u8; 4];
    // A signal handled while waiting is no reason to give up the connection.
    let (n, fds) = loop {
        match beltway::sys::recv_fds(sock, &mut len[..1], MAX_FDS) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(ProtoError::TooManyFds(MAX_FDS + 1))
            }
            Err(e) => return Err(ProtoError::Io(e)),
            Ok(r) => break r,
        }
    };
    if n == 0 {
        return Err(ProtoError::Closed);
    }
    let by = timeout.map(|t| Deadline {
        at: std::time::Instant::now() + t,
        timeout: t,
    });
    read_exact(sock, &mut len[1..], 4, by.map(|d| (d, 1, 4)))?;
    let want = u32::from_le_bytes(len) as usize;
    if want == 0 || want > MAX_FRAME {
        return Err(ProtoError::Length(want as u64));
    }
    let mut body = vec![0u8; want];
    read_exact(sock, &mut body, want, by.map(|d| (d, 4, 4 + want)))?;
    Ok((body, fds))
}

/// When a started frame must be complete.
#[derive(Clone, Copy)]
struct Deadline {
    at: std::time::Instant,
    timeout: std::time::Duration,
}

/// Fill `buf` (`want` bytes of a frame's part; with a deadline, `before` bytes of the
/// frame came before this part, and the frame has `total`).
fn read_exact(
    sock: &UnixStream,
    buf: &mut [u8],
    want: usize,
    by: Option<(Deadline, usize, usize)>,
) -> Result<(), ProtoError> {
    let mut got = 0;
    while got < buf.len() {
        let r = match by {
            None => (&*sock).read(&mut buf[got..]),
            Some(_) => nix::sys::socket::recv(
                sock.as_raw_fd(),
                &mut buf[got..],
                nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            )
            .map_err(io::Error::from),
        };
        match r {
            Ok(0) => return Err(ProtoError::Truncated { got, want }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && by.is_some() => {
                let (d, before, total) = by.expect("checked");
                let left = d.at.saturating_duration_since(std::time::Instant::now());
                let late = ProtoError::FrameTimeout {
                    got: before + got,
                    want: total,
                    timeout: d.timeout,
                };
                if left.is_zero() {
                    return Err(late);
                }
                // Wait for more (or the deadline); a wake-up of any kind re-reads.
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                let mut fds = [nix::poll::PollFd::new(
                    std::os::fd::AsFd::as_fd(sock),
                    nix::poll::PollFlags::POLLIN,
                )];
                match nix::poll::poll(
                    &mut fds,
                    nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
                ) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(io::Error::from(e).into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Receive and decode one message.
pub fn recv<T: for<'de> Deserialize<'de>>(
    sock: &UnixStream,
) -> Result<(Msg<T>, Vec<OwnedFd>), ProtoError> {
    let (body, fds) = recv_frame(sock)?;
    Ok((decode(&body)?, fds))
}

/// Receive and decode one message, its frame complete within `timeout` of its first byte
/// (see [`recv_frame_within`]).
pub fn recv_within<T: for<'de> Deserialize<'de>>(
    sock: &UnixStream,
    timeout: std::time::Duration,
) -> Result<(Msg<T>, Vec<OwnedFd>), ProtoError> {
    let (body, fds) = recv_frame_within(sock, timeout)?;
    Ok((decode(&body)?, fds))
}

/// The caller's identity, as the kernel reports it for a Unix socket (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer(sock: &UnixStream) -> io::Result<Peer> {
    let c = nix::sys::socket::getsockopt(sock, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(io::Error::from)?;
    Ok(Peer {
        pid: c.pid(),
        uid: c.uid(),
        gid: c.gid(),
    })
}

/// The raw descriptor of `fd` (for [`send`]).
pub fn raw(fd: &impl AsRawFd) -> RawFd {
    fd.as_raw_fd()
}

#[cfg(test)]
mod tests;
