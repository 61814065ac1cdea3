// The OpenAI wire shapes the local engine takes and returns, written out here (the `openai`
// package is only a dev dependency) to be structurally compatible with its types:
//
// - every `openai` request param object is assignable to the matching param type here (the
//   fields poot does not use are declared loosely; the engine ignores them and lists them in
//   `warnings`), plus vLLM's structured-output fields (`guided_json`, `guided_regex`, ...);
// - every response type here is assignable to `openai`'s (`ChatCompletion`,
//   `ChatCompletionChunk`, `Completion`, `Model`): the fields are what the engine really
//   sends, never more optional than `openai` says.
//
// One exception: `openai` types the completions stream's items as `Completion`, whose
// `finish_reason` is never null; a `CompletionChunk` here has `finish_reason: null` until
// the last chunk of a choice, as the wire does.

import type { StandardSchemaV1 } from "@standard-schema/spec";

// ---------------------------------------------------------------------------------------------
// Shared

/** A JSON Schema object (`guided_json`, `response_format.json_schema.schema`, tool params). */
export type JsonSchema = { [key: string]: unknown };

/**
 * Where a JSON Schema goes, a Standard Schema may go instead (Zod 4, ArkType, Valibot with
 * `toStandardJsonSchema`): its library converts it (see typed.ts), and `parse` validates and
 * types the reply with it. Not through `engine.fetch`, whose bodies are JSON.
 */
export type SchemaInput = JsonSchema | StandardSchemaV1;

/** Token usage of a request. */
export interface CompletionUsage {
  prompt_tokens: number;
  /** Every token sampled or forced, an ending end-of-sequence token included. */
  completion_tokens: number;
  total_tokens: number;
  completion_tokens_details?: {
    accepted_prediction_tokens?: number;
    audio_tokens?: number;
    reasoning_tokens?: number;
    rejected_prediction_tokens?: number;
  };
  prompt_tokens_details?: { audio_tokens?: number; cached_tokens?: number };
  /**
   * A poot extension, present when not 0: the choices whose constrained output was steered
   * onto a shortest completion as `max_tokens` neared. Their content is complete and valid;
   * their `finish_reason` is `"length"`.
   */
  forced_closes?: number;
}

export interface ResponseFormatText {
  type: "text";
}

export interface ResponseFormatJSONObject {
  type: "json_object";
}

export interface ResponseFormatJSONSchema {
  type: "json_schema";
  json_schema: {
    name: string;
    description?: string;
    schema?: SchemaInput;
    strict?: boolean | null;
  };
}

export type ResponseFormat = ResponseFormatText | ResponseFormatJSONSchema | ResponseFormatJSONObject;

/**
 * Structured-output and sampling fields beyond OpenAI's (vLLM's names). When several are
 * given, the strongest wins: a forced tool call > `guided_choice` > `guided_regex` >
 * `guided_grammar` > `guided_json` > `response_format`.
 */
export interface GuidedParams {
  /** The output is exactly one of these strings. */
  guided_choice?: Array<string> | null;
  /** The output matches this regular expression (anchored at both ends). */
  guided_regex?: string | null;
  /** The output is derived from this GBNF grammar (llama.cpp syntax, start rule `root`). */
  guided_grammar?: string | null;
  /** The output is JSON valid under this schema (an object, or its JSON text). */
  guided_json?: SchemaInput | string | null;
  /**
   * A poot extension: how schemas read an object that lists `properties` and leaves
   * `additionalProperties` out. `true` (the default): other keys too, as JSON Schema says;
   * `false`: only the listed keys (small models given the choice often invent keys).
   */
  guided_json_extra_keys?: boolean | null;
  /** Sample from the `top_k` most likely tokens (0 or -1: off). */
  top_k?: number | null;
  /** Drop tokens less likely than `min_p` times the most likely one. */
  min_p?: number | null;
  /** Divides positive logits of tokens already in the output (1: off). */
  repetition_penalty?: number | null;
  /**
   * A poot extension: every chunk and the whole response carry `step_stats`, the constraint's
   * numbers for each sampling step (what the mask allowed, how long it took, what was forced).
   */
  step_stats?: boolean | null;
}

