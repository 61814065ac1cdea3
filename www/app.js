// The demo page: loads a GGUF model into the engine (in a Web Worker), then chats with it under
// the chosen constraint, streaming, and checks what came out. State for the browser tests is
// left on `window.pootDemo`.
import { createWorkerEngine } from "/pkg/dist/index.js";
import { validate } from "./validate.js";

const $ = (id) => document.getElementById(id);
const DEFAULT_MODEL = new URL("/models/default.gguf", location.href).href;

const CHARACTER = {
  type: "object",
  properties: {
    name: { type: "string" },
    age: { type: "integer", minimum: 1, maximum: 120 },
    class: { enum: ["warrior", "mage", "rogue"] },
  },
  required: ["name", "class"],
  // Listed keys only: left out, JSON Schema (and the engine, by default) allows other keys
  // too, and a small model given them invents keys until max_tokens.
  additionalProperties: false,
};
const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 40 }, unit: { enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const GRAMMAR = `root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"`;

/** Each constraint kind: its prefilled value, a fitting prompt, and how the value enters the request. */
const KINDS = {
  none: { label: "No constraint", value: "", prompt: "Name three colours.", help: "Plain sampling: the model may write anything." },
  guided_choice: {
    label: "guided_choice (a JSON array of strings)", value: JSON.stringify(["yes", "no", "maybe"]),
    prompt: "Is the sky blue?", help: "The output is exactly one of the strings.",
    apply: (v) => ({ guided_choice: JSON.parse(v) }),
  },
  guided_regex: {
    label: "guided_regex", value: "[0-9]{4}-[0-9]{2}-[0-9]{2}", prompt: "When was the Eiffel Tower finished?",
    help: "The whole output matches the regular expression.", apply: (v) => ({ guided_regex: v }),
  },
  guided_grammar: {
    label: "guided_grammar (GBNF)", value: GRAMMAR, prompt: "Write an arithmetic expression.",
    help: "The output is a sentence of the grammar (root rule: root).", apply: (v) => ({ guided_grammar: v }),
  },
  guided_json: {
    label: "guided_json (a JSON Schema)", value: JSON.stringify(CHARACTER, null, 2),
    prompt: "Invent a fantasy game character.", help: "The output is JSON valid under the schema.",
    apply: (v) => ({ guided_json: JSON.parse(v) }),
  },
  json_schema: {
    label: "response_format.json_schema.schema", value: JSON.stringify(CHARACTER, null, 2),
    prompt: "Invent a fantasy game character.", help: "OpenAI's structured outputs: response_format { type: json_schema }.",
    apply: (v) => ({ response_format: { type: "json_schema", json_schema: { name: "character", schema: JSON.parse(v) } } }),
  },
  json_object: {
    label: "response_format: json_object (no value)", value: "", prompt: "Describe a cat as JSON.",
    help: "Any JSON object.", apply: () => ({ response_format: { type: "json_object" } }),
  },
  tool: {
    label: "tools (JSON array); the first one's call is forced", value: JSON.stringify([WEATHER_TOOL], null, 2),
    prompt: "What is the weather in Paris?", help: "tool_choice names the first tool: the reply is a call to it with valid arguments.",
    apply: (v) => {
      const tools = JSON.parse(v);
      const name = tools?.[0]?.function?.name;
      return { tools, tool_choice: { type: "function", function: { name } }, parallel_tool_calls: false };
    },
  },
};

const state = (window.pootDemo = {
  loaded: false, loading: false, backend: null, model: null, progress: [], error: null,
  generating: false, last: null, swReady: false, history: [],
});

// ---------------------------------------------------------------------------------------------
// Offline: a service worker keeps the page, the package and the wasm; the model itself sits
// in Cache Storage, where the engine puts it.

if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("./sw.js").then(() => navigator.serviceWorker.ready).then(() => {
    state.swReady = true;
  }).catch((e) => console.warn("service worker not registered:", e));
}

// ---------------------------------------------------------------------------------------------
// Loading a model

let worker = null;
let engine = null;
let loadAbort = null;

function fmtBytes(n) {
  if (n === undefined) return "?";
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}

const PHASES = { download: "Downloading", cache: "Reading from the cache", parse: "Parsing", upload: "Uploading to the GPU" };

