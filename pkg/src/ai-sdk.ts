// A provider for the Vercel AI SDK (npm `ai`): the in-page engine as a language model of the
// SDK's specification v4 (`@ai-sdk/provider` 4, what `ai` 7 calls), so that
//
//   const poot = createPoot({ engine: await createEngine({ model: "/SmolLM2.gguf" }) });
//   const { object } = await generateObject({ model: poot(), schema: z.object({ ... }), prompt });
//
// runs in the tab. The JSON Schema the SDK passes for structured output (generateObject,
// streamObject, generateText's `output`) becomes `response_format: json_schema`, so the object is
// valid because decoding was constrained; the SDK's tools become `tools`/`tool_choice`, forced
// where the SDK asks for `required` or a named tool. `ai` and `@ai-sdk/provider` are optional
// peer dependencies: users of the plain API install neither.
import {
  UnsupportedFunctionalityError,
  type LanguageModelV4,
  type LanguageModelV4CallOptions,
  type LanguageModelV4Content,
  type LanguageModelV4FinishReason,
  type LanguageModelV4GenerateResult,
  type LanguageModelV4Message,
  type LanguageModelV4StreamPart,
  type LanguageModelV4StreamResult,
  type LanguageModelV4ToolResultOutput,
  type LanguageModelV4Usage,
  type SharedV4Warning,
} from "@ai-sdk/provider";

import { createEngine, type Engine, type EngineOptions } from "./engine.js";
import { PootError } from "./errors.js";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParamsBase,
  ChatCompletionMessageParam,
  ChatCompletionToolChoiceOption,
  CompletionUsage,
} from "./types.js";
import { createWorkerEngine, type WorkerEngineOptions, type WorkerLike } from "./worker.js";

/** Where the provider's engine comes from. */
export type PootProviderSettings =
  /** An engine from `createEngine`/`createWorkerEngine`, or the promise of one (load it with `onProgress`, hand the promise over at once). */
  | { engine: Engine | Promise<Engine> }
  /** `createEngine`'s options: the engine is loaded on first use (or by `poot.engine()`), `onProgress` included. */
  | (EngineOptions & { worker?: undefined })
  /** A Web Worker (or a function that starts one) and `createWorkerEngine`'s options: the model runs off the page's thread. */
  | (WorkerEngineOptions & { worker: WorkerLike | (() => WorkerLike) });

/** `createPoot`'s result: call it for the language model to pass to the SDK as `model`. */
export interface PootProvider {
  (modelId?: string): PootLanguageModel;
  languageModel(modelId?: string): PootLanguageModel;
  /** The engine, loading it now where the settings say how (so a page can show progress before the first call). */
  engine(): Promise<Engine>;
}

/** The SDK's language model over one engine. `modelId` names it in the SDK's telemetry; the engine serves the one model it loaded. */
export interface PootLanguageModel extends LanguageModelV4 {
  readonly provider: "poot";
}

export function createPoot(settings: PootProviderSettings): PootProvider {
  if (!settings || typeof settings !== "object") {
    throw new PootError("createPoot needs { engine } or createEngine's options", { status: 400, code: "invalid_input" });
  }
  let engine: Promise<Engine> | undefined;
  const load = (): Promise<Engine> => {
    if (!engine) {
      const started =
        "engine" in settings
          ? Promise.resolve(settings.engine)
          : settings.worker !== undefined
            ? createWorkerEngine(settings.worker, settings)
            : createEngine(settings);
      // A failed load is tried again by the next call, not remembered.
      engine = started.catch((e: unknown) => {
        engine = undefined;
        throw e;
      });
    }
    return engine;
  };
  const languageModel = (modelId?: string): PootLanguageModel => new PootChatModel(modelId, load);
  const provider = ((modelId?: string) => languageModel(modelId)) as PootProvider;
  provider.languageModel = languageModel;
  provider.engine = load;
  return provider;
}

/** What one call asks of the engine, and what the SDK should hear of what it could not. */
interface Prepared {
  body: ChatCompletionCreateParamsBase;
  warnings: SharedV4Warning[];
}

class PootChatModel implements PootLanguageModel {
  readonly specificationVersion = "v4" as const;
  readonly provider = "poot" as const;
  readonly modelId: string;
  /** No URL is read by the model itself: the models are text-only. */
  readonly supportedUrls: Record<string, RegExp[]> = {};
  readonly #engine: () => Promise<Engine>;

  constructor(modelId: string | undefined, engine: () => Promise<Engine>) {
    this.modelId = modelId ?? "local";
    this.#engine = engine;
  }

