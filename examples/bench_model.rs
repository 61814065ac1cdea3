//! Prompt-processing and generation speed of the CPU forward pass.
//!
//! `cargo run --release --example bench_model -- MODEL.gguf [THREADS] [PROMPT_TOKENS] [GEN_TOKENS] [exact]`
//! prints one JSON line: `{"threads":..,"pp_tokens":..,"pp_tok_s":..,"tg_tokens":..,"tg_tok_s":..}`.
//! The prompt is a fixed English text tokenized by the model, cut to PROMPT_TOKENS; generation
//! is greedy and ignores end-of-sequence tokens so every run does the same work.

use std::time::Instant;

use poot::model::Model;
use poot::sampling::argmax;
use poot::tokenizer::Tokenizer;

const TEXT: &str = "The history of the printing press begins in the fifteenth century, when \
Johannes Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from \
those used to make wine. Books, which had been copied by hand, became cheaper and more common, \
and ideas travelled faster than ever before across Europe. Within fifty years, presses were \
running in more than two hundred cities, and millions of volumes had been printed. Scholars \
argue about the effects, but most agree that printing helped to spread literacy, standardise \
languages, and support the scientific revolution that followed. ";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: bench_model MODEL.gguf [THREADS] [PROMPT_TOKENS] [GEN_TOKENS]");
    let threads: usize = args.get(2).map_or(1, |s| s.parse().expect("THREADS"));
    let pp: usize = args
        .get(3)
        .map_or(128, |s| s.parse().expect("PROMPT_TOKENS"));
    let tg: usize = args.get(4).map_or(64, |s| s.parse().expect("GEN_TOKENS"));
    let file = std::fs::read(path).expect("read the model");
    let tok = Tokenizer::from_gguf_bytes(&file).expect("tokenizer");
    let mut model = Model::from_gguf_bytes(&file[..]).expect("model");
    model.set_threads(threads);
    // `exact`: generation's products with f32 activations (the reference) where the default
    // is 8-bit (x86-64).
    if args.get(5).is_some_and(|s| s == "exact") {
        model.set_exact(true);
    }
    let exact = model.is_exact();
    let mut prompt = Vec::new();
    while prompt.len() < pp {
        prompt.extend(tok.encode(TEXT, false, false));
    }
    prompt.truncate(pp);
    let mut session = model.session(pp + tg + 1).expect("session");
    let t0 = Instant::now();
    let mut logits = model.forward(&mut session, &prompt).expect("prefill");
    let pp_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..tg {
        let next = argmax(&logits);
        logits = model.forward(&mut session, &[next]).expect("decode");
    }
    let tg_s = t1.elapsed().as_secs_f64();
    println!(
        "{{\"exact\":{exact},\"threads\":{threads},\"pp_tokens\":{pp},\"pp_tok_s\":{:.2},\"tg_tokens\":{tg},\"tg_tok_s\":{:.2}}}",
        pp as f64 / pp_s,
        tg as f64 / tg_s
    );
}
