//! Live edits of a running run (thesis 6.4, Tables 6.4-6.8: PAUSE, UPDATE, SET_INST_DATA,
//! connect/disconnect): what an edit is ([`Edit`], with its text form), applying one to a
//! [`Space`] ([`Space::edit`]) as a transaction that applies whole or leaves the space as it
//! was, the mailbox through which another thread edits a running run ([`EditHandle`]), and
//! the run's graph as it is now ([`GraphNode`], [`EditHandle::graph`]), which PipesFS shows
//! as directories.
//!
//! Owns: the edit language, the graph surgery on a built space, the per-space mailboxes
//! and the counters and graph snapshots they publish. Does not own: making filters (the
//! [`Factory`]), scheduling (the run loop calls [`Mailbox::serve`] at its quiescent
//! point), or forwarding edits between processes (the daemon's).
//!
//! # The text form
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
//! NODE is a label as [`Space::report`] prints it (`count`, `count#2`, `count:name`,
//! and in a run of several spaces `count@1`). FILTER ARGS are one native filter in the
//! pipeline language, parsed by `lang::parse` with the caller's resolver, so the filter's
//! option keys are checked there and errors point into the edit's text with a caret.
//!
//! # When edits apply
//!
//! Only between source batches: a source batch finishes its whole walk before the next is
//! pulled, so at the top of the run loop no block is in flight and nothing is lost by
//! rewiring. Checking for edits costs one relaxed atomic load per round of the loop.
//! Before an instance is dropped (set, replace, remove) its `finish` runs and what it
//! flushes (tcpstream's held segments, an ordered join's queues) is routed along its arcs
//! as at the end of a run; its final counters and summary come back in [`Applied`].
//!
//! # Arcs, and why a removed node stays as a pass-through
//!
//! Node indices stay stable: an inserted node is appended, a replaced or re-set node keeps
//! its slot, and a removed node stays as a pass-through tombstone that reports leave out.
//! Keeping it keeps the meaning of the selectors on both sides of it: `P |S1 X |S2 Y`
//! without X is `P |S1 (identity) |S2 Y`, and the conjunction of S1 and S2 is not always a
//! selector one arc can carry; it also keeps each arc's in-arc index, which joins count
//! by. `insert after X F` moves X's out-arcs, selectors and in-arc indices unchanged, to F
//! and joins X to F by a plain `|`; `insert before X F` moves X's one in-arc to F and
//! joins F to X by a plain `|`; both are what writing `X | F |S Y` would build.
//!
//! `branch X F` adds an out-arc X -> F (a plain `|`): `route` multicasts a batch to every
//! out-arc, each getting the tags its selector admits, shared copy-on-write, so X's other
//! successors get exactly what they got. F is a leaf: like any node without out-arcs it
//! counts its input and the blocks end there (its output is not counted); once something
//! is added below it (`branch F G`, `connect F G`) its output goes on. `connect` adds a
//! plain arc with the next free in-arc index of TO; `disconnect` takes one away (the
//! others keep their indices); `move` is both as one transaction, the new arc plain (the
//! old selector named FROM's classes) with the in-arc index the old arc had. Arcs are
//! seen through removed nodes, as the graph snapshot shows them: `disconnect A B` where
//! the arc runs A -> (removed X) -> B cuts the first arc of that way that carries only
//! A's blocks to only B, or is refused if none does ([`Refusal::ThroughRemoved`]).
//!
//! # The graph snapshot
//!
//! Each space's run loop publishes its graph when the run starts and after every applied
//! edit; [`EditHandle::graph`] joins the spaces of this process: live nodes only (no
//! tombstones, no channel endpoints), arcs through a removed node shown from its inputs to
//! its outputs, arcs through a channel pair as one arc between the real nodes. Nodes in
//! process spaces are absent, with their arcs. [`Space::graph`] is one space's, now.
//!
//! # What is refused (and why)
//!
//! A source cannot be removed or inserted (sources are fixed when the run starts); a
//! split's arcs are its branches, so nothing is inserted after, put in place of or
//! removed from one; a template join is part of its `+`; `insert before` a node with
//! several inputs would change what a join counts; nodes next to a channel to another
//! space and nodes in process spaces are refused with [`Refusal::Channel`] and
//! [`Refusal::ProcessSpace`]: their neighbours were placed, and their channels built, for
//! the graph as it was (`set`, which keeps the graph, is allowed next to a channel).
//! `set` may not change what is fixed when a node is built: its name, placement, or
//! exported stream; it takes KEY=VALUE only (a positional word would lose to an option of
//! the same parameter given at build time). `set` and `replace` make the filter afresh:
//! counters go on across a `set` (they are the node's), session state does not (the old
//! instance flushed what its sessions held); `set` on a source restarts its stream.
//!
//! `branch`, `connect`, `disconnect` and `move` are refused on a split's out-arcs (its
//! arcs are its branches), on arcs into a template join (it counts its inputs), next to a
//! channel, between nodes of different spaces ([`Refusal::Spaces`]: such an arc is a
//! channel, built with the run), and from a Unix command with no out-arc (it writes to
//! standard output). `branch` and `connect` refuse a new source or an arc into a source,
//! an arc that is already there (seen through removed nodes), and one that would close a
//! loop; `disconnect` refuses to take TO's only input ([`Refusal::OnlyInput`]: remove TO
//! instead) and an arc that is not there; `move` is refused whole if either half is (its
//! connect is checked first, so a node's only input may move).

pub(crate) mod error;
mod handle;
mod mailbox;
mod quiet;
mod snapshot;
mod surgery;
mod taps;
#[cfg(test)]
mod tests;

pub use lang::edit::{split_space, Edit, Where};
pub use lang::wire::EditWire;

pub use error::{Applied, EditError, Refusal};
pub use handle::EditHandle;
pub(crate) use mailbox::Mailbox;
use mailbox::{lock, MoveJob, SubscribeJob, TapJob};
pub use snapshot::{filter_text, fold_graph, GraphNode};
use snapshot::{resolve, SnapNode};
use surgery::endpoint;
