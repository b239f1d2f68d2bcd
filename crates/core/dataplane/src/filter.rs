//! The `Filter` trait, the context a filter runs in, and filter metadata.
//!
//! Filters are small (Click style): parse parameters through [`Args`], implement
//! [`Filter::process`] over a batch of tags, register with one [`FilterSpec`](crate::FilterSpec). Most filters
//! only read data and set each tag's class (0 = drop); nothing is copied. Editing filters
//! ask [`Ctx::writable`], which copies only when someone else may still read the block.

pub use crate::error::FilterError;
use crate::session::SessionTable;
use crate::store::{ResolveError, Store};
use beltway::Tag;
use std::collections::BTreeMap;

pub type Class = u16;

/// A batch of blocks moving through the graph together (vector-style scheduling: each
/// filter handles the whole batch, then the batch moves on, depth-first).
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub tags: Vec<Tag>,
    /// Per tag: another consumer may still read this block (write isolation).
    pub shared: Vec<bool>,
    /// Which of the receiving node's in-arcs the batch came by (0 for sources).
    pub from: usize,
    /// Per tag, the out-arc a split sends it down (set only by filters that route by
    /// branch, `split`; the blocks' classes stay what they were).
    pub branch: Vec<u16>,
}

impl Batch {
    #[inline]
    pub fn with_capacity(n: usize) -> Batch {
        Batch {
            tags: Vec::with_capacity(n),
            shared: Vec::with_capacity(n),
            from: 0,
            branch: Vec::new(),
        }
    }
    #[inline]
    pub fn push(&mut self, t: Tag) {
        self.tags.push(t);
        self.shared.push(false);
    }
    #[inline]
    pub fn clear(&mut self) {
        self.tags.clear();
        self.shared.clear();
        self.branch.clear();
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.tags.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }
    /// Keep only the tags `f` accepts (keeps `shared` in step); returns the bytes kept.
    /// One pass; nothing moves while every tag so far was kept.
    #[inline]
    pub fn retain_counting(&mut self, mut f: impl FnMut(&Tag) -> bool) -> u64 {
        let n = self.tags.len();
        let mut bytes = 0;
        let mut i = 0;
        while i < n && f(&self.tags[i]) {
            bytes += self.tags[i].len as u64;
            i += 1;
        }
        if i == n {
            return bytes;
        }
        let mut j = i;
        for i in i + 1..n {
            if f(&self.tags[i]) {
                bytes += self.tags[i].len as u64;
                self.tags[j] = self.tags[i];
                self.shared[j] = self.shared[i];
                j += 1;
            }
        }
        self.tags.truncate(j);
        self.shared.truncate(j);
        bytes
    }

    /// Keep only the tags `f` accepts (keeps `shared` in step).
    pub fn retain(&mut self, mut f: impl FnMut(&Tag) -> bool) {
        let mut j = 0;
        for i in 0..self.tags.len() {
            if f(&self.tags[i]) {
                self.tags[j] = self.tags[i];
                self.shared[j] = self.shared[i];
                j += 1;
            }
        }
        self.tags.truncate(j);
        self.shared.truncate(j);
    }
}

/// What a filter's `process` runs with: the space's data store, its own session state,
/// and a place to report problems.
pub struct Ctx<'a> {
    pub store: &'a mut Store,
    /// Name of the filter instance (for messages).
    pub name: &'a str,
    /// The node's session state, owned by the runtime (see [`Ctx::sessions`]).
    pub(crate) sessions: &'a mut Option<Box<dyn std::any::Any + Send>>,
    pub(crate) warnings: &'a mut Vec<String>,
    pub(crate) stop: &'a mut Stop,
}

