//! Vocabularies from synthetic GGUF files and tokenizer.json texts, and masks over them.

mod constraint_support;

use constraint_support::matcher;
use poot::gguf::{Builder, Gguf, Value};
use poot::vocab::gpt2::encode;
use poot::vocab::{TokenKind, Vocabulary};
use serde_json::json;

const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

/// A byte-level BPE vocabulary as a GPT-2-style GGUF stores it.
fn gpt2_gguf() -> Vec<u8> {
    let pieces: Vec<(Vec<u8>, i32)> = vec![
        (b"<|endoftext|>".to_vec(), CONTROL), // 0
        (b"<|im_start|>".to_vec(), CONTROL),  // 1
        (b"<|im_end|>".to_vec(), CONTROL),    // 2
        (b" the".to_vec(), NORMAL),           // 3: "Ġthe"
        (b"\n".to_vec(), NORMAL),             // 4: "Ċ"
        ("é".as_bytes().to_vec(), NORMAL),    // 5: "Ã©"
        (vec![0xC3], NORMAL),                 // 6: half of é
        (vec![0xA9], NORMAL),                 // 7: the other half
        ("αβ".as_bytes().to_vec(), NORMAL),   // 8
        (b"a".to_vec(), NORMAL),              // 9
        (b"<think>".to_vec(), USER_DEFINED),  // 10: raw text
        (vec![0xCE], NORMAL),                 // 11: lead byte of α, β
        (vec![0xB1], NORMAL),                 // 12: tail of α
    ];
    let texts: Vec<Vec<u8>> = pieces
        .iter()
        .map(|(b, ty)| {
            if *ty == NORMAL {
                encode(b).into_bytes()
            } else {
                b.clone()
            }
        })
        .collect();
    let types: Vec<i32> = pieces.iter().map(|p| p.1).collect();
    Builder::new()
        .string("general.architecture", "llama")
        .string("tokenizer.ggml.model", "gpt2")
        .strings("tokenizer.ggml.tokens", &texts)
        .i32s("tokenizer.ggml.token_type", &types)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .tensor("token_embd.weight", &[32, 13], 3, vec![0; 20 * 13])
        .build()
}

/// A SentencePiece vocabulary as a llama-style GGUF stores it.
fn llama_gguf() -> Vec<u8> {
    let pieces: Vec<(&str, i32)> = vec![
        ("<unk>", UNKNOWN),         // 0
        ("<s>", CONTROL),           // 1
        ("</s>", CONTROL),          // 2
        ("<0x0A>", BYTE),           // 3: "\n"
        ("<0xC3>", BYTE),           // 4
        ("<0xA9>", BYTE),           // 5
        ("▁the", NORMAL),           // 6: " the"
        ("▁", NORMAL),              // 7: " "
        ("é", NORMAL),              // 8
        ("▁▁", NORMAL),             // 9: two spaces
        ("<end_of_turn>", CONTROL), // 10
        ("<unused0>", UNUSED),      // 11
        ("cat", NORMAL),            // 12
        ("▁c", NORMAL),             // 13
        ("at", NORMAL),             // 14
    ];
    let texts: Vec<&str> = pieces.iter().map(|p| p.0).collect();
    let types: Vec<i32> = pieces.iter().map(|p| p.1).collect();
    Builder::new()
        .string("tokenizer.ggml.model", "llama")
        .strings("tokenizer.ggml.tokens", &texts)
        .i32s("tokenizer.ggml.token_type", &types)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .build()
}

#[test]
fn gpt2_gguf_undoes_the_byte_table() {
    let file = gpt2_gguf();
    let v = Vocabulary::from_gguf(&Gguf::parse(&file).unwrap()).unwrap();
    assert_eq!(v.len(), 13);
    assert_eq!(v.bytes(3), b" the");
    assert_eq!(v.bytes(4), b"\n");
    assert_eq!(v.bytes(5), "é".as_bytes());
    assert_eq!((v.bytes(6), v.bytes(7)), (&[0xC3][..], &[0xA9][..]));
    assert_eq!(v.bytes(8), "αβ".as_bytes());
    assert_eq!(v.bytes(10), b"<think>");
    assert_eq!(
        v.kind(10),
        Some(TokenKind::Text),
        "user-defined tokens are text"
    );
    // eos_token_id plus <|im_end|>/<|endoftext|> as end-of-turn tokens; never text.
    assert_eq!(v.eos(), &[0, 2]);
    assert!(!v.is_text(0) && !v.is_text(1) && !v.is_text(2));
}

