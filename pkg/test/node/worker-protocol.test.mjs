// createWorkerEngine / serveEngine over a MessageChannel in Node, with a fake engine standing in
// for createEngine: calls, streams (chunks as messages), aborts in both directions, errors with
// their OpenAI fields, progress, transferred model bytes, and a worker that fails or is
// terminated (every pending call and open stream ends with a PootError). The real engine in a
// real Worker is tested in Chromium (test/browser/worker.test.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";

import { createWorkerEngine, PootError, serveEngine } from "../../dist/index.js";

/** A Worker on the calling side of a MessageChannel (the far port is the worker's scope). */
class FakeWorker extends EventTarget {
  constructor(port) {
    super();
    this.port = port;
    port.addEventListener("message", (e) => this.dispatchEvent(new MessageEvent("message", { data: e.data })));
    port.start();
  }
  postMessage(message, transfer) {
    this.port.postMessage(message, transfer);
  }
  terminate() {
    this.terminated = true;
    this.port.close();
  }
}

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

/** A fake engine that records what it was asked; streams `n` chunks, `gap` ms apart. */
function fakeEngine(opts, log) {
  const chunk = (i) => ({ id: "c1", object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: `t${i}` } }] });
  const create = (endpoint) => async (req, o = {}) => {
    log.push({ endpoint, req, signal: o.signal });
    if (req.fail === "before") throw new PootError("guided_regex must be a string, got a number", { status: 400, code: "invalid_input", param: "guided_regex" });
    if (!req.stream) {
      if (req.slow) {
        await new Promise((resolve, reject) => {
          const t = setTimeout(resolve, 10_000);
          o.signal?.addEventListener("abort", () => (clearTimeout(t), reject(o.signal.reason)));
        });
      }
      return { id: "r1", object: endpoint === "chat" ? "chat.completion" : "text_completion", choices: [], echo: req };
    }
    return (async function* () {
      for (let i = 0; i < (req.n_chunks ?? 3); i++) {
        if (o.signal?.aborted) throw o.signal.reason;
        if (req.fail === "mid" && i === 2) throw new PootError("the mask allows no token", { status: 500, code: "no_allowed_token" });
        yield chunk(i);
        await tick(req.gap ?? 0);
      }
    })();
  };
  let unloaded = false;
  return {
    backend: { kind: "cpu", reason: "fake" },
    model: { id: "fake-model", contextLength: 2048, bytes: opts.model.byteLength ?? 0 },
    chat: { completions: { create: create("chat") } },
    completions: { create: create("completions") },
    models: { list: async () => ({ object: "list", data: [{ id: "fake-model", object: "model", created: 0, owned_by: "poot" }] }) },
    // Stands in for the engine's fetch: a JSON reply, an error, or an SSE stream it writes slowly.
    async fetch(url, init) {
      log.push({ fetch: url, method: init.method, headers: init.headers, body: init.body, signal: init.signal });
      const path = new URL(url).pathname;
      if (path.endsWith("/models")) return Response.json({ object: "list", data: [] }, { headers: { "x-poot-test": "models" } });
      const body = JSON.parse(init.body);
      if (body.bad) return Response.json({ error: { message: "bad", type: "invalid_request_error", param: "bad", code: "invalid_input" } }, { status: 400 });
      const encoder = new TextEncoder();
      let i = 0;
      const stream = new ReadableStream({
        async pull(controller) {
          if (init.signal.aborted) return controller.error(init.signal.reason);
          await tick(body.gap ?? 0);
          if (i === body.events) {
            controller.enqueue(encoder.encode("data: [DONE]\n\n"));
            return controller.close();
          }
          controller.enqueue(encoder.encode(`data: {"i":${i++}}\n\n`));
        },
      });
      return new Response(stream, { status: 200, headers: { "content-type": "text/event-stream", "x-poot-warnings": '["x"]' } });
    },
    async unload() {
      unloaded = true;
      log.push({ unload: true });
    },
    get unloaded() {
      return unloaded;
    },
  };
}

