//! The Llama forward pass on the GPU: the same computation as [`crate::model::Model`], one
//! kernel per step of it, with the weights uploaded once and the KV cache kept on the GPU.
//!
//! A call to [`Model::forward`] records every layer of a chunk of up to [`MAX_CHUNK`] tokens
//! into one command encoder and one compute pass and submits it once; per layer that is 16
//! dispatches (one of them stores K and V into the cache, f16 on a device with `shader-f16`),
//! so a SmolLM2-135M (30 layers) decode step is 1 + 30 x 16 + 2 = 483 dispatches, and one
//! more to sample ([`Session::counters`] counts them). A matrix split for the adapter's
//! binding limit ([`Matrix::chunks`]) takes one dispatch per chunk in place of its one, and prefill chunks shrink until each scratch
//! buffer fits one binding ([`Model::chunk_for`]). The dispatches of a chunk length are
//! prepared once per session (a [`Plan`]: its bind groups and uniforms), so a decode step
//! creates no GPU object: it writes the token id,
//! the RoPE table and the attention uniform's position, and replays the plan.
//!
//! Decoding that samples on the GPU reads back the chosen token's 4 bytes instead of the
//! logits. A constrained step is two submissions, [`Model::submit_forward`] then
//! [`Model::sample`], and the caller fills the token mask on the CPU between them, while the
//! GPU runs the forward pass; an unconstrained one is one ([`Model::forward_sample`]).

use std::sync::Arc;

use super::ops::{attention_params, AttentionShape, Dispatch};
use super::sample::{check_some_allowed, sample_params, token_of, SampleBuffers, SAMPLE};
use super::{Context, ErrorScope, Matrix};
use crate::error::{Error, Result};
use crate::mask;
use crate::model::{self, Config, KvPrecision};
use crate::sampling::DeviceSampling;
use crate::vocab::TokenId;

/// Tokens evaluated per submission during prefill: bounds the scratch buffers (the attention
/// scores take chunk × heads × context floats: 64 × 9 × 2048 × 4 B = 4.7 MB for SmolLM2).
pub const MAX_CHUNK: usize = 64;

#[derive(Debug)]
struct Layer {
    attn_norm: wgpu::Buffer,
    wq: Matrix,
    wk: Matrix,
    wv: Matrix,
    wo: Matrix,
    /// Qwen2's biases on Q, K and V.
    qkv_bias: Option<[wgpu::Buffer; 3]>,
    /// Qwen3's and Gemma 3's RMSNorm weights over each Q and K head.
    qk_norm: Option<[wgpu::Buffer; 2]>,
    /// Gemma 3's RMSNorm weights after attention and after the feed-forward.
    post_norms: Option<[wgpu::Buffer; 2]>,
    ffn_norm: wgpu::Buffer,
    w_gate: Matrix,
    w_up: Matrix,
    w_down: Matrix,
}

/// A model's weights on the GPU.
#[derive(Debug)]
pub struct Model {
    ctx: Arc<Context>,
    config: Config,
    tok_embd: Matrix,
    /// `None` when the output matrix is the token embedding (tied): it is uploaded once.
    output: Option<Matrix>,
    output_norm: wgpu::Buffer,
    layers: Vec<Layer>,
}

/// What a session has asked of the GPU so far, so benchmarks can print dispatches and bytes
/// read back per token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Positions evaluated.
    pub tokens: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Queue submissions.
    pub submissions: u64,
    /// Bytes copied back to the CPU (logits or a sampled token id).
    pub bytes_read_back: u64,
    /// Plans built (bind groups and uniforms made): one per chunk length, not per step.
    pub plans_built: u64,
}

/// Per-sequence GPU state: the KV cache, the scratch buffers and the position.
#[derive(Debug)]
pub struct Session {
    capacity: usize,
    /// Tokens per prefill submission ([`Model::chunk_for`]).
    chunk: usize,
    pos: usize,
    tokens: Vec<TokenId>,
    k_cache: Vec<wgpu::Buffer>,
    v_cache: Vec<wgpu::Buffer>,
    /// F16 on a device with `shader-f16` ([`Context::kv_cache_buffer`]).
    kv_precision: KvPrecision,
    scratch: Scratch,
    /// Prepared forward passes by chunk length (at most [`MAX_PLANS`]).
    plans: Vec<Plan>,
    sample: SampleBuffers,
    sample_dispatch: Option<Dispatch>,
    counters: Counters,
}

