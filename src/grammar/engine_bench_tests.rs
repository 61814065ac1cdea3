//! Cold-mask timing on the Gemma vocabulary (an ignored test; see its doc).

use super::*;

/// Cold masks (fresh index, least of 15) after each byte of three bench texts on the Gemma
/// vocabulary, steadier than `scripts/bench_grammar.sh` on a shared machine:
/// `POOT_GEMMA_GGUF=... cargo test --release --lib cold_masks -- --ignored --nocapture`.
#[test]
#[ignore]
fn cold_masks_at_262k() {
    let path = std::env::var("POOT_GEMMA_GGUF").unwrap();
    let vocab = Arc::new(Vocabulary::from_gguf_bytes(&std::fs::read(path).unwrap()).unwrap());
    let words = crate::mask::words_for(vocab.len());
    let mut out = vec![0u32; words];
    for (file, text) in [
        (
            include_str!("../../tests/data/grammars/c_like.gbnf"),
            "int main(int argc, char argv) {\n  int x = 10;\n  while (x > 0) {",
        ),
        (
            include_str!("../../tests/data/grammars/json.gbnf"),
            "{\"name\": \"Bel Ortiz\", \"age\": 42, \"tags\": [\"fire\"",
        ),
        (
            include_str!("../../tests/data/grammars/arithmetic.gbnf"),
            "x = 3\ny = x * (2 + 4.5)\nz = f(x, y)",
        ),
    ] {
        let g = Grammar::new(file).unwrap();
        let mut worst = (0.0f64, 0);
        let mut total = 0.0;
        for k in 0..text.len() {
            let mut best = f64::MAX;
            for _ in 0..15 {
                let index = Index::new(g.clone(), vocab.clone());
                let mut parse = Parse::new(&g);
                assert!(parse
                    .advance(&g, &text.as_bytes()[..k], &mut Work::unlimited())
                    .unwrap());
                let t0 = std::time::Instant::now();
                index.fill(&parse, &mut out).unwrap();
                best = best.min(t0.elapsed().as_secs_f64() * 1e6);
            }
            total += best;
            if best > worst.0 {
                worst = (best, k);
            }
        }
        eprintln!(
            "worst {:.0} us at byte {} ({:?}); sum {:.0} us",
            worst.0,
            worst.1,
            &text[..worst.1],
            total
        );
    }
}
