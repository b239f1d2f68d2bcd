//! Checks on the finished graph: every cycle must be bounded by a loop filter (thesis
//! 3.3.2, "Safe Execution").

use crate::diag::{DiagKind, Diagnostic};
use crate::graph::{Graph, NodeId, NodeKind};
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
        NodeKind::Unix { argv } => argv[0].clone(),
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
