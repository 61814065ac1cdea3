//! The constraint engine for JavaScript: a [`Vocabulary`], a compiled [`Constraint`] and a
//! per-sequence [`Matcher`], each a thin wrapper over the core type of the same name.
//!
//! ```js
//! const vocab = Vocabulary.fromGguf(ggufBytes);          // or fromTokenizerJson / fromTokens
//! const constraint = Constraint.fromRequest(vocab, JSON.stringify(body)); // undefined: none
//! const matcher = constraint.matcher();
//! const mask = new Uint32Array(vocab.maskWords);
//! matcher.fillMask(mask);                                // bit i of mask[i >> 5] = token i
//! matcher.accept(tokenId);
//! ```
//!
//! Masks are written into the caller's `Uint32Array`: the matcher keeps one mask buffer in
//! wasm memory for the whole sequence, so a step allocates nothing and costs two copies of
//! `vocab / 8` bytes (the cached mask into that buffer, the buffer into the array);
//! `fillOwnMask` + `maskPointer` skip the second copy. Objects hold wasm memory until
//! `free()` is called.

use std::sync::Arc;

use wasm_bindgen::prelude::*;

use super::to_js_error;
use crate::constraint::{Constraint as CoreConstraint, Matcher as CoreMatcher, Spec};
use crate::error::Error;
use crate::limits::Limits;
use crate::mask::{check_mask_len, words_for};
use crate::vocab::{TokenId, Vocabulary as CoreVocabulary};

/// The bytes each token adds to the output, which tokens are special, and the
/// end-of-sequence ids.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Vocabulary {
    inner: Arc<CoreVocabulary>,
}

/// A string's UTF-8 bytes or a `Uint8Array`'s bytes; anything else is an error naming `what`.
fn bytes_of(value: &JsValue, what: &str) -> Result<Vec<u8>, JsValue> {
    if let Some(s) = value.as_string() {
        return Ok(s.into_bytes());
    }
    if let Some(array) = value.dyn_ref::<js_sys::Uint8Array>() {
        return Ok(array.to_vec());
    }
    Err(to_js_error(Error::invalid_input(format!(
        "{what} must be a string or a Uint8Array, got {}",
        value
            .js_typeof()
            .as_string()
            .unwrap_or_else(|| "something else".into())
    ))))
}

#[wasm_bindgen]
impl Vocabulary {
    /// The vocabulary in a GGUF file's tokenizer metadata. `bytes` may be the whole file or
    /// any prefix that reaches the tensor data (the metadata of a 262k-token model is ~6 MB).
    #[wasm_bindgen(js_name = fromGguf)]
    pub fn from_gguf(bytes: &[u8]) -> Result<Vocabulary, JsValue> {
        CoreVocabulary::from_gguf_bytes(bytes)
            .map(Vocabulary::wrap)
            .map_err(to_js_error)
    }

    /// The vocabulary in a Hugging Face `tokenizer.json` (a string or its UTF-8 bytes).
    /// `eos` gives the end-of-sequence ids; omitted, they come from the file's special tokens.
    #[wasm_bindgen(js_name = fromTokenizerJson)]
    pub fn from_tokenizer_json(
        json: JsValue,
        eos: Option<Vec<TokenId>>,
    ) -> Result<Vocabulary, JsValue> {
        let json = bytes_of(&json, "tokenizer.json")?;
        CoreVocabulary::from_tokenizer_json(&json, eos)
            .map(Vocabulary::wrap)
            .map_err(to_js_error)
    }

