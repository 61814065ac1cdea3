//! The GPU kernel `shaders/apply_token_mask.wgsl` against its CPU twin
//! `poot::mask::apply_token_mask`, on whatever Vulkan adapter is present (lavapipe in CI).
//!
//! No adapter is a failure, not a skip: `make test` installs the software adapter.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

mod common;

use common::Rng;
use poot::gpu::Context;
use poot::mask::{apply_token_mask, words_for};

const SIZES: [usize; 6] = [1, 31, 32, 33, 49_152, 262_144];

fn context() -> Context {
    pollster::block_on(Context::new()).unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"))
}

/// Logits with the awkward values a real model can produce next to ordinary ones. With
/// `coarse`, values come from {-1, 0, 1, 2}, so the maximum is tied many times over.
fn random_logits(rng: &mut Rng, n: usize, coarse: bool) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.below(100) {
            _ if coarse => rng.below(4) as f32 - 1.0,
            0 => f32::NAN,
            1 => f32::NEG_INFINITY,
            2 => -0.0,
            3 => 0.0,
            // A few repeated values so ties actually happen.
            4..=9 => 1.5,
            _ => (rng.next_f32() - 0.5) * 40.0,
        })
        .collect()
}

/// Masks of several densities; `density` is the percentage of allowed tokens.
fn random_mask(rng: &mut Rng, n: usize, density: usize) -> Vec<u32> {
    let mut words = vec![0u32; words_for(n)];
    for id in 0..n {
        if rng.below(100) < density {
            words[id / 32] |= 1 << (id % 32);
        }
    }
    // Garbage in the padding bits past the vocabulary must be ignored by both sides.
    if !n.is_multiple_of(32) {
        *words.last_mut().unwrap() |= !((1u32 << (n % 32)) - 1) & rng.next_u32();
    }
    words
}

fn assert_same_as_cpu(ctx: &Context, logits: &[f32], mask: &[u32], what: &str) {
    let mut cpu_logits = logits.to_vec();
    let cpu = apply_token_mask(&mut cpu_logits, mask);
    let mut gpu_logits = logits.to_vec();
    let gpu = pollster::block_on(ctx.apply_token_mask(&mut gpu_logits, mask));
    match (&cpu, &gpu) {
        (Ok(c), Ok(g)) => assert_eq!(c, g, "{what}: argmax differs"),
        (Err(c), Err(g)) => {
            assert_eq!(c.code(), g.code(), "{what}");
            assert_eq!(c.to_string(), g.to_string(), "{what}");
        }
        _ => panic!("{what}: CPU gave {cpu:?}, GPU gave {gpu:?}"),
    }
    if cpu.is_ok() {
        let cpu_bits: Vec<u32> = cpu_logits.iter().map(|x| x.to_bits()).collect();
        let gpu_bits: Vec<u32> = gpu_logits.iter().map(|x| x.to_bits()).collect();
        assert!(cpu_bits == gpu_bits, "{what}: masked logits differ");
    }
}

#[test]
fn gpu_equals_cpu_on_random_logits_and_masks() {
    let ctx = context();
    eprintln!("adapter: {:?}", ctx.adapter());
    let mut rng = Rng::new(0x5eed);
    for n in SIZES {
        for coarse in [false, true] {
            let logits = random_logits(&mut rng, n, coarse);
            for density in [100, 50, 3] {
                let mask = random_mask(&mut rng, n, density);
                let what = format!("n={n} density={density}% coarse={coarse}");
                assert_same_as_cpu(&ctx, &logits, &mask, &what);
            }
        }
        let logits = random_logits(&mut rng, n, false);
        // Exactly one allowed token, at the far end of the vocabulary.
        let mut last_only = vec![0u32; words_for(n)];
        last_only[(n - 1) / 32] = 1 << ((n - 1) % 32);
        assert_same_as_cpu(&ctx, &logits, &last_only, &format!("n={n} last token only"));
    }
}

#[test]
fn all_zero_mask_is_the_same_clear_error_on_gpu() {
    let ctx = context();
    for n in SIZES {
        let mut logits = vec![1.0; n];
        let err = pollster::block_on(ctx.apply_token_mask(&mut logits, &vec![0; words_for(n)]))
            .expect_err("an all-zero mask has no argmax");
        assert_eq!(err.code(), "no_allowed_token");
        assert_eq!(err.param(), Some("mask"));
        assert!(
            err.to_string().contains(&format!("none of the {n} tokens")),
            "{err}"
        );
    }
}

#[test]
fn invalid_shapes_are_refused_before_any_gpu_work() {
    let ctx = context();
    let err = pollster::block_on(ctx.apply_token_mask(&mut [1.0; 40], &[1])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a mask over 40 tokens needs 2 u32 words, got 1"
    );
    let err = pollster::block_on(ctx.apply_token_mask(&mut [], &[])).unwrap_err();
    assert_eq!(err.code(), "invalid_input");
}
