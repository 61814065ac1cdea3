// Error classes and demotion on error bodies as real servers send them.
import { test } from "node:test";
import assert from "node:assert/strict";

import { classifyResponse, isDemotion, retryAfterMs } from "../../dist/remote/index.js";

const H = (h = {}) => new Headers(h);
const body = (o) => JSON.stringify(o);

test("classes and demotions for real servers' error bodies", () => {
  const cases = [
    // [status, body, headers, sent, kind, demotes]
    [400, body({ error: { message: "Unrecognized request argument supplied: guided_json", type: "invalid_request_error", param: null, code: null } }), {}, "guided_json", "permanent", true],
    [422, body({ detail: [{ loc: ["body", "structured_outputs"], msg: "extra fields not permitted", type: "value_error.extra" }] }), {}, "structured_outputs", "permanent", true],
    [400, body({ error: { code: 400, message: "request (5031 tokens) exceeds the available context size (4096 tokens), try increasing it", type: "exceed_context_size_error" } }), {}, "json_schema", "context_overflow", false],
    [400, body({ error: { message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", code: "context_length_exceeded" } }), {}, "prompt_only", "context_overflow", false],
    [400, body({ error: { code: 400, message: "Unable to generate parser for this template. Automatic parser generation failed: JSON schema conversion failed:\nError resolving ref #/nope", type: "invalid_request_error" } }), {}, "json_schema", "permanent", false],
    [400, body({ error: { code: 400, message: "Failed to initialize samplers: failed to parse grammar", type: "invalid_request_error" } }), {}, "gbnf_grammar", "permanent", true],
    [400, body({ error: "'response_format.type' must be 'json_schema'" }), {}, "json_object", "permanent", true],
    [500, body({ error: { code: 500, message: 'Either "json_schema" or "grammar" can be specified, but not both', type: "server_error" } }), {}, "gbnf_grammar", "permanent", true],
    [500, body({ error: { code: 500, message: "upstream crashed" } }), {}, "json_schema", "transient", false],
    [503, body({ error: { code: 503, message: "Loading model", type: "unavailable_error" } }), {}, "json_schema", "transient", false],
    [503, "Service Unavailable", { "retry-after": "1" }, "json_schema", "rate_limited", false],
    [429, body({ error: { message: "Rate limit reached for requests" } }), { "retry-after-ms": "20" }, "json_schema", "rate_limited", false],
    [401, body({ error: { message: "Incorrect API key provided for response_format" } }), {}, "json_schema", "permanent", false],
    [403, body({ error: { message: "response_format not allowed for this key" } }), {}, "json_schema", "permanent", false],
    [404, body({ error: { message: "model not found" } }), {}, "json_schema", "permanent", false],
    [408, "timeout", {}, "prompt_only", "transient", false],
    [400, body({ error: { message: "messages: field required" } }), {}, "json_schema", "permanent", false],
  ];
  for (const [status, text, headers, sent, kind, demotes] of cases) {
    const error = classifyResponse(status, text, H(headers), 0, sent);
    assert.equal(error.kind, kind, `${status} ${text}`);
    assert.equal(isDemotion(error, sent), demotes, `${status} ${text}`);
    assert.equal(error.status, status);
  }
  assert.equal(classifyResponse(400, "plain text body", H(), 0).message, "HTTP 400: plain text body");
  assert.equal(classifyResponse(502, "", H(), 0).message, "HTTP 502: (empty body)");
});

test("retry hints: retry-after-ms first, then Retry-After seconds or HTTP date", () => {
  assert.equal(retryAfterMs(H({ "retry-after-ms": "250.5", "retry-after": "9" }), 0), 250.5);
  assert.equal(retryAfterMs(H({ "retry-after": "2" }), 0), 2000);
  assert.equal(retryAfterMs(H({ "retry-after": "Thu, 01 Jan 1970 00:00:05 GMT" }), 1000), 4000);
  assert.equal(retryAfterMs(H({ "retry-after": "soon" }), 0), null);
  assert.equal(retryAfterMs(H(), 0), null);
});
