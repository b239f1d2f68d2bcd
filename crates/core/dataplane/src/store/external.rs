//! Memory another component lends block by block ([`External`]: the kernel's capture
//! rings), owned by the store, and for the unit tests a lender that behaves like one.
//!
//! Owns the rule that makes reading lent memory sound without a check per block: the
//! store owns the lender, its bytes are handed out borrowing the store shared
//! ([`Store::data`](super::Store::data), the resolver), and the lender's owner reaches it
//! to take and give back blocks only through [`Store::external_mut`](super::Store::external_mut),
//! which borrows the whole store exclusively. So no slice of a block is alive when the
//! block goes back (the borrow checker refuses such a program), with no atomic or lock per
//! frame; a tag, which is plain data, may outlive its block and then resolves to
//! [`ResolveError::Gone`](super::ResolveError::Gone).

use std::any::Any;

/// A DBuf whose memory belongs to someone else (e.g. the kernel's TPACKET ring): it
/// resolves positions it handed out while the blocks holding them are lent to us. The
/// store owns it ([`Store::add_external`](super::Store::add_external)); its source takes
/// and gives back blocks through [`Store::external_mut`](super::Store::external_mut).
///
/// Contract: positions are absolute and never reused (a lap or generation counter in
/// them), and `get` answers `None` for a position whose block has been given back, even
/// when the same memory is lent again and holds other data now: a stale tag is
/// [`ResolveError::Gone`](super::ResolveError::Gone), never another block's bytes. What
/// `get` answers changes only through `&mut self` (giving back blocks), never behind a
/// shared borrow. Nothing lent is kept past its batch in place:
/// [`Store::keep`](super::Store::keep) copies it.
///
/// Holding bytes of a lent block across the block's return does not compile:
///
/// ```compile_fail,E0502
/// # use dataplane::{External, Store, Tag};
/// # #[derive(Debug)] struct Ring(Vec<u8>);
/// # impl Ring { fn give_back(&mut self) { self.0.fill(0) } }
/// # impl External for Ring { fn get(&self, pos: u64, len: usize) -> Option<&[u8]> { self.0.get(pos as usize..)?.get(..len) } }
/// fn read_after_give_back(store: &mut Store, t: &Tag) -> u8 {
///     let bytes = store.data(t).unwrap();
///     store.external_mut::<Ring>(t.buf).unwrap().give_back(); // error[E0502]
///     bytes[0]
/// }
/// ```
///
/// while reading first does:
///
/// ```
/// # use dataplane::{External, Store, Tag};
/// # #[derive(Debug)] struct Ring(Vec<u8>);
/// # impl Ring { fn give_back(&mut self) { self.0.fill(0) } }
/// # impl External for Ring { fn get(&self, pos: u64, len: usize) -> Option<&[u8]> { self.0.get(pos as usize..)?.get(..len) } }
/// fn read_then_give_back(store: &mut Store, t: &Tag) -> u8 {
///     let first = store.data(t).unwrap()[0];
///     store.external_mut::<Ring>(t.buf).unwrap().give_back();
///     first
/// }
/// let mut store = Store::new(1 << 16);
/// let buf = store.add_external(Ring(vec![7; 64]));
/// assert_eq!(read_then_give_back(&mut store, &Tag { pos: 8, len: 4, buf, class: 1 }), 7);
/// ```
pub trait External: Send + std::fmt::Debug + 'static {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]>;
}

/// An [`External`] as the store holds it: resolvable, and reachable as its own type by
/// its owner (a downcast, once per batch, not per block).
pub(super) trait Owned: Send + std::fmt::Debug {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]>;
    fn any(&self) -> &dyn Any;
    fn any_mut(&mut self) -> &mut dyn Any;
}

impl<E: External> Owned for E {
    #[inline]
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        External::get(self, pos, len)
    }
    fn any(&self) -> &dyn Any {
        self
    }
    fn any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Memory lent block by block for the unit tests, as the kernel lends its rings: one
/// block of `size` bytes at a time, its positions `generation * size + offset`, refused
/// once [`Lender::give_back`] ends the generation. Each generation's contents differ
/// (byte `i` is `i ^ generation`), as a refilled ring's would.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Lender {
    laps: Vec<Vec<u8>>,
    size: u64,
    generation: u64,
}

#[cfg(test)]
impl Lender {
    pub(crate) fn new(size: usize) -> Lender {
        let laps = (0..16u64)
            .map(|g| (0..size).map(|i| i as u8 ^ g as u8).collect())
            .collect();
        Lender {
            laps,
            size: size as u64,
            generation: 1,
        }
    }
    /// Where offset `off` of the block lent now lies.
    pub(crate) fn pos(&self, off: u64) -> u64 {
        self.generation * self.size + off
    }
    /// The bytes offset `off..off + len` of the block lent now holds.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let g = self.generation as usize;
        self.laps[g % self.laps.len()][off..off + len].to_vec()
    }
    /// End the current generation and lend the block again (with other contents).
    pub(crate) fn give_back(&mut self) {
        self.generation += 1;
    }
}

#[cfg(test)]
impl External for Lender {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let (g, off) = (pos / self.size, (pos % self.size) as usize);
        if g != self.generation {
            return None;
        }
        super::Bounds::upto(self.size).slice(
            &self.laps[g as usize % self.laps.len()],
            off as u64,
            len,
        )
    }
}
