//! Rendering a model's chat template (`tokenizer.chat_template`, Jinja) for a conversation.
//!
//! Templates run in `minijinja` with the variables Hugging Face templates expect
//! (`messages`, `add_generation_prompt`, `bos_token`, `eos_token`) and `raise_exception`.
//! A template comes from the model file, so it is untrusted: rendering is bounded by
//! minijinja's fuel ([`TEMPLATE_FUEL`] instructions) and its recursion limit instead of a
//! clock, and an error names the template's failure.

use std::collections::BTreeMap;

use minijinja::{Environment, Value};

use crate::error::{Error, Result};

/// Instructions a template may execute per render: a few hundred per message for the
/// templates in use, so 1M covers thousands of messages and stops a runaway loop in ~0.1 s.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Renders `messages` through `template`; `add_generation_prompt` appends the assistant turn's
/// opening (the prompt a model continues from).
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                msg,
            ))
        },
    );
    let messages: Vec<Value> = messages
        .iter()
        .map(|m| {
            let mut map = BTreeMap::new();
            map.insert("role".to_string(), Value::from(m.role.as_str()));
            map.insert("content".to_string(), Value::from(m.content.as_str()));
            Value::from(map)
        })
        .collect();
    let mut ctx = BTreeMap::new();
    ctx.insert("messages".to_string(), Value::from(messages));
    ctx.insert(
        "add_generation_prompt".to_string(),
        Value::from(add_generation_prompt),
    );
    ctx.insert("bos_token".to_string(), Value::from(bos_token));
    ctx.insert("eos_token".to_string(), Value::from(eos_token));
    let fail = |e: minijinja::Error| {
        Error::invalid_input(format!("chat template: {e}"))
            .with_param("messages")
            .with_source(e)
    };
    let tmpl = env.template_from_str(template).map_err(fail)?;
    tmpl.render(Value::from(ctx)).map_err(fail)
}

/// Renders one user message with the generation prompt, using the template, BOS and EOS
/// of a GGUF file (what `poot eval --chat` and llama.cpp's server do for a single turn).
pub fn render_gguf_user_prompt(
    gguf: &crate::gguf::Gguf<'_>,
    tokenizer: &crate::tokenizer::Tokenizer,
    user: &str,
) -> Result<String> {
    let template = gguf
        .get("tokenizer.chat_template")
        .and_then(crate::gguf::Value::as_str)
        .ok_or_else(|| {
            Error::invalid_input("the model has no tokenizer.chat_template").with_param("model")
        })?;
    let text = |id: Option<u32>| {
        id.map(|i| String::from_utf8_lossy(tokenizer.piece(i)).into_owned())
            .unwrap_or_default()
    };
    render(
        template,
        &[Message::new("user", user)],
        true,
        &text(tokenizer.bos()),
        &text(tokenizer.eos()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_the_smollm2_template() {
        let out = render(CHATML, &[Message::new("user", "Hi")], true, "", "").unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_and_runaway_templates_are_errors() {
        let err = render(
            "{{ raise_exception('no system role') }}",
            &[],
            false,
            "",
            "",
        )
        .unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
        let err = render(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            &[],
            false,
            "",
            "",
        )
        .unwrap_err();
        assert_eq!(err.param(), Some("messages"));
        assert!(render("{% if %}", &[], false, "", "").is_err());
    }
}
