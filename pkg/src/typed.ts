// Typed schemas: wherever a JSON Schema goes (`response_format`, `guided_json`, a tool's
// `parameters`, the remote client's `structured`), a Standard Schema may go instead (Zod 4,
// Valibot, ArkType: https://standardschema.dev). It is turned into JSON Schema by the
// library's own converter, through the Standard JSON Schema interface
// (`schema["~standard"].jsonSchema.output({ target: "draft-2020-12" })`: Zod 4.2+ and ArkType
// 2.1.28+ carry it, Valibot through `toStandardJsonSchema()` of `@valibot/to-json-schema`), and a
// result is checked with the schema's own `~standard.validate`, so refinements the JSON Schema
// cannot say (a Zod `.refine`) still hold, and the value is the library's output (transforms
// applied). The TypeScript type follows from the schema.
import type { StandardJSONSchemaV1, StandardSchemaV1 } from "@standard-schema/spec";

import { PootError } from "./errors.js";
import { parsePartialJson } from "./partial.js";
import type { ChatCompletion, ChatCompletionChunk, ParsedChatCompletion, ParsedChatCompletionMessage } from "./types.js";

export type { StandardJSONSchemaV1, StandardSchemaV1 };

/** The output type of a Standard Schema. */
export type Infer<S extends StandardSchemaV1> = StandardSchemaV1.InferOutput<S>;

/** Whether `value` is a Standard Schema (it has `~standard` with a `validate` function). */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  const props = (value as { "~standard"?: { validate?: unknown } } | null)?.["~standard"];
  return (typeof value === "object" || typeof value === "function") && value !== null && typeof props?.validate === "function";
}

/**
 * The JSON Schema of a Standard Schema, by its library's converter; `param` names the request
 * field in the error when the library has none (Valibot needs `toStandardJsonSchema()`).
 */
export function toJsonSchema(schema: StandardSchemaV1, param: string): Record<string, unknown> {
  const props = schema["~standard"] as StandardSchemaV1.Props & Partial<StandardJSONSchemaV1.Props>;
  const converter = props.jsonSchema;
  if (typeof converter?.output !== "function") {
    const hint = props.vendor === "valibot" ? ": wrap it with toStandardJsonSchema() from @valibot/to-json-schema" : "";
    throw new PootError(
      `${param} is a ${props.vendor} schema without a JSON Schema converter (~standard.jsonSchema, the Standard JSON Schema interface)${hint}`,
      { status: 400, code: "invalid_input", param },
    );
  }
  let json: Record<string, unknown>;
  try {
    json = converter.output({ target: "draft-2020-12" });
  } catch (e) {
    throw new PootError(`${param}: the ${props.vendor} schema has no JSON Schema: ${(e as Error)?.message ?? e}`, {
      status: 400,
      code: "invalid_input",
      param,
    });
  }
  // `$schema` names the draft; the compiler reads 2020-12 either way.
  const { $schema: _draft, ...rest } = json;
  return rest;
}

/** The value of `text` as `schema` reads it: JSON-parsed, then `~standard.validate`d. */
export async function parseWith<S extends StandardSchemaV1>(schema: S, text: string): Promise<Infer<S>> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new PootError(`the reply is not JSON: ${(e as Error).message}`, { status: 500, code: "validation_failed" });
  }
  const result = await schema["~standard"].validate(value);
  if (result.issues) {
    const issues = result.issues.map((i) => {
      const path = (i.path ?? []).map((p) => String(typeof p === "object" ? p.key : p)).join(".");
      return path ? `${path}: ${i.message}` : i.message;
    });
    throw new PootError(
      `the reply does not pass the schema's own validation (what its JSON Schema cannot say, such as a refinement): ${issues.join("; ")}`,
      { status: 500, code: "validation_failed" },
    );
  }
  return result.value as Infer<S>;
}

/** Where a request carries schemas. */
interface SchemaFields {
  response_format?: unknown;
  guided_json?: unknown;
  tools?: unknown;
}

/**
 * `req` with every Standard Schema replaced by its JSON Schema (a `response_format` that is
 * itself a Standard Schema becomes `{ type: "json_schema", json_schema: { name: "response",
 * schema } }`), and the schema a reply is to be parsed with: `response_format`'s, else
 * `guided_json`'s. A request without one is returned as is.
 */
