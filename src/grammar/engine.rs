//! The pushdown runtime: parse states, byte steps, and token masks over a vocabulary trie.
//!
//! A parse state is a set of stacks ("heads"), each a linked list of [`Frame`]s: the top
//! frame's DFA state, then the return states of the calls below it. Frames are persistent
//! (never changed once made) and carry a 128-bit hash of their whole stack, so equal stacks
//! are recognized in O(1) (duplicate heads are merged, and whole masks are cached by the hashes
//! of the heads).
//!
//! Steps run against an overlay: the committed frames of the sequence (read-only) plus a
//! scratch arena that a trie walk truncates as it backtracks. `advance` copies the frames its
//! new heads need into the committed arena, so a sequence keeps only the frames it uses.

use super::{BitSet256, Grammar, COUNTER_HORIZON, NONE, SLOW};
use crate::closing::GrammarClosing;
use crate::error::{Error, Result};
use crate::limits::MASK_CACHE_BYTES;
use crate::mask::{or_words, set_bit};
use crate::vocab::{Run, RunMemo, Trie, Vocabulary};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Below the bottom frame of a real stack: popping it ends the output.
pub(crate) const NIL: u32 = u32::MAX;
/// Below the base frame of a relative stack: the unknown caller (mask precomputation).
const CTX: u32 = u32::MAX - 1;
/// Frame ids with this bit live in the scratch arena.
const TEMP: u32 = 1 << 31;
const NIL_KEY: u128 = 0x6a09_e667_f3bc_c908_bb67_ae85_84ca_a73b;
const CTX_KEY: u128 = 0x3c6e_f372_fe94_f82b_a54f_f53a_5f1d_36f1;

/// [`Frame::count`] of a frame that is no counter's, or whose count is not known (a
/// relative stack): it steps by the static phase tables, which is all a token sees.
const UNCOUNTED: u32 = u32::MAX;

/// One stack frame: a DFA state and the frame below.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// Hash of the states and counts of this frame and every frame below it: equal keys,
    /// equal stacks.
    key: u128,
    /// [`Frame::key`] without the counts: every token steps such stacks alike (see
    /// [`super::Counter`]), so whole masks are cached by it.
    mask_key: u128,
    /// The bytes this frame, or a frame below it that the completed frames above return to,
    /// can take next: a step skips a stack whose `reach` lacks the byte without walking it.
    reach: BitSet256,
    state: u32,
    parent: u32,
    /// Items a counter's frame has matched, or [`UNCOUNTED`].
    count: u32,
    /// This frame and every frame below can complete without another byte.
    acc: bool,
}

#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[inline]
fn mix(parent: u128, state: u32) -> u128 {
    let (lo, hi) = (parent as u64, (parent >> 64) as u64);
    let s = u64::from(state);
    let a = fmix64(lo ^ s.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ hi.rotate_left(23));
    let b = fmix64(hi ^ s.wrapping_mul(0xc2b2_ae3d_27d4_eb4f) ^ lo.rotate_left(41) ^ 0x1656_67b1);
    (u128::from(b) << 64) | u128::from(a)
}

/// Work left in one step; each unit is one frame examined or made.
#[derive(Debug)]
pub(crate) struct Work {
    left: u64,
}

/// The work budget ran out.
#[derive(Debug)]
pub(crate) struct OutOfWork;

impl Work {
    pub(crate) fn new(units: u64) -> Self {
        Work { left: units }
    }

    pub(crate) fn unlimited() -> Self {
        Work { left: u64::MAX }
    }

    #[inline]
    fn tick(&mut self, n: u64) -> Result<(), OutOfWork> {
        if self.left < n {
            self.left = 0;
            return Err(OutOfWork);
        }
        self.left -= n;
        Ok(())
    }
}

/// The error for a step that ran out of work.
pub(crate) fn out_of_work(g: &Grammar, what: &str, heads: usize) -> Error {
    Error::limit_exceeded(format!(
        "guided_grammar needs more than the {}-unit work limit to {what} \
         ({heads} parses alive: the grammar is too ambiguous)",
        g.step_work
    ))
    .with_param("guided_grammar")
}

/// Committed frames plus a scratch arena.
struct Frames<'a> {
    base: &'a [Frame],
    temp: &'a mut Vec<Frame>,
    /// Keys of the heads a step has made, once there are more than a few (so merging
    /// duplicates stays O(1) per head however ambiguous the grammar).
    seen: HashSet<u128>,
}

