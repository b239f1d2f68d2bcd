//! PipesFS (thesis 3.2): the daemon's live graph as a FUSE filesystem that shell tools
//! read and edit.
//!
//! Owns: the layout (what path means what), attributes and permissions as the access
//! rules say, the text files (`.available`, `.stats`, `.options`, ...), and mapping each
//! filesystem call that changes something onto one transaction of the daemon (a live
//! edit, a stop), with the refusal's errno and a line in the daemon's log. Does not own:
//! the runs (`server`), applying edits (the worker, `dataplane::edit`), reading a stream
//! (`stream`).
//!
//! # Layout
//!
//! ```text
//! /run/streamline/pipes/
//!   .available                 the filters that can be instantiated (name, synopsis)
//!   .shape/NAME                process-shaping groups (`streamline shape --group NAME`):
//!                              policy, members, counters; write `net=5MB/s` (KEY=VALUE:
//!                              net, disk, policy, peak, prio-policy, disk-cost) to change
//!                              the group's policy live (its founder or root)
//!   1/                         run 1 (owner: the run's user)
//!     .pipeline  .placement    the pipeline as given; where each filter runs
//!     .stats                   the run's state, uptime and rate
//!     .ctl                     write `stop` to stop it
//!     gen/                     a source: one directory per filter, nested along the graph
//!       all                    its output stream (raw blocks), while you read it
//!       all.pcap               the same as a pcap stream (nanosecond timestamps)
//!       .stats  .options       counters; options (write `KEY=VALUE` to change one live)
//!       .filter                the filter as it was built
//!       1/ 2/ ...              one per class seen leaving it, each with `all`, `all.pcap`
//!       count/                 a filter that reads gen's output
//!         ...
//!       join -> ../other/join  a filter that reads gen but lives under its first input
//! ```
//!
//! A filter's directory lives under its first input (breadth first from the sources);
//! its other inputs have a symbolic link to it. `mkdir DIR/NAME` adds filter NAME
//! reading DIR's output (options in the name: `mkdir 'sample every=5'` or
//! `sample,every=5`); `rmdir` removes a filter (what it fed is fed by its input); `mv
//! A/X B/X` makes X read B instead of A; `ln -s ANY B/X` makes X read B too; `rm B/X` of
//! such a link undoes it; `echo every=50 > X/.options` changes an option.
//!
//! Permissions: a run's directories belong to its owner (0755: others may look, only the
//! owner and root may change); streams have the run's stream mode (its narrowest
//! source's, at most 0644, read-only), and so do `.pipeline`, `.filter` and `.options`
//! (what the run is says something of what it reads); the kernel enforces them
//! (`default_permissions`) and every change is checked again here against the run's
//! owner. Text shows secret parameters as `<secret>` (`catalog::shown`), and so does
//! the log.

pub mod guard;
mod inodes;
mod namespace;
pub(crate) mod stream;
mod tree;

use crate::policy::Cred;
use crate::proto::{errno_name, EditApplied, EditOp, GraphNode, Reply};
use crate::server::{Daemon, Run, State};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
};
use inodes::{Kept, ROOT_INO};
use lang::wire::EditWire;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use stream::{Format, Job, ReaderStats};
use tree::Tree;

/// Where PipesFS is mounted unless `--mount` says otherwise.
pub const DEFAULT_MOUNT: &str = "/run/streamline/pipes";

/// Attributes and entries are never cached: the graph changes under them.
const TTL: Duration = Duration::ZERO;

/// Files of a run's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunFile {
    Pipeline,
    Placement,
    Stats,
    Ctl,
}

/// Files of a filter's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeFile {
    Stats,
    Options,
    Filter,
}

/// What a path means.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Root,
    Available,
    Run(u64),
    RunFile(u64, RunFile),
    Node(u64, String),
    NodeFile(u64, String, NodeFile),
    Class(u64, String, u16),
    Stream(u64, String, Option<u16>, Format),
    /// A filter that reads this one but lives elsewhere: the link's target.
    Link(u64, String),
    /// `.shape/`: the process-shaping groups that exist now (`streamline shape --group`).
    Shaping,
    /// `.shape/NAME`: a group's policy, members and counters; write `KEY=VALUE` to change
    /// its policy live.
    ShapeGroup(String),
}