/** A served fake engine and a FakeWorker talking to it. */
function setup({ load } = {}) {
  const { port1, port2 } = new MessageChannel();
  const log = [];
  const seen = {};
  port1.start();
  const stop = serveEngine(port1, {
    async create(opts) {
      seen.opts = opts;
      if (load) await load(opts);
      for (const phase of ["download", "parse", "upload"]) opts.onProgress?.({ phase, loaded: 1, total: 1 });
      return fakeEngine(opts, log);
    },
  });
  return { worker: new FakeWorker(port2), log, seen, stop, close: () => (port1.close(), port2.close()) };
}

test("load: progress forwarded, backend and model from the worker, model bytes transferred", async () => {
  const { worker, seen, close } = setup();
  const bytes = new Uint8Array([1, 2, 3, 4]).buffer;
  const progress = [];
  const engine = await createWorkerEngine(worker, { model: bytes, backend: "cpu", onProgress: (p) => progress.push(p.phase) });
  assert.equal(bytes.byteLength, 0, "the caller's ArrayBuffer is detached: transferred, not copied");
  assert.deepEqual([...new Uint8Array(seen.opts.model)], [1, 2, 3, 4]);
  assert.equal(seen.opts.backend, "cpu");
  assert.ok(seen.opts.signal instanceof AbortSignal);
  assert.deepEqual(progress, ["download", "parse", "upload"]);
  assert.deepEqual(engine.backend, { kind: "cpu", reason: "fake" });
  assert.deepEqual(engine.model, { id: "fake-model", contextLength: 2048, bytes: 4 });
  assert.equal(typeof engine.fetch, "function");
  close();

  // A Uint8Array spanning its buffer is transferred too; a view on part of one is copied.
  const s2 = setup();
  const whole = new Uint8Array([5, 6]);
  await createWorkerEngine(s2.worker, { model: whole });
  assert.equal(whole.byteLength, 0);
  assert.deepEqual([...s2.seen.opts.model], [5, 6]);
  s2.close();
  const s3 = setup();
  const part = new Uint8Array([7, 8, 9]).subarray(1);
  await createWorkerEngine(s3.worker, { model: part });
  assert.deepEqual([...part], [8, 9], "the caller's other data stays");
  assert.deepEqual([...s3.seen.opts.model], [8, 9]);
  s3.close();
});

test("calls: non-streamed on both endpoints, models.list, unload", async () => {
  const { worker, log, close } = setup();
  const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(1) });
  const req = { messages: [{ role: "user", content: "hi" }], guided_json: { type: "object" }, max_tokens: 4 };
  const reply = await engine.chat.completions.create(req);
  assert.equal(reply.object, "chat.completion");
  assert.deepEqual(reply.echo, req, "the request crosses intact");
  assert.equal((await engine.completions.create({ prompt: "a" })).object, "text_completion");
  assert.deepEqual(log.map((l) => l.endpoint), ["chat", "completions"]);
  assert.deepEqual((await engine.models.list()).data.map((m) => m.id), ["fake-model"]);
  await engine.unload();
  assert.deepEqual(log.at(-1), { unload: true });
  close();
});

test("streams: chunks in order, then the end; an engine error mid-stream ends it after the chunks before", async () => {
  const { worker, close } = setup();
  const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(1) });
  const stream = await engine.chat.completions.create({ messages: [], stream: true, n_chunks: 4 });
  const got = [];
  for await (const c of stream) got.push(c.choices[0].delta.content);
  assert.deepEqual(got, ["t0", "t1", "t2", "t3"]);

  const failing = await engine.completions.create({ prompt: "", stream: true, fail: "mid" });
  const before = [];
  await assert.rejects(async () => {
    for await (const c of failing) before.push(c.choices[0].delta.content);
  }, (e) => e instanceof PootError && e.code === "no_allowed_token" && e.status === 500 && e.message === "the mask allows no token");
  assert.deepEqual(before, ["t0", "t1"]);
  close();
});

