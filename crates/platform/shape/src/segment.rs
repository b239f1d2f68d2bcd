//! The shared-memory segment a shaped program tree (or a `--group` of them) keeps its
//! budget in: the policy, the bucket words, the priority board, the members and counters.
//!
//! Owns: the segment's layout and life. A lone `streamline shape` keeps it in a memfd that
//! its processes inherit (nothing to leak: it goes with the last fd). A group keeps it in
//! `/dev/shm/streamline-shape-NAME`, created by the first member with the policy it was
//! given, joined by the others (who must ask for the same policy or none), and unlinked by
//! the last live member to leave; members are launcher pids in a table, and a dead one's
//! slot is swept by whoever looks next, so a member killed with SIGKILL neither keeps the
//! segment alive nor blocks anybody (nothing in the segment is a lock).
//!
//! The mapping itself is beltway's shared-memory layer ([`beltway::shm::Segment`]): this
//! module places [`Shared`] in it as a [`ShmSafe`] type (atomics only, so every bit pattern
//! is valid and all concurrent access is through atomics; the orderings are the SYNC POINTs
//! below). What is left `unsafe` here is a descriptor handed in as a number
//! ([`Segment::from_fd`], [`Segment::inheritable_fd`]), `flock` and `kill(pid, 0)`.

use crate::config::{Config, LEVELS};
use beltway::shm::{Segment as Shm, ShmSafe};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use thiserror::Error;

const MAGIC: u64 = 0x5348_4150_4531_0002; // "SHAPE1" v2 (policy behind a sequence lock)
/// Most launchers one group holds at once.
pub const MAX_MEMBERS: usize = 64;

/// Counters per resource.
#[repr(C)]
#[derive(Default)]
pub struct Stats {
    /// Bytes the calls moved.
    pub bytes: AtomicU64,
    /// Tokens charged by device-cost disk calls (their weighted bytes); every other call
    /// costs its bytes, so there tokens are [`Stats::bytes`].
    pub tokens: AtomicU64,
    /// Grants from the shared budget: one per shaped network call, one per disk call that
    /// waited or prepaid a lease (see `shaper::DiskLease`).
    pub calls: AtomicU64,
    /// Calls that had to wait.
    pub waits: AtomicU64,
    /// Nanoseconds spent waiting, summed over calls.
    pub wait_ns: AtomicU64,
}

/// The policy as the segment keeps it: nine words behind a sequence lock, so that a
/// group's policy can be changed while its members run (`Segment::edit`, PipesFS'
/// `.shape/NAME`), and every reader sees one whole policy, old or new.
#[repr(C)]
pub struct SharedConfig {
    /// Even: stable; odd: being written.
    seq: AtomicU64,
    words: [AtomicU64; 9],
}

impl SharedConfig {
    fn pack(c: &Config) -> [u64; 9] {
        [
            c.net.rate,
            c.net.burst,
            c.net.peak,
            c.net.kind as u64,
            c.disk.rate,
            c.disk.burst,
            c.disk.peak,
            c.disk.kind as u64,
            c.prio_policy as u64 | (c.disk_cost as u64) << 32,
        ]
    }

    fn unpack(w: [u64; 9]) -> Config {
        use crate::config::Limit;
        Config {
            net: Limit {
                rate: w[0],
                burst: w[1],
                peak: w[2],
                kind: w[3] as u32,
                _pad: 0,
            },
            disk: Limit {
                rate: w[4],
                burst: w[5],
                peak: w[6],
                kind: w[7] as u32,
                _pad: 0,
            },
            prio_policy: w[8] as u32,
            disk_cost: (w[8] >> 32) as u32,
        }
    }

    /// The policy now.
    pub fn load(&self) -> Config {
        loop {
            // SYNC POINT: pairs with the Release stores of `store`: an even sequence
            // read before and unchanged after the words means no write overlapped.
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let w = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return SharedConfig::unpack(w);
            }
        }
    }

    /// Replace the policy (one writer at a time: the caller holds the group's lock, or
    /// the segment is not yet published).
    fn store(&self, c: &Config) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Relaxed);
        // SYNC POINT: the odd sequence is visible before any new word (readers retry).
        std::sync::atomic::fence(Ordering::Release);
        for (w, v) in self.words.iter().zip(SharedConfig::pack(c)) {
            w.store(v, Ordering::Relaxed);
        }
        // SYNC POINT: publishes the words with the even sequence (pairs with `load`).
        self.seq.store(s + 2, Ordering::Release);
    }
}

