// The demo chat page (www/index.html) in real headless Chromium: the reference model loads with
// progress, every constraint kind generates and its result validates, an invalid constraint
// shows its 400 next to the field before any generation, Stop stops, screenshots (desktop and
// narrow) go to test-results/, and a reload with the network off (the browser offline and the
// server shut down) loads the page from the service worker and the model from Cache Storage.
//
// The CPU backend (?backend=cpu): WebGPU here is SwiftShader, much slower. Token budgets are
// small and the schemas short, so the file runs in a few minutes on two slow cores.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { basename } from "node:path";

import { defaultModelPath, startServer } from "../../../scripts/serve.mjs";
import { launch, openPage } from "./chromium.mjs";

const RESULTS = new URL("../../../test-results/", import.meta.url).pathname;
let server;
let browser;
let page;
let errors;

before(async () => {
  server = await startServer({ port: 0 });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

const loaded = (p) => p.waitForFunction(() => window.pootDemo?.loaded || window.pootDemo?.error, null, { timeout: 120_000 });

/** Picks a constraint kind, optionally overrides the value, prompt and max_tokens, generates. */
async function run(kind, { value, prompt, maxTokens, keepConversation = false }) {
  // Each case starts a new conversation (short prompts), unless it tests the conversation.
  if (!keepConversation && (await page.isEnabled("#new-chat"))) await page.click("#new-chat");
  await page.selectOption("#kind", kind);
  if (value !== undefined) await page.fill("#constraint-text", value);
  if (prompt !== undefined) await page.fill("#prompt", prompt);
  await page.fill("#max-tokens", String(maxTokens));
  await page.evaluate(() => (window.pootDemo.last = null));
  await page.click("#send");
  await page.waitForFunction(() => window.pootDemo.last && !window.pootDemo.generating, null, { timeout: 150_000 });
  return page.evaluate(() => JSON.parse(JSON.stringify(window.pootDemo.last)));
}

test("the demo loads the reference model with progress", { timeout: 150_000 }, async () => {
  ({ page, errors } = await openPage(browser.context, `${server.url}?backend=cpu`));
  await loaded(page);
  const demo = await page.evaluate(() => JSON.parse(JSON.stringify(window.pootDemo)));
  assert.equal(demo.error, null);
  const size = statSync(defaultModelPath()).size;
  const downloads = demo.progress.filter((p) => p.phase === "download");
  assert.ok(downloads.length > 5, `few download progress events: ${downloads.length}`);
  assert.equal(downloads.at(-1).loaded, size);
  assert.equal(downloads.at(-1).total, size);
  assert.equal(demo.model.bytes, size);
  assert.match(await page.textContent("#progress-text"), /100%/);
  assert.match(await page.textContent("#backend"), /^Backend: CPU \(wasm\), as chosen above/);
  assert.equal(await page.isEnabled("#send"), true);
  // Served cross-origin isolated, so the mask timer ticks in a few µs, not 100.
  assert.equal(await page.evaluate(() => self.crossOriginIsolated), true);
});

const TINY_SCHEMA = JSON.stringify({
  type: "object",
  properties: { class: { enum: ["warrior", "mage", "rogue"] } },
  required: ["class"],
  additionalProperties: false,
});
const TINY_TOOL = JSON.stringify([{
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: { type: "object", properties: { unit: { enum: ["celsius", "fahrenheit"] } }, required: ["unit"], additionalProperties: false },
  },
}]);

/**
 * The per-step numbers under the output, against what the engine reported: one step per
 * sampled token (steps + forced = completion tokens), every mask's count within the vocabulary
 * and its time a number, one chart bar per masked step, one highlighted token per forced one.
 * Returns the number of forced tokens.
 */
async function checkSteps(kind, last, what) {
  const steps = last.steps;
  assert.ok(steps.length > 0, what);
  const forced = steps.reduce((n, s) => n + s.forced.length, 0);
  assert.equal(steps.length + forced, last.usage.completion_tokens, what);
  assert.equal(await page.textContent("#n-forced"), `${forced} of ${steps.length + forced} tokens`);
  assert.equal(await page.locator("#token-view .forced").count(), forced);
  if (kind === "none") {
    assert.ok(steps.every((s) => s.allowed === null && s.mask_us === null), what);
    assert.equal(await page.textContent("#n-mask"), "no constraint: no mask");
    return forced;
  }
  const vocab = await page.evaluate(() => window.pootDemo.model.vocabSize);
  for (const s of steps) {
    assert.ok(Number.isInteger(s.allowed) && s.allowed >= 1 && s.allowed <= vocab, `${kind}: ${JSON.stringify(s)}`);
    assert.ok(typeof s.mask_us === "number" && s.mask_us >= 0, `${kind}: ${JSON.stringify(s)}`);
  }
  assert.equal(await page.locator("#allowed-chart rect").count(), steps.length);
  assert.equal(await page.isVisible("#allowed-chart"), true);
  assert.match(await page.textContent("#n-mask"), new RegExp(`^mean [\\d.]+ µs, median [\\d.]+ µs, p99 [\\d.]+ µs, max [\\d.]+ µs over ${steps.length} masks \\(clock step [\\d.]+ µs\\)$`));
  return forced;
}

/** Every constraint kind, with budgets small enough for two slow cores. */
const KIND_CASES = [
  ["none", { maxTokens: 4 }],
  ["guided_choice", { maxTokens: 4 }],
  ["guided_regex", { maxTokens: 12 }],
  ["guided_grammar", { value: 'root ::= [0-9] ("+" [0-9])?', maxTokens: 6 }],
  ["guided_json", { value: TINY_SCHEMA, maxTokens: 16 }],
  ["json_schema", { value: TINY_SCHEMA, maxTokens: 16 }],
  ["json_object", { prompt: "Reply with an empty JSON object.", maxTokens: 12 }],
  ["tool", { value: TINY_TOOL, maxTokens: 40 }],
];

/** Runs each case and checks its result validates; returns the tokens forced in all. */
async function runKinds(cases, label) {
  let forcedTotal = 0;
  for (const [kind, opts] of cases) {
    const started = Date.now();
    const last = await run(kind, opts);
    const what = `${label}${kind}: ${JSON.stringify({ text: last.text, calls: last.toolCalls, finish: last.finish, verdict: last.verdict, error: last.error })}`;
    console.log(`${label}${kind}: ${((Date.now() - started) / 1000).toFixed(1)} s, ${last.usage?.completion_tokens} tokens, ${JSON.stringify(last.text || last.toolCalls)}`);
    assert.equal(last.error, null, what);
    const forced = await checkSteps(kind, last, what);
    forcedTotal += forced;
    console.log(`  ${last.steps.length} steps, ${forced} forced; ${await page.textContent("#n-mask")}`);
    if (kind === "none") {
      assert.ok(last.text.length > 0, what);
      continue;
    }
    // json_object with a small budget may be cut at max_tokens: then it must still be a JSON
    // prefix (the verdict says "incomplete", not "invalid").
    if (kind === "json_object" && last.finish === "length") {
      assert.match(last.text, /^\s*\{/, what);
      continue;
    }
    assert.equal(last.verdict.ok, true, what);
  }
  return forcedTotal;
}

test("every constraint kind generates and the result validates", { timeout: 600_000 }, async () => {
  const forcedTotal = await runKinds(KIND_CASES, "");
  assert.match(await page.textContent("#verdict"), /Valid/);
  // The forced tool call's markup and the schemas' keys are spelled without sampling.
  assert.ok(forcedTotal > 0, "no token was forced in any case");
});

test("screenshots: desktop and narrow", { timeout: 60_000 }, async () => {
  // Right after the forced tool call: the page shows a parsed, validated call.
  // Every control has a label, and Tab reaches Generate.
  const unlabelled = await page.evaluate(() =>
    [...document.querySelectorAll("input, select, textarea")].filter((e) => e.labels.length === 0).map((e) => e.id));
  assert.deepEqual(unlabelled, []);
  await page.focus("#temperature");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.id), "send");
  await page.setViewportSize({ width: 960, height: 800 });
  await page.screenshot({ path: `${RESULTS}demo-desktop.png`, fullPage: true });
  await page.setViewportSize({ width: 380, height: 800 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the narrow page scrolls sideways by ${overflow}px`);
  await page.screenshot({ path: `${RESULTS}demo-narrow.png`, fullPage: true });
  await page.setViewportSize({ width: 1200, height: 900 });
});

test("a second message continues the conversation; New chat starts over", { timeout: 120_000 }, async () => {
  await page.click("#new-chat");
  assert.equal(await page.isVisible("#transcript"), false);
  const first = await run("guided_choice", { maxTokens: 4, prompt: "Is the sky blue?" });
  assert.equal(first.request.messages.length, 1);
  const second = await run("guided_choice", { maxTokens: 4, prompt: "Are you sure?", keepConversation: true });
  // The request carries the first turn: the user's message and the model's reply, then the new one.
  assert.deepEqual(second.request.messages.map((m) => m.role), ["user", "assistant", "user"]);
  assert.equal(second.request.messages[0].content, "Is the sky blue?");
  assert.equal(second.request.messages[1].content, first.text);
  assert.equal(second.verdict.ok, true, JSON.stringify(second));
  assert.equal(await page.locator("#transcript li").count(), 4);
  assert.match(await page.textContent("#transcript li.assistant"), new RegExp(`^Model:${first.text}$`));
  await page.click("#new-chat");
  assert.equal(await page.isVisible("#transcript"), false);
  assert.equal(await page.isDisabled("#new-chat"), true);
  const fresh = await run("guided_choice", { maxTokens: 4, prompt: "Is grass green?", keepConversation: true });
  assert.equal(fresh.request.messages.length, 1);
});

test("an invalid constraint shows its 400 next to the field before any generation", { timeout: 60_000 }, async () => {
  await page.selectOption("#kind", "guided_grammar");
  await page.fill("#constraint-text", 'root ::= root "a" | "a"');
  await page.fill("#output", "").catch(() => {});
  await page.evaluate(() => (window.pootDemo.last = null));
  await page.click("#send");
  await page.waitForFunction(() => window.pootDemo.last, null, { timeout: 50_000 });
  const error = page.locator("#constraint-error");
  await error.waitFor({ state: "visible" });
  assert.match(await error.textContent(), /^400/);
  assert.match(await error.textContent(), /recurs/i);
  const last = await page.evaluate(() => window.pootDemo.last);
  assert.equal(last.usage, null);
  assert.equal(await page.textContent("#output"), "");
  // Not JSON at all: the page says so itself.
  await page.selectOption("#kind", "guided_json");
  await page.fill("#constraint-text", "{ not json");
  await page.click("#send");
  assert.match(await error.textContent(), /not valid JSON/);
  assert.equal(await page.getAttribute("#constraint-text", "aria-invalid"), "true");
});

test("Stop ends a long generation early", { timeout: 120_000 }, async () => {
  if (await page.isEnabled("#new-chat")) await page.click("#new-chat");
  await page.selectOption("#kind", "none");
  await page.fill("#prompt", "Tell me a long story about a dragon.");
  await page.fill("#max-tokens", "400");
  await page.evaluate(() => (window.pootDemo.last = null));
  await page.click("#send");
  await page.waitForFunction(() => document.getElementById("output").textContent.length > 0, null, { timeout: 60_000 });
  await page.keyboard.press("Tab"); // the page stays responsive while the worker generates
  await page.click("#stop");
  await page.waitForFunction(() => window.pootDemo.last, null, { timeout: 30_000 });
  const last = await page.evaluate(() => window.pootDemo.last);
  assert.equal(last.stopped, true);
  assert.equal(await page.textContent("#gen-status"), "Stopped.");
  assert.equal(await page.isDisabled("#stop"), true);
  assert.equal(await page.isEnabled("#send"), true);
});

test("with the network off, a reload still works (service worker + cached model)", { timeout: 200_000 }, async () => {
  await page.waitForFunction(async () => {
    const reg = await navigator.serviceWorker.getRegistration();
    return reg?.active?.state === "activated" && navigator.serviceWorker.controller !== null;
  }, null, { timeout: 60_000, polling: 500 });
  // The first load put the model in Cache Storage before it resolved; if it is missing (a full
  // quota makes the engine skip the cache, by design), say so with the numbers rather than
  // failing later with a download error.
  const storage = await page.evaluate(async () => {
    const keys = await (await caches.open("poot-models")).keys();
    const { usage, quota } = await navigator.storage.estimate();
    return { models: keys.map((r) => r.url), usage, quota };
  });
  assert.ok(storage.models.some((u) => u.endsWith("/models/default.gguf")), `the model is not in Cache Storage: ${JSON.stringify(storage)}`);
  const url = server.url;
  await server.close();
  await browser.context.setOffline(true);
  try {
    // The page's own URL without ?backend=cpu: "auto", which here (SwiftShader only) picks the
    // CPU and says why.
    await page.goto(url);
    await loaded(page);
    const demo = await page.evaluate(() => JSON.parse(JSON.stringify(window.pootDemo)));
    const backend = await page.textContent("#backend");
    const seen = JSON.stringify({ error: demo.error, backend, phases: [...new Set(demo.progress.map((p) => p.phase))], errors });
    assert.equal(demo.error, null, seen);
    // The reason differs with the browser's WebGPU (a software adapter, none at all): any one.
    assert.match(backend, /^Backend: CPU \(WebGPU unavailable\) — \S/, seen);
    assert.ok(demo.progress.some((p) => p.phase === "cache"), `the model did not come from Cache Storage: ${seen}`);
    assert.ok(!demo.progress.some((p) => p.phase === "download"), seen);
    const last = await run("guided_choice", { maxTokens: 4 });
    assert.equal(last.verdict.ok, true, JSON.stringify(last));
  } finally {
    await browser.context.setOffline(false);
    server = null;
  }
});

test("a dropped file that is not GGUF is refused; a picked GGUF file loads and generates", { timeout: 150_000 }, async () => {
  // Drag-and-drop: a small file that is not a model.
  await page.evaluate(() => {
    const dt = new DataTransfer();
    dt.items.add(new File([new Uint8Array(64).fill(7)], "not-a-model.gguf"));
    document.getElementById("model").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await page.waitForFunction(() => window.pootDemo.error, null, { timeout: 30_000 });
  assert.match(await page.textContent("#model-info"), /Could not load not-a-model\.gguf: /);
  assert.equal(await page.isDisabled("#send"), true);
  // The file input: the reference model from disk (no download, no cache).
  await page.setInputFiles("#model-file", defaultModelPath());
  await loaded(page);
  const demo = await page.evaluate(() => JSON.parse(JSON.stringify(window.pootDemo)));
  assert.equal(demo.error, null);
  assert.equal(demo.model.source, basename(defaultModelPath()));
  assert.ok(!demo.progress.some((p) => p.phase === "download" || p.phase === "cache"));
  const last = await run("guided_choice", { maxTokens: 4 });
  assert.equal(last.verdict.ok, true, JSON.stringify(last));
  assert.deepEqual(errors, [], `console errors: ${errors.join("\n")}`);
});

test("Gemma 3 270M picked from disk loads and answers every constraint kind", { timeout: 600_000 }, async () => {
  assert.ok(process.env.POOT_GEMMA_GGUF, "POOT_GEMMA_GGUF must name gemma-3-270m-q4_k_m.gguf (make test sets it)");
  await page.setInputFiles("#model-file", process.env.POOT_GEMMA_GGUF);
  await loaded(page);
  const demo = await page.evaluate(() => JSON.parse(JSON.stringify(window.pootDemo)));
  assert.equal(demo.error, null);
  assert.equal(demo.model.source, basename(process.env.POOT_GEMMA_GGUF));
  // Gemma 3 has no tool-call format (plain content), so no forced tool here.
  await runKinds(KIND_CASES.filter(([kind]) => kind !== "tool"), "gemma3 ");
  assert.deepEqual(errors, [], `console errors: ${errors.join("\n")}`);
});
