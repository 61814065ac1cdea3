//! The GPU forward pass (`poot::gpu::Model`) against the CPU reference (`poot::model::Model`):
//! synthetic tiny models in every weight format with a GPU kernel, and a short run of the
//! reference model (SmolLM2-135M-Instruct Q4_1, env POOT_REFERENCE_GGUF).
//!
//! Metric: max |gpu - cpu| over the logits, divided by max |cpu| (relative to the logit
//! scale, since individual logits near zero have no meaningful relative error), plus top-1
//! agreement; greedy decoding must produce the same tokens. Every variant the adapter runs
//! (f32, `shader-f16`, subgroups: `Context::every_variant`) is held to the same bounds.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use std::sync::Arc;

use poot::gpu::{Context, Model as GpuModel};
use poot::model::synthetic::TinySpec;
use poot::model::Model;
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

/// max |a - b| / max |b|.
fn relative_error(gpu: &[f32], cpu: &[f32]) -> f32 {
    let scale = cpu.iter().fold(0f32, |m, x| m.max(x.abs()));
    gpu.iter()
        .zip(cpu)
        .fold(0f32, |m, (g, c)| m.max((g - c).abs()))
        / scale
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
        ] {
            for tied_output in [true, false] {
                let spec = TinySpec {
                    weight_type,
                    tied_output,
                    n_layer: 2,
                    ..TinySpec::default()
                };
                let file = spec.build();
                let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
                let gpu = GpuModel::upload(Arc::clone(&ctx), &cpu).unwrap();
                let mut cpu_session = cpu.session(96).unwrap();
                let mut gpu_session = gpu.session(96).unwrap();
                // A prompt longer than one GPU chunk (64), then decode steps.
                let prompt: Vec<u32> = (0..70).map(|i| 3 + (i * 37) % 200).collect();
                let mut next = prompt;
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
                }
                assert_eq!(gpu_session.len(), cpu_session.len());
            }
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
    let tokenizer = poot::tokenizer::Tokenizer::from_gguf_bytes(&file).unwrap();
    let prompt = tokenizer.encode(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        false,
        true,
    );
    const STEPS: usize = 16;
    let mut cpu_session = cpu.session(128).unwrap();
    let cpu_prefill = cpu.forward(&mut cpu_session, &prompt).unwrap();
    let mut cpu_tokens = vec![argmax(&cpu_prefill)];
    for _ in 1..STEPS {
        let c = cpu
            .forward(&mut cpu_session, &cpu_tokens[cpu_tokens.len() - 1..])
            .unwrap();
        cpu_tokens.push(argmax(&c));
    }
    eprintln!(
        "greedy: {:?}",
        String::from_utf8_lossy(&tokenizer.decode(&cpu_tokens, false))
    );
    // The f32 variant's prefill logits, which the others are also compared with.
    let mut f32_prefill: Option<Vec<f32>> = None;
    for ctx in contexts() {
        let variant = ctx.variant().name();
        let gpu = GpuModel::upload(Arc::clone(&ctx), &cpu).unwrap();
        let mut gpu_session = gpu.session(128).unwrap();
        let g = pollster::block_on(gpu.forward(&mut gpu_session, &prompt)).unwrap();
        let err = relative_error(&g, &cpu_prefill);
        let vs_f32 = f32_prefill.as_ref().map(|f| relative_error(&g, f));
        let vs_f32_text = vs_f32.map_or("-".to_owned(), |e| format!("{e:.2e}"));
        eprintln!(
            "{variant}: prefill of {} tokens: relative logit error {err:.2e} (vs the f32 \
             variant: {vs_f32_text})",
            prompt.len()
        );
        assert!(err < 1e-4, "{variant} prefill: relative logit error {err}");
        if let Some(vs_f32) = vs_f32 {
            assert!(
                vs_f32 < 1e-4,
                "{variant} prefill vs f32: relative error {vs_f32}"
            );
        }
        let mut gpu_tokens = vec![argmax(&g)];
        for _ in 1..STEPS {
            let last = &gpu_tokens[gpu_tokens.len() - 1..];
            let g = pollster::block_on(gpu.forward(&mut gpu_session, last)).unwrap();
            gpu_tokens.push(argmax(&g));
        }
        assert_eq!(gpu_tokens, cpu_tokens, "{variant}: greedy tokens differ");
        f32_prefill.get_or_insert(g);
    }
}
