#!/usr/bin/env python3
"""Peer benchmark: llguidance (PyPI) masks on the same regexes and texts as bench_constraint.sh.

Reads the token bytes from the GGUF's tokenizer metadata (byte-level BPE or SentencePiece, so
SmolLM2 and Gemma alike) and hands them to llguidance as a TokenizerWrapper; then for each
case follows the text token by token (greedy longest match over the vocabulary, as
`poot trace` does) and times `fill_next_token_bitmask` per step: cold on a fresh matcher,
warm on a second walk of the same matcher after `reset()` (its lexer caches kept).
Times include the Python call overhead (~0.3-1 us per call).

Each case runs --repeat times (a fresh matcher each time) and every step's time is the median
over the repeats.

usage: bench_constraint_llguidance.py MODEL.gguf CASES.tsv [--repeat N]
CASES.tsv lines: name<TAB>regex<TAB>text (the text may use \\n escapes).
"""
import json
import statistics
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


# llama.cpp's `tokenizer.ggml.token_type` values.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# Texts of end-of-turn tokens that also end the output (src/vocab/mod.rs END_OF_TURN_TEXTS).
END_OF_TURN = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
               "<|endoftext|>", "<|end_of_text|>", "<EOT>", "</s>"}


def gpt2_byte_decoder():
    """GPT-2's unicode -> byte table (the inverse of bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocabulary(meta):
    """Token bytes, special ids and end-of-sequence ids from the GGUF tokenizer metadata.

    An independent reading of what src/vocab/gguf.rs reads: `gpt2` (byte-level BPE, the GPT-2
    byte table undone) and `llama` (SentencePiece: `\u2581` is a space, `<0xNN>` is one byte);
    control, unknown and unused tokens are special and never text.
    """
    model = meta["tokenizer.ggml.model"].decode()
    assert model in ("gpt2", "llama"), f"tokenizer model {model} is not supported"
    texts = [t.decode() for t in meta["tokenizer.ggml.tokens"]]
    types = meta.get("tokenizer.ggml.token_type", [NORMAL] * len(texts))
    table = gpt2_byte_decoder()
    tokens, special = [], []
    for i, (text, ty) in enumerate(zip(texts, types)):
        is_byte = len(text) == 6 and text.startswith("<0x") and text.endswith(">")
        if ty in (UNKNOWN, CONTROL, UNUSED):
            special.append(i)
            tokens.append(text.encode())
        elif ty == USER_DEFINED:
            tokens.append(text.encode())
        elif ty == BYTE and is_byte:
            tokens.append(bytes([int(text[3:5], 16)]))
        elif model == "gpt2":
            try:
                tokens.append(bytes(table[c] for c in text))
            except KeyError:
                tokens.append(text.encode())
        else:
            tokens.append(text.replace("\u2581", " ").encode())
    eos = [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                             "tokenizer.ggml.eom_token_id") if k in meta]
    eos += [i for i, (t, ty) in enumerate(zip(texts, types))
            if t in END_OF_TURN and ty in (CONTROL, USER_DEFINED, UNKNOWN, UNUSED)]
    eos = sorted(set(eos))
    special = sorted(set(special) | set(eos))
    return tokens, special, eos


class ByteTokenizer:
    """The token list llguidance's TokenizerWrapper wants; encodes by greedy longest match."""

    def __init__(self, tokens, special, eos):
        self.tokens = tokens
        self.special_token_ids = special
        self.eos_token_id = eos[0]
        self.bos_token_id = None
        skip = set(special)
        self.index = {}
        for i, b in enumerate(tokens):
            if i not in skip and b:
                self.index.setdefault(b, i)
        self.max_len = max(len(b) for b in self.index)

    def __call__(self, text):
        if isinstance(text, str):
            text = text.encode()
        out, pos = [], 0
        while pos < len(text):
            for n in range(min(self.max_len, len(text) - pos), 0, -1):
                t = self.index.get(text[pos:pos + n])
                if t is not None:
                    out.append(t)
                    pos += n
                    break
            else:
                raise SystemExit(f"no token for byte {text[pos]:#x}")
        return out


def percentiles(xs):
    xs = sorted(xs)
    rank = lambda p: xs[max(1, -(-len(xs) * p // 100)) - 1]
    return {"p50_us": round(rank(50), 3), "p99_us": round(rank(99), 3), "max_us": round(xs[-1], 3)}


def main():
    import llguidance
    import llguidance.numpy

    args = sys.argv[1:]
    repeat = 1
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i:i + 2]
    model, cases_path = args
    tokens, special, eos = vocabulary(read_gguf_metadata(model))
    tokenize = ByteTokenizer(tokens, special, eos)
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(tokenize), eos_token=eos)
    mask = llguidance.numpy.allocate_token_bitmask(1, tok.vocab_size)
    allowed = lambda t: bool(mask[0, t // 32] >> (t % 32) & 1)

    def walk(matcher, ids):
        times, ok = [], True
        for t in ids + [None]:
            t0 = time.perf_counter()
            llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
            times.append((time.perf_counter() - t0) * 1e6)
            if t is None:
                return times, ok and any(allowed(e) for e in eos)
            if not allowed(t) or not matcher.consume_token(t):
                return times, False

    all_cold, all_warm = [], []
    for line in open(cases_path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        name, regex, text = line.rstrip("\n").split("\t")
        ids = tokenize(text.replace("\\n", "\n").encode())
        compiles, colds, warms, ok, refused = [], [], [], True, None
        for _ in range(repeat):
            t0 = time.perf_counter()
            grammar = llguidance.LLMatcher.grammar_from_regex(regex)
            matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
            compiles.append((time.perf_counter() - t0) * 1e3)
            if matcher.is_error():
                refused = matcher.get_error()
                break
            cold, cold_ok = walk(matcher, ids)
            # The warm walk reuses the matcher, whose lexer caches the first walk filled.
            matcher.reset()
            warm, warm_ok = walk(matcher, ids)
            colds.append(cold)
            warms.append(warm)
            ok = ok and cold_ok and warm_ok and len(cold) == len(warm)
        out = {"engine": "llguidance", "name": name, "tokens": len(ids),
               "compile_ms": round(statistics.median(compiles), 3)}
        if refused:
            print(json.dumps({**out, "refused": refused}))
            continue
        cold = [statistics.median(step) for step in zip(*colds)]
        warm = [statistics.median(step) for step in zip(*warms)]
        all_cold.extend(cold)
        all_warm.extend(warm)
        print(json.dumps({**out, "cold": percentiles(cold), "warm": percentiles(warm), "accepted": ok,
                          "cold_us": [round(x, 3) for x in cold], "warm_us": [round(x, 3) for x in warm]}))
    print(json.dumps({"engine": "llguidance", "summary": True, "masks": len(all_warm),
                      "cold": percentiles(all_cold), "warm": percentiles(all_warm)}))


if __name__ == "__main__":
    main()
