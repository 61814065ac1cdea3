//! Generation's default path on x86-64 (activations rounded to 8 bits per 32 elements before the
//! integer products, `src/quant/int8.rs`) against the exact-f32 reference
//! (`Model::set_exact(true)`) on the two real models `make test` fetches: SmolLM2-135M Q4_1
//! (POOT_REFERENCE_GGUF) and Gemma 3 270M Q4_K_M (POOT_GEMMA_GGUF).
//!
//! Each prompt is prefilled (exact on both: prompt passes always are), then 24 decode steps
//! are run on both models with the reference's greedy token fed to both (teacher forcing, so
//! one near-tie cannot make the rest incomparable). Per step, the log-probabilities of the
//! reference's top 10 tokens are compared, and the greedy tokens must agree wherever the
//! reference's top-1/top-2 margin is wider than [`MARGIN`].

use poot::model::Model;
use poot::sampling::log_softmax;
use poot::tokenizer::Tokenizer;

/// |rounded − exact| for a top-10 log-probability, in nats. Measured (`cargo test --release
/// --test activation_rounding -- --nocapture`, 720 values per model): SmolLM2 median 0.066,
/// max 0.82 (a token at −8 nats), 0.43 over tokens more likely than e^−3; Gemma 3 median 0.049,
/// max 0.32, 0.20. The same order as llama.cpp's own distance from the exact path
/// (tests/gemma3_270m.rs, tests/model_llama_cpp.rs).
const TOLERANCE: f32 = 1.0;
/// Tokens at least this likely (log-probability, nats) under the exact path...
const LIKELY: f32 = -3.0;
/// ...move by at most this much.
const LIKELY_TOLERANCE: f32 = 0.6;
/// The median of those differences, in nats.
const MEDIAN_TOLERANCE: f32 = 0.1;
/// A greedy choice the reference makes by more than this (nats of logit) must not flip.
const MARGIN: f32 = 0.5;

const PROMPTS: [&str; 3] = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The three primary colours of light are",
    "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"known_for\": [",
];

fn check(env: &str) {
    let path =
        std::env::var(env).unwrap_or_else(|_| panic!("{env} is not set (make test sets it)"));
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    let mut exact = Model::from_gguf_bytes(&file[..]).unwrap();
    exact.set_exact(true);
    let mut rounded = Model::from_gguf_bytes(&file[..]).unwrap();
    rounded.set_exact(false);
    let (mut worst, mut errors, mut steps, mut decisive) = (0f32, Vec::new(), 0, 0);
    let mut worst_likely = 0f32;
    for prompt in PROMPTS {
        let ids = tok.encode(prompt, true, true);
        let (mut se, mut sr) = (exact.session(128).unwrap(), rounded.session(128).unwrap());
        let mut le = exact.forward(&mut se, &ids).unwrap();
        let mut lr = rounded.forward(&mut sr, &ids).unwrap();
        for step in 0..25 {
            if step > 0 {
                let (pe, pr) = (log_softmax(&le), log_softmax(&lr));
                let mut order: Vec<usize> = (0..pe.len()).collect();
                order.sort_by(|&a, &b| pe[b].total_cmp(&pe[a]));
                for &id in &order[..10] {
                    let e = (pe[id] - pr[id]).abs();
                    assert!(
                        e <= TOLERANCE,
                        "{env} {prompt:?} step {step}: token {id} {} vs exact {}",
                        pr[id],
                        pe[id]
                    );
                    worst = worst.max(e);
                    errors.push(e);
                    if pe[id] >= LIKELY {
                        worst_likely = worst_likely.max(e);
                    }
                }
                steps += 1;
                if le[order[0]] - le[order[1]] > MARGIN {
                    decisive += 1;
                    let top = (0..lr.len())
                        .max_by(|&a, &b| lr[a].total_cmp(&lr[b]))
                        .unwrap();
                    assert_eq!(top, order[0], "{env} {prompt:?} step {step}: greedy token");
                }
            }
            let next = (0..le.len())
                .max_by(|&a, &b| le[a].total_cmp(&le[b]))
                .unwrap() as u32;
            le = exact.forward(&mut se, &[next]).unwrap();
            lr = rounded.forward(&mut sr, &[next]).unwrap();
        }
    }
    errors.sort_by(f32::total_cmp);
    let median = errors[errors.len() / 2];
    assert!(
        median <= MEDIAN_TOLERANCE,
        "{env}: median difference {median}"
    );
    eprintln!(
        "{env}: {steps} decode steps, top-10 log-probability |rounded - exact|: median {median:.4}, \
         max {worst:.4} nats (tolerance {TOLERANCE}), {worst_likely:.4} for tokens over {LIKELY} \
         (tolerance {LIKELY_TOLERANCE}); greedy equal at all {decisive} steps with a \
         margin over {MARGIN}"
    );
    assert!(decisive * 2 > steps, "too few decisive steps");
}

#[test]
fn smollm2_rounded_activations_stay_near_the_exact_path() {
    check("POOT_REFERENCE_GGUF");
}

#[test]
fn gemma3_rounded_activations_stay_near_the_exact_path() {
    check("POOT_GEMMA_GGUF");
}
