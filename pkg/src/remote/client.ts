// The remote client: negotiates the strongest constrained-decoding mechanism an OpenAI-compatible
// endpoint really enforces, walks down the ladder when the server refuses a field at request time,
// retries sanely, and repairs what still comes back broken.
//
//   structured(request)
//     -> capabilities (probe, memoised per (provider, endpoint, model); off/tools -> prompt_only)
//     -> for each mechanism on the ladder: send (retry policy); a permanent 4xx demotes
//        it for the key and the next rung is tried; any other failure is returned as it is
//     -> repair(content, schema) -> { value, mechanism, rung, attempts, raw }

import { PootError } from "../errors.js";
import type { CapabilityCache } from "./cache.js";
import { directoryCache } from "./cache.js";
import { runProbe, whySelected, zeroCapabilities, PROBE_TIMEOUT_MS } from "./capabilities.js";
import type { Capabilities } from "./capabilities.js";
import { portable, type Portability } from "./portable.js";
import { parsePartialJson } from "../partial.js";
import { demotionOf, isDemotion, isStrictRefusal, RemoteError } from "./classify.js";
import { jsonInstruction, normalizeDecoding, stopSequences, withInstruction } from "./decoding.js";
import type { ChatMessage, StructuredDecoding } from "./decoding.js";
import { GbnfUnavailableError, wasmGbnf } from "./gbnf.js";
import type { GbnfConverter } from "./gbnf.js";
import { wireFields } from "./mechanism.js";
import type { Mechanism } from "./mechanism.js";
import { detectProvider, PROVIDERS } from "./presets.js";
import type { Provider } from "./presets.js";
import { RefusalError, repair, Stats, TruncatedError, RepairError } from "./repair.js";
import type { Rung } from "./repair.js";
import { retryPolicy, SYSTEM_CLOCK, withRetry } from "./retry.js";
import type { Clock, RetryEvent, RetryPolicy } from "./retry.js";
import type { JsonSchema } from "./schema.js";
import { isStandardSchema, toJsonSchema, type Infer, type StandardSchemaV1 } from "../typed.js";
import { validate, describeIssue } from "./schema.js";
import { qualifiesForStrict, stripAddedNulls, toStrict } from "./strict.js";
import { firstToolCall, parseTextToolCalls } from "./tools.js";
import type { ToolCall } from "./tools.js";
import { getJson, sendChat } from "./transport.js";
import type { Completion, Usage } from "./transport.js";

/** Options of {@link createRemoteClient}. */
export interface RemoteClientOptions {
  /** The OpenAI-compatible base URL, e.g. `http://127.0.0.1:8080/v1` (requests go to `{baseURL}/chat/completions`). */
  baseURL: string;
  apiKey?: string;
  model: string;
  /** A preset for the priors; `auto` (default) recognises OpenAI and Azure hosts, else `generic`. */
  provider?: Provider | "auto";
  /** `auto` (default) negotiates; `off` (or none, false, 0, prompt, prompt-only) forces prompt-only JSON. */
  structuredDecoding?: StructuredDecoding | string | boolean;
  /** Persistent probe results: a CapabilityCache, or (Node) a directory for `capabilities.json`. */
  cache?: CapabilityCache | string;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** Retry policy overrides (default 3 attempts, 500 ms base, 20 s ceiling). */
  retry?: Partial<RetryPolicy>;
  /** Per-request time limit in ms (default 120000); probe requests are also held to the probe's 20 s. */
  timeoutMs?: number;
  /** The whole probe's time limit in ms (default 20000). */
  probeTimeoutMs?: number;
  /** Schema -> GBNF for the grammar rung (default: the wasm module's schemaToGbnf, loaded lazily). */
  gbnf?: GbnfConverter;
  /** Time and randomness (tests). */
  clock?: Partial<Clock>;
  /** Extra request headers. */
  headers?: Record<string, string>;
  /** Where repair outcomes are counted (default: a new Stats, exposed as `client.stats`). */
  stats?: Stats;
  /** Called before each retry wait. */
  onRetry?: (event: RetryEvent) => void;
}

