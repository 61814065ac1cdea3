// Test-only hooks. Not part of the package's API: the package's `exports` do not name this
// module, so an app cannot import it (`poot/dist/testing.js` is refused); the package's own
// tests import it by path (dist/testing.js).
export { armDebugPanic } from "./engine.js";
