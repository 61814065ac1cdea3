// The constraint bindings of the wasm build in Node: masks against independent JavaScript
// oracles on a small synthetic vocabulary (multi-byte UTF-8 tokens and tokens that split a
// character), the error contract (code, param, status, exact text) across the wasm boundary,
// and the reference vocabulary's masks bit-identical to `poot trace --masks`.
//
// The reference check needs POOT_REFERENCE_GGUF (SmolLM2-135M-Instruct.Q4_1.gguf; `make test`
// fetches it and sets it) and fails rather than skips without it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import init, { Constraint, Vocabulary } from "../../wasm/poot.js";

const { memory } = await init({ module_or_path: readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url)) });

const utf8 = (s) => new TextEncoder().encode(s);

// Token 0..9 are the digits; the rest exercise multi-byte UTF-8: "é" is C3 A9, and tokens 14
// and 15 are its two halves; "éa" (18) crosses a character and an ASCII byte; 20 is the end.
const TOKENS = [
  ..."0123456789",
  "-",
  "20",
  "2024",
  "é",
  new Uint8Array([0xc3]),
  new Uint8Array([0xa9]),
  "a",
  "ab",
  "éa",
  "b",
  "<eos>",
];
const EOS = 20;
const tokenBytes = TOKENS.map((t) => (typeof t === "string" ? utf8(t) : t));

function synthetic() {
  return Vocabulary.fromTokens(TOKENS, new Uint32Array([EOS]));
}

/**
 * Independent oracles: `viable(bytes)` says whether some string of the language starts with
 * `bytes`, `complete(bytes)` whether `bytes` is in the language.
 */
const ORACLES = {
  date: {
    request: { guided_regex: "[0-9]{4}-[0-9]{2}-[0-9]{2}" },
    texts: ["2024-01-15", "1999-12-31"],
    viable: (b) => b.length <= 10 && [...b].every((x, i) => (i === 4 || i === 7 ? x === 0x2d : x >= 0x30 && x <= 0x39)),
    complete: (b) => b.length === 10 && ORACLES.date.viable(b),
  },
  // Sequences of the units "é" (C3 A9) and "ab", at least one.
  units: {
    request: { guided_regex: "(é|ab)+" },
    texts: ["éabé", "abéé", "éa" + "bab"],
    viable(b) {
      for (let i = 0; i < b.length; i += 2) {
        const [x, y] = [b[i], b[i + 1]];
        if (x === 0xc3 ? !(y === undefined || y === 0xa9) : x === 0x61 ? !(y === undefined || y === 0x62) : true) return false;
      }
      return true;
    },
    complete: (b) => b.length > 0 && b.length % 2 === 0 && ORACLES.units.viable(b),
  },
  choice: {
    request: { guided_choice: ["2024", "20-é", "a"] },
    texts: ["2024", "20-é", "a"],
    viable: (b) => ORACLES.choice.request.guided_choice.some((c) => startsWith(utf8(c), b)),
    complete: (b) => ORACLES.choice.request.guided_choice.some((c) => equal(utf8(c), b)),
  },
};

const startsWith = (whole, prefix) => prefix.length <= whole.length && prefix.every((x, i) => whole[i] === x);
const equal = (a, b) => a.length === b.length && startsWith(a, b);
const concat = (a, b) => {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
};
const bit = (mask, t) => (mask[t >>> 5] >>> (t & 31)) & 1;

