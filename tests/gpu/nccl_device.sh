#!/usr/bin/env bash
# NVIDIA's nccl-tests (NVIDIA/nccl-tests, built here against the machine's NCCL, torch's 2.28.9)
# with 2 and 4 ranks on the one GPU, each rank its own NCCL node (NCCL_HOSTID) talking over
# NET/IB on the software mlx5 NIC (tests/testnic), P2P and SHM off; untraced, then under
# sigmatop in every mode (aggregate, simple, full; with sigmatop as NCCL's profiler plugin);
# checked by tests/gpu/nccl_check.py (issue 23). On the GPU machine, as root, from the
# repository root:
#   bash tests/gpu/nccl_device.sh OUTDIR [proof|bench|all]
# proof: every test x rank count x GPU Direct setting x mode, then the checker. diag: NCCL's
#        net-plugin QP events over NET/IB and over NET/Socket, and a small run whose record and
#        NIC log become the CPU test's fixture (OUTDIR/fixture.tgz). stall: rank 1 stopped 3 s
#        (SIGSTOP, SIGCONT) mid all_reduce, then killed mid-run; what the report says of each
#        (OUTDIR/stall.tgz). live: rank 1 stopped NCT_STOP_S (6) s mid all_reduce under
#        `sigmatop run --headless --record` around mpirun: the live warning's lines, stamped,
#        must name rank 1 within the threshold (2 s) plus a second, clear after SIGCONT, and the
#        job complete; then rank 1 killed: sigmatop ends with the job (OUTDIR/live.tgz).
#        all: proof, then diag. bench: the same
#        tests, untraced and traced (simple) alternated NCT_ROUNDS times (default 3) with
#        larger sizes (NCT_BENCH_ARGS); the figures in OUTDIR/bench.txt. Exit status: non-zero
#        when a run failed or the checker found a mismatch.
#        calib: one all_reduce's time at 1M and 128M with and without MPS. fig5: the paper's
#        Fig. 5/6 (all_reduce 1M and 128M, 2 and 4 ranks, untraced / aggregate / simple / full,
#        alternated rounds; `benches/summarize.py fig5 OUTDIR/fig5`). moe: tests/gpu/moe_dispatch.py
#        (4 ranks, skewed all_to_all) untraced and under `sigmatop --record` (OUTDIR/moe.tgz).
#        Several in one call: nccl_device.sh OUTDIR "calib moe".
# Inputs (environment; defaults in brackets):
#   NCCL_TESTS_SRC NVIDIA/nccl-tests sources, never committed [.device/nccl-tests]
#   NCT_BIN        prebuilt nccl-tests binaries; built when missing [OUTDIR/bin]
#   PRE, SIGMATOP  libsigmatop_preload.so and the sigmatop binary [target/release/...]
#   TESTNIC_LIB    the NIC's libibverbs.so.1 + libmlx5.so.1 [target/testnic/lib; built if missing]
#   NCT_TESTS      [all_reduce all_gather reduce_scatter alltoall sendrecv]
#   NCT_RANKS      [2 4]
#   NCT_GDR        [1 0]: 1 = GPU Direct RDMA (NCCL_NET_GDR_LEVEL=SYS: the NIC reads and writes
#                  GPU memory through its dma-buf registration), 0 = host bounce buffers
#                  (NCCL_NET_GDR_LEVEL=LOC); each run's NCCL log says which it used
#   NCT_MODES      [base simple aggregate full]
#   NCT_ARGS       nccl-tests arguments [-b 4K -e 256K -f 8 -n 5 -w 2 -c 1]
#   NCT_PLUGIN     [1] traced runs also load sigmatop as NCCL's profiler plugin
#   NCT_UTS        [1] each rank in its own UTS namespace named softhostN (sigmatop's node)
#   NCT_WORK       where the runs go [a fresh /tmp/nccl-gpu.*]
#   NCT_TIMEOUT (s per run, 120), NCT_BUDGET (s for all runs, 500)
#   NCT_MPS        [0] 1: start MPS first (the ranks' kernels run at once, not time-sliced)
#   NCT_NICLOG, NCT_EXPORT [1] 0: no NIC log / no export and report of a run's record
#   NCT_TAR_RECS   [1] 0: OUTDIR/runs.tgz without the records and NIC logs; NCT_TAR=0: none
#   NCT_SIZES, NCT_ITERS_<size>, NCT_WARM_<size>, NCT_ROUNDS, NCT_ROUND_SECS, NCT_CALIB,
#   NCT_TARGET_S (fig5: iterations from a calib.txt, rounds while the budget lasts)
#   NCT_MOE_RANKS [4], NCT_MOE_ARGS (moe_dispatch.py's options) (moe)
set -u
OUTDIR=${1:?usage: nccl_device.sh OUTDIR [proof|bench|diag|stall|live|all]}
WHAT=${2:-proof}
ROOT=$PWD
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
if [ -n "${NCT_WORK:-}" ]; then
  W=$NCT_WORK
  mkdir -p "$W"
