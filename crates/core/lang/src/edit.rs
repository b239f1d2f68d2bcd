//! The edit language: the text of `streamline edit` (a live edit of a running run) parsed
//! into an [`Edit`]. The dataplane applies parsed edits (`dataplane::edit`); the form of
//! each edit and what it does to a running graph are documented there.
//!
//! ```text
//! set NODE KEY=VALUE [KEY=VALUE...]        re-make NODE with these options (SET_INST_DATA)
//! insert after NODE FILTER [ARGS...]       a new filter between NODE and all its successors
//! insert before NODE FILTER [ARGS...]      a new filter between NODE's one input and NODE
//! remove NODE                              NODE's inputs connect to its outputs
//! replace NODE FILTER [ARGS...]            a new filter in NODE's place, same arcs
//! branch NODE FILTER [ARGS...]             a new leaf filter reading NODE's output (a fork)
//! connect FROM TO                          a new arc FROM -> TO (TO gets another input)
//! disconnect FROM TO                       take the arc FROM -> TO away
//! move NODE FROM TO                        NODE reads from TO instead of FROM
//! ```
//!
//! FILTER ARGS are one native filter in the pipeline language, parsed by [`crate::parse`]
//! with the caller's resolver, so the filter's option keys are checked there and errors
//! point into the edit's text with a caret ([`Diagnostic`]).

use crate::{DiagKind, Diagnostic, Node, NodeKind, Span};

/// Where `insert` puts the new filter relative to its NODE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum Where {
    After,
    Before,
}

/// One live edit of a running run (see the module documentation for the text form).
/// With `serde`, the typed value the daemon hands its worker (`ToWorker::Edit`'s
/// `checked`), so the worker applies the edit the daemon checked without parsing it again.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum Edit {
    /// Re-make NODE's filter with these options changed (SET_INST_DATA). `span` is where
    /// the options are in the edit's text.
    Set {
        node: String,
        options: Vec<(String, String)>,
        span: Span,
    },
    /// A new filter after or before NODE.
    Insert {
        node: String,
        at: Where,
        filter: Node,
    },
    /// NODE's inputs connect to its outputs.
    Remove { node: String },
    /// A new filter in NODE's place.
    Replace { node: String, filter: Node },
    /// A new leaf filter reading NODE's output, beside NODE's other successors (a fork).
    Branch { node: String, filter: Node },
    /// A new arc FROM -> TO (TO gets another input).
    Connect { from: String, to: String },
    /// Take the arc FROM -> TO away.
    Disconnect { from: String, to: String },
    /// NODE reads from TO instead of FROM.
    Move {
        node: String,
        from: String,
        to: String,
    },
}

/// Options fixed when a node is built: `set` cannot change them.
const FIXED: [&str; 5] = ["export", "exportdata", "size", "mode", "share"];

impl Edit {
    /// The label of the node the edit is about.
    pub fn node(&self) -> &str {
        match self {
            Edit::Set { node, .. }
            | Edit::Insert { node, .. }
            | Edit::Remove { node }
            | Edit::Replace { node, .. }
            | Edit::Branch { node, .. }
            | Edit::Move { node, .. } => node,
            // The node that gets (or loses) an input.
            Edit::Connect { to, .. } | Edit::Disconnect { to, .. } => to,
        }
    }

    /// Every node label the edit names (NODE, or FROM and TO), in the order written.
    pub fn labels(&self) -> Vec<&str> {
        match self {
            Edit::Connect { from, to } | Edit::Disconnect { from, to } => vec![from, to],
            Edit::Move { node, from, to } => vec![node, from, to],
            e => vec![e.node()],
        }
    }

