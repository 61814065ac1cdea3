//! Small hostile inputs, one test per class of failure: each must end in a compiled
//! constraint or a named 4xx error within 1 s, well under 1 GiB, on a 1 MiB stack (the
//! wasm32 default: a stack overflow there is the whole instance gone), never a panic.
//!
//! The classes are the ones users met: recursion that follows the input (one frame per
//! character of a property name, per `$ref` in a chain, per nesting level), work exponential
//! in a self-referencing `$ref` under `enum` + `anyOf`, a counted repetition of an item that
//! can be empty run one count at a time, expansions that build gigabytes before the size
//! bound is checked, and slicing inside a UTF-8 character.

mod bounded;
mod common;

use bounded::{bounded, compile_body, Outcome};
use poot::api::{Endpoint, Request};
use serde_json::{json, Value};

/// [`bounded`], printing how the case ended.
fn reported(name: &str, f: impl FnOnce() -> Result<(), poot::Error> + Send + 'static) -> Outcome {
    let o = bounded(name, f);
    eprintln!(
        "{name}: {:?} in {:.1} ms, peak {:.1} MiB",
        o.result
            .as_ref()
            .map_err(|(s, c, m)| format!("{s} {c}: {m}")),
        o.elapsed.as_secs_f64() * 1e3,
        o.peak as f64 / (1 << 20) as f64
    );
    o
}

fn schema_case(name: &str, schema: Value) -> Outcome {
    let text = schema.to_string();
    assert!(
        text.len() <= poot::limits::MAX_SCHEMA_BYTES,
        "{name}: the input must fit the schema text bound ({} bytes)",
        text.len()
    );
    reported(name, move || {
        compile_body(json!({ "guided_json": schema }))?;
        // The same schema through the request parser (response_format and its checks).
        let body = json!({
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
        });
        Request::parse(&body, Endpoint::Chat).map(|_| ())
    })
}

fn long_name(n: usize) -> String {
    "k".repeat(n)
}

/// `{"d0": {"$ref": "#/$defs/d1"}, ..., "dN": {"type": "integer"}}` as a `$defs` chain.
fn ref_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({ "$ref": format!("#/$defs/d{}", i + 1) }),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({ "$defs": defs, "$ref": "#/$defs/d0" })
}

/// `levels` schemas each wrapping the next under `key` (arrays of arrays, and so on).
fn nested(levels: usize, wrap: impl Fn(Value) -> Value) -> Value {
    let mut s = json!({"type": "integer"});
    for _ in 0..levels {
        s = wrap(s);
    }
    s
}