/// How a forward pass's last chunk ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// Copy the logits into the read-back buffer.
    Logits,
    /// Leave them on the GPU (for [`Model::sample`]).
    Keep,
    /// Sample from them (the step's settings already written) and copy out the token.
    Sample,
}

/// Records the sampling dispatch and the copy of its 4-byte result.
fn encode_sample(e: &mut wgpu::CommandEncoder, dispatch: &Dispatch, b: &SampleBuffers) {
    {
        let mut pass = e.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("sample"),
            timestamp_writes: None,
        });
        dispatch.encode(&mut pass);
    }
    e.copy_buffer_to_buffer(&b.result, 0, &b.readback, 0, 4);
}

/// Chunk lengths a session keeps plans for: decode (1), full prefill chunks (64) and one
/// other (a prompt's remainder); a fourth length replaces the oldest odd one.
const MAX_PLANS: usize = 3;

/// A chunk length's dispatches, prepared once: each one's pipeline, bind group and uniform.
/// Only the attention kernel's uniform changes between steps (the position), and every layer
/// shares it.
#[derive(Debug)]
struct Plan {
    tokens: usize,
    /// One per row chunk of the token embedding.
    embedding: Vec<Dispatch>,
    /// Each layer's dispatches, in order.
    layers: Vec<Vec<Dispatch>>,
    /// The final norm and the logits of the last position.
    head: Vec<Dispatch>,
    attention_params: wgpu::Buffer,
    /// The sliding-window layers' attention uniform (Gemma 3).
    window_params: Option<wgpu::Buffer>,
}

#[derive(Debug)]
struct Scratch {
    ids: wgpu::Buffer,
    cos: wgpu::Buffer,
    sin: wgpu::Buffer,
    /// The sliding-window layers' RoPE table (their own base); placeholders otherwise.
    cos_local: wgpu::Buffer,
    sin_local: wgpu::Buffer,
    x: wgpu::Buffer,
    h: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    /// Q and K before Qwen3's per-head RMSNorm (which cannot run in place: a kernel may not
    /// bind one buffer twice); a 4-byte placeholder for the other families.
    q_raw: wgpu::Buffer,
    k_raw: wgpu::Buffer,
    att: wgpu::Buffer,
    proj: wgpu::Buffer,
    gate: wgpu::Buffer,
    up: wgpu::Buffer,
    scores: wgpu::Buffer,
    last: wgpu::Buffer,
    normed: wgpu::Buffer,
    logits: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Session {
    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Whether nothing has been evaluated yet.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// The tokens evaluated so far.
    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    /// The context this session was sized for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets positions from `len` on (their cache entries are overwritten later).
    pub fn truncate(&mut self, len: usize) {
        self.pos = self.pos.min(len);
        self.tokens.truncate(self.pos);
    }

    /// What this session has asked of the GPU so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// How its KV cache holds keys and values: the CPU twin of this session is
    /// [`crate::model::Model::session_with`] this precision.
    pub fn kv_precision(&self) -> KvPrecision {
        self.kv_precision
    }
}

impl Model {
    /// Checks, before any buffer is made, that every weight matrix has a kernel and that
    /// each of its rows fits one storage binding of this adapter (`maxStorageBufferBindingSize`
    /// and `maxBufferSize`; a larger matrix is split into row chunks): a model the GPU cannot
    /// hold is refused whole, naming the first matrix that does not fit, rather than
    /// half-uploaded.
    pub fn check_fits<B: AsRef<[u8]>>(ctx: &Context, cpu: &model::Model<B>) -> Result<()> {
        if cpu.config().final_logit_softcap.is_some() {
            // The logits stay on the device for sampling; no kernel caps them yet.
            return Err(Error::gpu(
                "the WebGPU path has no final logit soft-capping yet; this model runs on the CPU",
            ));
        }
        let mut matrices = vec![&cpu.tok_embd, &cpu.output];
        for l in &cpu.layers {
            matrices.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        }
        for m in matrices {
            let row_bytes = super::matvec::gpu_bytes(m.ty, 1, m.cols).map_err(|e| {
                Error::invalid_input(format!(
                    "the model cannot run on the GPU: tensor `{}`: {}",
                    m.name,
                    e.message()
                ))
                .with_param("model")
            })?;
            ctx.rows_per_buffer(row_bytes).map_err(|e| {
                Error::limit_exceeded(format!(
                    "the model is too large for this GPU adapter: tensor `{}` ({}x{} {}): {}",
                    m.name,
                    m.rows,
                    m.cols,
                    m.ty.name(),
                    e.message()
                ))
                .with_param("model")
            })?;
        }
        Ok(())
    }

