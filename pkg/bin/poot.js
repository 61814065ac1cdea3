#!/usr/bin/env node
// `npx poot doctor --base-url URL --model NAME [--json]`: which constrained-decoding mechanism an
// OpenAI-compatible endpoint really enforces, and why. Exit status: 0 reachable, 1 unreachable,
// 2 usage error.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { createRemoteClient, formatDoctor } from "../dist/remote/index.js";

const USAGE = `usage: poot doctor --base-url URL --model NAME [options]

  --base-url URL             OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1
  --model NAME               the model to probe
  --provider NAME            preset: auto (default), openai, azure, vllm, llamacpp, ollama, lmstudio, generic
  --api-key KEY              bearer token (default: $POOT_API_KEY, then $OPENAI_API_KEY)
  --structured-decoding M    auto (default) or off
  --cache-dir DIR            read and write DIR/capabilities.json
  --fresh                    probe again even if a result is cached
  --schema FILE              also check a JSON Schema (a .json file) for constructs outside the
                             portable subset: some servers do not enforce them
  --timeout-ms MS            per-request limit (the probe is also held to 20 s)
  --json                     print the report as JSON
  -h, --help                 this text
`;

function fail(message) {
  process.stderr.write(`poot: ${message}\n\n${USAGE}`);
  process.exit(2);
}

let parsed;
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: {
      "base-url": { type: "string" },
      model: { type: "string" },
      provider: { type: "string" },
      "api-key": { type: "string" },
      "structured-decoding": { type: "string" },
      "cache-dir": { type: "string" },
      fresh: { type: "boolean" },
      schema: { type: "string" },
      "timeout-ms": { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
} catch (error) {
  fail(error.message);
}
const { values, positionals } = parsed;
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
if (positionals[0] !== "doctor" || positionals.length !== 1) {
  fail(positionals.length === 0 ? "a command is required (doctor)" : `unknown command ${JSON.stringify(positionals.join(" "))}`);
}
if (!values["base-url"]) fail("--base-url is required");
if (!values.model) fail("--model is required");

let client;
try {
  client = createRemoteClient({
    baseURL: values["base-url"],
    model: values.model,
    provider: values.provider ?? "auto",
    apiKey: values["api-key"] ?? process.env.POOT_API_KEY ?? process.env.OPENAI_API_KEY,
    structuredDecoding: values["structured-decoding"],
    cache: values["cache-dir"],
    timeoutMs: values["timeout-ms"] === undefined ? undefined : Number(values["timeout-ms"]),
  });
} catch (error) {
  fail(error.message);
}

let schema;
if (values.schema !== undefined) {
  try {
    schema = JSON.parse(readFileSync(values.schema, "utf8"));
  } catch (error) {
    fail(`--schema ${values.schema}: ${error.message}`);
  }
}
const report = await client.doctor({ force: values.fresh === true, schema });
process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatDoctor(report));
process.exit(report.reachable ? 0 : 1);
