//! The JavaScript bindings: the only module that touches wasm-bindgen or js-sys.
//!
//! Each export parses its arguments, calls one core function and converts the result.
//! Errors cross as JS `Error`s carrying `code`, `param` and `status` (400 for the caller's
//! fault, 500 for ours), so the TypeScript layer can build OpenAI-shaped error bodies.

use wasm_bindgen::prelude::*;

use crate::error::Error;

mod constraint;
mod engine;

#[wasm_bindgen]
extern "C" {
    /// A JS `Error` with the fields the TypeScript layer reads; wasm-bindgen writes the
    /// setters, so no property is set by name through `Reflect`.
    #[wasm_bindgen(extends = js_sys::Error)]
    type ErrorWithCode;
    #[wasm_bindgen(method, setter = code)]
    fn set_code(this: &ErrorWithCode, code: &str);
    #[wasm_bindgen(method, setter = param)]
    fn set_param(this: &ErrorWithCode, param: &JsValue);
    #[wasm_bindgen(method, setter = status)]
    fn set_status(this: &ErrorWithCode, status: u16);
}

/// Turns a crate error into a JS `Error` with `code`, `param` and `status` properties.
fn to_js_error(error: Error) -> JsValue {
    let js: ErrorWithCode = js_sys::Error::new(error.message()).unchecked_into();
    js.set_code(error.code());
    // `null`, not `undefined`, when no field is to blame (OpenAI's error body has `param: null`).
    js.set_param(&error.param().map_or(JsValue::NULL, JsValue::from_str));
    js.set_status(crate::api::error_status(&error));
    js.into()
}

/// Reads a `limits` option (JSON text naming fields of [`crate::limits::Limits`], each only
/// lowered): an error naming `limits` when it is not one. The engine checks it before it
/// reads a model, so a bad option fails before a download.
#[wasm_bindgen(js_name = checkLimits)]
pub fn check_limits(text: &str) -> Result<(), JsValue> {
    crate::limits::Limits::from_json_text(text)
        .map(|_| ())
        .map_err(to_js_error)
}

/// Installs the panic hook once, at load: the panic message and the JS stack go to
/// `console.error`. `onPanic` adds a callback after it.
#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

/// CPU twin of the GPU kernel: masks `logits` in place (disallowed -> -Infinity) and returns
/// the index of the largest allowed logit. Bit `i % 32` of `mask[i / 32]` allows token `i`.
#[wasm_bindgen(js_name = applyTokenMaskCpu)]
pub fn apply_token_mask_cpu(logits: &mut [f32], mask: &[u32]) -> Result<u32, JsValue> {
    crate::mask::apply_token_mask(logits, mask).map_err(to_js_error)
}

#[cfg(feature = "gpu")]
mod gpu_bindings {
    use std::rc::Rc;

    use wasm_bindgen::prelude::*;

    use super::to_js_error;
    use crate::gpu::Context;

    /// A WebGPU device with the compiled kernels.
    #[wasm_bindgen]
    #[derive(Debug)]
    pub struct GpuContext {
        inner: Rc<Context>,
    }

    #[wasm_bindgen]
    impl GpuContext {
        /// Requests the browser's WebGPU adapter and device; rejects when WebGPU is missing.
        pub async fn create() -> Result<GpuContext, JsValue> {
            let inner = Context::new().await.map_err(to_js_error)?;
            Ok(GpuContext {
                inner: Rc::new(inner),
            })
        }

        /// The adapter's name as the browser reports it (may be empty where it hides it).
        #[wasm_bindgen(getter, js_name = adapterName)]
        pub fn adapter_name(&self) -> String {
            self.inner.adapter().name.clone()
        }

        /// Whether the adapter is a software/fallback one (SwiftShader): correct but slow.
        #[wasm_bindgen(getter, js_name = isSoftware)]
        pub fn is_software(&self) -> bool {
            self.inner.adapter().is_software
        }

        /// GPU twin of `applyTokenMaskCpu`: writes the masked logits back into `logits` and
        /// resolves to the argmax index.
        #[wasm_bindgen(js_name = applyTokenMask)]
        pub fn apply_token_mask(
            &self,
            logits: js_sys::Float32Array,
            mask: Vec<u32>,
        ) -> js_sys::Promise {
            let inner = Rc::clone(&self.inner);
            wasm_bindgen_futures::future_to_promise(async move {
                let mut values = logits.to_vec();
                let index = inner
                    .apply_token_mask(&mut values, &mask)
                    .await
                    .map_err(to_js_error)?;
                logits.copy_from(&values);
                Ok(JsValue::from(index))
            })
        }
    }
}

/// The GBNF grammar (llama.cpp syntax, entry rule `root`) accepting exactly the JSON text the
/// `guided_json` compiler accepts for `schema_json` — what the remote client sends to servers
/// that take `grammar`. A schema the compiler refuses throws the same 400 as `guided_json`.
#[wasm_bindgen(js_name = schemaToGbnf)]
pub fn schema_to_gbnf(schema_json: &str) -> Result<String, JsValue> {
    let schema = serde_json::Value::String(schema_json.to_owned());
    crate::json_schema::JsonSchema::compile(&schema, "guided_json")
        .map(|compiled| compiled.gbnf())
        .map_err(to_js_error)
}
