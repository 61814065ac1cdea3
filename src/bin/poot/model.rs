//! `poot tokenize | eval | generate`: the model verbs, over `poot::model` (CPU) and
//! `poot::gpu` (wgpu; the CLI waits for it with pollster).
//!
//! `generate` runs one OpenAI chat (`messages`) or completions (`prompt`) body through
//! `poot::api` and prints the response object, or the SSE chunks with `stream: true`.

use std::process::ExitCode;
use std::sync::Arc;

use std::io::Write;

use poot::api::{Endpoint, Engine, Run, RunOptions};
use poot::gguf::Gguf;
use poot::model::{self, Backend, CpuBackend, EvalPrompt, Model, StepSource};
use poot::tokenizer::Tokenizer;
use poot::vocab::TokenId;
use poot::Error;
use serde_json::Value;

use super::{read, Failure, Options};

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
    let weights = Weights::load(opts.values.get("backend"), &cpu)?;
    let mut backend = weights.backend(context)?;
    let report = model::eval_with(backend.as_mut(), &tok, prompt_ids, top, greedy)?;
    println!("{}", report.to_json());
    Ok(ExitCode::SUCCESS)
}

pub(super) fn generate(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(rest, &["model", "request", "backend", "threads"])?;
    let file = read(opts.required("model")?)?;
    let body: Value = serde_json::from_slice(&read(opts.required("request")?)?).map_err(|e| {
        Error::invalid_input(format!("the request body is not valid JSON: {e}")).with_source(e)
    })?;
    let engine = Arc::new(Engine::from_gguf(&Gguf::parse(&file)?)?);
    // A body with `messages` is a chat request, anything else a completions one.
    let endpoint = if body.get("messages").is_some() {
        Endpoint::Chat
    } else {
        Endpoint::Completion
    };
    let mut run = Run::new(engine, &body, endpoint, run_options(endpoint))?;
    let mut cpu = Model::from_gguf_bytes(&file[..])?;
    cpu.set_threads(opts.number("threads", Some(1))? as usize);
    let weights = Weights::load(opts.values.get("backend"), &cpu)?;
    let mut backend = weights.backend(run.context_needed())?;
    let stream = run.request().stream;
    let mut out = std::io::stdout().lock();
    run.drive(backend.as_mut(), &mut |chunk| {
        writeln!(out, "data: {chunk}\n").is_ok()
    })?;
    if stream {
        writeln!(out, "data: [DONE]\n").map_err(|e| Failure::Io(e.to_string()))?;
    } else {
        writeln!(out, "{}", run.response()).map_err(|e| Failure::Io(e.to_string()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A response id, the time and a fresh default seed (the core has no clock or entropy).
pub(super) fn run_options(endpoint: Endpoint) -> RunOptions {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Time and a counter, mixed: unique per process, varied across runs.
    let seed = (now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32))
        .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completion => "cmpl",
    };
    RunOptions {
        id: format!("{prefix}-{seed:016x}"),
        created: now.as_secs(),
        default_seed: seed,
        clock: Some(monotonic_ms),
    }
}

/// Milliseconds since the first call: the clock `step_stats` time masks with.
pub(super) fn monotonic_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
        * 1000.0
}

/// The weights `--backend` names (default `cpu`), loaded once: on the GPU they are uploaded
/// here, and every run gets its own session from them ([`Weights::backend`]).
pub(super) enum Weights<'m> {
    Cpu(&'m Model<&'m [u8]>),
    // Boxed: made once per process, and clippy's large_enum_variant (256 bytes vs 8).
    Gpu(Box<poot::gpu::Model>),
}

impl<'m> Weights<'m> {
    pub(super) fn load(name: Option<&String>, cpu: &'m Model<&'m [u8]>) -> Result<Self, Failure> {
        match name.map(String::as_str).unwrap_or("cpu") {
            "cpu" => Ok(Weights::Cpu(cpu)),
            "gpu" => Ok(Weights::Gpu(Box::new(upload(cpu)?))),
            other => Err(Failure::Usage(format!(
                "`--backend` takes `cpu` or `gpu`, got `{other}`"
            ))),
        }
    }

