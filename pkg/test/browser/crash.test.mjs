// Crash recovery in headless Chromium, without reloading the page: a real Rust panic in the
// engine (armDebugPanic, the test-only hook of dist/testing.js: the engine's next step calls
// the wasm export `debugPanic`), then the failed request rejects with `engine_crashed`, and the
// next request works. In a page (CPU, and WebGPU on SwiftShader), in a worker replaced by a new
// one (createWorkerEngine given a function), and in a worker whose engine restarts inside it
// (given a Worker). The model is a URL kept in Cache Storage: the restart reads it from there,
// and the server sees one download of it per scenario. Prints what each restart took.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { start } from "./pages/setup.mjs";

let env;
before(async () => {
  env = await start();
});
after(async () => {
  await env?.close();
});

const modelRequests = () => env.server.requests.filter((p) => p === "/model.gguf").length;

/** What the panic leaves on the console: the panic hook's message and, in a promise, the trap. */
const panicNoise = (e) => /debugPanic: a deliberate panic|a Rust panic|RuntimeError: unreachable/.test(e);

/** Checks one scenario's result: the crash, the restart, the request after it. */
function checkRecovered(out, where, { modelFrom = "cache", inFuture = false } = {}) {
  const panic = inFuture ? "debugPanic: a deliberate panic inside a future" : "debugPanic: a deliberate panic";
  assert.equal(out.before, "fine", `${where}: the request before the crash`);
  assert.equal(out.failed.name, "PootError", `${where}: ${JSON.stringify(out.failed)}`);
  assert.equal(out.failed.code, "engine_crashed", where);
  assert.equal(out.failed.status, 500, where);
  assert.ok(out.failed.message.startsWith("the engine crashed (a Rust panic: panicked at "), `${where}: ${out.failed.message}`);
  assert.ok(out.failed.message.includes(panic), `${where}: ${out.failed.message}`);
  assert.equal(out.after, "fine", `${where}: the request after the crash`);
  assert.equal(out.crashes, 1, `${where}: engine.crashes`);
  assert.deepEqual(out.events.map((e) => e.kind), ["crash", "recover"], `${where}: events`);
  assert.equal(out.events[0].code, "engine_crashed");
  assert.equal(out.events[0].crashes, 1);
  assert.equal(out.events[1].crashes, 1);
  assert.equal(out.events[1].modelFrom, modelFrom, `${where}: where the restart read the model`);
  assert.ok(out.events[1].ms > 0, where);
}

test("in a page, CPU: a panic fails the request, the engine restarts from Cache Storage, the next request works", { timeout: 5 * 60_000 }, async () => {
  const { page, errors } = await env.open();
  const requestsBefore = modelRequests();
  const out = await page.evaluate(async () => {
    const { createEngine } = await import("/pkg/dist/index.js");
    const { armDebugPanic } = await import("/pkg/dist/testing.js");
    const events = [];
    const engine = await createEngine({
      model: "/model.gguf",
      backend: "cpu",
      cache: "poot-crash-test-page",
      onCrash: (e) => events.push({ kind: "crash", code: e.error.code, crashes: e.crashes }),
      onRecover: (e) => events.push({ kind: "recover", ...e }),
    });
    const choose = () => engine.completions.create({ prompt: "x", guided_choice: ["fine"] }).then((r) => r.choices[0].text);
    const fail = (e) => ({ name: e.name, code: e.code, status: e.status, message: e.message });
    const before = await choose();
    armDebugPanic(engine);
    const t0 = performance.now();
    const failed = await engine.completions.create({ prompt: "x" }).then(() => "resolved", fail);
    const after = await choose();
    const crashToAnswerMs = performance.now() - t0;
    // A panic inside a step's promise (the WebGPU path's kind) too, on the same engine.
    armDebugPanic(engine, true);
    const failedInFuture = await engine.completions.create({ prompt: "x" }).then(() => "resolved", fail);
    const afterInFuture = await choose();
    const result = { before, failed, after, crashes: 1, events: events.slice(0, 2), crashToAnswerMs, failedInFuture, afterInFuture, crashesAtEnd: engine.crashes, allEvents: events };
    await engine.unload();
    return result;
  });
  await page.close();
  checkRecovered(out, "CPU page");
  assert.equal(out.failedInFuture.code, "engine_crashed", JSON.stringify(out.failedInFuture));
  assert.ok(out.failedInFuture.message.includes("debugPanic: a deliberate panic inside a future"), out.failedInFuture.message);
  assert.equal(out.afterInFuture, "fine");
  assert.equal(out.crashesAtEnd, 2);
  assert.deepEqual(out.allEvents.map((e) => e.kind), ["crash", "recover", "crash", "recover"]);
  assert.equal(modelRequests() - requestsBefore, 1, "the model was downloaded once, never again for a restart");
  // console_error_panic_hook: the panic message, then the JS stack.
  assert.ok(
    errors.some((e) => /debugPanic: a deliberate panic\n\nStack:\n\n.*Error/s.test(e)),
    `the panic and its stack on the console: ${JSON.stringify(errors)}`,
  );
  assert.deepEqual(errors.filter((e) => !panicNoise(e)), [], "no other console errors");
  console.log(`CPU page: restart ${out.events[1].ms.toFixed(0)} ms (model from ${out.events[1].modelFrom}); crash to the next answer ${out.crashToAnswerMs.toFixed(0)} ms; promise panic restart ${out.allEvents[3].ms.toFixed(0)} ms`);
});

