//! No grammar-backed schema fails mid-generation: every schema of JSONSchemaBench and the
//! SchemaStore corpus that compiles to the grammar engine (by default, and with listed keys
//! only) is walked with the reference
//! model's vocabulary (SmolLM2-135M, 49,152 tokens): at each step the mask is computed, a
//! random allowed token is taken (half the time the longest allowed one, which moves
//! through several grammar positions at once), and a random disallowed token is tried and
//! must be refused as not allowed. A `limit_exceeded` after compiling is the failure this
//! test exists for: the request would already have had its 200.
//!
//! Beside it, every compiled schema's shortest completions are followed token by token from
//! points along a random walk (the path a run takes when `max_tokens` is near).
//!
//! Needs `POOT_REFERENCE_GGUF` (as `tests/constraint_reference_vocab.rs`; `make test` sets it).

mod json_schema_support;

use json_schema_support::*;
use poot::constraint::{Compiled, Constraint, Matcher};
use poot::gguf::Gguf;
use poot::json_schema::{JsonSchema, SchemaOptions};
use poot::limits::Limits;
use poot::vocab::Vocabulary;
use std::sync::Arc;

/// Tokens per walk, and walks per schema.
const STEPS: usize = 48;
const WALKS: usize = 2;

fn reference_vocab() -> Arc<Vocabulary> {
    let path = std::env::var("POOT_REFERENCE_GGUF")
        .expect("POOT_REFERENCE_GGUF is not set: run `make test`, which fetches the model");
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("POOT_REFERENCE_GGUF={path}: {e}"));
    let gguf = Gguf::parse(&file).expect("the reference model parses");
    Arc::new(Vocabulary::from_gguf(&gguf).expect("its vocabulary reads"))
}

/// By default, extra keys are open: every object that lists properties without
/// `additionalProperties` takes free-form values beside them (3,632 schemas run on the
/// grammar engine at this writing).
#[test]
fn grammar_backed_corpus_schemas_never_exceed_a_step_budget() {
    walk_corpus(SchemaOptions::DEFAULT, 3000);
}

/// The same with listed keys only (`guided_json_extra_keys: false`), where the grammar
/// engine runs the schemas whose DFA passes its bound or that hold free-form values.
#[test]
fn grammar_backed_corpus_schemas_with_listed_keys_only_never_exceed_a_step_budget() {
    walk_corpus(SchemaOptions { extra_keys: false }, 1000);
}