/** An OpenAI-shaped tool definition. */
export interface ToolDefinition {
  type: "function";
  function: { name: string; description?: string; parameters?: JsonSchema; [field: string]: unknown };
}

/** A structured request. */
export interface StructuredRequest {
  messages: readonly ChatMessage[];
  /**
   * A JSON Schema, or a Standard Schema (Zod 4, ArkType, Valibot with toStandardJsonSchema):
   * converted by its library, the result then also validated by it and typed by it.
   */
  schema: JsonSchema | StandardSchemaV1;
  /** The schema's name on the wire (json_schema.name): letters, digits, _ and -, up to 64. */
  name?: string;
  maxTokens?: number;
  temperature?: number;
  stop?: string | readonly string[];
  /** Tools: the request then carries no constrained decoding (the model needs room for a call). */
  tools?: readonly ToolDefinition[];
  toolChoice?: unknown;
  /** Ask for a server-sent-event stream (assembled before repair). */
  stream?: boolean;
  signal?: AbortSignal;
  /**
   * Follow-up requests after an output that no repair makes valid (a RepairError): the reply
   * and what was wrong with it go back as two more messages, and the model is asked again
   * (default 0, at most 5). Not after a TruncatedError: the same max_tokens would cut it again.
   */
  maxRetries?: number;
}

/** A structured answer. */
export interface StructuredResult<T = unknown> {
  value: T;
  /** The mechanism the answering request used. */
  mechanism: Mechanism;
  /** The repair rung that produced the value (`none` when it arrived valid). */
  rung: Rung;
  /** HTTP requests made for this call (retries and demotions included). */
  attempts: number;
  /** The model's text as it arrived. */
  raw: string;
  finishReason: string | null;
  /** Follow-up requests that fed an invalid output back before this answer (`maxRetries`). */
  reasks: number;
  /**
   * The schema's constructs outside the portable subset ({@link portable}): they constrain on
   * some servers and silently not on others. Reported the first time this client sees the
   * schema, empty after.
   */
  warnings: string[];
  /** The answering response's id, and its token counts when the server sent them. */
  id: string | null;
  usage: Usage | null;
  toolCall?: undefined;
}

/** The model called a tool instead of answering (requests with tools only). */
export interface ToolCallResult {
  value: undefined;
  toolCall: ToolCall;
  mechanism: "prompt_only";
  rung: null;
  attempts: number;
  raw: string;
  finishReason: string | null;
}

/** A plain chat request (the ordinary provider path). */
export interface ChatRequest {
  messages: readonly ChatMessage[];
  tools?: readonly ToolDefinition[];
  toolChoice?: unknown;
  maxTokens?: number;
  temperature?: number;
  stop?: string | readonly string[];
  stream?: boolean;
  signal?: AbortSignal;
}

/** A plain chat answer: at most one tool call (one per turn), text calls parsed. */
export interface ChatResult {
  content: string;
  toolCalls: ToolCall[];
  finishReason: string | null;
  attempts: number;
  body: unknown;
}

/** The candidates and verdicts of {@link RemoteClient.doctor}. */
export interface DoctorReport {
  provider: Provider;
  model: string;
  endpoint: string;
  structuredDecoding: StructuredDecoding;
  reachable: boolean;
  /** What the reachability check saw (GET {endpoint}/models). */
  reachability: string;
  /** Model ids the endpoint lists, when it does. */
  models: string[] | null;
  /** The mechanism a structured call would use first. */
  mechanism: Mechanism;
  why: string;
  ladder: Mechanism[];
  probed: boolean;
  strict: boolean;
  candidates: Capabilities["candidates"];
  demotions: Capabilities["demotions"];
  /** With a `schema` option: the constructs outside the portable subset. */
  portability?: Portability;
}

