//! Structure-aware fuzzing of everything a request carries: JSON Schemas (generated with
//! `$ref`/`$defs`, nesting, huge counts, long and odd-Unicode strings, and mutations of the
//! JSONSchemaBench schemas), regexes, GBNF grammars (generated, and mutations of
//! `tests/data/grammars`; each compiled one is also stepped: masks, tokens, rollbacks),
//! `guided_choice` lists, whole request bodies and `--limits` overrides (each followed by a
//! compile under what they allow). The property for every input: a compiled constraint or a
//! 4xx error, within 1 s and 256 MiB on the wasm32 stack (`tests/bounded`), never a panic, an
//! overflow or a hang.
//!
//! `POOT_FUZZ_CASES` sets the cases per target (default 20,000, and 2,000 for the grammars,
//! which are also stepped: the whole file runs in ~40 s in `make test`), `POOT_FUZZ_SEED` the
//! first seed; `scripts/fuzz.sh` runs a long release
//! build. A failing case prints its seed and input; keep the input under
//! `tests/data/fuzz/<target>/` (one file per input), where every run replays it first.

mod bounded;
// Its `common` is the fuzz plumbing's (one copy of the module in this binary).
mod grammar_support;

use bounded::{check, compile_body, run_case};
use common::Rng;
use grammar_support::common;
use poot::api::{Endpoint, Request};
use poot::constraint::{Compiled, Constraint, Matcher, Spec};
use poot::mask::words_for;
use poot::vocab::{TokenId, Vocabulary};
use serde_json::{json, Map, Value};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cases() -> u64 {
    common::fuzz_cases(20_000) as u64
}

fn first_seed() -> u64 {
    common::fuzz_seed()
}

/// The inputs kept from earlier failures of `target`, as text.
fn regressions(target: &str) -> Vec<(String, String)> {
    let out: Vec<(String, String)> = common::fuzz_corpus(target)
        .into_iter()
        .map(|(path, bytes)| {
            let text = String::from_utf8(bytes).expect("a regression input is UTF-8 text");
            (path.display().to_string(), text)
        })
        .collect();
    assert!(
        !out.is_empty(),
        "tests/data/fuzz/{target}: no regression inputs"
    );
    out
}

/// How a target's cases went: the figures its report prints.
#[derive(Default)]
struct Tally {
    ran: u64,
    ok: u64,
    /// Errors by code.
    errors: std::collections::BTreeMap<String, u64>,
    slowest: Duration,
}

impl Tally {
    /// Runs one input and asserts the bounds, naming the seed so the case can be replayed.
    fn case(
        &mut self,
        target: &str,
        label: &str,
        input: &str,
        work: impl FnOnce() -> Result<(), poot::Error> + Send + 'static,
    ) {
        let name = format!("{target} {label}");
        let o = run_case(&name, work);
        if std::panic::catch_unwind(|| check(&name, &o)).is_err() {
            panic!(
                "{name} failed on this input (keep it under tests/data/fuzz/{target}/):\n{input}"
            );
        }
        self.ran += 1;
        self.slowest = self.slowest.max(o.elapsed);
        match o.result {
            Ok(()) => self.ok += 1,
            Err((_, code, _)) => *self.errors.entry(code).or_default() += 1,
        }
    }

    /// Prints how the target went (the figures the fuzzing note quotes).
    fn report(&self, target: &str, start: Instant) {
        eprintln!(
            "fuzz {target}: {} cases in {:.1} s ({} ok, errors {:?}), slowest {:.1} ms",
            self.ran,
            start.elapsed().as_secs_f64(),
            self.ok,
            self.errors,
            self.slowest.as_secs_f64() * 1e3
        );
    }
}

// --- Values and strings ---------------------------------------------------------------

const ODD_STRINGS: &[&str] = &[
    "",
    "a",
    "é",
    "\u{10FFFF}",
    "\u{FFFD}",
    "~0",
    "~1",
    "/",
    "%",
    "%25",
    "%e",
    "%aé",
    "\"",
    "\\",
    "\n",
    "\u{0}",
    "#",
    "$defs",
    "properties",
    "a b",
    "日本",
    "👍",
];

fn string(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => ODD_STRINGS[rng.below(ODD_STRINGS.len())].to_owned(),
        1 => {
            let unit = ODD_STRINGS[rng.below(ODD_STRINGS.len())];
            let most = if rng.chance(0.1) { 2000 } else { 20 };
            unit.repeat(1 + rng.below(most))
        }
        _ => {
            let n = rng.below(8);
            (0..n)
                .map(|_| (b'a' + rng.below(4) as u8) as char)
                .collect()
        }
    }
}

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "10",
    "0.5",
    "1.5",
    "-0.0",
    "1e308",
    "-1e308",
    "1e-300",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "-9223372036854775808",
    "1e2",
    "255",
    "256",
    "1000000",
];

fn number(rng: &mut Rng) -> Value {
    serde_json::from_str(NUMBERS[rng.below(NUMBERS.len())]).expect("a JSON number")
}

fn count(rng: &mut Rng) -> Value {
    match rng.below(8) {
        0 => number(rng),
        1 => json!(u32::MAX),
        2 => json!(-1),
        3 => json!("3"),
        _ => json!(rng.below(12)),
    }
}

fn value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => json!(rng.chance(0.5)),
        2 => number(rng),
        3 | 4 => json!(string(rng)),
        5 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        _ => Value::Object(
            (0..rng.below(4))
                .map(|_| (string(rng), value(rng, depth - 1)))
                .collect(),
        ),
    }
}

// --- Schemas ----------------------------------------------------------------------------

const TYPES: &[&str] = &[
    "null", "boolean", "integer", "number", "string", "array", "object", "any", "nope",
];
const FORMATS: &[&str] = &[
    "date",
    "time",
    "date-time",
    "uuid",
    "email",
    "ipv4",
    "ipv6",
    "hostname",
    "uri",
    "duration",
    "regex",
    "x-unknown",
];
const PATTERN_PIECES: &[&str] = &[
    "a",
    "b",
    "é",
    ".",
    "^",
    "$",
    "(",
    ")",
    "(?:",
    "|",
    "*",
    "+",
    "?",
    "{2}",
    "{0,3}",
    "{4294967295}",
    "{1,}",
    "[a-z]",
    "[^a]",
    "\\d",
    "\\w",
    "\\s",
    "\\b",
    "\\u0041",
    "\\x41",
    "\\p{L}",
    "(a?)",
    "(?=a)",
    "\\1",
    "[",
    "]",
    "\\",
    "-",
    "{",
];

fn pattern(rng: &mut Rng) -> String {
    (0..1 + rng.below(8))
        .map(|_| PATTERN_PIECES[rng.below(PATTERN_PIECES.len())])
        .collect()
}

/// A `$ref` to a definition that may or may not exist, the root, or something odd.
fn reference(rng: &mut Rng, defs: usize) -> String {
    match rng.below(8) {
        0 => "#".into(),
        1 => format!("#/$defs/{}", string(rng)),
        2 => "https://example.com/schema.json".into(),
        3 => "#/properties/a".into(),
        _ => format!("#/$defs/d{}", rng.below(defs.max(1) + 1)),
    }
}

