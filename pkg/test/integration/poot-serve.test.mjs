// `poot serve` on the reference model, driven by the official `openai` client and by plain
// HTTP: the spec's curl example verbatim, streaming and non-streaming calls, a forced tool call,
// errors, a client that leaves mid-stream, queued requests and the body limit.
//
// Needs POOT_BIN (the `poot` binary built with --features cli) and POOT_REFERENCE_GGUF; `make
// test` sets both.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import OpenAI from "openai";
import Ajv from "ajv";
import { freePort } from "./free-port.mjs";

const bin = process.env.POOT_BIN;
const model = process.env.POOT_REFERENCE_GGUF;
if (!bin || !model) throw new Error("set POOT_BIN and POOT_REFERENCE_GGUF (make test does)");

let server;
let base;
let client;

async function health() {
  const r = await fetch(`${base}/health`);
  return r.json();
}

before(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  server = spawn(bin, ["serve", "--model", model, "--port", String(port), "--threads", "2"], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  for (let i = 0; ; i++) {
    try {
      if ((await health()).status === "ok") break;
    } catch {
      if (i > 600) throw new Error("poot serve did not come up in 60 s");
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  client = new OpenAI({ apiKey: "local", baseURL: `${base}/v1`, maxRetries: 0 });
});

after(() => server?.kill());

const character = {
  type: "object",
  properties: {
    name: { type: "string" },
    age: { type: "integer", minimum: 1, maximum: 120 },
    class: { enum: ["warrior", "mage", "rogue"] },
  },
  required: ["name", "class"],
};

function validator(schema) {
  return new Ajv({ strict: false }).compile(schema);
}

test("the spec's curl example works verbatim and conforms", async () => {
  // The body exactly as the spec writes it for curl.
  const body = `{
    "messages": [{"role": "user", "content": "Make a character."}],
    "max_tokens": 64,
    "guided_json": {
      "type": "object",
      "properties": {
        "name":  {"type": "string"},
        "age":   {"type": "integer", "minimum": 1, "maximum": 120},
        "class": {"enum": ["warrior", "mage", "rogue"]}
      },
      "required": ["name", "class"]
    }
  }`;
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body,
  });
  assert.equal(r.status, 200);
  const out = await r.json();
  assert.equal(out.object, "chat.completion");
  assert.equal(out.usage.total_tokens, out.usage.prompt_tokens + out.usage.completion_tokens);
  // The body has no seed, so the server draws one: about 1 run in 40 writes a name long
  // enough to reach max_tokens, and the reply is then steered onto a shortest completion
  // (README, "Length-safe structured output"): still valid, `finish_reason` "length", and
  // it may end before the 64th token (the choice ends where the closed output completes:
  // one such run ended at 63).
  const choice = out.choices[0];
  const value = JSON.parse(choice.message.content);
  const valid = validator(character);
  assert.ok(valid(value), JSON.stringify(valid.errors));
  if (choice.finish_reason === "length") {
    assert.ok(out.usage.completion_tokens <= 64, `${out.usage.completion_tokens} tokens`);
    assert.equal(out.usage.forced_closes, 1);
    return;
  }
  assert.equal(choice.finish_reason, "stop");
  assert.equal(out.usage.forced_closes, undefined);
});

test("openai client: response_format json_schema, non-streamed, n = 2", async () => {
  // Listed keys only (`guided_json_extra_keys: false`, passed through by the client): the
  // model ends the object itself. By default the schema's other keys are open, as JSON
  // Schema says, and a 135M model may invent keys until max_tokens: still valid JSON.
  for (const extraKeys of [false, undefined]) {
    const out = await client.chat.completions.create({
      model: "smollm2",
      messages: [{ role: "user", content: "Make a character." }],
      max_tokens: 64,
      n: 2,
      seed: 3,
      response_format: { type: "json_schema", json_schema: { name: "character", schema: character } },
      ...(extraKeys === undefined ? {} : { guided_json_extra_keys: extraKeys }),
    });
    assert.equal(out.choices.length, 2);
    const valid = validator(character);
    for (const c of out.choices) {
      if (extraKeys === false) assert.equal(c.finish_reason, "stop");
      else assert.ok(["stop", "length"].includes(c.finish_reason), c.finish_reason);
      const value = JSON.parse(c.message.content);
      assert.ok(valid(value), c.message.content);
      if (extraKeys === false) assert.deepEqual(Object.keys(value).filter((k) => !(k in character.properties)), []);
    }
  }
});

