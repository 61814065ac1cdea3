//! The compiled form of a schema: a small regular-expression IR, rendered three ways.
//!
//! - [`Node::to_regex`]: regex-syntax text, the "compiled regex" the spec bounds at 256 KiB.
//! - [`Node::to_nfa`]: a Thompson NFA built directly, determinized by [`crate::regex::Dfa`].
//! - [`Node::to_gbnf`]: a llama.cpp GBNF grammar for remote engines.
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
use crate::regex::{CharTransitions, Dfa, Refusal, DEAD};
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
        let (start, end) = nfa_node(&mut b, self)?;
        let m = b.add_match()?;
        b.patch(end, m)?;
        b.finish_pattern(start)?;
        Ok(b.build(start, start)?)
    }

    /// Renders a GBNF grammar whose `root` rule accepts exactly this language: long counted
    /// repetitions as chains ([`GBNF_UPTO_CHAIN`]) unless those take more than
    /// [`GBNF_MAX_CHAIN_RULES`] rules, then as nested blocks. Every count stays within
    /// llama.cpp's repetition limit, so this is the grammar to export.
    pub(crate) fn to_gbnf(&self) -> String {
        self.gbnf_with(true, false)
            .unwrap_or_else(|| self.to_gbnf_blocked())
    }

    /// [`Node::to_gbnf`] with every long counted repetition as nested blocks: fewer, larger
    /// rules than the chains, for when those pass an automaton limit.
    pub(crate) fn to_gbnf_blocked(&self) -> String {
        self.gbnf_with(false, false)
            .expect("without chains there is no chain bound")
    }

    /// [`Node::to_gbnf`] with every repetition past
    /// [`COUNTER_FROM`](crate::grammar::COUNTER_FROM) written as one count, which our grammar
    /// engine keeps as a counter: the local engine's grammar (llama.cpp expands counts,
    /// refusing them past 2,000). The shorter counts are chains, or nested blocks past the
    /// chains' rule bound, as in [`Node::to_gbnf`].
    pub(crate) fn to_gbnf_counted(&self) -> String {
        self.gbnf_with(true, true)
            .or_else(|| self.gbnf_with(false, true))
            .expect("without chains there is no chain bound")
    }

    /// The grammar, or None when its chains take more than [`GBNF_MAX_CHAIN_RULES`] rules.
    fn gbnf_with(&self, chains: bool, counters: bool) -> Option<String> {
        let mut g = Gbnf {
            chains,
            counters,
            ..Gbnf::default()
        };
        let root_id = g.subtrees.of(self);
        g.subtrees.uses[root_id as usize] += 1;
        // Subtrees met while rendering (the free-form value's rules) are not the schema's.
        g.subtrees.counted = true;
        let root = g.expr(self);
        if g.chain_rules > GBNF_MAX_CHAIN_RULES {
            return None;
        }
        let mut out = format!("root ::= {root}\n");
        for (name, body) in &g.rules {
            let _ = writeln!(out, "{name} ::= {body}");
        }
        Some(out)
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
fn nfa_node(b: &mut Builder, n: &Node) -> Result<Frag, Box<thompson::BuildError>> {
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
            let mut shared: HashMap<(u8, u8, StateID), StateID> = HashMap::default();
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
                let (s, e) = nfa_node(b, item)?;
                match last_end {
                    None => first = Some((s, e)),
                    Some(prev) => b.patch(prev, s)?,
                }
                last_end = Some(e);
            }
            match (first, last_end) {
                (Some((s, _)), Some(e)) => Ok((s, e)),
                _ => nfa_node(b, &Node::Empty),
            }
        }
        Node::Alt(items) => {
            let u = b.add_union(vec![])?;
            let end = b.add_empty()?;
            for item in items {
                let (s, e) = nfa_node(b, item)?;
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
                let (s, e) = nfa_node(b, item)?;
                b.patch(cur, s)?;
                cur = e;
            }
            match max {
                None => {
                    // One more copy in a loop.
                    let u = b.add_union(vec![])?;
                    b.patch(cur, u)?;
                    let (s, e) = nfa_node(b, item)?;
                    b.patch(u, s)?;
                    b.patch(u, end)?;
                    b.patch(e, u)?;
                }
                Some(max) => {
                    for _ in *min..*max {
                        let u = b.add_union(vec![])?;
                        b.patch(cur, u)?;
                        b.patch(u, end)?;
                        let (s, e) = nfa_node(b, item)?;
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
                let (s, e) = nfa_node(b, item)?;
                let (ss, se) = nfa_node(b, sep)?;
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
                let (s, e) = nfa_node(b, item)?;
                match prev_end {
                    None => b.patch(entry, s)?,
                    Some(pe) => {
                        let (ss, se) = nfa_node(b, sep)?;
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
                    let (ss, se) = nfa_node(b, sep)?;
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

/// A subexpression that occurs more than once is written once, as a rule, when its text is
/// at least this long: "any key but the listed ones" repeats the string tail after every
/// branch of its trie (100+ copies for six names), and a free-form value repeats in every
/// property that takes one, so a grammar engine (or llama.cpp) would otherwise build each
/// copy's states again. Shorter texts stay inline, where they cost less than a rule call.
const GBNF_SHARED_MIN_BYTES: usize = 48;

/// A subexpression that occurs more than once is also a rule when its text, with every
/// counted repetition written out, is at least this long: `"\"" char{0,25} "\""` is 26
/// bytes of GBNF but 25 copies of a JSON string character (~15 DFA states each) wherever it
/// is inlined. Nine such strings in one object took the grammar past the automaton limit
/// with the character inlined, so it compiled with a call per character, and each string
/// position's first mask cost ~12 ms (Github_medium o43971); as one rule per length, the
/// character stays inlined and each position is walked once for every property of that
/// length.
const GBNF_SHARED_EXPANDED_BYTES: usize = 256;

/// The GBNF text length of `n` with its counted repetitions written out (an estimate, for
/// [`GBNF_SHARED_EXPANDED_BYTES`]); stops counting past `cap`.
fn expanded_len(n: &Node, cap: usize) -> usize {
    let sum = |items: &mut dyn Iterator<Item = &Node>| {
        let mut total = 0usize;
        for i in items {
            total = total.saturating_add(expanded_len(i, cap));
            if total >= cap {
                break;
            }
        }
        total
    };
    match n {
        Node::Empty | Node::Nothing => 2,
        // A rule per state, ~16 bytes of text each at least.
        Node::Automaton(d) => d.state_count().saturating_mul(16).min(cap),
        Node::AnyJson => 8,
        Node::Lit(s) => s.len() + 2,
        Node::Class(r) => 2 + 8 * r.len(),
        Node::Concat(items) | Node::Alt(items) => sum(&mut items.iter()),
        Node::Repeat(item, min, max) => {
            let copies = max.unwrap_or(*min).max(*min).max(1) as usize;
            expanded_len(item, cap).saturating_mul(copies).min(cap)
        }
        Node::Seq { items, sep, .. } => {
            sum(&mut items.iter().map(|(i, _)| i).chain(std::iter::once(&**sep)))
        }
        Node::List { item, sep, max, .. } => {
            let copies = max.unwrap_or(1).max(1) as usize;
            sum(&mut [&**item, &**sep].into_iter())
                .saturating_mul(copies)
                .min(cap)
        }
    }
}

/// States an automaton's grammar writes inside one another (each reached from one place
/// only) before one gets a rule of its own: each level is a group, an alternation and a
/// sequence, so 24 levels stay well within the grammar's nesting bounds.
const GBNF_AUTOMATON_NESTING: usize = 24;

/// A counted repetition with a larger upper bound is written as nested blocks of
/// [`GBNF_BLOCK`] repetitions ([`Gbnf::repeat`]), so no rule holds more than this many copies
/// of its item: `maxLength: 32767` becomes four levels of blocks instead of 32,767 copies of
/// a string character (past llama.cpp's limit of 2000, ours of
/// [`MAX_GRAMMAR_REPETITION`](crate::limits::MAX_GRAMMAR_REPETITION), and 1 MiB of
/// automaton).
const GBNF_BLOCKED_REPEAT: u32 = 64;

/// Items per block in a long counted repetition.
const GBNF_BLOCK: u32 = 16;

/// An optional part of a counted repetition of at most this many [`GBNF_BLOCK`]s (1,039
/// items) is a chain of one rule per block ([`Gbnf::repeat`]); a longer one is nested
/// blocks, whose rule count grows with the logarithm instead. The whole grammar's bound,
/// [`GBNF_MAX_CHAIN_RULES`], is tighter: past 16 blocks (271 items) every count in the
/// schema is nested blocks.
const GBNF_UPTO_CHAIN: u32 = 64;

/// A schema whose chains would take more rules than this is written with nested blocks
/// only: on JSONSchemaBench, 104 of the 118 grammars with more than 32 chain rules passed
/// the automaton limit and compiled a second time as blocks (compile p99 59 -> 90 ms),
/// against 18 of 157 with at most 16.
const GBNF_MAX_CHAIN_RULES: usize = 16;

/// A subtree's identity: two subtrees get the same id exactly when they are equal
/// ([`Subtrees`]), so the maps below compare a number instead of walking the trees (the
/// derived `Hash` and `Eq` walk every node below: 1,000 listed keys, each followed by extra
/// keys whose names must avoid the 1,000 listed ones, took 16 s in release to hash, and
/// deep comparisons on every lookup were a fifth of a large schema's 2 ms rendering).
type Subtree = u32;

/// A node with its children replaced by their ids: equal shapes are equal subtrees.
#[derive(PartialEq, Eq, Hash)]
enum Shape<'a> {
    /// A node without children, compared as it is (a DFA by its table).
    Leaf(&'a Node),
    Concat(Vec<Subtree>),
    Alt(Vec<Subtree>),
    Repeat(Subtree, u32, Option<u32>),
    Seq(Vec<(Subtree, bool)>, Subtree, bool),
    List(Subtree, Subtree, u32, Option<u32>),
}

/// Hash-consing of a tree's subtrees: each node's id is computed once from its children's
/// (by address: a subtree shared through an `Arc` is read once however often it occurs).
#[derive(Default)]
struct Subtrees<'a> {
    by_address: HashMap<*const Node, Subtree>,
    ids: HashMap<Shape<'a>, Subtree>,
    /// Per id, how often a composite subtree is the child of a distinct subtree (or the
    /// root, counted by the caller): a repeated subtree's children are counted once, as
    /// hoisting them again would only split what is already one rule. Leaves stay at 0.
    uses: Vec<u32>,
    /// Per id, whether the subtree has children.
    composite: Vec<bool>,
    /// Set once the schema's tree is counted: later subtrees get ids, not uses.
    counted: bool,
}

impl<'a> Subtrees<'a> {
    fn of(&mut self, n: &'a Node) -> Subtree {
        if let Some(&id) = self.by_address.get(&(n as *const Node)) {
            return id;
        }
        let shape = match n {
            Node::Empty
            | Node::Nothing
            | Node::AnyJson
            | Node::Lit(_)
            | Node::Class(_)
            | Node::Automaton(_) => Shape::Leaf(n),
            Node::Concat(items) => Shape::Concat(items.iter().map(|i| self.of(i)).collect()),
            Node::Alt(items) => Shape::Alt(items.iter().map(|i| self.of(i)).collect()),
            Node::Repeat(item, min, max) => Shape::Repeat(self.of(item), *min, *max),
            Node::Seq {
                items,
                sep,
                nonempty,
            } => Shape::Seq(
                items.iter().map(|(i, r)| (self.of(i), *r)).collect(),
                self.of(sep),
                *nonempty,
            ),
            Node::List {
                item,
                sep,
                min,
                max,
            } => Shape::List(self.of(item), self.of(sep), *min, *max),
        };
        let id = match self.ids.get(&shape) {
            Some(&id) => id,
            None => {
                let id = self.ids.len() as Subtree;
                let children: &[Subtree] = match &shape {
                    Shape::Leaf(_) => &[],
                    Shape::Concat(c) | Shape::Alt(c) => c,
                    Shape::Repeat(c, ..) => std::slice::from_ref(c),
                    Shape::Seq(items, sep, _) => {
                        for &(c, _) in items {
                            self.count_use(c);
                        }
                        std::slice::from_ref(sep)
                    }
                    Shape::List(item, sep, ..) => {
                        self.count_use(*item);
                        std::slice::from_ref(sep)
                    }
                };
                for &c in children {
                    self.count_use(c);
                }
                self.uses.push(0);
                self.composite.push(!matches!(shape, Shape::Leaf(_)));
                self.ids.insert(shape, id);
                id
            }
        };
        self.by_address.insert(n as *const Node, id);
        id
    }

    fn count_use(&mut self, child: Subtree) {
        if !self.counted && self.composite[child as usize] {
            self.uses[child as usize] += 1;
        }
    }
}

/// GBNF rendering state: hoisted rules, deduplicated by content.
#[derive(Default)]
struct Gbnf<'a> {
    rules: Vec<(String, String)>,
    names: HashMap<String, String>,
    subtrees: Subtrees<'a>,
    /// Rendered texts of subtrees that occur more than once.
    shared: HashMap<Subtree, String>,
    /// Optional parts of long counted repetitions as chains ([`GBNF_UPTO_CHAIN`]).
    chains: bool,
    /// Rules the chains made.
    chain_rules: usize,
    /// Repetitions past [`COUNTER_FROM`](crate::grammar::COUNTER_FROM) as one count.
    counters: bool,
    /// Each automaton's start rule ([`Gbnf::automaton`]), so an automaton used twice (one
    /// `$defs` string in several properties) is written once.
    automata: HashMap<&'a Dfa, String>,
    /// The rule of [`Node::AnyJson`], once rendered.
    any_json: Option<String>,
}

impl<'a> Gbnf<'a> {
    /// A rule named after `hint` with this body (an existing one when the body repeats).
    fn rule(&mut self, hint: &str, body: String) -> String {
        if let Some(name) = self.names.get(&body) {
            return name.clone();
        }
        let name = format!("{hint}{}", self.rules.len() + 1);
        self.names.insert(body.clone(), name.clone());
        self.rules.push((name.clone(), body));
        name
    }

    /// An expression for `n` that can be followed by a quantifier or juxtaposed.
    fn atom(&mut self, n: &'a Node) -> String {
        let e = self.expr(n);
        match n {
            Node::Lit(_) | Node::Class(_) | Node::Empty | Node::Nothing | Node::Automaton(_) => e,
            _ if self.shared.get(&self.subtrees.of(n)) == Some(&e) => e,
            _ => format!("({e})"),
        }
    }

    /// `n`'s expression; a subtree that occurs more than once with a long text becomes a
    /// rule ([`GBNF_SHARED_MIN_BYTES`], [`GBNF_SHARED_EXPANDED_BYTES`]), written once.
    fn expr(&mut self, n: &'a Node) -> String {
        let key = self.subtrees.of(n);
        if let Some(e) = self.shared.get(&key) {
            return e.clone();
        }
        let e = self.render(n);
        if self.subtrees.uses[key as usize] > 1
            && (e.len() >= GBNF_SHARED_MIN_BYTES
                || expanded_len(n, GBNF_SHARED_EXPANDED_BYTES) >= GBNF_SHARED_EXPANDED_BYTES)
        {
            let name = self.rule("shared", e);
            self.shared.insert(key, name.clone());
            return name;
        }
        e
    }

    /// An automaton as a right-linear grammar over characters: for each state at a
    /// character boundary, alternatives of a character class (the characters whose UTF-8
    /// bytes lead to one target, [`Dfa::char_transitions`]) and the target; `""` where the
    /// state accepts. A state's loop on itself is a `*` before its exits, a target that
    /// accepts and goes nowhere is left out, and a target reached from one place only is
    /// written there in parentheses ([`GBNF_AUTOMATON_NESTING`] deep at most), so rules are
    /// the start and the states where paths meet. Only a cycle through several states makes
    /// rules recursive (a stack frame per round of the cycle here; llama.cpp keeps no frame
    /// for a call at the end of an alternative). Returns the start's rule name.
    ///
    /// Each rule is a call in our grammar engine, a few states of its own: an automaton of a
    /// few thousand states where paths meet (a pattern times a length counter) passes
    /// [`GRAMMAR_AUTOMATON_BYTES`](crate::limits::GRAMMAR_AUTOMATON_BYTES) there.
    fn automaton(&mut self, d: &'a Dfa) -> String {
        if let Some(name) = self.automata.get(d) {
            return name.clone();
        }
        let n = d.state_count();
        // The states at character boundaries, breadth first from the start (a state inside a
        // multi-byte character has no transitions by character).
        let mut trans = Vec::new();
        let mut seen = vec![false; n];
        seen[d.index(d.start())] = true;
        let mut queue = vec![d.start()];
        while let Some(s) = queue.pop() {
            let t = d.char_transitions(s);
            for (target, _) in &t {
                if !std::mem::replace(&mut seen[d.index(*target)], true) {
                    queue.push(*target);
                }
            }
            trans.push((s, t));
        }
        trans.sort_by_key(|(s, _)| *s);
        let mut row = vec![usize::MAX; n];
        for (k, (s, _)) in trans.iter().enumerate() {
            row[d.index(*s)] = k;
        }
        let mut is_final = vec![false; n];
        let mut refs = vec![0u32; n];
        for (s, t) in &trans {
            is_final[d.index(*s)] = d.is_accepting(*s) && t.is_empty();
            for (target, _) in t {
                if target != s {
                    refs[d.index(*target)] += 1;
                }
            }
        }
        // A rule for the start and for every state reached from several places; a state
        // reached from one place is written there, in parentheses, up to a nesting depth.
        let start = d.index(d.start());
        let mut own_rule = vec![false; n];
        for (s, _) in &trans {
            let i = d.index(*s);
            own_rule[i] = !is_final[i] && (i == start || refs[i] != 1);
        }
        let mut roots: Vec<usize> = (0..n).filter(|&i| own_rule[i]).collect();
        while let Some(root) = roots.pop() {
            let mut stack = vec![(root, 0usize)];
            while let Some((i, depth)) = stack.pop() {
                for (target, _) in &trans[row[i]].1 {
                    let t = d.index(*target);
                    if t == i || own_rule[t] || is_final[t] {
                        continue;
                    }
                    if depth + 1 > GBNF_AUTOMATON_NESTING {
                        own_rule[t] = true;
                        roots.push(t);
                    } else {
                        stack.push((t, depth + 1));
                    }
                }
            }
        }
        // Name every rule before any body refers to it.
        let mut names = vec![String::new(); n];
        let mut slots = Vec::new();
        for (s, _) in &trans {
            let i = d.index(*s);
            if own_rule[i] {
                let name = format!("dfa{}", self.rules.len() + 1);
                slots.push((i, self.rules.len()));
                self.rules.push((name.clone(), String::new()));
                names[i] = name;
            }
        }
        // The expression of state `i`: its loop, then its exits.
        fn body(
            i: usize,
            d: &Dfa,
            trans: &[(u32, CharTransitions)],
            row: &[usize],
            own_rule: &[bool],
            is_final: &[bool],
            names: &[String],
        ) -> String {
            let (s, t) = &trans[row[i]];
            let mut own_loop = None;
            let mut alts = Vec::new();
            for (target, ranges) in t {
                let class = gbnf_class(&normalize(ranges.clone()));
                let j = d.index(*target);
                if target == s {
                    own_loop = Some(class);
                } else if is_final[j] {
                    alts.push(class);
                } else if own_rule[j] {
                    alts.push(format!("{class} {}", names[j]));
                } else {
                    let inner = body(j, d, trans, row, own_rule, is_final, names);
                    alts.push(format!("{class} ({inner})"));
                }
            }
            if d.is_accepting(*s) {
                alts.push("\"\"".to_owned());
            }
            let exits = alts.join(" | ");
            match own_loop {
                None => exits,
                Some(l) if exits == "\"\"" => format!("{l}*"),
                Some(l) => format!("{l}* ({exits})"),
            }
        }
        for (i, slot) in slots {
            self.rules[slot].1 = body(i, d, &trans, &row, &own_rule, &is_final, &names);
        }
        let name = if is_final[start] {
            "\"\"".to_owned()
        } else {
            names[start].clone()
        };
        self.automata.insert(d, name.clone());
        name
    }

    /// `item{min,max}`; past [`GBNF_BLOCKED_REPEAT`], nested blocks of
    /// [`GBNF_BLOCK`] (see [`Gbnf::repeat`]).
    fn counted(&mut self, item: &'a Node, min: u32, max: Option<u32>) -> String {
        let mut a = self.atom(item);
        if max.unwrap_or(min) > GBNF_BLOCKED_REPEAT && a.len() >= GBNF_SHARED_MIN_BYTES {
            // Every block copies the item: one rule instead of `GBNF_BLOCK` texts.
            a = self.rule("repeated", a);
        }
        self.repeat(&a, min, max)
    }

    /// `a{min,max}` for an atom `a`, written so that no rule holds more than
    /// [`GBNF_BLOCKED_REPEAT`] copies of its item: `block ::= a{16}`, then `min` is
    /// `block{min / 16} a{min % 16}` and up to `r = 16 q + t` more are "fewer than `q`
    /// blocks, then fewer than 16 items" or "`q` blocks, then at most `t`" — each part again
    /// a repetition, of blocks. Each count has one split, so at most one wrong guess per
    /// nesting level is alive at a time (it dies within one block).
    fn repeat(&mut self, a: &str, min: u32, max: Option<u32>) -> String {
        let most = max.unwrap_or(min);
        if most <= GBNF_BLOCKED_REPEAT || (self.counters && most > crate::grammar::COUNTER_FROM) {
            return match (min, max) {
                (_, Some(0)) => "\"\"".into(),
                _ => format!("{a}{}", quantifier(min, max)),
            };
        }
        let k = GBNF_BLOCK;
        let block = self.rule("block", format!("{a}{{{k}}}"));
        let mut parts = Vec::new();
        for (x, lo, hi) in [
            (&block, min / k, Some(min / k)),
            (&a.to_owned(), min % k, Some(min % k)),
        ] {
            if hi != Some(0) {
                parts.push(self.repeat(x, lo, hi));
            }
        }
        match max {
            None => parts.push(format!("{a}*")),
            Some(max) if max == min => {}
            Some(max) if self.chains && (max - min) / k <= GBNF_UPTO_CHAIN => {
                // Up to r = 16 q + t more: "fewer than 16, or 16 and then up to r - 16
                // more", innermost first. Each count has one parse, so a pushdown engine
                // keeps one head where the blocks below keep ~6 alive (a 255-character
                // string's masks took 2-3 ms).
                let r = max - min;
                let (q, t) = (r / k, r % k);
                let mut upto = match t {
                    0 => "\"\"".to_owned(),
                    t => format!("{a}{}", quantifier(0, Some(t))),
                };
                for _ in 0..q {
                    let body = format!("{a}{} | {a}{{{k}}} {upto}", quantifier(0, Some(k - 1)));
                    let before = self.rules.len();
                    upto = self.rule("upto", body);
                    self.chain_rules += self.rules.len() - before;
                }
                parts.push(upto);
            }
            Some(max) => {
                let r = max - min;
                let (q, t) = (r / k, r % k);
                let mut alts = Vec::new();
                if q > 0 {
                    let below = [
                        self.repeat(&block, 0, Some(q - 1)),
                        format!("{a}{}", quantifier(0, Some(k - 1))),
                    ];
                    alts.push(below.join(" "));
                }
                let mut top = vec![self.repeat(&block, q, Some(q))];
                if t > 0 {
                    top.push(format!("{a}{}", quantifier(0, Some(t))));
                }
                alts.push(top.join(" "));
                let body = alts.join(" | ");
                parts.push(self.rule("upto", body));
            }
        }
        match parts.len() {
            0 => "\"\"".into(),
            1 => parts.pop().expect("one part"),
            _ => parts.join(" "),
        }
    }

    fn render(&mut self, n: &'a Node) -> String {
        match n {
            Node::Empty => "\"\"".into(),
            Node::Nothing => r"[^\x00-\U0010FFFF]".into(),
            Node::Lit(s) => gbnf_literal(s),
            Node::Class(r) => gbnf_class(r),
            Node::AnyJson => {
                if let Some(name) = &self.any_json {
                    return name.clone();
                }
                // Named before its body is rendered: the body refers to itself.
                let name = format!("anyjson{}", self.rules.len() + 1);
                self.any_json = Some(name.clone());
                let slot = self.rules.len();
                self.rules.push((name.clone(), String::new()));
                let body = self.expr(super::any_json_body());
                self.rules[slot].1 = body;
                name
            }
            Node::Concat(items) => items
                .iter()
                .map(|i| self.atom(i))
                .collect::<Vec<_>>()
                .join(" "),
            Node::Alt(items) => items
                .iter()
                .map(|i| self.expr(i))
                .collect::<Vec<_>>()
                .join(" | "),
            Node::Repeat(item, min, max) => self.counted(item, *min, *max),
            Node::Automaton(d) => self.automaton(d),
            Node::Seq {
                items,
                sep,
                nonempty,
            } => {
                // tail[i] ::= (sep item_i)? tail[i+1]: after something was emitted.
                let sep = self.atom(sep);
                let names: Vec<String> = items
                    .iter()
                    .map(|(item, _)| {
                        let body = self.expr(item);
                        if matches!(item, Node::Lit(_) | Node::Class(_)) {
                            body
                        } else {
                            self.rule("item", body)
                        }
                    })
                    .collect();
                let mut tails: Vec<Option<String>> = vec![None; items.len() + 1];
                // tails[0] is never referenced: the first item comes without a separator.
                for i in (1..items.len()).rev() {
                    let step = format!("{sep} {}", names[i]);
                    let step = if items[i].1 {
                        step
                    } else {
                        format!("({step})?")
                    };
                    let body = match &tails[i + 1] {
                        Some(t) => format!("{step} {t}"),
                        None => step,
                    };
                    tails[i] = Some(self.rule("tail", body));
                }
                let mut alts = Vec::new();
                let mut saw_required = false;
                for (j, (_, required)) in items.iter().enumerate() {
                    alts.push(match &tails[j + 1] {
                        Some(t) => format!("{} {t}", names[j]),
                        None => names[j].clone(),
                    });
                    if *required {
                        saw_required = true;
                        break;
                    }
                }
                let body = alts.join(" | ");
                if !saw_required && !nonempty {
                    format!("({body})?")
                } else {
                    body
                }
            }
            Node::List {
                item,
                sep,
                min,
                max,
            } => {
                let body = self.expr(item);
                let it = if matches!(**item, Node::Lit(_) | Node::Class(_)) {
                    body
                } else {
                    self.rule("item", body)
                };
                let sep = self.atom(sep);
                let rest = self.repeat(
                    &format!("({sep} {it})"),
                    min.saturating_sub(1),
                    max.map(|m| m - 1),
                );
                if *min == 0 {
                    format!("({it} {rest})?")
                } else {
                    format!("{it} {rest}")
                }
            }
        }
    }
}

fn quantifier(min: u32, max: Option<u32>) -> String {
    match (min, max) {
        (0, None) => "*".into(),
        (1, None) => "+".into(),
        (0, Some(1)) => "?".into(),
        (m, None) => format!("{{{m},}}"),
        (m, Some(x)) if m == x => format!("{{{m}}}"),
        (m, Some(x)) => format!("{{{m},{x}}}"),
    }
}

fn gbnf_char(out: &mut String, c: char, in_class: bool) {
    match c {
        '"' if !in_class => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        ']' | '[' | '^' | '-' if in_class => {
            let _ = write!(out, "\\x{:02X}", c as u32);
        }
        c if c.is_ascii_graphic() || c == ' ' => out.push(c),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02X}", c as u32);
        }
        c if (c as u32) < 0x10000 => {
            let _ = write!(out, "\\u{:04X}", c as u32);
        }
        c => {
            let _ = write!(out, "\\U{:08X}", c as u32);
        }
    }
}

fn gbnf_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        gbnf_char(&mut out, c, false);
    }
    out.push('"');
    out
}

