//! Tokenizers over tiny synthetic vocabularies written as GGUF.

use super::*;
use crate::gguf::{Builder, Value, ValueType};

fn gguf_bytes(b: Builder) -> Vec<u8> {
    b.build()
}

/// A byte-level BPE vocabulary: the 256 byte tokens, some merges, and two control tokens.
fn bpe_file(extra: &[(&str, &str)]) -> Vec<u8> {
    bpe_file_with(extra, &[], "smollm")
}

/// [`bpe_file`] with extra whole-word tokens no merge makes, and a pre-tokenizer name.
fn bpe_file_with(extra: &[(&str, &str)], words: &[&str], pre: &str) -> Vec<u8> {
    let mut tokens: Vec<String> = vec!["<s>".into(), "<|sep|>".into()];
    tokens.extend((0..=255u8).map(|b| crate::vocab::gpt2::encode(&[b])));
    let mut merges = Vec::new();
    for (a, b) in extra {
        merges.push(format!("{a} {b}"));
        let joined = format!("{a}{b}");
        if !tokens.contains(&joined) {
            tokens.push(joined);
        }
    }
    tokens.extend(words.iter().map(|w| w.to_string()));
    let mut types = vec![3, 3];
    types.extend(std::iter::repeat_n(1, tokens.len() - 2));
    gguf_bytes(
        Builder::new()
            .string("tokenizer.ggml.model", "gpt2")
            .string("tokenizer.ggml.pre", pre)
            .strings("tokenizer.ggml.tokens", &tokens)
            .i32s("tokenizer.ggml.token_type", &types)
            .strings("tokenizer.ggml.merges", &merges)
            .u32("tokenizer.ggml.bos_token_id", 0)
            .u32("tokenizer.ggml.eos_token_id", 0),
    )
}

fn texts(tok: &Tokenizer, ids: &[TokenId]) -> Vec<String> {
    ids.iter()
        .map(|&i| String::from_utf8_lossy(tok.piece(i)).into_owned())
        .collect()
}

#[test]
fn bpe_merges_lowest_rank_first() {
    // "Ġ" is the space; ranks: (h,e) < (l,l) < (he,ll) < (Ġ,w) ...
    let file = bpe_file(&[
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
        ("o", "r"),
    ]);
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    let ids = tok.encode("hello world", false, false);
    assert_eq!(texts(&tok, &ids), ["hello", " w", "or", "l", "d"]);
    assert_eq!(tok.decode(&ids, false), b"hello world");
}

#[test]
fn llama3_tokenizers_take_a_word_that_is_a_token_whole() {
    // "hello" is a token no merge reaches; llama.cpp's `ignore_merges` (llama-bpe and kin)
    // takes it whole and adds a BOS by default, other pre-tokenizers merge as far as they can.
    let merges = [("h", "e"), ("l", "l"), ("he", "ll")];
    let llama3 =
        Tokenizer::from_gguf_bytes(&bpe_file_with(&merges, &["hello"], "llama-bpe")).unwrap();
    let ids = llama3.encode("hello", false, false);
    assert_eq!(texts(&llama3, &ids), ["hello"]);
    assert_eq!(
        llama3.encode("hello", true, false)[0],
        0,
        "a BOS by default"
    );
    let qwen2 = Tokenizer::from_gguf_bytes(&bpe_file_with(&merges, &["hello"], "qwen2")).unwrap();
    assert_eq!(
        texts(&qwen2, &qwen2.encode("hello", false, false)),
        ["hell", "o"]
    );
    assert_eq!(
        qwen2.encode("hello", true, false).len(),
        2,
        "no BOS by default"
    );
}

#[test]
fn bpe_ties_merge_the_leftmost_pair() {
    let file = bpe_file(&[("a", "a")]);
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    assert_eq!(texts(&tok, &tok.encode("aaa", false, false)), ["aa", "a"]);
    assert_eq!(texts(&tok, &tok.encode("aaaa", false, false)), ["aa", "aa"]);
}

