//! The forward pass on synthetic tiny models of every weight type, against a naive
//! implementation that recomputes the whole causal sequence from dequantized weights.

use super::synthetic::TinySpec;
use super::*;
use crate::quant::{QuantType, ALL_TYPES};

/// Weights dequantized to plain row-major f32 matrices.
struct Dense {
    c: Config,
    embd: Vec<f32>,
    out: Vec<f32>,
    out_norm: Vec<f32>,
    layers: Vec<[Vec<f32>; 9]>,
}

fn dense(model: &Model<&[u8]>) -> Dense {
    let f = model.bytes();
    let l = |m: &Matrix| m.to_f32(f);
    Dense {
        c: model.config.clone(),
        embd: l(&model.tok_embd),
        out: l(&model.output),
        out_norm: model.output_norm.clone(),
        layers: model
            .layers
            .iter()
            .map(|y| {
                [
                    y.attn_norm.clone(),
                    l(&y.wq),
                    l(&y.wk),
                    l(&y.wv),
                    l(&y.wo),
                    y.ffn_norm.clone(),
                    l(&y.w_gate),
                    l(&y.w_up),
                    l(&y.w_down),
                ]
            })
            .collect(),
    }
}

fn mv(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks_exact(x.len())
        .map(|r| {
            r.iter()
                .zip(x)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum::<f64>() as f32
        })
        .collect()
}

fn norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + f64::from(eps)).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, g)| (f64::from(*v) * s) as f32 * g)
        .collect()
}

