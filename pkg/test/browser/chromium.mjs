// Headless Chromium with WebGPU, launched the way ENVIRONMENT.md's recipe says: the system
// Chromium (never a downloaded one), a fresh profile, and no background networking.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const CHROMIUM = process.env.POOT_CHROMIUM ?? "/usr/bin/chromium";

export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), "poot-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--enable-unsafe-webgpu",
      "--no-sandbox",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Opens `url` in a new page and records every console error and uncaught exception. */
export async function openPage(context, url) {
  const page = await context.newPage();
  const errors = [];
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  return { page, errors };
}
