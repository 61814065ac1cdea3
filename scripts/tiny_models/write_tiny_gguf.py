#!/usr/bin/env python3
"""Writes tiny random-weight GGUF models that llama.cpp loads.

    ~/.cache/poot/venv/bin/python scripts/tiny_models/write_tiny_gguf.py OUTDIR [ARCH...]

writes OUTDIR/<arch>.gguf for llama, qwen2, qwen3, gemma3, phi3 and llama3 (or only the named
ones). Needs the PyPI packages gguf==0.19.0 and numpy. The output is deterministic: every model
draws its weights from numpy.random.default_rng(SEEDS[arch]) in a fixed order, and GGUFWriter
writes the keys and tensors in the order they are added, so two runs give byte-identical files.

Vocabulary (320 tokens, all models): a GPT-2 style byte-level BPE. Ids 0..255 are the 256 byte
tokens (id b = bytes_to_unicode()[b], so a token id below 256 *is* the byte value), ids 256..316
are the results of the 61 merges in MERGES (in that order), then <|endoftext|> (317),
<|im_start|> (318), <|im_end|> (319) as CONTROL tokens. Every tensor is F32
(general.file_type 0 = ALL_F32).

llama, qwen2, qwen3 (write()): 2 layers, n_embd 64, 4 query heads, 2 KV heads, n_ff 128,
context 256, RMSNorm eps 1e-6.
  llama: head_dim 16, rope.freq_base 1e4, rope.dimension_count 16, untied output.weight.
  qwen2: head_dim 16, rope.freq_base 1e6, q/k/v biases, TIED output (no output.weight);
         token_embd is scaled by 0.05 and output_norm.weight by 10 (see OUTPUT_SCALE).
  qwen3: head_dim 32 (attention.key_length = value_length = 32 != n_embd/n_head), freq_base 1e6,
         per-head q/k RMSNorm weights (attn_q_norm / attn_k_norm, length 32), untied output.
gemma3, phi3, llama3 (write_gemma3 / write_phi3 / write_llama3, parameters in GEMMA3 / PHI3 /
LLAMA3):
  gemma3: Gemma 3 (keys and tensor names as in gemma-3-270m's GGUF): 6 layers, n_embd 64,
          4 heads, 1 KV head, head_dim 32, n_ff 128, sliding window 8, QK-norm, post-attention
          and post-FFN norms, GELU-gated FFN, tied output, context 256.
  phi3:   Phi-3 with LongRoPE: 2 layers, n_embd 64, 4 heads, 2 KV heads, fused attn_qkv and
          ffn_up (gate | up), rope_factors_short / rope_factors_long, original context 256,
          context 4096, rope.scaling.attn_factor, RMSNorm eps 1e-5, untied output.
  llama3: architecture llama with Llama 3.1 RoPE scaling baked into rope_freqs.weight
          (freq_base 5e5, factor 8, low/high_freq_factor 1/4, original context 64); otherwise
          like llama.
"""

import os
import sys

import numpy as np

import gguf

N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX = 256
RMS_EPS = 1e-6
N_VOCAB = 320

# Scale of output.weight (untied models): normal(0, OUTPUT_SCALE / sqrt(n_embd)). With the plain
# 1/sqrt(in) scale the logits have std ~1 and the top-1 probability over 320 tokens is ~0.03;
# 4x spreads them so that the top-1 probability is typically 0.2-0.9.
# qwen2's output is tied to token_embd. With token_embd ~ normal(0, 1) the residual stream is
# dominated by the input token's own embedding and the model just repeats its last input token
# with probability ~1, so qwen2 uses token_embd ~ normal(0, embd_scale = 0.05) (real models'
# embeddings are small too) and scales output_norm.weight by output_norm_scale = 10 to bring
# the logits back to a spread like the untied models'.
OUTPUT_SCALE = 4.0

SEEDS = {"llama": 1001, "qwen2": 1002, "qwen3": 1003,
         "gemma3": 1004, "phi3": 1005, "llama3": 1006}

ARCHS = {
    "llama": dict(pre="llama-bpe", rope_base=10000.0, head_dim=16, qkv_bias=False,
                  qk_norm=False, tied=False, eos="<|endoftext|>", rope_dim=True),
    "qwen2": dict(pre="qwen2", rope_base=1000000.0, head_dim=16, qkv_bias=True,
                  qk_norm=False, tied=True, eos="<|im_end|>", rope_dim=False,
                  embd_scale=0.05, output_norm_scale=10.0),
    "qwen3": dict(pre="qwen2", rope_base=1000000.0, head_dim=32, qkv_bias=False,
                  qk_norm=True, tied=False, eos="<|im_end|>", rope_dim=False),
    # The three below have their own writers (write_gemma3 / write_phi3 / write_llama3).
    "gemma3": dict(writer="gemma3"),
    "phi3": dict(writer="phi3"),
    "llama3": dict(writer="llama3"),
}