fn schema(rng: &mut Rng, depth: u32, defs: usize) -> Value {
    if depth == 0 || rng.chance(0.15) {
        return match rng.below(6) {
            0 => json!(rng.chance(0.8)),
            1 => json!({}),
            _ => json!({"type": TYPES[rng.below(TYPES.len())]}),
        };
    }
    let mut m = Map::new();
    let sub = |rng: &mut Rng| schema(rng, depth - 1, defs);
    for _ in 0..1 + rng.below(4) {
        match rng.below(24) {
            0 => {
                m.insert("type".into(), json!(TYPES[rng.below(TYPES.len())]));
            }
            1 => {
                let ts: Vec<&str> = (0..rng.below(4))
                    .map(|_| TYPES[rng.below(TYPES.len())])
                    .collect();
                m.insert("type".into(), json!(ts));
            }
            2 => {
                m.insert("minLength".into(), count(rng));
                m.insert("maxLength".into(), count(rng));
            }
            3 => {
                m.insert("pattern".into(), json!(pattern(rng)));
            }
            4 => {
                m.insert("format".into(), json!(FORMATS[rng.below(FORMATS.len())]));
            }
            5 => {
                for k in [
                    "minimum",
                    "maximum",
                    "exclusiveMinimum",
                    "exclusiveMaximum",
                    "multipleOf",
                ] {
                    if rng.chance(0.4) {
                        m.insert(k.into(), number(rng));
                    }
                }
            }
            6 => {
                m.insert("items".into(), sub(rng));
                m.insert("minItems".into(), count(rng));
                if rng.chance(0.5) {
                    m.insert("maxItems".into(), count(rng));
                }
            }
            7 => {
                m.insert(
                    "prefixItems".into(),
                    json!((0..rng.below(4)).map(|_| sub(rng)).collect::<Vec<_>>()),
                );
            }
            8 => {
                m.insert("uniqueItems".into(), json!(rng.chance(0.7)));
                m.insert("contains".into(), sub(rng));
            }
            9 | 10 => {
                let props: Map<String, Value> =
                    (0..rng.below(6)).map(|_| (string(rng), sub(rng))).collect();
                let keys: Vec<String> = props.keys().cloned().collect();
                m.insert("properties".into(), Value::Object(props));
                let mut required: Vec<String> =
                    keys.into_iter().filter(|_| rng.chance(0.5)).collect();
                if rng.chance(0.2) {
                    required.push(string(rng));
                }
                m.insert("required".into(), json!(required));
            }
            11 => {
                let extra = if rng.chance(0.5) {
                    json!(rng.chance(0.5))
                } else {
                    sub(rng)
                };
                m.insert("additionalProperties".into(), extra);
            }
            12 => {
                let pp: Map<String, Value> = (0..1 + rng.below(3))
                    .map(|_| (pattern(rng), sub(rng)))
                    .collect();
                m.insert("patternProperties".into(), Value::Object(pp));
            }
            13 => {
                m.insert("propertyNames".into(), sub(rng));
                m.insert("minProperties".into(), count(rng));
                m.insert("maxProperties".into(), count(rng));
            }
            14 => {
                let values: Vec<Value> = (0..1 + rng.below(6)).map(|_| value(rng, 3)).collect();
                m.insert("enum".into(), json!(values));
            }
            15 => {
                m.insert("const".into(), value(rng, 4));
            }
            16 | 17 => {
                let k = ["anyOf", "oneOf", "allOf"][rng.below(3)];
                m.insert(
                    k.into(),
                    json!((0..1 + rng.below(4)).map(|_| sub(rng)).collect::<Vec<_>>()),
                );
            }
            18 => {
                m.insert("not".into(), sub(rng));
            }
            19 => {
                m.insert("if".into(), sub(rng));
                m.insert("then".into(), sub(rng));
                m.insert("else".into(), sub(rng));
            }
            20 | 21 => {
                m.insert("$ref".into(), json!(reference(rng, defs)));
            }
            22 => {
                let dep: Map<String, Value> = (0..1 + rng.below(2))
                    .map(|_| {
                        let d = if rng.chance(0.5) {
                            json!([string(rng)])
                        } else {
                            sub(rng)
                        };
                        (string(rng), d)
                    })
                    .collect();
                let k = ["dependencies", "dependentRequired", "dependentSchemas"][rng.below(3)];
                m.insert(k.into(), Value::Object(dep));
            }
            _ => {
                let k = [
                    "unevaluatedProperties",
                    "unevaluatedItems",
                    "$dynamicRef",
                    "nullable",
                    "x-y",
                ][rng.below(5)];
                m.insert(k.into(), sub(rng));
            }
        }
    }
    Value::Object(m)
}

/// A whole schema: definitions that may refer to each other (and to themselves), then a root.
fn root_schema(rng: &mut Rng) -> Value {
    let defs = rng.below(5);
    let depth = 1 + rng.below(5) as u32;
    let mut root = schema(rng, depth, defs);
    if defs > 0 {
        let d: Map<String, Value> = (0..defs)
            .map(|i| (format!("d{i}"), schema(rng, depth, defs)))
            .collect();
        if let Value::Object(m) = &mut root {
            m.insert(
                if rng.chance(0.8) {
                    "$defs"
                } else {
                    "definitions"
                }
                .into(),
                Value::Object(d),
            );
        } else {
            root = json!({"$defs": d, "allOf": [root]});
        }
    }
    root
}

/// The JSONSchemaBench schemas committed in `tests/data` (never `../shared`).
fn corpus_schemas() -> Vec<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/json_schema/jsonschemabench.tsv.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("the corpus"))
        .read_to_string(&mut text)
        .expect("gzip text");
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(_, json)| {
            let v: Value = serde_json::from_str(json).ok()?;
            Some(v.get("schema").unwrap_or(&v).to_string())
        })
        .collect()
}

/// A byte-level mutation of a schema's text: a deletion, a duplicated slice, a number made
/// huge, a nesting wrapper, or an odd string spliced in. Often no longer JSON (then the
/// compile is a 400 for that).
fn mutate(rng: &mut Rng, text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = rng.below(chars.len().max(1));
    let mut out: Vec<char> = chars.clone();
    match rng.below(6) {
        0 => {
            let n = 1 + rng.below(4);
            out.drain(at..(at + n).min(out.len()));
        }
        1 => {
            let end = (at + 1 + rng.below(200)).min(chars.len());
            let slice: Vec<char> = chars[at..end].to_vec();
            for (i, c) in slice.into_iter().enumerate() {
                out.insert(at + i, c);
            }
        }
        2 => {
            let s: String = out.iter().collect();
            return s.replacen(|c: char| c.is_ascii_digit(), "4294967295", 1 + rng.below(3));
        }
        3 => {
            let s: String = out.iter().collect();
            return format!("{{\"allOf\":[{s}],\"anyOf\":[{s},{{\"not\":{s}}}]}}");
        }
        4 => {
            let odd = ODD_STRINGS[rng.below(ODD_STRINGS.len())];
            for (i, c) in odd.chars().enumerate() {
                out.insert(at + i, c);
            }
        }
        _ => {
            let s: String = out.iter().collect();
            return s.replacen("\"type\"", "\"$ref\":\"#\",\"type\"", 1);
        }
    }
    out.into_iter().collect()
}

