//! What an edit answers: applied ([`Applied`]), refused ([`Refusal`]) or failed ([`EditError`]).

use crate::runtime::{BuildError, NodeReport};
use lang::Diagnostic;
use std::time::Duration;

/// Why an edit was refused although it parsed (EBUSY-like: the run stays as it was).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a source cannot be removed (its stream is the run's input)")]
    Source,
    #[error("nothing flows into a source; insert after it instead")]
    BeforeSource,
    #[error("'{0}' is a source; an edit can add only filters between nodes")]
    NewSource(String),
    #[error("a source can only be replaced by a source, and a filter by a filter")]
    SourceMismatch,
    #[error("it has {0} inputs; inserting before it would change what it counts by input (a join's copies); insert after each input instead")]
    Inputs(usize),
    #[error("it is a split: its arcs are its branches, chosen per block, so the graph after it cannot be rewired")]
    Split,
    #[error("it is the join of a parallel template (`+`); edit the branches' filters instead")]
    Template,
    #[error("it is a channel endpoint between spaces")]
    Endpoint,
    #[error("it is the run's own observer of another node (a tap, an exported stream); edit the node it reads instead")]
    Observer,
    #[error("busy: it {0} a channel to another space, whose placement and channel were built for the graph as it is; only `set` may change it while it runs")]
    Channel(&'static str),
    #[error(
        "busy: it runs in process space p{0}; edits reach only the spaces of the run's own process"
    )]
    ProcessSpace(usize),
    #[error("the run has no space '{0}' in this process")]
    NoSpace(String),
    #[error("a node is already labelled {0}")]
    NameTaken(String),
    #[error("it is not a native filter; only native filters take options")]
    NotNative,
    #[error("nothing flows into a source; a source reads only its own input")]
    IntoSource,
    #[error("the arc would close a loop: {0} already feeds {1}")]
    Cycle(String, String),
    #[error("the arc is there already")]
    ArcExists,
    #[error("there is no arc from {0} to {1}")]
    NoArc(String, String),
    #[error("it is {0}'s only input, and a node with no input would be dead; remove {0} instead")]
    OnlyInput(String),
    #[error("the nodes are in different spaces ({0} and {1}); an arc between spaces is a channel, which is built when the run is built")]
    Spaces(String, String),
    #[error(
        "it is a Unix command writing to the run's standard output; no filter can read its output"
    )]
    UnixSink,
    #[error("the arc passes through a removed node that carries other arcs too ({0}); taking it away would cut those as well")]
    ThroughRemoved(String),
    /// `migrate`: it cannot move between spaces while the run runs (the reason).
    #[error("it cannot move to another space while the run runs: {0}")]
    Immovable(String),
    /// `migrate`: no channel joins it to the space asked for.
    #[error("no channel between it and space {0} is next to it; a filter moves across one channel at a time, from the end of one space to the start of the next or back")]
    NoChannel(String),
}

/// What went wrong with an edit. Nothing was changed, except after [`EditError::Ended`]
/// (the run was over).
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The edit's text, with a caret under the problem.
    #[error("{0}")]
    Syntax(Diagnostic),
    /// No live node has the label.
    #[error("no node labelled '{label}' (there are: {})", known.join(", "))]
    NoNode { label: String, known: Vec<String> },
    /// The label names nodes in several spaces.
    #[error("'{label}' names nodes in several spaces; say which: {}", candidates.join(", "))]
    Ambiguous {
        label: String,
        candidates: Vec<String>,
    },
    /// The edit cannot be applied to this node.
    #[error("{label}: {why}")]
    Refused { label: String, why: Refusal },
    /// The new filter failed to build (its label, and the span of the filter in the
    /// edit's text for insert and replace); the old instance is kept.
    #[error(transparent)]
    Build(BuildError),
    /// The run ended before the edit was applied.
    #[error("the run ended before the edit was applied")]
    Ended,
    /// A tap's rings could not be made.
    #[error("cannot make the tap's rings: {0}")]
    Tap(String),
    /// The run did not reach a batch boundary in time; the edit was withdrawn unapplied.
    #[error("the run did not reach a batch boundary within {0:?}; the edit was withdrawn, nothing changed")]
    Timeout(Duration),
}

/// An applied edit.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The node made or changed (insert, replace: the new node's label; set: the node's;
    /// remove: the label it had).
    pub label: String,
    /// The instance dropped (set, replace, remove): its final counters and summary.
    pub retired: Option<NodeReport>,
    /// Blocks the dropped instance flushed from its `finish` (routed on along its arcs).
    pub flushed: usize,
}

impl From<Diagnostic> for EditError {
    /// The edit's text did not parse (`lang::edit`).
    fn from(d: Diagnostic) -> EditError {
        EditError::Syntax(d)
    }
}
