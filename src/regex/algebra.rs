//! Automaton algebra on [`Dfa`]: intersection and difference by the product construction, a
//! `Dfa` from a hand-made transition function, and the facts other stages read off a `Dfa`
//! (length bounds in characters, transitions by character for grammars, byte ranges for NFAs).
//!
//! A product explores the pairs of states reachable from the pair of starts, over byte classes
//! refined from both operands (a byte's class is the pair of its classes), and keeps the
//! [`Dfa`] invariants: the pairs that cannot reach a match are merged into the dead state 0
//! ([`Dfa::compact_live`]), and a product without strings is `None`, not an error. The
//! construction is bounded as it runs, like determinization: the table (4 bytes per pair and
//! class, the dead row included) by [`Limits::automaton_bytes`], and the pair index by
//! [`Limits::determinize_bytes`]; each pair explored is checked before its row is built, so a
//! refusal costs at most the bound.
//!
//! The JSON Schema compiler uses these where a keyword has no regular-expression form of its
//! own: a `pattern` with `minLength`/`maxLength` (the pattern's language times a character
//! counter), `format` with `pattern`, and integer `multipleOf` (a range times "decimal
//! integers divisible by k", a k-state automaton built with [`Dfa::from_fn_within`]).

use super::determinize::{self, Stretches};
use super::{Dfa, DEAD};
use crate::error::{Error, Result};
use crate::limits::Limits;
use regex_automata::nfa::thompson::NFA;
use regex_syntax::utf8::Utf8Sequences;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// Which bound stopped a construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The transition table would pass `limit` bytes ([`Limits::automaton_bytes`]).
    Table { states: usize, limit: usize },
    /// The index of explored states would pass `limit` bytes ([`Limits::determinize_bytes`]).
    Work { states: usize, limit: usize },
    /// An operand's NFA would pass `limit` bytes ([`Limits::automaton_bytes`]).
    Nfa { limit: usize },
}

impl Refusal {
    /// "the N-byte automaton limit" or "the N-byte determinization limit", for messages.
    pub(crate) fn limit_phrase(&self) -> String {
        match *self {
            Refusal::Table { limit, .. } | Refusal::Nfa { limit } => {
                format!("the {limit}-byte automaton limit")
            }
            Refusal::Work { limit, .. } => format!("the {limit}-byte determinization limit"),
        }
    }

    /// The error for request field `field`, naming the input as `shown`.
    pub(crate) fn into_error(self, field: &str, shown: &str) -> Error {
        Error::limit_exceeded(format!(
            "{field} {shown} needs more than {}",
            self.limit_phrase()
        ))
        .with_param(field)
        .with_source(self)
    }
}

impl From<determinize::Refusal> for Refusal {
    fn from(r: determinize::Refusal) -> Self {
        match r {
            determinize::Refusal::Table { states, limit } => Refusal::Table { states, limit },
            determinize::Refusal::Work { states, limit } => Refusal::Work { states, limit },
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Refusal::Table { states, limit } => write!(
                f,
                "the construction stopped after {states} states: the transition table would \
                 pass {limit} bytes"
            ),
            Refusal::Work { states, limit } => write!(
                f,
                "the construction stopped after {states} states: its state index would pass \
                 {limit} bytes"
            ),
            Refusal::Nfa { limit } => write!(f, "an operand's NFA would pass {limit} bytes"),
        }
    }
}

impl std::error::Error for Refusal {}

/// A state's transitions by character: each target with its character ranges.
pub(crate) type CharTransitions = Vec<(u32, Vec<(char, char)>)>;

/// Which strings of the left operand a product keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Those the right operand also matches.
    Intersection,
    /// Those the right operand does not match.
    Difference,
}

/// Bytes the pair index takes per explored pair: the pair in the exploration order (8) and
/// its hash-map entry (key, value and control byte at the map's 7/8 load: ~16).
const PAIR_INDEX_BYTES: usize = 24;

/// Two tables are equal when they are the same table (equal languages may still differ).
impl PartialEq for Dfa {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
            || (self.stride == other.stride
                && self.start == other.start
                && self.classes == other.classes
                && self.accepting == other.accepting
                && self.trans == other.trans)
    }
}

impl Eq for Dfa {}

/// Hashes the cheap parts only (the classes, sizes and start): a schema's IR is hashed per
/// subtree, and a 256 KiB table would be hashed again at every ancestor.
impl std::hash::Hash for Dfa {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.stride.hash(h);
        self.start.hash(h);
        self.accepting.len().hash(h);
        self.classes.hash(h);
    }
}