    /// A vocabulary of text tokens given as strings (their UTF-8 bytes) or `Uint8Array`s,
    /// plus the end-of-sequence ids, for callers that bring their own tokenizer.
    #[wasm_bindgen(js_name = fromTokens)]
    pub fn from_tokens(tokens: Vec<JsValue>, eos: Vec<TokenId>) -> Result<Vocabulary, JsValue> {
        let tokens = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| bytes_of(t, &format!("token {i}")))
            .collect::<Result<Vec<_>, _>>()?;
        CoreVocabulary::new(tokens, eos)
            .map(Vocabulary::wrap)
            .map_err(to_js_error)
    }

    fn wrap(vocab: CoreVocabulary) -> Vocabulary {
        Vocabulary {
            inner: Arc::new(vocab),
        }
    }

    /// Number of tokens (the logits' length).
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> usize {
        self.inner.len()
    }

    /// Length of a mask over this vocabulary, in `u32` words (`ceil(size / 32)`).
    #[wasm_bindgen(getter, js_name = maskWords)]
    pub fn mask_words(&self) -> usize {
        words_for(self.inner.len())
    }

    /// The end-of-sequence ids, sorted.
    #[wasm_bindgen(getter, js_name = eosIds)]
    pub fn eos_ids(&self) -> Vec<TokenId> {
        self.inner.eos().to_vec()
    }

    /// The bytes token `id` adds to the output (a special token's name, for display).
    #[wasm_bindgen(js_name = tokenBytes)]
    pub fn token_bytes(&self, id: TokenId) -> Result<Vec<u8>, JsValue> {
        self.check_id(id)?;
        Ok(self.inner.bytes(id).to_vec())
    }

    /// Whether token `id` is text (a constraint may allow it); special tokens never are.
    #[wasm_bindgen(js_name = isText)]
    pub fn is_text(&self, id: TokenId) -> bool {
        self.inner.is_text(id)
    }

    /// Splits a text (a string or bytes) into tokens by greedy longest match, as `poot trace`
    /// does: a stand-in for the model's tokenizer in tests and benchmarks.
    #[wasm_bindgen(js_name = tokenizeGreedy)]
    pub fn tokenize_greedy(&self, text: JsValue) -> Result<Vec<TokenId>, JsValue> {
        let text = bytes_of(&text, "the text")?;
        self.inner.tokenize_greedy(&text).map_err(to_js_error)
    }

    fn check_id(&self, id: TokenId) -> Result<(), JsValue> {
        if id as usize >= self.inner.len() {
            return Err(to_js_error(Error::invalid_input(format!(
                "token {id} is outside the vocabulary of {} tokens",
                self.inner.len()
            ))));
        }
        Ok(())
    }
}

/// A compiled constraint over one vocabulary, shared by all the matchers made from it.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Constraint {
    inner: Arc<CoreConstraint>,
    kind: &'static str,
}

#[wasm_bindgen]
impl Constraint {
    /// Compiles the constraint an OpenAI chat or completions request body carries
    /// (`guided_choice`, `guided_regex`, ...) for `vocab`; `undefined` when the request does
    /// not constrain its output. Errors are 400s naming the request field. `limits` (JSON
    /// text, `{"schema_bytes": 8192}`) tightens the defaults of [`Limits`] for this compile.
    #[wasm_bindgen(js_name = fromRequest)]
    pub fn from_request(
        vocab: &Vocabulary,
        request: &str,
        limits: Option<String>,
    ) -> Result<Option<Constraint>, JsValue> {
        let limits = match limits {
            Some(text) => Limits::from_json_text(&text).map_err(to_js_error)?,
            None => Limits::DEFAULT,
        };
        let body: serde_json::Value = serde_json::from_str(request).map_err(|e| {
            to_js_error(
                Error::invalid_input(format!("the request body is not valid JSON: {e}"))
                    .with_source(e),
            )
        })?;
        let mut specs = Spec::all_from_request_with(&body, &limits).map_err(to_js_error)?;
        if specs.is_empty() {
            return Ok(None);
        }
        let spec = specs.remove(0);
        // The fields below it in precedence are not applied, but an invalid one is a 400.
        for unused in &specs {
            unused.compile_with(&limits).map_err(to_js_error)?;
        }
        let inner = Arc::new(
            CoreConstraint::from_spec_with(&spec, vocab.inner.clone(), &limits)
                .map_err(to_js_error)?,
        );
        inner.check_first_mask(spec.param()).map_err(to_js_error)?;
        Ok(Some(Constraint {
            inner,
            kind: spec.kind(),
        }))
    }

