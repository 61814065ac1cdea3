// The engine in a Web Worker (createWorkerEngine + serveEngine) in headless Chromium: the real
// engine on WebGPU (lean scenarios: SwiftShader takes seconds per token) and on the CPU (full
// scenarios), the same checks as in a page (pages/setup.mjs), the model's ArrayBuffer
// transferred (the page's copy detached), progress forwarded, and the openai client through the
// worker engine's fetch. Then a fake engine in a worker for the ways a worker dies: an uncaught
// error, worker.terminate(), self.close() (seen through the Web Lock), a script that does not
// load; every pending call and open stream ends with a PootError `worker_failed`.
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

/** Loads the model in a worker of a fresh page on `backend` and runs the suite of `size`. */
async function inWorker(backend, size, modelAs) {
  const { page, errors } = await env.open();
  const out = await page.evaluate(async ({ backend, size, modelAs }) => {
    const { createWorkerEngine } = await import("/pkg/dist/index.js");
    const { runSuite } = await import("/pkg/test/browser/pages/scenarios.js");
    const { OpenAI } = await import("/gen/openai.js");
    const worker = new Worker("/pkg/test/browser/pages/engine-worker.js", { type: "module" });
    const phases = [];
    let model = "/model.gguf"; // relative: resolved against the page, not the worker
    if (modelAs === "buffer") model = await (await fetch("/model.gguf")).arrayBuffer();
    const bytes = model.byteLength;
    const t0 = performance.now();
    const engine = await createWorkerEngine(worker, {
      model,
      backend,
      cache: false,
      onProgress: (p) => phases.at(-1) !== p.phase && phases.push(p.phase),
    });
    const loadMs = performance.now() - t0;
    const detached = modelAs === "buffer" ? model.byteLength === 0 && bytes > 0 : null;
    const suite = await runSuite(engine, size, OpenAI);
    const models = await engine.models.list();
    await engine.unload();
    let afterUnload = null;
    try {
      await engine.completions.create({ prompt: "a", max_tokens: 1 });
    } catch (e) {
      afterUnload = { code: e.code, status: e.status, message: e.message };
    }
    worker.terminate();
    return { backend: engine.backend, model: engine.model, loadMs, phases, detached, suite, models, afterUnload };
  }, { backend, size, modelAs });
  await page.close();
  assert.deepEqual(errors, [], "no console errors");
  assert.deepEqual(out.models.data.map((m) => m.id), [out.model.id]);
  assert.deepEqual(out.afterUnload, {
    code: "engine_unloaded",
    status: 400,
    message: "the engine was unloaded (engine.unload()); create a new one with createEngine()",
  });
  return out;
}

test("WebGPU engine in a Worker: structured completions, abort, the openai client (lean); model bytes transferred", { timeout: 30 * 60_000 }, async () => {
  const out = await inWorker("webgpu", "lean", "buffer");
  assert.equal(out.backend.kind, "webgpu");
  assert.equal(out.detached, true, "the page's ArrayBuffer was transferred to the worker, not copied");
  assert.deepEqual(out.phases, ["parse", "upload"]);
  console.log(`WebGPU in a worker (${out.backend.adapter}): model loaded in ${(out.loadMs / 1000).toFixed(2)} s (bytes transferred)`);
  console.log(describeSuite(out.suite, "WebGPU worker, lean"));
  checkSuite(out.suite, "lean", out.model.id, "WebGPU worker", { abortWithinMs: 120_000 });
});

test("CPU engine in a Worker: the full scenarios; the model URL resolved against the page", { timeout: 10 * 60_000 }, async () => {
  const out = await inWorker("cpu", "full", "url");
  assert.equal(out.backend.kind, "cpu");
  assert.deepEqual(out.phases, ["download", "parse"]);
  console.log(`CPU in a worker: model loaded in ${(out.loadMs / 1000).toFixed(2)} s`);
  console.log(describeSuite(out.suite, "CPU worker, full"));
  checkSuite(out.suite, "full", out.model.id, "CPU worker", { abortWithinMs: 5_000 });
});

