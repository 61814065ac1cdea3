//! Keywords compiled by the automaton algebra (a `pattern` or `format` with lengths they do
//! not imply, `format` with `pattern`, integer and decimal `multipleOf` with or without
//! bounds) against
//! the `jsonschema` crate: every candidate instance, serialized canonically, is accepted only
//! when the validator accepts it (and, where the schema has no `format`, whose regexes are
//! documented subsets, exactly then); random walks through the automaton give only values the
//! validator accepts; the exported grammar agrees with the automaton on all of them.

mod json_schema_support;

use json_schema_support::*;
use poot::grammar::Grammar;
use poot::json_schema::{JsonSchema, SchemaOptions};
use poot::limits::Limits;
use serde_json::{json, Value};

/// Strings of up to `len` characters over `alphabet`.
fn strings(alphabet: &[char], len: usize) -> Vec<Value> {
    let mut all = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..len {
        layer = layer
            .iter()
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        all.extend(layer.iter().cloned());
    }
    all.into_iter().map(Value::String).collect()
}

/// The exported GBNF on our engine, under the schema compiler's bound on generated text
/// (a user's grammar is bounded at 16 KiB; a residue automaton's rules pass that).
fn exported_grammar(compiled: &JsonSchema) -> Grammar {
    let limits = Limits {
        grammar_bytes: poot::limits::MAX_SCHEMA_REGEX_BYTES,
        ..Limits::DEFAULT
    };
    Grammar::new_with(&compiled.gbnf(), &limits).expect("the exported grammar compiles")
}

/// Compiles `schema`, checks the candidates, the random walks and the grammar; returns how
/// many candidates were valid (so a case cannot pass by rejecting everything).
fn check(schema: &Value, candidates: &[Value], exact: bool) -> usize {
    let compiled = JsonSchema::compile(schema, "guided_json")
        .unwrap_or_else(|e| panic!("{schema} does not compile: {e}"));
    let v = validator(schema).expect("the validator takes the schema");
    let automaton = compiled.automaton();
    let grammar = exported_grammar(&compiled);
    let valid = check_candidates(
        schema,
        &v,
        automaton,
        candidates,
        exact,
        |text, accepted| {
            assert_eq!(
                grammar.matches(text.as_bytes()),
                accepted,
                "{schema}: the grammar differs on {text}"
            );
        },
    );
    let samples = random_walks(automaton, 64, 11, 40);
    assert!(samples.len() >= 60, "{schema}: {} walks", samples.len());
    let bad = unsound_samples(schema, &v, &samples);
    assert!(bad.is_empty(), "{schema}: {bad:?}");
    for s in &samples {
        assert!(grammar.matches(s), "{schema}: the grammar rejects a walk");
    }
    valid
}