/// The segment's contents.
#[repr(C)]
pub struct Shared {
    magic: AtomicU64,
    config: SharedConfig,
    /// Arrival times of the buckets: [resource][bucket].
    pub tat: [[AtomicU64; 2]; 2],
    /// Last instant a waiter of each priority was seen: [resource][level].
    pub board: [[AtomicU64; LEVELS]; 2],
    pub members: [AtomicU32; MAX_MEMBERS],
    pub stats: [Stats; 2],
}

// SAFETY: `#[repr(C)]`, no pointers or references, every field an atomic (so every bit
// pattern is valid, all-zero being an empty segment without its magic) and all mutation
// after creation goes through those atomics (the policy through its sequence lock).
unsafe impl ShmSafe for Shared {}

impl Shared {
    /// The policy now (a copy: it may change while the segment is in use).
    pub fn config(&self) -> Config {
        self.config.load()
    }
}

/// Why a segment could not be had.
#[derive(Debug, Error)]
pub enum SegmentError {
    #[error("shaping segment {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("group '{group}' already runs with {have}; this member asked for {want} (join it with the same policy, or with no rates to take the group's)")]
    Mismatch {
        group: String,
        have: String,
        want: String,
    },
    #[error("group '{0}' has no policy yet: its first member must give --net and/or --disk")]
    NoPolicy(String),
    #[error("group name '{0}' is not allowed: use letters, digits, '-', '_' and '.' (at most 64)")]
    BadName(String),
    #[error("group '{0}' is full ({MAX_MEMBERS} members)")]
    Full(String),
    #[error("fd {0} is not a shaping segment")]
    NotASegment(RawFd),
}

/// A mapped segment: [`Shared`] at offset 0 of a beltway segment.
pub struct Segment {
    shm: Shm,
    /// The group file (for `flock`, its owner and link count); the mapping's own descriptor
    /// for a private segment.
    file: File,
    path: Option<PathBuf>,
}

const SIZE: usize = std::mem::size_of::<Shared>();

impl Segment {
    /// A private segment (memfd) for one program tree, inheritable by its children.
    pub fn create_private(config: Config) -> Result<Segment, SegmentError> {
        let io = |e| SegmentError::Io {
            path: "memfd".into(),
            source: e,
        };
        let shm = Shm::create_memfd("streamline-shape", SIZE).map_err(io)?;
        let file = File::from(shm.fd().try_clone_to_owned().map_err(io)?);
        let seg = Segment {
            shm,
            file,
            path: None,
        };
        seg.publish(config);
        Ok(seg)
    }

