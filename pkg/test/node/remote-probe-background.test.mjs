// An inconclusive probe (a cold or unreachable server) is retried in the background: a caller
// waits for the first probe only; once it is due again (UNPROBED_RETRY_MS), calls go on with
// what the first one found while the retry runs, and a retry that succeeds is used from then on.
import { test, after } from "node:test";
import assert from "node:assert/strict";

import { createRemoteClient, forgetProbes, UNPROBED_RETRY_MS } from "../../dist/remote/index.js";
import { providerServer } from "../fixtures/remote/fake-openai.mjs";

const servers = [];
after(async () => {
  for (const s of servers) await s.close();
});

const isProbe = (r) => r.method === "POST" && JSON.stringify(r.body).includes("poot_probe");
const settle = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("a due inconclusive probe runs in the background, never on a caller's path again", async () => {
  forgetProbes();
  let hang = true;
  const server = await providerServer("vllm012", { override: (r) => (hang && isProbe(r) ? { hang: true } : null) });
  servers.push(server);
  let offset = 0;
  const clock = { now: () => Date.now() + offset };
  const PROBE_MS = 400;
  const client = createRemoteClient({ baseURL: server.url, model: "fake-model", probeTimeoutMs: PROBE_MS, clock });
  const messages = [{ role: "user", content: "A name, as JSON." }];
  const schema = { type: "object", properties: { name: { type: "string" } }, required: ["name"] };

  // The first probe is on the first caller's path: it hangs until its time limit.
  const first = await client.probe();
  assert.equal(first.probed, false);
  const probes = () => server.requests.filter(isProbe).length;
  const afterFirst = probes();

  // Due again: the call answers without waiting for the retry, which starts in the background.
  offset += UNPROBED_RETRY_MS + 1;
  let t0 = Date.now();
  const during = await client.structured({ messages, schema });
  assert.ok(Date.now() - t0 < PROBE_MS, `the call waited ${Date.now() - t0} ms for a probe`);
  assert.equal(typeof during.value.name, "string");
  await settle(50);
  assert.ok(probes() > afterFirst, "a background probe was sent");
  // A second call while the retry runs does not start another one, nor wait for it.
  const running = probes();
  t0 = Date.now();
  await client.structured({ messages, schema });
  assert.ok(Date.now() - t0 < PROBE_MS);
  await settle(PROBE_MS + 200);
  assert.equal((await client.probe()).probed, false, "the hung retry is inconclusive too");
  assert.ok(probes() >= running);

  // The server answers probes now: the next due retry succeeds in the background and sticks.
  hang = false;
  offset += UNPROBED_RETRY_MS + 1;
  t0 = Date.now();
  await client.structured({ messages, schema });
  assert.ok(Date.now() - t0 < PROBE_MS);
  await settle(PROBE_MS + 200);
  const caps = await client.probe();
  assert.equal(caps.probed, true);
  assert.equal(caps.ladder[0], "json_schema");
});
