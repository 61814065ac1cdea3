// compileConstraint, the constraint engine for callers that run the model elsewhere: masks
// bit-identical to the Rust engine's (`poot trace --masks`, recorded in
// test/fixtures/constraint-masks/smollm2.json.gz) on the real SmolLM2 vocabulary for every kind
// of constraint, read from a GGUF file's header, a shared vocabulary or a token list; the
// matcher's accept / rollback / forced / free contract; and every validation error with its
// exact text, status, code and param.
//
// Needs POOT_REFERENCE_GGUF (SmolLM2-135M-Instruct.Q4_1.gguf; `make test` fetches it and sets
// it) and fails rather than skips without it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";

import { compileConstraint, loadVocabulary, loadWasm, PootError } from "../../dist/index.js";
import { ggufHeaderEnd } from "../../dist/constraint.js";

await loadWasm(readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url)));

const FIXTURE = JSON.parse(
  gunzipSync(readFileSync(new URL("../fixtures/constraint-masks/smollm2.json.gz", import.meta.url))).toString("utf8"),
);
const WORDS = Math.ceil(FIXTURE.vocab_size / 32);

function referenceGguf() {
  const path = process.env.POOT_REFERENCE_GGUF;
  assert.ok(path, "POOT_REFERENCE_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model.sh prints its path), or run `make test`");
  return readFileSync(path);
}

/** The recorded mask of one step, as u32 words. */
function expectedMask(step) {
  const mask = new Uint32Array(WORDS);
  const set = (from, to) => {
    for (let t = from; t < to; t++) mask[t >>> 5] |= 1 << (t & 31);
  };
  if (step.allowed) for (const [a, b] of step.allowed) set(a, b);
  else {
    set(0, FIXTURE.vocab_size);
    for (const [a, b] of step.denied) for (let t = a; t < b; t++) mask[t >>> 5] &= ~(1 << (t & 31));
  }
  return mask;
}

const bit = (mask, t) => (mask[t >>> 5] >>> (t & 31)) & 1;

/** Walks a recorded case through `matcher`, checking every mask and the forced bytes. */
function walk(matcher, c, tokenBytes) {
  const mask = new Uint32Array(matcher.maskWords);
  for (const step of c.steps) {
    matcher.fillMask(mask);
    const expected = expectedMask(step);
    if (!mask.every((w, i) => w === expected[i])) {
      const diff = [];
      for (let t = 0; t < FIXTURE.vocab_size && diff.length < 10; t++) if (bit(mask, t) !== bit(expected, t)) diff.push(t);
      assert.fail(`${c.name} step ${step.step}: mask differs from the Rust engine's at tokens ${diff.join(", ")}`);
    }
    // Every allowed text token agrees with the forced bytes (one is a prefix of the other).
    const forced = matcher.forced();
    assert.ok(forced instanceof Uint8Array);
    if (forced.length && tokenBytes) {
      for (let t = 0; t < FIXTURE.vocab_size; t++) {
        if (!bit(mask, t) || matcher.eosIds.includes(t)) continue;
        const b = tokenBytes(t);
        const n = Math.min(b.length, forced.length);
        for (let i = 0; i < n; i++) assert.equal(b[i], forced[i], `${c.name} step ${step.step}: token ${t} contradicts the forced bytes`);
      }
    }
    const end = step.step === c.steps.length - 1;
    if (!end) {
      assert.equal(matcher.isAllowed(step.token), true);
      matcher.accept(step.token);
    } else {
      assert.equal(matcher.isAccepting(), true, `${c.name}: the text is complete`);
      assert.equal(matcher.tokenCount, c.steps.length - 1);
    }
  }
}

test("masks are bit-identical to the Rust engine's on SmolLM2 for every constraint kind", async () => {
  const gguf = referenceGguf();
  const kinds = { json: "json", json_schema: "json", json_object: "json_object", grammar: "grammar", choice: "choice", regex: "regex" };
  assert.deepEqual(FIXTURE.cases.map((c) => c.name), Object.keys(kinds));
  const vocab = await loadVocabulary({ gguf });
  assert.equal(vocab.size, FIXTURE.vocab_size);
  assert.deepEqual(vocab.eosIds, [0, 2]);
  for (const c of FIXTURE.cases) {
    const matcher = await compileConstraint({ vocabulary: { gguf }, request: c.request });
    assert.equal(matcher.kind, kinds[c.name]);
    assert.equal(matcher.vocabSize, 49152);
    assert.equal(matcher.maskWords, 1536);
    walk(matcher, c, (t) => vocab.tokenBytes(t));
    // The end-of-sequence token ends it; nothing is allowed after.
    matcher.accept(c.steps.at(-1).token ?? 0);
    assert.equal(matcher.isFinished(), true);
    const after = new Uint32Array(matcher.maskWords);
    matcher.fillMask(after);
    assert.ok(after.every((w) => w === 0));
    matcher.free();
  }
  vocab.free();
});