#[test]
fn llama_gguf_maps_spaces_and_byte_tokens() {
    let v = Vocabulary::from_gguf_bytes(&llama_gguf()).unwrap();
    assert_eq!(v.bytes(3), b"\n");
    assert_eq!(v.bytes(4), &[0xC3]);
    assert_eq!(v.bytes(6), b" the");
    assert_eq!(v.bytes(7), b" ");
    assert_eq!(v.bytes(9), b"  ");
    assert_eq!(v.eos(), &[2, 10], "</s> and <end_of_turn>");
    for special in [0, 1, 11] {
        assert_eq!(v.kind(special), Some(TokenKind::Special), "token {special}");
    }
}

#[test]
fn a_pattern_with_a_leading_space_constrains_sentencepiece_words() {
    let v = std::sync::Arc::new(Vocabulary::from_gguf_bytes(&llama_gguf()).unwrap());
    let mut m = matcher(" the [a-z]+", &v);
    let mask = m.mask().unwrap();
    let allowed: Vec<usize> = (0..v.len()).filter(|&t| mask.is_allowed(t)).collect();
    assert_eq!(allowed, vec![6, 7], "▁the and ▁");
    m.advance(6).unwrap();
    let mask = m.mask().unwrap();
    let allowed: Vec<usize> = (0..v.len()).filter(|&t| mask.is_allowed(t)).collect();
    assert_eq!(
        allowed,
        vec![6, 7, 13],
        "▁the, ▁ and ▁c; ▁▁ would be two spaces"
    );
    m.advance(13).unwrap();
    m.advance(14).unwrap();
    assert!(m.is_accepting());
    let mask = m.mask().unwrap();
    assert!(mask.is_allowed(2) && mask.is_allowed(10), "both end tokens");
    assert!(!mask.is_allowed(1) && !mask.is_allowed(11) && !mask.is_allowed(0));

    // Byte-fallback tokens spell é one byte at a time.
    let mut m = matcher("é\n", &v);
    assert!(m.mask().unwrap().is_allowed(4) && m.mask().unwrap().is_allowed(8));
    m.advance(4).unwrap();
    assert_eq!(m.forced_bytes(), b"\xA9\n");
    m.advance(5).unwrap();
    m.advance(3).unwrap();
    assert!(m.is_accepting());
}

