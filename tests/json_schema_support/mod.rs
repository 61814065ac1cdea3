//! Shared by the `json_schema_*` tests: the corpora, per-file outcomes, golden files, random
//! walks through a schema's automaton (a DFA, or the grammar of a schema too large for one),
//! and the independent validator (the `jsonschema` crate).
#![allow(dead_code)]

use poot::constraint::{Compiled, Constraint, Matcher};
use poot::json_schema::{canonical_json, JsonSchema};
use poot::regex::{Dfa, DEAD};
use poot::vocab::Vocabulary;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/json_schema")
}

/// JSONSchemaBench, one `(file name, file JSON)` per schema (see [`corpus`]).
pub fn jsonschemabench() -> Vec<(String, Value)> {
    corpus("jsonschemabench.tsv.gz")
}

/// The SchemaStore catalogue's schemas with their test files (see [`corpus`]).
pub fn schemastore() -> Vec<(String, Value)> {
    corpus("schemastore.tsv.gz")
}

/// A committed corpus (`jsonschemabench.tsv.gz`, `schemastore.tsv.gz`), one `(file name,
/// file JSON)` per schema, from its gzip of `name<TAB>minified JSON` lines.
pub fn corpus(file: &str) -> Vec<(String, Value)> {
    let gz = std::fs::read(data_dir().join(file)).expect("corpus present");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("corpus decompresses");
    text.lines()
        .map(|line| {
            let (name, json) = line.split_once('\t').expect("name<TAB>json");
            (
                name.to_owned(),
                serde_json::from_str(json).expect("corpus JSON parses"),
            )
        })
        .collect()
}

/// The subset of a corpus file name: the part before `---` (`Github_easy---x.json` →
/// `Github_easy`, `SchemaStore---tsconfig.json` → `SchemaStore`), else before the first `_`
/// (`BFCL_java_3.json` → `BFCL`).
pub fn subset(name: &str) -> String {
    if let Some((s, _)) = name.split_once("---") {
        return s.to_owned();
    }
    name.split('_').next().unwrap_or(name).to_owned()
}

/// What happened to one schema and its test instances.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ok,
    CompileError { code: String, message: String },
    WrongReject(Vec<usize>),
    WrongAccept(Vec<usize>),
}

impl Outcome {
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::CompileError { .. } => "compile_error",
            Outcome::WrongReject(_) => "wrong_reject",
            Outcome::WrongAccept(_) => "wrong_accept",
        }
    }

    pub fn line(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::CompileError { code, message } => {
                format!("compile_error\t{code}\t{}", short(message))
            }
            Outcome::WrongReject(i) => format!("wrong_reject\ttests {i:?}"),
            Outcome::WrongAccept(i) => format!("wrong_accept\ttests {i:?}"),
        }
    }
}

/// An error message without the quoted schema (the file name says which).
pub fn short(message: &str) -> String {
    // "guided_json `{...}`: why" or "guided_json `{...}` needs ..."
    let Some(rest) = message.strip_prefix("guided_json `") else {
        return message.to_owned();
    };
    // The quote ends at "`: " or "` " followed by the reason.
    for (i, _) in rest.match_indices('`') {
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix(": ") {
            return r.to_owned();
        }
        if let Some(r) = after.strip_prefix(' ') {
            if !r.starts_with('`') {
                return r.to_owned();
            }
        }
    }
    message.to_owned()
}

/// Compiles a schema as `guided_json`.
pub fn compile(schema: &Value) -> Result<JsonSchema, poot::Error> {
    JsonSchema::compile(schema, "guided_json")
}

/// Checks `tests` (`{"data", "valid"}`) in canonical form against a compiled schema. An
/// instance whose canonical form the validator judges differently from its flag (draft 4
/// tells `1.0` from `1`, which the canonical form merges) is skipped; returns the outcome and
/// how many were skipped.
pub fn check_instances(
    automaton: &Compiled,
    tests: &[Value],
    validator: Option<&jsonschema::Validator>,
) -> (Outcome, usize) {
    let mut rejects = Vec::new();
    let mut accepts = Vec::new();
    let mut skipped = 0;
    for (i, t) in tests.iter().enumerate() {
        let text = canonical_json(&t["data"]);
        let valid = t["valid"].as_bool().unwrap_or(false);
        if let Some(v) = validator {
            let reparsed: Value = serde_json::from_str(&text).expect("canonical JSON parses");
            if v.is_valid(&reparsed) != valid {
                skipped += 1;
                continue;
            }
        }
        match (valid, automaton.matches(text.as_bytes())) {
            (true, false) => rejects.push(i),
            (false, true) => accepts.push(i),
            _ => {}
        }
    }
    let outcome = if !accepts.is_empty() {
        Outcome::WrongAccept(accepts)
    } else if !rejects.is_empty() {
        Outcome::WrongReject(rejects)
    } else {
        Outcome::Ok
    };
    (outcome, skipped)
}

