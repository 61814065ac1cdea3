//! The GPU sampler `shaders/sample.wgsl` (`poot::gpu::Context::sample`) against its CPU twin
//! `poot::sampling::Sampler::sample`, on the Vulkan adapter (lavapipe in CI): the same logits,
//! mask, settings and seed must choose the same token.
//!
//! The draw is the same number on both sides (the CPU's generator makes it; the GPU gets it
//! rounded down to 24 bits), but the CPU accumulates probabilities sequentially in f64 and the
//! GPU in f32 trees, so a draw that lands within ~1e-6 of a boundary between two tokens' shares
//! (or a top-p cut that falls there) may go to the neighbour. The test counts those and states
//! the agreement; greedy must agree on every case.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

mod common;

use common::Rng;
use poot::gpu::Context;
use poot::mask::words_for;
use poot::sampling::{Params, Sampler};

/// A context per variant this adapter runs (f32, and subgroups where it has them), the f32
/// one first: each must choose the CPU sampler's token.
fn contexts() -> Vec<Context> {
    pollster::block_on(Context::every_variant())
        .unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"))
}

/// Logits shaped like a model's (a few large values over a broad bulk), with ties, NaN and
/// -inf now and then.
fn random_logits(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.below(1000) {
            0 => f32::NAN,
            1 => f32::NEG_INFINITY,
            2..=9 => 3.25,
            10..=19 => 8.0 + rng.next_f32() * 4.0,
            _ => (rng.next_f32() - 0.5) * 12.0,
        })
        .collect()
}

fn random_mask(rng: &mut Rng, n: usize) -> Option<Vec<u32>> {
    let density = [0, 1, 10, 60, 100][rng.below(5)];
    if density == 0 {
        return None;
    }
    let mut words = vec![0u32; words_for(n)];
    for id in 0..n {
        if rng.below(100) < density {
            words[id / 32] |= 1 << (id % 32);
        }
    }
    // At least one token, so most cases sample; the empty mask has its own test.
    let id = rng.below(n);
    words[id / 32] |= 1 << (id % 32);
    Some(words)
}

fn random_params(rng: &mut Rng) -> Params {
    Params {
        temperature: [0.0, 0.3, 0.7, 1.0, 1.6][rng.below(5)],
        top_k: [0, 0, 1, 5, 40][rng.below(5)],
        top_p: [1.0, 1.0, 0.95, 0.6][rng.below(4)],
        min_p: [0.0, 0.0, 0.05][rng.below(3)],
        seed: rng.next_u64(),
        ..Params::default()
    }
}

#[test]
fn gpu_sampler_chooses_the_cpu_samplers_token() {
    for ctx in contexts() {
        let mut rng = Rng::new(0x5a3b1e);
        // Not multiples of the 256-invocation workgroup, up to SmolLM2's vocabulary.
        let sizes = [1, 3, 97, 1000, 4099, 49_152];
        let (mut cases, mut agree, mut greedy_cases) = (0, 0, 0);
        let mut differ = Vec::new();
        for case in 0..360 {
            let n = sizes[case % sizes.len()];
            let logits = random_logits(&mut rng, n);
            let mask = random_mask(&mut rng, n);
            let params = random_params(&mut rng);
            let mut cpu_sampler = Sampler::new(params.clone()).unwrap();
            let mut device_sampler = cpu_sampler.clone();
            let cpu = cpu_sampler.sample(&mut logits.clone(), mask.as_deref(), &[]);
            let sampling = device_sampler.device_step().expect("no bias or penalties");
            let gpu = pollster::block_on(ctx.sample(&logits, mask.as_deref(), &sampling));
            cases += 1;
            match (cpu, gpu) {
                (Ok(c), Ok(g)) if c == g => agree += 1,
                (Err(c), Err(g)) => {
                    assert_eq!(c.code(), g.code(), "case {case}");
                    agree += 1;
                }
                (c, g) => {
                    assert!(
                        params.temperature != 0.0,
                        "{} case {case} (n={n}, greedy): cpu {c:?} gpu {g:?}",
                        ctx.variant().name()
                    );
                    differ.push(format!("case {case} n={n} {params:?}: cpu {c:?} gpu {g:?}"));
                }
            }
            if params.temperature == 0.0 {
                greedy_cases += 1;
            }
        }
        eprintln!(
            "GPU vs CPU sampler ({}): {agree}/{cases} cases choose the same token ({greedy_cases} \
         greedy, all equal); differing: {differ:#?}",
            ctx.variant().name()
        );
        // Near-ties are rare: with ~1e-6 of probability mass in doubt per boundary, a handful of
        // cases in 360 would already mean a real difference of method, not of rounding.
        assert!(
            differ.len() <= 2,
            "{} cases differ: {differ:#?}",
            differ.len()
        );
    }
}

#[test]
fn draws_follow_the_distribution_like_the_cpus() {
    // The same seed over many steps: both sides walk the same sequence of draws, so the
    // chosen sequences must match token for token (the logits are well separated here).
    for ctx in contexts() {
        let logits: Vec<f32> = (0..1001)
            .map(|i| ((i * 7919) % 1001) as f32 / 100.0)
            .collect();
        let params = Params {
            temperature: 0.8,
            top_k: 50,
            top_p: 0.9,
            seed: 11,
            ..Params::default()
        };
        let mut cpu = Sampler::new(params.clone()).unwrap();
        let mut device = Sampler::new(params).unwrap();
        for step in 0..40 {
            let c = cpu.sample(&mut logits.clone(), None, &[]).unwrap();
            let s = device.device_step().unwrap();
            let g = pollster::block_on(ctx.sample(&logits, None, &s)).unwrap();
            assert_eq!(c, g, "{} step {step}", ctx.variant().name());
        }
    }
}

#[test]
fn nothing_allowed_is_the_cpus_error() {
    for ctx in contexts() {
        let logits = vec![1.0f32; 70];
        let mut sampler = Sampler::new(Params::default()).unwrap();
        let s = sampler.device_step().unwrap();
        let none = vec![0u32; words_for(70)];
        let cpu = Sampler::new(Params::default())
            .unwrap()
            .sample(&mut logits.clone(), Some(&none), &[])
            .unwrap_err();
        let gpu = pollster::block_on(ctx.sample(&logits, Some(&none), &s)).unwrap_err();
        assert_eq!((gpu.code(), gpu.to_string()), (cpu.code(), cpu.to_string()));
        // Allowed tokens whose logits are all -inf or NaN: the sampler's own error.
        let mut all = vec![0u32; words_for(70)];
        all[0] = 0b11;
        let bad = [f32::NEG_INFINITY, f32::NAN];
        let mut logits = logits;
        logits[..2].copy_from_slice(&bad);
        let cpu = Sampler::new(Params::greedy())
            .unwrap()
            .sample(&mut logits.clone(), Some(&all), &[])
            .unwrap_err();
        let s = Sampler::new(Params::greedy())
            .unwrap()
            .device_step()
            .unwrap();
        let gpu = pollster::block_on(ctx.sample(&logits, Some(&all), &s)).unwrap_err();
        assert_eq!((gpu.code(), gpu.to_string()), (cpu.code(), cpu.to_string()));
    }
}
