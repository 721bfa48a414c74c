#!/usr/bin/env bash
# On a GPU machine, from the repository root, with target/release/libsigmatop_preload.so built:
#   bash tests/gpu/run_device.sh OUTDIR [rounds]
# Builds the devx emulation and the CUDA workload (tests/gpu/gpu_workload.cu: NVSHMEM's WQE and
# doorbell formats, our own code), proves the doorbell hijack and WQE recovery, then runs the
# paper's Fig. 4 benchmark (baseline, forward-only, forward + recovery with a copy per doorbell
# and per batch), alternated `rounds` times, and computes its table with tests/gpu/fig4.py.
#
# Correctness, for the queues in GPU memory (`test`) and in pinned host memory (`test-host`),
# each traced with WQE copies per doorbell and per batch, and forward-only:
#   - every run exits 0 and prints the untraced run's results (data, atomics, doorbell count);
#   - the WQEs sigmatop recovered (SIGMATOP_WQE_LOG) are the list the kernels posted, under
#     tests/gpu/recovery.py's contract (each reported WQE is the posted one, in order; one missing
#     is counted by the copier; with no loss, exactly the list);
#   - no unparsable WQE, no failed hijack (SIGMATOP_GPU_STATS).
# Exits non-zero on any mismatch; "PROOF OK" or "PROOF FAILED (n)" is the last correctness line.
set -u
OUTDIR=${1:?outdir}; ROUNDS=${2:-3}
mkdir -p "$OUTDIR"
ROOT=$PWD
PRE=$ROOT/target/release/libsigmatop_preload.so
B=$(mktemp -d)
exec > >(tee "$OUTDIR/run.log") 2>&1
nvidia-smi -L; nvcc --version | tail -1
gcc -O2 -Wall -shared -fPIC -o "$B/libmlx5emu.so" tests/gpu/devx_emu.c || exit 1
nvcc -O2 -arch=sm_90 -Itests/gpu -o "$B/gpu_workload" tests/gpu/gpu_workload.cu -L"$B" -lmlx5emu -Xlinker -rpath,"$B" || exit 1
cd "$B"
T="timeout 300"
FAILS=0
fail() { echo "MISMATCH: $*"; FAILS=$((FAILS + 1)); }
traced() { # NAME MODE [ENV...]: one traced correctness run
  local name=$1 mode=$2; shift 2
  env "$@" SIGMATOP_RECORD="$B/rec_$name" SIGMATOP_WQE_LOG="$B/wlog_$name" SIGMATOP_GPU_STATS=1 \
    SIGMATOP_SOCKET_DIR="$B/sock" LD_PRELOAD="$PRE" $T ./gpu_workload "$mode" "list_$name.txt" \
    > "$name.out" 2> "$name.err"
  local rc=$?
  [ $rc -eq 0 ] || fail "$name exited $rc: $(tail -3 "$name.err")"
  diff -q "base_$mode.out" "$name.out" > /dev/null || fail "$name results differ from the untraced $mode run"
  grep -q 'hijack_failed=0' "$name.err" || fail "$name: a hijack failed: $(grep -h 'sigmatop' "$name.err" | tail -2)"
  if grep -q ' unparsable=[1-9]\| copy_failed=[1-9]' "$name.err"; then fail "$name: unparsable WQEs or failed copies"; fi
}
recovered() { # NAME: the WQE log against the posted list, tests/gpu/recovery.py's contract
  local name=$1 out
  if out=$(python3 "$ROOT/tests/gpu/recovery.py" "wlog_$name" "list_$name.txt" "$name.err"); then
    echo "SAME WQEs $name: $(grep -c '^wqe ' "list_$name.txt") posted, $out"
  else
    fail "$name: recovered WQEs against the posted list: $out"
  fi
}
echo "== correctness"
for mode in test test-host; do
  $T ./gpu_workload "$mode" "list_base_$mode.txt" > "base_$mode.out" 2> "base_$mode.err" || fail "untraced $mode exited $?"
  traced "$mode" "$mode"
  recovered "$mode"
  traced "$mode-batch" "$mode" SIGMATOP_WQE_COPY=batch
  recovered "$mode-batch"
  traced "$mode-fwd" "$mode" SIGMATOP_MODE=aggregate SIGMATOP_GPU_WQE=off
done
cat base_test.out
if [ $FAILS -eq 0 ]; then echo "PROOF OK"; else echo "PROOF FAILED ($FAILS)"; fi
tar czf "$OUTDIR/correctness.tgz" ./*.out ./*.err ./wlog_* ./list_* rec_* 2>/dev/null
if [ "$ROUNDS" -eq 0 ]; then
  echo "== bench skipped (rounds = 0)"
  exit $((FAILS > 0))
fi
echo "== bench"
for m in ${MODES:-bench-host bench}; do
for r in $(seq "$ROUNDS"); do
  $T ./gpu_workload $m > "$OUTDIR/${m}_base_$r.txt" 2>&1
  SIGMATOP_GPU_WQE=off SIGMATOP_SOCKET_DIR=$B/sock LD_PRELOAD=$PRE $T ./gpu_workload $m > "$OUTDIR/${m}_fwd_$r.txt" 2>&1
  SIGMATOP_RECORD=$B/rb$m$r SIGMATOP_GPU_STATS=1 SIGMATOP_SOCKET_DIR=$B/sock LD_PRELOAD=$PRE $T ./gpu_workload $m > "$OUTDIR/${m}_rec_$r.txt" 2>&1
  SIGMATOP_WQE_COPY=batch SIGMATOP_RECORD=$B/rc$m$r SIGMATOP_GPU_STATS=1 SIGMATOP_SOCKET_DIR=$B/sock LD_PRELOAD=$PRE $T ./gpu_workload $m > "$OUTDIR/${m}_recb_$r.txt" 2>&1
done
done
python3 "$ROOT/tests/gpu/fig4.py" "$OUTDIR" | tee "$OUTDIR/fig4.md"
cd "$OUTDIR" && tar czf bench.tgz ./*bench*_*.txt && rm -f ./*bench*_*.txt
exit $((FAILS > 0))
