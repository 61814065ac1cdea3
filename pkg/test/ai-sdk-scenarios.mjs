// The AI SDK provider's scenarios, run by the real `ai` package over a real engine: in Node
// (test/node/ai-sdk.test.mjs) and bundled by esbuild into a Chromium page
// (test/browser/ai-sdk.test.mjs). Each returns plain data; checkAiSdk() holds the assertions.
import { generateObject, generateText, Output, stepCountIs, streamObject, streamText, tool } from "ai";
import { UnsupportedFunctionalityError } from "@ai-sdk/provider";
import { z } from "zod";

export const PERSON = z.object({ name: z.string().max(24), age: z.number().int().min(0).max(150) });
const PROMPT = "Ada Lovelace died at 36. Give her name and age.";

/**
 * `engine` wrapped so that every request the provider makes is recorded, and every streamed
 * chunk with the time it was handed over (for the abort bound).
 */
export function recording(engine) {
  const requests = [];
  const signals = [];
  const chunks = [];
  const create = async (req, opts) => {
    requests.push(structuredClone(req));
    signals.push(opts?.signal);
    const reply = await engine.chat.completions.create(req, opts);
    if (!req.stream) return reply;
    return {
      async *[Symbol.asyncIterator]() {
        for await (const chunk of reply) {
          chunks.push({ at: performance.now(), chunk });
          yield chunk;
        }
      },
    };
  };
  return { engine: { ...engine, backend: engine.backend, model: engine.model, chat: { completions: { create } } }, requests, signals, chunks };
}

