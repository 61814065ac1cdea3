// The browser-extension example (www/extension/, Manifest V3) loaded unpacked in headless
// Chromium: its side panel page loads the reference model (engine in the panel's Web Worker),
// reads the selection of a fixture page and turns it into JSON that validates under the schema.
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

test("the extension turns a page's selection into JSON under the schema", { timeout: 240_000 }, async () => {
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
  await panel.goto(`chrome-extension://${id}/panel.html?model=${encodeURIComponent(`${server.url}models/default.gguf`)}`);
  await panel.waitForFunction(() => window.pootPanel?.loaded || window.pootPanel?.error, null, { timeout: 120_000 });
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
  console.log(`extension output: ${last.text}`);
  assert.equal(last.error, null, JSON.stringify(last));
  assert.equal(typeof last.value.name, "string");
  assert.deepEqual(last.errors, []);
  assert.match(await panel.textContent("#verdict"), /Valid/);
  await panel.setViewportSize({ width: 400, height: 800 });
  await panel.screenshot({ path: join(RESULTS, "extension-panel.png"), fullPage: true });
  assert.deepEqual(errors, [], `console errors: ${errors.join("\n")}`);
});
