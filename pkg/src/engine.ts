// The in-page engine: a GGUF model run by the wasm build (on WebGPU, or on the CPU) behind
// OpenAI-shaped calls.
//
//   const engine = await createEngine({ model: "https://…/SmolLM2-135M-Instruct.Q4_1.gguf" });
//   const reply = await engine.chat.completions.create({
//     messages: [{ role: "user", content: "Name a colour." }],
//     guided_choice: ["red", "green", "blue"],
//   });
//
// Requests run one at a time per engine, in the order they were made; each is validated at
// once (a bad request rejects before it waits its turn). Streams are produced as fast as the
// model goes, whether or not they are read, so a stream left unread never blocks the
// requests behind it. An aborted signal stops generation within one step.
//
// A Rust panic aborts the wasm instance: every pending and later call rejects with a
// PootError with code `engine_crashed` (never a hang), and the page must be reloaded (a Node
// process restarted) for a fresh instance.
import { PootError, toPootError } from "./errors.js";
import { createFetch, type StartedRun } from "./fetch.js";
import { abortError, readModel, type LoadProgress, type ModelSource } from "./modelSource.js";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
  Completion,
  CompletionChunk,
  CompletionCreateParams,
  CompletionCreateParamsNonStreaming,
  CompletionCreateParamsStreaming,
  ModelList,
  RequestOptions,
} from "./types.js";
import { loadWasm, type Wasm, type WasmSource } from "./wasm.js";

export type { LoadProgress, ModelSource } from "./modelSource.js";

export interface EngineOptions {
  /** The GGUF file: a URL (fetched, and kept in Cache Storage), a Blob/File or its bytes. */
  model: ModelSource;
  /** `"auto"` (default): WebGPU on a hardware adapter that the model fits, else the CPU (a software adapter such as SwiftShader is slower than the CPU path; `"webgpu"` uses it anyway). */
  backend?: "webgpu" | "cpu" | "auto";
  onProgress?: (p: LoadProgress) => void;
  /** Cache Storage bucket for downloaded models (default `"poot-models"`); false: no cache. */
  cache?: boolean | string;
  /** The `.wasm` (see `loadWasm`): omitted in a page; in Node, the file's bytes. */
  wasm?: WasmSource;
  /** Aborts loading. */
  signal?: AbortSignal;
}

export interface BackendInfo {
  kind: "webgpu" | "cpu";
  /** The WebGPU adapter's name. */
  adapter?: string;
  /** A software adapter (SwiftShader, lavapipe): correct, slow. */
  isSoftware?: boolean;
  /**
   * How the WebGPU backend's KV cache holds keys and values: "f16" where the adapter has
   * `shader-f16` (half the memory; outputs may differ slightly from the CPU path's, relative
   * logit error 2.4e-4 on SmolLM2-135M), "f32" otherwise (the CPU path's results).
   */
  kvCache?: "f16" | "f32";
  /** Why the model is not on WebGPU (with `backend: "auto"`). */
  reason?: string;
}

export interface ChatCompletions {
  create(req: ChatCompletionCreateParamsNonStreaming, opts?: RequestOptions): Promise<ChatCompletion>;
  create(req: ChatCompletionCreateParamsStreaming, opts?: RequestOptions): Promise<AsyncIterable<ChatCompletionChunk>>;
  create(req: ChatCompletionCreateParams, opts?: RequestOptions): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
}

export interface Completions {
  create(req: CompletionCreateParamsNonStreaming, opts?: RequestOptions): Promise<Completion>;
  create(req: CompletionCreateParamsStreaming, opts?: RequestOptions): Promise<AsyncIterable<CompletionChunk>>;
  create(req: CompletionCreateParams, opts?: RequestOptions): Promise<Completion | AsyncIterable<CompletionChunk>>;
}

export interface Engine {
  readonly backend: BackendInfo;
  readonly model: {
    /** `general.name`, the `model` of every response. */
    id: string;
    contextLength: number;
    /** The GGUF file's size. */
    bytes: number;
    architecture: string;
    vocabSize: number;
  };
  readonly chat: { readonly completions: ChatCompletions };
  readonly completions: Completions;
  readonly models: { list(): Promise<ModelList> };
  /** Serves POST …/chat/completions, POST …/completions and GET …/models (see fetch.ts). */
  readonly fetch: typeof globalThis.fetch;
  /** Stops queued and running requests, then frees the model; later calls reject. */
  unload(): Promise<void>;
}

type Core = Wasm["LocalEngine"]["prototype"];
type CoreRun = Wasm["EngineRun"]["prototype"];
type Endpoint = "chat" | "completion";

// ---------------------------------------------------------------------------------------------
// Calls into wasm, and the crash of the instance

let crash: PootError | undefined;
const crashWaiters = new Set<(e: PootError) => void>();
let pendingCalls = 0;
let hooked: Wasm | undefined;

