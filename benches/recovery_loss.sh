#!/usr/bin/env bash
# WQE recovery on a loaded machine (issue 41, item 1): how many of the WQEs the CPU-played GPU
# posts each preload recovers, how many it counts as overwritten before its copy read them, and
# whether any recovered WQE differs from what was posted. The workload is tests/devx_doorbell.rs's
# main run (tests/gpu/devx_cpu.c: 3326 WQEs in 41 doorbells, 1 to 1024 per doorbell on a
# 1024-slot ring, each waited for, so the ring's slots are reused as soon as the NIC ran them),
# SIGMATOP_MODE=simple, recovery on, the WQE log on, as the test runs it.
#
#   bash benches/recovery_loss.sh OUT ROUNDS NAME=PRELOAD.so [NAME=PRELOAD.so ...]
#
# The preloads run alternately, ROUNDS times each. BUSY=1 keeps one busy loop
# (`while :; do :; done`) running on the side for the whole set. Prints one line per run:
#   run round=R preload=NAME busy=B rc=RC posted=P recovered=G overwritten=O dropped=D torn=T notexact=X
# (overwritten, dropped and torn from the stats line; a preload without a counter prints "-";
# notexact: recovered WQEs not posted at their index with those fields). OUT keeps the binaries.
set -u
[ $# -ge 3 ] || { echo "usage: bash benches/recovery_loss.sh OUT ROUNDS NAME=PRELOAD.so..." >&2; exit 2; }
OUT=$1 ROUNDS=$2
shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
S=$ROOT/tests/gpu
gcc -O2 -Wall -I "$S" -shared -fPIC -o "$OUT/libmlx5emu.so" "$S/devx_emu.c" || exit 1
gcc -O2 -Wall -I "$S" -shared -fPIC -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -o "$OUT/libcuda.so.1" "$S/fake_cuda.c" || exit 1
gcc -O2 -Wall -I "$S" -o "$OUT/devx_cpu" "$S/devx_cpu.c" -L"$OUT" -lmlx5emu -Wl,-rpath,"$OUT" -ldl -lpthread || exit 1
for spec in "$@"; do
  [ -f "${spec#*=}" ] || { echo "$spec: expected NAME=PATH to an existing preload library" >&2; exit 2; }
done
BUSY=${BUSY:-0}
busy_pid=
if [ "$BUSY" = 1 ]; then
  bash -c 'while :; do :; done' &
  busy_pid=$!
  trap 'kill $busy_pid 2>/dev/null' EXIT
fi
echo "# $(date -u +%FT%TZ) $(uname -n) nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) busy=$BUSY rounds=$ROUNDS $*"
stat() { grep -o " $1=[0-9]*" "$2" | head -1 | cut -d= -f2; }
for r in $(seq "$ROUNDS"); do
  for spec in "$@"; do
    name=${spec%%=*} so=$(realpath "${spec#*=}")
    d=$(mktemp -d "$OUT/run.XXXX")
    (cd "$OUT" && env LD_LIBRARY_PATH="$OUT" LD_PRELOAD="$so" SIGMATOP_SOCKET_DIR="$d/sock" \
      SIGMATOP_RECORD="$d/rec" SIGMATOP_WQE_LOG="$d/wqe.log" SIGMATOP_MODE=simple SIGMATOP_GPU_STATS=1 \
      timeout 300 ./devx_cpu "$d/list" > "$d/out" 2> "$d/err")
    rc=$?
    touch "$d/wqe.log"
    posted=$(grep -c '^wqe ' "$d/list")
    got=$(grep -c '^wqe ' "$d/wqe.log")
    notexact=$(sed -E 's/ opmod=[^ ]*//; s/ signaled=[^ ]*//' "$d/wqe.log" | grep -v -x -F -f "$d/list" | grep -c .)
    echo "run round=$r preload=$name busy=$BUSY rc=$rc posted=$posted recovered=$got" \
      "overwritten=$(stat overwritten_slots "$d/err" || true) dropped=$(stat dropped_wqebbs "$d/err" || true)" \
      "torn=$(stat torn_slots "$d/err" || true) notexact=$notexact" | sed -E 's/=( |$)/=-\1/g'
    rm -rf "$d"
  done
done
