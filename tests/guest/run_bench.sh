#!/bin/bash
# Boots the soft-RoCE guest once and runs tests/guest/verbs_bench.sh with the release preload;
# prints the median per mode and the ratio to the untraced median.
# usage: [CPUS=n] bash tests/guest/run_bench.sh [REPS]   (after `cargo build --release -p sigmatop-preload`)
set -eu
cd "$(dirname "$0")/../.."
ROOT=$PWD
REPS=${1:-5}
OUT=$ROOT/target/verbs-bench
rm -rf "$OUT" && mkdir -p "$OUT"
KVER=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1)
PATH=$ROOT/target/vng-venv/bin:$PATH timeout 1500 vng --disable-kvm --run /boot/vmlinuz-$KVER --cpus ${CPUS:-2} -m 2G \
    --rwdir="$OUT" --exec "bash $ROOT/tests/guest/verbs_bench.sh $OUT $ROOT/target/release/libsigmatop_preload.so $REPS" 2>&1 | cat | grep -E '^(send_lat|write_bw),' || true
python3 - "$OUT/bench.csv" <<'PY'
import csv, statistics, sys
def ok(v):
    try:
        f = float(v)
    except ValueError:
        return False
    return 0 < f < float("inf")  # perftest prints inf / 0.00 when its timing broke
rows = [r for r in csv.DictReader(open(sys.argv[1])) if ok(r["value"])]
for b in ("send_lat", "write_bw"):
    med = {m: statistics.median(float(r["value"]) for r in rows if r["bench"] == b and r["mode"] == m)
           for m in ("none", "aggregate", "simple", "full") if any(r["bench"] == b and r["mode"] == m for r in rows)}
    n = sum(1 for r in rows if r["bench"] == b and r["mode"] == "none")
    for m, v in med.items():
        # latency: overhead = traced/untraced - 1; bandwidth: untraced/traced - 1
        ov = (v / med["none"] - 1) if b == "send_lat" else (med["none"] / v - 1)
        print(f"{b:9} {m:9} median {v:10.2f} {'usec' if b == 'send_lat' else 'MB/s'}  overhead {ov*100:+6.2f} %  (n={n})")
PY
