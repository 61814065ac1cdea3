//! Helpers shared by the grammar tests: the test grammars, a synthetic vocabulary, a seeded
//! generator, and an independent GBNF recognizer (its own parser and a memoized backtracking
//! matcher over characters) that the engine is checked against.
#![allow(dead_code)]

use poot::constraint::{Constraint, Matcher, Spec};
use poot::vocab::{TokenId, TokenKind, Vocabulary};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The test grammars in tests/data/grammars/, by file name.
pub const GRAMMARS: &[&str] = &[
    "arithmetic.gbnf",
    "json.gbnf",
    "json_array.gbnf",
    "list.gbnf",
    "chess.gbnf",
    "c_like.gbnf",
    "japanese.gbnf",
    "balanced.gbnf",
    "dsl.gbnf",
];

pub fn grammar_text(file: &str) -> String {
    let path = format!("{}/tests/data/grammars/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[path = "../common/mod.rs"]
pub mod common;
/// The seeded generator every integration test shares.
pub use common::Rng;

/// Multi-byte tokens after the 256 single bytes: pieces of the test languages, tokens that
/// span a structure boundary (`"}`, `],`), whitespace runs, and tokens that split a UTF-8
/// character.
pub const WORDS: &[&str] = &[
    "\"}",
    "\"]",
    "\"},",
    "}]",
    "]}",
    "},",
    "],",
    "}}",
    "]]",
    "[[",
    "{\"",
    "\":",
    "\": ",
    ", \"",
    "\",",
    "true",
    "null",
    "fal",
    "se",
    "1.",
    "0.5",
    "e+",
    "12",
    "-1",
    "  ",
    "    ",
    "\n ",
    "\n  ",
    " +",
    "+ ",
    " * ",
    "(",
    "((",
    "))",
    ")\n",
    "x =",
    "int",
    " main",
    "() {",
    "return",
    " 0;",
    "}\n",
    "if",
    "else",
    "while",
    "e4",
    " e5",
    "Nf3",
    "O-O",
    "\n2.",
    "- ",
    "\n- ",
    "move ",
    "north",
    "say \"",
    "repeat ",
    " {",
    "こん",
    "にちは",
    "。",
    "、",
    "日本",
    "カタ",
    "ラー",
    "\\u",
    "\\n",
    "00e9",
    "é",
    "ab",
    "xyz",
];

pub struct Synthetic {
    pub vocab: Arc<Vocabulary>,
    pub eos: TokenId,
    pub control: TokenId,
    pub empty: TokenId,
}

/// All 256 single bytes, [`WORDS`], then an EOS, a control token and an empty token. The
/// lead bytes of 3-byte characters (E3, E4, E5...) and their continuation bytes are single
/// tokens, so every character can also be spelled byte by byte.
pub fn synthetic() -> Synthetic {
    let mut tokens: Vec<(Vec<u8>, TokenKind)> =
        (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
    tokens.extend(
        WORDS
            .iter()
            .map(|w| (w.as_bytes().to_vec(), TokenKind::Text)),
    );
    // Split characters: the first two bytes of こ, and the last byte of こ plus ん.
    tokens.push(("こ".as_bytes()[..2].to_vec(), TokenKind::Text));
    let mut tail = "こ".as_bytes()[2..].to_vec();
    tail.extend_from_slice("ん".as_bytes());
    tokens.push((tail, TokenKind::Text));
    let eos = tokens.len() as TokenId;
    tokens.push((b"<|im_end|>".to_vec(), TokenKind::Special));
    let control = tokens.len() as TokenId;
    tokens.push((b"<s>".to_vec(), TokenKind::Special));
    let empty = tokens.len() as TokenId;
    tokens.push((Vec::new(), TokenKind::Text));
    Synthetic {
        vocab: Arc::new(Vocabulary::from_tokens(tokens, vec![eos]).unwrap()),
        eos,
        control,
        empty,
    }
}

/// The constraint of a request body.
pub fn constraint(body: serde_json::Value, vocab: &Arc<Vocabulary>) -> Arc<Constraint> {
    let spec = Spec::from_request(&body).unwrap().expect("a constraint");
    Arc::new(Constraint::from_spec(&spec, vocab.clone()).unwrap_or_else(|e| panic!("{e}")))
}

pub fn grammar_matcher(text: &str, vocab: &Arc<Vocabulary>) -> Matcher {
    Matcher::new(constraint(
        serde_json::json!({ "guided_grammar": text }),
        vocab,
    ))
}

pub fn json_matcher(vocab: &Arc<Vocabulary>) -> Matcher {
    Matcher::new(constraint(
        serde_json::json!({"response_format": {"type": "json_object"}}),
        vocab,
    ))
}

/// The text token whose bytes are exactly `bytes`.
pub fn token_for(vocab: &Vocabulary, bytes: &[u8]) -> Option<TokenId> {
    (0..vocab.len() as TokenId).find(|&t| vocab.is_text(t) && vocab.bytes(t) == bytes)
}

/// Tokenizes by a random choice among the tokens (up to 6 bytes) that start at each position.
pub fn random_tokenization(vocab: &Vocabulary, text: &[u8], rng: &mut Rng) -> Vec<TokenId> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let mut options = Vec::new();
        for len in 1..=6.min(text.len() - pos) {
            if let Some(id) = token_for(vocab, &text[pos..pos + len]) {
                options.push((id, len));
            }
        }
        let (id, len) = options[rng.below(options.len())];
        out.push(id);
        pos += len;
    }
    out
}

/// A recognizer as a boxed predicate.
pub type Recognizer = Box<dyn Fn(&[u8]) -> bool>;

pub fn byte_tokenization(text: &[u8]) -> Vec<TokenId> {
    text.iter().map(|&b| TokenId::from(b)).collect()
}

// ---------------------------------------------------------------------------------------
// The independent recognizer.

#[derive(Debug, Clone)]
enum R {
    Chars(Vec<char>),
    Set(Vec<(char, char)>, bool),
    Dot,
    Rule(usize),
    All(Vec<R>),
    Any(Vec<R>),
    Times(Box<R>, usize, Option<usize>),
}

/// A GBNF grammar as the recognizer reads it.
#[derive(Debug)]
pub struct Reference {
    rules: Vec<Option<R>>,
    root: usize,
}

struct P<'a> {
    s: &'a [char],
    i: usize,
    names: HashMap<String, usize>,
}

