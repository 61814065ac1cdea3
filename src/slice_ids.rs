//! Interning of `u32` slices: each distinct slice gets a number, in the order first met.

use rustc_hash::FxHashMap as HashMap;

/// No slice ([`SliceIds::same_hash`]'s end).
const NONE: u32 = u32::MAX;

/// The distinct slices met, numbered in the order first met, kept in one arena and found
/// by hash: most slices are met again (a subset construction's NFA sets, a schema tree's
/// subtrees), and a map keyed by owned slices cost a copy per new slice besides the
/// caller's, and hashed every key again whenever it grew.
#[derive(Default)]
pub(crate) struct SliceIds {
    items: Vec<u32>,
    /// Where each slice ends in `items` (slice `i` starts where slice `i - 1` ends).
    off: Vec<u32>,
    /// The last slice of each hash, and per slice the previous one of the same hash
    /// ([`NONE`]).
    by_hash: HashMap<u64, u32>,
    same_hash: Vec<u32>,
}

impl SliceIds {
    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.off.clear();
        self.by_hash.clear();
        self.same_hash.clear();
    }

    /// Room for `slices` slices before the map grows.
    pub(crate) fn reserve(&mut self, slices: usize) {
        self.by_hash.reserve(slices);
        self.same_hash.reserve(slices);
        self.off.reserve(slices);
    }

    pub(crate) fn len(&self) -> usize {
        self.same_hash.len()
    }

    pub(crate) fn get(&self, i: usize) -> &[u32] {
        let start = if i == 0 { 0 } else { self.off[i - 1] };
        &self.items[start as usize..self.off[i] as usize]
    }

    /// The number of `slice`, added when new.
    pub(crate) fn intern(&mut self, slice: &[u32]) -> u32 {
        use std::hash::BuildHasher;
        let h = self.by_hash.hasher().hash_one(slice);
        let mut k = self.by_hash.get(&h).copied().unwrap_or(NONE);
        while k != NONE {
            if self.get(k as usize) == slice {
                return k;
            }
            k = self.same_hash[k as usize];
        }
        let n = self.len() as u32;
        self.items.extend_from_slice(slice);
        self.off.push(self.items.len() as u32);
        self.same_hash
            .push(self.by_hash.insert(h, n).unwrap_or(NONE));
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_slices_get_one_number_in_order_first_met() {
        let mut ids = SliceIds::default();
        let slices: [&[u32]; 6] = [&[1, 2], &[], &[2, 1], &[1, 2], &[], &[1, 2, 3]];
        let numbers: Vec<u32> = slices.iter().map(|s| ids.intern(s)).collect();
        assert_eq!(numbers, [0, 1, 2, 0, 1, 3]);
        assert_eq!(ids.len(), 4);
        assert_eq!(ids.get(2), &[2, 1]);
        assert_eq!(ids.get(1), &[] as &[u32]);
        ids.clear();
        assert_eq!(ids.intern(&[2, 1]), 0);
    }

    /// Against a map keyed by owned slices, over short slices of a small alphabet (many
    /// repeats).
    #[test]
    fn numbers_match_a_map_of_owned_slices() {
        let mut rng = crate::test_rng::XorShift::new(7);
        for _ in 0..200 {
            let mut ids = SliceIds::default();
            let mut map: std::collections::HashMap<Vec<u32>, u32> = Default::default();
            for _ in 0..300 {
                let len = rng.below(4) as usize;
                let slice: Vec<u32> = (0..len).map(|_| rng.below(3) as u32).collect();
                let next = map.len() as u32;
                let want = *map.entry(slice.clone()).or_insert(next);
                assert_eq!(ids.intern(&slice), want);
                assert_eq!(ids.get(want as usize), &slice[..]);
            }
            assert_eq!(ids.len(), map.len());
        }
    }
}
