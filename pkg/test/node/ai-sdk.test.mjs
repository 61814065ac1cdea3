// The Vercel AI SDK provider (poot/ai-sdk) under the real `ai` package, on the reference model
// in Node: structured output, partial objects, a forced tool and its second step, settings,
// usage, abort and capabilities (test/ai-sdk-scenarios.mjs holds the scenarios and checks).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { createEngine } from "../../dist/index.js";
import { createPoot } from "../../dist/ai-sdk.js";
import { checkAiSdk, PERSON, runAiSdkScenarios } from "../ai-sdk-scenarios.mjs";

const MODEL = process.env.POOT_REFERENCE_GGUF;
const WASM = new URL("../../wasm/poot_bg.wasm", import.meta.url);

test("the AI SDK runs on the local engine: objects, partials, tools, settings, abort", { timeout: 600_000 }, async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  const engine = await createEngine({ model: readFileSync(MODEL), wasm: readFileSync(WASM), backend: "cpu" });
  const t0 = performance.now();
  const out = await runAiSdkScenarios({ createPoot, engine });
  console.log(
    `Node: ${((performance.now() - t0) / 1000).toFixed(1)} s; generateObject ${JSON.stringify(out.generateObject.object)}; ` +
      `${out.streamObject.partials.length} partials; tool call ${JSON.stringify(out.tools.steps[0].toolCalls[0]?.input)}; ` +
      `abort: ${out.abort.chunksAfterAbort} chunk(s) after, stream ended in ${out.abort.msToEnd.toFixed(0)} ms`,
  );
  checkAiSdk(out, assert, "Node");
  await engine.unload();
});

test("createPoot loads its engine on first use with progress, and a failed load is tried again", { timeout: 300_000 }, async () => {
  const { generateObject } = await import("ai");
  const { createPoot: make } = await import("../../dist/ai-sdk.js");
  const progress = [];
  let bytes = readFileSync(MODEL).subarray(0, 64); // not a whole GGUF: the load fails
  const settings = { get model() { return bytes; }, wasm: readFileSync(WASM), backend: "cpu", onProgress: (p) => progress.push(p) };
  const poot = make(settings);
  await assert.rejects(generateObject({ model: poot(), schema: PERSON, prompt: "x" }), (e) => /GGUF|model/.test(String(e?.message)));
  bytes = readFileSync(MODEL);
  const { object } = await generateObject({ model: poot(), schema: PERSON, prompt: "Ada Lovelace died at 36. Give her name and age.", temperature: 0 });
  assert.ok(PERSON.safeParse(object).success, JSON.stringify(object));
  assert.ok(progress.length > 0, "onProgress was called");
  assert.equal(await poot.engine(), await poot.engine(), "one engine, loaded once");
  await (await poot.engine()).unload();
});

test("createPoot refuses settings that name no engine", () => {
  assert.throws(() => createPoot(undefined), /createPoot needs/);
});
