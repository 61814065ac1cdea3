#!/usr/bin/env python3
"""Checks the recorded llama.cpp references against an independent numpy forward pass.

    ~/.cache/poot/venv/bin/python scripts/tiny_models/check_numpy.py tests/data/tiny_models [REF...]
    ... check_numpy.py tests/data/tiny_models --ablate [REF...]

For each reference REF (llama, qwen2, qwen3, gemma3, phi3, phi3.long, llama3 unless named) it
reads DIR/REF.llama_cpp.json and the GGUF it names (GGUFReader), runs the model in float64 over
each recorded prompt followed by the tokens llama.cpp generated (teacher forcing), and compares
log_softmax(logits) at every generated position with the recorded chosen-token logprob and
top-10 (ids and logprobs). That the two agree to ~1e-4 shows the recorded numbers are the raw
softmax of the logits (before any sampler) and pins down the math llama.cpp runs. With
--ablate it also reruns each model with one detail changed at a time (the other RoPE factor
set, the sliding window off by one, exact GELU, ...) and prints how far that lands from
llama.cpp, which shows that each detail below is load-bearing.

  x = token_embd[ids]                       (gemma3: * sqrt(n_embd) = 8)
  per layer:  h = rmsnorm(x) * attn_norm
              q, k, v = h @ Wq.T (+bq), h @ Wk.T (+bk), h @ Wv.T (+bv)   (qwen2 biases)
                        (phi3: one attn_qkv matrix, rows [q | k | v])
              q, k = rmsnorm_per_head(q) * q_norm, ... * k_norm    (qwen3, gemma3; before RoPE)
              RoPE on q, k: llama/llama3 = NORM mode (rotates pairs (2i, 2i+1)),
                            qwen2/qwen3/gemma3/phi3 = NEOX mode (pairs (i, i + n_rot/2)),
                            theta_i = pos * base^(-2i/n_rot) / factor_i,
                            factor_i = rope_freqs[i] (llama3) or rope_factors_{short,long}[i]
                            (phi3, by context size) else 1; phi3 also multiplies the rotated
                            q and k by rope.scaling.attn_factor
              softmax(q k^T / sqrt(head_dim) + mask) v; query head h reads KV head
              h // (n_head / n_head_kv); mask: causal, and on gemma3's local layers
              (il % 6 < 5) also key p hidden from query i when i - p >= sliding_window
              a = attn @ Wo.T               (gemma3: a = rmsnorm(a) * post_attention_norm)
              x += a
              f = (act(rmsnorm(x) * ffn_norm @ Wg.T) * (... @ Wu.T)) @ Wd.T
                  act = silu; gemma3: GELU(tanh) through ggml's fp16 table;
                  phi3: [g | u] = halves of one ffn_up matrix (gate first)
              x += f                        (gemma3: f = rmsnorm(f) * post_ffw_norm)
  logits = (rmsnorm(x) * output_norm) @ output.T   (qwen2, gemma3: output = token_embd, tied)

tests/data/tiny_models/README.md spells all of it out.
"""

import json
import math
import os
import sys

import numpy as np

import gguf

REFERENCES = ["llama", "qwen2", "qwen3", "gemma3", "phi3", "phi3.long", "llama3"]

NEOX = {"llama": False, "qwen2": True, "qwen3": True, "gemma3": True, "phi3": True}

GEMMA3_SWA_PATTERN = 6            # llama.cpp: layer il is local (sliding window) iff il % 6 < 5
GEMMA3_LOCAL_ROPE_BASE = 10000.0  # llama.cpp's default for gemma3 local layers when the GGUF
                                  # has no gemma3.rope.freq_base_swa (real Gemma 3 files have none)

# Alternative hypotheses for --ablate; forward() reads OPT. Each entry: (name, changes, archs).
OPT = {}
ABLATIONS = [
    ("exact GELU (no fp16 table)", dict(gelu="exact"), {"gemma3"}),
    ("window: mask when i - p > window", dict(swa_off=+1), {"gemma3"}),
    ("window: mask when i - p >= window - 1", dict(swa_off=-1), {"gemma3"}),
    ("local layers use freq_base too", dict(local_base="global"), {"gemma3"}),
    ("no sqrt(n_embd) input scale", dict(no_embd_scale=True), {"gemma3"}),
    ("norm weights used as (1 + w)", dict(norm_plus_one=True), {"gemma3"}),
    ("q scaled by 1/sqrt(n_embd/n_head)", dict(q_scale="n_embd/n_head"), {"gemma3"}),
    ("no post-attention / post-FFN norms", dict(no_post_norms=True), {"gemma3"}),
    ("all layers global", dict(no_swa=True), {"gemma3"}),
    ("the other rope factor set", dict(factors="other"), {"phi3"}),
    ("no rope factors", dict(factors="none"), {"phi3", "llama"}),
    ("rope factors multiply the frequency", dict(factors="multiply"), {"phi3", "llama"}),
    ("no attn_factor", dict(no_attn_factor=True), {"phi3"}),
    ("attn_factor on the scores once, not on q and k", dict(attn_factor_once=True), {"phi3"}),
    ("ffn_up halves swapped (up first)", dict(swap_halves=True), {"phi3"}),
]


