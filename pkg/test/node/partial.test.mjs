// parsePartialJson against an oracle: for random JSON values written with random whitespace,
// every prefix of the text reads as a prefix of the value (fields before the last one written
// equal the final ones; the last one is a prefix of its final value; strings only grow;
// numbers and literals appear only whole), and the whole text reads as the value.
import { test } from "node:test";
import assert from "node:assert/strict";

import { parsePartialJson } from "../../dist/index.js";

function rng(seed) {
  let s = seed >>> 0;
  return (n) => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s % n;
  };
}

function randomValue(next, depth) {
  const kind = next(depth > 3 ? 5 : 7);
  switch (kind) {
    case 0: return null;
    case 1: return next(2) === 0;
    case 2: return [0, -1, 12, 3.5, -0.25, 1e21, 7e-9][next(7)];
    case 3: case 4: return ["", "a", "héllo", 'q"uote', "back\\slash", "line\nbreak", "\u0001", "😀x"][next(8)];
    case 5: return Array.from({ length: next(4) }, () => randomValue(next, depth + 1));
    default: return Object.fromEntries(Array.from({ length: next(4) }, (_, i) => [`k${i}${"é".repeat(next(2))}`, randomValue(next, depth + 1)]));
  }
}

/** `text` of `value` with random whitespace between tokens. */
function write(value, next) {
  const gap = () => [" ", "", "\n  ", ""][next(4)];
  if (Array.isArray(value)) return `[${gap()}${value.map((v) => write(v, next)).join(`${gap()},${gap()}`)}${gap()}]`;
  if (value && typeof value === "object") {
    return `{${gap()}${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}${gap()}:${gap()}${write(v, next)}`).join(`${gap()},${gap()}`)}${gap()}}`;
  }
  return JSON.stringify(value);
}

/** Whether `p` (a partial read) is a prefix of `v`. */
function isPrefix(p, v) {
  if (p === undefined) return true;
  if (typeof v === "string") return typeof p === "string" && v.startsWith(p);
  if (Array.isArray(v)) {
    if (!Array.isArray(p) || p.length > v.length) return false;
    return p.every((x, i) => (i < p.length - 1 ? JSON.stringify(x) === JSON.stringify(v[i]) : isPrefix(x, v[i])));
  }
  if (v && typeof v === "object") {
    if (!p || typeof p !== "object" || Array.isArray(p)) return false;
    const keys = Object.keys(p);
    const order = Object.keys(v);
    if (keys.some((k, i) => order[i] !== k)) return false;
    return keys.every((k, i) => (i < keys.length - 1 ? JSON.stringify(p[k]) === JSON.stringify(v[k]) : isPrefix(p[k], v[k])));
  }
  return Object.is(p, v) || JSON.stringify(p) === JSON.stringify(v);
}

test("every prefix reads as a prefix of the value, and the whole as the value", () => {
  const next = rng(7);
  let prefixes = 0;
  for (let n = 0; n < 1500; n++) {
    const value = randomValue(next, 0);
    const text = write(value, next);
    for (let cut = 0; cut <= text.length; cut++) {
      const read = parsePartialJson(text.slice(0, cut));
      assert.ok(isPrefix(read, value), `${JSON.stringify(text.slice(0, cut))} read as ${JSON.stringify(read)}, not a prefix of ${JSON.stringify(value)}`);
      prefixes++;
    }
    const whole = parsePartialJson(text);
    if (typeof value !== "number") assert.deepEqual(whole, value, text);
  }
  assert.ok(prefixes > 10_000, `${prefixes} prefixes`);
});

test("what cannot start a JSON value is a SyntaxError", () => {
  for (const bad of ['{"a" 1', "[1 2]", "tx", '{"a":1}x', "{,}", '"\\q"']) {
    assert.throws(() => parsePartialJson(bad), SyntaxError, bad);
  }
  assert.equal(parsePartialJson(""), undefined);
  assert.equal(parsePartialJson("12"), undefined, "a number at the end may go on");
  assert.deepEqual(parsePartialJson('{"a": "xy'), { a: "xy" });
  assert.deepEqual(parsePartialJson('{"a": tr'), {});
  assert.deepEqual(parsePartialJson('{"a": 1, "b'), { a: 1 });
  assert.deepEqual(parsePartialJson('["\\u00e'), [""]);
});

test("random bytes and hostile shapes: a value, undefined or a SyntaxError, never another error", () => {
  // The remote client reads a server's stream with it: whatever the text, it returns or throws
  // SyntaxError. Random strings over JSON's own characters (so that some go deep) and over
  // arbitrary code units.
  const next = rng(7);
  const alphabet = ['{', '}', '[', ']', '"', ':', ',', '\\', 'u', '0', '1', '-', '.', 'e', 't', 'r', 'n', ' ', 'a', '\n'];
  for (let n = 0; n < 20000; n++) {
    const len = next(40);
    const text = n % 2
      ? Array.from({ length: len }, () => alphabet[next(alphabet.length)]).join("")
      : String.fromCharCode(...Array.from({ length: len }, () => next(0x10000)));
    try {
      parsePartialJson(text);
    } catch (e) {
      assert.ok(e instanceof SyntaxError, `${JSON.stringify(text)}: ${e}`);
    }
  }
  // Nesting past the bound is a SyntaxError, not a stack overflow; at the bound it reads.
  const deep = (n) => "[".repeat(n) + "]".repeat(n);
  assert.throws(() => parsePartialJson("[".repeat(1_000_000)), /containers nest deeper than 512/);
  assert.throws(() => parsePartialJson(deep(513)), /containers nest deeper than 512/);
  assert.equal(JSON.stringify(parsePartialJson(deep(512))), deep(512));
  // Closed siblings do not add up: 100,000 of them at depth 2.
  assert.equal(parsePartialJson(`[${"[1],".repeat(100_000)}[1]]`).length, 100_001);
  // Many scalars: one parse is linear in them (a sticky regex, no slice per scalar); 200,000
  // numbers, a 1.2 MB text, read in one pass.
  const numbers = Array.from({ length: 200_000 }, (_, k) => k);
  assert.deepEqual(parsePartialJson(JSON.stringify(numbers)), numbers);
});
