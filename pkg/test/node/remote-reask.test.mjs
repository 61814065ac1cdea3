// Re-ask (`structured({ maxRetries })`): an output no repair makes valid goes back to the model
// with what was wrong, and the call asks again; Stats tells a failure fixed by repair of the
// text in hand ("from memory") from one fixed by another round-trip.
import { test, after } from "node:test";
import assert from "node:assert/strict";

import { createRemoteClient, MAX_REASKS, RepairError } from "../../dist/remote/index.js";
import { completion, fakeServer } from "../fixtures/remote/fake-openai.mjs";

const servers = [];
after(async () => {
  for (const s of servers) await s.close();
});

const schema = { type: "object", properties: { name: { type: "string" } }, required: ["name"], additionalProperties: false };
const messages = [{ role: "user", content: "A name, as JSON." }];

/** A server whose chat replies are `contents`, in order (the last one repeated). */
async function scripted(contents) {
  let i = 0;
  const server = await fakeServer(() => completion(contents[Math.min(i++, contents.length - 1)]));
  servers.push(server);
  // Prompt-only: no probe, so every request is one of the script's.
  return { server, client: createRemoteClient({ baseURL: server.url, model: "m", structuredDecoding: "off" }) };
}

test("an invalid reply is fed back and asked again; the fix is counted as a round-trip", async () => {
  const { server, client } = await scripted(['{"nom": "Ada"}', '{"name": "Ada"}']);
  const result = await client.structured({ messages, schema, maxRetries: 2 });
  assert.deepEqual(result.value, { name: "Ada" });
  assert.equal(result.reasks, 1);
  assert.equal(server.chats.length, 2);
  const second = server.chats[1].body.messages;
  const [assistant, user] = second.slice(-2);
  assert.deepEqual(assistant, { role: "assistant", content: '{"nom": "Ada"}' });
  assert.equal(user.role, "user");
  assert.match(user.content, /name/);
  assert.match(user.content, /Reply again with only the corrected JSON/);
  const s = client.stats.snapshot();
  assert.deepEqual(s.fixed, { fromMemory: 0, roundTrip: 1 });
  assert.equal(s.reasks, 1);
  assert.equal(s.outcomes.failed, 1);
});

test("a reply repair fixes needs no round-trip: counted from memory", async () => {
  const { server, client } = await scripted(["Sure: {'name': 'Ada',}"]);
  const result = await client.structured({ messages, schema, maxRetries: 2 });
  assert.deepEqual(result.value, { name: "Ada" });
  assert.equal(result.reasks, 0);
  assert.equal(server.chats.length, 1);
  assert.deepEqual(client.stats.snapshot().fixed, { fromMemory: 1, roundTrip: 0 });
});

test("maxRetries bounds the round-trips; the last failure is the error", async () => {
  const { server, client } = await scripted(["{}"]);
  await assert.rejects(client.structured({ messages, schema, maxRetries: 2 }), (e) => e instanceof RepairError);
  assert.equal(server.chats.length, 3);
  const s = client.stats.snapshot();
  assert.equal(s.reasks, 2);
  assert.equal(s.fixed.roundTrip, 0);
  assert.equal(s.outcomes.failed, 3);
  // Without maxRetries, no round-trip.
  const again = await scripted(["{}"]);
  await assert.rejects(again.client.structured({ messages, schema }), (e) => e instanceof RepairError);
  assert.equal(again.server.chats.length, 1);
  for (const bad of [-1, 1.5, MAX_REASKS + 1]) {
    await assert.rejects(again.client.structured({ messages, schema, maxRetries: bad }), (e) => e.param === "maxRetries");
  }
});
