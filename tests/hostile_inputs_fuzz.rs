//! Fuzz-style property tests of the readers of untrusted input: GGUF files (mutations of a real
//! synthetic model and of each family's tiny model, and random headers; a model that loads runs
//! one token), `tokenizer.json` documents, `guided_choice` lists and
//! chat templates. Property: every input ends in `Ok` or a clean `Err` (never a panic), each
//! within [`CASE_SECONDS`].
//!
//! Each target runs `POOT_FUZZ_CASES` cases (default 2,000 for the cheap targets, fewer for the
//! model-file one; set it higher for a longer run) from a fixed seed (`POOT_FUZZ_SEED` to vary
//! it). A failing input is written under `target/fuzz-failures/<target>/` and named in the
//! panic message; copy it into `tests/data/fuzz/<target>/`, whose files every run replays first.

mod common;

use common::Rng;
use poot::chat_template::render_chat;
use poot::gguf::Gguf;
use poot::model::synthetic::TinySpec;
use poot::model::{Config, Model};
use poot::tokenizer::Tokenizer;
use poot::vocab::Vocabulary;
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The most one case may take, in seconds (unoptimized test builds included).
const CASE_SECONDS: f64 = 1.0;

fn cases(default: usize) -> usize {
    common::fuzz_cases(default)
}

/// Each target's own stream from the shared first seed.
fn seed(target: &str) -> u64 {
    target
        .bytes()
        .fold(common::fuzz_seed(), |h, b| h.rotate_left(7) ^ u64::from(b))
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    common::fuzz_corpus(target)
}

/// Runs `check` on `input`; on a panic, an `Err` that is not clean, or a slow case, saves the
/// input and fails naming it.
fn run_case(target: &str, name: &str, input: &[u8], check: &dyn Fn(&[u8]) -> Result<(), String>) {
    let t = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| check(input)));
    let secs = t.elapsed().as_secs_f64();
    let problem = match outcome {
        Err(_) => Some("panicked".to_string()),
        Ok(Err(e)) => Some(e),
        Ok(Ok(())) if secs > CASE_SECONDS => Some(format!("took {secs:.2} s")),
        Ok(Ok(())) => None,
    };
    if let Some(problem) = problem {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/fuzz-failures")
            .join(target);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name.replace(['/', ' '], "_"));
        std::fs::write(&path, input).unwrap();
        panic!(
            "{target} case {name}: {problem}; input saved to {}",
            path.display()
        );
    }
}

/// A clean error: a client error with a message (never a GPU error or an empty message).
fn clean(e: &poot::Error) -> Result<(), String> {
    if e.is_client_error() && !e.message().is_empty() {
        Ok(())
    } else {
        Err(format!("unclean error {}: {e}", e.code()))
    }
}

fn ok_or_clean<T>(r: poot::Result<T>) -> Result<Option<T>, String> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) => clean(&e).map(|()| None),
    }
}

// ------------------------------------------------------------------------------------------
// GGUF

/// Everything that reads a model file, as `poot serve` would on an uploaded one.
fn check_gguf(file: &[u8]) -> Result<(), String> {
    let Some(gguf) = ok_or_clean(Gguf::parse(file))? else {
        return Ok(());
    };
    // Every array walked, every key found again through the index.
    for (key, value) in gguf.metadata() {
        if gguf.get(key) != Some(value) {
            return Err(format!("key `{key}` not found through the index"));
        }
        if let Some(a) = value.as_array() {
            let n = a.iter().count();
            if n != a.len() {
                return Err(format!("array `{key}` yields {n} of {} elements", a.len()));
            }
        }
    }
    for t in gguf.tensors() {
        if gguf.tensor(t.name).map(|f| f.offset) != Some(t.offset) {
            return Err(format!("tensor `{}` not found through the index", t.name));
        }
    }
    ok_or_clean(Config::from_gguf(&gguf))?;
    ok_or_clean(Vocabulary::from_gguf(&gguf))?;
    if let Some(tokenizer) = ok_or_clean(Tokenizer::from_gguf(&gguf))? {
        let _ = tokenizer.encode("Hello, world! <|im_end|>", true, true);
        ok_or_clean(poot::chat_template::render_gguf_user_prompt(
            &gguf, &tokenizer, "hi",
        ))?;
    }
    // A model that loads runs one token: the family's own steps (biases, QK-norm, windows,
    // RoPE factors, post-norms) on whatever the file holds. Its work is bounded by the file:
    // every weight it reads was checked to lie inside it.
    if let Some(model) = ok_or_clean(Model::from_gguf_bytes(file))? {
        // A context of 1 in the file refuses a session of 2, cleanly.
        if let Some(mut session) = ok_or_clean(model.session(2))? {
            model
                .forward(&mut session, &[0])
                .map_err(|e| format!("a loaded model's forward failed: {e}"))?;
        }
    }
    Ok(())
}

