//! The dequantizers and dot products of every weight format, against the `gguf` Python
//! package's dequantizer (recorded by scripts/record_quant_reference.py) and against a plain
//! f64 dot product of the dequantized values.

mod common;

use common::Rng;
use poot::quant::{dequantize, dot, quantize, QuantType, ALL_TYPES};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn type_named(name: &str) -> QuantType {
    ALL_TYPES
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("unknown type {name}"))
}

#[test]
fn dequantize_equals_the_gguf_python_package() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/model/quant_reference.json"
    ))
    .unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    let mut seen = Vec::new();
    for case in cases {
        let ty = type_named(case["type"].as_str().unwrap());
        let bytes = hex(case["hex"].as_str().unwrap());
        let want: Vec<f32> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let mut got = vec![0f32; want.len()];
        dequantize(ty, &bytes, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Both compute in f32; only the order of `d * sc * q` may differ (1 ulp).
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1e-3),
                "{} element {i}: {g} vs gguf-py {w}",
                ty.name()
            );
        }
        seen.push(ty);
    }
    // Q2_K, Q3_K and IQ4_NL have fixtures of their own, checked bit for bit in src/quant/.
    let own = [QuantType::Q2_K, QuantType::Q3_K, QuantType::IQ4_NL];
    for ty in ALL_TYPES {
        assert!(
            seen.contains(&ty) || own.contains(&ty),
            "no fixture case for {}",
            ty.name()
        );
    }
}

/// A straightforward f64 dot product of the dequantized row: the oracle for the fused kernels.
fn oracle_dot(ty: QuantType, row: &[u8], x: &[f32]) -> (f64, f64) {
    let mut w = vec![0f32; x.len()];
    dequantize(ty, row, &mut w).unwrap();
    let exact: f64 = w
        .iter()
        .zip(x)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    let scale: f64 = w
        .iter()
        .zip(x)
        .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
        .sum();
    (exact, scale)
}

#[test]
fn dot_equals_dequantize_then_multiply() {
    let mut rng = Rng::new(7);
    for ty in ALL_TYPES {
        for &n in &[256usize, 512, 1536] {
            let w: Vec<f32> = (0..n).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let x: Vec<f32> = (0..n).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
            let row = quantize(ty, &w).unwrap();
            let got = f64::from(dot(ty, &row, &x).unwrap());
            let (want, scale) = oracle_dot(ty, &row, &x);
            // f32 accumulation over n terms: a few ulps of the sum of magnitudes.
            assert!(
                (got - want).abs() <= 1e-6 * scale * (n as f64).sqrt(),
                "{} n={n}: {got} vs {want}",
                ty.name()
            );
        }
    }
}

#[test]
fn quantize_round_trips_within_the_format_step() {
    let mut rng = Rng::new(11);
    // Worst-case error per element as a fraction of the block's value range: half a step of
    // the format's levels, plus the rounding of the 6-bit K-quant scales.
    let bound = |ty: QuantType| match ty {
        QuantType::F32 => 0.0,
        QuantType::F16 => 1e-3,
        QuantType::BF16 => 8e-3,
        QuantType::Q8_0 => 0.5 / 127.0 + 1e-3,
        QuantType::Q4_0 => 0.5 / 7.0 + 1e-3,
        QuantType::Q4_1 => 0.5 / 15.0 + 1e-3,
        QuantType::Q5_0 => 0.5 / 15.0 + 1e-3,
        QuantType::Q5_1 => 0.5 / 31.0 + 1e-3,
        QuantType::Q4_K => 0.5 / 15.0 + 0.05,
        QuantType::Q5_K => 0.5 / 31.0 + 0.05,
        QuantType::Q6_K => 0.5 / 31.0 + 0.03,
        // Q2_K: half a step of 3, plus the 4-bit scales and mins. Q3_K: a value of the sign
        // opposite the sub-block's extreme may clamp from +4 to +3 (one step of 4, an eighth of
        // the range), plus the 6-bit scales. IQ4_NL: the extreme is at -127, so the other
        // sign's extreme (+127) lands on the top level 113: 14/127 of half the range.
        QuantType::Q2_K => 0.5 / 3.0 + 0.05,
        QuantType::Q3_K => 1.0 / 8.0 + 0.03,
        QuantType::IQ4_NL => 14.0 / 254.0 + 1e-3,
    };
    for ty in ALL_TYPES {
        let n = 1024;
        let x: Vec<f32> = (0..n)
            .map(|i| (rng.next_f32() * 2.0 - 1.0) * (1.0 + (i / 256) as f32))
            .collect();
        let q = quantize(ty, &x).unwrap();
        assert_eq!(q.len(), ty.row_bytes(n).unwrap());
        let mut y = vec![0f32; n];
        dequantize(ty, &q, &mut y).unwrap();
        for (i, (a, b)) in x.iter().zip(&y).enumerate() {
            let range = 2.0 * (1.0 + (i / 256) as f32);
            assert!(
                (a - b).abs() <= bound(ty) * range,
                "{} element {i}: {a} -> {b}",
                ty.name()
            );
        }
        // Constant and zero blocks survive exactly enough (no division by a zero scale).
        let zeros = quantize(ty, &vec![0.0; 256]).unwrap();
        let mut back = vec![1f32; 256];
        dequantize(ty, &zeros, &mut back).unwrap();
        assert!(
            back.iter().all(|&v| v == 0.0),
            "{} zeros -> {:?}",
            ty.name(),
            &back[..4]
        );
    }
}
