// The browser-extension example (www/extension/, Manifest V3) loaded unpacked in headless
// Chromium: its side panel page loads the reference model (engine in the panel's Web Worker),
// reads the selection of a fixture page and turns it into JSON that validates under the schema;
// the same with Gemma 3 270M.
//
// The extension reads no site until asked: activeTab for the page, and the model's origin
// requested (optional_host_permissions) when a model is loaded from it. Playwright cannot click
// the toolbar button nor answer a permission prompt (microsoft/playwright#32755), so the test
// loads a copy whose manifest grants the fixture server's origin up front, standing in for the
// user allowing it; the shipped manifest is checked to ask for no host at install.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

import { startServer } from "../../../scripts/serve.mjs";
import { CHROMIUM } from "./chromium.mjs";
import { startTestServer } from "./pages/server.mjs";

const SOURCE = fileURLToPath(new URL("../../../www/extension/", import.meta.url));
const RESULTS = fileURLToPath(new URL("../../../test-results/", import.meta.url));
let server;
let context;
let profile;
let extension;

test("the extension asks for no site at install", () => {
  const manifest = JSON.parse(readFileSync(join(SOURCE, "manifest.json"), "utf8"));
  assert.equal(manifest.host_permissions, undefined);
  assert.ok(manifest.permissions.includes("activeTab"));
  assert.deepEqual(manifest.optional_host_permissions, ["http://*/*", "https://*/*"]);
});

before(async () => {
  execFileSync(process.execPath, [join(SOURCE, "build.mjs")]); // copies the built package in
  server = await startServer({ port: 0 });
  profile = mkdtempSync(join(tmpdir(), "poot-extension-"));
  // The copy with the fixture server's origin granted (the user's "Allow" at the prompt).
  extension = mkdtempSync(join(tmpdir(), "poot-extension-unpacked-"));
  cpSync(SOURCE, extension, { recursive: true });
  const manifest = JSON.parse(readFileSync(join(extension, "manifest.json"), "utf8"));
  manifest.host_permissions = [`${new URL(server.url).protocol}//${new URL(server.url).hostname}/*`];
  writeFileSync(join(extension, "manifest.json"), JSON.stringify(manifest, null, 2));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      `--disable-extensions-except=${extension}`,
      `--load-extension=${extension}`,
      "--no-sandbox",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});
after(async () => {
  await context?.close();
  await server?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  if (extension) rmSync(extension, { recursive: true, force: true });
});

/** Opens the panel on `modelUrl`, grabs the fixture page's selection and runs the schema. */
async function runPanel(modelUrl, screenshot) {
  const worker = context.serviceWorkers()[0] ?? (await context.waitForEvent("serviceworker", { timeout: 30_000 }));
  const id = new URL(worker.url()).host;
  assert.match(id, /^[a-p]{32}$/);

  const fixture = await context.newPage();
  await fixture.goto(`${server.url}test/contact.html`);
  await fixture.evaluate(() => getSelection().selectAllChildren(document.getElementById("bio")));

  const panel = await context.newPage();
  const errors = [];
  panel.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  panel.on("pageerror", (e) => errors.push(String(e)));
  await panel.goto(`chrome-extension://${id}/panel.html?model=${encodeURIComponent(modelUrl)}`);
  await panel.waitForFunction(() => window.pootPanel?.loaded || window.pootPanel?.error, null, { timeout: 180_000 });
  assert.equal(await panel.evaluate(() => window.pootPanel.error), null);

  await fixture.bringToFront();
  await panel.bringToFront();
  await panel.click("#grab");
  await panel.waitForFunction(() => document.getElementById("text").value.length > 0, null, { timeout: 10_000 });
  assert.match(await panel.inputValue("#text"), /Ada Lovelace works at Analytical Engines/);
  // A small schema keeps the run short on a slow CPU.
  await panel.fill("#schema", JSON.stringify({
    type: "object",
    properties: { name: { type: "string", maxLength: 20 } },
    required: ["name"],
    additionalProperties: false,
  }));
  await panel.click("#run");
  await panel.waitForFunction(() => window.pootPanel.last, null, { timeout: 150_000 });
  const last = await panel.evaluate(() => window.pootPanel.last);
  assert.equal(last.error, null, JSON.stringify(last));
  assert.equal(typeof last.value.name, "string");
  assert.deepEqual(last.errors, []);
  assert.match(await panel.textContent("#verdict"), /Valid/);
  if (screenshot) {
    await panel.setViewportSize({ width: 400, height: 800 });
    await panel.screenshot({ path: join(RESULTS, screenshot), fullPage: true });
  }
  assert.deepEqual(errors, [], `console errors: ${errors.join("\n")}`);
  await panel.close();
  await fixture.close();
  return last;
}

test("the extension turns a page's selection into JSON under the schema", { timeout: 240_000 }, async () => {
  const last = await runPanel(`${server.url}models/default.gguf`, "extension-panel.png");
  console.log(`extension output: ${last.text}`);
});

test("the extension does the same on Gemma 3 270M", { timeout: 300_000 }, async () => {
  assert.ok(process.env.POOT_GEMMA_GGUF, "POOT_GEMMA_GGUF must name gemma-3-270m-q4_k_m.gguf (make test sets it)");
  // Its own server (same host, so the granted origin covers it) with Gemma as /model.gguf.
  const gemma = await startTestServer({ model: process.env.POOT_GEMMA_GGUF });
  try {
    const last = await runPanel(`${gemma.url}model.gguf`);
    console.log(`extension output (Gemma 3 270M): ${last.text}`);
  } finally {
    await gemma.close();
  }
});