/// Values a hostile file puts in a count, a length, a dimension or an offset.
const HUGE: [u64; 9] = [
    u64::MAX,
    1 << 63,
    1 << 62,
    1 << 60,
    1 << 40,
    1 << 32,
    (1 << 32) - 1,
    (1 << 31) + 7,
    65_537,
];

fn mutate_gguf(base: &[u8], header_len: usize, rng: &mut Rng) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        // Mostly in the header, where the parser reads.
        if b.is_empty() {
            break;
        }
        let at = rng.below(header_len.min(b.len()).max(1));
        match rng.below(6) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.next_u32() as u8,
            2 if at + 8 <= b.len() => {
                let v = HUGE[rng.below(HUGE.len())];
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            3 if at + 4 <= b.len() => {
                let v = [u32::MAX, 9, 13, 8, 1 << 31][rng.below(5)];
                b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            4 => {
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u32() as u8).collect();
                b.splice(at..at, bytes);
            }
            _ => b.truncate(at),
        }
    }
    b
}

/// A random header: plausible structure, hostile numbers.
fn random_header(rng: &mut Rng) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&[2u32, 3][rng.below(2)].to_le_bytes());
    let pick = |rng: &mut Rng, small: u64| {
        if rng.chance(0.2) {
            HUGE[rng.below(HUGE.len())]
        } else {
            rng.next_u64() % small
        }
    };
    let tensors = pick(rng, 4);
    let kvs = pick(rng, 6);
    b.extend_from_slice(&tensors.to_le_bytes());
    b.extend_from_slice(&kvs.to_le_bytes());
    for i in 0..kvs.min(8) {
        let key = if rng.chance(0.2) {
            "dup".to_string()
        } else {
            format!("k{i}")
        };
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key.as_bytes());
        let mut depth = 0;
        loop {
            let ty = rng.below(14) as u32;
            b.extend_from_slice(&ty.to_le_bytes());
            match ty {
                8 => {
                    let n = pick(rng, 6);
                    b.extend_from_slice(&n.to_le_bytes());
                    b.extend((0..n.min(6)).map(|_| b'a'));
                }
                9 if depth < 10 => {
                    depth += 1;
                    let elem = rng.below(14) as u32;
                    b.extend_from_slice(&elem.to_le_bytes());
                    let n = pick(rng, 5);
                    b.extend_from_slice(&n.to_le_bytes());
                    if elem == 9 {
                        continue;
                    }
                    let width = [1, 1, 2, 2, 4, 4, 4, 1, 8, 0, 8, 8, 8, 0][elem as usize];
                    for _ in 0..n.min(5) {
                        if elem == 8 {
                            b.extend_from_slice(&1u64.to_le_bytes());
                            b.push(b'x');
                        } else {
                            b.extend((0..width).map(|_| rng.next_u32() as u8 & 1));
                        }
                    }
                }
                _ => b.extend((0..8).map(|_| rng.next_u32() as u8 & 3)),
            }
            break;
        }
    }
    for i in 0..tensors.min(4) {
        let name = format!("t{}", if rng.chance(0.2) { 0 } else { i });
        b.extend_from_slice(&(name.len() as u64).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        let dims = if rng.chance(0.1) {
            5 + rng.below(9)
        } else {
            1 + rng.below(4)
        } as u32;
        b.extend_from_slice(&dims.to_le_bytes());
        for _ in 0..dims.min(8) {
            b.extend_from_slice(&pick(rng, 70).to_le_bytes());
        }
        b.extend_from_slice(&(rng.below(40) as u32).to_le_bytes());
        b.extend_from_slice(&pick(rng, 4).wrapping_mul(32).to_le_bytes());
    }
    b.resize(b.len().div_ceil(32) * 32 + rng.below(256), 0);
    b
}

