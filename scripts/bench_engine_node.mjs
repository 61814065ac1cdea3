#!/usr/bin/env node
// Generation speed of the npm package's CPU engine (wasm, one thread, in Node) next to the
// native `poot generate --threads 1`, on the same greedy completions request, and the wasm
// module's size raw and gzipped.
//
//   node scripts/bench_engine_node.mjs [--model GGUF] [--poot NATIVE_POOT] [--tokens N] [--wasm FILE]
//
// `--wasm` runs another build of the same source (say, one with +simd128) under the package's
// glue.
//
// Decode speed is (t(N) - t(1)) / (N - 1) for both, so loading and prefill cancel out; the
// package's time to the first token (prefill of the prompt) is printed too. Run after
// `make wasm ts`; `--poot` defaults to target/release/poot and is skipped if missing.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

const root = new URL("../", import.meta.url);
const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith("--") ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const model = args.model ?? process.env.POOT_REFERENCE_GGUF;
const native = args.poot ?? new URL("target/release/poot", root).pathname;
const N = Number(args.tokens ?? 64);
if (!model) throw new Error("give --model or set POOT_REFERENCE_GGUF");

const wasmBytes = readFileSync(args.wasm ?? new URL("pkg/wasm/poot_bg.wasm", root));
const mib = (n) => `${(n / 2 ** 20).toFixed(2)} MiB`;
console.log(`wasm: ${wasmBytes.length} bytes (${mib(wasmBytes.length)}) raw, ${gzipSync(wasmBytes, { level: 9 }).length} bytes (${mib(gzipSync(wasmBytes, { level: 9 }).length)}) gzip -9`);

const request = (max_tokens) => ({ prompt: "Once upon a time, in a small village by the sea,", max_tokens, temperature: 0 });

const { createEngine } = await import(new URL("pkg/dist/index.js", root));
const engine = await createEngine({ model: readFileSync(model), wasm: wasmBytes, backend: "cpu" });
const timed = async (body) => {
  const t = performance.now();
  const r = await engine.completions.create(body);
  return { ms: performance.now() - t, tokens: r.usage.completion_tokens, prompt: r.usage.prompt_tokens };
};
await timed(request(4)); // warm up (allocation of the KV cache, first-call costs)
const best = async (body) => {
  let min;
  for (let i = 0; i < 3; i++) {
    const r = await timed(body);
    if (!min || r.ms < min.ms) min = r;
  }
  return min;
};
const one = await best(request(1));
const many = await best(request(N));
const pkgRate = (many.tokens - one.tokens) / ((many.ms - one.ms) / 1000);
console.log(
  `package (wasm CPU, Node ${process.version}): prompt ${one.prompt} tokens, first token ${one.ms.toFixed(0)} ms; ` +
    `${many.tokens} tokens in ${many.ms.toFixed(0)} ms; decode ${pkgRate.toFixed(1)} tokens/s`,
);
await engine.unload();

if (existsSync(native)) {
  const dir = mkdtempSync(join(tmpdir(), "poot-bench-"));
  const run = (max) => {
    const file = join(dir, `r${max}.json`);
    writeFileSync(file, JSON.stringify(request(max)));
    let min = Infinity;
    let tokens = 0;
    for (let i = 0; i < 3; i++) {
      const t = performance.now();
      const out = execFileSync(native, ["generate", "--model", model, "--request", file, "--threads", "1"], { encoding: "utf8" });
      min = Math.min(min, performance.now() - t);
      tokens = JSON.parse(out).usage.completion_tokens;
    }
    return { ms: min, tokens };
  };
  const n1 = run(1);
  const nN = run(N);
  const nativeRate = (nN.tokens - n1.tokens) / ((nN.ms - n1.ms) / 1000);
  console.log(`native poot generate --threads 1: ${nN.tokens} tokens in ${nN.ms.toFixed(0)} ms (process, load included); decode ${nativeRate.toFixed(1)} tokens/s`);
  console.log(`package / native decode: ${(pkgRate / nativeRate).toFixed(2)}`);
} else {
  console.log(`native: ${native} not found (build it: cargo build --release --features cli), skipped`);
}