impl P<'_> {
    fn at(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }

    fn skip(&mut self, newlines: bool) {
        while let Some(c) = self.at(0) {
            if c == '#' {
                while self.at(0).is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
            } else if c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r')) {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn id(&mut self, name: String) -> usize {
        let n = self.names.len();
        *self.names.entry(name).or_insert(n)
    }

    fn word(&mut self) -> String {
        let mut w = String::new();
        while let Some(c) = self
            .at(0)
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        {
            w.push(c);
            self.i += 1;
        }
        w
    }

    fn ch(&mut self) -> char {
        let c = self.at(0).unwrap();
        self.i += 1;
        if c != '\\' {
            return c;
        }
        let e = self.at(0).unwrap();
        self.i += 1;
        let hex = |p: &mut Self, n: usize| {
            let s: String = p.s[p.i..p.i + n].iter().collect();
            p.i += n;
            char::from_u32(u32::from_str_radix(&s, 16).unwrap()).unwrap()
        };
        match e {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' => hex(self, 2),
            'u' => hex(self, 4),
            'U' => hex(self, 8),
            other => other,
        }
    }

    fn alts(&mut self, nested: bool) -> R {
        let mut v = vec![self.seq(nested)];
        while self.at(0) == Some('|') {
            self.i += 1;
            self.skip(true);
            v.push(self.seq(nested));
        }
        R::Any(v)
    }

    fn seq(&mut self, nested: bool) -> R {
        let mut items: Vec<R> = Vec::new();
        while let Some(c) = self.at(0) {
            let item = match c {
                '"' => {
                    self.i += 1;
                    let mut v = Vec::new();
                    while self.at(0) != Some('"') {
                        v.push(self.ch());
                    }
                    self.i += 1;
                    R::Chars(v)
                }
                '[' => {
                    self.i += 1;
                    let neg = self.at(0) == Some('^');
                    if neg {
                        self.i += 1;
                    }
                    let mut v = Vec::new();
                    while self.at(0) != Some(']') {
                        let lo = self.ch();
                        let hi = if self.at(0) == Some('-') && self.at(1) != Some(']') {
                            self.i += 1;
                            self.ch()
                        } else {
                            lo
                        };
                        v.push((lo, hi));
                    }
                    self.i += 1;
                    R::Set(v, neg)
                }
                '(' => {
                    self.i += 1;
                    self.skip(true);
                    let r = self.alts(true);
                    assert_eq!(self.at(0), Some(')'));
                    self.i += 1;
                    r
                }
                '.' => {
                    self.i += 1;
                    R::Dot
                }
                '*' | '+' | '?' | '{' => {
                    self.i += 1;
                    let (lo, hi) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        '?' => (0, Some(1)),
                        _ => {
                            let num = |p: &mut Self| {
                                p.skip(false);
                                let mut n = String::new();
                                while let Some(d) = p.at(0).filter(|d| d.is_ascii_digit()) {
                                    n.push(d);
                                    p.i += 1;
                                }
                                p.skip(false);
                                n.parse::<usize>().ok()
                            };
                            let lo = num(self).unwrap();
                            let hi = if self.at(0) == Some(',') {
                                self.i += 1;
                                num(self)
                            } else {
                                Some(lo)
                            };
                            assert_eq!(self.at(0), Some('}'));
                            self.i += 1;
                            (lo, hi)
                        }
                    };
                    let last = items.pop().unwrap();
                    R::Times(Box::new(last), lo, hi)
                }
                c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                    let w = self.word();
                    R::Rule(self.id(w))
                }
                _ => break,
            };
            items.push(item);
            self.skip(nested);
        }
        R::All(items)
    }
}

