//! Exported streams (`export=yes`): a node's output also written, while the run runs, to a
//! named IBuf `/dev/shm/streamline.NAME` (+ `.data`) that other processes read by name
//! (`beltway::IbufReader`, `streamline attach`, the C library, PipesFS).
//!
//! An export is a node of the graph, as a tap is: an [`ExportNode`] (label `__export.NAME`)
//! on an out-arc of the node it exports, an observer (`Filter::observes`): the walk hands
//! it the node's whole output before routing it (`Space::observe`), the graph shows it
//! (`EditHandle::graph`, PipesFS), the counters leave it out (`RtNode::internal`). It is
//! hung where the node is made (the build, and the edits that make a node: insert,
//! branch, replace) by [`Space::hang_export`], goes when its node is removed or replaced
//! ([`Space::drop_exports`]), and moves with its node between spaces.
//!
//! Owns: the stream's rings and name, and writing blocks into them ([`BlockOut`]: no block
//! header; each block's bytes, written through once, and a tag with its class: the format
//! its readers have always read). Does not own: routing (the runtime), reading (readers
//! map the rings by name).

use crate::filter::{Batch, Ctx, Filter};
use crate::runtime::{Made, PassThrough, RtNode, Space};
use crate::store::Store;
use crate::transport::{BlockOut, Fields, Outgoing, Outlet};
use beltway::{IbufWriter, Tag};
use lang::Selector;

/// The label prefix of export nodes (the run's own, as channel endpoints and taps are).
pub(crate) const EXPORT: &str = "__export";

/// Name under /dev/shm of a node's exported stream (its one home is `protocol::graph`,
/// which the daemon and readers link without this crate).
pub use protocol::graph::export_name;

/// Create the named IBuf (and its DBuf) for an exported stream. A space's own data lives
/// in private memory, so exported blocks are written through into the shared DBuf once;
/// readers in other processes map both by name (`beltway::IbufReader`). Lossless: a reader
/// that stops reading holds the pipeline back, like a Unix pipe.
///
/// `size=` (thesis Table 3.2) sets the data ring's bytes (default 16 MiB) and `mode=` the
/// permission bits of both rings (default 0644).
pub(crate) fn export_stream(
    node: &str,
    size: Option<u64>,
    mode: Option<u32>,
) -> beltway::Result<ExportNode> {
    use beltway::{Layout, RingConfig, Writer};
    let name = export_name(node).replace(['/', ' '], "_");
    let mode = mode.unwrap_or(0o644);
    let bytes = size.map_or(16 << 20, |s| (s as usize).next_power_of_two().max(1 << 16));
    let tags = Writer::create_named(
        &name,
        RingConfig {
            mode,
            ..RingConfig::bytes(1 << 20).layout(Layout::Tags)
        },
    )?;
    let data = Writer::create_named(
        &format!("{name}.data"),
        RingConfig {
            mode,
            buf_id: 1,
            ..RingConfig::bytes(bytes)
        },
    )?;
    let writer = IbufWriter::new(tags)?.with_default(data)?;
    let name = name["streamline.".len()..].to_string();
    Ok(ExportNode {
        name,
        of: node.to_string(),
        writer,
        outlet: Outlet::default(),
        stopped: false,
    })
}

/// Node filter `f` as an exported stream's node, if it is one.
fn as_export(f: &mut dyn Filter) -> Option<&mut ExportNode> {
    f.as_own_node()?.downcast_mut::<ExportNode>()
}

/// An exported stream as a node of the graph: a sink on an out-arc of the node it exports.
#[derive(Debug)]
pub struct ExportNode {
    /// The stream's name (`streamline.NAME` less its prefix, `/` and spaces made `_`).
    name: String,
    /// The exported node's label, as the warning of a stream that stopped says it.
    of: String,
    writer: IbufWriter,
    outlet: Outlet,
    /// The stream failed (warned once): it takes nothing more; the run goes on.
    stopped: bool,
}

impl ExportNode {
    /// Its node's label: `__export.NAME` (characters a label gives a meaning to, `~` and
    /// `@`, made `_`).
    fn label(&self) -> String {
        let name: String = self
            .name
            .chars()
            .map(|c| if c == '~' || c == '@' { '_' } else { c })
            .collect();
        format!("{EXPORT}.{name}")
    }

    /// The stream's tag ring (its readers attach there).
    pub(crate) fn tags(&self) -> &beltway::Writer {
        self.writer.tags()
    }

    /// The stream ends: its readers see the end of it.
    pub(crate) fn close(&mut self) {
        self.writer.close();
    }
}

impl BlockOut for ExportNode {
    fn outlet(&mut self) -> &mut Outlet {
        &mut self.outlet
    }