#[test]
fn recursion_that_follows_the_input_is_bounded() {
    // One character of a property name: the extra keys' "none of the listed names".
    schema_case(
        "long property name beside additionalProperties",
        json!({"type": "object", "properties": {long_name(15_000): {"type": "integer"}},
               "additionalProperties": {"type": "integer"}}),
    );
    schema_case(
        "long required name outside properties",
        json!({"type": "object", "required": [long_name(15_000)],
               "additionalProperties": {"type": "string"}}),
    );
    schema_case(
        "long propertyNames enum",
        json!({"type": "object", "propertyNames": {"enum": [long_name(15_000)]},
               "additionalProperties": true}),
    );
    schema_case(
        "many names sharing a long prefix",
        json!({"type": "object",
               "properties": (0..20).map(|i| (format!("{}{i}", long_name(700)), json!({"type": "integer"})))
                    .collect::<serde_json::Map<_, _>>(),
               "additionalProperties": {"type": "integer"}}),
    );
    // One frame per `$ref` of a chain, with no JSON nesting at all.
    schema_case("a chain of 500 $refs", ref_chain(500));
    // Nesting as deep as the JSON parser allows (serde_json stops at 128 levels).
    schema_case(
        "arrays nested 120 deep",
        nested(120, |s| json!({"type": "array", "items": s})),
    );
    schema_case(
        "objects nested 60 deep",
        nested(
            60,
            |s| json!({"type": "object", "properties": {"a": s}, "required": ["a"]}),
        ),
    );
    schema_case(
        "optional objects nested 60 deep",
        nested(
            60,
            |s| json!({"type": "object", "properties": {"a": s, "b": {}}}),
        ),
    );
    schema_case(
        "anyOf nested 60 deep",
        nested(60, |s| json!({"anyOf": [s, {"type": "null"}]})),
    );
    schema_case(
        "allOf nested 60 deep",
        nested(60, |s| json!({"allOf": [s, {}]})),
    );
    schema_case(
        "not nested 120 deep beside enum",
        json!({"enum": [1, 2], "not": nested(119, |s| json!({"not": s}))}),
    );
    schema_case(
        "a const nested 120 deep",
        json!({"const": nested(120, |s| json!([s]))}),
    );
    schema_case(
        "a pattern of nested groups",
        json!({"type": "string", "pattern": format!("{}a{}", "(".repeat(4000), ")".repeat(4000))}),
    );
    schema_case(
        "a pattern of 5,000 alternatives",
        json!({"type": "string", "pattern": vec!["a"; 5000].join("|")}),
    );
    // Grammars: a chain of rules, a long sequence, a long alternation.
    let chain: String = (0..1000)
        .map(|i| format!("r{i} ::= r{}\n", i + 1))
        .collect::<String>()
        + "r1000 ::= \"x\"\n";
    let chain = format!("root ::= r0\n{chain}");
    for (name, g) in [
        ("a chain of 1,000 rules", chain),
        (
            "4,000 items in sequence",
            format!("root ::= {}", "\"a\" ".repeat(4000)),
        ),
        (
            "2,500 alternatives",
            format!("root ::= {}", vec!["\"a\""; 2500].join(" | ")),
        ),
        (
            "groups nested 5,000 deep",
            format!("root ::= {}\"a\"{}", "(".repeat(5000), ")".repeat(5000)),
        ),
    ] {
        assert!(
            g.len() <= poot::limits::MAX_GRAMMAR_BYTES,
            "{name}: {}",
            g.len()
        );
        reported(name, move || compile_body(json!({ "guided_grammar": g })));
    }
    for (name, r) in [
        (
            "regex groups nested 2,000 deep",
            format!("{}a{}", "(".repeat(2000), ")".repeat(2000)),
        ),
        ("regex of 2,000 alternatives", vec!["a"; 2000].join("|")),
        ("regex of a 4,096-byte literal", "a".repeat(4096)),
    ] {
        reported(name, move || compile_body(json!({ "guided_regex": r })));
    }
}

#[test]
fn exponential_work_is_bounded() {
    // Every check of an enum value follows both branches, 64 levels deep: 2^64 visits.
    let doubling = json!({
        "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}},
        "enum": [1, "x", [1, 2], {"k": 1}],
        "allOf": [{"$ref": "#/$defs/a"}],
    });
    schema_case("self-referencing anyOf under enum", doubling);
    let doubling_all = json!({
        "$defs": {"a": {"allOf": [{"anyOf": [{"$ref": "#/$defs/a"}, true]},
                                 {"anyOf": [{"$ref": "#/$defs/a"}, true]}]}},
        "const": {"k": [1, 2, 3]},
        "not": {"$ref": "#/$defs/a"},
    });
    schema_case("self-referencing allOf/anyOf under const", doubling_all);
    let items_doubling = json!({
        "$defs": {"a": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}}},
        "enum": [[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]],
        "$ref": "#/$defs/a",
    });
    schema_case("self-referencing items under enum", items_doubling);
    // Pairs of oneOf branches, each pair compared.
    schema_case(
        "1,000 oneOf branches",
        json!({"oneOf": (0..1000).map(|i| json!({"const": i})).collect::<Vec<_>>()}),
    );
    // Twelve long values: the set-of-used-values automaton has 2^12 x (trie nodes) places,
    // counted before any table over them is made.
    schema_case(
        "uniqueItems over 12 enum strings of 1,100 characters",
        json!({"type": "array", "uniqueItems": true,
               "items": {"enum": (0..12).map(|i| format!("{i:x}").repeat(1100)).collect::<Vec<_>>()}}),
    );
    // A chain's item whose wide characters sit four references deep behind 1,300-way
    // fan-outs (16 KiB of text): splitting them out visits 1,300^3 alternatives unless that
    // walk is bounded.
    let fan = |to: &str| vec![to; 1300].join(" | ");
    let grammar = format!(
        "root ::= a{{8}}\na ::= \"x\" | {}\nb ::= {}\nc ::= {}\nd ::= [a-zé-ÿ]\n",
        fan("b"),
        fan("c"),
        fan("d")
    );
    reported(
        "wide characters behind 1,300-way fan-outs in a counted item",
        move || compile_body(json!({ "guided_grammar": grammar })),
    );
    schema_case(
        "uniqueItems over a long enum of arrays",
        json!({"type": "array", "uniqueItems": true, "maxItems": 3,
               "enum": (0..600).map(|i| json!([i, i, i])).collect::<Vec<_>>()}),
    );
}

