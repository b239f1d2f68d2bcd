//! The daemon's own view of a run's graph: the graph the policy checked when the run was
//! opened, changed by every edit the run's worker applied, so that an edit is checked
//! against the graph as it would be after it (`Policy::check`, the check `open` makes)
//! before the worker applies it.
//!
//! Owns: the view (nodes with the labels the runtime gives them, arcs, removed nodes),
//! the graph surgery of each edit kind on it (as `dataplane::edit` does it on a running
//! space), and its text. Does not own: the policy's rules (`policy`), applying the edit
//! (the worker).
//!
//! The worker runs as the client, so nothing it reports (its `graph` message, the labels
//! in its answers) is used here: the view is derived from what the daemon parsed and
//! checked itself. Labels are the runtime's (`count`, `count#2`, `count:name`, the k-th
//! node of a filter in build order); a label's `@SPACE` (a run of several spaces) is
//! looked through. Where the runtime's graph may differ from the view (a run of several
//! spaces labels each space's nodes on its own; rewrites add copies of nodes or take a
//! shared prefix away), each edit carries the filter text of every node it names as the
//! view has it, and the worker refuses the edit if its node of that label is another
//! filter. A removed node stays in the view as a pass-through (`__removed`), as it stays
//! in the running space, so a removal inside a template's chain breaks the chain.

use lang::edit::split_space;
use lang::edit::{Edit, Where};
use lang::label::base_name;
use lang::label::{filter_text, label_of};
use lang::{Edge, Graph, Node, NodeKind, Selector};

/// The filter a removed node becomes in the view (no filter has this name).
const REMOVED: &str = "__removed";

/// A run's graph as the daemon knows it.
#[derive(Debug, Clone)]
pub struct View {
    g: Graph,
    /// Each node's label, as the runtime gives it.
    labels: Vec<String>,
    removed: Vec<bool>,
    /// An edit changed it since the run was opened.
    pub edited: bool,
    /// An edit may have been applied without the view following it (its answer never
    /// came, or its node could not be found in the view): the view is no longer the
    /// run's graph.
    pub lost: bool,
}

/// Why an edit could not be followed in the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown(pub String);

impl View {
    /// The view of a run opened with graph `g` (the parsed pipeline the policy checked).
    pub fn new(g: Graph) -> View {
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let labels = g
            .nodes
            .iter()
            .map(|n| {
                let base = base_name(n);
                let k = seen.entry(base.clone()).or_insert(0);
                *k += 1;
                label_of(&base, n.name.as_deref(), *k)
            })
            .collect();
        let removed = vec![false; g.nodes.len()];
        View {
            g,
            labels,
            removed,
            edited: false,
            lost: false,
        }
    }

    /// The graph (removed nodes as `__removed` pass-throughs).
    pub fn graph(&self) -> &Graph {
        &self.g
    }

    pub fn label(&self, i: usize) -> &str {
        &self.labels[i]
    }

    /// The live node labelled `label` (its `@SPACE` looked through).
    pub fn resolve(&self, label: &str) -> Option<usize> {
        let l = split_space(label).0;
        (0..self.g.nodes.len()).find(|&i| !self.removed[i] && self.labels[i] == l)
    }

    /// Another live node with the same filter text as node `i`, both unnamed (a numbered
    /// label of the runtime's, `count#2`, could name it in place of `i` when runtime and
    /// view number differently; a name is the same everywhere).
    pub fn twin(&self, i: usize) -> Option<usize> {
        let t = self.text(i);
        let unnamed = |j: usize| self.g.nodes[j].name.is_none();
        if !unnamed(i) {
            return None;
        }
        (0..self.g.nodes.len()).find(|&j| {
            j != i
                && unnamed(j)
                && !self.removed[j]
                && base_name(&self.g.nodes[j]) == base_name(&self.g.nodes[i])
                && self.text(j) == t
        })
    }

    /// Node `i`'s filter text as the runtime's graph shows it (`GraphNode::filter`).
    pub fn text(&self, i: usize) -> String {
        filter_text(&self.g.nodes[i]).0
    }

