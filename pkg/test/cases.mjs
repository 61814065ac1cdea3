// Seeded kernel inputs shared by the Node and browser tests (the browser loads this file from
// the test server), plus an oracle written from the documented semantics, not from the Rust.

export const SIZES = [1, 31, 32, 33, 49152, 262144];

/** A seeded 32-bit generator: every input is reproducible from its seed. */
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/**
 * Logits with NaN, -Infinity, ±0 and ties among ordinary values, or with `coarse` only values
 * from {-1, 0, 1, 2} so the maximum is tied many times; a mask of `density`%.
 */
export function randomCase(next, n, density, coarse = false) {
  const logits = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const r = next() % 100;
    logits[i] = coarse ? (next() % 4) - 1 : r === 0 ? NaN : r === 1 ? -Infinity : r === 2 ? -0 : r < 8 ? 1.5 : (next() / 2 ** 32 - 0.5) * 40;
  }
  const mask = new Uint32Array(Math.ceil(n / 32));
  for (let i = 0; i < n; i++) if (next() % 100 < density) mask[i >>> 5] |= 1 << (i & 31);
  return { logits, mask };
}

/** Expected argmax (-1 when nothing is allowed) and masked logits. */
export function oracle(logits, mask) {
  const masked = Float32Array.from(logits);
  const value = (i) => (Number.isNaN(masked[i]) ? -Infinity : masked[i]);
  let best = -1;
  for (let i = 0; i < masked.length; i++) {
    if (((mask[i >>> 5] >>> (i & 31)) & 1) === 0) masked[i] = -Infinity;
    else if (best < 0 || value(i) > value(best)) best = i;
  }
  return { index: best, masked };
}

/** Same bits, so NaN equals NaN and -0 differs from +0. */
export function sameBits(a, b) {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}
