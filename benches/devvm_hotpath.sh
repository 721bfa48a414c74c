#!/usr/bin/env bash
# BENCHMARKS.md's hot-path loop ("Hot path"), ROUNDS rounds of every configuration, one line per
# run with its round, the load average at the start and end. Summary and verdicts:
#   python3 benches/summarize.py hotpath OUT.txt
# Usage: bash benches/devvm_hotpath.sh PRELOAD.so [ROUNDS] > OUT.txt
#   PRELOAD.so built with: cargo build --release -p sigmatop-preload --features bench
set -euo pipefail
P=$(realpath "${1:?usage: bash benches/devvm_hotpath.sh PRELOAD.so [ROUNDS]}")
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/hotpath" "$here/hotpath.c" -ldl
gcc -O2 -o "$tmp/verbs_hotpath" "$here/verbs_hotpath.c" -ldl
export SIGMATOP_SOCKET_DIR=$tmp/sock
echo "date $(date -Is) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,) nproc=$(nproc) preload_sha256=$(sha256sum "$P" | cut -c1-16)"
for r in $(seq "$rounds"); do for c in aggregate: simple: full: simple:rec full:rec; do
  m=${c%%:*}; rec=${c#*:}
  for b in hotpath verbs_hotpath; do rm -rf "$tmp/rec"
    echo "round=$r bench=$b $(env SIGMATOP_MODE=$m ${rec:+SIGMATOP_RECORD=$tmp/rec} HOTPATH_REPS=3000 VERBS_REPS=1500 LD_PRELOAD=$P "$tmp/$b" | tail -1)"
  done; done; done
echo "end $(date -Is) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