#[test]
fn gguf_files_mutated_and_random_never_panic() {
    for (path, bytes) in corpus("gguf") {
        run_case("gguf", &path.display().to_string(), &bytes, &check_gguf);
    }
    // Mutations of a synthetic llama file and of each family's tiny model (tests/model_families.rs),
    // so every architecture's loader and forward pass meets hostile headers.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_models");
    let mut bases = vec![TinySpec::default().build()];
    for arch in ["llama3", "qwen2", "qwen3", "gemma3", "phi3"] {
        bases.push(std::fs::read(format!("{dir}/{arch}.gguf")).unwrap());
    }
    let headers: Vec<usize> = bases
        .iter()
        .map(|b| {
            check_gguf(b).unwrap();
            Gguf::parse(b).unwrap().data_offset() as usize
        })
        .collect();
    let mut rng = Rng::new(seed("gguf"));
    for case in 0..cases(2000) {
        let input = if case % 4 == 3 {
            random_header(&mut rng)
        } else {
            let which = rng.below(bases.len());
            mutate_gguf(&bases[which], headers[which], &mut rng)
        };
        run_case("gguf", &format!("case-{case}.gguf"), &input, &check_gguf);
    }
}

// ------------------------------------------------------------------------------------------
// tokenizer.json

fn check_tokenizer_json(doc: &[u8]) -> Result<(), String> {
    if let Some(v) = ok_or_clean(Vocabulary::from_tokenizer_json(doc, None))? {
        if v.is_empty() {
            return Err("an empty vocabulary".into());
        }
    }
    ok_or_clean(Vocabulary::from_tokenizer_json(doc, Some(vec![0, 1])))?;
    Ok(())
}

fn base_tokenizer_json(rng: &mut Rng) -> Value {
    if rng.chance(0.3) {
        json!({"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["b", -2.0], ["<0x41>", -3.0]]},
               "decoder": {"type": "Metaspace"}})
    } else {
        json!({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġc": 2, "ab": 3, "<|endoftext|>": 4}},
               "added_tokens": [{"id": 4, "content": "<|endoftext|>", "special": true},
                                {"id": 5, "content": "<|im_end|>", "special": true}],
               "decoder": {"type": "ByteLevel"}})
    }
}

fn random_json_value(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => json!(-1),
        1 => json!(1.5),
        2 => json!(u64::MAX),
        3 => json!(u64::from(u32::MAX) + rng.below(3) as u64),
        4 => json!(rng.below(8)),
        5 => json!("x"),
        6 => json!(null),
        7 => json!([]),
        8 => json!({}),
        _ => json!(1u64 << (32 + rng.below(31))),
    }
}

/// One random edit somewhere in a JSON tree.
fn mutate_json(v: &mut Value, rng: &mut Rng) {
    match v {
        Value::Object(map) if !map.is_empty() && rng.chance(0.8) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = &keys[rng.below(keys.len())];
            match rng.below(5) {
                0 => *map.get_mut(key).unwrap() = random_json_value(rng),
                1 => {
                    map.remove(key);
                }
                2 => {
                    map.insert(format!("new{}", rng.below(100)), random_json_value(rng));
                }
                _ => mutate_json(map.get_mut(key).unwrap(), rng),
            }
        }
        Value::Array(items) if !items.is_empty() && rng.chance(0.8) => {
            let i = rng.below(items.len());
            match rng.below(4) {
                0 => items[i] = random_json_value(rng),
                1 => {
                    let copy = items[i].clone();
                    items.push(copy);
                }
                2 => {
                    items.remove(i);
                }
                _ => mutate_json(&mut items[i], rng),
            }
        }
        other => *other = random_json_value(rng),
    }
}

#[test]
fn tokenizer_json_documents_mutated_never_panic() {
    for (path, bytes) in corpus("tokenizer_json") {
        run_case(
            "tokenizer_json",
            &path.display().to_string(),
            &bytes,
            &check_tokenizer_json,
        );
    }
    let mut rng = Rng::new(seed("tokenizer_json"));
    for case in 0..cases(2000) {
        let mut doc = base_tokenizer_json(&mut rng);
        for _ in 0..1 + rng.below(4) {
            mutate_json(&mut doc, &mut rng);
        }
        let mut text = doc.to_string().into_bytes();
        if rng.chance(0.2) && !text.is_empty() {
            // A textual edit: truncation or a flipped byte.
            let at = rng.below(text.len());
            if rng.chance(0.5) {
                text.truncate(at);
            } else {
                text[at] ^= 1 << rng.below(7);
            }
        }
        run_case(
            "tokenizer_json",
            &format!("case-{case}.json"),
            &text,
            &check_tokenizer_json,
        );
    }
}

// ------------------------------------------------------------------------------------------
// guided_choice