/** A client for one (endpoint, model). */
export interface RemoteClient {
  readonly provider: Provider;
  readonly endpoint: string;
  readonly model: string;
  readonly structuredDecoding: StructuredDecoding;
  readonly stats: Stats;
  structured<S extends StandardSchemaV1>(request: StructuredRequest & { schema: S; tools?: undefined }): Promise<StructuredResult<Infer<S>>>;
  structured<T = unknown>(request: StructuredRequest & { tools?: undefined }): Promise<StructuredResult<T>>;
  structured<T = unknown>(request: StructuredRequest): Promise<StructuredResult<T> | ToolCallResult>;
  chat(request: ChatRequest): Promise<ChatResult>;
  /**
   * `structured` over a stream: the value as it is being written (fields already written are
   * final within an attempt), then the result. Each HTTP attempt (a retry, the next rung of the
   * ladder, a re-ask) starts over: its items carry a higher `attempt`, and a consumer shows the
   * newest attempt's value.
   */
  streamStructured<S extends StandardSchemaV1>(request: StructuredRequest & { schema: S }): AsyncIterable<StructuredPartial<Infer<S>>>;
  streamStructured<T = unknown>(request: StructuredRequest): AsyncIterable<StructuredPartial<T>>;
  /** The endpoint's capabilities; never throws, never takes longer than the probe limit. */
  probe(options?: { signal?: AbortSignal; force?: boolean }): Promise<Capabilities>;
  /** What the endpoint enforces; with `schema`, also that schema's portability findings. */
  doctor(options?: { signal?: AbortSignal; force?: boolean; schema?: JsonSchema }): Promise<DoctorReport>;
}

// ---- the in-memory memo, shared by every client in this realm -----------------------------

/** Called as each HTTP attempt starts; what it returns hears that attempt's text as it grows. */
type OnAttempt = () => ((text: string) => void) | undefined;

/** One item of {@link RemoteClient.streamStructured}. */
export type StructuredPartial<T> =
  | { done: false; attempt: number; partial: unknown; text: string }
  | { done: true; attempt: number; result: StructuredResult<T> | ToolCallResult };

/** Runs `run` with a stream, turning each attempt's growing text into partial values. */
async function* streamStructured<T>(
  run: (request: StructuredRequest, onAttempt: OnAttempt) => Promise<StructuredResult<T> | ToolCallResult>,
  request: StructuredRequest,
): AsyncGenerator<StructuredPartial<T>, void, undefined> {
  const queue: StructuredPartial<T>[] = [];
  let wake: (() => void) | undefined;
  let attempt = 0;
  const push = (item: StructuredPartial<T>) => {
    queue.push(item);
    wake?.();
  };
  const onAttempt: OnAttempt = () => {
    const mine = ++attempt;
    let shown = "";
    return (text) => {
      let partial: unknown;
      try {
        partial = parsePartialJson(text);
      } catch {
        return; // not JSON (prose before it, a fence): repair reads it at the end
      }
      const key = JSON.stringify(partial) ?? "";
      if (partial === undefined || key === shown) return;
      shown = key;
      push({ done: false, attempt: mine, partial, text });
    };
  };
  let failed: { error: unknown } | undefined;
  let finished = false;
  run({ ...request, stream: true }, onAttempt).then(
    (result) => push({ done: true, attempt, result }),
    (error) => {
      failed = { error };
      wake?.();
    },
  ).finally(() => {
    finished = true;
    wake?.();
  });
  for (;;) {
    const item = queue.shift();
    if (item) {
      yield item;
      if (item.done) return;
      continue;
    }
    if (failed) throw failed.error;
    if (finished && queue.length === 0) return;
    await new Promise<void>((resolve) => (wake = resolve));
    wake = undefined;
  }
}

/** Most follow-up requests one `structured` call may make (`maxRetries`). */
export const MAX_REASKS = 5;

/** The follow-up message after an output no repair made valid: what was wrong, and the ask. */
function reaskMessage(error: RepairError): string {
  const what = error.issues.length > 0 ? error.issues.map((i) => `- ${i}`).join("\n") : `- ${error.message}`;
  return `That reply is not valid JSON for the schema:\n${what}\nReply again with only the corrected JSON.`;
}

/** How long an inconclusive probe (unreachable, cold) is remembered before probing again. */
export const UNPROBED_RETRY_MS = 30_000;

interface MemoEntry {
  caps?: Capabilities;
  pending?: Promise<Capabilities>;
  expires: number;
}
const memo = new Map<string, MemoEntry>();

