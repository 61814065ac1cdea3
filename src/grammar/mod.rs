//! `guided_grammar`: GBNF (llama.cpp's grammar syntax) compiled to a pushdown automaton over
//! bytes, with token masks computed by walking the vocabulary trie.
//!
//! # Supported syntax
//!
//! The whole of llama.cpp's GBNF for text (each item has a test in `tests/grammar_syntax.rs`):
//! - rules `name ::= ...`, names of ASCII letters, digits, `-` and `_`; the entry rule is `root`;
//!   a rule ends at a newline, except inside parentheses and right after `::=` or `|`;
//! - `#` comments to the end of the line, anywhere whitespace may go;
//! - sequences, alternation `|`, groups `( ... )`, empty alternatives;
//! - literals `"..."` with the escapes `\n \r \t \\ \" \[ \] \- \xNN \uNNNN \UNNNNNNNN`
//!   (`\xNN` is the character U+00NN, as in llama.cpp, not a raw byte);
//! - character classes `[a-z0-9_]`, negated `[^"\\]`, with the same escapes; a class matches
//!   one Unicode character, whatever its UTF-8 length;
//! - `.`: any one character (newline included, as in llama.cpp);
//! - rule references, recursive and mutually recursive ones included;
//! - repetition `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`: counts up to `u32::MAX` of an item
//!   that cannot match the empty string (past 128 a counter: a few states and the count in
//!   its stack frame), up to
//!   [`MAX_GRAMMAR_REPETITION`](crate::limits::MAX_GRAMMAR_REPETITION) of one that can.
//!
//! Not supported, each a clear error: left recursion (`expr ::= expr "+" term`; rewrite it with
//! repetition, as llama.cpp also requires), token references `<...>`, and rules that can never
//! complete. Errors name the line and column.
//!
//! # Engine
//!
//! Each rule is a DFA over bytes and calls of other rules (`compile.rs`); a parse is a set of
//! stacks of DFA states (`engine.rs`), shared as persistent linked frames. Small rules that
//! cannot reach themselves (`ws`, `number`, `string`) are inlined into their callers and each
//! rule's DFA is minimized, so frames are pushed only where recursion needs them. Calls of
//! nullable rules are bypassed at compile time and left recursion is refused, so a byte step
//! is finite: precomputed call expansions for the top frame, then pops while the top frame can
//! complete.
//!
//! The token mask of a stack `[.., p, s]` is the union of
//! - `A(s)`: the tokens that the frame of `s` (and rules it calls) can consume without
//!   returning to `p`, which do not depend on anything below and are computed once per DFA
//!   state by one trie walk (the "context-independent tokens" of XGrammar, the "slices" of
//!   llguidance); a state's calls reuse the callee's cached set, so only its own transitions
//!   are walked, and most of a walk (inside an identifier, a string) steps one table lookup
//!   per trie node;
//! - the tokens that complete `s`'s rule part way through: the walk above records the trie
//!   nodes where that can happen, and only their subtrees are walked again with the real stack
//!   (usually a handful of short walks: `"` then `,` in a JSON string);
//! - when `s` can complete before the token, the same for `p`, and so on down.
//!
//! Whole masks are also cached per parse state (a 128-bit content hash of every stack), so a
//! state seen before costs a copy. The first visit of a permissive position (an identifier or
//! a string over most of the vocabulary) pays one walk of most of the trie: ~0.5-2 ms at
//! 49k tokens, several at 262k; every later mask there is microseconds. Every step is bounded by a work budget
//! ([`MAX_GRAMMAR_STEP_WORK`](crate::limits::MAX_GRAMMAR_STEP_WORK)): an ambiguous grammar that
//! would keep exponentially many parses alive ends the request with a limit error instead of
//! running unbounded.

mod compile;
pub(crate) mod engine;
pub(crate) use compile::COUNTER_FROM;
mod parse;
mod print;
mod table;

