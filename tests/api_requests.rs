//! The OpenAI surface (`poot::api`) on a synthetic model (byte-level vocabulary, ChatML
//! template, random weights), so every case runs in milliseconds: each 400 with its field,
//! the constraint precedence for every pair, and the run's semantics against oracles
//! (streamed text = whole text, stop sequences, n choices, usage, logprobs, jump-forward,
//! cancellation).

use std::sync::Arc;

use poot::api::{Endpoint, Engine, Run, RunOptions};
use poot::gguf::Gguf;
use poot::model::synthetic::TinySpec;
use poot::model::{Backend, CpuBackend, Model};
use poot::vocab::TokenId;
use serde_json::{json, Value};

fn tiny() -> &'static [u8] {
    static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        TinySpec {
            context_length: 2048,
            ..TinySpec::default()
        }
        .build()
    })
}

fn engine() -> Arc<Engine> {
    Arc::new(Engine::from_gguf(&Gguf::parse(tiny()).unwrap()).unwrap())
}

fn opts() -> RunOptions {
    RunOptions {
        id: "chatcmpl-test".into(),
        created: 1,
        default_seed: 7,
        clock: None,
    }
}

fn endpoint_of(body: &Value) -> Endpoint {
    if body.get("prompt").is_some() {
        Endpoint::Completion
    } else {
        Endpoint::Chat
    }
}

fn new_run(body: &Value) -> poot::Result<Run> {
    Run::new(engine(), body, endpoint_of(body), opts())
}

/// Counts forward calls and the tokens evaluated.
struct Counting<'m> {
    inner: CpuBackend<'m, &'m [u8]>,
    calls: usize,
    tokens: usize,
}

impl Backend for Counting<'_> {
    fn n_vocab(&self) -> usize {
        self.inner.n_vocab()
    }
    fn forward(&mut self, tokens: &[TokenId]) -> poot::Result<Vec<f32>> {
        self.calls += 1;
        self.tokens += tokens.len();
        self.inner.forward(tokens)
    }
    fn truncate(&mut self, len: usize) {
        self.inner.truncate(len)
    }
}

struct Outcome {
    response: Value,
    chunks: Vec<Value>,
    calls: usize,
}