/** Forgets every memoised probe in this realm (persistent caches are untouched). */
export function forgetProbes(): void {
  memo.clear();
}

function invalid(message: string, param: string): PootError {
  return new PootError(message, { status: 400, code: "invalid_option", param });
}

function normalizeEndpoint(baseURL: unknown): string {
  if (typeof baseURL !== "string") throw invalid(`baseURL must be an absolute http(s) URL, got ${JSON.stringify(baseURL)}`, "baseURL");
  let url: URL;
  try {
    url = new URL(baseURL);
  } catch {
    throw invalid(`baseURL must be an absolute http(s) URL, got ${JSON.stringify(baseURL)}`, "baseURL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw invalid(`baseURL must be an absolute http(s) URL, got ${JSON.stringify(baseURL)}`, "baseURL");
  }
  url.pathname = url.pathname.replace(/\/+$/, "");
  return url.toString().replace(/\/(\?|$)/, "$1");
}

/** `{endpoint}/{path}` keeping the endpoint's query (Azure's api-version). */
function join(endpoint: string, path: string): string {
  const url = new URL(endpoint);
  url.pathname = `${url.pathname.replace(/\/+$/, "")}/${path}`;
  return url.toString();
}

/** Resolves with `promise`, or with `fallback()` when `signal` aborts first. */
function raceSignal<T>(promise: Promise<T>, signal: AbortSignal | undefined, fallback: () => T): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.resolve(fallback());
  return new Promise((resolve) => {
    const onAbort = () => resolve(fallback());
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      () => {
        signal.removeEventListener("abort", onAbort);
        resolve(fallback());
      },
    );
  });
}