test("a reply that reaches max_tokens still closes and validates (streamed too)", async () => {
  const schema = { type: "object", properties: { story: { type: "string" } }, required: ["story"], additionalProperties: false };
  const valid = validator(schema);
  const body = {
    messages: [{ role: "user", content: "Tell me a very long story as JSON." }],
    max_tokens: 12,
    // Greedy: the model's own reply runs past 12 tokens (a sampled one may end sooner).
    temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "story", schema } },
  };
  const out = await client.chat.completions.create(body);
  assert.equal(out.choices[0].finish_reason, "length");
  assert.ok(valid(JSON.parse(out.choices[0].message.content)), out.choices[0].message.content);
  assert.equal(out.usage.forced_closes, 1);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  assert.ok(valid(JSON.parse(text)), text);
  await assert.rejects(client.chat.completions.create({ ...body, max_tokens: 2 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "max_tokens");
    return true;
  });
});

test("a composite const takes JSON whitespace between its tokens", async () => {
  // A +100 bias on SmolLM2's newline token (198): newlines wherever the constraint allows.
  const out = await client.chat.completions.create({
    messages: [{ role: "user", content: "hi" }],
    guided_json: { const: { a: [1, 2] } },
    logit_bias: { 198: 100 },
    max_tokens: 40,
    temperature: 0,
  });
  const text = out.choices[0].message.content;
  assert.deepEqual(JSON.parse(text), { a: [1, 2] });
  assert.match(text, /\n/, JSON.stringify(text));
});

test("openai client: streamed guided_regex deltas concatenate to a match", async () => {
  const stream = await client.chat.completions.create({
    messages: [{ role: "user", content: "When did the Berlin wall fall?" }],
    max_tokens: 16,
    stream: true,
    stream_options: { include_usage: true },
    guided_regex: "[0-9]{4}-[0-9]{2}-[0-9]{2}",
  });
  let text = "";
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      finish ??= c.finish_reason;
    }
  }
  assert.match(text, /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/);
  assert.equal(finish, "stop");
  assert.ok(usage && usage.completion_tokens >= 1);
});

test("openai client: a forced tool call parses and validates", async () => {
  const parameters = {
    type: "object",
    properties: { city: { type: "string", maxLength: 30 }, unit: { enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"],
    // Listed keys only, as OpenAI's strict mode asks (left open, a 135M model invents keys).
    additionalProperties: false,
  };
  const out = await client.chat.completions.create({
    messages: [{ role: "user", content: "What is the weather in Paris?" }],
    max_tokens: 60,
    tools: [{ type: "function", function: { name: "get_weather", parameters } }],
    tool_choice: { type: "function", function: { name: "get_weather" } },
    parallel_tool_calls: false,
  });
  const choice = out.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.function.name, "get_weather");
  const valid = validator(parameters);
  assert.ok(valid(JSON.parse(call.function.arguments)), call.function.arguments);
});

test("tool schemas matter only when a call is forced; a named function is one call; every constraint field is checked", async () => {
  const tools = [
    { type: "function", function: { name: "tag", parameters: { type: "object", properties: { tags: { type: "array", items: { type: "string" }, uniqueItems: true } } } } },
    { type: "function", function: { name: "add", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"], additionalProperties: false } } },
  ];
  const messages = [{ role: "user", content: "Add 2 and 3." }];
  // tool_choice auto: the refused schema is a warning, in the body and in the header.
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages, tools, max_tokens: 2 }),
  });
  assert.equal(r.status, 200);
  const warnings = (await r.json()).warnings;
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.match(warnings[0], /^tools\[0\] `tag`: a call to it could not be forced .*uniqueItems/);
  assert.deepEqual(JSON.parse(r.headers.get("x-poot-warnings")), warnings);
  // A named function with parallel_tool_calls left at its default: exactly one call.
  const out = await client.chat.completions.create({
    messages,
    max_tokens: 60,
    temperature: 0,
    tools,
    tool_choice: { type: "function", function: { name: "add" } },
  });
  assert.equal(out.choices[0].finish_reason, "tool_calls");
  assert.equal(out.choices[0].message.tool_calls.length, 1);
  assert.equal(out.choices[0].message.tool_calls[0].function.name, "add");
  // Forced, the refused schema is the 400; so is an invalid guided field under a forced call,
  // and one that loses precedence to another.
  const refused = [
    [{ tools, tool_choice: "required" }, "tools"],
    [{ tools, tool_choice: { type: "function", function: { name: "add" } }, guided_grammar: "root ::= nothing" }, "guided_grammar"],
    [{ guided_choice: ["a"], guided_json: { type: "array", uniqueItems: true } }, "guided_json"],
  ];
  for (const [fields, param] of refused) {
    await assert.rejects(client.chat.completions.create({ messages, ...fields }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(fields));
      assert.equal(e.param, param, JSON.stringify(fields));
      return true;
    });
  }
});

