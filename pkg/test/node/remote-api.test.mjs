// The public surface of poot/remote: importable without the wasm, option validation with exact
// text, the request it sends, strict handling, portable(), caches, doctor() and the CLI.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

import * as remote from "poot/remote";
import { createRemoteClient, directoryCache, formatDoctor, localStorageCache, normalizeDecoding, portable, qualifiesForStrict, toStrict } from "../../dist/remote/index.js";
import { PootError } from "../../dist/index.js";
import { completion, mechanismOf, providerServer } from "../fixtures/remote/fake-openai.mjs";

const run = promisify(execFile);
const DIST = new URL("../../dist/", import.meta.url);
const ASK = [{ role: "user", content: "Describe it." }];
const SCHEMA = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };

/** Every module reachable from `file` through static imports/exports (dynamic import() excluded). */
async function staticGraph(file, seen = new Set()) {
  if (seen.has(file.href)) return seen;
  seen.add(file.href);
  const source = await readFile(file, "utf8");
  for (const m of source.matchAll(/^\s*(?:import|export)\s[^;]*?\sfrom\s+"([^"]+)"|^\s*import\s+"([^"]+)"/gm)) {
    const spec = m[1] ?? m[2];
    if (spec.startsWith(".")) await staticGraph(new URL(spec, file), seen);
    else seen.add(spec);
  }
  return seen;
}

test("poot/remote resolves through the package exports and never statically imports the wasm", async () => {
  assert.equal(typeof remote.createRemoteClient, "function");
  assert.equal(typeof remote.repair, "function");
  const graph = [...(await staticGraph(new URL("remote/index.js", DIST)))];
  assert.ok(graph.some((u) => u.endsWith("/remote/client.js")));
  const wasm = graph.filter((u) => /wasm\.js$|poot\.js$|poot_bg|^node:/.test(u));
  assert.deepEqual(wasm, [], "static imports that would load the wasm or Node built-ins in a browser");
  // The one wasm import is the grammar rung's dynamic one.
  assert.match(await readFile(new URL("remote/gbnf.js", DIST), "utf8"), /await import\("\.\.\/wasm\.js"\)/);
});

test("options are validated with exact messages", () => {
  const bad = [
    [{ baseURL: "localhost:8080", model: "m" }, 'baseURL must be an absolute http(s) URL, got "localhost:8080"', "baseURL"],
    [{ baseURL: "ftp://x/v1", model: "m" }, 'baseURL must be an absolute http(s) URL, got "ftp://x/v1"', "baseURL"],
    [{ baseURL: "http://x/v1", model: "" }, 'model must be a non-empty string, got ""', "model"],
    [{ baseURL: "http://x/v1", model: "m", provider: "anthropic" }, 'provider must be one of auto, openai, azure, vllm, llamacpp, ollama, lmstudio, generic, got "anthropic"', "provider"],
    [
      { baseURL: "http://x/v1", model: "m", structuredDecoding: "maybe" },
      'structuredDecoding must be "auto" or "off" (or an alias of off: none, false, 0, prompt, prompt-only), got "maybe"',
      "structuredDecoding",
    ],
    [{ baseURL: "http://x/v1", model: "m", retry: { attempts: 0 } }, "retry.attempts must be a positive integer, got 0", "retry"],
    [{ baseURL: "http://x/v1", model: "m", timeoutMs: -1 }, "timeoutMs must be a positive number of milliseconds, got -1", "timeoutMs"],
  ];
  for (const [options, message, param] of bad) {
    assert.throws(
      () => createRemoteClient(options),
      (e) => e instanceof PootError && e.message === message && e.param === param && e.code === "invalid_option" && e.status === 400,
    );
  }
});

test("structuredDecoding: auto and off with the spec's aliases", () => {
  for (const off of ["off", "none", "false", "0", "prompt", "prompt-only", " OFF ", "Prompt-Only", false, 0]) assert.equal(normalizeDecoding(off), "off", String(off));
  for (const auto of ["auto", undefined, true, "AUTO"]) assert.equal(normalizeDecoding(auto), "auto", String(auto));
});

