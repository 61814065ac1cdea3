#!/usr/bin/env bash
# JSONSchemaBench (tests/data/json_schema/jsonschemabench.tsv.gz, 6,369 schemas) on a model's
# vocabulary: `poot coverage` (compile, then every valid instance followed token by token with
# each mask timed) and, with PEER=1, llguidance on the same files in the same run
# (scripts/bench_jsonschemabench_llguidance.py, PyPI llguidance 1.9.1 in a venv under the
# target folder). Prints each engine's summary line: compile and mask p50/p99, steps over
# 100 us. The two differ in what they follow (see the peer script): compare their shapes.
#
# usage: [PEER=1] scripts/bench_jsonschemabench.sh [MODEL.gguf]  (default $POOT_REFERENCE_GGUF)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-${POOT_REFERENCE_GGUF:?usage: $0 MODEL.gguf (or set POOT_REFERENCE_GGUF)}}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --quiet --release --features cli --bin poot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import gzip, os, sys
for line in gzip.open("tests/data/json_schema/jsonschemabench.tsv.gz", "rt", encoding="utf-8"):
    name, body = line.rstrip("\n").split("\t", 1)
    with open(os.path.join(sys.argv[1], name), "w", encoding="utf-8") as f:
        f.write(body)
PY
"$TARGET/release/poot" coverage --model "$MODEL" "$tmp" | tail -n 1
if [ "${PEER:-0}" = 1 ]; then
  VENV=$TARGET/bench-venv
  [ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
  "$VENV/bin/python3" -c 'import llguidance, numpy' 2>/dev/null ||
    "$VENV/bin/pip" install --quiet llguidance==1.9.1 numpy
  "$VENV/bin/python3" scripts/bench_jsonschemabench_llguidance.py "$MODEL" "$tmp"
fi
