// The side panel: loads the model into the engine (a Web Worker of this page, not the
// extension's service worker), reads the selection of the current tab, and extracts JSON from
// it under the schema in the box (guided_json), streaming. Test hooks: window.pootPanel.
//
// Permissions: the extension reads no site until asked. The page is read through activeTab
// (granted for the tab whose toolbar button was clicked); the model's web origin is asked for
// (optional_host_permissions) when a model is loaded from it, so a server that sends no CORS
// headers can still serve the model.
import { createWorkerEngine } from "./poot/dist/index.js";
import { validate } from "./validate.js";

const $ = (id) => document.getElementById(id);
const state = (window.pootPanel = { loaded: false, error: null, last: null, running: false });
const DEFAULT_SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 40 },
    company: { type: "string", maxLength: 40 },
    email: { type: "string", maxLength: 60 },
  },
  required: ["name", "company"],
  additionalProperties: false,
};

let engine = null;
let worker = null;
let abort = null;

async function restore() {
  const saved = await chrome.storage.local.get(["schema", "modelUrl"]);
  $("schema").value = saved.schema ?? JSON.stringify(DEFAULT_SCHEMA, null, 2);
  if (saved.modelUrl) $("model-url").value = saved.modelUrl;
  const wanted = new URLSearchParams(location.search).get("model");
  if (wanted) $("model-url").value = wanted;
}

function fmt(n) {
  return n === undefined ? "?" : `${(n / (1 << 20)).toFixed(1)} MiB`;
}

/**
 * The match pattern of a model URL's origin when it is a web origin other than this page's
 * (`null` for a file, a relative URL or this extension's own files).
 */
function remoteOrigin(source) {
  if (typeof source !== "string") return null;
  try {
    const url = new URL(source, location.href);
    if (!/^https?:$/.test(url.protocol) || url.origin === location.origin) return null;
    // Without a port, a match pattern covers every port of the host.
    return `${url.protocol}//${url.hostname}/*`;
  } catch {
    return null;
  }
}

/**
 * Asks for read access to the model's origin. Must be called before any `await` of a click
 * handler: Chrome shows the prompt only during a user gesture. Outside one (the load when the
 * panel opens) the request fails and this resolves to whether access was granted before.
 * Resolves to true when no access is needed.
 */
function requestOrigin(origin) {
  if (!origin) return Promise.resolve(true);
  const origins = [origin];
  return chrome.permissions
    .request({ origins })
    .catch(() => chrome.permissions.contains({ origins }))
    .catch(() => false);
}

async function load(source, name) {
  // First, while a click on Load is still a user gesture.
  const origin = remoteOrigin(source);
  const access = requestOrigin(origin);
  $("run").disabled = true;
  state.loaded = false;
  state.error = null;
  const granted = await access;
  if (engine) await engine.unload().catch(() => {});
  worker?.terminate();
  worker = new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module" });
  try {
    engine = await createWorkerEngine(worker, {
      model: source,
      // A software WebGPU adapter is slower than the CPU path; a real GPU is used when there is one.
      backend: (await hasHardwareGpu()) ? "auto" : "cpu",
      onProgress: (p) => {
        $("progress").max = p.total ?? 1;
        $("progress").value = p.total ? p.loaded : 0;
        $("progress-text").textContent = `${p.phase}: ${fmt(p.loaded)} of ${fmt(p.total)}${p.total ? ` (${Math.floor((100 * p.loaded) / p.total)}%)` : ""}`;
      },
    });
    const b = engine.backend;
    $("backend").textContent = b.kind === "webgpu" ? `WebGPU — ${b.adapter}` : `CPU (WebGPU unavailable${b.reason ? `: ${b.reason}` : " or a software adapter"})`;
    $("progress-text").textContent = `Loaded ${engine.model.id}.`;
    $("run").disabled = false;
    state.loaded = true;
    if (typeof source === "string") chrome.storage.local.set({ modelUrl: source });
  } catch (e) {
    state.error = e.message;
    // Without access, a server that sends no CORS headers cannot serve the model.
    const hint = granted ? "" : ` (this extension may not read ${origin}: press Load to allow it)`;
    $("progress-text").textContent = `Could not load ${name}: ${e.message}${hint}`;
  }
}

