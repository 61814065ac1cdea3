// Loading a model into the engine: from a URL (download progress from Content-Length, a
// Cache Storage copy reused by the next load, a length-less download, 404s), from a Blob or an
// ArrayBuffer, and the errors for what cannot be loaded (not GGUF, another architecture, more
// than wasm memory holds, WebGPU asked for where there is none). Node has no Cache Storage:
// an in-memory one with the same surface stands in. Needs POOT_REFERENCE_GGUF and
// POOT_GEMMA_GGUF (Gemma 3 270M, the architecture refused).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";

import { createEngine, PootError } from "../../dist/index.js";
import init, { ModelBytes } from "../../wasm/poot.js";

const MODEL = process.env.POOT_REFERENCE_GGUF;
const WASM = readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url));
await init({ module_or_path: WASM });

let file;
let server;
let base;
const hits = [];
before(async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  file = readFileSync(MODEL);
  server = createServer((req, res) => {
    hits.push(req.url);
    if (req.url === "/model.gguf") {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": file.length });
      res.end(file);
    } else if (req.url === "/chunked.gguf") {
      res.writeHead(200, { "content-type": "application/octet-stream" }); // no length: chunked
      for (let at = 0; at < file.length; at += 1 << 20) res.write(file.subarray(at, at + (1 << 20)));
      res.end();
    } else if (req.url === "/page.html") {
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<!DOCTYPE html><html><body>SmolLM2 download page</body></html>");
    } else {
      res.writeHead(404, { "content-type": "text/plain" });
      res.end("not found");
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});
after(async () => {
  await new Promise((resolve) => server?.close(resolve));
  delete globalThis.caches;
});

/** Cache Storage's surface (open/match/put/delete), in memory. */
function memoryCaches() {
  const buckets = new Map();
  return {
    buckets,
    async open(name) {
      if (!buckets.has(name)) buckets.set(name, new Map());
      const entries = buckets.get(name);
      return {
        async match(url) {
          const hit = entries.get(String(url));
          return hit && new Response(hit.bytes, { headers: hit.headers });
        },
        async put(url, response) {
          const bytes = new Uint8Array(await response.arrayBuffer());
          entries.set(String(url), { bytes, headers: new Headers(response.headers) });
        },
        async delete(url) {
          return entries.delete(String(url));
        },
      };
    },
  };
}

async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("expected a rejection");
}

async function smoke(engine) {
  const reply = await engine.completions.create({ prompt: "yes or no:", guided_choice: ["yes", "no"] });
  assert.ok(["yes", "no"].includes(reply.choices[0].text));
  await engine.unload();
}

test("a URL downloads with progress into Cache Storage, and the next load reads the cache", async () => {
  const caches = memoryCaches();
  globalThis.caches = caches;
  try {
    const events = [];
    const url = `${base}/model.gguf`;
    const engine = await createEngine({ model: url, wasm: WASM, backend: "cpu", onProgress: (p) => events.push(p) });
    assert.equal(engine.model.bytes, file.length);
    const download = events.filter((e) => e.phase === "download");
    assert.ok(download.length > 2, "several download events");
    assert.deepEqual(download[0], { phase: "download", loaded: 0, total: file.length });
    assert.deepEqual(download.at(-1), { phase: "download", loaded: file.length, total: file.length });
    assert.ok(download.every((e, i) => i === 0 || e.loaded > download[i - 1].loaded), "progress only grows");
    assert.deepEqual(events.filter((e) => e.phase === "parse").at(-1), { phase: "parse", loaded: file.length, total: file.length });
    assert.deepEqual([...new Set(events.map((e) => e.phase))], ["download", "parse"]);
    await smoke(engine);
    assert.equal(caches.buckets.get("poot-models").get(url).bytes.length, file.length, "the whole file is cached");

    const before = hits.length;
    const again = [];
    const cached = await createEngine({ model: new URL(url), wasm: WASM, backend: "cpu", onProgress: (p) => again.push(p) });
    assert.equal(hits.length, before, "no second download");
    assert.deepEqual([...new Set(again.map((e) => e.phase))], ["cache", "parse"]);
    assert.deepEqual(again.filter((e) => e.phase === "cache").at(-1), { phase: "cache", loaded: file.length, total: file.length });
    await smoke(cached);

    // A named bucket, and no cache at all.
    await (await createEngine({ model: url, wasm: WASM, backend: "cpu", cache: "mine" })).unload();
    assert.ok(caches.buckets.get("mine").has(url));
    const count = hits.length;
    await (await createEngine({ model: url, wasm: WASM, backend: "cpu", cache: false })).unload();
    assert.equal(hits.length, count + 1, "cache: false downloads");
  } finally {
    delete globalThis.caches;
  }
});

test("a download without Content-Length loads, with progress of unknown total", async () => {
  const events = [];
  const engine = await createEngine({ model: `${base}/chunked.gguf`, wasm: WASM, backend: "cpu", onProgress: (p) => events.push(p) });
  const download = events.filter((e) => e.phase === "download");
  assert.ok(download.every((e) => e.total === undefined));
  assert.equal(download.at(-1).loaded, file.length);
  await smoke(engine);
});

test("a 404 names the URL and the status", async () => {
  const url = `${base}/missing.gguf`;
  const err = await rejection(createEngine({ model: url, wasm: WASM }));
  assert.ok(err instanceof PootError);
  assert.equal(err.message, `could not download the model from ${url}: HTTP 404 Not Found`);
  assert.equal(err.code, "model_download_failed");
  assert.equal(err.param, "model");
  const refused = await rejection(createEngine({ model: "http://127.0.0.1:1/model.gguf", wasm: WASM }));
  assert.match(refused.message, /^could not download the model from http:\/\/127\.0\.0\.1:1\/model\.gguf: /);
  const relative = await rejection(createEngine({ model: "models/x.gguf", wasm: WASM }));
  assert.match(relative.message, /^model `models\/x\.gguf` is not a URL \(outside a page, pass an absolute URL/);
});

test("what is not a GGUF of a supported architecture is refused with a clear error", async () => {
  const page = await rejection(createEngine({ model: `${base}/page.html`, wasm: WASM }));
  assert.equal(
    page.message,
    "the model is not a GGUF file: it starts with `<!DOCTYPE html><`, not `GGUF` (an HTML page: is the URL the file itself, not a page about it?)",
  );
  assert.equal(page.status, 400);
  assert.equal(page.param, "model");
  const empty = await rejection(createEngine({ model: new Uint8Array(0), wasm: WASM }));
  assert.equal(empty.message, "the model is not a GGUF file: it starts with ``, not `GGUF` (the file is empty)");
  const mamba = await rejection(createEngine({ model: tinyGguf({ "general.architecture": "mamba" }), wasm: WASM }));
  assert.equal(mamba.message, "GGUF model: architecture `mamba` is not supported (llama, qwen2, qwen3, gemma3 and phi3 are)");
  assert.equal(mamba.param, "model");
  const truncated = await rejection(createEngine({ model: file.subarray(0, 4 << 20), wasm: WASM }));
  assert.match(truncated.message, /extends past the end of the file/);
  const wrong = await rejection(createEngine({ model: 42, wasm: WASM }));
  assert.equal(wrong.message, "model must be a URL, a Blob/File, an ArrayBuffer or a Uint8Array, got number");
});

test("a file larger than wasm memory is refused before any copy", () => {
  assert.throws(() => new ModelBytes(5e9), (e) => {
    assert.equal(e.code, "limit_exceeded");
    assert.equal(e.param, "model");
    assert.match(e.message, /^the model file needs 5000000000 bytes, more than this wasm instance can hold/);
    return true;
  });
});

test("WebGPU asked for where there is none fails before loading; bad options are 400s", async () => {
  const err = await rejection(createEngine({ model: `${base}/model.gguf`, wasm: WASM, backend: "webgpu" }));
  assert.equal(err.code, "webgpu_unavailable");
  assert.equal(err.message, "WebGPU is not available here (navigator.gpu is missing)");
  const backend = await rejection(createEngine({ model: file, wasm: WASM, backend: "metal" }));
  assert.equal(backend.message, 'backend must be "webgpu", "cpu" or "auto", got "metal"');
  assert.equal(backend.param, "backend");
  const none = await rejection(createEngine({ wasm: WASM }));
  assert.equal(none.param, "model");
});

test("an ArrayBuffer and a Blob load; an aborted load rejects", async () => {
  const buffer = file.buffer.slice(file.byteOffset, file.byteOffset + file.length);
  const events = [];
  const engine = await createEngine({ model: buffer, wasm: WASM, backend: "auto", onProgress: (p) => events.push(p) });
  assert.deepEqual([...new Set(events.map((e) => e.phase))], ["parse"]);
  assert.equal(events.at(-1).loaded, file.length);
  await smoke(engine);
  const controller = new AbortController();
  controller.abort();
  const err = await rejection(createEngine({ model: new Blob([file]), wasm: WASM, signal: controller.signal }));
  assert.equal(err.name, "AbortError");
  const download = new AbortController();
  const pending = createEngine({
    model: `${base}/model.gguf`,
    wasm: WASM,
    cache: false,
    signal: download.signal,
    onProgress: (p) => p.phase === "download" && p.loaded > 0 && download.abort(),
  });
  assert.equal((await rejection(pending)).name, "AbortError");
});

/** A GGUF v3 file with string metadata and no tensors. */
function tinyGguf(metadata) {
  const parts = [];
  const u32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    parts.push(b);
  };
  const u64 = (n) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    parts.push(b);
  };
  const str = (s) => {
    const b = Buffer.from(s, "utf8");
    u64(b.length);
    parts.push(b);
  };
  parts.push(Buffer.from("GGUF"));
  u32(3);
  u64(0);
  u64(Object.keys(metadata).length);
  for (const [k, v] of Object.entries(metadata)) {
    str(k);
    u32(8); // string
    str(v);
  }
  return new Uint8Array(Buffer.concat(parts));
}

