//! `not`, overlapping `oneOf`, `allOf` of two patterns or steps, dependencies and `if`
//! against the `jsonschema` crate: `not` of each keyword the compiler negates, at the root
//! and at several depths, beside other keywords and inside `anyOf`/`allOf`/`oneOf`/`$ref`;
//! `oneOf` as each branch and not the others; `dependentRequired`, `dependentSchemas`,
//! `dependencies` and `if`/`then`/`else` as branches; `patternProperties` with disjoint
//! patterns of different schemas. Every candidate instance, serialized
//! canonically, is accepted only when the validator accepts it, and, for schemas whose
//! values are scalars (where the compiled language is every valid value's canonical text),
//! exactly then; random walks through the automaton give only values the validator accepts.
//! What has no exact rewrite is refused, naming the keyword.

mod json_schema_support;

use json_schema_support::*;
use poot::json_schema::{canonical_json, JsonSchema};
use serde_json::{json, Value};

/// Scalars: null, booleans, integers -12..=12, a few fractions, and strings of up to three
/// characters over a small alphabet (with a quote and a control character, whose escapes
/// must be excluded too).
fn scalars() -> Vec<Value> {
    let mut out = vec![
        json!(null),
        json!(true),
        json!(false),
        json!(1.5),
        json!(-0.25),
    ];
    out.extend((-12..=12).map(|i| json!(i)));
    let alphabet = ['a', 'b', '9', '"', '\n'];
    let mut layer = vec![String::new()];
    out.push(json!(""));
    for _ in 0..3 {
        layer = layer
            .iter()
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        out.extend(layer.iter().map(|s| json!(s)));
    }
    out
}

/// Objects over the keys `a`, `b`, `error` with a few values each, and arrays of up to two
/// small scalars.
fn composites() -> Vec<Value> {
    let values = [
        json!(null),
        json!(1),
        json!(2),
        json!("a"),
        json!("99"),
        json!(true),
    ];
    let mut out = vec![json!({}), json!([])];
    for k in ["a", "b", "error"] {
        for v in &values {
            out.push(json!({ k: v }));
            out.push(json!([v]));
            for v2 in &values {
                out.push(json!({ k: v, "x": v2 }));
                out.push(json!([v, v2]));
            }
        }
    }
    for v in &values {
        for v2 in &values {
            out.push(json!({"a": v, "b": v2}));
        }
    }
    out
}

/// Compiles `schema` and checks the candidates and random walks; returns how many
/// candidates were accepted (so a case cannot pass by rejecting everything).
fn check(schema: &Value, candidates: &[Value], exact: bool) -> usize {
    let compiled = JsonSchema::compile(schema, "guided_json")
        .unwrap_or_else(|e| panic!("{schema} does not compile: {e}"));
    let v = validator(schema).expect("the validator takes the schema");
    let automaton = compiled.automaton();
    let accepted_count = check_candidates(schema, &v, automaton, candidates, exact, |_, _| {});
    let samples = random_walks(automaton, 48, 7, 30);
    assert!(samples.len() >= 40, "{schema}: {} walks", samples.len());
    let bad = unsound_samples(schema, &v, &samples);
    assert!(bad.is_empty(), "{schema}: {bad:?}");
    accepted_count
}

