#!/usr/bin/env node
// llama.cpp's prompt-processing and generation speed on the same prompt and thread count as
// examples/bench_model.rs, through npm node-llama-cpp (the PyPI llama-server wheel needs
// AVX-VNNI, see record_llama_reference.mjs). Prints one JSON line like bench_model's.
// Usage: bench_llama_cpp.mjs MODEL.gguf THREADS PROMPT_TOKENS GEN_TOKENS  ($POOT_NLC_DIR: install dir)
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [model, threads = "1", pp = "128", tg = "64"] = process.argv.slice(2);
const nlcDir = process.env.POOT_NLC_DIR ?? path.join(os.homedir(), ".cache", "poot", "nlc");
const { getLlama } = await import(pathToFileURL(path.join(nlcDir, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
// The same text as examples/bench_model.rs.
const TEXT = "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from those used to make wine. Books, which had been copied by hand, became cheaper and more common, and ideas travelled faster than ever before across Europe. Within fifty years, presses were running in more than two hundred cities, and millions of volumes had been printed. Scholars argue about the effects, but most agree that printing helped to spread literacy, standardise languages, and support the scientific revolution that followed. ";
const llama = await getLlama({ gpu: false, logLevel: "error" });
const m = await llama.loadModel({ modelPath: model });
const ctx = await m.createContext({ contextSize: 1024, batchSize: 512, threads: Number(threads) });
let prompt = [];
while (prompt.length < Number(pp)) prompt.push(...m.tokenize(TEXT, false));
prompt = prompt.slice(0, Number(pp));
const seq = ctx.getSequence();
const t0 = performance.now();
let t1 = 0;
let n = 0;
for await (const _ of seq.evaluate(prompt, { temperature: 0 })) {
  if (n === 0) t1 = performance.now();
  if (++n > Number(tg)) break;
}
const t2 = performance.now();
// The first yield comes after prefill plus one sampled token; the rest are decode steps.
console.log(JSON.stringify({
  engine: "llama.cpp (node-llama-cpp 3.21.1)", threads: Number(threads),
  pp_tokens: Number(pp), pp_tok_s: +(Number(pp) / ((t1 - t0) / 1000)).toFixed(2),
  tg_tokens: n - 1, tg_tok_s: +((n - 1) / ((t2 - t1) / 1000)).toFixed(2),
}));
await ctx.dispose(); await m.dispose();
