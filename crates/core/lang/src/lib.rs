//! The Streamline pipeline language: the extended Unix pipeline of thesis 3.3
//! (Tables 3.1-3.3), from text to a request graph.
//!
//! A tour of what this crate owns, in the order a pipeline goes through it:
//!
//! - `lexer` (private): shell-like words (`"..."` with backslash escapes,
//!   `'...'`), operators `| + ++ * +* & ! ( ) @`, and selectors glued to their `|`.
//! - `parser` (private): a syntax tree by recursive descent. `|` binds
//!   loosest, then the parallel family (`+`, `++`/`*`, `+*`/`&`), then prefix `!`, then
//!   atoms: a filter with its words, or `( ... )`, each optionally followed by `@hints`.
//!   Different parallel operators in one chain need parentheses (`a + b ++ c` is an
//!   error); a chain of one operator is one n-way parallel (`a +* b +* c` is a 3-way And).
//! - [`resolve`]: the caller's [`Resolver`] says whether a name is a native filter or a
//!   Unix command (a name that is neither, and no near miss of a native name, is a Unix
//!   command that is not there, as in the shell); options (`key=value`, Table 3.2 control
//!   options and the filter's own) are checked here, and `space=` / `placed=` become the
//!   node's typed [`Placement`]. Every word after a Unix command's name is its argument;
//!   its options follow `@` (`gzip -c @space=1,2`, `wc -l @name=w`). [`StaticResolver`], [`PathResolver`] and [`WithPath`] are ready made.
//! - `build` (private): the syntax tree becomes a [`template::Request`], the
//!   Boolean-augmented graph; named nodes (`name=X`) are merged into one vertex.
//! - [`template`]: rewrite passes from the Boolean grammar to the base grammar (Not →
//!   inverted selectors, Or/And/`+` → [`NodeKind::Join`]), and [`parallelize`], the
//!   data-parallel `split | f + f | join` rewrite.
//! - `validate` (private): every cycle must pass through a loop-bounding `for` filter.
//! - [`place`]: typed placement decisions on a filter node ([`Placement`]: `placed=`
//!   parsed at resolve time, and what the kernel push-down sets).
//! - [`graph`]: the result, [`Graph`], and its [`Graph::canonical`] print.
//! - [`diag`]: [`Diagnostic`], errors rendered with a caret under the offending span.
//! - [`redact`](mod@redact): secret parameters (as the resolver says) out of text that is
//!   shown: [`redact()`], [`redact_options`], [`Diagnostic::redacted`].
//!
//! What a graph from [`parse`] guarantees (the runtime may rely on it):
//!
//! - Node ids are indices; edges are unique by (from, to, selector); spans are byte
//!   ranges of the input (a node: its words without `@hints`; an edge: its `|selector`
//!   or parallel operator).
//! - `a |S b + c |T d`: arcs a→b and a→c with S; b→j and c→j plain; j→d with T, where j
//!   is `Join{All}` for `+`, `Join{First}` for `++`/`*`, `Join{Nth(N)}` for `+*`/`&`
//!   (N = distinct arcs into j, i.e. the branch count of a flattened chain).
//! - A `+` parallel with nothing after it has no join (its branches are sinks) unless
//!   an arc into the join is negated; `++`/`+*` keep their join even at the end.
//! - `!A |S B` is `A |!S B`. A negation with nothing after it becomes a pass-through
//!   `Join{All}` sink behind an inverted arc (`gen | !grep x` keeps what grep drops).
//!   The parser never nests `Selector::Not` in `Selector::Not`.
//! - All occurrences of `name=X` are one node, which carries the first occurrence's
//!   params/options (or a later one's if the first has none) and all occurrences' hints.
//!   Every cycle contains a filter for which [`Resolver::bounds_loops`] holds (`for`).
//! - `@hints` after a parenthesized group go on every node inside it, joins included;
//!   to annotate a whole pipeline, parenthesize it: `(rx | ip | snort) @throughput`.
//! - A selector is glued to its `|`: `a |80 b`, `a |! b`; `a|b` reads `b` as a class name,
//!   except after a bare Unix command when `b` is a program or a Unix tool's name: then it
//!   is the command piped into, as in the shell (`seq 10|wc -l`).
//!
//! ```
//! use lang::{parse, StaticResolver, NodeKind, JoinMode};
//! let r = StaticResolver::new().native_any("a").native_any("b").native_any("c").native_any("d");
//! let g = parse("a | b + c | d", &r).unwrap();
//! assert_eq!(g.nodes[3].kind, NodeKind::Join { mode: JoinMode::All });
//! assert_eq!(g.canonical(), "n0 = a\nn1 = b\nn2 = c\nn3 = join(all)\nn4 = d\n\
//!                            n0 -> n1\nn0 -> n2\nn1 -> n3\nn2 -> n3\nn3 -> n4\n");
//! ```
#![forbid(unsafe_code)]

mod build;
pub mod diag;
pub mod edit;
pub mod fuzzing;
pub mod graph;
pub mod label;
mod lexer;
mod parser;
pub mod place;
pub mod redact;
pub mod resolve;
mod span;
pub mod template;
mod validate;
#[cfg(feature = "wire")]
pub mod wire;

pub use diag::{render, DiagKind, Diagnostic};
pub use graph::{Edge, Graph, Hint, JoinMode, Node, NodeId, NodeKind, Selector, SplitMode};
pub use place::{KernelAttach, PinKind, Placement, Side, SpaceName, SpaceSpec};
pub use redact::{redact, redact_options, Redacted, SECRET};
pub use resolve::{
    recheck_commands, FilterKind, OrCommand, PathResolver, Resolver, SecretParam, StaticResolver,
    WithPath, CONTROL_OPTIONS, SHELL_BUILTINS,
};
pub use span::Span;
pub use template::parallelize;

/// How deeply parentheses may nest.
pub const MAX_DEPTH: usize = 128;

/// Parses, resolves and validates a pipeline: syntax, filter names and options (through
/// `resolver`), named nodes, templates (Or, And, Not, `+` rewritten into joins and
/// inverted selectors), loops (every cycle needs a `for`), and named classes (`|http` is
/// resolved to the number a filter upstream publishes for it, or refused).
pub fn parse(input: &str, resolver: &dyn Resolver) -> Result<Graph, Diagnostic> {
    let request = parse_request(input, resolver)?;
    let graph = template::expand(request)
        .into_graph()
        .expect("every pseudo-vertex is rewritten by expand");
    validate::loops(&graph, resolver, input)?;
    let graph = validate::named_classes(graph, resolver, input)?;
    Ok(graph)
}

/// What [`parse`] decides with the resolver, decided again where a graph parsed elsewhere
/// runs (the daemon parses with [`OrCommand`] for its checks; its worker, with the
/// client's PATH, runs the graph it was given): its commands ([`recheck_commands`]) and
/// its loops (every cycle through a loop-bounding filter). On a graph whose structure
/// [`Graph::check`] accepted; `input` is the text it was parsed from.
pub fn recheck(graph: &Graph, input: &str, resolver: &dyn Resolver) -> Result<(), Diagnostic> {
    recheck_commands(graph, input, resolver)?;
    validate::loops(graph, resolver, input)
}

/// Parses and resolves a pipeline into the Boolean-augmented request graph, before
/// templates and loop validation (to inspect or to apply the passes one by one).
pub fn parse_request(
    input: &str,
    resolver: &dyn Resolver,
) -> Result<template::Request, Diagnostic> {
    let expr = parser::parse_expr(input, resolver)?;
    build::build(&expr, resolver, input)
}