function showProgress(p) {
  state.progress.push(p);
  const bar = $("progress");
  const text = PHASES[p.phase] ?? p.phase;
  if (p.total) {
    bar.max = p.total;
    bar.value = p.loaded;
    $("progress-text").textContent = `${text}: ${fmtBytes(p.loaded)} of ${fmtBytes(p.total)} (${Math.floor((100 * p.loaded) / p.total)}%)`;
  } else {
    bar.removeAttribute("value");
    $("progress-text").textContent = `${text}: ${fmtBytes(p.loaded)}`;
  }
}

function showBackend(b) {
  const el = $("backend");
  el.dataset.kind = b.kind;
  if (b.kind === "webgpu") {
    el.textContent = `Backend: WebGPU — ${b.adapter ?? "unnamed adapter"}${b.isSoftware ? " (a software adapter: correct, slow)" : ""}`;
  } else if (b.chosen) {
    el.textContent = "Backend: CPU (wasm), as chosen above";
  } else {
    el.textContent = `Backend: CPU (WebGPU unavailable)${b.reason ? ` — ${b.reason}` : ""}`;
  }
}

/** The backend the picker asks for; the engine's "auto" skips a software WebGPU adapter. */
function chooseBackend() {
  const wanted = $("backend-choice").value;
  return { backend: wanted, chosen: wanted === "cpu" };
}

async function loadModel(source, name) {
  loadAbort?.abort();
  const abort = (loadAbort = new AbortController());
  $("send").disabled = true;
  state.loaded = false;
  state.loading = true;
  state.error = null;
  state.progress = [];
  $("model-info").textContent = `Loading ${name}…`;
  $("progress").value = 0;
  $("progress-text").textContent = "Starting…";
  if (engine) await engine.unload().catch(() => {});
  worker?.terminate();
  worker = new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module" });
  try {
    const { backend, chosen } = chooseBackend();
    const e = await createWorkerEngine(worker, { model: source, backend, onProgress: showProgress, signal: abort.signal });
    if (abort.signal.aborted) return;
    engine = e;
    const info = { ...e.backend };
    if (info.kind === "cpu" && chosen) info.chosen = true;
    state.backend = info;
    state.model = { ...e.model, source: name };
    showBackend(info);
    $("progress").max = 1;
    $("progress").value = 1;
    $("progress-text").textContent = `Loaded ${fmtBytes(e.model.bytes)} (100%).`;
    $("model-info").textContent = `${e.model.id} — ${e.model.architecture}, ${e.model.vocabSize.toLocaleString("en")} tokens, context ${e.model.contextLength.toLocaleString("en")}; from ${name}`;
    $("send").disabled = false;
    state.loaded = true;
  } catch (err) {
    if (abort.signal.aborted) return;
    state.error = err.message;
    $("progress-text").textContent = "Failed.";
    $("model-info").innerHTML = "";
    const p = document.createElement("span");
    p.className = "error";
    p.textContent = `Could not load ${name}: ${err.message}`;
    $("model-info").append(p);
  } finally {
    if (!abort.signal.aborted) state.loading = false;
  }
}

$("model-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const url = $("model-url").value.trim() || DEFAULT_MODEL;
  loadModel(new URL(url, location.href).href, url);
});
$("model-file").addEventListener("change", () => {
  const f = $("model-file").files?.[0];
  if (f) loadModel(f, f.name);
});
const dropZone = $("model");
dropZone.addEventListener("dragover", (ev) => {
  ev.preventDefault();
  $("drop").classList.add("over");
});
dropZone.addEventListener("dragleave", () => $("drop").classList.remove("over"));
dropZone.addEventListener("drop", (ev) => {
  ev.preventDefault();
  $("drop").classList.remove("over");
  const f = ev.dataTransfer?.files?.[0];
  if (f) loadModel(f, f.name);
});

// ---------------------------------------------------------------------------------------------
// The constraint panel

function setKind(kind) {
  const k = KINDS[kind];
  $("constraint-label").textContent = k.label;
  $("constraint-text").value = k.value;
  $("constraint-text").disabled = !k.apply || k.value === "";
  $("constraint-help").textContent = k.help;
  $("prompt").value = k.prompt;
  showConstraintError(null);
}
$("kind").addEventListener("change", () => setKind($("kind").value));
$("constraint-text").addEventListener("input", () => showConstraintError(null));

