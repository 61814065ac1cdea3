//! Our determinizer against regex-automata's dense one on the same NFAs.

use super::*;
use crate::limits::{AUTOMATON_BYTES, DETERMINIZE_BYTES};
use crate::sampling::splitmix64;
use std::collections::HashSet;
use std::time::Instant;

fn nfa_of(pattern: &str) -> thompson::NFA {
    Dfa::nfa(pattern, "guided_regex", "`p`", AUTOMATON_BYTES)
        .unwrap_or_else(|e| panic!("{pattern}: {e}"))
}

/// Walks both automata in lockstep over every byte from their starts, so every string (not
/// only short ones) gets the same aliveness, acceptance and forced byte from both.
fn assert_equivalent(pattern: &str, ours: &Dfa, theirs: &Dfa) {
    let mut seen = HashSet::new();
    let mut queue = vec![(ours.start(), theirs.start(), Vec::<u8>::new())];
    seen.insert((ours.start(), theirs.start()));
    while let Some((a, b, path)) = queue.pop() {
        assert_eq!(a == DEAD, b == DEAD, "{pattern}: alive after {path:?}");
        if a == DEAD {
            continue;
        }
        assert_eq!(
            ours.is_accepting(a),
            theirs.is_accepting(b),
            "{pattern}: accepting after {path:?}"
        );
        assert_eq!(
            ours.forced_byte(a),
            theirs.forced_byte(b),
            "{pattern}: forced byte after {path:?}"
        );
        for byte in 0..=255u8 {
            let next = (ours.next(a, byte), theirs.next(b, byte));
            if seen.insert(next) {
                let mut p = path.clone();
                p.push(byte);
                queue.push((next.0, next.1, p));
            }
        }
    }
}

/// Every string up to `max_len` over `alphabet`: same `matches`, same aliveness per prefix.
fn assert_same_on_strings(
    pattern: &str,
    ours: &Dfa,
    theirs: &Dfa,
    alphabet: &[u8],
    max_len: usize,
) {
    let mut layer = vec![Vec::<u8>::new()];
    for _ in 0..=max_len {
        let mut next_layer = Vec::new();
        for s in &layer {
            assert_eq!(
                ours.matches(s),
                theirs.matches(s),
                "{pattern}: matches {s:?}"
            );
            let (a, b) = (ours.walk(ours.start(), s), theirs.walk(theirs.start(), s));
            assert_eq!(a == DEAD, b == DEAD, "{pattern}: alive after {s:?}");
            if a == DEAD {
                continue; // both dead: every extension is dead in both
            }
            for &c in alphabet {
                let mut t = s.clone();
                t.push(c);
                next_layer.push(t);
            }
        }
        layer = next_layer;
    }
}

/// Compiles `pattern` both ways; false when the dense path refused it for size (ours is allowed
/// to be more generous there).
fn check(pattern: &str) -> bool {
    let nfa = nfa_of(pattern);
    assert!(nfa.look_set_any().is_empty(), "{pattern} has look-around");
    let ours = Dfa::from_nfa(&nfa, "guided_regex", &quote(pattern), &Limits::DEFAULT);
    let theirs = Dfa::from_nfa_dense(&nfa, "guided_regex", &quote(pattern), AUTOMATON_BYTES);
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            assert!(
                ours.state_count() <= theirs.state_count(),
                "{pattern}: {} states, dense {}",
                ours.state_count(),
                theirs.state_count()
            );
            assert_equivalent(pattern, &ours, &theirs);
            let mut alphabet: Vec<u8> = b"abcx0 ".to_vec();
            alphabet.extend(pattern.bytes());
            alphabet.extend([0xC3, 0xA9, 0xCE, 0xB1]);
            alphabet.sort_unstable();
            alphabet.dedup();
            let max_len = if alphabet.len() > 12 { 4 } else { 6 };
            assert_same_on_strings(pattern, &ours, &theirs, &alphabet, max_len);
            true
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "{pattern}");
            assert_eq!(a.code(), b.code(), "{pattern}");
            true
        }
        (Ok(_), Err(b)) if b.is_limit_exceeded() => false,
        (a, b) => panic!("{pattern}: ours {a:?}, dense {b:?}"),
    }
}

