// A plain Node script using the published package with no setup: no wasm bytes passed, no
// loader called. It first makes a load fail (a bad source), which must not poison the
// package: the next calls read the package's own poot_bg.wasm from disk. Prints one JSON line.
import { readFileSync } from "node:fs";
import { compileConstraint, createEngine, loadWasm } from "poot";

let failed = null;
try {
  await loadWasm(new Uint8Array([1, 2, 3]));
} catch (e) {
  failed = e.message;
}
const matcher = await compileConstraint({
  vocabulary: { tokens: ["yes", "no", "<eos>"], eos: [2] },
  request: { guided_choice: ["no"] },
});
const mask = new Uint32Array(matcher.maskWords);
matcher.fillMask(mask);
matcher.free();
const engine = await createEngine({ model: readFileSync(process.env.POOT_REFERENCE_GGUF), backend: "cpu" });
const reply = await engine.chat.completions.create({
  messages: [{ role: "user", content: "Is the sky green?" }],
  guided_choice: ["yes", "no"],
  max_tokens: 4,
  temperature: 0,
});
await engine.unload();
console.log(JSON.stringify({ failed, mask: [...mask], answer: reply.choices[0].message.content }));
