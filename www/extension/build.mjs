// Makes www/extension/ loadable unpacked: copies the built package (pkg/dist, pkg/wasm) into
// www/extension/poot/ and the demo's schema checker next to it. An extension can load only its
// own files. Run after `make build`: node www/extension/build.mjs
import { cpSync, existsSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
for (const dir of ["dist", "wasm"]) {
  if (!existsSync(here(`../../pkg/${dir}`))) throw new Error(`pkg/${dir} is missing: run \`make build\` first`);
  rmSync(here(`poot/${dir}`), { recursive: true, force: true });
  cpSync(here(`../../pkg/${dir}`), here(`poot/${dir}`), { recursive: true, filter: (src) => !src.endsWith(".map") });
}
cpSync(here("../validate.js"), here("validate.js"));
console.log(`extension ready to load unpacked: ${here(".")}`);