/// Logits after the last of `tokens`, everything recomputed in f64 where it is cheap.
fn naive_logits(m: &Dense, tokens: &[u32]) -> Vec<f32> {
    let c = &m.c;
    let (d, hd) = (c.n_embd, c.head_dim);
    let mut xs: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&t| m.embd[t as usize * d..][..d].to_vec())
        .collect();
    let rot = |v: &mut [f32], pos: usize| {
        for head in v.chunks_exact_mut(hd) {
            for i in 0..c.rope_dim / 2 {
                let theta =
                    pos as f64 / f64::from(c.rope_base).powf(2.0 * i as f64 / c.rope_dim as f64);
                let (a, b) = (f64::from(head[2 * i]), f64::from(head[2 * i + 1]));
                head[2 * i] = (a * theta.cos() - b * theta.sin()) as f32;
                head[2 * i + 1] = (a * theta.sin() + b * theta.cos()) as f32;
            }
        }
    };
    for w in &m.layers {
        let hs: Vec<Vec<f32>> = xs.iter().map(|x| norm(x, &w[0], c.rms_eps)).collect();
        let mut qs: Vec<Vec<f32>> = hs.iter().map(|h| mv(&w[1], h)).collect();
        let mut ks: Vec<Vec<f32>> = hs.iter().map(|h| mv(&w[2], h)).collect();
        let vs: Vec<Vec<f32>> = hs.iter().map(|h| mv(&w[3], h)).collect();
        for (p, (q, k)) in qs.iter_mut().zip(ks.iter_mut()).enumerate() {
            rot(q, p);
            rot(k, p);
        }
        for i in 0..xs.len() {
            let mut att = vec![0f32; d];
            for h in 0..c.n_head {
                let kh = h / (c.n_head / c.n_head_kv);
                let q = &qs[i][h * hd..][..hd];
                let s: Vec<f64> = (0..=i)
                    .map(|p| {
                        let k = &ks[p][kh * hd..][..hd];
                        q.iter()
                            .zip(k)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                for (p, e) in e.iter().enumerate() {
                    for j in 0..hd {
                        att[h * hd + j] += (e / z * f64::from(vs[p][kh * hd + j])) as f32;
                    }
                }
            }
            let o = mv(&w[4], &att);
            xs[i].iter_mut().zip(o).for_each(|(x, o)| *x += o);
            let h = norm(&xs[i], &w[5], c.rms_eps);
            let g = mv(&w[6], &h);
            let u = mv(&w[7], &h);
            let a: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| (f64::from(*g) / (1.0 + (-f64::from(*g)).exp())) as f32 * u)
                .collect();
            let o = mv(&w[8], &a);
            xs[i].iter_mut().zip(o).for_each(|(x, o)| *x += o);
        }
    }
    let h = norm(xs.last().unwrap(), &m.out_norm, c.rms_eps);
    mv(&m.out, &h)
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

const PROMPT: [u32; 7] = [1, 60, 75, 82, 82, 85, 2];

#[test]
fn prefill_matches_the_naive_forward_for_every_weight_type() {
    for ty in ALL_TYPES {
        let file = TinySpec {
            weight_type: ty,
            seed: u64::from(ty.ggml_id()) + 1,
            ..TinySpec::default()
        }
        .build();
        let mut model = Model::from_gguf_bytes(&file[..]).unwrap();
        // The output product is one input: exact, as the naive forward.
        model.set_exact(true);
        let mut s = model.session(32).unwrap();
        let got = model.forward(&mut s, &PROMPT).unwrap();
        let want = naive_logits(&dense(&model), &PROMPT);
        let diff = max_rel_diff(&got, &want);
        assert!(
            diff < 1e-4,
            "{}: max relative logit difference {diff}",
            ty.name()
        );
        assert_eq!(s.len(), PROMPT.len());
    }
}

#[test]
fn decode_steps_equal_a_longer_prefill() {
    let file = TinySpec {
        tied_output: false,
        ..TinySpec::default()
    }
    .build();
    let mut model = Model::from_gguf_bytes(&file[..]).unwrap();
    // Decode steps and prefill agree exactly on the exact path (rounded products: see
    // tests/activation_rounding.rs).
    model.set_exact(true);
    let mut a = model.session(16).unwrap();
    model.forward(&mut a, &PROMPT[..3]).unwrap();
    let mut got = Vec::new();
    for &t in &PROMPT[3..] {
        got = model.forward(&mut a, &[t]).unwrap();
    }
    let mut b = model.session(16).unwrap();
    let want = model.forward(&mut b, &PROMPT).unwrap();
    assert!(max_rel_diff(&got, &want) < 1e-5);
    assert_eq!(a.tokens(), &PROMPT);
    // Truncating and re-evaluating gives the same logits again.
    a.truncate(3);
    let again = model.forward(&mut a, &PROMPT[3..]).unwrap();
    assert!(max_rel_diff(&again, &want) < 1e-5);
}

#[test]
fn threads_give_the_same_logits() {
    let file = TinySpec {
        weight_type: QuantType::Q4_1,
        n_embd: 128,
        n_ff: 256,
        ..TinySpec::default()
    }
    .build();
    let mut model = Model::from_gguf_bytes(&file[..]).unwrap();
    // Prefill, then one decode step (a matrix-vector product per weight).
    let run = |model: &Model<&[u8]>| {
        let mut session = model.session(16).unwrap();
        let prefill = model.forward(&mut session, &PROMPT).unwrap();
        let step = model.forward(&mut session, &[7]).unwrap();
        (prefill, step)
    };
    for exact in [false, true] {
        model.set_exact(exact);
        model.set_threads(1);
        let one = run(&model);
        model.set_threads(3);
        let three = run(&model);
        assert_eq!(one, three, "exact: {exact}");
    }
}

#[test]
fn limits_and_bad_inputs_are_errors() {
    let file = TinySpec::default().build();
    let model = Model::from_gguf_bytes(&file[..]).unwrap();
    assert!(model.session(0).is_err());
    assert!(model.session(257).unwrap_err().is_limit_exceeded());
    let mut s = model.session(4).unwrap();
    let err = model.forward(&mut s, &[1, 2, 3, 4, 5]).unwrap_err();
    assert!(err.is_limit_exceeded(), "{err}");
    let err = model.forward(&mut s, &[9999]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "token id 9999 is outside the vocabulary of 265"
    );
    assert!(model.forward(&mut s, &[]).is_err());
    assert!(s.is_empty());
}

#[test]
fn malformed_models_are_errors_not_panics() {
    let file = TinySpec::default().build();
    // Every truncation fails cleanly.
    for cut in (0..file.len()).step_by(997) {
        assert!(Model::from_gguf_bytes(&file[..cut]).is_err());
    }
    // An unsupported tensor type (IQ2_XXS, ggml type 16) in place of attn_q's Q8_0.
    let name = b"blk.0.attn_q.weight";
    let at = file.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let mut bad = file.clone();
    bad[at + 4 + 16..at + 4 + 16 + 4].copy_from_slice(&16u32.to_le_bytes()); // after n_dims and 2 dims
    let err = Model::from_gguf_bytes(&bad[..]).unwrap_err();
    assert!(
        err.to_string()
            .contains("`blk.0.attn_q.weight` has ggml type 16, which is not supported"),
        "{err}"
    );
    let wrong = TinySpec {
        n_head: 3,
        ..TinySpec::default()
    }
    .build();
    let err = Model::from_gguf_bytes(&wrong[..]).unwrap_err();
    assert!(err.to_string().contains("do not divide"), "{err}");
}
