//! The bounds of the pushdown engines: the per-step work budget (hit on purpose by an
//! ambiguous grammar), json_object nesting without limit (depth 1000 and deeper) and its
//! whitespace bound.

mod grammar_support;

use grammar_support::*;
use poot::limits::{MAX_GRAMMAR_STEP_WORK, MAX_JSON_WHITESPACE};
use poot::vocab::TokenId;
use std::time::{Duration, Instant};

/// `t` doubles its live parses with every `a` (`u "b"` and `v "c"` both start with `a t`),
/// so after ~20 `a`s one step needs more than the work budget.
const EXPLOSIVE: &str = "root ::= t\nt ::= u \"b\" | v \"c\" | \"x\"\nu ::= \"a\" t\nv ::= \"a\" t";

/// A limit error: its code, field and message.
fn assert_work_limit(e: &poot::Error) {
    assert!(e.is_limit_exceeded() && e.is_client_error(), "{e}");
    assert_eq!(e.code(), "limit_exceeded");
    assert_eq!(e.param(), Some("guided_grammar"));
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "guided_grammar needs more than the {MAX_GRAMMAR_STEP_WORK}-unit work limit to "
        )),
        "{msg}"
    );
    assert!(
        msg.contains("parses alive: the grammar is too ambiguous)"),
        "{msg}"
    );
}

#[test]
fn an_exponentially_ambiguous_grammar_hits_the_work_limit_in_advance() {
    let s = synthetic();
    let mut m = grammar_matcher(EXPLOSIVE, &s.vocab);
    let a = TokenId::from(b'a');
    let start = Instant::now();
    let mut hit = None;
    for i in 0..64 {
        match m.advance(a) {
            Ok(()) => {}
            Err(e) => {
                hit = Some((i, e));
                break;
            }
        }
    }
    let (i, e) = hit.expect("the budget stops the parse");
    assert_work_limit(&e);
    assert!((12..40).contains(&i), "stopped after {i} tokens");
    // The failed step changed nothing, and it took bounded time.
    assert_eq!(m.token_count(), i);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    // Rolling back below the blow-up recovers a usable matcher.
    m.rollback(i - 2).unwrap();
    assert!(m.advance(TokenId::from(b'x')).is_ok());
}

/// The same doubling, where a parse can also complete `w` after one `y` and then close one
/// level per `z`: a token `yzz...z` pops as many levels, so its mask walks below `y` once per
/// parse and level, while advancing by `a` costs a few frames per parse. The mask breaks
/// first.
const EXPLOSIVE_WITH_EXITS: &str =
    "root ::= t\nt ::= u \"z\" | v \"z\" | w\nu ::= \"a\" t\nv ::= \"a\" t\nw ::= \"y\" w?";

#[test]
fn an_exponentially_ambiguous_grammar_hits_the_work_limit_in_a_mask() {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for k in 1..=24 {
        tokens.push(format!("y{}", "z".repeat(k)).into_bytes());
    }
    tokens.push(b"<eos>".to_vec());
    let eos = tokens.len() as TokenId - 1;
    let vocab = std::sync::Arc::new(poot::vocab::Vocabulary::new(tokens, vec![eos]).unwrap());
    let mut m = grammar_matcher(EXPLOSIVE_WITH_EXITS, &vocab);
    let a = TokenId::from(b'a');
    let mut masks_ok = 0;
    let mut hit = None;
    for _ in 0..64 {
        let mut mask = vec![0u32; poot::mask::words_for(vocab.len())];
        match m.fill_mask(&mut mask) {
            Ok(()) => masks_ok += 1,
            Err(e) => {
                hit = Some(e);
                break;
            }
        }
        m.advance(a)
            .expect("advancing stays within the budget longer than masks do");
    }
    let e = hit.expect("a mask hits the budget");
    assert_work_limit(&e);
    // `mask()` reports the same error where it used to panic.
    let via_mask = m.mask().expect_err("mask() hits the same budget");
    assert_eq!(via_mask.to_string(), e.to_string());
    assert!(e.to_string().contains("to compute one token mask"), "{e}");
    assert!(masks_ok > 5, "{masks_ok}");
    // The matcher still works: back off and finish the output.
    m.rollback(m.token_count() - 2).unwrap();
    for t in [
        TokenId::from(b'y'),
        TokenId::from(b'z'),
        TokenId::from(b'z'),
    ] {
        m.advance(t).unwrap();
    }
    assert!(m.is_accepting());
}

#[test]
fn bounded_ambiguity_stays_within_the_budget() {
    // Two ways to split every run of a's, merged because equal stacks are deduplicated.
    let s = synthetic();
    let mut m = grammar_matcher("root ::= item+\nitem ::= \"a\" | \"aa\"", &s.vocab);
    for _ in 0..2000 {
        m.advance(TokenId::from(b'a')).unwrap();
        assert!(m.mask().unwrap().is_allowed(TokenId::from(b'a') as usize));
    }
    assert!(m.is_accepting());
}