impl Reference {
    /// Parses GBNF (assumed valid: the engine's parser is the one under test for errors).
    pub fn new(text: &str) -> Self {
        let chars: Vec<char> = text.chars().collect();
        let mut p = P {
            s: &chars,
            i: 0,
            names: HashMap::new(),
        };
        let mut rules: Vec<Option<R>> = Vec::new();
        p.skip(true);
        while p.at(0).is_some() {
            let name = p.word();
            let id = p.id(name);
            p.skip(false);
            assert_eq!(p.s[p.i..p.i + 3].iter().collect::<String>(), "::=");
            p.i += 3;
            p.skip(true);
            let body = p.alts(false);
            if rules.len() <= id {
                rules.resize(id + 1, None);
            }
            rules[id] = Some(body);
            p.skip(true);
        }
        let root = p.names["root"];
        rules.resize(p.names.len(), None);
        Reference { rules, root }
    }

    /// Whether `bytes` is a sentence (bytes that are not UTF-8 never are).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        let Ok(s) = std::str::from_utf8(bytes) else {
            return false;
        };
        let input: Vec<char> = s.chars().collect();
        let mut memo = HashMap::new();
        let root = R::Rule(self.root);
        self.ends(&root, &input, 0, &mut memo)
            .contains(&input.len())
    }

    /// Every position where `r` can end when it starts at `pos`.
    fn ends(
        &self,
        r: &R,
        s: &[char],
        pos: usize,
        memo: &mut HashMap<(usize, usize), BTreeSet<usize>>,
    ) -> BTreeSet<usize> {
        let one = |ok: bool| {
            if ok {
                BTreeSet::from([pos + 1])
            } else {
                BTreeSet::new()
            }
        };
        match r {
            R::Chars(v) => {
                if s.len() >= pos + v.len() && &s[pos..pos + v.len()] == v.as_slice() {
                    BTreeSet::from([pos + v.len()])
                } else {
                    BTreeSet::new()
                }
            }
            R::Set(v, neg) => {
                one(pos < s.len() && v.iter().any(|&(a, b)| a <= s[pos] && s[pos] <= b) != *neg)
            }
            R::Dot => one(pos < s.len()),
            R::Rule(id) => {
                if let Some(e) = memo.get(&(*id, pos)) {
                    return e.clone();
                }
                // A rule re-entered at the same position (left recursion) contributes nothing.
                memo.insert((*id, pos), BTreeSet::new());
                let body = self.rules[*id].as_ref().expect("defined");
                let e = self.ends(body, s, pos, memo);
                memo.insert((*id, pos), e.clone());
                e
            }
            R::All(items) => {
                let mut cur = BTreeSet::from([pos]);
                for it in items {
                    let mut next = BTreeSet::new();
                    for &p in &cur {
                        next.extend(self.ends(it, s, p, memo));
                    }
                    cur = next;
                    if cur.is_empty() {
                        break;
                    }
                }
                cur
            }
            R::Any(alts) => {
                let mut out = BTreeSet::new();
                for a in alts {
                    out.extend(self.ends(a, s, pos, memo));
                }
                out
            }
            R::Times(inner, lo, hi) => {
                let mut out = BTreeSet::new();
                let mut cur = BTreeSet::from([pos]);
                let mut seen = BTreeSet::new();
                let mut n = 0;
                loop {
                    if n >= *lo {
                        out.extend(cur.iter().copied());
                    }
                    if hi.is_some_and(|h| n >= h) || cur.is_empty() {
                        break;
                    }
                    let mut next = BTreeSet::new();
                    for &p in &cur {
                        next.extend(self.ends(inner, s, p, memo));
                    }
                    n += 1;
                    // Past the minimum, positions already tried add nothing new.
                    if n > *lo {
                        next.retain(|p| seen.insert(*p));
                    }
                    cur = next;
                }
                out
            }
        }
    }
}

