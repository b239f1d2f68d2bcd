//! [`LocalRing`]: a process-local ring of bytes with absolute positions (a space's
//! default DBuf and its sources' rings when nothing outside the process reads them).

use super::Bounds;

/// A process-local ring of bytes with absolute, monotonically growing positions.
#[derive(Debug)]
pub struct LocalRing {
    pub(super) data: Vec<u8>,
    pub(super) mask: u64,
    pub(super) write: u64,
    /// The producer reuses its blocks' bytes from lap to lap, so in-place edits are
    /// noted in `edited` (see [`Store::add_reusing_ring`]).
    pub(super) reused: bool,
    pub(super) edited: bool,
}

impl LocalRing {
    pub fn new(size: usize) -> LocalRing {
        let size = size.next_power_of_two().max(4096);
        LocalRing {
            data: vec![0; size],
            mask: size as u64 - 1,
            write: 0,
            reused: false,
            edited: false,
        }
    }

    /// Reserve `len` contiguous bytes (skipping to the next lap if they would wrap).
    /// Returns the absolute position and the writable slice.
    #[inline]
    pub fn alloc(&mut self, len: usize) -> (u64, &mut [u8]) {
        let size = self.mask + 1;
        assert!(
            len as u64 <= size / 2,
            "block of {len} bytes does not fit a {size}-byte ring"
        );
        let off = self.write & self.mask;
        if off + len as u64 > size {
            self.write += size - off;
        }
        let pos = self.write;
        self.write += len as u64;
        let off = (pos & self.mask) as usize;
        (pos, &mut self.data[off..off + len])
    }

    /// Give back the unused end of the last allocation (made at `pos` for `reserved`
    /// bytes, of which `used` were written), so the ring laps no faster than data is made.
    pub fn trim_last(&mut self, pos: u64, reserved: usize, used: usize) {
        if self.write == pos + reserved as u64 && used <= reserved {
            self.write = pos + used as u64;
        }
    }

    /// The positions still intact: the last lap written.
    #[inline]
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds {
            lo: self.write.saturating_sub(self.mask + 1),
            hi: self.write,
        }
    }

    /// Bytes at `pos`, if still intact.
    #[inline]
    pub fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        if !self.bounds().holds(pos, len as u64) {
            return None;
        }
        let off = (pos & self.mask) as usize;
        self.data.get(off..off + len)
    }

    pub(super) fn get_mut(&mut self, pos: u64, len: usize) -> Option<&mut [u8]> {
        if !self.bounds().holds(pos, len as u64) {
            return None;
        }
        let off = (pos & self.mask) as usize;
        self.data.get_mut(off..off + len)
    }
}