  async doGenerate(options: LanguageModelV4CallOptions): Promise<LanguageModelV4GenerateResult> {
    const { body, warnings } = prepare(options);
    const engine = await this.#engine();
    const reply: ChatCompletion = await engine.chat.completions.create({ ...body, stream: false }, { signal: options.abortSignal });
    const choice = reply.choices[0];
    if (!choice) throw new PootError("the engine's reply has no choice", { status: 500, code: "internal_error" });
    const content: LanguageModelV4Content[] = [];
    if (choice.message.content) content.push({ type: "text", text: choice.message.content });
    for (const call of choice.message.tool_calls ?? []) {
      content.push({ type: "tool-call", toolCallId: call.id, toolName: call.function.name, input: call.function.arguments });
    }
    return {
      content,
      finishReason: finishReason(choice.finish_reason),
      usage: usage(reply.usage),
      warnings: [...warnings, ...(reply.warnings ?? []).map(engineWarning)],
      request: { body },
      response: { id: reply.id, timestamp: new Date(reply.created * 1000), modelId: reply.model, body: reply },
    };
  }

  async doStream(options: LanguageModelV4CallOptions): Promise<LanguageModelV4StreamResult> {
    const { body, warnings } = prepare(options);
    const engine = await this.#engine();
    const chunks = await engine.chat.completions.create(
      { ...body, stream: true, stream_options: { include_usage: true } },
      { signal: options.abortSignal },
    );
    const iterator = chunks[Symbol.asyncIterator]();
    const raw = options.includeRawChunks === true;
    let started = false;
    let textOpen = false;
    let finish: LanguageModelV4FinishReason = { unified: "other", raw: undefined };
    let used: LanguageModelV4Usage = usage(undefined);
    const stream = new ReadableStream<LanguageModelV4StreamPart>({
      start(controller) {
        controller.enqueue({ type: "stream-start", warnings });
      },
      // Engine chunks until one gives the SDK a part (a pull that enqueues nothing is not
      // called again): the SDK reads as fast as it consumes, and a cancel stops the run
      // (iterator.return) within the step.
      async pull(controller) {
        for (let enqueued = 0; enqueued === 0; ) {
          const enqueue = (part: LanguageModelV4StreamPart) => {
            enqueued++;
            controller.enqueue(part);
          };
          let next: IteratorResult<ChatCompletionChunk>;
          try {
            next = await iterator.next();
          } catch (e) {
            if (isAbort(e, options.abortSignal)) return controller.error(e);
            enqueue({ type: "error", error: e });
            if (textOpen) enqueue({ type: "text-end", id: "0" });
            enqueue({ type: "finish", finishReason: { unified: "error", raw: undefined }, usage: used });
            return controller.close();
          }
          if (next.done) {
            if (textOpen) enqueue({ type: "text-end", id: "0" });
            enqueue({ type: "finish", finishReason: finish, usage: used });
            return controller.close();
          }
          const chunk = next.value;
          if (raw) enqueue({ type: "raw", rawValue: chunk });
          if (!started) {
            started = true;
            enqueue({ type: "response-metadata", id: chunk.id, timestamp: new Date(chunk.created * 1000), modelId: chunk.model });
          }
          if (chunk.usage) used = usage(chunk.usage);
          const choice = chunk.choices[0];
          if (!choice) continue;
          if (choice.delta.content) {
            if (!textOpen) {
              textOpen = true;
              enqueue({ type: "text-start", id: "0" });
            }
            enqueue({ type: "text-delta", id: "0", delta: choice.delta.content });
          }
          // The engine writes each call whole, parsed through the model's codec: one delta each.
          for (const call of choice.delta.tool_calls ?? []) {
            const id = call.id ?? `call_${call.index}`;
            const toolName = call.function?.name ?? "";
            const input = call.function?.arguments ?? "";
            enqueue({ type: "tool-input-start", id, toolName });
            enqueue({ type: "tool-input-delta", id, delta: input });
            enqueue({ type: "tool-input-end", id });
            enqueue({ type: "tool-call", toolCallId: id, toolName, input });
          }
          if (choice.finish_reason) finish = finishReason(choice.finish_reason);
        }
      },
      async cancel() {
        await iterator.return?.();
      },
    });
    return { stream, request: { body } };
  }
}

function isAbort(e: unknown, signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true || (e instanceof Error && e.name === "AbortError");
}