fn compile_schema_text(
    text: String,
    extra_keys: bool,
) -> impl FnOnce() -> Result<(), poot::Error> + Send + 'static {
    move || {
        // As text: the size bound and the JSON parser's depth bound apply as they do to a
        // request; a value that parses is compiled through guided_json, in both readings of
        // the keys a schema leaves unlisted.
        compile_body(json!({ "guided_json": text, "guided_json_extra_keys": extra_keys }))
    }
}

#[test]
fn json_schemas_compile_or_fail_cleanly() {
    let start = Instant::now();
    let mut tally = Tally::default();
    for (path, text) in regressions("json_schema") {
        for extra_keys in [false, true] {
            tally.case(
                "json_schema",
                &format!("{path} (extra keys {extra_keys})"),
                &text,
                compile_schema_text(text.clone(), extra_keys),
            );
        }
    }
    let seed0 = first_seed();
    for i in 0..cases() {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let text = root_schema(&mut rng).to_string();
        tally.case(
            "json_schema",
            &format!("seed {seed}"),
            &text,
            compile_schema_text(text.clone(), seed % 2 == 1),
        );
    }
    tally.report("json_schema (generated)", start);

    let start = Instant::now();
    let corpus = corpus_schemas();
    let mut tally = Tally::default();
    for i in 0..cases() {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let mut text = corpus[rng.below(corpus.len())].clone();
        for _ in 0..1 + rng.below(3) {
            text = mutate(&mut rng, &text);
        }
        tally.case(
            "json_schema",
            &format!("mutation seed {seed}"),
            &text,
            compile_schema_text(text.clone(), seed % 2 == 1),
        );
    }
    tally.report("json_schema (corpus mutations)", start);
}

#[test]
fn regexes_and_choices_compile_or_fail_cleanly() {
    let start = Instant::now();
    let mut tally = Tally::default();
    for (path, text) in regressions("regex") {
        let body = json!({ "guided_regex": text });
        tally.case("regex", &path, &text, move || compile_body(body));
    }
    let seed0 = first_seed();
    for i in 0..cases() * 2 {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let mut text = pattern(&mut rng);
        if rng.chance(0.2) {
            text = text.repeat(1 + rng.below(600)).chars().take(4200).collect();
        }
        let body = json!({ "guided_regex": text });
        tally.case("regex", &format!("seed {seed}"), &text, move || {
            compile_body(body)
        });
    }
    tally.report("regex", start);

    let start = Instant::now();
    let mut tally = Tally::default();
    for i in 0..cases() {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let n = if rng.chance(0.1) {
            1 + rng.below(3000)
        } else {
            rng.below(8)
        };
        let choices: Vec<Value> = (0..n)
            .map(|_| match rng.below(10) {
                0 => value(&mut rng, 1),
                _ => json!(string(&mut rng)),
            })
            .collect();
        let body = json!({ "guided_choice": choices });
        let shown = body.to_string();
        tally.case("choice", &format!("seed {seed}"), &shown, move || {
            compile_body(body)
        });
    }
    tally.report("guided_choice", start);
}

/// Makes one field's value.
type MakeValue = fn(&mut Rng) -> Value;

/// A request body: the fields the parser reads, each sometimes of the wrong type or out of
/// range, and sometimes several constraint fields at once.
fn request_body(rng: &mut Rng, chat: bool) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!(string(rng)));
    if chat {
        let messages: Vec<Value> = (0..rng.below(4))
            .map(|_| {
                let role = ["system", "user", "assistant", "tool", "developer", "x"][rng.below(6)];
                let content = match rng.below(5) {
                    0 => json!([{"type": "text", "text": string(rng)}]),
                    1 => value(rng, 2),
                    _ => json!(string(rng)),
                };
                json!({"role": role, "content": content})
            })
            .collect();
        m.insert("messages".into(), json!(messages));
    } else {
        m.insert(
            "prompt".into(),
            if rng.chance(0.8) {
                json!(string(rng))
            } else {
                value(rng, 2)
            },
        );
    }
    let fields: &[(&str, MakeValue)] = &[
        ("max_tokens", count),
        ("max_completion_tokens", count),
        ("n", count),
        ("temperature", number),
        ("top_p", number),
        ("top_k", count),
        ("min_p", number),
        ("seed", count),
        ("frequency_penalty", number),
        ("presence_penalty", number),
        ("repetition_penalty", number),
        ("logprobs", |r| json!(r.chance(0.5))),
        ("top_logprobs", count),
        ("stream", |r| json!(r.chance(0.5))),
        ("stop", |r| {
            if r.chance(0.5) {
                json!(string(r))
            } else {
                json!((0..r.below(6)).map(|_| string(r)).collect::<Vec<_>>())
            }
        }),
        ("logit_bias", |r| {
            Value::Object(
                (0..r.below(5))
                    .map(|_| {
                        (
                            if r.chance(0.7) {
                                r.below(60000).to_string()
                            } else {
                                string(r)
                            },
                            number(r),
                        )
                    })
                    .collect(),
            )
        }),
        ("guided_regex", |r| json!(pattern(r))),
        ("guided_choice", |r| {
            json!((0..r.below(4)).map(|_| string(r)).collect::<Vec<_>>())
        }),
        ("guided_grammar", |r| {
            json!(format!(
                "root ::= \"{}\" | [a-c]*",
                string(r).replace(['"', '\\'], "")
            ))
        }),
        ("guided_json", |r| schema(r, 2, 0)),
        // Read in every request (a boolean; anything else is a 400), applied to guided_json,
        // response_format and tools.
        ("guided_json_extra_keys", |r| match r.below(3) {
            0 => json!(true),
            1 => json!(false),
            _ => value(r, 1),
        }),
        ("response_format", |r| match r.below(4) {
            0 => json!({"type": "json_object"}),
            1 => {
                json!({"type": "json_schema", "json_schema": {"name": string(r), "schema": schema(r, 2, 0), "strict": r.chance(0.5)}})
            }
            2 => json!({"type": "text"}),
            _ => value(r, 2),
        }),
        ("tools", |r| {
            // Sometimes up to MAX_TOOLS (128) and past it: the request's shared schema budget.
            let n = if r.chance(0.1) {
                r.below(140)
            } else {
                r.below(3)
            };
            json!((0..n).map(|_| json!({"type": "function", "function": {"name": string(r), "parameters": schema(r, 2, 0)}})).collect::<Vec<_>>())
        }),
        ("tool_choice", |r| match r.below(4) {
            0 => json!("auto"),
            1 => json!("required"),
            2 => json!({"type": "function", "function": {"name": string(r)}}),
            _ => value(r, 1),
        }),
        ("parallel_tool_calls", |r| json!(r.chance(0.5))),
    ];
    for _ in 0..rng.below(7) {
        let (k, make) = fields[rng.below(fields.len())];
        m.insert(k.into(), make(rng));
    }
    if rng.chance(0.1) {
        m.insert(string(rng), value(rng, 2));
    }
    Value::Object(m)
}

