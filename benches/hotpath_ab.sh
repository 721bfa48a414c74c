#!/usr/bin/env bash
# Two builds of the preload, alternated in one sitting: benches/hotpath.c (the generic hook) and
# benches/verbs_hotpath.c (post_send of one WR, poll_cq of one completion) in every configuration
# (aggregate, simple, full, simple and full with a record), ROUNDS rounds, old then new in each.
# Prints one line per run, then (benches/summarize.py hotpath RUNS --lib new) the new build's
# targets judged on each run's mean over all bursts, with the fastest burst beside it, and the
# paired differences new - old (same round) of both, with how many rounds had new slower.
# Usage: bash benches/hotpath_ab.sh OLD.so NEW.so [ROUNDS] [BINDIR]
#   both libraries built with --features bench; BINDIR holds built hotpath and verbs_hotpath
#   (default: built here into a temporary directory). HOTPATH_REPS / VERBS_REPS as for the benches.
set -euo pipefail
old=${1:?usage: bash benches/hotpath_ab.sh OLD.so NEW.so [ROUNDS] [BINDIR]}
new=${2:?usage: bash benches/hotpath_ab.sh OLD.so NEW.so [ROUNDS] [BINDIR]}
rounds=${3:-9}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=${4:-}
if [ -z "$bin" ]; then
    gcc -O2 -o "$tmp/hotpath" "$here/hotpath.c" -ldl
    gcc -O2 -o "$tmp/verbs_hotpath" "$here/verbs_hotpath.c" -ldl
    bin=$tmp
fi
export SIGMATOP_SOCKET_DIR=$tmp/sock
for r in $(seq "$rounds"); do
    for lib in "old:$old" "new:$new"; do
        for c in aggregate: simple: full: simple:rec full:rec; do
            m=${c%%:*}; rec=${c#*:}
            for b in hotpath verbs_hotpath; do
                rm -rf "$tmp/rec"
                line=$(env SIGMATOP_MODE="$m" ${rec:+SIGMATOP_RECORD=$tmp/rec} \
                    HOTPATH_REPS="${HOTPATH_REPS:-3000}" VERBS_REPS="${VERBS_REPS:-1500}" \
                    LD_PRELOAD="${lib#*:}" "$bin/$b" | tail -1)
                echo "round=$r lib=${lib%%:*} mode=$m rec=${rec:-no} bench=$b $line"
            done
        done
    done
done | tee "$tmp/runs.txt"
python3 "$here/summarize.py" hotpath "$tmp/runs.txt" --lib new