impl Dfa {
    /// The strings both automata match; `None` when there are none. Refused past `limits`
    /// with a `limit_exceeded` error naming `field` (the request field), the input as `shown`
    /// and the limit, as a pattern past them is.
    ///
    /// ```
    /// use poot::{limits::Limits, regex::Dfa};
    /// let words = Dfa::new("[a-z]+").unwrap();
    /// let short = Dfa::new(".{2,3}").unwrap();
    /// let l = &Limits::DEFAULT;
    /// let both = words.intersection(&short, "guided_regex", "`x`", l).unwrap().unwrap();
    /// assert!(both.matches(b"abc") && !both.matches(b"abcd") && !both.matches(b"a1"));
    /// let rest = words.difference(&short, "guided_regex", "`x`", l).unwrap().unwrap();
    /// assert!(rest.matches(b"a") && rest.matches(b"abcd") && !rest.matches(b"ab"));
    /// assert!(words.difference(&words, "guided_regex", "`x`", l).unwrap().is_none());
    /// ```
    pub fn intersection(
        &self,
        other: &Dfa,
        field: &str,
        shown: &str,
        limits: &Limits,
    ) -> Result<Option<Dfa>> {
        self.product(other, Op::Intersection, limits)
            .map_err(|r| r.into_error(field, shown))
    }

    /// The strings `self` matches and `other` does not (the complement of `other` within the
    /// universe `self`); `None` when there are none. Bounded as [`Dfa::intersection`] is.
    pub fn difference(
        &self,
        other: &Dfa,
        field: &str,
        shown: &str,
        limits: &Limits,
    ) -> Result<Option<Dfa>> {
        self.product(other, Op::Difference, limits)
            .map_err(|r| r.into_error(field, shown))
    }

    /// The product automaton of `self` and `other` under `op`, trimmed; `None` when its
    /// language is empty.
    pub(crate) fn product(
        &self,
        other: &Dfa,
        op: Op,
        limits: &Limits,
    ) -> std::result::Result<Option<Dfa>, Refusal> {
        // Refined classes: one per pair of operand classes that some byte has, numbered by
        // first byte (so classes that were byte runs in byte order stay so).
        let mut class_of_pair: HashMap<(u8, u8), u8> = HashMap::default();
        let mut classes = [0u8; 256];
        let mut reps: Vec<u8> = Vec::new();
        for b in 0..=255u8 {
            let key = (self.byte_class(b), other.byte_class(b));
            let n = reps.len();
            let c = *class_of_pair.entry(key).or_insert_with(|| {
                reps.push(b);
                n as u8
            });
            classes[usize::from(b)] = c;
        }
        let stride = reps.len();

        let mut index: HashMap<(u32, u32), u32> = HashMap::default();
        let mut order: Vec<(u32, u32)> = vec![(self.start, other.start)];
        index.insert(order[0], 0);
        let mut raw = Stretches::default();
        let mut accepting: Vec<bool> = Vec::new();
        let mut i = 0;
        while i < order.len() {
            // Every pair found gets a row (at most `stride` pairs ahead of `i`), and the final
            // table adds the dead row: refuse as soon as that passes the bound.
            let found = order.len();
            if (found + 1) * stride * 4 > limits.automaton_bytes {
                return Err(Refusal::Table {
                    states: found,
                    limit: limits.automaton_bytes,
                });
            }
            if found * PAIR_INDEX_BYTES > limits.determinize_bytes {
                return Err(Refusal::Work {
                    states: found,
                    limit: limits.determinize_bytes,
                });
            }
            let (a, b) = order[i];
            // `b` is DEAD only in a difference: `other` matches nothing from here on.
            let b_accepts = b != DEAD && other.is_accepting(b);
            accepting.push(match op {
                Op::Intersection => self.is_accepting(a) && b_accepts,
                Op::Difference => self.is_accepting(a) && !b_accepts,
            });
            for (c, &byte) in reps.iter().enumerate() {
                let na = self.next(a, byte);
                // The dead row maps every class to itself, so DEAD stays DEAD.
                let nb = other.next(b, byte);
                if na == DEAD || (nb == DEAD && op == Op::Intersection) {
                    continue;
                }
                let n = order.len() as u32;
                let j = *index.entry((na, nb)).or_insert_with(|| {
                    order.push((na, nb));
                    n
                });
                raw.add(i as u32, c as u8, j);
            }
            i += 1;
        }
        Ok(Dfa::compact_live(classes, stride, raw, accepting))
    }

