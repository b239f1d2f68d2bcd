//! Memory another component lends block by block ([`External`]: the kernel's capture
//! rings), and for the unit tests a lender that behaves like one.

/// A DBuf whose memory belongs to someone else (e.g. the kernel's TPACKET ring): it
/// resolves positions it handed out while the blocks holding them are lent to us.
///
/// Contract: positions are absolute and never reused (a lap or generation counter in
/// them), and `get` answers `None` for a position whose block has been given back, even
/// when the same memory is lent again and holds other data now: a stale tag is
/// [`ResolveError::Gone`], never another block's bytes. Nothing lent is kept past its
/// batch in place: [`Store::keep`] copies it.
pub trait External: Send + Sync + std::fmt::Debug {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]>;
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
    generation: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
impl Lender {
    pub(crate) fn new(size: usize) -> std::sync::Arc<Lender> {
        let laps = (0..16u64).map(|g| (0..size).map(|i| i as u8 ^ g as u8).collect()).collect();
        std::sync::Arc::new(Lender { laps, size: size as u64, generation: 1.into() })
    }
    /// Where offset `off` of the block lent now lies.
    pub(crate) fn pos(&self, off: u64) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed) * self.size + off
    }
    /// The bytes offset `off..off + len` of the block lent now holds.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let g = self.generation.load(std::sync::atomic::Ordering::Relaxed) as usize;
        self.laps[g % self.laps.len()][off..off + len].to_vec()
    }
    /// End the current generation and lend the block again (with other contents).
    pub(crate) fn give_back(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
impl External for Lender {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let (g, off) = (pos / self.size, (pos % self.size) as usize);
        if g != self.generation.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        super::Bounds::upto(self.size).slice(&self.laps[g as usize % self.laps.len()], off as u64, len)
    }
}

