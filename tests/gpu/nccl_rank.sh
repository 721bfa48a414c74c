#!/usr/bin/env bash
# One NCCL rank, started by mpirun from tests/gpu/nccl_device.sh:
#   mpirun -np N bash tests/gpu/nccl_rank.sh RUNDIR PROG ARGS...
# Sources RUNDIR/env (NCCL's and the NIC's environment, TRACE, PRE, NCT_PLUGIN, NCT_UTS), makes
# this rank its own NCCL node (NCCL_HOSTID=softhost$RANK: NCCL then talks to the other ranks of
# the one GPU over NET/IB, reference §14) and, with NCT_UTS=1, its own host for sigmatop too (a
# private UTS namespace whose host name is softhost$RANK, so the node matrix has one row per
# rank), writes its pid to RUNDIR/pid.RANK (leftovers are ended by these pids, never by name) and
# execs PROG with stdout/stderr in RUNDIR/out.RANK / err.RANK.
#   TRACE=base                  untraced
#   TRACE=aggregate|simple|full LD_PRELOAD=sigmatop in that mode, recording to RUNDIR/rec; with
#                               NCT_PLUGIN=1 also NCCL's profiler plugin (NCCL_PROFILER_PLUGIN)
#   TRACE=inherit               what the environment has (`sigmatop run` around mpirun set it)
set -u
run=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
# shellcheck disable=SC1091
. "$run/env"
echo $$ >"$run/pid.$rank"
export NCCL_HOSTID=softhost$rank NCCL_TESTS_DEVICE=0
# The NIC holds this rank's sends (issue 36 item 6): NCT_STALL_RANK's TESTNIC_STALL=NCT_STALL.
if [ -n "${NCT_STALL:-}" ] && [ "${NCT_STALL_RANK:-}" = "$rank" ]; then
  export TESTNIC_STALL=$NCT_STALL
fi
case "$TRACE" in
base | inherit) ;;
*)
  export LD_PRELOAD=$PRE SIGMATOP_MODE=$TRACE SIGMATOP_RECORD=$run/rec SIGMATOP_SOCKET_DIR=$run/sock
  mkdir -p -m 700 "$run/sock"
  [ "${NCT_PLUGIN:-0}" = 1 ] && export NCCL_PROFILER_PLUGIN=$PRE
  ;;
esac
if [ "${NCT_UTS:-0}" = 1 ]; then
  # unshare and bash exec in place: the pid written above stays the program's.
  export NCT_RUN=$run NCT_RANK=$rank
  exec unshare --uts bash -c 'echo "$1" >/proc/sys/kernel/hostname && shift && exec "$@" >"$NCT_RUN/out.$NCT_RANK" 2>"$NCT_RUN/err.$NCT_RANK"' \
    nccl-rank "softhost$rank" "$@"
fi
exec "$@" >"$run/out.$rank" 2>"$run/err.$rank"
