// The runtime JSON Schema validator of poot/remote against two independent oracles: the official
// draft-07 test suite, and ajv on JSONSchemaBench's schemas and instances.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import AjvModule from "ajv";

import { isValid, validate } from "../../dist/remote/index.js";

const Ajv = AjvModule.default;
// Copies in the repository (tests never read ../shared at run time): the draft-07 suite files
// (official JSON-Schema-Test-Suite, MIT) and the JSONSchemaBench archive the Rust tests use.
const DRAFT7 = new URL("../fixtures/json-schema-test-suite/draft7/", import.meta.url).pathname;
const BENCH = new URL("../../../tests/data/json_schema/jsonschemabench.tsv.gz", import.meta.url);

// Out of scope on purpose: base-URI changes ($id), remote refs and the meta-schema. Structured
// output schemas are self-contained; an unresolvable $ref is reported as a problem.
const OUT_OF_SCOPE = new Set(["refRemote.json", "definitions.json", "id.json"]);
const usesIdsOrRemoteRefs = (schema) => /"\$id"|"\$ref":"(?!#)/.test(JSON.stringify(schema));

test("the official draft-07 suite passes for every supported keyword", () => {
  const dir = DRAFT7;
  let checked = 0;
  const failures = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".json"))) {
    if (OUT_OF_SCOPE.has(file)) continue;
    for (const group of JSON.parse(readFileSync(`${dir}/${file}`, "utf8"))) {
      if (usesIdsOrRemoteRefs(group.schema)) continue;
      for (const t of group.tests) {
        checked++;
        if (isValid(group.schema, t.data) !== t.valid) failures.push(`${file}: ${group.description}: ${t.description}`);
      }
    }
  }
  assert.deepEqual(failures, []);
  assert.ok(checked > 800, `only ${checked} cases checked`);
});

test("agrees with ajv on JSONSchemaBench instances (every 10th schema)", () => {
  // One line per file: name<TAB>minified JSON (see tests/data/json_schema/README.md).
  const files = gunzipSync(readFileSync(BENCH))
    .toString("utf8")
    .split("\n")
    .filter((line) => line)
    .map((line) => line.split("\t"))
    .filter((_, i) => i % 10 === 0);
  let compared = 0;
  const disagreements = [];
  for (const [file, json] of files) {
    const doc = JSON.parse(json);
    const text = JSON.stringify(doc.schema);
    if (text.includes('"$async"') || usesIdsOrRemoteRefs(doc.schema)) continue;
    const schema = typeof doc.schema === "object" ? { ...doc.schema } : doc.schema;
    if (typeof schema === "object") delete schema.$schema; // ajv knows no draft-04 meta-schema
    let check;
    try {
      check = new Ajv({ strict: false, validateFormats: false }).compile(schema);
    } catch {
      continue; // ajv refuses it (draft-04 "id", a regex it cannot compile)
    }
    for (const t of doc.tests ?? []) {
      compared++;
      const ours = isValid(doc.schema, t.data);
      if (ours !== check(t.data)) disagreements.push(`${file}: ${t.description}: ours ${ours}`);
    }
  }
  assert.deepEqual(disagreements, []);
  assert.ok(compared > 500, `only ${compared} instances compared`);
});

test("problems are reported with a JSON Pointer and an exact sentence", () => {
  const schema = {
    type: "object",
    properties: { age: { type: "integer", minimum: 0 }, tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 2 } },
    required: ["age", "name"],
    additionalProperties: false,
  };
  assert.deepEqual(validate(schema, { age: -1, tags: ["a", "c", "b"], extra: 1 }), [
    { path: "", keyword: "required", message: 'missing the required property "name"' },
    { path: "/age", keyword: "minimum", message: "-1 is below the minimum 0" },
    { path: "/tags", keyword: "maxItems", message: "3 items, more than the maximum 2" },
    { path: "/tags/1", keyword: "enum", message: 'expected one of ["a","b"], got "c"' },
    { path: "/extra", keyword: "additionalProperties", message: 'the property "extra" is not allowed' },
  ]);
  assert.deepEqual(validate({ $ref: "#/definitions/missing" }, 1), [{ path: "", keyword: "$ref", message: "cannot resolve $ref #/definitions/missing" }]);
});

test("a $ref cycle that never consumes input is reported, not a stack overflow", () => {
  const schema = { definitions: { a: { $ref: "#/definitions/b" }, b: { $ref: "#/definitions/a" } }, $ref: "#/definitions/a" };
  assert.equal(validate(schema, 1)[0].message, "the schema's $ref chain does not terminate");
  const tree = { type: "object", properties: { kids: { type: "array", items: { $ref: "#" } } } };
  assert.equal(isValid(tree, { kids: [{ kids: [{ kids: [] }] }] }), true);
  assert.equal(isValid(tree, { kids: [{ kids: [1] }] }), false);
});
