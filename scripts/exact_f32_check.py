#!/usr/bin/env python3
"""An independent exact-precision forward pass of a llama-architecture GGUF in numpy.

Weights are dequantized by the `gguf` Python package (not by our Rust code) and the whole
forward pass runs in float64, so its logits are the exact values our f32 path approximates.
For each prompt of tests/fixtures/model/logits.json (token ids recorded from llama.cpp) it
records into tests/fixtures/model/exact_f32.json:
  - the logits after prefill at the top-64 ids and at every 97th id (a spread sample),
  - the scale max|logit|, and
  - 8 greedy steps (ids and top-1/top-2 logit margins).
tests/model_exact_f32.rs then requires our logits within 1e-3 x scale and equal greedy ids
wherever the recorded margin exceeds that tolerance.

Usage: POOT_REFERENCE_GGUF=model.gguf scripts/exact_f32_check.py [--prompts N] [--steps N]
Needs `pip install gguf numpy` (scripts install them into ~/.cache/poot/venv when missing).
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "model")


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return v.tobytes().decode() if f.types[0].name == "STRING" else v[0].item()


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        a = "llama"
        self.n_layer = field(r, f"{a}.block_count")
        self.n_embd = field(r, f"{a}.embedding_length")
        self.n_head = field(r, f"{a}.attention.head_count")
        self.n_head_kv = field(r, f"{a}.attention.head_count_kv")
        self.head_dim = self.n_embd // self.n_head
        self.rope_dim = field(r, f"{a}.rope.dimension_count")
        self.base = float(field(r, f"{a}.rope.freq_base"))
        self.eps = float(field(r, f"{a}.attention.layer_norm_rms_epsilon"))
        self.w = {}
        for t in r.tensors:
            data = dequantize(t.data, t.tensor_type)
            rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
            self.w[t.name] = np.asarray(data, dtype=np.float64).reshape(rows, int(t.shape[0]))
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w.reshape(-1)

    def rope(self, x, positions):
        # x: (T, heads, head_dim); rotate adjacent pairs (x[2i], x[2i+1]).
        half = self.rope_dim // 2
        inv = self.base ** (-2.0 * np.arange(half) / self.rope_dim)
        ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        out[..., 0:2 * half:2] = a * cos - b * sin
        out[..., 1:2 * half:2] = a * sin + b * cos
        return out

    def forward(self, tokens, cache):
        """Logits after the last of `tokens`, appended at positions len(cache[0][0]) on."""
        w, hd = self.w, self.head_dim
        pos0 = cache["len"]
        T = len(tokens)
        pos = list(range(pos0, pos0 + T))
        x = w["token_embd.weight"][tokens]
        group = self.n_head // self.n_head_kv
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.norm(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(T, self.n_head, hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(T, self.n_head_kv, hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(T, self.n_head_kv, hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            K = np.concatenate([cache["k"][l], k]) if pos0 else k
            V = np.concatenate([cache["v"][l], v]) if pos0 else v
            cache["k"][l], cache["v"][l] = K, V
            att = np.zeros((T, self.n_head, hd))
            for hq in range(self.n_head):
                hk = hq // group
                s = q[:, hq, :] @ K[:, hk, :].T / np.sqrt(hd)  # (T, pos0+T)
                mask = np.arange(pos0 + T)[None, :] > np.asarray(pos)[:, None]
                s[mask] = -np.inf
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, hq, :] = s @ V[:, hk, :]
            x = x + att.reshape(T, -1) @ w[p + "attn_output.weight"].T
            h = self.norm(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        cache["len"] = pos0 + T
        h = self.norm(x[-1:], w["output_norm.weight"])
        return (h @ w["output.weight"].T)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    path = os.environ.get("POOT_REFERENCE_GGUF")
    if not path:
        sys.exit("set POOT_REFERENCE_GGUF to the model path")
    model = Model(path)
    prompts = json.load(open(os.path.join(FIXTURES, "logits.json")))["prompts"][: args.prompts]
    out = []
    for p in prompts:
        cache = {"len": 0, "k": [None] * model.n_layer, "v": [None] * model.n_layer}
        logits = model.forward(p["prompt_ids"], cache)
        order = np.argsort(-logits, kind="stable")
        ids = sorted(set(order[:64].tolist()) | set(range(0, len(logits), 97)))
        greedy, margins = [], []
        cur = logits
        for i in range(args.steps):
            o = np.argsort(-cur, kind="stable")
            greedy.append(int(o[0]))
            margins.append(float(cur[o[0]] - cur[o[1]]))
            if i + 1 < args.steps:
                cur = model.forward([int(o[0])], cache)
        out.append({
            "name": p["name"],
            "prompt_ids": p["prompt_ids"],
            "scale": float(np.abs(logits).max()),
            "ids": ids,
            "logits": [float(logits[i]) for i in ids],
            "greedy_ids": greedy,
            "greedy_logit_margins": margins,
        })
        print(f"{p['name']}: top {int(order[0])} logit {logits[order[0]]:.4f}, greedy {greedy}", file=sys.stderr)
    with open(os.path.join(FIXTURES, "exact_f32.json"), "w") as f:
        json.dump({"generator": "scripts/exact_f32_check.py (numpy float64, gguf-py dequantize)",
                   "model": os.path.basename(path), "prompts": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
