//! The matvec shaders against their CPU twin `poot::quant::dot`, on the Vulkan adapter
//! (lavapipe in CI), for every format with a GPU kernel, at sizes that are not multiples of
//! the 64-invocation workgroup.
//!
//! Tolerance: |gpu - cpu| <= 1e-6 * sum_k |w_k x_k| + 1e-6 per output. The two sum in
//! different orders (the GPU in 64 strided partial sums and a tree), so the bound scales with
//! the magnitude of the terms rather than with the (possibly cancelling) result. Every variant
//! the adapter runs (`Context::every_variant`: f32, `shader-f16`, subgroups) meets the same
//! bound.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

mod common;

use common::Rng;
use poot::gpu::{Context, ContextOptions};
use poot::quant::{self, QuantType};

const REL_TOLERANCE: f32 = 1e-6;

/// A context per variant this adapter runs, the f32 one first.
fn contexts() -> Vec<Context> {
    pollster::block_on(Context::every_variant())
        .unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"))
}

fn random_values(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (rng.next_f32() - 0.5) * 4.0).collect()
}

/// Checks one matrix; returns the largest error as a fraction of its bound.
fn check(
    ctx: &Context,
    rng: &mut Rng,
    format: QuantType,
    rows: usize,
    cols: usize,
    tokens: usize,
) -> f32 {
    let bytes = quant::quantize(format, &random_values(rng, rows * cols)).unwrap();
    let row_bytes = format.row_bytes(cols).unwrap();
    let x = random_values(rng, tokens * cols);
    let matrix = ctx
        .upload_matrix("test", format, rows, cols, &bytes)
        .unwrap();
    let gpu = pollster::block_on(ctx.matvec(&matrix, &x, tokens)).unwrap();
    assert_eq!(gpu.len(), tokens * rows);
    let mut worst = 0f32;
    let mut weights = vec![0f32; cols];
    for r in 0..rows {
        let row = &bytes[r * row_bytes..][..row_bytes];
        quant::dequantize(format, row, &mut weights).unwrap();
        for t in 0..tokens {
            let xt = &x[t * cols..][..cols];
            let cpu = quant::dot(format, row, xt).unwrap();
            let magnitude: f32 = weights.iter().zip(xt).map(|(w, x)| (w * x).abs()).sum();
            let bound = REL_TOLERANCE * magnitude + 1e-6;
            let error = (gpu[t * rows + r] - cpu).abs();
            assert!(
                error <= bound,
                "{} ({}) {rows}x{cols} tokens={tokens}: row {r} token {t}: gpu {} cpu {cpu} (error {error} > {bound})",
                format.name(),
                ctx.variant().name(),
                gpu[t * rows + r]
            );
            worst = worst.max(error / bound);
        }
    }
    worst
}

#[test]
fn every_variant_the_adapter_has_is_run() {
    let variants: Vec<&str> = contexts().iter().map(|c| c.variant().name()).collect();
    let default = pollster::block_on(Context::new()).unwrap();
    eprintln!(
        "{}: the default context uses {}; the tests run {variants:?}",
        default.adapter().name,
        default.variant().name()
    );
    assert_eq!(variants.first(), Some(&"f32"), "the f32 path always runs");
    // Lavapipe (Mesa 22.3, LLVM 15) has both shader-f16 and subgroups (of 8): the default
    // context must open the device with both, and the tests must run every combination (the
    // f16 KV cache and the subgroup reductions are separate branches).
    if default.adapter().name.starts_with("llvmpipe") {
        assert_eq!(default.variant().name(), "f16+subgroups");
        assert_eq!(variants, ["f32", "f16", "subgroups", "f16+subgroups"]);
    }
    for (options, expected) in [
        ("f16", "subgroups"),
        ("subgroups", "f16"),
        ("f16,subgroups", "f32"),
    ] {
        let options = ContextOptions::without(options).unwrap();
        let ctx = pollster::block_on(Context::with_options(options)).unwrap();
        let v = ctx.variant();
        // Never a feature that was declined; a feature the adapter lacks is simply absent.
        assert!(
            (!v.f16 || options.f16) && (!v.subgroups || options.subgroups),
            "{options:?} opened {}",
            v.name()
        );
        if default.variant().name() == "f16+subgroups" {
            assert_eq!(v.name(), expected);
        }
    }
    assert!(ContextOptions::without("f64").is_err());
}

#[test]
fn block_formats_match_the_cpu_dot_product() {
    for ctx in contexts() {
        let ctx = &ctx;
        let mut rng = Rng::new(11);
        for format in [
            QuantType::Q4_1,
            QuantType::Q8_0,
            QuantType::Q4_0,
            QuantType::F16,
            QuantType::F32,
        ] {
            let mut worst = 0f32;
            // 65 and 130 rows: not multiples of anything the kernels use; 96 and 2080 columns:
            // 3 and 65 blocks, so some invocations get two blocks and others none.
            for (rows, cols, tokens) in [(1, 32, 1), (65, 96, 1), (130, 2080, 1), (7, 576, 3)] {
                worst = worst.max(check(ctx, &mut rng, format, rows, cols, tokens));
            }
            eprintln!(
                "{} ({}): worst error {:.3} of the tolerance",
                format.name(),
                ctx.variant().name(),
                worst
            );
        }
    }
}

#[test]
fn float_formats_take_rows_of_any_length() {
    for ctx in contexts() {
        let mut rng = Rng::new(12);
        for format in [QuantType::F16, QuantType::F32] {
            for (rows, cols) in [(3, 1), (5, 31), (66, 33), (2, 129)] {
                check(&ctx, &mut rng, format, rows, cols, 2);
            }
        }
    }
}

#[test]
fn a_mismatched_input_is_an_error_not_a_garbage_read() {
    let ctx = pollster::block_on(Context::new()).unwrap();
    let bytes = quant::quantize(QuantType::Q4_1, &[0.5; 64]).unwrap();
    let matrix = ctx
        .upload_matrix("test", QuantType::Q4_1, 2, 32, &bytes)
        .unwrap();
    let err = pollster::block_on(ctx.matvec(&matrix, &[1.0; 31], 1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 token(s) of 32 inputs need 32 values, got 31"
    );
    assert_eq!(err.param(), Some("x"));
}
