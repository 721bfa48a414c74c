#!/usr/bin/env bash
# Two builds of the preload, alternated in one sitting: benches/hotpath.c (the generic hook) and
# benches/verbs_hotpath.c (post_send of one WR, poll_cq of one completion) in every configuration
# (aggregate, simple, full, simple and full with a record), ROUNDS rounds, old then new in each.
# Prints one line per run, then per bench and configuration the median (min-max) of each build's
# fastest bursts, the clock timed in the same bursts, and the median of the paired differences
# (new - old, same round) with how many rounds had new slower.
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
python3 - "$tmp/runs.txt" <<'PY'
import re, statistics, sys
d = {}
for l in open(sys.argv[1]):
    m = re.search(r"round=(\d+) lib=(\w+) mode=(\w+) rec=(\w+) bench=(\w+) ", l)
    if not m:
        continue
    _, lib, mode, rec, bench = m.groups()
    cfg = mode + (" + record" if rec != "no" else "")
    if bench == "hotpath":
        g = re.search(r"best burst: added=([-0-9.]+) timestamp=([0-9.]+)", l)
        vals, clock = {"generic hook": float(g.group(1))}, float(g.group(2))
    else:
        g = re.search(r"best burst: post_send added=([-0-9.]+) poll_cq added=([-0-9.]+) timestamp=([0-9.]+)", l)
        vals = {"verbs post_send": float(g.group(1)), "verbs poll_cq": float(g.group(2))}
        clock = float(g.group(3))
    for k, v in vals.items():
        d.setdefault((k, cfg, lib), []).append(v)
        d.setdefault((k, cfg, lib + "-clock"), []).append(clock)
print("| bench | configuration | old: added, ns | new: added, ns | new − old, paired | rounds new slower | clock (new's runs), ns |")
print("|---|---|---|---|---|---|---|")
for k in ["generic hook", "verbs post_send", "verbs poll_cq"]:
    for cfg in ["aggregate", "simple", "full", "simple + record", "full + record"]:
        o, n = d.get((k, cfg, "old")), d.get((k, cfg, "new"))
        if not o or not n:
            continue
        diff = [b - a for a, b in zip(o, n)]
        slower = sum(1 for x in diff if x > 0)
        med = statistics.median
        print(f"| {k} | {cfg} | {med(o):.2f} ({min(o):.2f}–{max(o):.2f}) | {med(n):.2f} ({min(n):.2f}–{max(n):.2f}) "
              f"| {med(diff):+.2f} | {slower}/{len(diff)} | {med(d[(k, cfg, 'new-clock')]):.2f} |")
PY
