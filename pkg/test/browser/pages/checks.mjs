// Node-side checks of what pages/scenarios.js returns: each output validated independently of
// the engine (ajv for schemas, RegExp for regexes, JSON.parse, and a JSON-prefix reader for
// replies cut by max_tokens). Not a test file itself.
import assert from "node:assert/strict";
import AjvModule from "ajv";

import { REGEXES, SCHEMAS } from "./scenarios.js";

const Ajv = AjvModule.default;

/**
 * Whether `text` is a JSON value ("complete"), a prefix of one that more text could complete
 * ("prefix"), or neither ("invalid"). Whitespace may surround the value.
 */
export function jsonPrefix(text) {
  let i = 0;
  const END = Symbol("end");
  const peek = () => (i < text.length ? text[i] : END);
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const fail = () => {
    throw new Error("invalid");
  };
  const literal = (word) => {
    for (const ch of word) {
      if (peek() === END) throw END;
      if (text[i++] !== ch) fail();
    }
  };
  const digits = (atLeastOne) => {
    let n = 0;
    while (peek() !== END && /[0-9]/.test(peek())) i++, n++;
    if (atLeastOne && n === 0) (peek() === END ? (() => { throw END; })() : fail());
  };
  const number = () => {
    if (peek() === "-") i++;
    if (peek() === END) throw END;
    if (peek() === "0") i++;
    else if (/[1-9]/.test(peek())) digits(true);
    else fail();
    if (peek() === ".") (i++, digits(true));
    if (peek() === "e" || peek() === "E") {
      i++;
      if (peek() === "+" || peek() === "-") i++;
      digits(true);
    }
  };
  const string = () => {
    i++; // the opening quote
    for (;;) {
      const c = peek();
      if (c === END) throw END;
      i++;
      if (c === '"') return;
      if (c === "\\") {
        const e = peek();
        if (e === END) throw END;
        i++;
        if (e === "u") {
          for (let k = 0; k < 4; k++) {
            if (peek() === END) throw END;
            if (!/[0-9a-fA-F]/.test(text[i++])) fail();
          }
        } else if (!'"\\/bfnrt'.includes(e)) fail();
      } else if (c < " ") fail();
    }
  };
  const value = () => {
    ws();
    const c = peek();
    if (c === END) throw END;
    if (c === "{") {
      i++;
      ws();
      if (peek() === "}") return void i++;
      for (;;) {
        ws();
        if (peek() === END) throw END;
        if (peek() !== '"') fail();
        string();
        ws();
        if (peek() === END) throw END;
        if (text[i++] !== ":") fail();
        value();
        ws();
        if (peek() === END) throw END;
        const sep = text[i++];
        if (sep === "}") return;
        if (sep !== ",") fail();
      }
    }
    if (c === "[") {
      i++;
      ws();
      if (peek() === "]") return void i++;
      for (;;) {
        value();
        ws();
        if (peek() === END) throw END;
        const sep = text[i++];
        if (sep === "]") return;
        if (sep !== ",") fail();
      }
    }
    if (c === '"') return string();
    if (c === "t") return literal("true");
    if (c === "f") return literal("false");
    if (c === "n") return literal("null");
    return number();
  };
  try {
    value();
    ws();
    // A number at the very end may still grow, but it is a value already.
    return i === text.length ? "complete" : "invalid";
  } catch (e) {
    return e === END ? "prefix" : "invalid";
  }
}

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
      if (r.finish === "stop") {
        assert.doesNotThrow(() => JSON.parse(r.text), what);
      } else {
        assert.equal(r.finish, "length", what);
        assert.notEqual(jsonPrefix(r.text), "invalid", `${what}: not a prefix of a JSON value`);
      }
      if (size === "full") {
        assert.equal(r.finish, "stop", what);
        assert.equal(typeof JSON.parse(r.text), "object", what);
      }
      break;
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

// The checker's own cases, asserted once at import (cheap).
for (const [text, want] of [
  ['{"a": [1, 2.5e3, "x\\n"], "b": null}', "complete"],
  ['{"a": [1, 2.', "prefix"],
  ["-10", "complete"],
  ["-", "prefix"],
  ["\n\n", "prefix"],
  ['{"a" 1}', "invalid"],
  ["tru", "prefix"],
  ["trux", "invalid"],
  ['"\\u00', "prefix"],
  ["01", "invalid"],
]) {
  assert.equal(jsonPrefix(text), want, `jsonPrefix(${JSON.stringify(text)})`);
}
