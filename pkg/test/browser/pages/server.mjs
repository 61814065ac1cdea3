// The browser tests' static server: `/pkg/` serves the package directory (dist, wasm, these
// pages), `/model.gguf` the reference model (POOT_REFERENCE_GGUF), and `extra` maps more URL
// prefixes to directories (a bundle built by a test). Binds 127.0.0.1, a secure context, so
// WebGPU and Web Locks are available. Not a test file itself.
import { createServer } from "node:http";
import { createReadStream, statSync } from "node:fs";
import { extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const PKG = resolve(fileURLToPath(new URL("../../..", import.meta.url)));
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".wasm": "application/wasm",
  ".gguf": "application/octet-stream",
};

/** Starts the server on a free port; resolves to `{ url, close(), requests }`. */
export function startTestServer({ model = process.env.POOT_REFERENCE_GGUF, extra = {} } = {}) {
  const roots = [...Object.entries(extra), ["/pkg/", PKG]];
  const requests = [];
  const fileFor = (path) => {
    if (path === "/model.gguf") return model ?? null;
    for (const [prefix, dir] of roots) {
      if (!path.startsWith(prefix)) continue;
      const file = resolve(dir, normalize(decodeURIComponent(path.slice(prefix.length))));
      return file === dir || file.startsWith(dir + sep) ? file : null;
    }
    return null;
  };
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    requests.push(path);
    if (path === "/favicon.ico") return void res.writeHead(204).end(); // no 404 in the console
    let file = fileFor(path);
    let size;
    try {
      if (file && statSync(file).isDirectory()) file = join(file, "index.html");
      if (!file || !statSync(file).isFile()) throw new Error("not found");
      size = statSync(file).size;
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    res.writeHead(200, {
      "content-type": TYPES[extname(file)] ?? "application/octet-stream",
      "content-length": String(size),
      "cache-control": "no-cache",
    });
    if (req.method === "HEAD") res.end();
    else createReadStream(file).pipe(res);
  });
  return new Promise((ready, fail) => {
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      ready({
        url: `http://127.0.0.1:${port}/`,
        requests,
        close: () => new Promise((done) => (server.closeAllConnections(), server.close(done))),
      });
    });
  });
}
