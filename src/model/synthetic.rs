//! Tiny synthetic Llama models written as GGUF, for tests (CPU and GPU paths alike).
//!
//! Random weights in any [`QuantType`], a byte-level BPE vocabulary (three ChatML control
//! tokens, the 256 byte tokens and a few merges) and a ChatML chat template, so every stage
//! from tokenizer to logits runs on a file of a few hundred KB in milliseconds.
//!
//! ```
//! use poot::model::{synthetic::TinySpec, Model};
//! let file = TinySpec::default().build();
//! let model = Model::from_gguf_bytes(&file[..]).unwrap();
//! let mut session = model.session(16).unwrap();
//! let logits = model.forward(&mut session, &[3, 4, 5]).unwrap();
//! assert_eq!(logits.len(), model.config().n_vocab);
//! ```

use crate::gguf::{Builder, Value};
use crate::quant::{quantize, QuantType};

/// The shape and weight format of a synthetic model.
#[derive(Debug, Clone)]
pub struct TinySpec {
    /// Format of every matrix (norms stay F32, as in real files).
    pub weight_type: QuantType,
    /// Embedding width; rounded up to a whole block of `weight_type` (256 for K-quants).
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub context_length: usize,
    /// Whether the output matrix is the token embedding (no `output.weight`).
    pub tied_output: bool,
    pub seed: u64,
}

impl Default for TinySpec {
    fn default() -> Self {
        TinySpec {
            weight_type: QuantType::Q8_0,
            n_embd: 64,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 128,
            n_layer: 2,
            context_length: 256,
            tied_output: true,
            seed: 1,
        }
    }
}

/// Control tokens at ids 0, 1, 2; byte tokens follow from id 3.
pub const CONTROL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Merges of the synthetic vocabulary (each adds a token after the byte tokens).
const MERGES: [(&str, &str); 6] = [
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġt", "he"),
    ("i", "n"),
    ("Ġ", "a"),
    ("o", "r"),
];

const CHAT_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + \
                             message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt \
                             %}{{ '<|im_start|>assistant\n' }}{% endif %}";

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        let z = crate::sampling::splitmix64(&mut self.0);
        (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0 // uniform in [-1, 1)
    }
}

impl TinySpec {
    /// The embedding width actually used (a whole number of blocks).
    pub fn width(&self) -> usize {
        let b = self.weight_type.block_len().max(1);
        self.n_embd.div_ceil(b) * b
    }

    /// The feed-forward width actually used (a whole number of blocks).
    pub fn ff_width(&self) -> usize {
        let b = self.weight_type.block_len().max(1);
        self.n_ff.div_ceil(b) * b
    }

    /// The vocabulary's token texts, in GPT-2's byte alphabet.
    pub fn tokens() -> Vec<String> {
        let mut tokens: Vec<String> = CONTROL_TOKENS.iter().map(|s| s.to_string()).collect();
        tokens.extend((0..=255u8).map(|b| crate::vocab::gpt2::encode(&[b])));
        tokens.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
        tokens
    }

    /// The GGUF file's bytes.
    pub fn build(&self) -> Vec<u8> {
        let d = self.width();
        let ff = self.ff_width();
        let head_dim = d / self.n_head;
        let kv = self.n_head_kv * head_dim;
        let tokens = Self::tokens();
        let n_vocab = tokens.len();
        let mut types = vec![3i32; CONTROL_TOKENS.len()];
        types.resize(n_vocab, 1);
        let merges: Vec<String> = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();

        let mut rng = Rng(self.seed);
        let ty = self.weight_type;
        // Weights scaled by 1/sqrt(fan-in) so activations stay O(1) through the layers.
        let matrix = |rng: &mut Rng, rows: usize, cols: usize| -> Vec<u8> {
            let s = 1.0 / (cols as f32).sqrt();
            let w: Vec<f32> = (0..rows * cols).map(|_| rng.next() * s * 1.7).collect();
            quantize(ty, &w).expect("whole blocks")
        };
        let norm = |rng: &mut Rng| -> Vec<u8> {
            (0..d)
                .flat_map(|_| (1.0 + 0.2 * rng.next()).to_le_bytes())
                .collect()
        };
        let id = ty.ggml_id();
        let mut b = Builder::new()
            .string("general.architecture", "llama")
            .string("general.name", "poot synthetic tiny llama")
            .u32("llama.block_count", self.n_layer as u32)
            .u32("llama.context_length", self.context_length as u32)
            .u32("llama.embedding_length", d as u32)
            .u32("llama.feed_forward_length", ff as u32)
            .u32("llama.attention.head_count", self.n_head as u32)
            .u32("llama.attention.head_count_kv", self.n_head_kv as u32)
            .value("llama.rope.freq_base", &Value::F32(10_000.0))
            .value("llama.attention.layer_norm_rms_epsilon", &Value::F32(1e-5))
            .u32("llama.rope.dimension_count", head_dim as u32)
            .string("tokenizer.ggml.model", "gpt2")
            .string("tokenizer.ggml.pre", "smollm")
            .strings("tokenizer.ggml.tokens", &tokens)
            .i32s("tokenizer.ggml.token_type", &types)
            .strings("tokenizer.ggml.merges", &merges)
            .u32("tokenizer.ggml.bos_token_id", 1)
            .u32("tokenizer.ggml.eos_token_id", 2)
            .value("tokenizer.ggml.add_bos_token", &Value::Bool(false))
            .string("tokenizer.chat_template", CHAT_TEMPLATE);
        let embd = matrix(&mut rng, n_vocab, d);
        b = b.tensor("token_embd.weight", &[d as u64, n_vocab as u64], id, embd);
        for i in 0..self.n_layer {
            let attn_norm = norm(&mut rng);
            b = b.tensor(
                &format!("blk.{i}.attn_norm.weight"),
                &[d as u64],
                0,
                attn_norm,
            );
            for (name, rows, cols) in [
                ("attn_q", d, d),
                ("attn_k", kv, d),
                ("attn_v", kv, d),
                ("attn_output", d, d),
                ("ffn_gate", ff, d),
                ("ffn_up", ff, d),
                ("ffn_down", d, ff),
            ] {
                let data = matrix(&mut rng, rows, cols);
                b = b.tensor(
                    &format!("blk.{i}.{name}.weight"),
                    &[cols as u64, rows as u64],
                    id,
                    data,
                );
            }
            let ffn_norm = norm(&mut rng);
            b = b.tensor(
                &format!("blk.{i}.ffn_norm.weight"),
                &[d as u64],
                0,
                ffn_norm,
            );
        }
        let out_norm = norm(&mut rng);
        b = b.tensor("output_norm.weight", &[d as u64], 0, out_norm);
        if !self.tied_output {
            let out = matrix(&mut rng, n_vocab, d);
            b = b.tensor("output.weight", &[d as u64, n_vocab as u64], id, out);
        }
        b.build()
    }
}
