// Type-level test: a Standard Schema (real Zod 4, Valibot with toStandardJsonSchema, ArkType)
// where a JSON Schema goes, and `chat.completions.parse` typing `message.parsed` by it, as the
// `openai` SDK's `parse` does with zodResponseFormat. Compiled by `tsc -p test/types`; each
// wrong use is pinned with @ts-expect-error, so a change that loosens the types fails here.
import { toStandardJsonSchema } from "@valibot/to-json-schema";
import { type } from "arktype";
import * as v from "valibot";
import * as z from "zod";

import { createEngine, type Infer } from "../../src/index.js";
import { createRemoteClient } from "../../src/remote/index.js";

const engine = await createEngine({ model: "/model.gguf" });
const messages = [{ role: "user" as const, content: "Describe a person." }];

// Zod, as response_format itself.
const Person = z.object({ name: z.string(), age: z.number().int(), tags: z.array(z.string()).optional() });
const zr = await engine.chat.completions.parse({ messages, response_format: Person });
const zp: { name: string; age: number; tags?: string[] | undefined } | null = zr.choices[0].message.parsed;
// @ts-expect-error: `age` is a number
const zbad: { name: string; age: string } | null = zr.choices[0].message.parsed;
void zp;
void zbad;

// Valibot, as json_schema.schema.
const Pet = toStandardJsonSchema(v.object({ kind: v.picklist(["cat", "dog"]), legs: v.number() }));
const vr = await engine.chat.completions.parse({
  messages,
  response_format: { type: "json_schema", json_schema: { name: "pet", schema: Pet } },
});
const vp: { kind: "cat" | "dog"; legs: number } | null = vr.choices[0].message.parsed;
// @ts-expect-error: `kind` is not any string
const vbad: { kind: "bird"; legs: number } | null = vr.choices[0].message.parsed;
void vp;
void vbad;

// ArkType, as guided_json.
const Point = type({ x: "number", y: "number" });
const ar = await engine.chat.completions.parse({ messages, guided_json: Point });
const ap: { x: number; y: number } | null = ar.choices[0].message.parsed;
void ap;

// Infer<S> names the same type.
const named: Infer<typeof Person> | null = zr.choices[0].message.parsed;
void named;

// Without a schema, parsed is unknown.
const plain = await engine.chat.completions.parse({ messages, response_format: { type: "json_object" } });
// @ts-expect-error: unknown is not a string
const notTyped: string | null = plain.choices[0].message.parsed;
void notTyped;

// A Standard Schema goes where a JSON Schema goes in create too (and in tools).
await engine.chat.completions.create({ messages, guided_json: Person });
await engine.chat.completions.create({
  messages,
  tools: [{ type: "function", function: { name: "add", parameters: z.object({ a: z.number() }) } }],
  tool_choice: "required",
});

// The remote client's structured() types its value by the schema too.
const remote = createRemoteClient({ baseURL: "http://127.0.0.1:8080/v1", model: "m" });
const sr = await remote.structured({ messages, schema: Person });
const sv: { name: string; age: number; tags?: string[] | undefined } = sr.value;
// @ts-expect-error: `name` is a string
const sbad: { name: number } = sr.value;
void sv;
void sbad;

// streamStructured: partials, then a result whose value is typed by the schema.
for await (const item of remote.streamStructured({ messages, schema: Person })) {
  if (item.done && item.result.toolCall === undefined) {
    const v: { name: string; age: number; tags?: string[] | undefined } = item.result.value;
    void v;
  }
}
