//! The `poot` command-line tool (feature `cli`).
//!
//! ```text
//! poot check  --request FILE [--emit gbnf]
//! poot coverage --model GGUF [--no-extra-keys] PATH...
//! poot trace  --model GGUF --request FILE --output TEXT_FILE [--masks]
//! poot sample --model GGUF --request FILE --n N --seed S [--max-tokens M]
//! ```
//!
//! `check` compiles the constraint an OpenAI request body carries and prints
//! `{"ok":true,"kind":...}` (exit 0) or the OpenAI-shaped 400 body (exit 1); with
//! `--emit gbnf` it prints the GBNF grammar derived from a `guided_json` / `response_format`
//! schema instead. `coverage` measures the JSON Schema compiler on files in the JSONSchemaBench
//! format (`{"schema":..,"tests":[{"data":..,"valid":bool},..]}`, or folders of them): one JSON
//! line per file (`status` `ok` | `compile_error` | `wrong_reject` | `wrong_accept`, compile
//! time, mask p50/p99 while following the valid instances, how many masks that took and how
//! many of them passed 100 µs, the fewest tokens that close an output from the start) and a
//! summary line (with what the length-safe close adds before a run's first token: its
//! shortest-completion table's build time and bytes, beside the compile's and the
//! automaton's). `trace` follows a
//! text token by token (greedy longest match over the vocabulary) and times every mask;
//! `sample` takes seeded random walks through the masks. `--model` may also be a Hugging Face
//! `tokenizer.json`. `tokenize`, `eval`, `generate` and `serve` run the model (`poot/model.rs`,
//! `poot/serve.rs`). Clocks live here, never in the library.

use poot::constraint::{Constraint, Matcher, Spec};
use poot::json_schema::{canonical_json, JsonSchema, SchemaOptions};
use poot::mask::words_for;
use poot::vocab::{TokenId, Vocabulary};
use poot::Error;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[path = "poot/bench.rs"]
mod bench;
#[path = "poot/model.rs"]
mod model;
#[path = "poot/serve.rs"]
mod serve;

/// See the `mimalloc` entry in Cargo.toml: the compile's small allocations.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage:
  poot tokenize --model GGUF --text TEXT
  poot eval   --model GGUF (--prompt TEXT [--chat] | --prompt-ids 1,2,3) [--top K] [--greedy N]
              [--backend cpu|gpu] [--threads T]
  poot generate --model GGUF --request FILE [--backend cpu|gpu] [--threads T]
  poot bench  --model GGUF [--backend cpu|gpu] [--prompt-tokens 64] [--tokens 16]
              [--request FILE] [--threads T]
  poot serve  --model GGUF [--port 8080] [--host 127.0.0.1] [--backend cpu|gpu] [--threads T]
              [--api-key KEY] [--allowed-host NAME]... [--allowed-origin ORIGIN]...
              [--max-connections 256] [--queue 64] [--header-timeout 5] [--body-timeout 10]
              [--write-timeout 5] [--limits JSON]
  poot check  --request FILE [--emit gbnf]
  poot coverage --model GGUF|tokenizer.json [--no-extra-keys] PATH...
  poot trace  --model GGUF|tokenizer.json --request FILE --output TEXT_FILE [--masks]
  poot sample --model GGUF|tokenizer.json --request FILE --n N --seed S [--max-tokens M]
--backend gpu uses the adapter's shader-f16 and subgroups when it has them;
POOT_GPU_DISABLE=f16,subgroups (either or both) runs the kernels without them.";

/// Probability of ending a sampled output when the end-of-sequence token is allowed.
const SAMPLE_EOS_PROBABILITY: f64 = 0.3;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(Failure::Usage(msg)) => {
            eprintln!("poot: {msg}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Io(msg)) => {
            eprintln!("poot: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Request(err)) => {
            println!("{}", error_body(&err));
            ExitCode::from(1)
        }
    }
}

/// Why a command stopped: bad arguments or files (exit 2), or a 400 for the request (exit 1).
#[derive(Debug)]
enum Failure {
    Usage(String),
    Io(String),
    Request(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Request(e)
    }
}