/// Reads a request body as the server does and, for a forced tool call, builds the call's
/// grammar from the tools' rules as a run does (ChatML, the codec that forces).
fn parse_request(body: &Value, endpoint: Endpoint) -> Result<(), poot::Error> {
    let req = Request::parse(body, endpoint)?;
    poot::api::tools::Codec::ChatMl
        .forced_grammar(
            &req.tools,
            &req.tool_choice,
            req.parallel_tool_calls,
            &poot::limits::Limits::DEFAULT,
        )
        .map(|_| ())
}

#[test]
fn request_bodies_parse_or_fail_cleanly() {
    let start = Instant::now();
    let mut tally = Tally::default();
    for (path, text) in regressions("request") {
        let body: Value = serde_json::from_str(&text).expect("a kept request body is JSON");
        tally.case("request", &path, &text, move || {
            parse_request(&body, Endpoint::Chat)
        });
    }
    let seed0 = first_seed();
    for i in 0..cases() * 2 {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let chat = rng.chance(0.7);
        let body = request_body(&mut rng, chat);
        let shown = body.to_string();
        let endpoint = if chat {
            Endpoint::Chat
        } else {
            Endpoint::Completion
        };
        tally.case("request", &format!("seed {seed}"), &shown, move || {
            parse_request(&body, endpoint)
        });
    }
    tally.report("request", start);
}

/// Random `--limits` overrides (names known and not, numbers in and out of range, other JSON),
/// read as the server and the package read them (`Limits::from_json_text`), then a generated
/// schema, regex, choice list or grammar compiled under whatever they allow (a grammar also
/// stepped through its masks): the read is `Ok` or an `invalid_input` naming `limits`, and every
/// budget, however small, ends in a result or a 4xx.
#[test]
fn tightened_limits_read_cleanly_and_bound_every_compile() {
    use poot::limits::Limits;
    let vocab = grammar_support::synthetic().vocab;
    let start = Instant::now();
    let mut tally = Tally::default();
    let seed0 = first_seed();
    for i in 0..cases() {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let overrides = if rng.chance(0.8) {
            Value::Object(
                (0..rng.below(4))
                    .map(|_| {
                        let name = if rng.chance(0.9) {
                            Limits::NAMES[rng.below(Limits::NAMES.len())].to_owned()
                        } else {
                            string(&mut rng)
                        };
                        let n = if rng.chance(0.7) {
                            json!(1 + rng.below(64))
                        } else {
                            count(&mut rng)
                        };
                        (name, n)
                    })
                    .collect(),
            )
        } else {
            value(&mut rng, 2)
        };
        // Each kind of constraint, so that every field can be the one that stops it; a
        // grammar's masks too (grammar_step_work).
        let body = match rng.below(4) {
            0 => json!({ "guided_json": root_schema(&mut rng).to_string() }),
            1 => json!({ "guided_regex": pattern(&mut rng) }),
            2 => {
                json!({ "guided_choice": (0..1 + rng.below(40)).map(|_| string(&mut rng)).collect::<Vec<_>>() })
            }
            _ => json!({ "guided_grammar": gbnf_grammar(&mut rng) }),
        };
        let shown = format!("limits {overrides}, body {body}");
        let vocab = vocab.clone();
        tally.case("limits", &format!("seed {seed}"), &shown, move || {
            let limits = match Limits::from_json_text(&overrides.to_string()) {
                Ok(l) => l,
                Err(e) => {
                    assert_eq!(e.param(), Some("limits"), "{e}");
                    return Err(e);
                }
            };
            let Some(spec) = Spec::from_request_with(&body, &limits)? else {
                return Ok(());
            };
            match spec.compile_with(&limits)? {
                compiled @ Compiled::Grammar(_) if body.get("guided_grammar").is_some() => {
                    drive_grammar(compiled, &vocab, &mut Rng::new(seed))
                }
                _ => Ok(()),
            }
        });
    }
    tally.report("limits", start);
}

// --- GBNF grammars ----------------------------------------------------------------------

/// Where the generator stops adding items and alternatives to a list (so its output stays
/// linear in its depth), and rules to a grammar: some grammars still pass the 16 KiB text
/// bound.
const GBNF_CAP: usize = 3_000;
const GBNF_RULES_CAP: usize = 12_000;

/// Characters of literals and classes: plain and odd Unicode, and the escapes GBNF knows.
const GBNF_CHARS: &[&str] = &[
    "a",
    "b",
    "x",
    "0",
    " ",
    "é",
    "日",
    "👍",
    "\u{10FFFF}",
    "\u{FFFD}",
    "\\n",
    "\\r",
    "\\t",
    "\\\\",
    "\\\"",
    "\\[",
    "\\]",
    "\\-",
    "\\x41",
    "\\xe9",
    "\\xFF",
    "\\u00e9",
    "\\u65e5",
    "\\U0001F600",
    "\\U0010FFFF",
    "\\x00",
    "\\u0000",
];
/// Characters that are errors: an unknown escape, too few hex digits, a surrogate, past
/// U+10FFFF, a bare `\`, raw NUL and newlines, a quote or bracket that ends the item early.
const GBNF_BAD_CHARS: &[&str] = &[
    "\\q",
    "\\x4",
    "\\u12",
    "\\uD800",
    "\\uDFFF",
    "\\U00110000",
    "\\UFFFFFFFF",
    "\\",
    "\u{0}",
    "\n",
    "\r\n",
    "\"",
    "]",
    "\\U0000D800",
];
/// Class ranges: wide, Unicode, across the surrogates; past the first [`GBNF_GOOD_RANGES`],
/// a reversed one (an error) and one of surrogates only (no character).
const GBNF_RANGES: &[(&str, &str)] = &[
    ("a", "z"),
    ("0", "9"),
    ("A", "Z"),
    ("\\x00", "\\U0010FFFF"),
    ("\\u0080", "\\uFFFF"),
    ("é", "日"),
    ("\\uD7FF", "\\uE000"),
    ("\\x00", "\\x7F"),
    ("\\U0001F600", "\\U0010FFFF"),
    ("\\-", "\\]"),
    ("z", "a"),
    ("\\uD800", "\\uDFFF"),
];
const GBNF_GOOD_RANGES: usize = 10;
/// Repetition counts: at the counter and empty-item bounds, at `u32::MAX`, and past the first
/// [`GBNF_GOOD_COUNTS`], beyond it.
const GBNF_COUNTS: &[&str] = &[
    "63",
    "64",
    "127",
    "128",
    "129",
    "999",
    "1000",
    "1001",
    "2000",
    "65535",
    "1000000",
    "4294967295",
    "00000000000000000000000000002",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999999",
];
const GBNF_GOOD_COUNTS: usize = 13;
const GBNF_BAD_NAMES: &[&str] = &[
    "é",
    "名前",
    "r\u{0}",
    "r é",
    "👍",
    "r#x",
    "r:",
    "\u{10FFFF}",
    "--x",
    "r\u{FFFD}",
];

