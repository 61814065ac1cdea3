//! The generation loop of one request, as a state machine any backend can drive.
//!
//! A [`Run`] never calls the model itself: it says what to evaluate next
//! ([`Run::next_forward`]) and takes the logits back ([`Run::on_logits`]), so the synchronous
//! CPU model, the native GPU model (which blocks) and the browser's WebGPU model (which
//! awaits) all drive the same code. Per step: the constraint fills a mask → the sampler picks
//! an allowed token (the mask comes before bias, penalties and temperature, so a constrained
//! output never holds a disallowed token) → the constraint advances → stop sequences and the
//! end of the constraint are checked → a chunk is streamed. When the constraint forces bytes,
//! the forced tokens are fed without sampling (jump-forward).
//!
//! The `n` choices run one after another over one backend session: the prompt is evaluated
//! once, and each later choice rewinds the session to the prompt and reuses its logits.

use std::sync::Arc;

use serde_json::{json, Value};

use super::request::{Endpoint, Prompt, Request, DEFAULT_MAX_TOKENS};
use super::response::{self, Meta};
use super::tools::{self, Codec, ToolCall, ToolChoice};
use crate::chat_template::render_chat;
use crate::constraint::{Constraint, Matcher, Spec};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value as GgufValue};
use crate::limits::Limits;
use crate::mask::set_bit;
use crate::model::{Backend, DeviceStep, Finish, StepSource};
use crate::sampling::{log_softmax, top_k, Sampler};
use crate::tokenizer::Tokenizer;
use crate::vocab::{TokenId, Vocabulary};

/// What a run needs of the model, read once per model from the GGUF header.
#[derive(Debug)]
pub struct Engine {
    tokenizer: Tokenizer,
    vocab: Arc<Vocabulary>,
    template: Option<String>,
    codec: Option<Codec>,
    model_name: String,
    context_length: usize,
    n_vocab: usize,
    /// The bounds every request's constraint is read and compiled under.
    limits: Limits,
}

impl Engine {
    /// Reads the tokenizer, vocabulary, chat template and context length of a model. Only
    /// the header is read, whatever the architecture: whether the forward pass can run it is
    /// the backend's business.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Engine> {
        let arch = gguf
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .unwrap_or("llama");
        let context_length = gguf
            .get(&format!("{arch}.context_length"))
            .and_then(GgufValue::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "the model has no {arch}.context_length in its GGUF metadata"
                ))
                .with_param("model")
            })?;
        let tokenizer = Tokenizer::from_gguf(gguf)?;
        let template = crate::chat_template::gguf_template(gguf);
        let model_name = gguf
            .get("general.name")
            .and_then(GgufValue::as_str)
            .unwrap_or("poot")
            .to_owned();
        Ok(Engine {
            n_vocab: tokenizer.len(),
            tokenizer,
            vocab: Arc::new(Vocabulary::from_gguf(gguf)?),
            codec: Codec::detect(template.as_deref()),
            template,
            model_name,
            context_length,
            limits: Limits::DEFAULT,
        })
    }

    /// This engine with its requests' constraints read and compiled under `limits` (tighter
    /// than the defaults: `poot serve --limits`).
    pub fn with_limits(mut self, limits: Limits) -> Engine {
        self.limits = limits;
        self
    }

    /// The model's name (`general.name`), reported as `model` in responses.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// The tool-call codec chosen from the chat template, if any.
    pub fn codec(&self) -> Option<Codec> {
        self.codec
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The vocabulary constraints are compiled against.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// The model's context length in tokens.
    pub fn context_length(&self) -> usize {
        self.context_length
    }

    /// The `/v1/models` list.
    pub fn models_json(&self) -> Value {
        json!({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": 0, "owned_by": "poot",
            "context_length": self.context_length,
        }]})
    }

    /// The prompt's token ids.
    fn prompt_ids(&self, req: &Request) -> Result<Vec<TokenId>> {
        let tok = &self.tokenizer;
        let text = |id: Option<TokenId>| {
            id.map(|i| String::from_utf8_lossy(tok.piece(i)).into_owned())
                .unwrap_or_default()
        };
        let rendered = match &req.prompt {
            Prompt::Ids(ids) => {
                if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.n_vocab) {
                    return Err(Error::invalid_input(format!(
                        "prompt token {bad} is outside the vocabulary of {} tokens",
                        self.n_vocab
                    ))
                    .with_param("prompt"));
                }
                return Ok(ids.clone());
            }
            Prompt::Text(t) => t.clone(),
            Prompt::Messages(messages) => {
                let template = self.template.as_deref().ok_or_else(|| {
                    Error::invalid_input(
                        "the model has no chat template (tokenizer.chat_template); use /v1/completions",
                    )
                    .with_param("messages")
                })?;
                let handles = tools::template_handles_tools(template);
                let messages = tools::adapt_messages(self.codec, messages, &req.tools, handles);
                let tools_json = req.tools_json.as_ref().filter(|_| handles);
                render_chat(
                    template,
                    &messages,
                    tools_json,
                    true,
                    &text(tok.bos()),
                    &text(tok.eos()),
                )?
            }
        };
        // A template that writes the BOS text itself must not get a second BOS from the
        // tokenizer (Gemma's does; llama.cpp checks the same).
        let bos = text(tok.bos());
        let add_special = bos.is_empty() || !rendered.starts_with(&bos);
        Ok(tok.encode(&rendered, add_special, true))
    }
}

