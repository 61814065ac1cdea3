//! The compiled form of a schema: a small regular-expression IR, rendered three ways.
//!
//! - [`Node::to_regex`]: regex-syntax text, the "compiled regex" the spec bounds at 256 KiB.
//! - [`Node::to_nfa`]: a Thompson NFA built directly, determinized by [`crate::regex::Dfa`].
//! - [`Node::gbnf_rules`] (`gbnf.rs`): grammar rules for the grammar engine, whose text
//!   ([`Node::to_gbnf`]) is the llama.cpp GBNF export for remote engines.
//!
//! All three describe the same language. Two constructs exist only so that the NFA and the
//! grammar need not repeat an item the way a regex must: [`Node::Seq`] (the properties of an
//! object, each optional or required, comma-separated in a fixed order) and [`Node::List`]
//! (array items). A regex for `n` optional properties repeats the tail after each possible
//! first property (quadratic text); the NFA builds each property once and links them as a
//! ladder, so the automaton stays linear in the schema.
//!
//! One leaf is already an automaton: [`Node::Automaton`], a byte DFA built by the automaton
//! algebra ([`Node::intersect`]: a `pattern` with lengths, a `format` with a `pattern`,
//! multiples of an integer) for a language that has no compact expression here. The NFA
//! embeds its states, the grammar writes one rule per state, and it has no regex text
//! ([`Node::to_regex`] fails on it).

use crate::limits::Limits;
use crate::regex::{Dfa, Refusal, DEAD};
use regex_automata::nfa::thompson::{self, Builder, Transition, NFA};
use regex_automata::util::primitives::StateID;
use regex_syntax::utf8::Utf8Sequences;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

/// Sorted, non-overlapping, non-adjacent ranges of Unicode scalar values.
pub(crate) type Ranges = Vec<(char, char)>;

/// A regular language over UTF-8 text; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    /// The empty string.
    Empty,
    /// No string at all.
    Nothing,
    /// Exactly this text.
    Lit(String),
    /// One character from these ranges (never empty; see [`Node::class`]).
    Class(Ranges),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    /// `min..=max` repetitions (`None`: unbounded).
    Repeat(Arc<Node>, u32, Option<u32>),
    /// Items in this order, each present or (when not required) absent, `sep` between two
    /// present items; with `nonempty`, at least one item is present.
    Seq {
        items: Vec<(Node, bool)>,
        sep: Arc<Node>,
        nonempty: bool,
    },
    /// `min..=max` items separated by `sep`.
    List {
        item: Arc<Node>,
        sep: Arc<Node>,
        min: u32,
        max: Option<u32>,
    },
    /// The language of a byte DFA over UTF-8 text (see the module docs).
    Automaton(Arc<Dfa>),
    /// Any JSON value, nested to any depth ([`super::any_json_body`] spells it out). Not
    /// regular: a node holding one has no NFA ([`Node::is_regular`]) and runs as a grammar,
    /// where it is one recursive rule.
    AnyJson,
}

/// Normalizes ranges: sorted, merged when overlapping or adjacent.
pub(crate) fn normalize(mut r: Vec<(char, char)>) -> Ranges {
    r.retain(|(a, b)| a <= b);
    r.sort();
    let mut out: Ranges = Vec::with_capacity(r.len());
    for (a, b) in r {
        if let Some(last) = out.last_mut() {
            if (a as u32) <= (last.1 as u32).saturating_add(1) {
                if b > last.1 {
                    last.1 = b;
                }
                continue;
            }
        }
        out.push((a, b));
    }
    out
}

/// The characters in `a` and not in `b`.
pub(crate) fn subtract(a: &Ranges, b: &Ranges) -> Ranges {
    let b = &normalize(b.clone());
    let mut out = Vec::new();
    for &(lo, hi) in a {
        let mut cur = lo as u32;
        let hi = hi as u32;
        for &(blo, bhi) in b {
            let (blo, bhi) = (blo as u32, bhi as u32);
            if bhi < cur || blo > hi {
                continue;
            }
            if blo > cur {
                push_u32_range(&mut out, cur, blo - 1);
            }
            cur = bhi + 1;
            if cur > hi {
                break;
            }
        }
        if cur <= hi {
            push_u32_range(&mut out, cur, hi);
        }
    }
    normalize(out)
}

