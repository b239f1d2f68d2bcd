//! The inode table and what PipesFS keeps per path and per run, given back when the run
//! is gone.

use super::*;

/// The inode table: a number for each path (components below the mount) the kernel was
/// told of, and the kernel's lookup count of each (its `nlookup`: every successful
/// lookup, mkdir or symlink reply adds one, `forget` takes away what it says). A number is
/// dropped only when the kernel holds none of it (count 0) and its run is gone: the
/// kernel may still ask about a number it holds, and a path of a live run may be looked
/// up again. Numbers handed out by `readdir` (not a reference: plain readdir, not
/// readdirplus) start at 0. Numbers are never reused: a number the kernel still holds
/// for a gone path stays unknown.
pub(super) struct Inodes {
    pub(super) by_path: HashMap<Vec<String>, u64>,
    /// Path and lookup count by number.
    pub(super) by_ino: HashMap<u64, (Vec<String>, u64)>,
    pub(super) next: u64,
}

/// The root's number (never dropped).
pub(super) const ROOT_INO: u64 = 1;

/// The run a path belongs to (its first component, a run's directory), if any.
pub(super) fn run_of(path: &[String]) -> Option<u64> {
    path.first()?.parse().ok()
}

impl Inodes {
    pub(super) fn new() -> Inodes {
        let mut t = Inodes {
            by_path: HashMap::new(),
            by_ino: HashMap::new(),
            next: ROOT_INO + 1,
        };
        t.by_path.insert(Vec::new(), ROOT_INO);
        t.by_ino.insert(ROOT_INO, (Vec::new(), 0));
        t
    }

    /// `path`'s number, made if it has none; the kernel holds no reference by this.
    pub(super) fn number(&mut self, path: &[String]) -> u64 {
        if let Some(i) = self.by_path.get(path) {
            return *i;
        }
        let i = self.next;
        self.next += 1;
        self.by_path.insert(path.to_vec(), i);
        self.by_ino.insert(i, (path.to_vec(), 0));
        i
    }

    /// `path`'s number for an entry reply: one more reference the kernel holds.
    pub(super) fn looked_up(&mut self, path: &[String]) -> u64 {
        let i = self.number(path);
        if let Some((_, n)) = self.by_ino.get_mut(&i) {
            *n += 1;
        }
        i
    }

    pub(super) fn path(&self, ino: u64) -> Option<&Vec<String>> {
        self.by_ino.get(&ino).map(|(p, _)| p)
    }

    /// The kernel forgets `nlookup` references to `ino`; dropped at 0 if its run is gone.
    pub(super) fn forget(&mut self, ino: u64, nlookup: u64, gone: impl Fn(u64) -> bool) {
        let Some((p, n)) = self.by_ino.get_mut(&ino) else {
            return;
        };
        *n = n.saturating_sub(nlookup);
        if *n == 0 && ino != ROOT_INO && run_of(p).is_some_and(gone) {
            self.drop_ino(ino);
        }
    }

    /// Drop every number of a gone run that the kernel holds no reference to.
    pub(super) fn prune(&mut self, gone: impl Fn(u64) -> bool) {
        let dead: Vec<u64> = self
            .by_ino
            .iter()
            .filter(|(i, (p, n))| **i != ROOT_INO && *n == 0 && run_of(p).is_some_and(&gone))
            .map(|(i, _)| *i)
            .collect();
        for i in dead {
            self.drop_ino(i);
        }
    }

    pub(super) fn drop_ino(&mut self, ino: u64) {
        if let Some((p, _)) = self.by_ino.remove(&ino) {
            if self.by_path.get(&p) == Some(&ino) {
                self.by_path.remove(&p);
            }
        }
    }
}

/// What PipesFS keeps per path and per run, given back when the run is gone (the
/// daemon's `on_run_gone`, and again at every listing of the root for what a race left).
pub(super) struct Kept {
    pub(super) inos: Mutex<Inodes>,
    /// Where each filter's directory is (see `Tree::of`).
    pub(super) homes: Mutex<HashMap<(u64, String), String>>,
    /// Reader counters by node, kept after the last reader goes (for `.stats`).
    pub(super) reader_stats: Mutex<HashMap<(u64, String), Arc<ReaderStats>>>,
}

impl Kept {
    pub(super) fn new() -> Kept {
        Kept {
            inos: Mutex::new(Inodes::new()),
            homes: Mutex::new(HashMap::new()),
            reader_stats: Mutex::new(HashMap::new()),
        }
    }

    /// Give back what gone runs left: their filters' homes, their readers' counters (a
    /// reader still open keeps its own), the numbers of their paths the kernel does not
    /// hold.
    pub(super) fn prune(&self, gone: impl Fn(u64) -> bool) {
        self.homes
            .lock()
            .expect("not poisoned")
            .retain(|(r, _), _| !gone(*r));
        self.reader_stats
            .lock()
            .expect("not poisoned")
            .retain(|(r, _), _| !gone(*r));
        self.inos.lock().expect("not poisoned").prune(gone);
    }
}
