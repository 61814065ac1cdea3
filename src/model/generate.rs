//! The [`Backend`] a decode loop drives (the loop itself is `crate::api::Run`), the CPU one,
//! and the numerics report `poot eval` prints: [`eval`] reports raw logits after prefill and
//! greedy steps with their top-1/top-2 margins.

use serde_json::{json, Value as Json};

use super::{Model, Session};
use crate::chat_template::render_gguf_user_prompt;
use crate::error::Result;
use crate::gguf::Gguf;
use crate::sampling::{argmax, top_k, DeviceSampling};
use crate::tokenizer::Tokenizer;
use crate::vocab::TokenId;

/// Why generation stopped (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-sequence token, or the constraint accepted its end.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The output is a tool call (chat with tools).
    ToolCalls,
}

impl Finish {
    /// The OpenAI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        }
    }
}

/// A forward pass the decode loop can drive: the CPU model ([`CpuBackend`]) or the GPU one
/// (behind an adapter at the edge that waits for it). One sequence per backend value.
pub trait Backend {
    /// Logits per step.
    fn n_vocab(&self) -> usize;
    /// Evaluates `tokens` after what the backend holds; returns the last position's logits.
    fn forward(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>>;
    /// Forgets the positions from `len` on (a no-op when fewer are held).
    fn truncate(&mut self, len: usize);

    /// Whether [`Backend::forward_sample`] works here (the GPU backend: it chooses the token
    /// on the device and reads back 4 bytes instead of the logits).
    fn samples_on_device(&self) -> bool {
        false
    }

    /// Evaluates `tokens`, then chooses the next token on the device as
    /// [`crate::sampling::Sampler::sample`] would. `source` gives the step's mask and draw;
    /// the backend asks for it once the forward pass is submitted, so the CPU fills the mask
    /// while the device computes.
    fn forward_sample(
        &mut self,
        tokens: &[TokenId],
        source: &mut dyn StepSource,
    ) -> Result<TokenId> {
        let _ = (tokens, source);
        Err(crate::error::Error::invalid_input(
            "this backend does not sample on its device (samples_on_device is false)",
        ))
    }
}

/// One sampling step as a device runs it: the constraint's mask over the first `n_vocab`
/// tokens (`None` = unconstrained) and the sampler's settings and draw.
#[derive(Debug, Clone, Copy)]
pub struct DeviceStep<'a> {
    pub mask: Option<&'a [u32]>,
    pub n_vocab: usize,
    pub sampling: DeviceSampling,
}

/// Where [`Backend::forward_sample`] gets its step (the decode loop, `crate::api::Run`).
pub trait StepSource {
    /// Fills the step's mask and draws; called once per [`Backend::forward_sample`].
    fn device_step(&mut self) -> Result<DeviceStep<'_>>;

    /// Whether the step has a mask to fill. Without one there is nothing to overlap with the
    /// forward pass, and a backend can take the step first and submit the forward pass and
    /// the sampling together (one submission).
    fn masks(&self) -> bool {
        true
    }
}

/// The CPU model and one session of it.
#[derive(Debug)]
pub struct CpuBackend<'m, B> {
    pub model: &'m Model<B>,
    pub session: Session,
}

impl<B: AsRef<[u8]>> Backend for CpuBackend<'_, B> {
    fn n_vocab(&self) -> usize {
        self.model.config().n_vocab
    }

    fn forward(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.model.forward(&mut self.session, tokens)
    }

    fn truncate(&mut self, len: usize) {
        self.session.truncate(len);
    }
}

/// What to evaluate in [`eval`].
#[derive(Debug, Clone)]
pub enum EvalPrompt<'a> {
    /// Text tokenized with special tokens parsed (`chat`: rendered first as one user message
    /// through the model's chat template with the generation prompt).
    Text { text: &'a str, chat: bool },
    /// Token ids as given.
    Ids(Vec<TokenId>),
}

/// The `poot eval` report.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalReport {
    pub prompt_ids: Vec<TokenId>,
    /// The `top` largest raw logits after prefill, largest first.
    pub top: Vec<(TokenId, f32)>,
    pub greedy_ids: Vec<TokenId>,
    /// Top-1 minus top-2 logit at each greedy step.
    pub greedy_margins: Vec<f32>,
    pub greedy_text: String,
}