async function hasHardwareGpu() {
  try {
    const a = await navigator.gpu?.requestAdapter();
    const i = a?.info ?? {};
    return !!a && !i.isFallbackAdapter && !/swiftshader|llvmpipe|lavapipe|software/i.test(`${i.vendor} ${i.architecture} ${i.device} ${i.description}`);
  } catch {
    return false;
  }
}

/**
 * The selection of the active web page (the most recently used one when this panel is a tab),
 * among the pages this extension may read: the one whose toolbar button was clicked
 * (activeTab), or one of an origin it was granted.
 */
async function grabSelection() {
  // Tabs the extension may not read come without a URL; the filter drops them.
  const tabs = (await chrome.tabs.query({ url: ["http://*/*", "https://*/*"] })).filter((t) => t.url);
  const active = tabs.filter((t) => t.active).sort((a, b) => (b.lastAccessed ?? 0) - (a.lastAccessed ?? 0));
  const tab = active[0] ?? tabs.sort((a, b) => (b.lastAccessed ?? 0) - (a.lastAccessed ?? 0))[0];
  if (!tab) {
    $("verdict").textContent = "No page to read: open the page, click this extension's toolbar button there, then try again.";
    return "";
  }
  const [{ result }] = await chrome.scripting.executeScript({ target: { tabId: tab.id }, func: () => String(getSelection() ?? "") });
  $("text").value = result;
  if (!result) $("verdict").textContent = "Nothing is selected on that page.";
  return result;
}

async function extract() {
  $("schema-error").hidden = true;
  let schema;
  try {
    schema = JSON.parse($("schema").value);
  } catch (e) {
    $("schema-error").hidden = false;
    $("schema-error").textContent = `The schema is not JSON: ${e.message}`;
    return;
  }
  chrome.storage.local.set({ schema: $("schema").value });
  abort = new AbortController();
  const run = { text: "", finish: null, error: null, value: null, errors: null };
  state.last = null;
  $("output").textContent = "";
  $("verdict").textContent = "";
  let stream;
  try {
    stream = await engine.chat.completions.create({
      messages: [
        { role: "system", content: "Extract the requested fields from the user's text as JSON." },
        { role: "user", content: $("text").value },
      ],
      guided_json: schema,
      max_tokens: 128,
      temperature: 0,
      stream: true,
    }, { signal: abort.signal });
  } catch (e) {
    $("schema-error").hidden = false;
    $("schema-error").textContent = `${e.status ?? ""} ${e.message}`.trim();
    run.error = e.message;
    state.last = run;
    return;
  }
  state.running = true;
  $("run").disabled = true;
  $("stop").disabled = false;
  try {
    for await (const chunk of stream) {
      const c = chunk.choices?.[0];
      if (c?.delta?.content) run.text += c.delta.content;
      if (c?.finish_reason) run.finish = c.finish_reason;
      $("output").textContent = run.text;
    }
    run.value = JSON.parse(run.text);
    run.errors = validate(schema, run.value).errors;
    $("output").textContent = JSON.stringify(run.value, null, 2);
    $("verdict").className = run.errors.length ? "bad" : "ok";
    $("verdict").textContent = run.errors.length ? `Not valid: ${run.errors.join("; ")}` : "✓ Valid JSON under the schema.";
  } catch (e) {
    run.error = abort.signal.aborted ? "stopped" : e.message;
    $("verdict").className = "bad";
    $("verdict").textContent = abort.signal.aborted ? "Stopped." : `Not JSON (${run.finish}): ${e.message}`;
  }
  state.last = run;
  state.running = false;
  $("run").disabled = false;
  $("stop").disabled = true;
}

$("load").addEventListener("click", () => {
  const f = $("model-file").files?.[0];
  if (f) load(f, f.name);
  else load($("model-url").value, $("model-url").value);
});
$("grab").addEventListener("click", () => grabSelection().catch((e) => ($("verdict").textContent = e.message)));
$("run").addEventListener("click", () => extract());
$("stop").addEventListener("click", () => abort?.abort());

await restore();
load($("model-url").value, $("model-url").value);
