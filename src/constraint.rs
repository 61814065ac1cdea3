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
//! Three engines sit behind the same two types: the byte DFA ([`crate::regex`]) for
//! `guided_choice`, `guided_regex` and `guided_json`; the pushdown grammar engine
//! ([`crate::grammar`]) for `guided_grammar`; and the JSON acceptor ([`crate::json_value`]) for
//! `response_format` `json_object`. The two pushdown engines keep their own mask caches and a
//! per-sequence parse that rolls back with the matcher.
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
use crate::closing::{DfaClosing, GrammarClosing};
use crate::error::{Error, Result};
use crate::grammar::{self, Grammar};
use crate::json_schema::{JsonSchema, SchemaOptions};
use crate::json_value;
use crate::limits::{check_size, Limits, MASK_CACHE_BYTES};
use crate::mask::{check_mask_len, or_words, set_bit, words_for, TokenMask};
use crate::regex::{Dfa, DEAD};
use crate::vocab::{Run, RunMemo, TokenId, Trie, Vocabulary};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The constraint a request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// `guided_choice`: exactly one of these strings.
    Choice(Vec<String>),
    /// `guided_regex`: the whole output matches this pattern.
    Regex(String),
    /// `guided_json`, or `response_format` `json_schema`: JSON valid under this schema
    /// ([`crate::json_schema`]); `field` is the request field it came from, `options` how
    /// to read what the schema leaves unsaid (`guided_json_extra_keys`).
    Json {
        schema: Value,
        field: &'static str,
        options: SchemaOptions,
    },
    /// `guided_grammar`: the output is a sentence of this GBNF grammar.
    Grammar(String),
    /// `response_format` `json_object`: the output is one JSON value.
    JsonObject,
}

/// A compiled constraint, before it is bound to a vocabulary.
#[derive(Debug, Clone)]
// Made once per request and consumed by `Constraint::from_compiled`.
#[allow(clippy::large_enum_variant)]
pub enum Compiled {
    /// A byte DFA (choice, regex, JSON Schema).
    Dfa(Dfa),
    /// A GBNF grammar's pushdown automaton (also a JSON Schema too large for a DFA).
    Grammar(Grammar),
    /// The JSON value acceptor (nothing to compile).
    JsonValue,
}

impl Compiled {
    /// Whether `bytes` as a whole satisfy the constraint.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        match self {
            Compiled::Dfa(dfa) => dfa.matches(bytes),
            Compiled::Grammar(g) => g.matches(bytes),
            Compiled::JsonValue => {
                let mut p = json_value::Parse::new();
                p.advance(bytes) && p.is_accepting()
            }
        }
    }
}

impl Spec {
    /// Reads the constraint of an OpenAI chat or completions request body, with the spec's
    /// precedence; `None` when the output is unconstrained. A field that is present but
    /// invalid, or too large, is an error naming that field.
    pub fn from_request(body: &Value) -> Result<Option<Spec>> {
        Self::from_request_with(body, &Limits::DEFAULT)
    }

    /// [`Spec::from_request`] with text sizes bounded by `limits` instead of the defaults.
    pub fn from_request_with(body: &Value, limits: &Limits) -> Result<Option<Spec>> {
        Ok(Self::all_from_request_with(body, limits)?
            .into_iter()
            .next())
    }

