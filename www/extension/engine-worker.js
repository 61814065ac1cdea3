// The engine, in a Web Worker started by the side panel (panel.js).
import { serveEngine } from "./poot/dist/index.js";

serveEngine();