    /// [`Model::upload`] inside an error scope, so an out-of-memory while creating the
    /// buffers is an error here rather than an uncaptured device error later.
    pub async fn upload_scoped<B: AsRef<[u8]>>(
        ctx: Arc<Context>,
        cpu: &model::Model<B>,
    ) -> Result<Self> {
        let scope = ErrorScope::push(&ctx.device);
        let model = Self::upload(Arc::clone(&ctx), cpu);
        scope.pop("uploading the weights").await?;
        model
    }

    /// Uploads a CPU model's weights (repacked for the kernels; see [`super::repack`]).
    pub fn upload<B: AsRef<[u8]>>(ctx: Arc<Context>, cpu: &model::Model<B>) -> Result<Self> {
        ctx.ensure_alive()?;
        Self::check_fits(&ctx, cpu)?;
        let file = cpu.bytes();
        let matrix = |m: &model::Matrix| {
            ctx.upload_matrix(&m.name, m.ty, m.rows, m.cols, &file[m.range.clone()])
        };
        let vector = |name: &str, v: &[f32]| {
            ctx.storage_buffer(name, bytemuck::cast_slice(v), wgpu::BufferUsages::empty())
        };
        let tied = cpu.output.range == cpu.tok_embd.range;
        let mut layers = Vec::with_capacity(cpu.layers.len());
        for (i, l) in cpu.layers.iter().enumerate() {
            layers.push(Layer {
                attn_norm: vector(&format!("blk.{i}.attn_norm"), &l.attn_norm),
                wq: matrix(&l.wq)?,
                wk: matrix(&l.wk)?,
                wv: matrix(&l.wv)?,
                wo: matrix(&l.wo)?,
                qkv_bias: l.qkv_bias.as_ref().map(|[q, k, v]| {
                    [
                        vector(&format!("blk.{i}.attn_q.bias"), q),
                        vector(&format!("blk.{i}.attn_k.bias"), k),
                        vector(&format!("blk.{i}.attn_v.bias"), v),
                    ]
                }),
                qk_norm: l.qk_norm.as_ref().map(|[q, k]| {
                    [
                        vector(&format!("blk.{i}.attn_q_norm"), q),
                        vector(&format!("blk.{i}.attn_k_norm"), k),
                    ]
                }),
                post_norms: l.post_norms.as_ref().map(|[attention, ffn]| {
                    [
                        vector(&format!("blk.{i}.post_attention_norm"), attention),
                        vector(&format!("blk.{i}.post_ffw_norm"), ffn),
                    ]
                }),
                ffn_norm: vector(&format!("blk.{i}.ffn_norm"), &l.ffn_norm),
                w_gate: matrix(&l.w_gate)?,
                w_up: matrix(&l.w_up)?,
                w_down: matrix(&l.w_down)?,
            });
        }
        Ok(Model {
            tok_embd: matrix(&cpu.tok_embd)?,
            output: if tied {
                None
            } else {
                Some(matrix(&cpu.output)?)
            },
            output_norm: vector("output_norm", &cpu.output_norm),
            layers,
            config: cpu.config().clone(),
            ctx,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The context this model runs on.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Tokens per prefill submission for a session of `context` positions: [`MAX_CHUNK`],
    /// or fewer when a chunk's scratch buffers would pass the adapter's storage binding
    /// limit (the attention scores take chunk x heads x context floats: 64 x 9 x 8,192 x 4 B
    /// = 18.9 MB for SmolLM2 at its full context; the feed-forward activations chunk x n_ff).
    /// A single token over the limit is an error naming it.
    fn chunk_for(&self, context: usize) -> Result<usize> {
        let c = &self.config;
        let ctx = &self.ctx;
        let scores = (c.n_head * context * 4) as u64;
        ctx.check_binding_size(
            &format!("one token's attention scores over {context} positions"),
            "max_tokens",
            scores,
        )?;
        let ffn = (c.n_ff * 4) as u64;
        ctx.check_binding_size("one token's feed-forward activations", "model", ffn)?;
        let widest = [
            scores,
            ffn,
            (c.n_embd.max(c.q_dim()) * 4) as u64,
            (c.kv_dim() * 4) as u64,
        ]
        .into_iter()
        .max()
        .unwrap_or(1);
        Ok(((ctx.max_binding_bytes / widest) as usize).clamp(1, MAX_CHUNK))
    }

    /// A session whose KV cache holds `context` positions (at most the model's context).
    pub fn session(&self, context: usize) -> Result<Session> {
        self.ctx.ensure_alive()?;
        let c = &self.config;
        if context == 0 || context > c.context_length {
            return Err(Error::invalid_input(format!(
                "a context of {context} positions is outside 1..={}",
                c.context_length
            ))
            .with_param("max_tokens"));
        }
        let ctx = &self.ctx;
        let kv = c.kv_dim();
        let cache_bytes = (context * kv * ctx.kv_precision().bytes()) as u64;
        ctx.check_binding_size("a layer's KV cache", "max_tokens", cache_bytes)?;
        let chunk = self.chunk_for(context)?;
        let zeros = |label: &str, floats: usize| {
            let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
            ctx.storage_buffer(label, &vec![0; floats * 4], usage)
        };
        let cache = |what: &str| -> Vec<wgpu::Buffer> {
            (0..c.n_layer)
                .map(|i| ctx.kv_cache_buffer(&format!("blk.{i}.{what}_cache"), context, kv))
                .collect()
        };
        let t = chunk;
        let (d, qd) = (c.n_embd, c.q_dim());
        let qk_norm = self.layers.iter().any(|l| l.qk_norm.is_some());
        let raw = |floats: usize| if qk_norm { floats } else { 1 };
        let local = |floats: usize| {
            if c.sliding_window.is_some() {
                floats
            } else {
                1
            }
        };
        let scratch = Scratch {
            ids: zeros("ids", t),
            cos: zeros("rope.cos", t * c.rope_dim / 2),
            sin: zeros("rope.sin", t * c.rope_dim / 2),
            cos_local: zeros("rope.cos_local", local(t * c.rope_dim / 2)),
            sin_local: zeros("rope.sin_local", local(t * c.rope_dim / 2)),
            x: zeros("x", t * d),
            h: zeros("h", t * d),
            q: zeros("q", t * qd),
            k: zeros("k", t * kv),
            v: zeros("v", t * kv),
            q_raw: zeros("q_raw", raw(t * qd)),
            k_raw: zeros("k_raw", raw(t * kv)),
            att: zeros("att", t * qd),
            proj: zeros("proj", t * d),
            gate: zeros("gate", t * c.n_ff),
            up: zeros("up", t * c.n_ff),
            scores: zeros("scores", t * c.n_head * context),
            last: zeros("last", d),
            normed: zeros("normed", d),
            logits: zeros("logits", c.n_vocab),
            readback: ctx.readback_buffer("logits.readback", (c.n_vocab * 4) as u64),
        };
        Ok(Session {
            capacity: context,
            chunk,
            pos: 0,
            tokens: Vec::new(),
            k_cache: cache("k"),
            v_cache: cache("v"),
            kv_precision: ctx.kv_precision(),
            scratch,
            plans: Vec::new(),
            sample: ctx.sample_buffers(c.n_vocab)?,
            sample_dispatch: None,
            counters: Counters::default(),
        })
    }

    /// Evaluates `tokens` after what the session holds and returns the logits of the last
    /// one (prefill when many, one decode step when one).
    pub async fn forward(&self, session: &mut Session, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.submit(session, tokens, Tail::Logits).await?;
        let bytes = self.ctx.read_buffer(&session.scratch.readback).await?;
        session.counters.bytes_read_back += bytes.len() as u64;
        Ok(bytemuck::cast_slice(&bytes).to_vec())
    }

    /// Evaluates `tokens` like [`Model::forward`] but leaves the logits on the GPU for
    /// [`Model::sample`]; returns once the work is submitted, so the caller can fill the
    /// next token mask while the GPU runs.
    pub async fn submit_forward(&self, session: &mut Session, tokens: &[TokenId]) -> Result<()> {
        self.submit(session, tokens, Tail::Keep).await
    }

    /// Waits until the GPU has finished what was submitted (natively; in a browser the
    /// next read-back waits instead). The benchmark's serial baseline: forward, wait, then
    /// the mask, to measure what overlapping the two hides.
    pub fn wait_idle(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::gpu(format!("waiting for the GPU failed: {e}")).with_source(e))?;
        Ok(())
    }

    /// Chooses the next token on the GPU from the logits the last [`Model::submit_forward`]
    /// left there, as [`crate::sampling::Sampler::sample`] would with `sampling`'s settings
    /// and draw, considering the first `n` tokens (the tokenizer's, when the model pads its
    /// output) and, with a mask, only those it allows. Reads back 4 bytes.
    pub async fn sample(
        &self,
        session: &mut Session,
        token_mask: Option<&[u32]>,
        n: usize,
        sampling: &DeviceSampling,
    ) -> Result<TokenId> {
        let ctx = &self.ctx;
        ctx.ensure_alive()?;
        let scope = ErrorScope::push(&ctx.device);
        let dispatch = self
            .write_sample_step(session, token_mask, n, sampling)
            .await?;
        let mut e = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("sample"),
            });
        encode_sample(&mut e, &dispatch, &session.sample);
        ctx.submit(e.finish())?;
        scope.pop("sampling on the GPU").await?;
        session.counters.dispatches += 1;
        session.counters.submissions += 1;
        self.read_token(session, n).await
    }

