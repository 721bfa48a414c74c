#!/bin/bash
# Runs inside the soft-RoCE guest: ib_send_lat and ib_write_bw (both sides under the same mode)
# untraced and in each sigmatop mode, alternated within each repetition, recording to tmpfs.
# Writes OUT/bench.csv: bench,mode,rep,value (send_lat: t_avg usec; write_bw: BW average MB/s).
# usage: verbs_bench.sh OUT PRELOAD REPS
set -u
OUT=$1
PRE=$2
REPS=${3:-5}
mkdir -p "$OUT"
mkdir -m 700 -p /tmp/sigmatop-sock
modprobe rdma_rxe && modprobe ib_uverbs || exit 90
ip link set lo up
rdma link add rxe0 type rxe netdev lo || exit 91
echo "bench,mode,rep,value" >"$OUT/bench.csv"
PORT=21000
one() { # bench mode rep cmd...
    local b=$1 m=$2 rep=$3
    shift 3
    local envs=()
    rm -rf /tmp/benchrec
    [ "$m" != none ] && envs=(LD_PRELOAD="$PRE" SIGMATOP_MODE="$m" SIGMATOP_RECORD=/tmp/benchrec SIGMATOP_SOCKET_DIR=/tmp/sigmatop-sock)
    PORT=$((PORT + 1))
    env "${envs[@]}" timeout -k 5 120 "$@" -p $PORT >/tmp/srv.out 2>&1 &
    local s=$!
    local hex i
    hex=$(printf ':%04X ' $PORT)
    for ((i = 0; i < 400; i++)); do
        awk 'NR>1 {print $2" "$4}' /proc/net/tcp | grep -q "${hex}0A" && break
        sleep 0.05
    done
    env "${envs[@]}" timeout -k 5 120 "$@" -p $PORT 127.0.0.1 >/tmp/cli.out 2>&1
    wait $s
    local v
    if [ "$b" = send_lat ]; then
        # columns: #bytes #iterations t_min t_max t_typical t_avg ...
        v=$(awk '/#bytes/ {getline; print $6; exit}' /tmp/cli.out)
    else
        # columns: #bytes #iterations BW_peak BW_average MsgRate
        v=$(awk '/#bytes/ {getline; print $4; exit}' /tmp/cli.out)
    fi
    echo "$b,$m,$rep,$v" | tee -a "$OUT/bench.csv"
}
for ((rep = 1; rep <= REPS; rep++)); do
    for m in none aggregate simple full; do
        one send_lat $m $rep ib_send_lat -d rxe0 -x 1 -n 2000 -F
        one write_bw $m $rep ib_write_bw -d rxe0 -x 1 -n 2000 -s 16384 -F
    done
done
echo BENCH_DONE
