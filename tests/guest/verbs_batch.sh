#!/bin/bash
# Runs inside the soft-RoCE guest (tests/verbs_guest.rs boots it with virtme-ng): sets up rxe0 on
# loopback and rxe1 on a dummy netdev, then runs each real rdma-core / perftest / librdmacm /
# libfabric / UCX workload once untraced ("none") and once per sigmatop mode, server and client,
# each writing its stdout, stderr and exit status (and the traced runs their record) under
# OUT/<workload>/<mode>/. The host side asserts on them.
#
# usage: verbs_batch.sh OUT PRELOAD "MODES" "WORKLOADS"   (MODES e.g. "none aggregate simple full")
set -u
OUT=$1
PRE=$2
MODES=$3
WORKLOADS=${4:-"rc_pingpong read_bw send_lat put_bw write_bw rping fi_pingpong am_lat io_demo"}
SOCK=/tmp/sigmatop-sock
mkdir -p "$OUT"
mkdir -m 700 -p "$SOCK"
exec > >(tee "$OUT/batch.log") 2>&1

modprobe rdma_rxe || exit 90
modprobe ib_uverbs || exit 90
ip link set lo up
ip link add rxnet0 type dummy
ip addr add 10.77.0.1/24 dev rxnet0
ip link set rxnet0 up
# One rxe device at a time: rdma_cm resolves a local address through the loopback device, so an
# rxe on lo next to one on the dummy netdev would take (and reject) the rdma_cm connections.
# Phase "lo": rxe0 on loopback (plain verbs tools, GID index 1 = ::ffff:127.0.0.1); phase "cm":
# rxe1 on the dummy netdev (everything that uses rdma_cm).
PHASE=none
phase() {
    [ "$PHASE" = "$1" ] && return 0
    rdma link delete rxe0 2>/dev/null
    rdma link delete rxe1 2>/dev/null
    case $1 in
    lo) rdma link add rxe0 type rxe netdev lo || exit 91 ;;
    cm) rdma link add rxe1 type rxe netdev rxnet0 || exit 91 ;;
    esac
    PHASE=$1
    sleep 0.5
}
A=10.77.0.1
L=127.0.0.1

# Waits until something listens on TCP port $1 or an rdma_cm id listens on it ($2 s at most).
wait_listen() {
    local hex i
    hex=$(printf ':%04X ' "$1")
    for ((i = 0; i < $2 * 20; i++)); do
        if awk 'NR>1 {print $2" "$4}' /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "${hex}0A"; then
            return 0
        fi
        if rdma resource show cm_id 2>/dev/null | grep LISTEN | grep -Eq ":$1( |$)"; then
            return 0
        fi
        sleep 0.05
    done
    echo "wait_listen: nothing listens on $1"
    return 1
}

PORT=20000
# run NAME MODE KILL_SERVER "server command" "client command" [ENV...]
run() {
    local name=$1 mode=$2 kill_server=$3 srv=$4 cli=$5
    shift 5
    local dir="$OUT/$name/$mode"
    rm -rf "$dir"
    mkdir -p "$dir"
    local envs=("$@")
    if [ "$mode" != none ]; then
        envs+=(LD_PRELOAD="$PRE" SIGMATOP_MODE="$mode" SIGMATOP_RECORD="$dir/rec" SIGMATOP_SOCKET_DIR="$SOCK")
    fi
    PORT=$((PORT + 1))
    local p=$PORT
    srv=${srv//@PORT@/$p}
    cli=${cli//@PORT@/$p}
    local t0=$(date +%s.%N)
    (env "${envs[@]}" timeout -k 5 60 $srv >"$dir/server.out" 2>"$dir/server.err" </dev/null &
     echo $! >"$dir/server.pid"
     wait $!
     echo $? >"$dir/server.rc") &
    local spid=$!
    wait_listen "$p" 20
    env "${envs[@]}" timeout -k 5 45 $cli >"$dir/client.out" 2>"$dir/client.err" </dev/null
    echo $? >"$dir/client.rc"
    if [ "$kill_server" = kill ]; then
        sleep 0.5
        kill -TERM "$(cat "$dir/server.pid")" 2>/dev/null
    fi
    local i
    for ((i = 0; i < 150; i++)); do
        kill -0 $spid 2>/dev/null || break
        sleep 0.1
    done
    kill -0 $spid 2>/dev/null && kill -KILL "$(cat "$dir/server.pid")" 2>/dev/null
    wait $spid 2>/dev/null
    echo "$name $mode client=$(cat "$dir/client.rc") server=$(cat "$dir/server.rc" 2>/dev/null) $(echo "$(date +%s.%N) - $t0" | bc)s"
}

workload() {
    local w=$1 m=$2
    case $w in
    rc_pingpong | read_bw | send_lat | put_bw) phase lo ;;
    *) phase cm ;;
    esac
    case $w in
    rc_pingpong) run $w $m wait "ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 4096 -p @PORT@" \
        "ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 4096 -p @PORT@ $L" ;;
    write_bw) run $w $m wait "ib_write_bw -d rxe1 -R -n 200 -s 16384 -F -p @PORT@" \
        "ib_write_bw -d rxe1 -R -n 200 -s 16384 -F -p @PORT@ $A" ;;
    read_bw) run $w $m wait "ib_read_bw -d rxe0 -x 1 -n 200 -s 4096 -F -p @PORT@" \
        "ib_read_bw -d rxe0 -x 1 -n 200 -s 4096 -F -p @PORT@ $L" ;;
    send_lat) run $w $m wait "ib_send_lat -d rxe0 -x 1 -n 200 -F -p @PORT@" \
        "ib_send_lat -d rxe0 -x 1 -n 200 -F -p @PORT@ $L" ;;
    rping) run $w $m wait "rping -s -a $A -C 5 -p @PORT@" "rping -c -a $A -C 5 -v -p @PORT@" ;;
    # Every layer: the libfabric layer hands verbs back its own tables when an endpoint closes.
    fi_pingpong) run $w $m wait "fi_pingpong -p verbs -e msg -B @PORT@ -I 100 -S 4096" \
        "fi_pingpong -p verbs -e msg -P @PORT@ -I 100 -S 4096 $A" ;;
    put_bw) run $w $m wait "ucx_perftest -p @PORT@ -t put_bw -d rxe0:1 -x rc_verbs -n 1000 -s 64 -w 0" \
        "ucx_perftest $L -p @PORT@ -t put_bw -d rxe0:1 -x rc_verbs -n 1000 -s 64 -w 0" ;;
    am_lat) run $w $m wait "ucx_perftest -p @PORT@ -t am_lat -d rxe1:1 -x rc_verbs -n 200 -s 64 -w 0" \
        "ucx_perftest $L -p @PORT@ -t am_lat -d rxe1:1 -x rc_verbs -n 200 -s 64 -w 0" ;;
    io_demo) run $w $m kill "io_demo -p @PORT@ -i 20" "io_demo -p @PORT@ -i 20 $A" \
        UCX_TLS=rc_verbs,self UCX_NET_DEVICES=rxe1:1 ;;
    *) echo "unknown workload $w" ;;
    esac
}

for w in $WORKLOADS; do
    for m in $MODES; do
        workload "$w" "$m"
    done
done
echo BATCH_DONE
