// A module worker serving the real engine to createWorkerEngine (test/browser/worker.test.mjs).
import { serveEngine } from "/pkg/dist/index.js";

serveEngine();
