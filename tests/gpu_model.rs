//! The GPU forward pass (`poot::gpu::Model`) against the CPU reference (`poot::model::Model`):
//! synthetic tiny models in every weight format with a GPU kernel, and a short run of the
//! reference model (SmolLM2-135M-Instruct Q4_1, env POOT_REFERENCE_GGUF).
//!
//! Metric: max |gpu - cpu| over the logits, divided by max |cpu| (relative to the logit
//! scale, since individual logits near zero have no meaningful relative error), plus top-1
//! agreement; greedy decoding must produce the same tokens. Every variant the adapter runs
//! (f32, `shader-f16`, subgroups: `Context::every_variant`) is held to the same bounds
//! against its CPU twin: a CPU session whose KV cache has the GPU session's precision
//! (`shader-f16` stores K and V as f16).
//!
//! On the reference model an f16 cache is held to a relative logit error under 1e-3, against
//! its twin and against the exact-f32 CPU path, with the same top-1 and the same 16 greedy
//! tokens as the f32 path. Measured on lavapipe: 1.9e-4 against the twin, 2.4e-4 against f32
//! (an f32 cache: 1.6e-6). The twin cannot be closer over 30 layers: a key the two compute
//! 1e-6 apart rounds to different halves when it lies near a rounding boundary (about one
//! in 300 do), a 5e-4 step that the later layers carry on.
//!
//! The same models with the storage binding limit capped so that the embedding, the output
//! and the FFN matrices are split into row chunks must give bit-identical logits to the
//! unsplit run: each row's arithmetic is the same, only which buffer holds it changes.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use std::sync::Arc;

use poot::gpu::{Context, ContextOptions, Counters, Model as GpuModel};
use poot::model::synthetic::TinySpec;
use poot::model::{KvPrecision, Model};
use poot::quant::QuantType;
use poot::sampling::argmax;

/// A context per variant this adapter runs, the f32 one first.
fn contexts() -> Vec<Arc<Context>> {
    pollster::block_on(Context::every_variant())
        .unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"))
        .into_iter()
        .map(Arc::new)
        .collect()
}

/// A context of `ctx`'s variant whose storage bindings hold at most `max_binding_bytes`.
fn capped(ctx: &Context, max_binding_bytes: u64) -> Arc<Context> {
    let options = ContextOptions {
        max_binding_bytes: Some(max_binding_bytes),
        ..ContextOptions::only(ctx.variant())
    };
    let capped = pollster::block_on(Context::with_options(options)).unwrap();
    assert_eq!(capped.variant(), ctx.variant());
    Arc::new(capped)
}

/// max |a - b| / max |b|.
fn relative_error(gpu: &[f32], cpu: &[f32]) -> f32 {
    let scale = cpu.iter().fold(0f32, |m, x| m.max(x.abs()));
    gpu.iter()
        .zip(cpu)
        .fold(0f32, |m, (g, c)| m.max((g - c).abs()))
        / scale
}

/// Runs a tiny model of `weight_type` on `ctx` and the CPU: a prompt longer than one GPU
/// chunk (64), then decode steps, 4 forward calls in all, each checked against the CPU.
/// Returns the GPU's logits of each call and the session's counters.
fn tiny_model_run(
    ctx: &Arc<Context>,
    weight_type: QuantType,
    tied_output: bool,
) -> (Vec<Vec<f32>>, Counters) {
    let spec = TinySpec {
        weight_type,
        tied_output,
        n_layer: 2,
        ..TinySpec::default()
    };
    let file = spec.build();
    let mut cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    // The GPU multiplies with f32 activations: its twin is the exact path.
    cpu.set_exact(true);
    let gpu = GpuModel::upload(Arc::clone(ctx), &cpu).unwrap();
    let mut gpu_session = gpu.session(96).unwrap();
    let mut cpu_session = cpu.session_with(96, gpu_session.kv_precision()).unwrap();
    let prompt: Vec<u32> = (0..70).map(|i| 3 + (i * 37) % 200).collect();
    let mut next = prompt;
    let mut logits = Vec::new();
    for step in 0..4 {
        let c = cpu.forward(&mut cpu_session, &next).unwrap();
        let g = pollster::block_on(gpu.forward(&mut gpu_session, &next)).unwrap();
        let err = relative_error(&g, &c);
        let what = format!(
            "{} ({}) tied={tied_output} step {step}",
            weight_type.name(),
            ctx.variant().name()
        );
        assert!(err < 1e-4, "{what}: relative logit error {err}");
        assert_eq!(argmax(&g), argmax(&c), "{what}: top-1 differs");
        next = vec![argmax(&c)];
        logits.push(g);
    }
    assert_eq!(gpu_session.len(), cpu_session.len());
    (logits, gpu_session.counters())
}

