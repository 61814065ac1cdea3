#!/usr/bin/env python3
"""Builds tests/data/json_schema/schemastore.tsv.gz from a SchemaStore checkout's `src/`.

One line per schema of `src/schemas/json/NAME.json` that has at least one test instance:
`SchemaStore---NAME.json<TAB>{"description":..,"schema":..,"tests":[..]}` (minified JSON, the
shape of the JSONSchemaBench files), sorted by name, gzip -9 without a timestamp. Valid
instances come from `src/test/NAME/*`, invalid ones from `src/negative_test/NAME/*`: `.json`
(`.json5`/`.jsonc` only where they parse as plain JSON), `.yaml`/`.yml` and `.toml`, each
turned into a JSON value the way SchemaStore's own test runner reads it (YAML 1.2 core
schema as the `yaml` npm package does, so `on:` stays a string and timestamps stay strings;
TOML dates and times as RFC 3339 strings). A file that does not parse, or holds a value JSON
cannot carry (NaN, infinities, binary), is skipped and counted. The schema is kept exactly as
parsed: `$ref`s are not resolved, external ones included.

usage: schemastore_corpus.py SCHEMASTORE/src [OUT.tsv.gz] [--max-bytes N]
  --max-bytes N: cap the gzip at about N bytes (default 6000000) by dropping, corpus-wide,
  the largest instances first (never a schema's last one). Prints the counts as JSON.
"""
import datetime
import gzip
import io
import json
import math
import os
import re
import sys
import tomllib

try:
    import yaml
except ImportError:  # the counts say how many YAML files were left out
    yaml = None


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Unrepresentable(ValueError):
    """A parsed value that JSON cannot carry."""


def to_json(value):
    """A parsed YAML/TOML value as a JSON value (dates as strings, keys as strings)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise Unrepresentable("NaN or infinity")
        return value
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {key_string(k): to_json(v) for k, v in value.items()}
    raise Unrepresentable(type(value).__name__)


def key_string(key):
    """A mapping key as JavaScript's String() writes it (the `yaml` package's plain objects)."""
    if isinstance(key, str):
        return key
    if key is None:
        return ""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float) and key.is_integer() and abs(key) < 1e21:
        return str(int(key))
    if isinstance(key, float):
        return repr(key)
    raise Unrepresentable(f"{type(key).__name__} key")


def core_loader():
    """A PyYAML loader for the YAML 1.2 core schema (PyYAML itself follows YAML 1.1, which
    reads `on`/`yes`/`no` as booleans, `2024-01-01` as a date and `<<` as a merge key)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {}
    first = {
        "null": list("~nN") + [""],
        "bool": list("tTfF"),
        "int": list("-+0123456789"),
        "float": list("-+.0123456789"),
    }
    patterns = {
        "null": r"^(?:~|null|Null|NULL|)$",
        "bool": r"^(?:true|True|TRUE|false|False|FALSE)$",
        "int": r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$",
        "float": r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
    }
    for kind in ("null", "bool", "int", "float"):
        Loader.add_implicit_resolver(
            f"tag:yaml.org,2002:{kind}", re.compile(patterns[kind]), first[kind]
        )

    def construct_int(loader, node):
        text = loader.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text)

    def construct_float(loader, node):
        text = loader.construct_scalar(node).lower()
        if text.endswith(".inf") or text == ".nan":
            raise Unrepresentable("NaN or infinity")
        return float(text)

    def construct_unknown(loader, suffix, node):
        # The `yaml` package warns about a tag it does not know and reads the node untagged
        # (a scalar as a string): `!Ref x` is "x".
        if isinstance(node, yaml.ScalarNode):
            return loader.construct_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_mapping(node, deep=True)

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    Loader.add_constructor("tag:yaml.org,2002:float", construct_float)
    Loader.add_multi_constructor("!", construct_unknown)
    return Loader


LOADER = core_loader() if yaml else None


def reject_constant(name):
    raise Unrepresentable(name)


