// A module worker serving the real engine with the test-only panic hook (crash.test.mjs): the
// message `{ kind: "test-panic", inFuture }` (no id, so serveEngine ignores it) arms the engine
// served here, whose next step then panics in wasm (armDebugPanic, from dist/testing.js).
import { createEngine, serveEngine } from "/pkg/dist/index.js";
import { armDebugPanic } from "/pkg/dist/testing.js";

let engine;
serveEngine(self, { create: async (opts) => (engine = await createEngine(opts)) });
self.addEventListener("message", (event) => {
  if (event.data?.kind === "test-panic") armDebugPanic(engine, event.data.inFuture === true);
});
