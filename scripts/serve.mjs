// Static server for the demo: `/` serves www/, `/pkg/` serves the built npm package
// (pkg/dist and pkg/wasm), and `/models/default.gguf` the bundled reference model
// ($POOT_REFERENCE_GGUF, fetched by scripts/fetch-model.sh) with its Content-Length, so the page
// can show download progress. Used by `make demo` and by the browser tests, so both see the
// same page. Binds 127.0.0.1 by default (a secure context, so WebGPU is available).
import { createServer } from "node:http";
import { createReadStream, statSync } from "node:fs";
import { extname, join, normalize, resolve, sep } from "node:path";
import { homedir } from "node:os";
import { fileURLToPath } from "node:url";

const repo = resolve(fileURLToPath(new URL("..", import.meta.url)));
const ROOTS = [
  ["/pkg/", join(repo, "pkg")],
  ["/", join(repo, "www")],
];
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".wasm": "application/wasm",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".gguf": "application/octet-stream",
  ".ts": "text/plain; charset=utf-8",
};

/** The reference model's path: $POOT_REFERENCE_GGUF, else where scripts/fetch-model.sh puts it. */
export function defaultModelPath() {
  if (process.env.POOT_REFERENCE_GGUF) return process.env.POOT_REFERENCE_GGUF;
  const cache = process.env.POOT_CACHE ?? join(homedir(), ".cache", "poot");
  return join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf");
}

function resolvePath(urlPath, model) {
  if (urlPath === "/models/default.gguf") return model;
  for (const [prefix, dir] of ROOTS) {
    if (!urlPath.startsWith(prefix)) continue;
    const relative = normalize(decodeURIComponent(urlPath.slice(prefix.length)));
    const file = resolve(dir, relative);
    // Refuse anything that escapes its root (`..`, absolute paths).
    if (file !== dir && !file.startsWith(dir + sep)) return null;
    return file;
  }
  return null;
}

/** Starts the server; resolves to `{ url, close() }`. Port 0 picks a free port. */
export function startServer({ host = "127.0.0.1", port = 8080, model = defaultModelPath() } = {}) {
  const server = createServer((req, res) => {
    let file = resolvePath(new URL(req.url ?? "/", "http://x").pathname, model);
    try {
      if (file && statSync(file).isDirectory()) file = join(file, "index.html");
      if (!file || !statSync(file).isFile()) throw new Error("not found");
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    res.writeHead(200, {
      "content-type": TYPES[extname(file)] ?? "application/octet-stream",
      "content-length": statSync(file).size,
      "cache-control": "no-cache",
      // Cross-origin isolation: performance.now() then ticks in 5 µs instead of 100 µs, which
      // is what the demo times each token mask with (masks take microseconds).
      "cross-origin-opener-policy": "same-origin",
      "cross-origin-embedder-policy": "require-corp",
    });
    if (req.method === "HEAD") res.end();
    else createReadStream(file).pipe(res);
  });
  return new Promise((ready, fail) => {
    server.once("error", fail);
    server.listen(port, host, () => {
      const { port: bound } = server.address();
      ready({
        url: `http://${host}:${bound}/`,
        close: () =>
          new Promise((done) => {
            server.close(done);
            server.closeAllConnections(); // keep-alive sockets too: the server is gone at once
          }),
      });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const i = args.indexOf(name);
    return i >= 0 && args[i + 1] ? args[i + 1] : fallback;
  };
  const { url } = await startServer({ host: option("--host", "127.0.0.1"), port: Number(option("--port", "8080")) });
  console.log(`poot demo: ${url}`);
}
