//! Property tests against the independent recognizer of tests/grammar_support:
//! - outputs sampled through the masks (the walk `poot sample` takes: uniform over the
//!   allowed text tokens, ending with probability 0.3 when the end is allowed, here with a
//!   preference for closing tokens late in a walk so that long sentences complete) parse under
//!   it, over the synthetic vocabulary and over the reference model's 49,152 tokens;
//! - mutations of accepted strings get the same verdict from the engine and from it.
//!
//! The reference-vocabulary test needs `POOT_REFERENCE_GGUF` (SmolLM2-135M-Instruct.Q4_1.gguf)
//! and fails without it.

mod grammar_support;

use grammar_support::*;
use poot::constraint::Matcher;
use poot::limits::MAX_JSON_WHITESPACE;
use poot::vocab::{TokenId, Vocabulary};
use serde_json::Value;
use std::sync::Arc;

/// Tokens that close structures, preferred in the second half of a walk so that walks also
/// complete in the grammars whose sentences need many closers (a uniform walk over 49k
/// tokens rarely emits the `\n` that ends a list item). Every pick is from the mask.
const CLOSERS: &[&str] = &["}", ")", "]", ";", "\n", "\"", "。", "0", " e5\n", "\n"];

/// One seeded walk through the masks; `Some(output)` when it ended with EOS.
fn sample(
    m: &mut Matcher,
    vocab: &Vocabulary,
    rng: &mut Rng,
    max_tokens: usize,
) -> Option<Vec<u8>> {
    m.reset();
    let closers: Vec<TokenId> = CLOSERS
        .iter()
        .filter_map(|c| token_for(vocab, c.as_bytes()))
        .collect();
    let mut out = Vec::new();
    for step in 0..max_tokens {
        let mask = m.mask().unwrap();
        if m.is_accepting() && rng.chance(0.3) {
            return Some(out);
        }
        let preferred: Vec<TokenId> = closers
            .iter()
            .copied()
            .filter(|&t| mask.is_allowed(t as usize))
            .collect();
        let t = if step >= max_tokens / 2 && !preferred.is_empty() && rng.chance(0.7) {
            preferred[rng.below(preferred.len())]
        } else {
            let text: Vec<TokenId> = (0..vocab.len() as TokenId)
                .filter(|&t| mask.is_allowed(t as usize) && !vocab.is_eos(t))
                .collect();
            if text.is_empty() {
                assert!(
                    m.is_accepting(),
                    "stuck after {:?}",
                    String::from_utf8_lossy(&out)
                );
                return Some(out);
            }
            text[rng.below(text.len())]
        };
        m.advance(t).unwrap();
        out.extend_from_slice(vocab.bytes(t));
    }
    None
}

fn check_samples(vocab: &Arc<Vocabulary>, n: usize, max_tokens: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    for file in GRAMMARS {
        let text = grammar_text(file);
        let reference = Reference::new(&text);
        let mut m = grammar_matcher(&text, vocab);
        let mut complete = 0;
        for _ in 0..n {
            if let Some(out) = sample(&mut m, vocab, &mut rng, max_tokens) {
                assert!(
                    reference.matches(&out),
                    "{file}: sampled {:?}, which the reference rejects",
                    String::from_utf8_lossy(&out)
                );
                complete += 1;
            }
        }
        assert!(complete > 0, "{file}: no sample completed");
    }
    let mut m = json_matcher(vocab);
    let mut complete = 0;
    for _ in 0..n {
        if let Some(out) = sample(&mut m, vocab, &mut rng, max_tokens) {
            assert!(
                reference_json(&out, MAX_JSON_WHITESPACE),
                "json_object: sampled {:?}",
                String::from_utf8_lossy(&out)
            );
            complete += 1;
        }
    }
    assert!(complete > 0, "json_object: no sample completed");
}

#[test]
fn sampled_outputs_parse_under_the_reference_synthetic_vocabulary() {
    check_samples(&synthetic().vocab, 60, 64, 11);
}

#[test]
fn sampled_outputs_parse_under_the_reference_smollm2_vocabulary() {
    let path = std::env::var("POOT_REFERENCE_GGUF").unwrap_or_else(|_| {
        panic!(
            "POOT_REFERENCE_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf, or run `make test`"
        )
    });
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let vocab = Arc::new(Vocabulary::from_gguf_bytes(&file).unwrap());
    assert_eq!(vocab.len(), 49152);
    check_samples(&vocab, 16, 120, 12);
}

const PIECES: &[&str] = &[
    "a", "x", "0", "9", " ", "\n", "\t", "(", ")", "[", "]", "{", "}", "\"", "\\", ",", ":", ";",
    "=", "+", "-", "*", "e", "E", ".", "é", "日", "こ", "。", "、", "O-O", "Nf3", "int ", "return",
    "true", "null", "\\u", "move ", "say \"",
];

fn mutate(s: &str, rng: &mut Rng) -> Vec<u8> {
    let mut chars: Vec<String> = s.chars().map(String::from).collect();
    for _ in 0..1 + rng.below(2) {
        let piece = PIECES[rng.below(PIECES.len())].to_owned();
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
    }
    let mut out = chars.concat().into_bytes();
    if rng.chance(0.05) && !out.is_empty() {
        out.truncate(rng.below(out.len())); // may cut a character
    }
    out
}

#[test]
fn mutated_cases_agree_with_the_reference() {
    let cases: Value = serde_json::from_str(include_str!("data/grammar_cases.json")).unwrap();
    let s = synthetic();
    let mut rng = Rng::new(5);
    let mut disagreements = Vec::new();
    let mut checked = 0;
    for case in cases.as_array().unwrap() {
        let accept: Vec<&str> = case["accept"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let (engine, reference): (Matcher, Recognizer) = match case.get("grammar") {
            Some(file) => {
                let text = grammar_text(file.as_str().unwrap());
                let r = Reference::new(&text);
                (
                    grammar_matcher(&text, &s.vocab),
                    Box::new(move |b| r.matches(b)),
                )
            }
            None => (
                json_matcher(&s.vocab),
                Box::new(|b| reference_json(b, MAX_JSON_WHITESPACE)),
            ),
        };
        let c = engine.constraint().clone();
        for a in &accept {
            for _ in 0..60 {
                let m = mutate(a, &mut rng);
                checked += 1;
                if c.matches(&m) != reference(&m) {
                    disagreements.push(format!(
                        "{}: {:?}",
                        case["name"],
                        String::from_utf8_lossy(&m)
                    ));
                }
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    assert!(checked > 1500);
}