/// The independent validator, asserting formats (our `format`s are assertions).
pub fn validator(schema: &Value) -> Option<jsonschema::Validator> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .ok()
}

/// SplitMix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Random walks through a schema's automaton, each ending in a complete output (see
/// [`dfa_walks`] and [`grammar_walks`]).
pub fn random_walks(automaton: &Compiled, n: usize, seed: u64, budget: usize) -> Vec<Vec<u8>> {
    match automaton {
        Compiled::Dfa(dfa) => dfa_walks(dfa, n, seed, budget),
        Compiled::Grammar(_) => grammar_walks(automaton, n, seed, budget),
        Compiled::JsonValue => panic!("a schema never compiles to the JSON value acceptor"),
    }
}

/// Random walks through a grammar's token masks over a vocabulary of the 256 single bytes:
/// each step picks a uniformly random allowed byte, or (half the time) the first allowed
/// closer: outside a string one of `"}],0` and the letters of `true`/`false`/`null`, which
/// close strings, objects, arrays and values (`,` moves on to a required property); inside a
/// string only `"` (a `}` or `0` there closes nothing, and a pattern such as `[0-9]+\.` would
/// take `0` forever), and never `0` twice in a row (a number above zero would take `0.000…`
/// forever). It ends with probability 1/4 where the output is complete, and after `budget`
/// bytes takes a shortest completion ([`Matcher::closing_bytes`]: a required key among
/// free-form extra keys is found by it, never by chance). A walk whose completion passes
/// `4 * budget` bytes is dropped; the caller checks how many remain.
pub fn grammar_walks(automaton: &Compiled, n: usize, seed: u64, budget: usize) -> Vec<Vec<u8>> {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.push(b"</s>".to_vec());
    let vocab = Arc::new(Vocabulary::new(tokens, vec![256]).expect("a byte vocabulary"));
    let constraint = Arc::new(Constraint::from_compiled(automaton.clone(), vocab));
    let mut rng = Rng(seed);
    let mut mask = vec![0u32; 257usize.div_ceil(32)];
    let mut outs = Vec::new();
    for _ in 0..n {
        let mut matcher = Matcher::new(constraint.clone());
        let mut text = Vec::new();
        // Where the output stands in JSON's lexical structure (it is JSON by construction).
        let (mut in_string, mut escaped) = (false, false);
        loop {
            matcher
                .fill_mask(&mut mask)
                .expect("a schema's grammar stays in its budget");
            let allowed: Vec<u8> = (0..=255u8)
                .filter(|&b| mask[usize::from(b) / 32] >> (b % 32) & 1 == 1)
                .collect();
            if matcher.is_accepting() && (allowed.is_empty() || rng.below(4) == 0) {
                outs.push(text);
                break;
            }
            if allowed.is_empty() {
                break;
            }
            if text.len() >= budget {
                let Some(rest) = matcher.closing_bytes(budget * 4) else {
                    break;
                };
                for &b in &rest {
                    matcher.advance(u32::from(b)).expect("a completion's byte");
                }
                text.extend_from_slice(&rest);
                assert!(
                    matcher.is_accepting(),
                    "a completion ends where the output may"
                );
                outs.push(text);
                break;
            }
            let closers: &[u8] = if in_string && !escaped {
                b"\""
            } else if in_string {
                b""
            } else {
                b"\"}],0truefalsn"
            };
            let closing = closers.iter().copied().find(|b| allowed.contains(b));
            let b = match closing {
                // A second `0` in a row could be a number that must pass zero (`0.000…`).
                Some(b'0') if text.last() == Some(&b'0') => allowed[rng.below(allowed.len())],
                Some(b) if rng.below(2) == 0 => b,
                _ => allowed[rng.below(allowed.len())],
            };
            if escaped {
                escaped = false;
            } else if in_string && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = !in_string;
            }
            matcher.advance(u32::from(b)).expect("an allowed byte");
            text.push(b);
        }
    }
    outs
}

