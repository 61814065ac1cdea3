#!/usr/bin/env bash
# The long fuzzing run: the targets of tests/fuzz_inputs.rs (JSON Schemas, regexes, GBNF
# grammars, choice lists, request bodies, limits) in a release build, CASES inputs per target
# from SEED on.
# A failure prints the input; keep it as a file under tests/data/fuzz/<target>/ (every run,
# including make test's, replays those first).
#   scripts/fuzz.sh [CASES] [SEED]     defaults: 200000 cases, a seed from the clock
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-200000}
seed=${2:-$(date +%s)}
echo "fuzz: $cases cases per target from seed $seed"
POOT_FUZZ_CASES=$cases POOT_FUZZ_SEED=$seed cargo test --release --test fuzz_inputs -- --nocapture 2>&1 |
  grep -E '^fuzz |panicked|failed on|test result'