/// What the backend evaluates next: forget the session's positions from `keep` on, then
/// evaluate `tokens` and hand the last position's logits to [`Run::on_logits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub keep: usize,
    pub tokens: Vec<TokenId>,
}

/// Per-request settings that come from outside the core (it has no clock or entropy).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The response's `id` (`chatcmpl-...` / `cmpl-...`).
    pub id: String,
    /// Unix seconds, the response's `created`.
    pub created: u64,
    /// The seed of a request that does not set one.
    pub default_seed: u64,
    /// A monotonic clock in milliseconds (`performance.now()`, the CLI's own): with one,
    /// `step_stats` say how long each mask took. The core itself reads no clock.
    pub clock: Option<fn() -> f64>,
}

/// One sampling step, as reported with `step_stats: true`: what the constraint allowed, how
/// long its mask took, and which tokens followed without sampling.
#[derive(Debug, Clone, PartialEq)]
pub struct StepStats {
    /// The choice the step belongs to (`n` > 1).
    pub index: usize,
    /// The sampled token.
    pub token: TokenId,
    /// Tokens the mask allowed (end-of-sequence included); `None` without a constraint.
    pub allowed: Option<usize>,
    /// Microseconds the mask took to fill, when [`RunOptions::clock`] is set.
    pub mask_us: Option<f64>,
    /// Tokens fed after the sampled one without sampling, because the constraint forced
    /// their bytes (jump-forward).
    pub forced: Vec<TokenId>,
    /// The token was the next of a shortest completion instead of a free choice, because
    /// `max_tokens` was near (the mask held only it, or the sampled token was replaced).
    pub closing: bool,
}

/// One token's log-probability entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    pub logprob: f32,
    /// The most likely alternatives, most likely first.
    pub top: Vec<(TokenId, f32)>,
}

/// One choice's state.
#[derive(Debug)]
struct Choice {
    sampler: Sampler,
    matcher: Option<Matcher>,
    /// Generated tokens, forced ones included, an ending EOS excluded.
    ids: Vec<TokenId>,
    /// Tokens sampled or forced, an ending EOS included (`usage.completion_tokens`).
    count: usize,
    /// The output's bytes so far (cut at a stop sequence).
    text: Vec<u8>,
    at_start: bool,
    /// Bytes of `text` already streamed as content.
    streamed: usize,
    /// Bytes of `text` already searched for stop sequences.
    stop_checked: usize,
    logprobs: Vec<TokenLogprob>,
    /// Logprob entries not yet streamed.
    logprobs_streamed: usize,
    started: bool,
    finish: Option<Finish>,
    /// The output was steered onto a shortest completion because `max_tokens` was near: it
    /// ends complete, with `finish_reason` `length`.
    closed: bool,
    /// The rest of the close being followed, last token first (empty when none is).
    close_path: Vec<TokenId>,
    calls: Vec<ToolCall>,
    content: Option<String>,
}

/// A request being generated; see the module docs.
#[derive(Debug)]
pub struct Run {
    engine: Arc<Engine>,
    req: Request,
    meta: Meta,
    prompt: Vec<TokenId>,
    max_tokens: usize,
    /// Tokens that end the output when there is no constraint (the constraint's own mask
    /// allows end-of-sequence exactly when its output is complete).
    stop_ids: Vec<TokenId>,
    choices: Vec<Choice>,
    /// The choice being generated.
    current: usize,
    /// The prompt's last logits, kept for the choices after the first.
    prompt_logits: Option<Vec<f32>>,
    /// What to evaluate next, if anything.
    pending: Option<Forward>,
    mask: Vec<u32>,
    jump_forward: bool,
    /// The tool calls' id seed.
    id_seed: u64,
    /// The request field the constraint came from (`tool_choice` for a forced call).
    constraint_param: Option<&'static str>,
    clock: Option<fn() -> f64>,
    /// Every step so far, when the request asked for `step_stats` (at most `n` ×
    /// `max_tokens` entries).
    steps: Vec<StepStats>,
    /// Entries of `steps` already attached to a stream chunk.
    steps_streamed: usize,
    /// [`Run::device_step`] has filled the mask of the pending step (and drawn), and
    /// [`Run::on_token`] is to take its token.
    device_prepared: bool,
}

impl Run {
    /// Validates `body` for `endpoint` and prepares the run: the constraint is compiled and the
    /// prompt rendered and tokenized before any model work, so every invalid request is an
    /// error here.
    pub fn new(
        engine: Arc<Engine>,
        body: &Value,
        endpoint: Endpoint,
        opts: RunOptions,
    ) -> Result<Run> {
        let req = Request::parse_with(body, endpoint, &engine.limits)?;
        Run::from_request(engine, req, opts)
    }