/// A generator of GBNF grammars. A `hostile` one (half of them) also writes what GBNF does
/// not allow (bad escapes, names, counts and classes, undefined rules, a missing `root`); the
/// other half mostly get past the parser, to the compiler's bounds and the matcher.
struct GbnfGen<'a> {
    rng: &'a mut Rng,
    names: Vec<String>,
    hostile: bool,
}

impl GbnfGen<'_> {
    /// True with probability `p`, and only for a hostile grammar.
    fn bad(&mut self, p: f64) -> bool {
        self.hostile && self.rng.chance(p)
    }

    /// Rule names: plain, with `-`/`_`/digits, long, `root`-like, and (hostile) names GBNF
    /// does not allow.
    fn name(&mut self) -> String {
        if self.bad(0.1) {
            return GBNF_BAD_NAMES[self.rng.below(GBNF_BAD_NAMES.len())].to_owned();
        }
        match self.rng.below(14) {
            0 => "n".repeat(1 + self.rng.below(3000)),
            1 => ["ROOT", "root-2", "_", "9", "x-y", "--", "root_"][self.rng.below(7)].to_owned(),
            2 => format!("r-{}_{}", self.rng.below(10), self.rng.below(10)),
            _ => format!("r{}", self.rng.below(8)),
        }
    }

    fn char(&mut self) -> &'static str {
        if self.bad(0.03) {
            GBNF_BAD_CHARS[self.rng.below(GBNF_BAD_CHARS.len())]
        } else {
            GBNF_CHARS[self.rng.below(GBNF_CHARS.len())]
        }
    }

    fn literal(&mut self) -> String {
        let body: String = match self.rng.below(12) {
            0 => String::new(),
            1 => self.char().repeat(1 + self.rng.below(1000)),
            _ => (0..1 + self.rng.below(5)).map(|_| self.char()).collect(),
        };
        format!("\"{body}\"")
    }

    fn class(&mut self) -> String {
        let mut s = String::from("[");
        if self.rng.chance(0.3) {
            s.push('^');
        }
        let n = match self.rng.below(10) {
            0 if self.hostile => 0,
            1 => 20 + self.rng.below(300),
            _ => 1 + self.rng.below(4),
        };
        for _ in 0..n {
            if self.rng.chance(0.5) {
                let ranges = if self.hostile {
                    GBNF_RANGES.len()
                } else {
                    GBNF_GOOD_RANGES
                };
                let (lo, hi) = GBNF_RANGES[self.rng.below(ranges)];
                s.push_str(&format!("{lo}-{hi}"));
            } else if self.bad(0.2) {
                s.push_str(["-", "^"][self.rng.below(2)]);
            } else {
                s.push_str(self.char());
            }
        }
        if !self.bad(0.02) {
            s.push(']');
        }
        s
    }

    fn count(&mut self) -> String {
        if self.rng.chance(0.6) {
            return self.rng.below(6).to_string();
        }
        let n = if self.hostile {
            GBNF_COUNTS.len()
        } else {
            GBNF_GOOD_COUNTS
        };
        GBNF_COUNTS[self.rng.below(n)].to_owned()
    }

    /// `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` (spaces inside sometimes), and (hostile) a
    /// maximum below the minimum or a malformed count.
    fn suffix(&mut self) -> String {
        if self.bad(0.05) {
            let bad = ["{", "{,3}", "{a}", "{1,2", "{-1}", "{1,,2}", "{}", "{3,2}"];
            return bad[self.rng.below(bad.len())].into();
        }
        match self.rng.below(11) {
            0..=2 => "*".into(),
            3 | 4 => "+".into(),
            5 | 6 => "?".into(),
            7 => format!("{{{}}}", self.count()),
            8 => format!("{{{},}}", self.count()),
            9 => {
                let (a, b) = (self.count(), self.count());
                match (a.parse::<u128>(), b.parse::<u128>()) {
                    (Ok(x), Ok(y)) if x > y => format!("{{{b},{a}}}"),
                    _ => format!("{{{a},{b}}}"),
                }
            }
            _ => format!("{{ {} , {} }}", self.rng.below(4), 4 + self.rng.below(4)),
        }
    }

    fn reference(&mut self) -> String {
        if self.bad(0.05) {
            return self.name();
        }
        self.names[self.rng.below(self.names.len())].clone()
    }

    /// An item, or at `depth` > 0 a group, with a repetition sometimes (operators stacked
    /// now and then: `"a"**`, `x{2}{3}`).
    fn item(&mut self, depth: u32) -> String {
        let mut s = match self.rng.below(if depth == 0 { 6 } else { 10 }) {
            0 | 1 => self.literal(),
            2 => self.class(),
            3 => ".".into(),
            4 | 5 => self.reference(),
            6..=8 => format!("({})", self.alternates(depth - 1, true)),
            _ => self.nasty(depth - 1),
        };
        if self.rng.chance(0.35) {
            s.push_str(&self.suffix());
            while self.rng.chance(0.05) {
                s.push_str(&self.suffix());
            }
        }
        s
    }

    /// Items that stress one bound each: nested counted repetitions, counts of items that
    /// can match the empty string or consume nothing, parentheses a few hundred deep, a long
    /// run of operators, many alternatives, a long literal.
    fn nasty(&mut self, depth: u32) -> String {
        let item = |g: &mut Self| {
            if depth > 0 && g.rng.chance(0.3) {
                g.item(depth - 1)
            } else {
                g.literal()
            }
        };
        match self.rng.below(8) {
            0 => {
                // ("a"{1000}){1000}, three levels sometimes.
                let mut s = item(self);
                for _ in 0..2 + self.rng.below(2) {
                    s = format!("({s}){{{}}}", self.count());
                }
                s
            }
            1 => {
                let empty = [
                    "(\"\" | \"a\")",
                    "(\"a\"?)",
                    "([a]*)",
                    "(\"\"*)",
                    "(\"a\"? \"b\"?)",
                    "(\"a\"{0,3})",
                ];
                let e = empty[self.rng.below(empty.len())];
                format!("{e}{}", self.suffix())
            }
            2 => {
                let most = if self.rng.chance(0.2) { 400 } else { 60 };
                let k = 1 + self.rng.below(most);
                let mut s = String::new();
                for _ in 0..k {
                    s.push('(');
                    if self.rng.chance(0.1) && s.len() < GBNF_CAP {
                        s.push_str(&item(self));
                        s.push(' ');
                    }
                }
                s.push_str(&item(self));
                for _ in 0..k {
                    s.push(')');
                    if self.rng.chance(0.1) {
                        s.push_str(&self.suffix());
                    }
                }
                s
            }
            3 => {
                let n = 20 + self.rng.below(1500);
                let mut s = String::from("(");
                for i in 0..n {
                    if s.len() > GBNF_CAP {
                        break;
                    }
                    if i > 0 {
                        s.push_str(" | ");
                    }
                    s.push_str(&item(self));
                }
                s + ")"
            }
            4 => format!("\"{}\"", "a".repeat(100 + self.rng.below(5000))),
            5 => {
                // An item repeated by a long run of operators: `"a"*****...`.
                let op = ["*", "+", "?", "{2}", "{0,1}", "{1000}"][self.rng.below(6)];
                let most = if self.rng.chance(0.2) { 6000 } else { 600 };
                let n = 1 + self.rng.below(most);
                format!("{}{}", item(self), op.repeat(n / op.len() + 1))
            }
            6 => {
                // Counts of items that consume nothing: `""`, `()`, `("" "")`.
                let none = ["\"\"", "()", "(\"\" \"\")", "(\"\"|\"\")"];
                let mut s = none[self.rng.below(none.len())].to_owned();
                for _ in 0..1 + self.rng.below(4) {
                    s = format!("({s}){{{}}}", self.count());
                }
                s
            }
            _ => {
                // The same item counted two ways at once.
                let x = item(self);
                format!("{x}{} {x}{}", self.suffix(), self.suffix())
            }
        }
    }

    fn sequence(&mut self, depth: u32, nested: bool) -> String {
        let n = if self.rng.chance(0.01) {
            50 + self.rng.below(1000)
        } else {
            self.rng.below(5)
        };
        let mut s = String::new();
        for i in 0..n {
            if s.len() > GBNF_CAP {
                break;
            }
            if i > 0 {
                s.push_str(match self.rng.below(12) {
                    0 => "",
                    1 => "\t",
                    // A newline continues a rule only inside parentheses.
                    2 if nested || self.bad(0.5) => "\n   ",
                    3 if nested => " # a comment\n ",
                    _ => " ",
                });
            }
            s.push_str(&self.item(depth));
        }
        s
    }

    fn alternates(&mut self, depth: u32, nested: bool) -> String {
        let n = match self.rng.below(60) {
            0 => 20 + self.rng.below(1500),
            1..=25 => 1,
            _ => 1 + self.rng.below(4),
        };
        let seps = [" | ", "|", " |\n  ", " | # c\n "];
        let mut s = String::new();
        for i in 0..n {
            if s.len() > GBNF_CAP {
                break;
            }
            if i > 0 {
                s.push_str(seps[self.rng.below(seps.len())]);
            }
            s.push_str(&self.sequence(depth, nested));
        }
        // An empty last alternative at the end of a line would continue the rule onto the
        // next one (as in llama.cpp): `""` instead, unless hostile.
        if !nested && (s.is_empty() || s.trim_end().ends_with('|')) && !self.bad(0.5) {
            s.push_str("\"\"");
        }
        s
    }
}

