//! The CPU reference forward pass of a Llama-architecture GGUF model.
//!
//! Architecture `llama` from the metadata: token embedding, then per layer RMSNorm →
//! attention (RoPE on adjacent pairs `(x[2i], x[2i+1])` with the file's base and dimension
//! count, grouped-query heads, a KV cache) → residual → RMSNorm → SwiGLU feed-forward →
//! residual; a final RMSNorm and the output matrix (or the token embedding when tied).
//!
//! Numerics: weights are dequantized exactly ([`crate::quant`]), activations and the KV cache
//! are f32, so this is the exact-f32 reference every faster path is checked against.
//! llama.cpp differs from it by design (8-bit activations in quantized dot products, f16 K/V).
//!
//! Memory: the weights stay in the caller's bytes ([`Model`] is generic over the owner, so a
//! `&[u8]` of a file or an owned `Vec<u8>` both work); only the RMSNorm vectors (n_layer × 2
//! × n_embd floats, 140 KB for SmolLM2-135M) are copied. The KV cache of a [`Session`] holds
//! the context it is asked for, not the model's maximum: 2 × n_layer × ctx × kv_dim floats
//! (SmolLM2-135M: 46 KB per position, 94 MB for 2048 positions).
//!
//! ```no_run
//! # fn main() -> poot::Result<()> {
//! let file = std::fs::read("SmolLM2-135M-Instruct.Q4_1.gguf").unwrap();
//! let model = poot::model::Model::from_gguf_bytes(&file[..])?;
//! let mut session = model.session(512)?;
//! let logits = model.forward(&mut session, &[1, 9690, 198])?; // prefill, last position's logits
//! let next = poot::sampling::argmax(&logits);
//! let logits = model.forward(&mut session, &[next])?; // one decode step
//! # let _ = logits; Ok(()) }
//! ```

mod generate;
pub mod synthetic;
mod weights;

pub use generate::{
    eval, eval_prompt_ids, eval_with, tokenize_json, Backend, CpuBackend, EvalPrompt, EvalReport,
    Finish,
};
pub use weights::Matrix;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value};
use crate::quant::{dot_f32_with, madd};
use crate::vocab::TokenId;
use multiversion::multiversion;
use multiversion::target::target_cfg_f;
use weights::{has_tensor, model_error};

/// Hyper-parameters read from the GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Dimensions rotated by RoPE per head (`rope.dimension_count`, default `head_dim`).
    pub rope_dim: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// The context length the model was trained for (`context_length`).
    pub context_length: usize,
}

