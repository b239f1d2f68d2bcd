//! Control filters: for (bounded loops), join, split, hash.

use crate::packet::{flow_hash, parse_tag};
use dataplane::builtin::{JoinFilter, SplitFilter};
use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use std::collections::HashMap;

/// Bounded loop (thesis 3.3.2): the first N times a block is seen it gets class 1 (the
/// loop body runs), then class 0 (so `|!` leads out of the loop).
pub struct For {
    limit: u32,
    left: HashMap<(u16, u64, u32), u32>,
}
impl Filter for For {
    fn process(&mut self, _cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let key = (t.buf, t.pos, t.len);
            let left = self.left.entry(key).or_insert(self.limit);
            if *left > 0 {
                *left -= 1;
                t.class = 1;
            } else {
                self.left.remove(&key);
                t.class = 0;
            }
        }
    }
    fn epoch_end(&mut self, _cx: &mut Ctx<'_>) {
        // Depth-first: a source batch has finished all its iterations.
        self.left.clear();
    }
}

/// Class = hash of the flow (packets) or of the contents, into N classes 1..=N.
pub struct Hash {
    ways: u16,
    by_flow: bool,
}
impl Filter for Hash {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let h: u64 = if self.by_flow {
                parse_tag(cx, t).map_or(0, |p| flow_hash(&p) as u64)
            } else {
                cx.data(t).map_or(0, dataplane::hash::fnv1a)
            };
            t.class = (h % self.ways as u64) as u16 + 1;
        }
    }
}

pub(crate) fn make_for(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let limit: u32 = a.parse("count", Some(0), 1)?;
    Ok(Box::new(For {
        limit,
        left: HashMap::new(),
    }))
}
pub(crate) fn make_join(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let mode = match a.get("mode", Some(0)).unwrap_or("all") {
        "all" => lang::JoinMode::All,
        "first" | "or" => lang::JoinMode::First,
        n => lang::JoinMode::Nth(
            n.parse()
                .map_err(|_| FilterError::bad("mode", n, "all, first, or the copy number N"))?,
        ),
    };
    Ok(Box::new(JoinFilter::new(mode, 0)))
}
pub(crate) fn make_split(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let ways: usize = a.parse("ways", Some(0), 2)?;
    let mode = match a.get("mode", None).unwrap_or("rr") {
        "rr" | "roundrobin" => lang::SplitMode::RoundRobin,
        "hash" => lang::SplitMode::Hash,
        m => return Err(FilterError::bad("mode", m, "rr or hash")),
    };
    Ok(Box::new(SplitFilter::new(mode, ways)))
}
pub(crate) fn make_hash(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let ways: u16 = a.parse("ways", Some(0), 2)?;
    if ways == 0 {
        return Err(FilterError::bad("ways", "0", "at least 1"));
    }
    let by_flow = match a.get("by", None).unwrap_or("flow") {
        "flow" => true,
        "data" | "content" => false,
        b => return Err(FilterError::bad("by", b, "flow or data")),
    };
    Ok(Box::new(Hash { ways, by_flow }))
}

// The declarations of this file's filters are data in the catalog (`catalog::control::{FOR,
// JOIN, SPLIT, HASH}`); their constructors are below, paired with them in
// `filters::CONSTRUCTORS`.
