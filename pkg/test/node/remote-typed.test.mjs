// The remote client's structured() with a Standard Schema (Zod, Valibot, ArkType) against a
// fake vLLM that enforces json_schema: the wire carries the library's JSON Schema, the value is
// the library's parse of the reply, and a refinement the JSON Schema cannot say is still
// checked (a RepairError when it fails).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { toStandardJsonSchema } from "@valibot/to-json-schema";
import { type } from "arktype";
import * as v from "valibot";
import * as z from "zod";

import { createRemoteClient, forgetProbes, RepairError } from "../../dist/remote/index.js";
import { toJsonSchema } from "../../dist/index.js";
import { providerServer } from "../fixtures/remote/fake-openai.mjs";

const servers = [];
after(async () => {
  for (const s of servers) await s.close();
});

const messages = [{ role: "user", content: "A person, as JSON." }];
const schemas = {
  zod: z.object({ name: z.string(), age: z.number().int() }),
  valibot: toStandardJsonSchema(v.object({ name: v.string(), age: v.pipe(v.number(), v.integer()) })),
  arktype: type({ name: "string", age: "number.integer" }),
};

for (const [library, schema] of Object.entries(schemas)) {
  test(`${library}: structured() sends the library's JSON Schema and returns its parse`, async () => {
    forgetProbes();
    const server = await providerServer("vllm012");
    servers.push(server);
    const client = createRemoteClient({ baseURL: server.url, model: "fake-model" });
    const result = await client.structured({ messages, schema });
    assert.equal(result.mechanism, "json_schema");
    assert.equal(typeof result.value.name, "string");
    assert.ok(Number.isInteger(result.value.age));
    const sent = server.chats.at(-1).body.response_format.json_schema.schema;
    assert.deepEqual(sent, JSON.parse(JSON.stringify(toJsonSchema(schema, "schema"))));
  });
}

test("a refinement the JSON Schema cannot say is checked: a RepairError when it fails", async () => {
  forgetProbes();
  const server = await providerServer("vllm012");
  servers.push(server);
  const client = createRemoteClient({ baseURL: server.url, model: "fake-model" });
  const never = z.object({ name: z.string() }).refine(() => false, "never valid");
  await assert.rejects(client.structured({ messages, schema: never }), (e) => {
    assert.ok(e instanceof RepairError, String(e));
    assert.match(e.message, /never valid/);
    return true;
  });
  assert.equal(client.stats.outcomes.failed, 1);
});
