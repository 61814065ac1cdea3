// Tools: no constrained decoding on a request that carries tools, one tool call per turn, and
// tool calls written as text in the formats chat templates teach.
import { test } from "node:test";
import assert from "node:assert/strict";

import { createRemoteClient, firstToolCall, parseTextToolCalls } from "../../dist/remote/index.js";
import { completion, providerServer } from "../fixtures/remote/fake-openai.mjs";

const TOOLS = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
  { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } } },
];
const SCHEMA = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"], additionalProperties: false };
const ASK = [{ role: "user", content: "Weather in Paris?" }];
const call = (name, args) => ({ name, arguments: JSON.stringify(args) });

test("text tool calls: <tool_call>, [TOOL_CALLS] (both forms), <|python_tag|>, bare object", () => {
  const cases = [
    ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', [call("get_weather", { city: "Paris" })], ""],
    ['Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', [call("get_weather", { city: "Paris" })], "Let me check."],
    ['[TOOL_CALLS][{"name": "search", "arguments": {"q": "poot"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]', [call("search", { q: "poot" }), call("get_weather", { city: "Rome" })], ""],
    ['[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}', [call("get_weather", { city: "Oslo" })], ""],
    ['<|python_tag|>{"name": "get_weather", "parameters": {"city": "Lima"}}<|eom_id|>', [call("get_weather", { city: "Lima" })], ""],
    ['{"name": "search", "arguments": {"q": "x"}}', [call("search", { q: "x" })], ""],
    ["<tool_call>{'name': 'search', 'arguments': {'q': 'single quotes',}}</tool_call>", [call("search", { q: "single quotes" })], ""],
    ['{"name": "Bob", "arguments": {"a": 1}}', [], '{"name": "Bob", "arguments": {"a": 1}}'], // not a declared tool: an answer
    ['{"answer": "sunny"}', [], '{"answer": "sunny"}'],
  ];
  for (const [text, calls, rest] of cases) {
    const got = parseTextToolCalls(text, ["get_weather", "search"]);
    assert.deepEqual(
      got.toolCalls.map((c) => c.function),
      calls,
      text,
    );
    assert.equal(got.content, rest, text);
    for (const c of got.toolCalls) assert.equal(c.type, "function");
  }
  assert.deepEqual(firstToolCall([1, 2, 3]), [1]);
  assert.deepEqual(firstToolCall(undefined), []);
});

test("structured() with tools sends no constraint field and no JSON-only stops; the first native call wins", async () => {
  const server = await providerServer("vllm012", {
    override: (r) =>
      r.method === "POST" && r.body.tools
        ? completion(null, "tool_calls", {
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
              { id: "call_2", type: "function", function: { name: "search", arguments: '{"q":"Paris"}' } },
            ],
          })
        : null,
  });
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm" });
    await client.probe();
    const result = await client.structured({ messages: ASK, schema: SCHEMA, tools: TOOLS });
    assert.equal(result.value, undefined);
    assert.equal(result.mechanism, "prompt_only");
    assert.deepEqual(result.toolCall, { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } });
    const body = server.chats.at(-1).body;
    for (const field of ["response_format", "guided_json", "structured_outputs", "grammar"]) assert.equal(body[field], undefined, field);
    assert.equal(body.stop, undefined);
    assert.deepEqual(body.tools, TOOLS);
    assert.deepEqual(body.messages, ASK);
  } finally {
    await server.close();
  }
});

test("chat(): text tool calls become one tool call; structured() with tools still answers when no tool is called", async () => {
  let reply = '<tool_call>{"name": "search", "arguments": {"q": "a"}}</tool_call>\n<tool_call>{"name": "get_weather", "arguments": {"city": "b"}}</tool_call>';
  const server = await providerServer("llamacpp", { override: (r) => (r.method === "POST" ? completion(reply) : null) });
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "llamacpp", structuredDecoding: "off" });
    const chat = await client.chat({ messages: ASK, tools: TOOLS });
    assert.equal(chat.toolCalls.length, 1);
    assert.deepEqual(chat.toolCalls[0].function, call("search", { q: "a" }));
    assert.equal(chat.content, "");

    reply = '```json\n{"answer": "sunny"}\n```';
    const answered = await client.structured({ messages: ASK, schema: SCHEMA, tools: TOOLS });
    assert.deepEqual(answered.value, { answer: "sunny" });
    assert.equal(answered.rung, "fence");
    assert.equal(answered.toolCall, undefined);
  } finally {
    await server.close();
  }
});