test("masks equal the oracle at every step, with multi-byte and split UTF-8 tokens", () => {
  const vocab = synthetic();
  assert.equal(vocab.size, TOKENS.length);
  assert.equal(vocab.maskWords, 1);
  assert.deepEqual([...vocab.eosIds], [EOS]);
  assert.deepEqual([...vocab.tokenBytes(18)], [0xc3, 0xa9, 0x61]);
  for (const [name, oracle] of Object.entries(ORACLES)) {
    const constraint = Constraint.fromRequest(vocab, JSON.stringify(oracle.request));
    assert.equal(constraint.kind, name === "choice" ? "choice" : "regex");
    for (const text of oracle.texts) {
      const tokens = [...vocab.tokenizeGreedy(text)];
      const matcher = constraint.matcher();
      const mask = new Uint32Array(vocab.maskWords);
      let output = new Uint8Array(0);
      for (const [step, token] of [...tokens, EOS].entries()) {
        matcher.fillMask(mask);
        for (let t = 0; t < TOKENS.length; t++) {
          const expected = t === EOS ? oracle.complete(output) : oracle.viable(concat(output, tokenBytes[t]));
          assert.equal(bit(mask, t), expected ? 1 : 0, `${name} ${JSON.stringify(text)} step ${step}: token ${t}`);
          assert.equal(matcher.isAllowed(t), expected, `${name} isAllowed(${t})`);
        }
        assert.equal(matcher.isAccepting(), oracle.complete(output));
        matcher.accept(token);
        if (token !== EOS) output = concat(output, tokenBytes[token]);
      }
      assert.ok(matcher.isFinished());
      matcher.fillMask(mask);
      assert.deepEqual([...mask], [0], "nothing after the end");
      matcher.free();
    }
    constraint.free();
  }
  vocab.free();
});

test("the zero-copy mask (fillOwnMask + maskPointer) equals fillMask", () => {
  const vocab = synthetic();
  const matcher = Constraint.fromRequest(vocab, JSON.stringify(ORACLES.units.request)).matcher();
  const mask = new Uint32Array(vocab.maskWords);
  for (const token of [13, 16]) {
    matcher.fillMask(mask);
    matcher.fillOwnMask();
    const own = new Uint32Array(memory.buffer, matcher.maskPointer, vocab.maskWords);
    assert.deepEqual([...own], [...mask]);
    matcher.accept(token);
  }
});

test("accept, rollback, forced bytes and tokenCount follow the output", () => {
  const vocab = synthetic();
  const date = Constraint.fromRequest(vocab, JSON.stringify(ORACLES.date.request));
  const m = date.matcher();
  const start = new Uint32Array(1);
  m.fillMask(start);
  m.accept(12); // "2024"
  assert.deepEqual([...m.forced()], [0x2d], "a hyphen must follow four digits");
  m.accept(10);
  assert.equal(m.tokenCount, 2);
  assert.deepEqual([...m.forced()], []);
  m.rollback(2);
  assert.equal(m.tokenCount, 0);
  const again = new Uint32Array(1);
  m.fillMask(again);
  assert.deepEqual(again, start);
  m.accept(12);
  m.reset();
  assert.equal(m.tokenCount, 0);
  // A choice forces its only continuation across a multi-byte character.
  const choice = Constraint.fromRequest(vocab, JSON.stringify({ guided_choice: ["20-é"] })).matcher();
  assert.deepEqual([...choice.forced()], [...utf8("20-é")]);
});

test("a request without a constraint compiles to undefined", () => {
  const vocab = synthetic();
  assert.equal(Constraint.fromRequest(vocab, JSON.stringify({ messages: [] })), undefined);
  assert.equal(Constraint.fromRequest(vocab, JSON.stringify({ response_format: { type: "text" } })), undefined);
});

/** Asserts that `fn` throws an Error with exactly these fields. */
function throwsExactly(fn, { message, code, param, status }) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof Error, "a JS Error");
    assert.deepEqual({ message: e.message, code: e.code, param: e.param, status: e.status }, { message, code, param, status });
    return true;
  });
}