    /// Only blocks that leave the node.
    fn takes(&mut self, t: &Tag, _len: usize) -> bool {
        t.class != 0
    }

    /// An exported stream carries no block header: its readers read bytes and classes.
    fn head(&self, _store: &Store, t: &Tag, data: &[u8]) -> Fields {
        Fields {
            len: data.len() as u32,
            class: t.class,
            ..Fields::default()
        }
    }

    fn write(&mut self, _store: &Store, blocks: &mut [Outgoing<'_>]) -> Result<(), String> {
        for b in blocks.iter() {
            self.writer
                .write_class(b.data, b.tag.class)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl Filter for ExportNode {
    /// The node's output into the stream; a stream that fails warns (as its node) and
    /// stops, and the run goes on.
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.stopped {
            return;
        }
        if let Err(e) = self.send_tags(cx.store, &batch.tags) {
            cx.warnings
                .push(format!("{}: export stopped: {e}", self.of));
            self.stopped = true;
            self.writer.close();
        }
    }

    fn accepts(&self) -> bool {
        !self.stopped
    }

    fn observes(&self) -> bool {
        true
    }

    fn as_own_node(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl Space {
    /// Hang exported stream `export` on node `i`: its node on a new out-arc of `i`, after
    /// `i`'s others.
    pub(crate) fn hang_export(&mut self, i: usize, export: ExportNode) {
        let (label, options) = (export.label(), vec![("name".into(), export.name.clone())]);
        let x = self.add_node(RtNode::own(label, "export", options, Box::new(export)));
        self.add_arc(i, x, Selector::All, 0);
    }

    /// Add a node made by `instantiate`, with its exported stream if it has one; its index.
    pub(crate) fn add_made(&mut self, label: String, spec: lang::Node, mut made: Made) -> usize {
        let export = made.export.take();
        let i = self.add_node(RtNode::new(label, spec, made, Vec::new()));
        if let Some(e) = export {
            self.hang_export(i, e);
        }
        i
    }

    /// The export nodes on node `i`'s out-arcs: (arc index, node).
    pub(crate) fn exports_of(&self, i: usize) -> Vec<(usize, usize)> {
        let export = |n: &RtNode| !n.removed && n.filter.observes() && n.label.starts_with(EXPORT);
        self.nodes[i]
            .out
            .iter()
            .enumerate()
            .filter(|(_, a)| export(&self.nodes[a.to]))
            .map(|(k, a)| (k, a.to))
            .collect()
    }

    /// End node `i`'s exported streams (it is removed or replaced): their readers see the
    /// end of the stream; their arcs go, their nodes are left removed, without arcs.
    pub(crate) fn drop_exports(&mut self, i: usize) {
        let ex = self.exports_of(i);
        for &(_, x) in &ex {
            let n = &mut self.nodes[x];
            n.filter = Box::new(PassThrough);
            n.removed = true;
        }
        self.take_arcs(ex.into_iter().map(|(k, _)| (i, k)).collect(), usize::MAX);
    }

    /// Take node `i`'s exported streams' nodes out (its filter moves to another space):
    /// each leaves a removed node without arcs here, and goes with the filter.
    pub(crate) fn take_exports(&mut self, i: usize) -> Vec<RtNode> {
        let ex = self.exports_of(i);
        let mut taken = Vec::new();
        for &(_, x) in &ex {
            let (label, spec) = (self.nodes[x].label.clone(), self.nodes[x].spec.clone());
            taken.push(std::mem::replace(
                &mut self.nodes[x],
                RtNode::pass_through(label, spec, Vec::new()),
            ));
        }
        self.take_arcs(ex.into_iter().map(|(k, _)| (i, k)).collect(), usize::MAX);
        taken
    }

    /// Hang export nodes that came with node `i` from another space back on it.
    pub(crate) fn put_exports(&mut self, i: usize, exports: Vec<RtNode>) {
        for n in exports {
            let x = self.add_node(n);
            self.add_arc(i, x, Selector::All, 0);
        }
    }

    /// Wait until every exported stream has `n` readers attached (a FIFO's open), so a
    /// reader started before the run misses nothing.
    pub fn wait_for_export_readers(
        &mut self,
        n: u32,
        timeout: std::time::Duration,
    ) -> Result<(), beltway::Error> {
        for node in &mut self.nodes {
            if let Some(ex) = as_export(node.filter.as_mut()) {
                ex.tags().wait_for_readers(n, timeout)?;
            }
        }
        Ok(())
    }

    /// The run ends: every exported stream ends (its readers see the end of it).
    pub(crate) fn close_exports(&mut self) {
        for n in &mut self.nodes {
            if let Some(ex) = as_export(n.filter.as_mut()) {
                ex.close();
            }
        }
    }
}
