//! Parsed rules to the pushdown automaton: one DFA per rule over bytes and rule calls.
//!
//! 1. Each rule body becomes a Thompson NFA whose edges are byte ranges (character classes
//!    become their UTF-8 byte sequences, as in the regex engine) and calls of other rules.
//! 2. Nullable rules are found by a fixpoint. A call of a nullable rule `R` gets an ε-bypass,
//!    and every call targets `R'`, the rule without its empty string, so a called rule always
//!    consumes at least one byte: a stack frame never returns empty-handed, and "pop while
//!    accepting" cannot loop.
//! 3. Each rule's NFA is determinized (subset construction over byte classes and called rules).
//! 4. States that cannot complete their rule are removed (a fixpoint that also finds which rules
//!    can complete at all), so every live stack can still finish: "alive" means "a prefix of a
//!    sentence".
//! 5. Left recursion (a rule that can call itself before consuming a byte) is an error naming
//!    the cycle. Without it, the calls a state can make before its first byte form a DAG, and
//!    for every (state, byte class) the stack pushes that byte leads to are precomputed
//!    ([`Grammar::expansions`]), so stepping a frame by a byte never searches the grammar.

use super::parse::{Ast, Expr};
use super::table::{covering, Packed, Rows, Span};
use super::{BitSet256, Counter, Grammar, GrammarError, Prebuilt, COUNTER_HORIZON, NONE};
use crate::limits::Limits;
use crate::slice_ids::SliceIds;
use regex_syntax::utf8::{Utf8Sequence, Utf8Sequences};
use rustc_hash::FxHashMap as HashMap;
use std::cell::Cell;

/// Bytes charged per NFA state and per edge against [`Limits::grammar_automaton_bytes`].
const NFA_STATE_BYTES: usize = 32;
const NFA_EDGE_BYTES: usize = 12;

/// Items grouped by the state they leave (compressed rows): `items[off[s]..off[s + 1]]`.
struct ByState<T> {
    off: Vec<u32>,
    items: Vec<T>,
}

impl<T: Copy> ByState<T> {
    /// Groups `(state, item)` pairs by state, keeping their order within a state.
    fn new(states: usize, pairs: &[(u32, T)]) -> Self {
        let mut off = vec![0u32; states + 1];
        for &(s, _) in pairs {
            off[s as usize + 1] += 1;
        }
        for s in 0..states {
            off[s + 1] += off[s];
        }
        let mut fill = off.clone();
        let mut items = Vec::with_capacity(pairs.len());
        // Every slot is written below: a placeholder copy of any item (none when empty).
        if let Some(&(_, x)) = pairs.first() {
            items.resize(pairs.len(), x);
        }
        for &(s, x) in pairs {
            items[fill[s as usize] as usize] = x;
            fill[s as usize] += 1;
        }
        ByState { off, items }
    }

    fn of(&self, s: u32) -> &[T] {
        &self.items[self.off[s as usize] as usize..self.off[s as usize + 1] as usize]
    }
}

/// An NFA's edges by the state they leave, made once it is built ([`Nfa::into_edges`]): three
/// vectors per state (ε, byte, call) were ~40 % of the ~5,000 allocations of a small
/// schema grammar's compile.
struct Edges {
    states: usize,
    eps: ByState<u32>,
    bytes: ByState<(u8, u8, u32)>,
    calls: ByState<(u32, u32)>,
}

struct Nfa<'a> {
    /// States made so far; edges are kept with the state they leave.
    states: u32,
    eps: Vec<(u32, u32)>,
    bytes: Vec<(u32, (u8, u8, u32))>,
    calls: Vec<(u32, (u32, u32))>,
    bytes_used: usize,
    /// The rules, and which are inlined at their call sites.
    rules: &'a [super::parse::Rule],
    inline: &'a [bool],
    /// [`Limits::grammar_automaton_bytes`].
    max_bytes: usize,
    /// The entry of inlined rule `r`'s copy that continues at state `t`, by `(r, t)`: one
    /// copy per continuation. An entry is paid for by the states its copy made, or charged
    /// an edge's bytes when the copy is empty (many empty rules before one state would
    /// otherwise be entries without a charge).
    copies: HashMap<(u32, u32), u32>,
    /// The state that reads the continuation bytes `ranges` (pairs, zero after the last;
    /// a continuation byte is never 0) of a UTF-8 sequence into state `t`, by `(t, ranges)`.
    /// Not charged: one entry per state made.
    tails: HashMap<(u32, [u8; 6]), u32>,
    /// Scratch for [`Nfa::class_sequences`], taken and put back: a fresh splitter allocates
    /// its stack, and one per class range (read by the costing and the build) was ~500 of a
    /// small schema grammar's ~5,600 allocations.
    utf8: Cell<Option<Utf8Sequences>>,
    sequences: Cell<Vec<Utf8Sequence>>,
}

/// The automaton would pass [`Limits::grammar_automaton_bytes`].
struct TooBig;

impl Nfa<'_> {
    fn charge(&mut self, n: usize) -> Result<(), TooBig> {
        self.bytes_used += n;
        if self.bytes_used > self.max_bytes {
            Err(TooBig)
        } else {
            Ok(())
        }
    }

    fn add(&mut self) -> Result<u32, TooBig> {
        self.charge(NFA_STATE_BYTES)?;
        self.states += 1;
        Ok(self.states - 1)
    }

    fn eps(&mut self, from: u32, to: u32) -> Result<(), TooBig> {
        self.charge(NFA_EDGE_BYTES)?;
        self.eps.push((from, to));
        Ok(())
    }

    fn byte(&mut self, from: u32, lo: u8, hi: u8, to: u32) -> Result<(), TooBig> {
        self.charge(NFA_EDGE_BYTES)?;
        self.bytes.push((from, (lo, hi, to)));
        Ok(())
    }

    /// The edges, by the state they leave (the builder's lists go).
    fn into_edges(self) -> Edges {
        let n = self.states as usize;
        Edges {
            states: n,
            eps: ByState::new(n, &self.eps),
            bytes: ByState::new(n, &self.bytes),
            calls: ByState::new(n, &self.calls),
        }
    }

    /// Adds `e` ending at `to`; returns its entry state. Built from the end, so that an
    /// inlined rule's copy is shared by every use with the same continuation
    /// ([`Nfa::copies`]): a schema's "any other key" trie leaves through one string tail per
    /// node, and a copy of that tail per node made its subset construction ~10x the
    /// states it minimizes to (o89213: 2,058 states for 209). A fragment never adds an edge
    /// out of `to`, so a copy's language is the rule's followed by `to`'s, whoever enters it.
    fn build(&mut self, e: &Expr, to: u32) -> Result<u32, TooBig> {
        match e {
            Expr::Literal(bytes) => {
                let mut cur = to;
                for &b in bytes.iter().rev() {
                    let n = self.add()?;
                    self.byte(n, b, b, cur)?;
                    cur = n;
                }
                Ok(cur)
            }
            Expr::Class { ranges, negated } => self.chars(ranges, *negated, to),
            Expr::Any => self.chars(&[(0, 0x10FFFF)], false, to),
            Expr::Ref(rule) if self.inline[*rule] => {
                if let Some(&from) = self.copies.get(&(*rule as u32, to)) {
                    return Ok(from);
                }
                let rules = self.rules;
                let from = self.build(&rules[*rule].body, to)?;
                if from == to {
                    // An empty copy made nothing: its entry is what is charged.
                    self.charge(NFA_EDGE_BYTES)?;
                }
                self.copies.insert((*rule as u32, to), from);
                Ok(from)
            }
            Expr::Ref(rule) => {
                let from = self.add()?;
                self.charge(NFA_EDGE_BYTES)?;
                self.calls.push((from, (*rule as u32, to)));
                Ok(from)
            }
            Expr::Seq(items) => {
                let mut cur = to;
                for item in items.iter().rev() {
                    cur = self.build(item, cur)?;
                }
                Ok(cur)
            }
            Expr::Alt(alts) => {
                let from = self.add()?;
                for a in alts {
                    let s = self.build(a, to)?;
                    self.eps(from, s)?;
                }
                Ok(from)
            }
            Expr::Repeat { expr, min, max } => {
                let mut cur = match max {
                    None => {
                        let again = self.add()?;
                        let body = self.build(expr, again)?;
                        self.eps(again, body)?;
                        self.eps(again, to)?;
                        again
                    }
                    Some(max) => {
                        // Charged even when it adds no state (`max == min`): every visit of
                        // a bounded repetition costs, so nested counts of an empty item
                        // (`(("" ""){1000}){1000}`) pass the bound in the costing instead of
                        // being visited a billion times for free.
                        self.charge(NFA_EDGE_BYTES)?;
                        // (e (e ...)?)?: each optional copy may be the last.
                        let mut cur = to;
                        for _ in *min..*max {
                            let body = self.build(expr, cur)?;
                            let n = self.add()?;
                            self.eps(n, body)?;
                            self.eps(n, to)?;
                            cur = n;
                        }
                        cur
                    }
                };
                for _ in 0..*min {
                    let before = self.bytes_used;
                    cur = self.build(expr, cur)?;
                    if self.bytes_used == before {
                        // An iteration that charged nothing (an empty item, or copies made
                        // before) is charged an edge, so that a count of 1,000 of them
                        // inside another count is not a million free visits.
                        self.charge(NFA_EDGE_BYTES)?;
                    }
                }
                Ok(cur)
            }
        }
    }

    /// The bytes [`Nfa::build`] charges for `e` when no copy is shared, without building
    /// it: an upper bound, under which an attempt is built knowing it fits.
    /// `memo[r]`: rule `r`'s body, once computed.
    fn cost(&self, e: &Expr, memo: &mut [Option<usize>]) -> usize {
        match e {
            Expr::Literal(bytes) => bytes.len().saturating_mul(NFA_STATE_BYTES + NFA_EDGE_BYTES),
            Expr::Class { ranges, negated } => self.chars_cost(ranges, *negated),
            Expr::Any => self.chars_cost(&[(0, 0x10FFFF)], false),
            Expr::Ref(rule) if self.inline[*rule] => {
                let c = match memo[*rule] {
                    Some(c) => c,
                    None => {
                        let c = self.cost(&self.rules[*rule].body, memo);
                        memo[*rule] = Some(c);
                        c
                    }
                };
                // A copy that builds nothing is charged its entry in `copies`.
                c.max(NFA_EDGE_BYTES)
            }
            Expr::Ref(_) => NFA_STATE_BYTES + NFA_EDGE_BYTES,
            Expr::Seq(items) => items
                .iter()
                .fold(0, |sum, i| sum.saturating_add(self.cost(i, memo))),
            Expr::Alt(alts) => alts.iter().fold(NFA_STATE_BYTES, |sum, a| {
                sum.saturating_add(NFA_EDGE_BYTES)
                    .saturating_add(self.cost(a, memo))
            }),
            Expr::Repeat { expr, min, max } => {
                let one = self.cost(expr, memo);
                // A required iteration that charges nothing is charged an edge.
                let required = one.max(NFA_EDGE_BYTES).saturating_mul(*min as usize);
                let rest = match max {
                    None => (NFA_STATE_BYTES + 2 * NFA_EDGE_BYTES).saturating_add(one),
                    Some(max) => (NFA_STATE_BYTES + 2 * NFA_EDGE_BYTES)
                        .saturating_add(one)
                        .saturating_mul(max.saturating_sub(*min) as usize)
                        .saturating_add(NFA_EDGE_BYTES),
                };
                required.saturating_add(rest)
            }
        }
    }

    /// The bytes [`Nfa::counter_stand_in`] charges.
    fn counter_stand_in_cost(c: &Counted) -> usize {
        NFA_STATE_BYTES + NFA_EDGE_BYTES + if c.min == 0 { NFA_EDGE_BYTES } else { 0 }
    }

    /// `item` once, or not at all when the count may be 0: the calls and nullability of a
    /// counter's rule.
    fn counter_stand_in(&mut self, c: &Counted, to: u32) -> Result<u32, TooBig> {
        let from = self.add()?;
        self.charge(NFA_EDGE_BYTES)?;
        self.calls.push((from, (c.item as u32, to)));
        if c.min == 0 {
            self.eps(from, to)?;
        }
        Ok(from)
    }

    /// The UTF-8 byte sequences of one character of a class, in order, into `out`.
    fn class_sequences(&self, ranges: &[(u32, u32)], negated: bool, out: &mut Vec<Utf8Sequence>) {
        let mut splitter = self.utf8.take();
        out.clear();
        each_char_range(ranges, negated, |lo, hi| {
            let split = match splitter.as_mut() {
                Some(s) => {
                    s.reset(lo, hi);
                    s
                }
                None => splitter.insert(Utf8Sequences::new(lo, hi)),
            };
            out.extend(split);
        });
        self.utf8.set(splitter);
    }

    /// One character of a class, as UTF-8 byte sequences from a new entry state to `to`.
    /// The bytes after a lead byte go through states shared by every class that continues
    /// at `to` ([`Nfa::tails`]): a class that leaves out one ASCII character has ~15 such
    /// states, and 26 classes of an "any other key" trie made 418 DFA states for 44.
    fn chars(&mut self, ranges: &[(u32, u32)], negated: bool, to: u32) -> Result<u32, TooBig> {
        let mut sequences = self.sequences.take();
        self.class_sequences(ranges, negated, &mut sequences);
        let built = self.chars_of(&sequences, to);
        self.sequences.set(sequences);
        built
    }

    fn chars_of(&mut self, sequences: &[Utf8Sequence], to: u32) -> Result<u32, TooBig> {
        let from = self.add()?;
        for seq in sequences {
            let seq = seq.as_slice();
            let mut next = to;
            for k in (1..seq.len()).rev() {
                let mut key = (to, [0u8; 6]);
                for (j, r) in seq[k..].iter().enumerate() {
                    key.1[2 * j] = r.start;
                    key.1[2 * j + 1] = r.end;
                }
                next = match self.tails.get(&key) {
                    Some(&s) => s,
                    None => {
                        let s = self.add()?;
                        self.byte(s, seq[k].start, seq[k].end, next)?;
                        self.tails.insert(key, s);
                        s
                    }
                };
            }
            self.byte(from, seq[0].start, seq[0].end, next)?;
        }
        Ok(from)
    }

    /// The bytes [`Nfa::chars`] charges for a class.
    fn chars_cost(&self, ranges: &[(u32, u32)], negated: bool) -> usize {
        let mut sequences = self.sequences.take();
        self.class_sequences(ranges, negated, &mut sequences);
        let mut cost = NFA_STATE_BYTES;
        for seq in &sequences {
            let n = seq.as_slice().len();
            cost += (n - 1) * NFA_STATE_BYTES + n * NFA_EDGE_BYTES;
        }
        self.sequences.set(sequences);
        cost
    }
}