#[test]
fn not_of_scalar_keywords_is_exact() {
    let pool = scalars();
    for schema in [
        json!({"not": {"type": "string"}}),
        json!({"not": {"type": ["string", "number"]}}),
        json!({"type": ["string", "integer", "null"], "not": {"type": "null"}}),
        json!({"type": "string", "not": {"pattern": "9"}}),
        json!({"not": {"pattern": "^a"}}),
        json!({"type": "string", "not": {"pattern": "^.$"}, "maxLength": 2}),
        json!({"type": "string", "pattern": "a", "not": {"pattern": "b"}}),
        json!({"type": "string", "not": {"enum": ["a", "b", "\"", "\n"]}}),
        json!({"type": "string", "not": {"const": ""}}),
        json!({"type": "string", "not": {"minLength": 2}}),
        json!({"type": "string", "not": {"maxLength": 1}}),
        json!({"type": "integer", "not": {"multipleOf": 3}}),
        json!({"type": "integer", "not": {"multipleOf": 7}, "minimum": -10}),
        json!({"type": "integer", "multipleOf": 2, "not": {"multipleOf": 4}}),
        json!({"type": "integer", "not": {"enum": [0, 1, 2.0, "1"]}}),
        json!({"type": "integer", "not": {"minimum": 3}}),
        json!({"type": "integer", "not": {"exclusiveMaximum": -2}}),
        json!({"type": "integer", "not": {"maximum": 5, "minimum": -5}}),
        json!({"type": ["boolean", "null"], "not": {"const": true}}),
        json!({"not": {"enum": [true, null]}, "type": ["boolean", "null", "string"], "maxLength": 0}),
        json!({"type": "string", "not": {"anyOf": [{"pattern": "a"}, {"pattern": "b"}, {"maxLength": 0}]}}),
        json!({"type": "string", "not": {"allOf": [{"pattern": "a"}, {"pattern": "b"}]}}),
        json!({"type": ["string", "integer"], "not": {"not": {"type": "integer", "minimum": 0}}}),
        json!({"type": "string", "not": {"not": {"not": {"pattern": "a"}}}}),
        json!({"type": "string", "not": {"$ref": "#/$defs/short"}, "$defs": {"short": {"maxLength": 1}}}),
        json!({"type": "string", "allOf": [{"not": {"pattern": "a"}}, {"not": {"pattern": "b"}}]}),
        json!({"anyOf": [{"type": "string", "not": {"pattern": "a"}}, {"type": "integer", "not": {"multipleOf": 2}}]}),
        json!({"type": ["string", "boolean"], "not": {"type": "string", "pattern": "a"}}),
        json!({"not": {"type": "integer"}}),
        json!({"type": ["number", "string"], "not": {"enum": ["a", true]}}),
        json!({"type": "number", "not": {"type": "integer"}, "minimum": -1, "maximum": 2}),
    ] {
        let accepted = check(&schema, &pool, true);
        assert!(accepted > 0, "{schema}: accepts none of the candidates");
    }
}

#[test]
fn not_inside_objects_and_arrays_at_several_depths() {
    let pool: Vec<Value> = composites().into_iter().chain(scalars()).collect();
    for (schema, must_accept) in [
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "error": {}}, "not": {"required": ["error"]}}),
            vec![json!({}), json!({"a": 1})],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": ["integer", "string"], "not": {"type": "string", "pattern": "9"}}}, "required": ["a"]}),
            vec![json!({"a": 1}), json!({"a": "a"})],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "not": {"properties": {"a": {"minimum": 2}}, "required": ["a"]}}),
            vec![
                json!({"a": 1}),
                json!({"b": null}),
                json!({"a": 1, "b": true}),
            ],
        ),
        (
            json!({"type": "array", "items": {"type": "integer", "not": {"enum": [1]}}, "maxItems": 2}),
            vec![json!([]), json!([2]), json!([2, 2])],
        ),
        (
            json!({"type": "array", "items": {"type": "object", "properties": {"a": {"not": {"type": ["null", "boolean", "object", "array", "string"]}}}, "required": ["a"], "additionalProperties": false}, "maxItems": 1}),
            vec![json!([]), json!([{"a": 1}])],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}),
            vec![json!({})],
        ),
        (
            json!({"oneOf": [{"type": "string", "not": {"pattern": "9"}}, {"type": "integer", "not": {"multipleOf": 2}}]}),
            vec![json!("a"), json!(1)],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer", "not": {"maximum": 1}}}, "required": ["b"]}}}),
            vec![json!({}), json!({"a": {"b": 2}})],
        ),
    ] {
        check(&schema, &pool, false);
        let compiled = JsonSchema::compile(&schema, "guided_json").unwrap();
        for v in must_accept {
            let text = canonical_json(&v);
            assert!(
                compiled.automaton().matches(text.as_bytes()),
                "{schema}: rejects {text}"
            );
        }
    }
}

#[test]
fn not_without_an_exact_rewrite_is_refused_naming_it() {
    for schema in [
        json!({"not": {"oneOf": [{"type": "string"}, {"minLength": 2}]}}),
        json!({"type": "array", "not": {"items": {"type": "string"}}}),
        json!({"type": "string", "not": {"format": "email"}}),
        json!({"type": "number", "not": {"multipleOf": 2}}),
        json!({"type": "number", "not": {"const": 1}}),
        json!({"type": "object", "not": {"const": {"a": 1}}}),
    ] {
        let e = JsonSchema::compile(&schema, "guided_json")
            .err()
            .unwrap_or_else(|| panic!("{schema} compiled"));
        assert!(e.message().contains("`not`"), "{schema}: {}", e.message());
        assert_eq!(e.param(), Some("guided_json"), "{schema}");
    }
}