impl Ctx<'_> {
    /// The bytes of a block.
    #[inline]
    pub fn data(&self, t: &Tag) -> Result<&[u8], ResolveError> {
        self.store.data(t)
    }
    /// A writable view of block `i` of `batch`, copying only if the block is shared or
    /// lives in read-only memory (then the tag is redirected to the copy).
    pub fn writable<'b>(
        &'b mut self,
        batch: &mut Batch,
        i: usize,
    ) -> Result<&'b mut [u8], ResolveError> {
        let exclusive = !batch.shared[i];
        let (s, copied) = self.store.writable(&mut batch.tags[i], exclusive)?;
        if copied {
            batch.shared[i] = false;
        }
        Ok(s)
    }
    /// Keep block `t` past the batch it came in: the tag itself where its memory stays
    /// (files, this space's rings), else a copy (see [`Store::keep`]). Store the returned
    /// tag, not `t`. The one way for a filter to hold a block across batches.
    pub fn keep(&mut self, t: &Tag) -> Result<Tag, ResolveError> {
        self.store.keep(t)
    }
    /// Session state (thesis 3.3.2 `slsession_alloc`, 5.3.3): `n` slots of `T`, created on
    /// first use and kept by the runtime with the filter's node; index the table by a
    /// block's class to get that session's slot. Because the runtime owns the state and the
    /// class selects it, a replica of the filter elsewhere can be handed the slots of the
    /// classes routed to it.
    pub fn sessions<T: Default + Clone + Send + 'static>(
        &mut self,
        n: usize,
    ) -> &mut SessionTable<T> {
        if !self
            .sessions
            .as_ref()
            .is_some_and(|b| b.is::<SessionTable<T>>())
        {
            *self.sessions = Some(Box::new(SessionTable::<T>::new(n)));
        }
        self.sessions
            .as_mut()
            .and_then(|b| b.downcast_mut())
            .expect("just created")
    }
    /// [`Ctx::sessions`] and the store at once, for a filter that keeps blocks in its
    /// sessions ([`Store::keep`] while a session is borrowed).
    pub fn sessions_and_store<T: Default + Clone + Send + 'static>(
        &mut self,
        n: usize,
    ) -> (&mut SessionTable<T>, &mut Store) {
        if !self
            .sessions
            .as_ref()
            .is_some_and(|b| b.is::<SessionTable<T>>())
        {
            *self.sessions = Some(Box::new(SessionTable::<T>::new(n)));
        }
        (
            self.sessions
                .as_mut()
                .and_then(|b| b.downcast_mut())
                .expect("just created"),
            self.store,
        )
    }

    /// A non-fatal problem worth telling the user (printed once per distinct message).
    pub fn warn(&mut self, msg: impl Into<String>) {
        let m = format!("{}: {}", self.name, msg.into());
        if !self.warnings.contains(&m) {
            self.warnings.push(m);
        }
    }
    /// Ask the run to stop because something failed (e.g. a sink that cannot write).
    pub fn stop(&mut self) {
        *self.stop = Stop::Failed;
    }
    /// Ask the run to end because it is complete: a consumer wants no more input (a Unix
    /// command that read what it needed and exited, as `head -3` does; the shell's
    /// writers then get SIGPIPE). What is on its way downstream still drains.
    pub fn end_run(&mut self) {
        if *self.stop == Stop::No {
            *self.stop = Stop::Done;
        }
    }
    /// The run's last command (a Unix command as the sink) exited with `status`: the run
    /// ends with it, as a shell pipeline does (`cat f | grep x` is 1 when nothing matched).
    pub fn exit_status(&mut self, status: u8) {
        if status != 0 && matches!(*self.stop, Stop::No | Stop::Done) {
            *self.stop = Stop::Status(status);
        }
    }
}

/// Whether a filter asked its run to stop, and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stop {
    /// Not asked.
    #[default]
    No,
    /// Something failed ([`Ctx::stop`]): the run ends and says it failed.
    Failed,
    /// The run is complete ([`Ctx::end_run`]): it ends as if its sources had.
    Done,
    /// The run's last command, a Unix command, exited with this non-zero status
    /// ([`Ctx::exit_status`]): the run's status, as a shell pipeline's is its last
    /// command's.
    Status(u8),
}

impl Stop {
    /// Whether the run should stop.
    pub fn asked(self) -> bool {
        self != Stop::No
    }
}