function showConstraintError(message) {
  const el = $("constraint-error");
  el.hidden = !message;
  el.textContent = message ?? "";
  $("constraint-text").setAttribute("aria-invalid", message ? "true" : "false");
}

function buildRequest() {
  const kind = $("kind").value;
  const k = KINDS[kind];
  let extra = {};
  if (k.apply) {
    try {
      extra = k.apply($("constraint-text").value);
    } catch (e) {
      throw Object.assign(new Error(`The value is not valid JSON: ${e.message}`), { status: 400, local: true });
    }
  }
  return {
    kind,
    request: {
      // The conversation so far, then this message (New chat starts over).
      messages: [...state.history, { role: "user", content: $("prompt").value }],
      max_tokens: Number($("max-tokens").value) || 64,
      temperature: Number($("temperature").value),
      // poot's extension: each chunk carries the constraint's per-step numbers.
      step_stats: true,
      ...extra,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Generating

let genAbort = null;

function setNumber(id, text) {
  $(id).textContent = text;
}

async function generate() {
  if (!engine || state.generating) return;
  let built;
  try {
    built = buildRequest();
  } catch (e) {
    showConstraintError(e.message);
    return;
  }
  const { kind, request } = built;
  showConstraintError(null);
  const abort = (genAbort = new AbortController());
  const out = $("output");
  out.textContent = "";
  $("verdict").textContent = "";
  $("pretty").hidden = true;
  for (const id of ["n-tokens", "n-tps", "n-ttfc", "n-finish", "n-mask", "n-allowed", "n-forced"]) setNumber(id, "–");
  const run = { kind, request, text: "", toolCalls: [], finish: null, usage: null, error: null, stopped: false, verdict: null, steps: [] };
  showSteps(run);
  state.last = null;
  let stream;
  const started = performance.now();
  try {
    stream = await engine.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }, { signal: abort.signal });
  } catch (e) {
    // Validation happens before any generation: a bad constraint is a 400 right here.
    run.error = e.message;
    showConstraintError(e.status ? `${e.status}${e.param ? ` (${e.param})` : ""}: ${e.message}` : e.message);
    state.last = run;
    return;
  }
  state.generating = true;
  $("send").disabled = true;
  $("new-chat").disabled = true;
  $("stop").disabled = false;
  out.setAttribute("aria-busy", "true");
  $("gen-status").textContent = "Generating…";
  let first = null;
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.usage) run.usage = chunk.usage;
      if (chunk.step_stats?.length) {
        run.steps.push(...chunk.step_stats.filter((s) => s.index === 0));
        showStepsSoon(run);
      }
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      const d = choice.delta ?? {};
      if (first === null && (d.content || d.tool_calls)) {
        first = performance.now();
        setNumber("n-ttfc", `${((first - started) / 1000).toFixed(2)} s`);
      }
      if (d.content) run.text += d.content;
      for (const tc of d.tool_calls ?? []) {
        const slot = (run.toolCalls[tc.index ?? 0] ??= { id: "", type: "function", function: { name: "", arguments: "" } });
        if (tc.id) slot.id = tc.id;
        if (tc.function?.name) slot.function.name += tc.function.name;
        if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
      }
      if (choice.finish_reason) run.finish = choice.finish_reason;
      chunks++;
      out.textContent = run.toolCalls.length
        ? run.toolCalls.map((c) => `${c.function.name}(${c.function.arguments})`).join("\n")
        : run.text;
      const secs = (performance.now() - (first ?? started)) / 1000;
      if (secs > 0 && first !== null) setNumber("n-tps", `${(tokenCount(run) / secs).toFixed(1)} (live)`);
    }
  } catch (e) {
    run.error = e.message;
    $("gen-status").textContent = `Error: ${e.message}`;
  }
  const secs = (performance.now() - (first ?? started)) / 1000;
  run.stopped = abort.signal.aborted;
  run.seconds = secs;
  if (run.usage) {
    setNumber("n-tokens", `${run.usage.completion_tokens} completion, ${run.usage.prompt_tokens} prompt`);
    if (secs > 0) setNumber("n-tps", `${(run.usage.completion_tokens / ((performance.now() - started) / 1000)).toFixed(1)}`);
  } else {
    // A stopped stream ends without its usage chunk: the chunk count is what there is.
    setNumber("n-tokens", `${chunks} chunks streamed (no usage: ${run.stopped ? "stopped" : "not reported"})`);
    setNumber("n-tps", "–");
  }
  setNumber("n-finish", run.stopped ? "stopped" : run.finish ?? "–");
  if (!run.error) $("gen-status").textContent = run.stopped ? "Stopped." : "Done.";
  showSteps(run);
  run.verdict = judge(run);
  showVerdict(run.verdict);
  // A finished reply joins the conversation; a stopped or failed one does not.
  if (!run.error && !run.stopped) {
    const user = request.messages.at(-1);
    const reply = run.toolCalls.length
      ? { role: "assistant", content: null, tool_calls: run.toolCalls }
      : { role: "assistant", content: run.text };
    state.history.push(user, reply);
    showTranscript();
  }
  state.last = run;
  state.generating = false;
  $("send").disabled = false;
  $("stop").disabled = true;
  $("new-chat").disabled = state.history.length === 0;
  out.setAttribute("aria-busy", "false");
  $("send").focus();
}

