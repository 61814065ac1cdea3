//! The spec's bounds on constraints (src/limits.rs) and the text of their errors.

use poot::constraint::Spec;
use poot::limits::{AUTOMATON_BYTES, MAX_REGEX_BYTES, MAX_REGEX_NESTING};
use poot::regex::Dfa;
use serde_json::json;
use std::time::{Duration, Instant};

/// The spec asks for well under 50 ms. Cargo.toml compiles regex-automata and regex-syntax
/// with `opt-level = 3` even in debug builds, so a plain `cargo test` gets the same bound as
/// a release build: the refusal takes ~3 ms in a debug build on a loaded 2-core machine
/// (~35 ms with unoptimized regex-automata); one that built the whole automaton would take
/// seconds.
const REFUSAL_BUDGET: Duration = Duration::from_millis(50);

#[test]
fn exponential_regex_is_refused_quickly_naming_regex_and_limit() {
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let err = Dfa::new("(a|b)*a(a|b){17}").unwrap_err();
        fastest = fastest.min(start.elapsed());
        assert_eq!(
            err.to_string(),
            "guided_regex `(a|b)*a(a|b){17}` needs more than the 262144-byte automaton limit"
        );
        assert_eq!(err.code(), "limit_exceeded");
        assert!(err.is_limit_exceeded() && err.is_client_error());
        assert_eq!(err.param(), Some("guided_regex"));
        assert!(
            std::error::Error::source(&err).is_some(),
            "the regex-automata error is chained"
        );
    }
    assert!(fastest < REFUSAL_BUDGET, "refusing took {fastest:?}");
}

#[test]
fn one_fewer_repetition_still_fits_and_the_limit_is_the_spec_value() {
    assert_eq!(AUTOMATON_BYTES, 256 * 1024);
    // 2^11 states fit within 256 KiB.
    let dfa = Dfa::new("(a|b)*a(a|b){10}").unwrap();
    assert!(
        dfa.matches(b"abbbbbbbbbb") && dfa.matches(b"babbbbbbbbbb") && !dfa.matches(b"bbbbbbbbbbb")
    );
    assert!(dfa.memory_usage() <= AUTOMATON_BYTES);
}

#[test]
fn large_nfa_is_refused_with_the_same_message() {
    let err = Dfa::new(r"\w{200}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "guided_regex `\\w{200}` needs more than the 262144-byte automaton limit"
    );
    assert!(err.is_limit_exceeded());
}

#[test]
fn pattern_length_limit_is_4096_bytes() {
    assert_eq!(MAX_REGEX_BYTES, 4096);
    let ok = "a".repeat(4096);
    assert!(Dfa::new(&ok).unwrap().matches(ok.as_bytes()));
    let long = "a".repeat(4097);
    let err = Dfa::new(&long).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "guided_regex `{}…` is 4097 bytes, over the 4096-byte limit",
            "a".repeat(80)
        )
    );
    assert_eq!(
        (err.code(), err.param()),
        ("limit_exceeded", Some("guided_regex"))
    );
    // Bytes, not characters: 1366 three-byte characters are 4098 bytes.
    assert!(Dfa::new(&"€".repeat(1366)).unwrap_err().is_limit_exceeded());
}

#[test]
fn nesting_limit_is_a_limit_error() {
    let deep = format!(
        "{}a{}",
        "(".repeat(MAX_REGEX_NESTING as usize + 1),
        ")".repeat(MAX_REGEX_NESTING as usize + 1)
    );
    let err = Dfa::new(&deep).unwrap_err();
    assert!(err.is_limit_exceeded(), "{err}");
    assert!(
        err.to_string()
            .ends_with("nests groups or repetitions deeper than the limit of 128"),
        "{err}"
    );
    let ok = format!("{}a{}", "(".repeat(60), ")".repeat(60));
    assert!(Dfa::new(&ok).unwrap().matches(b"a"));
}

#[test]
fn unsupported_syntax_is_a_clear_error() {
    let cases = [
        (
            "(?=a)b",
            "look-around, including look-ahead and look-behind, is not supported",
        ),
        (
            "(?<!a)b",
            "look-around, including look-ahead and look-behind, is not supported",
        ),
        (r"(a)\1", "backreferences are not supported"),
        ("(ab", "unclosed group"),
        ("a{2,1}", "invalid repetition count range"),
        (r"\p{NotAScript}", "Unicode property not found"),
    ];
    for (pattern, detail) in cases {
        let err = Dfa::new(pattern).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "guided_regex `{pattern}` is not a supported regex: "
            )),
            "{msg}"
        );
        assert!(msg.contains(detail), "{pattern}: {msg}");
        assert!(msg.contains("(at byte "), "{msg}");
        assert_eq!(
            (err.code(), err.param()),
            ("invalid_input", Some("guided_regex"))
        );
    }
    let err = Dfa::new(r"\bword\b").unwrap_err();
    assert!(err.to_string().contains("use (?-u:\\b)"), "{err}");
    assert!(!err.is_limit_exceeded());
    let err = Dfa::new(r"[^\s\S]").unwrap_err();
    assert_eq!(
        err.to_string(),
        "guided_regex `[^\\s\\S]` matches no string, so no output could satisfy it"
    );
}