#[test]
fn pattern_with_lengths_agrees_with_the_validator() {
    let alphabet = ['a', 'b', '-', '1', 'é', '"', '\\', '\n', '\u{1}', ' '];
    let values = strings(&alphabet, 4);
    let schemas = [
        json!({"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 3, "maxLength": 4}),
        json!({"type": "string", "pattern": "\\d", "minLength": 2, "maxLength": 3}),
        json!({"type": "string", "pattern": "^a[\\x00-\\x1f\"\\\\]*b?$", "maxLength": 3}),
        json!({"type": "string", "pattern": "^[^-]", "minLength": 4}),
        json!({"type": "string", "pattern": "(é|\\s)", "maxLength": 2}),
        // Cut per alternative, no automaton: `[^,]` and any characters, or nothing.
        json!({"type": "string", "pattern": "^([^,]|$)", "minLength": 1, "maxLength": 3}),
    ];
    for schema in &schemas {
        let valid = check(schema, &values, true);
        assert!(valid > 3, "{schema}: only {valid} valid candidates");
    }
}

#[test]
fn format_with_pattern_or_lengths_agrees_with_the_validator() {
    let mut candidates: Vec<Value> = [
        "2024-02-29",
        "2023-02-29",
        "2024-13-01",
        "2024-01-31",
        "1999-12-31",
        "a@b.co",
        "abc@example.com",
        "x.y@ab.cd",
        "ab@c.d",
        "a@bc.de",
        "https://a.io",
        "http://a.io",
        "https://example.com/x?y#z",
        "mailto:x",
        "0f8fa1c2-1b2c-4d5e-8f90-123456789abc",
        "10000000-0000-0000-0000-000000000000",
    ]
    .iter()
    .map(|s| json!(s))
    .collect();
    candidates.extend(strings(&['a', '@', '.', 'b'], 6));
    let schemas = [
        json!({"type": "string", "format": "date", "pattern": "^2024-"}),
        json!({"type": "string", "format": "email", "maxLength": 8}),
        json!({"type": "string", "format": "email", "pattern": "^[a-c]+@", "minLength": 6, "maxLength": 10}),
        json!({"type": "string", "format": "uri", "pattern": "^https:", "maxLength": 14}),
        json!({"type": "string", "format": "uuid", "pattern": "^[0-9]+-"}),
    ];
    for schema in &schemas {
        let valid = check(schema, &candidates, false);
        assert!(valid >= 1, "{schema}: no valid candidate accepted");
    }
}

#[test]
fn formats_accept_only_values_the_validator_accepts() {
    // Per format: values inside its documented subset, values outside the subset but valid,
    // and invalid ones. Every accepted candidate and every random walk must validate.
    let cases: [(&str, &[&str]); 8] = [
        ("iri", &["https://a.io/x?y#z", "urn:x", "http://a b", "x"]),
        (
            "uri-reference",
            &[
                "",
                "a/b",
                "/a/b?c=d#e",
                "https://a.io",
                "a:b",
                "//a",
                "a b",
                "%zz",
            ],
        ),
        ("iri-reference", &["a/b", "#frag", "?q", "\\x"]),
        (
            "json-pointer",
            &["", "/a", "/a~0b/c~1", "/", "a", "/~2", "/a/"],
        ),
        (
            "relative-json-pointer",
            &["0", "1#", "2/a/b", "0/~1", "01", "-1", "1/a~"],
        ),
        (
            "duration",
            &[
                "P1D",
                "PT1H30M",
                "P1Y2M3DT4H5M6S",
                "P2W",
                "P",
                "PT",
                "P1H",
                "P1DT",
            ],
        ),
        (
            "uri-template",
            &["a{b}", "/x/{+y}{?q,r}", "{a", "a}", "{}", "x{y:3}"],
        ),
        ("uri", &["https://a.io", "mailto:x", "a"]),
    ];
    for (format, values) in cases {
        let schema = json!({"type": "string", "format": format});
        let candidates: Vec<Value> = values.iter().map(|v| json!(v)).collect();
        let valid = check(&schema, &candidates, false);
        assert!(valid >= 1, "{schema}: no candidate accepted");
    }
    // `regex` is not regular (ECMA-262 groups nest): refused, naming it.
    let e = JsonSchema::compile(&json!({"type": "string", "format": "regex"}), "guided_json")
        .unwrap_err();
    assert!(e.to_string().contains("format `regex`"), "{e}");
}

#[test]
fn unique_items_of_finite_values_agree_with_the_validator() {
    // Every array of up to 4 items over these values, repeats included.
    let pool = [
        json!("a"),
        json!("b"),
        json!("ab"),
        json!(1),
        json!(10),
        json!(true),
        json!(false),
        json!(null),
    ];
    let mut candidates = vec![json!([])];
    let mut layer = vec![Vec::<Value>::new()];
    for _ in 0..4 {
        layer = layer
            .iter()
            .flat_map(|a| {
                pool.iter().map(move |v| {
                    let mut a = a.clone();
                    a.push(v.clone());
                    a
                })
            })
            .collect();
        candidates.extend(layer.iter().map(|a| Value::Array(a.clone())));
    }
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "items": {"enum": ["a", "b", "ab"]}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}}),
        json!({"type": "array", "uniqueItems": true, "items": {"enum": [1, 10, true, null]}, "minItems": 2}),
        json!({"type": "array", "uniqueItems": true, "items": {"enum": ["a", "b", "ab", 1, 10]}, "minItems": 1, "maxItems": 3}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": ["boolean", "null"]}}),
        json!({"type": "array", "uniqueItems": true, "items": {"const": "a"}}),
    ];
    for schema in &schemas {
        let valid = check(schema, &candidates, true);
        assert!(valid >= 2, "{schema}: {valid} valid");
    }
    // More values than the automaton holds, and items that are not a few scalars, are
    // refused naming the keyword.
    for (schema, why) in [
        (
            json!({"type": "array", "uniqueItems": true, "items": {"enum": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}}),
            "`uniqueItems` at # over 9 values needs more than the 262144-byte automaton limit",
        ),
        (
            json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}),
            "`uniqueItems` at # is not supported (items must differ from each other)",
        ),
    ] {
        let e = JsonSchema::compile(&schema, "guided_json").unwrap_err();
        assert!(e.to_string().contains(why), "{schema}: {e}");
    }
}