#[cfg(test)]
pub(crate) use parse::parse;
pub(crate) use parse::{Ast, Expr, Rule};
pub(crate) use print::expr_len;

use crate::error::{Error, Result};

/// No transition / no entry.
pub(crate) const NONE: u32 = u32::MAX;
/// From [`Grammar::fast_next`]: the byte may enter a call, take the slow path.
pub(crate) const SLOW: u32 = u32::MAX - 1;

/// A set of bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct BitSet256(pub [u64; 4]);

impl BitSet256 {
    #[inline]
    pub fn insert(&mut self, b: u8) {
        self.0[usize::from(b >> 6)] |= 1 << (b & 63);
    }

    /// The members, in increasing order.
    pub fn iter(self) -> impl Iterator<Item = u8> {
        (0..4).flat_map(move |w| {
            let mut word = self.0[w];
            std::iter::from_fn(move || {
                (word != 0).then(|| {
                    let b = (w * 64) as u8 + word.trailing_zeros() as u8;
                    word &= word - 1;
                    b
                })
            })
        })
    }

    /// Inserts bytes `lo..hi` (`hi` up to 256), a word at a time.
    pub fn insert_range(&mut self, lo: u16, hi: u16) {
        for (w, word) in self.0.iter_mut().enumerate() {
            let (a, z) = ((w * 64) as u16, (w * 64 + 64) as u16);
            let (from, to) = (lo.max(a), hi.min(z));
            if from < to {
                let width = u32::from(to - from);
                let ones = if width == 64 {
                    u64::MAX
                } else {
                    (1u64 << width) - 1
                };
                *word |= ones << (from - a);
            }
        }
    }

    #[inline]
    pub fn contains(&self, b: u8) -> bool {
        self.0[usize::from(b >> 6)] >> (b & 63) & 1 == 1
    }

    #[inline]
    pub fn union_with(&mut self, o: &BitSet256) {
        for i in 0..4 {
            self.0[i] |= o.0[i];
        }
    }

    pub fn contains_all(&self, o: &BitSet256) -> bool {
        (0..4).all(|i| self.0[i] & o.0[i] == o.0[i])
    }

    /// The only byte in the set, if it has exactly one.
    pub fn only(&self) -> Option<u8> {
        let n: u32 = self.0.iter().map(|w| w.count_ones()).sum();
        if n != 1 {
            return None;
        }
        let i = self.0.iter().position(|&w| w != 0).expect("one bit");
        Some((i * 64 + self.0[i].trailing_zeros() as usize) as u8)
    }
}

/// A grammar error before it is named: where (a byte offset), what, and whether a limit.
#[derive(Debug)]
pub(crate) struct GrammarError {
    at: Option<usize>,
    message: String,
    limit: bool,
}

impl GrammarError {
    pub(crate) fn at(at: usize, message: String) -> Self {
        GrammarError {
            at: Some(at),
            message,
            limit: false,
        }
    }

    pub(crate) fn limit(at: usize, message: String) -> Self {
        GrammarError {
            at: Some(at),
            message,
            limit: true,
        }
    }

    pub(crate) fn limit_no_pos(message: String) -> Self {
        GrammarError {
            at: None,
            message,
            limit: true,
        }
    }