fn gbnf_class(r: &Ranges) -> String {
    let mut out = String::from("[");
    for &(a, b) in r {
        gbnf_char(&mut out, a, true);
        if b != a {
            out.push('-');
            gbnf_char(&mut out, b, true);
        }
    }
    out.push(']');
    out
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
                1 => n.to_gbnf_blocked(),
                _ => n.to_gbnf_counted(),
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
        assert_ne!(one.to_gbnf(), one.to_gbnf_blocked());
        // `{0,200}` is 12 chain rules of 16 items; nine distinct bounds make 108.
        let many = Node::concat(
            (0..9)
                .map(|i| Node::concat(vec![Node::lit(","), Node::Repeat(x(), 0, Some(200 + i))]))
                .collect(),
        );
        assert_eq!(many.to_gbnf(), many.to_gbnf_blocked());
        // Counted, a long count stays one count while the counts at most COUNTER_FROM (128)
        // beside it pass the chains' bound (nine `{0,100}`, 6 chain rules each) and turn to
        // blocks.
        let short =
            (0..9).map(|i| Node::concat(vec![Node::lit(","), Node::Repeat(x(), 0, Some(100 + i))]));
        let with_long = Node::concat(short.chain([Node::Repeat(x(), 0, Some(5000))]).collect());
        let counted = with_long.to_gbnf_counted();
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
            Node::lit("\"prefix-that-is-long-enough-"),
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
        let one = "\"prefix-that-is-long-enough-ab_9\"";
        let two = "\"prefix-that-is-long-enough-\"\"prefix-that-is-long-enough-x\"";
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