test("off: no probe traffic, prompt-only JSON, the fenced answer repaired", async () => {
  const server = await providerServer("vllm012");
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "vllm", structuredDecoding: "prompt-only" });
    const result = await client.structured({ messages: ASK, schema: SCHEMA });
    assert.equal(server.chats.length, 1);
    assert.equal(mechanismOf(server.chats[0].body), "prompt_only");
    assert.equal(result.mechanism, "prompt_only");
    assert.equal(result.rung, "fence");
    assert.deepEqual(client.stats.outcomes, { valid: 0, repaired: 1, truncated: 0, failed: 0 });
    const report = await client.doctor();
    assert.equal(report.mechanism, "prompt_only");
    assert.equal(report.why, "structured_decoding is off: prompt-only JSON with repair");
  } finally {
    await server.close();
  }
});

test("a structured request: schema instruction with the word JSON, JSON-only stop sequences, the caller's stop first", async () => {
  const server = await providerServer("ollama");
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "m", provider: "ollama" });
    await client.structured({
      messages: [{ role: "system", content: "You are terse." }, ...ASK],
      schema: SCHEMA,
      maxTokens: 64,
      temperature: 0.2,
      stop: "<END>",
    });
    const body = server.chats.at(-1).body;
    assert.deepEqual(body.stop, ["<END>", "\n## ", "```\n\n", "\nNote:"]);
    assert.equal(body.max_tokens, 64);
    assert.equal(body.temperature, 0.2);
    assert.equal(body.messages.length, 2);
    assert.equal(
      body.messages[0].content,
      `You are terse.\n\nReply with only a JSON object that matches this JSON Schema, with no prose and no code fences:\n${JSON.stringify(SCHEMA)}`,
    );
    assert.deepEqual(body.response_format, { type: "json_schema", json_schema: { name: "output", schema: SCHEMA, strict: true } });
  } finally {
    await server.close();
  }
});

test("strict only for qualifying schemas; OpenAI gets optional -> required + nullable, nulls stripped back out", async () => {
  const loose = {
    type: "object",
    properties: { name: { type: "string" }, nick: { type: "string" }, tags: { type: "array", items: { type: "string" } } },
    required: ["name"],
  };
  assert.equal(qualifiesForStrict(SCHEMA), true);
  assert.equal(qualifiesForStrict(loose), false);
  assert.equal(qualifiesForStrict({ type: "array", items: SCHEMA }), false, "the root must be an object");
  assert.equal(toStrict({ type: "object", properties: {}, additionalProperties: true }), null);
  assert.deepEqual(toStrict(loose), {
    type: "object",
    properties: {
      name: { type: "string" },
      nick: { type: ["string", "null"] },
      tags: { type: ["array", "null"], items: { type: "string" } },
    },
    required: ["name", "nick", "tags"],
    additionalProperties: false,
  });

  const vllm = await providerServer("vllm012");
  const openai = await providerServer("openai", {
    override: (r) =>
      r.method === "POST" && r.body.response_format?.json_schema?.name === "person" ? completion('{"name": "Ann", "nick": null, "tags": null}') : null,
  });
  try {
    const v = createRemoteClient({ baseURL: vllm.url, model: "m", provider: "vllm" });
    await v.structured({ messages: ASK, schema: loose, name: "person" });
    assert.equal(vllm.chats.at(-1).body.response_format.json_schema.strict, false);
    assert.deepEqual(vllm.chats.at(-1).body.response_format.json_schema.schema, loose);

    const o = createRemoteClient({ baseURL: openai.url, model: "m", provider: "openai", apiKey: "sk-test" });
    const result = await o.structured({ messages: ASK, schema: loose, name: "person" });
    const sent = openai.chats.at(-1);
    assert.equal(sent.body.response_format.json_schema.strict, true);
    assert.deepEqual(sent.body.response_format.json_schema.schema, toStrict(loose));
    assert.equal(sent.headers.authorization, "Bearer sk-test");
    assert.deepEqual(result.value, { name: "Ann" });
  } finally {
    await vllm.close();
    await openai.close();
  }
});