    /// [`Model::submit_forward`] and [`Model::sample`] in one submission: for a step whose
    /// mask (if any) is ready before the forward pass, an unconstrained one above all.
    pub async fn forward_sample(
        &self,
        session: &mut Session,
        tokens: &[TokenId],
        token_mask: Option<&[u32]>,
        n: usize,
        sampling: &DeviceSampling,
    ) -> Result<TokenId> {
        self.ctx.ensure_alive()?;
        let scope = ErrorScope::push(&self.ctx.device);
        self.write_sample_step(session, token_mask, n, sampling)
            .await?;
        scope.pop("sampling on the GPU").await?;
        self.submit(session, tokens, Tail::Sample).await?;
        self.read_token(session, n).await
    }

    /// Checks a sampling step, writes its mask and settings, and returns its dispatch (made
    /// once per session).
    async fn write_sample_step(
        &self,
        session: &mut Session,
        token_mask: Option<&[u32]>,
        n: usize,
        sampling: &DeviceSampling,
    ) -> Result<Dispatch> {
        let ctx = &self.ctx;
        if n == 0 || n > self.config.n_vocab {
            return Err(Error::invalid_input(format!(
                "sampling over {n} tokens, but the model has {} logits",
                self.config.n_vocab
            ))
            .with_param("logits"));
        }
        if let Some(m) = token_mask {
            mask::check_mask_len(m.len(), n)?;
            check_some_allowed(m, n)?;
        }
        let b = &session.sample;
        let dispatch = match &session.sample_dispatch {
            Some(d) => d.clone(),
            None => {
                let s = &session.scratch;
                let bindings = [
                    &s.logits, &b.mask, &b.keys, &b.weights, &b.params, &b.result,
                ];
                let d = ctx.prepare(SAMPLE, &bindings, (1, 1, 1)).await?;
                session.sample_dispatch = Some(d.clone());
                d
            }
        };
        let b = &session.sample;
        if let Some(m) = token_mask {
            ctx.queue.write_buffer(&b.mask, 0, bytemuck::cast_slice(m));
        }
        let params = sample_params(n, token_mask.is_some(), sampling);
        ctx.queue
            .write_buffer(&b.params, 0, bytemuck::cast_slice(&params));
        Ok(dispatch)
    }

