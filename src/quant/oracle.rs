//! The oracle fixtures of tests/data/quant/ (written by scripts/quant_fixture.py): blocks of
//! Q2_K, Q3_K and IQ4_NL and their values as the `gguf` Python package dequantizes them.

use super::QuantType;

/// One fixture case: whole blocks of `ty` and the oracle's values for them.
pub(crate) struct Case {
    pub name: String,
    pub bytes: Vec<u8>,
    pub values: Vec<f32>,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The cases of `ty`'s fixture (a type with one).
pub(crate) fn cases(ty: QuantType) -> Vec<Case> {
    let text = match ty {
        QuantType::Q2_K => include_str!("../../tests/data/quant/q2_k.json"),
        QuantType::Q3_K => include_str!("../../tests/data/quant/q3_k.json"),
        QuantType::IQ4_NL => include_str!("../../tests/data/quant/iq4_nl.json"),
        other => panic!("no oracle fixture for {}", other.name()),
    };
    let fixture: serde_json::Value = serde_json::from_str(text).expect("fixture JSON");
    assert_eq!(fixture["type"].as_str(), Some(ty.name()));
    assert_eq!(fixture["block_len"].as_u64(), Some(ty.block_len() as u64));
    assert_eq!(
        fixture["block_bytes"].as_u64(),
        Some(ty.block_bytes() as u64)
    );
    fixture["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().expect("name").to_string(),
            bytes: hex(c["hex"].as_str().expect("hex")),
            values: hex(c["values"].as_str().expect("values"))
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        })
        .collect()
}

/// Dequantizes every case of `ty`'s fixture with [`super::dequantize`] and asserts the values
/// equal the oracle's bit for bit (both compute each element with the same f32 operations in
/// the same order, so there is no rounding to differ in). Returns the number of values
/// checked.
pub(crate) fn assert_dequantize_is_bit_exact(ty: QuantType) -> usize {
    let mut checked = 0;
    for case in cases(ty) {
        let mut got = vec![f32::NAN; case.values.len()];
        super::dequantize(ty, &case.bytes, &mut got).unwrap();
        let mut max_diff = 0f32;
        let mut first_mismatch = None;
        for (i, (g, w)) in got.iter().zip(&case.values).enumerate() {
            if g.to_bits() != w.to_bits() {
                max_diff = max_diff.max((g - w).abs());
                first_mismatch.get_or_insert((i, *g, *w));
            }
        }
        if let Some((i, g, w)) = first_mismatch {
            panic!(
                "{} `{}`: element {i} (block {}, index {}) is {g:e}, gguf-py has {w:e}; \
                 max difference {max_diff:e}",
                ty.name(),
                case.name,
                i / ty.block_len(),
                i % ty.block_len()
            );
        }
        checked += got.len();
    }
    checked
}
