// The in-page engine (createEngine) in headless Chromium on the reference model (SmolLM2-135M,
// served from POOT_REFERENCE_GGUF): on WebGPU (SwiftShader here) and on the wasm CPU path,
// structured completions non-streamed and streamed under guided_json, guided_regex and
// json_object (outputs validated in Node), an abort mid-stream, and the official `openai`
// client through engine.fetch; greedy outputs equal across the two backends. Prints the load
// time, what each request took, and tokens/s on each backend.
//
// WebGPU on SwiftShader takes seconds per token (and more while the machine is busy), so the
// WebGPU run uses the `lean` scenarios: one-token prompts and outputs of a few tokens.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { checkSuite, describeSuite, start } from "./pages/setup.mjs";

let env;
before(async () => {
  env = await start();
});
after(async () => {
  await env?.close();
});

/** Loads the model in a fresh page on `backend` and runs the suite of `sizes`. */
async function inPage(backend, sizes, speedTokens) {
  const { page, errors } = await env.open();
  const out = await page.evaluate(async ({ backend, sizes, speedTokens }) => {
    const { createEngine } = await import("/pkg/dist/index.js");
    const { runSuite } = await import("/pkg/test/browser/pages/scenarios.js");
    const { OpenAI } = await import("/gen/openai.js");
    const phases = [];
    const t0 = performance.now();
    const engine = await createEngine({
      model: "/model.gguf",
      backend,
      cache: false,
      onProgress: (p) => phases.at(-1) !== p.phase && phases.push(p.phase),
    });
    const loadMs = performance.now() - t0;
    const suites = {};
    for (const size of sizes) suites[size] = await runSuite(engine, size, OpenAI);
    // Throughput: a one-token prompt, then unconstrained greedy tokens.
    const t1 = performance.now();
    const r = await engine.completions.create({ prompt: "a", max_tokens: speedTokens, temperature: 0 });
    const speed = { tokens: r.usage.completion_tokens, ms: performance.now() - t1 };
    await engine.unload();
    return { backend: engine.backend, model: engine.model, loadMs, phases, suites, speed };
  }, { backend, sizes, speedTokens });
  await page.close();
  assert.deepEqual(errors, [], "no console errors");
  return out;
}

const tokensPerSecond = ({ tokens, ms }) => `${(tokens / (ms / 1000)).toFixed(2)} tokens/s (${tokens} tokens after a 1-token prompt in ${(ms / 1000).toFixed(1)} s)`;

let gpuLean;

test("WebGPU engine in a page: structured completions, abort, the openai client (lean)", { timeout: 30 * 60_000 }, async () => {
  const out = await inPage("webgpu", ["lean"], 4);
  assert.equal(out.backend.kind, "webgpu");
  assert.ok(out.backend.adapter, "the adapter is named");
  // SwiftShader has no shader-f16, so the cache is the CPU path's f32 one (and the lean
  // outputs below must equal the CPU engine's).
  assert.ok(["f16", "f32"].includes(out.backend.kvCache), `kvCache ${out.backend.kvCache}`);
  if (/swiftshader/i.test(out.backend.adapter)) assert.equal(out.backend.kvCache, "f32");
  assert.deepEqual(out.phases, ["download", "parse", "upload"]);
  console.log(`WebGPU (${out.backend.adapter}${out.backend.isSoftware ? ", software" : ""}): model loaded in ${(out.loadMs / 1000).toFixed(2)} s; ${tokensPerSecond(out.speed)}`);
  console.log(describeSuite(out.suites.lean, "WebGPU, lean"));
  // One step on SwiftShader can take tens of seconds on a busy machine.
  checkSuite(out.suites.lean, "lean", out.model.id, "WebGPU page", { abortWithinMs: 120_000 });
  gpuLean = out.suites.lean;
});

test("auto skips a software WebGPU adapter and says why; a hardware one is used", { timeout: 120_000 }, async () => {
  const { page, errors } = await env.open();
  const { webgpu, auto } = await page.evaluate(async () => {
    const { createEngine } = await import("/pkg/dist/index.js");
    const load = async (backend) => {
      const engine = await createEngine({ model: "/model.gguf", backend, cache: false });
      const b = engine.backend;
      await engine.unload();
      return b;
    };
    return { webgpu: await load("webgpu"), auto: await load("auto") };
  });
  await page.close();
  assert.deepEqual(errors, []);
  assert.equal(webgpu.kind, "webgpu");
  if (webgpu.isSoftware) {
    assert.equal(auto.kind, "cpu");
    const name = webgpu.adapter.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    assert.match(auto.reason, new RegExp(`^the only WebGPU adapter \\(${name}\\) is a software one, slower than the CPU path`));
  } else {
    assert.deepEqual(auto, webgpu);
  }
});

test("CPU engine in a page: the full scenarios, and the lean ones equal to WebGPU's", { timeout: 10 * 60_000 }, async () => {
  const out = await inPage("cpu", ["full", "lean"], 32);
  assert.equal(out.backend.kind, "cpu");
  assert.deepEqual(out.phases, ["download", "parse"]);
  console.log(`CPU: model loaded in ${(out.loadMs / 1000).toFixed(2)} s; ${tokensPerSecond(out.speed)}`);
  console.log(describeSuite(out.suites.full, "CPU, full"));
  checkSuite(out.suites.full, "full", out.model.id, "CPU page", { abortWithinMs: 5_000 });
  checkSuite(out.suites.lean, "lean", out.model.id, "CPU page (lean)", { abortWithinMs: 5_000 });
  if (gpuLean) {
    // Greedy decoding: the GPU forward pass matches the CPU one, so the tokens are the same.
    assert.deepEqual(gpuLean.results.map((r) => r.text), out.suites.lean.results.map((r) => r.text), "WebGPU and CPU greedy outputs");
  }
});
