//! Pre-tokenizers: how byte-level BPE splits text into words before merging.
//!
//! llama.cpp picks the split from `tokenizer.ggml.pre`. Supported here:
//! - `gpt2` (and its aliases in [`Pre::from_name`]):
//!   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
//! - `smollm` (and the other names llama.cpp maps to the same regexes: `starcoder`,
//!   `refact`, `command-r`, `codeshell`, `exaone`, `minerva`): first every number character on
//!   its own, then the GPT-2 split over the rest.
//!
//! The GPT-2 split is a hand-written scanner (the `(?!\S)` lookahead is not a regular
//! expression), a port of llama.cpp's `unicode_regex_split_custom_gpt2`, so its corner cases
//! (a lone space before a digit, runs of spaces before a word) split the same way.

use super::unicode::{Cat, Categories};
use crate::error::{Error, Result};

/// A supported pre-tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pre {
    /// The GPT-2 regex alone.
    Gpt2,
    /// Every number character isolated, then the GPT-2 regex (`smollm` and its aliases).
    DigitsThenGpt2,
}

impl Pre {
    /// The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre = name`.
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name {
            "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "jina-v2-es" | "jina-v2-de"
            | "jina-v2-code" | "roberta-bpe" => Pre::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => Pre::DigitsThenGpt2,
            other => {
                return Err(Error::invalid_input(format!(
                    "tokenizer.ggml.pre `{other}` is not supported (gpt2, smollm and their \
                     aliases are)"
                ))
                .with_param("model"))
            }
        })
    }

    /// Splits `text` into words (as byte ranges of `text`).
    pub(crate) fn split(self, text: &str, cats: &Categories, out: &mut Vec<(usize, usize)>) {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let byte_at = |i: usize| chars.get(i).map_or(text.len(), |&(b, _)| b);
        let mut push = |lo: usize, hi: usize| out.push((byte_at(lo), byte_at(hi)));
        match self {
            Pre::Gpt2 => gpt2_split(&chars, 0, chars.len(), cats, &mut push),
            Pre::DigitsThenGpt2 => {
                let mut start = 0;
                for (i, &(_, c)) in chars.iter().enumerate() {
                    if cats.of(c) == Cat::Number {
                        gpt2_split(&chars, start, i, cats, &mut push);
                        push(i, i + 1);
                        start = i + 1;
                    }
                }
                gpt2_split(&chars, start, chars.len(), cats, &mut push);
            }
        }
    }
}

/// The GPT-2 split of `chars[lo..hi]`, calling `push(start, end)` per word (char indices).
fn gpt2_split(
    chars: &[(usize, char)],
    lo: usize,
    hi: usize,
    cats: &Categories,
    push: &mut dyn FnMut(usize, usize),
) {
    // Outside the fragment, a position has no category at all (llama.cpp's empty flags).
    let cpt = |p: usize| {
        if p >= lo && p < hi {
            Some(chars[p].1)
        } else {
            None
        }
    };
    let cat = |p: usize| cpt(p).map(|c| cats.of(c));
    let mut prev = lo;
    let mut add = |end: usize, prev: &mut usize| {
        if end > *prev {
            push(*prev, end);
        }
        *prev = end;
    };
    let mut pos = lo;
    while pos < hi {
        let c = chars[pos].1;
        // 's|'t|'re|'ve|'m|'ll|'d
        if c == '\'' && pos + 1 < hi {
            let n1 = chars[pos + 1].1;
            if matches!(n1, 's' | 't' | 'm' | 'd') {
                add(pos + 2, &mut prev);
                pos += 2;
                continue;
            }
            if pos + 2 < hi {
                let n2 = chars[pos + 2].1;
                if matches!((n1, n2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                    add(pos + 3, &mut prev);
                    pos += 3;
                    continue;
                }
            }
        }
        let space = usize::from(c == ' ');
        let cat2 = if c == ' ' { cat(pos + 1) } else { cat(pos) };
        match cat2 {
            // ` ?\p{L}+` and ` ?\p{N}+`
            Some(k @ (Cat::Letter | Cat::Number)) => {
                pos += space;
                while cat(pos) == Some(k) {
                    pos += 1;
                }
                add(pos, &mut prev);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+`
            Some(Cat::Other) => {
                pos += space;
                while cat(pos) == Some(Cat::Other) {
                    pos += 1;
                }
                add(pos, &mut prev);
                continue;
            }
            _ => {}
        }
        let mut spaces = 0;
        while cat(pos + spaces) == Some(Cat::Space) {
            spaces += 1;
        }
        if spaces > 1 && cpt(pos + spaces).is_some() {
            // `\s+(?!\S)`: leave the last space to start the next word.
            pos += spaces - 1;
            add(pos, &mut prev);
            continue;
        }
        if spaces > 0 {
            pos += spaces;
            add(pos, &mut prev);
            continue;
        }
        pos += 1;
        add(pos, &mut prev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: Pre, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        pre.split(text, &Categories::new(), &mut out);
        out.iter().map(|&(a, b)| &text[a..b]).collect()
    }

    #[test]
    fn gpt2_split_matches_the_regex() {
        assert_eq!(words(Pre::Gpt2, "Hello world"), ["Hello", " world"]);
        assert_eq!(
            words(Pre::Gpt2, "I'm here, they'll see"),
            ["I", "'m", " here", ",", " they", "'ll", " see"]
        );
        assert_eq!(words(Pre::Gpt2, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(Pre::Gpt2, "a  \n"), ["a", "  \n"]);
        assert_eq!(words(Pre::Gpt2, "x 123 !!"), ["x", " 123", " !!"]);
        assert_eq!(words(Pre::Gpt2, "  lead"), [" ", " lead"]);
    }

    #[test]
    fn smollm_isolates_every_digit() {
        assert_eq!(
            words(Pre::DigitsThenGpt2, "x 123"),
            ["x", " ", "1", "2", "3"]
        );
        assert_eq!(words(Pre::DigitsThenGpt2, "v2.0"), ["v", "2", ".", "0"]);
    }

    #[test]
    fn unknown_pre_tokenizer_is_an_error() {
        let err = Pre::from_name("llama-bpe").unwrap_err();
        assert!(
            err.to_string().contains("`llama-bpe` is not supported"),
            "{err}"
        );
    }
}
