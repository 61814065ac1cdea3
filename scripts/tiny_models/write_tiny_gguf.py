#!/usr/bin/env python3
"""Writes tiny random-weight GGUF models (llama, qwen2, qwen3) that llama.cpp loads.

    ~/.cache/poot/venv/bin/python scripts/tiny_models/write_tiny_gguf.py OUTDIR [ARCH...]

writes OUTDIR/llama.gguf, OUTDIR/qwen2.gguf and OUTDIR/qwen3.gguf (or only the named ones).
Needs the PyPI packages gguf==0.19.0 and numpy. The output is deterministic: every architecture
draws its weights from numpy.random.default_rng(<fixed seed>) in a fixed order, and GGUFWriter
writes the keys and tensors in the order they are added, so two runs give byte-identical files.

Shape (all architectures): 2 layers, n_embd 64, 4 query heads, 2 KV heads, n_ff 128,
context 256, RMSNorm eps 1e-6, every tensor F32 (general.file_type 0 = ALL_F32).
Vocabulary (320 tokens): a GPT-2 style byte-level BPE. Ids 0..255 are the 256 byte tokens
(id b = bytes_to_unicode()[b], so a token id below 256 *is* the byte value), ids 256..316 are
the results of the 61 merges in MERGES (in that order), then <|endoftext|> (317),
<|im_start|> (318), <|im_end|> (319) as CONTROL tokens.

  llama: head_dim 16, rope.freq_base 1e4, rope.dimension_count 16, untied output.weight.
  qwen2: head_dim 16, rope.freq_base 1e6, q/k/v biases, TIED output (no output.weight);
         token_embd is scaled by 0.05 and output_norm.weight by 10 (see OUTPUT_SCALE).
  qwen3: head_dim 32 (attention.key_length = value_length = 32 != n_embd/n_head), freq_base 1e6,
         per-head q/k RMSNorm weights (attn_q_norm / attn_k_norm, length 32), untied output.
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

SEEDS = {"llama": 1001, "qwen2": 1002, "qwen3": 1003}

ARCHS = {
    "llama": dict(pre="llama-bpe", rope_base=10000.0, head_dim=16, qkv_bias=False,
                  qk_norm=False, tied=False, eos="<|endoftext|>", rope_dim=True),
    "qwen2": dict(pre="qwen2", rope_base=1000000.0, head_dim=16, qkv_bias=True,
                  qk_norm=False, tied=True, eos="<|im_end|>", rope_dim=False,
                  embd_scale=0.05, output_norm_scale=10.0),
    "qwen3": dict(pre="qwen2", rope_base=1000000.0, head_dim=32, qkv_bias=False,
                  qk_norm=True, tied=False, eos="<|im_end|>", rope_dim=False),
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
