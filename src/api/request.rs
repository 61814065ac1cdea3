//! Reading and validating an OpenAI chat or completions request body.
//!
//! [`Request::parse`] turns the JSON body into typed fields and refuses, with an OpenAI-shaped
//! 400 naming the field, anything out of range — before any model work. What depends on the
//! model (the prompt's length against the context, `logit_bias` ids against the vocabulary,
//! the tool-call codec) is checked in [`super::Run::new`].

use serde_json::{Map, Value};

use super::tools::{parse_tool_choice, parse_tools, render_tool_schemas, Tool, ToolChoice};
use crate::choice::json_kind;
use crate::constraint::Spec;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::sampling::Params;
use crate::vocab::TokenId;

/// Most choices one request may ask for (`n`): each choice is a whole generation, so `n`
/// multiplies the request's time; 16 is vLLM's practical range and OpenAI's documented 128
/// would hold a browser tab for minutes.
pub const MAX_CHOICES: usize = 16;

/// Most stop sequences (OpenAI allows 4; vLLM any number) and the longest one, in bytes.
/// Every step searches the tail of the output for each, so both bound per-step work.
pub const MAX_STOP_SEQUENCES: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

/// Most alternatives per token in `top_logprobs` (chat, OpenAI: 20) and `logprobs`
/// (completions, OpenAI: 5).
pub const MAX_TOP_LOGPROBS: usize = 20;
pub const MAX_COMPLETION_LOGPROBS: usize = 5;

/// Most messages in one chat request, and most entries in `logit_bias` (OpenAI: 300).
pub const MAX_MESSAGES: usize = 1024;
pub const MAX_LOGIT_BIAS: usize = 300;

/// `max_tokens` when the request does not say: enough for a long structured answer, while the
/// KV cache it sizes stays small (SmolLM2-135M: 1024 positions = 45 MiB). Capped by what is
/// left of the model's context after the prompt.
pub const DEFAULT_MAX_TOKENS: usize = 1024;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`: `messages`, replies are `chat.completion`.
    Chat,
    /// `/v1/completions`: `prompt`, replies are `text_completion`.
    Completion,
}

/// The prompt of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Chat messages, each an OpenAI message object with `content` flattened to a string
    /// (or null for an assistant turn that only calls tools).
    Messages(Vec<Value>),
    /// Completion text (tokenized with the model's BOS rule, special tokens parsed).
    Text(String),
    /// Completion token ids, evaluated as given.
    Ids(Vec<TokenId>),
}

/// A validated request.
#[derive(Debug, Clone)]
pub struct Request {
    pub endpoint: Endpoint,
    pub prompt: Prompt,
    /// `max_completion_tokens`, else `max_tokens`; `None` = [`DEFAULT_MAX_TOKENS`] capped by
    /// the context.
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage` and no choices.
    pub include_usage: bool,
    /// Chat `logprobs: true`, or completions `logprobs: k` (then `top_logprobs` = k).
    pub logprobs: bool,
    pub top_logprobs: usize,
    /// Sampling settings; `seed` is `sampling.seed` when the request has one.
    pub sampling: Params,
    pub seed: Option<u64>,
    /// The `guided_*` / `response_format` constraint, already chosen by precedence
    /// ([`Spec::from_request`]); tool forcing, which outranks it, is decided with the model.
    pub guided: Option<Spec>,
    /// The other constraint fields the request carries, below `guided` in precedence: never
    /// applied, but compiled all the same ([`super::Run::new`]), so an invalid one is a 400
    /// naming it.
    pub outranked: Vec<Spec>,
    pub tools: Vec<Tool>,
    /// The request's `tools` array as sent, for templates that render tools themselves.
    pub tools_json: Option<Value>,
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: bool,
    /// `step_stats: true` (a poot extension): every streamed chunk, and the whole response,
    /// carries per-step numbers of the constraint at work ([`super::run::StepStats`]).
    pub step_stats: bool,
    /// Fields the request carried that poot does not know: accepted and ignored (as vLLM
    /// does), and reported back so a typo is visible.
    pub ignored_fields: Vec<String>,
    /// One message per declared tool whose parameters schema cannot be compiled, when no
    /// call to it can be forced ([`render_tool_schemas`]): no error, since nothing
    /// constrains a call to it.
    pub tool_warnings: Vec<String>,
}

