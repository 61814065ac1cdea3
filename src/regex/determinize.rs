//! Subset construction from a Thompson NFA without look-around to a byte-class DFA table.
//!
//! regex-automata's dense determinizer keeps ~64 bytes of bookkeeping per DFA state and a
//! dense table padded to a power-of-two stride plus an end-of-input column, so
//! `(a|b)*a(a|b){12}` (8,192 states, a 128 KiB compact table over 4 byte classes) needed over
//! 512 KiB and ~17 ms. Here a DFA state is the sorted list of the NFA states that consume a
//! byte (or match) in its epsilon closure, stored in one arena and found through an
//! open-addressing table, and the table is built directly in byte classes: that pattern takes
//! ~1.6 ms and 368 KiB of bookkeeping.
//!
//! Semantics are [`regex_automata::MatchKind::All`] with an anchored start: every thread
//! stays alive, and a state accepts when any thread in it has reached a `Match` state.

use crate::grammar::BitSet256;
use regex_automata::nfa::thompson::{State, NFA};
use regex_automata::util::primitives::StateID;

/// No transition (the dead state) in [`Table::trans`].
pub(super) const NONE: u32 = u32::MAX;

/// Byte classes `lo..=hi` of raw state `state` lead to raw state `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stretch {
    pub state: u32,
    pub lo: u8,
    pub hi: u8,
    pub target: u32,
}

/// A raw table's transitions as stretches, in state order and class order within a state:
/// rows are mostly empty and a string's characters share their target, so a few stretches
/// stand for a state's tens of classes (at most one a class: 12 bytes against the table's 4,
/// so the table bound bounds them too). Written and read class by class as a dense table,
/// they were a quarter of a median DFA-backed schema's compile (~400 states; the 294 such
/// files around the corpus median: 81 -> 62 ms in all).
#[derive(Debug, Default)]
pub(super) struct Stretches(pub Vec<Stretch>);

impl Stretches {
    /// Class `class` of `state` leads to `target`; a state's classes come in order, after
    /// the previous state's.
    #[inline]
    pub(super) fn add(&mut self, state: u32, class: u8, target: u32) {
        if let Some(last) = self.0.last_mut() {
            if last.state == state
                && last.target == target
                && usize::from(last.hi) + 1 == usize::from(class)
            {
                last.hi = class;
                return;
            }
        }
        self.0.push(Stretch {
            state,
            lo: class,
            hi: class,
            target,
        });
    }
}

/// The reachable DFA, before states that cannot reach a match are pruned.
pub(super) struct Table {
    pub classes: [u8; 256],
    pub stride: usize,
    /// The transitions between state indices (state 0 is the start); a class without a
    /// stretch leads nowhere.
    pub trans: Stretches,
    pub accepting: Vec<bool>,
    /// Bytes the state sets and their index took (counted against the bookkeeping bound);
    /// reported by the compile-time test.
    #[cfg_attr(not(test), allow(dead_code))]
    pub work_bytes: usize,
}

