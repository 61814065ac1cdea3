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
// A Rust panic aborts the wasm instance, and the engine recovers by itself. The requests that
// were running or queued on it reject with a PootError with code `engine_crashed` (never a
// hang); the engine then restarts: a fresh wasm instance (each engine has its own, with its
// own copy of the wasm-bindgen glue: see wasm.ts), the model read again from what the engine
// already holds (the bytes or Blob it was given, or its Cache Storage copy; only a URL loaded
// with `cache: false`, or whose copy is gone, is downloaded again), on the same backend (a
// fresh GPU device on WebGPU). Requests made during the restart wait for it; they reject with
// `engine_crashed` only if the restart fails (the next request then tries again). `onCrash`
// and `onRecover` tell the app, and `engine.crashes` counts the crashes. With
// `recover: false`, a crashed engine stays dead: every later call rejects with
// `engine_crashed`.
import { PootError, toPootError } from "./errors.js";
import { createFetch, type StartedRun } from "./fetch.js";
import { abortError, readModel, type LoadProgress, type ModelSource } from "./modelSource.js";
import { parseCompletion, withJsonSchemas, type Infer, type PartialParse, type StandardSchemaV1 } from "./typed.js";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
  ParsedChatCompletion,
  ResponseFormat,
  Completion,
  Limits,
  CompletionChunk,
  CompletionCreateParams,
  CompletionCreateParamsNonStreaming,
  CompletionCreateParamsStreaming,
  ModelList,
  RequestOptions,
} from "./types.js";
import { limitsText } from "./limits.js";
import { instantiateWasm, type Wasm, type WasmSource } from "./wasm.js";

export type { LoadProgress, ModelSource } from "./modelSource.js";

export interface EngineOptions {
  /** The GGUF file: a URL (fetched, and kept in Cache Storage), a Blob/File or its bytes. */
  model: ModelSource;
  /** `"auto"` (default): WebGPU on a hardware adapter that the model fits, else the CPU (a software adapter such as SwiftShader is slower than the CPU path; `"webgpu"` uses it anyway). */
  backend?: "webgpu" | "cpu" | "auto";
  onProgress?: (p: LoadProgress) => void;
  /** Cache Storage bucket for downloaded models (default `"poot-models"`); false: no cache. */
  cache?: boolean | string;
  /** The `.wasm` (see `loadWasm`): omitted, the package's own (fetched in a page, read from disk in Node). */
  wasm?: WasmSource;
  /** Aborts loading. */
  signal?: AbortSignal;
  /**
   * Restart after a crash (a Rust panic), as the module comment says (default true). The
   * engine then keeps a reference to the model it was given (its bytes or Blob) to read it
   * again; false: it keeps none, and a crashed engine stays dead.
   */
  recover?: boolean;
  /** Called when the engine crashed; it is restarting (with `recover`, the default). */
  onCrash?: (event: CrashEvent) => void;
  /** Called when the engine runs again after a crash. */
  onRecover?: (event: RecoverEvent) => void;
  /** Tighter bounds on what a request may make the engine compile (see {@link Limits}); checked before the model is read. */
  limits?: Limits;
}

/** What `onCrash` hears. */
export interface CrashEvent {
  /** What the requests that were running or queued rejected with (code `engine_crashed`). */
  error: PootError;
  /** This engine's crashes so far, this one included. */
  crashes: number;
}

