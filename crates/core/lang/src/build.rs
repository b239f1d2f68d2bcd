//! From the syntax tree to the Boolean-augmented [`Request`] graph: resolves every atom,
//! merges named nodes into one vertex, and wires the arcs of pipes, parallels and
//! negations.
//!
//! **Names shared with Unix tools.** Some native filters carry the name of a standard Unix
//! tool ([`Resolver::unix_tool`]: `grep`, `file`, `split`, `join`, `strip`, `ip`, `hash`). Native
//! names win (thesis 3.3), except where the pipeline is shell: such a name means the Unix
//! tool when the atom is joined by a plain `|` to a Unix command (directly, or through
//! other such names), or when it is the whole pipeline. So
//! `cat /etc/services | grep tcp | wc -l` gives what the shell gives, and
//! `pcapin file=x | grep GET | count` keeps the native filter. To have the native filter
//! next to a Unix command, put a native filter between them or use its other name
//! (`regex` for `grep`); to have the tool among native filters, give its path
//! (`/usr/bin/grep`).

use std::collections::{HashMap, HashSet};

use crate::diag::{DiagKind, Diagnostic};
use crate::graph::{Hint, NodeId, NodeKind, Selector};
use crate::lexer::ParOp;
use crate::parser::Expr;
use crate::resolve::{kind_of, resolve_atom, FilterKind, Resolver};
use crate::span::Span;
use crate::template::{ParKind, RKind, Request};

/// Where a sub-expression is entered and left. Every expression has exactly one exit:
/// an atom's node, a parallel's join, a negation's pseudo-vertex, a pipe's last stage.
struct Frag {
    entries: Vec<NodeId>,
    exit: NodeId,
}

struct Builder<'a> {
    r: Request,
    names: HashMap<String, NodeId>,
    /// Every vertex made or referenced so far, in order (group hints apply to a suffix).
    touched: Vec<NodeId>,
    /// Atoms (by their first byte) whose native name means the Unix tool here.
    as_tool: HashSet<usize>,
    /// The whole pipeline is also a shell pipeline: Unix commands joined by plain `|`.
    shell: bool,
    resolver: &'a dyn Resolver,
    input: &'a str,
}

pub(crate) fn build(e: &Expr, resolver: &dyn Resolver, input: &str) -> Result<Request, Diagnostic> {
    let as_tool = tools_by_neighbours(e, resolver);
    let mut b = Builder {
        r: Request::new(),
        names: HashMap::new(),
        touched: Vec::new(),
        shell: shell_pipeline(e, resolver, &as_tool),
        as_tool,
        resolver,
        input,
    };
    b.expr(e)?;
    Ok(b.r)
}