#[test]
fn counted_repetitions_of_an_empty_item_are_bounded() {
    // The count is up to 2^32; an item that can match nothing must not be run once per count.
    let count = u32::MAX;
    schema_case(
        "pattern (a?){2^32-1} under enum",
        json!({"type": "string", "pattern": format!("^(a?){{{count}}}$"), "enum": ["aaa", "b"]}),
    );
    schema_case(
        "pattern (a?){2^32-1}",
        json!({"type": "string", "pattern": format!("^(a?){{{count}}}$")}),
    );
    schema_case(
        "propertyNames (x?){2^32-1} under enum",
        json!({"type": "object", "propertyNames": {"pattern": format!("^(x?){{{count},}}$")},
               "enum": [{"x": 1}, {"y": 2}]}),
    );
    schema_case(
        "patternProperties (x?){2^32-1} under enum",
        json!({"type": "object",
               "patternProperties": {format!("^(x?){{{count}}}$"): {"type": "integer"}},
               "additionalProperties": false,
               "enum": [{"x": 1}, {"xx": "a"}]}),
    );
    schema_case(
        "patternProperties (x?){2^32-1}",
        json!({"type": "object",
               "patternProperties": {format!("^(x?){{{count}}}$"): {"type": "integer"}},
               "additionalProperties": false}),
    );
    schema_case(
        "maxLength 2^32-1 beside a pattern",
        json!({"type": "string", "pattern": "^(a?)*$", "minLength": 0, "maxLength": count}),
    );
    schema_case(
        "minLength 2^32-1",
        json!({"type": "string", "minLength": count}),
    );
    schema_case(
        "maxItems 2^32-1 of free-form items",
        json!({"type": "array", "maxItems": count}),
    );
    schema_case(
        "minItems 2^32-1",
        json!({"type": "array", "items": {"type": "integer"}, "minItems": count}),
    );
    for (name, g) in [
        (
            "grammar (\"a\"?){0,4294967295}",
            "root ::= (\"a\"?){0,4294967295}",
        ),
        ("grammar ([a]*){4294967295}", "root ::= ([a]*){4294967295}"),
        (
            "grammar x{0,4294967295} nested",
            "root ::= ((\"ab\"){0,4294967295}){0,4294967295}",
        ),
    ] {
        reported(name, move || compile_body(json!({ "guided_grammar": g })));
    }
    reported("regex (a?){4294967295}", || {
        compile_body(json!({ "guided_regex": "(a?){4294967295}" }))
    });
}

