//! Every GBNF feature, one test each (the list in the docs of `poot::grammar`), and the text
//! of every grammar error: line, column, and what is wrong.

use poot::constraint::Spec;
use poot::grammar::Grammar;
use serde_json::json;

#[path = "common/mod.rs"]
mod common;
use common::Rng;

fn g(text: &str) -> Grammar {
    Grammar::new(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn check(text: &str, accept: &[&str], reject: &[&str]) {
    let g = g(text);
    for a in accept {
        assert!(g.matches(a.as_bytes()), "{text}: should accept {a:?}");
    }
    for r in reject {
        assert!(!g.matches(r.as_bytes()), "{text}: should reject {r:?}");
    }
}

fn err(text: &str) -> String {
    let e = Grammar::new(text).expect_err(text);
    assert_eq!(e.param(), Some("guided_grammar"));
    assert!(e.is_client_error());
    e.to_string()
}

#[test]
fn rules_and_the_root_entry_rule() {
    check(
        "root ::= greeting \" \" name\ngreeting ::= \"hi\"\nname ::= \"bo\"",
        &["hi bo"],
        &["hi", "bo", ""],
    );
    // Rules may be used before they are defined, and names take letters, digits, - and _.
    check(
        "root ::= a-1 b_2\na-1 ::= \"x\"\nb_2 ::= \"y\"",
        &["xy"],
        &["x"],
    );
}

#[test]
fn comments() {
    check(
        "# leading comment\nroot ::= \"a\" # after an item\n  # on its own line\nb ::= \"b\" # unused\n",
        &["a"],
        &["b", "a # after an item"],
    );
}

#[test]
fn newlines_inside_parentheses_after_define_and_after_bar() {
    check(
        "root ::=\n  (\n    \"a\"\n    \"b\"\n  |\n    \"c\"\n  ) \"d\" |\n  \"e\"",
        &["abd", "cd", "e"],
        &["ad", "abde"],
    );
}

#[test]
fn alternation() {
    check(
        "root ::= \"a\" | \"bc\" | \"\"",
        &["a", "bc", ""],
        &["b", "abc"],
    );
}

#[test]
fn sequences_and_groups() {
    check(
        "root ::= \"a\" (\"b\" | \"c\") (\"d\" (\"e\" | \"f\"))",
        &["abde", "acdf"],
        &["abd", "ade"],
    );
}

#[test]
fn literal_escapes() {
    check(
        r#"root ::= "\n\r\t\\\"\[\]\-\x41\u00e9\U0001F600""#,
        &["\n\r\t\\\"[]-Aé😀"],
        &["\\n"],
    );
    // \xNN is the character U+00NN (two UTF-8 bytes for ÿ), as in llama.cpp.
    check(r#"root ::= "\xff""#, &["ÿ"], &["\u{ff}\u{ff}"]);
    assert!(!g(r#"root ::= "\xff""#).matches(&[0xff]));
}

#[test]
fn character_classes_with_ranges() {
    check(
        r"root ::= [a-c0-9_\-\]é-ë]+",
        &["abc", "0_9", "-]", "éêë"],
        &["d", "A", "ì", ""],
    );
}

#[test]
fn negated_classes() {
    check(
        r#"root ::= "\"" [^"\\\x00-\x1F]* "\"""#,
        &["\"\"", "\"a b 日本 😀\""],
        &["\"a\"b\"", "\"\n\"", "\"\\\""],
    );
}

#[test]
fn dot_is_any_one_character() {
    check("root ::= . .", &["ab", "é日", "\n😀"], &["a", "abc"]);
    // Whole characters only: a lone UTF-8 lead byte is not one.
    assert!(!g("root ::= .").matches(&[0xC3]));
}

#[test]
fn rule_references_recursive_and_mutual() {
    check(
        "root ::= a\na ::= \"(\" b \")\" | \"x\"\nb ::= a a?",
        &["x", "(x)", "((x)x)", "(((x)))"],
        &["()", "(x", "(xxx)"],
    );
}

#[test]
fn repetition_operators() {
    check(
        "root ::= \"a\"* \"b\"+ \"c\"?",
        &["b", "aabbb", "bc", "abbc"],
        &["", "ac", "bcc"],
    );
}

#[test]
fn counted_repetitions() {
    check("root ::= [0-9]{3}", &["123"], &["12", "1234"]);
    check("root ::= [0-9]{2,}", &["12", "123456"], &["1"]);
    check("root ::= [0-9]{1,3}", &["1", "123"], &["", "1234"]);
    check(
        "root ::= \"ab\"{0,2} ( \"x\" ){ 2 , 2 }",
        &["xx", "abxx", "ababxx"],
        &["abababxx", "x"],
    );
    // The limit itself compiles.
    check(
        "root ::= \"a\"{0,1000}",
        &["", &"a".repeat(1000)],
        &[&"a".repeat(1001)],
    );
}

#[test]
fn empty_alternatives_and_empty_literals() {
    check("root ::= \"a\" (\"b\" | ) \"\"", &["a", "ab"], &["b"]);
}

#[test]
fn left_recursion_is_a_clear_error() {
    assert_eq!(
        err("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]"),
        "guided_grammar line 2, column 1: rule `expr` is left-recursive (expr -> expr): it can \
         call itself before reading any character, which a pushdown parser cannot do; rewrite \
         it with repetition, e.g. `expr ::= term (\"+\" term)*` (in `expr ::= expr \"+\" term | term`)"
    );
    // Through another rule and a nullable prefix.
    let e = err("root ::= a\na ::= b \"x\"\nb ::= \"y\"? a | \"z\"");
    assert!(e.contains("is left-recursive (a -> b -> a)"), "{e}");
    // The right-recursive form is fine.
    check(
        "root ::= term (\"+\" root)?\nterm ::= [0-9]",
        &["1+2+3"],
        &["1+"],
    );
}

#[test]
fn error_undefined_rule() {
    assert_eq!(
        err("root ::= a b\na ::= \"x\""),
        "guided_grammar line 1, column 12: undefined rule `b` (in `root ::= a b`)"
    );
}

#[test]
fn error_missing_root() {
    assert_eq!(
        err("start ::= \"x\""),
        "guided_grammar line 1, column 14: the grammar has no `root` rule (the entry point) (in `start ::= \"x\"`)"
    );
}

#[test]
fn error_unbalanced_brackets() {
    assert_eq!(
        err("root ::= (\"a\" | \"b\""),
        "guided_grammar line 1, column 10: unbalanced `(`: expected `)` to close it, found the end of the grammar (in `root ::= (\"a\" | \"b\"`)"
    );
    assert_eq!(
        err("root ::= \"a\")"),
        "guided_grammar line 1, column 13: unbalanced `)`: no `(` is open (in `root ::= \"a\")`)"
    );
    assert_eq!(
        err("root ::= [a-z"),
        "guided_grammar line 1, column 10: unbalanced `[`: the character class is never closed with `]` (in `root ::= [a-z`)"
    );
    assert_eq!(
        err("root ::= \"abc"),
        "guided_grammar line 1, column 10: unterminated string literal: no closing `\"` (in `root ::= \"abc`)"
    );
    // A newline ends a rule outside parentheses, so a `(` left open across lines is caught
    // where it opens.
    let e = err("root ::= (\"a\"\nx ::= \"b\"");
    assert!(
        e.starts_with("guided_grammar line 1, column 10: unbalanced `(`"),
        "{e}"
    );
}

#[test]
fn error_invalid_escapes() {
    assert_eq!(
        err(r#"root ::= "a\qb""#),
        r#"guided_grammar line 1, column 12: invalid escape `\q` (known: \n \r \t \\ \" \[ \] \- \xNN \uNNNN \UNNNNNNNN) (in `root ::= "a\qb"`)"#
    );
    assert_eq!(
        err(r#"root ::= [\x4]"#),
        r#"guided_grammar line 1, column 11: invalid escape: `\x` needs 2 hex digits (in `root ::= [\x4]`)"#
    );
    assert!(err(r#"root ::= "\U00110000""#).contains("past U+10FFFF"));
    assert!(err(r#"root ::= "\uD800""#).contains("is a surrogate"));
}

#[test]
fn error_empty_class_and_reversed_range() {
    assert_eq!(
        err("root ::= \"a\" []"),
        "guided_grammar line 1, column 14: empty character class: it would match no character (in `root ::= \"a\" []`)"
    );
    assert!(err("root ::= [^]").contains("empty character class"));
    assert!(err("root ::= [z-a]").contains("invalid range: U+007A is after U+0061"));
}

#[test]
fn error_other_syntax() {
    assert!(err("root := \"a\"").contains("expected `::=` after the rule name `root`"));
    assert!(err("root ::= \"a\"\n  | \"b\"").contains(
        "expected a rule name; an alternative `|` continues a rule only on the same line or inside parentheses"
    ));
    assert!(err("root ::= * \"a\"").contains("`*` repeats nothing"));
    assert!(err("root ::= \"a\"{2,1}").contains("the maximum is below the minimum"));
    assert!(err("root ::= \"a\"{x}").contains("expected a number in the repetition"));
    assert!(err("root ::= \"a\"\nroot ::= \"b\"")
        .contains("rule `root` is defined twice (first at line 1, column 1)"));
    assert!(err("root ::= <[1]>").contains("token references"));
    assert!(
        err("root ::= \"a\" $").contains("expected a newline or the end of the grammar, found `$`")
    );
    let e = err("root ::= a\na ::= \"x\" a");
    assert!(e.contains("the grammar matches no string"), "{e}");
}

#[test]
fn error_positions_count_lines_and_characters() {
    // Columns count characters, not bytes: `é` is one column.
    assert_eq!(
        err("root ::= \"é\" nope"),
        "guided_grammar line 1, column 14: undefined rule `nope` (in `root ::= \"é\" nope`)"
    );
    let e = err("root ::= a\n\n# comment\na ::= \"x\" \\");
    assert!(e.starts_with("guided_grammar line 4, column 11:"), "{e}");
}

#[test]
fn repetition_counts_are_bounded() {
    // Past 1000, a count of an item that can be empty would be expanded: refused.
    let e = Grammar::new("root ::= (\"x\"?){0,100000}").unwrap_err();
    assert!(e.is_limit_exceeded());
    assert_eq!(
        e.to_string(),
        "guided_grammar line 1, column 1: rule `root`: repetition count 100000 is over the limit of 1000 for an item that can match the empty string (in `root ::= (\"x\"?){0,100000}`)"
    );
    assert!(Grammar::new("root ::= \"x\"{99999999999999999999}")
        .unwrap_err()
        .is_limit_exceeded());
    // Nested expanded counts multiply; the automaton bound stops them.
    let e = Grammar::new("root ::= (((\"ab\" | \"cd\")?){1000}){1000}").unwrap_err();
    assert!(e.is_limit_exceeded());
    assert!(
        e.to_string().starts_with(
            "guided_grammar needs more than the 1048576-byte automaton limit (while compiling rule `root`)"
        ),
        "{e}"
    );
}

/// Counts past 128 of an item that cannot be empty are counters, which cost the same
/// whatever the count: a million items of a million items compiles.
#[test]
fn long_counts_of_non_empty_items_are_counters() {
    let huge = g("root ::= (\"ab\" | \"cd\"){1000000}");
    assert!(huge.state_count() < 200, "{huge:?}");
    assert!(huge.matches("ab".repeat(1_000_000).as_bytes()));
    assert!(!huge.matches("cd".repeat(999_999).as_bytes()));
    let nested = g("root ::= ((\"ab\" | \"cd\"){1000}){1000}");
    assert!(nested.matches("cdab".repeat(500_000).as_bytes()));
    assert!(!nested.matches("cdab".repeat(499_999).as_bytes()));
}

/// Counters against the `regex` crate on strings at and around every phase boundary: far
/// from both ends, the last 64 counts before `min` and `max`, and the ends themselves.
#[test]
fn counters_agree_with_the_regex_crate() {
    let cases: &[(&str, &str, u32, Option<u32>)] = &[
        ("(\"a\" | \"bc\" | [é-ë])", "(?:a|bc|[é-ë])", 300, Some(700)),
        ("[a-z]", "[a-z]", 0, Some(257)),
        ("[a-z]", "[a-z]", 270, Some(300)),
        ("(\"x\" \"y\"?)", "(?:xy?)", 500, None),
        ("[^\"]", "[^\"]", 64, Some(400)),
    ];
    let mut rng = Rng::new(7);
    for &(item, re_item, min, max) in cases {
        let count = |m: u32, x: Option<u32>| match x {
            Some(x) => format!("{{{m},{x}}}"),
            None => format!("{{{m},}}"),
        };
        let text = format!("root ::= \"<\" {item}{} \">\"", count(min, max));
        let grammar = g(&text);
        let re = regex::Regex::new(&format!("^<{re_item}{}>$", count(min, max))).unwrap();
        let top = max.unwrap_or(min + 200);
        let mut lengths: Vec<u32> = vec![0, 1, min, top, top + 1];
        for end in [min, top] {
            lengths.extend(end.saturating_sub(70)..=end + 2);
        }
        lengths.extend((0..40).map(|_| rng.below(top as usize + 80) as u32));
        let pieces = ["a", "bc", "é", "ë", "x", "xy", "z", "\""];
        for n in lengths {
            for _ in 0..3 {
                let body: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
                let s = format!("<{body}>");
                assert_eq!(
                    grammar.matches(s.as_bytes()),
                    re.is_match(&s),
                    "{text}: {s:?}"
                );
                // A string the item accepts throughout, which the engine must count exactly.
                let only = match re_item {
                    "(?:xy?)" => "xy".repeat(n as usize),
                    _ => "a".repeat(n as usize),
                };
                let s = format!("<{only}>");
                assert_eq!(
                    grammar.matches(s.as_bytes()),
                    re.is_match(&s),
                    "{text}: {n} items"
                );
            }
        }
    }
}

#[test]
fn nesting_is_bounded() {
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(200), ")".repeat(200));
    let e = Grammar::new(&deep).unwrap_err();
    assert!(e.is_limit_exceeded());
    assert!(
        e.to_string()
            .contains("parentheses nest deeper than the limit of 128"),
        "{e}"
    );
    let ok = format!("root ::= {}\"a\"{}", "(".repeat(100), ")".repeat(100));
    assert!(g(&ok).matches(b"a"));
    // Repetition operators nest without parentheses: `"a"` then 511 `?` is 512 levels, one
    // more is past the syntax-depth limit (8,000 overflowed the wasm32 stack).
    let stacked = |n: usize| format!("root ::= \"a\"{}", "?".repeat(n));
    assert!(g(&stacked(511)).matches(b"a"));
    let e = Grammar::new(&stacked(512)).unwrap_err();
    assert!(e.is_limit_exceeded() && e.param() == Some("guided_grammar"));
    assert!(
        e.to_string()
            .contains("alternatives and repetitions nest deeper than the limit of 512 levels"),
        "{e}"
    );
    // 128 parentheses of alternatives, a sequence and a repetition each are 387 levels.
    let mut each = "\"a\"".to_owned();
    for _ in 0..128 {
        each = format!("(\"b\" | \"c\" {each}*)");
    }
    let deepest = g(&format!("root ::= {each}"));
    assert!(deepest.matches(format!("{}a", "c".repeat(128)).as_bytes()));
    assert!(deepest.matches(b"cb") && !deepest.matches(b"ca"));
}

#[test]
fn grammar_text_over_16_kib_is_a_400() {
    let big = format!("root ::= \"a\"\n{}", "# padding\n".repeat(1700));
    assert!(big.len() > 16 * 1024);
    let e = Spec::from_request(&json!({ "guided_grammar": big })).unwrap_err();
    assert!(e.is_limit_exceeded() && e.is_client_error());
    assert_eq!(e.param(), Some("guided_grammar"));
    assert_eq!(
        e.to_string(),
        format!(
            "guided_grammar is {} bytes, over the 16384-byte limit",
            big.len()
        )
    );
    assert!(Grammar::new(&big).unwrap_err().is_limit_exceeded());
    // Just under the limit compiles.
    let fits = format!("root ::= \"a\"\n{}", "# padding\n".repeat(1600));
    assert!(Spec::from_request(&json!({ "guided_grammar": fits }))
        .unwrap()
        .unwrap()
        .compile()
        .is_ok());
}

#[test]
fn precedence_and_kind() {
    let s = Spec::from_request(&json!({"guided_grammar": "root ::= \"a\"", "guided_json": {}, "response_format": {"type": "json_object"}}))
        .unwrap()
        .unwrap();
    assert_eq!((s.kind(), s.param()), ("grammar", "guided_grammar"));
    let s = Spec::from_request(&json!({"guided_regex": "a", "guided_grammar": "root ::= \"b\""}))
        .unwrap()
        .unwrap();
    assert_eq!(s.kind(), "regex");
    let s = Spec::from_request(&json!({"response_format": {"type": "json_object"}}))
        .unwrap()
        .unwrap();
    assert_eq!((s.kind(), s.param()), ("json_object", "response_format"));
    assert!(s.compile().unwrap().matches(b"{\"a\": [1]}"));
}
