//! Edits as the daemon's protocol carries them: the conversions between the edit language's
//! [`Edit`] and the wire's typed form (`protocol::proto::EditOp`), kept here (behind the
//! `wire` feature, the language's one dependency on another crate of the workspace) so the
//! protocol crate links no language, and the daemon, its worker and the command convert
//! the same way without linking the dataplane.

use crate::edit::{Edit, Where};
use crate::Diagnostic;
use protocol::proto::{EditOp, InsertAt};

/// An [`Edit`] in the protocol's typed form and back.
pub trait EditWire: Sized {
    /// Parse an edit's text form ([`Edit::parse`], the one parser of edits) into the
    /// protocol's typed form; errors carry the caret under the problem.
    fn parse_op(text: &str, resolver: &dyn crate::Resolver) -> Result<EditOp, Diagnostic>;
    /// The protocol's typed form of this edit, parsed from `text`.
    fn to_op(&self, text: &str) -> EditOp;
    /// The edit a typed request asks for: the new filter's text parsed as one filter,
    /// `set`'s options checked (the text of the edit is not parsed again).
    fn from_op(op: &EditOp, resolver: &dyn crate::Resolver) -> Result<Self, Diagnostic>;
}

impl EditWire for Edit {
    fn parse_op(text: &str, resolver: &dyn crate::Resolver) -> Result<EditOp, Diagnostic> {
        Ok(Edit::parse(text, resolver)?.to_op(text))
    }

    fn to_op(&self, text: &str) -> EditOp {
        use Edit as E;
        let filter = || self.filter_text(text).unwrap_or_default().to_string();
        match self {
            E::Set { node, options, .. } => EditOp::Set {
                node: node.clone(),
                options: options.clone(),
            },
            E::Insert { node, at, .. } => EditOp::Insert {
                node: node.clone(),
                at: match at {
                    Where::After => InsertAt::After,
                    Where::Before => InsertAt::Before,
                },
                filter: filter(),
            },
            E::Remove { node } => EditOp::Remove { node: node.clone() },
            E::Replace { node, .. } => EditOp::Replace {
                node: node.clone(),
                filter: filter(),
            },
            E::Branch { node, .. } => EditOp::Branch {
                node: node.clone(),
                filter: filter(),
            },
            E::Connect { from, to } => EditOp::Connect {
                from: from.clone(),
                to: to.clone(),
            },
            E::Disconnect { from, to } => EditOp::Disconnect {
                from: from.clone(),
                to: to.clone(),
            },
            E::Move { node, from, to } => EditOp::Move {
                node: node.clone(),
                from: from.clone(),
                to: to.clone(),
            },
        }
    }

    fn from_op(op: &EditOp, resolver: &dyn crate::Resolver) -> Result<Edit, Diagnostic> {
        use Edit as E;
        let f = |t: &str| Edit::new_filter(t, resolver);
        Ok(match op {
            EditOp::Set { node, options } => E::set_options(node, options, resolver)?,
            EditOp::Insert { node, at, filter } => E::Insert {
                node: node.clone(),
                at: match at {
                    InsertAt::After => Where::After,
                    InsertAt::Before => Where::Before,
                },
                filter: f(filter)?,
            },
            EditOp::Remove { node } => E::Remove { node: node.clone() },
            EditOp::Replace { node, filter } => E::Replace {
                node: node.clone(),
                filter: f(filter)?,
            },
            EditOp::Branch { node, filter } => E::Branch {
                node: node.clone(),
                filter: f(filter)?,
            },
            EditOp::Connect { from, to } => E::Connect {
                from: from.clone(),
                to: to.clone(),
            },
            EditOp::Disconnect { from, to } => E::Disconnect {
                from: from.clone(),
                to: to.clone(),
            },
            EditOp::Move { node, from, to } => E::Move {
                node: node.clone(),
                from: from.clone(),
                to: to.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_typed_once_and_read_back_in_both_forms() {
        let r = crate::StaticResolver::new()
            .native_any("gen")
            .native_any("count")
            .native_any("sample");
        for text in [
            "set sample every=3",
            "insert after gen sample every=2",
            "insert before count:tail count name=pre",
            "remove count#2",
            "replace count:mid sample every=1",
            "branch count@1 count",
            "connect gen count:tail",
            "disconnect gen count:tail",
            "move count:tail count gen",
        ] {
            let op = Edit::parse_op(text, &r).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(op.to_string(), text);
            // The typed form makes the same edit as the text.
            let e = Edit::from_op(&op, &r).unwrap_or_else(|e| panic!("{text}: {e}"));
            let again = e.to_op(&op.source_text());
            assert_eq!(again.kind(), op.kind());
        }
        // A mistake in the text form is shown with its caret.
        let e = Edit::parse_op("insert sideways gen count", &r).unwrap_err();
        assert!(e.to_string().contains('^'), "{e}");
        // A typed edit's filter is checked as the text form's is.
        let bad = EditOp::Branch {
            node: "gen".into(),
            filter: "count | count".into(),
        };
        assert!(Edit::from_op(&bad, &r).is_err());
        let bad = EditOp::Set {
            node: "count".into(),
            options: vec![("export".into(), "yes".into())],
        };
        assert!(Edit::from_op(&bad, &r)
            .unwrap_err()
            .to_string()
            .contains("fixed"));
    }
}
