//! The CPU forward pass on the reference model against llama.cpp's recorded outputs
//! (tests/fixtures/model/logits.json, from scripts/record_llama_reference.mjs).
//!
//! llama.cpp is not exact: it rounds activations to 8 bits before quantized dot products and
//! keeps K/V in f16, so its log-probabilities differ from this exact-f32 path by a few tenths
//! of a nat. The tests say what they measure:
//! - after prefill, the log-probability of each of llama.cpp's top-10 tokens within 0.5 nats;
//! - greedy tokens equal llama.cpp's for as long as llama.cpp's top-1/top-2 margin stays above
//!   1 nat (a smaller margin can flip under that numeric noise), so on a prompt whose margin
//!   stays above 1 nat at every step all 32 tokens are equal.

mod model_support;

use model_support::{fixture, ids, reference_gguf};
use poot::chat_template::render_gguf_user_prompt;
use poot::gguf::Gguf;
use poot::model::Model;
use poot::sampling::{argmax, log_softmax};
use poot::tokenizer::Tokenizer;

const TOP_TOLERANCE_NATS: f32 = 0.5;
const MARGIN_NATS: f64 = 1.0;

#[test]
fn prefill_logprobs_and_greedy_tokens_agree_with_llama_cpp() {
    let file = reference_gguf();
    let gguf = Gguf::parse(&file).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let mut model = Model::from_gguf_bytes(&file[..]).unwrap();
    model.set_threads(2);
    let fx = fixture("logits.json");
    let prompts = fx["prompts"].as_array().unwrap();
    assert!(prompts.len() >= 6, "the fixture needs at least 6 prompts");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut full_checks = 0;
    for p in prompts {
        let name = p["name"].as_str().unwrap();
        let prompt = p["prompt"].as_str().unwrap();
        if p["chat"].as_bool().unwrap() {
            let rendered =
                render_gguf_user_prompt(&gguf, &tok, p["user_message"].as_str().unwrap()).unwrap();
            assert_eq!(rendered, prompt, "{name}: chat template rendering differs");
        }
        let prompt_ids = tok.encode_prompt(prompt);
        assert_eq!(
            prompt_ids,
            ids(&p["prompt_ids"]),
            "{name}: prompt tokens differ"
        );

        let mut s = model.session(prompt_ids.len() + 40).unwrap();
        let logits = model.forward(&mut s, &prompt_ids).unwrap();
        let lp = log_softmax(&logits);
        let mut worst = 0f32;
        for t in p["top"].as_array().unwrap() {
            let id = t["id"].as_u64().unwrap() as usize;
            let want = t["logprob"].as_f64().unwrap() as f32;
            worst = worst.max((lp[id] - want).abs());
        }
        if worst > TOP_TOLERANCE_NATS {
            failures.push(format!(
                "{name}: top-10 log-probabilities differ by up to {worst:.3} nats"
            ));
        }

        let want = ids(&p["greedy_ids"]);
        let margins: Vec<f64> = p["greedy_margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();
        let mut got = Vec::new();
        let mut logits = logits;
        for _ in 0..want.len() {
            let next = argmax(&logits);
            got.push(next);
            logits = model.forward(&mut s, &[next]).unwrap();
        }
        // Steps before llama.cpp's first margin under 1 nat must agree.
        let confident = margins.iter().take_while(|&&m| m > MARGIN_NATS).count();
        if got[..confident] != want[..confident] {
            failures.push(format!("{name}: greedy tokens differ within the first {confident} confident steps:\n  ours      {got:?}\n  llama.cpp {want:?}"));
        }
        if confident == want.len() {
            full_checks += 1;
        }
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        report.push(format!(
            "{name}: top-10 max |Δlogprob| {worst:.3} nats; greedy equal for {same}/32 steps ({confident} confident); ours {:?}",
            String::from_utf8_lossy(&tok.decode(&got, true))
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        full_checks >= 1,
        "no prompt had a margin above {MARGIN_NATS} nat at every step"
    );
}