/// An open file.
enum Handle {
    /// A snapshot of a text file, taken at open.
    Text(Vec<u8>),
    /// A file written to act (`.options`, `.ctl`).
    Act,
    /// A stream: its reader thread, and the tap it shares.
    Stream {
        jobs: Sender<Job>,
        tap: (u64, String),
    },
}

/// A tap shared by the readers of one node.
struct Shared {
    id: u64,
    tags: beltway::RingRef,
    data: beltway::RingRef,
    readers: usize,
    /// The node's bytes out when the tap went on.
    stats: Arc<ReaderStats>,
}

/// The filesystem.
pub struct PipesFs {
    d: Arc<Daemon>,
    kept: Arc<Kept>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    taps: Mutex<HashMap<(u64, String), Shared>>,
    mounted: SystemTime,
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl PipesFs {
    pub fn new(d: Arc<Daemon>) -> PipesFs {
        let kept = Arc::new(Kept::new());
        let weak = Arc::downgrade(&kept);
        d.on_run_gone(move |d, _| {
            if let Some(k) = weak.upgrade() {
                k.prune(|r| d.run(r).is_none());
            }
        });
        PipesFs {
            d,
            kept,
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            taps: Mutex::new(HashMap::new()),
            mounted: SystemTime::now(),
        }
    }

    /// `path`'s inode number (no reference for the kernel: see `Inodes`).
    fn ino_of(&self, path: &[String]) -> u64 {
        self.kept.inos.lock().expect("not poisoned").number(path)
    }

    /// `path`'s inode number for an entry reply (one more reference for the kernel).
    fn ino_looked_up(&self, path: &[String]) -> u64 {
        self.kept.inos.lock().expect("not poisoned").looked_up(path)
    }

    fn path_of(&self, ino: INodeNo) -> Option<Vec<String>> {
        self.kept
            .inos
            .lock()
            .expect("not poisoned")
            .path(ino.0)
            .cloned()
    }

    /// Log a refusal and say its errno (what was asked, secrets redacted).
    fn refused(&self, req: &Request, op: &str, what: &str, e: i32, why: &str) -> Errno {
        let shown = catalog::shown(what);
        eprintln!(
            "streamlined: pipesfs: uid {} {op} {}: refused ({}): {}",
            req.uid(),
            shown.text(),
            errno_name(e),
            shown.scrub(why.lines().next().unwrap_or(""))
        );
        errno(e)
    }

    fn reply_err(&self, req: &Request, op: &str, what: &str, r: Reply) -> Errno {
        match r {
            Reply::Error {
                errno: e, message, ..
            } => self.refused(req, op, what, e, &message),
            _ => errno(libc::EIO),
        }
    }

    fn who(req: &Request) -> Cred {
        Cred::of(req.uid(), req.gid())
    }

    /// Apply one edit for `req`'s user (checked by the daemon as the protocol's are).
    fn edit(&self, req: &Request, op: &str, run: u64, edit: EditOp) -> Result<EditApplied, Errno> {
        let text = edit.to_string();
        self.d
            .edit(run, &Self::who(req), edit)
            .map_err(|r| self.reply_err(req, op, &text, r))
    }

    /// Open a stream file: share the node's tap (made for its first reader), start a
    /// reader thread.
    fn open_stream(
        &self,
        run: u64,
        label: &str,
        class: Option<u16>,
        format: Format,
    ) -> Result<Handle, (i32, String)> {
        let key = (run, label.to_string());
        // The tap is asked for without holding the table: it waits for the run's next batch
        // boundary, and other files must stay usable meanwhile. Two first readers racing
        // make two taps; the second is taken off again.
        let mut made = None;
        if !self.taps.lock().expect("not poisoned").contains_key(&key) {
            let (id, fds) = self.d.tap(run, label, None)?;
            let mut fds = fds.into_iter();
            let (t, dt) = (
                fds.next().expect("2 descriptors"),
                fds.next().expect("2 descriptors"),
            );
            let rings =
                beltway::RingRef::from_fds(&format!("tap.{label}"), t, None).and_then(|tags| {
                    Ok((
                        tags,
                        beltway::RingRef::from_fds(&format!("tap.{label}.data"), dt, None)?,
                    ))
                });
            match rings {
                Ok((tags, data)) => made = Some((id, tags, data)),
                Err(e) => {
                    self.d.untap(run, id);
                    return Err((libc::EIO, e.to_string()));
                }
            }
        }
        let mut taps = self.taps.lock().expect("not poisoned");
        let mut first = false;
        if let Some((id, tags, data)) = made {
            if taps.contains_key(&key) {
                self.d.untap(run, id);
            } else {
                let stats = self
                    .kept
                    .reader_stats
                    .lock()
                    .expect("not poisoned")
                    .entry(key.clone())
                    .or_default()
                    .clone();
                taps.insert(
                    key.clone(),
                    Shared {
                        id,
                        tags,
                        data,
                        readers: 0,
                        stats,
                    },
                );
                first = true;
            }
        }
        let Some(s) = taps.get_mut(&key) else {
            // Its last reader closed (and took it off) while we were asking: ask again.
            drop(taps);
            return self.open_stream(run, label, class, format);
        };
        let (tx, rx) = std::sync::mpsc::channel();
        if let Err(e) = stream::spawn(&s.tags, &s.data, first, class, format, s.stats.clone(), rx) {
            if s.readers == 0 {
                let id = s.id;
                taps.remove(&key);
                self.d.untap(run, id);
            }
            return Err((libc::EIO, e.to_string()));
        }
        s.readers += 1;
        Ok(Handle::Stream { jobs: tx, tap: key })
    }

    fn close_stream(&self, key: (u64, String)) {
        let mut taps = self.taps.lock().expect("not poisoned");
        if let Some(s) = taps.get_mut(&key) {
            s.readers -= 1;
            if s.readers == 0 {
                let id = s.id;
                taps.remove(&key);
                self.d.untap(key.0, id);
            }
        }
    }

    fn new_fh(&self, h: Handle) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().expect("not poisoned").insert(fh, h);
        FileHandle(fh)
    }

