#!/usr/bin/env bash
# Instructions per call of the preload's hooks under callgrind (deterministic, unlike time on a
# shared machine), for the per-call instruction tables of BENCHMARKS.md, with what they come from
# kept: for every run, callgrind_annotate's inclusive summary goes to OUTDIR/<run>.annotate.txt.
#
#   generic hook  benches/hotpath.c, HOTPATH_REPS=250 (250 × 4,096 = 1,024,000 calls), collected
#                 inside sigmatop_bench_hook only (--toggle-collect): the hook, the bench's own
#                 call and the called function; Ir / calls.
#   floor levels  the same against benches/hotpath_floor.c at FLOOR_LEVEL 0–3 (aggregate).
#   verbs         benches/verbs_hotpath.c, VERBS_REPS=100 (409,600 calls each): Ir collected
#                 inside the preload's post_send / poll_cq wrappers (--toggle-collect, one run
#                 each: the wrapper inclusive, the provider stub's 8 / 10 instructions too) / calls.
#   UCX           benches/ucx_hotpath_ir.sh, 3 runs (instructions added per iteration, program
#                 thread; UCX's own progress moves them by a few from run to run).
#
# Usage: bash benches/devvm_callgrind.sh BENCH_PRELOAD.so PRELOAD.so OUTDIR > OUTDIR/callgrind.txt
#   BENCH_PRELOAD.so  the preload built with --features bench (cargo build --release -p
#                     sigmatop-preload --features bench)
#   PRELOAD.so        the preload as shipped (cargo build --release), for the UCX hooks
# Needs valgrind, gcc, UCX's headers (libucx-dev).
set -euo pipefail
bench=${1:?usage: bash benches/devvm_callgrind.sh BENCH_PRELOAD.so PRELOAD.so OUTDIR}
plain=${2:?usage}
out=${3:?usage}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/hotpath" "$root/benches/hotpath.c" -ldl
gcc -O2 -o "$tmp/verbs_hotpath" "$root/benches/verbs_hotpath.c" -ldl
for level in 0 1 2 3; do
    gcc -O2 -fPIC -shared -DFLOOR_LEVEL=$level -o "$tmp/floor$level.so" "$root/benches/hotpath_floor.c"
done
echo "date $(date -Is) commit=$(git -C "$root" rev-parse --short HEAD) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
echo "valgrind=$(valgrind --version) gcc=$(gcc -dumpfullversion) bench_preload_sha1=$(sha1sum <"$bench" | cut -c1-12) preload_sha1=$(sha1sum <"$plain" | cut -c1-12)"

# MODE[:rec] -> the environment of one run.
envs() {
    local mode=${1%%:*}
    printf 'SIGMATOP_MODE=%s SIGMATOP_SOCKET_DIR=%s/sock' "$mode" "$tmp"
    [ "${1#*:}" = rec ] && printf ' SIGMATOP_RECORD=%s/rec' "$tmp"
    return 0
}

# The generic hook (and the floor levels): Ir collected inside sigmatop_bench_hook / calls.
generic() { # NAME LIB MODE[:rec]
    local name=$1 lib=$2 cfg=$3 calls=$((250 * 4096))
    rm -rf "$tmp/rec" "$tmp/sock"
    # shellcheck disable=SC2046
    env $(envs "$cfg") HOTPATH_REPS=250 LD_PRELOAD="$lib" valgrind --tool=callgrind \
        --toggle-collect=sigmatop_bench_hook --callgrind-out-file="$tmp/cg" "$tmp/hotpath" >/dev/null 2>&1
    local ir
    ir=$(grep -E '^(summary|totals):' "$tmp/cg" | head -1 | awk '{print $2}')
    callgrind_annotate --inclusive=yes --threshold=99 "$tmp/cg" >"$out/$name.${cfg/:/+}.annotate.txt" 2>&1
    printf 'callgrind %s config=%s calls=%d ir=%d per_call=%.1f\n' "$name" "$cfg" "$calls" "$ir" \
        "$(echo "$ir / $calls" | bc -l)"
    rm -f "$tmp/cg"
}

# The verbs wrappers: Ir collected inside each wrapper (--toggle-collect: inclusive of what it
# calls, the provider stub too) / calls, one run per wrapper.
verbs() { # MODE[:rec]
    local cfg=$1 calls=$((100 * 4096)) f ir
    for f in post_send_hook poll_cq_hook; do
        rm -rf "$tmp/rec" "$tmp/sock"
        # shellcheck disable=SC2046
        env $(envs "$cfg") VERBS_REPS=100 LD_PRELOAD="$bench" valgrind --tool=callgrind \
            "--toggle-collect=*$f*" --callgrind-out-file="$tmp/cg" "$tmp/verbs_hotpath" >/dev/null 2>&1
        ir=$(grep -E '^(summary|totals):' "$tmp/cg" | head -1 | awk '{print $2}')
        callgrind_annotate --inclusive=yes --threshold=99 "$tmp/cg" >"$out/verbs_$f.${cfg/:/+}.annotate.txt" 2>&1
        printf 'callgrind verbs_%s config=%s calls=%d ir=%d per_call=%.1f\n' "$f" "$cfg" "$calls" \
            "$ir" "$(echo "$ir / $calls" | bc -l)"
        rm -f "$tmp/cg"
    done
}

for cfg in aggregate simple simple:rec full full:rec; do
    generic generic "$bench" "$cfg"
done
for level in 0 1 2 3; do
    generic "floor$level" "$tmp/floor$level.so" aggregate
done
for cfg in aggregate simple simple:rec full full:rec; do
    verbs "$cfg"
done
gcc -O2 -o "$root/target/ucx_hotpath" "$root/benches/ucx_hotpath.c" -lucp -lucs
# The UCX figures move by a few instructions from run to run (UCX's own progress): 3 runs.
for r in 1 2 3; do
    bash "$root/benches/ucx_hotpath_ir.sh" "$plain" | sed "s/^/ucx run=$r /"
done
echo "end load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