#[test]
fn expansions_are_bounded_before_they_are_built() {
    let props = |n: usize, s: Value| {
        (0..n)
            .map(|i| (format!("p{i}"), s.clone()))
            .collect::<serde_json::Map<_, _>>()
    };
    schema_case(
        "1,000 optional free-form properties",
        json!({"type": "object", "properties": props(1000, json!({}))}),
    );
    schema_case(
        "300 optional free-form properties",
        json!({"type": "object", "properties": props(300, json!(true))}),
    );
    schema_case(
        "100 optional objects of 10 optional free-form properties",
        json!({"type": "object", "properties": props(100, json!({"type": "object", "properties": props(10, json!({}))}))}),
    );
    schema_case(
        "optional properties nested in arrays",
        nested(
            6,
            |s| json!({"type": "array", "maxItems": 5, "items": {"type": "object", "properties": {"a": s, "b": {}, "c": {}, "d": {}}}}),
        ),
    );
    // Property counts write an object out once per set of optional properties (up to 64):
    // each set copies the values, so nesting multiplies the copies level by level.
    schema_case("property counts over a definition at each of 5 levels", {
        let mut defs = serde_json::Map::new();
        defs.insert("l0".into(), json!({"type": "integer"}));
        for l in 1..=5 {
            let r = json!({"$ref": format!("#/$defs/l{}", l - 1)});
            defs.insert(
                format!("l{l}"),
                json!({"type": "object", "additionalProperties": false, "maxProperties": 3,
                       "properties": props(7, r)}),
            );
        }
        json!({"$defs": defs, "$ref": "#/$defs/l5"})
    });
    schema_case("a definition used 16 times at each of 4 levels", {
        let mut defs = serde_json::Map::new();
        defs.insert(
            "l0".into(),
            json!({"type": "object", "properties": props(8, json!({}))}),
        );
        for l in 1..4 {
            let r = json!({"$ref": format!("#/$defs/l{}", l - 1)});
            defs.insert(
                format!("l{l}"),
                json!({"type": "object", "properties": props(16, r)}),
            );
        }
        json!({"$defs": defs, "$ref": "#/$defs/l4"})
    });
}

/// Moves are kept by class span, but minimization and the closing table read them class by
/// class: a grammar of many states, each moving on most of 256 byte classes, is refused on
/// that count before either runs.
#[test]
fn moves_by_byte_class_are_bounded() {
    // Every ASCII byte its own class, then 24 rules of 128 positions that each take any of
    // them: ~3,100 states of 127 classes.
    let bytes: Vec<String> = (1..=127u8).map(|b| format!("\"\\x{b:02X}\"")).collect();
    let rules: Vec<String> = (0..24).map(|i| format!("x{i}")).collect();
    let g = format!(
        "root ::= b | {}\nb ::= {}\n{}",
        rules.join(" | "),
        bytes.join(" | "),
        rules
            .iter()
            .map(|r| format!("{r} ::= [\\x01-\\x7F]{{128}}\n"))
            .collect::<String>()
    );
    assert!(
        g.len() <= poot::limits::MAX_GRAMMAR_BYTES,
        "{} bytes",
        g.len()
    );
    let o = reported("3,072 positions of 127 byte classes", move || {
        compile_body(json!({ "guided_grammar": g }))
    });
    let (status, _, message) = o.result.expect_err("over the bound");
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("by byte class"), "{message}");
}

#[test]
fn slicing_inside_a_character_is_an_error_not_a_panic() {
    for r in [
        "#/%aé",
        "#/$defs/%é",
        "#/%",
        "#/%e",
        "#/%zz",
        "#/%E2%82",
        "#/a%C3",
    ] {
        schema_case(
            &format!("$ref {r}"),
            json!({"$defs": {"a": {"type": "integer"}}, "$ref": r}),
        );
        schema_case(
            &format!("$ref {r} under enum"),
            json!({"$defs": {"a": {"type": "integer"}}, "enum": [1], "anyOf": [{"$ref": r}]}),
        );
    }
    for p in [
        "\\u{é}", "[é-a]", "(?<é>a)", "\\pé", "\\cé", "é{2,1}", "\\xé",
    ] {
        schema_case(
            &format!("pattern {p}"),
            json!({"type": "string", "pattern": p}),
        );
    }
    for g in [
        "root ::= \"\\xé\"",
        "root ::= [é-a]",
        "root ::= \"\\u00\"",
        "root ::= [\\",
    ] {
        let g = g.to_owned();
        reported(&format!("grammar {g}"), move || {
            compile_body(json!({ "guided_grammar": g }))
        });
    }
}

