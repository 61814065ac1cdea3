//! Unicode categories the pre-tokenizers split on: letters (`\p{L}`), numbers (`\p{N}`) and
//! white space (the `White_Space` property, as llama.cpp's `unicode_set_whitespace`).
//!
//! The letter and number tables come from `regex-syntax`'s Unicode data (already a dependency
//! of the constraint engine), so the crate carries no second copy of the tables.

use regex_syntax::hir::{Class, HirKind};

/// Sorted, disjoint inclusive code point ranges of one category.
#[derive(Debug, Clone)]
pub(crate) struct Ranges(Vec<(u32, u32)>);

impl Ranges {
    fn of(class: &str) -> Ranges {
        let hir = regex_syntax::parse(class).expect("a Unicode class regex-syntax knows");
        match hir.kind() {
            HirKind::Class(Class::Unicode(cls)) => Ranges(
                cls.ranges()
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32))
                    .collect(),
            ),
            other => unreachable!("{class} parsed to {other:?}"),
        }
    }

    fn contains(&self, c: char) -> bool {
        let c = c as u32;
        match self.0.binary_search_by(|&(lo, _)| lo.cmp(&c)) {
            Ok(_) => true,
            Err(0) => false,
            Err(i) => c <= self.0[i - 1].1,
        }
    }
}

/// The category of one code point, as the GPT-2 style splitters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cat {
    Letter,
    Number,
    Space,
    Other,
}

/// Letter and number tables, built once per tokenizer (~1 ms).
#[derive(Debug, Clone)]
pub(crate) struct Categories {
    letters: Ranges,
    numbers: Ranges,
}

impl Categories {
    pub(crate) fn new() -> Self {
        Categories {
            letters: Ranges::of(r"\p{L}"),
            numbers: Ranges::of(r"\p{N}"),
        }
    }

    pub(crate) fn of(&self, c: char) -> Cat {
        if c.is_ascii() {
            return match c {
                'a'..='z' | 'A'..='Z' => Cat::Letter,
                '0'..='9' => Cat::Number,
                '\t'..='\r' | ' ' => Cat::Space,
                _ => Cat::Other,
            };
        }
        if c.is_whitespace() {
            Cat::Space
        } else if self.letters.contains(c) {
            Cat::Letter
        } else if self.numbers.contains(c) {
            Cat::Number
        } else {
            Cat::Other
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_of_sample_characters() {
        let c = Categories::new();
        for (ch, want) in [
            ('a', Cat::Letter),
            ('é', Cat::Letter),
            ('中', Cat::Letter),
            ('ß', Cat::Letter),
            ('7', Cat::Number),
            ('٣', Cat::Number),
            ('½', Cat::Number),
            (' ', Cat::Space),
            ('\n', Cat::Space),
            ('\u{3000}', Cat::Space),
            ('\u{a0}', Cat::Space),
            ('!', Cat::Other),
            ('😀', Cat::Other),
            ('\u{301}', Cat::Other), // a combining mark is not a letter
        ] {
            assert_eq!(c.of(ch), want, "{ch:?}");
        }
    }
}