    /// Every constraint field the request carries, highest precedence first (the first is
    /// [`Spec::from_request_with`]'s); each is read and size-checked, so a field that loses
    /// precedence is still a 400 when it is invalid. `response_format` `text` is no entry.
    pub fn all_from_request_with(body: &Value, limits: &Limits) -> Result<Vec<Spec>> {
        let obj = body.as_object().ok_or_else(|| {
            Error::invalid_input(format!(
                "the request body must be a JSON object, got {}",
                json_kind(body)
            ))
        })?;
        let field = |k: &str| obj.get(k).filter(|v| !v.is_null());
        let options = schema_options(body)?;
        let mut specs = Vec::new();
        if let Some(v) = field("guided_choice") {
            specs.push(Spec::Choice(choice::parse_with(v, limits)?));
        }
        if let Some(v) = field("guided_regex") {
            let pattern = v.as_str().ok_or_else(|| {
                Error::invalid_input(format!(
                    "guided_regex must be a string, got {}",
                    json_kind(v)
                ))
                .with_param("guided_regex")
            })?;
            specs.push(Spec::Regex(pattern.to_owned()));
        }
        if let Some(v) = field("guided_grammar") {
            let grammar = v.as_str().ok_or_else(|| {
                Error::invalid_input(format!(
                    "guided_grammar must be a string, got {}",
                    json_kind(v)
                ))
                .with_param("guided_grammar")
            })?;
            check_size("guided_grammar", grammar.len(), limits.grammar_bytes)?;
            specs.push(Spec::Grammar(grammar.to_owned()));
        }
        if let Some(v) = field("guided_json") {
            check_size("guided_json", schema_len(v), limits.schema_bytes)?;
            specs.push(Spec::Json {
                schema: v.clone(),
                field: "guided_json",
                options,
            });
        }
        if let Some(v) = field("response_format") {
            let invalid = |m: String| Error::invalid_input(m).with_param("response_format");
            match v.get("type").and_then(Value::as_str) {
                Some("text") => {}
                Some("json_object") => specs.push(Spec::JsonObject),
                Some("json_schema") => {
                    let schema = v.pointer("/json_schema/schema").ok_or_else(|| {
                        invalid("response_format json_schema needs json_schema.schema".into())
                    })?;
                    check_size("response_format", schema_len(schema), limits.schema_bytes)?;
                    // `name` and `strict` are accepted and ignored (the spec's words): the
                    // schema's own `additionalProperties: false` is what OpenAI's strict mode
                    // requires, and it says the same here.
                    specs.push(Spec::Json {
                        schema: schema.clone(),
                        field: "response_format",
                        options,
                    });
                }
                _ => return Err(invalid(format!(
                    "response_format.type must be \"text\", \"json_object\" or \"json_schema\", got {}",
                    v.get("type").map_or("nothing".into(), |t| t.to_string())
                ))),
            }
        }
        Ok(specs)
    }

    /// A short name of the kind: `"choice"`, `"regex"`, `"grammar"`, `"json"` or
    /// `"json_object"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::Choice(_) => "choice",
            Spec::Regex(_) => "regex",
            Spec::Json { .. } => "json",
            Spec::Grammar(_) => "grammar",
            Spec::JsonObject => "json_object",
        }
    }

    /// The request field this constraint came from.
    pub fn param(&self) -> &'static str {
        match self {
            Spec::Choice(_) => "guided_choice",
            Spec::Regex(_) => "guided_regex",
            Spec::Json { field, .. } => field,
            Spec::Grammar(_) => "guided_grammar",
            Spec::JsonObject => "response_format",
        }
    }

    /// Compiles the automaton (independent of any vocabulary).
    pub fn compile(&self) -> Result<Compiled> {
        self.compile_with(&Limits::DEFAULT)
    }

    /// [`Spec::compile`] under `limits` (tightened per deployment: `poot serve --limits`).
    pub fn compile_with(&self, limits: &Limits) -> Result<Compiled> {
        match self {
            Spec::Choice(choices) => choice::compile_with(choices, limits).map(Compiled::Dfa),
            Spec::Regex(pattern) => Dfa::new_with(pattern, limits).map(Compiled::Dfa),
            Spec::Json {
                schema,
                field,
                options,
            } => JsonSchema::compile_with_options(schema, field, limits, *options)
                .map(JsonSchema::into_automaton),
            Spec::Grammar(text) => Grammar::new_with(text, limits).map(Compiled::Grammar),
            Spec::JsonObject => Ok(Compiled::JsonValue),
        }
    }
}

/// How a request's JSON Schemas (`guided_json`, `response_format`, tool parameters) read
/// what they leave unsaid: the extension `guided_json_extra_keys` (a boolean, default
/// `true`: where `additionalProperties` is left out, objects take other keys too, as JSON
/// Schema says; `false` keeps them to their listed properties).
pub fn schema_options(body: &Value) -> Result<SchemaOptions> {
    let mut options = SchemaOptions::DEFAULT;
    match body.get("guided_json_extra_keys") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => options.extra_keys = *b,
        Some(other) => {
            return Err(Error::invalid_input(format!(
                "guided_json_extra_keys must be a boolean, got {}",
                json_kind(other)
            ))
            .with_param("guided_json_extra_keys"))
        }
    }
    Ok(options)
}

