//! Fuzz-style: random grammar texts (spliced from pieces of GBNF, and mutations of the test
//! grammars) and random bytes never panic or hang. Each grammar either compiles or returns an
//! error; each compiled one is driven with random tokens, masks and rollbacks, every call
//! bounded by the work limit. A time bound on the whole test catches a hang.

mod grammar_support;

use grammar_support::*;
use poot::constraint::{Constraint, Matcher};
use poot::grammar::Grammar;
use poot::vocab::TokenId;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PIECES: &[&str] = &[
    "root",
    " ::= ",
    "a",
    "b",
    "x-y",
    " ",
    "\n",
    "\"",
    "\"ab\"",
    "\"\\n\"",
    "\"\\x41\"",
    "\"\\u00e9\"",
    "\\",
    "[",
    "]",
    "[^",
    "a-z",
    "0-9",
    "-",
    "(",
    ")",
    "|",
    "*",
    "+",
    "?",
    "{",
    "}",
    "{2}",
    "{1,3}",
    "{0,}",
    ",",
    ".",
    "#",
    "# c\n",
    "é",
    "日",
    "::=",
    "\"\"",
    "<",
    ">",
    "\t",
    "\r\n",
    "[\"\\\\]",
    "{99999}",
    "{1000}",
    "((",
    "))",
    "root ::= a\n",
    "a ::= \"x\" a | \"y\"\n",
    "b ::= b \"z\"\n",
];

fn random_text(rng: &mut Rng) -> String {
    let mut s = String::new();
    if rng.chance(0.7) {
        s.push_str("root ::= ");
    }
    for _ in 0..rng.below(24) {
        s.push_str(PIECES[rng.below(PIECES.len())]);
    }
    s
}

fn mutate_grammar(text: &str, rng: &mut Rng) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..1 + rng.below(4) {
        if chars.is_empty() {
            break;
        }
        let i = rng.below(chars.len());
        match rng.below(3) {
            0 => {
                chars.remove(i);
            }
            1 => {
                chars[i] = PIECES[rng.below(PIECES.len())]
                    .chars()
                    .next()
                    .unwrap_or('x')
            }
            _ => chars.insert(i, "()[]\"|*+?{}\\-#.".chars().nth(rng.below(15)).unwrap()),
        }
    }
    chars.into_iter().collect()
}

fn drive(g: Grammar, s: &Synthetic, rng: &mut Rng) {
    let c = Arc::new(Constraint::from_compiled(
        poot::constraint::Compiled::Grammar(g.clone()),
        s.vocab.clone(),
    ));
    let mut m = Matcher::new(c);
    let mut out = Vec::new();
    for _ in 0..24 {
        let mut mask = vec![0u32; poot::mask::words_for(s.vocab.len())];
        if m.fill_mask(&mut mask).is_err() {
            return; // the work limit: a clean error is the expected way out
        }
        let allowed: Vec<TokenId> = (0..s.vocab.len() as TokenId)
            .filter(|&t| mask[t as usize / 32] >> (t % 32) & 1 == 1)
            .collect();
        // Mostly allowed tokens, sometimes a random one (which must be refused cleanly).
        let t = if !allowed.is_empty() && rng.chance(0.8) {
            allowed[rng.below(allowed.len())]
        } else {
            rng.below(s.vocab.len()) as TokenId
        };
        let was_allowed = allowed.contains(&t);
        match m.advance(t) {
            Ok(()) => {
                assert!(was_allowed, "token {t} advanced but was not in the mask");
                if !s.vocab.is_eos(t) {
                    out.extend_from_slice(s.vocab.bytes(t));
                }
            }
            Err(e) => {
                if !e.is_limit_exceeded() {
                    assert!(!was_allowed, "token {t} in the mask but refused: {e}");
                }
            }
        }
        if rng.chance(0.1) && m.token_count() > 0 {
            m.rollback(1).unwrap();
        }
        if m.is_finished() {
            break;
        }
        let _ = m.forced_bytes();
    }
    let _ = g.matches(&out);
}

#[test]
fn random_grammars_and_bytes_never_panic_or_hang() {
    let s = synthetic();
    let mut rng = Rng::new(2024);
    let start = Instant::now();
    let mut compiled = 0;
    let mut texts: Vec<String> = (0..600).map(|_| random_text(&mut rng)).collect();
    for file in GRAMMARS {
        let text = grammar_text(file);
        for _ in 0..40 {
            texts.push(mutate_grammar(&text, &mut rng));
        }
    }
    for text in &texts {
        match Grammar::new(text) {
            Ok(g) => {
                compiled += 1;
                // Random bytes through `matches` (no work limit there, so keep them short).
                for _ in 0..4 {
                    let len = rng.below(12);
                    let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
                    let _ = g.matches(&bytes);
                }
                drive(g, &s, &mut rng);
            }
            Err(e) => {
                assert!(e.to_string().starts_with("guided_grammar"), "{e}");
                assert_eq!(e.param(), Some("guided_grammar"));
            }
        }
    }
    assert!(
        compiled > 100,
        "only {compiled} of {} compiled",
        texts.len()
    );
    let limit = if cfg!(debug_assertions) { 600 } else { 120 };
    assert!(
        start.elapsed() < Duration::from_secs(limit),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn random_bytes_through_json_object_never_panic() {
    let s = synthetic();
    let mut rng = Rng::new(99);
    for _ in 0..300 {
        let mut m = json_matcher(&s.vocab);
        for _ in 0..40 {
            let t = rng.below(s.vocab.len()) as TokenId;
            let allowed = m.mask().is_allowed(t as usize);
            assert_eq!(m.advance(t).is_ok(), allowed);
            if rng.chance(0.1) && m.token_count() > 0 {
                m.rollback(1 + rng.below(m.token_count())).unwrap();
            }
            let _ = m.forced_bytes();
        }
    }
}
