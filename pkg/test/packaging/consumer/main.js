// A tiny consumer of the published package, bundled by esbuild in test/packaging: it imports
// `poot` by name, compiles a constraint over a small token list, loads the reference model on
// the CPU backend and generates two constrained tokens. The wasm is found with
// `new URL("poot_bg.wasm", import.meta.url)`, next to the bundle.
import { compileConstraint, createEngine } from "poot";

async function main() {
  const vocabulary = { tokens: ["yes", "no", "<eos>"], eos: [2] };
  const matcher = await compileConstraint({ vocabulary, request: { guided_choice: ["no"] } });
  const mask = new Uint32Array(matcher.maskWords);
  matcher.fillMask(mask);
  matcher.free();
  const engine = await createEngine({ model: new URL("/model.gguf", location.href).href, backend: "cpu", cache: false });
  const reply = await engine.chat.completions.create({
    messages: [{ role: "user", content: "Is the sky green?" }],
    guided_choice: ["yes", "no"],
    max_tokens: 4,
    temperature: 0,
  });
  await engine.unload();
  return { mask: [...mask], backend: engine.backend.kind, answer: reply.choices[0].message.content };
}

window.consumer = main().catch((e) => ({ error: `${e.name}: ${e.message}` }));