test("azure: api-key header and the api-version query survive", async () => {
  const server = await providerServer("azure");
  try {
    const client = createRemoteClient({ baseURL: `${server.url}?api-version=2024-10-21`, model: "gpt-4o", provider: "azure", apiKey: "k" });
    await client.structured({ messages: ASK, schema: SCHEMA });
    const last = server.chats.at(-1);
    assert.equal(last.path, "/v1/chat/completions?api-version=2024-10-21");
    assert.equal(last.headers["api-key"], "k");
    assert.equal(createRemoteClient({ baseURL: "https://x.openai.azure.com/openai/v1", model: "m" }).provider, "azure");
    assert.equal(createRemoteClient({ baseURL: "https://api.openai.com/v1", model: "m" }).provider, "openai");
    assert.equal(createRemoteClient({ baseURL: "http://127.0.0.1:8080/v1", model: "m" }).provider, "generic");
  } finally {
    await server.close();
  }
});

test("portable() lists constructs outside the portable subset", () => {
  assert.deepEqual(portable(SCHEMA), { portable: true, issues: [] });
  const schema = {
    type: "object",
    properties: {
      a: { type: "number", minimum: 0.5 },
      b: { type: "array", items: { type: "string" }, uniqueItems: true },
      c: { anyOf: [{ type: "string" }, { type: "null" }] },
      d: { type: "string", pattern: "^x", format: "email" },
      e: { $ref: "#/definitions/node" },
    },
    patternProperties: { "^x": { type: "string" } },
    definitions: { node: { type: "object", properties: { next: { $ref: "#/definitions/node" } } } },
  };
  assert.deepEqual(
    portable(schema).issues.map((i) => `${i.path} ${i.keyword}`),
    [
      "/properties/a/type type",
      "/properties/a/minimum minimum",
      "/properties/b/uniqueItems uniqueItems",
      "/properties/c/anyOf anyOf",
      "/properties/d/pattern pattern",
      "/properties/d/format format",
      "/properties/e/$ref/properties/next/$ref $ref",
      "/patternProperties patternProperties",
    ],
  );
});

test("directory cache: capabilities.json round trip, corrupt file tolerated; localStorage cache", async () => {
  const dir = await mkdtemp(join(tmpdir(), "poot-cache-"));
  const cache = directoryCache(dir);
  assert.equal(await cache.get("k"), undefined);
  await Promise.all([cache.set("k1", { probed: true, n: 1 }), cache.set("k2", { probed: true, n: 2 })]);
  assert.deepEqual(await cache.get("k2"), { probed: true, n: 2 });
  const file = JSON.parse(await readFile(join(dir, "capabilities.json"), "utf8"));
  assert.deepEqual(Object.keys(file.entries).sort(), ["k1", "k2"]);
  await writeFile(join(dir, "capabilities.json"), "{not json");
  assert.equal(await cache.get("k1"), undefined);
  await cache.set("k3", { probed: true });
  assert.deepEqual(Object.keys(JSON.parse(await readFile(join(dir, "capabilities.json"), "utf8")).entries), ["k3"]);

  const items = new Map();
  const storage = { getItem: (k) => items.get(k) ?? null, setItem: (k, v) => items.set(k, v) };
  const local = localStorageCache(storage);
  await local.set("a|b|c", { probed: true });
  assert.deepEqual([...items.keys()], ["poot:capabilities:a|b|c"]);
  assert.deepEqual(await local.get("a|b|c"), { probed: true });
  const broken = localStorageCache({ getItem: () => { throw new Error("denied"); }, setItem: () => { throw new Error("quota"); } });
  assert.equal(await broken.get("x"), undefined);
  await broken.set("x", {});
});