def field(r, key, default=None):
    if key not in r.fields:
        return default
    return r.fields[key].contents()


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
    hp["head_dim"] = field(r, f"{arch}.attention.key_length", hp["n_embd"] // hp["n_head"])
    hp["n_rot"] = field(r, f"{arch}.rope.dimension_count", hp["head_dim"])
    assert hp["n_rot"] == hp["head_dim"]  # all tiny models rotate the whole head
    hp["sliding_window"] = field(r, f"{arch}.attention.sliding_window", 0)
    hp["n_ctx_orig"] = field(r, f"{arch}.rope.scaling.original_context_length",
                             field(r, f"{arch}.context_length"))
    hp["rope_attn_factor"] = field(r, f"{arch}.rope.scaling.attn_factor", 1.0)
    hp["base_swa"] = field(r, f"{arch}.rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE)
    t = {x.name: np.array(x.data, dtype=np.float64) for x in r.tensors}
    return hp, t


def rmsnorm(x, w, eps):
    x = x.astype(np.float32).astype(np.float64)
    if OPT.get("norm_plus_one"):
        w = 1.0 + w
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, base, neox, freq_factors=None, mscale=1.0):
    """x: (T, H, D), D = n_rot. Pair i turns by theta = pos * base^(-2i/D) / freq_factors[i];
    both rotated components are multiplied by mscale (llama.cpp's attn_factor)."""
    T, H, D = x.shape
    i = np.arange(D // 2)
    inv = base ** (-2.0 * i / D)
    if freq_factors is not None:
        inv = inv * freq_factors if OPT.get("factors") == "multiply" else inv / freq_factors
    theta = np.arange(T)[:, None] * inv  # (T, D/2)
    c = np.cos(theta)[:, None, :] * mscale
    s = np.sin(theta)[:, None, :] * mscale
    if neox:
        a, b = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)))


def f16(x):
    return np.asarray(x).astype(np.float32).astype(np.float16).astype(np.float64)


def gelu_ggml_cpu(x):
    """ggml's CPU GELU (GGML_GELU_FP16, also inside its fused GEGLU): x <= -10 -> 0,
    x >= 10 -> x, otherwise fp16(gelu_tanh(fp16(x))) (a 64Ki-entry table indexed by the fp16
    bits of x, holding the fp16-rounded tanh-GELU)."""
    y = f16(gelu_tanh(f16(x)))
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, y))


def is_swa_layer(hp, l):
    return (hp["arch"] == "gemma3" and hp["sliding_window"] > 0 and not OPT.get("no_swa")
            and l % GEMMA3_SWA_PATTERN < GEMMA3_SWA_PATTERN - 1)