fn run_with(body: &Value, stop_after_chunks: Option<usize>) -> Outcome {
    let model = Model::from_gguf_bytes(tiny()).unwrap();
    let mut run = new_run(body).unwrap();
    let mut backend = Counting {
        inner: CpuBackend {
            model: &model,
            session: model.session(run.context_needed()).unwrap(),
        },
        calls: 0,
        tokens: 0,
    };
    let mut chunks = Vec::new();
    run.drive(&mut backend, &mut |c| {
        chunks.push(c);
        stop_after_chunks.is_none_or(|n| chunks.len() < n)
    })
    .unwrap();
    assert!(run.is_done());
    Outcome {
        response: run.response(),
        chunks,
        calls: backend.calls,
    }
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 24});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn content(response: &Value, i: usize) -> String {
    let c = &response["choices"][i];
    c["message"]["content"]
        .as_str()
        .or(c["text"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// The text a stream carries for choice `i`.
fn streamed(chunks: &[Value], i: usize) -> String {
    chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["index"] == i)
        .map(|c| {
            c["delta"]["content"]
                .as_str()
                .or(c["text"].as_str())
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

#[test]
fn every_invalid_request_is_a_400_naming_its_field() {
    let tool = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let long = "x".repeat(300);
    // (body, param, a piece of the message)
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!([1]), "", "must be a JSON object"),
        (json!({}), "messages", "needs messages"),
        (json!({"messages": []}), "messages", "must not be empty"),
        (json!({"messages": "hi"}), "messages", "must be an array"),
        (
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            "messages",
            "role `robot`",
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            "messages",
            "needs content",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages",
            "only text parts",
        ),
        (
            json!({"messages": [{"role": "user", "content": 3}]}),
            "messages",
            "string or an array",
        ),
        (
            chat(json!({"max_tokens": 0})),
            "max_tokens",
            "must be in [1,",
        ),
        (
            chat(json!({"max_tokens": 1.5})),
            "max_tokens",
            "must be an integer",
        ),
        (
            chat(json!({"max_completion_tokens": -1})),
            "max_completion_tokens",
            "must be in",
        ),
        (
            chat(json!({"max_tokens": 100000})),
            "max_tokens",
            "context of 2048 tokens",
        ),
        (chat(json!({"n": 0})), "n", "must be in [1, 16]"),
        (chat(json!({"n": 17})), "n", "must be in [1, 16]"),
        (
            chat(json!({"temperature": 2.5})),
            "temperature",
            "must be in [0, 2]",
        ),
        (
            chat(json!({"temperature": "hot"})),
            "temperature",
            "must be a number",
        ),
        (chat(json!({"top_p": 0})), "top_p", "(0, 1]"),
        (chat(json!({"top_p": 1.5})), "top_p", "(0, 1]"),
        (chat(json!({"top_k": -2})), "top_k", "must be in [-1,"),
        (chat(json!({"min_p": 2})), "min_p", "[0, 1]"),
        (
            chat(json!({"repetition_penalty": 0})),
            "repetition_penalty",
            "must be > 0",
        ),
        (
            chat(json!({"frequency_penalty": 3})),
            "frequency_penalty",
            "[-2, 2]",
        ),
        (
            chat(json!({"presence_penalty": -3})),
            "presence_penalty",
            "[-2, 2]",
        ),
        (
            chat(json!({"logit_bias": {"5": 101}})),
            "logit_bias",
            "[-100, 100]",
        ),
        (
            chat(json!({"logit_bias": {"x": 1}})),
            "logit_bias",
            "not a token id",
        ),
        (
            chat(json!({"logit_bias": {"999999": 1}})),
            "logit_bias",
            "outside the vocabulary",
        ),
        (chat(json!({"stop": 5})), "stop", "string or an array"),
        (chat(json!({"stop": [""]})), "stop", "must not be empty"),
        (chat(json!({"stop": [long]})), "stop", "limit of 256"),
        (chat(json!({"stop": vec!["a"; 17]})), "stop", "limit of 16"),
        (
            chat(json!({"stream": "yes"})),
            "stream",
            "must be a boolean",
        ),
        (
            chat(json!({"stream_options": {"include_usage": 1}})),
            "stream_options",
            "must be a boolean",
        ),
        (
            chat(json!({"logprobs": 1})),
            "logprobs",
            "must be a boolean",
        ),
        (
            chat(json!({"logprobs": true, "top_logprobs": 21})),
            "top_logprobs",
            "[0, 20]",
        ),
        (
            chat(json!({"top_logprobs": 2})),
            "top_logprobs",
            "needs logprobs: true",
        ),
        (chat(json!({"seed": "x"})), "seed", "must be an integer"),
        (chat(json!({"guided_choice": []})), "guided_choice", ""),
        (chat(json!({"guided_regex": "(a"})), "guided_regex", ""),
        (
            chat(json!({"guided_regex": "(a|b)*a(a|b){17}"})),
            "guided_regex",
            "limit",
        ),
        (
            chat(json!({"guided_grammar": "root ::= foo"})),
            "guided_grammar",
            "foo",
        ),
        (
            chat(
                json!({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}),
            ),
            "guided_json",
            "",
        ),
        (
            chat(json!({"response_format": {"type": "xml"}})),
            "response_format",
            "response_format.type",
        ),
        (
            chat(json!({"response_format": {"type": "json_schema"}})),
            "response_format",
            "json_schema.schema",
        ),
        (chat(json!({"tools": {}})), "tools", ""),
        (
            chat(
                json!({"tools": tool, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            ),
            "tool_choice",
            "nope",
        ),
        (chat(json!({"tool_choice": "required"})), "tool_choice", ""),
        (
            chat(
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"$ref": "http://x/y"}}}}}],
                    "tool_choice": "required"}),
            ),
            "tools",
            "",
        ),
        // A field that loses precedence is compiled all the same: invalid, it is the 400.
        (
            chat(json!({"guided_choice": ["a"], "guided_regex": "(a"})),
            "guided_regex",
            "",
        ),
        (
            chat(json!({"guided_regex": "a", "guided_grammar": "root ::= foo"})),
            "guided_grammar",
            "",
        ),
        (
            chat(json!({"guided_regex": "a", "guided_json": {"$ref": "#/$defs/missing"}})),
            "guided_json",
            "",
        ),
        (
            chat(
                json!({"guided_json": {"type": "integer"}, "response_format": {"type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": true}}}}),
            ),
            "response_format",
            "",
        ),
        (
            chat(json!({"guided_choice": ["a"], "response_format": {"type": "json_schema"}})),
            "response_format",
            "",
        ),
        // ... and so is every guided field under a forced tool call.
        (
            chat(
                json!({"tools": tool, "tool_choice": "required", "guided_regex": "(a|b)*a(a|b){17}"}),
            ),
            "guided_regex",
            "",
        ),
        (
            chat(json!({"parallel_tool_calls": "no"})),
            "parallel_tool_calls",
            "must be a boolean",
        ),
        (json!({"prompt": 5}), "prompt", "must be a string"),
        (json!({"prompt": ["a", "b"]}), "prompt", "batches"),
        (json!({}), "messages", ""),
        (json!({"prompt": "x", "logprobs": 6}), "logprobs", "[0, 5]"),
        (
            json!({"prompt": "x", "echo": true}),
            "echo",
            "not supported",
        ),
        (
            json!({"prompt": [999999]}),
            "prompt",
            "outside the vocabulary",
        ),
    ];
    for (body, param, piece) in cases {
        let err = match new_run(&body) {
            Ok(_) => panic!("{body} was accepted"),
            Err(e) => e,
        };
        assert!(err.is_client_error(), "{body}: {err} is not a 400");
        assert_eq!(err.param().unwrap_or(""), param, "{body}: {err}");
        assert!(
            err.message().contains(piece),
            "{body}: `{err}` lacks `{piece}`"
        );
        let wire = poot::api::error_body(&err);
        assert_eq!(wire["error"]["type"], "invalid_request_error");
        assert_eq!(poot::api::error_status(&err), 400);
    }
}