    /// Reads back the sampled token's 4 bytes.
    async fn read_token(&self, session: &mut Session, n: usize) -> Result<TokenId> {
        let bytes = self.ctx.read_buffer(&session.sample.readback).await?;
        session.counters.bytes_read_back += bytes.len() as u64;
        token_of(
            u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            n,
        )
    }

    /// Checks `tokens` and submits their chunks, the last one ending as `tail` says.
    async fn submit(&self, session: &mut Session, tokens: &[TokenId], tail: Tail) -> Result<()> {
        // Before any buffer is made: wgpu panics on buffers of a lost device.
        self.ctx.ensure_alive()?;
        let c = &self.config;
        if tokens.is_empty() {
            return Err(
                Error::invalid_input("forward needs at least one token").with_param("prompt")
            );
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(Error::invalid_input(format!(
                "token id {bad} is outside the vocabulary of {}",
                c.n_vocab
            ))
            .with_param("prompt"));
        }
        if session.pos + tokens.len() > session.capacity {
            return Err(Error::limit_exceeded(format!(
                "{} positions are needed but the session holds {}",
                session.pos + tokens.len(),
                session.capacity
            ))
            .with_param("max_tokens"));
        }
        let scope = ErrorScope::push(&self.ctx.device);
        let chunks: Vec<&[TokenId]> = tokens.chunks(session.chunk).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let tail = if last { Some(tail) } else { None };
            self.run_chunk(session, chunk, tail).await?;
        }
        scope.pop("running the forward pass").await
    }