def rope_setup(hp, t, l, n_ctx):
    """(base, freq_factors, mscale) for layer l as llama.cpp picks them."""
    base, ff = hp["base"], None
    if is_swa_layer(hp, l) and OPT.get("local_base") != "global":
        base = hp["base_swa"]
    if "rope_freqs.weight" in t:                     # llama 3.1 style, one set for all layers
        ff = t["rope_freqs.weight"]
    elif "rope_factors_long.weight" in t:            # phi3 LongRoPE
        # llama.cpp pads n_ctx up to a multiple of 256; n_ctx_seq = n_ctx / n_seq (1 here)
        n_ctx_seq = -(-n_ctx // 256) * 256
        long = n_ctx_seq > hp["n_ctx_orig"]
        if OPT.get("factors") == "other":
            long = not long
        ff = t["rope_factors_long.weight" if long else "rope_factors_short.weight"]
    if OPT.get("factors") == "none":
        ff = None
    mscale = hp["rope_attn_factor"]
    if OPT.get("no_attn_factor") or OPT.get("attn_factor_once"):
        mscale = 1.0
    return base, ff, mscale


def forward(hp, t, ids, n_ctx=256):
    arch = hp["arch"]
    eps, hd = hp["eps"], hp["head_dim"]
    nh, nkv = hp["n_head"], hp["n_head_kv"]
    E = hp["n_embd"]
    T = len(ids)
    x = t["token_embd.weight"][ids]
    if arch == "gemma3" and not OPT.get("no_embd_scale"):
        x = x * float(np.sqrt(np.float32(E)))
    q_scale = 1.0 / math.sqrt(hd)
    if OPT.get("q_scale") == "n_embd/n_head":
        q_scale = 1.0 / math.sqrt(E // nh)
    if OPT.get("attn_factor_once"):
        q_scale *= hp["rope_attn_factor"]
    pos = np.arange(T)
    causal = np.where(pos[None, :] > pos[:, None], -np.inf, 0.0)
    window = hp["sliding_window"] + OPT.get("swa_off", 0)
    # local layers: key p visible to query i iff p <= i and i - p < sliding_window
    local = np.where(pos[:, None] - pos[None, :] >= window, -np.inf, causal)
    post_norms = not OPT.get("no_post_norms")
    for l in range(hp["n_layer"]):
        p = f"blk.{l}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], eps)
        if p + "attn_qkv.weight" in t:
            qkv = h @ t[p + "attn_qkv.weight"].T
            q, k, v = qkv[:, :nh * hd], qkv[:, nh * hd:(nh + nkv) * hd], qkv[:, (nh + nkv) * hd:]
        else:
            q = h @ t[p + "attn_q.weight"].T
            k = h @ t[p + "attn_k.weight"].T
            v = h @ t[p + "attn_v.weight"].T
        if p + "attn_q.bias" in t:
            q, k, v = q + t[p + "attn_q.bias"], k + t[p + "attn_k.bias"], v + t[p + "attn_v.bias"]
        q, k, v = q.reshape(T, nh, hd), k.reshape(T, nkv, hd), v.reshape(T, nkv, hd)
        if p + "attn_q_norm.weight" in t:
            q = rmsnorm(q, t[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, t[p + "attn_k_norm.weight"], eps)
        base, ff, mscale = rope_setup(hp, t, l, n_ctx)
        q = rope(q, base, NEOX[arch], ff, mscale)
        k = rope(k, base, NEOX[arch], ff, mscale)
        mask = local if is_swa_layer(hp, l) else causal
        out = np.empty((T, nh, hd))
        for hh in range(nh):
            kv = hh // (nh // nkv)
            s = q[:, hh] @ k[:, kv].T * q_scale + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv]
        a = out.reshape(T, nh * hd) @ t[p + "attn_output.weight"].T
        if p + "post_attention_norm.weight" in t and post_norms:
            a = rmsnorm(a, t[p + "post_attention_norm.weight"], eps)
        x = x + a
        h = rmsnorm(x, t[p + "ffn_norm.weight"], eps)
        if p + "ffn_gate.weight" in t:
            g = h @ t[p + "ffn_gate.weight"].T
            u = h @ t[p + "ffn_up.weight"].T
        else:                                   # phi3: ffn_up rows = [gate half; up half]
            gu = h @ t[p + "ffn_up.weight"].T
            n_ff = gu.shape[-1] // 2
            g, u = gu[:, :n_ff], gu[:, n_ff:]
            if OPT.get("swap_halves"):
                g, u = u, g
        if arch == "gemma3":
            act = gelu_tanh(g) if OPT.get("gelu") == "exact" else gelu_ggml_cpu(g)
        else:
            act = g / (1 + np.exp(-g))
        f = (act * u) @ t[p + "ffn_down.weight"].T
        if p + "post_ffw_norm.weight" in t and post_norms:
            f = rmsnorm(f, t[p + "post_ffw_norm.weight"], eps)
        x = x + f
    h = rmsnorm(x, t["output_norm.weight"], eps)
    out_w = t.get("output.weight", t["token_embd.weight"])
    logits = h @ out_w.T
    m = logits.max(axis=-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))


def compare(hp, t, ref, n_ctx):
    """(max |logprob - numpy| over chosen + top-10, steps whose top-10 id set differs,
    steps whose chosen token is numpy's argmax over the allowed ids, steps)."""
    worst, bad_rank, argmax_ok, n = 0.0, 0, 0, 0
    for p in ref["prompts"]:
        gen = [s["token"] for s in p["steps"]]
        lp = forward(hp, t, p["tokens"] + gen, n_ctx)
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
    return worst, bad_rank, argmax_ok, n


def main():
    args = sys.argv[1:]
    ablate = "--ablate" in args
    args = [a for a in args if a != "--ablate"]
    if not args:
        sys.exit(__doc__)
    d = args[0]
    refs = args[1:] or REFERENCES
    ok = True
    for name in refs:
        with open(os.path.join(d, f"{name}.llama_cpp.json")) as f:
            ref = json.load(f)
        hp, t = load(os.path.join(d, ref["model"]))
        n_ctx = int(ref["flags"][ref["flags"].index("-c") + 1])
        OPT.clear()
        worst, bad_rank, argmax_ok, n = compare(hp, t, ref, n_ctx)
        good = worst < 1e-3 and bad_rank == 0 and argmax_ok == n
        ok &= good
        print(f"{name}: {n} steps, max |logprob - numpy| = {worst:.2e}, top-10 id sets differ "
              f"at {bad_rank}, chosen == numpy argmax over allowed ids at {argmax_ok}/{n}"
              f" -> {'OK' if good else 'MISMATCH'}")
        if ablate:
            for what, change, archs in ABLATIONS:
                if hp["arch"] not in archs or (hp["arch"] == "llama" and "rope_freqs.weight" not in t):
                    continue
                OPT.clear()
                OPT.update(change)
                w, br, am, _ = compare(hp, t, ref, n_ctx)
                print(f"    if {what}: max diff {w:.2e}, top-10 sets differ at {br}, "
                      f"argmax == chosen at {am}/{n}")
            OPT.clear()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