    /// Parse an edit's text. The filter part is parsed by `crate::parse` with `resolver`
    /// (its option keys checked there); errors carry a span into `text`.
    pub fn parse(text: &str, resolver: &dyn crate::Resolver) -> Result<Edit, Diagnostic> {
        let syntax = |kind, message: String, span| diag(kind, message, span, text);
        let Some((vspan, verb)) = word(text, 0) else {
            return Err(syntax(
                DiagKind::EmptyPipeline,
                format!("empty edit: expected {VERBS}"),
                Span::new(0, text.len()),
            ));
        };
        let node_after = |from: usize, what: &str| -> Result<(Span, String), Diagnostic> {
            word(text, from)
                .map(|(s, w)| (s, w.to_string()))
                .ok_or_else(|| {
                    syntax(
                        DiagKind::MissingOperand,
                        format!("expected {what}"),
                        Span::new(text.len(), text.len()),
                    )
                })
        };
        match verb {
            "set" => {
                let (nspan, node) = node_after(
                    vspan.end,
                    "the label of the node to set options of (as the report prints it)",
                )?;
                let base = base_of(&node);
                let f = parse_filter(text, nspan.end, Some(base), nspan, resolver)?;
                let span = Span::new(skip_space(text, nspan.end), text.len());
                set_edit(node, nspan, f, span, text)
            }
            "insert" => {
                let (wspan, w) = node_after(vspan.end, "'after' or 'before'")?;
                let at = match w.as_str() {
                    "after" => Where::After,
                    "before" => Where::Before,
                    _ => {
                        return Err(syntax(
                            DiagKind::UnexpectedToken,
                            format!("insert: expected 'after' or 'before', found '{w}'"),
                            wspan,
                        ))
                    }
                };
                let (nspan, node) =
                    node_after(wspan.end, "the label of the node to insert next to")?;
                let filter = new_filter(text, nspan, resolver)?;
                Ok(Edit::Insert { node, at, filter })
            }
            "remove" => {
                let (nspan, node) = node_after(vspan.end, "the label of the node to remove")?;
                if let Some((s, w)) = word(text, nspan.end) {
                    return Err(syntax(
                        DiagKind::UnexpectedToken,
                        format!("remove takes one node; '{w}' is left over"),
                        Span::new(s.start, text.trim_end().len()),
                    ));
                }
                Ok(Edit::Remove { node })
            }
            "replace" => {
                let (nspan, node) = node_after(vspan.end, "the label of the node to replace")?;
                let filter = new_filter(text, nspan, resolver)?;
                Ok(Edit::Replace { node, filter })
            }
            "branch" => {
                let (nspan, node) = node_after(
                    vspan.end,
                    "the label of the node whose output the new filter reads",
                )?;
                let filter = new_filter(text, nspan, resolver)?;
                Ok(Edit::Branch { node, filter })
            }
            "connect" | "disconnect" => {
                let (fspan, from) =
                    node_after(vspan.end, "FROM, the label of the node the arc leaves")?;
                let (tspan, to) =
                    node_after(fspan.end, "TO, the label of the node the arc enters")?;
                nothing_after(text, tspan.end, verb)?;
                Ok(match verb {
                    "connect" => Edit::Connect { from, to },
                    _ => Edit::Disconnect { from, to },
                })
            }
            "move" => {
                let (nspan, node) = node_after(vspan.end, "the label of the node to move")?;
                let (fspan, from) =
                    node_after(nspan.end, "FROM, the label of the node it reads from now")?;
                let (tspan, to) =
                    node_after(fspan.end, "TO, the label of the node it is to read from")?;
                nothing_after(text, tspan.end, verb)?;
                Ok(Edit::Move { node, from, to })
            }
            _ => Err(syntax(
                DiagKind::UnexpectedToken,
                format!("unknown edit '{verb}': expected {VERBS}"),
                vspan,
            )),
        }
    }
}

