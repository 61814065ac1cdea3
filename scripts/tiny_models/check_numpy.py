#!/usr/bin/env python3
"""Checks the recorded llama.cpp references against an independent numpy forward pass.

    ~/.cache/poot/venv/bin/python scripts/tiny_models/check_numpy.py tests/data/tiny_models [ARCH...]

Reads DIR/<arch>.gguf with gguf-py's GGUFReader, runs the model in float64 over each recorded
prompt followed by the tokens llama.cpp generated (teacher forcing), and compares
log_softmax(logits) at every generated position with the recorded chosen-token logprob and
top-10 (ids and logprobs). That the two agree to ~1e-4 shows the recorded numbers are the raw
softmax of the logits (before any sampler) and pins down the math llama.cpp runs:

  x = token_embd[ids]
  per layer:  h = rmsnorm(x) * attn_norm
              q, k, v = h @ Wq.T (+bq), h @ Wk.T (+bk), h @ Wv.T (+bv)   (qwen2 biases)
              q, k = rmsnorm_per_head(q) * q_norm, ... * k_norm           (qwen3, before RoPE)
              RoPE on q, k: llama = NORM mode (rotates pairs (2i, 2i+1)),
                            qwen2/qwen3 = NEOX mode (rotates pairs (i, i + head_dim/2)),
                            theta_i = pos * freq_base^(-2i/head_dim)
              causal softmax(q k^T / sqrt(head_dim)) v; query head h reads KV head
              h // (n_head / n_head_kv)
              x += attn @ Wo.T
              x += (silu(rmsnorm(x) * ffn_norm @ Wg.T) * (... @ Wu.T)) @ Wd.T
  logits = (rmsnorm(x) * output_norm) @ output.T   (qwen2: output = token_embd, tied)
"""

import json
import math
import os
import sys

import numpy as np

import gguf

NEOX = {"llama": False, "qwen2": True, "qwen3": True}


def field(r, key):
    f = r.fields[key]
    return f.contents()


def load(path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    hp = dict(
        arch=arch,
        n_layer=field(r, f"{arch}.block_count"),
        n_embd=field(r, f"{arch}.embedding_length"),
        n_head=field(r, f"{arch}.attention.head_count"),
        n_head_kv=field(r, f"{arch}.attention.head_count_kv"),
        eps=field(r, f"{arch}.attention.layer_norm_rms_epsilon"),
        base=field(r, f"{arch}.rope.freq_base"),
    )
    hp["head_dim"] = field(r, f"{arch}.attention.key_length")
    t = {x.name: np.array(x.data, dtype=np.float64) for x in r.tensors}
    return hp, t


def rmsnorm(x, w, eps):
    x = x.astype(np.float32).astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, base, neox):
    # x: (T, H, D)
    T, H, D = x.shape
    i = np.arange(D // 2)
    theta = np.arange(T)[:, None] * base ** (-2.0 * i / D)  # (T, D/2)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    if neox:
        a, b = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def forward(hp, t, ids):
    eps, hd = hp["eps"], hp["head_dim"]
    nh, nkv = hp["n_head"], hp["n_head_kv"]
    T = len(ids)
    x = t["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(hp["n_layer"]):
        p = f"blk.{l}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], eps)
        q = h @ t[p + "attn_q.weight"].T
        k = h @ t[p + "attn_k.weight"].T
        v = h @ t[p + "attn_v.weight"].T
        if p + "attn_q.bias" in t:
            q, k, v = q + t[p + "attn_q.bias"], k + t[p + "attn_k.bias"], v + t[p + "attn_v.bias"]
        q, k, v = q.reshape(T, nh, hd), k.reshape(T, nkv, hd), v.reshape(T, nkv, hd)
        if p + "attn_q_norm.weight" in t:
            q = rmsnorm(q, t[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, t[p + "attn_k_norm.weight"], eps)
        q, k = rope(q, hp["base"], NEOX[hp["arch"]]), rope(k, hp["base"], NEOX[hp["arch"]])
        out = np.empty((T, nh, hd))
        for hh in range(nh):
            kv = hh // (nh // nkv)
            s = q[:, hh] @ k[:, kv].T / math.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, nh * hd) @ t[p + "attn_output.weight"].T
        h = rmsnorm(x, t[p + "ffn_norm.weight"], eps)
        g = h @ t[p + "ffn_gate.weight"].T
        u = h @ t[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "ffn_down.weight"].T
    h = rmsnorm(x, t["output_norm.weight"], eps)
    out_w = t.get("output.weight", t["token_embd.weight"])
    logits = h @ out_w.T
    m = logits.max(axis=-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    archs = sys.argv[2:] or ["llama", "qwen2", "qwen3"]
    ok = True
    for arch in archs:
        hp, t = load(os.path.join(d, f"{arch}.gguf"))
        with open(os.path.join(d, f"{arch}.llama_cpp.json")) as f:
            ref = json.load(f)
        worst = 0.0
        bad_rank = 0
        argmax_ok = 0
        n = 0
        for p in ref["prompts"]:
            gen = [s["token"] for s in p["steps"]]
            lp = forward(hp, t, p["tokens"] + gen)
            for i, s in enumerate(p["steps"]):
                row = lp[len(p["tokens"]) - 1 + i]
                ids = [tid for tid, _ in s["top"]]
                worst = max(worst, abs(row[s["token"]] - s["logprob"]),
                            *(abs(row[tid] - l) for tid, l in s["top"]))
                # ids: same set as numpy's top-10 (order can only differ on near-ties)
                mine = list(np.argsort(-row, kind="stable")[:10])
                if set(mine) != set(ids):
                    bad_rank += 1
                allowed = np.array(row)
                allowed[ref["excluded"]] = -np.inf
                argmax_ok += int(np.argmax(allowed) == s["token"])
                n += 1
        good = worst < 1e-3 and bad_rank == 0 and argmax_ok == n
        ok &= good
        print(f"{arch}: {n} steps, max |logprob - numpy| = {worst:.2e}, top-10 id sets differ "
              f"at {bad_rank}, chosen == numpy argmax over allowed ids at {argmax_ok}/{n}"
              f" -> {'OK' if good else 'MISMATCH'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
