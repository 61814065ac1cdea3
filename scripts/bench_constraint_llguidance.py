#!/usr/bin/env python3
"""Peer benchmark: llguidance (PyPI) masks on the same regexes and texts as bench_constraint.sh.

Builds a Hugging Face tokenizer.json from the GGUF's tokenizer metadata (byte-level BPE:
vocab, merges, special tokens), then for each case follows the text token by token (greedy
longest match over the vocabulary, as `poot trace` does) and times
`fill_next_token_bitmask` per step: cold on a fresh matcher, warm on a second walk.
Times include the Python call overhead (~0.3-1 us per call).

usage: bench_constraint_llguidance.py MODEL.gguf CASES.tsv [--tokenizer-json OUT.json]
CASES.tsv lines: name<TAB>regex<TAB>text (the text may use \\n escapes).
"""
import json
import struct
import sys
import time


def read_gguf_metadata(path):
    """The metadata of a GGUF file (versions 2/3, little-endian), values as Python objects."""
    with open(path, "rb") as f:
        data = f.read(64 * 1024 * 1024)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n]
        pos += n
        return s

    scalars = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et = take("<I")
            return [value(et) for _ in range(take("<Q"))]
        return take(scalars[t])

    assert data[:4] == b"GGUF", "not a GGUF file"
    pos = 8
    take("<Q")  # tensor count
    meta = {}
    for _ in range(take("<Q")):
        key = string().decode()
        meta[key] = value(take("<I"))
    return meta


def tokenizer_json(meta):
    assert meta["tokenizer.ggml.model"] == b"gpt2", "only byte-level BPE models"
    tokens = [t.decode() for t in meta["tokenizer.ggml.tokens"]]
    types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    merges = [m.decode() for m in meta.get("tokenizer.ggml.merges", [])]
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def percentiles(xs):
    xs = sorted(xs)
    rank = lambda p: xs[max(1, -(-len(xs) * p // 100)) - 1]
    return {"p50_us": round(rank(50), 3), "p99_us": round(rank(99), 3), "max_us": round(xs[-1], 3)}


def main():
    import llguidance
    import llguidance.numpy
    import numpy as np

    args = sys.argv[1:]
    out_json = None
    if "--tokenizer-json" in args:
        i = args.index("--tokenizer-json")
        out_json = args[i + 1]
        del args[i:i + 2]
    model, cases_path = args
    meta = read_gguf_metadata(model)
    tj = tokenizer_json(meta)
    tj_text = json.dumps(tj)
    if out_json:
        with open(out_json, "w") as f:
            f.write(tj_text)
    eos = meta["tokenizer.ggml.eos_token_id"]
    tok = llguidance.LLTokenizer(tj_text, eos_token=eos)
    n_vocab = tok.vocab_size

    # Greedy longest match over the token bytes, as `poot trace` does.
    token_bytes = {}
    for i in range(n_vocab):
        if i in {a["id"] for a in tj["added_tokens"]}:
            continue
        b = tok.decode_bytes([i])
        if b:
            token_bytes.setdefault(b, i)
    max_len = max(len(b) for b in token_bytes)

    def tokenize(text):
        out, pos = [], 0
        while pos < len(text):
            for n in range(min(max_len, len(text) - pos), 0, -1):
                t = token_bytes.get(text[pos:pos + n])
                if t is not None:
                    out.append(t)
                    pos += n
                    break
            else:
                raise SystemExit(f"no token for byte {text[pos]:#x}")
        return out

    all_cold, all_warm = [], []
    for line in open(cases_path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        name, regex, text = line.rstrip("\n").split("\t")
        text = text.replace("\\n", "\n").encode()
        tokens = tokenize(text)
        t0 = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_regex(regex)
        matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
        compile_ms = (time.perf_counter() - t0) * 1e3
        assert not matcher.is_error(), matcher.get_error()
        mask = llguidance.numpy.allocate_token_bitmask(1, n_vocab)
        walks = []
        for walk in range(2):
            if walk:
                matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
            times, ok = [], True
            for t in tokens + [None]:
                t0 = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
                times.append((time.perf_counter() - t0) * 1e6)
                if t is None:
                    ok = ok and bool(mask[0, eos // 32] >> (eos % 32) & 1)
                    break
                if not (mask[0, t // 32] >> (t % 32)) & 1 or not matcher.consume_token(t):
                    ok = False
                    break
            walks.append((times, ok))
        all_cold.extend(walks[0][0])
        all_warm.extend(walks[1][0])
        print(json.dumps({"engine": "llguidance", "name": name, "tokens": len(tokens),
                          "compile_ms": round(compile_ms, 3), "cold": percentiles(walks[0][0]),
                          "warm": percentiles(walks[1][0]), "accepted": walks[0][1]}))
    print(json.dumps({"engine": "llguidance", "summary": True, "masks": len(all_warm),
                      "cold": percentiles(all_cold), "warm": percentiles(all_warm)}))


if __name__ == "__main__":
    main()
