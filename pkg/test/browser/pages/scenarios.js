// The engine scenarios the browser tests run in a page, against an engine made there by
// createEngine or createWorkerEngine: structured completions (non-streamed and streamed) under
// guided_json, guided_regex and response_format json_object, an abort mid-stream, and the
// official `openai` client (bundled for the page by the test) going through `engine.fetch`.
// Each returns plain data; the Node side validates it (pages/checks.mjs). `closing` asks for
// far fewer tokens than the model would write: the reply must still close and validate.
//
// Two sizes: `full` asks the chat endpoint for realistic outputs (the CPU backend: a few
// tokens/s); `lean` uses one-token completion prompts and outputs of a few tokens, because
// WebGPU on a software adapter (SwiftShader) takes seconds per token.

export const SCHEMAS = {
  full: {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 10 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      colour: { enum: ["red", "green", "blue"] },
    },
    required: ["name", "age", "colour"],
    additionalProperties: false,
  },
  lean: { enum: ["yes", "no"] },
};

export const REGEXES = { full: "[0-9]{3}-[0-9]{4}", lean: "[0-9]" };

/** The length-safe close: a constraint whose natural output is far longer than max_tokens. */
export const CLOSING = {
  full: {
    schema: { type: "object", properties: { story: { type: "string" } }, required: ["story"], additionalProperties: false },
    maxTokens: 12,
  },
  lean: { regex: "a[b-z ]*!", maxTokens: 3 },
};

/** The request of a scenario: the endpoint and body. */
export function request(name, size, stream) {
  const full = size === "full";
  const ask = (content) => (full ? { messages: [{ role: "user", content }] } : { prompt: "a" });
  const base = { temperature: 0, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) };
  switch (name) {
    case "guided_json":
      return { chat: full, body: { ...base, ...ask("Describe a person as JSON."), guided_json: SCHEMAS[size], max_tokens: full ? 48 : 6 } };
    case "guided_regex":
      return { chat: full, body: { ...base, ...ask("Give me a phone number."), guided_regex: REGEXES[size], max_tokens: full ? 12 : 3 } };
    case "json_object":
      // Full: a prompt SmolLM2 answers with a short object. Lean: max_tokens comes first, and
      // the engine closes the value in time.
      return {
        chat: full,
        body: { ...base, ...ask('Reply with the JSON object {"a": 1} and nothing else.'), response_format: { type: "json_object" }, max_tokens: full ? 24 : 3 },
      };
    case "closing": {
      const c = CLOSING[size];
      const constraint = c.schema ? { guided_json: c.schema } : { guided_regex: c.regex };
      return { chat: full, body: { ...base, ...ask("Tell me a very long story as JSON."), ...constraint, max_tokens: c.maxTokens } };
    }
    default:
      throw new Error(`no scenario ${name}`);
  }
}

