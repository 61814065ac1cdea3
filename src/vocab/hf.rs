//! The vocabulary in a Hugging Face `tokenizer.json`.
//!
//! Token ids come from `model.vocab` (an object `{piece: id}` for BPE and WordLevel, a list of
//! `[piece, score]` for Unigram) and `added_tokens` (`{id, content, special}`). How a piece
//! becomes bytes depends on the decoder: a `ByteLevel` decoder (or pre-tokenizer) means the
//! GPT-2 byte table; `Metaspace`, a `Replace` of `▁`, or `ByteFallback` means SentencePiece
//! (`▁` is a space, `<0xNN>` one byte); otherwise a piece is its own UTF-8 text. Special
//! added tokens are never text; other added tokens are their content as written.
//!
//! Ids are checked before anything is sized by them: each is a non-negative integer below the
//! number of entries (`model.vocab` plus `added_tokens`, so ids may skip a few numbers but a
//! single id of 4 billion is refused instead of sizing a 100 GB table) and below
//! [`MAX_VOCAB_TOKENS`]. Two pieces of `model.vocab` with one id, or two added tokens with one
//! id, are refused (which one the id means would be a guess); an added token may repeat a
//! `model.vocab` id, as most files do for their special tokens, and then defines that token.
//! An id that no entry names is a special token with no bytes, never allowed by a constraint.

use super::{
    gpt2, parse_byte_token, sentencepiece_bytes, TokenId, TokenKind, Vocabulary, END_OF_TURN_TEXTS,
};
use crate::error::{Error, Result};
use crate::limits::MAX_VOCAB_TOKENS;
use serde_json::Value;

