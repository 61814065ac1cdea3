// Type-level test: the package's OpenAI shapes against the `openai` package's own types
// (compiled by `tsc -p test/types`, nothing runs). The contract:
// - requests: every `openai` request is one of ours (so `engine.chat.completions.create(req)`
//   takes what an OpenAI user already has), with the overloads picking the right result;
// - responses: every response and chunk of ours is `openai`'s (so code written for the
//   `openai` client reads ours), except completion chunks (see below);
// - `engine.fetch` is a fetch the `openai` client accepts, and compileConstraint takes an
//   `openai` request as it is.
// The other directions do not hold, by design; each is pinned with @ts-expect-error, so a
// change that makes one hold (or breaks one above) fails this file.
import OpenAI from "openai";
import type {
  ChatCompletion as OAChatCompletion,
  ChatCompletionChunk as OAChatCompletionChunk,
  ChatCompletionCreateParams as OAChatParams,
  ChatCompletionCreateParamsNonStreaming as OAChatParamsNonStreaming,
  ChatCompletionCreateParamsStreaming as OAChatParamsStreaming,
} from "openai/resources/chat/completions";
import type {
  Completion as OACompletion,
  CompletionCreateParams as OACompletionParams,
  CompletionCreateParamsNonStreaming as OACompletionParamsNonStreaming,
  CompletionCreateParamsStreaming as OACompletionParamsStreaming,
} from "openai/resources/completions";
import type { Model as OAModel } from "openai/resources/models";

import {
  compileConstraint,
  createEngine,
  createWorkerEngine,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatCompletionCreateParams,
  type ChatCompletionCreateParamsNonStreaming,
  type ChatCompletionCreateParamsStreaming,
  type Completion,
  type CompletionChunk,
  type CompletionCreateParams,
  type CompletionCreateParamsNonStreaming,
  type CompletionCreateParamsStreaming,
  type Engine,
  type ModelObject,
} from "../../src/index.js";

/** `true` when every `From` is a `To`. */
type Assignable<From, To> = [From] extends [To] ? true : false;
/** Compiles only for `true`. */
function holds<T extends true>(): T | void {}

// Requests: openai's are ours.
holds<Assignable<OAChatParams, ChatCompletionCreateParams>>();
holds<Assignable<OAChatParamsNonStreaming, ChatCompletionCreateParamsNonStreaming>>();
holds<Assignable<OAChatParamsStreaming, ChatCompletionCreateParamsStreaming>>();
holds<Assignable<OACompletionParams, CompletionCreateParams>>();
holds<Assignable<OACompletionParamsNonStreaming, CompletionCreateParamsNonStreaming>>();
holds<Assignable<OACompletionParamsStreaming, CompletionCreateParamsStreaming>>();
// Not the other way: `model` is optional here (one model is loaded) and the guided_* fields
// are not openai's.
// @ts-expect-error
holds<Assignable<ChatCompletionCreateParams, OAChatParams>>();
// @ts-expect-error
holds<Assignable<CompletionCreateParams, OACompletionParams>>();

// Responses: ours are openai's.
holds<Assignable<ChatCompletion, OAChatCompletion>>();
holds<Assignable<ChatCompletionChunk, OAChatCompletionChunk>>();
holds<Assignable<Completion, OACompletion>>();
holds<Assignable<ModelObject, OAModel>>();
// openai types completion stream items as `Completion`, whose finish_reason is never null;
// on the wire (and here) it is null until a choice's last chunk.
// @ts-expect-error
holds<Assignable<CompletionChunk, OACompletion>>();
// Not the other way: openai's carry fields poot never sends (annotations, audio, custom tool
// calls, service_tier) and leave `usage` optional.
// @ts-expect-error
holds<Assignable<OAChatCompletion, ChatCompletion>>();
// @ts-expect-error
holds<Assignable<OACompletion, Completion>>();

// In use: an openai request into the engine, with the overloads' results.
declare const engine: Engine;
declare const chatReq: OAChatParamsNonStreaming;
declare const chatStreamReq: OAChatParamsStreaming;
declare const completionReq: OACompletionParamsNonStreaming;
declare const completionStreamReq: OACompletionParamsStreaming;
async function useEngine(): Promise<void> {
  const reply: OAChatCompletion = await engine.chat.completions.create(chatReq);
  const stream: AsyncIterable<OAChatCompletionChunk> = await engine.chat.completions.create(chatStreamReq);
  const text: OACompletion = await engine.completions.create(completionReq);
  const chunks: AsyncIterable<CompletionChunk> = await engine.completions.create(completionStreamReq);
  const guided: ChatCompletion = await engine.chat.completions.create(
    { messages: [{ role: "user", content: "hi" }], guided_json: { type: "object" }, max_tokens: 8 },
    { signal: AbortSignal.timeout(1000) },
  );
  void [reply, stream, text, chunks, guided];

  // engine.fetch is a fetch the openai client takes.
  const client = new OpenAI({ apiKey: "local", baseURL: "http://poot.local/v1", fetch: engine.fetch });
  const viaClient: OAChatCompletion = await client.chat.completions.create({ model: engine.model.id, messages: [] });
  void viaClient;

  // compileConstraint takes an openai request as it is.
  const matcher = await compileConstraint({ vocabulary: { tokens: ["a"], eos: [0] }, request: chatReq });
  const mask = new Uint32Array(matcher?.maskWords ?? 0);
  matcher?.fillMask(mask);

  // createWorkerEngine gives the same Engine as createEngine.
  const inPage: Engine = await createEngine({ model: "/m.gguf" });
  const inWorker: Engine = await createWorkerEngine(new Worker("w.js", { type: "module" }), { model: "/m.gguf", onProgress: (p) => p.loaded });
  void [inPage, inWorker];
}
void useEngine;
