//! Tests of the chat template renderer; a file of its own so that the hostile templates'
//! tests may time themselves (the core has no clock: scripts/guard-edges.sh).

use super::*;
use serde_json::json;

const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The tool parts of Qwen2.5-Instruct's template, as published (system default shortened).
const QWEN25: &str = r#"{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}
    {{- messages[0]['content'] }}
{%- else %}
    {{- 'You are Qwen.' }}
{%- endif %}
{{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}
    {{- "\n" }}
    {{- tool | tojson }}
{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen.<|im_end|>\n' }}
{%- endif %}
{%- endif %}
{%- for message in messages %}
{%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- elif message.role == "assistant" %}
    {{- '<|im_start|>' + message.role }}
    {%- if message.content %}
        {{- '\n' + message.content }}
    {%- endif %}
    {%- for tool_call in message.tool_calls %}
        {%- if tool_call.function is defined %}
            {%- set tool_call = tool_call.function %}
        {%- endif %}
        {{- '\n<tool_call>\n{"name": "' }}
        {{- tool_call.name }}
        {{- '", "arguments": ' }}
        {{- tool_call.arguments | tojson }}
        {{- '}\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
{%- elif message.role == "tool" %}
    {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
        {{- '<|im_start|>user' }}
    {%- endif %}
    {{- '\n<tool_response>\n' }}
    {{- message.content }}
    {{- '\n</tool_response>' }}
    {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

#[test]
fn renders_the_smollm2_template() {
    let out = render(CHATML, &[Message::new("user", "Hi")], true, "", "").unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    // render_chat with JSON messages and tools the template ignores: the same text.
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    let chat = render_chat(
        CHATML,
        &[json!({"role": "user", "content": "Hi"})],
        Some(&tools),
        true,
        "",
        "",
    )
    .unwrap();
    assert_eq!(chat, out);
}

#[test]
fn renders_qwen25_tools_and_tool_calls() {
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather in <city>",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}]);
    let messages = [
        json!({"role": "user", "content": "Weather in Paris and Rome?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}
        ]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "18 C"}),
        json!({"role": "tool", "tool_call_id": "call_2", "content": "21 C"}),
    ];
    let out = render_chat(QWEN25, &messages, Some(&tools), true, "", "").unwrap();
    let want = concat!(
        "<|im_start|>system\nYou are Qwen.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n",
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
        r#"{"function": {"description": "Weather in <city>", "name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}, "type": "function"}"#,
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n",
        "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"not json\"}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\n21 C\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n",
    );
    assert_eq!(out, want);
    // Without tools the template takes its plain branch.
    let out = render_chat(QWEN25, &messages[..1], None, false, "", "").unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
    );
}

#[test]
fn tojson_is_python_json_dumps() {
    let r = |t: &str| {
        render_chat(
            t,
            &[json!({"role": "user", "content": "a\"<é>\n", "n": [1, 2.5, true, null, {}, []]})],
            None,
            false,
            "",
            "",
        )
        .unwrap()
    };
    assert_eq!(
        r("{{ messages[0] | tojson }}"),
        r#"{"content": "a\"<é>\n", "n": [1, 2.5, true, null, {}, []], "role": "user"}"#
    );
    assert_eq!(
        r("{{ messages[0].n | tojson(indent=2) }}"),
        "[\n  1,\n  2.5,\n  true,\n  null,\n  {},\n  []\n]"
    );
    assert_eq!(
        r("{{ messages[0].content | tojson(ensure_ascii=true) }}"),
        r#""a\"<\u00e9>\n""#
    );
    assert_eq!(
        r("{{ {'a': [1]} | tojson(separators=[',', ':']) }}"),
        r#"{"a":[1]}"#
    );
    assert_eq!(r("{{ 'x' | tojson(indent=2, sort_keys=true) }}"), r#""x""#);
    assert!(render_chat("{{ 1 | tojson(bogus=1) }}", &[], None, false, "", "").is_err());
    assert_eq!(
        python_json(&json!({"b": [1, {"c": "<"}], "a": "é"})),
        r#"{"a": "é", "b": [1, {"c": "<"}]}"#
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
    // tojson charges fuel for the values it writes.
    let err = render_chat(
        "{% for i in range(100000) %}{{ messages | tojson }}{% endfor %}",
        &[json!({"role": "user", "content": "x", "big": vec![0; 1000]})],
        None,
        false,
        "",
        "",
    )
    .unwrap_err();
    assert_eq!(err.param(), Some("messages"));
    assert!(render("{% if %}", &[], false, "", "").is_err());
}

/// Renders `template` with one short message; the result and the time it took.
fn timed(template: &str) -> (Result<String>, f64) {
    let t = std::time::Instant::now();
    let messages = [json!({"role": "user", "content": "hi", "n": vec![1; 100]})];
    let out = render_chat(template, &messages, None, false, "", "");
    (out, t.elapsed().as_secs_f64())
}

#[test]
fn templates_that_make_too_much_text_are_limit_errors() {
    // Output: the template of the report, and output one byte past the bound.
    let limit = MAX_TEMPLATE_OUTPUT_BYTES;
    for template in [
        r#"{% for i in range(100000) %}{{ "x" * 100000 }}{% endfor %}"#.to_string(),
        format!("{{{{ 'x' * {} }}}}", limit + 1),
    ] {
        let (out, secs) = timed(&template);
        let err = out.unwrap_err();
        assert!(err.is_limit_exceeded(), "{err}");
        assert_eq!(err.param(), Some("messages"));
        let message = err.to_string();
        assert!(
            message.starts_with("chat template (tokenizer.chat_template): ")
                && message.ends_with(&format!(
                    " is longer than the limit of {limit} bytes (MAX_TEMPLATE_OUTPUT_BYTES)"
                )),
            "{message}"
        );
        assert!(secs < 1.0, "{secs} s");
    }
    assert_eq!(
        timed(&format!("{{{{ 'x' * {limit} }}}}")).0.unwrap().len(),
        limit
    );

    // tojson with a huge indent or separator: stopped while writing, not after.
    for template in [
        "{{ range(3000) | list | tojson(indent=1000000) }}",
        "{{ range(100000) | list | tojson(separators=['x' * 60000, ':']) }}",
        "{% for i in range(1000) %}{% set s = messages | tojson(indent=100000) %}{% endfor %}",
    ] {
        let (out, secs) = timed(template);
        let err = out.unwrap_err();
        assert!(err.is_limit_exceeded(), "{template}: {err}");
        assert!(err
            .to_string()
            .contains("a tojson result is longer than the limit"));
        assert!(secs < 1.0, "{template}: {secs} s");
    }

    // Values doubled in a loop, by recursion-free tricks: a string or list an operator makes
    // is checked against its bound before it is made, and fuel counts the bytes of the rest.
    for (template, bound) in [
        ("{% set ns = namespace(x='x') %}{% for i in range(40) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x | length }}", "MAX_TEMPLATE_OUTPUT_BYTES"),
        ("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}", "100000 items"),
        ("{% set l = [1] * 99999999 %}{{ l ~ '' }}", "100000 items"),
        ("{% set l = [1] * 99999 %}{% set m = [l] * 99999 %}{{ m ~ '' }}", "MAX_TEMPLATE_OUTPUT_BYTES"),
        // Folded while compiling, before any instruction runs: sized from the parsed template.
        ("{{ ([1] * 99999999) ~ '' }}", "100000 items"),
        ("{{ ([1, 2] * 10 ** 8) | length }}", "100000 items"),
        ("{{ ((([1] * 50000) + [1] * 50000) + [1]) ~ '' }}", "100000 items"),
        ("{{ range(10000) | join('x' * 10000) }}", "TEMPLATE_FUEL"),
        ("{% for i in range(100000) %}{% set x %}{{ 'y' * 10000 }}{% endset %}{% endfor %}", "MAX_TEMPLATE_OUTPUT_BYTES"),
    ] {
        let (out, secs) = timed(template);
        let err = out.unwrap_err();
        assert!(err.is_limit_exceeded(), "{template}: {err}");
        assert!(err.to_string().contains(bound), "{template}: {err}");
        assert!(secs < 1.0, "{template}: {secs} s");
    }

    // Indexing and slicing ranges in a long loop (minijinja's lazy range walked them).
    for template in [
        "{% for i in range(100000) %}{{ range(100000)[-1] }}{% endfor %}",
        "{% for i in range(100000) %}{{ range(100000)[99990:] }}{% endfor %}",
    ] {
        let (out, secs) = timed(template);
        let err = out.unwrap_err();
        assert!(
            err.to_string().contains("TEMPLATE_FUEL"),
            "{template}: {err}"
        );
        assert!(secs < 1.0, "{template}: {secs} s");
    }
    assert_eq!(
        timed("{{ range(3) | list }} {{ range(5, 0, -2) | list }} {{ range(2, 2) | list }} {{ range(100000)[-1] }}").0.unwrap(),
        "[0, 1, 2] [5, 3, 1] [] 99999"
    );
    assert!(timed("{{ range(100001) }}").0.is_err());
    assert!(timed("{{ range(1, 5, 0) }}").0.is_err());

    // A lazy list of 10^10 values (99,999 references to one list of 99,999) costs no fuel
    // until it is written; writing it, or its `string` or `tojson`, is refused at once by its
    // size or by fuel per value.
    for (template, limit) in [
        (
            "{% set l = [range(99999) | list] * 99999 %}{{ l }}",
            "a value as text",
        ),
        (
            "{% set l = [range(99999) | list] * 99999 %}{{ [l, 1] }}",
            "a value as text",
        ),
        (
            "{% set l = [range(99999) | list] * 99999 %}{{ l | string }}",
            "a value as text",
        ),
        (
            "{% set l = [range(99999) | list] * 99999 %}{{ l | tojson }}",
            "TEMPLATE_FUEL",
        ),
    ] {
        let (out, secs) = timed(template);
        let err = out.unwrap_err();
        assert!(err.is_limit_exceeded(), "{template}: {err}");
        assert!(err.to_string().contains(limit), "{template}: {err}");
        assert!(secs < 1.0, "{template}: {secs} s");
    }
}

#[test]
fn gemma3_files_without_a_template_get_gemmas_turn_format() {
    let file = crate::gguf::Builder::new()
        .string("general.architecture", "gemma3")
        .build();
    let gguf = crate::gguf::Gguf::parse(&file).unwrap();
    let template = super::gguf_template(&gguf).expect("a fallback for gemma3");
    let messages = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi"),
        Message::new("assistant", "Hello."),
        Message::new("user", " And now? "),
    ];
    assert_eq!(
        render(&template, &messages, true, "<bos>", "<eos>").unwrap(),
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nAnd now?<end_of_turn>\n<start_of_turn>model\n"
    );
    let other = crate::gguf::Builder::new()
        .string("general.architecture", "llama")
        .build();
    assert!(super::gguf_template(&crate::gguf::Gguf::parse(&other).unwrap()).is_none());
}
