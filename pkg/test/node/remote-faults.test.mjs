// Faults: 5xx then success, 429 with Retry-After, connection refused, a hang past the timeout,
// malformed SSE, a cut stream, truncated output, cancellation, concurrent probes, the retry policy.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import { backoffMs, createRemoteClient, DEFAULT_RETRY, RemoteError, TruncatedError } from "../../dist/remote/index.js";
import { completion, error, fakeClock, fakeServer, providerServer } from "../fixtures/remote/fake-openai.mjs";

const SCHEMA = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
const ASK = [{ role: "user", content: "Is it ok?" }];
const OK = completion('{"ok": true}');

/** A client with structured decoding off (no probe traffic) and a fake clock. */
function plainClient(server, extra = {}) {
  const clock = extra.clock ?? fakeClock();
  return { clock, client: createRemoteClient({ baseURL: server.url, model: "m", structuredDecoding: "off", clock, ...extra }) };
}

/** A port nothing listens on. */
async function closedPort() {
  const server = http.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test("the default policy is 3 attempts, 500 ms base, 20 s ceiling", () => {
  assert.deepEqual({ ...DEFAULT_RETRY }, { attempts: 3, baseMs: 500, ceilingMs: 20_000 });
});

test("backoff is exponential with full jitter, and a server hint wins, clamped", () => {
  const p = DEFAULT_RETRY;
  assert.equal(backoffMs(p, 1, null, () => 0), 0);
  assert.equal(backoffMs(p, 1, null, () => 0.5), 250);
  assert.equal(backoffMs(p, 2, null, () => 0.5), 500);
  assert.equal(backoffMs(p, 10, null, () => 0.999999), 19_999); // window capped at the ceiling
  for (let retry = 1; retry <= 8; retry++) {
    for (let i = 0; i < 50; i++) {
      const ms = backoffMs(p, retry, null, Math.random);
      assert.ok(ms >= 0 && ms < Math.min(20_000, 500 * 2 ** (retry - 1)));
    }
  }
  assert.equal(backoffMs(p, 1, 1500, () => 0.9), 1500);
  assert.equal(backoffMs(p, 1, 3_600_000, () => 0.9), 20_000);
  assert.equal(backoffMs(p, 1, -5, () => 0.9), 0);
});

test("5xx then success: retried with jittered backoff, attempts counted", async () => {
  let n = 0;
  const server = await fakeServer(() => (++n <= 2 ? error(502, "bad gateway") : OK));
  try {
    const { client, clock } = plainClient(server);
    const result = await client.structured({ messages: ASK, schema: SCHEMA });
    assert.deepEqual(result.value, { ok: true });
    assert.equal(result.attempts, 3);
    assert.deepEqual(clock.sleeps, [250, 500]); // random() = 0.5 over windows of 500 and 1000
  } finally {
    await server.close();
  }
});

test("5xx three times: the transient error surfaces after exactly 3 requests", async () => {
  const server = await fakeServer(() => error(500, "internal error"));
  try {
    const { client } = plainClient(server);
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA }), (e) => {
      assert.ok(e instanceof RemoteError);
      assert.equal(e.kind, "transient");
      assert.equal(e.status, 500);
      assert.equal(e.attempts, 3);
      assert.equal(e.message, "HTTP 500: internal error");
      return true;
    });
    assert.equal(server.chats.length, 3);
  } finally {
    await server.close();
  }
});

test("429 with Retry-After: the hint wins over jitter; retry-after-ms wins over Retry-After; clamped to 20 s", async () => {
  for (const [headers, expected] of [
    [{ "retry-after": "2" }, 2000],
    [{ "retry-after-ms": "150", "retry-after": "7" }, 150],
    [{ "retry-after": "3600" }, 20_000],
  ]) {
    let n = 0;
    const server = await fakeServer(() => (++n === 1 ? { ...error(429, "Rate limit reached"), headers } : OK));
    try {
      const { client, clock } = plainClient(server);
      const result = await client.structured({ messages: ASK, schema: SCHEMA });
      assert.equal(result.attempts, 2);
      assert.deepEqual(clock.sleeps, [expected], JSON.stringify(headers));
    } finally {
      await server.close();
    }
  }
});