/// Calls `f` with the character ranges of a class (`negated`: of its complement), sorted,
/// merged and without surrogates. Ranges already sorted and apart (every class the schema
/// compiler makes) are read as they are; others are sorted and merged into a copy first.
fn each_char_range(ranges: &[(u32, u32)], negated: bool, mut f: impl FnMut(char, char)) {
    let clamp = |&(lo, hi): &(u32, u32)| (lo.min(0x10FFFF), hi.min(0x10FFFF));
    let apart = ranges.iter().all(|&(lo, hi)| lo <= hi)
        && ranges
            .windows(2)
            .all(|w| clamp(&w[0]).1.saturating_add(1) < clamp(&w[1]).0);
    let merged: Vec<(u32, u32)>;
    let rs = if apart {
        ranges
    } else {
        let mut rs: Vec<(u32, u32)> = ranges.iter().map(clamp).collect();
        rs.sort_unstable();
        let mut kept = 0;
        for k in 0..rs.len() {
            let (lo, hi) = rs[k];
            if kept > 0 && lo <= rs[kept - 1].1.saturating_add(1) {
                rs[kept - 1].1 = rs[kept - 1].1.max(hi);
            } else {
                rs[kept] = (lo, hi);
                kept += 1;
            }
        }
        rs.truncate(kept);
        merged = rs;
        &merged
    };
    let mut emit = |lo: u32, hi: u32| {
        // Split around the surrogates, which are not characters.
        for (a, b) in [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi)] {
            if a <= b {
                f(
                    char::from_u32(a).expect("not a surrogate"),
                    char::from_u32(b).expect("not a surrogate"),
                );
            }
        }
    };
    if negated {
        let mut next = 0u32;
        for r in rs {
            let (lo, hi) = clamp(r);
            if lo > next {
                emit(next, lo - 1);
            }
            next = hi + 1;
        }
        if next <= 0x10FFFF {
            emit(next, 0x10FFFF);
        }
    } else {
        for r in rs {
            let (lo, hi) = clamp(r);
            emit(lo, hi);
        }
    }
}

/// [`each_char_range`], collected.
fn char_ranges(ranges: &[(u32, u32)], negated: bool) -> Vec<(char, char)> {
    let mut out = Vec::new();
    each_char_range(ranges, negated, |lo, hi| out.push((lo, hi)));
    out
}

fn too_big(rule: &str, limit: usize) -> GrammarError {
    GrammarError::limit_no_pos(format!(
        "needs more than the {limit}-byte automaton limit (while compiling rule `{rule}`)"
    ))
}

/// Compiles a parsed grammar; `spent` is the determinization work already done for the
/// same request (a generated grammar tried in several renderings), bounded by
/// [`Limits::grammar_determinize_work`] in all. With `prebuilt`, the rule [`Ast::prebuilt`]
/// names takes its automaton ([`splice_rules`]).
pub(super) fn compile(
    ast: Ast,
    prebuilt: Option<&Prebuilt>,
    limits: &Limits,
    spent: &mut u64,
) -> Result<Grammar, GrammarError> {
    let Rewritten {
        mut ast,
        mut counted,
        mut framed,
    } = with_counters(ast, limits.grammar_repetition)?;
    let splice = match (ast.prebuilt, prebuilt) {
        (Some(r), Some(p)) => Some(splice_rules(&mut ast, &mut counted, &mut framed, r, p)),
        _ => None,
    };
    let splice = splice.as_ref();
    let ast = &ast;
    // Inlining copies a rule into every caller; when the copies are what passes the bound (a
    // schema's GBNF with a small rule used in hundreds of places, or blocks of blocks of a
    // counted string), inline only the smallest rules, then none. Keeping the smallest
    // matters: a string character behind a call costs a frame per byte, and a `maxLength:
    // 32767` string's cold masks took ~15 ms instead of ~0.5 for its first characters.
    let mut tried: Vec<Vec<bool>> = Vec::new();
    let mut result = None;
    // One determinization budget for every attempt: a retry redoes the work.
    // (size bound, leaves only): inlining a small caller copies its callees too.
    for bound in [
        Some((INLINE_SIZE, false)),
        Some((FALLBACK_INLINE_SIZE, true)),
        None,
    ] {
        let mut inline = match bound {
            Some((max_size, leaves_only)) => inlined_rules(ast, max_size, leaves_only),
            None => vec![false; ast.rules.len()],
        };
        // A counter is its own frame: that frame holds the count. The wide characters of a
        // chain keep theirs too: that is what they were split out for.
        for (r, ((i, c), &f)) in inline.iter_mut().zip(&counted).zip(&framed).enumerate() {
            *i &= c.is_none() && !f && splice.is_none_or(|s| !s.spliced[r]);
        }
        if tried.contains(&inline) {
            continue;
        }
        let attempt = compile_with(ast, &inline, &counted, splice, spent, limits);
        let retry = matches!(&attempt, Err(e) if e.limit)
            && inline.iter().any(|&i| i)
            && *spent <= limits.grammar_determinize_work;
        result = Some(attempt);
        if !retry {
            break;
        }
        tried.push(inline);
    }
    result.expect("the first attempt always runs")
}

/// A [`Prebuilt`] grammar's rules added to an [`Ast`] ([`splice_rules`]).
struct Splice<'a> {
    prebuilt: &'a Prebuilt,
    /// Per rule of the `Ast`: whether it is one of the prebuilt's.
    spliced: Vec<bool>,
    /// Per prebuilt rule: its rule in the `Ast`.
    rule_in_ast: Vec<u32>,
    /// The `Ast` rules that only the replaced body could reach, and nothing else now.
    unreachable: Vec<bool>,
}

/// Makes rule `r` of `ast` the root of `prebuilt`: its body becomes the prebuilt root's, the
/// prebuilt's other rules are added after the others (no counter, never inlined), and the
/// rules only `r`'s old body reached are marked unreachable (a dead state each, as absorbed
/// rules: a schema's own copies of the free-form value's item rules).
fn splice_rules<'a>(
    ast: &mut Ast,
    counted: &mut Vec<Option<Counted>>,
    framed: &mut Vec<bool>,
    r: usize,
    prebuilt: &'a Prebuilt,
) -> Splice<'a> {
    let block = &prebuilt.ast;
    let n = ast.rules.len();
    let mut rule_in_ast = vec![0u32; block.rules.len()];
    let mut next = n as u32;
    for (k, slot) in rule_in_ast.iter_mut().enumerate() {
        *slot = if k == block.root {
            r as u32
        } else {
            next += 1;
            next - 1
        };
    }
    let body_in_ast = |k: usize| {
        let mut body = block.rules[k].body.clone();
        body.each_ref_mut(&mut |x| *x = rule_in_ast[*x] as usize);
        body
    };
    ast.rules[r].body = body_in_ast(block.root);
    counted[r] = None;
    framed[r] = false;
    for k in (0..block.rules.len()).filter(|&k| k != block.root) {
        ast.rules.push(super::Rule {
            name: format!("{}-{}", ast.rules[r].name, block.rules[k].name),
            at: ast.rules[r].at,
            body: body_in_ast(k),
        });
        counted.push(None);
        framed.push(false);
    }
    let mut spliced = vec![false; ast.rules.len()];
    for &x in &rule_in_ast {
        spliced[x as usize] = true;
    }
    // Reachable from the root by references and counters' items.
    let mut reached = vec![false; ast.rules.len()];
    let mut stack = vec![ast.root];
    while let Some(x) = stack.pop() {
        if std::mem::replace(&mut reached[x], true) {
            continue;
        }
        ast.rules[x].body.each_ref(&mut |y| stack.push(y));
        if let Some(c) = &counted[x] {
            stack.push(c.item);
        }
    }
    Splice {
        prebuilt,
        spliced,
        rule_in_ast,
        unreachable: reached.iter().map(|&x| !x).collect(),
    }
}

