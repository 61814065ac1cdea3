// The demo's service worker: keeps the page, the package's JavaScript and the wasm, so a second
// visit works with the network off. Network first (a rebuilt package is picked up at once),
// the cached copy when the network fails. The model is not cached here: the engine keeps it in
// Cache Storage itself ("poot-models"), and /models/ requests pass straight through.
const CACHE = "poot-demo-shell-v1";
const SHELL = ["./", "./index.html", "./style.css", "./app.js", "./validate.js", "./engine-worker.js", "./kernel.html", "./kernel.js",
  "/pkg/wasm/poot.js", "/pkg/wasm/poot_instance.js", "/pkg/wasm/poot_bg.wasm"];

/** The package's modules: /pkg/dist/index.js and everything it imports, found by reading them. */
async function packageModules() {
  const seen = new Set();
  const tried = new Set();
  const queue = [new URL("/pkg/dist/index.js", self.location.href).href];
  while (queue.length) {
    const url = queue.shift();
    if (seen.has(url) || tried.has(url)) continue;
    seen.add(url);
    tried.add(url);
    const response = await fetch(url, { cache: "no-cache" }).catch(() => null);
    if (!response?.ok) {
      seen.delete(url); // a false match (say, in a comment): skip it
      continue;
    }
    const text = await response.text();
    for (const m of text.matchAll(/(?:import|export)\s[^;]*?from\s*["']([^"']+)["']|import\s*\(?\s*["']([^"']+)["']/g)) {
      const spec = m[1] ?? m[2];
      if (spec.startsWith(".") || spec.startsWith("/")) queue.push(new URL(spec, url).href);
    }
  }
  return [...seen];
}

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // A Set: addAll rejects a list that names one URL twice (dist/wasm.js imports the glue).
    const urls = new Set([...SHELL.map((p) => new URL(p, self.location.href).href), ...(await packageModules())]);
    await cache.addAll([...urls]);
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin || url.pathname.startsWith("/models/")) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const response = await fetch(event.request);
      if (response.ok) await cache.put(event.request, response.clone());
      return response;
    } catch (e) {
      const cached = await cache.match(event.request, { ignoreSearch: true });
      if (cached) return cached;
      throw e;
    }
  })());
});
