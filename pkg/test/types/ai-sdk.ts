// Type-level test of poot/ai-sdk against the real `ai` and `@ai-sdk/provider` declarations
// (compiled by `tsc -p test/types`, nothing runs): the provider's model is the SDK's
// LanguageModel, and generateObject / streamObject / Output.object infer the Zod schema's type.
import { generateObject, generateText, Output, streamObject, type LanguageModel } from "ai";
import type { LanguageModelV4 } from "@ai-sdk/provider";
import { z } from "zod";

import { createEngine, createWorkerEngine } from "../../src/index.js";
import { createPoot, type PootProvider } from "../../src/ai-sdk.js";

declare const worker: Worker;
const person = z.object({ name: z.string(), age: z.number() });

export async function typed() {
  const poot: PootProvider = createPoot({ engine: createEngine({ model: "/m.gguf" }) });
  createPoot({ engine: await createWorkerEngine(worker, { model: "/m.gguf" }) });
  createPoot({ model: "/m.gguf", onProgress: (p) => p.loaded satisfies number });
  createPoot({ worker: () => worker, model: "/m.gguf", backend: "cpu" });
  // @ts-expect-error: neither an engine nor a model
  createPoot({ backend: "cpu" });

  const model: LanguageModel = poot();
  const spec: LanguageModelV4 = poot.languageModel("SmolLM2");
  void spec;

  const { object } = await generateObject({ model, schema: person, prompt: "x" });
  object.name satisfies string;
  object.age satisfies number;
  // @ts-expect-error: not in the schema
  void object.email;

  const { output } = await generateText({ model, output: Output.object({ schema: person }), prompt: "x" });
  output.age satisfies number;

  const streamed = streamObject({ model, schema: person, prompt: "x" });
  for await (const partial of streamed.partialObjectStream) partial.name satisfies string | undefined;
  (await streamed.object).name satisfies string;
}