/** A token and its text (lossy UTF-8: a token may hold part of a character). */
export interface StepToken {
  token: number;
  text: string;
}

/** One sampling step, reported with `step_stats: true`. */
export interface StepStats extends StepToken {
  /** The choice the step belongs to. */
  index: number;
  /** Tokens the mask allowed (end-of-sequence included); null without a constraint. */
  allowed: number | null;
  /** Microseconds the mask took to fill; null without a constraint. */
  mask_us: number | null;
  /** Tokens fed after this one without sampling: the constraint forced them (jump-forward). */
  forced: Array<StepToken>;
  /** Present and true when this token was the next of a shortest completion (max_tokens was near). */
  closing?: boolean;
}

/**
 * Bounds on what one request may make the engine compile, tighter than the defaults for one
 * deployment (the names `poot serve --limits` takes). Each can only be lowered: a value above
 * its default, below 1 or not an integer, or an unknown name, is a 400 naming `limits`. A
 * request past a bound is a 400 `limit_exceeded` naming its field and the bound.
 */
export interface Limits {
  /** `guided_regex` text, bytes (default 4,096). */
  regex_bytes?: number;
  /** `guided_grammar` text, bytes (default 16,384); also a forced tool call's grammar. */
  grammar_bytes?: number;
  /** `guided_json` / `response_format` schema text, bytes (default 16,384); also each tool's parameters. */
  schema_bytes?: number;
  /** Subschemas the JSON Schema compiler may visit (default 10,000; a request's tools share 4 times it). */
  schema_expansion?: number;
  /** `enum`/`const` checking work, in subschema visits or pattern bytes (default 100,000). */
  schema_judge_work?: number;
  /** Nesting of subschemas and `$ref`s (default 64). */
  schema_depth?: number;
  /** `oneOf` branch pairs checked for overlap (default 65,536). */
  one_of_pairs?: number;
  /** A DFA's table for `guided_regex`, `guided_choice`, `guided_json`, bytes (default 262,144); a schema past it moves to the grammar engine. */
  automaton_bytes?: number;
  /** Work while determinizing a regex, bytes of state sets (default 1,048,576). */
  determinize_bytes?: number;
  /** The grammar engine's automaton (`guided_grammar`, large schemas, forced tool calls), bytes (default 1,048,576). */
  grammar_automaton_bytes?: number;
  /** A grammar's determinization work over all attempts, units (default 48,000,000). */
  grammar_determinize_work?: number;
  /** A grammar's minimization work, table entries; past it the automaton stays unminimized (default 32,000,000). */
  grammar_minimize_work?: number;
  /** Repetitions of a grammar item that can match the empty string (default 1,000). */
  grammar_repetition?: number;
  /** Parentheses nesting in a grammar (default 128). */
  grammar_nesting?: number;
  /** Levels of a grammar's syntax tree (default 512). */
  grammar_depth?: number;
  /** Work of one grammar step (a mask, an advance), units (default 200,000). */
  grammar_step_work?: number;
  /** `guided_choice` strings (default 1,024). */
  choices?: number;
  /** `guided_choice` strings' total bytes (default 16,384). */
  choice_bytes?: number;
}

/** Options of a `create` call (OpenAI's clients pass `signal` the same way). */
export interface RequestOptions {
  /** Aborting stops generation within one step. */
  signal?: AbortSignal;
}

// ---------------------------------------------------------------------------------------------
// Chat: request

export interface ChatCompletionContentPartText {
  type: "text";
  text: string;
}

/** Accepted by the type for compatibility; the engine answers 400 (text only). */
export interface ChatCompletionContentPartImage {
  type: "image_url";
  image_url: { url: string; detail?: "auto" | "low" | "high" };
}

