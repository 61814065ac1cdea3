//! Each forward-pass kernel against its CPU twin in `crate::model`, on seeded random inputs
//! whose sizes are not multiples of the 64-invocation workgroup, on the Vulkan adapter
//! (lavapipe in CI). Tolerances are stated per kernel with what they measure, and every
//! variant the adapter runs (f32, and with `shader-f16` / subgroups where it has them) must
//! meet the same ones.

use super::ops::{attention_params, AttentionShape};
use super::Context;
use crate::model;

/// SplitMix64, so every input is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        (crate::sampling::splitmix64(&mut self.0) >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next_f32()).collect()
    }
}

/// A context per variant this adapter runs, the f32 one first.
fn contexts() -> Vec<Context> {
    pollster::block_on(Context::every_variant())
        .unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"))
}

fn buffer(ctx: &Context, data: &[f32]) -> wgpu::Buffer {
    ctx.storage_buffer(
        "test",
        bytemuck::cast_slice(data),
        wgpu::BufferUsages::COPY_SRC,
    )
}

fn encoder(ctx: &Context) -> wgpu::CommandEncoder {
    ctx.device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("test"),
        })
}

/// Submits the encoder with a copy of `output` and reads it back.
fn finish(ctx: &Context, mut encoder: wgpu::CommandEncoder, output: &wgpu::Buffer) -> Vec<f32> {
    let readback = ctx.readback_buffer("test.readback", output.size());
    encoder.copy_buffer_to_buffer(output, 0, &readback, 0, output.size());
    ctx.queue.submit([encoder.finish()]);
    let bytes = pollster::block_on(ctx.read_buffer(&readback)).unwrap();
    bytemuck::cast_slice(&bytes).to_vec()
}

/// Asserts `|gpu - cpu| <= rel * scale + abs` element-wise, where `scale` is the magnitude
/// the caller says the error should be measured against; returns the worst fraction used.
fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], scale: &[f32], rel: f32, abs: f32) -> f32 {
    assert_eq!(gpu.len(), cpu.len(), "{what}: length");
    let mut worst = 0f32;
    for (i, ((g, c), s)) in gpu.iter().zip(cpu).zip(scale).enumerate() {
        let bound = rel * s.abs() + abs;
        let error = (g - c).abs();
        assert!(
            error <= bound,
            "{what}[{i}]: gpu {g} cpu {c}, error {error} > {bound}"
        );
        worst = worst.max(error / bound);
    }
    eprintln!("{what}: worst error {worst:.3} of the tolerance");
    worst
}

fn config(heads: usize, kv_heads: usize, head_dim: usize, rope_dim: usize) -> model::Config {
    model::Config {
        arch: model::Arch::Llama,
        n_vocab: 1,
        n_embd: heads * head_dim,
        n_layer: 1,
        n_head: heads,
        n_head_kv: kv_heads,
        head_dim,
        n_ff: 1,
        rope_dim,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
        context_length: 4096,
        sliding_window: None,
        rope_base_local: 10_000.0,
        rope_freqs: None,
        rope_factors_long: None,
        rope_factors_short: None,
        rope_original_context: usize::MAX,
        rope_attn_factor: 1.0,
        final_logit_softcap: None,
    }
}

#[test]
fn rms_norm_matches_cpu() {
    // Tolerance: 1e-5 relative to each output, + 1e-6. The CPU sums squares in f64, the GPU
    // in f32 over 64 partial sums; both then scale in f32.
    for ctx in contexts() {
        let ctx = &ctx;
        let mut rng = Rng(1);
        for (d, tokens) in [(576, 3), (65, 2), (1, 1)] {
            let x = rng.values(d * tokens);
            let w = rng.values(d);
            let mut cpu = vec![0f32; d * tokens];
            model::rms_norm(&x, &w, 1e-5, &mut cpu);
            let out = buffer(ctx, &vec![0.0; d * tokens]);
            let mut enc = encoder(ctx);
            let inputs = (&buffer(ctx, &x), &buffer(ctx, &w), &out);
            pollster::block_on(ctx.record_rms_norm(&mut enc, inputs, d, tokens, 1e-5)).unwrap();
            let gpu = finish(ctx, enc, &out);
            let what = format!("rms_norm ({}) d={d}", ctx.variant().name());
            assert_close(&what, &gpu, &cpu, &cpu, 1e-5, 1e-6);
        }
    }
}

