//! Vocabularies: the bytes each token adds to the output.
//!
//! A constraint works on bytes, a model on token ids; a [`Vocabulary`] connects them. It is
//! built from
//! - a GGUF file's tokenizer metadata ([`Vocabulary::from_gguf`]): `tokenizer.ggml.model`
//!   `"gpt2"` (byte-level BPE, the GPT-2 byte↔unicode table undone) or `"llama"`
//!   (SentencePiece: `▁` is a space, `<0xNN>` byte-fallback tokens are one byte);
//! - a Hugging Face `tokenizer.json` ([`Vocabulary::from_tokenizer_json`]);
//! - a plain list of token byte strings plus the end-of-sequence ids ([`Vocabulary::new`]).
//!
//! Special tokens (control, unknown and unused ones, and any token with no bytes) are never
//! allowed by a constraint. End-of-sequence ids are allowed exactly when the output so far is
//! a complete match; they come from the metadata (`tokenizer.ggml.eos_token_id`, plus
//! end-of-turn tokens such as `<|im_end|>` or `<end_of_turn>` when present).
//!
//! The vocabulary also holds a byte trie over its text tokens, which mask computation walks
//! against an automaton (see [`crate::constraint`]).

mod gguf;
pub mod gpt2;
mod hf;
mod trie;

pub(crate) use trie::{Run, RunMemo, Trie};

use crate::error::{Error, Result};

/// A token's index in the vocabulary (and its bit in a [`crate::mask::TokenMask`]).
pub type TokenId = u32;

/// Whether a token can be part of constrained output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// A token whose bytes are output text.
    Text,
    /// A control, unknown or unused token: never allowed as text (an end-of-sequence token is
    /// allowed only as the end). Its bytes are its name, for display.
    Special,
}

/// Texts of end-of-turn tokens that end a constrained output when the model has them, like
/// llama.cpp's end-of-generation set.
pub const END_OF_TURN_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    // Gemma 3 stores `</s>` (id 212) as a user-defined token; llama.cpp makes it a control
    // token that ends generation, so it is never text here either.
    "</s>",
];

/// The bytes of every token, which ones are special, the end-of-sequence ids and a trie.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    /// Token bytes, concatenated; token `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    kinds: Vec<TokenKind>,
    eos: Vec<TokenId>,
    trie: Trie,
}

impl Vocabulary {
    /// A vocabulary of text tokens given by their bytes, plus the end-of-sequence ids (those
    /// tokens end the output and are never text). An empty token is never allowed.
    ///
    /// ```
    /// use poot::vocab::Vocabulary;
    /// let vocab = Vocabulary::new(vec![b"a".to_vec(), b"bc".to_vec(), b"</s>".to_vec()], vec![2]).unwrap();
    /// assert_eq!(vocab.len(), 3);
    /// assert_eq!(vocab.bytes(1), b"bc");
    /// assert!(vocab.is_eos(2) && !vocab.is_text(2));
    /// ```
    pub fn new(tokens: Vec<Vec<u8>>, eos: Vec<TokenId>) -> Result<Self> {
        Self::from_tokens(
            tokens.into_iter().map(|t| (t, TokenKind::Text)).collect(),
            eos,
        )
    }

    /// A vocabulary with an explicit kind per token.
    pub fn from_tokens(tokens: Vec<(Vec<u8>, TokenKind)>, mut eos: Vec<TokenId>) -> Result<Self> {
        if tokens.is_empty() {
            return Err(Error::invalid_input("the vocabulary has no tokens"));
        }
        crate::mask::check_vocab_size(tokens.len()).map_err(|_| {
            Error::limit_exceeded(format!(
                "a vocabulary of {} tokens exceeds the limit of {} tokens",
                tokens.len(),
                u32::MAX - 1
            ))
        })?;
        eos.sort_unstable();
        eos.dedup();
        if let Some(&bad) = eos.iter().find(|&&id| id as usize >= tokens.len()) {
            return Err(Error::invalid_input(format!(
                "end-of-sequence token {bad} is outside the vocabulary of {} tokens",
                tokens.len()
            )));
        }
        let total: usize = tokens.iter().map(|(t, _)| t.len()).sum();
        let mut bytes = Vec::with_capacity(total);
        let mut offsets = Vec::with_capacity(tokens.len() + 1);
        let mut kinds = Vec::with_capacity(tokens.len());
        offsets.push(0);
        for (i, (t, kind)) in tokens.into_iter().enumerate() {
            bytes.extend_from_slice(&t);
            offsets.push(bytes.len());
            let text =
                kind == TokenKind::Text && !t.is_empty() && eos.binary_search(&(i as u32)).is_err();
            kinds.push(if text {
                TokenKind::Text
            } else {
                TokenKind::Special
            });
        }
        let trie = Trie::build(&bytes, &offsets, &kinds)?;
        Ok(Vocabulary {
            bytes,
            offsets,
            kinds,
            eos,
            trie,
        })
    }

