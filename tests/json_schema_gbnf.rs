//! The GBNF exported for a schema accepts exactly what its regex/automaton accepts, checked
//! with the grammar engine on every compiled test-suite schema and a slice of JSONSchemaBench:
//! canonical instances, random outputs of the automaton, and mutations of those.

mod json_schema_support;

use json_schema_support::*;
use poot::grammar::Grammar;
use poot::json_schema::{canonical_json, JsonSchema, SchemaOptions};
use poot::limits::Limits;
use serde_json::Value;

/// Inputs near the language's boundary: each sample, truncated, with a byte dropped, doubled
/// or replaced.
fn probes(samples: &[Vec<u8>], rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for s in samples {
        out.push(s.clone());
        if s.is_empty() {
            continue;
        }
        let i = rng.below(s.len());
        out.push(s[..i].to_vec());
        let mut dropped = s.clone();
        dropped.remove(i);
        out.push(dropped);
        let mut doubled = s.clone();
        doubled.insert(i, s[i]);
        out.push(doubled);
        let mut replaced = s.clone();
        replaced[i] = b"\",:[]{}0a -e.\\"[rng.below(14)];
        out.push(replaced);
    }
    out
}

fn check(
    name: &str,
    schema: &Value,
    instances: &[Value],
    seed: u64,
    failures: &mut Vec<String>,
) -> bool {
    // Listed keys only (`guided_json_extra_keys: false`): an object with free-form extra
    // keys runs on the grammar itself, and this compares the export with a DFA.
    let strict = SchemaOptions { extra_keys: false };
    let Ok(compiled) =
        JsonSchema::compile_with_options(schema, "guided_json", &Limits::DEFAULT, strict)
    else {
        return false;
    };
    // A schema too large for a DFA runs on this very grammar: nothing to compare.
    let Some(dfa) = compiled.dfa() else {
        return false;
    };
    let gbnf = compiled.gbnf();
    // Under the schema compiler's bound on generated text: an automaton leaf (a decimal
    // bound, a subtracted pattern) is written state by state, past a user's 16 KiB.
    let limits = poot::limits::Limits {
        grammar_bytes: poot::limits::MAX_SCHEMA_REGEX_BYTES,
        ..poot::limits::Limits::DEFAULT
    };
    let grammar = match Grammar::new_with(&gbnf, &limits) {
        Ok(g) => g,
        // A DFA of hundreds of states where paths meet (residues of several steps) is a rule
        // per state there, past our grammar engine's 1 MiB; the export is for llama.cpp,
        // which has no such bound, and the schema itself runs on the DFA. Counted, not hidden.
        Err(e) if e.is_limit_exceeded() && dfa.state_count() > 256 => {
            eprintln!("{name}: export of a {}-state DFA: {e}", dfa.state_count());
            return false;
        }
        Err(e) => {
            failures.push(format!("{name}: the grammar engine refuses the GBNF: {e}"));
            return true;
        }
    };
    let mut rng = Rng(seed);
    let mut samples = dfa_walks(dfa, 4, seed, 80);
    samples.extend(instances.iter().map(|v| canonical_json(v).into_bytes()));
    for p in probes(&samples, &mut rng) {
        let (want, got) = (dfa.matches(&p), grammar.matches(&p));
        if want != got {
            failures.push(format!(
                "{name}: {:?}: automaton {want}, grammar {got}",
                String::from_utf8_lossy(&p)
            ));
            break;
        }
    }
    true
}

#[test]
fn exported_gbnf_accepts_exactly_the_automaton_language() {
    let mut failures = Vec::new();
    let mut checked = 0;
    let root = data_dir().join("suite/draft2020-12");
    let mut names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    names.sort();
    for path in names {
        let cases: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (g, case) in cases.iter().enumerate() {
            let data: Vec<Value> = case["tests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["data"].clone())
                .collect();
            let name = format!("{} #{g}", path.file_name().unwrap().to_string_lossy());
            if check(&name, &case["schema"], &data, g as u64, &mut failures) {
                checked += 1;
            }
        }
    }
    // Every 20th JSONSchemaBench schema (~320) keeps a debug run short.
    for (i, (name, file)) in jsonschemabench().iter().enumerate().step_by(20) {
        let data: Vec<Value> = file["tests"]
            .as_array()
            .map(|t| t.iter().map(|x| x["data"].clone()).collect())
            .unwrap_or_default();
        if check(name, &file["schema"], &data, i as u64, &mut failures) {
            checked += 1;
        }
    }
    assert!(checked >= 350, "only {checked} schemas compiled");
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
