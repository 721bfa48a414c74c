#!/bin/bash
# Instructions sigmatop adds to one iteration of benches/ucx_hotpath.c (a real ucp_tag_recv_nbx,
# ucp_tag_send_nbx and the receive's completion callback on UCX_TLS=self), counted by callgrind
# on the program's own thread only (sigmatop's collector thread drains and writes on its own
# schedule; what it does is not the program's cost per call): deterministic, unlike time on a
# shared machine. Each figure is (instructions with 10 bursts − with 5 bursts) / (5 × 4,096), so
# start-up and tear-down cancel.
#
# Usage: bash benches/ucx_hotpath_ir.sh LIB.so [OTHER.so ...]
#   (build first: gcc -O2 -o target/ucx_hotpath benches/ucx_hotpath.c -lucp -lucs)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/ucx_hotpath
[ -x "$BIN" ] || { echo "build $BIN first (see the header)"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is needed"; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ir() { # LIB MODE RECORD BURSTS
    rm -rf "$TMP/rec"
    env UCX_TLS=self UCXHOT_REPS=$4 ${1:+LD_PRELOAD=$1 SIGMATOP_MODE=$2 SIGMATOP_SOCKET_DIR=$TMP/sock} \
        ${3:+SIGMATOP_RECORD=$TMP/rec} valgrind --tool=callgrind --separate-threads=yes \
        --callgrind-out-file="$TMP/cg" \
        "$BIN" > /dev/null 2>&1 || { echo "run failed: $*" >&2; echo 0; return; }
    # Thread 1 is the program's main thread, the one making every call.
    grep -E '^(summary|totals):' "$TMP/cg-01" | head -1 | awk '{print $2}'
    rm -f "$TMP"/cg*
}
per_iter() { local a b; a=$(ir "$@" 5); b=$(ir "$@" 10); echo $(( (b - a) / (5 * 4096) )); }
base=$(per_iter "" "" "")
echo "untraced: $base instructions per iteration"
echo "| library | aggregate | simple | full | simple + record | full + record |"
echo "|---|---|---|---|---|---|"
for lib in "$@"; do
    row="| $lib |"
    for c in aggregate: simple: full: simple:rec full:rec; do
        n=$(per_iter "$lib" "${c%%:*}" "${c#*:}")
        row="$row +$((n - base)) |"
    done
    echo "$row"
done
