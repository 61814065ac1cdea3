//! Masks against oracles over a synthetic vocabulary (256 single bytes, multi-byte UTF-8
//! tokens, tokens that split a character, an EOS, a control token and an empty token).
//!
//! - Brute force: at every automaton state reached by a breadth-first walk over tokens, the
//!   mask bit of each token is set ⇔ advancing by that token keeps the matcher alive.
//! - Properties: strings drawn from the pattern (and mutations of them) agree with the `regex`
//!   crate; drawn strings are accepted token by token under several tokenizations; outputs
//!   sampled through the masks full-match the pattern under `regex`.

mod constraint_support;

use constraint_support::*;
use poot::constraint::Matcher;
use poot::regex::DEAD;
use poot::vocab::TokenId;
use std::collections::{HashSet, VecDeque};

/// Patterns exercising counted repetition, alternation with shared prefixes, Unicode classes,
/// escapes, a leading space (SentencePiece-style words) and `.` over multi-byte characters.
const PATTERNS: &[&str] = &[
    "[0-9]{4}-[0-9]{2}-[0-9]{2}",
    "(ab|a)(bc|c)*d?",
    r"\p{Greek}+( \p{Greek}+)*",
    "[a-zé]{1,5}",
    "(yes|no|none|maybe)",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r#""([^"\\]|\\.)*""#,
    " the [a-z]+",
    ".{0,4}",
    "[αβγ]+é?",
    "x*",
    "(?i)hello",
    r"\d{1,3}",
];

fn bit(mask: &[u32], t: TokenId) -> bool {
    mask[t as usize / 32] >> (t % 32) & 1 == 1
}

#[test]
fn mask_bit_is_set_iff_the_token_keeps_the_matcher_alive() {
    let s = synthetic();
    let n = s.vocab.len() as TokenId;
    for pattern in PATTERNS {
        let start = matcher(pattern, &s.vocab);
        let dfa = start
            .constraint()
            .dfa()
            .expect("a regex constraint")
            .clone();
        // Breadth-first over matchers, one per distinct automaton state reached.
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([(start, Vec::<u8>::new())]);
        seen.insert(dfa.start());
        let mut states = 0;
        while let Some((m, output)) = queue.pop_front() {
            states += 1;
            let mask = m.mask().unwrap();
            let words = mask.words();
            let state = dfa.walk(dfa.start(), &output);
            for t in 0..n {
                let mut next = m.clone();
                let alive = next.advance(t).is_ok();
                assert_eq!(
                    bit(words, t),
                    alive,
                    "{pattern}: after {output:?}, token {t} ({:?})",
                    s.vocab.bytes(t)
                );
                assert_eq!(m.is_allowed(t), alive);
                if alive && !s.vocab.is_eos(t) {
                    let mut out = output.clone();
                    out.extend_from_slice(s.vocab.bytes(t));
                    let next_state = dfa.walk(state, s.vocab.bytes(t));
                    if seen.insert(next_state) && seen.len() < 400 {
                        queue.push_back((next, out));
                    }
                }
            }
            assert_eq!(
                bit(words, s.eos),
                m.is_accepting(),
                "{pattern}: EOS after {output:?}"
            );
            assert!(
                !bit(words, s.control) && !bit(words, s.empty),
                "special tokens are never allowed"
            );
            // A live state always has a way on: the mask is never empty before the end.
            assert!(
                mask.count_allowed() > 0,
                "{pattern}: stuck after {output:?}"
            );
        }
        // Every automaton here but `x*`'s (one live state: the minimal DFA) has more than one.
        assert!(
            states > 1 || dfa.state_count() == 2,
            "{pattern}: explored {states} of {} states",
            dfa.state_count() - 1
        );
    }
}

/// A string of the pattern's language drawn by a random walk over live bytes.
fn draw(dfa: &poot::regex::Dfa, rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut state = dfa.start();
    loop {
        let live: Vec<u8> = (0..=255u8)
            .filter(|&b| dfa.next(state, b) != DEAD)
            .collect();
        let stop =
            dfa.is_accepting(state) && (live.is_empty() || out.len() >= max_len || rng.chance(0.2));
        if stop {
            return out;
        }
        // Every live state reaches a match, so there is always a live byte here.
        let b = live[rng.below(live.len())];
        out.push(b);
        state = dfa.next(state, b);
    }
}

const ALPHABET: &[&str] = &[
    "a", "b", "c", "d", "é", "α", "β", "0", "1", "9", "-", " ", ".", "\"", "\\", "e", "E", "+",
    "x", "\n", "t", "h",
];