/// Parsed `--key value` options and bare `--flag`s.
#[derive(Debug)]
struct Options {
    /// The last value of each option.
    values: HashMap<String, String>,
    /// Every `--key value` in order, for the options that may repeat.
    all: Vec<(String, String)>,
    masks: bool,
    chat: bool,
}

impl Options {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Self, Failure> {
        let mut values = HashMap::new();
        let mut all = Vec::new();
        let (mut masks, mut chat) = (false, false);
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let key = arg
                .strip_prefix("--")
                .ok_or_else(|| Failure::Usage(format!("unexpected argument `{arg}`")))?;
            if key == "masks" && allowed.contains(&"masks") {
                masks = true;
                continue;
            }
            if key == "chat" && allowed.contains(&"chat") {
                chat = true;
                continue;
            }
            if !allowed.contains(&key) {
                return Err(Failure::Usage(format!("unknown option `--{key}`")));
            }
            let value = it
                .next()
                .ok_or_else(|| Failure::Usage(format!("`--{key}` needs a value")))?;
            values.insert(key.to_owned(), value.clone());
            all.push((key.to_owned(), value.clone()));
        }
        Ok(Options {
            values,
            all,
            masks,
            chat,
        })
    }

    fn required(&self, key: &str) -> Result<&str, Failure> {
        self.values
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| Failure::Usage(format!("`--{key}` is required")))
    }

    /// Every value given for `key` (an option that may repeat), in order.
    fn repeated(&self, key: &str) -> Vec<&str> {
        self.all
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn number(&self, key: &str, default: Option<u64>) -> Result<u64, Failure> {
        match (self.values.get(key), default) {
            (Some(v), _) => v
                .parse()
                .map_err(|_| Failure::Usage(format!("`--{key}` must be a number, got `{v}`"))),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(Failure::Usage(format!("`--{key}` is required"))),
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, Failure> {
    let (cmd, rest) = args
        .split_first()
        .ok_or_else(|| Failure::Usage("no command".into()))?;
    match cmd.as_str() {
        "check" => {
            let opts = Options::parse(rest, &["request", "emit"])?;
            let body = read(opts.required("request")?)?;
            let (out, ok) = match opts.values.get("emit").map(String::as_str) {
                None => check(&body),
                Some("gbnf") => emit_gbnf(&body),
                Some(other) => {
                    return Err(Failure::Usage(format!(
                        "`--emit` takes `gbnf`, got `{other}`"
                    )))
                }
            };
            println!("{out}");
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        "trace" => {
            let opts = Options::parse(rest, &["model", "request", "output", "masks"])?;
            let vocab = load_vocab(opts.required("model")?)?;
            let spec = request_spec(&read(opts.required("request")?)?)?;
            let text = read(opts.required("output")?)?;
            let (lines, ok) = trace(&spec, vocab, &text, opts.masks)?;
            for line in lines {
                println!("{line}");
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        "sample" => {
            let opts = Options::parse(rest, &["model", "request", "n", "seed", "max-tokens"])?;
            let vocab = load_vocab(opts.required("model")?)?;
            let spec = request_spec(&read(opts.required("request")?)?)?;
            let n = opts.number("n", None)?;
            let seed = opts.number("seed", None)?;
            let max_tokens = opts.number("max-tokens", Some(64))?;
            let constraint = Arc::new(Constraint::from_spec(&spec, vocab)?);
            for line in sample(&constraint, n, seed, max_tokens as usize) {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        "coverage" => {
            let (model, paths, options) = coverage_args(rest)?;
            let vocab = load_vocab(&model)?;
            let mut files = Vec::new();
            for p in &paths {
                collect_json_files(std::path::Path::new(p), &mut files)?;
            }
            let mut report = CoverageReport::default();
            for f in &files {
                let line = coverage_file(&vocab, f, options, &mut report)?;
                println!("{line}");
            }
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        "tokenize" => model::tokenize(rest),
        "eval" => model::eval(rest),
        "generate" => model::generate(rest),
        "bench" => bench::bench(rest),
        "serve" => serve::serve(rest),
        "--version" | "-V" => {
            println!("poot {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(Failure::Usage(format!("unknown command `{other}`"))),
    }
}

fn read(path: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::Io(format!("cannot read {path}: {e}")))
}

fn load_vocab(path: &str) -> Result<Arc<Vocabulary>, Failure> {
    let bytes = read(path)?;
    let vocab = if path.ends_with(".json") {
        Vocabulary::from_tokenizer_json(&bytes, None)
    } else {
        Vocabulary::from_gguf_bytes(&bytes)
    };
    vocab
        .map(Arc::new)
        .map_err(|e| Failure::Io(format!("{path}: {e}")))
}

/// The OpenAI-shaped error body, as the server sends it.
fn error_body(err: &Error) -> String {
    poot::api::error_body(err).to_string()
}

fn parse_request(body: &[u8]) -> Result<Value, Error> {
    serde_json::from_slice(body).map_err(|e| {
        Error::invalid_input(format!("the request body is not valid JSON: {e}")).with_source(e)
    })
}

/// `poot check`: the output line and whether the request is valid.
fn check(body: &[u8]) -> (String, bool) {
    let result = parse_request(body)
        .and_then(|v| Spec::from_request(&v))
        .and_then(|spec| match spec {
            None => Ok("none"),
            Some(spec) => spec.compile().map(|_| spec.kind()),
        });
    match result {
        Ok(kind) => (format!(r#"{{"ok":true,"kind":{}}}"#, json!(kind)), true),
        Err(err) => (error_body(&err), false),
    }
}

/// `poot check --emit gbnf`: the grammar of a JSON schema constraint, or the 400 body.
fn emit_gbnf(body: &[u8]) -> (String, bool) {
    let result = parse_request(body)
        .and_then(|v| Spec::from_request(&v))
        .and_then(|spec| match spec {
            Some(Spec::Json {
                schema,
                field,
                options,
            }) => JsonSchema::compile_with_options(
                &schema,
                field,
                &poot::limits::Limits::DEFAULT,
                options,
            ),
            other => Err(Error::invalid_input(format!(
                "--emit gbnf needs a guided_json or response_format json_schema constraint, got {}",
                other.map_or("none", |s| s.kind())
            ))),
        });
    match result {
        Ok(compiled) => (compiled.gbnf().trim_end().to_owned(), true),
        Err(err) => (error_body(&err), false),
    }
}

/// `--model M`, `--no-extra-keys` (compile as `guided_json_extra_keys: false` asks: listed
/// keys only) and one or more paths.
fn coverage_args(args: &[String]) -> Result<(String, Vec<String>, SchemaOptions), Failure> {
    let mut model = None;
    let mut options = SchemaOptions::DEFAULT;
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--model" => {
                model = Some(
                    it.next()
                        .ok_or_else(|| Failure::Usage("`--model` needs a value".into()))?
                        .clone(),
                )
            }
            "--no-extra-keys" => options.extra_keys = false,
            a if a.starts_with("--") => {
                return Err(Failure::Usage(format!("unknown option `{a}`")))
            }
            p => paths.push(p.to_owned()),
        }
    }
    let model = model.ok_or_else(|| Failure::Usage("`--model` is required".into()))?;
    if paths.is_empty() {
        return Err(Failure::Usage(
            "coverage needs at least one file or folder".into(),
        ));
    }
    Ok((model, paths, options))
}

/// The `.json` files at `path` (a file, or a folder searched recursively), sorted.
fn collect_json_files(
    path: &std::path::Path,
    out: &mut Vec<std::path::PathBuf>,
) -> Result<(), Failure> {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| Failure::Io(format!("cannot read {}: {e}", path.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            if e.is_dir() || e.extension().is_some_and(|x| x == "json") {
                collect_json_files(&e, out)?;
            }
        }
    } else {
        out.push(path.to_owned());
    }
    Ok(())
}

/// Counts and timings over all files of a `coverage` run.
#[derive(Debug, Default)]
struct CoverageReport {
    counts: std::collections::BTreeMap<&'static str, usize>,
    compile_ms: Vec<f64>,
    mask_us: Vec<f64>,
    /// Per compiled schema: the length-safe close's bookkeeping at the start of a run (its
    /// shortest-completion table built, the start's close split into tokens), in ms; the
    /// table's bytes; and the automaton's bytes beside it.
    close_ms: Vec<f64>,
    close_bytes: Vec<f64>,
    automaton_bytes: Vec<f64>,
}

impl CoverageReport {
    fn summary(&self) -> Value {
        let mut compile = self.compile_ms.clone();
        compile.sort_by(f64::total_cmp);
        let mut masks = self.mask_us.clone();
        masks.sort_by(f64::total_cmp);
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        let count = |k: &str| self.counts.get(k).copied().unwrap_or(0);
        let sorted = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v
        };
        let with_close: Vec<f64> = self
            .compile_ms
            .iter()
            .zip(&self.close_ms)
            .map(|(a, b)| a + b)
            .collect();
        let (close, with_close) = (sorted(&self.close_ms), sorted(&with_close));
        let (close_kib, automaton_kib) = (sorted(&self.close_bytes), sorted(&self.automaton_bytes));
        let kib = |v: &[f64], p: f64| round(percentile(v, p) / 1024.0);
        json!({
            "summary": true,
            "files": self.counts.values().sum::<usize>(),
            "ok": count("ok"),
            "compile_error": count("compile_error"),
            "wrong_reject": count("wrong_reject"),
            "wrong_accept": count("wrong_accept"),
            "compile_ms_p50": round(percentile(&compile, 50.0)),
            "compile_ms_p99": round(percentile(&compile, 99.0)),
            "mask_steps": masks.len(),
            "p50_us": round(percentile(&masks, 50.0)),
            "p99_us": round(percentile(&masks, 99.0)),
            "close_ms_p50": round(percentile(&close, 50.0)),
            "close_ms_p99": round(percentile(&close, 99.0)),
            "compile_with_close_ms_p50": round(percentile(&with_close, 50.0)),
            "compile_with_close_ms_p99": round(percentile(&with_close, 99.0)),
            "close_kib_p50": kib(&close_kib, 50.0),
            "close_kib_p99": kib(&close_kib, 99.0),
            "close_kib_max": kib(&close_kib, 100.0),
            "automaton_kib_p50": kib(&automaton_kib, 50.0),
            "automaton_kib_p99": kib(&automaton_kib, 99.0),
            "automaton_kib_max": kib(&automaton_kib, 100.0),
        })
    }
}

/// One `coverage` line: compile the file's schema for `vocab`, check its instances in
/// canonical form, and time the masks while following each valid instance.
fn coverage_file(
    vocab: &Arc<Vocabulary>,
    path: &std::path::Path,
    options: SchemaOptions,
    report: &mut CoverageReport,
) -> Result<Value, Failure> {
    let file: Value = serde_json::from_slice(&read(&path.display().to_string())?)
        .map_err(|e| Failure::Io(format!("{}: not JSON: {e}", path.display())))?;
    let shown = path.display().to_string();
    let spec = Spec::Json {
        schema: file.get("schema").cloned().unwrap_or(Value::Null),
        field: "guided_json",
        options,
    };
    let t0 = Instant::now();
    let compiled = Constraint::from_spec(&spec, vocab.clone());
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let constraint = match compiled {
        Ok(c) => Arc::new(c),
        Err(e) => {
            *report.counts.entry("compile_error").or_default() += 1;
            return Ok(json!({
                "file": shown, "status": "compile_error", "code": e.code(),
                "message": e.message(), "compile_ms": round(compile_ms),
            }));
        }
    };
    report.compile_ms.push(compile_ms);
    // What a run adds before its first token: the close's table and the start's close.
    let t1 = Instant::now();
    let start = Matcher::new(constraint.clone());
    let close = start
        .closing_len()
        .and_then(|len| start.closing_bytes(len as usize))
        .and_then(|bytes| vocab.fewest_tokens(&bytes));
    report.close_ms.push(t1.elapsed().as_secs_f64() * 1e3);
    report.close_bytes.push(constraint.closing_memory() as f64);
    report
        .automaton_bytes
        .push(constraint.automaton_memory() as f64);
    let close_tokens = close.map(|p| p.len());
    let tests = file
        .get("tests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (mut rejects, mut accepts) = (Vec::new(), Vec::new());
    let mut times = Vec::new();
    let mut walk_error = None;
    // Draft 4 tells `1.0` (a number) from `1` (an integer); the canonical form cannot.
    let draft4 = file
        .pointer("/schema/$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("draft-04"));
    for (i, t) in tests.iter().enumerate() {
        if draft4 && has_integral_float(&t["data"]) {
            continue;
        }
        let text = canonical_json(&t["data"]);
        let valid = t["valid"].as_bool().unwrap_or(false);
        let accepted = constraint.matches(text.as_bytes());
        match (valid, accepted) {
            (true, false) => rejects.push(i),
            (false, true) => accepts.push(i),
            (true, true) => {
                if let Ok(tokens) = vocab.tokenize_greedy(text.as_bytes()) {
                    // Accepted as a whole but not followable token by token (a mask over
                    // the work limit): a valid instance the engine cannot produce.
                    let (lines, ts, followed) = walk(&constraint, &tokens, false);
                    times.extend(ts);
                    if !followed {
                        rejects.push(i);
                        let last = lines.last().cloned().unwrap_or_default();
                        walk_error.get_or_insert((last["code"].clone(), last["error"].clone()));
                    }
                }
            }
            _ => {}
        }
    }
    let status = if !accepts.is_empty() {
        "wrong_accept"
    } else if !rejects.is_empty() {
        "wrong_reject"
    } else {
        "ok"
    };
    *report.counts.entry(status).or_default() += 1;
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    report.mask_us.extend(times);
    let mut line = json!({
        "file": shown, "status": status, "compile_ms": round(compile_ms),
        "states": constraint.state_count(),
        "automaton": if constraint.dfa().is_some() { "dfa" } else { "grammar" },
        "p50_us": round(percentile(&sorted, 50.0)), "p99_us": round(percentile(&sorted, 99.0)),
        "mask_steps": sorted.len(),
        "steps_over_100us": sorted.iter().filter(|&&t| t > 100.0).count(),
        "close_tokens": close_tokens,
    });
    if !accepts.is_empty() || !rejects.is_empty() {
        line["tests"] = json!(if accepts.is_empty() { rejects } else { accepts });
    }
    if let (Some((code, message)), "wrong_reject") = (walk_error, status) {
        line["code"] = code;
        line["message"] = message;
    }
    Ok(line)
}

/// Whether a value holds a float with a zero fraction (`1.0`), which canonical form writes `1`.
fn has_integral_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_f64().is_some_and(|f| f.fract() == 0.0) && n.is_f64(),
        Value::Array(a) => a.iter().any(has_integral_float),
        Value::Object(m) => m.values().any(has_integral_float),
        _ => false,
    }
}

fn request_spec(body: &[u8]) -> Result<Spec, Failure> {
    let spec = Spec::from_request(&parse_request(body)?)?;
    spec.ok_or_else(|| {
        Failure::Usage(
            "the request carries no constraint (guided_choice, guided_regex, guided_grammar, \
             guided_json or response_format)"
                .into(),
        )
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(times: &[f64]) -> Value {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({
        "p50_us": round(percentile(&sorted, 50.0)),
        "p99_us": round(percentile(&sorted, 99.0)),
        "max_us": round(sorted.last().copied().unwrap_or(0.0)),
    })
}

fn allowed_ids(mask: &[u32]) -> Vec<TokenId> {
    let mut ids = Vec::new();
    for (w, &word) in mask.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            ids.push(w as u32 * 32 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
    ids
}

fn is_set(mask: &[u32], t: TokenId) -> bool {
    mask[t as usize / 32] >> (t % 32) & 1 == 1
}

/// One walk of `tokens` through a fresh matcher: per-step lines, mask times, and whether
/// every token was allowed and the end is accepting.
fn walk(
    constraint: &Arc<Constraint>,
    tokens: &[TokenId],
    masks: bool,
) -> (Vec<Value>, Vec<f64>, bool) {
    let vocab = constraint.vocab();
    let mut matcher = Matcher::new(constraint.clone());
    let mut mask = vec![0u32; words_for(vocab.len())];
    let (mut lines, mut times) = (Vec::new(), Vec::new());
    // A mask can fail only by a work limit (a grammar too ambiguous), which ends the walk.
    let mut timed_fill = |matcher: &Matcher, mask: &mut [u32]| {
        let t0 = Instant::now();
        let filled = matcher.fill_mask(mask);
        let us = t0.elapsed().as_secs_f64() * 1e6;
        times.push(us);
        filled.map(|()| (us * 1000.0).round() / 1000.0)
    };
    for (step, &token) in tokens.iter().enumerate() {
        let mask_us = match timed_fill(&matcher, &mut mask) {
            Ok(us) => us,
            Err(e) => {
                lines.push(json!({"step": step, "error": e.message(), "code": e.code()}));
                return (lines, times, false);
            }
        };
        let allowed = is_set(&mask, token);
        let mut line = json!({
            "step": step,
            "token": token,
            "text": String::from_utf8_lossy(vocab.bytes(token)),
            "allowed": mask.iter().map(|w| w.count_ones()).sum::<u32>(),
            "mask_us": mask_us,
        });
        if masks {
            line["allowed_ids"] = json!(allowed_ids(&mask));
        }
        if !allowed {
            line["error"] = json!(format!("token {token} is not allowed here"));
            lines.push(line);
            return (lines, times, false);
        }
        lines.push(line);
        if let Err(e) = matcher.advance(token) {
            lines.push(json!({"step": step, "error": e.message(), "code": e.code()}));
            return (lines, times, false);
        }
    }
    // The final step, where an end-of-sequence token is allowed exactly when accepting.
    let mask_us = match timed_fill(&matcher, &mut mask) {
        Ok(us) => us,
        Err(e) => {
            lines.push(json!({"step": tokens.len(), "error": e.message(), "code": e.code()}));
            return (lines, times, false);
        }
    };
    let accepting = matcher.is_accepting();
    let mut line = json!({
        "step": tokens.len(),
        "token": vocab.eos().first().filter(|_| accepting),
        "allowed": mask.iter().map(|w| w.count_ones()).sum::<u32>(),
        "mask_us": mask_us,
        "end": true,
        "accepting": accepting,
    });
    if masks {
        line["allowed_ids"] = json!(allowed_ids(&mask));
    }
    lines.push(line);
    (lines, times, accepting)
}

/// `poot trace`: the per-step lines of the cold walk (`mask_us`; `warm_us` is the same step of
/// the second walk), then the summary.
fn trace(
    spec: &Spec,
    vocab: Arc<Vocabulary>,
    text: &[u8],
    masks: bool,
) -> Result<(Vec<Value>, bool), Failure> {
    let tokens = vocab
        .tokenize_greedy(text)
        .map_err(|e| Failure::Io(e.to_string()))?;
    // Compiled three times: `compile_first_ms` is the first (in a fresh process: cold caches,
    // page faults), `compile_ms` the median, as a peer benchmarked in one long-lived process
    // sees it. The last constraint, never walked, is the one traced.
    let mut compiles = Vec::with_capacity(3);
    let mut constraint = None;
    for _ in 0..3 {
        let t0 = Instant::now();
        constraint = Some(Arc::new(Constraint::from_spec(spec, vocab.clone())?));
        compiles.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let constraint = constraint.expect("compiled three times");
    let compile_first_ms = compiles[0];
    compiles.sort_by(f64::total_cmp);
    let compile_ms = compiles[1];
    let (mut lines, cold, ok) = walk(&constraint, &tokens, masks);
    let (_, warm, _) = walk(&constraint, &tokens, false);
    // Each step line also gets the warm walk's time for the same step.
    for (line, us) in lines.iter_mut().zip(&warm) {
        line["warm_us"] = json!((us * 1000.0).round() / 1000.0);
    }
    lines.push(json!({
        "summary": true,
        "kind": spec.kind(),
        "tokens": tokens.len(),
        "states": constraint.state_count(),
        "compile_ms": (compile_ms * 1000.0).round() / 1000.0,
        "compile_first_ms": (compile_first_ms * 1000.0).round() / 1000.0,
        "cold": stats(&cold),
        "warm": stats(&warm),
        "accepted": ok,
    }));
    Ok((lines, ok))
}

/// SplitMix64, so a seed fixes every sampled output.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        poot::sampling::splitmix64(&mut self.0)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `poot sample`: `n` random walks, uniform over the allowed text tokens, ending with
/// probability [`SAMPLE_EOS_PROBABILITY`] whenever the end-of-sequence token is allowed.
fn sample(constraint: &Arc<Constraint>, n: u64, seed: u64, max_tokens: usize) -> Vec<Value> {
    let vocab = constraint.vocab();
    let mut rng = Rng(seed);
    let mut mask = vec![0u32; words_for(vocab.len())];
    let mut out = Vec::new();
    for _ in 0..n {
        let mut matcher = Matcher::new(constraint.clone());
        let mut text = Vec::new();
        let mut complete = false;
        let mut error = None;
        for _ in 0..max_tokens {
            if let Err(e) = matcher.fill_mask(&mut mask) {
                error = Some(e);
                break;
            }
            let text_tokens: Vec<TokenId> = allowed_ids(&mask)
                .into_iter()
                .filter(|&t| !vocab.is_eos(t))
                .collect();
            if matcher.is_accepting()
                && (text_tokens.is_empty() || rng.unit() < SAMPLE_EOS_PROBABILITY)
            {
                complete = true;
                break;
            }
            if text_tokens.is_empty() {
                break;
            }
            let t = text_tokens[rng.below(text_tokens.len())];
            if let Err(e) = matcher.advance(t) {
                error = Some(e);
                break;
            }
            text.extend_from_slice(vocab.bytes(t));
        }
        let mut line = json!({
            "text": String::from_utf8_lossy(&text),
            "complete": complete,
            "tokens": matcher.token_count(),
        });
        if let Some(e) = error {
            line["error"] = json!(e.message());
            line["code"] = json!(e.code());
        }
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_str(body: &str) -> (String, bool) {
        check(body.as_bytes())
    }

    #[test]
    fn check_reports_kind_or_an_openai_error() {
        assert_eq!(
            check_str(r#"{"guided_regex":"[0-9]+"}"#),
            (r#"{"ok":true,"kind":"regex"}"#.into(), true)
        );
        assert_eq!(
            check_str(r#"{"guided_choice":["a"],"guided_regex":"("}"#).0,
            r#"{"ok":true,"kind":"choice"}"#
        );
        assert_eq!(
            check_str(r#"{"messages":[]}"#).0,
            r#"{"ok":true,"kind":"none"}"#
        );
        let (out, ok) = check_str(r#"{"guided_regex":"(a|b)*a(a|b){17}"}"#);
        assert!(!ok);
        assert_eq!(
            out,
            r#"{"error":{"code":"limit_exceeded","message":"guided_regex `(a|b)*a(a|b){17}` needs more than the 262144-byte automaton limit","param":"guided_regex","type":"invalid_request_error"}}"#
        );
        let v: Value = serde_json::from_str(&check_str(r#"{"guided_choice":[]}"#).0).unwrap();
        assert_eq!(v["error"]["param"], "guided_choice");
        let v: Value = serde_json::from_str(&check_str("{oops").0).unwrap();
        assert_eq!(v["error"]["param"], Value::Null);
        assert_eq!(v["error"]["code"], "invalid_input");
    }

    fn vocab() -> Arc<Vocabulary> {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for t in ["20", "2024", "-0", "-1", "-", "ab", "<eos>"] {
            tokens.push(t.as_bytes().to_vec());
        }
        let eos = tokens.len() as u32 - 1;
        Arc::new(Vocabulary::new(tokens, vec![eos]).unwrap())
    }

    #[test]
    fn trace_follows_text_and_summarizes() {
        let spec = Spec::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}".into());
        let (lines, ok) = trace(&spec, vocab(), b"2024-01-15", true).unwrap();
        assert!(ok);
        let tokens: Vec<u64> = lines.iter().filter_map(|l| l["token"].as_u64()).collect();
        assert_eq!(tokens, vec![257, 258, 49, 259, 53, 262]); // 2024 -0 1 -1 5 <eos>
        let summary = lines.last().unwrap();
        assert_eq!(summary["accepted"], true);
        assert_eq!(summary["tokens"], 5);
        assert!(summary["warm"]["p50_us"].as_f64().is_some());
        assert_eq!(
            lines[0]["allowed_ids"].as_array().unwrap().len(),
            lines[0]["allowed"].as_u64().unwrap() as usize
        );

        let (lines, ok) = trace(&spec, vocab(), b"2024-a", false).unwrap();
        assert!(!ok);
        assert_eq!(
            lines[lines.len() - 2]["error"],
            "token 97 is not allowed here"
        );
        let (_, ok) = trace(&spec, vocab(), b"2024-01", false).unwrap();
        assert!(!ok, "a prefix is not accepted");
    }

    #[test]
    fn sample_is_deterministic_and_matches() {
        let c =
            Arc::new(Constraint::from_spec(&Spec::Regex("(ab|[0-9])+-".into()), vocab()).unwrap());
        let a = sample(&c, 20, 7, 32);
        assert_eq!(a, sample(&c, 20, 7, 32));
        assert_ne!(a, sample(&c, 20, 8, 32));
        let re = regex::Regex::new("^(ab|[0-9])+-$").unwrap();
        let mut complete = 0;
        for line in &a {
            if line["complete"] == true {
                complete += 1;
                assert!(re.is_match(line["text"].as_str().unwrap()), "{line}");
            }
        }
        assert!(complete > 0);
    }

    #[test]
    fn grammar_and_json_object_check_trace_and_sample() {
        assert_eq!(
            check_str(r#"{"guided_grammar":"root ::= \"(\" root \")\" | \"x\""}"#),
            (r#"{"ok":true,"kind":"grammar"}"#.into(), true)
        );
        assert_eq!(
            check_str(r#"{"response_format":{"type":"json_object"}}"#).0,
            r#"{"ok":true,"kind":"json_object"}"#
        );
        let (out, ok) = check_str(r#"{"guided_grammar":"root ::= x"}"#);
        assert!(!ok);
        assert_eq!(
            out,
            r#"{"error":{"code":"invalid_input","message":"guided_grammar line 1, column 10: undefined rule `x` (in `root ::= x`)","param":"guided_grammar","type":"invalid_request_error"}}"#
        );
        let spec = Spec::Grammar("root ::= \"(\" root \")\" | [0-9]+".into());
        let (lines, ok) = trace(&spec, vocab(), b"((2024))", false).unwrap();
        assert!(ok, "{lines:?}");
        assert_eq!(lines.last().unwrap()["kind"], "grammar");
        let (_, ok) = trace(&spec, vocab(), b"((2024)", false).unwrap();
        assert!(!ok);
        let c = Arc::new(Constraint::from_spec(&spec, vocab()).unwrap());
        let g = c.grammar().unwrap().clone();
        let mut complete = 0;
        for line in sample(&c, 30, 3, 24) {
            if line["complete"] == true {
                complete += 1;
                assert!(
                    g.matches(line["text"].as_str().unwrap().as_bytes()),
                    "{line}"
                );
            }
        }
        assert!(complete > 0);
        let (lines, ok) = trace(&Spec::JsonObject, vocab(), b"[1, 20, 2024]", false).unwrap();
        assert!(ok, "{lines:?}");
        assert_eq!(lines.last().unwrap()["kind"], "json_object");
    }

    #[test]
    fn a_grammar_over_the_work_limit_ends_the_walk_with_its_error() {
        // Parses double with every `a`; the step that needs too much work is reported.
        let spec = Spec::Grammar(
            "root ::= t\nt ::= u \"b\" | v \"c\" | \"x\"\nu ::= \"a\" t\nv ::= \"a\" t".into(),
        );
        let (lines, ok) = trace(&spec, vocab(), "a".repeat(40).as_bytes(), false).unwrap();
        assert!(!ok);
        let last = lines
            .iter()
            .rev()
            .find(|l| l.get("code").is_some())
            .unwrap();
        assert_eq!(last["code"], "limit_exceeded");
        assert!(
            last["error"].as_str().unwrap().contains("work limit"),
            "{last}"
        );
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
    }
}