test("a shared vocabulary, a GGUF header prefix and a token list give the same masks", async () => {
  const gguf = referenceGguf();
  // Only the header is read: it ends where the tensor data begins (1.7 MB of 98 MB here).
  const end = ggufHeaderEnd(gguf);
  assert.ok(end > 1_000_000 && end < 2_000_000, `header end ${end}`);
  const prefix = gguf.subarray(0, end);
  const shared = await loadVocabulary({ gguf: prefix });
  // The same vocabulary as text tokens: each special token becomes a byte no UTF-8 text has.
  const tokens = [];
  for (let t = 0; t < shared.size; t++) tokens.push(shared.isText(t) ? shared.tokenBytes(t) : new Uint8Array([0xff]));
  const listed = await loadVocabulary({ tokens, eos: [...shared.eosIds] });
  // A fresh ArrayBuffer holding only the prefix works too.
  const buffer = prefix.slice().buffer;
  for (const c of FIXTURE.cases) {
    for (const vocabulary of [shared, listed, { gguf: buffer }]) {
      const matcher = await compileConstraint({ vocabulary, request: c.request });
      walk(matcher, c);
      matcher.free();
    }
  }
  // Freeing a matcher leaves a shared vocabulary usable.
  assert.equal(shared.size, 49152);
  assert.deepEqual([...shared.tokenBytes(34)], [0x32]);
  shared.free();
  listed.free();
});

test("accept, rollback, reset and forced bytes follow the output", async () => {
  const tokens = ["0", "1", "2", "-", "20", "2024", "é", "<eos>"].map((s) => new TextEncoder().encode(s));
  const m = await compileConstraint({ vocabulary: { tokens, eos: [7] }, request: { guided_regex: "[0-9]{4}-[0-9]{2}" } });
  assert.equal(m.vocabSize, 8);
  assert.deepEqual(m.eosIds, [7]);
  const start = new Uint32Array(1);
  m.fillMask(start);
  assert.deepEqual([...start], [0b110111]); // 0, 1, 2, 20, 2024
  m.accept(5); // "2024"
  assert.deepEqual([...m.forced()], [0x2d]);
  m.accept(3);
  assert.equal(m.tokenCount, 2);
  assert.equal(m.isAccepting(), false);
  m.rollback(2);
  assert.equal(m.tokenCount, 0);
  const again = new Uint32Array(1);
  m.fillMask(again);
  assert.deepEqual(again, start);
  m.accept(5);
  m.reset();
  assert.equal(m.tokenCount, 0);
  assert.equal(m.isAllowed(6), false);
  assert.equal(m.isAllowed(99), false);
  m.free();
  m.free(); // twice is harmless

  // A choice forces its whole text, across a multi-byte character.
  const choice = await compileConstraint({ vocabulary: { tokens, eos: [7] }, request: { guided_choice: ["20-é"] } });
  assert.deepEqual([...choice.forced()], [...new TextEncoder().encode("20-é")]);
  choice.free();
});

test("a tokenizer.json vocabulary, as text or as an object", async () => {
  const json = {
    added_tokens: [{ id: 2, content: "</s>", special: true }],
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }] },
    model: { type: "BPE", byte_fallback: true, vocab: { "<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁yes": 4, "▁no": 5, yes: 6 }, merges: [] },
  };
  for (const tokenizerJson of [json, JSON.stringify(json)]) {
    const m = await compileConstraint({ vocabulary: { tokenizerJson }, request: { guided_choice: [" yes", " no"] } });
    assert.deepEqual(m.eosIds, [2]);
    const mask = new Uint32Array(1);
    m.fillMask(mask);
    assert.deepEqual([...mask], [(1 << 4) | (1 << 5)]);
    m.accept(5);
    m.fillMask(mask);
    assert.deepEqual([...mask], [1 << 2]);
    m.free();
  }
  // eos given explicitly wins over the file's.
  const m = await compileConstraint({ vocabulary: { tokenizerJson: json, eos: [1] }, request: { guided_regex: "yes" } });
  assert.deepEqual(m.eosIds, [1]);
  m.free();
});

test("a request without a constraint compiles to null; tools without tool_choice are ignored", async () => {
  const vocabulary = { tokens: ["a", "b", "<eos>"], eos: [2] };
  assert.equal(await compileConstraint({ vocabulary, request: { messages: [{ role: "user", content: "hi" }] } }), null);
  assert.equal(await compileConstraint({ vocabulary, request: { response_format: { type: "text" } } }), null);
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
  assert.equal(await compileConstraint({ vocabulary, request: { tools } }), null);
  const m = await compileConstraint({ vocabulary, request: { tools, tool_choice: "auto", guided_regex: "ab" } });
  assert.equal(m.kind, "regex");
  m.free();
});