    /// Where group `name` lives.
    pub fn group_path(name: &str) -> Result<PathBuf, SegmentError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || name.starts_with('.')
        {
            return Err(SegmentError::BadName(name.into()));
        }
        Ok(PathBuf::from(format!("/dev/shm/streamline-shape-{name}")))
    }

    /// Join (or found) group `name` as launcher `pid`: with `config` the group must run
    /// that policy (a new group takes it); with `None` the member takes the group's.
    pub fn join_group(
        name: &str,
        config: Option<Config>,
        pid: u32,
    ) -> Result<Segment, SegmentError> {
        let path = Segment::group_path(name)?;
        let io = |e| SegmentError::Io {
            path: path.display().to_string(),
            source: e,
        };
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            lock(&file, true).map_err(io)?;
            // the last member may have unlinked it between our open and our lock
            let st = file.metadata().map_err(io)?;
            if std::os::unix::fs::MetadataExt::nlink(&st) == 0 {
                continue;
            }
            let fresh = st.len() == 0;
            if fresh {
                let Some(c) = config else {
                    let _ = std::fs::remove_file(&path);
                    return Err(SegmentError::NoPolicy(name.into()));
                };
                file.set_len(SIZE as u64).map_err(io)?;
                let seg = Segment::map(file, Some(path.clone()))?;
                seg.publish(c);
                seg.add_member(name, pid)?;
                lock(&seg.file, false).map_err(io)?;
                return Ok(seg);
            }
            if st.len() < SIZE as u64 {
                // not ours, or another version's: mapping past its end would fault
                return Err(SegmentError::NotASegment(file.as_raw_fd()));
            }
            let seg = Segment::map(file, Some(path.clone()))?;
            if seg.shared().magic.load(Ordering::Acquire) != MAGIC {
                return Err(SegmentError::NotASegment(seg.file.as_raw_fd()));
            }
            let have = seg.shared().config();
            if let Some(c) = config {
                if seg.members().is_empty() {
                    // every member died without leaving (SIGKILL): the group is founded anew
                    seg.shared().config.store(&c);
                } else if c != have {
                    return Err(SegmentError::Mismatch {
                        group: name.into(),
                        have: have.describe(),
                        want: c.describe(),
                    });
                }
            }
            seg.add_member(name, pid)?;
            lock(&seg.file, false).map_err(io)?;
            return Ok(seg);
        }
    }

    /// Map an inherited segment fd (a member process after fork/exec).
    pub fn from_fd(fd: RawFd) -> Result<Segment, SegmentError> {
        // SAFETY: the caller hands in a descriptor open for the duration of this call (an
        // inherited STREAMLINE_SHAPE_FD, or a live segment's); it is only duplicated here
        // (F_DUPFD_CLOEXEC), the original stays with its owner.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let file = File::from(
            borrowed
                .try_clone_to_owned()
                .map_err(|e| SegmentError::Io {
                    path: format!("fd {fd}"),
                    source: e,
                })?,
        );
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < SIZE as u64 {
            return Err(SegmentError::NotASegment(fd));
        }
        let seg = Segment::map(file, None)?;
        if seg.shared().magic.load(Ordering::Acquire) != MAGIC {
            return Err(SegmentError::NotASegment(fd));
        }
        Ok(seg)
    }

    /// Map `file` (at least [`SIZE`] bytes long: the callers check) through beltway.
    fn map(file: File, path: Option<PathBuf>) -> Result<Segment, SegmentError> {
        let name = path
            .as_ref()
            .map_or("memfd".into(), |p| p.display().to_string());
        let io = |e| SegmentError::Io {
            path: name.clone(),
            source: e,
        };
        let fd = file.as_fd().try_clone_to_owned().map_err(io)?;
        let shm = Shm::from_path_fd(fd, &name).map_err(io)?;
        if !shm.writable() {
            return Err(io(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the segment maps read-only",
            )));
        }
        Ok(Segment { shm, file, path })
    }

    fn publish(&self, config: Config) {
        self.shared().config.store(&config);
        // SYNC POINT: members read the policy only after seeing the magic.
        self.shared().magic.store(MAGIC, Ordering::Release);
    }

    /// Change the policy of a running budget (a group's, under its lock): the buckets'
    /// arrival times stay, so what was taken or owed counts under the new rates.
    pub fn edit(&self, config: Config) -> Result<(), SegmentError> {
        let io = |e| SegmentError::Io {
            path: self
                .path
                .as_ref()
                .map_or("memfd".into(), |p| p.display().to_string()),
            source: e,
        };
        lock(&self.file, true).map_err(io)?;
        self.shared().config.store(&config);
        lock(&self.file, false).map_err(io)
    }

    /// Look at group `name` without joining it (what PipesFS and `--list` show).
    pub fn open_group(name: &str) -> Result<Segment, SegmentError> {
        let path = Segment::group_path(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| SegmentError::Io {
                path: path.display().to_string(),
                source: e,
            })?;
        if file.metadata().map(|m| m.len()).unwrap_or(0) < SIZE as u64 {
            return Err(SegmentError::NotASegment(file.as_raw_fd()));
        }
        let seg = Segment::map(file, Some(path))?;
        if seg.shared().magic.load(Ordering::Acquire) != MAGIC {
            return Err(SegmentError::NotASegment(seg.file.as_raw_fd()));
        }
        Ok(seg)
    }

    /// The names of the groups that exist now. A group whose members all died without
    /// leaving (SIGKILL) is removed on the way, as its last member would have done.
    pub fn groups() -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| {
                    e.ok()?
                        .file_name()
                        .into_string()
                        .ok()?
                        .strip_prefix("streamline-shape-")
                        .map(String::from)
                })
                .collect()
            })
            .unwrap_or_default();
        v.retain(|name| match Segment::open_group(name) {
            Ok(seg) => !seg.remove_if_dead(),
            Err(_) => true,
        });
        v.sort();
        v
    }

    /// Unlink the group file if no live member holds it (under the group's lock, as
    /// joining and leaving take it). Returns whether it was removed.
    fn remove_if_dead(&self) -> bool {
        let Some(path) = &self.path else { return false };
        if lock(&self.file, true).is_err() {
            return false;
        }
        let dead = self
            .file
            .metadata()
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 0)
            && self.members().is_empty();
        if dead {
            let _ = std::fs::remove_file(path);
        }
        let _ = lock(&self.file, false);
        dead
    }

    /// The group file's owner (uid), if this is a group.
    pub fn owner(&self) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        self.path
            .as_ref()
            .and(self.file.metadata().ok())
            .map(|m| m.uid())
    }

    /// What the budget is and has done, as `key value` lines.
    pub fn report(&self) -> String {
        let sh = self.shared();
        let c = sh.config();
        let mut s = format!(
            "net {}\ndisk {}\nprio_policy {:?}\ndisk_cost {:?}\nmembers {}\n",
            c.net.describe(),
            c.disk.describe(),
            c.prio_policy(),
            c.disk_cost(),
            self.members()
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        for (i, name) in ["net", "disk"].iter().enumerate() {
            let st = &sh.stats[i];
            s += &format!(
                "{name}_bytes {}\n{name}_grants {}\n{name}_waits {}\n{name}_wait_s {:.3}\n",
                st.bytes.load(Ordering::Relaxed),
                st.calls.load(Ordering::Relaxed),
                st.waits.load(Ordering::Relaxed),
                st.wait_ns.load(Ordering::Relaxed) as f64 / 1e9
            );
        }
        s
    }

    /// The shared contents.
    pub fn shared(&self) -> &Shared {
        self.shm.get::<Shared>(0)
    }

    /// The segment's fd (to pass to children).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// A copy of the segment's fd at `at_least` or above, inherited across `exec` (what
    /// a shaped program's processes find in `STREAMLINE_SHAPE_FD`).
    pub fn inheritable_fd(&self, at_least: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: F_DUPFD of our own descriptor; the result is new and owned by the caller.
        let d = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_DUPFD, at_least) };
        if d < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: d is fresh and ours.
        Ok(unsafe { OwnedFd::from_raw_fd(d) })
    }

    /// The group file, if this is a group.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    fn add_member(&self, group: &str, pid: u32) -> Result<(), SegmentError> {
        let m = &self.shared().members;
        for slot in m.iter() {
            let p = slot.load(Ordering::Acquire);
            if p != 0 && !alive(p) {
                let _ = slot.compare_exchange(p, 0, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        for slot in m.iter() {
            if slot
                .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(());
            }
        }
        Err(SegmentError::Full(group.into()))
    }

    /// Live members (launcher pids) of the group.
    pub fn members(&self) -> Vec<u32> {
        self.shared()
            .members
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&p| p != 0 && alive(p))
            .collect()
    }

    /// Launcher `pid` leaves; the last live member unlinks the group file.
    pub fn leave(&self, pid: u32) {
        for slot in self.shared().members.iter() {
            let _ = slot.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        }
        if let Some(path) = &self.path {
            if lock(&self.file, true).is_ok() {
                if self.members().is_empty() {
                    let _ = std::fs::remove_file(path);
                }
                let _ = lock(&self.file, false);
            }
        }
    }
}

