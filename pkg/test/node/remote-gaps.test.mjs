// Assertions for behaviour of poot/remote that the other remote tests exercised only indirectly:
// the injected fetch and retry options, `raw`, the 20 s default probe limit, the memo key, a probe
// the endpoint refuses (401/403/404) or a persisted result that is not trusted, a cache that never
// answers, AbortSignal on probe (mid-flight), doctor() and chat(), and every construct portable()
// names.
import { test } from "node:test";
import assert from "node:assert/strict";

import { createRemoteClient, portable, PROBE_TIMEOUT_MS } from "../../dist/remote/index.js";
import { completion, error, fakeClock, fakeServer, providerServer } from "../fixtures/remote/fake-openai.mjs";

const SCHEMA = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
const ASK = [{ role: "user", content: "Is it ok?" }];
const probesOf = (server) => server.chats.filter((r) => r.body.max_tokens === 32 && r.body.messages.at(-1).content === "Say hello.");

test("the probe's default limit is 20 s", () => {
  assert.equal(PROBE_TIMEOUT_MS, 20_000);
});

test("the fetch option carries every request; the retry option changes the policy; raw is the text as it arrived", async () => {
  const server = await fakeServer(() => error(502, "bad gateway"));
  try {
    const seen = [];
    const fetch = (input, init) => {
      seen.push(String(input));
      return globalThis.fetch(input, init);
    };
    const clock = fakeClock();
    const client = createRemoteClient({ baseURL: server.url, model: "m", structuredDecoding: "off", fetch, clock, retry: { attempts: 5, baseMs: 100, ceilingMs: 300 } });
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA }), (e) => e.kind === "transient" && e.attempts === 5);
    assert.equal(server.chats.length, 5);
    assert.equal(seen.length, 5);
    assert.ok(seen.every((u) => u === `${server.url}/chat/completions`));
    assert.deepEqual(clock.sleeps, [50, 100, 150, 150]); // random 0.5 over windows 100, 200, 400->300, 800->300
  } finally {
    await server.close();
  }
  const raw = 'Sure:\n```json\n{"ok": true}\n```';
  const ok = await fakeServer(() => completion(raw));
  try {
    const client = createRemoteClient({ baseURL: ok.url, model: "m", structuredDecoding: "off" });
    const result = await client.structured({ messages: ASK, schema: SCHEMA });
    assert.equal(result.raw, raw);
    assert.deepEqual(result.value, { ok: true });
    assert.equal(result.rung, "fence");
    assert.equal(result.attempts, 1);
  } finally {
    await ok.close();
  }
});

test("the memo is keyed by (provider, endpoint, model): another provider or model probes again", async () => {
  const server = await providerServer("vllm012");
  try {
    await createRemoteClient({ baseURL: server.url, model: "k1", provider: "vllm" }).probe();
    const one = probesOf(server).length;
    assert.equal(one, 4);
    await createRemoteClient({ baseURL: `${server.url}/`, model: "k1", provider: "vllm" }).probe(); // same endpoint, normalised
    assert.equal(probesOf(server).length, one);
    await createRemoteClient({ baseURL: server.url, model: "k1", provider: "ollama" }).probe();
    assert.equal(probesOf(server).length, one + 2); // ollama: json_schema and json_object only
    await createRemoteClient({ baseURL: server.url, model: "k2", provider: "vllm" }).probe();
    assert.equal(probesOf(server).length, one + 2 + 4);
  } finally {
    await server.close();
  }
});

test("a probe the endpoint refuses with 401, 403 or 404 stops there, is not trusted and not persisted", async () => {
  for (const [status, message] of [
    [401, "Incorrect API key provided"],
    [403, "Forbidden"],
    [404, "The model `m` does not exist"],
  ]) {
    const server = await fakeServer((r) => (r.method === "POST" ? error(status, message) : { status: 200, json: { data: [] } }));
    const saved = [];
    try {
      const cache = { get: async () => undefined, set: async (k, caps) => void saved.push(caps) };
      const caps = await createRemoteClient({ baseURL: server.url, model: `m${status}`, provider: "generic", cache, gbnf: async () => "root ::= x" }).probe();
      assert.equal(caps.probed, false, String(status));
      assert.deepEqual(caps.ladder, ["prompt_only"]);
      assert.equal(caps.why, `the endpoint refused the probe (HTTP ${status}: ${message}), so nothing else was tried`);
      assert.equal(server.chats.length, 1, "nothing else was tried");
      assert.deepEqual(
        caps.candidates.map((c) => c.verdict),
        ["error", "not_probed", "not_probed", "not_probed", "not_probed"],
      );
      assert.equal(saved.length, 0);
    } finally {
      await server.close();
    }
  }
});

