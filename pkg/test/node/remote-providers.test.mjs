// The probe and the ladder against one fake server per provider behaviour: which mechanisms each
// preset ends up with, and request-time demotion when a server refuses a field it took before.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { createRemoteClient, directoryCache, forgetProbes, isValid } from "../../dist/remote/index.js";
import { error, fakeClock, fakeGbnf, mechanismOf, providerServer } from "../fixtures/remote/fake-openai.mjs";

const PERSON = {
  type: "object",
  properties: { name: { type: "string" }, age: { type: "integer" }, tags: { type: "array", items: { enum: ["a", "b"] } } },
  required: ["name", "age", "tags"],
  additionalProperties: false,
};
const ASK = [{ role: "user", content: "Describe someone." }];
const noWasm = async () => {
  throw new Error("no converter in this test");
};

/** Probes `server` with `provider` and returns the ladder; also checks a structured call. */
async function ladderOf(server, provider, extra = {}) {
  const client = createRemoteClient({ baseURL: server.url, model: "fake-model", provider, gbnf: noWasm, ...extra });
  const caps = await client.probe();
  assert.equal(caps.probed, true, `${provider}: ${caps.why}`);
  const result = await client.structured({ messages: ASK, schema: PERSON });
  assert.equal(result.mechanism, caps.ladder[0]);
  assert.ok(isValid(PERSON, result.value));
  return { caps, ladder: caps.ladder, result };
}

// The ladder each preset ends up with against its fake (also listed in the report).
const EXPECTED = [
  ["openai", "openai", {}, ["json_schema", "json_object", "prompt_only"]],
  ["azure", "azure", {}, ["json_schema", "json_object", "prompt_only"]],
  ["vllm", "vllm012", {}, ["json_schema", "structured_outputs", "json_object", "prompt_only"]],
  ["vllm", "vllm011", {}, ["json_schema", "guided_json", "json_object", "prompt_only"]],
  ["llamacpp", "llamacpp", {}, ["json_schema", "prompt_only"]],
  ["llamacpp", "llamacpp", { gbnf: fakeGbnf }, ["json_schema", "gbnf_grammar", "prompt_only"]],
  ["ollama", "ollama", {}, ["json_schema", "json_object", "prompt_only"]],
  ["lmstudio", "lmstudio", { gbnf: fakeGbnf }, ["json_schema", "prompt_only"]],
  ["generic", "llamacpp", { gbnf: fakeGbnf }, ["json_schema", "gbnf_grammar", "prompt_only"]],
  ["generic", "lmstudio", {}, ["json_schema", "prompt_only"]],
  ["generic", "openai", {}, ["json_schema", "json_object", "prompt_only"]],
  ["generic", "vllm012", {}, ["json_schema", "structured_outputs", "json_object", "prompt_only"]],
];

for (const [preset, behaviour, extra, ladder] of EXPECTED) {
  const tag = extra.gbnf ? " (with a GBNF converter)" : "";
  test(`preset ${preset} against the ${behaviour} fake ends with ${ladder.join(" > ")}${tag}`, async () => {
    const server = await providerServer(behaviour);
    try {
      const got = await ladderOf(server, preset, extra);
      assert.deepEqual(got.ladder, ladder);
    } finally {
      await server.close();
    }
  });
}

test("openai: rank 2 and grammar are never sent, json_object probe carries the word json", async () => {
  const server = await providerServer("openai");
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "openai", gbnf: fakeGbnf });
    const caps = await client.probe();
    const sent = server.chats.map((r) => mechanismOf(r.body));
    assert.deepEqual(sent, ["json_schema", "json_object"]);
    for (const r of server.chats) {
      assert.equal(r.body.guided_json, undefined);
      assert.equal(r.body.structured_outputs, undefined);
      assert.equal(r.body.grammar, undefined);
    }
    const jsonObject = server.chats[1].body;
    assert.ok(jsonObject.messages.some((m) => /json/i.test(m.content)));
    assert.deepEqual(
      caps.candidates.filter((c) => c.verdict === "skipped").map((c) => c.mechanism),
      ["structured_outputs", "guided_json", "gbnf_grammar"],
    );
  } finally {
    await server.close();
  }
});

