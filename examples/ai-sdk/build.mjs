// Builds the page into examples/ai-sdk/dist/ with esbuild: main.js and engine-worker.js bundled
// with `ai`, `zod` and the package (the repository's pkg/, as `poot`), the .wasm copied next to
// them (the glue finds it by `new URL("poot_bg.wasm", import.meta.url)`).
//
//   make build && node examples/ai-sdk/build.mjs && cp SmolLM2-135M-Instruct.Q4_1.gguf examples/ai-sdk/dist/
//   then serve examples/ai-sdk/dist/ over HTTP and open index.html
//
// An app that installed `poot`, `ai` and `zod` from npm needs no resolver: its bundler reads
// the package's `exports`.
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = fileURLToPath(new URL(".", import.meta.url));
const PKG = fileURLToPath(new URL("../../pkg/", import.meta.url));
const { build } = createRequire(join(PKG, "package.json"))("esbuild");

export async function buildExample(out = join(HERE, "dist")) {
  mkdirSync(out, { recursive: true });
  const entries = { "/": "index.js", "/ai-sdk": "ai-sdk.js" };
  await build({
    entryPoints: [join(HERE, "main.js"), join(HERE, "engine-worker.js")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    minify: true,
    outdir: out,
    nodePaths: [join(PKG, "node_modules")],
    logLevel: "warning",
    plugins: [
      {
        name: "poot-from-this-repository",
        setup(b) {
          b.onResolve({ filter: /^poot(\/ai-sdk)?$/ }, (args) => ({ path: join(PKG, "dist", entries[args.path.slice(4) || "/"]) }));
        },
      },
    ],
  });
  copyFileSync(join(HERE, "index.html"), join(out, "index.html"));
  copyFileSync(join(PKG, "wasm", "poot_bg.wasm"), join(out, "poot_bg.wasm"));
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(`built ${await buildExample()}`);