/// The characters in both.
pub(crate) fn intersect(a: &Ranges, b: &Ranges) -> Ranges {
    let mut out = Vec::new();
    for &(alo, ahi) in a {
        for &(blo, bhi) in b {
            let lo = alo.max(blo);
            let hi = ahi.min(bhi);
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    normalize(out)
}

/// Pushes `lo..=hi` (code points), skipping the surrogate gap.
fn push_u32_range(out: &mut Vec<(char, char)>, lo: u32, hi: u32) {
    let pieces = [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi)];
    for (a, b) in pieces {
        if a <= b {
            if let (Some(a), Some(b)) = (char::from_u32(a), char::from_u32(b)) {
                out.push((a, b));
            }
        }
    }
}

pub(crate) fn contains(r: &Ranges, c: char) -> bool {
    r.iter().any(|&(a, b)| a <= c && c <= b)
}

impl Node {
    pub(crate) fn lit(s: impl Into<String>) -> Node {
        let s = s.into();
        if s.is_empty() {
            Node::Empty
        } else {
            Node::Lit(s)
        }
    }

    pub(crate) fn class(r: Vec<(char, char)>) -> Node {
        let r = normalize(r);
        if r.is_empty() {
            Node::Nothing
        } else if r.len() == 1 && r[0].0 == r[0].1 {
            Node::Lit(r[0].0.to_string())
        } else {
            Node::Class(r)
        }
    }

    pub(crate) fn concat(items: Vec<Node>) -> Node {
        let mut out: Vec<Node> = Vec::with_capacity(items.len());
        for n in items {
            match n {
                Node::Empty => {}
                Node::Nothing => return Node::Nothing,
                Node::Concat(inner) => {
                    for m in inner {
                        push_concat(&mut out, m);
                    }
                }
                other => push_concat(&mut out, other),
            }
        }
        match out.len() {
            0 => Node::Empty,
            1 => out.pop().expect("one item"),
            _ => Node::Concat(out),
        }
    }

    pub(crate) fn alt(items: Vec<Node>) -> Node {
        let mut out: Vec<Node> = Vec::with_capacity(items.len());
        for n in items {
            match n {
                Node::Nothing => {}
                Node::Alt(inner) => {
                    for m in inner {
                        if !out.contains(&m) {
                            out.push(m);
                        }
                    }
                }
                other => {
                    if !out.contains(&other) {
                        out.push(other);
                    }
                }
            }
        }
        match out.len() {
            0 => Node::Nothing,
            1 => out.pop().expect("one item"),
            _ => Node::Alt(out),
        }
    }

    pub(crate) fn repeat(n: Node, min: u32, max: Option<u32>) -> Node {
        if let Some(max) = max {
            if max < min {
                return Node::Nothing;
            }
            if max == 0 {
                return Node::Empty;
            }
        }
        match n {
            Node::Empty => Node::Empty,
            Node::Nothing if min == 0 => Node::Empty,
            Node::Nothing => Node::Nothing,
            n if min == 1 && max == Some(1) => n,
            n => Node::Repeat(Arc::new(n), min, max),
        }
    }

    pub(crate) fn opt(n: Node) -> Node {
        Node::repeat(n, 0, Some(1))
    }

    pub(crate) fn seq(items: Vec<(Node, bool)>, sep: Node, nonempty: bool) -> Node {
        let mut kept = Vec::with_capacity(items.len());
        for (n, required) in items {
            match (n, required) {
                (Node::Nothing, true) => return Node::Nothing,
                (Node::Nothing, false) => {}
                (n, r) => kept.push((n, r)),
            }
        }
        if kept.is_empty() {
            return if nonempty { Node::Nothing } else { Node::Empty };
        }
        if kept.iter().all(|(_, r)| *r) {
            let mut parts = Vec::new();
            for (i, (n, _)) in kept.into_iter().enumerate() {
                if i > 0 {
                    parts.push(sep.clone());
                }
                parts.push(n);
            }
            return Node::concat(parts);
        }
        Node::Seq {
            items: kept,
            sep: Arc::new(sep),
            nonempty,
        }
    }

    pub(crate) fn list(item: Node, sep: Node, min: u32, max: Option<u32>) -> Node {
        if max.is_some_and(|m| m < min) {
            return Node::Nothing;
        }
        if max == Some(0) {
            return Node::Empty;
        }
        match item {
            Node::Nothing if min == 0 => Node::Empty,
            Node::Nothing => Node::Nothing,
            item => Node::List {
                item: Arc::new(item),
                sep: Arc::new(sep),
                min,
                max,
            },
        }
    }

    /// Whether the language is regular, so that [`Node::to_nfa`] can build it: every node
    /// but [`Node::AnyJson`] is.
    pub(crate) fn is_regular(&self) -> bool {
        match self {
            Node::AnyJson => false,
            Node::Empty | Node::Nothing | Node::Lit(_) | Node::Class(_) | Node::Automaton(_) => {
                true
            }
            Node::Concat(items) | Node::Alt(items) => items.iter().all(Node::is_regular),
            Node::Repeat(item, ..) => item.is_regular(),
            Node::Seq { items, sep, .. } => {
                sep.is_regular() && items.iter().all(|(i, _)| i.is_regular())
            }
            Node::List { item, sep, .. } => item.is_regular() && sep.is_regular(),
        }
    }

    /// A [`Node::List`] as the plain concatenation and repetition a regex needs (its
    /// children keep their lists); any other node as it is.
    fn expand(&self) -> Node {
        match self {
            Node::List {
                item,
                sep,
                min,
                max,
            } => {
                let rest = Node::repeat(
                    Node::concat(vec![(**sep).clone(), (**item).clone()]),
                    min.saturating_sub(1),
                    max.map(|m| m - 1),
                );
                let full = Node::concat(vec![(**item).clone(), rest]);
                if *min == 0 {
                    Node::opt(full)
                } else {
                    full
                }
            }
            other => other.clone(),
        }
    }

    /// Renders regex-syntax text; `Err(())` as soon as it passes `limit` bytes.
    pub(crate) fn to_regex(&self, limit: usize) -> Result<String, ()> {
        let mut out = String::new();
        self.write_regex(&mut out, limit)?;
        Ok(out)
    }

    fn write_regex(&self, out: &mut String, limit: usize) -> Result<(), ()> {
        if out.len() > limit {
            return Err(());
        }
        match self {
            // A DFA has no regex text here (state elimination can be exponential).
            Node::Automaton(_) => return Err(()),
            Node::Empty => out.push_str("(?:)"),
            Node::Nothing => out.push_str(r"[^\x00-\x{10FFFF}]"),
            // Brackets nest without bound: no regex.
            Node::AnyJson => return Err(()),
            Node::Lit(s) => out.push_str(&regex_syntax::escape(s)),
            Node::Class(r) => write_regex_class(out, r),
            Node::Concat(items) => {
                // Alternations render grouped, so children concatenate as they are.
                for n in items {
                    n.write_regex(out, limit)?;
                }
            }
            Node::Alt(items) => {
                out.push_str("(?:");
                for (i, n) in items.iter().enumerate() {
                    if i > 0 {
                        out.push('|');
                    }
                    n.write_regex(out, limit)?;
                }
                out.push(')');
            }
            Node::Repeat(n, min, max) => {
                let atomic = match &**n {
                    Node::Lit(s) => s.chars().count() == 1,
                    Node::Class(_) | Node::Alt(_) => true,
                    _ => false,
                };
                if atomic {
                    n.write_regex(out, limit)?;
                } else {
                    out.push_str("(?:");
                    n.write_regex(out, limit)?;
                    out.push(')');
                }
                match (min, max) {
                    (0, None) => out.push('*'),
                    (1, None) => out.push('+'),
                    (0, Some(1)) => out.push('?'),
                    (m, None) => {
                        let _ = write!(out, "{{{m},}}");
                    }
                    (m, Some(x)) if m == x => {
                        let _ = write!(out, "{{{m}}}");
                    }
                    (m, Some(x)) => {
                        let _ = write!(out, "{{{m},{x}}}");
                    }
                }
            }
            Node::Seq {
                items,
                sep,
                nonempty,
            } => {
                // One alternative per first item emitted, each followed by the later items'
                // steps: the text is quadratic in the items (checked against `limit` as it
                // grows), but nothing is built for it. `expand` would clone every later item
                // into every alternative first: 1,000 optional free-form properties were
                // gigabytes of tree before the first byte of text.
                out.push_str("(?:");
                let mut saw_required = false;
                for (j, (item, required)) in items.iter().enumerate() {
                    if j > 0 {
                        out.push('|');
                    }
                    item.write_regex(out, limit)?;
                    for (later, later_required) in &items[j + 1..] {
                        if !later_required {
                            out.push_str("(?:");
                        }
                        sep.write_regex(out, limit)?;
                        later.write_regex(out, limit)?;
                        if !later_required {
                            out.push_str(")?");
                        }
                    }
                    if *required {
                        saw_required = true;
                        break;
                    }
                }
                if !saw_required && !nonempty {
                    out.push('|');
                }
                out.push(')');
            }
            Node::List { .. } => {
                // An expanded List is a Concat or a Repeat (a few clones of its item).
                let e = self.expand();
                out.push_str("(?:");
                e.write_regex(out, limit)?;
                out.push(')');
            }
        }
        if out.len() > limit {
            return Err(());
        }
        Ok(())
    }

    /// Length bounds in characters: `(min, max)`, `None` for unbounded.
    pub(crate) fn char_len(&self) -> (u64, Option<u64>) {
        match self {
            Node::Empty => (0, Some(0)),
            Node::Nothing => (u64::MAX, Some(0)),
            Node::Lit(s) => {
                let n = s.chars().count() as u64;
                (n, Some(n))
            }
            Node::Class(_) => (1, Some(1)),
            Node::AnyJson => (1, None),
            Node::Concat(items) => items.iter().fold((0, Some(0)), |(a, b), n| {
                let (c, d) = n.char_len();
                (
                    a.saturating_add(c),
                    b.zip(d).map(|(x, y)| x.saturating_add(y)),
                )
            }),
            Node::Alt(items) => {
                let mut lo = u64::MAX;
                let mut hi = Some(0u64);
                for n in items {
                    let (c, d) = n.char_len();
                    lo = lo.min(c);
                    hi = hi.zip(d).map(|(x, y)| x.max(y));
                }
                (lo, hi)
            }
            Node::Repeat(n, min, max) => {
                let (c, d) = n.char_len();
                (
                    c.saturating_mul(u64::from(*min)),
                    d.zip(*max).map(|(x, m)| x.saturating_mul(u64::from(m))),
                )
            }
            Node::Seq {
                items,
                sep,
                nonempty,
            } => {
                // Shortest: the required items alone (or the shortest item when one must be
                // emitted and none is required); longest: every item. Computed here rather
                // than on `expand`, whose tree is quadratic in the items.
                let (sep_min, sep_max) = sep.char_len();
                let lens: Vec<(u64, Option<u64>)> =
                    items.iter().map(|(n, _)| n.char_len()).collect();
                let required: Vec<u64> = items
                    .iter()
                    .zip(&lens)
                    .filter(|((_, r), _)| *r)
                    .map(|(_, l)| l.0)
                    .collect();
                let min = if required.is_empty() {
                    if *nonempty {
                        lens.iter().map(|l| l.0).min().unwrap_or(0)
                    } else {
                        0
                    }
                } else {
                    let seps = sep_min.saturating_mul(required.len() as u64 - 1);
                    required.iter().fold(seps, |a, &b| a.saturating_add(b))
                };
                let seps = match lens.len() {
                    0 | 1 => Some(0),
                    n => sep_max.map(|m| m.saturating_mul(n as u64 - 1)),
                };
                let max = seps.and_then(|seps| {
                    lens.iter()
                        .try_fold(seps, |a, l| Some(a.saturating_add(l.1?)))
                });
                (min, max)
            }
            Node::List { .. } => self.expand().char_len(),
            Node::Automaton(d) => d.char_len(),
        }
    }

    /// Whether `input` as a whole is in the language (a direct simulation, for short inputs:
    /// filtering `enum` values, tests).
    pub(crate) fn matches(&self, input: &[u8]) -> bool {
        let start: BTreeSet<usize> = [0].into_iter().collect();
        self.ends(input, &start).contains(&input.len())
    }

    /// The end positions reachable from any of `starts`.
    fn ends(&self, s: &[u8], starts: &BTreeSet<usize>) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        match self {
            Node::Empty => return starts.clone(),
            Node::Nothing => {}
            Node::Lit(l) => {
                for &p in starts {
                    if s[p..].starts_with(l.as_bytes()) {
                        out.insert(p + l.len());
                    }
                }
            }
            Node::Class(r) => {
                for &p in starts {
                    if let Some((c, n)) = decode_char(&s[p..]) {
                        if contains(r, c) {
                            out.insert(p + n);
                        }
                    }
                }
            }
            Node::Concat(items) => {
                let mut cur = starts.clone();
                for n in items {
                    cur = n.ends(s, &cur);
                    if cur.is_empty() {
                        break;
                    }
                }
                return cur;
            }
            Node::Alt(items) => {
                for n in items {
                    out.extend(n.ends(s, starts));
                }
            }
            Node::Repeat(n, min, max) => {
                let mut cur = starts.clone();
                let mut seen: BTreeSet<usize> = BTreeSet::new();
                // u64: `{4294967295,}` counts past u32::MAX before the loop ends.
                let (min, max) = (u64::from(*min), max.map(u64::from));
                let mut i = 0u64;
                loop {
                    if i >= min {
                        out.extend(cur.iter().copied());
                    }
                    if max.is_some_and(|m| i >= m) || cur.is_empty() {
                        break;
                    }
                    let next = n.ends(s, &cur);
                    i += 1;
                    if i < min && next == cur {
                        // A fixed point (the item matched only the empty string from every
                        // position): the rest of the minimum changes nothing, so the count
                        // (up to 2^32) is not run one step at a time. Otherwise each step
                        // grows the set (an item that can be empty) or moves its least
                        // position on (one that cannot), so this loop runs at most
                        // `input.len() + 1` times.
                        i = min;
                    }
                    if i > min {
                        // Past the minimum only new positions matter (the loop is monotone).
                        let fresh: BTreeSet<usize> =
                            next.into_iter().filter(|p| !seen.contains(p)).collect();
                        seen.extend(fresh.iter().copied());
                        cur = fresh;
                    } else {
                        cur = next;
                    }
                }
            }
            Node::Seq {
                items,
                sep,
                nonempty,
            } => {
                // The NFA's ladder (see `nfa_node`): `fresh` = nothing emitted yet, `after` =
                // something emitted, so the next item needs a separator first.
                let mut fresh = starts.clone();
                let mut after = BTreeSet::new();
                for (item, required) in items {
                    let mut from = fresh.clone();
                    from.extend(sep.ends(s, &after));
                    let next = item.ends(s, &from);
                    if *required {
                        fresh.clear();
                        after = next;
                    } else {
                        after.extend(next);
                    }
                }
                if !nonempty {
                    after.extend(fresh);
                }
                return after;
            }
            Node::List { .. } => return self.expand().ends(s, starts),
            Node::Automaton(d) => {
                for &p in starts {
                    let mut state = d.start();
                    if d.is_accepting(state) {
                        out.insert(p);
                    }
                    for (i, &b) in s[p..].iter().enumerate() {
                        state = d.next(state, b);
                        if state == DEAD {
                            break;
                        }
                        if d.is_accepting(state) {
                            out.insert(p + i + 1);
                        }
                    }
                }
            }
            Node::AnyJson => {
                let mut memo = HashMap::default();
                for &p in starts {
                    out.extend(any_json_ends(s, p, 0, &mut memo));
                }
            }
        }
        out
    }

    /// The strings in both `a` and `b` as one [`Node::Automaton`] ([`Node::Nothing`] when
    /// there are none): both operands determinized (an automaton operand as it is), then
    /// their product, each step under `limits` ([`Dfa::product`]).
    pub(crate) fn intersect(a: &Node, b: &Node, limits: &Limits) -> Result<Node, Refusal> {
        let (Some(x), Some(y)) = (a.dfa_within(limits)?, b.dfa_within(limits)?) else {
            return Ok(Node::Nothing);
        };
        let product = x.product(&y, crate::regex::Op::Intersection, limits)?;
        Ok(product.map_or(Node::Nothing, |d| Node::Automaton(Arc::new(d))))
    }

    /// The strings of `a` that are not in `b`, as [`Node::intersect`] builds them.
    pub(crate) fn difference(a: &Node, b: &Node, limits: &Limits) -> Result<Node, Refusal> {
        let Some(x) = a.dfa_within(limits)? else {
            return Ok(Node::Nothing);
        };
        let Some(y) = b.dfa_within(limits)? else {
            return Ok(a.clone());
        };
        let product = x.product(&y, crate::regex::Op::Difference, limits)?;
        Ok(product.map_or(Node::Nothing, |d| Node::Automaton(Arc::new(d))))
    }

    /// This language as a DFA under `limits`; `None` when it has no strings.
    fn dfa_within(&self, limits: &Limits) -> Result<Option<Arc<Dfa>>, Refusal> {
        match self {
            Node::Automaton(d) => Ok(Some(d.clone())),
            Node::Nothing => Ok(None),
            n => {
                let nfa = n.to_nfa(limits.automaton_bytes).map_err(|_| Refusal::Nfa {
                    limit: limits.automaton_bytes,
                })?;
                Ok(Dfa::from_nfa_within(&nfa, limits)?.map(Arc::new))
            }
        }
    }

    /// Whether an automaton leaf occurs anywhere in the tree (the tree then has no regex).
    #[cfg(test)]
    pub(crate) fn contains_automaton(&self) -> bool {
        match self {
            Node::Automaton(_) => true,
            Node::Empty | Node::Nothing | Node::Lit(_) | Node::Class(_) | Node::AnyJson => false,
            Node::Concat(items) | Node::Alt(items) => items.iter().any(Node::contains_automaton),
            Node::Repeat(item, ..) => item.contains_automaton(),
            Node::Seq { items, sep, .. } => {
                sep.contains_automaton() || items.iter().any(|(i, _)| i.contains_automaton())
            }
            Node::List { item, sep, .. } => item.contains_automaton() || sep.contains_automaton(),
        }
    }

    /// Builds the Thompson NFA (anchored, one pattern) under `size_limit` bytes.
    pub(crate) fn to_nfa(&self, size_limit: usize) -> Result<NFA, Box<thompson::BuildError>> {
        let mut b = Builder::new();
        b.set_size_limit(Some(size_limit))?;
        b.start_pattern()?;
        let (start, end) = nfa_node(&mut b, &mut HashMap::default(), self)?;
        let m = b.add_match()?;
        b.patch(end, m)?;
        b.finish_pattern(start)?;
        Ok(b.build(start, start)?)
    }
}