/// Which bound stopped the construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The transition table would pass `table_limit` bytes.
    Table { states: usize, limit: usize },
    /// The state sets and the index over them would pass `work_limit` bytes.
    Work { states: usize, limit: usize },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Refusal::Table { states, limit } => write!(
                f,
                "determinization stopped after {states} DFA states: the transition table would \
                 pass {limit} bytes"
            ),
            Refusal::Work { states, limit } => write!(
                f,
                "determinization stopped after {states} DFA states: its state sets would pass \
                 {limit} bytes"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// A set of NFA state ids with O(1) insert, membership and clear.
struct SparseSet {
    dense: Vec<u32>,
    sparse: Vec<u32>,
}

impl SparseSet {
    fn new(capacity: usize) -> Self {
        SparseSet {
            dense: Vec::with_capacity(capacity),
            sparse: vec![0; capacity],
        }
    }

    /// Inserts `id`; false when it was already there.
    #[inline]
    fn insert(&mut self, id: u32) -> bool {
        let i = self.sparse[id as usize] as usize;
        if i < self.dense.len() && self.dense[i] == id {
            return false;
        }
        self.sparse[id as usize] = self.dense.len() as u32;
        self.dense.push(id);
        true
    }

    fn clear(&mut self) {
        self.dense.clear();
    }
}

#[inline]
fn hash_set(ids: &[u32]) -> u64 {
    // FxHash's step: a rotate, xor and multiply per word; sets are short (ab12: ~8 ids).
    let mut h = ids.len() as u64;
    for &id in ids {
        h = (h.rotate_left(5) ^ u64::from(id)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    // The multiply leaves the low bits weak, and slots are chosen by the low bits: fold the
    // high half in (without it ab12 probed ~2x longer).
    h ^ (h >> 32)
}

/// The DFA states found so far: their sets in one arena, and a hash index over them.
struct States {
    arena: Vec<u32>,
    /// State `s`'s set is `arena[starts[s]..starts[s + 1]]`.
    starts: Vec<u32>,
    /// Open addressing with linear probing; [`NONE`] is an empty slot. Kept under half full.
    slots: Vec<u32>,
}

impl States {
    fn new() -> Self {
        States {
            arena: Vec::new(),
            starts: vec![0],
            slots: vec![NONE; 64],
        }
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn set(&self, s: usize) -> &[u32] {
        &self.arena[self.starts[s] as usize..self.starts[s + 1] as usize]
    }

    /// Bytes counted against the bookkeeping bound.
    fn bytes(&self) -> usize {
        self.arena.len() * 4 + self.starts.len() * 4 + self.slots.len() * 4
    }

    /// The state for `set`, and whether it is new.
    fn intern(&mut self, set: &[u32]) -> (u32, bool) {
        let h = hash_set(set);
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == NONE {
                break;
            }
            if self.set(s as usize) == set {
                return (s, false);
            }
            i = (i + 1) & mask;
        }
        let id = self.len() as u32;
        self.slots[i] = id;
        self.arena.extend_from_slice(set);
        self.starts.push(self.arena.len() as u32);
        if self.len() * 2 > self.slots.len() {
            self.grow();
        }
        (id, true)
    }

    fn grow(&mut self) {
        let mut slots = vec![NONE; self.slots.len() * 2];
        let mask = slots.len() - 1;
        for s in 0..self.len() {
            // Hashes are recomputed rather than stored: 8 bytes less per state.
            let mut i = hash_set(self.set(s)) as usize & mask;
            while slots[i] != NONE {
                i = (i + 1) & mask;
            }
            slots[i] = s as u32;
        }
        self.slots = slots;
    }
}

/// Follows epsilon transitions from the ids in `seeds`, leaving the byte-consuming and match
/// states reached in `out`, sorted.
fn closure(
    nfa: &NFA,
    seeds: &[u32],
    seen: &mut SparseSet,
    stack: &mut Vec<u32>,
    out: &mut Vec<u32>,
) {
    seen.clear();
    stack.clear();
    out.clear();
    stack.extend(seeds.iter().rev());
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        match nfa.state(StateID::new_unchecked(id as usize)) {
            State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) | State::Match { .. } => {
                out.push(id)
            }
            State::Union { alternates } => {
                stack.extend(alternates.iter().rev().map(|s| s.as_u32()));
            }
            State::BinaryUnion { alt1, alt2 } => {
                stack.push(alt2.as_u32());
                stack.push(alt1.as_u32());
            }
            State::Capture { next, .. } => stack.push(next.as_u32()),
            // The caller sends NFAs with look-around to regex-automata; a thread stops here.
            State::Look { .. } | State::Fail => {}
        }
    }
    out.sort_unstable();
}

/// Determinizes `nfa` (which must have no `Look` states) from its anchored start.
///
/// `table_limit` bounds the transition table (4 bytes per state and byte class, all reachable
/// states counted), `work_limit` the state sets and their index.
pub(super) fn determinize(
    nfa: &NFA,
    table_limit: usize,
    work_limit: usize,
) -> Result<Table, Refusal> {
    debug_assert!(nfa.look_set_any().is_empty());
    let (classes, reps) = super::class_table(nfa.byte_classes());
    let stride = reps.len();

    let mut seen = SparseSet::new(nfa.states().len());
    let mut stack = Vec::new();
    let mut set = Vec::new();
    // Per NFA state, the DFA state (or NONE) that entering it alone leads to, once known
    // (4 bytes an NFA state, as `seen`): most classes enter one NFA state (a string's next
    // character, a literal's next byte), the same from many DFA states, and its closure
    // and set lookup were made again each time (the 294 DFA-backed files around the corpus
    // median: 59-60 -> 52-54 ms in all).
    const UNKNOWN: u32 = NONE - 1;
    let mut entering_one = vec![UNKNOWN; nfa.states().len()];
    // Per byte class, the NFA states entered on it from the current DFA state, and which
    // buckets hold any: most states read a few classes of
    // ~50, and visiting every bucket was half of this loop's time.
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); stride];
    let mut filled = BitSet256::default();
    let enter = |buckets: &mut [Vec<u32>], filled: &mut BitSet256, c: u8, next: u32| {
        filled.insert(c);
        buckets[usize::from(c)].push(next);
    };

    let mut states = States::new();
    closure(
        nfa,
        &[nfa.start_anchored().as_u32()],
        &mut seen,
        &mut stack,
        &mut set,
    );
    states.intern(&set);
    let mut trans = Stretches::default();
    let mut accepting = Vec::new();

    let mut current = 0;
    while current < states.len() {
        // Every state found gets a row (at most `stride` states ahead of `current`), and the
        // final table adds the dead row: refuse as soon as that passes the bound.
        if (states.len() + 1) * stride * 4 > table_limit {
            return Err(Refusal::Table {
                states: states.len(),
                limit: table_limit,
            });
        }
        if states.bytes() > work_limit {
            return Err(Refusal::Work {
                states: states.len(),
                limit: work_limit,
            });
        }
        let mut accepts = false;
        for &id in states.set(current) {
            // Byte classes are contiguous byte runs numbered in byte order, and every range in
            // the NFA starts and ends on a class boundary, so a range covers the classes
            // `classes[start]..=classes[end]`.
            match nfa.state(StateID::new_unchecked(id as usize)) {
                State::ByteRange { trans } => {
                    let (lo, hi) = (classes[trans.start as usize], classes[trans.end as usize]);
                    for c in lo..=hi {
                        enter(&mut buckets, &mut filled, c, trans.next.as_u32());
                    }
                }
                State::Sparse(sparse) => {
                    for t in sparse.transitions.iter() {
                        let (lo, hi) = (classes[t.start as usize], classes[t.end as usize]);
                        for c in lo..=hi {
                            enter(&mut buckets, &mut filled, c, t.next.as_u32());
                        }
                    }
                }
                State::Dense(dense) => {
                    for (c, &b) in reps.iter().enumerate() {
                        let next = dense.transitions[b as usize];
                        if next != StateID::ZERO {
                            enter(&mut buckets, &mut filled, c as u8, next.as_u32());
                        }
                    }
                }
                State::Match { .. } => accepts = true,
                _ => {}
            }
        }
        accepting.push(accepts);
        let row = std::mem::take(&mut filled);
        // The previous filled class and where it leads.
        let mut before: Option<(usize, u32)> = None;
        for c in row.iter().map(usize::from) {
            let target = match before {
                // Neighbouring classes one range covers reach the same set: one closure
                // (`.*[a-zA-Z0-9_-]{162}.*`, o40228: the closures were ~50 % of 28 ms).
                Some((b, t)) if b + 1 == c && buckets[c] == buckets[b] => Some(t),
                _ => match buckets[c][..] {
                    [q] if entering_one[q as usize] != UNKNOWN => {
                        Some(entering_one[q as usize]).filter(|&t| t != NONE)
                    }
                    _ => {
                        closure(nfa, &buckets[c], &mut seen, &mut stack, &mut set);
                        let t = (!set.is_empty()).then(|| states.intern(&set).0);
                        if let [q] = buckets[c][..] {
                            entering_one[q as usize] = t.unwrap_or(NONE);
                        }
                        t
                    }
                },
            };
            if let Some(t) = target {
                trans.add(current as u32, c as u8, t);
            }
            before = target.map(|t| (c, t));
        }
        for c in row.iter() {
            buckets[usize::from(c)].clear();
        }
        current += 1;
    }
    Ok(Table {
        classes,
        stride,
        trans,
        accepting,
        work_bytes: states.bytes(),
    })
}
