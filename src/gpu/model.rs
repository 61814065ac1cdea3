//! The Llama forward pass on the GPU: the same computation as [`crate::model::Model`], one
//! kernel per step of it, with the weights uploaded once and the KV cache kept on the GPU.
//!
//! A call to [`Model::forward`] records every layer of a chunk of up to [`MAX_CHUNK`] tokens
//! into one command encoder and submits it once; per layer that is 12 dispatches and two
//! buffer copies (K and V into the cache), so SmolLM2-135M (30 layers) takes ~365 dispatches
//! per decode step.

use std::sync::Arc;

use super::ops::AttentionShape;
use super::{Context, ErrorScope, Matrix};
use crate::error::{Error, Result};
use crate::model::{self, Config};
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

/// Per-sequence GPU state: the KV cache, the scratch buffers and the position.
#[derive(Debug)]
pub struct Session {
    capacity: usize,
    pos: usize,
    tokens: Vec<TokenId>,
    k_cache: Vec<wgpu::Buffer>,
    v_cache: Vec<wgpu::Buffer>,
    scratch: Scratch,
}

#[derive(Debug)]
struct Scratch {
    ids: wgpu::Buffer,
    cos: wgpu::Buffer,
    sin: wgpu::Buffer,
    x: wgpu::Buffer,
    h: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
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
}

impl Model {
    /// Checks, before any buffer is made, that every weight matrix has a kernel and fits one
    /// storage binding of this adapter (`maxStorageBufferBindingSize` and `maxBufferSize`):
    /// a model too large for the GPU is refused whole, naming the first matrix that does not
    /// fit, rather than half-uploaded.
    pub fn check_fits<B: AsRef<[u8]>>(ctx: &Context, cpu: &model::Model<B>) -> Result<()> {
        let mut matrices = vec![&cpu.tok_embd, &cpu.output];
        for l in &cpu.layers {
            matrices.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        }
        for m in matrices {
            let bytes = super::matvec::gpu_bytes(m.ty, m.rows, m.cols).map_err(|e| {
                Error::invalid_input(format!(
                    "the model cannot run on the GPU: tensor `{}`: {}",
                    m.name,
                    e.message()
                ))
                .with_param("model")
            })?;
            if bytes > ctx.max_binding_bytes {
                return Err(Error::limit_exceeded(format!(
                    "the model is too large for this GPU adapter: tensor `{}` ({}x{} {}) needs \
                     {bytes} bytes in one buffer, over the adapter's limit of {} bytes \
                     (maxStorageBufferBindingSize / maxBufferSize)",
                    m.name,
                    m.rows,
                    m.cols,
                    m.ty.name(),
                    ctx.max_binding_bytes
                ))
                .with_param("model"));
            }
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

    /// A session whose KV cache holds `context` positions (at most the model's context).
    pub fn session(&self, context: usize) -> Result<Session> {
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
        let cache_bytes = (context * kv * 4) as u64;
        ctx.check_binding_size("a layer's KV cache", "max_tokens", cache_bytes)?;
        let zeros = |label: &str, floats: usize| {
            let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
            ctx.storage_buffer(label, &vec![0; floats * 4], usage)
        };
        let cache = |what: &str| -> Vec<wgpu::Buffer> {
            (0..c.n_layer)
                .map(|i| zeros(&format!("blk.{i}.{what}_cache"), context * kv))
                .collect()
        };
        let t = MAX_CHUNK;
        let d = c.n_embd;
        let scratch = Scratch {
            ids: zeros("ids", t),
            cos: zeros("rope.cos", t * c.rope_dim / 2),
            sin: zeros("rope.sin", t * c.rope_dim / 2),
            x: zeros("x", t * d),
            h: zeros("h", t * d),
            q: zeros("q", t * d),
            k: zeros("k", t * kv),
            v: zeros("v", t * kv),
            att: zeros("att", t * d),
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
            pos: 0,
            tokens: Vec::new(),
            k_cache: cache("k"),
            v_cache: cache("v"),
            scratch,
        })
    }

    /// Evaluates `tokens` after what the session holds and returns the logits of the last
    /// one (prefill when many, one decode step when one).
    pub async fn forward(&self, session: &mut Session, tokens: &[TokenId]) -> Result<Vec<f32>> {
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
        let chunks: Vec<&[TokenId]> = tokens.chunks(MAX_CHUNK).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            self.run_chunk(session, chunk, i + 1 == chunks.len())
                .await?;
        }
        scope.pop("running the forward pass").await?;
        let bytes = self.ctx.read_buffer(&session.scratch.readback).await?;
        Ok(bytemuck::cast_slice(&bytes).to_vec())
    }