export function withJsonSchemas<R extends object>(req: R): { body: R; schema?: StandardSchemaV1 } {
  const r = req as SchemaFields;
  let schema: StandardSchemaV1 | undefined;
  let body: SchemaFields | undefined;
  const copy = () => (body ??= { ...r });
  // guided_json outranks response_format: its schema is the one a reply follows.
  if (isStandardSchema(r.guided_json)) {
    schema = r.guided_json;
    copy().guided_json = toJsonSchema(r.guided_json, "guided_json");
  }
  const rf = r.response_format as { type?: unknown; json_schema?: { schema?: unknown } } | undefined;
  if (isStandardSchema(rf)) {
    schema ??= rf;
    copy().response_format = { type: "json_schema", json_schema: { name: "response", schema: toJsonSchema(rf, "response_format") } };
  } else if (rf?.type === "json_schema" && isStandardSchema(rf.json_schema?.schema)) {
    const own = rf.json_schema.schema;
    schema ??= own;
    copy().response_format = { ...rf, json_schema: { ...rf.json_schema, schema: toJsonSchema(own, "response_format") } };
  }
  if (Array.isArray(r.tools) && r.tools.some((t) => isStandardSchema(t?.function?.parameters))) {
    copy().tools = r.tools.map((t, i) =>
      isStandardSchema(t?.function?.parameters)
        ? { ...t, function: { ...t.function, parameters: toJsonSchema(t.function.parameters, `tools[${i}].function.parameters`) } }
        : t,
    );
  }
  return { body: (body ?? r) as R, schema };
}

/** What `chat.completions.create` is to `parse`. */
type Create = (req: object, opts?: { signal?: AbortSignal }) => Promise<unknown>;

/**
 * `chat.completions.parse`: the completion of `req` (not streamed), each message with
 * `parsed`: the content as the request's Standard Schema reads it (validated, typed), or
 * JSON-parsed under a plain JSON Schema (`guided_json`, `response_format` `json_schema` or
 * `json_object`), or null without one. As the `openai` SDK's `parse`.
 */
export async function parseCompletion(
  create: Create,
  req: object,
  opts?: { signal?: AbortSignal },
): Promise<ParsedChatCompletion<unknown> | AsyncIterable<PartialParse<unknown>>> {
  const { body, schema } = withJsonSchemas(req);
  const fields = body as SchemaFields & { stream?: unknown; n?: unknown };
  const rfType = (fields.response_format as { type?: unknown } | undefined)?.type;
  const json = fields.guided_json != null || rfType === "json_schema" || rfType === "json_object";
  const read = async (content: string) => (schema ? await parseWith(schema, content) : json ? JSON.parse(content) : null);
  if (fields.stream) {
    if (fields.n != null && fields.n !== 1) {
      throw new PootError("a streamed parse follows one choice: n must be 1", { status: 400, code: "invalid_input", param: "n" });
    }
    return partialStream((await create(body, opts)) as AsyncIterable<ChatCompletionChunk>, read);
  }
  const completion = (await create(body, opts)) as ChatCompletion;
  for (const choice of completion.choices) {
    const message = choice.message as ParsedChatCompletionMessage<unknown>;
    const content = message.content;
    message.parsed = content === null ? null : await read(content);
  }
  return completion as ParsedChatCompletion<unknown>;
}

/** One item of a streamed `parse`: the value as it is being written, then the whole. */
export interface PartialParse<T> {
  /** The content so far. */
  content: string;
  /**
   * The value so far (parsePartialJson): fields already written are final, the one being
   * written grows; on the last item, the parsed value.
   */
  partial: unknown;
  /** The last item only: the whole reply, validated by the schema and typed by it. */
  parsed: T | null;
  done: boolean;
  /** The last item only: the choice's finish_reason. */
  finish_reason: string | null;
}

/** A chunk stream as partial values: one item each time the value grows, then the whole. */
async function* partialStream(
  chunks: AsyncIterable<ChatCompletionChunk>,
  read: (content: string) => Promise<unknown>,
): AsyncGenerator<PartialParse<unknown>, void, undefined> {
  let content = "";
  let finish: string | null = null;
  let shown = "";
  for await (const chunk of chunks) {
    for (const choice of chunk.choices) {
      content += choice.delta?.content ?? "";
      finish = choice.finish_reason ?? finish;
    }
    const partial = parsePartialJson(content);
    const key = JSON.stringify(partial) ?? "";
    if (partial !== undefined && key !== shown) {
      shown = key;
      yield { content, partial, parsed: null, done: false, finish_reason: null };
    }
  }
  const parsed = await read(content);
  yield { content, partial: parsed, parsed, done: true, finish_reason: finish };
}