test("Retry-After as an HTTP date is relative to the clock", async () => {
  let n = 0;
  const clock = fakeClock(Date.parse("2030-01-01T00:00:00Z"));
  const server = await fakeServer(() =>
    ++n === 1 ? { ...error(503, "overloaded"), headers: { "retry-after": "Tue, 01 Jan 2030 00:00:03 GMT" } } : OK,
  );
  try {
    const { client } = plainClient(server, { clock });
    await client.structured({ messages: ASK, schema: SCHEMA });
    assert.deepEqual(clock.sleeps, [3000]);
  } finally {
    await server.close();
  }
});

test("connection refused: transient, 3 attempts, then a clear error; the probe degrades without throwing", async () => {
  const port = await closedPort();
  const clock = fakeClock();
  const client = createRemoteClient({ baseURL: `http://127.0.0.1:${port}/v1`, model: "m", provider: "vllm", clock });
  const caps = await client.probe();
  assert.equal(caps.probed, false);
  assert.deepEqual(caps.ladder, ["prompt_only"]);
  assert.match(caps.why, /^the endpoint is unreachable \(cannot reach http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions: connect ECONNREFUSED 127\.0\.0\.1:\d+\)$/);
  await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA }), (e) => {
    assert.equal(e.kind, "transient");
    assert.equal(e.status, 0);
    assert.equal(e.attempts, 3);
    assert.match(e.message, /^cannot reach http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions: connect ECONNREFUSED 127\.0\.0\.1:\d+$/);
    return true;
  });
});

test("a hang past the timeout: the request is canceled (not retried), the probe returns within its limit", async () => {
  const server = await fakeServer(() => ({ hang: true }));
  try {
    const { client } = plainClient(server, { timeoutMs: 150 });
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA }), (e) => {
      assert.equal(e.kind, "canceled");
      assert.equal(e.code, "timeout");
      assert.match(e.message, /timed out after 150 ms$/);
      return true;
    });
    assert.equal(server.chats.length, 1);

    const prober = createRemoteClient({ baseURL: server.url, model: "m2", provider: "generic", probeTimeoutMs: 300, gbnf: async () => "root ::= x" });
    const started = Date.now();
    const caps = await prober.probe();
    const took = Date.now() - started;
    assert.ok(took < 1500, `the probe took ${took} ms`);
    assert.equal(caps.probed, false);
    assert.deepEqual(caps.ladder, ["prompt_only"]);
  } finally {
    await server.close();
  }
});

test("the probe's own limit holds even when the clock is frozen and every request hangs", async () => {
  const server = await fakeServer(() => ({ hang: true }));
  try {
    const frozen = { now: () => 0, sleep: async () => {}, random: () => 0 };
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "llamacpp", probeTimeoutMs: 200, clock: frozen, gbnf: async () => "g" });
    const started = Date.now();
    const caps = await client.probe();
    assert.ok(Date.now() - started < 1500);
    assert.equal(caps.probed, false);
  } finally {
    await server.close();
  }
});

test("malformed SSE is an unknown error, not retried", async () => {
  const server = await fakeServer(() => ({ sse: ['data: {"choices":[{"delta":{"content":"{\\"ok\\""}}]}\n\n', "data: {not json\n\n"] }));
  try {
    const { client } = plainClient(server);
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA, stream: true }), (e) => {
      assert.equal(e.kind, "unknown");
      assert.equal(e.message, `malformed server-sent event from ${server.url}/chat/completions: data is not JSON: "{not json"`);
      return true;
    });
    assert.equal(server.chats.length, 1);
    assert.equal(server.chats[0].body.stream, true);
  } finally {
    await server.close();
  }
});

test("a stream cut before [DONE] is transient and retried; a whole stream is assembled", async () => {
  let n = 0;
  const chunk = (content, finish = null) => ({ choices: [{ index: 0, delta: { content }, finish_reason: finish }] });
  const server = await fakeServer(() =>
    ++n === 1 ? { sse: [chunk('{"ok"')], done: false } : { sse: [chunk('{"ok"'), chunk(": true}"), chunk("", "stop")] },
  );
  try {
    const { client } = plainClient(server);
    const result = await client.structured({ messages: ASK, schema: SCHEMA, stream: true });
    assert.deepEqual(result.value, { ok: true });
    assert.equal(result.attempts, 2);
    assert.equal(result.finishReason, "stop");
  } finally {
    await server.close();
  }
});

