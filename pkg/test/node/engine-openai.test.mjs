// `engine.fetch` under the official `openai` client (new OpenAI({ fetch: engine.fetch })) and
// on its own: streamed and whole chat and completions, models, errors as the client's
// APIError subclasses, aborts, and the raw HTTP shapes (routes, SSE framing, status codes,
// the warnings header). Wasm CPU path in Node on the reference model (POOT_REFERENCE_GGUF).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

import { createEngine } from "../../dist/index.js";

const MODEL = process.env.POOT_REFERENCE_GGUF;
const WASM = readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url));

let engine;
let client;
before(async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  engine = await createEngine({ model: readFileSync(MODEL), wasm: WASM, backend: "cpu" });
  client = new OpenAI({ apiKey: "local", baseURL: "http://poot.local/v1", fetch: engine.fetch, maxRetries: 0 });
});
after(async () => {
  await engine?.unload();
});

const ask = (content) => [{ role: "user", content }];

test("the client's chat.completions.create, whole", async () => {
  const reply = await client.chat.completions.create({
    model: "anything",
    messages: ask("Is water wet? Answer yes or no."),
    guided_choice: ["yes", "no"],
    seed: 4,
  });
  assert.equal(reply.object, "chat.completion");
  assert.ok(["yes", "no"].includes(reply.choices[0].message.content));
  assert.equal(reply.choices[0].finish_reason, "stop");
  assert.equal(reply.model, engine.model.id);
});

test("the client's chat.completions.create, streamed", async () => {
  const stream = await client.chat.completions.create({
    model: "local",
    messages: ask("A time, please."),
    guided_regex: "[0-2][0-9]:[0-5][0-9]",
    stream: true,
    seed: 9,
  });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.match(text, /^[0-2][0-9]:[0-5][0-9]$/);
  assert.equal(finish, "stop");
});

test("the client's completions.create, whole and streamed, agree", async () => {
  const body = { model: "local", prompt: "The capital of France is", max_tokens: 5, temperature: 0 };
  const whole = await client.completions.create(body);
  assert.equal(whole.object, "text_completion");
  const stream = await client.completions.create({ ...body, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, whole.choices[0].text);
});

test("the client's models.list and models.retrieve", async () => {
  const ids = [];
  for await (const model of client.models.list()) ids.push(model.id);
  assert.deepEqual(ids, [engine.model.id]);
  const model = await client.models.retrieve(engine.model.id);
  assert.equal(model.owned_by, "poot");
  await assert.rejects(client.models.retrieve("gpt-4"), (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
});

test("a bad request is the client's BadRequestError with param and code", async () => {
  const err = await client.chat.completions
    .create({ model: "local", messages: ask("hi"), temperature: 5 })
    .then(() => assert.fail("expected a 400"), (e) => e);
  assert.ok(err instanceof OpenAI.BadRequestError, String(err));
  assert.equal(err.status, 400);
  assert.equal(err.param, "temperature");
  assert.equal(err.code, "invalid_input");
  assert.equal(err.type, "invalid_request_error");
  assert.equal(err.error.message, "temperature 5 must be in [0, 2]");
});

test("aborting through the client: a stream ends, a whole request rejects", async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: "local", messages: ask("Write a long poem."), max_tokens: 200, stream: true },
    { signal: controller.signal },
  );
  let seen = 0;
  for await (const _ of stream) if (++seen === 2) controller.abort();
  assert.ok(seen <= 3, `${seen} chunks after the abort`);

  const late = new AbortController();
  const pending = client.chat.completions.create(
    { model: "local", messages: ask("Write a long poem."), max_tokens: 200 },
    { signal: late.signal },
  );
  setTimeout(() => late.abort(), 200);
  await assert.rejects(pending, (e) => e instanceof OpenAI.APIUserAbortError);
  // The engine is free again at once.
  const reply = await client.chat.completions.create({ model: "local", messages: ask("ok?"), guided_choice: ["ok"] });
  assert.equal(reply.choices[0].message.content, "ok");
});