/** Asserts that `fn` rejects or throws a PootError with exactly these fields and body. */
async function rejectsExactly(fn, { message, code, param, status }) {
  await assert.rejects(async () => fn(), (e) => {
    assert.ok(e instanceof PootError, `a PootError, got ${e?.constructor?.name}: ${e?.message}`);
    assert.deepEqual({ message: e.message, code: e.code, param: e.param, status: e.status }, { message, code, param, status });
    assert.deepEqual(e.toJSON(), {
      error: { message, type: status === 400 ? "invalid_request_error" : "server_error", param, code },
    });
    return true;
  });
}

test("validation errors carry the exact text, status, code and param", async () => {
  const vocabulary = { tokens: ["a", "b", "<eos>"], eos: [2] };
  const bad = (message, param = "vocabulary") => ({ message, code: "invalid_input", param, status: 400 });
  // The call's own shape.
  await rejectsExactly(() => compileConstraint(), bad("compileConstraint takes { vocabulary, request }, got undefined", null));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: "guided_regex" }),
    bad("request must be an object (the constraint fields of an OpenAI request), got a string", "request"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: [] }),
    bad("request must be an object (the constraint fields of an OpenAI request), got an array", "request"));
  // The vocabulary.
  await rejectsExactly(() => compileConstraint({ vocabulary: null, request: {} }),
    bad("vocabulary must be { gguf }, { tokenizerJson } or { tokens, eos }, got null"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { vocab: [] }, request: {} }),
    bad("vocabulary must be { gguf }, { tokenizerJson } or { tokens, eos }, got an object with keys vocab"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { gguf: "model.gguf" }, request: {} }),
    bad("vocabulary.gguf must be a Uint8Array or an ArrayBuffer, got a string"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { gguf: new TextEncoder().encode("GGUF") }, request: {} }),
    bad("GGUF: at byte 4: expected the version (4 bytes), but the file ends after 0 more bytes (truncated?)", null));
  await rejectsExactly(() => compileConstraint({ vocabulary: { tokenizerJson: 7 }, request: {} }),
    bad("vocabulary.tokenizerJson must be a string or an object, got a number"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { tokens: "ab", eos: [0] }, request: {} }),
    bad("vocabulary.tokens must be an array of Uint8Arrays or strings, got a string"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { tokens: ["a"] }, request: {} }),
    bad("vocabulary.eos must be an array of token ids (non-negative integers), got undefined"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { tokens: ["a"], eos: [-1] }, request: {} }),
    bad("vocabulary.eos must be an array of token ids (non-negative integers), got an array"));
  await rejectsExactly(() => compileConstraint({ vocabulary: { tokens: ["a", "b"], eos: [2] }, request: {} }),
    bad("end-of-sequence token 2 is outside the vocabulary of 2 tokens", null));
  await rejectsExactly(() => compileConstraint({ vocabulary: { tokens: ["a", 7], eos: [0] }, request: {} }),
    bad("token 1 must be a string or a Uint8Array, got number", null));
  // The request's constraint fields, as the Rust engine words them.
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_regex: 5 } }), bad("guided_regex must be a string, got a number", "guided_regex"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_choice: [] } }), bad("guided_choice must list at least one string, got []", "guided_choice"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_regex: "(a|b)*a(a|b){17}" } }), {
    message: "guided_regex `(a|b)*a(a|b){17}` needs more than the 262144-byte automaton limit",
    code: "limit_exceeded",
    param: "guided_regex",
    status: 400,
  });
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { response_format: { type: "xml" } } }),
    bad('response_format.type must be "text", "json_object" or "json_schema", got "xml"', "response_format"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { response_format: { type: "json_schema", json_schema: { name: "x" } } } }),
    bad("response_format json_schema needs json_schema.schema", "response_format"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_json: { type: "string", format: "regex" } } }),
    bad("guided_json `{\"format\":\"regex\",\"type\":\"string\"}`: `format` at # is not supported (format `regex` has no regex here); the compiler refuses rather than emit values it may not allow", "guided_json"));
  // A field below the winner in precedence is compiled too: invalid, it is the error.
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_choice: ["a"], guided_regex: "(a|b)*a(a|b){17}" } }), {
    message: "guided_regex `(a|b)*a(a|b){17}` needs more than the 262144-byte automaton limit",
    code: "limit_exceeded",
    param: "guided_regex",
    status: 400,
  });
  // A constraint no token of the vocabulary can begin is refused when compiled.
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_regex: "c+" } }),
    bad("guided_regex: no token of this model's vocabulary (3 tokens) can begin an output the constraint accepts", "guided_regex"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { response_format: { type: "json_object" } } }),
    bad("response_format: no token of this model's vocabulary (3 tokens) can begin an output the constraint accepts", "response_format"));
  // Forced tool calls are refused: their format belongs to the model's chat template.
  const tools = [{ type: "function", function: { name: "f" } }];
  const toolsRefused = bad(
    'compileConstraint cannot force a tool call (tool_choice "required" or a named function): the call\'s format depends on the model\'s chat template. Compile the call\'s format as guided_grammar or guided_json instead',
    "tool_choice",
  );
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { tools, tool_choice: "required" } }), toolsRefused);
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { tools, tool_choice: { type: "function", function: { name: "f" } } } }), toolsRefused);

  // The matcher's calls.
  const m = await compileConstraint({ vocabulary, request: { guided_regex: "ab" } });
  await rejectsExactly(() => m.fillMask(new Uint32Array(2)), bad("a mask over 3 tokens needs 1 u32 words, got 2", "mask"));
  await rejectsExactly(() => m.fillMask([0]), bad("the mask must be a Uint32Array of 1 words, got an array", "mask"));
  await rejectsExactly(() => m.accept(1),
    bad('token 1 ("b") is not allowed here: the output would no longer match the constraint', null));
  await rejectsExactly(() => m.accept(2),
    bad('end-of-sequence token 2 ("<eos>") is not allowed: the output so far does not complete the constraint', null));
  await rejectsExactly(() => m.accept(3), bad("token 3 is outside the vocabulary of 3 tokens", null));
  await rejectsExactly(() => m.accept(1.5), bad("a token id must be a non-negative integer, got 1.5", null));
  await rejectsExactly(() => m.rollback(1), bad("cannot roll back 1 tokens: only 0 were accepted", null));
  await rejectsExactly(() => m.rollback(-1), bad("rollback takes a non-negative integer, got -1", null));
  assert.equal(m.tokenCount, 0, "a refused call changes nothing");
  m.free();
  await rejectsExactly(() => m.fillMask(new Uint32Array(1)), bad("this matcher was freed", null));
  const v = await loadVocabulary(vocabulary);
  v.free();
  await rejectsExactly(() => compileConstraint({ vocabulary: v, request: { guided_regex: "a" } }), bad("this vocabulary was freed"));
});

