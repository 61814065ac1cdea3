// The mask-kernel check page (www/kernel.html) in real headless Chromium through WebGPU (SwiftShader here): the mask kernel
// on the GPU gives the CPU twin's argmax and masked logits at every vocabulary size, the
// adapter name is shown, and the page logs no console errors.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { startServer } from "../../../scripts/serve.mjs";
import { launch, openPage } from "./chromium.mjs";

let server;
let browser;
before(async () => {
  server = await startServer({ port: 0 });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test("WebGPU kernel equals the CPU twin in the kernel-check page", { timeout: 180_000 }, async () => {
  const { page, errors } = await openPage(browser.context, `${server.url}kernel.html`);
  await page.waitForFunction(() => window.pootSlice !== undefined, null, { timeout: 170_000 });
  const slice = await page.evaluate(() => window.pootSlice);
  assert.equal(slice.error, undefined, `page failed: ${slice.error}`);
  assert.equal(slice.webgpu, true, `no WebGPU in Chromium: ${slice.reason}`);
  assert.ok(slice.adapter.name.length > 0, "the adapter name is empty");
  assert.deepEqual(slice.sizes.map((s) => s.n), [1, 31, 32, 33, 49152, 262144]);
  for (const s of slice.sizes) {
    assert.equal(s.gpu, s.cpu, `n=${s.n}: GPU argmax ${s.gpu}, CPU ${s.cpu}`);
    assert.equal(s.sameLogits, true, `n=${s.n}: masked logits differ`);
  }
  assert.equal(slice.allZeroMask.rejected, true);
  assert.equal(slice.allZeroMask.code, "no_allowed_token");
  const backend = await page.textContent("#backend");
  assert.ok(backend.includes(slice.adapter.name), `adapter not shown: ${backend}`);
  assert.equal(await page.getAttribute("#status", "data-state"), "done");
  await page.screenshot({ path: new URL("../../../test-results/kernel.png", import.meta.url).pathname, fullPage: true });
  assert.deepEqual(errors, [], `console errors: ${errors.join("\n")}`);
  console.log(`adapter: ${slice.adapter.name} (software: ${slice.adapter.isSoftware}); GPU ms per size:`,
    slice.sizes.map((s) => `${s.n}:${s.gpuMs.toFixed(1)}`).join(" "));
});

test("WebGPU kernel equals the JS oracle on NaN, -Infinity, ties and sparse masks", { timeout: 180_000 }, async () => {
  const { page, errors } = await openPage(browser.context, `${server.url}blank.html`);
  const failures = await page.evaluate(async () => {
    const { applyTokenMask } = await import("/pkg/dist/index.js");
    const { SIZES, oracle, randomCase, rng, sameBits } = await import("/pkg/test/cases.mjs");
    const next = rng(99);
    const failures = [];
    for (const n of SIZES) {
      for (const density of [100, 50, 3, 0]) {
        for (const coarse of [false, true]) {
          const { logits, mask } = randomCase(next, n, density, coarse);
          const expected = oracle(logits, mask);
          const what = `n=${n} density=${density} coarse=${coarse}`;
          try {
            const index = await applyTokenMask(logits, mask, { backend: "webgpu" });
            if (index !== expected.index || !sameBits(logits, expected.masked)) {
              failures.push(`${what}: got ${index}, want ${expected.index}`);
            }
          } catch (e) {
            if (expected.index >= 0 || e.code !== "no_allowed_token") {
              failures.push(`${what}: threw ${e.code}: ${e.message}`);
            }
          }
        }
      }
    }
    return failures;
  });
  assert.deepEqual(failures, []);
  assert.deepEqual(errors, []);
});

test("without WebGPU the kernel-check page says so plainly and still runs the CPU kernel", { timeout: 60_000 }, async () => {
  const page = await browser.context.newPage();
  const errors = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  // A browser without WebGPU: no navigator.gpu at all.
  await page.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, "gpu", { get: () => undefined, configurable: true });
  });
  await page.goto(`${server.url}kernel.html`);
  await page.waitForFunction(() => window.pootSlice !== undefined, null, { timeout: 50_000 });
  const slice = await page.evaluate(() => window.pootSlice);
  assert.equal(slice.webgpu, false);
  assert.match(await page.textContent("#backend"), /^WebGPU unavailable: WebGPU is not available here \(navigator\.gpu is missing\)/);
  assert.equal(slice.sizes.length, 6);
  assert.ok(slice.sizes.every((s) => Number.isInteger(s.cpu) && s.gpu === null));
  assert.deepEqual(errors, []);
  await page.close();
});