impl Builder<'_> {
    fn add_hints(&mut self, n: NodeId, hints: &[Hint]) {
        let node = self.r.nodes[n].as_mut().unwrap();
        for h in hints {
            if !node.hints.contains(h) {
                node.hints.push(*h);
            }
        }
    }

    fn expr(&mut self, e: &Expr) -> Result<Frag, Diagnostic> {
        match e {
            Expr::Atom {
                words,
                span,
                hints,
                opts,
            } => {
                let n = self.atom(words, opts, *span)?;
                self.add_hints(n, hints);
                self.touched.push(n);
                Ok(Frag {
                    entries: vec![n],
                    exit: n,
                })
            }
            Expr::Group { inner, hints, .. } => {
                let mark = self.touched.len();
                let f = self.expr(inner)?;
                for i in mark..self.touched.len() {
                    let n = self.touched[i];
                    self.add_hints(n, hints);
                }
                Ok(f)
            }
            Expr::Pipe { stages, pipes } => {
                let mut frags = Vec::with_capacity(stages.len());
                for s in stages {
                    frags.push(self.expr(s)?);
                }
                for (i, (sel, span)) in pipes.iter().enumerate() {
                    let from = frags[i].exit;
                    for &to in &frags[i + 1].entries {
                        self.r.edge(from, to, sel.clone(), *span);
                    }
                }
                let exit = frags[frags.len() - 1].exit;
                Ok(Frag {
                    entries: std::mem::take(&mut frags[0].entries),
                    exit,
                })
            }
            Expr::Par {
                op,
                branches,
                ops,
                span,
            } => {
                self.no_shell_word_as_operator(*op, branches, ops)?;
                let mut frags = Vec::with_capacity(branches.len());
                for b in branches {
                    frags.push(self.expr(b)?);
                }
                let kind = match op {
                    ParOp::Plus => ParKind::Plus,
                    ParOp::Or => ParKind::Or,
                    ParOp::And => ParKind::And,
                };
                let join = self.r.add(RKind::Par(kind), *span);
                self.touched.push(join);
                let mut entries = Vec::new();
                let mut seen = HashSet::new();
                for (i, f) in frags.into_iter().enumerate() {
                    self.r
                        .edge(f.exit, join, Selector::Default, ops[i.saturating_sub(1)]);
                    entries.extend(f.entries.into_iter().filter(|e| seen.insert(*e)));
                }
                Ok(Frag {
                    entries,
                    exit: join,
                })
            }
            Expr::Not { inner, bang, span } => {
                self.no_shell_negation(inner, *bang)?;
                let f = self.expr(inner)?;
                let not = self.r.add(RKind::Not, *span);
                self.touched.push(not);
                self.r.edge(f.exit, not, Selector::Default, *bang);
                Ok(Frag {
                    entries: f.entries,
                    exit: not,
                })
            }
        }
    }

    fn atom(
        &mut self,
        words: &[crate::lexer::Word],
        opts: &[crate::lexer::Word],
        span: Span,
    ) -> Result<NodeId, Diagnostic> {
        let forced = self
            .as_tool
            .contains(&span.start)
            .then_some(FilterKind::Unix);
        let res = resolve_atom(words, opts, forced, self.shell, self.resolver, self.input)?;
        let Some(name) = res.name else {
            return Ok(self.r.add(RKind::Base(res.kind), span));
        };
        let Some(&n) = self.names.get(&name) else {
            let n = self.r.add(RKind::Base(res.kind), span);
            self.r.nodes[n].as_mut().unwrap().name = Some(name.clone());
            self.names.insert(name, n);
            return Ok(n);
        };
        let at = self.line_col(self.r.nodes[n].as_ref().unwrap().span.start);
        let first = self.r.nodes[n].as_mut().unwrap();
        let RKind::Base(first_kind) = &mut first.kind else {
            unreachable!("named nodes are atoms")
        };
        let conflict = |what: String, this: &str, span: Span, input: &str| {
            Diagnostic::new(DiagKind::NameConflict, what, span, input).help(format!(
                "the first occurrence (at {at}) carries the words; repeat only '{this}' with the name here"
            ))
        };
        match (first_kind, res.kind) {
            (
                NodeKind::Filter {
                    filter: f0,
                    params: p0,
                    options: o0,
                    place: pl0,
                },
                NodeKind::Filter {
                    filter,
                    params,
                    options,
                    place,
                },
            ) => {
                if *f0 != filter {
                    return Err(Diagnostic::new(
                        DiagKind::NameConflict,
                        format!("'name={name}' names a '{f0}' filter, not '{filter}'"),
                        words[0].span,
                        self.input,
                    )
                    .help(format!(
                        "a name is one vertex: it was first given to '{f0}' at {at}; use another name for a second filter"
                    )));
                }
                if !params.is_empty() || !options.is_empty() || !place.is_empty() {
                    if p0.is_empty() && o0.is_empty() && pl0.is_empty() {
                        *p0 = params;
                        *o0 = options;
                        *pl0 = place;
                    } else if *p0 != params || *o0 != options || *pl0 != place {
                        return Err(Diagnostic::new(
                            DiagKind::NameConflict,
                            format!("conflicting parameters for 'name={name}'"),
                            span,
                            self.input,
                        )
                        .help(format!(
                            "the first occurrence (at {at}) carries the parameters; repeat only '{filter} name={name}' here"
                        )));
                    }
                }
            }
            // A named Unix command (`wc -l @name=w`): a later occurrence repeats its
            // command name, alone or with the same words.
            (
                NodeKind::Unix {
                    argv: a0,
                    place: pl0,
                },
                NodeKind::Unix { argv, place },
            ) => {
                if a0[0] != argv[0] {
                    return Err(conflict(
                        format!(
                            "'@name={name}' names Unix command '{}', not '{}'",
                            a0[0], argv[0]
                        ),
                        &a0[0].clone(),
                        words[0].span,
                        self.input,
                    ));
                }
                if argv.len() > 1 || !place.is_empty() {
                    if a0.len() == 1 && pl0.is_empty() {
                        *a0 = argv;
                        *pl0 = place;
                    } else if *a0 != argv || *pl0 != place {
                        return Err(conflict(
                            format!("conflicting words for '@name={name}'"),
                            &a0[0].clone(),
                            span,
                            self.input,
                        ));
                    }
                }
            }
            (first, _) => {
                let (was, this) = match first {
                    NodeKind::Unix { argv, .. } => {
                        (format!("Unix command '{}'", argv[0]), "a native filter")
                    }
                    NodeKind::Filter { filter, .. } => {
                        (format!("native filter '{filter}'"), "a Unix command")
                    }
                    _ => unreachable!("named nodes are filters or commands"),
                };
                return Err(Diagnostic::new(
                    DiagKind::NameConflict,
                    format!("'{name}' names {was}, not {this}"),
                    words[0].span,
                    self.input,
                )
                .help(format!(
                    "a name is one vertex: it was first given at {at}; use another name here"
                )));
            }
        }
        Ok(n)
    }

    /// A parallel operator next to a bare Unix command (`echo 1 + 2 | bc`, `expr 3 * 4`,
    /// `sleep 1 & echo b`) is a word or `&` to the shell, an operator here: refused, with
    /// the spellings of both meanings. A branch in parentheses (`(gzip -c) + (bzip2 -c)`)
    /// is no shell syntax, so a parallel of Unix commands is written that way.
    fn no_shell_word_as_operator(
        &self,
        op: ParOp,
        branches: &[Expr],
        ops: &[Span],
    ) -> Result<(), Diagnostic> {
        for (i, b) in branches.iter().enumerate() {
            let Expr::Atom { words, span, .. } = b else {
                continue;
            };
            let name = words.first().map(|w| w.text.as_str()).unwrap_or("");
            let unix = self.as_tool.contains(&span.start)
                || kind_of(self.resolver, &words[0]) == Some(FilterKind::Unix);
            if !unix {
                continue;
            }
            let at = ops[i.saturating_sub(1).min(ops.len() - 1)];
            let text = &self.input[at.start..at.end];
            let shell = if op == ParOp::And && text == "&" {
                "the shell runs the command before it in the background"
            } else {
                "the shell passes it to the command as a word"
            };
            return Err(Diagnostic::new(
                DiagKind::ShellSyntax,
                format!(
                    "'{text}' next to Unix command '{name}': {shell}; the pipeline language runs the branches in parallel"
                ),
                at,
                self.input,
            )
            .help(format!(
                "to pass it to the command, quote it ('{text}'); for branches in parallel, put each in parentheses: ({name} ...) {text} (...); for the shell's meaning, give it to the shell: bash -c {}",
                crate::resolve::sh_quote(self.input.trim())
            )));
        }
        Ok(())
    }

    /// `! cmd` before a bare Unix command is the shell's negation of its exit status; the
    /// language's `!` inverts a filter's selection, which a command has none of: refused,
    /// with the way to bash (`! true` exited 0 where bash exits 1).
    fn no_shell_negation(&self, inner: &Expr, bang: Span) -> Result<(), Diagnostic> {
        let Expr::Atom { words, span, .. } = inner else {
            return Ok(());
        };
        let unix = self.as_tool.contains(&span.start)
            || kind_of(self.resolver, &words[0]) == Some(FilterKind::Unix);
        if !unix {
            return Ok(());
        }
        Err(Diagnostic::new(
            DiagKind::ShellSyntax,
            format!(
                "'!' before Unix command '{}': the shell negates its exit status; the pipeline language's '!' inverts what a filter selects, and a command selects nothing",
                words[0].text
            ),
            bang,
            self.input,
        )
        .help(format!(
            "for the shell's meaning, give it to the shell: bash -c {}; to pass '!' to a command, quote it",
            crate::resolve::sh_quote(self.input.trim())
        )))
    }

    fn line_col(&self, pos: usize) -> String {
        let before = &self.input[..pos];
        let line = before.matches('\n').count() + 1;
        let col = before[before.rfind('\n').map_or(0, |i| i + 1)..]
            .chars()
            .count()
            + 1;
        if line == 1 {
            format!("column {col}")
        } else {
            format!("line {line}, column {col}")
        }
    }
}

