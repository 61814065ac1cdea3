//! The CPU reference forward pass of a Llama-family GGUF model ([`Arch`]: `llama`, `qwen2`,
//! `qwen3`).
//!
//! Token embedding, then per layer RMSNorm → attention (Q, K, V projections, Qwen2's biases
//! on them, Qwen3's RMSNorm over each Q and K head, RoPE with the file's base and dimension
//! count, on adjacent pairs for `llama` and on the two halves of a head for the Qwens,
//! grouped-query heads, a KV cache) → residual → RMSNorm → SwiGLU feed-forward → residual; a
//! final RMSNorm and the output matrix (or the token embedding when tied). Each family is
//! checked against llama.cpp on a tiny random model (tests/model_families.rs).
//!
//! Numerics: weights are dequantized exactly ([`crate::quant`]), activations and the KV cache
//! are f32. With [`Model::set_exact`] every product is so: the exact-f32 reference every
//! faster path (the GPU's included) is checked against. By default on x86-64 a decode step
//! (one token) rounds the input of each product with quantized weights to 8 bits per 32
//! elements and takes integer dot products, as llama.cpp does (`quant/int8.rs`: 2–3× faster
//! on one core; top-10 log-probabilities within 1 nat of the exact path, median 0.07,
//! tests/activation_rounding.rs). Prompt passes stay exact. llama.cpp also keeps K/V in f16:
//! a session may round its cache to f16 too ([`KvPrecision::F16`]), the twin of the GPU
//! path's cache on a `shader-f16` device.
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
    eval, eval_prompt_ids, eval_with, tokenize_json, Backend, CpuBackend, DeviceStep, EvalPrompt,
    EvalReport, Finish, StepSource,
};
pub use weights::Matrix;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value};
use crate::quant::{self, dot_f32_with, madd};
use crate::vocab::TokenId;
use multiversion::multiversion;
use multiversion::target::target_cfg_f;
use std::ops::Range;
use weights::{has_tensor, model_error};

/// The model families the forward pass runs, as `general.architecture` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// SmolLM2, Llama 2/3 style: RoPE on adjacent pairs (the converter permuted Q and K).
    Llama,
    /// Qwen2 and Qwen2.5: biases on Q, K and V; RoPE on the two halves of a head.
    Qwen2,
    /// Qwen3: RMSNorm over each Q and K head before RoPE (QK-norm), no biases; RoPE on halves.
    Qwen3,
    /// Gemma 3: the embedding scaled by √n_embd, QK-norm, RMSNorm after attention and after
    /// the feed-forward too, a GELU (tanh) gate, and five sliding-window layers (RoPE base
    /// 10,000) to every global one (the file's base); RoPE on halves.
    Gemma3,
    /// Phi-3 and 3.5: fused Q/K/V and gate/up tensors; RoPE on halves, with the long-context
    /// factors (`rope_factors_long`/`_short`) and their attention factor.
    Phi3,
}

impl Arch {
    /// The metadata prefix (`qwen2.embedding_length`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
        }
    }

    /// Whether RoPE rotates `(x[i], x[i + rope_dim/2])` (ggml's NEOX mode, as llama.cpp
    /// runs these families) rather than adjacent pairs.
    pub fn rope_halves(self) -> bool {
        !matches!(self, Arch::Llama)
    }
}

/// Hyper-parameters read from the GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
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
    /// Gemma 3: the positions a sliding-window layer's query sees, itself included
    /// (`attention.sliding_window`).
    pub sliding_window: Option<usize>,
    /// The RoPE base of the sliding-window layers.
    pub rope_base_local: f32,
    /// Per rotated pair, what its frequency is divided by: Llama 3.1's `rope_freqs` (at any
    /// context), or Phi-3's long or short factors (see [`Config::rope_factors`]).
    pub rope_freqs: Option<Vec<f32>>,
    pub rope_factors_long: Option<Vec<f32>>,
    pub rope_factors_short: Option<Vec<f32>>,
    /// Phi-3: the context its short factors are for (`rope.scaling.original_context_length`).
    pub rope_original_context: usize,
    /// Phi-3: what cos and sin are multiplied by (`rope.scaling.attn_factor`; 1 otherwise).
    pub rope_attn_factor: f32,
    /// Gemma: logits become `c · tanh(logits / c)` (`final_logit_softcapping`).
    pub final_logit_softcap: Option<f32>,
}

