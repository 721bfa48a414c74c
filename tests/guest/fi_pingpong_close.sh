#!/bin/bash
# Runs inside the soft-RoCE guest: fi_pingpong over libfabric's verbs provider (msg endpoints,
# rdma_cm on rxe1 over a dummy netdev, as verbs_batch.sh sets it up), once untraced and once
# traced with every layer in simple mode. Regression check for the libfabric layer breaking the
# verbs endpoint close (vrb_close_free_ep free()s ep->msg, which must be the provider's own table).
# Writes OUT/<mode>/{server,client}.{out,err,rc} and OUT/<mode>/rec. tests/guest/verbs_batch.sh
# runs it (workload fi_close) with rxe1 already set up; on its own it sets rxe1 up itself.
#
# usage: fi_pingpong_close.sh OUT PRELOAD [ITERS]
set -u
OUT=$1
PRE=$2
ITERS=${3:-200}
SOCK=/tmp/sigmatop-sock
mkdir -p "$OUT"
mkdir -m 700 -p "$SOCK"
exec > >(tee "$OUT/close.log") 2>&1

if ! rdma link show 2>/dev/null | grep -q "^link rxe1/"; then
    modprobe rdma_rxe || exit 90
    modprobe ib_uverbs || exit 90
    ip link set lo up
    ip link add rxnet0 type dummy
    ip addr add 10.77.0.1/24 dev rxnet0
    ip link set rxnet0 up
    rdma link add rxe1 type rxe netdev rxnet0 || exit 91
    # Usable once its port is ACTIVE with the IPv4 address's GID (filled in from netdev events).
    for ((i = 0; i < 600; i++)); do
        grep -qs ACTIVE /sys/class/infiniband/rxe1/ports/1/state &&
            grep -qsx 0000:0000:0000:0000:0000:ffff:0a4d:0001 /sys/class/infiniband/rxe1/ports/1/gids/* && break
        sleep 0.05
    done
    grep -qs ACTIVE /sys/class/infiniband/rxe1/ports/1/state || { echo "rxe1 not ACTIVE after 30 s"; exit 92; }
fi
A=10.77.0.1
PORT=21000
for mode in none simple; do
    d="$OUT/$mode"
    rm -rf "$d"
    mkdir -p "$d"
    envs=()
    if [ "$mode" != none ]; then
        envs=(LD_PRELOAD="$PRE" SIGMATOP_MODE="$mode" SIGMATOP_RECORD="$d/rec" SIGMATOP_SOCKET_DIR="$SOCK")
    fi
    PORT=$((PORT + 1))
    (env "${envs[@]}" timeout -k 5 240 fi_pingpong -p verbs -e msg -B $PORT -I "$ITERS" -S 4096 \
        >"$d/server.out" 2>"$d/server.err" </dev/null
     echo $? >"$d/server.rc") &
    spid=$!
    # The server listens on TCP first (its control channel, util/pingpong.c pp_ctrl_init), on
    # rdma_cm only once the client is connected there.
    hex=$(printf ':%04X ' $PORT)
    for ((i = 0; i < 1200; i++)); do
        awk 'NR>1 {print $2" "$4}' /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "${hex}0A" && break
        sleep 0.05
    done
    env "${envs[@]}" timeout -k 5 180 fi_pingpong -p verbs -e msg -P $PORT -I "$ITERS" -S 4096 $A \
        >"$d/client.out" 2>"$d/client.err" </dev/null
    echo $? >"$d/client.rc"
    wait $spid
    echo "$mode client=$(cat "$d/client.rc") server=$(cat "$d/server.rc")"
done
echo CLOSE_DONE