#[test]
fn tiny_models_match_the_cpu_in_every_format() {
    for ctx in contexts() {
        for weight_type in [
            QuantType::Q8_0,
            QuantType::Q4_1,
            QuantType::Q4_0,
            QuantType::F16,
            QuantType::F32,
            // The code units (src/gpu/matvec.rs).
            QuantType::Q5_0,
            QuantType::Q5_1,
            QuantType::IQ4_NL,
            QuantType::Q2_K,
            QuantType::Q3_K,
            QuantType::Q4_K,
            QuantType::Q5_K,
            QuantType::Q6_K,
        ] {
            for tied_output in [true, false] {
                tiny_model_run(&ctx, weight_type, tied_output);
            }
        }
    }
}

#[test]
fn tiny_models_split_into_row_chunks_give_the_unsplit_logits() {
    // 13,000 bytes: above the 96-position KV cache (96 x 32 x 4 = 12,288 bytes), below most
    // F32 matrices of the 64-wide model, so chunks end at rows no power of two divides:
    // 256-byte rows (64 columns) go 50 to a chunk, 512-byte rows (w_down, 128 columns) 25.
    const CAP: u64 = 13_000;
    for ctx in contexts() {
        let split = capped(&ctx, CAP);
        for tied_output in [true, false] {
            let what = format!("F32 ({}) tied={tied_output}", ctx.variant().name());
            let (whole, whole_counters) = tiny_model_run(&ctx, QuantType::F32, tied_output);
            let (chunked, chunked_counters) = tiny_model_run(&split, QuantType::F32, tied_output);
            for (step, (w, c)) in whole.iter().zip(&chunked).enumerate() {
                let same = w.iter().zip(c).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{what} step {step}: split logits differ from unsplit");
            }
            // Five submissions (the 70-token prompt's chunks of 64 and 6, then 3 decode
            // steps) of the embedding and 2 layers of 16, and four of them end with the norm
            // and the logits. Split, the 265x64 embedding (67,840 bytes) takes 6 dispatches
            // (5 x 50 + 15 rows) and, per layer, wq and wo (64 rows) 2, w_gate and w_up (128
            // rows: 50 + 50 + 28) 3, w_down (64 rows: 25 + 25 + 14) 3, 8 more than 16; the
            // output, tied or not, 6. A token's attention scores (4 heads x 96 positions x
            // 4 B = 1,536 bytes) make prefill chunks of 8 under the cap, so the prompt is 9
            // submissions (8 x 8 + 6).
            assert_eq!(
                whole_counters.dispatches,
                5 * (1 + 2 * 16) + 4 * 2,
                "{what}"
            );
            assert_eq!(
                chunked_counters.dispatches,
                (9 + 3) * (6 + 2 * (16 + 8)) + 4 * (1 + 6),
                "{what}"
            );
        }
    }
}