/// The length-safe close on every schema of both corpora that compiles (DFA- and grammar-
/// backed): at points along a random walk, the shortest completion split into the fewest
/// tokens is a path of allowed tokens that ends on a complete output, and its length is the
/// one the matcher reports. A run about to reach `max_tokens` follows exactly such a path.
#[test]
fn every_corpus_schema_closes_along_allowed_tokens() {
    let vocab = reference_vocab();
    let words = vocab.len().div_ceil(32);
    let mut rng = Rng(25);
    let (mut schemas, mut closes, mut close_tokens) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for (name, file) in jsonschemabench().into_iter().chain(schemastore()) {
        let Ok(compiled) = JsonSchema::compile(&file["schema"], "guided_json") else {
            continue;
        };
        schemas += 1;
        let constraint = Arc::new(Constraint::from_compiled(
            compiled.into_automaton(),
            vocab.clone(),
        ));
        let mut m = Matcher::new(constraint.clone());
        let mut text = Vec::new();
        let mut mask = vec![0u32; words];
        for step in 0..=16 {
            if step % 4 == 0 {
                let close = m.closing_len().and_then(|len| {
                    m.closing_bytes(len as usize)
                        .filter(|b| b.len() as u64 == len)
                });
                let Some(close) = close else {
                    failures.push(format!("{name}: no close after {text:?}"));
                    break;
                };
                let Some(path) = vocab.fewest_tokens(&close) else {
                    failures.push(format!("{name}: {close:?} has no split into tokens"));
                    break;
                };
                let mut end = m.clone();
                if let Some(e) = path.iter().find_map(|&t| end.advance(t).err()) {
                    failures.push(format!("{name}: closing {close:?} after {text:?}: {e}"));
                    break;
                }
                if !end.is_accepting() {
                    failures.push(format!(
                        "{name}: {close:?} after {text:?} does not complete"
                    ));
                    break;
                }
                closes += 1;
                close_tokens += path.len();
            }
            if m.fill_mask(&mut mask).is_err() {
                break;
            }
            let allowed: Vec<u32> = (0..vocab.len() as u32)
                .filter(|&t| mask[t as usize / 32] >> (t % 32) & 1 == 1)
                .filter(|&t| vocab.is_text(t))
                .collect();
            if allowed.is_empty() {
                break;
            }
            let token = allowed[rng.below(allowed.len())];
            m.advance(token).expect("an allowed token");
            text.extend_from_slice(vocab.bytes(token));
        }
    }
    eprintln!("{schemas} schemas, {closes} closes checked, {close_tokens} tokens along them");
    assert!(schemas > 5000, "only {schemas} schemas compiled");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

/// Walks every grammar-backed schema of both corpora compiled with `options`; at least
/// `min_schemas` must be grammar-backed.
fn walk_corpus(options: SchemaOptions, min_schemas: usize) {
    let vocab = reference_vocab();
    let words = vocab.len().div_ceil(32);
    let mut rng = Rng(24);
    let (mut schemas, mut steps, mut refused) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, file) in jsonschemabench().into_iter().chain(schemastore()) {
        let Ok(compiled) = JsonSchema::compile_with_options(
            &file["schema"],
            "guided_json",
            &Limits::DEFAULT,
            options,
        ) else {
            continue;
        };
        let automaton = compiled.into_automaton();
        if !matches!(automaton, Compiled::Grammar(_)) {
            continue;
        }
        schemas += 1;
        let constraint = Arc::new(Constraint::from_compiled(automaton, vocab.clone()));
        let mut mask = vec![0u32; words];
        'walks: for _ in 0..WALKS {
            let mut m = Matcher::new(constraint.clone());
            for _ in 0..STEPS {
                if let Err(e) = m.fill_mask(&mut mask) {
                    failures.push(format!(
                        "{name}: mask after {} tokens: {e}",
                        m.token_count()
                    ));
                    break 'walks;
                }
                let allowed: Vec<u32> = (0..vocab.len() as u32)
                    .filter(|&t| mask[t as usize / 32] >> (t % 32) & 1 == 1)
                    .filter(|&t| vocab.is_text(t))
                    .collect();
                // An invalid continuation: refused as not allowed, never out of budget.
                let bad = rng.below(vocab.len()) as u32;
                if mask[bad as usize / 32] >> (bad % 32) & 1 == 0 && vocab.is_text(bad) {
                    // A refused token leaves the matcher as it was.
                    match m.advance(bad) {
                        Err(e) if e.is_limit_exceeded() => {
                            failures.push(format!("{name}: refusing a token: {e}"));
                            break 'walks;
                        }
                        Err(_) => refused += 1,
                        Ok(()) => {
                            failures.push(format!("{name}: took a masked-out token"));
                            break 'walks;
                        }
                    }
                }
                if allowed.is_empty() {
                    break;
                }
                let token = if rng.below(2) == 0 {
                    *allowed
                        .iter()
                        .max_by_key(|&&t| vocab.bytes(t).len())
                        .expect("not empty")
                } else {
                    allowed[rng.below(allowed.len())]
                };
                if let Err(e) = m.advance(token) {
                    failures.push(format!("{name}: advancing an allowed token: {e}"));
                    break 'walks;
                }
                steps += 1;
            }
        }
    }
    eprintln!(
        "grammar-backed schemas: {schemas}, {steps} steps, {refused} invalid tokens refused, \
         {} failures",
        failures.len()
    );
    assert!(
        schemas > min_schemas,
        "only {schemas} grammar-backed schemas"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}