impl Frames<'_> {
    #[inline]
    fn get(&self, id: u32) -> &Frame {
        if id & TEMP != 0 {
            &self.temp[(id & !TEMP) as usize]
        } else {
            &self.base[id as usize]
        }
    }

    #[inline]
    fn make(&mut self, g: &Grammar, state: u32, parent: u32, count: u32) -> u32 {
        let accepting = g.accepting[state as usize];
        let mut reach = *g.first(state);
        let (pkey, pmask_key, pacc) = match parent {
            NIL => (NIL_KEY, NIL_KEY, true),
            CTX => (CTX_KEY, CTX_KEY, true),
            p => {
                let f = self.get(p);
                if accepting {
                    reach.union_with(&f.reach);
                }
                (f.key, f.mask_key, f.acc)
            }
        };
        let mask_key = mix(pmask_key, state);
        let key = match count {
            UNCOUNTED if pkey == pmask_key => mask_key,
            UNCOUNTED => mix(pkey, state),
            k => mix(mix(pkey, state), k),
        };
        self.temp.push(Frame {
            key,
            mask_key,
            reach,
            state,
            parent,
            count,
            acc: pacc && accepting,
        });
        (self.temp.len() - 1) as u32 | TEMP
    }

    #[inline]
    fn add_head(&mut self, out: &mut Vec<u32>, from: usize, id: u32) {
        let key = self.get(id).key;
        let n = out.len() - from;
        if n < 16 {
            if out[from..].iter().all(|&h| self.get(h).key != key) {
                out.push(id);
            }
            return;
        }
        if self.seen.len() != n {
            let keys: Vec<u128> = out[from..].iter().map(|&h| self.get(h).key).collect();
            self.seen.clear();
            self.seen.extend(keys);
        }
        if self.seen.insert(key) {
            out.push(id);
        }
    }

    /// Steps the heads `pool[a..z]` by `byte`, appending the new heads (without duplicates)
    /// to `pool` (so they are `pool[z..]` after the call).
    fn step(
        &mut self,
        g: &Grammar,
        pool: &mut Vec<u32>,
        (a, z): (usize, usize),
        byte: u8,
        work: &mut Work,
    ) -> Result<(), OutOfWork> {
        let c = usize::from(g.classes[usize::from(byte)]);
        self.seen.clear();
        for k in a..z {
            let mut cur = pool[k];
            loop {
                let f = *self.get(cur);
                work.tick(1)?;
                if !f.reach.contains(byte) {
                    break;
                }
                let s = f.state as usize;
                let n = g.next_class(f.state, c);
                if n != NONE {
                    let id = if n == f.state {
                        cur
                    } else {
                        self.make(g, n, f.parent, UNCOUNTED)
                    };
                    self.add_head(pool, z, id);
                }
                for &(top, ps, pl) in g.expansion(f.state, c) {
                    work.tick(u64::from(pl) + 1)?;
                    let mut p = f.parent;
                    for (i, &r) in g.pushes[ps as usize..(ps + pl) as usize].iter().enumerate() {
                        // A counter's return after one more item: the first push replaces
                        // the counter's own frame, a later one is a counter just entered.
                        let (state, count) = match g.counter_of[r as usize] {
                            NONE => (r, UNCOUNTED),
                            _ if i == 0 && f.count == UNCOUNTED => (r, UNCOUNTED),
                            c => {
                                // Saturates short of the sentinel: 4 billion items
                                // is past any output's length limit.
                                let k = if i == 0 {
                                    f.count.saturating_add(1).min(UNCOUNTED - 1)
                                } else {
                                    1
                                };
                                (g.counters[c as usize].phase(k), k)
                            }
                        };
                        p = self.make(g, state, p, count);
                    }
                    let id = self.make(g, top, p, UNCOUNTED);
                    self.add_head(pool, z, id);
                }
                if g.accepting[s] && f.parent < CTX {
                    cur = f.parent;
                } else {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The level of the heads `pool[from..]`: factored when they share their top state (the
    /// parents are then appended to `pool`), general otherwise.
    fn level(&self, pool: &mut Vec<u32>, from: usize) -> (Level, u32) {
        let top = self.get(pool[from]).state;
        if pool[from..].iter().all(|&h| self.get(h).state == top) {
            let start = pool.len();
            let (mut below, mut pacc) = (BitSet256::default(), false);
            for k in from..start {
                let parent = self.get(pool[k]).parent;
                match parent {
                    NIL | CTX => pacc = true,
                    p => {
                        let f = self.get(p);
                        below.union_with(&f.reach);
                        pacc |= f.acc;
                    }
                }
                pool.push(parent);
            }
            let lv = Level {
                start,
                end: pool.len(),
                below,
                pacc,
                temp: self.temp.len(),
                allowed: BitSet256::default(),
            };
            return (lv, top);
        }
        let lv = Level {
            start: from,
            end: pool.len(),
            below: BitSet256::default(),
            pacc: pool[from..].iter().any(|&h| self.get(h).acc),
            temp: self.temp.len(),
            allowed: self.allowed(&pool[from..]),
        };
        (lv, NONE)
    }

    /// Bytes some head can take next (popping completed frames as needed).
    #[inline]
    fn allowed(&self, heads: &[u32]) -> BitSet256 {
        let mut set = BitSet256::default();
        for &h in heads {
            set.union_with(&self.get(h).reach);
        }
        set
    }

    /// Copies the scratch frames that `heads` need into `fresh`, numbering them from
    /// `base_len` (where `fresh` will be appended to the committed arena); returns the heads'
    /// committed ids.
    fn commit(&self, heads: &[u32], base_len: u32, fresh: &mut Vec<Frame>) -> Vec<u32> {
        let mut map: HashMap<u32, u32> = HashMap::new();
        let scratch = |id: u32| id < CTX && id & TEMP != 0;
        heads
            .iter()
            .map(|&h| {
                let mut chain = Vec::new();
                let mut cur = h;
                while scratch(cur) && !map.contains_key(&cur) {
                    chain.push(cur);
                    cur = self.get(cur).parent;
                }
                for &t in chain.iter().rev() {
                    let mut f = *self.get(t);
                    if scratch(f.parent) {
                        f.parent = map[&f.parent];
                    }
                    fresh.push(f);
                    map.insert(t, base_len + fresh.len() as u32 - 1);
                }
                if scratch(h) {
                    map[&h]
                } else {
                    h
                }
            })
            .collect()
    }
}

/// One sequence's parse: the committed frames and the heads after each token.
#[derive(Debug, Clone)]
pub(crate) struct Parse {
    frames: Vec<Frame>,
    heads: Vec<u32>,
    /// The start, then one entry per accepted token: (heads start, heads end, frames length).
    history: Vec<(u32, u32, u32)>,
}

impl Parse {
    pub(crate) fn new(g: &Grammar) -> Self {
        let mut temp = Vec::new();
        Frames {
            base: &[],
            temp: &mut temp,
            seen: HashSet::new(),
        }
        .make(
            g,
            g.entry,
            NIL,
            if g.counter_of[g.entry as usize] == NONE {
                UNCOUNTED
            } else {
                0
            },
        );
        Parse {
            frames: temp,
            heads: vec![0],
            history: vec![(0, 1, 1)],
        }
    }

    /// The current heads.
    pub(crate) fn heads(&self) -> &[u32] {
        let &(a, z, _) = self.history.last().expect("the start is always there");
        &self.heads[a as usize..z as usize]
    }

    /// Whether the output so far is a sentence.
    pub(crate) fn is_accepting(&self) -> bool {
        self.heads().iter().any(|&h| self.frames[h as usize].acc)
    }

    /// Undoes the last `k` advances (`k <= steps()`).
    pub(crate) fn rollback(&mut self, k: usize) {
        self.history.truncate(self.history.len() - k);
        let &(_, z, f) = self.history.last().expect("the start is always there");
        self.heads.truncate(z as usize);
        self.frames.truncate(f as usize);
    }

    /// The heads after `bytes` from the current state, as `pool` in a scratch arena; empty
    /// when the bytes leave the language.
    fn run(
        &self,
        g: &Grammar,
        bytes: &[u8],
        temp: &mut Vec<Frame>,
        work: &mut Work,
    ) -> Result<Vec<u32>, OutOfWork> {
        let mut fr = Frames {
            base: &self.frames,
            temp,
            seen: HashSet::new(),
        };
        let mut pool = self.heads().to_vec();
        for &b in bytes {
            let z = pool.len();
            fr.step(g, &mut pool, (0, z), b, work)?;
            pool.drain(..z);
            if pool.is_empty() {
                break;
            }
        }
        Ok(pool)
    }

    /// Whether `bytes` keep the parse alive.
    pub(crate) fn accepts(
        &self,
        g: &Grammar,
        bytes: &[u8],
        work: &mut Work,
    ) -> Result<bool, OutOfWork> {
        let mut temp = Vec::new();
        Ok(!self.run(g, bytes, &mut temp, work)?.is_empty())
    }

    /// Advances by `bytes`; `Ok(false)`, and no change, when they leave the language.
    pub(crate) fn advance(
        &mut self,
        g: &Grammar,
        bytes: &[u8],
        work: &mut Work,
    ) -> Result<bool, OutOfWork> {
        let mut temp = Vec::new();
        let heads = self.run(g, bytes, &mut temp, work)?;
        if heads.is_empty() {
            return Ok(false);
        }
        let base_len = self.frames.len() as u32;
        let mut fresh = Vec::new();
        let ids = Frames {
            base: &self.frames,
            temp: &mut temp,
            seen: HashSet::new(),
        }
        .commit(&heads, base_len, &mut fresh);
        self.frames.extend_from_slice(&fresh);
        let a = self.heads.len() as u32;
        self.heads.extend_from_slice(&ids);
        self.history
            .push((a, self.heads.len() as u32, self.frames.len() as u32));
        Ok(true)
    }

    /// The length of a shortest completion: over the heads, the least sum over a stack's
    /// frames of what each needs to complete its rule.
    pub(crate) fn closing_len(&self, g: &Grammar, c: &GrammarClosing) -> Option<u64> {
        self.closing_head(g, c).map(|(_, len)| len)
    }

    /// A shortest completion, when it is at most `cap` bytes: the cheapest head's frames,
    /// each completed in turn from the top.
    pub(crate) fn closing_bytes(
        &self,
        g: &Grammar,
        c: &GrammarClosing,
        cap: usize,
    ) -> Option<Vec<u8>> {
        let (head, len) = self.closing_head(g, c)?;
        if len > cap as u64 {
            return None;
        }
        let mut out = Vec::with_capacity(len as usize);
        let mut id = head;
        while id != NIL {
            let f = &self.frames[id as usize];
            let count = (f.count != UNCOUNTED).then_some(f.count);
            if !c.write(g, f.state, count, &mut out, cap) {
                return None;
            }
            id = f.parent;
        }
        Some(out)
    }

    /// The head with the shortest completion, and its length.
    fn closing_head(&self, g: &Grammar, c: &GrammarClosing) -> Option<(u32, u64)> {
        let stack_len = |mut id: u32| {
            let mut total = 0u64;
            while id != NIL {
                let f = &self.frames[id as usize];
                let own = if f.count != UNCOUNTED {
                    c.counter_len(g, f.state, f.count)
                } else {
                    c.state_len(f.state)
                };
                total = total.saturating_add(own?);
                id = f.parent;
            }
            Some(total)
        };
        self.heads()
            .iter()
            .filter_map(|&h| Some((h, stack_len(h)?)))
            .min_by_key(|&(_, len)| len)
    }

    /// The bytes that must come next: while the output is not complete and exactly one byte
    /// keeps it alive (at most `limit` bytes).
    pub(crate) fn forced_bytes(&self, g: &Grammar, limit: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut temp = Vec::new();
        let mut fr = Frames {
            base: &self.frames,
            temp: &mut temp,
            seen: HashSet::new(),
        };
        let mut work = Work::new(g.step_work);
        let mut pool = self.heads().to_vec();
        while out.len() < limit {
            if pool.iter().any(|&h| fr.get(h).acc) {
                break;
            }
            let allowed = fr.allowed(&pool);
            let Some(b) = allowed.only() else { break };
            let z = pool.len();
            if fr.step(g, &mut pool, (0, z), b, &mut work).is_err() {
                break;
            }
            pool.drain(..z);
            if pool.is_empty() {
                break;
            }
            out.push(b);
        }
        out
    }
}

/// Per DFA state, over one vocabulary: the tokens allowed whatever is below the frame, and the
/// trie nodes after which the frame's rule can complete (whose subtrees need the real stack).
#[derive(Debug)]
struct StateMasks {
    accepted: Box<[u32]>,
    exits: Box<[u32]>,
}

impl StateMasks {
    fn bytes(&self) -> usize {
        self.accepted.len() * 4 + self.exits.len() * 4 + 64
    }
}

/// A state's exits (see [`StateMasks`]) against a run of the frame below: the tokens of the
/// exits whose subtree the run covers, and the other exits.
#[derive(Debug)]
struct ExitSplit {
    covered: Box<[u32]>,
    rest: Box<[u32]>,
}

/// Marks in `covered` the tokens of the `exits` whose subtree `run` covers; the other exits.
fn split_exits(trie: &Trie, run: Run, exits: &[u32], covered: &mut [u32]) -> Vec<u32> {
    let mut rest = Vec::new();
    for &n in exits {
        let i = n as usize;
        if run.covers(trie.below(i), trie.height(i)) {
            for &t in trie.subtree_tokens(i) {
                set_bit(covered, t);
            }
        } else {
            rest.push(n);
        }
    }
    rest
}

/// The heads of a trie-walk level, shared by the deeper levels that only move the top
/// state: where they are, the scratch arena length after making them, and what the walk
/// needs to know about them without looking at frames.
#[derive(Debug, Clone, Copy, Default)]
struct Level {
    /// General: the heads are `pool[start..end]`, `allowed` the bytes they can take and
    /// `pacc` whether one can complete. Factored: every head is a frame of the depth's top
    /// state over one of the parents `pool[start..end]`, which are not made until a byte
    /// needs them; `below` is the union of the parents' `reach` and `pacc` whether some parent
    /// can complete.
    start: usize,
    end: usize,
    below: BitSet256,
    pacc: bool,
    temp: usize,
    allowed: BitSet256,
}

/// Subtrees taken whole (tests check that theirs are).
#[cfg(test)]
static SKIPS: AtomicUsize = AtomicUsize::new(0);

/// The [`Trie::byte_group`]s of the characters that can start with a byte of `set`.
fn groups(set: &BitSet256) -> u64 {
    set.iter().fold(0, |out, b| out | Trie::byte_group(b))
}

/// The [`Run`] of every rule-DFA state (within its rule, and into the calls of rules in
/// `leaf` ([`next_into_calls`]): a return ends a run, and another call ends it unless `seeds`
/// gives the calling state a run, which then stays); `memo` keeps the states' successors for
/// the next call.
fn state_runs(
    g: &Grammar,
    leaf: &[bool],
    may_live: &[u64],
    seeds: &[Option<Run>],
    memo: &mut RunMemo,
) -> Vec<Run> {
    let runs: Vec<std::cell::Cell<Option<Run>>> =
        seeds.iter().map(|&r| std::cell::Cell::new(r)).collect();
    for t in 0..g.state_count() as u32 {
        Trie::run(
            t,
            NONE,
            |s, b| next_into_calls(g, leaf, s, b),
            |b| g.classes[usize::from(b)],
            |s| may_live[g.first_of[s as usize] as usize],
            |s| runs[s as usize].get(),
            |s| seeds[s as usize],
            // The first run stored for a state stays (any is right).
            |s, r| {
                let cell = &runs[s as usize];
                cell.set(Some(cell.get().unwrap_or(r)));
            },
            memo,
        );
    }
    runs.iter().map(|r| r.get().unwrap_or(Run::NONE)).collect()
}

/// Per rule, whether none of its states makes a call (a string's characters, a number).
fn leaf_rules(g: &Grammar) -> Vec<bool> {
    let mut leaf = vec![true; g.call_start.len()];
    for s in 0..g.state_count() {
        if !g.calls(s as u32).is_empty() {
            leaf[g.rule_of[s] as usize] = false;
        }
    }
    leaf
}

/// `s`'s state after byte `b` within its rule, or, where only a call of `s` reads `b` and
/// the callee is a `leaf` rule, the callee's state after it: a run may go on into the call
/// (a frame may enter it), so a key position that reads its listed letters itself and
/// hands any other character to the string rule takes the string's characters. On the
/// corpus, two runs each: cold masks over 100 us 12,903 / 13,191 steps -> 7,454 / 7,794,
/// mask p99 109 / 112 -> 79 / 81 us, for compile p99 8.7 / 9.0 -> 9.6 / 9.9 ms (the loop
/// searches see the callees' states). Only leaf callees: entering any callee let the
/// searches wander through the calls of the grammar's large rules (p99 12.6 ms, same masks).
fn next_into_calls(g: &Grammar, leaf: &[bool], s: u32, b: u8) -> u32 {
    let n = g.next_in_rule(s, b);
    if n != NONE || !g.call_first(s).contains(b) {
        return n;
    }
    g.calls(s)
        .iter()
        .filter(|&&(callee, _)| leaf[callee as usize])
        .map(|&(callee, _)| g.next_in_rule(g.call_start[callee as usize], b))
        .find(|&m| m != NONE)
        .unwrap_or(NONE)
}

/// [`state_runs`] through calls: a state that takes a callee's run ([`runs_through_calls`])
/// seeds the runs of the states before it in its rule, and those reach its callers' calls in
/// turn, a few rounds deep. A counted string written as a chain of rules (`upto5 ::=
/// char{0,15} | char{16} upto4`) has one state per character, each calling the next rule
/// 16 characters on: within its rule alone a position's run ends at that call, so its first
/// mask walked every token longer than the characters left in the rule with the real
/// frames (a `maxLength: 255` string's cold masks ~2 ms each, ~40 us with the whole run).
pub(super) fn grammar_runs(g: &Grammar) -> Vec<Run> {
    grammar_runs_entering(g, &leaf_rules(g))
}

/// [`grammar_runs`], entering the calls of the rules in `leaf` ([`next_into_calls`]).
fn grammar_runs_entering(g: &Grammar, leaf: &[bool]) -> Vec<Run> {
    // A state takes no byte outside its first bytes, its calls' included.
    let may_live: Vec<u64> = g.byte_sets.iter().map(Trie::groups_within).collect();
    grammar_runs_reading(g, leaf, &may_live)
}

/// [`grammar_runs_entering`], reading at each state only the character groups that
/// `may_live` (by [`Grammar::first_of`] set) holds ([`Trie::run`]).
fn grammar_runs_reading(g: &Grammar, leaf: &[bool], may_live: &[u64]) -> Vec<Run> {
    /// Each round reaches one rule further: 4 rules of 16 characters pass most tokens'
    /// length.
    const ROUNDS: usize = 4;
    let mut memo = RunMemo::with_capacity(g.state_count());
    let mut seeds: Vec<Option<Run>> = vec![None; g.state_count()];
    // A spliced grammar's runs are known: its states call only its own rules.
    let known = g.spliced.as_ref().map_or(g.state_count(), |(first, runs)| {
        for (seed, &r) in seeds[*first as usize..].iter_mut().zip(runs.iter()) {
            *seed = Some(r);
        }
        *first as usize
    });
    let mut through = Vec::new();
    // Per rule, the groups of the characters after which a call of it can complete: the
    // same every round.
    let mut one_char: Vec<Option<u64>> = vec![None; g.call_start.len()];
    for _ in 0..ROUNDS {
        let own = state_runs(g, leaf, may_live, &seeds, &mut memo);
        through = runs_through_calls(g, own.clone(), known, may_live, &mut one_char);
        let mut changed = false;
        for (s, (&t, &o)) in through.iter().zip(&own).enumerate() {
            if t != o {
                seeds[s] = Some(t);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    through
}

/// `own` ([`state_runs`]), each state's run replaced by a longer one that a call gives it,
/// when that takes every string the own run takes, or more character groups (a string
/// position whose own run is the closing `"`, one character, takes the next characters' run
/// instead: with the character a call, as when inlining passed the automaton limit, its
/// cold masks walked every string token with frames, ~10 ms at 49k tokens, ~0.2 ms with the
/// run), and at least as far:
/// - the run of the callee's start: a frame may enter the call instead of moving, and a
///   string the callee's start absorbs keeps the callee's frame alive without returning. The
///   state between two blocks of a counted string (`block{0,62}`, 16 characters a block)
///   only calls the next block, so its own run is empty; with the block's, the exits after
///   a block are mostly taken whole (10,031 of 10,041 at one step of a `maxLength: 1024`
///   string) instead of walked with the real stack;
/// - one character more than the return state's run, for the characters after which the
///   callee can complete: a string character kept as a rule (`char{0,255}`, when inlining it
///   passed the automaton limit) is a call per character, and each position's run is then
///   the rest of the string instead of one character.
///
/// `one_char` keeps, per rule, the groups of the characters after which a call of it can
/// complete; `may_live` is [`state_runs`]'. The states from `known` on (a spliced grammar's,
/// [`Grammar::spliced`]) keep their runs.
fn runs_through_calls(
    g: &Grammar,
    own: Vec<Run>,
    known: usize,
    may_live: &[u64],
    one_char: &mut [Option<u64>],
) -> Vec<Run> {
    let mut runs = own;
    // A chain of calls into calls (a block of blocks), or of one-character calls (ordered
    // like the characters, hence the reverse order), is followed this many passes.
    for _ in 0..8 {
        let mut changed = false;
        for s in (0..known).rev() {
            for &(callee, ret) in g.calls(s as u32) {
                let start = g.call_start[callee as usize];
                let chars = *one_char[callee as usize].get_or_insert_with(|| {
                    Trie::groups_to(
                        start,
                        NONE,
                        |s, b| g.next_in_rule(s, b),
                        |b| g.classes[usize::from(b)],
                        may_live[g.first_of[start as usize] as usize],
                        |n| g.accepting[n as usize],
                    )
                });
                let then_ret = match chars {
                    0 => Run::NONE,
                    _ => runs[ret as usize].after_one(chars),
                };
                for r in [runs[start as usize], then_ret] {
                    let mine = runs[s];
                    // A run that takes all the state's own, or more groups at least as far.
                    let wider = r.groups.count_ones() > mine.groups.count_ones();
                    if r != mine
                        && (r.groups & mine.groups == mine.groups || wider)
                        && r.len >= mine.len
                    {
                        runs[s] = r;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    runs
}

/// Whole token masks by the sorted stack hashes of a parse state.
type MaskCache = HashMap<Box<[u128]>, Box<[u32]>>;

/// A grammar bound to a vocabulary, with its mask caches; shared by a request's matchers.
#[derive(Debug)]
pub(crate) struct Index {
    grammar: Grammar,
    vocab: Arc<Vocabulary>,
    words: usize,
    states: Vec<OnceLock<Arc<StateMasks>>>,
    /// Whole masks by the sorted stack hashes of a parse state.
    full: Mutex<MaskCache>,
    /// Masks of a lone frame below a depth-1 trie node, by (state, node).
    below: Mutex<HashMap<(u32, u32), Arc<StateMasks>>>,
    /// The exits of a state split by the run of the frame below, by (state, run).
    exit_splits: Mutex<HashMap<(u32, Run), Arc<ExitSplit>>>,
    cached_bytes: AtomicUsize,
    /// [`grammar_runs`] (all [`Run::NONE`] when subtree skips are off, for tests).
    runs: Vec<Run>,
    /// With counters, the text tokens longer than [`COUNTER_HORIZON`] bytes: they can see
    /// past a phase's horizon, so each mask checks them with the exact counts.
    long_tokens: Vec<crate::vocab::TokenId>,
    /// A counter entered afresh can be seen past ([`super::Counter::sees_past`] at count 0:
    /// far below its `min`), so a token may reach past a horizon from any stack: every
    /// mask checks the long tokens.
    long_tokens_always: bool,
}

impl Index {
    pub(crate) fn new(grammar: Grammar, vocab: Arc<Vocabulary>) -> Self {
        let states = (0..grammar.state_count())
            .map(|_| OnceLock::new())
            .collect();
        let words = crate::mask::words_for(vocab.len());
        let runs = grammar_runs(&grammar);
        let long_tokens = if grammar.counters.is_empty() {
            Vec::new()
        } else {
            (0..vocab.len() as crate::vocab::TokenId)
                .filter(|&t| vocab.is_text(t) && vocab.bytes(t).len() > COUNTER_HORIZON as usize)
                .collect()
        };
        let longest = vocab.trie().max_depth() as u32;
        let long_tokens_always = grammar.counters.iter().any(|c| c.sees_past(0, longest));
        Index {
            runs,
            long_tokens,
            long_tokens_always,
            grammar,
            vocab,
            words,
            states,
            full: Mutex::new(HashMap::new()),
            below: Mutex::new(HashMap::new()),
            exit_splits: Mutex::new(HashMap::new()),
            cached_bytes: AtomicUsize::new(0),
        }
    }

    pub(crate) fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// Turns the subtree skips off: every walk visits each live node (tests compare both).
    #[cfg(test)]
    fn without_skips(mut self) -> Self {
        self.runs.fill(Run::NONE);
        self
    }

    /// Reserves `bytes` of the mask cache budget; false when it is spent.
    fn reserve(&self, bytes: usize) -> bool {
        if self.cached_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes <= MASK_CACHE_BYTES {
            true
        } else {
            self.cached_bytes.fetch_sub(bytes, Ordering::Relaxed);
            false
        }
    }

    /// Number of DFA states whose masks are cached, and of whole masks cached.
    pub(crate) fn cached(&self) -> (usize, usize) {
        let states = self.states.iter().filter(|s| s.get().is_some()).count();
        let full = self.full.lock().unwrap_or_else(|e| e.into_inner()).len();
        (states, full)
    }

    fn state_masks(&self, s: u32) -> Result<Arc<StateMasks>> {
        let cell = &self.states[s as usize];
        if let Some(m) = cell.get() {
            return Ok(m.clone());
        }
        let m = Arc::new(self.compute_at(s, None)?);
        if self.reserve(m.bytes()) {
            let _ = cell.set(m.clone());
        }
        Ok(m)
    }

    /// The masks of a lone frame of `s` after the bytes of trie node `node` (at depth 1) were
    /// consumed by whatever came before: shared by every state that reaches `s` on that byte.
    fn masks_below(&self, s: u32, node: usize) -> Result<Arc<StateMasks>> {
        let key = (s, node as u32);
        if let Some(m) = self
            .below
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(m.clone());
        }
        let m = Arc::new(self.compute_at(s, Some(node))?);
        if self.reserve(m.bytes() + 32) {
            self.below
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, m.clone());
        }
        Ok(m)
    }

    /// `A(s)` and the exit nodes of `s` (below `root` when given, a depth-1 trie node): the
    /// tokens a lone frame of `s` over an unknown caller can consume without returning, and
    /// the trie nodes after which it can return with the token going on.
    ///
    /// The first byte either moves within `s`'s rule or enters a called rule `R`. For a call,
    /// the masks of `R`'s start are reused as they are (cached and shared by every caller of
    /// `R`), and only the subtrees after `R` can complete are walked again, from `R`'s return
    /// state. For a move within the rule to `s'` on a first byte with a large subtree, the
    /// subtree's masks are those of `s'` below that node, cached too: after ` ` in
    /// `"=" ws expr` they are `expr`'s below ` `, walked once for every position that calls
    /// `expr` after whitespace, and an identifier's first and later letters share theirs.
    fn compute_at(&self, s: u32, root: Option<usize>) -> Result<StateMasks> {
        /// Subtrees at least this big (trie nodes) below a first byte are cached.
        const SHARED_SUBTREE: usize = 2048;
        let g = &self.grammar;
        let trie = self.vocab.trie();
        // A walk visits each trie node at most once per head; the budget scales with the trie.
        let mut work = Work::new(g.step_work + 4 * trie.node_len() as u64);
        let oow = |_| out_of_work(g, "precompute the masks of one grammar position", 1);
        let follow = g.follow[g.rule_of[s as usize] as usize];
        let mut accepted = vec![0u32; self.words];
        let mut exits = Vec::new();
        let mut walker = Walker::new(trie.max_depth());
        let lone = |walker: &mut Walker, state: u32| {
            walker.temp.clear();
            Frames {
                base: &[],
                temp: &mut walker.temp,
                seen: HashSet::new(),
            }
            .make(g, state, CTX, UNCOUNTED)
        };
        if let Some(n) = root {
            // The frame itself may complete right after the node.
            if g.accepting[s as usize] && trie.any_child(n, |b| follow.contains(b)) {
                exits.push(n as u32);
            }
        }
        for &(callee, ret) in g.calls(s) {
            let start = g.call_start[callee as usize];
            let m = match root {
                None => self.state_masks(start)?,
                Some(n) => self.masks_below(start, n)?,
            };
            or_words(&mut accepted, &m.accepted);
            for &n in m.exits.iter() {
                let head = lone(&mut walker, ret);
                walker
                    .walk(
                        g,
                        &self.runs,
                        trie,
                        &[],
                        Some(n as usize),
                        None,
                        &[head],
                        None,
                        &mut accepted,
                        Some((&follow, &mut exits)),
                        &mut work,
                    )
                    .map_err(oow)?;
            }
        }
        match root {
            Some(n) => {
                let head = lone(&mut walker, s);
                walker
                    .walk(
                        g,
                        &self.runs,
                        trie,
                        &[],
                        Some(n),
                        None,
                        &[head],
                        Some(s),
                        &mut accepted,
                        Some((&follow, &mut exits)),
                        &mut work,
                    )
                    .map_err(oow)?;
            }
            None => {
                // The tokens of `s`'s run come as one shared set (a counted string's ~45k
                // of 49k, ~50 us to mark one by one at each of its positions), and the
                // walks leave them out.
                let from = trie.normalized(self.runs[s as usize]);
                if from != Run::NONE {
                    or_words(&mut accepted, &trie.run_tokens(from, self.words));
                }
                // The first bytes that move within the rule, each with its subtree.
                let mut i = 0;
                while i < trie.node_len() {
                    let (byte, _, next) = trie.node(i);
                    let c = usize::from(g.classes[usize::from(byte)]);
                    let n = g.next_class(s, c);
                    let on_path = from.path_chars(0, byte);
                    if n != NONE && !from.covers_from(on_path, trie.below(i), trie.height(i)) {
                        work.tick(1).map_err(oow)?;
                        for &t in trie.tokens(i) {
                            set_bit(&mut accepted, t);
                        }
                        // A subtree walked for `n` alone is shared by every state that
                        // moves to `n` on that byte, so it cannot leave out `s`'s run.
                        if next - i > SHARED_SUBTREE && from == Run::NONE {
                            let m = self.masks_below(n, i)?;
                            or_words(&mut accepted, &m.accepted);
                            exits.extend_from_slice(&m.exits);
                        } else if i + 1 < next {
                            let head = lone(&mut walker, n);
                            walker
                                .walk(
                                    g,
                                    &self.runs,
                                    trie,
                                    &[],
                                    Some(i),
                                    Some((from, on_path)),
                                    &[head],
                                    None,
                                    &mut accepted,
                                    Some((&follow, &mut exits)),
                                    &mut work,
                                )
                                .map_err(oow)?;
                        }
                    }
                    i = next;
                }
            }
        }
        exits.sort_unstable();
        exits.dedup();
        Ok(StateMasks {
            accepted: accepted.into_boxed_slice(),
            exits: exits.into_boxed_slice(),
        })
    }

    /// Fills `out` (the vocabulary's mask words) with the tokens allowed after `parse`.
    pub(crate) fn fill(&self, parse: &Parse, out: &mut [u32]) -> Result<()> {
        let heads = parse.heads();
        let mut key: Vec<u128> = heads
            .iter()
            .map(|&h| parse.frames[h as usize].mask_key)
            .collect();
        key.sort_unstable();
        // A long token that may see past a counter's horizon is checked with the exact
        // counts below. Unless every mask is checked so, such a mask is not cached: a mask
        // served unchecked must be right for every count of its phases.
        let exact_long = !self.long_tokens.is_empty()
            && (self.long_tokens_always || heads.iter().any(|&h| self.sees_past_horizon(parse, h)));
        let cacheable = self.long_tokens_always || !exact_long;
        let cached = self
            .full
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key[..])
            .map(|m| out.copy_from_slice(m))
            .is_some();
        if !cached {
            let mut work = Work::new(self.grammar.step_work);
            self.compute(parse, out, &mut work)
                .map_err(|_| out_of_work(&self.grammar, "compute one token mask", heads.len()))??;
            if cacheable && self.reserve(self.words * 4 + key.len() * 16 + 64) {
                self.full
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.into_boxed_slice(), out.to_vec().into_boxed_slice());
            }
        }
        if exact_long {
            for &t in &self.long_tokens {
                let mut work = Work::new(self.grammar.step_work);
                let fits = parse
                    .accepts(&self.grammar, self.vocab.bytes(t), &mut work)
                    .unwrap_or(false);
                let (w, bit) = (t as usize / 32, 1u32 << (t % 32));
                out[w] = if fits { out[w] | bit } else { out[w] & !bit };
            }
        }
        Ok(())
    }

    /// Whether a token of the vocabulary may step the stack of head `h` unlike the phase
    /// tables do: some counter on it ([`super::Counter::sees_past`]).
    fn sees_past_horizon(&self, parse: &Parse, h: u32) -> bool {
        let g = &self.grammar;
        let longest = self.vocab.trie().max_depth() as u32;
        let mut cur = h;
        while cur < CTX {
            let f = &parse.frames[cur as usize];
            if f.key == f.mask_key {
                // No count here or below.
                return false;
            }
            if f.count != UNCOUNTED
                && g.counters[g.counter_of[f.state as usize] as usize].sees_past(f.count, longest)
            {
                return true;
            }
            cur = f.parent;
        }
        false
    }

    fn compute(
        &self,
        parse: &Parse,
        out: &mut [u32],
        work: &mut Work,
    ) -> Result<Result<()>, OutOfWork> {
        let frames = &parse.frames;
        out.fill(0);
        // The heads, and every frame below one that can complete before the next byte.
        let mut eff: Vec<u32> = Vec::new();
        let mut keys: HashSet<u128> = HashSet::new();
        for &h in parse.heads() {
            let mut cur = h;
            loop {
                work.tick(1)?;
                let f = frames[cur as usize];
                if keys.insert(f.key) {
                    eff.push(cur);
                }
                if self.grammar.accepting[f.state as usize] && f.parent < CTX {
                    cur = f.parent;
                } else {
                    break;
                }
            }
        }
        let mut seen_states: Vec<u32> = Vec::new();
        let mut masks = Vec::with_capacity(eff.len());
        for &h in &eff {
            let s = frames[h as usize].state;
            let m = match self.state_masks(s) {
                Ok(m) => m,
                Err(e) => return Ok(Err(e)),
            };
            if !seen_states.contains(&s) {
                // One unit per 64 mask words ORed.
                work.tick(self.words as u64 / 64 + 1)?;
                seen_states.push(s);
                or_words(out, &m.accepted);
            }
            masks.push(m);
        }
        for (&h, m) in eff.iter().zip(&masks) {
            let parent = frames[h as usize].parent;
            if parent < CTX && !m.exits.is_empty() {
                let s = frames[h as usize].state;
                self.walk_exits(parse, s, parent, &m.exits, out, work)?;
            }
        }
        if parse.is_accepting() {
            for &t in self.vocab.eos() {
                set_bit(out, t);
            }
        }
        Ok(Ok(()))
    }

    /// Walks the subtrees below each exit node of state `s` with the stack `parent`, marking
    /// the tokens it can consume.
    fn walk_exits(
        &self,
        parse: &Parse,
        s: u32,
        parent: u32,
        exits: &[u32],
        out: &mut [u32],
        work: &mut Work,
    ) -> Result<(), OutOfWork> {
        /// Past this many exits, their split by the parent's run is cached.
        const SPLIT_EXITS: usize = 64;
        let trie = self.vocab.trie();
        // The walk's own first test, made here: most exits of a counted string's block are
        // covered by the run of the state after the block (10,031 of 10,041 at one step of a
        // `maxLength: 1024` string), and a walk costs a few hundred nanoseconds to set up.
        // Every block count has its own parent state but the same run, so the covered exits'
        // tokens are one set per (state, run): ~150 us of marking at each step before.
        let run = self.runs[parse.frames[parent as usize].state as usize];
        let (split, few);
        // An empty run covers nothing: an exit has children.
        let rest: &[u32] = if run == Run::NONE {
            exits
        } else if exits.len() > SPLIT_EXITS {
            split = self.exit_split(s, run, exits);
            work.tick(self.words as u64 / 64 + 1)?;
            or_words(out, &split.covered);
            &split.rest
        } else {
            few = split_exits(trie, run, exits, out);
            work.tick((exits.len() - few.len()) as u64)?;
            &few
        };
        let mut walker = Walker::new(trie.max_depth());
        for &n in rest {
            walker.temp.clear();
            walker.walk(
                &self.grammar,
                &self.runs,
                trie,
                &parse.frames,
                Some(n as usize),
                None,
                &[parent],
                None,
                out,
                None,
                work,
            )?;
        }
        Ok(())
    }

    /// [`ExitSplit`] of state `s`'s `exits` by `run`, cached within the mask budget.
    fn exit_split(&self, s: u32, run: Run, exits: &[u32]) -> Arc<ExitSplit> {
        let key = (s, run);
        let cache = &self.exit_splits;
        if let Some(e) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return e.clone();
        }
        let mut covered = vec![0u32; self.words];
        let rest = split_exits(self.vocab.trie(), run, exits, &mut covered);
        let e = Arc::new(ExitSplit {
            covered: covered.into_boxed_slice(),
            rest: rest.into_boxed_slice(),
        });
        if self.reserve(self.words * 4 + e.rest.len() * 4 + 64) {
            cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, e.clone());
        }
        e
    }
}

/// Scratch space of a trie walk: per depth, the top state (factored levels) and the index of
/// its level in `levels`; the heads pool and the scratch frames.
struct Walker {
    tops: Vec<u32>,
    at: Vec<usize>,
    /// Per depth, the characters on the `from` run's path ([`Run::path_chars`]).
    chars: Vec<u16>,
    levels: Vec<Level>,
    pool: Vec<u32>,
    temp: Vec<Frame>,
}

impl Walker {
    fn new(max_depth: usize) -> Self {
        Walker {
            tops: vec![NONE; max_depth + 1],
            at: vec![0; max_depth + 1],
            chars: vec![Run::OFF_PATH; max_depth + 1],
            levels: Vec::new(),
            pool: Vec::new(),
            temp: Vec::new(),
        }
    }

    /// Walks the trie below `root` (the whole trie when `None`) from the stacks `heads`,
    /// setting the bit of every token they can consume in `out`.
    ///
    /// With `only_direct = Some(s)` (and `heads` a lone frame of `s`), the first byte may only
    /// move within `s`'s rule, not enter a call. With `exits = Some((follow, list))`, the
    /// walk records in `list` the nodes after which a head can return to the unknown caller
    /// (`CTX`) and some child byte is in `follow`: `root` itself included.
    ///
    /// With `from = Some((run, chars))`, the caller has marked [`Trie::run_tokens`]`(run)`
    /// and `chars` are the characters of `root`'s path on the run's: the subtrees that set
    /// holds are left out without marking their tokens.
    ///
    /// Most of a walk is inside one rule's loop (an identifier, a string) with every head at
    /// the same state: such a level is kept factored, and a byte that neither enters a call
    /// nor completes the rule costs a table lookup and two stores, as in a DFA (~3 ns).
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &mut self,
        g: &Grammar,
        runs: &[Run],
        trie: &Trie,
        base: &[Frame],
        root: Option<usize>,
        from: Option<(Run, u16)>,
        heads: &[u32],
        only_direct: Option<u32>,
        out: &mut [u32],
        mut exits: Option<(&BitSet256, &mut Vec<u32>)>,
        work: &mut Work,
    ) -> Result<(), OutOfWork> {
        let mut fr = Frames {
            base,
            temp: &mut self.temp,
            seen: HashSet::new(),
        };
        let (pool, levels, tops, at, chars) = (
            &mut self.pool,
            &mut self.levels,
            &mut self.tops,
            &mut self.at,
            &mut self.chars,
        );
        let (from, from_chars) = from.unwrap_or((Run::NONE, Run::OFF_PATH));
        pool.clear();
        pool.extend_from_slice(heads);
        levels.clear();
        let (d0, mut i, end) = match root {
            Some(n) => {
                let (_, d, next) = trie.node(n);
                (d, n + 1, next)
            }
            None => (0, 0, trie.node_len()),
        };
        let (lv, top) = fr.level(pool, 0);
        levels.push(lv);
        tops[d0] = top;
        at[d0] = 0;
        chars[d0] = from_chars;
        let acc = |lv: &Level, top: u32| {
            if top == NONE {
                lv.pacc
            } else {
                g.accepting[top as usize] && lv.pacc
            }
        };
        if let (Some(n), Some((follow, list))) = (root, exits.as_mut()) {
            if acc(&levels[0], top) && trie.any_child(n, |b| follow.contains(b)) {
                list.push(n as u32);
            }
        }
        // A subtree is taken whole when a head's run covers it ([`Run`]): 262k-token masks
        // of string and identifier loops then visit a few percent of the nodes (json's worst
        // cold mask 5.3 -> ~1 ms), and counted stretches (`[^"]{0,40}`) most of theirs.
        let follow_groups = exits.as_ref().map_or(0, |(follow, _)| groups(follow));
        // A frame that can complete takes the run of the frame below too: popped, that one
        // absorbs the string. A string character kept as a rule is a completed frame after
        // every character, whose own run is nothing; below it is the rest of the string.
        let frame_covers = |fr: &Frames, state: u32, parent: u32, sub: u64, height: u8| {
            runs[state as usize].covers(sub, height)
                || (g.accepting[state as usize]
                    && parent < CTX
                    && runs[fr.get(parent).state as usize].covers(sub, height))
        };
        let skip = |fr: &Frames, lv: &Level, t: u32, pool: &[u32], node: usize| -> bool {
            let (sub, height) = (trie.below(node), trie.height(node));
            if t != NONE && runs[t as usize].covers(sub, height) {
                return true;
            }
            let heads = &pool[lv.start..lv.end];
            // Factored: the heads are `t` over each of `heads`.
            heads.len() <= 8
                && heads.iter().any(|&h| {
                    let (state, parent) = if t != NONE {
                        (t, h)
                    } else {
                        let f = fr.get(h);
                        (f.state, f.parent)
                    };
                    frame_covers(fr, state, parent, sub, height)
                })
        };
        let take = |i: usize, out: &mut [u32]| {
            #[cfg(test)]
            SKIPS.fetch_add(1, Ordering::Relaxed);
            for &tok in trie.subtree_tokens(i) {
                set_bit(out, tok);
            }
        };
        if let Some(n) = root {
            if skip(&fr, &levels[0], top, pool, n) {
                work.tick(1)?;
                take(n, out);
                return Ok(());
            }
        }
        while i < end {
            let (byte, d, next) = trie.node(i);
            // In the caller's run set: nothing to mark, and no exit below it matters (each
            // exit is only walked to mark tokens of its subtree).
            let c = from.path_chars(chars[d - 1], byte);
            if from.covers_from(c, trie.below(i), trie.height(i)) {
                i = next;
                continue;
            }
            chars[d] = c;
            let li = at[d - 1];
            let t = tops[d - 1];
            let c = usize::from(g.classes[usize::from(byte)]);
            // The fast path: a factored level whose top takes the byte within its rule, with no
            // call and no parent that could take it instead.
            let mut new_top = NONE;
            if t != NONE {
                let n = g.fast_next(t, c, byte);
                if n != SLOW && !(g.accepting[t as usize] && levels[li].below.contains(byte)) {
                    if n == NONE {
                        i = next;
                        continue;
                    }
                    work.tick(1)?;
                    new_top = n;
                    at[d] = li;
                } else if d == d0 + 1 && only_direct.is_some() {
                    // The first byte of a rule's own walk: only its direct transitions.
                    work.tick(1)?;
                    let n = g.next_class(t, c);
                    if n == NONE {
                        i = next;
                        continue;
                    }
                    new_top = n;
                    at[d] = li;
                }
            }
            if new_top == NONE {
                levels.truncate(li + 1);
                let up = &levels[li];
                let (start, stop) = (up.start, up.end);
                pool.truncate(stop);
                fr.temp.truncate(up.temp);
                let ok = if t != NONE {
                    g.first(t).contains(byte)
                        || (g.accepting[t as usize] && up.below.contains(byte))
                } else {
                    up.allowed.contains(byte)
                };
                if !ok {
                    i = next;
                    continue;
                }
                let (mut a, mut z) = (start, stop);
                if t != NONE {
                    // Make the factored heads, then step them.
                    for k in start..stop {
                        let id = fr.make(g, t, pool[k], UNCOUNTED);
                        pool.push(id);
                    }
                    (a, z) = (stop, pool.len());
                }
                fr.step(g, pool, (a, z), byte, work)?;
                if pool.len() == z {
                    i = next;
                    continue;
                }
                let (lv, top) = fr.level(pool, z);
                levels.push(lv);
                new_top = top;
                at[d] = levels.len() - 1;
            }
            for &tok in trie.tokens(i) {
                set_bit(out, tok);
            }
            if i + 1 < next {
                if let Some((follow, list)) = exits.as_mut() {
                    // No child can be in `follow` when no character group below is: skips
                    // scanning the children of every node of an accepting loop (an identifier).
                    let below = trie.below(i);
                    if acc(&levels[at[d]], new_top)
                        && (below & Trie::GROUP_BAD != 0 || below & follow_groups != 0)
                        && trie.any_child(i, |b| follow.contains(b))
                    {
                        list.push(i as u32);
                    }
                }
                tops[d] = new_top;
                let li = at[d];
                if skip(&fr, &levels[li], new_top, pool, i) {
                    work.tick(1)?;
                    take(i, out);
                    i = next;
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{TokenId, TokenKind};

    /// Tokens glued from pieces that stress the subtree skips: loop bytes, bytes that end a
    /// loop (`"`, `\`, newline, `(`), 2-, 3- and 4-byte characters, split characters and
    /// invalid UTF-8; with every single byte, so every text can be spelled.
    fn vocab() -> Arc<Vocabulary> {
        const PIECES: &[&[u8]] = &[
            b"a",
            b"b",
            b"z",
            b"Q",
            b"_",
            b"7",
            b"0",
            b" ",
            b"  ",
            b"\n",
            b"\t",
            b"\"",
            b"\\",
            b"\\n",
            b"(",
            b")",
            b",",
            b";",
            b"=",
            b"{",
            b"}",
            b"-",
            b"- ",
            b"x",
            b"ab",
            "é".as_bytes(),
            "こ".as_bytes(),
            "ん".as_bytes(),
            "😀".as_bytes(),
            "\u{2028}".as_bytes(),
            "\u{85}".as_bytes(),
            &[0xe3],
            &[0xe3, 0x81],
            &[0x81],
            &[0xff],
            &[0xed, 0xa0],
            &[0xf0, 0x9f],
            &[0x7f],
            &[0x0b],
        ];
        let mut tokens: Vec<(Vec<u8>, TokenKind)> =
            (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut t = Vec::new();
            for k in 0..1 + (x % 6) {
                let p = PIECES[((x >> (8 * k + 3)) % PIECES.len() as u64) as usize];
                // Mostly one piece repeated, so many subtrees loop on one character group.
                let p = if (x >> 50).is_multiple_of(3) {
                    PIECES[(x % 7) as usize]
                } else {
                    p
                };
                t.extend_from_slice(p);
            }
            tokens.push((t, TokenKind::Text));
        }
        // Tokens longer than a 16-character block of a counted string, which end past it.
        for n in 12..=28 {
            for piece in ["a", "z ", "é"] {
                tokens.push((piece.repeat(n).into_bytes(), TokenKind::Text));
            }
        }
        // Tokens longer than a counter's horizon (64 items), some ending past a count's end.
        for n in [62, 63, 64, 65, 66, 80, 130] {
            for piece in ["a", "x", "é"] {
                tokens.push((piece.repeat(n).into_bytes(), TokenKind::Text));
                tokens.push((
                    format!("{}\"", piece.repeat(n)).into_bytes(),
                    TokenKind::Text,
                ));
                tokens.push((
                    format!("{}]", piece.repeat(n)).into_bytes(),
                    TokenKind::Text,
                ));
            }
        }
        let eos = tokens.len() as TokenId;
        tokens.push((b"</s>".to_vec(), TokenKind::Special));
        Arc::new(Vocabulary::from_tokens(tokens, vec![eos]).unwrap())
    }

    fn check_grammar(g: &Grammar, texts: &[&str], expect_skips: bool) {
        let vocab = vocab();
        let g = g.clone();
        let fast = Index::new(g.clone(), vocab.clone());
        let slow = Index::new(g.clone(), vocab.clone()).without_skips();
        assert!(
            fast.runs.iter().any(|&r| r != Run::NONE),
            "some state has a run"
        );
        let words = crate::mask::words_for(vocab.len());
        let (mut a, mut b) = (vec![0u32; words], vec![0u32; words]);
        let skips = SKIPS.load(Ordering::Relaxed);
        for text in texts {
            let mut parse = Parse::new(&g);
            for (k, &byte) in text.as_bytes().iter().enumerate() {
                fast.fill(&parse, &mut a).unwrap();
                slow.fill(&parse, &mut b).unwrap();
                assert_eq!(a, b, "{text:?} after {k} bytes");
                // And the brute force: a token is allowed iff its bytes keep the parse alive.
                for t in 0..vocab.len() as TokenId {
                    let bytes = vocab.bytes(t);
                    if !vocab.is_text(t) || bytes.is_empty() {
                        continue;
                    }
                    let ok = parse.accepts(&g, bytes, &mut Work::unlimited()).unwrap();
                    let bit = a[t as usize / 32] >> (t % 32) & 1 == 1;
                    assert_eq!(bit, ok, "{text:?} after {k} bytes, token {bytes:?}");
                }
                assert!(parse.advance(&g, &[byte], &mut Work::unlimited()).unwrap());
            }
        }
        assert!(
            !expect_skips || SKIPS.load(Ordering::Relaxed) > skips,
            "some subtree was skipped"
        );
    }

    #[test]
    fn subtree_skips_give_the_same_masks() {
        check(
            include_str!("../../tests/data/grammars/json.gbnf"),
            &["{\"a\": [\"x\\\"é\", \"こん😀\"], \"b\": -1.5}"],
        );
        check(
            include_str!("../../tests/data/grammars/c_like.gbnf"),
            &["int f(int a_1) {\n  x = f(a_1) + 2;\n}\n"],
        );
        check(
            "root ::= (ident \"(\" ident \")\" \";\" [ \\n]*)+\nident ::= [a-zA-Z_] [a-zA-Z0-9_]*",
            &["ab(Q_7);\nx(y);"],
        );
        check(
            "root ::= item+\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"",
            &["- aé こ😀 \"x\"\n- b\n"],
        );
        check(
            "root ::= \"say \\\"\" [^\"\\n]* \"\\\"\" | [a-z]+ \" \"? [^a]*",
            &["say \"hé こ\"", "ab zz\"é\\"],
        );
        // Ambiguous loops in a called (recursive, so not inlined) rule: the caller takes the
        // loop's own bytes next (`below`, exits).
        check(
            "root ::= \"(\" w \"b\" w \")\" (w [a-z] \";\")*\nw ::= [ a-zé]* (\"[\" w \"]\")?",
            &["(aab b)x;é b;", "(b[ab]b)ab;"],
        );
        // Counted stretches (runs shorter than a loop): inline, and as the nested blocks of
        // a JSON Schema string with `maxLength: 300`.
        check(
            "root ::= \"\\\"\" [^\"\\\\]{0,20} \"\\\"\" (\",\" [a-zé]{3,9})?",
            &["\"ab aé\",zzé", "\"\""],
        );
        let long = crate::json_schema::JsonSchema::compile(
            &serde_json::json!({"type": "string", "maxLength": 300}),
            "guided_json",
        )
        .unwrap()
        .gbnf();
        check(
            &long,
            &["\"aé こ😀 ab_7 zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\""],
        );
        // A chain of blocks to its last characters: the state that calls the last rule takes
        // that rule's run (16 + 6 characters), and no more.
        let seventy = crate::json_schema::JsonSchema::compile(
            &serde_json::json!({"type": "string", "maxLength": 70}),
            "guided_json",
        )
        .unwrap()
        .gbnf();
        check(&seventy, &[&format!("\"{}\"", "ab zé".repeat(14))]);
        // A string character kept as a rule (recursive here, so never inlined), as when
        // inlining it passes the automaton limit: a call per character, each position's run
        // the characters left (one-character calls), and a completed character frame takes
        // the run of the position below it.
        check(
            "root ::= \"\\\"\" str \"\\\"\" \",\"?\nstr ::= ch{0,30} | \"{\" str \"}\"\nch ::= [a-zé ] | \"(\" ch* \")\"",
            // 30 characters: the last positions' runs are as short as the string's end.
            &[&format!("\"ab zé(a(b)) {}\",", "z".repeat(23)), "\"{a}\""],
        );
    }

    /// Counters ([`super::super::Counter`]): every phase near and far from both ends, with
    /// tokens longer than the horizon, against the brute force over the exact counts.
    #[test]
    fn counters_give_exact_masks() {
        let text = |n: usize| format!("\"{}\"", "ax é".chars().cycle().take(n).collect::<String>());
        // Far below `min` (the phase that may end early for a long token), the exact phases
        // before it, then a short exact end.
        let g = "root ::= \"\\\"\" [a-zé ]{270,300} \"\\\"\" \",\"?";
        let g = Grammar::new(g).unwrap();
        assert_eq!(g.counters.len(), 1, "{g:?}");
        check_grammar(&g, &[&text(285), &text(270), &text(300)], true);
        // `max` only: a mid phase for the far counts, then the exact ones to `max`.
        let g = Grammar::new("root ::= \"[\" ([a-z] | \"é\"){0,400} \"]\"").unwrap();
        assert_eq!(g.counters.len(), 1, "{g:?}");
        // (A call per item, and this vocabulary's `[a-z]` subtrees hold other bytes too.)
        check_grammar(
            &g,
            &[&format!("[{}]", "x".repeat(400)), "[xéx]", "[]"],
            false,
        );
        // Unbounded above, and a counter inside a counter.
        let g = "root ::= (\"(\" \"a\"{0,300} \")\"){0,400} \"x\"{260,}";
        let g = Grammar::new(g).unwrap();
        assert_eq!(g.counters.len(), 3, "{g:?}");
        let text = format!("(a)({})(){}", "a".repeat(300), "x".repeat(330));
        check_grammar(&g, &[&text], false);
    }

    #[test]
    fn a_loop_run_continues_through_a_call() {
        // A key other than "ab" (the shape of a schema's extra keys beside a listed one):
        // after each position the other characters go to a called string rule (a loop, and
        // recursive after `\(`, so never inlined). The key's first position takes every
        // letter, `a` by its own move and the rest through the call: its run must keep the
        // letters, or its first mask walks the whole vocabulary.
        let grammar = "root ::= \"\\\"\" key \"\\\":1\"\n\
            key ::= \"\" | [^\"\\\\a] str | \"a\" (\"\" | [^\"\\\\b] str | \"b\" [^\"\\\\] str)\n\
            str ::= ([^\"\\\\] | \"\\\\(\" str \")\")*";
        let g = Grammar::new(grammar).unwrap();
        let runs = grammar_runs(&g);
        let key_start = g.next_in_rule(g.entry, b'"');
        assert_ne!(key_start, NONE);
        let letters = Trie::byte_group(b'x');
        let r = runs[key_start as usize];
        assert_eq!(
            (r.groups & letters, r.len),
            (letters, Run::UNBOUNDED),
            "{r:?}"
        );
        check(
            grammar,
            &["\"abc\":1", "\"a\":1", "\"x\\(y)z\":1", "\"\":1"],
        );
    }

    #[test]
    fn a_run_enters_a_leaf_call() {
        // A key other than "abc" whose positions read their letter and call a rule for any
        // other character and the rest of the string (the shape of a schema's extra keys
        // once its GBNF passes the inlining bound: 16 KiB here keeps these rules as calls).
        // The key's first position takes every letter, `a` by its own move and the rest
        // through the leaf call: only a run that enters the call sees both.
        let grammar = r#"root ::= "\"" key "\":1"
key ::= "" | nota | "a" ("" | notb | "b" ("" | notc | "c" str))
nota ::= ([^"\\a] | "\\" ["\\/bfnrt]) ([^"\\] | "\\" ["\\/bfnrt])*
notb ::= ([^"\\b] | "\\" ["\\/bfnrt]) ([^"\\] | "\\" ["\\/bfnrt])*
notc ::= ([^"\\c] | "\\" ["\\/bfnrt]) ([^"\\] | "\\" ["\\/bfnrt])*
str ::= ([^"\\] | "\\" ["\\/bfnrt])+"#;
        let limits = crate::limits::Limits {
            grammar_automaton_bytes: 16 * 1024,
            ..crate::limits::Limits::DEFAULT
        };
        let g = Grammar::new_with(grammar, &limits).unwrap();
        let key_start = g.next_in_rule(g.entry, b'"');
        assert_ne!(key_start, NONE);
        assert_eq!(g.next_in_rule(key_start, b'x'), NONE, "`x` is the call's");
        let letters = Trie::byte_group(b'x');
        let taken = |runs: &[Run]| {
            let r = runs[key_start as usize];
            (r.groups & letters, r.len)
        };
        let entering = grammar_runs(&g);
        let within = grammar_runs_entering(&g, &vec![false; g.call_start.len()]);
        assert_eq!(taken(&entering), (letters, Run::UNBOUNDED));
        assert_eq!(
            taken(&within).0,
            0,
            "within its rule, the run lacks the letters"
        );
        check_grammar(
            &g,
            &[
                "\"abcx\":1",
                "\"ab\":1",
                "\"x\\\"y\":1",
                "\"abcd\":1",
                "\"\":1",
            ],
            true,
        );
    }

    /// Reading only the groups a state's first bytes can keep alive changes no run: on the
    /// grammars of schemas with extra keys (a key trie, free-form values, strings, numbers,
    /// a pattern) and of GBNF with calls into leaf rules, every run is the one reading every
    /// group gives.
    #[test]
    fn runs_read_only_groups_that_may_live_and_are_the_same() {
        let schemas = [
            r#"{"type":"object","properties":{"count":{"type":"integer"},"consulate":{"type":"string"},"period":{"enum":["day","week"]},"série":{"type":"string","maxLength":40}},"required":["count"]}"#,
            r#"{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-f0-9]{8}$"},"tags":{"type":"array","items":{"type":"string"}},"meta":{}}}"#,
            r#"{"type":"array","items":{"type":"object","properties":{"n":{"type":"number"}}},"maxItems":300}"#,
        ];
        let mut grammars: Vec<Grammar> = schemas
            .iter()
            .map(|text| {
                let schema: serde_json::Value = serde_json::from_str(text).unwrap();
                let js = crate::json_schema::JsonSchema::compile(&schema, "guided_json").unwrap();
                match js.into_automaton() {
                    crate::constraint::Compiled::Grammar(g) => g,
                    _ => panic!("{text} runs on a DFA, not the grammar engine"),
                }
            })
            .collect();
        grammars.push(
            Grammar::new_with(
                r#"root ::= "\"" key "\":1"
key ::= "" | nota | "a" ("" | notb | "b" str)
nota ::= [^"\\a] [^"\\]*
notb ::= [^"\\b] [^"\\]*
str ::= [^"\\]+"#,
                &crate::limits::Limits {
                    grammar_automaton_bytes: 16 * 1024,
                    ..crate::limits::Limits::DEFAULT
                },
            )
            .unwrap(),
        );
        for g in &grammars {
            let leaf = leaf_rules(g);
            let every = vec![u64::MAX; g.byte_sets.len()];
            let runs = grammar_runs_entering(g, &leaf);
            assert_eq!(runs, grammar_runs_reading(g, &leaf, &every), "{g:?}");
            assert!(runs.iter().any(|&r| r != Run::NONE), "{g:?} has runs");
        }
    }

    /// A schema grammar with the free-form value spliced in, runs and all
    /// ([`Grammar::spliced`]): its masks are the brute force's, with and without skips.
    #[test]
    fn a_spliced_free_form_value_gives_exact_masks() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "name": {"type": "string"}, "tags": {"type": "array"}}, "required": ["name"]});
        let js = crate::json_schema::JsonSchema::compile(&schema, "guided_json").unwrap();
        let crate::constraint::Compiled::Grammar(g) = js.into_automaton() else {
            panic!("free-form values need the grammar engine");
        };
        let (first, runs) = g.spliced.clone().expect("the free-form value is spliced");
        assert_eq!(first as usize + runs.len(), g.state_count());
        check_grammar(
            &g,
            &[
                r#"{"zz":[1,{"q":"a b"}],"name":"x\"é","tags":[[],{"k":null}],"n":-2.5e3}"#,
                r#"{"name":"é\n\u001f","extra":{"a":{"b":[true,false,"z z z"]}}}"#,
            ],
            true,
        );
    }

    fn check(grammar: &str, texts: &[&str]) {
        check_grammar(&Grammar::new(grammar).unwrap(), texts, true);
    }
}

// Timing lives in a `*_tests.rs` file: the edge guard keeps clocks out of the core's own code.
#[cfg(test)]
#[path = "engine_bench_tests.rs"]
mod bench;