    fn into_error(self, text: &str) -> Error {
        let message = match self.at {
            Some(at) => {
                let (line, col) = line_col(text.as_bytes(), at);
                let line_text = text.lines().nth(line - 1).unwrap_or("");
                format!(
                    "guided_grammar line {line}, column {col}: {} (in {})",
                    self.message,
                    crate::regex::quote(line_text.trim_end())
                )
            }
            None => format!("guided_grammar {}", self.message),
        };
        let e = if self.limit {
            Error::limit_exceeded(message)
        } else {
            Error::invalid_input(message)
        };
        e.with_param("guided_grammar")
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_col(src: &[u8], at: usize) -> (usize, usize) {
    let at = at.min(src.len());
    let before = &src[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, col)
}

/// "line L, column C" for an offset.
fn line_col_text(src: &[u8], at: usize) -> String {
    let (l, c) = line_col(src, at);
    format!("line {l}, column {c}")
}

/// Rules compiled once and spliced into every grammar that has a rule of the same language
/// ([`Ast::prebuilt`]): a schema grammar's free-form JSON value, with its array item and its
/// member, is the same ~60 states in every schema that allows extra keys or leaves a value
/// free, and building them was ~40 % of the states of a median schema grammar.
#[derive(Debug)]
pub(crate) struct Prebuilt {
    /// The rules, `root` being the one spliced in for [`Ast::prebuilt`].
    pub(crate) ast: Ast,
    pub(crate) grammar: Grammar,
    /// Its states' runs ([`engine::grammar_runs`]): they depend on its rules alone (no run
    /// enters a call of a rule that calls others), so a splice takes them as they are.
    pub(crate) runs: std::sync::Arc<[crate::vocab::Run]>,
    /// Its states' expansion lists by class span (ranges of `grammar.entries`): they too
    /// depend on its rules alone, and a splice takes them with its classes made ours, as it
    /// takes the moves. Expanding its calls again was ~10 us of every schema grammar with
    /// a free-form value (~13 of the ~80 us of `{"type": "object"}`).
    pub(crate) expansions: table::Rows<(u32, u32)>,
}

impl Prebuilt {
    /// Compiles `ast` under `limits`. Its rules must not match the empty string (a splice
    /// makes every call of them consume a byte); a counter or an empty root is refused.
    pub(crate) fn new(
        ast: Ast,
        limits: &crate::limits::Limits,
    ) -> std::result::Result<Self, String> {
        let grammar = Grammar::from_rules(ast.clone(), None, limits, &mut 0)?;
        if !grammar.counters.is_empty()
            || grammar.accepting[grammar.entry as usize]
            || grammar.rule_count() != ast.rules.len()
        {
            return Err(
                "a prebuilt grammar has no counter, a root that needs a byte, and no rule \
                 added while compiling"
                    .into(),
            );
        }
        let runs = engine::grammar_runs(&grammar).into();
        let mut expansions = table::Rows::new();
        for t in 0..grammar.state_count() as u32 {
            for c in 0..grammar.stride {
                if let Some(list) = grammar.expansion_range(t, c) {
                    expansions.push(c as u8, c as u8, list);
                }
            }
            expansions.end_row();
        }
        Ok(Prebuilt {
            ast,
            grammar,
            runs,
            expansions,
        })
    }
}

/// A compiled grammar: the pushdown automaton, independent of any vocabulary.
///
/// ```
/// let g = poot::grammar::Grammar::new(r#"
/// root ::= expr
/// expr ::= term (("+" | "-") term)*
/// term ::= [0-9]+ | "(" expr ")"
/// "#).unwrap();
/// assert!(g.matches(b"(1+2)-30"));
/// assert!(!g.matches(b"(1+2"));
/// let err = poot::grammar::Grammar::new("root ::= x").unwrap_err();
/// assert_eq!(err.to_string(), "guided_grammar line 1, column 10: undefined rule `x` (in `root ::= x`)");
/// ```
#[derive(Clone)]
pub struct Grammar {
    names: Vec<String>,
    pub(crate) classes: [u8; 256],
    pub(crate) stride: usize,
    /// Each state's moves within its rule, by class span.
    pub(crate) moves: table::Rows<u32>,
    /// `moves` packed for lookups: the next state within the rule, or [`NONE`].
    pub(crate) trans: table::Packed<u32>,
    pub(crate) accepting: Vec<bool>,
    pub(crate) rule_of: Vec<u32>,
    /// Calls of state `s`: `call_edges[call_off[s]..call_off[s + 1]]`, (rule, return state).
    pub(crate) call_off: Vec<u32>,
    pub(crate) call_edges: Vec<(u32, u32)>,
    /// Per state and byte class, where a list of `entries` starts plus one (0: none), the
    /// list ending at the next entry marked in `list_ends`; an entry is (top state, pushes
    /// start, pushes length) into `pushes`: where the byte leads through calls.
    pub(crate) expansions: table::Packed<u32>,
    pub(crate) list_ends: Vec<u64>,
    pub(crate) entries: Vec<(u32, u32, u32)>,
    pub(crate) pushes: Vec<u32>,
    /// The distinct byte sets of `first_of` and `call_first_of` (a few hundred at most on
    /// the corpus grammars, against thousands of states).
    pub(crate) byte_sets: Vec<BitSet256>,
    /// Per state, in `byte_sets`: the bytes it can consume without returning (directly or
    /// through calls), and those it can consume by entering a call.
    pub(crate) first_of: Vec<u32>,
    pub(crate) call_first_of: Vec<u32>,
    /// Bytes that can follow a completed call of each rule, in any context.
    pub(crate) follow: Vec<BitSet256>,
    /// Work one step (a mask, an advance) may take: the compiling request's
    /// [`Limits::grammar_step_work`](crate::limits::Limits::grammar_step_work).
    pub(crate) step_work: u64,
    /// The start state a call of each rule enters (never accepting).
    pub(crate) call_start: Vec<u32>,
    /// The bottom frame's state: `root`'s start (accepting when `root` matches "").
    pub(crate) entry: u32,
    /// Long counted repetitions kept as counters ([`Counter`]).
    pub(crate) counters: Vec<Counter>,
    /// Per state, the counter whose phase it is, or [`NONE`].
    pub(crate) counter_of: Vec<u32>,
    /// The states of a [`Prebuilt`] grammar spliced in: from this state on, in its order,
    /// with its runs (computed once with it).
    pub(crate) spliced: Option<(u32, std::sync::Arc<[crate::vocab::Run]>)>,
}

/// Items a counter's states tell apart near either end of its range. No Gemma 3 token (at
/// most 48 bytes) sees past it; SmolLM2's 7 tokens of 65-82 bytes are checked with the exact
/// counts where they could ([`engine::Index::fill`]). At 128 the phase tables were large
/// enough that 19 JSONSchemaBench schemas passed the automaton limit again (mask p99 115 us
/// against 64 us).
pub(crate) const COUNTER_HORIZON: u32 = 64;

/// A counted repetition `x{min,max}` past [`COUNTER_FROM`](compile::COUNTER_FROM) items, kept
/// as a count in its frame instead of one DFA state per item.
///
/// Each item is a call of `x`'s rule. The rule has a few states ("phases"), each standing
/// for every count at the same distance from the ends when that distance is past
/// [`COUNTER_HORIZON`] items, and for one count otherwise: `lo[r - 1]` with `r` items still
/// needed (`lo_far` past the horizon), `end[r]` with `r` items still allowed (`mid_far` past
/// it). The tables step a phase statically (`mid_far` to itself, `lo_far` to the horizon's
/// `lo`), which is what a token of at most [`COUNTER_HORIZON`] bytes sees of every count the
/// phase stands for, so masks are computed and cached per phase; a committed step
/// ([`engine`]) carries the exact count and picks the phase from it ([`Counter::phase`]).
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    pub min: u32,
    pub max: Option<u32>,
    pub lo_far: u32,
    pub lo: Vec<u32>,
    pub mid_far: u32,
    pub end: Vec<u32>,
}

impl Counter {
    /// Whether phase `s` may end the repetition.
    pub(crate) fn accepts(&self, s: u32) -> bool {
        s == self.mid_far || self.end.contains(&s)
    }