/// `minProperties`/`maxProperties` that count optional properties: every object over the
/// listed keys (each present or not), plus extra keys the schemas forbid.
#[test]
fn property_counts_of_optional_properties_agree_with_the_validator() {
    let objects = |names: &[&str]| {
        let mut out = Vec::new();
        for set in 0..(1u32 << names.len()) {
            let mut o = serde_json::Map::new();
            for (i, n) in names.iter().enumerate() {
                if set & (1 << i) != 0 {
                    o.insert((*n).into(), json!(i));
                }
            }
            out.push(Value::Object(o.clone()));
            o.insert("z".into(), json!(0));
            out.push(Value::Object(o));
        }
        out
    };
    let mut candidates = objects(&["a", "b", "c", "d"]);
    candidates.extend(objects(&["key", "json", "pojo"]));
    let props = json!({"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}, "d": {"type": "integer"}});
    let schemas = [
        json!({"type": "object", "properties": props, "additionalProperties": false, "minProperties": 2, "maxProperties": 2}),
        json!({"type": "object", "properties": props, "additionalProperties": false, "maxProperties": 1}),
        json!({"type": "object", "properties": props, "additionalProperties": false, "minProperties": 3}),
        json!({"type": "object", "properties": props, "additionalProperties": false, "required": ["b"], "minProperties": 2, "maxProperties": 3}),
        // The Snowplow shape: one required key and exactly one of the others.
        json!({"type": "object", "properties": {"key": {"type": "integer"}, "json": {"type": "integer"}, "pojo": {"type": "integer"}}, "additionalProperties": false, "required": ["key"], "minProperties": 2, "maxProperties": 2}),
    ];
    for schema in &schemas {
        let valid = check(schema, &candidates, true);
        assert!(valid > 0, "{schema}: no valid candidate");
    }
    // More sets than are written out: refused, naming the keyword and the bound.
    let many: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("p{i}"), json!({"type": "integer"})))
        .collect();
    let e = JsonSchema::compile(
        &json!({"type": "object", "properties": many, "additionalProperties": false, "maxProperties": 5}),
        "guided_json",
    )
    .expect_err("C(10, 0..=5) = 638 sets");
    assert!(e.message().contains("maxProperties"), "{}", e.message());
    assert!(e.message().contains("64"), "{}", e.message());
}

