// Checks a GGUF vocabulary as the wasm build reads it against llama.cpp's own reading
// (node-llama-cpp, vocabulary only): every text token's bytes against llama.cpp's
// `detokenize([id])`, special tokens against an empty detokenization, and the end-of-sequence
// ids against llama.cpp's end-of-generation set. A reference check run by hand when a new
// tokenizer family arrives, not a test: it needs node-llama-cpp's prebuilt binary.
//
// usage: node pkg/bench/vocab_vs_llama_cpp.mjs MODEL.gguf --node-llama-cpp DIR [--wasm-dir DIR]
//   DIR: a folder with node-llama-cpp installed (`npm install --prefix DIR node-llama-cpp@3.21.1`)
//   --wasm-dir: poot.js + poot_bg.wasm from `wasm-bindgen --target web` (default pkg/wasm)
// Prints a JSON summary and the first differences; exits 1 if any.
//
// Seen on Gemma 3 270M: all 255,894 text tokens agree, the 6,250 special ones detokenize to
// nothing, and the end-of-sequence ids <eos>, <end_of_turn> and </s> are llama.cpp's
// end-of-generation set (</s>, id 212, is stored user-defined; llama.cpp makes it a control
// token, and so do we). On SmolLM2: all 49,135 text tokens agree; llama.cpp also ends
// generation on <reponame> (4, a control token, never allowed here anyway).
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
const llamaDir = option("--node-llama-cpp");
const [modelPath] = args;
if (!modelPath || !llamaDir) {
  console.error("usage: node pkg/bench/vocab_vs_llama_cpp.mjs MODEL.gguf --node-llama-cpp DIR [--wasm-dir DIR]");
  process.exit(2);
}

const glue = await import(pathToFileURL(`${wasmDir}/poot.js`).href);
await glue.default({ module_or_path: readFileSync(`${wasmDir}/poot_bg.wasm`) });
const ours = glue.Vocabulary.fromGguf(readFileSync(modelPath));

const { getLlama } = await import(pathToFileURL(resolve(llamaDir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false });
const ref = await llama.loadModel({ modelPath, vocabOnly: true });

// llama.cpp's detokenize returns a string: compare with our bytes decoded the same way
// (invalid UTF-8 as U+FFFD, a leading BOM kept), and count the tokens that are not UTF-8.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
const strict = new TextDecoder("utf-8", { ignoreBOM: true, fatal: true });
const eos = new Set(ours.eosIds);
const summary = { tokens: ours.size, text: 0, textSame: 0, notUtf8: 0, special: 0, specialEmpty: 0, eos: [...eos] };
const differences = [];
const eogOnlyThere = [];
for (let id = 0; id < ours.size; id++) {
  const theirs = ref.detokenize([id], false);
  if (ref.isEogToken(id) && !eos.has(id)) eogOnlyThere.push([id, ref.detokenize([id], true)]);
  if (!ours.isText(id)) {
    summary.special++;
    if (theirs === "") summary.specialEmpty++;
    else if (!eos.has(id)) differences.push({ id, ours: "special", theirs });
    continue;
  }
  summary.text++;
  const bytes = ours.tokenBytes(id);
  try {
    strict.decode(bytes);
  } catch {
    summary.notUtf8++;
  }
  if (decoder.decode(bytes) === theirs) summary.textSame++;
  else differences.push({ id, ours: decoder.decode(bytes), theirs });
}
summary.eosNotEogThere = [...eos].filter((id) => !ref.isEogToken(id));
summary.eogOnlyThere = eogOnlyThere;
console.log(JSON.stringify(summary));
if (differences.length > 0) console.log(JSON.stringify({ differences: differences.length, first: differences.slice(0, 20) }));
process.exit(differences.length > 0 || summary.eosNotEogThere.length > 0 ? 1 : 0);
