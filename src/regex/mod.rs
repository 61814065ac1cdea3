//! `guided_regex`: a pattern compiled to a byte-level, anchored DFA over the whole output.
//!
//! The pattern is parsed by regex-syntax (Unicode on: classes such as `\p{Greek}` or `é`
//! compile to their UTF-8 byte sequences, so the automaton reads bytes and a token that ends in
//! the middle of a character is still judged exactly), compiled to a Thompson NFA by
//! regex-automata and determinized with [`MatchKind::All`] semantics (every alternative stays
//! alive, so `a|ab` accepts both) from an anchored start: by our own subset construction
//! (`determinize.rs`), or by regex-automata's dense determinizer when the pattern has `^`, `$`
//! or `(?-u:\b)`. Each bound of [`crate::limits`] is a hard stop: the pattern length, the NFA's
//! size, the DFA table and the determinizer's bookkeeping, so a pattern like
//! `(a|b)*a(a|b){17}` (2^18 states) is refused in about 2 ms.
//!
//! The DFA is then copied into [`Dfa`], a compact table in which every state can still reach a
//! match: states that cannot are merged into the dead state, so "the automaton is alive" means
//! exactly "the output so far is a prefix of some string in the language".
//!
//! Unsupported syntax is an error, never a silent approximation: look-around and
//! back-references (not regular), and Unicode word boundaries `\b` (use `(?-u:\b)`).

use crate::error::{Error, Result};
mod algebra;
mod determinize;
pub(crate) use algebra::{CharTransitions, Op, Refusal};
#[cfg(test)]
mod oracle_tests;

use crate::limits::{Limits, ERROR_QUOTE_CHARS, MAX_REGEX_NESTING};
use determinize::Stretches;
use regex_automata::dfa::{dense, Automaton};
use regex_automata::nfa::thompson;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use std::collections::HashMap;

/// The dead state: no continuation of the output can match.
pub const DEAD: u32 = 0;

const NO_FORCED: u16 = u16::MAX;

/// A compiled pattern: a byte-level DFA whose live states all reach a match.
///
/// States are `u32` handles (premultiplied table offsets); [`DEAD`] is 0.
///
/// ```
/// let dfa = poot::regex::Dfa::new("[0-9]{4}-[0-9]{2}").unwrap();
/// assert!(dfa.matches(b"2024-05"));
/// assert!(!dfa.matches(b"2024-5"));
/// let s = dfa.walk(dfa.start(), b"2024");
/// assert_eq!(dfa.forced_byte(s), Some(b'-'));
/// ```
#[derive(Clone)]
pub struct Dfa {
    classes: [u8; 256],
    stride: usize,
    /// `trans[state + classes[byte]]` is the next state; row 0 is the dead state.
    trans: Vec<u32>,
    accepting: Vec<bool>,
    forced: Vec<u16>,
    start: u32,
}

impl std::fmt::Debug for Dfa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dfa")
            .field("states", &self.state_count())
            .field("byte_classes", &self.stride)
            .finish()
    }
}

/// Byte classes as our tables use them, from regex-automata's: the class of each byte, and
/// each class's lowest byte (one per class, without the end-of-input class).
pub(super) fn class_table(
    byte_classes: &regex_automata::util::alphabet::ByteClasses,
) -> ([u8; 256], Vec<u8>) {
    let mut classes = [0u8; 256];
    let mut reps = vec![0u8; byte_classes.alphabet_len() - 1];
    for b in (0..=255u8).rev() {
        let c = byte_classes.get(b);
        classes[b as usize] = c;
        reps[c as usize] = b;
    }
    (classes, reps)
}

/// Quotes user input for an error message, shortened to [`ERROR_QUOTE_CHARS`] characters.
pub(crate) fn quote(text: &str) -> String {
    if text.chars().count() <= ERROR_QUOTE_CHARS {
        format!("`{text}`")
    } else {
        let head: String = text.chars().take(ERROR_QUOTE_CHARS).collect();
        format!("`{head}…`")
    }
}