    /// Every phase state, to renumber them.
    pub(crate) fn states_mut(&mut self) -> impl Iterator<Item = &mut u32> {
        [&mut self.lo_far, &mut self.mid_far]
            .into_iter()
            .chain(self.lo.iter_mut())
            .chain(self.end.iter_mut())
            .filter(|s| **s != NONE)
    }

    /// Whether a token of `len` bytes (so at most `len` items) can tell count `k` from the
    /// other counts of its phase: past [`COUNTER_HORIZON`] items a far-below-`min` phase may
    /// complete too early, and a mid phase within `len` items of `max` may run past it. The
    /// exact phases near each end are exact for any length.
    pub(crate) fn sees_past(&self, k: u32, len: u32) -> bool {
        let far = COUNTER_HORIZON - 1;
        if len <= COUNTER_HORIZON {
            return false;
        }
        let lo_far = k < self.min && self.min - k > far;
        let exact_end = k >= self.min && self.max.is_some_and(|m| m.saturating_sub(k) <= far);
        lo_far || (!exact_end && self.max.is_some_and(|m| m.saturating_sub(k) < len))
    }

    /// The phase state after `k` items.
    pub(crate) fn phase(&self, k: u32) -> u32 {
        let far = COUNTER_HORIZON - 1;
        if k < self.min {
            return match self.min - k {
                r if r > far => self.lo_far,
                r => self.lo[r as usize - 1],
            };
        }
        match self.max {
            None => self.mid_far,
            Some(max) => match max.saturating_sub(k) {
                r if r > far => self.mid_far,
                r => self.end[r as usize],
            },
        }
    }
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar")
            .field("rules", &self.names.len())
            .field("states", &self.state_count())
            .field("byte_classes", &self.stride)
            .finish()
    }
}