test("errors cross with their OpenAI fields", async () => {
  const { worker, close } = setup();
  const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(1) });
  for (const stream of [false, true]) {
    await assert.rejects(engine.chat.completions.create({ messages: [], stream, fail: "before" }), (e) => {
      assert.ok(e instanceof PootError);
      assert.deepEqual(e.toJSON(), {
        error: { message: "guided_regex must be a string, got a number", type: "invalid_request_error", param: "guided_regex", code: "invalid_input" },
      });
      return true;
    });
  }
  close();
});

test("aborts cross the boundary, with the in-page engine's semantics", async () => {
  const { worker, log, close } = setup();
  const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(1) });

  // Mid-stream: the stream just ends (as in the page), and the worker's engine stops.
  const controller = new AbortController();
  const stream = await engine.chat.completions.create({ messages: [], stream: true, n_chunks: 1000, gap: 5 }, { signal: controller.signal });
  const got = [];
  for await (const c of stream) {
    got.push(c);
    if (got.length === 2) controller.abort();
  }
  assert.equal(got.length, 2);
  await tick(20);
  assert.equal(log.at(-1).signal.aborted, true, "the engine in the worker saw the abort");

  // Before a reply: rejects at once with the engine's `aborted` error, the reason as its cause.
  const c2 = new AbortController();
  const slow = engine.chat.completions.create({ messages: [], slow: true }, { signal: c2.signal });
  await tick(10);
  const reason = new Error("changed my mind");
  c2.abort(reason);
  await assert.rejects(slow, (e) => {
    assert.ok(e instanceof PootError);
    assert.deepEqual([e.name, e.message, e.status, e.code, e.cause], ["AbortError", "the request was aborted", 499, "aborted", reason]);
    return true;
  });
  await tick(10);
  assert.equal(log.at(-1).signal.aborted, true);

  const before = log.length;
  await assert.rejects(engine.chat.completions.create({ messages: [] }, { signal: AbortSignal.abort() }), (e) => e.name === "AbortError" && e.code === "aborted");
  assert.equal(log.length, before, "an already aborted call never reaches the worker");

  // A consumer that stops reading stops the worker's stream.
  const early = await engine.chat.completions.create({ messages: [], stream: true, n_chunks: 1000, gap: 5 });
  for await (const c of early) {
    assert.ok(c);
    break;
  }
  await tick(20);
  assert.equal(log.at(-1).signal.aborted, true, "breaking out of the loop stops the worker's stream");
  close();
});

test("a load that fails or is aborted rejects createWorkerEngine", async () => {
  const failing = setup({
    load: async () => {
      throw new PootError("GGUF: at byte 0: expected the magic `GGUF`, found [00, 00, 00, 00]", { status: 400, code: "invalid_input", param: "model" });
    },
  });
  await assert.rejects(createWorkerEngine(failing.worker, { model: new ArrayBuffer(4) }), (e) =>
    e instanceof PootError && e.status === 400 && e.param === "model" && e.message.startsWith("GGUF: at byte 0"));
  failing.close();

  let workerSignal;
  const slow = setup({
    load: (opts) =>
      new Promise((_, reject) => {
        workerSignal = opts.signal;
        opts.signal.addEventListener("abort", () => reject(opts.signal.reason));
      }),
  });
  const controller = new AbortController();
  const loading = createWorkerEngine(slow.worker, { model: new ArrayBuffer(4), signal: controller.signal });
  await tick(10);
  controller.abort();
  await assert.rejects(loading, (e) => e instanceof PootError && e.name === "AbortError" && e.message === "loading the model was aborted");
  await tick(10);
  assert.equal(workerSignal.aborted, true, "the worker stopped loading");
  slow.close();
});

