#!/usr/bin/env bash
# One rank of tests/gpu/nccl_gin (NCCL's device API, GIN), started by mpirun from
# tests/gpu/gin_device.sh:
#   mpirun -np N bash tests/gpu/gin_rank.sh RUNDIR PROG ARGS...
# Sources RUNDIR/env (NCCL's and the NIC's environment, TRACE, PRE, HARNESS), makes this rank its
# own NCCL node (NCCL_HOSTID=softhost$RANK, reference §14) and its own host for sigmatop (a UTS
# namespace named softhost$RANK), writes its pid to RUNDIR/pid.RANK (leftovers are ended by these
# pids, never by name) and execs PROG with stdout/stderr in RUNDIR/out.RANK / err.RANK.
#   TRACE=base    untraced; LD_PRELOAD=HARNESS when set (GDAKI: lets DOCA GPUNetIO's IoMemory
#                 registration of the NIC's RAM UAR through, tests/gpu/nvshmem_harness.c)
#   TRACE=traced  sigmatop first (simple mode, recording to RUNDIR/rec, recovered GPU WQEs in
#                 RUNDIR/wqe.RANK.log, GPU stats line), NCCL's profiler plugin = sigmatop, then
#                 HARNESS when set (sigmatop's dlsym comes first and bypasses it)
set -u
run=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
# shellcheck disable=SC1091
. "$run/env"
echo $$ >"$run/pid.$rank"
export NCCL_HOSTID=softhost$rank
case "$TRACE" in
base)
  [ -n "${HARNESS:-}" ] && export LD_PRELOAD=$HARNESS
  ;;
traced)
  export LD_PRELOAD=$PRE${HARNESS:+:$HARNESS} SIGMATOP_MODE=simple SIGMATOP_RECORD=$run/rec \
    SIGMATOP_SOCKET_DIR=$run/sock SIGMATOP_WQE_LOG=$run/wqe.$rank.log SIGMATOP_GPU_STATS=1 \
    NCCL_PROFILER_PLUGIN=$PRE
  mkdir -p -m 700 "$run/sock"
  ;;
*)
  echo "gin_rank.sh: TRACE must be base or traced, got '$TRACE'" >&2
  exit 64
  ;;
esac
export GIN_RUN=$run GIN_RANK=$rank
# unshare and bash exec in place: the pid written above stays the program's.
exec unshare --uts bash -c 'echo "$1" >/proc/sys/kernel/hostname && shift && exec "$@" >"$GIN_RUN/out.$GIN_RANK" 2>"$GIN_RUN/err.$GIN_RANK"' \
  gin-rank "softhost$rank" "$@"
