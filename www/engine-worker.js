// The demo's engine runs here, in a module Web Worker, so the page stays responsive while the
// model loads and generates. The page talks to it through createWorkerEngine (app.js).
import { serveEngine } from "/pkg/dist/index.js";

serveEngine();
