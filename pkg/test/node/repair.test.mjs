// The repair ladder on a corpus of broken documents (test/fixtures/remote/repair-corpus.json),
// each with the rung expected to fix it (or the error) and the value; plus Stats and coerce.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { coerce, repair, RepairError, RUNGS, Stats, TruncatedError } from "../../dist/remote/index.js";

const { cases } = JSON.parse(readFileSync(new URL("../fixtures/remote/repair-corpus.json", import.meta.url), "utf8"));

function outcome(c) {
  try {
    const { value, rung } = repair(c.input, { schema: c.schema, finishReason: c.finishReason });
    return { rung, value };
  } catch (e) {
    if (e instanceof TruncatedError) return { error: "truncated" };
    if (e instanceof RepairError) return { error: "repair" };
    throw e;
  }
}

test("the corpus has at least 60 cases and covers every rung and both errors", () => {
  assert.ok(cases.length >= 60, `${cases.length} cases`);
  const seen = new Set(cases.map((c) => c.expect.rung ?? c.expect.error));
  for (const rung of RUNGS) assert.ok(seen.has(rung), `no case for rung ${rung}`);
  assert.ok(seen.has("truncated") && seen.has("repair"));
  assert.equal(new Set(cases.map((c) => c.id)).size, cases.length, "ids are unique");
});

test("every corpus case repairs to its expected rung and value (pass rate 100%)", () => {
  const failures = [];
  for (const c of cases) {
    const got = outcome(c);
    try {
      assert.deepEqual(got, c.expect);
    } catch {
      failures.push(`${c.id}: expected ${JSON.stringify(c.expect)}, got ${JSON.stringify(got)}`);
    }
  }
  const passed = cases.length - failures.length;
  console.log(`# repair corpus: ${passed}/${cases.length} pass (${((100 * passed) / cases.length).toFixed(1)}%)`);
  assert.deepEqual(failures, []);
});

test("Stats counts rungs and outcomes", () => {
  const stats = new Stats();
  for (const c of cases) {
    try {
      repair(c.input, { schema: c.schema, finishReason: c.finishReason, stats });
    } catch {
      // counted
    }
  }
  const expected = { valid: 0, repaired: 0, truncated: 0, failed: 0 };
  const rungs = Object.fromEntries(RUNGS.map((r) => [r, 0]));
  for (const c of cases) {
    if (c.expect.error === "truncated") expected.truncated++;
    else if (c.expect.error === "repair") expected.failed++;
    else {
      rungs[c.expect.rung]++;
      expected[c.expect.rung === "none" ? "valid" : "repaired"]++;
    }
  }
  // Every repaired output was fixed from memory (no round-trip: repair() makes no request).
  const fixed = { fromMemory: expected.repaired, roundTrip: 0 };
  assert.deepEqual(stats.snapshot(), { rungs, outcomes: expected, fixed, reasks: 0, total: cases.length });
});

test("errors carry the raw text, finish reason and exact messages", () => {
  assert.throws(
    () => repair('{"a": "abc', {}),
    (e) =>
      e instanceof TruncatedError &&
      e.code === "truncated" &&
      e.raw === '{"a": "abc' &&
      e.finishReason === null &&
      e.message === "the output was cut off (it ends inside a string) after 10 characters; raise maxTokens or ask again instead of repairing it",
  );
  assert.throws(
    () => repair("Hello! How can I help you today?"),
    (e) => e instanceof RepairError && e.message === 'no repair rung makes the output parse as JSON: "Hello! How can I help you today?"',
  );
  const schema = { type: "object", properties: { age: { type: "integer" } }, required: ["age"] };
  assert.throws(
    () => repair('{"age": "old"}', { schema }),
    (e) =>
      e instanceof RepairError &&
      e.message === "the output parsed (rung none) but does not match the schema: /age: expected integer, got string" &&
      e.issues.length === 1,
  );
  assert.throws(() => repair("   "), (e) => e instanceof RepairError && e.message === "the output is empty");
});

test("coerce converts by schema and leaves what it cannot convert", () => {
  const schema = {
    type: "object",
    properties: {
      flag: { type: "boolean" },
      count: { type: "integer" },
      ratio: { type: "number" },
      label: { type: "string" },
      list: { type: "array", items: { type: "integer" } },
      either: { anyOf: [{ type: "integer" }, { type: "boolean" }] },
    },
  };
  assert.deepEqual(coerce({ flag: "FALSE", count: "12", ratio: "1e3", label: true, list: "4", either: "true" }, schema), {
    flag: false,
    count: 12,
    ratio: 1000,
    label: "true",
    list: [4],
    either: true,
  });
  assert.deepEqual(coerce({ count: "1.5", flag: "yes" }, schema), { count: "1.5", flag: "yes" });
});
