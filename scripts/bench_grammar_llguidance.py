#!/usr/bin/env python3
"""Peer benchmark: llguidance (PyPI) masks on the grammar cases of bench_grammar.sh.

The same vocabulary reading and greedy tokenization as bench_constraint_llguidance.py (imported
from there). A case names a GBNF file in tests/data/grammars/ (converted by llguidance's own
GBNF-to-Lark converter, `llguidance.grammar_from("gbnf", ...)`) or `json_object` (any JSON
value: the JSON schema `{}` with flexible whitespace). For each case the text is followed token
by token and `fill_next_token_bitmask` is timed per step: cold on a fresh matcher, warm on a
second walk of the same matcher after `reset()`. Each case runs --repeat times and every
step's time is the median over the repeats. Times include the Python call overhead
(~0.3-1 us per call).

usage: bench_grammar_llguidance.py MODEL.gguf CASES.tsv GRAMMAR_DIR [--repeat N]
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_constraint_llguidance import ByteTokenizer, percentiles, read_gguf_metadata, vocabulary  # noqa: E402


def main():
    import llguidance
    import llguidance.numpy

    args = sys.argv[1:]
    repeat = 1
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i:i + 2]
    model, cases_path, grammar_dir = args
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

    def grammar(kind):
        if kind == "json_object":
            schema = {"x-guidance": {"whitespace_flexible": True}}
            return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        with open(os.path.join(grammar_dir, kind), encoding="utf-8") as f:
            return llguidance.grammar_from("gbnf", f.read())

    for line in open(cases_path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        name, kind, text = line.rstrip("\n").split("\t")
        ids = tokenize(text.replace("\\n", "\n").encode())
        compiles, colds, warms, ok, refused = [], [], [], True, None
        for _ in range(repeat):
            t0 = time.perf_counter()
            try:
                matcher = llguidance.LLMatcher(tok, grammar(kind), log_level=0)
            except Exception as e:  # the GBNF converter refuses some syntax
                refused = str(e)[:120]
                break
            compiles.append((time.perf_counter() - t0) * 1e3)
            if matcher.is_error():
                refused = matcher.get_error()[:120]
                break
            cold, cold_ok = walk(matcher, ids)
            matcher.reset()
            warm, warm_ok = walk(matcher, ids)
            colds.append(cold)
            warms.append(warm)
            ok = ok and cold_ok and warm_ok and len(cold) == len(warm)
        out = {"engine": "llguidance", "name": name, "tokens": len(ids)}
        if refused:
            print(json.dumps({**out, "refused": refused}))
            continue
        cold = [statistics.median(step) for step in zip(*colds)]
        warm = [statistics.median(step) for step in zip(*warms)]
        print(json.dumps({**out, "compile_ms": round(statistics.median(compiles), 3),
                          "cold": percentiles(cold), "warm": percentiles(warm), "accepted": ok,
                          "cold_us": [round(x, 3) for x in cold], "warm_us": [round(x, 3) for x in warm]}))


if __name__ == "__main__":
    main()