/// The length of a schema's JSON text (a string value is taken as the text itself), counted
/// as the compiler counts it, without keeping the text.
fn schema_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        other => crate::json_schema::measured_text(other).0,
    }
}

/// A compiled constraint over one vocabulary; see the module docs.
#[derive(Debug)]
pub struct Constraint {
    engine: Engine,
    vocab: Arc<Vocabulary>,
    words: usize,
    /// One mask per automaton state, computed on first use.
    masks: Vec<OnceLock<Box<[u32]>>>,
    cached_bytes: AtomicUsize,
    /// [`Run`] per DFA state, computed on first use, `groups` ([`RUN_UNKNOWN`] until then,
    /// [`RUN_WRITING`] while the first writer stores `len`) published after `len`.
    run_groups: Vec<AtomicU64>,
    run_lens: Vec<AtomicU8>,
    /// Shortest completions per automaton state ([`crate::closing`]), built on first use.
    closing: OnceLock<Closing>,
}

/// A constraint's shortest-completion table.
#[derive(Debug)]
enum Closing {
    Dfa(DfaClosing),
    Grammar(GrammarClosing),
    /// `json_object` needs none: its lexer has one, built once per process.
    Json,
}

/// Not a [`Run`]'s groups: those never have [`Trie::GROUP_BAD`] set.
const RUN_UNKNOWN: u64 = u64::MAX;
/// A run's `len` is being written; its groups come next.
const RUN_WRITING: u64 = u64::MAX - 1;

/// The engine behind a constraint.
#[derive(Debug)]
// One per request, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Engine {
    Dfa(Dfa),
    Grammar(grammar::engine::Index),
    Json(json_value::Index),
}

impl Constraint {
    /// Binds an automaton to a vocabulary. Cheap: masks are computed lazily.
    pub fn new(dfa: Dfa, vocab: Arc<Vocabulary>) -> Self {
        let masks = (0..dfa.state_count()).map(|_| OnceLock::new()).collect();
        let mut c = Self::with_engine(Engine::Dfa(dfa), vocab, masks);
        c.run_groups = (0..c.masks.len())
            .map(|_| AtomicU64::new(RUN_UNKNOWN))
            .collect();
        c.run_lens = (0..c.masks.len()).map(|_| AtomicU8::new(0)).collect();
        c
    }

    fn with_engine(
        engine: Engine,
        vocab: Arc<Vocabulary>,
        masks: Vec<OnceLock<Box<[u32]>>>,
    ) -> Self {
        let words = words_for(vocab.len());
        Constraint {
            engine,
            vocab,
            words,
            masks,
            cached_bytes: AtomicUsize::new(0),
            run_groups: Vec::new(),
            run_lens: Vec::new(),
            closing: OnceLock::new(),
        }
    }

    /// Binds any compiled constraint to a vocabulary. Cheap: masks are computed lazily.
    pub fn from_compiled(compiled: Compiled, vocab: Arc<Vocabulary>) -> Self {
        match compiled {
            Compiled::Dfa(dfa) => Self::new(dfa, vocab),
            Compiled::Grammar(g) => Self::with_engine(
                Engine::Grammar(grammar::engine::Index::new(g, vocab.clone())),
                vocab,
                Vec::new(),
            ),
            Compiled::JsonValue => Self::with_engine(
                Engine::Json(json_value::Index::new(vocab.clone())),
                vocab,
                Vec::new(),
            ),
        }
    }

    /// Compiles a request's constraint for a vocabulary.
    pub fn from_spec(spec: &Spec, vocab: Arc<Vocabulary>) -> Result<Self> {
        Self::from_spec_with(spec, vocab, &Limits::DEFAULT)
    }

    /// [`Constraint::from_spec`] under `limits`.
    pub fn from_spec_with(spec: &Spec, vocab: Arc<Vocabulary>, limits: &Limits) -> Result<Self> {
        Ok(Self::from_compiled(spec.compile_with(limits)?, vocab))
    }

    /// The shortest-completion table, built on first use (linear in the automaton).
    fn closing(&self) -> &Closing {
        self.closing.get_or_init(|| match &self.engine {
            Engine::Dfa(dfa) => Closing::Dfa(DfaClosing::new(dfa)),
            Engine::Grammar(index) => Closing::Grammar(GrammarClosing::new(index.grammar())),
            Engine::Json(_) => Closing::Json,
        })
    }

