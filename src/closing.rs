//! Shortest completions: from any automaton state, the fewest bytes that complete an accepted
//! output, so that a run about to reach `max_tokens` can be steered onto one and end with an
//! output that parses and validates (`api::run`).
//!
//! - [`DfaClosing`]: per DFA state, the distance to a match and the byte to take, by one
//!   breadth-first search backwards from the matching states: O(states × byte classes).
//! - [`GrammarClosing`]: per grammar DFA state, the bytes to complete its rule, where a call
//!   costs the shortest sentence of the called rule (Knuth's generalization of Dijkstra's
//!   algorithm to grammars: a call is settled once its rule's start and its return state are);
//!   a stack's completion is the sum over its frames, a counter's frame `items still needed`
//!   times its item's shortest sentence.
//! - `json_object` has its own, over the lexer's states ([`crate::json_value`]).
//!
//! Each table is built on first use, once per compiled constraint, in time and memory linear
//! in the automaton (which its own limits bound): 5 bytes per DFA state, 12 per grammar state.
//! Bytes are chosen readable where a class offers a choice (`a`, then `0`, `A`, space,
//! punctuation), so a forced close writes `"aaa"` rather than control bytes.

use crate::grammar::{Grammar, NONE};
use crate::regex::{Dfa, DEAD};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// No path to acceptance.
const FAR: u64 = u64::MAX;

/// Each class's most readable byte: the first of `a-z 0-9 A-Z space !-~`, then any.
fn readable_reps(classes: &[u8; 256], n_classes: usize) -> Vec<u8> {
    let order = (b'a'..=b'z')
        .chain(b'0'..=b'9')
        .chain(b'A'..=b'Z')
        .chain([b' '])
        .chain(b'!'..=b'~')
        .chain(0..=255u8);
    let mut rep = vec![None; n_classes];
    for b in order {
        let c = usize::from(classes[usize::from(b)]);
        if c < n_classes && rep[c].is_none() {
            rep[c] = Some(b);
        }
    }
    rep.into_iter().map(|b| b.unwrap_or(0)).collect()
}

/// A DFA's shortest completions; see the module docs.
#[derive(Debug)]
pub(crate) struct DfaClosing {
    /// Per state index: bytes to a match ([`u32::MAX`]: none).
    dist: Vec<u32>,
    /// Per state index: the first byte of a shortest completion.
    byte: Vec<u8>,
}

impl DfaClosing {
    pub(crate) fn new(dfa: &Dfa) -> Self {
        let (n, stride) = (dfa.state_count(), dfa.stride());
        let classes = dfa.classes();
        let reps = readable_reps(classes, stride);
        // Predecessors by target, as one flat array (counting pass, then filling).
        let target = |i: usize, c: usize| dfa.index(dfa.next_by_class(i, c));
        let mut start = vec![0u32; n + 1];
        for i in 1..n {
            for c in 0..stride {
                start[target(i, c) + 1] += 1;
            }
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut preds = vec![(0u32, 0u8); start[n] as usize];
        for i in 1..n {
            for c in 0..stride {
                let t = target(i, c);
                preds[fill[t] as usize] = (i as u32, c as u8);
                fill[t] += 1;
            }
        }
        let mut dist = vec![u32::MAX; n];
        let mut byte = vec![0u8; n];
        let mut queue: Vec<usize> = (1..n).filter(|&i| dfa.is_accepting_index(i)).collect();
        for &i in &queue {
            dist[i] = 0;
        }
        let mut head = 0;
        while head < queue.len() {
            let t = queue[head];
            head += 1;
            let (a, z) = (start[t] as usize, start[t + 1] as usize);
            for &(p, c) in &preds[a..z] {
                let p = p as usize;
                if dist[p] == u32::MAX {
                    dist[p] = dist[t] + 1;
                    byte[p] = reps[usize::from(c)];
                    queue.push(p);
                }
            }
        }
        DfaClosing { dist, byte }
    }

    /// Bytes of a shortest completion from `state`; `None` for the dead state.
    pub(crate) fn len(&self, dfa: &Dfa, state: u32) -> Option<u64> {
        let d = self.dist[dfa.index(state)];
        (state != DEAD && d != u32::MAX).then_some(u64::from(d))
    }

    /// A shortest completion from `state`, if it is at most `cap` bytes.
    pub(crate) fn bytes(&self, dfa: &Dfa, mut state: u32, cap: usize) -> Option<Vec<u8>> {
        let len = self.len(dfa, state)?;
        if len > cap as u64 {
            return None;
        }
        let mut out = Vec::with_capacity(len as usize);
        while !dfa.is_accepting(state) {
            let b = self.byte[dfa.index(state)];
            out.push(b);
            state = dfa.next(state, b);
        }
        Some(out)
    }

    /// Heap bytes.
    pub(crate) fn memory_usage(&self) -> usize {
        self.dist.len() * 5
    }
}

/// How a grammar state completes its rule on a shortest path.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// Accepting: the rule may end here.
    Done,
    /// Take this byte within the rule.
    Byte(u8),
    /// Take this call edge (an index into the grammar's call edges).
    Call(u32),
    /// A counter's far phase entered from its start: this many items of this rule.
    Items(u32, u32),
    /// The rule cannot complete from here.
    Never,
}