/// A whole grammar: a few rules (`root` usually first, sometimes defined twice or, hostile,
/// missing) whose bodies refer to each other, to themselves first (left recursion, direct or
/// through another rule) and (hostile) to rules never defined; comments, CRLF, newlines after
/// `::=`; sometimes a grammar made to be ambiguous, a long chain of rules, a wide tree of
/// calls, or pieces of GBNF spliced at random.
fn gbnf_grammar(rng: &mut Rng) -> String {
    if rng.chance(0.03) {
        // Ambiguity that doubles the live parses with every `a`.
        return "root ::= t\nt ::= u \"b\" | v \"c\" | \"x\"\nu ::= \"a\" t\nv ::= \"a\" t\n"
            .into();
    }
    if rng.chance(0.03) {
        return gbnf_chain(rng);
    }
    if rng.chance(0.01) {
        return gbnf_wide_calls(rng);
    }
    if rng.chance(0.1) {
        return gbnf_spliced(rng);
    }
    let hostile = rng.chance(0.5);
    let mut g = GbnfGen {
        rng,
        names: Vec::new(),
        hostile,
    };
    let n = if g.rng.chance(0.05) {
        20 + g.rng.below(200)
    } else {
        1 + g.rng.below(6)
    };
    g.names = (0..n).map(|_| g.name()).collect();
    if !g.hostile {
        // Each defined once.
        let mut seen = std::collections::HashSet::new();
        for (i, name) in g.names.iter_mut().enumerate() {
            if !seen.insert(name.clone()) {
                *name = format!("{name}-{i}");
                seen.insert(name.clone());
            }
        }
    }
    if !g.bad(0.05) {
        g.names[0] = "root".into();
    }
    let nl = if g.rng.chance(0.1) { "\r\n" } else { "\n" };
    let depth = 1 + g.rng.below(4) as u32;
    let mut out = String::new();
    if g.rng.chance(0.2) {
        out.push_str(&format!("# generated grammar{nl}{nl}"));
    }
    for i in 0..n {
        if out.len() > GBNF_RULES_CAP {
            break;
        }
        let mut body = g.alternates(depth, false);
        match g.rng.below(10) {
            // Left recursion, direct or through the next rule.
            0 => body = format!("{} {body}", g.names[(i + g.rng.below(2)) % n]),
            1 => body = format!("{body} | {} {body}", g.names[i]),
            _ => {}
        }
        let after = [" ", "", "\n  ", " # c\n  "][g.rng.below(4)];
        out.push_str(&format!("{} ::={after}{body}", g.names[i]));
        if g.rng.chance(0.1) {
            out.push_str(" # trailing comment");
        }
        out.push_str(nl);
        if g.rng.chance(0.05) {
            out.push_str(nl);
        }
    }
    out
}

/// Pieces of GBNF spliced at random (`gbnf_spliced`): tokens, half tokens, whole rules, and
/// what GBNF lacks (`<token>` references, unbalanced quotes and brackets).
const GBNF_PIECES: &[&str] = &[
    "root",
    " ::= ",
    "a",
    "b",
    "x-y",
    " ",
    "\n",
    "\"",
    "\"ab\"",
    "\"\\n\"",
    "\"\\x41\"",
    "\"\\u00e9\"",
    "\\",
    "[",
    "]",
    "[^",
    "a-z",
    "0-9",
    "-",
    "(",
    ")",
    "|",
    "*",
    "+",
    "?",
    "{",
    "}",
    "{2}",
    "{1,3}",
    "{0,}",
    ",",
    ".",
    "#",
    "# c\n",
    "é",
    "日",
    "::=",
    "\"\"",
    "<",
    ">",
    "<|im_end|>",
    "!<x>",
    "\t",
    "\r\n",
    "\r",
    "[\"\\\\]",
    "{99999}",
    "{1000}",
    "((",
    "))",
    "root ::= a\n",
    "a ::= \"x\" a | \"y\"\n",
    "b ::= b \"z\"\n",
];

/// Up to 24 pieces of [`GBNF_PIECES`], after `root ::= ` most of the time.
fn gbnf_spliced(rng: &mut Rng) -> String {
    let mut s = String::new();
    if rng.chance(0.7) {
        s.push_str("root ::= ");
    }
    for _ in 0..rng.below(24) {
        s.push_str(GBNF_PIECES[rng.below(GBNF_PIECES.len())]);
    }
    s
}

