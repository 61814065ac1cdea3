//! The values that cross the Rust–JavaScript edge, both ways they could cross: as JSON text
//! (`serde_json` + `JSON.parse`/`JSON.stringify`, what the package does) and as JS values built
//! by `serde-wasm-bindgen`. `scripts/bench_wasm_boundary.sh` builds this for wasm32 and times
//! both in Node on the same values (the shapes `poot::api::response` writes).
#![cfg(target_arch = "wasm32")]

use poot::api::response::{choice_json, completion_json, content_chunk, logprobs_json, Meta};
use poot::api::run::TokenLogprob;
use poot::api::Endpoint;
use poot::model::Finish;
use poot::vocab::Vocabulary;
use serde::Serialize;
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;

/// The shape the package needs: plain objects (not `Map`s), `null` for missing.
fn to_js(value: &Value) -> Result<JsValue, JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(JsValue::from)
}

/// One value of each kind, built once.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Values {
    step: Value,
    step_logprobs: Value,
    response: Value,
}

#[wasm_bindgen]
impl Values {
    /// `content_bytes`: the length of the whole response's text.
    #[wasm_bindgen(constructor)]
    pub fn new(content_bytes: usize) -> Values {
        let meta = Meta {
            id: "chatcmpl-0123456789abcdef".into(),
            created: 1_764_900_000,
            model: "SmolLM2-135M-Instruct".into(),
            endpoint: Endpoint::Chat,
        };
        let tokens: Vec<Vec<u8>> = (0..64u32)
            .map(|i| format!(" tok{i}").into_bytes())
            .collect();
        let vocab = Vocabulary::new(tokens, vec![0]).expect("a vocabulary");
        let entry = TokenLogprob {
            token: 7,
            logprob: -0.25,
            top: (0..5).map(|i| (i, -1.5 - i as f32)).collect(),
        };
        let step = Value::from(vec![content_chunk(&meta, 0, " tok7", None)]);
        let step_logprobs = Value::from(vec![content_chunk(
            &meta,
            0,
            " tok7",
            Some(logprobs_json(Endpoint::Chat, &[entry], &vocab)),
        )]);
        let text: String = "{\"name\": \"Ada\", \"tags\": [\"a\", \"b\"]} "
            .chars()
            .cycle()
            .take(content_bytes)
            .collect();
        let choice = choice_json(Endpoint::Chat, 0, Some(&text), &[], None, Finish::Stop);
        let usage = json!({"prompt_tokens": 120, "completion_tokens": 300, "total_tokens": 420});
        let response = completion_json(&meta, vec![choice], usage);
        Values {
            step,
            step_logprobs,
            response,
        }
    }

    #[wasm_bindgen(js_name = stepText)]
    pub fn step_text(&self) -> String {
        self.step.to_string()
    }
    #[wasm_bindgen(js_name = stepValue)]
    pub fn step_value(&self) -> Result<JsValue, JsValue> {
        to_js(&self.step)
    }
    #[wasm_bindgen(js_name = stepLogprobsText)]
    pub fn step_logprobs_text(&self) -> String {
        self.step_logprobs.to_string()
    }
    #[wasm_bindgen(js_name = stepLogprobsValue)]
    pub fn step_logprobs_value(&self) -> Result<JsValue, JsValue> {
        to_js(&self.step_logprobs)
    }
    #[wasm_bindgen(js_name = responseText)]
    pub fn response_text(&self) -> String {
        self.response.to_string()
    }
    #[wasm_bindgen(js_name = responseValue)]
    pub fn response_value(&self) -> Result<JsValue, JsValue> {
        to_js(&self.response)
    }
}

/// A request read from JSON text, as `Constraint.fromRequest` and `LocalEngine.start` do;
/// returns its number of top-level fields so the parse is not optimised away.
#[wasm_bindgen(js_name = requestFromText)]
pub fn request_from_text(text: &str) -> Result<usize, JsValue> {
    let body: Value = serde_json::from_str(text).map_err(|e| JsValue::from_str(&e.to_string()))?;
    Ok(body.as_object().map_or(0, |o| o.len()))
}

/// The same request read from a JS object by `serde-wasm-bindgen`.
#[wasm_bindgen(js_name = requestFromValue)]
pub fn request_from_value(value: JsValue) -> Result<usize, JsValue> {
    let body: Value = serde_wasm_bindgen::from_value(value)?;
    Ok(body.as_object().map_or(0, |o| o.len()))
}