    /// Heap bytes of the automaton's tables (the DFA, or the grammar's; `json_object`'s lexer
    /// is shared by the process).
    pub fn automaton_memory(&self) -> usize {
        match &self.engine {
            Engine::Dfa(dfa) => dfa.memory_usage(),
            Engine::Grammar(index) => index.grammar().memory_usage(),
            Engine::Json(_) => 0,
        }
    }

    /// Heap bytes of the shortest-completion table (0 until something needed it).
    pub fn closing_memory(&self) -> usize {
        match self.closing.get() {
            Some(Closing::Dfa(c)) => c.memory_usage(),
            Some(Closing::Grammar(c)) => c.memory_usage(),
            _ => 0,
        }
    }

    /// Refuses, as a 400 naming `param`, a constraint that no token of this vocabulary can
    /// begin: its first mask is empty, so the first step could only fail. The mask is the one
    /// the first step would compute, and stays cached for it.
    pub fn check_first_mask(self: &Arc<Self>, param: &'static str) -> Result<()> {
        let mut words = vec![0u32; self.words];
        Matcher::new(self.clone()).fill_mask(&mut words)?;
        if words.iter().all(|&w| w == 0) {
            return Err(Error::invalid_input(format!(
                "{param}: no token of this model's vocabulary ({} tokens) can begin an output the constraint accepts",
                self.vocab.len()
            ))
            .with_param(param));
        }
        Ok(())
    }

    /// The automaton, for a DFA constraint (choice, regex, JSON Schema); `None` for the
    /// pushdown engines.
    pub fn dfa(&self) -> Option<&Dfa> {
        match &self.engine {
            Engine::Dfa(dfa) => Some(dfa),
            _ => None,
        }
    }

    /// The grammar, for a `guided_grammar` constraint.
    pub fn grammar(&self) -> Option<&Grammar> {
        match &self.engine {
            Engine::Grammar(index) => Some(index.grammar()),
            _ => None,
        }
    }

    /// Number of automaton states: DFA states, grammar rule-DFA states, or JSON lexer states.
    pub fn state_count(&self) -> usize {
        match &self.engine {
            Engine::Dfa(dfa) => dfa.state_count(),
            Engine::Grammar(index) => index.grammar().state_count(),
            Engine::Json(index) => index.state_count(),
        }
    }

    /// Whether `bytes` as a whole satisfy the constraint.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        match &self.engine {
            Engine::Dfa(dfa) => dfa.matches(bytes),
            Engine::Grammar(index) => index.grammar().matches(bytes),
            Engine::Json(_) => Compiled::JsonValue.matches(bytes),
        }
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// Number of automaton states whose mask is cached so far (for a grammar, rule-DFA
    /// states whose context-independent masks are cached).
    pub fn cached_states(&self) -> usize {
        match &self.engine {
            Engine::Dfa(_) => self.masks.iter().filter(|m| m.get().is_some()).count(),
            Engine::Grammar(index) => index.cached().0,
            Engine::Json(index) => index.cached(),
        }
    }

    /// Fills `out` with the mask of automaton state `state` (not [`DEAD`]).
    fn state_mask(&self, dfa: &Dfa, state: u32, out: &mut [u32]) {
        let cell = &self.masks[dfa.index(state)];
        if let Some(mask) = cell.get() {
            out.copy_from_slice(mask);
            return;
        }
        let bytes = self.words * 4;
        if self.cached_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes <= MASK_CACHE_BYTES {
            let mask = cell.get_or_init(|| {
                let mut m = vec![0u32; self.words].into_boxed_slice();
                self.compute_mask(dfa, state, &mut m);
                m
            });
            out.copy_from_slice(mask);
        } else {
            self.cached_bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.compute_mask(dfa, state, out);
        }
    }

    fn compute_mask(&self, dfa: &Dfa, state: u32, out: &mut [u32]) {
        out.fill(0);
        let known = |s: u32| {
            let i = dfa.index(s);
            let groups = self.run_groups[i].load(Ordering::Acquire);
            (groups != RUN_UNKNOWN && groups != RUN_WRITING).then(|| Run {
                groups,
                len: self.run_lens[i].load(Ordering::Relaxed),
            })
        };
        // A known run comes straight back from `Trie::run`; the first run stored for a
        // state stays (any is right, and a reader never sees half of another).
        let mut memo = RunMemo::default();
        let mut runs = |s: u32| {
            Trie::run(
                s,
                DEAD,
                |s, b| dfa.next(s, b),
                |b| dfa.byte_class(b),
                |_| u64::MAX,
                known,
                // A DFA makes no calls.
                |_| None,
                |s, r| {
                    let i = dfa.index(s);
                    let claim = self.run_groups[i].compare_exchange(
                        RUN_UNKNOWN,
                        RUN_WRITING,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    );
                    if claim.is_ok() {
                        self.run_lens[i].store(r.len, Ordering::Relaxed);
                        self.run_groups[i].store(r.groups, Ordering::Release);
                    }
                },
                &mut memo,
            )
        };
        // The tokens the state's own run takes are one shared set, not marked one by one.
        let trie = self.vocab.trie();
        let from = runs(state);
        if from.groups != 0 {
            or_words(out, &trie.run_tokens(from, self.words));
        }
        trie.walk(
            state,
            DEAD,
            |s, b| dfa.next(s, b),
            from,
            &mut runs,
            |t| set_bit(out, t),
        );
        if dfa.is_accepting(state) {
            for &t in self.vocab.eos() {
                set_bit(out, t);
            }
        }
    }
}

