#!/bin/bash
# The hot-path and end-to-end overhead benchmarks of issue 15 in one run, for a host with spare cores
# (the H200 machine's 16-core Ubuntu 24.04 host), writing everything to OUTDIR:
#
#   env.txt           the machine, the tools, the library's checksum
#   ldd.txt           what the benchmark programs load (missing libraries are named here)
#   clock_probe.txt   the cost of each way to timestamp (benches/clock_probe.c)
#   hotpath.txt       benches/hotpath.c and benches/verbs_hotpath.c, every mode with and without a
#                     record, alternated in rounds; each line carries the clock's own cost, timed
#                     in the same bursts
#   hotpath.md        medians and spread of hotpath.txt per bench and configuration
#   floor.md          benches/hotpath_floor.sh: the aggregate hook against reference interposers
#                     of one feature more each (the floor under "<= 3 ns"), FLOOR_ROUNDS rounds
#   ucx_hotpath.txt   benches/ucx_hotpath.c (real UCX send, receive and completion on UCX_TLS=self,
#                     target/ucx_hotpath built where UCX's headers are) untraced and traced in
#                     every mode, alternated in rounds
#   overhead.md/.csv  benches/overhead.py: tag_bw and put_bw 64 KiB over shm, fi_pingpong shm 64 KiB,
#                     tag_lat 8 B; untraced / aggregate / simple / full, with and without a record
#   tag_lat_calls.txt hooked calls per tag_lat iteration (sigmatop report of a recorded run)
#   record_cost.md    benches/record_cost.py: recording at the highest event rate, and with the
#                     collector's writes held to a quarter of that (a disk slower than the events)
#   run.log           everything the steps printed, with their timings
#
# It needs: gcc, python3, and from the checkout target/release/libsigmatop_preload.so (built with
# `cargo build --release -p sigmatop-preload --features bench`) and target/release/sigmatop. No Rust.
# ucx_perftest and fi_pingpong come from the system, or else from Debian's packages in
# $DEBS (default .device/debs: ucx-utils libucx0 libfabric-bin libfabric1 libpsm-infinipath1
# libpsm2-2 libnuma1 ...), unpacked with dpkg -x into a scratch directory.
#
# Usage: bash benches/device_overhead.sh OUTDIR
#   QUICK=1     short durations and fewer repetitions (a trial run: about 3 minutes)
#   REPS=N      repetitions of each overhead configuration (default 5)
#   HOT_ROUNDS=N rounds of the hot-path benches (default 3)
#   DEBS=DIR    where the .debs are; USE_DEBS=1 uses them even where the programs are installed
#   STEPS=LIST  which steps run, of clock,hot,floor,ucxhot,overhead,record (default all of them)
#   ONLY=TEXT   overhead.py's --only (the benchmarks whose name contains TEXT)
#   PRELOAD_BEFORE=SO  a second library (an older build) that the ucxhot step and overhead.py
#               (--compare) alternate with
#   PIN=S:C     overhead.py's --pin (default 2,3:4,5 with 8 or more CPUs: each benchmark process on
#               its own two CPUs, one for its polling thread and one for the collector; PIN=none
#               leaves placement to the scheduler)
# The whole run takes about 7 minutes on 16 cores (nothing else running).
set -u
OUT=${1:?usage: bash benches/device_overhead.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/run.log
: > "$LOG"
log() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
PRELOAD=$ROOT/target/release/libsigmatop_preload.so
SIGMATOP=$ROOT/target/release/sigmatop
for f in "$PRELOAD" "$SIGMATOP"; do
    [ -f "$f" ] || { log "missing $f (build: cargo build --release -p sigmatop-preload --features bench; cargo build --release -p sigmatop)"; exit 2; }
done
if ! grep -q sigmatop_bench_hook "$PRELOAD"; then
    log "$PRELOAD has no sigmatop_bench_* entry points: build it with --features bench"; exit 2
fi

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    REPS=${REPS:-2}; HOT_ROUNDS=${HOT_ROUNDS:-1}; SCALE=0.1; HOTPATH_REPS=1000; VERBS_REPS=500
    CLOCK_PROBE_N=2000000; REC_SECONDS=1; REC_THREADS=1,2
else
    REPS=${REPS:-5}; HOT_ROUNDS=${HOT_ROUNDS:-3}; SCALE=1; HOTPATH_REPS=6000; VERBS_REPS=3000
    CLOCK_PROBE_N=10000000; REC_SECONDS=3; REC_THREADS=1,4
fi
export HOTPATH_REPS VERBS_REPS CLOCK_PROBE_N
STEPS=${STEPS:-clock,hot,floor,ucxhot,overhead,record}
step() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
if [ -z "${PIN:-}" ]; then
    if [ "$(nproc)" -ge 8 ]; then PIN=2,3:4,5; else PIN=none; fi
fi
PIN_ARGS=()
[ "$PIN" != none ] && PIN_ARGS=(--pin "$PIN")
START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigmatop-devbench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- the machine -------------------------------------------------------------------------------
{
    echo "date: $(date -Is)"; echo "host: $(hostname)"; uname -a
    echo "nproc: $(nproc)"; grep -m1 "model name" /proc/cpuinfo
    echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(tsc|constant_tsc|nonstop_tsc|rdtscp|hypervisor|invpcid|waitpkg)$' | tr '\n' ' ')"
    echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
    echo "load: $(cat /proc/loadavg)"
    echo "steps: $STEPS; overhead.py placement: $PIN"
    lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | head -20
    gcc --version | head -1; python3 --version
    (cd "$ROOT" && git rev-parse HEAD 2>/dev/null && git status --short 2>/dev/null | head -5)
    sha256sum "$PRELOAD" "$SIGMATOP"
    echo "records written under $WORK: $(df -PT "$WORK" | tail -1)"
} > "$OUT/env.txt" 2>&1
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

# --- UCX and libfabric programs ----------------------------------------------------------------
DEBS=${DEBS:-$ROOT/.device/debs}
if { [ "${USE_DEBS:-0}" = 1 ] || ! command -v ucx_perftest >/dev/null || ! command -v fi_pingpong >/dev/null; } \
   && ls "$DEBS"/*.deb >/dev/null 2>&1; then
    D=$WORK/debroot
    mkdir -p "$D/extra-lib"
    for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$D" || log "dpkg -x $deb failed"; done
    # Debian installs libpsm_infinipath.so.1 as an alternatives link (postinst), which dpkg -x
    # does not run: link it by hand.
    psm=$(ls "$D"/usr/lib/libpsm1/libpsm_infinipath.so.1* 2>/dev/null | head -1)
    [ -n "$psm" ] && ln -sf "$psm" "$D/extra-lib/libpsm_infinipath.so.1"
    export PATH=$D/usr/bin:$PATH
    export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:$D/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export UCX_MODULE_DIR=$D/usr/lib/x86_64-linux-gnu/ucx
    log "UCX and libfabric from $DEBS (unpacked in $D)"
else
    log "UCX and libfabric as installed: $(command -v ucx_perftest) $(command -v fi_pingpong)"
fi
{
    for p in ucx_perftest fi_pingpong; do
        echo "== $p: $(command -v $p)"; command -v $p >/dev/null && ldd "$(command -v $p)"
    done
    lf=$(ldd "$(command -v fi_pingpong 2>/dev/null || echo /nonexistent)" 2>/dev/null | awk '/libfabric/ {print $3}')
    [ -n "$lf" ] && { echo "== $lf"; ldd "$lf"; }
    echo "== ucx_info -v"; ucx_info -v 2>&1 | head -3
    echo "== fi_info -p shm"; fi_info -p shm 2>&1 | head -5
} > "$OUT/ldd.txt" 2>&1
ucx_ok=0; fi_ok=0
command -v ucx_perftest >/dev/null && ! sed -n '/== ucx_perftest/,/== fi_pingpong/p' "$OUT/ldd.txt" | grep -q "not found" && ucx_ok=1
command -v fi_pingpong >/dev/null && ! sed -n '/== fi_pingpong/,/== ucx_info/p' "$OUT/ldd.txt" | grep -q "not found" && fi_ok=1
log "ucx_perftest usable: $ucx_ok; fi_pingpong usable: $fi_ok (see ldd.txt)"

# --- C benches ---------------------------------------------------------------------------------
B=$WORK/bin
mkdir -p "$B"
gcc -O2 -o "$B/clock_probe" "$ROOT/benches/clock_probe.c" &&
gcc -O2 -o "$B/hotpath" "$ROOT/benches/hotpath.c" -ldl &&
gcc -O2 -o "$B/verbs_hotpath" "$ROOT/benches/verbs_hotpath.c" -ldl &&
gcc -O2 -pthread -o "$B/record_rate" "$ROOT/benches/record_rate.c" -ldl || { log "gcc failed"; exit 3; }

if step clock; then
log "clock_probe"
timeout 300 "$B/clock_probe" > "$OUT/clock_probe.txt" 2>&1
cat "$OUT/clock_probe.txt" >> "$LOG"
fi

# Hot path: every configuration in each round, the order rotated round by round.
if step hot; then
log "hot path: $HOT_ROUNDS rounds of hotpath and verbs_hotpath, 5 configurations"
CONFIGS=(aggregate: simple: full: simple:rec full:rec)
: > "$OUT/hotpath.txt"
for r in $(seq "$HOT_ROUNDS"); do
    for i in 0 1 2 3 4; do
        c=${CONFIGS[$(( (r - 1 + i) % 5 ))]}
        mode=${c%%:*}; rec=${c#*:}
        for bench in hotpath verbs_hotpath; do
            rm -rf "$WORK/hotrec"
            line=$(timeout 120 env SIGMATOP_MODE=$mode ${rec:+SIGMATOP_RECORD=$WORK/hotrec} \
                SIGMATOP_SOCKET_DIR=$WORK/sock LD_PRELOAD=$PRELOAD "$B/$bench" 2>&1 | tail -1)
            echo "round=$r bench=$bench $line" | tee -a "$OUT/hotpath.txt" >> "$LOG"
        done
    done
done
rm -rf "$WORK/hotrec"
python3 "$ROOT/benches/hotpath_table.py" "$OUT/hotpath.txt" > "$OUT/hotpath.md"
cat "$OUT/hotpath.md" | tee -a "$LOG"
fi

# The floor under the aggregate hook: reference interposers of one feature more each.
if step floor; then
log "floor: ${FLOOR_ROUNDS:-9} rounds of hotpath against benches/hotpath_floor.c's four levels and the preload"
SIGMATOP_SOCKET_DIR=$WORK/sock timeout 600 bash "$ROOT/benches/hotpath_floor.sh" "$PRELOAD" \
    "${FLOOR_ROUNDS:-9}" "$B/hotpath" > "$OUT/floor.txt" 2>&1
grep -v '^round=' "$OUT/floor.txt" > "$OUT/floor.md"
cat "$OUT/floor.md" | tee -a "$LOG"
fi

# The real UCX hooks (tag send, tag receive, the receive's completion) against the same calls
# untraced, on one worker talking to itself: no peer, no network, the same calls every iteration.
if step ucxhot; then
    if [ ! -x "$ROOT/target/ucx_hotpath" ]; then
        log "ucx_hotpath NOT RUN: build target/ucx_hotpath first (gcc -O2 -o target/ucx_hotpath benches/ucx_hotpath.c -lucp -lucs)"
    else
        UCXHOT_PIN=""
        [ "$PIN" != none ] && UCXHOT_PIN="taskset -c ${PIN%%:*}"
        log "ucx_hotpath: $HOT_ROUNDS rounds ${UCXHOT_PIN:+(under $UCXHOT_PIN)}"
        : > "$OUT/ucx_hotpath.txt"
        libs="new:$PRELOAD"
        [ -n "${PRELOAD_BEFORE:-}" ] && libs="$libs before:$PRELOAD_BEFORE"
        for r in $(seq "$HOT_ROUNDS"); do
            line=$(UCX_TLS=self timeout 120 $UCXHOT_PIN "$ROOT/target/ucx_hotpath" 2>&1 | tail -1)
            echo "round=$r lib=none mode=untraced $line" | tee -a "$OUT/ucx_hotpath.txt" >> "$LOG"
            for l in $libs; do
                for mode in aggregate simple full; do
                    line=$(UCX_TLS=self SIGMATOP_MODE=$mode SIGMATOP_SOCKET_DIR=$WORK/sock \
                        LD_PRELOAD=${l#*:} timeout 120 $UCXHOT_PIN "$ROOT/target/ucx_hotpath" 2>&1 | tail -1)
                    echo "round=$r lib=${l%%:*} mode=$mode $line" | tee -a "$OUT/ucx_hotpath.txt" >> "$LOG"
                done
            done
        done
    fi
fi

# --- end to end --------------------------------------------------------------------------------
if ! step overhead; then
    :
elif [ $ucx_ok = 1 ]; then
    log "overhead.py: $REPS repetitions of 7 configurations (scale $SCALE); fi_pingpong usable: $fi_ok"
    ONLY_ARGS=()
    [ -n "${ONLY:-}" ] && ONLY_ARGS=(--only "$ONLY")
    [ -n "${PRELOAD_BEFORE:-}" ] && ONLY_ARGS+=(--compare "$PRELOAD_BEFORE")
    if [ $fi_ok = 1 ]; then
        python3 "$ROOT/benches/overhead.py" "${ONLY_ARGS[@]}" --reps "$REPS" --scale "$SCALE" --preload "$PRELOAD" \
            "${PIN_ARGS[@]}" --record-dir "$WORK/overhead-rec" --csv "$OUT/overhead.csv" > "$OUT/overhead.md" 2>>"$LOG"
    else
        # Without libfabric's dependencies fi_pingpong cannot start: the UCX rows alone.
        python3 "$ROOT/benches/overhead.py" --reps "$REPS" --scale "$SCALE" --preload "$PRELOAD" \
            "${PIN_ARGS[@]}" --only ucx_perftest --record-dir "$WORK/overhead-rec" --csv "$OUT/overhead.csv" \
            > "$OUT/overhead.md" 2>>"$LOG"
        echo "fi_pingpong NOT RUN: it cannot load its libraries here (ldd.txt)" >> "$OUT/overhead.md"
    fi
    cat "$OUT/overhead.md" | tee -a "$LOG"

    # Hooked calls per tag_lat iteration: one recorded run in full mode, its per-op counts.
    log "tag_lat calls per iteration"
    port=$((23000 + RANDOM % 1000))
    n=$(python3 -c "print(int(200000 * $SCALE))")
    rm -rf "$WORK/latrec"
    for mode in aggregate full; do
        rm -rf "$WORK/latrec"
        timeout 120 env UCX_TLS=shm,self LD_PRELOAD=$PRELOAD SIGMATOP_MODE=$mode \
            SIGMATOP_RECORD=$WORK/latrec SIGMATOP_SOCKET_DIR=$WORK/sock ucx_perftest -p $port > /dev/null 2>&1 &
        srv=$!
        sleep 1
        timeout 120 env UCX_TLS=shm,self LD_PRELOAD=$PRELOAD SIGMATOP_MODE=$mode \
            SIGMATOP_RECORD=$WORK/latrec SIGMATOP_SOCKET_DIR=$WORK/sock \
            ucx_perftest 127.0.0.1 -p $port -t tag_lat -s 8 -n $n > "$WORK/lat.out" 2>&1
        wait $srv
        {
            echo "== $mode mode, tag_lat 8 B, -n $n (plus UCX's warm-up iterations), both processes"
            grep Final: "$WORK/lat.out"
            "$SIGMATOP" report "$WORK/latrec" 2>&1 | head -60
        } >> "$OUT/tag_lat_calls.txt"
        port=$((port + 1))
    done
    rm -rf "$WORK/latrec"
else
    log "overhead.py NOT RUN: ucx_perftest cannot start here (ldd.txt)"
    echo "NOT RUN: ucx_perftest cannot start here (ldd.txt)" > "$OUT/overhead.md"
fi

# --- recording at the highest event rate -------------------------------------------------------
if step record; then
log "record_cost.py: threads $REC_THREADS, $REC_SECONDS s per run"
python3 "$ROOT/benches/record_cost.py" --threads "$REC_THREADS" --seconds "$REC_SECONDS" \
    --dir "$WORK/record-cost" --preload "$PRELOAD" --sigmatop "$SIGMATOP" --bin "$B/record_rate" \
    > "$OUT/record_cost.md" 2>>"$LOG"
cat "$OUT/record_cost.md" | tee -a "$LOG"
fi

log "done in $(( $(date +%s) - START )) s; results in $OUT"
