// The in-page engine on the wasm CPU path in Node, on the reference model (SmolLM2-135M-Instruct
// Q4_1, env POOT_REFERENCE_GGUF, which `make test` sets; the tests fail without it): structured
// output that parses and validates, streamed text equal to its constraint's language,
// json_object, validation errors with their exact text/status/param, aborts (mid-stream,
// non-streamed, while queued), the queue's order, models.list and unload.
//
// max_tokens stays small: the wasm CPU path runs ~20 tokens/s.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import AjvModule from "ajv";

import { createEngine, PootError } from "../../dist/index.js";

const Ajv = AjvModule.default;
const MODEL = process.env.POOT_REFERENCE_GGUF;
const WASM = readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url));

let engine;
before(async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  engine = await createEngine({ model: readFileSync(MODEL), wasm: WASM, backend: "auto" });
});
after(async () => {
  await engine?.unload();
});

const ask = (content) => [{ role: "user", content }];

/** Rejects with the error `promise` rejects with, or fails. */
async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("expected a rejection");
}

test("the engine says what it loaded and where it runs", () => {
  assert.equal(engine.backend.kind, "cpu");
  assert.match(engine.backend.reason, /WebGPU needs a page or a dedicated worker/);
  assert.equal(engine.model.architecture, "llama");
  assert.equal(engine.model.contextLength, 8192);
  assert.equal(engine.model.vocabSize, 49152);
  assert.equal(engine.model.bytes, readFileSync(MODEL).length);
  assert.ok(engine.model.id.length > 0);
});

test("guided_json: the reply parses and validates against the schema", async () => {
  const schema = {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 12 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      colour: { enum: ["red", "green", "blue"] },
    },
    required: ["name", "age", "colour"],
    additionalProperties: false,
  };
  const reply = await engine.chat.completions.create({
    messages: ask("Describe a person as JSON."),
    guided_json: schema,
    max_tokens: 48,
    seed: 7,
  });
  assert.equal(reply.object, "chat.completion");
  assert.match(reply.id, /^chatcmpl-[0-9a-f]{16}$/);
  assert.equal(reply.model, engine.model.id);
  const [choice] = reply.choices;
  assert.equal(choice.finish_reason, "stop");
  assert.equal(choice.message.role, "assistant");
  assert.equal(choice.message.refusal, null);
  const value = JSON.parse(choice.message.content);
  const validate = new Ajv().compile(schema);
  assert.ok(validate(value), `${choice.message.content}: ${JSON.stringify(validate.errors)}`);
  assert.ok(reply.usage.prompt_tokens > 0 && reply.usage.completion_tokens > 0);
  assert.equal(reply.usage.total_tokens, reply.usage.prompt_tokens + reply.usage.completion_tokens);
});

test("max_tokens far below the natural reply: it closes in time and validates, n = 2 and streamed", async () => {
  const schema = {
    type: "object",
    properties: { title: { type: "string" }, lines: { type: "array", items: { type: "string" }, minItems: 1 } },
    required: ["title", "lines"],
    additionalProperties: false,
  };
  const validate = new Ajv().compile(schema);
  const body = { messages: ask("Write a very long poem as JSON."), guided_json: schema, max_tokens: 14, n: 2, seed: 3 };
  const reply = await engine.chat.completions.create(body);
  for (const choice of reply.choices) {
    const value = JSON.parse(choice.message.content);
    assert.ok(validate(value), choice.message.content);
    assert.equal(choice.finish_reason, "length");
  }
  assert.equal(reply.usage.forced_closes, 2);
  assert.ok(reply.usage.completion_tokens <= 28);
  let text = "";
  let finish = null;
  for await (const chunk of await engine.chat.completions.create({ ...body, n: 1, stream: true })) {
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  }
  assert.ok(validate(JSON.parse(text)), text);
  assert.equal(finish, "length");
  // Below the shortest output the constraint accepts: a 400 naming max_tokens, up front.
  const err = await rejection(engine.chat.completions.create({ ...body, max_tokens: 3 }));
  assert.equal(err.status, 400);
  assert.equal(err.param, "max_tokens");
  assert.match(err.message, /^max_tokens 3 is too few for any output guided_json accepts: the shortest takes \d+ tokens of this model$/);
});

test("a composite const takes JSON whitespace between its tokens", async () => {
  // A +100 bias on SmolLM2's newline token (198): newlines wherever the constraint allows
  // them, until the close as max_tokens nears.
  const reply = await engine.chat.completions.create({
    messages: ask("hi"),
    guided_json: { const: { a: [1, 2] } },
    logit_bias: { 198: 100 },
    max_tokens: 24,
    temperature: 0,
  });
  const text = reply.choices[0].message.content;
  assert.deepEqual(JSON.parse(text), { a: [1, 2] });
  assert.match(text, /\n/, JSON.stringify(text));
});