/** The SDK's call options as one chat.completions request, with warnings for what has no place in it. */
function prepare(options: LanguageModelV4CallOptions): Prepared {
  const warnings: SharedV4Warning[] = [];
  const body: ChatCompletionCreateParamsBase = { messages: messages(options.prompt, warnings) };
  if (options.maxOutputTokens !== undefined) body.max_tokens = options.maxOutputTokens;
  if (options.temperature !== undefined) body.temperature = options.temperature;
  if (options.topP !== undefined) body.top_p = options.topP;
  if (options.topK !== undefined) body.top_k = options.topK;
  if (options.seed !== undefined) body.seed = options.seed;
  if (options.stopSequences?.length) body.stop = options.stopSequences;
  // Passed on: the engine names in `warnings` what it does not apply.
  if (options.presencePenalty !== undefined) body.presence_penalty = options.presencePenalty;
  if (options.frequencyPenalty !== undefined) body.frequency_penalty = options.frequencyPenalty;
  if (options.reasoning !== undefined && options.reasoning !== "provider-default" && options.reasoning !== "none") {
    warnings.push({ type: "unsupported", feature: "reasoning", details: "the local models take no reasoning effort" });
  }
  const format = options.responseFormat;
  if (format?.type === "json") {
    body.response_format = format.schema
      ? {
          type: "json_schema",
          json_schema: {
            name: format.name ?? "response",
            ...(format.description !== undefined ? { description: format.description } : {}),
            schema: format.schema as Record<string, unknown>,
            strict: true,
          },
        }
      : { type: "json_object" };
  }
  const tools = [];
  for (const tool of options.tools ?? []) {
    if (tool.type !== "function") {
      warnings.push({ type: "unsupported", feature: `provider-defined tool ${tool.id}`, details: "only function tools run locally" });
      continue;
    }
    tools.push({
      type: "function" as const,
      function: {
        name: tool.name,
        ...(tool.description !== undefined ? { description: tool.description } : {}),
        parameters: tool.inputSchema as Record<string, unknown>,
        ...(tool.strict !== undefined ? { strict: tool.strict } : {}),
      },
    });
  }
  if (tools.length) {
    body.tools = tools;
    if (options.toolChoice) body.tool_choice = toolChoice(options.toolChoice);
  }
  return { body, warnings };
}

function toolChoice(choice: NonNullable<LanguageModelV4CallOptions["toolChoice"]>): ChatCompletionToolChoiceOption {
  switch (choice.type) {
    case "auto":
    case "none":
    case "required":
      return choice.type;
    case "tool":
      return { type: "function", function: { name: choice.toolName } };
  }
}

/** The SDK's prompt as chat messages; files (images, audio, PDFs) are refused: the models read text only. */
function messages(prompt: LanguageModelV4CallOptions["prompt"], warnings: SharedV4Warning[]): ChatCompletionMessageParam[] {
  const out: ChatCompletionMessageParam[] = [];
  let droppedReasoning = false;
  const noFiles = (where: string): never => {
    throw new UnsupportedFunctionalityError({
      functionality: `file parts in ${where} messages`,
      message: `poot's local models read text only: a file part (an image, audio, a document) in a ${where} message cannot be given to them`,
    });
  };
  for (const message of prompt as LanguageModelV4Message[]) {
    switch (message.role) {
      case "system":
        out.push({ role: "system", content: message.content });
        break;
      case "user": {
        const texts = message.content.map((part) => (part.type === "text" ? part.text : noFiles("user")));
        const [only] = texts;
        out.push({ role: "user", content: texts.length === 1 && only !== undefined ? only : texts.map((text) => ({ type: "text" as const, text })) });
        break;
      }
      case "assistant": {
        let text = "";
        const calls = [];
        for (const part of message.content) {
          if (part.type === "text") text += part.text;
          else if (part.type === "tool-call") {
            calls.push({
              id: part.toolCallId,
              type: "function" as const,
              function: { name: part.toolName, arguments: typeof part.input === "string" ? part.input : JSON.stringify(part.input) },
            });
          } else if (part.type === "file" || part.type === "reasoning-file") noFiles("assistant");
          else if (part.type === "reasoning") droppedReasoning = true;
        }
        out.push({ role: "assistant", content: text || (calls.length ? null : ""), ...(calls.length ? { tool_calls: calls } : {}) });
        break;
      }
      case "tool":
        for (const part of message.content) {
          if (part.type !== "tool-result") continue; // approval responses are the SDK's own business
          out.push({ role: "tool", tool_call_id: part.toolCallId, content: toolResultText(part.output) });
        }
        break;
    }
  }
  if (droppedReasoning) warnings.push({ type: "other", message: "reasoning parts of earlier assistant messages were left out of the prompt" });
  return out;
}

function toolResultText(output: LanguageModelV4ToolResultOutput): string {
  switch (output.type) {
    case "text":
    case "error-text":
      return output.value;
    case "json":
    case "error-json":
      return JSON.stringify(output.value);
    case "execution-denied":
      return output.reason ?? "The tool's execution was denied.";
    case "content":
      return output.value.map((part) => (part.type === "text" ? part.text : "")).join("");
  }
}

function finishReason(raw: string | null | undefined): LanguageModelV4FinishReason {
  const unified = raw === "stop" ? "stop" : raw === "length" ? "length" : raw === "tool_calls" ? "tool-calls" : "other";
  return { unified, raw: raw ?? undefined };
}

function usage(u: CompletionUsage | null | undefined): LanguageModelV4Usage {
  return {
    // No prompt cache: every input token is read afresh.
    inputTokens: { total: u?.prompt_tokens, noCache: u?.prompt_tokens, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: u?.completion_tokens, text: u?.completion_tokens, reasoning: undefined },
    ...(u ? { raw: { ...u } } : {}),
  };
}

function engineWarning(message: string): SharedV4Warning {
  return { type: "other", message };
}
