#!/usr/bin/env bash
# NVIDIA's NVSHMEM 3.4.5, unmodified (the pip wheel's host and device libraries and NVIDIA's own
# perftests), with two PEs on one GPU over the software mlx5 NIC (tests/testnic), IBGDA as the only
# remote transport; untraced, then under sigmatop; checked by tests/gpu/nvshmem_check.py
# (issue 11, items 3-5). On the GPU machine, as root, from the repository root:
#   bash tests/gpu/nvshmem_device.sh OUTDIR [proof|bench|all] [rounds]
# proof: each perftest with the NIC's queues in GPU memory (NVSHMEM's default) and in host memory
#        (NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem), untraced (TRACE=base) and traced; then the
#        checker. bench: paper Fig. 4 with NVSHMEM's device calls (tests/gpu/nvshmem_fig4.cu),
#        baseline / forward-only / forward + recovery (copy per doorbell, per batch), alternated
#        `rounds` times (default 5) in one sitting; raw files in OUTDIR/fig4.tgz, summary by
#        tests/gpu/nvshmem_fig4.py. Exit status: non-zero when a run failed or the checker found a
#        mismatch.
# Inputs (environment; defaults in brackets):
#   PERFTEST_SRC  NVIDIA/nvshmem v3.4.5 perftest/ (common/, device/pt-to-pt/), never committed
#                 [.device/perftest]
#   NVT_BIN       prebuilt perftest + nvshmem_fig4 binaries; built with nvcc when missing
#                 [OUTDIR/bin]; the build is also saved as OUTDIR/bin.tgz
#   PRE, SIGMATOP libsigmatop_preload.so and the sigmatop binary [target/release/...]
#   TESTNIC_LIB   the NIC's libibverbs.so.1 + libmlx5.so.1 [target/testnic/lib; built if missing]
#   NVT_CHECK_BIN a built `gpu_nvshmem` test binary: also checks the records' events (rkey low
#                 16 bits, peers with GID) — what `cargo test --test gpu_nvshmem` does after this
#   PRE_INLINE    a preload from before the copier (main at f400193, the WQE copy on the poller
#                 thread): bench adds configuration `reci` (recovery, copy per doorbell, with it),
#                 alternated with the others in every round, for issue 41's before/after
#   NVT_BENCH_CONFIGS  the configurations bench alternates [base fwd rec recb, + reci with
#                 PRE_INLINE]; NVT_BENCH_MEMS the queue placements [hostmem gpumem]
#   NVT_MPS=1     run under MPS (default: no MPS, NVSHMEM's "limited" multi-PE-per-GPU mode)
#   NVT_NIC       strict | lenient: the NIC's doorbell rules (docs/TESTNIC.md "Strict doorbells";
#                 lenient sets TESTNIC_LENIENT=1, for debugging the NIC only) [strict]
#   NVT_HOSTS=1   each PE on a simulated host of its own (TESTNIC_HOST=rank+1: own GID, QPNs
#                 that repeat across the two PEs) [0: both on host 0]
#   NVT_WORK      where the runs go [a fresh /tmp/nvshmem-gpu.*]
#   NVT_TESTS, NVT_MEMS, NVT_TIMEOUT (s per run, 90), NVT_BUDGET (s for all runs, 540)
set -u
OUTDIR=${1:?usage: nvshmem_device.sh OUTDIR [proof|bench|all] [rounds]}
WHAT=${2:-proof}
ROUNDS=${3:-5}
ROOT=$PWD
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
if [ -n "${NVT_WORK:-}" ]; then
  W=$NVT_WORK
  mkdir -p "$W"
else
  W=$(mktemp -d /tmp/nvshmem-gpu.XXXXXX)
fi
exec > >(tee "$OUTDIR/summary.txt") 2>&1
START=$(date +%s)
BUDGET=${NVT_BUDGET:-540}
LIMIT=${NVT_TIMEOUT:-90}
FAILED=0

