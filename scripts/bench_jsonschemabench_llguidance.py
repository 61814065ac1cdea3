#!/usr/bin/env python3
"""Peer benchmark: llguidance (PyPI) on JSONSchemaBench-format files, the work `poot coverage`
times and judges.

For each file (`{"schema":..,"tests":[{"data":..,"valid":bool},..]}`): compile the schema
(`LLMatcher.grammar_from_json_schema`, compact separators as our canonical form), then follow
each valid instance token by token on one matcher (reset between instances, so its caches
carry over as our constraint's do) and time every `fill_next_token_bitmask`; an invalid
instance is checked untimed (`validate_tokens`, then whether the matcher accepts at its end).
The instance text is compact JSON with each object's keys put in the order its schema lists
them (`in_schema_order`: local `$ref`s, `allOf` merged, the `anyOf`/`oneOf` branch naming most
of the keys; unlisted keys after, in the instance's order): llguidance emits properties in
the schema's order and has no sorted-keys mode, so our sorted canonical form, or the
instance's own order, would stop early on many objects. Where that guess misses llguidance's
order, a valid instance counts as a wrong reject (and an invalid one is rejected for the wrong
reason). A walk ends where llguidance rejects a token.

Prints one JSON line per file, as `poot coverage` does (`status` `ok` | `compile_error` (with
`message`) | `wrong_reject` | `wrong_accept`, `tests`: the failing indices), then a summary
line: the counts, the instances followed to the end, compile and mask p50/p99. Times include
the Python call overhead (~0.3-1 us per call).

usage: bench_jsonschemabench_llguidance.py MODEL.gguf PATH...  (files or folders)
"""
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_constraint_llguidance import ByteTokenizer, percentiles, read_gguf_metadata, vocabulary  # noqa: E402


def files(paths):
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                yield os.path.join(p, name)
        else:
            yield p


def resolve(schema, root, depth=0):
    """A local `$ref` (`#`, `#/a/b`) followed to its target; anything else as it is."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 32:
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        target = root
        for part in filter(None, ref[1:].split("/")):
            part = urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return schema
        if len(schema) > 1 and isinstance(target, dict):
            # Keywords beside a 2019+ `$ref` apply too: merge them (the reference's first).
            target = {**target, **{k: v for k, v in schema.items() if k != "$ref"},
                      "allOf": (target.get("allOf") or []) + (schema.get("allOf") or [])}
        schema = target
        depth += 1
    return schema


def parts(schema, root, keys, depth=0):
    """The subschemas whose `properties` an object of `keys` meets: the schema, its `allOf`
    parts and, of each `anyOf`/`oneOf`, the branch naming most of `keys`."""
    schema = resolve(schema, root)
    if not isinstance(schema, dict) or depth > 16:
        return []
    out = [schema]
    for sub in schema.get("allOf") or []:
        out += parts(sub, root, keys, depth + 1)
    for word in ("anyOf", "oneOf"):
        branches = [resolve(b, root) for b in schema.get(word) or []]
        scored = [(sum(k in (b.get("properties") or {}) for k in keys), -i, b)
                  for i, b in enumerate(branches) if isinstance(b, dict)]
        if scored:
            out += parts(max(scored, key=lambda s: s[:2])[2], root, keys, depth + 1)
    return out


def in_schema_order(value, schema, root, depth=0):
    """The instance with each object's keys in the order its schema lists them (see the
    module's doc); JSON objects are unordered, so the instance stays valid or invalid."""
    if depth > 64 or schema is None:
        return value
    if isinstance(value, dict):
        order, subs, extra = [], {}, None
        for s in parts(schema, root, value):
            props = s.get("properties")
            for k, sub in (props.items() if isinstance(props, dict) else ()):
                if k not in subs:
                    order.append(k)
                    subs[k] = sub
            if extra is None and isinstance(s.get("additionalProperties"), dict):
                extra = s["additionalProperties"]
        keys = [k for k in order if k in value] + [k for k in value if k not in subs]
        return {k: in_schema_order(value[k], subs.get(k, extra), root, depth + 1) for k in keys}
    if isinstance(value, list):
        for s in parts(schema, root, ()):
            prefix = s.get("prefixItems")
            items = s.get("items")
            if isinstance(items, list):  # draft 4-7 tuples
                prefix, items = items, s.get("additionalItems")
            if isinstance(prefix, list) or isinstance(items, dict):
                prefix = prefix if isinstance(prefix, list) else []
                items = items if isinstance(items, dict) else None
                return [in_schema_order(v, prefix[i] if i < len(prefix) else items, root, depth + 1)
                        for i, v in enumerate(value)]
    return value


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
    counts = {"files": 0, "ok": 0, "compile_error": 0, "wrong_reject": 0, "wrong_accept": 0,
              "instances": 0, "followed": 0}
    for path in files(paths):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        counts["files"] += 1
        t0 = time.perf_counter()
        error = None
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                data["schema"], defaults={"whitespace_flexible": False})
            matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
            if matcher.is_error():
                error = matcher.get_error()
        except Exception as e:  # noqa: BLE001 (a refused schema, whatever the exception)
            error = f"{type(e).__name__}: {e}"
        elapsed = (time.perf_counter() - t0) * 1e3
        if error is not None:
            counts["compile_error"] += 1
            print(json.dumps({"file": path, "status": "compile_error", "message": error,
                              "compile_ms": round(elapsed, 3)}, ensure_ascii=False))
            continue
        compile_ms.append(elapsed)
        rejects, accepts = [], []
        for i, test in enumerate(data.get("tests", [])):
            value = in_schema_order(test["data"], data["schema"], data["schema"])
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            tokens = tokenize(text.encode())
            matcher.reset()
            if not test.get("valid"):
                if (matcher.validate_tokens(tokens) == len(tokens)
                        and matcher.consume_tokens(tokens) and matcher.is_accepting()):
                    accepts.append(i)
                continue
            counts["instances"] += 1
            followed = True
            for t in tokens:
                t0 = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
                mask_us.append((time.perf_counter() - t0) * 1e6)
                if not allowed(t) or not matcher.consume_token(t):
                    followed = False
                    break
            counts["followed"] += followed
            if not (followed and matcher.is_accepting()):
                rejects.append(i)
        status = "wrong_accept" if accepts else "wrong_reject" if rejects else "ok"
        counts[status] += 1
        line = {"file": path, "status": status, "compile_ms": round(elapsed, 3)}
        if accepts or rejects:
            line["tests"] = accepts or rejects
        print(json.dumps(line))
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