impl Dfa {
    /// Compiles a `guided_regex` pattern; errors name the field `guided_regex`.
    pub fn new(pattern: &str) -> Result<Self> {
        Self::new_with(pattern, &Limits::DEFAULT)
    }

    /// [`Dfa::new`] under a deployment's `limits`: the pattern's length
    /// ([`Limits::regex_bytes`]) and the automaton's ([`Limits::automaton_bytes`],
    /// [`Limits::determinize_bytes`]).
    pub fn new_with(pattern: &str, limits: &Limits) -> Result<Self> {
        let max_bytes = limits.regex_bytes;
        if pattern.len() > max_bytes {
            return Err(Error::limit_exceeded(format!(
                "guided_regex {} is {} bytes, over the {max_bytes}-byte limit",
                quote(pattern),
                pattern.len()
            ))
            .with_param("guided_regex"));
        }
        Self::build(pattern, "guided_regex", &quote(pattern), limits)
    }

    /// Compiles `pattern` for the request field `field`, naming the input as `shown`.
    pub(crate) fn build(pattern: &str, field: &str, shown: &str, limits: &Limits) -> Result<Self> {
        let nfa = Self::nfa(pattern, field, shown, limits.automaton_bytes)?;
        Self::from_nfa(&nfa, field, shown, limits)
    }

