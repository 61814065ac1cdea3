//! The vocabulary in a Hugging Face `tokenizer.json`.
//!
//! Token ids come from `model.vocab` (an object `{piece: id}` for BPE and WordLevel, a list of
//! `[piece, score]` for Unigram) and `added_tokens` (`{id, content, special}`). How a piece
//! becomes bytes depends on the decoder: a `ByteLevel` decoder (or pre-tokenizer) means the
//! GPT-2 byte table; `Metaspace`, a `Replace` of `▁`, or `ByteFallback` means SentencePiece
//! (`▁` is a space, `<0xNN>` one byte); otherwise a piece is its own UTF-8 text. Special
//! added tokens are never text; other added tokens are their content as written.

use super::{
    gpt2, parse_byte_token, sentencepiece_bytes, TokenId, TokenKind, Vocabulary, END_OF_TURN_TEXTS,
};
use crate::error::{Error, Result};
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

    // (id, piece, kind) from the model vocabulary, then the added tokens.
    let mut entries: Vec<(usize, &str, bool)> = Vec::new();
    match model.get("vocab") {
        Some(Value::Object(map)) => {
            for (piece, id) in map {
                let id = id
                    .as_u64()
                    .ok_or_else(|| hf_error(format!("the id of `{piece}` is not a number")))?;
                entries.push((id as usize, piece, false));
            }
        }
        Some(Value::Array(list)) => {
            for (id, item) in list.iter().enumerate() {
                let piece = item.get(0).and_then(Value::as_str).ok_or_else(|| {
                    hf_error(format!("model.vocab[{id}] is not a [piece, score] pair"))
                })?;
                entries.push((id, piece, false));
            }
        }
        _ => {
            return Err(hf_error(
                "model.vocab is neither an object nor a list".into(),
            ))
        }
    }
    let mut special_entries: Vec<(usize, &str, bool)> = Vec::new();
    if let Some(added) = root.get("added_tokens").and_then(Value::as_array) {
        for (i, t) in added.iter().enumerate() {
            let id = t.get("id").and_then(Value::as_u64);
            let content = t.get("content").and_then(Value::as_str);
            let (Some(id), Some(content)) = (id, content) else {
                return Err(hf_error(format!(
                    "added_tokens[{i}] needs a numeric id and a content"
                )));
            };
            let special = t.get("special").and_then(Value::as_bool).unwrap_or(false);
            special_entries.push((id as usize, content, special));
        }
    }

    let n = entries
        .iter()
        .chain(&special_entries)
        .map(|e| e.0 + 1)
        .max()
        .unwrap_or(0);
    if n > u32::MAX as usize - 1 {
        return Err(Error::limit_exceeded(format!(
            "tokenizer.json: token id {} is too large",
            n - 1
        )));
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
        tokens[id] = (bytes, TokenKind::Text);
    }
    for &(id, content, special) in &special_entries {
        let kind = if special {
            TokenKind::Special
        } else {
            TokenKind::Text
        };
        tokens[id] = (content.as_bytes().to_vec(), kind);
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