/** Creates a client; validates the options (PootError `invalid_option` naming the field). */
export function createRemoteClient(options: RemoteClientOptions): RemoteClient {
  const endpoint = normalizeEndpoint(options.baseURL);
  if (typeof options.model !== "string" || options.model.trim() === "") {
    throw invalid(`model must be a non-empty string, got ${JSON.stringify(options.model)}`, "model");
  }
  const model = options.model;
  const requested = options.provider ?? "auto";
  if (requested !== "auto" && !PROVIDERS.includes(requested)) {
    throw invalid(`provider must be one of auto, ${PROVIDERS.join(", ")}, got ${JSON.stringify(requested)}`, "provider");
  }
  const provider: Provider = requested === "auto" ? detectProvider(endpoint) : requested;
  const structuredDecoding = normalizeDecoding(options.structuredDecoding);
  const timeoutMs = options.timeoutMs ?? 120_000;
  const probeTimeoutMs = options.probeTimeoutMs ?? PROBE_TIMEOUT_MS;
  for (const [field, value] of [["timeoutMs", timeoutMs], ["probeTimeoutMs", probeTimeoutMs]] as const) {
    if (!Number.isFinite(value) || value <= 0) throw invalid(`${field} must be a positive number of milliseconds, got ${String(value)}`, field);
  }
  let policy: RetryPolicy;
  try {
    policy = retryPolicy(options.retry);
  } catch (error) {
    throw invalid((error as Error).message, "retry");
  }
  const cache: CapabilityCache | undefined = typeof options.cache === "string" ? directoryCache(options.cache) : options.cache;
  const fetcher: typeof fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const clock: Clock = { ...SYSTEM_CLOCK, ...options.clock };
  const gbnf = options.gbnf ?? wasmGbnf;
  const stats = options.stats ?? new Stats();
  const headers: Record<string, string> = { ...options.headers };
  if (options.apiKey) {
    headers.authorization = `Bearer ${options.apiKey}`;
    if (provider === "azure") headers["api-key"] = options.apiKey;
  }
  const key = `${provider}|${endpoint}|${model}`;
  const chatURL = join(endpoint, "chat/completions");

  /** One request through the retry policy; `counter` counts HTTP attempts. */
  const send = (
    body: Record<string, unknown>,
    sent: Mechanism,
    counter: { attempts: number },
    signal?: AbortSignal,
    deadline?: number,
    onAttempt?: () => ((text: string) => void) | undefined,
  ): Promise<Completion> =>
    withRetry(
      () =>
        sendChat({
          fetch: fetcher,
          url: chatURL,
          headers,
          body,
          signal,
          timeoutMs: deadline === undefined ? timeoutMs : Math.max(1, Math.min(timeoutMs, deadline - clock.now())),
          now: clock.now,
          sent,
          onText: onAttempt?.(),
        }),
      { policy, clock, signal, deadline, onRetry: options.onRetry, counter },
    );

  /** A GBNF grammar, or the reason there is none; a converter that hangs counts as none. */
  const grammarFor = async (schema: JsonSchema, limitMs: number): Promise<string> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new GbnfUnavailableError(`the GBNF converter took longer than ${limitMs} ms`)), limitMs);
    });
    try {
      const grammar = await Promise.race([gbnf(schema), timeout]);
      if (typeof grammar !== "string" || grammar.trim() === "") throw new GbnfUnavailableError("the GBNF converter returned no grammar");
      return grammar;
    } finally {
      clearTimeout(timer);
    }
  };

  const fresh = async (force: boolean): Promise<Capabilities> => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    // The limit covers the cache too: a pluggable cache that never answers must not hold the probe.
    const limit = new Promise<Capabilities>((resolve) => {
      timer = setTimeout(() => {
        controller.abort(new Error("probe time limit"));
        resolve(zeroCapabilities(provider, endpoint, model, `the probe did not finish within ${probeTimeoutMs} ms: prompt-only JSON with repair`));
      }, probeTimeoutMs);
    });
    if (!force && cache) {
      const stored = await Promise.race([cache.get(key).catch(() => undefined), limit]);
      if (controller.signal.aborted) return limit;
      if (stored && stored.probed && Array.isArray(stored.ladder) && stored.ladder.at(-1) === "prompt_only") {
        clearTimeout(timer);
        return stored;
      }
    }
    const started = clock.now();
    const probing = runProbe({
      provider,
      endpoint,
      model,
      timeoutMs: probeTimeoutMs,
      now: clock.now,
      gbnf: (schema) => grammarFor(schema, Math.max(1, probeTimeoutMs - (clock.now() - started))),
      send: (body, mechanism, deadline) => send(body, mechanism, { attempts: 0 }, controller.signal, deadline),
    }).catch((error: unknown) => zeroCapabilities(provider, endpoint, model, `the probe failed unexpectedly: ${(error as Error).message}`));
    const caps = await Promise.race([probing, limit]);
    if (caps.probed && cache) await Promise.race([cache.set(key, caps).catch(() => undefined), limit]);
    clearTimeout(timer);
    return caps;
  };

  const probe = (opts: { signal?: AbortSignal; force?: boolean } = {}): Promise<Capabilities> => {
    if (opts.signal?.aborted) return Promise.resolve(zeroCapabilities(provider, endpoint, model, "the probe was canceled"));
    const entry = memo.get(key);
    const now = clock.now();
    const store = (caps: Capabilities) => {
      memo.set(key, { caps, expires: caps.probed ? Number.POSITIVE_INFINITY : clock.now() + UNPROBED_RETRY_MS });
      return caps;
    };
    if (!opts.force && entry) {
      if (entry.caps && now < entry.expires) return Promise.resolve(entry.caps);
      if (entry.caps) {
        // An inconclusive probe, due again: probed in the background, never on a caller's path
        // a second time; callers go on with what the first one found meanwhile.
        if (!entry.pending) memo.set(key, { ...entry, pending: fresh(false).then(store) });
        return Promise.resolve(entry.caps);
      }
      if (entry.pending) return raceSignal(entry.pending, opts.signal, () => zeroCapabilities(provider, endpoint, model, "the probe was canceled"));
    }
    const pending = fresh(opts.force === true).then(store);
    memo.set(key, { pending, expires: 0 });
    return raceSignal(pending, opts.signal, () => zeroCapabilities(provider, endpoint, model, "the probe was canceled"));
  };

  const update = async (change: (caps: Capabilities) => Capabilities): Promise<void> => {
    const current = memo.get(key)?.caps;
    if (!current) return;
    const next = change(current);
    next.why = whySelected(next);
    memo.set(key, { caps: next, expires: Number.POSITIVE_INFINITY });
    if (next.probed && cache) await cache.set(key, next).catch(() => undefined);
  };

  const demote = (mechanism: Mechanism, reason: string) =>
    update((caps) => ({
      ...caps,
      ladder: caps.ladder.filter((m) => m !== mechanism),
      demotions: [...caps.demotions, { mechanism, reason, at: clock.now() }],
    }));

  const validateMessages = (messages: unknown) => {
    if (!Array.isArray(messages) || messages.length === 0) {
      throw invalid("messages must be a non-empty array of chat messages", "messages");
    }
  };

  const baseBody = (request: ChatRequest, messages: ChatMessage[], jsonOnly: boolean): Record<string, unknown> => {
    const body: Record<string, unknown> = { model, messages };
    if (request.maxTokens !== undefined) body.max_tokens = request.maxTokens;
    if (request.temperature !== undefined) body.temperature = request.temperature;
    const stop = stopSequences(request.stop, jsonOnly);
    if (stop) body.stop = stop;
    if (request.tools && request.tools.length > 0) {
      body.tools = request.tools;
      if (request.toolChoice !== undefined) body.tool_choice = request.toolChoice;
    }
    if (request.stream) body.stream = true;
    return body;
  };

  /** Tool calls from a completion: native ones, else ones written as text; one per turn. */
  const toolCallsOf = (completion: Completion, tools: readonly ToolDefinition[] | undefined) => {
    if (!tools || tools.length === 0) return { toolCalls: [] as ToolCall[], content: completion.content };
    if (completion.toolCalls.length > 0) return { toolCalls: firstToolCall(completion.toolCalls), content: completion.content };
    const parsed = parseTextToolCalls(
      completion.content,
      tools.map((t) => t.function.name),
    );
    return { toolCalls: firstToolCall(parsed.toolCalls), content: parsed.content };
  };

  /** Schemas whose portability this client has reported (their JSON text). */
  const reported = new Set<string>();
  const portabilityWarnings = (schema: JsonSchema): string[] => {
    const key = JSON.stringify(schema);
    if (reported.has(key)) return [];
    reported.add(key);
    return portable(schema).issues.map((i) => `schema ${i.path}: ${i.message} (outside the portable subset: some servers do not enforce it)`);
  };

  async function structured<T>(request: StructuredRequest, onAttempt?: OnAttempt): Promise<StructuredResult<T> | ToolCallResult> {
    validateMessages(request.messages);
    const standard = isStandardSchema(request.schema) ? request.schema : undefined;
    const schema = standard ? toJsonSchema(standard, "schema") : (request.schema as JsonSchema);
    if (typeof schema !== "boolean" && (typeof schema !== "object" || schema === null || Array.isArray(schema))) {
      throw invalid("schema must be a JSON Schema (an object or a boolean)", "schema");
    }
    const name = request.name ?? "output";
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
      throw invalid(`name must be 1 to 64 letters, digits, _ or -, got ${JSON.stringify(name)}`, "name");
    }
    const hasTools = request.tools !== undefined && request.tools.length > 0;
    // No constrained decoding with tools: the model needs room to emit a tool call.
    const ladder: Mechanism[] =
      structuredDecoding === "off" || hasTools ? ["prompt_only"] : [...(await probe({ signal: request.signal })).ladder];
    if (request.signal?.aborted) {
      throw new RemoteError(`the request to ${chatURL} was canceled`, { kind: "canceled", cause: request.signal.reason });
    }

    // strict only for schemas that qualify; OpenAI/Azure get optional -> required + nullable.
    let wireSchema = schema;
    let strict = qualifiesForStrict(schema);
    let transformed = false;
    if (!strict && (provider === "openai" || provider === "azure")) {
      const converted = toStrict(schema);
      if (converted !== null) {
        wireSchema = converted;
        strict = true;
        transformed = true;
      }
    }
    const messages = hasTools ? [...request.messages] : withInstruction(request.messages, jsonInstruction(schema));
    const counter = { attempts: 0 };
    let strictAccepted = memo.get(key)?.caps?.strict ?? true;

    for (let i = 0; i < ladder.length; i++) {
      const mechanism = ladder[i]!;
      let grammar: string | undefined;
      if (mechanism === "gbnf_grammar") {
        try {
          grammar = await grammarFor(wireSchema, timeoutMs);
        } catch {
          continue; // this schema has no grammar: the next rung, without demoting the mechanism
        }
      }
      const useStrict = strict && strictAccepted;
      const body = {
        ...baseBody(request, messages, !hasTools),
        ...wireFields(mechanism, { schema: wireSchema, name, strict: useStrict, grammar }),
      };
      let completion: Completion;
      try {
        completion = await send(body, mechanism, counter, request.signal, undefined, onAttempt);
      } catch (error) {
        if (!(error instanceof RemoteError)) throw error;
        error.attempts = counter.attempts;
        if (mechanism === "json_schema" && useStrict && isStrictRefusal(error) && isDemotion(error, mechanism)) {
          // The server has json_schema but not strict mode: the same rung again, without strict.
          strictAccepted = false;
          await update((caps) => ({ ...caps, strict: false }));
          i--;
          continue;
        }
        const demotion = demotionOf(error, mechanism);
        if (demotion === "remembered") await demote(mechanism, error.message);
        if (demotion !== null) continue;
        throw error;
      }
      if (completion.refusal !== null && completion.toolCalls.length === 0) throw new RefusalError(completion.refusal);
      const { toolCalls, content } = toolCallsOf(completion, request.tools);
      if (toolCalls.length > 0) {
        return {
          value: undefined,
          toolCall: toolCalls[0]!,
          mechanism: "prompt_only",
          rung: null,
          attempts: counter.attempts,
          raw: completion.content,
          finishReason: completion.finishReason,
        };
      }
      const repaired = repair(content, { schema: wireSchema, finishReason: completion.finishReason });
      let value = repaired.value;
      if (transformed) {
        value = stripAddedNulls(value, schema);
        const issues = validate(schema, value);
        if (issues.length > 0) {
          throw new RepairError(`the output does not match the schema: ${issues.map(describeIssue).join("; ")}`, content, issues.map(describeIssue));
        }
      }
      if (standard) {
        // What its JSON Schema cannot say (a refinement), and the library's own output.
        const checked = await standard["~standard"].validate(value);
        if (checked.issues) {
          const issues = checked.issues.map((i) => i.message);
          throw new RepairError(`the output does not pass the schema's own validation: ${issues.join("; ")}`, content, issues);
        }
        value = checked.value;
      }
      stats.record(repaired.rung);
      return {
        value: value as T,
        mechanism,
        rung: repaired.rung,
        attempts: counter.attempts,
        raw: completion.content,
        finishReason: completion.finishReason,
        reasks: 0,
        warnings: portabilityWarnings(schema),
        id: completion.id,
        usage: completion.usage,
      };
    }
    // Unreachable: prompt_only ends every ladder and never demotes.
    throw new PootError("the structured-output ladder is empty", { status: 500, code: "internal_error" });
  }

  const structuredCounted = async <T>(request: StructuredRequest, onAttempt?: OnAttempt) => {
    const retries = request.maxRetries ?? 0;
    if (!Number.isInteger(retries) || retries < 0 || retries > MAX_REASKS) {
      throw invalid(`maxRetries must be an integer from 0 to ${MAX_REASKS}, got ${String(retries)}`, "maxRetries");
    }
    let messages = request.messages;
    for (let reasks = 0; ; reasks++) {
      try {
        const result = await structured<T>({ ...request, messages }, onAttempt);
        if (reasks > 0) stats.recordReask(true);
        return result.toolCall ? result : { ...result, reasks };
      } catch (error) {
        if (error instanceof TruncatedError) stats.record("truncated");
        else if (error instanceof RepairError) stats.record("failed");
        if (reasks > 0 && error instanceof RepairError) stats.recordReask(false);
        if (!(error instanceof RepairError) || reasks >= retries) throw error;
        messages = [...request.messages, { role: "assistant", content: error.raw }, { role: "user", content: reaskMessage(error) }];
      }
    }
  };

  async function chat(request: ChatRequest): Promise<ChatResult> {
    validateMessages(request.messages);
    const counter = { attempts: 0 };
    let completion: Completion;
    try {
      completion = await send(baseBody(request, [...request.messages], false), "prompt_only", counter, request.signal);
    } catch (error) {
      if (error instanceof RemoteError) error.attempts = counter.attempts;
      throw error;
    }
    const { toolCalls, content } = toolCallsOf(completion, request.tools);
    return { content, toolCalls, finishReason: completion.finishReason, attempts: counter.attempts, body: completion.body };
  }

  async function doctor(opts: { signal?: AbortSignal; force?: boolean; schema?: JsonSchema } = {}): Promise<DoctorReport> {
    const started = clock.now();
    const seen = await getJson(fetcher, join(endpoint, "models"), headers, Math.min(timeoutMs, 10_000), opts.signal);
    const ms = Math.max(0, Math.round(clock.now() - started));
    const data = (seen.body as { data?: unknown } | null)?.data;
    const models = Array.isArray(data) ? data.map((m) => (m && typeof m === "object" ? String((m as { id?: unknown }).id) : String(m))) : null;
    const reachable = seen.status !== 0;
    const reachability =
      seen.status === 0
        ? `unreachable: ${seen.error}`
        : seen.error === null
          ? `GET /models answered ${seen.status} in ${ms} ms`
          : `GET /models answered ${seen.error} in ${ms} ms`;
    const caps = await probe(opts);
    const off = structuredDecoding === "off";
    return {
      provider,
      model,
      endpoint,
      structuredDecoding,
      reachable,
      reachability,
      models,
      mechanism: off ? "prompt_only" : caps.ladder[0] ?? "prompt_only",
      why: off ? "structured_decoding is off: prompt-only JSON with repair" : caps.why,
      ladder: off ? ["prompt_only"] : caps.ladder,
      probed: caps.probed,
      strict: caps.strict,
      candidates: caps.candidates,
      demotions: caps.demotions,
      ...(opts.schema === undefined ? {} : { portability: portable(opts.schema) }),
    };
  }

  return {
    provider,
    endpoint,
    model,
    structuredDecoding,
    stats,
    structured: ((request: StructuredRequest) => structuredCounted(request)) as RemoteClient["structured"],
    streamStructured: ((request: StructuredRequest) => streamStructured(structuredCounted, request)) as RemoteClient["streamStructured"],
    chat,
    probe,
    doctor,
  };
}

