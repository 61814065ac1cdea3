//! `poot tokenize | eval | generate`: the model verbs, over `poot::model` (CPU) and
//! `poot::gpu` (wgpu; the CLI waits for it with pollster).
//!
//! `generate` reads the fields of an OpenAI chat or completions body that the decode loop
//! understands today (`messages` with string contents or `prompt`, `max_tokens`,
//! `temperature`, `top_p`, `seed`, and every constraint field `poot check` knows) and prints a
//! `chat.completion` / `text_completion` object.

use std::process::ExitCode;
use std::sync::Arc;

use poot::chat_template::{render, Message};
use poot::constraint::{Constraint, Matcher, Spec};
use poot::gguf::{Gguf, Value as GgufValue};
use poot::model::{self, Backend, CpuBackend, EvalPrompt, Model};
use poot::sampling::{Params, Sampler};
use poot::tokenizer::Tokenizer;
use poot::vocab::{TokenId, Vocabulary};
use poot::Error;
use serde_json::{json, Value};

use super::{read, Failure, Options};

/// Context a `generate` session holds beyond the prompt and `max_tokens`.
const DEFAULT_MAX_TOKENS: u64 = 64;

pub(super) fn tokenize(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(rest, &["model", "text"])?;
    let file = read(opts.required("model")?)?;
    println!("{}", model::tokenize_json(&file, opts.required("text")?)?);
    Ok(ExitCode::SUCCESS)
}

pub(super) fn eval(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(
        rest,
        &[
            "model",
            "prompt",
            "chat",
            "prompt-ids",
            "top",
            "greedy",
            "backend",
            "threads",
        ],
    )?;
    let file = read(opts.required("model")?)?;
    let prompt = match (opts.values.get("prompt"), opts.values.get("prompt-ids")) {
        (Some(text), None) => EvalPrompt::Text {
            text,
            chat: opts.chat,
        },
        (None, Some(ids)) => EvalPrompt::Ids(parse_ids(ids)?),
        _ => {
            return Err(Failure::Usage(
                "give exactly one of --prompt and --prompt-ids".into(),
            ))
        }
    };
    let top = opts.number("top", Some(10))? as usize;
    let greedy = opts.number("greedy", Some(0))? as usize;
    let threads = opts.number("threads", Some(1))? as usize;
    let prompt_ids = model::eval_prompt_ids(&file, &prompt)?;
    let mut cpu = Model::from_gguf_bytes(&file[..])?;
    cpu.set_threads(threads);
    let context = (prompt_ids.len() + greedy).clamp(1, cpu.config().context_length);
    let tok = Tokenizer::from_gguf_bytes(&file)?;
    let mut backend = backend(opts.values.get("backend"), &cpu, context)?;
    let report = model::eval_with(backend.as_mut(), &tok, prompt_ids, top, greedy)?;
    println!("{}", report.to_json());
    Ok(ExitCode::SUCCESS)
}

pub(super) fn generate(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(rest, &["model", "request", "backend", "threads"])?;
    let file = read(opts.required("model")?)?;
    let body: Value = serde_json::from_slice(&read(opts.required("request")?)?)
        .map_err(|e| Error::invalid_input(format!("the request is not JSON: {e}")))?;
    let gguf = Gguf::parse(&file)?;
    let tok = Tokenizer::from_gguf(&gguf)?;
    let (prompt_text, chat) = prompt_of(&body, &gguf, &tok)?;
    let prompt = tok.encode_prompt(&prompt_text);
    let max_tokens = field_u64(&body, "max_tokens")?.unwrap_or(DEFAULT_MAX_TOKENS) as usize;
    let params = Params {
        temperature: field_f32(&body, "temperature")?.unwrap_or(1.0),
        top_p: field_f32(&body, "top_p")?.unwrap_or(1.0),
        seed: field_u64(&body, "seed")?.unwrap_or(0),
        ..Params::default()
    };
    let mut sampler = Sampler::new(params)?;
    let mut matcher = match Spec::from_request(&body)? {
        Some(spec) => {
            let vocab = Arc::new(Vocabulary::from_gguf(&gguf)?);
            Some(Matcher::new(Arc::new(Constraint::from_spec(&spec, vocab)?)))
        }
        None => None,
    };
    let mut cpu = Model::from_gguf_bytes(&file[..])?;
    cpu.set_threads(opts.number("threads", Some(1))? as usize);
    let context = (prompt.len() + max_tokens).clamp(1, cpu.config().context_length);
    let mut backend = backend(opts.values.get("backend"), &cpu, context)?;
    let stop: Vec<TokenId> = tok
        .eos()
        .into_iter()
        .chain(tok.token_id("<|im_end|>"))
        .collect();
    let out = model::generate(
        backend.as_mut(),
        &prompt,
        &mut sampler,
        matcher.as_mut(),
        max_tokens,
        &stop,
    )?;
    let text = String::from_utf8_lossy(&tok.decode(&out.ids, false)).into_owned();
    let usage = json!({
        "prompt_tokens": prompt.len(),
        "completion_tokens": out.ids.len(),
        "total_tokens": prompt.len() + out.ids.len(),
    });
    let response = if chat {
        json!({
            "object": "chat.completion",
            "model": model_name(&gguf),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": out.finish.as_str()}],
            "usage": usage,
        })
    } else {
        json!({
            "object": "text_completion",
            "model": model_name(&gguf),
            "choices": [{"index": 0, "text": text, "finish_reason": out.finish.as_str()}],
            "usage": usage,
        })
    };
    println!("{response}");
    Ok(ExitCode::SUCCESS)
}

