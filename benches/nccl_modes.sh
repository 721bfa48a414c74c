#!/usr/bin/env bash
# What sigmatop's NCCL plugin writes per proxy step and per second in each mode, on the CPU:
# tests/programs/nccl_ring.c (an NCCL-shaped ring all-reduce on the software mlx5 NIC: real verbs,
# the plugin driven in NCCL 2.28.9's order, every element checked) with R ranks, C channels, SIZE
# bytes, ITERS calls, under PRELOAD in aggregate, simple and full mode, each run REPS times.
# Per run it counts the proxy steps the program made (R x ITERS x C x 2 sides x 2(R-1) steps)
# and the bytes of the ranks' NCCL files (`nccl-PID.stn`), over the ranks' wall time.
#   bash benches/nccl_modes.sh PRELOAD OUT [R C SIZE ITERS REPS]
# Prints one line per mode and run: mode, steps, bytes, bytes/step, seconds, bytes/s.
set -euo pipefail
pre="$(realpath "$1")"
out="$2"
R="${3:-4}" C="${4:-2}" SIZE="${5:-49152}" ITERS="${6:-200}" REPS="${7:-3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$out"
out="$(realpath "$out")"
gcc -O2 -Wall -Werror -o "$out/nccl_ring" "$root/tests/programs/nccl_ring.c" -libverbs -ldl
steps=$((R * ITERS * C * 2 * 2 * (R - 1)))
printf '%-10s %4s %10s %12s %10s %8s %12s\n' mode run steps bytes bytes/step seconds bytes/s
for mode in aggregate simple full; do
  for rep in $(seq 1 "$REPS"); do
    d="$out/$mode.$rep"
    rm -rf "$d"
    mkdir -p "$d/rdv" "$d/nic" "$d/sock"
    t0=$(date +%s.%N)
    pids=()
    for r in $(seq 0 $((R - 1))); do
      env TESTNIC_HOST=$((r + 1)) TESTNIC_LOG="$d/nic" RANK=$r WORLD_SIZE=$R \
        LD_PRELOAD="$pre" SIGMATOP_MODE=$mode SIGMATOP_RECORD="$d/rec" \
        SIGMATOP_SOCKET_DIR="$d/sock" NCCL_PROFILER_PLUGIN="$pre" \
        bash "$root/scripts/with-testnic.sh" "$out/nccl_ring" -n "$R" -r "$r" -c "$C" \
        -b "$SIZE" -i "$ITERS" -t 120 -d "$d/rdv" >"$d/out.$r" 2>"$d/err.$r" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    t1=$(date +%s.%N)
    for r in $(seq 0 $((R - 1))); do
      grep -q "check ok" "$d/out.$r" || { echo "rank $r of $mode.$rep: no 'check ok'" >&2; exit 1; }
    done
    bytes=$(find "$d/rec" -name 'nccl-*.stn' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
    awk -v m=$mode -v rep=$rep -v st=$steps -v b=$bytes -v t0=$t0 -v t1=$t1 'BEGIN {
      s = t1 - t0; printf "%-10s %4d %10d %12d %10.1f %8.2f %12.0f\n", m, rep, st, b, b / st, s, b / s }'
  done
done