/// A native filter instance.
///
/// # Blocks live for a batch
///
/// A tag in a batch resolves until the batch has walked the whole space. After that its
/// memory may go back to its owner: the kernel refills a capture ring's block (`rx`),
/// another space reuses a channel's data. Such a tag then resolves to
/// [`ResolveError::Gone`] (positions are never reused), never to other data. A filter
/// that holds a tag across batches (`tcpstream`'s early segments, an ordered join's
/// queues, windows) stores what [`Ctx::keep`] returns for it, while the batch that
/// brought it is still walking: the tag itself where the memory stays (mapped files,
/// the space's own rings), else a copy with the block's record metadata.
pub trait Filter: Send {
    /// Process a batch in place: set each tag's class (0 drops it on default arcs), crop
    /// tags (edit pos/len), drop, reorder or append tags.
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch);

    /// Sources: produce the next batch (up to `max` blocks). `false` when exhausted.
    fn pull(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch, _max: usize) -> bool {
        false
    }

    /// Called after each source batch has finished its walk through the whole graph
    /// (depth-first: every copy of those blocks has been delivered by then). A source whose
    /// memory is lent gives blocks back here, through `cx.store`
    /// ([`Store::external_mut`](crate::Store::external_mut)): borrowed exclusively, it
    /// proves no bytes of the batch are still in use.
    fn epoch_end(&mut self, _cx: &mut Ctx<'_>) {}

    /// Sources only: whether this source carries blocks another space already took in (a
    /// channel's ingress). On interrupt such sources keep delivering until their producer
    /// ends (or a short grace period passes) while other sources stop at once, so what the
    /// producing spaces captured before the interrupt still reaches the sinks.
    fn drains(&self) -> bool {
        false
    }

    /// Whether the filter wants blocks now. A sink with nobody behind it (a published
    /// stream no run subscribes to) says no, and the arcs into it are skipped: the blocks
    /// take the single-arc path instead of being multicast to a sink that drops them.
    /// Asked per batch, so it must be cheap.
    fn accepts(&self) -> bool {
        true
    }

    /// Called when a round of the space's loop found no source with data (before the
    /// space sleeps): a filter holding work back for a batch (a transmitter's frames)
    /// lets it go here.
    fn idle(&mut self) {}

    /// What this source waits for when its `pull` found nothing (see
    /// [`crate::readiness`]): descriptors that become readable, wake-up signals, a
    /// deadline, or [`Arm::ready`](crate::readiness::Arm::ready) when something is there
    /// now. A source that declares its readiness never waits in `pull`; the space sleeps
    /// once for all of them. The default, [`Arm::poll`](crate::readiness::Arm::poll), is
    /// for a source that waits in its own `pull` (the space then does not sleep). Filters
    /// that are not sources are asked too; the default for them declares nothing (only
    /// one that makes blocks on its own, a Unix process, overrides it).
    fn arm(&mut self, w: &mut crate::readiness::Arm<'_>, source: bool) {
        if source {
            w.poll();
        }
    }

    /// End of stream: emit held blocks (reassembly, sampling windows), print totals.
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {}

    /// A line to print when the run ends (e.g. `count`'s totals), if any.
    fn summary(&self) -> Option<String> {
        None
    }

    /// Sources only: blocks lost before the filter could take them, so far: a capture
    /// socket's ring was full and the kernel dropped what it had no room for. Reported
    /// with the counters (`Counters::lost`), so that a reader of the stream (a libpcap
    /// reader's `pcap_stats`) learns of losses it never saw.
    fn lost(&self) -> u64 {
        0
    }

    /// Progress of a source as (done, total) bytes, for progress bars.
    fn progress(&self) -> Option<(u64, u64)> {
        None
    }

    /// The producing end of a channel: how full its rings are now (the web view's edge
    /// gauges; see `Space::channel_rings`).
    fn ring(&self) -> Option<protocol::graph::RingGauge> {
        None
    }

    /// Classifiers only (see [`Classifier`]): the filter as one the runtime may hand
    /// blocks it has already resolved. A run of classifiers joined by single arcs then
    /// shares one resolution per batch, and each classifier's pass is a tight loop over
    /// the batch (see `runtime`).
    fn as_classifier(&mut self) -> Option<&mut dyn ClassifyBatch> {
        None
    }

    /// Channel endpoints only: the in-band markers by which a filter moves across the
    /// channel while the run runs (`crate::migrate`).
    fn as_channel_end(&mut self) -> Option<&mut dyn ChannelEnd> {
        None
    }

    /// Observers only (a tap, an exported stream): the node reads the whole output of the
    /// node whose out-arc leads to it, handed to it before that output is routed
    /// (`Space::observe`), and counts in nobody's counters: not in that node's (its blocks
    /// out, drops and ended are what they would be without it) and not in the run's
    /// table (`RtNode::internal`).
    fn observes(&self) -> bool {
        false
    }

    /// The run's own nodes only (a tap, an exported stream): the node itself, for the
    /// module that made it to find it again by its type (`downcast_mut`). This trait names
    /// none of those types, so the modules that build on it stay above it.
    fn as_own_node(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }

    /// The readers of the shared taps on this node's output want only what one of
    /// `programs` (classic BPF; none: nothing) accepts; `None`: everything. Told at a batch
    /// boundary whenever a subscriber comes, goes or changes its filter. A source that
    /// serves only them (`rx keep=readers`, the daemon's shared capture) may leave the rest
    /// in the kernel; any other filter ignores it.
    fn readers_want(&mut self, _programs: Option<&[&[protocol::proto::BpfInsn]]>) {}
}

/// The markers of `crate::migrate`, on a channel between two spaces of this process: the
/// producer writes one after every block sent so far; the consumer delivers the blocks
/// before it and then nothing until its space has done what the marker asks.
pub trait ChannelEnd {
    /// Producer: write marker `id` behind every block sent so far, and wake the consumer.
    fn mark(&mut self, id: u64) -> beltway::Result<()>;
    /// Consumer: the marker it stopped at, if any.
    fn marker(&self) -> Option<u64>;
    /// Consumer: go on past the marker.
    fn resume(&mut self);
    /// Producer: whether the consumer has left the channel (its space ended).
    fn consumer_gone(&self) -> bool;
}