fn check_choice(doc: &[u8]) -> Result<(), String> {
    let Ok(value) = serde_json::from_slice::<Value>(doc) else {
        return Ok(());
    };
    let body = json!({ "guided_choice": value });
    if let Some(Some(spec)) = ok_or_clean(poot::constraint::Spec::from_request(&body))? {
        ok_or_clean(spec.compile())?;
    }
    Ok(())
}

fn random_choice_string(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "yes", "no", "", "(", ")", "*", "a|b", "\\", "é", "日本", "\u{0}", "[a-z]", ".", "{2}",
        "^$",
    ];
    let mut s = String::new();
    for _ in 0..rng.below(4) {
        s.push_str(PIECES[rng.below(PIECES.len())]);
    }
    if rng.chance(0.02) {
        s.push_str(&"z".repeat(rng.below(20_000)));
    }
    s
}

#[test]
fn guided_choice_lists_random_never_panic() {
    for (path, bytes) in corpus("guided_choice") {
        run_case(
            "guided_choice",
            &path.display().to_string(),
            &bytes,
            &check_choice,
        );
    }
    let mut rng = Rng::new(seed("guided_choice"));
    for case in 0..cases(2000) {
        let n = match rng.below(10) {
            0 => rng.below(3000),
            1 => 1024 + rng.below(3),
            _ => rng.below(12),
        };
        let mut items: Vec<Value> = (0..n)
            .map(|_| json!(random_choice_string(&mut rng)))
            .collect();
        if rng.chance(0.05) && !items.is_empty() {
            let i = rng.below(items.len());
            items[i] = random_json_value(&mut rng);
        }
        let doc = if rng.chance(0.03) {
            random_json_value(&mut rng)
        } else {
            Value::Array(items)
        };
        run_case(
            "guided_choice",
            &format!("case-{case}.json"),
            doc.to_string().as_bytes(),
            &check_choice,
        );
    }
}

// ------------------------------------------------------------------------------------------
// Chat templates

fn check_template(template: &[u8]) -> Result<(), String> {
    let template = String::from_utf8_lossy(template);
    let messages = [
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Hi <b> é", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": [1, 2]}"}}]}),
    ];
    let tools =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    ok_or_clean(render_chat(
        &template,
        &messages,
        Some(&tools),
        true,
        "<s>",
        "</s>",
    ))?;
    Ok(())
}

/// An expression from a small grammar of Jinja values, operators and filters.
fn expr(rng: &mut Rng, depth: usize) -> String {
    const ATOMS: &[&str] = &[
        "'x'",
        "\"ab\"",
        "1",
        "100000",
        "99999999",
        "messages",
        "messages[0]",
        "messages[0]['content']",
        "tools",
        "ns.x",
        "ns.l",
        "loop.index",
        "i",
        "[1, 2]",
        "{'a': 1}",
        "none",
        "true",
        "range(100000)",
        "bos_token",
        "'y' * 100000",
        "message",
        "undefined_thing",
    ];
    const FILTERS: &[&str] = &[
        "tojson",
        "tojson(indent=100000)",
        "tojson(separators=['x' * 50000, ':'])",
        "length",
        "list",
        "join",
        "join('z' * 10000)",
        "string",
        "trim",
        "upper",
        "reverse",
        "sort",
        "unique",
        "first",
        "last",
        "items",
        "batch(3)",
        "map('string')",
        "safe",
        "default('d')",
        "replace('x', 'xx' * 1000)",
        "indent(100000)",
        "center(1000000)",
        "int",
        "abs",
        "count",
        "wordcount",
        "title",
    ];
    if depth == 0 || rng.chance(0.35) {
        return ATOMS[rng.below(ATOMS.len())].to_string();
    }
    let a = expr(rng, depth - 1);
    match rng.below(6) {
        0 => format!("({a} ~ {})", expr(rng, depth - 1)),
        1 => format!("({a} + {})", expr(rng, depth - 1)),
        2 => format!(
            "({a} * {})",
            ["2", "3", "'q'", "99999", "99999999"][rng.below(5)]
        ),
        3 => format!("{a}[{}]", ["0", "-1", "1:", "::-1", "'role'"][rng.below(5)]),
        _ => format!("({a} | {})", FILTERS[rng.below(FILTERS.len())]),
    }
}