    /// Records and submits one chunk; the last one also computes and copies out the logits.
    async fn run_chunk(&self, session: &mut Session, tokens: &[TokenId], last: bool) -> Result<()> {
        let ctx = &self.ctx;
        let c = &self.config;
        let s = &session.scratch;
        let t = tokens.len();
        let (d, kv) = (c.n_embd, c.kv_dim());
        let pos0 = session.pos;
        let (cos, sin) = model::rope_table(c, pos0, t);
        ctx.queue
            .write_buffer(&s.ids, 0, bytemuck::cast_slice(tokens));
        ctx.queue
            .write_buffer(&s.cos, 0, bytemuck::cast_slice(&cos));
        ctx.queue
            .write_buffer(&s.sin, 0, bytemuck::cast_slice(&sin));

        let mut e = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("forward"),
            });
        ctx.record_embedding(&mut e, &self.tok_embd, &s.ids, &s.x, t)
            .await?;
        let shape = AttentionShape {
            heads: c.n_head,
            kv_heads: c.n_head_kv,
            head_dim: c.head_dim,
            pos0,
            tokens: t,
            capacity: session.capacity,
        };
        let kv_offset = (pos0 * kv * 4) as u64;
        let kv_bytes = (t * kv * 4) as u64;
        for (li, l) in self.layers.iter().enumerate() {
            ctx.record_rms_norm(&mut e, (&s.x, &l.attn_norm, &s.h), d, t, c.rms_eps)
                .await?;
            ctx.record_matvec(&mut e, &l.wq, &s.h, &s.q, t).await?;
            ctx.record_matvec(&mut e, &l.wk, &s.h, &s.k, t).await?;
            ctx.record_matvec(&mut e, &l.wv, &s.h, &s.v, t).await?;
            let (heads, hd, rd) = (c.n_head, c.head_dim, c.rope_dim);
            ctx.record_rope(&mut e, (&s.q, &s.cos, &s.sin), heads, hd, rd, t)
                .await?;
            ctx.record_rope(&mut e, (&s.k, &s.cos, &s.sin), c.n_head_kv, hd, rd, t)
                .await?;
            e.copy_buffer_to_buffer(&s.k, 0, &session.k_cache[li], kv_offset, kv_bytes);
            e.copy_buffer_to_buffer(&s.v, 0, &session.v_cache[li], kv_offset, kv_bytes);
            let kv_pair = (&session.k_cache[li], &session.v_cache[li]);
            let buffers = (&s.q, kv_pair.0, kv_pair.1, &s.scores, &s.att);
            ctx.record_attention(&mut e, buffers, shape).await?;
            ctx.record_matvec(&mut e, &l.wo, &s.att, &s.proj, t).await?;
            ctx.record_add(&mut e, &s.x, &s.proj, t * d).await?;
            ctx.record_rms_norm(&mut e, (&s.x, &l.ffn_norm, &s.h), d, t, c.rms_eps)
                .await?;
            ctx.record_matvec(&mut e, &l.w_gate, &s.h, &s.gate, t)
                .await?;
            ctx.record_matvec(&mut e, &l.w_up, &s.h, &s.up, t).await?;
            ctx.record_silu_mul(&mut e, &s.gate, &s.up, t * c.n_ff)
                .await?;
            ctx.record_matvec(&mut e, &l.w_down, &s.gate, &s.proj, t)
                .await?;
            ctx.record_add(&mut e, &s.x, &s.proj, t * d).await?;
        }
        if last {
            let row_bytes = (d * 4) as u64;
            e.copy_buffer_to_buffer(&s.x, (t as u64 - 1) * row_bytes, &s.last, 0, row_bytes);
            ctx.record_rms_norm(
                &mut e,
                (&s.last, &self.output_norm, &s.normed),
                d,
                1,
                c.rms_eps,
            )
            .await?;
            let output = self.output.as_ref().unwrap_or(&self.tok_embd);
            ctx.record_matvec(&mut e, output, &s.normed, &s.logits, 1)
                .await?;
            e.copy_buffer_to_buffer(&s.logits, 0, &s.readback, 0, s.logits.size());
        }
        ctx.queue.submit([e.finish()]);
        session.pos += t;
        session.tokens.extend_from_slice(tokens);
        Ok(())
    }
}