    /// The vocabulary in a GGUF file's tokenizer metadata (see the module docs).
    pub fn from_gguf(gguf: &crate::gguf::Gguf<'_>) -> Result<Self> {
        gguf::from_gguf(gguf)
    }

    /// Parses a GGUF file's header and reads its vocabulary.
    pub fn from_gguf_bytes(file: &[u8]) -> Result<Self> {
        Self::from_gguf(&crate::gguf::Gguf::parse_metadata(file)?)
    }

    /// The vocabulary in a Hugging Face `tokenizer.json` (BPE or Unigram models; byte-level
    /// and SentencePiece-style decoders). `eos` gives the end-of-sequence ids, which the file
    /// itself does not record; when `None`, the special added tokens named in
    /// [`END_OF_TURN_TEXTS`] or `</s>` / `<eos>` are used.
    pub fn from_tokenizer_json(json: &[u8], eos: Option<Vec<TokenId>>) -> Result<Self> {
        hf::from_tokenizer_json(json, eos)
    }

    /// Number of tokens (the logits' length).
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Always false: a vocabulary has at least one token.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The bytes token `id` adds to the output (for a special token, its name). Panics if
    /// `id` is outside the vocabulary.
    pub fn bytes(&self, id: TokenId) -> &[u8] {
        let i = id as usize;
        &self.bytes[self.offsets[i]..self.offsets[i + 1]]
    }

    /// The kind of token `id`; ids outside the vocabulary are `None`.
    pub fn kind(&self, id: TokenId) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// Whether token `id` is a text token (may be allowed by a constraint).
    pub fn is_text(&self, id: TokenId) -> bool {
        self.kind(id) == Some(TokenKind::Text)
    }

    /// The end-of-sequence ids, sorted.
    pub fn eos(&self) -> &[TokenId] {
        &self.eos
    }

    /// Whether `id` ends the output.
    pub fn is_eos(&self, id: TokenId) -> bool {
        self.eos.binary_search(&id).is_ok()
    }

    /// The text token with the longest bytes that are a prefix of `text`, and that length.
    pub fn longest_prefix(&self, text: &[u8]) -> Option<(TokenId, usize)> {
        self.trie.longest_prefix(text)
    }

    /// Splits `text` into text tokens by greedy longest match, the stand-in for a model's
    /// tokenizer that `poot trace`, the benchmarks and the JavaScript bindings use to follow
    /// a text through the masks. An error names the first byte no text token starts with.
    ///
    /// ```
    /// use poot::vocab::Vocabulary;
    /// let v = Vocabulary::new(vec![b"a".to_vec(), b"ab".to_vec(), b"c".to_vec()], vec![]).unwrap();
    /// assert_eq!(v.tokenize_greedy(b"abca").unwrap(), vec![1, 2, 0]);
    /// assert_eq!(
    ///     v.tokenize_greedy(b"ax").unwrap_err().to_string(),
    ///     "no text token starts with byte 0x78 at offset 1"
    /// );
    /// ```
    pub fn tokenize_greedy(&self, text: &[u8]) -> Result<Vec<TokenId>> {
        let mut tokens = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            let (id, len) = self.longest_prefix(&text[pos..]).ok_or_else(|| {
                Error::invalid_input(format!(
                    "no text token starts with byte 0x{:02x} at offset {pos}",
                    text[pos]
                ))
            })?;
            tokens.push(id);
            pos += len;
        }
        Ok(tokens)
    }

    /// The fewest text tokens whose bytes, joined, are `text` (`None` when no split exists):
    /// the cheapest way to write a fixed continuation, such as the close of a constrained
    /// output. Any suffix of the split is a fewest split of the rest, so a caller can emit
    /// it one token at a time. O(`text.len()` × longest token) trie steps.
    ///
    /// ```
    /// use poot::vocab::Vocabulary;
    /// let v = Vocabulary::new(
    ///     vec![b"a".to_vec(), b"ab".to_vec(), b"abc".to_vec(), b"cd".to_vec(), b"d".to_vec()],
    ///     vec![],
    /// ).unwrap();
    /// // "ab"+"cd" and "abc"+"d" are both two tokens: ties go to the longer first token.
    /// assert_eq!(v.fewest_tokens(b"aabcd").unwrap(), vec![0, 2, 4]);
    /// // Greedy longest match takes "ab" and then finds no token for "cd".
    /// let w = Vocabulary::new(vec![b"ab".to_vec(), b"a".to_vec(), b"bcd".to_vec()], vec![]).unwrap();
    /// assert!(w.tokenize_greedy(b"abcd").is_err());
    /// assert_eq!(w.fewest_tokens(b"abcd"), Some(vec![1, 2]));
    /// assert_eq!(v.fewest_tokens(b""), Some(vec![]));
    /// assert_eq!(v.fewest_tokens(b"ax"), None);
    /// ```
    pub fn fewest_tokens(&self, text: &[u8]) -> Option<Vec<TokenId>> {
        const NO_SPLIT: u32 = u32::MAX;
        // best[i]: fewest tokens for text[i..], and the first token and its length.
        let n = text.len();
        let mut best = vec![(NO_SPLIT, 0 as TokenId, 0usize); n + 1];
        best[n].0 = 0;
        for i in (0..n).rev() {
            let mut here = (NO_SPLIT, 0, 0);
            self.trie.prefixes(&text[i..], |id, len| {
                let rest = best[i + len].0;
                // Ties go to the longer token: prefixes come shortest first.
                if rest != NO_SPLIT && rest < here.0 {
                    here = (rest + 1, id, len);
                }
            });
            best[i] = here;
        }
        if best[0].0 == NO_SPLIT {
            return None;
        }
        let mut out = Vec::with_capacity(best[0].0 as usize);
        let mut i = 0;
        while i < n {
            let (_, id, len) = best[i];
            out.push(id);
            i += len;
        }
        Some(out)
    }

    /// Bytes of the longest text token.
    pub fn max_token_len(&self) -> usize {
        self.trie.max_depth()
    }

    pub(crate) fn trie(&self) -> &Trie {
        &self.trie
    }
}