#[test]
fn constraint_precedence_holds_for_every_pair() {
    let tools = json!([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]);
    // Highest first, as the spec orders them.
    let fields: Vec<(&str, Value)> = vec![
        ("tool_choice", json!("required")),
        ("guided_choice", json!(["a", "b"])),
        ("guided_regex", json!("[ab]+")),
        ("guided_grammar", json!("root ::= \"a\"")),
        ("guided_json", json!({"type": "integer"})),
        ("response_format", json!({"type": "json_object"})),
    ];
    for (i, (high, hv)) in fields.iter().enumerate() {
        for (low, lv) in &fields[i + 1..] {
            // Room for a forced call's markup (60 tokens of this byte-level vocabulary).
            let mut body = chat(json!({"max_tokens": 100}));
            body[*high] = hv.clone();
            body[*low] = lv.clone();
            body["tools"] = tools.clone();
            if *high != "tool_choice" {
                body["tool_choice"] = json!("auto");
            }
            let run = new_run(&body).unwrap_or_else(|e| panic!("{high}+{low}: {e}"));
            assert_eq!(run.constraint_param(), Some(*high), "{high} over {low}");
        }
    }
    // response_format json_schema loses to guided_json; text is no constraint.
    let body = chat(json!({"guided_json": {"type": "integer"},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string"}}}}));
    let out = run_with(&body, None);
    let text = content(&out.response, 0);
    assert!(text.trim().parse::<i64>().is_ok(), "{text}");
    assert_eq!(
        new_run(&chat(json!({"response_format": {"type": "text"}})))
            .unwrap()
            .constraint_param(),
        None
    );
}

#[test]
fn streamed_text_equals_the_whole_reply_and_usage_counts_tokens() {
    let lowercase = regex::Regex::new("^[a-z ]{3,40}$").unwrap();
    for seed in 0..6 {
        for extra in [
            json!({}),
            json!({"guided_regex": "[a-z ]{3,40}"}),
            json!({"stop": ["e", "th"]}),
            json!({"response_format": {"type": "json_object"}}),
        ] {
            let mut body = chat(extra.clone());
            body["seed"] = seed.into();
            body["temperature"] = 1.0.into();
            let whole = run_with(&body, None);
            body["stream"] = true.into();
            body["stream_options"] = json!({"include_usage": true});
            let stream = run_with(&body, None);
            let text = content(&whole.response, 0);
            assert_eq!(streamed(&stream.chunks, 0), text, "seed {seed} {extra}");
            let last = stream.chunks.last().unwrap();
            assert_eq!(last["choices"], json!([]));
            assert_eq!(last["usage"], whole.response["usage"]);
            let finishes: Vec<&Value> = stream
                .chunks
                .iter()
                .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(|_| c))
                .collect();
            assert_eq!(finishes.len(), 1, "one finishing chunk");
            assert_eq!(
                finishes[0]["choices"][0]["finish_reason"],
                whole.response["choices"][0]["finish_reason"]
            );
            let usage = &whole.response["usage"];
            assert_eq!(
                usage["total_tokens"].as_u64(),
                Some(
                    usage["prompt_tokens"].as_u64().unwrap()
                        + usage["completion_tokens"].as_u64().unwrap()
                )
            );
            if let Some(stops) = extra.get("stop") {
                for s in stops.as_array().unwrap() {
                    assert!(!text.contains(s.as_str().unwrap()), "{text:?} holds a stop");
                }
            }
            if extra.get("guided_regex").is_some() {
                assert!(lowercase.is_match(&text), "{text:?}");
            }
            if extra.get("response_format").is_some()
                && whole.response["choices"][0]["finish_reason"] == "stop"
            {
                // JSON allows any exponent; serde_json refuses numbers past f64 (`1e999`).
                if let Err(e) = serde_json::from_str::<Value>(&text) {
                    assert!(
                        e.to_string().contains("number out of range"),
                        "{text:?}: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn stop_sequences_cut_where_the_unstopped_text_first_holds_them() {
    for seed in 0..8 {
        // ASCII output, so any two characters of it make a stop string.
        let mut body =
            chat(json!({"seed": seed, "max_tokens": 40, "guided_regex": "[a-z ]{0,60}"}));
        let free = content(&run_with(&body, None).response, 0);
        // Pick a stop string from the middle of the free text, so it is sure to occur.
        let chars: Vec<char> = free.chars().collect();
        if chars.len() < 6 {
            continue;
        }
        let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
        body["stop"] = json!([stop]);
        let out = run_with(&body, None);
        let cut = &free[..free.find(&stop).unwrap()];
        assert_eq!(content(&out.response, 0), cut, "seed {seed}, stop {stop:?}");
        assert_eq!(out.response["choices"][0]["finish_reason"], "stop");
    }
}

#[test]
fn n_choices_each_carry_the_constraint_and_differ_by_seed() {
    let body = chat(json!({"n": 4, "guided_regex": "(yes|no|maybe) [0-9]{2}", "seed": 3}));
    let out = run_with(&body, None);
    let re = regex::Regex::new("^(yes|no|maybe) [0-9]{2}$").unwrap();
    let texts: Vec<String> = (0..4).map(|i| content(&out.response, i)).collect();
    for (i, t) in texts.iter().enumerate() {
        assert!(re.is_match(t), "choice {i}: {t:?}");
        assert_eq!(out.response["choices"][i]["index"], i);
    }
    assert!(texts.iter().any(|t| t != &texts[0]), "{texts:?}");
    // The same seed reproduces every choice.
    assert_eq!(
        run_with(&body, None).response["choices"],
        out.response["choices"]
    );
    // Streaming gives the same choices.
    let mut sbody = body.clone();
    sbody["stream"] = true.into();
    let stream = run_with(&sbody, None);
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(&streamed(&stream.chunks, i), t);
    }
}

#[test]
fn jump_forward_feeds_forced_tokens_without_sampling() {
    // The literal is forced byte by byte; with jump-forward it goes to the model in one pass.
    let body = chat(json!({"guided_regex": "the quick brown fox [0-9]", "max_tokens": 40}));
    let fast = run_with(&body, None);
    assert_eq!(
        content(&fast.response, 0)[..20].to_owned(),
        "the quick brown fox "
    );
    // With logprobs (jump-forward off) every token is its own step.
    let mut slow_body = body.clone();
    slow_body["logprobs"] = true.into();
    let slow = run_with(&slow_body, None);
    assert_eq!(
        content(&slow.response, 0)[..20].to_owned(),
        "the quick brown fox "
    );
    assert!(
        fast.calls * 2 < slow.calls,
        "{} vs {} forward calls",
        fast.calls,
        slow.calls
    );
    // Usage still counts every token.
    assert!(
        fast.response["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            >= 5
    );
}

#[test]
fn logprobs_list_only_allowed_tokens_with_their_bytes() {
    let body = chat(
        json!({"guided_choice": ["alpha", "beta"], "logprobs": true, "top_logprobs": 5, "seed": 2}),
    );
    let out = run_with(&body, None);
    let text = content(&out.response, 0);
    let entries = out.response["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    let mut bytes = Vec::new();
    for e in &entries {
        let lp = e["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let top = e["top_logprobs"].as_array().unwrap();
        assert!(!top.is_empty() && top.len() <= 5);
        // Alternatives are sorted and the chosen token is among them or less likely.
        for w in top.windows(2) {
            assert!(w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64());
        }
        assert!(top[0]["logprob"].as_f64().unwrap() >= lp);
        bytes.extend(
            e["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8),
        );
    }
    // The entries spell the text: the reply ends where the choice does, without sampling
    // the end-of-sequence token that is all that could follow.
    assert_eq!(String::from_utf8_lossy(&bytes), text);
    // At the first step only `a` and `b` starts are allowed: every alternative starts so.
    for alt in entries[0]["top_logprobs"].as_array().unwrap() {
        let t = alt["token"].as_str().unwrap();
        assert!(
            "alpha".starts_with(t) || "beta".starts_with(t),
            "{t:?} is not allowed"
        );
    }
    // Completions logprobs have the legacy shape.
    let out = run_with(
        &json!({"prompt": "x", "max_tokens": 4, "logprobs": 2}),
        None,
    );
    let lp = &out.response["choices"][0]["logprobs"];
    assert_eq!(
        lp["tokens"].as_array().unwrap().len(),
        lp["token_logprobs"].as_array().unwrap().len()
    );
    assert_eq!(lp["text_offset"][0], 0);
}

#[test]
fn streams_never_split_a_utf8_character() {
    // Byte tokens of a random model produce multi-byte characters split across tokens; the
    // regex forces some.
    let body =
        chat(json!({"guided_regex": "(é|日本|🙂|[a-z]){4,12}", "stream": true, "max_tokens": 60}));
    let re = regex::Regex::new("^(é|日本|🙂|[a-z]){4,12}$").unwrap();
    for seed in 0..5 {
        let mut body = body.clone();
        body["seed"] = seed.into();
        let out = run_with(&body, None);
        let text = streamed(&out.chunks, 0);
        assert!(re.is_match(&text), "{text:?}");
        for c in &out.chunks {
            if let Some(s) = c["choices"][0]["delta"]["content"].as_str() {
                assert!(!s.contains('\u{fffd}'), "a split character in {s:?}");
            }
        }
    }
}

#[test]
fn a_client_that_goes_away_stops_generation() {
    let body = chat(json!({"stream": true, "max_tokens": 200, "seed": 1}));
    let full = run_with(&body, None);
    let cut = run_with(&body, Some(3));
    assert!(
        cut.calls < full.calls && cut.calls <= 3,
        "{} forward calls after the client left",
        cut.calls
    );
}

#[test]
fn unknown_fields_are_ignored_and_reported() {
    let out = run_with(&chat(json!({"frobnicate": 1, "temprature": 0.5})), None);
    let warnings = out.response["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings
        .iter()
        .any(|w| w.as_str().unwrap().contains("temprature")));
    let out = run_with(&chat(json!({"user": "u1", "model": "anything"})), None);
    assert!(out.response.get("warnings").is_none());
}

#[test]
fn tool_schemas_matter_only_where_a_call_can_be_forced() {
    // `uniqueItems` and a recursive model: schemas the compiler refuses.
    let hard = json!({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}});
    let recursive = json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
        "properties": {"next": {"$ref": "#/$defs/Node"}}}}});
    let tools = json!([
        {"type": "function", "function": {"name": "tag", "parameters": hard}},
        {"type": "function", "function": {"name": "walk", "parameters": recursive}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]}}}
    ]);
    for choice in [json!("auto"), json!("none"), Value::Null] {
        let body = chat(json!({"tools": tools, "tool_choice": choice}));
        let out = run_with(&body, None);
        let warnings: Vec<&str> = out.response["warnings"]
            .as_array()
            .unwrap_or_else(|| panic!("{choice}: no warnings in {}", out.response))
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert_eq!(warnings.len(), 2, "{choice}: {warnings:?}");
        assert!(warnings[0].starts_with("tools[0] `tag`"), "{warnings:?}");
        assert!(warnings[0].contains("uniqueItems"), "{warnings:?}");
        assert!(warnings[1].starts_with("tools[1] `walk`"), "{warnings:?}");
    }
    // Forcing the good tool by name compiles only its schema: no error, no warning.
    let named = chat(json!({"tools": tools, "max_tokens": 200, "seed": 3,
        "tool_choice": {"type": "function", "function": {"name": "add"}}}));
    let out = run_with(&named, None);
    assert!(out.response.get("warnings").is_none(), "{}", out.response);
    // A named function is exactly one call, parallel_tool_calls left at its default (true).
    let calls = out.response["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no call in {}", out.response));
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["function"]["name"], "add");
    // Forcing a tool whose schema the compiler refuses is the 400 it always was.
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "tag"}}),
    ] {
        let body = chat(json!({"tools": tools, "tool_choice": choice}));
        let err = new_run(&body)
            .err()
            .unwrap_or_else(|| panic!("{choice} was accepted"));
        assert_eq!(err.param(), Some("tools"), "{choice}: {err}");
        assert!(err.message().contains("uniqueItems"), "{choice}: {err}");
    }
}