    /// The index in `session.plans` of the plan for chunks of `t` tokens, built if missing.
    async fn plan_for(&self, session: &mut Session, t: usize) -> Result<usize> {
        if let Some(i) = session.plans.iter().position(|p| p.tokens == t) {
            return Ok(i);
        }
        let plan = self.build_plan(session, t).await?;
        session.counters.plans_built += 1;
        if session.plans.len() >= MAX_PLANS {
            // Keep decode (1) and full chunks: drop the oldest other length.
            let odd = session
                .plans
                .iter()
                .position(|p| p.tokens != 1 && p.tokens != session.chunk)
                .unwrap_or(0);
            session.plans.remove(odd);
        }
        session.plans.push(plan);
        Ok(session.plans.len() - 1)
    }

    /// `x += proj` over a chunk of `t` tokens, proj first normalised by `post_norm` (Gemma 3's
    /// post-attention and post-FFN norms) into h, which is free at both places.
    async fn record_residual(
        &self,
        e: &mut Vec<Dispatch>,
        s: &Scratch,
        post_norm: Option<&wgpu::Buffer>,
        t: usize,
    ) -> Result<()> {
        let (ctx, c) = (&self.ctx, &self.config);
        let d = c.n_embd;
        let out = match post_norm {
            Some(norm) => {
                ctx.record_rms_norm(e, (&s.proj, norm, &s.h), d, t, c.rms_eps)
                    .await?;
                &s.h
            }
            None => &s.proj,
        };
        ctx.record_add(e, &s.x, out, t * d, t * d).await
    }