    /// The run and label of a filter directory.
    fn node_dir(&self, ino: INodeNo) -> Option<(u64, String)> {
        match self.resolve(&self.path_of(ino)?)? {
            Entry::Node(r, l) => Some((r, l)),
            _ => None,
        }
    }
}

impl fuser::Filesystem for PipesFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name) {
            Some((p, e)) => {
                let ino = self.ino_looked_up(&p);
                reply.entry(&TTL, &self.attr(ino, &e), Generation(0));
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    /// The kernel forgets `nlookup` references to `ino` (fuser's default `batch_forget`
    /// calls this for each of a batch: its `ForgetOne` is not public in fuser 0.18).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.kept
            .inos
            .lock()
            .expect("not poisoned")
            .forget(ino.0, nlookup, |r| self.d.run(r).is_none());
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path_of(ino).and_then(|p| self.resolve(&p)) {
            Some(e) => reply.attr(&TTL, &self.attr(ino.0, &e)),
            None => reply.error(Errno::ENOENT),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Truncation of `.options` or `.ctl` by `echo >` is accepted (and changes nothing);
        // modes and owners are the access rules', not settable.
        match self.path_of(ino).and_then(|p| self.resolve(&p)) {
            Some(e) => reply.attr(&TTL, &self.attr(ino.0, &e)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some(p) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let Some(Entry::Link(run, target)) = self.resolve(&p) else {
            return reply.error(Errno::EINVAL);
        };
        let Some(r) = self.d.run(run) else {
            return reply.error(Errno::ENOENT);
        };
        // From the link's directory (p minus its name, minus the run) up to the run, then
        // down to the target's home.
        let depth = p.len() - 2;
        let mut s = "../".repeat(depth);
        s += &Tree::of(&r, &self.kept.homes).path(&target).join("/");
        reply.data(s.as_bytes());
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let what = name.to_string_lossy().to_string();
        let Some((run, label)) = self.node_dir(parent) else {
            return reply.error(self.refused(req, "mkdir", &what, libc::EPERM, "filters are made only inside a filter's directory (a run's sources are fixed when it starts)"));
        };
        let filter = what.replace(',', " ");
        let branch = EditOp::Branch {
            node: label,
            filter,
        };
        match self.edit(req, "mkdir", run, branch) {
            Ok(applied) => {
                let new = applied.node;
                let mut p = self.path_of(parent).unwrap_or_default();
                p.push(new.clone());
                let ino = self.ino_looked_up(&p);
                reply.entry(&TTL, &self.attr(ino, &Entry::Node(run, new)), Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let what = name.to_string_lossy().to_string();
        match self.child(parent, name) {
            Some((_, Entry::Node(run, label))) => {
                match self.edit(req, "rmdir", run, EditOp::Remove { node: label }) {
                    Ok(_) => reply.ok(),
                    Err(e) => reply.error(e),
                }
            }
            Some(_) => reply.error(self.refused(
                req,
                "rmdir",
                &what,
                libc::EPERM,
                "only a filter's directory can be removed",
            )),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let what = name.to_string_lossy().to_string();
        match (self.node_dir(parent), self.child(parent, name)) {
            (Some((run, from)), Some((_, Entry::Link(_, to)))) => {
                match self.edit(req, "rm", run, EditOp::Disconnect { from, to }) {
                    Ok(_) => reply.ok(),
                    Err(e) => reply.error(e),
                }
            }
            (_, Some(_)) => reply.error(self.refused(
                req,
                "rm",
                &what,
                libc::EPERM,
                "only a link to a filter (an extra input) can be removed; rmdir removes a filter",
            )),
            (_, None) => reply.error(Errno::ENOENT),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        let what = link_name.to_string_lossy().to_string();
        let Some((run, from)) = self.node_dir(parent) else {
            return reply.error(self.refused(
                req,
                "ln -s",
                &what,
                libc::EPERM,
                "links join filters, inside a filter's directory",
            ));
        };
        let connect = EditOp::Connect {
            from,
            to: what.clone(),
        };
        match self.edit(req, "ln -s", run, connect) {
            Ok(_) => {
                let mut p = self.path_of(parent).unwrap_or_default();
                p.push(what.clone());
                let ino = self.ino_looked_up(&p);
                reply.entry(
                    &TTL,
                    &self.attr(ino, &Entry::Link(run, what)),
                    Generation(0),
                );
            }
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let what = name.to_string_lossy().to_string();
        if name != newname {
            return reply.error(self.refused(
                req,
                "mv",
                &what,
                libc::EINVAL,
                "a filter's name is fixed; mv moves it under another filter with the same name",
            ));
        }
        match (
            self.node_dir(parent),
            self.node_dir(newparent),
            self.child(parent, name),
        ) {
            (
                Some((run, from)),
                Some((run2, to)),
                Some((_, Entry::Node(_, x) | Entry::Link(_, x))),
            ) => {
                if run != run2 {
                    return reply.error(self.refused(
                        req,
                        "mv",
                        &what,
                        libc::EXDEV,
                        "filters move only within their run",
                    ));
                }
                match self.edit(req, "mv", run, EditOp::Move { node: x, from, to }) {
                    Ok(_) => reply.ok(),
                    Err(e) => reply.error(e),
                }
            }
            (_, _, None) => reply.error(Errno::ENOENT),
            _ => reply.error(self.refused(
                req,
                "mv",
                &what,
                libc::EPERM,
                "only a filter moves, from one filter's directory to another's",
            )),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some(p) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let Some(e) = self.resolve(&p) else {
            return reply.error(Errno::ENOENT);
        };
        let direct = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NONSEEKABLE;
        let writing = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
        match &e {
            Entry::Stream(run, label, class, format) => {
                if writing {
                    return reply.error(Errno::EACCES);
                }
                // The kernel checked the mode (default_permissions); check it again.
                let attr = self.attr(ino.0, &e);
                let who = Self::who(req);
                if !may(&attr, &who, 0o4) {
                    return reply.error(self.refused(
                        req,
                        "open",
                        &p.join("/"),
                        libc::EACCES,
                        &format!(
                            "the stream is uid {}'s with mode {:04o}",
                            attr.uid, attr.perm
                        ),
                    ));
                }
                match self.open_stream(*run, label, *class, *format) {
                    Ok(h) => reply.opened(self.new_fh(h), direct),
                    Err((e, why)) => reply.error(self.refused(req, "open", &p.join("/"), e, &why)),
                }
            }
            Entry::NodeFile(_, _, NodeFile::Options)
            | Entry::RunFile(_, RunFile::Ctl)
            | Entry::ShapeGroup(_)
                if writing =>
            {
                let attr = self.attr(ino.0, &e);
                if !may(&attr, &Self::who(req), 0o2) {
                    return reply.error(self.refused(
                        req,
                        "open",
                        &p.join("/"),
                        libc::EACCES,
                        "only the run's owner and root may change it",
                    ));
                }
                reply.opened(self.new_fh(Handle::Act), direct)
            }
            _ if writing => reply.error(Errno::EACCES),
            Entry::RunFile(..) | Entry::NodeFile(..) | Entry::Available | Entry::ShapeGroup(_) => {
                match self.text(&e) {
                    Some(t) => reply.opened(
                        self.new_fh(Handle::Text(t.into_bytes())),
                        FopenFlags::FOPEN_DIRECT_IO,
                    ),
                    None => reply.error(Errno::ENOENT),
                }
            }
            _ => reply.error(Errno::EISDIR),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let handles = self.handles.lock().expect("not poisoned");
        match handles.get(&fh.0) {
            Some(Handle::Text(t)) => {
                let from = (offset as usize).min(t.len());
                let to = (from + size as usize).min(t.len());
                reply.data(&t[from..to]);
            }
            Some(Handle::Stream { jobs, .. }) => {
                let job = Job::Read {
                    size: size as usize,
                    nonblock: flags.0 & libc::O_NONBLOCK != 0,
                    pid: req.pid(),
                    reply,
                };
                if let Err(std::sync::mpsc::SendError(Job::Read { reply, .. })) = jobs.send(job) {
                    reply.error(Errno::EIO);
                }
            }
            _ => reply.error(Errno::EBADF),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _wf: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(e) = self.path_of(ino).and_then(|p| self.resolve(&p)) else {
            return reply.error(Errno::ENOENT);
        };
        let text = String::from_utf8_lossy(data);
        let words: Vec<&str> = text.split_whitespace().collect();
        let r = match &e {
            Entry::NodeFile(run, label, NodeFile::Options) => {
                if words.is_empty() {
                    return reply.written(data.len() as u32);
                }
                // What is written is the text of options (quotes and all): parsed as the
                // text form of `set` is, into the typed edit.
                let text = format!("set {label} {}", words.join(" "));
                match lang::edit::Edit::parse_op(&text, &lang::WithPath(catalog::Natives)) {
                    Ok(op) => self.edit(req, "write .options", *run, op).map(|_| ()),
                    Err(e) => Err(self.refused(
                        req,
                        "write .options",
                        &text,
                        libc::EINVAL,
                        &e.to_string(),
                    )),
                }
            }
            Entry::ShapeGroup(g) => {
                let attr = self.attr(ino.0, &e);
                if !may(&attr, &Self::who(req), 0o2) {
                    return reply.error(self.refused(
                        req,
                        "write .shape",
                        g,
                        libc::EACCES,
                        "only the group's founder and root may change its policy",
                    ));
                }
                edit_shape_group(g, &text)
                    .map_err(|why| self.refused(req, "write .shape", g, libc::EINVAL, &why))
                    .inspect(|_| {
                        eprintln!(
                            "streamlined: pipesfs: uid {} changed shaping group {g}: {}",
                            req.uid(),
                            text.trim()
                        )
                    })
            }
            Entry::RunFile(run, RunFile::Ctl) => match words.as_slice() {
                ["stop"] => self
                    .d
                    .stop_run(*run, &Self::who(req))
                    .map_err(|r| self.reply_err(req, "write .ctl", "stop", r)),
                _ => Err(self.refused(
                    req,
                    "write .ctl",
                    &text,
                    libc::EINVAL,
                    "a run's .ctl takes `stop`",
                )),
            },
            _ => Err(Errno::EBADF),
        };
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        let handles = self.handles.lock().expect("not poisoned");
        match handles.get(&fh.0) {
            Some(Handle::Stream { jobs, .. }) => {
                if let Err(std::sync::mpsc::SendError(Job::Poll { reply, .. })) =
                    jobs.send(Job::Poll { ph, reply })
                {
                    reply.error(Errno::EIO);
                }
            }
            Some(_) => reply.poll(fuser::PollEvents::POLLIN | fuser::PollEvents::POLLOUT),
            None => reply.error(Errno::EBADF),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self.handles.lock().expect("not poisoned").remove(&fh.0);
        if let Some(Handle::Stream { jobs, tap }) = h {
            drop(jobs);
            self.close_stream(tap);
        }
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(p) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let Some(e) = self.resolve(&p) else {
            return reply.error(Errno::ENOENT);
        };
        let mut list: Vec<(String, FileType)> = vec![
            (".".into(), FileType::Directory),
            ("..".into(), FileType::Directory),
        ];
        let file = |n: &str| (n.to_string(), FileType::RegularFile);
        match &e {
            Entry::Root => {
                list.push(file(".available"));
                list.push((SHAPE_DIR.to_string(), FileType::Directory));
                let runs = self.d.visible_runs();
                // What a run that ended while one of its paths was being resolved left
                // (the daemon's `on_run_gone` gave back the rest).
                self.kept.prune(|r| self.d.run(r).is_none());
                for r in runs {
                    if r.state() != State::Built {
                        list.push((r.id.to_string(), FileType::Directory));
                    }
                }
            }
            Entry::Run(run) => {
                list.extend([".pipeline", ".placement", ".stats", ".ctl"].map(file));
                if let Some(r) = self.d.run(*run) {
                    let mut c = Tree::of(&r, &self.kept.homes).children(None);
                    c.sort();
                    list.extend(c.into_iter().map(|(l, _)| (l, FileType::Directory)));
                }
            }
            Entry::Node(run, label) => {
                list.extend(["all", "all.pcap", ".stats", ".options", ".filter"].map(file));
                if let Some(r) = self.d.run(*run) {
                    list.extend(
                        self.classes(&r, label)
                            .into_iter()
                            .map(|c| (c.to_string(), FileType::Directory)),
                    );
                    let mut c = Tree::of(&r, &self.kept.homes).children(Some(label));
                    c.sort();
                    list.extend(c.into_iter().map(|(l, home)| {
                        (
                            l,
                            if home {
                                FileType::Directory
                            } else {
                                FileType::Symlink
                            },
                        )
                    }));
                }
            }
            Entry::Class(..) => list.extend(["all", "all.pcap"].map(file)),
            Entry::Shaping => list.extend(shape::Segment::groups().iter().map(|g| file(g))),
            _ => return reply.error(Errno::ENOTDIR),
        }
        for (k, (name, kind)) in list.into_iter().enumerate().skip(offset as usize) {
            let mut cp = p.clone();
            let ino = match name.as_str() {
                "." => ino.0,
                ".." => {
                    cp.pop();
                    self.ino_of(&cp)
                }
                _ => {
                    cp.push(name.clone());
                    self.ino_of(&cp)
                }
            };
            if reply.add(INodeNo(ino), (k + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }
}

/// The directory of the shaping groups.
const SHAPE_DIR: &str = ".shape";

/// Apply `KEY=VALUE` words to group `g`'s policy.
fn edit_shape_group(g: &str, text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Ok(());
    }
    let seg = shape::Segment::open_group(g).map_err(|e| e.to_string())?;
    let c = seg
        .shared()
        .config()
        .with_edits(text)
        .map_err(|e| e.to_string())?;
    seg.edit(c).map_err(|e| e.to_string())
}

/// Unix permission `bit` (4 read, 2 write) of `attr` for `who`.
fn may(attr: &FileAttr, who: &Cred, bit: u16) -> bool {
    let m = attr.perm;
    who.root()
        || if attr.uid == who.uid {
            m & (bit << 6) != 0
        } else if who.groups.contains(&attr.gid) {
            m & (bit << 3) != 0
        } else {
            m & bit != 0
        }
}

/// Mount PipesFS at `dir` (made if missing; a stale mount left by a daemon that died is
/// detached first) and serve it in the background until the returned session is dropped
/// (which unmounts it). The mount is `allow_other` with `default_permissions` (the kernel
/// enforces the modes) and `auto_unmount`; what detaches the mount of a daemon that is
/// killed is [`guard`] (fusermount3's watcher misses some deaths: see there).
pub fn mount(d: Arc<Daemon>, dir: &Path) -> std::io::Result<fuser::BackgroundSession> {
    if let Err(e) = std::fs::metadata(dir) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
        } else {
            std::fs::create_dir_all(dir)?;
        }
    }
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName("streamline".into()),
        fuser::MountOption::Subtype("pipesfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::AutoUnmount,
        fuser::MountOption::NoExec,
        fuser::MountOption::NoSuid,
        fuser::MountOption::NoDev,
    ];
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(2);
    let session = fuser::spawn_mount(PipesFs::new(d.clone()), dir, &cfg)?;
    forget_gone_runs(&d, session.notifier())?;
    // The mount leaves descriptors without close-on-exec (the socket to fusermount3's
    // auto_unmount watcher): workers must not inherit them, or a killed daemon's mount
    // would stay until its last worker ended. Every descriptor a worker must inherit is
    // marked so when it is started.
    beltway::sys::close_on_exec_above_stdio();
    Ok(session)
}

/// Tell the kernel, once a run is gone, to drop its cached entries of the run's directory
/// (`FUSE_NOTIFY_INVAL_ENTRY` on the root's entry of the run): the kernel keeps the
/// dentries it looked up until memory runs short, and with them its references to their
/// numbers, which [`Inodes`] may not give back while the kernel holds them. Invalidated,
/// the directory's subtree is dropped and the kernel sends `forget` for each number, and
/// those of a gone run go (without it the table grew by every path a reader ever looked
/// up: ~4-7 kB per run whose nodes `find` listed, seen with heaptrack). Sent from a thread
/// of its own: a notification waits for the directory's lock in the kernel, which a
/// request being served on the thread that ended the run (a `.ctl` stop) may hold.
fn forget_gone_runs(d: &Arc<Daemon>, notifier: fuser::Notifier) -> std::io::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let tx = Mutex::new(tx);
    d.on_run_gone(move |_, id| {
        let _ = tx.lock().expect("not poisoned").send(id);
    });
    std::thread::Builder::new()
        .name("pipesfs-inval".into())
        .spawn(move || {
            for id in rx {
                // ENOENT: the kernel holds no entry for it (never looked up): nothing to drop.
                let _ =
                    notifier.inval_entry(INodeNo(ROOT_INO), std::ffi::OsStr::new(&id.to_string()));
            }
        })?;
    Ok(())
}

/// Unmount `dir` lazily: what the daemon does last, so that a reader still inside does not
/// leave the mount behind (`fusermount3 -u` refuses a busy mount).
pub fn unmount(dir: &Path) {
    let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
}

#[cfg(test)]
mod tests {
    use super::*;
    use inodes::Inodes;

    fn attr(uid: u32, gid: u32, perm: u16) -> FileAttr {
        let t = SystemTime::UNIX_EPOCH;
        FileAttr {
            ino: INodeNo(2),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::RegularFile,
            perm,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn permissions_are_unix_ones() {
        let owner = Cred {
            uid: 1000,
            gid: 1000,
            groups: vec![1000],
        };
        let member = Cred {
            uid: 1001,
            gid: 1001,
            groups: vec![1001, 1000],
        };
        let other = Cred {
            uid: 1002,
            gid: 1002,
            groups: vec![1002],
        };
        let root = Cred {
            uid: 0,
            gid: 0,
            groups: vec![0],
        };
        let f = attr(1000, 1000, 0o640);
        assert!(may(&f, &owner, 0o4) && may(&f, &owner, 0o2));
        assert!(may(&f, &member, 0o4) && !may(&f, &member, 0o2));
        assert!(!may(&f, &other, 0o4) && !may(&f, &other, 0o2));
        assert!(may(&f, &root, 0o4) && may(&f, &root, 0o2));
        // The owner's bits decide for the owner, even where others' would allow.
        assert!(!may(&attr(1000, 1000, 0o044), &owner, 0o4));
    }

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn an_ended_runs_inodes_go_once_the_kernel_forgets_them() {
        let mut t = Inodes::new();
        let run = path(&["5"]);
        let gen = path(&["5", "gen"]);
        let all = path(&["5", "gen", "all"]);
        let other = path(&["6", "gen"]);
        let shape = path(&[SHAPE_DIR]);
        let r = t.looked_up(&run);
        let g = t.looked_up(&gen);
        assert_eq!(t.looked_up(&gen), g, "a path keeps its number");
        let a = t.number(&all); // listed by readdir: no reference
        let o = t.looked_up(&other);
        let s = t.looked_up(&shape);
        let gone = |r: u64| r == 5;
        // A live run's path the kernel forgot stays (it may be looked up again).
        t.forget(o, 1, gone);
        assert_eq!(t.path(o), Some(&other));
        // Run 5 ends: only what the kernel holds no reference to goes.
        t.prune(gone);
        assert_eq!(t.path(a), None, "readdir's number of a gone run must go");
        assert!(!t.by_path.contains_key(&all));
        assert_eq!(
            t.path(r),
            Some(&run),
            "the kernel still holds the run's directory"
        );
        assert_eq!(t.path(g), Some(&gen));
        // The kernel forgets: at 0 the number goes, not before.
        t.forget(r, 1, gone);
        assert_eq!(t.path(r), None);
        t.forget(g, 1, gone);
        assert_eq!(t.path(g), Some(&gen), "looked up twice, forgotten once");
        t.forget(g, 1, gone);
        assert_eq!(t.path(g), None);
        // What is not a run's stays, and so does the root, whatever the kernel says.
        t.forget(s, 1, gone);
        t.forget(ROOT_INO, 1, |_| true);
        t.prune(|_| true);
        assert_eq!(t.path(s), Some(&shape));
        assert_eq!(t.path(ROOT_INO), Some(&Vec::new()));
        // Only the root, `.shape` and the live run's path are left; numbers are not reused.
        assert_eq!(t.by_ino.len(), 2, "{:?}", t.by_ino);
        assert_eq!(t.by_path.len(), 2);
        assert!(t.looked_up(&gen) > s);
    }

    #[test]
    fn a_gone_runs_homes_and_reader_counters_are_given_back() {
        let d = Daemon::new(crate::server::Config {
            socket: "/nonexistent/streamline.sock".into(),
            policy: crate::policy::Policy::parse("", "test", &catalog::Natives).unwrap(),
            worker: "/nonexistent/streamline".into(),
            max_clients: 1,
            hello_timeout: Duration::from_secs(1),
        });
        let fs = PipesFs::new(d.clone());
        for run in [5, 6] {
            let k = (run, "count".to_string());
            fs.kept
                .homes
                .lock()
                .unwrap()
                .insert(k.clone(), "gen".into());
            fs.kept
                .reader_stats
                .lock()
                .unwrap()
                .insert(k, Arc::default());
            fs.ino_of(&path(&[&run.to_string(), "gen"]));
        }
        let held = |run: u64| {
            let k = (run, "count".to_string());
            (
                fs.kept.homes.lock().unwrap().contains_key(&k),
                fs.kept.reader_stats.lock().unwrap().contains_key(&k),
                fs.kept
                    .inos
                    .lock()
                    .unwrap()
                    .by_path
                    .contains_key(&path(&[&run.to_string(), "gen"])),
            )
        };
        // What one gone run left goes; a live one's stays.
        fs.kept.prune(|r| r == 5);
        assert_eq!(held(5), (false, false, false));
        assert_eq!(held(6), (true, true, true));
        // Neither run is in the daemon's table: when a run leaves it (its monitor's end,
        // `forget_run`), what every gone run left is given back.
        d.forget_run(7);
        assert_eq!(held(6), (false, false, false));
        let inos = fs.kept.inos.lock().unwrap();
        assert_eq!(inos.by_ino.len(), 1, "only the root: {:?}", inos.by_ino);
    }
}
