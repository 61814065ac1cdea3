//! Masks of the pushdown engines against a brute-force oracle over a synthetic vocabulary
//! (all 256 bytes, tokens that span structure boundaries, split UTF-8 characters, an EOS, a
//! control token and an empty token): at every parse state reached by a breadth-first walk
//! over tokens, a token's mask bit is set ⇔ advancing by it keeps the matcher alive, and the
//! EOS bit ⇔ the output is complete. Also: rolling back and replaying gives the same masks,
//! and forced bytes are the only way on.

mod grammar_support;

use grammar_support::*;
use poot::constraint::Matcher;
use poot::vocab::TokenId;
use std::collections::{HashSet, VecDeque};

fn bit(mask: &[u32], t: TokenId) -> bool {
    mask[t as usize / 32] >> (t % 32) & 1 == 1
}

/// Breadth-first over outputs from `start`, up to `limit` distinct outputs.
fn oracle(name: &str, start: Matcher, s: &Synthetic, limit: usize) {
    let n = s.vocab.len() as TokenId;
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([(start, Vec::<u8>::new())]);
    seen.insert(Vec::new());
    let mut states = 0;
    while let Some((m, output)) = queue.pop_front() {
        states += 1;
        let mask = m.mask().unwrap();
        let words = mask.words();
        for t in 0..n {
            let mut next = m.clone();
            let alive = next.advance(t).is_ok();
            assert_eq!(
                bit(words, t),
                alive,
                "{name}: after {:?}, token {t} ({:?})",
                String::from_utf8_lossy(&output),
                String::from_utf8_lossy(s.vocab.bytes(t))
            );
            assert_eq!(m.is_allowed(t), alive, "{name}: is_allowed({t})");
            if alive && !s.vocab.is_eos(t) {
                let mut out = output.clone();
                out.extend_from_slice(s.vocab.bytes(t));
                if seen.len() < limit && seen.insert(out.clone()) {
                    queue.push_back((next, out));
                }
            }
        }
        assert_eq!(
            bit(words, s.eos),
            m.is_accepting(),
            "{name}: EOS after {output:?}"
        );
        assert!(!bit(words, s.control) && !bit(words, s.empty));
        assert!(mask.count_allowed() > 0, "{name}: stuck after {output:?}");
        // Forced bytes are the only continuation.
        let forced = m.forced_bytes();
        if let Some(&b) = forced.first() {
            for other in 0..=255u8 {
                if other != b {
                    assert!(
                        !bit(words, TokenId::from(other)),
                        "{name}: {other} beside forced {b}"
                    );
                }
            }
        }
    }
    assert!(states > 20, "{name}: explored {states} states");
}

#[test]
fn grammar_mask_bit_is_set_iff_the_token_keeps_the_parse_alive() {
    let s = synthetic();
    for file in GRAMMARS {
        oracle(
            file,
            grammar_matcher(&grammar_text(file), &s.vocab),
            &s,
            150,
        );
    }
}

#[test]
fn json_object_mask_bit_is_set_iff_the_token_keeps_the_value_alive() {
    let s = synthetic();
    oracle("json_object", json_matcher(&s.vocab), &s, 400);
}