impl Config {
    /// Width of a K or V row: `n_head_kv × head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of a Q row and of the attention output: `n_head × head_dim` (Qwen3's heads are
    /// wider than `n_embd / n_head`: 16 × 128 = 2048 over 1024 in Qwen3-0.6B).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// The frequency factors of a session of `context` positions: Phi-3's long ones past its
    /// original context, else its short ones (llama.cpp decides by its context size, the
    /// same way, not by the sequence's length), or Llama 3.1's at any context.
    pub fn rope_factors(&self, context: usize) -> Option<&[f32]> {
        match (&self.rope_factors_long, &self.rope_factors_short) {
            (Some(long), _) if context > self.rope_original_context => Some(long),
            (_, Some(short)) => Some(short),
            _ => self.rope_freqs.as_deref(),
        }
    }

    /// Whether layer `layer` attends over a sliding window (Gemma 3: all but every sixth,
    /// as llama.cpp reads these files) rather than the whole context.
    pub fn is_sliding(&self, layer: usize) -> bool {
        self.sliding_window.is_some() && layer % 6 != 5
    }

    /// Reads `{arch}.*` hyper-parameters; an error names the missing or bad key.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Self> {
        let name = gguf
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| model_error("general.architecture is missing".into()))?;
        let arch = [
            Arch::Llama,
            Arch::Qwen2,
            Arch::Qwen3,
            Arch::Gemma3,
            Arch::Phi3,
        ]
        .into_iter()
        .find(|a| a.name() == name)
        .ok_or_else(|| {
            model_error(format!(
                "architecture `{name}` is not supported (llama, qwen2, qwen3, gemma3 and phi3 are)"
            ))
        })?;
        let key = |k: &str| format!("{name}.{k}");
        // Bounds keep a hostile file from asking for absurd buffers before any weight is read.
        let int = |k: &str, max: u64| -> Result<usize> {
            let v = gguf
                .get(&key(k))
                .ok_or_else(|| model_error(format!("{} is missing", key(k))))?;
            match v.as_u64() {
                Some(n) if n >= 1 && n <= max => Ok(n as usize),
                _ => Err(model_error(format!(
                    "{} = {v:?} is not an integer in 1..={max}",
                    key(k)
                ))),
            }
        };
        let float = |k: &str, default: f32| -> Result<f32> {
            match gguf.get(&key(k)) {
                None => Ok(default),
                Some(Value::F32(f)) if f.is_finite() && *f > 0.0 => Ok(*f),
                Some(v) => Err(model_error(format!(
                    "{} = {v:?} is not a positive f32",
                    key(k)
                ))),
            }
        };
        let n_embd = int("embedding_length", 1 << 16)?;
        let n_head = int("attention.head_count", 1 << 10)?;
        let n_head_kv = match gguf.get(&key("attention.head_count_kv")) {
            None => n_head,
            Some(_) => int("attention.head_count_kv", 1 << 10)?,
        };
        if n_head % n_head_kv != 0 {
            return Err(model_error(format!(
                "{n_head_kv} KV heads do not divide the {n_head} heads"
            )));
        }
        let head_dim = match gguf.get(&key("attention.key_length")) {
            Some(_) => {
                let k = int("attention.key_length", 1 << 12)?;
                let v = match gguf.get(&key("attention.value_length")) {
                    None => k,
                    Some(_) => int("attention.value_length", 1 << 12)?,
                };
                if v != k {
                    return Err(model_error(format!(
                        "{} {k} differs from {} {v}: heads of two widths are not supported",
                        key("attention.key_length"),
                        key("attention.value_length")
                    )));
                }
                k
            }
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(model_error(format!(
                    "{n_head} heads do not divide the embedding width {n_embd}"
                )))
            }
        };
        let rope_dim = match gguf.get(&key("rope.dimension_count")) {
            None => head_dim,
            Some(_) => int("rope.dimension_count", head_dim as u64)?,
        };
        if rope_dim % 2 != 0 {
            return Err(model_error(format!(
                "{} {rope_dim} is odd",
                key("rope.dimension_count")
            )));
        }
        let n_vocab = match gguf.get("tokenizer.ggml.tokens").and_then(Value::as_array) {
            Some(t) => t.len(),
            None => int("vocab_size", 1 << 24)?,
        };
        Ok(Config {
            arch,
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
            sliding_window: match arch {
                Arch::Gemma3 => Some(int("attention.sliding_window", 1 << 24)?),
                _ => None,
            },
            // llama.cpp's fixed base for Gemma 3's local layers, unless the file names one.
            rope_base_local: float("rope.freq_base_swa", 10_000.0)?,
            // The factor tensors are read with the weights (Model::from_gguf_bytes).
            rope_freqs: None,
            rope_factors_long: None,
            rope_factors_short: None,
            rope_original_context: match gguf.get(&key("rope.scaling.original_context_length")) {
                None => usize::MAX,
                Some(_) => int("rope.scaling.original_context_length", 1 << 24)?,
            },
            rope_attn_factor: float("rope.scaling.attn_factor", 1.0)?,
            final_logit_softcap: match gguf.get(&key("final_logit_softcapping")) {
                None => None,
                Some(_) => Some(float("final_logit_softcapping", 1.0)?),
            },
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
    /// Qwen2's biases on Q, K and V.
    pub(crate) qkv_bias: Option<[Vec<f32>; 3]>,
    /// Qwen3's and Gemma 3's RMSNorm weights over each Q and K head (`head_dim` each).
    pub(crate) qk_norm: Option<[Vec<f32>; 2]>,
    /// Gemma 3's RMSNorm weights after attention and after the feed-forward (`n_embd` each).
    pub(crate) post_norms: Option<[Vec<f32>; 2]>,
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
    exact: bool,
}

/// How a session's KV cache holds keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvPrecision {
    /// As computed: the CPU path's cache.
    #[default]
    F32,
    /// Rounded to the nearest f16, as the GPU path stores them on a device with
    /// `shader-f16` (`shaders/kv_store.wgsl`): on the CPU, that cache's numerical twin.
    F16,
}