/// The recognizer for json_object: an explicit-stack RFC 8259 checker (no recursion, so a
/// depth of thousands is fine), with the same whitespace bound and surrogate rule.
pub fn reference_json(bytes: &[u8], max_ws: usize) -> bool {
    let Ok(s) = std::str::from_utf8(bytes) else {
        return false;
    };
    let b = s.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| -> bool {
        let start = *i;
        while *i < b.len() && matches!(b[*i], b' ' | b'\t' | b'\n' | b'\r') {
            *i += 1;
        }
        *i - start <= max_ws
    };
    // Stack of open containers: b'{' or b'['.
    let mut stack: Vec<u8> = Vec::new();
    if !ws(&mut i) {
        return false;
    }
    loop {
        // A value.
        if i >= b.len() {
            return false;
        }
        match b[i] {
            b'{' | b'[' => {
                let open = b[i];
                i += 1;
                if !ws(&mut i) {
                    return false;
                }
                let close = if open == b'{' { b'}' } else { b']' };
                if i < b.len() && b[i] == close {
                    i += 1;
                } else {
                    stack.push(open);
                    if open == b'{' && !key(b, &mut i, &ws) {
                        return false;
                    }
                    if !ws(&mut i) {
                        return false;
                    }
                    continue;
                }
            }
            b'"' => {
                if !string(b, &mut i) {
                    return false;
                }
            }
            b't' | b'f' | b'n' => {
                let lit: &[u8] = match b[i] {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                if !b[i..].starts_with(lit) {
                    return false;
                }
                i += lit.len();
            }
            _ => {
                if !number(b, &mut i) {
                    return false;
                }
            }
        }
        // After a value: commas and closers.
        loop {
            if !ws(&mut i) {
                return false;
            }
            let Some(&top) = stack.last() else {
                return i == b.len();
            };
            if i >= b.len() {
                return false;
            }
            let close = if top == b'{' { b'}' } else { b']' };
            if b[i] == close {
                stack.pop();
                i += 1;
                continue;
            }
            if b[i] != b',' {
                return false;
            }
            i += 1;
            if !ws(&mut i) {
                return false;
            }
            if top == b'{' && !key(b, &mut i, &ws) {
                return false;
            }
            if !ws(&mut i) {
                return false;
            }
            break;
        }
    }
}

fn key(b: &[u8], i: &mut usize, ws: &dyn Fn(&mut usize) -> bool) -> bool {
    if *i >= b.len() || b[*i] != b'"' || !string(b, i) || !ws(i) {
        return false;
    }
    if *i >= b.len() || b[*i] != b':' {
        return false;
    }
    *i += 1;
    true
}

fn string(b: &[u8], i: &mut usize) -> bool {
    *i += 1;
    let mut pending_high = false;
    while *i < b.len() {
        let c = b[*i];
        if pending_high && c != b'\\' {
            return false;
        }
        match c {
            b'"' => {
                *i += 1;
                return true;
            }
            b'\\' => {
                let Some(&e) = b.get(*i + 1) else {
                    return false;
                };
                if e == b'u' {
                    let Some(h) = b.get(*i + 2..*i + 6) else {
                        return false;
                    };
                    let Some(v) = std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                    else {
                        return false;
                    };
                    if !h.iter().all(u8::is_ascii_hexdigit) {
                        return false;
                    }
                    let low = (0xDC00..=0xDFFF).contains(&v);
                    if low != pending_high {
                        return false;
                    }
                    pending_high = (0xD800..=0xDBFF).contains(&v);
                    *i += 6;
                } else if b"\"\\/bfnrt".contains(&e) && !pending_high {
                    *i += 2;
                } else {
                    return false;
                }
            }
            0..=0x1F => return false,
            _ => *i += 1, // the input is UTF-8 already
        }
    }
    false
}

fn number(b: &[u8], i: &mut usize) -> bool {
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    if b.get(*i) == Some(&b'-') {
        *i += 1;
    }
    match b.get(*i) {
        Some(b'0') => *i += 1,
        Some(b'1'..=b'9') => {
            digits(i);
        }
        _ => return false,
    }
    if b.get(*i) == Some(&b'.') {
        *i += 1;
        if !digits(i) {
            return false;
        }
    }
    if matches!(b.get(*i), Some(b'e' | b'E')) {
        *i += 1;
        if matches!(b.get(*i), Some(b'+' | b'-')) {
            *i += 1;
        }
        if !digits(i) {
            return false;
        }
    }
    true
}
