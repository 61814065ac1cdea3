#!/usr/bin/env python3
"""Records tests/fixtures/model/quant_reference.json: random blocks of every weight format
and their values dequantized by the `gguf` Python package (an implementation independent of
src/quant/). Scale fields are set to finite f16 values; the rest of each block is random.

Usage: scripts/record_quant_reference.py  (needs `pip install gguf numpy`)
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "model", "quant_reference.json")

# (type, byte offsets of the f16 scale fields inside one block)
TYPES = [
    ("F32", T.F32, []),
    ("F16", T.F16, None),
    ("BF16", T.BF16, None),
    ("Q8_0", T.Q8_0, [0]),
    ("Q4_0", T.Q4_0, [0]),
    ("Q4_1", T.Q4_1, [0, 2]),
    ("Q5_0", T.Q5_0, [0]),
    ("Q5_1", T.Q5_1, [0, 2]),
    ("Q4_K", T.Q4_K, [0, 2]),
    ("Q5_K", T.Q5_K, [0, 2]),
    ("Q6_K", T.Q6_K, [208]),
]


def main():
    rng = np.random.default_rng(20240601)
    cases = []
    for name, qtype, scale_offsets in TYPES:
        block_len, block_bytes = GGML_QUANT_SIZES[qtype]
        n_blocks = 3 if block_len == 256 else 8
        if name == "F32":
            raw = rng.normal(0, 1, size=n_blocks * 4).astype("<f4").tobytes()
        elif name == "F16":
            raw = rng.normal(0, 1, size=n_blocks * 4).astype("<f2").tobytes()
        elif name == "BF16":
            raw = (rng.normal(0, 1, size=n_blocks * 4).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = bytearray(rng.integers(0, 256, size=n_blocks * block_bytes, dtype=np.uint8).tobytes())
            for b in range(n_blocks):
                for off in scale_offsets:
                    v = np.float16(rng.uniform(-0.05, 0.05) if off == 0 or name != "Q4_1" else rng.uniform(-1, 1))
                    data[b * block_bytes + off:b * block_bytes + off + 2] = v.astype("<f2").tobytes()
            raw = bytes(data)
        values = dequantize(np.frombuffer(raw, dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
        cases.append({"type": name, "hex": raw.hex(), "values": [float(v) for v in values]})
    with open(OUT, "w") as f:
        json.dump({"generator": "gguf-py " + importlib.metadata.version("gguf"), "cases": cases}, f)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
