//! The cases in tests/data/grammar_cases.json: each names a grammar in tests/data/grammars/
//! (or `json_object`) with strings it must accept and reject. Every string goes through the
//! compiled constraint, through a matcher byte token by byte token and under a random
//! tokenization over a synthetic vocabulary, and through the independent recognizer of
//! tests/grammar_support.

mod grammar_support;

use grammar_support::*;
use poot::constraint::Matcher;
use poot::limits::MAX_JSON_WHITESPACE;
use serde_json::{json, Value};

#[test]
fn every_case_accepts_and_rejects_as_listed() {
    let cases: Value = serde_json::from_str(include_str!("data/grammar_cases.json")).unwrap();
    let s = synthetic();
    let mut rng = Rng::new(7);
    let mut count = 0;
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let (body, reference): (Value, Recognizer) = match case.get("grammar") {
            Some(file) => {
                let text = grammar_text(file.as_str().unwrap());
                let r = Reference::new(&text);
                (
                    json!({ "guided_grammar": text }),
                    Box::new(move |b| r.matches(b)),
                )
            }
            None => (
                json!({"response_format": {"type": "json_object"}}),
                Box::new(|b| reference_json(b, MAX_JSON_WHITESPACE)),
            ),
        };
        let c = constraint(body, &s.vocab);
        let strings = |key: &str| -> Vec<String> {
            case[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        for text in strings("accept") {
            let bytes = text.as_bytes();
            assert!(c.matches(bytes), "{name}: should accept {text:?}");
            assert!(reference(bytes), "{name}: the reference rejects {text:?}");
            for tokens in [
                byte_tokenization(bytes),
                random_tokenization(&s.vocab, bytes, &mut rng),
            ] {
                let mut m = Matcher::new(c.clone());
                for &t in &tokens {
                    assert!(m.is_allowed(t), "{name}: {text:?}: token {t} not allowed");
                    m.advance(t)
                        .unwrap_or_else(|e| panic!("{name}: {text:?}: {e}"));
                }
                assert!(m.is_accepting(), "{name}: {text:?} not accepting");
                assert!(
                    m.mask().unwrap().is_allowed(s.eos as usize),
                    "{name}: {text:?}: no EOS"
                );
            }
            count += 1;
        }
        for text in strings("reject") {
            let bytes = text.as_bytes();
            assert!(!c.matches(bytes), "{name}: should reject {text:?}");
            assert!(!reference(bytes), "{name}: the reference accepts {text:?}");
            let mut m = Matcher::new(c.clone());
            let walked = byte_tokenization(bytes)
                .into_iter()
                .all(|t| m.advance(t).is_ok());
            assert!(
                !(walked && m.is_accepting()),
                "{name}: matcher accepts {text:?}"
            );
            count += 1;
        }
    }
    assert!(count > 120, "{count} strings checked");
}