/** What `onRecover` hears, once the engine runs again after a crash. */
export interface RecoverEvent {
  /** This engine's crashes so far. */
  crashes: number;
  /** How long the restart took: a fresh wasm instance, the model read, parsed (and uploaded) again. */
  ms: number;
  /**
   * Where the model was read from again: the bytes the engine was given (`memory`), its
   * Blob/File (`blob`), Cache Storage (`cache`), or the network (`network`: a URL loaded with
   * `cache: false`, where there is no Cache Storage (Node), or whose cached copy is gone).
   */
  modelFrom: "memory" | "blob" | "cache" | "network";
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
  /**
   * One completion with each message's content `parsed`, as the `openai` SDK's `parse`: with a
   * Standard Schema (Zod, Valibot, ArkType) as `response_format` (or as its
   * `json_schema.schema`, or as `guided_json`), validated by the schema itself and typed by it.
   * With `stream: true` (and `n` 1): an AsyncIterable of the value as it is being written
   * (fields already written are final), ending with the whole, validated.
   */
  parse<S extends StandardSchemaV1>(
    req: Omit<ChatCompletionCreateParamsStreaming, "response_format" | "guided_json"> &
      ({ response_format: S | TypedJsonSchemaFormat<S>; guided_json?: null } | { guided_json: S; response_format?: ResponseFormat | null }),
    opts?: RequestOptions,
  ): Promise<AsyncIterable<PartialParse<Infer<S>>>>;
  parse(req: ChatCompletionCreateParamsStreaming, opts?: RequestOptions): Promise<AsyncIterable<PartialParse<unknown>>>;
  parse<S extends StandardSchemaV1>(
    req: Omit<ChatCompletionCreateParamsNonStreaming, "response_format" | "guided_json"> &
      ({ response_format: S | TypedJsonSchemaFormat<S>; guided_json?: null } | { guided_json: S; response_format?: ResponseFormat | null }),
    opts?: RequestOptions,
  ): Promise<ParsedChatCompletion<Infer<S>>>;
  parse(req: ChatCompletionCreateParamsNonStreaming, opts?: RequestOptions): Promise<ParsedChatCompletion<unknown>>;
}

/** `response_format` `json_schema` with a Standard Schema as its schema. */
export interface TypedJsonSchemaFormat<S extends StandardSchemaV1> {
  type: "json_schema";
  json_schema: { name: string; description?: string; schema: S; strict?: boolean | null };
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
  /** How many times this engine crashed (a Rust panic); it restarted itself after each. */
  readonly crashes: number;
}

type Core = Wasm["LocalEngine"]["prototype"];
type CoreRun = Wasm["EngineRun"]["prototype"];
type Endpoint = "chat" | "completion";

// ---------------------------------------------------------------------------------------------
// Calls into wasm, and the crash of an instance

/** Instances not known to have crashed, for traps seen only as uncaught errors. */
const liveInstances = new Set<Instance>();
/** Instances that panicked inside a promise, whose trap is still to surface as an uncaught error. */
const trapsDue = new Set<Instance>();
let listening = false;

function isWasmTrap(e: unknown): e is Error {
  return typeof WebAssembly !== "undefined" && e instanceof WebAssembly.RuntimeError;
}

/**
 * A trap without a panic (an allocation failure aborts without one) inside a pending promise
 * surfaces only as an uncaught error: while an instance has a call of ours pending, a wasm
 * trap there is taken for its crash.
 */
function listenForTraps() {
  if (listening) return;
  listening = true;
  type Uncaught = { error?: unknown; reason?: unknown; preventDefault?: () => void };
  const g = globalThis as { addEventListener?: (type: string, f: (ev: Uncaught) => void) => void };
  const onUncaught = (ev: Uncaught) => {
    const e = ev.error ?? ev.reason;
    if (!isWasmTrap(e)) return;
    let ours = trapsDue.size > 0;
    trapsDue.clear();
    for (const instance of [...liveInstances]) {
      if (instance.pendingCalls === 0) continue;
      instance.crashed(`wasm trapped: ${e.message}`);
      ours = true;
    }
    // Handled (a PootError says it): in a worker, an uncaught error would also fail the
    // worker on the page's side (its `error` event), which the engine has survived.
    if (ours) ev.preventDefault?.();
  };
  g.addEventListener?.("error", onUncaught);
  g.addEventListener?.("unhandledrejection", onUncaught);
}

/**
 * Drops a wasm-bindgen object of a crashed instance without calling into it: its finalizer is
 * unregistered (`free()` would call the dead instance).
 */
function forget(object: object | undefined) {
  (object as { __destroy_into_raw?: () => unknown } | undefined)?.__destroy_into_raw?.();
}

/**
 * One wasm instance (its own glue, see wasm.ts) and whether it crashed. A Rust panic aborts
 * the instance: every call into it after that, and every pending promise of it, rejects with
 * the same PootError (`engine_crashed`), and `onCrash` hears of it once.
 */