/// The `set` edit of NODE (its word at `nspan`) with the filter `f` parsed from its
/// name and the options (at `span` in `text`), checked: KEY=VALUE options only, none of
/// those fixed when a node is built.
fn set_edit(
    node: String,
    nspan: Span,
    f: Node,
    span: Span,
    text: &str,
) -> Result<Edit, Diagnostic> {
    let syntax = |kind, message: String, span| diag(kind, message, span, text);
    let base = base_of(&node);
    let NodeKind::Filter {
        filter,
        params,
        options,
        place,
    } = &f.kind
    else {
        return Err(syntax(
            DiagKind::UnexpectedToken,
            format!("set: {node} is not a native filter; only native filters take options"),
            nspan,
        ));
    };
    if filter != base {
        return Err(syntax(
            DiagKind::UnexpectedToken,
            format!("set: {node} is not a native filter; only native filters take options"),
            nspan,
        ));
    }
    if !params.is_empty() {
        return Err(syntax(
            DiagKind::BadOption,
            format!(
                "set takes KEY=VALUE options; name the parameter of '{}' (e.g. every=5)",
                params[0]
            ),
            span,
        ));
    }
    if options.is_empty() {
        return Err(syntax(
            DiagKind::MissingOperand,
            "set: expected KEY=VALUE options after the node".into(),
            span,
        ));
    }
    if f.name.is_some() {
        return Err(syntax(
            DiagKind::BadOption,
            "set: name= renames a node; names are fixed when the run is built".into(),
            span,
        ));
    }
    if !place.is_empty() {
        return Err(syntax(
            DiagKind::BadOption,
            "set: space= and placed= are fixed when the run is built".into(),
            span,
        ));
    }
    if let Some((k, _)) = options.iter().find(|(k, _)| FIXED.contains(&k.as_str())) {
        return Err(syntax(
            DiagKind::BadOption,
            format!("set: {k}= is fixed when the node is built (its exported stream)"),
            span,
        ));
    }
    if !f.hints.is_empty() {
        return Err(syntax(
            DiagKind::UnknownHint,
            "set: @hints take effect when a run is built".into(),
            span,
        ));
    }
    Ok(Edit::Set {
        node,
        options: options.clone(),
        span,
    })
}

impl Edit {
    /// `set NODE KEY=VALUE...` from its typed parts (the control protocol's form): the
    /// options are checked as the text form's are, and errors point into them written as
    /// `KEY=VALUE` words.
    pub fn set_options(
        node: &str,
        options: &[(String, String)],
        resolver: &dyn crate::Resolver,
    ) -> Result<Edit, Diagnostic> {
        let text = options
            .iter()
            .map(|(k, v)| format!("{k}={}", quoted(v)))
            .collect::<Vec<_>>()
            .join(" ");
        let base = base_of(node);
        let f = parse_filter(&text, 0, Some(base), Span::new(0, 0), resolver)?;
        set_edit(
            node.to_string(),
            Span::new(0, 0),
            f,
            Span::new(0, text.len()),
            &text,
        )
    }

    /// The one new filter of an insert, replace or branch from its text (`sample
    /// every=5`), checked as the text form's is; errors point into `text`.
    pub fn new_filter(text: &str, resolver: &dyn crate::Resolver) -> Result<Node, Diagnostic> {
        new_filter(text, Span::new(0, 0), resolver)
    }

    /// An edit made elsewhere (the daemon parsed and checked it; its worker applies it),
    /// checked where it is applied as [`Edit::parse`] would have made it with `resolver`:
    /// a new filter is one native filter known here, not `split`, with no `space=` and no
    /// hints; `set`'s options are ones the text form takes ([`Edit::set_options`]). The
    /// first thing wrong, in words.
    pub fn check_made(&self, resolver: &dyn crate::Resolver) -> Result<(), String> {
        let new = match self {
            Edit::Set { node, options, .. } => {
                return Edit::set_options(node, options, resolver)
                    .map(|_| ())
                    .map_err(|d| d.message.clone())
            }
            Edit::Insert { filter, .. }
            | Edit::Replace { filter, .. }
            | Edit::Branch { filter, .. } => filter,
            _ => return Ok(()),
        };
        let NodeKind::Filter { filter, place, .. } = &new.kind else {
            return Err("the new filter is not one native filter".into());
        };
        if resolver.resolve(filter) != Some(crate::FilterKind::Native) {
            Err(format!(
                "the new filter '{filter}' is no native filter here"
            ))
        } else if filter == "split" || place.space.is_some() || !new.hints.is_empty() {
            Err(format!(
                "the new filter '{filter}' is a split, or has space= or hints, which no edit takes"
            ))
        } else {
            Ok(())
        }
    }