test("a worker that fails or is terminated rejects every pending call and ends open streams", async () => {
  for (const how of ["error", "terminate"]) {
    const { worker, close } = setup();
    const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(1) });
    const stream = await engine.chat.completions.create({ messages: [], stream: true, n_chunks: 1000, gap: 5 });
    const pending = engine.chat.completions.create({ messages: [], slow: true });
    const iterating = (async () => {
      let n = 0;
      for await (const _ of stream) n++;
      return n;
    })();
    await tick(20);
    if (how === "error") worker.dispatchEvent(Object.assign(new Event("error"), { message: "Uncaught RangeError: out of memory" }));
    else worker.terminate();
    const expected = how === "error"
      ? "the engine's worker failed: Uncaught RangeError: out of memory"
      : "the engine's worker was terminated";
    const isDead = (e) => e instanceof PootError && e.code === "worker_failed" && e.status === 500 && e.message === expected;
    await assert.rejects(pending, isDead);
    await assert.rejects(iterating, isDead);
    await assert.rejects(engine.models.list(), isDead, "later calls fail at once");
    await assert.rejects(engine.completions.create({ prompt: "" }), isDead);
    close();
  }
});

test("a worker that fails while loading rejects createWorkerEngine", async () => {
  const { worker, close } = setup({ load: () => new Promise(() => {}) });
  const loading = createWorkerEngine(worker, { model: new ArrayBuffer(1) });
  await tick(10);
  worker.dispatchEvent(new Event("error"));
  await assert.rejects(loading, (e) =>
    e instanceof PootError && e.code === "worker_failed" &&
    e.message === "the engine's worker failed: it could not load its script or threw an uncaught error");
  close();
});

test("fetch: the worker engine's responses cross byte for byte, streamed, and abortable", async () => {
  const { worker, log, close } = setup();
  const engine = await createWorkerEngine(worker, { model: new ArrayBuffer(1) });

  const models = await engine.fetch("http://poot.local/v1/models");
  assert.equal(models.status, 200);
  assert.equal(models.headers.get("x-poot-test"), "models");
  assert.deepEqual(await models.json(), { object: "list", data: [] });
  assert.equal(log.at(-1).method, "GET");

  const bad = await engine.fetch("http://poot.local/v1/chat/completions", { method: "POST", body: JSON.stringify({ bad: true }) });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, "bad");

  const sse = await engine.fetch(new Request("http://poot.local/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer local" },
    body: JSON.stringify({ events: 3 }),
  }));
  assert.equal(sse.headers.get("content-type"), "text/event-stream");
  assert.equal(sse.headers.get("x-poot-warnings"), '["x"]');
  assert.equal(await sse.text(), 'data: {"i":0}\n\ndata: {"i":1}\n\ndata: {"i":2}\n\ndata: [DONE]\n\n');
  assert.equal(log.at(-1).headers.find(([k]) => k === "authorization")[1], "Bearer local", "headers and body cross");
  assert.equal(log.at(-1).body, '{"events":3}');

  // Aborted mid-body: the reader errors with the signal's reason, and the worker's fetch stops.
  const controller = new AbortController();
  const slow = await engine.fetch("http://poot.local/v1/completions", { method: "POST", body: JSON.stringify({ events: 1000, gap: 5 }), signal: controller.signal });
  const reader = slow.body.getReader();
  await reader.read();
  controller.abort(new Error("stop"));
  await assert.rejects(async () => {
    for (;;) if ((await reader.read()).done) break;
  }, /stop/);
  await tick(20);
  assert.equal(log.at(-1).signal.aborted, true);
  await assert.rejects(engine.fetch("http://poot.local/v1/models", { signal: AbortSignal.abort() }), (e) => e.name === "AbortError");

  // A cancelled body stops the worker's fetch too.
  const cancelled = await engine.fetch("http://poot.local/v1/completions", { method: "POST", body: JSON.stringify({ events: 1000, gap: 5 }) });
  await cancelled.body.cancel();
  await tick(20);
  assert.equal(log.at(-1).signal.aborted, true);
  close();
});