test("the probe is neutral: Say hello., one-boolean schema, 32 max tokens, temperature 0, strict", async () => {
  const server = await providerServer("vllm012");
  try {
    await createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" }).probe();
    const first = server.chats[0].body;
    assert.deepEqual(first.messages, [{ role: "user", content: "Say hello." }]);
    assert.equal(first.max_tokens, 32);
    assert.equal(first.temperature, 0);
    assert.equal(first.response_format.json_schema.strict, true);
    const schema = first.response_format.json_schema.schema;
    assert.deepEqual(Object.values(schema.properties), [{ type: "boolean" }]);
    assert.deepEqual(schema.required, Object.keys(schema.properties));
    assert.ok(!/json/i.test(JSON.stringify(first.messages)), "the prompt must not mention JSON");
  } finally {
    await server.close();
  }
});

test("a 200 proves nothing: ignored fields fail the probe on the output, both rank-2 spellings probed separately", async () => {
  const server = await providerServer("vllm011");
  try {
    const caps = await createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" }).probe();
    const by = Object.fromEntries(caps.candidates.map((c) => [c.mechanism, c]));
    assert.equal(by.structured_outputs.verdict, "fail");
    assert.match(by.structured_outputs.detail, /^answered 200 but the output does not parse/);
    assert.equal(by.guided_json.verdict, "pass");
    const sent = server.chats.map((r) => mechanismOf(r.body));
    assert.deepEqual(sent, ["json_schema", "structured_outputs", "guided_json", "json_object"]);
  } finally {
    await server.close();
  }
});

test("llama.cpp json_object is answered 200 and constrains nothing: the probe fails it", async () => {
  const server = await providerServer("llamacpp");
  try {
    const caps = await createRemoteClient({ baseURL: server.url, model: "m", provider: "llamacpp", gbnf: noWasm }).probe();
    const jsonObject = caps.candidates.find((c) => c.mechanism === "json_object");
    assert.equal(jsonObject.verdict, "fail");
    const grammar = caps.candidates.find((c) => c.mechanism === "gbnf_grammar");
    assert.equal(grammar.verdict, "skipped");
    assert.equal(grammar.detail, "no GBNF converter: no converter in this test");
  } finally {
    await server.close();
  }
});

test("the default GBNF hook derives the grammar with the wasm's schemaToGbnf, and llama.cpp's grammar rung passes", async () => {
  const server = await providerServer("llamacpp");
  try {
    const caps = await createRemoteClient({ baseURL: server.url, model: "m", provider: "llamacpp" }).probe();
    const grammar = caps.candidates.find((c) => c.mechanism === "gbnf_grammar");
    assert.equal(grammar.verdict, "pass", grammar.detail);
    const sent = server.chats.find((r) => r.body.grammar !== undefined);
    assert.ok(sent, "no request carried a grammar");
    assert.match(sent.body.grammar, /^root ::= /);
  } finally {
    await server.close();
  }
});

test("LM Studio's 400 to json_object is a correct demotion (rejected, not an error)", async () => {
  const server = await providerServer("lmstudio");
  try {
    const caps = await createRemoteClient({ baseURL: server.url, model: "m", provider: "generic", gbnf: noWasm }).probe();
    const c = caps.candidates.find((x) => x.mechanism === "json_object");
    assert.equal(c.verdict, "rejected");
    assert.equal(c.detail, "refused: HTTP 400: 'response_format.type' must be 'json_schema'");
    assert.equal(caps.probed, true);
  } finally {
    await server.close();
  }
});

test("a proxy answering 400 to unknown fields: rank 2 and grammar rejected, not errors", async () => {
  const server = await providerServer("openai");
  try {
    const caps = await createRemoteClient({ baseURL: server.url, model: "m", provider: "generic", gbnf: fakeGbnf }).probe();
    const verdicts = Object.fromEntries(caps.candidates.map((c) => [c.mechanism, c.verdict]));
    assert.deepEqual(verdicts, {
      json_schema: "pass",
      structured_outputs: "rejected",
      guided_json: "rejected",
      gbnf_grammar: "rejected",
      json_object: "pass",
    });
  } finally {
    await server.close();
  }
});

