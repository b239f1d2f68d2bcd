//! The namespace: what a path below the mount means now ([`Entry`]), its attributes and
//! the text its file says.

use super::*;

impl PipesFs {
    /// What `path` means now, if anything.
    pub(super) fn resolve(&self, path: &[String]) -> Option<Entry> {
        let Some((first, rest)) = path.split_first() else {
            return Some(Entry::Root);
        };
        if rest.is_empty() && first == ".available" {
            return Some(Entry::Available);
        }
        if first == SHAPE_DIR {
            return match rest {
                [] => Some(Entry::Shaping),
                [g] if shape::Segment::groups().contains(g) => Some(Entry::ShapeGroup(g.clone())),
                _ => None,
            };
        }
        let run: u64 = first.parse().ok()?;
        let r = self.d.run(run)?;
        let Some((second, rest)) = rest.split_first() else {
            return Some(Entry::Run(run));
        };
        if rest.is_empty() {
            let f = match second.as_str() {
                ".pipeline" => Some(RunFile::Pipeline),
                ".placement" => Some(RunFile::Placement),
                ".stats" => Some(RunFile::Stats),
                ".ctl" => Some(RunFile::Ctl),
                _ => None,
            };
            if let Some(f) = f {
                return Some(Entry::RunFile(run, f));
            }
        }
        let tree = Tree::of(&r, &self.kept.homes);
        // Walk the filters' directories.
        if tree.home.get(second.as_str()) != Some(&None) {
            return None;
        }
        let mut cur = second.clone();
        let mut it = rest.iter().peekable();
        while let Some(c) = it.next() {
            let last = it.peek().is_none();
            match c.as_str() {
                "all" | "all.pcap" if last => {
                    return Some(Entry::Stream(
                        run,
                        cur,
                        None,
                        if c == "all" {
                            Format::Raw
                        } else {
                            Format::Pcap
                        },
                    ))
                }
                ".stats" if last => return Some(Entry::NodeFile(run, cur, NodeFile::Stats)),
                ".options" if last => return Some(Entry::NodeFile(run, cur, NodeFile::Options)),
                ".filter" if last => return Some(Entry::NodeFile(run, cur, NodeFile::Filter)),
                _ => {}
            }
            if let Ok(class) = c.parse::<u16>() {
                if !self.classes(&r, &cur).contains(&class) {
                    return None;
                }
                return match it.next().map(String::as_str) {
                    None => Some(Entry::Class(run, cur, class)),
                    Some(f @ ("all" | "all.pcap")) if it.peek().is_none() => Some(Entry::Stream(
                        run,
                        cur,
                        Some(class),
                        if f == "all" {
                            Format::Raw
                        } else {
                            Format::Pcap
                        },
                    )),
                    _ => None,
                };
            }
            let (_, home_here) = tree
                .children(Some(&cur))
                .into_iter()
                .find(|(l, _)| l == c)?;
            if !home_here {
                return last.then(|| Entry::Link(run, c.clone()));
            }
            cur = c.clone();
        }
        Some(Entry::Node(run, cur))
    }

    pub(super) fn classes(&self, r: &Run, label: &str) -> Vec<u16> {
        r.counters
            .lock()
            .expect("not poisoned")
            .1
            .iter()
            .find(|n| n.label == label)
            .map(|n| n.classes.clone())
            .unwrap_or_default()
    }