/// Deepest nesting [`Node::matches`] follows inside a [`Node::AnyJson`] (each level is a
/// few stack frames); a deeper value is not matched.
const MATCH_JSON_DEPTH: usize = 256;

/// The end positions of a JSON value of [`Node::AnyJson`]'s form that starts at `p`
/// (`memo` by position: a number's prefixes are values too, so positions repeat).
fn any_json_ends(
    s: &[u8],
    p: usize,
    depth: usize,
    memo: &mut HashMap<usize, BTreeSet<usize>>,
) -> BTreeSet<usize> {
    if let Some(known) = memo.get(&p) {
        return known.clone();
    }
    let parts = super::any_json_parts();
    let one: BTreeSet<usize> = [p].into_iter().collect();
    let mut out = parts.scalar.ends(s, &one);
    let (open, close) = match s.get(p) {
        Some(b'[') => (b'[', b']'),
        Some(b'{') => (b'{', b'}'),
        _ => {
            memo.insert(p, out.clone());
            return out;
        }
    };
    if depth < MATCH_JSON_DEPTH {
        let item = |from: &BTreeSet<usize>, memo: &mut HashMap<usize, BTreeSet<usize>>| {
            let starts = if open == b'{' {
                parts.colon.ends(s, &parts.key.ends(s, from))
            } else {
                from.clone()
            };
            let mut ends = BTreeSet::new();
            for q in starts {
                ends.extend(any_json_ends(s, q, depth + 1, memo));
            }
            ends
        };
        let inside: BTreeSet<usize> = [p + 1].into_iter().collect();
        let mut closers = inside.clone();
        let mut seen = BTreeSet::new();
        let mut frontier = item(&inside, memo);
        while !frontier.is_empty() {
            closers.extend(frontier.iter().copied());
            seen.extend(frontier.iter().copied());
            let next = item(&parts.sep.ends(s, &frontier), memo);
            frontier = next.into_iter().filter(|q| !seen.contains(q)).collect();
        }
        out.extend(
            closers
                .into_iter()
                .filter(|&q| s.get(q) == Some(&close))
                .map(|q| q + 1),
        );
    }
    memo.insert(p, out.clone());
    out
}