    /// Prepares every dispatch of a chunk of `t` tokens over this session's buffers.
    async fn build_plan(&self, session: &Session, t: usize) -> Result<Plan> {
        let ctx = &self.ctx;
        let c = &self.config;
        let s = &session.scratch;
        let d = c.n_embd;
        let shape = AttentionShape {
            heads: c.n_head,
            kv_heads: c.n_head_kv,
            head_dim: c.head_dim,
            pos0: 0,
            tokens: t,
            capacity: session.capacity,
            window: 0,
        };
        let attention_uniform = ctx.params_buffer("attention.params", &attention_params(shape));
        // The sliding-window layers' uniform: the same but for the window.
        let window_uniform = c.sliding_window.map(|window| {
            let shape = AttentionShape { window, ..shape };
            ctx.params_buffer("attention.params.window", &attention_params(shape))
        });
        let mut embedding = Vec::new();
        let scale = match c.arch {
            model::Arch::Gemma3 => (d as f32).sqrt(),
            _ => 1.0,
        };
        ctx.record_embedding(&mut embedding, &self.tok_embd, &s.ids, &s.x, t, scale)
            .await?;
        let (heads, hd, rd) = (c.n_head, c.head_dim, c.rope_dim);
        let mut layers = Vec::with_capacity(self.layers.len());
        for (li, l) in self.layers.iter().enumerate() {
            let mut e = Vec::new();
            ctx.record_rms_norm(&mut e, (&s.x, &l.attn_norm, &s.h), d, t, c.rms_eps)
                .await?;
            // Qwen3 projects into the raw buffers and normalises each head into q and k.
            let (q, k) = match l.qk_norm {
                Some(_) => (&s.q_raw, &s.k_raw),
                None => (&s.q, &s.k),
            };
            ctx.record_matvec(&mut e, &l.wq, &s.h, q, t).await?;
            ctx.record_matvec(&mut e, &l.wk, &s.h, k, t).await?;
            ctx.record_matvec(&mut e, &l.wv, &s.h, &s.v, t).await?;
            if let Some([bq, bk, bv]) = &l.qkv_bias {
                let (qd, kv) = (c.q_dim(), c.kv_dim());
                ctx.record_add(&mut e, q, bq, t * qd, qd).await?;
                ctx.record_add(&mut e, k, bk, t * kv, kv).await?;
                ctx.record_add(&mut e, &s.v, bv, t * kv, kv).await?;
            }
            if let Some([q_norm, k_norm]) = &l.qk_norm {
                let eps = c.rms_eps;
                ctx.record_rms_norm(&mut e, (q, q_norm, &s.q), hd, t * heads, eps)
                    .await?;
                ctx.record_rms_norm(&mut e, (k, k_norm, &s.k), hd, t * c.n_head_kv, eps)
                    .await?;
            }
            let (cos, sin, uniform) = match &window_uniform {
                Some(w) if c.is_sliding(li) => (&s.cos_local, &s.sin_local, w),
                _ => (&s.cos, &s.sin, &attention_uniform),
            };
            let halves = c.arch.rope_halves();
            ctx.record_rope(&mut e, (&s.q, cos, sin), heads, hd, rd, t, halves)
                .await?;
            ctx.record_rope(&mut e, (&s.k, cos, sin), c.n_head_kv, hd, rd, t, halves)
                .await?;
            let caches = (&session.k_cache[li], &session.v_cache[li]);
            let stored = (&s.k, &s.v, caches.0, caches.1);
            ctx.record_kv_store(&mut e, stored, &attention_uniform, shape)
                .await?;
            let buffers = (&s.q, caches.0, caches.1, &s.scores, &s.att);
            ctx.record_attention_with(&mut e, buffers, uniform, shape)
                .await?;
            ctx.record_matvec(&mut e, &l.wo, &s.att, &s.proj, t).await?;
            let after_attention = l.post_norms.as_ref().map(|[a, _]| a);
            self.record_residual(&mut e, s, after_attention, t).await?;
            ctx.record_rms_norm(&mut e, (&s.x, &l.ffn_norm, &s.h), d, t, c.rms_eps)
                .await?;
            ctx.record_matvec(&mut e, &l.w_gate, &s.h, &s.gate, t)
                .await?;
            ctx.record_matvec(&mut e, &l.w_up, &s.h, &s.up, t).await?;
            let gelu = c.arch == model::Arch::Gemma3;
            ctx.record_silu_mul(&mut e, &s.gate, &s.up, t * c.n_ff, gelu)
                .await?;
            ctx.record_matvec(&mut e, &l.w_down, &s.gate, &s.proj, t)
                .await?;
            let after_ffn = l.post_norms.as_ref().map(|[_, f]| f);
            self.record_residual(&mut e, s, after_ffn, t).await?;
            layers.push(e);
        }
        let mut head = Vec::new();
        ctx.record_rms_norm(
            &mut head,
            (&s.last, &self.output_norm, &s.normed),
            d,
            1,
            c.rms_eps,
        )
        .await?;
        let output = self.output.as_ref().unwrap_or(&self.tok_embd);
        ctx.record_matvec(&mut head, output, &s.normed, &s.logits, 1)
            .await?;
        Ok(Plan {
            tokens: t,
            embedding,
            layers,
            head,
            attention_params: attention_uniform,
            window_params: window_uniform,
        })
    }

