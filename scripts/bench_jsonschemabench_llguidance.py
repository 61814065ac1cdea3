#!/usr/bin/env python3
"""Peer benchmark: llguidance (PyPI) on JSONSchemaBench files, the work `poot coverage` times.

For each file (`{"schema":..,"tests":[{"data":..,"valid":bool},..]}`): compile the schema
(`LLMatcher.grammar_from_json_schema`, compact separators as our canonical form), then follow
each valid instance token by token on one matcher (reset between instances, so its caches
carry over as our constraint's do) and time every `fill_next_token_bitmask`. The instance text
is compact JSON with the instance's own key order: llguidance emits properties in the schema's
order and has no sorted-keys mode, so our sorted canonical form would stop early on most
objects. A walk ends where llguidance rejects a token; the summary counts the instances
followed to the end. Times include the Python call overhead (~0.3-1 us per call).

usage: bench_jsonschemabench_llguidance.py MODEL.gguf PATH...  (files or folders)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_constraint_llguidance import ByteTokenizer, percentiles, read_gguf_metadata, vocabulary  # noqa: E402


def files(paths):
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                yield os.path.join(p, name)
        else:
            yield p


def main():
    import llguidance
    import llguidance.numpy

    model, *paths = sys.argv[1:]
    tokens, special, eos = vocabulary(read_gguf_metadata(model))
    tokenize = ByteTokenizer(tokens, special, eos)
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(tokenize), eos_token=eos)
    mask = llguidance.numpy.allocate_token_bitmask(1, tok.vocab_size)
    allowed = lambda t: bool(mask[0, t // 32] >> (t % 32) & 1)
    compile_ms, mask_us = [], []
    counts = {"files": 0, "compiled": 0, "instances": 0, "followed": 0}
    for path in files(paths):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        counts["files"] += 1
        t0 = time.perf_counter()
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                data["schema"], defaults={"whitespace_flexible": False})
            matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
        except Exception:  # noqa: BLE001 (a refused schema, whatever the exception)
            continue
        elapsed = (time.perf_counter() - t0) * 1e3
        if matcher.is_error():
            continue
        counts["compiled"] += 1
        compile_ms.append(elapsed)
        for test in data.get("tests", []):
            if not test.get("valid"):
                continue
            counts["instances"] += 1
            text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
            matcher.reset()
            followed = True
            for t in tokenize(text.encode()):
                t0 = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
                mask_us.append((time.perf_counter() - t0) * 1e6)
                if not allowed(t) or not matcher.consume_token(t):
                    followed = False
                    break
            counts["followed"] += followed
    out = {"engine": "llguidance", "summary": True, **counts, "mask_steps": len(mask_us)}
    if compile_ms:
        c = percentiles(compile_ms)
        out.update({"compile_ms_p50": c["p50_us"], "compile_ms_p99": c["p99_us"]})
    if mask_us:
        m = percentiles(mask_us)
        out.update({"p50_us": m["p50_us"], "p99_us": m["p99_us"]})
        out["steps_over_100us"] = sum(1 for x in mask_us if x > 100)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
