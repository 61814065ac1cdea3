// Times each value crossing the wasm edge two ways, on the same values in the same run:
// JSON text (serde_json on the Rust side, JSON.parse / JSON.stringify here: what the package
// does) and JS values built or read by serde-wasm-bindgen. Prints median and p99 per crossing
// (us, over batches) and the ratio. Run by scripts/bench_wasm_boundary.sh.
import { readFileSync } from "node:fs";

const glue = process.argv[2];
const m = await import(glue);
const bytes = readFileSync(new URL("wasm_boundary_bg.wasm", new URL(glue, "file://")));
m.initSync({ module: bytes });

const BATCH = 50;
const BATCHES = Number(process.env.BATCHES ?? 400);

/** Median and p99 (us per call) of `fn` over BATCHES batches of BATCH calls. */
function time(fn) {
  for (let i = 0; i < 200; i++) fn(); // warm up the JIT
  const per = [];
  for (let b = 0; b < BATCHES; b++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < BATCH; i++) fn();
    per.push(Number(process.hrtime.bigint() - t0) / 1000 / BATCH);
  }
  per.sort((a, b) => a - b);
  return { p50: per[Math.floor(per.length / 2)], p99: per[Math.floor(per.length * 0.99)] };
}

const request = (schemaProps) => ({
  model: "SmolLM2-135M-Instruct",
  messages: [
    { role: "system", content: "You extract records from text and answer in JSON." },
    { role: "user", content: "Ada Lovelace, born 1815 in London, wrote the first program. ".repeat(4) },
  ],
  max_tokens: 256,
  temperature: 0,
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "record",
      strict: true,
      schema: {
        type: "object",
        properties: Object.fromEntries(
          Array.from({ length: schemaProps }, (_, i) => [
            `field_${i}`,
            { type: i % 3 ? "string" : "integer", description: `the record's field number ${i}` },
          ]),
        ),
        required: Array.from({ length: schemaProps }, (_, i) => `field_${i}`),
        additionalProperties: false,
      },
    },
  },
});

const rows = [];
function row(name, text, value) {
  // Both must give the same thing, or the comparison means nothing.
  const a = JSON.stringify(text());
  const b = JSON.stringify(value());
  if (a !== b) throw new Error(`${name}: the two ways differ:\n${a}\n${b}`);
  const t = time(text);
  const v = time(value);
  rows.push([name, t.p50, t.p99, v.p50, v.p99, v.p50 / t.p50]);
}

for (const contentBytes of [64, 256, 1024, 4096]) {
  const values = new m.Values(contentBytes);
  if (contentBytes === 64) {
    row("step chunk, out", () => JSON.parse(values.stepText()), () => values.stepValue());
    row("step chunk + logprobs (top 5), out", () => JSON.parse(values.stepLogprobsText()), () => values.stepLogprobsValue());
  }
  row(`response (${contentBytes} B content), out`, () => JSON.parse(values.responseText()), () => values.responseValue());
  values.free();
}
for (const props of [4, 64]) {
  const req = request(props);
  row(
    `request (${JSON.stringify(req).length} B, json_schema), in`,
    () => m.requestFromText(JSON.stringify(req)),
    () => m.requestFromValue(req),
  );
}

const f = (x) => x.toFixed(2).padStart(8);
console.log(`Node ${process.version}, ${BATCHES} batches of ${BATCH} calls; us per crossing`);
console.log(`${"crossing".padEnd(44)}  JSON p50   JSON p99  serde p50  serde p99  serde/JSON (p50)`);
for (const [name, tp50, tp99, vp50, vp99, ratio] of rows) {
  console.log(`${name.padEnd(44)}${f(tp50)}  ${f(tp99)}  ${f(vp50)}  ${f(vp99)}  ${ratio.toFixed(2).padStart(8)}`);
}
