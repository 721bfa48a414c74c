#!/usr/bin/env bash
# The floor under the aggregate hot path (issue 15 item 3): benches/hotpath.c run against the four
# reference interposers of benches/hotpath_floor.c and against sigmatop's preload, alternated in
# ROUNDS rounds in one sitting; prints each run's whole line (its mean over all bursts and its
# fastest burst) and, at the end, the median over the rounds per library of both
# (the same table: python3 benches/summarize.py floor RUNS.txt).
# Usage: bash benches/hotpath_floor.sh PRELOAD.so [ROUNDS] [HOTPATH_BIN]
#   PRELOAD.so   libsigmatop_preload.so built with --features bench
#   HOTPATH_BIN  a built benches/hotpath.c (default: built here into a temporary directory)
set -euo pipefail
pre=${1:?usage: bash benches/hotpath_floor.sh PRELOAD.so [ROUNDS] [HOTPATH_BIN]}
rounds=${2:-7}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=${3:-}
if [ -z "$bin" ]; then
    gcc -O2 -o "$tmp/hotpath" "$here/hotpath.c" -ldl
    bin=$tmp/hotpath
fi
for level in 0 1 2 3; do
    gcc -O2 -fPIC -shared -DFLOOR_LEVEL=$level -o "$tmp/floor$level.so" "$here/hotpath_floor.c"
done
for r in $(seq "$rounds"); do
    for lib in floor0 floor1 floor2 floor3 sigmatop; do
        so=$tmp/$lib.so
        [ "$lib" = sigmatop ] && so=$pre
        line=$(SIGMATOP_MODE=aggregate HOTPATH_REPS=${HOTPATH_REPS:-3000} LD_PRELOAD="$so" "$bin")
        echo "round=$r lib=$lib $line"
    done
done | tee "$tmp/runs.txt"
python3 "$here/summarize.py" floor "$tmp/runs.txt"