    /// The text of the new filter of an insert, replace or branch, as written in `text`
    /// (the edit's text this edit was parsed from); None for the other kinds.
    pub fn filter_text<'a>(&self, text: &'a str) -> Option<&'a str> {
        match self {
            Edit::Insert { filter, .. }
            | Edit::Replace { filter, .. }
            | Edit::Branch { filter, .. } => text.get(filter.span.start..).map(str::trim),
            _ => None,
        }
    }
}

/// The edits' verbs, for messages.
const VERBS: &str = "set, insert, remove, replace, branch, connect, disconnect or move";

/// Refuse words after the last node of an edit that takes a fixed number of them.
fn nothing_after(text: &str, end: usize, verb: &str) -> Result<(), Diagnostic> {
    match word(text, end) {
        Some((s, w)) => {
            let takes = if verb == "move" {
                "NODE FROM TO"
            } else {
                "FROM TO"
            };
            Err(diag(
                DiagKind::UnexpectedToken,
                format!("{verb} takes {takes}; '{w}' is left over"),
                Span::new(s.start, text.trim_end().len()),
                text,
            ))
        }
        None => Ok(()),
    }
}

fn diag(kind: DiagKind, message: String, span: Span, input: &str) -> Diagnostic {
    Diagnostic {
        kind,
        message,
        span,
        help: None,
        input: input.to_string(),
    }
}

fn skip_space(text: &str, from: usize) -> usize {
    let rest = &text[from.min(text.len())..];
    from + (rest.len() - rest.trim_start().len())
}

/// The next whitespace-separated word at or after byte `from`.
fn word(text: &str, from: usize) -> Option<(Span, &str)> {
    let start = skip_space(text, from);
    let rest = &text[start..];
    let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
    (len > 0).then(|| (Span::new(start, start + len), &rest[..len]))
}

/// A label without its space (`count@1` -> `count`) and the space, if given.
pub fn split_space(label: &str) -> (&str, Option<&str>) {
    match label.rfind('@') {
        Some(at) => (&label[..at], Some(&label[at + 1..])),
        None => (label, None),
    }
}

/// The filter a label names: `count#2` and `count:c` are `count`.
pub fn base_of(label: &str) -> &str {
    let l = split_space(label).0;
    let end = l.find([':', '#']).unwrap_or(l.len());
    &l[..end]
}

/// Parse the one filter of an edit, from byte `from` of `text` to its end; `prefix` (the
/// filter's name, for `set`) goes in front. Spans are moved into `text`; a span in the
/// prefix becomes `node` (the edit's NODE word).
fn parse_filter(
    text: &str,
    from: usize,
    prefix: Option<&str>,
    node: Span,
    resolver: &dyn crate::Resolver,
) -> Result<Node, Diagnostic> {
    let start = skip_space(text, from);
    if start >= text.len() && prefix.is_none() {
        return Err(diag(
            DiagKind::MissingOperand,
            "expected a filter (FILTER [ARGS...]) after the node".into(),
            Span::new(text.len(), text.len()),
            text,
        ));
    }
    let (src, lead) = match prefix {
        Some(p) => (format!("{p} {}", &text[start..]), p.len() + 1),
        None => (text[start..].to_string(), 0),
    };
    let at = |s: Span| -> Span {
        if s.start < lead {
            node
        } else {
            Span::new(
                (s.start - lead + start).min(text.len()),
                (s.end.max(lead) - lead + start).min(text.len()),
            )
        }
    };
    let g = crate::parse(&src, resolver).map_err(|d| Diagnostic {
        span: at(d.span),
        input: text.to_string(),
        ..d
    })?;
    if g.nodes.len() != 1 {
        let span = at(g
            .nodes
            .get(1)
            .map_or(Span::new(lead, src.len()), |n| n.span));
        return Err(diag(
            DiagKind::UnexpectedToken,
            "an edit takes one filter; apply several edits for several filters".into(),
            span,
            text,
        ));
    }
    let mut n = g.nodes.into_iter().next().expect("one node");
    n.span = at(n.span);
    n.id = 0;
    Ok(n)
}