#[test]
fn files_and_lists_at_their_limits_are_bounded() {
    use poot::gguf::{Builder, Gguf, Value as GgufValue};
    use poot::limits::{GGUF_MAX_METADATA_ENTRIES, MAX_CHOICES, MAX_CHOICE_BYTES};
    // A header with the limit's worth of keys: indexed by a sort, not compared pairwise
    // (10^5 keys were 10 s before).
    reported("GGUF header of the most keys allowed", || {
        let mut b = Builder::new();
        for i in 0..GGUF_MAX_METADATA_ENTRIES as usize {
            b = b.value(&format!("k{i}"), &GgufValue::U8(i as u8));
        }
        let bytes = b.build();
        let g = Gguf::parse(&bytes)?;
        assert_eq!(g.get("k7"), Some(&GgufValue::U8(7)));
        Ok(())
    });
    // The worst guided_choice allowed: the most strings, the most bytes, no shared prefixes.
    let mut rng = common::Rng::new(7);
    let choices: Vec<Value> = (0..MAX_CHOICES)
        .map(|_| {
            let s: String = (0..MAX_CHOICE_BYTES / MAX_CHOICES)
                .map(|_| char::from(b'!' + rng.below(94) as u8))
                .collect();
            json!(s.replace(['"', '\\'], "x"))
        })
        .collect();
    reported("guided_choice at its limits", move || {
        compile_body(json!({ "guided_choice": choices }))
    });
}

/// Tool definitions come from third parties (MCP servers, agent frameworks), up to
/// `MAX_TOOLS` in one request: their schemas' compile work is one request's budget, not one
/// budget per tool.
#[test]
fn tool_lists_share_one_request_budget() {
    let props = |n: usize, s: Value| {
        (0..n)
            .map(|i| (format!("p{i}"), s.clone()))
            .collect::<serde_json::Map<_, _>>()
    };
    // Legal schemas: objects of 8 required properties, 3 levels of `$ref`s deep over an
    // integer (~1,750 subschema visits each, so the 23rd tool finds the request's shared
    // budget spent), and 40 required bounded strings (128 of them pass when not forced; forced,
    // their grammar is over its byte bound).
    let required = |n: usize, s: Value| json!({"type": "object", "properties": props(n, s), "required": (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>()});
    let mut defs = serde_json::Map::new();
    defs.insert("l0".into(), json!({"type": "integer"}));
    for l in 1..4 {
        let r = json!({"$ref": format!("#/$defs/l{}", l - 1)});
        defs.insert(format!("l{l}"), required(8, r));
    }
    let heavy = [
        json!({"$defs": defs, "$ref": "#/$defs/l3"}),
        required(40, json!({"type": "string", "maxLength": 50})),
    ];
    for (i, schema) in heavy.into_iter().enumerate() {
        for choice in [json!("auto"), json!("required")] {
            let tools: Vec<Value> = (0..poot::api::tools::MAX_TOOLS)
                .map(|t| json!({"type": "function", "function": {"name": format!("f{t}"), "parameters": schema}}))
                .collect();
            let body = json!({
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tools": tools,
                "tool_choice": choice,
            });
            assert!(
                body.to_string().len() < 1 << 20,
                "fits poot serve's body bound"
            );
            let o = reported(
                &format!(
                    "{} tools of heavy schema {i}, tool_choice {choice}",
                    poot::api::tools::MAX_TOOLS
                ),
                move || {
                    let req = Request::parse(&body, Endpoint::Chat)?;
                    // The forced call's grammar, as a run builds it.
                    poot::api::tools::Codec::ChatMl
                        .forced_grammar(
                            &req.tools,
                            &req.tool_choice,
                            req.parallel_tool_calls,
                            &poot::limits::Limits::DEFAULT,
                        )
                        .map(|_| ())
                },
            );
            bounded::check("tools", &o);
            if let Err((_, _, message)) = &o.result {
                // A message names a few tools, not all 128.
                assert!(message.len() < 600, "{message}");
            }
        }
    }
}
