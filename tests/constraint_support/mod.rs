//! Helpers shared by the constraint tests: a seeded generator and a synthetic vocabulary.
#![allow(dead_code)]

use poot::constraint::{Constraint, Matcher};
use poot::vocab::{TokenId, TokenKind, Vocabulary};
use std::sync::Arc;

#[path = "../common/mod.rs"]
mod common;
/// The seeded generator every integration test shares.
pub use common::Rng;

/// Multi-byte tokens of the synthetic vocabulary, after the 256 single bytes.
pub const WORDS: &[&[u8]] = &[
    b"ab",
    b"bc",
    b"abc",
    b"20",
    b"2024",
    b"-0",
    b"-1",
    b"12",
    b"0.",
    b"1e",
    b"e+",
    b"\"a",
    b"a\"",
    b"\\\"",
    b" the",
    b" th",
    b"he",
    b"e ",
    b"yes",
    b"no",
    b"none",
    b"may",
    b"be",
    b"hello",
    b"Hel",
    b"lo",
    b"xx",
    b"xxx",
    // Whole multi-byte characters: é (C3 A9), α (CE B1), β (CE B2), γ (CE B3).
    "é".as_bytes(),
    "α".as_bytes(),
    "αβ".as_bytes(),
    "β".as_bytes(),
    "γ".as_bytes(),
    "é ".as_bytes(),
    " α".as_bytes(),
    // Tokens that split a character: a + lead byte of α, tail of α + space, tail of é + x,
    // tail of α + lead of β.
    b"a\xCE",
    b"\xB1 ",
    b"\xA9x",
    b"\xB1\xCE",
];

/// Ids of the special tokens appended after [`WORDS`].
pub struct Synthetic {
    pub vocab: Arc<Vocabulary>,
    pub eos: TokenId,
    pub control: TokenId,
    pub empty: TokenId,
}

/// All 256 single bytes, [`WORDS`], then `<|im_end|>` (EOS), `<s>` (control) and an empty
/// token, so every string has a tokenization and several have many.
pub fn synthetic() -> Synthetic {
    let mut tokens: Vec<(Vec<u8>, TokenKind)> =
        (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
    tokens.extend(WORDS.iter().map(|w| (w.to_vec(), TokenKind::Text)));
    let eos = tokens.len() as TokenId;
    tokens.push((b"<|im_end|>".to_vec(), TokenKind::Special));
    let control = tokens.len() as TokenId;
    tokens.push((b"<s>".to_vec(), TokenKind::Special));
    let empty = tokens.len() as TokenId;
    tokens.push((Vec::new(), TokenKind::Text));
    let vocab = Arc::new(Vocabulary::from_tokens(tokens, vec![eos]).unwrap());
    Synthetic {
        vocab,
        eos,
        control,
        empty,
    }
}

/// A matcher for `pattern` over `vocab`.
pub fn matcher(pattern: &str, vocab: &Arc<Vocabulary>) -> Matcher {
    let dfa = poot::regex::Dfa::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
    Matcher::new(Arc::new(Constraint::new(dfa, vocab.clone())))
}

/// Tokenizes `text` by taking, at each position, a random token among those that start there
/// (at most 4 bytes long), so repeated calls give different tokenizations.
pub fn random_tokenization(vocab: &Vocabulary, text: &[u8], rng: &mut Rng) -> Vec<TokenId> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let mut options = Vec::new();
        for len in 1..=4.min(text.len() - pos) {
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

/// The text token whose bytes are exactly `bytes`.
pub fn token_for(vocab: &Vocabulary, bytes: &[u8]) -> Option<TokenId> {
    (0..vocab.len() as TokenId).find(|&t| vocab.is_text(t) && vocab.bytes(t) == bytes)
}

/// Greedy longest-match tokenization.
pub fn greedy_tokenization(vocab: &Vocabulary, text: &[u8]) -> Vec<TokenId> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let (id, len) = vocab
            .longest_prefix(&text[pos..])
            .expect("every byte is a token");
        out.push(id);
        pos += len;
    }
    out
}

/// Byte-per-token tokenization.
pub fn byte_tokenization(text: &[u8]) -> Vec<TokenId> {
    text.iter().map(|&b| TokenId::from(b)).collect()
}

/// The anchored independent oracle for `pattern` (the `regex` crate, on bytes).
pub fn oracle(pattern: &str) -> regex::bytes::Regex {
    regex::bytes::Regex::new(&format!("^(?:{pattern})$")).unwrap()
}