function crashed(detail: string): PootError {
  crash ??= new PootError(
    `the engine crashed (${detail}); this wasm instance cannot be used any more: reload the page (in Node, start a new process) for a fresh one`,
    { status: 500, code: "engine_crashed" },
  );
  for (const reject of crashWaiters) reject(crash);
  crashWaiters.clear();
  return crash;
}

function isWasmTrap(e: unknown): e is Error {
  return typeof WebAssembly !== "undefined" && e instanceof WebAssembly.RuntimeError;
}

/** Hears of panics (and, in a page, of traps inside pending promises) once per instance. */
function hookPanics(wasm: Wasm) {
  if (hooked === wasm) return;
  hooked = wasm;
  wasm.onPanic((message: string) => {
    crashed(`a Rust panic: ${message}`);
  });
  // A trap without a panic (an allocation failure aborts without one) inside a pending
  // promise surfaces only as an uncaught error: while one of our calls is pending, a wasm
  // trap there is taken for ours.
  const g = globalThis as { addEventListener?: (type: string, f: (ev: { error?: unknown; reason?: unknown }) => void) => void };
  const onUncaught = (ev: { error?: unknown; reason?: unknown }) => {
    const e = ev.error ?? ev.reason;
    if (pendingCalls > 0 && isWasmTrap(e)) crashed(`wasm trapped: ${e.message}`);
  };
  g.addEventListener?.("error", onUncaught);
  g.addEventListener?.("unhandledrejection", onUncaught);
}

function fromWasm(e: unknown): PootError {
  if (crash) return crash;
  if (isWasmTrap(e)) return crashed(`wasm trapped: ${e.message}`);
  return toPootError(e);
}

/** A synchronous call into wasm. */
function call<T>(f: () => T): T {
  if (crash) throw crash;
  try {
    return f();
  } catch (e) {
    throw fromWasm(e);
  }
}

/** An asynchronous call into wasm, which a crash rejects even if its promise never settles. */
async function callAsync<T>(f: () => Promise<T>): Promise<T> {
  if (crash) throw crash;
  let onCrash!: (e: PootError) => void;
  const crashPromise = new Promise<never>((_, reject) => (onCrash = reject));
  crashWaiters.add(onCrash);
  pendingCalls++;
  try {
    return await Promise.race([call(f), crashPromise]);
  } catch (e) {
    throw fromWasm(e);
  } finally {
    crashWaiters.delete(onCrash);
    pendingCalls--;
  }
}

/** Lets the event loop run (timers, abort listeners) between steps, without setTimeout's clamp. */
function yieldNow(): Promise<void> {
  const g = globalThis as {
    scheduler?: { yield?: () => Promise<void> };
    setImmediate?: (f: () => void) => void;
  };
  if (g.scheduler?.yield) return g.scheduler.yield();
  if (g.setImmediate) return new Promise((resolve) => g.setImmediate!(resolve));
  if (typeof MessageChannel !== "undefined") {
    return new Promise((resolve) => {
      const channel = new MessageChannel();
      channel.port1.onmessage = () => {
        channel.port1.close();
        resolve();
      };
      channel.port2.postMessage(null);
    });
  }
  return new Promise((resolve) => setTimeout(resolve, 0));
}

function randomSeed(): bigint {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c?.getRandomValues) return c.getRandomValues(new BigUint64Array(1))[0]!;
  return (BigInt(Math.floor(Math.random() * 2 ** 32)) << 32n) | BigInt(Math.floor(Math.random() * 2 ** 32));
}

// ---------------------------------------------------------------------------------------------
// One request

type Stop = "aborted" | "closed" | "unloaded";

class LocalRun implements StartedRun {
  readonly stream: boolean;
  readonly warnings: string[];
  #engine: EngineImpl;
  #core: Core;
  #run: CoreRun;
  #signal: AbortSignal | undefined;
  #buffer: object[] = [];
  #wake: (() => void) | undefined;
  #finished = false;
  #stop: Stop | undefined;
  #error: PootError | undefined;
  #response: object | undefined;
  #settled: Promise<void>;
  #settle!: () => void;
  #onAbort = () => this.stop("aborted");

