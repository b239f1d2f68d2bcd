//! `--chaos`: the random batch sizes and moves a space makes when asked (`Spaces::set_chaos`),
//! to check that where filters run changes nothing of what a run computes.

/// `--chaos`: random moves at random batch boundaries (for the placement-invariance test).
/// A small xorshift generator per space, seeded from the run's seed and the space.
pub(crate) struct Chaos {
    state: u64,
    /// Moves made (down, up) and refused.
    pub(crate) moves: (u64, u64, u64),
}

impl Chaos {
    pub(crate) fn new(seed: u64, space: usize) -> Chaos {
        // splitmix64 of (seed, space): distinct seeds give distinct, non-zero states.
        let mut z = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(space as u64 + 1);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Chaos {
            state: (z ^ (z >> 31)) | 1,
            moves: (0, 0, 0),
        }
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }
    /// A source batch size for this round: 1 to `max`, small ones often.
    pub(crate) fn batch(&mut self, max: usize) -> usize {
        match self.next() % 4 {
            0 => 1 + (self.next() % 4) as usize,
            1 => 1 + (self.next() % 32) as usize,
            _ => 1 + (self.next() % max as u64) as usize,
        }
    }
}
