// The wasm module in Node: the CPU kernel against an independent JavaScript oracle, and the
// error contract (code, param, status, exact text) across the wasm boundary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { applyTokenMask, loadWasm, PootError } from "../../dist/index.js";
import { SIZES, oracle, randomCase, rng, sameBits } from "../cases.mjs";

await loadWasm(readFileSync(new URL("../../wasm/poot_bg.wasm", import.meta.url)));

test("CPU kernel equals the JS oracle for every vocabulary size and mask density", async () => {
  const next = rng(7);
  for (const n of SIZES) {
    for (const density of [100, 50, 3]) {
      for (const coarse of [false, true]) {
        const { logits, mask } = randomCase(next, n, density, coarse);
        const expected = oracle(logits, mask);
        if (expected.index < 0) continue;
        const index = await applyTokenMask(logits, mask, { backend: "cpu" });
        const what = `n=${n} density=${density} coarse=${coarse}`;
        assert.equal(index, expected.index, what);
        assert.ok(sameBits(logits, expected.masked), `${what}: masked logits differ`);
      }
    }
  }
});

test("an all-zero mask rejects with a clear error, not an index", async () => {
  for (const n of SIZES) {
    const mask = new Uint32Array(Math.ceil(n / 32));
    await assert.rejects(applyTokenMask(new Float32Array(n).fill(1), mask), (e) => {
      assert.ok(e instanceof PootError);
      assert.equal(e.code, "no_allowed_token");
      assert.equal(e.param, "mask");
      assert.equal(e.status, 500);
      assert.equal(e.message, `the token mask allows none of the ${n} tokens, so no token can be chosen`);
      return true;
    });
  }
});

test("a mask of the wrong length is a 400 naming the field", async () => {
  await assert.rejects(applyTokenMask(new Float32Array(40), new Uint32Array(1)), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "mask");
    assert.equal(e.message, "a mask over 40 tokens needs 2 u32 words, got 1");
    assert.deepEqual(e.toJSON().error.type, "invalid_request_error");
    return true;
  });
});

test("WebGPU is reported missing in Node, with a reason", async () => {
  await assert.rejects(
    applyTokenMask(new Float32Array(1), new Uint32Array([1]), { backend: "webgpu" }),
    (e) => e.code === "webgpu_unavailable" && /navigator\.gpu is missing/.test(e.message),
  );
});