/// A grammar's shortest completions; see the module docs.
#[derive(Debug)]
pub(crate) struct GrammarClosing {
    /// Per state: bytes to complete its rule ([`FAR`]: never).
    cost: Vec<u64>,
    way: Vec<Way>,
}

impl GrammarClosing {
    pub(crate) fn new(g: &Grammar) -> Self {
        let n = g.state_count();
        let stride = g.stride;
        let reps = readable_reps(&g.classes, stride);
        // Counter far phases: entered only from the counter's start (count 0), they stand for
        // `min` items of the item rule, whatever the static tables step them to.
        let mut far_items = vec![NONE; n];
        for c in &g.counters {
            if c.lo_far != NONE && c.min > 0 {
                let s = c.lo_far as usize;
                if let Some(&(rule, _)) = g.calls(c.lo_far).first() {
                    far_items[s] = rule;
                }
            }
        }
        // Dependents: byte predecessors of each state, and the call edges (and far phases)
        // waiting on each state.
        let mut byte_preds: Vec<Vec<(u32, u8)>> = vec![Vec::new(); n];
        let mut waiting: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut caller_of_edge = vec![0u32; g.call_edges.len()];
        for (s, &far) in far_items.iter().enumerate() {
            for x in g.moves.row(s) {
                for c in x.lo..=x.hi {
                    byte_preds[x.target as usize].push((s as u32, reps[usize::from(c)]));
                }
            }
            let (a, z) = (g.call_off[s] as usize, g.call_off[s + 1] as usize);
            for (e, &(rule, ret)) in g.call_edges[a..z].iter().enumerate() {
                let e = (a + e) as u32;
                caller_of_edge[e as usize] = s as u32;
                if far == NONE {
                    waiting[g.call_start[rule as usize] as usize].push(e);
                    waiting[ret as usize].push(e);
                }
            }
            if far != NONE {
                let item_start = g.call_start[far as usize];
                waiting[item_start as usize].push(u32::MAX - s as u32);
            }
        }
        let mut cost = vec![FAR; n];
        let mut way = vec![Way::Never; n];
        let mut settled = vec![false; n];
        let mut heap = BinaryHeap::new();
        for s in 0..n {
            if g.accepting[s] && far_items[s] == NONE {
                cost[s] = 0;
                way[s] = Way::Done;
                heap.push(Reverse((0u64, s as u32)));
            }
        }
        let offer = |s: usize,
                     c: u64,
                     w: Way,
                     cost: &mut Vec<u64>,
                     way: &mut Vec<Way>,
                     heap: &mut BinaryHeap<_>| {
            if c < cost[s] {
                cost[s] = c;
                way[s] = w;
                heap.push(Reverse((c, s as u32)));
            }
        };
        while let Some(Reverse((d, u))) = heap.pop() {
            let u = u as usize;
            if settled[u] || d != cost[u] {
                continue;
            }
            settled[u] = true;
            for &(p, b) in &byte_preds[u] {
                let p = p as usize;
                if !settled[p] {
                    offer(
                        p,
                        d.saturating_add(1),
                        Way::Byte(b),
                        &mut cost,
                        &mut way,
                        &mut heap,
                    );
                }
            }
            for &e in &waiting[u] {
                if e > u32::MAX / 2 {
                    // A far phase: `min` items of the rule whose start just settled.
                    let s = (u32::MAX - e) as usize;
                    let counter = &g.counters[g.counter_of[s] as usize];
                    let c = d.saturating_mul(u64::from(counter.min));
                    if !settled[s] {
                        offer(
                            s,
                            c,
                            Way::Items(far_items[s], counter.min),
                            &mut cost,
                            &mut way,
                            &mut heap,
                        );
                    }
                    continue;
                }
                let (rule, ret) = g.call_edges[e as usize];
                let (start, ret) = (g.call_start[rule as usize] as usize, ret as usize);
                let s = caller_of_edge[e as usize] as usize;
                if settled[start] && settled[ret] && !settled[s] {
                    let c = cost[start].saturating_add(cost[ret]);
                    offer(s, c, Way::Call(e), &mut cost, &mut way, &mut heap);
                }
            }
        }
        GrammarClosing { cost, way }
    }