fn push_concat(out: &mut Vec<Node>, n: Node) {
    if let (Some(Node::Lit(prev)), Node::Lit(next)) = (out.last_mut(), &n) {
        prev.push_str(next);
        return;
    }
    out.push(n);
}

fn decode_char(s: &[u8]) -> Option<(char, usize)> {
    let n = match *s.first()? {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return None,
    };
    let text = std::str::from_utf8(s.get(..n)?).ok()?;
    text.chars().next().map(|c| (c, n))
}

fn write_regex_class(out: &mut String, r: &Ranges) {
    let one = |out: &mut String, c: char| {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            let _ = write!(out, "\\x{{{:X}}}", c as u32);
        }
    };
    out.push('[');
    for &(a, b) in r {
        one(out, a);
        if b != a {
            out.push('-');
            one(out, b);
        }
    }
    out.push(']');
}

type Frag = (StateID, StateID);

/// Compiles `n` to a fragment whose `end` is an empty state still to be patched.
/// `shared` is scratch for [`Node::Class`]'s suffix sharing, one map for the whole build
/// (a map per class, grown from empty each time, was ~3 % of a DFA-backed compile).
fn nfa_node(
    b: &mut Builder,
    shared: &mut HashMap<(u8, u8, StateID), StateID>,
    n: &Node,
) -> Result<Frag, Box<thompson::BuildError>> {
    match n {
        Node::Automaton(d) => {
            // One union per live state, added first so that byte ranges can point at states
            // not yet filled in; an accepting state's union also leads to `end`.
            let end = b.add_empty()?;
            let mut ids = vec![StateID::ZERO; d.state_count()];
            for s in d.live_states() {
                ids[d.index(s)] = b.add_union(vec![])?;
            }
            for s in d.live_states() {
                let u = ids[d.index(s)];
                let ranges: Vec<Transition> = d
                    .byte_ranges(s)
                    .into_iter()
                    .map(|(start, end, t)| Transition {
                        start,
                        end,
                        next: ids[d.index(t)],
                    })
                    .collect();
                if !ranges.is_empty() {
                    let sparse = b.add_sparse(ranges)?;
                    b.patch(u, sparse)?;
                }
                if d.is_accepting(s) {
                    b.patch(u, end)?;
                }
            }
            Ok((ids[d.index(d.start())], end))
        }
        Node::Empty => {
            let e = b.add_empty()?;
            Ok((e, e))
        }
        // Callers build NFAs only for regular nodes (`Node::is_regular`); were one to get
        // here anyway, the value would be refused, never let through.
        Node::Nothing | Node::AnyJson => {
            let s = b.add_union(vec![])?;
            let e = b.add_empty()?;
            Ok((s, e))
        }
        Node::Lit(s) => {
            let end = b.add_empty()?;
            let mut next = end;
            for &byte in s.as_bytes().iter().rev() {
                next = b.add_range(Transition {
                    start: byte,
                    end: byte,
                    next,
                })?;
            }
            Ok((next, end))
        }
        Node::Class(r) => {
            // UTF-8 sequences share their common suffixes (every multi-byte sequence ends in
            // [80-BF]...): without that, each lead-byte range would bring its own chain of
            // continuation states, ~10 more automaton states in every string of a schema.
            let end = b.add_empty()?;
            shared.clear();
            let mut starts = Vec::new();
            for &(lo, hi) in r {
                for seq in Utf8Sequences::new(lo, hi) {
                    let mut next = end;
                    for range in seq.as_slice().iter().rev() {
                        let key = (range.start, range.end, next);
                        next = match shared.get(&key) {
                            Some(&id) => id,
                            None => {
                                let id = b.add_range(Transition {
                                    start: range.start,
                                    end: range.end,
                                    next,
                                })?;
                                shared.insert(key, id);
                                id
                            }
                        };
                    }
                    if !starts.contains(&next) {
                        starts.push(next);
                    }
                }
            }
            let s = b.add_union(starts)?;
            Ok((s, end))
        }
        Node::Concat(items) => {
            let mut first: Option<Frag> = None;
            let mut last_end = None;
            for item in items {
                let (s, e) = nfa_node(b, shared, item)?;
                match last_end {
                    None => first = Some((s, e)),
                    Some(prev) => b.patch(prev, s)?,
                }
                last_end = Some(e);
            }
            match (first, last_end) {
                (Some((s, _)), Some(e)) => Ok((s, e)),
                _ => nfa_node(b, shared, &Node::Empty),
            }
        }
        Node::Alt(items) => {
            let u = b.add_union(vec![])?;
            let end = b.add_empty()?;
            for item in items {
                let (s, e) = nfa_node(b, shared, item)?;
                b.patch(u, s)?;
                b.patch(e, end)?;
            }
            Ok((u, end))
        }
        Node::Repeat(item, min, max) => {
            let end = b.add_empty()?;
            let entry = b.add_empty()?;
            let mut cur = entry;
            // `min` required copies.
            for _ in 0..*min {
                let (s, e) = nfa_node(b, shared, item)?;
                b.patch(cur, s)?;
                cur = e;
            }
            match max {
                None => {
                    // One more copy in a loop.
                    let u = b.add_union(vec![])?;
                    b.patch(cur, u)?;
                    let (s, e) = nfa_node(b, shared, item)?;
                    b.patch(u, s)?;
                    b.patch(u, end)?;
                    b.patch(e, u)?;
                }
                Some(max) => {
                    for _ in *min..*max {
                        let u = b.add_union(vec![])?;
                        b.patch(cur, u)?;
                        b.patch(u, end)?;
                        let (s, e) = nfa_node(b, shared, item)?;
                        b.patch(u, s)?;
                        cur = e;
                    }
                    b.patch(cur, end)?;
                }
            }
            Ok((entry, end))
        }
        Node::Seq {
            items,
            sep,
            nonempty,
        } => {
            // The ladder: e0[i] = nothing emitted yet, e1[i] = something emitted; both with
            // item i next. Each item is built once and continues at e1[i + 1].
            let n = items.len();
            let end = b.add_empty()?;
            let mut e0: Vec<StateID> = Vec::with_capacity(n + 1);
            let mut e1: Vec<StateID> = Vec::with_capacity(n + 1);
            for _ in 0..=n {
                e0.push(b.add_union(vec![])?);
                e1.push(b.add_union(vec![])?);
            }
            for (i, (item, required)) in items.iter().enumerate() {
                let (s, e) = nfa_node(b, shared, item)?;
                let (ss, se) = nfa_node(b, shared, sep)?;
                b.patch(se, s)?;
                b.patch(e0[i], s)?;
                b.patch(e1[i], ss)?;
                b.patch(e, e1[i + 1])?;
                if !required {
                    b.patch(e0[i], e0[i + 1])?;
                    b.patch(e1[i], e1[i + 1])?;
                }
            }
            if !nonempty {
                b.patch(e0[n], end)?;
            }
            b.patch(e1[n], end)?;
            Ok((e0[0], end))
        }
        Node::List {
            item,
            sep,
            min,
            max,
        } => {
            let end = b.add_empty()?;
            let entry = b.add_union(vec![])?;
            if *min == 0 {
                b.patch(entry, end)?;
            }
            let copies = match max {
                None => (*min).max(1),
                Some(m) => *m,
            };
            let mut prev_end: Option<StateID> = None;
            let mut last_start = None;
            for i in 1..=copies {
                let (s, e) = nfa_node(b, shared, item)?;
                match prev_end {
                    None => b.patch(entry, s)?,
                    Some(pe) => {
                        let (ss, se) = nfa_node(b, shared, sep)?;
                        b.patch(se, s)?;
                        if i > *min {
                            // After i - 1 items the list may end or go on.
                            let u = b.add_union(vec![ss, end])?;
                            b.patch(pe, u)?;
                        } else {
                            b.patch(pe, ss)?;
                        }
                    }
                }
                prev_end = Some(e);
                last_start = Some(s);
            }
            let pe = prev_end.expect("at least one copy");
            match max {
                None => {
                    let (ss, se) = nfa_node(b, shared, sep)?;
                    b.patch(se, last_start.expect("at least one copy"))?;
                    let u = b.add_union(vec![ss, end])?;
                    b.patch(pe, u)?;
                }
                Some(_) => b.patch(pe, end)?,
            }
            Ok((entry, end))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dfa(n: &Node) -> crate::regex::Dfa {
        let nfa = n.to_nfa(1 << 20).unwrap();
        crate::regex::Dfa::from_nfa(&nfa, "test", "`t`", &crate::limits::Limits::DEFAULT).unwrap()
    }

    #[test]
    fn seq_is_every_ordered_subset_with_separators() {
        let items = vec![
            (Node::lit("a"), false),
            (Node::lit("b"), true),
            (Node::lit("c"), false),
            (Node::lit("d"), false),
        ];
        let n = Node::seq(items, Node::lit(","), false);
        let re = n.to_regex(1 << 20).unwrap();
        let d = dfa(&n);
        let r = crate::regex::Dfa::new(&re).unwrap();
        for s in ["b", "a,b", "b,c", "b,d", "a,b,c,d", "b,c,d", "a,b,d"] {
            assert!(d.matches(s.as_bytes()) && r.matches(s.as_bytes()), "{s}");
            assert!(n.matches(s.as_bytes()), "{s}");
        }
        for s in ["", "a", "ab", "b,", ",b", "c,b", "b,d,c", "a,,b"] {
            assert!(!d.matches(s.as_bytes()) && !r.matches(s.as_bytes()), "{s}");
            assert!(!n.matches(s.as_bytes()), "{s}");
        }
    }

    #[test]
    fn list_bounds_hold_in_every_backend() {
        for (min, max) in [(0, None), (1, None), (2, Some(3)), (0, Some(2)), (3, None)] {
            let n = Node::list(Node::lit("x"), Node::lit(","), min, max);
            let d = dfa(&n);
            let r = crate::regex::Dfa::new(&n.to_regex(1 << 20).unwrap()).unwrap();
            for k in 0..6u32 {
                let s = vec!["x"; k as usize].join(",");
                let want = k >= min && max.is_none_or(|m| k <= m);
                assert_eq!(d.matches(s.as_bytes()), want, "{min} {max:?} {s}");
                assert_eq!(r.matches(s.as_bytes()), want, "{min} {max:?} {s}");
                assert_eq!(n.matches(s.as_bytes()), want, "{min} {max:?} {s}");
            }
        }
    }

    /// The blocked, chained and counted forms of a long counted repetition (and every
    /// shortcut around it) accept exactly the counts in range: brute force over every length
    /// up to past the bound.
    #[test]
    fn long_counted_repetitions_in_gbnf_keep_their_exact_counts() {
        let x = Node::class(vec![('a', 'b')]);
        let cases = [
            (0, Some(257)),
            (0, Some(300)),
            (3, Some(300)),
            (257, Some(257)),
            (260, Some(290)),
            (0, Some(289)),
            (289, None),
            (1, Some(1000)),
            (5, Some(4500)),
            (0, Some(9000)),
            (3000, None),
        ];
        let forms = cases.iter().flat_map(|&c| [(c, 0), (c, 1), (c, 2)]);
        for ((min, max), form) in forms {
            let n = Node::Repeat(Arc::new(x.clone()), min, max);
            let text = match form {
                0 => n.to_gbnf(),
                1 => n.gbnf_rules_blocked().to_gbnf(),
                _ => n.gbnf_rules_counted().to_gbnf(),
            };
            // Every case passes 128 items (`COUNTER_FROM`), so the counted form is one count.
            if form == 2 {
                assert!(!text.contains("block"), "{min} {max:?}: {text}");
            } else {
                assert!(text.contains("block"), "{min} {max:?}: {text}");
            }
            let g = crate::grammar::Grammar::new(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            // Every length up to 300, and the 50 around each bound.
            let ends = [min, max.unwrap_or(min)];
            let lengths =
                (0..=300).chain(ends.into_iter().flat_map(|e| e.saturating_sub(25)..e + 25));
            for len in lengths {
                let s: String = (0..len)
                    .map(|i| if i % 3 == 0 { 'b' } else { 'a' })
                    .collect();
                let want = len >= min && max.is_none_or(|m| len <= m);
                assert_eq!(
                    g.matches(s.as_bytes()),
                    want,
                    "{min} {max:?} length {len}: {text}"
                );
            }
        }
    }

    /// One long count is a chain; so many that the chains pass [`GBNF_MAX_CHAIN_RULES`]
    /// rules are all nested blocks.
    #[test]
    fn chains_give_way_to_blocks_past_their_rule_bound() {
        let x = || Arc::new(Node::class(vec![('a', 'b')]));
        let one = Node::Repeat(x(), 0, Some(200));
        assert_ne!(one.to_gbnf(), one.gbnf_rules_blocked().to_gbnf());
        // `{0,200}` is 12 chain rules of 16 items; nine distinct bounds make 108.
        let many = Node::concat(
            (0..9)
                .map(|i| Node::concat(vec![Node::lit(","), Node::Repeat(x(), 0, Some(200 + i))]))
                .collect(),
        );
        assert_eq!(many.to_gbnf(), many.gbnf_rules_blocked().to_gbnf());
        // Counted, a long count stays one count while the counts at most COUNTER_FROM (128)
        // beside it pass the chains' bound (nine `{0,100}`, 6 chain rules each) and turn to
        // blocks.
        let short =
            (0..9).map(|i| Node::concat(vec![Node::lit(","), Node::Repeat(x(), 0, Some(100 + i))]));
        let with_long = Node::concat(short.chain([Node::Repeat(x(), 0, Some(5000))]).collect());
        let counted = with_long.gbnf_rules_counted().to_gbnf();
        assert!(counted.contains("{0,5000}"), "{counted}");
        assert!(counted.contains("block"), "{counted}");
        let g = crate::grammar::Grammar::new(&counted).unwrap();
        // The last comma's `{0,108}` and the `{0,5000}` after it take 5,108 at most.
        let text = |n: usize| format!("{},{}", ",a".repeat(8), "b".repeat(n));
        assert!(g.matches(text(5108).as_bytes()));
        assert!(!g.matches(text(5109).as_bytes()));
    }

    /// A subtree used twice is one rule, and the grammar still means the same.
    #[test]
    fn repeated_subtrees_become_one_gbnf_rule() {
        let tail = Node::repeat(
            Node::class(vec![('a', 'z'), ('0', '9'), ('_', '_')]),
            0,
            None,
        );
        let long = Node::concat(vec![
            Node::lit("\"prefix-that-is-long-enough-to-share-"),
            tail.clone(),
            Node::lit("\""),
        ]);
        let n = Node::alt(vec![
            Node::repeat(long.clone(), 1, Some(2)),
            Node::concat(vec![Node::lit("y"), Node::repeat(long.clone(), 2, Some(3))]),
        ]);
        let text = n.to_gbnf();
        assert_eq!(
            text.matches("prefix-that-is-long-enough").count(),
            1,
            "{text}"
        );
        let g = crate::grammar::Grammar::new(&text).unwrap();
        let d = dfa(&n);
        let one = "\"prefix-that-is-long-enough-to-share-ab_9\"";
        let two =
            "\"prefix-that-is-long-enough-to-share-\"\"prefix-that-is-long-enough-to-share-x\"";
        let texts = [
            one.to_owned(),
            format!("y{two}"),
            format!("y{one}"),
            format!("{two}{one}"),
            format!("y{two}{two}"),
            format!("{one}A"),
        ];
        for (i, s) in texts.iter().enumerate() {
            // The first two are in the language, the others not.
            assert_eq!(d.matches(s.as_bytes()), i < 2, "{s}");
            assert_eq!(g.matches(s.as_bytes()), i < 2, "{s}");
        }
    }

    /// Strings of up to `len` characters from `alphabet`.
    fn texts(alphabet: &[&str], len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..len {
            layer = layer
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(layer.iter().cloned());
        }
        all
    }

    /// An intersection leaf against the `regex` crate on both operands, and the same
    /// language in every renderer: the NFA that embeds it, the direct simulation and the
    /// grammar, alone, between literals and repeated.
    #[test]
    fn automaton_leaves_mean_the_same_in_every_backend() {
        use crate::json_schema::string::exact_content;
        let limits = crate::limits::Limits::DEFAULT;
        let pairs = [
            ("[a-c]*b", "a[a-c]{0,3}"),
            ("(ab|é)+", "[aé]*b?[a-zé]*"),
            ("x|€y*", "(x|€|y)*"),
            ("(a|bc)*", "[abc]{2,5}"),
        ];
        let alphabet = ["a", "b", "c", "é", "€", "x", "y"];
        let strings = texts(&alphabet, 5);
        for (p, q) in pairs {
            let n = Node::intersect(&exact_content(p), &exact_content(q), &limits).unwrap();
            assert!(matches!(n, Node::Automaton(_)), "{p} & {q}: {n:?}");
            assert!(n.to_regex(1 << 20).is_err() && n.contains_automaton());
            let (rp, rq) = (
                regex::Regex::new(&format!("^(?:{p})$")).unwrap(),
                regex::Regex::new(&format!("^(?:{q})$")).unwrap(),
            );
            let framed = Node::concat(vec![Node::lit("<"), n.clone(), Node::lit(">")]);
            let repeated = Node::repeat(n.clone(), 0, Some(2));
            let (d_framed, d_repeated) = (dfa(&framed), dfa(&repeated));
            let g_framed = crate::grammar::Grammar::new(&framed.to_gbnf()).unwrap();
            let g_repeated = crate::grammar::Grammar::new(&repeated.to_gbnf()).unwrap();
            let (mut shortest, mut longest) = (u64::MAX, 0u64);
            for s in &strings {
                let want = rp.is_match(s) && rq.is_match(s);
                assert_eq!(n.matches(s.as_bytes()), want, "{p} & {q} on {s}");
                let f = format!("<{s}>");
                assert_eq!(
                    d_framed.matches(f.as_bytes()),
                    want,
                    "{p} & {q}: NFA on {f}"
                );
                assert_eq!(
                    g_framed.matches(f.as_bytes()),
                    want,
                    "{p} & {q}: GBNF on {f}"
                );
                let r = repeated.matches(s.as_bytes());
                assert_eq!(d_repeated.matches(s.as_bytes()), r, "{p} & {q}: NFA, {s}");
                assert_eq!(g_repeated.matches(s.as_bytes()), r, "{p} & {q}: GBNF, {s}");
                if want {
                    let chars = s.chars().count() as u64;
                    shortest = shortest.min(chars);
                    longest = longest.max(chars);
                }
            }
            // Lengths: the shortest exactly; the longest where it is under 5.
            let (lo, hi) = n.char_len();
            assert_eq!(lo, shortest, "{p} & {q}");
            match hi {
                Some(h) if h < 5 => assert_eq!(h, longest, "{p} & {q}"),
                Some(h) => assert!(h >= longest, "{p} & {q}"),
                None => {}
            }
        }
        let none = Node::intersect(&exact_content("a+"), &exact_content("b+"), &limits);
        assert_eq!(none.unwrap(), Node::Nothing);
    }

    #[test]
    fn ranges_subtract_and_intersect() {
        let all = vec![('\0', char::MAX)];
        let r = subtract(&all, &vec![('"', '"'), ('\\', '\\'), ('\0', '\x1f')]);
        assert!(contains(&r, 'a') && !contains(&r, '"') && !contains(&r, '\n'));
        assert!(contains(&r, '\u{10FFFF}'));
        assert_eq!(
            intersect(&vec![('a', 'z')], &vec![('x', '~')]),
            vec![('x', 'z')]
        );
    }
}
