export { loadWasm } from "./wasm.js";
export type { Wasm, WasmSource } from "./wasm.js";
export { PootError, toPootError } from "./errors.js";
export { applyTokenMask, webgpuAdapter } from "./tokenMask.js";
export type { Backend, AdapterInfo } from "./tokenMask.js";