/// Fields read on both endpoints (`model` and `user` are accepted and not used: one model is
/// served, and there is no per-user state).
const COMMON_FIELDS: &[&str] = &[
    "model",
    "user",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "logprobs",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "response_format",
    "guided_choice",
    "guided_regex",
    "guided_grammar",
    "guided_json",
    "top_k",
    "min_p",
    "repetition_penalty",
    "step_stats",
];
const CHAT_FIELDS: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
];
const COMPLETION_FIELDS: &[&str] = &["prompt", "echo"];

fn bad(param: &str, message: String) -> Error {
    Error::invalid_input(message).with_param(param)
}

/// Typed access to the body's fields; a present `null` counts as absent (OpenAI clients send
/// explicit nulls for unset options).
struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn number(&self, key: &str, lo: f64, hi: f64, range: &str) -> Result<Option<f32>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let x = v
            .as_f64()
            .ok_or_else(|| bad(key, format!("{key} must be a number, got {}", json_kind(v))))?;
        if !(lo..=hi).contains(&x) {
            return Err(bad(key, format!("{key} {x} must be in {range}")));
        }
        Ok(Some(x as f32))
    }

    fn integer(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let x = v
            .as_i64()
            .ok_or_else(|| bad(key, format!("{key} must be an integer, got {v}")))?;
        if !(lo..=hi).contains(&x) {
            return Err(bad(key, format!("{key} {x} must be in [{lo}, {hi}]")));
        }
        Ok(Some(x))
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(bad(
                key,
                format!("{key} must be a boolean, got {}", json_kind(v)),
            )),
        }
    }
}

impl Request {
    /// Reads and validates `body` for `endpoint`; the error names the field at fault.
    pub fn parse(body: &Value, endpoint: Endpoint) -> Result<Request> {
        Self::parse_with(body, endpoint, &Limits::DEFAULT)
    }

    /// [`Request::parse`] with the constraint's text sizes bounded by `limits`.
    pub fn parse_with(body: &Value, endpoint: Endpoint, limits: &Limits) -> Result<Request> {
        let obj = body.as_object().ok_or_else(|| {
            Error::invalid_input(format!(
                "the request body must be a JSON object, got {}",
                json_kind(body)
            ))
        })?;
        let f = Fields(obj);
        let endpoint_fields = match endpoint {
            Endpoint::Chat => CHAT_FIELDS,
            Endpoint::Completion => COMPLETION_FIELDS,
        };
        let ignored_fields = obj
            .keys()
            .filter(|k| {
                !COMMON_FIELDS.contains(&k.as_str()) && !endpoint_fields.contains(&k.as_str())
            })
            .cloned()
            .collect();

        let prompt = match endpoint {
            Endpoint::Chat => Prompt::Messages(parse_messages(f.get("messages"))?),
            Endpoint::Completion => parse_prompt(f.get("prompt"))?,
        };
        if endpoint == Endpoint::Completion && f.boolean("echo")? == Some(true) {
            return Err(bad("echo", "echo: true is not supported".into()));
        }

        let max_tokens = match f.integer("max_completion_tokens", 1, u32::MAX.into())? {
            Some(n) => Some(n),
            None => f.integer("max_tokens", 1, u32::MAX.into())?,
        }
        .map(|n| n as usize);
        let n = f.integer("n", 1, MAX_CHOICES as i64)?.unwrap_or(1) as usize;
        let stop = parse_stop(f.get("stop"))?;
        let stream = f.boolean("stream")?.unwrap_or(false);
        let step_stats = f.boolean("step_stats")?.unwrap_or(false);
        let include_usage = match f.get("stream_options") {
            None => false,
            Some(Value::Object(o)) => match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(bad(
                        "stream_options",
                        format!(
                            "stream_options.include_usage must be a boolean, got {}",
                            json_kind(v)
                        ),
                    ))
                }
            },
            Some(v) => {
                return Err(bad(
                    "stream_options",
                    format!("stream_options must be an object, got {}", json_kind(v)),
                ))
            }
        };
        let (logprobs, top_logprobs) = match endpoint {
            Endpoint::Chat => {
                let on = f.boolean("logprobs")?.unwrap_or(false);
                let top = f
                    .integer("top_logprobs", 0, MAX_TOP_LOGPROBS as i64)?
                    .unwrap_or(0) as usize;
                if top > 0 && !on {
                    return Err(bad(
                        "top_logprobs",
                        "top_logprobs needs logprobs: true".into(),
                    ));
                }
                (on, top)
            }
            Endpoint::Completion => {
                match f.integer("logprobs", 0, MAX_COMPLETION_LOGPROBS as i64)? {
                    Some(k) => (true, k as usize),
                    None => (false, 0),
                }
            }
        };

        let seed = f.integer("seed", i64::MIN, i64::MAX)?.map(|s| s as u64);
        let top_k = match f.integer("top_k", -1, u32::MAX.into())? {
            // vLLM and llama.cpp spell "off" as -1 or 0.
            None | Some(-1) => 0,
            Some(k) => k as usize,
        };
        let sampling = Params {
            temperature: f.number("temperature", 0.0, 2.0, "[0, 2]")?.unwrap_or(1.0),
            top_p: f.number("top_p", 0.0, 1.0, "(0, 1]")?.unwrap_or(1.0),
            top_k,
            min_p: f.number("min_p", 0.0, 1.0, "[0, 1]")?.unwrap_or(0.0),
            repetition_penalty: f
                .number("repetition_penalty", 0.0, 2.0, "(0, 2]")?
                .unwrap_or(1.0),
            frequency_penalty: f
                .number("frequency_penalty", -2.0, 2.0, "[-2, 2]")?
                .unwrap_or(0.0),
            presence_penalty: f
                .number("presence_penalty", -2.0, 2.0, "[-2, 2]")?
                .unwrap_or(0.0),
            logit_bias: parse_logit_bias(f.get("logit_bias"))?,
            seed: seed.unwrap_or(0),
        };
        // Open ends of the ranges above (top_p 0, repetition_penalty 0) are the sampler's.
        sampling.validate()?;

        let mut outranked = Spec::all_from_request_with(body, limits)?;
        let guided = (!outranked.is_empty()).then(|| outranked.remove(0));
        let mut tool_warnings = Vec::new();
        let (tools, tools_json, tool_choice, parallel_tool_calls) = match endpoint {
            Endpoint::Chat => {
                let options = crate::constraint::schema_options(body)?;
                let mut tools = parse_tools(f.get("tools"))?;
                let choice = parse_tool_choice(f.get("tool_choice"), &tools)?;
                tool_warnings = render_tool_schemas(&mut tools, &choice, limits, options)?;
                let parallel = f.boolean("parallel_tool_calls")?.unwrap_or(true);
                let json = f.get("tools").filter(|_| !tools.is_empty()).cloned();
                (tools, json, choice, parallel)
            }
            Endpoint::Completion => (Vec::new(), None, ToolChoice::None, true),
        };

        Ok(Request {
            endpoint,
            prompt,
            max_tokens,
            n,
            stop,
            stream,
            include_usage,
            logprobs,
            top_logprobs,
            sampling,
            seed,
            guided,
            outranked,
            tools,
            tools_json,
            tool_choice,
            parallel_tool_calls,
            step_stats,
            ignored_fields,
            tool_warnings,
        })
    }
}