/// The backend `--backend` names (default `cpu`), holding a session of `context` positions.
fn backend<'m>(
    name: Option<&String>,
    cpu: &'m Model<&'m [u8]>,
    context: usize,
) -> Result<Box<dyn Backend + 'm>, Failure> {
    match name.map(String::as_str).unwrap_or("cpu") {
        "cpu" => Ok(Box::new(CpuBackend {
            model: cpu,
            session: cpu.session(context)?,
        })),
        "gpu" => {
            let ctx = Arc::new(pollster::block_on(poot::gpu::Context::new())?);
            let model = poot::gpu::Model::upload(ctx, cpu)?;
            let session = model.session(context)?;
            Ok(Box::new(GpuBackend { model, session }))
        }
        other => Err(Failure::Usage(format!(
            "`--backend` takes `cpu` or `gpu`, got `{other}`"
        ))),
    }
}

/// The GPU model behind the decode loop's synchronous [`Backend`] (the CLI may block).
struct GpuBackend {
    model: poot::gpu::Model,
    session: poot::gpu::Session,
}

impl Backend for GpuBackend {
    fn n_vocab(&self) -> usize {
        self.model.config().n_vocab
    }

    fn forward(&mut self, tokens: &[TokenId]) -> poot::Result<Vec<f32>> {
        pollster::block_on(self.model.forward(&mut self.session, tokens))
    }
}

fn parse_ids(ids: &str) -> Result<Vec<TokenId>, Failure> {
    ids.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| Failure::Usage(format!("`{s}` is not a token id")))
        })
        .collect()
}

/// The prompt text: `messages` rendered through the model's chat template with the generation
/// prompt (chat), or `prompt` as given (completions).
fn prompt_of(body: &Value, gguf: &Gguf<'_>, tok: &Tokenizer) -> Result<(String, bool), Error> {
    if let Some(messages) = body.get("messages") {
        let list = messages
            .as_array()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                Error::invalid_input("messages must be a non-empty array").with_param("messages")
            })?;
        let mut parsed = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            let field = |k: &str| m.get(k).and_then(Value::as_str);
            match (field("role"), field("content")) {
                (Some(role), Some(content)) => parsed.push(Message::new(role, content)),
                _ => {
                    return Err(Error::invalid_input(format!(
                        "messages[{i}] needs a string role and a string content"
                    ))
                    .with_param("messages"))
                }
            }
        }
        let template = gguf
            .get("tokenizer.chat_template")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| {
                Error::invalid_input("the model has no chat template").with_param("model")
            })?;
        let piece = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(tok.piece(i)).into_owned())
                .unwrap_or_default()
        };
        let text = render(
            template,
            &parsed,
            true,
            &piece(tok.bos()),
            &piece(tok.eos()),
        )?;
        return Ok((text, true));
    }
    match body.get("prompt").and_then(Value::as_str) {
        Some(prompt) => Ok((prompt.to_owned(), false)),
        None => Err(
            Error::invalid_input("the request needs `messages` or a string `prompt`")
                .with_param("messages"),
        ),
    }
}

fn field_u64(body: &Value, key: &str) -> Result<Option<u64>, Error> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            Error::invalid_input(format!("{key} must be a non-negative integer, got {v}"))
                .with_param(key)
        }),
    }
}

fn field_f32(body: &Value, key: &str) -> Result<Option<f32>, Error> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(|x| Some(x as f32)).ok_or_else(|| {
            Error::invalid_input(format!("{key} must be a number, got {v}")).with_param(key)
        }),
    }
}

fn model_name(gguf: &Gguf<'_>) -> String {
    gguf.get("general.name")
        .and_then(GgufValue::as_str)
        .unwrap_or("poot")
        .to_owned()
}