fn mutate(s: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut chars: Vec<Vec<u8>> = String::from_utf8_lossy(s)
        .chars()
        .map(|c| c.to_string().into_bytes())
        .collect();
    let piece = ALPHABET[rng.below(ALPHABET.len())].as_bytes().to_vec();
    match rng.below(3) {
        0 if !chars.is_empty() => {
            let i = rng.below(chars.len());
            chars.remove(i);
        }
        1 if !chars.is_empty() => {
            let i = rng.below(chars.len());
            chars[i] = piece;
        }
        _ => {
            let i = rng.below(chars.len() + 1);
            chars.insert(i, piece);
        }
    }
    let mut out = chars.concat();
    if rng.chance(0.1) && !out.is_empty() {
        out.truncate(rng.below(out.len())); // may cut a character in half
    }
    out
}

#[test]
fn drawn_and_mutated_strings_agree_with_the_regex_crate() {
    let mut rng = Rng::new(1);
    for pattern in PATTERNS {
        let dfa = poot::regex::Dfa::new(pattern).unwrap();
        let re = oracle(pattern);
        for _ in 0..200 {
            let s = draw(&dfa, &mut rng, 12);
            assert!(
                re.is_match(&s),
                "{pattern}: drew {:?}, which regex rejects",
                String::from_utf8_lossy(&s)
            );
            for _ in 0..3 {
                let m = mutate(&s, &mut rng);
                assert_eq!(dfa.matches(&m), re.is_match(&m), "{pattern}: {m:?}");
            }
        }
    }
}

fn accept_all(m: &mut Matcher, tokens: &[TokenId], eos: TokenId, what: &str) {
    for (i, &t) in tokens.iter().enumerate() {
        assert!(
            m.mask().unwrap().is_allowed(t as usize),
            "{what}: token {i} ({t}) not in the mask"
        );
        m.advance(t)
            .unwrap_or_else(|e| panic!("{what}: token {i}: {e}"));
    }
    assert!(m.is_accepting(), "{what}: not accepting at the end");
    assert!(
        m.mask().unwrap().is_allowed(eos as usize),
        "{what}: EOS not allowed at the end"
    );
    m.advance(eos).unwrap();
    assert!(m.is_finished());
}

#[test]
fn drawn_strings_are_accepted_under_several_tokenizations() {
    let s = synthetic();
    let mut rng = Rng::new(2);
    for pattern in PATTERNS {
        let mut m = matcher(pattern, &s.vocab);
        let dfa = m.constraint().dfa().expect("a regex constraint").clone();
        for _ in 0..40 {
            let text = draw(&dfa, &mut rng, 16);
            let shown = format!("{pattern} / {:?}", String::from_utf8_lossy(&text));
            let tokenizations = [
                greedy_tokenization(&s.vocab, &text),
                byte_tokenization(&text),
                random_tokenization(&s.vocab, &text, &mut rng),
                random_tokenization(&s.vocab, &text, &mut rng),
            ];
            for tokens in &tokenizations {
                m.reset();
                accept_all(&mut m, tokens, s.eos, &shown);
            }
            // Rolling back to every point and replaying gives the same masks.
            let tokens = &tokenizations[2];
            m.reset();
            let mut masks = Vec::new();
            for &t in tokens {
                masks.push(m.mask().unwrap());
                m.advance(t).unwrap();
            }
            for k in (1..=tokens.len()).rev() {
                m.rollback(1).unwrap();
                assert_eq!(
                    m.mask().unwrap(),
                    masks[k - 1],
                    "{shown}: after rolling back to {}",
                    k - 1
                );
            }
        }
    }
}

#[test]
fn sampled_outputs_full_match_under_the_regex_crate() {
    let s = synthetic();
    let mut rng = Rng::new(3);
    for pattern in PATTERNS {
        let re = oracle(pattern);
        let mut m = matcher(pattern, &s.vocab);
        let mut complete = 0;
        for _ in 0..100 {
            m.reset();
            let mut out = Vec::new();
            for _ in 0..24 {
                let mask = m.mask().unwrap();
                let allowed: Vec<TokenId> = (0..s.vocab.len() as TokenId)
                    .filter(|&t| mask.is_allowed(t as usize))
                    .collect();
                assert!(!allowed.is_empty(), "{pattern}: stuck after {out:?}");
                let text: Vec<TokenId> = allowed.iter().copied().filter(|&t| t != s.eos).collect();
                if m.is_accepting() && (text.is_empty() || rng.chance(0.3)) {
                    m.advance(s.eos).unwrap();
                    break;
                }
                let t = text[rng.below(text.len())];
                m.advance(t).unwrap();
                out.extend_from_slice(s.vocab.bytes(t));
            }
            if m.is_finished() {
                complete += 1;
                assert!(
                    re.is_match(&out),
                    "{pattern}: sampled {:?}",
                    String::from_utf8_lossy(&out)
                );
            }
        }
        assert!(
            complete > 10,
            "{pattern}: only {complete} of 100 samples completed"
        );
    }
}

