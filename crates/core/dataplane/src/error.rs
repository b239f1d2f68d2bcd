//! Typed errors of construction. [`FilterError`]: what one filter's `make` and
//! [`crate::Args`] found wrong; messages name the key, the value and what was expected,
//! without the filter's name (the node label in front of them says it once).
//! [`BuildError`]: which node of the pipeline failed to build (its label and the span of
//! its text), what failed ([`BuildErrorKind`]), and which construction steps were undone;
//! [`BuildError::render`] prints it under the pipeline with a caret, like a parse error.

/// What constructing a filter found wrong.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// A parameter's value is not one the filter accepts.
    #[error("parameter {key}={value}: expected {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: String,
    },
    /// A parameter the filter cannot do without.
    #[error("missing parameter '{key}' ({expected})")]
    Missing { key: String, expected: String },
    /// An option key the filter does not declare (nor is it a control option).
    #[error("unknown parameter '{key}': it takes {}", words(accepted))]
    Undeclared {
        key: String,
        accepted: Vec<&'static str>,
    },
    /// More positional parameters than the filter declares.
    #[error("{given} positional parameter{} given, it takes {}", if *given == 1 { "" } else { "s" }, positional_words(*most, accepted))]
    Positional {
        given: usize,
        most: usize,
        accepted: Vec<&'static str>,
    },
    /// An operating-system resource the filter needs: a file, a socket, a device.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// What a parameter names or holds is not something the filter can use: a capture
    /// file libpcap would refuse, a packet-filter expression that does not compile, a
    /// kernel program the kernel refuses. `what` names it (empty when the source's message
    /// already does).
    #[error("{}{source}", if what.is_empty() { String::new() } else { format!("{what}: ") })]
    Invalid {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A ring the filter opens or creates (a shared prefix, an exported stream).
    #[error("{what}: {source}")]
    Ring {
        what: String,
        #[source]
        source: beltway::Error,
    },
    /// A rule of the filter its parameters break together, or a resource it refuses, in
    /// words (filters whose checks are not yet typed say it this way).
    #[error("{0}")]
    Rule(String),
}

fn words(keys: &[&str]) -> String {
    if keys.is_empty() {
        "no parameters of its own".into()
    } else {
        keys.join(", ")
    }
}

fn positional_words(most: usize, names: &[&str]) -> String {
    match most {
        0 => "none".into(),
        _ => format!("at most {most} ({})", names.join(", ")),
    }
}

