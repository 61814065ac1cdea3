//! `uniqueItems` over a few scalar values: arrays whose items come from a small finite set
//! of JSON scalars, no value twice, as one byte automaton (see [`unique_lists`]).

use super::node::Node;
use super::same_value;
use crate::limits::Limits;
use crate::regex::{Dfa, Refusal};
use serde_json::Value;
use std::sync::Arc;

/// Most values [`unique_lists`] takes: its automaton has a state per subset of them.
const MAX_UNIQUE_VALUES: usize = 12;

/// The texts of an item node that is a finite set of JSON scalars, each value one text
/// (`enum`, `const`, `boolean`, `null` items): None for anything else, for more than
/// [`MAX_UNIQUE_VALUES`], or when two texts are one value.
pub(super) fn scalar_texts(n: &Node) -> Option<Vec<String>> {
    fn collect(n: &Node, out: &mut Vec<String>) -> Option<()> {
        match n {
            Node::Nothing => Some(()),
            Node::Lit(s) => {
                out.push(s.clone());
                (out.len() <= MAX_UNIQUE_VALUES).then_some(())
            }
            Node::Alt(items) => items.iter().try_for_each(|i| collect(i, out)),
            _ => None,
        }
    }
    let mut texts = Vec::new();
    collect(n, &mut texts)?;
    let values: Vec<Value> = texts
        .iter()
        .map(|t| serde_json::from_str::<Value>(t).ok())
        .collect::<Option<_>>()?;
    let scalar = |v: &Value| !matches!(v, Value::Array(_) | Value::Object(_));
    let distinct = values
        .iter()
        .enumerate()
        .all(|(i, a)| values[..i].iter().all(|b| !same_value(a, b)));
    (values.iter().all(scalar) && distinct).then_some(texts)
}

/// Arrays (`[`, items separated by [`super::sep`], `]`) of `min..=max` items from `texts`, no text
/// twice: a byte automaton whose states are the set of texts used so far times the place in
/// the array (after `[`, after `,`, after its space, or a node of the texts' trie), so
/// `2^k x (trie nodes + 2) + 3` states, refused past `limits`. A text a state has used is
/// not entered again, and `,` is only offered while an unused text remains.
pub(super) fn unique_lists(
    texts: &[String],
    min: u32,
    max: Option<u32>,
    limits: &Limits,
) -> Result<Node, Refusal> {
    let k = texts.len();
    if min as usize > k {
        return Ok(Node::Nothing);
    }
    // The trie: node 0 is the root; `below` is the set of texts under a node.
    let mut kids: Vec<Vec<(u8, usize)>> = vec![Vec::new()];
    let mut ends: Vec<Option<usize>> = vec![None];
    let mut below: Vec<u32> = vec![0];
    for (t, text) in texts.iter().enumerate() {
        let mut at = 0;
        below[0] |= 1 << t;
        for &b in text.as_bytes() {
            at = match kids[at].iter().find(|&&(x, _)| x == b) {
                Some(&(_, next)) => next,
                None => {
                    kids.push(Vec::new());
                    ends.push(None);
                    below.push(0);
                    let next = kids.len() - 1;
                    kids[at].push((b, next));
                    next
                }
            };
            below[at] |= 1 << t;
        }
        ends[at] = Some(t);
    }
    let nodes = kids.len();
    const START: usize = 0;
    const OPEN: usize = 1;
    const DONE: usize = 2;
    let per_set = nodes + 2;
    let full: u32 = (1u32 << k) - 1;
    // Rows hold a class per byte the texts use (bytes in one place of one text are told
    // apart by it) and `[`, `]`, `,`, space and the rest. The live states (below) are counted
    // first, without a table: past a quarter of the bound, refused before any work or
    // allocation (12 values of 1,100 characters had a 2^12 x 13,200-entry index: 926 MiB).
    // The list is embedded in the schema's automaton, which must fit too: at the whole
    // bound 7 values of 3-7 letters built (~10 ms), then failed the schema's DFA and its
    // grammar (28 ms in all); 9 took 70 ms to fail.
    let mut used_bytes = [false; 256];
    for b in texts.iter().flat_map(|t| t.bytes()) {
        used_bytes[usize::from(b)] = true;
    }
    let classes = used_bytes.iter().filter(|&&u| u).count() + 5;
    // A trie node is live under the used sets that leave a text below it unused.
    let sets = 1usize << k;
    let live = 3
        + 2 * sets
        + below[1..]
            .iter()
            .map(|b| sets - (sets >> b.count_ones()))
            .sum::<usize>();
    if live.saturating_mul(classes * 4) > limits.automaton_bytes / 4 {
        return Err(Refusal::Table {
            states: 0,
            limit: limits.automaton_bytes,
        });
    }
    // The live states, numbered from 3: per used set, after `,`, after its space, and each
    // trie node (not the root) with an unused text below it. Index `used * per_set + place`,
    // place 0 and 1 for the separator, 2 + node for the trie; a node has a text below it, so
    // at least half its places are live and the index is within twice the count above.
    let mut id = vec![usize::MAX; sets * per_set];
    let mut of: Vec<(u32, usize)> = Vec::with_capacity(live - 3);
    for used in 0..=full {
        for place in (0..per_set).filter(|&p| p != 2) {
            if place < 2 || below[place - 2] & !used != 0 {
                id[used as usize * per_set + place] = 3 + of.len();
                of.push((used, place));
            }
        }
    }
    let states = 3 + of.len();
    debug_assert_eq!(states, live);
    let at = |used: u32, place: usize| id[used as usize * per_set + place];
    let enter = |used: u32, node: usize, b: u8| {
        kids[node]
            .iter()
            .find(|&&(x, next)| x == b && below[next] & !used != 0)
            .map(|&(_, next)| at(used, 2 + next))
    };
    let dfa = Dfa::from_fn_within(
        states,
        START,
        |s| s == DONE,
        |s, b| match s {
            START => (b == b'[').then_some(OPEN),
            OPEN if b == b']' => (min == 0).then_some(DONE),
            OPEN => enter(0, 0, b),
            DONE => None,
            s => {
                let (used, place) = of[s - 3];
                match place {
                    0 if b == b' ' => Some(at(used, 1)),
                    0 | 1 => enter(used, 0, b),
                    _ => {
                        let node = place - 2;
                        if let Some(next) = enter(used, node, b) {
                            return Some(next);
                        }
                        let t = ends[node].filter(|&t| used & 1 << t == 0)?;
                        let now = used | 1 << t;
                        let count = now.count_ones();
                        match b {
                            b',' if now != full && max.is_none_or(|x| count < x) => {
                                Some(at(now, 0))
                            }
                            b']' if count >= min => Some(DONE),
                            _ => None,
                        }
                    }
                }
            }
        },
        limits,
    )?;
    Ok(dfa.map_or(Node::Nothing, |d| Node::Automaton(Arc::new(d))))
}