    /// Bytes to complete the rule of state `s` (None: it cannot).
    pub(crate) fn state_len(&self, s: u32) -> Option<u64> {
        let c = self.cost[s as usize];
        (c != FAR).then_some(c)
    }

    /// Bytes to complete a counter's frame with `count` items matched: the items still
    /// needed times the item's shortest sentence (its phases past the horizon do not know
    /// the count).
    pub(crate) fn counter_len(&self, g: &Grammar, s: u32, count: u32) -> Option<u64> {
        match self.far_item(g, s) {
            Some((item, min)) => {
                let each = self.state_len(g.call_start[item as usize])?;
                Some(each.saturating_mul(u64::from(min.saturating_sub(count))))
            }
            None => self.state_len(s),
        }
    }

    /// For a counter's far phase: its item rule and `min`.
    fn far_item(&self, g: &Grammar, s: u32) -> Option<(u32, u32)> {
        match self.way[s as usize] {
            Way::Items(item, _) => Some((item, g.counters[g.counter_of[s as usize] as usize].min)),
            _ => None,
        }
    }

    /// Appends a shortest completion of state `s`'s rule (a counter frame's with `count`
    /// items matched, when `count` is known) to `out`; false, leaving `out` past `cap`
    /// bytes, when it would be longer than that.
    pub(crate) fn write(
        &self,
        g: &Grammar,
        s: u32,
        count: Option<u32>,
        out: &mut Vec<u8>,
        cap: usize,
    ) -> bool {
        // (state, items of it still to write) to continue at, innermost last.
        let mut todo: Vec<(u32, u32)> = vec![(s, 1)];
        if let (Some(k), Some((item, min))) = (count, self.far_item(g, s)) {
            todo = vec![(g.call_start[item as usize], min.saturating_sub(k))];
        }
        while let Some((mut s, times)) = todo.pop() {
            if times == 0 {
                continue;
            }
            if times > 1 {
                todo.push((s, times - 1));
            }
            loop {
                if out.len() > cap {
                    return false;
                }
                match self.way[s as usize] {
                    Way::Done => break,
                    Way::Never => return false,
                    Way::Byte(b) => {
                        out.push(b);
                        s = g.next_in_rule(s, b);
                    }
                    Way::Call(e) => {
                        let (rule, ret) = g.call_edges[e as usize];
                        todo.push((ret, 1));
                        s = g.call_start[rule as usize];
                    }
                    Way::Items(item, min) => {
                        todo.push((g.call_start[item as usize], min));
                        break;
                    }
                }
            }
        }
        out.len() <= cap
    }

    /// Heap bytes.
    pub(crate) fn memory_usage(&self) -> usize {
        self.cost.len() * (8 + std::mem::size_of::<Way>())
    }
}

#[cfg(test)]
mod tests {
    use super::DfaClosing;
    use crate::constraint::{Constraint, Matcher, Spec};
    use crate::sampling::splitmix64;
    use crate::vocab::{TokenId, Vocabulary};
    use std::collections::{HashSet, VecDeque};
    use std::sync::Arc;

    /// Every byte a token of its own, then end-of-sequence: a matcher steps byte by byte.
    fn bytes_vocab() -> Arc<Vocabulary> {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        tokens.push(b"</s>".to_vec());
        Arc::new(Vocabulary::new(tokens, vec![256]).unwrap())
    }