#[test]
fn choice_errors_name_guided_choice() {
    let err = Spec::from_request(&json!({"guided_choice": []})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "guided_choice must list at least one string, got []"
    );
    let err = Spec::from_request(&json!({"guided_choice": ["a", null]})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "guided_choice[1] must be a string, got null"
    );
    assert_eq!(err.param(), Some("guided_choice"));
    let err = Spec::from_request(&json!({"guided_choice": {"a": 1}})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "guided_choice must be an array of strings, got an object"
    );

    // Many long choices exceed the automaton bound, named as guided_choice: 500 of them
    // (15,890 bytes) are within MAX_CHOICES and MAX_CHOICE_BYTES.
    let choices: Vec<String> = (0..500)
        .map(|i| format!("choice number {i} with some text"))
        .collect();
    assert!(choices.iter().map(String::len).sum::<usize>() <= poot::limits::MAX_CHOICE_BYTES);
    let err = poot::choice::compile(&choices).unwrap_err();
    assert!(err.is_limit_exceeded());
    assert_eq!(err.param(), Some("guided_choice"));
    let msg = err.to_string();
    assert!(
        msg.starts_with("guided_choice `[\"choice number 0 with some text\",\"choice number 1"),
        "{msg}"
    );
    assert!(
        msg.ends_with("…` needs more than the 262144-byte automaton limit"),
        "{msg}"
    );
}

#[test]
fn grammar_and_schema_size_limits() {
    let err =
        Spec::from_request(&json!({"guided_grammar": "x".repeat(16 * 1024 + 1)})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "guided_grammar is 16385 bytes, over the 16384-byte limit"
    );
    let big = json!({"type": "object", "description": "d".repeat(16 * 1024)});
    let err = Spec::from_request(&json!({"guided_json": big})).unwrap_err();
    assert!(err.is_limit_exceeded());
    let err = Spec::from_request(
        &json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": big}}}),
    )
    .unwrap_err();
    assert_eq!(err.param(), Some("response_format"));
    assert!(err.is_limit_exceeded());
}

