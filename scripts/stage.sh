#!/usr/bin/env bash
# Runs one stage of `make test`/`make demo` and prints how long it took, pass or fail.
# Usage: scripts/stage.sh NAME COMMAND [ARGS...]
set -u
name=$1
shift
start=$(date +%s)
echo "=== stage ${name}: $*"
"$@"
status=$?
echo "=== stage ${name}: $(($(date +%s) - start))s$([ "$status" -ne 0 ] && echo " FAILED (exit ${status})")"
exit "$status"
