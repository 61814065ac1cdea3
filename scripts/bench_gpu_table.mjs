// Renders the rows `poot bench` printed (one JSON object per line, as scripts/bench_gpu.sh
// collects them) as the table in README.md, with how far each GPU decode's greedy tokens
// agree with the CPU's. Usage: node scripts/bench_gpu_table.mjs ROWS_FILE
import { readFileSync } from "node:fs";

const rows = readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const f = (x, d = 2) => (x === undefined ? "" : Number(x).toFixed(d));
// The CPU's greedy tokens are the reference: the first step where a GPU row chose another
// token is where its rounding (f16 weights' products, another summation order) changed a
// choice; from there the continuations differ, so only the prefix is compared.
const reference = rows.find((r) => r.backend === "cpu" && r.what === "decode")?.greedy_ids;
const agreement = (r) => {
  if (!reference || !r.greedy_ids || r.backend === "cpu") return "";
  const n = Math.min(reference.length, r.greedy_ids.length);
  let same = 0;
  while (same < n && reference[same] === r.greedy_ids[same]) same++;
  return same === n ? `all ${n}` : `first ${same} of ${n}`;
};
const adapters = [...new Set(rows.filter((r) => r.adapter).map((r) => r.adapter))];
if (adapters.length) console.log(`GPU adapter: ${adapters.join(", ")}`);
console.log("\n| backend | kernels | what | tok/s | step ms median | step ms p99 | dispatches/token | submissions/token | bytes read back/token | KV cache bytes/position | greedy tokens as the CPU's |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
for (const r of rows.filter((r) => r.what !== "constrained decode")) {
  const threads = r.threads > 1 ? `, ${r.threads} threads` : "";
  const what = r.what === "prefill" ? `prefill ${r.tokens} tokens (median of ${r.runs})` : `decode ${r.tokens} tokens, ${r.how}${threads}`;
  const median = r.what === "prefill" ? r.ms_median / r.tokens : r.step_ms_median;
  console.log(`| ${r.backend} | ${r.kernels ?? ""} | ${what} | ${f(r.tok_s, 3)} | ${f(median, 1)} | ${f(r.step_ms_p99, 1)} | ${f(r.dispatches_per_token, 0)} | ${f(r.submissions_per_token, 0)} | ${f(r.bytes_read_back_per_token, 0)} | ${f(r.kv_cache_bytes_per_position, 0)} | ${agreement(r)} |`);
}
const c = rows.filter((r) => r.what === "constrained decode");
if (c.length === 2) {
  const [on, off] = [c.find((r) => r.overlap), c.find((r) => !r.overlap)];
  console.log(`\nconstrained (${on.kernels} kernels, ${on.constraint}, ${on.steps} decode steps, sampled on the GPU): step median ${f(on.step_ms_median, 1)} ms with the mask overlapped, ${f(off.step_ms_median, 1)} ms serial; mask ${f(on.mask_ms_median, 3)} ms median (serial ${f(off.mask_ms_median, 3)}), so the overlap hides ${f(off.step_ms_median - on.step_ms_median, 1)} ms a step`);
  console.log(`outputs: ${JSON.stringify(on.output)} / ${JSON.stringify(off.output)}`);
}