test("raw fetch: SSE framing, headers and [DONE]", async () => {
  const response = await engine.fetch("https://example.test/some/base/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: ask("hi"), guided_choice: ["hello"], stream: true, frobnicate: "é" }),
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "text/event-stream");
  assert.deepEqual(JSON.parse(response.headers.get("x-poot-warnings")), ["unknown field `frobnicate` was ignored"]);
  const text = await response.text();
  const events = text.split("\n\n");
  assert.equal(events.pop(), "", "every event ends with a blank line");
  assert.equal(events.at(-1), "data: [DONE]");
  const chunks = events.slice(0, -1).map((e) => {
    assert.ok(e.startsWith("data: {"), e);
    return JSON.parse(e.slice(6));
  });
  assert.equal(chunks.map((c) => c.choices[0].delta.content ?? "").join(""), "hello");
});

test("raw fetch: a Request object, routes, methods and error bodies", async () => {
  const whole = await engine.fetch(
    new Request("http://poot.local/v1/completions", { method: "POST", body: JSON.stringify({ prompt: "x", guided_choice: ["a"] }) }),
  );
  assert.equal(whole.status, 200);
  assert.equal(whole.headers.get("content-type"), "application/json");
  assert.equal((await whole.json()).choices[0].text, "a");

  const expectError = async (response, status, code, message) => {
    assert.equal(response.status, status);
    const body = await response.json();
    assert.equal(body.error.code, code);
    if (message instanceof RegExp) assert.match(body.error.message, message);
    else assert.equal(body.error.message, message);
    assert.equal(body.error.type, status === 500 ? "server_error" : "invalid_request_error");
  };
  await expectError(await engine.fetch("http://poot.local/v1/embeddings", { method: "POST", body: "{}" }), 404, "not_found",
    "no route POST /v1/embeddings (poot serves …/chat/completions, …/completions and …/models)");
  await expectError(await engine.fetch("http://poot.local/v1/chat/completions"), 405, "method_not_allowed",
    "GET is not allowed on /v1/chat/completions (use POST)");
  await expectError(await engine.fetch("http://poot.local/v1/models", { method: "DELETE" }), 405, "method_not_allowed",
    "DELETE is not allowed on /v1/models (use GET)");
  await expectError(await engine.fetch("http://poot.local/v1/chat/completions", { method: "POST", body: "{nope" }), 400, "invalid_input",
    /^the request body is not valid JSON: key must be a string at line 1 column 2$/);
  await expectError(await engine.fetch("http://poot.local/v1/chat/completions", { method: "POST", body: "{}" }), 400, "invalid_input",
    "the request needs messages");
  const models = await engine.fetch("/v1/models/");
  assert.equal(models.status, 200);
  assert.equal((await models.json()).data[0].id, engine.model.id);
});

test("raw fetch: cancelling the body stops the run, an aborted signal errors it", async () => {
  const response = await engine.fetch("http://poot.local/v1/completions", {
    method: "POST",
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 200, stream: true }),
  });
  const reader = response.body.getReader();
  await reader.read();
  await reader.cancel();
  const started = performance.now();
  const next = await engine.completions.create({ prompt: "x", guided_choice: ["done"] });
  assert.equal(next.choices[0].text, "done");
  assert.ok(performance.now() - started < 10_000, "the cancelled stream kept the engine");

  const controller = new AbortController();
  const aborted = await engine.fetch("http://poot.local/v1/completions", {
    method: "POST",
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 200, stream: true }),
    signal: controller.signal,
  });
  const body = aborted.body.getReader();
  await body.read();
  controller.abort();
  await assert.rejects(
    (async () => {
      for (;;) if ((await body.read()).done) return;
    })(),
    (e) => e.name === "AbortError",
  );
  await assert.rejects(engine.fetch("http://poot.local/v1/models", { signal: controller.signal }), (e) => e.name === "AbortError");
});
