//! The engine-independent cases in tests/data/constraint_cases.json: each names a
//! `regex` or a `choice` list with strings it must accept and reject. Every case runs through
//! the compiled automaton, through a matcher byte token by byte token over a synthetic
//! vocabulary, and (for regexes) through the `regex` crate as an independent check.

mod constraint_support;

use constraint_support::{byte_tokenization, oracle, synthetic};
use poot::constraint::{Constraint, Matcher, Spec};
use serde_json::Value;
use std::sync::Arc;

#[test]
fn every_case_accepts_and_rejects_as_listed() {
    let cases: Value = serde_json::from_str(include_str!("data/constraint_cases.json")).unwrap();
    let s = synthetic();
    let mut count = 0;
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut body = serde_json::Map::new();
        if let Some(r) = case.get("regex") {
            body.insert("guided_regex".into(), r.clone());
        }
        if let Some(c) = case.get("choice") {
            body.insert("guided_choice".into(), c.clone());
        }
        let spec = Spec::from_request(&Value::Object(body))
            .unwrap()
            .expect("a constraint");
        let constraint = Arc::new(
            Constraint::from_spec(&spec, s.vocab.clone()).unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        let re = case.get("regex").map(|r| oracle(r.as_str().unwrap()));
        let strings = |key: &str| {
            case[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        for text in strings("accept") {
            assert!(
                constraint.matches(text.as_bytes()),
                "{name}: should accept {text:?}"
            );
            if let Some(re) = &re {
                assert!(
                    re.is_match(text.as_bytes()),
                    "{name}: the regex crate rejects {text:?}"
                );
            }
            let mut m = Matcher::new(constraint.clone());
            for t in byte_tokenization(text.as_bytes()) {
                m.advance(t)
                    .unwrap_or_else(|e| panic!("{name}: {text:?}: {e}"));
            }
            assert!(
                m.is_accepting() && m.mask().unwrap().is_allowed(s.eos as usize),
                "{name}: {text:?} not accepting"
            );
            count += 1;
        }
        for text in strings("reject") {
            assert!(
                !constraint.matches(text.as_bytes()),
                "{name}: should reject {text:?}"
            );
            if let Some(re) = &re {
                assert!(
                    !re.is_match(text.as_bytes()),
                    "{name}: the regex crate accepts {text:?}"
                );
            }
            count += 1;
        }
    }
    assert!(count > 60, "{count} strings checked");
}