/// Chat messages: a non-empty array of `{role, content, ...}`; `content` a string or an array
/// of `{"type":"text","text":..}` parts (joined), null only for an assistant turn with
/// `tool_calls`.
fn parse_messages(v: Option<&Value>) -> Result<Vec<Value>> {
    let list = match v {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => {
            return Err(bad("messages", "messages must not be empty".into()));
        }
        Some(v) => {
            return Err(bad(
                "messages",
                format!("messages must be an array, got {}", json_kind(v)),
            ))
        }
        None => return Err(bad("messages", "the request needs messages".into())),
    };
    if list.len() > MAX_MESSAGES {
        return Err(Error::limit_exceeded(format!(
            "{} messages are over the limit of {MAX_MESSAGES}",
            list.len()
        ))
        .with_param("messages"));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let at = |what: String| bad("messages", format!("messages[{i}]: {what}"));
        let Some(obj) = m.as_object() else {
            return Err(at(format!("must be an object, got {}", json_kind(m))));
        };
        let role = match obj.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "developer" | "user" | "assistant" | "tool")) => r,
            Some(r) => {
                return Err(at(format!(
                    "role `{r}` is not one of system, developer, user, assistant, tool"
                )))
            }
            None => return Err(at("needs a string role".into())),
        };
        let has_calls = obj
            .get("tool_calls")
            .is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty()));
        let content = match obj.get("content") {
            Some(Value::String(s)) => Value::String(s.clone()),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        (Some(other), _) if other != "text" => {
                            return Err(at(format!(
                                "content[{j}] has type `{other}`; only text parts are supported"
                            )))
                        }
                        _ => {
                            return Err(at(format!(
                                "content[{j}] must be {{\"type\": \"text\", \"text\": ...}}"
                            )))
                        }
                    }
                }
                Value::String(text)
            }
            None | Some(Value::Null) if role == "assistant" && has_calls => Value::Null,
            None | Some(Value::Null) => return Err(at("needs content".into())),
            Some(v) => {
                return Err(at(format!(
                    "content must be a string or an array of text parts, got {}",
                    json_kind(v)
                )))
            }
        };
        if has_calls {
            if role != "assistant" {
                return Err(at("only assistant messages carry tool_calls".into()));
            }
            for (j, call) in obj["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .is_none()
                {
                    return Err(at(format!("tool_calls[{j}] needs function.name")));
                }
            }
        }
        let mut normal = obj.clone();
        // `developer` is OpenAI's newer name for `system`; templates know only the latter.
        if role == "developer" {
            normal.insert("role".into(), Value::from("system"));
        }
        normal.insert("content".into(), content);
        out.push(Value::Object(normal));
    }
    Ok(out)
}