/// A chain of up to ~1,600 rules (short names, so it fits the text bound), each calling the
/// next: once (inlined, it nests), twice (doubling the inlined size), first (a chain of calls
/// before any byte), back to the start (recursive, so nothing is inlined), counted, or
/// nullable from the last rule back (one rule more per round of a nullable fixpoint).
fn gbnf_chain(rng: &mut Rng) -> String {
    let n = 10 + rng.below(1600);
    let name = |i: usize| {
        if i == 0 {
            "root".to_owned()
        } else {
            // Base 26 in letters: `b`, ..., `ba`, ...
            let (mut k, mut s) = (i, Vec::new());
            while k > 0 {
                s.push(b'a' + (k % 26) as u8);
                k /= 26;
            }
            s.reverse();
            String::from_utf8(s).expect("ASCII")
        }
    };
    let kind = rng.below(6);
    let mut out = String::new();
    for i in 0..n {
        let next = name(i + 1);
        let body = if i + 1 == n {
            if kind == 5 { "\"\"" } else { "\"x\"" }.to_owned()
        } else {
            match kind {
                0 => next,
                1 => format!("{next} {next}"),
                2 => format!("{next} \"a\" | \"b\""),
                3 | 5 => format!("{next} | \"x\" root"),
                _ => format!("({next}){{{}}}", rng.below(200)),
            }
        };
        out.push_str(&format!("{} ::= {body}\n", name(i)));
    }
    out
}

