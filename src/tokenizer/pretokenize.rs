//! Pre-tokenizers: how byte-level BPE splits text into words before merging.
//!
//! llama.cpp picks the split from `tokenizer.ggml.pre`. Supported here:
//! - `gpt2` (and its aliases in [`Pre::from_name`]):
//!   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
//! - `smollm` (and the other names llama.cpp maps to the same regexes: `starcoder`,
//!   `refact`, `command-r`, `codeshell`, `exaone`, `minerva`): first every number character on
//!   its own, then the GPT-2 split over the rest;
//! - `llama-bpe` (Llama 3.x, and the other names llama.cpp maps to the same regex):
//!   `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
//! - `qwen2` (Qwen2, Qwen2.5, Qwen3, and the other names llama.cpp maps to the same regex):
//!   the Llama 3 regex with `\p{N}` (one number character a word) for `\p{N}{1,3}`.
//!
//! The splits are hand-written scanners (the `(?!\S)` lookahead is not a regular expression).
//! The GPT-2 one is a port of llama.cpp's `unicode_regex_split_custom_gpt2`, so its corner
//! cases (a lone space before a digit, runs of spaces before a word) split the same way; the
//! Llama 3 / Qwen2 one follows the regex alternative by alternative (leftmost alternative
//! first, greedy within it), as llama.cpp's `unicode_regex_split_custom_llama3` does.
//! `tests/data/pretokenize/*.json` (from `scripts/pretokenize_fixture.py`) hold what the
//! Python `regex` module finds for each regex over ~900 strings; the tests below compare.
//!
//! One deliberate difference from llama.cpp: `(?i:'s)` also matches `'ſ` (U+017F LATIN SMALL
//! LETTER LONG S case-folds to `s`), as in the `regex` module; llama.cpp lower-cases instead of
//! case-folding (its Qwen2 regex spells the contractions `'[sS]`), so it keeps `'ſt` one word
//! where this gives `'ſ`, `t`.

use super::unicode::{Cat, Categories};
use crate::error::{Error, Result};

/// A supported pre-tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pre {
    /// The GPT-2 regex alone.
    Gpt2,
    /// Every number character isolated, then the GPT-2 regex (`smollm` and its aliases).
    DigitsThenGpt2,
    /// The Llama 3 regex: numbers in runs of up to three (`llama-bpe` and its aliases).
    Llama3,
    /// The Llama 3 regex with one number character a word (`qwen2` and its aliases).
    Qwen2,
}