    /// A `Dfa` from a hand-made automaton: `states` states numbered from 0, `next(s, byte)`
    /// the next state or `None` for no transition, and the accepting states. States that are
    /// unreachable or cannot reach a match are dropped; `None` when no string is accepted.
    /// Bytes with the same transition from every state share a class.
    ///
    /// Bounded like [`Dfa::intersection`]: refused before any work when `states` rows alone
    /// would pass [`Limits::automaton_bytes`], and after the classes are known when the table
    /// would. Building the classes calls `next` 256 times per state.
    pub(crate) fn from_fn_within(
        states: usize,
        start: usize,
        accepting: impl Fn(usize) -> bool,
        next: impl Fn(usize, u8) -> Option<usize>,
        limits: &Limits,
    ) -> std::result::Result<Option<Dfa>, Refusal> {
        let too_big = |states| Refusal::Table {
            states,
            limit: limits.automaton_bytes,
        };
        if states == 0 || start >= states {
            return Ok(None);
        }
        if (states + 1) * 4 > limits.automaton_bytes {
            return Err(too_big(states));
        }
        // Partition refinement: start with one class, split by each state's row.
        let mut classes = [0u8; 256];
        let mut count = 1usize;
        let mut split: HashMap<(u8, Option<usize>), u8> = HashMap::default();
        for s in 0..states {
            split.clear();
            let mut next_count = 0usize;
            let mut refined = [0u8; 256];
            for b in 0..=255u8 {
                let key = (classes[usize::from(b)], next(s, b));
                let c = *split.entry(key).or_insert_with(|| {
                    next_count += 1;
                    (next_count - 1) as u8
                });
                refined[usize::from(b)] = c;
            }
            if next_count > count {
                classes = refined;
                count = next_count;
            }
        }
        // Number classes by first byte.
        let mut renumber = [u8::MAX; 256];
        let mut reps = Vec::new();
        for b in 0..=255u8 {
            let c = usize::from(classes[usize::from(b)]);
            if renumber[c] == u8::MAX {
                renumber[c] = reps.len() as u8;
                reps.push(b);
            }
            classes[usize::from(b)] = renumber[c];
        }
        let stride = reps.len();
        if (states + 1) * stride * 4 > limits.automaton_bytes {
            return Err(too_big(states));
        }
        // The start becomes state 0, as compact_live expects.
        let swap = |s: usize| {
            if s == start {
                0
            } else if s == 0 {
                start
            } else {
                s
            }
        };
        let mut raw = Stretches::default();
        let mut acc = Vec::with_capacity(states);
        for row in 0..states {
            let s = swap(row);
            acc.push(accepting(s));
            for (c, &b) in reps.iter().enumerate() {
                if let Some(t) = next(s, b) {
                    raw.add(row as u32, c as u8, swap(t) as u32);
                }
            }
        }
        // Unreachable rows stay in the table compact_live builds: take the reachable part.
        Ok(Dfa::compact_live(classes, stride, raw, acc).map(|d| d.reachable()))
    }

    /// A `Dfa` from a hand-made automaton ([`Dfa::from_fn_within`]: `next(s, byte)` is the
    /// next state or `None`), refused past `limits` with an error naming `field` and `shown`.
    ///
    /// ```
    /// use poot::{limits::Limits, regex::Dfa};
    /// // Binary numerals divisible by 3: the state is the value so far modulo 3.
    /// let by3 = Dfa::from_fn(3, 0, |r| r == 0, |r, b| match b {
    ///     b'0' | b'1' => Some((2 * r + usize::from(b - b'0')) % 3),
    ///     _ => None,
    /// }, "guided_regex", "`by3`", &Limits::DEFAULT).unwrap().unwrap();
    /// assert!(by3.matches(b"110") && by3.matches(b"1001") && !by3.matches(b"111"));
    /// ```
    pub fn from_fn(
        states: usize,
        start: usize,
        accepting: impl Fn(usize) -> bool,
        next: impl Fn(usize, u8) -> Option<usize>,
        field: &str,
        shown: &str,
        limits: &Limits,
    ) -> Result<Option<Dfa>> {
        Self::from_fn_within(states, start, accepting, next, limits)
            .map_err(|r| r.into_error(field, shown))
    }

    /// Determinizes an NFA without look-around (one a schema's IR builds) for the algebra:
    /// `None` when its language is empty.
    pub(crate) fn from_nfa_within(
        nfa: &NFA,
        limits: &Limits,
    ) -> std::result::Result<Option<Dfa>, Refusal> {
        debug_assert!(nfa.look_set_any().is_empty());
        let table =
            determinize::determinize(nfa, limits.automaton_bytes, limits.determinize_bytes)?;
        Ok(Dfa::compact_live(
            table.classes,
            table.stride,
            table.trans,
            table.accepting,
        ))
    }