    /// A backend holding a fresh session of `context` positions over these weights.
    pub(super) fn backend(&self, context: usize) -> Result<Box<dyn Backend + '_>, Failure> {
        Ok(match self {
            Weights::Cpu(cpu) => Box::new(CpuBackend {
                model: *cpu,
                session: cpu.session(context)?,
            }),
            Weights::Gpu(model) => Box::new(GpuBackend::new(model, context)?),
        })
    }
}

/// The variable naming the optional GPU features not to use (`f16`, `subgroups`, comma
/// separated): `POOT_GPU_DISABLE=f16,subgroups` runs the kernels' f32 path on any adapter.
const GPU_DISABLE_VAR: &str = "POOT_GPU_DISABLE";

/// Opens the GPU (less the features `POOT_GPU_DISABLE` names) and uploads `cpu`'s weights.
pub(super) fn upload(cpu: &Model<&[u8]>) -> Result<poot::gpu::Model, Failure> {
    let disabled = std::env::var(GPU_DISABLE_VAR).unwrap_or_default();
    let options = poot::gpu::ContextOptions::without(&disabled)
        .map_err(|e| Failure::Usage(format!("{GPU_DISABLE_VAR}: {e}")))?;
    let ctx = Arc::new(pollster::block_on(poot::gpu::Context::with_options(
        options,
    ))?);
    Ok(poot::gpu::Model::upload(ctx, cpu)?)
}

/// The GPU model behind the decode loop's synchronous [`Backend`] (the CLI may block). It
/// samples on the GPU whenever the run allows (reading back 4 bytes a step), filling the
/// mask on the CPU between submitting the forward pass and waiting for the token.
pub(super) struct GpuBackend<'g> {
    pub model: &'g poot::gpu::Model,
    pub session: poot::gpu::Session,
    /// Off: read the logits back and sample on the CPU (the benchmark's comparison).
    pub sample_on_device: bool,
    /// Off: wait for the forward pass before filling the mask (the benchmark's baseline
    /// for what the overlap hides).
    pub overlap: bool,
    /// Per device-sampled step, when set: milliseconds to submit the forward pass, to fill
    /// the mask (and draw), and to wait for the token.
    pub timings: Option<Vec<[f64; 3]>>,
}

impl<'g> GpuBackend<'g> {
    /// A fresh session of `context` positions over weights already on the GPU.
    pub(super) fn new(model: &'g poot::gpu::Model, context: usize) -> Result<Self, Failure> {
        Ok(GpuBackend {
            session: model.session(context)?,
            model,
            sample_on_device: true,
            overlap: true,
            timings: None,
        })
    }
}

impl Backend for GpuBackend<'_> {
    fn n_vocab(&self) -> usize {
        self.model.config().n_vocab
    }

    fn forward(&mut self, tokens: &[TokenId]) -> poot::Result<Vec<f32>> {
        pollster::block_on(self.model.forward(&mut self.session, tokens))
    }

    fn truncate(&mut self, len: usize) {
        self.session.truncate(len);
    }

    fn samples_on_device(&self) -> bool {
        self.sample_on_device
    }

    fn forward_sample(
        &mut self,
        tokens: &[TokenId],
        source: &mut dyn StepSource,
    ) -> poot::Result<TokenId> {
        let t0 = monotonic_ms();
        if !source.masks() {
            // Nothing to fill while the GPU works: one submission for the whole step.
            let step = source.device_step()?;
            let t1 = monotonic_ms();
            let token = pollster::block_on(self.model.forward_sample(
                &mut self.session,
                tokens,
                step.mask,
                step.n_vocab,
                &step.sampling,
            ))?;
            if let Some(timings) = self.timings.as_mut() {
                timings.push([0.0, t1 - t0, monotonic_ms() - t1]);
            }
            return Ok(token);
        }
        pollster::block_on(self.model.submit_forward(&mut self.session, tokens))?;
        if !self.overlap {
            self.model.wait_idle()?;
        }
        let t1 = monotonic_ms();
        let step = source.device_step()?;
        let t2 = monotonic_ms();
        let token = pollster::block_on(self.model.sample(
            &mut self.session,
            step.mask,
            step.n_vocab,
            &step.sampling,
        ))?;
        if let Some(timings) = self.timings.as_mut() {
            timings.push([t1 - t0, t2 - t1, monotonic_ms() - t2]);
        }
        Ok(token)
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