impl Config {
    /// Width of a K or V row: `n_head_kv × head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Reads `llama.*` hyper-parameters; an error names the missing or bad key.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Self> {
        let arch = gguf
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| model_error("general.architecture is missing".into()))?;
        if arch != "llama" {
            return Err(model_error(format!(
                "architecture `{arch}` is not supported (llama is)"
            )));
        }
        // Bounds keep a hostile file from asking for absurd buffers before any weight is read.
        let int = |key: &str, max: u64| -> Result<usize> {
            let v = gguf
                .get(&format!("llama.{key}"))
                .ok_or_else(|| model_error(format!("llama.{key} is missing")))?;
            match v.as_u64() {
                Some(n) if n >= 1 && n <= max => Ok(n as usize),
                _ => Err(model_error(format!(
                    "llama.{key} = {v:?} is not an integer in 1..={max}"
                ))),
            }
        };
        let float = |key: &str, default: f32| -> Result<f32> {
            match gguf.get(&format!("llama.{key}")) {
                None => Ok(default),
                Some(Value::F32(f)) if f.is_finite() && *f > 0.0 => Ok(*f),
                Some(v) => Err(model_error(format!(
                    "llama.{key} = {v:?} is not a positive f32"
                ))),
            }
        };
        let n_embd = int("embedding_length", 1 << 16)?;
        let n_head = int("attention.head_count", 1 << 10)?;
        let n_head_kv = match gguf.get("llama.attention.head_count_kv") {
            None => n_head,
            Some(_) => int("attention.head_count_kv", 1 << 10)?,
        };
        if n_embd % n_head != 0 || n_head % n_head_kv != 0 {
            return Err(model_error(format!(
                "{n_head} heads do not divide the embedding width {n_embd}, or {n_head_kv} KV heads do not divide them"
            )));
        }
        let head_dim = n_embd / n_head;
        let rope_dim = match gguf.get("llama.rope.dimension_count") {
            None => head_dim,
            Some(_) => int("rope.dimension_count", head_dim as u64)?,
        };
        if rope_dim % 2 != 0 {
            return Err(model_error(format!(
                "llama.rope.dimension_count {rope_dim} is odd"
            )));
        }
        let n_vocab = match gguf.get("tokenizer.ggml.tokens").and_then(Value::as_array) {
            Some(t) => t.len(),
            None => int("vocab_size", 1 << 24)?,
        };
        Ok(Config {
            n_vocab,
            n_embd,
            n_layer: int("block_count", 1 << 10)?,
            n_head,
            n_head_kv,
            head_dim,
            n_ff: int("feed_forward_length", 1 << 18)?,
            rope_dim,
            rope_base: float("rope.freq_base", 10_000.0)?,
            rms_eps: float("attention.layer_norm_rms_epsilon", 1e-5)?,
            context_length: int("context_length", 1 << 24)?,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(crate) attn_norm: Vec<f32>,
    pub(crate) wq: Matrix,
    pub(crate) wk: Matrix,
    pub(crate) wv: Matrix,
    pub(crate) wo: Matrix,
    pub(crate) ffn_norm: Vec<f32>,
    pub(crate) w_gate: Matrix,
    pub(crate) w_up: Matrix,
    pub(crate) w_down: Matrix,
}

/// A loaded model: hyper-parameters and weight views over the file's bytes `B`.
#[derive(Debug, Clone)]
pub struct Model<B> {
    bytes: B,
    config: Config,
    pub(crate) tok_embd: Matrix,
    pub(crate) output: Matrix,
    pub(crate) output_norm: Vec<f32>,
    pub(crate) layers: Vec<Layer>,
    threads: usize,
}

/// Per-sequence state: the KV cache and the number of positions filled.
#[derive(Debug, Clone)]
pub struct Session {
    /// Per layer, `capacity × kv_dim` keys then values.
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    capacity: usize,
    pos: usize,
    tokens: Vec<TokenId>,
}

impl Session {
    /// Positions filled so far (prompt plus generated tokens).
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Whether nothing has been evaluated yet.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// The context this session was sized for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The tokens evaluated so far.
    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    /// Forgets positions from `len` on (the cache entries are overwritten later).
    pub fn truncate(&mut self, len: usize) {
        self.pos = self.pos.min(len);
        self.tokens.truncate(self.pos);
    }
}

impl<B: AsRef<[u8]>> Model<B> {
    /// Loads a model from a whole GGUF file's bytes (which it keeps, without copying the
    /// weights).
    pub fn from_gguf_bytes(bytes: B) -> Result<Self> {
        let file = bytes.as_ref();
        let gguf = Gguf::parse(file)?;
        let config = Config::from_gguf(&gguf)?;
        let len = file.len();
        let c = &config;
        let (d, kv) = (c.n_embd, c.kv_dim());
        let mat = |name: &str, rows: usize, cols: usize| Matrix::find(&gguf, len, name, rows, cols);
        let norm = |name: &str| -> Result<Vec<f32>> { Ok(mat(name, 1, d)?.to_f32(file)) };
        for bias in [
            "blk.0.attn_q.bias",
            "blk.0.attn_k.bias",
            "blk.0.attn_v.bias",
            "blk.0.attn_output.bias",
        ] {
            if has_tensor(&gguf, bias) {
                return Err(model_error(format!(
                    "tensor `{bias}`: attention biases are not supported"
                )));
            }
        }
        let tok_embd = mat("token_embd.weight", c.n_vocab, d)?;
        let output = if has_tensor(&gguf, "output.weight") {
            mat("output.weight", c.n_vocab, d)?
        } else {
            tok_embd.clone()
        };
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: norm(&p("attn_norm"))?,
                wq: mat(&p("attn_q"), d, d)?,
                wk: mat(&p("attn_k"), kv, d)?,
                wv: mat(&p("attn_v"), kv, d)?,
                wo: mat(&p("attn_output"), d, d)?,
                ffn_norm: norm(&p("ffn_norm"))?,
                w_gate: mat(&p("ffn_gate"), c.n_ff, d)?,
                w_up: mat(&p("ffn_up"), c.n_ff, d)?,
                w_down: mat(&p("ffn_down"), d, c.n_ff)?,
            });
        }
        let output_norm = norm("output_norm.weight")?;
        Ok(Model {
            bytes,
            config,
            tok_embd,
            output,
            output_norm,
            layers,
            threads: 1,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// The token embedding matrix (`n_vocab × n_embd`).
    pub fn token_embedding(&self) -> &Matrix {
        &self.tok_embd
    }

    /// Threads for the matrix products (native builds only; wasm32 always uses one).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// A session whose KV cache holds `context` positions (at most the model's context).
    pub fn session(&self, context: usize) -> Result<Session> {
        let c = &self.config;
        if context == 0 || context > c.context_length {
            return Err(Error::limit_exceeded(format!(
                "a context of {context} positions is outside 1..={} (the model's context length)",
                c.context_length
            ))
            .with_param("max_tokens"));
        }
        let per_layer = context * c.kv_dim();
        Ok(Session {
            k: (0..c.n_layer).map(|_| vec![0.0; per_layer]).collect(),
            v: (0..c.n_layer).map(|_| vec![0.0; per_layer]).collect(),
            capacity: context,
            pos: 0,
            tokens: Vec::new(),
        })
    }

    /// Evaluates `tokens` at the session's next positions (a whole prompt in one pass, or one
    /// token per decode step) and returns the logits after the last of them.
    pub fn forward(&self, session: &mut Session, tokens: &[TokenId]) -> Result<Vec<f32>> {
        let mut logits = vec![0f32; self.config.n_vocab];
        self.forward_into(session, tokens, &mut logits)?;
        Ok(logits)
    }

    /// [`Model::forward`] into a caller's buffer of `n_vocab` logits.
    pub fn forward_into(
        &self,
        session: &mut Session,
        tokens: &[TokenId],
        logits: &mut [f32],
    ) -> Result<()> {
        let c = &self.config;
        let file = self.bytes.as_ref();
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
        if logits.len() != c.n_vocab {
            return Err(Error::invalid_input(format!(
                "{} logits for a vocabulary of {}",
                logits.len(),
                c.n_vocab
            )));
        }
        let t = tokens.len();
        let (d, kv, hd) = (c.n_embd, c.kv_dim(), c.head_dim);
        let pos0 = session.pos;

        let mut x = vec![0f32; t * d];
        for (row, &tok) in x.chunks_exact_mut(d).zip(tokens) {
            self.tok_embd.dequantize_row(file, tok as usize, row);
        }
        let (cos, sin) = rope_table(c, pos0, t);
        let mut h = vec![0f32; t * d];
        let mut q = vec![0f32; t * d];
        let mut k = vec![0f32; t * kv];
        let mut v = vec![0f32; t * kv];
        let mut att = vec![0f32; t * d];
        let mut proj = vec![0f32; t * d];
        let mut gate = vec![0f32; t * c.n_ff];
        let mut up = vec![0f32; t * c.n_ff];
        let mut scores = vec![0f32; pos0 + t];
        let group = c.n_head / c.n_head_kv;
        let scale = 1.0 / (hd as f32).sqrt();

        for (li, layer) in self.layers.iter().enumerate() {
            rms_norm(&x, &layer.attn_norm, c.rms_eps, &mut h);
            self.matmul(&layer.wq, &h, t, &mut q);
            self.matmul(&layer.wk, &h, t, &mut k);
            self.matmul(&layer.wv, &h, t, &mut v);
            for i in 0..t {
                let (cs, sn) = (
                    &cos[i * c.rope_dim / 2..][..c.rope_dim / 2],
                    &sin[i * c.rope_dim / 2..][..c.rope_dim / 2],
                );
                for head in q[i * d..(i + 1) * d].chunks_exact_mut(hd) {
                    rope(head, cs, sn);
                }
                for head in k[i * kv..(i + 1) * kv].chunks_exact_mut(hd) {
                    rope(head, cs, sn);
                }
            }
            let (kc, vc) = (&mut session.k[li], &mut session.v[li]);
            kc[pos0 * kv..(pos0 + t) * kv].copy_from_slice(&k);
            vc[pos0 * kv..(pos0 + t) * kv].copy_from_slice(&v);
            for i in 0..t {
                let n_ctx = pos0 + i + 1; // causal: this token sees positions 0..=pos0+i
                for hq in 0..c.n_head {
                    let hk = hq / group;
                    let qh = &q[i * d + hq * hd..][..hd];
                    let out = &mut att[i * d + hq * hd..][..hd];
                    attend(qh, kc, vc, kv, hk * hd, scale, &mut scores[..n_ctx], out);
                }
            }
            self.matmul(&layer.wo, &att, t, &mut proj);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);

            rms_norm(&x, &layer.ffn_norm, c.rms_eps, &mut h);
            self.matmul(&layer.w_gate, &h, t, &mut gate);
            self.matmul(&layer.w_up, &h, t, &mut up);
            for (g, u) in gate.iter_mut().zip(&up) {
                *g = *g / (1.0 + (-*g).exp()) * u; // SiLU(gate) · up
            }
            self.matmul(&layer.w_down, &gate, t, &mut proj);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
        }
        let last = &x[(t - 1) * d..];
        let mut hn = vec![0f32; d];
        rms_norm(last, &self.output_norm, c.rms_eps, &mut hn);
        self.matmul(&self.output, &hn, 1, logits);
        session.pos += t;
        session.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// `out (t × rows) = xs (t × cols) · Wᵀ`, split by rows over the model's threads.
    fn matmul(&self, w: &Matrix, xs: &[f32], t: usize, out: &mut [f32]) {
        let file = self.bytes.as_ref();
        if t == 1 {
            par_rows(self.threads, w.rows, out, |rows, o| {
                w.matvec_rows(file, xs, rows, o)
            });
            return;
        }
        // Tiles of 16 inputs (37 KB of activations at width 576) stay in cache while every
        // row streams past them; each row is dequantized once per tile.
        const TILE: usize = 16;
        let mut out_t = vec![0f32; w.rows * TILE.min(t)];
        for i0 in (0..t).step_by(TILE) {
            let tt = TILE.min(t - i0);
            let tile = &xs[i0 * w.cols..(i0 + tt) * w.cols];
            let out_t = &mut out_t[..w.rows * tt];
            par_rows(self.threads, w.rows, out_t, |rows, o| {
                w.matmul_rows_t(file, tile, tt, rows, o)
            });
            for (r, col) in out_t.chunks_exact(tt).enumerate() {
                for (i, &val) in col.iter().enumerate() {
                    out[(i0 + i) * w.rows + r] = val;
                }
            }
        }
    }
}

/// Runs `f(rows, out_chunk)` over `n_rows` rows whose outputs are `out` (`n_rows × k` values,
/// `k = out.len() / n_rows`), split into `threads` contiguous parts on native targets.
fn par_rows(
    threads: usize,
    n_rows: usize,
    out: &mut [f32],
    f: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync,
) {
    #[cfg(not(target_arch = "wasm32"))]
    if threads > 1 && n_rows >= 64 {
        let per_row = out.len() / n_rows;
        let chunk = n_rows.div_ceil(threads);
        std::thread::scope(|s| {
            let f = &f;
            let mut rest = out;
            let mut start = 0;
            while start < n_rows {
                let end = (start + chunk).min(n_rows);
                let (mine, tail) = rest.split_at_mut((end - start) * per_row);
                rest = tail;
                if end == n_rows {
                    f(start..end, mine); // the last part on this thread
                } else {
                    s.spawn(move || f(start..end, mine));
                }
                start = end;
            }
        });
        return;
    }
    let _ = threads;
    f(0..n_rows, out);
}

/// One attention head for one query: `scores[p] = q · k_p · scale` for the `scores.len()`
/// positions (key `p` at `k[p·stride + off..][..q.len()]`, values likewise in `v`), softmax,
/// then `out = Σ_p scores[p] · v_p`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    if target_cfg_f!(target_feature = "fma") {
        attend_body::<true>(q, k, v, stride, off, scale, scores, out)
    } else {
        attend_body::<false>(q, k, v, stride, off, scale, scores, out)
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_body<const FMA: bool>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = q.len();
    for (p, s) in scores.iter_mut().enumerate() {
        *s = dot_f32_with::<FMA>(q, &k[p * stride + off..][..hd]) * scale;
    }
    softmax(scores);
    out.fill(0.0);
    for (p, &w) in scores.iter().enumerate() {
        for (o, &vv) in out.iter_mut().zip(&v[p * stride + off..][..hd]) {
            *o = madd::<FMA>(w, vv, *o);
        }
    }
}