impl KvPrecision {
    /// `x` as a cache of this precision holds it.
    pub fn round(self, x: f32) -> f32 {
        match self {
            KvPrecision::F32 => x,
            KvPrecision::F16 => quant::f16_to_f32(quant::f32_to_f16(x)),
        }
    }

    /// Bytes of one value in this precision's own type: what the GPU cache stores (the CPU
    /// one keeps f32 either way).
    pub fn bytes(self) -> usize {
        match self {
            KvPrecision::F32 => 4,
            KvPrecision::F16 => 2,
        }
    }
}

/// Per-sequence state: the KV cache and the number of positions filled.
#[derive(Debug, Clone)]
pub struct Session {
    /// Per layer, `capacity × kv_dim` keys then values.
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    precision: KvPrecision,
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

    /// How its KV cache holds keys and values.
    pub fn kv_precision(&self) -> KvPrecision {
        self.precision
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
        let mut config = Config::from_gguf(&gguf)?;
        let len = file.len();
        let half = config.rope_dim / 2;
        let factors = |name: &str| -> Result<Option<Vec<f32>>> {
            if !has_tensor(&gguf, name) {
                return Ok(None);
            }
            let v = Matrix::find(&gguf, len, name, 1, half)?.to_f32(file);
            match v.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                Some(bad) => Err(model_error(format!(
                    "tensor `{name}` holds {bad}, not a positive factor"
                ))),
                None => Ok(Some(v)),
            }
        };
        config.rope_freqs = factors("rope_freqs.weight")?;
        config.rope_factors_long = factors("rope_factors_long.weight")?;
        config.rope_factors_short = factors("rope_factors_short.weight")?;
        let config = config;
        let c = &config;
        let (d, kv, qd) = (c.n_embd, c.kv_dim(), c.q_dim());
        let mat = |name: &str, rows: usize, cols: usize| Matrix::find(&gguf, len, name, rows, cols);
        let vector =
            |name: &str, n: usize| -> Result<Vec<f32>> { Ok(mat(name, 1, n)?.to_f32(file)) };
        let norm = |name: &str| vector(name, d);
        // Tensors the family does not have would be silently skipped: refuse them instead.
        let mut unused = vec!["blk.0.attn_output.bias"];
        if c.arch != Arch::Qwen2 {
            unused.extend([
                "blk.0.attn_q.bias",
                "blk.0.attn_k.bias",
                "blk.0.attn_v.bias",
            ]);
        }
        if !matches!(c.arch, Arch::Qwen3 | Arch::Gemma3) {
            unused.extend(["blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"]);
        }
        if c.arch != Arch::Gemma3 {
            unused.extend([
                "blk.0.post_attention_norm.weight",
                "blk.0.post_ffw_norm.weight",
            ]);
        }
        for name in unused {
            if has_tensor(&gguf, name) {
                return Err(model_error(format!(
                    "tensor `{name}` is not part of a `{}` model",
                    c.arch.name()
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
            let b = |s: &str| format!("blk.{i}.{s}.bias");
            let [wq, wk, wv] = if c.arch == Arch::Phi3 {
                let qkv = mat(&p("attn_qkv"), qd + 2 * kv, d)?;
                [
                    qkv.row_range(0..qd, &p("attn_qkv[q]")),
                    qkv.row_range(qd..qd + kv, &p("attn_qkv[k]")),
                    qkv.row_range(qd + kv..qd + 2 * kv, &p("attn_qkv[v]")),
                ]
            } else {
                [
                    mat(&p("attn_q"), qd, d)?,
                    mat(&p("attn_k"), kv, d)?,
                    mat(&p("attn_v"), kv, d)?,
                ]
            };
            // Phi-3's up tensor holds the gate's rows first, then the up's.
            let [w_gate, w_up] = if c.arch == Arch::Phi3 {
                let gate_up = mat(&p("ffn_up"), 2 * c.n_ff, d)?;
                [
                    gate_up.row_range(0..c.n_ff, &p("ffn_up[gate]")),
                    gate_up.row_range(c.n_ff..2 * c.n_ff, &p("ffn_up[up]")),
                ]
            } else {
                [
                    mat(&p("ffn_gate"), c.n_ff, d)?,
                    mat(&p("ffn_up"), c.n_ff, d)?,
                ]
            };
            layers.push(Layer {
                attn_norm: norm(&p("attn_norm"))?,
                wq,
                wk,
                wv,
                wo: mat(&p("attn_output"), d, qd)?,
                qkv_bias: match c.arch {
                    Arch::Qwen2 => Some([
                        vector(&b("attn_q"), qd)?,
                        vector(&b("attn_k"), kv)?,
                        vector(&b("attn_v"), kv)?,
                    ]),
                    _ => None,
                },
                qk_norm: match c.arch {
                    Arch::Qwen3 | Arch::Gemma3 => Some([
                        vector(&p("attn_q_norm"), c.head_dim)?,
                        vector(&p("attn_k_norm"), c.head_dim)?,
                    ]),
                    _ => None,
                },
                post_norms: match c.arch {
                    Arch::Gemma3 => {
                        Some([norm(&p("post_attention_norm"))?, norm(&p("post_ffw_norm"))?])
                    }
                    _ => None,
                },
                ffn_norm: norm(&p("ffn_norm"))?,
                w_gate,
                w_up,
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
            exact: !quant::rounded_products_are_fast(),
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

    /// Whether generation (one token per pass) multiplies quantized weights with exact f32
    /// activations (`true`: the numerical reference) or with activations rounded to 8 bits
    /// per 32 elements (`false`: integer dot products, as llama.cpp computes; each activation
    /// moves by at most 1/254 of its block's largest magnitude, see `quant/int8.rs`). The
    /// default is `false` where the CPU has a vector integer dot product (x86-64 with AVX2:
    /// 2–3× faster than exact on one core), `true` elsewhere (wasm32, where the exact kernels
    /// are the faster ones). Prompt passes are always exact.
    pub fn set_exact(&mut self, exact: bool) {
        self.exact = exact;
    }

    /// Whether generation's products are exact ([`Model::set_exact`]).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// A session whose KV cache holds `context` positions (at most the model's context).
    pub fn session(&self, context: usize) -> Result<Session> {
        self.session_with(context, KvPrecision::F32)
    }

    /// [`Model::session`] with its KV cache holding keys and values at `precision`.
    pub fn session_with(&self, context: usize, precision: KvPrecision) -> Result<Session> {
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
            precision,
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
        with_workers(self.threads, |workers| {
            self.run(workers, session, tokens, logits)
        });
        Ok(())
    }

    /// The forward pass of [`Model::forward_into`] once its inputs are checked.
    fn run<'m>(
        &'m self,
        workers: &Workers<'m>,
        session: &mut Session,
        tokens: &[TokenId],
        logits: &mut [f32],
    ) {
        let c = &self.config;
        let file = self.bytes.as_ref();
        let t = tokens.len();
        // A decode step's products may take rounded activations; a prompt pass's never (its
        // last position's output product included).
        let round = t == 1 && !self.exact;
        let (d, kv, qd, hd) = (c.n_embd, c.kv_dim(), c.q_dim(), c.head_dim);
        let pos0 = session.pos;

        let mut x = vec![0f32; t * d];
        for (row, &tok) in x.chunks_exact_mut(d).zip(tokens) {
            self.tok_embd.dequantize_row(file, tok as usize, row);
        }
        if c.arch == Arch::Gemma3 {
            let scale = (d as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= scale);
        }
        let factors = c.rope_factors(session.capacity);
        let global = rope_table(c, c.rope_base, factors, pos0, t);
        let local = c
            .sliding_window
            .map(|_| rope_table(c, c.rope_base_local, factors, pos0, t));
        let mut h = vec![0f32; t * d];
        let mut q = vec![0f32; t * qd];
        let mut k = vec![0f32; t * kv];
        // Q and K before a per-head RMSNorm (Qwen3, Gemma 3), as the GPU path's q_raw/k_raw.
        let qk_norm = self.layers.iter().any(|l| l.qk_norm.is_some());
        let mut q_raw = vec![0f32; if qk_norm { t * qd } else { 0 }];
        let mut k_raw = vec![0f32; if qk_norm { t * kv } else { 0 }];
        let mut v = vec![0f32; t * kv];
        let mut att = vec![0f32; t * qd];
        let mut proj = vec![0f32; t * d];
        let mut gate = vec![0f32; t * c.n_ff];
        let mut up = vec![0f32; t * c.n_ff];
        let mut scores = vec![0f32; pos0 + t];
        let group = c.n_head / c.n_head_kv;
        let scale = 1.0 / (hd as f32).sqrt();

        for (li, layer) in self.layers.iter().enumerate() {
            rms_norm(&x, &layer.attn_norm, c.rms_eps, &mut h);
            {
                let (qp, kp) = match layer.qk_norm {
                    Some(_) => (&mut q_raw, &mut k_raw),
                    None => (&mut q, &mut k),
                };
                let products: &mut [(&Matrix, &mut [f32])] =
                    &mut [(&layer.wq, qp), (&layer.wk, kp), (&layer.wv, &mut v)];
                self.matmul(workers, &h, t, round, products);
                if let Some([bq, bk, bv]) = &layer.qkv_bias {
                    for ((_, out), bias) in products.iter_mut().zip([bq, bk, bv]) {
                        for row in out.chunks_exact_mut(bias.len()) {
                            row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
                        }
                    }
                }
            }
            if let Some([q_norm, k_norm]) = &layer.qk_norm {
                // rms_norm normalises each `head_dim` chunk: one head at a time.
                rms_norm(&q_raw, q_norm, c.rms_eps, &mut q);
                rms_norm(&k_raw, k_norm, c.rms_eps, &mut k);
            }
            let sliding = c.is_sliding(li);
            let (cos, sin) = match &local {
                Some(table) if sliding => table,
                _ => &global,
            };
            let rotate = if c.arch.rope_halves() {
                rope_halves
            } else {
                rope
            };
            for i in 0..t {
                let (cs, sn) = (
                    &cos[i * c.rope_dim / 2..][..c.rope_dim / 2],
                    &sin[i * c.rope_dim / 2..][..c.rope_dim / 2],
                );
                for head in q[i * qd..(i + 1) * qd].chunks_exact_mut(hd) {
                    rotate(head, cs, sn);
                }
                for head in k[i * kv..(i + 1) * kv].chunks_exact_mut(hd) {
                    rotate(head, cs, sn);
                }
            }
            let (kc, vc) = (&mut session.k[li], &mut session.v[li]);
            let stored = pos0 * kv..(pos0 + t) * kv;
            kc[stored.clone()].copy_from_slice(&k);
            vc[stored.clone()].copy_from_slice(&v);
            let precision = session.precision;
            if precision != KvPrecision::F32 {
                let round = |x: &mut f32| *x = precision.round(*x);
                kc[stored.clone()].iter_mut().for_each(round);
                vc[stored].iter_mut().for_each(round);
            }
            for i in 0..t {
                let n_ctx = pos0 + i + 1; // causal: this token sees positions 0..=pos0+i
                                          // A sliding window: the last `window` of them, this one included.
                let first = match c.sliding_window {
                    Some(window) if sliding => n_ctx.saturating_sub(window),
                    _ => 0,
                };
                let (kw, vw) = (&kc[first * kv..], &vc[first * kv..]);
                for hq in 0..c.n_head {
                    let hk = hq / group;
                    let qh = &q[i * qd + hq * hd..][..hd];
                    let out = &mut att[i * qd + hq * hd..][..hd];
                    attend(
                        qh,
                        kw,
                        vw,
                        kv,
                        hk * hd,
                        scale,
                        &mut scores[..n_ctx - first],
                        out,
                    );
                }
            }
            self.matmul(workers, &att, t, round, &mut [(&layer.wo, &mut proj)]);
            let post_norms = layer.post_norms.as_ref();
            add_residual(
                &mut x,
                &proj,
                post_norms.map(|[a, _]| &a[..]),
                c.rms_eps,
                &mut h,
            );

            rms_norm(&x, &layer.ffn_norm, c.rms_eps, &mut h);
            self.matmul(
                workers,
                &h,
                t,
                round,
                &mut [(&layer.w_gate, &mut gate), (&layer.w_up, &mut up)],
            );
            if c.arch == Arch::Gemma3 {
                for (g, u) in gate.iter_mut().zip(&up) {
                    *g = gelu_tanh(*g) * u;
                }
            } else {
                for (g, u) in gate.iter_mut().zip(&up) {
                    *g = *g / (1.0 + (-*g).exp()) * u; // SiLU(gate) · up
                }
            }
            self.matmul(workers, &gate, t, round, &mut [(&layer.w_down, &mut proj)]);
            add_residual(
                &mut x,
                &proj,
                post_norms.map(|[_, f]| &f[..]),
                c.rms_eps,
                &mut h,
            );
        }
        let last = &x[(t - 1) * d..];
        let mut hn = vec![0f32; d];
        rms_norm(last, &self.output_norm, c.rms_eps, &mut hn);
        self.matmul(workers, &hn, 1, round, &mut [(&self.output, logits)]);
        if let Some(cap) = c.final_logit_softcap {
            logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
        }
        session.pos += t;
        session.tokens.extend_from_slice(tokens);
    }

    /// `out (t × rows) = xs (t × cols) · Wᵀ` for each `(W, out)` of `products` (matrices of
    /// one width), every matrix's rows split over the workers; with `round` (one input), over
    /// the input rounded to 8 bits where a weight type allows.
    fn matmul<'m>(
        &'m self,
        workers: &Workers<'m>,
        xs: &[f32],
        t: usize,
        round: bool,
        products: &mut [(&'m Matrix, &mut [f32])],
    ) {
        let file = self.bytes.as_ref();
        // Rounded once per input and shared by every product and thread.
        let acts = (round && t == 1 && xs.len().is_multiple_of(32))
            .then(|| quant::Q8Activations::new(xs).map(std::sync::Arc::new))
            .flatten();
        if t == 1 && !workers.parallel() {
            for (w, out) in products.iter_mut() {
                compute(file, w, 0..w.rows, xs, 1, acts.as_deref(), out);
            }
            return;
        }
        let mats: Vec<&'m Matrix> = products.iter().map(|(w, _)| *w).collect();
        if t == 1 {
            workers.run(file, &mats, xs, 1, acts, |m, rows, part| {
                products[m].1[rows].copy_from_slice(part)
            });
            return;
        }
        // Tiles of 16 inputs (37 KB of activations at width 576) stay in cache while every
        // row streams past them; each row is dequantized once per tile.
        const TILE: usize = 16;
        let cols = mats[0].cols;
        for i0 in (0..t).step_by(TILE) {
            let tt = TILE.min(t - i0);
            let tile = &xs[i0 * cols..(i0 + tt) * cols];
            workers.run(file, &mats, tile, tt, None, |m, rows, part| {
                // `part` is `rows × tt`, the output `t × n_rows`.
                let (w, out) = &mut products[m];
                for (r, col) in rows.zip(part.chunks_exact(tt)) {
                    for (i, &val) in col.iter().enumerate() {
                        out[(i0 + i) * w.rows + r] = val;
                    }
                }
            });
        }
    }
}

/// The threads computing one forward pass's matrix products: the caller's and, on native
/// targets, `threads - 1` helpers spawned once per pass (not once per product). A product is
/// cut into chunks of rows that every thread takes from a shared counter, so a helper the OS
/// does not schedule in time (a busy machine) delays the product by at most its current chunk.
struct Workers<'m> {
    #[cfg(not(target_arch = "wasm32"))]
    helpers: Vec<std::sync::mpsc::Sender<Job<'m>>>,
    #[cfg(not(target_arch = "wasm32"))]
    done: Option<std::sync::mpsc::Receiver<(usize, Vec<f32>)>>,
    #[cfg(target_arch = "wasm32")]
    model: std::marker::PhantomData<&'m ()>,
}

/// One product for the helpers: they compute chunks `next.fetch_add(1)` until none is left.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone)]
struct Job<'m> {
    file: &'m [u8],
    chunks: std::sync::Arc<[(&'m Matrix, Range<usize>)]>,
    next: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    xs: std::sync::Arc<[f32]>,
    t: usize,
    acts: Option<std::sync::Arc<quant::Q8Activations>>,
}

/// Runs `f` with `threads - 1` helper threads (none on wasm32), joined before it returns.
fn with_workers<'m, R>(threads: usize, f: impl FnOnce(&Workers<'m>) -> R) -> R {
    #[cfg(not(target_arch = "wasm32"))]
    if threads > 1 {
        return std::thread::scope(|s| {
            let (done_tx, done) = std::sync::mpsc::channel();
            let helpers = (1..threads)
                .map(|_| {
                    let (jobs, job_rx) = std::sync::mpsc::channel::<Job<'m>>();
                    let done_tx = PanicSignal(done_tx.clone());
                    s.spawn(move || {
                        let done_tx = &done_tx.0;
                        // Ends when the job channel closes (the `Workers` are dropped).
                        while let Some(job) = recv_spinning(&job_rx) {
                            while let Some(c) = job.claim() {
                                let (w, rows) = &job.chunks[c];
                                let mut out = vec![0f32; rows.len() * job.t];
                                compute(
                                    job.file,
                                    w,
                                    rows.clone(),
                                    &job.xs,
                                    job.t,
                                    job.acts.as_deref(),
                                    &mut out,
                                );
                                if done_tx.send((c, out)).is_err() {
                                    return;
                                }
                            }
                        }
                    });
                    jobs
                })
                .collect();
            drop(done_tx);
            f(&Workers {
                helpers,
                done: Some(done),
            })
        });
    }
    let _ = threads;
    f(&Workers {
        #[cfg(not(target_arch = "wasm32"))]
        helpers: Vec::new(),
        #[cfg(not(target_arch = "wasm32"))]
        done: None,
        #[cfg(target_arch = "wasm32")]
        model: std::marker::PhantomData,
    })
}

/// `rx.recv()`, polling for a while before it sleeps: a decode step hands the threads a
/// product every few microseconds (SmolLM2: 121 per token), and waking a sleeping thread
/// costs about as long as a product's chunk.
#[cfg(not(target_arch = "wasm32"))]
fn recv_spinning<T>(rx: &std::sync::mpsc::Receiver<T>) -> Option<T> {
    for _ in 0..SPINS {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(std::sync::mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

/// Polls before sleeping: tens of microseconds. 2,000 and 20,000 measured the same (SmolLM2
/// at 2 threads: 72 tok/s without polling, ~100 with), so the shorter.
#[cfg(not(target_arch = "wasm32"))]
const SPINS: usize = 2000;

/// A helper's sender of finished chunks, which on a panic sends `usize::MAX` so that the
/// caller, waiting for chunks, panics too instead of waiting forever.
#[cfg(not(target_arch = "wasm32"))]
struct PanicSignal(std::sync::mpsc::Sender<(usize, Vec<f32>)>);

#[cfg(not(target_arch = "wasm32"))]
impl Drop for PanicSignal {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.send((usize::MAX, Vec::new()));
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Job<'_> {
    fn claim(&self) -> Option<usize> {
        let c = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (c < self.chunks.len()).then_some(c)
    }
}

/// Rows `rows` of `w` times the `t` inputs `xs`, into `out` (`rows × t`); one input with
/// its 8-bit rounding `acts` takes the integer products.
fn compute(
    file: &[u8],
    w: &Matrix,
    rows: Range<usize>,
    xs: &[f32],
    t: usize,
    acts: Option<&quant::Q8Activations>,
    out: &mut [f32],
) {
    if let (1, Some(a)) = (t, acts) {
        w.matvec_rows_rounded(file, xs, a, rows, out);
    } else if t == 1 {
        w.matvec_rows(file, xs, rows, out);
    } else {
        w.matmul_rows_t(file, xs, t, rows, out);
    }
}

impl<'m> Workers<'m> {
    /// Whether there are helper threads.
    fn parallel(&self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        return !self.helpers.is_empty();
        #[cfg(target_arch = "wasm32")]
        false
    }

    /// Multiplies every matrix of `mats` with the `t` inputs `xs` and hands each chunk of
    /// rows to `place(m, rows, part)`: `rows × t` values of matrix `m`, in any order.
    fn run(
        &self,
        file: &'m [u8],
        mats: &[&'m Matrix],
        xs: &[f32],
        t: usize,
        acts: Option<std::sync::Arc<quant::Q8Activations>>,
        mut place: impl FnMut(usize, Range<usize>, &[f32]),
    ) {
        #[cfg(not(target_arch = "wasm32"))]
        if let (true, Some(done)) = (self.parallel(), &self.done) {
            // About 4 chunks per thread and matrix (at least 64 rows each): enough to balance
            // threads that start late, few enough that handing one over costs little.
            let n = 4 * (self.helpers.len() + 1);
            let mut index = Vec::new();
            let chunks: std::sync::Arc<[(&'m Matrix, Range<usize>)]> = mats
                .iter()
                .enumerate()
                .flat_map(|(m, &w)| {
                    let step = w.rows.div_ceil(n).next_multiple_of(4).max(64);
                    (0..w.rows)
                        .step_by(step)
                        .map(move |r| (m, w, r..(r + step).min(w.rows)))
                })
                .map(|(m, w, rows)| {
                    index.push(m);
                    (w, rows)
                })
                .collect();
            let job = Job {
                file,
                chunks,
                next: Default::default(),
                xs: xs.into(),
                t,
                acts: acts.clone(),
            };
            for h in &self.helpers {
                h.send(job.clone()).expect("a helper thread ended early");
            }
            let mut left = job.chunks.len();
            let mut out = Vec::new();
            while let Some(c) = job.claim() {
                let (w, rows) = &job.chunks[c];
                out.clear();
                out.resize(rows.len() * t, 0.0);
                compute(file, w, rows.clone(), xs, t, acts.as_deref(), &mut out);
                place(index[c], rows.clone(), &out);
                left -= 1;
            }
            while left > 0 {
                let (c, out) = recv_spinning(done).expect("the helper threads ended early");
                assert!(c != usize::MAX, "a helper thread panicked");
                place(index[c], job.chunks[c].1.clone(), &out);
                left -= 1;
            }
            return;
        }
        for (m, &w) in mats.iter().enumerate() {
            let mut out = vec![0f32; w.rows * t];
            compute(file, w, 0..w.rows, xs, t, acts.as_deref(), &mut out);
            place(m, 0..w.rows, &out);
        }
    }
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
/// `x += proj`, through Gemma 3's post-norm `norm` first where the layer has one (written
/// into `h`, which is free at both residuals of a layer).
fn add_residual(x: &mut [f32], proj: &[f32], norm: Option<&[f32]>, eps: f32, h: &mut [f32]) {
    let out = match norm {
        Some(w) => {
            rms_norm(proj, w, eps, h);
            &*h
        }
        None => proj,
    };
    x.iter_mut().zip(out).for_each(|(x, p)| *x += p);
}

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

/// GELU with the tanh approximation (Gemma's `gelu_pytorch_tanh`, ggml's `gelu`).
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
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
pub(crate) fn rope_table(
    c: &Config,
    base: f32,
    factors: Option<&[f32]>,
    pos0: usize,
    t: usize,
) -> (Vec<f32>, Vec<f32>) {
    let half = c.rope_dim / 2;
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for p in pos0..pos0 + t {
        for i in 0..half {
            let factor = factors.map_or(1.0, |f| f64::from(f[i]));
            let inv_freq = f64::from(base).powf(-2.0 * i as f64 / c.rope_dim as f64) / factor;
            let angle = p as f64 * inv_freq;
            let scale = f64::from(c.rope_attn_factor);
            cos.push((angle.cos() * scale) as f32);
            sin.push((angle.sin() * scale) as f32);
        }
    }
    (cos, sin)
}

/// Rotates the pairs `(x[i], x[i + n])` of one head, `n = cos.len()` (ggml's NEOX mode, as
/// llama.cpp runs Qwen2 and Qwen3). Dimensions past `2n` are left as they are.
pub(crate) fn rope_halves(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let n = cos.len();
    let (first, second) = x[..2 * n].split_at_mut(n);
    for ((a, b), (&c, &s)) in first.iter_mut().zip(second).zip(cos.iter().zip(sin)) {
        let (x0, x1) = (*a, *b);
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
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
