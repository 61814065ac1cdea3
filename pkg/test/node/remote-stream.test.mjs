// streamStructured(): the value as a streamed reply is written, then the result; each HTTP
// attempt (here a re-ask after an invalid reply) starts over with a higher `attempt`.
import { test, after } from "node:test";
import assert from "node:assert/strict";

import { createRemoteClient } from "../../dist/remote/index.js";
import { fakeServer } from "../fixtures/remote/fake-openai.mjs";

const servers = [];
after(async () => {
  for (const s of servers) await s.close();
});

/** SSE chunks that write `content` a few characters at a time. */
function sse(content, id) {
  const pieces = content.match(/.{1,3}/gs);
  return {
    sse: [
      ...pieces.map((p) => ({ id, choices: [{ index: 0, delta: { content: p } }] })),
      { id, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
    ],
  };
}

const schema = {
  type: "object",
  properties: { name: { type: "string" }, tags: { type: "array", items: { type: "string" } } },
  required: ["name", "tags"],
  additionalProperties: false,
};
const messages = [{ role: "user", content: "A name and tags, as JSON." }];

test("partials grow within an attempt, a re-ask starts over, the result ends the stream", async () => {
  const replies = ['{"nom": "Ada", "tags": ["x"]}', '{"name": "Ada Lovelace", "tags": ["math", "poetry"]}'];
  let n = 0;
  const server = await fakeServer(() => sse(replies[Math.min(n++, 1)], `chatcmpl-${n}`));
  servers.push(server);
  const client = createRemoteClient({ baseURL: server.url, model: "m", structuredDecoding: "off" });
  const items = [];
  for await (const item of client.streamStructured({ messages, schema, maxRetries: 1 })) items.push(item);
  const last = items.at(-1);
  assert.equal(last.done, true);
  assert.deepEqual(last.result.value, { name: "Ada Lovelace", tags: ["math", "poetry"] });
  assert.equal(last.result.reasks, 1);
  const partials = items.slice(0, -1);
  assert.ok(partials.every((p) => !p.done));
  assert.deepEqual([...new Set(partials.map((p) => p.attempt))], [1, 2], "two attempts, in order");
  // Within the second attempt the value only grows toward the result.
  const second = partials.filter((p) => p.attempt === 2);
  assert.ok(second.length > 5, `${second.length} partials`);
  for (const p of second) {
    if (p.partial.name !== undefined) assert.ok("Ada Lovelace".startsWith(p.partial.name), JSON.stringify(p.partial));
    for (const [i, tag] of (p.partial.tags ?? []).entries()) {
      const final = ["math", "poetry"][i];
      assert.ok(i < p.partial.tags.length - 1 ? tag === final : final.startsWith(tag), JSON.stringify(p.partial));
    }
  }
  assert.equal(server.chats.every((c) => c.body.stream === true), true, "the requests stream");
});

test("a failure after the last attempt ends the stream with the error", async () => {
  const server = await fakeServer(() => sse("{}", "x"));
  servers.push(server);
  const client = createRemoteClient({ baseURL: server.url, model: "m", structuredDecoding: "off" });
  await assert.rejects(async () => {
    for await (const _ of client.streamStructured({ messages, schema })) {
      // drain
    }
  }, (e) => e.name === "RepairError");
});
