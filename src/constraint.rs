//! Constraints and matchers: from a request's guided field to a per-step token mask.
//!
//! - [`Spec`] is the constraint a request carries, read with the spec's precedence
//!   (`guided_choice` > `guided_regex` > `guided_grammar` > `guided_json` > `response_format`).
//! - [`Constraint`] is compiled once per request: the automaton, the vocabulary and a lazily
//!   filled cache of one token mask per automaton state. It is immutable from the outside and
//!   shared (`Arc`) by all of a request's `n` choices.
//! - [`Matcher`] is the cheap per-sequence state (a stack of automaton states, one per token)
//!   that fills masks, advances by tokens, rolls back, and reports forced bytes.
//!
//! Token `t` is allowed ⇔ the output so far plus `t`'s bytes is a prefix of some string in the
//! language; an end-of-sequence token is allowed ⇔ the output so far is in the language;
//! special tokens never are.
//!
//! A state's mask is computed the first time any matcher reaches it, by walking the
//! vocabulary's byte trie against the automaton (dead subtrees skipped; ~0.5 ms for a
//! permissive state of a 49k vocabulary, far less for a restrictive one), then reused: a warm
//! mask is a copy of `vocab / 32` words (6 KiB at 49k tokens).
//!
//! ```
//! use poot::constraint::{Constraint, Matcher};
//! use poot::vocab::Vocabulary;
//! use std::sync::Arc;
//!
//! let vocab = Arc::new(Vocabulary::new(
//!     vec![b"ye".to_vec(), b"s".to_vec(), b"no".to_vec(), b"x".to_vec(), b"</s>".to_vec()],
//!     vec![4],
//! ).unwrap());
//! let dfa = poot::choice::compile(&["yes".into(), "no".into()]).unwrap();
//! let constraint = Arc::new(Constraint::new(dfa, vocab));
//! let mut m = Matcher::new(constraint);
//! let mut mask = vec![0u32; 1];
//! m.fill_mask(&mut mask).unwrap();
//! assert_eq!(mask[0], 0b00101); // "ye" and "no"
//! m.advance(0).unwrap();
//! assert_eq!(m.forced_bytes(), b"s");
//! m.advance(1).unwrap();
//! assert!(m.is_accepting());
//! m.fill_mask(&mut mask).unwrap();
//! assert_eq!(mask[0], 0b10000); // only the end-of-sequence token
//! assert!(m.advance(3).is_err());
//! m.advance(4).unwrap();
//! assert!(m.is_finished());
//! ```

use crate::choice::{self, json_kind};
use crate::error::{Error, Result};
use crate::limits::{MASK_CACHE_BYTES, MAX_GRAMMAR_BYTES, MAX_SCHEMA_BYTES};
use crate::mask::{check_mask_len, words_for, TokenMask};
use crate::regex::{Dfa, DEAD};
use crate::vocab::{TokenId, Vocabulary};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The constraint a request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// `guided_choice`: exactly one of these strings.
    Choice(Vec<String>),
    /// `guided_regex`: the whole output matches this pattern.
    Regex(String),
}

impl Spec {
    /// Reads the constraint of an OpenAI chat or completions request body, with the spec's
    /// precedence; `None` when the output is unconstrained. A field that is present but
    /// invalid, or too large, is an error naming that field.
    pub fn from_request(body: &Value) -> Result<Option<Spec>> {
        let obj = body.as_object().ok_or_else(|| {
            Error::invalid_input(format!(
                "the request body must be a JSON object, got {}",
                json_kind(body)
            ))
        })?;
        let field = |k: &str| obj.get(k).filter(|v| !v.is_null());
        if let Some(v) = field("guided_choice") {
            return Ok(Some(Spec::Choice(choice::parse(v)?)));
        }
        if let Some(v) = field("guided_regex") {
            let pattern = v.as_str().ok_or_else(|| {
                Error::invalid_input(format!(
                    "guided_regex must be a string, got {}",
                    json_kind(v)
                ))
                .with_param("guided_regex")
            })?;
            return Ok(Some(Spec::Regex(pattern.to_owned())));
        }
        if let Some(v) = field("guided_grammar") {
            let grammar = v.as_str().ok_or_else(|| {
                Error::invalid_input(format!(
                    "guided_grammar must be a string, got {}",
                    json_kind(v)
                ))
                .with_param("guided_grammar")
            })?;
            check_size("guided_grammar", grammar.len(), MAX_GRAMMAR_BYTES)?;
            return Err(not_yet("guided_grammar"));
        }
        if let Some(v) = field("guided_json") {
            check_size("guided_json", schema_len(v), MAX_SCHEMA_BYTES)?;
            return Err(not_yet("guided_json"));
        }
        if let Some(v) = field("response_format") {
            let invalid = |m: String| Error::invalid_input(m).with_param("response_format");
            let ty = v.get("type").and_then(Value::as_str);
            return match ty {
                Some("text") => Ok(None),
                Some("json_object") => Err(not_yet("response_format")),
                Some("json_schema") => {
                    let schema = v.pointer("/json_schema/schema").ok_or_else(|| {
                        invalid("response_format json_schema needs json_schema.schema".into())
                    })?;
                    check_size("response_format", schema_len(schema), MAX_SCHEMA_BYTES)?;
                    Err(not_yet("response_format"))
                }
                _ => Err(invalid(format!(
                    "response_format.type must be \"text\", \"json_object\" or \"json_schema\", got {}",
                    v.get("type").map_or("nothing".into(), |t| t.to_string())
                ))),
            };
        }
        Ok(None)
    }