test("json_schema without strict support: the probe and requests retry non-strict instead of demoting", async () => {
  const server = await providerServer("vllm012", {
    override: (r) =>
      r.body?.response_format?.json_schema?.strict === true ? error(400, "response_format: 'strict' is not supported by this server") : null,
  });
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" });
    const caps = await client.probe();
    assert.equal(caps.strict, false);
    assert.equal(caps.ladder[0], "json_schema");
    const before = server.chats.length;
    const result = await client.structured({ messages: ASK, schema: PERSON });
    assert.equal(result.mechanism, "json_schema");
    assert.equal(result.attempts, 1);
    assert.equal(server.chats[before].body.response_format.json_schema.strict, false);
  } finally {
    await server.close();
  }
});

test("a server that changes its mind ten minutes later: demoted at request time, persisted, next call goes straight down", async () => {
  let refuse = false;
  const server = await providerServer("vllm012", {
    override: (r) =>
      refuse && r.body?.response_format
        ? error(400, "response_format is not supported by this deployment", { param: "response_format" })
        : null,
  });
  const dir = await mkdtemp(join(tmpdir(), "poot-caps-"));
  try {
    const clock = fakeClock();
    const options = { baseURL: server.url, model: "m", provider: "vllm", cache: dir, clock };
    const client = createRemoteClient(options);
    assert.equal((await client.probe()).ladder[0], "json_schema");
    assert.equal((await client.structured({ messages: ASK, schema: PERSON })).mechanism, "json_schema");

    clock.t += 10 * 60_000;
    refuse = true;
    const result = await client.structured({ messages: ASK, schema: PERSON });
    assert.equal(result.mechanism, "structured_outputs");
    assert.equal(result.attempts, 2); // the refused json_schema request, then structured_outputs
    assert.ok(isValid(PERSON, result.value));

    const caps = await client.probe();
    assert.deepEqual(caps.ladder, ["structured_outputs", "json_object", "prompt_only"]);
    assert.equal(caps.demotions.length, 1);
    assert.equal(caps.demotions[0].mechanism, "json_schema");
    assert.equal(caps.demotions[0].at, clock.t);
    assert.equal(caps.demotions[0].reason, "HTTP 400: response_format is not supported by this deployment");
    assert.match(caps.why, /^structured_outputs: probe output parsed and validated/);

    const again = await client.structured({ messages: ASK, schema: PERSON });
    assert.equal(again.mechanism, "structured_outputs");
    assert.equal(again.attempts, 1);

    // Persisted: a fresh process (memo forgotten) starts from the demoted ladder without probing.
    const stored = JSON.parse(await readFile(join(dir, "capabilities.json"), "utf8"));
    const entry = stored.entries[`vllm|${server.url}|m`];
    assert.deepEqual(entry.ladder, ["structured_outputs", "json_object", "prompt_only"]);
    forgetProbes();
    const requestsBefore = server.chats.length;
    const reborn = createRemoteClient(options);
    assert.deepEqual((await reborn.probe()).ladder, ["structured_outputs", "json_object", "prompt_only"]);
    assert.equal(server.chats.length, requestsBefore);
  } finally {
    await server.close();
  }
});

test("no demotion on 401, 404, 413 or a context overflow: the error stands", async () => {
  const cases = [
    [error(401, "Incorrect API key provided", { code: "invalid_api_key" }), "permanent"],
    [error(404, "The model `m` does not exist", { code: "model_not_found" }), "permanent"],
    [error(413, "request entity too large for response_format"), "permanent"],
    [error(400, "This model's maximum context length is 4096 tokens.", { code: "context_length_exceeded" }), "context_overflow"],
  ];
  for (const [reply, kind] of cases) {
    let armed = false;
    const server = await providerServer("openai", { override: (r) => (armed && r.method === "POST" ? reply : null) });
    try {
      const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "openai" });
      await client.probe();
      armed = true;
      const before = server.chats.length;
      await assert.rejects(client.structured({ messages: ASK, schema: PERSON }), (e) => {
        assert.equal(e.name, "RemoteError");
        assert.equal(e.kind, kind, reply.json.error.message);
        assert.equal(e.attempts, 1);
        return true;
      });
      assert.equal(server.chats.length, before + 1, "not retried, not replayed on another rung");
      const caps = await client.probe();
      assert.equal(caps.ladder[0], "json_schema");
      assert.equal(caps.demotions.length, 0);
    } finally {
      await server.close();
    }
  }
});