#[test]
fn bpe_digits_are_split_and_bytes_cover_everything() {
    let file = bpe_file(&[("1", "2")]);
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    // smollm isolates digits before merging, so "12" never merges.
    assert_eq!(texts(&tok, &tok.encode("12", false, false)), ["1", "2"]);
    let text = "é😀\u{0}\n";
    let ids = tok.encode(text, false, false);
    assert_eq!(ids.len(), text.len()); // one byte token per byte
    assert_eq!(tok.decode(&ids, true), text.as_bytes());
}

#[test]
fn special_tokens_are_parsed_only_when_asked() {
    let file = bpe_file(&[]);
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    assert_eq!(
        tok.encode("a<|sep|>b", false, true),
        [tok.token_id("a").unwrap(), 1, tok.token_id("b").unwrap()]
    );
    assert_eq!(tok.encode("<|sep|>", false, false).len(), 7);
    assert_eq!(tok.decode(&[1], true), b"<|sep|>");
    assert_eq!(tok.decode(&[1], false), b"");
}

#[test]
fn long_words_do_not_take_quadratic_time() {
    let file = bpe_file(&[("a", "a"), ("aa", "aa")]);
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    let text = "a".repeat(100_000);
    let ids = tok.encode(&text, false, false);
    assert_eq!(ids.len(), 25_000);
}

/// A SentencePiece vocabulary with scores and byte fallback.
fn spm_file(add_space_prefix: bool) -> Vec<u8> {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0f32, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("▁h", -3.0),
        ("he", -1.5),
        ("ll", -1.0),
        ("▁he", -2.5),
        ("hell", -0.5),
        ("hello", -0.2),
        ("▁hello", -0.1),
    ] {
        tokens.push(piece.into());
        types.push(1);
        scores.push(score);
    }
    let scores: Vec<Value<'_>> = scores.into_iter().map(Value::F32).collect();
    Builder::new()
        .string("tokenizer.ggml.model", "llama")
        .strings("tokenizer.ggml.tokens", &tokens)
        .i32s("tokenizer.ggml.token_type", &types)
        .array("tokenizer.ggml.scores", ValueType::F32, &scores)
        .value(
            "tokenizer.ggml.add_space_prefix",
            &Value::Bool(add_space_prefix),
        )
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .u32("tokenizer.ggml.unknown_token_id", 0)
        .build()
}

#[test]
fn sentencepiece_merges_by_score_with_space_prefix_and_bos() {
    let tok = Tokenizer::from_gguf_bytes(&spm_file(true)).unwrap();
    let ids = tok.encode("hello", true, false);
    assert_eq!(ids[0], 1); // add_bos_token defaults to true for SentencePiece
    assert_eq!(texts(&tok, &ids[1..]), [" hello"]);
    assert_eq!(tok.decode(&ids, false), b"hello"); // the prefixed space is dropped
    let ids = tok.encode("hello hello", false, false);
    assert_eq!(texts(&tok, &ids), [" hello", " hello"]);
}

#[test]
fn sentencepiece_falls_back_to_bytes() {
    let tok = Tokenizer::from_gguf_bytes(&spm_file(false)).unwrap();
    let ids = tok.encode("hé", false, false);
    assert_eq!(texts(&tok, &ids[..1]), ["h"]);
    assert_eq!(ids.len(), 3); // h, 0xC3, 0xA9
    assert_eq!(tok.decode(&ids, false), "hé".as_bytes());
}

#[test]
fn unsupported_models_are_errors() {
    let file = Builder::new()
        .string("tokenizer.ggml.model", "bert")
        .strings("tokenizer.ggml.tokens", &["a"])
        .build();
    let err = Tokenizer::from_gguf_bytes(&file).unwrap_err();
    assert!(err.to_string().contains("`bert` is not supported"), "{err}");
    let file = Builder::new()
        .string("tokenizer.ggml.model", "gpt2")
        .build();
    assert!(Tokenizer::from_gguf_bytes(&file).is_err());
}