    /// A short name of the kind: `"choice"` or `"regex"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::Choice(_) => "choice",
            Spec::Regex(_) => "regex",
        }
    }

    /// The request field this constraint came from.
    pub fn param(&self) -> &'static str {
        match self {
            Spec::Choice(_) => "guided_choice",
            Spec::Regex(_) => "guided_regex",
        }
    }

    /// Compiles the automaton (independent of any vocabulary).
    pub fn compile(&self) -> Result<Dfa> {
        match self {
            Spec::Choice(choices) => choice::compile(choices),
            Spec::Regex(pattern) => Dfa::new(pattern),
        }
    }
}

/// The length of a schema's JSON text (a string value is taken as the text itself).
fn schema_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        other => other.to_string().len(),
    }
}

fn check_size(field: &str, len: usize, limit: usize) -> Result<()> {
    if len > limit {
        return Err(Error::limit_exceeded(format!(
            "{field} is {len} bytes, over the {limit}-byte limit"
        ))
        .with_param(field));
    }
    Ok(())
}

fn not_yet(field: &str) -> Error {
    Error::invalid_input(format!(
        "{field} is not supported yet (guided_choice and guided_regex are)"
    ))
    .with_param(field)
}

/// A compiled constraint over one vocabulary; see the module docs.
#[derive(Debug)]
pub struct Constraint {
    dfa: Dfa,
    vocab: Arc<Vocabulary>,
    words: usize,
    /// One mask per automaton state, computed on first use.
    masks: Vec<OnceLock<Box<[u32]>>>,
    cached_bytes: AtomicUsize,
}

impl Constraint {
    /// Binds an automaton to a vocabulary. Cheap: masks are computed lazily.
    pub fn new(dfa: Dfa, vocab: Arc<Vocabulary>) -> Self {
        let masks = (0..dfa.state_count()).map(|_| OnceLock::new()).collect();
        let words = words_for(vocab.len());
        Constraint {
            dfa,
            vocab,
            words,
            masks,
            cached_bytes: AtomicUsize::new(0),
        }
    }

    /// Compiles a request's constraint for a vocabulary.
    pub fn from_spec(spec: &Spec, vocab: Arc<Vocabulary>) -> Result<Self> {
        Ok(Self::new(spec.compile()?, vocab))
    }