#[test]
fn deep_and_spaced_positions_agree_with_the_oracle() {
    // Start the breadth-first walks from positions a walk from the start reaches late: deep
    // nesting, long whitespace runs, the middle of escapes and of split characters.
    let s = synthetic();
    let json_prefixes = [
        "[[[[[[[[[[{\"a\":[{\"b\":",
        &format!("[{}", " ".repeat(60)),
        "{\"k\": \"\\ud83d",
        "[\"\u{3053}",
        "[1, -0.5e",
    ];
    for p in json_prefixes {
        let mut m = json_matcher(&s.vocab);
        for t in byte_tokenization(p.as_bytes()) {
            m.advance(t).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        }
        oracle(&format!("json_object after {p:?}"), m, &s, 60);
    }
    let grammar_prefixes = [
        ("arithmetic.gbnf", "x = ((((1 + f(2, (3"),
        ("c_like.gbnf", "int f() { if (a) { while (b) { return"),
        ("json.gbnf", "{\"a\": [[{\"b\": \"x"),
        ("japanese.gbnf", "日本、"),
        ("balanced.gbnf", "([{([{"),
    ];
    for (file, p) in grammar_prefixes {
        let mut m = grammar_matcher(&grammar_text(file), &s.vocab);
        for t in byte_tokenization(p.as_bytes()) {
            m.advance(t).unwrap_or_else(|e| panic!("{file} {p:?}: {e}"));
        }
        oracle(&format!("{file} after {p:?}"), m, &s, 60);
    }
}

#[test]
fn rollback_and_replay_give_the_same_masks() {
    let s = synthetic();
    let mut rng = Rng::new(3);
    let cases = [
        ("json.gbnf", "{\"a\": [1, {\"b\": \"é\"}], \"c\": null}"),
        ("arithmetic.gbnf", "x = 3\nf(x, (2 + x) * 4)\n"),
        (
            "c_like.gbnf",
            "int main() { int x = 1; while (x) { x = x - 1; } return x; }",
        ),
        ("japanese.gbnf", "こんにちは、日本。"),
    ];
    for (file, text) in cases {
        let mut m = grammar_matcher(&grammar_text(file), &s.vocab);
        check_rollback(&mut m, text, &s, &mut rng);
    }
    let mut m = json_matcher(&s.vocab);
    check_rollback(
        &mut m,
        "[[{\"a\": [1, 2]}], {\"b\": {\"c\": []}}]",
        &s,
        &mut rng,
    );
}

fn check_rollback(m: &mut Matcher, text: &str, s: &Synthetic, rng: &mut Rng) {
    let tokens = random_tokenization(&s.vocab, text.as_bytes(), rng);
    let mut masks = Vec::new();
    for &t in &tokens {
        masks.push(m.mask().unwrap());
        m.advance(t).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    }
    assert!(m.is_accepting(), "{text:?}");
    m.advance(s.eos).unwrap();
    assert!(m.is_finished() && m.mask().unwrap().count_allowed() == 0);
    m.rollback(1).unwrap();
    for k in (1..=tokens.len()).rev() {
        m.rollback(1).unwrap();
        assert_eq!(
            m.mask().unwrap(),
            masks[k - 1],
            "{text:?}: rolled back to {}",
            k - 1
        );
    }
    assert!(m.rollback(1).is_err());
    // Replaying after a partial rollback lands in the same place.
    for &t in &tokens {
        m.advance(t).unwrap();
    }
    m.rollback(tokens.len() / 2).unwrap();
    for &t in &tokens[tokens.len() - tokens.len() / 2..] {
        m.advance(t).unwrap();
    }
    assert!(m.is_accepting());
    m.reset();
    assert_eq!(m.token_count(), 0);
    assert_eq!(m.mask().unwrap(), masks[0]);
}

#[test]
fn forced_bytes_follow_literals() {
    let s = synthetic();
    let mut m = grammar_matcher("root ::= \"hello\" (\" world\" | \"!\")", &s.vocab);
    assert_eq!(m.forced_bytes(), b"hello");
    for t in byte_tokenization(b"hello") {
        m.advance(t).unwrap();
    }
    assert_eq!(m.forced_bytes(), b"");
    m.advance(TokenId::from(b' ')).unwrap();
    assert_eq!(m.forced_bytes(), b"world");
    let mut j = json_matcher(&s.vocab);
    j.advance(TokenId::from(b't')).unwrap();
    assert_eq!(j.forced_bytes(), b"rue");
    j.advance(token_for(&s.vocab, b"rue").unwrap_or(TokenId::from(b'r')))
        .ok();
}
