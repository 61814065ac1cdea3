//! The vocabulary in a GGUF file's `tokenizer.ggml.*` metadata.

use super::{
    gpt2, parse_byte_token, sentencepiece_bytes, TokenId, TokenKind, Vocabulary, END_OF_TURN_TEXTS,
};
use crate::error::{Error, Result};
use crate::gguf::{Array, Gguf, Value};
use crate::limits::MAX_VOCAB_TOKENS;

/// llama.cpp's `llama_token_type` values in `tokenizer.ggml.token_type`.
mod token_type {
    pub const UNDEFINED: i64 = 0;
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
    pub const UNUSED: i64 = 5;
    pub const BYTE: i64 = 6;
}

fn vocab_error(message: String) -> Error {
    Error::invalid_input(format!("GGUF vocabulary: {message}"))
}

pub(super) fn from_gguf(gguf: &Gguf<'_>) -> Result<Vocabulary> {
    let model = match gguf.get("tokenizer.ggml.model") {
        None => return Err(vocab_error("the file has no tokenizer.ggml.model".into())),
        Some(v) => v.as_str().ok_or_else(|| {
            vocab_error(format!("tokenizer.ggml.model must be a string, got {v:?}"))
        })?,
    };
    let byte_level = match model {
        "gpt2" => true,
        "llama" => false,
        other => {
            return Err(vocab_error(format!(
                "tokenizer.ggml.model `{other}` is not supported (gpt2 and llama are)"
            )))
        }
    };
    let texts = match gguf.get("tokenizer.ggml.tokens").and_then(Value::as_array) {
        Some(items) => items,
        None => {
            return Err(vocab_error(
                "the file has no tokenizer.ggml.tokens array".into(),
            ))
        }
    };
    if texts.len() > MAX_VOCAB_TOKENS {
        return Err(Error::limit_exceeded(format!(
            "GGUF vocabulary: tokenizer.ggml.tokens has {} tokens, over the limit of \
             {MAX_VOCAB_TOKENS} (MAX_VOCAB_TOKENS)",
            texts.len()
        )));
    }
    let types: Option<Array<'_>> = match gguf.get("tokenizer.ggml.token_type") {
        None => None,
        Some(v) => Some(
            v.as_array()
                .ok_or_else(|| vocab_error("tokenizer.ggml.token_type must be an array".into()))?,
        ),
    };
    if let Some(types) = types {
        if types.len() != texts.len() {
            return Err(vocab_error(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                texts.len()
            )));
        }
    }

    let table = gpt2::table();
    let mut tokens = Vec::with_capacity(texts.len());
    let mut special_names: Vec<(usize, &str)> = Vec::new();
    // The token types in step with the tokens (the lengths were checked equal).
    let mut type_values = types.map(|t| t.iter());
    // Per token: its text, and whether it is user-defined (for the end-of-turn scan below).
    let mut user_defined: Vec<bool> = Vec::with_capacity(texts.len());
    for (i, v) in texts.iter().enumerate() {
        let text = v.as_str().ok_or_else(|| {
            vocab_error(format!(
                "token {i} of tokenizer.ggml.tokens is not a UTF-8 string"
            ))
        })?;
        let ty = match type_values.as_mut().map(Iterator::next) {
            None => token_type::NORMAL,
            Some(t) => t
                .and_then(|t| t.as_i64())
                .ok_or_else(|| vocab_error(format!("token_type {i} is not an integer: {t:?}")))?,
        };
        user_defined.push(ty == token_type::USER_DEFINED);
        let token = match ty {
            token_type::UNDEFINED | token_type::NORMAL if byte_level => {
                // A character outside the byte table (an added token stored as NORMAL) is
                // text as written, as llama.cpp prints it.
                (
                    gpt2::decode(text, &table).unwrap_or_else(|| text.as_bytes().to_vec()),
                    TokenKind::Text,
                )
            }
            token_type::UNDEFINED | token_type::NORMAL => match parse_byte_token(text.as_bytes()) {
                // Without token types, `<0xNN>` in a SentencePiece vocabulary is a byte token.
                Some(b) if types.is_none() => (vec![b], TokenKind::Text),
                _ => (sentencepiece_bytes(text), TokenKind::Text),
            },
            token_type::BYTE => match parse_byte_token(text.as_bytes()) {
                Some(b) => (vec![b], TokenKind::Text),
                None if byte_level => (
                    gpt2::decode(text, &table).unwrap_or_else(|| text.as_bytes().to_vec()),
                    TokenKind::Text,
                ),
                None => {
                    return Err(vocab_error(format!(
                        "byte token {i} `{text}` is not <0xNN>"
                    )))
                }
            },
            token_type::USER_DEFINED => (text.as_bytes().to_vec(), TokenKind::Text),
            token_type::UNKNOWN | token_type::CONTROL | token_type::UNUSED => {
                special_names.push((i, text));
                (text.as_bytes().to_vec(), TokenKind::Special)
            }
            other => {
                return Err(vocab_error(format!(
                    "token {i} has unknown token_type {other}"
                )))
            }
        };
        tokens.push(token);
    }

    let mut eos: Vec<TokenId> = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        if let Some(v) = gguf.get(key) {
            let id = v
                .as_u64()
                .filter(|&id| id < texts.len() as u64)
                .ok_or_else(|| {
                    vocab_error(format!(
                        "{key} {v:?} is not a token id below {}",
                        texts.len()
                    ))
                })?;
            eos.push(id as TokenId);
        }
    }
    // End-of-turn tokens by name: a control token, or a user-defined one spelled exactly so.
    for &(i, text) in &special_names {
        if END_OF_TURN_TEXTS.contains(&text) {
            eos.push(i as TokenId);
        }
    }
    for (i, text) in texts.iter().enumerate() {
        let Some(text) = text.as_str() else { continue };
        if user_defined[i] && END_OF_TURN_TEXTS.contains(&text) {
            eos.push(i as TokenId);
        }
    }
    Vocabulary::from_tokens(tokens, eos)
}