    /// Parses `pattern` and builds its Thompson NFA under the nesting and size bounds.
    fn nfa(
        pattern: &str,
        field: &str,
        shown: &str,
        automaton_bytes: usize,
    ) -> Result<thompson::NFA> {
        let err_param = |e: Error| e.with_param(field);
        let too_big = || {
            err_param(Error::limit_exceeded(format!(
                "{field} {shown} needs more than the {automaton_bytes}-byte automaton limit"
            )))
        };
        let hir = regex_syntax::ParserBuilder::new()
            .nest_limit(MAX_REGEX_NESTING)
            .build()
            .parse(pattern)
            .map_err(|e| err_param(syntax_error(field, shown, e)))?;
        thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .nfa_size_limit(Some(automaton_bytes))
                    .which_captures(thompson::WhichCaptures::None)
                    .shrink(false),
            )
            .build_from_hir(&hir)
            .map_err(|e| {
                if e.size_limit().is_some() {
                    too_big().with_source(e)
                } else {
                    err_param(Error::invalid_input(format!(
                        "{field} {shown} cannot be compiled: {e}"
                    )))
                    .with_source(e)
                }
            })
    }

    /// Determinizes a Thompson NFA built elsewhere (the `guided_json` compiler builds its NFA
    /// directly so that shared parts of a schema are not duplicated), under the same bounds.
    ///
    /// NFAs without look-around go through our own subset construction ([`determinize`]);
    /// those with `^`, `$` or ASCII `\b` keep regex-automata's dense determinizer, which
    /// tracks the look-behind context those need.
    pub(crate) fn from_nfa(
        nfa: &thompson::NFA,
        field: &str,
        shown: &str,
        limits: &Limits,
    ) -> Result<Self> {
        let automaton_bytes = limits.automaton_bytes;
        if !nfa.look_set_any().is_empty() {
            return Self::from_nfa_dense(nfa, field, shown, automaton_bytes);
        }
        let err_param = |e: Error| e.with_param(field);
        let table = determinize::determinize(nfa, automaton_bytes, limits.determinize_bytes)
            .map_err(|refusal| {
                let msg = match refusal {
                    determinize::Refusal::Table { .. } => format!(
                        "{field} {shown} needs more than the {automaton_bytes}-byte automaton limit"
                    ),
                    determinize::Refusal::Work { .. } => format!(
                        "{field} {shown} needs more than the {}-byte determinization limit",
                        limits.determinize_bytes
                    ),
                };
                err_param(Error::limit_exceeded(msg).with_source(refusal))
            })?;
        Self::checked(
            Self::compact(table.classes, table.stride, table.trans, table.accepting),
            field,
            shown,
            automaton_bytes,
        )
    }

    /// The previous path, regex-automata's dense determinizer: used for NFAs with look-around
    /// and, in tests, as the oracle for [`determinize`].
    fn from_nfa_dense(
        nfa: &thompson::NFA,
        field: &str,
        shown: &str,
        automaton_bytes: usize,
    ) -> Result<Self> {
        let err_param = |e: Error| e.with_param(field);
        let too_big = || {
            err_param(Error::limit_exceeded(format!(
                "{field} {shown} needs more than the {automaton_bytes}-byte automaton limit"
            )))
        };
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .match_kind(MatchKind::All)
                    .start_kind(regex_automata::dfa::StartKind::Anchored)
                    .accelerate(false)
                    .minimize(false)
                    .specialize_start_states(false)
                    .dfa_size_limit(Some(automaton_bytes))
                    .determinize_size_limit(Some(automaton_bytes)),
            )
            .build_from_nfa(nfa)
            .map_err(|e| {
                if e.is_size_limit_exceeded() {
                    too_big().with_source(e)
                } else {
                    err_param(Error::invalid_input(format!(
                        "{field} {shown} is not supported: {e} (Unicode \\b cannot be compiled to \
                         a DFA; use (?-u:\\b))"
                    )))
                    .with_source(e)
                }
            })?;
        Self::checked(Self::from_dense(&dfa), field, shown, automaton_bytes)
    }

    /// Turns a compaction result into the caller's error, and applies the table bound.
    fn checked(
        compact: std::result::Result<Self, String>,
        field: &str,
        shown: &str,
        automaton_bytes: usize,
    ) -> Result<Self> {
        let compact = compact
            .map_err(|e| Error::invalid_input(format!("{field} {shown} {e}")).with_param(field))?;
        if compact.trans.len() * 4 > automaton_bytes {
            return Err(Error::limit_exceeded(format!(
                "{field} {shown} needs more than the {automaton_bytes}-byte automaton limit"
            ))
            .with_param(field));
        }
        Ok(compact)
    }

    /// Copies the reachable part of a dense DFA into raw stretches for [`Self::compact`].
    fn from_dense(dfa: &dense::DFA<Vec<u32>>) -> std::result::Result<Self, String> {
        let (classes, reps) = class_table(dfa.byte_classes());
        let stride = reps.len();
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .map_err(|e| format!("has no anchored start state: {e}"))?;

        // Breadth-first over reachable states.
        let mut index: HashMap<regex_automata::util::primitives::StateID, u32> = HashMap::new();
        let mut order = vec![start];
        index.insert(start, 0);
        let mut raw = Stretches::default();
        let mut accepting = Vec::new();
        let mut i = 0;
        while i < order.len() {
            let sid = order[i];
            accepting.push(dfa.is_match_state(dfa.next_eoi_state(sid)));
            for (c, &b) in reps.iter().enumerate() {
                let next = dfa.next_state(sid, b);
                if dfa.is_dead_state(next) || dfa.is_quit_state(next) {
                    continue;
                }
                let n = order.len() as u32;
                let j = *index.entry(next).or_insert_with(|| {
                    order.push(next);
                    n
                });
                raw.add(i as u32, c as u8, j);
            }
            i += 1;
        }
        Self::compact(classes, stride, raw, accepting)
    }

    /// Builds the final table from the reachable states (`raw` their transitions between
    /// state indices; state 0 is the start), merging states that cannot reach a match into
    /// the dead state.
    fn compact(
        classes: [u8; 256],
        stride: usize,
        raw: Stretches,
        accepting: Vec<bool>,
    ) -> std::result::Result<Self, String> {
        Self::compact_live(classes, stride, raw, accepting)
            .ok_or_else(|| "matches no string, so no output could satisfy it".into())
    }

    /// [`Dfa::compact`], with `None` for a language without strings (the start cannot reach a
    /// match): a result the automaton algebra reports rather than an error.
    fn compact_live(
        classes: [u8; 256],
        stride: usize,
        raw: Stretches,
        accepting: Vec<bool>,
    ) -> Option<Self> {
        let mut reps = vec![0u8; stride];
        // Bytes in the classes before class `c`, so a stretch's bytes are a difference.
        let mut bytes_before = vec![0usize; stride + 1];
        for b in (0..=255u8).rev() {
            let c = classes[b as usize];
            reps[c as usize] = b;
            bytes_before[c as usize + 1] += 1;
        }
        for c in 0..stride {
            bytes_before[c + 1] += bytes_before[c];
        }
        let stretches = raw.0;

        // Live states reach an accepting state: a backward search from the accepting ones,
        // over predecessor lists in one flat array (counting sort by target).
        let n = accepting.len();
        let mut first = vec![0u32; n + 1];
        for x in &stretches {
            first[x.target as usize + 1] += 1;
        }
        for s in 0..n {
            first[s + 1] += first[s];
        }
        let mut fill = first.clone();
        let mut preds = vec![0u32; first[n] as usize];
        for x in &stretches {
            preds[fill[x.target as usize] as usize] = x.state;
            fill[x.target as usize] += 1;
        }
        let mut live = accepting.clone();
        let mut stack: Vec<usize> = (0..n).filter(|&s| accepting[s]).collect();
        while let Some(s) = stack.pop() {
            for &p in &preds[first[s] as usize..first[s + 1] as usize] {
                if !live[p as usize] {
                    live[p as usize] = true;
                    stack.push(p as usize);
                }
            }
        }
        if !live[0] {
            return None;
        }

        // Renumber: dead is row 0, live states follow in breadth-first order.
        let mut new_id = vec![0u32; n];
        let mut next_row = 1u32;
        for s in 0..n {
            if live[s] {
                new_id[s] = next_row * stride as u32;
                next_row += 1;
            }
        }
        let rows = next_row as usize;
        let mut trans = vec![DEAD; rows * stride];
        let mut acc = vec![false; rows];
        // Per row, the last byte leading to a live state, kept as forced where it is the only
        // one and the row does not accept (counted in `live_bytes`).
        let mut forced = vec![NO_FORCED; rows];
        let mut live_bytes = vec![0usize; rows];
        for s in (0..n).filter(|&s| live[s]) {
            acc[new_id[s] as usize / stride] = accepting[s];
        }
        for x in &stretches {
            let (s, t) = (x.state as usize, x.target as usize);
            if live[s] && live[t] {
                let row = new_id[s] as usize / stride;
                let (lo, hi) = (usize::from(x.lo), usize::from(x.hi));
                trans[row * stride + lo..=row * stride + hi].fill(new_id[t]);
                live_bytes[row] += bytes_before[hi + 1] - bytes_before[lo];
                forced[row] = u16::from(reps[hi]);
            }
        }
        for row in 1..rows {
            if acc[row] || live_bytes[row] != 1 {
                forced[row] = NO_FORCED;
            }
        }
        Some(Dfa {
            classes,
            stride,
            trans,
            accepting: acc,
            forced,
            start: new_id[0],
        })
    }

    /// The state before any output.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// The state after `byte`; [`DEAD`] when no continuation can match.
    #[inline(always)]
    pub fn next(&self, state: u32, byte: u8) -> u32 {
        self.trans[state as usize + usize::from(self.classes[usize::from(byte)])]
    }

    /// The class of byte `b`: bytes of one class lead every state to the same next state.
    #[inline]
    pub(crate) fn byte_class(&self, b: u8) -> u8 {
        self.classes[usize::from(b)]
    }

    /// The state after `bytes` (stays [`DEAD`] once dead).
    pub fn walk(&self, mut state: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            if state == DEAD {
                break;
            }
            state = self.next(state, b);
        }
        state
    }

    /// Whether the output that led to `state` matches the whole pattern.
    pub fn is_accepting(&self, state: u32) -> bool {
        self.accepting[self.index(state)]
    }

    /// The one byte that can follow in `state`, when the output there is not complete and
    /// exactly one byte keeps it alive (jump-forward decoding).
    pub fn forced_byte(&self, state: u32) -> Option<u8> {
        let f = self.forced[self.index(state)];
        (f != NO_FORCED).then_some(f as u8)
    }

    /// Whether `bytes` as a whole matches the pattern.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        let s = self.walk(self.start, bytes);
        s != DEAD && self.is_accepting(s)
    }

    /// Number of states, the dead state included.
    pub fn state_count(&self) -> usize {
        self.accepting.len()
    }

    /// A dense index in `0..state_count()` for `state` (0 is dead).
    #[inline]
    pub fn index(&self, state: u32) -> usize {
        state as usize / self.stride
    }

    /// Number of byte classes (the row length of the table).
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// The class of each byte.
    pub(crate) fn classes(&self) -> &[u8; 256] {
        &self.classes
    }

    /// The state after class `c` from the state of index `i`.
    #[inline]
    pub(crate) fn next_by_class(&self, i: usize, c: usize) -> u32 {
        self.trans[i * self.stride + c]
    }

    /// [`Dfa::is_accepting`] by state index.
    pub(crate) fn is_accepting_index(&self, i: usize) -> bool {
        self.accepting[i]
    }

    /// Heap bytes of the transition table.
    pub fn memory_usage(&self) -> usize {
        self.trans.len() * 4 + self.accepting.len() * 3
    }
}

