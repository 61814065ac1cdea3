// The demo's mask-kernel check: for each vocabulary size, random logits and a random mask go
// through the CPU twin (wasm) and the WebGPU kernel; the page shows both argmaxes. The result
// is also left on `window.pootSlice` for the browser tests.
import { applyTokenMask, webgpuAdapter } from "/pkg/dist/index.js";

const SIZES = [1, 31, 32, 33, 49152, 262144];
const backendEl = document.getElementById("backend");
const statusEl = document.getElementById("status");
const rows = document.querySelector("#results tbody");

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

function randomCase(next, n) {
  const logits = new Float32Array(n);
  for (let i = 0; i < n; i++) logits[i] = (next() / 2 ** 32 - 0.5) * 40;
  const mask = new Uint32Array(Math.ceil(n / 32));
  for (let i = 0; i < n; i++) if (next() & 1) mask[i >>> 5] |= 1 << (i & 31);
  if (mask.every((w) => w === 0)) mask[0] = 1;
  return { logits, mask };
}

function addRow(cells, ok) {
  const tr = document.createElement("tr");
  for (const text of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  tr.lastElementChild.previousElementSibling.className = ok ? "ok" : "bad";
  rows.append(tr);
}

async function run() {
  const result = { adapter: null, webgpu: false, reason: null, sizes: [], allZeroMask: null };
  try {
    result.adapter = await webgpuAdapter();
    result.webgpu = true;
    backendEl.textContent = `WebGPU adapter: ${result.adapter.name || "(name hidden by the browser)"}` +
      (result.adapter.isSoftware ? " — a software adapter, so expect it to be slow" : "");
  } catch (e) {
    result.reason = e.message;
    backendEl.dataset.webgpu = "no";
    backendEl.textContent = `WebGPU unavailable: ${e.message}. Only the CPU (wasm) path runs here.`;
  }
  const next = rng(2024);
  for (const n of SIZES) {
    const { logits, mask } = randomCase(next, n);
    const cpuLogits = Float32Array.from(logits);
    const cpu = await applyTokenMask(cpuLogits, mask, { backend: "cpu" });
    const entry = { n, cpu, gpu: null, sameLogits: null, gpuMs: null };
    if (result.webgpu) {
      const gpuLogits = Float32Array.from(logits);
      const start = performance.now();
      entry.gpu = await applyTokenMask(gpuLogits, mask, { backend: "webgpu" });
      entry.gpuMs = performance.now() - start;
      const a = new Uint32Array(cpuLogits.buffer);
      const b = new Uint32Array(gpuLogits.buffer);
      entry.sameLogits = a.every((v, i) => v === b[i]);
    }
    result.sizes.push(entry);
    const same = result.webgpu ? entry.gpu === entry.cpu && entry.sameLogits : null;
    addRow(
      [n.toLocaleString("en"), String(cpu), result.webgpu ? String(entry.gpu) : "—",
        same === null ? "no WebGPU" : same ? "yes" : "NO", entry.gpuMs === null ? "—" : entry.gpuMs.toFixed(1)],
      same !== false,
    );
  }
  if (result.webgpu) {
    // The kernel's contract: a mask that allows nothing is an error, never an index.
    try {
      await applyTokenMask(new Float32Array(33), new Uint32Array(2), { backend: "webgpu" });
      result.allZeroMask = { rejected: false };
    } catch (e) {
      result.allZeroMask = { rejected: true, code: e.code, message: e.message };
    }
  }
  return result;
}

run().then(
  (result) => {
    window.pootSlice = result;
    const bad = result.sizes.filter((s) => result.webgpu && (s.gpu !== s.cpu || !s.sameLogits));
    statusEl.dataset.state = bad.length ? "mismatch" : "done";
    statusEl.textContent = !result.webgpu
      ? "CPU kernel ran; the WebGPU comparison needs a WebGPU adapter."
      : bad.length
        ? `The WebGPU kernel disagrees with the CPU on ${bad.length} size(s).`
        : "The WebGPU kernel's argmax equals the CPU result at every size.";
  },
  (e) => {
    window.pootSlice = { error: e.message };
    statusEl.dataset.state = "error";
    statusEl.textContent = `Error: ${e.message}`;
  },
);