PRE=${PRE:-$ROOT/target/release/libsigmatop_preload.so}
SIGMATOP=${SIGMATOP:-$ROOT/target/release/sigmatop}
TESTNIC_LIB=${TESTNIC_LIB:-$ROOT/target/testnic/lib}
PERFTEST_SRC=${PERFTEST_SRC:-$ROOT/.device/perftest}
NVT_BIN=${NVT_BIN:-$OUTDIR/bin}
TESTS=${NVT_TESTS:-put_bw get_bw p_latency put_latency atomic_bw}
MEMS=${NVT_MEMS:-gpumem hostmem}

# NVIDIA's perftests and their arguments (utils.cu read_args): small sizes and counts, so every
# WQE can be compared; the checker recomputes the bytes from these.
declare -A ARGS=(
  [put_bw]="-b 4096 -e 65536 -f 4 -n 20 -w 5 -c 4 -t 256"
  [get_bw]="-b 4096 -e 65536 -f 4 -n 20 -w 5 -c 4 -t 256"
  [p_latency]="-b 8 -e 64 -f 2 -n 20 -w 5 -t 32"
  [put_latency]="-b 8 -e 512 -f 8 -n 20 -w 5 -t 64"
  [atomic_bw]="-a inc -b 8 -e 4096 -f 8 -n 10 -w 2 -c 4 -t 64"
)

echo "== machine"
nvidia-smi -L
nvcc --version | tail -2
nproc
mpirun --version 2>&1 | head -1
echo "NIC doorbells: ${NVT_NIC:-strict}; simulated hosts per PE: ${NVT_HOSTS:-0}"
NV=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "nvshmem"))' 2>/dev/null)
[ -n "$NV" ] && echo "NVSHMEM wheel: $NV ($(ls "$NV/lib" | tr '\n' ' '))"
ls -la /sys/class/infiniband 2>&1 | head -3

elapsed() { echo $(($(date +%s) - START)); }

# ---- the NIC, the harness -------------------------------------------------------------------
if [ ! -e "$TESTNIC_LIB/libmlx5.so.1" ]; then
  TESTNIC_BUILD_DIR=$W/testnic bash "$ROOT/scripts/with-testnic.sh" true || exit 1
  TESTNIC_LIB=$W/testnic/lib
fi
HARNESS=$W/libnvshmem_harness.so
gcc -O2 -Wall -shared -fPIC -o "$HARNESS" "$ROOT/tests/gpu/nvshmem_harness.c" -ldl || exit 1

# ---- NVIDIA's perftests and the Fig. 4 program, built once ----------------------------------
build() {
  local CUDA L B P t
  CUDA=$(dirname "$(dirname "$(command -v nvcc)")")
  L=$W/nvlib
  B=$W/build
  mkdir -p "$L" "$B" "$NVT_BIN"
  ln -sf "$NV/lib/libnvshmem_host.so.3" "$L/libnvshmem_host.so"
  ln -sf "$NV/lib/libnvshmem_device.a" "$L/libnvshmem_device.a"
  local NVCC=(nvcc -rdc=true -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I"$PERFTEST_SRC/common"
    -I"$NV/include" -I"$CUDA/include")
  local LINK=(-L"$L" -lnvshmem_host -lnvshmem_device -lcuda -lnvidia-ml -L"$CUDA/lib64/stubs"
    -Xlinker -rpath,"$NV/lib")
  P=$PERFTEST_SRC/device/pt-to-pt
  "${NVCC[@]}" -dc "$PERFTEST_SRC/common/utils.cu" -o "$B/utils.o" || return 1
  # Parallel builds, waited for by pid: a bare `wait` would also wait for the tee of this
  # script's output (a process substitution) and never return.
  local pids=()
  for t in $TESTS; do
    ("${NVCC[@]}" -dc "$P/shmem_$t.cu" -o "$B/$t.o" &&
      "${NVCC[@]}" "$B/utils.o" "$B/$t.o" "${LINK[@]}" -o "$NVT_BIN/shmem_$t") &
    pids+=($!)
  done
  ("${NVCC[@]}" "$ROOT/tests/gpu/nvshmem_fig4.cu" "${LINK[@]}" -o "$NVT_BIN/nvshmem_fig4") &
  pids+=($!)
  wait "${pids[@]}"
  for t in $TESTS; do [ -x "$NVT_BIN/shmem_$t" ] || return 1; done
  [ -x "$NVT_BIN/nvshmem_fig4" ] || return 1
  tar czf "$OUTDIR/bin.tgz" -C "$NVT_BIN" .
}
need_build=0
for t in $TESTS nvshmem_fig4; do
  f=$NVT_BIN/shmem_$t
  [ "$t" = nvshmem_fig4 ] && f=$NVT_BIN/nvshmem_fig4
  [ -x "$f" ] || need_build=1