/// Every constraint kind, on a random-weights model (its outputs run long: the worst case for
/// closing in time), over every small max_tokens: each reply is complete and in the
/// constraint's language, or the request is refused up front because max_tokens is below the
/// shortest output; and once one max_tokens succeeds, every larger one does.
#[test]
fn constrained_replies_close_within_any_max_tokens() {
    use poot::constraint::{Compiled, Spec};
    let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "minLength": 3}},
        "required": ["a", "b"], "additionalProperties": false}}}]);
    let kinds: Vec<(&str, Value)> = vec![
        (
            "choice",
            json!({"guided_choice": ["a rather long answer", "no"]}),
        ),
        (
            "regex",
            json!({"guided_regex": "[a-z]{3,20}@[a-z]{2,10}\\.(com|org)"}),
        ),
        (
            "grammar",
            json!({"guided_grammar": "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= list | [0-9]+ | \"\\\"\" [a-z]* \"\\\"\""}),
        ),
        (
            "json (DFA)",
            json!({"guided_json": {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 2}, "tags": {"type": "array", "items": {"enum": ["x", "yy"]}, "minItems": 1},
            "n": {"type": "integer", "minimum": 10}}, "required": ["name", "tags", "n"], "additionalProperties": false}}),
        ),
        (
            "json (grammar)",
            json!({"guided_json": {"type": "object", "properties": {
            "meta": {"type": "object"}, "id": {"type": "string", "minLength": 12}}, "required": ["meta", "id"]}}),
        ),
        (
            "json_object",
            json!({"response_format": {"type": "json_object"}}),
        ),
        ("tool", json!({"tools": tools, "tool_choice": "required"})),
    ];
    for (kind, fields) in &kinds {
        let mut first_ok = None;
        // A forced call's markup alone is some 50 bytes (tokens, in this vocabulary).
        let most = if *kind == "tool" { 80 } else { 48 };
        for max_tokens in 1..=most {
            let mut body = chat(fields.clone());
            body["max_tokens"] = max_tokens.into();
            body["n"] = 2.into();
            body["seed"] = (max_tokens as u64).into();
            body["stream"] = (max_tokens % 2 == 0).into();
            body["step_stats"] = true.into();
            let run = match new_run(&body) {
                Ok(run) => run,
                Err(e) => {
                    assert!(
                        first_ok.is_none(),
                        "{kind}: max_tokens {max_tokens} refused after {first_ok:?} ran: {e}"
                    );
                    assert_eq!(e.param(), Some("max_tokens"), "{kind}: {e}");
                    assert!(e.message().contains("too few"), "{kind}: {e}");
                    continue;
                }
            };
            drop(run);
            first_ok.get_or_insert(max_tokens);
            let out = run_with(&body, None);
            let usage = &out.response["usage"];
            assert!(usage["completion_tokens"].as_u64().unwrap() <= 2 * max_tokens as u64);
            for i in 0..2 {
                let choice = &out.response["choices"][i];
                let text = if *kind == "tool" {
                    let calls = choice["message"]["tool_calls"]
                        .as_array()
                        .unwrap_or_else(|| {
                            panic!("{kind}: max_tokens {max_tokens}: no call in {choice}")
                        });
                    let args: Value =
                        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap())
                            .unwrap();
                    assert!(
                        args["a"].is_i64() && args["b"].as_str().unwrap().chars().count() >= 3,
                        "{args}"
                    );
                    continue;
                } else {
                    content(&out.response, i)
                };
                // The compiled constraint's own whole-string check (each engine's is tested
                // against independent oracles elsewhere); serde_json too where it reads the
                // value (it refuses numbers past f64, such as `6e29666`).
                let spec = Spec::from_request(&body).unwrap().unwrap();
                let compiled: Compiled = spec.compile().unwrap();
                let ok = compiled.matches(text.as_bytes());
                if *kind == "json_object" {
                    if let Err(e) = serde_json::from_str::<Value>(&text) {
                        assert!(e.to_string().contains("out of range"), "{text:?}: {e}");
                    }
                }
                assert!(
                    ok,
                    "{kind}: max_tokens {max_tokens}, choice {i}: {text:?} ({})",
                    choice["finish_reason"]
                );
                if body["stream"] == true {
                    assert_eq!(streamed(&out.chunks, i), text, "{kind}: streamed text");
                }
            }
            // A steered close says so: finish_reason length, counted in usage, marked steps.
            let closes = usage
                .get("forced_closes")
                .map_or(0, |v| v.as_u64().unwrap());
            let lengths = (0..2)
                .filter(|&i| out.response["choices"][i]["finish_reason"] == "length")
                .count() as u64;
            assert!(
                closes <= lengths,
                "{kind}: {closes} closes, {lengths} lengths"
            );
            let marked = out.response["step_stats"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["closing"] == true);
            assert_eq!(marked, closes > 0, "{kind}: max_tokens {max_tokens}");
        }
        let first_ok = first_ok.unwrap_or_else(|| panic!("{kind}: no max_tokens up to {most} ran"));
        eprintln!("{kind}: every max_tokens from {first_ok} closes");
    }
}