/// Three levels of `k` rules, each rule an alternation of every rule of the next level (and
/// recursive, so none is inlined): a byte at `root`'s start enters `k^3` call paths.
fn gbnf_wide_calls(rng: &mut Rng) -> String {
    let k = 2 + rng.below(30);
    let refs = |level: &str| {
        (0..k)
            .map(|i| format!("{level}{i}"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let mut out = format!("root ::= {}\n", refs("a"));
    for i in 0..k {
        out.push_str(&format!("a{i} ::= {} | \"q\" root\n", refs("b")));
        out.push_str(&format!("b{i} ::= {} | \"r\" root\n", refs("c")));
        out.push_str(&format!("c{i} ::= \"x\" root | \"y\"\n"));
    }
    out
}

/// A mutation of a test grammar: characters inserted, deleted or replaced, a rule's body
/// duplicated, a repetition count multiplied or made huge, an item wrapped in a count.
fn mutate_gbnf(rng: &mut Rng, text: &str) -> String {
    let mut s = text.to_owned();
    for _ in 0..1 + rng.below(3) {
        let chars: Vec<char> = s.chars().collect();
        let at = rng.below(chars.len().max(1));
        let mut out = chars.clone();
        match rng.below(8) {
            0 => {
                let n = 1 + rng.below(4);
                out.drain(at..(at + n).min(out.len()));
            }
            1 => {
                const PIECES: &str = "()[]\"|*+?{}\\-#.:=^ \n";
                let c = PIECES
                    .chars()
                    .nth(rng.below(PIECES.chars().count()))
                    .unwrap();
                out.insert(at.min(out.len()), c);
            }
            2 => {
                if at < out.len() {
                    let c = if rng.chance(0.5) {
                        GBNF_CHARS[rng.below(GBNF_CHARS.len())]
                    } else {
                        GBNF_PIECES[rng.below(GBNF_PIECES.len())]
                    };
                    out[at] = c.chars().next().unwrap_or('x');
                }
            }
            3 | 4 => {
                // Duplicate a rule body: `name ::= body` -> `name ::= body body` or `| body`.
                let lines: Vec<&str> = s.lines().filter(|l| l.contains("::=")).collect();
                if let Some(line) = lines.get(rng.below(lines.len().max(1))) {
                    let body = line.split_once("::=").map_or("", |x| x.1).trim();
                    let sep = if rng.chance(0.5) { " " } else { " | " };
                    let doubled = format!("{line}{sep}{body}");
                    s = s.replacen(line, &doubled, 1);
                }
                continue;
            }
            5 => {
                // Multiply a repetition count, or make it huge.
                let factor = [10u64, 1000, 1 << 20, u64::from(u32::MAX)][rng.below(4)];
                let digits: String = chars[at..]
                    .iter()
                    .skip_while(|c| !c.is_ascii_digit())
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                if let Ok(n) = digits.parse::<u64>() {
                    let n = n.max(1).saturating_mul(factor);
                    s = s.replacen(&digits, &n.to_string(), 1);
                } else {
                    s = s.replacen('*', &format!("{{{factor}}}"), 1);
                }
                continue;
            }
            6 => {
                // Wrap the rest of a line in a count.
                let tail: String = chars[at..].iter().take_while(|&&c| c != '\n').collect();
                if !tail.trim().is_empty() {
                    let head: String = chars[..at].iter().collect();
                    let rest: String = chars[at + tail.chars().count()..].iter().collect();
                    let op = ["*", "+", "?", "{2}", "{1000}", "{4294967295}"][rng.below(6)];
                    s = format!("{head}({tail}){op}{rest}");
                }
                continue;
            }
            _ => {
                let mut g = GbnfGen {
                    rng,
                    names: vec!["root".into(), "ws".into(), "value".into()],
                    hostile: false,
                };
                let item = g.item(0);
                out.splice(at..at, item.chars());
            }
        }
        s = out.into_iter().collect();
    }
    s
}

/// Steps a compiled grammar's matcher over the synthetic vocabulary: a mask, a token (mostly
/// an allowed one, sometimes any), now and then a rollback, and the forced bytes. The mask
/// must agree with `advance` (an allowed token advances, any other is refused), with the
/// output's end (EOS allowed exactly when the output is complete), with the forced bytes
/// (every allowed token agrees with them), and, after a rollback, with the mask computed at
/// that position before; at the end, its shortest completion must complete the output. A
/// `limit_exceeded` step ends the case cleanly.
fn drive_grammar(
    compiled: Compiled,
    vocab: &Arc<Vocabulary>,
    rng: &mut Rng,
) -> Result<(), poot::Error> {
    let Compiled::Grammar(g) = &compiled else {
        panic!("a guided_grammar compiles to a grammar")
    };
    let g = g.clone();
    // Short random bytes through the whole-text matcher (no work limit there).
    for _ in 0..2 {
        let bytes: Vec<u8> = (0..rng.below(12))
            .map(|_| match rng.below(3) {
                0 => rng.below(256) as u8,
                _ => b"ab\"x ()[]{}0\n"[rng.below(13)],
            })
            .collect();
        let _ = g.matches(&bytes);
    }
    let mut m = Matcher::new(Arc::new(Constraint::from_compiled(compiled, vocab.clone())));
    let n = vocab.len();
    let bit = |mask: &[u32], t: TokenId| mask[t as usize / 32] >> (t % 32) & 1 == 1;
    // The output so far, the length each accepted token added, and the mask seen at each
    // position (to compare after a rollback).
    let (mut out, mut lens): (Vec<u8>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut seen: Vec<Option<Vec<u32>>> = Vec::new();
    for _ in 0..12 {
        let mut mask = vec![0u32; words_for(n)];
        m.fill_mask(&mut mask)?;
        let at = m.token_count();
        seen.resize(seen.len().max(at + 1), None);
        if let Some(before) = &seen[at] {
            assert_eq!(
                before, &mask,
                "the mask after a rollback differs from before"
            );
        }
        seen[at] = Some(mask.clone());
        let allowed: Vec<TokenId> = (0..n as TokenId).filter(|&t| bit(&mask, t)).collect();
        let accepting = m.is_accepting();
        for &t in &allowed {
            assert!(
                vocab.is_text(t) || vocab.is_eos(t),
                "special token {t} in the mask"
            );
        }
        let eos_allowed = allowed.iter().any(|&t| vocab.is_eos(t));
        assert_eq!(eos_allowed, accepting, "EOS in the mask vs is_accepting");
        let forced = m.forced_bytes();
        if !forced.is_empty() {
            assert!(
                !accepting,
                "forced bytes {forced:?} where the output may end"
            );
            for &t in allowed.iter().filter(|&&t| vocab.is_text(t)) {
                let b = vocab.bytes(t);
                let k = b.len().min(forced.len());
                assert_eq!(
                    b[..k],
                    forced[..k],
                    "allowed token {t} disagrees with the forced bytes {forced:?}"
                );
            }
        }
        let t = if !allowed.is_empty() && rng.chance(0.8) {
            allowed[rng.below(allowed.len())]
        } else {
            rng.below(n) as TokenId
        };
        let was_allowed = bit(&mask, t);
        match m.advance(t) {
            Ok(()) => {
                assert!(was_allowed, "token {t} advanced but was not in the mask");
                // Masks seen past here were for another path.
                seen.truncate(at + 1);
                let b = if vocab.is_eos(t) {
                    &[][..]
                } else {
                    vocab.bytes(t)
                };
                out.extend_from_slice(b);
                lens.push(b.len());
            }
            Err(e) if e.is_limit_exceeded() => return Err(e),
            Err(e) => assert!(!was_allowed, "token {t} in the mask but refused: {e}"),
        }
        if rng.chance(0.15) && m.token_count() > 0 {
            let k = 1 + rng.below(m.token_count().min(3));
            m.rollback(k).expect("accepted tokens roll back");
            for _ in 0..k {
                let l = lens.pop().expect("one length per token");
                out.truncate(out.len() - l);
            }
        }
        if m.is_finished() {
            break;
        }
    }
    if !m.is_finished() {
        assert_eq!(
            m.is_accepting(),
            g.matches(&out),
            "the matcher and Grammar::matches disagree on {:?}",
            String::from_utf8_lossy(&out)
        );
        // The length-safe close, as a run follows it: a shortest completion of the length
        // the matcher reports, split into the fewest tokens, each one allowed, ending on a
        // complete output. Its steps are under the grammar's work budget, as a run's are
        // (`Grammar::matches` has none, and an ambiguous grammar makes it exponential).
        if let Some(len) = m.closing_len() {
            if let Some(close) = m.closing_bytes(CLOSE_CHECK_BYTES) {
                assert_eq!(close.len() as u64, len, "the close's length");
                let path = vocab
                    .fewest_tokens(&close)
                    .expect("byte tokens write any close");
                let mut end = m.clone();
                for &t in &path {
                    match end.advance(t) {
                        Ok(()) => {}
                        Err(e) if e.is_limit_exceeded() => return Ok(()),
                        Err(e) => panic!(
                            "the close {:?} of {:?} is refused: {e}",
                            String::from_utf8_lossy(&close),
                            String::from_utf8_lossy(&out)
                        ),
                    }
                }
                assert!(
                    end.is_accepting(),
                    "the close {:?} does not complete",
                    String::from_utf8_lossy(&close)
                );
            } else {
                assert!(len > CLOSE_CHECK_BYTES as u64, "no close of {len} bytes");
            }
        }
    }
    Ok(())
}

/// Longest close the gbnf target follows (a counted repetition's close can be megabytes).
const CLOSE_CHECK_BYTES: usize = 512;

/// Compiles a grammar as a request's `guided_grammar` and drives its matcher: a compile error
/// must name the field, and everything is bounded by the harness.
fn compile_grammar_text(
    text: String,
    vocab: Arc<Vocabulary>,
    seed: u64,
) -> impl FnOnce() -> Result<(), poot::Error> + Send + 'static {
    move || {
        let body = json!({ "guided_grammar": text });
        let compiled = Spec::from_request(&body)
            .map(|s| s.expect("a guided_grammar constraint"))
            .and_then(|s| s.compile());
        let compiled = match compiled {
            Ok(c) => c,
            Err(e) => {
                assert_eq!(e.param(), Some("guided_grammar"), "{e}");
                assert!(e.to_string().starts_with("guided_grammar"), "{e}");
                return Err(e);
            }
        };
        drive_grammar(compiled, &vocab, &mut Rng::new(seed))
    }
}

/// Grammar cases per run: each compiles and steps a matcher a dozen times, so fewer than the
/// other targets' (the default run stays within ~15 s in a debug build).
fn gbnf_cases() -> u64 {
    common::fuzz_cases(GBNF_DEFAULT_CASES) as u64
}

const GBNF_DEFAULT_CASES: usize = 2_000;

/// GBNF grammars as `guided_grammar`: the regression corpus, generated grammars, then
/// mutations of `tests/data/grammars`. Each compiles or fails with a 4xx naming the field, and
/// each compiled one is stepped over the synthetic vocabulary ([`drive_grammar`]), all within
/// the case's bounds.
#[test]
fn gbnf_grammars_compile_and_step_or_fail_cleanly() {
    let vocab = grammar_support::synthetic().vocab;
    let start = Instant::now();
    let mut tally = Tally::default();
    for (path, text) in regressions("gbnf") {
        let work = compile_grammar_text(text.clone(), vocab.clone(), 1);
        tally.case("gbnf", &path, &text, work);
    }
    let seed0 = first_seed();
    for i in 0..gbnf_cases() {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let text = gbnf_grammar(&mut rng);
        let work = compile_grammar_text(text.clone(), vocab.clone(), seed);
        tally.case("gbnf", &format!("seed {seed}"), &text, work);
    }
    tally.report("gbnf (generated)", start);

    let start = Instant::now();
    let corpus: Vec<String> = grammar_support::GRAMMARS
        .iter()
        .map(|f| grammar_support::grammar_text(f))
        .collect();
    let mut tally = Tally::default();
    for i in 0..gbnf_cases() {
        let seed = seed0 + i;
        let mut rng = Rng::new(seed);
        let base = &corpus[rng.below(corpus.len())];
        let text = mutate_gbnf(&mut rng, base);
        let work = compile_grammar_text(text.clone(), vocab.clone(), seed);
        tally.case("gbnf", &format!("mutation seed {seed}"), &text, work);
    }
    tally.report("gbnf (test grammar mutations)", start);
}