#[test]
fn reference_model_prefill_logits_and_greedy_tokens_match_the_cpu() {
    let path = std::env::var("POOT_REFERENCE_GGUF").unwrap_or_else(|_| {
        panic!("POOT_REFERENCE_GGUF is not set: run scripts/fetch-model.sh (or `make test`)")
    });
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    cpu.set_threads(2);
    cpu.set_exact(true);
    let tokenizer = poot::tokenizer::Tokenizer::from_gguf_bytes(&file).unwrap();
    let prompt = tokenizer.encode(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        false,
        true,
    );
    const STEPS: usize = 16;
    // The CPU path (exact f32) and the twin of an f16 cache: prefill logits, greedy tokens.
    let cpu_run = |precision: KvPrecision| {
        let mut session = cpu.session_with(128, precision).unwrap();
        let prefill = cpu.forward(&mut session, &prompt).unwrap();
        let mut tokens = vec![argmax(&prefill)];
        for _ in 1..STEPS {
            let c = cpu
                .forward(&mut session, &tokens[tokens.len() - 1..])
                .unwrap();
            tokens.push(argmax(&c));
        }
        (prefill, tokens)
    };
    let (cpu_prefill, cpu_tokens) = cpu_run(KvPrecision::F32);
    let f16_twin = cpu_run(KvPrecision::F16);
    eprintln!(
        "greedy: {:?}",
        String::from_utf8_lossy(&tokenizer.decode(&cpu_tokens, false))
    );
    // The first variant's prefill logits of each cache precision, which the later variants
    // of that precision are also compared with.
    let mut first_prefill: Vec<(KvPrecision, Vec<f32>)> = Vec::new();
    for ctx in contexts() {
        let variant = ctx.variant().name();
        let precision = ctx.kv_precision();
        let (twin_prefill, twin_tokens) = match precision {
            KvPrecision::F32 => (&cpu_prefill, &cpu_tokens),
            KvPrecision::F16 => (&f16_twin.0, &f16_twin.1),
        };
        let (g, gpu_tokens, whole_counters) = reference_run(&ctx, &cpu, &prompt, STEPS);
        let err = relative_error(&g, twin_prefill);
        let exact = relative_error(&g, &cpu_prefill);
        let first = first_prefill.iter().find(|(p, _)| *p == precision);
        let vs_first = first.map(|(_, f)| relative_error(&g, f));
        let vs_first_text = vs_first.map_or("-".to_owned(), |e| format!("{e:.2e}"));
        eprintln!(
            "{variant} ({precision:?} cache): prefill of {} tokens: relative logit error \
             {err:.2e} against its CPU twin, {exact:.2e} against the exact-f32 CPU path \
             (vs the first variant with this cache: {vs_first_text})",
            prompt.len()
        );
        let bound = match precision {
            KvPrecision::F32 => 1e-4,
            KvPrecision::F16 => 1e-3,
        };
        assert!(err < bound, "{variant} prefill: relative logit error {err}");
        assert!(
            exact < 1e-3,
            "{variant} prefill: {exact} from the f32 CPU path"
        );
        assert_eq!(argmax(&g), argmax(&cpu_prefill), "{variant}: top-1 differs");
        if let Some(vs_first) = vs_first {
            assert!(
                vs_first < bound,
                "{variant} prefill vs the first variant: relative error {vs_first}"
            );
        }
        assert_eq!(&gpu_tokens, twin_tokens, "{variant}: greedy tokens differ");
        assert_eq!(
            gpu_tokens, cpu_tokens,
            "{variant}: greedy tokens differ from the f32 CPU path's"
        );

        // Each of the 16 forward calls (the prompt is one chunk): 1 + 30 x 16 + 2.
        assert_eq!(whole_counters.dispatches, STEPS as u64 * 483);
        // Split runs for f32 and f16+subgroups only: each feature's branch is split once (a
        // split run of the 135M model takes 25 s on lavapipe).
        let v = ctx.variant();
        if v.f16 == v.subgroups {
            split_reference_run(&ctx, &cpu, &prompt, STEPS, &g, &cpu_tokens);
        }
        if first.is_none() {
            first_prefill.push((precision, g));
        }
    }
}

