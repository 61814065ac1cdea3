//! Structure-aware fuzzing of everything a request carries: JSON Schemas (generated with
//! `$ref`/`$defs`, nesting, huge counts, long and odd-Unicode strings, and mutations of the
//! JSONSchemaBench schemas), regexes, `guided_choice` lists, whole request bodies and
//! `--limits` overrides (each followed by a compile under what they allow). The
//! property for every input: a compiled constraint or a 4xx error, within 1 s and 256 MiB on
//! the wasm32 stack (`tests/bounded`), never a panic, an overflow or a hang.
//!
//! `POOT_FUZZ_CASES` sets the cases per target (default 20,000: the whole file runs in ~40 s in
//! `make test`), `POOT_FUZZ_SEED` the first seed; `scripts/fuzz.sh` runs a long release
//! build. A failing case prints its seed and input; keep the input under
//! `tests/data/fuzz/<target>/` (one file per input), where every run replays it first.

mod bounded;
mod common;

use bounded::{check, compile_body, run_case};
use common::Rng;
use poot::api::{Endpoint, Request};
use serde_json::{json, Map, Value};
use std::io::Read;
use std::path::Path;
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

fn compile_schema_text(text: String) -> impl FnOnce() -> Result<(), poot::Error> + Send + 'static {
    move || {
        // As text: the size bound and the JSON parser's depth bound apply as they do to a
        // request; a value that parses is compiled through guided_json.
        compile_body(json!({ "guided_json": text }))
    }
}

#[test]
fn json_schemas_compile_or_fail_cleanly() {
    let start = Instant::now();
    let mut tally = Tally::default();
    for (path, text) in regressions("json_schema") {
        tally.case(
            "json_schema",
            &path,
            &text,
            compile_schema_text(text.clone()),
        );
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
            compile_schema_text(text.clone()),
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
            compile_schema_text(text.clone()),
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
        ("response_format", |r| match r.below(4) {
            0 => json!({"type": "json_object"}),
            1 => {
                json!({"type": "json_schema", "json_schema": {"name": string(r), "schema": schema(r, 2, 0), "strict": r.chance(0.5)}})
            }
            2 => json!({"type": "text"}),
            _ => value(r, 2),
        }),
        ("tools", |r| {
            json!((0..r.below(3)).map(|_| json!({"type": "function", "function": {"name": string(r), "parameters": schema(r, 2, 0)}})).collect::<Vec<_>>())
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

#[test]
fn request_bodies_parse_or_fail_cleanly() {
    let start = Instant::now();
    let mut tally = Tally::default();
    for (path, text) in regressions("request") {
        let body: Value = serde_json::from_str(&text).expect("a kept request body is JSON");
        tally.case("request", &path, &text, move || {
            Request::parse(&body, Endpoint::Chat).map(|_| ())
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
            Request::parse(&body, endpoint).map(|_| ())
        });
    }
    tally.report("request", start);
}

/// Random `--limits` overrides (names known and not, numbers in and out of range, other JSON),
/// then a generated schema compiled under whatever they allow: `Limits::tightened` is `Ok` or an
/// `invalid_input` naming `limits`, and every budget, however small, ends in a result or a 4xx.
#[test]
fn tightened_limits_read_cleanly_and_bound_every_compile() {
    use poot::constraint::Spec;
    use poot::limits::Limits;
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
        let schema = root_schema(&mut rng).to_string();
        let shown = format!("limits {overrides}, schema {schema}");
        tally.case("limits", &format!("seed {seed}"), &shown, move || {
            let limits = match Limits::DEFAULT.tightened(&overrides) {
                Ok(l) => l,
                Err(e) => {
                    assert_eq!(e.param(), Some("limits"), "{e}");
                    return Err(e);
                }
            };
            let body = json!({ "guided_json": schema });
            if let Some(spec) = Spec::from_request_with(&body, &limits)? {
                spec.compile_with(&limits)?;
            }
            Ok(())
        });
    }
    tally.report("limits", start);
}
