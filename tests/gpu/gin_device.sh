#!/usr/bin/env bash
# NCCL's GPU-initiated networking (GIN, NCCL 2.28.9's device API) over the software mlx5 NIC on
# the one GPU (issue 28): tests/gpu/nccl_gin (kernels put + signal between ranks, every byte
# checked by the program) with 2 and 4 ranks, each its own NCCL node (NCCL_HOSTID) and host (UTS
# namespace softhostN), NET/IB on the software NIC, P2P and SHM off, with NCCL's proxy GIN type
# (NCCL_GIN_TYPE=2: the kernel hands descriptors to a CPU thread that posts verbs) and GDAKI
# (NCCL_GIN_TYPE=3: the kernel writes mlx5 WQEs and rings the doorbell itself, DOCA GPUNetIO),
# untraced and under sigmatop; checked by tests/gpu/gin_check.py. On the GPU machine, as root:
#   bash tests/gpu/gin_device.sh OUTDIR
# Inputs (environment; defaults in brackets):
#   GIN_BIN      the nccl_gin binary; built from tests/gpu/nccl_gin.cu with nvcc when missing or
#                when it cannot start [OUTDIR/bin/nccl_gin]
#   PRE, SIGMATOP, TESTNIC_LIB  [target/release/libsigmatop_preload.so, .../sigmatop,
#                target/testnic/lib (built if missing)]
#   GIN_RUNS     which runs, in order [proxy.np2.base proxy.np2.traced proxy.np4.base
#                proxy.np4.traced gdaki.np2.base gdaki.np2.traced gdaki.np4.base gdaki.np4.traced]
#                (NAME = TYPE.npN.TRACE; TYPE proxy, gdaki (DOCA's NIC handler left to AUTO),
#                gdakicpu, gdakigpu or gdakibf: GDAKI with NCCL_GIN_GDAKI_NIC_HANDLER 1 (DOCA's CPU
#                proxy), 2 (GPU doorbells) or 3 (GPU BlueFlame doorbells)); a traced run is skipped
#                when its base run failed
#   GIN_ERROR_QUERY_SEC  NCCL_GIN_ERROR_QUERY_SEC: NCCL's GIN QP error query (devx QUERY_QP) at
#                most this often [1, so that every run queries; NCCL's default is 10]
#   GIN_ARGS     nccl_gin's arguments [-s 65536 -n 8 -t 40]
#   GIN_TIMEOUT (s per run, 90), GIN_BUDGET (s for all runs, 280)
# Results: OUTDIR/summary.txt, OUTDIR/check.txt, OUTDIR/probe.txt (what the wheel ships),
# OUTDIR/runs/NAME/ (program output, NCCL and NIC logs, sigmatop's WQE logs, JSON and report).
set -u
OUTDIR=${1:?usage: gin_device.sh OUTDIR}
ROOT=$PWD
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
W=$(mktemp -d /tmp/gin-gpu.XXXXXX)
exec > >(tee "$OUTDIR/summary.txt") 2>&1
START=$(date +%s)
BUDGET=${GIN_BUDGET:-280}
LIMIT=${GIN_TIMEOUT:-90}
PRE=${PRE:-$ROOT/target/release/libsigmatop_preload.so}
SIGMATOP=${SIGMATOP:-$ROOT/target/release/sigmatop}
TESTNIC_LIB=${TESTNIC_LIB:-$ROOT/target/testnic/lib}
GIN_BIN=${GIN_BIN:-$OUTDIR/bin/nccl_gin}
RUNS=${GIN_RUNS:-proxy.np2.base proxy.np2.traced proxy.np4.base proxy.np4.traced gdaki.np2.base gdaki.np2.traced gdaki.np4.base gdaki.np4.traced}
ARGS=${GIN_ARGS:--s 65536 -n 8 -t 40}
FAILED=0
elapsed() { echo $(($(date +%s) - START)); }

echo "== machine"
nvidia-smi -L
nvcc --version | tail -1
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
echo "NCCL: $NCCL_DIR"
grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\)' "$NCCL_DIR/include/nccl.h" | tr '\n' ' '
echo