/// The new filter of an `insert` or `replace`: one native filter, placed by the edit.
fn new_filter(text: &str, node: Span, resolver: &dyn crate::Resolver) -> Result<Node, Diagnostic> {
    let n = parse_filter(text, node.end, None, node, resolver)?;
    let bad = |kind, message: &str| Err(diag(kind, message.to_string(), n.span, text));
    match &n.kind {
        NodeKind::Filter { filter, place, .. } => {
            if filter == "split" {
                return bad(DiagKind::UnexpectedToken, "split sends each block down one of its arcs by branch; it cannot be put into a running graph");
            }
            if place.space.is_some() {
                return bad(DiagKind::BadOption, "space= is decided when the run is built; the new filter runs in the space of the node it goes next to");
            }
        }
        NodeKind::Unix { .. } => {
            return bad(
                DiagKind::UnknownFilter,
                "only native filters can be added to a running run, not Unix commands",
            )
        }
        NodeKind::Join { .. } | NodeKind::Split { .. } => {
            return bad(DiagKind::UnexpectedToken, "an edit takes one filter")
        }
    }
    if !n.hints.is_empty() {
        return bad(
            DiagKind::UnknownHint,
            "@hints take effect when a run is built; an edit cannot give them",
        );
    }
    Ok(n)
}