/// Marks the stack entry after an end-of-sequence token.
const FINISHED: u32 = u32::MAX;

/// Marks a text token of a pushdown engine on the matcher's stack (the parse itself keeps
/// the engine's state).
const PUSHDOWN: u32 = 0;

/// What a token does, after the checks every engine shares.
enum Verdict<'a> {
    /// An end-of-sequence token ends an accepting output.
    End,
    /// The DFA state after a text token.
    Dfa(u32),
    /// A text token for a pushdown engine's parse: these bytes.
    Text(&'a [u8]),
}

fn shown(vocab: &Vocabulary, t: TokenId) -> String {
    format!("token {t} ({:?})", String::from_utf8_lossy(vocab.bytes(t)))
}

fn not_allowed(vocab: &Vocabulary, t: TokenId) -> Error {
    Error::invalid_input(format!(
        "{} is not allowed here: the output would no longer match the constraint",
        shown(vocab, t)
    ))
}

/// One sequence's position in a [`Constraint`]; see the module docs.
#[derive(Debug, Clone)]
pub struct Matcher {
    constraint: Arc<Constraint>,
    /// The automaton state before any token, then after each accepted token (for the pushdown
    /// engines, [`PUSHDOWN`] or [`FINISHED`]).
    states: Vec<u32>,
    parse: Parse,
}

/// The per-sequence state of a pushdown engine.
#[derive(Debug, Clone)]
enum Parse {
    None,
    Grammar(grammar::engine::Parse),
    Json(json_value::Parse),
}

