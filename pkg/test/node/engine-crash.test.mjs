// A Rust panic aborts the wasm instance; the engine recovers by itself. The requests that were
// running or queued reject with a PootError (`engine_crashed`), never a hang; the engine then
// restarts on a fresh wasm instance with the model read again from the bytes it was given (no
// fetch), and the next request works. On the CPU path a step is synchronous, so the trap lands
// in the caller's stack; on the GPU path a step is a promise whose future panics, which never
// settles by itself, and the panic hook rejects it. The panic is a real one: `armDebugPanic`
// (dist/testing.js, a test-only hook that npm does not publish) makes the engine's next
// step call the wasm export `debugPanic` instead of stepping.
//
// The promise case runs in a child process, since the trap there escapes as an uncaught
// exception (which would otherwise end a Node process; a page only logs it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";

import { createEngine, PootError } from "../../dist/index.js";
import { armDebugPanic } from "../../dist/testing.js";

const MODEL = process.env.POOT_REFERENCE_GGUF;
const WASM = new URL("../../wasm/poot_bg.wasm", import.meta.url);
const run = promisify(execFile);

async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("expected a rejection");
}

const CRASHED = /^the engine crashed \(a Rust panic: panicked at src\/wasm\/engine\.rs:\d+:\d+:\ndebugPanic: a deliberate panic\); the requests that were running or queued fail with this error; the engine restarts itself \(a fresh wasm instance, the model read again\) and later requests wait for it$/;

test("a panic during a CPU step rejects the requests in flight; the engine restarts from the bytes it holds and the next request works", async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  const events = [];
  const engine = await createEngine({
    model: readFileSync(MODEL),
    wasm: readFileSync(WASM),
    backend: "cpu",
    onCrash: (e) => events.push({ crash: e }),
    onRecover: (e) => events.push({ recover: e }),
  });
  const ok = await engine.completions.create({ prompt: "x", guided_choice: ["fine"] });
  assert.equal(ok.choices[0].text, "fine");
  assert.equal(engine.crashes, 0);

  // Nothing may be fetched from here on: the model is read again from the bytes in hand.
  const realFetch = globalThis.fetch;
  const fetched = [];
  globalThis.fetch = (...args) => {
    fetched.push(String(args[0]));
    return realFetch(...args);
  };
  // The panic hook (console_error_panic_hook) writes the message and the JS stack.
  const realConsoleError = console.error;
  const logged = [];
  console.error = (...args) => logged.push(args.join(" "));
  try {
    armDebugPanic(engine);
    const t0 = performance.now();
    const failing = engine.chat.completions.create({ messages: [{ role: "user", content: "hi" }] });
    const queued = engine.completions.create({ prompt: "queued before the crash", max_tokens: 2 });
    const err = await rejection(failing);
    console.error = realConsoleError;
    const hook = logged.find((l) => l.includes("debugPanic: a deliberate panic"));
    assert.ok(hook, `the panic on the console: ${JSON.stringify(logged)}`);
    assert.match(hook, /^panicked at src\/wasm\/engine\.rs:\d+:\d+:\ndebugPanic: a deliberate panic\n\nStack:\n\n.*Error/s);
    assert.ok(err instanceof PootError);
    assert.equal(err.code, "engine_crashed");
    assert.equal(err.status, 500);
    assert.match(err.message, CRASHED);
    assert.equal(await rejection(queued), err, "a request queued on the dead instance rejects with the same error");
    assert.equal(engine.crashes, 1);

    // Made during the restart: waits for it, then runs on the fresh instance.
    const next = await engine.completions.create({ prompt: "x", guided_choice: ["fine"] });
    const recoveredMs = performance.now() - t0;
    assert.equal(next.choices[0].text, "fine");
    assert.deepEqual((await engine.models.list()).data.map((m) => m.id), [engine.model.id]);
    const response = await engine.fetch("http://poot.local/v1/completions", {
      method: "POST",
      body: JSON.stringify({ prompt: "x", guided_choice: ["fine"] }),
    });
    assert.equal(response.status, 200);
    assert.equal((await response.json()).choices[0].text, "fine");

    assert.equal(events.length, 2, JSON.stringify(events));
    assert.equal(events[0].crash.error, err);
    assert.equal(events[0].crash.crashes, 1);
    assert.equal(events[1].recover.crashes, 1);
    assert.equal(events[1].recover.modelFrom, "memory");
    assert.ok(events[1].recover.ms > 0 && events[1].recover.ms < recoveredMs + 1);
    assert.deepEqual(fetched, [], "nothing fetched during the restart");
    console.log(`CPU panic: restart took ${events[1].recover.ms.toFixed(0)} ms; crash to the next answer ${recoveredMs.toFixed(0)} ms`);

    // And again: every crash is recovered from, and counted.
    armDebugPanic(engine);
    assert.equal((await rejection(engine.completions.create({ prompt: "x" }))).code, "engine_crashed");
    assert.equal((await engine.completions.create({ prompt: "x", guided_choice: ["fine"] })).choices[0].text, "fine");
    assert.equal(engine.crashes, 2);
    assert.deepEqual(events.map((e) => Object.keys(e)[0]), ["crash", "recover", "crash", "recover"]);
    assert.deepEqual(fetched, []);
  } finally {
    globalThis.fetch = realFetch;
    console.error = realConsoleError;
  }
  await engine.unload();
  assert.equal((await rejection(engine.completions.create({ prompt: "x" }))).code, "engine_unloaded");
});

