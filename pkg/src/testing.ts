// Test-only hooks, for the package's own tests, which import dist/testing.js by path. Not part
// of the package: npm does not publish this file (package.json `files` leaves it out), and the
// package's `exports` do not name it.
export { armDebugPanic } from "./engine.js";
