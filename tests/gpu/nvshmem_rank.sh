#!/usr/bin/env bash
# One NVSHMEM PE, started by mpirun from tests/gpu/nvshmem_device.sh:
#   mpirun -np 2 bash tests/gpu/nvshmem_rank.sh RUNDIR PROG ARGS...
# Sources RUNDIR/env (the run's settings: NVSHMEM's and the NIC's environment, TRACE, PRE,
# HARNESS), sets this PE's preload, writes its pid to RUNDIR/pid.RANK (the script ends leftovers
# by these pids, never by name) and runs PROG with stdout/stderr in RUNDIR/out.RANK / err.RANK.
#   TRACE=base    LD_PRELOAD=HARNESS (lets NVSHMEM's IoMemory registration of the NIC's RAM UAR
#                 through; tests/gpu/nvshmem_harness.c)
#   TRACE=traced  sigmatop first, simple mode, recording to RUNDIR/rec, WQE log RUNDIR/wqe.RANK.log
#   TRACE=fwd     forward only (SIGMATOP_GPU_WQE=off), aggregate mode, no record
#   TRACE=rec     forward + WQE recovery, a copy per doorbell, recording
#   TRACE=recb    forward + WQE recovery, a copy per batch, recording
#   TRACE=reci    as rec, with the preload PRE_INLINE the device script wrote as PRE (the copy on
#                 the poller thread, before issue 41's copier)
set -u
run=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
# shellcheck disable=SC1091
. "$run/env"
echo $$ >"$run/pid.$rank"
export NVT_RANK=$rank
# NVT_HOSTS=1: this PE on simulated host rank+1 (docs/TESTNIC.md, TESTNIC_HOST).
if [ "${NVT_HOSTS:-0}" = 1 ]; then
  export TESTNIC_HOST=$((rank + 1))
fi
case "$TRACE" in
base) export LD_PRELOAD=$HARNESS ;;
*)
  export LD_PRELOAD=$PRE:$HARNESS SIGMATOP_SOCKET_DIR=$run/sock SIGMATOP_GPU_STATS=1
  mkdir -p -m 700 "$run/sock"
  ;;
esac
case "$TRACE" in
traced) export SIGMATOP_MODE=simple SIGMATOP_RECORD=$run/rec SIGMATOP_WQE_LOG=$run/wqe.$rank.log ;;
fwd) export SIGMATOP_MODE=aggregate SIGMATOP_GPU_WQE=off ;;
rec | reci) export SIGMATOP_RECORD=$run/rec ;;
recb) export SIGMATOP_RECORD=$run/rec SIGMATOP_WQE_COPY=batch ;;
esac
exec "$@" >"$run/out.$rank" 2>"$run/err.$rank"
