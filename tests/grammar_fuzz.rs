//! Fuzz-style: random tokens through the `json_object` matcher never panic, and each is
//! advanced exactly when its mask allows it, with rollbacks in between. (Random and mutated
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
