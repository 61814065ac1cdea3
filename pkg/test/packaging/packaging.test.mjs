// The package as a consumer gets it: `npm pack` (so the `files` and `exports` fields are what is
// tested), installed into a scratch node_modules, a tiny consumer (consumer/main.js, importing
// `poot` by name) bundled by esbuild for the browser, the wasm copied next to the bundle, and
// the bundle run in headless Chromium: it must find the .wasm through
// `new URL("poot_bg.wasm", import.meta.url)` and run the constraint API and the engine.
// A plain Node script (consumer/node.mjs) runs against the same install with no setup: the
// package reads its own .wasm from disk. The same consumer is also built for production by
// Vite and by webpack, which emit the .wasm themselves (hashed), and each build runs in
// Chromium. Prints the wasm's size, raw and gzipped.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { build } from "esbuild";
import { build as viteBuild } from "vite";
import webpack from "webpack";

import { launch, openPage } from "../browser/chromium.mjs";
import { startTestServer } from "../browser/pages/server.mjs";

const PKG = fileURLToPath(new URL("../..", import.meta.url));
const CONSUMER = fileURLToPath(new URL("./consumer/", import.meta.url));

let scratch;
let server;
let browser;
before(async () => {
  assert.ok(process.env.POOT_REFERENCE_GGUF, "POOT_REFERENCE_GGUF is not set (run `make test`)");
  scratch = mkdtempSync(join(tmpdir(), "poot-packaging-"));
});
after(async () => {
  await browser?.close();
  await server?.close();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

test("npm pack ships the README, dist, wasm and bin, and nothing else", () => {
  const out = execFileSync("npm", ["pack", "--json", "--pack-destination", scratch], { cwd: PKG, encoding: "utf8" });
  const [{ filename, files }] = JSON.parse(out);
  const paths = files.map((f) => f.path);
  for (const needed of ["package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/constraint.js", "dist/worker.js", "dist/engine.js", "dist/ai-sdk.js", "dist/ai-sdk.d.ts", "wasm/poot.js", "wasm/poot_instance.js", "wasm/poot_instance.d.ts", "wasm/poot_bg.wasm", "bin/poot.js"]) {
    assert.ok(paths.includes(needed), `${needed} is not in the tarball`);
  }
  const stray = paths.filter((p) => !/^(package\.json|README\.md|LICENSE.*|dist\/|wasm\/|bin\/)/.test(p));
  assert.deepEqual(stray, [], "only dist, wasm and bin are published");
  assert.deepEqual(paths.filter((p) => p.startsWith("dist/testing.")), [], "the test-only hooks are not published");
  mkdirSync(join(scratch, "node_modules", "poot"), { recursive: true });
  execFileSync("tar", ["-xzf", join(scratch, filename), "-C", join(scratch, "node_modules", "poot"), "--strip-components=1"]);
  // `ai` and `@ai-sdk/provider` are optional peers: the plain API needs neither (the consumers
  // below run with neither installed), and only poot/ai-sdk imports them.
  const manifest = JSON.parse(readFileSync(join(scratch, "node_modules", "poot", "package.json"), "utf8"));
  assert.deepEqual(Object.keys(manifest.dependencies ?? {}), ["@standard-schema/spec"]);
  assert.deepEqual(manifest.peerDependenciesMeta, { "@ai-sdk/provider": { optional: true }, ai: { optional: true } });
  assert.equal(manifest.exports["./ai-sdk"].default, "./dist/ai-sdk.js");
  const imports = (file) => [...readFileSync(join(scratch, "node_modules", "poot", "dist", file), "utf8").matchAll(/from "([^".][^"]*)"/g)].map((m) => m[1]);
  assert.deepEqual(imports("index.js"), [], "the main entry imports no other package");
  assert.deepEqual(imports("ai-sdk.js"), ["@ai-sdk/provider"]);
});

test("a plain Node script importing `poot` runs with no setup, after a failed load", { timeout: 300_000 }, () => {
  const script = join(scratch, "node-consumer.mjs");
  copyFileSync(join(CONSUMER, "node.mjs"), script);
  const out = execFileSync(process.execPath, [script], { cwd: scratch, encoding: "utf8", env: process.env });
  const got = JSON.parse(out.trim().split("\n").at(-1));
  assert.equal(typeof got.failed, "string", "the bad source was refused");
  assert.deepEqual(got.mask, [0b010], "the constraint API: only `no`");
  assert.ok(["yes", "no"].includes(got.answer), `the engine answered ${JSON.stringify(got.answer)}`);
});

test("an esbuild bundle importing `poot` runs in Chromium and finds its wasm by import.meta.url", { timeout: 300_000 }, async () => {
  const app = join(scratch, "app");
  const out = join(scratch, "out");
  mkdirSync(app, { recursive: true });
  mkdirSync(out, { recursive: true });
  copyFileSync(join(CONSUMER, "main.js"), join(app, "main.js"));
  copyFileSync(join(CONSUMER, "index.html"), join(out, "index.html"));
  const result = await build({
    entryPoints: [join(app, "main.js")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    minify: true,
    outfile: join(out, "main.js"),
    absWorkingDir: scratch,
    logLevel: "silent",
    metafile: true,
  });
  assert.deepEqual(result.errors, []);
  // The modules that put bytes into the bundle (sideEffects: false lets esbuild drop the rest).
  const [output] = Object.values(result.metafile.outputs);
  const inputs = Object.entries(output.inputs).filter(([, i]) => i.bytesInOutput > 0).map(([p]) => p);
  assert.ok(inputs.some((p) => p.startsWith("node_modules/poot/dist/")), `poot resolved from the installed package: ${inputs.join(", ")}`);
  const remote = inputs.filter((p) => p.includes("/remote/"));
  assert.deepEqual(remote, [], "the remote client is not bundled into a consumer that does not use it");
  // esbuild leaves `new URL("poot_bg.wasm", import.meta.url)` alone: the wasm goes next to the bundle.
  const bundle = readFileSync(join(out, "main.js"), "utf8");
  assert.match(bundle, /new URL\("poot_bg\.wasm",import\.meta\.url\)/);
  copyFileSync(join(scratch, "node_modules/poot/wasm/poot_bg.wasm"), join(out, "poot_bg.wasm"));

  server = await startTestServer({ extra: { "/bundle/": out } });
  browser = await launch();
  const { page, errors } = await openPage(browser.context, `${server.url}bundle/index.html`);
  await page.waitForFunction(() => window.consumer !== undefined, null, { timeout: 60_000 });
  const got = await page.evaluate(() => window.consumer);
  assert.equal(got.error, undefined, got.error);
  assert.deepEqual(got.mask, [0b010], "the constraint API: only `no`");
  assert.equal(got.backend, "cpu");
  assert.ok(["yes", "no"].includes(got.answer), `the engine answered ${JSON.stringify(got.answer)}`);
  assert.ok(server.requests.includes("/bundle/poot_bg.wasm"), `the wasm next to the bundle was fetched: ${server.requests.join(" ")}`);
  assert.deepEqual(errors, []);

  const wasm = readFileSync(join(out, "poot_bg.wasm"));
  const kib = (n) => `${(n / 1024).toFixed(0)} KiB`;
  console.log(
    `wasm: ${kib(wasm.length)} raw, ${kib(gzipSync(wasm, { level: 9 }).length)} gzipped; ` +
      `bundle: ${kib(statSync(join(out, "main.js")).size)} (${kib(gzipSync(bundle, { level: 9 }).length)} gzipped); ` +
      `files next to it: ${readdirSync(out).join(", ")}`,
  );
});

/**
 * Runs the consumer page under `out` (served at /{name}/) in Chromium and checks what it did:
 * the constraint API, the engine's answer, and that the wasm it fetched is `wasmPath`.
 */
async function runConsumer(name, out, wasmPattern) {
  const own = await startTestServer({ extra: { [`/${name}/`]: out } });
  try {
    browser ??= await launch();
    const { page, errors } = await openPage(browser.context, `${own.url}${name}/index.html`);
    await page.waitForFunction(() => window.consumer !== undefined, null, { timeout: 60_000 });
    const got = await page.evaluate(() => window.consumer);
    assert.equal(got.error, undefined, got.error);
    assert.deepEqual(got.mask, [0b010], `${name}: the constraint API: only \`no\``);
    assert.equal(got.backend, "cpu");
    assert.ok(["yes", "no"].includes(got.answer), `${name}: the engine answered ${JSON.stringify(got.answer)}`);
    const fetched = own.requests.filter((r) => r.startsWith(`/${name}/`) && r.endsWith(".wasm"));
    assert.equal(fetched.length, 1, `${name}: one wasm fetched: ${own.requests.join(" ")}`);
    assert.match(fetched[0], wasmPattern, `${name}: the wasm the bundler emitted`);
    assert.deepEqual(errors, []);
  } finally {
    await own.close();
  }
}

test("a Vite production build importing `poot` runs in Chromium, the wasm emitted by Vite", { timeout: 300_000 }, async () => {
  const app = join(scratch, "vite-app");
  const out = join(scratch, "vite-out");
  mkdirSync(app, { recursive: true });
  copyFileSync(join(CONSUMER, "main.js"), join(app, "main.js"));
  copyFileSync(join(CONSUMER, "index.html"), join(app, "index.html"));
  await viteBuild({
    root: app,
    base: "./",
    logLevel: "silent",
    configFile: false,
    build: { outDir: out, emptyOutDir: true, target: "es2022" },
  });
  // Vite follows new URL("poot_bg.wasm", import.meta.url) and emits the file, hashed.
  const assets = readdirSync(join(out, "assets"));
  assert.ok(assets.some((f) => /^poot_bg-.*\.wasm$/.test(f)), `assets: ${assets.join(", ")}`);
  await runConsumer("vite", out, /^\/vite\/assets\/poot_bg-.*\.wasm$/);
});

test("a webpack production build importing `poot` runs in Chromium, the wasm emitted by webpack", { timeout: 300_000 }, async () => {
  const out = join(scratch, "webpack-out");
  const stats = await new Promise((resolve, reject) =>
    webpack(
      {
        mode: "production",
        context: scratch,
        entry: join(CONSUMER, "main.js"),
        resolve: { modules: [join(scratch, "node_modules")] },
        output: { path: out, filename: "main.js", publicPath: "auto", clean: true },
        target: "web",
      },
      (err, stats) => (err ? reject(err) : resolve(stats)),
    ),
  );
  assert.deepEqual(stats.compilation.errors.map(String), []);
  copyFileSync(join(CONSUMER, "index.html"), join(out, "index.html"));
  // webpack 5 turns new URL("poot_bg.wasm", import.meta.url) into an asset of its own.
  const wasm = readdirSync(out).filter((f) => f.endsWith(".wasm"));
  assert.equal(wasm.length, 1, `out: ${readdirSync(out).join(", ")}`);
  await runConsumer("webpack", out, /^\/webpack\/[0-9a-f]+\.wasm$/);
});