impl EvalReport {
    /// `{"prompt_ids":[..],"top":[{"id":..,"logit":..},..],"greedy_ids":[..],
    /// "greedy_margins":[..],"greedy_text":".."}`.
    pub fn to_json(&self) -> Json {
        json!({
            "prompt_ids": self.prompt_ids,
            "top": self.top.iter().map(|&(id, logit)| json!({"id": id, "logit": logit})).collect::<Vec<_>>(),
            "greedy_ids": self.greedy_ids,
            "greedy_margins": self.greedy_margins,
            "greedy_text": self.greedy_text,
        })
    }
}

/// Tokenizes (or takes) a prompt, prefills it on the CPU model, reports the `top` raw logits,
/// then takes `greedy` greedy steps with their margins. `threads` applies natively.
pub fn eval(
    file: &[u8],
    prompt: &EvalPrompt<'_>,
    top: usize,
    greedy: usize,
    threads: usize,
) -> Result<EvalReport> {
    let mut model = Model::from_gguf_bytes(file)?;
    model.set_threads(threads);
    let prompt_ids = eval_prompt_ids(file, prompt)?;
    let context = (prompt_ids.len() + greedy)
        .min(model.config().context_length)
        .max(1);
    let session = model.session(context)?;
    let tok = Tokenizer::from_gguf_bytes(file)?;
    eval_with(
        &mut CpuBackend {
            model: &model,
            session,
        },
        &tok,
        prompt_ids,
        top,
        greedy,
    )
}

/// The token ids of an [`EvalPrompt`], tokenized with the file's own tokenizer and template.
pub fn eval_prompt_ids(file: &[u8], prompt: &EvalPrompt<'_>) -> Result<Vec<TokenId>> {
    let gguf = Gguf::parse(file)?;
    let tok = Tokenizer::from_gguf(&gguf)?;
    Ok(match prompt {
        EvalPrompt::Ids(ids) => ids.clone(),
        EvalPrompt::Text { text, chat: false } => tok.encode_prompt(text),
        EvalPrompt::Text { text, chat: true } => {
            tok.encode_prompt(&render_gguf_user_prompt(&gguf, &tok, text)?)
        }
    })
}

/// [`eval`] on any backend, for prompt ids already made.
pub fn eval_with(
    backend: &mut dyn Backend,
    tok: &Tokenizer,
    prompt_ids: Vec<TokenId>,
    top: usize,
    greedy: usize,
) -> Result<EvalReport> {
    let mut logits = backend.forward(&prompt_ids)?;
    let top = top_k(&logits, top);
    let mut greedy_ids = Vec::with_capacity(greedy);
    let mut greedy_margins = Vec::with_capacity(greedy);
    for step in 0..greedy {
        let best = top_k(&logits, 2);
        let next = argmax(&logits);
        greedy_ids.push(next);
        greedy_margins.push(
            best.first().map_or(0.0, |a| a.1) - best.get(1).map_or(f32::NEG_INFINITY, |b| b.1),
        );
        if step + 1 < greedy {
            logits = backend.forward(&[next])?;
        }
    }
    let greedy_text = String::from_utf8_lossy(&tok.decode(&greedy_ids, true)).into_owned();
    Ok(EvalReport {
        prompt_ids,
        top,
        greedy_ids,
        greedy_margins,
        greedy_text,
    })
}

/// `{"ids":[..]}` for `poot tokenize`: special tokens in the text parsed, no BOS/EOS added.
pub fn tokenize_json(file: &[u8], text: &str) -> Result<Json> {
    let tok = Tokenizer::from_gguf_bytes(file)?;
    Ok(json!({ "ids": tok.encode(text, false, true) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synthetic::TinySpec;

    #[test]
    fn eval_reports_prompt_top_and_greedy_steps() {
        let file = TinySpec::default().build();
        let r = eval(
            &file,
            &EvalPrompt::Text {
                text: "hi there",
                chat: true,
            },
            5,
            4,
            1,
        )
        .unwrap();
        assert_eq!(r.prompt_ids[0], 1); // <|im_start|>
        assert_eq!(r.top.len(), 5);
        assert!(r.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert_eq!(r.greedy_ids[0], r.top[0].0);
        assert!(r.greedy_margins.iter().all(|&m| m >= 0.0));
        let j = r.to_json();
        assert_eq!(j["greedy_ids"].as_array().unwrap().len(), 4);
        assert!(j["top"][0]["logit"].is_number());
        let by_ids = eval(&file, &EvalPrompt::Ids(r.prompt_ids.clone()), 5, 4, 1).unwrap();
        assert_eq!(by_ids, r);
        assert_eq!(
            tokenize_json(&file, "<|im_end|>").unwrap(),
            json!({"ids": [2]})
        );
    }
}