/// A word of a filter's text, quoted if the language would not read it back as one word
/// (or, with a `=`, as an option: a Unix command's `name=x` is its argument).
pub fn quoted(w: &str) -> String {
    if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '"' || c == '|' || c == '=') {
        format!("\"{}\"", w.replace('"', "\\\""))
    } else {
        w.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_made_elsewhere_is_checked_as_a_parse_makes_one() {
        let r = resolver();
        let made = Edit::parse("insert after pass hold n=2", &r).unwrap();
        made.check_made(&r).expect("a parsed edit");
        Edit::parse("set hold n=3", &r)
            .unwrap()
            .check_made(&r)
            .expect("a parsed set");
        // A command, a filter this side does not know, a split: no parse makes them.
        let Edit::Insert { node, at, filter } = made else {
            unreachable!()
        };
        let with = |kind: NodeKind| Edit::Insert {
            node: node.clone(),
            at,
            filter: Node {
                kind,
                ..filter.clone()
            },
        };
        let unix = with(NodeKind::Unix {
            argv: vec!["cat".into()],
            place: Default::default(),
        });
        assert_eq!(
            unix.check_made(&r).unwrap_err(),
            "the new filter is not one native filter"
        );
        let NodeKind::Filter {
            params,
            options,
            place,
            ..
        } = filter.kind.clone()
        else {
            unreachable!()
        };
        let unknown = with(NodeKind::Filter {
            filter: "nosuch".into(),
            params,
            options,
            place,
        });
        assert!(unknown
            .check_made(&r)
            .unwrap_err()
            .contains("'nosuch' is no native filter here"));
        let set = Edit::Set {
            node: "hold".into(),
            options: vec![("export".into(), "yes".into())],
            span: Span::new(0, 0),
        };
        assert!(
            set.check_made(&r).is_err(),
            "set may not change a fixed option"
        );
    }

    fn resolver() -> crate::StaticResolver {
        crate::StaticResolver::new()
            .native("gate", &["block"])
            .native("tally", &[])
            .native("hold", &["n"])
            .native("every", &["n"])
            .native("pass", &[])
            .native("split", &[])
            .native("join", &[])
            .unix("cat")
    }

    fn parse(text: &str) -> Edit {
        Edit::parse(text, &resolver()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(text: &str) -> Diagnostic {
        match Edit::parse(text, &resolver()) {
            Err(d) => d,
            other => panic!("`{text}`: expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn every_form_parses() {
        assert_eq!(
            parse("set every n=5"),
            Edit::Set {
                node: "every".into(),
                options: vec![("n".into(), "5".into())],
                span: Span::new(10, 13)
            }
        );
        let Edit::Insert { node, at, filter } = parse("insert after tally:mid every n=2") else {
            panic!()
        };
        assert_eq!((node.as_str(), at), ("tally:mid", Where::After));
        assert!(
            matches!(&filter.kind, NodeKind::Filter { filter, options, .. } if filter == "every" && options == &[("n".to_string(), "2".to_string())])
        );
        assert_eq!(
            filter.span,
            Span::new(23, 32),
            "the filter's span is in the edit's text"
        );
        assert!(
            matches!(parse("  insert   before pass#2 hold  "), Edit::Insert { at: Where::Before, ref node, .. } if node == "pass#2")
        );
        assert_eq!(
            parse("remove every@1"),
            Edit::Remove {
                node: "every@1".into()
            }
        );
        assert!(
            matches!(parse("replace hold pass name=p"), Edit::Replace { ref filter, .. } if filter.name.as_deref() == Some("p"))
        );
        assert!(
            matches!(parse("set every#2 n=7"), Edit::Set { ref node, .. } if node == "every#2")
        );
        let Edit::Branch { node, filter } = parse("branch tally:mid every n=2") else {
            panic!()
        };
        assert_eq!(node, "tally:mid");
        assert!(matches!(&filter.kind, NodeKind::Filter { filter, .. } if filter == "every"));
        assert_eq!(
            filter.span,
            Span::new(17, 26),
            "the filter's span is in the edit's text"
        );
        assert_eq!(
            parse(" connect  gate tally@1 "),
            Edit::Connect {
                from: "gate".into(),
                to: "tally@1".into()
            }
        );
        assert_eq!(
            parse("disconnect gate tally"),
            Edit::Disconnect {
                from: "gate".into(),
                to: "tally".into()
            }
        );
        assert_eq!(
            parse("move tally:t every pass#2"),
            Edit::Move {
                node: "tally:t".into(),
                from: "every".into(),
                to: "pass#2".into()
            }
        );
        assert_eq!(
            parse("move tally:t every pass#2").labels(),
            ["tally:t", "every", "pass#2"]
        );
        assert_eq!(
            parse("connect gate tally").node(),
            "tally",
            "the node that gets an input"
        );
    }

    // Over 150 lines: one table of (edit, error kind, text under the caret, words) cases.
    #[test]
    fn bad_edits_are_syntax_errors_pointing_at_the_problem() {
        let cases: &[(&str, DiagKind, &str, &str)] = &[
            ("", DiagKind::EmptyPipeline, "", "empty edit"),
            (
                "frob tally",
                DiagKind::UnexpectedToken,
                "frob",
                "unknown edit 'frob'",
            ),
            (
                "insert beside tally pass",
                DiagKind::UnexpectedToken,
                "beside",
                "'after' or 'before'",
            ),
            (
                "insert after",
                DiagKind::MissingOperand,
                "",
                "expected the label",
            ),
            (
                "insert after tally",
                DiagKind::MissingOperand,
                "",
                "expected a filter",
            ),
            (
                "insert after tally pas",
                DiagKind::UnknownFilter,
                "pas",
                "pas",
            ),
            (
                "insert after tally pass | hold",
                DiagKind::UnexpectedToken,
                "hold",
                "one filter",
            ),
            (
                "insert after tally cat",
                DiagKind::UnknownFilter,
                "cat",
                "Unix",
            ),
            (
                "insert after tally split",
                DiagKind::UnexpectedToken,
                "split",
                "split",
            ),
            (
                "insert after tally pass space=1",
                DiagKind::BadOption,
                "pass space=1",
                "space=",
            ),
            (
                "insert after tally pass @private",
                DiagKind::UnknownHint,
                "pass",
                "@hints",
            ),
            (
                "remove tally hold",
                DiagKind::UnexpectedToken,
                "hold",
                "left over",
            ),
            ("set every 5", DiagKind::BadOption, "5", "KEY=VALUE"),
            ("set every", DiagKind::MissingOperand, "", "KEY=VALUE"),
            ("set every m=5", DiagKind::BadOption, "m", "m"),
            (
                "set every n=5 export=yes",
                DiagKind::BadOption,
                "n=5 export=yes",
                "export=",
            ),
            (
                "set every n=5 name=x",
                DiagKind::BadOption,
                "n=5 name=x",
                "name=",
            ),
            (
                "set cat n=1",
                DiagKind::UnexpectedToken,
                "cat",
                "not a native filter",
            ),
            (
                "insert after tally every n=\"2",
                DiagKind::UnterminatedQuote,
                "\"2",
                "quote",
            ),
            ("branch", DiagKind::MissingOperand, "", "expected the label"),
            (
                "branch tally",
                DiagKind::MissingOperand,
                "",
                "expected a filter",
            ),
            ("branch tally cat", DiagKind::UnknownFilter, "cat", "Unix"),
            (
                "branch tally split",
                DiagKind::UnexpectedToken,
                "split",
                "split",
            ),
            (
                "branch tally every n=2 | tally",
                DiagKind::UnexpectedToken,
                "tally",
                "one filter",
            ),
            ("branch tally every m=2", DiagKind::BadOption, "m", "m"),
            ("connect", DiagKind::MissingOperand, "", "FROM"),
            ("connect gate", DiagKind::MissingOperand, "", "TO"),
            (
                "connect gate tally hold",
                DiagKind::UnexpectedToken,
                "hold",
                "left over",
            ),
            ("disconnect gate", DiagKind::MissingOperand, "", "TO"),
            (
                "disconnect gate tally hold pass",
                DiagKind::UnexpectedToken,
                "hold pass",
                "FROM TO",
            ),
            ("move tally", DiagKind::MissingOperand, "", "FROM"),
            ("move tally gate", DiagKind::MissingOperand, "", "TO"),
            (
                "move tally gate pass hold",
                DiagKind::UnexpectedToken,
                "hold",
                "NODE FROM TO",
            ),
            (
                "mkdir tally",
                DiagKind::UnexpectedToken,
                "mkdir",
                "branch, connect, disconnect or move",
            ),
        ];
        for &(text, kind, under, words) in cases {
            let d = parse_err(text);
            assert_eq!(d.kind, kind, "`{text}`: {d}");
            assert_eq!(
                d.input, text,
                "`{text}`: the diagnostic renders the edit's text"
            );
            let got = &text[d.span.start.min(text.len())..d.span.end.min(text.len())];
            assert!(
                got.starts_with(under) && (under.is_empty() || !got.is_empty()),
                "`{text}`: caret under '{got}', expected '{under}': {d}"
            );
            assert!(
                d.message.contains(words),
                "`{text}`: '{}' does not say '{words}'",
                d.message
            );
        }
    }

    proptest::proptest! {
        /// Hostile text: an error or an edit, never a panic, and spans inside the text.
        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}") {
            if let Err(d) = Edit::parse(&text, &resolver()) {
                proptest::prop_assert!(d.span.start <= text.len() && d.span.end <= text.len(), "{:?} in {:?}", d.span, text);
            }
        }

        /// Text made of the language's own words, which gets further into the parser.
        #[test]
        fn word_salad_never_panics(words in proptest::collection::vec(proptest::sample::select(vec![
            "set", "insert", "after", "before", "remove", "replace", "branch", "connect", "disconnect", "move", "tally", "every", "n=2", "n=", "=", "|", "+", "(", ")", "\"", "!", "@private", "space=1", "cat", "hold:h", "tally#2", "every@1",
        ]), 0..8)) {
            let text = words.join(" ");
            if let Err(d) = Edit::parse(&text, &resolver()) {
                proptest::prop_assert!(d.span.start <= text.len() && d.span.end <= text.len(), "{:?} in {:?}", d.span, text);
            }
        }
    }
}