else
  W=$(mktemp -d /tmp/nccl-gpu.XXXXXX)
fi
exec > >(tee "$OUTDIR/summary.txt") 2>&1
START=$(date +%s)
BUDGET=${NCT_BUDGET:-500}
LIMIT=${NCT_TIMEOUT:-120}
FAILED=0
PRE=${PRE:-$ROOT/target/release/libsigmatop_preload.so}
SIGMATOP=${SIGMATOP:-$ROOT/target/release/sigmatop}
TESTNIC_LIB=${TESTNIC_LIB:-$ROOT/target/testnic/lib}
SRC=${NCCL_TESTS_SRC:-$ROOT/.device/nccl-tests}
NCT_BIN=${NCT_BIN:-$OUTDIR/bin}
TESTS=${NCT_TESTS:-all_reduce all_gather reduce_scatter alltoall sendrecv}
RANKS=${NCT_RANKS:-2 4}
GDRS=${NCT_GDR:-1 0}
MODES=${NCT_MODES:-base simple aggregate full}
ARGS=${NCT_ARGS:--b 4K -e 256K -f 8 -n 5 -w 2 -c 1}
elapsed() { echo $(($(date +%s) - START)); }

echo "== machine"
nvidia-smi -L
nvcc --version | tail -2
nproc
mpirun --version 2>&1 | head -1
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
echo "NCCL: $NCCL_DIR ($(ls "$NCCL_DIR/lib" 2>/dev/null | tr '\n' ' '))"
grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\)' "$NCCL_DIR/include/nccl.h" | tr '\n' ' '
echo
ls /sys/module/nvidia_peermem 2>/dev/null || echo "nvidia_peermem: not loaded (GPU Direct only through dma-buf)"

# ---- the NIC, nccl-tests ----------------------------------------------------------------------
if [ ! -e "$TESTNIC_LIB/libmlx5.so.1" ]; then
  TESTNIC_BUILD_DIR=$W/testnic bash "$ROOT/scripts/with-testnic.sh" true || exit 1
  TESTNIC_LIB=$W/testnic/lib
fi
need_build=0
for t in $TESTS; do [ -x "$NCT_BIN/${t}_perf" ] || need_build=1; done
if [ $need_build = 1 ]; then
  echo "== build nccl-tests (t=$(elapsed)s)"
  H=$W/ncclhome
  mkdir -p "$H/lib" "$NCT_BIN"
  ln -sfn "$NCCL_DIR/include" "$H/include"
  ln -sf "$NCCL_DIR/lib/libnccl.so.2" "$H/lib/libnccl.so"
  CUDA=$(dirname "$(dirname "$(command -v nvcc)")")
  targets=""
  for t in $TESTS; do targets="$targets $W/nct-build/${t}_perf"; done
  # shellcheck disable=SC2086 # one make target per test
  make -s -C "$SRC/src" -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME="$H" \
    CUDA_HOME="$CUDA" NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR="$W/nct-build" \
    $targets >"$OUTDIR/build.log" 2>&1 || {
    tail -20 "$OUTDIR/build.log"
    echo "BUILD FAILED"
    exit 1
  }
  for t in $TESTS; do cp "$W/nct-build/${t}_perf" "$NCT_BIN/"; done
  echo "built in $(elapsed)s: $(ls "$NCT_BIN" | tr '\n' ' ')"
fi

# ---- MPS: the ranks' CUDA contexts share the GPU at once instead of by time slices ------------
MPS_ENV=""
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=$W/mps CUDA_MPS_LOG_DIRECTORY=$W/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS started (t=$(elapsed)s)"
  MPS_ENV="export CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY=$CUDA_MPS_LOG_DIRECTORY"
}
mps_stop() {
  [ -n "$MPS_ENV" ] || return 0
  echo quit | nvidia-cuda-mps-control
  MPS_ENV=""
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  sleep 1
  echo "MPS stopped (t=$(elapsed)s)"
}
[ "${NCT_MPS:-0}" = 1 ] && mps_start