/// A one-line message for a regex-syntax error: what is wrong and at which byte.
fn syntax_error(field: &str, shown: &str, e: regex_syntax::Error) -> Error {
    let (detail, offset, nest) = match &e {
        regex_syntax::Error::Parse(p) => (
            p.kind().to_string(),
            p.span().start.offset,
            matches!(p.kind(), regex_syntax::ast::ErrorKind::NestLimitExceeded(_)),
        ),
        regex_syntax::Error::Translate(t) => (t.kind().to_string(), t.span().start.offset, false),
        other => (other.to_string(), 0, false),
    };
    let err = if nest {
        Error::limit_exceeded(format!(
            "{field} {shown} nests groups or repetitions deeper than the limit of {MAX_REGEX_NESTING}"
        ))
    } else {
        Error::invalid_input(format!(
            "{field} {shown} is not a supported regex: {detail} (at byte {offset})"
        ))
    };
    err.with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternatives_all_stay_alive() {
        let dfa = Dfa::new("a|ab|abc").unwrap();
        assert!(dfa.matches(b"a") && dfa.matches(b"ab") && dfa.matches(b"abc"));
        assert!(!dfa.matches(b"") && !dfa.matches(b"abcd") && !dfa.matches(b"b"));
    }

    #[test]
    fn states_that_cannot_match_are_dead() {
        // After "a" nothing can match `a$b`, so the whole pattern matches no string.
        let err = Dfa::new("a$b").unwrap_err();
        assert!(err.to_string().contains("matches no string"), "{err}");
        // `x(a$b|c)`: after "xa" the automaton is dead, not merely non-accepting.
        let dfa = Dfa::new("x(a$b|c)").unwrap();
        let s = dfa.walk(dfa.start(), b"x");
        assert_eq!(dfa.next(s, b'a'), DEAD);
        assert_ne!(dfa.next(s, b'c'), DEAD);
    }

    #[test]
    fn unicode_classes_are_utf8_byte_sequences() {
        let dfa = Dfa::new(r"\p{Greek}+").unwrap();
        assert!(dfa.matches("αβγ".as_bytes()));
        assert!(!dfa.matches(b"abc"));
        let alpha = "α".as_bytes();
        let half = dfa.walk(dfa.start(), &alpha[..1]);
        assert_ne!(half, DEAD);
        assert!(!dfa.is_accepting(half));
        assert!(dfa.is_accepting(dfa.walk(half, &alpha[1..])));
        // `é` is two bytes: after the first, the second is forced.
        let dfa = Dfa::new("é").unwrap();
        assert_eq!(dfa.forced_byte(dfa.start()), Some(0xC3));
        assert_eq!(dfa.forced_byte(dfa.walk(dfa.start(), &[0xC3])), Some(0xA9));
    }

    #[test]
    fn anchors_and_ascii_word_boundaries_work() {
        let dfa = Dfa::new(r"^ab$").unwrap();
        assert!(dfa.matches(b"ab") && !dfa.matches(b"abab"));
        let dfa = Dfa::new(r"(?-u:\b)foo(?-u:\b)").unwrap();
        assert!(dfa.matches(b"foo"));
    }
}