#[test]
fn rope_matches_cpu_for_whole_and_partial_rotation_in_both_pairings() {
    // Tolerance: 1e-6 relative to the larger magnitude in the head, + 1e-7: the same f32
    // products, possibly fused differently.
    for ctx in contexts() {
        let ctx = &ctx;
        let mut rng = Rng(2);
        for halves in [false, true] {
            for (heads, head_dim, rope_dim, pos0, tokens) in
                [(9, 64, 64, 100, 3), (3, 64, 32, 4000, 2)]
            {
                let c = config(heads, heads, head_dim, rope_dim);
                let (cos, sin) = model::rope_table(&c, c.rope_base, None, pos0, tokens);
                let x = rng.values(tokens * heads * head_dim);
                let mut cpu = x.clone();
                let half = rope_dim / 2;
                let rotate = if halves {
                    model::rope_halves
                } else {
                    model::rope
                };
                for (i, token) in cpu.chunks_exact_mut(heads * head_dim).enumerate() {
                    for head in token.chunks_exact_mut(head_dim) {
                        rotate(head, &cos[i * half..][..half], &sin[i * half..][..half]);
                    }
                }
                // A rotated value mixes two of its head's values: scale by the head's largest.
                let scale: Vec<f32> = x
                    .chunks_exact(head_dim)
                    .flat_map(|h| {
                        let m = h.iter().fold(0f32, |m, v| m.max(v.abs()));
                        vec![2.0 * m; head_dim]
                    })
                    .collect();
                let xb = buffer(ctx, &x);
                let mut enc = encoder(ctx);
                let (cos_b, sin_b) = (buffer(ctx, &cos), buffer(ctx, &sin));
                let tables = (&xb, &cos_b, &sin_b);
                let record =
                    ctx.record_rope(&mut enc, tables, heads, head_dim, rope_dim, tokens, halves);
                pollster::block_on(record).unwrap();
                let gpu = finish(ctx, enc, &xb);
                assert_close(
                    &format!(
                        "rope ({}) rope_dim={rope_dim} halves={halves}",
                        ctx.variant().name()
                    ),
                    &gpu,
                    &cpu,
                    &scale,
                    1e-6,
                    1e-7,
                );
            }
        }
    }
}

#[test]
fn silu_mul_and_add_match_cpu() {
    // Tolerance: 1e-6 relative + 1e-7 (exp may differ by an ulp or two between the two).
    for ctx in contexts() {
        let ctx = &ctx;
        let variant = ctx.variant().name();
        let mut rng = Rng(3);
        let n = 1537;
        let (gate, up) = (rng.values(n), rng.values(n));
        // The CPU forward's SwiGLU step (src/model/mod.rs).
        let cpu: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let gb = buffer(ctx, &gate);
        let ub = buffer(ctx, &up);
        let mut enc = encoder(ctx);
        pollster::block_on(ctx.record_silu_mul(&mut enc, &gb, &ub, n, false)).unwrap();
        let what = format!("silu_mul ({variant})");
        assert_close(&what, &finish(ctx, enc, &gb), &cpu, &cpu, 1e-6, 1e-7);
        // Gemma's GeGLU: the CPU forward's gelu_tanh, with tanh through exp on the GPU.
        let cpu: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| model::gelu_tanh(*g) * u)
            .collect();
        let scale: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| (g * u).abs() + 1e-3)
            .collect();
        let gb = buffer(ctx, &gate);
        let mut enc = encoder(ctx);
        pollster::block_on(ctx.record_silu_mul(&mut enc, &gb, &ub, n, true)).unwrap();
        let what = format!("gelu_mul ({variant})");
        assert_close(&what, &finish(ctx, enc, &gb), &cpu, &scale, 1e-6, 1e-7);

        // A residual (period n) and a bias over rows of 29 (the Q/K/V biases).
        for period in [n, 29] {
            let (x, y) = (rng.values(n), rng.values(period));
            let cpu: Vec<f32> = x
                .iter()
                .enumerate()
                .map(|(i, x)| x + y[i % period])
                .collect();
            let xb = buffer(ctx, &x);
            let mut enc = encoder(ctx);
            let yb = buffer(ctx, &y);
            pollster::block_on(ctx.record_add(&mut enc, &xb, &yb, n, period)).unwrap();
            let what = format!("add ({variant}) period={period}");
            assert_close(&what, &finish(ctx, enc, &xb), &cpu, &cpu, 0.0, 0.0);
        }
    }
}

