//! Fuzz-style: random tokens through the `json_object` matcher never panic, and each is
//! advanced exactly when its mask allows it, with rollbacks in between; after each, the
//! shortest completion completes the output. (Random and mutated
//! GBNF grammars, compiled and driven the same way, are the `gbnf` target of
//! `tests/fuzz_inputs.rs`.)

mod grammar_support;

use grammar_support::*;
use poot::vocab::TokenId;

#[test]
fn random_bytes_through_json_object_never_panic() {
    let s = synthetic();
    let mut rng = Rng::new(99);
    for _ in 0..300 {
        let mut m = json_matcher(&s.vocab);
        // The bytes of each accepted token, to know the output.
        let mut taken: Vec<Vec<u8>> = Vec::new();
        for _ in 0..40 {
            let t = rng.below(s.vocab.len()) as TokenId;
            let allowed = m.mask().unwrap().is_allowed(t as usize);
            assert_eq!(m.advance(t).is_ok(), allowed);
            if allowed {
                taken.push(s.vocab.bytes(t).to_vec());
            }
            if rng.chance(0.1) && m.token_count() > 0 {
                let k = 1 + rng.below(m.token_count());
                m.rollback(k).unwrap();
                taken.truncate(taken.len() - k);
            }
            let _ = m.forced_bytes();
            // The length-safe close completes whatever random prefix was accepted.
            if !m.is_finished() {
                let close = m
                    .closing_bytes(usize::MAX)
                    .expect("a JSON prefix can close");
                assert_eq!(Some(close.len() as u64), m.closing_len());
                let whole = [taken.concat(), close].concat();
                assert!(
                    m.constraint().matches(&whole),
                    "{:?}",
                    String::from_utf8_lossy(&whole)
                );
            }
        }
    }
}
