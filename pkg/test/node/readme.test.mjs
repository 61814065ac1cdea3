// The package's README (its npm page) as a test: every ```js block whose first line is
// `// runs in Node` runs as a module in a scratch folder where `poot` is this package and
// SmolLM2-135M-Instruct.Q4_1.gguf is the reference model (POOT_REFERENCE_GGUF), against a fake
// OpenAI-compatible server for the remote client (its URL in place of the README's
// http://127.0.0.1:8080/v1); the other blocks must parse (`node --check`). `npm pack` ships the
// README (test/packaging checks the tarball).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { providerServer } from "../fixtures/remote/fake-openai.mjs";

const run = promisify(execFile);
const PKG = fileURLToPath(new URL("../..", import.meta.url));
const README = readFileSync(join(PKG, "README.md"), "utf8");
const blocks = [...README.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);

let scratch;
let server;
before(async () => {
  assert.ok(process.env.POOT_REFERENCE_GGUF, "POOT_REFERENCE_GGUF is not set (run `make test`)");
  scratch = mkdtempSync(join(tmpdir(), "poot-readme-"));
  mkdirSync(join(scratch, "node_modules"));
  symlinkSync(PKG, join(scratch, "node_modules", "poot"));
  // What the README's examples import beside poot, from this package's dev dependencies.
  for (const dep of ["openai", "zod", "ai"]) symlinkSync(join(PKG, "node_modules", dep), join(scratch, "node_modules", dep));
  mkdirSync(join(scratch, "node_modules", "@ai-sdk"));
  symlinkSync(join(PKG, "node_modules", "@ai-sdk", "provider"), join(scratch, "node_modules", "@ai-sdk", "provider"));
  symlinkSync(process.env.POOT_REFERENCE_GGUF, join(scratch, "SmolLM2-135M-Instruct.Q4_1.gguf"));
  server = await providerServer("vllm012");
});
after(async () => {
  await server?.close();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

test("the README has runnable examples for each use", () => {
  const runnable = blocks.filter((b) => b.startsWith("// runs in Node"));
  assert.ok(blocks.length >= 6, `${blocks.length} blocks`);
  for (const use of ["createEngine", "engine.fetch", "compileConstraint", "createRemoteClient", "repair(", "completions.parse", "poot/ai-sdk"]) {
    assert.ok(runnable.some((b) => b.includes(use)), `no runnable example uses ${use}`);
  }
  for (const use of ["serveEngine", "createWorkerEngine"]) {
    assert.ok(blocks.some((b) => b.includes(use)), `no example uses ${use}`);
  }
});

for (const [i, block] of blocks.entries()) {
  const runnable = block.startsWith("// runs in Node");
  test(`README block ${i + 1} ${runnable ? "runs" : "parses"}`, { timeout: 300_000 }, async () => {
    const file = join(scratch, `block-${i + 1}.mjs`);
    writeFileSync(file, block.replaceAll("http://127.0.0.1:8080/v1", server.url));
    if (!runnable) {
      await run(process.execPath, ["--check", file]);
      return;
    }
    const { stdout } = await run(process.execPath, [file], { cwd: scratch, env: process.env });
    assert.ok(stdout.trim().length > 0, "the example prints what it got");
    console.log(`block ${i + 1}: ${stdout.trim().split("\n").join(" | ")}`);
  });
}