$("chat-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  generate();
});
$("stop").addEventListener("click", () => genAbort?.abort());
$("new-chat").addEventListener("click", () => {
  state.history = [];
  showTranscript();
  $("prompt").focus();
});

function showTranscript() {
  const list = $("transcript");
  list.textContent = "";
  for (const m of state.history) {
    const li = document.createElement("li");
    li.className = m.role;
    const role = document.createElement("span");
    role.className = "role";
    role.textContent = m.role === "user" ? "You:" : "Model:";
    const text = m.tool_calls ? m.tool_calls.map((c) => `${c.function.name}(${c.function.arguments})`).join("\n") : m.content;
    li.append(role, text);
    list.append(li);
  }
  list.hidden = state.history.length === 0;
  $("new-chat").disabled = state.history.length === 0;
}

// ---------------------------------------------------------------------------------------------
// Per-step numbers (`step_stats`): mask time, allowed-token counts, forced tokens

/** Tokens generated so far: each step's sampled token and the tokens forced after it. */
function tokenCount(run) {
  return run.steps.reduce((n, s) => n + 1 + s.forced.length, 0);
}

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

const fmtUs = (us) => (us < 10 ? us.toFixed(1) : us.toFixed(0));

/**
 * The smallest step of performance.now() here, in µs: browsers coarsen it (Chromium: 100 µs,
 * 5 µs when the page is cross-origin isolated, as `make demo` serves it), so single masks of a
 * few µs read as 0 or one tick and only the mean over many steps says much.
 */
const clockStepUs = (() => {
  let min = Infinity;
  let last = performance.now();
  for (let seen = 0, i = 0; seen < 8 && i < 2e6; i++) {
    const t = performance.now();
    if (t > last) {
      min = Math.min(min, t - last);
      last = t;
      seen++;
    }
  }
  return Number.isFinite(min) ? min * 1000 : null;
})();

let stepsFrame = 0;
/** Redraws at most once per frame: a fast CPU run streams hundreds of chunks a second. */
function showStepsSoon(run) {
  if (stepsFrame) return;
  stepsFrame = requestAnimationFrame(() => {
    stepsFrame = 0;
    showSteps(run);
  });
}