/// The CPU forward's attention loop (src/model/mod.rs), for one layer.
fn cpu_attention(shape: AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim: hd,
        pos0,
        tokens,
        window,
        ..
    } = shape;
    let (d, kv) = (heads * hd, kv_heads * hd);
    let group = heads / kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; tokens * d];
    for i in 0..tokens {
        let visible = pos0 + i + 1;
        // The CPU forward's sliding window: the last `window` positions.
        let first = if window == 0 {
            0
        } else {
            visible.saturating_sub(window)
        };
        for hq in 0..heads {
            let hk = hq / group;
            let qh = &q[i * d + hq * hd..][..hd];
            let mut s: Vec<f32> = (first..visible)
                .map(|p| crate::quant::dot_f32(qh, &k[p * kv + hk * hd..][..hd]) * scale)
                .collect();
            model::softmax(&mut s);
            let o = &mut out[i * d + hq * hd..][..hd];
            for (p, &w) in (first..visible).zip(&s) {
                for (o, &vv) in o.iter_mut().zip(&v[p * kv + hk * hd..][..hd]) {
                    *o += w * vv;
                }
            }
        }
    }
    out
}

/// A layer's empty K and V caches of `positions` x `kv_width`, in this device's element type.
fn kv_cache_pair(ctx: &Context, positions: usize, kv_width: usize) -> (wgpu::Buffer, wgpu::Buffer) {
    (
        ctx.kv_cache_buffer("test.k_cache", positions, kv_width),
        ctx.kv_cache_buffer("test.v_cache", positions, kv_width),
    )
}

/// Runs kv_store once: `shape.tokens` positions of `k` and `v` into `caches` at `shape.pos0`.
fn store(
    ctx: &Context,
    shape: AttentionShape,
    k: &[f32],
    v: &[f32],
    caches: &(wgpu::Buffer, wgpu::Buffer),
) {
    let uniform = ctx.params_buffer("test.kv_store", &attention_params(shape));
    let mut enc = encoder(ctx);
    let buffers = (&buffer(ctx, k), &buffer(ctx, v), &caches.0, &caches.1);
    pollster::block_on(ctx.record_kv_store(&mut enc, buffers, &uniform, shape)).unwrap();
    ctx.queue.submit([enc.finish()]);
}

/// A layer's K and V caches holding `k` and `v` (all `shape.capacity` positions), written by
/// the kv_store kernel: f16 on a device with `shader-f16`.
fn kv_caches(
    ctx: &Context,
    shape: AttentionShape,
    k: &[f32],
    v: &[f32],
) -> (wgpu::Buffer, wgpu::Buffer) {
    let caches = kv_cache_pair(ctx, shape.capacity, shape.kv_heads * shape.head_dim);
    let whole = AttentionShape {
        pos0: 0,
        tokens: shape.capacity,
        ..shape
    };
    store(ctx, whole, k, v, &caches);
    caches
}

/// `values` as the cache stores them: rounded to the nearest f16 on a `shader-f16` device.
fn as_cached(ctx: &Context, values: &[f32]) -> Vec<f32> {
    let precision = ctx.kv_precision();
    values.iter().map(|&x| precision.round(x)).collect()
}