impl Matcher {
    /// A matcher at the start of the output.
    pub fn new(constraint: Arc<Constraint>) -> Self {
        let (start, parse) = match &constraint.engine {
            Engine::Dfa(dfa) => (dfa.start(), Parse::None),
            Engine::Grammar(index) => (
                PUSHDOWN,
                Parse::Grammar(grammar::engine::Parse::new(index.grammar())),
            ),
            Engine::Json(_) => (PUSHDOWN, Parse::Json(json_value::Parse::new())),
        };
        Matcher {
            constraint,
            states: vec![start],
            parse,
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
    ///
    /// A grammar step that needs more than
    /// [`Limits::grammar_step_work`] is a `limit_exceeded`
    /// error that ends the request.
    pub fn fill_mask(&self, out: &mut [u32]) -> Result<()> {
        check_mask_len(out.len(), self.constraint.vocab.len())?;
        if self.state() == FINISHED {
            out.fill(0);
            return Ok(());
        }
        match (&self.constraint.engine, &self.parse) {
            (Engine::Grammar(index), Parse::Grammar(p)) => index.fill(p, out)?,
            (Engine::Json(index), Parse::Json(p)) => index.fill(p, out),
            (Engine::Dfa(dfa), _) => self.constraint.state_mask(dfa, self.state(), out),
            _ => unreachable!("a matcher's parse matches its engine"),
        }
        Ok(())
    }

    /// The tokens allowed next, as a new [`TokenMask`]; the errors of [`Matcher::fill_mask`]
    /// (a grammar step past [`Limits::grammar_step_work`] is `limit_exceeded`).
    pub fn mask(&self) -> Result<TokenMask> {
        let n = self.constraint.vocab.len();
        let mut words = vec![0u32; words_for(n)];
        self.fill_mask(&mut words)?;
        TokenMask::from_words(words, n)
    }

    /// The common checks of `token`: the next DFA state, the end of the output, or (for the
    /// pushdown engines) the bytes their parse must accept.
    fn check(&self, token: TokenId) -> Result<Verdict<'_>> {
        let vocab = &self.constraint.vocab;
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
                shown(vocab, token)
            )));
        }
        if vocab.is_eos(token) {
            if self.is_accepting() {
                return Ok(Verdict::End);
            }
            return Err(Error::invalid_input(format!(
                "end-of-sequence {} is not allowed: the output so far does not complete the constraint",
                shown(vocab, token)
            )));
        }
        if !vocab.is_text(token) {
            return Err(Error::invalid_input(format!(
                "{} is a special token, never allowed in constrained output",
                shown(vocab, token)
            )));
        }
        let bytes = vocab.bytes(token);
        match &self.constraint.engine {
            Engine::Dfa(dfa) => match dfa.walk(state, bytes) {
                DEAD => Err(not_allowed(vocab, token)),
                next => Ok(Verdict::Dfa(next)),
            },
            _ => Ok(Verdict::Text(bytes)),
        }
    }

    /// Whether `token` is allowed next (the same answer as its bit in the mask).
    pub fn is_allowed(&self, token: TokenId) -> bool {
        match self.check(token) {
            Ok(Verdict::Text(bytes)) => match (&self.constraint.engine, &self.parse) {
                (Engine::Grammar(index), Parse::Grammar(p)) => {
                    let mut work = grammar::engine::Work::new(index.grammar().step_work);
                    matches!(p.accepts(index.grammar(), bytes, &mut work), Ok(true))
                }
                (_, Parse::Json(p)) => p.accepts(bytes),
                _ => false,
            },
            Ok(_) => true,
            Err(_) => false,
        }
    }

    /// Advances by `token`. A disallowed token is an error and leaves the matcher unchanged.
    ///
    /// A grammar step that needs more than
    /// [`Limits::grammar_step_work`] is a `limit_exceeded`
    /// error that ends the request.
    pub fn advance(&mut self, token: TokenId) -> Result<()> {
        let next = match self.check(token)? {
            Verdict::End => FINISHED,
            Verdict::Dfa(next) => next,
            Verdict::Text(_) => {
                let vocab = self.constraint.vocab.clone();
                let bytes = vocab.bytes(token);
                let alive = match (&self.constraint.engine, &mut self.parse) {
                    (Engine::Grammar(index), Parse::Grammar(p)) => {
                        let grammar = index.grammar();
                        let mut work = grammar::engine::Work::new(grammar.step_work);
                        let heads = p.heads().len();
                        p.advance(grammar, bytes, &mut work).map_err(|_| {
                            grammar::engine::out_of_work(grammar, "advance by one token", heads)
                        })?
                    }
                    (_, Parse::Json(p)) => p.advance(bytes),
                    _ => false,
                };
                if !alive {
                    return Err(not_allowed(&vocab, token));
                }
                PUSHDOWN
            }
        };
        self.states.push(next);
        Ok(())
    }

    /// Whether the output so far is complete, i.e. an end-of-sequence token is allowed now.
    pub fn is_accepting(&self) -> bool {
        if self.state() == FINISHED {
            return false;
        }
        match (&self.constraint.engine, &self.parse) {
            (Engine::Dfa(dfa), _) => dfa.is_accepting(self.state()),
            (_, Parse::Grammar(p)) => p.is_accepting(),
            (_, Parse::Json(p)) => p.is_accepting(),
            _ => false,
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
        let undone = &self.states[self.states.len() - k..];
        let text = undone.iter().filter(|&&s| s != FINISHED).count();
        match &mut self.parse {
            Parse::None => {}
            Parse::Grammar(p) => p.rollback(text),
            Parse::Json(p) => p.rollback(text),
        }
        self.states.truncate(self.states.len() - k);
        Ok(())
    }

    /// Back to the start of the output.
    pub fn reset(&mut self) {
        self.rollback(self.token_count())
            .expect("every accepted token can be rolled back");
    }

    /// The length in bytes of a shortest string that completes the output (0 when it is
    /// complete), or `None` when nothing can (after end-of-sequence). Cheap: a table lookup
    /// per stack frame.
    pub fn closing_len(&self) -> Option<u64> {
        let state = self.state();
        if state == FINISHED {
            return None;
        }
        match (
            self.constraint.closing(),
            &self.constraint.engine,
            &self.parse,
        ) {
            (Closing::Dfa(c), Engine::Dfa(dfa), _) => c.len(dfa, state),
            (Closing::Grammar(c), Engine::Grammar(index), Parse::Grammar(p)) => {
                p.closing_len(index.grammar(), c)
            }
            (Closing::Json, _, Parse::Json(p)) => Some(p.closing_len()),
            _ => None,
        }
    }

    /// A shortest string that completes the output ([`Matcher::closing_len`] bytes), when it
    /// is at most `cap` bytes long.
    pub fn closing_bytes(&self, cap: usize) -> Option<Vec<u8>> {
        let state = self.state();
        if state == FINISHED {
            return None;
        }
        match (
            self.constraint.closing(),
            &self.constraint.engine,
            &self.parse,
        ) {
            (Closing::Dfa(c), Engine::Dfa(dfa), _) => c.bytes(dfa, state, cap),
            (Closing::Grammar(c), Engine::Grammar(index), Parse::Grammar(p)) => {
                p.closing_bytes(index.grammar(), c, cap)
            }
            (Closing::Json, _, Parse::Json(p)) => {
                Some(p.closing_bytes()).filter(|b| b.len() <= cap)
            }
            _ => None,
        }
    }

    /// The bytes that must come next, whatever tokens produce them: the longest run of bytes
    /// each of which is the only one that keeps the output alive, stopping where the output
    /// could end. Empty when the next byte is not forced.
    pub fn forced_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut state = self.state();
        if state == FINISHED {
            return out;
        }
        let dfa = match (&self.constraint.engine, &self.parse) {
            (Engine::Dfa(dfa), _) => dfa,
            // A grammar's forced run is bounded by this many bytes.
            (Engine::Grammar(index), Parse::Grammar(p)) => {
                return p.forced_bytes(index.grammar(), 1024)
            }
            (_, Parse::Json(p)) => return p.forced_bytes(),
            _ => return out,
        };
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
        let s = spec(json!({"response_format": {"type": "json_object"}}))
            .unwrap()
            .unwrap();
        assert_eq!((s.kind(), s.param()), ("json_object", "response_format"));
        assert!(spec(json!([])).is_err());
    }

    #[test]
    fn guided_json_wins_over_response_format() {
        let schema = json!({"type": "integer"});
        let body = json!({
            "guided_json": schema,
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "string"}}},
        });
        let s = spec(body).unwrap().unwrap();
        assert_eq!(
            s,
            Spec::Json {
                schema: schema.clone(),
                field: "guided_json",
                options: SchemaOptions::DEFAULT,
            }
        );
        assert_eq!((s.kind(), s.param()), ("json", "guided_json"));
        assert!(s.compile().unwrap().matches(b"-12"));
        let rf = json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "n", "strict": true, "schema": {"type": "boolean"}}}});
        let s = spec(rf).unwrap().unwrap();
        assert_eq!(s.param(), "response_format");
        assert!(s.compile().unwrap().matches(b"true"));
        let err = spec(json!({"guided_regex": "a", "guided_json": {"type": "integer"}})).unwrap();
        assert_eq!(err, Some(Spec::Regex("a".into())));
        let err = Spec::Json {
            schema: json!({"type": "array", "uniqueItems": true}),
            field: "response_format",
            options: SchemaOptions::DEFAULT,
        }
        .compile()
        .unwrap_err();
        assert_eq!(err.param(), Some("response_format"));
    }

    #[test]
    fn guided_json_extra_keys_reads_every_schema_of_the_request() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let options = |body: Value| match spec(body).unwrap().unwrap() {
            Spec::Json { options, .. } => options.extra_keys,
            other => panic!("{other:?}"),
        };
        let rf = |strict: Value| {
            json!({"type": "json_schema",
                "json_schema": {"name": "n", "strict": strict, "schema": schema}})
        };
        // JSON Schema's reading by default; `strict` is accepted and ignored (the schema's
        // own `additionalProperties: false` says what OpenAI's strict mode requires);
        // `guided_json_extra_keys: false` keeps to the listed keys in every schema.
        assert!(options(json!({ "guided_json": schema })));
        for strict in [json!(true), json!(false), json!(null), json!("yes")] {
            assert!(options(json!({ "response_format": rf(strict.clone()) })));
            assert!(!options(
                json!({ "response_format": rf(strict), "guided_json_extra_keys": false })
            ));
        }
        assert!(!options(
            json!({ "guided_json": schema, "guided_json_extra_keys": false })
        ));
        assert!(options(
            json!({ "guided_json": schema, "guided_json_extra_keys": true })
        ));
        let compiled = |body: Value| spec(body).unwrap().unwrap().compile().unwrap();
        let extra = br#"{"a":1,"b":[{}]}"#;
        assert!(compiled(json!({ "guided_json": schema })).matches(extra));
        let listed = compiled(json!({ "guided_json": schema, "guided_json_extra_keys": false }));
        assert!(!listed.matches(extra));
        assert!(listed.matches(br#"{"a":1}"#));
        let e = spec(json!({ "guided_json": schema, "guided_json_extra_keys": "no" })).unwrap_err();
        assert_eq!(e.param(), Some("guided_json_extra_keys"));
    }

    #[test]
    fn every_present_field_is_read_in_precedence_order() {
        let body = json!({
            "response_format": {"type": "json_object"},
            "guided_json": {"type": "integer"},
            "guided_grammar": "root ::= \"g\"",
            "guided_regex": "r",
            "guided_choice": ["c"],
        });
        let params: Vec<&str> = Spec::all_from_request_with(&body, &Limits::DEFAULT)
            .unwrap()
            .iter()
            .map(Spec::param)
            .collect();
        assert_eq!(
            params,
            [
                "guided_choice",
                "guided_regex",
                "guided_grammar",
                "guided_json",
                "response_format"
            ]
        );
        // A malformed field below the winner is still an error naming it.
        let err = spec(json!({"guided_choice": ["c"], "guided_grammar": 5})).unwrap_err();
        assert_eq!(err.param(), Some("guided_grammar"));
        let err =
            spec(json!({"guided_regex": "r", "response_format": {"type": "xml"}})).unwrap_err();
        assert_eq!(err.param(), Some("response_format"));
        let none = json!({"response_format": {"type": "text"}});
        assert!(Spec::all_from_request_with(&none, &Limits::DEFAULT)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_constraint_no_token_can_begin_is_refused_up_front() {
        let vocab = Arc::new(
            Vocabulary::new(
                vec![b"a".to_vec(), b"b".to_vec(), b"</s>".to_vec()],
                vec![2],
            )
            .unwrap(),
        );
        let refused = [
            Spec::Regex("c+".into()),
            Spec::Choice(vec!["cat".into(), "dog".into()]),
            Spec::Grammar("root ::= \"x\" [ab]*".into()),
            Spec::JsonObject,
        ];
        for spec in &refused {
            let c = Arc::new(Constraint::from_spec(spec, vocab.clone()).unwrap());
            let err = c.check_first_mask(spec.param()).unwrap_err();
            assert_eq!(err.param(), Some(spec.param()), "{spec:?}");
            assert!(err.is_client_error(), "{spec:?}");
            assert!(err.message().contains("no token"), "{err}");
        }
        // One token can begin these (the empty output counts: end-of-sequence).
        for spec in [
            Spec::Regex("c|a".into()),
            Spec::Regex("c?".into()),
            Spec::Grammar("root ::= [ab]+".into()),
        ] {
            let c = Arc::new(Constraint::from_spec(&spec, vocab.clone()).unwrap());
            c.check_first_mask(spec.param()).unwrap();
        }
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
        let before = m.mask().unwrap();
        m.advance(0).unwrap();
        assert!(m.is_accepting());
        m.advance(2).unwrap();
        assert!(m.is_finished() && m.mask().unwrap().count_allowed() == 0);
        assert!(m.rollback(3).is_err());
        assert_eq!(m.token_count(), 2);
        m.rollback(2).unwrap();
        assert_eq!(m.mask().unwrap(), before);
        let err = m.advance(1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "token 1 (\"b\") is not allowed here: the output would no longer match the constraint"
        );
        assert_eq!(m.token_count(), 0);
    }
}