function showSteps(run) {
  const steps = run.steps;
  const masked = steps.filter((s) => s.allowed !== null);
  const vocab = state.model?.vocabSize ?? 0;
  const forced = steps.reduce((n, s) => n + s.forced.length, 0);
  const total = tokenCount(run);
  state.stats = { steps: steps.length, masked: masked.length, forced, tokens: total };
  if (!steps.length) {
    for (const id of ["n-mask", "n-allowed", "n-forced"]) setNumber(id, "–");
    $("allowed-figure").hidden = true;
    $("token-view").textContent = "";
    return;
  }
  if (masked.length) {
    const times = masked.map((s) => s.mask_us).sort((a, b) => a - b);
    const mean = times.reduce((a, b) => a + b, 0) / times.length;
    const clock = clockStepUs === null ? "" : ` (clock step ${fmtUs(clockStepUs)} µs)`;
    setNumber("n-mask", `mean ${fmtUs(mean)} µs, median ${fmtUs(quantile(times, 0.5))} µs, p99 ${fmtUs(quantile(times, 0.99))} µs, max ${fmtUs(times.at(-1))} µs over ${times.length} masks${clock}`);
    const counts = masked.map((s) => s.allowed);
    const one = counts.filter((c) => c === 1).length;
    setNumber("n-allowed", `from ${Math.min(...counts).toLocaleString("en")} to ${Math.max(...counts).toLocaleString("en")} of ${vocab.toLocaleString("en")}; ${one} step${one === 1 ? "" : "s"} with a single choice`);
    drawAllowed(masked, vocab);
  } else {
    setNumber("n-mask", "no constraint: no mask");
    setNumber("n-allowed", `every token (${vocab.toLocaleString("en")})`);
    $("allowed-figure").hidden = true;
  }
  setNumber("n-forced", `${forced} of ${total} tokens`);
  const view = $("token-view");
  view.textContent = "";
  const piece = (tok, cls) => {
    const span = document.createElement("span");
    span.textContent = tok.text;
    span.title = `token ${tok.token}`;
    if (cls) span.className = cls;
    view.append(span);
  };
  steps.forEach((s, i) => {
    // The last step of a finished reply sampled end-of-sequence: it has no text to show.
    if (!(i === steps.length - 1 && run.finish && !s.forced.length && s.text === "")) piece(s, "");
    for (const f of s.forced) piece(f, "forced");
  });
}

/** One bar per masked step, its height the allowed count on a log scale up to the vocabulary. */
function drawAllowed(masked, vocab) {
  const svg = $("allowed-chart");
  const ns = "http://www.w3.org/2000/svg";
  const w = masked.length;
  const top = Math.log2(Math.max(vocab, ...masked.map((s) => s.allowed)) + 1);
  // At least 48 slots, so a short reply draws thin bars, not a few wide blocks.
  svg.setAttribute("viewBox", `0 0 ${Math.max(w, 48)} 100`);
  svg.textContent = "";
  masked.forEach((s, i) => {
    const h = Math.max(2, (100 * Math.log2(s.allowed + 1)) / top);
    const bar = document.createElementNS(ns, "rect");
    bar.setAttribute("x", String(i + 0.1));
    bar.setAttribute("width", "0.8");
    bar.setAttribute("y", String(100 - h));
    bar.setAttribute("height", String(h));
    if (s.allowed === 1) bar.setAttribute("class", "one");
    const title = document.createElementNS(ns, "title");
    title.textContent = `step ${i + 1}: ${s.allowed.toLocaleString("en")} allowed, mask ${fmtUs(s.mask_us)} µs, sampled ${JSON.stringify(s.text)}`;
    bar.append(title);
    svg.append(bar);
  });
  const caption = `Allowed tokens at each of ${w} masked steps (log scale, full height = ${vocab.toLocaleString("en")}; orange: one choice).`;
  $("allowed-caption").textContent = caption;
  svg.setAttribute("aria-label", caption);
  $("allowed-figure").hidden = false;
}

// ---------------------------------------------------------------------------------------------
// What came out: does it parse, does it validate