/** Runs one completion through `engine` and returns what came back. */
export async function complete(engine, name, size, stream) {
  const { chat, body } = request(name, size, stream);
  const api = chat ? engine.chat.completions : engine.completions;
  const t0 = performance.now();
  const result = await api.create(body);
  if (!stream) {
    const [choice] = result.choices;
    return {
      name, stream, chat, object: result.object, id: result.id, model: result.model,
      text: chat ? choice.message.content : choice.text, finish: choice.finish_reason, usage: result.usage, ms: performance.now() - t0,
    };
  }
  let text = "";
  let finish = null;
  let usage = null;
  let chunks = 0;
  let role = null;
  const ids = new Set();
  for await (const chunk of result) {
    chunks++;
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (chat && c.delta.role) role = c.delta.role;
      text += (chat ? c.delta.content : c.text) ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { name, stream, chat, object: "stream", ids: [...ids], role, text, finish, usage, chunks, ms: performance.now() - t0 };
}

/**
 * Streams a long reply and aborts it after the first text arrives: the stream ends (the
 * in-page engine's semantics: an aborted stream just ends), quickly, and the engine then
 * serves the next request.
 */
export async function abortMidStream(engine, size) {
  const controller = new AbortController();
  const body = size === "full"
    ? { messages: [{ role: "user", content: "Tell me a long story." }], max_tokens: 200, stream: true, temperature: 0 }
    : { prompt: "a", max_tokens: 50, stream: true, temperature: 0 };
  const api = size === "full" ? engine.chat.completions : engine.completions;
  const stream = await api.create(body, { signal: controller.signal });
  let text = "";
  let abortedAt = null;
  let error = null;
  try {
    for await (const chunk of stream) {
      for (const c of chunk.choices) text += (size === "full" ? c.delta.content : c.text) ?? "";
      if (text && abortedAt === null) {
        abortedAt = performance.now();
        controller.abort();
      }
    }
  } catch (e) {
    error = { name: e.name, code: e.code, message: e.message };
  }
  return { text, error, msToEnd: performance.now() - abortedAt };
}

/** The official client through engine.fetch; `OpenAI` is the bundled class. */
export async function openaiClient(OpenAI, engine, size) {
  const client = new OpenAI({
    apiKey: "local",
    baseURL: "http://poot.local/v1",
    fetch: engine.fetch,
    dangerouslyAllowBrowser: true,
    maxRetries: 0,
  });
  const out = {};
  out.models = (await client.models.list()).data.map((m) => m.id);
  // A 400 reaches the client as its BadRequestError, with the OpenAI fields.
  try {
    await client.chat.completions.create({ model: engine.model.id, messages: [{ role: "user", content: "hi" }], guided_regex: 5 });
    out.badRequest = "no error";
  } catch (e) {
    out.badRequest = { name: e.constructor.name, status: e.status, param: e.param, code: e.code, message: e.message };
  }
  const { chat, body } = request("guided_regex", size, false);
  const reply = chat
    ? await client.chat.completions.create({ model: engine.model.id, ...body })
    : await client.completions.create({ model: engine.model.id, ...body });
  out.nonStreamed = { object: reply.object, text: chat ? reply.choices[0].message.content : reply.choices[0].text, finish: reply.choices[0].finish_reason };
  if (size === "full") {
    // Streamed, with the client's own SSE parser.
    const { body: sb } = request("guided_json", size, true);
    const stream = await client.chat.completions.create({ model: engine.model.id, ...sb });
    let text = "";
    let finish = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text += c.delta.content ?? "";
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    out.streamed = { text, finish };
  }
  return out;
}

/** A tool list with one schema the compiler refuses (`uniqueItems`) and one it takes. */
export const TOOLS = [
  { type: "function", function: { name: "tag", parameters: { type: "object", properties: { tags: { type: "array", items: { type: "string" }, uniqueItems: true } } } } },
  { type: "function", function: { name: "add", parameters: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] } } },
];

/**
 * Validation before any model work: a constraint field that loses precedence, and a tool
 * schema the compiler refuses where its call is forced, are 400s naming them. The full size
 * also runs a one-token request with the same tools under tool_choice "auto", whose refused
 * schema is only a warning (the lean size skips it: its prompt takes minutes on SwiftShader).
 */
export async function validation(engine, size) {
  const messages = [{ role: "user", content: "hi" }];
  const refusal = async (body) => {
    try {
      await engine.chat.completions.create({ messages, ...body });
      return "no error";
    } catch (e) {
      return { status: e.status, param: e.param, code: e.code, message: e.message };
    }
  };
  const out = {
    outranked: await refusal({ guided_choice: ["a"], guided_regex: "(a" }),
    forcedTool: await refusal({ tools: TOOLS, tool_choice: "required" }),
  };
  if (size === "full") {
    const reply = await engine.chat.completions.create({ messages, tools: TOOLS, max_tokens: 1 });
    out.autoWarnings = reply.warnings;
    // A named function: one call, parallel_tool_calls left at its default.
    const named = await engine.chat.completions.create({
      messages: [{ role: "user", content: "Add 2." }],
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "add" } },
      max_tokens: 40,
      temperature: 0,
    });
    out.namedCalls = named.choices[0].message.tool_calls?.map((c) => c.function.name) ?? [];
    // A Zod schema as response_format, parsed (with a worker engine, converted on this side).
    const { z } = await import("/pkg/node_modules/zod/index.js");
    const Person = z.object({ name: z.string().min(1).max(12), age: z.number().int().min(0).max(120) });
    const typed = await engine.chat.completions.parse({ messages: [{ role: "user", content: "Describe a person as JSON." }], response_format: Person, max_tokens: 40 });
    const { content, parsed } = typed.choices[0].message;
    out.typed = { content, parsed, valid: Person.safeParse(parsed).success };
  }
  return out;
}

/** Every scenario, in order: each constraint non-streamed then streamed, the abort, the client. */
export async function runSuite(engine, size, OpenAI) {
  const results = [];
  for (const name of ["guided_json", "guided_regex", "json_object", "closing"]) {
    for (const stream of [false, true]) results.push(await complete(engine, name, size, stream));
  }
  const abort = await abortMidStream(engine, size);
  const openai = await openaiClient(OpenAI, engine, size);
  const checks = await validation(engine, size);
  return { results, abort, openai, validation: checks };
}