#[test]
fn integer_multiples_agree_with_the_validator() {
    let ints: Vec<Value> = (-1300i64..=1300)
        .chain([9999, 10000, 10001, 10010, 100000, 99999, 3000, 6000])
        .map(|v| json!(v))
        .collect();
    let schemas = [
        json!({"type": "integer", "multipleOf": 7}),
        json!({"type": "integer", "multipleOf": 7, "minimum": -100, "maximum": 1000}),
        json!({"type": "integer", "multipleOf": 12, "minimum": 0}),
        json!({"type": "integer", "multipleOf": 3000, "exclusiveMaximum": 100000}),
        json!({"type": "integer", "multipleOf": 13, "minimum": 10000, "maximum": 10100}),
        json!({"type": "integer", "multipleOf": 30, "exclusiveMinimum": -95.5, "maximum": 1e3}),
        json!({"type": "integer", "multipleOf": 4, "maximum": 50}),
        json!({"type": "integer", "multipleOf": 1e40}),
    ];
    for schema in &schemas {
        let valid = check(schema, &ints, true);
        assert!(valid >= 1, "{schema}");
    }
    // Numbers with an integer step are integers: every valid integer-valued number, and
    // no fraction.
    let nums: Vec<Value> = (-300i64..=300)
        .map(|v| json!(v))
        .chain([json!(8.0), json!(2.5), json!(-4.0), json!(50.5)])
        .collect();
    let schema = json!({"type": "number", "multipleOf": 4, "maximum": 50.5});
    check(&schema, &nums, true);
}

#[test]
fn decimal_multiples_agree_with_the_validator() {
    // Every number of at most three decimals in [-3, 3], then a few longer ones: fractions
    // with trailing digits past a step's scale, and integers.
    let nums: Vec<Value> = (-3000i64..=3000)
        .map(|k| k as f64 / 1000.0)
        .chain([
            0.0001, 0.0002, 1.0001, 12.34, 123.45, 9999.99, 1e3, -0.005, 7.5, 40.5, 4.5, 9.0,
            -13.5, 94.5, 99.0, 58.5, -4.5, 100.5,
        ])
        .map(|v| {
            if v.fract() == 0.0 {
                json!(v as i64)
            } else {
                json!(v)
            }
        })
        .collect();
    let schemas = [
        json!({"type": "number", "multipleOf": 0.01}),
        json!({"type": "number", "multipleOf": 0.1, "minimum": -1, "maximum": 2.5}),
        json!({"type": "number", "multipleOf": 0.0001}),
        json!({"type": "number", "multipleOf": 0.25, "exclusiveMinimum": -2, "maximum": 3}),
        json!({"type": "number", "multipleOf": 1.5}),
        json!({"type": "number", "multipleOf": 0.03, "maximum": 1}),
        json!({"type": "number", "multipleOf": 4.5, "minimum": -100, "maximum": 100}),
        json!({"type": ["number", "null"], "multipleOf": 0.05}),
    ];
    for schema in &schemas {
        let valid = check(schema, &nums, true);
        assert!(valid >= 5, "{schema}: {valid} valid");
    }
    // Integers with a decimal step: multiples of the step's digits over their common
    // factor with the power of ten (1.5: of 3; 0.25: every integer).
    let ints: Vec<Value> = (-200i64..=200).map(|v| json!(v)).collect();
    for schema in [
        json!({"type": "integer", "multipleOf": 1.5}),
        json!({"type": "integer", "multipleOf": 0.25, "maximum": 50}),
        json!({"type": "integer", "multipleOf": 2.5, "minimum": 0}),
    ] {
        let valid = check(&schema, &ints, true);
        assert!(valid >= 10, "{schema}: {valid} valid");
    }
    // A step whose residues pass the automaton bound is refused, naming it.
    let e = JsonSchema::compile(
        &json!({"type": "number", "multipleOf": 2.125}),
        "guided_json",
    )
    .unwrap_err();
    assert!(e.is_limit_exceeded(), "{e}");
    assert!(
        e.to_string()
            .contains("`multipleOf` 2.125 at # needs more than the 262144-byte automaton limit"),
        "{e}"
    );
}