test("recover: false keeps the old behaviour: the crashed engine rejects every later call with the same error", async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must be set");
  let recovered = false;
  const engine = await createEngine({ model: readFileSync(MODEL), wasm: readFileSync(WASM), backend: "cpu", recover: false, onRecover: () => (recovered = true) });
  armDebugPanic(engine);
  const err = await rejection(engine.completions.create({ prompt: "x" }));
  assert.equal(err.code, "engine_crashed");
  assert.match(err.message, /; this engine cannot be used any more \(its wasm instance is dead\): createEngine\(\) makes a new one$/);
  for (const call of [() => engine.completions.create({ prompt: "x" }), () => engine.models.list()]) {
    assert.equal(await rejection(call()), err, "the same error, at once");
  }
  const response = await engine.fetch("http://poot.local/v1/completions", { method: "POST", body: '{"prompt":"x"}' });
  assert.equal(response.status, 500);
  assert.equal((await response.json()).error.code, "engine_crashed");
  assert.equal(engine.crashes, 1);
  assert.equal(recovered, false);
  // Each engine has its own instance: a new one works.
  const other = await createEngine({ model: readFileSync(MODEL), wasm: readFileSync(WASM), backend: "cpu" });
  assert.equal((await other.completions.create({ prompt: "x", guided_choice: ["fine"] })).choices[0].text, "fine");
  await other.unload();
});

test("a restart that fails rejects the requests waiting for it with engine_crashed; the next request tries again", async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must be set");
  const bytes = new Uint8Array(readFileSync(MODEL));
  let recovered = false;
  const engine = await createEngine({ model: bytes, wasm: readFileSync(WASM), backend: "cpu", onRecover: () => (recovered = true) });
  // The bytes the engine holds to read the model again are gone (transferred away).
  structuredClone(bytes.buffer, { transfer: [bytes.buffer] });
  assert.equal(bytes.length, 0);
  armDebugPanic(engine);
  assert.match((await rejection(engine.completions.create({ prompt: "x" }))).message, CRASHED);
  const waited = await rejection(engine.completions.create({ prompt: "x" }));
  assert.ok(waited instanceof PootError);
  assert.equal(waited.code, "engine_crashed");
  assert.equal(waited.status, 500);
  assert.match(waited.message, /^the engine crashed and restarting it failed \(.+\); the next request tries again$/s);
  const again = await rejection(engine.models.list());
  assert.equal(again.code, "engine_crashed");
  assert.notEqual(again, waited, "a second attempt, with an error of its own");
  assert.equal(recovered, false);
  assert.equal(engine.crashes, 1);
  await engine.unload();
});

test("a panic inside a pending step's promise rejects instead of hanging, and the engine recovers", { timeout: 120_000 }, async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must be set");
  const script = `
    import { readFileSync } from "node:fs";
    import { createEngine } from ${JSON.stringify(new URL("../../dist/index.js", import.meta.url).href)};
    import { armDebugPanic } from ${JSON.stringify(new URL("../../dist/testing.js", import.meta.url).href)};
    // The trap escapes the microtask queue as an uncaught exception; a page only logs it.
    process.on("uncaughtException", (e) => {
      if (e instanceof WebAssembly.RuntimeError) return console.error("uncaught trap:", e.message);
      throw e;
    });
    let recovered;
    const engine = await createEngine({ model: readFileSync(process.env.POOT_REFERENCE_GGUF), wasm: readFileSync(new URL(${JSON.stringify(WASM.href)})), backend: "cpu", onRecover: (e) => (recovered = e) });
    // The next step panics inside a promise, as a step on WebGPU would.
    armDebugPanic(engine, true);
    const stream = await engine.chat.completions.create({ messages: [{ role: "user", content: "hi" }], stream: true });
    const err = await (async () => { for await (const _ of stream); })().then(() => null, (e) => e);
    const next = await engine.completions.create({ prompt: "x", guided_choice: ["fine"] }).then((r) => r.choices[0].text, (e) => "rejected: " + e.message);
    console.log(JSON.stringify({ name: err?.name, code: err?.code, message: err?.message, next, crashes: engine.crashes, recovered }));
  `;
  const { stdout, stderr } = await run(process.execPath, ["--input-type=module", "-e", script], { timeout: 100_000 });
  const result = JSON.parse(stdout.trim().split("\n").at(-1));
  assert.equal(result.name, "PootError");
  assert.equal(result.code, "engine_crashed");
  assert.match(result.message, /^the engine crashed \(a Rust panic: panicked at .*debugPanic: a deliberate panic inside a future\); the requests that were running or queued fail/s);
  assert.equal(result.next, "fine");
  assert.equal(result.crashes, 1);
  assert.equal(result.recovered?.modelFrom, "memory");
  assert.match(stderr, /uncaught trap: unreachable/);
  console.log(`panic in a promise: restart took ${result.recovered.ms.toFixed(0)} ms`);
});
