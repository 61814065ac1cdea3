// The page: the AI SDK's streamObject on a model loaded in a Web Worker by poot/ai-sdk.
// `?model=URL` picks the GGUF file (default: the reference model next to the page).
import { streamObject } from "ai";
import { z } from "zod";
import { createPoot } from "poot/ai-sdk";

const $ = (id) => document.getElementById(id);
const person = z.object({
  name: z.string().describe("the person's full name"),
  age: z.number().int().min(0).max(150),
  city: z.string().describe("where they died"),
});

const poot = createPoot({
  worker: () => new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module" }),
  model: new URL(new URLSearchParams(location.search).get("model") ?? "SmolLM2-135M-Instruct.Q4_1.gguf", location.href).href,
  onProgress: (p) => {
    $("progress").max = p.total ?? 1;
    $("progress").value = p.loaded;
    $("status").textContent = `${p.phase}: ${(p.loaded / 1e6).toFixed(1)} MB`;
  },
});

async function extract() {
  $("run").disabled = true;
  const stream = streamObject({ model: poot(), schema: person, prompt: $("prompt").value, temperature: 0 });
  for await (const partial of stream.partialObjectStream) $("out").textContent = JSON.stringify(partial, null, 2);
  const object = await stream.object;
  $("run").disabled = false;
  return object;
}

try {
  const engine = await poot.engine();
  $("status").textContent = `ready: ${engine.model.id} on ${engine.backend.kind}`;
  $("run").disabled = false;
  $("run").onclick = extract;
  window.result = { object: await extract() };
} catch (e) {
  $("status").textContent = String(e);
  window.result = { error: String(e) };
}