/// Random walks through a DFA over a byte-level vocabulary: each step picks a uniformly
/// random live byte class (so structure, not byte counts, decides), ends with probability
/// 1/4 where the output is complete, and after `budget` bytes steers to the nearest
/// accepting state. Every walk ends in a complete output.
pub fn dfa_walks(dfa: &Dfa, n: usize, seed: u64, budget: usize) -> Vec<Vec<u8>> {
    // Explore the reachable states and their distance to acceptance.
    let mut ids: HashMap<u32, usize> = HashMap::new();
    let mut states = vec![dfa.start()];
    ids.insert(dfa.start(), 0);
    let mut edges: Vec<Vec<(u8, u32)>> = Vec::new();
    let mut i = 0;
    while i < states.len() {
        let s = states[i];
        let mut out = Vec::new();
        let mut seen_targets: HashMap<u32, ()> = HashMap::new();
        for b in 0..=255u8 {
            let t = dfa.next(s, b);
            if t == DEAD {
                continue;
            }
            // One representative byte per (target) keeps classes, not bytes, uniform.
            if seen_targets.insert(t, ()).is_none() || b.is_ascii_alphanumeric() && out.len() < 4 {
                out.push((b, t));
            }
            if let std::collections::hash_map::Entry::Vacant(e) = ids.entry(t) {
                e.insert(states.len());
                states.push(t);
            }
        }
        edges.push(out);
        i += 1;
    }
    let n_states = states.len();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n_states];
    for (k, out) in edges.iter().enumerate() {
        for &(_, t) in out {
            preds[ids[&t]].push(k);
        }
    }
    let mut dist = vec![usize::MAX; n_states];
    let mut queue = std::collections::VecDeque::new();
    for (k, &s) in states.iter().enumerate() {
        if dfa.is_accepting(s) {
            dist[k] = 0;
            queue.push_back(k);
        }
    }
    while let Some(k) = queue.pop_front() {
        for &p in &preds[k] {
            if dist[p] == usize::MAX {
                dist[p] = dist[k] + 1;
                queue.push_back(p);
            }
        }
    }
    let mut rng = Rng(seed);
    let mut outs = Vec::new();
    for _ in 0..n {
        let mut s = dfa.start();
        let mut text = Vec::new();
        loop {
            let k = ids[&s];
            if dfa.is_accepting(s) && (edges[k].is_empty() || rng.below(4) == 0) {
                break;
            }
            let (b, t) = if text.len() >= budget {
                *edges[k]
                    .iter()
                    .min_by_key(|(_, t)| dist[ids[t]])
                    .expect("live states have an edge")
            } else {
                edges[k][rng.below(edges[k].len())]
            };
            text.push(b);
            s = t;
            if text.len() > budget * 4 {
                break;
            }
        }
        outs.push(text);
    }
    outs
}

/// Validates sampled outputs; returns a description of each invalid one.
pub fn unsound_samples(
    schema: &Value,
    validator: &jsonschema::Validator,
    samples: &[Vec<u8>],
) -> Vec<String> {
    let _ = schema;
    let mut bad = Vec::new();
    for s in samples {
        let shown = String::from_utf8_lossy(s);
        match serde_json::from_slice::<Value>(s) {
            Err(e) => bad.push(format!("not JSON ({e}): {shown}")),
            Ok(v) => {
                if !validator.is_valid(&v) {
                    bad.push(format!("invalid: {shown}"));
                }
            }
        }
    }
    bad
}

/// Compares `actual` with a golden file; with `POOT_BLESS=1` rewrites it instead.
pub fn golden(name: &str, actual: &str) {
    let path = data_dir().join(name);
    if std::env::var("POOT_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, actual).expect("golden file written");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let exp: Vec<&str> = expected.lines().collect();
        let act: Vec<&str> = actual.lines().collect();
        let mut diff = String::new();
        let exp_set: std::collections::HashSet<&str> = exp.iter().copied().collect();
        let act_set: std::collections::HashSet<&str> = act.iter().copied().collect();
        for l in &exp {
            if !act_set.contains(l) {
                diff.push_str(&format!("- {l}\n"));
            }
        }
        for l in &act {
            if !exp_set.contains(l) {
                diff.push_str(&format!("+ {l}\n"));
            }
        }
        let shown: String = diff.lines().take(60).collect::<Vec<_>>().join("\n");
        panic!(
            "{} differs from the compiler's outcomes ({} lines changed; rerun with POOT_BLESS=1 to accept):\n{shown}",
            path.display(),
            diff.lines().count()
        );
    }
}

/// Each candidate, serialized canonically, is accepted by `automaton` only when `validator`
/// accepts it, and with `exact` exactly then; `each(text, accepted)` sees every candidate
/// (a further check on the same texts). Returns how many were accepted, so a case cannot
/// pass by rejecting everything.
pub fn check_candidates(
    schema: &Value,
    validator: &jsonschema::Validator,
    automaton: &Compiled,
    candidates: &[Value],
    exact: bool,
    mut each: impl FnMut(&str, bool),
) -> usize {
    let mut accepted_count = 0;
    for c in candidates {
        let text = canonical_json(c);
        let ok = validator.is_valid(c);
        let accepted = automaton.matches(text.as_bytes());
        assert!(
            !accepted || ok,
            "{schema}: accepts {text}, which is invalid"
        );
        if exact {
            assert_eq!(accepted, ok, "{schema}: rejects {text}, which is valid");
        }
        each(&text, accepted);
        accepted_count += usize::from(accepted);
    }
    accepted_count
}