#[test]
fn fixed_patterns_match_the_dense_determinizer() {
    let patterns = [
        "",
        "a",
        "abc",
        "a|ab|abc",
        "(ab|a)(bc|c)",
        "[a-c]+",
        "[^a]",
        "[^abc]*x",
        ".",
        ".*",
        "(?s:.)+",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}",
        r"\(\d{3}\) \d{3}-\d{4}",
        "[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}",
        "(positive|negative|neutral)",
        "[A-Z][a-z]+( [a-z]+)*\\.",
        r"[\p{L}\p{P} ]+",
        r"\p{Greek}+",
        r"\p{Greek}|é|[α-ω]{2}",
        "é",
        "(?i)straße",
        r"\w+",
        r"\u{1F600}+",
        "([a-z]+,[0-9]+\n){1,20}",
        "[^\n]*",
        "a*",
        "()",
        "(a*)*",
        "(a|)+b?",
        "a{0}",
        "a{2,5}",
        "(a{1,3}b?){2,3}",
        "((a|b)c?){2,4}",
        "(((a)|b)|((c)))*d",
        "x*y*z*",
        "(a|b)*a(a|b){3}",
        "(a|b)*a(a|b){10}",
        r"\{\x22name\x22: \x22[A-Za-z ]{1,40}\x22, \x22tags\x22: \[(\x22[a-z]+\x22(, \x22[a-z]+\x22)*)?\]\}",
        // Patterns that match nothing.
        r"[^\x00-\x{10FFFF}]",
        r"a[^\x00-\x{10FFFF}]",
        r"(a[^\x00-\x{10FFFF}])*",
    ];
    for pattern in patterns {
        assert!(check(pattern), "{pattern}: dense path refused it");
    }
}

/// A random pattern over `a`, `b`, `c` with classes, groups, alternation and repetition.
fn random_pattern(rng: &mut u64, depth: u32) -> String {
    let pick = |rng: &mut u64, n: u64| splitmix64(rng) % n;
    let leaf = |rng: &mut u64| -> String {
        match splitmix64(rng) % 8 {
            0 => "a".into(),
            1 => "b".into(),
            2 => "c".into(),
            3 => "[ab]".into(),
            4 => "[^a]".into(),
            5 => ".".into(),
            6 => "é".into(),
            _ => "()".into(),
        }
    };
    if depth == 0 {
        return leaf(rng);
    }
    match pick(rng, 8) {
        0 | 1 => leaf(rng),
        2 | 3 => {
            let n = 2 + pick(rng, 2);
            (0..n).map(|_| random_pattern(rng, depth - 1)).collect()
        }
        4 => {
            let n = 2 + pick(rng, 2);
            let alts: Vec<String> = (0..n).map(|_| random_pattern(rng, depth - 1)).collect();
            format!("({})", alts.join("|"))
        }
        _ => {
            let op = ["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}"][pick(rng, 7) as usize];
            format!("({}){op}", random_pattern(rng, depth - 1))
        }
    }
}

#[test]
fn random_patterns_match_the_dense_determinizer() {
    let mut rng = 0x5eed_u64;
    let mut compared = 0;
    for _ in 0..400 {
        let pattern = random_pattern(&mut rng, 4);
        if check(&pattern) {
            compared += 1;
        }
    }
    assert!(compared >= 390, "only {compared} of 400 compared");
}

#[test]
fn ab12_compiles_and_ab17_is_refused_naming_the_limit() {
    let dfa = Dfa::new("(a|b)*a(a|b){12}").unwrap();
    assert_eq!(dfa.state_count(), 8192 + 1);
    assert!(dfa.matches(b"abbbbbbbbbbbb") && !dfa.matches(b"bbbbbbbbbbbbb"));
    assert!(dfa.memory_usage() <= AUTOMATON_BYTES);

    let start = Instant::now();
    let err = Dfa::new("(a|b)*a(a|b){17}").unwrap_err();
    let took = start.elapsed();
    assert_eq!(
        err.to_string(),
        "guided_regex `(a|b)*a(a|b){17}` needs more than the 262144-byte automaton limit"
    );
    assert!(err.is_limit_exceeded());
    assert_eq!(err.param(), Some("guided_regex"));
    assert!(std::error::Error::source(&err).is_some());
    // Generous for a loaded debug build; the release figure is in `limits::AUTOMATON_BYTES`.
    assert!(took.as_millis() < 2000, "refusing took {took:?}");
}