test("openai client: completions and models", async () => {
  const out = await client.completions.create({
    model: "smollm2",
    prompt: "The capital of France is",
    max_tokens: 8,
    temperature: 0,
    stop: ["."],
  });
  assert.equal(out.object, "text_completion");
  assert.match(out.choices[0].text, /Paris/);
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
});

test("invalid requests are OpenAI 400s the client surfaces with param and code", async () => {
  await assert.rejects(
    client.chat.completions.create({
      messages: [{ role: "user", content: "x" }],
      guided_regex: "(a|b)*a(a|b){17}",
    }),
    (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, "guided_regex");
      assert.equal(e.code, "limit_exceeded");
      assert.match(e.message, /limit/);
      return true;
    },
  );
  await assert.rejects(client.chat.completions.create({ messages: [], n: 2 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "messages");
    return true;
  });
  const r = await fetch(`${base}/v1/nothing`);
  assert.equal(r.status, 404);
  const big = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: "x".repeat(2 << 20),
  });
  assert.equal(big.status, 413);
  assert.match((await big.json()).error.message, /limit of 1048576 bytes/);
  // Unknown fields are accepted and reported.
  const w = await fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Hi", max_tokens: 1, temprature: 0 }),
  });
  assert.equal(w.status, 200);
  assert.match(w.headers.get("x-poot-warnings"), /temprature/);
  assert.deepEqual((await w.json()).warnings, ["unknown field `temprature` was ignored"]);
});

test("a client that leaves mid-stream stops its generation", async () => {
  const before = await health();
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    {
      messages: [{ role: "user", content: "Write a long story about a dragon." }],
      max_tokens: 400,
      stream: true,
      temperature: 0,
      logit_bias: { 2: -100 }, // no <|im_end|>: only max_tokens would end it
    },
    { signal: controller.signal },
  );
  let chunks = 0;
  try {
    for await (const _ of stream) {
      if (++chunks === 3) controller.abort();
    }
  } catch (e) {
    assert.match(String(e?.name ?? e), /Abort/);
  }
  let now;
  for (;;) {
    now = await health();
    if (now.finished > before.finished && !now.busy) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const generated = now.completion_tokens - before.completion_tokens;
  assert.ok(generated < 50, `${generated} tokens were generated after the client left`);
});

test("concurrent requests are queued and all answered", async () => {
  const calls = [0, 1, 2].map((i) =>
    client.completions.create({ prompt: `Number ${i}:`, max_tokens: 4, seed: i }),
  );
  const outs = await Promise.all(calls);
  for (const out of outs) assert.equal(out.choices.length, 1);
});
