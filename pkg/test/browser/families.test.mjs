// Each model family's tiny random GGUF (tests/data/tiny_models/, checked against llama.cpp by
// tests/model_families.rs) in a Chromium page on WebGPU (SwiftShader here) and on the wasm CPU
// path: the same greedy tokens, and per-token log-probabilities within LOGPROB_TOLERANCE.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { launch, openPage } from "./chromium.mjs";
import { PAGE } from "./pages/setup.mjs";
import { startTestServer } from "./pages/server.mjs";

// resolve() drops the trailing slash the server's containment check does not expect.
const TINY = resolve(fileURLToPath(new URL("../../../tests/data/tiny_models/", import.meta.url)));
const FAMILIES = ["llama", "llama3", "qwen2", "qwen3", "phi3", "gemma3"];
/** |webgpu - cpu| per token log-probability (measured on SwiftShader: at most 1.5e-6). */
const LOGPROB_TOLERANCE = 1e-4;

let server;
let browser;
before(async () => {
  server = await startTestServer({ extra: { "/tiny/": TINY } });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test("every family runs on WebGPU (SwiftShader) as on the CPU in a page", { timeout: 10 * 60_000 }, async () => {
  const { page, errors } = await openPage(browser.context, `${server.url}${PAGE}`);
  const out = await page.evaluate(async (families) => {
    const { createEngine } = await import("/pkg/dist/index.js");
    const results = {};
    for (const arch of families) {
      results[arch] = {};
      for (const backend of ["webgpu", "cpu"]) {
        const engine = await createEngine({ model: `/tiny/${arch}.gguf`, backend, cache: false });
        const reply = await engine.completions.create({ prompt: "The weather in Paris is", max_tokens: 8, temperature: 0, logprobs: 1 });
        results[arch][backend] = {
          kind: engine.backend.kind,
          architecture: engine.model.architecture,
          tokens: reply.choices[0].logprobs.tokens,
          logprobs: reply.choices[0].logprobs.token_logprobs,
        };
        await engine.unload();
      }
    }
    return results;
  }, FAMILIES);
  await page.close();
  for (const arch of FAMILIES) {
    const { webgpu, cpu } = out[arch];
    assert.equal(webgpu.kind, "webgpu", arch);
    assert.equal(cpu.kind, "cpu", arch);
    assert.equal(webgpu.architecture, arch === "llama3" ? "llama" : arch);
    assert.equal(webgpu.tokens.length, 8, `${arch}: ${JSON.stringify(webgpu)}`);
    assert.deepEqual(webgpu.tokens, cpu.tokens, `${arch}: greedy tokens`);
    const worst = Math.max(...webgpu.logprobs.map((lp, i) => Math.abs(lp - cpu.logprobs[i])));
    assert.ok(worst <= LOGPROB_TOLERANCE, `${arch}: logprob error ${worst}`);
    console.log(`${arch}: WebGPU = CPU on 8 greedy tokens, worst logprob error ${worst.toExponential(1)}`);
  }
  assert.deepEqual(errors, [], "no console errors");
});
