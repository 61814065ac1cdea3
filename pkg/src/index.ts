export { loadWasm } from "./wasm.js";
export type { Wasm, WasmSource } from "./wasm.js";
export { PootError, toPootError } from "./errors.js";
export { applyTokenMask, webgpuAdapter } from "./tokenMask.js";
export type { Backend, AdapterInfo } from "./tokenMask.js";
export { createRemoteClient, portable, RefusalError, repair, RemoteError, RepairError, Stats, TruncatedError } from "./remote/index.js";
export type {
  Capabilities,
  Mechanism,
  Provider,
  RemoteClient,
  RemoteClientOptions,
  Rung,
  StructuredRequest,
  StructuredResult,
} from "./remote/index.js";
export { compileConstraint, loadVocabulary } from "./constraint.js";
export type { CompileConstraintOptions, ConstraintMatcher, ConstraintRequest, ConstraintVocabulary, VocabularySource } from "./constraint.js";
export { createEngine } from "./engine.js";
export type { BackendInfo, ChatCompletions, Completions, CrashEvent, Engine, EngineOptions, LoadProgress, ModelSource, RecoverEvent, TypedJsonSchemaFormat } from "./engine.js";
export { isStandardSchema, toJsonSchema } from "./typed.js";
export type { Infer, PartialParse, StandardJSONSchemaV1, StandardSchemaV1 } from "./typed.js";
export { parsePartialJson } from "./partial.js";
export type * from "./types.js";
export { createWorkerEngine, serveEngine } from "./worker.js";
export type { SerializedError, WorkerEngineOptions, WorkerLike, WorkerLoadOptions, WorkerReply, WorkerRequest, WorkerScope } from "./worker.js";