/// A statement sequence from a small grammar of Jinja constructs, list self-concatenation
/// (`ns.l + ns.l`, which doubles) and repeating a list by a large count among them.
fn statements(rng: &mut Rng, depth: usize) -> String {
    let mut out = String::new();
    for _ in 0..1 + rng.below(3) {
        let e = expr(rng, 3);
        let s = match rng.below(if depth == 0 { 4 } else { 9 }) {
            0 => format!("{{{{ {e} }}}}"),
            1 => format!("{{% set v = {e} %}}{{{{ v }}}}"),
            2 if rng.chance(0.5) => format!("{{% set ns.x = (ns.x ~ {e}) %}}"),
            2 => "{% set ns.l = ns.l + ns.l %}".to_string(),
            3 => [
                "text ",
                "{{ raise_exception('no') }}",
                "{% if %}",
                "{{ '",
                "{% endfor %}",
            ][rng.below(5)]
            .to_string(),
            4 | 5 => format!(
                "{{% for i in {} %}}{}{{% endfor %}}",
                ["range(100000)", "range(40)", "messages", "range(3)"][rng.below(4)],
                statements(rng, depth - 1)
            ),
            6 => format!(
                "{{% if {e} %}}{}{{% else %}}x{{% endif %}}",
                statements(rng, depth - 1)
            ),
            7 => format!(
                "{{% for message in messages %}}{}{{% endfor %}}",
                statements(rng, depth - 1)
            ),
            _ => format!(
                "{{% set x %}}{}{{% endset %}}{{{{ x }}}}",
                statements(rng, depth - 1)
            ),
        };
        out.push_str(&s);
    }
    out
}

#[test]
fn chat_templates_random_never_panic_and_stay_bounded() {
    for (path, bytes) in corpus("chat_template") {
        run_case(
            "chat_template",
            &path.display().to_string(),
            &bytes,
            &check_template,
        );
    }
    let mut rng = Rng::new(seed("chat_template"));
    for case in 0..cases(1000) {
        let template = format!(
            "{{% set ns = namespace(x='x', l=[1]) %}}{}",
            statements(&mut rng, 2)
        );
        run_case(
            "chat_template",
            &format!("case-{case}.jinja"),
            template.as_bytes(),
            &check_template,
        );
    }
}

// ------------------------------------------------------------------------------------------
// Pre-tokenizers

/// Random text through each byte-level BPE pre-tokenizer (the hand-written scanners of
/// src/tokenizer/pretokenize.rs) and back: the pieces must tile the text, so decoding the ids
/// gives its bytes again. Texts mix the classes the scanners branch on (letters of several
/// scripts, digit runs, apostrophes and contractions in both cases, spaces, tabs, \r and \n
/// runs, punctuation, emoji, combining marks, controls).
#[test]
fn pre_tokenizers_split_random_text_into_pieces_that_tile_it() {
    let tokens: Vec<String> = (0..=255u8)
        .map(|b| poot::vocab::gpt2::encode(&[b]))
        .collect();
    let merges = ["Ġ t", "h e", "i n", "Ġ a", "' s", "1 2"];
    let mut all = tokens.clone();
    all.extend(["Ġt", "he", "in", "Ġa", "'s", "12"].map(String::from));
    let tokenizers: Vec<(&str, Tokenizer)> = ["gpt2", "smollm", "llama-bpe", "qwen2"]
        .into_iter()
        .map(|pre| {
            let file = poot::gguf::Builder::new()
                .string("tokenizer.ggml.model", "gpt2")
                .string("tokenizer.ggml.pre", pre)
                .strings("tokenizer.ggml.tokens", &all)
                .i32s("tokenizer.ggml.token_type", &vec![1; all.len()])
                .strings("tokenizer.ggml.merges", &merges)
                .build();
            (pre, Tokenizer::from_gguf_bytes(&file).unwrap())
        })
        .collect();
    let pieces = [
        "a", "Z", "é", "ß", "Ж", "ا", "中", "😀", "\u{301}", "0", "7", "٣", "'", "'S", "'ll",
        "'Ve", "'ſ", " ", "  ", "\t", "\r", "\n", "\r\n", "\u{a0}", "\u{3000}", "!", "?", "...",
        "$", "\u{0}", "\u{7f}", "\u{200b}", "\u{fffd}",
    ];
    let mut rng = Rng::new(seed("pretokenize"));
    for case in 0..cases(2000) {
        let n = rng.below(40);
        let text: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
        let check = |_: &[u8]| -> Result<(), String> {
            for (pre, tok) in &tokenizers {
                let ids = tok.encode(&text, false, false);
                if tok.decode(&ids, false) != text.as_bytes() {
                    return Err(format!("{pre}: {text:?} does not decode to itself"));
                }
            }
            Ok(())
        };
        run_case(
            "pretokenize",
            &format!("case-{case}.txt"),
            text.as_bytes(),
            &check,
        );
    }
}
