#!/usr/bin/env python3
"""Per-subset table of a coverage run: `poot coverage` or bench_jsonschemabench_llguidance.py
output (one JSON line per file with `file`, `status` and, for a compile error, `message`; the
summary line is skipped).

For each subset (the file name before `---`, else before the first `_`: `Github_easy`,
`SchemaStore`, `BFCL`, as tests/json_schema_support/mod.rs names them): files, compiled,
all correct (compiled, every valid instance accepted, no invalid one accepted), wrong rejects
and wrong accepts (files); then the most common compile-error causes per subset, each message
with its quoted names (JSON Schema keywords kept), JSON pointers, paths and numbers
normalised, counted.

usage: coverage_table.py COVERAGE.jsonl [--top N]  (default 5 causes per subset)
"""
import collections
import json
import os
import re
import sys


def subset(name):
    name = os.path.basename(name)
    if "---" in name:
        return name.split("---", 1)[0]
    return name.split("_", 1)[0]


def strip_schema(message):
    """A poot message without its quoted schema: "guided_json `{...}`: why" -> "why"."""
    prefix = "guided_json `"
    if not message.startswith(prefix):
        return message
    rest = message[len(prefix):]
    for m in re.finditer("`", rest):
        after = rest[m.end():]
        if after.startswith(": "):
            return after[2:]
        if after.startswith(" ") and not after[1:].startswith("`"):
            return after[1:]
    return message


# JSON Schema keywords stay as they are when quoted: they say what the cause is.
KEYWORDS = set("""$ref $defs definitions $id $schema $anchor $dynamicRef $dynamicAnchor
$recursiveRef allOf anyOf oneOf not if then else dependentSchemas dependentRequired
dependencies prefixItems items additionalItems contains minContains maxContains uniqueItems
properties patternProperties additionalProperties propertyNames unevaluatedProperties
unevaluatedItems required minProperties maxProperties type enum const format pattern
minLength maxLength minimum maximum exclusiveMinimum exclusiveMaximum multipleOf minItems
maxItems contentEncoding contentMediaType contentSchema default examples""".split())


def quoted(blank):
    def repl(m):
        inner = m.group(0)[1:-1]
        return m.group(0) if inner and all(w in KEYWORDS for w in inner.split("/")) else blank
    return repl


NORMALISE = [
    (re.compile(r"`[^`]*`"), quoted("`_`")),
    (re.compile(r'"(?:[^"\\]|\\.)*"'), quoted('"_"')),
    (re.compile(r"'[^'\s]*'"), quoted("'_'")),
    (re.compile(r"#/[^\s,;:()\]]*"), "#/…"),
    (re.compile(r"(?<![\w#])/[\w.-]+(?:/[\w.-]+)+"), "/…"),
    (re.compile(r"\d+(?:\.\d+)?"), "N"),
]


def cause(message):
    text = strip_schema(message or "").strip().splitlines()[0] if message else "(no message)"
    for pattern, repl in NORMALISE:
        text = pattern.sub(repl, text)
    return text if len(text) <= 140 else text[:139] + "…"


def main():
    args = sys.argv[1:]
    top = 5
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    rows = collections.defaultdict(collections.Counter)
    causes = collections.defaultdict(collections.Counter)
    with open(args[0], encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("summary") or "file" not in r:
                continue
            s = subset(r["file"])
            row = rows[s]
            row["files"] += 1
            status = r.get("status")
            if status == "compile_error":
                causes[s][cause(r.get("message"))] += 1
            else:
                row["compiled"] += 1
            row[status] += 1
    cols = ["files", "compiled", "ok", "wrong_reject", "wrong_accept"]
    head = ["subset", "files", "compiled", "all_correct", "wrong_reject", "wrong_accept"]
    table = [head] + [[s] + [str(rows[s][c]) for c in cols] for s in sorted(rows)]
    if len(rows) > 1:
        total = collections.Counter()
        for r in rows.values():
            total.update(r)
        table.append(["total"] + [str(total[c]) for c in cols])
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    for s in sorted(causes):
        print(f"{s}: top compile-error causes ({sum(causes[s].values())} errors)")
        for text, n in causes[s].most_common(top):
            print(f"  {n:5}  {text}")


if __name__ == "__main__":
    main()