    /// The automaton.
    pub fn dfa(&self) -> &Dfa {
        &self.dfa
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// Number of automaton states whose mask is cached so far.
    pub fn cached_states(&self) -> usize {
        self.masks.iter().filter(|m| m.get().is_some()).count()
    }

    /// Fills `out` with the mask of automaton state `state` (not [`DEAD`]).
    fn state_mask(&self, state: u32, out: &mut [u32]) {
        let cell = &self.masks[self.dfa.index(state)];
        if let Some(mask) = cell.get() {
            out.copy_from_slice(mask);
            return;
        }
        let bytes = self.words * 4;
        if self.cached_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes <= MASK_CACHE_BYTES {
            let mask = cell.get_or_init(|| {
                let mut m = vec![0u32; self.words].into_boxed_slice();
                self.compute_mask(state, &mut m);
                m
            });
            out.copy_from_slice(mask);
        } else {
            self.cached_bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.compute_mask(state, out);
        }
    }

    fn compute_mask(&self, state: u32, out: &mut [u32]) {
        out.fill(0);
        let dfa = &self.dfa;
        self.vocab.trie().walk(
            state,
            DEAD,
            |s, b| dfa.next(s, b),
            |t| out[t as usize / 32] |= 1 << (t % 32),
        );
        if dfa.is_accepting(state) {
            for &t in self.vocab.eos() {
                out[t as usize / 32] |= 1 << (t % 32);
            }
        }
    }
}

/// Marks the stack entry after an end-of-sequence token.
const FINISHED: u32 = u32::MAX;

/// One sequence's position in a [`Constraint`]; see the module docs.
#[derive(Debug, Clone)]
pub struct Matcher {
    constraint: Arc<Constraint>,
    /// The automaton state before any token, then after each accepted token.
    states: Vec<u32>,
}

impl Matcher {
    /// A matcher at the start of the output.
    pub fn new(constraint: Arc<Constraint>) -> Self {
        let start = constraint.dfa.start();
        Matcher {
            constraint,
            states: vec![start],
        }
    }

    /// The constraint this matcher follows.
    pub fn constraint(&self) -> &Arc<Constraint> {
        &self.constraint
    }

    fn state(&self) -> u32 {
        *self
            .states
            .last()
            .expect("the stack always holds the start state")
    }

    /// Fills a caller-owned mask (`words_for(vocab.len())` words, bit `i` = token `i`) with the
    /// tokens allowed next. After the end-of-sequence token, no token is allowed.
    pub fn fill_mask(&self, out: &mut [u32]) -> Result<()> {
        check_mask_len(out.len(), self.constraint.vocab.len())?;
        match self.state() {
            FINISHED => out.fill(0),
            state => self.constraint.state_mask(state, out),
        }
        Ok(())
    }

    /// The tokens allowed next, as a new [`TokenMask`].
    pub fn mask(&self) -> TokenMask {
        let n = self.constraint.vocab.len();
        let mut words = vec![0u32; words_for(n)];
        self.fill_mask(&mut words)
            .expect("the mask has the vocabulary's length");
        TokenMask::from_words(words, n).expect("the mask has the vocabulary's length")
    }

    /// Whether `token` is allowed next (the state after it, when it is a text token).
    fn check(&self, token: TokenId) -> Result<Option<u32>> {
        let vocab = &self.constraint.vocab;
        let dfa = &self.constraint.dfa;
        let shown =
            |t: TokenId| format!("token {t} ({:?})", String::from_utf8_lossy(vocab.bytes(t)));
        if token as usize >= vocab.len() {
            return Err(Error::invalid_input(format!(
                "token {token} is outside the vocabulary of {} tokens",
                vocab.len()
            )));
        }
        let state = self.state();
        if state == FINISHED {
            return Err(Error::invalid_input(format!(
                "{} is not allowed: the output already ended with an end-of-sequence token",
                shown(token)
            )));
        }
        if vocab.is_eos(token) {
            if dfa.is_accepting(state) {
                return Ok(None);
            }
            return Err(Error::invalid_input(format!(
                "end-of-sequence {} is not allowed: the output so far does not complete the constraint",
                shown(token)
            )));
        }
        if !vocab.is_text(token) {
            return Err(Error::invalid_input(format!(
                "{} is a special token, never allowed in constrained output",
                shown(token)
            )));
        }
        match dfa.walk(state, vocab.bytes(token)) {
            DEAD => Err(Error::invalid_input(format!(
                "{} is not allowed here: the output would no longer match the constraint",
                shown(token)
            ))),
            next => Ok(Some(next)),
        }
    }

    /// Whether `token` is allowed next (the same answer as its bit in the mask).
    pub fn is_allowed(&self, token: TokenId) -> bool {
        self.check(token).is_ok()
    }

    /// Advances by `token`. A disallowed token is an error and leaves the matcher unchanged.
    pub fn advance(&mut self, token: TokenId) -> Result<()> {
        let next = self.check(token)?;
        self.states.push(next.unwrap_or(FINISHED));
        Ok(())
    }

    /// Whether the output so far is complete, i.e. an end-of-sequence token is allowed now.
    pub fn is_accepting(&self) -> bool {
        match self.state() {
            FINISHED => false,
            state => self.constraint.dfa.is_accepting(state),
        }
    }

