// Typed schemas on the in-page engine (wasm CPU path in Node, the reference model): a Zod,
// Valibot or ArkType schema where a JSON Schema goes; `chat.completions.parse` gives each
// message's content parsed and validated by the schema itself. Checked independently: the
// parsed value passes the library's own parse again, and matches ajv on the JSON Schema the
// library converts to.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import AjvModule from "ajv";
import { toStandardJsonSchema } from "@valibot/to-json-schema";
import { type } from "arktype";
import * as v from "valibot";
import * as z from "zod";

import { createEngine, PootError, toJsonSchema } from "../../dist/index.js";

const Ajv = AjvModule.default;
const MODEL = process.env.POOT_REFERENCE_GGUF;

let engine;
before(async () => {
  assert.ok(MODEL, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  engine = await createEngine({ model: readFileSync(MODEL), backend: "cpu" });
});
after(async () => {
  await engine?.unload();
});

const messages = [{ role: "user", content: "Describe a person as JSON." }];

const libraries = {
  zod: z.object({ name: z.string().min(1).max(12), age: z.number().int().min(0).max(120) }),
  valibot: toStandardJsonSchema(
    v.object({ name: v.pipe(v.string(), v.minLength(1), v.maxLength(12)), age: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(120)) }),
  ),
  arktype: type({ name: "1 <= string <= 12", age: "0 <= number.integer <= 120" }),
};

for (const [library, schema] of Object.entries(libraries)) {
  test(`${library}: parse gives the content parsed and validated, under each field a schema goes in`, async () => {
    const validate = new Ajv().compile(toJsonSchema(schema, "response_format"));
    const forms = {
      "response_format: schema": { response_format: schema },
      "response_format json_schema": { response_format: { type: "json_schema", json_schema: { name: "person", schema } } },
      guided_json: { guided_json: schema },
    };
    for (const [form, fields] of Object.entries(forms)) {
      const reply = await engine.chat.completions.parse({ messages, ...fields, max_tokens: 40, seed: 1 });
      const { content, parsed } = reply.choices[0].message;
      // `parsed` is what the library's own parse makes of the content: the content itself,
      // less the keys a non-strict object drops (Valibot's `v.object` leaves
      // `additionalProperties` out, so other keys are valid, and it strips them).
      const json = JSON.parse(content);
      assert.ok(validate(json), `${library}, ${form}: ${content}`);
      const own = await schema["~standard"].validate(json);
      assert.deepEqual(parsed, own.value, `${library}, ${form}`);
      assert.ok(validate(parsed), `${library}, ${form}: ${content}`);
      const again = await schema["~standard"].validate(parsed);
      assert.equal(again.issues, undefined, `${library}, ${form}: ${JSON.stringify(again.issues)}`);
    }
  });
}

test("create takes a Standard Schema too, in tools' parameters as well", async () => {
  const reply = await engine.chat.completions.create({ messages, response_format: libraries.zod, max_tokens: 40 });
  assert.equal(libraries.zod.safeParse(JSON.parse(reply.choices[0].message.content)).success, true);
  const call = await engine.chat.completions.create({
    messages: [{ role: "user", content: "Add 2 and 3." }],
    tools: [{ type: "function", function: { name: "add", parameters: z.object({ a: z.number().int(), b: z.number().int() }) } }],
    tool_choice: "required",
    max_tokens: 60,
    temperature: 0,
  });
  const args = JSON.parse(call.choices[0].message.tool_calls[0].function.arguments);
  assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), JSON.stringify(args));
});

test("what the JSON Schema cannot say is still checked: a refinement that fails is validation_failed", async () => {
  const never = z.object({ name: z.string() }).refine(() => false, "never valid");
  await assert.rejects(engine.chat.completions.parse({ messages, response_format: never, max_tokens: 30 }), (e) => {
    assert.ok(e instanceof PootError);
    assert.equal(e.code, "validation_failed");
    assert.match(e.message, /never valid/);
    return true;
  });
});

test("a schema without a JSON Schema converter is a 400 naming its field", async () => {
  const bare = v.object({ name: v.string() });
  await assert.rejects(engine.chat.completions.parse({ messages, response_format: bare }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "response_format");
    assert.match(e.message, /toStandardJsonSchema\(\) from @valibot\/to-json-schema/);
    return true;
  });
  // Without a schema, parsed is null; under json_object, the parsed JSON.
  const text = await engine.chat.completions.parse({ messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  assert.equal(text.choices[0].message.parsed, null);
});

test("a streamed parse yields the value as it is written, then the whole, validated", async () => {
  const Story = z.object({ title: z.string().max(30), lines: z.array(z.string().max(40)).min(1).max(3) });
  const stream = await engine.chat.completions.parse({
    messages: [{ role: "user", content: "A very short poem as JSON." }],
    response_format: Story,
    stream: true,
    max_tokens: 60,
    seed: 2,
  });
  const items = [];
  for await (const item of stream) items.push(item);
  const last = items.at(-1);
  assert.equal(last.done, true);
  assert.equal(Story.safeParse(last.parsed).success, true, last.content);
  assert.deepEqual(last.parsed, JSON.parse(last.content));
  assert.ok(items.length > 3, `${items.length} items`);
  // Each partial value is a prefix of the final one: what is written is final.
  for (const item of items.slice(0, -1)) {
    assert.equal(item.done, false);
    assert.ok(last.content.startsWith(item.content));
    const { title, lines } = item.partial;
    if (title !== undefined) assert.ok(last.parsed.title.startsWith(title), JSON.stringify(item.partial));
    for (const [i, line] of (lines ?? []).entries()) {
      const final = last.parsed.lines[i];
      assert.ok(i < lines.length - 1 ? line === final : final.startsWith(line), JSON.stringify(item.partial));
    }
  }
  await assert.rejects(engine.chat.completions.parse({ messages, response_format: Story, stream: true, n: 2 }), (e) => e.param === "n");
});