    /// What the request asked for: `"regex"`, `"choice"`, ...
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> String {
        self.kind.to_owned()
    }

    /// A fresh matcher at the start of the output (one per sequence).
    pub fn matcher(&self) -> Matcher {
        Matcher {
            scratch: vec![0; words_for(self.inner.vocab().len())],
            inner: CoreMatcher::new(self.inner.clone()),
        }
    }
}

/// One sequence's position in a constraint.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Matcher {
    inner: CoreMatcher,
    /// The mask of the last `fillMask` / `fillOwnMask`, reused every step (never reallocated,
    /// so `maskPointer` stays valid).
    scratch: Vec<u32>,
}

#[wasm_bindgen]
impl Matcher {
    /// Writes the tokens allowed next into `mask` (`vocab.maskWords` words; bit `i % 32` of
    /// word `i / 32` is token `i`). After an end-of-sequence token, no token is allowed.
    #[wasm_bindgen(js_name = fillMask)]
    pub fn fill_mask(&mut self, mask: &js_sys::Uint32Array) -> Result<(), JsValue> {
        check_mask_len(
            mask.length() as usize,
            self.inner.constraint().vocab().len(),
        )
        .map_err(to_js_error)?;
        self.fill_own_mask()?;
        mask.copy_from(&self.scratch);
        Ok(())
    }

    /// Fills the matcher's own mask in wasm memory, at [`Matcher::mask_pointer`]: the
    /// zero-copy form of `fillMask` for callers that read the mask through a view
    /// (`new Uint32Array(memory.buffer, matcher.maskPointer, vocab.maskWords)`), such as a
    /// `GPUQueue.writeBuffer` upload. It saves the copy into a JavaScript array, most of a warm
    /// step's cost (~0.3 of ~0.5 us at 49k tokens in Node).
    #[wasm_bindgen(js_name = fillOwnMask)]
    pub fn fill_own_mask(&mut self) -> Result<(), JsValue> {
        self.inner.fill_mask(&mut self.scratch).map_err(to_js_error)
    }

    /// Byte offset of the matcher's own mask in wasm memory (see `fillOwnMask`); fixed for
    /// the matcher's life. A view on it must be made again after the memory grows
    /// (`view.buffer !== memory.buffer`) and must not be used after `free()`.
    #[wasm_bindgen(getter, js_name = maskPointer)]
    pub fn mask_pointer(&self) -> usize {
        self.scratch.as_ptr() as usize
    }

    /// Advances by `token`; a disallowed token is a 400 and leaves the matcher unchanged.
    pub fn accept(&mut self, token: TokenId) -> Result<(), JsValue> {
        self.inner.advance(token).map_err(to_js_error)
    }

    /// Whether `token` is allowed next (its bit in the mask).
    #[wasm_bindgen(js_name = isAllowed)]
    pub fn is_allowed(&self, token: TokenId) -> bool {
        self.inner.is_allowed(token)
    }

    /// Whether the output so far is complete (an end-of-sequence token is allowed now).
    #[wasm_bindgen(js_name = isAccepting)]
    pub fn is_accepting(&self) -> bool {
        self.inner.is_accepting()
    }

    /// Whether an end-of-sequence token has been accepted.
    #[wasm_bindgen(js_name = isFinished)]
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// Number of tokens accepted so far.
    #[wasm_bindgen(getter, js_name = tokenCount)]
    pub fn token_count(&self) -> usize {
        self.inner.token_count()
    }

    /// Undoes the last `k` tokens; more than were accepted is a 400 and changes nothing.
    pub fn rollback(&mut self, k: usize) -> Result<(), JsValue> {
        self.inner.rollback(k).map_err(to_js_error)
    }

    /// Back to the start of the output.
    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// The bytes that must come next whatever tokens produce them (jump-forward decoding);
    /// empty when the next byte is not forced.
    pub fn forced(&self) -> Vec<u8> {
        self.inner.forced_bytes()
    }
}
