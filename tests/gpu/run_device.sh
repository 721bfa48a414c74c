#!/usr/bin/env bash
# On a GPU machine, from the repository root, with target/release/libsigmatop_preload.so built:
#   bash tests/gpu/run_device.sh OUTDIR [rounds]
# Builds the devx emulation and the CUDA workload, proves the doorbell hijack (results identical
# with and without sigmatop, every doorbell recorded, every WQE recovered exactly) and runs the
# paper's Fig. 4 benchmark: baseline, forward-only, forward + WQE recovery (copy per doorbell and
# per batch), alternated `rounds` times. Everything lands in OUTDIR.
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
echo "== correctness"
$T ./gpu_workload test list_base.txt > base.out 2> base.err; echo "baseline rc=$?"
SIGMATOP_RECORD=$B/rec SIGMATOP_WQE_LOG=$B/wlog SIGMATOP_GPU_STATS=1 SIGMATOP_SOCKET_DIR=$B/sock \
  LD_PRELOAD=$PRE $T ./gpu_workload test list_traced.txt > traced.out 2> traced.err; echo "traced rc=$?"
SIGMATOP_MODE=aggregate SIGMATOP_GPU_WQE=off SIGMATOP_GPU_STATS=1 SIGMATOP_RECORD=$B/rec_fwd SIGMATOP_SOCKET_DIR=$B/sock \
  LD_PRELOAD=$PRE $T ./gpu_workload test list_fwd.txt > fwd.out 2> fwd.err; echo "forward-only rc=$?"
cat base.out; cat traced.err fwd.err
diff base.out traced.out && echo "SAME stdout traced"
diff base.out fwd.out && echo "SAME stdout forward-only"
sed 's/ opmod=0x[0-9a-f]*//; s/ signaled=[01]//' wlog | sort -s -t' ' -k2,2 > wlog.sorted
sort -s -t' ' -k2,2 list_traced.txt > list.sorted
cmp wlog.sorted list.sorted && echo "SAME WQEs: $(wc -l < list.sorted) recovered exactly"
cp -r base.out traced.out fwd.out traced.err fwd.err wlog list_traced.txt rec rec_fwd "$OUTDIR/" 2>/dev/null
echo "== bench"
for m in ${MODES:-bench-host bench}; do
for r in $(seq "$ROUNDS"); do
  $T ./gpu_workload $m > "$OUTDIR/${m}_base_$r.txt" 2>&1
  SIGMATOP_GPU_WQE=off SIGMATOP_SOCKET_DIR=$B/sock LD_PRELOAD=$PRE $T ./gpu_workload $m > "$OUTDIR/${m}_fwd_$r.txt" 2>&1
  SIGMATOP_RECORD=$B/rb$m$r SIGMATOP_GPU_STATS=1 SIGMATOP_SOCKET_DIR=$B/sock LD_PRELOAD=$PRE $T ./gpu_workload $m > "$OUTDIR/${m}_rec_$r.txt" 2>&1
  SIGMATOP_WQE_COPY=batch SIGMATOP_RECORD=$B/rc$m$r SIGMATOP_GPU_STATS=1 SIGMATOP_SOCKET_DIR=$B/sock LD_PRELOAD=$PRE $T ./gpu_workload $m > "$OUTDIR/${m}_recb_$r.txt" 2>&1
done
done
cd "$OUTDIR" && tar czf bench.tgz *bench*_*.txt && rm -f *bench*_*.txt && tar czf correctness.tgz base.out traced.out fwd.out traced.err fwd.err wlog list_traced.txt rec rec_fwd && rm -rf base.out traced.out fwd.out traced.err fwd.err wlog list_traced.txt rec rec_fwd
