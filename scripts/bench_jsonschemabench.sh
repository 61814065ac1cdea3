#!/usr/bin/env bash
# JSON Schema corpora on a model's vocabulary: JSONSchemaBench
# (tests/data/json_schema/jsonschemabench.tsv.gz, 6,369 schemas) and/or the SchemaStore
# catalogue (schemastore.tsv.gz, 688 schemas). `poot coverage` (compile, then every valid
# instance followed token by token with each mask timed, every invalid one checked) and, with
# PEER=1, llguidance on the same files in the same run (scripts/bench_jsonschemabench_llguidance.py,
# PyPI llguidance 1.9.1 in a venv under the target folder). Prints each engine's summary line
# (compile and mask p50/p99, steps over 100 us) and its per-subset table with the top
# compile-error causes (scripts/coverage_table.py, one reader for both engines). The two
# differ in what they follow (see the peer script): compare their shapes. Each engine's
# per-file lines are kept in $TARGET/coverage/{poot,llguidance}.jsonl.
#
# usage: [CORPUS=jsonschemabench|schemastore|all] [PEER=1] [NO_EXTRA_KEYS=1] scripts/bench_jsonschemabench.sh [MODEL.gguf]
#        (default model $POOT_REFERENCE_GGUF, default corpus jsonschemabench; NO_EXTRA_KEYS=1
#        compiles as `guided_json_extra_keys: false` asks: objects take only their listed keys
#        where `additionalProperties` is left out, instead of JSON Schema's reading)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-${POOT_REFERENCE_GGUF:?usage: $0 MODEL.gguf (or set POOT_REFERENCE_GGUF)}}
TARGET=${CARGO_TARGET_DIR:-target}
case ${CORPUS:=jsonschemabench} in
  jsonschemabench | schemastore) corpora=("$CORPUS") ;;
  all) corpora=(jsonschemabench schemastore) ;;
  *) echo "CORPUS must be jsonschemabench, schemastore or all, not '$CORPUS'" >&2; exit 2 ;;
esac
cargo build --quiet --release --features cli --bin poot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/files"
for c in "${corpora[@]}"; do
  python3 - "$tmp/files" "tests/data/json_schema/$c.tsv.gz" <<'PY'
import gzip, os, sys
for line in gzip.open(sys.argv[2], "rt", encoding="utf-8"):
    name, body = line.rstrip("\n").split("\t", 1)
    with open(os.path.join(sys.argv[1], name), "w", encoding="utf-8") as f:
        f.write(body)
PY
done
out=$TARGET/coverage
mkdir -p "$out"
echo "== poot ($CORPUS)"
extra=()
[ "${NO_EXTRA_KEYS:-0}" = 1 ] && extra=(--no-extra-keys)
"$TARGET/release/poot" coverage --model "$MODEL" "${extra[@]}" "$tmp/files" > "$out/poot.jsonl"
tail -n 1 "$out/poot.jsonl"
python3 scripts/coverage_table.py "$out/poot.jsonl"
if [ "${PEER:-0}" = 1 ]; then
  VENV=$TARGET/bench-venv
  [ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
  "$VENV/bin/python3" -c 'import llguidance, numpy' 2>/dev/null ||
    "$VENV/bin/pip" install --quiet llguidance==1.9.1 numpy
  echo "== llguidance ($CORPUS)"
  "$VENV/bin/python3" scripts/bench_jsonschemabench_llguidance.py "$MODEL" "$tmp/files" > "$out/llguidance.jsonl"
  tail -n 1 "$out/llguidance.jsonl"
  python3 scripts/coverage_table.py "$out/llguidance.jsonl"
fi
