//! A run's graph as directories: each filter's home (the directory that holds it), kept
//! stable while its inputs still feed it.

use super::*;

/// A run's graph with a home directory for every filter (breadth first from the sources).
pub(super) struct Tree {
    pub(super) nodes: Vec<GraphNode>,
    /// label -> label of the node whose directory holds it (None: a source, at the run's top).
    pub(super) home: HashMap<String, Option<String>>,
}

impl Tree {
    /// The tree of `run`'s graph. `homes` remembers where each filter's directory was: a
    /// filter stays under the same input while that input still feeds it (so `ln -s`,
    /// which adds an input, never moves the directory), and moves only when `mv` takes it
    /// away.
    pub(super) fn of(run: &Run, homes: &Mutex<HashMap<(u64, String), String>>) -> Tree {
        let mut t = Tree::bfs(run);
        let mut remembered = homes.lock().expect("not poisoned");
        for n in &t.nodes {
            let key = (run.id, n.label.clone());
            if let (Some(prev), Some(Some(_))) = (remembered.get(&key), t.home.get(&n.label)) {
                if n.inputs.contains(prev) && t.home.contains_key(prev) {
                    let prev = prev.clone();
                    t.home.insert(n.label.clone(), Some(prev));
                }
            }
        }
        // A remembered home must not make a cycle of directories: fall back to breadth
        // first where it would.
        let bfs = Tree::bfs(run).home;
        for n in t.nodes.iter().map(|n| n.label.clone()).collect::<Vec<_>>() {
            let mut cur = n.clone();
            for _ in 0..=t.nodes.len() {
                match t.home.get(&cur) {
                    Some(Some(up)) => cur = up.clone(),
                    _ => break,
                }
            }
            if matches!(t.home.get(&cur), Some(Some(_))) {
                t.home.insert(n.clone(), bfs.get(&n).cloned().flatten());
            }
        }
        remembered.retain(|(r, l), _| *r != run.id || t.home.contains_key(l));
        for (l, h) in &t.home {
            if let Some(h) = h {
                remembered.insert((run.id, l.clone()), h.clone());
            }
        }
        t
    }

    pub(super) fn bfs(run: &Run) -> Tree {
        let nodes = run.graph.lock().expect("not poisoned").0.clone();
        let mut home: HashMap<String, Option<String>> = HashMap::new();
        let mut queue: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        for n in nodes.iter().filter(|n| n.inputs.is_empty() || n.source) {
            home.insert(n.label.clone(), None);
            queue.push_back(n.label.clone());
        }
        while let Some(l) = queue.pop_front() {
            let Some(n) = nodes.iter().find(|n| n.label == l) else {
                continue;
            };
            for o in &n.outputs {
                if !home.contains_key(o) {
                    home.insert(o.clone(), Some(l.clone()));
                    queue.push_back(o.clone());
                }
            }
        }
        Tree { nodes, home }
    }

    pub(super) fn node(&self, label: &str) -> Option<&GraphNode> {
        self.nodes.iter().find(|n| n.label == label)
    }

    /// The labels from a source down to `label` (its directory's path in the run).
    pub(super) fn path(&self, label: &str) -> Vec<String> {
        let mut p = vec![label.to_string()];
        let mut cur = label.to_string();
        while let Some(Some(up)) = self.home.get(&cur) {
            if p.len() > 256 || p.contains(up) {
                break;
            }
            p.push(up.clone());
            cur = up.clone();
        }
        p.reverse();
        p
    }

    /// The directories and links in `label`'s directory (or the run's top for `None`).
    pub(super) fn children(&self, label: Option<&str>) -> Vec<(String, bool)> {
        match label {
            None => self
                .home
                .iter()
                .filter(|(_, h)| h.is_none())
                .map(|(l, _)| (l.clone(), true))
                .collect(),
            Some(l) => self.node(l).map_or_else(Vec::new, |n| {
                n.outputs
                    .iter()
                    .map(|o| {
                        (
                            o.clone(),
                            self.home.get(o).and_then(|h| h.as_deref()) == Some(l),
                        )
                    })
                    .collect()
            }),
        }
    }
}