# ---- what the wheel ships of GIN -----------------------------------------------------------------
{
  echo "== include/"
  (cd "$NCCL_DIR/include" && find . -type f | sort)
  echo "== device-API and window symbols (nm -D)"
  nm -D --defined-only "$NCCL_DIR/lib/libnccl.so.2" | grep -E 'ncclDevComm|ncclCommWindow|ncclMemAlloc|ncclMemFree|Gin' || true
  echo "== GIN strings"
  for s in GIN_IB_GDAKI GIN_IB_PROXY NCCL_GIN_TYPE NCCL_GIN_ENABLE NCCL_GIN_GDAKI_NIC_HANDLER \
    'No network devices that support GDAKI found' doca_gpu_verbs_create_qp_group_hl DOCA_GPUNETIO_LOG; do
    echo "$(strings "$NCCL_DIR/lib/libnccl.so.2" | grep -c -F "$s") $s"
  done
} >"$OUTDIR/probe.txt" 2>&1
grep -E '^[0-9]+ ' "$OUTDIR/probe.txt" | tr '\n' ';'
echo

# ---- the NIC, the harness, the program ---------------------------------------------------------
if [ ! -e "$TESTNIC_LIB/libmlx5.so.1" ]; then
  TESTNIC_BUILD_DIR=$W/testnic bash "$ROOT/scripts/with-testnic.sh" true || exit 1
  TESTNIC_LIB=$W/testnic/lib
fi
HARNESS=$W/libnvshmem_harness.so
gcc -O2 -Wall -shared -fPIC -o "$HARNESS" "$HERE/nvshmem_harness.c" -ldl || exit 1
H=$W/ncclhome
mkdir -p "$H/lib"
ln -sfn "$NCCL_DIR/include" "$H/include"
ln -sf "$NCCL_DIR/lib/libnccl.so.2" "$H/lib/libnccl.so"
if ! LD_LIBRARY_PATH=$NCCL_DIR/lib "$GIN_BIN" -s 3 >/dev/null 2>&1 </dev/null; then
  # A binary that starts answers -s 3 with its usage line (exit 64); anything else: build.
  LD_LIBRARY_PATH=$NCCL_DIR/lib "$GIN_BIN" -s 3 </dev/null 2>&1 | grep -q 'multiple of 4' || {
    echo "== build nccl_gin (t=$(elapsed)s)"
    mkdir -p "$(dirname "$GIN_BIN")"
    nvcc -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I"$H/include" \
      -I/usr/lib/x86_64-linux-gnu/openmpi/include "$HERE/nccl_gin.cu" -L"$H/lib" -lnccl \
      -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi -o "$GIN_BIN" >"$OUTDIR/build.log" 2>&1 || {
      tail -20 "$OUTDIR/build.log"
      echo "BUILD FAILED"
      exit 1
    }
    echo "built in $(elapsed)s"
  }
fi

# ---- one run -------------------------------------------------------------------------------------
# run_one TYPE.npN.TRACE
run_one() {
  local name=$1 type np trace
  type=${name%%.*}
  np=${name#*.np}
  np=${np%%.*}
  trace=${name##*.}
  local d=$W/$name
  if [ "$(elapsed)" -gt "$BUDGET" ]; then
    echo "run $name SKIPPED (time budget of ${BUDGET}s spent)"
    FAILED=1
    return 1
  fi
  if [ "$trace" = traced ] && [ "$(cat "$W/$type.np$np.base/rc" 2>/dev/null)" != 0 ]; then
    echo "run $name SKIPPED (its untraced run failed)"
    return 1
  fi
  mkdir -p "$d/nic"
  local gin harness="" extra=""
  case "$type" in
  proxy) gin=2 ;;
  gdaki) gin=3 harness=$HARNESS ;;
  gdakicpu) gin=3 harness=$HARNESS extra="export NCCL_GIN_GDAKI_NIC_HANDLER=1" ;;
  gdakigpu) gin=3 harness=$HARNESS extra="export NCCL_GIN_GDAKI_NIC_HANDLER=2" ;;
  gdakibf) gin=3 harness=$HARNESS extra="export NCCL_GIN_GDAKI_NIC_HANDLER=3" ;;
  *) echo "run $name: unknown type $type"; FAILED=1; return 1 ;;
  esac
  cat >"$d/env" <<EOF