impl Grammar {
    /// Parses and compiles GBNF text; errors name the field `guided_grammar` and, for syntax,
    /// the line and column.
    pub fn new(text: &str) -> Result<Self> {
        Self::new_with(text, &crate::limits::Limits::DEFAULT)
    }

    /// [`Grammar::new`] under a deployment's `limits`: the text
    /// ([`Limits::grammar_bytes`](crate::limits::Limits::grammar_bytes)) and the grammar
    /// compiler's bounds (`grammar_*`).
    pub fn new_with(text: &str, limits: &crate::limits::Limits) -> Result<Self> {
        crate::limits::check_size("guided_grammar", text.len(), limits.grammar_bytes)?;
        let ast = parse::parse(text, limits).map_err(|e| e.into_error(text))?;
        compile::compile(ast, None, limits, &mut 0).map_err(|e| e.into_error(text))
    }

    /// Compiles rules this crate built (a JSON Schema's, [`Ast::to_gbnf`] is their text),
    /// whose size the caller has already bounded; the error names the reason when they pass
    /// [`GRAMMAR_AUTOMATON_BYTES`](crate::limits::GRAMMAR_AUTOMATON_BYTES), nest deeper than
    /// [`Limits::grammar_depth`](crate::limits::Limits::grammar_depth) (as parsing their
    /// text would refuse) or fail to compile. `spent`: the determinization work of the
    /// request's earlier attempts, which this one adds to (one budget for every rendering of
    /// one schema). `prebuilt`: the automaton of the rule [`Ast::prebuilt`] names, spliced in
    /// instead of building it.
    pub(crate) fn from_rules(
        ast: Ast,
        prebuilt: Option<&Prebuilt>,
        limits: &crate::limits::Limits,
        spent: &mut u64,
    ) -> std::result::Result<Self, String> {
        if let Some(rule) = ast
            .rules
            .iter()
            .find(|r| !parse::depth_within(&r.body, limits.grammar_depth))
        {
            return Err(format!(
                "nests rule `{}` deeper than the limit of {} levels",
                rule.name, limits.grammar_depth
            ));
        }
        compile::compile(ast, prebuilt, limits, spent).map_err(|e| e.message)
    }

