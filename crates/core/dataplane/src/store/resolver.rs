//! [`Resolver`]: tags of a batch resolved to bytes through the window of the last flat
//! DBuf (private ring or file), a bounds check per tag instead of a lookup and a dispatch.

use super::{Bounds, BufId, Region, ResolveError, Store};
use beltway::Tag;

/// See [`Store::resolver`]. It borrows the store, so nothing is allocated (and nothing
/// overwritten) while it lives: a window taken once stays true.
pub struct Resolver<'a> {
    store: &'a Store,
    w: Window<'a>,
}

/// The flat window of one DBuf: position `p` is at `bytes[p & mask]` for `lo <= p`,
/// `p + len <= hi`. Returned by value (not filled through `&mut self`), so a loop keeps
/// it in registers.
#[derive(Clone, Copy)]
struct Window<'a> {
    /// The DBuf (0: none).
    buf: BufId,
    bytes: &'a [u8],
    bounds: Bounds,
    mask: u64,
}

const NO_WINDOW: Window<'static> = Window {
    buf: 0,
    bytes: &[],
    bounds: Bounds { lo: 0, hi: 0 },
    mask: 0,
};

impl<'a> Resolver<'a> {
    pub(super) fn new(store: &'a Store) -> Resolver<'a> {
        Resolver {
            store,
            w: NO_WINDOW,
        }
    }

    /// The bytes a tag points to (the same answer as [`Store::data`]).
    #[inline]
    pub fn data(&mut self, t: &Tag) -> Result<&'a [u8], ResolveError> {
        if t.buf != self.w.buf {
            self.w = window(self.store, t.buf);
        }
        let w = self.w;
        if w.buf != 0 && w.bounds.holds(t.pos, t.len as u64) {
            let off = (t.pos & w.mask) as usize;
            if let Some(d) = w.bytes.get(off..off + t.len as usize) {
                return Ok(d);
            }
        }
        self.store.data(t)
    }
}

/// The window of DBuf `id` if it is a flat one (a private ring or a mapped file);
/// otherwise none (buf 0), and its tags take the general path.
#[cold]
#[inline(never)]
fn window(store: &Store, id: BufId) -> Window<'_> {
    match store.region(id) {
        Some(Region::Ring(r)) => Window {
            buf: id,
            bytes: &r.data,
            bounds: r.bounds(),
            mask: r.mask,
        },
        Some(Region::File(m, _)) => Window {
            buf: id,
            bytes: m.bytes(),
            bounds: Bounds::upto(m.bytes().len() as u64),
            mask: u64::MAX,
        },
        _ => NO_WINDOW,
    }
}
