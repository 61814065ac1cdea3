// Bundled by the browser tests (esbuild) into /gen/openai.js for the pages.
export { default as OpenAI } from "openai";