test("a persisted result is trusted only when it came from a successful probe", async () => {
  const server = await providerServer("vllm012");
  try {
    const key = `vllm|${server.url}|persisted`;
    const untrusted = { probed: false, ladder: ["json_schema", "prompt_only"], strict: true, candidates: [], demotions: [], why: "a prior" };
    const stored = new Map([[key, untrusted]]);
    const cache = { get: async (k) => stored.get(k), set: async (k, v) => void stored.set(k, v) };
    const caps = await createRemoteClient({ baseURL: server.url, model: "persisted", provider: "vllm", cache }).probe();
    assert.equal(probesOf(server).length, 4, "an untrusted entry is probed again");
    assert.equal(caps.probed, true);
    assert.equal(stored.get(key).probed, true);
  } finally {
    await server.close();
  }
});

test("a cache that never answers does not hold the probe past its limit", async () => {
  const server = await providerServer("vllm012");
  try {
    const never = new Promise(() => {});
    const cache = { get: () => never, set: () => never };
    const client = createRemoteClient({ baseURL: server.url, model: "hung-cache", provider: "vllm", cache, probeTimeoutMs: 300 });
    const started = Date.now();
    const caps = await Promise.race([client.probe(), new Promise((resolve) => setTimeout(() => resolve("hung"), 3000))]);
    assert.notEqual(caps, "hung", "probe() waited on the cache past its limit");
    assert.ok(Date.now() - started < 1500, `the probe took ${Date.now() - started} ms`);
  } finally {
    await server.close();
  }
});

test("AbortSignal: a probe aborted mid-flight resolves with the floor; doctor() and chat() honour the signal", async () => {
  const server = await fakeServer(() => ({ hang: true }));
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "abort-me", provider: "vllm", probeTimeoutMs: 10_000 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const started = Date.now();
    const caps = await client.probe({ signal: controller.signal });
    assert.ok(Date.now() - started < 1000);
    assert.equal(caps.probed, false);
    assert.equal(caps.why, "the probe was canceled");

    const chatAbort = new AbortController();
    setTimeout(() => chatAbort.abort(), 50);
    await assert.rejects(client.chat({ messages: ASK, signal: chatAbort.signal }), (e) => e.name === "RemoteError" && e.kind === "canceled");

    const doctorAbort = new AbortController();
    setTimeout(() => doctorAbort.abort(), 50);
    const doctorStarted = Date.now();
    const report = await createRemoteClient({ baseURL: server.url, model: "abort-doctor", provider: "vllm", probeTimeoutMs: 10_000 }).doctor({ signal: doctorAbort.signal });
    assert.ok(Date.now() - doctorStarted < 1000, `doctor() took ${Date.now() - doctorStarted} ms`);
    assert.equal(report.reachable, false);
    assert.match(report.reachability, /^unreachable: the request to .*\/models was canceled$/);
    assert.equal(report.mechanism, "prompt_only");
    assert.equal(report.why, "the probe was canceled");
  } finally {
    await server.close();
  }
});

test("portable() names every construct the spec avoids", () => {
  const cases = [
    [{ type: "array", items: { type: "integer" }, contains: { minimum: 1 } }, "/contains contains"],
    [{ type: "object", if: { required: ["a"] }, then: { required: ["b"] }, else: { required: ["c"] } }, "/if if,/then then,/else else"],
    [{ type: "array", prefixItems: [{ type: "string" }] }, "/prefixItems prefixItems"],
    [{ oneOf: [{ type: "string" }, { type: "integer" }] }, "/oneOf oneOf"],
    [{ allOf: [{ type: "string" }, { maxLength: 3 }] }, "/allOf allOf"],
    [{ type: "integer", maximum: 2.5 }, "/maximum maximum"],
    [{ type: "array", items: [{ type: "string" }] }, "/items items"],
  ];
  for (const [schema, expected] of cases) {
    const got = portable(schema);
    assert.equal(got.portable, false, JSON.stringify(schema));
    assert.equal(got.issues.map((i) => `${i.path} ${i.keyword}`).join(","), expected, JSON.stringify(schema));
  }
  const inside = {
    type: "object",
    properties: {
      n: { type: "integer", minimum: 0, maximum: 9 },
      s: { type: "string", minLength: 1, maxLength: 8, description: "d" },
      e: { enum: ["a", "b"] },
      l: { type: "array", items: { $ref: "#/definitions/x" }, minItems: 1, maxItems: 3 },
    },
    required: ["n"],
    additionalProperties: false,
    definitions: { x: { type: "boolean" } },
  };
  assert.deepEqual(portable(inside), { portable: true, issues: [] });
});