impl FilterError {
    /// A [`FilterError::Io`]: `what` names the resource (a path, a device).
    pub fn io(what: impl Into<String>, source: std::io::Error) -> FilterError {
        FilterError::Io {
            what: what.into(),
            source,
        }
    }
    /// A [`FilterError::Invalid`].
    pub fn invalid(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> FilterError {
        FilterError::Invalid {
            what: what.into(),
            source: Box::new(source),
        }
    }
    /// A [`FilterError::BadValue`].
    pub fn bad(key: &str, value: &str, expected: &str) -> FilterError {
        FilterError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }
}

impl From<String> for FilterError {
    fn from(s: String) -> FilterError {
        FilterError::Rule(s)
    }
}

impl From<&str> for FilterError {
    fn from(s: &str) -> FilterError {
        FilterError::Rule(s.to_string())
    }
}

/// For code that still speaks in messages (the conversion `?` uses).
impl From<FilterError> for String {
    fn from(e: FilterError) -> String {
        e.to_string()
    }
}

/// Error building spaces from a graph: the node that failed (label and, when it came from
/// the pipeline text, its span), what failed, and the construction steps rolled back.
/// `Display` is `LABEL: WHAT` (plus the rollback); [`BuildError::render`] adds the
/// pipeline line with a caret under the node.
#[derive(Debug, thiserror::Error)]
#[error("{label}: {}", self.why())]
pub struct BuildError {
    /// The node's label (`strip`, `strip#2`, `count:c`), or the filters of a space, or
    /// `build` for the build as a whole.
    pub label: String,
    /// The span of the failing node in the pipeline text (`lang::Node::span`); None for
    /// what has no place in the text (a channel endpoint, the build as a whole).
    pub span: Option<lang::Span>,
    /// Boxed: errors travel up through every construction step, and `Result`s stay small.
    pub kind: Box<BuildErrorKind>,
    /// The construction step that failed and what was undone, when earlier steps were.
    pub rollback: Option<Rollback>,
}

/// What failed while building.
#[derive(Debug, thiserror::Error)]
pub enum BuildErrorKind {
    /// The filter's own construction (`Factory::make`).
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// A Unix command that could not be started.
    #[error(transparent)]
    Unix(std::io::Error),
    /// `export=yes`: the named stream could not be created.
    #[error("cannot export: {0}")]
    Export(#[source] beltway::Error),
    /// A placement rule the request breaks (`space=`, hints, replication, joins or loops
    /// across spaces), in words.
    #[error("{0}")]
    Placement(String),
    /// Creating or attaching a channel between spaces.
    #[error("{what}: {source}")]
    Channel {
        what: String,
        #[source]
        source: beltway::Error,
    },
    /// Handing a channel's rings between this process and a process space.
    #[error("{what}: {source}")]
    Handover {
        what: String,
        #[source]
        source: ProtocolError,
    },
    /// Starting a process space, or one that ended before it was ready.
    #[error("{what}: {source}")]
    Process {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Process spaces need a launcher (the streamline command) to start them.
    #[error("space p{0}: process spaces need a launcher (run through the streamline command)")]
    NoLauncher(usize),
    /// What a process space reported (its error crossed the process boundary as text).
    #[error("{0}")]
    Remote(String),
    /// A failure injected for the rollback tests (`fail_at`).
    #[error("injected failure at construction step {step}")]
    Injected { step: usize },
    /// `fail_at` past the last step: the whole build was done and rolled back.
    #[error("injected failure at construction step {step}: the build has {steps} steps (0..{steps}), all rolled back")]
    InjectedPast { step: usize, steps: usize },
}

/// The construction step that failed and the earlier steps undone, last first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(" (construction step '{step}' failed; rolled back: {})", .undone.join(", "))]
pub struct Rollback {
    pub step: String,
    pub undone: Vec<String>,
}

impl BuildError {
    /// An error of node `label`, at `span`.
    pub fn new(
        label: impl Into<String>,
        span: Option<lang::Span>,
        kind: impl Into<BuildErrorKind>,
    ) -> BuildError {
        BuildError {
            label: label.into(),
            span,
            kind: Box::new(kind.into()),
            rollback: None,
        }
    }

    /// A placement rule broken at node `label`.
    pub fn placement(
        label: impl Into<String>,
        span: Option<lang::Span>,
        why: String,
    ) -> BuildError {
        BuildError::new(label, span, BuildErrorKind::Placement(why))
    }

    /// What failed and what was rolled back: the message without the label.
    pub fn why(&self) -> String {
        format!(
            "{}{}",
            self.kind,
            self.rollback
                .as_ref()
                .map_or(String::new(), |r| r.to_string())
        )
    }

    /// The error as `streamline run` prints it: `prefix` and this error as the first line,
    /// over the line of the pipeline `text` with a caret under the failing node (lang's
    /// renderer, the one parse errors use); just the first line when there is no span.
    pub fn render(&self, prefix: &str, text: &str) -> String {
        let head = format!("{prefix}{self}");
        match self.span {
            Some(span) => lang::render(&head, span, text, None),
            None => head,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "gen count=1 | strip x | count";

    #[test]
    fn a_build_error_renders_with_a_caret_under_its_node() {
        let e = BuildError::new(
            "strip",
            Some(lang::Span::new(14, 21)),
            FilterError::bad("bytes", "x", "a byte count or 'payload'"),
        );
        assert_eq!(
            e.to_string(),
            "strip: parameter bytes=x: expected a byte count or 'payload'"
        );
        assert_eq!(
            e.render("streamline: ", TEXT),
            "streamline: strip: parameter bytes=x: expected a byte count or 'payload'\n  gen count=1 | strip x | count\n                ^^^^^^^"
        );
    }

    #[test]
    fn without_a_span_only_the_message_is_printed_and_the_rollback_follows_it() {
        let mut e = BuildError::new(
            "build",
            None,
            BuildErrorKind::InjectedPast { step: 9, steps: 7 },
        );
        e.rollback = Some(Rollback {
            step: "attach channel 0".into(),
            undone: vec!["create channel 1".into(), "create channel 0".into()],
        });
        let want = "build: injected failure at construction step 9: the build has 7 steps (0..7), all rolled back (construction step 'attach channel 0' failed; rolled back: create channel 1, create channel 0)";
        assert_eq!(
            e.render("streamline: ", TEXT),
            format!("streamline: {want}")
        );
        assert_eq!(format!("{}: {}", e.label, e.why()), want);
    }

    #[test]
    fn typed_sources_stay_reachable() {
        use std::error::Error;
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such program");
        let e = BuildError::new(
            "frob",
            None,
            BuildErrorKind::Process {
                what: "cannot start process space p1".into(),
                source: io,
            },
        );
        let source = e.kind.source().expect("the io error is the source");
        assert_eq!(source.to_string(), "no such program");
        assert!(matches!(
            *BuildError::new("x", None, FilterError::Rule("r".into())).kind,
            BuildErrorKind::Filter(FilterError::Rule(_))
        ));
    }
}

/// What went wrong handing a ring to or from a process space.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// Passing the ring's descriptor, or mapping the one received.
    #[error(transparent)]
    Ring(#[from] beltway::Error),
    /// The socket: the other side went away, or the message could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The other side said something else than the protocol's next message.
    #[error("expected {expected}, got '{got}'")]
    Unexpected { expected: &'static str, got: String },
}