impl Pre {
    /// The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre = name`.
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name {
            "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "jina-v2-es" | "jina-v2-de"
            | "jina-v2-code" | "roberta-bpe" => Pre::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => Pre::DigitsThenGpt2,
            // llama.cpp's LLAMA3, DBRX, SMAUG and CHATGLM4 pre-tokenizer types: one regex.
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => Pre::Llama3,
            // llama.cpp's QWEN2, STABLELM2, HUNYUAN and SOLAR_OPEN pre-tokenizer types.
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "megrez" | "stablelm2" | "hunyuan"
            | "solar-open" => Pre::Qwen2,
            other => {
                return Err(Error::invalid_input(format!(
                    "tokenizer.ggml.pre `{other}` is not supported (gpt2, smollm, llama-bpe, \
                     qwen2 and their aliases are)"
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
            Pre::Llama3 => llama3_split(&chars, 3, cats, &mut push),
            Pre::Qwen2 => llama3_split(&chars, 1, cats, &mut push),
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

/// The Llama 3 split of `chars` with numbers in runs of at most `max_digits` (3 for Llama 3,
/// 1 for Qwen2), calling `push(start, end)` per word (char indices). Every character starts a
/// match of some alternative, so the words cover the text.
fn llama3_split(
    chars: &[(usize, char)],
    max_digits: usize,
    cats: &Categories,
    push: &mut dyn FnMut(usize, usize),
) {
    let n = chars.len();
    let cpt = |p: usize| chars.get(p).map(|&(_, c)| c);
    let cat = |p: usize| cpt(p).map(|c| cats.of(c));
    let is_newline = |p: usize| matches!(cpt(p), Some('\r' | '\n'));
    // `(?i:...)` case-folds: ASCII letters, and U+017F LONG S folds to `s`.
    let folded = |p: usize| match cpt(p) {
        Some('\u{17f}') => Some('s'),
        c => c.map(|c| c.to_ascii_lowercase()),
    };
    let mut pos = 0;
    while pos < n {
        let start = pos;
        let c = chars[pos].1;
        let here = cats.of(c);
        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if c == '\'' {
            let n1 = folded(pos + 1);
            let len = if matches!(n1, Some('s' | 't' | 'm' | 'd')) {
                2
            } else if matches!(
                (n1, folded(pos + 2)),
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                3
            } else {
                0
            };
            if len > 0 {
                pos += len;
                push(start, pos);
                continue;
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        let lead = usize::from(here != Cat::Letter && here != Cat::Number && !is_newline(pos));
        if cat(pos + lead) == Some(Cat::Letter) {
            pos += lead;
            while cat(pos) == Some(Cat::Letter) {
                pos += 1;
            }
            push(start, pos);
            continue;
        }
        // \p{N}{1,max_digits}
        if here == Cat::Number {
            while pos - start < max_digits && cat(pos) == Some(Cat::Number) {
                pos += 1;
            }
            push(start, pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let space = usize::from(c == ' ');
        if cat(pos + space) == Some(Cat::Other) {
            pos += space;
            while cat(pos) == Some(Cat::Other) {
                pos += 1;
            }
            while is_newline(pos) {
                pos += 1;
            }
            push(start, pos);
            continue;
        }
        // Only white space is left: `here` is Cat::Space.
        let mut end = pos;
        let mut after_last_newline = None;
        while cat(end) == Some(Cat::Space) {
            end += 1;
            if is_newline(end - 1) {
                after_last_newline = Some(end);
            }
        }
        pos = match after_last_newline {
            // \s*[\r\n]+: up to the run's last line break.
            Some(e) => e,
            // \s+(?!\S): before a non-space, leave the last space to start the next word.
            None if end < n && end - pos > 1 => end - 1,
            // \s+
            None => end,
        };
        push(start, pos);
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
    fn llama3_and_qwen2_split_as_their_regexes() {
        for pre in [Pre::Llama3, Pre::Qwen2] {
            assert_eq!(
                words(pre, "I'M here, THEY'LL see"),
                ["I", "'M", " here", ",", " THEY", "'LL", " see"]
            );
            assert_eq!(
                words(pre, "!abc  def\n\n  x"),
                ["!abc", " ", " def", "\n\n", " ", " x"]
            );
            assert_eq!(words(pre, "x.\r\n\r\ny"), ["x", ".\r\n\r\n", "y"]);
            assert_eq!(words(pre, "a \t\n b  "), ["a", " \t\n", " b", "  "]);
            assert_eq!(words(pre, "'x 'll"), ["'x", " '", "ll"]);
        }
        assert_eq!(
            words(Pre::Llama3, "x 1234567"),
            ["x", " ", "123", "456", "7"]
        );
        assert_eq!(words(Pre::Qwen2, "x 123"), ["x", " ", "1", "2", "3"]);
    }

    /// Every case of `tests/data/pretokenize/<name>.json` (the Python `regex` module's
    /// `findall`, see `scripts/pretokenize_fixture.py`) splits the same here.
    fn check_fixture(pre: Pre, name: &str, json: &str) {
        let cats = Categories::new();
        let cases: serde_json::Value = serde_json::from_str(json).expect("fixture JSON");
        let cases = cases.as_array().expect("a list of cases");
        assert!(cases.len() > 800, "{name}: {} cases", cases.len());
        let mut failures = Vec::new();
        for case in cases {
            let text = case["text"].as_str().expect("text");
            let want: Vec<&str> = case["pieces"]
                .as_array()
                .expect("pieces")
                .iter()
                .map(|p| p.as_str().expect("a piece"))
                .collect();
            let mut out = Vec::new();
            pre.split(text, &cats, &mut out);
            let got: Vec<&str> = out.iter().map(|&(a, b)| &text[a..b]).collect();
            if got != want {
                failures.push(format!("{text:?}\n   got  {got:?}\n   want {want:?}"));
            }
        }
        assert!(
            failures.is_empty(),
            "{name}: {} of {} cases differ from the regex:\n{}",
            failures.len(),
            cases.len(),
            failures[..failures.len().min(20)].join("\n")
        );
    }

    #[test]
    fn gpt2_matches_the_regex_oracle() {
        check_fixture(
            Pre::Gpt2,
            "gpt2",
            include_str!("../../tests/data/pretokenize/gpt2.json"),
        );
    }

    #[test]
    fn smollm_matches_the_regex_oracle() {
        check_fixture(
            Pre::DigitsThenGpt2,
            "smollm",
            include_str!("../../tests/data/pretokenize/smollm.json"),
        );
    }

    #[test]
    fn llama3_matches_the_regex_oracle() {
        check_fixture(
            Pre::Llama3,
            "llama3",
            include_str!("../../tests/data/pretokenize/llama3.json"),
        );
    }

    #[test]
    fn qwen2_matches_the_regex_oracle() {
        check_fixture(
            Pre::Qwen2,
            "qwen2",
            include_str!("../../tests/data/pretokenize/qwen2.json"),
        );
    }

    #[test]
    fn pre_tokenizer_names() {
        for (name, pre) in [
            ("gpt2", Pre::Gpt2),
            ("smollm", Pre::DigitsThenGpt2),
            ("llama-bpe", Pre::Llama3),
            ("llama3", Pre::Llama3),
            ("smaug-bpe", Pre::Llama3),
            ("dbrx", Pre::Llama3),
            ("qwen2", Pre::Qwen2),
            ("deepseek-r1-qwen", Pre::Qwen2),
            ("stablelm2", Pre::Qwen2),
        ] {
            assert_eq!(Pre::from_name(name).unwrap(), pre, "{name}");
        }
    }

    #[test]
    fn unknown_pre_tokenizer_is_an_error() {
        let err = Pre::from_name("deepseek-llm").unwrap_err();
        assert!(
            err.to_string().contains("`deepseek-llm` is not supported"),
            "{err}"
        );
    }
}