    /// Random walks through `spec`'s language (up to `steps` bytes each); at every point, the
    /// shortest completion completes the output, its length is the one reported, and (by
    /// breadth-first search over the allowed bytes, up to `exhaustive` bytes) no shorter string
    /// completes it.
    fn check(spec: &Spec, walks: usize, steps: usize, exhaustive: u64) -> usize {
        let vocab = bytes_vocab();
        let c = Arc::new(Constraint::from_spec(spec, vocab.clone()).unwrap());
        let mut rng = 0x00c1_05e5_u64;
        let mut checked = 0;
        for _ in 0..walks {
            let mut m = Matcher::new(c.clone());
            let mut prefix = Vec::new();
            for _ in 0..steps {
                let len = m.closing_len().expect("a live output can complete");
                let close = m.closing_bytes(usize::MAX).expect("no cap");
                assert_eq!(close.len() as u64, len, "{spec:?} after {prefix:?}");
                let mut whole = prefix.clone();
                whole.extend_from_slice(&close);
                assert!(c.matches(&whole), "{spec:?}: {prefix:?} + {close:?}");
                if len > 0 && len <= exhaustive {
                    assert!(
                        !completes_within(&m, len as usize - 1),
                        "{spec:?} after {prefix:?}: shorter than {close:?}"
                    );
                }
                checked += 1;
                let allowed = allowed_bytes(&m);
                if allowed.is_empty() {
                    break;
                }
                let t = allowed[(splitmix64(&mut rng) % allowed.len() as u64) as usize];
                m.advance(t).unwrap();
                prefix.push(t as u8);
            }
        }
        checked
    }

    /// Whether some string of at most `depth` bytes completes `m`'s output.
    fn completes_within(m: &Matcher, depth: usize) -> bool {
        if m.is_accepting() {
            return true;
        }
        depth > 0
            && allowed_bytes(m).into_iter().any(|t| {
                let mut next = m.clone();
                next.advance(t).unwrap();
                completes_within(&next, depth - 1)
            })
    }

    fn allowed_bytes(m: &Matcher) -> Vec<TokenId> {
        let mask = m.mask().unwrap();
        (0..256u32)
            .filter(|&t| mask.is_allowed(t as usize))
            .collect()
    }

    /// The distance from `state` to a match, by breadth-first search over all 256 bytes.
    fn dfa_distance(dfa: &crate::regex::Dfa, state: u32) -> Option<u64> {
        let mut seen = HashSet::from([state]);
        let mut queue = VecDeque::from([(state, 0u64)]);
        while let Some((s, d)) = queue.pop_front() {
            if dfa.is_accepting(s) {
                return Some(d);
            }
            for b in 0..=255u8 {
                let t = dfa.next(s, b);
                if t != crate::regex::DEAD && seen.insert(t) {
                    queue.push_back((t, d + 1));
                }
            }
        }
        None
    }

    #[test]
    fn dfa_closes_are_shortest() {
        let patterns = [
            "[a-z]{3,20}@[a-z]{2,10}\\.(com|org)",
            "(ab|c)*d{2}",
            "x|[0-9]{5}",
            "\\{\"a\":(true|false)(,\"b\":[0-9]+)?\\}",
            "[^\"]{4}\"",
        ];
        for pattern in patterns {
            let n = check(&Spec::Regex(pattern.into()), 20, 25, 2);
            assert!(n > 100, "{pattern}: {n} points");
            // Every state's distance against a search over all bytes.
            let dfa = crate::regex::Dfa::new(pattern).unwrap();
            let closing = DfaClosing::new(&dfa);
            for i in 1..dfa.state_count() {
                let s = (i * dfa.stride()) as u32;
                assert_eq!(
                    closing.len(&dfa, s),
                    dfa_distance(&dfa, s),
                    "{pattern} state {i}"
                );
            }
        }
    }

    #[test]
    fn grammar_closes_complete_and_are_shortest() {
        for grammar in [
            "root ::= \"[\" (root (\",\" root)*)? \"]\" | \"a\"",
            "root ::= list\nlist ::= \"(\" item* \")\"\nitem ::= list | [0-9]+ | \"'\" [a-z]* \"'\"",
            // Counters: long repetitions kept as counts in their frames.
            "root ::= \"<\" \"ab\"{150,300} \">\" item{70}\nitem ::= [xy] | \"(\" item \")\"",
            "root ::= (\"k\" [0-9]{2,200} \";\"){3,}",
            include_str!("../tests/data/grammars/json.gbnf"),
            include_str!("../tests/data/grammars/arithmetic.gbnf"),
            include_str!("../tests/data/grammars/c_like.gbnf"),
            include_str!("../tests/data/grammars/chess.gbnf"),
        ] {
            let n = check(&Spec::Grammar(grammar.into()), 30, 60, 2);
            assert!(n > 100, "{grammar}: {n} points");
        }
    }

    #[test]
    fn json_object_closes_are_shortest() {
        let n = check(&Spec::JsonObject, 40, 40, 2);
        assert!(n > 1000, "{n} points");
    }
}