def read_instance(path):
    """The JSON value of a test file, or raises (the caller counts it as skipped)."""
    ext = os.path.splitext(path)[1].lower()
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8-sig")
    if ext in (".json", ".json5", ".jsonc"):
        return json.loads(text, parse_constant=reject_constant)
    if ext in (".yaml", ".yml"):
        if LOADER is None:
            raise ImportError("PyYAML is not installed")
        return to_json(yaml.load(text, Loader=LOADER))
    if ext == ".toml":
        return to_json(tomllib.loads(text))
    raise ValueError(f"unknown extension {ext}")


def instances(folder, valid, counts):
    out = []
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        ext = os.path.splitext(name)[1].lower()
        if yaml is None and ext in (".yaml", ".yml"):
            counts["skipped_yaml_no_pyyaml"] += 1
            continue
        try:
            data = read_instance(path)
            dumps(data)  # JSON must carry it
        except Exception as e:  # noqa: BLE001 (whatever fails to parse is skipped)
            counts["skipped_files"] += 1
            shown = os.path.relpath(path, os.path.dirname(os.path.dirname(folder)))
            counts["skipped"].append(f"{shown}: {type(e).__name__}")
            continue
        out.append({"description": name, "valid": valid, "data": data})
    return out


def main():
    args = sys.argv[1:]
    max_bytes = 6_000_000
    if "--max-bytes" in args:
        i = args.index("--max-bytes")
        max_bytes = int(args[i + 1])
        del args[i : i + 2]
    if not args:
        sys.exit(__doc__)
    src = args[0]
    here = os.path.dirname(os.path.abspath(__file__))
    out = args[1] if len(args) > 1 else os.path.join(
        here, "..", "tests", "data", "json_schema", "schemastore.tsv.gz"
    )
    counts = {"skipped_files": 0, "skipped_yaml_no_pyyaml": 0, "skipped": [], "no_schema": []}
    schema_dir = os.path.join(src, "schemas", "json")
    names = sorted(
        set(os.listdir(os.path.join(src, "test")))
        | set(os.listdir(os.path.join(src, "negative_test")))
    )
    entries = {}
    for name in names:
        tests = instances(os.path.join(src, "test", name), True, counts)
        tests += instances(os.path.join(src, "negative_test", name), False, counts)
        schema_path = os.path.join(schema_dir, name + ".json")
        if not os.path.isfile(schema_path):
            counts["no_schema"].append(name)
            continue
        if not tests:
            continue
        with open(schema_path, encoding="utf-8-sig") as f:
            schema = json.load(f)
        entries[f"SchemaStore---{name}.json"] = {
            "description": f"SchemaStore {name}.json",
            "schema": schema,
            "tests": tests,
        }

    def build():
        lines = []
        for key in sorted(entries):
            lines.append(f"{key}\t{dumps(entries[key])}\n")
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as g:
            g.write("".join(lines).encode("utf-8"))
        return buf.getvalue()

    blob = build()
    dropped = 0
    # Over the cap: drop the largest instances corpus-wide (never a schema's last one), about
    # as many bytes as the excess takes unpacked, and check again.
    while len(blob) > max_bytes:
        ratio = len(blob) / sum(len(dumps(e)) for e in entries.values())
        excess = (len(blob) - max_bytes) / ratio
        sizes = sorted(
            (
                (len(dumps(t["data"])), key, i)
                for key, e in entries.items()
                for i, t in enumerate(e["tests"])
            ),
            reverse=True,
        )
        gone = {}
        for size, key, i in sizes:
            if excess <= 0:
                break
            if len(entries[key]["tests"]) - len(gone.get(key, ())) <= 1:
                continue
            gone.setdefault(key, set()).add(i)
            excess -= size
            dropped += 1
        if not gone:
            break
        for key, idx in gone.items():
            entries[key]["tests"] = [
                t for i, t in enumerate(entries[key]["tests"]) if i not in idx
            ]
        blob = build()
    with open(out, "wb") as f:
        f.write(blob)
    tests = [t for e in entries.values() for t in e["tests"]]
    report = {
        "schemas": len(entries),
        "valid": sum(t["valid"] for t in tests),
        "invalid": sum(not t["valid"] for t in tests),
        "dropped_by_cap": dropped,
        "skipped_files": counts["skipped_files"],
        "skipped_yaml_no_pyyaml": counts["skipped_yaml_no_pyyaml"],
        "tests_without_schema": counts["no_schema"],
        "gzip_bytes": len(blob),
        "skipped": counts["skipped"],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