#[test]
fn kv_store_writes_each_chunk_at_its_positions() {
    // Tolerance: f32 caches hold the values bit for bit; f16 ones within one f16 step of
    // the value (WGSL's f16(x) may round to either neighbour), so at most 2^-10 of |x|.
    for ctx in contexts() {
        let ctx = &ctx;
        let variant = ctx.variant().name();
        let mut rng = Rng(6);
        // kv_width 3 x 5 = 15: odd, so the f16 cache ends in a half word.
        let (kv_heads, head_dim, capacity) = (3, 5, 13);
        let kv = kv_heads * head_dim;
        let caches = kv_cache_pair(ctx, capacity, kv);
        let mut want_k = vec![0f32; capacity * kv];
        let mut want_v = vec![0f32; capacity * kv];
        // A prefill chunk, then decode steps: each write lands after the last.
        for (pos0, tokens) in [(0, 9), (9, 1), (10, 3)] {
            let shape = AttentionShape {
                heads: kv_heads,
                kv_heads,
                head_dim,
                pos0,
                tokens,
                capacity,
                window: 0,
            };
            let (k, v) = (rng.values(tokens * kv), rng.values(tokens * kv));
            want_k[pos0 * kv..][..tokens * kv].copy_from_slice(&k);
            want_v[pos0 * kv..][..tokens * kv].copy_from_slice(&v);
            store(ctx, shape, &k, &v, &caches);
        }
        for (cache, want, what) in [(&caches.0, &want_k, "k"), (&caches.1, &want_v, "v")] {
            let readback = ctx.readback_buffer("test.readback", cache.size());
            let mut enc = encoder(ctx);
            enc.copy_buffer_to_buffer(cache, 0, &readback, 0, cache.size());
            ctx.queue.submit([enc.finish()]);
            let bytes = pollster::block_on(ctx.read_buffer(&readback)).unwrap();
            let got: Vec<f32> = if ctx.variant().f16 {
                assert_eq!(bytes.len(), (capacity * kv * 2).next_multiple_of(4));
                bytes
                    .chunks_exact(2)
                    .take(capacity * kv)
                    .map(|h| crate::quant::f16_to_f32(u16::from_le_bytes([h[0], h[1]])))
                    .collect()
            } else {
                bytemuck::cast_slice(&bytes).to_vec()
            };
            let exact = as_cached(ctx, want);
            let rounded = got.iter().zip(&exact).filter(|(g, e)| g != e).count();
            for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                let bound = if ctx.variant().f16 {
                    w.abs() / 1024.0
                } else {
                    0.0
                };
                assert!(
                    (g - w).abs() <= bound,
                    "kv_store ({variant}) {what}[{i}]: {g} for {w}"
                );
            }
            eprintln!(
                "kv_store ({variant}) {what}: {} values, {rounded} not rounded to nearest even",
                got.len()
            );
        }
    }
}

#[test]
fn attention_matches_cpu_for_prefill_and_decode() {
    // Tolerance: 1e-5 relative to sum_p w_p |v_p| (the output's scale) + 1e-6: softmax and
    // the weighted sum run in a different order and with a different exp. The CPU twin
    // reads K and V as the cache holds them (rounded to f16 on a `shader-f16` device), so
    // the bound is the same for every variant; what the f16 cache itself changes is
    // measured on the whole model (tests/gpu_model.rs).
    for ctx in contexts() {
        let ctx = &ctx;
        let mut rng = Rng(4);
        // Whole context, and a sliding window of 16 (Gemma 3's local layers) that the later
        // positions outgrow.
        for (pos0, tokens, window) in [
            (0, 7, 0),
            (70, 1, 0),
            (129, 3, 0),
            (0, 7, 16),
            (70, 1, 16),
            (129, 3, 16),
        ] {
            let shape = AttentionShape {
                heads: 9,
                kv_heads: 3,
                head_dim: 64,
                pos0,
                tokens,
                capacity: 200,
                window,
            };
            let kv = shape.kv_heads * shape.head_dim;
            let q = rng.values(tokens * shape.heads * shape.head_dim);
            let k = rng.values(shape.capacity * kv);
            let v = rng.values(shape.capacity * kv);
            let (k_cached, v_cached) = (as_cached(ctx, &k), as_cached(ctx, &v));
            let cpu = cpu_attention(shape, &q, &k_cached, &v_cached);
            let v_abs: Vec<f32> = v_cached.iter().map(|x| x.abs()).collect();
            let scale = cpu_attention(shape, &q, &k_cached, &v_abs);
            let out = buffer(ctx, &vec![0.0; cpu.len()]);
            let scores = buffer(ctx, &vec![0.0; tokens * shape.heads * shape.capacity]);
            let (k_cache, v_cache) = kv_caches(ctx, shape, &k, &v);
            let mut enc = encoder(ctx);
            let bufs = (&buffer(ctx, &q), &k_cache, &v_cache, &scores, &out);
            pollster::block_on(ctx.record_attention(&mut enc, bufs, shape)).unwrap();
            let gpu = finish(ctx, enc, &out);
            assert_close(
                &format!(
                    "attention ({}) pos0={pos0} tokens={tokens}",
                    ctx.variant().name()
                ),
                &gpu,
                &cpu,
                &scale,
                1e-5,
                1e-6,
            );
        }
    }
}