/// A completions `prompt`: a string, an array holding one string, or an array of token ids.
fn parse_prompt(v: Option<&Value>) -> Result<Prompt> {
    match v {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            Ok(Prompt::Text(items[0].as_str().unwrap_or_default().to_owned()))
        }
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            let ids = items
                .iter()
                .map(|i| {
                    i.as_u64()
                        .and_then(|x| TokenId::try_from(x).ok())
                        .ok_or_else(|| bad("prompt", format!("token id {i} is out of range")))
                })
                .collect::<Result<_>>()?;
            Ok(Prompt::Ids(ids))
        }
        Some(Value::Array(_)) => Err(bad(
            "prompt",
            "prompt must be a string, one string in an array, or an array of token ids (batches of prompts are not supported)".into(),
        )),
        Some(v) => Err(bad(
            "prompt",
            format!("prompt must be a string, got {}", json_kind(v)),
        )),
        None => Err(bad("prompt", "the request needs a prompt".into())),
    }
}

fn parse_stop(v: Option<&Value>) -> Result<Vec<String>> {
    let list: Vec<&Value> = match v {
        None => return Ok(Vec::new()),
        Some(s @ Value::String(_)) => vec![s],
        Some(Value::Array(items)) => items.iter().collect(),
        Some(v) => {
            return Err(bad(
                "stop",
                format!(
                    "stop must be a string or an array of strings, got {}",
                    json_kind(v)
                ),
            ))
        }
    };
    if list.len() > MAX_STOP_SEQUENCES {
        return Err(Error::limit_exceeded(format!(
            "{} stop sequences are over the limit of {MAX_STOP_SEQUENCES}",
            list.len()
        ))
        .with_param("stop"));
    }
    list.into_iter()
        .map(|s| match s.as_str() {
            Some("") => Err(bad("stop", "a stop sequence must not be empty".into())),
            Some(s) if s.len() > MAX_STOP_BYTES => Err(Error::limit_exceeded(format!(
                "a stop sequence of {} bytes is over the limit of {MAX_STOP_BYTES}",
                s.len()
            ))
            .with_param("stop")),
            Some(s) => Ok(s.to_owned()),
            None => Err(bad(
                "stop",
                format!("stop sequences must be strings, got {}", json_kind(s)),
            )),
        })
        .collect()
}

/// `logit_bias`: `{"token id": bias}`, bias in [-100, 100] (checked by the sampler's
/// validation); ids against the vocabulary are checked with the model.
fn parse_logit_bias(v: Option<&Value>) -> Result<Vec<(TokenId, f32)>> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let obj = v.as_object().ok_or_else(|| {
        bad(
            "logit_bias",
            format!("logit_bias must be an object, got {}", json_kind(v)),
        )
    })?;
    if obj.len() > MAX_LOGIT_BIAS {
        return Err(Error::limit_exceeded(format!(
            "logit_bias has {} entries, over the limit of {MAX_LOGIT_BIAS}",
            obj.len()
        ))
        .with_param("logit_bias"));
    }
    obj.iter()
        .map(|(k, b)| {
            let id: TokenId = k.parse().map_err(|_| {
                bad(
                    "logit_bias",
                    format!("logit_bias key `{k}` is not a token id"),
                )
            })?;
            let b = b.as_f64().ok_or_else(|| {
                bad(
                    "logit_bias",
                    format!("logit_bias[{k}] must be a number, got {}", json_kind(b)),
                )
            })?;
            Ok((id, b as f32))
        })
        .collect()
}