test("a schema complaint or the json-word 400 moves this request down the ladder, and is not remembered", async () => {
  const complaint = error(400, "Invalid schema for response_format 'output': In context=(), 'required' is required to be supplied", { param: "response_format" });
  const jsonWord = error(400, "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.", { param: "response_format" });
  // The first refuses json_schema only; the second json_object too, each rung its own way.
  for (const refusals of [{ json_schema: complaint }, { json_schema: complaint, json_object: jsonWord }]) {
    let armed = false;
    const server = await providerServer("openai", {
      override: (r) => (armed && r.method === "POST" ? refusals[r.body.response_format?.type] ?? null : null),
    });
    try {
      const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "openai" });
      await client.probe();
      armed = true;
      const result = await client.structured({ messages: ASK, schema: PERSON });
      assert.ok(!(result.mechanism in refusals), `${result.mechanism} after ${Object.keys(refusals)}`);
      const caps = await client.probe();
      assert.deepEqual(caps.demotions, [], "a complaint about this request is not remembered");
      assert.equal(caps.ladder[0], "json_schema");
    } finally {
      await server.close();
    }
  }
});

test("a bare 400 to a constrained request demotes its field for good; the call still answers", async () => {
  let armed = false;
  const server = await providerServer("vllm012", {
    override: (r) => (armed && r.method === "POST" && r.body.response_format?.type === "json_schema" ? { status: 400, text: "Bad Request" } : null),
  });
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m" });
    assert.equal((await client.probe()).ladder[0], "json_schema");
    armed = true;
    const result = await client.structured({ messages: ASK, schema: PERSON });
    assert.notEqual(result.mechanism, "json_schema");
    const caps = await client.probe();
    assert.ok(!caps.ladder.includes("json_schema"), JSON.stringify(caps.ladder));
    assert.equal(caps.demotions.at(-1).mechanism, "json_schema");
  } finally {
    await server.close();
  }
});

test("llama.cpp: a 500 naming the constraint field is permanent and demotes; 503 Loading model is transient", async () => {
  let mode = "ok";
  const server = await providerServer("llamacpp", {
    override: (r) => {
      if (r.method !== "POST") return null;
      if (mode === "loading") {
        mode = "ok";
        return { status: 503, json: { error: { code: 503, message: "Loading model", type: "unavailable_error" } } };
      }
      if (mode === "schema500" && r.body.response_format !== undefined) {
        return { status: 500, json: { error: { code: 500, message: "response_format: this chat template cannot take a json_schema", type: "server_error" } } };
      }
      if (mode === "grammar500" && r.body.grammar !== undefined) {
        return { status: 500, json: { error: { code: 500, message: "Failed to parse grammar: unexpected end of input", type: "server_error" } } };
      }
      return null;
    },
  });
  try {
    const clock = fakeClock();
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "llamacpp", gbnf: fakeGbnf, clock });
    assert.deepEqual((await client.probe()).ladder, ["json_schema", "gbnf_grammar", "prompt_only"]);

    mode = "loading";
    const loaded = await client.structured({ messages: ASK, schema: PERSON });
    assert.equal(loaded.mechanism, "json_schema");
    assert.equal(loaded.attempts, 2);
    assert.equal(clock.sleeps.length, 1, "503 Loading model is retried once, not demoted");

    mode = "schema500";
    const demoted = await client.structured({ messages: ASK, schema: PERSON });
    assert.equal(demoted.mechanism, "gbnf_grammar");
    assert.equal(demoted.attempts, 2, "the 500 naming response_format is permanent: not retried");
    assert.equal(clock.sleeps.length, 1);
    assert.deepEqual((await client.probe()).ladder, ["gbnf_grammar", "prompt_only"]);

    mode = "grammar500";
    const probed = await createRemoteClient({ baseURL: server.url, model: "m2", provider: "llamacpp", gbnf: fakeGbnf, clock }).probe();
    assert.equal(probed.candidates.find((c) => c.mechanism === "gbnf_grammar").verdict, "rejected");
  } finally {
    await server.close();
  }
});
