// Bundled by test/browser/ai-sdk.test.mjs (esbuild) into /gen-ai/ai-sdk.js with `ai`, `zod` and
// the package's dist, as an app's bundler would; the wasm is copied next to the bundle.
export { createEngine } from "../../../dist/index.js";
export { createPoot } from "../../../dist/ai-sdk.js";
export { generateObject, streamObject } from "ai";
export { PERSON, runAiSdkScenarios } from "../../ai-sdk-scenarios.mjs";