function judge(run) {
  const v = { ok: null, lines: [], pretty: null };
  const truncated = run.stopped || run.finish === "length";
  if (truncated) v.lines.push(run.stopped ? "Stopped before the end: the output may be incomplete." : "Cut at max_tokens: the output may be incomplete.");
  const r = run.request;
  const schemaCheck = (schema, value, what) => {
    const { errors, unknown } = validate(schema, value);
    if (unknown.size) v.lines.push(`Keywords not checked here: ${[...unknown].join(", ")}`);
    if (errors.length) v.lines.push(`${what} does not validate: ${errors.join("; ")}`);
    else v.lines.push(`${what}: valid under the schema.`);
    return errors.length === 0;
  };
  const parse = (text, what) => {
    try {
      const value = JSON.parse(text);
      v.pretty = JSON.stringify(value, null, 2);
      return { value };
    } catch (e) {
      v.lines.push(`${what} is not JSON: ${e.message}`);
      return null;
    }
  };
  switch (run.kind) {
    case "none":
      v.lines.push("No constraint: nothing to validate.");
      break;
    case "guided_choice":
      v.ok = r.guided_choice.includes(run.text);
      v.lines.push(v.ok ? `"${run.text}" is one of the choices.` : `"${run.text}" is not one of the choices.`);
      break;
    case "guided_regex":
      v.ok = new RegExp(`^(?:${r.guided_regex})$`, "u").test(run.text);
      v.lines.push(v.ok ? "The whole output matches the regex (checked with JavaScript's RegExp)." : "The output does not match the regex (checked with JavaScript's RegExp).");
      break;
    case "guided_grammar": {
      let depth = 0;
      const balanced = [...run.text].every((c) => (c === "(" ? ++depth : c === ")" ? --depth : depth) >= 0) && depth === 0;
      const chars = /^[0-9+\-*/()]*$/.test(run.text);
      v.ok = run.finish === "stop" && balanced && chars;
      v.lines.push(run.finish === "stop" ? "The engine ended it: a complete sentence of the grammar." : "Not ended by the grammar.");
      v.lines.push(`Independent check: ${chars ? "only digits, operators and parentheses" : "other characters found"}; parentheses ${balanced ? "balanced" : "not balanced"}.`);
      break;
    }
    case "guided_json":
    case "json_schema": {
      const schema = r.guided_json ?? r.response_format.json_schema.schema;
      const p = parse(run.text, "The output");
      v.ok = !!p && schemaCheck(schema, p.value, "The output");
      break;
    }
    case "json_object": {
      const p = parse(run.text, "The output");
      v.ok = !!p && typeof p.value === "object" && p.value !== null && !Array.isArray(p.value);
      if (p) v.lines.push(v.ok ? "The output is a JSON object." : "The output is JSON but not an object.");
      break;
    }
    case "tool": {
      if (!run.toolCalls.length) {
        v.ok = false;
        v.lines.push("No tool call came back.");
        break;
      }
      v.ok = true;
      const pretty = [];
      for (const call of run.toolCalls) {
        const tool = r.tools.find((t) => t.function?.name === call.function.name);
        let args;
        try {
          args = JSON.parse(call.function.arguments);
        } catch (e) {
          v.ok = false;
          v.lines.push(`${call.function.name}: the arguments are not JSON: ${e.message}`);
          continue;
        }
        pretty.push({ id: call.id, name: call.function.name, arguments: args });
        if (!tool) {
          v.ok = false;
          v.lines.push(`${call.function.name} is not a declared tool.`);
        } else {
          v.ok = schemaCheck(tool.function.parameters ?? {}, args, `${call.function.name}'s arguments`) && v.ok;
        }
      }
      v.pretty = JSON.stringify(pretty, null, 2);
      break;
    }
  }
  if (truncated && v.ok === false) v.ok = null; // incomplete, not wrong
  return v;
}

function showVerdict(v) {
  const el = $("verdict");
  el.textContent = "";
  const head = document.createElement("p");
  head.className = v.ok === true ? "ok" : v.ok === false ? "bad" : "muted";
  head.textContent = v.ok === true ? "✓ Valid" : v.ok === false ? "✗ Invalid" : "–";
  head.dataset.ok = String(v.ok);
  el.append(head);
  for (const line of v.lines) {
    const p = document.createElement("p");
    p.textContent = line;
    el.append(p);
  }
  $("pretty").hidden = !v.pretty;
  $("pretty").textContent = v.pretty ?? "";
}

// ---------------------------------------------------------------------------------------------

setKind($("kind").value);
const params = new URLSearchParams(location.search);
const requested = params.get("model");
if (["auto", "webgpu", "cpu"].includes(params.get("backend"))) $("backend-choice").value = params.get("backend");
$("backend-choice").addEventListener("change", () => $("model-form").requestSubmit());
$("model-url").value = requested ?? "/models/default.gguf";
loadModel(new URL($("model-url").value, location.href).href, $("model-url").value);
