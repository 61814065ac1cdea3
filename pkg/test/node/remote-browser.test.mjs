// poot/remote in a real browser (the system Chromium, headless): it imports without fetching the
// wasm, talks to an OpenAI-compatible endpoint with the browser's fetch, persists probes in
// IndexedDB and localStorage, and loads the wasm only when the grammar rung is reached.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import http from "node:http";
import { extname } from "node:path";

import { launch, openPage } from "../browser/chromium.mjs";
import { behaviours } from "../fixtures/remote/fake-openai.mjs";

const PKG = new URL("../../", import.meta.url);
const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".html": "text/html", ".map": "application/json" };

/** Serves pkg/ (dist/, wasm/) and, under /v1, the llamacpp fake; records every path. */
async function serve() {
  const paths = [];
  const server = http.createServer(async (req, res) => {
    paths.push(req.url);
    if (req.url.startsWith("/v1/")) {
      let raw = "";
      for await (const chunk of req) raw += chunk;
      const reply = req.method === "GET" ? { status: 200, json: { data: [{ id: "m" }] } } : behaviours.llamacpp(JSON.parse(raw));
      res.writeHead(reply.status, { "content-type": "application/json" });
      res.end(JSON.stringify(reply.json));
      return;
    }
    if (req.url === "/favicon.ico") {
      res.writeHead(204);
      res.end();
      return;
    }
    if (req.url === "/") {
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<!doctype html><title>poot remote</title>");
      return;
    }
    try {
      const body = await readFile(new URL(`.${req.url.split("?")[0]}`, PKG));
      res.writeHead(200, { "content-type": TYPES[extname(req.url)] ?? "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, paths, close: () => new Promise((r) => server.close(r)) };
}

test("poot/remote in Chromium: no wasm until the grammar rung, probes persisted in IndexedDB and localStorage", async () => {
  const server = await serve();
  const browser = await launch();
  try {
    const { page, errors } = await openPage(browser.context, server.url);
    const first = await page.evaluate(async () => {
      const remote = await import("/dist/remote/index.js");
      const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
      const ask = [{ role: "user", content: "ok?" }];
      const client = remote.createRemoteClient({ baseURL: `${location.origin}/v1`, model: "m", provider: "ollama", cache: remote.indexedDBCache("poot-test") });
      const caps = await client.probe();
      const result = await client.structured({ messages: ask, schema });
      const local = remote.createRemoteClient({ baseURL: `${location.origin}/v1`, model: "m2", provider: "ollama", cache: remote.localStorageCache() });
      await local.probe();
      remote.forgetProbes();
      const again = remote.createRemoteClient({ baseURL: `${location.origin}/v1`, model: "m", provider: "ollama", cache: remote.indexedDBCache("poot-test") });
      const cached = await again.probe();
      return {
        ladder: caps.ladder,
        value: result.value,
        mechanism: result.mechanism,
        cachedLadder: cached.ladder,
        stored: Object.keys(localStorage),
        repaired: remote.repair("```json\n{'ok': True,}\n```").value,
      };
    });
    assert.deepEqual(errors, []);
    assert.deepEqual(first.ladder, ["json_schema", "prompt_only"]);
    assert.deepEqual(first.value, { ok: true });
    assert.equal(first.mechanism, "json_schema");
    assert.deepEqual(first.cachedLadder, first.ladder);
    assert.deepEqual(first.stored, [`poot:capabilities:ollama|${server.url}/v1|m2`]);
    assert.deepEqual(first.repaired, { ok: true });
    const probes = server.paths.filter((p) => p === "/v1/chat/completions").length;
    // Two probe requests (json_schema, json_object) per fresh probe, one for the call; the reborn
    // client reads IndexedDB and sends nothing.
    assert.equal(probes, 2 + 1 + 2);
    assert.deepEqual(server.paths.filter((p) => /wasm/.test(p)), [], "the wasm was fetched without a grammar rung");

    // The llamacpp preset reaches the grammar rung: the default converter loads the wasm lazily.
    const grammar = await page.evaluate(async () => {
      const remote = await import("/dist/remote/index.js");
      const caps = await remote.createRemoteClient({ baseURL: `${location.origin}/v1`, model: "m3", provider: "llamacpp" }).probe();
      return caps.candidates.find((c) => c.mechanism === "gbnf_grammar");
    });
    assert.equal(grammar.verdict, "pass", grammar.detail);
    assert.ok(server.paths.includes("/dist/wasm.js"), "the grammar rung imports the wasm module on demand");
    assert.ok(server.paths.some((p) => p.endsWith("poot_bg.wasm")), "the wasm binary is fetched for the grammar rung");
  } finally {
    await browser.close();
    await server.close();
  }
});