test("in a page, WebGPU: after a panic in a step the engine restarts on WebGPU (a fresh device) and answers", { timeout: 20 * 60_000 }, async () => {
  const { page, errors } = await env.open();
  const requestsBefore = modelRequests();
  const out = await page.evaluate(async () => {
    const { createEngine } = await import("/pkg/dist/index.js");
    const { armDebugPanic } = await import("/pkg/dist/testing.js");
    const events = [];
    const engine = await createEngine({
      model: "/model.gguf",
      backend: "webgpu",
      cache: "poot-crash-test-gpu",
      onCrash: (e) => events.push({ kind: "crash", code: e.error.code, crashes: e.crashes }),
      onRecover: (e) => events.push({ kind: "recover", ...e, backend: engine.backend.kind }),
    });
    const choose = () => engine.completions.create({ prompt: "x", guided_choice: ["fine"] }).then((r) => r.choices[0].text);
    const fail = (e) => ({ name: e.name, code: e.code, status: e.status, message: e.message });
    const before = await choose();
    armDebugPanic(engine, true);
    const t0 = performance.now();
    const failed = await engine.completions.create({ prompt: "x" }).then(() => "resolved", fail);
    const after = await choose();
    const crashToAnswerMs = performance.now() - t0;
    const result = { before, failed, after, crashes: engine.crashes, events, crashToAnswerMs, backend: engine.backend.kind };
    await engine.unload();
    return result;
  });
  await page.close();
  checkRecovered(out, "WebGPU page", { inFuture: true });
  assert.equal(out.backend, "webgpu");
  assert.equal(out.events[1].backend, "webgpu", "restarted on WebGPU");
  assert.equal(modelRequests() - requestsBefore, 1, "the model was downloaded once");
  assert.deepEqual(errors.filter((e) => !panicNoise(e)), [], "no other console errors");
  console.log(`WebGPU page: restart ${out.events[1].ms.toFixed(0)} ms (model from ${out.events[1].modelFrom}); crash to the next answer ${out.crashToAnswerMs.toFixed(0)} ms`);
});

/** A worker engine on the CPU: `replace` gives createWorkerEngine a function (else a Worker). */
async function inWorker(replace, inFuture) {
  const { page, errors } = await env.open();
  const requestsBefore = modelRequests();
  const out = await page.evaluate(async ({ replace, inFuture }) => {
    const { createWorkerEngine } = await import("/pkg/dist/index.js");
    const workers = [];
    const terminated = [];
    const startWorker = () => {
      const w = new Worker("/pkg/test/browser/pages/crash-worker.js", { type: "module" });
      const n = workers.push(w) - 1;
      const terminate = w.terminate;
      w.terminate = function () {
        terminated.push(n);
        return terminate.call(this);
      };
      return w;
    };
    const events = [];
    const engine = await createWorkerEngine(replace ? startWorker : startWorker(), {
      model: "/model.gguf",
      backend: "cpu",
      cache: `poot-crash-test-worker-${replace}-${inFuture}`,
      onCrash: (e) => events.push({ kind: "crash", code: e.error.code, crashes: e.crashes }),
      onRecover: (e) => events.push({ kind: "recover", ...e }),
    });
    const choose = () => engine.completions.create({ prompt: "x", guided_choice: ["fine"] }).then((r) => r.choices[0].text);
    const fail = (e) => ({ name: e.name, code: e.code, status: e.status, message: e.message });
    const before = await choose();
    workers.at(-1).postMessage({ kind: "test-panic", inFuture });
    const t0 = performance.now();
    const failed = await engine.completions.create({ prompt: "x" }).then(() => "resolved", fail);
    const after = await choose();
    const crashToAnswerMs = performance.now() - t0;
    const models = await engine.models.list();
    const result = { before, failed, after, crashes: engine.crashes, events, crashToAnswerMs, workers: workers.length, terminated, models: models.data.length };
    await engine.unload();
    workers.at(-1).terminate();
    return result;
  }, { replace, inFuture });
  await page.close();
  const where = `worker (${replace ? "replaced" : "restarted inside"}${inFuture ? ", panic in a promise" : ""})`;
  checkRecovered(out, where, { inFuture });
  assert.equal(out.models, 1);
  assert.equal(modelRequests() - requestsBefore, 1, `${where}: the model was downloaded once`);
  assert.deepEqual(errors.filter((e) => !panicNoise(e)), [], "no other console errors");
  console.log(`CPU ${where}: restart ${out.events[1].ms.toFixed(0)} ms (model from ${out.events[1].modelFrom}); crash to the next answer ${out.crashToAnswerMs.toFixed(0)} ms`);
  return out;
}

test("in a worker given as a function: a panic fails the request, a new worker replaces the crashed one, the next request works", { timeout: 5 * 60_000 }, async () => {
  const out = await inWorker(true, false);
  assert.equal(out.workers, 2, "a second worker was started");
  assert.deepEqual(out.terminated.slice(0, 1), [0], "the crashed worker was terminated");
});

test("in a worker given as a Worker: the engine restarts inside it, even after a panic in a promise", { timeout: 5 * 60_000 }, async () => {
  const out = await inWorker(false, true);
  assert.equal(out.workers, 1, "the same worker");
  assert.deepEqual(out.terminated, [0], "terminated only at the end");
});