/** Accepted by the type for compatibility; the engine answers 400 (text only). */
export interface ChatCompletionContentPartInputAudio {
  type: "input_audio";
  input_audio: { data: string; format: "wav" | "mp3" };
}

/** Accepted by the type for compatibility; the engine answers 400 (text only). */
export interface ChatCompletionContentPartFile {
  type: "file";
  file: { file_data?: string; file_id?: string; filename?: string };
}

export interface ChatCompletionContentPartRefusal {
  type: "refusal";
  refusal: string;
}

export type ChatCompletionContentPart =
  | ChatCompletionContentPartText
  | ChatCompletionContentPartImage
  | ChatCompletionContentPartInputAudio
  | ChatCompletionContentPartFile;

export interface ChatCompletionMessageFunctionToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** Accepted by the type for compatibility (`openai`'s custom tools); not generated. */
export interface ChatCompletionMessageCustomToolCall {
  id: string;
  type: "custom";
  custom: { name: string; input: string };
}

export type ChatCompletionMessageToolCall = ChatCompletionMessageFunctionToolCall | ChatCompletionMessageCustomToolCall;

export interface ChatCompletionDeveloperMessageParam {
  role: "developer";
  content: string | Array<ChatCompletionContentPartText>;
  name?: string;
}

export interface ChatCompletionSystemMessageParam {
  role: "system";
  content: string | Array<ChatCompletionContentPartText>;
  name?: string;
}

export interface ChatCompletionUserMessageParam {
  role: "user";
  content: string | Array<ChatCompletionContentPart>;
  name?: string;
}

export interface ChatCompletionAssistantMessageParam {
  role: "assistant";
  content?: string | Array<ChatCompletionContentPartText | ChatCompletionContentPartRefusal> | null;
  name?: string;
  refusal?: string | null;
  tool_calls?: Array<ChatCompletionMessageToolCall>;
  audio?: { id: string } | null;
  function_call?: { arguments: string; name: string } | null;
}

export interface ChatCompletionToolMessageParam {
  role: "tool";
  content: string | Array<ChatCompletionContentPartText>;
  tool_call_id: string;
}

/** Accepted by the type for compatibility (OpenAI's legacy role); the engine answers 400. */
export interface ChatCompletionFunctionMessageParam {
  role: "function";
  content: string | null;
  name: string;
}

export type ChatCompletionMessageParam =
  | ChatCompletionDeveloperMessageParam
  | ChatCompletionSystemMessageParam
  | ChatCompletionUserMessageParam
  | ChatCompletionAssistantMessageParam
  | ChatCompletionToolMessageParam
  | ChatCompletionFunctionMessageParam;

export interface FunctionDefinition {
  name: string;
  description?: string;
  parameters?: SchemaInput;
  strict?: boolean | null;
}

export interface ChatCompletionFunctionTool {
  type: "function";
  function: FunctionDefinition;
}

/** Accepted by the type for compatibility (`openai`'s custom tools); the engine answers 400. */
export interface ChatCompletionCustomTool {
  type: "custom";
  custom: {
    name: string;
    description?: string;
    format?: { type: "text" } | { type: "grammar"; grammar: { definition: string; syntax: "lark" | "regex" } };
  };
}

export type ChatCompletionTool = ChatCompletionFunctionTool | ChatCompletionCustomTool;

export interface ChatCompletionNamedToolChoice {
  type: "function";
  function: { name: string };
}

export type ChatCompletionToolChoiceOption =
  | "none"
  | "auto"
  | "required"
  | ChatCompletionNamedToolChoice
  | { type: "allowed_tools"; allowed_tools: { mode: "auto" | "required"; tools: Array<{ [key: string]: unknown }> } }
  | { type: "custom"; custom: { name: string } };

export interface ChatCompletionStreamOptions {
  /** A last chunk with `usage` and no choices. */
  include_usage?: boolean;
  include_obfuscation?: boolean;
}

export interface ChatCompletionCreateParamsBase extends GuidedParams {
  messages: Array<ChatCompletionMessageParam>;
  /** Ignored: the engine serves the one model it loaded. */
  model?: string;
  frequency_penalty?: number | null;
  logit_bias?: { [token: string]: number } | null;
  logprobs?: boolean | null;
  max_completion_tokens?: number | null;
  max_tokens?: number | null;
  /** At most 16. */
  n?: number | null;
  parallel_tool_calls?: boolean;
  presence_penalty?: number | null;
  /** Or a Standard Schema itself: `response_format: z.object({...})` (named `response`). */
  response_format?: ResponseFormat | StandardSchemaV1;
  seed?: number | null;
  stop?: string | null | Array<string>;
  stream?: boolean | null;
  stream_options?: ChatCompletionStreamOptions | null;
  temperature?: number | null;
  tool_choice?: ChatCompletionToolChoiceOption;
  tools?: Array<ChatCompletionTool>;
  top_logprobs?: number | null;
  top_p?: number | null;
  user?: string;
  // OpenAI fields the engine ignores (listed in the response's `warnings`).
  audio?: unknown;
  function_call?: unknown;
  functions?: unknown;
  metadata?: unknown;
  modalities?: unknown;
  prediction?: unknown;
  prompt_cache_key?: unknown;
  prompt_cache_retention?: unknown;
  reasoning_effort?: unknown;
  safety_identifier?: unknown;
  service_tier?: unknown;
  store?: unknown;
  verbosity?: unknown;
  web_search_options?: unknown;
}

export interface ChatCompletionCreateParamsNonStreaming extends ChatCompletionCreateParamsBase {
  stream?: false | null;
}

export interface ChatCompletionCreateParamsStreaming extends ChatCompletionCreateParamsBase {
  stream: true;
}

export type ChatCompletionCreateParams = ChatCompletionCreateParamsNonStreaming | ChatCompletionCreateParamsStreaming;

// ---------------------------------------------------------------------------------------------
// Chat: response

export interface ChatCompletionTokenLogprob {
  token: string;
  /** The token's exact bytes (`token` replaces invalid UTF-8). */
  bytes: Array<number> | null;
  logprob: number;
  top_logprobs: Array<{ token: string; bytes: Array<number> | null; logprob: number }>;
}

export interface ChatCompletionLogprobs {
  content: Array<ChatCompletionTokenLogprob> | null;
  /** Always null: a local model has no refusal channel. */
  refusal: Array<ChatCompletionTokenLogprob> | null;
}

export interface ChatCompletionMessage {
  role: "assistant";
  content: string | null;
  /** Always null. */
  refusal: string | null;
  tool_calls?: Array<ChatCompletionMessageFunctionToolCall>;
}

export interface ChatCompletionChoice {
  index: number;
  message: ChatCompletionMessage;
  logprobs: ChatCompletionLogprobs | null;
  finish_reason: "stop" | "length" | "tool_calls";
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  /** Unix seconds. */
  created: number;
  model: string;
  system_fingerprint?: string;
  choices: Array<ChatCompletionChoice>;
  usage: CompletionUsage;
  /** One message per request field the engine ignored (present only when there are some). */
  warnings?: Array<string>;
  /** Every step, with `step_stats: true`. */
  step_stats?: Array<StepStats>;
}

/** A reply's message with its content parsed (`chat.completions.parse`). */
export interface ParsedChatCompletionMessage<T> extends ChatCompletionMessage {
  /** The content as the request's schema reads it; null without a schema or content. */
  parsed: T | null;
}

export interface ParsedChatCompletionChoice<T> extends ChatCompletionChoice {
  message: ParsedChatCompletionMessage<T>;
}

/** What `chat.completions.parse` returns: the completion, each message `parsed`. */
export interface ParsedChatCompletion<T> extends ChatCompletion {
  choices: Array<ParsedChatCompletionChoice<T>>;
}

export interface ChatCompletionChunkToolCall {
  index: number;
  id?: string;
  type?: "function";
  function?: { name?: string; arguments?: string };
}

export interface ChatCompletionChunkChoice {
  index: number;
  delta: {
    role?: "assistant";
    content?: string | null;
    refusal?: string | null;
    tool_calls?: Array<ChatCompletionChunkToolCall>;
  };
  logprobs?: ChatCompletionLogprobs | null;
  finish_reason: "stop" | "length" | "tool_calls" | null;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  system_fingerprint?: string;
  /** Empty in the `stream_options.include_usage` chunk. */
  choices: Array<ChatCompletionChunkChoice>;
  usage?: CompletionUsage | null;
  /** With `step_stats: true`: the steps since the previous chunk that carried some. */
  step_stats?: Array<StepStats>;
}

// ---------------------------------------------------------------------------------------------
// Completions (legacy)

export interface CompletionCreateParamsBase extends GuidedParams {
  /** A string, one string in an array, or token ids (batches are refused with a 400). */
  prompt: string | Array<string> | Array<number> | Array<Array<number>> | null;
  /** Ignored: the engine serves the one model it loaded. */
  model?: string;
  /** Only `false` (`true` is a 400). */
  echo?: boolean | null;
  frequency_penalty?: number | null;
  logit_bias?: { [token: string]: number } | null;
  /** Alternatives per token, 0..=5. */
  logprobs?: number | null;
  max_tokens?: number | null;
  n?: number | null;
  presence_penalty?: number | null;
  response_format?: ResponseFormat | StandardSchemaV1;
  seed?: number | null;
  stop?: string | null | Array<string>;
  stream?: boolean | null;
  stream_options?: ChatCompletionStreamOptions | null;
  temperature?: number | null;
  top_p?: number | null;
  user?: string;
  // OpenAI fields the engine ignores (listed in the response's `warnings`).
  best_of?: unknown;
  suffix?: unknown;
}

export interface CompletionCreateParamsNonStreaming extends CompletionCreateParamsBase {
  stream?: false | null;
}

export interface CompletionCreateParamsStreaming extends CompletionCreateParamsBase {
  stream: true;
}

export type CompletionCreateParams = CompletionCreateParamsNonStreaming | CompletionCreateParamsStreaming;

export interface CompletionLogprobs {
  tokens?: Array<string>;
  token_logprobs?: Array<number>;
  top_logprobs?: Array<{ [token: string]: number }>;
  text_offset?: Array<number>;
}

export interface CompletionChoice {
  index: number;
  text: string;
  logprobs: CompletionLogprobs | null;
  finish_reason: "stop" | "length";
}

export interface Completion {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  system_fingerprint?: string;
  choices: Array<CompletionChoice>;
  usage: CompletionUsage;
  warnings?: Array<string>;
  /** Every step, with `step_stats: true`. */
  step_stats?: Array<StepStats>;
}

export interface CompletionChunkChoice {
  index: number;
  text: string;
  logprobs: CompletionLogprobs | null;
  /** null until the choice's last chunk. */
  finish_reason: "stop" | "length" | null;
}

export interface CompletionChunk {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  system_fingerprint?: string;
  choices: Array<CompletionChunkChoice>;
  usage?: CompletionUsage | null;
  /** With `step_stats: true`: the steps since the previous chunk that carried some. */
  step_stats?: Array<StepStats>;
}

// ---------------------------------------------------------------------------------------------
// Models

export interface ModelObject {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  /** The model's context length in tokens. */
  context_length: number;
}

export interface ModelList {
  object: "list";
  data: Array<ModelObject>;
}

/** The OpenAI error body (`PootError.toJSON()`, and what `engine.fetch` answers with). */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}
