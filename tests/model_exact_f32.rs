//! The CPU forward pass against an independent float64 numpy implementation over the `gguf`
//! Python package's dequantizer (scripts/exact_f32_check.py, recorded in
//! tests/fixtures/model/exact_f32.json).
//!
//! Tolerance: each recorded logit within 1e-3 × max|logit| of the prompt (relative to the
//! logit vector's scale, since logits near zero have no meaningful relative error), and greedy
//! tokens equal at every step whose recorded top-1/top-2 margin exceeds that tolerance.

mod model_support;

use model_support::{fixture, ids, reference_gguf};
use poot::model::Model;
use poot::sampling::argmax;

const RELATIVE: f64 = 1e-3;

#[test]
fn logits_and_greedy_tokens_agree_with_the_exact_reference() {
    let file = reference_gguf();
    let mut model = Model::from_gguf_bytes(&file[..]).unwrap();
    model.set_threads(2);
    model.set_exact(true);
    let fx = fixture("exact_f32.json");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for p in fx["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let prompt = ids(&p["prompt_ids"]);
        let scale = p["scale"].as_f64().unwrap();
        let tol = RELATIVE * scale;
        let mut s = model.session(prompt.len() + 16).unwrap();
        let mut logits = model.forward(&mut s, &prompt).unwrap();
        let mut worst = 0f64;
        for (id, want) in ids(&p["ids"]).iter().zip(p["logits"].as_array().unwrap()) {
            worst = worst.max((f64::from(logits[*id as usize]) - want.as_f64().unwrap()).abs());
        }
        if worst > tol {
            failures.push(format!(
                "{name}: a logit differs by {worst:.2e} > {tol:.2e} (1e-3 × {scale:.2})"
            ));
        }
        let want = ids(&p["greedy_ids"]);
        let margins = p["greedy_logit_margins"].as_array().unwrap();
        let mut got = Vec::new();
        for (i, m) in margins.iter().enumerate() {
            let next = argmax(&logits);
            got.push(next);
            if next != want[i] {
                if m.as_f64().unwrap() > tol {
                    failures.push(format!(
                        "{name}: greedy step {i} took {next}, the reference {} (margin {m})",
                        want[i]
                    ));
                }
                break; // past a (legitimate) tie the sequences diverge
            }
            if i + 1 < margins.len() {
                logits = model.forward(&mut s, &[next]).unwrap();
            }
        }
        report.push(format!(
            "{name}: max |Δlogit| {worst:.2e} ({:.1e} of scale {scale:.1}); greedy {}/{} equal",
            worst / scale,
            got.iter().zip(&want).take_while(|(a, b)| a == b).count(),
            want.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