#[test]
fn products_past_the_automaton_bound_are_refused_naming_it() {
    // One counter per word, times 5000 lengths.
    let schema =
        json!({"type": "string", "pattern": "^(?:\\S+\\s+){0,99}\\S+$", "maxLength": 5000});
    let e = JsonSchema::compile(&schema, "guided_json").unwrap_err();
    assert!(e.is_limit_exceeded(), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("`minLength/maxLength` at # together with `pattern` needs more than the 262144-byte automaton limit"),
        "{m}"
    );
    // A tightened deployment bound is the one named: ~600 states over 4 classes here.
    let tight = Limits {
        automaton_bytes: 4096,
        ..Limits::DEFAULT
    };
    let schema = json!({"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 300});
    let e = JsonSchema::compile_with(&schema, "guided_json", &tight).unwrap_err();
    assert!(
        e.to_string().contains(
            "`minLength/maxLength` at # together with `pattern` needs more than the 4096-byte \
             automaton limit"
        ),
        "{e}"
    );
    assert!(JsonSchema::compile(&schema, "guided_json").is_ok());
    // And for `multipleOf`: 97 residues times 15 digits.
    let limits = Limits {
        automaton_bytes: 4096,
        ..Limits::DEFAULT
    };
    let schema = json!({"type": "integer", "multipleOf": 97, "minimum": 0});
    let e = JsonSchema::compile_with(&schema, "guided_json", &limits).unwrap_err();
    assert!(e.is_limit_exceeded(), "{e}");
    assert!(
        e.to_string()
            .contains("`multipleOf` 97 at # needs more than the 4096-byte automaton limit"),
        "{e}"
    );
    // Under the default it compiles.
    assert!(JsonSchema::compile(&schema, "guided_json").is_ok());
}

#[test]
fn schemas_with_automata_have_no_regex_but_a_grammar() {
    let schema = json!({"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 2, "maxLength": 5},
        "n": {"type": "integer", "multipleOf": 7}
    }, "required": ["id"], "additionalProperties": false});
    let compiled = JsonSchema::compile(&schema, "guided_json").unwrap();
    assert!(compiled.regex(usize::MAX).is_none());
    assert!(compiled.dfa().is_some());
    let gbnf = JsonSchema::gbnf_within(&schema, "tools", &Limits::DEFAULT, SchemaOptions::DEFAULT)
        .0
        .unwrap();
    let g = Grammar::new(&gbnf).unwrap();
    for (text, ok) in [
        (r#"{"id":"ab","n":14}"#, true),
        (r#"{"id":"a-cde"}"#, true),
        (r#"{"id":"a-"}"#, false),
        (r#"{"id":"a"}"#, false),
        (r#"{"id":"abcdef"}"#, false),
        (r#"{"id":"ab","n":15}"#, false),
    ] {
        assert_eq!(g.matches(text.as_bytes()), ok, "{text}");
        assert_eq!(compiled.matches(text.as_bytes()), ok, "{text}");
    }
    // Without an automaton the regex is still there.
    let plain = json!({"type": "string", "pattern": "^[a-z]{1,3}$", "maxLength": 3});
    assert!(JsonSchema::compile(&plain, "guided_json")
        .unwrap()
        .regex(usize::MAX)
        .is_some());
}

/// Compile times of the JSONSchemaBench schemas that use these keywords (release build:
/// `cargo test --release --test json_schema_algebra -- --ignored --nocapture`).
#[test]
#[ignore]
fn compile_times_of_algebra_schemas() {
    let corpus = jsonschemabench();
    let uses = |text: &str| {
        text.contains("multipleOf")
            || ((text.contains("\"pattern\"") || text.contains("\"format\""))
                && (text.contains("Length\"") || text.contains("\"pattern\"")))
    };
    let mut times = Vec::new();
    let mut all = 0.0;
    for (name, file) in &corpus {
        let schema = &file["schema"];
        let t = std::time::Instant::now();
        let r = JsonSchema::compile(schema, "guided_json");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        all += ms;
        if uses(&schema.to_string()) {
            times.push((ms, name.clone(), r.is_ok()));
        }
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = times.len();
    let at = |q: f64| times[((n - 1) as f64 * q) as usize].0;
    eprintln!(
        "all {} schemas: {all:.0} ms; {n} using these keywords: p50 {:.2} ms, p90 {:.2}, max {:.2}",
        corpus.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    );
    for (ms, name, ok) in times.iter().rev().take(8) {
        eprintln!("{ms:8.2} ms  {name} {}", if *ok { "ok" } else { "refused" });
    }
}