/// The atoms whose native name means the Unix tool of that name (see the module's
/// documentation), by their first byte: native filters that [`Resolver::unix_tool`] says
/// share a tool's name, joined by plain `|` arcs to a Unix command (transitively), or
/// standing alone as the whole pipeline.
fn tools_by_neighbours(e: &Expr, resolver: &dyn Resolver) -> HashSet<usize> {
    struct Walk<'r> {
        resolver: &'r dyn Resolver,
        /// Atom start -> Some(true) a Unix command, Some(false) a candidate, None neither.
        kind: HashMap<usize, Option<bool>>,
        arcs: Vec<(usize, usize)>,
    }
    impl Walk<'_> {
        /// The atoms an expression is entered by and left from, through plain arcs.
        fn ends(&mut self, e: &Expr) -> (Vec<usize>, Vec<usize>) {
            match e {
                Expr::Atom { words, span, .. } => {
                    let name = words.first().map(|w| w.text.as_str()).unwrap_or("");
                    let k = match kind_of(self.resolver, &words[0]) {
                        Some(FilterKind::Unix) => Some(true),
                        Some(FilterKind::Native) if self.resolver.unix_tool(name) => Some(false),
                        _ => None,
                    };
                    self.kind.insert(span.start, k);
                    (vec![span.start], vec![span.start])
                }
                Expr::Group { inner, .. } => self.ends(inner),
                Expr::Pipe { stages, pipes } => {
                    let ends: Vec<_> = stages.iter().map(|s| self.ends(s)).collect();
                    for (i, (sel, _)) in pipes.iter().enumerate() {
                        if *sel != Selector::Default {
                            continue;
                        }
                        for &a in &ends[i].1 {
                            for &b in &ends[i + 1].0 {
                                self.arcs.push((a, b));
                            }
                        }
                    }
                    let entries = ends[0].0.clone();
                    let exits = ends[ends.len() - 1].1.clone();
                    (entries, exits)
                }
                // A parallel's join and a negation are Streamline's own: nothing after
                // them is joined to a Unix command by a shell pipe.
                Expr::Par { branches, .. } => {
                    let entries = branches.iter().flat_map(|b| self.ends(b).0).collect();
                    (entries, Vec::new())
                }
                Expr::Not { inner, .. } => (self.ends(inner).0, Vec::new()),
            }
        }
    }
    let mut w = Walk {
        resolver,
        kind: HashMap::new(),
        arcs: Vec::new(),
    };
    w.ends(e);
    let mut tools: HashSet<usize> = HashSet::new();
    if let Expr::Atom { span, .. } = e {
        if w.kind.get(&span.start) == Some(&Some(false)) {
            tools.insert(span.start);
        }
    }
    let is_unix = |a: usize, tools: &HashSet<usize>| {
        w.kind.get(&a) == Some(&Some(true)) || tools.contains(&a)
    };
    loop {
        let mut grew = false;
        for &(a, b) in &w.arcs {
            for (me, other) in [(a, b), (b, a)] {
                if w.kind.get(&me) == Some(&Some(false))
                    && !tools.contains(&me)
                    && is_unix(other, &tools)
                {
                    tools.insert(me);
                    grew = true;
                }
            }
        }
        if !grew {
            return tools;
        }
    }
}

/// Whether the pipeline is also a shell pipeline: one Unix command, or Unix commands
/// (native names that mean the tool here included, `as_tool`) joined by plain `|`, with
/// no hints, node options, selectors, parentheses or parallels. There a Unix command's
/// words are all its own without a word said; elsewhere its `space=` and `name=` words,
/// once Streamline's options, are refused (`resolve::resolve_atom`).
fn shell_pipeline(e: &Expr, resolver: &dyn Resolver, as_tool: &HashSet<usize>) -> bool {
    let command = |e: &Expr| match e {
        Expr::Atom {
            words,
            span,
            hints,
            opts,
        } => {
            hints.is_empty()
                && opts.is_empty()
                && (as_tool.contains(&span.start)
                    || kind_of(resolver, &words[0]) == Some(FilterKind::Unix))
        }
        _ => false,
    };
    match e {
        Expr::Pipe { stages, pipes } => {
            stages.iter().all(command) && pipes.iter().all(|(sel, _)| *sel == Selector::Default)
        }
        e => command(e),
    }
}
