// What the engine and worker browser tests share: the static server (with the `openai` client
// bundled for the page by esbuild under /gen/), headless Chromium, and the Node-side checks of
// a whole scenario suite. Not a test file itself.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

import { launch, openPage } from "../chromium.mjs";
import { checkAbort, checkOpenai, checkOutput, checkValidation } from "./checks.mjs";
import { startTestServer } from "./server.mjs";

export const PAGE = "pkg/test/browser/pages/blank.html";

/** Server + browser; `close()` ends both. */
export async function start() {
  assert.ok(process.env.POOT_REFERENCE_GGUF, "POOT_REFERENCE_GGUF must name SmolLM2-135M-Instruct.Q4_1.gguf (make test sets it)");
  const gen = mkdtempSync(join(tmpdir(), "poot-browser-gen-"));
  await build({
    entryPoints: [fileURLToPath(new URL("./openai-entry.js", import.meta.url))],
    bundle: true,
    format: "esm",
    platform: "browser",
    outfile: join(gen, "openai.js"),
    logLevel: "silent",
  });
  const server = await startTestServer({ extra: { "/gen/": gen } });
  const browser = await launch();
  return {
    server,
    browser,
    open: () => openPage(browser.context, `${server.url}${PAGE}`),
    close: async () => {
      await browser.close();
      await server.close();
      rmSync(gen, { recursive: true, force: true });
    },
  };
}

/** Checks a runSuite result; `abortWithinMs` bounds the time from abort to the stream's end. */
export function checkSuite(suite, size, modelId, where, { abortWithinMs }) {
  for (const r of suite.results) checkOutput(r, size, where);
  // temperature 0 is greedy: the streamed text is the non-streamed text.
  for (let k = 0; k < suite.results.length; k += 2) {
    const [whole, streamed] = [suite.results[k], suite.results[k + 1]];
    assert.equal(streamed.text, whole.text, `${where}: ${whole.name} streamed == non-streamed`);
  }
  checkAbort(suite.abort, `${where}: abort`, { withinMs: abortWithinMs });
  checkOpenai(suite.openai, size, modelId, `${where}: openai client`);
  checkValidation(suite.validation, size, `${where}: validation`);
}

/** One line per result: what came back and how long it took. */
export function describeSuite(suite, where) {
  const lines = suite.results.map(
    (r) => `  ${r.name.padEnd(12)} ${r.stream ? "streamed" : "whole   "} ${(r.ms / 1000).toFixed(1).padStart(6)} s  ${r.usage?.completion_tokens ?? "?"} tokens  ${JSON.stringify(r.text)}`,
  );
  return [`${where}:`, ...lines, `  abort: stream ended ${suite.abort.msToEnd.toFixed(0)} ms after abort(), after ${JSON.stringify(suite.abort.text)}`].join("\n");
}