/// `out = x / sqrt(mean(x²) + eps) · w`, row by row (`w.len()` values per row); the mean of
/// squares is summed in f64, as ggml does.
pub(crate) fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let ss: f64 = xr.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let scale = 1.0 / ((ss / d as f64) as f32 + eps).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * g;
        }
    }
}

pub(crate) fn softmax(s: &mut [f32]) {
    let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in s.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    s.iter_mut().for_each(|v| *v *= inv);
}

/// cos and sin of `pos · base^(−2i/rope_dim)` for the `t` positions from `pos0`, computed in
/// f64 (`t × rope_dim/2` each).
pub(crate) fn rope_table(c: &Config, pos0: usize, t: usize) -> (Vec<f32>, Vec<f32>) {
    let half = c.rope_dim / 2;
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for p in pos0..pos0 + t {
        for i in 0..half {
            let inv_freq = f64::from(c.rope_base).powf(-2.0 * i as f64 / c.rope_dim as f64);
            let angle = p as f64 * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// Rotates adjacent pairs `(x[2i], x[2i+1])` of one head by the angles' cos/sin (ggml's
/// "normal" RoPE mode, which llama-architecture GGUFs use). Dimensions past `2·cos.len()` are
/// left as they are.
pub(crate) fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (pair, (&c, &s)) in x.chunks_exact_mut(2).zip(cos.iter().zip(sin)) {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * c - b * s;
        pair[1] = a * s + b * c;
    }
}

#[cfg(test)]
mod tests;