/// Parses a SentencePiece byte-fallback token `<0xNN>` (two hex digits) to its byte.
pub(crate) fn parse_byte_token(text: &[u8]) -> Option<u8> {
    match text {
        [b'<', b'0', b'x', hi, lo, b'>'] => {
            let hex = |c: u8| (c as char).to_digit(16);
            Some((hex(*hi)? * 16 + hex(*lo)?) as u8)
        }
        _ => None,
    }
}

/// The bytes of a SentencePiece piece: `▁` (U+2581) is a space.
pub(crate) fn sentencepiece_bytes(piece: &str) -> Vec<u8> {
    piece.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_list_keeps_bytes_and_eos() {
        let v = Vocabulary::new(
            vec![
                b"a".to_vec(),
                vec![],
                "é".as_bytes().to_vec(),
                b"<e>".to_vec(),
            ],
            vec![3, 3],
        )
        .unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v.eos(), &[3]);
        assert!(v.is_text(0) && !v.is_text(1) && v.is_text(2) && !v.is_text(3));
        assert_eq!(v.bytes(2), &[0xc3, 0xa9]);
        assert_eq!(v.bytes(3), b"<e>");
        assert_eq!(v.kind(4), None);
    }

    #[test]
    fn eos_outside_vocabulary_and_empty_vocabulary_are_errors() {
        let err = Vocabulary::new(vec![b"a".to_vec()], vec![1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "end-of-sequence token 1 is outside the vocabulary of 1 tokens"
        );
        assert!(Vocabulary::new(vec![], vec![]).is_err());
    }

    #[test]
    fn longest_prefix_prefers_longer_tokens() {
        let v = Vocabulary::new(
            vec![
                b"a".to_vec(),
                b"ab".to_vec(),
                b"abc".to_vec(),
                b"b".to_vec(),
                b"abd".to_vec(),
            ],
            vec![],
        )
        .unwrap();
        assert_eq!(v.longest_prefix(b"abcx"), Some((2, 3)));
        assert_eq!(v.longest_prefix(b"abx"), Some((1, 2)));
        assert_eq!(v.longest_prefix(b"bab"), Some((3, 1)));
        assert_eq!(v.longest_prefix(b"x"), None);
        assert_eq!(v.longest_prefix(b""), None);
    }

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token(b"<0x0A>"), Some(10));
        assert_eq!(parse_byte_token(b"<0xff>"), Some(255));
        assert_eq!(parse_byte_token(b"<0xG0>"), None);
        assert_eq!(parse_byte_token(b"<0x0A"), None);
        assert_eq!(sentencepiece_bytes("\u{2581}the"), b" the");
    }
}