    /// Whether some live node's filter needs a privilege.
    pub fn privileged(&self, privileged: &dyn Fn(&str) -> Option<&'static str>) -> bool {
        self.g.nodes.iter().any(|n| match &n.kind {
            NodeKind::Filter { filter, .. } => privileged(filter).is_some(),
            _ => false,
        })
    }

    /// The view after `e`, and the nodes whose filter it makes afresh (insert, replace,
    /// branch: the new one; set: the node).
    pub fn after(&self, e: &Edit) -> Result<(View, Vec<usize>), Unknown> {
        let mut v = self.clone();
        v.edited = true;
        let at = |l: &str| {
            self.resolve(l).ok_or_else(|| {
                Unknown(format!(
                    "no node labelled '{l}' in run's graph (there are: {})",
                    self.live_labels().join(", ")
                ))
            })
        };
        let made = match e {
            Edit::Set { node, options, .. } => {
                let i = at(node)?;
                if let NodeKind::Filter { options: o, .. } = &mut v.g.nodes[i].kind {
                    for (k, val) in options {
                        match o.iter_mut().find(|(ok, _)| ok == k) {
                            Some(slot) => slot.1 = val.clone(),
                            None => o.push((k.clone(), val.clone())),
                        }
                    }
                }
                vec![i]
            }
            Edit::Insert {
                node,
                at: w,
                filter,
            } => {
                let i = at(node)?;
                let n = v.push(filter);
                match w {
                    Where::After => {
                        for ed in &mut v.g.edges {
                            if ed.from == i {
                                ed.from = n;
                            }
                        }
                        v.arc(i, n);
                    }
                    Where::Before => {
                        for ed in &mut v.g.edges {
                            if ed.to == i {
                                ed.to = n;
                            }
                        }
                        v.arc(n, i);
                    }
                }
                vec![n]
            }
            Edit::Remove { node } => {
                let i = at(node)?;
                v.removed[i] = true;
                v.g.nodes[i].kind = NodeKind::Filter {
                    filter: REMOVED.into(),
                    params: vec![],
                    options: vec![],
                    place: Default::default(),
                };
                vec![]
            }
            Edit::Replace { node, filter } => {
                let i = at(node)?;
                let mut n = filter.clone();
                n.id = i;
                v.g.nodes[i] = n;
                v.labels[i] = String::new();
                v.labels[i] = v.new_label(&v.g.nodes[i], i);
                vec![i]
            }
            Edit::Branch { node, filter } => {
                let i = at(node)?;
                let n = v.push(filter);
                v.arc(i, n);
                vec![n]
            }
            Edit::Connect { from, to } => {
                let (a, b) = (at(from)?, at(to)?);
                v.arc(a, b);
                vec![]
            }
            Edit::Disconnect { from, to } => {
                let (a, b) = (at(from)?, at(to)?);
                v.cut(a, b);
                vec![]
            }
            Edit::Move { node, from, to } => {
                let (x, a, b) = (at(node)?, at(from)?, at(to)?);
                v.cut(a, x);
                v.arc(b, x);
                vec![]
            }
        };
        Ok((v, made))
    }

    fn live_labels(&self) -> Vec<String> {
        (0..self.labels.len())
            .filter(|&i| !self.removed[i])
            .map(|i| self.labels[i].clone())
            .collect()
    }

    /// Append `n` as a new node (labelled as the runtime labels an added node).
    fn push(&mut self, n: &Node) -> usize {
        let id = self.g.nodes.len();
        let mut n = n.clone();
        n.id = id;
        self.g.nodes.push(n);
        self.removed.push(false);
        self.labels.push(String::new());
        let l = self.new_label(&self.g.nodes[id], id);
        self.labels[id] = l;
        id
    }