/// Classifier filters: one pure decision per block (Click's `simple_action`).
pub trait Classify: Send {
    fn classify(&mut self, data: &[u8], tag: &Tag) -> Class;
}

/// A classifier's pass over a batch whose blocks are already resolved.
pub trait ClassifyBatch {
    /// Set the class of every `tags[i]` from `data[i]`, the bytes `tags[i]` points to (the
    /// slices are as long as the tags). Returns how many got class 0.
    fn classify_batch(&mut self, data: &[&[u8]], tags: &mut [Tag]) -> usize;
}

/// Adapter: a [`Classify`] as a [`Filter`].
pub struct Classifier<C>(pub C);

impl<C: Classify> ClassifyBatch for Classifier<C> {
    #[inline]
    fn classify_batch(&mut self, data: &[&[u8]], tags: &mut [Tag]) -> usize {
        let mut zeros = 0;
        for (d, t) in data.iter().zip(tags.iter_mut()) {
            let c = self.0.classify(d, t);
            t.class = c;
            zeros += (c == 0) as usize;
        }
        zeros
    }
}

impl<C: Classify> Filter for Classifier<C> {
    /// The general path (the runtime normally calls [`ClassifyBatch::classify_batch`]
    /// instead): a block that cannot be resolved any more gets class 0.
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        let mut r = cx.store.resolver();
        for t in batch.tags.iter_mut() {
            t.class = match r.data(t) {
                Ok(d) => self.0.classify(d, t),
                Err(_) => 0,
            };
        }
    }
    fn as_classifier(&mut self) -> Option<&mut dyn ClassifyBatch> {
        Some(self)
    }
}

/// The data-access classes (thesis Table 5.1) and how a filter may be replicated are part
/// of its declaration, in the catalog.
pub use catalog::{Access, Replication};

/// Typed access to a filter's parameters: positional words and key=value options, and
/// the node's typed placement decisions ([`lang::Placement`]: side, kernel attachment).
#[derive(Debug, Clone, Default)]
pub struct Args {
    pub filter: String,
    pub positional: Vec<String>,
    pub options: BTreeMap<String, String>,
    pub place: lang::Placement,
}

impl Args {
    pub fn new(filter: &str, positional: Vec<String>, options: Vec<(String, String)>) -> Args {
        Args {
            filter: filter.to_string(),
            positional,
            options: options.into_iter().collect(),
            place: lang::Placement::default(),
        }
    }
    /// These arguments with the node's placement decisions.
    pub fn with_place(mut self, place: lang::Placement) -> Args {
        self.place = place;
        self
    }
    /// An option by key, or else the positional parameter at `pos`.
    pub fn get(&self, key: &str, pos: Option<usize>) -> Option<&str> {
        self.options
            .get(key)
            .map(|s| s.as_str())
            .or_else(|| pos.and_then(|p| self.positional.get(p)).map(|s| s.as_str()))
    }
    pub fn require(&self, key: &str, pos: Option<usize>) -> Result<&str, FilterError> {
        self.get(key, pos).ok_or_else(|| FilterError::Missing {
            key: key.to_string(),
            expected: "no default".into(),
        })
    }
    pub fn parse<T: std::str::FromStr>(
        &self,
        key: &str,
        pos: Option<usize>,
        default: T,
    ) -> Result<T, FilterError> {
        match self.get(key, pos) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| FilterError::bad(key, v, type_words::<T>())),
        }
    }
    /// Size with optional K/M/G suffix.
    pub fn size(&self, key: &str, pos: Option<usize>, default: u64) -> Result<u64, FilterError> {
        match self.get(key, pos) {
            None => Ok(default),
            Some(v) => {
                parse_size(v).ok_or_else(|| FilterError::bad(key, v, "a size (e.g. 64, 4K, 1M)"))
            }
        }
    }
    /// A yes/no option (absent: no). Any other value is an error naming it, never
    /// silently "no".
    pub fn flag(&self, key: &str) -> Result<bool, FilterError> {
        match self.options.get(key).map(|s| s.as_str()) {
            None | Some("no" | "false" | "0" | "off") => Ok(false),
            Some("yes" | "true" | "1" | "on") => Ok(true),
            Some(v) => Err(FilterError::bad(key, v, "yes or no")),
        }
    }
}

/// What a value of type `T` is, in words, for [`Args::parse`]'s errors.
pub(crate) fn type_words<T>() -> &'static str {
    let n = std::any::type_name::<T>();
    match n {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative whole number",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" => "true or false",
        _ if n.ends_with("String") => "text",
        _ => "of the parameter's type",
    }
}

pub use catalog::parse_size;

/// Session state helper re-exported for filters.
pub type Sessions<T> = SessionTable<T>;