test("streamed guided_regex: the deltas join into a match, chunk by chunk", async () => {
  const stream = await engine.chat.completions.create({
    messages: ask("When is the meeting?"),
    guided_regex: "[0-9]{4}-[0-9]{2}-[0-9]{2}",
    stream: true,
    stream_options: { include_usage: true },
    seed: 3,
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  assert.match(text, /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/);
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.deepEqual(finishes.map((c) => c.choices[0].finish_reason), ["stop"]);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.ok(last.usage.completion_tokens > 0);
  for (const c of chunks) {
    assert.equal(c.object, "chat.completion.chunk");
    assert.equal(c.id, chunks[0].id);
  }
  assert.ok(chunks.length > 4, "the text came in several chunks");
});

test("response_format json_object: the reply is a JSON object", async () => {
  const reply = await engine.chat.completions.create({
    messages: ask("Give me a JSON object about a cat."),
    response_format: { type: "json_object" },
    max_tokens: 40,
    seed: 1,
  });
  const { content } = reply.choices[0].message;
  if (reply.choices[0].finish_reason === "stop") {
    const value = JSON.parse(content);
    assert.equal(typeof value, "object");
    assert.ok(value !== null && !Array.isArray(value));
  } else {
    // Out of tokens: still a prefix of a JSON object.
    assert.equal(reply.choices[0].finish_reason, "length");
    assert.match(content, /^\s*\{/);
  }
});

test("completions: guided_choice and a streamed completion", async () => {
  const reply = await engine.completions.create({ prompt: "The sky is", guided_choice: ["blue", "green"], seed: 1 });
  assert.equal(reply.object, "text_completion");
  assert.ok(["blue", "green"].includes(reply.choices[0].text), reply.choices[0].text);
  const stream = await engine.completions.create({ prompt: "1, 2, 3,", max_tokens: 6, stream: true, temperature: 0 });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
  assert.ok(chunks.every((c) => c.object === "text_completion"));
  const whole = await engine.completions.create({ prompt: "1, 2, 3,", max_tokens: 6, temperature: 0 });
  assert.equal(chunks.map((c) => c.choices[0].text).join(""), whole.choices[0].text);
});

test("invalid requests reject with the exact error, status and param", async () => {
  const cases = [
    [{ messages: [] }, "messages must not be empty", "messages", "invalid_input"],
    [{ messages: ask("hi"), temperature: 3 }, "temperature 3 must be in [0, 2]", "temperature", "invalid_input"],
    [{ messages: ask("hi"), n: 17 }, "n 17 must be in [1, 16]", "n", "invalid_input"],
    [{ messages: ask("hi"), top_logprobs: 2 }, "top_logprobs needs logprobs: true", "top_logprobs", "invalid_input"],
    [{ messages: [{ role: "robot", content: "x" }] }, "messages[0]: role `robot` is not one of system, developer, user, assistant, tool", "messages", "invalid_input"],
    [{ messages: ask("hi"), max_tokens: 9000 }, /^max_tokens 9000 plus the prompt's \d+ tokens is over the model's context of 8192 tokens$/, "max_tokens", "limit_exceeded"],
    // A constraint field that loses precedence is still compiled, and named when invalid.
    [{ messages: ask("hi"), guided_choice: ["a"], guided_regex: "(a" }, /guided_regex/, "guided_regex", "invalid_input"],
    [{ messages: ask("hi"), guided_regex: "a", response_format: { type: "json_schema", json_schema: { name: "x", schema: { $ref: "#/$defs/none" } } } }, /\$defs\/none/, "response_format", "invalid_input"],
  ];
  for (const [body, message, param, code] of cases) {
    const err = await rejection(engine.chat.completions.create(body));
    assert.ok(err instanceof PootError, `${JSON.stringify(body)}: ${err}`);
    if (typeof message === "string") assert.equal(err.message, message);
    else assert.match(err.message, message);
    assert.equal(err.status, 400);
    assert.equal(err.param, param);
    assert.equal(err.code, code);
    assert.deepEqual(err.toJSON(), { error: { message: err.message, type: "invalid_request_error", param, code } });
  }
  const err = await rejection(engine.completions.create({ prompt: "x", echo: true }));
  assert.equal(err.message, "echo: true is not supported");
  assert.equal(err.param, "echo");
  const signal = await rejection(engine.chat.completions.create({ messages: ask("hi"), signal: new AbortController().signal }));
  assert.equal(signal.param, "signal");
  assert.match(signal.message, /pass it as the second argument/);
});

test("unknown fields are ignored and listed in warnings", async () => {
  const reply = await engine.chat.completions.create({ messages: ask("hi"), guided_choice: ["yes"], store: true });
  assert.deepEqual(reply.warnings, ["unknown field `store` was ignored"]);
});

test("tool schemas matter only where a call can be forced; a named function is one call", async () => {
  const tools = [
    { type: "function", function: { name: "tag", parameters: { type: "object", properties: { tags: { type: "array", items: { type: "string" }, uniqueItems: true } } } } },
    { type: "function", function: { name: "add", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"], additionalProperties: false } } },
  ];
  // Nothing forced: the schema the compiler refuses is a warning, not an error.
  const auto = await engine.chat.completions.create({ messages: ask("hi"), tools, max_tokens: 4 });
  assert.equal(auto.warnings.length, 1, JSON.stringify(auto.warnings));
  assert.match(auto.warnings[0], /^tools\[0\] `tag`: a call to it could not be forced .*uniqueItems.*tool_choice "auto"/);
  // Forcing the other tool by name: exactly one call to it (parallel_tool_calls defaults to true).
  const named = await engine.chat.completions.create({
    messages: ask("Add 2 and 3."),
    tools,
    tool_choice: { type: "function", function: { name: "add" } },
    max_tokens: 60,
    temperature: 0,
  });
  assert.equal(named.warnings, undefined);
  const calls = named.choices[0].message.tool_calls;
  assert.equal(calls.length, 1, JSON.stringify(calls));
  assert.equal(calls[0].function.name, "add");
  const args = JSON.parse(calls[0].function.arguments);
  assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), calls[0].function.arguments);
  // Forcing the refused one is a 400 naming tools.
  const err = await rejection(engine.chat.completions.create({ messages: ask("hi"), tools, tool_choice: "required" }));
  assert.equal(err.status, 400);
  assert.equal(err.param, "tools");
  assert.match(err.message, /uniqueItems/);
});

test("an abort mid-stream ends the stream within a step, and the engine goes on", async () => {
  const controller = new AbortController();
  const stream = await engine.chat.completions.create(
    { messages: ask("Tell me a long story."), max_tokens: 200, stream: true, seed: 5 },
    { signal: controller.signal },
  );
  let seen = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (++seen === 3) controller.abort();
  }
  assert.equal(seen, 3, "no chunk after the abort");
  // The next request runs at once: the aborted one no longer holds the engine.
  const started = performance.now();
  const reply = await engine.chat.completions.create({ messages: ask("yes or no?"), guided_choice: ["yes", "no"] });
  assert.ok(["yes", "no"].includes(reply.choices[0].message.content));
  assert.ok(performance.now() - started < 10_000, "the aborted run kept generating");
});

test("an aborted non-streamed request rejects with an AbortError", async () => {
  const controller = new AbortController();
  const pending = engine.chat.completions.create({ messages: ask("Count to a thousand."), max_tokens: 300 }, { signal: controller.signal });
  setTimeout(() => controller.abort(), 300); // a timer fires during generation: steps yield
  const started = performance.now();
  const err = await rejection(pending);
  assert.ok(err instanceof PootError);
  assert.equal(err.name, "AbortError");
  assert.equal(err.code, "aborted");
  assert.ok(performance.now() - started < 5_000, "the abort waited for the end of the run");
  // Already aborted: rejects at once.
  const again = await rejection(engine.chat.completions.create({ messages: ask("hi") }, { signal: controller.signal }));
  assert.equal(again.name, "AbortError");
});

test("requests run one at a time, in order; an abort while queued rejects at once", async () => {
  const order = [];
  const first = engine.completions.create({ prompt: "A", max_tokens: 8, temperature: 0 }).then((r) => (order.push("first"), r));
  const controller = new AbortController();
  const queued = engine.completions.create({ prompt: "B", max_tokens: 8 }, { signal: controller.signal });
  const second = engine.completions.create({ prompt: "C", max_tokens: 2, temperature: 0 }).then((r) => (order.push("second"), r));
  controller.abort();
  const err = await rejection(queued);
  assert.equal(err.name, "AbortError");
  assert.deepEqual(order, [], "the queued request was rejected before the first finished");
  await Promise.all([first, second]);
  assert.deepEqual(order, ["first", "second"]);
});

test("models.list names the loaded model", async () => {
  const list = await engine.models.list();
  assert.deepEqual(list, {
    object: "list",
    data: [{ id: engine.model.id, object: "model", created: 0, owned_by: "poot", context_length: 8192 }],
  });
});

test("after unload every call rejects with a clear error", async () => {
  const other = await createEngine({ model: new Blob([readFileSync(MODEL)]), wasm: WASM, backend: "cpu" });
  assert.equal(other.backend.kind, "cpu");
  assert.equal(other.backend.reason, undefined);
  const running = other.completions.create({ prompt: "Once upon a time", max_tokens: 100 });
  await other.unload();
  const during = await rejection(running);
  assert.equal(during.code, "engine_unloaded");
  for (const call of [
    () => other.chat.completions.create({ messages: ask("hi") }),
    () => other.completions.create({ prompt: "hi" }),
    () => other.models.list(),
  ]) {
    const err = await rejection(call());
    assert.ok(err instanceof PootError);
    assert.equal(err.code, "engine_unloaded");
    assert.equal(err.message, "the engine was unloaded (engine.unload()); create a new one with createEngine()");
  }
  const response = await other.fetch("http://poot.local/v1/models");
  assert.equal(response.status, 400);
  assert.equal((await response.json()).error.code, "engine_unloaded");
  await other.unload(); // twice is fine
});