/// The reference run under a 200,000-byte binding cap: the same prefill logits bit for bit
/// as the unsplit run's `unsplit_prefill`, the same greedy tokens.
fn split_reference_run<B: AsRef<[u8]>>(
    ctx: &Arc<Context>,
    cpu: &Model<B>,
    prompt: &[u32],
    steps: usize,
    unsplit_prefill: &[f32],
    cpu_tokens: &[u32],
) {
    let variant = ctx.variant().name();
    // 200,000 bytes holds 555 of the 360-byte Q4_1 rows of the 576 columns wide matrices,
    // 208 of w_down's 960-byte ones (1,536 columns) and 308 of token_embd's (Q8_0, 648
    // bytes a row as uploaded): token_embd (49,152 rows, 31.9 MB) splits in 160 chunks
    // (159 x 308 + 180), wq and wo (576 rows) in 2, w_gate and w_up (1,536 rows: 555 + 555
    // + 426) in 3, w_down (576 rows: 208 + 208 + 160) in 3. The KV cache (128 x 192 x 4 =
    // 98,304 bytes in f32) and the logits (196,608) still fit.
    let split = capped(ctx, 200_000);
    let (split_prefill, split_tokens, split_counters) = reference_run(&split, cpu, prompt, steps);
    let same = unsplit_prefill
        .iter()
        .zip(&split_prefill)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{variant}: split prefill logits differ from unsplit");
    assert_eq!(
        split_tokens, cpu_tokens,
        "{variant}: split greedy tokens differ"
    );
    // Per forward call: 160 for the embedding, 30 x (16 + 8), the norm and 160 for the
    // tied logits.
    eprintln!(
        "{variant}: dispatches per forward call: 483 unsplit, {} split",
        split_counters.dispatches / steps as u64
    );
    assert_eq!(
        split_counters.dispatches,
        steps as u64 * (160 + 30 * (16 + 8) + 1 + 160)
    );
}

/// Prefill of `prompt` on `ctx` and greedy decoding to `steps` tokens: the prefill logits,
/// the tokens and the session's counters.
fn reference_run<B: AsRef<[u8]>>(
    ctx: &Arc<Context>,
    cpu: &Model<B>,
    prompt: &[u32],
    steps: usize,
) -> (Vec<f32>, Vec<u32>, Counters) {
    let gpu = GpuModel::upload(Arc::clone(ctx), cpu).unwrap();
    let mut session = gpu.session(128).unwrap();
    let prefill = pollster::block_on(gpu.forward(&mut session, prompt)).unwrap();
    let mut tokens = vec![argmax(&prefill)];
    for _ in 1..steps {
        let last = &tokens[tokens.len() - 1..];
        let g = pollster::block_on(gpu.forward(&mut session, last)).unwrap();
        tokens.push(argmax(&g));
    }
    (prefill, tokens, session.counters())
}

/// Each family's tiny random model (tests/data/tiny_models/, which tests/model_families.rs
/// checks against llama.cpp) on every variant against its CPU twin: Qwen2's Q/K/V biases and
/// tied output, Qwen3's per-head QK-norm with heads wider than n_embd / n_head, Phi-3's fused
/// tensors (uploaded as row ranges) and RoPE factors, Llama 3.1's frequency factors, Gemma 3's
/// scaled embedding, post-norms, GELU and sliding-window layers with their own RoPE base (the
/// 40-token prompt outgrows its window of 8), and both RoPE pairings. A 40-token prompt, then
/// 6 greedy decode steps.
#[test]
fn every_family_matches_the_cpu() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_models");
    for ctx in contexts() {
        for arch in ["llama", "llama3", "qwen2", "qwen3", "phi3", "gemma3"] {
            let file = std::fs::read(format!("{dir}/{arch}.gguf")).unwrap();
            let mut cpu = Model::from_gguf_bytes(&file[..]).unwrap();
            cpu.set_exact(true);
            let gpu = GpuModel::upload(Arc::clone(&ctx), &cpu).unwrap();
            let mut gpu_session = gpu.session(64).unwrap();
            let mut cpu_session = cpu.session_with(64, gpu_session.kv_precision()).unwrap();
            let mut next: Vec<u32> = (0..40).map(|i| (i * 53 + 7) % 317).collect();
            let mut worst = 0f32;
            for step in 0..7 {
                let c = cpu.forward(&mut cpu_session, &next).unwrap();
                let g = pollster::block_on(gpu.forward(&mut gpu_session, &next)).unwrap();
                let err = relative_error(&g, &c);
                let what = format!("{arch} ({}) step {step}", ctx.variant().name());
                assert!(err < 1e-4, "{what}: relative logit error {err}");
                assert_eq!(argmax(&g), argmax(&c), "{what}: top-1 differs");
                worst = worst.max(err);
                next = vec![argmax(&c)];
            }
            eprintln!(
                "{arch} ({}): worst relative logit error {worst:.1e} over 7 calls",
                ctx.variant().name()
            );
        }
    }
}
