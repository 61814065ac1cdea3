import { PootError, toPootError } from "./errors.js";
import { loadWasm, type Wasm } from "./wasm.js";

/** Where a kernel runs: the wasm CPU path or the browser's WebGPU. */
export type Backend = "cpu" | "webgpu";

/** What the page shows about the WebGPU adapter. */
export interface AdapterInfo {
  name: string;
  /** A software/fallback adapter (SwiftShader): correct but slow. */
  isSoftware: boolean;
}

type GpuContext = Awaited<ReturnType<Wasm["GpuContext"]["create"]>>;
let gpu: Promise<GpuContext> | undefined;

function webgpuMissingReason(): string | null {
  if (typeof navigator === "undefined" || !("gpu" in navigator) || !navigator.gpu) {
    return "WebGPU is not available here (navigator.gpu is missing)";
  }
  return null;
}

/** Opens the WebGPU device once; rejects with code `webgpu_unavailable` where there is none. */
function gpuContext(): Promise<GpuContext> {
  gpu ??= (async () => {
    const missing = webgpuMissingReason();
    if (missing) throw new PootError(missing, { status: 500, code: "webgpu_unavailable" });
    const wasm = await loadWasm();
    try {
      return await wasm.GpuContext.create();
    } catch (e) {
      throw toPootError(e);
    }
  })();
  // A failed attempt is not cached, so a later call can try again.
  gpu.catch(() => (gpu = undefined));
  return gpu;
}

/** The WebGPU adapter this page would use. */
export async function webgpuAdapter(): Promise<AdapterInfo> {
  const ctx = await gpuContext();
  return { name: ctx.adapterName || (await describeAdapter()), isSoftware: ctx.isSoftware };
}

/**
 * wgpu reports only `GPUAdapterInfo.description`, which Chromium leaves empty for many
 * adapters (SwiftShader among them); vendor and architecture still say what it is.
 */
async function describeAdapter(): Promise<string> {
  const adapter = await navigator.gpu.requestAdapter();
  const info = adapter?.info;
  const parts = [info?.vendor, info?.architecture, info?.device].filter((p) => p);
  return parts.length ? parts.join(" ") : "unnamed WebGPU adapter";
}

/**
 * Masks `logits` in place (disallowed tokens become -Infinity) and returns the index of the
 * largest allowed logit. Bit `i % 32` of `mask[i / 32]` allows token `i`. Ties go to the lowest
 * index; NaN counts as -Infinity; a mask that allows nothing rejects with code `no_allowed_token`.
 */
export async function applyTokenMask(
  logits: Float32Array,
  mask: Uint32Array,
  options: { backend?: Backend } = {},
): Promise<number> {
  const backend = options.backend ?? "cpu";
  try {
    if (backend === "webgpu") {
      return await (await gpuContext()).applyTokenMask(logits, mask);
    }
    const wasm = await loadWasm();
    return wasm.applyTokenMaskCpu(logits, mask);
  } catch (e) {
    throw toPootError(e);
  }
}