test("truncated output: finish_reason length gives TruncatedError, not a repair", async () => {
  const server = await fakeServer(() => completion('{"ok": true, "note": "this was going to be a long', "length"));
  try {
    const { client } = plainClient(server);
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA, maxTokens: 12 }), (e) => {
      assert.ok(e instanceof TruncatedError);
      assert.equal(e.finishReason, "length");
      assert.equal(e.message, 'the output was cut off (finish_reason "length") after 49 characters; raise maxTokens or ask again instead of repairing it');
      return true;
    });
    assert.equal(client.stats.outcomes.truncated, 1);
  } finally {
    await server.close();
  }
});

test("AbortSignal: aborting mid-request and during a retry wait both end in canceled, without further requests", async () => {
  const hang = await fakeServer(() => ({ hang: true }));
  try {
    const { client } = plainClient(hang);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA, signal: controller.signal }), (e) => {
      assert.equal(e.kind, "canceled");
      assert.equal(e.code, null);
      return true;
    });
  } finally {
    await hang.close();
  }
  const flaky = await fakeServer(() => error(503, "busy"));
  try {
    const controller = new AbortController();
    const client = createRemoteClient({
      baseURL: flaky.url,
      model: "m",
      structuredDecoding: "off",
      clock: { random: () => 0.99 }, // a real sleep of ~495 ms, aborted after 30
    });
    setTimeout(() => controller.abort(), 30);
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA, signal: controller.signal }), (e) => e.kind === "canceled");
    assert.equal(flaky.chats.length, 1);
  } finally {
    await flaky.close();
  }
  // Already aborted: nothing is sent; probe() resolves (never throws) with the floor.
  const server = await providerServer("vllm012");
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" });
    const caps = await client.probe({ signal: AbortSignal.abort() });
    assert.equal(caps.probed, false);
    assert.equal(caps.why, "the probe was canceled");
    const before = server.chats.length;
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA, signal: AbortSignal.abort() }), (e) => e.kind === "canceled");
    assert.equal(server.chats.length, before);
  } finally {
    await server.close();
  }
});

test("concurrent callers collapse onto one probe", async () => {
  const server = await providerServer("vllm012");
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" });
    const other = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" });
    const all = await Promise.all([
      ...Array.from({ length: 8 }, () => client.probe()),
      other.probe(),
      ...Array.from({ length: 4 }, () => client.structured({ messages: ASK, schema: SCHEMA })),
    ]);
    const probeRequests = server.chats.filter((r) => r.body.max_tokens === 32 && r.body.messages.at(-1).content === "Say hello.");
    assert.equal(probeRequests.length, 4); // json_schema, structured_outputs, guided_json, json_object: once each
    assert.ok(all.slice(0, 9).every((caps) => caps === all[0]));
  } finally {
    await server.close();
  }
});

test("an inconclusive probe is not trusted, not persisted, and retried in the background after a while", async () => {
  let up = false;
  const server = await providerServer("vllm012", { override: (r) => (up ? null : r.method === "POST" ? error(503, "Loading model") : null) });
  const saved = [];
  const cache = { get: async () => undefined, set: async (key, caps) => void saved.push(caps) };
  try {
    const clock = fakeClock();
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm", clock, cache });
    const cold = await client.probe();
    assert.equal(cold.probed, false);
    assert.equal(saved.length, 0);
    up = true;
    assert.equal(await client.probe(), cold, "memoised for a while");
    clock.t += 30_001;
    // Due again: retried in the background; the caller is answered with what it had.
    assert.equal(await client.probe(), cold, "not on the caller's path");
    let warm = cold;
    for (let i = 0; i < 100 && !warm.probed; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      warm = await client.probe();
    }
    assert.equal(warm.probed, true);
    assert.equal(saved.length, 1);
  } finally {
    await server.close();
  }
});

test("a 200 whose body is not JSON is unknown and not retried", async () => {
  const server = await fakeServer(() => ({ status: 200, text: "<html>proxy login</html>" }));
  try {
    const { client } = plainClient(server);
    await assert.rejects(client.structured({ messages: ASK, schema: SCHEMA }), (e) => {
      assert.equal(e.kind, "unknown");
      assert.equal(e.message, `the response from ${server.url}/chat/completions is not JSON: "<html>proxy login</html>"`);
      return true;
    });
    assert.equal(server.chats.length, 1);
  } finally {
    await server.close();
  }
});