fn hf_error(message: String) -> Error {
    Error::invalid_input(format!("tokenizer.json: {message}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoding {
    ByteLevel,
    SentencePiece,
    Plain,
}

/// Whether a decoder or pre-tokenizer (possibly a `Sequence`) contains a step of `kind`.
fn has_step(node: &Value, pred: &dyn Fn(&Value) -> bool) -> bool {
    if node.is_null() {
        return false;
    }
    if pred(node) {
        return true;
    }
    ["decoders", "pretokenizers"].iter().any(|list| {
        node.get(list)
            .and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(|n| has_step(n, pred)))
    })
}

fn decoding(root: &Value) -> Decoding {
    let ty = |n: &Value, t: &str| n.get("type").and_then(Value::as_str) == Some(t);
    let decoder = root.get("decoder").unwrap_or(&Value::Null);
    let pre = root.get("pre_tokenizer").unwrap_or(&Value::Null);
    if has_step(decoder, &|n| ty(n, "ByteLevel")) || has_step(pre, &|n| ty(n, "ByteLevel")) {
        return Decoding::ByteLevel;
    }
    let spm = |n: &Value| {
        ty(n, "Metaspace")
            || ty(n, "ByteFallback")
            || (ty(n, "Replace")
                && n.pointer("/pattern/String").and_then(Value::as_str) == Some("\u{2581}"))
    };
    let byte_fallback = root
        .pointer("/model/byte_fallback")
        .and_then(Value::as_bool)
        == Some(true);
    if byte_fallback || has_step(decoder, &spm) || has_step(pre, &|n| ty(n, "Metaspace")) {
        return Decoding::SentencePiece;
    }
    Decoding::Plain
}

pub(super) fn from_tokenizer_json(json: &[u8], eos: Option<Vec<TokenId>>) -> Result<Vocabulary> {
    let root: Value = serde_json::from_slice(json)
        .map_err(|e| hf_error(format!("not valid JSON: {e}")).with_source(e))?;
    let model = root
        .get("model")
        .ok_or_else(|| hf_error("no `model` object".into()))?;
    let model_type = model.get("type").and_then(Value::as_str).unwrap_or("");
    if model_type == "WordPiece" {
        return Err(hf_error(
            "WordPiece models are not supported (BPE and Unigram are)".into(),
        ));
    }
    let decoding = decoding(&root);

    // (id, piece, special) from the model vocabulary, then the added tokens. Ids are kept as
    // u64 until checked, so none wraps on a 32-bit target.
    let mut entries: Vec<(u64, &str, bool)> = Vec::new();
    match model.get("vocab") {
        Some(Value::Object(map)) => {
            for (piece, id) in map {
                let id = id.as_u64().ok_or_else(|| {
                    hf_error(format!(
                        "the id of `{piece}` in model.vocab is {id}, not a non-negative integer"
                    ))
                })?;
                entries.push((id, piece, false));
            }
        }
        Some(Value::Array(list)) => {
            for (id, item) in list.iter().enumerate() {
                let piece = item.get(0).and_then(Value::as_str).ok_or_else(|| {
                    hf_error(format!("model.vocab[{id}] is not a [piece, score] pair"))
                })?;
                entries.push((id as u64, piece, false));
            }
        }
        _ => {
            return Err(hf_error(
                "model.vocab is neither an object nor a list".into(),
            ))
        }
    }
    let mut special_entries: Vec<(u64, &str, bool)> = Vec::new();
    if let Some(added) = root.get("added_tokens").and_then(Value::as_array) {
        for (i, t) in added.iter().enumerate() {
            let id = t.get("id").and_then(Value::as_u64);
            let content = t.get("content").and_then(Value::as_str);
            let (Some(id), Some(content)) = (id, content) else {
                return Err(hf_error(format!(
                    "added_tokens[{i}] needs a non-negative integer id and a string content"
                )));
            };
            let special = t.get("special").and_then(Value::as_bool).unwrap_or(false);
            special_entries.push((id, content, special));
        }
    }

    // Every id below the number of entries, before the table is sized by the largest.
    let count = entries.len() + special_entries.len();
    if count > MAX_VOCAB_TOKENS {
        return Err(Error::limit_exceeded(format!(
            "tokenizer.json: {count} entries in model.vocab and added_tokens, over the limit of \
             {MAX_VOCAB_TOKENS} tokens (MAX_VOCAB_TOKENS)"
        )));
    }
    let n = match entries.iter().chain(&special_entries).max_by_key(|e| e.0) {
        None => 0,
        Some(&(id, piece, _)) if id >= count as u64 => {
            return Err(hf_error(format!(
                "token id {id} (`{piece}`) is past the {count} entries of model.vocab and \
                 added_tokens"
            )))
        }
        Some(&(id, _, _)) => id as usize + 1,
    };
    // One piece per id within model.vocab, and one added token per id.
    for (list, what) in [
        (&entries, "model.vocab"),
        (&special_entries, "added_tokens"),
    ] {
        let mut seen = vec![false; n];
        for &(id, piece, _) in list.iter() {
            if std::mem::replace(&mut seen[id as usize], true) {
                return Err(hf_error(format!(
                    "token id {id} appears twice in {what} (the second time for `{piece}`)"
                )));
            }
        }
    }
    // Ids that no entry names stay special with no bytes, so they are never allowed.
    let mut tokens: Vec<(Vec<u8>, TokenKind)> = vec![(Vec::new(), TokenKind::Special); n];
    let table = gpt2::table();
    for &(id, piece, _) in &entries {
        let bytes = match decoding {
            Decoding::ByteLevel => {
                gpt2::decode(piece, &table).unwrap_or_else(|| piece.as_bytes().to_vec())
            }
            Decoding::SentencePiece => match parse_byte_token(piece.as_bytes()) {
                Some(b) => vec![b],
                None => sentencepiece_bytes(piece),
            },
            Decoding::Plain => piece.as_bytes().to_vec(),
        };
        tokens[id as usize] = (bytes, TokenKind::Text);
    }
    for &(id, content, special) in &special_entries {
        let kind = if special {
            TokenKind::Special
        } else {
            TokenKind::Text
        };
        tokens[id as usize] = (content.as_bytes().to_vec(), kind);
    }

    let eos = match eos {
        Some(eos) => eos,
        None => special_entries
            .iter()
            .filter(|(_, c, special)| {
                *special && (END_OF_TURN_TEXTS.contains(c) || *c == "</s>" || *c == "<eos>")
            })
            .map(|&(id, _, _)| id as TokenId)
            .collect(),
    };
    Vocabulary::from_tokens(tokens, eos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(doc: &Value) -> Result<Vocabulary> {
        from_tokenizer_json(doc.to_string().as_bytes(), None)
    }

    fn bpe(vocab: Value, added: Value) -> Value {
        json!({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added})
    }

    #[test]
    fn huge_ids_are_refused_before_any_table_is_sized() {
        for id in [
            u64::from(u32::MAX) - 2,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 5,
            1 << 60,
            u64::MAX,
        ] {
            let err = read(&bpe(json!({"a": 0, "b": id}), json!([]))).unwrap_err();
            assert_eq!(err.code(), "invalid_input");
            assert_eq!(
                err.to_string(),
                format!(
                    "tokenizer.json: token id {id} (`b`) is past the 2 entries of model.vocab \
                     and added_tokens"
                )
            );
            let err = read(&bpe(
                json!({"a": 0}),
                json!([{"id": id, "content": "<x>", "special": true}]),
            ))
            .unwrap_err();
            assert!(
                err.to_string().contains("(`<x>`) is past the 2 entries"),
                "{err}"
            );
        }
    }

    #[test]
    fn ids_must_be_non_negative_integers() {
        for bad in [json!(-1), json!(1.5), json!("1"), json!(null)] {
            let err = read(&bpe(json!({"a": 0, "b": bad}), json!([]))).unwrap_err();
            assert!(
                err.to_string().contains("the id of `b` in model.vocab is"),
                "{err}"
            );
            let err =
                read(&bpe(json!({"a": 0}), json!([{"id": bad, "content": "x"}]))).unwrap_err();
            assert!(
                err.to_string()
                    .contains("added_tokens[0] needs a non-negative integer id"),
                "{err}"
            );
        }
    }

    #[test]
    fn duplicate_ids_and_gaps() {
        // Two pieces with one id: refused.
        let err = read(&bpe(json!({"a": 0, "b": 0}), json!([]))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tokenizer.json: token id 0 appears twice in model.vocab (the second time for `b`)"
        );
        // Two added tokens with one id: refused.
        let err = read(&bpe(
            json!({"a": 0}),
            json!([{"id": 1, "content": "<x>"}, {"id": 1, "content": "<y>"}]),
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("appears twice in added_tokens"),
            "{err}"
        );
        // An added token repeating a model.vocab id defines that token (special here).
        let v = read(&bpe(
            json!({"a": 0, "<s>": 1}),
            json!([{"id": 1, "content": "<s>", "special": true}]),
        ))
        .unwrap();
        assert_eq!(v.len(), 2);
        assert!(v.is_text(0) && !v.is_text(1));
        // A gap (id 2 unnamed) within the entry count: a special token with no bytes.
        let v = read(&bpe(
            json!({"a": 0, "b": 1, "c": 3}),
            json!([{"id": 1, "content": "<x>"}]),
        ))
        .unwrap();
        assert_eq!(v.len(), 4);
        assert!(!v.is_text(2) && v.bytes(2).is_empty());
        assert_eq!((v.bytes(1), v.bytes(3)), (&b"<x>"[..], &b"c"[..]));
    }
}