    /// The label the runtime gives a node made by an edit (`dataplane::edit`'s
    /// `new_label`): its name's, or the first `base#k` free, k counting the other nodes
    /// of its filter.
    fn new_label(&self, n: &Node, except: usize) -> String {
        let base = base_name(n);
        if let Some(name) = &n.name {
            return label_of(&base, Some(name), 0);
        }
        let others = || (0..self.g.nodes.len()).filter(move |&j| j != except);
        let taken = |l: &str| others().any(|j| !self.removed[j] && self.labels[j] == l);
        let mut k = others()
            .filter(|&j| base_name(&self.g.nodes[j]) == base || self.was(j, &base))
            .count()
            + 1;
        loop {
            let l = label_of(&base, None, k);
            if !taken(&l) {
                return l;
            }
            k += 1;
        }
    }

    /// Whether removed node `j` was a `base` (the runtime keeps its filter's name).
    fn was(&self, j: usize, base: &str) -> bool {
        self.removed[j] && split_base(&self.labels[j]) == base
    }

    fn arc(&mut self, from: usize, to: usize) {
        self.g.edges.push(Edge {
            from,
            to,
            sel: Selector::Default,
            span: Default::default(),
        });
    }

    /// Take the arc `a -> b` away: the direct one, or the first arc of a way from `a` to
    /// `b` through removed nodes.
    fn cut(&mut self, a: usize, b: usize) {
        if let Some(k) = self.g.edges.iter().position(|e| e.from == a && e.to == b) {
            self.g.edges.remove(k);
            return;
        }
        let reaches = |v: &View, from: usize| {
            let mut stack = vec![from];
            let mut seen = vec![];
            while let Some(x) = stack.pop() {
                if x == b {
                    return true;
                }
                if seen.contains(&x) || !v.removed[x] {
                    continue;
                }
                seen.push(x);
                stack.extend(v.g.edges.iter().filter(|e| e.from == x).map(|e| e.to));
            }
            false
        };
        if let Some(k) = self
            .g
            .edges
            .iter()
            .position(|e| e.from == a && self.removed[e.to] && reaches(self, e.to))
        {
            self.g.edges.remove(k);
        }
    }

    /// The live nodes an arc out of `i` reaches, looking through removed nodes.
    fn outs(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack: Vec<usize> = self
            .g
            .edges
            .iter()
            .filter(|e| e.from == i)
            .map(|e| e.to)
            .rev()
            .collect();
        let mut seen = Vec::new();
        while let Some(x) = stack.pop() {
            if seen.contains(&x) {
                continue;
            }
            seen.push(x);
            if self.removed[x] {
                stack.extend(
                    self.g
                        .edges
                        .iter()
                        .filter(|e| e.from == x)
                        .map(|e| e.to)
                        .rev(),
                );
            } else if !out.contains(&x) {
                out.push(x);
            }
        }
        out
    }

    /// Node `i` as pipeline text: its filter's words and options, and its name.
    fn node_text(&self, i: usize) -> String {
        let n = &self.g.nodes[i];
        let mut t = filter_text(n).0;
        // Where it runs, as written or as an edit set it: `space=`, `placed=`, hints. A
        // Unix command's words are all its own: its options follow '@' (`@space=1`).
        let (place, at) = match &n.kind {
            NodeKind::Filter { place, .. } => (Some(place), ""),
            NodeKind::Unix { place, .. } => (Some(place), "@"),
            _ => (None, ""),
        };
        if let Some(p) = place {
            if let Some(sp) = &p.space {
                t += &format!(" {at}space={sp}");
            }
            if let Some(side) = &p.side {
                t += &format!(" placed={side}");
            }
        }
        if let Some(name) = &n.name {
            t += &format!(" {at}name={name}");
        }
        if !n.hints.is_empty() {
            let h: Vec<String> = n.hints.iter().map(|h| h.to_string()).collect();
            t += &format!(" @{}", h.join(","));
        }
        t
    }

    /// The pipe from node `i` to node `o` as text: `|` and the arc's selector (`|80`,
    /// `|!tcp`), if a direct arc has one.
    fn pipe(&self, i: usize, o: usize) -> String {
        match self.g.edges.iter().find(|e| e.from == i && e.to == o) {
            Some(e) if e.sel != Selector::Default => format!("|{}", e.sel),
            _ => "|".to_string(),
        }
    }