# ---- one run ----------------------------------------------------------------------------------
# run_one NAME RANKS GDR TRACE PROG ARGS...: RUNDIR = $W/NAME; prints "run NAME rc=.. secs=..".
run_one() {
  local name=$1 np=$2 gdr=$3 trace=$4
  shift 4
  local d=$W/$name
  if [ "$(elapsed)" -gt "$BUDGET" ]; then
    echo "run $name SKIPPED (time budget of ${BUDGET}s spent)"
    FAILED=1
    return 1
  fi
  mkdir -p "$d/nic"
  local level=LOC
  [ "$gdr" = 1 ] && level=SYS
  cat >"$d/env" <<EOF
export LD_LIBRARY_PATH=$TESTNIC_LIB:$NCCL_DIR/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export NCCL_NET=IB NCCL_IB_HCA=mlx5_0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_GDR_LEVEL=$level
export NCCL_DEBUG=${NCT_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV NCCL_DEBUG_FILE=$d/nccl.%h.%p.log
$([ "${NCT_NICLOG:-1}" = 1 ] && echo "export TESTNIC_LOG=$d/nic")
$MPS_ENV
export TRACE=$trace PRE=$PRE NCT_PLUGIN=${NCT_PLUGIN:-1} NCT_UTS=${NCT_UTS:-1}
${NCT_EXTRA_ENV:-}
EOF
  echo "$*" >"$d/cmd"
  echo "$np" >"$d/np"
  echo "$gdr" >"$d/gdr"
  echo "$trace" >"$d/trace"
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$LIMIT" bash "$ROOT/tests/testnic/sysfs-ns.sh" \
    mpirun --allow-run-as-root -np "$np" --bind-to none --mca pml ob1 --mca btl self,vader \
    --mca osc '^ucx' --mca coll '^hcoll' \
    bash "$ROOT/tests/gpu/nccl_rank.sh" "$d" "$@" >"$d/mpirun.log" 2>&1
  rc=$?
  for p in "$d"/pid.*; do
    [ -e "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
  done
  echo "$rc" >"$d/rc"
  local gdrline
  gdrline=$(grep -h 'GPU Direct RDMA \(Enabled\|Disabled\) for GPU' "$d"/nccl.*.log 2>/dev/null | head -1 | sed 's/.*NCCL INFO //')
  echo "run $name rc=$rc secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') t=$(elapsed)s [$gdrline]"
  if [ "$rc" != 0 ]; then
    FAILED=1
    tail -5 "$d/mpirun.log" "$d"/err.* 2>/dev/null | sed 's/^/    /'
  fi
  if [ -d "$d/rec" ] && [ "${NCT_EXPORT:-1}" = 1 ]; then
    "$SIGMATOP" export "$d/rec" --json "$d/agg.json" >"$d/export.log" 2>&1 || echo "    export of $name failed: $(tail -2 "$d/export.log")"
    "$SIGMATOP" report "$d/rec" >"$d/report.txt" 2>&1
  fi
  return "$rc"
}

# ---- proof --------------------------------------------------------------------------------------
proof() {
  local np t gdr m
  echo "== proof: $TESTS; ranks $RANKS; GDR $GDRS; modes $MODES; args $ARGS (t=$(elapsed)s)"
  for gdr in $GDRS; do
    for np in $RANKS; do
      for t in $TESTS; do
        for m in $MODES; do
          local name=$t.np$np.gdr$gdr.$m
          run_one "$name" "$np" "$gdr" "$m" "$NCT_BIN/${t}_perf" $ARGS -g 1
          echo "$ARGS" >"$W/$name/args"
          echo "$t" >"$W/$name/test"
          # A baseline that fails says the NIC or the setup is wrong: the traced runs of it wait.
          [ "$m" = base ] && [ "$(cat "$W/$name/rc")" != 0 ] && break
        done
      done
    done
  done
  echo "== check (t=$(elapsed)s)"
  python3 "$ROOT/tests/gpu/nccl_check.py" "$W" | tee "$OUTDIR/check.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
}

# ---- bench ----------------------------------------------------------------------------------------
bench() {
  local r t m
  local bargs=${NCT_BENCH_ARGS:--b 64K -e 4M -f 4 -n 10 -w 3 -c 0}
  echo "== bench: ${NCT_ROUNDS:-3} rounds, $bargs (t=$(elapsed)s)"
  for r in $(seq "${NCT_ROUNDS:-3}"); do
    for t in ${NCT_BENCH_TESTS:-all_reduce alltoall}; do
      for m in base simple; do
        run_one "bench.$t.$m.$r" 2 1 "$m" "$NCT_BIN/${t}_perf" $bargs -g 1
        grep -h '^ *[0-9]' "$W/bench.$t.$m.$r/out.0" | sed "s/^/$t $m r$r /" >>"$OUTDIR/bench.txt"
      done
    done
  done
}

# ---- diag: where the IB QP events go; a small run kept as the CPU test's fixture ---------------
diag() {
  echo "== diag (t=$(elapsed)s)"
  echo "libnccl strings of the net-plugin QP profiling code (net_ib.cc asserts):"
  strings "$NCCL_DIR/lib/libnccl.so.2" | grep -c 'nEventHandles < MAX_QPS_PER_REQ'
  strings "$NCCL_DIR/lib/libnccl.so.2" | grep -i 'MAX_QPS_PER_REQ\|NET_PROFIL\|ncclProfileQp' | head -5
  run_one diag.ib.np2.simple 2 0 simple "$NCT_BIN/all_reduce_perf" $ARGS -g 1
  NCT_EXTRA_ENV="export NCCL_NET=Socket" run_one diag.sock.np2.simple 2 0 simple \
    "$NCT_BIN/all_reduce_perf" $ARGS -g 1
  local fx=${NCT_FIXTURE_ARGS:--b 4K -e 32K -f 8 -n 2 -w 1 -c 1}
  run_one fixture.all_reduce.np2.gdr1.simple 2 1 simple "$NCT_BIN/all_reduce_perf" $fx -g 1
  echo "$fx" >"$W/fixture.all_reduce.np2.gdr1.simple/args"
  echo all_reduce >"$W/fixture.all_reduce.np2.gdr1.simple/test"
  for d in "$W"/diag.* "$W"/fixture.*; do
    echo "$(basename "$d"): $(grep -h 'NCCL ↔ verbs' "$d/report.txt" 2>/dev/null)"
  done
  (cd "$W" && tar czf "$OUTDIR/fixture.tgz" fixture.all_reduce.np2.gdr1.simple)
}

# ---- stall: a rank stopped (SIGSTOP 3 s, then SIGCONT) and a rank killed mid-run ------------------
# wait_pid FILE: the pid a rank wrote, once NCCL is running (its NCCL log names a channel).
wait_ready() {
  local d=$1 i
  for i in $(seq 200); do
    [ -e "$d/pid.1" ] && grep -qs 'Connected all rings' "$d"/nccl.*.log && return 0
    sleep 0.1
  done
  return 1
}
stall() {
  local a="-b 4K -e 4K -n 2000 -w 1 -c 1" d
  echo "== stall (t=$(elapsed)s)"
  d=$W/stall.sigstop.np2
  run_one stall.sigstop.np2 2 0 simple "$NCT_BIN/all_reduce_perf" $a -g 1 &
  local bg=$!
  if wait_ready "$d"; then
    sleep 1
    kill -STOP "$(cat "$d/pid.1")" && echo "rank 1 stopped at t=$(elapsed)s"
    sleep 3
    kill -CONT "$(cat "$d/pid.1")" && echo "rank 1 continued at t=$(elapsed)s"
  else
    echo "stall.sigstop: rank 1 never got going"
  fi
  wait "$bg"
  grep -h 'arrival spread\|did not complete' "$d/report.txt" | sed 's/^/    /'
  d=$W/stall.kill.np2
  NCT_TIMEOUT=30 run_one stall.kill.np2 2 0 simple "$NCT_BIN/all_reduce_perf" $a -g 1 &
  bg=$!
  if wait_ready "$d"; then
    sleep 1
    kill -9 "$(cat "$d/pid.1")" && echo "rank 1 killed at t=$(elapsed)s"
  fi
  wait "$bg"
  grep -h 'arrival spread\|did not complete' "$d/report.txt" | sed 's/^/    /'
  (cd "$W" && tar czf "$OUTDIR/stall.tgz" --exclude='*/sock' stall.*)
}

# ---- calib: how long one all_reduce takes here, with and without MPS ---------------------------
# base runs only, host bounce buffers: -b S -e S -n 3 -w 1 for each of NCT_SIZES, NCT_RANKS ranks.
calib() {
  local mps np s
  echo "== calib (t=$(elapsed)s)"
  for mps in ${NCT_CALIB_MPS:-0 1}; do
    [ "$mps" = 1 ] && mps_start
    for np in $RANKS; do
      for s in ${NCT_SIZES:-1M 128M}; do
        NCT_NICLOG=0 NCT_EXPORT=0 run_one "calib.mps$mps.np$np.$s" "$np" 0 base \
          "$NCT_BIN/all_reduce_perf" -b "$s" -e "$s" -n "${NCT_CALIB_ITERS:-3}" -w 1 -c 1 -g 1
        grep -h '^ *[0-9]' "$W/calib.mps$mps.np$np.$s/out.0" | sed "s/^/calib mps$mps np$np $s /" \
          >>"$OUTDIR/calib.txt"
      done
    done
    [ "$mps" = 1 ] && mps_stop
  done
  cat "$OUTDIR/calib.txt"
}

# ---- fig5: the paper's Fig. 5 / 6 on this machine -------------------------------------------------
# all_reduce_perf at each of NCT_SIZES (1M 128M), NCT_RANKS ranks, untraced and in each mode, one
# process per (size, ranks, mode) with its own -n / -w (NCT_ITERS_<size>, NCT_WARM_<size>); rounds
# alternated in one sitting: round r runs every (ranks, size) and within it the modes in an order
# rotated by r (no mode always first or last). Host bounce buffers (GPU Direct RDMA on this NIC
# copies GPU memory through CUDA: ~100x slower), traced runs record (SIGMATOP_RECORD) with the
# profiler plugin, as `sigmatop run` does; the NIC's own log off (it costs every mode the same).
# nccl-tests' per-iteration timing (-I 1, -J) goes to OUTDIR/fig5/NAME.json (its p50: the run's
# median time per collective), its table rows to OUTDIR/fig5/rows.txt; `python3
# benches/summarize.py fig5 OUTDIR/fig5` gives the table. A round is not started when
# NCT_ROUND_SECS more would pass NCT_BUDGET.
# iters_for NP SIZE: NCT_ITERS_<size>, else from NCT_CALIB (calib.txt: the out-of-place time of
# that (MPS setting, ranks, size)) the -n that takes NCT_TARGET_S seconds (5..500), else 20.
iters_for() {
  local v
  v=$(eval echo "\${NCT_ITERS_$2:-}")
  if [ -z "$v" ] && [ -n "${NCT_CALIB:-}" ]; then
    v=$(awk -v np="np$1" -v s="$2" -v tgt="${NCT_TARGET_S:-2}" -v mps="mps${NCT_MPS:-0}" \
      '$2 == mps && $3 == np && $4 == s && $10 > 0 { n = int(tgt * 1e6 / $10); if (n < 5) n = 5; if (n > 500) n = 500; print n; exit }' \
      "$NCT_CALIB")
  fi
  echo "${v:-20}"
}
fig5() {
  local rounds=${NCT_ROUNDS:-5} r np s m i name n w t_round
  local round_secs=${NCT_ROUND_SECS:-}
  local modes=(base aggregate simple full)
  mkdir -p "$OUTDIR/fig5"
  echo "== fig5: $rounds rounds; ranks $RANKS; sizes ${NCT_SIZES:-1M 128M} (t=$(elapsed)s)"
  for r in $(seq "$rounds"); do
    if [ -n "$round_secs" ] && [ $(($(elapsed) + round_secs)) -gt "$BUDGET" ]; then
      echo "fig5: round $r not started: ${round_secs}s more would pass the budget (t=$(elapsed)s)"
      break
    fi
    t_round=$(elapsed)
    for np in $RANKS; do
      for s in ${NCT_SIZES:-1M 128M}; do
        n=$(iters_for "$np" "$s")
        w=$(eval echo "\${NCT_WARM_$s:-}")
        [ -n "$w" ] || w=$((n / 10 > 2 ? n / 10 : 2))
        [ "$r" = 1 ] && echo "fig5: np$np $s: -n $n -w $w"
        for i in 0 1 2 3; do
          m=${modes[$(((i + r) % 4))]}
          name=fig5.np$np.$s.$m.r$r
          NCT_NICLOG=0 NCT_EXPORT=0 run_one "$name" "$np" 0 "$m" "$NCT_BIN/all_reduce_perf" \
            -b "$s" -e "$s" -n "$n" -w "$w" -c 0 -I 1 -J "$W/$name/perf.json" -g 1
          cp "$W/$name/perf.json" "$OUTDIR/fig5/$name.json" 2>/dev/null
          grep -h '^ *[0-9]' "$W/$name/out.0" | sed "s/^/$name /" >>"$OUTDIR/fig5/rows.txt"
          if [ -d "$W/$name/rec" ]; then
            echo "$name $(du -sb "$W/$name/rec" | cut -f1)" >>"$OUTDIR/fig5/record_bytes.txt"
          fi
        done
      done
    done
    # Without NCT_ROUND_SECS, the first round's length decides whether another fits.
    [ -n "${NCT_ROUND_SECS:-}" ] || round_secs=$(($(elapsed) - t_round))
    echo "fig5: round $r done in $(($(elapsed) - t_round))s (t=$(elapsed)s)"
  done
  # The traced runs of round 1 reported: calls per proxy step, events, collectives.
  # NCT_FIG5_REPORT: which runs (a glob of run names) [fig5.*.r1].
  for name in "$W"/${NCT_FIG5_REPORT:-fig5.*.r1}; do
    [ -d "$name/rec" ] || continue
    "$SIGMATOP" report "$name/rec" >"$name/report.txt" 2>&1
    cp "$name/report.txt" "$OUTDIR/fig5/$(basename "$name").report.txt"
  done
}

# ---- moe: tests/gpu/moe_dispatch.py, 4 ranks, under `sigmatop --record` ---------------------------
# One untraced run, then one under `sigmatop --mode simple --record RUN/rec -- mpirun ...`
# (sigmatop's environment reaches the ranks through mpirun -x; nccl_rank.sh with TRACE=env keeps
# it), host bounce buffers, the NIC's log kept (the ground truth). OUTDIR/moe.tgz: both runs (rec/,
# nic/, splits.json, out/err per rank, sigmatop's own output, report, export, replay summary).
moe() {
  local np=${NCT_MOE_RANKS:-4} margs=${NCT_MOE_ARGS:-}
  echo "== moe: $np ranks $margs (t=$(elapsed)s)"
  # shellcheck disable=SC2086 # the program's arguments
  NCT_EXPORT=0 run_one moe.base "$np" 0 base python3 "$ROOT/tests/gpu/moe_dispatch.py" "$W/moe.base" $margs
  cat "$W/moe.base"/out.* | sed 's/^/    /'
  local d=$W/moe.simple t0 rc
  mkdir -p "$d/nic"
  {
    echo "export LD_LIBRARY_PATH=$TESTNIC_LIB:$NCCL_DIR/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export NCCL_NET=IB NCCL_IB_HCA=mlx5_0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_GDR_LEVEL=LOC"
    echo "export NCCL_DEBUG=${NCT_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV NCCL_DEBUG_FILE=$d/nccl.%h.%p.log"
    echo "export TESTNIC_LOG=$d/nic TRACE=env NCT_UTS=1 MOE_PORT=29525"
    echo "$MPS_ENV"
  } >"$d/env"
  echo "$np" >"$d/np"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # the program's arguments
  SIGMATOP_PRELOAD=$PRE timeout -k 5 "$LIMIT" "$SIGMATOP" --mode simple --record "$d/rec" -- \
    bash "$ROOT/tests/testnic/sysfs-ns.sh" \
    mpirun --allow-run-as-root -np "$np" --bind-to none --mca pml ob1 --mca btl self,vader \
    --mca osc '^ucx' --mca coll '^hcoll' -x LD_PRELOAD -x SIGMATOP_MODE -x SIGMATOP_RECORD \
    -x SIGMATOP_SOCKET_DIR -x SIGMATOP_FINAL_DIR -x NCCL_PROFILER_PLUGIN \
    bash "$ROOT/tests/gpu/nccl_rank.sh" "$d" python3 "$ROOT/tests/gpu/moe_dispatch.py" "$d" $margs \
    >"$d/sigmatop.out" 2>"$d/sigmatop.err" </dev/null
  rc=$?
  for p in "$d"/pid.*; do
    [ -e "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
  done
  echo "$rc" >"$d/rc"
  echo "run moe.simple rc=$rc secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') t=$(elapsed)s"
  [ "$rc" = 0 ] || FAILED=1
  cat "$d"/out.* 2>/dev/null | sed 's/^/    /'
  tail -5 "$d/sigmatop.out" "$d/sigmatop.err" "$d"/err.* 2>/dev/null | sed 's/^/    /'
  "$SIGMATOP" export "$d/rec" --json "$d/agg.json" >"$d/export.log" 2>&1
  "$SIGMATOP" report "$d/rec" >"$d/report.txt" 2>&1
  "$SIGMATOP" replay "$d/rec" --headless >"$d/replay.txt" 2>&1
  grep -h 'warning\|skew\|SKEW' "$d/replay.txt" "$d/report.txt" | sed 's/^/    /'
  (cd "$W" && tar czf "$OUTDIR/moe.tgz" --exclude='*/sock' moe.simple moe.base)
}

# ---- live: the stall case followed live by `sigmatop run --headless` (issue 23, item 6) ---------
# live_one NAME: 2-rank all_reduce_perf under `sigmatop run --headless --record`, sigmatop's
# stderr stamped (epoch seconds) into $W/NAME/sigmatop.err; in the background.
live_one() {
  local d=$W/$1
  mkdir -p "$d/nic"
  cat >"$d/env" <<EOF
export LD_LIBRARY_PATH=$TESTNIC_LIB:$NCCL_DIR/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export NCCL_NET=IB NCCL_IB_HCA=mlx5_0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_GDR_LEVEL=LOC
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV NCCL_DEBUG_FILE=$d/nccl.%h.%p.log
export TESTNIC_LOG=$d/nic TRACE=inherit NCT_UTS=1
EOF
  (
    timeout -k 5 "${NCT_TIMEOUT:-120}" "$SIGMATOP" run --headless --record "$d/rec" -- \
      bash "$ROOT/tests/testnic/sysfs-ns.sh" \
      mpirun --allow-run-as-root -np 2 --bind-to none --mca pml ob1 --mca btl self,vader \
      --mca osc '^ucx' --mca coll '^hcoll' \
      bash "$ROOT/tests/gpu/nccl_rank.sh" "$d" "$NCT_BIN/all_reduce_perf" \
      -b 4K -e 4K -n "${NCT_LIVE_N:-3000}" -w 1 -c 1 -g 1 \
      >"$d/run.out" 2> >(while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done >"$d/sigmatop.err")
    echo $? >"$d/rc"
  ) &
}
live() {
  local d stop=${NCT_STOP_S:-6} t0= t1= first ok rc bg
  echo "== live (t=$(elapsed)s)"
  d=$W/live.sigstop.np2
  live_one live.sigstop.np2
  bg=$!
  if wait_ready "$d"; then
    sleep 1
    t0=$(date +%s.%N)
    kill -STOP "$(cat "$d/pid.1")" && echo "rank 1 stopped at $t0"
    sleep "$stop"
    t1=$(date +%s.%N)
    kill -CONT "$(cat "$d/pid.1")" && echo "rank 1 continued at $t1"
  else
    echo "live.sigstop: rank 1 never got going"
    FAILED=1
  fi
  wait "$bg"
  sleep 1
  rc=$(cat "$d/rc" 2>/dev/null)
  echo "sigmatop run exited $rc; its lines:"
  grep 'sigmatop:' "$d/sigmatop.err" | sed 's/^/    /'
  first=$(grep -m1 'sigmatop: ⚠ .* waits for r1' "$d/sigmatop.err" | cut -d' ' -f1)
  ok=0
  if [ -n "$first" ] && [ -n "$t0" ]; then
    echo "first warning naming rank 1: $(awk -v a="$t0" -v b="$first" 'BEGIN { printf "%.2f", b - a }') s after the stop (threshold 2 s)"
    awk -v a="$t0" -v b="$first" -v c="$t1" 'BEGIN { exit !(b - a <= 3.0 && b < c) }' && ok=1
  fi
  grep -q 'sigmatop: ✓ .*no longer hung' "$d/sigmatop.err" || ok=0
  [ "$rc" = 0 ] || ok=0
  echo "live warning named rank 1 within the threshold + 1 s, cleared, job completed: $([ $ok = 1 ] && echo PASS || echo FAIL)"
  [ $ok = 1 ] || FAILED=1
  "$SIGMATOP" report "$d/rec" >"$d/report.txt" 2>&1
  grep -h 'arrival spread\|did not complete\|NCCL ↔ verbs' "$d/report.txt" | sed 's/^/    /'
  # A rank killed: mpirun ends the job, sigmatop ends with it (nothing hangs on its side).
  d=$W/live.kill.np2
  NCT_TIMEOUT=60 live_one live.kill.np2
  bg=$!
  if wait_ready "$d"; then
    sleep 1
    kill -9 "$(cat "$d/pid.1")" && echo "rank 1 killed at $(date +%s.%N)"
  fi
  wait "$bg"
  sleep 1
  echo "kill: sigmatop run exited $(cat "$d/rc" 2>/dev/null) (124: it hung and timeout ended it) at $(date +%s.%N)"
  [ "$(cat "$d/rc" 2>/dev/null)" = 124 ] && FAILED=1
  grep 'sigmatop:' "$d/sigmatop.err" | tail -5 | sed 's/^/    /'
  "$SIGMATOP" report "$d/rec" >"$d/report.txt" 2>&1
  grep -h 'did not complete' "$d/report.txt" | sed 's/^/    /'
  (cd "$W" && tar czf "$OUTDIR/live.tgz" --exclude='*/sock' --exclude='*/nic' live.*)
}

# ---- hang: one rank's sends held by the NIC mid-run, every rank in the call (issue 36 item 6) --
# hang_one NAME TEST: 4-rank TEST_perf under `sigmatop run --headless --hang-after 2s --record`,
# rank 1's sends held by the NIC (TESTNIC_STALL=NCT_STALL, default 2000:8000: after its 2000th
# send WQE, for 8 s); sigmatop's stderr stamped (epoch seconds). Then tests/gpu/hang_check.py:
# the first warning naming rank 1's edge (r1→) and where it waits came within the threshold + 1 s
# of the NIC's stall line, it cleared after the lift, the job completed and nccl-tests' check
# passed.
hang_one() {
  local name=$1 t=$2 d=$W/$1 t0
  mkdir -p "$d/nic"
  {
    echo "export LD_LIBRARY_PATH=$TESTNIC_LIB:$NCCL_DIR/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export NCCL_NET=IB NCCL_IB_HCA=mlx5_0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_GDR_LEVEL=LOC"
    echo "export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV NCCL_DEBUG_FILE=$d/nccl.%h.%p.log"
    echo "export TRACE=inherit NCT_UTS=1 NCT_STALL_RANK=1 NCT_STALL=${NCT_STALL:-2000:8000}"
    echo "$MPS_ENV"
  } >"$d/env"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # nccl-tests arguments
  timeout -k 5 "${NCT_TIMEOUT:-240}" "$SIGMATOP" run --headless --hang-after 2s --record "$d/rec" -- \
    bash "$ROOT/tests/testnic/sysfs-ns.sh" \
    mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader \
    --mca osc '^ucx' --mca coll '^hcoll' \
    bash "$ROOT/tests/gpu/nccl_rank.sh" "$d" "$NCT_BIN/${t}_perf" \
    ${NCT_HANG_ARGS:--b 64K -e 64K -n 3000 -w 5 -c 1} -g 1 \
    >"$d/run.out" 2> >(while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done >"$d/sigmatop.err") </dev/null
  echo $? >"$d/rc"
  # The epoch minus CLOCK_MONOTONIC here: the NIC stamps its lines with the second.
  python3 -c 'import time; print(time.time() - time.monotonic())' >"$d/clock_offset"
  sleep 1
  echo "run $name rc=$(cat "$d/rc") secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') t=$(elapsed)s"
  grep 'sigmatop:' "$d/sigmatop.err" | head -12 | cut -c1-260 | sed 's/^/    /'
  grep -h 'testnic: pid .* stall' "$d"/err.* | sed 's/^/    /'
  grep -h 'Out of bounds\|Avg bus' "$d"/out.* | head -2 | sed 's/^/    /'
  python3 "$ROOT/tests/gpu/hang_check.py" "$d" || FAILED=1
  "$SIGMATOP" report "$d/rec" >"$d/report.txt" 2>&1
}
hang() {
  echo "== hang (t=$(elapsed)s)"
  for t in ${NCT_HANG_TESTS:-all_reduce alltoall}; do
    hang_one "hang.$t.np4" "$t"
  done
  (cd "$W" && tar czf "$OUTDIR/hang.tgz" --exclude='*/sock' --exclude='*/nic' --exclude='*/rec' hang.*)
}

for what in $WHAT; do
case "$what" in
hang) hang ;;
calib) calib ;;
fig5) fig5 ;;
moe) moe ;;
live) live ;;
stall) stall ;;
proof) proof ;;
bench) bench ;;
diag) diag ;;
all)
  proof
  diag
  ;;
*)
  echo "unknown: $what"
  exit 2
  ;;
esac
done
mps_stop
# NCT_TAR_RECS=0: records and NIC logs stay out of runs.tgz (fig5's are large); NCT_TAR=0: no runs.tgz.
if [ "${NCT_TAR:-1}" = 0 ]; then
  :
elif [ "${NCT_TAR_RECS:-1}" = 1 ]; then
  (cd "$W" && tar czf "$OUTDIR/runs.tgz" --exclude='*/sock' --exclude=ncclhome --exclude=nct-build \
    --exclude=testnic .)
else
  (cd "$W" && tar czf "$OUTDIR/runs.tgz" --exclude='*/sock' --exclude=ncclhome --exclude=nct-build \
    --exclude=testnic --exclude='*/rec' --exclude='*/nic' --exclude=mps --exclude=mps-log .)
fi
echo "== done in $(elapsed)s: $([ $FAILED = 0 ] && echo OK || echo FAILED)"
exit $FAILED