    /// Number of DFA states over all rules.
    pub fn state_count(&self) -> usize {
        self.accepting.len()
    }

    /// Number of rules.
    pub fn rule_count(&self) -> usize {
        self.names.len()
    }

    /// Heap bytes of the automaton's tables.
    pub fn memory_usage(&self) -> usize {
        self.moves.heap_bytes()
            + self.trans.heap_bytes()
            + self.expansions.heap_bytes()
            + self.list_ends.len() * 8
            + self.accepting.len() * (1 + 4 + 4 + 4 + 4 + 4)
            + self.byte_sets.len() * 32
            + self.follow.len() * 32
            + self.call_edges.len() * 8
            + self.entries.len() * 12
            + self.pushes.len() * 4
            + self
                .counters
                .iter()
                .map(|c| (c.lo.len() + c.end.len()) * 4 + 32)
                .sum::<usize>()
    }

    /// Whether `bytes` as a whole is a sentence of the grammar (no work limit applies).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        let mut parse = engine::Parse::new(self);
        let mut work = engine::Work::unlimited();
        matches!(parse.advance(self, bytes, &mut work), Ok(true)) && parse.is_accepting()
    }

    /// The state after byte `b` within `s`'s rule, or [`NONE`].
    #[inline]
    pub(crate) fn next_in_rule(&self, s: u32, b: u8) -> u32 {
        self.trans.get(s, usize::from(self.classes[usize::from(b)]))
    }

    /// The state after a byte of `class` within `s`'s rule, or [`NONE`].
    #[inline]
    pub(crate) fn next_class(&self, s: u32, class: usize) -> u32 {
        self.trans.get(s, class)
    }

    /// [`Self::next_class`], except [`SLOW`] where `byte` (of `class`) can also enter a call:
    /// a trie walk steps a frame with this alone unless the frame below could take the byte.
    #[inline]
    pub(crate) fn fast_next(&self, s: u32, class: usize, byte: u8) -> u32 {
        if self.call_first(s).contains(byte) {
            SLOW
        } else {
            self.trans.get(s, class)
        }
    }

    /// Where a byte of `class` leads from `s` through calls: (top state, pushes start,
    /// pushes length) into `pushes`.
    #[inline]
    pub(crate) fn expansion(&self, s: u32, class: usize) -> &[(u32, u32, u32)] {
        match self.expansion_range(s, class) {
            Some((a, z)) => &self.entries[a as usize..z as usize],
            None => &[],
        }
    }

    /// Where [`Grammar::expansion`]'s list lies in `entries` (`a..z`), if there is one.
    fn expansion_range(&self, s: u32, class: usize) -> Option<(u32, u32)> {
        let a = match self.expansions.get(s, class) {
            0 => return None,
            start => start as usize - 1,
        };
        // The list's last entry: the first marked at or after its start.
        let mut w = a / 64;
        let mut bits = self.list_ends[w] & (u64::MAX << (a % 64));
        while bits == 0 {
            w += 1;
            bits = self.list_ends[w];
        }
        Some((
            a as u32,
            (w * 64 + bits.trailing_zeros() as usize + 1) as u32,
        ))
    }

    /// The calls of state `s`: (rule, return state) pairs.
    #[inline]
    pub(crate) fn calls(&self, s: u32) -> &[(u32, u32)] {
        &self.call_edges[self.call_off[s as usize] as usize..self.call_off[s as usize + 1] as usize]
    }

    /// Bytes `s` can consume without returning (directly or through calls).
    #[inline]
    pub(crate) fn first(&self, s: u32) -> &BitSet256 {
        &self.byte_sets[self.first_of[s as usize] as usize]
    }

    /// Bytes `s` can consume by entering a call.
    #[inline]
    pub(crate) fn call_first(&self, s: u32) -> &BitSet256 {
        &self.byte_sets[self.call_first_of[s as usize] as usize]
    }
}