#[test]
fn bookkeeping_bound_is_separate_and_named() {
    // ab12's state sets and index take more than 64 KiB (see `limits::DETERMINIZE_BYTES`).
    let nfa = nfa_of("(a|b)*a(a|b){12}");
    let err = determinize::determinize(&nfa, AUTOMATON_BYTES, 64 * 1024).err();
    assert!(
        matches!(err, Some(determinize::Refusal::Work { .. })),
        "{err:?}"
    );
    let table = determinize::determinize(&nfa, AUTOMATON_BYTES, DETERMINIZE_BYTES).unwrap();
    assert_eq!(table.accepting.len(), 8192);
}

/// Median compile time, ours against regex-automata's dense path, for the benchmark regexes:
/// `cargo test --release --lib regex::oracle_tests::compile_times -- --ignored --nocapture`.
#[test]
#[ignore]
fn compile_times() {
    let cases = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/bench_cases.tsv"
    ))
    .unwrap();
    let mut rows: Vec<(String, String)> = cases
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            (f.next().unwrap().into(), f.next().unwrap().into())
        })
        .collect();
    for n in [13, 14, 17] {
        rows.push((format!("ab{n}"), format!("(a|b)*a(a|b){{{n}}}")));
    }
    // Long epsilon chains and large state sets.
    for p in [
        "(x?){1000}",
        "(a|b)*a(a|b){6}(x?){60}",
        "(a*b*c*){50}",
        "[a-c]{0,200}",
    ] {
        rows.push((p.into(), p.into()));
    }
    let median = |f: &dyn Fn() -> bool| {
        let mut times: Vec<f64> = (0..21)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        (times[10], f())
    };
    println!(
        "case\tours ms\tdense ms\tDfa::new ms\tours\tdense\tstates\tdense states\t\
         unlimited states, set bytes"
    );
    for (name, pattern) in rows {
        let nfa = nfa_of(&pattern);
        let (ours_ms, ours_ok) =
            median(&|| Dfa::from_nfa(&nfa, "guided_regex", "`p`", &Limits::DEFAULT).is_ok());
        let (dense_ms, dense_ok) =
            median(&|| Dfa::from_nfa_dense(&nfa, "guided_regex", "`p`", AUTOMATON_BYTES).is_ok());
        let states = |d: Result<Dfa>| d.map_or(0, |d| d.state_count());
        let (raw, work) = if nfa.look_set_any().is_empty() {
            determinize::determinize(&nfa, usize::MAX, usize::MAX)
                .map(|t| (t.accepting.len(), t.work_bytes))
                .unwrap_or((0, 0))
        } else {
            (0, 0)
        };
        let (new_ms, _) = median(&|| Dfa::new(&pattern).is_ok());
        println!(
            "{name}\t{ours_ms:.3}\t{dense_ms:.3}\t{new_ms:.3}\t{}\t{}\t{}\t{}\t{raw}, {work}",
            if ours_ok { "ok" } else { "refused" },
            if dense_ok { "ok" } else { "refused" },
            states(Dfa::from_nfa(&nfa, "f", "`p`", &Limits::DEFAULT)),
            states(Dfa::from_nfa_dense(&nfa, "f", "`p`", AUTOMATON_BYTES)),
        );
    }
}

/// `guided_json` builds its NFA directly: its automaton against the dense determinizer on the
/// schema's regex text (the same language through regex-syntax).
#[test]
fn schema_automata_match_the_dense_determinizer_on_their_regex() {
    let schemas = [
        r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer"}}, "required": ["name"], "additionalProperties": false}"#,
        r#"{"enum": ["red", "green", 3, null, {"a": [1]}]}"#,
        r#"{"type": "array", "items": {"type": "string", "pattern": "^[a-c]+$"},
            "minItems": 1, "maxItems": 3}"#,
        r#"{"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "number"},
            "c": {"const": "x"}}, "additionalProperties": false}"#,
        r#"{"type": "array", "items": {"type": ["integer", "null"]}, "maxItems": 2}"#,
    ];
    let mut compared = 0;
    for text in schemas {
        let schema: serde_json::Value = serde_json::from_str(text).unwrap();
        let compiled = crate::json_schema::JsonSchema::compile(&schema, "guided_json")
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let regex = compiled
            .regex(usize::MAX)
            .expect("a regular schema has a regex");
        let nfa = nfa_of(&regex);
        let Ok(theirs) = Dfa::from_nfa_dense(&nfa, "guided_json", "`s`", AUTOMATON_BYTES) else {
            continue;
        };
        assert_equivalent(
            text,
            compiled.dfa().expect("a small schema is a DFA"),
            &theirs,
        );
        compared += 1;
    }
    assert!(compared >= 4, "only {compared} schemas compared");
}