    /// The same automaton without the states the start cannot reach (a hand-made table may
    /// have some; products and determinized tables have none).
    fn reachable(self) -> Dfa {
        let n = self.state_count();
        let mut seen = vec![false; n];
        seen[0] = true;
        let mut stack = vec![self.index(self.start)];
        seen[stack[0]] = true;
        while let Some(i) = stack.pop() {
            for c in 0..self.stride {
                let t = self.index(self.trans[i * self.stride + c]);
                if !seen[t] {
                    seen[t] = true;
                    stack.push(t);
                }
            }
        }
        if seen.iter().all(|&x| x) {
            return self;
        }
        let mut new_row = vec![0u32; n];
        let mut rows = 0u32;
        for i in 0..n {
            if seen[i] {
                new_row[i] = rows;
                rows += 1;
            }
        }
        let stride = self.stride;
        let mut trans = Vec::with_capacity(rows as usize * stride);
        let (mut accepting, mut forced) = (Vec::new(), Vec::new());
        for i in (0..n).filter(|&i| seen[i]) {
            for c in 0..stride {
                let t = self.index(self.trans[i * stride + c]);
                trans.push(new_row[t] * stride as u32);
            }
            accepting.push(self.accepting[i]);
            forced.push(self.forced[i]);
        }
        Dfa {
            classes: self.classes,
            stride,
            trans,
            accepting,
            forced,
            start: new_row[self.index(self.start)] * stride as u32,
        }
    }

    /// The handle of the state with dense index `index` (see [`Dfa::index`]).
    pub(crate) fn state_at(&self, index: usize) -> u32 {
        (index * self.stride) as u32
    }

