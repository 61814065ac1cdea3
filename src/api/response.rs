//! OpenAI wire shapes: responses, stream chunks, logprobs and error bodies.

use serde_json::{json, Value};

use super::request::Endpoint;
use super::run::TokenLogprob;
use super::tools::ToolCall;
use crate::error::Error;
use crate::model::Finish;
use crate::vocab::Vocabulary;

/// What every response and chunk of one request repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            // Completions chunks keep the object name (OpenAI's own stream does).
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": concat!("poot-", env!("CARGO_PKG_VERSION")),
            "choices": choices,
        })
    }
}

/// The OpenAI error body of `error`: `{"error":{"message","type","param","code"}}`.
pub fn error_body(error: &Error) -> Value {
    json!({"error": {
        "message": error.message(),
        "type": if error.is_client_error() { "invalid_request_error" } else { "server_error" },
        "param": error.param(),
        "code": error.code(),
    }})
}

/// The HTTP status of `error`: 400 for the caller's fault, 500 for ours.
pub fn error_status(error: &Error) -> u16 {
    if error.is_client_error() {
        400
    } else {
        500
    }
}

/// The text of a token for a logprob entry: its bytes as UTF-8 (a SentencePiece word start
/// keeps its leading space), invalid bytes replaced; `bytes` carries them exactly.
fn token_entry(vocab: &Vocabulary, id: u32, logprob: f32) -> Value {
    let bytes = vocab.bytes(id);
    json!({
        "token": String::from_utf8_lossy(bytes),
        "logprob": logprob,
        "bytes": bytes,
    })
}

/// The `logprobs` object of a choice or chunk for `entries`.
pub fn logprobs_json(endpoint: Endpoint, entries: &[TokenLogprob], vocab: &Vocabulary) -> Value {
    match endpoint {
        Endpoint::Chat => {
            let content: Vec<Value> = entries
                .iter()
                .map(|e| {
                    let mut entry = token_entry(vocab, e.token, e.logprob);
                    entry["top_logprobs"] = e
                        .top
                        .iter()
                        .map(|&(id, lp)| token_entry(vocab, id, lp))
                        .collect();
                    entry
                })
                .collect();
            // `refusal`: OpenAI's field for refusal tokens, which a local model never has.
            json!({"content": content, "refusal": null})
        }
        Endpoint::Completion => {
            let text = |id: u32| String::from_utf8_lossy(vocab.bytes(id)).into_owned();
            let mut offset = 0usize;
            let mut offsets = Vec::with_capacity(entries.len());
            for e in entries {
                offsets.push(offset);
                offset += vocab.bytes(e.token).len();
            }
            json!({
                "tokens": entries.iter().map(|e| text(e.token)).collect::<Vec<_>>(),
                "token_logprobs": entries.iter().map(|e| e.logprob).collect::<Vec<_>>(),
                "top_logprobs": entries.iter().map(|e| {
                    e.top.iter().map(|&(id, lp)| (text(id), Value::from(lp))).collect::<serde_json::Map<_, _>>()
                }).collect::<Vec<_>>(),
                "text_offset": offsets,
            })
        }
    }
}

fn tool_calls_json(calls: &[ToolCall], with_index: bool) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            });
            if with_index {
                v["index"] = i.into();
            }
            v
        })
        .collect()
}

/// One choice of a whole response.
pub fn choice_json(
    endpoint: Endpoint,
    index: usize,
    content: Option<&str>,
    calls: &[ToolCall],
    logprobs: Option<Value>,
    finish: Finish,
) -> Value {
    match endpoint {
        Endpoint::Chat => {
            // `refusal` is always null (OpenAI's clients expect the field).
            let mut message = json!({"role": "assistant", "content": content, "refusal": null});
            if !calls.is_empty() {
                message["tool_calls"] = tool_calls_json(calls, false);
            }
            json!({"index": index, "message": message, "logprobs": logprobs,
                   "finish_reason": finish.as_str()})
        }
        Endpoint::Completion => json!({
            "index": index, "text": content.unwrap_or(""), "logprobs": logprobs,
            "finish_reason": finish.as_str(),
        }),
    }
}

/// A whole response.
pub fn completion_json(meta: &Meta, choices: Vec<Value>, usage: Value) -> Value {
    let mut body = meta.envelope(false, choices);
    body["usage"] = usage;
    body
}

/// The first chunk of a chat choice, which carries the role (completions have none).
pub fn role_chunk(meta: &Meta, index: usize) -> Option<Value> {
    (meta.endpoint == Endpoint::Chat).then(|| {
        meta.envelope(
            true,
            vec![
                json!({"index": index, "delta": {"role": "assistant", "content": ""},
                        "logprobs": null, "finish_reason": null}),
            ],
        )
    })
}

/// A chunk with new text (and the logprobs of the tokens since the last chunk).
pub fn content_chunk(meta: &Meta, index: usize, text: &str, logprobs: Option<Value>) -> Value {
    let choice = match meta.endpoint {
        Endpoint::Chat => json!({"index": index, "delta": {"content": text},
                                 "logprobs": logprobs, "finish_reason": null}),
        Endpoint::Completion => json!({"index": index, "text": text,
                                       "logprobs": logprobs, "finish_reason": null}),
    };
    meta.envelope(true, vec![choice])
}

/// A chunk with a choice's tool calls, whole (names and arguments in one delta).
pub fn tool_calls_chunk(meta: &Meta, index: usize, calls: &[ToolCall]) -> Value {
    meta.envelope(
        true,
        vec![
            json!({"index": index, "delta": {"tool_calls": tool_calls_json(calls, true)},
                    "logprobs": null, "finish_reason": null}),
        ],
    )
}

/// The last chunk of a choice.
pub fn finish_chunk(meta: &Meta, index: usize, finish: Finish) -> Value {
    let choice = match meta.endpoint {
        Endpoint::Chat => json!({"index": index, "delta": {}, "logprobs": null,
                                 "finish_reason": finish.as_str()}),
        Endpoint::Completion => json!({"index": index, "text": "", "logprobs": null,
                                       "finish_reason": finish.as_str()}),
    };
    meta.envelope(true, vec![choice])
}

/// The chunk `stream_options.include_usage` adds after the last choice: no choices, `usage`.
pub fn usage_chunk(meta: &Meta, usage: Value) -> Value {
    let mut chunk = meta.envelope(true, Vec::new());
    chunk["usage"] = usage;
    chunk
}