done
if [ $need_build = 1 ]; then
  echo "== build (t=$(elapsed)s)"
  build || {
    echo "BUILD FAILED"
    exit 1
  }
  echo "built in $(elapsed)s: $(ls "$NVT_BIN" | tr '\n' ' ')"
fi

# ---- MPS (optional) -------------------------------------------------------------------------
MPS_ENV=""
if [ "${NVT_MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$W/mps CUDA_MPS_LOG_DIRECTORY=$W/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS started"
  MPS_ENV="export CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY=$CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"
fi
stop_mps() { [ "${NVT_MPS:-0}" = 1 ] && echo quit | nvidia-cuda-mps-control; }

# ---- one 2-PE run ---------------------------------------------------------------------------
# run_one NAME MEM TRACE PROG ARGS...: RUNDIR = $W/NAME; prints "run NAME rc=.. secs=..".
run_one() {
  local name=$1 mem=$2 trace=$3 pre=$PRE
  shift 3
  [ "$trace" = reci ] && pre=${PRE_INLINE:?reci needs PRE_INLINE}
  local d=$W/$name
  if [ "$(elapsed)" -gt "$BUDGET" ]; then
    echo "run $name SKIPPED (time budget of ${BUDGET}s spent)"
    FAILED=1
    return 1
  fi
  mkdir -p "$d/nic"
  local debug=${NVT_DEBUG:-WARN}
  [ "$name" = nvshmem-info ] && debug=INFO
  cat >"$d/env" <<EOF
export LD_LIBRARY_PATH=$TESTNIC_LIB:$NV/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export NVSHMEM_BOOTSTRAP=MPI NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_IB_ENABLE_IBGDA=1
export NVSHMEM_DISABLE_P2P=1 NVSHMEM_IBGDA_NIC_HANDLER=gpu NVSHMEM_DISABLE_NVLS=1 NVSHMEM_DISABLE_NCCL=1
export NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=$mem NVSHMEM_SYMMETRIC_SIZE=${NVT_HEAP:-268435456}
export NVSHMEM_DEBUG=$debug
export TESTNIC_LOG=$d/nic TESTNIC_SPIN=1 NVT_HOSTS=${NVT_HOSTS:-0}
$([ "${NVT_NIC:-strict}" = lenient ] && echo "export TESTNIC_LENIENT=1")
export TRACE=$trace PRE=$pre HARNESS=$HARNESS
$MPS_ENV
EOF
  echo "$*" >"$d/cmd"
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$LIMIT" bash "$ROOT/tests/testnic/sysfs-ns.sh" \
    mpirun --allow-run-as-root -np 2 --bind-to none --mca pml ob1 --mca btl self,vader \
    --mca osc '^ucx' --mca coll '^hcoll' \
    bash "$ROOT/tests/gpu/nvshmem_rank.sh" "$d" "$@" >"$d/mpirun.log" 2>&1
  rc=$?
  # Leftovers of a run that timed out: end them by the pids the ranks wrote.
  for p in "$d"/pid.*; do
    [ -e "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
  done
  echo "$rc" >"$d/rc"
  echo "run $name rc=$rc secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') t=$(elapsed)s"
  if [ "$rc" != 0 ]; then
    FAILED=1
    tail -5 "$d/mpirun.log" "$d"/err.* 2>/dev/null | sed 's/^/    /'
  fi
  return "$rc"
}

# ---- proof ----------------------------------------------------------------------------------
proof() {
  local t mem
  echo "== proof (t=$(elapsed)s)"
  # One run with NVSHMEM's INFO log (what it found and chose), apart from the compared pairs.
  run_one nvshmem-info gpumem base "$NVT_BIN/shmem_put_bw" ${ARGS[put_bw]}
  for mem in $MEMS; do
    local first=1
    for t in $TESTS; do
      local b=$t.$mem
      # A baseline that fails says the NIC or the harness is wrong: the traced run is skipped,
      # and when the first test of a placement fails, the placement's other tests too.
      if run_one "$b.base" "$mem" base "$NVT_BIN/shmem_$t" ${ARGS[$t]}; then
        run_one "$b.traced" "$mem" traced "$NVT_BIN/shmem_$t" ${ARGS[$t]}
        [ -d "$W/$b.traced/rec" ] && "$SIGMATOP" export "$W/$b.traced/rec" --json "$W/$b.traced/agg.json" \
          >"$W/$b.traced/export.log" 2>&1
        echo "${ARGS[$t]}" >"$W/$b.traced/args"
      elif [ $first = 1 ]; then
        echo "${ARGS[$t]}" >"$W/$b.base/args"
        echo "first baseline of $mem failed: its other tests are not run"
        break
      fi
      echo "${ARGS[$t]}" >"$W/$b.base/args"
      first=0
    done
  done
  echo "== check (t=$(elapsed)s)"
  python3 "$ROOT/tests/gpu/nvshmem_check.py" "$W" | tee "$OUTDIR/check.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
  if [ -n "${NVT_CHECK_BIN:-}" ]; then
    NVSHMEM_RESULTS=$W "$NVT_CHECK_BIN" --exact --nocapture nvshmem_records_match_the_nic 2>&1 |
      tee -a "$OUTDIR/check.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
  fi
}

# ---- Fig. 4 ---------------------------------------------------------------------------------
bench() {
  local r mem c
  echo "== bench: $ROUNDS rounds (t=$(elapsed)s)"
  local cfgs order
  read -r -a cfgs <<<"${NVT_BENCH_CONFIGS:-base fwd rec recb ${PRE_INLINE:+reci}}"
  for r in $(seq "$ROUNDS"); do
    # Round r starts at configuration r-1 (rotated), so that no configuration always runs
    # first or right after another: an order effect falls on every one alike.
    order=()
    for k in "${!cfgs[@]}"; do order+=("${cfgs[$(((k + r - 1) % ${#cfgs[@]}))]}"); done
    for mem in ${NVT_BENCH_MEMS:-hostmem gpumem}; do
      for c in "${order[@]}"; do
        mkdir -p "$W/fig4.$mem.$c.$r"
        run_one "fig4.$mem.$c.$r" "$mem" "$c" "$NVT_BIN/nvshmem_fig4" "$W/fig4.$mem.$c.$r" \
          "${NVT_SAMPLES:-2000}" 200
      done
    done
  done
  (cd "$W" && tar czf "$OUTDIR/fig4.tgz" --exclude='*/nic' --exclude='*/rec' --exclude='*/sock' fig4.*)
  python3 "$ROOT/tests/gpu/nvshmem_fig4.py" "$W" | tee "$OUTDIR/fig4.txt"
}

case "$WHAT" in
proof) proof ;;
bench) bench ;;
all)
  proof
  # The benchmark only when NVSHMEM ran at all on the NIC (some baseline exited 0).
  if grep -qx 0 "$W"/*.base/rc 2>/dev/null; then
    bench
  else
    echo "no baseline ran: no benchmark"
  fi
  ;;
*)
  echo "unknown: $WHAT"
  exit 2
  ;;
esac
stop_mps
# Everything the runs wrote, for the record (records and NIC logs of the proof included).
(cd "$W" && tar czf "$OUTDIR/runs.tgz" --exclude='fig4.*' --exclude='*/sock' --exclude=nvlib --exclude=build \
  --exclude=testnic --exclude='*.so' .)
echo "== done in $(elapsed)s: $([ $FAILED = 0 ] && echo OK || echo FAILED)"
exit $FAILED