    /// The graph as pipeline text: a chain as `a | b | c`; a graph with forks or joins
    /// as its chains from each source (first arcs first), then each other arc as `; FROM
    /// | TO...` naming FROM by its label.
    pub fn text_now(&self) -> String {
        let live: Vec<usize> = (0..self.g.nodes.len())
            .filter(|&i| !self.removed[i])
            .collect();
        let mut ins = vec![0usize; self.g.nodes.len()];
        for &i in &live {
            for o in self.outs(i) {
                ins[o] += 1;
            }
        }
        let mut shown = vec![false; self.g.nodes.len()];
        let mut used: Vec<(usize, usize)> = Vec::new();
        let mut parts: Vec<String> = Vec::new();
        let walk = |start: usize,
                    head: Option<(String, usize)>,
                    shown: &mut Vec<bool>,
                    used: &mut Vec<(usize, usize)>| {
            let mut words = Vec::new();
            if let Some((h, from)) = head {
                words.push(h);
                words.push(self.pipe(from, start));
            }
            let mut at = start;
            loop {
                words.push(self.node_text(at));
                shown[at] = true;
                let next = self
                    .outs(at)
                    .into_iter()
                    .find(|&o| !shown[o] && !used.contains(&(at, o)));
                match next {
                    Some(o) => {
                        used.push((at, o));
                        words.push(self.pipe(at, o));
                        at = o;
                    }
                    None => break,
                }
            }
            words.join(" ")
        };
        for &s in live.iter().filter(|&&i| ins[i] == 0) {
            parts.push(walk(s, None, &mut shown, &mut used));
        }
        // The arcs not yet shown: into nodes not shown yet (a chain on), or between shown
        // ones (label to label).
        loop {
            let mut more = false;
            for &i in &live {
                if !shown[i] {
                    continue;
                }
                for o in self.outs(i) {
                    if used.contains(&(i, o)) {
                        continue;
                    }
                    used.push((i, o));
                    more = true;
                    if shown[o] {
                        parts.push(format!(
                            "{} {} {}",
                            self.labels[i],
                            self.pipe(i, o),
                            self.labels[o]
                        ));
                    } else {
                        parts.push(walk(
                            o,
                            Some((self.labels[i].clone(), i)),
                            &mut shown,
                            &mut used,
                        ));
                    }
                }
            }
            if !more {
                break;
            }
        }
        parts.join("; ")
    }
}