test("errors cross as JS Errors with code, param, status and the exact text", () => {
  const vocab = synthetic();
  const compile = (body) => Constraint.fromRequest(vocab, typeof body === "string" ? body : JSON.stringify(body));
  throwsExactly(() => compile({ guided_regex: "(a|b)*a(a|b){17}" }), {
    message: "guided_regex `(a|b)*a(a|b){17}` needs more than the 262144-byte automaton limit",
    code: "limit_exceeded",
    param: "guided_regex",
    status: 400,
  });
  throwsExactly(() => compile({ guided_regex: 5 }), {
    message: "guided_regex must be a string, got a number",
    code: "invalid_input",
    param: "guided_regex",
    status: 400,
  });
  throwsExactly(() => compile({ guided_choice: [] }), {
    message: "guided_choice must list at least one string, got []",
    code: "invalid_input",
    param: "guided_choice",
    status: 400,
  });
  throwsExactly(() => compile("{oops"), {
    message: "the request body is not valid JSON: key must be a string at line 1 column 2",
    code: "invalid_input",
    param: null,
    status: 400,
  });

  const m = compile(ORACLES.date.request).matcher();
  throwsExactly(() => m.fillMask(new Uint32Array(2)), {
    message: "a mask over 21 tokens needs 1 u32 words, got 2",
    code: "invalid_input",
    param: "mask",
    status: 400,
  });
  throwsExactly(() => m.accept(16), {
    message: 'token 16 ("a") is not allowed here: the output would no longer match the constraint',
    code: "invalid_input",
    param: null,
    status: 400,
  });
  throwsExactly(() => m.accept(EOS), {
    message: 'end-of-sequence token 20 ("<eos>") is not allowed: the output so far does not complete the constraint',
    code: "invalid_input",
    param: null,
    status: 400,
  });
  throwsExactly(() => m.accept(21), {
    message: "token 21 is outside the vocabulary of 21 tokens",
    code: "invalid_input",
    param: null,
    status: 400,
  });
  assert.equal(m.tokenCount, 0, "a refused token changes nothing");
  throwsExactly(() => m.rollback(1), {
    message: "cannot roll back 1 tokens: only 0 were accepted",
    code: "invalid_input",
    param: null,
    status: 400,
  });

  throwsExactly(() => Vocabulary.fromTokens(["a", "b"], new Uint32Array([2])), {
    message: "end-of-sequence token 2 is outside the vocabulary of 2 tokens",
    code: "invalid_input",
    param: null,
    status: 400,
  });
  throwsExactly(() => Vocabulary.fromTokens(["a", 7], new Uint32Array([0])), {
    message: "token 1 must be a string or a Uint8Array, got number",
    code: "invalid_input",
    param: null,
    status: 400,
  });
  throwsExactly(() => Vocabulary.fromGguf(utf8("GGUF")), {
    message: "GGUF: at byte 4: expected the version (4 bytes), but the file ends after 0 more bytes (truncated?)",
    code: "invalid_input",
    param: null,
    status: 400,
  });
  throwsExactly(() => vocab.tokenizeGreedy("2024-x"), {
    message: "no text token starts with byte 0x78 at offset 5",
    code: "invalid_input",
    param: null,
    status: 400,
  });
});

test("a tokenizer.json vocabulary: SentencePiece pieces and byte-fallback tokens", () => {
  const json = {
    added_tokens: [{ id: 2, content: "</s>", special: true }],
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }] },
    model: { type: "BPE", byte_fallback: true, vocab: { "<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁the": 4, "é": 5 }, merges: [] },
  };
  const vocab = Vocabulary.fromTokenizerJson(JSON.stringify(json));
  assert.deepEqual([...vocab.eosIds], [2]);
  assert.deepEqual([...vocab.tokenBytes(3)], [0x0a]);
  assert.deepEqual([...vocab.tokenBytes(4)], [...utf8(" the")]);
  assert.equal(vocab.isText(2), false);
  assert.deepEqual([...vocab.tokenizeGreedy(" the\né")], [4, 3, 5]);
});

test("reference vocabulary: masks bit-identical to `poot trace --masks` (POOT_REFERENCE_GGUF)", () => {
  const path = process.env.POOT_REFERENCE_GGUF;
  assert.ok(path, "POOT_REFERENCE_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model.sh prints its path), or run `make test`");
  const fixture = JSON.parse(readFileSync(new URL("../../../tests/fixtures/constraint_masks_smollm2_date.json", import.meta.url), "utf8"));
  const vocab = Vocabulary.fromGguf(readFileSync(path));
  assert.equal(vocab.size, 49152);
  const tokens = [...vocab.tokenizeGreedy(fixture.text)];
  assert.deepEqual(tokens, fixture.steps.slice(0, -1).map((s) => s.token));
  const matcher = Constraint.fromRequest(vocab, JSON.stringify(fixture.request)).matcher();
  const mask = new Uint32Array(vocab.maskWords);
  for (const step of fixture.steps) {
    matcher.fillMask(mask);
    const expected = new Uint32Array(vocab.maskWords);
    for (const t of step.allowed_ids) expected[t >>> 5] |= 1 << (t & 31);
    assert.deepEqual(mask, expected, `step ${step.step}`);
    if (step.step < tokens.length) matcher.accept(step.token);
  }
  assert.ok(matcher.isAccepting());
});
