#!/usr/bin/env python3
"""Writes tests/data/quant/<type>.json: blocks of Q2_K, Q3_K and IQ4_NL and their values as
dequantized by the PyPI `gguf` package (a numpy implementation independent of src/quant/).

Each file is {"generator": .., "type": .., "block_bytes": .., "block_len": ..,
"cases": [{"name": .., "hex": .., "values": ..}]} where `hex` is the raw bytes of one or more
whole blocks and `values` the oracle's f32 results, as the hex of their little-endian bytes
(exact, -0.0 included, and a third the size of decimal text).

The quant bytes (scales, quants, high-bit masks) of each block are random, or an edge
pattern (all 0x00, all 0xFF, 0x55/0xAA, the byte index); the f16 scale fields (`d`, and
Q2_K's `dmin`) are set to finite values: small random ones of both signs (the usual range
of real weights), and the edges 0, -0, the smallest subnormal, a subnormal, 1 and the
largest finite half (65504: every result stays finite). The generator is seeded, so a rerun
writes the same files.

usage: ~/.cache/poot/venv/bin/python scripts/quant_fixture.py [OUT_DIR]
  (needs `pip install gguf numpy`; OUT_DIR defaults to tests/data/quant)
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# name -> (type, byte offsets of the f16 scale fields inside a block)
TYPES = {
    "Q2_K": (T.Q2_K, [80, 82]),  # scales[16], qs[64], d, dmin
    "Q3_K": (T.Q3_K, [108]),  # hmask[32], qs[64], scales[12], d
    "IQ4_NL": (T.IQ4_NL, [0]),  # d, qs[16]
}

# f16 bit patterns of the edge scales.
EDGE_SCALES = {
    "zero": 0x0000,
    "negative zero": 0x8000,
    "smallest subnormal": 0x0001,
    "subnormal": 0x02A7,
    "one": 0x3C00,
    "largest finite": 0x7BFF,
}


def put_half(block, off, bits):
    block[off:off + 2] = int(bits).to_bytes(2, "little")


def small_scale(rng):
    """A random f16 bit pattern of magnitude in [1e-4, 0.1), either sign."""
    v = np.float16(rng.uniform(1e-4, 0.1) * (1 if rng.random() < 0.5 else -1))
    return int(v.view(np.uint16))


def cases_for(name, rng):
    qtype, scale_offsets = TYPES[name]
    block_len, bb = GGML_QUANT_SIZES[qtype]
    n_random = 12 if block_len == 256 else 64

    def block(fill):
        b = bytearray(fill)
        assert len(b) == bb
        for off in scale_offsets:
            put_half(b, off, small_scale(rng))
        return b

    cases = []
    # Edge quant patterns, random scales.
    for label, fill in [
        ("all 0x00", bytes(bb)),
        ("all 0xFF", b"\xff" * bb),
        ("all 0x55", b"\x55" * bb),
        ("all 0xAA", b"\xaa" * bb),
        ("byte index", bytes(range(bb))),
    ]:
        cases.append((label, bytes(block(fill))))
    # Edge scales on random quants (each scale field in turn, the others small random).
    for label, bits in EDGE_SCALES.items():
        for off in scale_offsets:
            b = block(rng.integers(0, 256, size=bb, dtype=np.uint8).tobytes())
            put_half(b, off, bits)
            which = "" if len(scale_offsets) == 1 else f" at byte {off}"
            cases.append((f"{label} scale{which}", bytes(b)))
    # Largest magnitudes: every scale field at 65504 with all-0xFF quants.
    b = bytearray(b"\xff" * bb)
    for off in scale_offsets:
        put_half(b, off, 0x7BFF)
    cases.append(("largest scales, all 0xFF", bytes(b)))
    # Random blocks, as one multi-block row (checks the block stride too).
    row = b"".join(bytes(block(rng.integers(0, 256, size=bb, dtype=np.uint8).tobytes())) for _ in range(n_random))
    cases.append((f"{n_random} random blocks", row))

    out = []
    for label, raw in cases:
        values = dequantize(np.frombuffer(raw, dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
        assert values.size == len(raw) // bb * block_len
        assert np.all(np.isfinite(values)), (name, label)
        out.append({"name": label, "hex": raw.hex(), "values": values.astype("<f4").tobytes().hex()})
    return {
        "generator": "gguf-py " + importlib.metadata.version("gguf") + " (scripts/quant_fixture.py)",
        "type": name,
        "block_len": block_len,
        "block_bytes": bb,
        "cases": out,
    }


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "quant")
    os.makedirs(out_dir, exist_ok=True)
    for i, name in enumerate(TYPES):
        rng = np.random.default_rng(20250610 + i)
        fixture = cases_for(name, rng)
        path = os.path.join(out_dir, name.lower() + ".json")
        with open(path, "w") as f:
            json.dump(fixture, f, indent=0)
            f.write("\n")
        print(f"{os.path.normpath(path)}: {len(fixture['cases'])} cases, {os.path.getsize(path)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