/** A served fake engine whose request `{ crash: true }` crashes it, as a Rust panic would. */
function crashable() {
  const { port1, port2 } = new MessageChannel();
  port1.start();
  const seen = {};
  serveEngine(port1, {
    async create(opts) {
      seen.opts = opts;
      opts.onProgress?.({ phase: "parse", loaded: 1, total: 1 });
      const engine = fakeEngine(opts, []);
      const inner = engine.completions.create;
      let crashes = 0;
      engine.completions = {
        create: async (req, o) => {
          if (!req.crash) return inner(req, o);
          const error = new PootError("the engine crashed (test)", { status: 500, code: "engine_crashed" });
          crashes++;
          queueMicrotask(() => {
            opts.onCrash?.({ error, crashes });
            if (opts.recover) opts.onRecover?.({ crashes, ms: 1, modelFrom: "memory" });
          });
          throw error;
        },
      };
      return engine;
    },
  });
  return { worker: new FakeWorker(port2), seen, close: () => (port1.close(), port2.close()) };
}

test("a crash, given a function: the crashed worker is terminated, a new one loads the kept model, calls made meanwhile wait", async () => {
  const started = [];
  const events = [];
  const bytes = new Uint8Array([1, 2, 3]).buffer;
  const engine = await createWorkerEngine(
    () => {
      const s = crashable();
      started.push(s);
      return s.worker;
    },
    {
      model: bytes,
      onCrash: (e) => events.push(["crash", e.error.code, e.crashes]),
      onRecover: (e) => events.push(["recover", e.modelFrom, e.crashes]),
    },
  );
  assert.equal(bytes.byteLength, 3, "kept for a new worker: copied into a Blob, not transferred");
  assert.equal(started[0].seen.opts.recover, false, "the engine in the worker does not restart itself");
  assert.deepEqual([...new Uint8Array(await started[0].seen.opts.model.arrayBuffer())], [1, 2, 3]);

  const failed = await engine.completions.create({ crash: true }).then(() => "resolved", (e) => e);
  assert.ok(failed instanceof PootError);
  assert.equal(failed.code, "engine_crashed");
  const next = await engine.completions.create({ prompt: "x" });
  assert.equal(next.object, "text_completion", "the next call is answered, by the new worker");
  assert.equal(started.length, 2);
  assert.equal(started[0].worker.terminated, true, "the crashed worker was terminated");
  assert.notEqual(started[1].worker.terminated, true);
  assert.deepEqual([...new Uint8Array(await started[1].seen.opts.model.arrayBuffer())], [1, 2, 3], "the same model, from the kept Blob");
  assert.deepEqual(events, [["crash", "engine_crashed", 1], ["recover", "blob", 1]]);
  assert.equal(engine.crashes, 1);
  assert.deepEqual((await engine.models.list()).data.map((m) => m.id), ["fake-model"]);
  for (const s of started) s.close();
});

test("a crash, given a Worker: the engine in it restarts itself; the events are forwarded", async () => {
  const s = crashable();
  const events = [];
  const bytes = new Uint8Array([1, 2, 3]).buffer;
  const engine = await createWorkerEngine(s.worker, {
    model: bytes,
    onCrash: (e) => events.push(["crash", e.error.code, e.crashes]),
    onRecover: (e) => events.push(["recover", e.modelFrom, e.crashes]),
  });
  assert.equal(bytes.byteLength, 0, "transferred, as without recovery");
  assert.equal(s.seen.opts.recover, true);
  const failed = await engine.completions.create({ crash: true }).then(() => "resolved", (e) => e);
  assert.equal(failed.code, "engine_crashed");
  assert.equal((await engine.completions.create({ prompt: "x" })).object, "text_completion");
  await tick(10);
  assert.deepEqual(events, [["crash", "engine_crashed", 1], ["recover", "memory", 1]]);
  assert.equal(engine.crashes, 1);
  assert.notEqual(s.worker.terminated, true);
  s.close();
});