export LD_LIBRARY_PATH=$TESTNIC_LIB:$NCCL_DIR/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export NCCL_NET=IB NCCL_IB_HCA=mlx5_0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_GDR_LEVEL=SYS
export NCCL_GIN_TYPE=$gin NCCL_GIN_NCONTEXTS=1 NCCL_GIN_ERROR_QUERY_SEC=${GIN_ERROR_QUERY_SEC:-1}
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV,ALLOC NCCL_DEBUG_FILE=$d/nccl.%h.%p.log
export DOCA_GPUNETIO_LOG=6
export TESTNIC_LOG=$d/nic TESTNIC_SPIN=1
export TRACE=$trace PRE=$PRE HARNESS=$harness
$extra
EOF
  echo "$ARGS" >"$d/args"
  # nccl_check.py's check_traced (which gin_check.py reuses): no nccl-tests collectives to check.
  echo 0 >"$d/plugin"
  echo "$np" >"$d/np"
  local t0 rc
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout -k 5 "$LIMIT" bash "$ROOT/tests/testnic/sysfs-ns.sh" \
    mpirun --allow-run-as-root -np "$np" --bind-to none --mca pml ob1 --mca btl self,vader \
    --mca osc '^ucx' --mca coll '^hcoll' \
    bash "$HERE/gin_rank.sh" "$d" "$GIN_BIN" $ARGS >"$d/mpirun.log" 2>&1
  rc=$?
  for p in "$d"/pid.*; do
    [ -e "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
  done
  echo "$rc" >"$d/rc"
  echo "run $name rc=$rc secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') t=$(elapsed)s"
  grep -h 'nccl_gin: rank' "$d"/out.* 2>/dev/null | sed 's/^/    /'
  grep -h -m3 'Assigned GIN\|GIN type\|GPU Direct RDMA \(Enabled\|Disabled\) for HCA' "$d"/nccl.*.log 2>/dev/null | sed 's/.*NCCL INFO /    nccl: /' | sort -u
  if [ "$type" != proxy ]; then
    # Which NIC handler DOCA chose (AUTO takes the CPU proxy when cudaHostRegister(IoMemory) of
    # the UAR fails), and NCCL's QP error queries as the NIC answered them.
    echo "    doca: $(cat "$d"/err.* 2>/dev/null | grep -c 'Enabling CPU proxy mode') QPs in CPU proxy mode;" \
      "$(cat "$d"/err.* 2>/dev/null | grep -c 'Failed to query QP') failed QP queries;" \
      "$(cat "$d"/err.* 2>/dev/null | grep -c 'Fallback to legacy nvidia-peermem') dma-buf umem fallbacks"
    grep -h 'QUERY_QP answered\|nvshmem_harness: pid' "$d"/err.* 2>/dev/null | sed 's/^/    /'
  fi
  if [ "$rc" != 0 ]; then
    FAILED=1
    grep -h 'WARN\|ERR\|refus\|TIMEOUT\|failed' "$d"/nccl.*.log "$d"/err.* 2>/dev/null | sort | uniq -c | sort -rn | head -12 | sed 's/^/    /'
    tail -4 "$d/mpirun.log" | sed 's/^/    mpirun: /'
  fi
  if [ -d "$d/rec" ]; then
    "$SIGMATOP" export "$d/rec" --json "$d/agg.json" >"$d/export.log" 2>&1 || echo "    export of $name failed: $(tail -2 "$d/export.log")"
    "$SIGMATOP" report "$d/rec" >"$d/report.txt" 2>&1
    tar -C "$d" -czf "$d/rec.tgz" rec
  fi
  return "$rc"
}

echo "== runs: $RUNS; args $ARGS (t=$(elapsed)s)"
for r in $RUNS; do run_one "$r"; done

echo "== check (t=$(elapsed)s)"
python3 "$HERE/gin_check.py" "$W" | tee "$OUTDIR/check.txt"
[ "${PIPESTATUS[0]}" = 0 ] || FAILED=1

# ---- what comes back -----------------------------------------------------------------------------
for d in "$W"/*.np*; do
  [ -d "$d" ] || continue
  o=$OUTDIR/runs/$(basename "$d")
  mkdir -p "$o"
  for f in rc np args env mpirun.log out.* err.* wqe.*.log agg.json report.txt export.log rec.tgz; do
    [ -e "$d/$f" ] && cp "$d/$f" "$o/"
  done
  cat "$d"/nccl.*.log 2>/dev/null | gzip >"$o/nccl.log.gz"
  tar -C "$d" -czf "$o/nic.tgz" nic
done
echo "== done (t=$(elapsed)s) FAILED=$FAILED"
exit "$FAILED"