    /// Whether an end-of-sequence token has been accepted.
    pub fn is_finished(&self) -> bool {
        self.state() == FINISHED
    }

    /// Number of tokens accepted so far (an end-of-sequence token included).
    pub fn token_count(&self) -> usize {
        self.states.len() - 1
    }

    /// Undoes the last `k` tokens; more than were accepted is an error and changes nothing.
    pub fn rollback(&mut self, k: usize) -> Result<()> {
        if k > self.token_count() {
            return Err(Error::invalid_input(format!(
                "cannot roll back {k} tokens: only {} were accepted",
                self.token_count()
            )));
        }
        self.states.truncate(self.states.len() - k);
        Ok(())
    }

    /// Back to the start of the output.
    pub fn reset(&mut self) {
        self.states.truncate(1);
    }

    /// The bytes that must come next, whatever tokens produce them: the longest run of bytes
    /// each of which is the only one that keeps the output alive, stopping where the output
    /// could end. Empty when the next byte is not forced.
    pub fn forced_bytes(&self) -> Vec<u8> {
        let dfa = &self.constraint.dfa;
        let mut out = Vec::new();
        let mut state = self.state();
        if state == FINISHED {
            return out;
        }
        // Each forced byte moves to a state that can still reach a match, so a forced run
        // cannot loop; the state count bounds it anyway.
        while let Some(b) = dfa.forced_byte(state) {
            if out.len() >= dfa.state_count() {
                break;
            }
            out.push(b);
            state = dfa.next(state, b);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(body: Value) -> Result<Option<Spec>> {
        Spec::from_request(&body)
    }

    #[test]
    fn precedence_follows_the_spec() {
        let both = json!({"guided_regex": "a", "guided_choice": ["b"], "response_format": {"type": "json_object"}});
        assert_eq!(spec(both).unwrap(), Some(Spec::Choice(vec!["b".into()])));
        let regex =
            json!({"guided_regex": "a", "guided_grammar": "root ::= x", "guided_choice": null});
        assert_eq!(spec(regex).unwrap(), Some(Spec::Regex("a".into())));
        assert_eq!(spec(json!({"messages": []})).unwrap(), None);
        assert_eq!(
            spec(json!({"response_format": {"type": "text"}})).unwrap(),
            None
        );
    }

    #[test]
    fn field_errors_name_the_field() {
        let err = spec(json!({"guided_regex": 5})).unwrap_err();
        assert_eq!(
            (err.to_string().as_str(), err.param()),
            (
                "guided_regex must be a string, got a number",
                Some("guided_regex")
            )
        );
        let err = spec(json!({"guided_grammar": "x".repeat(16 * 1024 + 1)})).unwrap_err();
        assert!(err.is_limit_exceeded());
        assert_eq!(
            err.to_string(),
            "guided_grammar is 16385 bytes, over the 16384-byte limit"
        );
        let err = spec(json!({"response_format": {"type": "xml"}})).unwrap_err();
        assert_eq!(err.param(), Some("response_format"));
        let err = spec(json!({"guided_json": {"type": "object"}})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "guided_json is not supported yet (guided_choice and guided_regex are)"
        );
        assert!(spec(json!([])).is_err());
    }

    #[test]
    fn constraint_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Constraint>();
        assert_send_sync::<Matcher>();
    }

    #[test]
    fn rollback_restores_states_and_bounds_k() {
        let vocab = Arc::new(
            Vocabulary::new(vec![b"a".to_vec(), b"b".to_vec(), b"$".to_vec()], vec![2]).unwrap(),
        );
        let c = Arc::new(Constraint::new(Dfa::new("ab?").unwrap(), vocab));
        let mut m = Matcher::new(c);
        let before = m.mask();
        m.advance(0).unwrap();
        assert!(m.is_accepting());
        m.advance(2).unwrap();
        assert!(m.is_finished() && m.mask().count_allowed() == 0);
        assert!(m.rollback(3).is_err());
        assert_eq!(m.token_count(), 2);
        m.rollback(2).unwrap();
        assert_eq!(m.mask(), before);
        let err = m.advance(1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "token 1 (\"b\") is not allowed here: the output would no longer match the constraint"
        );
        assert_eq!(m.token_count(), 0);
    }
}