fn deep_json(depth: usize) -> String {
    let mut s = String::new();
    for i in 0..depth {
        s.push_str(if i % 2 == 0 { "[" } else { "{\"k\":" });
    }
    s.push_str("\"leaf\"");
    for i in (0..depth).rev() {
        s.push(if i % 2 == 0 { ']' } else { '}' });
    }
    s
}

#[test]
fn json_object_accepts_depth_1000_and_beyond() {
    let s = synthetic();
    for depth in [1000, 5000] {
        let text = deep_json(depth);
        assert!(reference_json(text.as_bytes(), MAX_JSON_WHITESPACE));
        let mut m = json_matcher(&s.vocab);
        let mut rng = Rng::new(depth as u64);
        for t in random_tokenization(&s.vocab, text.as_bytes(), &mut rng) {
            assert!(
                m.mask().unwrap().is_allowed(t as usize),
                "depth {depth}: token {t}"
            );
            m.advance(t).unwrap();
        }
        assert!(m.is_accepting());
        assert!(m.mask().unwrap().is_allowed(s.eos as usize));
        // At the deepest point nothing blocks going on: another level opens.
        let mut m = json_matcher(&s.vocab);
        for t in byte_tokenization(&text.as_bytes()[..text.find("\"leaf\"").unwrap()]) {
            m.advance(t).unwrap();
        }
        let mask = m.mask().unwrap();
        assert!(
            mask.is_allowed(TokenId::from(b'[') as usize)
                && mask.is_allowed(TokenId::from(b'{') as usize)
        );
        assert!(!mask.is_allowed(s.eos as usize));
    }
}

#[test]
fn grammar_nesting_is_unbounded_too() {
    let s = synthetic();
    let mut m = grammar_matcher(&grammar_text("balanced.gbnf"), &s.vocab);
    let text = format!("{}{}", "([{".repeat(400), "}])".repeat(400));
    for t in byte_tokenization(text.as_bytes()) {
        assert!(m.mask().unwrap().is_allowed(t as usize));
        m.advance(t).unwrap();
    }
    assert!(m.is_accepting());
}

#[test]
fn json_object_whitespace_is_bounded() {
    let s = synthetic();
    let sp = TokenId::from(b' ');
    let nl = TokenId::from(b'\n');
    // Between tokens, before and after the value: at most MAX_JSON_WHITESPACE in a row.
    for prefix in ["", "[", "[1,", "{\"a\"", "{\"a\":", "[1"] {
        let mut m = json_matcher(&s.vocab);
        for t in byte_tokenization(prefix.as_bytes()) {
            m.advance(t).unwrap();
        }
        for i in 0..MAX_JSON_WHITESPACE {
            let t = if i % 2 == 0 { sp } else { nl };
            assert!(
                m.mask().unwrap().is_allowed(t as usize),
                "{prefix:?}: whitespace {i}"
            );
            m.advance(t).unwrap();
        }
        let mask = m.mask().unwrap();
        assert!(
            !mask.is_allowed(sp as usize) && !mask.is_allowed(nl as usize),
            "{prefix:?}"
        );
        // Multi-byte whitespace tokens are cut by their length.
        let two = token_for(&s.vocab, b"  ").unwrap();
        assert!(!mask.is_allowed(two as usize));
        assert!(
            mask.count_allowed() > 0,
            "{prefix:?}: a structural token still fits"
        );
    }
    // Inside a string, spaces are content, not counted.
    let mut m = json_matcher(&s.vocab);
    m.advance(TokenId::from(b'"')).unwrap();
    for _ in 0..200 {
        m.advance(sp).unwrap();
    }
    // And the run restarts after every token.
    let mut m = json_matcher(&s.vocab);
    m.advance(TokenId::from(b'[')).unwrap();
    for _ in 0..10 {
        for _ in 0..MAX_JSON_WHITESPACE {
            m.advance(sp).unwrap();
        }
        m.advance(TokenId::from(b'1')).unwrap();
        m.advance(TokenId::from(b',')).unwrap();
    }
}

#[test]
fn a_small_rule_used_everywhere_compiles_without_inlining() {
    // Inlining copies `x` into each of its 200 uses, past the automaton bound; the compiler
    // then keeps `x` a called rule instead of refusing (a JSON Schema's exported GBNF has
    // this shape).
    let uses = vec!["x"; 200].join(" \",\" ");
    let text = format!("root ::= {uses}\nx ::= [a-z] [a-z0-9]{{0,60}} \".\"");
    let g = poot::grammar::Grammar::new(&text).unwrap();
    let sentence = vec!["ab1."; 200].join(",");
    assert!(g.matches(sentence.as_bytes()));
    assert!(!g.matches(&sentence.as_bytes()[..sentence.len() - 1]));
}
