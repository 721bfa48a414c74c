#!/usr/bin/env bash
# What sigmatop adds to each verbs call of NCCL's IB proxy, in instructions (callgrind), on the
# software NIC (issue 24): benches/nccl_proxy_calls.c untraced and under the preload in each mode,
# with and without a record; per call kind, callgrind's inclusive instructions of its wrapper
# function divided by the calls the program counted, minus the untraced run's.
#   bash benches/nccl_proxy_callgrind.sh [STEPS] > OUT.txt      (default 200; needs valgrind)
# Prints one line per (run, role, call): "mode=M rec=R role=ROLE call=C calls=N ir=I ir_per_call=X".
# benches/summarize.py proxy OUT.txt gives the table (added per call = traced - untraced).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
bash scripts/with-testnic.sh true
lib=$PWD/target/testnic/lib
pre=${PRE:-$PWD/target/release/libsigmatop_preload.so}
bin=target/nccl_proxy_calls
gcc -O2 -g -Wall -Wextra -Werror -o "$bin" benches/nccl_proxy_calls.c -L"$lib" -l:libibverbs.so.1
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
echo "# $(date -u +%FT%TZ) $(uname -n) nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) steps=$steps step_bytes=4096 empty_phase=2000 poll_sleep_us=20 preload=$pre"
for run in base: aggregate: simple: full: simple:rec full:rec; do
  m=${run%%:*} rec=${run#*:}
  d=$w/$m$rec
  mkdir -p "$d"
  env=(NCCL_PROXY_POLL_SLEEP_US=20 LD_LIBRARY_PATH="$lib")
  if [ "$m" != base ]; then
    env+=(LD_PRELOAD="$pre" SIGMATOP_MODE="$m" SIGMATOP_SOCKET_DIR="$d/sock")
    mkdir -p -m 700 "$d/sock"
    [ -n "$rec" ] && env+=(SIGMATOP_RECORD="$d/rec")
  fi
  env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$d/cg.%p" \
    --toggle-collect='call_*' "$bin" "$steps" 4096 2000 >"$d/out" 2>"$d/err" || {
    echo "run $m$rec failed:" >&2
    tail -5 "$d/err" >&2
    exit 1
  }
  for f in "$d"/cg.*; do
    pid=${f##*.}
    line=$(grep " pid=$pid " "$d/out")
    role=$(echo "$line" | cut -d' ' -f2)
    kv() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    st=$(kv steps) polls=$(kv polls) emp=$(kv empty_phase)
    callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null | grep -E ':call_(post_send|post_recv|poll|poll_empty) \[' |
      while read -r ir rest; do
        fn=$(echo "$rest" | grep -oE 'call_[a-z_]+' | head -1)
        ir=${ir//,/}
        case "$fn" in
        call_post_send) n=$st ;; # one per step in either role
        call_post_recv) n=$st ;;
        call_poll) n=$polls ;;
        call_poll_empty) n=$emp ;;
        esac
        echo "mode=$m rec=${rec:-none} role=$role pid=$pid call=${fn#call_} calls=$n ir=$ir ir_per_call=$(awk -v a="$ir" -v b="$n" 'BEGIN { printf "%.1f", a / b }') empty_in_waits=$(kv empty)"
      done
  done
done