    /// [`Run::new`] for a request already parsed.
    pub fn from_request(engine: Arc<Engine>, req: Request, opts: RunOptions) -> Result<Run> {
        if let Some(&(id, _)) = req
            .sampling
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= engine.n_vocab)
        {
            return Err(Error::invalid_input(format!(
                "logit_bias names token {id}, outside the vocabulary of {} tokens",
                engine.n_vocab
            ))
            .with_param("logit_bias"));
        }
        let (spec, constraint_param) = constraint_of(&engine, &req)?;
        // Every constraint field the request carries is a 400 when invalid, also those that
        // lost precedence (to another field or to a forced call): compiled, then dropped.
        let forced = constraint_param == Some("tool_choice");
        for unused in req.guided.iter().filter(|_| forced).chain(&req.outranked) {
            unused.compile_with(&engine.limits)?;
        }
        let constraint = match (&spec, constraint_param) {
            (Some(spec), Some(param)) => {
                let c = Arc::new(Constraint::from_spec_with(
                    spec,
                    engine.vocab.clone(),
                    &engine.limits,
                )?);
                c.check_first_mask(param)?;
                Some(c)
            }
            _ => None,
        };
        let prompt = engine.prompt_ids(&req)?;
        if prompt.is_empty() {
            return Err(
                Error::invalid_input("the prompt has no tokens").with_param(endpoint_param(&req))
            );
        }
        let room = engine.context_length.saturating_sub(prompt.len());
        if room == 0 {
            return Err(Error::limit_exceeded(format!(
                "the prompt is {} tokens, which fills the model's context of {} tokens",
                prompt.len(),
                engine.context_length
            ))
            .with_param(endpoint_param(&req)));
        }
        let max_tokens = match req.max_tokens {
            Some(n) if n > room => {
                return Err(Error::limit_exceeded(format!(
                    "max_tokens {n} plus the prompt's {} tokens is over the model's context of {} tokens",
                    prompt.len(),
                    engine.context_length
                ))
                .with_param("max_tokens"))
            }
            Some(n) => n,
            None => DEFAULT_MAX_TOKENS.min(room),
        };
        // Steering makes every reply close within max_tokens when the shortest does: a
        // max_tokens below that could only cut the output short.
        if let (Some(c), Some(param)) = (&constraint, constraint_param) {
            let m = Matcher::new(c.clone());
            let shortest = match close_plan(&m, &engine.vocab, max_tokens) {
                Close::Path(p) if p.len() > max_tokens => Some(p.len().to_string()),
                Close::TooLong => {
                    let longest = engine.vocab.max_token_len().max(1) as u64;
                    let len = m.closing_len().unwrap_or(0);
                    Some(format!("at least {}", len.div_ceil(longest)))
                }
                _ => None,
            };
            if let Some(k) = shortest {
                return Err(Error::invalid_input(format!(
                    "max_tokens {max_tokens} is too few for any output {param} accepts: the shortest takes {k} tokens of this model"
                ))
                .with_param("max_tokens"));
            }
        }
        let seed = req.seed.unwrap_or(opts.default_seed);
        let choices = (0..req.n)
            .map(|i| {
                let mut params = req.sampling.clone();
                // Each choice draws its own sequence; the same request and seed reproduce all.
                params.seed = seed.wrapping_add(i as u64);
                Ok(Choice {
                    sampler: Sampler::new(params)?,
                    matcher: constraint.clone().map(Matcher::new),
                    ids: Vec::new(),
                    count: 0,
                    text: Vec::new(),
                    at_start: true,
                    streamed: 0,
                    stop_checked: 0,
                    logprobs: Vec::new(),
                    logprobs_streamed: 0,
                    started: false,
                    finish: None,
                    closed: false,
                    close_path: Vec::new(),
                    calls: Vec::new(),
                    content: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut stop_ids = engine.vocab.eos().to_vec();
        stop_ids.extend(engine.tokenizer.eos());
        let meta = Meta {
            id: opts.id,
            created: opts.created,
            model: engine.model_name.clone(),
            endpoint: req.endpoint,
        };
        let pending = Some(Forward {
            keep: 0,
            tokens: prompt.clone(),
        });
        Ok(Run {
            mask: vec![0; crate::mask::words_for(engine.n_vocab)],
            jump_forward: !req.logprobs,
            id_seed: seed,
            constraint_param,
            clock: opts.clock,
            steps: Vec::new(),
            steps_streamed: 0,
            device_prepared: false,
            engine,
            meta,
            prompt,
            max_tokens,
            stop_ids,
            choices,
            current: 0,
            prompt_logits: None,
            pending,
            req,
        })
    }

    /// The request field whose constraint masks the output (`tool_choice` for a forced tool
    /// call), by the spec's precedence; `None` when the output is unconstrained.
    pub fn constraint_param(&self) -> Option<&'static str> {
        self.constraint_param
    }

    /// The validated request.
    pub fn request(&self) -> &Request {
        &self.req
    }

    /// Positions the backend session needs: the prompt plus `max_tokens`.
    pub fn context_needed(&self) -> usize {
        self.prompt.len() + self.max_tokens
    }

    /// The prompt's token count.
    pub fn prompt_tokens(&self) -> usize {
        self.prompt.len()
    }

    /// Whether every choice has finished.
    pub fn is_done(&self) -> bool {
        self.current >= self.choices.len()
    }

    /// What to evaluate next; `None` when the run is done.
    pub fn next_forward(&self) -> Option<&Forward> {
        self.pending.as_ref()
    }

    /// Stops every unfinished choice (a client went away, or an abort): each ends with what it
    /// has and `finish_reason` `stop`. Returns the chunks that close the stream.
    pub fn cancel(&mut self) -> Vec<Value> {
        let mut chunks = Vec::new();
        while self.current < self.choices.len() {
            self.finish_choice(Finish::Stop, &mut chunks);
        }
        self.pending = None;
        self.device_prepared = false;
        self.attach_steps(&mut chunks);
        chunks
    }

    /// Puts the steps not yet streamed on the last of `chunks`: a step that streamed nothing
    /// (its text held back) waits for the next chunk, and the run's last chunk has the rest.
    fn attach_steps(&mut self, chunks: &mut [Value]) {
        if self.steps_streamed < self.steps.len() {
            if let Some(last) = chunks.last_mut() {
                last["step_stats"] = self.steps_json(self.steps_streamed);
                self.steps_streamed = self.steps.len();
            }
        }
    }

    /// Takes the logits of the last [`Forward`]; returns the stream chunks it produced
    /// (empty unless the request streams). An error (a grammar step over its work budget,
    /// say) ends the run.
    pub fn on_logits(&mut self, mut logits: Vec<f32>) -> Result<Vec<Value>> {
        let forward = self
            .pending
            .take()
            .ok_or_else(|| Error::invalid_input("the run has nothing to evaluate"))?;
        // A model may pad its output past the tokenizer's tokens: those rows are no token.
        if logits.len() < self.engine.n_vocab {
            return Err(Error::invalid_input(format!(
                "the backend returned {} logits for a vocabulary of {}",
                logits.len(),
                self.engine.n_vocab
            )));
        }
        logits.truncate(self.engine.n_vocab);
        if forward.keep == 0 && self.req.n > 1 {
            self.prompt_logits = Some(logits.clone());
        }
        let mut chunks = Vec::new();
        loop {
            self.step(&mut logits, &mut chunks)?;
            if self.pending.is_some() || self.is_done() {
                break;
            }
            // The next choice starts from the prompt's logits, without a forward pass.
            logits = self
                .prompt_logits
                .clone()
                .ok_or_else(|| Error::invalid_input("the prompt's logits were not kept"))?;
        }
        if self.is_done() && self.req.stream && self.req.include_usage {
            chunks.push(response::usage_chunk(&self.meta, self.usage()));
        }
        self.attach_steps(&mut chunks);
        Ok(chunks)
    }

    /// Whether the pending step can be sampled on the device ([`Run::device_step`], then
    /// [`Run::on_token`]) instead of from logits read back: one choice (`n` > 1 keeps the
    /// prompt's logits for the others), no `logprobs`, and settings the device runs (no
    /// `logit_bias` or penalties: [`crate::sampling::Sampler::runs_on_device`]).
    pub fn samples_on_device(&self) -> bool {
        self.pending.is_some()
            && self.req.n == 1
            && !self.req.logprobs
            && self
                .choices
                .get(self.current)
                .is_some_and(|c| c.sampler.runs_on_device())
    }

    /// The pending step for a device that samples: fills the constraint's mask (timed for
    /// `step_stats`) and makes the sampler's draw. Call it once the forward pass is
    /// submitted, so the mask is computed while the device works; then [`Run::on_token`].
    pub fn device_step(&mut self) -> Result<DeviceStep<'_>> {
        if !self.samples_on_device() {
            return Err(Error::invalid_input(
                "this step cannot be sampled on the device (see Run::samples_on_device)",
            ));
        }
        if self.device_prepared {
            return Err(Error::invalid_input(
                "device_step was already called for this step",
            ));
        }
        let masked = self.prepare_mask()?;
        let sampling = self.choices[self.current]
            .sampler
            .device_step()
            .ok_or_else(|| Error::invalid_input("the sampler's settings need the logits"))?;
        self.device_prepared = true;
        Ok(DeviceStep {
            mask: masked.then_some(&self.mask[..]),
            n_vocab: self.engine.n_vocab,
            sampling,
        })
    }

    /// Takes the token the device chose for the step [`Run::device_step`] prepared; returns
    /// the stream chunks it produced, as [`Run::on_logits`] does.
    pub fn on_token(&mut self, token: TokenId) -> Result<Vec<Value>> {
        if !self.device_prepared {
            return Err(Error::invalid_input(
                "on_token needs device_step first (the mask and the draw)",
            ));
        }
        self.device_prepared = false;
        self.pending
            .take()
            .ok_or_else(|| Error::invalid_input("the run has nothing to evaluate"))?;
        if token as usize >= self.engine.n_vocab {
            return Err(Error::gpu(format!(
                "the device sampled token {token}, outside the vocabulary of {}",
                self.engine.n_vocab
            )));
        }
        // The device must respect the mask; checked here so a kernel bug cannot put a
        // disallowed token into a constrained output.
        if self.choices[self.current].matcher.is_some()
            && self.mask[token as usize / 32] >> (token % 32) & 1 == 0
        {
            return Err(Error::gpu(format!(
                "the device sampled token {token}, which the constraint's mask forbids"
            )));
        }
        let mut chunks = Vec::new();
        self.after_sample(token, None, &mut chunks)?;
        if self.is_done() && self.req.stream && self.req.include_usage {
            chunks.push(response::usage_chunk(&self.meta, self.usage()));
        }
        self.attach_steps(&mut chunks);
        Ok(chunks)
    }

    /// Drives the run to the end on a synchronous backend, passing each chunk to `emit`; an
    /// `emit` that returns `false` (the client went away) cancels the run. A backend that
    /// samples on its device does so whenever [`Run::samples_on_device`] allows.
    pub fn drive(
        &mut self,
        backend: &mut dyn Backend,
        emit: &mut dyn FnMut(Value) -> bool,
    ) -> Result<()> {
        self.drive_steps(backend, &mut |chunks| chunks.into_iter().all(&mut *emit))
    }

    /// [`Run::drive`] with one call of `step` after every forward pass, with the chunks that
    /// step produced (none for a non-streamed run, and none for a step whose text is held
    /// back): `false` cancels the run there. A server checks once per token whether its
    /// client is still there, also while nothing is being streamed to it.
    pub fn drive_steps(
        &mut self,
        backend: &mut dyn Backend,
        step: &mut dyn FnMut(Vec<Value>) -> bool,
    ) -> Result<()> {
        while let Some(fwd) = self.pending.clone() {
            backend.truncate(fwd.keep);
            let chunks = if backend.samples_on_device() && self.samples_on_device() {
                let token = backend.forward_sample(&fwd.tokens, self)?;
                self.on_token(token)?
            } else {
                let logits = backend.forward(&fwd.tokens)?;
                self.on_logits(logits)?
            };
            if !step(chunks) {
                self.cancel();
                return Ok(());
            }
        }
        Ok(())
    }

    /// One sampling step of the current choice, from its logits.
    fn step(&mut self, logits: &mut [f32], chunks: &mut Vec<Value>) -> Result<()> {
        let masked = self.prepare_mask()?;
        let choice = &mut self.choices[self.current];
        let mask = masked.then_some(&self.mask[..]);
        let token = choice.sampler.sample(logits, mask, &choice.ids)?;
        self.after_sample(token, Some(logits), chunks)
    }

    /// Fills the current choice's mask (when it has a constraint; whether it has) and opens
    /// its `step_stats` entry.
    fn prepare_mask(&mut self) -> Result<bool> {
        let c = self.current;
        let left = self.max_tokens - self.choices[c].count;
        let choice = &mut self.choices[c];
        let mut mask_us = None;
        let mut closing = false;
        let masked = match choice.matcher.as_ref() {
            Some(m) => {
                let started = self.clock.map(|now| now());
                // A shortest completion that needs every token left: only its next token
                // keeps the output able to close in time.
                if choice.close_path.is_empty() {
                    if let Close::Path(mut path) = close_plan(m, &self.engine.vocab, left - 1) {
                        if path.len() >= left {
                            path.reverse();
                            choice.close_path = path;
                            choice.closed = true;
                        }
                    }
                }
                if let Some(&next) = choice.close_path.last() {
                    self.mask.fill(0);
                    set_bit(&mut self.mask, next);
                    closing = true;
                }
                if !closing {
                    m.fill_mask(&mut self.mask)?;
                }
                if let (Some(now), Some(t0)) = (self.clock, started) {
                    mask_us = Some((now() - t0) * 1000.0);
                }
                true
            }
            None => false,
        };
        if self.req.step_stats {
            let allowed = masked.then(|| self.mask.iter().map(|w| w.count_ones() as usize).sum());
            self.steps.push(StepStats {
                index: c,
                token: 0,
                allowed,
                mask_us,
                forced: Vec::new(),
                closing,
            });
        }
        Ok(masked)
    }

    /// The rest of a step once its token is chosen (`logits`, after the sampler's changes,
    /// when they were read back: logprobs need them).
    fn after_sample(
        &mut self,
        token: TokenId,
        logits: Option<&[f32]>,
        chunks: &mut Vec<Value>,
    ) -> Result<()> {
        let c = self.current;
        let token = self.advance_steered(token)?;
        let choice = &mut self.choices[c];
        if self.req.stream && !choice.started {
            choice.started = true;
            chunks.extend(response::role_chunk(&self.meta, c));
        }
        if let Some(step) = self.steps.last_mut().filter(|_| self.req.step_stats) {
            step.token = token;
        }
        choice.count += 1;
        // The matcher has taken the token already (advance_steered).
        let ends = match choice.matcher.as_ref() {
            Some(m) => m.is_finished(),
            None => self.stop_ids.contains(&token),
        };
        if let (true, Some(logits)) = (self.req.logprobs, logits) {
            let lp = log_softmax(logits);
            choice.logprobs.push(TokenLogprob {
                token,
                logprob: lp[token as usize],
                top: top_k(&lp, self.req.top_logprobs)
                    .into_iter()
                    .filter(|(_, l)| *l > f32::NEG_INFINITY)
                    .collect(),
            });
        }
        if ends {
            self.finish_choice(Finish::Stop, chunks);
            return Ok(());
        }
        let mut feed = vec![token];
        self.push_token(token);
        if self.check_stop() {
            self.finish_choice(Finish::Stop, chunks);
            return Ok(());
        }
        if self.jump_forward {
            let forced = self.forced_tokens()?;
            if let Some(step) = self.steps.last_mut().filter(|_| self.req.step_stats) {
                step.forced.clone_from(&forced);
            }
            feed.extend(forced);
            if self.check_stop() {
                self.finish_choice(Finish::Stop, chunks);
                return Ok(());
            }
            let choice = &self.choices[c];
            if choice.matcher.as_ref().is_some_and(Matcher::is_finished) {
                self.finish_choice(Finish::Stop, chunks);
                return Ok(());
            }
        }
        if self.only_end_allowed()? {
            self.finish_choice(Finish::Stop, chunks);
            return Ok(());
        }
        if self.choices[c].count >= self.max_tokens {
            self.finish_choice(Finish::Length, chunks);
            return Ok(());
        }
        if self.req.stream {
            self.stream_delta(chunks);
        }
        self.pending = Some(Forward {
            keep: self.prompt.len() + self.choices[c].ids.len() - feed.len(),
            tokens: feed,
        });
        Ok(())
    }

    /// Appends a generated token's bytes to the current choice. With tools in play, control
    /// tokens are kept as their text: `[TOOL_CALLS]` and `<|python_tag|>` are control tokens
    /// that the codecs parse (end-of-sequence tokens never get here).
    fn push_token(&mut self, token: TokenId) {
        let special = self.uses_tools();
        let tok = &self.engine.tokenizer;
        let choice = &mut self.choices[self.current];
        choice.ids.push(token);
        let (first, before) = (choice.at_start, choice.text.len());
        tok.decode_next(token, special, &mut choice.at_start, &mut choice.text);
        // The spec: a whole reply drops the single leading space a SentencePiece model puts
        // at its start (decode_next already did, for models that add a space prefix).
        if first
            && !choice.at_start
            && tok.is_sentencepiece_without_space_prefix()
            && choice.text.get(before) == Some(&b' ')
        {
            choice.text.remove(before);
        }
    }

    /// Whether replies are parsed for tool calls: the model has a codec, the request has
    /// tools, and `tool_choice` is not `none`.
    fn uses_tools(&self) -> bool {
        self.engine.codec.is_some()
            && !self.req.tools.is_empty()
            && self.req.tool_choice != ToolChoice::None
    }

    /// Advances the current choice's matcher by the token to take for the sampled `token`,
    /// and returns that token: the next of the close being followed, if one is; else `token`
    /// itself, unless the output after it could no longer be completed within the tokens left
    /// after it; then the close starts here: a shortest completion's fewest tokens, which fit
    /// (each accepted token left the output closable in the tokens then left), and are
    /// followed to their end whatever later states' own closes would be. One advance per
    /// step, a rollback only where the token is replaced.
    fn advance_steered(&mut self, token: TokenId) -> Result<TokenId> {
        let c = self.current;
        let left = self.max_tokens.saturating_sub(self.choices[c].count + 1);
        let vocab = &self.engine.vocab;
        let choice = &mut self.choices[c];
        let Some(m) = choice.matcher.as_mut() else {
            return Ok(token);
        };
        if let Some(next) = choice.close_path.pop() {
            m.advance(next)?;
            return Ok(next);
        }
        m.advance(token)?;
        if closes_within(m, vocab, left) {
            return Ok(token);
        }
        m.rollback(1)?;
        let Some(mut path) = close_path(m, vocab).filter(|p| !p.is_empty()) else {
            // No close is known from here: nothing to steer onto.
            m.advance(token)?;
            return Ok(token);
        };
        choice.closed = true;
        if let Some(step) = self.steps.last_mut().filter(|_| self.req.step_stats) {
            step.closing = true;
        }
        path.reverse();
        let first = path.pop().expect("not empty");
        choice.close_path = path;
        m.advance(first)?;
        Ok(first)
    }

    /// Feeds the tokens that spell the bytes the constraint forces next, all but the last
    /// (the model may want a token that spans the forced run's end and what follows: forcing
    /// `{"name": "` whole would forbid `"B` after it), bounded by `max_tokens`, and only
    /// while the output stays closable in the tokens left (this split of the forced bytes
    /// may take more tokens than a close would).
    fn forced_tokens(&mut self) -> Result<Vec<TokenId>> {
        let c = self.current;
        // A close being followed has its own split of what comes next.
        if !self.choices[c].close_path.is_empty() {
            return Ok(Vec::new());
        }
        let Some(m) = self.choices[c].matcher.as_ref() else {
            return Ok(Vec::new());
        };
        let forced = m.forced_bytes();
        if forced.is_empty() {
            return Ok(Vec::new());
        }
        let Ok(mut tokens) = self.engine.vocab.tokenize_greedy(&forced) else {
            return Ok(Vec::new());
        };
        tokens.pop();
        let room = self.max_tokens - self.choices[c].count;
        tokens.truncate(room.saturating_sub(1));
        let mut fed = Vec::new();
        for t in tokens {
            let choice = &mut self.choices[c];
            let m = choice.matcher.as_mut().expect("checked above");
            // A token the output refuses (its split disagrees with the model's) leaves the
            // matcher as it was: the forced run ends there. One advance, not a check and one.
            if m.advance(t).is_err() {
                break;
            }
            let left = self.max_tokens.saturating_sub(choice.count + 1);
            if !closes_within(m, &self.engine.vocab, left) {
                m.rollback(1)?;
                break;
            }
            choice.count += 1;
            fed.push(t);
            self.push_token(t);
        }
        Ok(fed)
    }

    /// Whether the constraint's output is complete and nothing may follow it: then the only
    /// token the next step could sample is end-of-sequence, and the choice ends without that
    /// forward pass (a whole step saved per reply; the never-sampled end-of-sequence token is
    /// not counted in `usage`).
    fn only_end_allowed(&mut self) -> Result<bool> {
        let Some(m) = self.choices[self.current].matcher.as_ref() else {
            return Ok(false);
        };
        if !m.is_accepting() {
            return Ok(false);
        }
        m.fill_mask(&mut self.mask)?;
        let vocab = &self.engine.vocab;
        Ok(self
            .mask
            .iter()
            .enumerate()
            .filter(|(_, &bits)| bits != 0)
            .all(|(w, &bits)| {
                (0..32)
                    .filter(|b| bits >> b & 1 == 1)
                    .all(|b| vocab.is_eos((w * 32 + b) as TokenId))
            }))
    }

    /// Cuts the current choice's text at the first stop sequence; whether one was found.
    fn check_stop(&mut self) -> bool {
        let choice = &mut self.choices[self.current];
        let longest = self.req.stop.iter().map(String::len).max().unwrap_or(0);
        // A new match must end in the bytes added since the last search.
        let from = choice
            .stop_checked
            .saturating_sub(longest.saturating_sub(1));
        choice.stop_checked = choice.text.len();
        let hit = self
            .req
            .stop
            .iter()
            .filter_map(|s| find(&choice.text[from..], s.as_bytes()).map(|at| from + at))
            .min();
        match hit {
            Some(at) => {
                choice.text.truncate(at);
                true
            }
            None => false,
        }
    }

    /// Streams what of the current choice's text is settled: whole UTF-8 characters, not a
    /// possible start of a stop sequence or a tool call.
    fn stream_delta(&mut self, chunks: &mut Vec<Value>) {
        let c = self.current;
        let codec = self.engine.codec.filter(|_| self.uses_tools());
        let choice = &mut self.choices[c];
        let text = &choice.text;
        let mut end = text.len();
        // Hold back a tail that could still grow into a stop sequence.
        for stop in &self.req.stop {
            let s = stop.as_bytes();
            for k in (1..s.len().min(text.len() + 1)).rev() {
                if text.ends_with(&s[..k]) {
                    end = end.min(text.len() - k);
                    break;
                }
            }
        }
        end = utf8_prefix_len(&text[..end]);
        if let Some(codec) = codec {
            let settled = String::from_utf8_lossy(&text[..end]);
            end = codec.safe_prefix_len(&settled).min(end);
        }
        let logprobs = &choice.logprobs[choice.logprobs_streamed..];
        if end <= choice.streamed && logprobs.is_empty() {
            return;
        }
        let delta =
            String::from_utf8_lossy(&text[choice.streamed..end.max(choice.streamed)]).into_owned();
        let from = choice.logprobs_streamed;
        let lp = self.logprobs_json(c, from);
        let choice = &mut self.choices[c];
        choice.streamed = end.max(choice.streamed);
        choice.logprobs_streamed = choice.logprobs.len();
        chunks.push(response::content_chunk(&self.meta, c, &delta, lp));
    }

    /// Ends the current choice: parses tool calls, streams the rest, moves to the next choice.
    fn finish_choice(&mut self, reason: Finish, chunks: &mut Vec<Value>) {
        let c = self.current;
        let codec = self.engine.codec.filter(|_| self.uses_tools());
        let choice = &mut self.choices[c];
        let text = String::from_utf8_lossy(&choice.text).into_owned();
        // A steered close is the end of max_tokens, however the output then ended.
        let reason = if choice.closed {
            Finish::Length
        } else {
            reason
        };
        let mut finish = reason;
        match codec {
            Some(codec) => {
                let parsed =
                    codec.parse(&text, &self.req.tools, self.id_seed.wrapping_add(c as u64));
                choice.calls = parsed.calls;
                if !self.req.parallel_tool_calls {
                    choice.calls.truncate(1);
                }
                if !choice.calls.is_empty() && reason == Finish::Stop {
                    finish = Finish::ToolCalls;
                }
                choice.content = if choice.calls.is_empty() {
                    Some(text)
                } else {
                    parsed.content
                };
            }
            None => choice.content = Some(text),
        }
        choice.finish = Some(finish);
        if self.req.stream {
            if !choice.started {
                choice.started = true;
                chunks.extend(response::role_chunk(&self.meta, c));
            }
            let content = choice.content.clone().unwrap_or_default();
            // What was streamed is a prefix of the content, except around tool markup (the
            // parsed content is trimmed): then only what follows the streamed part is sent.
            let streamed = String::from_utf8_lossy(&choice.text[..choice.streamed]).into_owned();
            let rest = content
                .strip_prefix(streamed.as_str())
                .unwrap_or("")
                .to_owned();
            let lp = self.logprobs_json(c, self.choices[c].logprobs_streamed);
            let choice = &mut self.choices[c];
            choice.logprobs_streamed = choice.logprobs.len();
            if !rest.is_empty() || lp.is_some() {
                chunks.push(response::content_chunk(&self.meta, c, &rest, lp));
            }
            if !choice.calls.is_empty() {
                chunks.push(response::tool_calls_chunk(&self.meta, c, &choice.calls));
            }
            chunks.push(response::finish_chunk(&self.meta, c, finish));
        }
        self.current += 1;
        self.pending = None;
    }

    /// The logprobs object for entries `from..` of choice `c` (`None` when not asked for).
    fn logprobs_json(&self, c: usize, from: usize) -> Option<Value> {
        if !self.req.logprobs {
            return None;
        }
        let entries = &self.choices[c].logprobs[from..];
        Some(response::logprobs_json(
            self.req.endpoint,
            entries,
            &self.engine.vocab,
        ))
    }

    /// `usage`: the prompt's tokens, and every token sampled or forced (an ending
    /// end-of-sequence token included: the model produced it).
    pub fn usage(&self) -> Value {
        let completion: usize = self.choices.iter().map(|c| c.count).sum();
        let mut usage = json!({
            "prompt_tokens": self.prompt.len(),
            "completion_tokens": completion,
            "total_tokens": self.prompt.len() + completion,
        });
        // A poot extension, present when it is not 0: the choices whose output was steered
        // onto a shortest completion as max_tokens neared (complete, `finish_reason` length).
        let closed = self.choices.iter().filter(|c| c.closed).count();
        if closed > 0 {
            usage["forced_closes"] = closed.into();
        }
        usage
    }

    /// The whole (non-streamed) response; meaningful once [`Run::is_done`].
    pub fn response(&self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                response::choice_json(
                    self.req.endpoint,
                    i,
                    c.content.as_deref(),
                    &c.calls,
                    self.logprobs_json(i, 0),
                    c.finish.unwrap_or(Finish::Length),
                )
            })
            .collect();
        let mut body = response::completion_json(&self.meta, choices, self.usage());
        if self.req.step_stats {
            body["step_stats"] = self.steps_json(0);
        }
        if !self.req.ignored_fields.is_empty() || !self.req.tool_warnings.is_empty() {
            body["warnings"] = self.warnings();
        }
        body
    }

    /// Steps `from..` as `step_stats` JSON: each token with its text (lossy UTF-8: a token
    /// may hold part of a character).
    fn steps_json(&self, from: usize) -> Value {
        let vocab = &self.engine.vocab;
        let token =
            |id: TokenId| json!({"token": id, "text": String::from_utf8_lossy(vocab.bytes(id))});
        self.steps[from..]
            .iter()
            .map(|s| {
                let mut v = token(s.token);
                v["index"] = s.index.into();
                v["allowed"] = s.allowed.into();
                v["mask_us"] = s.mask_us.into();
                v["forced"] = s.forced.iter().map(|&t| token(t)).collect();
                if s.closing {
                    v["closing"] = true.into();
                }
                v
            })
            .collect()
    }

    /// The steps so far (empty unless the request asked for `step_stats`).
    pub fn step_stats(&self) -> &[StepStats] {
        &self.steps
    }

    /// One warning per ignored request field, then one per tool whose schema could not be
    /// compiled where no call to it is forced.
    pub fn warnings(&self) -> Value {
        self.req
            .ignored_fields
            .iter()
            .map(|f| Value::from(format!("unknown field `{f}` was ignored")))
            .chain(
                self.req
                    .tool_warnings
                    .iter()
                    .map(|w| Value::from(w.as_str())),
            )
            .collect()
    }
}