export async function runAiSdkScenarios({ createPoot, engine }) {
  globalThis.AI_SDK_LOG_WARNINGS = false;
  const rec = recording(engine);
  const poot = createPoot({ engine: rec.engine });
  const model = poot("SmolLM2-135M-Instruct");
  const out = { modelSpec: model.specificationVersion, supportedUrls: model.supportedUrls };
  const mark = () => rec.requests.length;

  // generateObject with a Zod schema: constrained, so valid on the first try.
  let at = mark();
  const object = await generateObject({ model, schema: PERSON, prompt: PROMPT, temperature: 0 });
  out.generateObject = {
    object: object.object,
    valid: PERSON.safeParse(object.object).success,
    finishReason: object.finishReason,
    usage: object.usage,
    requests: rec.requests.slice(at),
  };

  // generateText with an output schema: the same constraint.
  at = mark();
  const text = await generateText({ model, output: Output.object({ schema: PERSON }), prompt: PROMPT, temperature: 0 });
  out.outputObject = { output: text.output, valid: PERSON.safeParse(text.output).success, requests: rec.requests.slice(at) };

  // streamObject: partial objects as tokens arrive, then the whole.
  const streamed = streamObject({ model, schema: PERSON, prompt: PROMPT, temperature: 0 });
  const partials = [];
  for await (const partial of streamed.partialObjectStream) partials.push(structuredClone(partial));
  const final = await streamed.object;
  out.streamObject = { partials, final, valid: PERSON.safeParse(final).success };

  // A forced tool, then a second step that reads its result.
  at = mark();
  const executed = [];
  const weather = tool({
    description: "The current weather in a city",
    inputSchema: z.object({ city: z.string().max(40) }),
    execute: async ({ city }) => {
      executed.push(city);
      return { city, tempC: 21, sky: "sunny" };
    },
  });
  const loop = await generateText({
    model,
    prompt: "What is the weather in Paris?",
    temperature: 0,
    maxOutputTokens: 40,
    tools: { weather },
    toolChoice: { type: "tool", toolName: "weather" },
    stopWhen: stepCountIs(2),
    prepareStep: ({ stepNumber }) => (stepNumber === 1 ? { toolChoice: "none" } : undefined),
  });
  out.tools = {
    steps: loop.steps.map((s) => ({
      finishReason: s.finishReason,
      toolCalls: s.toolCalls.map((c) => ({ toolCallId: c.toolCallId, toolName: c.toolName, input: c.input })),
      toolResults: s.toolResults.map((r) => ({ toolCallId: r.toolCallId, output: r.output })),
      text: s.text,
    })),
    executed,
    requests: rec.requests.slice(at),
  };

  // The forced tool through streamText: the call arrives as stream parts.
  const streamedTool = streamText({
    model,
    prompt: "What is the weather in Oslo?",
    temperature: 0,
    tools: { weather: { ...weather, execute: undefined } },
    toolChoice: "required",
  });
  const toolParts = [];
  for await (const part of streamedTool.fullStream) {
    if (part.type.startsWith("tool-")) toolParts.push({ type: part.type, toolName: part.toolName, input: part.input });
  }
  out.streamTool = { parts: toolParts, finishReason: await streamedTool.finishReason };

  // Settings, usage and finish reasons: 5 tokens of free text end on `length`.
  at = mark();
  const short = await generateText({
    model,
    system: "You count in English words.",
    prompt: "Count from one to twenty.",
    maxOutputTokens: 5,
    temperature: 0.7,
    topP: 0.9,
    topK: 40,
    seed: 7,
    stopSequences: ["twenty"],
  });
  out.settings = { finishReason: short.finishReason, rawFinishReason: short.rawFinishReason, usage: short.usage, requests: rec.requests.slice(at) };

  // Abort: generation stops within one step of abort().
  const controller = new AbortController();
  const before = rec.chunks.length;
  let abortedAt = 0;
  let deltas = 0;
  const aborted = streamText({ model, prompt: "Write a long story about a lighthouse.", maxOutputTokens: 200, temperature: 0, abortSignal: controller.signal });
  let ended = "";
  try {
    for await (const part of aborted.fullStream) {
      if (part.type === "text-delta" && ++deltas === 3) {
        abortedAt = performance.now();
        controller.abort();
      }
      if (part.type === "abort" || part.type === "error") ended = part.type;
    }
  } catch (e) {
    ended = `threw ${e?.name}`;
  }
  const endedAt = performance.now();
  const after = rec.chunks.slice(before).filter((c) => c.at > abortedAt);
  // The SDK's signal reaches the engine, which stops within a step (the engine's own tests).
  const signal = rec.signals.at(-1);
  out.abort = { deltas, ended, chunksAfterAbort: after.length, msToEnd: endedAt - abortedAt, signalPassed: signal?.aborted === true };
  // The engine is free again at once: the next request runs.
  const next = await generateText({ model, prompt: "Say yes.", maxOutputTokens: 3, temperature: 0 });
  out.abort.next = next.text;

  // Capabilities: image input is refused up front, as the SDK's own error.
  try {
    await generateText({
      model,
      messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image", image: new Uint8Array([137, 80, 78, 71]), mediaType: "image/png" }] }],
    });
    out.image = { refused: false };
  } catch (e) {
    out.image = { refused: true, unsupported: UnsupportedFunctionalityError.isInstance(e), message: String(e?.message) };
  }
  return out;
}