test("a worker that dies ends every pending call and open stream with worker_failed", { timeout: 120_000 }, async () => {
  const { page, errors } = await env.open();
  const out = await page.evaluate(async () => {
    const { createWorkerEngine } = await import("/pkg/dist/index.js");
    const fail = (e) => ({ name: e.name, code: e.code, status: e.status, message: e.message });
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const results = {};
    for (const how of ["throw", "terminate", "close"]) {
      const worker = new Worker("/pkg/test/browser/pages/fake-worker.js", { type: "module" });
      const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(8) });
      const stream = await engine.chat.completions.create({ messages: [], stream: true });
      const pending = engine.chat.completions.create({ messages: [] }).then(() => "resolved", fail);
      const reading = (async () => {
        let n = 0;
        try {
          for await (const _ of stream) n++;
          return { ended: n };
        } catch (e) {
          return { chunks: n > 0, ...fail(e) };
        }
      })();
      await sleep(50);
      if (how === "throw") worker.postMessage({ kind: "test-throw" });
      if (how === "terminate") worker.terminate();
      if (how === "close") worker.postMessage({ kind: "test-close" });
      const later = await Promise.race([pending, sleep(10_000).then(() => "still pending after 10 s")]);
      results[how] = { pending: later, stream: await reading, next: await engine.models.list().then(() => "resolved", fail) };
      worker.terminate();
    }
    // A worker whose script does not load.
    const missing = new Worker("/pkg/test/browser/pages/no-such-worker.js", { type: "module" });
    results.missing = await createWorkerEngine(missing, { model: new ArrayBuffer(8) }).then(() => "resolved", fail);
    return results;
  });
  await page.close();
  const dead = (message) => ({ name: "PootError", code: "worker_failed", status: 500, message });
  const expect = {
    throw: dead("the engine's worker failed: Uncaught Error: boom in the worker"),
    terminate: dead("the engine's worker was terminated"),
    close: dead("the engine's worker stopped (it was closed, or it crashed)"),
  };
  for (const [how, want] of Object.entries(expect)) {
    assert.deepEqual(out[how].pending, want, `${how}: the pending call`);
    assert.deepEqual(out[how].stream, { chunks: true, ...want }, `${how}: the open stream`);
    assert.deepEqual(out[how].next, want, `${how}: a later call`);
  }
  assert.deepEqual(out.missing, dead("the engine's worker failed: it could not load its script or threw an uncaught error"));
  assert.deepEqual(errors.filter((e) => !e.includes("boom in the worker") && !e.includes("status of 404")), []);
});

test("limits cross to the worker's engine: a request past a tightened bound is its 400, one within it runs", { timeout: 5 * 60_000 }, async () => {
  const { page, errors } = await env.open();
  const out = await page.evaluate(async () => {
    const { createWorkerEngine } = await import("/pkg/dist/index.js");
    const worker = new Worker("/pkg/test/browser/pages/engine-worker.js", { type: "module" });
    const fail = (e) => ({ code: e.code, param: e.param, status: e.status, message: e.message });
    const other = new Worker("/pkg/test/browser/pages/engine-worker.js", { type: "module" });
    const bad = await createWorkerEngine(other, { model: "/model.gguf", backend: "cpu", cache: false, limits: { regex_bytes: 0 } }).then(() => "resolved", fail);
    other.terminate();
    const engine = await createWorkerEngine(worker, { model: "/model.gguf", backend: "cpu", cache: false, limits: { regex_bytes: 16 } });
    const over = await engine.completions.create({ prompt: "x", guided_regex: "(yes|no|maybe)!?" + "?" }).then(() => "resolved", fail);
    const within = (await engine.completions.create({ prompt: "x", guided_regex: "(yes|no)" })).choices[0].text;
    await engine.unload();
    worker.terminate();
    return { bad, over, within };
  });
  await page.close();
  assert.deepEqual(errors, [], "no console errors");
  assert.deepEqual(out.bad, { code: "invalid_input", param: "limits", status: 400, message: "limits: `regex_bytes` must be an integer from 1 to its default, 4096" });
  assert.deepEqual(out.over, { code: "limit_exceeded", param: "guided_regex", status: 400, message: "guided_regex `(yes|no|maybe)!??` is 17 bytes, over the 16-byte limit" });
  assert.ok(["yes", "no"].includes(out.within), out.within);
});
