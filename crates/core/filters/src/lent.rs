//! Memory the kernel lends, as a DBuf of the store: the one adapter between
//! [`kernel::LentMemory`] (an AF_PACKET ring, [`kernel::afpacket::RxRing`]; an AF_XDP
//! socket, [`kernel::xdp::XdpRx`]) and [`dataplane::External`], for both `rx`
//! implementations.
//!
//! Owns handing the capture socket to the store and reaching it again. The store owns the
//! socket from [`lend`] on; the source takes and gives back blocks through [`lender_mut`],
//! which borrows the store exclusively, while every slice of lent memory borrows it shared.
//! So a block never goes back while bytes of it are in use, by construction and with no
//! per-frame cost (see `kernel::LentMemory` and `dataplane::External`). The source gives a
//! block back at `Filter::epoch_end` (the batch has walked the whole space; `Ctx` holds
//! the store exclusively there), as early as the kernel can have it: a block held longer
//! is one the kernel cannot fill while the space waits on its other sources.
//!
//! Positions are the kernel crate's (a lap or generation in them), so a tag names one
//! frame for the life of the run (the block memo relies on that), and a tag whose block
//! went back to the kernel resolves to nothing ([`dataplane::ResolveError::Gone`]), never to
//! the frames the kernel wrote there since. Filters keep blocks past their batch with
//! `Ctx::keep`.

use dataplane::{BufId, External, Store};
use kernel::LentMemory;

/// A lender as the store's DBuf.
#[derive(Debug)]
struct Lent<L>(L);

impl<L: LentMemory> External for Lent<L> {
    #[inline]
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        self.0.bytes(pos, len)
    }
}

/// Give `lender` to the store; its blocks resolve as buffer id returned.
pub(crate) fn lend<L: LentMemory>(store: &mut Store, lender: L) -> BufId {
    store.add_external(Lent(lender))
}

/// The lender of buffer `id` (given to the store with [`lend`]), to read its state.
pub(crate) fn lender<L: LentMemory>(store: &Store, id: BufId) -> Option<&L> {
    store.external::<Lent<L>>(id).map(|l| &l.0)
}

/// The lender of buffer `id`, to take blocks and give them back: the exclusive borrow of
/// the store is what proves no bytes of a block are in use when it goes back.
pub(crate) fn lender_mut<L: LentMemory>(store: &mut Store, id: BufId) -> Option<&mut L> {
    store.external_mut::<Lent<L>>(id).map(|l| &mut l.0)
}