/** The assertions over runAiSdkScenarios' result, for Node and Chromium alike. */
export function checkAiSdk(out, assert, where) {
  assert.equal(out.modelSpec, "v4", where);
  assert.deepEqual(out.supportedUrls, {}, `${where}: no URL is read by the model`);

  const g = out.generateObject;
  assert.ok(g.valid, `${where}: generateObject gave ${JSON.stringify(g.object)}`);
  assert.equal(g.finishReason, "stop", where);
  assert.ok(g.usage.inputTokens > 0 && g.usage.outputTokens > 0, `${where}: usage ${JSON.stringify(g.usage)}`);
  assert.equal(g.requests.length, 1, `${where}: one request, no repair round`);
  const format = g.requests[0].response_format;
  assert.equal(format.type, "json_schema", `${where}: the schema constrains decoding`);
  assert.equal(format.json_schema.strict, true);
  assert.deepEqual(format.json_schema.schema.required, ["name", "age"]);

  assert.ok(out.outputObject.valid, `${where}: Output.object gave ${JSON.stringify(out.outputObject.output)}`);
  assert.equal(out.outputObject.requests[0].response_format.type, "json_schema", where);

  const s = out.streamObject;
  assert.ok(s.valid, `${where}: streamObject's final value ${JSON.stringify(s.final)}`);
  assert.ok(s.partials.length >= 3, `${where}: ${s.partials.length} partials`);
  assert.deepEqual(s.partials.at(-1), s.final, `${where}: the last partial is the value`);
  // A growing object: each partial's finished fields are kept by the next one.
  for (let i = 1; i < s.partials.length; i++) {
    for (const key of Object.keys(s.partials[i - 1])) assert.ok(key in s.partials[i], `${where}: partial ${i} lost ${key}`);
  }

  const t = out.tools;
  assert.equal(t.steps.length, 2, `${where}: two steps: ${JSON.stringify(t.steps)}`);
  assert.equal(t.steps[0].finishReason, "tool-calls", where);
  assert.equal(t.steps[0].toolCalls.length, 1, where);
  const [call] = t.steps[0].toolCalls;
  assert.equal(call.toolName, "weather");
  assert.equal(typeof call.input.city, "string", `${where}: the call's input, parsed: ${JSON.stringify(call.input)}`);
  assert.deepEqual(t.executed, [call.input.city], `${where}: the tool ran with the parsed input`);
  assert.deepEqual(t.steps[0].toolResults, [{ toolCallId: call.toolCallId, output: { city: call.input.city, tempC: 21, sky: "sunny" } }]);
  assert.deepEqual(t.requests[0].tool_choice, { type: "function", function: { name: "weather" } }, `${where}: the named tool is forced`);
  assert.equal(t.requests[0].tools[0].function.name, "weather");
  assert.equal(t.requests[0].tools[0].function.parameters.type, "object");
  // The second step sends the call and its result back.
  const second = t.requests[1].messages;
  const assistant = second.find((m) => m.role === "assistant");
  assert.equal(assistant.tool_calls[0].id, call.toolCallId, where);
  assert.deepEqual(JSON.parse(assistant.tool_calls[0].function.arguments), call.input);
  const result = second.find((m) => m.role === "tool");
  assert.equal(result.tool_call_id, call.toolCallId, where);
  assert.deepEqual(JSON.parse(result.content), { city: call.input.city, tempC: 21, sky: "sunny" });
  assert.equal(t.requests[1].tool_choice, "none", where);
  assert.ok(t.steps[1].text.length > 0, `${where}: the second step answered`);

  const st = out.streamTool;
  const types = st.parts.map((p) => p.type);
  for (const type of ["tool-input-start", "tool-input-delta", "tool-input-end", "tool-call"]) assert.ok(types.includes(type), `${where}: ${type} in ${types}`);
  const streamedCall = st.parts.find((p) => p.type === "tool-call");
  assert.equal(streamedCall.toolName, "weather");
  assert.equal(typeof streamedCall.input.city, "string", `${where}: ${JSON.stringify(streamedCall.input)}`);
  assert.equal(st.finishReason, "tool-calls", where);

  const set = out.settings;
  assert.equal(set.finishReason, "length", where);
  assert.equal(set.rawFinishReason, "length", where);
  assert.equal(set.usage.outputTokens, 5, `${where}: ${JSON.stringify(set.usage)}`);
  const sent = set.requests[0];
  assert.deepEqual(sent.messages, [
    { role: "system", content: "You count in English words." },
    { role: "user", content: "Count from one to twenty." },
  ]);
  assert.deepEqual(
    { max_tokens: sent.max_tokens, temperature: sent.temperature, top_p: sent.top_p, top_k: sent.top_k, seed: sent.seed, stop: sent.stop },
    { max_tokens: 5, temperature: 0.7, top_p: 0.9, top_k: 40, seed: 7, stop: ["twenty"] },
    where,
  );

  const a = out.abort;
  assert.equal(a.deltas, 3, `${where}: the stream stopped after abort: ${JSON.stringify(a)}`);
  assert.ok(a.ended === "abort" || a.ended.startsWith("threw"), `${where}: ${JSON.stringify(a)}`);
  assert.equal(a.signalPassed, true, `${where}: the SDK's abort signal reached the engine`);
  assert.ok(a.chunksAfterAbort <= 1, `${where}: the engine stopped within one step: ${a.chunksAfterAbort} chunks after abort()`);
  assert.ok(a.next.length > 0, `${where}: the next request ran`);

  assert.equal(out.image.refused, true, `${where}: an image input is refused`);
  assert.equal(out.image.unsupported, true, `${where}: as UnsupportedFunctionalityError: ${out.image.message}`);
}