test("limits tighten one compile's bounds; a bad limits option is a 400 naming limits", async () => {
  const vocabulary = { tokens: ["a", "b", "<eos>"], eos: [2] };
  const limits = { regex_bytes: 8, schema_depth: 2 };
  const fits = await compileConstraint({ vocabulary, request: { guided_regex: "a{1,8}b" }, limits });
  fits.free();
  await rejectsExactly(() => compileConstraint({ vocabulary, request: { guided_regex: "a{1,80}b?" }, limits }), {
    message: "guided_regex `a{1,80}b?` is 9 bytes, over the 8-byte limit",
    code: "limit_exceeded",
    param: "guided_regex",
    status: 400,
  });
  // The same regex under the defaults compiles: the limit was this call's.
  (await compileConstraint({ vocabulary, request: { guided_regex: "a{1,80}b?" } })).free();
  const deep = { type: "object", properties: { a: { type: "object", properties: { b: { type: "array", items: { type: "integer" } } } } } };
  // Printable ASCII, one token a character: a vocabulary JSON can be written in.
  const ascii = { tokens: [...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)), "<eos>"], eos: [95] };
  (await compileConstraint({ vocabulary: ascii, request: { guided_json: deep } })).free();
  await assert.rejects(
    () => compileConstraint({ vocabulary: ascii, request: { guided_json: deep }, limits }),
    (e) => e.code === "limit_exceeded" && e.param === "guided_json" && /nest/.test(e.message),
  );
  const bad = (message) => ({ message, code: "invalid_input", param: "limits", status: 400 });
  await rejectsExactly(() => compileConstraint({ vocabulary, request: {}, limits: { regex_bytes: 1 << 20 } }),
    bad("limits: `regex_bytes` must be an integer from 1 to its default, 4096"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: {}, limits: { regex_byte: 8 } }),
    bad("limits: unknown limit `regex_byte` (known: regex_bytes, grammar_bytes, schema_bytes, schema_expansion, schema_judge_work, schema_depth, one_of_pairs, automaton_bytes, determinize_bytes, grammar_automaton_bytes, grammar_determinize_work, grammar_minimize_work, grammar_repetition, grammar_nesting, grammar_depth, grammar_step_work, choices, choice_bytes)"));
  await rejectsExactly(() => compileConstraint({ vocabulary, request: {}, limits: [8] }),
    bad("limits must be an object of limit names and numbers, got [8]"));
});
