//! Checks on the finished graph: every cycle must be bounded by a loop filter (thesis
//! 3.3.2, "Safe Execution"); every named selector (`|http`) names a class a filter
//! upstream publishes, and is resolved to its number.

use crate::diag::{DiagKind, Diagnostic};
use crate::graph::{Graph, NodeId, NodeKind, Selector};
use crate::resolve::Resolver;

/// Strongly connected components (Tarjan's algorithm without recursion), each sorted.
pub(crate) fn sccs(g: &Graph) -> Vec<Vec<NodeId>> {
    let n = g.nodes.len();
    let mut adj = vec![Vec::new(); n];
    for e in &g.edges {
        adj[e.from].push(e.to);
    }
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut next = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, next child position)
        let mut work = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if let Some(&w) = adj[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    loop {
                        let w = stack.pop().unwrap();
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    comp.sort_unstable();
                    out.push(comp);
                }
            }
        }
    }
    out
}

fn describe(g: &Graph, n: NodeId) -> String {
    let node = &g.nodes[n];
    let base = match &node.kind {
        NodeKind::Filter { filter, .. } => filter.clone(),
        NodeKind::Unix { argv, .. } => argv[0].clone(),
        NodeKind::Join { .. } => "join".to_string(),
        NodeKind::Split { .. } => "split".to_string(),
    };
    match &node.name {
        Some(name) => format!("'{base} name={name}'"),
        None => format!("'{base}'"),
    }
}

pub(crate) fn loops(g: &Graph, resolver: &dyn Resolver, input: &str) -> Result<(), Diagnostic> {
    let mut self_loop = vec![false; g.nodes.len()];
    for e in g.edges.iter().filter(|e| e.from == e.to) {
        self_loop[e.from] = true;
    }
    for comp in sccs(g) {
        let cyclic = comp.len() > 1 || self_loop[comp[0]];
        if !cyclic {
            continue;
        }
        let bounded = comp.iter().any(|&n| match &g.nodes[n].kind {
            NodeKind::Filter { filter, .. } => resolver.bounds_loops(filter),
            _ => false,
        });
        if bounded {
            continue;
        }
        // Point at the arc written last: the one that closes the cycle.
        let closing = g
            .edges
            .iter()
            .filter(|e| comp.binary_search(&e.from).is_ok() && comp.binary_search(&e.to).is_ok())
            .max_by_key(|e| e.span.start)
            .unwrap();
        let mut names: Vec<String> = comp.iter().take(5).map(|&n| describe(g, n)).collect();
        if comp.len() > 5 {
            names.push(format!("{} more", comp.len() - 5));
        }
        return Err(Diagnostic::new(
            DiagKind::UnboundedLoop,
            format!("unbounded loop: the cycle through {} has no 'for' filter", names.join(", ")),
            closing.span,
            input,
        )
        .help("bound the loop with a counting filter, e.g. 'gen | for name=L 10 | body | for name=L |! after'"));
    }
    Ok(())
}

/// Resolve every `|name` selector to the class number the nearest filter upstream of the
/// arc publishes under that name (the class a block carries is set by the last filter that
/// classified it, so the nearest publisher wins). A name no upstream filter publishes is
/// an error at the selector, listing the names upstream does publish. Filters whose names
/// are unknown to the resolver (Unix processes, filters it does not describe) make an
/// unpublished name unresolvable but not wrong: the selector then stays a name and
/// matches nothing, as before.
pub(crate) fn named_classes(
    mut g: Graph,
    resolver: &dyn Resolver,
    input: &str,
) -> Result<Graph, Diagnostic> {
    fn names_in(sel: &Selector, out: &mut Vec<String>) {
        match sel {
            Selector::Named(n) => out.push(n.clone()),
            Selector::Not(s) => names_in(s, out),
            _ => {}
        }
    }
    fn replace(sel: &mut Selector, name: &str, class: u16) {
        match sel {
            Selector::Named(n) if n == name => *sel = Selector::Class(class),
            Selector::Not(s) => replace(s, name, class),
            _ => {}
        }
    }
    let mut preds = vec![Vec::new(); g.nodes.len()];
    for e in &g.edges {
        preds[e.to].push(e.from);
    }
    for ei in 0..g.edges.len() {
        let mut wanted = Vec::new();
        names_in(&g.edges[ei].sel, &mut wanted);
        if wanted.is_empty() {
            continue;
        }
        // Upstream filters, nearest first (breadth-first from the arc's source).
        let mut order = vec![g.edges[ei].from];
        let mut seen = vec![false; g.nodes.len()];
        seen[g.edges[ei].from] = true;
        let mut i = 0;
        while i < order.len() {
            for &p in &preds[order[i]] {
                if !seen[p] {
                    seen[p] = true;
                    order.push(p);
                }
            }
            i += 1;
        }
        let mut published: Vec<(String, u16)> = Vec::new();
        let mut unknown = false;
        for &n in &order {
            match &g.nodes[n].kind {
                NodeKind::Filter { filter, .. } => match resolver.class_names(filter) {
                    Some(v) => {
                        for (name, c) in v {
                            if !published.iter().any(|p| p.0 == name) {
                                published.push((name, c));
                            }
                        }
                    }
                    None => unknown = true,
                },
                NodeKind::Unix { .. } => unknown = true,
                NodeKind::Join { .. } | NodeKind::Split { .. } => {}
            }
        }
        for name in wanted {
            match published.iter().find(|p| p.0 == name) {
                Some(&(_, c)) => replace(&mut g.edges[ei].sel, &name, c),
                None if unknown => {}
                None => {
                    let list = if published.is_empty() {
                        "no filter upstream publishes class names".to_string()
                    } else {
                        let v: Vec<String> = published
                            .iter()
                            .map(|(n, c)| format!("{n} ({c})"))
                            .collect();
                        format!("upstream publishes: {}", v.join(", "))
                    };
                    return Err(Diagnostic::new(
                        DiagKind::UnknownClass,
                        format!("no filter upstream of this arc publishes a class named '{name}'"),
                        g.edges[ei].span,
                        input,
                    )
                    .help(list));
                }
            }
        }
    }
    Ok(g)
}
