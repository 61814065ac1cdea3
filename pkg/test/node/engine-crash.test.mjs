// A Rust panic aborts the wasm instance. The engine must turn it into a clear PootError
// (`engine_crashed`) on the call that hit it and on every call after, never a hang: on the
// CPU path a step is synchronous, so the trap lands in the caller's stack; on the GPU path a
// step is a promise whose future panics, which never settles by itself, and the panic hook
// rejects it. `debugPanic` (a wasm export for these tests) stands in for a real panic.
//
// Each file of `node --test` is its own process, so the dead instance harms no other test;
// the promise case runs in a child process, since the trap there escapes as an uncaught
// exception (which would otherwise end a Node process; a page only logs it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";

import { createEngine, PootError } from "../../dist/index.js";
import * as glue from "../../wasm/poot.js";

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

test("a panic during a CPU step rejects that call and every later one", async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  const wasm = readFileSync(WASM);
  const engine = await createEngine({ model: readFileSync(MODEL), wasm, backend: "cpu" });
  const ok = await engine.completions.create({ prompt: "x", guided_choice: ["fine"] });
  assert.equal(ok.choices[0].text, "fine");

  glue.LocalEngine.prototype.stepSync = () => glue.debugPanic(false);
  const err = await rejection(engine.chat.completions.create({ messages: [{ role: "user", content: "hi" }] }));
  assert.ok(err instanceof PootError);
  assert.equal(err.code, "engine_crashed");
  assert.equal(err.status, 500);
  assert.match(
    err.message,
    /^the engine crashed \(a Rust panic: panicked at src\/wasm\/engine\.rs:\d+:\d+:\ndebugPanic: a deliberate panic\); this wasm instance cannot be used any more: reload the page \(in Node, start a new process\) for a fresh one$/,
  );
  for (const call of [
    () => engine.completions.create({ prompt: "x" }),
    () => engine.models.list(),
    () => createEngine({ model: readFileSync(MODEL), wasm }),
  ]) {
    assert.equal(await rejection(call()), err, "the same error, at once");
  }
  const response = await engine.fetch("http://poot.local/v1/completions", { method: "POST", body: '{"prompt":"x"}' });
  assert.equal(response.status, 500);
  assert.equal((await response.json()).error.code, "engine_crashed");
});

test("a panic inside a pending step's promise rejects instead of hanging", { timeout: 60_000 }, async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must be set");
  const script = `
    import { readFileSync } from "node:fs";
    import { createEngine } from ${JSON.stringify(new URL("../../dist/index.js", import.meta.url).href)};
    import * as glue from ${JSON.stringify(new URL("../../wasm/poot.js", import.meta.url).href)};
    // The trap escapes the microtask queue as an uncaught exception; a page only logs it.
    process.on("uncaughtException", (e) => {
      if (e instanceof WebAssembly.RuntimeError) return console.error("uncaught trap:", e.message);
      throw e;
    });
    const engine = await createEngine({ model: readFileSync(process.env.POOT_REFERENCE_GGUF), wasm: readFileSync(new URL(${JSON.stringify(WASM.href)})), backend: "cpu" });
    // Steps go through the promise path, as they do on WebGPU, and panic inside it.
    Object.defineProperty(glue.LocalEngine.prototype, "onGpu", { get: () => true });
    glue.LocalEngine.prototype.step = () => glue.debugPanic(true);
    const stream = await engine.chat.completions.create({ messages: [{ role: "user", content: "hi" }], stream: true });
    const err = await (async () => { for await (const _ of stream); })().then(() => null, (e) => e);
    console.log(JSON.stringify({ name: err?.name, code: err?.code, message: err?.message }));
  `;
  const { stdout, stderr } = await run(process.execPath, ["--input-type=module", "-e", script], { timeout: 50_000 });
  const result = JSON.parse(stdout.trim().split("\n").at(-1));
  assert.equal(result.name, "PootError");
  assert.equal(result.code, "engine_crashed");
  assert.match(result.message, /^the engine crashed \(a Rust panic: panicked at .*debugPanic: a deliberate panic inside a future\)/s);
  assert.match(stderr, /uncaught trap: unreachable/);
});
