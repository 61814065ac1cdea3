//! Constrained generation with the CPU model on the reference model: every constraint kind
//! that has landed (guided_choice, guided_regex, guided_json) yields output that matches it.

mod model_support;

use std::sync::Arc;

use model_support::reference_gguf;
use poot::chat_template::render_gguf_user_prompt;
use poot::constraint::{Constraint, Matcher, Spec};
use poot::gguf::Gguf;
use poot::model::{generate, CpuBackend, Finish, Model};
use poot::sampling::{Params, Sampler};
use poot::tokenizer::Tokenizer;
use poot::vocab::Vocabulary;
use serde_json::json;

fn run(file: &[u8], request: serde_json::Value, user: &str, seed: u64) -> (String, Finish) {
    let gguf = Gguf::parse(file).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let vocab = Arc::new(Vocabulary::from_gguf(&gguf).unwrap());
    let mut model = Model::from_gguf_bytes(file).unwrap();
    model.set_threads(2);
    let spec = Spec::from_request(&request).unwrap().expect("a constraint");
    let mut matcher = Matcher::new(Arc::new(Constraint::from_spec(&spec, vocab).unwrap()));
    let prompt = tok.encode_prompt(&render_gguf_user_prompt(&gguf, &tok, user).unwrap());
    let session = model.session(prompt.len() + 64).unwrap();
    let mut sampler = Sampler::new(Params {
        temperature: 0.7,
        seed,
        ..Params::default()
    })
    .unwrap();
    let out = generate(
        &mut CpuBackend {
            model: &model,
            session,
        },
        &prompt,
        &mut sampler,
        Some(&mut matcher),
        48,
        &[],
    )
    .unwrap();
    (
        String::from_utf8(tok.decode(&out.ids, false)).unwrap(),
        out.finish,
    )
}

#[test]
fn every_landed_constraint_kind_holds_on_the_reference_model() {
    let file = reference_gguf();
    let (text, finish) = run(
        &file,
        json!({"guided_choice": ["yes", "no", "maybe"]}),
        "Is the sky blue?",
        1,
    );
    assert!(["yes", "no", "maybe"].contains(&text.as_str()), "{text:?}");
    assert_eq!(finish, Finish::Stop);

    let (text, finish) = run(
        &file,
        json!({"guided_regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}),
        "When did the Berlin wall fall?",
        2,
    );
    assert!(
        regex::Regex::new(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
            .unwrap()
            .is_match(&text),
        "{text:?}"
    );
    assert_eq!(finish, Finish::Stop);

    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 1, "maximum": 120}},
        "required": ["name", "age"]
    });
    let (text, finish) = run(
        &file,
        json!({"guided_json": schema}),
        "Make a character.",
        3,
    );
    if finish == Finish::Stop {
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let age = v["age"].as_i64().unwrap();
        assert!(
            (1..=120).contains(&age) && v["name"].as_str().unwrap().len() <= 12,
            "{text}"
        );
    } else {
        assert!(text.starts_with('{'), "{text:?}");
    }
}