#[test]
fn max_tokens_ends_with_length() {
    let out = run_with(
        &chat(json!({"max_tokens": 3, "logit_bias": {"2": -100}, "seed": 4})),
        None,
    );
    assert_eq!(out.response["choices"][0]["finish_reason"], "length");
    assert_eq!(out.response["usage"]["completion_tokens"], 3);
}

/// A fake clock for `step_stats`: every reading is 0.25 ms after the previous one, so each
/// mask (two readings) takes exactly 250 µs.
fn quarter_ms_clock() -> f64 {
    static TICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    TICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as f64 * 0.25
}

#[test]
fn step_stats_give_each_masks_allowed_count_time_and_forced_tokens() {
    use poot::constraint::{Constraint, Matcher, Spec};
    let body = chat(json!({
        "guided_regex": "the quick brown fox (jumps|leaps) [0-9]",
        "max_tokens": 60, "n": 2, "stream": true, "step_stats": true,
    }));
    let model = Model::from_gguf_bytes(tiny()).unwrap();
    let engine = engine();
    let clocked = RunOptions {
        clock: Some(quarter_ms_clock),
        ..opts()
    };
    let mut run = Run::new(Arc::clone(&engine), &body, Endpoint::Chat, clocked).unwrap();
    let mut backend = CpuBackend {
        model: &model,
        session: model.session(run.context_needed()).unwrap(),
    };
    let mut chunks = Vec::new();
    run.drive(&mut backend, &mut |c| {
        chunks.push(c);
        true
    })
    .unwrap();
    let response = run.response();
    let whole = response["step_stats"].as_array().unwrap().clone();
    // The stream carries every step once, in order.
    let streamed: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["step_stats"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(streamed, whole);
    assert_eq!(whole.len(), run.step_stats().len());

    let vocab = engine.vocab();
    let spec = Spec::from_request(&body).unwrap().unwrap();
    let constraint = Arc::new(Constraint::from_spec(&spec, Arc::clone(vocab)).unwrap());
    let mut forced_seen = 0;
    for i in 0..2 {
        let steps: Vec<&Value> = whole.iter().filter(|s| s["index"] == i).collect();
        assert!(!steps.is_empty());
        // Oracle: replay the tokens on a fresh matcher; each step's count is the number of
        // tokens it allows, found one by one.
        let mut m = Matcher::new(Arc::clone(&constraint));
        let mut text = String::new();
        for (k, s) in steps.iter().enumerate() {
            let allowed = (0..vocab.len() as TokenId)
                .filter(|&t| m.is_allowed(t))
                .count();
            assert_eq!(s["allowed"], allowed, "choice {i} step {k}: {s}");
            assert_eq!(s["mask_us"], 250.0);
            let token = s["token"].as_u64().unwrap() as TokenId;
            m.advance(token).unwrap();
            if k + 1 < steps.len() {
                text += s["text"].as_str().unwrap();
            }
            for f in s["forced"].as_array().unwrap() {
                m.advance(f["token"].as_u64().unwrap() as TokenId).unwrap();
                text += f["text"].as_str().unwrap();
                forced_seen += 1;
            }
        }
        // The reply ends where the regex does: no step samples end-of-sequence (only it
        // could follow), and the steps spell the reply.
        assert!(m.is_accepting() && !m.is_finished());
        text += steps.last().unwrap()["text"].as_str().unwrap();
        assert_eq!(text, content(&response, i));
    }
    assert!(forced_seen > 0, "the literal forces tokens");

    // Off by default; a non-boolean is a 400 naming the field.
    let plain = run_with(&chat(json!({"guided_regex": "ab", "stream": true})), None);
    assert!(plain.response.get("step_stats").is_none());
    assert!(plain.chunks.iter().all(|c| c.get("step_stats").is_none()));
    let err = new_run(&chat(json!({"step_stats": "yes"}))).unwrap_err();
    assert_eq!(err.param(), Some("step_stats"));
    // Unconstrained steps have no mask: allowed and mask_us are null.
    let free = run_with(&chat(json!({"step_stats": true, "max_tokens": 3})), None);
    for s in free.response["step_stats"].as_array().unwrap() {
        assert!(s["allowed"].is_null() && s["mask_us"].is_null(), "{s}");
    }
}
