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
                match Grammar::from_rules(rules, limits, spent) {
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
