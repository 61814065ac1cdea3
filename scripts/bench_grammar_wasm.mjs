// The grammar benchmark on the wasm build, in Node: the cases of scripts/bench_grammar.sh
// (tests/data/grammars/bench_cases.tsv), followed token by token through the JavaScript
// bindings, the way pkg/bench/constraint.mjs times regexes.
//
// For each case: tokenize the text greedily (Vocabulary.tokenizeGreedy), compile the request
// (`guided_grammar` with the grammar file, or `response_format` json_object; timed:
// compile_ms), walk the tokens on a fresh matcher timing every fillMask (cold), then on a
// second matcher of the same constraint (warm). Repeated --repeat times; each step's time is
// the median over the repeats.
//
// usage: node scripts/bench_grammar_wasm.mjs MODEL.gguf CASES.tsv GRAMMAR_DIR --wasm-dir DIR [--repeat N]
// DIR holds poot.js and poot_bg.wasm from `wasm-bindgen --target web`.
// Prints one JSON line per case; times in microseconds.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  if (i < 0) return fallback;
  const [, value] = args.splice(i, 2);
  return value;
};
const wasmDir = resolve(option("--wasm-dir", "pkg/wasm"));
const repeat = Number(option("--repeat", "5"));
const [modelPath, casesPath, grammarDir] = args;
if (!modelPath || !casesPath || !grammarDir || !(repeat >= 1)) {
  console.error("usage: node scripts/bench_grammar_wasm.mjs MODEL.gguf CASES.tsv GRAMMAR_DIR --wasm-dir DIR [--repeat N]");
  process.exit(2);
}

const glue = await import(pathToFileURL(`${wasmDir}/poot.js`).href);
await glue.default({ module_or_path: readFileSync(`${wasmDir}/poot_bg.wasm`) });
const { Vocabulary, Constraint } = glue;

const vocab = Vocabulary.fromGguf(readFileSync(modelPath));
const eos = vocab.eosIds;
const mask = new Uint32Array(vocab.maskWords);
const allowed = (t) => ((mask[t >>> 5] >>> (t & 31)) & 1) === 1;
const since = (t0) => Number(process.hrtime.bigint() - t0) / 1e3;
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(Math.ceil(s.length / 2), 1) - 1];
};
const round = (x) => Math.round(x * 1000) / 1000;

function walk(constraint, tokens) {
  const matcher = constraint.matcher();
  const times = [];
  let ok = true;
  for (const t of [...tokens, null]) {
    const t0 = process.hrtime.bigint();
    matcher.fillMask(mask);
    times.push(since(t0));
    if (t === null) {
      ok = ok && eos.some(allowed);
      break;
    }
    if (!allowed(t)) {
      ok = false;
      break;
    }
    matcher.accept(t);
  }
  matcher.free();
  return { times, ok };
}

// Warm up the JIT on the glue with a throwaway constraint.
{
  const warmup = Constraint.fromRequest(vocab, JSON.stringify({ guided_regex: "[0-9]+" }));
  const digits = vocab.tokenizeGreedy("1234567890");
  for (let i = 0; i < 200; i++) walk(warmup, digits);
  warmup.free();
}

for (const line of readFileSync(casesPath, "utf8").split("\n")) {
  if (line.trim() === "" || line.startsWith("#")) continue;
  const [name, kind, text] = line.split("\t");
  const tokens = vocab.tokenizeGreedy(text.replaceAll("\\n", "\n"));
  const request = JSON.stringify(
    kind === "json_object"
      ? { response_format: { type: "json_object" } }
      : { guided_grammar: readFileSync(`${grammarDir}/${kind}`, "utf8") },
  );
  const compiles = [];
  const colds = [];
  const warms = [];
  let ok = true;
  for (let r = 0; r < repeat; r++) {
    const t0 = process.hrtime.bigint();
    const constraint = Constraint.fromRequest(vocab, request);
    compiles.push(since(t0) / 1e3);
    const cold = walk(constraint, tokens);
    const warm = walk(constraint, tokens);
    constraint.free();
    colds.push(cold.times);
    warms.push(warm.times);
    ok = ok && cold.ok && warm.ok && cold.times.length === warm.times.length;
  }
  const steps = (runs) => runs[0].map((_, i) => round(median(runs.map((r) => r[i]))));
  console.log(JSON.stringify({
    engine: "wasm", name, tokens: tokens.length, compile_ms: round(median(compiles)),
    accepted: ok, cold_us: steps(colds), warm_us: steps(warms),
  }));
}