    pub(super) fn attr(&self, ino: u64, e: &Entry) -> FileAttr {
        let (uid, gid, mode) = match e {
            Entry::Root | Entry::Available | Entry::Shaping => (0, 0, 0),
            Entry::ShapeGroup(g) => {
                // the group file's owner (its founder) may change it
                let uid = shape::Segment::group_path(g)
                    .ok()
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
                (uid, 0, 0)
            }
            Entry::Run(r)
            | Entry::RunFile(r, _)
            | Entry::Node(r, _)
            | Entry::NodeFile(r, ..)
            | Entry::Class(r, ..)
            | Entry::Stream(r, ..)
            | Entry::Link(r, _) => {
                let (o, m) = self.d.run(*r).map_or(
                    (
                        crate::policy::Cred {
                            uid: 0,
                            gid: 0,
                            groups: vec![],
                        },
                        0o600,
                    ),
                    |r| (r.owner.clone(), r.graph.lock().expect("not poisoned").1),
                );
                (o.uid, o.gid, m)
            }
        };
        let (kind, perm) = match e {
            Entry::Root => (FileType::Directory, 0o755),
            Entry::Available => (FileType::RegularFile, 0o444),
            Entry::Shaping => (FileType::Directory, 0o755),
            Entry::ShapeGroup(_) => (FileType::RegularFile, 0o644),
            Entry::Run(_) | Entry::Node(..) | Entry::Class(..) => (FileType::Directory, 0o755),
            Entry::RunFile(_, RunFile::Ctl) => (FileType::RegularFile, 0o200),
            // What the run is (its text, each filter's, with secrets redacted) is as
            // readable as what it computes: the run's stream mode.
            Entry::RunFile(_, RunFile::Pipeline) | Entry::NodeFile(_, _, NodeFile::Filter) => {
                (FileType::RegularFile, (mode & 0o444) as u16)
            }
            Entry::NodeFile(_, _, NodeFile::Options) => {
                (FileType::RegularFile, (mode & 0o444 | 0o200) as u16)
            }
            Entry::RunFile(..) => (FileType::RegularFile, 0o444),
            Entry::NodeFile(..) => (FileType::RegularFile, 0o444),
            Entry::Stream(..) => (FileType::RegularFile, (mode & 0o444) as u16),
            Entry::Link(..) => (FileType::Symlink, 0o777),
        };
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: self.mounted,
            mtime: self.mounted,
            ctime: self.mounted,
            crtime: self.mounted,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// A child of a directory path, and what it means.
    pub(super) fn child(&self, parent: INodeNo, name: &OsStr) -> Option<(Vec<String>, Entry)> {
        let mut p = self.path_of(parent)?;
        p.push(name.to_str()?.to_string());
        let e = self.resolve(&p)?;
        Some((p, e))
    }

    /// The text of a read-only file.
    pub(super) fn text(&self, e: &Entry) -> Option<String> {
        Some(match e {
            Entry::Available => catalog::REGISTRY
                .iter()
                .map(|s| format!("{}\t{}\n", s.name, s.synopsis))
                .collect(),
            Entry::ShapeGroup(g) => format!(
                "group {g}\n{}",
                shape::Segment::open_group(g).ok()?.report()
            ),
            Entry::RunFile(run, f) => {
                let r = self.d.run(*run)?;
                match f {
                    RunFile::Pipeline => format!("{}\n", r.pipeline_now()),
                    RunFile::Placement => {
                        format!("{}\n", r.placement.lock().expect("not poisoned"))
                    }
                    RunFile::Stats => {
                        let i = r.info();
                        format!(
                            "run {}\nuser {}\nstate {}\nuptime_s {:.3}\nrate_blocks_per_s {:.1}\n",
                            i.run, i.user, i.state, i.uptime_s, i.rate
                        )
                    }
                    RunFile::Ctl => String::new(),
                }
            }
            Entry::NodeFile(run, label, f) => {
                let r = self.d.run(*run)?;
                let tree = Tree::of(&r, &self.kept.homes);
                let g = tree.node(label)?;
                match f {
                    NodeFile::Options => g
                        .options
                        .iter()
                        .map(|(k, v)| format!("{k}={v}\n"))
                        .collect(),
                    NodeFile::Filter => format!("{}\n", g.filter),
                    NodeFile::Stats => {
                        let (_, nodes, _) = r.counters.lock().expect("not poisoned").clone();
                        let c = nodes
                            .iter()
                            .find(|n| n.label == *label)
                            .cloned()
                            .unwrap_or_default();
                        let rate = r
                            .rates
                            .lock()
                            .expect("not poisoned")
                            .iter()
                            .find(|(l, _)| l == label)
                            .map_or(0.0, |(_, x)| *x);
                        let key = (*run, label.clone());
                        let (readers, ring, tag_slots) =
                            self.taps.lock().expect("not poisoned").get(&key).map_or(
                                (0, 0, 0),
                                |s| {
                                    (
                                        s.readers,
                                        s.data.stats().active_size,
                                        s.tags.stats().active_size / beltway::Tag::SIZE as u64,
                                    )
                                },
                            );
                        let rs = self
                            .kept
                            .reader_stats
                            .lock()
                            .expect("not poisoned")
                            .get(&key)
                            .cloned()
                            .unwrap_or_default();
                        let backlog = rs.backlog.load(Ordering::Relaxed);
                        let fill = if tag_slots == 0 {
                            0.0
                        } else {
                            (backlog as f64 / tag_slots as f64 * 100.0).min(100.0)
                        };
                        format!(
                            "label {label}\nfilter {}\nplacement {}\nblocks_in {}\nbytes_in {}\nblocks_out {}\nbytes_out {}\ndrops {}\nrate_blocks_per_s {rate:.1}\nclasses {}\nreaders {readers}\nreaders_delivered {}\nreaders_lost {}\ntap_ring_bytes {ring}\ntap_ring_fill_pct {fill:.1}\n",
                            g.filter,
                            g.space,
                            c.blocks_in,
                            c.bytes_in,
                            c.blocks_out,
                            c.bytes_out,
                            c.drops,
                            c.classes.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","),
                            rs.delivered.load(Ordering::Relaxed),
                            rs.lost.load(Ordering::Relaxed),
                        )
                    }
                }
            }
            _ => return None,
        })
    }
}