# Merges in rank order: each result is the concatenation of the two parts, and each part is a
# byte token or the result of an earlier merge. "Ġ" is the byte-level symbol for a space.
MERGES = [
    "Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t", "e n",
    "o r", "Ġ w", "e s", "Ġ o", "i s", "a n", "Ġ c", "i t", "Ġ b", "Ġ f",
    "Ġ p", "Ġ m", "a r", "a l", "o u", "Ġ d", "Ġ h", "l e", "e d", "Ġ i",
    "Ġt he", "in g", "Ġa n", "Ġan d", "Ġt o", "Ġo f", "Ġi n", "Ġ is", "t h", "o m",
    "Ġ th", "Ġ l", "Ġ n", "Ġ e", "l l", "i c", "Ġ g", "Ġ re", "Ġ it", "o w",
    "Ġw h", "Ġ on", "Ġf or", "Ġ ing", "a s", "Ġ y", "Ġ he", "Ġs t", "s t", "Ġ at",
    "Ġ T",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def bytes_to_unicode():
    """GPT-2's byte -> printable unicode character mapping."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def vocab():
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    known = set(tokens)
    for m in MERGES:
        a, b = m.split(" ")
        assert a in known and b in known, f"merge {m!r}: part not in vocab"
        assert a + b not in known, f"merge {m!r}: result already in vocab"
        tokens.append(a + b)
        known.add(a + b)
    tokens += SPECIALS
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS)) + \
        [gguf.TokenType.CONTROL] * len(SPECIALS)
    assert len(tokens) == N_VOCAB, len(tokens)
    return tokens, types


def write(arch, path):
    cfg = ARCHS[arch]
    if "writer" in cfg:
        return NEW_WRITERS[cfg["writer"]](arch, path)
    rng = np.random.default_rng(SEEDS[arch])
    hd = cfg["head_dim"]
    n_q = N_HEAD * hd
    n_kv = N_HEAD_KV * hd

    def mat(n_out, n_in, scale=1.0):
        return (rng.standard_normal((n_out, n_in)) * (scale / np.sqrt(n_in))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.2 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{arch}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    if cfg["rope_dim"]:
        w.add_rope_dimension_count(hd)

    tokens, types = vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(cfg["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index(cfg["eos"]))
    w.add_add_bos_token(False)

    # Tensors, drawn in this fixed order. Matrices are numpy (out, in); gguf-py writes them
    # with ggml's ne = [in, out].
    embd_scale = np.float32(cfg.get("embd_scale", 1.0))
    w.add_tensor("token_embd.weight",
                 (rng.standard_normal((N_VOCAB, N_EMBD)) * embd_scale).astype(np.float32))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(N_EMBD))
        w.add_tensor(p + "attn_q.weight", mat(n_q, N_EMBD))
        w.add_tensor(p + "attn_k.weight", mat(n_kv, N_EMBD))
        w.add_tensor(p + "attn_v.weight", mat(n_kv, N_EMBD))
        if cfg["qkv_bias"]:
            w.add_tensor(p + "attn_q.bias", bias(n_q))
            w.add_tensor(p + "attn_k.bias", bias(n_kv))
            w.add_tensor(p + "attn_v.bias", bias(n_kv))
        if cfg["qk_norm"]:
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        w.add_tensor(p + "attn_output.weight", mat(N_EMBD, n_q))
        w.add_tensor(p + "ffn_norm.weight", norm(N_EMBD))
        w.add_tensor(p + "ffn_gate.weight", mat(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight",
                 (norm(N_EMBD) * np.float32(cfg.get("output_norm_scale", 1.0))).astype(np.float32))
    if not cfg["tied"]:
        w.add_tensor("output.weight", mat(N_VOCAB, N_EMBD, OUTPUT_SCALE))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------------
# gemma3, phi3, llama3: own writers (the three above keep the exact key/tensor/draw order of
# write(), so their files stay byte-identical). Shared conventions: F32 everywhere, the same
# 320-token vocabulary, weights from numpy.random.default_rng(SEEDS[arch]) in the order the
# tensors are added, matrices normal(0, scale / sqrt(n_in)), norm weights 1 + 0.1 * normal.

GEMMA3 = dict(n_layer=6, n_embd=64, n_head=4, n_head_kv=1, head_dim=32, n_ff=128, n_ctx=256,
              eps=1e-6, rope_base=1000000.0, sliding_window=8,
              # Tied output: token_embd ~ normal(0, embd_scale) (llama.cpp multiplies it by
              # sqrt(n_embd) = 8 on input); output_norm.weight scaled by output_norm_scale.
              embd_scale=0.05, output_norm_scale=8.0,
              # post_attention_norm / post_ffw_norm weights scaled by these. The attention
              # outputs must outweigh the input token's own (tied) embedding in the residual
              # stream, or the model mostly repeats its last input token. The FFN's share is
              # kept moderate because llama.cpp's CPU GELU goes through an fp16 table: an input
              # within ~1e-7 (relative) of an fp16 rounding midpoint rounds either way depending
              # on f32 vs f64 arithmetic, and a large post_ffw_norm amplifies such a flip into
              # logprob differences of 1e-3 against an exact reimplementation (scale 4: 4e-3).
              post_attn_norm_scale=8.0, post_ffw_norm_scale=1.5)

PHI3 = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128,
            n_ctx=4096, orig_ctx=256, eps=1e-5, rope_base=10000.0,
            # rope_factors_short / rope_factors_long (n_rot / 2 = 8 each): frequency i is
            # divided by factor[i].
            short_factors=[1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5],
            long_factors=[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0])

LLAMA3 = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, n_ctx=256,
              eps=1e-6, rope_base=500000.0,
              # Llama 3.1 rope scaling, baked into rope_freqs.weight as the converter does
              factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, orig_ctx=64)


def _mats(rng):
    def mat(n_out, n_in, scale=1.0):
        return (rng.standard_normal((n_out, n_in)) * (scale / np.sqrt(n_in))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    return mat, norm


def _add_vocab(w, pre, eos):
    tokens, types = vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index(eos))
    w.add_add_bos_token(False)


def _finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama3_rope_factors(c):
    """rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py (LlamaModel) computes it for
    rope_scaling.rope_type == "llama3": one factor per rotated pair, llama.cpp divides the
    pair's frequency by it."""
    import math
    dim, base = c["head_dim"], c["rope_base"]
    factor, lo, hi, old = c["factor"], c["low_freq_factor"], c["high_freq_factor"], c["orig_ctx"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low_freq_wavelen = old / lo
    high_freq_wavelen = old / hi
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_freq_wavelen:
            out.append(1.0)
        elif wavelen > low_freq_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gemma3(arch, path):
    """Gemma 3 as llama.cpp reads it (keys and tensors mirror gemma-3-270m's GGUF):
    6 layers, head_dim 32 (key_length != n_embd / n_head = 16), 1 KV head, QK-norm,
    post-attention / post-FFN norms, GELU-gated FFN, tied output, sliding window 8
    (llama.cpp: layers 0-4 local with RoPE base 10000, layer 5 global with freq_base 1e6)."""
    c = GEMMA3
    rng = np.random.default_rng(SEEDS[arch])
    mat, norm = _mats(rng)
    hd = c["head_dim"]
    n_q, n_kv = c["n_head"] * hd, c["n_head_kv"] * hd
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{arch}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(c["rope_base"])
    w.add_sliding_window(c["sliding_window"])
    w.add_head_count_kv(c["n_head_kv"])
    _add_vocab(w, "llama-bpe", "<|endoftext|>")

    E = c["n_embd"]
    w.add_tensor("token_embd.weight",
                 (rng.standard_normal((N_VOCAB, E)) * np.float32(c["embd_scale"])).astype(np.float32))
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(E))
        w.add_tensor(p + "attn_q.weight", mat(n_q, E))
        w.add_tensor(p + "attn_k.weight", mat(n_kv, E))
        w.add_tensor(p + "attn_v.weight", mat(n_kv, E))
        w.add_tensor(p + "attn_q_norm.weight", norm(hd))
        w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        w.add_tensor(p + "attn_output.weight", mat(E, n_q))
        w.add_tensor(p + "post_attention_norm.weight",
                     (norm(E) * np.float32(c["post_attn_norm_scale"])).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", norm(E))
        w.add_tensor(p + "ffn_gate.weight", mat(c["n_ff"], E))
        w.add_tensor(p + "ffn_up.weight", mat(c["n_ff"], E))
        w.add_tensor(p + "ffn_down.weight", mat(E, c["n_ff"]))
        w.add_tensor(p + "post_ffw_norm.weight",
                     (norm(E) * np.float32(c["post_ffw_norm_scale"])).astype(np.float32))
    w.add_tensor("output_norm.weight",
                 (norm(E) * np.float32(c["output_norm_scale"])).astype(np.float32))
    _finish(w)


def write_phi3(arch, path):
    """Phi-3 (128k-style LongRoPE) as llama.cpp's converter writes it: fused attn_qkv, fused
    ffn_up (gate half first, then up half), rope_factors_long / rope_factors_short,
    rope.scaling.original_context_length and rope.scaling.attn_factor."""
    import math
    c = PHI3
    rng = np.random.default_rng(SEEDS[arch])
    mat, norm = _mats(rng)
    E, nh, nkv = c["n_embd"], c["n_head"], c["n_head_kv"]
    hd = E // nh
    n_rot = hd
    assert len(c["short_factors"]) == len(c["long_factors"]) == n_rot // 2
    scale = c["n_ctx"] / c["orig_ctx"]
    attn_factor = math.sqrt(1 + math.log(scale) / math.log(c["orig_ctx"]))  # converter: longrope
    w = gguf.GGUFWriter(path, arch)
    # Not "tiny-phi3": llama.cpp's vocabulary loader applies Phi-3 token-attribute fixes to any
    # model whose general.name contains "phi3" or "phi-3", which look up the SPM tokens "</s>",
    # "<unk>" and "<s>" by text and fail the load (std::map::at) on a vocabulary without them.
    w.add_name("tiny-phi")
    w.add_context_length(c["n_ctx"])
    w.add_rope_scaling_orig_ctx_len(c["orig_ctx"])
    w.add_embedding_length(E)
    w.add_feed_forward_length(c["n_ff"])
    w.add_block_count(c["n_layer"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(c["rope_base"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_sliding_window(0)  # converter: 0 = no sliding window (llama.cpp ignores phi3 SWA anyway)
    w.add_rope_scaling_attn_factors(attn_factor)
    _add_vocab(w, "llama-bpe", "<|endoftext|>")

    # the converter yields the rope factor tensors before the model's own tensors
    w.add_tensor("rope_factors_long.weight", np.array(c["long_factors"], dtype=np.float32))
    w.add_tensor("rope_factors_short.weight", np.array(c["short_factors"], dtype=np.float32))
    w.add_tensor("token_embd.weight", rng.standard_normal((N_VOCAB, E)).astype(np.float32))
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(E))
        w.add_tensor(p + "attn_qkv.weight", mat(E + 2 * nkv * hd, E))
        w.add_tensor(p + "attn_output.weight", mat(E, E))
        w.add_tensor(p + "ffn_norm.weight", norm(E))
        w.add_tensor(p + "ffn_up.weight", mat(2 * c["n_ff"], E))
        w.add_tensor(p + "ffn_down.weight", mat(E, c["n_ff"]))
    w.add_tensor("output_norm.weight", norm(E))
    w.add_tensor("output.weight", mat(N_VOCAB, E, OUTPUT_SCALE))
    _finish(w)


def write_llama3(arch, path):
    """Architecture `llama` with Llama 3.1 rope scaling: rope_freqs.weight (head_dim / 2 factors,
    Llama 3.1 formula with factor 8, low_freq_factor 1, high_freq_factor 4,
    original_max_position_embeddings 64). Like the converter for rope_type "llama3", no
    llama.rope.scaling.* key is written. Otherwise like llama.gguf (GQA 4/2, NORM RoPE)."""
    c = LLAMA3
    rng = np.random.default_rng(SEEDS[arch])
    mat, norm = _mats(rng)
    E, hd = c["n_embd"], c["head_dim"]
    n_q, n_kv = c["n_head"] * hd, c["n_head_kv"] * hd
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"tiny-{arch}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(E)
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    _add_vocab(w, "llama-bpe", "<|endoftext|>")

    w.add_tensor("rope_freqs.weight", llama3_rope_factors(c))
    w.add_tensor("token_embd.weight", rng.standard_normal((N_VOCAB, E)).astype(np.float32))
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(E))
        w.add_tensor(p + "attn_q.weight", mat(n_q, E))
        w.add_tensor(p + "attn_k.weight", mat(n_kv, E))
        w.add_tensor(p + "attn_v.weight", mat(n_kv, E))
        w.add_tensor(p + "attn_output.weight", mat(E, n_q))
        w.add_tensor(p + "ffn_norm.weight", norm(E))
        w.add_tensor(p + "ffn_gate.weight", mat(c["n_ff"], E))
        w.add_tensor(p + "ffn_up.weight", mat(c["n_ff"], E))
        w.add_tensor(p + "ffn_down.weight", mat(E, c["n_ff"]))
    w.add_tensor("output_norm.weight", norm(E))
    w.add_tensor("output.weight", mat(N_VOCAB, E, OUTPUT_SCALE))
    _finish(w)


NEW_WRITERS = {"gemma3": write_gemma3, "phi3": write_phi3, "llama3": write_llama3}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    archs = sys.argv[2:] or list(ARCHS)
    os.makedirs(out, exist_ok=True)
    for arch in archs:
        path = os.path.join(out, f"{arch}.gguf")
        write(arch, path)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
