// Node-side checks of what pages/scenarios.js returns: each output validated independently of
// the engine (ajv for schemas, RegExp for regexes, JSON.parse; replies that reach max_tokens
// are closed by the engine, so they validate too). Not a test file itself.
import assert from "node:assert/strict";
import AjvModule from "ajv";

import { CLOSING, REGEXES, SCHEMAS } from "./scenarios.js";

const Ajv = AjvModule.default;

/** Asserts that a scenario's output is what its constraint allows. */
export function checkOutput(r, size, where) {
  const what = `${where}: ${r.name} (${r.stream ? "streamed" : "non-streamed"}) ${JSON.stringify(r.text)}`;
  assert.equal(typeof r.text, "string", what);
  if (r.stream) {
    assert.equal(r.ids.length, 1, `${what}: every chunk has the same id`);
    if (r.chat) assert.equal(r.role, "assistant", `${what}: the role chunk`);
    assert.ok(r.usage && r.usage.completion_tokens > 0, `${what}: the include_usage chunk`);
    assert.ok(r.chunks >= 2, `${what}: chunks`);
  } else {
    assert.equal(r.object, r.chat ? "chat.completion" : "text_completion", what);
    assert.ok(r.usage.completion_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, `${what}: usage`);
  }
  switch (r.name) {
    case "guided_json": {
      assert.equal(r.finish, "stop", what);
      const validate = new Ajv().compile(SCHEMAS[size]);
      const value = JSON.parse(r.text);
      assert.ok(validate(value), `${what}: ${JSON.stringify(validate.errors)}`);
      break;
    }
    case "guided_regex":
      assert.equal(r.finish, "stop", what);
      assert.match(r.text, new RegExp(`^(?:${REGEXES[size]})$`), what);
      break;
    case "json_object":
      // Cut by max_tokens (lean) or not, the reply is one complete value.
      assert.ok(["stop", "length"].includes(r.finish), what);
      assert.doesNotThrow(() => JSON.parse(r.text), what);
      if (size === "full") {
        assert.equal(r.finish, "stop", what);
        assert.equal(typeof JSON.parse(r.text), "object", what);
      }
      break;
    case "closing": {
      // max_tokens is far below what the model would write: the engine steers it onto a
      // shortest completion, so the reply validates, and says so.
      const { schema, regex } = CLOSING[size];
      if (schema) {
        const validate = new Ajv().compile(schema);
        assert.ok(validate(JSON.parse(r.text)), `${what}: ${JSON.stringify(validate.errors)}`);
        assert.equal(r.finish, "length", what);
        assert.equal(r.usage.forced_closes, 1, `${what}: ${JSON.stringify(r.usage)}`);
      } else {
        assert.match(r.text, new RegExp(`^(?:${regex})$`), what);
        if (r.usage.forced_closes) assert.equal(r.finish, "length", what);
      }
      break;
    }
    default:
      assert.fail(`unknown scenario ${r.name}`);
  }
}

/** Asserts what abortMidStream returned: the stream ended without error, soon after the abort. */
export function checkAbort(r, where, { withinMs }) {
  assert.equal(r.error, null, `${where}: an aborted stream just ends, as in the page`);
  assert.ok(r.text.length > 0, `${where}: text before the abort`);
  assert.ok(r.msToEnd < withinMs, `${where}: ended ${r.msToEnd.toFixed(0)} ms after the abort (limit ${withinMs})`);
}

/** Asserts what openaiClient returned. */
export function checkOpenai(r, size, modelId, where) {
  assert.deepEqual(r.models, [modelId], `${where}: models.list`);
  assert.deepEqual(
    { name: r.badRequest.name, status: r.badRequest.status, param: r.badRequest.param, code: r.badRequest.code },
    { name: "BadRequestError", status: 400, param: "guided_regex", code: "invalid_input" },
    `${where}: a 400 through the client`,
  );
  assert.match(r.badRequest.message, /guided_regex must be a string, got a number/);
  assert.equal(r.nonStreamed.finish, "stop", where);
  assert.match(r.nonStreamed.text, new RegExp(`^(?:${REGEXES[size]})$`), `${where}: ${r.nonStreamed.text}`);
  if (size === "full") {
    assert.equal(r.streamed.finish, "stop", where);
    const validate = new Ajv().compile(SCHEMAS.full);
    assert.ok(validate(JSON.parse(r.streamed.text)), `${where}: ${r.streamed.text}`);
  }
}

/** The validation scenario: 400s naming the field, and a warning where nothing is forced. */
export function checkValidation(r, size, where) {
  assert.deepEqual(
    { status: r.outranked.status, param: r.outranked.param, code: r.outranked.code },
    { status: 400, param: "guided_regex", code: "invalid_input" },
    `${where}: an invalid field that loses precedence`,
  );
  assert.deepEqual(
    { status: r.forcedTool.status, param: r.forcedTool.param },
    { status: 400, param: "tools" },
    `${where}: a forced call to a tool whose schema is refused`,
  );
  assert.match(r.forcedTool.message, /uniqueItems/, where);
  if (size === "full") {
    assert.equal(r.autoWarnings?.length, 1, `${where}: ${JSON.stringify(r.autoWarnings)}`);
    assert.match(r.autoWarnings[0], /^tools\[0\] `tag`: a call to it could not be forced .*tool_choice "auto"/, where);
    assert.deepEqual(r.namedCalls, ["add"], `${where}: a call forced by name`);
    assert.deepEqual(r.typed.parsed, JSON.parse(r.typed.content), `${where}: parse with a Zod schema`);
    assert.equal(r.typed.valid, true, `${where}: ${r.typed.content}`);
  }
}
