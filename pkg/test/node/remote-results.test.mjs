// What structured() returns and throws beyond the value: the response id and usage (streamed
// too), a model refusal as a typed RefusalError (never repaired or re-asked), and a cut reply as
// a TruncatedError whose action is "raise_max_tokens", as the negotiation spec asks.
import { test, after } from "node:test";
import assert from "node:assert/strict";

import { createRemoteClient, RefusalError, TruncatedError } from "../../dist/remote/index.js";
import { completion, fakeServer } from "../fixtures/remote/fake-openai.mjs";

const servers = [];
after(async () => {
  for (const s of servers) await s.close();
});

const schema = { type: "object", properties: { name: { type: "string" } }, required: ["name"] };
const messages = [{ role: "user", content: "A name, as JSON." }];
const usage = { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 };

async function clientFor(reply) {
  const server = await fakeServer(reply);
  servers.push(server);
  return { server, client: createRemoteClient({ baseURL: server.url, model: "m", structuredDecoding: "off" }) };
}

test("results carry the response id and usage, non-streamed and streamed", async () => {
  const { client } = await clientFor(() => {
    const r = completion('{"name": "Ada"}');
    r.json.id = "chatcmpl-42";
    r.json.usage = usage;
    return r;
  });
  const result = await client.structured({ messages, schema });
  assert.equal(result.id, "chatcmpl-42");
  assert.deepEqual(result.usage, usage);
  const streamed = await clientFor(() => ({
    sse: [
      { id: "chatcmpl-7", choices: [{ index: 0, delta: { role: "assistant", content: '{"name": ' } }] },
      { id: "chatcmpl-7", choices: [{ index: 0, delta: { content: '"Ada"}' }, finish_reason: "stop" }] },
      { id: "chatcmpl-7", choices: [], usage },
    ],
  }));
  const s = await streamed.client.structured({ messages, schema, stream: true });
  assert.deepEqual(s.value, { name: "Ada" });
  assert.equal(s.id, "chatcmpl-7");
  assert.deepEqual(s.usage, usage);
});

test("a refusal is a RefusalError, neither repaired nor asked again", async () => {
  const { server, client } = await clientFor(() => completion(null, "stop", { refusal: "I can't help with that." }));
  await assert.rejects(client.structured({ messages, schema, maxRetries: 3 }), (e) => {
    assert.ok(e instanceof RefusalError, String(e));
    assert.equal(e.refusal, "I can't help with that.");
    assert.equal(e.code, "refusal");
    return true;
  });
  assert.equal(server.chats.length, 1);
  const streamed = await clientFor(() => ({
    sse: [{ id: "x", choices: [{ index: 0, delta: { refusal: "No." }, finish_reason: "stop" }] }],
  }));
  await assert.rejects(streamed.client.structured({ messages, schema, stream: true }), (e) => e instanceof RefusalError && e.refusal === "No.");
});

test("a reply cut by max_tokens is a TruncatedError that says to raise max_tokens", async () => {
  const { client } = await clientFor(() => completion('{"name": "Ad', "length"));
  await assert.rejects(client.structured({ messages, schema }), (e) => {
    assert.ok(e instanceof TruncatedError, String(e));
    assert.equal(e.action, "raise_max_tokens");
    return true;
  });
});