#[test]
fn gguf_vocabulary_errors_are_clear() {
    let no_model = Builder::new()
        .strings("tokenizer.ggml.tokens", &["a"])
        .build();
    assert_eq!(
        Vocabulary::from_gguf_bytes(&no_model)
            .unwrap_err()
            .to_string(),
        "GGUF vocabulary: the file has no tokenizer.ggml.model"
    );
    let bert = Builder::new()
        .string("tokenizer.ggml.model", "bert")
        .strings("tokenizer.ggml.tokens", &["a"])
        .build();
    assert!(Vocabulary::from_gguf_bytes(&bert)
        .unwrap_err()
        .to_string()
        .contains("`bert` is not supported"));
    let mismatch = Builder::new()
        .string("tokenizer.ggml.model", "gpt2")
        .strings("tokenizer.ggml.tokens", &["a", "b"])
        .i32s("tokenizer.ggml.token_type", &[1])
        .build();
    assert_eq!(
        Vocabulary::from_gguf_bytes(&mismatch)
            .unwrap_err()
            .to_string(),
        "GGUF vocabulary: tokenizer.ggml.token_type has 1 entries for 2 tokens"
    );
    let bad_eos = Builder::new()
        .string("tokenizer.ggml.model", "gpt2")
        .strings("tokenizer.ggml.tokens", &["a"])
        .u32("tokenizer.ggml.eos_token_id", 5)
        .build();
    assert!(Vocabulary::from_gguf_bytes(&bad_eos)
        .unwrap_err()
        .to_string()
        .contains("eos_token_id U32(5)"));
    let bad_byte = Builder::new()
        .string("tokenizer.ggml.model", "llama")
        .strings("tokenizer.ggml.tokens", &["<0xZZ>"])
        .i32s("tokenizer.ggml.token_type", &[BYTE])
        .build();
    assert!(Vocabulary::from_gguf_bytes(&bad_byte)
        .unwrap_err()
        .to_string()
        .contains("is not <0xNN>"));

    let file = gpt2_gguf();
    let err = Vocabulary::from_gguf_bytes(&file[..100]).unwrap_err();
    assert!(err.to_string().starts_with("GGUF: at byte "), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");
    // The whole-file parse also sees the tensor data cut short.
    let err = Gguf::parse(&file[..file.len() - 4]).unwrap_err();
    assert!(
        err.to_string().contains(
            "tensor `token_embd.weight` (260 bytes at data offset 0) extends past the end"
        ),
        "{err}"
    );
}

#[test]
fn gguf_value_accessors_read_tokenizer_arrays() {
    let file = gpt2_gguf();
    let g = Gguf::parse(&file).unwrap();
    let tokens = g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
    assert_eq!(tokens.get(3).unwrap().as_str(), Some("Ġthe"));
    assert_eq!(g.get("tokenizer.ggml.eos_token_id"), Some(&Value::U32(2)));
    assert_eq!(g.tensors()[0].name, "token_embd.weight");
}

#[test]
fn tokenizer_json_byte_level_bpe() {
    let json = json!({
        "added_tokens": [
            {"id": 0, "content": "<|endoftext|>", "special": true},
            {"id": 1, "content": "<|im_end|>", "special": true},
            {"id": 6, "content": "<tool>", "special": false}
        ],
        "pre_tokenizer": {"type": "ByteLevel"},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"Ġthe": 2, "Ã©": 3, "Ã": 4, "©": 5}, "merges": []}
    });
    let v = Vocabulary::from_tokenizer_json(json.to_string().as_bytes(), None).unwrap();
    assert_eq!(v.len(), 7);
    assert_eq!(v.bytes(2), b" the");
    assert_eq!(v.bytes(3), "é".as_bytes());
    assert_eq!((v.bytes(4), v.bytes(5)), (&[0xC3][..], &[0xA9][..]));
    assert_eq!(v.bytes(6), b"<tool>");
    assert!(v.is_text(6) && !v.is_text(0));
    assert_eq!(v.eos(), &[0, 1]);
    let v = Vocabulary::from_tokenizer_json(json.to_string().as_bytes(), Some(vec![1])).unwrap();
    assert_eq!(v.eos(), &[1]);
}

#[test]
fn tokenizer_json_sentencepiece_with_byte_fallback() {
    let json = json!({
        "added_tokens": [{"id": 2, "content": "</s>", "special": true}],
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}
        ]},
        "model": {"type": "BPE", "byte_fallback": true,
                  "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁the": 4, "é": 5}}
    });
    let v = Vocabulary::from_tokenizer_json(json.to_string().as_bytes(), None).unwrap();
    assert_eq!(v.bytes(3), b"\n");
    assert_eq!(v.bytes(4), b" the");
    assert_eq!(v.bytes(5), "é".as_bytes());
    assert_eq!(v.eos(), &[2]);

    let unigram = json!({"decoder": {"type": "Metaspace", "replacement": "▁"},
        "model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["b", -2.0]]}});
    let v = Vocabulary::from_tokenizer_json(unigram.to_string().as_bytes(), Some(vec![0])).unwrap();
    assert_eq!((v.bytes(1), v.bytes(2)), (&b" a"[..], &b"b"[..]));

    let err = Vocabulary::from_tokenizer_json(b"{", None).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("tokenizer.json: not valid JSON"),
        "{err}"
    );
    let wordpiece = json!({"model": {"type": "WordPiece", "vocab": {"a": 0}}});
    assert!(Vocabulary::from_tokenizer_json(wordpiece.to_string().as_bytes(), None).is_err());
}