/// The filter a label names (`count#2`, `count:c` -> `count`).
fn split_base(label: &str) -> &str {
    let end = label.find([':', '#']).unwrap_or(label.len());
    &label[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(t: &str) -> View {
        View::new(lang::parse(t, &catalog::Natives).unwrap())
    }

    fn edit(t: &str) -> Edit {
        Edit::parse(t, &catalog::Natives).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn labels_are_the_runtimes() {
        let v = view("gen | count | count name=tail | sample every=2 | count");
        let l: Vec<&str> = (0..5).map(|i| v.label(i)).collect();
        assert_eq!(l, ["gen", "count", "count:tail", "sample", "count#3"]);
        assert_eq!(v.resolve("count#3@1"), Some(4));
        let (v, made) = v.after(&edit("branch sample count")).unwrap();
        assert_eq!(v.label(made[0]), "count#4");
        let (v, _) = v.after(&edit("remove count#4")).unwrap();
        let (v, made) = v.after(&edit("insert after gen count")).unwrap();
        // The removed count#4 still counts, as the runtime's label does.
        assert_eq!(v.label(made[0]), "count#5");
    }

    /// What `ps` shows after an edit is the pipeline as it runs: placements (`space=`,
    /// `placed=`), hints and selectors kept, the edit applied.
    #[test]
    fn the_text_after_an_edit_keeps_placements_hints_and_selectors() {
        let v = view(
            "gen | tcp space=1 | deflate space=2,3 @background | dport |80 count space=p4 name=web",
        );
        let (v, _) = v.after(&edit("insert after gen sample every=2")).unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=2 | tcp space=1 | deflate space=2,3 @background | dport |80 count space=p4 name=web"
        );
        let (v, _) = v.after(&edit("branch dport count")).unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=2 | tcp space=1 | deflate space=2,3 @background | dport |80 count space=p4 name=web; dport | count"
        );
        // What it shows parses back to the same graph text.
        let again = View::new(
            lang::parse(
                &v.text_now().replace("; dport | count", ""),
                &catalog::Natives,
            )
            .unwrap(),
        );
        assert!(
            again
                .text_now()
                .starts_with("gen | sample every=2 | tcp space=1"),
            "{}",
            again.text_now()
        );
    }

    /// A Unix command's words are all its own: its placement and name are shown after
    /// `@` (`space=1` after it would read back as its argument), and the text parses back
    /// to the same graph.
    #[test]
    fn a_unix_commands_options_are_shown_after_at() {
        let r = lang::OrCommand(catalog::Natives);
        let text = "gen | gzip -c 'name=x' @space=1 @name=z | count";
        let v = View::new(lang::parse(text, &r).unwrap());
        let shown = v.text_now();
        assert_eq!(shown, "gen | gzip -c \"name=x\" @space=1 @name=z | count");
        let again = View::new(lang::parse(&shown, &r).unwrap());
        assert_eq!(again.graph().canonical(), v.graph().canonical());
    }

    #[test]
    fn each_edit_kind_changes_the_view_as_the_runtime_does() {
        let v = view("gen | count | count name=tail");
        let (v, _) = v.after(&edit("insert after gen sample every=2")).unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=2 | count | count name=tail"
        );
        let (v, _) = v.after(&edit("set sample every=3")).unwrap();
        let (v, _) = v
            .after(&edit("insert before count:tail count name=pre"))
            .unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=3 | count | count name=pre | count name=tail"
        );
        let (v, _) = v.after(&edit("remove count:pre")).unwrap();
        let (v, _) = v.after(&edit("replace count bytecount")).unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=3 | bytecount | count name=tail"
        );
        let (v, _) = v.after(&edit("branch sample count")).unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=3 | bytecount | count name=tail; sample | count"
        );
        let (v, _) = v.after(&edit("move count#3 sample gen")).unwrap();
        assert_eq!(
            v.text_now(),
            "gen | sample every=3 | bytecount | count name=tail; gen | count"
        );
        let (v, _) = v.after(&edit("disconnect gen count#3")).unwrap();
        assert!(!v.text_now().contains("gen | count"), "{}", v.text_now());
        assert!(v.after(&edit("remove nothing")).is_err());
    }

    /// The class the daemon's check covers: with the template `rx | bpf` granted, every
    /// edit kind at every place of the chain leaves a graph `Policy::check` refuses, and
    /// edits after the template's end leave one it accepts.
    #[test]
    fn after_views_of_widening_edits_fail_the_policy_check() {
        let policy = crate::policy::Policy::parse(
            "[[grant]]\nusers = ['65534']\ntemplate = 'rx dev=lo | bpf \"udp port 53\"'\n",
            "t",
            &catalog::Natives,
        )
        .unwrap();
        let who = crate::policy::Cred {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let privileged = |f: &str| catalog::find(f).and_then(|s| s.privilege);
        let v = view(r#"rx dev=lo | bpf "udp port 53" | count | count name=tail"#);
        assert!(policy.check(v.graph(), &who, &privileged).is_ok());
        for e in [
            r#"replace bpf bpf "udp""#,
            "set bpf expr=udp",
            "remove bpf",
            "insert after rx count name=x",
            "insert before bpf count name=x",
            "branch rx count name=x",
            "connect rx count:tail",
            "move count:tail count rx",
            "move count bpf rx",
            "set rx dev=eth0",
            "replace rx rx dev=eth0",
        ] {
            let (after, _) = v.after(&edit(e)).unwrap();
            let d = policy.check(after.graph(), &who, &privileged).expect_err(e);
            assert_eq!(after.label(d.id), "rx", "{e}");
        }
        for e in [
            "insert after count sample every=2",
            "branch count count name=x",
            "remove count:tail",
            "connect count count:tail",
        ] {
            let (after, _) = v.after(&edit(e)).unwrap();
            assert!(
                policy.check(after.graph(), &who, &privileged).is_ok(),
                "{e}"
            );
        }
    }
}