/** The doctor report as the text `npx poot doctor` prints. */
export function formatDoctor(report: DoctorReport): string {
  const rows: [string, string][] = [
    ["provider", report.provider],
    ["model", report.model],
    ["endpoint", report.endpoint],
    ["reachable", `${report.reachable ? "yes" : "no"} (${report.reachability})`],
  ];
  if (report.models) rows.push(["serves", report.models.join(", ") || "(none listed)"]);
  rows.push(
    ["structured", report.structuredDecoding],
    ["mechanism", report.mechanism],
    ["why", report.why],
    ["ladder", report.ladder.join(" > ")],
    ["probed", report.probed ? "yes" : "no (the prior is a hint, not trusted)"],
  );
  const lines = rows.map(([k, v]) => `${k.padEnd(11)}${v}`);
  if (report.candidates.length > 0) {
    lines.push("candidates");
    for (const c of report.candidates) lines.push(`  ${c.mechanism.padEnd(19)}${c.verdict.padEnd(11)}${c.detail}`);
  }
  for (const d of report.demotions) lines.push(`demoted    ${d.mechanism} at request time: ${d.reason}`);
  if (report.portability) {
    lines.push(`portable   ${report.portability.portable ? "yes: every construct constrains on every local server" : "no"}`);
    for (const i of report.portability.issues) lines.push(`  ${i.path} ${i.keyword}: ${i.message}`);
  }
  return lines.join("\n") + "\n";
}