    /// Records and submits one chunk from its plan; the last one (with a `tail`) also
    /// computes the logits and ends as `tail` says.
    async fn run_chunk(
        &self,
        session: &mut Session,
        tokens: &[TokenId],
        tail: Option<Tail>,
    ) -> Result<()> {
        let ctx = &self.ctx;
        let c = &self.config;
        let t = tokens.len();
        let d = c.n_embd;
        let pos0 = session.pos;
        let factors = c.rope_factors(session.capacity);
        let (cos, sin) = model::rope_table(c, c.rope_base, factors, pos0, t);
        let plan_index = self.plan_for(session, t).await?;
        let s = &session.scratch;
        let plan = &session.plans[plan_index];
        ctx.queue
            .write_buffer(&s.ids, 0, bytemuck::cast_slice(tokens));
        ctx.queue
            .write_buffer(&s.cos, 0, bytemuck::cast_slice(&cos));
        ctx.queue
            .write_buffer(&s.sin, 0, bytemuck::cast_slice(&sin));
        if c.sliding_window.is_some() {
            let (cos, sin) = model::rope_table(c, c.rope_base_local, factors, pos0, t);
            ctx.queue
                .write_buffer(&s.cos_local, 0, bytemuck::cast_slice(&cos));
            ctx.queue
                .write_buffer(&s.sin_local, 0, bytemuck::cast_slice(&sin));
        }
        let shape = AttentionShape {
            heads: c.n_head,
            kv_heads: c.n_head_kv,
            head_dim: c.head_dim,
            pos0,
            tokens: t,
            capacity: session.capacity,
            window: 0,
        };
        ctx.queue.write_buffer(
            &plan.attention_params,
            0,
            bytemuck::cast_slice(&attention_params(shape)),
        );
        if let (Some(uniform), Some(window)) = (&plan.window_params, c.sliding_window) {
            let shape = AttentionShape { window, ..shape };
            ctx.queue
                .write_buffer(uniform, 0, bytemuck::cast_slice(&attention_params(shape)));
        }

        let mut e = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("forward"),
            });
        let mut dispatches = plan.embedding.len();
        let mut pass = e.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("forward"),
            timestamp_writes: None,
        });
        plan.embedding.iter().for_each(|d| d.encode(&mut pass));
        for layer in &plan.layers {
            layer.iter().for_each(|d| d.encode(&mut pass));
            dispatches += layer.len();
        }
        drop(pass);
        if let Some(tail) = tail {
            let row_bytes = (d * 4) as u64;
            e.copy_buffer_to_buffer(&s.x, (t as u64 - 1) * row_bytes, &s.last, 0, row_bytes);
            let mut pass = e.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("head"),
                timestamp_writes: None,
            });
            plan.head.iter().for_each(|d| d.encode(&mut pass));
            drop(pass);
            dispatches += plan.head.len();
            match tail {
                Tail::Logits => {
                    e.copy_buffer_to_buffer(&s.logits, 0, &s.readback, 0, s.logits.size())
                }
                Tail::Keep => {}
                Tail::Sample => {
                    let dispatch = session
                        .sample_dispatch
                        .as_ref()
                        .ok_or_else(|| Error::gpu("the sampling dispatch was not prepared"))?;
                    encode_sample(&mut e, dispatch, &session.sample);
                    dispatches += 1;
                }
            }
        }
        ctx.submit(e.finish())?;
        session.counters.dispatches += dispatches as u64;
        session.counters.submissions += 1;
        session.counters.tokens += t as u64;
        session.pos += t;
        session.tokens.extend_from_slice(tokens);
        Ok(())
    }
}