class Instance {
  readonly wasm: Wasm;
  crash: PootError | undefined;
  pendingCalls = 0;
  /** Whether the engine on this instance restarts after a crash (the error says what follows). */
  recovers = false;
  /** The engine's handler, called once, after the crash. */
  onCrash: (() => void) | undefined;
  #waiters = new Set<(e: PootError) => void>();

  constructor(wasm: Wasm) {
    this.wasm = wasm;
    listenForTraps();
    liveInstances.add(this);
    wasm.onPanic((message: string) => {
      this.crashed(`a Rust panic: ${message}`);
      // A panic inside a promise traps in a microtask, where no call of ours catches it.
      if (this.pendingCalls > 0) trapsDue.add(this);
    });
  }

  crashed(detail: string): PootError {
    if (this.crash) return this.crash;
    const then = this.recovers
      ? "the requests that were running or queued fail with this error; the engine restarts itself (a fresh wasm instance, the model read again) and later requests wait for it"
      : "this engine cannot be used any more (its wasm instance is dead): createEngine() makes a new one";
    this.crash = new PootError(`the engine crashed (${detail}); ${then}`, { status: 500, code: "engine_crashed" });
    liveInstances.delete(this);
    for (const reject of this.#waiters) reject(this.crash);
    this.#waiters.clear();
    // Not from inside the panic hook, which must not call back into wasm.
    queueMicrotask(() => this.onCrash?.());
    return this.crash;
  }

  fromWasm(e: unknown): PootError {
    if (isWasmTrap(e)) trapsDue.delete(this); // caught here: it will not surface
    if (this.crash) return this.crash;
    if (isWasmTrap(e)) return this.crashed(`wasm trapped: ${e.message}`);
    return toPootError(e);
  }

  /** A synchronous call into wasm. */
  call<T>(f: () => T): T {
    if (this.crash) throw this.crash;
    try {
      return f();
    } catch (e) {
      throw this.fromWasm(e);
    }
  }

  /** An asynchronous call into wasm, which a crash rejects even if its promise never settles. */
  async callAsync<T>(f: () => Promise<T>): Promise<T> {
    if (this.crash) throw this.crash;
    let onCrash!: (e: PootError) => void;
    const crashPromise = new Promise<never>((_, reject) => (onCrash = reject));
    this.#waiters.add(onCrash);
    this.pendingCalls++;
    try {
      return await Promise.race([this.call(f), crashPromise]);
    } catch (e) {
      throw this.fromWasm(e);
    } finally {
      this.#waiters.delete(onCrash);
      this.pendingCalls--;
    }
  }
}

/** Engines armed by `armDebugPanic`: their next step panics (`true`: inside the step's promise). */
const armedPanics = new WeakMap<object, boolean>();

/**
 * Test-only (re-exported by src/testing.ts, which is not published, and not by index.ts):
 * the engine's next step calls the wasm export `debugPanic` instead of stepping, a
 * real Rust panic in its wasm instance. `inFuture`: inside a pending promise, as a panic
 * during a WebGPU step would be. An engine of `createWorkerEngine` must be armed in its
 * worker (see test/browser/pages/crash-worker.js).
 */
export function armDebugPanic(engine: Engine, inFuture = false): void {
  if (!(engine instanceof EngineImpl)) throw new TypeError("armDebugPanic needs an engine of createEngine");
  armedPanics.set(engine, inFuture);
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
  #inst: Instance;
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

  constructor(engine: EngineImpl, loaded: Loaded, run: CoreRun, signal: AbortSignal | undefined) {
    this.#engine = engine;
    this.#inst = loaded.inst;
    this.#core = loaded.core;
    this.#run = run;
    this.#signal = signal;
    this.stream = this.#inst.call(() => run.stream);
    this.warnings = JSON.parse(this.#inst.call(() => run.warnings)) as string[];
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
    const inst = this.#inst;
    const call = <T>(f: () => T) => inst.call(f);
    try {
      // The CPU steps synchronously: a panic then traps inside `call`, not in a microtask.
      const onGpu = call(() => this.#core.onGpu);
      const realStep = onGpu
        ? () => inst.callAsync(() => this.#core.step(this.#run) as Promise<string>)
        : async () => call(() => this.#core.stepSync(this.#run));
      const step = () => {
        const inFuture = armedPanics.get(this.#engine);
        if (inFuture === undefined) return realStep();
        armedPanics.delete(this.#engine);
        return inFuture
          ? inst.callAsync(() => inst.wasm.debugPanic(true) as Promise<string>)
          : Promise.resolve(call(() => inst.wasm.debugPanic(false) as unknown as string));
      };
      while (!this.#stop && !call(() => this.#run.done)) {
        const chunks = JSON.parse(await step()) as object[];
        if (chunks.length) {
          this.#buffer.push(...chunks);
          this.#wakeUp();
        }
        await yieldNow();
      }
      if (this.#stop) call(() => this.#run.cancel());
      else if (!this.stream) this.#response = call(() => this.#run.response()) as object;
    } catch (e) {
      this.#error = inst.fromWasm(e);
    } finally {
      if (inst.crash) forget(this.#run);
      else this.#run.free();
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

/** What one load produced: the instance, the parsed model on its backend, and what it says. */
interface Loaded {
  inst: Instance;
  core: Core;
  backend: BackendInfo;
  info: ModelInfo;
  /** The first phase of reading the model: where it came from. */
  from: LoadProgress["phase"] | undefined;
}

/** How to load the model again after a crash. */
interface LoadSpec {
  /** Undefined when the engine does not recover (it then keeps no reference to the model). */
  model: ModelSource | undefined;
  cache: string | false;
  wasm: WasmSource | undefined;
  recover: boolean;
  /** The `limits` option as JSON text; undefined: the defaults. */
  limits: string | undefined;
}

/** Rejects with the request's abort error as soon as `signal` aborts, else settles as `p`. */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal, "the request"));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Calls an app's callback; an exception from it is reported, never thrown into the engine. */
export function notify<E>(callback: ((event: E) => void) | undefined, event: E) {
  try {
    callback?.(event);
  } catch (e) {
    queueMicrotask(() => {
      throw e;
    });
  }
}

class EngineImpl implements Engine {
  readonly model: Engine["model"];
  readonly chat: { readonly completions: ChatCompletions };
  readonly completions: Completions;
  readonly models: { list(): Promise<ModelList> };
  readonly fetch: typeof globalThis.fetch;
  #backend!: BackendInfo;
  #spec: LoadSpec;
  #hooks: Pick<EngineOptions, "onCrash" | "onRecover">;
  #current: Loaded | undefined;
  #restarting: Promise<Loaded> | undefined;
  #crashes = 0;
  #tail: Promise<void> = Promise.resolve();
  #runs = new Set<LocalRun>();
  #unloaded = false;

  constructor(loaded: Loaded, spec: LoadSpec, hooks: Pick<EngineOptions, "onCrash" | "onRecover">) {
    this.#spec = spec;
    this.#hooks = hooks;
    this.#adopt(loaded);
    const info = loaded.info;
    this.model = Object.freeze({
      id: info.name,
      contextLength: info.contextLength,
      bytes: info.fileBytes,
      architecture: info.architecture,
      vocabSize: info.nVocab,
    });
    const create = (endpoint: Endpoint) => (req: object, opts?: RequestOptions) => this.#create(endpoint, req, opts);
    this.chat = Object.freeze({
      completions: {
        create: create("chat"),
        parse: (req: object, opts?: RequestOptions) => parseCompletion(create("chat"), req, opts),
      } as ChatCompletions,
    });
    this.completions = { create: create("completion") } as Completions;
    this.models = { list: async () => this.#models() };
    this.fetch = createFetch({
      models: () => this.#models(),
      start: (endpoint, body, signal) => this.#start(endpoint, body, signal),
    });
  }

  get backend(): BackendInfo {
    return this.#backend;
  }

  get crashes(): number {
    return this.#crashes;
  }

  unloadedError(): PootError {
    return new PootError("the engine was unloaded (engine.unload()); create a new one with createEngine()", {
      status: 400,
      code: "engine_unloaded",
    });
  }

  #adopt(loaded: Loaded) {
    this.#current = loaded;
    this.#backend = Object.freeze(loaded.backend);
    loaded.inst.recovers = this.#spec.recover;
    loaded.inst.onCrash = () => this.#crashed(loaded);
  }

  /** The instance under `loaded` crashed: count it, tell the app, and start the restart. */
  #crashed(loaded: Loaded) {
    if (this.#unloaded || this.#current !== loaded) return;
    this.#crashes++;
    forget(loaded.core);
    notify(this.#hooks.onCrash, { error: loaded.inst.crash!, crashes: this.#crashes });
    if (this.#spec.recover) this.#restart().catch(() => {});
  }

  /** The live instance: at once, or once the restart after a crash is done. */
  #ready(): Loaded | Promise<Loaded> {
    if (this.#unloaded || !this.#current) throw this.unloadedError();
    const current = this.#current;
    if (!current.inst.crash) return current;
    if (!this.#spec.recover) throw current.inst.crash;
    return this.#restart();
  }

  /** The restart under way, or a new one (after a restart that failed). */
  #restart(): Promise<Loaded> {
    this.#restarting ??= this.#reload().finally(() => (this.#restarting = undefined));
    return this.#restarting;
  }

  /** A fresh wasm instance, the model read again (no download where it is at hand), the same backend. */
  async #reload(): Promise<Loaded> {
    const t0 = performance.now();
    const spec = { ...this.#spec, want: this.#backend.kind };
    let loaded: Loaded;
    try {
      loaded = await loadModel(spec, {});
    } catch (e) {
      const why = toPootError(e);
      throw new PootError(
        `the engine crashed and restarting it failed (${why.message}); the next request tries again`,
        { status: 500, code: "engine_crashed" },
      );
    }
    if (this.#unloaded) {
      loaded.core.free();
      throw this.unloadedError();
    }
    this.#adopt(loaded);
    const modelFrom: RecoverEvent["modelFrom"] =
      loaded.from === "cache" ? "cache" : loaded.from === "download" ? "network" : typeof Blob !== "undefined" && spec.model instanceof Blob ? "blob" : "memory";
    notify(this.#hooks.onRecover, { crashes: this.#crashes, ms: performance.now() - t0, modelFrom });
    return loaded;
  }

  #models(): ModelList | Promise<ModelList> {
    const list = (l: Loaded) => JSON.parse(l.inst.call(() => l.core.modelsJson())) as ModelList;
    const ready = this.#ready();
    return ready instanceof Promise ? ready.then(list) : list(ready);
  }

  /** Runs `job` after every job queued before it. */
  enqueue(run: LocalRun, job: () => Promise<void>): Promise<void> {
    this.#runs.add(run);
    const next = this.#tail.then(job).finally(() => this.#runs.delete(run));
    this.#tail = next.catch(() => {});
    return next;
  }

  #start(endpoint: Endpoint, body: string, signal: AbortSignal | undefined): LocalRun | Promise<LocalRun> {
    if (signal?.aborted) throw abortError(signal, "the request");
    const ready = this.#ready();
    if (!(ready instanceof Promise)) return this.#startOn(ready, endpoint, body, signal);
    // Made while the engine restarts: it waits for the fresh instance.
    return untilAborted(ready, signal).then((loaded) => this.#startOn(loaded, endpoint, body, signal));
  }

  #startOn(loaded: Loaded, endpoint: Endpoint, body: string, signal: AbortSignal | undefined): LocalRun {
    const seed = randomSeed();
    const id = `${endpoint === "chat" ? "chatcmpl" : "cmpl"}-${seed.toString(16).padStart(16, "0")}`;
    const created = Math.floor(Date.now() / 1000);
    const run = loaded.inst.call(() => loaded.core.start(body, endpoint, id, created, seed));
    return new LocalRun(this, loaded, run, signal);
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
    const run = await this.#start(endpoint, JSON.stringify(withJsonSchemas(req).body), opts?.signal);
    if (!run.stream) return run.result();
    const chunks = run.chunks();
    return { [Symbol.asyncIterator]: () => chunks };
  }

  async unload(): Promise<void> {
    if (this.#unloaded) return;
    this.#unloaded = true;
    for (const run of this.#runs) run.stop("unloaded");
    await this.#tail;
    await this.#restarting?.catch(() => {}); // a restart that ends now frees what it loaded
    const current = this.#current;
    this.#current = undefined;
    if (current?.inst.crash) forget(current.core);
    else current?.core.free();
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

/**
 * One load: a fresh wasm instance, the model read into it and parsed, and the backend chosen
 * (`want`). A crash during the load rejects with `engine_crashed`.
 */
async function loadModel(
  spec: LoadSpec & { want: "webgpu" | "cpu" | "auto" },
  { signal, report }: { signal?: AbortSignal; report?: (p: LoadProgress) => void },
): Promise<Loaded> {
  let wasm: Wasm;
  try {
    wasm = await instantiateWasm(spec.wasm);
  } catch (e) {
    throw toPootError(e);
  }
  const inst = new Instance(wasm);
  if (spec.limits !== undefined) {
    // Before the model is read: a bad option fails before a download.
    try {
      inst.call(() => wasm.checkLimits(spec.limits!));
    } catch (e) {
      throw inst.fromWasm(e);
    }
  }
  let from: LoadProgress["phase"] | undefined;
  const onProgress = (p: LoadProgress) => {
    from ??= p.phase;
    report?.(p);
  };
  let bytes: InstanceType<Wasm["ModelBytes"]>;
  try {
    ({ bytes } = await readModel(wasm, spec.model!, { onProgress, cache: spec.cache, signal }));
  } catch (e) {
    throw inst.crash ?? e;
  }
  const total = inst.call(() => bytes.length);
  if (signal?.aborted) {
    bytes.free();
    throw abortError(signal, "loading the model");
  }
  report?.({ phase: "parse", loaded: 0, total });
  const core = inst.call(() => wasm.LocalEngine.parse(bytes, spec.limits));
  try {
    report?.({ phase: "parse", loaded: total, total });
    if (spec.want !== "cpu") {
      if (!webgpuMissing()) report?.({ phase: "upload", loaded: 0, total });
      await inst.callAsync(() => core.selectBackend(spec.want) as Promise<void>);
    }
    const backend = JSON.parse(inst.call(() => core.backendInfo())) as BackendInfo;
    if (backend.kind === "webgpu") {
      report?.({ phase: "upload", loaded: total, total });
      if (!backend.adapter) backend.adapter = await describeAdapter();
    }
    // "auto" passed over a software adapter whose name wgpu could not read: name it here.
    const unnamed = "the only WebGPU adapter is a software one";
    if (backend.kind === "cpu" && backend.reason?.startsWith(unnamed)) {
      backend.reason = `the only WebGPU adapter (${await describeAdapter()}) is a software one${backend.reason.slice(unnamed.length)}`;
    }
    if (signal?.aborted) throw abortError(signal, "loading the model");
    const info = JSON.parse(inst.call(() => core.modelInfo())) as ModelInfo;
    return { inst, core, backend, info, from };
  } catch (e) {
    if (inst.crash) forget(core);
    else core.free();
    throw inst.fromWasm(e);
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

  let last: LoadProgress | undefined;
  const report = (p: LoadProgress) => {
    if (last && p.phase === last.phase && p.loaded <= last.loaded) return; // never backwards
    last = p;
    opts.onProgress?.(p);
  };
  const cache = opts.cache === false ? false : typeof opts.cache === "string" ? opts.cache : "poot-models";
  const recover = opts.recover !== false;
  const limits = limitsText(opts.limits);
  const spec: LoadSpec = { model: opts.model, cache, wasm: opts.wasm, recover, limits };
  const loaded = await loadModel({ ...spec, want }, { signal: opts.signal, report });
  // Without recovery, nothing keeps the model's bytes (or Blob) alive.
  if (!recover) spec.model = undefined;
  return new EngineImpl(loaded, spec, { onCrash: opts.onCrash, onRecover: opts.onRecover });
}