/// One attempt of [`compile`], with these rules inlined; `spent` is the determinization work
/// of the attempts so far, bounded by [`Limits::grammar_determinize_work`] in all.
fn compile_with(
    ast: &Ast,
    inline: &[bool],
    counted: &[Option<Counted>],
    splice: Option<&Splice>,
    spent: &mut u64,
    limits: &Limits,
) -> Result<Grammar, GrammarError> {
    let spliced = |r: usize| splice.is_some_and(|s| s.spliced[r]);
    let max_bytes = limits.grammar_automaton_bytes;
    let before = *spent;
    let n_rules = ast.rules.len();
    // Inlining is only worth it while the copies stay small: an attempt with rules inlined
    // stops as soon as its NFA takes a quarter of the automaton bound, before determinizing.
    // On JSONSchemaBench and SchemaStore, every first attempt (INLINE_SIZE) that compiled had
    // an NFA of at most 211 KiB, and 593 of the 817 that passed the bound only after
    // determinizing (~3-15 ms each) had one over 256 KiB; of the second attempts that
    // compiled, one had more (460 KiB), and now compiles without inlining.
    let inlining = inline.iter().any(|&i| i);
    let nfa_bytes = if inlining {
        max_bytes / INLINED_NFA_SHARE
    } else {
        max_bytes
    };
    let nfa_too_big = |rule: &str| {
        if inlining {
            GrammarError::limit_no_pos(format!(
                "inlining its rules takes more than {nfa_bytes} bytes of NFA, a quarter of the \
                 {max_bytes}-byte automaton limit (while compiling rule `{rule}`)"
            ))
        } else {
            too_big(rule, max_bytes)
        }
    };
    let mut nfa = Nfa {
        states: 0,
        eps: Vec::new(),
        bytes: Vec::new(),
        calls: Vec::new(),
        bytes_used: 0,
        rules: &ast.rules,
        inline,
        max_bytes: nfa_bytes,
        // This and the other maps of a compile start with room for a median schema
        // grammar's (~185 states): grown from empty, their rehashes and the run memo's were
        // ~2.5 % of its compile.
        copies: HashMap::with_capacity_and_hasher(64, Default::default()),
        tails: HashMap::with_capacity_and_hasher(64, Default::default()),
        utf8: Cell::new(None),
        sequences: Cell::new(Vec::new()),
    };
    // Costed first, so that an attempt past the bound fails before it builds anything
    // (~0.3-0.5 ms each on the corpus' largest grammars, two failed attempts before the one
    // that compiles). The cost counts every copy, shared or not: an attempt whose shared
    // copies would fit is still refused here, as before copies were shared (building such
    // attempts anyway was as often slower as faster on the corpus: other inlining, more
    // states).
    let mut memo = vec![None; n_rules];
    let mut total = 0usize;
    for (r, (rule, counted)) in ast.rules.iter().zip(counted).enumerate() {
        let body = match counted {
            Some(c) => Nfa::counter_stand_in_cost(c),
            // Spliced in below, an NFA start without edges here.
            None if spliced(r) => 0,
            None => nfa.cost(&rule.body, &mut memo),
        };
        total = total.saturating_add(NFA_STATE_BYTES).saturating_add(body);
        if total > nfa_bytes {
            return Err(nfa_too_big(&rule.name));
        }
    }
    let mut nstart = Vec::with_capacity(n_rules);
    let mut nend = Vec::with_capacity(n_rules);
    for (r, (rule, counted)) in ast.rules.iter().zip(counted).enumerate() {
        let e = nfa.add().map_err(|_| nfa_too_big(&rule.name))?;
        let s = match counted {
            // Only for nullability and the calls before a first byte: the rule's DFA is
            // the counter's phases, made below.
            Some(c) => nfa.counter_stand_in(c, e),
            // Not nullable, and its automaton is spliced in below.
            None if spliced(r) => nfa.add(),
            None => nfa.build(&rule.body, e),
        }
        .map_err(|_| nfa_too_big(&rule.name))?;
        nstart.push(s);
        nend.push(e);
    }
    // Every test that compiles a grammar checks the costing against the build: shared
    // copies only take less.
    debug_assert!(
        nfa.bytes_used <= total,
        "Nfa::cost is below what Nfa::build charged"
    );
    let nfa_bytes_used = nfa.bytes_used;
    let nfa = nfa.into_edges();

    // A rule inlined at every use and never called (no call edge, counters' included) is
    // only ever read through its copies: its own automaton would be dead weight. A schema's
    // "any other key" rule is built from ~20 such pieces (a string minus one listed key's
    // prefix each), and determinizing them on their own was half of its subset construction.
    let mut called = vec![false; n_rules];
    for &(callee, _) in &nfa.calls.items {
        called[callee as usize] = true;
    }
    let absorbed = |r: usize| {
        (r != ast.root && inline[r] && !called[r] && counted[r].is_none())
            || splice.is_some_and(|s| s.unreachable[r])
    };

    // Byte classes: bytes that no edge distinguishes share a class.
    let mut boundary = [false; 257];
    for &(lo, hi, _) in &nfa.bytes.items {
        boundary[lo as usize] = true;
        boundary[hi as usize + 1] = true;
    }
    if let Some(s) = splice {
        let c = &s.prebuilt.grammar.classes;
        for b in 1..256 {
            boundary[b] |= c[b] != c[b - 1];
        }
    }
    let mut classes = [0u8; 256];
    let mut reps = vec![0u8];
    for b in 1..256 {
        if boundary[b] {
            reps.push(b as u8);
        }
        classes[b] = (reps.len() - 1) as u8;
    }
    let stride = reps.len();

    // Nullable rules: the end is reachable by ε and calls of nullable rules.
    let mut nullable = vec![false; n_rules];
    let mut seen = Seen {
        mark: Vec::new(),
        generation: 0,
        visits: 0,
    };
    loop {
        let mut changed = false;
        for r in 0..n_rules {
            if !nullable[r] && eps_reaches(&nfa, nstart[r], nend[r], &nullable, &mut seen) {
                nullable[r] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }

    // Subset construction, rule by rule, into one global numbering. Each state's moves are
    // kept as class spans: a dense row per state was most of a large grammar's memory and,
    // read by every later pass, ~40 % of its compile (page faults included).
    let mut moves: Rows<u32> = Rows::new();
    let mut accepting: Vec<bool> = Vec::new();
    let mut rule_of: Vec<u32> = Vec::new();
    let mut calls: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut start = vec![NONE; n_rules];
    // Bytes held while building: the NFA, the construction tables kept to the end (`held`:
    // spans, calls, per-state fields) and the current rule's NFA sets (each a map key, and
    // queued until its state is made), which go with the rule.
    let mut held = 0usize;
    // What the construction holds (the NFA, each DFA state's NFA set, spans, calls,
    // expansions) may take twice the automaton bound; what is kept (packed, checked at the
    // end) must fit the bound itself. Held to the bound, a `minLength: 10000` pattern's
    // 10,345 states (0.47 MB of NFA, 0.58 MB of tables, packed to 0.5 MB) were refused.
    let build_bytes = max_bytes.saturating_mul(2);
    let mut counters = Vec::new();
    // A prebuilt class's bytes, from its first to its last.
    let mut block_bytes: Vec<(u8, u8)> = Vec::new();
    if let Some(s) = splice {
        for (b, &c) in s.prebuilt.grammar.classes.iter().enumerate() {
            if usize::from(c) == block_bytes.len() {
                block_bytes.push((b as u8, b as u8));
            }
            block_bytes[usize::from(c)].1 = b as u8;
        }
    }
    // A span of the prebuilt's classes as a span of ours (a refinement of theirs).
    let our_span = |lo: u8, hi: u8| {
        let first = block_bytes[usize::from(lo)].0;
        let last = block_bytes[usize::from(hi)].1;
        (classes[usize::from(first)], classes[usize::from(last)])
    };
    // Determinization work: NFA edges scanned, and states visited by the closures and the
    // nullable fixpoint (`seen.visits`).
    let mut scanned = 0u64;
    let mut out_of_work = |scanned: u64, seen: &Seen, rule: &str| {
        *spent = before.saturating_add(scanned).saturating_add(seen.visits);
        if *spent > limits.grammar_determinize_work {
            return Err(GrammarError::limit_no_pos(format!(
                "needs more than the {}-unit work limit to determinize (while compiling rule \
                 `{rule}`)",
                limits.grammar_determinize_work
            )));
        }
        Ok(())
    };
    let too_big_to_build = |rule: &str| {
        GrammarError::limit_no_pos(format!(
            "needs more than the {max_bytes}-byte automaton limit (while compiling rule \
             `{rule}`, its tables under construction passed {build_bytes} bytes)"
        ))
    };
    // Per byte class, the NFA states the current DFA state's edges enter on it.
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); stride];
    // Per NFA state, the rule whose construction entered it alone and the DFA state that
    // led to (8 bytes an NFA state): most classes enter one NFA state (a string's next
    // character), the same from many of the rule's states, and its closure and set lookup
    // were made again each time.
    let mut entering_one: Vec<(u32, u32)> = vec![(NONE, NONE); nfa.states];
    // Scratch, kept across states and rules (fresh vectors per closure and per state were
    // ~1,000 of a small schema grammar's ~5,000 allocations): the current rule's NFA sets,
    // the state's own, a closure's stack and result, the state's calls by callee.
    let mut sets = SliceIds::default();
    let (mut set, mut stack, mut found) = (Vec::new(), Vec::new(), Vec::new());
    let mut by_rule: Vec<(u32, u32)> = Vec::new();
    for r in 0..n_rules {
        let base = accepting.len() as u32;
        if let Some(c) = &counted[r] {
            let (counter, succ) = counter_phases(c, base);
            for (s, &next) in (base..).zip(&succ) {
                moves.end_row();
                accepting.push(counter.accepts(s));
                rule_of.push(r as u32);
                calls.push(match next {
                    NONE => Vec::new(),
                    t => vec![(c.item as u32, t)],
                });
                held += 48;
            }
            start[r] = counter.phase(0);
            counters.push(counter);
            if nfa_bytes_used + held > build_bytes {
                return Err(too_big_to_build(&ast.rules[r].name));
            }
            continue;
        }
        if absorbed(r) {
            // One dead state: the rule never completes on its own and nothing calls it.
            moves.end_row();
            accepting.push(false);
            rule_of.push(r as u32);
            calls.push(Vec::new());
            start[r] = base;
            held += 48;
            continue;
        }
        if spliced(r) {
            // Its states come after every other rule's ([`minimize`] leaves them out).
            continue;
        }
        sets.clear();
        let mut rule_sets = 0usize;
        stack.push(nstart[r]);
        closure(&nfa, &mut stack, &mut found, &nullable, &mut seen);
        sets.intern(&found);
        start[r] = base;
        let mut i = 0;
        while i < sets.len() {
            // A copy: the sets found below go to the same arena.
            set.clear();
            set.extend_from_slice(sets.get(i));
            accepting.push(set.binary_search(&nend[r]).is_ok());
            rule_of.push(r as u32);
            // Every edge is read once and its target put in the buckets of the classes it
            // covers (an edge's range starts and ends on class boundaries, which are made from
            // the edges). Scanning every edge once per class instead was ~60 % of a schema
            // grammar's compile (o21149: 36 ms over ~60 classes).
            let (mut lo_class, mut hi_class) = (stride, 0);
            for &q in &set {
                let edges = nfa.bytes.of(q);
                scanned += 1 + edges.len() as u64;
                for &(lo, hi, t) in edges {
                    let (lo, hi) = (classes[lo as usize], classes[hi as usize]);
                    scanned += u64::from(hi - lo) + 1;
                    lo_class = lo_class.min(usize::from(lo));
                    hi_class = hi_class.max(usize::from(hi));
                    for c in lo..=hi {
                        buckets[c as usize].push(t);
                    }
                }
            }
            out_of_work(scanned, &seen, &ast.rules[r].name)?;
            let mut last = NONE;
            for c in lo_class..=hi_class.min(stride - 1) {
                if buckets[c].is_empty() {
                    last = NONE;
                    continue;
                }
                // Neighbouring classes that one wide range covers (a string's character class
                // spans dozens) reach the same set: one closure for all.
                if last == NONE || buckets[c] != buckets[c - 1] {
                    last = match buckets[c][..] {
                        [q] if entering_one[q as usize].0 == r as u32 => entering_one[q as usize].1,
                        _ => {
                            stack.extend_from_slice(&buckets[c]);
                            closure(&nfa, &mut stack, &mut found, &nullable, &mut seen);
                            let t = base + sets.intern(&found);
                            out_of_work(scanned, &seen, &ast.rules[r].name)?;
                            if let [q] = buckets[c][..] {
                                entering_one[q as usize] = (r as u32, t);
                            }
                            t
                        }
                    };
                }
                moves.push(c as u8, c as u8, last);
            }
            for bucket in buckets.iter_mut().take(hi_class + 1).skip(lo_class) {
                bucket.clear();
            }
            moves.end_row();
            by_rule.clear();
            by_rule.extend(set.iter().flat_map(|&q| nfa.calls.of(q).iter().copied()));
            by_rule.sort_unstable();
            let mut out = Vec::new();
            for group in by_rule.chunk_by(|a, b| a.0 == b.0) {
                stack.extend(group.iter().map(|&(_, t)| t));
                closure(&nfa, &mut stack, &mut found, &nullable, &mut seen);
                out.push((group[0].0, base + sets.intern(&found)));
            }
            out_of_work(scanned, &seen, &ast.rules[r].name)?;
            let spans = moves.row(accepting.len() - 1).len();
            held += spans * 8 + out.len() * 8 + 48;
            rule_sets += set.len() * 8 + 48;
            calls.push(out);
            if nfa_bytes_used + held + rule_sets > build_bytes {
                return Err(too_big_to_build(&ast.rules[r].name));
            }
            i += 1;
        }
    }
    drop(nfa);

    // `R'`: a nullable rule's start state is accepting; calls enter a non-accepting copy.
    let mut call_start = start.clone();
    for r in 0..n_rules {
        if nullable[r] {
            let s = start[r] as usize;
            let copy = accepting.len() as u32;
            for i in moves.off[s]..moves.off[s + 1] {
                let x = moves.spans[i as usize];
                moves.push(x.lo, x.hi, x.target);
            }
            moves.end_row();
            accepting.push(false);
            rule_of.push(r as u32);
            calls.push(calls[s].clone());
            call_start[r] = copy;
        }
    }
    // The prebuilt rules' states, their moves by the prebuilt's classes made moves by ours
    // (a refinement of theirs).
    let block_base = accepting.len();
    if let Some(s) = splice {
        let block = &s.prebuilt.grammar;
        let base = block_base as u32;
        for t in 0..block.state_count() {
            for x in block.moves.row(t) {
                let (lo, hi) = our_span(x.lo, x.hi);
                moves.push(lo, hi, base + x.target);
            }
            moves.end_row();
            accepting.push(block.accepting[t]);
            rule_of.push(s.rule_in_ast[block.rule_of[t] as usize]);
            let out: Vec<(u32, u32)> = block
                .calls(t as u32)
                .iter()
                .map(|&(callee, ret)| (s.rule_in_ast[callee as usize], base + ret))
                .collect();
            held += moves.row(accepting.len() - 1).len() * 8 + out.len() * 8 + 48;
            calls.push(out);
        }
        // Not nullable: a call enters the start itself.
        for (k, &x) in s.rule_in_ast.iter().enumerate() {
            start[x as usize] = base + block.call_start[k];
            call_start[x as usize] = start[x as usize];
        }
        if nfa_bytes_used + held > build_bytes {
            let value = s.rule_in_ast[s.prebuilt.ast.root] as usize;
            return Err(too_big_to_build(&ast.rules[value].name));
        }
    }
    let n = accepting.len();

    // Live states (can complete their rule) and productive rules, by a worklist.
    // A spliced prebuilt's states were trimmed when it was built, and its rules reach no
    // other: they are taken as live and productive, and its moves and calls are not read.
    let own = block_base;
    // Each state's predecessors by a byte, once each, in one flat array (a vector per state
    // was ~8 % of a schema grammar's compile).
    let mut rev_start = vec![0u32; n + 1];
    let mut last = vec![NONE; n];
    for s in 0..own {
        for x in moves.row(s) {
            let t = x.target as usize;
            if last[t] != s as u32 {
                last[t] = s as u32;
                rev_start[t + 1] += 1;
            }
        }
    }
    for t in 0..n {
        rev_start[t + 1] += rev_start[t];
    }
    let mut rev = vec![0u32; rev_start[n] as usize];
    let mut fill = rev_start.clone();
    last.fill(NONE);
    for s in 0..own {
        for x in moves.row(s) {
            let t = x.target as usize;
            if last[t] != s as u32 {
                last[t] = s as u32;
                rev[fill[t] as usize] = s as u32;
                fill[t] += 1;
            }
        }
    }
    let mut rev_ret: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
    let mut callers: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n_rules];
    let mut starts_of: HashMap<u32, Vec<u32>> =
        HashMap::with_capacity_and_hasher(n_rules, Default::default());
    for (r, &s) in call_start.iter().enumerate() {
        starts_of.entry(s).or_default().push(r as u32);
    }
    for (s, row) in calls[..own].iter().enumerate() {
        for &(callee, ret) in row {
            rev_ret[ret as usize].push((s as u32, callee));
            callers[callee as usize].push((s as u32, ret));
        }
    }
    let mut live = vec![false; n];
    live[own..].fill(true);
    let mut productive = vec![false; n_rules];
    for &r in splice.map_or(&[][..], |s| &s.rule_in_ast[..]) {
        productive[r as usize] = true;
    }
    let mut work: Vec<u32> = (0..own as u32).filter(|&s| accepting[s as usize]).collect();
    for &s in &work {
        live[s as usize] = true;
    }
    while let Some(t) = work.pop() {
        let mark = |s: u32, live: &mut Vec<bool>, work: &mut Vec<u32>| {
            if !live[s as usize] {
                live[s as usize] = true;
                work.push(s);
            }
        };
        for &s in &rev[rev_start[t as usize] as usize..rev_start[t as usize + 1] as usize] {
            mark(s, &mut live, &mut work);
        }
        for &(s, callee) in &rev_ret[t as usize] {
            if productive[callee as usize] {
                mark(s, &mut live, &mut work);
            }
        }
        if let Some(rules) = starts_of.get(&t) {
            for &r in rules {
                if !productive[r as usize] {
                    productive[r as usize] = true;
                    for &(s, ret) in &callers[r as usize] {
                        if live[ret as usize] {
                            mark(s, &mut live, &mut work);
                        }
                    }
                }
            }
        }
    }
    let entry = start[ast.root];
    if !live[entry as usize] {
        return Err(GrammarError::at(
            ast.rules[ast.root].at,
            "the grammar matches no string: rule `root` can never complete (every \
             alternative recurses forever)"
                .into(),
        ));
    }
    let mut live_moves: Rows<u32> = Rows::new();
    for (s, calls) in calls.iter_mut().enumerate() {
        for x in moves.row(s) {
            if live[x.target as usize] {
                live_moves.push(x.lo, x.hi, x.target);
            }
        }
        live_moves.end_row();
        calls.retain(|&(callee, ret)| productive[callee as usize] && live[ret as usize]);
    }
    let moves = live_moves;
    // Minimization and the closing table read moves class by class: bounded as the dense table
    // was (4 bytes a class), which no corpus grammar comes near (at most 128k moves, of 262k
    // under the 1 MiB bound) while a hostile one could make ~18k states of 256 classes each.
    let class_moves = moves.class_moves();
    if class_moves.saturating_mul(4) > max_bytes {
        return Err(GrammarError::limit_no_pos(format!(
            "needs more than the {max_bytes}-byte automaton limit ({class_moves} moves by \
             byte class, 4 bytes each)"
        )));
    }

    // Merge equivalent states (subset construction leaves duplicates: a loop's state after
    // its first iteration and after the next ones) where the automaton is large enough for
    // its size to matter ([`MINIMIZE_FROM_STATES`]).
    let class = (block_base >= MINIMIZE_FROM_STATES).then(|| {
        minimize(
            &moves,
            &accepting,
            &rule_of,
            &calls,
            block_base,
            limits.grammar_minimize_work,
        )
    });
    let remap = |t: u32| match &class {
        Some(class) if t != NONE => class[t as usize],
        _ => t,
    };
    let (moves, accepting, rule_of, calls) = match &class {
        None => (moves, accepting, rule_of, calls),
        Some(class) => {
            let n_classes = class.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
            let mut rep = vec![usize::MAX; n_classes];
            for (s, &c) in class.iter().enumerate() {
                if rep[c as usize] == usize::MAX {
                    rep[c as usize] = s;
                }
            }
            let mut m_moves = Rows::new();
            let (mut m_acc, mut m_rule, mut m_calls) = (Vec::new(), Vec::new(), Vec::new());
            for &s in &rep {
                for x in moves.row(s) {
                    m_moves.push(x.lo, x.hi, remap(x.target));
                }
                m_moves.end_row();
                m_acc.push(accepting[s]);
                m_rule.push(rule_of[s]);
                m_calls.push(
                    calls[s]
                        .iter()
                        .map(|&(callee, ret)| (callee, remap(ret)))
                        .collect::<Vec<_>>(),
                );
            }
            (m_moves, m_acc, m_rule, m_calls)
        }
    };
    let call_start: Vec<u32> = call_start.iter().map(|&s| remap(s)).collect();
    let entry = remap(entry);
    let n = accepting.len();
    let mut counter_of = vec![NONE; n];
    for (k, c) in counters.iter_mut().enumerate() {
        for s in c.states_mut() {
            *s = remap(*s);
            counter_of[*s as usize] = k as u32;
        }
    }

    // Left recursion: a rule that can call itself before consuming a byte.
    check_left_recursion(ast, &call_start, &calls)?;

    let mut call_off = Vec::with_capacity(n + 1);
    let mut call_edges = Vec::new();
    for c in &calls {
        call_off.push(call_edges.len() as u32);
        call_edges.extend_from_slice(c);
    }
    call_off.push(call_edges.len() as u32);
    drop(calls);
    let Expansions {
        rows: expansions,
        entries,
        pushes,
    } = build_expansions(
        splice.map(|s| {
            // The prebuilt's lists, first in the tables (so their ranges stand), its states
            // and classes made ours.
            let block = &s.prebuilt.grammar;
            let base = remap(block_base as u32);
            let mut rows = Rows::new();
            for t in 0..block.state_count() {
                for x in s.prebuilt.expansions.row(t) {
                    let (lo, hi) = our_span(x.lo, x.hi);
                    rows.push(lo, hi, x.target);
                }
                rows.end_row();
            }
            ExpansionSeed {
                first: base as usize,
                rows,
                entries: block
                    .entries
                    .iter()
                    .map(|&(top, at, len)| (top + base, at, len))
                    .collect(),
                pushes: block.pushes.iter().map(|&q| q + base).collect(),
            }
        }),
        &moves,
        // Accepting, with no move, no call and no count ([`build_expansions`]'s `add`).
        (0..n)
            .map(|s| {
                accepting[s]
                    && counter_of[s] == NONE
                    && moves.row(s).is_empty()
                    && call_off[s] == call_off[s + 1]
            })
            .collect(),
        &call_off,
        &call_edges,
        &call_start,
        (held, build_bytes),
    )
    .map_err(|s| too_big_to_build(&ast.rules[rule_of[s] as usize].name))?;
    // A cell holds where its list starts, plus one (0: no list), and a bit marks each list's
    // last entry: 8 bytes a cell instead of 12 for the range (lists are stored once each
    // and never overlap, [`build_expansions`]).
    let mut list_ends = vec![0u64; entries.len().div_ceil(64)];
    let mut expansion_rows: Rows<u32> = Rows::new();
    for s in 0..n {
        for x in expansions.row(s) {
            let (a, z) = x.target;
            list_ends[(z as usize - 1) / 64] |= 1 << ((z - 1) % 64);
            expansion_rows.push(x.lo, x.hi, a + 1);
        }
        expansion_rows.end_row();
    }

    // First bytes, by class span: a class is a run of bytes from its first (`reps`) to the
    // next class's, so a span is one byte range.
    let bytes_of = |x: (u8, u8), set: &mut BitSet256| {
        let end = reps
            .get(usize::from(x.1) + 1)
            .map_or(256, |&b| u16::from(b));
        set.insert_range(u16::from(reps[usize::from(x.0)]), end);
    };
    let mut byte_sets: Vec<BitSet256> = Vec::new();
    let mut set_ids: HashMap<BitSet256, u32> =
        HashMap::with_capacity_and_hasher(64, Default::default());
    let mut intern = |set: BitSet256| -> u32 {
        let next = byte_sets.len() as u32;
        *set_ids.entry(set).or_insert_with(|| {
            byte_sets.push(set);
            next
        })
    };
    let (mut first_of, mut call_first_of) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for s in 0..n {
        let (mut set, mut calls) = (BitSet256::default(), BitSet256::default());
        for x in expansions.row(s) {
            bytes_of((x.lo, x.hi), &mut calls);
        }
        set.union_with(&calls);
        for x in moves.row(s) {
            bytes_of((x.lo, x.hi), &mut set);
        }
        first_of.push(intern(set));
        call_first_of.push(intern(calls));
    }
    let packed_too_big = || {
        GrammarError::limit_no_pos(format!(
            "needs more than the {max_bytes}-byte automaton limit (its transition tables \
             alone would pass it)"
        ))
    };
    // Cells first (a lookup is two reads); past the bound, the rows whose wide spans make
    // many cells are kept as spans (a binary search), which is what brought grammars with
    // free-form values (Snowplow's, 1.6-2.3 MB as cells) under 1 MiB.
    let pack = |moves: &Rows<u32>, span_rows| {
        Some((
            Packed::pack(moves, stride, NONE, max_bytes / 8, span_rows)?,
            Packed::pack(&expansion_rows, stride, 0, max_bytes / 8, span_rows)?,
        ))
    };
    let (trans, packed_expansions, span_rows) = match pack(&moves, false) {
        Some((t, e)) => (t, e, false),
        None => {
            let (t, e) = pack(&moves, true).ok_or_else(packed_too_big)?;
            (t, e, true)
        }
    };
    let mut g = Grammar {
        step_work: limits.grammar_step_work,
        names: ast.rules.iter().map(|r| r.name.clone()).collect(),
        classes,
        stride,
        moves,
        trans,
        accepting,
        rule_of,
        call_off,
        call_edges,
        expansions: packed_expansions,
        list_ends,
        entries,
        pushes,
        byte_sets,
        first_of,
        call_first_of,
        follow: vec![BitSet256::default(); n_rules],
        call_start,
        entry,
        counters,
        counter_of,
        spliced: splice.map(|s| (remap(block_base as u32), s.prebuilt.runs.clone())),
    };
    if !span_rows && g.memory_usage() > max_bytes {
        (g.trans, g.expansions) = pack(&g.moves, true).ok_or_else(packed_too_big)?;
    }
    let bytes = g.memory_usage();
    if bytes > max_bytes {
        return Err(GrammarError::limit_no_pos(format!(
            "needs more than the {max_bytes}-byte automaton limit (its tables take {bytes} \
             bytes)"
        )));
    }
    // FOLLOW: the bytes that can come right after rule R completes, in any context.
    loop {
        let mut changed = false;
        for x in 0..n {
            let (a, b) = (g.call_off[x] as usize, g.call_off[x + 1] as usize);
            for k in a..b {
                let (callee, ret) = g.call_edges[k];
                let mut add = *g.first(ret);
                if g.accepting[ret as usize] {
                    add.union_with(&g.follow[g.rule_of[x] as usize]);
                }
                let f = &mut g.follow[callee as usize];
                if !f.contains_all(&add) {
                    f.union_with(&add);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    Ok(g)
}

/// A set of NFA states cleared in O(1) by bumping a generation, and the states it was asked
/// to insert (the work of the closures and reachability checks that use it).
struct Seen {
    mark: Vec<u32>,
    generation: u32,
    visits: u64,
}

impl Seen {
    fn next_generation(&mut self, n: usize) {
        if self.mark.len() < n {
            self.mark.resize(n, 0);
        }
        self.generation += 1;
    }

    fn insert(&mut self, s: u32) -> bool {
        self.visits += 1;
        let m = &mut self.mark[s as usize];
        if *m == self.generation {
            false
        } else {
            *m = self.generation;
            true
        }
    }
}

/// The fewest states (before splicing) for which an automaton is minimized. Minimization
/// merges 3-6 % of a schema grammar's states at every size (the corpus's 3,880 grammars:
/// 188,610 of 2.84 M), which matters only where the tables near the automaton bound: two
/// corpus schemas of 3,671 and 7,131 states fit only minimized. Below this it cost more than
/// the states it saved: `poot coverage` of the corpus, four runs each, alternated, compile
/// p50 0.631-0.640 ms minimizing every grammar, 0.567-0.594 from this bound on; the same
/// statuses, p99 and mask p99, automaton p50 69.3 -> 71.4 KiB.
const MINIMIZE_FROM_STATES: usize = 2_000;

/// States are equivalent when they belong to the same rule, agree on accepting and on the
/// rules they call, and their transitions and calls (callee, return state) lead to equivalent
/// states. Returns each state's class, numbered in order of first appearance. Only the
/// first `states` are minimized (no move or call of theirs leads past them); each state after
/// them, a spliced automaton's, already minimal, is a class of its own.
///
/// Partition refinement after Valmari and Lehtinen (2008), which takes partial transition
/// functions as they are: O(m log n) for m transitions and calls. Moore's rounds (every state's
/// row re-keyed until nothing splits) took one round per state of the longest chain: ~6 ms of
/// a 16 ms schema grammar (o21149, 1,154 states over 97 classes).
fn minimize(
    moves: &Rows<u32>,
    accepting: &[bool],
    rule_of: &[u32],
    calls: &[Vec<(u32, u32)>],
    states: usize,
    max_work: usize,
) -> Vec<u32> {
    let all = accepting.len();
    let n = states;
    let unminimized = || (0..all as u32).collect();
    // Reading the table is the first work; past the budget the determinized automaton is kept
    // as it is: every state its own class, the same language with more states (already within
    // the automaton bound).
    let mut work = n.saturating_add(moves.class_moves());
    if work > max_work {
        return unminimized();
    }
    // The first partition: rule, accepting and the rules called.
    let mut key: Vec<u32> = Vec::new();
    let mut ids: HashMap<Vec<u32>, u32> = HashMap::default();
    let first_block: Vec<u32> = (0..n)
        .map(|s| {
            key.clear();
            key.extend([rule_of[s], u32::from(accepting[s])]);
            key.extend(calls[s].iter().map(|&(callee, _)| callee));
            // Most states share a key: a copy for the map only when one is new.
            if let Some(&id) = ids.get(&key) {
                return id;
            }
            let id = ids.len() as u32;
            ids.insert(key.clone(), id);
            id
        })
        .collect();
    let block_count = ids.len();
    // Labels per rule: states of different rules are never merged, so classes that no
    // state of a rule tells apart (every span of the rule covers all or none of them) are
    // one label there. A span over the ~50 classes of a string's characters is then a few
    // transitions instead of one per class (Snowplow sp_371: 22,361 transitions instead of
    // 46,643). A rule's labels start at the classes where some span of the rule starts or
    // ends (`bounds`, a bit per class and one past the last); label `base[r] + k` is rule
    // `r`'s `k`-th. Bits, not a sorted list of (rule, class): the sort was ~15 % of a small
    // grammar's minimization.
    let n_rules = rule_of.iter().map(|&r| r as usize + 1).max().unwrap_or(0);
    let mut bounds = vec![[0u64; 5]; n_rules];
    for (s, &r) in rule_of.iter().enumerate().take(n) {
        let b = &mut bounds[r as usize];
        for x in moves.row(s) {
            for c in [usize::from(x.lo), usize::from(x.hi) + 1] {
                b[c / 64] |= 1 << (c % 64);
            }
        }
    }
    let mut base = Vec::with_capacity(n_rules + 1);
    base.push(0u32);
    for b in &bounds {
        let n: u32 = b.iter().map(|w| w.count_ones()).sum();
        base.push(base.last().expect("starts with 0") + n);
    }
    // Transitions and calls alike: a call of rule `r` is a transition on a label after them.
    let call_label = base[n_rules];
    let (mut tail, mut label, mut head) = (Vec::new(), Vec::new(), Vec::new());
    for (s, calls) in calls.iter().enumerate().take(n) {
        let r = rule_of[s] as usize;
        let b = &bounds[r];
        for x in moves.row(s) {
            let (lo, hi) = (usize::from(x.lo), usize::from(x.hi));
            // The labels of the bits below `lo`, then one per bit in lo..=hi.
            let below: u32 = b[..lo / 64].iter().map(|w| w.count_ones()).sum::<u32>()
                + (b[lo / 64] & ((1u64 << (lo % 64)) - 1)).count_ones();
            let mut l = base[r] + below;
            for c in lo..=hi {
                if b[c / 64] >> (c % 64) & 1 == 1 {
                    tail.push(s as u32);
                    label.push(l);
                    head.push(x.target);
                    l += 1;
                }
            }
        }
        for &(callee, ret) in calls {
            tail.push(s as u32);
            label.push(call_label + callee);
            head.push(ret);
        }
    }
    // Labels numbered densely, so that every first cord is non-empty.
    let labels = label.iter().max().map_or(0, |&l| l as usize + 1);
    let mut label_ids = vec![NONE; labels];
    let mut label_count = 0;
    for l in &mut label {
        let id = &mut label_ids[*l as usize];
        if *id == NONE {
            *id = label_count;
            label_count += 1;
        }
        *l = *id;
    }
    let mut blocks = Refinable::new(&first_block, block_count);
    let mut cords = Refinable::new(&label, label_count as usize);
    // The transitions into each state.
    let mut into = vec![0u32; n + 1];
    for &h in &head {
        into[h as usize + 1] += 1;
    }
    for s in 0..n {
        into[s + 1] += into[s];
    }
    let mut fill = into.clone();
    let mut incoming = vec![0u32; head.len()];
    for (t, &h) in head.iter().enumerate() {
        incoming[fill[h as usize] as usize] = t as u32;
        fill[h as usize] += 1;
    }
    // Cords split by the block of their heads (block 0's are what is left unmarked), blocks by
    // the cords their tails have; a block that splits off is the smaller half, so each
    // transition is marked O(log n) times.
    let (mut b, mut c) = (1, 0);
    loop {
        while b < blocks.len() {
            for &q in blocks.members(b) {
                let ts = &incoming[into[q as usize] as usize..into[q as usize + 1] as usize];
                work = work.saturating_add(ts.len() + 1);
                for &t in ts {
                    cords.mark(t);
                }
            }
            cords.split();
            b += 1;
        }
        if c == cords.len() {
            break;
        }
        for &t in cords.members(c) {
            blocks.mark(tail[t as usize]);
        }
        work = work.saturating_add(cords.members(c).len());
        blocks.split();
        c += 1;
        if work > max_work {
            return unminimized();
        }
    }
    let mut number = vec![NONE; blocks.len()];
    let mut next = 0;
    let mut class: Vec<u32> = (0..n)
        .map(|s| {
            let b = blocks.set_of[s] as usize;
            if number[b] == NONE {
                number[b] = next;
                next += 1;
            }
            number[b]
        })
        .collect();
    class.extend(next..next + (all - n) as u32);
    class
}

/// A partition of `0..n` that splits by marks (Valmari and Lehtinen's refinable partition):
/// each set's elements are contiguous in `elems`, the marked ones first.
struct Refinable {
    elems: Vec<u32>,
    /// Where each element is in `elems`.
    at: Vec<u32>,
    set_of: Vec<u32>,
    first: Vec<u32>,
    end: Vec<u32>,
    /// The end of each set's marked elements.
    marked: Vec<u32>,
    /// The sets with marked elements.
    touched: Vec<u32>,
}

impl Refinable {
    /// Set `k` holds the elements whose `key` is `k`; every key below `keys` occurs.
    fn new(key: &[u32], keys: usize) -> Self {
        let mut first = vec![0u32; keys + 1];
        for &k in key {
            first[k as usize + 1] += 1;
        }
        for k in 0..keys {
            first[k + 1] += first[k];
        }
        let end = first[1..].to_vec();
        first.truncate(keys);
        let mut fill = first.clone();
        let (mut elems, mut at) = (vec![0u32; key.len()], vec![0u32; key.len()]);
        for (e, &k) in key.iter().enumerate() {
            let p = fill[k as usize];
            elems[p as usize] = e as u32;
            at[e] = p;
            fill[k as usize] += 1;
        }
        Refinable {
            elems,
            at,
            set_of: key.to_vec(),
            marked: first.clone(),
            first,
            end,
            touched: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.first.len()
    }

    fn members(&self, s: usize) -> &[u32] {
        &self.elems[self.first[s] as usize..self.end[s] as usize]
    }

    fn mark(&mut self, e: u32) {
        let s = self.set_of[e as usize] as usize;
        let (i, j) = (self.at[e as usize], self.marked[s]);
        if i < j {
            return;
        }
        let other = self.elems[j as usize];
        self.elems.swap(i as usize, j as usize);
        self.at[other as usize] = i;
        self.at[e as usize] = j;
        if j == self.first[s] {
            self.touched.push(s as u32);
        }
        self.marked[s] += 1;
    }

    /// Splits every set with marked elements into its marked and unmarked parts (the smaller
    /// part becomes a new set), and clears the marks.
    fn split(&mut self) {
        while let Some(s) = self.touched.pop() {
            let s = s as usize;
            let (f, m, e) = (self.first[s], self.marked[s], self.end[s]);
            if m == e {
                self.marked[s] = f;
                continue;
            }
            let z = self.first.len() as u32;
            let (zf, ze) = if m - f <= e - m {
                self.first[s] = m;
                (f, m)
            } else {
                self.end[s] = m;
                (m, e)
            };
            self.marked[s] = self.first[s];
            self.first.push(zf);
            self.end.push(ze);
            self.marked.push(zf);
            for p in zf..ze {
                self.set_of[self.elems[p as usize] as usize] = z;
            }
        }
    }
}

/// A repetition allowing more items than this (`max`, or `min` when unbounded) of an item
/// that cannot be empty is a [`Counter`]: expanded, `maxLength: 8192` was 8,193 copies of a
/// string character (nested blocks of 16 in a generated grammar), every count a new stack
/// and a cold mask (~0.1-10 ms each); as a counter the counts past [`COUNTER_HORIZON`] from
/// both ends share one state and its cached masks. At or below it, the expansion's inlined
/// states are the faster ones (no frame per item).
pub(crate) const COUNTER_FROM: u32 = 2 * COUNTER_HORIZON;

/// A rule that [`with_counters`] made for a counted repetition: `item{min,max}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counted {
    item: usize,
    min: u32,
    max: Option<u32>,
}

/// A repetition of at least this many items, and at most [`COUNTER_FROM`], whose item
/// mixes single ASCII bytes with wider alternatives (a JSON string character: non-ASCII
/// characters of 2-4 bytes, escapes of 2-6) keeps the ASCII bytes in its chain and calls a
/// rule for the rest ([`split_wide`]). Inlined, the DFA holds every position times every
/// byte inside a character: `maxLength: 100` was 1,311 states (13 per position, each a full
/// row of the grammar's byte classes, ~0.5 KiB), so one such property took most of
/// [`GRAMMAR_AUTOMATON_BYTES`](crate::limits::GRAMMAR_AUTOMATON_BYTES); split, a position
/// is one state, and a wide character pushes a frame.
const WIDE_SPLIT_FROM: u32 = 8;

/// How deep [`split_wide`] follows rule references into an item (a JSON string character
/// is one reference deep; deeper or recursive items stay whole).
const WIDE_SPLIT_DEPTH: u32 = 4;

/// Expression nodes and class ranges [`split_wide`] may visit and copy for one repetition;
/// past it the item stays whole. A JSON string character takes ~20; three 1,300-way
/// fan-outs of references in 16 KiB of GBNF would take 1,300^3 unbounded.
const WIDE_SPLIT_WORK: usize = 256;

/// The grammar [`with_counters`] rewrote, and what it made of each rule.
struct Rewritten {
    ast: Ast,
    /// Per rule: the counter it is, if it is one.
    counted: Vec<Option<Counted>>,
    /// Per rule: whether it is the wide part of a chain's item ([`WIDE_SPLIT_FROM`]), which
    /// is never inlined.
    framed: Vec<bool>,
}

/// `ast` with every repetition past [`COUNTER_FROM`] of an item that cannot be empty moved
/// into a rule of its own (and its item into another, unless it is a rule reference), one
/// [`Counted`] per such rule, and the wide characters of shorter ones split out
/// ([`WIDE_SPLIT_FROM`]). A nullable item past `max_repetition`
/// ([`Limits::grammar_repetition`]) is refused: a count of empty items is not a count, and
/// expanding it is what the limit bounds.
fn with_counters(ast: Ast, max_repetition: u32) -> Result<Rewritten, GrammarError> {
    let mut nullable = vec![false; ast.rules.len()];
    loop {
        let next: Vec<bool> = ast
            .rules
            .iter()
            .map(|r| expr_nullable(&r.body, &nullable))
            .collect();
        if next == nullable {
            break;
        }
        nullable = next;
    }
    // Rewritten in place (a copy of every rule was ~10 % of a small schema grammar's
    // allocations).
    let n = ast.rules.len();
    let mut out = Rewritten {
        ast,
        counted: vec![None; n],
        framed: vec![false; n],
    };
    let mut wide_rules = HashMap::default();
    for r in 0..n {
        let mut body = std::mem::replace(&mut out.ast.rules[r].body, Expr::Seq(Vec::new()));
        rewrite_counts(
            &mut body,
            r,
            &mut out,
            &mut wide_rules,
            &nullable,
            max_repetition,
        )?;
        out.ast.rules[r].body = body;
    }
    Ok(out)
}

fn rewrite_counts(
    e: &mut Expr,
    owner: usize,
    out: &mut Rewritten,
    wide_rules: &mut HashMap<Expr, usize>,
    nullable: &[bool],
    max_repetition: u32,
) -> Result<(), GrammarError> {
    match e {
        Expr::Seq(v) | Expr::Alt(v) => {
            for x in v {
                rewrite_counts(x, owner, out, wide_rules, nullable, max_repetition)?;
            }
        }
        Expr::Repeat { expr, min, max } => {
            // Before the rewrite below, which adds rules `nullable` does not know.
            let empty_item = expr_nullable(expr, nullable);
            rewrite_counts(expr, owner, out, wide_rules, nullable, max_repetition)?;
            let (min, max) = (*min, *max);
            let most = max.unwrap_or(min);
            if most <= COUNTER_FROM {
                if most >= WIDE_SPLIT_FROM && !empty_item {
                    let (mut ascii, mut wide) = (Vec::new(), Vec::new());
                    let mut work = WIDE_SPLIT_WORK;
                    let split = split_wide(expr, out, 0, &mut work, &mut ascii, &mut wide);
                    if split && !ascii.is_empty() && !wide.is_empty() {
                        let body = match wide.len() {
                            1 => wide.pop().expect("one"),
                            _ => Expr::Alt(wide),
                        };
                        let w = match wide_rules.get(&body) {
                            Some(&w) => w,
                            None => {
                                let name = format!("{}/wide", out.ast.rules[owner].name);
                                let at = out.ast.rules[owner].at;
                                let w = add_rule(out, name, at, body.clone());
                                out.framed[w] = true;
                                wide_rules.insert(body, w);
                                w
                            }
                        };
                        let ascii = Expr::Class {
                            ranges: ascii,
                            negated: false,
                        };
                        **expr = Expr::Alt(vec![ascii, Expr::Ref(w)]);
                    }
                }
                return Ok(());
            }
            let name = out.ast.rules[owner].name.clone();
            let at = out.ast.rules[owner].at;
            if empty_item {
                if most <= max_repetition {
                    return Ok(());
                }
                return Err(GrammarError::limit(
                    at,
                    format!(
                        "rule `{name}`: repetition count {most} is over the limit of \
                         {max_repetition} for an item that can match the empty string"
                    ),
                ));
            }
            let item = match **expr {
                Expr::Ref(x) => x,
                _ => {
                    let body = std::mem::replace(&mut **expr, Expr::Seq(Vec::new()));
                    add_rule(out, format!("{name}/item"), at, body)
                }
            };
            let shown = format!(
                "{name}/{{{min},{}}}",
                max.map_or(String::new(), |m| m.to_string())
            );
            let c = add_rule(out, shown, at, Expr::Ref(item));
            out.counted[c] = Some(Counted { item, min, max });
            *e = Expr::Ref(c);
        }
        _ => {}
    }
    Ok(())
}

fn add_rule(out: &mut Rewritten, name: String, at: usize, body: Expr) -> usize {
    out.ast.rules.push(super::parse::Rule { name, at, body });
    out.counted.push(None);
    out.framed.push(false);
    out.ast.rules.len() - 1
}

/// Splits the language of a repeated item `e` into its one-byte (ASCII) strings, as code
/// point ranges into `ascii`, and the alternatives that hold the rest into `wide`: `e` is
/// `ascii | wide...`. Alternatives are split where they are one character (a class, `.`, a
/// one-byte literal) and followed into rule references up to [`WIDE_SPLIT_DEPTH`] (never
/// into a counter, whose body stands for its count); anything else goes whole into `wide`.
/// False when that took more than `work` ([`WIDE_SPLIT_WORK`]): the item stays whole.
fn split_wide(
    e: &Expr,
    out: &Rewritten,
    depth: u32,
    work: &mut usize,
    ascii: &mut Vec<(u32, u32)>,
    wide: &mut Vec<Expr>,
) -> bool {
    // Charges `n` units, false once the budget is spent.
    fn charge(work: &mut usize, n: usize) -> bool {
        *work = work.saturating_sub(n);
        *work > 0
    }
    // The nodes of an expression copied whole.
    fn copied(e: &Expr, work: &mut usize) -> bool {
        charge(work, 1)
            && match e {
                Expr::Seq(v) | Expr::Alt(v) => v.iter().all(|x| copied(x, work)),
                Expr::Repeat { expr, .. } => copied(expr, work),
                Expr::Class { ranges, .. } => charge(work, ranges.len()),
                _ => true,
            }
    }
    let mut chars = |ranges: Vec<(char, char)>, work: &mut usize| {
        let mut rest = Vec::new();
        for (lo, hi) in ranges {
            let (lo, hi) = (u32::from(lo), u32::from(hi));
            if lo < 0x80 {
                ascii.push((lo, hi.min(0x7F)));
            }
            if hi >= 0x80 {
                rest.push((lo.max(0x80), hi));
            }
        }
        let ok = charge(work, rest.len());
        if !rest.is_empty() {
            wide.push(Expr::Class {
                ranges: rest,
                negated: false,
            });
        }
        ok
    };
    if !charge(work, 1) {
        return false;
    }
    match e {
        Expr::Literal(b) if b.len() == 1 && b[0] < 0x80 => {
            ascii.push((u32::from(b[0]), u32::from(b[0])));
            true
        }
        Expr::Class { ranges, negated } => {
            charge(work, ranges.len()) && chars(char_ranges(ranges, *negated), work)
        }
        Expr::Any => chars(char_ranges(&[(0, 0x10FFFF)], false), work),
        Expr::Alt(v) => v
            .iter()
            .all(|x| split_wide(x, out, depth, work, ascii, wide)),
        Expr::Seq(v) if v.len() == 1 => split_wide(&v[0], out, depth, work, ascii, wide),
        Expr::Ref(r)
            if depth < WIDE_SPLIT_DEPTH && out.counted[*r].is_none() && !out.framed[*r] =>
        {
            split_wide(&out.ast.rules[*r].body, out, depth + 1, work, ascii, wide)
        }
        other => {
            let ok = copied(other, work);
            if ok {
                wide.push(other.clone());
            }
            ok
        }
    }
}

/// Whether `e` matches the empty string, given which rules do.
fn expr_nullable(e: &Expr, nullable: &[bool]) -> bool {
    match e {
        Expr::Literal(b) => b.is_empty(),
        Expr::Class { .. } | Expr::Any => false,
        Expr::Ref(r) => nullable[*r],
        Expr::Seq(v) => v.iter().all(|x| expr_nullable(x, nullable)),
        Expr::Alt(v) => v.iter().any(|x| expr_nullable(x, nullable)),
        Expr::Repeat { expr, min, .. } => *min == 0 || expr_nullable(expr, nullable),
    }
}

/// The phases of `c` numbered from `base`, and each one's successor after an item (the
/// static step, see [`Counter`]; [`NONE`] for the last).
fn counter_phases(c: &Counted, base: u32) -> (Counter, Vec<u32>) {
    let far = COUNTER_HORIZON - 1;
    let mut next_id = base;
    let mut id = || {
        next_id += 1;
        next_id - 1
    };
    let lo_far = if c.min > far { id() } else { NONE };
    let lo: Vec<u32> = (0..c.min.min(far)).map(|_| id()).collect();
    let mid_far = match c.max {
        Some(max) if max - c.min <= far => NONE,
        _ => id(),
    };
    let end: Vec<u32> = match c.max {
        Some(max) => (0..=(max - c.min).min(far)).map(|_| id()).collect(),
        None => Vec::new(),
    };
    let counter = Counter {
        min: c.min,
        max: c.max,
        lo_far,
        lo,
        mid_far,
        end,
    };
    let mut succ = vec![NONE; (next_id - base) as usize];
    let at_min = counter.phase(c.min);
    let mut set = |s: u32, t: u32| succ[(s - base) as usize] = t;
    if lo_far != NONE {
        set(lo_far, counter.lo[far as usize - 1]);
    }
    for (r, &s) in counter.lo.iter().enumerate() {
        set(s, if r == 0 { at_min } else { counter.lo[r - 1] });
    }
    if mid_far != NONE {
        set(mid_far, mid_far);
    }
    for (r, &s) in counter.end.iter().enumerate().skip(1) {
        set(s, counter.end[r - 1]);
    }
    (counter, succ)
}

/// Rules at most this big (NFA states, estimated) are inlined where they are used.
const INLINE_SIZE: usize = 400;

/// An attempt with rules inlined stops when its NFA passes this share of the automaton bound.
const INLINED_NFA_SHARE: usize = 4;

/// The inlining bound when inlining at [`INLINE_SIZE`] passes the automaton limit: a JSON
/// string character with its escapes (~30) stays inlined, a 150-state array item copied 38
/// times into blocks does not (inlined, that compile took 660 ms instead of 11).
const FALLBACK_INLINE_SIZE: usize = 64;

/// Which rules to inline at their call sites: small ones that cannot reach themselves
/// (`ws`, `number`, `ident`, `string`, ...).
///
/// A call pushes a frame, and a frame that completes part way through a token makes the mask
/// depend on the stack below it: the token walk must be redone with the real stack. Inlined,
/// the rule's states are part of the caller's DFA, so after `x = ` the position is a state of
/// `assignment` whose context-independent tokens (all ` word` tokens that start an
/// expression) are computed once, instead of a walk of the ` ` subtree at every such step.
/// Recursive rules keep their frames: that is what the stack is for. With `leaves_only`,
/// only rules that call no rule.
fn inlined_rules(ast: &Ast, max_size: usize, leaves_only: bool) -> Vec<bool> {
    let n = ast.rules.len();
    let mut refs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (r, rule) in ast.rules.iter().enumerate() {
        rule.body.each_ref(&mut |x| refs[r].push(x));
        refs[r].sort_unstable();
        refs[r].dedup();
    }
    let recursive = recursive_rules(&refs);
    // Sizes with inlining, bottom-up over the non-recursive rules (a DAG).
    let mut size: Vec<Option<usize>> = vec![None; n];
    fn expr_size(e: &Expr, size: &[Option<usize>], inline: &dyn Fn(usize) -> bool) -> usize {
        match e {
            Expr::Literal(b) => b.len(),
            Expr::Class { ranges, .. } => 2 + 2 * ranges.len(),
            Expr::Any => 8,
            Expr::Ref(r) if inline(*r) => size[*r].unwrap_or(usize::MAX / 4),
            Expr::Ref(_) => 1,
            Expr::Seq(v) | Expr::Alt(v) => v
                .iter()
                .map(|x| expr_size(x, size, inline))
                .fold(1usize, |a, b| a.saturating_add(b)),
            Expr::Repeat { expr, min, max } => {
                let copies = max.unwrap_or(*min).max(*min).max(1) as usize;
                expr_size(expr, size, inline)
                    .saturating_mul(copies)
                    .saturating_add(1)
            }
        }
    }
    fn visit(
        r: usize,
        ast: &Ast,
        refs: &[Vec<usize>],
        recursive: &[bool],
        size: &mut Vec<Option<usize>>,
        max_size: usize,
    ) {
        if size[r].is_some() || recursive[r] {
            return;
        }
        for &x in &refs[r] {
            visit(x, ast, refs, recursive, size, max_size);
        }
        let inline = |x: usize| !recursive[x] && size[x].is_some_and(|s| s <= max_size);
        size[r] = Some(expr_size(&ast.rules[r].body, size, &inline));
    }
    for r in 0..n {
        visit(r, ast, &refs, &recursive, &mut size, max_size);
    }
    (0..n)
        .map(|r| {
            r != ast.root
                && !recursive[r]
                && size[r].is_some_and(|s| s <= max_size)
                && (!leaves_only || refs[r].is_empty())
        })
        .collect()
}

/// Per rule, whether it can reach itself by `refs` (each rule's references, sorted): its
/// strongly connected component has another rule, or it refers to itself. Tarjan's
/// algorithm, iterative: one walk in all, where a search from each rule was quadratic in
/// the rules (a fresh vector per rule besides).
fn recursive_rules(refs: &[Vec<usize>]) -> Vec<bool> {
    const UNSEEN: usize = usize::MAX;
    let n = refs.len();
    let (mut index, mut low) = (vec![UNSEEN; n], vec![0; n]);
    let mut on_stack = vec![false; n];
    let mut recursive = vec![false; n];
    let (mut stack, mut work): (Vec<usize>, Vec<(usize, usize)>) = (Vec::new(), Vec::new());
    let mut next = 0;
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        work.push((root, 0));
        while let Some(&(r, i)) = work.last() {
            if index[r] == UNSEEN {
                (index[r], low[r]) = (next, next);
                next += 1;
                stack.push(r);
                on_stack[r] = true;
            }
            if let Some(&x) = refs[r].get(i) {
                work.last_mut().expect("not empty").1 += 1;
                if index[x] == UNSEEN {
                    work.push((x, 0));
                } else if on_stack[x] {
                    low[r] = low[r].min(index[x]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[r]);
            }
            if low[r] == index[r] {
                let at = stack
                    .iter()
                    .rposition(|&x| x == r)
                    .expect("r is on the stack");
                let alone = stack.len() - at == 1;
                for x in stack.drain(at..) {
                    on_stack[x] = false;
                    recursive[x] = !alone || refs[x].binary_search(&x).is_ok();
                }
            }
        }
    }
    recursive
}

/// Whether `to` is reachable from `from` by ε-edges and calls of nullable rules.
/// `seen` is scratch (a fresh vector per call was a memset of the whole NFA for every rule
/// in every round of the nullable fixpoint: ~0.2 s for a chain of 900 rules).
fn eps_reaches(nfa: &Edges, from: u32, to: u32, nullable: &[bool], seen: &mut Seen) -> bool {
    seen.next_generation(nfa.states);
    let mut stack = vec![from];
    while let Some(s) = stack.pop() {
        if s == to {
            return true;
        }
        if !seen.insert(s) {
            continue;
        }
        stack.extend_from_slice(nfa.eps.of(s));
        for &(callee, t) in nfa.calls.of(s) {
            if nullable[callee as usize] {
                stack.push(t);
            }
        }
    }
    false
}

/// The ε-closure of the states on `stack` (ε-edges and bypasses of nullable calls), sorted,
/// into `out`; `stack` is left empty.
fn closure(
    nfa: &Edges,
    stack: &mut Vec<u32>,
    out: &mut Vec<u32>,
    nullable: &[bool],
    seen: &mut Seen,
) {
    seen.next_generation(nfa.states);
    out.clear();
    while let Some(s) = stack.pop() {
        if !seen.insert(s) {
            continue;
        }
        out.push(s);
        stack.extend_from_slice(nfa.eps.of(s));
        for &(callee, t) in nfa.calls.of(s) {
            if nullable[callee as usize] {
                stack.push(t);
            }
        }
    }
    out.sort_unstable();
}

fn check_left_recursion(
    ast: &Ast,
    call_start: &[u32],
    calls: &[Vec<(u32, u32)>],
) -> Result<(), GrammarError> {
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let n = call_start.len();
    let mut mark = vec![0u8; n];
    let mut path: Vec<usize> = Vec::new();
    fn visit(
        r: usize,
        call_start: &[u32],
        calls: &[Vec<(u32, u32)>],
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        mark[r] = 1;
        path.push(r);
        for &(callee, _) in &calls[call_start[r] as usize] {
            let c = callee as usize;
            if mark[c] == 1 {
                let from = path.iter().position(|&x| x == c).expect("on the path");
                let mut cycle = path[from..].to_vec();
                cycle.push(c);
                return Some(cycle);
            }
            if mark[c] == 0 {
                if let Some(cycle) = visit(c, call_start, calls, mark, path) {
                    return Some(cycle);
                }
            }
        }
        path.pop();
        mark[r] = 2;
        None
    }
    for r in 0..n {
        if mark[r] == 0 {
            if let Some(cycle) = visit(r, call_start, calls, &mut mark, &mut path) {
                let names: Vec<&str> = cycle.iter().map(|&c| ast.rules[c].name.as_str()).collect();
                return Err(GrammarError::at(
                    ast.rules[cycle[0]].at,
                    format!(
                        "rule `{}` is left-recursive ({}): it can call itself before reading \
                         any character, which a pushdown parser cannot do; rewrite it with \
                         repetition, e.g. `expr ::= term (\"+\" term)*`",
                        names[0],
                        names.join(" -> ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What [`build_expansions`] makes: per state and class span, a range of `entries` = (top
/// state, pushes start, pushes length) into `pushes`.
struct Expansions {
    rows: Rows<(u32, u32)>,
    entries: Vec<(u32, u32, u32)>,
    pushes: Vec<u32>,
}

/// Expansions known before [`build_expansions`] runs: a spliced prebuilt's, for its states
/// from `first` on (`rows` by state), whose spans' ranges are into `entries` and those
/// entries' into `pushes`.
struct ExpansionSeed {
    first: usize,
    rows: Rows<(u32, u32)>,
    entries: Vec<(u32, u32, u32)>,
    pushes: Vec<u32>,
}

/// For every state with calls and every byte class, the (pushed return states, new top state)
/// pairs that byte leads to through calls, by class span: classes on which every callee
/// moves alike share one list (a string's character range is one list, not dozens). Calls
/// before the first byte form a DAG (no left recursion), so a depth-first pass over the call
/// starts terminates, each callee's spans made before its callers read them. Past
/// `max_bytes` (counted from `used`; `bytes` is both), the state being expanded is the
/// error. The `seed`'s states are taken as they are.
fn build_expansions(
    seed: Option<ExpansionSeed>,
    moves: &Rows<u32>,
    transparent: Vec<bool>,
    call_off: &[u32],
    call_edges: &[(u32, u32)],
    call_start: &[u32],
    (used, max_bytes): (usize, usize),
) -> Result<Expansions, usize> {
    struct Builder<'a> {
        moves: &'a Rows<u32>,
        call_off: &'a [u32],
        call_edges: &'a [(u32, u32)],
        call_start: &'a [u32],
        /// Per state: accepting, with no move, no call and no count ([`Builder::add`]).
        transparent: Vec<bool>,
        /// Per state, its spans in `spans` once made, else `(NONE, NONE)`.
        at: Vec<(u32, u32)>,
        spans: Vec<Span<(u32, u32)>>,
        entries: Vec<(u32, u32, u32)>,
        pushes: Vec<u32>,
        /// Each list of entries made so far, by the hash of its content
        /// ([`Builder::list_hash`]); its words are counted in `used` as if they were kept
        /// as keys.
        lists: HashMap<u64, Vec<(u32, u32)>>,
        used: usize,
        max_bytes: usize,
    }
    impl Builder<'_> {
        fn spans_of(&self, s: usize) -> &[Span<(u32, u32)>] {
            match self.at[s] {
                (NONE, _) => &[],
                (a, z) => &self.spans[a as usize..z as usize],
            }
        }

        /// Adds `(top, [ret] ++ pushes[inner])` to the list that starts at entry `from`,
        /// unless it is there already (two callees may return to the same state).
        ///
        /// The callee's own return state (the first of `inner`) is left out when it is
        /// transparent: accepting, with no move, no call and no count, its frame would only
        /// pop to the one below. A chain of optional properties (`tail_k ::= ("," item_k)?
        /// tail_{k-1}`) otherwise pushed one such frame per property skipped: pushes
        /// quadratic in the properties, 6.8 MB of a 150-property schema's 7.9 MB.
        fn add(&mut self, from: usize, ret: u32, inner: (u32, u32), top: u32) -> Result<(), ()> {
            let (mut p, mut len) = (inner.0 as usize, inner.1 as usize);
            if len > 0 && self.transparent[self.pushes[p] as usize] {
                (p, len) = (p + 1, len - 1);
            }
            let pushes = &self.pushes;
            let duplicate = self.entries[from..].iter().any(|&(t, q, l)| {
                let q = q as usize;
                t == top
                    && l as usize == len + 1
                    && pushes[q] == ret
                    && pushes[q + 1..q + 1 + len] == pushes[p..p + len]
            });
            if duplicate {
                return Ok(());
            }
            self.used += 12 + (len + 1) * 4;
            if self.used > self.max_bytes {
                return Err(());
            }
            let at = self.pushes.len() as u32;
            self.pushes.push(ret);
            self.pushes.extend_from_within(p..p + len);
            self.entries.push((top, at, len as u32 + 1));
            Ok(())
        }

        /// Whether entries `a..b` and `c..d` are the same list.
        fn same(&self, (a, b): (u32, u32), (c, d): (u32, u32)) -> bool {
            b - a == d - c
                && (0..b - a).all(|i| {
                    let (t1, p1, l1) = self.entries[(a + i) as usize];
                    let (t2, p2, l2) = self.entries[(c + i) as usize];
                    t1 == t2
                        && l1 == l2
                        && self.pushes[p1 as usize..(p1 + l1) as usize]
                            == self.pushes[p2 as usize..(p2 + l2) as usize]
                })
        }

        /// The hash of entries `a..b`'s content (each entry's top state, push count and
        /// pushes) and its length in words, read in place: a key built per list was 2-8 %
        /// of the largest grammars' compile.
        fn list_hash(&self, (a, b): (u32, u32)) -> (u64, usize) {
            use std::hash::Hasher;
            let mut h = rustc_hash::FxHasher::default();
            let mut words = 0;
            for &(top, p, len) in &self.entries[a as usize..b as usize] {
                h.write_u32(top);
                h.write_u32(len);
                for &x in &self.pushes[p as usize..(p + len) as usize] {
                    h.write_u32(x);
                }
                words += 2 + len as usize;
            }
            (h.finish(), words)
        }

        fn expand(&mut self, s: usize) -> Result<(), usize> {
            if self.at[s].0 != NONE {
                return Ok(());
            }
            let (a, b) = (self.call_off[s] as usize, self.call_off[s + 1] as usize);
            let mut points: Vec<u16> = Vec::new();
            for k in a..b {
                let cs = self.call_start[self.call_edges[k].0 as usize] as usize;
                if self.call_off[cs] < self.call_off[cs + 1] {
                    self.expand(cs)?;
                }
                for x in self.moves.row(cs) {
                    points.extend([u16::from(x.lo), u16::from(x.hi) + 1]);
                }
                for x in self.spans_of(cs) {
                    points.extend([u16::from(x.lo), u16::from(x.hi) + 1]);
                }
            }
            points.sort_unstable();
            points.dedup();
            let mut mine: Vec<Span<(u32, u32)>> = Vec::new();
            for w in points.windows(2) {
                let (p, q) = (w[0], w[1]);
                let (from, pushes_from) = (self.entries.len(), self.pushes.len());
                let used_before = self.used;
                for k in a..b {
                    let (callee, ret) = self.call_edges[k];
                    let cs = self.call_start[callee as usize] as usize;
                    if let Some(direct) = covering(self.moves.row(cs), p) {
                        self.add(from, ret, (0, 0), direct).map_err(|()| s)?;
                    }
                    if let Some((ia, iz)) = covering(self.spans_of(cs), p) {
                        for i in ia..iz {
                            let (top, pp, len) = self.entries[i as usize];
                            self.add(from, ret, (pp, len), top).map_err(|()| s)?;
                        }
                    }
                }
                let mut range = (from as u32, self.entries.len() as u32);
                if range.0 == range.1 {
                    continue;
                }
                if let Some(prev) = mine.last_mut() {
                    if u16::from(prev.hi) + 1 == p && self.same(prev.target, range) {
                        prev.hi = (q - 1) as u8;
                        self.entries.truncate(from);
                        self.pushes.truncate(pushes_from);
                        self.used = used_before;
                        continue;
                    }
                }
                // A list made before (another state calling the same rules with the same
                // returns) is read where it is: the lists of the corpus' largest grammars are
                // ~40 % distinct (Snowplow sp_137: 7,599 lists, 4,767 distinct; 29,330
                // entries, 16,211 of them in distinct lists). Not one this row already reads:
                // a value over several spans would become the row's default when packed, and
                // the classes left out of it (no expansion) cells that pack badly (sp_137's
                // expansions: 0.66 MB instead of 0.33).
                let (hash, words) = self.list_hash(range);
                let made = self
                    .lists
                    .get(&hash)
                    .and_then(|made| made.iter().copied().find(|&known| self.same(known, range)));
                match made {
                    Some(known) if mine.iter().all(|x| x.target != known) => {
                        self.entries.truncate(from);
                        self.pushes.truncate(pushes_from);
                        self.used = used_before;
                        range = known;
                    }
                    Some(_) => {}
                    None => {
                        self.used += words * 4;
                        if self.used > self.max_bytes {
                            return Err(s);
                        }
                        self.lists.entry(hash).or_default().push(range);
                    }
                }
                self.used += 12;
                mine.push(Span {
                    lo: p as u8,
                    hi: (q - 1) as u8,
                    target: range,
                });
            }
            if self.used > self.max_bytes {
                return Err(s);
            }
            let start = self.spans.len() as u32;
            self.spans.extend_from_slice(&mine);
            self.at[s] = (start, self.spans.len() as u32);
            Ok(())
        }
    }
    let n = moves.len();
    let mut b = Builder {
        moves,
        call_off,
        call_edges,
        call_start,
        transparent,
        at: vec![(NONE, NONE); n],
        spans: Vec::new(),
        entries: Vec::new(),
        pushes: Vec::new(),
        lists: HashMap::with_capacity_and_hasher(64, Default::default()),
        used,
        max_bytes,
    };
    if let Some(seed) = seed {
        // The seed's rows are the first spans: their offsets stand.
        for (t, w) in seed.rows.off.windows(2).enumerate() {
            b.at[seed.first + t] = (w[0], w[1]);
        }
        b.spans = seed.rows.spans;
        b.used += seed.entries.len() * 12 + seed.pushes.len() * 4;
        if b.used > b.max_bytes {
            return Err(seed.first);
        }
        b.entries = seed.entries;
        b.pushes = seed.pushes;
    }
    for s in 0..n {
        if call_off[s] < call_off[s + 1] {
            b.expand(s)?;
        }
    }
    let mut rows = Rows::new();
    for s in 0..n {
        for &x in b.spans_of(s) {
            rows.spans.push(x);
        }
        rows.end_row();
    }
    Ok(Expansions {
        rows,
        entries: b.entries,
        pushes: b.pushes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A class's character ranges against its definition, code point by code point, for
    /// ranges in any order, overlapping, across the surrogates and up to U+10FFFF (the parser
    /// refuses more), negated or not: the sorted fast path and the merging one agree with
    /// membership.
    #[test]
    fn class_ranges_are_the_class_sorted_without_surrogates() {
        let mut rng = crate::test_rng::XorShift::new(0x51f1_5eed_c1a5_05e5_u64);
        let points: Vec<u32> = (0..0x200)
            .chain(0xD7F0..0xE010)
            .chain(0x10FFC0..0x110000)
            .collect();
        for round in 0..3000 {
            let n = rng.below(5) as usize;
            let anchors = [0u32, 0x40, 0x100, 0xD7FA, 0xDFFF, 0x10FFC8];
            let ranges: Vec<(u32, u32)> = (0..n)
                .map(|_| {
                    let lo = anchors[rng.below(6) as usize] + rng.below(12) as u32;
                    (lo, lo + rng.below(40) as u32)
                })
                .collect();
            let ranges = if round % 2 == 0 {
                // Sorted and apart: the fast path.
                let mut r = ranges;
                r.sort_unstable();
                r.dedup_by(|b, a| b.0 <= a.1.saturating_add(1));
                r
            } else {
                ranges
            };
            let negated = rng.below(2) == 1;
            let got = char_ranges(&ranges, negated);
            assert!(
                got.windows(2).all(|w| (w[0].1 as u32) + 1 < w[1].0 as u32
                    || (w[0].1 as u32 == 0xD7FF && w[1].0 as u32 == 0xE000)),
                "{ranges:?}: {got:?}"
            );
            for &p in &points {
                let want = char::from_u32(p).is_some()
                    && ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi) != negated;
                let have = got.iter().any(|&(lo, hi)| lo as u32 <= p && p <= hi as u32);
                assert_eq!(have, want, "{ranges:?} negated {negated}: U+{p:04X}");
            }
        }
    }

    /// Dense rows (`NONE` where no move) as spans.
    fn rows_of(trans: &[u32], stride: usize) -> Rows<u32> {
        let mut rows = Rows::new();
        for row in trans.chunks(stride) {
            for (c, &t) in row.iter().enumerate() {
                if t != NONE {
                    rows.push(c as u8, c as u8, t);
                }
            }
            rows.end_row();
        }
        rows
    }

    /// Moore's refinement, the definition spelled out: re-key every state by its class and its
    /// successors' classes until the number of classes stops growing.
    fn moore(
        trans: &[u32],
        accepting: &[bool],
        rule_of: &[u32],
        calls: &[Vec<(u32, u32)>],
        stride: usize,
    ) -> Vec<u32> {
        let n = accepting.len();
        let number = |keys: Vec<Vec<u32>>| -> Vec<u32> {
            let mut ids: HashMap<Vec<u32>, u32> = HashMap::default();
            keys.into_iter()
                .map(|k| {
                    let next = ids.len() as u32;
                    *ids.entry(k).or_insert(next)
                })
                .collect()
        };
        let mut class = number(
            (0..n)
                .map(|s| {
                    let mut k = vec![rule_of[s], u32::from(accepting[s])];
                    k.extend(calls[s].iter().map(|&(callee, _)| callee));
                    k
                })
                .collect(),
        );
        loop {
            let count = class.iter().max().map_or(0, |&c| c + 1);
            let next = number(
                (0..n)
                    .map(|s| {
                        let mut k = vec![class[s]];
                        k.extend(trans[s * stride..(s + 1) * stride].iter().map(|&t| {
                            if t == NONE {
                                NONE
                            } else {
                                class[t as usize]
                            }
                        }));
                        k.extend(calls[s].iter().flat_map(|&(r, t)| [r, class[t as usize]]));
                        k
                    })
                    .collect(),
            );
            if next.iter().max().map_or(0, |&c| c + 1) == count {
                return next;
            }
            class = next;
        }
    }

    #[test]
    fn minimization_agrees_with_moores_refinement_on_random_tables() {
        let mut rng = crate::test_rng::XorShift::new(0x9e37_79b9_7f4a_7c15u64);
        let mut rand = move |m: u64| rng.below(m);
        let mut merged = 0;
        for round in 0..2_000 {
            let n = 1 + rand(40) as usize;
            let stride = 1 + rand(8) as usize;
            let rules = 1 + rand(3) as u32;
            // Sparse rows (partial functions) and a few calls, as subset construction leaves;
            // neighbouring classes often go to the same state (spans over several classes).
            let mut trans: Vec<u32> = Vec::with_capacity(n * stride);
            for i in 0..n * stride {
                let t = if i % stride > 0 && rand(2) == 0 {
                    trans[i - 1]
                } else if rand(3) == 0 {
                    rand(n as u64) as u32
                } else {
                    NONE
                };
                trans.push(t);
            }
            let accepting: Vec<bool> = (0..n).map(|_| rand(3) == 0).collect();
            let rule_of: Vec<u32> = (0..n).map(|_| rand(u64::from(rules)) as u32).collect();
            let mut calls: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
            for row in &mut calls {
                for r in 0..rules {
                    if rand(4) == 0 {
                        row.push((r, rand(n as u64) as u32));
                    }
                }
            }
            let fast = minimize(
                &rows_of(&trans, stride),
                &accepting,
                &rule_of,
                &calls,
                n,
                usize::MAX,
            );
            let slow = moore(&trans, &accepting, &rule_of, &calls, stride);
            assert_eq!(fast, slow, "round {round}: n {n}, stride {stride}");
            merged += usize::from(fast.iter().max().map_or(0, |&c| c as usize + 1) < n);
        }
        // The tables must exercise merging, not only all-distinct partitions.
        assert!(
            merged > 500,
            "only {merged} of 2,000 tables had equivalent states"
        );
    }

    #[test]
    fn a_rule_inlined_everywhere_adds_no_states_of_its_own() {
        // `key` is copied into both uses and never called: its own automaton is not built,
        // so the grammar is as big as the one written out by hand, but for the one dead
        // state that stands for the rule (built, `key` added its own 3).
        let by_rule = crate::grammar::Grammar::new(
            "root ::= key \":\" key\nkey ::= [a-z] ([a-z0-9_] | \"\\\\\" [nt])*",
        )
        .unwrap();
        let by_hand = crate::grammar::Grammar::new(
            "root ::= [a-z] ([a-z0-9_] | \"\\\\\" [nt])* \":\" [a-z] ([a-z0-9_] | \"\\\\\" [nt])*",
        )
        .unwrap();
        assert_eq!(by_rule.state_count(), by_hand.state_count() + 1);
        for (text, ok) in [
            ("a:b", true),
            ("ab_9:x\\t", true),
            ("a\\n1:z", true),
            ("a:", false),
            ("9a:b", false),
            ("a\\x:b", false),
        ] {
            assert_eq!(by_rule.matches(text.as_bytes()), ok, "{text}");
            assert_eq!(by_hand.matches(text.as_bytes()), ok, "{text}");
        }
    }

    /// The NFA states and bytes charged of `text` with every rule but `root` inlined, and
    /// the bytes [`Nfa::cost`] gave for it.
    fn inlined_nfa(text: &str) -> (usize, usize, usize) {
        let ast = super::super::parse::parse(text, &Limits::DEFAULT).unwrap();
        let inline: Vec<bool> = (0..ast.rules.len()).map(|r| r != ast.root).collect();
        let mut nfa = Nfa {
            states: 0,
            eps: Vec::new(),
            bytes: Vec::new(),
            calls: Vec::new(),
            bytes_used: 0,
            rules: &ast.rules,
            inline: &inline,
            max_bytes: usize::MAX,
            copies: HashMap::default(),
            tails: HashMap::default(),
            utf8: Cell::new(None),
            sequences: Cell::new(Vec::new()),
        };
        let end = nfa.add().ok().unwrap();
        nfa.build(&ast.rules[ast.root].body, end).ok().unwrap();
        let cost =
            NFA_STATE_BYTES + nfa.cost(&ast.rules[ast.root].body, &mut vec![None; ast.rules.len()]);
        (nfa.states as usize, nfa.bytes_used, cost)
    }

    #[test]
    fn empty_copies_are_charged() {
        // Four empty rules before one byte: four entries in `copies` and no state of their
        // own; each is charged an edge, and the costing counts them too.
        let (states, bytes, cost) =
            inlined_nfa("root ::= a b c d \"x\"\na ::= \"\"\nb ::= \"\"\nc ::= \"\"\nd ::= \"\"");
        assert_eq!(states, 2);
        let expected = 2 * NFA_STATE_BYTES + NFA_EDGE_BYTES + 4 * NFA_EDGE_BYTES;
        assert_eq!((bytes, cost), (expected, expected));
        // One rule used twice with one continuation: one entry, charged once; the costing
        // counts every use.
        let (_, bytes, cost) = inlined_nfa("root ::= (a | a) \"x\"\na ::= \"\"");
        assert_eq!(bytes + NFA_EDGE_BYTES, cost);
    }

    #[test]
    fn iterations_of_an_empty_item_are_charged() {
        // Three required iterations that build nothing: each is charged an edge, as is the
        // bounded count itself, and the costing says the same.
        let (states, bytes, cost) = inlined_nfa("root ::= (\"\" \"\"){3} \"x\"");
        assert_eq!(states, 2);
        let expected = 2 * NFA_STATE_BYTES + NFA_EDGE_BYTES + 4 * NFA_EDGE_BYTES;
        assert_eq!((bytes, cost), (expected, expected));
        // Two such counts nested pass the automaton bound in the costing alone.
        let ast = super::super::parse::parse(
            "root ::= ((\"\" \"\"){1000}){1000} \"x\"",
            &Limits::DEFAULT,
        )
        .unwrap();
        match compile(ast, None, &Limits::DEFAULT, &mut 0) {
            Err(e) => assert!(e.limit, "{}", e.message),
            Ok(_) => panic!("two nested counts of 1,000 empty items compiled"),
        }
    }

    #[test]
    fn copies_with_one_continuation_are_built_once() {
        // An "any other key" trie: each node leaves through a class that leaves out its
        // child's character, then the same string tail. One more node adds its own states
        // (the literal, the alternation, the class's lead bytes) but no copy of `tail`, and
        // no continuation bytes of the class: the same count for every node added.
        let trie = |n: usize| {
            let mut body = String::from("\"\\\"\"");
            for k in 0..n {
                let c = (b'a' + k as u8) as char;
                body = format!("(\"\\\"\" | [^{c}\"\\\\] tail | \"{c}\" {body})");
            }
            format!("root ::= \"\\\"\" {body}\ntail ::= ([^\"\\\\] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\"")
        };
        let sizes: Vec<usize> = (1..5).map(|n| inlined_nfa(&trie(n)).0).collect();
        let tail_alone = inlined_nfa("root ::= ([^\"\\\\] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\"").0;
        let step = sizes[2] - sizes[1];
        assert_eq!(sizes[3] - sizes[2], step, "{sizes:?}");
        assert_eq!(sizes[1] - sizes[0], step, "{sizes:?}");
        // A node's own states: the alternation, its closing quote, its class's entry, its
        // character.
        assert!(
            step <= 4,
            "a node added {step} states (the tail alone takes {tail_alone})"
        );
        let g = crate::grammar::Grammar::new(&trie(3)).unwrap();
        for (text, ok) in [
            ("\"\"", true),
            ("\"c\"", true),
            ("\"cx\"", true),
            ("\"cb\"", true),
            ("\"cbz\\n\"", true),
            ("\"cba\"", true),
            ("\"cbaz\"", false),
            ("\"é\"", true),
            ("\"cbé\"", true),
            ("\"cbaé\"", false),
            ("\"c\\x\"", false),
        ] {
            assert_eq!(g.matches(text.as_bytes()), ok, "{text}");
        }
    }

    #[test]
    fn wide_characters_of_a_chain_are_called_and_keep_the_language() {
        // A JSON-like string of 3-12 characters: ASCII, 2-4 byte characters and escapes.
        let text = r#"root ::= "\"" ch{3,12} "\""
ch ::= [^"\\\x00-\x1F] | "\\" (["\\nt] | "u" [0-9a-f]{4})"#;
        let g = crate::grammar::Grammar::new(text).unwrap();
        let oracle =
            regex::Regex::new(r#"^"(?:[^"\\\x00-\x1F]|\\(?:["\\nt]|u[0-9a-f]{4})){3,12}"$"#)
                .unwrap();
        // Inlined, each of the 13 positions held every byte inside a character or escape:
        // 173 states; split, a position is one state and the wide part one rule: 43.
        assert!(g.state_count() < 60, "{} states", g.state_count());
        let pieces = [
            "a", "\"", "\\n", "\\u00e9", "\\x", "é", "中", "😀", "\u{1}", "\\",
        ];
        let mut rng = crate::test_rng::XorShift::new(0x2545_f491_4f6c_dd1du64);
        let mut checked = 0;
        for _ in 0..20_000 {
            let seed = rng.next();
            let n = (seed % 15) as usize;
            let mut body = String::new();
            let mut x = seed;
            for _ in 0..n {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                body.push_str(pieces[(x >> 33) as usize % pieces.len()]);
            }
            let s = format!("\"{body}\"");
            assert_eq!(g.matches(s.as_bytes()), oracle.is_match(&s), "{s:?}");
            checked += usize::from(oracle.is_match(&s));
        }
        assert!(
            checked > 1_000,
            "only {checked} sentences among the samples"
        );
    }

    /// `recursive_rules` against its definition, a search from each rule, on random
    /// reference graphs: chains, cycles of several rules, self-references, rules without any.
    #[test]
    fn recursive_rules_are_the_rules_that_reach_themselves() {
        let mut rng = crate::test_rng::XorShift::new(0x51_7CC1_B727_220Au64);
        let mut rand = move |n: u64| rng.below(n);
        let mut cycles = 0;
        for _ in 0..2000 {
            let n = 1 + rand(12) as usize;
            let density = 1 + rand(4);
            let refs: Vec<Vec<usize>> = (0..n)
                .map(|_| {
                    let mut r: Vec<usize> = (0..n).filter(|_| rand(density * 4) == 0).collect();
                    r.sort_unstable();
                    r
                })
                .collect();
            let reaches_itself = |r: usize| {
                let mut seen = vec![false; n];
                let mut stack = refs[r].clone();
                while let Some(x) = stack.pop() {
                    if x == r {
                        return true;
                    }
                    if !std::mem::replace(&mut seen[x], true) {
                        stack.extend_from_slice(&refs[x]);
                    }
                }
                false
            };
            let want: Vec<bool> = (0..n).map(reaches_itself).collect();
            assert_eq!(recursive_rules(&refs), want, "{refs:?}");
            cycles += usize::from(want.iter().any(|&w| w));
        }
        assert!(
            cycles > 500 && cycles < 1900,
            "{cycles} graphs with a cycle"
        );
    }

    #[test]
    fn minimization_past_its_budget_keeps_every_state() {
        // A chain of 8 states ending in the only accepting one: 8 classes, found in 8 rounds.
        let trans: Vec<u32> = (1..=8).map(|t| if t < 8 { t } else { NONE }).collect();
        let mut accepting = vec![false; 8];
        accepting[7] = true;
        let calls = vec![Vec::new(); 8];
        let rule_of = vec![0; 8];
        let minimized = minimize(
            &rows_of(&trans, 1),
            &accepting,
            &rule_of,
            &calls,
            8,
            usize::MAX,
        );
        assert_eq!(
            minimized.iter().max(),
            Some(&7),
            "a chain has no equivalent states"
        );
        let kept = minimize(&rows_of(&trans, 1), &accepting, &rule_of, &calls, 8, 4);
        assert_eq!(kept, (0..8).collect::<Vec<u32>>());
    }
}
