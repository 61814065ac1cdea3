//! The xorshift64 generator unit tests draw from: reproducible across runs and platforms,
//! and no dependency for a dozen lines.

pub(crate) struct XorShift(u64);

impl XorShift {
    /// `seed` must not be 0 (the generator would stay there).
    pub(crate) fn new(seed: u64) -> Self {
        XorShift(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