impl StepSource for Run {
    fn device_step(&mut self) -> Result<DeviceStep<'_>> {
        Run::device_step(self)
    }

    fn masks(&self) -> bool {
        self.choices
            .get(self.current)
            .is_some_and(|c| c.matcher.is_some())
    }
}

/// What closing a constrained output takes, against a budget of tokens.
#[derive(Debug)]
enum Close {
    /// A completion of at most `budget` bytes, so of at most `budget` tokens.
    Fits,
    /// The fewest tokens that write a shortest completion (at most or past the budget);
    /// after its first token the rest is a fewest split of what remains, so following it
    /// needs exactly one token per step.
    Path(Vec<TokenId>),
    /// Longer than `budget` tokens of the vocabulary's longest length could write.
    TooLong,
    /// No completion the vocabulary can write is known: nothing is steered.
    Unknown,
}

/// The cheapest close of `m`'s output within `budget` tokens: the byte length of a shortest
/// completion first (a table lookup per stack frame), and only when that passes the budget
/// the completion itself, split into the fewest tokens.
fn close_plan(m: &Matcher, vocab: &Vocabulary, budget: usize) -> Close {
    let Some(len) = m.closing_len() else {
        return Close::Unknown;
    };
    if len <= budget as u64 {
        return Close::Fits;
    }
    let longest = vocab.max_token_len().max(1) as u64;
    if len > (budget as u64).saturating_mul(longest) {
        return Close::TooLong;
    }
    match close_tokens(m, vocab, len) {
        Some(path) => Close::Path(path),
        None => Close::Unknown,
    }
}