/// A deployment's tightened `Limits` apply at every bound they name, and cannot be raised.
#[test]
fn tightened_limits_apply_where_they_name_and_cannot_be_raised() {
    use poot::limits::Limits;
    let tight = |o: serde_json::Value| Limits::DEFAULT.tightened(&o).unwrap();
    let refused = |limits: &Limits, body: serde_json::Value| -> String {
        let err = Spec::from_request_with(&body, limits)
            .and_then(|s| s.expect("a constraint").compile_with(limits).map(|_| ()))
            .expect_err("refused under the tightened limits");
        assert_eq!(err.code(), "limit_exceeded", "{err}");
        // The same request compiles under the defaults: the tightened bound refused it.
        let spec = Spec::from_request(&body).unwrap().unwrap();
        spec.compile().unwrap_or_else(|e| panic!("{body}: {e}"));
        err.to_string()
    };
    let nested = json!({"type": "array", "items": {"type": "array", "items": {"type": "array",
        "items": {"type": "integer"}}}});
    let cases = [
        (
            json!({"schema_bytes": 40}),
            json!({"guided_json": nested.clone()}),
            "40-byte",
        ),
        (
            json!({"schema_depth": 2}),
            json!({"guided_json": nested.clone()}),
            "2 deep",
        ),
        (
            json!({"schema_expansion": 3}),
            json!({"guided_json": nested}),
            "3 subschemas",
        ),
        (
            json!({"schema_judge_work": 2}),
            json!({"guided_json": {"enum": [1, 2, 3], "not": {"const": 2}}}),
            "more than 2 steps",
        ),
        (
            json!({"one_of_pairs": 1}),
            json!({"guided_json": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}),
            "more than the 1 pairs",
        ),
        (
            json!({"regex_bytes": 3}),
            json!({"guided_regex": "abcd"}),
            "3-byte",
        ),
        (
            json!({"grammar_bytes": 5}),
            json!({"guided_grammar": "root ::= \"ab\""}),
            "5-byte",
        ),
        // The DFA's bounds, for each kind that builds one (a `guided_json` schema whose DFA
        // passes it moves to the grammar engine, as under the default bound; checked below).
        (
            json!({"automaton_bytes": 4096}),
            json!({"guided_regex": "(a|b)*a(a|b){8}"}),
            "4096-byte automaton limit",
        ),
        (
            json!({"automaton_bytes": 2048}),
            json!({"guided_choice": (0..200).map(|i| format!("choice number {i}")).collect::<Vec<_>>()}),
            "2048-byte automaton limit",
        ),
        (
            json!({"determinize_bytes": 1024}),
            json!({"guided_regex": "(a|b)*a(a|b){8}"}),
            "1024-byte determinization limit",
        ),
        // The choice list (a grammar step's work is checked below, at a mask).
        (
            json!({"choices": 2}),
            json!({"guided_choice": ["a", "b", "c"]}),
            "over the limit of 2 (choices)",
        ),
        (
            json!({"choice_bytes": 2}),
            json!({"guided_choice": ["ab", "c"]}),
            "over the limit of 2 bytes (choice_bytes)",
        ),
        // The grammar compiler's bounds.
        (
            json!({"grammar_nesting": 2}),
            json!({"guided_grammar": "root ::= (((\"a\")))"}),
            "nest deeper than the limit of 2",
        ),
        (
            json!({"grammar_depth": 3}),
            json!({"guided_grammar": "root ::= \"a\"****"}),
            "deeper than the limit of 3 levels",
        ),
        (
            json!({"grammar_repetition": 5}),
            json!({"guided_grammar": "root ::= (\"x\"?){0,200}"}),
            "over the limit of 5",
        ),
        (
            json!({"grammar_automaton_bytes": 4096}),
            json!({"guided_grammar": format!("root ::= \"{}\" x\nx ::= \"y\"", "abcdefghij".repeat(100))}),
            "4096-byte automaton limit",
        ),
        (
            json!({"grammar_determinize_work": 10}),
            json!({"guided_grammar": "root ::= \"ab\" | \"ac\" | x\nx ::= \"ad\" x?"}),
            "10-unit work limit",
        ),
    ];
    for (overrides, body, says) in cases {
        let message = refused(&tight(overrides.clone()), body);
        assert!(message.contains(says), "{overrides}: {message}");
    }
    // A grammar step's work bounds each mask of a constraint compiled under it.
    let tokens: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"<eos>".to_vec()];
    let vocab = std::sync::Arc::new(poot::vocab::Vocabulary::new(tokens, vec![2]).unwrap());
    let grammar = json!({"guided_grammar": "root ::= (\"a\" | \"b\")* \"b\""});
    let masks = |limits: &Limits| {
        let spec = Spec::from_request_with(&grammar, limits).unwrap().unwrap();
        let c = poot::constraint::Constraint::from_spec_with(&spec, vocab.clone(), limits).unwrap();
        let m = poot::constraint::Matcher::new(std::sync::Arc::new(c));
        let mut mask = vec![0u32; poot::mask::words_for(vocab.len())];
        m.fill_mask(&mut mask)
    };
    masks(&Limits::DEFAULT).expect("a mask within the default step work");
    let e = masks(&tight(json!({"grammar_step_work": 1}))).unwrap_err();
    assert!(e.to_string().contains("1-unit work limit"), "{e}");
    let small_dfa = tight(json!({"automaton_bytes": 4096}));
    let schema = json!({"guided_json": {"type": "string", "pattern": "^(a|b)*a(a|b){8}$"}});
    let spec = Spec::from_request_with(&schema, &small_dfa)
        .unwrap()
        .unwrap();
    assert!(matches!(
        spec.compile_with(&small_dfa).unwrap(),
        poot::constraint::Compiled::Grammar(_)
    ));
    assert!(matches!(
        spec.compile().unwrap(),
        poot::constraint::Compiled::Dfa(_)
    ));
    for bad in [
        json!({"schema_bytes": poot::limits::MAX_SCHEMA_BYTES + 1}),
        json!({"schema_bytes": 0}),
        json!({"schema_bytes": "100"}),
        json!({"automaton_kilobytes": 10}),
        json!([1]),
    ] {
        let err = Limits::DEFAULT.tightened(&bad).unwrap_err();
        assert_eq!(err.param(), Some("limits"), "{bad}: {err}");
        assert_eq!(err.code(), "invalid_input");
    }
    assert_eq!(Limits::default(), Limits::DEFAULT);
    assert_eq!(tight(json!({})), Limits::DEFAULT);
}