#[test]
fn multibyte_characters_across_token_boundaries() {
    let s = synthetic();
    let id = |b: &[u8]| token_for(&s.vocab, b).unwrap();
    let mut m = matcher("aαβ", &s.vocab);
    // "a\xCE" ends in the middle of α: allowed, and then only α's tail can follow.
    m.advance(id(b"a\xCE")).unwrap();
    assert!(!m.is_accepting());
    assert_eq!(m.forced_bytes(), "\u{3B1}β".as_bytes()[1..].to_vec());
    let mask = m.mask().unwrap();
    assert!(mask.is_allowed(0xB1) && mask.is_allowed(id(b"\xB1\xCE") as usize));
    assert!(
        !mask.is_allowed(id("α".as_bytes()) as usize),
        "a whole α would repeat the lead byte"
    );
    m.advance(id(b"\xB1\xCE")).unwrap();
    m.advance(0xB2).unwrap();
    assert!(m.is_accepting());

    // A Unicode class allows the half-character tokens that can start one of its members.
    let m = matcher(r"\p{Greek}", &s.vocab);
    let mask = m.mask().unwrap();
    assert!(mask.is_allowed(0xCE) && mask.is_allowed(id("γ".as_bytes()) as usize));
    assert!(!mask.is_allowed(0xC3), "C3 starts é, not a Greek letter");
    assert!(
        !mask.is_allowed(id(b"\xB1 ") as usize),
        "a continuation byte cannot start"
    );

    // `.` is a whole character: é then a space, or é split over "\xC3" + "\xA9x".
    let mut m = matcher(".x", &s.vocab);
    m.advance(0xC3).unwrap();
    assert!(m.mask().unwrap().is_allowed(id(b"\xA9x") as usize));
    m.advance(id(b"\xA9x")).unwrap();
    assert!(m.is_accepting());
}

#[test]
fn forced_bytes_and_disallowed_tokens_leave_state_unchanged() {
    let s = synthetic();
    let mut m = matcher(r#"\{"name": "[a-z]+"\}"#, &s.vocab);
    assert_eq!(m.forced_bytes(), br#"{"name": ""#.to_vec());
    let before = m.mask().unwrap();
    let err = m.advance(u32::from(b'x')).unwrap_err();
    assert!(err.to_string().contains("is not allowed here"), "{err}");
    assert_eq!(m.token_count(), 0);
    assert_eq!(m.mask().unwrap(), before);
    assert!(m
        .advance(s.control)
        .unwrap_err()
        .to_string()
        .contains("special token"));
    assert!(m
        .advance(s.eos)
        .unwrap_err()
        .to_string()
        .contains("does not complete"));
    assert!(m
        .advance(s.vocab.len() as u32)
        .unwrap_err()
        .to_string()
        .contains("outside the vocabulary"));
    for &b in br#"{"name": "ab"}"# {
        m.advance(u32::from(b)).unwrap();
    }
    assert!(m.is_accepting());
    assert!(m.forced_bytes().is_empty());
    // Forced bytes stop where the output could end.
    let m = matcher("ab(cd)?", &s.vocab);
    assert_eq!(m.forced_bytes(), b"ab");
}

#[test]
fn matchers_share_one_constraint_and_its_cache() {
    let s = synthetic();
    let first = matcher("[0-9]{4}-[0-9]{2}", &s.vocab);
    let constraint = first.constraint().clone();
    let start_mask = first.mask().unwrap();
    let mut a = Matcher::new(constraint.clone());
    let mut b = Matcher::new(constraint.clone());
    a.advance(token_for(&s.vocab, b"2024").unwrap()).unwrap();
    b.advance(token_for(&s.vocab, b"20").unwrap()).unwrap();
    assert_ne!(a.mask().unwrap(), b.mask().unwrap());
    let cached = constraint.cached_states();
    assert_eq!(cached, 3);
    let c = Matcher::new(constraint.clone());
    assert_eq!(c.mask().unwrap(), start_mask);
    assert_eq!(
        constraint.cached_states(),
        cached,
        "the start state's mask was already cached"
    );
    let mut words = vec![0u32; 1];
    assert!(
        c.fill_mask(&mut words).is_err(),
        "a mask of the wrong length is an error"
    );
}