/// Whether `m`'s output can still close within `left` tokens (also when no close is known:
/// then nothing can be steered).
fn closes_within(m: &Matcher, vocab: &Vocabulary, left: usize) -> bool {
    match close_plan(m, vocab, left) {
        Close::Fits | Close::Unknown => true,
        Close::Path(p) => p.len() <= left,
        Close::TooLong => false,
    }
}

/// The fewest tokens that write a shortest completion of `m`'s output.
fn close_path(m: &Matcher, vocab: &Vocabulary) -> Option<Vec<TokenId>> {
    close_tokens(m, vocab, m.closing_len()?)
}

/// The fewest tokens that write a shortest completion of `len` bytes (`m.closing_len()`).
fn close_tokens(m: &Matcher, vocab: &Vocabulary, len: u64) -> Option<Vec<TokenId>> {
    m.closing_bytes(usize::try_from(len).ok()?)
        .and_then(|bytes| vocab.fewest_tokens(&bytes))
}

/// The request field that holds the prompt.
fn endpoint_param(req: &Request) -> &'static str {
    match req.endpoint {
        Endpoint::Chat => "messages",
        Endpoint::Completion => "prompt",
    }
}

/// The constraint by the spec's precedence: a forced tool call (for a codec that can force)
/// over `guided_choice` > `guided_regex` > `guided_grammar` > `guided_json` >
/// `response_format`.
fn constraint_of(engine: &Engine, req: &Request) -> Result<(Option<Spec>, Option<&'static str>)> {
    if matches!(
        req.tool_choice,
        ToolChoice::Required | ToolChoice::Function(_)
    ) {
        if let Some(codec) = engine.codec {
            if let Some(grammar) = codec.forced_grammar(
                &req.tools,
                &req.tool_choice,
                req.parallel_tool_calls,
                &engine.limits,
            )? {
                return Ok((Some(Spec::Grammar(grammar)), Some("tool_choice")));
            }
        }
    }
    let param = req.guided.as_ref().map(Spec::param);
    Ok((req.guided.clone(), param))
}

/// The first index of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The longest prefix of `bytes` that does not end inside a UTF-8 character (invalid bytes
/// count as whole characters: they will never complete).
fn utf8_prefix_len(bytes: &[u8]) -> usize {
    // A character is at most 4 bytes: only a lead byte among the last 3 can be unfinished.
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        let need = match b {
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            0x80..=0xbf => continue,
            _ => return bytes.len(),
        };
        return if need > back {
            bytes.len() - back
        } else {
            bytes.len()
        };
    }
    bytes.len()
}