test("limits tighten what every request of the engine may compile; a bad one fails before the model is read", async () => {
  const engine = await createEngine({ model: file, wasm: WASM, backend: "cpu", limits: { schema_bytes: 64 } });
  const schema = { type: "object", properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" } }, required: ["name", "age"] };
  const err = await rejection(engine.chat.completions.create({ messages: [{ role: "user", content: "hi" }], max_tokens: 4, guided_json: schema }));
  assert.equal(err.code, "limit_exceeded");
  assert.equal(err.param, "guided_json");
  assert.match(err.message, /over the 64-byte limit/);
  // Within the tightened bound a request still runs.
  const reply = await engine.completions.create({ prompt: "yes or no:", guided_choice: ["yes", "no"] });
  assert.ok(["yes", "no"].includes(reply.choices[0].text));
  await engine.unload();
  // Checked before the download: the URL is never fetched (it would fail with ECONNREFUSED).
  const bad = await rejection(createEngine({ model: "http://127.0.0.1:1/model.gguf", wasm: WASM, limits: { schema_bytes: 0 } }));
  assert.equal(bad.code, "invalid_input");
  assert.equal(bad.param, "limits");
  assert.equal(bad.message, "limits: `schema_bytes` must be an integer from 1 to its default, 16384");
});

test("Gemma 3 270M (a gemma3 file with no chat template) loads and answers chat under guided_json", { timeout: 300_000 }, async () => {
  assert.ok(process.env.POOT_GEMMA_GGUF, "POOT_GEMMA_GGUF must name gemma-3-270m-q4_k_m.gguf (make test sets it)");
  const engine = await createEngine({ model: new Blob([readFileSync(process.env.POOT_GEMMA_GGUF)]), wasm: WASM, backend: "cpu" });
  assert.equal(engine.model.architecture, "gemma3");
  assert.equal(engine.model.vocabSize, 262144);
  const schema = { type: "object", properties: { city: { type: "string", maxLength: 20 } }, required: ["city"], additionalProperties: false };
  const t0 = performance.now();
  const reply = await engine.chat.completions.create({
    messages: [{ role: "user", content: "What is the capital of France? Answer in JSON." }],
    response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
    temperature: 0,
    max_tokens: 24,
  });
  const ms = performance.now() - t0;
  const value = JSON.parse(reply.choices[0].message.content);
  assert.deepEqual(Object.keys(value), ["city"]);
  assert.equal(typeof value.city, "string");
  console.log(`Gemma 3 270M (wasm CPU): ${JSON.stringify(value)} in ${reply.usage.completion_tokens} tokens, ${(ms / 1000).toFixed(1)} s`);
  await engine.unload();
});
