//! The automaton of a schema's language: a byte DFA under the regex bounds when the language
//! is regular and fits, else the grammar engine's pushdown automaton, built from the rules
//! of [`Node::gbnf_rules`] under its own bounds.

use super::*;

impl JsonSchema {
    /// The automaton of a compiled node: a DFA where the language is regular and fits
    /// (masks ~0.1 us warm, against the grammar's ~1-10 us and its slower first visits),
    /// else the grammar (free-form values nest without bound, and a DFA must hold every
    /// combination of optional keys at once).
    /// `spent`: the grammar determinization work of earlier attempts for the same request.
    pub(super) fn build(
        node: Node,
        field: &str,
        shown: &str,
        limits: &Limits,
        spent: &mut u64,
    ) -> Result<Self> {
        if node == Node::Nothing {
            return Err(Error::invalid_input(format!(
                "{field} {shown} allows no value the compiler can emit"
            ))
            .with_param(field));
        }
        let dfa_error = if node.is_regular() {
            match Self::build_dfa(&node, field, shown, limits) {
                Ok(dfa) => {
                    return Ok(JsonSchema {
                        node,
                        automaton: Compiled::Dfa(dfa),
                    })
                }
                Err(e) if e.is_limit_exceeded() => Some(e),
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let grammar = Self::build_grammar(&node, field, shown, dfa_error, limits, spent)?;
        Ok(JsonSchema {
            node,
            automaton: Compiled::Grammar(grammar),
        })
    }

    /// The DFA, under the deployment's automaton bounds.
    pub(super) fn build_dfa(node: &Node, field: &str, shown: &str, limits: &Limits) -> Result<Dfa> {
        let nfa = node.to_nfa(limits.automaton_bytes).map_err(|e| {
            Error::limit_exceeded(format!(
                "{field} {shown} needs more than the {}-byte automaton limit",
                limits.automaton_bytes
            ))
            .with_param(field)
            .with_source(e)
        })?;
        Dfa::from_nfa(&nfa, field, shown, limits)
    }

    /// The same language as a pushdown grammar ([`Node::gbnf_rules`], compiled without
    /// writing their text) under
    /// [`GRAMMAR_AUTOMATON_BYTES`](crate::limits::GRAMMAR_AUTOMATON_BYTES), for a schema whose
    /// DFA passed its bound. A DFA must hold every combination of an object's optional keys
    /// and nested states at once (a schema with a few dozen properties and free-form values
    /// needs thousands of states over 40-90 byte classes), while the grammar keeps one small
    /// DFA per property and nests them on its stack.
    pub(super) fn build_grammar(
        node: &Node,
        field: &str,
        shown: &str,
        dfa_error: Option<Error>,
        limits: &Limits,
        spent: &mut u64,
    ) -> Result<Grammar> {
        // Counters first: one count is the smallest grammar and the fastest masks. Then
        // every count expanded: one parse per count (chains) is the faster grammar, nested
        // blocks the smaller one, rendered and tried only when the chains' rules pass the
        // automaton limit. The text is generated, so it is bounded too.
        let mut why = None;
        // The renderings often coincide (no long count): one that hashes like the last one
        // tried is not compiled again. Each is compiled by value, so only a hash is kept (a
        // collision could only skip a retry, refusing the schema with the last reason).
        let mut last: Option<u64> = None;
        let chains = std::iter::once_with(|| node.gbnf_rules());
        let blocked = std::iter::once_with(|| node.gbnf_rules_blocked());
        for rules in std::iter::once(node.gbnf_rules_counted())
            .chain(chains)
            .chain(blocked)
        {
            // Bounded as the exported text would be (counted, not written).
            let text_bytes = rules.gbnf_len(usize::MAX);
            // Compiled as that text would parse: the same numbering, so the same automaton.
            let rules = rules.numbered_as_parsed();
            let fingerprint = {
                use std::hash::BuildHasher;
                rustc_hash::FxBuildHasher.hash_one(&rules)
            };
            if last == Some(fingerprint) {
                continue;
            }
            last = Some(fingerprint);
            if text_bytes > MAX_SCHEMA_REGEX_BYTES {
                why = Some(format!(
                    "is {text_bytes} bytes of GBNF, over the {MAX_SCHEMA_REGEX_BYTES}-byte limit"
                ));
            } else {
                match Grammar::from_rules(rules, Some(free_form_rules()), limits, spent) {
                    Ok(grammar) => return Ok(grammar),
                    Err(e) => why = Some(e),
                }
                if *spent > limits.grammar_determinize_work {
                    // Another rendering would start with the budget spent.
                    break;
                }
            }
        }
        let why = why.expect("at least one grammar was tried");
        let e = match dfa_error {
            Some(dfa_error) => Error::limit_exceeded(format!(
                "{field} {shown} needs more than the {}-byte automaton limit as a DFA, and as a \
                 grammar it {why}",
                limits.automaton_bytes
            ))
            .with_source(dfa_error),
            None => Error::limit_exceeded(format!(
                "{field} {shown} needs a grammar (free-form values nest without bound), and \
                 the grammar {why}"
            )),
        };
        Err(e.with_param(field))
    }
}

/// The free-form JSON value's rules ([`any_json_body`]: the value, its array item, its
/// member), compiled once per process and spliced into every schema grammar that has one
/// ([`crate::grammar::Ast::prebuilt`]): the same automaton in all of them.
fn free_form_rules() -> &'static Prebuilt {
    static RULES: std::sync::OnceLock<Prebuilt> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        // `root ::= anyjson`, then the value's rules: the value itself becomes the root.
        let mut ast = Node::AnyJson.gbnf_rules_counted().numbered_as_parsed();
        let value = ast.prebuilt.take().expect("the value is a rule");
        let old_root = ast.root;
        ast.rules.remove(old_root);
        for rule in &mut ast.rules {
            rule.body.each_ref_mut(&mut |x| {
                assert_ne!(*x, old_root, "nothing refers to `root`");
                *x -= usize::from(*x > old_root);
            });
        }
        ast.root = value - usize::from(value > old_root);
        Prebuilt::new(ast, &Limits::DEFAULT).expect("the free-form value compiles")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::engine::{Parse, Work};

    /// The free-form value spliced in prebuilt is the language its own rules build: on schema
    /// grammars with free-form values at the root, in extra keys, in an array without
    /// `items` and nested under listed keys, every byte after every prefix of valid and
    /// invalid texts keeps both parses alive or neither, and both accept the same texts.
    #[test]
    fn a_spliced_free_form_value_is_the_language_of_its_rules() {
        let schemas = [
            json!({}),
            json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]}),
            json!({"type": "object", "properties": {"list": {"type": "array"}, "deep": {"type": "object", "properties": {"x": true}}}}),
            json!({"type": "array", "items": {"type": "object", "additionalProperties": true}, "maxItems": 40}),
        ];
        let texts = [
            r#"{"a":"x\"é","b":-12,"zz":[1,{"q":[null,true,false,"\u00e9😀"]},2.5e+3],"c":{}}"#,
            r#"{"list":[[[[[{"k":[-0.5,"s"]}]]]]],"deep":{"x":{"y":[{}]},"more":"v"},"a":1}"#,
            r#"[{"a":{"b":{"c":{"d":{"e":[1,2,{"f":"g"}]}}}}},{},{"x":"\\n"}]"#,
            r#"{"a":01,"b":[1,],"c":"\x"}"#,
            r#"{"b":5,"a":"late","a":"twice"}"#,
            "[1e5, \"tab\tin\"]",
        ];
        let limits = Limits::DEFAULT;
        let (mut grammars, mut prefixes) = (0, 0);
        for schema in &schemas {
            for extra_keys in [true, false] {
                let node = Compiler::new(schema, SchemaOptions { extra_keys }, limits)
                    .schema(schema)
                    .unwrap();
                let ast = node.gbnf_rules_counted().numbered_as_parsed();
                if ast.prebuilt.is_none() {
                    continue;
                }
                let spliced =
                    Grammar::from_rules(ast.clone(), Some(free_form_rules()), &limits, &mut 0)
                        .unwrap();
                let built = Grammar::from_rules(ast, None, &limits, &mut 0).unwrap();
                assert!(
                    spliced.spliced.is_some() && built.spliced.is_none(),
                    "{schema}"
                );
                grammars += 1;
                for text in &texts {
                    assert_eq!(
                        spliced.matches(text.as_bytes()),
                        built.matches(text.as_bytes()),
                        "{schema} {text}"
                    );
                    let (mut a, mut b) = (Parse::new(&spliced), Parse::new(&built));
                    let mut work = Work::unlimited();
                    for (k, &byte) in text.as_bytes().iter().enumerate() {
                        for c in 0..=255u8 {
                            assert_eq!(
                                a.accepts(&spliced, &[c], &mut work).unwrap(),
                                b.accepts(&built, &[c], &mut work).unwrap(),
                                "{schema} {text} after {k} bytes, byte {c}"
                            );
                        }
                        prefixes += 1;
                        let alive = a.advance(&spliced, &[byte], &mut work).unwrap();
                        assert_eq!(alive, b.advance(&built, &[byte], &mut work).unwrap());
                        if !alive {
                            break;
                        }
                    }
                }
            }
        }
        assert!(
            grammars >= 5 && prefixes >= 300,
            "{grammars} grammars, {prefixes} prefixes"
        );
    }
}
