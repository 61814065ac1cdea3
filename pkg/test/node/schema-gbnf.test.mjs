// The remote client's default GBNF converter (`wasmGbnf`, rank 3 of the ladder) over the wasm
// export `schemaToGbnf`: the grammar it derives accepts exactly what the schema allows, checked
// by our own grammar engine on a byte-level vocabulary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { loadWasm } from "../../dist/index.js";
import { wasmGbnf } from "../../dist/remote/index.js";

const wasm = await loadWasm(readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url)));

// One token per byte, then the end-of-sequence token (id 256).
const vocab = wasm.Vocabulary.fromTokens(
  [...Array.from({ length: 256 }, (_, b) => new Uint8Array([b])), new TextEncoder().encode("</s>")],
  [256],
);

function grammarAccepts(grammar, text) {
  const constraint = wasm.Constraint.fromRequest(vocab, JSON.stringify({ guided_grammar: grammar }));
  const matcher = constraint.matcher();
  try {
    for (const byte of new TextEncoder().encode(text)) matcher.accept(byte);
    return matcher.isAccepting();
  } catch {
    return false;
  } finally {
    matcher.free();
    constraint.free();
  }
}

const schema = {
  type: "object",
  properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 1, maximum: 3 } },
  required: ["ok"],
  additionalProperties: false,
};

test("wasmGbnf turns a schema into a grammar our grammar engine enforces", async () => {
  const grammar = await wasmGbnf(schema);
  assert.match(grammar, /^root ::= /m);
  for (const valid of ['{"ok":true}', '{"n":2,"ok":false}', '{"n": 3, "ok": true}']) {
    assert.equal(grammarAccepts(grammar, valid), true, valid);
  }
  for (const invalid of ['{"ok":1}', '{"n":4,"ok":true}', '{"n":2}', '{"ok":true,"x":1}', '[]']) {
    assert.equal(grammarAccepts(grammar, invalid), false, invalid);
  }
});

test("a schema the compiler refuses is the same 400 as guided_json", async () => {
  await assert.rejects(wasmGbnf({ type: "array", items: { type: "string" }, uniqueItems: true }), (e) => {
    const cause = e.cause ?? e;
    assert.equal(cause.status, 400);
    assert.equal(cause.param, "guided_json");
    return true;
  });
});