#[test]
fn all_of_two_patterns_or_two_steps_is_exact() {
    let pool = scalars();
    for schema in [
        json!({"type": "string", "allOf": [{"pattern": "a"}, {"pattern": "b"}]}),
        json!({"type": "string", "pattern": "^.{1,2}$", "allOf": [{"pattern": "9"}, {"pattern": "a|9"}]}),
        json!({"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]}),
        json!({"type": "integer", "multipleOf": 3, "allOf": [{"multipleOf": 2}], "not": {"multipleOf": 4}}),
    ] {
        let accepted = check(&schema, &pool, true);
        assert!(accepted > 0, "{schema}: accepts none of the candidates");
    }
    let e = JsonSchema::compile(
        &json!({"type": "string", "pattern": ["a", "b"]}),
        "guided_json",
    )
    .unwrap_err();
    assert!(e.message().contains("must be a string"), "{}", e.message());
}

/// `patternProperties` whose patterns have different value schemas: each key takes the
/// schema of the one pattern it matches, when no key can match two (decided by DFA
/// intersection); patterns a key can match at once are refused, naming the keyword.
#[test]
fn pattern_properties_with_disjoint_patterns_take_each_patterns_schema() {
    let pool: Vec<Value> = composites().into_iter().chain(scalars()).collect();
    for schema in [
        json!({"type": "object", "additionalProperties": false,
               "patternProperties": {"^a": {"type": "integer"}, "^e": {"type": "string"}}}),
        json!({"type": "object", "additionalProperties": false,
               "patternProperties": {"^a$": {"type": "integer", "minimum": 2}, "^(b|x)$": {"enum": ["a", null]},
                                     "r$": {"type": "boolean"}}}),
        json!({"type": "object", "properties": {"b": {"type": "string"}},
               "patternProperties": {"^a": {"type": "null"}, "^x": {"type": ["integer", "boolean"]}}}),
    ] {
        let accepted = check(&schema, &pool, false);
        assert!(accepted > 0, "{schema}: accepts none of the candidates");
    }
    for (schema, why) in [
        (
            json!({"patternProperties": {"a": {"type": "integer"}, "^a": {"type": "string"}}}),
            "one key can match",
        ),
        (
            json!({"patternProperties": (0..9).map(|i| (format!("^{i}"), json!({"minimum": i}))).collect::<serde_json::Map<_, _>>()}),
            "at most 8",
        ),
    ] {
        let e = JsonSchema::compile(&schema, "guided_json")
            .err()
            .unwrap_or_else(|| panic!("{schema} compiled"));
        assert!(
            e.message().contains("`patternProperties`"),
            "{schema}: {}",
            e.message()
        );
        assert!(e.message().contains(why), "{schema}: {}", e.message());
    }
}

/// `oneOf` whose branches overlap: each branch and not the others, exact where the
/// negations are.
#[test]
fn one_of_with_overlapping_branches_matches_exactly_one() {
    let pool = scalars();
    for schema in [
        json!({"type": "integer", "oneOf": [{"minimum": 0}, {"multipleOf": 2}]}),
        json!({"type": "string", "oneOf": [{"pattern": "a"}, {"pattern": "b"}, {"maxLength": 1}]}),
        json!({"oneOf": [{"type": "string"}, {"maxLength": 2}], "type": ["string", "boolean", "integer"]}),
        json!({"oneOf": [{"type": "integer", "maximum": 3}, {"type": "integer", "minimum": -3}, {"type": "null"}]}),
        json!({"anyOf": [{"type": "null"}, {"type": "string", "oneOf": [{"minLength": 1}, {"enum": ["a", "", "9"]}]}]}),
    ] {
        let accepted = check(&schema, &pool, true);
        assert!(accepted > 0, "{schema}: accepts none of the candidates");
    }
    let pool: Vec<Value> = composites().into_iter().chain(scalars()).collect();
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}]
    });
    check(&schema, &pool, false);
    let compiled = JsonSchema::compile(&schema, "guided_json").unwrap();
    for (text, ok) in [
        (r#"{"a":1}"#, true),
        (r#"{"b":2}"#, true),
        (r#"{"a":1,"b":2}"#, false),
    ] {
        assert_eq!(compiled.automaton().matches(text.as_bytes()), ok, "{text}");
    }
}

/// Dependencies as branches: the trigger absent, or present with what it needs.
#[test]
fn dependencies_hold_in_every_output() {
    let pool: Vec<Value> = composites().into_iter().chain(scalars()).collect();
    let props =
        json!({"a": {"type": "integer"}, "b": {"type": "integer"}, "error": {"type": "string"}});
    for (schema, accepts, rejects) in [
        (
            json!({"type": "object", "properties": props, "dependentRequired": {"a": ["b"]}}),
            vec![r#"{}"#, r#"{"b":1}"#, r#"{"a":1,"b":2}"#],
            vec![r#"{"a":1}"#, r#"{"a":1,"error":"x"}"#],
        ),
        (
            json!({"type": "object", "properties": props, "dependencies": {"a": ["b"], "b": {"required": ["error"]}}}),
            vec![
                r#"{}"#,
                r#"{"b":1,"error":"x"}"#,
                r#"{"a":1,"b":2,"error":"x"}"#,
            ],
            vec![r#"{"a":1,"b":2}"#, r#"{"b":1}"#],
        ),
        (
            json!({"type": "object", "properties": props, "dependentSchemas": {"error": {"properties": {"a": {"minimum": 5}}, "required": ["a"]}}}),
            vec![r#"{"a":5,"error":"x"}"#, r#"{"a":1}"#],
            vec![r#"{"error":"x"}"#, r#"{"a":4,"error":"x"}"#],
        ),
        (
            json!({"type": "object", "properties": props, "required": ["a"], "dependentRequired": {"a": ["error"], "zzz": ["b"]}}),
            vec![r#"{"a":1,"error":"x"}"#],
            vec![r#"{"a":1}"#],
        ),
    ] {
        check(&schema, &pool, false);
        let compiled = JsonSchema::compile(&schema, "guided_json").unwrap();
        for text in accepts {
            assert!(
                compiled.automaton().matches(text.as_bytes()),
                "{schema}: rejects {text}"
            );
        }
        for text in rejects {
            assert!(
                !compiled.automaton().matches(text.as_bytes()),
                "{schema}: accepts {text}"
            );
        }
    }
}

/// `if`/`then`/`else` as "`if` and `then`, or not `if` and `else`".
#[test]
fn conditionals_hold_in_every_output() {
    let pool = scalars();
    for schema in [
        json!({"type": "integer", "if": {"minimum": 0}, "then": {"multipleOf": 2}, "else": {"maximum": -5}}),
        json!({"type": "string", "if": {"pattern": "a"}, "then": {"maxLength": 2}, "else": {"minLength": 2}}),
        json!({"type": ["string", "null"], "if": {"type": "string"}, "then": {"not": {"pattern": "9"}}}),
        json!({"type": "integer", "if": {"maximum": 3}, "else": {"multipleOf": 5}}),
        json!({"type": "boolean", "if": {"const": true}}),
    ] {
        let accepted = check(&schema, &pool, true);
        assert!(accepted > 0, "{schema}: accepts none of the candidates");
    }
    let pool: Vec<Value> = composites().into_iter().chain(scalars()).collect();
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "error": {"type": "string"}},
        "if": {"required": ["a"]},
        "then": {"required": ["b"]},
        "else": {"required": ["error"]}
    });
    check(&schema, &pool, false);
    let compiled = JsonSchema::compile(&schema, "guided_json").unwrap();
    for (text, ok) in [
        (r#"{"a":1,"b":2}"#, true),
        (r#"{"error":"x"}"#, true),
        (r#"{"a":1}"#, false),
        (r#"{"b":1}"#, false),
    ] {
        assert_eq!(compiled.automaton().matches(text.as_bytes()), ok, "{text}");
    }
}

#[test]
fn all_of_two_conditionals_holds_both() {
    let schema = json!({"type": "integer", "allOf": [
        {"if": {"minimum": 0}, "then": {"multipleOf": 2}},
        {"if": {"maximum": 5}, "then": {"multipleOf": 3}, "else": {"maximum": 9}}
    ]});
    assert!(check(&schema, &scalars(), true) > 0);
}

/// Number bounds with a fraction, compared digit by digit: exact on every canonical number
/// of up to three decimals in [-3, 3].
#[test]
fn decimal_number_bounds_are_exact() {
    let pool: Vec<Value> = (-3000..=3000)
        .step_by(7)
        .chain([
            -2500, -500, -1, 0, 1, 499, 500, 501, 1500, 2500, 2990, 2999, 3000,
        ])
        .map(|i| json!(i as f64 / 1000.0))
        .chain((-3..=3).map(|i| json!(i)))
        .collect();
    for schema in [
        json!({"type": "number", "minimum": 0.5}),
        json!({"type": "number", "exclusiveMinimum": 0.5, "maximum": 2.99}),
        json!({"type": "number", "minimum": -2.5, "exclusiveMaximum": -0.001}),
        json!({"type": "number", "minimum": -0.5, "maximum": 0.5}),
        json!({"type": "number", "exclusiveMinimum": -1.25, "exclusiveMaximum": 1}),
        json!({"type": "number", "maximum": 0.07}),
        json!({"type": "number", "exclusiveMaximum": -2.999}),
        json!({"type": "number", "minimum": 1.5, "maximum": 1.5}),
        json!({"type": "number", "minimum": 2, "maximum": 2.001}),
    ] {
        let accepted = check(&schema, &pool, true);
        assert!(accepted > 0, "{schema}: accepts none of the candidates");
    }
}