    /// Every live state's handle, in table order.
    pub(crate) fn live_states(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.state_count()).map(move |i| (i * self.stride) as u32)
    }

    /// The transitions of `state` as byte ranges `(lo, hi, next)`, in byte order, runs of
    /// bytes with the same live target merged.
    pub(crate) fn byte_ranges(&self, state: u32) -> Vec<(u8, u8, u32)> {
        let mut out: Vec<(u8, u8, u32)> = Vec::new();
        for b in 0..=255u8 {
            let t = self.next(state, b);
            if t == DEAD {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.2 == t && last.1 == b - 1 => last.1 = b,
                _ => out.push((b, b, t)),
            }
        }
        out
    }

    /// Length bounds in characters, `(shortest, longest)` with `None` for unbounded: a
    /// character is a byte that is not a UTF-8 continuation byte (`0x80..=0xBF`), so for an
    /// automaton of UTF-8 text the bounds are exact when each byte class holds only
    /// continuation bytes or none (as classes refined from UTF-8 patterns do); a class that
    /// mixes them counts as the shorter for the shortest and the longer for the longest, a
    /// bound that is still safe. Any cycle makes the longest unbounded. Costs a pass over the
    /// table.
    pub(crate) fn char_len(&self) -> (u64, Option<u64>) {
        let (n, stride) = (self.state_count(), self.stride);
        let mut cont = vec![false; stride];
        let mut lead = vec![false; stride];
        for b in 0..=255u8 {
            let c = usize::from(self.byte_class(b));
            if (0x80..=0xBF).contains(&b) {
                cont[c] = true;
            } else {
                lead[c] = true;
            }
        }
        let edges = |i: usize| {
            (0..stride).filter_map(move |c| {
                let t = self.index(self.trans[i * stride + c]);
                (t != 0).then_some((c, t))
            })
        };
        // Shortest: a 0-1 breadth-first search.
        let start = self.index(self.start);
        let mut dist = vec![u64::MAX; n];
        dist[start] = 0;
        let mut queue = VecDeque::from([start]);
        while let Some(i) = queue.pop_front() {
            for (c, t) in edges(i) {
                let w = u64::from(!cont[c]);
                let d = dist[i] + w;
                if d < dist[t] {
                    dist[t] = d;
                    if w == 0 {
                        queue.push_front(t);
                    } else {
                        queue.push_back(t);
                    }
                }
            }
        }
        let shortest = (1..n)
            .filter(|&i| self.accepting[i])
            .map(|i| dist[i])
            .min()
            .unwrap_or(u64::MAX);
        // Longest: over a topological order, if there is one (every live state is reachable).
        let mut indegree = vec![0u32; n];
        for i in 1..n {
            for (_, t) in edges(i) {
                indegree[t] += 1;
            }
        }
        let mut order: Vec<usize> = (1..n).filter(|&i| indegree[i] == 0).collect();
        let mut k = 0;
        while k < order.len() {
            let i = order[k];
            for (_, t) in edges(i) {
                indegree[t] -= 1;
                if indegree[t] == 0 {
                    order.push(t);
                }
            }
            k += 1;
        }
        if order.len() < n - 1 {
            return (shortest, None);
        }
        let mut best: Vec<Option<u64>> = vec![None; n];
        best[start] = Some(0);
        for &i in &order {
            let Some(d) = best[i] else { continue };
            for (c, t) in edges(i) {
                let w = d + u64::from(lead[c]);
                if best[t].is_none_or(|b| b < w) {
                    best[t] = Some(w);
                }
            }
        }
        let longest = (1..n)
            .filter(|&i| self.accepting[i])
            .filter_map(|i| best[i])
            .max()
            .unwrap_or(0);
        (shortest, Some(longest))
    }

    /// The transitions of `state` by Unicode character: each live target with the characters
    /// whose UTF-8 bytes lead there (ranges in order, not merged), targets in order of their
    /// first character. Byte sequences that are not UTF-8 are left out: this is the
    /// automaton's language of text, for grammars whose classes match characters.
    ///
    /// Work is per run of bytes, not per character: each UTF-8 byte position walks the runs
    /// of bytes that lead to one state (at most one per byte class), and only a run-product
    /// with a partial run after its first position is split into one range per combination
    /// of the bytes before that run. (Split by class instead, a `.` after `[^,]` made ~20,000
    /// ranges per state of 4-byte characters, and a 2,700-state automaton took 3.8 s.)
    pub(crate) fn char_transitions(&self, state: u32) -> CharTransitions {
        let mut out: CharTransitions = Vec::new();
        let mut add = |t: u32, lo: u32, hi: u32| {
            let (Some(lo), Some(hi)) = (char::from_u32(lo), char::from_u32(hi)) else {
                return;
            };
            match out.iter_mut().find(|(x, _)| *x == t) {
                Some((_, r)) => r.push((lo, hi)),
                None => out.push((t, vec![(lo, hi)])),
            }
        };
        // ASCII: runs of bytes with one target.
        let mut run: Option<(u8, u8, u32)> = None;
        for b in 0..=0x7Fu8 {
            let t = self.next(state, b);
            match run {
                Some((lo, hi, rt)) if rt == t && hi + 1 == b => run = Some((lo, b, rt)),
                _ => {
                    if let Some((lo, hi, rt)) = run.take() {
                        if rt != DEAD {
                            add(rt, u32::from(lo), u32::from(hi));
                        }
                    }
                    run = Some((b, b, t));
                }
            }
        }
        if let Some((lo, hi, rt)) = run {
            if rt != DEAD {
                add(rt, u32::from(lo), u32::from(hi));
            }
        }
        for seq in Utf8Sequences::new('\u{80}', char::MAX) {
            let full: Vec<(u8, u8)> = seq.as_slice().iter().map(|r| (r.start, r.end)).collect();
            let mut runs = Vec::with_capacity(full.len());
            self.walk_sequence(state, &full, &mut runs, &mut add);
        }
        out
    }

    /// Steps through one UTF-8 sequence's byte ranges from `state`, by runs of one target;
    /// `runs` holds the runs taken so far. At the end, the run-product's characters go to
    /// `add` as contiguous ranges.
    fn walk_sequence(
        &self,
        state: u32,
        full: &[(u8, u8)],
        runs: &mut Vec<(u8, u8)>,
        add: &mut impl FnMut(u32, u32, u32),
    ) {
        let i = runs.len();
        if i == full.len() {
            emit_ranges(full, runs, state, add);
            return;
        }
        let (lo, hi) = full[i];
        let mut b = lo;
        loop {
            // A run of bytes with one next state (classes that lead to the same state
            // together: a partial run would split the characters into a range per prefix).
            let t = self.next(state, b);
            let mut e = b;
            while e < hi && self.next(state, e + 1) == t {
                e += 1;
            }
            if t != DEAD {
                runs.push((b, e));
                self.walk_sequence(t, full, runs, add);
                runs.pop();
            }
            if e == hi {
                break;
            }
            b = e + 1;
        }
    }
}

