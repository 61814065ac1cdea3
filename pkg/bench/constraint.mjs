// The constraint benchmark on the wasm build, in Node: the cases of scripts/bench_constraint.sh
// (tests/data/bench_cases.tsv), followed token by token through the JavaScript bindings.
//
// For each case: tokenize the text greedily (Vocabulary.tokenizeGreedy, the function
// `poot trace` uses), compile the request (Constraint.fromRequest, timed: compile_ms), walk
// the tokens on a fresh matcher timing every fillMask (cold: masks computed), then walk again
// on a second matcher of the same constraint (warm: masks cached). Repeated --repeat times
// (a fresh constraint each time); each step's time is the median over the repeats, so a
// walk preempted by another process on a busy machine does not set the p99. The warm walk also
// times the zero-copy form (fillOwnMask + a view on wasm memory): warm_view.
//
// usage: node pkg/bench/constraint.mjs MODEL.gguf CASES.tsv [--wasm-dir DIR] [--repeat N]
// DIR holds poot.js and poot_bg.wasm from `wasm-bindgen --target web` (default pkg/wasm).
// Prints one JSON line per case, then a summary line; times in microseconds.
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
const wasmDir = resolve(option("--wasm-dir", new URL("../wasm", import.meta.url).pathname));
const repeat = Number(option("--repeat", "5"));
const [modelPath, casesPath] = args;
if (!modelPath || !casesPath || !(repeat >= 1)) {
  console.error("usage: node pkg/bench/constraint.mjs MODEL.gguf CASES.tsv [--wasm-dir DIR] [--repeat N]");
  process.exit(2);
}

const glue = await import(pathToFileURL(`${wasmDir}/poot.js`).href);
const { memory } = await glue.default({ module_or_path: readFileSync(`${wasmDir}/poot_bg.wasm`) });
const { Vocabulary, Constraint } = glue;

const vocab = Vocabulary.fromGguf(readFileSync(modelPath));
const eos = vocab.eosIds;
const mask = new Uint32Array(vocab.maskWords);
const allowed = (t) => ((mask[t >>> 5] >>> (t & 31)) & 1) === 1;

/** Microseconds since `t0` (a process.hrtime.bigint() reading). */
const since = (t0) => Number(process.hrtime.bigint() - t0) / 1e3;

/** Nearest-rank percentile, as `poot trace` computes it. */
function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1];
}
const round = (x) => Math.round(x * 1000) / 1000;
function stats(times) {
  const sorted = [...times].sort((a, b) => a - b);
  return { p50_us: round(percentile(sorted, 50)), p99_us: round(percentile(sorted, 99)), max_us: round(sorted.at(-1) ?? 0) };
}
const median = (xs) => percentile([...xs].sort((a, b) => a - b), 50);
/** Element-wise median of equally long runs. */
const stepMedians = (runs) => runs[0].map((_, i) => median(runs.map((r) => r[i])));

/**
 * One walk of `tokens` on a fresh matcher: the time of every fillMask, and whether it accepted.
 * With `view`, each step also times the zero-copy form (fillOwnMask, read through a view on
 * wasm memory), after fillMask, so on a warm walk only.
 */
function walk(constraint, tokens, view = false) {
  const matcher = constraint.matcher();
  const times = [];
  const viewTimes = [];
  let ownMask = new Uint32Array(memory.buffer, matcher.maskPointer, vocab.maskWords);
  let ok = true;
  for (const t of [...tokens, null]) {
    let t0 = process.hrtime.bigint();
    matcher.fillMask(mask);
    times.push(since(t0));
    if (view) {
      t0 = process.hrtime.bigint();
      matcher.fillOwnMask();
      if (ownMask.buffer !== memory.buffer) {
        ownMask = new Uint32Array(memory.buffer, matcher.maskPointer, vocab.maskWords);
      }
      viewTimes.push(since(t0));
      ok = ok && ownMask.every((w, i) => w === mask[i]);
    }
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
  return { times, viewTimes, ok };
}

// Warm up the JIT on the glue (fillMask, fillOwnMask, accept) so the first case's first steps
// do not pay for it; the constraint is a throwaway, its masks are not reused by the cases.
{
  const warmup = Constraint.fromRequest(vocab, JSON.stringify({ guided_regex: "[0-9]+" }));
  const digits = vocab.tokenizeGreedy("1234567890");
  for (let i = 0; i < 200; i++) walk(warmup, digits, true);
  warmup.free();
}

const all = { cold: [], warm: [], warmView: [] };
for (const line of readFileSync(casesPath, "utf8").split("\n")) {
  if (line.trim() === "" || line.startsWith("#")) continue;
  const [name, regex, text] = line.split("\t");
  const tokens = vocab.tokenizeGreedy(text.replaceAll("\\n", "\n"));
  const request = JSON.stringify({ guided_regex: regex });
  const compiles = [];
  const colds = [];
  const warms = [];
  const views = [];
  let ok = true;
  let refused = null;
  for (let r = 0; r < repeat; r++) {
    const t0 = process.hrtime.bigint();
    let constraint;
    try {
      constraint = Constraint.fromRequest(vocab, request);
    } catch (e) {
      compiles.push(since(t0) / 1e3);
      refused = e.code;
      continue;
    }
    compiles.push(since(t0) / 1e3);
    const cold = walk(constraint, tokens);
    const warm = walk(constraint, tokens, true);
    constraint.free();
    colds.push(cold.times);
    warms.push(warm.times);
    views.push(warm.viewTimes);
    ok = ok && cold.ok && warm.ok && cold.times.length === warm.times.length;
  }
  const out = { engine: "wasm", name, tokens: tokens.length, compile_ms: round(median(compiles)) };
  if (refused) {
    console.log(JSON.stringify({ ...out, refused }));
    continue;
  }
  const cold = stepMedians(colds);
  const warm = stepMedians(warms);
  const warmView = stepMedians(views);
  all.cold.push(...cold);
  all.warm.push(...warm);
  all.warmView.push(...warmView);
  console.log(
    JSON.stringify({
      ...out,
      cold: stats(cold),
      warm: stats(warm),
      warm_view: stats(warmView),
      accepted: ok,
      cold_us: cold.map(round),
      warm_us: warm.map(round),
      warm_view_us: warmView.map(round),
    }),
  );
}
const summary = { cold: stats(all.cold), warm: stats(all.warm), warm_view: stats(all.warmView) };
console.log(JSON.stringify({ engine: "wasm", summary: true, masks: all.warm.length, ...summary }));
