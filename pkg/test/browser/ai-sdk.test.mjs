// The Vercel AI SDK provider (poot/ai-sdk) in Chromium: the real `ai` package, zod and the
// package bundled by esbuild into one module, as an app would ship them. A page runs the
// scenarios of test/ai-sdk-scenarios.mjs on the CPU engine; a second page loads the model in a
// Web Worker through createPoot's `worker` option with progress, and streams an object; and the
// repository's example page (examples/ai-sdk/) is built and run.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

import { buildExample } from "../../../examples/ai-sdk/build.mjs";
import { checkAiSdk } from "../ai-sdk-scenarios.mjs";
import { launch, openPage } from "./chromium.mjs";
import { PAGE } from "./pages/setup.mjs";
import { startTestServer } from "./pages/server.mjs";

let gen;
let server;
let browser;
before(async () => {
  assert.ok(process.env.POOT_REFERENCE_GGUF, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  gen = mkdtempSync(join(tmpdir(), "poot-ai-sdk-"));
  const result = await build({
    entryPoints: [fileURLToPath(new URL("./pages/ai-sdk-entry.js", import.meta.url))],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    outfile: join(gen, "ai-sdk.js"),
    logLevel: "silent",
  });
  assert.deepEqual(result.errors, []);
  // The bundle finds the wasm as `new URL("poot_bg.wasm", import.meta.url)`: next to it.
  copyFileSync(fileURLToPath(new URL("../../wasm/poot_bg.wasm", import.meta.url)), join(gen, "poot_bg.wasm"));
  await buildExample(join(gen, "example"));
  server = await startTestServer({ extra: { "/gen-ai/": gen } });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
  if (gen) rmSync(gen, { recursive: true, force: true });
});

test("in a page: objects, partials, a forced tool and its second step, settings, abort", { timeout: 10 * 60_000 }, async () => {
  const { page, errors } = await openPage(browser.context, `${server.url}${PAGE}`);
  const t0 = Date.now();
  const out = await page.evaluate(async () => {
    const { createEngine, createPoot, runAiSdkScenarios } = await import("/gen-ai/ai-sdk.js");
    const engine = await createEngine({ model: "/model.gguf", backend: "cpu", cache: false });
    const result = await runAiSdkScenarios({ createPoot, engine });
    await engine.unload();
    return result;
  });
  await page.close();
  console.log(
    `Chromium page: ${((Date.now() - t0) / 1000).toFixed(1)} s; generateObject ${JSON.stringify(out.generateObject.object)}; ` +
      `${out.streamObject.partials.length} partials; tool call ${JSON.stringify(out.tools.steps[0]?.toolCalls[0]?.input)}; ` +
      `abort: ${out.abort.chunksAfterAbort} chunk(s) after, stream ended in ${out.abort.msToEnd.toFixed(0)} ms`,
  );
  checkAiSdk(out, assert, "Chromium page");
  assert.deepEqual(errors, [], "no console errors");
});

test("in a page, the model in a Web Worker (createPoot's worker option): progress, then a streamed object", { timeout: 5 * 60_000 }, async () => {
  const { page, errors } = await openPage(browser.context, `${server.url}${PAGE}`);
  const out = await page.evaluate(async () => {
    const { createPoot, streamObject, generateObject, PERSON } = await import("/gen-ai/ai-sdk.js");
    const progress = [];
    const poot = createPoot({
      worker: () => new Worker("/pkg/test/browser/pages/engine-worker.js", { type: "module" }),
      model: new URL("/model.gguf", location.href).href,
      backend: "cpu",
      cache: false,
      onProgress: (p) => progress.push(p.loaded),
    });
    const engine = await poot.engine(); // loaded before the first call: a page shows the bar
    const partials = [];
    const streamed = streamObject({ model: poot(), schema: PERSON, prompt: "Ada Lovelace died at 36. Give her name and age.", temperature: 0 });
    for await (const partial of streamed.partialObjectStream) partials.push(partial);
    const final = await streamed.object;
    const whole = await generateObject({ model: poot(), schema: PERSON, prompt: "Grace Hopper died at 85. Give her name and age.", temperature: 0 });
    await engine.unload();
    return { progress, partials, final, whole: whole.object, backend: engine.backend.kind };
  });
  await page.close();
  assert.ok(out.progress.length > 0, "onProgress reached the page");
  assert.ok(out.partials.length >= 3, `${out.partials.length} partials`);
  assert.deepEqual(out.partials.at(-1), out.final);
  for (const value of [out.final, out.whole]) {
    assert.equal(typeof value.name, "string", JSON.stringify(value));
    assert.ok(Number.isInteger(value.age) && value.age >= 0 && value.age <= 150, JSON.stringify(value));
  }
  assert.equal(out.backend, "cpu");
  assert.deepEqual(errors, [], "no console errors");
  console.log(`Chromium worker: ${out.progress.length} progress events; ${out.partials.length} partials; ${JSON.stringify(out.final)}, ${JSON.stringify(out.whole)}`);
});

test("examples/ai-sdk: the page builds, loads the model in its worker and streams a valid object", { timeout: 5 * 60_000 }, async () => {
  const { page, errors } = await openPage(browser.context, `${server.url}gen-ai/example/index.html?model=/model.gguf`);
  await page.waitForFunction(() => window.result !== undefined, null, { timeout: 4 * 60_000 });
  const { object, error } = await page.evaluate(() => window.result);
  const shown = JSON.parse(await page.textContent("#out"));
  const status = await page.textContent("#status");
  await page.close();
  assert.equal(error, undefined, error);
  assert.equal(typeof object.name, "string", JSON.stringify(object));
  assert.equal(typeof object.city, "string", JSON.stringify(object));
  assert.ok(Number.isInteger(object.age) && object.age >= 0 && object.age <= 150, JSON.stringify(object));
  assert.deepEqual(shown, object, "the page shows the final object");
  assert.match(status, /^ready: .* on cpu$/);
  assert.deepEqual(errors, [], "no console errors");
  console.log(`examples/ai-sdk: ${JSON.stringify(object)}`);
});