fn lock(f: &File, on: bool) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own; released by the kernel if we die.
    let r = unsafe {
        libc::flock(
            f.as_raw_fd(),
            if on { libc::LOCK_EX } else { libc::LOCK_UN },
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Kind, Limit};

    /// Tests that make groups take turns: a listing sweeps groups of dead members, which
    /// some of them make on purpose.
    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static L: std::sync::Mutex<()> = std::sync::Mutex::new(());
        L.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cfg(rate: &str) -> Config {
        Config {
            net: Limit::parse("net", rate, Kind::Token, None).unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn group_life() {
        let _turn = one_at_a_time();
        let name = format!("unit-{}", std::process::id());
        let path = Segment::group_path(&name).unwrap();
        let a = Segment::join_group(&name, Some(cfg("1M")), std::process::id()).unwrap();
        assert!(path.exists());
        // a second member with no policy takes the group's; one with another is refused
        let b = Segment::join_group(&name, None, 1).unwrap();
        assert_eq!(b.shared().config(), a.shared().config());
        let e = Segment::join_group(&name, Some(cfg("2M")), std::process::id())
            .err()
            .unwrap();
        assert!(e.to_string().contains("already runs with"), "{e}");
        // pid 1 is alive: leaving as us keeps the file for it
        a.leave(std::process::id());
        assert!(path.exists());
        b.leave(1);
        assert!(!path.exists());
        assert!(matches!(
            Segment::join_group("../etc", None, 1),
            Err(SegmentError::BadName(_))
        ));
        assert!(matches!(
            Segment::join_group(&name, None, 1),
            Err(SegmentError::NoPolicy(_))
        ));
        assert!(!path.exists());
    }

    #[test]
    fn a_policy_edited_live_is_seen_whole_by_every_mapping() {
        let _turn = one_at_a_time();
        let name = format!("unit-edit-{}", std::process::id());
        let a = Segment::join_group(&name, Some(cfg("1M")), std::process::id()).unwrap();
        let b = Segment::open_group(&name).unwrap();
        assert!(Segment::groups().contains(&name));
        let edited = a.shared().config().with_edits("net=7M disk=2M").unwrap();
        // a reader hammering the policy while it is rewritten sees one of the two, whole
        std::thread::scope(|s| {
            let r = s.spawn(|| {
                for _ in 0..200_000 {
                    let c = b.shared().config();
                    assert!(c == cfg("1M") || c == edited, "torn policy {c:?}");
                }
            });
            for i in 0..2000 {
                a.edit(if i % 2 == 0 { edited } else { cfg("1M") }).unwrap();
            }
            r.join().unwrap();
        });
        a.edit(edited).unwrap();
        assert_eq!(b.shared().config().net.rate, 7_000_000);
        assert!(b.report().contains("net 7000.0KB/s"), "{}", b.report());
        // SAFETY: no arguments.
        assert_eq!(
            b.owner(),
            Some(unsafe { libc::geteuid() }),
            "the group file is its founder's"
        );
        drop(b);
        a.leave(std::process::id());
    }

    #[test]
    fn a_group_whose_members_all_died_is_swept_or_founded_anew() {
        let _turn = one_at_a_time();
        let name = format!("unit-alldead-{}", std::process::id());
        let path = Segment::group_path(&name).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        // a member that died without leaving: a new member with another policy founds it anew
        drop(Segment::join_group(&name, Some(cfg("1M")), dead).unwrap());
        let b = Segment::join_group(&name, Some(cfg("2M")), dead).unwrap();
        assert_eq!(b.shared().config().net.rate, 2_000_000);
        drop(b);
        // and a listing removes what only dead members hold
        assert!(!Segment::groups().contains(&name));
        assert!(
            !path.exists(),
            "a group of dead members was left in /dev/shm"
        );
    }

    #[test]
    fn dead_members_are_swept() {
        let _turn = one_at_a_time();
        let name = format!("unit-dead-{}", std::process::id());
        let path = Segment::group_path(&name).unwrap();
        // a child that joins and dies without leaving
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let a = Segment::join_group(&name, Some(cfg("1M")), dead).unwrap();
        let b = Segment::join_group(&name, None, std::process::id()).unwrap();
        assert_eq!(b.members(), vec![std::process::id()]);
        b.leave(std::process::id());
        assert!(!path.exists(), "the last live member unlinks the group");
        drop(a);
    }

    #[test]
    fn private_segment_through_an_fd() {
        let a = Segment::create_private(cfg("5M")).unwrap();
        let b = Segment::from_fd(a.fd()).unwrap();
        assert_eq!(b.shared().config().net.rate, 5_000_000);
        a.shared().tat[0][0].store(42, Ordering::Release);
        assert_eq!(b.shared().tat[0][0].load(Ordering::Acquire), 42);
        let null = File::open("/dev/null").unwrap();
        assert!(matches!(
            Segment::from_fd(null.as_raw_fd()),
            Err(SegmentError::NotASegment(_))
        ));
    }
}