  constructor(engine: EngineImpl, core: Core, run: CoreRun, signal: AbortSignal | undefined) {
    this.#engine = engine;
    this.#core = core;
    this.#run = run;
    this.#signal = signal;
    this.stream = call(() => run.stream);
    this.warnings = JSON.parse(call(() => run.warnings)) as string[];
    this.#settled = new Promise((resolve) => (this.#settle = resolve));
    signal?.addEventListener("abort", this.#onAbort, { once: true });
    void engine.enqueue(this, () => this.#drive());
  }

  /** Stops the run at the next step boundary (or before it starts). */
  stop(why: Stop) {
    if (this.#finished || this.#stop) return;
    this.#stop = why;
    this.#wakeUp();
    this.#settle();
  }

  #wakeUp() {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  async #drive(): Promise<void> {
    try {
      // The CPU steps synchronously: a panic then traps inside `call`, not in a microtask.
      const onGpu = call(() => this.#core.onGpu);
      const step = onGpu
        ? () => callAsync(() => this.#core.step(this.#run) as Promise<string>)
        : async () => call(() => this.#core.stepSync(this.#run));
      while (!this.#stop && !call(() => this.#run.done)) {
        const chunks = JSON.parse(await step()) as object[];
        if (chunks.length) {
          this.#buffer.push(...chunks);
          this.#wakeUp();
        }
        await yieldNow();
      }
      if (this.#stop) call(() => this.#run.cancel());
      else if (!this.stream) this.#response = JSON.parse(call(() => this.#run.response())) as object;
    } catch (e) {
      this.#error = fromWasm(e);
    } finally {
      if (!crash) this.#run.free();
      this.#signal?.removeEventListener("abort", this.#onAbort);
      this.#finished = true;
      this.#wakeUp();
      this.#settle();
    }
  }

  #stopError(): PootError | undefined {
    if (this.#stop === "aborted") return abortError(this.#signal, "the request");
    if (this.#stop === "unloaded") return this.#engine.unloadedError();
    return undefined;
  }

  async result(): Promise<object> {
    await this.#settled;
    const stopped = this.#stopError();
    if (stopped) throw stopped;
    if (this.#error) throw this.#error;
    return this.#response!;
  }

  async *chunks(): AsyncGenerator<object, void, undefined> {
    try {
      for (;;) {
        if (this.#stop === "aborted") return; // an aborted stream just ends
        if (this.#stop === "unloaded") throw this.#engine.unloadedError();
        const next = this.#buffer.shift();
        if (next) {
          yield next;
          continue;
        }
        if (this.#error) throw this.#error;
        if (this.#finished) return;
        await new Promise<void>((resolve) => (this.#wake = resolve));
      }
    } finally {
      this.stop("closed"); // the reader went away: stop generating
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The engine

class EngineImpl implements Engine {
  readonly backend: BackendInfo;
  readonly model: Engine["model"];
  readonly chat: { readonly completions: ChatCompletions };
  readonly completions: Completions;
  readonly models: { list(): Promise<ModelList> };
  readonly fetch: typeof globalThis.fetch;
  #core: Core | undefined;
  #tail: Promise<void> = Promise.resolve();
  #runs = new Set<LocalRun>();
  #unloaded = false;

  constructor(core: Core, backend: BackendInfo, info: ModelInfo) {
    this.#core = core;
    this.backend = Object.freeze(backend);
    this.model = Object.freeze({
      id: info.name,
      contextLength: info.contextLength,
      bytes: info.fileBytes,
      architecture: info.architecture,
      vocabSize: info.nVocab,
    });
    const create = (endpoint: Endpoint) => (req: object, opts?: RequestOptions) => this.#create(endpoint, req, opts);
    this.chat = Object.freeze({ completions: { create: create("chat") } as ChatCompletions });
    this.completions = { create: create("completion") } as Completions;
    this.models = { list: async () => this.#models() };
    this.fetch = createFetch({
      models: () => this.#models(),
      start: (endpoint, body, signal) => this.#start(endpoint, body, signal),
    });
  }

  unloadedError(): PootError {
    return new PootError("the engine was unloaded (engine.unload()); create a new one with createEngine()", {
      status: 400,
      code: "engine_unloaded",
    });
  }

  #live(): Core {
    if (crash) throw crash;
    if (this.#unloaded || !this.#core) throw this.unloadedError();
    return this.#core;
  }

  #models(): ModelList {
    const core = this.#live();
    return JSON.parse(call(() => core.modelsJson())) as ModelList;
  }

  /** Runs `job` after every job queued before it. */
  enqueue(run: LocalRun, job: () => Promise<void>): Promise<void> {
    this.#runs.add(run);
    const next = this.#tail.then(job).finally(() => this.#runs.delete(run));
    this.#tail = next.catch(() => {});
    return next;
  }

  #start(endpoint: Endpoint, body: string, signal: AbortSignal | undefined): LocalRun {
    const core = this.#live();
    if (signal?.aborted) throw abortError(signal, "the request");
    const seed = randomSeed();
    const id = `${endpoint === "chat" ? "chatcmpl" : "cmpl"}-${seed.toString(16).padStart(16, "0")}`;
    const created = Math.floor(Date.now() / 1000);
    const run = call(() => core.start(body, endpoint, id, created, seed));
    return new LocalRun(this, core, run, signal);
  }

  async #create(endpoint: Endpoint, req: object, opts?: RequestOptions): Promise<object> {
    if (req === null || typeof req !== "object" || Array.isArray(req)) {
      throw new PootError("the request must be an object", { status: 400, code: "invalid_input" });
    }
    if ("signal" in req) {
      throw new PootError("signal is not a request field: pass it as the second argument, create(request, { signal })", {
        status: 400,
        code: "invalid_input",
        param: "signal",
      });
    }
    const run = this.#start(endpoint, JSON.stringify(req), opts?.signal);
    if (!run.stream) return run.result();
    const chunks = run.chunks();
    return { [Symbol.asyncIterator]: () => chunks };
  }

  async unload(): Promise<void> {
    if (this.#unloaded) return;
    this.#unloaded = true;
    for (const run of this.#runs) run.stop("unloaded");
    await this.#tail;
    const core = this.#core;
    this.#core = undefined;
    if (core && !crash) core.free();
  }
}

interface ModelInfo {
  name: string;
  architecture: string;
  contextLength: number;
  nVocab: number;
  fileBytes: number;
}

function webgpuMissing(): string | null {
  if (typeof navigator === "undefined" || !("gpu" in navigator) || !navigator.gpu) {
    return "WebGPU is not available here (navigator.gpu is missing)";
  }
  return null;
}

/**
 * wgpu reports only `GPUAdapterInfo.description`, which Chromium leaves empty for many
 * adapters (SwiftShader among them); vendor and architecture still say what it is.
 */
async function describeAdapter(): Promise<string> {
  try {
    const info = (await navigator.gpu.requestAdapter())?.info;
    const parts = [info?.vendor, info?.architecture, info?.device].filter((p) => p);
    return parts.length ? parts.join(" ") : "unnamed WebGPU adapter";
  } catch {
    return "unnamed WebGPU adapter";
  }
}

/** Loads a model and returns the engine that serves it (see the module comment). */
export async function createEngine(opts: EngineOptions): Promise<Engine> {
  if (!opts || opts.model === undefined || opts.model === null) {
    throw new PootError("createEngine needs a model (a URL, a Blob/File or the GGUF file's bytes)", {
      status: 400,
      code: "invalid_input",
      param: "model",
    });
  }
  const want = opts.backend ?? "auto";
  if (!["webgpu", "cpu", "auto"].includes(want)) {
    throw new PootError(`backend must be "webgpu", "cpu" or "auto", got ${JSON.stringify(want)}`, {
      status: 400,
      code: "invalid_input",
      param: "backend",
    });
  }
  // Asked for WebGPU where there is none: say so before downloading anything.
  const missing = want === "webgpu" ? webgpuMissing() : null;
  if (missing) throw new PootError(missing, { status: 500, code: "webgpu_unavailable", param: "backend" });
  if (crash) throw crash;

  let wasm: Wasm;
  try {
    wasm = await loadWasm(opts.wasm);
  } catch (e) {
    throw toPootError(e);
  }
  hookPanics(wasm);
  const signal = opts.signal;
  let last: LoadProgress | undefined;
  const report = (p: LoadProgress) => {
    if (last && p.phase === last.phase && p.loaded <= last.loaded) return; // never backwards
    last = p;
    opts.onProgress?.(p);
  };
  const cache = opts.cache === false ? false : typeof opts.cache === "string" ? opts.cache : "poot-models";
  const { bytes } = await readModel(wasm, opts.model, { onProgress: report, cache, signal });
  const total = call(() => bytes.length);
  if (signal?.aborted) {
    bytes.free();
    throw abortError(signal, "loading the model");
  }
  report({ phase: "parse", loaded: 0, total });
  const core = call(() => wasm.LocalEngine.parse(bytes));
  try {
    report({ phase: "parse", loaded: total, total });
    if (want !== "cpu") {
      if (!webgpuMissing()) report({ phase: "upload", loaded: 0, total });
      await callAsync(() => core.selectBackend(want) as Promise<void>);
    }
    const backend = JSON.parse(call(() => core.backendInfo())) as BackendInfo;
    if (backend.kind === "webgpu") {
      report({ phase: "upload", loaded: total, total });
      if (!backend.adapter) backend.adapter = await describeAdapter();
    }
    // "auto" passed over a software adapter whose name wgpu could not read: name it here.
    const unnamed = "the only WebGPU adapter is a software one";
    if (backend.kind === "cpu" && backend.reason?.startsWith(unnamed)) {
      backend.reason = `the only WebGPU adapter (${await describeAdapter()}) is a software one${backend.reason.slice(unnamed.length)}`;
    }
    if (signal?.aborted) throw abortError(signal, "loading the model");
    const info = JSON.parse(call(() => core.modelInfo())) as ModelInfo;
    return new EngineImpl(core, backend, info);
  } catch (e) {
    if (!crash) core.free();
    throw fromWasm(e);
  }
}
