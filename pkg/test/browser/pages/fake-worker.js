// A module worker serving a fake engine (fast, no model) for the crash tests, plus three ways
// to die on request: an uncaught error, self.close(), and a hang (for worker.terminate()).
import { serveEngine } from "/pkg/dist/index.js";

const tick = (ms) => new Promise((r) => setTimeout(r, ms));

serveEngine(self, {
  async create(opts) {
    opts.onProgress?.({ phase: "parse", loaded: 1, total: 1 });
    const create = async (req, o = {}) => {
      if (!req.stream) {
        await new Promise((_, reject) => o.signal?.addEventListener("abort", () => reject(o.signal.reason)));
      }
      return (async function* () {
        for (let i = 0; ; i++) {
          if (o.signal?.aborted) throw o.signal.reason;
          yield { id: "fake", object: "chat.completion.chunk", created: 0, model: "fake", choices: [{ index: 0, delta: { content: `t${i}` }, finish_reason: null }] };
          await tick(10);
        }
      })();
    };
    return {
      backend: { kind: "cpu", reason: "fake engine" },
      model: { id: "fake", contextLength: 16, bytes: 0 },
      chat: { completions: { create } },
      completions: { create },
      models: { list: async () => ({ object: "list", data: [] }) },
      fetch: null,
      unload: async () => {},
    };
  },
});

self.addEventListener("message", (e) => {
  if (e.data?.kind === "test-throw") setTimeout(() => { throw new Error("boom in the worker"); });
  if (e.data?.kind === "test-close") self.close();
});