/// The characters of a run-product (`runs[i]` within the sequence's `full[i]`) as contiguous
/// ranges: past the last position whose run is partial every position is full, so each
/// combination of the bytes before it gives one range.
fn emit_ranges(
    full: &[(u8, u8)],
    runs: &[(u8, u8)],
    target: u32,
    add: &mut impl FnMut(u32, u32, u32),
) {
    let k = full.len();
    let j = (0..k).rev().find(|&i| runs[i] != full[i]).unwrap_or(0);
    let mut prefix = vec![0u8; j];
    fn decode(bytes: &[u8]) -> u32 {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.chars().next())
            .map_or(0, |c| c as u32)
    }
    fn go(
        pos: usize,
        j: usize,
        prefix: &mut [u8],
        full: &[(u8, u8)],
        runs: &[(u8, u8)],
        target: u32,
        add: &mut impl FnMut(u32, u32, u32),
    ) {
        if pos == j {
            let mut lo: Vec<u8> = prefix.to_vec();
            let mut hi: Vec<u8> = prefix.to_vec();
            lo.push(runs[j].0);
            hi.push(runs[j].1);
            for &(a, b) in &full[j + 1..] {
                lo.push(a);
                hi.push(b);
            }
            add(target, decode(&lo), decode(&hi));
            return;
        }
        for b in runs[pos].0..=runs[pos].1 {
            prefix[pos] = b;
            go(pos + 1, j, prefix, full, runs, target, add);
        }
    }
    go(0, j, &mut prefix, full, runs, target, add);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::splitmix64;

    fn dfa(p: &str) -> Dfa {
        Dfa::new(p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// Every string over `alphabet` up to `max_len` bytes.
    fn strings(alphabet: &[u8], max_len: usize) -> Vec<Vec<u8>> {
        let mut all = vec![Vec::new()];
        let mut layer = vec![Vec::new()];
        for _ in 0..max_len {
            let mut next = Vec::new();
            for s in &layer {
                for &c in alphabet {
                    let mut t: Vec<u8> = s.clone();
                    t.push(c);
                    next.push(t);
                }
            }
            all.extend(next.iter().cloned());
            layer = next;
        }
        all
    }

    /// The product against `matches` on every string up to 6 bytes over `alphabet`, and the
    /// invariants: dead row 0 maps to itself, every live state reaches acceptance.
    fn check(a: &Dfa, b: &Dfa, op: Op, alphabet: &[u8], what: &str) {
        let p = a.product(b, op, &Limits::DEFAULT).unwrap();
        let want = |s: &[u8]| match op {
            Op::Intersection => a.matches(s) && b.matches(s),
            Op::Difference => a.matches(s) && !b.matches(s),
        };
        let strings = strings(alphabet, 6);
        match &p {
            None => {
                for s in &strings {
                    assert!(!want(s), "{what}: empty, but {s:?} is in it");
                }
            }
            Some(p) => {
                check_invariants(p, what);
                for s in &strings {
                    assert_eq!(p.matches(s), want(s), "{what} {op:?} on {s:?}");
                    // Alive exactly when some extension matches (checked on short ones).
                    if p.walk(p.start(), s) == DEAD {
                        for t in strings.iter().filter(|t| t.len() <= 3) {
                            let mut x = s.clone();
                            x.extend_from_slice(t);
                            assert!(!want(&x), "{what}: dead after {s:?} but {x:?} matches");
                        }
                    }
                }
            }
        }
    }

    fn check_invariants(p: &Dfa, what: &str) {
        for b in 0..=255u8 {
            assert_eq!(p.next(DEAD, b), DEAD, "{what}: the dead state leaves");
        }
        // Every live state reaches an accepting one.
        for s in p.live_states() {
            let mut seen = vec![s];
            let mut k = 0;
            let mut reaches = false;
            while k < seen.len() {
                let x = seen[k];
                if p.is_accepting(x) {
                    reaches = true;
                    break;
                }
                for b in 0..=255u8 {
                    let t = p.next(x, b);
                    if t != DEAD && !seen.contains(&t) {
                        seen.push(t);
                    }
                }
                k += 1;
            }
            assert!(reaches, "{what}: state {s} cannot reach a match");
        }
    }

    #[test]
    fn products_agree_with_both_operands_on_every_short_string() {
        let pairs = [
            ("(ab|b)*a?", "[ab]{2,4}"),
            ("a*b*", "(ab)*"),
            ("[a-c]*c", "a[a-c]*"),
            ("(a|b)*a(a|b)", "b*"),
            ("[abc]{0,5}", "(a|bc)*"),
            ("a+", "b+"),
            ("", "a*"),
            ("(abc|ab|a)(c|bc)?", "a.c?.?"),
        ];
        for (x, y) in pairs {
            let (a, b) = (dfa(x), dfa(y));
            for op in [Op::Intersection, Op::Difference] {
                check(&a, &b, op, b"abc", &format!("{x} / {y}"));
                check(&b, &a, op, b"abc", &format!("{y} / {x}"));
            }
        }
    }

    #[test]
    fn an_empty_product_is_none() {
        let (a, b) = (dfa("a+"), dfa("b+"));
        let l = Limits::DEFAULT;
        assert!(a.product(&b, Op::Intersection, &l).unwrap().is_none());
        assert!(a.product(&a, Op::Difference, &l).unwrap().is_none());
        // a* minus a+ is the empty string alone.
        let e = dfa("a*").product(&a, Op::Difference, &l).unwrap().unwrap();
        assert!(e.matches(b"") && !e.matches(b"a"));
        assert_eq!(e.state_count(), 2);
    }

    /// A random pattern over `ab` from a small grammar.
    fn random_pattern(seed: &mut u64, depth: u32) -> String {
        let pick = |seed: &mut u64, n: u64| splitmix64(seed) % n;
        if depth == 0 {
            return ["a", "b", "[ab]", "a?", ""][pick(seed, 5) as usize].to_owned();
        }
        match pick(seed, 6) {
            0 => format!(
                "{}{}",
                random_pattern(seed, depth - 1),
                random_pattern(seed, depth - 1)
            ),
            1 => format!(
                "({}|{})",
                random_pattern(seed, depth - 1),
                random_pattern(seed, depth - 1)
            ),
            2 => format!("({})*", random_pattern(seed, depth - 1)),
            3 => format!("({}){{1,3}}", random_pattern(seed, depth - 1)),
            4 => format!("({})+", random_pattern(seed, depth - 1)),
            _ => random_pattern(seed, depth - 1),
        }
    }

    /// Random pattern pairs: each product against the `regex` crate on both patterns.
    #[test]
    fn random_products_agree_with_the_regex_crate() {
        let mut seed = 7u64;
        let strings = strings(b"ab", 7);
        let mut nonempty = 0;
        for _ in 0..150 {
            let (x, y) = (random_pattern(&mut seed, 3), random_pattern(&mut seed, 3));
            let rx = regex::bytes::Regex::new(&format!("^(?:{x})$")).unwrap();
            let ry = regex::bytes::Regex::new(&format!("^(?:{y})$")).unwrap();
            let (a, b) = (dfa(&x), dfa(&y));
            for op in [Op::Intersection, Op::Difference] {
                let p = a.product(&b, op, &Limits::DEFAULT).unwrap();
                if let Some(p) = &p {
                    nonempty += 1;
                    check_invariants(p, &x);
                }
                for s in &strings {
                    let want = match op {
                        Op::Intersection => rx.is_match(s) && ry.is_match(s),
                        Op::Difference => rx.is_match(s) && !ry.is_match(s),
                    };
                    let got = p.as_ref().is_some_and(|p| p.matches(s));
                    assert_eq!(got, want, "{x} {op:?} {y} on {s:?}");
                }
            }
        }
        assert!(nonempty > 100, "only {nonempty} non-empty products");
    }

    #[test]
    fn products_past_the_bounds_are_refused_with_the_limit() {
        // Counts of `a` modulo 61 and of `b` modulo 59: 61 and 59 states, a product of 3,599
        // (~43 KiB over three classes).
        let (a, b) = (dfa("((b*a){61})*b*"), dfa("((a*b){59})*a*"));
        let small = Limits {
            automaton_bytes: 16 * 1024,
            ..Limits::DEFAULT
        };
        let e = a
            .intersection(&b, "guided_regex", "`x`", &small)
            .unwrap_err();
        assert!(e.is_limit_exceeded());
        assert!(e.to_string().contains("16384-byte automaton limit"), "{e}");
        let tight = Limits {
            determinize_bytes: 2048,
            ..Limits::DEFAULT
        };
        let e = a.difference(&b, "guided_regex", "`x`", &tight).unwrap_err();
        assert!(
            e.to_string().contains("2048-byte determinization limit"),
            "{e}"
        );
        // Within the defaults it is built, and exact on a sample.
        let p = a.intersection(&b, "f", "`x`", &Limits::DEFAULT).unwrap();
        let p = p.unwrap();
        assert_eq!(p.state_count(), 61 * 59 + 1);
        let text = |na: usize, nb: usize| format!("{}{}", "a".repeat(na), "b".repeat(nb));
        assert!(p.matches(text(61, 59).as_bytes()) && p.matches(text(122, 0).as_bytes()));
        assert!(!p.matches(text(60, 59).as_bytes()) && !p.matches(text(61, 58).as_bytes()));
    }

    /// Decimal integers divisible by `k`: k residue states, a start, the sign and `0`.
    fn divisible(k: usize) -> Dfa {
        let (start, neg, zero) = (0, 1, 2);
        let digit = |b: u8| b.is_ascii_digit().then(|| usize::from(b - b'0'));
        Dfa::from_fn(
            k + 3,
            start,
            |s| s == zero || s == 3,
            |s, b| match (s, digit(b)) {
                (0, None) if b == b'-' => Some(neg),
                (0, Some(0)) => Some(zero),
                (0 | 1, Some(d)) if d > 0 => Some(3 + d % k),
                (s, Some(d)) if s >= 3 => Some(3 + ((s - 3) * 10 + d) % k),
                _ => None,
            },
            "f",
            "`k`",
            &Limits::DEFAULT,
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn hand_made_tables_become_dfas() {
        for k in [1, 2, 3, 7, 12, 25] {
            let d = divisible(k);
            check_invariants(&d, "divisible");
            for v in -2000i64..=2000 {
                assert_eq!(
                    d.matches(v.to_string().as_bytes()),
                    v % k as i64 == 0,
                    "{v} by {k}"
                );
            }
            assert!(!d.matches(b"-0") && !d.matches(b"007") && !d.matches(b""));
            // '-', '0' and the digits are told apart; every other byte is one class.
            assert!(d.stride <= 12, "{k}: {} classes", d.stride);
        }
        // Multiples of 7 between 100 and 199: the product with a range.
        let p = divisible(7)
            .intersection(&dfa("1[0-9][0-9]"), "f", "`x`", &Limits::DEFAULT)
            .unwrap()
            .unwrap();
        let got: Vec<u32> = (0..1000)
            .filter(|v: &u32| p.matches(v.to_string().as_bytes()))
            .collect();
        assert_eq!(got, (100..200).filter(|v| v % 7 == 0).collect::<Vec<_>>());
        // Unreachable and dead states are dropped; no accepting state is None.
        let d = Dfa::from_fn(
            4,
            2,
            |s| s == 0,
            |s, b| (s == 2 && b == b'x').then_some(0),
            "f",
            "`t`",
            &Limits::DEFAULT,
        )
        .unwrap()
        .unwrap();
        assert_eq!(d.state_count(), 3);
        assert!(d.matches(b"x") && !d.matches(b""));
        let none = Dfa::from_fn(
            2,
            0,
            |_| false,
            |_, _| Some(1),
            "f",
            "`t`",
            &Limits::DEFAULT,
        );
        assert!(none.unwrap().is_none());
        let e = Dfa::from_fn(
            1 << 20,
            0,
            |_| true,
            |_, _| None,
            "f",
            "`t`",
            &Limits::DEFAULT,
        )
        .unwrap_err();
        assert!(e.to_string().contains("262144-byte automaton limit"), "{e}");
    }

    #[test]
    fn character_lengths_count_utf8_characters() {
        let cases: [(&str, u64, Option<u64>); 7] = [
            ("abc", 3, Some(3)),
            ("é{2,4}", 2, Some(4)),
            ("(a|€€|😀)x?", 1, Some(3)),
            ("a*", 0, None),
            ("[a-z]{3}(x|yz)+", 4, None),
            ("", 0, Some(0)),
            ("\\p{Greek}{1,3}|ab", 1, Some(3)),
        ];
        for (p, lo, hi) in cases {
            assert_eq!(dfa(p).char_len(), (lo, hi), "{p}");
        }
    }

    #[test]
    fn character_transitions_cover_exactly_the_utf8_language() {
        for p in [
            "[a-zé€😀]x",
            "\\p{Greek}y|[^a]z",
            "[\u{80}-\u{7FF}]q|[\u{800}-\u{FFFF}]r|[\u{10000}-\u{10FFFF}]s",
            "[\u{3b1}-\u{3c9}\u{1F600}-\u{1F64F}]+",
            "(é|è)b|a",
        ] {
            let d = dfa(p);
            let trans = d.char_transitions(d.start());
            // Every character: the walk of its bytes against the listed target.
            let mut c = 0u32;
            while c <= 0x10FFFF {
                if let Some(ch) = char::from_u32(c) {
                    let mut buf = [0u8; 4];
                    let bytes = ch.encode_utf8(&mut buf).as_bytes();
                    let want = d.walk(d.start(), bytes);
                    let got = trans
                        .iter()
                        .find(|(_, r)| r.iter().any(|&(a, b)| a <= ch && ch <= b))
                        .map_or(DEAD, |(t, _)| *t);
                    assert_eq!(got, want, "{p}: U+{c:04X}");
                }
                // Every character near a boundary, a sample elsewhere.
                c += if c < 0x800 || c % 0x1000 < 0x10 || c % 0x1000 > 0xFF0 {
                    1
                } else {
                    37
                };
            }
        }
    }
}
