// `poot/remote`: structured output from OpenAI-compatible endpoints. Plain TypeScript with no
// static import of the wasm module: importing this costs no wasm download (the grammar rung loads
// its converter lazily, and only when it is reached).

export { createRemoteClient, formatDoctor, forgetProbes, MAX_REASKS, UNPROBED_RETRY_MS } from "./client.js";
export type {
  ChatRequest,
  ChatResult,
  DoctorReport,
  RemoteClient,
  RemoteClientOptions,
  StructuredRequest,
  StructuredPartial,
  StructuredResult,
  ToolCallResult,
  ToolDefinition,
} from "./client.js";
export { directoryCache, indexedDBCache, localStorageCache } from "./cache.js";
export type { CapabilityCache } from "./cache.js";
export { PROBE_MAX_TOKENS, PROBE_PROMPT, PROBE_SCHEMA, PROBE_TIMEOUT_MS, probeBody, runProbe, zeroCapabilities } from "./capabilities.js";
export type { Capabilities, CandidateResult, Demotion, Verdict } from "./capabilities.js";
export { classifyResponse, classifyThrown, demotionOf, isDemotion, RemoteError, retryAfterMs } from "./classify.js";
export type { ErrorClass } from "./classify.js";
export { JSON_STOP_SEQUENCES, jsonInstruction, normalizeDecoding } from "./decoding.js";
export type { ChatMessage, StructuredDecoding } from "./decoding.js";
export { GbnfUnavailableError, wasmGbnf } from "./gbnf.js";
export type { GbnfConverter } from "./gbnf.js";
export { FIELDS, MECHANISMS, RANK, wireFields } from "./mechanism.js";
export type { Mechanism } from "./mechanism.js";
export { portable } from "./portable.js";
export type { Portability, PortabilityIssue } from "./portable.js";
export { detectProvider, PRESETS, PROVIDERS } from "./presets.js";
export type { Prior, Provider } from "./presets.js";
export { coerce, RefusalError, repair, RepairError, RUNGS, Stats, TruncatedError } from "./repair.js";
export type { Outcome, RepairOptions, Repaired, Rung } from "./repair.js";
export type { Usage } from "./transport.js";
export { backoffMs, DEFAULT_RETRY, SYSTEM_CLOCK, withRetry } from "./retry.js";
export type { Clock, RetryEvent, RetryPolicy } from "./retry.js";
export { isValid, validate } from "./schema.js";
export type { Json, JsonSchema, SchemaIssue } from "./schema.js";
export { qualifiesForStrict, stripAddedNulls, toStrict } from "./strict.js";
export { firstToolCall, parseTextToolCalls } from "./tools.js";
export type { TextToolCalls, ToolCall } from "./tools.js";
