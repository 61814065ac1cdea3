//! The reference model's tokenizer against llama.cpp's token ids on the recorded test set
//! (tests/fixtures/model/tokenize.json, from scripts/record_llama_reference.mjs).

mod model_support;

use model_support::{fixture, ids, reference_gguf};
use poot::tokenizer::Tokenizer;

#[test]
fn token_ids_equal_llama_cpp_on_the_whole_test_set() {
    let file = reference_gguf();
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    let cases = fixture("tokenize.json");
    let mut failures = Vec::new();
    let cases = cases["cases"].as_array().unwrap();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (key, special) in [("ids", true), ("ids_no_special", false)] {
            let want = ids(&case[key]);
            let got = tok.encode(text, false, special);
            if got != want {
                failures.push(format!(
                    "{text:?} (parse_special={special}):\n  ours     {got:?}\n  llama.cpp {want:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        2 * cases.len(),
        failures.join("\n")
    );
}

#[test]
fn decode_inverts_encode_on_the_test_set() {
    let file = reference_gguf();
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    for case in fixture("tokenize.json")["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let got = tok.decode(&tok.encode(text, false, true), true);
        assert_eq!(String::from_utf8_lossy(&got), text);
    }
}

#[test]
fn chat_markers_are_single_tokens() {
    let file = reference_gguf();
    let tok = Tokenizer::from_gguf_bytes(&file).unwrap();
    assert_eq!(tok.encode("<|im_start|>user", false, true)[0], 1);
    assert_eq!(tok.encode("<|im_end|>", false, true), [2]);
    assert_eq!(tok.bos(), Some(1));
    assert_eq!(tok.eos(), Some(2));
    // add_bos_token is false for this model: add_special adds nothing.
    assert_eq!(tok.encode("Hi", true, true), tok.encode("Hi", false, true));
}