test("doctor(): provider, model, endpoint, reachability, the mechanism and why", async () => {
  const server = await providerServer("vllm011", { models: ["qwen", "llama"] });
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "qwen", provider: "vllm" });
    const report = await client.doctor();
    assert.equal(report.provider, "vllm");
    assert.equal(report.model, "qwen");
    assert.equal(report.endpoint, server.url);
    assert.equal(report.reachable, true);
    assert.match(report.reachability, /^GET \/models answered 200 in \d+ ms$/);
    assert.deepEqual(report.models, ["qwen", "llama"]);
    assert.equal(report.mechanism, "json_schema");
    assert.deepEqual(report.ladder, ["json_schema", "guided_json", "json_object", "prompt_only"]);
    assert.equal(report.why, 'json_schema: probe output parsed and validated: "{\\"poot_probe_qx7\\":true}"');
    const text = formatDoctor(report);
    assert.match(text, /^provider {3}vllm\nmodel {6}qwen\nendpoint {3}http:\/\/127\.0\.0\.1:\d+\/v1\nreachable {2}yes \(GET \/models answered 200 in \d+ ms\)\nserves {5}qwen, llama\n/);
    assert.match(text, /\nmechanism  json_schema\n/);
    assert.match(text, /\n {2}structured_outputs fail {7}answered 200 but the output does not parse: "Hello! How can I help you today\?"\n/);
  } finally {
    await server.close();
  }
});

test("npx poot doctor: text, --json, unreachable exit 1, usage errors exit 2", async () => {
  const bin = new URL("../../bin/poot.js", import.meta.url).pathname;
  const server = await providerServer("llamacpp");
  try {
    const text = await run(process.execPath, [bin, "doctor", "--base-url", server.url, "--model", "fake-model", "--provider", "llamacpp"]);
    assert.match(text.stdout, /^provider {3}llamacpp\n/);
    assert.match(text.stdout, /\nmechanism  json_schema\n/);
    const json = JSON.parse((await run(process.execPath, [bin, "doctor", "--base-url", server.url, "--model", "fake-model", "--json"])).stdout);
    assert.equal(json.provider, "generic");
    assert.equal(json.reachable, true);
    assert.equal(json.mechanism, "json_schema");
  } finally {
    await server.close();
  }
  await assert.rejects(run(process.execPath, [bin, "doctor", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--json"]), (e) => {
    assert.equal(e.code, 1);
    assert.equal(JSON.parse(e.stdout).reachable, false);
    return true;
  });
  await assert.rejects(run(process.execPath, [bin, "doctor", "--model", "m"]), (e) => e.code === 2 && e.stderr.startsWith("poot: --base-url is required\n"));
  await assert.rejects(run(process.execPath, [bin, "doctor", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--schema", "/nonexistent.json"]), (e) => e.code === 2 && e.stderr.startsWith("poot: --schema /nonexistent.json: "));
  await assert.rejects(run(process.execPath, [bin, "fix"]), (e) => e.code === 2 && e.stderr.startsWith('poot: unknown command "fix"\n'));
});

test("portability: structured() reports a schema's non-portable constructs once, doctor with a schema too", async () => {
  const schema = { type: "object", properties: { id: { type: "string", pattern: "^[a-z]+$" }, n: { type: "number", multipleOf: 0.5 } }, required: ["id"] };
  const server = await providerServer("vllm012");
  const dir = mkdtempSync(join(tmpdir(), "poot-doctor-"));
  try {
    const client = createRemoteClient({ baseURL: server.url, model: "fake-model" });
    const first = await client.structured({ messages: [{ role: "user", content: "x" }], schema });
    const want = portable(schema).issues;
    assert.ok(want.length >= 2, JSON.stringify(want));
    assert.equal(first.warnings.length, want.length);
    for (const [i, issue] of want.entries()) assert.ok(first.warnings[i].startsWith(`schema ${issue.path}: ${issue.message}`), first.warnings[i]);
    const second = await client.structured({ messages: [{ role: "user", content: "y" }], schema });
    assert.deepEqual(second.warnings, [], "once per schema");
    const clean = await client.structured({ messages: [{ role: "user", content: "z" }], schema: { type: "object", properties: { a: { type: "integer" } } } });
    assert.deepEqual(clean.warnings, []);
    const report = await client.doctor({ schema });
    assert.deepEqual(report.portability, portable(schema));
    assert.match(formatDoctor(report), /\nportable   no\n {2}\S+ pattern: /);
    const file = join(dir, "schema.json");
    writeFileSync(file, JSON.stringify(schema));
    const bin = new URL("../../bin/poot.js", import.meta.url).pathname;
    const text = await run(process.execPath, [bin, "doctor", "--base-url", server.url, "--model", "fake-model", "--schema", file]);
    assert.match(text.stdout, /\nportable   no\n/);
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
